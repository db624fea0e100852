//! One multiplexed TCP connection per address, driven by one task.
//!
//! The task owns the socket (TCP_NODELAY on): it writes the frames queued by callers, cuts
//! incoming bytes into frames with the core [`FrameReader`], and hands each response to the
//! caller registered under its opaque in the connection's [`Inflight`] table. Callers wait
//! on a oneshot with their own deadline; on timeout they cancel their entry, and whoever takes
//! the entry out of the table (response, timeout, lost connection) finishes the request, so
//! each request ends exactly once.
//!
//! When the connection is lost (EOF, reset, write error, malformed frame) the task fails
//! **every** request in flight on it at once with [`TransportError::ConnectionClosed`] and
//! marks itself closed; the [`Pool`] reconnects on the next request, with back-off.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use rmq_core::producer::{Backoff, CONNECT_TIMEOUT};
use rmq_core::retry::TransportError;
use rmq_core::time::{Duration, Instant};
use rmq_core::wire::{
    CommandHeader, CommandRepr, ExtFields, Frame, FrameReader, SerializeType, flag,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tracing::{debug, warn};

use crate::clock;
use crate::shared::{Counter, Counters, Inflight};
use crate::sync::{AtomicBool, Ordering};

/// Capacity of one connection's in-flight table.
pub const INFLIGHT_CAP: usize = 2048;
/// Largest frame accepted from a peer (route bodies are the largest a producer sees).
pub const MAX_RX_FRAME: usize = 8 << 20;
/// How often expired entries are swept (a safety net: callers time out on their own).
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_millis(1000);
/// Grace after a deadline before the sweeper fails an entry (Java scans with +1 s).
const SWEEP_GRACE: Duration = Duration::from_millis(1000);

/// What a request ends with: the whole response frame, or a transport failure.
pub type Reply = Result<Bytes, TransportError>;

/// A request the server sent on one of our connections (flag bit 0 clear, e.g.
/// NOTIFY_CONSUMER_IDS_CHANGED): the connection's address and the whole frame.
pub type ServerRequest = (String, Bytes);
type Waiter = oneshot::Sender<Reply>;

/// Called once a frame is written (`true`) or dropped unwritten (`false`).
pub(crate) type OnWritten = Box<dyn FnOnce(bool) + Send>;

struct Outgoing {
    head: Vec<u8>,
    body: Bytes,
    written: Option<oneshot::Sender<Result<(), TransportError>>>,
    on_written: Option<OnWritten>,
}

/// Where a connection driven by the client session hands every frame it reads, and says when
/// it ends (its in-flight table is then unused: the session correlates).
pub(crate) trait FrameSink: Send + Sync {
    /// A whole frame arrived; an error names what is wrong with it and closes the connection.
    fn frame(&self, frame: &[u8]) -> Result<(), &'static str>;
    /// The connection ended (`lost`: not by our request).
    fn closed(&self, lost: bool);
}

enum Cmd {
    Send(Outgoing),
    Close,
}

/// A handle on one connection (cheap to clone through `Arc`).
pub struct Conn {
    id: u32,
    addr: String,
    tx: mpsc::UnboundedSender<Cmd>,
    inflight: Arc<Inflight<Waiter, INFLIGHT_CAP>>,
    permits: Arc<Semaphore>,
    closed: Arc<AtomicBool>,
    rx_capacity: Arc<std::sync::atomic::AtomicUsize>,
    acl: Option<Arc<crate::AclConfig>>,
    /// When a response last matched a request in flight (core ms).
    last_matched: Arc<std::sync::atomic::AtomicU64>,
}

/// A snapshot of one connection's buffers and table, for tests (memory bounds).
#[doc(hidden)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnStats {
    /// Address.
    pub addr: String,
    /// Whether the connection task has ended.
    pub closed: bool,
    /// Requests in flight.
    pub in_flight: usize,
    /// Capacity of the socket read chunk (the frame buffer is a fixed [`MAX_RX_FRAME`]).
    pub rx_chunk_capacity: usize,
}

/// How to encode requests.
#[derive(Clone, Copy, Debug)]
pub struct Encoding {
    /// Header format.
    pub serialize_type: SerializeType,
    /// Remoting `version` sent.
    pub version: i32,
    /// Language sent.
    pub language: rmq_core::wire::LanguageCode,
}

