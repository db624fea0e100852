//! State shared between tasks, each piece a thin lock or atomic around a core type (the loom
//! models, `loom/tests/`, compile this file on loom's primitives). Applications only read
//! [`CountersSnapshot`] through [`crate::Producer::counters`] (and two of its counters
//! through [`crate::consumer::ConsumerStats`]).
//!
//! - [`Counters`]: monotonically increasing event counters.

use crate::sync::{AtomicU64, Ordering};

/// Event counters of one producer or consumer (a consumer only moves the connection ones),
/// indexed by [`Counter`].
#[derive(Debug)]
pub struct Counters([AtomicU64; 3]);

/// A point-in-time copy of the client's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CountersSnapshot {
    /// Sends that returned a result (any stored status) or were written (oneway).
    pub sent: u64,
    /// Sends that returned an error.
    pub failed: u64,
    /// Attempts issued (first tries and retries).
    pub attempts: u64,
    /// Attempts that were retries.
    pub retried: u64,
    /// Times a broker went from available to isolated in the fault table.
    pub brokers_isolated: u64,
    /// Responses that matched no request in flight (late or unknown) and were dropped.
    pub late_responses_dropped: u64,
    /// Connections lost (EOF, reset, malformed frame) with the producer running.
    pub connections_lost: u64,
}

/// Which counter to bump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// [`CountersSnapshot::sent`].
    Sent,
    /// [`CountersSnapshot::failed`].
    Failed,
    /// [`CountersSnapshot::connections_lost`].
    ConnectionsLost,
}

impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}

impl Counters {
    /// All zero.
    pub fn new() -> Self {
        Counters([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)])
    }

    /// Adds one to `c`.
    pub fn bump(&self, c: Counter) {
        self.0[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Reads every counter (each read is atomic; the set is not a single snapshot).
    pub fn snapshot(&self) -> CountersSnapshot {
        let r = |c: Counter| self.0[c as usize].load(Ordering::Relaxed);
        CountersSnapshot {
            sent: r(Counter::Sent),
            failed: r(Counter::Failed),
            connections_lost: r(Counter::ConnectionsLost),
            // The session's (see `Producer::counters`).
            ..CountersSnapshot::default()
        }
    }
}
