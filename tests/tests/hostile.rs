//! The rmq-std Producer against hostile and broken servers (fault-injection peers from
//! `rmq_tests::hostile`): a fake NameServer routes topic `Hostile` to two fake brokers, `good`
//! (well-behaved) and `bad` (scripted to misbehave when it receives a send).
//!
//! For every case: nothing panics; the sends in flight to `bad` end within their deadline with
//! a typed error (or succeed, for the harmless duplicate response); the broken connection is
//! closed; buffers and in-flight tables stay bounded; and `good`, on its own connection, keeps
//! storing messages while `bad` misbehaves and afterwards.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmq_std::MAX_RX_FRAME;
use rmq_std::{Message, MessageQueue, Producer, SendErrorKind, TransportError};
use rmq_tests::hostile::{
    Action, Peer, Request, Script, answer_ok, ok_response, raw_frame, reset, response, route_json,
    send_ok, write_or_close,
};

const TOPIC: &str = "Hostile";
/// Total budget of one send.
const SEND_TIMEOUT: Duration = Duration::from_millis(1500);
/// How late past its deadline a failing send may return.
const SLACK: Duration = Duration::from_millis(700);
/// Concurrent sends to the bad broker per case.
const IN_FLIGHT: usize = 4;
/// Bound on a connection's socket read (staging) buffer; large frames get their own buffers.
const RX_CHUNK_BOUND: usize = 256 * 1024;

/// What the sends to the bad broker must end with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// `Transport(ConnectionClosed)` and the connection is gone.
    Closed,
    /// `Transport(Malformed)`, the connection error naming what was wrong (it starts with
    /// this), and the connection is gone.
    Malformed(&'static str),
    /// `Transport(TimedOut)` at the deadline (or `ConnectionClosed` at the same moment, when
    /// another request's timeout closed the unresponsive connection).
    TimedOut,
    /// Stored (a harmless misbehaviour).
    Stored,
}

struct Rig {
    _ns: Peer,
    good: Peer,
    bad: Peer,
    producer: Producer,
}

/// Runs `f` on sends only; anything else (heartbeats) is answered normally.
fn on_send(f: impl Fn(&Request, &mut TcpStream) -> Action + Send + Sync + 'static) -> Script {
    Arc::new(move |req: &Request, s: &mut TcpStream| {
        if req.is_send() {
            f(req, s)
        } else {
            answer_ok(req, s)
        }
    })
}

async fn rig(bad: Script) -> Rig {
    let good = Peer::healthy_broker().expect("good broker");
    let bad = Peer::start(bad).expect("bad broker");
    let ns = Peer::namesrv(route_json(&[("good", good.addr()), ("bad", bad.addr())], 2))
        .expect("namesrv");
    let producer = Producer::builder()
        .namesrv_addr(&ns.addr().to_string())
        .producer_group("pg_hostile")
        .send_msg_timeout(SEND_TIMEOUT)
        .start()
        .await
        .expect("start producer");
    Rig {
        _ns: ns,
        good,
        bad,
        producer,
    }
}

fn queue(broker: &str, id: i32) -> MessageQueue {
    MessageQueue {
        topic: TOPIC.into(),
        broker_name: broker.into(),
        queue_id: id,
    }
}

