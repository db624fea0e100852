//! The consumer: the core [`PullConsumer`] and its [`Session`] driven over the connections of
//! [`crate::net`].
//!
//! Every decision is the core's (rebalance, start offsets, long polling, flow control, offset
//! commits); this file hands it frames and the caller each message.

use heapless::Vec;
use rmq_core::consumer::{ConsumeFromWhere, MessageModel};
use rmq_core::pull_consumer::{
    Delivery, PullConfig, PullConfigError, PullConsumer, PullStats, QueueKey,
};
use rmq_core::retry::TransportError;
use rmq_core::session::{self, Event, Features, Incoming, Outbound, Session, TopicId};
use rmq_core::time::{Duration, Instant};
use rmq_core::wire::SerializeType;
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::phy::Device;
use smoltcp::wire::IpEndpoint;

use crate::net::{Net, NetConfig, Stats, earliest, smol};

/// Most messages one pull asks for (`pullBatchSize` is clamped to it).
pub const MAX_PULL_BATCH: u32 = 32;
/// Requests in flight at once: a pull per owned queue, commits, heartbeats, lookups.
const REQUESTS: usize = 16;
/// Consumers of one group a rebalance can see.
const CONSUMERS: usize = 8;

/// What a consumer gateway compiles in: heartbeats (the broker must know the group's members
/// to share the queues) and consumer calls; JSON headers unless `rocketmq-headers`.
#[derive(Clone, Copy, Debug)]
struct GatewayConsumer;

impl Features for GatewayConsumer {
    const ROCKETMQ_HEADERS: bool = cfg!(feature = "rocketmq-headers");
    const HEARTBEATS: bool = true;
    const BROKER_REMARKS: bool = false;
    const CONSUMER: bool = true;
}

type Core<const B: usize, const Q: usize, const S: usize> =
    Session<1, B, Q, REQUESTS, 1, S, GatewayConsumer>;
type Pull<const OWNED: usize, const TRACK: usize, const Q: usize> =
    PullConsumer<1, OWNED, TRACK, REQUESTS, CONSUMERS, Q>;

/// Consumer settings. `'a` is the lifetime of the strings (usually `'static`).
#[derive(Clone, Copy, Debug)]
pub struct ConsumerConfig<'a> {
    /// The NameServers (one used at a time, failing over as the producer's).
    pub namesrvs: &'a [IpEndpoint],
    /// Consumer group: its members share the topic's queues, and its offsets are committed
    /// to the brokers.
    pub group: &'a str,
    /// This client's id (`ip@instance`), unique in the group.
    pub client_id: &'a str,
    /// The topic consumed.
    pub topic: &'a str,
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
    /// Heartbeat period (default 30 s).
    pub heartbeat: Duration,
    /// Time between rebalance rounds (default 20 s).
    pub rebalance_interval: Duration,
    /// `version` ordinal sent in headers.
    pub version: i32,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Timeout of route, heartbeat, offset and other requests.
    pub request_timeout: Duration,
    /// Route refresh period.
    pub route_refresh: Duration,
    /// First wait before retrying a failed route lookup (doubles per failure).
    pub route_retry: Duration,
    /// A stalled half-written frame, or unacknowledged data, resets its connection after this.
    pub write_stall_timeout: Duration,
    /// First local TCP port (as [`Config::local_port_base`](crate::Config::local_port_base)).
    pub local_port_base: u16,
    /// Per-boot random value.
    pub seed: u32,
}

impl<'a> ConsumerConfig<'a> {
    /// Java's defaults where they fit a gateway, with batches of 8.
    pub fn new(
        namesrvs: &'a [IpEndpoint],
        group: &'a str,
        client_id: &'a str,
        topic: &'a str,
    ) -> Self {
        let java = PullConfig::new(group, client_id);
        ConsumerConfig {
            namesrvs,
            group,
            client_id,
            topic,
            expression: "*",
            consume_from: ConsumeFromWhere::LastOffset,
            pull_batch_size: 8,
            suspend: rmq_core::consumer::BROKER_SUSPEND_MAX_TIME,
            commit_interval: java.persist_interval,
            heartbeat: rmq_core::producer::HEARTBEAT_BROKER_INTERVAL,
            rebalance_interval: java.rebalance_interval,
            version: rmq_core::wire::version::V4_9_8,
            connect_timeout: rmq_core::producer::CONNECT_TIMEOUT,
            request_timeout: rmq_core::producer::CLIENT_API_TIMEOUT,
            route_refresh: rmq_core::producer::POLL_NAME_SERVER_INTERVAL,
            route_retry: Duration::from_millis(1000),
            write_stall_timeout: Duration::from_millis(3000),
            local_port_base: 49152,
            seed: 0x5EED_4321,
        }
    }
}

/// Why a [`Consumer`] could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ConsumerError {
    /// The session refused the settings (NameServers, client id).
    Session(session::ConfigError),
    /// The consumer refused them (group, expression, topic).
    Config(PullConfigError),
    /// The heartbeat (group and subscription) does not fit [`Buffers::message`](crate::Buffers::message).
    HeartbeatTooLarge,
}

