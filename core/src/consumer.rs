//! Consumer pieces shared by every runtime: the PULL_MESSAGE request and its result, tag
//! expressions and client-side tag filtering, queue allocation (rebalance), flow-control
//! accounting, per-queue offset tracking and the consumer heartbeat body.
//!
//! Read docs/protocol/STRATEGY.md §9 (consumer side) and docs/protocol/WIRE.md §6.5, §8 and §12 first. Everything here is a
//! pure function of its inputs or a fixed-capacity state machine that is told the time; runtimes
//! (tokio, smoltcp) do the I/O.
//!
//! ```
//! use rmq_core::consumer::{allocate, AllocateStrategy, MessageQueue, sort_consumer_ids, sort_queues};
//!
//! let mut queues = [
//!     MessageQueue::new("T", "broker-b", 0),
//!     MessageQueue::new("T", "broker-a", 1),
//!     MessageQueue::new("T", "broker-a", 0),
//! ];
//! let mut cids = ["10.0.0.2@2", "10.0.0.1@1"];
//! sort_queues(&mut queues);
//! sort_consumer_ids(&mut cids);
//! let mut mine = heapless::Vec::<MessageQueue, 8>::new();
//! allocate(AllocateStrategy::Averagely, &queues, &cids, "10.0.0.1@1", &mut mine)?;
//! // 3 queues over 2 consumers: the first consumer (sorted) gets 2, in Java's queue order.
//! assert_eq!(mine.as_slice(), &[MessageQueue::new("T", "broker-a", 0), MessageQueue::new("T", "broker-a", 1)]);
//! # Ok::<(), rmq_core::consumer::AllocateError>(())
//! ```

use core::fmt;

use heapless::Vec;

use crate::json::{BufferTooSmall, SliceWriter};
use crate::message::StoredMessage;
use crate::message::keys;
use crate::producer::{HeartbeatFlavor, write_heartbeat_body};
use crate::select::java_string_hash;
use crate::time::Duration;
use crate::wire::headers::{PullMessageRequestHeader, PullMessageResponseHeader};
use crate::wire::{CommandHeader, FieldError, ResponseCode, Scratch};

// ---------------------------------------------------------------------------------------------
// Constants (docs/protocol/STRATEGY.md §9.2, §9.4, §9.5, §9.6)
// ---------------------------------------------------------------------------------------------

/// `BROKER_SUSPEND_MAX_TIME_MILLIS`: how long the broker holds a long poll (push consumer).
pub const BROKER_SUSPEND_MAX_TIME: Duration = Duration::from_millis(15_000);
/// `CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND`: the RPC timeout of a long-polling pull.
pub const CONSUMER_TIMEOUT_WHEN_SUSPEND: Duration = Duration::from_millis(30_000);
/// Push consumer `pullBatchSize` default.
pub const PULL_BATCH_SIZE: u32 = 32;
/// `pullThresholdForQueue` default: cached messages per queue before pulls are delayed.
pub const PULL_THRESHOLD_FOR_QUEUE: u32 = 1000;
/// `pullThresholdSizeForQueue` default, in MiB.
pub const PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB: u64 = 100;
/// `consumeConcurrentlyMaxSpan` default: largest offset span cached per queue.
pub const CONSUME_CONCURRENTLY_MAX_SPAN: u64 = 2000;
/// `PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL`: the delay when a local threshold is exceeded.
pub const FLOW_CONTROL_DELAY: Duration = Duration::from_millis(50);
/// The delay after a broker FLOW_CONTROL (215) answer to a pull.
pub const BROKER_FLOW_CONTROL_DELAY: Duration = Duration::from_millis(20);
/// 4.9 push consumer `pullTimeDelayMillsWhenException` (hard-coded 3000 ms).
pub const PULL_EXCEPTION_DELAY_V4: Duration = Duration::from_millis(3000);
/// 5.x `pullTimeDelayMillsWhenException` default.
pub const PULL_EXCEPTION_DELAY_V5: Duration = Duration::from_millis(1000);
/// 4.9 delay before an OFFSET_ILLEGAL queue is reset and removed (5.x does it at once).
pub const OFFSET_ILLEGAL_DELAY_V4: Duration = Duration::from_millis(10_000);
/// `rocketmq.client.rebalance.waitInterval` default.
pub const REBALANCE_INTERVAL: Duration = Duration::from_millis(20_000);
/// 5.x `rocketmq.client.rebalance.minInterval` default.
pub const REBALANCE_MIN_INTERVAL: Duration = Duration::from_millis(1000);
/// `persistConsumerOffsetInterval` default (also the lite pull `autoCommitIntervalMillis`).
pub const PERSIST_OFFSET_INTERVAL: Duration = Duration::from_millis(5000);
/// Timeout of QUERY_CONSUMER_OFFSET and UPDATE_CONSUMER_OFFSET.
pub const OFFSET_RPC_TIMEOUT: Duration = Duration::from_millis(5000);

