//! The [`Producer`]: a thin front end on the core client session ([`crate::driver`]).
//!
//! It builds the message (properties and validation through
//! [`rmq_core::producer::encode_message_properties`], zlib, batch bodies), hands it to the
//! session, and turns the session's outcome into a [`SendResult`] or a [`SendError`]. Routes,
//! queue choice, retries within one deadline, heartbeats and the fault table are the
//! session's.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use bytes::Bytes;
use rmq_core::message::batch_rules::{BatchRules, RuleError};
use rmq_core::message::properties::Preencoded;
use rmq_core::message::validate::ValidationError;
use rmq_core::message::{BatchMessage, PropertiesRef, UniqKeyGenerator, encode_batch, keys};
use rmq_core::producer::{
    CLIENT_API_TIMEOUT, DEFAULT_TOPIC, MessageError, MessageFields, compression_flags,
    encode_message_properties, message_properties_len,
};
use rmq_core::reply::{Correlation, reply_topic};
use rmq_core::retry::{SendErrorKind as CoreKind, SendMode};
use rmq_core::select::java_string_hash;
use rmq_core::session::{self, SendArgs, SendFailure, SubmitError};
use rmq_core::transport::TransportError;
use tokio::task::JoinHandle;
use tracing::{Instrument, info_span, warn};

use crate::batcher::{Added, AutoBatch, Batcher, Waiter, split};
use crate::clock;
use crate::config::{ProducerBuilder, ProducerConfig};
use crate::driver::AskError;
use crate::driver::{Driver, Refused};
use crate::message::{Message, MessageQueue, SendError, SendErrorKind, SendResult};
use crate::metrics::{FailureCounts, ProducerMetrics};
use crate::shared::{Counter, Counters, CountersSnapshot};
use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering, lock};
use crate::trace::Tracer;
use rmq_core::metrics::{AtomicHistogram, RateWindow};
use rmq_core::trace::{self, MsgType};

/// A route as the CLI shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RouteInfo {
    /// `(broker name, master address)` of every broker with a publish queue.
    pub brokers: Vec<(String, Option<String>)>,
    /// The publish queues, in selection order.
    pub queues: Vec<MessageQueue>,
    /// Whether the topic does not exist and the TBW102 template route is used.
    pub from_default_topic: bool,
}

/// A message ready for the session: its properties, body and send-header fields.
struct Prepared<'m> {
    /// Borrowed from the message of a single send (whose topic then moves into the result),
    /// owned for a batch.
    topic: Cow<'m, str>,
    body: Bytes,
    properties: String,
    sys_flag: i32,
    flag: i32,
    batch: bool,
    /// A timer message (the session refuses it for a 4.x broker).
    timer: bool,
    /// A reply (code 325).
    reply: bool,
    msg_id: String,
    /// Born timestamp (unix ms), read once with the UNIQ_KEY's.
    born: i64,
}

/// What a message is besides its content.
enum Role {
    /// A transaction's half message ([`crate::transaction`]).
    Half,
    /// A request (`correlation id`, `TTL`) or a reply (also the requester's client id) of
    /// request-reply ([`rmq_core::reply`]).
    Request(String, String),
    Reply(String, String, String),
}

impl Role {
    fn correlation<'a>(&'a self, me: &'a str) -> Option<Correlation<'a>> {
        match self {
            Role::Half => None,
            Role::Request(id, ttl) => Some(Correlation::request(id, me, ttl)),
            Role::Reply(id, to, ttl) => Some(Correlation {
                reply: true,
                ..Correlation::request(id, to, ttl)
            }),
        }
    }
}

enum Target {
    Select,
    Queue(String, i32),
    Index(Box<dyn FnOnce(usize) -> usize + Send>),
    Key(String),
    /// A message with a role (a selected queue).
    Role(Role),
}

/// What [`Producer::metrics`] reports from.
#[derive(Default)]
struct SendMetrics {
    latency: AtomicHistogram,
    rate: RateWindow,
    failures: [AtomicU64; FailureCounts::NAMES.len()],
}

struct Inner {
    metrics: SendMetrics,
    batcher: Batcher,
    cfg: ProducerConfig,
    /// The producer group as the wire names it (PGROUP, END_TRANSACTION; in a namespace).
    wire_group: String,
    client_id: String,
    driver: Driver,
    uniq: Mutex<UniqKeyGenerator>,
    running: AtomicBool,
    /// The sends in progress (a shutdown waits for them).
    active: crate::inflight::InFlight,
    /// Where the sends are traced ([`ProducerBuilder::message_trace`]).
    tracer: Option<Tracer>,
}

/// A RocketMQ producer on tokio. Cheap to clone (all clones share one client session).
///
/// Every send validates the message first (no byte is sent for an invalid one), then the core
/// session finds the topic's route (NameServer, cached, refreshed every
/// `poll_name_server_interval`) and chooses queues and retries within one total deadline
/// (`send_msg_timeout`).
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("client_id", &self.inner.client_id)
            .field("group", &self.inner.cfg.producer_group)
            .finish()
    }
}

impl Producer {
    /// A builder with the defaults described on [`ProducerBuilder`].
    pub fn builder() -> ProducerBuilder {
        ProducerBuilder::default()
    }

