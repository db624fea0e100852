//! The long-polling pull [`Consumer`]: subscriptions, heartbeats, rebalance,
//! one long-polling pull per assigned queue at a time, a [`Consumer::poll`] API, per-message
//! acks and offset commits.
//!
//! Every decision is the core's [`rmq_core::pull_consumer::PullConsumer`], driven by the same
//! session driver as the producer (one lock, one driver task, the connections): rebalance rounds
//! (every `rebalance_interval`, and at once on NOTIFY_CONSUMER_IDS_CHANGED), the allocation on
//! Java-sorted inputs, start offsets (QUERY_CONSUMER_OFFSET, else `consume_from`), flow control
//! (Java's thresholds: 1000 messages, 100 MiB, span 2000 → retry in 50 ms), PULL_MESSAGE with
//! SUSPEND (held up to 15 s by the broker), tag re-filtering, the in-flight offsets of every
//! queue, and UPDATE_CONSUMER_OFFSET every `persist_interval` (5 s), for revoked queues and at
//! [`Consumer::shutdown`]. This module only starts it, decompresses and hands out the messages,
//! and turns acknowledgements into calls on it.
//!
//! - **Start**: fetch the routes of the subscribed topics, send a heartbeat (with the consumer
//!   data) to every master and wait for the answers, rebalance at once; when
//!   [`ConsumerBuilder::start`] returns, the assigned queues know their start offsets.
//! - **Transport** is the client session's, as for the producer: NameServer failover, the
//!   broker table, heartbeats on the session's schedule, unregister, ACL signing
//!   ([`ConsumerBuilder::acl`]), TLS ([`ConsumerBuilder::tls`]). A broker that refuses the
//!   credentials refuses the heartbeat, the consumer list and the pulls: the consumer is
//!   assigned nothing and receives nothing. Connections lost and late responses are counted in
//!   [`ConsumerStats`].
//!
//! **Positioning**: [`Consumer::seek`] moves an assigned queue to an offset, its beginning or
//! end, or the first message stored at or after a timestamp ([`Position`]); the new position
//! is committed. [`Consumer::pause`] / [`Consumer::resume`] stop and restart pulling a queue.
//! [`ConsumeFromWhere::Timestamp`] with [`ConsumerBuilder::consume_timestamp`] applies, like
//! Java's `CONSUME_FROM_TIMESTAMP`, when the broker has no offset for the group.
//!
//! **Retries** (clustering): [`Consumer::nack`] sends a message back for a later retry
//! (CONSUMER_SEND_MSG_BACK; if refused, a copy to `%RETRY%<group>`; if that fails too, handed
//! out again in 5 s). The consumer subscribes `%RETRY%<group>` itself; a retried message keeps
//! its topic ([`ConsumedMessage::topic`]) and counts [`ConsumedMessage::reconsume_times`];
//! after `max_reconsume_times` (16) the broker moves it to `%DLQ%<group>`.
//! [`Consumer::run`] is the listener API on top: concurrent handler calls whose results
//! acknowledge or nack, panics and errors reconsumed, `consume_timeout`.
//!
//! **Assignment**: [`Consumer::assign`] reads chosen queues without rebalancing.
//! **Broadcasting** ([`ConsumerBuilder::message_model`]): every consumer reads every queue,
//! offsets in a local file ([`ConsumerBuilder::offset_store`]) saved atomically every
//! `persist_interval` and at shutdown, no retry topic.
//!
//! **Operators' tools**: the consumer answers what brokers forward from `mqadmin`: its running
//! info (`consumerStatus`), offset resets (`resetOffsetByTime`), and CONSUME_MESSAGE_DIRECTLY
//! (`queryMsgById -d`, run on the [`Consumer::run`] handler); other request codes get
//! REQUEST_CODE_NOT_SUPPORTED.
//!
//! Delivery is at least once. Messages handed out and not acknowledged when a queue moves to
//! another consumer (rebalance) or when the process dies are delivered again, from the last
//! committed offset: the duplicate window is "not yet acknowledged, or acknowledged less than one
//! commit interval ago". Messages of a revoked queue still waiting in the local buffer are not
//! handed out any more.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use rmq_std::consumer::Consumer;
//! let consumer = Consumer::builder()
//!     .namesrv_addr("127.0.0.1:9876")
//!     .group("cg-demo")
//!     .subscribe("TopicA", "TagA || TagB")
//!     .start()
//!     .await?;
//! let batch = consumer.poll(32, Duration::from_secs(5)).await;
//! for m in &batch {
//!     println!("{} {:?}", m.queue_offset, m.body);
//! }
//! consumer.ack_all(&batch);
//! consumer.shutdown().await;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use bytes::Bytes;
use rmq_core::admin::prop;
use rmq_core::client::NackKey;
pub use rmq_core::consumer::{AllocateStrategy, ConsumeFromWhere, FlowLimits, MessageModel};
use rmq_core::consumer::{
    BROKER_SUSPEND_MAX_TIME, MessageQueue as CoreQueue, OFFSET_RPC_TIMEOUT,
    PERSIST_OFFSET_INTERVAL, PULL_BATCH_SIZE, PULL_EXCEPTION_DELAY_V5, REBALANCE_INTERVAL,
};
use rmq_core::message::keys;
use rmq_core::message::stored::MessageId;
use rmq_core::producer::{CLIENT_API_TIMEOUT, HEARTBEAT_BROKER_INTERVAL};
pub use rmq_core::pull_consumer::Position;
use rmq_core::pull_consumer::{Delivery, PullConfig, PullConfigError, PullEvent, QueueKey};
pub use rmq_core::send_back::NackError;
use rmq_core::session::{self, Peer};
use rmq_core::wire::{LanguageCode, SerializeType, version};
use rmq_core::{lock, send_back};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::client::{client_id, local_ip};
use crate::clock;
use crate::config::{SecurityConfig, client_knobs, config_table};
use crate::driver::{Driver, Machine, Session, Sink, Wait};
use crate::message::MessageQueue;
use crate::metrics::{ConsumerMetrics, QueueMetrics};
use crate::shared::Counters;
use crate::sync::{AtomicBool, Mutex, Ordering};
use crate::trace::Tracer;
use rmq_core::metrics::{AtomicHistogram, RateWindow};

/// A subscription's expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expression {
    /// Tags: `*` for all, or `a || b`.
    Tag(String),
    /// SQL92 on the messages' properties ([`ConsumerBuilder::subscribe_sql`]).
    Sql92(String),
}

