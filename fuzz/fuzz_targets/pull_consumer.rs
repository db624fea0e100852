//! The pull consumer on a client session, as a runtime drives it, against hostile brokers and
//! a hostile clock: arbitrary answers (well-formed or raw bytes) to its consumer lists, offset
//! queries, pulls and commits, lost requests, acknowledgements, rebalances, time steps, stop.
//!
//! Input: a mode byte (clustering, orderly, broadcasting), then operations, each an opcode byte
//! (mod 10) and its operands:
//! - `0 d`: advance the clock by `d²` ms, `handle_timeout`, take every request due;
//! - `1 i c x k`: answer the `i`-th request in flight: a consumer list naming us or not
//!   (`x`), an offset `x`, a pull with code `CODES[c]`, next offset `x` and `k % 6` records
//!   (tags alternate), or a commit with code `CODES[c]`;
//! - `2 i n bytes…`: `n` raw bytes from the `i`-th request's broker (an error closes it; a
//!   request is acted on as the core client does);
//! - `3 i`: the `i`-th request in flight gets no answer (`CallFailed`);
//! - `4 i`: acknowledge the `i`-th delivered message;
//! - `5`: NOTIFY_CONSUMER_IDS_CHANGED;
//! - `6`: commit now;
//! - `7`: stop;
//! - `8 i l`: nack the `i`-th delivered message with delay level `l` (its send-back is answered
//!   like any request by `1`/`2`/`3`);
//! - `9 i`: orderly: `begin` the `i`-th delivered message's queue, acknowledge it, `end`.
//!
//! Broadcasting offsets asked for (`LoadOffset`) are answered at once, alternately with a
//! stored offset and with none; lock requests are answered by `1` with an empty set or (code 0
//! with `x` odd) every queue.
//!
//! Invariants: no panic; the consumer's bookkeeping holds after every operation
//! (`check_invariants`); a message is delivered only for a queue owned at that moment, and
//! never twice under one lease; after `stop`, nothing but commits and send-backs is requested;
//! every send-back outcome answers exactly one accepted nack.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use rmq_core::consumer::MessageModel;
use rmq_core::message::stored::MessageVersion;
use rmq_core::message::{StoredMessage, SysFlag};
use rmq_core::pull_consumer::{Delivery, PullConfig, PullConsumer, PullEvent, QueueKey};
use rmq_core::send_back::Nack;
use rmq_core::session::{Config, Incoming, Outbound, Peer, SendId, Session, Transmit};
use rmq_core::time::{Duration, Instant};
use rmq_core::transport::TransportError;
use rmq_core::wire::RequestCode;
use rmq_fuzz::{next_byte as next, response};

type S = Session<3, 3, 8, 16, 2, 1024>;
type C = PullConsumer<2, 4, 8, 8, 4, 8, 8>;

const ME: &str = "10.0.0.2@fuzz";
const CODES: [i32; 8] = [0, 1, 19, 20, 21, 22, 215, 24];
const ROUTE: &str = r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.3:10911"},"brokerName":"a","cluster":"c"},{"brokerAddrs":{"0":"10.0.0.2:10911"},"brokerName":"b","cluster":"c"}],"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":3,"topicSysFlag":0,"writeQueueNums":3},{"brokerName":"b","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}]}"#;

struct NoLend;
impl Outbound for NoLend {
    fn properties(&self, _: SendId) -> &str {
        ""
    }
}

