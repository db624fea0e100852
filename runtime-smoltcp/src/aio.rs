//! The producer and the client over any async TCP stack (feature `async`): connections come
//! from an [`embedded_nal_async::TcpConnect`] (embassy-net's `TcpClient`, a modem or W5500
//! driver, or the tokio adapter of the host tests), bytes move through [`embedded_io_async`]'s
//! `Read` and `Write`, and time through the caller's [`Clock`].
//!
//! The machines are the smoltcp runtime's ([`Producer`](crate::Producer)'s session and sending
//! side, [`Client`](crate::Client)'s session, consumer and sending side); only the byte moving
//! differs. Why `embedded-nal-async` and `embedded-io-async`: the first is how an async stack
//! hands out a connection to an address (embassy-net implements it), the second is what that
//! connection speaks, and no more is needed: no socket handles, no polling of an interface.
//!
//! While a call waits, the driver reads every open connection and sleeps until the machine's
//! next deadline, whichever comes first; a read cut by a deadline keeps the bytes already
//! received (each connection has its own receive buffer), so the stack's `read` only needs to
//! be cancel-safe, as embassy-net's and tokio's are.
//!
//! Sharing a producer between an interrupt and the main loop is not done here: it is driven by
//! one task; an application that must hand it messages from an interrupt queues them (for
//! example in a `critical-section` protected [`Outbox`](rmq_core::outbox::Outbox)).

use core::future::Future;
use core::net::SocketAddr;

use embassy_futures::select::{Either, select, select_array};
use embedded_io_async::{Read, Write};
use embedded_nal_async::TcpConnect;
use rmq_core::link::Links;
use rmq_core::pull_consumer::{Delivery, PullStats};
use rmq_core::retry::SendMode;
use rmq_core::session::{Peer, Transmit};
use rmq_core::time::{Duration, Instant};
use rmq_core::transport::TransportError;
use rmq_core::wire::{FrameError, whole_frame};

use crate::client::{ClientConfig, ClientError, ClientMachine};
use crate::net::{Machine, earliest};
use crate::producer::ProducerMachine;
use crate::{BaseConfig, Config, Message, SendReceipt, Stats, SubmitError};
pub use rmq_core::gateway::SendError;
use rmq_core::gateway::Sender;

/// Time, as the application's executor keeps it (embassy-time, tokio, ...).
pub trait Clock {
    /// Now, in the session's milliseconds.
    fn now(&self) -> Instant;
    /// Completes at `at` (at once if it is past).
    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()>;
}

/// [`Clock`] from embassy-time (feature `embassy-time`): its `Instant` in milliseconds, and
/// its `Timer` to sleep. The application links embassy-time's driver, as any embassy
/// application does.
#[cfg(feature = "embassy-time")]
#[derive(Clone, Copy, Debug, Default)]
pub struct EmbassyClock;

#[cfg(feature = "embassy-time")]
impl Clock for EmbassyClock {
    fn now(&self) -> Instant {
        Instant::from_millis(embassy_time::Instant::now().as_millis())
    }

    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()> {
        embassy_time::Timer::at(embassy_time::Instant::from_millis(at.millis()))
    }
}

/// Buffers of an async producer or client: frame staging, the message (a client's heartbeat
/// first), and one receive buffer per connection (the NameServer's, then one per broker), each
/// holding the largest frame it gets (route answers: ~0.2 KiB + 0.3 KiB per broker; send
/// answers ~0.3 KiB; pull answers: `pull_batch_size` messages).
#[derive(Debug)]
pub struct AsyncBuffers<'b, const BROKERS: usize> {
    /// Staging of one frame's prefix and header.
    pub tx: &'b mut [u8],
    /// The message in flight: properties and body.
    pub message: &'b mut [u8],
    /// The NameServer connection's receive buffer.
    pub ns_rx: &'b mut [u8],
    /// Each broker connection's receive buffer.
    pub broker_rx: [&'b mut [u8]; BROKERS],
}

/// One connection's stream and the bytes received on it that do not make a whole frame yet
/// (whom it talks to is its [`Link`](rmq_core::link::Link)'s).
struct Slot<'b, C> {
    conn: Option<C>,
    rx: &'b mut [u8],
    filled: usize,
}

impl<'b, C> Slot<'b, C> {
    fn new(rx: &'b mut [u8]) -> Self {
        Slot {
            conn: None,
            rx,
            filled: 0,
        }
    }

    fn close(&mut self) {
        self.conn = None;
        self.filled = 0;
    }
}