    pub(crate) fn start(
        cfg: ProducerConfig,
        tracer: Option<Tracer>,
    ) -> Result<Producer, session::ConfigError> {
        let ip = crate::client::local_ip(&cfg.namesrv_addr);
        let client_id = crate::client::client_id(ip, &cfg.instance_name);
        let wire_group =
            crate::client::wire(cfg.namespace.as_deref(), &cfg.producer_group).into_owned();
        let mut sc = session::Config::new(cfg.namesrv_addr.len(), &wire_group, &client_id);
        sc.version = cfg.version;
        sc.serialize_type = cfg.serialize_type;
        sc.language = cfg.language;
        sc.fault_rule = cfg.profile().update_rule();
        sc.route_refresh = clock::to_core(cfg.poll_name_server_interval);
        sc.heartbeat = Some(clock::to_core(cfg.heartbeat_broker_interval));
        sc.seed = clock::random_u32();
        let driver = Driver::start(
            &sc,
            rmq_core::client::NoConsumer,
            cfg.namesrv_addr.clone(),
            cfg.security.clone(),
            (cfg.max_requests_in_flight, cfg.max_bytes_in_flight),
            Arc::new(Counters::new()),
        )?;
        Ok(Producer {
            inner: Arc::new(Inner {
                metrics: SendMetrics::default(),
                batcher: Batcher::default(),
                uniq: Mutex::new(UniqKeyGenerator::new(
                    ip,
                    std::process::id(),
                    clock::random_u32(),
                )),
                client_id,
                wire_group,
                driver,
                running: AtomicBool::new(true),
                active: crate::inflight::InFlight::default(),
                tracer,
                cfg,
            }),
        })
    }

    /// The start's lookups ([`ProducerBuilder::start`]): the configured topics' routes, or
    /// `TBW102`'s; whether a NameServer answered is the core's to say.
    pub(crate) async fn look_up_topics(&self) -> Result<(), crate::ConfigError> {
        let (cfg, d) = (&self.inner.cfg, &self.inner.driver);
        if cfg.lazy_start {
            return Ok(());
        }
        let default = [DEFAULT_TOPIC.to_owned()];
        let names = if cfg.topics.is_empty() {
            &default[..]
        } else {
            &cfg.topics[..]
        };
        let deadline = crate::clock::after(cfg.start_timeout);
        let mut ids = Vec::with_capacity(names.len());
        for name in names {
            let name = &self.wire(name);
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            d.route(name, false, left).await;
            match d.topic(name) {
                Ok(t) => ids.push(t),
                Err(Refused::Session(e)) => return Err(crate::ConfigError::TopicTable(e)),
                Err(Refused::Stopped | Refused::Timeout) => {}
            }
        }
        if d.with(|s| s.name_servers_unreachable(ids)) {
            return Err(crate::ConfigError::NameServersUnreachable(d.cause(None)));
        }
        Ok(())
    }

    /// How the producer's routes and NameServer connections stand (a readiness check).
    pub fn health(&self) -> crate::Health {
        self.inner.driver.health()
    }

    /// The client id (`ip@instance`) announced in heartbeats.
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// The configuration.
    pub fn config(&self) -> &ProducerConfig {
        &self.inner.cfg
    }

    /// The event counters.
    pub fn counters(&self) -> CountersSnapshot {
        let st = self.inner.driver.with(|s| s.stats());
        CountersSnapshot {
            attempts: u64::from(st.attempts),
            retried: u64::from(st.retries),
            brokers_isolated: u64::from(st.brokers_isolated),
            late_responses_dropped: u64::from(st.late_responses),
            ..self.inner.driver.counters().snapshot()
        }
    }

    /// Buffers and in-flight tables of the producer's connections (tests: memory bounds).
    #[doc(hidden)]
    pub fn connection_stats(&self) -> Vec<crate::ConnStats> {
        self.inner.driver.connection_stats()
    }

    /// Sends `msg` and waits for the broker (SYNC: up to `1 + retry_times_when_send_failed`
    /// attempts, retrying transport failures and retryable broker codes).
    ///
    /// # Errors
    /// [`SendError`]: validation (nothing sent), no route, broker code, transport, timeout.
    ///
    /// With [`auto_batch`](crate::ProducerBuilder::auto_batch) on, small messages wait up to
    /// its hold time for others to the same topic and leave with them in one
    /// SEND_BATCH_MESSAGE; the result is still this message's own ([`crate::AutoBatch`]).
    pub async fn send(&self, msg: Message) -> Result<SendResult, SendError> {
        let cfg = &self.inner.cfg;
        let delayed = msg.delay_level.is_some() || msg.timer.is_some();
        if let Some(ab) = cfg.auto_batch
            && ab
                .limits()
                .admits(msg.body.len(), cfg.compress_msg_body_over_howmuch, delayed)
        {
            return self.send_batched(msg, ab).await;
        }
        self.send_with(msg, SendMode::Sync, Target::Select).await
    }