fn records(from: i64, k: u8) -> Vec<u8> {
    let host = core::net::SocketAddr::from(([10, 0, 0, 1], 10911));
    let mut out = Vec::new();
    for i in 0..i64::from(k % 6) {
        let props: &[u8] = if i % 2 == 0 {
            b"TAGS\x01A\x02"
        } else {
            b"TAGS\x01B\x02"
        };
        let m = StoredMessage {
            version: MessageVersion::V1,
            body_crc: 0,
            queue_id: 0,
            flag: 0,
            queue_offset: from + i,
            physical_offset: 0,
            sys_flag: SysFlag(0),
            born_timestamp: 0,
            born_host: host,
            store_timestamp: 0,
            store_host: host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: b"x",
            topic: "T",
            raw_properties: props,
        };
        let mut buf = vec![0u8; m.encoded_len().unwrap_or(0)];
        if m.encode(&mut buf).is_ok() {
            out.extend_from_slice(&buf);
        }
    }
    out
}

struct World {
    s: S,
    c: C,
    now: Instant,
    /// Requests in flight: transmit and request code.
    calls: Vec<(Transmit, i32)>,
    delivered: Vec<(QueueKey, u32, i64)>,
    seen: HashSet<(QueueKey, u32, i64)>,
    /// Nacks accepted and not yet answered.
    nacked: HashSet<(QueueKey, u32, i64)>,
    stopped: bool,
}

impl World {
    fn take(&mut self) {
        self.c.handle_timeout(self.now);
        let mut buf = [0u8; 1024];
        while let Some(tx) = self.c.poll_call(self.now, &mut self.s, &mut buf, &NoLend) {
            let code = rmq_core::wire::Frame::new_checked(&buf[..tx.len])
                .ok()
                .and_then(|f| {
                    rmq_core::wire::CommandHeader::parse(&f)
                        .ok()
                        .map(|h| h.code())
                })
                .unwrap_or(-1);
            if self.stopped {
                assert!(
                    code == RequestCode::UPDATE_CONSUMER_OFFSET.0
                        || code == RequestCode::CONSUMER_SEND_MSG_BACK.0
                        || code == RequestCode::UNLOCK_BATCH_MQ.0,
                    "{code} after stop"
                );
            }
            self.calls.push((tx, code));
        }
        // The session's own requests (route refreshes) are answered with the route.
        while let Some(tx) = self.s.poll_transmit(self.now, &mut buf, &NoLend) {
            if matches!(tx.peer, Peer::NameServer(_)) {
                let f = response(0, tx.opaque, &[], ROUTE.as_bytes());
                let _ = self.s.handle_frame(self.now, tx.peer, &f);
            }
        }
        while self.s.poll_event().is_some() {}
    }

    fn answer(&mut self, peer: Peer, frame: &[u8]) {
        match self.s.handle_frame(self.now, peer, frame) {
            Ok(Incoming::Response(op)) => {
                let owned: Vec<(QueueKey, u32)> =
                    self.c.owned().map(|o| (o.queue, o.lease)).collect();
                let (delivered, seen) = (&mut self.delivered, &mut self.seen);
                let mut deliver = |d: Delivery<'_, '_>| {
                    assert!(
                        owned.contains(&(d.queue, d.lease)),
                        "delivered for a queue not owned"
                    );
                    let k = (d.queue, d.lease, d.message.queue_offset);
                    assert!(seen.insert(k), "delivered twice under one lease");
                    delivered.push(k);
                };
                let _ = self
                    .c
                    .handle_response(self.now, &self.s, op, frame, &mut deliver);
            }
            Err(_) => self
                .s
                .handle_closed(self.now, peer, TransportError::Malformed),
            Ok(Incoming::Request { code, .. }) => {
                // Whatever a broker asks (running info, offset resets, unknown codes): what
                // the core client does with each (rmq_core::client), never a panic.
                let mut buf = [0u8; 8192];
                let extra = [("k", "v")];
                match RequestCode(code) {
                    RequestCode::NOTIFY_CONSUMER_IDS_CHANGED => self.c.notify_ids_changed(self.now),
                    RequestCode::RESET_CONSUMER_CLIENT_OFFSET => {
                        if let Ok(f) = rmq_core::wire::Frame::new_checked(frame) {
                            self.c.reset_offsets(self.now, &self.s, f.body_ref());
                        }
                    }
                    _ => {
                        let _ = self
                            .c
                            .running_info(self.now, 1, &self.s, &extra, 5, &mut buf);
                    }
                }
            }
            Ok(_) => {}
        }
        self.events();
    }

