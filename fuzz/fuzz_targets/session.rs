//! The client session as a runtime drives it, against hostile NameServers and brokers and a
//! hostile clock: arbitrary sequences of commands, transmits, answers (well-formed or raw
//! bytes), lost connections and time steps.
//!
//! Input: byte 0 = profile (low 2 bits: Plain, Java49, Java5, Adaptive) and mode bits (2..4:
//! Sync, Async, Oneway); then operations, each an opcode byte (mod 8) and its operands:
//! - `0 t`: register topic `t % 3`;
//! - `1 t q`: send to topic `t % 3` (`q` bit 0: to a fixed queue `q >> 1`);
//! - `2 w`: take every transmit (report ONEWAY writes unless `w` bit 0);
//! - `3 i c r`: answer the `i`-th written request with code `CODES[c]`; a route gets body
//!   `ROUTES[r]`, a send its stored fields unless `r` bit 7;
//! - `4 p n bytes…`: `n` raw bytes as one frame from peer `p` (an error closes that peer);
//! - `5 p c`: the connection to peer `p` is lost with cause `c`;
//! - `6 d`: advance the clock by `d²` ms and handle timeouts;
//! - `7`: take every event;
//! - `8 p`: a runtime call (as a consumer's pull) to peer `p`, with a timeout of 500 ms.
//!
//! Invariants: no panic; the session's bookkeeping holds after every operation
//! (`check_invariants`); every send and every call ends exactly once (a call: its response
//! handed back by `handle_frame`, or `CallFailed`); a send never makes more attempts than its
//! retry budget; once the clock passes every deadline (and transmits are drained unanswered),
//! every send and call has ended.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use rmq_core::retry::{RetryConfig, SendMode};
use rmq_core::session::{
    BrokerId, Config, Event, Incoming, Outbound, Peer, SendArgs, SendId, Session, Target, TopicId,
    Transmit,
};
use rmq_core::time::{Duration, Instant};
use rmq_core::transport::TransportError;
use rmq_core::wire::RequestCode;
use rmq_fuzz::{next_byte as next, response};

type S = Session<3, 3, 8, 6, 4, 1024>;

const CODES: [i32; 12] = [0, 1, 2, 10, 11, 14, 16, 17, 25, 215, -1, 999];
const TOPICS: [&str; 3] = ["T", "Other", "%RETRY%g"];
const ROUTES: [&str; 8] = [
    r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"a","cluster":"c"}],"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#,
    r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"a","cluster":"c"},{"brokerAddrs":{"0":"10.0.0.2:10911"},"brokerName":"b","cluster":"c"}],"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2},{"brokerName":"b","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}]}"#,
    r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.9:10911"},"brokerName":"a","cluster":"c"}],"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#,
    r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.3:10911"},"brokerName":"c","cluster":"c"},{"brokerAddrs":{"0":"10.0.0.4:10911"},"brokerName":"d","cluster":"c"}],"queueDatas":[{"brokerName":"c","perm":6,"readQueueNums":1,"topicSysFlag":0,"writeQueueNums":1},{"brokerName":"d","perm":2,"readQueueNums":1,"topicSysFlag":0,"writeQueueNums":1}]}"#,
    r#"{"brokerDatas":[],"queueDatas":[]}"#,
    r#"{"brokerDatas":[{"brokerName""#,
    // A master with its slave, then the slave alone (the master is gone).
    r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.5:10911"},"brokerName":"a","cluster":"c"}],"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#,
    r#"{"brokerDatas":[{"brokerAddrs":{"1":"10.0.0.5:10911"},"brokerName":"a","cluster":"c"}],"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#,
];

struct Props;
impl Outbound for Props {
    fn properties(&self, _: SendId) -> &str {
        "WAIT\u{1}true\u{2}"
    }
}

fn peer(p: u8) -> Peer {
    match p % 5 {
        0 => Peer::NameServer(0),
        1 => Peer::NameServer(1),
        n => Peer::Broker(BrokerId(u16::from(n - 2))),
    }
}

fn cause(c: u8) -> TransportError {
    [
        TransportError::ConnectFailed,
        TransportError::WriteFailed,
        TransportError::ConnectionClosed,
        TransportError::TimedOut,
    ][usize::from(c % 4)]
}

struct World {
    s: S,
    now: Instant,
    /// The retry budget of every send (`RetryConfig::max_attempts`).
    max_attempts: u8,
    written: Vec<Transmit>,
    started: HashSet<u32>,
    ended: HashSet<u32>,
    calls: HashSet<i32>,
}

impl World {
    fn take_transmits(&mut self, report: bool) {
        let mut buf = [0u8; 600];
        while let Some(t) = self.s.poll_transmit(self.now, &mut buf, &Props) {
            assert!(t.len <= buf.len());
            if t.report_written && report {
                self.s.handle_written(self.now, t.opaque);
            }
            self.written.push(t);
            if self.written.len() > 64 {
                let _ = self.written.remove(0);
            }
        }
    }

    fn events(&mut self) {
        while let Some(e) = self.s.poll_event() {
            match e {
                Event::SendDone { id, result } => {
                    assert!(self.started.contains(&id.0), "an unknown send ended");
                    assert!(self.ended.insert(id.0), "a send ended twice");
                    let attempts = match &result {
                        Ok(r) => r.attempts,
                        Err(f) => f.attempts(),
                    };
                    assert!(attempts <= self.max_attempts, "attempts over the budget");
                }
                Event::ChooseQueue { id, queues } => {
                    // A selector's choice, any index (taken modulo the queues; a route that
                    // lost its queues meanwhile ends the send with NoRoute).
                    let _ = queues;
                    assert!(self.s.choose_queue(
                        self.now,
                        id,
                        usize::from(self.now.millis() as u8)
                    ));
                }
                Event::CallFailed { opaque, .. } => {
                    assert!(
                        self.calls.remove(&opaque),
                        "a call ended twice or was unknown"
                    );
                }
                _ => {}
            }
        }
    }

