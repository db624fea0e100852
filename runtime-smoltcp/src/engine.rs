//! The driver: smoltcp sockets on one side, the core [`Session`] on the other.
//!
//! Every protocol decision (NameServer choice, route and TBW102 fallback, queue selection,
//! retries, request correlation, message properties) is the core's. This file only opens and
//! watches connections, stages one frame at a time, and moves bytes.

use heapless::String;
use rmq_core::link::{Link, LinkCheck, LinkState, Outgoing};
use rmq_core::message::UniqKeyGenerator;
use rmq_core::message::validate::DEFAULT_MAX_MESSAGE_SIZE;
use rmq_core::message::{EncodeProperties, PropertiesEncoder, keys};
use rmq_core::producer::{
    MessageError, MessageFields, encode_batch_record, encode_message_properties,
};
use rmq_core::retry::{SendMode, TransportError};
use rmq_core::session::{
    self, BrokerId, Event, Features, Outbound, Peer, SendArgs, Session, TopicId,
};
use rmq_core::time::{Instant, WallClock};
use rmq_core::wire::{FrameReader, PREFIX_LEN, SerializeType};
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::phy::Device;
use smoltcp::socket::tcp;
use smoltcp::wire::IpEndpoint;

use crate::{
    Buffers, Completion, Config, Message, SendId, SendReceipt, SubmitError, parse_endpoint,
};

/// Frames read per connection per [`Producer::poll`].
const MAX_FRAMES_PER_POLL: usize = 4;
/// A refused message's error.
fn refused(e: MessageError) -> SubmitError {
    match e {
        MessageError::BufferTooSmall => SubmitError::TooLarge,
        MessageError::Invalid(v) => SubmitError::Invalid(v),
    }
}

/// Requests queued or in flight: a route lookup and the one send (plus slack).
const REQUESTS: usize = 4;

/// What a gateway compiles in: JSON headers (what every broker answers; the
/// `rocketmq-headers` feature writes the binary ROCKETMQ header instead), no heartbeats (a
/// producer without transactions needs none, and they cost cellular traffic), no broker
/// remarks ([`SendFailure`] carries the code). Flash is what this saves (BENCHMARKS.md).
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

/// Counters for tests and field diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Stats {
    /// TCP connections established.
    pub connects: u32,
    /// Connect attempts that failed (refused, reset or timed out).
    pub connect_failures: u32,
    /// Established connections lost (reset, closed by the peer, stalled, framing error).
    pub connections_lost: u32,
    /// Times the socket accepted only part of what was offered (or nothing).
    pub partial_writes: u32,
    /// Frames completely written.
    pub frames_sent: u32,
    /// Frames received.
    pub frames_received: u32,
    /// Responses that matched nothing in flight (late answers to abandoned attempts).
    pub stale_responses: u32,
    /// Routes applied.
    pub route_updates: u32,
    /// Send attempts issued.
    pub attempts: u32,
}

/// A socket and the life of its connection (the core's [`Link`]).
#[derive(Debug)]
struct Conn {
    handle: SocketHandle,
    link: Link,
}

impl Conn {
    const fn new(handle: SocketHandle) -> Self {
        Conn {
            handle,
            link: Link::IDLE,
        }
    }
}

/// Lends the session the properties of the one message in the message buffer.
struct Props<'m>(&'m str);

impl Outbound for Props<'_> {
    fn properties(&self, _: session::SendId) -> &str {
        self.0
    }
}

/// The message in the message buffer while its send runs.
#[derive(Debug)]
struct Job {
    props_len: usize,
    uniq: String<32>,
    /// Messages in the request (a batch's records, or 1).
    messages: u16,
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
    cfg: Config<'a>,
    tx: &'b mut [u8],
    rx: &'b mut [u8],
    msg: &'b mut [u8],
    ns: Conn,
    brokers: [Conn; BROKERS],
    core: Core<BROKERS, QUEUES, ROUTE_STR>,
    topic: Option<TopicId>,
    /// The one frame being written: `tx.len` bytes of the tx buffer, then the message body
    /// when `tx.body` is set.
    tx_frame: Option<Outgoing>,
    job: Option<Job>,
    done: Option<Completion>,
    port_offset: u16,
    uniq: UniqKeyGenerator,
    clock: WallClock,
    stats: Stats,
}

