//! The connection task against a scripted fake peer: responses matched by opaque, late and
//! unknown responses dropped and counted, every in-flight request failed at once when the
//! connection is lost, malformed frames closing only their connection, reconnect back-off.
#![cfg(not(loom))]

use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use bytes::Bytes;
use rmq_core::wire::headers::GetRouteInfoRequestHeader;
use rmq_core::wire::{
    CommandHeader, CommandRepr, FrameReader, LanguageCode, RequestCode, ResponseCode,
    SerializeType, version,
};
use rmq_std::TransportError;
use rmq_std::clock;
use rmq_std::conn::{Conn, Encoding, Pool, connect};
use rmq_std::shared::Counters;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const ENC: Encoding = Encoding {
    serialize_type: SerializeType::JSON,
    version: version::V5_3_3,
    language: LanguageCode::RUST,
};

/// Reads request frames from `s` and reports their opaques.
fn spawn_reader(mut rd: tokio::net::tcp::OwnedReadHalf) -> mpsc::UnboundedReceiver<i32> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut reader = FrameReader::new(vec![0u8; 1 << 16]);
        let mut buf = vec![0u8; 4096];
        loop {
            let n = match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let mut data = &buf[..n];
            while !data.is_empty() {
                let used = reader.feed(data).expect("client sent a valid frame");
                data = &data[used..];
                if let Some(f) = reader.take_frame() {
                    let h = CommandHeader::parse(&f).expect("client header");
                    let _ = tx.send(h.opaque());
                }
            }
        }
    });
    rx
}

fn response(opaque: i32, code: i32) -> Vec<u8> {
    let cmd = CommandRepr::<()>::response(ResponseCode(code), opaque, version::V5_3_3, None);
    let mut out = vec![0u8; cmd.frame_len(SerializeType::JSON, 3)];
    let n = cmd
        .emit_frame_prefix_and_header(SerializeType::JSON, 3, &mut out)
        .unwrap();
    out.truncate(n);
    out.extend_from_slice(b"abc");
    out
}

async fn pair(
    counters: Arc<Counters>,
) -> (
    Arc<Conn>,
    tokio::net::tcp::OwnedWriteHalf,
    mpsc::UnboundedReceiver<i32>,
) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let (conn, accepted) = tokio::join!(connect(1, &addr, 64, counters), l.accept());
    let (s, _) = accepted.unwrap();
    let (rd, wr) = s.into_split();
    (conn.unwrap(), wr, spawn_reader(rd))
}

fn req<'a>(
    conn: &'a Conn,
    timeout: Duration,
) -> impl std::future::Future<Output = Result<(i32, Vec<u8>), TransportError>> + 'a {
    let deadline = clock::now() + clock::to_core(timeout);
    async move {
        let hdr = GetRouteInfoRequestHeader {
            topic: "T",
            accept_standard_json_only: None,
        };
        let r = conn
            .request(
                ENC,
                |op| {
                    CommandRepr::request(
                        RequestCode::GET_ROUTEINFO_BY_TOPIC,
                        op,
                        version::V5_3_3,
                        Some(hdr),
                    )
                },
                Bytes::new(),
                deadline,
            )
            .await?;
        Ok((r.code(), r.body().to_vec()))
    }
}

#[tokio::test]
async fn responses_match_by_opaque_and_unknown_ones_are_counted() {
    let counters = Arc::new(Counters::new());
    let (conn, mut wr, mut seen) = pair(counters.clone()).await;
    let a = tokio::spawn({
        let c = conn.clone();
        async move { req(&c, Duration::from_secs(5)).await }
    });
    let b = tokio::spawn({
        let c = conn.clone();
        async move { req(&c, Duration::from_secs(5)).await }
    });
    let o1 = seen.recv().await.unwrap();
    let o2 = seen.recv().await.unwrap();
    assert_ne!(o1, o2);
    // Answer out of order, with distinct codes, plus one nobody asked for.
    let mut out = response(o2, 17);
    out.extend(response(987_654, 0));
    out.extend(response(o1, 0));
    wr.write_all(&out).await.unwrap();
    let (ra, rb) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
    let codes: std::collections::BTreeSet<i32> = [ra.0, rb.0].into_iter().collect();
    assert_eq!(codes, [0, 17].into_iter().collect());
    assert_eq!(ra.1, b"abc");
    assert_eq!(counters.snapshot().late_responses_dropped, 1);
    assert_eq!(conn.in_flight(), 0);
}