    /// A frame from `peer`: an error closes that connection, a call's answer ends the call.
    fn frame(&mut self, peer: Peer, bytes: &[u8]) {
        match self.s.handle_frame(self.now, peer, bytes) {
            Err(_) => self
                .s
                .handle_closed(self.now, peer, TransportError::ConnectionClosed),
            Ok(Incoming::Response(op)) => {
                assert!(
                    self.calls.remove(&op),
                    "a call answered twice or was unknown"
                );
            }
            Ok(_) => {}
        }
    }

    fn check(&self) {
        if let Err(e) = self.s.check_invariants() {
            panic!("{e}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, mut ops)) = data.split_first() else {
        return;
    };
    let mut retry = match head & 3 {
        0 => RetryConfig::plain(SendMode::Sync),
        1 => RetryConfig::java49(SendMode::Sync),
        2 => RetryConfig::java5(SendMode::Sync),
        _ => RetryConfig::adaptive(SendMode::Sync),
    };
    retry.mode = [
        SendMode::Sync,
        SendMode::Async,
        SendMode::Oneway,
        SendMode::Sync,
    ][usize::from((head >> 2) & 3)];
    let mut cfg = Config::new(2, "pg", "10.0.0.2@fuzz");
    cfg.seed = u32::from(head) + 1;
    cfg.heartbeat = Some(Duration::from_millis(500));
    let Ok(s) = S::new(&cfg, Instant::ZERO) else {
        return;
    };
    let mut w = World {
        s,
        now: Instant::ZERO,
        max_attempts: retry.max_attempts(),
        written: Vec::new(),
        started: HashSet::new(),
        ended: HashSet::new(),
        calls: HashSet::new(),
    };
    let mut topics: Vec<TopicId> = Vec::new();
    while !ops.is_empty() {
        match next(&mut ops) % 9 {
            0 => {
                let t = TOPICS[usize::from(next(&mut ops) % 3)];
                if let Ok(id) = w.s.topic(w.now, t) {
                    topics.push(id);
                }
            }
            1 => {
                let t = next(&mut ops);
                let q = next(&mut ops);
                let topic = topics.get(usize::from(t) % topics.len().max(1)).copied();
                let mut args = SendArgs::new(retry, 5, 1);
                // A target now and then: a named queue (of a broker the route may not
                // name), an index, a key's hash, or the runtime's choice.
                let brokers = ["a", "b", "x", "c"];
                args.target = match q & 7 {
                    1 => Target::Queue {
                        broker: brokers[usize::from(q >> 6)],
                        queue_id: i32::from((q >> 3) & 3),
                    },
                    3 => Target::Index(usize::from(q >> 3)),
                    5 => Target::Hash(i32::from(q) - 128),
                    7 => Target::Choose,
                    _ => Target::Select,
                };
                if let Some(t) = topic
                    && let Ok(id) = w.s.send(w.now, t, &args)
                {
                    assert!(w.started.insert(id.0), "a live send id was reused");
                    w.ended.remove(&id.0);
                }
            }
            2 => {
                let report = next(&mut ops) & 1 == 0;
                w.take_transmits(report);
            }
            3 => {
                let i = usize::from(next(&mut ops));
                let code = CODES[usize::from(next(&mut ops)) % CODES.len()];
                let r = next(&mut ops);
                let Some(t) = w.written.get(i % w.written.len().max(1)).copied() else {
                    continue;
                };
                let frame = match t.peer {
                    Peer::NameServer(_) => response(
                        code,
                        t.opaque,
                        &[],
                        ROUTES[usize::from(r) % ROUTES.len()].as_bytes(),
                    ),
                    Peer::Broker(_) if r & 0x80 == 0 => response(
                        code,
                        t.opaque,
                        &[("msgId", "0A00"), ("queueId", "1"), ("queueOffset", "9")],
                        b"",
                    ),
                    Peer::Broker(_) | Peer::Slave(_) => response(code, t.opaque, &[], b""),
                };
                w.frame(t.peer, &frame);
            }
            4 => {
                let p = peer(next(&mut ops));
                let n = usize::from(next(&mut ops)).min(ops.len());
                let (bytes, rest) = ops.split_at(n);
                ops = rest;
                w.frame(p, bytes);
            }
            5 => {
                let p = peer(next(&mut ops));
                let c = cause(next(&mut ops));
                w.s.handle_closed(w.now, p, c);
            }
            6 => {
                let d = u64::from(next(&mut ops));
                w.now += Duration::from_millis(d * d);
                w.s.handle_timeout(w.now);
            }
            7 => w.events(),
            _ => {
                let p = peer(next(&mut ops));
                let mut buf = [0u8; 256];
                if let Ok(t) = w.s.call(
                    w.now,
                    p,
                    RequestCode::PULL_MESSAGE,
                    None::<()>,
                    b"",
                    Duration::from_millis(500),
                    &mut buf,
                    &Props,
                ) {
                    assert!(w.calls.insert(t.opaque), "a live call opaque was reused");
                    w.written.push(t);
                }
            }
        }
        w.check();
    }
    // Let every deadline pass with nothing answered: every send must end.
    for _ in 0..40 {
        w.take_transmits(true);
        w.now += Duration::from_millis(10_000);
        w.s.handle_timeout(w.now);
        w.events();
        w.check();
    }
    let open: Vec<_> = w.started.difference(&w.ended).collect();
    assert!(open.is_empty(), "sends never ended: {open:?}");
    assert!(w.calls.is_empty(), "calls never ended: {:?}", w.calls);
    assert!(w.s.can_send());
});
