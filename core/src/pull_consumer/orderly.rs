//! Orderly consumption: queue locks (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ) and one batch at a time
//! per queue ([`PullConsumer::begin`] / [`PullConsumer::end`]).

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
    /// Orderly: whether the application may process messages of `queue` now (one batch at a
    /// time); `true` marks it busy until [`end`](Self::end). It must be owned under `lease`,
    /// locked (confirmed by its broker within 30 s), not revoked, and not busy already.
    pub fn begin(&mut self, now: Instant, queue: QueueKey, lease: u32) -> bool {
        let Some(o) = self
            .owned
            .iter_mut()
            .find(|o| o.key == queue && o.lease == lease)
        else {
            return false;
        };
        let ok = !o.busy && !o.leaving && !self.stopping && Self::locked(o, now);
        o.busy |= ok;
        ok
    }

    /// Orderly: the batch [`begin`](Self::begin) allowed is done (acknowledge its messages
    /// first); a queue revoked meanwhile is committed, unlocked and dropped now.
    pub fn end(&mut self, queue: QueueKey, lease: u32) {
        let Some(i) = self
            .owned
            .iter()
            .position(|o| o.key == queue && o.lease == lease)
        else {
            return;
        };
        self.owned[i].busy = false;
        // Stopping: what it acknowledged is committed before the unlock.
        self.owned[i].commit |= self.stopping;
        if self.owned[i].leaving {
            self.release(i);
        }
    }

    /// Applies the answer (or the failure) of a lock request to `broker`: granted queues are
    /// locked from `now`; a new queue refused is dropped (a rebalance follows soon), an owned
    /// one refused loses its lock.
    pub(super) fn settle_locks(&mut self, now: Instant, broker: BrokerId) {
        let mut i = 0;
        while i < self.owned.len() {
            let o = &mut self.owned[i];
            if o.key.broker != broker || !matches!(o.lock, LockStep::Sent | LockStep::Granted) {
                i += 1;
                continue;
            }
            let granted = o.lock == LockStep::Granted;
            o.lock = LockStep::Idle;
            if granted {
                // Heard of by a worker waiting for its turn ([`PullEvent::Locked`]).
                o.lock_news = true;
                self.lock_news = true;
            }
            match (granted, o.state) {
                (true, QState::Lock) => {
                    o.locked_at = Some(now);
                    o.state = QState::New;
                }
                (true, _) => o.locked_at = Some(now),
                (false, QState::Lock) => {
                    let _ = self.owned.swap_remove(i);
                    let soon = now.saturating_add(RELOCK_REBALANCE_DELAY);
                    self.rebalance_at = self.rebalance_at.min(soon);
                    continue;
                }
                (false, _) => o.locked_at = None,
            }
            i += 1;
        }
    }

    pub(super) fn locked(o: &Owned<TRACK>, now: Instant) -> bool {
        o.locked_at
            .is_some_and(|at| now.saturating_duration_since(at) < LOCK_MAX_LIVE)
    }

    /// LOCK_BATCH_MQ (or UNLOCK_BATCH_MQ) of `queues` on `broker`, as many as fit half of
    /// `buf` (the body is written in the other half); returns how many went.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn lock_call<S: SessionApi, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        code: RequestCode,
        broker: BrokerId,
        queues: &[QueueKey],
        buf: &mut [u8],
        lend: &M,
    ) -> Result<(Transmit, usize), CallError> {
        let half = buf.len() / 2;
        let (frame, tail) = buf.split_at_mut(half);
        let name = |k: &QueueKey| {
            let topic = session.topic_name(k.topic).unwrap_or("");
            MessageQueue::new(
                topic,
                session.broker_name(k.broker).unwrap_or(""),
                k.queue_id,
            )
        };
        let mut room = tail.len().saturating_sub(256);
        let n = queues
            .iter()
            .take_while(|k| {
                let len = queue_len(&name(k));
                room = room.saturating_sub(len);
                room > 0
            })
            .count()
            .max(1);
        let too_small = CallError::Encode(crate::wire::EncodeError::BufferTooSmall);
        let names = queues.iter().take(n).map(name);
        let len =
            write_lock_body(&self.group, &self.client_id, names, tail).map_err(|_| too_small)?;
        let body = &tail[..len];
        let (peer, ext) = (Peer::Broker(broker), None::<HeartbeatRequestHeader>);
        let mut tx = session.call(now, peer, code, ext, body, LOCK_TIMEOUT, frame, lend)?;
        // The body follows the header in `buf`: one frame of `len` bytes.
        buf.copy_within(half..half + len, tx.len);
        tx.len += len;
        tx.body_len = 0;
        let what = match code {
            RequestCode::LOCK_BATCH_MQ => CallRef::Lock(broker),
            _ => CallRef::Unlock,
        };
        let _ = self.calls.insert(tx.opaque, what);
        Ok((tx, n))
    }

    /// The next lock or unlock request, if one is due.
    pub(super) fn lock_calls<S: SessionApi, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        buf: &mut [u8],
        lend: &M,
    ) -> Option<Result<Transmit, CallError>> {
        if let Some(&first) = self.unlocks.first() {
            let mut these: Vec<QueueKey, OWNED> = Vec::new();
            for k in self.unlocks.iter().filter(|k| k.broker == first.broker) {
                let _ = these.push(*k);
            }
            let code = RequestCode::UNLOCK_BATCH_MQ;
            let r = self.lock_call(now, session, code, first.broker, &these, buf, lend);
            let n = match &r {
                Ok((_, n)) => *n,
                Err(CallError::TooManyRequests) => 0,
                // Cannot be encoded: the broker's lock expires by itself.
                Err(_) => these.len(),
            };
            let sent = &these[..n.min(these.len())];
            self.unlocks.retain(|k| !sent.contains(k));
            return Some(r.map(|(tx, _)| tx));
        }
        if self.stopping {
            return None;
        }
        let busy = |b: BrokerId| {
            self.calls
                .values()
                .any(|c| matches!(c, CallRef::Lock(x) if *x == b))
        };
        let broker = self
            .owned
            .iter()
            .find(|o| o.lock == LockStep::Wanted && !busy(o.key.broker))?
            .key
            .broker;
        let mut these: Vec<QueueKey, OWNED> = Vec::new();
        for o in self.owned.iter() {
            if o.key.broker == broker && o.lock == LockStep::Wanted {
                let _ = these.push(o.key);
            }
        }
        let code = RequestCode::LOCK_BATCH_MQ;
        let r = self.lock_call(now, session, code, broker, &these, buf, lend);
        match &r {
            Ok((_, n)) => {
                let sent = &these[..(*n).min(these.len())];
                for o in self.owned.iter_mut() {
                    if sent.contains(&o.key) {
                        o.lock = LockStep::Sent;
                    }
                }
            }
            Err(CallError::TooManyRequests) => {}
            Err(_) => {
                // Cannot be encoded: as if refused.
                for o in self.owned.iter_mut() {
                    if these.contains(&o.key) {
                        o.lock = LockStep::Sent;
                    }
                }
                self.settle_locks(now, broker);
            }
        }
        Some(r.map(|(tx, _)| tx))
    }
}
