//! The long-polling pull [`Consumer`] (clustering mode): subscriptions, heartbeats, rebalance,
//! one long-polling pull loop per assigned queue, a [`Consumer::poll`] API, per-message acks and
//! offset commits.
//!
//! Every protocol decision is made in [`rmq_core::consumer`]: the pull header and the mapping of
//! its answer, tag filtering, the queue allocation (Java's `AllocateMessageQueueAveragely` /
//! `…ByCircle` on Java-sorted inputs), flow control and the per-queue offset tracker (the
//! committable offset is the lowest offset handed out and not yet acknowledged). This module
//! only moves bytes and owns the timers:
//!
//! - **Start**: fetch the routes of the subscribed topics, send a heartbeat (with the consumer
//!   data) to every master and wait for the answers, rebalance at once.
//! - **Rebalance** every `rebalance_interval` (20 s) and whenever a broker sends
//!   NOTIFY_CONSUMER_IDS_CHANGED (a server-initiated request on our connection): route →
//!   subscribe set, GET_CONSUMER_LIST_BY_GROUP → consumer ids, allocate, then stop the pulls of
//!   revoked queues (committing their offset first) and start the new ones at the offset
//!   QUERY_CONSUMER_OFFSET returns, or at `consume_from` when the group has none.
//! - **Pull loop** per queue: flow control (Java's thresholds: 1000 messages, 100 MiB, span
//!   2000 → retry in 50 ms), then PULL_MESSAGE with SUSPEND (the broker holds it up to 15 s,
//!   the RPC times out after 30 s), decode, zlib-decompress, re-filter tags, track, deliver.
//! - **Commit** every `persist_interval` (5 s) and on [`Consumer::shutdown`]:
//!   UPDATE_CONSUMER_OFFSET with the committable offset of every owned queue whose offset moved.
//!   The committed offset also travels in each pull (COMMIT_OFFSET flag), as in Java.
//!
//! The session with the NameServers and brokers is the core client session
//! ([`rmq_core::session`]), driven as the producer's is: routes and their subscribe queues
//! with NameServer failover, the broker table, heartbeats (with this consumer's subscriptions)
//! on the session's schedule, unregister, ACL signing; pulls and offset requests are session
//! calls (correlated and timed out by the session). So the consumer has the producer's
//! transport options: [`ConsumerBuilder::tls`] (rustls, brokers only by default) and
//! [`ConsumerBuilder::acl`] (every request signed, ACL 1.0). A broker that refuses
//! the credentials refuses the heartbeat, the consumer list and the pulls: the consumer is
//! assigned nothing and receives nothing (logged at debug level). Connections lost and late
//! responses are counted in [`ConsumerStats`].
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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use bytes::Bytes;
use rmq_core::consumer::{
    AllocateStrategy, BROKER_SUSPEND_MAX_TIME, ConsumeFromWhere, ConsumeType, ConsumerData,
    FlowDecision, FlowLimits, MessageModel, MessageQueue as CoreQueue, OFFSET_RPC_TIMEOUT,
    PERSIST_OFFSET_INTERVAL, PULL_BATCH_SIZE, PULL_EXCEPTION_DELAY_V5, PullRequest, PullStatus,
    QueueTracker, REBALANCE_INTERVAL, Subscription, TagExpression, allocate, parse_consumer_list,
    parse_pull_response, sort_consumer_ids, sort_queues, write_heartbeat,
};
use rmq_core::message::stored::CrcCheck;
use rmq_core::message::stored::MessageId;
use rmq_core::message::{CompressionType, StoredMessage, StoredMessages, keys};
use rmq_core::producer::{CLIENT_API_TIMEOUT, HEARTBEAT_BROKER_INTERVAL};
use rmq_core::wire::headers::{
    GetConsumerListByGroupRequestHeader, GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader,
    QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
};
use rmq_core::wire::{
    CommandHeader, Frame, LanguageCode, RequestCode, ResponseCode, Scratch, SerializeType, version,
};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::client::{Client, ClientSetup};
use crate::clock;
use crate::config::{SecurityConfig, security_knobs};
use crate::conn::ServerRequest;
use crate::message::MessageQueue;
use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering, lock};

/// In-flight offsets one queue can track (must exceed the count threshold plus one batch).
pub const TRACK_CAPACITY: usize = 2048;
/// Queues per topic route.
const MAX_QUEUES: usize = 1024;
/// Consumers per group.
const MAX_CONSUMERS: usize = 1024;

/// The settled configuration of a [`Consumer`].
#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    /// NameServer addresses.
    pub namesrv_addr: Vec<String>,
    /// Consumer group.
    pub group: String,
    /// `(topic, tag expression)` pairs.
    pub subscriptions: Vec<(String, String)>,
    /// Instance name (the client id is `ip@instance`); unique per consumer by default.
    pub instance_name: String,
    /// Where a queue without a committed offset starts.
    pub consume_from: ConsumeFromWhere,
    /// Queue allocation strategy.
    pub strategy: AllocateStrategy,
    /// `pullBatchSize`.
    pub pull_batch_size: u32,
    /// Flow-control thresholds per queue.
    pub flow: FlowLimits,
    /// Broker long-poll hold time.
    pub suspend: StdDuration,
    /// Rebalance period.
    pub rebalance_interval: StdDuration,
    /// Offset commit period.
    pub persist_interval: StdDuration,
    /// Heartbeat period.
    pub heartbeat_interval: StdDuration,
    /// Delay after a failed pull.
    pub pull_exception_delay: StdDuration,
    /// Header format.
    pub serialize_type: SerializeType,
    /// Remoting `version` sent.
    pub version: i32,
    /// Language sent.
    pub language: LanguageCode,
    /// ACL credentials and TLS (see [`ConsumerBuilder::acl`] and [`ConsumerBuilder::tls`]).
    pub security: SecurityConfig,
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
        })
    }
}