config_table! {
    /// The settled configuration of a [`Consumer`].
    pub struct ConsumerConfig;
    /// Builds a [`Consumer`]; defaults are Java's push-consumer defaults.
    pub struct ConsumerBuilder;
    /// NameServer addresses.
    namesrv_addr: Vec<String> = Vec::new();
    /// Where the NameServer list is fetched from when `namesrv_addr` is empty
    /// ([`ConsumerBuilder::namesrv_domain`]).
    namesrv_domain: Option<crate::NamesrvDomain> = None;
    /// Namespace v1 ([`ConsumerBuilder::namespace`]).
    namespace: Option<String> = None;
    /// Consumer group.
    group: String = String::new() => group(impl Into<String>);
    /// `(topic, expression)` pairs.
    subscriptions: Vec<(String, Expression)> = Vec::new();
    /// Instance name (the client id is `ip@instance`): unique per consumer by default; it
    /// must be unique per consumer of a group within one host.
    instance_name: String = fresh_instance_name() => instance_name(impl Into<String>);
    /// `consumeFromWhere`: where a queue without a committed offset starts (default
    /// `CONSUME_FROM_LAST_OFFSET`).
    consume_from: ConsumeFromWhere = ConsumeFromWhere::LastOffset
        => consume_from(ConsumeFromWhere);
    /// `consumeTimestamp`: the store timestamp (Unix ms) `ConsumeFromWhere::Timestamp`
    /// starts from (default: half an hour before the builder was made, as Java).
    consume_timestamp: i64 = clock::unix_millis() - 30 * 60 * 1000 => consume_timestamp(i64);
    /// Queue allocation strategy (default averagely).
    strategy: AllocateStrategy = AllocateStrategy::Averagely
        => allocate_strategy(AllocateStrategy);
    /// `pullBatchSize` (default 32).
    pull_batch_size: u32 = PULL_BATCH_SIZE => pull_batch_size(u32);
    /// Flow-control thresholds per queue (default Java's).
    flow: FlowLimits = FlowLimits::default() => flow_limits(FlowLimits);
    /// Broker long-poll hold time (default 15 s).
    suspend: StdDuration = clock::to_std(BROKER_SUSPEND_MAX_TIME) => suspend(StdDuration);
    /// Rebalance period (default 20 s).
    rebalance_interval: StdDuration = clock::to_std(REBALANCE_INTERVAL)
        => rebalance_interval(StdDuration);
    /// Offset commit period (default 5 s).
    persist_interval: StdDuration = clock::to_std(PERSIST_OFFSET_INTERVAL)
        => persist_interval(StdDuration);
    /// Heartbeat period (default 30 s).
    heartbeat_interval: StdDuration = clock::to_std(HEARTBEAT_BROKER_INTERVAL)
        => heartbeat_interval(StdDuration);
    /// Delay after a failed pull.
    pull_exception_delay: StdDuration = clock::to_std(PULL_EXCEPTION_DELAY_V5);
    /// Header format (default JSON).
    serialize_type: SerializeType = SerializeType::JSON => serialize_type(SerializeType);
    /// Remoting `version` sent (default 5.3.3).
    version: i32 = version::V5_3_3 => version(i32);
    /// Language sent (default RUST).
    language: LanguageCode = LanguageCode::RUST;
    /// ACL credentials and TLS (see [`ConsumerBuilder::acl`] and [`ConsumerBuilder::tls`]).
    security: SecurityConfig = SecurityConfig::default();
    /// `maxReconsumeTimes`: deliveries of a message before it goes to `%DLQ%<group>`
    /// (`None`: Java's default, 16, or without end for orderly consumption).
    max_reconsume_times: Option<i32> = None => max_reconsume_times(i32);
    /// Orderly consumption (Java `MessageListenerOrderly`): queues locked on their brokers,
    /// each processed by one handler call at a time, in queue order ([`Consumer::run`]).
    orderly: bool = false => orderly(bool);
    /// `suspendCurrentQueueTimeMillis` of orderly consumption: a failed batch is processed
    /// again after this (default 1 s).
    suspend_current_queue_time: StdDuration = clock::to_std(lock::SUSPEND_CURRENT_QUEUE_TIME)
        => suspend_current_queue_time(StdDuration);
    /// Handler calls at once in [`Consumer::run`] (default 20, Java's consume threads).
    consume_concurrency: usize = 20 => consume_concurrency(usize);
    /// Messages per handler call in [`Consumer::run`] (default 1).
    consume_batch_size: usize = 1 => consume_batch_size(usize);
    /// `consumeTimeout` of [`Consumer::run`] (default 15 min): a handler call running longer
    /// has its messages sent back (delay level 3); it keeps running, its result is ignored.
    consume_timeout: StdDuration = clock::to_std(send_back::CONSUME_TIMEOUT)
        => consume_timeout(StdDuration);
    /// `messageModel` (default clustering; broadcasting: every consumer reads every queue). A
    /// broadcasting consumer keeps its offsets in a local file: give it a stable
    /// `instance_name` (or `offset_store`) to resume after a restart.
    model: MessageModel = MessageModel::Clustering => message_model(MessageModel);
    /// Broadcasting: the file of this consumer's offsets (default
    /// `$HOME/.rmq/offsets/<instance_name>/<group>.offsets`).
    offset_store: Option<std::path::PathBuf> = None => offset_store(std::path::PathBuf);
    /// How long [`ConsumerBuilder::start`] waits for the routes, heartbeats and first
    /// rebalance (default 18 s); past it the consumer goes on starting in the background.
    /// With SQL92 subscriptions at least 6 s: their checks decide whether it starts.
    start_timeout: StdDuration = clock::to_std(CLIENT_API_TIMEOUT) * 6
        => start_timeout(StdDuration);
    /// `true`: [`ConsumerBuilder::start`] succeeds even when no NameServer answers (the
    /// consumer keeps looking its routes up); default `false`, such a start fails with
    /// [`ConsumerConfigError::NameServersUnreachable`].
    lazy_start: bool = false => lazy_start(bool);
    /// Message trace (Java `enableMsgTrace`): the topic the handler calls are traced to (see
    /// [`ConsumerBuilder::message_trace`]); `None` (default): no trace.
    trace_topic: Option<String> = None;
}

/// `<pid>#<unix ms>#<n>`, a new one per builder.
fn fresh_instance_name() -> String {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}#{}#{seq}", std::process::id(), clock::unix_millis())
}

impl ConsumerConfig {
    /// `max_reconsume_times`, defaults applied.
    pub fn max_reconsumes(&self) -> i32 {
        self.max_reconsume_times.unwrap_or(match self.orderly {
            true => lock::MAX_RECONSUME_TIMES_ORDERLY,
            false => send_back::MAX_RECONSUME_TIMES,
        })
    }
}

