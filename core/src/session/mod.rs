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

use crate::acl::{AclError, Credentials};
use crate::counter::QueueCounter;
use crate::deadline::DeadlineHeap;
use crate::fault::{FaultTable, UpdateRule};
use crate::producer::{
    Backoff, CLIENT_API_TIMEOUT, DEFAULT_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, ERROR_REFRESH_MIN_GAP,
    HeartbeatFlavor, NamesrvCursor, POLL_NAME_SERVER_INTERVAL, SendRequest, SendResponse,
    TimerRefusal, error_refresh_due, is_auth_failure, parse_send_response_collected,
    write_heartbeat,
};
use crate::retry::{
    AttemptOutcome, RetryConfig, SendEnv, SendError, SendErrorKind, SendMode, SendPlan, SendStatus,
    Sent, Step,
};
use crate::route::{MASTER_ID, PublishQueueRef, TopicRoute};
use crate::select::{ProfileSet, PublishQueue};
use crate::store::{Fixed, Slots, Store, Table};
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

mod api;
mod config;
mod encode;
mod error;
mod requests;
mod routes;
mod sends;

pub use api::SessionApi;
pub use config::{Config, ConfigError, Features, Full, seed_or_default};
pub use error::{CallError, FrameError, SendFailure, SubmitError};
pub use routes::RouteHealth;
pub use sends::{SendArgs, SendReceipt, Target};

use config::Settings;
use encode::Header;
use requests::{Req, ReqKind, ReqState, TIMERS, Timer};
use routes::{Broker, Lookup, Topic};
use sends::{Ending, SendSlot, SendState};

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
/// First wait before looking a topic up again whose route lists its brokers without a master
/// (a master switch: the new master registers 0.1-0.4 s after the old one died,
/// `tests/tests/controller.rs`).
pub const MASTER_RETRY: Duration = Duration::from_millis(100);
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

    /// Namespace v2 ([`crate::namespace::V2Fields`]): every request then carries it.
    fn namespace_v2(&self) -> Option<&str> {
        None
    }

    /// Writes the HEART_BEAT body into `buf` and returns its length, for a client whose
    /// heartbeat carries more than its producer group (a consumer's subscriptions, written with
    /// [`crate::consumer::write_heartbeat`]); `None` (the default) writes the producer body.
    fn heartbeat_body(&self, buf: &mut [u8]) -> Option<usize> {
        let _ = buf;
        None
    }

    /// Writes the properties of send `id` into `buf` when they are not lent as a string (a
    /// consumer's resend of a message to `%RETRY%`, whose properties the client derives from
    /// the original's); their length, or `None` (the default) to use
    /// [`properties`](Self::properties).
    fn write_properties(&self, id: SendId, buf: &mut [u8]) -> Option<usize> {
        let _ = (id, buf);
        None
    }

    /// The wall clock now, Unix ms (a consumer's running info reports its timestamps in it).
    fn unix_millis(&self) -> i64 {
        0
    }

    /// Property `i` the runtime adds to a consumer's running info (NameServer addresses,
    /// start time, threads, version), `None` past the last.
    fn running_prop(&self, i: usize) -> Option<(&str, &str)> {
        let _ = i;
        None
    }

    /// The application's mean processing time per message, hundredths of ms (a consumer's
    /// running info reports it).
    fn consume_rt(&self) -> u64 {
        0
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
    /// An answer to a request a broker sent (`opaque` is the broker's): no request of ours
    /// waits for it, so it is written whatever [`Session::is_live`] says.
    pub answer: bool,
}

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
    /// Send `id` ([`Target::Choose`]) has its route: choose one of its `queues` publish
    /// queues with [`Session::choose_queue`] (within the send's deadline).
    ChooseQueue {
        /// Which send.
        id: SendId,
        /// How many publish queues the topic has.
        queues: usize,
    },
    /// Every heartbeat sent (the periodic round's, or [`Session::heartbeat_now`]'s) was
    /// answered or failed: none is in flight any more.
    HeartbeatsDone,
    /// Every UNREGISTER_CLIENT of [`Session::unregister_all`] was answered or failed.
    Unregistered,
    /// A request of [`Session::call`] got no answer (unless [`Session::poll_call_failed`]
    /// took it first).
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
    /// A send's response carried a recall handle (a timer message on 5.3.2+, see
    /// [`crate::recall`]; only with [`Features::RECALL`]): `frame[start..end]`, handled like
    /// any other send response otherwise (its [`Event::SendDone`] follows).
    RecallHandle {
        /// The send.
        send: SendId,
        /// Where the handle starts in the frame.
        start: usize,
        /// Where it ends.
        end: usize,
    },
    /// A request the broker sent us (e.g. NOTIFY_CONSUMER_IDS_CHANGED): the frame is the
    /// runtime's to act on.
    Request {
        /// The request code.
        code: i32,
        /// Its opaque.
        opaque: i32,
    },
}

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
pub struct Session<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features = Full,
    St: Store = Fixed,