/// A parsed response frame.
pub struct Response {
    frame: Bytes,
}

impl Response {
    /// A whole response frame (already cut and checked by a frame reader).
    pub(crate) fn from_frame(frame: Bytes) -> Response {
        Response { frame }
    }

    /// The header (the frame was validated by the reader).
    pub fn header(&self) -> Option<CommandHeader<'_>> {
        CommandHeader::parse(&Frame::new_unchecked(&self.frame[..])).ok()
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        Frame::new_unchecked(&self.frame[..]).body_ref()
    }

    /// The response code (or -1 if the header cannot be read).
    pub fn code(&self) -> i32 {
        self.header().map_or(-1, |h| h.code())
    }

    /// The remark, if any.
    pub fn remark(&self) -> Option<String> {
        let h = self.header()?;
        let r = h.remark()?;
        if let Some(s) = r.as_str() {
            return Some(s.to_owned());
        }
        let mut buf = vec![0u8; r.unescaped_len().ok()?];
        r.unescape_into(&mut buf).ok().map(str::to_owned)
    }
}

impl Conn {
    /// The id it was opened with.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Address this connection goes to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the connection task has ended.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.tx.is_closed()
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Buffers and table of this connection (tests).
    #[doc(hidden)]
    pub fn stats(&self) -> ConnStats {
        ConnStats {
            addr: self.addr.clone(),
            closed: self.is_closed(),
            in_flight: self.in_flight(),
            rx_chunk_capacity: self.rx_capacity.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Encodes the frame prefix and header of `cmd`, signed with the connection's ACL
    /// credentials (over its ext fields and `body`) when it has some.
    fn encode<E: ExtFields>(
        &self,
        enc: Encoding,
        cmd: CommandRepr<'_, E>,
        body: &[u8],
    ) -> Result<Vec<u8>, TransportError> {
        let Some(acl) = &self.acl else {
            return Self::encode_plain(enc, cmd, body.len());
        };
        let signed = rmq_core::acl::SignedFields::sign(&acl.credentials(), cmd.ext, body)
            .map_err(|_| TransportError::WriteFailed)?;
        let cmd = CommandRepr {
            code: cmd.code,
            language: cmd.language,
            version: cmd.version,
            opaque: cmd.opaque,
            flag: cmd.flag,
            remark: cmd.remark,
            ext: Some(signed),
        };
        Self::encode_plain(enc, cmd, body.len())
    }

    fn encode_plain<E: ExtFields>(
        enc: Encoding,
        mut cmd: CommandRepr<'_, E>,
        body_len: usize,
    ) -> Result<Vec<u8>, TransportError> {
        cmd.language = enc.language;
        let mut head = vec![0u8; 8 + cmd.buffer_len(enc.serialize_type)];
        let n = cmd
            .emit_frame_prefix_and_header(enc.serialize_type, body_len, &mut head)
            .map_err(|_| TransportError::WriteFailed)?;
        head.truncate(n);
        Ok(head)
    }

    /// Sends a request built by `build(opaque)` and waits for its response until `deadline`.
    ///
    /// # Errors
    /// [`TransportError::TimedOut`] at the deadline (also while waiting for a free in-flight
    /// slot), [`TransportError::ConnectionClosed`] if the connection is lost first,
    /// [`TransportError::WriteFailed`] if the request cannot be encoded.
    pub async fn request<'r, E: ExtFields>(
        &self,
        enc: Encoding,
        build: impl FnOnce(i32) -> CommandRepr<'r, E>,
        body: Bytes,
        deadline: Instant,
    ) -> Result<Response, TransportError> {
        let tdeadline = clock::to_tokio(deadline);
        let _permit = match tokio::time::timeout_at(tdeadline, self.permits.acquire()).await {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => return Err(TransportError::ConnectionClosed),
            Err(_) => return Err(TransportError::TimedOut),
        };
        if self.is_closed() {
            return Err(TransportError::ConnectionClosed);
        }
        let (tx, mut rx) = oneshot::channel();
        let opaque = self
            .inflight
            .register(self.id, deadline + SWEEP_GRACE, tx)
            .map_err(|_| TransportError::WriteFailed)?;
        // Whatever happens from here on, the entry leaves the table exactly once.
        let guard = CancelGuard {
            inflight: &self.inflight,
            opaque,
            armed: true,
        };
        let head = match self.encode(enc, build(opaque), &body) {
            Ok(h) => h,
            Err(e) => return Err(e),
        };
        if self
            .tx
            .send(Cmd::Send(Outgoing {
                head,
                body,
                written: None,
                on_written: None,
            }))
            .is_err()
        {
            return Err(TransportError::ConnectionClosed);
        }
        // Re-check after queueing: a task that ended between the two checks drained the
        // table before our insert may have landed; the guard then removes the entry.
        let reply = match tokio::time::timeout_at(tdeadline, &mut rx).await {
            Ok(Ok(r)) => {
                guard.disarm();
                r
            }
            Ok(Err(_)) => Err(TransportError::ConnectionClosed),
            Err(_) => {
                // Timed out: take the entry back unless a response or a failure got there
                // first, in which case the reply is already (or about to be) in `rx`.
                if guard.inflight.cancel(opaque).is_some() {
                    guard.disarm();
                    Err(TransportError::TimedOut)
                } else {
                    guard.disarm();
                    rx.await.unwrap_or(Err(TransportError::ConnectionClosed))
                }
            }
        };
        reply.map(|frame| Response { frame })
    }

    /// Writes a oneway request (flag bit 1) and waits until it is written or `deadline`.
    ///
    /// # Errors
    /// As [`Conn::request`], plus [`TransportError::WriteFailed`] when the write fails.
    pub async fn oneway<'r, E: ExtFields>(
        &self,
        enc: Encoding,
        build: impl FnOnce(i32) -> CommandRepr<'r, E>,
        body: Bytes,
        deadline: Instant,
    ) -> Result<(), TransportError> {
        if self.is_closed() {
            return Err(TransportError::ConnectionClosed);
        }
        let opaque = self.inflight.untracked_opaque();
        let mut cmd = build(opaque);
        cmd.flag |= flag::ONEWAY;
        let head = self.encode(enc, cmd, &body)?;
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Send(Outgoing {
                head,
                body,
                written: Some(tx),
                on_written: None,
            }))
            .map_err(|_| TransportError::ConnectionClosed)?;
        match tokio::time::timeout_at(clock::to_tokio(deadline), rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(TransportError::ConnectionClosed),
            Err(_) => Err(TransportError::TimedOut),
        }
    }

    /// Queues a frame already encoded (prefix and header in `head`, then `body`); `on_written`
    /// is told whether it was written. `false` when the connection is closed (nothing queued;
    /// `on_written` is not called).
    pub(crate) fn send_frame(
        &self,
        head: Vec<u8>,
        body: Bytes,
        on_written: Option<OnWritten>,
    ) -> bool {
        let out = Outgoing {
            head,
            body,
            written: None,
            on_written,
        };
        !self.is_closed() && self.tx.send(Cmd::Send(out)).is_ok()
    }

    /// Asks the task to close the connection (requests in flight fail at once).
    pub fn close(&self) {
        let _ = self.tx.send(Cmd::Close);
    }

    /// Whether a response matched a request in flight on this connection at or after `t`.
    /// A request that timed out on a connection where nothing answered since it was sent
    /// points at an unresponsive peer (hung, stalled mid-frame, answering only unknown
    /// opaques): the caller should [`Conn::close`] it (Java closes on every timeout,
    /// `clientCloseSocketIfTimeout`; one slow request among answered ones keeps it).
    pub fn answered_since(&self, t: Instant) -> bool {
        self.last_matched.load(std::sync::atomic::Ordering::Acquire) >= t.millis()
    }
}