impl<C: Read> Slot<'_, C> {
    /// Reads until a whole frame is there; `Err` when the connection ended, failed or sent a
    /// frame that cannot fit. Never completes without a connection.
    async fn read_frame(&mut self) -> Result<(), TransportError> {
        let Some(conn) = self.conn.as_mut() else {
            return core::future::pending().await;
        };
        loop {
            match frame_len(self.rx, self.filled) {
                Err(_) => return Err(TransportError::Malformed),
                Ok(Some(_)) => return Ok(()),
                Ok(None) => {}
            }
            let buf = self.rx.get_mut(self.filled..).unwrap_or(&mut []);
            match conn.read(buf).await {
                Ok(0) | Err(_) => return Err(TransportError::ConnectionClosed),
                Ok(n) => self.filled += n,
            }
        }
    }
}

/// The length of the frame at the start of `rx[..filled]` once it is whole ([`whole_frame`]).
fn frame_len(rx: &[u8], filled: usize) -> Result<Option<usize>, FrameError> {
    whole_frame(rx.get(..filled).unwrap_or(&[]), filled, rx.len())
}

/// The connections of an async runtime and the loop that drives a [`Machine`] over them.
struct AsyncNet<'a, 'b, S: TcpConnect, K, const B: usize> {
    stack: &'a S,
    clock: &'a K,
    namesrvs: &'a [SocketAddr],
    connect_timeout: Duration,
    write_timeout: Duration,
    tx: &'b mut [u8],
    links: Links<Slot<'b, S::Connection<'a>>, B>,
    stats: Stats,
}

