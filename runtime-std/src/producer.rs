//! The [`Producer`]: routes, connections, heartbeats and the send driver around the core
//! [`SendPlan`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use bytes::Bytes;
use rmq_core::message::properties::EncodeProperties;
use rmq_core::message::validate::{
    MAX_DELAY_LEVEL, validate_delay_level, validate_message, validate_user_property,
};
use rmq_core::message::{BatchMessage, PropertiesEncoder, UniqKeyGenerator, encode_batch, keys};
use rmq_core::producer::{
    COMPRESSION_LEVEL, DEFAULT_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, SendRequest, SendResponse,
    compression_flags, error_refresh_due, parse_send_response, write_heartbeat,
};
use rmq_core::retry::{
    Attempt, AttemptOutcome, SendEnv, SendErrorKind as CoreKind, SendMode, SendPlan, Step,
    TransportError,
};
use rmq_core::route::{PublishQueueRef, TopicRoute};
use rmq_core::select::{PublishQueue, select_by_index, select_by_sharding_key};
use rmq_core::wire::{CommandRepr, ResponseCode, Scratch};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{Instrument, debug, debug_span, info_span, warn};

use crate::client::Client;
use crate::clock;
use crate::config::{ProducerBuilder, ProducerConfig};
use crate::conn::{Encoding, Response};
use crate::message::{
    Message, MessageQueue, SendError, SendErrorKind, SendResult, is_auth_failure,
};
use crate::shared::{Counter, CountersSnapshot, Faults};
use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering, lock};

/// Route capacities: brokers (and queue datas) per route, bytes of names and addresses.
const ROUTE_BROKERS: usize = 32;
const ROUTE_STR: usize = 8192;
/// Publish queues per topic.
const MAX_QUEUES: usize = 1024;

/// A topic's publish queues, keyed by interned broker ids.
#[derive(Debug)]
struct TopicInfo {
    queues: Vec<PublishQueue<u16>>,
    from_default: bool,
}

#[derive(Debug, Default)]
struct Brokers {
    names: Vec<String>,
    by_name: HashMap<String, u16>,
}

impl Brokers {
    fn key(&mut self, name: &str) -> u16 {
        if let Some(k) = self.by_name.get(name) {
            return *k;
        }
        let k = u16::try_from(self.names.len()).unwrap_or(u16::MAX);
        self.names.push(name.to_owned());
        self.by_name.insert(name.to_owned(), k);
        k
    }
}

/// A route as the CLI shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteInfo {
    /// `(broker name, master address)` of every broker in the route.
    pub brokers: Vec<(String, Option<String>)>,
    /// The publish queues, in selection order.
    pub queues: Vec<MessageQueue>,
    /// Whether the topic does not exist and the TBW102 template route is used.
    pub from_default_topic: bool,
}

struct Prepared {
    topic: String,
    body: Bytes,
    properties: String,
    sys_flag: i32,
    flag: i32,
    batch: bool,
    msg_id: String,
    born: i64,
}

#[derive(Debug)]
struct Stored {
    number: u8,
    offset_msg_id: String,
    queue_id: i32,
    queue_offset: i64,
}

enum Target {
    Select,
    Queue(String, i32),
    Index(Box<dyn FnOnce(usize) -> usize + Send>),
    Key(String),
}

struct Inner {
    cfg: ProducerConfig,
    client: Client,
    faults: Faults,
    routes: Mutex<HashMap<String, Arc<TopicInfo>>>,
    error_refreshes: Mutex<HashMap<String, rmq_core::time::Instant>>,
    brokers: Mutex<Brokers>,
    uniq: Mutex<UniqKeyGenerator>,
    running: AtomicBool,
    active: AtomicU64,
    idle: Notify,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// A RocketMQ producer on tokio. Cheap to clone (all clones share one client).
///
/// Every send validates the message first (no byte is sent for an invalid one), finds the
/// topic's route (NameServer, cached, refreshed every `poll_name_server_interval`), and lets
/// the core [`SendPlan`] choose queues and retries within one total deadline
/// (`send_msg_timeout`).
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("client_id", &self.inner.client.client_id)
            .field("group", &self.inner.cfg.producer_group)
            .finish()
    }
}