> {
    features: core::marker::PhantomData<F>,
    cfg: Settings,
    /// The producer group, or the consumer group of a consumer's client (`consumer`).
    group: String<MAX_GROUP_LEN>,
    consumer: bool,
    client_id: String<MAX_CLIENT_ID_LEN>,
    namesrv: NamesrvCursor,
    topics: St::Vec<Topic<QUEUES>, TOPICS>,
    brokers: Vec<Broker, BROKERS>,
    faults: FaultTable<BrokerId, BROKERS>,
    counter: QueueCounter,
    rng: u32,
    reqs: [Req; REQUESTS],
    req_free: Vec<u16, REQUESTS>,
    queued: Deque<u16, REQUESTS>,
    req_deadlines: DeadlineHeap<REQUESTS>,
    /// Slots `0..sends.len()` have been used; a free one's index waits in `send_free`.
    sends: St::Slots<SendSlot<F>, SENDS>,
    send_free: Vec<u16, SENDS>,
    route_waits: DeadlineHeap<SENDS>,
    done: Deque<u16, SENDS>,
    /// Sends waiting for [`Session::choose_queue`] whose [`Event::ChooseQueue`] waits.
    choices: Deque<u16, SENDS>,
    moved: Deque<BrokerId, BROKERS>,
    slave_moved: Deque<BrokerId, BROKERS>,
    ns_close: Deque<u8, 4>,
    call_failures: Deque<u16, REQUESTS>,
    /// Heartbeats and unregisters queued or in flight, and whether their "all done" events
    /// wait to be polled.
    heartbeats: u16,
    unregisters: u16,
    heartbeats_done: bool,
    unregistered: bool,
    route_events: Deque<u16, TOPICS>,
    timers: [Option<Instant>; TIMERS],
    /// The remoting version of the NameServers' last answer (0 before any).
    namesrv_version: i32,
    stats: Stats,
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
> fmt::Debug for Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("group", &self.group)
            .field("client_id", &self.client_id)
            .field("topics", &self.topics.len())
            .field("brokers", &self.brokers.len())
            .field("pending_requests", &self.pending_requests())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
> Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>
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
    pub(crate) fn assemble(cfg: &Config<'_>, now: Instant) -> Self {
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
            topics: Table::new(),
            brokers: Vec::new(),
            faults: FaultTable::new(cfg.fault_rule),
            counter: QueueCounter::new(seed),
            rng: seed,
            reqs: [Req::FREE; REQUESTS],
            req_free,
            queued: Deque::new(),
            req_deadlines: DeadlineHeap::new(),
            sends: Slots::new(),
            send_free,
            route_waits: DeadlineHeap::new(),
            done: Deque::new(),
            choices: Deque::new(),
            moved: Deque::new(),
            slave_moved: Deque::new(),
            ns_close: Deque::new(),
            call_failures: Deque::new(),
            heartbeats: 0,
            unregisters: 0,
            heartbeats_done: false,
            unregistered: false,
            route_events: Deque::new(),
            timers,
            namesrv_version: 0,
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

    /// The runtime's NameServer list changed ([`crate::discovery`]): it now has `n` addresses
    /// (1 to 255). The runtime closes its connections to the old ones (their lookups fail over
    /// as after any lost connection); the next lookups go to the new list.
    pub fn set_name_servers(&mut self, n: usize) {
        self.cfg.name_servers = n.clamp(1, usize::from(u8::MAX));
    }

    /// The id of a topic already in the route table.
    pub fn topic_id(&self, name: &str) -> Option<TopicId> {
        let i = self.topics.iter().position(|t| t.name == name)?;
        Some(TopicId(u16::try_from(i).ok()?))
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
        if !F::SLAVES {
            return None;
        }
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

    /// The remoting version of broker `b`'s last answer (0 before any).
    pub fn broker_version(&self, b: BrokerId) -> i32 {
        self.brokers.get(usize::from(b.0)).map_or(0, |x| x.version)
    }

    /// The group this client announces (a producer's or a consumer's).
    pub fn group(&self) -> &str {
        &self.group
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
            if waits != matches!(s.state, SendState::Route | SendState::Choose) {
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
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
> Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>
{
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
        match peer {
            Peer::Broker(b) => {
                if let Some(x) = self.brokers.get_mut(usize::from(b.0)) {
                    x.last_answer = Some(now);
                    x.version = h.version();
                }
            }
            _ => self.namesrv_version = h.version(),
        }
        let code = h.code();
        match kind {
            ReqKind::Route { topic, default } => {
                if code == ResponseCode::SUCCESS.0 {
                    match TopicRoute::<BROKERS, ROUTE_STR>::parse(frame.body()) {
                        Ok(route) => self.install_route(now, topic, &route, default),
                        Err(_) => self.route_failed(now, topic, false, true),
                    }
                } else if code == ResponseCode::TOPIC_NOT_EXIST.0
                    && !default
                    && self.topic_name(TopicId(topic)) != Some(DEFAULT_TOPIC)
                {
                    // Java: the topic does not exist yet; send with the template's route and let
                    // the broker auto-create it (no second lookup when it is the template).
                    self.set_lookup(topic, Lookup::Idle(None));
                    self.lookup(now, topic, true);
                } else {
                    if F::BROKER_REMARKS {
                        self.route_refused(now, topic, code, &h);
                    }
                    self.route_failed(now, topic, false, true);
                }
            }
            ReqKind::Send { send } => {
                let handle = F::RECALL
                    .then(|| crate::recall::response_handle(&h, &resp))
                    .flatten();
                let id = self
                    .sends
                    .get(usize::from(send))
                    .map(|x| SendId::new(send, x.generation));
                self.send_response(now, send, &h, resp);
                // Where the handle lies in the frame (it borrows from it: no copy here).
                let at = handle.and_then(|f| {
                    let raw = f.raw();
                    let start = (raw.as_ptr() as usize).checked_sub(bytes.as_ptr() as usize)?;
                    let end = start + raw.len();
                    (bytes.get(start..end) == Some(raw) && !f.has_escapes()).then_some((start, end))
                });
                if let (Some((start, end)), Some(send)) = (at, id) {
                    return Ok(Incoming::RecallHandle { send, start, end });
                }
            }
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
            self.route_wait_over(now, s);
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
        if let Some((opaque, error)) = self.poll_call_failed() {
            return Some(Event::CallFailed { opaque, error });
        }
        if F::TARGETS {
            while let Some(s) = self.choices.pop_front().filter(|_| F::TARGETS) {
                let Some(slot) = self
                    .sends
                    .get(usize::from(s))
                    .filter(|x| x.state == SendState::Choose)
                else {
                    continue;
                };
                let queues = self.publish_queues(TopicId(slot.topic)).len();
                let id = SendId::new(s, slot.generation);
                return Some(Event::ChooseQueue { id, queues });
            }
        }
        if F::HEARTBEATS && core::mem::take(&mut self.heartbeats_done) {
            return Some(Event::HeartbeatsDone);
        }
        if F::HEARTBEATS && core::mem::take(&mut self.unregistered) {
            return Some(Event::Unregistered);
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
            Some(Ending::NoNameServer) => Err(SendFailure::NoNameServer),
            Some(Ending::NoSuchBroker) => Err(SendFailure::NoSuchBroker),
            Some(Ending::TimerRefused {
                refusal,
                code,
                attempts,
            }) => Err(SendFailure::TimerRefused {
                refusal,
                code,
                attempts,
                remark: core::mem::take(&mut slot.remark),
            }),
            Some(Ending::TimerUnsupported(broker_version)) => {
                Err(SendFailure::TimerUnsupported { broker_version })
            }
            Some(Ending::Acl(e)) => Err(SendFailure::Acl(e)),
            Some(Ending::TooManyRequests) | None => Err(SendFailure::TooManyRequests),
        };
        slot.state = SendState::Free;
        slot.plan = None;
        slot.generation = slot.generation.wrapping_add(1);
        let _ = self.send_free.push(s);
        Some(Event::SendDone { id, result })
    }
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
> Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>
{
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
}

#[cfg(test)]
mod tests;
