//! A trace topic that refuses trace messages (stopped, missing, or not writable) costs a traced
//! producer's sends nothing: fault injection with the fake peers of `rmq_tests::hostile` (no
//! real broker is needed to refuse a topic on cue; tests/tests/trace.rs proves the records
//! against a real 5.3.3 broker).
//!
//! A fake NameServer routes every topic to one fake broker that stores user messages and, while
//! `refusing`, answers every trace send TOPIC_NOT_EXIST. The producer's sends all succeed; the
//! first failed trace send pauses the trace (core `trace::Backoff`), so only a few trace
//! messages reach the broker and the rest of the records are dropped and counted
//! (`ProducerMetrics::trace_dropped`) instead of one trace send per ten messages; once the
//! pause is over and the broker takes trace messages again, they are sent again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmq_std::{Message, Producer};
use rmq_tests::hostile::{Peer, Request, answer_ok, response, route_json, write_or_close};

const TOPIC: &str = "Traced";
const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";
/// TOPIC_NOT_EXIST.
const TOPIC_NOT_EXIST: i32 = 17;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_trace_topic_pauses_the_trace_and_costs_the_sends_nothing() {
    let refusing = Arc::new(AtomicBool::new(true));
    let (refused, taken) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (r, f, t) = (refusing.clone(), refused.clone(), taken.clone());
    let broker = Peer::start(Arc::new(
        move |req: &Request, s: &mut std::net::TcpStream| {
            let topic = req.field("b").or_else(|| req.field("topic"));
            if req.is_send() && topic == Some(TRACE_TOPIC) {
                if r.load(Ordering::SeqCst) {
                    f.fetch_add(1, Ordering::SeqCst);
                    let refusal = response(TOPIC_NOT_EXIST, req.opaque, &[], Some("no topic"), &[]);
                    return write_or_close(s, &refusal);
                }
                t.fetch_add(1, Ordering::SeqCst);
            }
            answer_ok(req, s)
        },
    ))
    .expect("fake broker");
    let ns = Peer::namesrv(route_json(&[("b", broker.addr())], 4)).expect("fake namesrv");
    let p = Producer::builder()
        .namesrv_addr(&ns.addr().to_string())
        .producer_group("pg_trace_pause")
        .message_trace(true)
        .start()
        .await
        .expect("start producer");

    // 300 sends: without the pause, 30 trace messages (and their retries) would be refused.
    const SENT: usize = 300;
    for i in 0..SENT {
        p.send(Message::new(TOPIC, format!("m{i}")))
            .await
            .unwrap_or_else(|e| panic!("send {i} failed while the trace topic refuses: {e}"));
    }
    let refused_in_pause = refused.load(Ordering::SeqCst);
    let dropped = p.metrics().trace_dropped;
    assert!(refused_in_pause >= 1, "no trace send reached the broker");
    // The sends that were on their way when the first refusal came, with their retries.
    assert!(
        refused_in_pause <= 12,
        "{refused_in_pause} trace sends refused: the trace did not pause"
    );
    assert!(
        dropped >= (SENT - 40) as u64,
        "only {dropped} of {SENT} records dropped in the pause"
    );
    assert_eq!(taken.load(Ordering::SeqCst), 0);

    // The broker takes trace messages again; past the 1 s pause the trace resumes.
    refusing.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for i in 0..20 {
        p.send(Message::new(TOPIC, format!("after{i}")))
            .await
            .expect("send after the pause");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while taken.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(taken.load(Ordering::SeqCst) >= 1, "the trace never resumed");
    assert_eq!(
        p.metrics().trace_dropped,
        dropped,
        "records dropped after the pause"
    );
    p.shutdown().await;
}
