//! Connections and frames, shared by the [`Producer`](crate::Producer) and the
//! [`Consumer`](crate::Consumer): smoltcp sockets on one side, a core
//! [`Session`](rmq_core::session::Session) on the other.
//!
//! This file opens and watches connections (one socket for the current NameServer, one per
//! broker), stages one frame at a time and moves bytes. What a frame means is the [`Machine`]'s
//! (the producer's or the client's, [`crate::producer`], [`crate::client`]): [`Net::poll`]
//! hands it each complete frame and takes the next frame to write from it. The async runtime
//! ([`crate::aio`] with the `async` feature) drives the same machines over other streams.

use core::net::SocketAddr;
use rmq_core::link::{LinkCheck, LinkState, Links, Outgoing};
use rmq_core::pull_consumer::Delivery;
use rmq_core::session::{Peer, Transmit};
use rmq_core::time::{Duration, Instant};
use rmq_core::transport::TransportError;
use rmq_core::wire::{PREFIX_LEN, check_prefix};
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::phy::Device;
use smoltcp::socket::tcp;

use smoltcp::wire::IpEndpoint;

use crate::parse_endpoint;

/// The sending API the [`Producer`](crate::Producer) and the [`Client`](crate::Client) share
/// (their `net` and `m` fields: a [`Net`] and a [`Gw`](crate::machine::Gw)); `$ty` names the
/// type in the docs.
macro_rules! sending_api {
    ($ty:literal) => {
        /// Tells it that `now` is `unix_millis` wall-clock time (for `bornTimestamp`,
        /// UNIQ_KEY and the running info); without it the monotonic milliseconds are used.
        pub fn set_unix_time(&mut self, now: Instant, unix_millis: i64) {
            self.m.send.set_unix_time(now, unix_millis);
        }

        /// Counters (connections, frames, the session's).
        pub fn stats(&self) -> Stats {
            self.m.stats(self.net.stats)
        }

        /// Whether a route of the publish topic with at least one writable queue is known.
        pub fn has_route(&self) -> bool {
            self.m.send.has_route(self.m.client.session())
        }

        #[doc = concat!("Whether [`", $ty, "::send`] would accept a message now (the message")]
        /// buffer is free once its send ended and no frame reads from it).
        pub fn can_send(&self) -> bool {
            self.m.send.can_send(self.net.writing_body())
        }

        /// The end of the last send, once.
        pub fn take_completion(&mut self) -> Option<Completion> {
            self.m.send.take_completion()
        }

        /// Publishes `msg` and waits for the broker's answer (retries per the settings'
        #[doc = concat!("`retry`). The result comes from [`", $ty, "::take_completion`].")]
        ///
        /// # Errors
        /// [`SubmitError`]: busy, too large, invalid message (the core's checks, as in
        /// rmq-std); [`SubmitError::NoTopic`] without a publish topic.
        pub fn send(&mut self, now: Instant, msg: &Message<'_>) -> Result<SendId, SubmitError> {
            let busy = self.net.writing_body();
            let m = &mut self.m;
            m.send.single(
                now,
                m.client.session_mut(),
                msg,
                rmq_core::retry::SendMode::Sync,
                busy,
            )
        }

        /// Publishes `msg` without asking for an answer: complete once the frame is written
        #[doc = concat!("(reported through [`", $ty, "::take_completion`] with no offset or")]
        /// offsetMsgId).
        ///
        /// # Errors
        #[doc = concat!("As [`", $ty, "::send`].")]
        pub fn send_oneway(
            &mut self,
            now: Instant,
            msg: &Message<'_>,
        ) -> Result<SendId, SubmitError> {
            let busy = self.net.writing_body();
            let m = &mut self.m;
            m.send.single(
                now,
                m.client.session_mut(),
                msg,
                rmq_core::retry::SendMode::Oneway,
                busy,
            )
        }

        /// Publishes `msgs` as one SEND_BATCH_MESSAGE request (all stored in one queue, in
        /// order, or none): one round trip for all of them, which is what a long-RTT link
        /// needs. The completion's [`SendReceipt`](crate::SendReceipt) describes the first
        /// message; message `i` has queue offset `queue_offset + i` and msgId
        /// [`SendReceipt::msg_id_of`](crate::SendReceipt::msg_id_of)`(i)`. The records (body,
        /// properties) must fit [`Buffers::message`](crate::Buffers::message) together.
        ///
        /// # Errors
        #[doc = concat!("As [`", $ty, "::send`]; [`SubmitError::EmptyBatch`] for no message.")]
        pub fn send_batch(
            &mut self,
            now: Instant,
            msgs: &[Message<'_>],
        ) -> Result<SendId, SubmitError> {
            let busy = self.net.writing_body();
            let m = &mut self.m;
            m.send.batch(now, m.client.session_mut(), msgs, busy)
        }
    };
}

/// Frames read per connection per poll.
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
    /// Send attempts issued (a producer's).
    pub attempts: u32,
}