/// Why a consumer could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsumerConfigError {
    /// No NameServer address.
    NoNameServer,
    /// The group is empty.
    NoGroup,
    /// No subscription.
    NoSubscription,
    /// The batch size is 0.
    ZeroBatch,
    /// ACL is configured with an empty access key.
    AclAccessKey,
    /// The core session refused the configuration (e.g. a group or client id too long).
    Session(rmq_core::session::ConfigError),
    /// The core consumer refused a subscription (too many, expression too long).
    Subscription(PullConfigError),
    /// No NameServer answered the start (the last connection's error, if one failed): nothing
    /// could be assigned. [`ConsumerBuilder::lazy_start`] starts anyway and keeps trying.
    NameServersUnreachable(Option<crate::ConnectionError>),
    /// The trace producer ([`ConsumerBuilder::message_trace`]) could not be started.
    Trace(crate::ConfigError),
    /// The start's fetch of the NameServer list ([`ConsumerBuilder::namesrv_domain`]) failed.
    Discovery(crate::DiscoveryError),
    /// The broker refused an SQL92 subscription ([`ConsumerBuilder::subscribe_sql`]):
    /// SUBSCRIPTION_PARSE_FAILED (23) with the parser's message, or SYSTEM_ERROR (1) when it
    /// runs without `enablePropertyFilter=true`; code -1 when the broker could not be asked
    /// in time (as Java, which fails its start then too; a [`ConsumerBuilder::lazy_start`]
    /// goes on) or the check could not be written (its ACL signature failed).
    Filter {
        /// The topic subscribed.
        topic: String,
        /// The broker's response code.
        code: i32,
        /// The broker's remark.
        remark: String,
    },
}

impl std::fmt::Display for ConsumerConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConsumerConfigError::NoNameServer => "no name server address, please set it",
            ConsumerConfigError::NoGroup => "consumer group is empty",
            ConsumerConfigError::NoSubscription => "no subscription",
            ConsumerConfigError::ZeroBatch => "pull batch size is 0",
            ConsumerConfigError::AclAccessKey => "ACL access key is empty",
            ConsumerConfigError::Session(_) => "the client session refused the configuration",
            ConsumerConfigError::Subscription(_) => "the consumer refused a subscription",
            ConsumerConfigError::NameServersUnreachable(_) => "no NameServer answered the start",
            ConsumerConfigError::Trace(_) => "the trace producer could not be started",
            ConsumerConfigError::Discovery(e) => return e.fmt(f),
            ConsumerConfigError::Filter {
                topic,
                code,
                remark,
            } => {
                return write!(
                    f,
                    "the broker refused the SQL92 subscription to {topic} (code {code}): {remark}"
                );
            }
        })
    }
}

impl std::error::Error for ConsumerConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConsumerConfigError::Session(e) => Some(e),
            ConsumerConfigError::Subscription(e) => Some(e),
            ConsumerConfigError::NameServersUnreachable(Some(e)) => Some(e),
            ConsumerConfigError::Trace(e) => Some(e),
            ConsumerConfigError::Discovery(e) => Some(e),
            _ => None,
        }
    }
}

impl ConsumerBuilder {
    /// Subscribes to `topic` with a TAG expression (`*`, `a || b`); a second call for the same
    /// topic replaces the expression.
    #[must_use]
    pub fn subscribe(self, topic: &str, expression: &str) -> Self {
        self.subscribe_with(topic, Expression::Tag(expression.to_owned()))
    }

    /// Subscribes to `topic` with an SQL92 expression on the messages' properties (Java
    /// `MessageSelector.bySql`), evaluated by the broker, which must run with
    /// `enablePropertyFilter=true`: [`ConsumerBuilder::start`] asks the broker to check the
    /// expression before its first rebalance (CHECK_CLIENT_CONFIG, as Java does) and fails
    /// with [`ConsumerConfigError::Filter`] when it refuses it or cannot be asked. A second
    /// call for the same topic replaces the expression. Expressions are kept up to
    /// [`rmq_core::pull_consumer::MAX_EXPRESSION`] bytes (longer ones are refused at the
    /// start with [`ConsumerConfigError::Subscription`]; Java has no limit).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), rmq_std::consumer::ConsumerConfigError> {
    /// let c = rmq_std::consumer::Consumer::builder()
    ///     .namesrv_addr("127.0.0.1:9876")
    ///     .group("alerts")
    ///     .subscribe_sql("Telemetry", "temp > 80 AND site = 'north'")
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn subscribe_sql(self, topic: &str, expression: &str) -> Self {
        self.subscribe_with(topic, Expression::Sql92(expression.to_owned()))
    }

    fn subscribe_with(mut self, topic: &str, expression: Expression) -> Self {
        self.cfg.subscriptions.retain(|(t, _)| t != topic);
        self.cfg.subscriptions.push((topic.to_owned(), expression));
        self
    }
    client_knobs!();

    /// Traces every [`Consumer::run`] handler call (Java `enableMsgTrace`,
    /// docs/protocol/TRACE.md): a `SubBefore` record per message when the call starts and a
    /// `SubAfter` (its time, success, how it ended) when it ends go to `RMQ_SYS_TRACE_TOPIC` (or
    /// [`trace_topic`](Self::trace_topic)) through an inner producer, in the background, as
    /// [`ProducerBuilder::message_trace`](crate::ProducerBuilder::message_trace) describes.
    #[must_use]
    pub fn message_trace(mut self, on: bool) -> Self {
        let topic = rmq_core::trace::TRACE_TOPIC.to_owned();
        self.cfg.trace_topic = on.then_some(topic);
        self
    }

    /// Traces to `topic` instead (Java `customizedTraceTopic`; turns the trace on).
    #[must_use]
    pub fn trace_topic(mut self, topic: impl Into<String>) -> Self {
        self.cfg.trace_topic = Some(topic.into());
        self
    }

    /// The configuration so far.
    pub fn config(&self) -> &ConsumerConfig {
        &self.cfg
    }

    /// Validates the configuration and starts the consumer (first heartbeat and rebalance are
    /// done when this returns; they are retried in the background if a broker was down).
    ///
    /// # Errors
    /// [`ConsumerConfigError`].
    pub async fn start(mut self) -> Result<Consumer, ConsumerConfigError> {
        let follow = self.discover().await?;
        let c = Consumer::start(self.checked()?).await?;
        if let Some(f) = follow {
            f.attach(&c.inner.driver, c.inner.tracer.as_ref());
        }
        Ok(c)
    }

    /// Without NameServer addresses and with a domain: the list fetched now, and what
    /// follows it once the consumer runs.
    pub(crate) async fn discover(
        &mut self,
    ) -> Result<Option<crate::discovery::Follow>, ConsumerConfigError> {
        let (addrs, domain) = (&mut self.cfg.namesrv_addr, self.cfg.namesrv_domain.as_ref());
        crate::discovery::resolve(addrs, domain)
            .await
            .map_err(ConsumerConfigError::Discovery)
    }

    fn checked(self) -> Result<ConsumerConfig, ConsumerConfigError> {
        let c = &self.cfg;
        if c.namesrv_addr.is_empty() {
            return Err(ConsumerConfigError::NoNameServer);
        }
        if c.group.is_empty() {
            return Err(ConsumerConfigError::NoGroup);
        }
        if c.subscriptions.is_empty() {
            return Err(ConsumerConfigError::NoSubscription);
        }
        if c.pull_batch_size == 0 {
            return Err(ConsumerConfigError::ZeroBatch);
        }
        if c.security.empty_access_key() {
            return Err(ConsumerConfigError::AclAccessKey);
        }
        Ok(self.cfg)
    }
}

