//! When an auto-batch leaves (sans-IO): the decisions of Java 5.x `autoBatch` /
//! `ProduceAccumulator`, self-clocked. The runtime keeps the waiting messages (one batch per
//! topic) and asks a [`BatchClock`] what to do:
//!
//! - a message [joins](BatchClock::join): while fewer than [`BatchLimits::max_in_flight`]
//!   batches of the topic are in flight, or once the waiting batch reaches
//!   [`BatchLimits::max_bytes`] or [`BatchLimits::max_messages`], the batch leaves now
//!   ([`Join::Send`]); the first message to wait otherwise starts the hold timer ([`Join::Arm`]);
//! - the hold timer fires: the batch leaves if it is still the one the timer was armed for
//!   ([`BatchClock::expire`]);
//! - a batch ends (stored or failed): whatever waited leaves now ([`BatchClock::done`]).
//!
//! So a lone message is never delayed, and under load each round trip carries everything that
//! arrived during the previous one. A fixed linger (wait the hold time unless the batch fills,
//! as Java's accumulator does) made 64 sync senders of 128 B *slower* than no batching
//! (BENCHMARKS.md "Auto-batching"): 64 × 128 B never fills 32 KiB, so every round waited.
//!
//! ```
//! use rmq_core::autobatch::{BatchClock, BatchLimits, Join};
//!
//! let limits = BatchLimits { max_bytes: 32 * 1024, max_messages: 256, max_in_flight: 1 };
//! let mut clock = BatchClock::default();
//! assert_eq!(clock.join(&limits, 100), Join::Send); // idle: leaves at once
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

/// What a message joining the waiting batch asks of the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join {
    /// Send the waiting batch (this message included) now, then [`BatchClock::done`] when it
    /// ends.
    Send,
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
}

impl BatchClock {
    /// A message of `bytes` body bytes joins the waiting batch.
    pub fn join(&mut self, limits: &BatchLimits, bytes: usize) -> Join {
        self.bytes = self.bytes.saturating_add(bytes);
        self.waiting += 1;
        let full = self.bytes >= limits.max_bytes || self.waiting >= limits.max_messages;
        if full || self.in_flight < limits.max_in_flight {
            self.leave();
            Join::Send
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

    /// Messages waiting.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Batches in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn leave(&mut self) {
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
        assert_eq!(c.join(&l, 10), Join::Send, "idle: at once");
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
        assert_eq!(c.join(&l, 1), Join::Send, "idle again");
    }
}