    /// Joins (or starts) the batch of the message's topic and waits for its own result.
    async fn send_batched(&self, msg: Message, ab: AutoBatch) -> Result<SendResult, SendError> {
        let _g = self.enter()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        // Batches leave from their own task: a caller that stops waiting cancels nothing.
        match self.inner.batcher.add(&ab, (msg, tx)) {
            Added::Send(topic, batch) => {
                let this = self.clone();
                tokio::spawn(async move { this.flush_all(&topic, batch).await });
            }
            Added::Soon(topic) => {
                // The callers woken with the batch that just ended send again one after the
                // other: they join this one before it leaves (a yield runs after every task
                // that is ready).
                let this = self.clone();
                tokio::spawn(async move {
                    tokio::task::yield_now().await;
                    let batch = this.inner.batcher.take(&topic);
                    this.flush_all(&topic, batch).await;
                });
            }
            Added::Arm(topic, generation) => {
                let this = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(ab.hold).await;
                    let batch = this.inner.batcher.expire(&topic, generation);
                    this.flush_all(&topic, batch).await;
                });
            }
            Added::Joined => {}
        }
        rx.await
            .unwrap_or_else(|_| Err(SendError::new(SendErrorKind::Shutdown, 0)))
    }

    /// Sends `batch`, then whatever waited for it to end, until nothing waits (an empty
    /// `batch` sends nothing).
    async fn flush_all(&self, topic: &str, mut batch: Vec<Waiter>) {
        while !batch.is_empty() {
            self.flush(batch).await;
            batch = self.inner.batcher.done(topic);
        }
    }

    /// Sends a gathered batch and hands each caller its result.
    async fn flush(&self, mut batch: Vec<Waiter>) {
        if batch.len() <= 1 {
            if let Some((m, tx)) = batch.pop() {
                let _ = tx.send(self.send_with(m, SendMode::Sync, Target::Select).await);
            }
            return;
        }
        let started = std::time::Instant::now();
        let msgs: Vec<&Message> = batch.iter().map(|(m, _)| m).collect();
        let prepared = self.prepare_batch(&msgs);
        drop(msgs);
        let Ok((p, ids)) = prepared else {
            // Refused before any byte was sent (an invalid message): each alone, so that
            // only the invalid one fails.
            for (m, tx) in batch {
                let this = self.clone();
                tokio::spawn(async move {
                    let _ = tx.send(this.send_with(m, SendMode::Sync, Target::Select).await);
                });
            }
            return;
        };
        let span = info_span!("auto_batch", topic = %p.topic, messages = batch.len());
        let r = self
            .drive(p, SendMode::Sync, Target::Select)
            .instrument(span)
            .await;
        match r {
            Ok(res) => {
                let born = clock::unix_millis();
                for ((m, tx), each) in batch.into_iter().zip(split(&res, ids)) {
                    self.trace(&m, &each, (born, started), m.body.len(), MsgType::Normal);
                    let each = Ok(each);
                    self.count(&each, started);
                    let _ = tx.send(each);
                }
            }
            Err(e) => {
                for (m, tx) in batch {
                    let each = Err(e.clone().with_message(m));
                    self.count(&each, started);
                    let _ = tx.send(each);
                }
            }
        }
    }

    /// ASYNC send: a `'static` future to await or spawn. Up to
    /// `1 + retry_times_when_send_async_failed` attempts; broker error codes are not retried
    /// (as in Java's async path).
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub fn send_async(
        &self,
        msg: Message,
    ) -> impl Future<Output = Result<SendResult, SendError>> + Send + 'static {
        let this = self.clone();
        async move { this.send_with(msg, SendMode::Async, Target::Select).await }
    }

    /// ASYNC send with a callback, run on the tokio runtime when the send ends.
    pub fn send_with_callback<F>(&self, msg: Message, callback: F) -> JoinHandle<()>
    where
        F: FnOnce(Result<SendResult, SendError>) + Send + 'static,
    {
        let fut = self.send_async(msg);
        tokio::spawn(async move { callback(fut.await) })
    }

    /// ONEWAY: one attempt, done when the request is written; the broker does not answer.
    ///
    /// # Errors
    /// Validation, no route, or a transport failure before the write completed.
    pub async fn send_oneway(&self, msg: Message) -> Result<(), SendError> {
        self.send_with(msg, SendMode::Oneway, Target::Select)
            .await
            .map(|_| ())
    }

    /// Sends to one given queue (one attempt, like Java's `send(msg, mq)`).
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub async fn send_to_queue(
        &self,
        msg: Message,
        queue: &MessageQueue,
    ) -> Result<SendResult, SendError> {
        let target = Target::Queue(queue.broker_name.clone(), queue.queue_id);
        self.send_with(msg, SendMode::Sync, target).await
    }

    /// Ordered send: `selector(queue_count)` picks the index of the queue (taken modulo the
    /// count), like a Java `MessageQueueSelector`. One attempt.
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub async fn send_ordered<F>(&self, msg: Message, selector: F) -> Result<SendResult, SendError>
    where
        F: FnOnce(usize) -> usize + Send + 'static,
    {
        self.send_with(msg, SendMode::Sync, Target::Index(Box::new(selector)))
            .await
    }

    /// Ordered send by sharding key: queue `|hashCode(key) % count|`, like Java's
    /// `SelectMessageQueueByHash`. Messages with the same key keep their order.
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub async fn send_sharded(&self, msg: Message, key: &str) -> Result<SendResult, SendError> {
        self.send_with(msg, SendMode::Sync, Target::Key(key.to_owned()))
            .await
    }

    /// Sends messages of one topic as one SEND_BATCH_MESSAGE. `msg_id` of the result is the
    /// comma-joined UNIQ_KEYs.
    ///
    /// # Errors
    /// [`SendErrorKind::InvalidBatch`] for an empty batch, mixed topics or delay levels, plus
    /// the errors of [`Producer::send`].
    pub async fn send_batch(&self, msgs: Vec<Message>) -> Result<SendResult, SendError> {
        let _g = self.enter()?;
        let (started, born) = (std::time::Instant::now(), clock::unix_millis());
        let mut body_len = 0;
        let r = match self.prepare_batch(&msgs) {
            Ok((mut p, ids)) => {
                p.msg_id = ids.join(",");
                body_len = p.body.len();
                let span = info_span!("send_batch", topic = %p.topic);
                self.drive(p, SendMode::Sync, Target::Select)
                    .instrument(span)
                    .await
            }
            Err(e) => Err(e),
        };
        self.count(&r, started);
        if let (Ok(res), Some(first)) = (&r, msgs.first()) {
            // One record for the batch, as Java's (its tags and keys are the batch's: none).
            let m = Message::new(first.topic.clone(), Bytes::new());
            self.trace(&m, res, (born, started), body_len, MsgType::Normal);
        }
        r
    }

    /// The route of `topic` as the producer sees it (looked up now).
    ///
    /// # Errors
    /// [`SendErrorKind::NoRoute`] or [`SendErrorKind::NoNameServer`].
    pub async fn route(&self, topic: &str) -> Result<RouteInfo, SendError> {
        let d = &self.inner.driver;
        let wire = self.wire(topic);
        let t = d.topic(&wire).map_err(refused)?;
        let wait = CLIENT_API_TIMEOUT.saturating_mul(self.inner.cfg.namesrv_addr.len() as u64 + 1);
        let found = d.route(&wire, true, clock::to_std(wait)).await;
        d.with(|s| {
            let queues = s.publish_queues(t);
            if !found && queues.is_empty() {
                let kind = if s.route_unreachable(t) {
                    SendErrorKind::NoNameServer
                } else {
                    SendErrorKind::NoRoute
                };
                return Err(SendError::new(kind, 0));
            }
            let mut brokers: Vec<(String, Option<String>)> = Vec::new();
            for q in queues {
                let name = s.broker_name(q.broker).unwrap_or("");
                if !brokers.iter().any(|(n, _)| n == name) {
                    brokers.push((name.to_owned(), s.broker_addr(q.broker).map(str::to_owned)));
                }
            }
            Ok(RouteInfo {
                brokers,
                queues: queues
                    .iter()
                    .map(|q| MessageQueue {
                        topic: topic.to_owned(),
                        broker_name: s.broker_name(q.broker).unwrap_or("").to_owned(),
                        queue_id: q.queue_id,
                    })
                    .collect(),
                from_default_topic: s.from_default_topic(t),
            })
        })
    }

    /// Stops the producer: refuses new sends, waits up to 3 s for sends in progress, then
    /// unregisters from every broker and closes the connections.
    pub async fn shutdown(&self) {
        self.shutdown_timeout(StdDuration::from_secs(3)).await;
    }

    /// [`Producer::shutdown`] with an explicit drain deadline.
    pub async fn shutdown_timeout(&self, drain: StdDuration) {
        if !self.inner.running.swap(false, Ordering::AcqRel) {
            return;
        }
        let active = self.inner.active.drained(drain).await;
        if active > 0 {
            warn!(
                active,
                "shutdown: sends still in progress at the drain deadline"
            );
        }
        if let Some(t) = &self.inner.tracer {
            t.shutdown().await;
        }
        self.inner
            .driver
            .shutdown(clock::to_std(CLIENT_API_TIMEOUT))
            .await;
    }

    /// A transaction's half message, sent as [`Producer::send`] does (no auto-batch).
    pub(crate) async fn send_half(&self, msg: Message) -> Result<SendResult, SendError> {
        self.send_with(msg, SendMode::Sync, Target::Role(Role::Half))
            .await
    }

    /// Sends `msg` as a request (Java `DefaultMQProducer.request`) and waits up to `timeout`
    /// for the reply a consumer sends with [`Producer::reply`] (or Java's
    /// `MessageUtil.createReplyMessage`), pushed back by the broker this producer sends
    /// heartbeats to. See [`rmq_core::reply`]. The route lookup and the heartbeat round a
    /// first request needs count against `timeout`; the send itself is bounded by
    /// [`ProducerConfig::send_msg_timeout`](crate::ProducerConfig::send_msg_timeout), so a
    /// request written late can end up to that much past `timeout`.
    ///
    /// # Errors
    /// The request's [`SendError`], [`SendErrorKind::ReplyTimeout`] when no reply came in
    /// time, [`SendErrorKind::Shutdown`] when the producer stopped while waiting.
    ///
    /// ```no_run
    /// # async fn f(p: rmq_std::Producer) -> Result<(), rmq_std::SendError> {
    /// use std::time::Duration;
    /// let reply = p
    ///     .request(rmq_std::Message::new("Prices", "SKU-1"), Duration::from_secs(3))
    ///     .await?;
    /// println!("{}", String::from_utf8_lossy(&reply.body));
    /// # Ok(()) }
    /// ```
    pub async fn request(
        &self,
        msg: Message,
        timeout: StdDuration,
    ) -> Result<crate::consumer::ConsumedMessage, SendError> {
        let start = tokio::time::Instant::now();
        // (`Duration::MAX`: no deadline to speak of.)
        let deadline = start
            .checked_add(timeout)
            .unwrap_or(start + StdDuration::from_secs(86_400 * 365));
        let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
        let id = self.next_uniq(clock::unix_millis());
        let d = &self.inner.driver;
        // No route yet, or no heartbeat answered yet (a route the start looked up comes
        // before the first heartbeat round).
        let unknown = d.with(|s| {
            s.stats().heartbeats_ok == 0
                || s.topic_id(&self.wire(&msg.topic))
                    .is_none_or(|t| s.publish_queues(t).is_empty())
        });
        if unknown {
            // As Java's prepareSendRequest: the route, then a heartbeat to every broker, so
            // that whichever broker takes the reply knows this client and can push it; both
            // within the request's one deadline.
            d.route(&self.wire(&msg.topic), false, left()).await;
            let now = clock::now();
            d.wait(crate::driver::Wait::Heartbeats, left(), |c| {
                c.session_mut().heartbeat_now(now);
            })
            .await;
            if left().is_zero() {
                // Java: RequestTimeoutException before the send.
                return Err(SendError::new(SendErrorKind::ReplyTimeout, 0));
            }
        }
        let rx = d.await_reply(id.clone());
        // However this ends (a reply, an error, the caller dropping the future), the wait is
        // forgotten: a late reply is dropped.
        struct Waiting<'a>(&'a Driver, &'a str);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.forget_reply(self.1);
            }
        }
        let _waiting = Waiting(d, &id);
        let role = Role::Request(id.clone(), timeout.as_millis().to_string());
        let sent = self
            .send_with(msg, SendMode::Sync, Target::Role(role))
            .await?;
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            // The producer was shut down while waiting.
            Ok(Err(_)) => Err(SendError::new(SendErrorKind::Shutdown, sent.attempts)),
            Err(_) => Err(SendError::new(SendErrorKind::ReplyTimeout, sent.attempts)),
        }
    }

    /// Replies `body` to `request`, a consumed message sent with [`Producer::request`] (or
    /// Java's `request`): to `<CLUSTER>_REPLY_TOPIC` with its correlation properties, as
    /// SEND_REPLY_MESSAGE_V2.
    ///
    /// # Errors
    /// [`SendErrorKind::NotARequest`] (nothing sent), or the send's [`SendError`].
    pub async fn reply(
        &self,
        request: &crate::consumer::ConsumedMessage,
        body: impl Into<Bytes>,
    ) -> Result<SendResult, SendError> {
        let props = PropertiesRef::new(request.properties.as_raw());
        let (c, cluster) = Correlation::reply_to(&props)
            .map_err(|e| SendError::new(SendErrorKind::NotARequest(e), 0))?;
        let mut buf = [0u8; 256];
        let topic = reply_topic(cluster, &mut buf).ok_or(SendError::new(
            SendErrorKind::Validation(ValidationError::TopicTooLong),
            0,
        ))?;
        let role = Role::Reply(c.correlation_id.into(), c.reply_to.into(), c.ttl.into());
        let msg = Message::new(topic, body);
        self.send_with(msg, SendMode::Sync, Target::Role(role))
            .await
    }

    /// Recalls a timer message before it is delivered (RocketMQ 5.3.2+, Java
    /// `DefaultMQProducer.recallMessage`): `handle` is its [`SendResult::recall_handle`].
    /// Returns the recalled message's id (its UNIQ_KEY, the `msg_id` of its send). See
    /// [`rmq_core::recall`].
    ///
    /// # Errors
    /// [`SendErrorKind::InvalidRecallHandle`] (nothing sent); [`SendErrorKind::Broker`] with
    /// the broker's code and remark: ILLEGAL_OPERATION (604) "timestamp invalid" once the
    /// message is due, NO_PERMISSION (16) for a broker without `recallMessageEnable=true`,
    /// REQUEST_CODE_NOT_SUPPORTED (25) before 5.3.2; [`SendErrorKind::NoRoute`],
    /// [`SendErrorKind::Transport`] or [`SendErrorKind::Timeout`] when the broker cannot be
    /// asked.
    ///
    /// ```no_run
    /// # async fn f(p: rmq_std::Producer) -> Result<(), rmq_std::SendError> {
    /// use std::time::Duration;
    /// let m = rmq_std::Message::new("Reminders", "ping").with_delay(Duration::from_secs(60));
    /// let sent = p.send(m).await?;
    /// if let Some(handle) = &sent.recall_handle {
    ///     p.recall("Reminders", handle).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn recall(&self, topic: &str, handle: &str) -> Result<String, SendError> {
        use rmq_core::recall::{RecallError, RecallHandle};
        let invalid = |e| SendError::new(SendErrorKind::InvalidRecallHandle(e), 0);
        let mut buf = vec![0u8; handle.len()];
        let h = RecallHandle::for_topic(topic, handle, &mut buf).map_err(invalid)?;
        let topic = &*self.wire(topic);
        let d = &self.inner.driver;
        // One deadline for the route lookup and the request.
        let timeout = self.config().send_msg_timeout;
        let deadline = crate::clock::after(timeout);
        let mut looked_up = false;
        let a = loop {
            let asked = d.ask(
                |c, now, left, buf, lend| {
                    c.recall(now, topic, handle, &h, looked_up, left, buf, lend)
                },
                deadline,
            );
            match asked.await {
                // The handle's broker is unknown: look the topic's route up, once, then ask it
                // or any broker of the topic.
                Err(AskError::Request(RecallError::NoRoute)) if !looked_up => {
                    looked_up = true;
                    d.route(topic, false, timeout).await;
                }
                Ok((_, f)) => break crate::conn::Answer::read(&f, "msgId"),
                Err(e) => return Err(ask_error(e, recall_error)),
            }
        };
        let a = answered(a)?;
        Ok(a.field.unwrap_or_else(|| h.message_id.to_owned()))
    }

    /// The producer group as the wire names it ([`ProducerBuilder::namespace`]).
    pub(crate) fn wire_group(&self) -> &str {
        &self.inner.wire_group
    }

    /// `name` on the wire ([`ProducerBuilder::namespace`]).
    pub(crate) fn wire<'a>(&self, name: &'a str) -> Cow<'a, str> {
        crate::client::wire(self.inner.cfg.namespace.as_deref(), name)
    }

    pub(crate) fn tracer(&self) -> Option<&Tracer> {
        self.inner.tracer.as_ref()
    }

    pub(crate) fn driver(&self) -> &Driver {
        &self.inner.driver
    }

    fn enter(&self) -> Result<crate::inflight::Entered, SendError> {
        let g = self.inner.active.enter();
        if !self.inner.running.load(Ordering::Acquire) {
            return Err(SendError::new(SendErrorKind::Shutdown, 0));
        }
        Ok(g)
    }

    async fn send_with(
        &self,
        msg: Message,
        mode: SendMode,
        target: Target,
    ) -> Result<SendResult, SendError> {
        let _g = self.enter()?;
        let started = std::time::Instant::now();
        let span = info_span!("send", topic = %msg.topic, mode = ?mode);
        let (born, half) = (
            clock::unix_millis(),
            matches!(target, Target::Role(Role::Half)),
        );
        let mut body_len = msg.body.len();
        let r = async {
            let role = match &target {
                Target::Role(r) => Some(r),
                _ => None,
            };
            let p = self.prepare(&msg, role)?;
            body_len = p.body.len();
            self.drive(p, mode, target).await
        }
        .instrument(span)
        .await;
        self.count(&r, started);
        if let (Ok(res), false) = (&r, mode == SendMode::Oneway) {
            let ty = if half {
                MsgType::TransHalf
            } else if msg.delay_level.is_some() || msg.timer.is_some() {
                MsgType::Delay
            } else {
                MsgType::Normal
            };
            self.trace(&msg, res, (born, started), body_len, ty);
        }
        match r {
            // The result names the topic with the message's own string (no copy).
            Ok(mut res) => {
                res.queue.topic = msg.topic;
                Ok(res)
            }
            // A failed send hands the message back.
            Err(e) => Err(e.with_message(msg)),
        }
    }

    /// Traces the send of `m` that ended in `res` ([`ProducerBuilder::message_trace`]):
    /// started at Unix ms `born` (and `started`), `body_len` bytes sent.
    fn trace(
        &self,
        m: &Message,
        res: &SendResult,
        (born, started): (i64, std::time::Instant),
        body_len: usize,
        msg_type: MsgType,
    ) {
        let Some(t) = &self.inner.tracer else { return };
        let addr = self.inner.driver.with(|s| {
            let b = s.find_broker(&res.queue.broker_name)?;
            s.broker_addr(b).map(str::to_owned)
        });
        let keys = m.keys.join(keys::KEY_SEPARATOR);
        let sent = trace::Sent {
            timestamp: born,
            region: trace::DEFAULT_REGION,
            group: &self.inner.cfg.producer_group,
            topic: &m.topic,
            msg_id: &res.msg_id,
            tags: m.tags.as_deref(),
            keys: Some(keys.as_str()).filter(|k| !k.is_empty()),
            store_host: addr.as_deref().unwrap_or(""),
        };
        let cost = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let record = trace::Record::Pub(trace::Pub {
            sent,
            body_len,
            cost_ms: cost,
            msg_type,
            offset_msg_id: &res.offset_msg_id,
            success: res.status == rmq_core::retry::SendStatus::SendOk,
        });
        t.record(&m.topic, &record);
    }

    fn count<T>(&self, r: &Result<T, SendError>, started: std::time::Instant) {
        let m = &self.inner.metrics;
        match r {
            Ok(_) => {
                self.inner.driver.counters().bump(Counter::Sent);
                // One clock read for both (a read costs ~50 ns on a VM).
                let end = std::time::Instant::now();
                let us = u64::try_from((end - started).as_micros()).unwrap_or(u64::MAX);
                m.latency.record(us);
                m.rate.add(clock::at(end), 1);
                crate::metrics::sent(us);
            }
            Err(e) => {
                self.inner.driver.counters().bump(Counter::Failed);
                let i = e.kind().index();
                if let Some(c) = m.failures.get(i) {
                    c.fetch_add(1, Ordering::Relaxed);
                }
                crate::metrics::failed(FailureCounts::NAMES[i]);
            }
        }
    }

    /// The monitoring numbers: counts, latency quantiles of successful sends (from the call
    /// to the broker's answer, retries included), sends per second, failures by kind.
    pub fn metrics(&self) -> ProducerMetrics {
        let m = &self.inner.metrics;
        ProducerMetrics {
            counters: self.counters(),
            latency_us: m.latency.summary(),
            sends_per_sec: m.rate.per_sec(clock::now()),
            failures: FailureCounts::from_fn(|i| m.failures[i].load(Ordering::Relaxed)),
            trace_dropped: self.inner.tracer.as_ref().map_or(0, Tracer::dropped),
        }
    }

    fn next_uniq(&self, unix_millis: i64) -> String {
        lock(&self.inner.uniq)
            .next_id_at(unix_millis, 0)
            .to_hex()
            .as_str()
            .to_owned()
    }

    /// The properties string of `m` (validated by the core, as every runtime does).
    fn message_props(
        &self,
        m: &Message,
        uniq: &str,
        role: Option<&Role>,
    ) -> Result<String, SendError> {
        let mut bytes = Vec::new();
        self.message_props_into(m, Some(uniq), role, &mut bytes)?;
        String::from_utf8(bytes).map_err(|_| SendError::new(SendErrorKind::Malformed, 0))
    }

    /// The properties of `m` appended to `out` (validated by the core, as every runtime does).
    fn message_props_into(
        &self,
        m: &Message,
        uniq: Option<&str>,
        role: Option<&Role>,
        out: &mut Vec<u8>,
    ) -> Result<(), SendError> {
        let keys = m.keys.join(keys::KEY_SEPARATOR);
        let mut fields = fields_of(m, &keys);
        let half = matches!(role, Some(Role::Half));
        // PGROUP: the group the broker checks back, as the heartbeat names it.
        fields.transaction = half.then_some(self.wire_group());
        fields.correlation = role.and_then(|r| r.correlation(&self.inner.client_id));
        let max = self.inner.cfg.max_message_size;
        let invalid = |e| match e {
            MessageError::Invalid(v) => SendError::new(SendErrorKind::Validation(v), 0),
            MessageError::BufferTooSmall => SendError::new(SendErrorKind::Malformed, 0),
        };
        // One pass into a stack buffer fits the usual properties (UNIQ_KEY, WAIT, a few
        // tags or keys); only longer ones are measured first.
        let mut small = [0u8; 512];
        match encode_message_properties(&m.topic, &m.body, max, &fields, uniq, &mut small) {
            Ok(n) => out.extend_from_slice(small.get(..n).unwrap_or(&[])),
            Err(MessageError::BufferTooSmall) => {
                let len = message_properties_len(&m.topic, &m.body, max, &fields, uniq)
                    .map_err(invalid)?;
                let at = out.len();
                out.resize(at + len, 0);
                let n = encode_message_properties(
                    &m.topic,
                    &m.body,
                    max,
                    &fields,
                    uniq,
                    out.get_mut(at..).unwrap_or(&mut []),
                )
                .map_err(invalid)?;
                out.truncate(at + n);
            }
            Err(e) => return Err(invalid(e)),
        }
        Ok(())
    }

    fn prepare<'m>(&self, m: &'m Message, role: Option<&Role>) -> Result<Prepared<'m>, SendError> {
        let half = matches!(role, Some(Role::Half));
        let born = clock::unix_millis();
        let uniq = self.next_uniq(born);
        let properties = self.message_props(m, &uniq, role)?;
        let mut body = m.body.clone();
        let mut sys_flag = if half {
            rmq_core::transaction::HALF_SYS_FLAG
        } else {
            0
        };
        let cfg = &self.inner.cfg;
        if let Some(bits) = compression_flags(
            body.len(),
            cfg.compress_msg_body_over_howmuch,
            false,
            cfg.compress_type,
        ) {
            // The configuration check made sure this build has the type.
            if let Some(c) =
                crate::zlib::compress_body(cfg.compress_type, &body, cfg.compress_level)
            {
                body = Bytes::from(c);
                sys_flag |= bits;
            }
        }
        Ok(Prepared {
            topic: self.wire(&m.topic),
            body,
            properties,
            sys_flag,
            flag: m.flag,
            batch: false,
            timer: m.timer.is_some(),
            reply: matches!(role, Some(Role::Reply(..))),
            msg_id: uniq,
            born,
        })
    }

    /// The batch of `msgs` (its result's `msg_id` left empty) and each message's UNIQ_KEY.
    fn prepare_batch<M: std::borrow::Borrow<Message>>(
        &self,
        msgs: &[M],
    ) -> Result<(Prepared<'static>, Vec<String>), SendError> {
        let bad = |why| SendError::new(SendErrorKind::InvalidBatch(why), 0);
        let rule = |e: RuleError| bad(e.as_str());
        let first = msgs.first().ok_or(rule(RuleError::Empty))?.borrow();
        let rules = BatchRules::new(&first.topic, first.wait_store_msg_ok).map_err(rule)?;
        let born = clock::unix_millis();
        let mut ids = Vec::with_capacity(msgs.len());
        // Every message's properties in one buffer: (end offset) per message.
        let mut props = Vec::with_capacity(msgs.len() * 64);
        let mut ends = Vec::with_capacity(msgs.len());
        for m in msgs {
            let m = m.borrow();
            rules.check(&m.topic, &fields_of(m, "")).map_err(rule)?;
            let id = self.next_uniq(born);
            self.message_props_into(m, Some(&id), None, &mut props)?;
            ends.push(props.len());
            ids.push(id);
        }
        let records = || {
            let starts = core::iter::once(0).chain(ends.iter().copied());
            msgs.iter()
                .zip(starts.zip(ends.iter().copied()))
                .map(|(m, (a, b))| BatchMessage {
                    flag: m.borrow().flag,
                    body: &m.borrow().body,
                    properties: Preencoded(props.get(a..b).unwrap_or(&[])),
                })
        };
        let len = rmq_core::message::batch::batch_encoded_len(records())
            .map_err(|_| bad("batch too large"))?;
        if len > self.inner.cfg.max_message_size {
            let kind = SendErrorKind::Validation(ValidationError::BodyTooLarge);
            return Err(SendError::new(kind, 0));
        }
        let mut body = vec![0u8; len];
        let n = encode_batch(records(), &mut body).map_err(|_| bad("batch encoding failed"))?;
        body.truncate(n);
        let mut p = vec![0u8; rules.properties_len()];
        let n = rules.write_properties(&mut p).map_err(rule)?;
        p.truncate(n);
        let prepared = Prepared {
            topic: Cow::Owned(self.wire(rules.topic()).into_owned()),
            body: Bytes::from(body),
            properties: String::from_utf8(p).map_err(|_| bad("batch encoding failed"))?,
            sys_flag: 0,
            flag: 0,
            batch: true,
            timer: false,
            reply: false,
            msg_id: String::new(),
            born,
        };
        Ok((prepared, ids))
    }

    async fn drive(
        &self,
        p: Prepared<'_>,
        mode: SendMode,
        target: Target,
    ) -> Result<SendResult, SendError> {
        let mut args = SendArgs::new(self.inner.cfg.retry_config(mode), p.body.len(), p.born);
        args.flag = p.flag;
        args.sys_flag = p.sys_flag;
        args.batch = p.batch;
        args.timer = p.timer;
        args.reply = p.reply;
        // The session waits for the route (within the send's one deadline) and fixes the
        // queue; a selector is asked once it knows how many queues there are.
        let mut choose = None;
        let name;
        args.target = match target {
            Target::Select | Target::Role(_) => session::Target::Select,
            Target::Queue(broker, queue_id) => {
                name = broker;
                session::Target::Queue {
                    broker: &name,
                    queue_id,
                }
            }
            Target::Key(k) => session::Target::Hash(java_string_hash(&k)),
            Target::Index(f) => {
                choose = Some(f);
                session::Target::Choose
            }
        };
        let d = &self.inner.driver;
        let (outcome, broker_name, recall_handle) = d
            .send(&p.topic, args, p.properties, p.body, choose)
            .await
            .map_err(refused)?;
        let receipt = match outcome {
            Ok(r) => r,
            Err(f) => {
                let mut e = send_error(&f);
                // What the last attempt's connection (or the NameServers) failed with.
                e.cause = if let (Some(b), SendErrorKind::Transport(_)) = (f.broker(), e.kind()) {
                    d.cause(Some(session::Peer::Broker(b)))
                } else if e.kind() == &SendErrorKind::NoNameServer {
                    d.cause(None)
                } else {
                    None
                }
                .map(Box::new);
                return Err(e);
            }
        };
        Ok(SendResult {
            status: receipt.status,
            msg_id: p.msg_id,
            offset_msg_id: receipt.offset_msg_id.as_str().to_owned(),
            queue: MessageQueue {
                // A single send's caller puts the message's topic here.
                topic: match p.topic {
                    Cow::Owned(t) => crate::client::app(self.inner.cfg.namespace.as_deref(), t),
                    Cow::Borrowed(_) => String::new(),
                },
                broker_name,
                queue_id: receipt.queue_id,
            },
            queue_offset: receipt.queue_offset.unwrap_or(-1),
            attempts: receipt.attempts,
            recall_handle,
        })
    }
}

