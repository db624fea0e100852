//! Auto-batching (opt-in, like Java 5.x `autoBatch` / `ProduceAccumulator`): sync sends of small
//! messages to one topic leave together as one SEND_BATCH_MESSAGE. Each caller still gets its
//! own [`SendResult`] (its own msgId, the batch's queue, its own queue offset: the batch's first
//! plus its position) or a copy of the batch's error.
//!
//! When a batch leaves is self-clocked rather than a fixed linger: while fewer than
//! [`AutoBatch::max_in_flight`] batches of the topic are in flight, a message leaves at once
//! (with whatever waits); otherwise it waits for one of them to end, for the batch to reach
//! [`AutoBatch::max_bytes`] or [`AutoBatch::max_messages`], or for [`AutoBatch::hold`],
//! whichever comes first. So a lone message is not delayed, and under load each round trip
//! carries everything that arrived during the previous one. (A first version lingered the full
//! hold time unless the batch filled, as Java's accumulator does: 64 sync senders of 128 B then
//! made 5.4k msgs/s against 20.9k unbatched, every round waiting 10 ms; BENCHMARKS.md.)
//!
//! What is not batched (sent as usual): messages with a delay level, bodies at or above the
//! compression threshold or `max_bytes` (a batch is never compressed), and sends other than
//! [`Producer::send`](crate::Producer::send). A batch that the core's checks refuse (one
//! invalid message) is not sent as such: each of its messages is then sent alone, so only the
//! invalid one fails.

use std::collections::HashMap;
use std::mem;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::message::{Message, SendError, SendResult};

/// Auto-batching settings ([`ProducerBuilder::auto_batch`](crate::ProducerBuilder::auto_batch)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoBatch {
    /// A batch leaves once its bodies reach this many bytes (Java `batchMaxBytes`, 32 KiB).
    pub max_bytes: usize,
    /// ... or once it holds this many messages.
    pub max_messages: usize,
    /// ... or this long after its first message arrived (Java `batchMaxDelayMs`, 10 ms).
    pub hold: Duration,
    /// Batches of one topic in flight before new messages wait (2).
    pub max_in_flight: usize,
}

impl Default for AutoBatch {
    fn default() -> Self {
        AutoBatch {
            max_bytes: 32 * 1024,
            max_messages: 256,
            hold: Duration::from_millis(10),
            max_in_flight: 2,
        }
    }
}

/// A caller waiting in a batch.
pub(crate) type Waiter = (Message, oneshot::Sender<Result<SendResult, SendError>>);

/// The messages waiting for one topic.
#[derive(Default)]
struct Pending {
    waiters: Vec<Waiter>,
    bytes: usize,
    /// Bumped whenever the batch is taken, so that a hold timer of an earlier batch does not
    /// take a later one early.
    generation: u64,
    /// Batches of the topic being sent.
    in_flight: usize,
}

impl Pending {
    fn take(&mut self) -> Vec<Waiter> {
        self.generation += 1;
        self.bytes = 0;
        self.in_flight += 1;
        mem::take(&mut self.waiters)
    }
}

/// The batches being gathered, by topic.
#[derive(Default)]
pub(crate) struct Batcher {
    topics: Mutex<HashMap<String, Pending>>,
}

/// What [`Batcher::add`] asks the caller to do.
pub(crate) enum Added {
    /// Send these now (a batch slot was free, or the batch is full), then [`Batcher::done`].
    Send(Vec<Waiter>),
    /// The first message to wait: take the batch after the hold time (generation given).
    Arm(u64),
    /// Joined a batch that is already timed.
    Joined,
}

impl Batcher {
    pub(crate) fn add(&self, cfg: &AutoBatch, w: Waiter) -> Added {
        let mut topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        let p = topics.entry(w.0.topic.clone()).or_default();
        p.bytes += w.0.body.len();
        p.waiters.push(w);
        let full = p.bytes >= cfg.max_bytes || p.waiters.len() >= cfg.max_messages;
        if full || p.in_flight < cfg.max_in_flight {
            return Added::Send(p.take());
        }
        if p.waiters.len() == 1 {
            Added::Arm(p.generation)
        } else {
            Added::Joined
        }
    }

    /// The batch of `topic` if it is still generation `generation` (its hold time is over).
    pub(crate) fn take(&self, topic: &str, generation: u64) -> Vec<Waiter> {
        let mut topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        match topics.get_mut(topic) {
            Some(p) if p.generation == generation && !p.waiters.is_empty() => p.take(),
            _ => Vec::new(),
        }
    }

