//! The client session: one sans-IO value per client instance (Java's `MQClientInstance`) that
//! owns everything a RocketMQ client decides, so that runtimes only move bytes and own timers.
//!
//! Read docs/protocol/STRATEGY.md §8 (NameServer choice, route refresh, TBW102), §6 (request correlation)
//! and §4 (the send path) first. The shape follows quinn-proto's `Connection`.
//!
//! ## What the session owns
//!
//! - the **NameServer cursor** and failover ([`NamesrvCursor`]: sticky while it works, the next
//!   one after a connect failure, a lost connection or a timeout);
//! - the **topic routes**: publish queues per topic, the `TBW102` fallback for a topic the
//!   NameServer does not know (queues capped at [`DEFAULT_TOPIC_QUEUE_NUMS`], as Java), periodic
//!   refresh, back-off after failed lookups, a refresh after a failed send (at most one a
//!   second per topic);
//! - the **broker table** (broker name → master address, and a slave address for consumers'
//!   reads), interned as [`BrokerId`]s;
//! - the **pending request table**: every request gets an opaque that encodes its slot, so a
//!   response is matched in O(1); deadlines live in an indexed heap, so expiry is O(log n);
//! - the **sends**: one core [`SendPlan`] each, with the fault table and the round-robin
//!   counter of the whole client, within one total deadline;
//! - the **heartbeat** schedule (HEART_BEAT to every known master, and a consumer's to the
//!   slaves too, as Java's).
//!
//! ## What the runtime does
//!
//! It owns the connections, one per [`Peer`] (a NameServer index into the runtime's own list,
//! or a broker whose address [`Session::broker_addr`] gives), connecting lazily the first time
//! a [`Transmit`] names a peer that has none, and it keeps the message bodies and properties
//! (lent through [`Outbound`]). Call order, on every wake-up:
//!
//! 1. `handle_*`: [`Session::handle_frame`] for each whole frame received,
//!    [`Session::handle_closed`] when a connection fails or cannot be opened,
//!    [`Session::handle_written`] when a frame whose [`Transmit::report_written`] is set has
//!    been written completely, [`Session::handle_timeout`] when the clock passed
//!    [`Session::poll_timeout`] (an early or extra call is a no-op);
//! 2. application commands: [`Session::topic`], [`Session::send`], [`Session::refresh_route`];
//! 3. `poll_*`: [`Session::poll_transmit`] until `None` (or until the runtime cannot take more
//!    bytes: what stays queued comes out at the next call), [`Session::poll_event`] until
//!    `None`, then sleep until [`Session::poll_timeout`] or the next input.
//!
//! Time is monotonic and passed in; the session never reads a clock, allocates or panics.
//!
//! ```
//! use rmq_core::session::{Config, Outbound, Peer, SendArgs, SendId, Session};
//! use rmq_core::retry::{RetryConfig, SendMode};
//! use rmq_core::time::Instant;
//!
//! struct Props;
//! impl Outbound for Props {
//!     fn properties(&self, _: SendId) -> &str { "WAIT\u{1}true\u{2}" }
//! }
//! let cfg = Config::new(1, "pg", "10.0.0.2@gw");
//! let mut s: Session<4, 4, 16, 8, 2, 2048> = Session::new(&cfg, Instant::ZERO).unwrap();
//! let t0 = Instant::ZERO;
//! let topic = s.topic(t0, "Telemetry").unwrap();
//! let args = SendArgs::new(RetryConfig::java49(SendMode::Sync), 5, 1_700_000_000_000);
//! let id = s.send(t0, topic, &args).unwrap();
//! // The route is unknown: the first transmit is the route request to NameServer 0.
//! let mut buf = [0u8; 512];
//! let tx = s.poll_transmit(t0, &mut buf, &Props).unwrap();
//! assert_eq!(tx.peer, Peer::NameServer(0));
//! assert!(tx.body.is_none());
//! # let _ = id;
//! ```

use core::fmt;

use heapless::{Deque, String, Vec};

use crate::acl::{AclError, Credentials, SignedFields};
use crate::counter::QueueCounter;
use crate::deadline::DeadlineHeap;
use crate::fault::{FaultTable, UpdateRule};
use crate::producer::{
    Backoff, CLIENT_API_TIMEOUT, DEFAULT_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, HeartbeatFlavor,
    NamesrvCursor, POLL_NAME_SERVER_INTERVAL, SendRequest, SendResponse, error_refresh_due,
    is_auth_failure, parse_send_response_collected, write_heartbeat,
};
use crate::retry::{
    AttemptOutcome, RetryConfig, SendEnv, SendError, SendMode, SendPlan, SendStatus, Sent, Step,
};
use crate::route::{MASTER_ID, PublishQueueRef, TopicRoute};
use crate::select::{ProfileSet, PublishQueue};
use crate::time::{Duration, Instant};
use crate::transport::TransportError;
use crate::wire::headers::{
    GetRouteInfoRequestHeader, HeartbeatRequestHeader, ResponseSlots, SendMessageResponseHeader,
    UnregisterClientRequestHeader,
};
use crate::wire::{
    CommandHeader, CommandRepr, EncodeError, Frame, LanguageCode, RequestCode, ResponseCode,
    Scratch, SerializeType, flag, version,
};

/// Longest topic name (Java `TOPIC_MAX_LENGTH`).
pub const MAX_TOPIC_LEN: usize = crate::message::validate::TOPIC_MAX_LEN;
/// Longest broker name kept.
pub const MAX_BROKER_NAME: usize = 64;
/// Longest broker address kept (`host:port`).
pub const MAX_ADDR_LEN: usize = 64;
/// Longest producer group (Java's limit).
pub const MAX_GROUP_LEN: usize = crate::message::validate::GROUP_MAX_LEN;
/// Longest client id (`ip@instance`).
pub const MAX_CLIENT_ID_LEN: usize = 128;
/// Longest offsetMsgId kept (IPv6 brokers give 56 hex digits).
pub const MAX_MSG_ID: usize = 56;
/// Longest broker remark kept with a failed send (longer ones are cut at a char boundary).
pub const MAX_REMARK: usize = 128;
/// Longest wait between lookups of a topic that has no route.
pub const MAX_ROUTE_RETRY: Duration = Duration::from_secs(30);
/// The first heartbeat goes out this long after the session starts (Java: 1 s).
pub const FIRST_HEARTBEAT: Duration = Duration::from_millis(1000);

/// A broker of the session's broker table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BrokerId(pub u16);

/// A topic of the session's route table (from [`Session::topic`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TopicId(pub u16);

/// Whom a frame goes to (or came from). The runtime keeps one connection per peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Peer {
    /// The NameServer at this index of the runtime's address list.
    NameServer(u8),
    /// A broker master ([`Session::broker_addr`] gives its address).
    Broker(BrokerId),
    /// A slave of that broker ([`Session::slave_addr`]: the lowest `brokerId` >= 1 its route
    /// lists). Only a consumer talks to it: pulls it suggests, and reads while the route names
    /// no master (Java's `findBrokerAddressInSubscribe`).
    Slave(BrokerId),
}

/// Identifies a send in [`Event::SendDone`] (slot and generation: never reused while live).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SendId(pub u32);

impl SendId {
    fn new(slot: u16, generation: u16) -> Self {
        SendId(u32::from(generation) << 16 | u32::from(slot))
    }

    /// The send's slot: below the session's `SENDS`, shared by the sends that used it before
    /// (a runtime can index a table by it, checking the whole id).
    pub const fn slot(self) -> usize {
        (self.0 & 0xFFFF) as usize
    }
}

/// What the runtime lends [`Session::poll_transmit`]: the encoded properties and bodies of the
/// sends in flight (the runtime keeps them; the session only writes headers), and the ACL
/// credentials requests are signed with.
pub trait Outbound {
    /// The properties string of send `id` (empty if unknown).
    fn properties(&self, id: SendId) -> &str;

    /// The body of send `id`, as sent (only read to sign it, when there are credentials).
    fn body(&self, id: SendId) -> &[u8] {
        let _ = id;
        &[]
    }

    /// ACL 1.0 credentials: every request is then signed (docs/protocol/WIRE.md §14).
    fn credentials(&self) -> Option<Credentials<'_>> {
        None
    }

    /// Writes the HEART_BEAT body into `buf` and returns its length, for a client whose
    /// heartbeat carries more than its producer group (a consumer's subscriptions, written with
    /// [`crate::consumer::write_heartbeat`]); `None` (the default) writes the producer body.
    fn heartbeat_body(&self, buf: &mut [u8]) -> Option<usize> {
        let _ = buf;
        None
    }
}

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

/// Why the session refused a command (resource errors: nothing was changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SubmitError {
    /// Every send slot is in use (a finished send frees its slot when its event is polled).
    TooManySends,
    /// The topic table is full.
    TooManyTopics,
    /// The topic name is longer than [`MAX_TOPIC_LEN`].
    TopicTooLong,
    /// No such topic (a stale [`TopicId`]).
    UnknownTopic,
    /// The send's fault profile ([`RetryConfig::profile`]) is left out of this session's
    /// [`Features`] ([`Features::PROFILE_JAVA5`], [`Features::PROFILE_ADAPTIVE`]).
    ProfileLeftOut,
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SubmitError::TooManySends => "too many sends in flight",
            SubmitError::TooManyTopics => "too many topics",
            SubmitError::TopicTooLong => "topic name is too long",
            SubmitError::UnknownTopic => "unknown topic id",
            SubmitError::ProfileLeftOut => "fault profile not compiled into this session",
        })
    }
}

impl core::error::Error for SubmitError {}

/// A frame the peer sent that cannot be read: the runtime closes that connection (and then
/// calls [`Session::handle_closed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum FrameError {
    /// The length words are inconsistent.
    Framing(crate::wire::FrameError),
    /// The header cannot be decoded.
    Header(crate::wire::DecodeError),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Framing(e) => write!(f, "malformed frame: {e}"),
            FrameError::Header(e) => write!(f, "malformed header: {e}"),
        }
    }
}

impl core::error::Error for FrameError {}

