//! Queue selection over a route's publish-queue list.
//!
//! Read STRATEGY.md §2.3 (`selectOneMessageQueue` in 4.9.8 and 5.x) and §3
//! (`TopicPublishInfo`, `ThreadLocalIndex`) first. Every function here is a pure function of
//! (the publish-queue slice, the fault view, the last broker, a counter); randomness only
//! enters through [`QueueCounter`] seeds chosen by the runtime.
//!
//! ## Profiles
//!
//! - [`Profile::Plain`]: the Java default (latency switch off): round robin, avoiding the last
//!   broker on a retry.
//! - [`Profile::Java49`]: 4.9.8 with the latency switch on: the first available queue in round
//!   robin order (the last broker is *not* avoided, as in 4.8–4.9), else the
//!   `pickOneAtLeast` fallback. Unlike 4.9.7 and older we never mutate a shared queue: the
//!   fallback returns a new [`PublishQueue`] value.
//! - [`Profile::Java5`]: 5.1.4+ with the latency switch on: available and not last →
//!   reachable and not last → any.
//! - [`Profile::Adaptive`]: ours: available and not last → available (half-open brokers count
//!   as available once their window ended) → the broker that becomes available first.
//!
//! ## The inverted last-broker test
//!
//! Up to 4.7.x the latency branch took an available queue only if it was **on** the last
//! broker (STRATEGY.md §2.3, [Q]); the seeds' refactored selection kept that inverted test.
//! We implement the intended behaviour instead: [`Profile::Java5`] and
//! [`Profile::Adaptive`] prefer a queue **not** on the last broker, and [`Profile::Java49`]
//! ignores the last broker exactly as 4.8–4.9.8 do.

use crate::fault::FaultTable;
use crate::time::Instant;

/// One writable queue of a topic's route, in route order (brokers sorted by name, queue ids
/// `0..writeQueueNums` within a broker).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PublishQueue<K> {
    /// The broker (runtime-chosen key, e.g. an interned broker-name index).
    pub broker: K,
    /// Queue id on that broker.
    pub queue_id: i32,
}

/// Java `ThreadLocalIndex`: a round-robin counter with an injected random start.
///
/// Keep one per producer (Java keeps one per thread per route object); re-seed it when the
/// route changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QueueCounter {
    value: u32,
}

impl QueueCounter {
    /// A counter starting at `seed` (the runtime passes a random value).
    pub const fn new(seed: u32) -> Self {
        QueueCounter { value: seed }
    }

    /// 5.x `reset()`: restart from a new random `seed`.
    pub fn reset(&mut self, seed: u32) {
        self.value = seed & 0x7FFF_FFFF;
    }

    /// `incrementAndGet()`: add one (wrapping) and return the value masked to 31 bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u32 {
        self.value = self.value.wrapping_add(1);
        self.value & 0x7FFF_FFFF
    }

    /// Next position in `0..len` (`len > 0`), or 0 for an empty list.
    pub fn next_pos(&mut self, len: usize) -> usize {
        let v = usize::try_from(self.next()).unwrap_or(0);
        v.checked_rem(len).unwrap_or(0)
    }
}

/// Which selection algorithm to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Profile {
    /// Latency switch off (Java default).
    Plain,
    /// Java 4.9.8, latency switch on.
    Java49,
    /// Java 5.1.4+ (5.3.3), latency switch on.
    Java5,
    /// Our adaptive profile.
    Adaptive,
}

/// Plain round robin (`selectOneMessageQueue()`).
pub fn select_round_robin<K: Copy>(
    queues: &[PublishQueue<K>],
    counter: &mut QueueCounter,
) -> Option<PublishQueue<K>> {
    if queues.is_empty() {
        return None;
    }
    queues.get(counter.next_pos(queues.len())).copied()
}

/// Up to `len` round-robin steps; the first queue passing `ok`, else `None`
/// (5.x `selectOneMessageQueue(filters…)`).
pub fn select_filtered<K: Copy>(
    queues: &[PublishQueue<K>],
    counter: &mut QueueCounter,
    mut ok: impl FnMut(&PublishQueue<K>) -> bool,
) -> Option<PublishQueue<K>> {
    for _ in 0..queues.len() {
        if let Some(q) = queues.get(counter.next_pos(queues.len()))
            && ok(q)
        {
            return Some(*q);
        }
    }
    None
}

/// `selectOneMessageQueue(lastBrokerName)`: round robin avoiding `last`; when every queue is on
/// `last`, a plain selection.
pub fn select_avoiding<K: Copy + Eq>(
    queues: &[PublishQueue<K>],
    last: Option<K>,
    counter: &mut QueueCounter,
) -> Option<PublishQueue<K>> {
    match last {
        None => select_round_robin(queues, counter),
        Some(l) => select_filtered(queues, counter, |q| q.broker != l)
            .or_else(|| select_round_robin(queues, counter)),
    }
}