impl core::fmt::Display for ConsumerError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConsumerError::Session(e) => write!(f, "{e}"),
            ConsumerError::Config(e) => write!(f, "{e}"),
            ConsumerError::HeartbeatTooLarge => {
                f.write_str("the heartbeat does not fit the message buffer")
            }
        }
    }
}

impl core::error::Error for ConsumerError {}

/// Lends the session the heartbeat body (written once, at [`Consumer::new`]).
struct Heartbeat<'h>(&'h [u8]);

impl Outbound for Heartbeat<'_> {
    fn properties(&self, _: session::SendId) -> &str {
        ""
    }

    fn heartbeat_body(&self, buf: &mut [u8]) -> Option<usize> {
        buf.get_mut(..self.0.len())?.copy_from_slice(self.0);
        Some(self.0.len())
    }
}

/// A heap-free RocketMQ consumer over smoltcp: one topic, clustering (the group's members
/// share its queues, offsets committed to the brokers).
///
/// - `BROKERS`: broker connections (one socket each) and route capacity;
/// - `QUEUES`: queues kept from the route;
/// - `ROUTE_STR`: bytes for the names and addresses of a parsed route;
/// - `OWNED`: queues this member can own at once;
/// - `TRACK`: messages in flight per queue (at least the pull batch size).
///
/// Every message is handed to the closure given to [`Consumer::poll`], once, in queue order,
/// and acknowledged when the closure returns; acknowledged offsets are committed every
/// [`ConsumerConfig::commit_interval`] and at [`Consumer::stop`]. After a restart, delivery
/// resumes at the committed offset (at-least-once: what was delivered after the last commit
/// comes again).
///
/// The message is the broker's record ([`rmq_core::message::StoredMessage`]): its body as
/// stored (a body compressed by its producer, sys flag bit 0, is delivered compressed: the
/// gateway has no inflater), its properties (tags, keys) through `properties()`.
///
/// ```ignore
/// let mut c: Consumer<'_, '_, 2, 16, 256, 8, 8> = Consumer::new(cfg, bufs, now, ns, [b0, b1])?;
/// loop {
///     let next = c.poll(now(), &mut iface, &mut device, &mut sockets, |d| {
///         apply(d.message.body);
///     });
///     wait_until(next);
/// }
/// ```
pub struct Consumer<
    'a,
    'b,
    const BROKERS: usize,
    const QUEUES: usize,
    const ROUTE_STR: usize,
    const OWNED: usize,
    const TRACK: usize,
> {
    net: Net<'a, 'b, BROKERS>,
    /// The heartbeat body (`heartbeat` bytes of the message buffer).
    hb: &'b [u8],
    core: Core<BROKERS, QUEUES, ROUTE_STR>,
    pull: Pull<OWNED, TRACK, QUEUES>,
    topic: TopicId,
    stopping: bool,
}

impl<
    'a,
    'b,
    const BROKERS: usize,
    const QUEUES: usize,
    const ROUTE_STR: usize,
    const OWNED: usize,
    const TRACK: usize,
