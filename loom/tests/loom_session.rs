//! loom: the races of rmq-std's session driver (`src/driver.rs`). The driver serialises every
//! entry point of the core session behind one lock (connection reader → `handle_frame`,
//! driver task → `handle_timeout` / `poll_transmit`, a lost connection → `handle_closed`,
//! a caller → `send`) and hands each `SendDone` to the send's waiter while still holding it.
//! These models run the real core session behind the runtime's own `sync::Mutex` (loom's
//! under `--cfg loom`) with the driver's waiter discipline, and check that every send ends
//! exactly once whatever the interleaving:
//!
//! - a response arriving while its request times out;
//! - a connection lost while a send is being queued and written;
//! - a send submitted while the route arrives.
#![cfg(loom)]

use std::collections::HashMap;

use loom::sync::Arc;
use loom::thread;
use rmq_core::retry::{RetryConfig, SendMode};
use rmq_core::session::{
    BrokerId, Config, Event, Incoming, Outbound, Peer, SendArgs, SendId, Session, TopicId,
};
use rmq_core::time::Instant;
use rmq_core::transport::TransportError;
use rmq_core::wire::{CommandRepr, ResponseCode, SerializeType, version};
use rmq_loom::sync::{Mutex, lock};

type S = Session<2, 2, 8, 8, 4, 1024>;

const ROUTE: &str = r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"a","cluster":"c"}],"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}]}"#;

struct Props;
impl Outbound for Props {
    fn properties(&self, _: SendId) -> &str {
        "WAIT\u{1}true\u{2}"
    }
}

/// What the driver keeps under its lock: the session and the waiters of the sends.
struct State {
    // Boxed: loom's coroutines have small stacks.
    s: Box<S>,
    /// SendId → how many times its waiter was completed.
    waiters: HashMap<u32, u32>,
    results: HashMap<u32, bool>,
}

impl State {
    /// The driver's `events`: every SendDone goes to its waiter, under the lock.
    fn events(&mut self) {
        while let Some(e) = self.s.poll_event() {
            if let Event::SendDone { id, result } = e {
                *self.waiters.entry(id.0).or_default() += 1;
                self.results.insert(id.0, result.is_ok());
            }
        }
    }

    /// The driver task's step: timeouts, then every transmit (returned as (peer, opaque)).
    fn step(&mut self, now: Instant) -> Vec<(Peer, i32)> {
        self.s.handle_timeout(now);
        let mut buf = [0u8; 512];
        let mut out = Vec::new();
        while let Some(t) = self.s.poll_transmit(now, &mut buf, &Props) {
            out.push((t.peer, t.opaque));
        }
        self.events();
        out
    }
}

fn response(code: i32, opaque: i32, ext: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let cmd = CommandRepr::response(ResponseCode(code), opaque, version::V5_3_3, Some(ext));
    let mut buf = vec![0u8; 512];
    let n = cmd
        .emit_frame_prefix_and_header(SerializeType::JSON, body.len(), &mut buf)
        .unwrap();
    buf.truncate(n);
    buf.extend_from_slice(body);
    buf
}

fn stored(opaque: i32) -> Vec<u8> {
    response(
        0,
        opaque,
        &[("msgId", "0A00"), ("queueId", "0"), ("queueOffset", "1")],
        b"",
    )
}

/// A new session (no heartbeats) and empty waiters.
fn fresh() -> State {
    let mut cfg = Config::new(1, "pg", "c@1");
    cfg.heartbeat = None;
    State {
        s: Box::new(S::new(&cfg, Instant::ZERO).unwrap()),
        waiters: HashMap::new(),
        results: HashMap::new(),
    }
}

/// A session with the route of topic `T` installed; returns it and the topic.
fn routed() -> (State, TopicId) {
    let mut st = fresh();
    let t = st.s.topic(Instant::ZERO, "T").unwrap();
    let out = st.step(Instant::ZERO);
    let (peer, opaque) = out[0];
    let r = st.s.handle_frame(
        Instant::ZERO,
        peer,
        &response(0, opaque, &[], ROUTE.as_bytes()),
    );
    assert_eq!(r, Ok(Incoming::Handled));
    (st, t)
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    loom::model(f);
}

fn one_attempt() -> SendArgs<'static> {
    let mut r = RetryConfig::java49(SendMode::Sync);
    r.retry_times_when_send_failed = 0;
    SendArgs::new(r, 5, 1)
}