fn smol(now: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_millis(i64::try_from(now.millis()).unwrap_or(i64::MAX))
}

fn unsmol(t: smoltcp::time::Instant) -> Instant {
    Instant::from_millis(u64::try_from(t.total_millis()).unwrap_or(0))
}

fn earliest(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(match a {
        Some(a) if a <= b => a,
        _ => b,
    })
}

/// Takes one whole frame out of the socket into `rx`, or `Ok(None)` when it has not fully
/// arrived. Bytes stay in the socket's ring until the whole frame is there.
fn read_frame(sock: &mut tcp::Socket<'_>, rx: &mut [u8]) -> Result<Option<usize>, ()> {
    let mut prefix = [0u8; PREFIX_LEN];
    // Fewer than PREFIX_LEN bytes queued: not yet.
    if sock.peek_slice(&mut prefix) != Ok(PREFIX_LEN) {
        return Ok(None);
    }
    let mut reader = FrameReader::new(&mut *rx);
    if reader.feed(&prefix).is_err() {
        // Bad prefix or larger than `rx`: framing is lost.
        return Err(());
    }
    let frame_len = PREFIX_LEN.saturating_add(reader.remaining());
    if sock.recv_queue() < frame_len {
        if frame_len > sock.recv_capacity() {
            return Err(());
        }
        return Ok(None);
    }
    let dst = rx.get_mut(..frame_len).ok_or(())?;
    match sock.recv_slice(dst) {
        Ok(n) if n == frame_len => Ok(Some(frame_len)),
        _ => Err(()),
    }
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
        let ip = ::core::net::IpAddr::V4(::core::net::Ipv4Addr::from(cfg.client_ip));
        Ok(Producer {
            core: Session::new(&sc, Instant::ZERO)?,
            cfg,
            tx: bufs.tx,
            rx: bufs.rx,
            msg: bufs.message,
            ns: Conn::new(ns),
            brokers: brokers.map(Conn::new),
            topic: None,
            tx_frame: None,
            job: None,
            done: None,
            port_offset: (seed % 8192) as u16,
            uniq: UniqKeyGenerator::new(ip, seed >> 16, seed),
            clock: WallClock::default(),
            stats: Stats::default(),
        })
    }

    /// Tells the producer that `now` is `unix_millis` wall-clock time (for `bornTimestamp` and
    /// UNIQ_KEY); without it the monotonic milliseconds are used.
    pub fn set_unix_time(&mut self, now: Instant, unix_millis: i64) {
        self.clock.set(now, unix_millis);
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        let s = self.core.stats();
        Stats {
            stale_responses: s.late_responses,
            route_updates: s.route_updates,
            attempts: s.attempts,
            ..self.stats
        }
    }

    /// Whether a route with at least one writable queue is known.
    pub fn has_route(&self) -> bool {
        self.topic
            .is_some_and(|t| !self.core.publish_queues(t).is_empty())
    }

    /// Whether [`Producer::send`] would accept a message now.
    pub fn can_send(&self) -> bool {
        // The message buffer is free once its send ended and no frame reads from it.
        self.job.is_none()
            && self.done.is_none()
            && self.tx_frame.is_none_or(|f| f.tx.body.is_none())
    }

    /// The end of the last send, once.
    pub fn take_completion(&mut self) -> Option<Completion> {
        self.done.take()
    }

    /// Publishes `msg` and waits for the broker's answer (retries per [`Config::retry`]).
    /// The result comes from [`Producer::take_completion`].
    ///
    /// # Errors
    /// [`SubmitError`]: busy, too large, invalid message (the core's checks, as in rmq-std).
    pub fn send(&mut self, now: Instant, msg: &Message<'_>) -> Result<SendId, SubmitError> {
        self.single(now, msg, SendMode::Sync)
    }

    /// Publishes `msg` without asking for an answer: complete once the frame is written
    /// (reported through [`Producer::take_completion`] with no offset or offsetMsgId).
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub fn send_oneway(&mut self, now: Instant, msg: &Message<'_>) -> Result<SendId, SubmitError> {
        self.single(now, msg, SendMode::Oneway)
    }

    fn topic_id(&mut self, now: Instant) -> Result<TopicId, SubmitError> {
        if let Some(t) = self.topic {
            return Ok(t);
        }
        let t = self
            .core
            .topic(now, self.cfg.topic)
            .map_err(SubmitError::Session)?;
        self.topic = Some(t);
        Ok(t)
    }

    /// Publishes `msgs` as one SEND_BATCH_MESSAGE request (all stored in one queue, in order,
    /// or none): one round trip for all of them, which is what a long-RTT link needs. The
    /// completion's [`SendReceipt`] describes the first message; message `i` has queue offset
    /// `queue_offset + i` and msgId [`SendReceipt::msg_id_of`]`(i)`. Each message is checked
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
        if !self.can_send() {
            return Err(SubmitError::Busy);
        }
        let count = u16::try_from(msgs.len()).map_err(|_| SubmitError::TooLarge)?;
        if count == 0 {
            return Err(SubmitError::EmptyBatch);
        }
        let born = self.clock.unix_millis(now);
        // The request's own properties: WAIT only (Java's MessageBatch).
        let wait = PropertiesEncoder::new([(keys::WAIT_STORE_MSG_OK, "true")]);
        let props_len = wait.encode(self.msg).map_err(|_| SubmitError::TooLarge)?;
        let (mut end, mut first) = (props_len, String::new());
        for m in msgs {
            let hex = self.uniq.next_id_at(born, 0).to_hex();
            if first.is_empty() {
                let _ = first.push_str(hex.as_str());
            }
            let rest = self.msg.get_mut(end..).ok_or(SubmitError::TooLarge)?;
            let fields = MessageFields::new(m.tags, m.keys);
            end += encode_batch_record(
                self.cfg.topic,
                m.body,
                DEFAULT_MAX_MESSAGE_SIZE,
                &fields,
                Some(hex.as_str()),
                m.flag,
                rest,
            )
            .map_err(refused)?;
        }
        let job = Job {
            props_len,
            uniq: first,
            messages: count,
        };
        self.submit(now, job, end - props_len, 0, SendMode::Sync, true)
    }

    fn single(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        mode: SendMode,
    ) -> Result<SendId, SubmitError> {
        if !self.can_send() {
            return Err(SubmitError::Busy);
        }
        let born = self.clock.unix_millis(now);
        let hex = self.uniq.next_id_at(born, 0).to_hex();
        let fields = MessageFields::new(msg.tags, msg.keys);
        let props_len = encode_message_properties(
            self.cfg.topic,
            msg.body,
            DEFAULT_MAX_MESSAGE_SIZE,
            &fields,
            Some(hex.as_str()),
            self.msg,
        )
        .map_err(refused)?;
        let end = props_len
            .checked_add(msg.body.len())
            .ok_or(SubmitError::TooLarge)?;
        self.msg
            .get_mut(props_len..end)
            .ok_or(SubmitError::TooLarge)?
            .copy_from_slice(msg.body);
        let mut uniq = String::new();
        let _ = uniq.push_str(hex.as_str());
        let job = Job {
            props_len,
            uniq,
            messages: 1,
        };
        self.submit(now, job, msg.body.len(), msg.flag, mode, false)
    }

    /// Hands the encoded request (properties and body in the message buffer) to the session.
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        now: Instant,
        job: Job,
        body_len: usize,
        flag: i32,
        mode: SendMode,
        batch: bool,
    ) -> Result<SendId, SubmitError> {
        let topic = self.topic_id(now)?;
        let mut retry = self.cfg.retry;
        retry.mode = mode;
        let mut args = SendArgs::new(retry, body_len, self.clock.unix_millis(now));
        args.flag = flag;
        args.batch = batch;
        let id = self
            .core
            .send(now, topic, &args)
            .map_err(SubmitError::Session)?;
        debug!("send {=u32} queued ({=usize} body bytes)", id.0, body_len);
        self.job = Some(job);
        Ok(SendId(id.0))
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
        let _ = self.topic_id(now);
        let mut again = self.read(now, sockets);
        self.check_conns(now, sockets);
        self.core.handle_timeout(now);
        self.events(now, sockets);
        // A frame written to completion lets the next one be staged at once.
        for _ in 0..2 {
            self.stage(now, iface, sockets);
            self.write(now, sockets);
            self.events(now, sockets);
        }
        iface.poll(ts, device, sockets);
        again |= self.tx_frame.is_none() && self.core.has_transmit();
        if again {
            return Some(now);
        }
        self.next_deadline(now, iface, sockets)
    }

    fn next_deadline(
        &self,
        now: Instant,
        iface: &mut Interface,
        sockets: &SocketSet<'_>,
    ) -> Option<Instant> {
        let mut d = iface.poll_at(smol(now), sockets).map(unsmol);
        for c in core::iter::once(&self.ns).chain(self.brokers.iter()) {
            if let Some(at) = c.link.deadline(self.cfg.write_stall_timeout) {
                d = earliest(d, at);
            }
        }
        if let Some(f) = &self.tx_frame {
            d = earliest(d, f.deadline(self.cfg.write_stall_timeout));
        }
        if let Some(t) = self.core.poll_timeout() {
            d = earliest(d, t);
        }
        d.map(|d| if d < now { now } else { d })
    }

    fn conn_mut(&mut self, peer: Peer) -> Option<&mut Conn> {
        match peer {
            Peer::NameServer(_) => Some(&mut self.ns),
            // A producer's session never names a slave.
            Peer::Broker(b) | Peer::Slave(b) => self.brokers.get_mut(usize::from(b.0)),
        }
    }

    /// The peer behind connection `i` (0: the NameServer socket, then one per broker).
    fn peer(&self, i: usize) -> Peer {
        match i.checked_sub(1) {
            None => Peer::NameServer(self.ns.link.name_server().unwrap_or(0)),
            Some(b) => Peer::Broker(BrokerId(b as u16)),
        }
    }

    fn endpoint(&self, peer: Peer) -> Option<IpEndpoint> {
        match peer {
            Peer::NameServer(i) => self.cfg.namesrvs.get(usize::from(i)).copied(),
            Peer::Broker(b) | Peer::Slave(b) => self.core.broker_addr(b).and_then(parse_endpoint),
        }
    }

    fn next_port(&mut self) -> u16 {
        self.port_offset = (self.port_offset.wrapping_add(1)) % 16384;
        let base = self.cfg.local_port_base.max(49152);
        let span = 65535u16.saturating_sub(base).max(1);
        base.saturating_add(self.port_offset % span)
    }

    /// Resets the connection to `peer` and tells the session what its requests died of.
    fn fail_conn(
        &mut self,
        now: Instant,
        sockets: &mut SocketSet<'_>,
        peer: Peer,
        err: TransportError,
    ) {
        let Some(conn) = self.conn_mut(peer) else {
            return;
        };
        let was_up = conn.link.reset();
        sockets.get_mut::<tcp::Socket<'_>>(conn.handle).abort();
        match was_up {
            true => self.stats.connections_lost += 1,
            false => self.stats.connect_failures += 1,
        }
        warn!("connection lost or refused");
        if self.tx_frame.is_some_and(|f| f.tx.peer == peer) {
            // The half-written frame dies with its connection.
            self.tx_frame = None;
        }
        self.core.handle_closed(now, peer, err);
    }

    /// Opens the connection to `peer`; `false` when it cannot be opened.
    fn connect(
        &mut self,
        now: Instant,
        iface: &mut Interface,
        sockets: &mut SocketSet<'_>,
        peer: Peer,
    ) -> bool {
        let Some(ep) = self.endpoint(peer) else {
            return false;
        };
        let port = self.next_port();
        let timeout = self.cfg.connect_timeout;
        let Some(conn) = self.conn_mut(peer) else {
            return false;
        };
        let sock = sockets.get_mut::<tcp::Socket<'_>>(conn.handle);
        if sock.is_open() {
            sock.abort();
        }
        sock.set_nagle_enabled(false);
        sock.set_ack_delay(None);
        if sock.connect(iface.context(), ep, port).is_err() {
            return false;
        }
        conn.link.connecting(now, timeout, peer);
        debug!("connecting to port {=u16} from {=u16}", ep.port, port);
        true
    }

    /// Takes the next frame from the session when nothing is staged, and makes sure its
    /// connection is open or opening.
    fn stage(&mut self, now: Instant, iface: &mut Interface, sockets: &mut SocketSet<'_>) {
        if self.tx_frame.is_none() {
            let props = self
                .job
                .as_ref()
                .and_then(|j| self.msg.get(..j.props_len))
                .and_then(|p| core::str::from_utf8(p).ok())
                .unwrap_or("");
            let Some(tx) = self.core.poll_transmit(now, self.tx, &Props(props)) else {
                return;
            };
            self.tx_frame = Some(Outgoing::new(tx, now));
        }
        let Some(f) = self.tx_frame else { return };
        let peer = f.tx.peer;
        let Some(conn) = self.conn_mut(peer) else {
            self.tx_frame = None;
            self.core
                .handle_closed(now, peer, TransportError::BrokerNotFound);
            return;
        };
        if conn.link.serves(peer) {
            return;
        }
        if conn.link.state() != LinkState::Idle {
            // The session moved to another NameServer: drop the old connection.
            conn.link.reset();
            sockets.get_mut::<tcp::Socket<'_>>(conn.handle).abort();
        }
        if !self.connect(now, iface, sockets, peer) {
            self.stats.connect_failures += 1;
            self.tx_frame = None;
            self.core
                .handle_closed(now, peer, TransportError::ConnectFailed);
        }
    }

    /// Forwards the session's events: completions, and brokers that moved.
    fn events(&mut self, now: Instant, sockets: &mut SocketSet<'_>) {
        while let Some(e) = self.core.poll_event() {
            match e {
                Event::SendDone { id, result } => {
                    let Some(job) = self.job.take() else {
                        continue;
                    };
                    let result = match result {
                        Ok(r) => {
                            let mut broker = String::new();
                            let _ = broker.push_str(self.core.broker_name(r.broker).unwrap_or(""));
                            Ok(SendReceipt {
                                status: r.status,
                                broker,
                                queue_id: r.queue_id,
                                queue_offset: r.queue_offset,
                                offset_msg_id: r.offset_msg_id,
                                msg_id: job.uniq,
                                messages: job.messages,
                                attempts: r.attempts,
                            })
                        }
                        Err(f) => Err(f),
                    };
                    debug!("send {=u32} done, ok={=bool}", id.0, result.is_ok());
                    self.done = Some(Completion {
                        id: SendId(id.0),
                        result,
                    });
                }
                // Reopened at the next frame for it (the NameServer socket only if it still
                // talks to that NameServer).
                Event::Reconnect(peer)
                    if self.conn_mut(peer).is_some_and(|c| c.link.serves(peer)) =>
                {
                    self.fail_conn(now, sockets, peer, TransportError::ConnectionClosed);
                }
                _ => {}
            }
        }
    }

    /// Reads complete frames from every open connection. Returns whether a frame cap was hit.
    fn read(&mut self, now: Instant, sockets: &mut SocketSet<'_>) -> bool {
        let mut more = false;
        for i in 0..=BROKERS {
            let peer = self.peer(i);
            let Some(conn) = self.conn_mut(peer) else {
                continue;
            };
            if conn.link.state() != LinkState::Up {
                continue;
            }
            let handle = conn.handle;
            for _ in 0..MAX_FRAMES_PER_POLL {
                let sock = sockets.get_mut::<tcp::Socket<'_>>(handle);
                let n = match read_frame(sock, self.rx) {
                    Ok(None) => break,
                    Ok(Some(n)) => n,
                    Err(()) => {
                        self.fail_conn(now, sockets, peer, TransportError::Malformed);
                        break;
                    }
                };
                self.stats.frames_received += 1;
                let frame = self.rx.get(..n).unwrap_or(&[]);
                if self.core.handle_frame(now, peer, frame).is_err() {
                    warn!("malformed frame, resetting the connection");
                    self.fail_conn(now, sockets, peer, TransportError::Malformed);
                    break;
                }
            }
            if self
                .conn_mut(peer)
                .is_some_and(|c| c.link.state() == LinkState::Up)
                && sockets.get_mut::<tcp::Socket<'_>>(handle).recv_queue() >= PREFIX_LEN
            {
                more = true;
            }
        }
        more
    }

    fn check_conns(&mut self, now: Instant, sockets: &mut SocketSet<'_>) {
        let stall = self.cfg.write_stall_timeout;
        for i in 0..=BROKERS {
            let peer = self.peer(i);
            let Some(conn) = self.conn_mut(peer) else {
                continue;
            };
            let sock = sockets.get_mut::<tcp::Socket<'_>>(conn.handle);
            let (st, unacked) = (sock.state(), sock.send_queue());
            let up = st == tcp::State::Established;
            match conn
                .link
                .check(now, up, st == tcp::State::Closed, unacked, stall)
            {
                LinkCheck::Fine => {}
                LinkCheck::Established => {
                    self.stats.connects += 1;
                    debug!("connected");
                }
                LinkCheck::Failed(cause) => self.fail_conn(now, sockets, peer, cause),
            }
        }
    }

    /// Writes (or resumes) the current frame.
    fn write(&mut self, now: Instant, sockets: &mut SocketSet<'_>) {
        let Some(mut f) = self.tx_frame else {
            return;
        };
        let peer = f.tx.peer;
        if !self.core.is_live(f.tx.opaque) {
            // The session gave up on this request (its attempt timed out).
            if f.started() {
                // Half written: it dies with its connection.
                self.fail_conn(now, sockets, peer, TransportError::TimedOut);
            }
            self.tx_frame = None;
            return;
        }
        if now >= f.deadline(self.cfg.write_stall_timeout) {
            warn!("write stalled, resetting the connection");
            self.fail_conn(now, sockets, peer, TransportError::WriteFailed);
            return;
        }
        let Some(conn) = self.conn_mut(peer) else {
            self.tx_frame = None;
            return;
        };
        if conn.link.state() != LinkState::Up {
            return;
        }
        let sock = sockets.get_mut::<tcp::Socket<'_>>(conn.handle);
        let body_off = self.job.as_ref().map_or(0, |j| j.props_len);
        let body = self.msg.get(body_off..).unwrap_or(&[]);
        let mut failed = false;
        while let Some(data) = f.pending(self.tx, body) {
            let n = sock.send_slice(data).unwrap_or_else(|_| {
                failed = true;
                0
            });
            f.advance(now, n);
            if n < data.len() {
                self.stats.partial_writes += u32::from(!failed);
                break;
            }
        }
        if failed || (!f.done() && f.pending(self.tx, body).is_none()) {
            self.fail_conn(now, sockets, peer, TransportError::WriteFailed);
            return;
        }
        if !f.done() {
            self.tx_frame = Some(f);
            return;
        }
        self.tx_frame = None;
        self.stats.frames_sent += 1;
        if f.tx.report_written {
            self.core.handle_written(now, f.tx.opaque);
        }
    }
}
