//! Scripted fake peers for fault injection: a fake NameServer that answers every route request
//! with a route pointing at fake brokers, and fake brokers whose answers to each request are
//! written by a [`Script`] (well-formed responses, or deliberately broken bytes).
//!
//! Each peer listens on 127.0.0.1 (ephemeral port) and serves every accepted connection on its
//! own std thread. Requests are cut on the 4-byte length prefix and decoded with the core
//! [`CommandHeader`]; the script sees the decoded request and the socket, and decides what is
//! written back and whether the connection goes on. These peers exist only to test how a
//! client copes with a hostile or broken server.

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rmq_core::wire::{CommandHeader, Frame, RequestCode};

/// Largest request frame a fake peer reads (client requests are small).
const MAX_REQUEST: usize = 16 << 20;

/// A request as the fake peer decoded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Request code.
    pub code: i32,
    /// Opaque to echo.
    pub opaque: i32,
    /// Whether the oneway flag bit is set.
    pub oneway: bool,
    /// Connection number on this peer (from 0, in accept order).
    pub conn: u64,
    /// Request ext fields (string values as sent).
    pub ext: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Request {
    /// Whether this is a message send (SEND_MESSAGE, _V2 or batch).
    pub fn is_send(&self) -> bool {
        self.code == RequestCode::SEND_MESSAGE.0
            || self.code == RequestCode::SEND_MESSAGE_V2.0
            || self.code == RequestCode::SEND_BATCH_MESSAGE.0
    }

    /// An ext field's value.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.ext
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// What the connection does after the script ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Read the next request.
    Continue,
    /// Close the connection (FIN).
    Close,
    /// Reset the connection (RST: linger 0, then close).
    Reset,
    /// Keep the connection open but never read or write again (until the peer stops).
    Hang,
}

/// Decides what a peer writes for each request.
pub type Script = Arc<dyn Fn(&Request, &mut TcpStream) -> Action + Send + Sync>;

/// Counters of one peer.
#[derive(Debug, Default)]
pub struct PeerStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Requests decoded (all codes).
    pub requests: AtomicU64,
    /// Send requests decoded.
    pub sends: AtomicU64,
    /// Connections that ended (closed by either side).
    pub ended: AtomicU64,
}

/// A running fake peer; stops (and closes every connection) when dropped.
pub struct Peer {
    addr: SocketAddr,
    stats: Arc<PeerStats>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<JoinHandle<()>>,
}

impl Peer {
    /// Starts a peer answering with `script`.
    ///
    /// # Errors
    /// When the listener cannot be bound.
    pub fn start(script: Script) -> io::Result<Peer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(PeerStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (stats, stop, conns) = (stats.clone(), stop.clone(), conns.clone());
            std::thread::spawn(move || {
                for (n, s) in listener.incoming().enumerate() {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(s) = s else { continue };
                    stats.connections.fetch_add(1, Ordering::Relaxed);
                    if let Ok(c) = s.try_clone() {
                        conns.lock().unwrap_or_else(|p| p.into_inner()).push(c);
                    }
                    let (script, stats, stop) = (script.clone(), stats.clone(), stop.clone());
                    std::thread::spawn(move || serve(s, n as u64, &script, &stats, &stop));
                }
            })
        };
        Ok(Peer {
            addr,
            stats,
            stop,
            conns,
            accept: Some(accept),
        })
    }

    /// A fake NameServer answering every GET_ROUTEINFO_BY_TOPIC with `route_json` (and any
    /// other request with SUCCESS).
    ///
    /// # Errors
    /// When the listener cannot be bound.
    pub fn namesrv(route_json: String) -> io::Result<Peer> {
        Peer::start(Arc::new(move |req: &Request, s: &mut TcpStream| {
            let body = if req.code == RequestCode::GET_ROUTEINFO_BY_TOPIC.0 {
                route_json.as_bytes()
            } else {
                &[]
            };
            write_or_close(s, &response(0, req.opaque, &[], None, body))
        }))
    }

    /// A fake broker that stores every message (SEND_OK) and answers anything else SUCCESS.
    ///
    /// # Errors
    /// When the listener cannot be bound.
    pub fn healthy_broker() -> io::Result<Peer> {
        Peer::start(Arc::new(|req: &Request, s: &mut TcpStream| {
            answer_ok(req, s)
        }))
    }

    /// The address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counters.
    pub fn stats(&self) -> &PeerStats {
        &self.stats
    }

    /// Send requests received so far.
    pub fn sends(&self) -> u64 {
        self.stats.sends.load(Ordering::Relaxed)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.stats.connections.load(Ordering::Relaxed)
    }

    /// Connections that ended so far.
    pub fn ended(&self) -> u64 {
        self.stats.ended.load(Ordering::Relaxed)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for c in self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            let _ = c.shutdown(Shutdown::Both);
        }
        // Wake the accept loop so it sees the stop flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// Writes `bytes`; `Continue` if written, `Close` if the socket failed.
pub fn write_or_close(s: &mut TcpStream, bytes: &[u8]) -> Action {
    match s.write_all(bytes).and_then(|()| s.flush()) {
        Ok(()) => Action::Continue,
        Err(_) => Action::Close,
    }
}

