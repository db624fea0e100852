//! What a session compiles in ([`Features`]) and how it is set up ([`Config`]).

use super::*;

/// What a session compiles in. A gateway leaves out what it never uses, because flash is
/// scarce there; [`Full`] (the default) keeps everything.
pub trait Features {
    /// Whether requests may use the ROCKETMQ binary header ([`Config::serialize_type`]);
    /// `false` always writes JSON.
    const ROCKETMQ_HEADERS: bool;
    /// Whether the client registers with brokers (heartbeats, unregister); `false` never
    /// schedules heartbeats ([`Config::heartbeat`] is ignored) and drops such requests
    /// unwritten.
    const HEARTBEATS: bool;
    /// Whether a rejecting broker's remark is kept for [`SendFailure::Plan`]; `false` leaves
    /// it empty.
    const BROKER_REMARKS: bool;
    /// Consumer support: routes keep their subscribe (read) queues too
    /// ([`Session::subscribe_queues`]), and the runtime may issue its own requests
    /// ([`Session::call`]).
    const CONSUMER: bool;
    /// The pull consumer's orderly consumption (queue locks: LOCK_BATCH_MQ, UNLOCK_BATCH_MQ);
    /// `false` leaves it out ([`PullConfig::orderly`](crate::pull_consumer::PullConfig::orderly)
    /// is then ignored).
    const ORDERLY: bool = true;
    /// The pull consumer's send-backs (CONSUMER_SEND_MSG_BACK of nacked messages); `false`
    /// leaves them out (a nack then ends as a failed send-back: the runtime's fallback).
    const SEND_BACK: bool = true;
    /// The pull consumer's lag probes (GET_MAX_OFFSET of queues not being pulled); `false`
    /// leaves them out (lag then comes from pull answers only).
    const LAG_PROBES: bool = true;
    /// The pull consumer's broadcasting mode; `false` leaves it out (clustering only).
    const BROADCASTING: bool = true;
    /// The pull consumer's rebalance: a clustering consumer shares its topics' queues with
    /// the group's other members (GET_CONSUMER_LIST_BY_GROUP, then the allocation, every
    /// rebalance round). `false` leaves it out: the consumer owns every queue of its topics'
    /// routes ("fixed queues", a group of one such as a gateway's own; offsets are still
    /// committed to the brokers). Such a consumer need not announce itself in heartbeats:
    /// every pull carries its subscription.
    const REBALANCE: bool = true;
    /// A transactional producer's check-backs (CHECK_TRANSACTION_STATE handed to the
    /// application, see [`crate::transaction`]); `false` drops them.
    const TRANSACTIONS: bool = true;
    /// A requester's replies (PUSH_REPLY_MESSAGE_TO_CLIENT handed to the application, see
    /// [`crate::reply`]); `false` answers them REQUEST_CODE_NOT_SUPPORTED.
    const REPLIES: bool = true;
    /// The recall handles of timer messages' send responses ([`crate::recall`], handed to
    /// the runtime as [`crate::client::Inbound::RecallHandle`]); `false` leaves them out.
    const RECALL: bool = true;
    /// The pull consumer's timestamp positions
    /// ([`ConsumeFromWhere::Timestamp`](crate::consumer::ConsumeFromWhere::Timestamp), seeks
    /// to [`Position::Timestamp`](crate::pull_consumer::Position::Timestamp):
    /// SEARCH_OFFSET_BY_TIMESTAMP); `false` leaves them out (subscribe refuses such a start,
    /// and such a seek returns `false`).
    const TIMESTAMPS: bool = true;
    /// The send fault profile [`Profile::Java5`](crate::select::Profile::Java5); `false`
    /// leaves it out (~1 KB of Cortex-M flash): sends with it are refused
    /// ([`SubmitError::ProfileLeftOut`]).
    const PROFILE_JAVA5: bool = true;
    /// The send fault profile [`Profile::Adaptive`](crate::select::Profile::Adaptive);
    /// `false` leaves it out (~2.2 KB): sends with it are refused
    /// ([`SubmitError::ProfileLeftOut`]). [`Profile::Plain`](crate::select::Profile::Plain)
    /// and [`Profile::Java49`](crate::select::Profile::Java49) are always there.
    const PROFILE_ADAPTIVE: bool = true;
    /// Sends to a chosen queue ([`Target`](super::Target) other than `Select`: send-to-queue,
    /// ordered and sharded sends); `false` leaves them out (such a send is refused with
    /// [`SubmitError::TargetLeftOut`](super::SubmitError::TargetLeftOut)).
    const TARGETS: bool = true;
    /// The client's answers to the requests brokers send
    /// ([`Client`](crate::client::Client)): a consumer's running info (`mqadmin
    /// consumerStatus`), CONSUME_MESSAGE_DIRECTLY and offset resets, and
    /// REQUEST_CODE_NOT_SUPPORTED for the rest (and for all of them from a producer). `false`
    /// leaves them out (~6 KB of a consuming gateway's Cortex-M flash, ~3 KB of a
    /// producer's): no request is answered (the broker's times out), and
    /// NOTIFY_CONSUMER_IDS_CHANGED still makes a consumer rebalance.
    const ADMIN: bool = true;
    /// The consumer's milestones ([`PullEvent::Rebalanced`](crate::pull_consumer::PullEvent),
    /// `Committed`, `Locked`), which the client reports for runtimes that wait on them (and
    /// which end a consumer's start); `false` leaves them out (a runtime that reads the state
    /// it waits for: a gateway's poll loop; the start then ends at its rebalance step's
    /// deadline).
    const MILESTONES: bool = true;
    /// A consumer's reads from slaves (a broker's `suggestWhichBrokerId`, or a route naming
    /// no master): `false` keeps no slave address, and every read goes to the master (a
    /// runtime with one connection per broker, a gateway's).
    const SLAVES: bool = true;
    /// The broker's name (`bname`) on a 5.x consumer's offset requests
    /// (QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP), as the
    /// Java 5.x client sends it: a 5.x proxy (`rocketmq-proxy`'s remoting port) routes by it
    /// and refuses such a request without it. `false` leaves it out (a runtime that talks to
    /// brokers directly: a gateway's), from CONSUMER_SEND_MSG_BACK too.
    const BROKER_NAMES: bool = true;
    /// Following a master switch (5.x controller mode, or a master restarted): a send waits
    /// within its deadline for the route to name a master again when the route lists its
    /// brokers without one, or when an attempt failed on its connection (refused, or closed
    /// under it) with no other broker to turn to while the route is looked up again, instead
    /// of failing at once (NoRoute) or retrying the failing address at once; out of the same
    /// attempt budget. `false` (a gateway's flash) fails or retries
    /// such sends at once, as Java does.
    const MASTER_SWITCH: bool = true;
    /// Requests of the runtime's own ([`crate::client::Client::call`]: a recall, an SQL92
    /// filter check), correlated by the client like its own. `false` leaves them out (a
    /// gateway asks none).
    const CALLS: bool = true;
}

