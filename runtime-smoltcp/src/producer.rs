//! The producer: the core [`Session`] driven over the connections of [`crate::net`], sending
//! through [`crate::send`].
//!
//! Every protocol decision (NameServer choice, route and TBW102 fallback, queue selection,
//! retries, request correlation, message properties) is the core's.

use rmq_core::retry::{SendMode, TransportError};
use rmq_core::session::{self, Event, Features, Session};
use rmq_core::time::Instant;
use rmq_core::wire::SerializeType;
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::phy::Device;

use crate::net::{Net, NetConfig, Stats, smol};
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
struct Gateway;

impl Features for Gateway {
    const ROCKETMQ_HEADERS: bool = cfg!(feature = "rocketmq-headers");
    const HEARTBEATS: bool = false;
    const BROKER_REMARKS: bool = false;
    const CONSUMER: bool = false;
}

/// The session of a gateway producer: one topic, one send at a time.
type Core<const B: usize, const Q: usize, const S: usize> =
    Session<1, B, Q, REQUESTS, 1, S, Gateway>;

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
    core: Core<BROKERS, QUEUES, ROUTE_STR>,
    send: Sender<'a, 'b>,
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
        let seed = if cfg.seed == 0 { 0x9E37_79B9 } else { cfg.seed };
        let mut sc = session::Config::new(cfg.namesrvs.len(), cfg.producer_group, "");
        sc.version = cfg.version;
        sc.fault_rule = cfg.retry.profile.update_rule();
        sc.route_refresh = cfg.route_refresh;
        sc.request_timeout = cfg.route_timeout;
        sc.route_retry = cfg.route_retry;
        // A producer without transactions needs no heartbeat; a gateway saves the traffic.
        sc.heartbeat = None;
        sc.seed = seed;
        // JSON (0), or ROCKETMQ (1) with the feature.
        sc.serialize_type = SerializeType(u8::from(Gateway::ROCKETMQ_HEADERS));
        let net = NetConfig {
            namesrvs: cfg.namesrvs,
            connect_timeout: cfg.connect_timeout,
            write_stall_timeout: cfg.write_stall_timeout,
            local_port_base: cfg.local_port_base,
        };
        let send = Sender::new(
            Some(cfg.topic),
            cfg.retry,
            bufs.message,
            cfg.client_ip,
            seed,
        );
        Ok(Producer {
            core: Session::new(&sc, Instant::ZERO)?,
            net: Net::new(net, bufs.tx, bufs.rx, ns, brokers, seed),
            send,
        })
    }

    /// Tells the producer that `now` is `unix_millis` wall-clock time (for `bornTimestamp` and
    /// UNIQ_KEY); without it the monotonic milliseconds are used.
    pub fn set_unix_time(&mut self, now: Instant, unix_millis: i64) {
        self.send.set_unix_time(now, unix_millis);
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        let s = self.core.stats();
        Stats {
            stale_responses: s.late_responses,
            route_updates: s.route_updates,
            attempts: s.attempts,
            ..self.net.stats
        }
    }

    /// Whether a route with at least one writable queue is known.
    pub fn has_route(&self) -> bool {
        self.send.has_route(&self.core)
    }

    /// Whether [`Producer::send`] would accept a message now.
    pub fn can_send(&self) -> bool {
        // The message buffer is free once its send ended and no frame reads from it.
        self.send.can_send(self.net.writing_body())
    }

    /// The end of the last send, once.
    pub fn take_completion(&mut self) -> Option<Completion> {
        self.send.take_completion()
    }

    /// Publishes `msg` and waits for the broker's answer (retries per [`Config::retry`]).
    /// The result comes from [`Producer::take_completion`].
    ///
    /// # Errors
    /// [`SubmitError`]: busy, too large, invalid message (the core's checks, as in rmq-std).
    pub fn send(&mut self, now: Instant, msg: &Message<'_>) -> Result<SendId, SubmitError> {
        let busy = self.net.writing_body();
        self.send
            .single(now, &mut self.core, msg, SendMode::Sync, busy)
    }

    /// Publishes `msg` without asking for an answer: complete once the frame is written
    /// (reported through [`Producer::take_completion`] with no offset or offsetMsgId).
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub fn send_oneway(&mut self, now: Instant, msg: &Message<'_>) -> Result<SendId, SubmitError> {
        let busy = self.net.writing_body();
        self.send
            .single(now, &mut self.core, msg, SendMode::Oneway, busy)
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
        self.send.batch(now, &mut self.core, msgs, busy)
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
        let ts = smol(now);
        iface.poll(ts, device, sockets);
        // The topic is registered (and its route looked up) at the first poll.
        let _ = self.send.topic_id(now, &mut self.core);
        let mut again = self
            .net
            .read(now, sockets, &mut self.core, &mut |c, peer, f| {
                c.handle_frame(now, peer, f).is_ok()
            });
        self.net.check_conns(now, sockets, &mut self.core);
        self.core.handle_timeout(now);
        self.events(now, sockets);
        // A frame written to completion lets the next one be staged at once.
        for _ in 0..2 {
            let (props, body) = self.send.parts();
            let lend = Lend {
                props,
                heartbeat: None,
            };
            self.net
                .stage(now, iface, sockets, &mut self.core, |c, tx| {
                    c.poll_transmit(now, tx, &lend)
                });
            self.net.write(now, sockets, &mut self.core, body);
            self.events(now, sockets);
        }
        iface.poll(ts, device, sockets);
        again |= !self.net.writing() && self.core.has_transmit();
        if again {
            return Some(now);
        }
        self.net.next_deadline(now, iface, sockets, &self.core)
    }

    /// Forwards the session's events: completions, and brokers that moved.
    fn events(&mut self, now: Instant, sockets: &mut SocketSet<'_>) {
        while let Some(e) = self.core.poll_event() {
            match self.send.event(&self.core, e) {
                // Reopened at the next frame for it (the NameServer socket only if it still
                // talks to that NameServer).
                Some(Event::Reconnect(peer)) if self.net.serves(peer) => {
                    let err = TransportError::ConnectionClosed;
                    self.net.fail_conn(now, sockets, &mut self.core, peer, err);
                }
                _ => {}
            }
        }
    }
}