/// The well-behaved answer: SEND_OK for sends, SUCCESS for anything else, nothing for oneway.
pub fn answer_ok(req: &Request, s: &mut TcpStream) -> Action {
    if req.oneway {
        return Action::Continue;
    }
    write_or_close(s, &ok_response(req))
}

/// The well-behaved response frame for `req` (SEND_OK for a send).
pub fn ok_response(req: &Request) -> Vec<u8> {
    if req.is_send() {
        let queue_id = req
            .field("queueId")
            .or_else(|| req.field("e"))
            .unwrap_or("0")
            .to_owned();
        send_ok(req.opaque, &queue_id)
    } else {
        response(0, req.opaque, &[], None, &[])
    }
}

/// A SEND_OK response frame for `opaque`.
pub fn send_ok(opaque: i32, queue_id: &str) -> Vec<u8> {
    response(
        0,
        opaque,
        &[
            ("msgId", "7F00000100002A9F0000000000000000"),
            ("queueId", queue_id),
            ("queueOffset", "0"),
        ],
        None,
        &[],
    )
}

/// A JSON-header response frame.
pub fn response(
    code: i32,
    opaque: i32,
    ext: &[(&str, &str)],
    remark: Option<&str>,
    body: &[u8],
) -> Vec<u8> {
    let mut h = serde_json::Map::new();
    h.insert("code".into(), code.into());
    if !ext.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> = ext
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).into()))
            .collect();
        h.insert("extFields".into(), m.into());
    }
    h.insert("flag".into(), 1.into());
    h.insert("language".into(), "JAVA".into());
    h.insert("opaque".into(), opaque.into());
    if let Some(r) = remark {
        h.insert("remark".into(), r.into());
    }
    h.insert("serializeTypeCurrentRPC".into(), "JSON".into());
    h.insert("version".into(), 479.into());
    let header = serde_json::to_vec(&serde_json::Value::Object(h)).unwrap_or_default();
    raw_frame(0, &header, body)
}

/// A frame with serialize type `ty` and the given header bytes (lengths computed honestly).
pub fn raw_frame(ty: u8, header: &[u8], body: &[u8]) -> Vec<u8> {
    let total = 4 + header.len() + body.len();
    let mut out = Vec::with_capacity(4 + total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&((u32::from(ty) << 24) | header.len() as u32).to_be_bytes());
    out.extend_from_slice(header);
    out.extend_from_slice(body);
    out
}

/// A route JSON with `queues` read/write queues on each broker `(name, address)`.
pub fn route_json(brokers: &[(&str, SocketAddr)], queues: u32) -> String {
    let datas: Vec<serde_json::Value> = brokers
        .iter()
        .map(|(name, addr)| {
            serde_json::json!({
                "brokerAddrs": {"0": addr.to_string()},
                "brokerName": name,
                "cluster": "FakeCluster",
            })
        })
        .collect();
    let qs: Vec<serde_json::Value> = brokers
        .iter()
        .map(|(name, _)| {
            serde_json::json!({
                "brokerName": name,
                "perm": 6,
                "readQueueNums": queues,
                "topicSysFlag": 0,
                "writeQueueNums": queues,
            })
        })
        .collect();
    serde_json::json!({"brokerDatas": datas, "queueDatas": qs}).to_string()
}

/// Resets `s` (RST instead of FIN).
pub fn reset(s: &TcpStream) {
    set_linger_zero(s);
    let _ = s.shutdown(Shutdown::Both);
}

fn set_linger_zero(s: &TcpStream) {
    #[allow(unsafe_code)]
    // SAFETY: setsockopt on a valid, owned descriptor with a correctly sized `linger`.
    unsafe {
        use std::os::fd::AsRawFd;
        let l = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn read_request(s: &mut TcpStream, conn: u64) -> io::Result<Request> {
    let frame = crate::relay::read_frame(s, 4..=MAX_REQUEST)?;
    let f = Frame::new_checked(&frame[..])
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad frame"))?;
    let h = CommandHeader::parse(&f)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad header"))?;
    let mut ext = Vec::new();
    for (k, v) in h.ext_iter() {
        let key = crate::blocking::field_string(k).unwrap_or_default();
        let val = crate::blocking::field_string(v).unwrap_or_default();
        ext.push((key, val));
    }
    Ok(Request {
        code: h.code(),
        opaque: h.opaque(),
        oneway: h.flag() & rmq_core::wire::flag::ONEWAY != 0,
        conn,
        ext,
        body: f.body_ref().to_vec(),
    })
}

fn serve(mut s: TcpStream, conn: u64, script: &Script, stats: &PeerStats, stop: &AtomicBool) {
    let _ = s.set_nodelay(true);
    loop {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let Ok(req) = read_request(&mut s, conn) else {
            break;
        };
        stats.requests.fetch_add(1, Ordering::Relaxed);
        if req.is_send() {
            stats.sends.fetch_add(1, Ordering::Relaxed);
        }
        match script(&req, &mut s) {
            Action::Continue => {}
            Action::Close => {
                let _ = s.shutdown(Shutdown::Both);
                break;
            }
            Action::Reset => {
                reset(&s);
                break;
            }
            Action::Hang => {
                while !stop.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                break;
            }
        }
    }
    stats.ended.fetch_add(1, Ordering::Relaxed);
}