/// A session's features are the set of its sends' fault profiles.
impl<F: Features> ProfileSet for F {
    const JAVA5: bool = F::PROFILE_JAVA5;
    const ADAPTIVE: bool = F::PROFILE_ADAPTIVE;
}

/// `seed`, or a fixed non-zero default for 0 (the xorshift generators seeded from it need a
/// non-zero state).
pub const fn seed_or_default(seed: u32) -> u32 {
    if seed == 0 { 0x9E37_79B9 } else { seed }
}

/// Every feature (servers).
#[derive(Clone, Copy, Debug)]
pub struct Full;

impl Features for Full {
    const ROCKETMQ_HEADERS: bool = true;
    const HEARTBEATS: bool = true;
    const BROKER_REMARKS: bool = true;
    const CONSUMER: bool = true;
}

/// Settings of a session. Strings are copied in.
#[derive(Clone, Copy, Debug)]
pub struct Config<'a> {
    /// How many NameServers the runtime knows (1..=255); [`Peer::NameServer`] indexes them.
    pub name_servers: usize,
    /// Producer group (send headers and heartbeats; empty for a consumer-only client).
    pub producer_group: &'a str,
    /// Consumer group, for a consumer's client (UNREGISTER_CLIENT names it; the producer
    /// group is then unused).
    pub consumer_group: Option<&'a str>,
    /// Client id announced in heartbeats (`ip@instance`).
    pub client_id: &'a str,
    /// `version` ordinal sent in every header (5.x heartbeats from `V5_0_0` on).
    pub version: i32,
    /// Header format of requests.
    pub serialize_type: SerializeType,
    /// Language code sent.
    pub language: LanguageCode,
    /// How the fault table updates (the runtime's profile, [`crate::select::Profile::update_rule`]).
    pub fault_rule: UpdateRule,
    /// Route refresh period (Java `pollNameServerInterval`).
    pub route_refresh: Duration,
    /// Timeout of route, heartbeat and other client API requests (`mqClientApiTimeout`).
    pub request_timeout: Duration,
    /// First wait before looking a topic up again after a failed lookup; doubles per failure up
    /// to [`MAX_ROUTE_RETRY`].
    pub route_retry: Duration,
    /// Heartbeat period to every master (`heartbeatBrokerInterval`), or `None` for no
    /// heartbeats (a producer may send without them).
    pub heartbeat: Option<Duration>,
    /// Seeds the NameServer choice, the queue counter and retry entropy (a random value;
    /// 0 means a fixed default: [`seed_or_default`]).
    pub seed: u32,
}

