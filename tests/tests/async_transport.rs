//! rmq-smoltcp's async transport (feature `async`) against the real broker (5.3.3): the
//! producer drives its connections through `embedded-nal-async`'s `TcpConnect` and
//! `embedded-io-async`'s `Read`/`Write`, here backed by tokio streams (`embedded-io-adapters`),
//! the same traits embassy-net implements on a microcontroller.
//!
//! 100 single sends and 10 batches of 10 are read back exactly once by the Java verifier, with
//! the msgId, queue and offset the producer reported; then the broker is killed: a send fails
//! with a retryable transport error, and after the broker's restart the producer reconnects
//! and stores again. Then the async client consumes 50 commands the Java producer sends,
//! exactly once and in queue order, publishes 5 messages over the same connections, and stops
//! with its offsets committed.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use embedded_io_adapters::tokio_1::FromTokio;
use rmq_core::consumer::ConsumeFromWhere;
use rmq_core::retry::SendErrorKind;
use rmq_core::time::Instant;
use rmq_smoltcp::aio::{AsyncBuffers, AsyncClient, AsyncProducer, Clock, SendError};
use rmq_smoltcp::{ClientConfig, Config, Message, SendFailure, SendReceipt};
use rmq_tests::broker::{Cluster, ClusterOptions, JavaProducer, Version, verifier_read};

const TOPIC: &str = "AsyncTelemetry";
const COMMANDS: &str = "AsyncCommands";

/// Connections from tokio, behind the embedded-nal-async trait.
struct Tokio;

impl embedded_nal_async::TcpConnect for Tokio {
    type Error = std::io::Error;
    type Connection<'a> = FromTokio<tokio::net::TcpStream>;

    async fn connect<'a>(
        &'a self,
        remote: core::net::SocketAddr,
    ) -> Result<Self::Connection<'a>, Self::Error> {
        let s = tokio::net::TcpStream::connect(remote).await?;
        s.set_nodelay(true)?;
        Ok(FromTokio::new(s))
    }
}

/// tokio's clock, in the session's milliseconds.
struct TokioClock(StdInstant);

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        Instant::from_millis(self.0.elapsed().as_millis() as u64)
    }

    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()> {
        let wait = at.millis().saturating_sub(self.now().millis());
        tokio::time::sleep(StdDuration::from_millis(wait))
    }
}

fn leak(n: usize) -> &'static mut [u8] {
    Box::leak(vec![0u8; n].into_boxed_slice())
}

fn body(i: usize) -> String {
    format!("{{\"gateway\":\"async-1\",\"seq\":{i}}}")
}

