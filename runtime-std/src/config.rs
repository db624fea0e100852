//! [`ProducerBuilder`]: the Java client's knobs, under their Java names.

use std::fmt;
use std::time::Duration;

use rmq_core::fault::AdaptiveConfig;
use rmq_core::message::CompressionType;
use rmq_core::message::validate::{
    DEFAULT_MAX_MESSAGE_SIZE, GROUP_MAX_LEN, validate_group, validate_topic,
};
use rmq_core::producer::{
    DEFAULT_COMPRESS_OVER, HEARTBEAT_BROKER_INTERVAL, POLL_NAME_SERVER_INTERVAL,
    compression_supported,
};
use rmq_core::retry::{RetryConfig, SendMode};
use rmq_core::select::Profile;
use rmq_core::wire::{LanguageCode, SerializeType, version};

use crate::Producer;
use crate::clock;

/// Which fault-tolerance policy picks queues when `send_latency_fault_enable` is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultProfile {
    /// Java 4.9.8 `MQFaultStrategy`.
    Java49,
    /// Java 5.3.3 `MQFaultStrategy`.
    Java5,
    /// Ours: latency-aware isolation with exponential back-off and probing (rmq-core
    /// `Profile::Adaptive`).
    Adaptive,
}

/// Why a producer could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No NameServer address.
    NoNameServer,
    /// The producer group is invalid.
    Group(rmq_core::message::validate::ValidationError),
    /// The instance name is empty.
    InstanceName,
    /// ACL is configured with an empty access key.
    AclAccessKey,
    /// The core session refused the configuration (e.g. a client id or group too long).
    Session(rmq_core::session::ConfigError),
    /// The compression type is not readable by consumers of the configured version (LZ4 and
    /// zstd need 4.9.4+), or this build lacks its feature (`lz4`, `zstd`).
    Compression(CompressionType),
    /// A topic of [`ProducerBuilder::topics`] is not a valid topic name.
    Topic(String, rmq_core::message::validate::ValidationError),
    /// The client session could not take every topic of [`ProducerBuilder::topics`].
    TopicTable(rmq_core::session::SubmitError),
    /// No NameServer answered the start's route lookups (the last NameServer connection's
    /// error, if one failed). [`ProducerBuilder::lazy_start`] starts anyway.
    NameServersUnreachable(Option<crate::ConnectionError>),
    /// The start's fetch of the NameServer list ([`ProducerBuilder::namesrv_domain`]) failed.
    Discovery(crate::DiscoveryError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoNameServer => f.write_str("no name server address, please set it"),
            ConfigError::Group(e) => write!(f, "invalid producer group: {e}"),
            ConfigError::InstanceName => f.write_str("instance name is empty"),
            ConfigError::AclAccessKey => f.write_str("ACL access key is empty"),
            ConfigError::Session(e) => write!(f, "client session: {e}"),
            ConfigError::Compression(t) => write!(
                f,
                "{t:?} compression: consumers before 4.9.4 cannot read it (raise `version`), \
                 or this build lacks the feature"
            ),
            ConfigError::Topic(t, e) => write!(f, "topic {t:?}: {e}"),
            ConfigError::TopicTable(e) => write!(f, "topics: {e}"),
            ConfigError::NameServersUnreachable(_) => {
                f.write_str("no NameServer answered the start")
            }
            ConfigError::Discovery(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::NameServersUnreachable(Some(e)) => Some(e),
            ConfigError::Discovery(e) => Some(e),
            _ => None,
        }
    }
}

/// ACL 1.0 credentials (`AclClientRPCHook`): every request is signed with them. The secret
/// key never leaves the process and is not shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct AclConfig {
    /// `AccessKey`.
    pub access_key: String,
    /// The secret key.
    pub secret_key: String,
    /// Optional `SecurityToken`.
    pub security_token: Option<String>,
}

impl AclConfig {
    /// The credentials as the core signs with them.
    pub fn credentials(&self) -> rmq_core::acl::Credentials<'_> {
        rmq_core::acl::Credentials {
            access_key: &self.access_key,
            secret_key: &self.secret_key,
            security_token: self.security_token.as_deref(),
        }
    }
}