/// What a send needs besides its properties and body (which the runtime keeps).
#[derive(Clone, Copy, Debug)]
pub struct SendArgs {
    /// Retry settings; `retry.mode` is the send mode.
    pub retry: RetryConfig,
    /// Body length in bytes (after compression, as sent).
    pub body_len: usize,
    /// `Message.flag`.
    pub flag: i32,
    /// sysFlag bits (compression).
    pub sys_flag: i32,
    /// A SEND_BATCH_MESSAGE body.
    pub batch: bool,
    /// `bornTimestamp` (Unix ms, from the runtime's wall clock).
    pub born_timestamp: i64,
    /// A fixed queue (send-to-queue, ordered sends: one attempt), or `None` to select.
    pub queue: Option<PublishQueue<BrokerId>>,
    /// A consumed message resent to `%RETRY%<group>`: `(reconsumeTimes, maxReconsumeTimes)`
    /// of the send header ([`crate::send_back::RetryProperties::reconsume`]).
    pub reconsume: Option<(i32, i32)>,
}

impl SendArgs {
    /// A selected-queue send of `body_len` bytes.
    pub fn new(retry: RetryConfig, body_len: usize, born_timestamp: i64) -> Self {
        SendArgs {
            retry,
            body_len,
            flag: 0,
            sys_flag: 0,
            batch: false,
            born_timestamp,
            queue: None,
            reconsume: None,
        }
    }
}

/// A frame to write: `len` bytes of the caller's buffer, then (when `body` is set) the body of
/// that send, `body_len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct Transmit {
    /// Whom it goes to (connect first if there is no connection).
    pub peer: Peer,
    /// Bytes at the front of the buffer (prefix, header, and any small body).
    pub len: usize,
    /// The request's opaque.
    pub opaque: i32,
    /// The send whose body follows.
    pub body: Option<SendId>,
    /// Body bytes that follow.
    pub body_len: usize,
    /// Call [`Session::handle_written`] with `opaque` once the whole frame is written (ONEWAY
    /// sends end there).
    pub report_written: bool,
}

/// A stored message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendReceipt {
    /// Store status.
    pub status: SendStatus,
    /// The broker that stored it.
    pub broker: BrokerId,
    /// Queue id written (from the response; the chosen queue for ONEWAY).
    pub queue_id: i32,
    /// Consume-queue offset (`None` for ONEWAY).
    pub queue_offset: Option<i64>,
    /// offsetMsgId (empty for ONEWAY).
    pub offset_msg_id: String<MAX_MSG_ID>,
    /// Attempts made.
    pub attempts: u8,
}

/// Why a send failed. Exhaustive on purpose: a runtime's mapping of it must name every case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendFailure {
    /// The retry plan gave up (no route, broker codes, transport failures, timeout).
    Plan {
        /// The plan's error.
        error: SendError,
        /// The remark of the broker's last rejecting response (empty if none).
        remark: String<MAX_REMARK>,
        /// The broker of the last attempt (`None` when no attempt was made), so that a runtime
        /// can attach what it knows about that connection's failure.
        broker: Option<BrokerId>,
    },
    /// The request header did not fit the transmit buffer.
    Encode(EncodeError),
    /// The request could not be signed with the ACL credentials.
    Acl(AclError),
    /// The broker refused the credentials (ACL): not retried, since every broker refuses them
    /// alike.
    Authentication {
        /// The response code.
        code: i32,
        /// Attempts made.
        attempts: u8,
        /// The broker's remark.
        remark: String<MAX_REMARK>,
    },
    /// A status response without msgId, queueId or queueOffset.
    MalformedResponse {
        /// Attempts made.
        attempts: u8,
    },
    /// The request table was full.
    TooManyRequests,
}

impl SendFailure {
    /// The broker of the last attempt, when the retry plan made one.
    pub fn broker(&self) -> Option<BrokerId> {
        match self {
            SendFailure::Plan { broker, .. } => *broker,
            SendFailure::Encode(_)
            | SendFailure::Acl(_)
            | SendFailure::Authentication { .. }
            | SendFailure::MalformedResponse { .. }
            | SendFailure::TooManyRequests => None,
        }
    }

    /// Whether sending the same message again later may succeed (what a store-and-forward
    /// outbox keeps it for, [`crate::outbox::Verdict::Retry`]): the retry plan's retryable
    /// errors (transport failures, timeouts, no route, broker codes in the retry set) and a
    /// full request table. Refused credentials, a header that does not fit and a malformed
    /// answer (the broker may have stored the message) are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            SendFailure::Plan { error, .. } => error.is_retryable(),
            SendFailure::TooManyRequests => true,
            SendFailure::Encode(_)
            | SendFailure::Acl(_)
            | SendFailure::Authentication { .. }
            | SendFailure::MalformedResponse { .. } => false,
        }
    }

    /// Attempts made before the failure.
    pub fn attempts(&self) -> u8 {
        match self {
            SendFailure::Plan { error, .. } => error.attempts(),
            SendFailure::MalformedResponse { attempts }
            | SendFailure::Authentication { attempts, .. } => *attempts,
            SendFailure::Encode(_) | SendFailure::Acl(_) | SendFailure::TooManyRequests => 0,
        }
    }
}

impl fmt::Display for SendFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendFailure::Plan { error, remark, .. } if remark.is_empty() => {
                fmt::Display::fmt(error, f)
            }
            SendFailure::Plan { error, remark, .. } => write!(f, "{error}: {remark}"),
            SendFailure::Encode(e) => write!(f, "cannot encode the request: {e}"),
            SendFailure::Acl(e) => write!(f, "cannot sign the request: {e}"),
            SendFailure::Authentication { code, remark, .. } => {
                write!(
                    f,
                    "the broker refused the credentials (code {code}): {remark}"
                )
            }
            SendFailure::MalformedResponse { .. } => {
                f.write_str("send response without msgId, queueId or queueOffset")
            }
            SendFailure::TooManyRequests => f.write_str("too many requests in flight"),
        }
    }
}

impl core::error::Error for SendFailure {}

/// Something the runtime must act on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A send ended (its slot is free again).
    SendDone {
        /// Which send.
        id: SendId,
        /// Its result.
        result: Result<SendReceipt, SendFailure>,
    },
    /// Close the connection to this peer and report it with [`Session::handle_closed`]; the
    /// next transmit opens a new one. Sent when a broker's address changed, and when a request
    /// timed out on a connection that answered nothing since it was written (a hung peer; Java
    /// closes the channel on a timeout too).
    Reconnect(Peer),
    /// A route of this topic was applied ([`Session::publish_queues`]).
    RouteUpdated(TopicId),
    /// A lookup of this topic, which has no route, failed (it is retried with back-off).
    RouteFailed(TopicId),
    /// A request of [`Session::call`] got no answer.
    CallFailed {
        /// Its opaque.
        opaque: i32,
        /// Why: timed out, or its connection was lost.
        error: TransportError,
    },
}

/// What [`Session::handle_frame`] found in a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Incoming {
    /// Handled by the session (or a late answer, counted and dropped).
    Handled,
    /// The answer to the [`Session::call`] with this opaque: the frame is the runtime's.
    Response(i32),
    /// A request the broker sent us (e.g. NOTIFY_CONSUMER_IDS_CHANGED): the frame is the
    /// runtime's to act on.
    Request {
        /// The request code.
        code: i32,
        /// Its opaque.
        opaque: i32,
    },
}

/// What a layer on top of the client session (the pull consumer) asks of it; every
/// [`Session`] implements it, so such a layer needs none of the session's type parameters.
pub trait Client {
    /// What the session compiles in (the pull consumer leaves out the paths it does not).
    type Features: Features;
    /// [`Session::topic`].
    ///
    /// # Errors
    /// [`SubmitError`].
    fn topic(&mut self, now: Instant, topic: &str) -> Result<TopicId, SubmitError>;
    /// [`Session::topic_name`].
    fn topic_name(&self, t: TopicId) -> Option<&str>;
    /// [`Session::broker_name`].
    fn broker_name(&self, b: BrokerId) -> Option<&str>;
    /// [`Session::subscribe_queues`].
    fn subscribe_queues(&self, t: TopicId) -> &[PublishQueue<BrokerId>];
    /// [`Session::read_peer`].
    fn read_peer(&self, b: BrokerId, slave: bool) -> Peer;
    /// [`Session::refresh_route`].
    fn refresh_route(&mut self, now: Instant, t: TopicId);
    /// [`Session::call`].
    ///
    /// # Errors
    /// [`CallError`].
    #[allow(clippy::too_many_arguments)]
    fn call<E: crate::wire::ExtFields, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        peer: Peer,
        code: RequestCode,
        ext: Option<E>,
        body: &[u8],
        timeout: Duration,
        buf: &mut [u8],
        out: &M,
    ) -> Result<Transmit, CallError>;
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
> Client for Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F>
{
    type Features = F;
    fn topic(&mut self, now: Instant, topic: &str) -> Result<TopicId, SubmitError> {
        Session::topic(self, now, topic)
    }
    fn topic_name(&self, t: TopicId) -> Option<&str> {
        Session::topic_name(self, t)
    }
    fn broker_name(&self, b: BrokerId) -> Option<&str> {
        Session::broker_name(self, b)
    }
    fn subscribe_queues(&self, t: TopicId) -> &[PublishQueue<BrokerId>] {
        Session::subscribe_queues(self, t)
    }
    fn read_peer(&self, b: BrokerId, slave: bool) -> Peer {
        Session::read_peer(self, b, slave)
    }
    fn refresh_route(&mut self, now: Instant, t: TopicId) {
        Session::refresh_route(self, now, t);
    }
    fn call<E: crate::wire::ExtFields, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        peer: Peer,
        code: RequestCode,
        ext: Option<E>,
        body: &[u8],
        timeout: Duration,
        buf: &mut [u8],
        out: &M,
    ) -> Result<Transmit, CallError> {
        Session::call(self, now, peer, code, ext, body, timeout, buf, out)
    }
}

/// Why [`Session::call`] refused a request (nothing was registered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallError {
    /// Every request slot is in use.
    TooManyRequests,
    /// The request does not fit the buffer (or a frame).
    Encode(EncodeError),
    /// The request cannot be signed.
    Acl(AclError),
    /// This session was built without [`Features::CONSUMER`].
    Unsupported,
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::TooManyRequests => f.write_str("too many requests in flight"),
            CallError::Encode(e) => write!(f, "cannot encode the request: {e}"),
            CallError::Acl(e) => write!(f, "cannot sign the request: {e}"),
            CallError::Unsupported => f.write_str("runtime calls are not compiled in"),
        }
    }
}

impl core::error::Error for CallError {}