impl std::error::Error for ConsumerConfigError {}

/// Builds a [`Consumer`]; defaults are Java's push-consumer defaults.
#[derive(Clone, Debug)]
pub struct ConsumerBuilder {
    cfg: ConsumerConfig,
}

impl Default for ConsumerBuilder {
    fn default() -> Self {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ConsumerBuilder {
            cfg: ConsumerConfig {
                namesrv_addr: Vec::new(),
                group: String::new(),
                subscriptions: Vec::new(),
                instance_name: format!("{}#{}#{seq}", std::process::id(), clock::unix_millis()),
                consume_from: ConsumeFromWhere::LastOffset,
                strategy: AllocateStrategy::Averagely,
                pull_batch_size: PULL_BATCH_SIZE,
                flow: FlowLimits::default(),
                suspend: clock::to_std(BROKER_SUSPEND_MAX_TIME),
                rebalance_interval: clock::to_std(REBALANCE_INTERVAL),
                persist_interval: clock::to_std(PERSIST_OFFSET_INTERVAL),
                heartbeat_interval: clock::to_std(HEARTBEAT_BROKER_INTERVAL),
                pull_exception_delay: clock::to_std(PULL_EXCEPTION_DELAY_V5),
                serialize_type: SerializeType::JSON,
                version: version::V5_3_3,
                language: LanguageCode::RUST,
                security: SecurityConfig::default(),
            },
        }
    }
}

impl ConsumerBuilder {
    /// NameServer addresses; `a:9876;b:9876` is split on `;`.
    #[must_use]
    pub fn namesrv_addr(mut self, addrs: &str) -> Self {
        self.cfg.namesrv_addr.extend(
            addrs
                .split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        );
        self
    }
    /// Consumer group.
    #[must_use]
    pub fn group(mut self, group: &str) -> Self {
        self.cfg.group = group.to_owned();
        self
    }
    /// Subscribes to `topic` with a TAG expression (`*`, `a || b`); a second call for the same
    /// topic replaces the expression.
    #[must_use]
    pub fn subscribe(mut self, topic: &str, expression: &str) -> Self {
        self.cfg.subscriptions.retain(|(t, _)| t != topic);
        self.cfg
            .subscriptions
            .push((topic.to_owned(), expression.to_owned()));
        self
    }
    /// Instance name (must be unique per consumer of a group within one host).
    #[must_use]
    pub fn instance_name(mut self, name: &str) -> Self {
        self.cfg.instance_name = name.to_owned();
        self
    }
    /// `consumeFromWhere` (default `CONSUME_FROM_LAST_OFFSET`).
    #[must_use]
    pub fn consume_from(mut self, w: ConsumeFromWhere) -> Self {
        self.cfg.consume_from = w;
        self
    }
    /// Allocation strategy (default averagely).
    #[must_use]
    pub fn allocate_strategy(mut self, s: AllocateStrategy) -> Self {
        self.cfg.strategy = s;
        self
    }
    /// `pullBatchSize` (default 32).
    #[must_use]
    pub fn pull_batch_size(mut self, n: u32) -> Self {
        self.cfg.pull_batch_size = n;
        self
    }
    /// Flow-control thresholds (default Java's).
    #[must_use]
    pub fn flow_limits(mut self, l: FlowLimits) -> Self {
        self.cfg.flow = l;
        self
    }
    /// Long-poll hold time (default 15 s).
    #[must_use]
    pub fn suspend(mut self, t: StdDuration) -> Self {
        self.cfg.suspend = t;
        self
    }
    /// Rebalance period (default 20 s).
    #[must_use]
    pub fn rebalance_interval(mut self, t: StdDuration) -> Self {
        self.cfg.rebalance_interval = t;
        self
    }
    /// Offset commit period (default 5 s).
    #[must_use]
    pub fn persist_interval(mut self, t: StdDuration) -> Self {
        self.cfg.persist_interval = t;
        self
    }
    /// Heartbeat period (default 30 s).
    #[must_use]
    pub fn heartbeat_interval(mut self, t: StdDuration) -> Self {
        self.cfg.heartbeat_interval = t;
        self
    }
    /// Remoting `version` sent (default 5.3.3).
    #[must_use]
    pub fn version(mut self, v: i32) -> Self {
        self.cfg.version = v;
        self
    }
    /// Header format (default JSON).
    #[must_use]
    pub fn serialize_type(mut self, t: SerializeType) -> Self {
        self.cfg.serialize_type = t;
        self
    }
    security_knobs!();

    /// The configuration so far.
    pub fn config(&self) -> &ConsumerConfig {
        &self.cfg
    }

