//! The client: a consumer (the core [`PullConsumer`]) and optionally a producer
//! ([`rmq_core::gateway`]) on one core [`Session`], as a [`Machine`] driven over smoltcp sockets by
//! [`crate::net`] (or, with the `async` feature, over any async stack by [`crate::aio`]): one
//! NameServer connection and one per broker for both, and one copy of the session's code in
//! the image.
//!
//! Every decision is the core's (rebalance, start offsets, long polling, flow control, offset
//! commits, queue selection and retries); this file hands it frames and the caller each
//! message.

use core::net::SocketAddr;
use rmq_core::client::{self as core_client, Attached};
use rmq_core::consumer::{ConsumeFromWhere, MessageModel};
use rmq_core::pull_consumer::{Delivery, PullConfig, PullConfigError, PullConsumer, PullStats};
use rmq_core::select::ProfileSet;
use rmq_core::session::{self, Features, TopicId};
use rmq_core::time::{Duration, Instant};
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::phy::Device;

use crate::machine::{Gateway, Gw};
use crate::net::{Net, Stats};
use crate::{BaseConfig, Completion, Message, SendId, SubmitError};
use rmq_core::gateway::Sender;

/// Most messages one pull asks for (`pullBatchSize` is clamped to it).
pub const MAX_PULL_BATCH: u32 = 32;
/// Requests in flight at once: a pull per owned queue, commits, heartbeats, lookups, a send.
const REQUESTS: usize = 16;
/// Consumers of one group a rebalance can see.
const CONSUMERS: usize = 8;

/// One subscription; one send-back slot (the client never nacks: a message is acknowledged
/// when the closure returns).
pub(crate) type Pull<const OWNED: usize, const TRACK: usize, const Q: usize> =
    PullConsumer<1, OWNED, TRACK, REQUESTS, CONSUMERS, Q, 1>;

/// Client settings. `'a` is the lifetime of the strings (usually `'static`).
#[derive(Clone, Copy, Debug)]
pub struct ClientConfig<'a> {
    /// What a client shares with a producer (its sends, NameServers, timers, connections);
    /// the producer group of the sends defaults to `gateway`.
    pub base: BaseConfig<'a>,
    /// Consumer group, whose offsets are committed to the brokers. Without the `rebalance`
    /// feature the client owns every queue of the topic: give each gateway a group of its
    /// own (the usual downlink: each gateway gets every command sent to it). With it, the
    /// group's members share the topic's queues.
    pub group: &'a str,
    /// This client's id (`ip@instance`), unique in the group.
    pub client_id: &'a str,
    /// The topic consumed.
    pub topic: &'a str,
    /// The topic [`Client::send`] publishes to (`None`: a consumer only).
    pub publish_topic: Option<&'a str>,
    /// TAG expression: `*`, or tags joined by `||`.
    pub expression: &'a str,
    /// Where a queue with no committed offset starts (default: its last offset, as Java).
    pub consume_from: ConsumeFromWhere,
    /// Messages asked for per pull (at most [`MAX_PULL_BATCH`]; default 8): each answer must
    /// fit [`Buffers::rx`](crate::Buffers::rx) and the socket's receive buffer.
    pub pull_batch_size: u32,
    /// How long a broker may hold a pull when nothing is there (long polling; default 15 s).
    pub suspend: Duration,
    /// Offsets are committed (UPDATE_CONSUMER_OFFSET) this often (default 5 s): after a
    /// restart, at most this much of what was delivered is delivered again.
    pub commit_interval: Duration,
    /// Heartbeat period (default 30 s; with the `rebalance` feature only: without it the
    /// client sends no heartbeats).
    pub heartbeat: Duration,
    /// Time between rebalance rounds (default 20 s): the topic's route is checked for new or
    /// gone queues this often (and, with the `rebalance` feature, the group's members).
    pub rebalance_interval: Duration,
}

