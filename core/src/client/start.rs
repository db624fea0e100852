//! A consumer's start (Java `DefaultMQPushConsumerImpl.start`, then
//! `MQClientInstance.rebalanceImmediately`), in this order so that the queues are assigned
//! when it ends:
//!
//! 1. **routes** of every subscribed topic, looked up now (in parallel);
//! 2. the **SQL92 checks** ([`crate::pull_consumer::PullConsumer::check_filters`], with
//!    [`Features::CALLS`](crate::session::Features::CALLS)): a refusal, or a broker that
//!    cannot be asked unless the start is lazy, ends the start with
//!    [`Event::StartFailed`](super::Event::StartFailed) before anything is announced;
//! 3. a **heartbeat** to every broker they name (the brokers learn the group and its
//!    subscriptions, and create `%RETRY%<group>`);
//! 4. the route of `%RETRY%<group>`, which exists from then on;
//! 5. a **rebalance** round, until every queue it gives knows its start offset;
//!
//! then [`Event::Started`](super::Event::Started). Each step waits at most
//! [`CLIENT_API_TIMEOUT`] (the rebalance twice that), so a missing NameServer or broker never
//! blocks the start: the schedules retry in the background.

use crate::producer::CLIENT_API_TIMEOUT;
use crate::session::TopicId;
use crate::time::Instant;

/// Where a consumer's start stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Start {
    /// Not asked for, or done.
    Idle,
    /// Waiting for the routes of the subscribed topics.
    Routes(Instant),
    /// Waiting for the SQL92 checks.
    Filters(Instant),
    /// Waiting for the heartbeats' answers.
    Heartbeat(Instant),
    /// Waiting for the route of the retry topic.
    RetryRoute(TopicId, Instant),
    /// Waiting for the first rebalance round.
    Rebalance(Instant),
    /// Done: [`Event::Started`](super::Event::Started) waits to be polled.
    Done,
    /// Failed on this topic's SQL92 check (its response code; -1: not asked):
    /// [`Event::StartFailed`](super::Event::StartFailed) waits to be polled.
    Failed(TopicId, i32),
}

impl Start {
    /// The deadline of the current step.
    pub(super) fn deadline(self) -> Option<Instant> {
        match self {
            Start::Routes(at)
            | Start::Filters(at)
            | Start::Heartbeat(at)
            | Start::RetryRoute(_, at)
            | Start::Rebalance(at) => Some(at),
            Start::Idle | Start::Done | Start::Failed(..) => None,
        }
    }

    /// A step that waits one API timeout from `now`.
    pub(super) fn step(now: Instant) -> Instant {
        now.saturating_add(CLIENT_API_TIMEOUT)
    }

    /// The rebalance step (a round and its offset queries: two API timeouts).
    pub(super) fn rebalance(now: Instant) -> Start {
        Start::Rebalance(now.saturating_add(CLIENT_API_TIMEOUT.saturating_mul(2)))
    }
}
