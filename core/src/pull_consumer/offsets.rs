//! Offsets: where a queue starts (QUERY_CONSUMER_OFFSET, `consume_from`, GET_MIN/MAX_OFFSET,
//! SEARCH_OFFSET_BY_TIMESTAMP), seeks, pauses, acknowledgements, commits
//! (UPDATE_CONSUMER_OFFSET) and lag probes.

use super::*;
use crate::wire::Chain;

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
    /// Broadcasting: the stored offset of `queue` asked for by [`PullEvent::LoadOffset`]
    /// (`None`: there is none, `consume_from` applies). `false` when the queue is not
    /// waiting for it under `lease`.
    pub fn set_local_offset(
        &mut self,
        now: Instant,
        queue: QueueKey,
        lease: u32,
        offset: Option<i64>,
    ) -> bool {
        let Some(i) = self.entry(queue, lease, QState::Loading) else {
            return false;
        };
        let retry = false;
        match offset.filter(|o| *o >= 0) {
            Some(o) => Self::start(&mut self.owned[i], o, now),
            None => match self.start_position(retry) {
                Position::Offset(o) => Self::start(&mut self.owned[i], o, now),
                other => self.owned[i].state = QState::Locate(other),
            },
        }
        true
    }

    /// Moves owned queue `queue` to `to`: what is in flight is void (a new lease), the answer
    /// of a pull in flight is ignored, and the new position is committed once located.
    /// `false` when the queue is not owned, or `to` is a timestamp and the session leaves
    /// [`Features::TIMESTAMPS`] out.
    pub fn seek(&mut self, now: Instant, queue: QueueKey, to: Position) -> bool {
        if matches!(to, Position::Timestamp(_)) && !self.timestamps {
            return false;
        }
        let Some(i) = self.owned.iter().position(|o| o.key == queue) else {
            return false;
        };
        let lease = self.lease();
        let old = self.owned[i].lease;
        // Forget its requests in flight: their answers become unknown opaques.
        self.calls.retain(|c| {
            !matches!(*c, CallRef::Query(k, l) | CallRef::Locate(k, l) | CallRef::Pull(k, l)
                if k == queue && l == old)
        });
        let o = &mut self.owned[i];
        o.lease = lease;
        o.seek = true;
        o.committing = false;
        match to {
            Position::Offset(offset) => Self::start(o, offset, now),
            other => o.state = QState::Locate(other),
        }
        true
    }

    /// Stops pulling owned queue `queue` (what was pulled is still delivered); `false` when it
    /// is not owned.
    pub fn pause(&mut self, queue: QueueKey) -> bool {
        self.set_paused(queue, true)
    }

    /// Pulls owned queue `queue` again; `false` when it is not owned.
    pub fn resume(&mut self, queue: QueueKey) -> bool {
        self.set_paused(queue, false)
    }

    /// Stops (`true`) or restarts pulling every queue, the ones assigned later too (Java's
    /// `suspend()` / `resume()` of a push consumer): what was pulled is still delivered,
    /// acknowledged and committed; rebalancing goes on. A queue paused by [`Self::pause`]
    /// stays paused.
    pub fn set_suspended(&mut self, suspended: bool) {
        self.suspended = suspended;
    }

    /// Whether the consumer is suspended ([`Self::set_suspended`]).
    pub fn is_suspended(&self) -> bool {
        self.suspended
    }

    pub(super) fn set_paused(&mut self, queue: QueueKey, paused: bool) -> bool {
        self.owned
            .iter_mut()
            .find(|o| o.key == queue)
            .map(|o| o.paused = paused)
            .is_some()
    }

    /// Commits every owned queue whose offset moved, now.
    pub fn commit_now(&mut self) {
        self.watch_commits = true;
        self.mark_commits();
    }

    /// Marks every owned queue to commit (the periodic commit, unwatched).
    pub(super) fn mark_commits(&mut self) {
        for o in self.owned.iter_mut() {
            o.commit = true;
        }
    }

    /// Acknowledges the message at `offset` of `queue` at `now`: it becomes committable once
    /// every lower offset is acknowledged too. `false` when it was not in flight under `lease`.
    pub fn ack(&mut self, now: Instant, queue: QueueKey, lease: u32, offset: i64) -> bool {
        let ok = self
            .owned
            .iter_mut()
            .find(|o| o.key == queue && o.lease == lease)
            .is_some_and(|o| {
                let ok = o.tracker.ack(offset);
                if ok {
                    o.last_consume = Some(now);
                }
                // Java waits out the flow-control delay (50 ms) whatever happens meanwhile; a
                // fast consumer would idle most of it.
                if ok
                    && o.flow_delayed
                    && matches!(o.state, QState::Ready(at) if at > now)
                    && matches!(
                        o.tracker.flow(&self.flow, self.batch),
                        FlowDecision::Pull(_)
                    )
                {
                    o.flow_delayed = false;
                    o.state = QState::Ready(now);
                    self.wake = true;
                }
                ok
            });
        if ok {
            self.stats.acked = self.stats.acked.wrapping_add(1);
            self.count(queue, |c| c.acked = c.acked.wrapping_add(1));
        }
        ok
    }

    pub(super) fn count(&mut self, queue: QueueKey, f: impl FnOnce(&mut SubCounts)) {
        if let Some(s) = self.subs.iter_mut().find(|s| s.topic == queue.topic) {
            f(&mut s.counts);
        }
    }

    /// GET_MAX_OFFSET's header (5.x asks for the committed maximum, as Java).
    pub(super) fn max_offset_header<'t>(
        &self,
        topic: &'t str,
        queue_id: i32,
    ) -> GetMaxOffsetRequestHeader<'t> {
        GetMaxOffsetRequestHeader {
            topic,
            queue_id,
            committed: (self.version >= version::V5_0_0).then_some(true),
        }
    }

    /// The name of `broker` for a 5.x client's queue requests (`bname`, which a 5.x proxy
    /// routes by), copied out of the session; `None` for a 4.x version, or when the session
    /// leaves it out ([`Features::BROKER_NAMES`](crate::session::Features::BROKER_NAMES)).
    pub(super) fn bname<S: SessionApi>(
        &self,
        session: &S,
        broker: BrokerId,
    ) -> Option<String<MAX_NAME>> {
        if !self.names_brokers::<S>() {
            return None;
        }
        let mut name = String::new();
        name.push_str(session.broker_name(broker)?).ok()?;
        Some(name)
    }

    /// Whether this consumer's queue requests name their broker (`bname`): a 5.x version, in a
    /// session that compiles it in.
    pub(super) fn names_brokers<S: SessionApi>(&self) -> bool {
        S::Features::BROKER_NAMES && self.version >= version::V5_0_0
    }

    /// The request that locates a queue's start at `position` (GET_MAX_OFFSET for the end, an
    /// offset, or a timestamp the session leaves out).
    pub(super) fn locate_request<S: SessionApi>(position: Position) -> RequestCode {
        match position {
            Position::Begin => RequestCode::GET_MIN_OFFSET,
            Position::Timestamp(_) if S::Features::TIMESTAMPS => {
                RequestCode::SEARCH_OFFSET_BY_TIMESTAMP
            }
            Position::End | Position::Offset(_) | Position::Timestamp(_) => {
                RequestCode::GET_MAX_OFFSET
            }
        }
    }

    /// [`Self::call`] of a queue's request, with `bname` after `ext` when given (a 5.x
    /// client's offset requests, see [`Self::bname`]). The headers leave the field out so that
    /// a session without it ([`Features::BROKER_NAMES`](crate::session::Features)) carries no
    /// code for it.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn named_call<E: ExtFields, S: SessionApi, M: Outbound + ?Sized>(
        calls: &mut Calls<CALLS>,
        now: Instant,
        session: &mut S,
        peer: Peer,
        code: RequestCode,
        (ext, bname): (E, Option<&str>),
        timeout: Duration,
        what: CallRef,
        buf: &mut [u8],
        lend: &M,
    ) -> Result<Transmit, CallError> {
        match bname {
            Some(b) if S::Features::BROKER_NAMES => {
                let named = Chain(ext, &[("bname", b)][..]);
                Self::call(
                    calls, now, session, peer, code, named, timeout, what, buf, lend,
                )
            }
            _ => Self::call(
                calls, now, session, peer, code, ext, timeout, what, buf, lend,
            ),
        }
    }

    /// GET_MAX_OFFSET of a queue whose lag is wanted (see `Owned::measure`).
    pub(super) fn measure_call<S: SessionApi, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        buf: &mut [u8],
        lend: &M,
    ) -> Option<Transmit> {
        let i = self.owned.iter().position(|o| o.measure && !o.measuring)?;
        let key = self.owned[i].key;
        self.owned[i].measure = false;
        let mut topic = String::<MAX_NAME>::new();
        topic.push_str(session.topic_name(key.topic)?).ok()?;
        let bname = self.bname(session, key.broker);
        let hdr = (
            self.max_offset_header(&topic, key.queue_id),
            bname.as_deref(),
        );
        let peer = session.read_peer(key.broker, false);
        let code = RequestCode::GET_MAX_OFFSET;
        let what = CallRef::MaxOffset(key);
        match Self::named_call(
            &mut self.calls,
            now,
            session,
            peer,
            code,
            hdr,
            CLIENT_API_TIMEOUT,
            what,
            buf,
            lend,
        ) {
            Ok(tx) => {
                self.owned[i].measuring = true;
                Some(tx)
            }
            Err(CallError::TooManyRequests) => {
                self.owned[i].measure = true;
                self.blocked = true;
                None
            }
            Err(_) => None,
        }
    }

    /// Whether an UPDATE_CONSUMER_OFFSET to broker `b` is in flight.
    pub(super) fn committing_to(&self, b: BrokerId) -> bool {
        self.calls
            .values()
            .any(|c| matches!(c, CallRef::Commit(k, ..) if k.broker == b))
    }

    /// `computePullFromWhere` without a committed offset.
    pub(super) fn start_position(&self, retry_topic: bool) -> Position {
        match self.consume_from {
            ConsumeFromWhere::FirstOffset => Position::Offset(0),
            ConsumeFromWhere::LastOffset if retry_topic => Position::Offset(0),
            ConsumeFromWhere::LastOffset => Position::End,
            ConsumeFromWhere::Timestamp if retry_topic => Position::End,
            ConsumeFromWhere::Timestamp => Position::Timestamp(self.consume_timestamp),
        }
    }

    /// Starts pulling at `offset`: the committed offset when it came from the broker's store;
    /// after a seek, the new position is committed next.
    pub(super) fn start(o: &mut Owned<TRACK>, offset: i64, now: Instant) {
        o.tracker = QueueTracker::new(offset);
        if core::mem::take(&mut o.seek) {
            o.commit = true;
        } else {
            o.tracker.mark_committed(offset);
        }
        o.state = QState::Ready(now);
    }

    pub(super) fn committed(&mut self, key: QueueKey, lease: Option<u32>, offset: i64, ok: bool) {
        if ok {
            self.stats.commits = self.stats.commits.wrapping_add(1);
        } else {
            self.stats.commit_failures = self.stats.commit_failures.wrapping_add(1);
        }
        let Some(lease) = lease else {
            // A dropped queue: its next owner may lock it now.
            if self.orderly {
                let _ = self.unlocks.push(key);
            }
            return;
        };
        if let Some(o) = self
            .owned
            .iter_mut()
            .find(|o| o.key == key && o.lease == lease)
        {
            o.committing = false;
            if ok {
                o.tracker.mark_committed(offset);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn commit_call<S: SessionApi, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        key: QueueKey,
        lease: Option<u32>,
        offset: i64,
        buf: &mut [u8],
        lend: &M,
    ) -> Result<Transmit, CallError> {
        let mut name: String<MAX_NAME> = String::new();
        let topic = session.topic_name(key.topic).unwrap_or("");
        name.push_str(topic)
            .map_err(|_| CallError::Encode(crate::wire::EncodeError::BufferTooSmall))?;
        let bname = self.bname(session, key.broker);
        let hdr = UpdateConsumerOffsetRequestHeader {
            consumer_group: &self.group,
            topic: &name,
            queue_id: key.queue_id,
            commit_offset: offset,
        };
        let hdr = (hdr, bname.as_deref());
        let what = CallRef::Commit(key, lease, offset);
        let peer = session.read_peer(key.broker, false);
        let code = RequestCode::UPDATE_CONSUMER_OFFSET;
        Self::named_call(
            &mut self.calls,
            now,
            session,
            peer,
            code,
            hdr,
            OFFSET_RPC_TIMEOUT,
            what,
            buf,
            lend,
        )
    }
}
