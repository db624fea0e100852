//! The producer engine: connections, framing, route lookup and the send state machine.

use heapless::{String, Vec};
use rmq_core::fault::FaultTable;
use rmq_core::message::properties::PropertiesError;
use rmq_core::message::{EncodeProperties, PropertiesEncoder, UniqKeyGenerator};
use rmq_core::producer::{
    Backoff, DEFAULT_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, NamesrvCursor, SendRequest, SendResponse,
    parse_send_response,
};
use rmq_core::retry::{Attempt, AttemptOutcome, SendEnv, SendMode, SendPlan, Step, TransportError};
use rmq_core::route::{PublishQueueRef, TopicRoute};
use rmq_core::select::{PublishQueue, QueueCounter};
use rmq_core::time::{Duration, Instant};
use rmq_core::wire::headers::GetRouteInfoRequestHeader;
use rmq_core::wire::{
    CommandHeader, CommandRepr, EncodeError, Frame, FrameReader, PREFIX_LEN, RequestCode,
    ResponseCode, SerializeType, flag,
};
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::phy::Device;
use smoltcp::socket::tcp;
use smoltcp::wire::IpEndpoint;

use crate::{
    Buffers, Completion, Config, MAX_BROKER_NAME, MAX_MSG_ID, Message, SendFailure, SendId,
    SendReceipt, SubmitError, parse_endpoint,
};

/// Longest wait between route lookups after failures.
const MAX_ROUTE_RETRY: Duration = Duration::from_secs(30);
/// Frames read per connection per [`Producer::poll`].
const MAX_FRAMES_PER_POLL: usize = 4;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnState {
    Idle,
    Connecting { deadline: Instant },
    Up,
}

#[derive(Debug)]
struct Conn {
    handle: SocketHandle,
    state: ConnState,
    /// Bytes waiting for the peer's ACK at the last check.
    unacked: usize,
    /// Last time the peer acknowledged something (or nothing was outstanding).
    acked_at: Instant,
}

impl Conn {
    const fn new(handle: SocketHandle) -> Self {
        Conn {
            handle,
            state: ConnState::Idle,
            unacked: 0,
            acked_at: Instant::ZERO,
        }
    }
}

#[derive(Debug)]
struct Slot {
    conn: Conn,
    name: String<MAX_BROKER_NAME>,
    endpoint: Option<IpEndpoint>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    NameServer,
    Broker(u8),
}

/// The one frame being written.
#[derive(Clone, Copy, Debug)]
struct TxFrame {
    target: Target,
    /// Prefix + header bytes in `tx`.
    head_len: usize,
    /// Body bytes at `msg[body_off..]`.
    body_off: usize,
    body_len: usize,
    written: usize,
    last_progress: Instant,
}

