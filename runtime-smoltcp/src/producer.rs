//! The producer: the core [`Session`] and the sending side ([`crate::send`]) as a
//! [`Machine`], driven over smoltcp sockets by [`crate::net`] (or, with the `async` feature,
//! over any async stack by [`crate::aio`]).
//!
//! Every protocol decision (NameServer choice, route and TBW102 fallback, queue selection,
//! retries, request correlation, message properties) is the core's.

use rmq_core::pull_consumer::Delivery;
use rmq_core::retry::SendMode;
use rmq_core::select::ProfileSet;
use rmq_core::session::{self, Event, Features, Peer, Session, Transmit};
use rmq_core::time::Instant;
use rmq_core::wire::SerializeType;
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::phy::Device;

use crate::net::{Machine, Net, NetConfig, Stats};
use crate::send::{Lend, Sender};
use crate::{Buffers, Completion, Config, Message, SendId, SubmitError};

/// Requests queued or in flight: a route lookup and the one send (plus slack).
const REQUESTS: usize = 4;

/// What a gateway compiles in: JSON headers (what every broker answers; the
/// `rocketmq-headers` feature writes the binary ROCKETMQ header instead), no heartbeats (a
/// producer without transactions needs none, and they cost cellular traffic), no broker
/// remarks ([`SendFailure`](crate::SendFailure) carries the code). Flash is what this saves
/// (BENCHMARKS.md).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gateway;

impl Features for Gateway {
    const ROCKETMQ_HEADERS: bool = cfg!(feature = "rocketmq-headers");
    const HEARTBEATS: bool = false;
    const BROKER_REMARKS: bool = false;
    const CONSUMER: bool = false;
    // The fault profiles Plain and Java 4.9 only (3 KB of flash less than all four).
    const PROFILE_JAVA5: bool = false;
    const PROFILE_ADAPTIVE: bool = false;
    // No sends to a chosen queue (a gateway lets the session select).
    const TARGETS: bool = false;
}

/// The session of a gateway producer: one topic, one send at a time.
pub(crate) type Core<const B: usize, const Q: usize, const S: usize> =
    Session<1, B, Q, REQUESTS, 1, S, Gateway>;

/// The session settings of a gateway producer (also [`crate::aio`]'s).
pub(crate) fn session_config<'c>(cfg: &Config<'c>, seed: u32) -> session::Config<'c> {
    let mut sc = session::Config::new(cfg.namesrvs.len(), cfg.producer_group, "");
    sc.version = cfg.version;
    sc.fault_rule = cfg.retry.profile.update_rule();
    sc.route_refresh = cfg.route_refresh;
    sc.request_timeout = cfg.route_timeout;
    sc.route_retry = cfg.route_retry;
    // No heartbeats: `Gateway` leaves them out (a producer without transactions needs none;
    // a gateway saves the traffic), so the session never schedules them.
    sc.seed = seed;
    // JSON (0), or ROCKETMQ (1) with the feature.
    sc.serialize_type = SerializeType(u8::from(Gateway::ROCKETMQ_HEADERS));
    sc
}

/// The producer's session and sending side.
#[derive(Debug)]
pub(crate) struct ProducerMachine<'a, 'b, const B: usize, const Q: usize, const S: usize> {
    pub(crate) core: Core<B, Q, S>,
    pub(crate) send: Sender<'a, 'b>,
}

impl<'a, 'b, const B: usize, const Q: usize, const S: usize> ProducerMachine<'a, 'b, B, Q, S> {
    /// The session of `cfg`, sending from `message`.
    pub(crate) fn new(
        cfg: &Config<'a>,
        message: &'b mut [u8],
        now: Instant,
    ) -> Result<Self, session::ConfigError> {
        if !Gateway::carries(cfg.retry.profile) {
            return Err(session::ConfigError::ProfileLeftOut);
        }
        let seed = session::seed_or_default(cfg.seed);
        let sc = session_config(cfg, seed);
        Ok(ProducerMachine {
            core: Session::new(&sc, now)?,
            send: Sender::new(Some(cfg.topic), cfg.retry, message, cfg.client_ip, seed),
        })
    }

    /// Counters (the session's; the runtime adds its connection counters).
    pub(crate) fn stats(&self, net: Stats) -> Stats {
        let s = self.core.stats();
        Stats {
            stale_responses: s.late_responses,
            route_updates: s.route_updates,
            attempts: s.attempts,
            ..net
        }
    }
}