impl fmt::Debug for AclConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AclConfig")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field(
                "security_token",
                &self.security_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// How a client talks to its brokers: ACL credentials and TLS, shared by [`ProducerBuilder`]
/// and [`crate::consumer::ConsumerBuilder`] (their `acl` and `tls` knobs).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct SecurityConfig {
    /// ACL credentials: when set, every request is signed.
    pub acl: Option<AclConfig>,
    /// TLS to brokers (and to NameServers if [`crate::TlsConfig::name_server_too`]).
    #[cfg(feature = "tls")]
    pub tls: Option<crate::tls::TlsConfig>,
    /// Namespace v2 ([`rmq_core::namespace::V2Fields`]): `nsd`/`ns` on every request, signed
    /// with the rest (see the builders' `namespace_v2`).
    pub namespace_v2: Option<String>,
}

impl SecurityConfig {
    /// The TLS settings for a connection to a NameServer (`name_server`) or a broker.
    pub(crate) fn tls_for(&self, name_server: bool) -> Option<crate::conn::Tls> {
        #[cfg(feature = "tls")]
        return self
            .tls
            .clone()
            .filter(|t| !name_server || t.applies_to_name_server());
        #[cfg(not(feature = "tls"))]
        {
            let _ = name_server;
            None
        }
    }

    /// Whether ACL is configured with an empty access key.
    pub fn empty_access_key(&self) -> bool {
        self.acl.as_ref().is_some_and(|a| a.access_key.is_empty())
    }
}

/// The `acl` and `tls` knobs of a builder whose configuration is `self.cfg` with a
/// `security: SecurityConfig` field.
macro_rules! client_knobs {
    () => {
        /// NameServer addresses; `a:9876;b:9876` is split on `;` (call again to add more).
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

        /// Namespace v1 (Java `ClientConfig.namespace`): topic `T` and group `G` are `ns%T` and
        /// `ns%G` on the wire (retry and dead-letter topics `%RETRY%ns%G`, `%DLQ%ns%G`; system
        /// topics unchanged, [`rmq_core::namespace`]); the names the application gets back
        /// (results, consumed messages, queues) are without it. Empty: none (the default).
        #[must_use]
        pub fn namespace(mut self, namespace: &str) -> Self {
            self.cfg.namespace = Some(namespace.to_owned()).filter(|n| !n.is_empty());
            self
        }

        /// Namespace v2 (Java `ClientConfig.namespaceV2`, its `NamespaceRpcHook`): every request
        /// carries `nsd=true` and `ns=<namespace>`, signed with the rest under ACL; names are
        /// not wrapped. For managed instances that read them (the open-source broker ignores
        /// them). Empty: none (the default).
        #[must_use]
        pub fn namespace_v2(mut self, namespace: &str) -> Self {
            self.cfg.security.namespace_v2 = Some(namespace.to_owned()).filter(|n| !n.is_empty());
            self
        }

        /// Without [`namesrv_addr`](Self::namesrv_addr): the NameServer list is fetched from
        /// `domain` at the start (which fails if it cannot be) and followed while the client
        /// runs (Java's `rocketmq.namesrv.domain`; see [`crate::NamesrvDomain`]).
        #[must_use]
        pub fn namesrv_domain(mut self, domain: crate::NamesrvDomain) -> Self {
            self.cfg.namesrv_domain = Some(domain);
            self
        }

        /// Signs every request with ACL 1.0 credentials (Java `AclClientRPCHook`): `AccessKey`,
        /// the optional `SecurityToken` and `Signature` (HMAC-SHA1 over the sorted ext-field
        /// values and the body actually sent) are added to the request's ext fields. A broker
        /// that refuses the credentials answers with an error: a send fails at once with
        /// [`crate::SendErrorKind::Authentication`] (not retried: the same keys fail the same
        /// way); a consumer is assigned no queue and receives nothing.
        #[must_use]
        pub fn acl(
            mut self,
            access_key: &str,
            secret_key: &str,
            security_token: Option<&str>,
        ) -> Self {
            self.cfg.security.acl = Some($crate::AclConfig {
                access_key: access_key.to_owned(),
                secret_key: secret_key.to_owned(),
                security_token: security_token.map(str::to_owned),
            });
            self
        }

        /// Connects to brokers over TLS with `tls` (rustls; feature `tls`, on by default): e.g.
        /// `TlsConfig::with_ca_pem(ca_pem)?` to trust a private CA. NameServers stay plain TCP
        /// unless [`crate::TlsConfig::name_server_too`] is set. A failed handshake fails the
        /// connect like any other (`TransportError::ConnectFailed`).
        #[must_use]
        #[cfg(feature = "tls")]
        pub fn tls(mut self, tls: $crate::TlsConfig) -> Self {
            self.cfg.security.tls = Some(tls);
            self
        }
    };
}
pub(crate) use client_knobs;

