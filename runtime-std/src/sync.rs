//! The one place rmq-std takes its synchronisation primitives from: `std` normally, `loom`
//! under `--cfg loom` (the `rmq-loom` crate compiles this file for its models, `loom/tests/`). Every piece of state shared between tasks
//! ([`crate::shared`]) is built only from what is re-exported here.

#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(not(loom))]
pub use std::sync::{Mutex, MutexGuard};

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(loom)]
pub use loom::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning: every critical section in rmq-std leaves the data
/// consistent before anything that could panic, so a poisoned lock still holds valid state.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
