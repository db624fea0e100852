//! The producer state machine as a runtime drives it, with a hostile broker and a hostile
//! clock: arbitrary broker bytes and time steps go through `FrameReader` → `CommandHeader` →
//! `PendingTable::complete` → `parse_send_response` → `SendPlan::handle_outcome` /
//! `handle_timeout`, with the shared `FaultTable` and `QueueCounter` lent to every plan.
//!
//! Input: byte 0 = profile (low 2 bits: Plain, Java49, Java5, Adaptive), retry times (bits
//! 2..4), mode (bits 4..6: Sync, Async, Oneway); byte 1 = send timeout / 16 ms. Then a list of
//! operations, each an opcode byte and its operands:
//! - `0`: start a send (at most [`MAX_SENDS`] live);
//! - `1 d`: advance the clock by `d²` ms, expire table entries (→ `handle_timeout`);
//! - `2 n bytes…`: `n` raw broker bytes into the frame reader (a reader error loses the
//!   connection);
//! - `3 c o q`: a well-formed response with code `CODES[c]` for the `o`-th request in flight
//!   (or an unknown opaque), with or without the send-response fields (bit 7 of `q`);
//! - `4`: the connection is lost (every entry drained → `ConnectionClosed`);
//! - `5 o`: the caller of the `o`-th request gives up (cancel; the send is abandoned);
//! - `6`: the same response twice (a duplicate).
//!
//! Invariants: no panic; every send ends exactly once (a `Done` step, or abandonment), and a
//! plan's later steps repeat its result; attempts never exceed the budget; every table entry
//! belongs to a live send's current attempt and the table never exceeds its capacity; the
//! fault table stays within its capacity; at the end, once the clock passes every deadline,
//! every send has ended and the table is empty.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmq_core::fault::FaultTable;
use rmq_core::pending::{OpaqueGen, PendingTable};
use rmq_core::producer::{SendResponse, parse_send_response};
use rmq_core::retry::{
    AttemptOutcome, RetryConfig, SendEnv, SendMode, SendPlan, Step, TransportError,
};
use rmq_core::select::{PublishQueue, QueueCounter};
use rmq_core::time::{Duration, Instant};
use rmq_core::wire::{CommandHeader, FrameReader, Scratch};

const MAX_SENDS: usize = 6;
const TABLE: usize = 4;
const FAULTS: usize = 4;
const RX_BUF: usize = 512;
const CONN: u32 = 7;
const CODES: [i32; 16] = [
    0, 1, 2, 10, 11, 12, 13, 14, 16, 17, 25, 204, 205, 1500, -1, 999,
];

struct Send {
    plan: SendPlan<u16>,
    /// Opaque of the attempt in flight (registered in the table), if any.
    opaque: Option<i32>,
    ended: bool,
    max_attempts: u8,
}

#[derive(Clone, Copy)]
enum Event {
    Start,
    Outcome(AttemptOutcome),
    Timeout,
}

struct World {
    cfg: RetryConfig,
    queues: [PublishQueue<u16>; 6],
    faults: FaultTable<u16, FAULTS>,
    counter: QueueCounter,
    table: PendingTable<usize, TABLE>,
    ids: OpaqueGen,
    reader: FrameReader<Vec<u8>>,
    sends: Vec<Send>,
    now: Instant,
    entropy: u32,
}