struct CancelGuard<'a> {
    inflight: &'a Inflight<Waiter, INFLIGHT_CAP>,
    opaque: i32,
    armed: bool,
}

impl CancelGuard<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            // The caller went away (error path or dropped future): free the slot.
            let _ = self.inflight.cancel(self.opaque);
        }
    }
}

/// Per-connection options beyond the defaults: request signing, TLS, server requests.
#[derive(Clone, Debug, Default)]
pub struct ConnOptions {
    /// Sign every request with these ACL 1.0 credentials.
    pub acl: Option<Arc<crate::AclConfig>>,
    /// Run the connection over TLS (handshake right after the TCP connect).
    pub tls: Option<Arc<crate::tls::TlsConfig>>,
    /// Forward the requests the server sends on the connection here (else they are dropped).
    pub server_requests: Option<mpsc::UnboundedSender<ServerRequest>>,
    /// Hand every frame to this sink instead of the in-flight table.
    pub(crate) sink: Option<Arc<dyn FrameSink>>,
}

impl std::fmt::Debug for dyn FrameSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameSink")
    }
}

/// Opens a plain connection to `addr` and spawns its task.
///
/// # Errors
/// [`TransportError::ConnectFailed`] on refusal, unreachable or after [`CONNECT_TIMEOUT`].
pub async fn connect(
    id: u32,
    addr: &str,
    max_in_flight: usize,
    counters: Arc<Counters>,
) -> Result<Arc<Conn>, TransportError> {
    connect_with(id, addr, max_in_flight, counters, &ConnOptions::default()).await
}