    /// Validates the configuration and starts the consumer (first heartbeat and rebalance are
    /// done when this returns; they are retried in the background if a broker was down).
    ///
    /// # Errors
    /// [`ConsumerConfigError`].
    pub async fn start(self) -> Result<Consumer, ConsumerConfigError> {
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
        Consumer::start(self.cfg)
            .await
            .map_err(ConsumerConfigError::Session)
    }
}

/// A consumed message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumedMessage {
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
    pub properties: BTreeMap<String, String>,
    /// `Message.flag`.
    pub flag: i32,
    /// Born timestamp (ms).
    pub born_timestamp: i64,
    /// Store timestamp (ms).
    pub store_timestamp: i64,
    /// Reconsume times.
    pub reconsume_times: i32,
    /// Commit-log offset.
    pub commit_log_offset: i64,
    lease: u64,
}

impl ConsumedMessage {
    /// The `TAGS` property.
    pub fn tags(&self) -> Option<&str> {
        self.properties.get(keys::TAGS).map(String::as_str)
    }
    /// The `KEYS` property.
    pub fn keys(&self) -> Option<&str> {
        self.properties.get(keys::KEYS).map(String::as_str)
    }
    /// A property.
    pub fn property(&self, k: &str) -> Option<&str> {
        self.properties.get(k).map(String::as_str)
    }
}

/// Counters of a consumer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
}

#[derive(Default)]
struct Stats {
    pulls: AtomicU64,
    flow_control_delays: AtomicU64,
    delivered: AtomicU64,
    acked: AtomicU64,
    rebalances: AtomicU64,
    notifications: AtomicU64,
    commits: AtomicU64,
}