impl<'a> ClientConfig<'a> {
    /// Java's defaults where they fit a gateway, with batches of 8; no publishing (set
    /// [`ClientConfig::publish_topic`]).
    pub fn new(
        namesrvs: &'a [SocketAddr],
        group: &'a str,
        client_id: &'a str,
        topic: &'a str,
    ) -> Self {
        let java = PullConfig::new(group, client_id);
        ClientConfig {
            base: BaseConfig::new(namesrvs, "gateway", 0x5EED_4321),
            group,
            client_id,
            topic,
            publish_topic: None,
            expression: "*",
            consume_from: ConsumeFromWhere::LastOffset,
            pull_batch_size: 8,
            suspend: rmq_core::consumer::BROKER_SUSPEND_MAX_TIME,
            commit_interval: java.persist_interval,
            heartbeat: rmq_core::producer::HEARTBEAT_BROKER_INTERVAL,
            rebalance_interval: java.rebalance_interval,
        }
    }
}

/// Why a [`Client`] could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ClientError {
    /// The session refused the settings (NameServers, client id).
    Session(session::ConfigError),
    /// The consumer refused them (group, expression, topic).
    Config(PullConfigError),
    /// The heartbeat (group and subscription) does not fit [`Buffers::message`](crate::Buffers::message).
    HeartbeatTooLarge,
}

impl core::fmt::Display for ClientError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ClientError::Session(e) => write!(f, "{e}"),
            ClientError::Config(e) => write!(f, "{e}"),
            ClientError::HeartbeatTooLarge => {
                f.write_str("the heartbeat does not fit the message buffer")
            }
        }
    }
}

impl core::error::Error for ClientError {}

/// A heap-free RocketMQ consumer over smoltcp, which can also publish: one topic consumed in
/// clustering mode (offsets committed to the brokers; every queue of the topic is this
/// client's, or with the `rebalance` feature the group's members share them), and optionally
/// one topic published to (as [`Producer`](crate::Producer) does, over the same session and
/// connections).
///
/// - `BROKERS`: broker connections (one socket each) and route capacity;
/// - `QUEUES`: queues kept from the route;
/// - `ROUTE_STR`: bytes for the names and addresses of a parsed route;
/// - `OWNED`: queues this member can own at once;
/// - `TRACK`: messages in flight per queue (at least the pull batch size).
///
/// Every message is handed to the closure given to [`Client::poll`], once, in queue order,
/// and acknowledged when the closure returns; acknowledged offsets are committed every
/// [`ClientConfig::commit_interval`] and at [`Client::stop`]. After a restart, delivery
/// resumes at the committed offset (at-least-once: what was delivered after the last commit
/// comes again).
///
/// The message is the broker's record ([`rmq_core::message::StoredMessage`]): its body as
/// stored (a body compressed by its producer, sys flag bit 0, is delivered compressed: the
/// gateway has no inflater), its properties (tags, keys) through `properties()`.
///
/// ```no_run
/// # use rmq_smoltcp::{Buffers, Client, ClientConfig, Message};
/// # use rmq_smoltcp::core::time::Instant;
/// # use smoltcp::iface::{Interface, SocketHandle, SocketSet};
/// # fn gateway(
/// #     cfg: ClientConfig<'_>, bufs: Buffers<'_>, iface: &mut Interface,
/// #     device: &mut smoltcp::phy::Loopback, sockets: &mut SocketSet<'_>,
/// #     [ns, b0, b1]: [SocketHandle; 3], now: impl Fn() -> Instant, wait_until: impl Fn(Instant),
/// #     apply: impl Fn(&[u8]),
/// # ) -> Result<(), Box<dyn std::error::Error>> {
/// let mut c: Client<'_, '_, 2, 16, 256, 8, 8> = Client::new(cfg, bufs, now(), ns, [b0, b1])?;
/// loop {
///     let next = c.poll(now(), iface, device, sockets, |d| apply(d.message.body));
///     if c.can_send() {
///         c.send(now(), &Message { body: b"21.5C", ..Default::default() })?;
///     }
///     if let Some(done) = c.take_completion() { /* as the producer's */ }
///     wait_until(next.unwrap_or(now()));
/// }
/// # }
/// ```
pub struct Client<
    'a,
    'b,
    const BROKERS: usize,
    const QUEUES: usize,
    const ROUTE_STR: usize,
    const OWNED: usize,
    const TRACK: usize,