/// A consumed message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumedMessage {
    /// Its topic: the queue's, or for a retried message (from `%RETRY%<group>`) the topic it
    /// was first consumed from.
    pub topic: String,
    /// Where it was stored.
    pub queue: MessageQueue,
    /// Its offset in the queue.
    pub queue_offset: i64,
    /// `UNIQ_KEY` (the producer's id), or the offsetMsgId when there is none.
    pub msg_id: String,
    /// The broker id (store host + commit-log offset).
    pub offset_msg_id: String,
    /// The body, decompressed.
    pub body: Bytes,
    /// The user and system properties.
    pub properties: Properties,
    /// `Message.flag`.
    pub flag: i32,
    /// Born timestamp (ms).
    pub born_timestamp: i64,
    /// Store timestamp (ms).
    pub store_timestamp: i64,
    /// Deliveries before this one (0 the first time; counted by the broker's retries).
    pub reconsume_times: i32,
    /// Commit-log offset.
    pub commit_log_offset: i64,
    key: QueueKey,
    lease: u32,
    /// When `poll` handed it out (handler time runs from here to the ack).
    polled_at: Option<std::time::Instant>,
}

impl ConsumedMessage {
    /// Its key in the core's nacks.
    pub(crate) fn nack_key(&self) -> NackKey {
        NackKey {
            queue: self.key,
            lease: self.lease,
            offset: self.queue_offset,
        }
    }
    /// The `TAGS` property.
    pub fn tags(&self) -> Option<&str> {
        self.properties.get(keys::TAGS)
    }
    /// The `KEYS` property.
    pub fn keys(&self) -> Option<&str> {
        self.properties.get(keys::KEYS)
    }
    /// A property.
    pub fn property(&self, k: &str) -> Option<&str> {
        self.properties.get(k)
    }
}

/// A consumed message's properties: the stored `key\u{1}value\u{2}` text, read on access (no
/// map is built per message; the text is a slice of the received frame, shared by clones).
///
/// ```
/// # use rmq_std::consumer::Properties;
/// let p = Properties::from_raw("TAGS\u{1}TagA\u{2}KEYS\u{1}k1\u{2}");
/// assert_eq!(p.get("TAGS"), Some("TagA"));
/// assert_eq!(p.iter().count(), 2);
/// assert_eq!(p.to_map()["KEYS"], "k1");
/// ```
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Properties(Bytes);

impl Properties {
    /// Properties from their stored text.
    pub fn from_raw(text: &str) -> Properties {
        Properties(Bytes::copy_from_slice(text.as_bytes()))
    }
    fn parsed(&self) -> rmq_core::message::PropertiesRef<'_> {
        rmq_core::message::PropertiesRef::from_bytes(&self.0).unwrap_or_default()
    }
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.parsed().get(key)
    }
    /// Every `(key, value)` in stored order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + Clone + '_ {
        self.parsed().iter()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
    /// As a map (allocates).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
    /// The stored text (UTF-8: checked when the message was received).
    pub fn as_raw(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl std::fmt::Debug for Properties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// Counters of a consumer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerStats {
    /// Pulls sent.
    pub pulls: u64,
    /// Pulls delayed by local flow control.
    pub flow_control_delays: u64,
    /// Messages handed to the buffer.
    pub delivered: u64,
    /// Messages acknowledged.
    pub acked: u64,
    /// Rebalance rounds run.
    pub rebalances: u64,
    /// NOTIFY_CONSUMER_IDS_CHANGED requests received.
    pub notifications: u64,
    /// Offsets committed with UPDATE_CONSUMER_OFFSET.
    pub commits: u64,
    /// Connections lost (EOF, reset, malformed frame) with the consumer running.
    pub connections_lost: u64,
    /// Responses that matched no request in flight (late or unknown) and were dropped.
    pub late_responses_dropped: u64,
    /// [`Consumer::run`] handler calls that returned an error, panicked or ran past
    /// `consume_timeout` (each is logged as a warning with its error).
    pub handler_failures: u64,
}

struct Inner {
    /// Handler times (poll → ack), microseconds.
    handler: Arc<AtomicHistogram>,
    /// Deliveries per second.
    rate: Arc<RateWindow>,
    cfg: ConsumerConfig,
    client_id: String,
    driver: Driver<Machine>,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<ConsumedMessage>>,
    /// Messages handed back unseen (a dropped [`MessageStream`]'s).
    requeue: mpsc::UnboundedSender<ConsumedMessage>,
    /// The handler [`Consumer::run`] runs, for CONSUME_MESSAGE_DIRECTLY.
    direct: Mutex<Option<listen::Direct>>,
    running: AtomicBool,
    /// The [`Consumer::run`] handler calls in progress, which a shutdown waits for.
    calls: listen::Calls,
    /// Where the handler calls are traced ([`ConsumerBuilder::message_trace`]).
    tracer: Option<Tracer>,
}

/// The driver's side of a consumer: messages into the channel, broadcasting offsets to their
/// file.
struct Feed {
    /// The namespace whose names the application gets without it.
    ns: Option<String>,
    tx: mpsc::UnboundedSender<ConsumedMessage>,
    rate: Arc<RateWindow>,
    store: Option<LocalStore>,
    /// CONSUME_MESSAGE_DIRECTLY requests, to the task that runs them.
    directs: mpsc::UnboundedSender<(Peer, i32, ConsumedMessage)>,
}

impl Sink<Machine> for Feed {
    fn message(&mut self, frame: &Bytes, d: Delivery<'_, '_>) {
        self.rate.add(clock::now(), 1);
        crate::metrics::delivered(1);
        let _ = self
            .tx
            .send(unwrapped(self.ns.as_deref(), to_message(frame, &d)));
    }

    fn event(&mut self, e: PullEvent, c: &mut Machine, s: &Session) {
        let name = |q: QueueKey| Some((s.topic_name(q.topic)?, s.broker_name(q.broker)?));
        match (e, self.store.as_mut()) {
            (PullEvent::LoadOffset { queue, lease }, store) => {
                let (t, b) = name(queue).unwrap_or_default();
                let offset = store.and_then(|st| st.get(t, b, queue.queue_id));
                c.set_local_offset(clock::now(), queue, lease, offset);
            }
            (PullEvent::Persist { queue, offset }, Some(store)) => {
                if let Some((t, b)) = name(queue) {
                    store.set(t, b, queue.queue_id, offset);
                }
            }
            _ => {}
        }
    }

    fn redeliver(&mut self, m: ConsumedMessage) {
        // A nacked message is kept with its wire names (Consumer::wired).
        let _ = self.tx.send(unwrapped(self.ns.as_deref(), m));
    }