/// Fault-aware selection for `profile` (STRATEGY.md §2.3).
///
/// `table` is `&mut` only because [`Profile::Java49`]'s fallback removes a fault entry whose
/// broker is not in this route (as Java does). Returns `None` only for an empty slice.
pub fn select<K: Copy + Eq, const N: usize>(
    profile: Profile,
    queues: &[PublishQueue<K>],
    last: Option<K>,
    now: Instant,
    table: &mut FaultTable<K, N>,
    counter: &mut QueueCounter,
) -> Option<PublishQueue<K>> {
    if queues.is_empty() {
        return None;
    }
    match profile {
        Profile::Plain => select_avoiding(queues, last, counter),
        Profile::Java49 => select_java49(queues, now, table, counter),
        Profile::Java5 => select_filtered(queues, counter, |q| {
            Some(q.broker) != last && table.is_available(now, q.broker)
        })
        .or_else(|| {
            select_filtered(queues, counter, |q| {
                Some(q.broker) != last && table.is_reachable(q.broker)
            })
        })
        .or_else(|| select_round_robin(queues, counter)),
        Profile::Adaptive => select_filtered(queues, counter, |q| {
            Some(q.broker) != last && table.is_available(now, q.broker)
        })
        .or_else(|| select_filtered(queues, counter, |q| table.is_available(now, q.broker)))
        .or_else(|| {
            // Everything isolated: the broker whose window ends first, at a round-robin queue.
            let start = counter.next_pos(queues.len());
            let mut best: Option<PublishQueue<K>> = None;
            for i in 0..queues.len() {
                let idx = (start + i) % queues.len();
                if let Some(q) = queues.get(idx)
                    && best
                        .is_none_or(|b| table.available_at(q.broker) < table.available_at(b.broker))
                {
                    best = Some(*q);
                }
            }
            best
        }),
    }
}

/// Java 4.9.8 latency-mode selection (without the shared-queue mutation of ≤ 4.9.7).
fn select_java49<K: Copy + Eq, const N: usize>(
    queues: &[PublishQueue<K>],
    now: Instant,
    table: &mut FaultTable<K, N>,
    counter: &mut QueueCounter,
) -> Option<PublishQueue<K>> {
    // Step B.1–2: one increment, then walk size positions from it.
    // Java: `pos = Math.abs(index++) % size`, clamped to 0 when negative (int overflow).
    let start = i32::try_from(counter.next()).unwrap_or(0);
    let len = queues.len();
    let size = i32::try_from(len).unwrap_or(i32::MAX);
    for i in 0..size {
        let pos = start
            .wrapping_add(i)
            .wrapping_abs()
            .checked_rem(size)
            .unwrap_or(0)
            .max(0);
        if let Some(q) = queues.get(usize::try_from(pos).unwrap_or(0))
            && table.is_available(now, q.broker)
        {
            return Some(*q);
        }
    }
    // Step B.3: pickOneAtLeast; its per-thread `whichItemWorst` is this same counter here.
    let not_best = table.pick_one_at_least(now, counter);
    let n = match not_best {
        Some(b) => queues.iter().filter(|q| q.broker == b).count(),
        None => 0,
    };
    if n > 0 {
        let mq = select_round_robin(queues, counter);
        if let Some(b) = not_best {
            let id = usize::try_from(counter.next()).unwrap_or(0) % n;
            return Some(PublishQueue {
                broker: b,
                queue_id: i32::try_from(id).unwrap_or(0),
            });
        }
        return mq;
    }
    if let Some(b) = not_best {
        table.remove(b);
    }
    select_round_robin(queues, counter)
}

/// Ordered send by a caller-computed index (a `MessageQueueSelector`): `queues[index % len]`.
pub fn select_by_index<K: Copy>(
    queues: &[PublishQueue<K>],
    index: usize,
) -> Option<PublishQueue<K>> {
    queues.get(index.checked_rem(queues.len())?).copied()
}

/// Java `String.hashCode()` of `key` (over UTF-16 code units, wrapping).
pub fn java_string_hash(key: &str) -> i32 {
    let mut h: i32 = 0;
    for unit in key.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    h
}

/// Ordered send by sharding key, as Java's `SelectMessageQueueByHash`:
/// `|hashCode % len|` of the key string.
pub fn select_by_sharding_key<K: Copy>(
    queues: &[PublishQueue<K>],
    key: &str,
) -> Option<PublishQueue<K>> {
    let len = i32::try_from(queues.len()).ok()?;
    let v = java_string_hash(key).checked_rem(len)?.unsigned_abs();
    queues.get(usize::try_from(v).ok()?).copied()
}
