//! Scripted fake NameServer and broker peers shared by the mock tests.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use rmq_core::wire::{
    CommandHeader, CommandRepr, FieldStr, FrameReader, ResponseCode, SerializeType, version,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Clone, Debug)]
pub struct Seen {
    pub code: i32,
    pub ext: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn get(&self, k: &str) -> Option<&str> {
        self.ext
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }
}

pub type Reply = (i32, Vec<(String, String)>, Vec<u8>);
pub type Handler = Arc<dyn Fn(&Seen) -> Option<Reply> + Send + Sync>;

pub fn text(f: FieldStr<'_>) -> String {
    if let Some(s) = f.as_str() {
        return s.to_owned();
    }
    let mut buf = vec![0u8; f.unescaped_len().unwrap_or(0)];
    f.unescape_into(&mut buf).unwrap_or("").to_owned()
}

/// A fake peer: records every request and answers with `handler` (None = no answer).
pub async fn peer(handler: Handler) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let (handler, log) = (handler.clone(), log.clone());
            tokio::spawn(async move {
                let mut reader = FrameReader::new(vec![0u8; 1 << 20]);
                let mut buf = vec![0u8; 65536];
                loop {
                    let n = match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let mut data = &buf[..n];
                    while !data.is_empty() {
                        let used = reader.feed(data).expect("valid frame from the client");
                        data = &data[used..];
                        let Some(f) = reader.take_frame() else {
                            continue;
                        };
                        let h = CommandHeader::parse(&f).expect("valid header");
                        let req = Seen {
                            code: h.code(),
                            ext: h.ext_iter().map(|(k, v)| (text(k), text(v))).collect(),
                            body: f.body().to_vec(),
                        };
                        let (opaque, oneway) = (h.opaque(), h.is_oneway());
                        log.lock().unwrap().push(req.clone());
                        if oneway {
                            continue;
                        }
                        let Some((code, ext, body)) = handler(&req) else {
                            continue;
                        };
                        let pairs: Vec<(&str, &str)> =
                            ext.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                        let mut cmd = CommandRepr::response(
                            ResponseCode(code),
                            opaque,
                            version::V5_3_3,
                            Some(&pairs[..]),
                        );
                        if code != 0 {
                            cmd.remark = Some("scripted failure");
                        }
                        let mut out = vec![0u8; cmd.frame_len(SerializeType::JSON, body.len())];
                        let k = cmd
                            .emit_frame_prefix_and_header(SerializeType::JSON, body.len(), &mut out)
                            .unwrap();
                        out.truncate(k);
                        out.extend_from_slice(&body);
                        if s.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, seen)
}

pub fn route_json(brokers: &[(&str, &str, i32)]) -> Vec<u8> {
    let bd: Vec<String> = brokers
        .iter()
        .map(|(n, a, _)| {
            format!(r#"{{"brokerAddrs":{{"0":"{a}"}},"brokerName":"{n}","cluster":"c"}}"#)
        })
        .collect();
    let qd: Vec<String> = brokers
        .iter()
        .map(|(n, _, q)| {
            format!(
                r#"{{"brokerName":"{n}","perm":6,"readQueueNums":{q},"topicSysFlag":0,"writeQueueNums":{q}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"brokerDatas":[{}],"filterServerTable":{{}},"queueDatas":[{}]}}"#,
        bd.join(","),
        qd.join(",")
    )
    .into_bytes()
}

pub const SEND_V2: i32 = 310;
pub const ROUTE: i32 = 105;
pub const HEART_BEAT: i32 = 34;
pub const UNREGISTER: i32 = 35;

/// A broker answering sends with `code` (0 = stored).
pub fn broker(code: i32) -> Handler {
    let offset = Arc::new(Mutex::new(0i64));
    Arc::new(move |r: &Seen| match r.code {
        SEND_V2 if code == 0 => {
            let mut o = offset.lock().unwrap();
            *o += 1;
            Some((
                0,
                vec![
                    ("msgId".into(), format!("OFFSETID{o}")),
                    ("queueId".into(), r.get("e").unwrap_or("0").into()),
                    ("queueOffset".into(), o.to_string()),
                ],
                Vec::new(),
            ))
        }
        SEND_V2 => Some((code, Vec::new(), Vec::new())),
        _ => Some((0, Vec::new(), Vec::new())),
    })
}

/// A NameServer knowing `routes` (topic → body); other topics are TOPIC_NOT_EXIST.
pub fn namesrv(routes: Vec<(&'static str, Vec<u8>)>) -> Handler {
    Arc::new(move |r: &Seen| {
        if r.code != ROUTE {
            return Some((3, Vec::new(), Vec::new()));
        }
        let topic = r.get("topic").unwrap_or("");
        match routes.iter().find(|(t, _)| *t == topic) {
            Some((_, body)) => Some((0, Vec::new(), body.clone())),
            None => Some((17, Vec::new(), Vec::new())),
        }
    })
}