impl<const B: usize, const Q: usize, const S: usize> Machine for ProducerMachine<'_, '_, B, Q, S> {
    type Session = Core<B, Q, S>;

    fn session(&mut self) -> &mut Self::Session {
        &mut self.core
    }

    fn session_ref(&self) -> &Self::Session {
        &self.core
    }

    fn tick(&mut self, now: Instant) {
        // The topic is registered (and its route looked up) at the first tick.
        let _ = self.send.topic_id(now, &mut self.core);
        self.core.handle_timeout(now);
    }

    fn frame(
        &mut self,
        now: Instant,
        peer: Peer,
        frame: &[u8],
        _: &mut dyn FnMut(&Delivery<'_, '_>),
    ) -> bool {
        self.core.handle_frame(now, peer, frame).is_ok()
    }

    fn transmit(&mut self, now: Instant, tx: &mut [u8]) -> Option<Transmit> {
        let (props, _) = self.send.parts();
        let lend = Lend {
            props,
            heartbeat: None,
        };
        self.core.poll_transmit(now, tx, &lend)
    }

    fn body(&self) -> &[u8] {
        self.send.parts().1
    }

    fn reconnect(&mut self, _: Instant) -> Option<Peer> {
        while let Some(e) = self.core.poll_event() {
            if let Some(Event::Reconnect(peer)) = self.send.event(&self.core, e) {
                return Some(peer);
            }
        }
        None
    }

    fn ready(&mut self) -> bool {
        self.core.has_transmit()
    }

    fn deadline(&self) -> Option<Instant> {
        self.core.poll_timeout()
    }
}

/// A heap-free RocketMQ producer over smoltcp.
///
/// - `BROKERS`: broker connections (one socket each) and route capacity;
/// - `QUEUES`: publish queues kept from the route;
/// - `ROUTE_STR`: bytes for the names and addresses of a parsed route.
///
/// ```ignore
/// let mut p: Producer<'_, '_, 2, 16, 256> = Producer::new(cfg, bufs, ns_handle, [b0, b1])?;
/// let id = p.send(now, &Message { body: b"21.5C", ..Default::default() })?;
/// loop {
///     let next = p.poll(now(), &mut iface, &mut device, &mut sockets);
///     if let Some(c) = p.take_completion() { /* c.id == id */ }
///     wait_until(next);
/// }
/// ```
#[derive(Debug)]
pub struct Producer<'a, 'b, const BROKERS: usize, const QUEUES: usize, const ROUTE_STR: usize> {
    net: Net<'a, 'b, BROKERS>,
    m: ProducerMachine<'a, 'b, BROKERS, QUEUES, ROUTE_STR>,
}

