//! What the client asks of the consumer attached to it: the [`PullConsumer`], or
//! [`NoConsumer`] for a producer (whose client then compiles none of the consumer's code).
//!
//! The client correlates, times out and routes; the consumer decides. Every method here is
//! called by [`Client`](super::Client) only, in the order its docs give.

use crate::pull_consumer::{Delivery, PullConsumer, PullEvent, QueueKey, Refusal};
use crate::send_back::{Nack, NackError};
use crate::session::{Outbound, SessionApi, TopicId, Transmit};
use crate::store::Store;
use crate::time::Instant;

/// A consumer the client drives: the client correlates, times out and routes; the consumer
/// decides.
pub trait Attached {
    /// Whether a consumer is there: `false` answers the brokers' consumer requests with
    /// REQUEST_CODE_NOT_SUPPORTED, as a Java producer does.
    const ATTACHED: bool;
    /// Runs its schedules (rebalance, commits, locks).
    fn handle_timeout(&mut self, now: Instant);
    /// When [`handle_timeout`](Self::handle_timeout) or [`poll_call`](Self::poll_call) has
    /// work next.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Its next request, encoded through the session's `call`.
    fn poll_call<S: SessionApi, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        buf: &mut [u8],
        lend: &M,
    ) -> Option<Transmit>;
    /// The answer to one of its calls (`false`: not one of them).
    fn handle_response<S: SessionApi>(
        &mut self,
        now: Instant,
        session: &S,
        opaque: i32,
        frame: &[u8],
        deliver: &mut dyn FnMut(Delivery<'_, '_>),
    ) -> bool;
    /// One of its calls got no answer (`false`: not one of them).
    fn handle_call_failed<S: SessionApi>(&mut self, now: Instant, session: &S, opaque: i32)
    -> bool;
    /// The refusal the last answer given to [`handle_response`](Self::handle_response)
    /// carried, if it was one.
    fn take_refusal(&mut self) -> Option<Refusal> {
        None
    }
    /// Asks for the SQL92 checks of the start; how many (see
    /// [`PullConsumer::check_filters`]).
    fn check_filters<S: SessionApi>(&mut self, _session: &S) -> usize {
        0
    }
    /// How the start's SQL92 checks ended (see [`PullConsumer::filters_checked`]).
    fn filters_checked(&mut self, _give_up: bool) -> Option<Result<(), (TopicId, i32)>> {
        Some(Ok(()))
    }
    /// Its next event; `milestones`: also the milestones a command asked for (a round
    /// applied, commits drained, a lock granted).
    fn poll_event(&mut self, milestones: bool) -> Option<PullEvent>;
    /// Whether something it was told since the last call made a request due now.
    fn take_wake(&mut self) -> bool;
    /// NOTIFY_CONSUMER_IDS_CHANGED.
    fn notify_ids_changed(&mut self, now: Instant);
    /// RESET_CONSUMER_CLIENT_OFFSET's body.
    fn reset_offsets<S: SessionApi>(&mut self, now: Instant, session: &S, body: &[u8]);
    /// The consumer group (GET_CONSUMER_RUNNING_INFO names one).
    fn group(&self) -> &str;
    /// Orderly consumption (CONSUME_MESSAGE_DIRECTLY's answer says so).
    fn orderly(&self) -> bool;
    /// Its subscribed topics.
    fn topics(&self) -> impl Iterator<Item = TopicId> + '_;
    /// A rebalance round now (reported by [`PullEvent::Rebalanced`]).
    fn rebalance_now(&mut self, now: Instant);
    /// No periodic round for a rebalance interval.
    fn defer_rebalance(&mut self, now: Instant);
    /// The send-back of a message the application could not process.
    ///
    /// # Errors
    /// [`NackError`].
    fn nack(&mut self, queue: QueueKey, lease: u32, nack: &Nack<'_>) -> Result<(), NackError>;
    /// Acknowledges the message at `offset` (`false`: not in flight under `lease`).
    fn ack(&mut self, now: Instant, queue: QueueKey, lease: u32, offset: i64) -> bool;
    /// Deliveries of a message before it goes to the dead-letter queue.
    fn max_reconsume(&self) -> i32;
    /// The `GetConsumerStatusBody` of topic `t` (its owned queues' offsets), written into
    /// `buf`.
    fn consumer_status<S: SessionApi>(
        &self,
        session: &S,
        t: TopicId,
        buf: &mut [u8],
    ) -> Option<usize>;
    /// The `ConsumerRunningInfo` body, written into `buf`.
    #[allow(clippy::too_many_arguments)]
    fn running_info<S: SessionApi>(
        &mut self,
        now: Instant,
        unix_now: i64,
        session: &S,
        extra: &[(&str, &str)],
        consume_rt: u64,
        buf: &mut [u8],
    ) -> Option<usize>;
}

/// No consumer: a producer's client.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoConsumer;

