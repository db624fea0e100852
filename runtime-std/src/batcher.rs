//! Auto-batching (opt-in, like Java 5.x `autoBatch` / `ProduceAccumulator`): sync sends of small
//! messages to one topic leave together as one SEND_BATCH_MESSAGE. Each caller still gets its
//! own [`SendResult`] (its own msgId, the batch's queue, its own queue offset: the batch's first
//! plus its position) or a copy of the batch's error.
//!
//! When a batch leaves is the core's decision ([`rmq_core::autobatch::BatchClock`]:
//! self-clocked, a lone message never waits for a timer); this module keeps the waiting callers.
//!
//! What is not batched (sent as usual): messages with a delay level, bodies at or above the
//! compression threshold or `max_bytes` (a batch is never compressed), and sends other than
//! [`Producer::send`](crate::Producer::send). A batch that the core's checks refuse (one
//! invalid message) is not sent as such: each of its messages is then sent alone, so only the
//! invalid one fails.

use std::mem;
use std::sync::Mutex;
use std::time::Duration;

use rmq_core::autobatch::{BatchClock, BatchLimits, Join};
use tokio::sync::oneshot;

use crate::message::{Message, SendError, SendResult};
use rustc_hash::FxHashMap as FastMap;

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

impl AutoBatch {
    /// The core's limits of a batch.
    pub(crate) const fn limits(&self) -> BatchLimits {
        BatchLimits {
            max_bytes: self.max_bytes,
            max_messages: self.max_messages,
            max_in_flight: self.max_in_flight,
        }
    }
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

/// One topic's waiting callers and the core's clock of its batches.
#[derive(Default)]
struct Pending {
    waiters: Vec<Waiter>,
    clock: BatchClock,
}

impl Pending {
    fn add(&mut self, limits: &BatchLimits, w: Waiter) -> Added {
        let join = self.clock.join(limits, w.0.body.len());
        // Only a caller that starts a task needs the name (an empty `String` allocates nothing).
        let topic = match join {
            Join::Wait => String::new(),
            _ => w.0.topic.clone(),
        };
        self.waiters.push(w);
        match join {
            Join::Wait => Added::Joined,
            Join::Soon => Added::Soon(topic),
            Join::Arm(generation) => Added::Arm(topic, generation),
            Join::Send => Added::Send(topic, mem::take(&mut self.waiters)),
        }
    }
}

/// The batches being gathered, by topic.
#[derive(Default)]
pub(crate) struct Batcher {
    /// Keys are the application's topic names (never network bytes): the small hasher.
    topics: Mutex<FastMap<String, Pending>>,
}

/// What [`Batcher::add`] asks the caller to do.
pub(crate) enum Added {
    /// Send these (of this topic) now, then [`Batcher::done`] when they ended.
    Send(String, Vec<Waiter>),
    /// A batch slot is free: let the callers that are ready join (yield once), then
    /// [`Batcher::take`] this topic's batch and send that.
    Soon(String),
    /// The first message to wait: [`Batcher::expire`] after the hold time (topic and
    /// generation given).
    Arm(String, u64),
    /// Joined a batch that is already timed.
    Joined,
}

impl Batcher {
    pub(crate) fn add(&self, cfg: &AutoBatch, w: Waiter) -> Added {
        let limits = cfg.limits();
        let mut topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        // The topic's name is copied only for its first message and for the callers that
        // start a task (a send, a timer), not for those that join.
        if let Some(p) = topics.get_mut(&w.0.topic) {
            return p.add(&limits, w);
        }
        topics.entry(w.0.topic.clone()).or_default().add(&limits, w)
    }

    /// The batch of `topic` if its hold time (armed for `generation`) sends it.
    pub(crate) fn expire(&self, topic: &str, generation: u64) -> Vec<Waiter> {
        self.next(topic, |c| c.expire(generation))
    }

    /// The batch of `topic` after an [`Added::Soon`]: everyone who joined since, or nothing
    /// (it left already).
    pub(crate) fn take(&self, topic: &str) -> Vec<Waiter> {
        self.next(topic, BatchClock::take)
    }

    /// A batch of `topic` ended: the callers that waited for it, to send now (then `done`
    /// again), or nothing.
    pub(crate) fn done(&self, topic: &str) -> Vec<Waiter> {
        self.next(topic, BatchClock::done)
    }

    fn next(&self, topic: &str, go: impl FnOnce(&mut BatchClock) -> bool) -> Vec<Waiter> {
        let mut topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        let Some(p) = topics.get_mut(topic) else {
            return Vec::new();
        };
        if go(&mut p.clock) {
            mem::take(&mut p.waiters)
        } else {
            Vec::new()
        }
    }
}

/// Each caller's result from the batch's: its own msgId (`ids[i]`, moved in), and its queue
/// offset and offsetMsgId as the core reads them ([`rmq_core::producer::batch_members`]).
pub(crate) fn split(r: &SendResult, ids: Vec<String>) -> Vec<SendResult> {
    let members = rmq_core::producer::batch_members(&r.offset_msg_id, r.queue_offset);
    ids.into_iter()
        .zip(members)
        .map(|(id, (queue_offset, offset_msg_id))| SendResult {
            status: r.status,
            msg_id: id,
            offset_msg_id: offset_msg_id.to_owned(),
            queue: r.queue.clone(),
            queue_offset,
            attempts: r.attempts,
            // A batch has none (the broker gives none; its members are not timer messages).
            recall_handle: None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