/// [`connect`] with [`ConnOptions`].
///
/// # Errors
/// As [`connect`].
pub async fn connect_with(
    id: u32,
    addr: &str,
    max_in_flight: usize,
    counters: Arc<Counters>,
    opts: &ConnOptions,
) -> Result<Arc<Conn>, TransportError> {
    let stream = match tokio::time::timeout(
        clock::to_std(CONNECT_TIMEOUT),
        TcpStream::connect(addr),
    )
    .await
    {
        Ok(Ok(s)) => s,
        _ => return Err(TransportError::ConnectFailed),
    };
    let _ = stream.set_nodelay(true);
    let mut plain = Some(stream);
    let tls = match (&opts.tls, plain.take_if(|_| opts.tls.is_some())) {
        (Some(t), Some(stream)) => match tokio::time::timeout(
            clock::to_std(CONNECT_TIMEOUT),
            crate::tls::handshake(t, addr, stream),
        )
        .await
        {
            Ok(Ok(s)) => Some(s),
            _ => return Err(TransportError::ConnectFailed),
        },
        _ => None,
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let conn = Arc::new(Conn {
        id,
        addr: addr.to_owned(),
        tx,
        inflight: Arc::new(Inflight::new(1)),
        permits: Arc::new(Semaphore::new(max_in_flight.clamp(1, INFLIGHT_CAP))),
        closed: Arc::new(AtomicBool::new(false)),
        rx_capacity: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        acl: opts.acl.clone(),
        last_matched: Arc::new(std::sync::atomic::AtomicU64::new(0)),
    });
    let task = Task {
        id,
        addr: addr.to_owned(),
        inflight: conn.inflight.clone(),
        closed: conn.closed.clone(),
        permits: conn.permits.clone(),
        counters,
        rx_capacity: conn.rx_capacity.clone(),
        last_matched: conn.last_matched.clone(),
        server_requests: opts.server_requests.clone(),
        sink: opts.sink.clone(),
    };
    match tls {
        Some(s) => {
            let (rd, wr) = tokio::io::split(s);
            tokio::spawn(task.run(rd, wr, rx));
        }
        None => {
            let (rd, wr) = plain.ok_or(TransportError::ConnectFailed)?.into_split();
            tokio::spawn(task.run(rd, wr, rx));
        }
    }
    debug!(addr, id, tls = opts.tls.is_some(), "connected");
    Ok(conn)
}

struct Task {
    id: u32,
    addr: String,
    inflight: Arc<Inflight<Waiter, INFLIGHT_CAP>>,
    closed: Arc<AtomicBool>,
    permits: Arc<Semaphore>,
    counters: Arc<Counters>,
    rx_capacity: Arc<std::sync::atomic::AtomicUsize>,
    last_matched: Arc<std::sync::atomic::AtomicU64>,
    server_requests: Option<mpsc::UnboundedSender<ServerRequest>>,
    sink: Option<Arc<dyn FrameSink>>,
}

enum End {
    Requested,
    Lost(&'static str),
}

impl Task {
    async fn run<R, W>(self, mut rd: R, wr: W, mut rx: mpsc::UnboundedReceiver<Cmd>)
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let mut wr = BufWriter::with_capacity(64 * 1024, wr);
        let mut reader = FrameReader::new(vec![0u8; MAX_RX_FRAME]);
        let mut chunk = BytesMut::with_capacity(64 * 1024);
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let end = loop {
            tokio::select! {
                r = rd.read_buf(&mut chunk) => match r {
                    Ok(0) => break End::Lost("closed by peer"),
                    Err(_) => break End::Lost("read error"),
                    Ok(_) => {
                        if let Err(why) = self.ingest(&mut reader, &mut chunk) {
                            break End::Lost(why);
                        }
                        if chunk.capacity() - chunk.len() < 4096 {
                            chunk.reserve(64 * 1024);
                        }
                        self.rx_capacity.store(chunk.capacity(), std::sync::atomic::Ordering::Relaxed);
                    }
                },
                cmd = rx.recv() => {
                    let Some(mut cmd) = cmd else { break End::Requested };
                    // Write this frame and everything else already queued, then flush once.
                    let mut failed = false;
                    loop {
                        match cmd {
                            Cmd::Close => { failed = true; break; }
                            Cmd::Send(out) => {
                                let ok = wr.write_all(&out.head).await.is_ok()
                                    && wr.write_all(&out.body).await.is_ok();
                                if let Some(w) = out.written {
                                    let _ = w.send(if ok { Ok(()) } else { Err(TransportError::WriteFailed) });
                                }
                                if let Some(f) = out.on_written {
                                    f(ok);
                                }
                                if !ok { failed = true; break; }
                            }
                        }
                        match rx.try_recv() {
                            Ok(c) => cmd = c,
                            Err(_) => break,
                        }
                    }
                    if failed || wr.flush().await.is_err() {
                        break if failed { End::Requested } else { End::Lost("write error") };
                    }
                }
                _ = sweep.tick() => {
                    for (_, w) in self.inflight.expire(clock::now()) {
                        let _ = w.send(Err(TransportError::TimedOut));
                    }
                }
            }
        };
        self.closed.store(true, Ordering::Release);
        self.permits.close();
        rx.close();
        while let Ok(cmd) = rx.try_recv() {
            if let Cmd::Send(out) = cmd {
                if let Some(w) = out.written {
                    let _ = w.send(Err(TransportError::ConnectionClosed));
                }
                if let Some(f) = out.on_written {
                    f(false);
                }
            }
        }
        if let Some(sink) = &self.sink {
            if let End::Lost(why) = end {
                self.counters.bump(Counter::ConnectionsLost);
                warn!(addr = %self.addr, why, "connection lost");
            }
            sink.closed(matches!(end, End::Lost(_)));
            return;
        }
        let failed = self.inflight.drain_connection(self.id);
        match end {
            End::Requested => debug!(addr = %self.addr, failed = failed.len(), "connection closed"),
            End::Lost(why) => {
                self.counters.bump(Counter::ConnectionsLost);
                warn!(addr = %self.addr, why, failed = failed.len(), "connection lost");
            }
        }
        for (_, w) in failed {
            let _ = w.send(Err(TransportError::ConnectionClosed));
        }
    }

    /// Cuts frames out of `chunk`; an error closes the connection.
    fn ingest(
        &self,
        reader: &mut FrameReader<Vec<u8>>,
        chunk: &mut BytesMut,
    ) -> Result<(), &'static str> {
        while !chunk.is_empty() {
            let n = reader.feed(chunk).map_err(|_| "malformed frame")?;
            chunk.advance(n);
            if let Some(frame) = reader.take_frame() {
                if let Some(sink) = &self.sink {
                    sink.frame(frame.into_inner())?;
                    continue;
                }
                let h = CommandHeader::parse(&frame).map_err(|_| "malformed header")?;
                if !h.is_response() {
                    // A request from the broker (consumer ids changed, transaction check, ...):
                    // handed to the owner's handler if there is one, else ignored, as Java does
                    // when no processor is set.
                    if let Some(tx) = &self.server_requests {
                        let frame = Bytes::copy_from_slice(frame.into_inner());
                        let _ = tx.send((self.addr.clone(), frame));
                    }
                    continue;
                }
                let opaque = h.opaque();
                match self.inflight.complete(opaque) {
                    Some(w) => {
                        self.last_matched
                            .fetch_max(clock::now().millis(), std::sync::atomic::Ordering::AcqRel);
                        let _ = w.send(Ok(Bytes::copy_from_slice(frame.into_inner())));
                    }
                    None => {
                        self.counters.bump(Counter::LateDropped);
                        debug!(addr = %self.addr, opaque, "late or unknown response dropped");
                    }
                }
            } else if n == 0 {
                break;
            }
        }
        Ok(())
    }
}