/// `PullSysFlag` bits (docs/protocol/STRATEGY.md §9.1).
pub mod pull_flag {
    /// Commit the `commitOffset` carried in the request.
    pub const COMMIT_OFFSET: i32 = 0x1;
    /// Long poll: the broker may hold the request.
    pub const SUSPEND: i32 = 0x2;
    /// The request carries the subscription expression.
    pub const SUBSCRIPTION: i32 = 0x4;
    /// Class filter mode.
    pub const CLASS_FILTER: i32 = 0x8;
    /// Lite pull.
    pub const LITE_PULL: i32 = 0x10;
}

// ---------------------------------------------------------------------------------------------
// Tag expressions (docs/protocol/WIRE.md §8, Java FilterAPI.buildSubscriptionData)
// ---------------------------------------------------------------------------------------------

/// Java `String.trim()`: strips every char `<= U+0020` from both ends (not Unicode white
/// space: `"a\u{A0}"` stays as it is, `"\u{1}a"` becomes `"a"`).
fn java_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c <= ' ')
}

/// The parts of `raw` between `||` separators (`str::split("||")`, with a byte search: the
/// standard library's substring searcher costs a gateway over a KiB of flash).
fn or_parts(raw: &str) -> impl Iterator<Item = &str> + Clone {
    let mut rest = Some(raw);
    core::iter::from_fn(move || {
        let s = rest?;
        match s.as_bytes().windows(2).position(|w| w == b"||") {
            Some(i) => {
                rest = s.get(i + 2..);
                s.get(..i)
            }
            None => {
                rest = None;
                Some(s)
            }
        }
    })
}

/// The subscription expression for `SUB_ALL`.
pub const SUB_ALL: &str = "*";

/// A subscription expression. Usually a TAG one: `*` (or empty) for all messages, otherwise
/// tags separated by `||` (each trimmed; empty parts dropped), as Java's
/// `FilterAPI.buildSubscriptionData`. Or an SQL92 one ([`TagExpression::sql`]), which the
/// broker evaluates on the message's properties (it must run with `enablePropertyFilter=true`);
/// it has no tags and the client keeps whatever the broker returns (Java `FilterAPI.build`).
///
/// It borrows the expression; tags are produced on demand, so it needs no storage.
///
/// ```
/// use rmq_core::consumer::TagExpression;
/// let e = TagExpression::sql("a > 5 AND region = 'eu'");
/// assert_eq!((e.expression_type(), e.sub_string()), ("SQL92", "a > 5 AND region = 'eu'"));
/// assert_eq!(e.tags().count(), 0);
/// assert_eq!(TagExpression::new("A || B").expression_type(), "TAG");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagExpression<'a> {
    raw: &'a str,
    sql: bool,
}

impl<'a> TagExpression<'a> {
    /// Parses a TAG expression. An empty string means `*`, as in Java.
    pub const fn new(expr: &'a str) -> Self {
        TagExpression {
            raw: expr,
            sql: false,
        }
    }

    /// An SQL92 expression, sent as given (an empty one is refused by the consumer, as Java
    /// refuses it).
    pub const fn sql(expr: &'a str) -> Self {
        TagExpression {
            raw: expr,
            sql: true,
        }
    }

