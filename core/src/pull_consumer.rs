//! A clustering pull consumer, sans-IO, on top of the client [`Session`](crate::session::Session): the decisions that
//! make RocketMQ's push consumer (Java `RebalanceImpl`, `DefaultMQPushConsumerImpl.pullMessage`,
//! `RemoteBrokerOffsetStore`), for every runtime.
//!
//! One [`PullConsumer`] per consumer group member. It owns:
//!
//! - **rebalance rounds** every `rebalance_interval` and on [`PullConsumer::rebalance_now`]
//!   (e.g. NOTIFY_CONSUMER_IDS_CHANGED, see [`PullConsumer::handle_broker_request`]):
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
//!   handle_call_failed(now, opaque)         for every Event::CallFailed likewise
//!   ack(queue, lease, offset)               when the application processed a message
//!   stop(now)                               then poll_call until commits_pending() == 0
//! ```
//!
//! Capacities are const generics: `SUBS` subscriptions, `OWNED` queues owned at once, `TRACK`
//! messages in flight per queue (flow control never pulls more than the free slots), `CALLS`
//! requests in flight, `CIDS` consumers per group, `QUEUES` queues per topic
//! route (the session's). It talks to the session through [`Client`], which every
//! [`Session`](crate::session::Session) implements.

use core::fmt;

use heapless::{String, Vec};

use crate::admin::{
    Answer, ConsumeStatus, ProcessQueueInfo, answer_not_served, parse_reset_offsets, prop,
    write_response, write_response_head, write_running_info,
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
use crate::session::{BrokerId, CallError, Client, Features, Outbound, Peer, TopicId, Transmit};
use crate::time::{Duration, Instant};
use crate::wire::headers::{
    ConsumerSendMsgBackRequestHeader, GetConsumerListByGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader, GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader, HeartbeatRequestHeader, QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader, SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
};
use crate::wire::{CommandHeader, ExtFields, Frame, RequestCode, ResponseCode, Scratch, version};

/// Longest consumer group or client id kept.
pub const MAX_NAME: usize = 255;
/// Shortest time between two route refreshes a topic's failing pulls ask for.
pub const ROUTE_REFRESH_ON_FAILURE: Duration = Duration::from_secs(1);
/// Longest subscription expression kept.
pub const MAX_EXPRESSION: usize = 255;

/// How a [`PullConsumer`] behaves. [`PullConfig::new`] has Java's defaults.
#[derive(Clone, Copy, Debug)]
pub struct PullConfig<'a> {
    /// Consumer group.
    pub group: &'a str,
    /// This client's id (`ip@instance`), as its heartbeats announce it.
    pub client_id: &'a str,
    /// Queue allocation strategy.
    pub strategy: AllocateStrategy,
    /// Where a queue without a committed offset starts.
    pub consume_from: ConsumeFromWhere,
    /// The store timestamp (ms) [`ConsumeFromWhere::Timestamp`] starts from (Java's default:
    /// half an hour before the consumer started).
    pub consume_timestamp: i64,
    /// Flow-control thresholds per queue.
    pub flow: FlowLimits,
    /// `pullBatchSize`.
    pub pull_batch_size: u32,
    /// How long the broker may hold a pull (`None`: no long polling).
    pub suspend: Option<Duration>,
    /// Back-off after a failed pull (Java 5.x: 1 s; 4.9: 3 s).
    pub pull_exception_delay: Duration,
    /// Time between rebalance rounds.
    pub rebalance_interval: Duration,
    /// Time between offset commits.
    pub persist_interval: Duration,
    /// Protocol version announced (GET_MAX_OFFSET's `committed` flag from 5.0).
    pub version: i32,
    /// `subVersion` of the subscriptions (a millisecond timestamp).
    pub sub_version: i64,
    /// Seed of the random broker choice for GET_CONSUMER_LIST_BY_GROUP.
    pub seed: u32,
    /// Deliveries of a message before the broker moves it to `%DLQ%<group>` (sent with every
    /// send-back; default 16).
    pub max_reconsume_times: i32,
    /// Subscribe `%RETRY%<group>` with the first subscription, where messages sent back
    /// return (a clustering Java consumer does; default `true`; never when broadcasting).
    pub retry: bool,
    /// Clustering (the group shares the queues, offsets on the broker) or broadcasting (every
    /// consumer reads every queue, offsets kept by the runtime: [`PullEvent::LoadOffset`] and
    /// [`PullEvent::Persist`]).
    pub model: MessageModel,
    /// Orderly consumption: queues locked on their broker before they are pulled, and
    /// processed between [`PullConsumer::begin`] and [`PullConsumer::end`] (see
    /// [`crate::lock`]).
    pub orderly: bool,
}

impl<'a> PullConfig<'a> {
    /// Java's defaults for `group` and `client_id`.
    pub fn new(group: &'a str, client_id: &'a str) -> Self {
        PullConfig {
            group,
            client_id,
            strategy: AllocateStrategy::Averagely,
            consume_from: ConsumeFromWhere::LastOffset,
            consume_timestamp: 0,
            flow: FlowLimits::default(),
            pull_batch_size: PULL_BATCH_SIZE,
            suspend: Some(BROKER_SUSPEND_MAX_TIME),
            pull_exception_delay: PULL_EXCEPTION_DELAY_V5,
            rebalance_interval: REBALANCE_INTERVAL,
            persist_interval: PERSIST_OFFSET_INTERVAL,
            version: version::V5_3_3,
            sub_version: 0,
            seed: 1,
            max_reconsume_times: MAX_RECONSUME_TIMES,
            retry: true,
            model: MessageModel::Clustering,
            orderly: false,
        }
    }
}

impl PullConfig<'_> {
    /// [`PullConsumer::new`]'s checks, without building a consumer (see
    /// [`PullConsumer::build`]).
    ///
    /// # Errors
    /// [`PullConfigError::Name`].
    pub fn check(&self) -> Result<(), PullConfigError> {
        let fits = |s: &str| !s.is_empty() && s.len() <= MAX_NAME;
        match fits(self.group) && fits(self.client_id) {
            true => Ok(()),
            false => Err(PullConfigError::Name),
        }
    }
}

/// Why a [`PullConsumer`] could not be built or a subscription added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PullConfigError {
    /// The group or client id is empty or longer than [`MAX_NAME`].
    Name,
    /// The expression is longer than [`MAX_EXPRESSION`].
    Expression,
    /// Every subscription slot is in use.
    TooManySubscriptions,
    /// The topic is subscribed already.
    Duplicate,
    /// The session refused the topic (full, or name too long).
    Topic,
    /// Orderly consumption, broadcasting or a timestamp start was asked for, and the
    /// session's [`Features`] leave it out.
    Unsupported,
}

