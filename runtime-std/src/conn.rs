//! One TCP (or TLS) connection, driven by one task: a frame pipe for the client session.
//!
//! The task owns the socket (TCP_NODELAY on): it writes the frames queued with
//! [`Conn::send_frame`] (each batch of queued frames with one `writev`, bodies not copied),
//! cuts incoming bytes into frames (each prefix checked by the core's [`check_prefix`] before
//! the frame is buffered) and hands every frame to its [`FrameSink`] (the session driver,
//! which correlates responses) as [`Bytes`] (see `RxBuf`): message bodies are slices of it,
//! never copies. When the connection ends (EOF, reset, write error, malformed frame, or
//! [`Conn::close`]) the sink hears it once, and the session fails everything in flight on it
//! at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use rmq_core::producer::CONNECT_TIMEOUT;
use rmq_core::wire::{PREFIX_LEN, ReadError, check_prefix};
use std::io::IoSlice;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::clock;
use crate::message::ConnectionError;
use crate::shared::{Counter, Counters};

/// TLS settings of a connection (nothing to set without the `tls` feature).
#[cfg(feature = "tls")]
pub(crate) type Tls = crate::tls::TlsConfig;
/// TLS settings of a connection (nothing to set without the `tls` feature).
#[cfg(not(feature = "tls"))]
pub(crate) type Tls = std::convert::Infallible;

/// Largest frame accepted from a peer (route bodies and pulls are the largest).
pub const MAX_RX_FRAME: usize = 8 << 20;

/// Bytes asked of the socket per read into the staging buffer.
const READ_CHUNK: usize = 64 * 1024;
/// Frames written with one write at most (the rest wait for the next).
const MAX_BATCH: usize = 512;
/// Slices per `writev` (Linux's `IOV_MAX` is 1,024).
const MAX_IOV: usize = 1024;
/// The copy buffer of a stream without vectored writes is freed past this size.
const COPY_KEEP: usize = 1 << 20;
/// Frames longer than this get a buffer of their own, of their exact size (pull answers).
const LARGE_FRAME: usize = 8 * 1024;

/// Called once a frame is written (`true`) or dropped unwritten (`false`).
pub(crate) type OnWritten = Box<dyn FnOnce(bool) + Send + Sync>;

/// Where a connection hands every frame it reads, and says when it ends.
pub(crate) trait FrameSink: Send + Sync {
    /// Whole frames arrived (every frame of one read, in order); an error names what is wrong
    /// with one and closes the connection (the frames after it are dropped).
    fn frames(&self, frames: &[Bytes]) -> Result<(), String>;
    /// The connection ended: why, or `None` when we asked for it.
    fn closed(&self, lost: Option<ConnectionError>);
}

struct Outgoing {
    head: Bytes,
    body: Bytes,
    on_written: Option<OnWritten>,
}

enum Cmd {
    Send(Outgoing),
    Close,
}

/// A handle on one connection (shared through `Arc`).
pub struct Conn {
    id: u32,
    addr: String,
    tx: mpsc::UnboundedSender<Cmd>,
    closed: Arc<AtomicBool>,
    rx_capacity: Arc<AtomicUsize>,
}

/// A snapshot of one connection's buffers, for tests (memory bounds).
#[doc(hidden)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnStats {
    /// Address.
    pub addr: String,
    /// Whether the connection task has ended.
    pub closed: bool,
    /// Requests in flight on it (the session's count).
    pub in_flight: usize,
    /// Capacity of the socket read (staging) buffer; a frame larger than 8 KiB is received into
    /// a buffer of its own size (at most [`MAX_RX_FRAME`]), not counted here.
    pub rx_chunk_capacity: usize,
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

    /// Buffers of this connection (tests; `in_flight` is filled in by the session driver).
    #[doc(hidden)]
    pub fn stats(&self) -> ConnStats {
        ConnStats {
            addr: self.addr.clone(),
            closed: self.is_closed(),
            in_flight: 0,
            rx_chunk_capacity: self.rx_capacity.load(Ordering::Relaxed),
        }
    }

    /// Queues a frame already encoded (prefix and header in `head`, then `body`); `on_written`
    /// is told whether it was written. `false` when the connection is closed (nothing queued;
    /// `on_written` is not called).
    pub(crate) fn send_frame(
        &self,
        head: Bytes,
        body: Bytes,
        on_written: Option<OnWritten>,
    ) -> bool {
        let out = Outgoing {
            head,
            body,
            on_written,
        };
        !self.is_closed() && self.tx.send(Cmd::Send(out)).is_ok()
    }

    /// Asks the task to close the connection (the sink hears it).
    pub fn close(&self) {
        let _ = self.tx.send(Cmd::Close);
    }
}