> Consumer<'a, 'b, BROKERS, QUEUES, ROUTE_STR, OWNED, TRACK>
{
    /// A consumer using the NameServer socket `ns` and one socket per broker, all in the
    /// caller's [`SocketSet`]. [`Buffers::message`](crate::Buffers::message) holds the
    /// heartbeat (a few hundred bytes); [`Buffers::rx`](crate::Buffers::rx) and every socket's
    /// receive buffer must hold a whole pull answer (`pull_batch_size` messages).
    ///
    /// # Errors
    /// [`ConsumerError`].
    pub fn new(
        cfg: ConsumerConfig<'a>,
        bufs: crate::Buffers<'b>,
        now: Instant,
        ns: SocketHandle,
        brokers: [SocketHandle; BROKERS],
    ) -> Result<Self, ConsumerError> {
        let seed = if cfg.seed == 0 { 0x9E37_79B9 } else { cfg.seed };
        let mut sc = session::Config::new(cfg.namesrvs.len(), "", cfg.client_id);
        sc.consumer_group = Some(cfg.group);
        sc.version = cfg.version;
        sc.route_refresh = cfg.route_refresh;
        sc.request_timeout = cfg.request_timeout;
        sc.route_retry = cfg.route_retry;
        sc.heartbeat = Some(cfg.heartbeat);
        sc.seed = seed;
        sc.serialize_type = SerializeType(u8::from(GatewayConsumer::ROCKETMQ_HEADERS));
        let mut core = Core::new(&sc, now).map_err(ConsumerError::Session)?;
        let mut pc = PullConfig::new(cfg.group, cfg.client_id);
        pc.consume_from = cfg.consume_from;
        pc.pull_batch_size = cfg
            .pull_batch_size
            .clamp(1, MAX_PULL_BATCH.min(TRACK as u32));
        pc.suspend = Some(cfg.suspend);
        pc.persist_interval = cfg.commit_interval;
        pc.rebalance_interval = cfg.rebalance_interval;
        pc.version = cfg.version;
        pc.seed = seed;
        // No send-back: every message is acknowledged when the closure returns.
        pc.retry = false;
        pc.model = MessageModel::Clustering;
        let mut pull = Pull::new(&pc, now).map_err(ConsumerError::Config)?;
        let topic = pull
            .subscribe(now, &mut core, cfg.topic, cfg.expression)
            .map_err(ConsumerError::Config)?;
        let msg = bufs.message;
        let n = pull
            .heartbeat_body(&core, msg)
            .ok_or(ConsumerError::HeartbeatTooLarge)?;
        let msg: &'b [u8] = msg;
        let hb = msg.get(..n).unwrap_or(&[]);
        let net = NetConfig {
            namesrvs: cfg.namesrvs,
            connect_timeout: cfg.connect_timeout,
            write_stall_timeout: cfg.write_stall_timeout,
            local_port_base: cfg.local_port_base,
        };
        Ok(Consumer {
            net: Net::new(net, bufs.tx, bufs.rx, ns, brokers, seed),
            hb,
            core,
            pull,
            topic,
            stopping: false,
        })
    }

    /// Connection counters.
    pub fn stats(&self) -> Stats {
        let s = self.core.stats();
        Stats {
            stale_responses: s.late_responses,
            route_updates: s.route_updates,
            ..self.net.stats
        }
    }

    /// The consumer's counters (pulls, deliveries, commits, rebalances).
    pub fn pull_stats(&self) -> PullStats {
        self.pull.stats()
    }

    /// Queues owned now, with their committed offsets (`(queue id, committed)`), for
    /// diagnostics.
    pub fn owned(&self) -> impl Iterator<Item = (i32, Option<i64>)> + '_ {
        self.pull
            .owned()
            .map(|o| (o.queue.queue_id, o.tracker.committed()))
    }

    /// The subscribed topic's session id.
    pub fn topic(&self) -> TopicId {
        self.topic
    }

    /// Stops pulling and commits every acknowledged offset; keep polling until
    /// [`Consumer::stopped`].
    pub fn stop(&mut self) {
        self.stopping = true;
        self.pull.stop();
    }

    /// After [`Consumer::stop`]: every commit was answered (or failed) and nothing is being
    /// written.
    pub fn stopped(&self) -> bool {
        self.stopping && self.pull.commits_pending() == 0 && !self.net.writing()
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
        let ts = smol(now);
        iface.poll(ts, device, sockets);
        let pull = &mut self.pull;
        let mut again = self
            .net
            .read(now, sockets, &mut self.core, &mut |c, _peer, frame| {
                match c.handle_frame(now, _peer, frame) {
                    Ok(Incoming::Response(opaque)) => {
                        let mut acks: Vec<(QueueKey, u32, i64), { MAX_PULL_BATCH as usize }> =
                            Vec::new();
                        pull.handle_response(now, c, opaque, frame, &mut |d| {
                            deliver(&d);
                            let _ = acks.push((d.queue, d.lease, d.message.queue_offset));
                        });
                        for (q, lease, offset) in acks {
                            pull.ack(now, q, lease, offset);
                        }
                        true
                    }
                    // NOTIFY_CONSUMER_IDS_CHANGED: a rebalance now. Admin requests (running
                    // info, consume directly) are not answered by a gateway.
                    Ok(Incoming::Request { code, .. }) => {
                        pull.handle_broker_request(now, code);
                        true
                    }
                    Ok(Incoming::Handled) => true,
                    Err(_) => false,
                }
            });
        self.net.check_conns(now, sockets, &mut self.core);
        self.core.handle_timeout(now);
        self.pull.handle_timeout(now);
        self.events(now, sockets);
        for _ in 0..2 {
            let lend = Heartbeat(self.hb);
            let pull = &mut self.pull;
            self.net
                .stage(now, iface, sockets, &mut self.core, |c, tx| {
                    match c.poll_transmit(now, &mut *tx, &lend) {
                        Some(t) => Some(t),
                        None => pull.poll_call(now, c, tx, &lend),
                    }
                });
            self.net.write(now, sockets, &mut self.core, &[]);
            self.events(now, sockets);
        }
        iface.poll(ts, device, sockets);
        again |= self.pull.take_wake() || (!self.net.writing() && self.core.has_transmit());
        if again {
            return Some(now);
        }
        let d = self.net.next_deadline(now, iface, sockets, &self.core);
        earliest(d, self.pull.poll_timeout()).map(|d| if d < now { now } else { d })
    }

    /// The session's events: calls that failed go back to the consumer, brokers that moved
    /// are reconnected.
    fn events(&mut self, now: Instant, sockets: &mut SocketSet<'_>) {
        while let Some(e) = self.core.poll_event() {
            match e {
                Event::CallFailed { opaque, .. } => {
                    self.pull.handle_call_failed(now, opaque);
                }
                Event::Reconnect(peer) if self.net.serves(peer) => {
                    let err = TransportError::ConnectionClosed;
                    self.net.fail_conn(now, sockets, &mut self.core, peer, err);
                }
                _ => {}
            }
        }
        // Nothing is sent back, so the consumer has no event to report.
        while self.pull.poll_event().is_some() {}
    }
}
