//! # rmq-smoltcp
//!
//! A heap-free Apache RocketMQ producer and consumer for constrained gateways: it drives the
//! core client session ([`rmq_core::session`], the same one rmq-std drives) over smoltcp TCP
//! sockets ([`Producer`], [`Client`]), or with the `async` feature over any async TCP stack
//! that implements `embedded-nal-async` (module `aio`: embassy-net, modem and W5500 drivers).
//! Every protocol decision is the session's: NameServer choice and failover, the route and its
//! TBW102 fallback, queue selection, retries, request correlation; message properties and
//! validation come from [`rmq_core::producer::encode_message_properties`], as in rmq-std. This
//! crate opens and watches connections, stages one frame at a time and moves bytes.
//!
//! ## Model
//!
//! - **No heap, no clock, no threads.** Every buffer is lent by the caller ([`Buffers`]) or
//!   sized by const generics; the caller passes `now` to every call.
//! - **One topic per [`Producer`]**, looked up through the NameServer (GET_ROUTEINFO_BY_TOPIC;
//!   a topic the NameServer does not know falls back to the `TBW102` route, as Java does) and
//!   refreshed every [`BaseConfig::route_refresh`]. When no NameServer answers a whole round, the
//!   send waiting for the route fails at once (Java's "No route info"); lookups go on with
//!   back-off.
//! - **Gateway defaults that differ from rmq-std, and why**: JSON headers only and no
//!   heartbeats (a producer without transactions needs none; they cost cellular traffic),
//!   broker remarks not kept (the failure carries the code), the Java 4.9 fault profile (fewer
//!   states than Adaptive; only it and Plain are compiled in: Java 5.x's and Adaptive are
//!   refused with `ConfigError::ProfileLeftOut`), 4.9.8 header version. Each is compiled out
//!   (session `Features`), which is what keeps the image within its flash budget.
//! - **One request in flight.** [`Producer::send`] (completion reported by
//!   [`Producer::take_completion`]), [`Producer::send_oneway`] (complete once written), or
//!   [`Producer::send_batch`]: several messages in one SEND_BATCH_MESSAGE request, so that a
//!   long-RTT link (cellular: 100–300 ms) carries many messages per round trip (31× the
//!   one-message rate at +100 ms with batches of 32, BENCHMARKS.md). The retry plan, queue
//!   selection and latency fault table are the core's ([`rmq_core::retry::SendPlan`]); retries
//!   re-select a queue and reconnect as needed.
//! - **Store-and-forward** is the core's [`rmq_core::outbox::Outbox`]: the application pushes
//!   telemetry into a caller-owned ring (bounded in bytes and count, drop-oldest or
//!   refuse-new), sends [`Outbox::current_batch`](rmq_core::outbox::Outbox::current_batch)
//!   with this producer, and tells the outbox how it ended
//!   ([`SendFailure::is_retryable`]: keep it for later). `firmware/src/forward.rs` is a
//!   complete example, run in QEMU through a 30 s link outage.
//! - **Downlink**: a [`Client`] consumes one topic (a TAG expression; clustering: it owns
//!   every queue of the topic, its group's only member, or with the `rebalance` feature the
//!   group's members share them; the subscription travels in every pull, so no heartbeats
//!   without `rebalance`; long polling; offsets committed every
//!   [`ClientConfig::commit_interval`]) with the core's
//!   [`PullConsumer`](rmq_core::pull_consumer::PullConsumer), handing each message to a closure
//!   once, in queue order, and can publish as a producer does over the same session and
//!   connections (one NameServer and one broker socket for both, one copy of the session's code
//!   in the image). `firmware/src/downlink.rs` runs one in QEMU. A client is kilobytes: build
//!   it where it lives with [`Client::check`], [`Client::build`] and [`Client::start`] (no
//!   copy through the stack), rather than [`Client::new`] (which returns it in a `Result`:
//!   several times its size in stack while it is assembled).
//! - **Shared state**: nothing here is shared with an interrupt, so neither `critical-section`
//!   nor `nb` is needed: `poll` never blocks (smoltcp's model), and the async producer is one
//!   task's. An application that produces from an interrupt queues messages there (e.g. an
//!   [`Outbox`](rmq_core::outbox::Outbox) behind a `critical_section::Mutex`) and sends from
//!   its main loop.
//! - **[`Producer::poll`] does bounded work** (two interface polls, at most a few frames read
//!   per connection, one write step) and returns the instant it must be called again at the
//!   latest (or earlier, when packets arrive).
//!
//! ## Framing guarantees
//!
//! Frames are staged in [`Buffers::tx`] (prefix and header) and written from there and from the
//! message region of [`Buffers::message`] (body) with `send_slice`. A partial write or a full
//! socket buffer (WouldBlock) leaves a cursor; the next poll resumes at that byte. No other
//! frame is staged, on any connection, until the current one is completely written, so frames
//! can never interleave. A half-written frame is only ever dropped together with its
//! connection (which is then reset), never restarted on it.
//!
//! Incoming frames are peeked in the socket's receive ring and taken out only when complete,
//! so [`Buffers::rx`] is shared by all connections. The socket's receive buffer and
//! [`Buffers::rx`] must each hold the largest response (the route response: about 200 bytes
//! of header plus 250–400 bytes of route per broker).
//!
//! ## Logging
//!
//! With the `defmt` feature, connection, route and send events are logged with `defmt`, and
//! the public types implement `defmt::Format`.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[macro_use]
mod log;
// (Before the API types: its `sending_api!` is theirs.)
#[macro_use]
mod net;
mod addr;
#[cfg(feature = "async")]
pub mod aio;
mod client;
mod machine;
mod producer;