    fn events(&mut self) {
        self.calls.retain(|(t, _)| self.s.is_live(t.opaque));
        while let Some(e) = self.s.poll_event() {
            if let rmq_core::session::Event::CallFailed { opaque, .. } = e {
                let _ = self.c.handle_call_failed(self.now, &self.s, opaque);
            }
        }
        while let Some(e) = self.c.poll_event() {
            match e {
                PullEvent::SentBack {
                    queue,
                    lease,
                    offset,
                }
                | PullEvent::SendBackFailed {
                    queue,
                    lease,
                    offset,
                } => assert!(
                    self.nacked.remove(&(queue, lease, offset)),
                    "an outcome of no nack"
                ),
                PullEvent::LoadOffset { queue, lease } => {
                    let stored = (lease % 2 == 0).then_some(i64::from(lease));
                    if !self.c.set_local_offset(self.now, queue, lease, stored) {
                        // Only a queue that went away meanwhile refuses it.
                        assert!(!self.c.is_current(queue, lease), "offset refused");
                    }
                }
                PullEvent::Persist { .. } => {}
                // Milestones are reported when reached, never early.
                PullEvent::Rebalanced => {
                    assert!(
                        !self.c.rebalancing() && self.c.starting() == 0,
                        "early round"
                    );
                }
                PullEvent::Committed => assert_eq!(self.c.commits_pending(), 0, "early commit"),
                PullEvent::Locked { queue, lease } => assert!(
                    self.c.owned().any(|o| o.queue == queue && o.lease == lease),
                    "a lock of a queue not owned"
                ),
            }
        }
        assert_eq!(self.nacked.len(), self.c.sends_back_pending());
    }
}