    /// `"SQL92"` or `"TAG"` (Java's `ExpressionType`).
    pub const fn expression_type(&self) -> &'static str {
        if self.sql { "SQL92" } else { "TAG" }
    }

    /// Whether it is an SQL92 expression.
    pub const fn is_sql(&self) -> bool {
        self.sql
    }

    /// Whether the expression selects every message (`*` or empty). Like Java, `" * "` is not
    /// `*`: it is a subscription to the tag `"*"`. An SQL92 expression never is.
    pub fn is_all(&self) -> bool {
        !self.sql && (self.raw.is_empty() || self.raw == SUB_ALL)
    }

    /// The `subString` Java sends: `*` for all, else the expression as given.
    pub fn sub_string(&self) -> &'a str {
        if self.is_all() { SUB_ALL } else { self.raw }
    }

    /// The distinct tags (Java's `tagsSet`), in order of first appearance; none for `*` or
    /// an SQL92 expression.
    pub fn tags(&self) -> impl Iterator<Item = &'a str> + Clone + 'a {
        let raw = self.raw;
        let all = self.sql || self.is_all();
        or_parts(raw)
            .map(java_trim)
            .enumerate()
            .filter(move |(i, t)| !all && !t.is_empty() && !Self::seen_before(raw, *i, t))
            .map(|(_, t)| t)
    }

    fn seen_before(raw: &str, index: usize, tag: &str) -> bool {
        or_parts(raw).take(index).any(|p| java_trim(p) == tag)
    }

    /// The Java `String.hashCode` of each tag (Java's `codeSet`), deduplicated.
    pub fn codes(&self) -> impl Iterator<Item = i32> + Clone + 'a {
        let tags = self.tags();
        let all = tags.clone();
        tags.enumerate()
            .map(|(i, t)| (i, java_string_hash(t)))
            .filter(move |(i, h)| {
                !all.clone()
                    .take(*i)
                    .any(|earlier| java_string_hash(earlier) == *h)
            })
            .map(|(_, h)| h)
    }

    /// The client-side re-filter of `PullAPIWrapper.processPullResult`: with a non-empty tag set,
    /// keep only messages whose tag is in it (messages without a tag are dropped). With `*` (or
    /// an expression with no tags) everything is kept.
    pub fn matches(&self, tag: Option<&str>) -> bool {
        let mut tags = self.tags().peekable();
        if tags.peek().is_none() {
            return true;
        }
        match tag {
            Some(t) => tags.any(|x| x == t),
            None => false,
        }
    }

    /// [`matches`](Self::matches) on a pulled message's `TAGS` property. A message whose
    /// properties are not UTF-8 counts as untagged.
    pub fn matches_message(&self, msg: &StoredMessage<'_>) -> bool {
        if self.tags().next().is_none() {
            // `*`: no need to read the properties.
            return true;
        }
        let tag = msg.properties().ok().and_then(|p| p.get(keys::TAGS));
        self.matches(tag)
    }
}

// ---------------------------------------------------------------------------------------------
// Pull request and result (docs/protocol/STRATEGY.md §9.1, §9.3)
// ---------------------------------------------------------------------------------------------

/// One PULL_MESSAGE (11) request, built like the lite pull consumer's (the expression travels
/// in the request with the SUBSCRIPTION flag, so the broker does not need the heartbeat's copy
/// to be there already).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PullRequest<'a> {
    /// Consumer group.
    pub group: &'a str,
    /// Topic.
    pub topic: &'a str,
    /// Broker name (`bname`).
    pub broker_name: &'a str,
    /// Queue id.
    pub queue_id: i32,
    /// Offset to pull from.
    pub offset: i64,
    /// `maxMsgNums`.
    pub max_msgs: u32,
    /// Offset to commit with the pull (sets COMMIT_OFFSET when `Some` and > 0, like Java).
    pub commit_offset: Option<i64>,
    /// Long-poll hold time; `None` = no SUSPEND flag.
    pub suspend: Option<Duration>,
    /// The subscription.
    pub expression: TagExpression<'a>,
    /// `subVersion` (ms timestamp of the subscription).
    pub sub_version: i64,
}

impl<'a> PullRequest<'a> {
    /// The PullSysFlag bits this request carries.
    pub fn sys_flag(&self) -> i32 {
        let mut f = pull_flag::SUBSCRIPTION;
        if self.commit_offset.is_some_and(|o| o > 0) {
            f |= pull_flag::COMMIT_OFFSET;
        }
        if self.suspend.is_some() {
            f |= pull_flag::SUSPEND;
        }
        f
    }