impl World {
    /// Runs one plan transition and applies its step (registering a new attempt).
    fn step(&mut self, i: usize, ev: Event) {
        self.entropy = self
            .entropy
            .wrapping_mul(1_103_515_245)
            .wrapping_add(12_345);
        let now = self.now;
        let mut env = SendEnv {
            queues: &self.queues,
            table: &mut self.faults,
            counter: &mut self.counter,
            entropy: self.entropy,
        };
        let s = &mut self.sends[i];
        let step = match ev {
            Event::Start => s.plan.start(now, &mut env),
            Event::Outcome(o) => s.plan.handle_outcome(now, o, &mut env),
            Event::Timeout => s.plan.handle_timeout(now, &mut env),
        };
        assert!(self.faults.len() <= self.faults.capacity());
        let s = &mut self.sends[i];
        match step {
            Step::Send(att) => {
                assert!(!s.ended, "a send that ended issued an attempt");
                assert!(
                    att.number <= s.max_attempts,
                    "attempt {} over the budget {}",
                    att.number,
                    s.max_attempts
                );
                assert!(att.deadline >= now);
                assert!(
                    s.opaque.is_none(),
                    "a new attempt while the previous one is in the table"
                );
                if self.cfg.mode == SendMode::Oneway {
                    // Written at once (no table entry).
                    let out = AttemptOutcome::Written;
                    self.step(i, Event::Outcome(out));
                    return;
                }
                let opaque = self.ids.next(&self.table);
                match self.table.insert(opaque, CONN, att.deadline, i) {
                    Ok(()) => s.opaque = Some(opaque),
                    Err(_) => {
                        // Table full: the runtime fails the write.
                        let out = AttemptOutcome::Transport(TransportError::WriteFailed);
                        self.step(i, Event::Outcome(out));
                    }
                }
            }
            Step::Wait => {}
            Step::Done(r) => {
                if s.ended {
                    assert_eq!(
                        s.plan.result(),
                        Some(r),
                        "a finished plan changed its result"
                    );
                } else {
                    s.ended = true;
                    assert_eq!(s.plan.result(), Some(r));
                    assert!(
                        s.opaque.is_none(),
                        "a send ended with its request still in the table"
                    );
                    let attempts = match r {
                        Ok(sent) => sent.attempts,
                        Err(e) => e.attempts(),
                    };
                    assert!(attempts <= s.max_attempts);
                }
            }
        }
    }

    /// The request `opaque` ended with `outcome` (its table entry already taken out).
    fn finish_request(&mut self, i: usize, opaque: i32, outcome: AttemptOutcome) {
        let s = &mut self.sends[i];
        assert_eq!(
            s.opaque,
            Some(opaque),
            "the table handed out a request that is not current"
        );
        assert!(!s.ended);
        s.opaque = None;
        self.step(i, Event::Outcome(outcome));
    }

    fn handle_response(&mut self, h: &CommandHeader<'_>) {
        if !h.is_response() {
            return;
        }
        let Some(i) = self.table.complete(h.opaque()) else {
            return; // late, duplicate or unknown: dropped
        };
        let mut sbuf = [0u8; 256];
        let mut scratch = Scratch::new(&mut sbuf);
        let code = match parse_send_response(h, &mut scratch) {
            Ok(SendResponse::Stored { code, queue_id, .. }) => {
                let _ = queue_id;
                code
            }
            Ok(SendResponse::Rejected { code }) => code,
            // A status without its fields: the runtime reports the code (and then finds no
            // stored result).
            Err(_) => h.code(),
        };
        self.finish_request(i, h.opaque(), AttemptOutcome::Response(code));
    }

    /// Feeds broker bytes; a reader or header error loses the connection.
    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let n = match self.reader.feed(bytes) {
                Ok(n) => n,
                Err(_) => {
                    self.lose_connection();
                    return;
                }
            };
            bytes = &bytes[n..];
            let frame_copy = self.reader.take_frame().map(|f| f.into_inner().to_vec());
            match frame_copy {
                Some(frame) => {
                    let f = rmq_core::wire::Frame::new_unchecked(&frame[..]);
                    match CommandHeader::parse(&f) {
                        Ok(h) => self.handle_response(&h),
                        Err(_) => {
                            self.lose_connection();
                            return;
                        }
                    }
                }
                None if n == 0 => return,
                None => {}
            }
        }
    }

    fn lose_connection(&mut self) {
        while let Some((opaque, i)) = self.table.drain_connection(CONN) {
            self.finish_request(
                i,
                opaque,
                AttemptOutcome::Transport(TransportError::ConnectionClosed),
            );
        }
        self.reader = FrameReader::new(vec![0u8; RX_BUF]);
    }

    fn expire(&mut self) {
        while let Some((opaque, i)) = self.table.poll_expired(self.now) {
            let s = &mut self.sends[i];
            assert_eq!(s.opaque, Some(opaque));
            s.opaque = None;
            self.step(i, Event::Timeout);
        }
    }

    fn nth_in_flight(&self, o: u8) -> Option<(usize, i32)> {
        let live: Vec<(usize, i32)> = self
            .sends
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.opaque.map(|op| (i, op)))
            .collect();
        if live.is_empty() {
            return None;
        }
        live.get(usize::from(o) % (live.len() + 1)).copied()
    }

    fn check(&self) {
        assert!(self.table.len() <= TABLE);
        let live = self.sends.iter().filter(|s| s.opaque.is_some()).count();
        assert_eq!(
            self.table.len(),
            live,
            "table entries and current attempts disagree"
        );
        for s in &self.sends {
            if let Some(op) = s.opaque {
                assert!(self.table.contains(op));
                assert!(!s.ended);
            }
        }
    }
}