    fn flush(&mut self) {
        if let Some(store) = self.store.as_mut() {
            store.save();
        }
    }

    fn direct(&mut self, peer: Peer, opaque: i32, frame: &Bytes, d: Delivery<'_, '_>) {
        let m = unwrapped(self.ns.as_deref(), to_message(frame, &d));
        let _ = self.directs.send((peer, opaque, m));
    }
}

/// A clustering-mode long-polling pull consumer; see the [module docs](self).
///
/// Clones share one consumer. Call [`Consumer::shutdown`] to stop cleanly (commit, unregister).
/// Dropping the last clone without it stops at once, like a crash: nothing is committed beyond
/// the last periodic commit and the brokers notice the closed connections.
#[derive(Clone)]
pub struct Consumer {
    inner: Arc<Inner>,
    _life: Arc<Lifeline>,
}

struct Lifeline(Driver<Machine>);

impl Drop for Lifeline {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("client_id", &self.inner.client_id)
            .field("group", &self.inner.cfg.group)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// A builder with Java's defaults.
    pub fn builder() -> ConsumerBuilder {
        ConsumerBuilder::default()
    }

    async fn start(cfg: ConsumerConfig) -> Result<Consumer, ConsumerConfigError> {
        // The core gets the wire names; the consumer keeps the application's (config(), trace).
        let wired = cfg.clone().wired();
        let client_id = client_id(local_ip(&cfg.namesrv_addr), &cfg.instance_name);
        let mut sc = session::Config::new(cfg.namesrv_addr.len(), "", &client_id);
        sc.consumer_group = Some(&wired.group);
        sc.version = cfg.version;
        sc.serialize_type = cfg.serialize_type;
        sc.language = cfg.language;
        sc.heartbeat = Some(clock::to_core(cfg.heartbeat_interval));
        sc.seed = clock::random_u32();
        let mut pull = PullConfig::new(&wired.group, &client_id);
        pull.strategy = cfg.strategy;
        pull.consume_from = cfg.consume_from;
        pull.consume_timestamp = cfg.consume_timestamp;
        pull.flow = cfg.flow;
        pull.pull_batch_size = cfg.pull_batch_size;
        pull.suspend = Some(clock::to_core(cfg.suspend));
        pull.pull_exception_delay = clock::to_core(cfg.pull_exception_delay);
        pull.rebalance_interval = clock::to_core(cfg.rebalance_interval);
        pull.persist_interval = clock::to_core(cfg.persist_interval);
        pull.version = cfg.version;
        pull.sub_version = clock::unix_millis();
        pull.seed = clock::random_u32();
        pull.max_reconsume_times = cfg.max_reconsumes();
        pull.orderly = cfg.orderly;
        pull.model = cfg.model;
        pull.lazy_start = cfg.lazy_start;
        pull.check().map_err(ConsumerConfigError::Subscription)?;
        let driver = Driver::start(
            &sc,
            Machine::build(&pull, clock::now()),
            cfg.namesrv_addr.clone(),
            cfg.security.clone(),
            (16, usize::MAX),
            Arc::new(Counters::new()),
        )
        .map_err(ConsumerConfigError::Session)?;
        let store = (cfg.model == MessageModel::Broadcasting).then(|| {
            let path = cfg.offset_store.clone();
            LocalStore::open(path.unwrap_or_else(|| default_path(&cfg.instance_name, &wired.group)))
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let requeue = tx.clone();
        let rate = Arc::new(RateWindow::default());
        let handler = Arc::new(AtomicHistogram::new());
        let names: String = cfg.namesrv_addr.iter().map(|a| format!("{a};")).collect();
        let props = [
            (prop::NAMESERVER_ADDR, names),
            (
                prop::CONSUMER_START_TIMESTAMP,
                clock::unix_millis().to_string(),
            ),
            (
                prop::THREADPOOL_CORE_SIZE,
                cfg.consume_concurrency.to_string(),
            ),
            (
                prop::CLIENT_VERSION,
                format!("rmq-{} ({})", env!("CARGO_PKG_VERSION"), cfg.version),
            ),
            ("instanceName", cfg.instance_name.clone()),
        ];
        let (directs, direct_rx) = mpsc::unbounded_channel();
        let deliver = Box::new(Feed {
            ns: cfg.namespace.clone(),
            directs,
            tx,
            rate: rate.clone(),
            store,
        });
        let running: Vec<(String, String)> = props.map(|(k, v)| (k.to_owned(), v)).into();
        let life = Arc::new(Lifeline(driver.clone()));
        let subscribed = driver.attach(deliver, |c, s, extras| {
            let now = clock::now();
            for (topic, expression) in &wired.subscriptions {
                match expression {
                    Expression::Tag(e) => c.subscribe(now, s, topic, e)?,
                    Expression::Sql92(e) => c.subscribe_sql(now, s, topic, e)?,
                };
            }
            let mut body = vec![0u8; 4096];
            while c.heartbeat_body(s, &mut body).is_none() && body.len() < (1 << 24) {
                body.resize(body.len() * 2, 0);
            }
            let n = c.heartbeat_body(s, &mut body).unwrap_or(0);
            body.truncate(n);
            extras.heartbeat = Some(body);
            extras.running = running;
            extras.handler = Some(handler.clone());
            Ok(())
        });
        subscribed.map_err(ConsumerConfigError::Subscription)?;
        let tracer = match &cfg.trace_topic {
            Some(t) => Some(Tracer::of_consumer(&cfg, t).map_err(ConsumerConfigError::Trace)?),
            None => None,
        };
        let c = Consumer {
            inner: Arc::new(Inner {
                handler,
                rate,
                cfg,
                client_id,
                driver,
                rx: tokio::sync::Mutex::new(rx),
                requeue,
                direct: Mutex::new(None),
                running: AtomicBool::new(true),
                calls: listen::Calls::default(),
                tracer,
            }),
            _life: life,
        };
        tokio::spawn(listen::serve_directs(Arc::downgrade(&c.inner), direct_rx));
        // The core's start: routes, the SQL92 checks, heartbeat, the retry topic's route, the
        // first rebalance (each step bounded), so that the queues are assigned when this
        // returns.
        let (mut limit, now) = (c.inner.cfg.start_timeout, clock::now());
        let sql = |(_, e): &(String, Expression)| matches!(e, Expression::Sql92(_));
        if c.inner.cfg.subscriptions.iter().any(sql) {
            // Their checks decide whether it starts at all (as in Java): at least the routes'
            // and the checks' steps.
            limit = limit.max(clock::to_std(CLIENT_API_TIMEOUT) * 2);
        }
        let d = &c.inner.driver;
        let (_, started) = d
            .wait(Wait::Started, limit, |cl| cl.start_consumer(now))
            .await;
        if let Some(e) = c.start_failure() {
            c.shutdown().await;
            return Err(e);
        }
        if !c.inner.cfg.lazy_start && d.client(crate::driver::Core::name_servers_unreachable) {
            return Err(ConsumerConfigError::NameServersUnreachable(d.cause(None)));
        }
        if !started {
            debug!(group = c.inner.cfg.group, "start not confirmed in time");
        }
        Ok(c)
    }

    /// Why the core's start failed, if it did: the broker refused an SQL92 subscription (its
    /// remark, as the core reported it), or could not be asked in time (the connection's
    /// error, if it had one).
    fn start_failure(&self) -> Option<ConsumerConfigError> {
        let d = &self.inner.driver;
        let (topic, code, refused) = d.start_failed()?;
        let (topic, asked) = d.with(|s| {
            let b = s.subscribe_queues(topic).first().map(|q| q.broker);
            let addr = b.and_then(|b| Some((b, s.broker_addr(b)?.to_owned())));
            let ns = self.inner.cfg.namespace.as_deref();
            (
                crate::client::app(ns, s.topic_name(topic).unwrap_or("").to_owned()),
                addr,
            )
        });
        let remark = match (code, asked) {
            (-1, Some((b, addr))) => {
                let why = d.cause(Some(Peer::Broker(b)));
                let why = why.map_or("no answer in time".to_owned(), |e| e.to_string());
                format!("could not ask {addr}: {why}")
            }
            (-1, None) => "could not ask a broker of the topic".to_owned(),
            _ => refused,
        };
        Some(ConsumerConfigError::Filter {
            topic,
            code,
            remark,
        })
    }

    /// The client id (`ip@instance`) announced in heartbeats.
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// How the consumer's routes and NameServer connections stand (a readiness check).
    pub fn health(&self) -> crate::Health {
        self.inner.driver.health()
    }

    /// The configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.inner.cfg
    }

    fn with<R>(&self, wake: bool, f: impl FnOnce(&mut Machine, &Session) -> R) -> R {
        self.inner.driver.consumer(wake, f)
    }

    /// Counters.
    pub fn stats(&self) -> ConsumerStats {
        let s = self.with(false, |c, _| c.stats());
        let late = self.inner.driver.with(|s| s.stats().late_responses);
        let c = self.inner.driver.counters().snapshot();
        ConsumerStats {
            pulls: s.pulls,
            flow_control_delays: s.flow_control_delays,
            delivered: s.delivered,
            acked: s.acked,
            rebalances: s.rebalances,
            notifications: s.notifications,
            commits: s.commits,
            connections_lost: c.connections_lost,
            late_responses_dropped: u64::from(late),
            handler_failures: self.inner.calls.failures(),
        }
    }

    /// The queues currently assigned to this consumer, in Java's queue order.
    pub fn assigned_queues(&self) -> Vec<MessageQueue> {
        self.metrics_of(|q| q.queue)
    }

    /// `f` of every owned queue's metrics, in Java's queue order.
    fn metrics_of<T>(&self, f: impl Fn(QueueMetrics) -> T) -> Vec<T> {
        let mut v: Vec<QueueMetrics> = self.with(false, |c, s| {
            c.owned()
                .filter_map(|o| {
                    Some(QueueMetrics {
                        queue: MessageQueue {
                            topic: s.topic_name(o.queue.topic)?.to_owned(),
                            broker_name: s.broker_name(o.queue.broker)?.to_owned(),
                            queue_id: o.queue.queue_id,
                        },
                        broker_max_offset: o.max_offset,
                        committable: o.tracker.committable(),
                        committed: o.tracker.committed(),
                        in_flight: o.tracker.cached_count(),
                        lag: o.lag(),
                    })
                })
                .collect()
        });
        v.sort_by(|a, b| core_queue(&a.queue).cmp(&core_queue(&b.queue)));
        let ns = self.inner.cfg.namespace.as_deref();
        v.into_iter()
            .map(|mut m| {
                m.queue.topic = crate::client::app(ns, std::mem::take(&mut m.queue.topic));
                f(m)
            })
            .collect()
    }

    /// Messages handed out and not yet acknowledged, over all queues.
    pub fn in_flight(&self) -> usize {
        self.metrics_of(|m| m.in_flight).into_iter().sum()
    }

    /// The committable offset of `queue` (lowest not yet acknowledged), if it is assigned.
    pub fn committable_offset(&self, queue: &MessageQueue) -> Option<i64> {
        self.queue_metrics(queue).map(|m| m.committable)
    }

    /// The last offset of `queue` the broker confirmed as committed (or the start offset it
    /// reported), if the queue is assigned.
    pub fn committed_offset(&self, queue: &MessageQueue) -> Option<i64> {
        self.queue_metrics(queue)?.committed
    }

    fn queue_metrics(&self, queue: &MessageQueue) -> Option<QueueMetrics> {
        self.metrics_of(|m| m)
            .into_iter()
            .find(|m| m.queue == *queue)
    }

    /// Moves an assigned queue to `to` (an offset, its beginning or end, or the first message
    /// stored at or after a timestamp); messages of the old position still buffered are not
    /// handed out, and the new position is committed. `false` when the queue is not assigned.
    pub fn seek(&self, queue: &MessageQueue, to: Position) -> bool {
        self.on_queue(queue, |c, k| c.seek(clock::now(), k, to))
    }

    /// Stops pulling an assigned queue until [`Consumer::resume`]; `false` when not assigned.
    pub fn pause(&self, queue: &MessageQueue) -> bool {
        self.on_queue(queue, Machine::pause)
    }

    /// Pulls a paused queue again; `false` when not assigned.
    pub fn resume(&self, queue: &MessageQueue) -> bool {
        self.on_queue(queue, Machine::resume)
    }

    /// Stops pulling every queue, the ones assigned later too (Java's `suspend()`): what was
    /// pulled is still handed out, acknowledged and committed, and the group still rebalances.
    /// [`Consumer::unsuspend`] pulls again; a queue [`pause`](Consumer::pause)d stays paused.
    pub fn suspend(&self) {
        self.with(true, |c, _| c.set_suspended(true));
    }

    /// Pulls again after [`Consumer::suspend`] (Java's `resume()`).
    pub fn unsuspend(&self) {
        self.with(true, |c, _| c.set_suspended(false));
    }

    fn on_queue(&self, q: &MessageQueue, f: impl FnOnce(&mut Machine, QueueKey) -> bool) -> bool {
        let ns = self.inner.cfg.namespace.as_deref();
        let g = |c: &mut Machine, s: &Session| key_of(c, s, ns, q).is_some_and(|k| f(c, k));
        self.with(true, g)
    }

    /// Consumes exactly `queues` from now on, without rebalancing (Java lite pull
    /// `assign`): other queues are committed and dropped; rebalance rounds and the brokers'
    /// notifications no longer change the assignment. Queues of topics not subscribed, or not
    /// in their route, are ignored. Returns how many queues are assigned, once they know
    /// their start offsets.
    pub async fn assign(&self, queues: &[MessageQueue]) -> usize {
        let ns = self.inner.cfg.namespace.as_deref();
        let assign = |cl: &mut crate::driver::Core<Machine>| {
            let (c, s) = cl.consumer_mut();
            let keys: Vec<QueueKey> = queues.iter().filter_map(|q| key_of(c, s, ns, q)).collect();
            c.assign_queues(&keys)
        };
        let limit = clock::to_std(CLIENT_API_TIMEOUT);
        self.inner
            .driver
            .wait(Wait::Rebalanced, limit, assign)
            .await
            .0
    }

    /// Waits up to `timeout` for messages and returns between 1 and `max` of them, or none at
    /// the timeout. Messages of queues that were revoked meanwhile are skipped.
    pub async fn poll(&self, max: usize, timeout: StdDuration) -> Vec<ConsumedMessage> {
        let deadline = crate::clock::after(timeout);
        let mut rx = self.inner.rx.lock().await;
        let mut out = Vec::new();
        while out.is_empty() {
            let first = match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(m)) => m,
                Ok(None) | Err(_) => break,
            };
            let mut batch = vec![first];
            while batch.len() < max.max(1) {
                match rx.try_recv() {
                    Ok(m) => batch.push(m),
                    Err(_) => break,
                }
            }
            let now = std::time::Instant::now();
            let current = |c: &mut Machine, _: &Session| {
                batch
                    .into_iter()
                    .filter(|m| c.is_current(m.key, m.lease))
                    .map(|mut m| {
                        m.polled_at = Some(now);
                        m
                    })
                    .collect::<Vec<_>>()
            };
            out.extend(self.with(false, current));
        }
        out
    }

    /// Acknowledges one message: its offset becomes committable once every lower offset of its
    /// queue is acknowledged too. `false` if it was not in flight (already acknowledged, or its
    /// queue moved to another consumer meanwhile).
    pub fn ack(&self, m: &ConsumedMessage) -> bool {
        let ok = self.with(false, |c, _| {
            c.ack(clock::now(), m.key, m.lease, m.queue_offset)
        });
        if let (true, Some(at)) = (ok, m.polled_at) {
            let us = u64::try_from(at.elapsed().as_micros()).unwrap_or(u64::MAX);
            self.inner.handler.record(us);
            crate::metrics::handled(us);
        }
        ok
    }

    /// The monitoring numbers: counters, consume TPS, handler time, lag per owned queue (the
    /// broker's maximum offset from each pull answer minus the committable offset). With the
    /// `metrics` feature this also sets the `rmq_consume_lag` gauges.
    pub fn metrics(&self) -> ConsumerMetrics {
        let queues = self.metrics_of(|q| q);
        queues.iter().for_each(crate::metrics::lag);
        ConsumerMetrics {
            stats: self.stats(),
            delivered_per_sec: self.inner.rate.per_sec(clock::now()),
            handler_time_us: self.inner.handler.summary(),
            lag: queues.iter().filter_map(|q| q.lag).sum(),
            queues,
        }
    }

    /// Acknowledges a batch; returns how many were in flight.
    pub fn ack_all(&self, msgs: &[ConsumedMessage]) -> usize {
        msgs.iter().filter(|m| self.ack(m)).count()
    }

    /// Triggers a rebalance now (the same as a broker's NOTIFY_CONSUMER_IDS_CHANGED).
    pub fn request_rebalance(&self) {
        self.with(true, |c, _| c.rebalance_now(clock::now()));
    }

    /// One rebalance round over every subscribed topic; returns when it is applied and the
    /// new queues know their start offsets (or after a few seconds).
    pub async fn rebalance(&self) {
        let now = clock::now();
        let limit = clock::to_std(CLIENT_API_TIMEOUT) * 2;
        let round = |cl: &mut crate::driver::Core<Machine>| cl.rebalance_now(now);
        self.inner.driver.wait(Wait::Rebalanced, limit, round).await;
    }

    /// Runs `f` on the consumer and waits (up to the offset timeout) until every commit it
    /// asked for is answered.
    async fn committed(&self, f: impl FnOnce(&mut Machine)) {
        let limit = clock::to_std(OFFSET_RPC_TIMEOUT);
        let commit = |cl: &mut crate::driver::Core<Machine>| f(cl.consumer_mut().0);
        self.inner.driver.wait(Wait::Committed, limit, commit).await;
    }

    /// Commits the committable offset of every owned queue whose offset moved, and waits for
    /// the answers.
    pub async fn commit_all(&self) {
        self.committed(Machine::commit_now).await;
    }

    /// Stops pulling, waits up to 3 s for the [`Consumer::run`] handler calls in progress,
    /// commits every owned queue's offset, unregisters from the brokers and closes the
    /// connections. Returns how many handler calls were still running (their messages are
    /// delivered again later, here or to another consumer).
    pub async fn shutdown(&self) -> usize {
        self.shutdown_timeout(StdDuration::from_secs(3)).await
    }

    /// [`Consumer::shutdown`] with an explicit wait for the handler calls in progress.
    pub async fn shutdown_timeout(&self, drain: StdDuration) -> usize {
        if !self.inner.running.swap(false, Ordering::AcqRel) {
            return 0;
        }
        let abandoned = self.inner.calls.drained(drain).await;
        if abandoned > 0 {
            warn!(
                abandoned,
                "shutdown: handler calls still running at the drain deadline"
            );
        }
        self.committed(Machine::stop).await;
        if let Some(t) = &self.inner.tracer {
            t.shutdown().await;
        }
        self.inner
            .driver
            .shutdown(clock::to_std(CLIENT_API_TIMEOUT))
            .await;
        abandoned
    }
}