fn bump(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

struct QueueEntry {
    tracker: Box<QueueTracker<TRACK_CAPACITY>>,
    lease: u64,
    task: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct State {
    queues: HashMap<MessageQueue, QueueEntry>,
    /// Topic → subscribe set (route order).
    routes: HashMap<String, Vec<MessageQueue>>,
    next_lease: u64,
}

struct Inner {
    cfg: ConsumerConfig,
    client: Client,
    state: Mutex<State>,
    tx: mpsc::UnboundedSender<ConsumedMessage>,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<ConsumedMessage>>,
    rebalance_now: Arc<Notify>,
    rebalance_lock: tokio::sync::Mutex<()>,
    running: AtomicBool,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    sub_version: i64,
    stats: Stats,
}

/// A clustering-mode long-polling pull consumer; see the [module docs](self).
///
/// Clones share one consumer. Call [`Consumer::shutdown`] to stop cleanly (commit, unregister).
/// Dropping the last clone without it stops every task at once, like a crash: nothing is
/// committed beyond the last periodic commit and the brokers notice the closed connections.
#[derive(Clone)]
pub struct Consumer {
    inner: Arc<Inner>,
    /// `Some` on the handles given to the user; internal handles do not keep it alive.
    _life: Option<Arc<Lifeline>>,
}

struct Lifeline {
    inner: std::sync::Weak<Inner>,
}

impl Drop for Lifeline {
    fn drop(&mut self) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        inner.running.store(false, Ordering::Release);
        for t in lock(&inner.tasks).drain(..) {
            t.abort();
        }
        for e in lock(&inner.state).queues.values_mut() {
            if let Some(t) = e.task.take() {
                t.abort();
            }
        }
        inner.client.driver.close();
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("client_id", &self.inner.client.client_id)
            .field("group", &self.inner.cfg.group)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// A builder with Java's defaults.
    pub fn builder() -> ConsumerBuilder {
        ConsumerBuilder::default()
    }

    async fn start(cfg: ConsumerConfig) -> Result<Consumer, rmq_core::session::ConfigError> {
        let (req_tx, req_rx) = mpsc::unbounded_channel();
        let (tx, rx) = mpsc::unbounded_channel();
        let client = Client::new(&ClientSetup {
            namesrv_addr: &cfg.namesrv_addr,
            instance_name: &cfg.instance_name,
            group: &cfg.group,
            version: cfg.version,
            serialize_type: cfg.serialize_type,
            language: cfg.language,
            heartbeat: cfg.heartbeat_interval,
            security: &cfg.security,
            server_requests: req_tx,
        })?;
        let inner = Arc::new(Inner {
            client,
            state: Mutex::new(State::default()),
            tx,
            rx: tokio::sync::Mutex::new(rx),
            rebalance_now: Arc::new(Notify::new()),
            rebalance_lock: tokio::sync::Mutex::new(()),
            running: AtomicBool::new(true),
            tasks: Mutex::new(Vec::new()),
            sub_version: clock::unix_millis(),
            stats: Stats::default(),
            cfg,
        });
        let life = Some(Arc::new(Lifeline {
            inner: Arc::downgrade(&inner),
        }));
        let c = Consumer { inner, _life: life };
        c.refresh_routes().await;
        c.heartbeat_all().await;
        c.rebalance().await;
        let tasks = [
            c.spawn_periodic(c.inner.cfg.rebalance_interval, true, |c| async move {
                c.rebalance().await;
            }),
            c.spawn_periodic(c.inner.cfg.persist_interval, false, |c| async move {
                c.commit_all().await;
            }),
            c.spawn_server_requests(req_rx),
        ];
        lock(&c.inner.tasks).extend(tasks);
        Ok(c)
    }

    /// Runs `f` every `every` (and, with `wake_on_notify`, whenever a rebalance is requested).
    fn spawn_periodic<F, Fut>(
        &self,
        every: StdDuration,
        wake_on_notify: bool,
        f: F,
    ) -> JoinHandle<()>
    where
        F: Fn(Consumer) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let weak = Arc::downgrade(&self.inner);
        let notify = wake_on_notify.then(|| self.inner.rebalance_now.clone());
        tokio::spawn(async move {
            loop {
                match &notify {
                    Some(n) => {
                        tokio::select! {
                            () = tokio::time::sleep(every) => {}
                            () = n.notified() => {}
                        }
                    }
                    None => tokio::time::sleep(every).await,
                }
                let Some(inner) = weak.upgrade() else { break };
                if !inner.running.load(Ordering::Acquire) {
                    break;
                }
                f(Consumer { inner, _life: None }).await;
            }
        })
    }

    fn spawn_server_requests(
        &self,
        mut rx: mpsc::UnboundedReceiver<ServerRequest>,
    ) -> JoinHandle<()> {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            while let Some((addr, frame)) = rx.recv().await {
                let Some(inner) = weak.upgrade() else { break };
                let Ok(h) = CommandHeader::parse(&Frame::new_unchecked(&frame[..])) else {
                    continue;
                };
                if h.request_code() == RequestCode::NOTIFY_CONSUMER_IDS_CHANGED {
                    debug!(addr, group = ?h.get("consumerGroup").and_then(|g| g.as_str()), "consumer ids changed");
                    bump(&inner.stats.notifications, 1);
                    inner.rebalance_now.notify_one();
                } else {
                    debug!(addr, code = h.code(), "server request ignored");
                }
            }
        })
    }

    /// The client id (`ip@instance`) announced in heartbeats.
    pub fn client_id(&self) -> &str {
        &self.inner.client.client_id
    }

    /// The configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.inner.cfg
    }

    /// Counters.
    pub fn stats(&self) -> ConsumerStats {
        let s = &self.inner.stats;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = self.inner.client.counters();
        ConsumerStats {
            pulls: g(&s.pulls),
            flow_control_delays: g(&s.flow_control_delays),
            delivered: g(&s.delivered),
            acked: g(&s.acked),
            rebalances: g(&s.rebalances),
            notifications: g(&s.notifications),
            commits: g(&s.commits),
            connections_lost: c.connections_lost,
            late_responses_dropped: c.late_responses_dropped,
        }
    }

    /// The queues currently assigned to this consumer, in Java's queue order.
    pub fn assigned_queues(&self) -> Vec<MessageQueue> {
        let st = lock(&self.inner.state);
        let mut v: Vec<MessageQueue> = st.queues.keys().cloned().collect();
        v.sort_by(|a, b| core_queue(a).cmp(&core_queue(b)));
        v
    }

    /// Messages handed out and not yet acknowledged, over all queues.
    pub fn in_flight(&self) -> usize {
        lock(&self.inner.state)
            .queues
            .values()
            .map(|e| e.tracker.cached_count())
            .sum()
    }

    /// The committable offset of `queue` (lowest not yet acknowledged), if it is assigned.
    pub fn committable_offset(&self, queue: &MessageQueue) -> Option<i64> {
        lock(&self.inner.state)
            .queues
            .get(queue)
            .map(|e| e.tracker.committable())
    }

    /// Waits up to `timeout` for messages and returns between 1 and `max` of them, or none at
    /// the timeout. Messages of queues that were revoked meanwhile are skipped.
    pub async fn poll(&self, max: usize, timeout: StdDuration) -> Vec<ConsumedMessage> {
        let deadline = tokio::time::Instant::now() + timeout;
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
            let st = lock(&self.inner.state);
            out.extend(
                batch
                    .into_iter()
                    .filter(|m| st.queues.get(&m.queue).is_some_and(|e| e.lease == m.lease)),
            );
        }
        out
    }

    /// Acknowledges one message: its offset becomes committable once every lower offset of its
    /// queue is acknowledged too. `false` if it was not in flight (already acknowledged, or its
    /// queue moved to another consumer meanwhile).
    pub fn ack(&self, m: &ConsumedMessage) -> bool {
        let mut st = lock(&self.inner.state);
        let ok = st
            .queues
            .get_mut(&m.queue)
            .filter(|e| e.lease == m.lease)
            .is_some_and(|e| e.tracker.ack(m.queue_offset));
        if ok {
            bump(&self.inner.stats.acked, 1);
        }
        ok
    }

    /// Acknowledges a batch; returns how many were in flight.
    pub fn ack_all(&self, msgs: &[ConsumedMessage]) -> usize {
        msgs.iter().filter(|m| self.ack(m)).count()
    }

    /// Triggers a rebalance now (the same as a broker's NOTIFY_CONSUMER_IDS_CHANGED).
    pub fn request_rebalance(&self) {
        self.inner.rebalance_now.notify_one();
    }

    /// Commits the committable offset of every owned queue whose offset moved.
    pub async fn commit_all(&self) {
        let due: Vec<(MessageQueue, i64)> = {
            let st = lock(&self.inner.state);
            st.queues
                .iter()
                .filter_map(|(q, e)| e.tracker.commit_due().map(|o| (q.clone(), o)))
                .collect()
        };
        for (q, off) in due {
            if self.update_offset(&q, off).await
                && let Some(e) = lock(&self.inner.state).queues.get_mut(&q)
            {
                e.tracker.mark_committed(off);
            }
        }
    }

    /// Stops pulling, commits every owned queue's offset, unregisters from the brokers and
    /// closes the connections.
    pub async fn shutdown(&self) {
        if !self.inner.running.swap(false, Ordering::AcqRel) {
            return;
        }
        for t in lock(&self.inner.tasks).drain(..) {
            t.abort();
        }
        let tasks: Vec<JoinHandle<()>> = lock(&self.inner.state)
            .queues
            .values_mut()
            .filter_map(|e| e.task.take())
            .collect();
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
        self.commit_all().await;
        lock(&self.inner.state).queues.clear();
        self.inner.client.shutdown().await;
    }

    // --- requests ------------------------------------------------------------------------

    /// Fetches the routes of every subscribed topic (through the session); keeps the old one
    /// on failure.
    async fn refresh_routes(&self) {
        let topics: Vec<String> = self
            .inner
            .cfg
            .subscriptions
            .iter()
            .map(|(t, _)| t.clone())
            .collect();
        let wait = clock::to_std(CLIENT_API_TIMEOUT);
        for topic in topics {
            let Some(qs) = self.inner.client.subscribe_queues(&topic, wait).await else {
                debug!(topic, "no route");
                continue;
            };
            let queues: Vec<MessageQueue> = qs
                .into_iter()
                .map(|(broker_name, queue_id)| MessageQueue {
                    topic: topic.clone(),
                    broker_name,
                    queue_id,
                })
                .collect();
            lock(&self.inner.state).routes.insert(topic, queues);
        }
    }

    async fn heartbeat_all(&self) {
        let subs: Vec<Subscription<'_>> = self
            .inner
            .cfg
            .subscriptions
            .iter()
            .map(|(t, e)| Subscription {
                topic: t,
                expression: TagExpression::new(e),
                sub_version: self.inner.sub_version,
            })
            .collect();
        let data = [ConsumerData {
            group: &self.inner.cfg.group,
            consume_type: ConsumeType::Passively,
            message_model: MessageModel::Clustering,
            consume_from_where: self.inner.cfg.consume_from,
            subscriptions: &subs,
        }];
        let client = &self.inner.client;
        let flavor = client.heartbeat_flavor();
        let mut buf = vec![0u8; 4096];
        let n = loop {
            match write_heartbeat(&client.client_id, &data, &[], flavor, &mut buf) {
                Ok(n) => break n,
                Err(_) if buf.len() < (1 << 24) => buf.resize(buf.len() * 2, 0),
                Err(_) => return,
            }
        };
        buf.truncate(n);
        client.heartbeat(buf).await;
    }

    async fn consumer_ids(&self, topic_queues: &[MessageQueue]) -> Option<Vec<String>> {
        // Java picks a random broker of the route; any broker of the group answers the same.
        let mut brokers: Vec<&str> = topic_queues
            .iter()
            .map(|q| q.broker_name.as_str())
            .collect();
        brokers.dedup();
        let start = clock::random_u32() as usize % brokers.len().max(1);
        for i in 0..brokers.len() {
            let b = brokers.get((start + i) % brokers.len())?;
            let hdr = GetConsumerListByGroupRequestHeader {
                consumer_group: &self.inner.cfg.group,
            };
            let Some(r) = self
                .inner
                .client
                .request(
                    b,
                    RequestCode::GET_CONSUMER_LIST_BY_GROUP,
                    Some(hdr),
                    CLIENT_API_TIMEOUT,
                )
                .await
            else {
                continue;
            };
            if r.code() != 0 {
                continue;
            }
            let mut ids = Box::new(heapless::Vec::<&str, MAX_CONSUMERS>::new());
            if parse_consumer_list(r.body(), &mut ids).is_ok() {
                return Some(ids.iter().map(|s| (*s).to_owned()).collect());
            }
        }
        None
    }

    async fn query_offset(&self, q: &MessageQueue) -> Result<Option<i64>, ()> {
        let hdr = QueryConsumerOffsetRequestHeader {
            consumer_group: &self.inner.cfg.group,
            topic: &q.topic,
            queue_id: q.queue_id,
            set_zero_if_not_found: None,
        };
        let r = self
            .inner
            .client
            .request(
                &q.broker_name,
                RequestCode::QUERY_CONSUMER_OFFSET,
                Some(hdr),
                OFFSET_RPC_TIMEOUT,
            )
            .await
            .ok_or(())?;
        match ResponseCode(r.code()) {
            ResponseCode::SUCCESS => {
                let h = r.header().ok_or(())?;
                let o = QueryConsumerOffsetResponseHeader::decode(&h, &mut Scratch::default())
                    .map_err(|_| ())?;
                Ok((o.offset >= 0).then_some(o.offset))
            }
            ResponseCode::QUERY_NOT_FOUND => Ok(None),
            _ => Err(()),
        }
    }

    async fn max_offset(&self, q: &MessageQueue) -> Option<i64> {
        let hdr = GetMaxOffsetRequestHeader {
            topic: &q.topic,
            queue_id: q.queue_id,
            committed: (self.inner.cfg.version >= version::V5_0_0).then_some(true),
        };
        let r = self
            .inner
            .client
            .request(
                &q.broker_name,
                RequestCode::GET_MAX_OFFSET,
                Some(hdr),
                CLIENT_API_TIMEOUT,
            )
            .await?;
        if r.code() != 0 {
            return None;
        }
        let h = r.header()?;
        GetMaxOffsetResponseHeader::decode(&h, &mut Scratch::default())
            .ok()
            .map(|o| o.offset)
    }

    /// Java's `computePullFromWhere`: the committed offset, else the start position.
    async fn start_offset(&self, q: &MessageQueue) -> Option<i64> {
        match self.query_offset(q).await {
            Ok(Some(o)) => Some(o),
            Ok(None) => match self.inner.cfg.consume_from {
                ConsumeFromWhere::FirstOffset => Some(0),
                ConsumeFromWhere::LastOffset if q.topic.starts_with("%RETRY%") => Some(0),
                ConsumeFromWhere::LastOffset => self.max_offset(q).await,
            },
            Err(()) => None,
        }
    }

    async fn update_offset(&self, q: &MessageQueue, offset: i64) -> bool {
        let hdr = UpdateConsumerOffsetRequestHeader {
            consumer_group: &self.inner.cfg.group,
            topic: &q.topic,
            queue_id: q.queue_id,
            commit_offset: offset,
        };
        let ok = self
            .inner
            .client
            .request(
                &q.broker_name,
                RequestCode::UPDATE_CONSUMER_OFFSET,
                Some(hdr),
                OFFSET_RPC_TIMEOUT,
            )
            .await
            .is_some_and(|r| r.code() == 0);
        if ok {
            bump(&self.inner.stats.commits, 1);
        }
        debug!(queue = ?q, offset, ok, "offset committed");
        ok
    }

    // --- rebalance -----------------------------------------------------------------------

    /// One rebalance round over every subscribed topic.
    pub async fn rebalance(&self) {
        let _one_at_a_time = self.inner.rebalance_lock.lock().await;
        if !self.inner.running.load(Ordering::Acquire) {
            return;
        }
        bump(&self.inner.stats.rebalances, 1);
        self.refresh_routes().await;
        let topics: Vec<String> = self
            .inner
            .cfg
            .subscriptions
            .iter()
            .map(|(t, _)| t.clone())
            .collect();
        for topic in topics {
            self.rebalance_topic(&topic).await;
        }
    }

    async fn rebalance_topic(&self, topic: &str) {
        let Some(mq_all) = lock(&self.inner.state).routes.get(topic).cloned() else {
            debug!(topic, "rebalance skipped: no route");
            return;
        };
        if mq_all.is_empty() {
            return;
        }
        let Some(cids) = self.consumer_ids(&mq_all).await else {
            debug!(topic, "rebalance skipped: no consumer id list");
            return;
        };
        let mut core_qs: Vec<CoreQueue<'_>> = mq_all.iter().map(core_queue).collect();
        sort_queues(&mut core_qs);
        let mut cid_refs: Vec<&str> = cids.iter().map(String::as_str).collect();
        sort_consumer_ids(&mut cid_refs);
        let mut mine = Box::new(heapless::Vec::<CoreQueue<'_>, MAX_QUEUES>::new());
        if let Err(e) = allocate(
            self.inner.cfg.strategy,
            &core_qs,
            &cid_refs,
            &self.inner.client.client_id,
            &mut mine,
        ) {
            warn!(topic, %e, "allocation failed");
            return;
        }
        let wanted: Vec<MessageQueue> = mine.iter().map(owned_queue).collect();
        drop(core_qs);
        // Revoke: commit the offset, then forget the queue (Java removeUnnecessaryMessageQueue).
        let revoked: Vec<(MessageQueue, Option<i64>, Option<JoinHandle<()>>)> = {
            let mut st = lock(&self.inner.state);
            let gone: Vec<MessageQueue> = st
                .queues
                .keys()
                .filter(|q| q.topic == topic && !wanted.contains(q))
                .cloned()
                .collect();
            gone.into_iter()
                .filter_map(|q| {
                    let mut e = st.queues.remove(&q)?;
                    Some((q, e.tracker.commit_due(), e.task.take()))
                })
                .collect()
        };
        for (q, due, task) in revoked {
            if let Some(t) = task {
                t.abort();
            }
            if let Some(off) = due {
                self.update_offset(&q, off).await;
            }
            debug!(queue = ?q, "queue revoked");
        }
        for q in wanted {
            if lock(&self.inner.state).queues.contains_key(&q) {
                continue;
            }
            let Some(offset) = self.start_offset(&q).await else {
                debug!(queue = ?q, "no start offset yet; retry at next rebalance");
                continue;
            };
            let mut tracker = Box::new(QueueTracker::new(offset));
            tracker.mark_committed(offset);
            let lease = {
                let mut st = lock(&self.inner.state);
                st.next_lease += 1;
                let lease = st.next_lease;
                st.queues.insert(
                    q.clone(),
                    QueueEntry {
                        tracker,
                        lease,
                        task: None,
                    },
                );
                lease
            };
            let task = tokio::spawn(pull_loop(Arc::downgrade(&self.inner), q.clone(), lease));
            if let Some(e) = lock(&self.inner.state).queues.get_mut(&q) {
                e.task = Some(task);
            }
            debug!(queue = ?q, offset, "queue assigned");
        }
    }
}