fn response_frame(code: i32, opaque: i32, with_fields: bool, q: u8) -> Vec<u8> {
    let fields = if with_fields {
        format!(
            ",\"extFields\":{{\"msgId\":\"7F000001000022B80000000000000000\",\"queueId\":\"{}\",\"queueOffset\":\"{}\"}}",
            q & 3,
            q
        )
    } else {
        String::new()
    };
    let h = format!("{{\"code\":{code},\"flag\":1,\"opaque\":{opaque}{fields}}}");
    let mut out = Vec::new();
    out.extend_from_slice(&((4 + h.len()) as u32).to_be_bytes());
    out.extend_from_slice(&(h.len() as u32).to_be_bytes());
    out.extend_from_slice(h.as_bytes());
    out
}

fuzz_target!(|data: &[u8]| {
    let [cfg_byte, timeout, ops @ ..] = data else {
        return;
    };
    let mode = match (cfg_byte >> 4) & 3 {
        0 | 3 => SendMode::Sync,
        1 => SendMode::Async,
        _ => SendMode::Oneway,
    };
    let mut cfg = match cfg_byte & 3 {
        0 => RetryConfig::plain(mode),
        1 => RetryConfig::java49(mode),
        2 => RetryConfig::java5(mode),
        _ => RetryConfig::adaptive(mode),
    };
    cfg.retry_times_when_send_failed = (cfg_byte >> 2) & 3;
    cfg.retry_times_when_send_async_failed = (cfg_byte >> 2) & 3;
    cfg.send_timeout = Duration::from_millis(u64::from(*timeout) * 16);
    let q = |b: u16, id: i32| PublishQueue {
        broker: b,
        queue_id: id,
    };
    let mut w = World {
        cfg,
        queues: [q(0, 0), q(0, 1), q(1, 0), q(1, 1), q(2, 0), q(2, 1)],
        faults: FaultTable::new(cfg.profile.update_rule()),
        counter: QueueCounter::new(u32::from(*timeout)),
        table: PendingTable::new(),
        ids: OpaqueGen::new(1),
        reader: FrameReader::new(vec![0u8; RX_BUF]),
        sends: Vec::new(),
        now: Instant::from_millis(1_000),
        entropy: 0x9e37_79b9,
    };
    let mut it = ops.iter().copied();
    while let Some(op) = it.next() {
        match op % 7 {
            0 => {
                if w.sends.iter().filter(|s| !s.ended).count() < MAX_SENDS && w.sends.len() < 64 {
                    let plan = SendPlan::new(w.now, w.cfg);
                    w.sends.push(Send {
                        plan,
                        opaque: None,
                        ended: false,
                        max_attempts: w.cfg.max_attempts(),
                    });
                    let i = w.sends.len() - 1;
                    w.step(i, Event::Start);
                }
            }
            1 => {
                let d = u64::from(it.next().unwrap_or(0));
                w.now += Duration::from_millis(d * d);
                w.expire();
            }
            2 => {
                let n = usize::from(it.next().unwrap_or(0));
                let bytes: Vec<u8> = it.by_ref().take(n).collect();
                w.feed(&bytes);
            }
            3 | 6 => {
                let c = it.next().unwrap_or(0);
                let o = it.next().unwrap_or(0);
                let qb = it.next().unwrap_or(0);
                let opaque = match w.nth_in_flight(o) {
                    Some((_, op)) => op,
                    None => i32::from(o) + 100_000,
                };
                let f = response_frame(
                    CODES[usize::from(c) % CODES.len()],
                    opaque,
                    qb & 0x80 == 0,
                    qb,
                );
                w.feed(&f);
                if op % 7 == 6 {
                    w.feed(&f);
                }
            }
            4 => w.lose_connection(),
            _ => {
                let o = it.next().unwrap_or(0);
                if let Some((i, op)) = w.nth_in_flight(o) {
                    assert_eq!(w.table.cancel(op), Some(i));
                    let s = &mut w.sends[i];
                    s.opaque = None;
                    // The caller dropped its future: the send is abandoned, and ends here.
                    assert!(!s.ended);
                    s.ended = true;
                }
            }
        }
        w.check();
    }
    // Drain: the clock passes every deadline; everything ends.
    for _ in 0..16 {
        w.now += Duration::from_millis(60_000);
        w.expire();
        w.check();
    }
    assert!(w.table.is_empty(), "requests left in the table");
    for (i, s) in w.sends.iter().enumerate() {
        assert!(s.ended, "send {i} never ended");
    }
});