#[test]
fn response_races_its_timeout() {
    model(|| {
        let (mut st, t) = routed();
        let id = st.s.send(Instant::ZERO, t, &one_attempt()).unwrap();
        let (peer, opaque) = st.step(Instant::ZERO)[0];
        assert_eq!(peer, Peer::Broker(BrokerId(0)));
        let st = Arc::new(Mutex::new(st));

        let s1 = st.clone();
        let reader = thread::spawn(move || {
            let mut g = lock(&s1);
            let _ =
                g.s.handle_frame(Instant::from_millis(2999), peer, &stored(opaque));
            g.events();
        });
        let s2 = st.clone();
        let timer = thread::spawn(move || {
            let mut g = lock(&s2);
            g.step(Instant::from_millis(3000));
        });
        reader.join().unwrap();
        timer.join().unwrap();
        let g = lock(&st);
        assert_eq!(
            g.waiters.get(&id.0),
            Some(&1),
            "the send ended exactly once"
        );
        // Whichever came first decided; the other was dropped (a late response is counted).
        let ok = g.results[&id.0];
        assert_eq!(g.s.stats().late_responses, u32::from(!ok));
        // Only a failed send leaves a request behind: the refresh of its topic's route.
        assert_eq!(g.s.pending_requests(), usize::from(!ok));
        assert!(g.s.check_invariants().is_ok());
    });
}

#[test]
fn connection_lost_while_a_send_is_queued_and_written() {
    model(|| {
        let (st, t) = routed();
        let st = Arc::new(Mutex::new(st));

        // The caller submits, then the driver task writes what is queued.
        let s1 = st.clone();
        let caller = thread::spawn(move || {
            let id = {
                let mut g = lock(&s1);
                let id = g.s.send(Instant::ZERO, t, &one_attempt()).unwrap();
                g.events();
                id
            };
            let out = lock(&s1).step(Instant::ZERO);
            (id, out)
        });
        // Meanwhile the connection to the broker is lost.
        let s2 = st.clone();
        let closer = thread::spawn(move || {
            let mut g = lock(&s2);
            g.s.handle_closed(
                Instant::ZERO,
                Peer::Broker(BrokerId(0)),
                TransportError::ConnectionClosed,
            );
            g.events();
        });
        let (id, out) = caller.join().unwrap();
        closer.join().unwrap();
        let mut g = lock(&st);
        // Written after the loss: the broker answers on the new connection.
        for (peer, opaque) in out {
            let _ =
                g.s.handle_frame(Instant::from_millis(1), peer, &stored(opaque));
            g.events();
        }
        // Whatever is left ends by the deadline.
        g.step(Instant::from_millis(10_000));
        assert_eq!(
            g.waiters.get(&id.0),
            Some(&1),
            "the send ended exactly once"
        );
        assert_eq!(g.s.pending_requests(), 0);
        assert!(g.s.check_invariants().is_ok());
    });
}

#[test]
fn send_submitted_while_the_route_arrives() {
    model(|| {
        let mut st = fresh();
        let t = st.s.topic(Instant::ZERO, "T").unwrap();
        let (peer, opaque) = st.step(Instant::ZERO)[0];
        let st = Arc::new(Mutex::new(st));

        let s1 = st.clone();
        let reader = thread::spawn(move || {
            let mut g = lock(&s1);
            let r = g.s.handle_frame(
                Instant::ZERO,
                peer,
                &response(0, opaque, &[], ROUTE.as_bytes()),
            );
            assert_eq!(r, Ok(Incoming::Handled));
            g.events();
        });
        let s2 = st.clone();
        let caller = thread::spawn(move || {
            let mut g = lock(&s2);
            let id = g.s.send(Instant::ZERO, t, &one_attempt()).unwrap();
            g.events();
            id
        });
        reader.join().unwrap();
        let id = caller.join().unwrap();
        let mut g = lock(&st);
        let out = g.step(Instant::ZERO);
        assert_eq!(
            out.len(),
            1,
            "the send goes out once the route is there: {out:?}"
        );
        let (p, o) = out[0];
        let r = g.s.handle_frame(Instant::from_millis(1), p, &stored(o));
        assert_eq!(r, Ok(Incoming::Handled));
        g.events();
        assert_eq!(g.waiters.get(&id.0), Some(&1));
        assert_eq!(g.results.get(&id.0), Some(&true));
    });
}