async fn run(case: &str, script: Script, expect: Expect) {
    let rig = rig(script).await;
    let p = &rig.producer;
    // Warm up: the route is fetched and the good broker stores a message.
    p.send_to_queue(Message::new(TOPIC, "warm-up"), &queue("good", 0))
        .await
        .unwrap_or_else(|e| panic!("{case}: warm-up on the good broker failed: {e}"));
    let lost_before = p.counters().connections_lost;

    // IN_FLIGHT sends to the bad broker and, at the same time, sends to the good one.
    let start = Instant::now();
    let bad: Vec<_> = (0..IN_FLIGHT)
        .map(|i| {
            let p = p.clone();
            tokio::spawn(async move {
                let r = p
                    .send_to_queue(
                        Message::new(TOPIC, format!("to bad {i}")),
                        &queue("bad", (i % 2) as i32),
                    )
                    .await;
                (r, start.elapsed())
            })
        })
        .collect();
    let good_sends_before = rig.good.sends();
    for i in 0..5 {
        p.send_to_queue(
            Message::new(TOPIC, format!("to good {i}")),
            &queue("good", 1),
        )
        .await
        .unwrap_or_else(|e| panic!("{case}: good broker failed while bad misbehaves: {e}"));
    }
    let mut results = Vec::new();
    for h in bad {
        results.push(h.await.expect("send task panicked"));
    }
    eprintln!(
        "{case}: bad results {:?}",
        results
            .iter()
            .map(|(r, t)| (
                r.as_ref().map(|s| s.status).map_err(|e| e.kind().clone()),
                t
            ))
            .collect::<Vec<_>>()
    );
    for (r, took) in &results {
        assert!(
            *took <= SEND_TIMEOUT + SLACK,
            "{case}: a send to the bad broker took {took:?} (deadline {SEND_TIMEOUT:?})"
        );
        match expect {
            Expect::Stored => {
                r.as_ref()
                    .unwrap_or_else(|e| panic!("{case}: expected stored, got {e}"));
            }
            Expect::Closed => {
                let e = r.as_ref().expect_err("the bad broker cannot store");
                assert_eq!(
                    e.kind(),
                    &SendErrorKind::Transport(TransportError::ConnectionClosed),
                    "{case}: {e}"
                );
            }
            Expect::Malformed(what) => {
                let e = r.as_ref().expect_err("the bad broker cannot store");
                assert_eq!(
                    e.kind(),
                    &SendErrorKind::Transport(TransportError::Malformed),
                    "{case}: {e}"
                );
                let said = e.connection_error().and_then(|c| c.malformed());
                assert!(
                    said.is_some_and(|s| s.starts_with(what)),
                    "{case}: {said:?}"
                );
            }
            Expect::TimedOut => {
                // The first request to time out closes the unresponsive connection, which
                // fails the others at the same moment.
                let e = r.as_ref().expect_err("the bad broker cannot store");
                assert!(
                    matches!(
                        e.kind(),
                        SendErrorKind::Transport(
                            TransportError::TimedOut | TransportError::ConnectionClosed
                        )
                    ),
                    "{case}: {e}"
                );
            }
        }
    }
    let bad_addr = rig.bad.addr().to_string();
    // A close requested by the producer (unresponsive peer) is carried out by the connection
    // task: give it a moment.
    let mut stats = p.connection_stats();
    for _ in 0..50 {
        if expect == Expect::Stored || stats.iter().any(|c| c.addr == bad_addr && c.closed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        stats = p.connection_stats();
    }
    let bad_conn = stats.iter().find(|c| c.addr == bad_addr);
    eprintln!("{case}: connections {stats:?}, counters {:?}", p.counters());
    match expect {
        Expect::Closed | Expect::Malformed(_) | Expect::TimedOut => {
            // The broken connection is gone (lost, or closed as unresponsive).
            let c = bad_conn.expect("the bad broker was connected");
            assert!(
                c.closed,
                "{case}: the connection to the bad broker is still open"
            );
            assert_eq!(c.in_flight, 0, "{case}: requests left in flight");
            if expect != Expect::TimedOut {
                assert!(
                    p.counters().connections_lost > lost_before,
                    "{case}: the lost connection is counted"
                );
            }
        }
        Expect::Stored => {}
    }
    for c in &stats {
        assert!(
            c.rx_chunk_capacity <= RX_CHUNK_BOUND,
            "{case}: read chunk grew to {} bytes",
            c.rx_chunk_capacity
        );
        if !c.closed {
            assert!(
                c.in_flight <= IN_FLIGHT,
                "{case}: {} requests in flight",
                c.in_flight
            );
        }
    }
    assert!(
        rig.good.sends() >= good_sends_before + 5,
        "{case}: the good broker saw the sends"
    );

    // Afterwards: plain sends (queue selection with retries) still get stored, on the good
    // broker if the bad one is chosen and fails.
    for i in 0..4 {
        let r = p
            .send(Message::new(TOPIC, format!("after {i}")))
            .await
            .unwrap_or_else(|e| panic!("{case}: send after the case failed: {e}"));
        assert_eq!(r.queue.topic, TOPIC);
    }
    let after = p.connection_stats();
    for c in &after {
        assert!(c.rx_chunk_capacity <= RX_CHUNK_BOUND);
    }
    p.shutdown_timeout(Duration::from_millis(500)).await;
    assert!(rig.bad.sends() >= 1, "{case}: the bad broker saw a send");
}

fn prefix(total: u32, ty: u8, header_len: u32) -> Vec<u8> {
    let mut v = total.to_be_bytes().to_vec();
    v.extend_from_slice(&((u32::from(ty) << 24) | header_len).to_be_bytes());
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_length_word() {
    // Past the protocol maximum, and past our receive buffer but within the protocol.
    run(
        "length 0x7fffffff",
        on_send(|_, s| {
            write_or_close(s, &prefix(0x7fff_ffff, 0, 10));
            Action::Hang
        }),
        Expect::Malformed("malformed frame: frame longer than 16 MiB"),
    )
    .await;
    run(
        "length past MAX_RX_FRAME",
        on_send(|_, s| {
            write_or_close(s, &prefix((MAX_RX_FRAME + 16) as u32, 0, 10));
            Action::Hang
        }),
        Expect::Malformed("malformed frame: frame of "),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_length_past_frame() {
    run(
        "header length past the frame",
        on_send(|_, s| {
            let mut f = prefix(20, 0, 100);
            f.extend_from_slice(&[b'{'; 16]);
            write_or_close(s, &f);
            Action::Hang
        }),
        Expect::Malformed("malformed frame: header length past end of frame"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_frame_then_close() {
    run(
        "truncated frame then close",
        on_send(|req, s| {
            let f = ok_response(req);
            let _ = s.write_all(&f[..f.len() / 2]);
            Action::Close
        }),
        Expect::Closed,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_json_header() {
    run(
        "invalid JSON header",
        on_send(|req, s| {
            let h = format!("{{\"code\":0,\"opaque\":{},\"flag\":1,,,", req.opaque);
            write_or_close(s, &raw_frame(0, h.as_bytes(), &[]));
            Action::Hang
        }),
        Expect::Malformed("malformed header: bad JSON header: unexpected byte"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_json_header() {
    run(
        "deeply nested JSON",
        on_send(|req, s| {
            let depth = 100_000;
            let mut h = format!("{{\"opaque\":{},\"flag\":1,\"code\":0,\"x\":", req.opaque);
            h.push_str(&"[".repeat(depth));
            h.push_str(&"]".repeat(depth));
            h.push('}');
            write_or_close(s, &raw_frame(0, h.as_bytes(), &[]));
            Action::Hang
        }),
        Expect::Malformed("malformed header: bad JSON header: JSON nested too deeply"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_json_header() {
    // 1 MiB of valid JSON: 50,000 ext fields and no send-response fields. The answer is
    // parsed within the bounded buffer; the send fails with a typed error (malformed send
    // response), and the connection stays usable.
    let rig_case = "huge JSON header";
    let rig = rig(on_send(|req, s| {
        let mut h = format!(
            "{{\"code\":0,\"flag\":1,\"opaque\":{},\"extFields\":{{",
            req.opaque
        );
        for i in 0..50_000 {
            if i > 0 {
                h.push(',');
            }
            h.push_str(&format!("\"k{i:07}\":\"v\""));
        }
        h.push_str("}}");
        write_or_close(s, &raw_frame(0, h.as_bytes(), &[]))
    }))
    .await;
    let p = &rig.producer;
    let start = Instant::now();
    let e = p
        .send_to_queue(Message::new(TOPIC, "x"), &queue("bad", 0))
        .await
        .expect_err("no msgId in the answer");
    eprintln!("{rig_case}: {e} after {:?}", start.elapsed());
    assert!(start.elapsed() <= SEND_TIMEOUT + SLACK);
    assert_eq!(e.kind(), &SendErrorKind::Malformed, "{rig_case}: {e}");
    p.send_to_queue(Message::new(TOPIC, "y"), &queue("good", 0))
        .await
        .expect("good broker");
    for c in p.connection_stats() {
        assert!(c.rx_chunk_capacity <= RX_CHUNK_BOUND, "{c:?}");
        assert_eq!(c.in_flight, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_serialize_type() {
    run(
        "unknown serialize type",
        on_send(|req, s| {
            let h = format!("{{\"code\":0,\"flag\":1,\"opaque\":{}}}", req.opaque);
            write_or_close(s, &raw_frame(7, h.as_bytes(), &[]));
            Action::Hang
        }),
        Expect::Malformed("malformed frame: unknown serialize type 7"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_opaque() {
    run(
        "unknown opaque",
        on_send(|req, s| {
            write_or_close(s, &send_ok(req.opaque.wrapping_add(1_000_000), "0"));
            Action::Hang
        }),
        Expect::TimedOut,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_response() {
    run(
        "duplicate response",
        on_send(|req, s| {
            let f = ok_response(req);
            let mut two = f.clone();
            two.extend_from_slice(&f);
            write_or_close(s, &two)
        }),
        Expect::Stored,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris() {
    run(
        "slowloris (one byte a second)",
        on_send(|req, s| {
            for b in ok_response(req) {
                if s.write_all(&[b]).is_err() {
                    return Action::Close;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            Action::Continue
        }),
        Expect::TimedOut,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_mid_frame() {
    run(
        "reset mid-frame",
        on_send(|req, s| {
            let f = ok_response(req);
            let _ = s.write_all(&f[..f.len() / 2]);
            std::thread::sleep(Duration::from_millis(50));
            reset(s);
            Action::Close
        }),
        Expect::Closed,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_answers() {
    run(
        "accepts and never answers",
        on_send(|_, _| Action::Hang),
        Expect::TimedOut,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_response_with_remark() {
    // Sanity check of the fake broker's error path: a broker error code with a remark is
    // returned as a typed broker error, and the connection stays usable.
    let rig = rig(on_send(|req, s| {
        write_or_close(
            s,
            &response(13, req.opaque, &[], Some("message illegal"), &[]),
        )
    }))
    .await;
    let e = rig
        .producer
        .send_to_queue(Message::new(TOPIC, "x"), &queue("bad", 0))
        .await
        .expect_err("refused");
    assert_eq!(e.broker_code(), Some(13), "{e}");
}
