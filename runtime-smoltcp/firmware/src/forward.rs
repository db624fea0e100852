//! The store-and-forward gateway (feature `store-forward`): telemetry is generated at a fixed
//! rate (`rate=` messages per second, whatever the link does) into an
//! [`Outbox`](rmq_smoltcp::core::outbox::Outbox) of 200 messages that drops the oldest when
//! full, and the producer sends the outbox's oldest message whenever it can. A send that fails
//! in a way that may succeed later (transport, timeout, no route: the link or the broker is
//! down) keeps its message first in the outbox and is tried again after `backoff`; so messages
//! are stored in generation order, each exactly once as far as the client knows.
//!
//! Output lines besides the direct image's `OK`/`WARN`/`FAIL` (a `FAIL` is now a final
//! failure): `DROP <seq>` for a message the outbox dropped to make room (each at most once,
//! never the one being sent), `RETRY <seq> <cause> attempts=<n>` for a send kept for a later
//! try; `STATS` adds `dropped=`, `retries=`, `failed=` and `peak=` (most messages waiting at
//! once, the one in flight included).
//!
//! `batch=K` (1 to 8, default 1): up to K of the oldest waiting messages leave as one
//! SEND_BATCH_MESSAGE request (a backlog drains K per round trip); each still gets its own
//! line: `OK <seq> <queueId> <queueOffset> <msgId> <offsetMsgId> <broker>`, where the
//! offsetMsgId of a batch's later messages is `-` (the broker's answer lists them all, and
//! this image keeps only the first). A lone waiting message is sent as a single message.
//!
//! The ring stores what varies (keys and body, a compact JSON record); the tag is the same for
//! every message and is added at send time.

use rmq_smoltcp::core::outbox::{OutMessage, Outbox, Overflow, Verdict};
use rmq_smoltcp::core::time::{Duration, Instant};
use rmq_smoltcp::{Completion, Message, SendId, Stats, SubmitError};

use crate::{KEY, Line, Meter, Net, Out, Params, failure, key, now, stored, text};