> {
    net: Net<'a, 'b, BROKERS>,
    m: ClientMachine<'a, 'b, BROKERS, QUEUES, ROUTE_STR, OWNED, TRACK>,
}

/// The client's machine: a core client with two topics (the one consumed, the one published
/// to) and the pull consumer, and the sending side.
pub(crate) type ClientMachine<
    'a,
    'b,
    const B: usize,
    const Q: usize,
    const S: usize,
    const OWNED: usize,
    const TRACK: usize,
> = Gw<'a, 'b, 2, B, Q, REQUESTS, S, Gateway<true>, Pull<OWNED, TRACK, Q>>;

impl<'a, 'b, const B: usize, const Q: usize, const S: usize, const OWNED: usize, const TRACK: usize>
    ClientMachine<'a, 'b, B, Q, S, OWNED, TRACK>
{
    /// The session and consumer of `cfg`, subscribed; the heartbeat is written at the start
    /// of `message`, the rest is the sending side's.
    #[cfg(feature = "async")]
    pub(crate) fn new(
        cfg: &ClientConfig<'a>,
        message: &'b mut [u8],
        now: Instant,
    ) -> Result<Self, ClientError> {
        Self::check(cfg)?;
        let mut m = Self::build(cfg, message, now);
        m.finish(cfg, now)?;
        Ok(m)
    }

    /// The session's and the consumer's settings of `cfg`.
    // Inlined: `check` then computes only what it checks (130 B of the downlink image).
    #[inline(always)]
    fn configs(cfg: &ClientConfig<'a>) -> (session::Config<'a>, PullConfig<'a>) {
        let mut sc = cfg.base.session(cfg.client_id);
        sc.consumer_group = Some(cfg.group);
        sc.heartbeat = Some(cfg.heartbeat);
        let mut pc = PullConfig::new(cfg.group, cfg.client_id);
        pc.consume_from = cfg.consume_from;
        pc.pull_batch_size = cfg
            .pull_batch_size
            .clamp(1, MAX_PULL_BATCH.min(TRACK as u32));
        pc.suspend = Some(cfg.suspend);
        pc.persist_interval = cfg.commit_interval;
        pc.rebalance_interval = cfg.rebalance_interval;
        pc.version = sc.version;
        pc.seed = sc.seed;
        // No send-back: every message is acknowledged when the closure returns.
        pc.retry = false;
        pc.model = MessageModel::Clustering;
        // Every message is acknowledged when the closure returns.
        pc.ack_on_delivery = true;
        (sc, pc)
    }

    /// The settings' checks (those of the session and the consumer), building nothing.
    pub(crate) fn check(cfg: &ClientConfig<'a>) -> Result<(), ClientError> {
        if !Gateway::<true>::carries(cfg.base.retry.profile) {
            return Err(ClientError::Session(session::ConfigError::ProfileLeftOut));
        }
        let (sc, pc) = Self::configs(cfg);
        sc.check().map_err(ClientError::Session)?;
        pc.check().map_err(ClientError::Config)
    }

    /// The session, consumer and sending side of `cfg` (checked by [`Self::check`]), with no
    /// subscription yet: infallible, so that it can be built in its final place.
    // Not inlined: its result is written straight into the caller's place (an inlined one
    // was assembled on the stack and copied).
    #[inline(never)]
    fn build(cfg: &ClientConfig<'a>, message: &'b mut [u8], now: Instant) -> Self {
        let (sc, pc) = Self::configs(cfg);
        Gw {
            hb: &[],
            send: Sender::new(
                cfg.publish_topic,
                cfg.base.retry,
                cfg.base.client_ip,
                message,
                sc.seed,
            ),
            client: core_client::Client::build(&sc, now, || Pull::build(&pc, now)),
        }
    }

    /// Subscribes the topic and (with heartbeats) writes the heartbeat at the start of the
    /// message buffer (the rest stays the sending side's).
    pub(crate) fn finish(
        &mut self,
        cfg: &ClientConfig<'a>,
        now: Instant,
    ) -> Result<(), ClientError> {
        let (pull, session) = self.client.consumer_mut();
        pull.subscribe(now, session, cfg.topic, cfg.expression)
            .map_err(ClientError::Config)?;
        // The core's start order (with `rebalance`: routes, heartbeat, then the first round;
        // fixed queues need none).
        self.client.start_consumer(now);
        if Gateway::<true>::HEARTBEATS {
            let (pull, session) = (self.client.consumer(), self.client.session());
            self.hb = self
                .send
                .take_front(|buf| pull.heartbeat_body(session, buf))
                .ok_or(ClientError::HeartbeatTooLarge)?;
        }
        Ok(())
    }

    pub(crate) fn owned(&self) -> impl Iterator<Item = (i32, Option<i64>)> + '_ {
        self.client
            .consumer()
            .owned()
            .map(|o| (o.queue.queue_id, o.tracker.committed()))
    }

    pub(crate) fn stop(&mut self) {
        self.client.consumer_mut().0.stop();
    }

    /// Stopped, and every commit answered (or failed).
    pub(crate) fn stopped(&self) -> bool {
        let pull = self.client.consumer();
        pull.is_stopping() && pull.commits_pending() == 0
    }
}