pub use addr::parse_endpoint;
pub use client::{Client, ClientConfig, ClientError, MAX_PULL_BATCH};
pub use net::Stats;
pub use producer::Producer;
pub use rmq_core as core;
/// What a send takes and gives: the core's sending side over the lent message buffer
/// ([`rmq_core::gateway`]), which both gateways drive.
pub use rmq_core::gateway::{Completion, Message, SendId, SendReceipt, SubmitError};
/// A message handed to [`Client::poll`]'s closure (the core consumer's type).
pub use rmq_core::pull_consumer::Delivery;
/// Why a send failed (the core session's type, as every runtime reports it).
pub use rmq_core::session::SendFailure;

use ::core::net::SocketAddr;
use rmq_core::producer as core_producer;
use rmq_core::retry::{RetryConfig, SendMode};
use rmq_core::session;
use rmq_core::time::Duration;
use rmq_core::wire::{SerializeType, version};

/// Longest broker name a [`Producer`] stores.
pub const MAX_BROKER_NAME: usize = rmq_core::session::MAX_BROKER_NAME;
/// Longest offsetMsgId kept in a [`SendReceipt`] (IPv6 brokers give 56 hex digits).
pub const MAX_MSG_ID: usize = rmq_core::session::MAX_MSG_ID;

/// The settings a [`Producer`] and a [`Client`] share (the field `base` of [`Config`] and
/// [`ClientConfig`]): the NameServers, the session's requests and timers, how sends are made,
/// the connections. `'a` is the lifetime of the strings (usually `'static`).
#[derive(Clone, Copy, Debug)]
pub struct BaseConfig<'a> {
    /// The NameServers. One is used at a time, starting at a seed-chosen index; after a
    /// failure (connect error, reset, route timeout) the next one is tried (core
    /// `NamesrvCursor`, Java's choice). IPv4 only on the smoltcp runtime (it is built without
    /// IPv6): an IPv6 address there is never reached.
    pub namesrvs: &'a [SocketAddr],
    /// Producer group (`a` in the send header).
    pub producer_group: &'a str,
    /// Retry, selection and fault-tolerance settings (mode is set per send). Profiles
    /// [`Plain`](rmq_core::select::Profile::Plain) and
    /// [`Java49`](rmq_core::select::Profile::Java49) only: the others are not compiled in
    /// ([`ConfigError::ProfileLeftOut`](rmq_core::session::ConfigError::ProfileLeftOut)).
    pub retry: RetryConfig,
    /// `version` ordinal sent in headers.
    pub version: i32,
    /// TCP connect timeout (also bounded by the attempt's deadline).
    pub connect_timeout: Duration,
    /// Timeout of one request other than a send: a route lookup (and a client's heartbeats,
    /// offset commits and queries).
    pub request_timeout: Duration,
    /// Route refresh period (Java `pollNameServerInterval`, 30 s).
    pub route_refresh: Duration,
    /// First wait before retrying a failed route lookup; doubles per consecutive failure
    /// (core `Backoff`), up to 30 s.
    pub route_retry: Duration,
    /// A stalled half-written frame (no byte accepted for this long), or sent data the peer
    /// does not acknowledge for this long, resets its connection.
    pub write_stall_timeout: Duration,
    /// First local TCP port; connections use successive ports from here (wrapping within
    /// 49152..65535).
    pub local_port_base: u16,
    /// Gateway IPv4 address (first field of UNIQ_KEY).
    pub client_ip: [u8; 4],
    /// Per-boot random value: seeds the queue counter, UNIQ_KEY and retry entropy.
    pub seed: u32,
}

