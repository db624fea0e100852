//! When an auto-batch leaves (sans-IO): the decisions of Java 5.x `autoBatch` /
//! `ProduceAccumulator`, self-clocked. The runtime keeps the waiting messages (one batch per
//! topic) and asks a [`BatchClock`] what to do:
//!
//! - a message [joins](BatchClock::join): once the waiting batch reaches
//!   [`BatchLimits::max_bytes`] or [`BatchLimits::max_messages`] it leaves now ([`Join::Send`]);
//!   while fewer than [`BatchLimits::max_in_flight`] batches of the topic are in flight it
//!   leaves *soon* ([`Join::Soon`]: the runtime lets the callers that are ready to send join
//!   it first, e.g. by yielding once, then [takes](BatchClock::take) it); the first message to
//!   wait otherwise starts the hold timer ([`Join::Arm`]);
//! - the hold timer fires: the batch leaves if it is still the one the timer was armed for
//!   ([`BatchClock::expire`]);
//! - a batch ends (stored or failed): whatever waited leaves now ([`BatchClock::done`]).
//!
//! So a lone message is never delayed by a timer, and under load each round trip carries
//! everything that arrived during the previous one. A fixed linger (wait the hold time unless
//! the batch fills, as Java's accumulator does) made 64 sync senders of 128 B *slower* than no
//! batching (BENCHMARKS.md "Auto-batching"): 64 × 128 B never fills 32 KiB, so every round
//! waited. Leaving at once instead of soon made every other batch a batch of one: when a batch
//! ends its callers are woken one after the other, and the first to send again found a free
//! slot and left alone, the rest waiting a whole round trip behind it.
//!
//! ```
//! use rmq_core::autobatch::{BatchClock, BatchLimits, Join};
//!
//! let limits = BatchLimits { max_bytes: 32 * 1024, max_messages: 256, max_in_flight: 1 };
//! let mut clock = BatchClock::default();
//! assert_eq!(clock.join(&limits, 100), Join::Soon); // idle: leaves once the ready ones joined
//! assert_eq!(clock.join(&limits, 100), Join::Wait); // ready too: joins it
//! assert!(clock.take()); // the runtime's turn: both leave together
//! assert_eq!(clock.join(&limits, 100), Join::Arm(1)); // one in flight: waits, timer armed
//! assert_eq!(clock.join(&limits, 100), Join::Wait);
//! assert!(clock.done()); // the first ended: the two waiting leave together
//! assert!(!clock.expire(1), "the timer of a batch that already left does nothing");
//! ```

/// Limits of one topic's batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLimits {
    /// A waiting batch leaves once its bodies reach this many bytes.
    pub max_bytes: usize,
    /// ... or once it holds this many messages.
    pub max_messages: usize,
    /// Batches in flight before new messages wait.
    pub max_in_flight: usize,
}

impl BatchLimits {
    /// Whether a message may wait for others rather than go alone: a body under
    /// [`max_bytes`](Self::max_bytes) and under the compression threshold `compress_over` (a
    /// batch body is never compressed, so a body that would be goes alone, compressed), and
    /// `delayed` false: no delay level and no timer (a batch cannot carry either: Java's
    /// `MessageBatch` rule, [`crate::message::batch_rules`]).
    ///
    /// ```
    /// # use rmq_core::autobatch::BatchLimits;
    /// let l = BatchLimits { max_bytes: 1024, max_messages: 8, max_in_flight: 1 };
    /// assert!(l.admits(100, 4096, false));
    /// assert!(!l.admits(100, 4096, true), "delayed");
    /// assert!(!l.admits(2000, 4096, false), "too large for a batch");
    /// assert!(!l.admits(100, 64, false), "would be compressed");
    /// ```
    pub const fn admits(&self, body_len: usize, compress_over: usize, delayed: bool) -> bool {
        !delayed && body_len < self.max_bytes && body_len < compress_over
    }
}

/// What a message joining the waiting batch asks of the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join {
    /// Send the waiting batch (this message included) now, then [`BatchClock::done`] when it
    /// ends.
    Send,
    /// A batch slot is free: let the callers that are ready join, then call
    /// [`BatchClock::take`] and send what it says (then [`BatchClock::done`] when it ends).
    /// Until then every message joins this batch ([`Join::Wait`]) unless it fills it.
    Soon,
    /// It is the first to wait: call [`BatchClock::expire`] with this generation after the
    /// hold time.
    Arm(u64),
    /// It waits with the others (a timer is armed).
    Wait,
}

/// One topic's waiting batch and batches in flight (counts only; the runtime keeps the
/// messages).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchClock {
    bytes: usize,
    waiting: usize,
    /// Bumped whenever the waiting batch leaves, so that a timer armed for an earlier batch
    /// does not send a later one early.
    generation: u64,
    in_flight: usize,
    /// A [`Join::Soon`] was answered and its [`BatchClock::take`] has not come yet.
    due: bool,
}