/// Opens a connection to `addr` (over TLS with `tls`) and spawns its task, which hands every
/// frame to `sink`.
///
/// # Errors
/// The I/O error (refused, unreachable), the TLS failure, or the timeout after
/// [`CONNECT_TIMEOUT`].
pub(crate) async fn connect(
    id: u32,
    addr: &str,
    tls: Option<&Tls>,
    counters: Arc<Counters>,
    sink: Arc<dyn FrameSink>,
) -> Result<Arc<Conn>, ConnectionError> {
    let timeout = clock::to_std(CONNECT_TIMEOUT);
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(ConnectionError::io(addr, e)),
        Err(_) => return Err(ConnectionError::connect_timeout(addr)),
    };
    let _ = stream.set_nodelay(true);
    let (tx, rx) = mpsc::unbounded_channel();
    let conn = Arc::new(Conn {
        id,
        addr: addr.to_owned(),
        tx,
        closed: Arc::new(AtomicBool::new(false)),
        rx_capacity: Arc::new(AtomicUsize::new(0)),
    });
    let task = Task {
        addr: addr.to_owned(),
        closed: conn.closed.clone(),
        counters,
        rx_capacity: conn.rx_capacity.clone(),
        sink,
    };
    match tls {
        #[cfg(not(feature = "tls"))]
        Some(t) => match *t {},
        #[cfg(feature = "tls")]
        Some(t) => {
            let s =
                match tokio::time::timeout(timeout, crate::tls::handshake(t, addr, stream)).await {
                    Ok(r) => r?,
                    Err(_) => return Err(ConnectionError::connect_timeout(addr)),
                };
            let (rd, wr) = tokio::io::split(s);
            tokio::spawn(task.run(rd, wr, rx));
        }
        None => {
            let (rd, wr) = stream.into_split();
            tokio::spawn(task.run(rd, wr, rx));
        }
    }
    debug!(addr, id, tls = tls.is_some(), "connected");
    Ok(conn)
}

/// The frame of a request for [`request_once`]: `code` with `ext` and `body`, signed with
/// `security`'s ACL credentials when it has them (header, then body).
///
/// # Errors
/// [`rmq_core::acl::RequestError`] when the header cannot be written.
pub fn request_frame<E: rmq_core::wire::ExtFields>(
    code: rmq_core::wire::RequestCode,
    opaque: i32,
    ext: E,
    body: &[u8],
    security: &crate::SecurityConfig,
) -> Result<(Bytes, Bytes), rmq_core::acl::RequestError> {
    use rmq_core::wire::{CommandRepr, LanguageCode, SerializeType, version};
    let mut repr = CommandRepr::request(code, opaque, version::V5_3_3, None::<()>);
    repr.language = LanguageCode::RUST;
    let creds = security.acl.as_ref().map(|a| a.credentials());
    let mut head = vec![0u8; 4096];
    let v2 = rmq_core::namespace::V2Fields(security.namespace_v2.as_deref());
    let n = rmq_core::acl::emit_request(
        &repr,
        rmq_core::wire::Chain(ext, v2),
        creds.as_ref(),
        SerializeType::JSON,
        (body, body.len()),
        &mut head,
    )?;
    head.truncate(n);
    Ok((Bytes::from(head), Bytes::copy_from_slice(body)))
}

/// The answer to a request of the runtime's own ([`crate::driver::Driver::ask`]): its code,
/// its remark and one ext field.
pub(crate) struct Answer {
    pub(crate) code: i32,
    pub(crate) remark: Option<String>,
    /// The field the asker wanted read.
    pub(crate) field: Option<String>,
}

impl Answer {
    /// The answer in response frame `f`, with its ext field `field`; `None` when it does not
    /// decode.
    pub(crate) fn read(f: &[u8], field: &str) -> Option<Answer> {
        let frame = rmq_core::wire::Frame::new_checked(f).ok()?;
        let h = rmq_core::wire::CommandHeader::parse(&frame).ok()?;
        let text = |f| unescaped(f).map(|b| String::from_utf8_lossy(&b).into_owned());
        Some(Answer {
            code: h.code(),
            remark: h.remark().and_then(text),
            field: h.get(field).and_then(text),
        })
    }
}

