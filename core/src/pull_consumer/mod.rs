//! A clustering pull consumer, sans-IO, on top of the client [`Session`](crate::session::Session): the decisions that
//! make RocketMQ's push consumer (Java `RebalanceImpl`, `DefaultMQPushConsumerImpl.pullMessage`,
//! `RemoteBrokerOffsetStore`), for every runtime.
//!
//! One [`PullConsumer`] per consumer group member. It owns:
//!
//! - **rebalance rounds** every `rebalance_interval` and on [`PullConsumer::rebalance_now`]
//!   (e.g. NOTIFY_CONSUMER_IDS_CHANGED, dispatched by [`Client`](crate::client::Client)):
//!   GET_CONSUMER_LIST_BY_GROUP to a random broker of each subscribed topic's route, the
//!   allocation on Java-sorted inputs ([`allocate`]), then revoked queues (their offset
//!   committed) and new ones;
//! - **start offsets** (`computePullFromWhere`): QUERY_CONSUMER_OFFSET, else `consume_from`
//!   (GET_MAX_OFFSET for the last offset; 0 for the first and for retry topics);
//! - **pull scheduling** per owned queue: flow control ([`QueueTracker::flow`]), one long-polling
//!   PULL_MESSAGE at a time, what each answer does (deliver, advance, reset on OFFSET_ILLEGAL,
//!   back off on errors);
//! - **offsets**: the in-flight set per queue, acknowledgements, and UPDATE_CONSUMER_OFFSET
//!   every `persist_interval`, for revoked queues, and on [`PullConsumer::stop`];
//! - **positioning**: [`PullConsumer::seek`] to an offset, the beginning (GET_MIN_OFFSET), the
//!   end (GET_MAX_OFFSET) or a timestamp (SEARCH_OFFSET_BY_TIMESTAMP), and
//!   [`PullConsumer::pause`] / [`PullConsumer::resume`].
//!
//! Each owned queue carries a **lease**: a number that changes whenever the queue is
//! (re)assigned or reset, so that a runtime can tell messages of a revoked queue
//! ([`PullConsumer::is_current`]) and acknowledgements can never touch a later ownership.
//!
//! ## Driving it
//!
//! ```text
//!   subscribe(topic, expression)            once per topic, before the first rebalance
//!   handle_timeout(now)                     at poll_timeout()
//!   poll_call(now, session, buf, lend)      until None: each Transmit is written like a
//!                                           Session::call (the session correlates it)
//!   handle_response(now, session, opaque,   for every Incoming::Response the runtime did not
//!       frame, deliver)                     issue itself; deliver() receives each message
//!   handle_call_failed(now, &session, opaque) for every Event::CallFailed likewise
//!   ack(queue, lease, offset)               when the application processed a message
//!   stop(now)                               then poll_call until commits_pending() == 0
//! ```
//!
//! Capacities are const generics: `SUBS` subscriptions, `OWNED` queues owned at once, `TRACK`
//! messages in flight per queue (flow control never pulls more than the free slots), `CALLS`
//! requests in flight, `CIDS` consumers per group, `QUEUES` queues per topic
//! route (the session's). It talks to the session through [`SessionApi`], which every
//! [`Session`](crate::session::Session) implements.

use core::fmt;

use heapless::{String, Vec};