fn refused(r: Refused) -> SendError {
    match r {
        Refused::Session(SubmitError::TopicTooLong) => {
            SendError::new(SendErrorKind::Validation(ValidationError::TopicTooLong), 0)
        }
        Refused::Session(e) => SendError::new(SendErrorKind::Capacity(e), 0),
        Refused::Stopped => SendError::new(SendErrorKind::Shutdown, 0),
        Refused::Timeout => SendError::new(SendErrorKind::Timeout, 0),
    }
}

/// The session's failure as rmq-std reports it.
/// What the core reads of `m` (`keys` already joined).
fn fields_of<'a>(
    m: &'a Message,
    keys: &'a str,
) -> MessageFields<'a, impl Iterator<Item = (&'a str, &'a str)> + Clone> {
    MessageFields {
        tags: m.tags.as_deref(),
        keys: Some(keys),
        delay_level: m.delay_level,
        wait_store_msg_ok: m.wait_store_msg_ok,
        timer: m.timer,
        transaction: None,
        correlation: None,
        user: m.properties.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    }
}

fn send_error(f: &SendFailure) -> SendError {
    let remark = |r: &heapless::String<{ session::MAX_REMARK }>| {
        (!r.is_empty()).then(|| r.as_str().to_owned())
    };
    let kind = match f {
        SendFailure::Plan {
            error, remark: r, ..
        } => match error.kind() {
            CoreKind::NoRoute => SendErrorKind::NoRoute,
            CoreKind::Broker { code } => match f.timer_refusal() {
                Some(refusal) => SendErrorKind::TimerRefused {
                    refusal,
                    code,
                    remark: remark(r),
                },
                None => SendErrorKind::Broker {
                    code,
                    remark: remark(r),
                },
            },
            CoreKind::Transport(t) => SendErrorKind::Transport(t),
            CoreKind::CallTimeout => SendErrorKind::Timeout,
        },
        SendFailure::NoNameServer => SendErrorKind::NoNameServer,
        SendFailure::NoSuchBroker => SendErrorKind::Transport(TransportError::BrokerNotFound),
        SendFailure::Authentication {
            code, remark: r, ..
        } => SendErrorKind::Authentication {
            code: *code,
            remark: remark(r),
        },
        SendFailure::MalformedResponse { .. } => SendErrorKind::Malformed,
        SendFailure::TimerRefused {
            refusal,
            code,
            remark: r,
            ..
        } => SendErrorKind::TimerRefused {
            refusal: *refusal,
            code: *code,
            remark: remark(r),
        },
        &SendFailure::TimerUnsupported { broker_version } => {
            SendErrorKind::TimerUnsupported { broker_version }
        }
        SendFailure::Encode(e) => SendErrorKind::Request(*e),
        SendFailure::Acl(e) => SendErrorKind::Signing(*e),
        SendFailure::TooManyRequests => SendErrorKind::Capacity(SubmitError::TooManySends),
    };
    let mut e = SendError::new(kind, f.attempts());
    // Whether trying again may help is the core's call.
    e.retryable = f.is_retryable();
    e.failure = Some(Box::new(f.clone()));
    e
}