    /// A batch of `topic` ended: the messages that waited for it, to send now (then `done`
    /// again), or nothing.
    pub(crate) fn done(&self, topic: &str) -> Vec<Waiter> {
        let mut topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        let Some(p) = topics.get_mut(topic) else {
            return Vec::new();
        };
        p.in_flight = p.in_flight.saturating_sub(1);
        if p.waiters.is_empty() {
            Vec::new()
        } else {
            p.take()
        }
    }
}

/// Each caller's result from the batch's: its own msgId (`ids[i]`), queue offset `first + i`,
/// and its offsetMsgId when the broker's comma-joined list reached the producer whole (the
/// session keeps its first 56 characters: the first message's, and for IPv4 brokers nothing
/// more).
pub(crate) fn split(r: &SendResult, ids: &[&str]) -> Vec<SendResult> {
    let mut offset_ids = r.offset_msg_id.split(',');
    let first_len = r.offset_msg_id.split(',').next().map_or(0, str::len);
    ids.iter()
        .enumerate()
        .map(|(i, id)| SendResult {
            status: r.status,
            msg_id: (*id).to_owned(),
            offset_msg_id: offset_ids
                .next()
                .filter(|o| o.len() == first_len)
                .unwrap_or("")
                .to_owned(),
            queue: r.queue.clone(),
            queue_offset: r.queue_offset + i as i64,
            attempts: r.attempts,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SendStatus;
    use crate::message::MessageQueue;

    fn waiter(topic: &str, n: usize) -> (Waiter, oneshot::Receiver<Result<SendResult, SendError>>) {
        let (tx, rx) = oneshot::channel();
        ((Message::new(topic, vec![0u8; n]), tx), rx)
    }

    #[test]
    fn batches_leave_when_a_slot_frees_when_full_or_when_timed() {
        let cfg = AutoBatch {
            max_bytes: 100,
            max_messages: 3,
            hold: Duration::from_millis(10),
            max_in_flight: 1,
        };
        let b = Batcher::default();
        // Idle topic: the first message leaves at once.
        assert!(matches!(b.add(&cfg, waiter("A", 10).0), Added::Send(v) if v.len() == 1));
        // One batch in flight: the next ones wait (the first of them arms the timer).
        assert!(matches!(b.add(&cfg, waiter("A", 10).0), Added::Arm(1)));
        assert!(matches!(b.add(&cfg, waiter("A", 10).0), Added::Joined));
        // Another topic has its own slot.
        assert!(matches!(b.add(&cfg, waiter("B", 10).0), Added::Send(_)));
        // The batch in flight ends: the two waiting leave together, and it stays busy.
        assert_eq!(b.done("A").len(), 2);
        // The earlier timer finds a later generation: it takes nothing.
        assert!(b.take("A", 1).is_empty());
        assert!(matches!(b.add(&cfg, waiter("A", 60).0), Added::Arm(2)));
        // 120 bytes fill the batch: it leaves although a batch is in flight.
        assert!(matches!(b.add(&cfg, waiter("A", 60).0), Added::Send(v) if v.len() == 2));
        assert!(matches!(b.add(&cfg, waiter("A", 1).0), Added::Arm(3)));
        assert_eq!(b.take("A", 3).len(), 1, "the hold time is over");
        assert!(b.done("A").is_empty() && b.done("A").is_empty() && b.done("A").is_empty());
        assert!(
            matches!(b.add(&cfg, waiter("A", 1).0), Added::Send(_)),
            "idle again"
        );
    }

    #[test]
    fn each_caller_gets_its_position() {
        let r = SendResult {
            status: SendStatus::SendOk,
            msg_id: "A,B,C".into(),
            offset_msg_id: format!("{},{}", "7F".repeat(16), "7E".repeat(11)),
            queue: MessageQueue {
                topic: "T".into(),
                broker_name: "broker-a".into(),
                queue_id: 2,
            },
            queue_offset: 40,
            attempts: 1,
        };
        let each = split(&r, &["A", "B", "C"]);
        assert_eq!(each.len(), 3);
        assert_eq!((each[2].msg_id.as_str(), each[2].queue_offset), ("C", 42));
        assert_eq!(each[0].offset_msg_id, "7F".repeat(16));
        assert_eq!(
            each[1].offset_msg_id, "",
            "cut short by the session: not handed out"
        );
        assert!(each.iter().all(|e| e.queue.queue_id == 2));
    }
}