fuzz_target!(|data: &[u8]| {
    let mut ops = data;
    let mut cfg = Config::new(1, "", ME);
    cfg.consumer_group = Some("g");
    cfg.heartbeat = None;
    let Ok(mut s) = S::new(&cfg, Instant::ZERO) else {
        return;
    };
    let mut pc = PullConfig::new("g", ME);
    match next(&mut ops) % 3 {
        0 => {}
        1 => pc.orderly = true,
        _ => pc.model = MessageModel::Broadcasting,
    }
    let Ok(mut c) = C::new(&pc, Instant::ZERO) else {
        return;
    };
    // `%RETRY%g` is subscribed with it.
    if c.subscribe(Instant::ZERO, &mut s, "T", "A").is_err() {
        return;
    }
    let mut w = World {
        s,
        c,
        now: Instant::ZERO,
        calls: Vec::new(),
        delivered: Vec::new(),
        seen: HashSet::new(),
        nacked: HashSet::new(),
        stopped: false,
    };
    w.take();
    while !ops.is_empty() {
        match next(&mut ops) % 10 {
            0 => {
                let d = u64::from(next(&mut ops));
                w.now += Duration::from_millis(d * d);
                w.take();
            }
            1 => {
                let i = usize::from(next(&mut ops));
                let code = CODES[usize::from(next(&mut ops)) % CODES.len()];
                let x = next(&mut ops);
                let k = next(&mut ops);
                let Some(&(t, req)) = w.calls.get(i % w.calls.len().max(1)) else {
                    continue;
                };
                let xs = i64::from(x).to_string();
                let frame = match RequestCode(req) {
                    RequestCode::GET_CONSUMER_LIST_BY_GROUP => {
                        let ids = if x & 1 == 0 {
                            format!(r#"{{"consumerIdList":["{ME}","10.0.0.9@b"]}}"#)
                        } else {
                            r#"{"consumerIdList":["10.0.0.9@b"]}"#.to_owned()
                        };
                        response(code, t.opaque, &[], ids.as_bytes())
                    }
                    RequestCode::LOCK_BATCH_MQ => {
                        let mut all = String::from(r#"{"lockOKMQSet":["#);
                        for topic in ["T", "%RETRY%g"] {
                            for (b, n) in [("a", 3), ("b", 2)] {
                                for q in 0..n {
                                    all.push_str(&format!(
                                        r#"{{"brokerName":"{b}","queueId":{q},"topic":"{topic}"}},"#
                                    ));
                                }
                            }
                        }
                        all.pop();
                        all.push_str("]}");
                        let body = if x & 1 == 1 {
                            all.as_str()
                        } else {
                            r#"{"lockOKMQSet":[]}"#
                        };
                        response(code, t.opaque, &[], body.as_bytes())
                    }
                    RequestCode::QUERY_CONSUMER_OFFSET | RequestCode::GET_MAX_OFFSET => {
                        response(code, t.opaque, &[("offset", &xs)], b"")
                    }
                    RequestCode::PULL_MESSAGE => {
                        let ext = [
                            // Now and then a broker sends the next pull to the slave.
                            ("suggestWhichBrokerId", if k % 7 == 3 { "1" } else { "0" }),
                            ("nextBeginOffset", xs.as_str()),
                            ("minOffset", "0"),
                            ("maxOffset", "300"),
                        ];
                        let from = i64::from(x).saturating_sub(i64::from(k % 6));
                        response(code, t.opaque, &ext, &records(from, k))
                    }
                    _ => response(code, t.opaque, &[], b""),
                };
                w.answer(t.peer, &frame);
            }
            2 => {
                let i = usize::from(next(&mut ops));
                let n = usize::from(next(&mut ops)).min(ops.len());
                let (bytes, rest) = ops.split_at(n);
                ops = rest;
                let Some(&(t, _)) = w.calls.get(i % w.calls.len().max(1)) else {
                    continue;
                };
                w.answer(t.peer, bytes);
            }
            3 => {
                let i = usize::from(next(&mut ops));
                if w.calls.is_empty() {
                    continue;
                }
                let (t, _) = w.calls.remove(i % w.calls.len());
                w.s.handle_closed(w.now, t.peer, TransportError::ConnectionClosed);
                w.events();
            }
            4 => {
                let i = usize::from(next(&mut ops));
                if let Some(&(q, l, o)) = w.delivered.get(i % w.delivered.len().max(1)) {
                    let _ = w.c.ack(w.now, q, l, o);
                }
            }
            5 => {
                w.c.notify_ids_changed(w.now);
            }
            6 => w.c.commit_now(),
            8 => {
                let i = usize::from(next(&mut ops));
                let level = i32::from(next(&mut ops) as i8);
                if let Some(&(q, l, o)) = w.delivered.get(i % w.delivered.len().max(1)) {
                    let n = Nack {
                        offset: o,
                        commit_log_offset: o,
                        msg_id: "ID",
                        topic: "T",
                        delay_level: level,
                        reconsume_times: 0,
                        body_len: 2,
                        flag: 0,
                    };
                    if w.c.nack(q, l, &n).is_ok() {
                        assert!(w.nacked.insert((q, l, o)), "accepted twice");
                    }
                }
            }
            9 => {
                let i = usize::from(next(&mut ops));
                if let Some(&(q, l, o)) = w.delivered.get(i % w.delivered.len().max(1))
                    && w.c.begin(w.now, q, l)
                {
                    let _ = w.c.ack(w.now, q, l, o);
                    w.c.end(q, l);
                }
                w.c.check_invariants().unwrap();
            }
            _ => {
                w.c.stop();
                w.stopped = true;
            }
        }
        if let Err(e) = w.c.check_invariants() {
            panic!("{e}");
        }
        if let Err(e) = w.s.check_invariants() {
            panic!("{e}");
        }
    }
});