impl<'a, 'b, S: TcpConnect + 'a, K: Clock, const B: usize> AsyncNet<'a, 'b, S, K, B> {
    fn new(stack: &'a S, clock: &'a K, cfg: &BaseConfig<'a>, bufs: AsyncBuffers<'b, B>) -> Self {
        AsyncNet {
            stack,
            clock,
            namesrvs: cfg.namesrvs,
            connect_timeout: cfg.connect_timeout,
            write_timeout: cfg.write_stall_timeout,
            tx: bufs.tx,
            links: Links::new(Slot::new(bufs.ns_rx), bufs.broker_rx.map(Slot::new)),
            stats: Stats::default(),
        }
    }

    /// Drives `m` until `done(m)` holds (checked after every step) or the clock reaches
    /// `until`, handing messages to `deliver`.
    async fn drive<M: Machine>(
        &mut self,
        m: &mut M,
        deliver: &mut dyn FnMut(&Delivery<'_, '_>),
        until: Option<Instant>,
        done: &mut dyn FnMut(&mut M) -> bool,
    ) {
        loop {
            let now = self.clock.now();
            m.tick(now);
            self.events(m);
            if done(m) || until.is_some_and(|u| now >= u) {
                return;
            }
            // Everything due goes out first.
            while let Some(tx) = m.transmit(self.clock.now(), self.tx) {
                self.write(m, tx).await;
                self.events(m);
            }
            if done(m) {
                return;
            }
            // Then an answer on any connection, or the next deadline.
            let deadline = earliest(m.deadline(), until)
                .unwrap_or_else(|| self.clock.now() + Duration::from_millis(1000));
            let reads = select(
                self.links.ns.io.read_frame(),
                select_array(self.links.brokers.each_mut().map(|c| c.io.read_frame())),
            );
            let got = match select(reads, self.clock.sleep_until(deadline)).await {
                Either::First(Either::First(r)) => Some((0, r)),
                Either::First(Either::Second((r, b))) => Some((1 + b, r)),
                Either::Second(()) => None,
            };
            if let Some((i, r)) = got {
                self.frames(m, self.links.peer(i), r, deliver);
            }
        }
    }

    /// Drives `m` until the send just submitted on its sending side (`sender`) ends, handing
    /// messages that arrive meanwhile to `deliver`; its completion.
    async fn complete<M: Machine>(
        &mut self,
        m: &mut M,
        deliver: &mut dyn FnMut(&Delivery<'_, '_>),
        sender: fn(&mut M) -> &mut Sender<'a, 'b>,
    ) -> Result<SendReceipt, SendError> {
        self.drive(m, deliver, None, &mut |m| sender(m).completed())
            .await;
        match sender(m).take_completion() {
            Some(c) => c.result.map_err(SendError::Failed),
            None => Err(SendError::Submit(SubmitError::Busy)),
        }
    }

    /// Hands the whole frames from `peer` to `m` (or closes its connection after `r`'s error).
    fn frames<M: Machine>(
        &mut self,
        m: &mut M,
        peer: Peer,
        r: Result<(), TransportError>,
        deliver: &mut dyn FnMut(&Delivery<'_, '_>),
    ) {
        let now = self.clock.now();
        if let Err(e) = r {
            self.close(m, peer, e);
            return;
        }
        loop {
            let Some(slot) = self.links.get_mut(peer).map(|c| &mut c.io) else {
                return;
            };
            let len = match frame_len(slot.rx, slot.filled) {
                Ok(Some(len)) => len,
                Ok(None) => return,
                Err(_) => {
                    self.close(m, peer, TransportError::Malformed);
                    return;
                }
            };
            self.stats.frames_received += 1;
            let ok = m.frame(now, peer, slot.rx.get(..len).unwrap_or(&[]), deliver);
            slot.rx.copy_within(len..slot.filled, 0);
            slot.filled -= len;
            if !ok {
                self.close(m, peer, TransportError::Malformed);
                return;
            }
        }
    }

    /// Drops `peer`'s connection, if open, and tells the session what its requests died of.
    fn close<M: Machine>(&mut self, m: &mut M, peer: Peer, cause: TransportError) {
        let now = self.clock.now();
        let Some(c) = self.links.get_mut(peer) else {
            return;
        };
        if c.link.reset() {
            c.io.close();
            self.stats.connections_lost += 1;
            m.closed(now, peer, cause);
        }
    }

    /// The machine's events: connections to drop are dropped.
    fn events<M: Machine>(&mut self, m: &mut M) {
        while let Some(peer) = m.reconnect() {
            if self.links.serves(peer) {
                self.close(m, peer, TransportError::ConnectionClosed);
            }
        }
    }

    fn address<M: Machine>(&self, m: &M, peer: Peer) -> Option<SocketAddr> {
        match peer {
            Peer::NameServer(i) => self.namesrvs.get(usize::from(i)).copied(),
            p => m.peer_addr(p).and_then(|a| a.parse().ok()),
        }
    }

    /// Writes frame `tx` to its peer, connecting first if needed; a failure is the session's
    /// to handle (retries, NameServer failover).
    async fn write<M: Machine>(&mut self, m: &mut M, tx: Transmit) {
        let peer = tx.peer;
        let now = self.clock.now();
        let addr = self.address(m, peer);
        let (stack, clock) = (self.stack, self.clock);
        // Only the NameServer connection can be open to another peer (the previous one).
        let old = self.links.peer(0);
        let Some((addr, c)) = addr.zip(self.links.get_mut(peer)) else {
            m.closed(now, peer, TransportError::BrokerNotFound);
            return;
        };
        if !c.link.serves(peer) {
            // No connection, or another NameServer: a new connection.
            if c.link.reset() {
                c.io.close();
                m.closed(now, old, TransportError::ConnectionClosed);
            }
            let deadline = now + self.connect_timeout;
            match select(stack.connect(addr), clock.sleep_until(deadline)).await {
                Either::First(Ok(conn)) => {
                    c.io.conn = Some(conn);
                    c.link.established(clock.now(), peer);
                    self.stats.connects += 1;
                }
                _ => {
                    self.stats.connect_failures += 1;
                    let now = clock.now();
                    m.closed(now, peer, TransportError::ConnectFailed);
                    return;
                }
            }
        }
        let Some(conn) = c.io.conn.as_mut() else {
            return;
        };
        let head = self.tx.get(..tx.len).unwrap_or(&[]);
        let body = match tx.body {
            Some(_) => m.body().get(..tx.body_len).unwrap_or(&[]),
            None => &[],
        };
        let write = async {
            conn.write_all(head).await?;
            conn.write_all(body).await?;
            conn.flush().await
        };
        let deadline = clock.now() + self.write_timeout;
        let written = matches!(
            select(write, clock.sleep_until(deadline)).await,
            Either::First(Ok(()))
        );
        if !written {
            self.close(m, peer, TransportError::WriteFailed);
            return;
        }
        self.stats.frames_sent += 1;
        m.written(clock.now(), &tx);
    }
}