use crate::admin::{
    ConsumeStatus, ProcessQueueInfo, parse_reset_offsets, prop, write_running_info,
};
use crate::consumer::{
    AllocateStrategy, BROKER_SUSPEND_MAX_TIME, ConsumeFromWhere, ConsumeType, ConsumerData,
    FlowDecision, FlowLimits, MessageModel, MessageQueue, OFFSET_RPC_TIMEOUT,
    PERSIST_OFFSET_INTERVAL, PULL_BATCH_SIZE, PULL_EXCEPTION_DELAY_V5, PullRequest, PullStatus,
    QueueTracker, REBALANCE_INTERVAL, SUB_ALL, Subscription, TagExpression, TrackError, allocate,
    parse_consumer_list, parse_pull_response, sort_consumer_ids, write_heartbeat,
};
use crate::lock::{
    LOCK_INTERVAL, LOCK_MAX_LIVE, LOCK_TIMEOUT, RELOCK_REBALANCE_DELAY, UNLOCKED_PULL_DELAY,
    parse_locked, queue_len, write_lock_body,
};
use crate::message::stored::CrcCheck;
use crate::message::{StoredMessage, StoredMessages};
use crate::producer::{CLIENT_API_TIMEOUT, HeartbeatFlavor};
use crate::route::MASTER_ID;
use crate::send_back::{
    MAX_MSG_ID, MAX_RECONSUME_TIMES, Nack, NackError, RETRY_TOPIC_PREFIX, SEND_BACK_TIMEOUT,
    origin_topic, retry_topic,
};
use crate::session::{
    BrokerId, CallError, Features, Outbound, Peer, SessionApi, TopicId, Transmit,
};
use crate::store::{Fixed, Store, Table};
use crate::time::{Duration, Instant};
use crate::wire::headers::{
    ConsumerSendMsgBackRequestHeader, GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader, GetMinOffsetRequestHeader,
    HeartbeatRequestHeader, QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
    SearchOffsetRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use crate::wire::{CommandHeader, ExtFields, Frame, RequestCode, ResponseCode, Scratch, version};

/// Longest consumer group or client id kept.
pub const MAX_NAME: usize = 255;
/// Shortest time between two route refreshes a topic's failing pulls ask for.
pub const ROUTE_REFRESH_ON_FAILURE: Duration = Duration::from_secs(1);
/// Longest subscription expression kept.
pub const MAX_EXPRESSION: usize = 255;

mod admin;
mod answers;
mod config;
mod filters;
#[cfg(any(test, feature = "fuzzing"))]
mod invariants;
mod offsets;
mod orderly;
mod pull;
mod rebalance;
mod send_back;

pub use answers::Refusal;
pub use config::{PullConfig, PullConfigError};

/// Where [`PullConsumer::seek`] moves a queue (and where `consume_from` starts one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Position {
    /// This offset.
    Offset(i64),
    /// The queue's minimum offset (GET_MIN_OFFSET).
    Begin,
    /// The queue's maximum offset (GET_MAX_OFFSET): only messages stored from now on.
    End,
    /// The first message stored at or after this timestamp, ms (SEARCH_OFFSET_BY_TIMESTAMP;
    /// a 4.9 broker answers the message stored nearest to it, before or after).
    Timestamp(i64),
}

/// One queue, as the session names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QueueKey {
    /// Topic.
    pub topic: TopicId,
    /// Broker.
    pub broker: BrokerId,
    /// Queue id.
    pub queue_id: i32,
}

/// One message handed to the application by [`PullConsumer::handle_response`].
#[derive(Clone, Copy, Debug)]
pub struct Delivery<'a, 'm> {
    /// Its queue.
    pub queue: QueueKey,
    /// The queue's lease when it was pulled (give it back to [`PullConsumer::ack`]).
    pub lease: u32,
    /// The message's topic: the queue's, or for a message of `%RETRY%<group>` the topic it
    /// was first consumed from (its `RETRY_TOPIC`).
    pub topic: &'a str,
    /// The queue's topic.
    pub queue_topic: &'a str,
    /// Broker name.
    pub broker_name: &'a str,
    /// The message (body as stored: decompress it if its sys flag says so).
    pub message: &'a StoredMessage<'m>,
}

/// One owned queue, as [`PullConsumer::owned`] shows it.
#[derive(Clone, Copy, Debug)]
pub struct OwnedQueue<'a, const TRACK: usize> {
    /// The queue.
    pub queue: QueueKey,
    /// Its current lease.
    pub lease: u32,
    /// Its offsets: in flight, next to pull, committable, committed.
    pub tracker: &'a QueueTracker<TRACK>,
    /// The queue's maximum offset as the broker reported it with the last pull answer.
    pub max_offset: Option<i64>,
}

impl<const TRACK: usize> OwnedQueue<'_, TRACK> {
    /// Messages not yet processed: the broker's maximum offset minus the committable offset
    /// (`None` before the broker told its maximum: a pull answer, or GET_MAX_OFFSET for a
    /// queue not pulled for a persist period).
    pub fn lag(&self) -> Option<u64> {
        lag_of(self.max_offset, self.tracker)
    }
}

/// The `offset` of a successful GET_MAX_OFFSET, GET_MIN_OFFSET or SEARCH_OFFSET_BY_TIMESTAMP
/// answer (they share the header shape).
fn answered_offset(header: Option<&CommandHeader<'_>>, code: i32) -> Option<i64> {
    let h = header.filter(|_| code == 0)?;
    let decoded = GetMaxOffsetResponseHeader::decode(h, &mut Scratch::default()).ok()?;
    Some(decoded.offset)
}

fn lag_of<const TRACK: usize>(max: Option<i64>, tracker: &QueueTracker<TRACK>) -> Option<u64> {
    Some(u64::try_from(max?.saturating_sub(tracker.committable())).unwrap_or(0))
}