/// A client's settled configuration and its builder from one table, a line a knob:
/// `field: Type = default` (the builder's default) and optionally `=> setter(Arg)`, a builder
/// method that sets the field with `.into()`. Each knob's docs go on the field and the setter.
macro_rules! config_table {
    (
        $(#[$cmeta:meta])* pub struct $cfg:ident;
        $(#[$bmeta:meta])* pub struct $builder:ident;
        $($(#[$doc:meta])* $field:ident: $ty:ty = $default:expr $(=> $setter:ident($arg:ty))?;)*
    ) => {
        $(#[$cmeta])*
        #[derive(Clone, Debug)]
        #[non_exhaustive]
        pub struct $cfg { $($(#[$doc])* pub $field: $ty,)* }

        $(#[$bmeta])*
        #[derive(Clone, Debug)]
        pub struct $builder { cfg: $cfg }

        impl Default for $builder {
            fn default() -> Self { $builder { cfg: $cfg { $($field: $default,)* } } }
        }

        impl $builder {
            $($crate::config::config_table!(@setter [$(#[$doc])*] $field $($setter($arg))?);)*
        }
    };
    (@setter [$(#[$doc:meta])*] $field:ident $setter:ident($arg:ty)) => {
        $(#[$doc])*
        #[must_use]
        pub fn $setter(mut self, v: $arg) -> Self {
            self.cfg.$field = v.into();
            self
        }
    };
    (@setter [$(#[$doc:meta])*] $field:ident) => {};
}
pub(crate) use config_table;

/// The runtime's default [`AdaptiveConfig`]: the core defaults with a per-attempt cap of at
/// least 1 s (4 × the latency estimate, 2 s before any sample). The core's 200 ms floor and
/// 2 × estimate cut attempts short whenever a burst queues up behind a cold broker; a cut
/// attempt is retried on another queue while the first copy is usually stored anyway, so a
/// short cap turns bursts into duplicates.
pub const RUNTIME_ADAPTIVE: AdaptiveConfig = AdaptiveConfig {
    cap_multiplier: 4,
    cap_floor: rmq_core::time::Duration::from_millis(1000),
    initial_cap: rmq_core::time::Duration::from_millis(2000),
    ..AdaptiveConfig::DEFAULT
};

impl ProducerConfig {
    /// The core retry configuration for `mode`.
    pub fn retry_config(&self, mode: SendMode) -> RetryConfig {
        let mut c = if !self.send_latency_fault_enable {
            RetryConfig::plain(mode)
        } else {
            match self.fault_profile {
                FaultProfile::Java49 => RetryConfig::java49(mode),
                FaultProfile::Java5 => RetryConfig::java5(mode),
                FaultProfile::Adaptive => RetryConfig::adaptive(mode),
            }
        };
        c.send_timeout = clock::to_core(self.send_msg_timeout);
        c.retry_times_when_send_failed = self.retry_times_when_send_failed;
        c.retry_times_when_send_async_failed = self.retry_times_when_send_async_failed;
        c.retry_another_broker_when_not_store_ok = self.retry_another_broker_when_not_store_ok;
        c.adaptive = self.adaptive;
        c
    }

    /// The selection profile in force.
    pub fn profile(&self) -> Profile {
        self.retry_config(SendMode::Sync).profile
    }
}

config_table! {
    /// The settled configuration of a producer.
    pub struct ProducerConfig;
    /// Builds a [`Producer`].
    ///
    /// Defaults are Java's (docs/protocol/STRATEGY.md §5.1) except two deliberate differences:
    /// - `send_latency_fault_enable` is **on** with the [`FaultProfile::Adaptive`] policy (Java's
    ///   default is off): a dead broker is fenced after its first failures instead of being
    ///   retried round-robin;
    /// - the language sent is **RUST** (12); brokers older than 4.9.4 do not know it, so use
    ///   [`ProducerBuilder::language`] with `LanguageCode::JAVA` for them.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use rmq_std::{Message, Producer};
    /// let producer = Producer::builder()
    ///     .namesrv_addr("127.0.0.1:9876")
    ///     .producer_group("pg-demo")
    ///     .start()
    ///     .await?;
    /// let r = producer.send(Message::new("TopicA", "hello")).await?;
    /// println!("{} -> {:?}", r.msg_id, r.queue);
    /// producer.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub struct ProducerBuilder;
    /// NameServer addresses.
    namesrv_addr: Vec<String> = Vec::new();
    /// Where the NameServer list is fetched from when `namesrv_addr` is empty
    /// ([`ProducerBuilder::namesrv_domain`]).
    namesrv_domain: Option<crate::NamesrvDomain> = None;
    /// Namespace v1 ([`ProducerBuilder::namespace`]).
    namespace: Option<String> = None;
    /// Producer group (default `DEFAULT_PRODUCER`).
    producer_group: String = "DEFAULT_PRODUCER".to_owned() => producer_group(impl Into<String>);
    /// Instance name (default `<pid>#<unix ms>`; the client id is `ip@instance`).
    instance_name: String = format!("{}#{}", std::process::id(), clock::unix_millis())
        => instance_name(impl Into<String>);
    /// `sendMsgTimeout` (default 3 s): the total budget of a send, all attempts included.
    send_msg_timeout: Duration = Duration::from_millis(3000) => send_msg_timeout(Duration);
    /// `retryTimesWhenSendFailed` (default 2).
    retry_times_when_send_failed: u8 = 2 => retry_times_when_send_failed(u8);
    /// `retryTimesWhenSendAsyncFailed` (default 2).
    retry_times_when_send_async_failed: u8 = 2 => retry_times_when_send_async_failed(u8);
    /// `retryAnotherBrokerWhenNotStoreOK` (default false).
    retry_another_broker_when_not_store_ok: bool = false
        => retry_another_broker_when_not_store_ok(bool);
    /// `compressMsgBodyOverHowmuch` (default 4096): bodies of at least this size are
    /// compressed with [`compress_type`](ProducerBuilder::compress_type).
    compress_msg_body_over_howmuch: usize = DEFAULT_COMPRESS_OVER
        => compress_msg_body_over_howmuch(usize);
    /// `compressType` (Java's `rocketmq.message.compressType`; default zlib): LZ4 and zstd
    /// need 4.9.4+ consumers, so a producer whose [`version`](ProducerBuilder::version) is
    /// older refuses them ([`ConfigError::Compression`]), as does a build without the
    /// `lz4`/`zstd` feature.
    compress_type: CompressionType = CompressionType::Zlib => compress_type(CompressionType);
    /// `compressLevel` (default 5, as Java): zlib 0..=9 (higher is 9) and zstd 1..=22; LZ4
    /// has none.
    compress_level: u8 = rmq_core::producer::COMPRESSION_LEVEL => compress_level(u8);
    /// Auto-batching of small sync sends (Java 5.x `autoBatch`; see
    /// [`ProducerBuilder::auto_batch`]); off by default.
    auto_batch: Option<crate::AutoBatch> = None;
    /// `maxMessageSize` (default 4 MiB; the body only).
    max_message_size: usize = DEFAULT_MAX_MESSAGE_SIZE => max_message_size(usize);
    /// `sendLatencyFaultEnable` (our default: on; Java's: off).
    send_latency_fault_enable: bool = true => send_latency_fault_enable(bool);
    /// The fault policy used when `send_latency_fault_enable` is on (default Adaptive).
    fault_profile: FaultProfile = FaultProfile::Adaptive => fault_profile(FaultProfile);
    /// Header format (`serializeTypeCurrentRPC`, default JSON).
    serialize_type: SerializeType = SerializeType::JSON => serialize_type(SerializeType);
    /// Remoting `version` sent (default 5.3.3 = 479; keep ≥ 401 for standard route JSON).
    version: i32 = version::V5_3_3 => version(i32);
    /// Language sent (default RUST).
    language: LanguageCode = LanguageCode::RUST => language(LanguageCode);
    /// `pollNameServerInterval` (default 30 s).
    poll_name_server_interval: Duration = clock::to_std(POLL_NAME_SERVER_INTERVAL)
        => poll_name_server_interval(Duration);
    /// `heartbeatBrokerInterval` (default 30 s).
    heartbeat_broker_interval: Duration = clock::to_std(HEARTBEAT_BROKER_INTERVAL)
        => heartbeat_broker_interval(Duration);
    /// Sends in progress at once (Java `clientAsyncSemaphoreValue`; default 2048, at most
    /// the client session's 1,024 send slots); further sends wait for a slot. The wait is
    /// part of the send's `send_msg_timeout` ([`SendErrorKind::Timeout`](crate::SendErrorKind)
    /// when it passes first, nothing sent).
    max_requests_in_flight: usize = 2048 => max_requests_in_flight(usize);
    /// Body bytes of the sends in progress at once (Java 5.x `backPressureForAsyncSendSize`;
    /// default 100 MiB, at most 4 GiB); a further send waits until enough have ended, within
    /// its `send_msg_timeout` as for a slot. A body larger than this waits for all of them
    /// and then goes alone.
    max_bytes_in_flight: usize = 100 << 20 => max_bytes_in_flight(usize);
    /// Parameters of [`FaultProfile::Adaptive`] (default [`RUNTIME_ADAPTIVE`]).
    adaptive: AdaptiveConfig = RUNTIME_ADAPTIVE => adaptive_config(AdaptiveConfig);
    /// ACL credentials and TLS (see [`ProducerBuilder::acl`] and [`ProducerBuilder::tls`]).
    security: SecurityConfig = SecurityConfig::default();
    /// Topics whose routes [`ProducerBuilder::start`] looks up (Java 5.x `topics`; see
    /// [`ProducerBuilder::topics`]).
    topics: Vec<String> = Vec::new();
    /// How long [`ProducerBuilder::start`] waits for its route lookups (default 18 s).
    start_timeout: Duration = clock::to_std(rmq_core::producer::CLIENT_API_TIMEOUT) * 6
        => start_timeout(Duration);
    /// `true`: [`ProducerBuilder::start`] looks nothing up and succeeds whether or not a
    /// NameServer answers (the first send looks its route up); default `false`, such a start
    /// fails with [`ConfigError::NameServersUnreachable`].
    lazy_start: bool = false => lazy_start(bool);
    /// Message trace (Java `enableMsgTrace`): the topic the sends are traced to (see
    /// [`ProducerBuilder::message_trace`]); `None` (default): no trace.
    trace_topic: Option<String> = None;
}

impl ProducerBuilder {
    /// Traces every send that gets the broker's answer (Java `enableMsgTrace`,
    /// docs/protocol/TRACE.md): a `Pub` record (group, topic, message id, tags, keys, broker, body length, time, offset
    /// message id, SEND_OK or not) goes to `RMQ_SYS_TRACE_TOPIC` (or
    /// [`trace_topic`](Self::trace_topic)) through an inner producer, where the dashboard
    /// and `mqadmin queryMsgTraceById` find it. Records wait in a bounded queue and leave in
    /// the background, ten to a message or after 5 s: a slow or missing trace topic never
    /// slows or fails a send (a record that finds the queue full is dropped and counted in
    /// [`ProducerMetrics::trace_dropped`](crate::metrics::ProducerMetrics::trace_dropped)).
    /// The broker needs the topic: `traceTopicEnable=true` creates it, or create it.
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

    /// A builder of this configuration.
    pub(crate) fn from_config(cfg: ProducerConfig) -> Self {
        ProducerBuilder { cfg }
    }

    /// Turns auto-batching on ([`crate::AutoBatch`]; `AutoBatch::default()` is Java's 32 KiB /
    /// 10 ms): small sync sends to one topic leave together, each caller with its own result.
    ///
    /// ```
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use rmq_std::{AutoBatch, Message, Producer};
    /// let p = Producer::builder()
    ///     .namesrv_addr("127.0.0.1:9876")
    ///     .auto_batch(AutoBatch::default())
    ///     .start()
    ///     .await?;
    /// let r = p.send(Message::new("Telemetry", "21.5")).await?; // this message's own msgId
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn auto_batch(mut self, ab: crate::AutoBatch) -> Self {
        self.cfg.auto_batch = Some(ab);
        self
    }

    /// Topics whose routes [`start`](Self::start) looks up, so that their first sends do not
    /// wait for a lookup (Java 5.x `DefaultMQProducer#setTopics`). Without any, the start
    /// looks up `TBW102`, the brokers' topic-creation template, to learn whether a NameServer
    /// answers.
    #[must_use]
    pub fn topics<I, S>(mut self, topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.cfg.topics.extend(topics.into_iter().map(Into::into));
        self
    }

    client_knobs!();

    /// The configuration as it stands.
    pub fn config(&self) -> &ProducerConfig {
        &self.cfg
    }

    /// Checks the configuration, starts the producer (its refresh and heartbeat tasks) and
    /// looks up the routes of [`topics`](Self::topics) (`TBW102` without any) within
    /// [`start_timeout`](Self::start_timeout), unless [`lazy_start`](Self::lazy_start).
    ///
    /// # Errors
    /// [`ConfigError`]: [`ConfigError::NameServersUnreachable`] when no NameServer answered
    /// those lookups (a topic that does not exist is an answer).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn start(self) -> Result<Producer, ConfigError> {
        let p = self.launch_discovered().await?;
        p.look_up_topics().await.map(|()| p)
    }

    /// Starts a producer of transactional messages (see [`crate::transaction`]) whose
    /// `checker` answers the broker's check-backs; otherwise as [`ProducerBuilder::start`].
    ///
    /// # Errors
    /// As [`ProducerBuilder::start`].
    pub async fn start_transactional(
        self,
        checker: impl crate::transaction::TransactionChecker,
    ) -> Result<crate::transaction::TransactionProducer, ConfigError> {
        let p = self.launch_discovered().await?;
        // Checks are handed out before the first heartbeat names the group to brokers.
        let t = crate::transaction::TransactionProducer::new(p.clone(), checker);
        p.look_up_topics().await.map(|()| t)
    }

    /// [`launch`](Self::launch), after fetching the NameServer list if there is a domain and
    /// no address; then the list is followed.
    async fn launch_discovered(mut self) -> Result<Producer, ConfigError> {
        let domain = self.cfg.namesrv_domain.clone();
        let addrs = &mut self.cfg.namesrv_addr;
        let follow = crate::discovery::resolve(addrs, domain.as_ref())
            .await
            .map_err(ConfigError::Discovery)?;
        let p = self.launch()?;
        if let Some(f) = follow {
            f.attach(p.driver(), p.tracer());
        }
        Ok(p)
    }

    pub(crate) fn launch(self) -> Result<Producer, ConfigError> {
        if self.cfg.namesrv_addr.is_empty() {
            return Err(ConfigError::NoNameServer);
        }
        validate_group(&self.cfg.producer_group, GROUP_MAX_LEN).map_err(ConfigError::Group)?;
        if self.cfg.instance_name.trim().is_empty() {
            return Err(ConfigError::InstanceName);
        }
        if self.cfg.security.empty_access_key() {
            return Err(ConfigError::AclAccessKey);
        }
        let ty = self.cfg.compress_type;
        if !compression_supported(ty, self.cfg.version) || !crate::zlib::available(ty) {
            return Err(ConfigError::Compression(ty));
        }
        for t in &self.cfg.topics {
            validate_topic(t).map_err(|e| ConfigError::Topic(t.clone(), e))?;
        }
        let tracer = match &self.cfg.trace_topic {
            Some(t) => {
                validate_topic(t).map_err(|e| ConfigError::Topic(t.clone(), e))?;
                let group = &self.cfg.producer_group;
                Some(crate::trace::Tracer::start(
                    &self.cfg,
                    group,
                    "PRODUCE",
                    t.clone(),
                )?)
            }
            None => None,
        };
        Producer::start(self.cfg, tracer).map_err(ConfigError::Session)
    }
}

#[cfg(test)]
mod tests;