#[test]
fn async_transport_publishes_through_embedded_io_traits() {
    let mut cluster =
        Cluster::start(Version::V5_3_3, ClusterOptions::default()).expect("cluster start");
    cluster.create_topic(TOPIC, 4).expect("create topic");
    cluster.create_topic(COMMANDS, 4).expect("create topic");
    let ns = cluster.namesrv_addr();
    let namesrvs: &'static [std::net::SocketAddr] = Box::leak(Box::new([ns]));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let stack: &'static Tokio = Box::leak(Box::new(Tokio));
    let clock: &'static TokioClock = Box::leak(Box::new(TokioClock(StdInstant::now())));
    let mut cfg = Config::new(namesrvs, "async-gateway", TOPIC);
    cfg.base.client_ip = [127, 0, 0, 1];
    let bufs = AsyncBuffers {
        tx: leak(512),
        message: leak(2048),
        ns_rx: leak(2048),
        broker_rx: [leak(2048)],
    };
    let mut p: AsyncProducer<'_, '_, Tokio, TokioClock, 1, 16, 256> =
        AsyncProducer::new(cfg, bufs, stack, clock).expect("producer config");

    // (msgId, seq, queue, offset) of every stored message.
    let mut stored: Vec<(String, usize, i32, i64)> = Vec::new();
    let note = |r: &SendReceipt, first: usize, stored: &mut Vec<(String, usize, i32, i64)>| {
        for i in 0..r.messages {
            let id = r.msg_id_of(i).expect("msgId").to_string();
            let off = r.queue_offset.expect("offset") + i64::from(i);
            stored.push((id, first + usize::from(i), r.queue_id, off));
        }
    };
    rt.block_on(async {
        let t = StdInstant::now();
        for i in 0..100 {
            let b = body(i);
            let key = format!("seq-{i}");
            let msg = Message {
                body: b.as_bytes(),
                tags: Some("telemetry"),
                keys: Some(&key),
                flag: 0,
            };
            let r = match p.send(&msg).await {
                Ok(r) => r,
                Err(e) => panic!("send {i}: {e}; {:?}", p.stats()),
            };
            assert_eq!(r.messages, 1);
            note(&r, i, &mut stored);
        }
        eprintln!("100 single sends in {:?}", t.elapsed());
        for k in 0..10 {
            let first = 100 + k * 10;
            let bodies: Vec<String> = (first..first + 10).map(body).collect();
            let keys: Vec<String> = (first..first + 10).map(|i| format!("seq-{i}")).collect();
            let msgs: Vec<Message<'_>> = bodies
                .iter()
                .zip(&keys)
                .map(|(b, k)| Message {
                    body: b.as_bytes(),
                    tags: Some("telemetry"),
                    keys: Some(k),
                    flag: 0,
                })
                .collect();
            let r = p
                .send_batch(&msgs)
                .await
                .unwrap_or_else(|e| panic!("batch {k}: {e}"));
            assert_eq!(r.messages, 10);
            note(&r, first, &mut stored);
        }
    });

    let got = verifier_read(&cluster, TOPIC, 200, StdDuration::from_secs(5)).expect("verifier");
    assert_eq!(got.len(), 200, "the verifier read {} messages", got.len());
    let by_id: BTreeMap<&str, _> = got.iter().map(|m| (m.msg_id.as_str(), m)).collect();
    assert_eq!(by_id.len(), 200, "every message once");
    for (id, seq, queue, offset) in &stored {
        let m = by_id
            .get(id.as_str())
            .unwrap_or_else(|| panic!("message {seq} ({id}) missing"));
        assert_eq!(m.body, body(*seq).as_bytes(), "body of {seq}");
        assert_eq!(m.keys.as_deref(), Some(format!("seq-{seq}").as_str()));
        assert_eq!((m.queue_id, m.queue_offset), (*queue, *offset), "{seq}");
    }

    // The broker dies: a retryable transport failure; back, the producer reconnects.
    cluster.kill9_broker(0);
    let b = body(1000);
    let msg = Message {
        body: b.as_bytes(),
        ..Default::default()
    };
    match rt.block_on(p.send(&msg)) {
        Err(SendError::Failed(SendFailure::Plan { error, .. })) => {
            assert!(error.is_retryable(), "{error}");
            assert!(
                matches!(error.kind(), SendErrorKind::Transport(_)),
                "a dead broker is a transport failure: {error}"
            );
        }
        other => panic!("a send to a killed broker must fail, got {other:?}"),
    }
    cluster.restart_broker(0).expect("broker restart");
    let r = rt
        .block_on(p.send(&msg))
        .unwrap_or_else(|e| panic!("after the restart: {e}"));
    let got = verifier_read(&cluster, TOPIC, 201, StdDuration::from_secs(5)).expect("verifier");
    assert!(got.iter().any(|m| m.msg_id == r.msg_id.as_str()));
    eprintln!("{:?}", p.stats());

    // The client: commands in, telemetry out, over one session.
    let mut ccfg = ClientConfig::new(namesrvs, "async-downlink", "127.0.0.1@async-1", COMMANDS);
    ccfg.consume_from = ConsumeFromWhere::FirstOffset;
    ccfg.publish_topic = Some(TOPIC);
    ccfg.base.client_ip = [127, 0, 0, 1];
    ccfg.commit_interval = rmq_core::time::Duration::from_millis(1000);
    ccfg.base.version = Version::V5_3_3.client_version();
    let bufs = AsyncBuffers {
        tx: leak(1024),
        message: leak(2048),
        ns_rx: leak(2048),
        broker_rx: [leak(8192)],
    };
    let mut c: AsyncClient<'_, '_, Tokio, TokioClock, 1, 16, 256, 8, 8> =
        AsyncClient::new(ccfg, bufs, stack, clock).expect("client config");
    let got: std::cell::RefCell<Vec<(i32, i64, String)>> = Default::default();
    let mut record = |d: &rmq_smoltcp::Delivery<'_, '_>| {
        let m = d.message;
        got.borrow_mut().push((
            m.queue_id,
            m.queue_offset,
            String::from_utf8(m.body.to_vec()).expect("UTF-8"),
        ));
    };
    rt.block_on(async {
        let t = StdInstant::now();
        while c.owned().count() < 4 {
            assert!(t.elapsed() < StdDuration::from_secs(60), "no rebalance");
            c.run_until(
                clock.now() + rmq_core::time::Duration::from_millis(200),
                &mut record,
            )
            .await;
        }
    });
    let sent = JavaProducer::new(COMMANDS, 50)
        .body("cmd-{i}")
        .run(&cluster)
        .expect("java producer");
    assert!(sent.iter().all(|l| l.status == "SEND_OK"));
    let mut receipts = Vec::new();
    rt.block_on(async {
        let t = StdInstant::now();
        let mut i = 0;
        while got.borrow().len() < 50 || i < 5 {
            let n = got.borrow().len();
            assert!(t.elapsed() < StdDuration::from_secs(60), "{n} commands");
            if i < 5 {
                let b = body(2000 + i);
                let msg = Message {
                    body: b.as_bytes(),
                    ..Default::default()
                };
                receipts.push(c.send(&msg, &mut record).await.expect("client send"));
                i += 1;
            }
            c.run_until(
                clock.now() + rmq_core::time::Duration::from_millis(100),
                &mut record,
            )
            .await;
        }
        c.stop(rmq_core::time::Duration::from_millis(5000)).await;
    });
    let got = got.into_inner();
    assert_eq!(got.len(), 50, "each command once");
    let want: BTreeMap<(i32, i64), String> = sent
        .iter()
        .map(|l| {
            (
                (l.queue_id.unwrap(), l.queue_offset.unwrap()),
                format!("cmd-{}", l.index),
            )
        })
        .collect();
    let mut last: BTreeMap<i32, i64> = BTreeMap::new();
    for (q, off, b) in &got {
        assert_eq!(want.get(&(*q, *off)), Some(b), "command at ({q}, {off})");
        if let Some(p) = last.insert(*q, *off) {
            assert!(p < *off, "queue {q} in order");
        }
    }
    let ends: BTreeMap<i32, i64> = want.keys().fold(BTreeMap::new(), |mut m, (q, o)| {
        let e = m.entry(*q).or_insert(0);
        *e = (*e).max(o + 1);
        m
    });
    for (q, committed) in c.owned() {
        assert_eq!(
            committed,
            ends.get(&q).copied(),
            "queue {q} committed at its end"
        );
    }
    let up = verifier_read(&cluster, TOPIC, 206, StdDuration::from_secs(5)).expect("verifier");
    for r in &receipts {
        assert!(
            up.iter().any(|m| m.msg_id == r.msg_id.as_str()),
            "{}",
            r.msg_id
        );
    }
    eprintln!("client: {:?}", c.pull_stats());
}