    /// The typed header.
    pub fn header(&self) -> PullMessageRequestHeader<'a> {
        let suspend = self.suspend.map_or(0, Duration::millis);
        PullMessageRequestHeader {
            consumer_group: self.group,
            topic: self.topic,
            queue_id: self.queue_id,
            queue_offset: self.offset,
            max_msg_nums: i32::try_from(self.max_msgs).unwrap_or(i32::MAX),
            sys_flag: self.sys_flag(),
            commit_offset: self.commit_offset.unwrap_or(0),
            suspend_timeout_millis: i64::try_from(suspend).unwrap_or(i64::MAX),
            subscription: Some(self.expression.sub_string()),
            sub_version: self.sub_version,
            expression_type: Some(self.expression.expression_type()),
            max_msg_bytes: None,
            bname: Some(self.broker_name),
        }
    }

    /// The RPC timeout to use: [`CONSUMER_TIMEOUT_WHEN_SUSPEND`] for a long poll, else
    /// `non_blocking`.
    pub fn rpc_timeout(&self, non_blocking: Duration) -> Duration {
        if self.suspend.is_some() {
            CONSUMER_TIMEOUT_WHEN_SUSPEND
        } else {
            non_blocking
        }
    }
}

/// `PullStatus` of a pull answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PullStatus {
    /// SUCCESS (0): the body holds messages.
    Found,
    /// PULL_NOT_FOUND (19): nothing new (the long poll expired).
    NoNewMsg,
    /// PULL_RETRY_IMMEDIATELY (20): messages exist but none matched the filter.
    NoMatchedMsg,
    /// PULL_OFFSET_MOVED (21): the requested offset is out of range; restart at
    /// `next_begin_offset`.
    OffsetIllegal,
}

/// A mapped pull answer (the header part; the body is decoded with
/// [`decode_stored`](crate::message::decode_stored)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PullResult {
    /// Status.
    pub status: PullStatus,
    /// Where to pull next.
    pub next_begin_offset: i64,
    /// The queue's minimum offset.
    pub min_offset: i64,
    /// The queue's maximum offset.
    pub max_offset: i64,
    /// The broker id to pull from next (0 = master).
    pub suggest_which_broker_id: i64,
    /// 5.x static topics: add to each message's queue offset.
    pub offset_delta: Option<i64>,
}

/// A pull answer that is not a [`PullResult`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PullError {
    /// Any other response code (`MQBrokerException` in Java), e.g. FLOW_CONTROL (215),
    /// SUBSCRIPTION_NOT_EXIST (24), SYSTEM_ERROR (1).
    Broker(ResponseCode),
    /// A mapped status whose header is missing or malformed.
    Header(FieldError),
}

impl PullError {
    /// How long to wait before pulling this queue again (docs/protocol/STRATEGY.md §9.3): 20 ms after a broker
    /// FLOW_CONTROL, otherwise `exception_delay` ([`PULL_EXCEPTION_DELAY_V4`] /
    /// [`PULL_EXCEPTION_DELAY_V5`]).
    pub fn retry_delay(self, exception_delay: Duration) -> Duration {
        match self {
            PullError::Broker(ResponseCode::FLOW_CONTROL) => BROKER_FLOW_CONTROL_DELAY,
            _ => exception_delay,
        }
    }
}

impl fmt::Display for PullError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PullError::Broker(c) => write!(f, "pull failed with response code {}", c.0),
            PullError::Header(e) => write!(f, "bad pull response header: {e}"),
        }
    }
}

impl core::error::Error for PullError {}

impl PullStatus {
    /// Maps a response code (`MQClientAPIImpl.processPullResponse`); `None` for any other code.
    pub fn from_code(code: ResponseCode) -> Option<Self> {
        match code {
            ResponseCode::SUCCESS => Some(PullStatus::Found),
            ResponseCode::PULL_NOT_FOUND => Some(PullStatus::NoNewMsg),
            ResponseCode::PULL_RETRY_IMMEDIATELY => Some(PullStatus::NoMatchedMsg),
            ResponseCode::PULL_OFFSET_MOVED => Some(PullStatus::OffsetIllegal),
            _ => None,
        }
    }
}

/// Maps a PULL_MESSAGE response header to a [`PullResult`].
///
/// # Errors
/// [`PullError::Broker`] for codes other than 0/19/20/21, [`PullError::Header`] when a required
/// field (`suggestWhichBrokerId`, `nextBeginOffset`, `minOffset`, `maxOffset`) is missing or
/// not a number.
pub fn parse_pull_response(h: &CommandHeader<'_>) -> Result<PullResult, PullError> {
    let code = h.response_code();
    let status = PullStatus::from_code(code).ok_or(PullError::Broker(code))?;
    let mut scratch = Scratch::default();
    let r = PullMessageResponseHeader::decode(h, &mut scratch).map_err(PullError::Header)?;
    Ok(PullResult {
        status,
        next_begin_offset: r.next_begin_offset,
        min_offset: r.min_offset,
        max_offset: r.max_offset,
        suggest_which_broker_id: r.suggest_which_broker_id,
        offset_delta: r.offset_delta,
    })
}

