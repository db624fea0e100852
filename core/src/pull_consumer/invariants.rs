//! The consumer's bookkeeping invariants, checked by the tests and the fuzz target.

use super::*;

impl<
    const SUBS: usize,
    const OWNED: usize,
    const TRACK: usize,
    const CALLS: usize,
    const CIDS: usize,
    const QUEUES: usize,
    const BACKS: usize,
    St: Store,
> PullConsumer<SUBS, OWNED, TRACK, CALLS, CIDS, QUEUES, BACKS, St>
{
    /// Checks the bookkeeping (tests and fuzzing): owned queues are distinct, every request
    /// in flight belongs to a queue waiting for exactly it, and every waiting queue has its
    /// request.
    ///
    /// # Errors
    /// What does not hold.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn check_invariants(&self) -> Result<(), &'static str> {
        for (i, o) in self.owned.iter().enumerate() {
            if self.owned.iter().skip(i + 1).any(|p| p.key == o.key) {
                return Err("a queue is owned twice");
            }
            let waiting = |c: &CallRef| match (*c, o.state) {
                (CallRef::Query(k, l), QState::Querying)
                | (CallRef::Locate(k, l), QState::Locating(_))
                | (CallRef::Pull(k, l), QState::Pulling) => k == o.key && l == o.lease,
                _ => false,
            };
            let n = self.calls.values().filter(|c| waiting(c)).count();
            let busy = matches!(
                o.state,
                QState::Querying | QState::Locating(_) | QState::Pulling
            );
            if n != usize::from(busy) {
                return Err("a waiting queue without its request (or with two)");
            }
            let commits = self
                .calls
                .values()
                .filter(
                    |c| matches!(c, CallRef::Commit(k, Some(l), _) if *k == o.key && *l == o.lease),
                )
                .count();
            if commits > 1 || (o.committing && commits == 0) {
                return Err("commit bookkeeping");
            }
            if o.tracker.cached_count() > TRACK {
                return Err("tracker over capacity");
            }
        }
        for o in self.owned.iter().filter(|o| o.lock == LockStep::Sent) {
            let b = o.key.broker;
            if !self
                .calls
                .values()
                .any(|c| matches!(c, CallRef::Lock(x) if *x == b))
            {
                return Err("a queue waits for a lock request not in flight");
            }
        }
        let sent = self.backs.iter().filter(|b| b.sent).count();
        let calls = self.calls.values();
        if sent != calls.filter(|c| matches!(c, CallRef::SendBack(..))).count() {
            return Err("a send-back in flight without its request (or the reverse)");
        }
        for c in self.calls.values() {
            let ok = match *c {
                CallRef::ConsumerList(i) => {
                    self.subs.get(usize::from(i)).is_some_and(|s| s.listing)
                }
                CallRef::SendBack(k, l, o) => self
                    .backs
                    .iter()
                    .any(|b| b.sent && b.key == k && b.lease == l && b.offset == o),
                _ => true,
            };
            if !ok {
                return Err("a request of no listing subscription or send-back");
            }
        }
        Ok(())
    }
}