/// A heap-free RocketMQ producer over an async TCP stack (see the [module docs](self)).
///
/// ```no_run
/// # use rmq_smoltcp::aio::{AsyncBuffers, AsyncProducer, Clock};
/// # use rmq_smoltcp::{Config, Message};
/// # async fn gateway<S: embedded_nal_async::TcpConnect, K: Clock>(
/// #     cfg: Config<'_>, bufs: AsyncBuffers<'_, 1>, tcp_client: &S, clock: &K,
/// # ) -> Result<(), Box<dyn std::error::Error>> {
/// // Any embedded-nal-async stack: embassy-net's `TcpClient`, or std's in tests.
/// let mut p: AsyncProducer<'_, '_, S, K, 1, 8, 256> =
///     AsyncProducer::new(cfg, bufs, tcp_client, clock)?;
/// let receipt = p.send(&Message { body: b"21.5C", ..Default::default() }).await?;
/// # let _ = receipt;
/// # Ok(())
/// # }
/// ```
pub struct AsyncProducer<
    'a,
    'b,
    S: TcpConnect,
    K: Clock,
    const BROKERS: usize,
    const QUEUES: usize,
    const ROUTE_STR: usize,
> {
    net: AsyncNet<'a, 'b, S, K, BROKERS>,
    m: ProducerMachine<'a, 'b, BROKERS, QUEUES, ROUTE_STR>,
}

impl<
    'a,
    'b,
    S: TcpConnect + 'a,
    K: Clock,
    const BROKERS: usize,
    const QUEUES: usize,
    const ROUTE_STR: usize,