/// The key of queue `q` of a subscribed topic (named as the application names it, in
/// namespace `ns`).
fn key_of(c: &Machine, s: &Session, ns: Option<&str>, q: &MessageQueue) -> Option<QueueKey> {
    let topic = crate::client::wire(ns, &q.topic);
    c.queue_key(s, &topic, &q.broker_name, q.queue_id)
}

/// `m` with its topics as the application names them in namespace `ns`.
pub(crate) fn unwrapped(ns: Option<&str>, mut m: ConsumedMessage) -> ConsumedMessage {
    unwrap_names(ns, &mut m);
    m
}

/// [`unwrapped`] in place.
pub(crate) fn unwrap_names(ns: Option<&str>, m: &mut ConsumedMessage) {
    if ns.is_some() {
        m.topic = crate::client::app(ns, std::mem::take(&mut m.topic));
        m.queue.topic = crate::client::app(ns, std::mem::take(&mut m.queue.topic));
    }
}

impl Consumer {
    /// `m` with its topics as the wire names them ([`ConsumerBuilder::namespace`]): what a
    /// send-back or resend names.
    pub(crate) fn wired<'m>(
        &self,
        m: &'m ConsumedMessage,
    ) -> std::borrow::Cow<'m, ConsumedMessage> {
        let Some(ns) = self.inner.cfg.namespace.as_deref() else {
            return std::borrow::Cow::Borrowed(m);
        };
        let mut w = m.clone();
        w.topic = crate::client::wire(Some(ns), &m.topic).into_owned();
        w.queue.topic = crate::client::wire(Some(ns), &m.queue.topic).into_owned();
        std::borrow::Cow::Owned(w)
    }
}