mod allocate;
pub use allocate::*;

// ---------------------------------------------------------------------------------------------
// Flow control and offset tracking (docs/protocol/STRATEGY.md §9.4, §9.6)
// ---------------------------------------------------------------------------------------------

/// Push-consumer flow-control thresholds per queue. `Default` is Java's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FlowLimits {
    /// `pullThresholdForQueue`: delay pulls while more messages than this are cached.
    pub max_cached_msgs: u32,
    /// `pullThresholdSizeForQueue` in MiB: delay while the cached body size, in whole MiB
    /// (rounded down, as Java), exceeds this.
    pub max_cached_mib: u64,
    /// `consumeConcurrentlyMaxSpan`: delay while last − first cached offset exceeds this.
    pub max_span: u64,
    /// The delay to use ([`FLOW_CONTROL_DELAY`]).
    pub delay: Duration,
}

impl Default for FlowLimits {
    fn default() -> Self {
        FlowLimits {
            max_cached_msgs: PULL_THRESHOLD_FOR_QUEUE,
            max_cached_mib: PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB,
            max_span: CONSUME_CONCURRENTLY_MAX_SPAN,
            delay: FLOW_CONTROL_DELAY,
        }
    }
}

/// What to do with a queue's next pull.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FlowDecision {
    /// Pull now, asking for at most this many messages.
    Pull(u32),
    /// Too much is cached: try again after this delay.
    DelayPull(Duration),
}

/// Why a pull was delayed (for logging and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FlowReason {
    /// `cachedMessageCount > pullThresholdForQueue`.
    Count,
    /// `cachedMessageSizeInMiB > pullThresholdSizeForQueue`.
    Size,
    /// `maxSpan > consumeConcurrentlyMaxSpan`.
    Span,
    /// The fixed-capacity in-flight set cannot take another batch.
    Capacity,
}

/// Errors of [`QueueTracker`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum TrackError {
    /// The in-flight set is full.
    Full,
    /// The offset is below the next expected offset (already tracked or processed).
    NotAscending,
}

impl fmt::Display for TrackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrackError::Full => "in-flight offset set is full",
            TrackError::NotAscending => "offset below the next expected offset",
        })
    }
}

impl core::error::Error for TrackError {}

/// One queue's consumption state (Java's `ProcessQueue` plus the offset-store entry): the
/// fixed-capacity set of in-flight offsets (pulled, handed out, not yet acknowledged) with their
/// body sizes, the next offset to pull, and the last committed offset.
///
/// The **committable offset** is the lowest in-flight offset, or the next offset to pull when
/// nothing is in flight: every offset below it has been processed (or filtered out). It never
/// decreases except through [`reset`](Self::reset).
#[derive(Clone, Debug)]
pub struct QueueTracker<const N: usize> {
    /// Sorted ascending.
    inflight: Vec<(i64, u32), N>,
    cached_bytes: u64,
    next_offset: i64,
    committed: Option<i64>,
}

impl<const N: usize> QueueTracker<N> {
    /// A queue that starts pulling at `offset`, with nothing committed yet.
    pub const fn new(offset: i64) -> Self {
        QueueTracker {
            inflight: Vec::new(),
            cached_bytes: 0,
            next_offset: offset,
            committed: None,
        }
    }

    /// The offset to pull from next.
    pub const fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// Messages in flight (`cachedMessageCount`).
    pub fn cached_count(&self) -> usize {
        self.inflight.len()
    }

    /// Body bytes in flight (`cachedMessageSize`).
    pub const fn cached_bytes(&self) -> u64 {
        self.cached_bytes
    }

    /// Last − first in-flight offset (`maxSpan`), 0 when empty.
    pub fn span(&self) -> u64 {
        match (self.inflight.first(), self.inflight.last()) {
            (Some(a), Some(b)) => b.0.abs_diff(a.0),
            _ => 0,
        }
    }