impl<
    'a,
    'b,
    const BROKERS: usize,
    const QUEUES: usize,
    const ROUTE_STR: usize,
    const OWNED: usize,
    const TRACK: usize,
> Client<'a, 'b, BROKERS, QUEUES, ROUTE_STR, OWNED, TRACK>
{
    /// A client using the NameServer socket `ns` and one socket per broker, all in the
    /// caller's [`SocketSet`]. [`Buffers::message`](crate::Buffers::message) holds (with the
    /// `rebalance` feature) the heartbeat (a few hundred bytes: group, client id,
    /// subscription), then the message being sent; [`Buffers::rx`](crate::Buffers::rx) and
    /// every socket's receive buffer must hold a whole pull answer (`pull_batch_size`
    /// messages).
    ///
    /// # Errors
    /// [`ClientError`].
    pub fn new(
        cfg: ClientConfig<'a>,
        bufs: crate::Buffers<'b>,
        now: Instant,
        ns: SocketHandle,
        brokers: [SocketHandle; BROKERS],
    ) -> Result<Self, ClientError> {
        Self::check(&cfg)?;
        let mut c = Self::build(cfg, bufs, now, ns, brokers);
        c.start(&cfg, now)?;
        Ok(c)
    }

    /// The last step of [`Client::build`]: subscribes `cfg`'s topic and (with the `rebalance`
    /// feature) writes the heartbeat at the start of the message buffer.
    ///
    /// # Errors
    /// [`ClientError::Config`] (expression too long, topic refused) and
    /// [`ClientError::HeartbeatTooLarge`], as [`Client::new`].
    pub fn start(&mut self, cfg: &ClientConfig<'a>, now: Instant) -> Result<(), ClientError> {
        self.m.finish(cfg, now)
    }

    /// [`Client::new`]'s checks, building nothing: the first of the three steps that build a
    /// client in its final place ([`Client::build`]).
    ///
    /// # Errors
    /// [`ClientError::Session`] and [`ClientError::Config`] as [`Client::new`].
    pub fn check(cfg: &ClientConfig<'a>) -> Result<(), ClientError> {
        ClientMachine::<BROKERS, QUEUES, ROUTE_STR, OWNED, TRACK>::check(cfg)
    }

    /// [`Client::new`] in three steps, for a client built in its final place: a client is
    /// kilobytes (7 KiB in the QEMU image), and `new` returns it in a `Result` that the caller
    /// moves out of, so its stack frame holds the client several times while it is
    /// assembled (20 KiB there). `build` is infallible and returns the client itself, so
    /// `let c = Client::build(..)` builds it where `c` lives: [`Client::check`] the settings
    /// first, build, then [`Client::start`] (subscribes and writes the heartbeat).
    ///
    /// ```no_run
    /// # use rmq_smoltcp::{Buffers, Client, ClientConfig};
    /// # use rmq_smoltcp::core::time::Instant;
    /// # use smoltcp::iface::SocketHandle;
    /// type Gateway<'a, 'b> = Client<'a, 'b, 1, 8, 256, 8, 8>;
    /// # fn gateway(
    /// #     cfg: ClientConfig<'_>, bufs: Buffers<'_>, now: Instant, [ns, b0]: [SocketHandle; 2],
    /// # ) -> Result<(), rmq_smoltcp::ClientError> {
    /// Gateway::check(&cfg)?;
    /// let mut c = Gateway::build(cfg, bufs, now, ns, [b0]);
    /// c.start(&cfg, now)?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// A local (in a function that never returns, say `main`) is built in place; a `static`
    /// is not quite: LLVM builds the value on the stack and copies it into the static once
    /// (7 KiB of stack instead of 20). Settings that did not pass [`Client::check`] give a
    /// client that cannot reach anything (no panic).
    // Not inlined: its result is written straight into the caller's place (inlined, it was
    // assembled on the stack and copied).
    #[inline(never)]
    pub fn build(
        cfg: ClientConfig<'a>,
        bufs: crate::Buffers<'b>,
        now: Instant,
        ns: SocketHandle,
        brokers: [SocketHandle; BROKERS],
    ) -> Self {
        // The machine last: LLVM builds it straight into the result only when nothing comes
        // between its call and its move.
        let net = Net::new(&cfg.base, bufs.tx, bufs.rx, ns, brokers);
        Client {
            net,
            m: ClientMachine::build(&cfg, bufs.message, now),
        }
    }

    /// The consumer's counters (pulls, deliveries, commits, rebalances).
    pub fn pull_stats(&self) -> PullStats {
        self.m.client.consumer().stats()
    }

    /// Queues owned now, with their committed offsets (`(queue id, committed)`), for
    /// diagnostics.
    pub fn owned(&self) -> impl Iterator<Item = (i32, Option<i64>)> + '_ {
        self.m.owned()
    }

    /// The subscribed topic's session id.
    pub fn topic(&self) -> TopicId {
        // The only subscription (no retry topic: a gateway never nacks).
        let mut topics = Attached::topics(self.m.client.consumer());
        topics.next().unwrap_or(TopicId(0))
    }

    sending_api!("Client");

    /// Stops pulling and commits every acknowledged offset; keep polling until
    /// [`Client::stopped`].
    pub fn stop(&mut self) {
        self.m.stop();
    }

    /// After [`Client::stop`]: every commit was answered (or failed) and nothing is being
    /// written.
    pub fn stopped(&self) -> bool {
        self.m.stopped() && !self.net.writing()
    }

    /// Does bounded work (as [`Producer::poll`](crate::Producer::poll)), handing each message
    /// that arrived to `deliver`. Returns the latest instant to call it again.
    pub fn poll<D: Device + ?Sized, F: FnMut(&Delivery<'_, '_>)>(
        &mut self,
        now: Instant,
        iface: &mut Interface,
        device: &mut D,
        sockets: &mut SocketSet<'_>,
        mut deliver: F,
    ) -> Option<Instant> {
        self.net
            .poll(now, iface, device, sockets, &mut self.m, &mut deliver)
    }
}

#[cfg(test)]
mod tests;