impl BatchClock {
    /// A message of `bytes` body bytes joins the waiting batch.
    pub fn join(&mut self, limits: &BatchLimits, bytes: usize) -> Join {
        self.bytes = self.bytes.saturating_add(bytes);
        self.waiting += 1;
        let full = self.bytes >= limits.max_bytes || self.waiting >= limits.max_messages;
        if full {
            self.leave();
            Join::Send
        } else if self.due {
            Join::Wait
        } else if self.in_flight < limits.max_in_flight {
            self.due = true;
            Join::Soon
        } else if self.waiting == 1 {
            Join::Arm(self.generation)
        } else {
            Join::Wait
        }
    }

    /// The hold timer armed for `generation` fired: whether the waiting batch leaves now.
    pub fn expire(&mut self, generation: u64) -> bool {
        let go = self.generation == generation && self.waiting > 0;
        if go {
            self.leave();
        }
        go
    }

    /// A batch ended: whether the waiting batch leaves now (then `done` again when it ends).
    pub fn done(&mut self) -> bool {
        self.in_flight = self.in_flight.saturating_sub(1);
        let go = self.waiting > 0;
        if go {
            self.leave();
        }
        go
    }

    /// The runtime's turn after a [`Join::Soon`]: whether the waiting batch leaves now (not
    /// if it already left: full, or when a batch ended in between).
    pub fn take(&mut self) -> bool {
        let go = self.due && self.waiting > 0;
        self.due = false;
        if go {
            self.leave();
        }
        go
    }

    /// Messages waiting.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Batches in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn leave(&mut self) {
        self.due = false;
        self.generation += 1;
        self.bytes = 0;
        self.waiting = 0;
        self.in_flight += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_leave_when_a_slot_frees_when_full_or_when_timed() {
        let l = BatchLimits {
            max_bytes: 100,
            max_messages: 3,
            max_in_flight: 1,
        };
        let mut c = BatchClock::default();
        assert_eq!(
            c.join(&l, 10),
            Join::Soon,
            "idle: as soon as the ready ones joined"
        );
        assert!(c.take());
        assert!(!c.take(), "taken once");
        assert_eq!(c.join(&l, 10), Join::Arm(1));
        assert_eq!(c.join(&l, 10), Join::Wait);
        assert!(c.done(), "the two waiting leave when the first ends");
        assert_eq!((c.waiting(), c.in_flight()), (0, 1));
        assert!(!c.expire(1), "an earlier batch's timer");
        assert_eq!(c.join(&l, 60), Join::Arm(2));
        assert_eq!(
            c.join(&l, 60),
            Join::Send,
            "120 bytes: full, although one is in flight"
        );
        assert_eq!(c.in_flight(), 2);
        assert_eq!(c.join(&l, 1), Join::Arm(3));
        assert_eq!(c.join(&l, 1), Join::Wait);
        assert_eq!(c.join(&l, 1), Join::Send, "3 messages: full");
        assert_eq!(c.join(&l, 1), Join::Arm(4));
        assert!(c.expire(4), "the hold time is over");
        assert_eq!(c.in_flight(), 4);
        assert!(!c.done() && !c.done() && !c.done() && !c.done());
        assert_eq!(c.in_flight(), 0);
        assert!(!c.done(), "never below zero");
        assert_eq!(c.join(&l, 1), Join::Soon, "idle again");
        assert_eq!(c.join(&l, 1), Join::Wait);
        assert_eq!(
            c.join(&l, 1),
            Join::Send,
            "full before the runtime's turn: now"
        );
        assert!(!c.take(), "it left already");
        assert_eq!(c.in_flight(), 1);
    }

    #[test]
    fn a_batch_that_ended_does_not_leave_its_first_caller_alone() {
        // 64 sync callers in two batches of 32 in flight. When one ends, its callers are
        // woken one after the other and each sends again before the runtime's turn. Leaving at
        // once (as before `Join::Soon`) sent the first of them alone every time and the other
        // 31 a round trip later.
        use std::collections::VecDeque;
        let l = BatchLimits {
            max_bytes: 1 << 20,
            max_messages: 256,
            max_in_flight: 2,
        };
        let mut c = BatchClock::default();
        let mut flights = VecDeque::new();
        for _ in 0..2 {
            for _ in 0..32 {
                assert_ne!(c.join(&l, 128), Join::Send);
            }
            assert!(c.take());
            flights.push_back(32);
        }
        let mut waiting = 0;
        let mut sizes = std::vec::Vec::new();
        for _ in 0..20 {
            let ended = flights.pop_front().expect("a batch in flight");
            let mut leave = |waiting: &mut usize| {
                let n = core::mem::take(waiting);
                sizes.push(n);
                flights.push_back(n);
            };
            if c.done() {
                leave(&mut waiting);
            }
            for _ in 0..ended {
                assert_ne!(c.join(&l, 128), Join::Send, "never full here");
                waiting += 1;
            }
            if c.take() {
                leave(&mut waiting);
            }
        }
        assert_eq!(sizes, [32; 20], "every batch carries a whole round");
        assert_eq!(flights.iter().sum::<usize>() + waiting, 64, "nobody lost");
        assert_eq!(c.in_flight(), flights.len());
    }
}