    /// Records one pulled message handed to the application. Offsets must be at least the next
    /// offset; the next offset moves past it.
    ///
    /// # Errors
    /// [`TrackError::Full`] when `N` offsets are in flight, [`TrackError::NotAscending`] for an
    /// offset below the next offset.
    pub fn push(&mut self, offset: i64, body_len: u32) -> Result<(), TrackError> {
        if offset < self.next_offset {
            return Err(TrackError::NotAscending);
        }
        self.inflight
            .push((offset, body_len))
            .map_err(|_| TrackError::Full)?;
        self.cached_bytes = self.cached_bytes.saturating_add(u64::from(body_len));
        self.next_offset = offset.saturating_add(1);
        Ok(())
    }

    /// Applies a FOUND / NO_NEW_MSG / NO_MATCHED_MSG result after its messages were
    /// [`push`](Self::push)ed: the next pull starts at `next_begin_offset` (never moving back:
    /// a smaller value is ignored, Java logs it as "\[BUG\]").
    pub fn advance(&mut self, next_begin_offset: i64) {
        if next_begin_offset > self.next_offset {
            self.next_offset = next_begin_offset;
        }
    }

    /// Marks `offset` processed; `false` if it was not in flight (already acked or unknown).
    pub fn ack(&mut self, offset: i64) -> bool {
        match self.inflight.binary_search_by(|e| e.0.cmp(&offset)) {
            Ok(i) => {
                let (_, len) = self.inflight.remove(i);
                self.cached_bytes = self.cached_bytes.saturating_sub(u64::from(len));
                true
            }
            Err(_) => false,
        }
    }

    /// The lowest and highest offsets in flight.
    pub fn in_flight_range(&self) -> Option<(i64, i64)> {
        Some((self.inflight.first()?.0, self.inflight.last()?.0))
    }

    /// Whether `offset` is in flight (handed out, not yet acknowledged).
    pub fn contains(&self, offset: i64) -> bool {
        self.inflight.binary_search_by(|e| e.0.cmp(&offset)).is_ok()
    }

    /// The lowest offset not yet processed.
    pub fn committable(&self) -> i64 {
        self.inflight.first().map_or(self.next_offset, |e| e.0)
    }

    /// The offset to commit, if it differs from the last one committed.
    pub fn commit_due(&self) -> Option<i64> {
        let c = self.committable();
        (self.committed != Some(c)).then_some(c)
    }

    /// Records that `offset` was committed to the broker.
    pub fn mark_committed(&mut self, offset: i64) {
        self.committed = Some(offset);
    }

    /// The last committed offset.
    pub const fn committed(&self) -> Option<i64> {
        self.committed
    }

    /// OFFSET_ILLEGAL: drop everything in flight and restart at `offset` (which may be lower).
    pub fn reset(&mut self, offset: i64) {
        self.inflight.clear();
        self.cached_bytes = 0;
        self.next_offset = offset;
    }

    /// Java's flow-control checks, in order (count, size, span), plus a capacity check for the
    /// fixed-size set: pull at most `min(batch, free slots)` messages, or delay.
    pub fn flow(&self, limits: &FlowLimits, batch: u32) -> FlowDecision {
        match self.flow_reason(limits, batch) {
            Some(_) => FlowDecision::DelayPull(limits.delay),
            None => {
                let free = N.saturating_sub(self.inflight.len());
                let n = u32::try_from(free).unwrap_or(u32::MAX).min(batch);
                FlowDecision::Pull(n)
            }
        }
    }

    /// Why [`flow`](Self::flow) delays, or `None` if it pulls. A zero `batch` counts as
    /// [`FlowReason::Capacity`].
    pub fn flow_reason(&self, limits: &FlowLimits, batch: u32) -> Option<FlowReason> {
        let count = u64::try_from(self.inflight.len()).unwrap_or(u64::MAX);
        if count > u64::from(limits.max_cached_msgs) {
            return Some(FlowReason::Count);
        }
        if self.cached_bytes / (1024 * 1024) > limits.max_cached_mib {
            return Some(FlowReason::Size);
        }
        if self.span() > limits.max_span {
            return Some(FlowReason::Span);
        }
        if self.inflight.len() >= N || batch == 0 {
            return Some(FlowReason::Capacity);
        }
        None
    }
}

// ---------------------------------------------------------------------------------------------
// Heartbeat (docs/protocol/WIRE.md §8)
// ---------------------------------------------------------------------------------------------