/// What a runtime drives: a session and what sits on it (the sending side, a consumer). The
/// runtimes only move bytes between connections and a machine.
pub(crate) trait Machine {
    /// The connection to `peer` is gone, of `cause` (the session's requests on it end).
    fn closed(&mut self, now: Instant, peer: Peer, cause: TransportError);
    /// Frame `tx` was completely written.
    fn written(&mut self, now: Instant, tx: &Transmit);
    /// Whether the session still waits for frame `tx` (else it is dropped unwritten).
    fn is_live(&self, tx: &Transmit) -> bool;
    /// The address `"a.b.c.d:port"` of a broker `peer`.
    fn peer_addr(&self, peer: Peer) -> Option<&str>;
    /// Runs the timers at `now` (and registers topics, whose routes are then looked up).
    fn tick(&mut self, now: Instant);
    /// A whole frame from `peer` (messages go to `deliver`); `false` when it is malformed.
    fn frame(
        &mut self,
        now: Instant,
        peer: Peer,
        frame: &[u8],
        deliver: &mut dyn FnMut(&Delivery<'_, '_>),
    ) -> bool;
    /// The next frame to write, encoded into `tx`.
    fn transmit(&mut self, now: Instant, tx: &mut [u8]) -> Option<Transmit>;
    /// Where a frame with a body reads it.
    fn body(&self) -> &[u8];
    /// Handles the client's events; returns the next peer whose connection must be dropped.
    fn reconnect(&mut self) -> Option<Peer>;
    /// Work is due now (a transmit waiting, a queue an acknowledgement unblocked).
    fn ready(&mut self) -> bool;
    /// When [`Machine::tick`] has work next.
    fn deadline(&self) -> Option<Instant>;
}

/// The sockets, the one frame being written, and the receive buffer.
#[derive(Debug)]
pub(crate) struct Net<'a, 'b, const BROKERS: usize> {
    namesrvs: &'a [SocketAddr],
    connect_timeout: Duration,
    stall: Duration,
    port_base: u16,
    /// Where frames are staged (prefix and header; a producer's body comes from elsewhere).
    pub tx: &'b mut [u8],
    rx: &'b mut [u8],
    links: Links<SocketHandle, BROKERS>,
    /// The one frame being written: `tx.len` bytes of `tx`, then the body when `tx.body` is
    /// set.
    frame: Option<Outgoing>,
    port_offset: u16,
    pub stats: Stats,
}

pub(crate) fn smol(now: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_millis(i64::try_from(now.millis()).unwrap_or(i64::MAX))
}

fn unsmol(t: smoltcp::time::Instant) -> Instant {
    Instant::from_millis(u64::try_from(t.total_millis()).unwrap_or(0))
}

pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if a <= b { a } else { b }),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Takes one whole frame out of the socket into `rx`, or `Ok(None)` when it has not fully
/// arrived. Bytes stay in the socket's ring until the whole frame is there.
fn read_frame(sock: &mut tcp::Socket<'_>, rx: &mut [u8]) -> Result<Option<usize>, ()> {
    let mut prefix = [0u8; PREFIX_LEN];
    // Fewer than PREFIX_LEN bytes queued: not yet.
    if sock.peek_slice(&mut prefix) != Ok(PREFIX_LEN) {
        return Ok(None);
    }
    // Bad prefix, or larger than `rx`: framing is lost.
    let (frame_len, _) = check_prefix(prefix).map_err(drop)?;
    if frame_len > rx.len() {
        return Err(());
    }
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

impl<'a, 'b, const BROKERS: usize> Net<'a, 'b, BROKERS> {
    pub(crate) fn new(
        cfg: &crate::BaseConfig<'a>,
        tx: &'b mut [u8],
        rx: &'b mut [u8],
        ns: SocketHandle,
        brokers: [SocketHandle; BROKERS],
    ) -> Self {
        let seed = rmq_core::session::seed_or_default(cfg.seed);
        Net {
            namesrvs: cfg.namesrvs,
            connect_timeout: cfg.connect_timeout,
            stall: cfg.write_stall_timeout,
            port_base: cfg.local_port_base,
            tx,
            rx,
            links: Links::new(ns, brokers),
            frame: None,
            port_offset: (seed % 8192) as u16,
            stats: Stats::default(),
        }
    }

    /// Whether a frame is being written.
    pub(crate) fn writing(&self) -> bool {
        self.frame.is_some()
    }

    /// Whether the frame being written reads a body from outside `tx`.
    pub(crate) fn writing_body(&self) -> bool {
        self.frame.is_some_and(|f| f.tx.body.is_some())
    }

    /// The latest instant to poll again: the interface's, the links', the frame's and the
    /// session's deadlines (never before `now`).
    fn next_deadline<M: Machine>(
        &self,
        now: Instant,
        iface: &mut Interface,
        sockets: &SocketSet<'_>,
        m: &M,
    ) -> Option<Instant> {
        let stall = self.stall;
        let mut d = iface.poll_at(smol(now), sockets).map(unsmol);
        for c in self.links.iter() {
            d = earliest(d, c.link.deadline(stall));
        }
        d = earliest(d, self.frame.map(|f| f.deadline(stall)));
        d = earliest(d, m.deadline());
        d.map(|d| if d < now { now } else { d })
    }

    fn endpoint<M: Machine>(&self, m: &M, peer: Peer) -> Option<IpEndpoint> {
        match peer {
            Peer::NameServer(i) => match self.namesrvs.get(usize::from(i)) {
                Some(SocketAddr::V4(a)) => Some(IpEndpoint::from(*a)),
                _ => None,
            },
            p => m.peer_addr(p).and_then(parse_endpoint),
        }
    }

    fn next_port(&mut self) -> u16 {
        self.port_offset = (self.port_offset.wrapping_add(1)) % 16384;
        let base = self.port_base.max(49152);
        let span = 65535u16.saturating_sub(base).max(1);
        base.saturating_add(self.port_offset % span)
    }

    /// Resets the connection to `peer` and tells the session what its requests died of.
    fn fail_conn<M: Machine>(
        &mut self,
        now: Instant,
        sockets: &mut SocketSet<'_>,
        m: &mut M,
        peer: Peer,
        err: TransportError,
    ) {
        let Some(conn) = self.links.get_mut(peer) else {
            return;
        };
        let was_up = conn.link.reset();
        sockets.get_mut::<tcp::Socket<'_>>(conn.io).abort();
        match was_up {
            true => self.stats.connections_lost += 1,
            false => self.stats.connect_failures += 1,
        }
        warn!("connection lost or refused");
        if self.frame.is_some_and(|f| f.tx.peer == peer) {
            // The half-written frame dies with its connection.
            self.frame = None;
        }
        m.closed(now, peer, err);
    }

    /// Opens the connection to `peer`; `false` when it cannot be opened.
    fn connect<M: Machine>(
        &mut self,
        now: Instant,
        iface: &mut Interface,
        sockets: &mut SocketSet<'_>,
        m: &M,
        peer: Peer,
    ) -> bool {
        let Some(ep) = self.endpoint(m, peer) else {
            return false;
        };
        let port = self.next_port();
        let timeout = self.connect_timeout;
        let Some(conn) = self.links.get_mut(peer) else {
            return false;
        };
        let sock = sockets.get_mut::<tcp::Socket<'_>>(conn.io);
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

    /// Takes the machine's next frame when nothing is staged, and makes sure its connection
    /// is open or opening.
    fn stage<M: Machine>(
        &mut self,
        now: Instant,
        iface: &mut Interface,
        sockets: &mut SocketSet<'_>,
        m: &mut M,
    ) {
        if self.frame.is_none() {
            let Some(tx) = m.transmit(now, self.tx) else {
                return;
            };
            self.frame = Some(Outgoing::new(tx, now));
        }
        let Some(f) = self.frame else { return };
        let peer = f.tx.peer;
        let Some(conn) = self.links.get_mut(peer) else {
            self.frame = None;
            m.closed(now, peer, TransportError::BrokerNotFound);
            return;
        };
        if conn.link.serves(peer) {
            return;
        }
        if conn.link.state() != LinkState::Idle {
            // The session moved to another NameServer: drop the old connection.
            conn.link.reset();
            sockets.get_mut::<tcp::Socket<'_>>(conn.io).abort();
        }
        if !self.connect(now, iface, sockets, m, peer) {
            self.stats.connect_failures += 1;
            self.frame = None;
            m.closed(now, peer, TransportError::ConnectFailed);
        }
    }

    /// Reads complete frames from every open connection and hands each to the machine (a
    /// malformed one resets its connection). Returns whether a frame cap was hit (more is
    /// waiting).
    fn read<M: Machine>(
        &mut self,
        now: Instant,
        sockets: &mut SocketSet<'_>,
        m: &mut M,
        deliver: &mut dyn FnMut(&Delivery<'_, '_>),
    ) -> bool {
        let mut more = false;
        for i in 0..=BROKERS {
            let peer = self.links.peer(i);
            let Some(conn) = self.links.get_mut(peer) else {
                continue;
            };
            if conn.link.state() != LinkState::Up {
                continue;
            }
            let h = conn.io;
            for _ in 0..MAX_FRAMES_PER_POLL {
                let sock = sockets.get_mut::<tcp::Socket<'_>>(h);
                let n = match read_frame(sock, self.rx) {
                    Ok(None) => break,
                    Ok(Some(n)) => n,
                    Err(()) => {
                        self.fail_conn(now, sockets, m, peer, TransportError::Malformed);
                        break;
                    }
                };
                self.stats.frames_received += 1;
                let frame = self.rx.get(..n).unwrap_or(&[]);
                if !m.frame(now, peer, frame, deliver) {
                    warn!("malformed frame, resetting the connection");
                    self.fail_conn(now, sockets, m, peer, TransportError::Malformed);
                    break;
                }
            }
            if self
                .links
                .get_mut(peer)
                .is_some_and(|c| c.link.state() == LinkState::Up)
                && sockets.get_mut::<tcp::Socket<'_>>(h).recv_queue() >= PREFIX_LEN
            {
                more = true;
            }
        }
        more
    }

    /// Connects, stalls and losses, as the sockets tell them.
    fn check_conns<M: Machine>(&mut self, now: Instant, sockets: &mut SocketSet<'_>, m: &mut M) {
        let stall = self.stall;
        for i in 0..=BROKERS {
            let peer = self.links.peer(i);
            let Some(conn) = self.links.get_mut(peer) else {
                continue;
            };
            let sock = sockets.get_mut::<tcp::Socket<'_>>(conn.io);
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
                LinkCheck::Failed(cause) => self.fail_conn(now, sockets, m, peer, cause),
            }
        }
    }

    /// Writes (or resumes) the current frame (a body is read from the machine's).
    fn write<M: Machine>(&mut self, now: Instant, sockets: &mut SocketSet<'_>, m: &mut M) {
        let Some(mut f) = self.frame else {
            return;
        };
        let peer = f.tx.peer;
        if !m.is_live(&f.tx) {
            // The session gave up on this request (its attempt timed out).
            if f.started() {
                // Half written: it dies with its connection.
                self.fail_conn(now, sockets, m, peer, TransportError::TimedOut);
            }
            self.frame = None;
            return;
        }
        if now >= f.deadline(self.stall) {
            warn!("write stalled, resetting the connection");
            self.fail_conn(now, sockets, m, peer, TransportError::WriteFailed);
            return;
        }
        let Some(conn) = self.links.get_mut(peer) else {
            self.frame = None;
            return;
        };
        if conn.link.state() != LinkState::Up {
            return;
        }
        let sock = sockets.get_mut::<tcp::Socket<'_>>(conn.io);
        let body = m.body();
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
            self.fail_conn(now, sockets, m, peer, TransportError::WriteFailed);
            return;
        }
        if !f.done() {
            self.frame = Some(f);
            return;
        }
        self.frame = None;
        self.stats.frames_sent += 1;
        m.written(now, &f.tx);
    }

    /// The session's events; connections to drop are dropped.
    fn events<M: Machine>(&mut self, now: Instant, sockets: &mut SocketSet<'_>, m: &mut M) {
        while let Some(peer) = m.reconnect() {
            // Reopened at the next frame for it (the NameServer socket only if it still talks
            // to that NameServer).
            if self.links.serves(peer) {
                let err = TransportError::ConnectionClosed;
                self.fail_conn(now, sockets, m, peer, err);
            }
        }
    }

    /// Does bounded work for machine `m`: polls the interface, hands complete frames and
    /// connection events to it, writes (or resumes) the current frame and stages the next,
    /// polls the interface again. Returns the latest instant at which to call it again (sooner
    /// if packets arrive); `now` itself when more work is ready.
    pub(crate) fn poll<M: Machine, D: Device + ?Sized>(
        &mut self,
        now: Instant,
        iface: &mut Interface,
        device: &mut D,
        sockets: &mut SocketSet<'_>,
        m: &mut M,
        deliver: &mut dyn FnMut(&Delivery<'_, '_>),
    ) -> Option<Instant> {
        let ts = smol(now);
        iface.poll(ts, device, sockets);
        let mut again = self.read(now, sockets, m, deliver);
        self.check_conns(now, sockets, m);
        m.tick(now);
        self.events(now, sockets, m);
        // A frame written to completion lets the next one be staged at once.
        for _ in 0..2 {
            self.stage(now, iface, sockets, m);
            self.write(now, sockets, m);
            self.events(now, sockets, m);
        }
        iface.poll(ts, device, sockets);
        again |= !self.writing() && m.ready();
        if again {
            return Some(now);
        }
        self.next_deadline(now, iface, sockets, m)
    }
}
