//! The request table: opaques that encode their slot, deadlines, transmit queue, what a lost
//! connection or a timeout fails, and the requests the session issues besides sends
//! (heartbeats, unregistering, the runtime's and the consumer's calls).

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    RouteRefresh = 0,
    Heartbeat = 1,
    RouteRetry = 2,
}

pub(super) const TIMERS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReqState {
    Free,
    Queued,
    Sent,
    /// A call that got no answer; freed when its [`Event::CallFailed`] is polled.
    Failed(TransportError),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReqKind {
    Route {
        topic: u16,
        default: bool,
    },
    Send {
        send: u16,
    },
    Heartbeat,
    Unregister,
    /// A request the runtime encoded and wrote itself ([`Session::call`]).
    Call,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Req {
    pub(super) generation: u32,
    pub(super) state: ReqState,
    /// When it was written (polled).
    pub(super) sent_at: Instant,
    pub(super) peer: Peer,
    pub(super) kind: ReqKind,
}

impl Req {
    pub(super) const FREE: Req = Req {
        generation: 0,
        state: ReqState::Free,
        sent_at: Instant::ZERO,
        peer: Peer::NameServer(0),
        kind: ReqKind::Heartbeat,
    };
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
> Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>
{
    /// Queues UNREGISTER_CLIENT (this producer group) to every broker with a known address,
    /// as Java's `shutdown` does; returns how many were queued. Heartbeats stop.
    pub fn unregister_all(&mut self, now: Instant) -> usize {
        self.timers[Timer::Heartbeat as usize] = None;
        let deadline = now.saturating_add(self.cfg.request_timeout);
        let mut n = 0;
        for k in 0..self.nodes() {
            let Some(peer) = self.node(k) else {
                continue;
            };
            if self
                .alloc_req(peer, ReqKind::Unregister, deadline)
                .is_none()
            {
                break;
            }
            n += 1;
        }
        // Nothing to unregister from: done at once.
        self.unregistered |= F::HEARTBEATS && self.unregisters == 0;
        n
    }

    /// Sends the heartbeats now (a consumer announces itself before it rebalances) and then on
    /// the usual period; [`Event::HeartbeatsDone`] follows when every one is answered (at
    /// once when there is no broker to send one to, or no heartbeats).
    pub fn heartbeat_now(&mut self, now: Instant) {
        if self.cfg.heartbeat.is_some() {
            self.timers[Timer::Heartbeat as usize] = Some(now);
            self.handle_timeout(now);
        }
        self.heartbeats_done |= F::HEARTBEATS && self.heartbeats == 0;
    }

    /// A request the runtime writes itself (consumer pulls, offsets, ...): encodes `code` with
    /// `ext` into `buf` (signed over `body` with the lent credentials), registers it with a
    /// deadline of `now + timeout`, and returns the [`Transmit`] whose `len` bytes the runtime
    /// writes to `peer` at once, followed by `body`. The answer comes back from
    /// [`Session::handle_frame`] as [`Incoming::Response`] with this opaque; no answer in time
    /// (or a lost connection) comes as [`Event::CallFailed`].
    ///
    /// # Errors
    /// [`CallError`]; nothing is registered then.
    #[allow(clippy::too_many_arguments)]
    pub fn call<E: crate::wire::ExtFields, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        peer: Peer,
        code: RequestCode,
        ext: Option<E>,
        body: &[u8],
        timeout: Duration,
        buf: &mut [u8],
        out: &M,
    ) -> Result<Transmit, CallError> {
        if !F::CONSUMER {
            return Err(CallError::Unsupported);
        }
        let ext = ext.as_ref().map(|e| Header::Call(e));
        self.call_with(now, peer, code, ext, body, timeout, buf, out)
    }

    /// [`Session::call`] past its one generic step: the same code for every header type.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn call_with<M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        peer: Peer,
        code: RequestCode,
        ext: Option<Header<'_>>,
        body: &[u8],
        timeout: Duration,
        buf: &mut [u8],
        out: &M,
    ) -> Result<Transmit, CallError> {
        let i = *self.req_free.last().ok_or(CallError::TooManyRequests)?;
        let generation = self
            .reqs
            .get(usize::from(i))
            .map_or(0, |r| (r.generation + 1) % Self::generations());
        let opaque = self.opaque_of(i, generation);
        let len = self
            .emit(code, opaque, ext, 0, None, (body, body.len()), buf, out)
            .map_err(|e| match e {
                Ending::Acl(a) => CallError::Acl(a),
                Ending::Encode(e) => CallError::Encode(e),
                _ => CallError::Encode(EncodeError::BufferTooSmall),
            })?;
        let deadline = now.saturating_add(timeout);
        let slot = self
            .alloc_req(peer, ReqKind::Call, deadline)
            .ok_or(CallError::TooManyRequests)?;
        // Written by the runtime right away: never in the transmit queue.
        let _ = self.queued.pop_back();
        if let Some(r) = self.reqs.get_mut(usize::from(slot)) {
            r.state = ReqState::Sent;
            r.sent_at = now;
        }
        Ok(Transmit {
            peer,
            len,
            opaque,
            body: None,
            body_len: body.len(),
            report_written: false,
            answer: false,
        })
    }

    /// The next [`Session::call`] that got no answer (its opaque, and why), taken before
    /// [`Session::poll_event`] would report it as [`Event::CallFailed`]: a layer on top (the
    /// client's consumer) learns of its failed calls at once.
    pub fn poll_call_failed(&mut self) -> Option<(i32, TransportError)> {
        if !F::CONSUMER {
            return None;
        }
        while let Some(i) = self.call_failures.pop_front() {
            let Some(&Req {
                state: ReqState::Failed(error),
                ..
            }) = self.reqs.get(usize::from(i))
            else {
                continue;
            };
            let opaque = self.opaque(i);
            if let Some(r) = self.reqs.get_mut(usize::from(i)) {
                r.state = ReqState::Free;
            }
            let _ = self.req_free.push(i);
            return Some((opaque, error));
        }
        None
    }
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
> Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>
{
    /// Generations per slot so that `generation * REQUESTS + slot` stays a non-negative `i32`.
    pub(super) fn generations() -> u32 {
        (i32::MAX as u32 / REQUESTS.max(1) as u32).max(1)
    }

    pub(super) fn opaque(&self, i: u16) -> i32 {
        let generation = self.reqs.get(usize::from(i)).map_or(0, |r| r.generation);
        self.opaque_of(i, generation)
    }

    pub(super) fn opaque_of(&self, i: u16, generation: u32) -> i32 {
        (i64::from(generation) * REQUESTS as i64 + i64::from(i)) as i32
    }

    pub(super) fn slot_of(&self, opaque: i32) -> Option<u16> {
        let o = u32::try_from(opaque).ok()?;
        let n = u32::try_from(REQUESTS).ok().filter(|n| *n > 0)?;
        let i = u16::try_from(o % n).ok()?;
        let r = self.reqs.get(usize::from(i))?;
        let live = matches!(r.state, ReqState::Queued | ReqState::Sent);
        (r.generation == o / n && live).then_some(i)
    }

    pub(super) fn alloc_req(
        &mut self,
        peer: Peer,
        kind: ReqKind,
        deadline: Instant,
    ) -> Option<u16> {
        let i = self.req_free.pop()?;
        let r = self.reqs.get_mut(usize::from(i))?;
        r.generation = (r.generation + 1) % Self::generations();
        r.state = ReqState::Queued;
        r.peer = peer;
        r.kind = kind;
        if F::HEARTBEATS {
            match kind {
                ReqKind::Heartbeat => self.heartbeats += 1,
                ReqKind::Unregister => self.unregisters += 1,
                _ => {}
            }
        }
        let _ = self.queued.push_back(i);
        self.req_deadlines.set(i, deadline);
        Some(i)
    }

    /// Frees slot `i`, returning what it was for.
    pub(super) fn free_req(&mut self, i: u16) -> Option<ReqKind> {
        let r = self.reqs.get_mut(usize::from(i))?;
        if r.state == ReqState::Free {
            return None;
        }
        let was_queued = r.state == ReqState::Queued;
        r.state = ReqState::Free;
        let kind = r.kind;
        if was_queued {
            // Rare (a request that expired or failed before it was written): keep the queue
            // exact so that it never holds more than one entry per slot.
            for _ in 0..self.queued.len() {
                if let Some(q) = self.queued.pop_front()
                    && q != i
                {
                    let _ = self.queued.push_back(q);
                }
            }
        }
        self.req_deadlines.remove(i);
        let _ = self.req_free.push(i);
        if F::HEARTBEATS {
            match kind {
                ReqKind::Heartbeat => {
                    self.heartbeats = self.heartbeats.saturating_sub(1);
                    self.heartbeats_done |= self.heartbeats == 0;
                }
                ReqKind::Unregister => {
                    self.unregisters = self.unregisters.saturating_sub(1);
                    self.unregistered |= self.unregisters == 0;
                }
                _ => {}
            }
        }
        Some(kind)
    }

    /// Request `i` failed without an answer.
    pub(super) fn fail_req(&mut self, now: Instant, i: u16, cause: TransportError, timeout: bool) {
        let Some(r) = self.reqs.get(usize::from(i)).copied() else {
            return;
        };
        if F::CONSUMER && r.kind == ReqKind::Call && r.state == ReqState::Sent {
            // The slot waits with its error until the event is polled, so that no failure is
            // ever dropped (the queue holds each slot at most once).
            let error = if timeout {
                TransportError::TimedOut
            } else {
                cause
            };
            self.req_deadlines.remove(i);
            if let Some(x) = self.reqs.get_mut(usize::from(i)) {
                x.state = ReqState::Failed(error);
            }
            let _ = self.call_failures.push_back(i);
            return;
        }
        let Some(kind) = self.free_req(i) else {
            return;
        };
        if timeout && r.state == ReqState::Sent {
            match r.peer {
                Peer::Broker(b)
                    if self
                        .brokers
                        .get(usize::from(b.0))
                        .is_some_and(|x| x.last_answer.is_none_or(|a| a < r.sent_at)) =>
                {
                    self.close_broker(b);
                }
                Peer::Slave(_) if F::CONSUMER => self.close_peer(r.peer),
                Peer::NameServer(n) if !self.ns_close.iter().any(|x| *x == n) => {
                    let _ = self.ns_close.push_back(n);
                }
                _ => {}
            }
        }
        match kind {
            ReqKind::Route { topic, .. } => {
                if timeout {
                    // A NameServer that does not answer: use the next one.
                    self.namesrv.failed();
                }
                self.route_failed(now, topic, true, false);
            }
            ReqKind::Send { send } => {
                let cause = if timeout {
                    TransportError::TimedOut
                } else {
                    cause
                };
                self.outcome(now, send, AttemptOutcome::Transport(cause));
            }
            ReqKind::Heartbeat | ReqKind::Unregister => {}
            ReqKind::Call => {}
        }
    }
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
> Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>
{
    /// How many broker nodes [`node`](Self::node) numbers: masters, and slaves for consumers.
    pub(super) fn nodes(&self) -> usize {
        self.brokers.len() * if F::CONSUMER { 2 } else { 1 }
    }

    /// Broker node `k` of `0..nodes()` if it has an address: the masters, then a consumer's
    /// slaves.
    pub(super) fn node(&self, k: usize) -> Option<Peer> {
        let n = self.brokers.len();
        let (i, slave) = if k < n || !F::CONSUMER {
            (k, false)
        } else {
            (k - n, true)
        };
        let b = self.brokers.get(i)?;
        let id = BrokerId(i as u16);
        if !slave {
            (!b.addr.is_empty()).then_some(Peer::Broker(id))
        } else {
            (F::CONSUMER && self.consumer && !b.slave.is_empty()).then_some(Peer::Slave(id))
        }
    }

    /// Asks the runtime to close the connection to broker `b`'s master.
    pub(super) fn close_broker(&mut self, b: BrokerId) {
        self.close_peer(Peer::Broker(b));
    }

    /// Asks the runtime to close the connection to a broker node.
    pub(super) fn close_peer(&mut self, peer: Peer) {
        let (queue, b) = match peer {
            Peer::Broker(b) => (&mut self.moved, b),
            Peer::Slave(b) => (&mut self.slave_moved, b),
            Peer::NameServer(_) => return,
        };
        if !queue.iter().any(|m| *m == b) {
            let _ = queue.push_back(b);
        }
    }
}