impl TxFrame {
    fn total(&self) -> usize {
        self.head_len.saturating_add(self.body_len)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RouteState {
    /// Fetch at or after this instant.
    Idle {
        next: Instant,
    },
    InFlight {
        opaque: i32,
        deadline: Instant,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the route (plan not started).
    Route,
    /// Attempt issued; needs a connection and the tx stage.
    Connect(Attempt<u8>),
    /// Frame staged and being written.
    Write(Attempt<u8>, i32),
    /// Written; waiting for the response.
    Await(Attempt<u8>, i32),
}

#[derive(Clone, Debug)]
struct RespInfo {
    queue_id: i32,
    queue_offset: i64,
    msg_id: String<MAX_MSG_ID>,
}

#[derive(Debug)]
struct Job {
    id: SendId,
    mode: SendMode,
    plan: SendPlan<u8>,
    props_len: usize,
    body_len: usize,
    flag: i32,
    born: i64,
    uniq: String<32>,
    phase: Phase,
    resp: Option<RespInfo>,
}

/// Queue selection state lent to the retry plan.
#[derive(Debug)]
struct Sel<const B: usize, const Q: usize> {
    queues: Vec<PublishQueue<u8>, Q>,
    fault: FaultTable<u8, B>,
    counter: QueueCounter,
    rng: u32,
}

impl<const B: usize, const Q: usize> Sel<B, Q> {
    fn random(&mut self) -> u32 {
        // xorshift32
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        x
    }

    fn env(&mut self) -> SendEnv<'_, u8, B> {
        let entropy = self.random();
        SendEnv {
            queues: &self.queues,
            table: &mut self.fault,
            counter: &mut self.counter,
            entropy,
        }
    }
}

/// What a received frame means, decoded before any state changes.
enum Incoming<const B: usize, const S: usize> {
    Route {
        opaque: i32,
        code: i32,
        route: Option<TopicRoute<B, S>>,
    },
    Send {
        opaque: i32,
        code: i32,
        info: Option<RespInfo>,
    },
    Ignored,
}

/// A heap-free RocketMQ producer over smoltcp.
///
/// - `BROKERS`: broker connections (one socket each) and route capacity;
/// - `QUEUES`: publish queues kept from the route;
/// - `ROUTE_STR`: bytes for the names and addresses of a parsed route.
///
/// ```ignore
/// let mut p: Producer<'_, '_, 2, 16, 256> = Producer::new(cfg, bufs, ns_handle, [b0, b1]);
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
    slots: [Slot; BROKERS],
    sel: Sel<BROKERS, QUEUES>,
    have_route: bool,
    route_fallback: bool,
    route: RouteState,
    /// Back-off between failed route lookups (connect failures, timeouts, errors).
    route_backoff: Backoff,
    ns_cursor: NamesrvCursor,
    tx_frame: Option<TxFrame>,
    job: Option<Job>,
    done: Option<Completion>,
    next_id: u32,
    opaque: i32,
    port_offset: u16,
    uniq: UniqKeyGenerator,
    unix_base: Option<(Instant, i64)>,
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
    if sock.recv_queue() < PREFIX_LEN {
        return Ok(None);
    }
    let mut prefix = [0u8; PREFIX_LEN];
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

fn decode<const B: usize, const S: usize>(bytes: &[u8], from_ns: bool) -> Incoming<B, S> {
    let Ok(frame) = Frame::new_checked(bytes) else {
        return Incoming::Ignored;
    };
    let Ok(h) = CommandHeader::parse(&frame) else {
        return Incoming::Ignored;
    };
    if !h.is_response() {
        // Broker-initiated requests (transaction checks, ...) are not for a plain producer.
        return Incoming::Ignored;
    }
    let code = h.response_code().0;
    if from_ns {
        let route = if code == ResponseCode::SUCCESS.0 {
            TopicRoute::parse(frame.body()).ok()
        } else {
            None
        };
        return Incoming::Route {
            opaque: h.opaque(),
            code,
            route,
        };
    }
    // A status code without msgId/queueId/queueOffset still ends the attempt with its code;
    // the receipt then lacks the offsets.
    let info = match parse_send_response(&h, &mut Default::default()) {
        Ok(SendResponse::Stored {
            offset_msg_id,
            queue_id,
            queue_offset,
            ..
        }) => {
            let mut msg_id = String::new();
            let _ = msg_id.push_str(offset_msg_id);
            Some(RespInfo {
                queue_id,
                queue_offset,
                msg_id,
            })
        }
        _ => None,
    };
    Incoming::Send {
        opaque: h.opaque(),
        code,
        info,
    }
}

impl<'a, 'b, const BROKERS: usize, const QUEUES: usize, const ROUTE_STR: usize>
    Producer<'a, 'b, BROKERS, QUEUES, ROUTE_STR>
{
    /// A producer using the NameServer socket `ns` and one socket per broker, all already in
    /// the caller's [`SocketSet`] (any buffer sizes; see the crate docs for the receive side).
    /// `BROKERS` must be at most 255.
    pub fn new(
        cfg: Config<'a>,
        bufs: Buffers<'b>,
        ns: SocketHandle,
        brokers: [SocketHandle; BROKERS],
    ) -> Self {
        let seed = if cfg.seed == 0 { 0x9E37_79B9 } else { cfg.seed };
        let ip = ::core::net::IpAddr::V4(::core::net::Ipv4Addr::from(cfg.client_ip));
        Producer {
            cfg,
            tx: bufs.tx,
            rx: bufs.rx,
            msg: bufs.message,
            ns: Conn::new(ns),
            slots: brokers.map(|handle| Slot {
                conn: Conn::new(handle),
                name: String::new(),
                endpoint: None,
            }),
            sel: Sel {
                queues: Vec::new(),
                fault: FaultTable::new(cfg.retry.profile.update_rule()),
                counter: QueueCounter::new(seed),
                rng: seed,
            },
            have_route: false,
            route_fallback: false,
            route: RouteState::Idle {
                next: Instant::ZERO,
            },
            route_backoff: Backoff::new(cfg.route_retry, MAX_ROUTE_RETRY),
            ns_cursor: NamesrvCursor::new(seed >> 8),
            tx_frame: None,
            job: None,
            done: None,
            next_id: 0,
            opaque: 0,
            port_offset: (seed % 8192) as u16,
            uniq: UniqKeyGenerator::new(ip, seed >> 16, seed),
            unix_base: None,
            stats: Stats::default(),
        }
    }

    /// Tells the producer that `now` is `unix_millis` wall-clock time (for `bornTimestamp` and
    /// UNIQ_KEY); without it the monotonic milliseconds are used.
    pub fn set_unix_time(&mut self, now: Instant, unix_millis: i64) {
        self.unix_base = Some((now, unix_millis));
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Whether a route with at least one writable queue is known.
    pub fn has_route(&self) -> bool {
        self.have_route
    }

    /// Whether [`Producer::send`] would accept a message now.
    pub fn can_send(&self) -> bool {
        self.job.is_none() && self.tx_frame.is_none() && self.done.is_none()
    }

    /// The end of the last send, once.
    pub fn take_completion(&mut self) -> Option<Completion> {
        self.done.take()
    }

    /// Publishes `msg` and waits for the broker's answer (retries per [`Config::retry`]).
    /// The result comes from [`Producer::take_completion`].
    ///
    /// # Errors
    /// [`SubmitError`]: busy, too large, invalid tag or key.
    pub fn send(&mut self, now: Instant, msg: &Message<'_>) -> Result<SendId, SubmitError> {
        self.submit(now, msg, SendMode::Sync)
    }

    /// Publishes `msg` without asking for an answer: complete once the frame is written
    /// (reported through [`Producer::take_completion`] with no offset or offsetMsgId).
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub fn send_oneway(&mut self, now: Instant, msg: &Message<'_>) -> Result<SendId, SubmitError> {
        self.submit(now, msg, SendMode::Oneway)
    }

    fn unix_now(&self, now: Instant) -> i64 {
        match self.unix_base {
            Some((at, unix)) => {
                let d = i64::try_from(now.saturating_duration_since(at).millis()).unwrap_or(0);
                unix.saturating_add(d)
            }
            None => i64::try_from(now.millis()).unwrap_or(0),
        }
    }

    fn submit(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        mode: SendMode,
    ) -> Result<SendId, SubmitError> {
        if !self.can_send() {
            return Err(SubmitError::Busy);
        }
        let born = self.unix_now(now);
        let key = self.uniq.next_id_at(born, 0);
        let hex = key.to_hex();
        let entries = [
            ("TAGS", msg.tags),
            ("KEYS", msg.keys),
            ("UNIQ_KEY", Some(hex.as_str())),
            ("WAIT", Some("true")),
        ];
        let enc =
            PropertiesEncoder::new(entries.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))));
        let props_len = enc.encode(self.msg).map_err(|e| match e {
            PropertiesError::BufferTooSmall => SubmitError::TooLarge,
            _ => SubmitError::InvalidProperty,
        })?;
        let end = props_len
            .checked_add(msg.body.len())
            .ok_or(SubmitError::TooLarge)?;
        self.msg
            .get_mut(props_len..end)
            .ok_or(SubmitError::TooLarge)?
            .copy_from_slice(msg.body);
        let mut uniq = String::new();
        let _ = uniq.push_str(hex.as_str());
        let mut cfg = self.cfg.retry;
        cfg.mode = mode;
        let id = SendId(self.next_id);
        self.next_id = self.next_id.wrapping_add(1);
        self.job = Some(Job {
            id,
            mode,
            plan: SendPlan::new(now, cfg),
            props_len,
            body_len: msg.body.len(),
            flag: msg.flag,
            born,
            uniq,
            phase: Phase::Route,
            resp: None,
        });
        debug!(
            "send {=u32} queued ({=usize} body bytes)",
            id.0,
            msg.body.len()
        );
        Ok(id)
    }

