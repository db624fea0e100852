//! Work in progress that a shutdown waits for (a producer's sends, a consumer's handler
//! calls).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// A count of work in progress, and its end.
#[derive(Clone, Default)]
pub(crate) struct InFlight(Arc<(AtomicU64, Notify)>);

/// One piece of work in progress (ends when dropped).
pub(crate) struct Entered(Arc<(AtomicU64, Notify)>);

impl Drop for Entered {
    fn drop(&mut self) {
        if self.0.0.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.1.notify_waiters();
        }
    }
}

impl InFlight {
    pub(crate) fn enter(&self) -> Entered {
        self.0.0.fetch_add(1, Ordering::AcqRel);
        Entered(self.0.clone())
    }

    /// Waits up to `limit` for the work in progress to end; how much still runs.
    pub(crate) async fn drained(&self, limit: Duration) -> usize {
        let deadline = crate::clock::after(limit);
        loop {
            let idle = self.0.1.notified();
            let n = self.0.0.load(Ordering::Acquire);
            if n == 0 || tokio::time::timeout_at(deadline, idle).await.is_err() {
                return usize::try_from(n).unwrap_or(usize::MAX);
            }
        }
    }
}