fn core_queue(q: &MessageQueue) -> CoreQueue<'_> {
    CoreQueue::new(&q.topic, &q.broker_name, q.queue_id)
}

fn owned_queue(q: &CoreQueue<'_>) -> MessageQueue {
    MessageQueue {
        topic: q.topic.to_owned(),
        broker_name: q.broker_name.to_owned(),
        queue_id: q.queue_id,
    }
}

fn to_message(q: &MessageQueue, m: &StoredMessage<'_>, lease: u64) -> ConsumedMessage {
    let body = if m.sys_flag.is_compressed() {
        match m.sys_flag.compression_type() {
            Ok(CompressionType::Zlib) => {
                match miniz_oxide::inflate::decompress_to_vec_zlib(m.body) {
                    Ok(v) => Bytes::from(v),
                    Err(_) => {
                        warn!(queue = ?q, offset = m.queue_offset, "zlib body does not inflate; delivered as stored");
                        Bytes::copy_from_slice(m.body)
                    }
                }
            }
            _ => {
                warn!(queue = ?q, offset = m.queue_offset, "unsupported compression; delivered as stored");
                Bytes::copy_from_slice(m.body)
            }
        }
    } else {
        Bytes::copy_from_slice(m.body)
    };
    let properties: BTreeMap<String, String> = m
        .properties()
        .map(|p| {
            p.iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let msg_id = match m.message_id() {
        MessageId::Uniq(s) => s.to_owned(),
        MessageId::Offset(o) => o.to_string(),
    };
    ConsumedMessage {
        queue: q.clone(),
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
        lease,
    }
}

enum Next {
    Now,
    After(StdDuration),
    Stop,
}

/// One queue's pull loop; ends when the queue is revoked (lease changed) or the consumer stops.
async fn pull_loop(weak: std::sync::Weak<Inner>, q: MessageQueue, mut lease: u64) {
    let expr_text = weak
        .upgrade()
        .and_then(|i| {
            i.cfg
                .subscriptions
                .iter()
                .find(|(t, _)| *t == q.topic)
                .map(|(_, e)| e.clone())
        })
        .unwrap_or_else(|| "*".to_owned());
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let next = pull_once(&inner, &q, &mut lease, &expr_text).await;
        drop(inner);
        match next {
            Next::Now => {}
            Next::After(d) => tokio::time::sleep(d).await,
            Next::Stop => return,
        }
    }
}

async fn pull_once(inner: &Arc<Inner>, q: &MessageQueue, lease: &mut u64, expr_text: &str) -> Next {
    if !inner.running.load(Ordering::Acquire) {
        return Next::Stop;
    }
    let cfg = &inner.cfg;
    let (decision, offset, commit) = {
        let st = lock(&inner.state);
        let Some(e) = st.queues.get(q).filter(|e| e.lease == *lease) else {
            return Next::Stop;
        };
        (
            e.tracker.flow(&cfg.flow, cfg.pull_batch_size),
            e.tracker.next_offset(),
            e.tracker.committed(),
        )
    };
    let max = match decision {
        FlowDecision::DelayPull(d) => {
            bump(&inner.stats.flow_control_delays, 1);
            return Next::After(clock::to_std(d));
        }
        FlowDecision::Pull(n) => n,
    };
    let req = PullRequest {
        group: &cfg.group,
        topic: &q.topic,
        broker_name: &q.broker_name,
        queue_id: q.queue_id,
        offset,
        max_msgs: max,
        commit_offset: commit,
        suspend: Some(clock::to_core(cfg.suspend)),
        expression: TagExpression::new(expr_text),
        sub_version: inner.sub_version,
    };
    bump(&inner.stats.pulls, 1);
    let timeout = req.rpc_timeout(CLIENT_API_TIMEOUT);
    let Some(resp) = inner
        .client
        .request(
            &q.broker_name,
            RequestCode::PULL_MESSAGE,
            Some(req.header()),
            timeout,
        )
        .await
    else {
        return Next::After(cfg.pull_exception_delay);
    };
    let Some(h) = resp.header() else {
        return Next::After(cfg.pull_exception_delay);
    };
    let result = match parse_pull_response(&h) {
        Ok(r) => r,
        Err(e) => {
            debug!(queue = ?q, %e, "pull answered with an error");
            return Next::After(clock::to_std(
                e.retry_delay(clock::to_core(cfg.pull_exception_delay)),
            ));
        }
    };
    let expr = TagExpression::new(expr_text);
    match result.status {
        PullStatus::Found => {
            let mut msgs = Vec::new();
            for m in StoredMessages::new(resp.body()).crc_check(CrcCheck::Skip) {
                match m {
                    Ok(m) => {
                        if !m.body_crc_ok() {
                            warn!(queue = ?q, offset = m.queue_offset, "body CRC mismatch");
                        }
                        if expr.matches_message(&m) {
                            msgs.push(to_message(q, &m, *lease));
                        }
                    }
                    Err(e) => {
                        warn!(queue = ?q, %e, "undecodable record; rest of the pull dropped");
                        break;
                    }
                }
            }
            let mut st = lock(&inner.state);
            let Some(e) = st.queues.get_mut(q).filter(|e| e.lease == *lease) else {
                return Next::Stop;
            };
            let mut complete = true;
            let mut delivered = 0;
            for m in msgs {
                let len = u32::try_from(m.body.len()).unwrap_or(u32::MAX);
                match e.tracker.push(m.queue_offset, len) {
                    Ok(()) => {
                        delivered += 1;
                        let _ = inner.tx.send(m);
                    }
                    Err(rmq_core::consumer::TrackError::NotAscending) => {}
                    Err(_) => {
                        // Full (cannot happen: the pull asked for at most the free slots).
                        complete = false;
                        break;
                    }
                }
            }
            if complete {
                e.tracker.advance(result.next_begin_offset);
            }
            bump(&inner.stats.delivered, delivered);
            Next::Now
        }
        PullStatus::NoNewMsg | PullStatus::NoMatchedMsg => {
            let mut st = lock(&inner.state);
            let Some(e) = st.queues.get_mut(q).filter(|e| e.lease == *lease) else {
                return Next::Stop;
            };
            e.tracker.advance(result.next_begin_offset);
            Next::Now
        }
        PullStatus::OffsetIllegal => {
            warn!(queue = ?q, offset, next = result.next_begin_offset, "offset illegal; reset");
            {
                let mut st = lock(&inner.state);
                st.next_lease += 1;
                let new_lease = st.next_lease;
                let Some(e) = st.queues.get_mut(q).filter(|e| e.lease == *lease) else {
                    return Next::Stop;
                };
                e.tracker.reset(result.next_begin_offset);
                e.lease = new_lease;
                *lease = new_lease;
            }
            let c = Consumer {
                inner: inner.clone(),
                _life: None,
            };
            if c.update_offset(q, result.next_begin_offset).await
                && let Some(e) = lock(&inner.state).queues.get_mut(q)
            {
                e.tracker.mark_committed(result.next_begin_offset);
            }
            Next::Now
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmq_core::message::SysFlag;
    use rmq_core::message::stored::MessageVersion;
    use std::net::SocketAddr;

    fn stored<'a>(body: &'a [u8], sys_flag: SysFlag, props: &'a [u8]) -> StoredMessage<'a> {
        let host: SocketAddr = "10.0.0.5:10911".parse().unwrap();
        StoredMessage {
            version: MessageVersion::V1,
            body_crc: rmq_core::message::stored::body_crc(body),
            queue_id: 2,
            flag: 7,
            queue_offset: 41,
            physical_offset: 0x12345,
            sys_flag,
            born_timestamp: 1,
            born_host: host,
            store_timestamp: 2,
            store_host: host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body,
            topic: "T",
            raw_properties: props,
        }
    }

    #[test]
    fn pulled_message_is_decompressed_and_mapped() {
        let plain: Vec<u8> = (0..5000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let z = miniz_oxide::deflate::compress_to_vec_zlib(&plain, 5);
        let props = b"TAGS\x01TagA\x02KEYS\x01k1\x02UNIQ_KEY\x01ABCDEF\x02";
        let q = MessageQueue {
            topic: "T".into(),
            broker_name: "broker-a".into(),
            queue_id: 2,
        };
        let m = to_message(
            &q,
            &stored(
                &z,
                SysFlag::COMPRESSED | SysFlag::COMPRESSION_ZLIB_TYPE,
                props,
            ),
            9,
        );
        assert_eq!(m.body.as_ref(), &plain[..]);
        assert_eq!(m.tags(), Some("TagA"));
        assert_eq!(m.keys(), Some("k1"));
        assert_eq!(m.msg_id, "ABCDEF");
        assert_eq!(m.offset_msg_id, "0A00000500002A9F0000000000012345");
        assert_eq!((m.queue_offset, m.flag, m.lease), (41, 7, 9));

        // Not compressed: as stored; no UNIQ_KEY: the offsetMsgId.
        let m = to_message(&q, &stored(b"raw", SysFlag::default(), b""), 1);
        assert_eq!(m.body.as_ref(), b"raw");
        assert_eq!(m.msg_id, m.offset_msg_id);
        assert_eq!(m.tags(), None);
    }

    #[tokio::test]
    async fn builder_validation() {
        let e = Consumer::builder()
            .group("g")
            .subscribe("T", "*")
            .start()
            .await;
        assert_eq!(e.unwrap_err(), ConsumerConfigError::NoNameServer);
        let b = Consumer::builder().namesrv_addr("127.0.0.1:1");
        assert_eq!(
            b.clone().subscribe("T", "*").start().await.unwrap_err(),
            ConsumerConfigError::NoGroup
        );
        assert_eq!(
            b.clone().group("g").start().await.unwrap_err(),
            ConsumerConfigError::NoSubscription
        );
        assert_eq!(
            b.clone()
                .group("g")
                .subscribe("T", "*")
                .pull_batch_size(0)
                .start()
                .await
                .unwrap_err(),
            ConsumerConfigError::ZeroBatch
        );
        let no_key = b.clone().group("g").subscribe("T", "*").acl("", "sk", None);
        assert!(no_key.config().security.acl.is_some());
        assert_eq!(
            no_key.start().await.unwrap_err(),
            ConsumerConfigError::AclAccessKey
        );
        // A later subscribe replaces the expression of the same topic.
        let b = b.subscribe("T", "a").subscribe("T", "b || c");
        assert_eq!(
            b.config().subscriptions,
            [("T".to_owned(), "b || c".to_owned())]
        );
        // Two default builders never share an instance name (client ids must differ).
        assert_ne!(
            Consumer::builder().config().instance_name,
            Consumer::builder().config().instance_name
        );
    }
}