/// One request and its answer on a connection of its own, for operators' tools (the
/// `rmq-admin` crate): connects to `addr` (over TLS when `security` has it for a NameServer,
/// `name_server`, or a broker), writes the encoded request (`head`, then `body`) and returns
/// the first response frame whose opaque is `opaque`; the connection is closed then. The
/// caller bounds the wait (`tokio::time::timeout`).
///
/// # Errors
/// The connection's failure, or its loss before the answer.
pub async fn request_once(
    addr: &str,
    security: &crate::SecurityConfig,
    name_server: bool,
    (head, body): (Bytes, Bytes),
    opaque: i32,
) -> Result<Bytes, ConnectionError> {
    struct Answers(mpsc::UnboundedSender<Result<Bytes, Option<ConnectionError>>>);
    impl FrameSink for Answers {
        fn frames(&self, frames: &[Bytes]) -> Result<(), String> {
            for f in frames {
                let _ = self.0.send(Ok(f.clone()));
            }
            Ok(())
        }
        fn closed(&self, lost: Option<ConnectionError>) {
            let _ = self.0.send(Err(lost));
        }
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let tls = security.tls_for(name_server);
    let counters = Arc::new(Counters::new());
    let c = connect(0, addr, tls.as_ref(), counters, Arc::new(Answers(tx))).await?;
    c.send_frame(head, body, None);
    let answers = |f: &[u8]| {
        let frame = rmq_core::wire::Frame::new_checked(f).ok()?;
        let h = rmq_core::wire::CommandHeader::parse(&frame).ok()?;
        (h.is_response() && h.opaque() == opaque).then_some(())
    };
    while let Some(got) = rx.recv().await {
        match got {
            Ok(f) if answers(&f).is_some() => {
                c.close();
                return Ok(f);
            }
            Ok(_) => {}
            Err(lost) => return Err(lost.unwrap_or_else(|| ConnectionError::closed_by_peer(addr))),
        }
    }
    Err(ConnectionError::closed_by_peer(addr))
}

struct Task {
    addr: String,
    closed: Arc<AtomicBool>,
    counters: Arc<Counters>,
    rx_capacity: Arc<AtomicUsize>,
    sink: Arc<dyn FrameSink>,
}

enum End {
    Requested,
    Lost(ConnectionError),
}

impl Task {
    async fn run<R, W>(self, mut rd: R, mut wr: W, mut rx: mpsc::UnboundedReceiver<Cmd>)
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let mut rx_buf = RxBuf::default();
        // The frames of one write, and (for a stream without vectored writes) their bytes.
        let mut batch: Vec<Outgoing> = Vec::new();
        let mut copy: Vec<u8> = Vec::new();
        let end = loop {
            tokio::select! {
                r = rx_buf.read(&mut rd) => match r {
                    Ok(0) => break End::Lost(ConnectionError::closed_by_peer(&self.addr)),
                    Err(e) => break End::Lost(ConnectionError::io(&self.addr, e)),
                    Ok(_) => {
                        if let Err(why) = rx_buf.ingest(&*self.sink) {
                            break End::Lost(ConnectionError::bad_frame(&self.addr, why));
                        }
                        self.rx_capacity.store(rx_buf.staging.capacity(), Ordering::Relaxed);
                    }
                },
                cmd = rx.recv() => {
                    let Some(cmd) = cmd else { break End::Requested };
                    // Let the tasks that are ready now (other senders) queue their frames first:
                    // then this frame and everything queued meanwhile leave in one write. Without
                    // it a sender's wake-up runs this task at once (tokio's LIFO slot) and every
                    // frame costs a syscall of its own.
                    tokio::task::yield_now().await;
                    let mut close = false;
                    let mut next = Some(cmd);
                    while let Some(c) = next.take() {
                        match c {
                            Cmd::Close => close = true,
                            Cmd::Send(out) => batch.push(out),
                        }
                        if close || batch.len() >= MAX_BATCH {
                            break;
                        }
                        next = rx.try_recv().ok();
                    }
                    let r = write_batch(&mut wr, &batch, &mut copy).await;
                    for out in batch.drain(..) {
                        if let Some(f) = out.on_written {
                            f(r.is_ok());
                        }
                    }
                    if let Err(e) = r {
                        break End::Lost(ConnectionError::io(&self.addr, e));
                    }
                    if close {
                        break End::Requested;
                    }
                }
            }
        };
        self.closed.store(true, Ordering::Release);
        rx.close();
        while let Ok(cmd) = rx.try_recv() {
            if let Cmd::Send(Outgoing {
                on_written: Some(f),
                ..
            }) = cmd
            {
                f(false);
            }
        }
        let lost = match end {
            End::Lost(why) => {
                self.counters.bump(Counter::ConnectionsLost);
                warn!(%why, "connection lost");
                Some(why)
            }
            End::Requested => None,
        };
        self.sink.closed(lost);
    }
}