impl fmt::Display for PullConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PullConfigError::Name => "consumer group or client id empty or too long",
            PullConfigError::Expression => "subscription expression too long",
            PullConfigError::TooManySubscriptions => "too many subscriptions",
            PullConfigError::Duplicate => "topic subscribed twice",
            PullConfigError::Topic => "the session refused the topic",
            PullConfigError::Unsupported => {
                "orderly or broadcasting consumption or timestamp starts are not compiled in"
            }
        })
    }
}

impl core::error::Error for PullConfigError {}

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
    backs: Vec<Back, BACKS>,
    events: heapless::Deque<PullEvent, CALLS>,
    owned: Vec<Owned<TRACK>, OWNED>,
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
    /// An ack let a flow-controlled queue pull now ([`take_wake`](Self::take_wake)).
    wake: bool,
    stopping: bool,
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
> PullConsumer<SUBS, OWNED, TRACK, CALLS, CIDS, QUEUES, BACKS>
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
            model: cfg.model,
            manual: false,
            timestamps: true,
            orderly: cfg.orderly,
            lock_at: now.saturating_add(LOCK_INTERVAL),
            unlocks: Vec::new(),
            unlocked_all: false,
            rng: cfg.seed.max(1),
            subs: Vec::new(),
            backs: Vec::new(),
            events: heapless::Deque::new(),
            owned: Vec::new(),
            revoked: Vec::new(),
            calls: Calls(Vec::new()),
            next_lease: 1,
            rebalance_at: now,
            persist_at: now.saturating_add(cfg.persist_interval),
            cursor: 0,
            blocked: false,
            wake: false,
            stopping: false,
            stats: PullStats::default(),
        }
    }

    /// Subscribes `topic` with the TAG `expression` (`*` for all); registers the topic with
    /// the session, which looks its route up.
    ///
    /// # Errors
    /// [`PullConfigError`].
    pub fn subscribe<S: Client>(
        &mut self,
        now: Instant,
        session: &mut S,
        topic: &str,
        expression: &str,
    ) -> Result<TopicId, PullConfigError> {
        let broadcasting = self.model == MessageModel::Broadcasting;
        let timestamp = self.consume_from == ConsumeFromWhere::Timestamp;
        if self.orderly != self.orderly::<S>()
            || broadcasting != self.broadcasting::<S>()
            || (timestamp && !S::Features::TIMESTAMPS)
        {
            return Err(PullConfigError::Unsupported);
        }
        self.timestamps = S::Features::TIMESTAMPS;
        let mut e = String::new();
        e.push_str(expression)
            .map_err(|_| PullConfigError::Expression)?;
        let t = session
            .topic(now, topic)
            .map_err(|_| PullConfigError::Topic)?;
        if self.subs.iter().any(|s| s.topic == t) {
            return Err(PullConfigError::Duplicate);
        }
        self.add_sub(t, e)?;
        if self.retry && !topic.starts_with(RETRY_TOPIC_PREFIX) {
            // Where this group's messages sent back return (Java `copySubscription`).
            let name: String<{ MAX_NAME + 8 }> =
                retry_topic(&self.group).ok_or(PullConfigError::Name)?;
            let r = session
                .topic(now, &name)
                .map_err(|_| PullConfigError::Topic)?;
            if !self.subs.iter().any(|s| s.topic == r) {
                let mut all = String::new();
                let _ = all.push_str(SUB_ALL);
                self.add_sub(r, all)?;
            }
        }
        Ok(t)
    }

    fn add_sub(
        &mut self,
        topic: TopicId,
        expression: String<MAX_EXPRESSION>,
    ) -> Result<(), PullConfigError> {
        let sub = Sub {
            topic,
            expression,
            list: false,
            listing: false,
            unrouted: false,
            stale: false,
            refreshed_at: None,
            counts: SubCounts::default(),
            reported: (self.rebalance_at, SubCounts::default()),
        };
        self.subs
            .push(sub)
            .map_err(|_| PullConfigError::TooManySubscriptions)
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

    /// Starts a rebalance round now (NOTIFY_CONSUMER_IDS_CHANGED, or the application asks).
    pub fn rebalance_now(&mut self, now: Instant) {
        self.rebalance_at = now;
    }

    /// Owns exactly `queues` from now on, without rebalancing (Java lite pull `assign`):
    /// owned queues not listed are committed and dropped, listed ones start from their
    /// committed offset; rebalance rounds and NOTIFY_CONSUMER_IDS_CHANGED no longer change
    /// what is owned. Queues of topics not subscribed are ignored. Returns how many queues
    /// are owned.
    pub fn assign_queues(&mut self, queues: &[QueueKey]) -> usize {
        self.manual = true;
        for i in 0..self.subs.len() {
            let t = self.subs[i].topic;
            let mut wanted: Vec<QueueKey, QUEUES> = Vec::new();
            for q in queues.iter().filter(|q| q.topic == t) {
                let _ = wanted.push(*q);
            }
            self.apply(t, &wanted);
            self.subs[i].list = false;
        }
        self.owned.len()
    }

    /// The key of queue `queue_id` of `broker_name` in subscribed topic `topic`, if its route
    /// has it.
    pub fn queue_key<S: Client>(
        &self,
        session: &S,
        topic: &str,
        broker_name: &str,
        queue_id: i32,
    ) -> Option<QueueKey> {
        let t = self
            .topics()
            .find(|t| session.topic_name(*t) == Some(topic))?;
        let q = session.subscribe_queues(t).iter().find(|q| {
            q.queue_id == queue_id && session.broker_name(q.broker) == Some(broker_name)
        })?;
        Some(QueueKey {
            topic: t,
            broker: q.broker,
            queue_id,
        })
    }

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

    /// Room for an event other than a send-back outcome (those always have theirs).
    fn room(&self) -> bool {
        self.backs.len() + self.events.len() < CALLS
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

    fn set_paused(&mut self, queue: QueueKey, paused: bool) -> bool {
        self.owned
            .iter_mut()
            .find(|o| o.key == queue)
            .map(|o| o.paused = paused)
            .is_some()
    }

    /// Commits every owned queue whose offset moved, now.
    pub fn commit_now(&mut self) {
        for o in &mut self.owned {
            o.commit = true;
        }
    }

    /// A request a broker sent on one of our connections: `true` when it was for the consumer
    /// (NOTIFY_CONSUMER_IDS_CHANGED starts a rebalance at once).
    pub fn handle_broker_request(&mut self, now: Instant, code: i32) -> bool {
        if code != RequestCode::NOTIFY_CONSUMER_IDS_CHANGED.0 {
            return false;
        }
        self.stats.notifications = self.stats.notifications.wrapping_add(1);
        if !self.manual {
            self.rebalance_now(now);
        }
        true
    }

    /// Stops pulling and rebalancing, and commits every owned queue's offset: keep calling
    /// [`poll_call`](Self::poll_call) until [`commits_pending`](Self::commits_pending) is 0.
    pub fn stop(&mut self) {
        self.stopping = true;
        self.commit_now();
    }

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

    /// Sends a message the application could not process back to its broker
    /// (CONSUMER_SEND_MSG_BACK, see [`crate::send_back`]); the answer is a [`PullEvent`].
    /// The message stays in flight (its offset is not committable) until then.
    ///
    /// # Errors
    /// [`NackError`]; nothing changed.
    pub fn nack(&mut self, queue: QueueKey, lease: u32, nack: &Nack<'_>) -> Result<(), NackError> {
        if self.model == MessageModel::Broadcasting {
            return Err(NackError::Broadcasting);
        }
        let in_flight = self
            .owned
            .iter()
            .any(|o| o.key == queue && o.lease == lease && o.tracker.contains(nack.offset));
        if !in_flight {
            return Err(NackError::NotInFlight);
        }
        if self
            .backs
            .iter()
            .any(|b| b.key == queue && b.lease == lease && b.offset == nack.offset)
        {
            return Err(NackError::Pending);
        }
        // Every send-back ends in one event: keep room for them all.
        if self.backs.len() + self.events.len() >= CALLS {
            return Err(NackError::Full);
        }
        let (mut msg_id, mut topic) = (String::new(), String::new());
        if msg_id.push_str(nack.msg_id).is_err() || topic.push_str(nack.topic).is_err() {
            return Err(NackError::TooLong);
        }
        self.count(queue, |c| c.failed = c.failed.wrapping_add(1));
        let back = Back {
            key: queue,
            lease,
            offset: nack.offset,
            commit_log_offset: nack.commit_log_offset,
            delay_level: nack.delay_level,
            msg_id,
            topic,
            sent: false,
        };
        self.backs.push(back).map_err(|_| NackError::Full)
    }

    /// The next outcome of a [`nack`](Self::nack); drain after every
    /// [`handle_response`](Self::handle_response) and
    /// [`handle_call_failed`](Self::handle_call_failed).
    pub fn poll_event(&mut self) -> Option<PullEvent> {
        self.events.pop_front()
    }

    /// Whether an [`ack`](Self::ack) since the last call made a pull due now (a queue that
    /// waited for flow control is under its limits again): the runtime wakes its driver then.
    pub fn take_wake(&mut self) -> bool {
        core::mem::take(&mut self.wake)
    }

    /// Send-backs not yet answered.
    pub fn sends_back_pending(&self) -> usize {
        self.backs.len()
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

    fn count(&mut self, queue: QueueKey, f: impl FnOnce(&mut SubCounts)) {
        if let Some(s) = self.subs.iter_mut().find(|s| s.topic == queue.topic) {
            f(&mut s.counts);
        }
    }

    /// Runs the rebalance and commit schedules.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.stopping {
            return;
        }
        if now >= self.rebalance_at && !self.manual {
            self.rebalance_at = now.saturating_add(self.rebalance_interval);
            self.stats.rebalances = self.stats.rebalances.wrapping_add(1);
            for s in &mut self.subs {
                s.list = true;
            }
        }
        if now >= self.persist_at {
            self.persist_at = now.saturating_add(self.persist_interval);
            self.commit_now();
            // Lag of queues without a pull for a whole period comes from GET_MAX_OFFSET (a long
            // poll in flight answers within its suspend time by itself).
            let stale = |at: Option<Instant>| {
                at.is_none_or(|at| now.saturating_duration_since(at) >= self.persist_interval)
            };
            for o in &mut self.owned {
                if matches!(o.state, QState::Ready(_)) && stale(o.max_at) && stale(o.last_pull) {
                    o.measure = true;
                }
            }
        }
        if self.orderly && now >= self.lock_at {
            self.lock_at = now.saturating_add(LOCK_INTERVAL);
            for o in &mut self.owned {
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
            QState::Ready(at) if !self.blocked && !o.paused => Some(at),
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
    pub fn poll_call<S: Client, M: Outbound + ?Sized>(
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
                for o in &self.owned {
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

    /// GET_MAX_OFFSET's header (5.x asks for the committed maximum, as Java).
    fn max_offset_header<'t>(
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

    /// GET_MAX_OFFSET of a queue whose lag is wanted (see `Owned::measure`).
    fn measure_call<S: Client, M: Outbound + ?Sized>(
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
        let hdr = self.max_offset_header(&topic, key.queue_id);
        let peer = session.read_peer(key.broker, false);
        let code = RequestCode::GET_MAX_OFFSET;
        let what = CallRef::MaxOffset(key);
        match Self::call(
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

    /// An answer to one of this consumer's calls (`false` when `opaque` is not one): applies
    /// it, handing each delivered message to `deliver`.
    pub fn handle_response<S: Client>(
        &mut self,
        now: Instant,
        session: &S,
        opaque: i32,
        frame: &[u8],
        deliver: &mut dyn FnMut(Delivery<'_, '_>),
    ) -> bool {
        let Some(call) = self.calls.swap_remove(&opaque) else {
            return false;
        };
        self.blocked = false;
        let f = Frame::new_unchecked(frame);
        let header = CommandHeader::parse(&f).ok();
        let code = header.as_ref().map_or(-1, CommandHeader::code);
        match call {
            CallRef::ConsumerList(i) if S::Features::REBALANCE => {
                let mut ids: Vec<&str, CIDS> = Vec::new();
                let ok = code == 0 && parse_consumer_list(f.body_ref(), &mut ids).is_ok();
                if let Some(s) = self.subs.get_mut(usize::from(i)) {
                    s.listing = false;
                    if ok {
                        let t = s.topic;
                        self.assign(session, t, &mut ids);
                    }
                }
            }
            CallRef::Query(key, lease) => {
                let Some(o) = self.entry(key, lease, QState::Querying) else {
                    return true;
                };
                let offset = header.as_ref().filter(|_| code == 0).and_then(|h| {
                    QueryConsumerOffsetResponseHeader::decode(h, &mut Scratch::default()).ok()
                });
                let retry = session
                    .topic_name(key.topic)
                    .is_some_and(|t| t.starts_with("%RETRY%"));
                let start = match (code, offset) {
                    (0, Some(h)) if h.offset >= 0 => Position::Offset(h.offset),
                    (0, Some(_)) => self.start_position(retry),
                    (c, _) if c == ResponseCode::QUERY_NOT_FOUND.0 => self.start_position(retry),
                    _ => {
                        // Retried at the next rebalance, as Java does.
                        self.drop_queue(key);
                        return true;
                    }
                };
                let o = &mut self.owned[o];
                match start {
                    Position::Offset(offset) => Self::start(o, offset, now),
                    other => o.state = QState::Locate(other),
                }
            }
            CallRef::MaxOffset(key) if S::Features::LAG_PROBES => {
                let offset = answered_offset(header.as_ref(), code);
                // By queue only: a seek meanwhile changed the lease, not the broker's offsets.
                if let Some(o) = self.owned.iter_mut().find(|o| o.key == key) {
                    o.measuring = false;
                    if let Some(offset) = offset {
                        o.max_offset = Some(offset);
                        o.max_at = Some(now);
                    }
                }
            }
            CallRef::Locate(key, lease) => {
                let Some(o) = self.owned.iter().position(|o| {
                    o.key == key && o.lease == lease && matches!(o.state, QState::Locating(_))
                }) else {
                    return true;
                };
                match answered_offset(header.as_ref(), code) {
                    Some(offset) => Self::start(&mut self.owned[o], offset, now),
                    None => self.drop_queue(key),
                }
            }
            CallRef::Pull(key, lease) => {
                let Some(o) = self.entry(key, lease, QState::Pulling) else {
                    return true;
                };
                let rt = self.owned[o]
                    .last_pull
                    .map_or(0, |at| now.saturating_duration_since(at).millis());
                if let Some(s) = self.subs.iter_mut().find(|s| s.topic == key.topic) {
                    s.counts.pulls = s.counts.pulls.wrapping_add(1);
                    s.counts.pull_rt_ms = s.counts.pull_rt_ms.wrapping_add(rt);
                }
                self.pulled(now, session, o, header.as_ref(), f.body_ref(), deliver);
            }
            CallRef::Commit(key, lease, offset) => {
                self.committed(key, lease, offset, code == 0);
            }
            CallRef::SendBack(key, lease, offset) => {
                if S::Features::SEND_BACK {
                    self.back_done(now, key, lease, offset, code == 0);
                }
            }
            CallRef::Lock(broker) if S::Features::ORDERLY => {
                if code == 0 {
                    let owned = &mut self.owned;
                    let _ = parse_locked(f.body_ref(), |q| {
                        let named = |o: &Owned<TRACK>| {
                            o.key.broker == broker
                                && o.key.queue_id == q.queue_id
                                && o.lock == LockStep::Sent
                                && session.topic_name(o.key.topic) == Some(q.topic)
                                && session.broker_name(broker) == Some(q.broker_name)
                        };
                        if let Some(o) = owned.iter_mut().find(|o| named(o)) {
                            o.lock = LockStep::Granted;
                        }
                    });
                }
                self.settle_locks(now, broker);
            }
            CallRef::ConsumerList(_)
            | CallRef::Lock(_)
            | CallRef::Unlock
            | CallRef::MaxOffset(_) => {}
        }
        true
    }

    /// One of this consumer's calls got no answer (`false` when `opaque` is not one).
    pub fn handle_call_failed(&mut self, now: Instant, opaque: i32) -> bool {
        let Some(call) = self.calls.swap_remove(&opaque) else {
            return false;
        };
        self.blocked = false;
        match call {
            CallRef::ConsumerList(i) => {
                if let Some(s) = self.subs.get_mut(usize::from(i)) {
                    s.listing = false;
                }
            }
            CallRef::Query(key, _) | CallRef::Locate(key, _) => self.drop_queue(key),
            CallRef::Pull(key, lease) => {
                self.stats.pull_failures = self.stats.pull_failures.wrapping_add(1);
                if let Some(s) = self.subs.iter_mut().find(|s| s.topic == key.topic) {
                    s.stale = true;
                }
                if let Some(o) = self.entry(key, lease, QState::Pulling) {
                    self.owned[o].state = QState::Ready(now.saturating_add(self.exception_delay));
                }
            }
            CallRef::Commit(key, lease, offset) => self.committed(key, lease, offset, false),
            CallRef::SendBack(key, lease, offset) => self.back_done(now, key, lease, offset, false),
            CallRef::Lock(broker) => self.settle_locks(now, broker),
            CallRef::Unlock => {}
            CallRef::MaxOffset(key) => {
                if let Some(o) = self.owned.iter_mut().find(|o| o.key == key) {
                    o.measuring = false;
                }
            }
        }
        true
    }

    /// The `ConsumerRunningInfo` body of GET_CONSUMER_RUNNING_INFO (see [`crate::admin`]):
    /// every owned queue's state, this consumer's settings plus the runtime's `extra`
    /// properties, each topic's pull and consume rates since the previous report (mean
    /// processing time `consume_rt`, hundredths of ms, from the runtime), and the
    /// subscriptions. `unix_now` is the wall clock at `now`. `None` when it does not fit.
    #[allow(clippy::too_many_arguments)]
    pub fn running_info<S: Client>(
        &mut self,
        now: Instant,
        unix_now: i64,
        session: &S,
        extra: &[(&str, &str)],
        consume_rt: u64,
        buf: &mut [u8],
    ) -> Option<usize> {
        let unix = |at: Option<Instant>| {
            at.map_or(0, |t| {
                let ago = now.saturating_duration_since(t).millis();
                unix_now.saturating_sub(i64::try_from(ago).unwrap_or(i64::MAX))
            })
        };
        let mut queues: Vec<(MessageQueue<'_>, ProcessQueueInfo), OWNED> = Vec::new();
        for o in &self.owned {
            let (Some(topic), Some(broker)) = (
                session.topic_name(o.key.topic),
                session.broker_name(o.key.broker),
            ) else {
                continue;
            };
            let (min, max) = o.tracker.in_flight_range().unwrap_or((0, 0));
            let mib = o.tracker.cached_bytes() / (1024 * 1024);
            let info = ProcessQueueInfo {
                // Java reports its in-memory offset: what is committable now.
                commit_offset: o.tracker.committable(),
                cached_msg_min_offset: min,
                cached_msg_max_offset: max,
                cached_msg_count: u32::try_from(o.tracker.cached_count()).unwrap_or(u32::MAX),
                cached_msg_size_mib: u32::try_from(mib).unwrap_or(u32::MAX),
                locked: Self::locked(o, now),
                last_lock_timestamp: unix(o.locked_at),
                last_pull_timestamp: unix(o.last_pull),
                last_consume_timestamp: unix(o.last_consume),
                lag: lag_of(o.max_offset, &o.tracker),
            };
            let _ = queues.push((MessageQueue::new(topic, broker, o.key.queue_id), info));
        }
        let mut status: Vec<(&str, ConsumeStatus), SUBS> = Vec::new();
        let mut subs: Vec<Subscription<'_>, SUBS> = Vec::new();
        for s in &mut self.subs {
            let Some(topic) = session.topic_name(s.topic) else {
                continue;
            };
            let (at, before) = s.reported;
            let ms = now.saturating_duration_since(at).millis().max(1);
            // Per second, in hundredths.
            let rate = |n: u64| n.saturating_mul(100_000) / ms;
            let c = s.counts;
            let pulls = c.pulls.wrapping_sub(before.pulls);
            let st = ConsumeStatus {
                pull_rt: c.pull_rt_ms.saturating_mul(100) / c.pulls.max(1),
                pull_tps: rate(pulls),
                consume_rt,
                consume_ok_tps: rate(c.acked.wrapping_sub(before.acked)),
                consume_failed_tps: rate(c.failed.wrapping_sub(before.failed)),
                consume_failed_msgs: c.failed.wrapping_sub(before.failed),
            };
            s.reported = (now, c);
            let _ = status.push((topic, st));
            let _ = subs.push(Subscription {
                topic,
                expression: TagExpression::new(&s.expression),
                sub_version: self.sub_version,
            });
        }
        let (mut batch, mut retries) = (String::<12>::new(), String::<12>::new());
        let mut lag = String::<24>::new();
        let total: u64 = queues.iter().filter_map(|q| q.1.lag).sum();
        let _ = core::fmt::write(&mut lag, format_args!("{total}"));
        let _ = core::fmt::write(&mut batch, format_args!("{}", self.batch));
        let _ = core::fmt::write(&mut retries, format_args!("{}", self.max_reconsume_times));
        let mut props: Vec<(&str, &str), 48> = Vec::new();
        let own = [
            ("consumerGroup", self.group.as_str()),
            ("messageModel", self.model.name()),
            ("consumeFromWhere", self.consume_from.name()),
            ("pullBatchSize", batch.as_str()),
            ("maxReconsumeTimes", retries.as_str()),
            // rmq: the owned queues' summed lag (each queue's is its `"lag"`).
            ("consumeLag", lag.as_str()),
            (prop::CONSUME_TYPE, ConsumeType::Passively.name()),
            (
                prop::CONSUME_ORDERLY,
                if self.orderly { "true" } else { "false" },
            ),
        ];
        for p in own.into_iter().chain(extra.iter().copied()) {
            let _ = props.push(p);
        }
        write_running_info(&mut queues, &props, &mut status, &mut subs, buf).ok()
    }

    /// A request a broker sent (`frame`, whose code and opaque the session reported): applies
    /// it and writes the answer into `buf`, if one is due (see [`crate::admin`]).
    /// NOTIFY_CONSUMER_IDS_CHANGED starts a rebalance; GET_CONSUMER_RUNNING_INFO is answered
    /// with [`running_info`](Self::running_info) (or SYSTEM_ERROR for another group);
    /// RESET_CONSUMER_CLIENT_OFFSET seeks the listed queues; CONSUME_MESSAGE_DIRECTLY is the
    /// runtime's ([`Answer::ConsumeDirectly`]); a code this consumer does not serve gets
    /// REQUEST_CODE_NOT_SUPPORTED unless it was oneway.
    #[allow(clippy::too_many_arguments)]
    pub fn answer_request<S: Client>(
        &mut self,
        now: Instant,
        unix_now: i64,
        session: &S,
        frame: &[u8],
        extra: &[(&str, &str)],
        consume_rt: u64,
        buf: &mut [u8],
    ) -> Answer {
        let Some(f) = Frame::new_checked(frame).ok() else {
            return Answer::Nothing;
        };
        let Some(h) = CommandHeader::parse(&f).ok() else {
            return Answer::Nothing;
        };
        let (code, opaque) = (h.code(), h.opaque());
        let written = |n: Option<usize>| n.map_or(Answer::Nothing, Answer::Write);
        if self.handle_broker_request(now, code) {
            return Answer::Nothing;
        }
        if code == RequestCode::CONSUME_MESSAGE_DIRECTLY.0 {
            return Answer::ConsumeDirectly { opaque };
        }
        if code == RequestCode::GET_CONSUMER_RUNNING_INFO.0 {
            let ours = GetConsumerRunningInfoRequestHeader::decode(&h, &mut Scratch::default())
                .is_ok_and(|r| r.consumer_group == self.group.as_str());
            if !ours {
                let mut remark: String<320> = String::new();
                let _ = core::fmt::write(
                    &mut remark,
                    format_args!(
                        "The Consumer Group <{}> not exist in this consumer",
                        self.group
                    ),
                );
                return written(
                    write_response(1, opaque, self.version, Some(&remark), &[], buf).ok(),
                );
            }
            // The body is written behind room for the header, then moved up to it.
            let start = buf.len().min(1024);
            let (head, tail) = buf.split_at_mut(start);
            let Some(n) = self.running_info(now, unix_now, session, extra, consume_rt, tail) else {
                return Answer::Nothing;
            };
            let Ok(h) = write_response_head(0, opaque, self.version, None, n, head) else {
                return Answer::Nothing;
            };
            buf.copy_within(start..start + n, h);
            return Answer::Write(h + n);
        }
        if code == RequestCode::RESET_CONSUMER_CLIENT_OFFSET.0 {
            // Oneway (`mqadmin resetOffsetByTime` through a 4.9 broker): each listed owned
            // queue restarts at its offset, which is committed (5.x brokers reset on their
            // side and answer the next pull with PULL_OFFSET_MOVED instead).
            let mut reset: Vec<(QueueKey, i64), OWNED> = Vec::new();
            parse_reset_offsets(f.body_ref(), |q, offset| {
                let key = self.queue_key(session, q.topic, q.broker_name, q.queue_id);
                if let Some(k) = key.filter(|k| self.owned.iter().any(|o| o.key == *k)) {
                    let _ = reset.push((k, offset));
                }
            });
            for (k, offset) in reset {
                self.seek(now, k, Position::Offset(offset));
            }
            return Answer::Nothing;
        }
        written(answer_not_served(frame, self.version, buf))
    }

    /// Writes the HEART_BEAT body announcing this consumer (its subscriptions) into `buf`.
    /// `None` when it does not fit.
    pub fn heartbeat_body<S: Client>(&self, session: &S, buf: &mut [u8]) -> Option<usize> {
        let mut subs: Vec<Subscription<'_>, SUBS> = Vec::new();
        for s in &self.subs {
            let topic = session.topic_name(s.topic)?;
            let sub = Subscription {
                topic,
                expression: TagExpression::new(&s.expression),
                sub_version: self.sub_version,
            };
            subs.push(sub).ok()?;
        }
        let data = [ConsumerData {
            group: &self.group,
            consume_type: ConsumeType::Passively,
            message_model: self.model,
            consume_from_where: self.consume_from,
            subscriptions: &subs,
        }];
        let flavor = if self.version >= version::V5_0_0 {
            HeartbeatFlavor::V5
        } else {
            HeartbeatFlavor::V4
        };
        write_heartbeat(&self.client_id, &data, &[], flavor, buf).ok()
    }

    // ----- internals -----------------------------------------------------------------------

    fn entry(&self, key: QueueKey, lease: u32, state: QState) -> Option<usize> {
        self.owned
            .iter()
            .position(|o| o.key == key && o.lease == lease && o.state == state)
    }

    /// Whether an UPDATE_CONSUMER_OFFSET to broker `b` is in flight.
    fn committing_to(&self, b: BrokerId) -> bool {
        self.calls
            .values()
            .any(|c| matches!(c, CallRef::Commit(k, ..) if k.broker == b))
    }

    fn drop_queue(&mut self, key: QueueKey) {
        if let Some(i) = self.owned.iter().position(|o| o.key == key) {
            let o = self.owned.swap_remove(i);
            if o.locked_at.is_some() {
                let _ = self.unlocks.push(key);
            }
        }
    }

    /// Orderly consumption, when the session `S` compiles it in (a constant `false`
    /// otherwise, so that the locking paths are left out of the image).
    fn orderly<S: Client>(&self) -> bool {
        S::Features::ORDERLY && self.orderly
    }

    /// Broadcasting, when the session `S` compiles it in (as [`Self::orderly`]).
    fn broadcasting<S: Client>(&self) -> bool {
        S::Features::BROADCASTING && self.model == MessageModel::Broadcasting
    }

    fn lease(&mut self) -> u32 {
        let l = self.next_lease;
        self.next_lease = self.next_lease.wrapping_add(1).max(1);
        l
    }

    /// `computePullFromWhere` without a committed offset.
    fn start_position(&self, retry_topic: bool) -> Position {
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
    fn start(o: &mut Owned<TRACK>, offset: i64, now: Instant) {
        o.tracker = QueueTracker::new(offset);
        if core::mem::take(&mut o.seek) {
            o.commit = true;
        } else {
            o.tracker.mark_committed(offset);
        }
        o.state = QState::Ready(now);
    }

    fn next_random(&mut self) -> u32 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        x
    }

    /// Applies an allocation round of topic `t` with the (unsorted) consumer ids `ids`.
    fn assign<S: Client>(&mut self, session: &S, t: TopicId, ids: &mut [&str]) {
        let Some(topic) = session.topic_name(t) else {
            return;
        };
        let mut all: Vec<(MessageQueue<'_>, BrokerId), QUEUES> = Vec::new();
        for q in session.subscribe_queues(t) {
            let Some(b) = session.broker_name(q.broker) else {
                continue;
            };
            let _ = all.push((MessageQueue::new(topic, b, q.queue_id), q.broker));
        }
        if all.is_empty() {
            return;
        }
        // Java sorts both lists before allocating (MessageQueue.compareTo, String.compareTo).
        crate::consumer::heapsort_by(&mut all, |a, b| a.0.cmp(&b.0));
        sort_consumer_ids(ids);
        let mut mine: Vec<(MessageQueue<'_>, BrokerId), QUEUES> = Vec::new();
        if allocate(self.strategy, &all, ids, &self.client_id, &mut mine).is_err() {
            return;
        }
        let mut wanted: Vec<QueueKey, QUEUES> = Vec::new();
        for (m, broker) in &mine {
            let _ = wanted.push(QueueKey {
                topic: t,
                broker: *broker,
                queue_id: m.queue_id,
            });
        }
        self.apply(t, &wanted);
    }

    /// Owns exactly `wanted` of topic `t`: revoked queues committed and forgotten, new ones
    /// added.
    fn apply(&mut self, t: TopicId, wanted: &[QueueKey]) {
        // Revoke: commit the offset, forget the queue (Java removeUnnecessaryMessageQueue).
        let mut i = 0;
        while i < self.owned.len() {
            let o = &mut self.owned[i];
            let keep = wanted.contains(&o.key);
            if keep {
                o.leaving = false;
            }
            if o.key.topic != t || keep {
                i += 1;
                continue;
            }
            if o.busy {
                // Orderly: the application is on it; dropped when it ends.
                o.leaving = true;
                i += 1;
                continue;
            }
            self.release(i);
        }
        for &key in wanted {
            if self.owned.iter().any(|o| o.key == key) {
                continue;
            }
            let lease = self.lease();
            let (state, lock) = match self.orderly {
                true => (QState::Lock, LockStep::Wanted),
                false => (QState::New, LockStep::Idle),
            };
            let o = Owned {
                key,
                lease,
                state,
                commit: false,
                committing: false,
                tracker: QueueTracker::new(0),
                max_offset: None,
                seek: false,
                paused: false,
                locked_at: None,
                lock,
                busy: false,
                leaving: false,
                last_pull: None,
                last_consume: None,
                flow_delayed: false,
                max_at: None,
                measure: false,
                measuring: false,
                slave: false,
            };
            if self.owned.push(o).is_err() {
                self.stats.owned_full = self.stats.owned_full.wrapping_add(1);
            }
        }
    }

    /// Forgets owned queue `i`: its offset committed (broadcasting: handed to the runtime),
    /// then (orderly) its lock released.
    fn release(&mut self, i: usize) {
        let o = self.owned.swap_remove(i);
        let started = matches!(o.state, QState::Ready(_) | QState::Pulling);
        match (started, o.tracker.commit_due()) {
            (true, Some(offset)) if self.model == MessageModel::Broadcasting => {
                let queue = o.key;
                let _ = self.events.push_back(PullEvent::Persist { queue, offset });
            }
            // The unlock follows the commit's answer.
            (true, Some(offset)) => {
                let _ = self.revoked.push((o.key, offset));
            }
            _ if o.locked_at.is_some() => {
                let _ = self.unlocks.push(o.key);
            }
            _ => {}
        }
    }

    /// Applies the answer (or the failure) of a lock request to `broker`: granted queues are
    /// locked from `now`; a new queue refused is dropped (a rebalance follows soon), an owned
    /// one refused loses its lock.
    fn settle_locks(&mut self, now: Instant, broker: BrokerId) {
        let mut i = 0;
        while i < self.owned.len() {
            let o = &mut self.owned[i];
            if o.key.broker != broker || !matches!(o.lock, LockStep::Sent | LockStep::Granted) {
                i += 1;
                continue;
            }
            let granted = o.lock == LockStep::Granted;
            o.lock = LockStep::Idle;
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

    fn locked(o: &Owned<TRACK>, now: Instant) -> bool {
        o.locked_at
            .is_some_and(|at| now.saturating_duration_since(at) < LOCK_MAX_LIVE)
    }

    /// LOCK_BATCH_MQ (or UNLOCK_BATCH_MQ) of `queues` on `broker`, as many as fit half of
    /// `buf` (the body is written in the other half); returns how many went.
    #[allow(clippy::too_many_arguments)]
    fn lock_call<S: Client, M: Outbound + ?Sized>(
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
    fn lock_calls<S: Client, M: Outbound + ?Sized>(
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
        for o in &self.owned {
            if o.key.broker == broker && o.lock == LockStep::Wanted {
                let _ = these.push(o.key);
            }
        }
        let code = RequestCode::LOCK_BATCH_MQ;
        let r = self.lock_call(now, session, code, broker, &these, buf, lend);
        match &r {
            Ok((_, n)) => {
                let sent = &these[..(*n).min(these.len())];
                for o in &mut self.owned {
                    if sent.contains(&o.key) {
                        o.lock = LockStep::Sent;
                    }
                }
            }
            Err(CallError::TooManyRequests) => {}
            Err(_) => {
                // Cannot be encoded: as if refused.
                for o in &mut self.owned {
                    if these.contains(&o.key) {
                        o.lock = LockStep::Sent;
                    }
                }
                self.settle_locks(now, broker);
            }
        }
        Some(r.map(|(tx, _)| tx))
    }

    /// Applies a pull answer to owned queue `i`.
    fn pulled<S: Client>(
        &mut self,
        now: Instant,
        session: &S,
        i: usize,
        header: Option<&CommandHeader<'_>>,
        body: &[u8],
        deliver: &mut dyn FnMut(Delivery<'_, '_>),
    ) {
        let result = match header.map(parse_pull_response) {
            Some(Ok(r)) => r,
            Some(Err(e)) => {
                self.stats.pull_failures = self.stats.pull_failures.wrapping_add(1);
                let at = now.saturating_add(e.retry_delay(self.exception_delay));
                self.owned[i].state = QState::Ready(at);
                return;
            }
            None => {
                self.stats.pull_failures = self.stats.pull_failures.wrapping_add(1);
                self.owned[i].state = QState::Ready(now.saturating_add(self.exception_delay));
                return;
            }
        };
        let key = self.owned[i].key;
        self.owned[i].max_offset = Some(result.max_offset);
        self.owned[i].max_at = Some(now);
        self.owned[i].slave = result.suggest_which_broker_id != MASTER_ID;
        match result.status {
            PullStatus::Found => {
                let sub = self.subs.iter().find(|s| s.topic == key.topic);
                let expr = TagExpression::new(sub.map_or("*", |s| s.expression.as_str()));
                let topic = session.topic_name(key.topic).unwrap_or("");
                let retry = topic.starts_with(RETRY_TOPIC_PREFIX);
                let broker_name = session.broker_name(key.broker).unwrap_or("");
                let o = &mut self.owned[i];
                let mut complete = true;
                let mut delivered = 0u64;
                for m in StoredMessages::new(body).crc_check(CrcCheck::Skip) {
                    let Ok(m) = m else {
                        self.stats.undecodable = self.stats.undecodable.wrapping_add(1);
                        break;
                    };
                    if !expr.matches_message(&m) {
                        continue;
                    }
                    let len = u32::try_from(m.body.len()).unwrap_or(u32::MAX);
                    match o.tracker.push(m.queue_offset, len) {
                        Ok(()) => {
                            delivered += 1;
                            let origin = if retry { origin_topic(&m) } else { topic };
                            deliver(Delivery {
                                queue: key,
                                lease: o.lease,
                                topic: origin,
                                queue_topic: topic,
                                broker_name,
                                message: &m,
                            });
                        }
                        Err(TrackError::NotAscending) => {}
                        Err(TrackError::Full) => {
                            // Cannot happen: a pull asks for at most the free slots.
                            complete = false;
                            break;
                        }
                    }
                }
                if complete {
                    o.tracker.advance(result.next_begin_offset);
                }
                o.state = QState::Ready(now);
                self.stats.delivered = self.stats.delivered.wrapping_add(delivered);
            }
            PullStatus::NoNewMsg | PullStatus::NoMatchedMsg => {
                let o = &mut self.owned[i];
                o.tracker.advance(result.next_begin_offset);
                o.state = QState::Ready(now);
            }
            PullStatus::OffsetIllegal => {
                // Everything in flight is void: a new lease, and the new offset committed.
                let lease = self.lease();
                let o = &mut self.owned[i];
                o.tracker.reset(result.next_begin_offset);
                o.lease = lease;
                o.commit = true;
                // A commit of the old lease may be in flight: its answer is ignored.
                o.committing = false;
                o.state = QState::Ready(now);
            }
        }
    }

    /// A send-back ended: the message counts as consumed when the broker took it.
    fn back_done(&mut self, now: Instant, queue: QueueKey, lease: u32, offset: i64, ok: bool) {
        let this = |b: &Back| b.key == queue && b.lease == lease && b.offset == offset;
        if let Some(i) = self.backs.iter().position(this) {
            let _ = self.backs.swap_remove(i);
        }
        let event = if ok {
            self.stats.sent_back = self.stats.sent_back.wrapping_add(1);
            let _ = self.ack(now, queue, lease, offset);
            PullEvent::SentBack {
                queue,
                lease,
                offset,
            }
        } else {
            self.stats.send_back_failures = self.stats.send_back_failures.wrapping_add(1);
            PullEvent::SendBackFailed {
                queue,
                lease,
                offset,
            }
        };
        // Room is kept by `nack`.
        let _ = self.events.push_back(event);
    }

    fn back_call<S: Client, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        i: usize,
        buf: &mut [u8],
        lend: &M,
    ) -> Result<Transmit, CallError> {
        let b = &self.backs[i];
        let (key, lease, offset) = (b.key, b.lease, b.offset);
        let (commit_log_offset, delay_level) = (b.commit_log_offset, b.delay_level);
        let (msg_id, topic, group) = (b.msg_id.clone(), b.topic.clone(), self.group.clone());
        let mut bname: String<MAX_NAME> = String::new();
        let named = session
            .broker_name(key.broker)
            .is_some_and(|n| bname.push_str(n).is_ok());
        let hdr = ConsumerSendMsgBackRequestHeader {
            offset: commit_log_offset,
            group: &group,
            delay_level,
            origin_msg_id: Some(&msg_id),
            origin_topic: Some(&topic),
            unit_mode: false,
            max_reconsume_times: Some(self.max_reconsume_times),
            bname: (named && self.version >= version::V5_0_0).then_some(bname.as_str()),
        };
        let what = CallRef::SendBack(key, lease, offset);
        let peer = Peer::Broker(key.broker);
        let code = RequestCode::CONSUMER_SEND_MSG_BACK;
        let t = SEND_BACK_TIMEOUT;
        Self::call(
            &mut self.calls,
            now,
            session,
            peer,
            code,
            hdr,
            t,
            what,
            buf,
            lend,
        )
    }

    fn committed(&mut self, key: QueueKey, lease: Option<u32>, offset: i64, ok: bool) {
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
    fn call<E: ExtFields, S: Client, M: Outbound + ?Sized>(
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

    #[allow(clippy::too_many_arguments)]
    fn commit_call<S: Client, M: Outbound + ?Sized>(
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
        let hdr = UpdateConsumerOffsetRequestHeader {
            consumer_group: &self.group,
            topic: &name,
            queue_id: key.queue_id,
            commit_offset: offset,
        };
        let what = CallRef::Commit(key, lease, offset);
        let peer = session.read_peer(key.broker, false);
        let code = RequestCode::UPDATE_CONSUMER_OFFSET;
        Self::call(
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

    fn list_call<S: Client, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        i: usize,
        buf: &mut [u8],
        lend: &M,
    ) -> Option<Transmit> {
        let t = self.subs.get(i)?.topic;
        let queues = session.subscribe_queues(t);
        if queues.is_empty() {
            // No route yet: look it up; a round runs again when it is there.
            self.subs[i].unrouted = true;
            session.refresh_route(now, t);
            return None;
        }
        // Java asks a random broker of the route; any broker of the group answers the same.
        let pick = self.next_random() as usize % queues.len();
        let broker = queues.get(pick)?.broker;
        let hdr = GetConsumerListByGroupRequestHeader {
            consumer_group: &self.group,
        };
        let what = CallRef::ConsumerList(u8::try_from(i).ok()?);
        let peer = session.read_peer(broker, false);
        let code = RequestCode::GET_CONSUMER_LIST_BY_GROUP;
        Self::call(
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
        )
        .ok()
    }

    /// The next request of owned queue `i`, if it needs one now.
    fn queue_call<S: Client, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        i: usize,
        buf: &mut [u8],
        lend: &M,
    ) -> Option<Transmit> {
        let o = self.owned.get(i)?;
        let (key, lease, state) = (o.key, o.lease, o.state);
        if matches!(state, QState::Ready(at) if at > now || o.paused)
            || !matches!(state, QState::New | QState::Locate(_) | QState::Ready(_))
        {
            return None;
        }
        let (mut topic, mut broker) = (String::<MAX_NAME>::new(), String::<MAX_NAME>::new());
        let sub = self.subs.iter().find(|s| s.topic == key.topic);
        let named = session
            .topic_name(key.topic)
            .is_some_and(|t| topic.push_str(t).is_ok())
            && session
                .broker_name(key.broker)
                .is_some_and(|b| broker.push_str(b).is_ok());
        let (true, Some(sub)) = (named, sub) else {
            // The session forgot the topic or the broker: retried at the next rebalance.
            self.drop_queue(key);
            return None;
        };
        let mut expression: String<MAX_EXPRESSION> = String::new();
        let _ = expression.push_str(&sub.expression);
        let peer = session.read_peer(key.broker, false);
        let (tx, next) = match state {
            QState::New if self.broadcasting::<S>() => {
                if self.room() {
                    self.owned[i].state = QState::Loading;
                    let _ = self
                        .events
                        .push_back(PullEvent::LoadOffset { queue: key, lease });
                }
                return None;
            }
            QState::New => {
                let hdr = QueryConsumerOffsetRequestHeader {
                    consumer_group: &self.group,
                    topic: &topic,
                    queue_id: key.queue_id,
                    set_zero_if_not_found: None,
                };
                let what = CallRef::Query(key, lease);
                let code = RequestCode::QUERY_CONSUMER_OFFSET;
                let r = Self::call(
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
                );
                (r, QState::Querying)
            }
            QState::Locate(position) => {
                let what = CallRef::Locate(key, lease);
                let topic = topic.as_str();
                let queue_id = key.queue_id;
                let t = CLIENT_API_TIMEOUT;
                let r = match position {
                    Position::Begin => {
                        let hdr = GetMinOffsetRequestHeader { topic, queue_id };
                        let code = RequestCode::GET_MIN_OFFSET;
                        Self::call(
                            &mut self.calls,
                            now,
                            session,
                            peer,
                            code,
                            hdr,
                            t,
                            what,
                            buf,
                            lend,
                        )
                    }
                    Position::Timestamp(timestamp) if S::Features::TIMESTAMPS => {
                        let hdr = SearchOffsetRequestHeader {
                            topic,
                            queue_id,
                            timestamp,
                        };
                        let code = RequestCode::SEARCH_OFFSET_BY_TIMESTAMP;
                        Self::call(
                            &mut self.calls,
                            now,
                            session,
                            peer,
                            code,
                            hdr,
                            t,
                            what,
                            buf,
                            lend,
                        )
                    }
                    // A timestamp only when the session leaves them out, which `subscribe`
                    // and `seek` refuse: never.
                    Position::End | Position::Offset(_) | Position::Timestamp(_) => {
                        let hdr = self.max_offset_header(topic, queue_id);
                        let code = RequestCode::GET_MAX_OFFSET;
                        Self::call(
                            &mut self.calls,
                            now,
                            session,
                            peer,
                            code,
                            hdr,
                            t,
                            what,
                            buf,
                            lend,
                        )
                    }
                };
                (r, QState::Locating(position))
            }
            QState::Ready(at) if at <= now => {
                let o = &self.owned[i];
                if self.orderly::<S>() && (!Self::locked(o, now) || o.leaving) {
                    // Orderly: only a locked queue is pulled.
                    self.owned[i].state = QState::Ready(now.saturating_add(UNLOCKED_PULL_DELAY));
                    return None;
                }
                let max = match o.tracker.flow(&self.flow, self.batch) {
                    FlowDecision::DelayPull(d) => {
                        self.stats.flow_control_delays =
                            self.stats.flow_control_delays.wrapping_add(1);
                        self.owned[i].state = QState::Ready(now.saturating_add(d));
                        self.owned[i].flow_delayed = true;
                        return None;
                    }
                    FlowDecision::Pull(n) => n,
                };
                self.owned[i].flow_delayed = false;
                let o = &self.owned[i];
                let peer = session.read_peer(key.broker, o.slave);
                // What Java sends (the offset store's memory value): everything below is
                // processed. Not the last confirmed commit: the broker handles pulls and offset
                // updates on different thread pools, so a pull carrying an older value can land
                // after a newer UPDATE_CONSUMER_OFFSET and move the stored offset back (seen on
                // 5.3.3: a restart then redelivered from the older offset). Java clears
                // COMMIT_OFFSET for a slave (it keeps no offsets of its own).
                let commit_offset = match peer {
                    Peer::Slave(_) => None,
                    _ => Some(o.tracker.committable()),
                };
                let req = PullRequest {
                    group: &self.group,
                    topic: &topic,
                    broker_name: &broker,
                    queue_id: key.queue_id,
                    offset: o.tracker.next_offset(),
                    max_msgs: max,
                    commit_offset,
                    suspend: self.suspend,
                    expression: TagExpression::new(&expression),
                    sub_version: self.sub_version,
                };
                let timeout = req.rpc_timeout(CLIENT_API_TIMEOUT);
                let what = CallRef::Pull(key, lease);
                let code = RequestCode::PULL_MESSAGE;
                let r = Self::call(
                    &mut self.calls,
                    now,
                    session,
                    peer,
                    code,
                    req.header(),
                    timeout,
                    what,
                    buf,
                    lend,
                );
                if r.is_ok() {
                    self.stats.pulls = self.stats.pulls.wrapping_add(1);
                    self.owned[i].last_pull = Some(now);
                }
                (r, QState::Pulling)
            }
            _ => return None,
        };
        match tx {
            Ok(tx) => {
                self.owned[i].state = next;
                Some(tx)
            }
            Err(CallError::TooManyRequests) => {
                self.blocked = true;
                None
            }
            Err(_) if matches!(state, QState::Ready(_)) => {
                // Cannot be encoded or signed: try again after the exception delay.
                self.owned[i].state = QState::Ready(now.saturating_add(self.exception_delay));
                None
            }
            Err(_) => {
                // Retried at the next rebalance.
                self.drop_queue(key);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