impl Attached for NoConsumer {
    const ATTACHED: bool = false;
    fn handle_timeout(&mut self, _: Instant) {}
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn poll_call<S: SessionApi, M: Outbound + ?Sized>(
        &mut self,
        _: Instant,
        _: &mut S,
        _: &mut [u8],
        _: &M,
    ) -> Option<Transmit> {
        None
    }
    fn handle_response<S: SessionApi>(
        &mut self,
        _: Instant,
        _: &S,
        _: i32,
        _: &[u8],
        _: &mut dyn FnMut(Delivery<'_, '_>),
    ) -> bool {
        false
    }
    fn handle_call_failed<S: SessionApi>(&mut self, _: Instant, _: &S, _: i32) -> bool {
        false
    }
    fn poll_event(&mut self, _: bool) -> Option<PullEvent> {
        None
    }
    fn take_wake(&mut self) -> bool {
        false
    }
    fn notify_ids_changed(&mut self, _: Instant) {}
    fn reset_offsets<S: SessionApi>(&mut self, _: Instant, _: &S, _: &[u8]) {}
    fn group(&self) -> &str {
        ""
    }
    fn orderly(&self) -> bool {
        false
    }
    fn topics(&self) -> impl Iterator<Item = TopicId> + '_ {
        core::iter::empty()
    }
    fn rebalance_now(&mut self, _: Instant) {}
    fn defer_rebalance(&mut self, _: Instant) {}
    fn nack(&mut self, _: QueueKey, _: u32, _: &Nack<'_>) -> Result<(), NackError> {
        Err(NackError::NotInFlight)
    }
    fn ack(&mut self, _: Instant, _: QueueKey, _: u32, _: i64) -> bool {
        false
    }
    fn max_reconsume(&self) -> i32 {
        0
    }
    fn consumer_status<S: SessionApi>(&self, _: &S, _: TopicId, _: &mut [u8]) -> Option<usize> {
        None
    }
    fn running_info<S: SessionApi>(
        &mut self,
        _: Instant,
        _: i64,
        _: &S,
        _: &[(&str, &str)],
        _: u64,
        _: &mut [u8],
    ) -> Option<usize> {
        None
    }
}

impl<
    const SUBS: usize,
    const OWNED: usize,
    const TRACK: usize,
    const CALLS: usize,
    const CIDS: usize,
    const QUEUES: usize,
    const BACKS: usize,
    St: Store,
> Attached for PullConsumer<SUBS, OWNED, TRACK, CALLS, CIDS, QUEUES, BACKS, St>
{
    const ATTACHED: bool = true;
    fn handle_timeout(&mut self, now: Instant) {
        PullConsumer::handle_timeout(self, now);
    }
    fn poll_timeout(&self) -> Option<Instant> {
        PullConsumer::poll_timeout(self)
    }
    fn poll_call<S: SessionApi, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        buf: &mut [u8],
        lend: &M,
    ) -> Option<Transmit> {
        PullConsumer::poll_call(self, now, session, buf, lend)
    }
    fn handle_response<S: SessionApi>(
        &mut self,
        now: Instant,
        session: &S,
        opaque: i32,
        frame: &[u8],
        deliver: &mut dyn FnMut(Delivery<'_, '_>),
    ) -> bool {
        PullConsumer::handle_response(self, now, session, opaque, frame, deliver)
    }
    fn handle_call_failed<S: SessionApi>(
        &mut self,
        now: Instant,
        session: &S,
        opaque: i32,
    ) -> bool {
        PullConsumer::handle_call_failed(self, now, session, opaque)
    }
    fn take_refusal(&mut self) -> Option<Refusal> {
        PullConsumer::take_refusal(self)
    }
    fn check_filters<S: SessionApi>(&mut self, session: &S) -> usize {
        PullConsumer::check_filters(self, session)
    }
    fn filters_checked(&mut self, give_up: bool) -> Option<Result<(), (TopicId, i32)>> {
        PullConsumer::filters_checked(self, give_up)
    }
    fn poll_event(&mut self, milestones: bool) -> Option<PullEvent> {
        match milestones {
            true => PullConsumer::poll_event(self),
            false => self.poll_outcome(),
        }
    }
    fn take_wake(&mut self) -> bool {
        PullConsumer::take_wake(self)
    }
    fn notify_ids_changed(&mut self, now: Instant) {
        PullConsumer::notify_ids_changed(self, now);
    }
    fn reset_offsets<S: SessionApi>(&mut self, now: Instant, session: &S, body: &[u8]) {
        PullConsumer::reset_offsets(self, now, session, body);
    }
    fn group(&self) -> &str {
        PullConsumer::group(self)
    }
    fn orderly(&self) -> bool {
        self.is_orderly()
    }
    fn topics(&self) -> impl Iterator<Item = TopicId> + '_ {
        PullConsumer::topics(self)
    }
    fn rebalance_now(&mut self, now: Instant) {
        PullConsumer::rebalance_now(self, now);
    }
    fn defer_rebalance(&mut self, now: Instant) {
        PullConsumer::defer_rebalance(self, now);
    }
    fn nack(&mut self, queue: QueueKey, lease: u32, nack: &Nack<'_>) -> Result<(), NackError> {
        PullConsumer::nack(self, queue, lease, nack)
    }
    fn ack(&mut self, now: Instant, queue: QueueKey, lease: u32, offset: i64) -> bool {
        PullConsumer::ack(self, now, queue, lease, offset)
    }
    fn max_reconsume(&self) -> i32 {
        self.max_reconsume_times()
    }
    fn consumer_status<S: SessionApi>(
        &self,
        session: &S,
        t: TopicId,
        buf: &mut [u8],
    ) -> Option<usize> {
        PullConsumer::consumer_status(self, session, t, buf)
    }
    fn running_info<S: SessionApi>(
        &mut self,
        now: Instant,
        unix_now: i64,
        session: &S,
        extra: &[(&str, &str)],
        consume_rt: u64,
        buf: &mut [u8],
    ) -> Option<usize> {
        PullConsumer::running_info(self, now, unix_now, session, extra, consume_rt, buf)
    }
}