/// `ConsumeType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ConsumeType {
    /// `CONSUME_ACTIVELY` (pull).
    Actively,
    /// `CONSUME_PASSIVELY` (push).
    Passively,
}

impl ConsumeType {
    /// The Java enum name.
    pub const fn name(self) -> &'static str {
        match self {
            ConsumeType::Actively => "CONSUME_ACTIVELY",
            ConsumeType::Passively => "CONSUME_PASSIVELY",
        }
    }
}

/// `MessageModel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MessageModel {
    /// `CLUSTERING`: the group shares the queues.
    #[default]
    Clustering,
    /// `BROADCASTING`: every consumer reads every queue.
    Broadcasting,
}

impl MessageModel {
    /// The Java enum name.
    pub const fn name(self) -> &'static str {
        match self {
            MessageModel::Clustering => "CLUSTERING",
            MessageModel::Broadcasting => "BROADCASTING",
        }
    }
}

/// `ConsumeFromWhere`: where a group without a stored offset starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ConsumeFromWhere {
    /// `CONSUME_FROM_LAST_OFFSET` (Java's default).
    #[default]
    LastOffset,
    /// `CONSUME_FROM_FIRST_OFFSET`.
    FirstOffset,
    /// `CONSUME_FROM_TIMESTAMP`: the first message stored at or after the consumer's
    /// `consume_timestamp` (SEARCH_OFFSET_BY_TIMESTAMP).
    Timestamp,
}

impl ConsumeFromWhere {
    /// The Java enum name.
    pub const fn name(self) -> &'static str {
        match self {
            ConsumeFromWhere::LastOffset => "CONSUME_FROM_LAST_OFFSET",
            ConsumeFromWhere::FirstOffset => "CONSUME_FROM_FIRST_OFFSET",
            ConsumeFromWhere::Timestamp => "CONSUME_FROM_TIMESTAMP",
        }
    }
}

/// One `SubscriptionData`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Subscription<'a> {
    /// Topic.
    pub topic: &'a str,
    /// TAG or SQL92 expression.
    pub expression: TagExpression<'a>,
    /// `subVersion`.
    pub sub_version: i64,
}

/// One `ConsumerData`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsumerData<'a> {
    /// `groupName`.
    pub group: &'a str,
    /// `consumeType`.
    pub consume_type: ConsumeType,
    /// `messageModel`.
    pub message_model: MessageModel,
    /// `consumeFromWhere`.
    pub consume_from_where: ConsumeFromWhere,
    /// `subscriptionDataSet`.
    pub subscriptions: &'a [Subscription<'a>],
}