impl ConsumerConfig {
    /// The configuration with the group and the subscribed topics as the wire names them
    /// ([`ConsumerBuilder::namespace`]).
    pub(crate) fn wired(mut self) -> Self {
        let ns = self.namespace.clone();
        let ns = ns.as_deref();
        self.group = crate::client::wire(ns, &self.group).into_owned();
        for (topic, _) in &mut self.subscriptions {
            *topic = crate::client::wire(ns, topic).into_owned();
        }
        self
    }
}

fn core_queue(q: &MessageQueue) -> CoreQueue<'_> {
    CoreQueue::new(&q.topic, &q.broker_name, q.queue_id)
}

/// `part` of `frame` as a [`Bytes`] sharing the frame's buffer (a copy if it is not part of it).
fn share(frame: &Bytes, part: &[u8]) -> Bytes {
    let (whole, p) = (frame.as_ptr_range(), part.as_ptr_range());
    if whole.start <= p.start && p.end <= whole.end {
        frame.slice_ref(part)
    } else {
        Bytes::copy_from_slice(part)
    }
}

/// The message `d` of pull answer `frame`: body and properties are slices of the frame.
fn to_message(frame: &Bytes, d: &Delivery<'_, '_>) -> ConsumedMessage {
    let queue = MessageQueue {
        topic: d.queue_topic.to_owned(),
        broker_name: d.broker_name.to_owned(),
        queue_id: d.queue.queue_id,
    };
    from_stored(frame, d.message, d.topic, queue, (d.queue, d.lease))
}