/// What sends the outbox: the producer, or with the downlink the client that also consumes
/// the command topic.
pub(crate) trait Uplink {
    fn can_send(&self) -> bool;
    fn send(&mut self, t: Instant, m: &Message<'_>) -> Result<SendId, SubmitError>;
    fn send_batch(&mut self, t: Instant, m: &[Message<'_>]) -> Result<SendId, SubmitError>;
    fn stats(&self) -> Stats;
    /// One poll (`idle`: the telemetry is done): the deadline it asks for and a completion.
    fn poll(
        &mut self,
        out: &mut Out,
        net: &mut Net<'_>,
        t: Instant,
        idle: bool,
    ) -> (Option<Instant>, Option<Completion>);
    /// Whether the run goes on once the telemetry is done.
    fn busy(&self, _t: Instant) -> bool {
        false
    }
    /// Words `STATS` adds.
    fn report(&self, _l: &mut Line) {}
}

#[cfg(not(feature = "downlink"))]
impl Uplink for crate::Gateway {
    fn can_send(&self) -> bool {
        crate::Gateway::can_send(self)
    }
    fn send(&mut self, t: Instant, m: &Message<'_>) -> Result<SendId, SubmitError> {
        crate::Gateway::send(self, t, m)
    }
    fn send_batch(&mut self, t: Instant, m: &[Message<'_>]) -> Result<SendId, SubmitError> {
        crate::Gateway::send_batch(self, t, m)
    }
    fn stats(&self) -> Stats {
        crate::Gateway::stats(self)
    }
    fn poll(
        &mut self,
        _: &mut Out,
        net: &mut Net<'_>,
        t: Instant,
        _: bool,
    ) -> (Option<Instant>, Option<Completion>) {
        net.poll(self, t)
    }
}

/// Most messages per request (`batch=`).
pub(crate) const MAX_BATCH: u32 = 8;

/// Messages the outbox holds (those in flight are in the staging buffer, outside it).
const CAPACITY: usize = 200;
/// Ring bytes: 200 records of this image's largest (8 + 30-byte body = 38 B) and one more (a
/// record does not wrap around the ring's end) fit, so the count bounds the ring, not the
/// bytes. The key (`seq-<seq>`) is not stored: the outbox id is the seq.
const RING: usize = 201 * 38;
/// Staging: `MAX_BATCH` records of up to 48 bytes, each after its 4-byte length.
const STAGING: usize = MAX_BATCH as usize * 52;

/// Runs `p.count` messages through the outbox, then prints `STATS`.
pub(crate) fn run<U: Uplink>(out: &mut Out, p: &Params, producer: &mut U, net: &mut Net<'_>) {
    let ring = stat!([u8; RING] = const [0; RING]);
    // A batch's records, each after its 4-byte length.
    let staging = stat!([u8; STAGING] = const [0; STAGING]);
    let outbox = stat!(Outbox<'static, CAPACITY> = Outbox::new(&mut ring[..], &mut staging[..], Overflow::DropOldest));
    let period = Duration::from_millis(u64::from(1000 / p.rate));
    let (mut made, mut ok, mut peak) = (0u32, 0u32, 0usize);
    // The first seq and the count of the request in flight.
    let (mut in_flight, mut resume, mut due) = (None::<(u32, u32)>, Instant::ZERO, now());
    let mut m = Meter::default();
    while made < p.count || !outbox.is_empty() || producer.busy(now()) {
        let t0 = net.eth.free_run();
        let t = now();
        // Generation goes on at its rate whatever the uplink does.
        while made < p.count && t >= due {
            let seq = made;
            let mut body = Line::new();
            body.s(b"{\"seq\":")
                .u(seq.into())
                .s(b",\"t\":")
                .u((20 + seq % 7).into())
                .s(b".")
                .u((seq % 10).into())
                .s(b",\"h\":")
                .u((40 + seq % 13).into())
                .s(b"}");
            let msg = OutMessage {
                body: body.bytes(),
                tags: None,
                keys: None,
                flag: 0,
            };
            // Ids count pushes from 0, and every push succeeds (drop-oldest, records far
            // smaller than the ring), so an id is the message's seq.
            let pushed = outbox.push(&msg, |id| {
                out.line(Line::new().s(b"DROP ").u(id.0.into()));
            });
            if pushed.map(|id| id.0) != Ok(seq) {
                out.err(b"outbox refused a message");
            }
            made += 1;
            due = due.saturating_add(period);
            peak = peak.max(outbox.len());
        }
        if in_flight.is_none()
            && t >= resume
            && producer.can_send()
            && let Some(b) = outbox.current_batch(p.batch as usize)
        {
            let mut keys = [[0u8; KEY]; MAX_BATCH as usize];
            for ((id, _), k) in b.iter().zip(&mut keys) {
                key(id.0, k);
            }
            let mut msgs = [Message::default(); MAX_BATCH as usize];
            let mut n = 0;
            for (((_, o), slot), k) in b.iter().zip(&mut msgs).zip(&keys) {
                *slot = Message {
                    body: o.body,
                    tags: Some("telemetry"),
                    keys: Some(text(k)),
                    flag: o.flag,
                };
                n += 1;
            }
            m.start(t0);
            let sent = match &msgs[..n] {
                [one] => producer.send(t, one),
                more => producer.send_batch(t, more),
            };
            let first = b.first().0;
            if sent.is_ok() {
                in_flight = Some((first, n as u32));
            } else {
                outbox.finish(Verdict::Failed);
                for seq in first..first + n as u32 {
                    out.line(Line::new().s(b"FAIL ").u(seq.into()).s(b" submit-refused"));
                }
            }
        }
        let idle = made >= p.count && outbox.is_empty() && in_flight.is_none();
        let (next, done) = producer.poll(out, net, t, idle);
        let t1 = net.eth.free_run();
        m.poll(t0, t1);
        if let (Some(c), Some((first, n))) = (done, in_flight) {
            m.last = t1;
            in_flight = None;
            match &c.result {
                Ok(r) => {
                    outbox.finish(Verdict::Stored);
                    for i in 0..n {
                        stored(out, first + i, i, r);
                    }
                    ok += n;
                }
                Err(f) if f.is_retryable() => {
                    outbox.finish(Verdict::Retry);
                    resume = t + Duration::from_millis(p.backoff.into());
                    let mut l = Line::new();
                    l.s(b"RETRY ").u(first.into()).s(b" ");
                    failure(&mut l, f);
                    let n = producer.stats();
                    l.s(b" connects=")
                        .u(n.connects.into())
                        .s(b" connect_failures=")
                        .u(n.connect_failures.into())
                        .s(b" lost=")
                        .u(n.connections_lost.into())
                        .s(b" frames=")
                        .u(n.frames_sent.into())
                        .s(b"/")
                        .u(n.frames_received.into())
                        .s(b" t=")
                        .u(t.millis());
                    out.line(&mut l);
                }
                Err(f) => {
                    outbox.finish(Verdict::Failed);
                    for seq in first..first + n {
                        let mut l = Line::new();
                        l.s(b"FAIL ").u(seq.into()).s(b" ");
                        failure(&mut l, f);
                        out.line(&mut l);
                    }
                }
            }
            continue;
        }
        let generate = made < p.count && due <= now();
        if !generate && next.is_none_or(|d| d > now()) {
            // SysTick wakes it within 1 ms (retry back-off, generation).
            cortex_m::asm::wfi();
        }
    }
    let s = outbox.stats();
    m.report(out, p.count, ok, |l| {
        producer.report(l);
        l.s(b" dropped=")
            .u(s.dropped.into())
            .s(b" retries=")
            .u(s.retries.into())
            .s(b" failed=")
            .u(s.failed.into())
            .s(b" peak=")
            .u(peak as u64);
    });
}