struct Slot {
    conn: Option<Arc<Conn>>,
    backoff: Backoff,
    next_try: Instant,
}

/// Connections by address, reconnecting with back-off.
pub struct Pool {
    fast: std::sync::Mutex<HashMap<String, Arc<Conn>>>,
    slots: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
    next_id: std::sync::atomic::AtomicU32,
    max_in_flight: usize,
    counters: Arc<Counters>,
    opts: ConnOptions,
    /// Addresses reached without TLS even when `opts.tls` is set.
    plain: Vec<String>,
}

impl Pool {
    /// An empty pool.
    pub fn new(max_in_flight: usize, counters: Arc<Counters>) -> Self {
        Pool {
            fast: Default::default(),
            slots: Default::default(),
            next_id: std::sync::atomic::AtomicU32::new(1),
            max_in_flight,
            counters,
            opts: ConnOptions::default(),
            plain: Vec::new(),
        }
    }

    /// Forwards server-initiated requests to `server_requests` (dropped when `None`).
    #[must_use]
    pub fn with_server_requests(
        mut self,
        server_requests: Option<mpsc::UnboundedSender<ServerRequest>>,
    ) -> Self {
        self.opts.server_requests = server_requests;
        self
    }

    /// Uses TLS to every address except `plain` (the NameServers, unless the TLS config
    /// applies to them too).
    #[must_use]
    pub fn with_tls(mut self, tls: Option<crate::tls::TlsConfig>, plain: &[String]) -> Self {
        if let Some(t) = &tls
            && !t.applies_to_name_server()
        {
            self.plain.extend(plain.iter().cloned());
        }
        self.opts.tls = tls.map(Arc::new);
        self
    }