/// Counters of a [`PullConsumer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PullStats {
    /// PULL_MESSAGE requests written.
    pub pulls: u64,
    /// Pulls that failed (error code, bad header, no answer).
    pub pull_failures: u64,
    /// Pulls delayed by flow control.
    pub flow_control_delays: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Messages acknowledged.
    pub acked: u64,
    /// Records of a pull answer that did not decode (the rest of that answer was dropped).
    pub undecodable: u64,
    /// Rebalance rounds started.
    pub rebalances: u64,
    /// NOTIFY_CONSUMER_IDS_CHANGED received.
    pub notifications: u64,
    /// Offsets committed (UPDATE_CONSUMER_OFFSET answered with success).
    pub commits: u64,
    /// Commits that failed.
    pub commit_failures: u64,
    /// Queues allocated to us that did not fit the owned table.
    pub owned_full: u64,
    /// Messages sent back (CONSUMER_SEND_MSG_BACK answered with success).
    pub sent_back: u64,
    /// Send-backs that failed (the runtime's fallback follows).
    pub send_back_failures: u64,
}

/// What became of a [`PullConsumer::nack`]ed message; read with [`PullConsumer::poll_event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PullEvent {
    /// The broker took it back (it returns through `%RETRY%<group>`, or went to
    /// `%DLQ%<group>`); its offset is acknowledged.
    SentBack {
        /// Its queue.
        queue: QueueKey,
        /// The lease it was nacked under.
        lease: u32,
        /// Its queue offset.
        offset: i64,
    },
    /// Broadcasting: `queue` is new; tell its stored offset with
    /// [`PullConsumer::set_local_offset`] (`None` when there is none: `consume_from` applies).
    LoadOffset {
        /// The queue.
        queue: QueueKey,
        /// Its lease.
        lease: u32,
    },
    /// Broadcasting: store `offset` as `queue`'s consumed offset (every `persist_interval`,
    /// when the queue goes away, and on [`PullConsumer::stop`]).
    Persist {
        /// The queue.
        queue: QueueKey,
        /// Its committable offset.
        offset: i64,
    },
    /// The rebalance round (or assignment) asked for with
    /// [`PullConsumer::rebalance_now`] or [`PullConsumer::assign_queues`] is applied, and
    /// every queue it gave knows its start offset.
    Rebalanced,
    /// Every commit asked for with [`PullConsumer::commit_now`] or [`PullConsumer::stop`] is
    /// answered (or failed), and nothing waits to be committed.
    Committed,
    /// Orderly: the broker locked `queue` for us (again): [`PullConsumer::begin`] may succeed
    /// now.
    Locked {
        /// The queue.
        queue: QueueKey,
        /// Its lease.
        lease: u32,
    },
    /// The send-back failed: send the fallback copy to `%RETRY%<group>` (see
    /// [`crate::send_back`]) and [`ack`](PullConsumer::ack) it when stored, else hand the
    /// message out again after [`LOCAL_RETRY_DELAY`](crate::send_back::LOCAL_RETRY_DELAY).
    SendBackFailed {
        /// Its queue.
        queue: QueueKey,
        /// The lease it was nacked under.
        lease: u32,
        /// Its queue offset.
        offset: i64,
    },
}