#[tokio::test]
async fn timeout_frees_the_slot_and_the_late_answer_is_dropped() {
    let counters = Arc::new(Counters::new());
    let (conn, mut wr, mut seen) = pair(counters.clone()).await;
    let t0 = StdInstant::now();
    let r = req(&conn, Duration::from_millis(200)).await;
    assert_eq!(r, Err(TransportError::TimedOut));
    assert!(
        t0.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t0.elapsed()
    );
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(conn.in_flight(), 0, "slot freed at the timeout");
    let o = seen.recv().await.unwrap();
    wr.write_all(&response(o, 0)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(counters.snapshot().late_responses_dropped, 1);
    // The connection is still usable.
    let h = tokio::spawn({
        let c = conn.clone();
        async move { req(&c, Duration::from_secs(5)).await }
    });
    let o = seen.recv().await.unwrap();
    wr.write_all(&response(o, 0)).await.unwrap();
    assert_eq!(h.await.unwrap().unwrap().0, 0);
}

#[tokio::test]
async fn connection_loss_fails_every_request_at_once() {
    let counters = Arc::new(Counters::new());
    let (conn, wr, mut seen) = pair(counters.clone()).await;
    let mut hs = Vec::new();
    for _ in 0..3 {
        let c = conn.clone();
        hs.push(tokio::spawn(async move {
            req(&c, Duration::from_secs(10)).await
        }));
    }
    for _ in 0..3 {
        seen.recv().await.unwrap();
    }
    let t0 = StdInstant::now();
    drop(wr); // FIN from the peer (its read half goes away with the reader task)
    drop(seen);
    for h in hs {
        assert_eq!(h.await.unwrap(), Err(TransportError::ConnectionClosed));
    }
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "failed at once, not at the deadline"
    );
    assert!(conn.is_closed());
    assert_eq!(counters.snapshot().connections_lost, 1);
    assert_eq!(
        req(&conn, Duration::from_secs(1)).await,
        Err(TransportError::ConnectionClosed)
    );
}

#[tokio::test]
async fn malformed_frame_closes_only_that_connection() {
    let counters = Arc::new(Counters::new());
    let (bad, mut bad_wr, mut bad_seen) = pair(counters.clone()).await;
    let (good, mut good_wr, mut good_seen) = pair(counters.clone()).await;
    let h = tokio::spawn({
        let c = bad.clone();
        async move { req(&c, Duration::from_secs(10)).await }
    });
    bad_seen.recv().await.unwrap();
    // total_length 2: below the minimum of 4.
    bad_wr.write_all(&[0, 0, 0, 2, 0, 0, 0, 0]).await.unwrap();
    assert_eq!(h.await.unwrap(), Err(TransportError::ConnectionClosed));
    assert!(bad.is_closed());
    let h = tokio::spawn({
        let c = good.clone();
        async move { req(&c, Duration::from_secs(5)).await }
    });
    let o = good_seen.recv().await.unwrap();
    good_wr.write_all(&response(o, 0)).await.unwrap();
    assert_eq!(h.await.unwrap().unwrap().0, 0);
    assert!(!good.is_closed());
}

#[tokio::test]
async fn pool_reconnects_with_backoff() {
    let counters = Arc::new(Counters::new());
    let pool = Pool::new(16, counters);
    // A port with nothing listening.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    assert_eq!(
        pool.get(&addr).await.err(),
        Some(TransportError::ConnectFailed)
    );
    // Within the back-off window no connect is even tried.
    let l = TcpListener::bind(&addr).await.unwrap();
    assert_eq!(
        pool.get(&addr).await.err(),
        Some(TransportError::ConnectFailed)
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (c, acc) = tokio::join!(pool.get(&addr), l.accept());
    let c = c.expect("reconnected after the back-off");
    let (s, _) = acc.unwrap();
    // The same connection is reused while it lives.
    assert!(Arc::ptr_eq(&c, &pool.get(&addr).await.unwrap()));
    drop(s);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(c.is_closed());
    let (c2, acc) = tokio::join!(pool.get(&addr), l.accept());
    let _s2: TcpStream = acc.unwrap().0;
    assert!(
        !Arc::ptr_eq(&c, &c2.unwrap()),
        "a lost connection is replaced"
    );
}