pub(crate) fn write_subscription(w: &mut SliceWriter<'_>, s: &Subscription<'_>) {
    w.put(br#"{"classFilterMode":false,"codeSet":["#);
    for (i, c) in s.expression.codes().enumerate() {
        if i > 0 {
            w.put_u8(b',');
        }
        w.put_i64_dec(i64::from(c));
    }
    w.put(br#"],"expressionType":""#);
    w.put(s.expression.expression_type().as_bytes());
    w.put(br#"","subString":"#);
    w.put_json_str(s.expression.sub_string());
    w.put(br#","subVersion":"#);
    w.put_i64_dec(s.sub_version);
    w.put(br#","tagsSet":["#);
    for (i, t) in s.expression.tags().enumerate() {
        if i > 0 {
            w.put_u8(b',');
        }
        w.put_json_str(t);
    }
    w.put(br#"],"topic":"#);
    w.put_json_str(s.topic);
    w.put_u8(b'}');
}

fn write_consumer(w: &mut SliceWriter<'_>, c: &ConsumerData<'_>) {
    w.put(br#"{"consumeFromWhere":""#);
    w.put(c.consume_from_where.name().as_bytes());
    w.put(br#"","consumeType":""#);
    w.put(c.consume_type.name().as_bytes());
    w.put(br#"","groupName":"#);
    w.put_json_str(c.group);
    w.put(br#","messageModel":""#);
    w.put(c.message_model.name().as_bytes());
    w.put(br#"","subscriptionDataSet":["#);
    for (i, s) in c.subscriptions.iter().enumerate() {
        if i > 0 {
            w.put_u8(b',');
        }
        write_subscription(w, s);
    }
    w.put(br#"],"unitMode":false}"#);
}

/// Writes a HEART_BEAT (34) JSON body (fastjson order: keys sorted) announcing `consumers` and
/// the producer groups `producers` plus [`CLIENT_INNER_PRODUCER`](crate::producer::CLIENT_INNER_PRODUCER), as a Java client does.
///
/// # Errors
/// [`BufferTooSmall`] when `buf` is too short.
pub fn write_heartbeat(
    client_id: &str,
    consumers: &[ConsumerData<'_>],
    producers: &[&str],
    flavor: HeartbeatFlavor,
    buf: &mut [u8],
) -> Result<usize, BufferTooSmall> {
    let mut w = SliceWriter::new(buf);
    write_heartbeat_body(&mut w, client_id, producers, flavor, |w| {
        for (i, c) in consumers.iter().enumerate() {
            if i > 0 {
                w.put_u8(b',');
            }
            write_consumer(w, c);
        }
    });
    w.finish()
}

/// Writes the body of CHECK_CLIENT_CONFIG (46, no header fields): Java's
/// `CheckClientRequestBody` (`clientId`, `group`, `subscriptionData`), with which a consumer
/// asks a broker of the topic whether it can evaluate an SQL92 subscription before it starts
/// (Java `MQClientInstance.checkClientInBroker`). The broker answers SUCCESS, SYSTEM_ERROR
/// ("The broker does not support consumer to filter message by SQL92": no
/// `enablePropertyFilter`) or SUBSCRIPTION_PARSE_FAILED with the parser's message.
///
/// # Errors
/// [`BufferTooSmall`].
pub fn write_check_client(
    client_id: &str,
    group: &str,
    sub: &Subscription<'_>,
    buf: &mut [u8],
) -> Result<usize, BufferTooSmall> {
    let mut w = SliceWriter::new(buf);
    w.put(br#"{"clientId":"#);
    w.put_json_str(client_id);
    w.put(br#","group":"#);
    w.put_json_str(group);
    w.put(br#","subscriptionData":"#);
    write_subscription(&mut w, sub);
    w.put_u8(b'}');
    w.finish()
}

/// Reads the `consumerIdList` of a GET_CONSUMER_LIST_BY_GROUP (38) response body into `out`
/// (borrowing from `body` when a string has no escapes).
///
/// # Errors
/// [`ConsumerListError`] for malformed JSON or when `out` is too small.
pub fn parse_consumer_list<'b, const N: usize>(
    body: &'b [u8],
    out: &mut Vec<&'b str, N>,
) -> Result<(), ConsumerListError> {
    out.clear();
    let s = core::str::from_utf8(body).map_err(|_| ConsumerListError::Malformed)?;
    let key = "\"consumerIdList\"";
    let start = s.find(key).ok_or(ConsumerListError::Malformed)?;
    let rest = s
        .get(start.saturating_add(key.len())..)
        .ok_or(ConsumerListError::Malformed)?
        .trim_start();
    let rest = rest
        .strip_prefix(':')
        .ok_or(ConsumerListError::Malformed)?
        .trim_start();
    let mut rest = rest.strip_prefix('[').ok_or(ConsumerListError::Malformed)?;
    loop {
        rest = rest.trim_start();
        if rest.starts_with(']') {
            return Ok(());
        }
        let r = rest.strip_prefix('"').ok_or(ConsumerListError::Malformed)?;
        let end = r.find('"').ok_or(ConsumerListError::Malformed)?;
        let id = r.get(..end).ok_or(ConsumerListError::Malformed)?;
        if id.contains('\\') {
            return Err(ConsumerListError::Malformed);
        }
        out.push(id).map_err(|_| ConsumerListError::Full)?;
        rest = r
            .get(end.saturating_add(1)..)
            .ok_or(ConsumerListError::Malformed)?
            .trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with(']') {
            return Err(ConsumerListError::Malformed);
        }
    }
}

/// Errors of [`parse_consumer_list`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ConsumerListError {
    /// Not the expected JSON (or a client id with escapes, which client ids never have).
    Malformed,
    /// More ids than the output holds.
    Full,
}

impl fmt::Display for ConsumerListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConsumerListError::Malformed => "malformed consumer id list",
            ConsumerListError::Full => "too many consumer ids",
        })
    }
}

impl core::error::Error for ConsumerListError {}

#[cfg(test)]
mod tests;