impl<'a, 'b, const BROKERS: usize, const QUEUES: usize, const ROUTE_STR: usize>
    Producer<'a, 'b, BROKERS, QUEUES, ROUTE_STR>
{
    /// A producer using the NameServer socket `ns` and one socket per broker, all already in
    /// the caller's [`SocketSet`] (any buffer sizes; see the crate docs for the receive side).
    ///
    /// # Errors
    /// [`session::ConfigError`]: no NameServer (or more than 255), or a producer group longer
    /// than Java allows.
    pub fn new(
        cfg: Config<'a>,
        bufs: Buffers<'b>,
        ns: SocketHandle,
        brokers: [SocketHandle; BROKERS],
    ) -> Result<Self, session::ConfigError> {
        let seed = session::seed_or_default(cfg.seed);
        let net = NetConfig {
            namesrvs: cfg.namesrvs,
            connect_timeout: cfg.connect_timeout,
            write_stall_timeout: cfg.write_stall_timeout,
            local_port_base: cfg.local_port_base,
        };
        Ok(Producer {
            m: ProducerMachine::new(&cfg, bufs.message, Instant::ZERO)?,
            net: Net::new(net, bufs.tx, bufs.rx, ns, brokers, seed),
        })
    }

    /// Tells the producer that `now` is `unix_millis` wall-clock time (for `bornTimestamp` and
    /// UNIQ_KEY); without it the monotonic milliseconds are used.
    pub fn set_unix_time(&mut self, now: Instant, unix_millis: i64) {
        self.m.send.set_unix_time(now, unix_millis);
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.m.stats(self.net.stats)
    }

    /// Whether a route with at least one writable queue is known.
    pub fn has_route(&self) -> bool {
        self.m.send.has_route(&self.m.core)
    }

    /// Whether [`Producer::send`] would accept a message now.
    pub fn can_send(&self) -> bool {
        // The message buffer is free once its send ended and no frame reads from it.
        self.m.send.can_send(self.net.writing_body())
    }

    /// The end of the last send, once.
    pub fn take_completion(&mut self) -> Option<Completion> {
        self.m.send.take_completion()
    }

    /// Publishes `msg` and waits for the broker's answer (retries per [`Config::retry`]).
    /// The result comes from [`Producer::take_completion`].
    ///
    /// # Errors
    /// [`SubmitError`]: busy, too large, invalid message (the core's checks, as in rmq-std).
    pub fn send(&mut self, now: Instant, msg: &Message<'_>) -> Result<SendId, SubmitError> {
        let busy = self.net.writing_body();
        let m = &mut self.m;
        m.send.single(now, &mut m.core, msg, SendMode::Sync, busy)
    }

    /// Publishes `msg` without asking for an answer: complete once the frame is written
    /// (reported through [`Producer::take_completion`] with no offset or offsetMsgId).
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub fn send_oneway(&mut self, now: Instant, msg: &Message<'_>) -> Result<SendId, SubmitError> {
        let busy = self.net.writing_body();
        let m = &mut self.m;
        m.send.single(now, &mut m.core, msg, SendMode::Oneway, busy)
    }

    /// Publishes `msgs` as one SEND_BATCH_MESSAGE request (all stored in one queue, in order,
    /// or none): one round trip for all of them, which is what a long-RTT link needs. The
    /// completion's [`SendReceipt`](crate::SendReceipt) describes the first message; message
    /// `i` has queue offset `queue_offset + i` and msgId
    /// [`SendReceipt::msg_id_of`](crate::SendReceipt::msg_id_of)`(i)`. Each message is checked
    /// as by [`Producer::send`]; the records (body, properties) must fit
    /// [`Buffers::message`] together.
    ///
    /// # Errors
    /// As [`Producer::send`]; [`SubmitError::EmptyBatch`] for no message.
    pub fn send_batch(
        &mut self,
        now: Instant,
        msgs: &[Message<'_>],
    ) -> Result<SendId, SubmitError> {
        let busy = self.net.writing_body();
        let m = &mut self.m;
        m.send.batch(now, &mut m.core, msgs, busy)
    }

    /// Does bounded work: polls the interface, hands complete frames and connection events
    /// to the session, writes (or resumes) the current frame and stages the next, polls the
    /// interface again. Returns the latest instant at which to call it again (sooner if
    /// packets arrive); `now` itself when more work is ready.
    pub fn poll<D: Device + ?Sized>(
        &mut self,
        now: Instant,
        iface: &mut Interface,
        device: &mut D,
        sockets: &mut SocketSet<'_>,
    ) -> Option<Instant> {
        self.net
            .poll(now, iface, device, sockets, &mut self.m, &mut |_| {})
    }
}

#[cfg(test)]
mod tests {
    use rmq_core::retry::RetryConfig;
    use smoltcp::wire::{IpAddress, IpEndpoint};

    use super::*;

    #[test]
    fn only_the_plain_and_java49_profiles_are_carried() {
        let ns = [IpEndpoint::new(IpAddress::v4(127, 0, 0, 1), 9876)];
        let mut buf = [0u8; 256];
        for (retry, ok) in [
            (RetryConfig::plain(SendMode::Sync), true),
            (RetryConfig::java49(SendMode::Sync), true),
            (RetryConfig::java5(SendMode::Sync), false),
            (RetryConfig::adaptive(SendMode::Sync), false),
        ] {
            let mut cfg = Config::new(&ns, "pg", "T");
            cfg.retry = retry;
            let r = ProducerMachine::<1, 4, 256>::new(&cfg, &mut buf, Instant::ZERO);
            match r {
                Ok(_) => assert!(ok, "{:?} accepted", retry.profile),
                Err(e) => {
                    assert!(!ok, "{:?} refused", retry.profile);
                    assert_eq!(e, session::ConfigError::ProfileLeftOut);
                }
            }
        }
    }
}