/// Writes every frame of `batch` (heads and bodies): with vectored writes (`writev`, at most
/// [`MAX_IOV`] slices a call) where the stream has them, so bodies are never copied;
/// otherwise through one buffer (`copy`) and one `write_all`.
async fn write_batch<W: AsyncWrite + Unpin>(
    wr: &mut W,
    batch: &[Outgoing],
    copy: &mut Vec<u8>,
) -> std::io::Result<()> {
    let parts = batch
        .iter()
        .flat_map(|o| [&o.head[..], &o.body[..]])
        .filter(|b| !b.is_empty());
    if !wr.is_write_vectored() {
        copy.clear();
        for p in parts {
            copy.extend_from_slice(p);
        }
        let r = wr.write_all(copy).await;
        if copy.capacity() > COPY_KEEP {
            *copy = Vec::new();
        }
        r?;
        return wr.flush().await;
    }
    let mut slices: Vec<IoSlice<'_>> = parts.map(IoSlice::new).collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = rest.len().min(MAX_IOV);
        let written = wr.write_vectored(rest.get(..n).unwrap_or(&[])).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut rest, written);
    }
    wr.flush().await
}

/// A connection's incoming bytes, cut into frames that are handed on as [`Bytes`] without
/// copying their bodies. Socket reads land in `staging` (up to [`READ_CHUNK`] at a time); a
/// frame up to [`LARGE_FRAME`] is split off it (the staging buffer is shared by the frames
/// cut from it until they are dropped), a larger one moves to a buffer of its exact size
/// and the rest of it is read straight into that. After a large frame, the next read is
/// kept short, so that the next large frame's head is all that is copied.
#[derive(Default)]
struct RxBuf {
    staging: BytesMut,
    /// A large frame being received: its buffer and its length.
    large: Option<(BytesMut, usize)>,
    after_large: bool,
    /// The frames cut from one read, handed on together.
    ready: Vec<Bytes>,
}

impl RxBuf {
    async fn read<R: AsyncRead + Unpin>(&mut self, rd: &mut R) -> std::io::Result<usize> {
        if let Some((buf, len)) = &mut self.large {
            let want = *len - buf.len();
            return rd.read_buf(&mut (&mut *buf).limit(want)).await;
        }
        if self.staging.capacity() - self.staging.len() < 4096 {
            self.staging.reserve(READ_CHUNK);
        }
        let limit = if self.after_large {
            LARGE_FRAME
        } else {
            READ_CHUNK
        };
        rd.read_buf(&mut (&mut self.staging).limit(limit)).await
    }

    /// Hands every whole frame received to `sink`; an error closes the connection.
    fn ingest(&mut self, sink: &dyn FrameSink) -> Result<(), String> {
        let r = self.cut();
        // The frames cut before a malformed one are still handed on.
        let handed = if self.ready.is_empty() {
            Ok(())
        } else {
            sink.frames(&self.ready)
        };
        self.ready.clear();
        r.and(handed)
    }

    /// Cuts the whole frames received into `ready`.
    fn cut(&mut self) -> Result<(), String> {
        if let Some((buf, len)) = self.large.take() {
            if buf.len() < len {
                self.large = Some((buf, len));
                return Ok(());
            }
            self.after_large = true;
            self.ready.push(buf.freeze());
            return Ok(());
        }
        while let Some(&prefix) = self.staging.first_chunk::<PREFIX_LEN>() {
            let (len, _) = check_prefix(prefix).map_err(|e| format!("malformed frame: {e}"))?;
            if len > MAX_RX_FRAME {
                let e = ReadError::FrameTooLargeForBuffer { frame_len: len };
                return Err(format!("malformed frame: {e}"));
            }
            let large = len > LARGE_FRAME;
            if self.staging.len() < len {
                if large {
                    // Only this frame's head is left in staging.
                    let mut buf = BytesMut::with_capacity(len);
                    buf.extend_from_slice(&self.staging);
                    self.staging.clear();
                    self.large = Some((buf, len));
                }
                break;
            }
            let frame = if large {
                let f = Bytes::copy_from_slice(&self.staging[..len]);
                self.staging.advance(len);
                f
            } else {
                self.staging.split_to(len).freeze()
            };
            self.after_large = large;
            self.ready.push(frame);
        }
        Ok(())
    }
}

/// A header string's bytes with its JSON escapes decoded.
pub(crate) fn unescaped(f: rmq_core::wire::FieldStr<'_>) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; f.unescaped_len().ok()?];
    let n = f.unescape_into(&mut buf).ok()?.len();
    buf.truncate(n);
    Some(buf)
}