/// Session counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Stats {
    /// Send attempts issued.
    pub attempts: u32,
    /// Routes applied.
    pub route_updates: u32,
    /// Route lookups that failed (transport, timeout, error code, unusable route).
    pub route_failures: u32,
    /// Responses that matched no request in flight (late or unknown) and were dropped.
    pub late_responses: u32,
    /// Requests the brokers sent us (NOTIFY_CONSUMER_IDS_CHANGED, ...).
    pub broker_requests: u32,
    /// Heartbeats answered with SUCCESS.
    pub heartbeats_ok: u32,
    /// Attempts that were retries (attempt number 2 and up).
    pub retries: u32,
    /// Times a broker went from available to isolated in the fault table.
    pub brokers_isolated: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    RouteRefresh = 0,
    Heartbeat = 1,
    RouteRetry = 2,
}

const TIMERS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReqState {
    Free,
    Queued,
    Sent,
    /// A call that got no answer; freed when its [`Event::CallFailed`] is polled.
    Failed(TransportError),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReqKind {
    Route {
        topic: u16,
        default: bool,
    },
    Send {
        send: u16,
    },
    Heartbeat,
    Unregister,
    /// A request the runtime encoded and wrote itself ([`Session::call`]).
    Call,
}

#[derive(Clone, Copy, Debug)]
struct Req {
    generation: u32,
    state: ReqState,
    /// When it was written (polled).
    sent_at: Instant,
    peer: Peer,
    kind: ReqKind,
}

impl Req {
    const FREE: Req = Req {
        generation: 0,
        state: ReqState::Free,
        sent_at: Instant::ZERO,
        peer: Peer::NameServer(0),
        kind: ReqKind::Heartbeat,
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lookup {
    /// No lookup in flight; retry at this instant when set.
    Idle(Option<Instant>),
    InFlight,
}

#[derive(Debug)]
struct Topic<const Q: usize> {
    name: String<MAX_TOPIC_LEN>,
    queues: Vec<PublishQueue<BrokerId>, Q>,
    /// Subscribe (read) queues, with [`Features::CONSUMER`].
    read: Vec<PublishQueue<BrokerId>, Q>,
    from_default: bool,
    lookup: Lookup,
    backoff: Backoff,
    error_refresh: Option<Instant>,
    /// An event waiting in `route_events`: updated (`true`) or failed.
    notify: Option<bool>,
    /// The last lookup failed because no NameServer answered.
    unreachable: bool,
}

#[derive(Debug)]
struct Broker {
    name: String<MAX_BROKER_NAME>,
    addr: String<MAX_ADDR_LEN>,
    /// A slave's address (consumers only), empty when the route lists none.
    slave: String<MAX_ADDR_LEN>,
    /// When a response last came from it.
    last_answer: Option<Instant>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendState {
    Free,
    /// Waiting for the topic's route.
    Route,
    /// An attempt's request is queued or in flight.
    Attempt,
    /// Finished; the event is waiting in `done`.
    Done,
}

#[derive(Clone, Debug)]
struct Stored {
    attempt: u8,
    queue_id: i32,
    queue_offset: i64,
    msg_id: String<MAX_MSG_ID>,
}

/// How a send ended (the remark, if any, waits in its slot).
#[derive(Clone, Copy, Debug)]
enum Ending {
    Plan(Result<Sent<BrokerId>, SendError>),
    Encode(EncodeError),
    Acl(AclError),
    Authentication { code: i32, attempts: u8 },
    TooManyRequests,
}

#[derive(Debug)]
struct SendSlot<P> {
    generation: u16,
    state: SendState,
    topic: u16,
    mode: SendMode,
    body_len: usize,
    flag: i32,
    sys_flag: i32,
    batch: bool,
    born: i64,
    reconsume: Option<(i32, i32)>,
    plan: Option<SendPlan<BrokerId, P>>,
    req: Option<u16>,
    stored: Option<Stored>,
    remark: String<MAX_REMARK>,
    ending: Option<Ending>,
}

impl<P> SendSlot<P> {
    const EMPTY: Self = SendSlot {
        generation: 0,
        state: SendState::Free,
        topic: 0,
        mode: SendMode::Sync,
        body_len: 0,
        flag: 0,
        sys_flag: 0,
        batch: false,
        born: 0,
        reconsume: None,
        plan: None,
        req: None,
        stored: None,
        remark: String::new(),
        ending: None,
    };
}

/// Every request the session writes has one header type, so that the header encoders are
/// compiled once (flash matters on a gateway); the runtime's and the consumer's calls
/// ([`Session::call`]) come in as [`Header::Call`].
enum Header<'a> {
    Route(GetRouteInfoRequestHeader<'a>),
    Heartbeat(Option<HeartbeatRequestHeader>),
    Unregister(UnregisterClientRequestHeader<'a>),
    Send(crate::wire::headers::SendMessageRequestHeaderV2<'a>),
    Call(&'a dyn CallFields),
}

/// A call's header fields behind a pointer (object safe, unlike [`crate::wire::ExtFields`]),
/// so that the calls of every header type share one encoder: 1.8 KB less flash on the
/// downlink gateway.
trait CallFields {
    fn visit(&self, v: &mut dyn crate::wire::ExtVisitor);
}

impl<E: crate::wire::ExtFields> CallFields for E {
    fn visit(&self, v: &mut dyn crate::wire::ExtVisitor) {
        self.visit_fields(v);
    }
}

/// Hands the fields of [`Header::Call`] on to the encoder's visitor.
struct Forward<'v, V: ?Sized>(&'v mut V);

impl<V: crate::wire::ExtVisitor + ?Sized> crate::wire::ExtVisitor for Forward<'_, V> {
    fn field(&mut self, key: &str, value: crate::wire::ExtValue<'_>) {
        self.0.field(key, value);
    }
}

impl crate::wire::ExtFields for Header<'_> {
    fn visit_fields<V: crate::wire::ExtVisitor + ?Sized>(&self, v: &mut V) {
        match self {
            Header::Route(h) => h.visit_fields(v),
            Header::Heartbeat(h) => h.visit_fields(v),
            Header::Unregister(h) => h.visit_fields(v),
            Header::Send(h) => h.visit_fields(v),
            Header::Call(h) => h.visit(&mut Forward(v)),
        }
    }
}

/// `s` cut to at most `n` bytes at a char boundary.
fn cut(s: &str, n: usize) -> &str {
    let mut end = s.len().min(n);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or("")
}

/// Copies `s` into a fixed string, cut at a char boundary when too long.
fn copy_cut<const N: usize>(s: &str) -> String<N> {
    let mut out = String::new();
    let _ = out.push_str(cut(s, N));
    out
}

fn copy_exact<const N: usize>(s: &str) -> Option<String<N>> {
    let mut out = String::new();
    out.push_str(s).ok()?;
    Some(out)
}

/// The client session. Capacities are const generics:
///
/// - `TOPICS`: topics with a route; `BROKERS`: brokers (also the fault table's size and the
///   brokers one route may name); `QUEUES`: publish queues per topic;
/// - `REQUESTS`: requests queued or in flight at once (sends, route lookups, heartbeats);
///   `SENDS`: sends in progress (a finished send holds its slot until its event is polled);
/// - `ROUTE_STR`: bytes of names and addresses in one route response;
/// - `F`: what is compiled in ([`Features`]; [`Full`] by default).
///
/// See the [module docs](self) for the call order.
#[derive(Debug)]
pub struct Session<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features = Full,
> {
    features: core::marker::PhantomData<F>,
    cfg: Settings,
    /// The producer group, or the consumer group of a consumer's client (`consumer`).
    group: String<MAX_GROUP_LEN>,
    consumer: bool,
    client_id: String<MAX_CLIENT_ID_LEN>,
    namesrv: NamesrvCursor,
    topics: Vec<Topic<QUEUES>, TOPICS>,
    brokers: Vec<Broker, BROKERS>,
    faults: FaultTable<BrokerId, BROKERS>,
    counter: QueueCounter,
    rng: u32,
    reqs: [Req; REQUESTS],
    req_free: Vec<u16, REQUESTS>,
    queued: Deque<u16, REQUESTS>,
    req_deadlines: DeadlineHeap<REQUESTS>,
    sends: [SendSlot<F>; SENDS],
    send_free: Vec<u16, SENDS>,
    route_waits: DeadlineHeap<SENDS>,
    done: Deque<u16, SENDS>,
    moved: Deque<BrokerId, BROKERS>,
    slave_moved: Deque<BrokerId, BROKERS>,
    ns_close: Deque<u8, 4>,
    call_failures: Deque<u16, REQUESTS>,
    route_events: Deque<u16, TOPICS>,
    timers: [Option<Instant>; TIMERS],
    stats: Stats,
}

#[derive(Clone, Copy, Debug)]
struct Settings {
    name_servers: usize,
    version: i32,
    serialize_type: SerializeType,
    language: LanguageCode,
    route_refresh: Duration,
    request_timeout: Duration,
    route_retry: Duration,
    heartbeat: Option<Duration>,
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
> Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F>
{
    /// A session started at `now`: the first route refresh is due one refresh period later,
    /// the first heartbeat [`FIRST_HEARTBEAT`] later.
    ///
    /// # Errors
    /// [`ConfigError`] for an unusable configuration.
    pub fn new(cfg: &Config<'_>, now: Instant) -> Result<Self, ConfigError> {
        cfg.check()?;
        Ok(Self::assemble(cfg, now))
    }

    /// [`Session::new`] without the checks, for a configuration that passed
    /// [`Config::check`]: infallible and returning the session itself, so that the caller's
    /// place (a local, or a struct being built in its caller's return slot) receives it with no
    /// copy through a `Result` on the stack (the session is kilobytes). Of a configuration
    /// that did not pass, the NameServer count is clamped to 1..=255 and a name that is too
    /// long is left empty.
    // Not inlined: its result is written straight into the caller's place (an inlined one
    // was assembled on the stack and copied).
    #[inline(never)]
    pub fn build(cfg: &Config<'_>, now: Instant) -> Self {
        Self::assemble(cfg, now)
    }

    /// [`Self::build`]'s body, inlined into [`Self::new`] (through a call there, the session
    /// would be copied out of its result once more: +2.8 KiB of stack in the QEMU image).
    #[inline(always)]
    fn assemble(cfg: &Config<'_>, now: Instant) -> Self {
        let consumer = cfg.consumer_group.is_some();
        let group =
            copy_exact(cfg.consumer_group.unwrap_or(cfg.producer_group)).unwrap_or_default();
        let client_id = copy_exact(cfg.client_id).unwrap_or_default();
        let seed = seed_or_default(cfg.seed);
        let mut req_free = Vec::new();
        for i in (0..REQUESTS.min(usize::from(u16::MAX))).rev() {
            let _ = req_free.push(i as u16);
        }
        let mut send_free = Vec::new();
        for i in (0..SENDS.min(usize::from(u16::MAX))).rev() {
            let _ = send_free.push(i as u16);
        }
        let mut timers = [None; TIMERS];
        timers[Timer::RouteRefresh as usize] = Some(now.saturating_add(cfg.route_refresh));
        let heartbeat = cfg.heartbeat.filter(|_| F::HEARTBEATS);
        timers[Timer::Heartbeat as usize] = heartbeat.map(|_| now + FIRST_HEARTBEAT);
        Session {
            features: core::marker::PhantomData,
            cfg: Settings {
                name_servers: cfg.name_servers.clamp(1, usize::from(u8::MAX)),
                version: cfg.version,
                serialize_type: cfg.serialize_type,
                language: cfg.language,
                route_refresh: cfg.route_refresh,
                request_timeout: cfg.request_timeout,
                route_retry: cfg.route_retry,
                heartbeat,
            },
            group,
            consumer,
            client_id,
            namesrv: NamesrvCursor::new(seed >> 8),
            topics: Vec::new(),
            brokers: Vec::new(),
            faults: FaultTable::new(cfg.fault_rule),
            counter: QueueCounter::new(seed),
            rng: seed,
            reqs: [Req::FREE; REQUESTS],
            req_free,
            queued: Deque::new(),
            req_deadlines: DeadlineHeap::new(),
            sends: [const { SendSlot::EMPTY }; SENDS],
            send_free,
            route_waits: DeadlineHeap::new(),
            done: Deque::new(),
            moved: Deque::new(),
            slave_moved: Deque::new(),
            ns_close: Deque::new(),
            call_failures: Deque::new(),
            route_events: Deque::new(),
            timers,
            stats: Stats::default(),
        }
    }

    // ----- getters -------------------------------------------------------------------------

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The NameServer in use (index into the runtime's list).
    pub fn name_server(&self) -> u8 {
        self.namesrv.current(self.cfg.name_servers) as u8
    }

    /// A topic's name.
    pub fn topic_name(&self, t: TopicId) -> Option<&str> {
        self.topics.get(usize::from(t.0)).map(|t| t.name.as_str())
    }

    /// The topic's publish queues (empty until a route arrived).
    pub fn publish_queues(&self, t: TopicId) -> &[PublishQueue<BrokerId>] {
        self.topics
            .get(usize::from(t.0))
            .map_or(&[], |t| t.queues.as_slice())
    }

    /// Whether the topic's route came from the `TBW102` template (the topic does not exist yet).
    pub fn from_default_topic(&self, t: TopicId) -> bool {
        self.topics
            .get(usize::from(t.0))
            .is_some_and(|t| t.from_default)
    }

    /// A broker's name.
    pub fn broker_name(&self, b: BrokerId) -> Option<&str> {
        self.brokers.get(usize::from(b.0)).map(|b| b.name.as_str())
    }

    /// A broker's master address, once a route named it.
    pub fn broker_addr(&self, b: BrokerId) -> Option<&str> {
        self.brokers
            .get(usize::from(b.0))
            .map(|b| b.addr.as_str())
            .filter(|a| !a.is_empty())
    }

    /// The address of broker `b`'s slave (a consumer's session only), once a route named one.
    pub fn slave_addr(&self, b: BrokerId) -> Option<&str> {
        self.brokers
            .get(usize::from(b.0))
            .map(|b| b.slave.as_str())
            .filter(|a| !a.is_empty())
    }

    /// The address of a broker peer (`None` for a NameServer: the runtime's list has it).
    pub fn peer_addr(&self, peer: Peer) -> Option<&str> {
        match peer {
            Peer::NameServer(_) => None,
            Peer::Broker(b) => self.broker_addr(b),
            Peer::Slave(b) => self.slave_addr(b),
        }
    }

    /// Where a consumer reads broker `b` (pulls, offsets): its slave when `slave` is asked for
    /// and known, else its master, else its slave while the route names no master (Java's
    /// `findBrokerAddressInSubscribe` with `onlyThisBroker = false`).
    pub fn read_peer(&self, b: BrokerId, slave: bool) -> Peer {
        let has_slave = self.slave_addr(b).is_some();
        if has_slave && (slave || self.broker_addr(b).is_none()) {
            Peer::Slave(b)
        } else {
            Peer::Broker(b)
        }
    }

    /// Brokers known so far (ids `0..broker_count()`).
    pub fn broker_count(&self) -> usize {
        self.brokers.len()
    }

    /// The id of broker `name`, if a route named it.
    pub fn find_broker(&self, name: &str) -> Option<BrokerId> {
        let i = self.brokers.iter().position(|b| b.name == name)?;
        Some(BrokerId(i as u16))
    }

    /// Requests written to `peer` and not answered yet (diagnostics: O(REQUESTS)).
    pub fn in_flight(&self, peer: Peer) -> usize {
        self.reqs
            .iter()
            .filter(|r| r.state == ReqState::Sent && r.peer == peer)
            .count()
    }

    /// The remoting `version` this session announces.
    pub const fn config_version(&self) -> i32 {
        self.cfg.version
    }

    /// The topic's subscribe (read) queues (with [`Features::CONSUMER`]; empty until
    /// a route arrived).
    pub fn subscribe_queues(&self, t: TopicId) -> &[PublishQueue<BrokerId>] {
        self.topics
            .get(usize::from(t.0))
            .map_or(&[], |t| t.read.as_slice())
    }

    /// Heartbeats queued or in flight.
    pub fn heartbeats_pending(&self) -> usize {
        self.reqs
            .iter()
            .filter(|r| r.state != ReqState::Free && r.kind == ReqKind::Heartbeat)
            .count()
    }

    /// Requests queued or in flight.
    pub fn pending_requests(&self) -> usize {
        REQUESTS.saturating_sub(self.req_free.len())
    }

    /// Whether requests are waiting for [`Session::poll_transmit`].
    pub fn has_transmit(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Whether [`Session::send`] has a free slot.
    pub fn can_send(&self) -> bool {
        !self.send_free.is_empty()
    }

    /// Whether `opaque` is a request still queued or in flight (a runtime that holds a
    /// half-written frame of a request the session gave up on drops it with its connection).
    pub fn is_live(&self, opaque: i32) -> bool {
        self.slot_of(opaque).is_some()
    }

    /// The fault table (read-only).
    pub fn fault_table(&self) -> &FaultTable<BrokerId, BROKERS> {
        &self.faults
    }

    /// Checks the session's internal bookkeeping (every slot in exactly one place, deadlines
    /// only for live slots, capacities respected). Tests and fuzzing only.
    ///
    /// # Errors
    /// The first broken invariant.
    #[doc(hidden)]
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn check_invariants(&self) -> Result<(), &'static str> {
        let live = self
            .reqs
            .iter()
            .filter(|r| r.state != ReqState::Free)
            .count();
        if live + self.req_free.len() != REQUESTS {
            return Err("request slots lost or doubled");
        }
        let failed = self
            .reqs
            .iter()
            .filter(|r| matches!(r.state, ReqState::Failed(_)))
            .count();
        if self.req_deadlines.len() + failed != live || failed != self.call_failures.len() {
            return Err("a live request without a deadline (or a free one with)");
        }
        let queued = self
            .reqs
            .iter()
            .filter(|r| r.state == ReqState::Queued)
            .count();
        if queued != self.queued.len()
            || self.queued.iter().any(|&i| {
                self.reqs
                    .get(usize::from(i))
                    .is_none_or(|r| r.state != ReqState::Queued)
            })
        {
            return Err("the transmit queue and the queued requests differ");
        }
        let used = self
            .sends
            .iter()
            .filter(|s| s.state != SendState::Free)
            .count();
        if used + self.send_free.len() != SENDS {
            return Err("send slots lost or doubled");
        }
        let done = self
            .sends
            .iter()
            .filter(|s| s.state == SendState::Done)
            .count();
        if done != self.done.len() {
            return Err("finished sends and done events differ");
        }
        for (i, s) in self.sends.iter().enumerate() {
            let waits = self.route_waits.get(i as u16).is_some();
            if waits != (s.state == SendState::Route) {
                return Err("a route wait for a send not waiting for its route");
            }
            if s.state == SendState::Attempt {
                let Some(r) = s.req.and_then(|r| self.reqs.get(usize::from(r))) else {
                    return Err("an attempt without its request");
                };
                if r.state == ReqState::Free || r.kind != (ReqKind::Send { send: i as u16 }) {
                    return Err("an attempt's request belongs to something else");
                }
            }
        }
        for r in self.reqs.iter().filter(|r| r.state != ReqState::Free) {
            if let ReqKind::Send { send } = r.kind
                && self
                    .sends
                    .get(usize::from(send))
                    .is_none_or(|s| s.state != SendState::Attempt)
            {
                return Err("a send request of a send that is not attempting");
            }
        }
        if self.brokers.len() > BROKERS || self.topics.len() > TOPICS {
            return Err("over capacity");
        }
        Ok(())
    }

    // ----- commands ------------------------------------------------------------------------

    /// The id of `topic`, adding it to the route table (and starting its lookup) if new.
    ///
    /// # Errors
    /// [`SubmitError::TopicTooLong`] or [`SubmitError::TooManyTopics`].
    pub fn topic(&mut self, now: Instant, topic: &str) -> Result<TopicId, SubmitError> {
        if let Some(i) = self.topics.iter().position(|t| t.name == topic) {
            return Ok(TopicId(i as u16));
        }
        let name = copy_exact(topic).ok_or(SubmitError::TopicTooLong)?;
        let id = u16::try_from(self.topics.len()).map_err(|_| SubmitError::TooManyTopics)?;
        self.topics
            .push(Topic {
                name,
                queues: Vec::new(),
                read: Vec::new(),
                from_default: false,
                lookup: Lookup::Idle(None),
                backoff: Backoff::new(self.cfg.route_retry, MAX_ROUTE_RETRY),
                error_refresh: None,
                notify: None,
                unreachable: false,
            })
            .map_err(|_| SubmitError::TooManyTopics)?;
        self.lookup(now, id, false);
        Ok(TopicId(id))
    }

    /// Queues UNREGISTER_CLIENT (this producer group) to every broker with a known address,
    /// as Java's `shutdown` does; returns how many were queued. Heartbeats stop.
    pub fn unregister_all(&mut self, now: Instant) -> usize {
        self.timers[Timer::Heartbeat as usize] = None;
        let deadline = now.saturating_add(self.cfg.request_timeout);
        let mut n = 0;
        for k in 0..self.nodes() {
            let Some(peer) = self.node(k) else {
                continue;
            };
            if self
                .alloc_req(peer, ReqKind::Unregister, deadline)
                .is_none()
            {
                break;
            }
            n += 1;
        }
        n
    }

    /// Sends the heartbeats now (a consumer announces itself before it rebalances) and then on
    /// the usual period.
    pub fn heartbeat_now(&mut self, now: Instant) {
        if self.cfg.heartbeat.is_some() {
            self.timers[Timer::Heartbeat as usize] = Some(now);
            self.handle_timeout(now);
        }
    }

    /// A request the runtime writes itself (consumer pulls, offsets, ...): encodes `code` with
    /// `ext` into `buf` (signed over `body` with the lent credentials), registers it with a
    /// deadline of `now + timeout`, and returns the [`Transmit`] whose `len` bytes the runtime
    /// writes to `peer` at once, followed by `body`. The answer comes back from
    /// [`Session::handle_frame`] as [`Incoming::Response`] with this opaque; no answer in time
    /// (or a lost connection) comes as [`Event::CallFailed`].
    ///
    /// # Errors
    /// [`CallError`]; nothing is registered then.
    #[allow(clippy::too_many_arguments)]
    pub fn call<E: crate::wire::ExtFields, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        peer: Peer,
        code: RequestCode,
        ext: Option<E>,
        body: &[u8],
        timeout: Duration,
        buf: &mut [u8],
        out: &M,
    ) -> Result<Transmit, CallError> {
        if !F::CONSUMER {
            return Err(CallError::Unsupported);
        }
        let ext = ext.as_ref().map(|e| Header::Call(e));
        self.call_with(now, peer, code, ext, body, timeout, buf, out)
    }

    /// [`Session::call`] past its one generic step: the same code for every header type.
    #[allow(clippy::too_many_arguments)]
    fn call_with<M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        peer: Peer,
        code: RequestCode,
        ext: Option<Header<'_>>,
        body: &[u8],
        timeout: Duration,
        buf: &mut [u8],
        out: &M,
    ) -> Result<Transmit, CallError> {
        let i = *self.req_free.last().ok_or(CallError::TooManyRequests)?;
        let generation = self
            .reqs
            .get(usize::from(i))
            .map_or(0, |r| (r.generation + 1) % Self::generations());
        let opaque = self.opaque_of(i, generation);
        let len = self
            .emit(code, opaque, ext, 0, body, body.len(), buf, out)
            .map_err(|e| match e {
                Ending::Acl(a) => CallError::Acl(a),
                Ending::Encode(e) => CallError::Encode(e),
                _ => CallError::Encode(EncodeError::BufferTooSmall),
            })?;
        let deadline = now.saturating_add(timeout);
        let slot = self
            .alloc_req(peer, ReqKind::Call, deadline)
            .ok_or(CallError::TooManyRequests)?;
        // Written by the runtime right away: never in the transmit queue.
        let _ = self.queued.pop_back();
        if let Some(r) = self.reqs.get_mut(usize::from(slot)) {
            r.state = ReqState::Sent;
            r.sent_at = now;
        }
        Ok(Transmit {
            peer,
            len,
            opaque,
            body: None,
            body_len: body.len(),
            report_written: false,
        })
    }

    /// Looks the topic's route up now (unless a lookup is already in flight).
    pub fn refresh_route(&mut self, now: Instant, t: TopicId) {
        self.lookup(now, t.0, false);
    }

    /// Starts a send to topic `t`; its properties come from [`Outbound`] and its body from the
    /// runtime when the frame is written. The result comes as [`Event::SendDone`].
    ///
    /// # Errors
    /// [`SubmitError::TooManySends`], [`SubmitError::UnknownTopic`], or
    /// [`SubmitError::ProfileLeftOut`].
    pub fn send(
        &mut self,
        now: Instant,
        t: TopicId,
        args: &SendArgs,
    ) -> Result<SendId, SubmitError> {
        if usize::from(t.0) >= self.topics.len() {
            return Err(SubmitError::UnknownTopic);
        }
        if !F::carries(args.retry.profile) {
            return Err(SubmitError::ProfileLeftOut);
        }
        let s = self.send_free.pop().ok_or(SubmitError::TooManySends)?;
        let Some(slot) = self.sends.get_mut(usize::from(s)) else {
            return Err(SubmitError::TooManySends);
        };
        let plan = match args.queue {
            Some(q) => SendPlan::carrying(now, args.retry).fixed_to(q),
            None => SendPlan::carrying(now, args.retry),
        };
        let deadline = now.saturating_add(args.retry.send_timeout);
        *slot = SendSlot {
            generation: slot.generation,
            state: SendState::Route,
            topic: t.0,
            mode: args.retry.mode,
            body_len: args.body_len,
            flag: args.flag,
            sys_flag: args.sys_flag,
            batch: args.batch,
            born: args.born_timestamp,
            reconsume: args.reconsume,
            plan: Some(plan),
            ..SendSlot::EMPTY
        };
        let id = SendId::new(s, slot.generation);
        let has_route = self
            .topics
            .get(usize::from(t.0))
            .is_some_and(|t| !t.queues.is_empty());
        if has_route || args.queue.is_some() {
            self.start_send(now, s);
        } else {
            self.route_waits.set(s, deadline);
            self.lookup(now, t.0, false);
        }
        Ok(id)
    }

    // ----- inputs --------------------------------------------------------------------------

    /// A whole frame arrived from `peer`.
    ///
    /// # Errors
    /// [`FrameError`] when the frame cannot be read: close that connection and report it with
    /// [`Session::handle_closed`]. Late and unknown responses are counted and dropped.
    pub fn handle_frame(
        &mut self,
        now: Instant,
        peer: Peer,
        bytes: &[u8],
    ) -> Result<Incoming, FrameError> {
        let frame = Frame::new_checked(bytes).map_err(FrameError::Framing)?;
        // A send response's ext fields are collected in the same pass (most frames are).
        let (h, resp) =
            SendMessageResponseHeader::parse_collecting(&frame).map_err(FrameError::Header)?;
        if !h.is_response() {
            // Broker-initiated requests (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE,
            // ...): counted and handed to the runtime.
            self.stats.broker_requests = self.stats.broker_requests.wrapping_add(1);
            return Ok(Incoming::Request {
                code: h.code(),
                opaque: h.opaque(),
            });
        }
        let Some(i) = self.slot_of(h.opaque()).filter(|&i| {
            self.reqs
                .get(usize::from(i))
                .is_some_and(|r| r.state == ReqState::Sent && r.peer == peer)
        }) else {
            self.stats.late_responses = self.stats.late_responses.wrapping_add(1);
            return Ok(Incoming::Handled);
        };
        let Some(kind) = self.free_req(i) else {
            return Ok(Incoming::Handled);
        };
        if let Peer::Broker(b) = peer
            && let Some(x) = self.brokers.get_mut(usize::from(b.0))
        {
            x.last_answer = Some(now);
        }
        let code = h.code();
        match kind {
            ReqKind::Route { topic, default } => {
                if code == ResponseCode::SUCCESS.0 {
                    match TopicRoute::<BROKERS, ROUTE_STR>::parse(frame.body()) {
                        Ok(route) => self.install_route(now, topic, &route, default),
                        Err(_) => self.route_failed(now, topic, false, true),
                    }
                } else if code == ResponseCode::TOPIC_NOT_EXIST.0 && !default {
                    // Java: the topic does not exist yet; send with the template's route and let
                    // the broker auto-create it.
                    self.set_lookup(topic, Lookup::Idle(None));
                    self.lookup(now, topic, true);
                } else {
                    self.route_failed(now, topic, false, true);
                }
            }
            ReqKind::Send { send } => self.send_response(now, send, &h, resp),
            ReqKind::Heartbeat => {
                if code == ResponseCode::SUCCESS.0 {
                    self.stats.heartbeats_ok = self.stats.heartbeats_ok.wrapping_add(1);
                }
            }
            ReqKind::Unregister => {}
            ReqKind::Call => return Ok(Incoming::Response(h.opaque())),
        }
        Ok(Incoming::Handled)
    }

    /// The connection to `peer` is gone (or could not be opened): every request written to it
    /// fails with `cause` at once. Requests not yet polled stay queued (the runtime reconnects
    /// on the next transmit).
    pub fn handle_closed(&mut self, now: Instant, peer: Peer, cause: TransportError) {
        if matches!(peer, Peer::NameServer(i) if i == self.name_server()) {
            self.namesrv.failed();
        }
        for i in 0..self.reqs.len() {
            let r = self.reqs[i];
            if r.state == ReqState::Sent && r.peer == peer {
                self.fail_req(now, i as u16, cause, false);
            }
        }
    }

    /// The frame of `opaque` was written completely (only needed when
    /// [`Transmit::report_written`] was set).
    pub fn handle_written(&mut self, now: Instant, opaque: i32) {
        let Some(i) = self.slot_of(opaque) else {
            return;
        };
        let Some(&Req {
            state: ReqState::Sent,
            kind: ReqKind::Send { send },
            ..
        }) = self.reqs.get(usize::from(i))
        else {
            return;
        };
        if self.sends.get(usize::from(send)).map(|s| s.mode) != Some(SendMode::Oneway) {
            return;
        }
        let _ = self.free_req(i);
        self.outcome(now, send, AttemptOutcome::Written);
    }

    /// Expires requests, sends waiting for a route and timers due at `now`. An early or extra
    /// call is a no-op.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(i) = self.req_deadlines.pop_expired(now) {
            self.fail_req(now, i, TransportError::TimedOut, true);
        }
        while let Some(s) = self.route_waits.pop_expired(now) {
            // No route in time: the plan ends the send (NoRoute or a call timeout).
            self.start_send(now, s);
        }
        if self.due(Timer::RouteRefresh, now) {
            self.timers[Timer::RouteRefresh as usize] =
                Some(now.saturating_add(self.cfg.route_refresh));
            for t in 0..self.topics.len() {
                self.lookup(now, t as u16, false);
            }
        }
        if self.due(Timer::RouteRetry, now) {
            self.timers[Timer::RouteRetry as usize] = None;
            for t in 0..self.topics.len() {
                if matches!(self.topics[t].lookup, Lookup::Idle(Some(at)) if at <= now) {
                    self.lookup(now, t as u16, false);
                }
            }
            self.rearm_route_retry();
        }
        if let Some(every) = self.cfg.heartbeat
            && self.due(Timer::Heartbeat, now)
        {
            self.timers[Timer::Heartbeat as usize] = Some(now.saturating_add(every));
            let deadline = now.saturating_add(self.cfg.request_timeout);
            for k in 0..self.nodes() {
                let Some(peer) = self.node(k) else {
                    continue;
                };
                if self.alloc_req(peer, ReqKind::Heartbeat, deadline).is_none() {
                    break;
                }
            }
        }
    }

    // ----- outputs -------------------------------------------------------------------------

    /// The next frame to write, encoded into `buf` (see [`Transmit`]), or `None`.
    ///
    /// A request whose header does not fit `buf` fails (a send with
    /// [`SendFailure::Encode`]) and the next one is tried.
    pub fn poll_transmit<M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        msgs: &M,
    ) -> Option<Transmit> {
        while let Some(i) = self.queued.pop_front() {
            let Some(r) = self.reqs.get(usize::from(i)).copied() else {
                continue;
            };
            if r.state != ReqState::Queued {
                continue;
            }
            let opaque = self.opaque(i);
            match self.encode(r, opaque, buf, msgs) {
                Ok(t) => {
                    if let Some(q) = self.reqs.get_mut(usize::from(i)) {
                        q.state = ReqState::Sent;
                        q.sent_at = now;
                    }
                    return Some(t);
                }
                Err(e) => {
                    let _ = self.free_req(i);
                    match r.kind {
                        ReqKind::Send { send } => self.finish(now, send, e),
                        ReqKind::Route { topic, .. } => self.route_failed(now, topic, false, true),
                        ReqKind::Heartbeat | ReqKind::Unregister | ReqKind::Call => {}
                    }
                }
            }
        }
        None
    }

    /// When [`Session::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut d = self.req_deadlines.peek().map(|p| p.1);
        for t in self
            .timers
            .iter()
            .flatten()
            .copied()
            .chain(self.route_waits.peek().map(|p| p.1))
        {
            d = Some(d.map_or(t, |d| d.min(t)));
        }
        d
    }

    /// The next event, or `None`.
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(b) = self.moved.pop_front() {
            return Some(Event::Reconnect(Peer::Broker(b)));
        }
        if let Some(b) = self.slave_moved.pop_front().filter(|_| F::CONSUMER) {
            return Some(Event::Reconnect(Peer::Slave(b)));
        }
        if let Some(i) = self.ns_close.pop_front() {
            return Some(Event::Reconnect(Peer::NameServer(i)));
        }
        while let Some(i) = self.call_failures.pop_front().filter(|_| F::CONSUMER) {
            let Some(&Req {
                state: ReqState::Failed(error),
                ..
            }) = self.reqs.get(usize::from(i))
            else {
                continue;
            };
            let opaque = self.opaque(i);
            if let Some(r) = self.reqs.get_mut(usize::from(i)) {
                r.state = ReqState::Free;
            }
            let _ = self.req_free.push(i);
            return Some(Event::CallFailed { opaque, error });
        }
        if let Some(t) = self.route_events.pop_front() {
            let ok = self
                .topics
                .get_mut(usize::from(t))
                .and_then(|x| x.notify.take())
                .unwrap_or(false);
            let t = TopicId(t);
            return Some(if ok {
                Event::RouteUpdated(t)
            } else {
                Event::RouteFailed(t)
            });
        }
        let s = self.done.pop_front()?;
        let slot = self.sends.get_mut(usize::from(s))?;
        let id = SendId::new(s, slot.generation);
        let result = match slot.ending.take() {
            Some(Ending::Plan(Ok(sent))) => match (slot.mode, slot.stored.take()) {
                (SendMode::Oneway, _) => Ok(SendReceipt {
                    status: sent.status,
                    broker: sent.queue.broker,
                    queue_id: sent.queue.queue_id,
                    queue_offset: None,
                    offset_msg_id: String::new(),
                    attempts: sent.attempts,
                }),
                (_, Some(st)) if st.attempt == sent.attempts => Ok(SendReceipt {
                    status: sent.status,
                    broker: sent.queue.broker,
                    queue_id: st.queue_id,
                    queue_offset: Some(st.queue_offset),
                    offset_msg_id: st.msg_id,
                    attempts: sent.attempts,
                }),
                _ => Err(SendFailure::MalformedResponse {
                    attempts: sent.attempts,
                }),
            },
            Some(Ending::Plan(Err(error))) => Err(SendFailure::Plan {
                error,
                remark: core::mem::take(&mut slot.remark),
                broker: slot.plan.as_ref().and_then(SendPlan::last_broker),
            }),
            Some(Ending::Authentication { code, attempts }) => Err(SendFailure::Authentication {
                code,
                attempts,
                remark: core::mem::take(&mut slot.remark),
            }),
            Some(Ending::Encode(e)) => Err(SendFailure::Encode(e)),
            Some(Ending::Acl(e)) => Err(SendFailure::Acl(e)),
            Some(Ending::TooManyRequests) | None => Err(SendFailure::TooManyRequests),
        };
        slot.state = SendState::Free;
        slot.plan = None;
        slot.generation = slot.generation.wrapping_add(1);
        let _ = self.send_free.push(s);
        Some(Event::SendDone { id, result })
    }

    // ----- internals -----------------------------------------------------------------------

    fn due(&self, t: Timer, now: Instant) -> bool {
        self.timers[t as usize].is_some_and(|at| at <= now)
    }

    fn next_random(&mut self) -> u32 {
        // xorshift32
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        x
    }

    /// Generations per slot so that `generation * REQUESTS + slot` stays a non-negative `i32`.
    fn generations() -> u32 {
        (i32::MAX as u32 / REQUESTS.max(1) as u32).max(1)
    }

    fn opaque(&self, i: u16) -> i32 {
        let generation = self.reqs.get(usize::from(i)).map_or(0, |r| r.generation);
        self.opaque_of(i, generation)
    }

    fn opaque_of(&self, i: u16, generation: u32) -> i32 {
        (i64::from(generation) * REQUESTS as i64 + i64::from(i)) as i32
    }

    fn slot_of(&self, opaque: i32) -> Option<u16> {
        let o = u32::try_from(opaque).ok()?;
        let n = u32::try_from(REQUESTS).ok().filter(|n| *n > 0)?;
        let i = u16::try_from(o % n).ok()?;
        let r = self.reqs.get(usize::from(i))?;
        let live = matches!(r.state, ReqState::Queued | ReqState::Sent);
        (r.generation == o / n && live).then_some(i)
    }

    fn alloc_req(&mut self, peer: Peer, kind: ReqKind, deadline: Instant) -> Option<u16> {
        let i = self.req_free.pop()?;
        let r = self.reqs.get_mut(usize::from(i))?;
        r.generation = (r.generation + 1) % Self::generations();
        r.state = ReqState::Queued;
        r.peer = peer;
        r.kind = kind;
        let _ = self.queued.push_back(i);
        self.req_deadlines.set(i, deadline);
        Some(i)
    }

    /// Frees slot `i`, returning what it was for.
    fn free_req(&mut self, i: u16) -> Option<ReqKind> {
        let r = self.reqs.get_mut(usize::from(i))?;
        if r.state == ReqState::Free {
            return None;
        }
        let was_queued = r.state == ReqState::Queued;
        r.state = ReqState::Free;
        let kind = r.kind;
        if was_queued {
            // Rare (a request that expired or failed before it was written): keep the queue
            // exact so that it never holds more than one entry per slot.
            for _ in 0..self.queued.len() {
                if let Some(q) = self.queued.pop_front()
                    && q != i
                {
                    let _ = self.queued.push_back(q);
                }
            }
        }
        self.req_deadlines.remove(i);
        let _ = self.req_free.push(i);
        Some(kind)
    }

    /// Request `i` failed without an answer.
    fn fail_req(&mut self, now: Instant, i: u16, cause: TransportError, timeout: bool) {
        let Some(r) = self.reqs.get(usize::from(i)).copied() else {
            return;
        };
        if F::CONSUMER && r.kind == ReqKind::Call && r.state == ReqState::Sent {
            // The slot waits with its error until the event is polled, so that no failure is
            // ever dropped (the queue holds each slot at most once).
            let error = if timeout {
                TransportError::TimedOut
            } else {
                cause
            };
            self.req_deadlines.remove(i);
            if let Some(x) = self.reqs.get_mut(usize::from(i)) {
                x.state = ReqState::Failed(error);
            }
            let _ = self.call_failures.push_back(i);
            return;
        }
        let Some(kind) = self.free_req(i) else {
            return;
        };
        if timeout && r.state == ReqState::Sent {
            match r.peer {
                Peer::Broker(b)
                    if self
                        .brokers
                        .get(usize::from(b.0))
                        .is_some_and(|x| x.last_answer.is_none_or(|a| a < r.sent_at)) =>
                {
                    self.close_broker(b);
                }
                Peer::Slave(_) if F::CONSUMER => self.close_peer(r.peer),
                Peer::NameServer(n) if !self.ns_close.iter().any(|x| *x == n) => {
                    let _ = self.ns_close.push_back(n);
                }
                _ => {}
            }
        }
        match kind {
            ReqKind::Route { topic, .. } => {
                if timeout {
                    // A NameServer that does not answer: use the next one.
                    self.namesrv.failed();
                }
                self.route_failed(now, topic, true, false);
            }
            ReqKind::Send { send } => {
                let cause = if timeout {
                    TransportError::TimedOut
                } else {
                    cause
                };
                self.outcome(now, send, AttemptOutcome::Transport(cause));
            }
            ReqKind::Heartbeat | ReqKind::Unregister => {}
            ReqKind::Call => {}
        }
    }

    /// Queues a route event of topic `t` (the latest outcome wins while one waits).
    fn notify(&mut self, t: u16, updated: bool) {
        let Some(topic) = self.topics.get_mut(usize::from(t)) else {
            return;
        };
        if topic.notify.replace(updated).is_none() {
            let _ = self.route_events.push_back(t);
        }
    }

    /// How many broker nodes [`node`](Self::node) numbers: masters, and slaves for consumers.
    fn nodes(&self) -> usize {
        self.brokers.len() * if F::CONSUMER { 2 } else { 1 }
    }

    /// Broker node `k` of `0..nodes()` if it has an address: the masters, then a consumer's
    /// slaves.
    fn node(&self, k: usize) -> Option<Peer> {
        let n = self.brokers.len();
        let (i, slave) = if k < n || !F::CONSUMER {
            (k, false)
        } else {
            (k - n, true)
        };
        let b = self.brokers.get(i)?;
        let id = BrokerId(i as u16);
        if !slave {
            (!b.addr.is_empty()).then_some(Peer::Broker(id))
        } else {
            (F::CONSUMER && self.consumer && !b.slave.is_empty()).then_some(Peer::Slave(id))
        }
    }

    /// Asks the runtime to close the connection to broker `b`'s master.
    fn close_broker(&mut self, b: BrokerId) {
        self.close_peer(Peer::Broker(b));
    }

    /// Asks the runtime to close the connection to a broker node.
    fn close_peer(&mut self, peer: Peer) {
        let (queue, b) = match peer {
            Peer::Broker(b) => (&mut self.moved, b),
            Peer::Slave(b) => (&mut self.slave_moved, b),
            Peer::NameServer(_) => return,
        };
        if !queue.iter().any(|m| *m == b) {
            let _ = queue.push_back(b);
        }
    }

    fn set_lookup(&mut self, t: u16, l: Lookup) {
        if let Some(t) = self.topics.get_mut(usize::from(t)) {
            t.lookup = l;
        }
    }

    /// Queues a route lookup of topic `t` (of `TBW102` on its behalf when `default`).
    fn lookup(&mut self, now: Instant, t: u16, default: bool) {
        let Some(topic) = self.topics.get(usize::from(t)) else {
            return;
        };
        if topic.lookup == Lookup::InFlight {
            return;
        }
        let peer = Peer::NameServer(self.name_server());
        let deadline = now.saturating_add(self.cfg.request_timeout);
        if self
            .alloc_req(peer, ReqKind::Route { topic: t, default }, deadline)
            .is_some()
        {
            self.set_lookup(t, Lookup::InFlight);
        } else {
            // No request slot now: try again shortly.
            self.set_lookup(
                t,
                Lookup::Idle(Some(now.saturating_add(self.cfg.route_retry))),
            );
            self.rearm_route_retry();
        }
    }

    fn rearm_route_retry(&mut self) {
        let next = self
            .topics
            .iter()
            .filter_map(|t| match t.lookup {
                Lookup::Idle(at) => at,
                Lookup::InFlight => None,
            })
            .min();
        self.timers[Timer::RouteRetry as usize] = next;
    }

    /// A lookup of topic `t` failed. `definitive`: the NameServer answered (the topic and the
    /// template do not exist, or the route is unusable): sends waiting for it fail now with
    /// NoRoute; otherwise they wait for a later lookup until their deadline.
    fn route_failed(&mut self, now: Instant, t: u16, transport: bool, definitive: bool) {
        self.stats.route_failures = self.stats.route_failures.wrapping_add(1);
        let servers = self.cfg.name_servers;
        let Some(topic) = self.topics.get_mut(usize::from(t)) else {
            return;
        };
        topic.backoff.failed();
        topic.unreachable = transport;
        let failures = topic.backoff.failures() as usize;
        topic.lookup = Lookup::Idle(None);
        let failover = transport && failures < servers;
        if failover {
            // Fail over: ask the next NameServer at once (each one once per round).
            self.lookup(now, t, false);
        } else if let Some(topic) = self.topics.get_mut(usize::from(t)) {
            if topic.queues.is_empty() {
                topic.lookup = Lookup::Idle(Some(now.saturating_add(topic.backoff.delay())));
            } else {
                // Keep the old route (Java does); the periodic refresh tries again.
                topic.backoff.reset();
            }
            self.rearm_route_retry();
        }
        if self.publish_queues(TopicId(t)).is_empty() && !failover {
            self.notify(t, false);
            // The NameServers said no, or none answered this round: the sends waiting for
            // this topic end now with NoRoute (Java's "No route info of this topic"); later
            // sends trigger the next lookup.
            self.wake_waiting(now, t);
        } else if definitive {
            self.wake_waiting(now, t);
        }
    }

    /// Whether the last lookup of topic `t` failed because no NameServer answered.
    pub fn route_unreachable(&self, t: TopicId) -> bool {
        self.topics
            .get(usize::from(t.0))
            .is_some_and(|x| x.unreachable)
    }

    fn install_route(
        &mut self,
        now: Instant,
        t: u16,
        route: &TopicRoute<BROKERS, ROUTE_STR>,
        default: bool,
    ) {
        let mut refs: Vec<PublishQueueRef, QUEUES> = Vec::new();
        if route
            .publish_queues(default.then_some(DEFAULT_TOPIC_QUEUE_NUMS), &mut refs)
            .is_err()
        {
            // More queues than fit: keep what fits (a partial list still publishes).
        }
        // The old queues go first, so that brokers only they named can be replaced.
        if let Some(topic) = self.topics.get_mut(usize::from(t)) {
            topic.queues.clear();
        }
        let mut ids: Vec<Option<BrokerId>, BROKERS> = Vec::new();
        for b in route.brokers() {
            let id = self.intern(b.name());
            if let Some(id) = id {
                // A route that lists a broker without its master: the master is gone (a
                // consumer reads from the slave meanwhile; a producer has no queue there).
                match b.addr(MASTER_ID) {
                    Some(addr) => self.set_addr(id, false, addr),
                    None if F::CONSUMER && b.addrs().next().is_some() => {
                        self.set_addr(id, false, "");
                    }
                    None => {}
                }
                if F::CONSUMER && self.consumer {
                    let slave = b
                        .addrs()
                        .filter(|(i, _)| *i > MASTER_ID)
                        .min_by_key(|(i, _)| *i);
                    self.set_addr(id, true, slave.map_or("", |(_, a)| a));
                }
            }
            let _ = ids.push(id);
        }
        // A topic that does not exist has nothing to read (TBW102 is a template to write).
        if F::CONSUMER {
            let mut read: Vec<PublishQueueRef, QUEUES> = Vec::new();
            if !default {
                let _ = route.subscribe_queues(&mut read);
            }
            if let Some(topic) = self.topics.get_mut(usize::from(t)) {
                topic.read.clear();
                for r in &read {
                    if let Some(Some(b)) = ids.get(r.broker) {
                        let _ = topic.read.push(PublishQueue {
                            broker: *b,
                            queue_id: r.queue_id,
                        });
                    }
                }
            }
        }
        let Some(topic) = self.topics.get_mut(usize::from(t)) else {
            return;
        };
        for r in &refs {
            if let Some(Some(b)) = ids.get(r.broker) {
                let _ = topic.queues.push(PublishQueue {
                    broker: *b,
                    queue_id: r.queue_id,
                });
            }
        }
        if topic.queues.is_empty() {
            self.route_failed(now, t, false, true);
            return;
        }
        topic.from_default = default;
        topic.unreachable = false;
        topic.backoff.reset();
        topic.lookup = Lookup::Idle(None);
        self.stats.route_updates = self.stats.route_updates.wrapping_add(1);
        self.rearm_route_retry();
        self.notify(t, true);
        self.wake_waiting(now, t);
    }

    /// The id of broker `name`, adding it to the table. A full table reuses the slot of a
    /// broker no route refers to any more (its connection is closed through
    /// [`Event::Reconnect`]).
    fn intern(&mut self, name: &str) -> Option<BrokerId> {
        if let Some(i) = self.brokers.iter().position(|b| b.name == name) {
            return Some(BrokerId(i as u16));
        }
        let entry = Broker {
            name: copy_exact(name)?,
            addr: String::new(),
            slave: String::new(),
            last_answer: None,
        };
        if self.brokers.len() < BROKERS {
            let id = BrokerId(u16::try_from(self.brokers.len()).ok()?);
            self.brokers.push(entry).ok()?;
            return Some(id);
        }
        let topics = &self.topics;
        let free = (0..self.brokers.len()).find(|&i| {
            let id = BrokerId(i as u16);
            !topics
                .iter()
                .any(|t| t.queues.iter().any(|q| q.broker == id))
        })?;
        let id = BrokerId(free as u16);
        if self.brokers.get(free).is_some_and(|b| !b.addr.is_empty()) {
            self.close_broker(id);
        }
        if F::CONSUMER && self.brokers.get(free).is_some_and(|b| !b.slave.is_empty()) {
            self.close_peer(Peer::Slave(id));
        }
        *self.brokers.get_mut(free)? = entry;
        self.faults.remove(id);
        Some(id)
    }

    /// Sets the address of broker `id`'s master (or slave); a changed one closes the old
    /// connection.
    fn set_addr(&mut self, id: BrokerId, slave: bool, addr: &str) {
        let Some(b) = self
            .brokers
            .get_mut(usize::from(id.0))
            .filter(|_| F::CONSUMER || !slave)
        else {
            return;
        };
        let field = if slave { &mut b.slave } else { &mut b.addr };
        if field == addr {
            return;
        }
        let moved = !field.is_empty();
        *field = copy_cut(addr);
        if moved {
            self.close_peer(if slave {
                Peer::Slave(id)
            } else {
                Peer::Broker(id)
            });
        }
    }

    /// Starts (or ends, when there is still no route) the sends waiting for topic `t`.
    fn wake_waiting(&mut self, now: Instant, t: u16) {
        for s in 0..self.sends.len() {
            let slot = &self.sends[s];
            if slot.state == SendState::Route && slot.topic == t {
                self.route_waits.remove(s as u16);
                self.start_send(now, s as u16);
            }
        }
    }

    fn start_send(&mut self, now: Instant, s: u16) {
        self.route_waits.remove(s);
        let step = self.plan_call(s, |p, env| p.start(now, env));
        self.apply(now, s, step);
    }

    /// Runs one plan transition of send `s` with the client's fault table and counter.
    fn plan_call(
        &mut self,
        s: u16,
        f: impl FnOnce(
            &mut SendPlan<BrokerId, F>,
            &mut SendEnv<'_, BrokerId, BROKERS>,
        ) -> Step<BrokerId>,
    ) -> Step<BrokerId> {
        let entropy = self.next_random();
        let Some(slot) = self.sends.get_mut(usize::from(s)) else {
            return Step::Wait;
        };
        let Some(plan) = slot.plan.as_mut() else {
            return Step::Wait;
        };
        let queues = self
            .topics
            .get(usize::from(slot.topic))
            .map_or(&[][..], |t| t.queues.as_slice());
        let mut env = SendEnv {
            queues,
            table: &mut self.faults,
            counter: &mut self.counter,
            entropy,
        };
        f(plan, &mut env)
    }

    /// Carries out plan steps of send `s` until it waits or ends.
    fn apply(&mut self, now: Instant, s: u16, mut step: Step<BrokerId>) {
        // Each round consumes an attempt, so this ends within the plan's attempt budget.
        for _ in 0..=u8::MAX {
            match step {
                Step::Wait => return,
                Step::Done(r) => return self.finish(now, s, Ending::Plan(r)),
                Step::Send(att) => {
                    self.stats.attempts = self.stats.attempts.wrapping_add(1);
                    if att.number > 1 {
                        self.stats.retries = self.stats.retries.wrapping_add(1);
                    }
                    let b = att.queue.broker;
                    if self.broker_addr(b).is_none() {
                        step = self.plan_call(s, |p, env| {
                            p.handle_outcome(
                                now,
                                AttemptOutcome::Transport(TransportError::BrokerNotFound),
                                env,
                            )
                        });
                        continue;
                    }
                    let Some(r) =
                        self.alloc_req(Peer::Broker(b), ReqKind::Send { send: s }, att.deadline)
                    else {
                        return self.finish(now, s, Ending::TooManyRequests);
                    };
                    if let Some(slot) = self.sends.get_mut(usize::from(s)) {
                        slot.state = SendState::Attempt;
                        slot.req = Some(r);
                    }
                    return;
                }
            }
        }
    }

    fn finish(&mut self, now: Instant, s: u16, ending: Ending) {
        let Some(slot) = self.sends.get_mut(usize::from(s)) else {
            return;
        };
        if matches!(slot.state, SendState::Free | SendState::Done) {
            return;
        }
        // A send that failed on a broker (not for want of a route) refreshes the route.
        let failed = matches!(&ending, Ending::Plan(Err(e)) if e.attempts() > 0);
        let t = slot.topic;
        slot.state = SendState::Done;
        slot.ending = Some(ending);
        if let Some(r) = slot.req.take()
            && self
                .reqs
                .get(usize::from(r))
                .is_some_and(|q| q.kind == ReqKind::Send { send: s } && q.state != ReqState::Free)
        {
            let _ = self.free_req(r);
        }
        self.route_waits.remove(s);
        let _ = self.done.push_back(s);
        // A failed send refreshes its topic's route, at most once a second (the periodic
        // refresh runs regardless).
        if let Some(topic) = self.topics.get_mut(usize::from(t))
            && failed
            && error_refresh_due(topic.error_refresh, now)
        {
            topic.error_refresh = Some(now);
            self.lookup(now, t, false);
        }
    }

    fn send_response<'a>(
        &mut self,
        now: Instant,
        s: u16,
        h: &CommandHeader<'a>,
        resp: ResponseSlots<'a>,
    ) {
        let mut sbuf = [0u8; MAX_REMARK];
        let mut scratch = Scratch::new(&mut sbuf);
        let parsed = parse_send_response_collected(h, resp, &mut scratch);
        let Some(slot) = self.sends.get_mut(usize::from(s)) else {
            return;
        };
        slot.req = None;
        let attempt = slot.plan.as_ref().map_or(0, |p| p.attempts_made());
        let code = match parsed {
            Ok(SendResponse::Stored {
                code,
                offset_msg_id,
                queue_id,
                queue_offset,
                ..
            }) => {
                slot.stored = Some(Stored {
                    attempt,
                    queue_id,
                    queue_offset,
                    msg_id: copy_cut(offset_msg_id),
                });
                code
            }
            Ok(SendResponse::Rejected { code }) if F::BROKER_REMARKS => {
                slot.remark = h
                    .remark()
                    .and_then(|r| {
                        r.as_str()
                            .or_else(|| r.unescape_into(&mut sbuf).ok())
                            .map(copy_cut)
                    })
                    .unwrap_or_default();
                if is_auth_failure(code, Some(slot.remark.as_str())) {
                    // The same credentials fail the same way on every broker: no retry.
                    return self.finish(
                        now,
                        s,
                        Ending::Authentication {
                            code,
                            attempts: attempt,
                        },
                    );
                }
                code
            }
            Ok(SendResponse::Rejected { code }) => code,
            Err(_) => {
                slot.stored = None;
                h.code()
            }
        };
        self.outcome(now, s, AttemptOutcome::Response(code));
    }

    /// The attempt of send `s` ended with `outcome`; counts a broker the fault table isolates.
    fn outcome(&mut self, now: Instant, s: u16, outcome: AttemptOutcome) {
        let broker = self
            .sends
            .get(usize::from(s))
            .and_then(|x| x.plan.as_ref())
            .and_then(SendPlan::current)
            .map(|a| a.queue.broker);
        let before = broker.is_some_and(|b| self.faults.is_available(now, b));
        let step = self.plan_call(s, |p, env| p.handle_outcome(now, outcome, env));
        if before && broker.is_some_and(|b| !self.faults.is_available(now, b)) {
            self.stats.brokers_isolated = self.stats.brokers_isolated.wrapping_add(1);
        }
        self.apply(now, s, step);
    }

    /// Encodes request `r` into `buf` (signed when the runtime lends credentials).
    fn encode<M: Outbound + ?Sized>(
        &self,
        r: Req,
        opaque: i32,
        buf: &mut [u8],
        out: &M,
    ) -> Result<Transmit, Ending> {
        let mut tx = Transmit {
            peer: r.peer,
            len: 0,
            opaque,
            body: None,
            body_len: 0,
            report_written: false,
        };
        let too_small = Ending::Encode(EncodeError::BufferTooSmall);
        // A small body (heartbeat) is written into `buf` too: first at its front, then moved
        // to the end, and after the header once its length is known.
        let mut inline_body = 0;
        let version = self.cfg.version;
        let (code, header) = match r.kind {
            ReqKind::Route { topic, default } => {
                let name = if default {
                    DEFAULT_TOPIC
                } else {
                    self.topics
                        .get(usize::from(topic))
                        .map_or("", |t| t.name.as_str())
                };
                let hdr = GetRouteInfoRequestHeader {
                    topic: name,
                    accept_standard_json_only: None,
                };
                (RequestCode::GET_ROUTEINFO_BY_TOPIC, Header::Route(hdr))
            }
            ReqKind::Heartbeat | ReqKind::Unregister if !F::HEARTBEATS => return Err(too_small),
            ReqKind::Call => return Err(too_small),
            ReqKind::Heartbeat => {
                let flavor = if version >= version::V5_0_0 {
                    HeartbeatFlavor::V5
                } else {
                    HeartbeatFlavor::V4
                };
                let n = match out.heartbeat_body(buf) {
                    Some(n) => n,
                    None => write_heartbeat(&self.client_id, &[self.group.as_str()], flavor, buf)
                        .map_err(|_| too_small)?,
                };
                let total = buf.len();
                buf.copy_within(..n, total - n);
                inline_body = n;
                let ext = (flavor == HeartbeatFlavor::V5).then_some(HeartbeatRequestHeader {});
                (RequestCode::HEART_BEAT, Header::Heartbeat(ext))
            }
            ReqKind::Unregister => {
                let hdr = UnregisterClientRequestHeader {
                    client_id: &self.client_id,
                    producer_group: (!self.consumer).then_some(self.group.as_str()),
                    consumer_group: self.consumer.then_some(self.group.as_str()),
                };
                (RequestCode::UNREGISTER_CLIENT, Header::Unregister(hdr))
            }
            ReqKind::Send { send } => {
                let slot = self.sends.get(usize::from(send)).ok_or(too_small)?;
                let att = slot
                    .plan
                    .as_ref()
                    .and_then(SendPlan::current)
                    .ok_or(too_small)?;
                let id = SendId::new(send, slot.generation);
                let topic = self
                    .topics
                    .get(usize::from(slot.topic))
                    .map_or("", |t| t.name.as_str());
                let req = SendRequest::new(
                    &self.group,
                    topic,
                    att.queue.queue_id,
                    self.broker_name(att.queue.broker).unwrap_or(""),
                    out.properties(id),
                    slot.born,
                )
                .flag(slot.flag)
                .sys_flag(slot.sys_flag)
                .batch(slot.batch)
                .reconsume(slot.reconsume);
                tx.body = Some(id);
                tx.body_len = slot.body_len;
                tx.report_written = slot.mode == SendMode::Oneway;
                (req.code(), Header::Send(req.header()))
            }
        };
        let total = buf.len();
        let body_len = inline_body.max(tx.body_len);
        let flag = if tx.report_written { flag::ONEWAY } else { 0 };
        let (head, tail) = buf.split_at_mut(total - inline_body);
        let body: &[u8] = match tx.body {
            Some(id) => out.body(id),
            None => tail,
        };
        let h = self.emit(code, opaque, Some(header), flag, body, body_len, head, out)?;
        buf.copy_within(total - inline_body.., h);
        tx.len = h + inline_body;
        Ok(tx)
    }

    /// Writes the prefix and header of a request into `head` (signed over `body` when the
    /// runtime lends credentials); the frame counts `body_len` body bytes after it.
    #[allow(clippy::too_many_arguments)]
    fn emit<E: crate::wire::ExtFields, M: Outbound + ?Sized>(
        &self,
        code: RequestCode,
        opaque: i32,
        ext: E,
        flag: i32,
        body: &[u8],
        body_len: usize,
        head: &mut [u8],
        out: &M,
    ) -> Result<usize, Ending> {
        let ty = if F::ROCKETMQ_HEADERS {
            self.cfg.serialize_type
        } else {
            SerializeType::JSON
        };
        let version = self.cfg.version;
        match out.credentials() {
            None => {
                let mut repr = CommandRepr::request(code, opaque, version, Some(ext));
                repr.language = self.cfg.language;
                repr.flag = flag;
                repr.emit_frame_prefix_and_header(ty, body_len, head)
            }
            Some(creds) => {
                let signed = SignedFields::sign(&creds, ext, body).map_err(Ending::Acl)?;
                let mut repr = CommandRepr::request(code, opaque, version, Some(signed));
                repr.language = self.cfg.language;
                repr.flag = flag;
                repr.emit_frame_prefix_and_header(ty, body_len, head)
            }
        }
        .map_err(Ending::Encode)
    }
}

#[cfg(test)]
mod tests;