impl ConsumedMessage {
    /// The messages of a stored-message body read outside a consumer (the answers to
    /// VIEW_MESSAGE_BY_ID and QUERY_MESSAGE: `rmq-admin`'s queries), stored on `broker_name`;
    /// acknowledging them does nothing. A record that does not decode ends the list.
    pub fn decode_stored(body: &Bytes, broker_name: &str) -> Vec<ConsumedMessage> {
        let records = rmq_core::message::decode_stored(body).map_while(Result::ok);
        records
            .map(|m| {
                let queue = MessageQueue {
                    topic: m.topic.to_owned(),
                    broker_name: broker_name.to_owned(),
                    queue_id: m.queue_id,
                };
                outside(body, &m, m.topic, queue)
            })
            .collect()
    }
}

/// The reply a broker pushed in `frame` (see [`rmq_core::reply`]): not in a queue (offset -1),
/// its body decompressed.
pub(crate) fn pushed(frame: &Bytes, r: &rmq_core::reply::PushedReply<'_>) -> ConsumedMessage {
    let body = body_of(frame, rmq_core::message::SysFlag(r.sys_flag), r.body);
    let props = r
        .properties
        .and_then(crate::conn::unescaped)
        .map(Bytes::from);
    let properties = Properties(props.unwrap_or_default());
    let topic = r.topic.unwrap_or_default().to_owned();
    ConsumedMessage {
        queue: MessageQueue {
            topic: topic.clone(),
            broker_name: String::new(),
            queue_id: r.queue_id,
        },
        topic,
        queue_offset: -1,
        msg_id: properties
            .get(keys::UNIQ_KEY)
            .unwrap_or_default()
            .to_owned(),
        offset_msg_id: String::new(),
        body,
        properties,
        flag: r.flag,
        born_timestamp: r.born_timestamp,
        store_timestamp: r.store_timestamp,
        reconsume_times: r.reconsume_times,
        commit_log_offset: -1,
        key: NO_QUEUE,
        lease: 0,
        polled_at: None,
    }
}

/// The queue of a message read outside a consumer: acknowledging it does nothing.
const NO_QUEUE: QueueKey = QueueKey {
    topic: rmq_core::session::TopicId(u16::MAX),
    broker: rmq_core::session::BrokerId(u16::MAX),
    queue_id: -1,
};

/// Stored message `m` of `frame` read outside a consumer (a query's, a transaction
/// check-back's): acknowledging it does nothing.
pub(crate) fn outside(
    frame: &Bytes,
    m: &rmq_core::message::StoredMessage<'_>,
    topic: &str,
    queue: MessageQueue,
) -> ConsumedMessage {
    from_stored(frame, m, topic, queue, (NO_QUEUE, 0))
}

/// `body` of `frame`, inflated when `sys` says it is compressed (as stored when it does not
/// inflate, or its type is not in this build).
fn body_of(frame: &Bytes, sys: rmq_core::message::SysFlag, body: &[u8]) -> Bytes {
    if !sys.is_compressed() {
        return share(frame, body);
    }
    let ty = sys.compression_type().ok();
    match ty.and_then(|ty| crate::zlib::decompress_body(ty, body)) {
        Some(v) => Bytes::from(v),
        None => {
            warn!(
                sys_flag = sys.bits(),
                "compressed body does not decode: delivered as stored"
            );
            share(frame, body)
        }
    }
}

/// Stored message `m` of `frame` as consumed from `queue`, first consumed from `topic`.
fn from_stored(
    frame: &Bytes,
    m: &rmq_core::message::StoredMessage<'_>,
    topic: &str,
    queue: MessageQueue,
    (key, lease): (QueueKey, u32),
) -> ConsumedMessage {
    let body = body_of(frame, m.sys_flag, m.body);
    let properties = match std::str::from_utf8(m.raw_properties) {
        Ok(_) => Properties(share(frame, m.raw_properties)),
        Err(_) => Properties::default(),
    };
    let msg_id = match m.message_id() {
        MessageId::Uniq(s) => s.to_owned(),
        MessageId::Offset(o) => o.to_string(),
    };
    ConsumedMessage {
        topic: topic.to_owned(),
        queue,
        queue_offset: m.queue_offset,
        msg_id,
        offset_msg_id: m.offset_msg_id().to_string(),
        body,
        properties,
        flag: m.flag,
        born_timestamp: m.born_timestamp,
        store_timestamp: m.store_timestamp,
        reconsume_times: m.reconsume_times,
        commit_log_offset: m.physical_offset,
        key,
        lease,
        polled_at: None,
    }
}

mod listen;
mod pop;
mod store;
mod stream;
pub use listen::{ConsumeResult, HandlerResult, Nacked};
pub use pop::{PopConsumer, PoppedMessage};
use store::{LocalStore, default_path};
pub use stream::MessageStream;

#[cfg(test)]
mod tests;