> AsyncProducer<'a, 'b, S, K, BROKERS, QUEUES, ROUTE_STR>
{
    /// A producer that opens its connections through `stack` ([`Config`] as for
    /// [`Producer`](crate::Producer); `write_stall_timeout` bounds each write).
    ///
    /// # Errors
    /// As [`Producer::new`](crate::Producer::new).
    pub fn new(
        cfg: Config<'a>,
        mut bufs: AsyncBuffers<'b, BROKERS>,
        stack: &'a S,
        clock: &'a K,
    ) -> Result<Self, rmq_core::session::ConfigError> {
        ProducerMachine::<BROKERS, QUEUES, ROUTE_STR>::check(&cfg)?;
        Ok(AsyncProducer {
            m: ProducerMachine::build(&cfg, core::mem::take(&mut bufs.message), clock.now()),
            net: AsyncNet::new(stack, clock, &cfg.base, bufs),
        })
    }

    /// Counters (connections, frames, the session's).
    pub fn stats(&self) -> Stats {
        self.m.stats(self.net.stats)
    }

    /// Tells the producer the wall-clock time (as
    /// [`Producer::set_unix_time`](crate::Producer::set_unix_time)).
    pub fn set_unix_time(&mut self, unix_millis: i64) {
        self.m.send.set_unix_time(self.net.clock.now(), unix_millis);
    }

    /// Publishes `msg` and waits for the broker's answer (retries per [`BaseConfig::retry`](crate::BaseConfig::retry)).
    ///
    /// # Errors
    /// [`SendError`].
    pub async fn send(&mut self, msg: &Message<'_>) -> Result<SendReceipt, SendError> {
        let now = self.net.clock.now();
        let m = &mut self.m;
        m.send
            .single(now, m.client.session_mut(), msg, SendMode::Sync, false)
            .map_err(SendError::Submit)?;
        self.complete().await
    }

    /// Publishes `msgs` as one SEND_BATCH_MESSAGE request (as
    /// [`Producer::send_batch`](crate::Producer::send_batch)).
    ///
    /// # Errors
    /// [`SendError`]; [`SubmitError::EmptyBatch`] for no message.
    pub async fn send_batch(&mut self, msgs: &[Message<'_>]) -> Result<SendReceipt, SendError> {
        let now = self.net.clock.now();
        let m = &mut self.m;
        m.send
            .batch(now, m.client.session_mut(), msgs, false)
            .map_err(SendError::Submit)?;
        self.complete().await
    }

    async fn complete(&mut self) -> Result<SendReceipt, SendError> {
        self.net
            .complete(&mut self.m, &mut |_| {}, |m| &mut m.send)
            .await
    }
}

/// A consumer that can also publish, over an async TCP stack: [`Client`](crate::Client)'s
/// machine (clustering, long polling, commits; each message handed to a closure once, in queue
/// order, and acknowledged when it returns).
///
/// ```no_run
/// # use rmq_smoltcp::aio::{AsyncBuffers, AsyncClient, Clock};
/// # use rmq_smoltcp::core::time::Duration;
/// # use rmq_smoltcp::{ClientConfig, Message};
/// # async fn gateway<S: embedded_nal_async::TcpConnect, K: Clock>(
/// #     cfg: ClientConfig<'_>, bufs: AsyncBuffers<'_, 1>, stack: &S, clock: &K,
/// #     reading: Message<'_>, apply: impl Fn(&[u8]),
/// # ) -> Result<(), Box<dyn std::error::Error>> {
/// let mut c: AsyncClient<'_, '_, S, K, 1, 8, 256, 8, 8> =
///     AsyncClient::new(cfg, bufs, stack, clock)?;
/// loop {
///     // Commands for up to a second, then telemetry.
///     let until = clock.now().saturating_add(Duration::from_millis(1000));
///     c.run_until(until, |d| apply(d.message.body)).await;
///     c.send(&reading, |d| apply(d.message.body)).await?;
/// }
/// # }
/// ```
pub struct AsyncClient<
    'a,
    'b,
    S: TcpConnect,
    K: Clock,
    const BROKERS: usize,
    const QUEUES: usize,
    const ROUTE_STR: usize,
    const OWNED: usize,
    const TRACK: usize,
> {
    net: AsyncNet<'a, 'b, S, K, BROKERS>,
    m: ClientMachine<'a, 'b, BROKERS, QUEUES, ROUTE_STR, OWNED, TRACK>,
}

impl<
    'a,
    'b,
    S: TcpConnect + 'a,
    K: Clock,
    const BROKERS: usize,
    const QUEUES: usize,
    const ROUTE_STR: usize,
    const OWNED: usize,
    const TRACK: usize,
> AsyncClient<'a, 'b, S, K, BROKERS, QUEUES, ROUTE_STR, OWNED, TRACK>
{
    /// A client that opens its connections through `stack` ([`ClientConfig`] as for
    /// [`Client`](crate::Client); the message buffer holds the heartbeat, then the message
    /// being sent).
    ///
    /// # Errors
    /// [`ClientError`].
    pub fn new(
        cfg: ClientConfig<'a>,
        mut bufs: AsyncBuffers<'b, BROKERS>,
        stack: &'a S,
        clock: &'a K,
    ) -> Result<Self, ClientError> {
        Ok(AsyncClient {
            m: ClientMachine::new(&cfg, core::mem::take(&mut bufs.message), clock.now())?,
            net: AsyncNet::new(stack, clock, &cfg.base, bufs),
        })
    }

    /// Counters (connections, frames, the session's).
    pub fn stats(&self) -> Stats {
        self.m.stats(self.net.stats)
    }

    /// Tells the client the wall-clock time (as
    /// [`Client::set_unix_time`](crate::Client::set_unix_time)).
    pub fn set_unix_time(&mut self, unix_millis: i64) {
        self.m.send.set_unix_time(self.net.clock.now(), unix_millis);
    }

    /// The consumer's counters.
    pub fn pull_stats(&self) -> PullStats {
        self.m.client.consumer().stats()
    }

    /// Queues owned now, with their committed offsets.
    pub fn owned(&self) -> impl Iterator<Item = (i32, Option<i64>)> + '_ {
        self.m.owned()
    }

    /// Consumes until the clock reaches `until`, handing each message to `deliver`.
    pub async fn run_until(&mut self, until: Instant, mut deliver: impl FnMut(&Delivery<'_, '_>)) {
        self.net
            .drive(&mut self.m, &mut deliver, Some(until), &mut |_| false)
            .await;
    }

    /// Publishes `msg` to [`ClientConfig::publish_topic`] and waits for the answer, consuming
    /// meanwhile.
    ///
    /// # Errors
    /// [`SendError`]; [`SubmitError::NoTopic`] without a publish topic.
    pub async fn send(
        &mut self,
        msg: &Message<'_>,
        mut deliver: impl FnMut(&Delivery<'_, '_>),
    ) -> Result<SendReceipt, SendError> {
        let now = self.net.clock.now();
        let m = &mut self.m;
        m.send
            .single(now, m.client.session_mut(), msg, SendMode::Sync, false)
            .map_err(SendError::Submit)?;
        self.net
            .complete(&mut self.m, &mut deliver, |m| &mut m.send)
            .await
    }

    /// Stops pulling, commits what was processed and returns once the commits are answered
    /// (or `timeout` passed).
    pub async fn stop(&mut self, timeout: Duration) {
        self.m.stop();
        let until = self.net.clock.now() + timeout;
        self.net
            .drive(&mut self.m, &mut |_| {}, Some(until), &mut |m| m.stopped())
            .await;
    }
}