impl<'a> BaseConfig<'a> {
    /// Defaults: Java 4.9 profile with the latency switch on, 3 s send timeout, 2 retries.
    fn new(namesrvs: &'a [SocketAddr], producer_group: &'a str, seed: u32) -> Self {
        BaseConfig {
            namesrvs,
            producer_group,
            retry: RetryConfig::java49(SendMode::Sync),
            version: version::V4_9_8,
            connect_timeout: core_producer::CONNECT_TIMEOUT,
            request_timeout: core_producer::CLIENT_API_TIMEOUT,
            route_refresh: core_producer::POLL_NAME_SERVER_INTERVAL,
            route_retry: Duration::from_millis(1000),
            write_stall_timeout: Duration::from_millis(3000),
            local_port_base: 49152,
            client_ip: [0, 0, 0, 0],
            seed,
        }
    }

    /// The core session's settings, with client id `client_id` (a consumer's group and
    /// heartbeat are the client's to add). No heartbeats for a producer: `Gateway<false>`
    /// leaves them out (a producer without transactions needs none; a gateway saves the
    /// traffic), so the session never schedules them.
    pub(crate) fn session(&self, client_id: &'a str) -> session::Config<'a> {
        let mut sc = session::Config::new(self.namesrvs.len(), self.producer_group, client_id);
        sc.version = self.version;
        sc.fault_rule = self.retry.profile.update_rule();
        sc.route_refresh = self.route_refresh;
        sc.request_timeout = self.request_timeout;
        sc.route_retry = self.route_retry;
        sc.seed = session::seed_or_default(self.seed);
        // JSON (0), or ROCKETMQ (1) with the feature (every broker answers either).
        sc.serialize_type = SerializeType(u8::from(cfg!(feature = "rocketmq-headers")));
        sc
    }
}

/// Producer settings. `'a` is the lifetime of the strings (usually `'static`).
#[derive(Clone, Copy, Debug)]
pub struct Config<'a> {
    /// What a producer shares with a client.
    pub base: BaseConfig<'a>,
    /// The topic this producer publishes to.
    pub topic: &'a str,
}

impl<'a> Config<'a> {
    /// Defaults: Java 4.9 profile with the latency switch on, 3 s send timeout, 2 retries.
    pub fn new(namesrvs: &'a [SocketAddr], producer_group: &'a str, topic: &'a str) -> Self {
        Config {
            base: BaseConfig::new(namesrvs, producer_group, 0x5EED_1234),
            topic,
        }
    }
}

/// Caller-owned buffers.
#[derive(Debug)]
pub struct Buffers<'b> {
    /// Staging for one frame's prefix and header (route request or send header; 512 bytes
    /// are plenty for topic, group and broker names of usual lengths).
    pub tx: &'b mut [u8],
    /// One received frame (shared by every connection).
    pub rx: &'b mut [u8],
    /// The message in flight: encoded properties plus body.
    pub message: &'b mut [u8],
}