struct ActiveGuard<'a>(&'a Inner);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Producer {
    /// A builder with the defaults described on [`ProducerBuilder`].
    pub fn builder() -> ProducerBuilder {
        ProducerBuilder::default()
    }

    pub(crate) fn start(cfg: ProducerConfig) -> Producer {
        let enc = Encoding {
            serialize_type: cfg.serialize_type,
            version: cfg.version,
            language: cfg.language,
        };
        let client = Client::new(
            &cfg.namesrv_addr,
            &cfg.instance_name,
            enc,
            cfg.max_requests_in_flight,
            &cfg.security,
            None,
        );
        let ip = client.ip;
        let profile = cfg.profile();
        let inner = Arc::new(Inner {
            client,
            faults: Faults::new(profile.update_rule(), clock::random_u32()),
            routes: Mutex::new(HashMap::new()),
            error_refreshes: Mutex::new(HashMap::new()),
            brokers: Mutex::new(Brokers::default()),
            uniq: Mutex::new(UniqKeyGenerator::new(
                ip,
                std::process::id(),
                clock::random_u32(),
            )),
            running: AtomicBool::new(true),
            active: AtomicU64::new(0),
            idle: Notify::new(),
            tasks: Mutex::new(Vec::new()),
            cfg,
        });
        let p = Producer { inner };
        let refresh = {
            let weak = Arc::downgrade(&p.inner);
            let every = p.inner.cfg.poll_name_server_interval;
            tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                loop {
                    tick.tick().await;
                    let Some(inner) = weak.upgrade() else { break };
                    Producer { inner }.refresh_all_routes().await;
                }
            })
        };
        let heartbeat = {
            let weak = Arc::downgrade(&p.inner);
            let every = p.inner.cfg.heartbeat_broker_interval;
            tokio::spawn(async move {
                let start = tokio::time::Instant::now() + StdDuration::from_secs(1);
                let mut tick = tokio::time::interval_at(start, every);
                loop {
                    tick.tick().await;
                    let Some(inner) = weak.upgrade() else { break };
                    Producer { inner }.heartbeat_all().await;
                }
            })
        };
        lock(&p.inner.tasks).extend([refresh, heartbeat]);
        p
    }

    /// The client id (`ip@instance`) announced in heartbeats.
    pub fn client_id(&self) -> &str {
        &self.inner.client.client_id
    }

    /// The configuration.
    pub fn config(&self) -> &ProducerConfig {
        &self.inner.cfg
    }

    /// The event counters.
    pub fn counters(&self) -> CountersSnapshot {
        self.inner.client.counters.snapshot()
    }

    /// Buffers and in-flight tables of the producer's connections (tests: memory bounds).
    #[doc(hidden)]
    pub fn connection_stats(&self) -> Vec<crate::conn::ConnStats> {
        self.inner.client.pool.stats()
    }

    /// Sends `msg` and waits for the broker (SYNC: up to `1 + retry_times_when_send_failed`
    /// attempts, retrying transport failures and retryable broker codes).
    ///
    /// # Errors
    /// [`SendError`]: validation (nothing sent), no route, broker code, transport, timeout.
    pub async fn send(&self, msg: Message) -> Result<SendResult, SendError> {
        self.send_with(msg, SendMode::Sync, Target::Select).await
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
        let _g = match self.enter() {
            Ok(g) => g,
            Err(e) => return Err(e),
        };
        let r = match self.prepare_batch(msgs) {
            Ok(p) => {
                let span = info_span!("send_batch", topic = %p.topic);
                self.drive(p, SendMode::Sync, Target::Select)
                    .instrument(span)
                    .await
            }
            Err(e) => Err(e),
        };
        self.count(&r);
        r
    }

    /// The route of `topic` as the producer sees it (fetched now).
    ///
    /// # Errors
    /// [`SendErrorKind::NoRoute`] or [`SendErrorKind::NoNameServer`].
    pub async fn route(&self, topic: &str) -> Result<RouteInfo, SendError> {
        let (resp, from_default) = self
            .fetch_route_body(topic)
            .await
            .map_err(|k| SendError::new(k, 0))?;
        let route = TopicRoute::<ROUTE_BROKERS, ROUTE_STR>::parse(resp.body())
            .map_err(|_| SendError::new(SendErrorKind::NoRoute, 0))?;
        let mut qs = heapless::Vec::<PublishQueueRef, MAX_QUEUES>::new();
        route
            .publish_queues(from_default.then_some(DEFAULT_TOPIC_QUEUE_NUMS), &mut qs)
            .map_err(|_| SendError::new(SendErrorKind::NoRoute, 0))?;
        Ok(RouteInfo {
            brokers: route
                .brokers()
                .map(|b| (b.name().to_owned(), b.addr(0).map(str::to_owned)))
                .collect(),
            queues: qs
                .iter()
                .map(|q| MessageQueue {
                    topic: topic.to_owned(),
                    broker_name: route.broker_name(q.broker).unwrap_or("").to_owned(),
                    queue_id: q.queue_id,
                })
                .collect(),
            from_default_topic: from_default,
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
        let deadline = tokio::time::Instant::now() + drain;
        loop {
            let idle = self.inner.idle.notified();
            if self.inner.active.load(Ordering::Acquire) == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                warn!(
                    active = self.inner.active.load(Ordering::Acquire),
                    "shutdown: sends still in progress at the drain deadline"
                );
                break;
            }
        }
        for t in lock(&self.inner.tasks).drain(..) {
            t.abort();
        }
        let group = Some(self.inner.cfg.producer_group.as_str());
        self.inner.client.shutdown(group, None).await;
    }

    fn enter(&self) -> Result<ActiveGuard<'_>, SendError> {
        self.inner.active.fetch_add(1, Ordering::AcqRel);
        let g = ActiveGuard(&self.inner);
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
        let span = info_span!("send", topic = %msg.topic, mode = ?mode);
        let r = async {
            let p = self.prepare(msg)?;
            self.drive(p, mode, target).await
        }
        .instrument(span)
        .await;
        self.count(&r);
        r
    }

    fn count<T>(&self, r: &Result<T, SendError>) {
        self.inner.client.counters.bump(if r.is_ok() {
            Counter::Sent
        } else {
            Counter::Failed
        });
    }

    fn next_uniq(&self) -> String {
        lock(&self.inner.uniq)
            .next_id_at(clock::unix_millis(), 0)
            .to_hex()
            .as_str()
            .to_owned()
    }

    fn encode_props(entries: &[(&str, &str)]) -> Result<String, SendError> {
        let enc = PropertiesEncoder::new(entries.iter().copied());
        let mut buf = vec![0u8; enc.encoded_len()];
        let n = enc.encode(&mut buf).map_err(|_| {
            SendError::new(
                SendErrorKind::Validation(
                    rmq_core::message::validate::ValidationError::PropertySeparator,
                ),
                0,
            )
        })?;
        buf.truncate(n);
        String::from_utf8(buf).map_err(|_| SendError::new(SendErrorKind::Malformed, 0))
    }

    fn message_props(&self, m: &Message, uniq: Option<&str>) -> Result<String, SendError> {
        let invalid = |e| SendError::new(SendErrorKind::Validation(e), 0);
        validate_message(&m.topic, &m.body, self.inner.cfg.max_message_size).map_err(invalid)?;
        for (k, v) in &m.properties {
            validate_user_property(k, v).map_err(invalid)?;
        }
        let delay = match m.delay_level {
            Some(l) => {
                validate_delay_level(l, MAX_DELAY_LEVEL).map_err(invalid)?;
                Some(l.to_string())
            }
            None => None,
        };
        let joined_keys = m.keys.join(keys::KEY_SEPARATOR);
        let mut entries: Vec<(&str, &str)> = Vec::with_capacity(6 + m.properties.len());
        if let Some(t) = &m.tags {
            entries.push((keys::TAGS, t));
        }
        if !joined_keys.is_empty() {
            entries.push((keys::KEYS, &joined_keys));
        }
        if let Some(d) = &delay {
            entries.push((keys::DELAY_TIME_LEVEL, d));
        }
        entries.push((
            keys::WAIT_STORE_MSG_OK,
            if m.wait_store_msg_ok { "true" } else { "false" },
        ));
        if let Some(u) = uniq {
            entries.push((keys::UNIQ_KEY, u));
        }
        for (k, v) in &m.properties {
            entries.push((k, v));
        }
        Self::encode_props(&entries)
    }

    fn prepare(&self, m: Message) -> Result<Prepared, SendError> {
        let uniq = self.next_uniq();
        let properties = self.message_props(&m, Some(&uniq))?;
        let mut body = m.body;
        let mut sys_flag = 0;
        if let Some(bits) = compression_flags(
            body.len(),
            self.inner.cfg.compress_msg_body_over_howmuch,
            false,
        ) {
            body = Bytes::from(crate::zlib::compress_zlib(&body, COMPRESSION_LEVEL));
            sys_flag |= bits;
        }
        Ok(Prepared {
            topic: m.topic,
            body,
            properties,
            sys_flag,
            flag: m.flag,
            batch: false,
            msg_id: uniq,
            born: clock::unix_millis(),
        })
    }

    fn prepare_batch(&self, msgs: Vec<Message>) -> Result<Prepared, SendError> {
        let bad = |why| SendError::new(SendErrorKind::InvalidBatch(why), 0);
        let first = msgs.first().ok_or_else(|| bad("empty batch"))?;
        let topic = first.topic.clone();
        let wait = first.wait_store_msg_ok;
        let mut ids = Vec::with_capacity(msgs.len());
        let mut props = Vec::with_capacity(msgs.len());
        for m in &msgs {
            if m.topic != topic {
                return Err(bad("messages of a batch must share one topic"));
            }
            if m.delay_level.is_some() {
                return Err(bad("delay levels are not supported in a batch"));
            }
            if m.wait_store_msg_ok != wait {
                return Err(bad("messages of a batch must share waitStoreMsgOK"));
            }
            let id = self.next_uniq();
            props.push(self.message_props(m, Some(&id))?);
            ids.push(id);
        }
        let records = || {
            msgs.iter().zip(&props).map(|(m, p)| BatchMessage {
                flag: m.flag,
                body: &m.body,
                properties: rmq_core::message::properties::Preencoded(p.as_bytes()),
            })
        };
        let len = rmq_core::message::batch::batch_encoded_len(records())
            .map_err(|_| bad("batch too large"))?;
        if len > self.inner.cfg.max_message_size {
            return Err(SendError::new(
                SendErrorKind::Validation(
                    rmq_core::message::validate::ValidationError::BodyTooLarge,
                ),
                0,
            ));
        }
        let mut body = vec![0u8; len];
        let n = encode_batch(records(), &mut body).map_err(|_| bad("batch encoding failed"))?;
        body.truncate(n);
        let properties =
            Self::encode_props(&[(keys::WAIT_STORE_MSG_OK, if wait { "true" } else { "false" })])?;
        Ok(Prepared {
            topic,
            body: Bytes::from(body),
            properties,
            sys_flag: 0,
            flag: 0,
            batch: true,
            msg_id: ids.join(","),
            born: clock::unix_millis(),
        })
    }

    async fn drive(
        &self,
        p: Prepared,
        mode: SendMode,
        target: Target,
    ) -> Result<SendResult, SendError> {
        let topic = p.topic.clone();
        let r = self.drive_plan(p, mode, target).await;
        if let Err(e) = &r
            && !matches!(
                e.kind(),
                SendErrorKind::Validation(_) | SendErrorKind::InvalidBatch(_)
            )
        {
            self.refresh_after_error(topic);
        }
        r
    }

    /// A failed send refreshes its topic's route in the background (rate-limited per topic).
    fn refresh_after_error(&self, topic: String) {
        let now = clock::now();
        {
            let mut last = lock(&self.inner.error_refreshes);
            if !error_refresh_due(last.get(&topic).copied(), now) {
                return;
            }
            last.insert(topic.clone(), now);
        }
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.refresh_route(&topic).await {
                debug!(topic, ?e, "route refresh after a failed send failed");
            }
        });
    }

    async fn drive_plan(
        &self,
        p: Prepared,
        mode: SendMode,
        target: Target,
    ) -> Result<SendResult, SendError> {
        let info = self
            .topic_info(&p.topic)
            .await
            .map_err(|k| SendError::new(k, 0))?;
        let cfg = self.inner.cfg.retry_config(mode);
        let now = clock::now();
        let no_route = || SendError::new(SendErrorKind::NoRoute, 0);
        let mut plan = match target {
            Target::Select => SendPlan::new(now, cfg),
            Target::Queue(name, queue_id) => {
                let broker = lock(&self.inner.brokers).key(&name);
                SendPlan::to_queue(now, cfg, PublishQueue { broker, queue_id })
            }
            Target::Index(f) => {
                let idx = f(info.queues.len());
                SendPlan::to_queue(
                    now,
                    cfg,
                    select_by_index(&info.queues, idx).ok_or_else(no_route)?,
                )
            }
            Target::Key(k) => SendPlan::to_queue(
                now,
                cfg,
                select_by_sharding_key(&info.queues, &k).ok_or_else(no_route)?,
            ),
        };
        let mut step = self.plan_step(&info, |env| plan.start(now, env), None);
        let mut stored: Vec<Stored> = Vec::new();
        let mut remark: Option<String> = None;
        loop {
            match step {
                Step::Send(att) => {
                    self.inner.client.counters.bump(Counter::Attempts);
                    if att.number > 1 {
                        self.inner.client.counters.bump(Counter::Retried);
                    }
                    let span = debug_span!(
                        "attempt",
                        n = att.number,
                        broker = att.queue.broker,
                        queue = att.queue.queue_id,
                        template_route = info.from_default
                    );
                    let (outcome, st, rk) = self.attempt(&p, &att, mode).instrument(span).await;
                    debug!(?outcome, "attempt ended");
                    if let AttemptOutcome::Response(code) = outcome
                        && is_auth_failure(code, rk.as_deref())
                    {
                        // The same credentials fail the same way on every broker: no retry.
                        let kind = SendErrorKind::Authentication { code, remark: rk };
                        return Err(SendError::new(kind, att.number));
                    }
                    if let Some(s) = st {
                        stored.push(s);
                    }
                    if rk.is_some() {
                        remark = rk;
                    }
                    let now = clock::now();
                    step = self.plan_step(
                        &info,
                        |env| plan.handle_outcome(now, outcome, env),
                        Some((now, att.queue.broker)),
                    );
                }
                Step::Wait => {
                    // The plan only waits with an attempt in flight, which we never leave
                    // behind; treat it as that attempt's timeout.
                    let Some(at) = plan.poll_timeout() else {
                        return Err(SendError::new(SendErrorKind::Timeout, plan.attempts_made()));
                    };
                    tokio::time::sleep_until(clock::to_tokio(at)).await;
                    let now = clock::now();
                    step = self.plan_step(&info, |env| plan.handle_timeout(now, env), None);
                }
                Step::Done(Ok(sent)) => {
                    let names = lock(&self.inner.brokers);
                    let broker_name = names
                        .names
                        .get(usize::from(sent.queue.broker))
                        .cloned()
                        .unwrap_or_default();
                    drop(names);
                    let queue = MessageQueue {
                        topic: p.topic.clone(),
                        broker_name,
                        queue_id: sent.queue.queue_id,
                    };
                    if mode == SendMode::Oneway {
                        return Ok(SendResult {
                            status: sent.status,
                            msg_id: p.msg_id,
                            offset_msg_id: String::new(),
                            queue,
                            queue_offset: -1,
                            attempts: sent.attempts,
                        });
                    }
                    let Some(s) = stored.into_iter().rev().find(|s| s.number == sent.attempts)
                    else {
                        return Err(SendError::new(SendErrorKind::Malformed, sent.attempts));
                    };
                    return Ok(SendResult {
                        status: sent.status,
                        msg_id: p.msg_id,
                        offset_msg_id: s.offset_msg_id,
                        queue: MessageQueue {
                            queue_id: s.queue_id,
                            ..queue
                        },
                        queue_offset: s.queue_offset,
                        attempts: sent.attempts,
                    });
                }
                Step::Done(Err(e)) => {
                    let kind = match e.kind() {
                        CoreKind::NoRoute => SendErrorKind::NoRoute,
                        CoreKind::Broker { code } => SendErrorKind::Broker {
                            code,
                            remark: remark.take(),
                        },
                        CoreKind::Transport(t) => SendErrorKind::Transport(t),
                        _ => SendErrorKind::Timeout,
                    };
                    let mut err = SendError::new(kind, e.attempts());
                    err.retryable = e.is_retryable();
                    return Err(err);
                }
            }
        }
    }

    /// Runs one plan transition with the fault table locked; counts a broker that went from
    /// available to isolated.
    fn plan_step(
        &self,
        info: &TopicInfo,
        f: impl FnOnce(&mut SendEnv<'_, u16, { crate::shared::FAULT_CAPACITY }>) -> Step<u16>,
        watch: Option<(rmq_core::time::Instant, u16)>,
    ) -> Step<u16> {
        let entropy = clock::random_u32();
        self.inner.faults.with(|st| {
            let before = watch.map(|(now, b)| st.table.is_available(now, b));
            let mut env = SendEnv {
                queues: &info.queues,
                table: &mut st.table,
                counter: &mut st.counter,
                entropy,
            };
            let step = f(&mut env);
            if let (Some(true), Some((now, b))) = (before, watch)
                && !st.table.is_available(now, b)
            {
                self.inner.client.counters.bump(Counter::Isolated);
            }
            step
        })
    }

    fn master_of(&self, broker: u16) -> (String, Option<String>) {
        let b = lock(&self.inner.brokers);
        let name = b
            .names
            .get(usize::from(broker))
            .cloned()
            .unwrap_or_default();
        drop(b);
        let addr = self.inner.client.master(&name);
        (name, addr)
    }

    async fn attempt(
        &self,
        p: &Prepared,
        att: &Attempt<u16>,
        mode: SendMode,
    ) -> (AttemptOutcome, Option<Stored>, Option<String>) {
        let transport = |t| (AttemptOutcome::Transport(t), None, None);
        let (name, mut addr) = self.master_of(att.queue.broker);
        if addr.is_none() {
            // Java refreshes the route once when the broker address is unknown.
            let _ = self.refresh_route(&p.topic).await;
            addr = self.master_of(att.queue.broker).1;
        }
        let Some(addr) = addr else {
            return transport(TransportError::BrokerNotFound);
        };
        let conn = match self.inner.client.pool.get(&addr).await {
            Ok(c) => c,
            Err(e) => return transport(e),
        };
        let cfg = &self.inner.cfg;
        let req = SendRequest::new(
            &cfg.producer_group,
            &p.topic,
            att.queue.queue_id,
            &name,
            &p.properties,
            p.born,
        )
        .flag(p.flag)
        .sys_flag(p.sys_flag)
        .batch(p.batch);
        let build =
            |opaque| CommandRepr::request(req.code(), opaque, cfg.version, Some(req.header()));
        if mode == SendMode::Oneway {
            return match conn
                .oneway(self.inner.client.enc, build, p.body.clone(), att.deadline)
                .await
            {
                Ok(()) => (AttemptOutcome::Written, None, None),
                Err(e) => transport(e),
            };
        }
        let resp = match conn
            .request(self.inner.client.enc, build, p.body.clone(), att.deadline)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                if e == TransportError::TimedOut && !conn.answered_since(att.started) {
                    warn!(
                        addr,
                        "nothing answered on the connection since the request: closing it"
                    );
                    conn.close();
                }
                return transport(e);
            }
        };
        let Some(h) = resp.header() else {
            return transport(TransportError::ConnectionClosed);
        };
        let mut sbuf = [0u8; 512];
        let mut scratch = Scratch::new(&mut sbuf);
        match parse_send_response(&h, &mut scratch) {
            Ok(SendResponse::Stored {
                code,
                offset_msg_id,
                queue_id,
                queue_offset,
                ..
            }) => (
                AttemptOutcome::Response(code),
                Some(Stored {
                    number: att.number,
                    offset_msg_id: offset_msg_id.to_owned(),
                    queue_id,
                    queue_offset,
                }),
                None,
            ),
            Ok(SendResponse::Rejected { code }) => {
                (AttemptOutcome::Response(code), None, resp.remark())
            }
            Err(_) => (AttemptOutcome::Response(h.code()), None, None),
        }
    }

    async fn topic_info(&self, topic: &str) -> Result<Arc<TopicInfo>, SendErrorKind> {
        if let Some(i) = lock(&self.inner.routes).get(topic).cloned()
            && !i.queues.is_empty()
        {
            return Ok(i);
        }
        self.refresh_route(topic).await
    }

    /// The route body of `topic`, or of TBW102 when the topic does not exist
    /// (`(response, from_default)`).
    async fn fetch_route_body(&self, topic: &str) -> Result<(Response, bool), SendErrorKind> {
        let r = self.namesrv_route(topic).await?;
        match ResponseCode(r.code()) {
            ResponseCode::SUCCESS => Ok((r, false)),
            ResponseCode::TOPIC_NOT_EXIST => {
                let d = self.namesrv_route(DEFAULT_TOPIC).await?;
                if d.code() == ResponseCode::SUCCESS.0 {
                    Ok((d, true))
                } else {
                    Err(SendErrorKind::NoRoute)
                }
            }
            _ => Err(SendErrorKind::NoRoute),
        }
    }

    async fn namesrv_route(&self, topic: &str) -> Result<Response, SendErrorKind> {
        let r = self.inner.client.route_request(topic).await;
        r.ok_or(SendErrorKind::NoNameServer)
    }

    async fn refresh_route(&self, topic: &str) -> Result<Arc<TopicInfo>, SendErrorKind> {
        let (resp, from_default) = self.fetch_route_body(topic).await?;
        let info = self.install_route(topic, resp.body(), from_default)?;
        Ok(info)
    }

    fn install_route(
        &self,
        topic: &str,
        body: &[u8],
        from_default: bool,
    ) -> Result<Arc<TopicInfo>, SendErrorKind> {
        let route = Box::new(
            TopicRoute::<ROUTE_BROKERS, ROUTE_STR>::parse(body)
                .map_err(|_| SendErrorKind::NoRoute)?,
        );
        let mut qs = Box::new(heapless::Vec::<PublishQueueRef, MAX_QUEUES>::new());
        route
            .publish_queues(from_default.then_some(DEFAULT_TOPIC_QUEUE_NUMS), &mut qs)
            .map_err(|_| SendErrorKind::NoRoute)?;
        self.inner.client.note_masters(&route);
        let mut brokers = lock(&self.inner.brokers);
        let keys: Vec<u16> = route.brokers().map(|b| brokers.key(b.name())).collect();
        drop(brokers);
        let queues: Vec<PublishQueue<u16>> = qs
            .iter()
            .filter_map(|q| {
                Some(PublishQueue {
                    broker: *keys.get(q.broker)?,
                    queue_id: q.queue_id,
                })
            })
            .collect();
        if queues.is_empty() {
            return Err(SendErrorKind::NoRoute);
        }
        let info = Arc::new(TopicInfo {
            queues,
            from_default,
        });
        lock(&self.inner.routes).insert(topic.to_owned(), info.clone());
        debug!(
            topic,
            queues = info.queues.len(),
            from_default,
            "route installed"
        );
        Ok(info)
    }

    async fn refresh_all_routes(&self) {
        let topics: Vec<String> = lock(&self.inner.routes).keys().cloned().collect();
        for t in topics {
            if let Err(e) = self.refresh_route(&t).await {
                debug!(topic = %t, ?e, "route refresh failed");
            }
        }
    }

    async fn heartbeat_all(&self) {
        let client = &self.inner.client;
        let group = &self.inner.cfg.producer_group;
        let mut buf = vec![0u8; 1024 + client.client_id.len() + group.len() * 2];
        let flavor = client.heartbeat_flavor();
        let Ok(n) = write_heartbeat(&client.client_id, &[group], flavor, &mut buf) else {
            return;
        };
        buf.truncate(n);
        client.heartbeat_all(Bytes::from(buf)).await;
    }
}