/// A runtime request's answer (`None`: it does not decode), or the broker's refusal.
pub(crate) fn answered(a: Option<crate::conn::Answer>) -> Result<crate::conn::Answer, SendError> {
    match a {
        Some(a) if a.code == rmq_core::wire::ResponseCode::SUCCESS.0 => Ok(a),
        Some(a) => {
            let (code, remark) = (a.code, a.remark);
            Err(SendError::new(SendErrorKind::Broker { code, remark }, 1))
        }
        None => Err(SendError::new(SendErrorKind::Malformed, 1)),
    }
}

/// A runtime request that got no answer, as a [`SendError`]; `kind` says why it could not be
/// made.
pub(crate) fn ask_error<E>(e: AskError<E>, kind: impl FnOnce(E) -> SendErrorKind) -> SendError {
    let (kind, attempts, cause) = match e {
        AskError::Request(e) => (kind(e), 0, None),
        AskError::Timeout => (SendErrorKind::Timeout, 1, None),
        AskError::Lost(t, c) => (SendErrorKind::Transport(t), 1, c),
    };
    let mut err = SendError::new(kind, attempts);
    err.cause = cause.map(Box::new);
    err
}

/// A call the client could not make.
pub(crate) fn call_error(e: rmq_core::session::CallError) -> SendErrorKind {
    use rmq_core::session::CallError;
    match e {
        CallError::Acl(a) => SendErrorKind::Signing(a),
        CallError::Encode(e) => SendErrorKind::Request(e),
        _ => SendErrorKind::Capacity(SubmitError::TooManySends),
    }
}

/// Why a recall could not be asked.
fn recall_error(e: rmq_core::recall::RecallError) -> SendErrorKind {
    match e {
        rmq_core::recall::RecallError::NoRoute => SendErrorKind::NoRoute,
        rmq_core::recall::RecallError::Call(e) => call_error(e),
    }
}

#[cfg(test)]
mod tests;