    /// Does bounded work: polls the interface, takes complete frames, advances route lookup,
    /// connections, sends and timeouts, writes (or resumes) the current frame, polls the
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
        let mut again = self.read(now, sockets);
        self.check_conns(now, sockets);
        self.expire(now, sockets);
        self.drive_route(now, iface, sockets);
        self.drive_job(now, iface, sockets);
        self.write(now, sockets);
        // A frame written to completion may let the next one be staged at once.
        self.drive_route(now, iface, sockets);
        self.drive_job(now, iface, sockets);
        self.write(now, sockets);
        iface.poll(ts, device, sockets);
        again |= self.ready_work();
        if again {
            return Some(now);
        }
        self.next_deadline(now, iface, sockets)
    }

    fn ready_work(&self) -> bool {
        // An attempt whose connection is up waits only for the tx stage.
        self.tx_frame.is_none()
            && matches!(self.job, Some(Job { phase: Phase::Connect(a), .. })
                if self.slots.get(usize::from(a.queue.broker))
                    .is_some_and(|s| s.conn.state == ConnState::Up))
    }

    fn next_deadline(
        &self,
        now: Instant,
        iface: &mut Interface,
        sockets: &SocketSet<'_>,
    ) -> Option<Instant> {
        let mut d = iface.poll_at(smol(now), sockets).map(unsmol);
        for c in core::iter::once(&self.ns).chain(self.slots.iter().map(|s| &s.conn)) {
            match c.state {
                ConnState::Connecting { deadline } => d = earliest(d, deadline),
                ConnState::Up if c.unacked > 0 => {
                    d = earliest(d, c.acked_at.saturating_add(self.cfg.write_stall_timeout));
                }
                _ => {}
            }
        }
        match self.route {
            // A due lookup waits for the NameServer connection or the tx stage; packets, not
            // the clock, unblock it.
            RouteState::Idle { next } if next > now => d = earliest(d, next),
            RouteState::Idle { .. } => {}
            RouteState::InFlight { deadline, .. } => d = earliest(d, deadline),
        }
        if let Some(f) = &self.tx_frame {
            d = earliest(
                d,
                f.last_progress.saturating_add(self.cfg.write_stall_timeout),
            );
        }
        if let Some(job) = &self.job {
            if let Some(t) = job.plan.poll_timeout() {
                d = earliest(d, t);
            }
            if job.phase == Phase::Route {
                d = earliest(
                    d,
                    job.plan.begin().saturating_add(self.cfg.retry.send_timeout),
                );
            }
        }
        d.map(|d| if d < now { now } else { d })
    }

    fn conn_mut(&mut self, target: Target) -> Option<&mut Conn> {
        match target {
            Target::NameServer => Some(&mut self.ns),
            Target::Broker(i) => self.slots.get_mut(usize::from(i)).map(|s| &mut s.conn),
        }
    }

    fn next_port(&mut self) -> u16 {
        self.port_offset = (self.port_offset.wrapping_add(1)) % 16384;
        let base = self.cfg.local_port_base.max(49152);
        let span = 65535u16.saturating_sub(base).max(1);
        base.saturating_add(self.port_offset % span)
    }

    fn connect(
        &mut self,
        now: Instant,
        iface: &mut Interface,
        sockets: &mut SocketSet<'_>,
        target: Target,
        ep: IpEndpoint,
        deadline: Instant,
    ) -> bool {
        let port = self.next_port();
        let Some(conn) = self.conn_mut(target) else {
            return false;
        };
        let sock = sockets.get_mut::<tcp::Socket<'_>>(conn.handle);
        if sock.is_open() {
            sock.abort();
        }
        sock.set_nagle_enabled(false);
        sock.set_ack_delay(None);
        match sock.connect(iface.context(), ep, port) {
            Ok(()) => {
                conn.state = ConnState::Connecting { deadline };
                debug!("connecting to port {=u16} from {=u16}", ep.port, port);
                true
            }
            Err(_) => {
                let _ = now;
                false
            }
        }
    }

    /// Resets the connection to `target` and reports the failure to whatever used it.
    fn fail_conn(
        &mut self,
        now: Instant,
        sockets: &mut SocketSet<'_>,
        target: Target,
        err: TransportError,
    ) {
        let Some(conn) = self.conn_mut(target) else {
            return;
        };
        let was = conn.state;
        let handle = conn.handle;
        conn.state = ConnState::Idle;
        sockets.get_mut::<tcp::Socket<'_>>(handle).abort();
        match was {
            ConnState::Up => self.stats.connections_lost += 1,
            _ => self.stats.connect_failures += 1,
        }
        warn!("connection lost or refused");
        if self.tx_frame.is_some_and(|f| f.target == target) {
            // The half-written frame dies with its connection.
            self.tx_frame = None;
        }
        match target {
            Target::NameServer => {
                self.ns_cursor.failed();
                if let RouteState::InFlight { .. } = self.route {
                    self.route_failed(now);
                }
            }
            Target::Broker(i) => {
                let Some(job) = &mut self.job else {
                    return;
                };
                let on_it = match job.phase {
                    // An idle connection that dropped before this attempt used it is simply
                    // reopened: the attempt is not charged.
                    Phase::Connect(a) => a.queue.broker == i && was != ConnState::Up,
                    Phase::Write(a, _) | Phase::Await(a, _) => a.queue.broker == i,
                    Phase::Route => false,
                };
                if on_it {
                    let step = job.plan.handle_outcome(
                        now,
                        AttemptOutcome::Transport(err),
                        &mut self.sel.env(),
                    );
                    self.apply(step);
                }
            }
        }
    }

    /// Applies a plan step to the job.
    fn apply(&mut self, step: Step<u8>) {
        let Some(job) = &mut self.job else {
            return;
        };
        match step {
            Step::Send(a) => {
                job.phase = Phase::Connect(a);
                job.resp = None;
                self.stats.attempts += 1;
            }
            Step::Wait => {}
            Step::Done(r) => {
                let result = match r {
                    Ok(sent) => {
                        let mut broker = String::new();
                        if let Some(s) = self.slots.get(usize::from(sent.queue.broker)) {
                            let _ = broker.push_str(&s.name);
                        }
                        let (queue_id, queue_offset, offset_msg_id) = match job.resp.take() {
                            Some(r) => (r.queue_id, Some(r.queue_offset), r.msg_id),
                            None => (sent.queue.queue_id, None, String::new()),
                        };
                        Ok(SendReceipt {
                            status: sent.status,
                            broker,
                            queue_id,
                            queue_offset,
                            offset_msg_id,
                            msg_id: job.uniq.clone(),
                            attempts: sent.attempts,
                        })
                    }
                    Err(e) => Err(SendFailure::Plan(e)),
                };
                debug!("send {=u32} done, ok={=bool}", job.id.0, result.is_ok());
                self.done = Some(Completion { id: job.id, result });
                self.job = None;
            }
        }
    }

    /// Reads complete frames from every open connection. Returns whether a frame cap was hit.
    fn read(&mut self, now: Instant, sockets: &mut SocketSet<'_>) -> bool {
        let mut more = false;
        for t in 0..=BROKERS {
            let target = if t == 0 {
                Target::NameServer
            } else {
                Target::Broker(u8::try_from(t - 1).unwrap_or(u8::MAX))
            };
            let Some(conn) = self.conn_mut(target) else {
                continue;
            };
            if conn.state != ConnState::Up {
                continue;
            }
            let handle = conn.handle;
            for _ in 0..MAX_FRAMES_PER_POLL {
                let sock = sockets.get_mut::<tcp::Socket<'_>>(handle);
                match read_frame(sock, self.rx) {
                    Ok(None) => break,
                    Ok(Some(_)) => {}
                    Err(()) => {
                        self.fail_conn(now, sockets, target, TransportError::ConnectionClosed);
                        break;
                    }
                }
                self.stats.frames_received += 1;
                let incoming = decode::<BROKERS, ROUTE_STR>(self.rx, target == Target::NameServer);
                self.handle(now, target, incoming);
            }
            if self
                .conn_mut(target)
                .is_some_and(|c| c.state == ConnState::Up)
                && sockets.get_mut::<tcp::Socket<'_>>(handle).recv_queue() >= PREFIX_LEN
            {
                more = true;
            }
        }
        more
    }

    fn handle(&mut self, now: Instant, target: Target, incoming: Incoming<BROKERS, ROUTE_STR>) {
        match incoming {
            Incoming::Ignored => {}
            Incoming::Route {
                opaque,
                code,
                route,
            } => {
                let RouteState::InFlight { opaque: want, .. } = self.route else {
                    self.stats.stale_responses += 1;
                    return;
                };
                if want != opaque || target != Target::NameServer {
                    self.stats.stale_responses += 1;
                    return;
                }
                match route {
                    Some(r) => self.apply_route(now, &r),
                    None => {
                        if code == ResponseCode::TOPIC_NOT_EXIST.0 && !self.route_fallback {
                            // Java: use the default topic's route; the broker auto-creates.
                            self.route_fallback = true;
                            self.route = RouteState::Idle { next: now };
                        } else {
                            self.route_fallback = false;
                            self.route_failed(now);
                        }
                    }
                }
            }
            Incoming::Send { opaque, code, info } => {
                let Some(job) = &mut self.job else {
                    self.stats.stale_responses += 1;
                    return;
                };
                match job.phase {
                    Phase::Await(a, o) | Phase::Write(a, o)
                        if o == opaque && target == Target::Broker(a.queue.broker) =>
                    {
                        job.resp = info;
                        let step = job.plan.handle_outcome(
                            now,
                            AttemptOutcome::Response(code),
                            &mut self.sel.env(),
                        );
                        self.apply(step);
                    }
                    _ => self.stats.stale_responses += 1,
                }
            }
        }
    }

    fn apply_route(&mut self, now: Instant, route: &TopicRoute<BROKERS, ROUTE_STR>) {
        let mut refs: Vec<PublishQueueRef, QUEUES> = Vec::new();
        let cap = self.route_fallback.then_some(DEFAULT_TOPIC_QUEUE_NUMS);
        // The next lookup asks for the topic itself again (it may exist by then).
        self.route_fallback = false;
        if route.publish_queues(cap, &mut refs).is_err() {
            warn!("route rejected");
            self.route_failed(now);
            return;
        }
        // Route broker index -> slot. Keep slots whose name is still in the route.
        let mut map: [Option<u8>; BROKERS] = [None; BROKERS];
        let mut taken = [false; BROKERS];
        for (i, m) in map.iter_mut().enumerate().take(route.broker_count()) {
            let name = route.broker_name(i).unwrap_or("");
            if let Some(s) = self.slots.iter().position(|s| s.name.as_str() == name) {
                *m = u8::try_from(s).ok();
                if let Some(t) = taken.get_mut(s) {
                    *t = true;
                }
            }
        }
        for (i, m) in map.iter_mut().enumerate().take(route.broker_count()) {
            if m.is_some() {
                continue;
            }
            let Some(s) = taken.iter().position(|t| !t) else {
                break;
            };
            if let Some(t) = taken.get_mut(s) {
                *t = true;
            }
            *m = u8::try_from(s).ok();
            if let (Some(slot), Ok(k)) = (self.slots.get_mut(s), u8::try_from(s)) {
                slot.name.clear();
                let _ = slot.name.push_str(route.broker_name(i).unwrap_or_default());
                slot.endpoint = None;
                self.sel.fault.remove(k);
            }
        }
        for (i, m) in map.iter().enumerate().take(route.broker_count()) {
            let Some(slot) = m.and_then(|s| self.slots.get_mut(usize::from(s))) else {
                continue;
            };
            let ep = route.broker_addr(i).and_then(parse_endpoint);
            if slot.endpoint != ep {
                // A moved broker: the next attempt reconnects (an open socket is reset then).
                slot.endpoint = ep;
                slot.conn.state = ConnState::Idle;
            }
        }
        self.sel.queues.clear();
        for r in refs.iter() {
            if let Some(Some(s)) = map.get(r.broker) {
                let _ = self.sel.queues.push(PublishQueue {
                    broker: *s,
                    queue_id: r.queue_id,
                });
            }
        }
        self.have_route = !self.sel.queues.is_empty();
        if self.have_route {
            self.route_backoff.reset();
        } else {
            self.route_backoff.failed();
        }
        self.stats.route_updates += 1;
        debug!("route: {=usize} queues", self.sel.queues.len());
        self.route = RouteState::Idle {
            next: now.saturating_add(if self.have_route {
                self.cfg.route_refresh
            } else {
                self.route_backoff.delay()
            }),
        };
    }

    fn check_conns(&mut self, now: Instant, sockets: &mut SocketSet<'_>) {
        for t in 0..=BROKERS {
            let target = if t == 0 {
                Target::NameServer
            } else {
                Target::Broker(u8::try_from(t - 1).unwrap_or(u8::MAX))
            };
            let Some(conn) = self.conn_mut(target) else {
                continue;
            };
            let sock = sockets.get_mut::<tcp::Socket<'_>>(conn.handle);
            let st = sock.state();
            let unacked = sock.send_queue();
            match conn.state {
                ConnState::Connecting { deadline } => {
                    if st == tcp::State::Established {
                        conn.state = ConnState::Up;
                        conn.unacked = 0;
                        conn.acked_at = now;
                        self.stats.connects += 1;
                        debug!("connected");
                    } else if st == tcp::State::Closed || now >= deadline {
                        self.fail_conn(now, sockets, target, TransportError::ConnectFailed);
                    }
                }
                ConnState::Up => {
                    if unacked == 0 || unacked < conn.unacked {
                        conn.acked_at = now;
                    }
                    conn.unacked = unacked;
                    let silent = unacked > 0
                        && now >= conn.acked_at.saturating_add(self.cfg.write_stall_timeout);
                    if st != tcp::State::Established {
                        self.fail_conn(now, sockets, target, TransportError::ConnectionClosed);
                    } else if silent {
                        // Data outstanding and no ACK for the stall timeout: a vanished peer.
                        warn!("no ACK from the peer, resetting the connection");
                        self.fail_conn(now, sockets, target, TransportError::ConnectionClosed);
                    }
                }
                ConnState::Idle => {}
            }
        }
    }

    fn expire(&mut self, now: Instant, sockets: &mut SocketSet<'_>) {
        if let RouteState::InFlight { deadline, .. } = self.route
            && now >= deadline
        {
            // A NameServer that does not answer: drop it and try the next one.
            warn!("route request timed out");
            self.fail_conn(now, sockets, Target::NameServer, TransportError::TimedOut);
        }
        if let Some(f) = self.tx_frame
            && now >= f.last_progress.saturating_add(self.cfg.write_stall_timeout)
        {
            warn!("write stalled, resetting the connection");
            self.fail_conn(now, sockets, f.target, TransportError::WriteFailed);
        }
        let Some(job) = &mut self.job else {
            return;
        };
        let send_timeout = self.cfg.retry.send_timeout;
        if job.phase == Phase::Route {
            if now >= job.plan.begin().saturating_add(send_timeout) {
                // No route in time: the plan ends the send (NoRoute / CallTimeout).
                let step = job.plan.start(now, &mut self.sel.env());
                self.apply(step);
            }
            return;
        }
        if job.plan.poll_timeout().is_some_and(|t| now >= t) {
            let writing = match job.phase {
                Phase::Write(a, _) => Some(a.queue.broker),
                _ => None,
            };
            let step = job.plan.handle_timeout(now, &mut self.sel.env());
            if let Some(b) = writing
                && self.tx_frame.is_some_and(|f| f.target == Target::Broker(b))
            {
                // Its frame is half written: it dies with the connection.
                self.tx_frame = None;
                if let Some(s) = self.slots.get_mut(usize::from(b)) {
                    s.conn.state = ConnState::Idle;
                    sockets.get_mut::<tcp::Socket<'_>>(s.conn.handle).abort();
                    self.stats.connections_lost += 1;
                }
            }
            self.apply(step);
        }
    }

    fn route_failed(&mut self, now: Instant) {
        self.route_backoff.failed();
        self.route = RouteState::Idle {
            next: now.saturating_add(self.route_backoff.delay()),
        };
    }

    fn next_opaque(&mut self) -> i32 {
        self.opaque = if self.opaque >= i32::MAX - 1 {
            1
        } else {
            self.opaque + 1
        };
        self.opaque
    }

    fn drive_route(&mut self, now: Instant, iface: &mut Interface, sockets: &mut SocketSet<'_>) {
        let RouteState::Idle { next } = self.route else {
            return;
        };
        if now < next || self.tx_frame.is_some() {
            return;
        }
        match self.ns.state {
            ConnState::Idle => {
                let deadline = now.saturating_add(self.cfg.connect_timeout);
                let servers = self.cfg.namesrvs;
                let ep = servers.get(self.ns_cursor.current(servers.len())).copied();
                let ok = ep.is_some_and(|ep| {
                    self.connect(now, iface, sockets, Target::NameServer, ep, deadline)
                });
                if !ok {
                    self.ns_cursor.failed();
                    self.route_failed(now);
                }
            }
            ConnState::Connecting { .. } => {}
            ConnState::Up => {
                let opaque = self.next_opaque();
                let topic = if self.route_fallback {
                    DEFAULT_TOPIC
                } else {
                    self.cfg.topic
                };
                let hdr = GetRouteInfoRequestHeader {
                    topic,
                    accept_standard_json_only: None,
                };
                let repr = CommandRepr::request(
                    RequestCode::GET_ROUTEINFO_BY_TOPIC,
                    opaque,
                    self.cfg.version,
                    Some(&hdr),
                );
                match repr.emit_frame_prefix_and_header(SerializeType::JSON, 0, self.tx) {
                    Ok(n) => {
                        self.tx_frame = Some(TxFrame {
                            target: Target::NameServer,
                            head_len: n,
                            body_off: 0,
                            body_len: 0,
                            written: 0,
                            last_progress: now,
                        });
                        self.route = RouteState::InFlight {
                            opaque,
                            deadline: now.saturating_add(self.cfg.route_timeout),
                        };
                    }
                    Err(_) => {
                        warn!("route request does not fit the tx buffer");
                        self.route = RouteState::Idle {
                            next: now.saturating_add(self.cfg.route_refresh),
                        };
                    }
                }
            }
        }
    }

    fn drive_job(&mut self, now: Instant, iface: &mut Interface, sockets: &mut SocketSet<'_>) {
        // Each round either waits or consumes an attempt, so this is bounded by the plan.
        for _ in 0..8 {
            let Some(job) = &mut self.job else {
                return;
            };
            match job.phase {
                Phase::Route => {
                    if !self.have_route {
                        return;
                    }
                    let step = job.plan.start(now, &mut self.sel.env());
                    self.apply(step);
                }
                Phase::Connect(a) => {
                    let b = a.queue.broker;
                    let Some(slot) = self.slots.get(usize::from(b)) else {
                        return;
                    };
                    match (slot.conn.state, slot.endpoint) {
                        (_, None) => {
                            let step = job.plan.handle_outcome(
                                now,
                                AttemptOutcome::Transport(TransportError::BrokerNotFound),
                                &mut self.sel.env(),
                            );
                            self.apply(step);
                        }
                        (ConnState::Idle, Some(ep)) => {
                            let deadline =
                                a.deadline.min(now.saturating_add(self.cfg.connect_timeout));
                            if !self.connect(now, iface, sockets, Target::Broker(b), ep, deadline) {
                                let Some(job) = &mut self.job else { return };
                                let step = job.plan.handle_outcome(
                                    now,
                                    AttemptOutcome::Transport(TransportError::ConnectFailed),
                                    &mut self.sel.env(),
                                );
                                self.apply(step);
                            } else {
                                return;
                            }
                        }
                        (ConnState::Connecting { .. }, _) => return,
                        (ConnState::Up, _) => {
                            if self.tx_frame.is_some() {
                                return;
                            }
                            if let Err(e) = self.stage_send(now, b, a) {
                                let Some(job) = self.job.take() else { return };
                                self.done = Some(Completion {
                                    id: job.id,
                                    result: Err(SendFailure::Encode(e)),
                                });
                            }
                            return;
                        }
                    }
                }
                Phase::Write(..) | Phase::Await(..) => return,
            }
        }
    }

    fn stage_send(&mut self, now: Instant, b: u8, a: Attempt<u8>) -> Result<(), EncodeError> {
        let opaque = self.next_opaque();
        let Some(job) = &mut self.job else {
            return Ok(());
        };
        let Some(slot) = self.slots.get(usize::from(b)) else {
            return Ok(());
        };
        let props = self
            .msg
            .get(..job.props_len)
            .and_then(|p| core::str::from_utf8(p).ok())
            .unwrap_or("");
        let req = SendRequest::new(
            self.cfg.producer_group,
            self.cfg.topic,
            a.queue.queue_id,
            slot.name.as_str(),
            props,
            job.born,
        )
        .flag(job.flag);
        let hdr = req.header();
        let mut repr = CommandRepr::request(req.code(), opaque, self.cfg.version, Some(&hdr));
        if job.mode == SendMode::Oneway {
            repr.flag = flag::ONEWAY;
        }
        let n = repr.emit_frame_prefix_and_header(SerializeType::JSON, job.body_len, self.tx)?;
        self.tx_frame = Some(TxFrame {
            target: Target::Broker(b),
            head_len: n,
            body_off: job.props_len,
            body_len: job.body_len,
            written: 0,
            last_progress: now,
        });
        job.phase = Phase::Write(a, opaque);
        Ok(())
    }

    /// Writes (or resumes) the current frame.
    fn write(&mut self, now: Instant, sockets: &mut SocketSet<'_>) {
        let Some(mut f) = self.tx_frame else {
            return;
        };
        let Some(conn) = self.conn_mut(f.target) else {
            self.tx_frame = None;
            return;
        };
        if conn.state != ConnState::Up {
            return;
        }
        let sock = sockets.get_mut::<tcp::Socket<'_>>(conn.handle);
        let mut failed = false;
        while f.written < f.total() {
            let data = if f.written < f.head_len {
                self.tx.get(f.written..f.head_len)
            } else {
                let off = f.body_off.saturating_add(f.written - f.head_len);
                self.msg.get(off..f.body_off.saturating_add(f.body_len))
            };
            let Some(data) = data else {
                failed = true;
                break;
            };
            match sock.send_slice(data) {
                Ok(n) => {
                    if n > 0 {
                        f.written += n;
                        f.last_progress = now;
                    }
                    if n < data.len() {
                        self.stats.partial_writes += 1;
                        break;
                    }
                }
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            self.fail_conn(now, sockets, f.target, TransportError::WriteFailed);
            return;
        }
        if f.written < f.total() {
            self.tx_frame = Some(f);
            return;
        }
        self.tx_frame = None;
        self.stats.frames_sent += 1;
        if let Target::Broker(b) = f.target {
            let Some(job) = &mut self.job else {
                return;
            };
            if let Phase::Write(a, o) = job.phase
                && a.queue.broker == b
            {
                if job.mode == SendMode::Oneway {
                    let step =
                        job.plan
                            .handle_outcome(now, AttemptOutcome::Written, &mut self.sel.env());
                    self.apply(step);
                } else {
                    job.phase = Phase::Await(a, o);
                }
            }
        }
    }
}