impl<'a> Config<'a> {
    /// Java's defaults (4.9 header version, JSON, language JAVA, 30 s refresh and heartbeats,
    /// 3 s request timeout, 4.9 fault rule).
    pub fn new(name_servers: usize, producer_group: &'a str, client_id: &'a str) -> Self {
        Config {
            name_servers,
            producer_group,
            consumer_group: None,
            client_id,
            version: version::V4_9_8,
            serialize_type: SerializeType::JSON,
            language: LanguageCode::JAVA,
            fault_rule: UpdateRule::Overwrite,
            route_refresh: POLL_NAME_SERVER_INTERVAL,
            request_timeout: CLIENT_API_TIMEOUT,
            route_retry: Duration::from_millis(1000),
            heartbeat: Some(crate::producer::HEARTBEAT_BROKER_INTERVAL),
            seed: 0x5EED_1234,
        }
    }
}

impl Config<'_> {
    /// [`Session::new`]'s checks, without building a session (see [`Session::build`]).
    ///
    /// # Errors
    /// [`ConfigError`] for an unusable configuration.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.name_servers == 0 || self.name_servers > usize::from(u8::MAX) {
            return Err(ConfigError::NameServers);
        }
        if self.consumer_group.unwrap_or(self.producer_group).len() > MAX_GROUP_LEN {
            return Err(ConfigError::GroupTooLong);
        }
        if self.client_id.len() > MAX_CLIENT_ID_LEN {
            return Err(ConfigError::ClientIdTooLong);
        }
        Ok(())
    }
}

/// Why [`Session::new`] refused a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ConfigError {
    /// No NameServer, or more than 255.
    NameServers,
    /// The producer group is longer than [`MAX_GROUP_LEN`].
    GroupTooLong,
    /// The client id is longer than [`MAX_CLIENT_ID_LEN`].
    ClientIdTooLong,
    /// The runtime's send fault profile is left out of the session's [`Features`]
    /// ([`Features::PROFILE_JAVA5`], [`Features::PROFILE_ADAPTIVE`]; the runtime checks it
    /// with [`ProfileSet::carries`]).
    ProfileLeftOut,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigError::NameServers => "between 1 and 255 NameServers are needed",
            ConfigError::GroupTooLong => "producer group is too long",
            ConfigError::ClientIdTooLong => "client id is too long",
            ConfigError::ProfileLeftOut => "fault profile not compiled into this session",
        })
    }
}

impl core::error::Error for ConfigError {}

#[derive(Clone, Copy, Debug)]
pub(super) struct Settings {
    pub(super) name_servers: usize,
    pub(super) version: i32,
    pub(super) serialize_type: SerializeType,
    pub(super) language: LanguageCode,
    pub(super) route_refresh: Duration,
    pub(super) request_timeout: Duration,
    pub(super) route_retry: Duration,
    pub(super) heartbeat: Option<Duration>,
}