/// A send-back waiting for a request slot or an answer.
struct Back {
    key: QueueKey,
    lease: u32,
    offset: i64,
    commit_log_offset: i64,
    delay_level: i32,
    msg_id: String<MAX_MSG_ID>,
    topic: String<MAX_NAME>,
    sent: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QState {
    /// Orderly: waits for its first lock.
    Lock,
    /// Needs QUERY_CONSUMER_OFFSET (broadcasting: the runtime's stored offset).
    New,
    /// Broadcasting: waiting for [`PullConsumer::set_local_offset`].
    Loading,
    /// QUERY_CONSUMER_OFFSET in flight.
    Querying,
    /// Needs its offset located (GET_MIN_OFFSET, GET_MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP).
    Locate(Position),
    /// That request in flight.
    Locating(Position),
    /// Pull at this instant.
    Ready(Instant),
    /// PULL_MESSAGE in flight.
    Pulling,
}

struct Owned<const TRACK: usize> {
    key: QueueKey,
    lease: u32,
    state: QState,
    /// A commit is wanted (persist tick, reset, stop).
    commit: bool,
    /// A commit is in flight.
    committing: bool,
    tracker: QueueTracker<TRACK>,
    /// The broker's maximum offset of the queue, from the last pull answer.
    max_offset: Option<i64>,
    /// Started by [`PullConsumer::seek`]: commit the position it starts at.
    seek: bool,
    /// [`PullConsumer::pause`]d: no pull until resumed.
    paused: bool,
    /// Orderly: when the broker last confirmed our lock.
    locked_at: Option<Instant>,
    /// Orderly: where its lock request stands.
    lock: LockStep,
    /// Orderly: locked since [`PullEvent::Locked`] was last reported.
    lock_news: bool,
    /// Orderly: the application is processing it ([`PullConsumer::begin`]).
    busy: bool,
    /// Orderly: revoked while busy; dropped at [`PullConsumer::end`].
    leaving: bool,
    /// When its last pull went out.
    last_pull: Option<Instant>,
    /// When a message of it was last acknowledged.
    last_consume: Option<Instant>,
    /// Its pull waits for flow control: an ack that brings it under the limits pulls at once.
    flow_delayed: bool,
    /// When `max_offset` was last learnt (a pull answer or GET_MAX_OFFSET).
    max_at: Option<Instant>,
    /// GET_MAX_OFFSET wanted / in flight: the queue is not being pulled (paused, flow
    /// control, orderly without its lock) and its lag would go stale.
    measure: bool,
    measuring: bool,
    /// The broker's last pull answer suggested a slave (`suggestWhichBrokerId` != 0): the
    /// next pull goes there when the route names one.
    slave: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LockStep {
    Idle,
    Wanted,
    Sent,
    /// In the broker's answer (being applied).
    Granted,
}

struct Sub {
    topic: TopicId,
    expression: String<MAX_EXPRESSION>,
    /// An SQL92 expression (else TAG).
    sql: bool,
    /// Pulls answered, their summed round trips (ms), messages acknowledged and nacked, and
    /// those counts at the last running-info report.
    counts: SubCounts,
    reported: (Instant, SubCounts),
    /// GET_CONSUMER_LIST_BY_GROUP wanted in this round / in flight.
    list: bool,
    listing: bool,
    /// The last round found no route: the next one runs as soon as the route is there (not
    /// a rebalance interval later).
    unrouted: bool,
    /// A pull of this topic failed: refresh its route (at most once a second), so that a dead
    /// master's absence from the route moves reads to its slave without waiting for the
    /// periodic refresh.
    stale: bool,
    refreshed_at: Option<Instant>,
    /// Its SQL92 check at the start ([`filters`]).
    check: filters::FilterCheck,
}

impl Sub {
    fn expr(&self) -> TagExpression<'_> {
        if self.sql {
            TagExpression::sql(&self.expression)
        } else {
            TagExpression::new(&self.expression)
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct SubCounts {
    pulls: u64,
    pull_rt_ms: u64,
    acked: u64,
    failed: u64,
}

#[derive(Clone, Copy, Debug)]
enum CallRef {
    ConsumerList(u8),
    Query(QueueKey, u32),
    Locate(QueueKey, u32),
    Pull(QueueKey, u32),
    /// `lease` is `None` for a revoked queue.
    Commit(QueueKey, Option<u32>, i64),
    SendBack(QueueKey, u32, i64),
    Lock(BrokerId),
    Unlock,
    /// GET_MAX_OFFSET of a queue that is not being pulled (its lag).
    MaxOffset(QueueKey),
    /// CHECK_CLIENT_CONFIG of subscription `i`, asked of this broker.
    Filter(u8, BrokerId),
}

/// This consumer's requests in flight by opaque: a few, so a list searched in order (less
/// code than a hash map, and as fast at this size).
#[derive(Debug)]
struct Calls<const N: usize>(Vec<(i32, CallRef), N>);

impl<const N: usize> Calls<N> {
    fn len(&self) -> usize {
        self.0.len()
    }

    /// Records `what` under `opaque`; `Err` when full (callers check the room first).
    fn insert(&mut self, opaque: i32, what: CallRef) -> Result<(), (i32, CallRef)> {
        self.0.push((opaque, what))
    }

    fn swap_remove(&mut self, opaque: &i32) -> Option<CallRef> {
        let i = self.0.iter().position(|(o, _)| o == opaque)?;
        Some(self.0.swap_remove(i).1)
    }

    fn values(&self) -> impl Iterator<Item = &CallRef> {
        self.0.iter().map(|(_, c)| c)
    }

    fn retain(&mut self, mut keep: impl FnMut(&CallRef) -> bool) {
        self.0.retain(|(_, c)| keep(c));
    }
}

/// The consumer (see the [module docs](self)).
pub struct PullConsumer<
    const SUBS: usize,
    const OWNED: usize,
    const TRACK: usize,
    const CALLS: usize,
    const CIDS: usize,
    const QUEUES: usize,
    const BACKS: usize = 16,
    St: Store = Fixed,
> {
    group: String<MAX_NAME>,
    client_id: String<MAX_NAME>,
    strategy: AllocateStrategy,
    consume_from: ConsumeFromWhere,
    consume_timestamp: i64,
    flow: FlowLimits,
    batch: u32,
    suspend: Option<Duration>,
    exception_delay: Duration,
    rebalance_interval: Duration,
    persist_interval: Duration,
    version: i32,
    sub_version: i64,
    max_reconsume_times: i32,
    retry: bool,
    /// [`PullConfig::ack_on_delivery`].
    ack_on_delivery: bool,
    model: MessageModel,
    /// [`PullConsumer::assign_queues`] was called: no rebalancing.
    manual: bool,
    /// The session compiles timestamp positions in (set by `subscribe`).
    timestamps: bool,
    orderly: bool,
    /// Orderly: the next lock renewal.
    lock_at: Instant,
    /// Orderly: queues to unlock (dropped, their offsets committed).
    unlocks: Vec<QueueKey, OWNED>,
    /// Orderly: `stop` has queued the unlocks of every owned queue.
    unlocked_all: bool,
    rng: u32,
    subs: Vec<Sub, SUBS>,
    /// Nacked messages waiting for (or in) their CONSUMER_SEND_MSG_BACK: each holds its topic
    /// and msgId (~330 bytes), so a gateway that never nacks keeps few.
    backs: St::Vec<Back, BACKS>,
    events: heapless::Deque<PullEvent, CALLS>,
    owned: St::Vec<Owned<TRACK>, OWNED>,
    /// Offsets of revoked queues still to commit.
    revoked: Vec<(QueueKey, i64), OWNED>,
    calls: Calls<CALLS>,
    next_lease: u32,
    rebalance_at: Instant,
    persist_at: Instant,
    /// Where the next `poll_call` scan of the owned table starts.
    cursor: usize,
    /// The request tables were full at the last `poll_call`: due pulls wait for an answer.
    blocked: bool,
    /// The last refusal not yet taken ([`take_refusal`](Self::take_refusal)).
    refused: Option<Refusal>,
    /// An ack let a flow-controlled queue pull now ([`take_wake`](Self::take_wake)).
    wake: bool,
    /// No queue is pulled ([`set_suspended`](Self::set_suspended)).
    suspended: bool,
    stopping: bool,
    /// Milestones a command asked to hear of: a round applied, commits drained, locks.
    watch_round: bool,
    watch_commits: bool,
    lock_news: bool,
    /// [`PullConfig::lazy_start`].
    lazy_start: bool,
    /// The first SQL92 check that fails the start ([`filters`]): its topic and code.
    filter_failure: Option<(TopicId, i32)>,
    /// An SQL92 check whose call failed (its subscription), until the start looks.
    filter_lost: Option<u8>,
    stats: PullStats,
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
> PullConsumer<SUBS, OWNED, TRACK, CALLS, CIDS, QUEUES, BACKS, St>
{
    /// A consumer with no subscription yet; its first rebalance is due at once.
    ///
    /// # Errors
    /// [`PullConfigError::Name`].
    pub fn new(cfg: &PullConfig<'_>, now: Instant) -> Result<Self, PullConfigError> {
        cfg.check()?;
        Ok(Self::assemble(cfg, now))
    }

    /// [`PullConsumer::new`] without the checks, for a configuration that passed
    /// [`PullConfig::check`]: infallible and returning the consumer itself, so that the
    /// caller's place (a local, or a struct being built in its caller's return slot) receives
    /// it with no copy through a `Result` on the stack.
    /// Of a configuration that did not pass, a name that is too long is left empty.
    // Not inlined: its result is written straight into the caller's place (an inlined one
    // was assembled on the stack and copied).
    #[inline(never)]
    pub fn build(cfg: &PullConfig<'_>, now: Instant) -> Self {
        Self::assemble(cfg, now)
    }

    /// [`Self::build`]'s body, inlined into [`Self::new`] (through a call there, the consumer
    /// would be copied out of its result once more, as the session was: +2.8 KiB of stack in
    /// the QEMU image).
    #[inline(always)]
    fn assemble(cfg: &PullConfig<'_>, now: Instant) -> Self {
        let name = |s: &str| {
            let mut o = String::new();
            let _ = o.push_str(s);
            o
        };
        PullConsumer {
            group: name(cfg.group),
            client_id: name(cfg.client_id),
            strategy: cfg.strategy,
            consume_from: cfg.consume_from,
            consume_timestamp: cfg.consume_timestamp,
            flow: cfg.flow,
            batch: cfg.pull_batch_size.max(1),
            suspend: cfg.suspend,
            exception_delay: cfg.pull_exception_delay,
            rebalance_interval: cfg.rebalance_interval,
            persist_interval: cfg.persist_interval,
            version: cfg.version,
            sub_version: cfg.sub_version,
            max_reconsume_times: cfg.max_reconsume_times,
            retry: cfg.retry && cfg.model == MessageModel::Clustering,
            ack_on_delivery: cfg.ack_on_delivery,
            model: cfg.model,
            manual: false,
            timestamps: true,
            orderly: cfg.orderly,
            lock_at: now.saturating_add(LOCK_INTERVAL),
            unlocks: Vec::new(),
            unlocked_all: false,
            rng: cfg.seed.max(1),
            subs: Vec::new(),
            backs: Table::new(),
            events: heapless::Deque::new(),
            owned: Table::new(),
            revoked: Vec::new(),
            calls: Calls(Vec::new()),
            next_lease: 1,
            rebalance_at: now,
            persist_at: now.saturating_add(cfg.persist_interval),
            cursor: 0,
            blocked: false,
            refused: None,
            wake: false,
            suspended: false,
            stopping: false,
            watch_round: false,
            watch_commits: false,
            lock_news: false,
            lazy_start: cfg.lazy_start,
            filter_failure: None,
            filter_lost: None,
            stats: PullStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> PullStats {
        self.stats
    }

    /// The subscribed topics.
    pub fn topics(&self) -> impl Iterator<Item = TopicId> + '_ {
        self.subs.iter().map(|s| s.topic)
    }

    /// The owned queues.
    pub fn owned(&self) -> impl Iterator<Item = OwnedQueue<'_, TRACK>> + '_ {
        self.owned.iter().map(|o| OwnedQueue {
            queue: o.key,
            lease: o.lease,
            tracker: &o.tracker,
            max_offset: o.max_offset,
        })
    }

    /// Whether `queue` is still owned under `lease` (its messages may be handed out).
    pub fn is_current(&self, queue: QueueKey, lease: u32) -> bool {
        self.owned
            .iter()
            .any(|o| o.key == queue && o.lease == lease)
    }

    /// Owned queues still looking up their start offset.
    pub fn starting(&self) -> usize {
        self.owned
            .iter()
            .filter(|o| {
                matches!(
                    o.state,
                    QState::New
                        | QState::Loading
                        | QState::Querying
                        | QState::Locate(_)
                        | QState::Locating(_)
                )
            })
            .count()
    }

    /// Whether a rebalance round is still waiting for consumer lists.
    pub fn rebalancing(&self) -> bool {
        self.subs.iter().any(|s| s.list || s.listing)
    }

    /// Commits not yet answered: wanted, revoked, or in flight.
    pub fn commits_pending(&self) -> usize {
        let wanted = self
            .owned
            .iter()
            .filter(|o| (o.commit && o.tracker.commit_due().is_some()) || o.committing)
            .count();
        let unlocks_to_queue = usize::from(self.stopping && self.orderly && !self.unlocked_all);
        wanted
            + self.revoked.len()
            + self.unlocks.len()
            + unlocks_to_queue
            + self
                .calls
                .values()
                .filter(|c| matches!(c, CallRef::Commit(_, None, _) | CallRef::Unlock))
                .count()
    }

    /// Stops pulling and rebalancing, and commits every owned queue's offset: keep calling
    /// [`poll_call`](Self::poll_call) until [`commits_pending`](Self::commits_pending) is 0.
    pub fn stop(&mut self) {
        self.stopping = true;
        self.commit_now();
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// The next milestone a command asked for, when it is reached.
    fn milestone(&mut self) -> Option<PullEvent> {
        if core::mem::take(&mut self.lock_news) {
            let mut news = self.owned.iter_mut().filter(|o| o.lock_news);
            if let Some(o) = news.next() {
                o.lock_news = false;
                self.lock_news = news.next().is_some();
                return Some(PullEvent::Locked {
                    queue: o.key,
                    lease: o.lease,
                });
            }
        }
        if self.watch_round && !self.rebalancing() && self.starting() == 0 {
            self.watch_round = false;
            return Some(PullEvent::Rebalanced);
        }
        if self.watch_commits && self.commits_pending() == 0 {
            self.watch_commits = false;
            return Some(PullEvent::Committed);
        }
        None
    }

    /// The next outcome of a [`nack`](Self::nack); drain after every
    /// [`handle_response`](Self::handle_response) and
    /// [`handle_call_failed`](Self::handle_call_failed).
    pub fn poll_event(&mut self) -> Option<PullEvent> {
        self.events.pop_front().or_else(|| self.milestone())
    }

    /// [`poll_event`](Self::poll_event) without the milestones (a runtime that reads the
    /// state it waits for: the milestones' checks compile out).
    pub fn poll_outcome(&mut self) -> Option<PullEvent> {
        self.events.pop_front()
    }

    /// Whether an [`ack`](Self::ack) since the last call made a pull due now (a queue that
    /// waited for flow control is under its limits again): the runtime wakes its driver then.
    pub fn take_wake(&mut self) -> bool {
        core::mem::take(&mut self.wake)
    }

    /// Runs the rebalance and commit schedules.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.stopping {
            return;
        }
        if now >= self.rebalance_at && !self.manual {
            self.start_round(now);
        }
        if now >= self.persist_at {
            self.persist_at = now.saturating_add(self.persist_interval);
            self.mark_commits();
            // Lag of queues without a pull for a whole period comes from GET_MAX_OFFSET (a long
            // poll in flight answers within its suspend time by itself).
            let stale = |at: Option<Instant>| {
                at.is_none_or(|at| now.saturating_duration_since(at) >= self.persist_interval)
            };
            for o in self.owned.iter_mut() {
                if matches!(o.state, QState::Ready(_)) && stale(o.max_at) && stale(o.last_pull) {
                    o.measure = true;
                }
            }
        }
        if self.orderly && now >= self.lock_at {
            self.lock_at = now.saturating_add(LOCK_INTERVAL);
            for o in self.owned.iter_mut() {
                if o.state != QState::Lock && o.lock == LockStep::Idle {
                    o.lock = LockStep::Wanted;
                }
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) or [`poll_call`](Self::poll_call) has
    /// work next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.stopping {
            return None;
        }
        let pulls = self.owned.iter().filter_map(|o| match o.state {
            QState::Ready(at) if !self.blocked && !o.paused && !self.suspended => Some(at),
            _ => None,
        });
        let lock = self.orderly.then_some(self.lock_at);
        pulls
            .chain([self.rebalance_at, self.persist_at])
            .chain(lock)
            .min()
    }

    /// The next request to write, encoded into `buf` through [`Session::call`](crate::session::Session::call) (write it to
    /// the transmit's peer at once); `None` when nothing is due, or the session's request
    /// table is full (try again after a response).
    pub fn poll_call<S: SessionApi, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        buf: &mut [u8],
        lend: &M,
    ) -> Option<Transmit> {
        if self.calls.len() >= CALLS {
            self.blocked = true;
            return None;
        }
        for sub in &mut self.subs {
            let due = sub
                .refreshed_at
                .is_none_or(|at| now.saturating_duration_since(at) >= ROUTE_REFRESH_ON_FAILURE);
            if sub.stale && due {
                sub.stale = false;
                sub.refreshed_at = Some(now);
                session.refresh_route(now, sub.topic);
            }
        }
        // The start's SQL92 checks first: the start waits for them.
        if S::Features::CALLS {
            match self.filter_call(now, session, buf, lend) {
                Some(Ok(tx)) => return Some(tx),
                Some(Err(_)) => {
                    self.blocked = true;
                    return None;
                }
                None => {}
            }
        }
        // Commits of revoked queues first, then of owned ones; one at a time per broker: a 4.9
        // broker handles offset updates on a thread pool and creates a group's offset table
        // without a lock, so concurrent first commits of one topic lose all queues but one
        // (seen on 4.9.7).
        while let Some(&(key, offset)) = self.revoked.last() {
            if self.committing_to(key.broker) {
                break;
            }
            let r = self.commit_call(now, session, key, None, offset, buf, lend);
            if r == Err(CallError::TooManyRequests) {
                self.blocked = true;
                return None;
            }
            let _ = self.revoked.pop();
            if let Ok(tx) = r {
                return Some(tx);
            }
        }
        for i in 0..self.owned.len() {
            let o = &self.owned[i];
            if !o.commit
                || o.committing
                || !matches!(o.state, QState::Ready(_) | QState::Pulling)
                || self.committing_to(o.key.broker)
            {
                continue;
            }
            let (key, lease) = (o.key, o.lease);
            let Some(offset) = o.tracker.commit_due() else {
                self.owned[i].commit = false;
                continue;
            };
            if self.broadcasting::<S>() {
                // The runtime stores it.
                if self.room() {
                    let o = &mut self.owned[i];
                    o.commit = false;
                    o.tracker.mark_committed(offset);
                    let _ = self
                        .events
                        .push_back(PullEvent::Persist { queue: key, offset });
                    self.stats.commits = self.stats.commits.wrapping_add(1);
                }
                continue;
            }
            let r = self.commit_call(now, session, key, Some(lease), offset, buf, lend);
            if r == Err(CallError::TooManyRequests) {
                self.blocked = true;
                return None;
            }
            self.owned[i].commit = false;
            if let Ok(tx) = r {
                self.owned[i].committing = true;
                return Some(tx);
            }
        }
        // Send-backs next: the application waits for their answers.
        let mut i = 0;
        while i < self.backs.len() {
            if self.backs[i].sent {
                i += 1;
                continue;
            }
            if !S::Features::SEND_BACK {
                // Left out: the send-back fails at once (the runtime's fallback follows).
                let b = &self.backs[i];
                self.back_done(now, b.key, b.lease, b.offset, false);
                continue;
            }
            match self.back_call(now, session, i, buf, lend) {
                Ok(tx) => {
                    self.backs[i].sent = true;
                    return Some(tx);
                }
                Err(CallError::TooManyRequests) => {
                    self.blocked = true;
                    return None;
                }
                Err(_) => {
                    // Cannot be encoded (or its broker is gone): the fallback's turn.
                    let b = &self.backs[i];
                    self.back_done(now, b.key, b.lease, b.offset, false);
                }
            }
        }
        if self.orderly::<S>() && self.stopping && !self.unlocked_all {
            // Every commit answered: release every lock, so the next owner need not wait.
            let committing =
                self.owned.iter().any(|o| {
                    (o.commit && o.tracker.commit_due().is_some()) || o.committing || o.busy
                }) || !self.revoked.is_empty();
            if !committing {
                self.unlocked_all = true;
                for o in self.owned.iter() {
                    if o.locked_at.is_some() {
                        let _ = self.unlocks.push(o.key);
                    }
                }
            }
        }
        if self.orderly::<S>() {
            match self.lock_calls(now, session, buf, lend) {
                Some(Ok(tx)) => return Some(tx),
                Some(Err(CallError::TooManyRequests)) => {
                    self.blocked = true;
                    return None;
                }
                Some(Err(_)) | None => {}
            }
        }
        if self.stopping {
            return None;
        }
        for i in 0..self.subs.len() {
            let sub = &mut self.subs[i];
            if sub.unrouted && !session.subscribe_queues(sub.topic).is_empty() {
                sub.unrouted = false;
                sub.list = true;
            }
            // One consumer list in flight per topic; a round asked meanwhile follows it.
            if !self.subs[i].list || self.subs[i].listing {
                continue;
            }
            self.subs[i].list = false;
            if self.broadcasting::<S>() || !S::Features::REBALANCE {
                // Every queue, no consumer list (broadcasting, or fixed queues).
                let t = self.subs[i].topic;
                let mut all: Vec<QueueKey, QUEUES> = Vec::new();
                for q in session.subscribe_queues(t) {
                    let (broker, queue_id) = (q.broker, q.queue_id);
                    let _ = all.push(QueueKey {
                        topic: t,
                        broker,
                        queue_id,
                    });
                }
                if all.is_empty() {
                    self.subs[i].unrouted = true;
                    session.refresh_route(now, t);
                } else {
                    self.apply(t, &all);
                }
                continue;
            }
            if let Some(tx) = self.list_call(now, session, i, buf, lend) {
                self.subs[i].listing = true;
                return Some(tx);
            }
        }
        let n = self.owned.len();
        for step in 0..n {
            let i = (self.cursor + step) % n;
            if let Some(tx) = self.queue_call(now, session, i, buf, lend) {
                self.cursor = (i + 1) % n;
                return Some(tx);
            }
        }
        if S::Features::LAG_PROBES {
            self.measure_call(now, session, buf, lend)
        } else {
            None
        }
    }

    fn entry(&self, key: QueueKey, lease: u32, state: QState) -> Option<usize> {
        self.owned
            .iter()
            .position(|o| o.key == key && o.lease == lease && o.state == state)
    }

    /// Orderly consumption, when the session `S` compiles it in (a constant `false`
    /// otherwise, so that the locking paths are left out of the image).
    fn orderly<S: SessionApi>(&self) -> bool {
        S::Features::ORDERLY && self.orderly
    }

    /// Broadcasting, when the session `S` compiles it in (as [`Self::orderly`]).
    fn broadcasting<S: SessionApi>(&self) -> bool {
        S::Features::BROADCASTING && self.model == MessageModel::Broadcasting
    }

    fn lease(&mut self) -> u32 {
        let l = self.next_lease;
        self.next_lease = self.next_lease.wrapping_add(1).max(1);
        l
    }

    fn next_random(&mut self) -> u32 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        x
    }

    #[allow(clippy::too_many_arguments)]
    fn call<E: ExtFields, S: SessionApi, M: Outbound + ?Sized>(
        calls: &mut Calls<CALLS>,
        now: Instant,
        session: &mut S,
        peer: Peer,
        code: RequestCode,
        ext: E,
        timeout: Duration,
        what: CallRef,
        buf: &mut [u8],
        lend: &M,
    ) -> Result<Transmit, CallError> {
        let tx = session.call(now, peer, code, Some(ext), &[], timeout, buf, lend)?;
        // `calls` has room: checked at the top of `poll_call`.
        let _ = calls.insert(tx.opaque, what);
        Ok(tx)
    }
}

#[cfg(test)]
mod tests;