    /// Signs every request of every connection with `acl` (ACL 1.0).
    #[must_use]
    pub fn with_acl(mut self, acl: Option<crate::AclConfig>) -> Self {
        self.opts.acl = acl.map(Arc::new);
        self
    }

    /// The live connection to `addr`, connecting if needed.
    ///
    /// # Errors
    /// [`TransportError::ConnectFailed`] when the connect fails or the address is in back-off
    /// after recent failures.
    pub async fn get(&self, addr: &str) -> Result<Arc<Conn>, TransportError> {
        if let Some(c) = self.fast.lock().ok().and_then(|m| m.get(addr).cloned())
            && !c.is_closed()
        {
            return Ok(c);
        }
        let slot = {
            let mut m = self
                .slots
                .lock()
                .map_err(|_| TransportError::ConnectFailed)?;
            m.entry(addr.to_owned())
                .or_insert_with(|| {
                    Arc::new(tokio::sync::Mutex::new(Slot {
                        conn: None,
                        backoff: Backoff::new(
                            Duration::from_millis(100),
                            Duration::from_millis(5000),
                        ),
                        next_try: Instant::ZERO,
                    }))
                })
                .clone()
        };
        let mut s = slot.lock().await;
        if let Some(c) = &s.conn
            && !c.is_closed()
        {
            return Ok(c.clone());
        }
        let now = clock::now();
        if now < s.next_try {
            return Err(TransportError::ConnectFailed);
        }
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let plain_opts;
        let opts = if self.opts.tls.is_some() && self.plain.iter().any(|p| p == addr) {
            plain_opts = ConnOptions {
                tls: None,
                ..self.opts.clone()
            };
            &plain_opts
        } else {
            &self.opts
        };
        match connect_with(id, addr, self.max_in_flight, self.counters.clone(), opts).await {
            Ok(c) => {
                s.backoff.reset();
                s.conn = Some(c.clone());
                if let Ok(mut m) = self.fast.lock() {
                    m.insert(addr.to_owned(), c.clone());
                }
                Ok(c)
            }
            Err(e) => {
                s.backoff.failed();
                s.next_try = clock::now() + s.backoff.delay();
                s.conn = None;
                debug!(addr, failures = s.backoff.failures(), "connect failed");
                Err(e)
            }
        }
    }

    /// Every connection the pool holds (tests).
    #[doc(hidden)]
    pub fn stats(&self) -> Vec<ConnStats> {
        self.fast
            .lock()
            .map(|m| m.values().map(|c| c.stats()).collect())
            .unwrap_or_default()
    }

    /// Closes every connection.
    pub fn close_all(&self) {
        if let Ok(m) = self.fast.lock() {
            for c in m.values() {
                c.close();
            }
        }
    }
}
