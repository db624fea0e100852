//! The message to send, and what a send returns.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use rmq_core::message::validate::ValidationError;
use rmq_core::producer::TimerDelivery;
use rmq_core::retry::SendStatus;
use rmq_core::transport::TransportError;

/// A message to send. Build with [`Message::new`] and the `with_*` methods.
///
/// ```
/// use rmq_std::Message;
/// let m = Message::new("TopicA", "hello")
///     .with_tags("TagA")
///     .with_keys(["order-1", "order-2"])
///     .with_property("region", "eu")
///     .with_delay_level(3);
/// assert_eq!(m.topic(), "TopicA");
/// assert_eq!(m.body().as_ref(), b"hello");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub(crate) topic: String,
    pub(crate) body: Bytes,
    pub(crate) tags: Option<String>,
    pub(crate) keys: Vec<String>,
    pub(crate) properties: Vec<(String, String)>,
    pub(crate) delay_level: Option<i32>,
    pub(crate) timer: Option<TimerDelivery>,
    pub(crate) flag: i32,
    pub(crate) wait_store_msg_ok: bool,
}

impl Message {
    /// A message for `topic` with `body`.
    pub fn new(topic: impl Into<String>, body: impl Into<Bytes>) -> Self {
        Message {
            topic: topic.into(),
            body: body.into(),
            tags: None,
            keys: Vec::new(),
            properties: Vec::new(),
            delay_level: None,
            timer: None,
            flag: 0,
            wait_store_msg_ok: true,
        }
    }

    /// Sets the tag (property `TAGS`).
    #[must_use]
    pub fn with_tags(mut self, tags: impl Into<String>) -> Self {
        self.tags = Some(tags.into());
        self
    }

    /// Sets the keys (property `KEYS`, joined by spaces).
    #[must_use]
    pub fn with_keys<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.keys = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Adds a user property (checked at send time: reserved keys are refused).
    #[must_use]
    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.push((key.into(), value.into()));
        self
    }

    /// Sets the delay level (1..=18; property `DELAY`).
    #[must_use]
    pub fn with_delay_level(mut self, level: i32) -> Self {
        self.delay_level = Some(level);
        self
    }

    /// Delivers the message at `at` (a 5.x timer message: property `TIMER_DELIVER_MS`, Java's
    /// `setDeliverTimeMs`). The broker keeps it in its timer wheel (`timerWheelEnable=true`)
    /// until then, at most its `timerMaxDelaySec` (3 days by default) ahead, to its
    /// `timerPrecisionMs` (1 s by default; it may come up to that much early); a time already
    /// past is delivered at once. Sending fails with [`SendErrorKind::TimerRefused`] when the
    /// broker refuses it, with [`SendErrorKind::TimerUnsupported`] on a 4.x broker (which would
    /// deliver it at once), and it cannot have a delay level or join a batch.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use rmq_std::Message;
    /// let at = UNIX_EPOCH + Duration::from_millis(1_800_000_000_000);
    /// let m = Message::new("TopicA", "wake up").with_deliver_at(at);
    /// assert_eq!(m.deliver_at(), Some(at));
    /// ```
    #[must_use]
    pub fn with_deliver_at(mut self, at: std::time::SystemTime) -> Self {
        let ms = at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.timer = Some(TimerDelivery::At(ms));
        self
    }

    /// Delivers the message `delay` after the broker receives it (a 5.x timer message:
    /// property `TIMER_DELAY_MS`, Java's `setDelayTimeMs`), in milliseconds; otherwise as
    /// [`with_deliver_at`](Self::with_deliver_at).
    ///
    /// ```
    /// use std::time::Duration;
    /// use rmq_std::Message;
    /// let m = Message::new("TopicA", "later").with_delay(Duration::from_secs(90));
    /// assert_eq!(m.delay(), Some(Duration::from_secs(90)));
    /// ```
    #[must_use]
    pub fn with_delay(mut self, delay: std::time::Duration) -> Self {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.timer = Some(TimerDelivery::After(ms));
        self
    }

    /// The delivery time set by [`with_deliver_at`](Self::with_deliver_at) (to the
    /// millisecond).
    pub fn deliver_at(&self) -> Option<std::time::SystemTime> {
        match self.timer? {
            TimerDelivery::At(ms) => {
                std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_millis(ms))
            }
            TimerDelivery::After(_) => None,
        }
    }

    /// The delay set by [`with_delay`](Self::with_delay) (to the millisecond).
    pub fn delay(&self) -> Option<std::time::Duration> {
        match self.timer? {
            TimerDelivery::After(ms) => Some(std::time::Duration::from_millis(ms)),
            TimerDelivery::At(_) => None,
        }
    }

    /// Sets `Message.flag`, an application integer stored verbatim.
    #[must_use]
    pub fn with_flag(mut self, flag: i32) -> Self {
        self.flag = flag;
        self
    }

    /// Sets `waitStoreMsgOK` (property `WAIT`, default true).
    #[must_use]
    pub fn with_wait_store_msg_ok(mut self, wait: bool) -> Self {
        self.wait_store_msg_ok = wait;
        self
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The tag.
    pub fn tags(&self) -> Option<&str> {
        self.tags.as_deref()
    }
}

/// A queue of a topic: (topic, broker name, queue id).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MessageQueue {
    /// Topic.
    pub topic: String,
    /// Broker name.
    pub broker_name: String,
    /// Queue id on that broker.
    pub queue_id: i32,
}

/// A message the broker stored.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SendResult {
    /// The status (only `SendOk` guarantees flush and replication as configured).
    pub status: SendStatus,
    /// The client message id (`UNIQ_KEY`); comma-joined for a batch.
    pub msg_id: String,
    /// The broker message id (store host + commit-log offset).
    pub offset_msg_id: String,
    /// Where it was stored.
    pub queue: MessageQueue,
    /// Consume-queue offset (of the first message of a batch).
    pub queue_offset: i64,
    /// Attempts made.
    pub attempts: u8,
    /// What [`Producer::recall`](crate::Producer::recall) takes to stop this message before
    /// it is delivered: set by a 5.3.2+ broker for a timer or delay message (not in a batch).
    pub recall_handle: Option<String>,
}

/// Why a send failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendErrorKind {
    /// The message was refused before any byte was sent.
    Validation(ValidationError),
    /// A batch was refused before any byte was sent (mixed topics, delay levels, empty).
    InvalidBatch(&'static str),
    /// The topic has no route (Java "No route info of this topic").
    NoRoute,
    /// No NameServer answered.
    NoNameServer,
    /// The broker answered with an error code.
    Broker {
        /// The response code.
        code: i32,
        /// The broker's remark.
        remark: Option<String>,
    },
    /// The last attempt failed below the protocol.
    Transport(TransportError),
    /// The total send timeout passed.
    Timeout,
    /// The broker answered with a malformed send response.
    Malformed,
    /// The producer is shut down.
    Shutdown,
    /// The client's tables are full (too many topics or sends at once); nothing was sent.
    Capacity(rmq_core::session::SubmitError),
    /// The request could not be encoded (frame over 16 MiB, header over its buffer); nothing
    /// was sent.
    Request(rmq_core::wire::EncodeError),
    /// ACL signing refused the credentials before anything was sent (a key too long to sign).
    Signing(rmq_core::acl::AclError),
    /// The broker refused the ACL credentials (wrong access key or secret, missing or bad
    /// signature, or no credentials for a broker that requires them). Not retried.
    Authentication {
        /// The response code (NO_PERMISSION 16 on 5.x, SYSTEM_ERROR 1 on 4.9).
        code: i32,
        /// The broker's remark.
        remark: Option<String>,
    },
    /// The broker refused a timer message ([`Message::with_deliver_at`],
    /// [`Message::with_delay`]): too far ahead, its timer wheel off, or flow control.
    TimerRefused {
        /// Why.
        refusal: rmq_core::producer::TimerRefusal,
        /// The response code (MESSAGE_ILLEGAL 13 or SYSTEM_ERROR 1).
        code: i32,
        /// The broker's remark.
        remark: Option<String>,
    },
    /// A timer message for a broker older than 5.0, which would ignore its delivery time and
    /// deliver it at once; nothing was sent. Decided from the broker's remoting version in its
    /// answers (before it has answered, the NameServer's).
    TimerUnsupported {
        /// The remoting version (`MQVersion` ordinal: 407 is 4.9.7, 413 is 5.0.0).
        broker_version: i32,
    },
    /// [`crate::Producer::request`]: the request was stored but no reply came in time.
    ReplyTimeout,
    /// [`crate::Producer::reply`]: the message is not a request a broker stored; nothing was
    /// sent.
    NotARequest(rmq_core::reply::ReplyError),
    /// [`crate::Producer::recall`]: the handle is not one a broker wrote, or the topic is a
    /// retry or dead-letter one; nothing was sent. (A handle of another topic is the broker's
    /// to refuse: [`SendErrorKind::Broker`], ILLEGAL_OPERATION "topic not match".)
    InvalidRecallHandle(rmq_core::recall::HandleError),
}

impl SendErrorKind {
    /// Its position in [`crate::metrics::FailureCounts::NAMES`].
    pub fn index(&self) -> usize {
        match self {
            SendErrorKind::Validation(_)
            | SendErrorKind::InvalidBatch(_)
            | SendErrorKind::TimerUnsupported { .. }
            | SendErrorKind::NotARequest(_)
            | SendErrorKind::InvalidRecallHandle(_) => 0,
            SendErrorKind::NoRoute => 1,
            SendErrorKind::NoNameServer => 2,
            SendErrorKind::Broker { .. } | SendErrorKind::TimerRefused { .. } => 3,
            SendErrorKind::Transport(_) => 4,
            SendErrorKind::Timeout | SendErrorKind::ReplyTimeout => 5,
            SendErrorKind::Malformed => 6,
            SendErrorKind::Shutdown => 7,
            SendErrorKind::Capacity(_) => 8,
            SendErrorKind::Request(_) | SendErrorKind::Signing(_) => 9,
            SendErrorKind::Authentication { .. } => 10,
        }
    }
}

/// A failed send: its cause, the attempts made, whether trying again may help, and (for the
/// single-message sends) the message itself, so that a caller can retry without cloning
/// first.
///
/// ```no_run
/// # async fn f(p: rmq_std::Producer) {
/// use rmq_std::Message;
/// let mut msg = Message::new("TopicA", "hello");
/// for _ in 0..3 {
///     match p.send(msg).await {
///         Ok(_) => return,
///         Err(e) if e.is_retryable() => match e.into_message() {
///             Some(m) => msg = m,
///             None => return,
///         },
///         Err(_) => return,
///     }
/// }
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendError {
    pub(crate) kind: SendErrorKind,
    pub(crate) attempts: u8,
    pub(crate) retryable: bool,
    pub(crate) message: Option<Box<Message>>,
    pub(crate) cause: Option<Box<ConnectionError>>,
    /// The core's failure this error reports (its `source()`).
    pub(crate) failure: Option<Box<rmq_core::session::SendFailure>>,
}

impl SendError {
    pub(crate) fn new(kind: SendErrorKind, attempts: u8) -> Self {
        let retryable = matches!(
            kind,
            SendErrorKind::NoRoute
                | SendErrorKind::NoNameServer
                | SendErrorKind::Transport(_)
                | SendErrorKind::Timeout
        );
        SendError {
            kind,
            attempts,
            retryable,
            message: None,
            cause: None,
            failure: None,
        }
    }

    pub(crate) fn with_message(mut self, m: Message) -> Self {
        self.message = Some(Box::new(m));
        self
    }

    /// What failed below the protocol on the last attempt's connection (also the error's
    /// [`source`](std::error::Error::source)): the I/O error kind, the TLS failure, or what
    /// was malformed in a frame the peer sent.
    pub fn connection_error(&self) -> Option<&ConnectionError> {
        self.cause.as_deref()
    }

    /// The message that was not sent (single-message sends; `None` for batches).
    pub fn message(&self) -> Option<&Message> {
        self.message.as_deref()
    }

    /// The message that was not sent, to send it again (single-message sends; `None` for
    /// batches).
    pub fn into_message(self) -> Option<Message> {
        self.message.map(|m| *m)
    }

    /// The cause.
    pub fn kind(&self) -> &SendErrorKind {
        &self.kind
    }

    /// Attempts made (0 when nothing was sent).
    pub fn attempts(&self) -> u8 {
        self.attempts
    }

    /// Whether sending the same message again later may succeed (transport failures,
    /// timeouts, missing routes, retryable broker codes). Validation errors never are.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The broker's response code, when the broker refused the message.
    pub fn broker_code(&self) -> Option<i32> {
        match self.kind {
            SendErrorKind::Broker { code, .. } | SendErrorKind::Authentication { code, .. } => {
                Some(code)
            }
            _ => None,
        }
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            SendErrorKind::Validation(e) => write!(f, "invalid message: {e}"),
            SendErrorKind::InvalidBatch(e) => write!(f, "invalid batch: {e}"),
            SendErrorKind::NoRoute => f.write_str("no route info for the topic"),
            SendErrorKind::NoNameServer => f.write_str("no NameServer answered"),
            SendErrorKind::Broker { code, remark } => write!(
                f,
                "broker refused the message with code {code} ({}) after {} attempt(s)",
                remark.as_deref().unwrap_or("no remark"),
                self.attempts
            ),
            SendErrorKind::Transport(t) => {
                write!(
                    f,
                    "transport failure {t:?} after {} attempt(s)",
                    self.attempts
                )?;
                match self.cause.as_deref() {
                    Some(c) => write!(f, " ({c})"),
                    None => Ok(()),
                }
            }
            SendErrorKind::Timeout => {
                write!(f, "send timed out after {} attempt(s)", self.attempts)
            }
            SendErrorKind::Malformed => f.write_str("malformed send response"),
            SendErrorKind::Shutdown => f.write_str("producer is shut down"),
            SendErrorKind::Capacity(e) => write!(f, "client capacity: {e}"),
            SendErrorKind::Request(e) => write!(f, "cannot build the request: {e}"),
            SendErrorKind::Signing(e) => write!(f, "cannot sign the request: {e}"),
            SendErrorKind::Authentication { code, remark } => write!(
                f,
                "authentication failed: the broker refused the ACL credentials with code {code} \
                 ({}); check the access key and secret key",
                remark.as_deref().unwrap_or("no remark")
            ),
            SendErrorKind::TimerRefused {
                refusal,
                code,
                remark,
            } => write!(
                f,
                "broker refused the timer message: {refusal} (code {code}: {})",
                remark.as_deref().unwrap_or("no remark")
            ),
            SendErrorKind::TimerUnsupported { broker_version } => write!(
                f,
                "timer messages need a 5.x broker; this one (remoting version {broker_version}) \
                 would deliver it at once, so it was not sent"
            ),
            SendErrorKind::ReplyTimeout => {
                f.write_str("the request was sent, but no reply came before its timeout")
            }
            SendErrorKind::NotARequest(e) => write!(f, "cannot reply: {e}"),
            SendErrorKind::InvalidRecallHandle(e) => write!(f, "cannot recall: {e}"),
        }
    }
}

impl std::error::Error for SendError {
    /// The connection's failure, else the core's failure (whose own `source()` goes on).
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match (self.cause.as_deref(), self.failure.as_deref()) {
            (Some(c), _) => Some(c),
            (None, Some(f)) => Some(f),
            (None, None) => None,
        }
    }
}

/// Why a connection could not be opened, or ended without our asking: the cause behind a
/// [`TransportError`]. Its [`source`](std::error::Error::source) is the [`std::io::Error`] or
/// the `rustls::Error` (e.g. `InvalidCertificate(UnknownIssuer)` for an untrusted CA,
/// `InvalidCertificate(NotValidForName)` for a name mismatch).
///
/// ```no_run
/// # async fn f(p: rmq_std::Producer) {
/// if let Err(e) = p.send(rmq_std::Message::new("TopicA", "x")).await {
///     if let Some(c) = e.connection_error() {
///         eprintln!("{}: io {:?}, tls {:?}", c.addr(), c.io_kind(), c.tls());
///     }
/// }
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ConnectionError {
    addr: String,
    cause: Cause,
}

#[derive(Clone, Debug)]
enum Cause {
    Io(Arc<std::io::Error>),
    #[cfg(feature = "tls")]
    Tls(rustls::Error),
    Malformed(String),
    ConnectTimeout,
    ClosedByPeer,
}

impl ConnectionError {
    /// An I/O error on `addr` (a TLS failure inside it is kept as such).
    pub(crate) fn io(addr: &str, e: std::io::Error) -> Self {
        #[cfg(feature = "tls")]
        if let Some(t) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            return Self::with(addr, Cause::Tls(t.clone()));
        }
        let cause = Cause::Io(Arc::new(e));
        ConnectionError {
            addr: addr.to_owned(),
            cause,
        }
    }

    pub(crate) fn bad_frame(addr: &str, what: String) -> Self {
        Self::with(addr, Cause::Malformed(what))
    }

    pub(crate) fn connect_timeout(addr: &str) -> Self {
        Self::with(addr, Cause::ConnectTimeout)
    }

    pub(crate) fn closed_by_peer(addr: &str) -> Self {
        Self::with(addr, Cause::ClosedByPeer)
    }

    fn with(addr: &str, cause: Cause) -> Self {
        ConnectionError {
            addr: addr.to_owned(),
            cause,
        }
    }

    /// The peer's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The I/O error kind (`TimedOut` for a connect that timed out, `UnexpectedEof` for a
    /// connection the peer closed, `InvalidData` for a TLS failure or a malformed frame).
    pub fn io_kind(&self) -> std::io::ErrorKind {
        match &self.cause {
            Cause::Io(e) => e.kind(),
            #[cfg(feature = "tls")]
            Cause::Tls(_) => std::io::ErrorKind::InvalidData,
            Cause::Malformed(_) => std::io::ErrorKind::InvalidData,
            Cause::ConnectTimeout => std::io::ErrorKind::TimedOut,
            Cause::ClosedByPeer => std::io::ErrorKind::UnexpectedEof,
        }
    }

    /// The TLS failure (untrusted certificate, name mismatch, peer not speaking TLS).
    #[cfg(feature = "tls")]
    pub fn tls(&self) -> Option<&rustls::Error> {
        match &self.cause {
            Cause::Tls(e) => Some(e),
            _ => None,
        }
    }

    /// What was wrong with a frame the peer sent (the connection was closed for it).
    pub fn malformed(&self) -> Option<&str> {
        match &self.cause {
            Cause::Malformed(w) => Some(w),
            _ => None,
        }
    }

    /// The core's transport error for this cause (`connecting`: before the connection was up).
    pub(crate) fn transport(&self, connecting: bool) -> TransportError {
        match self.cause {
            Cause::Malformed(_) => TransportError::Malformed,
            _ if connecting => TransportError::ConnectFailed,
            _ => TransportError::ConnectionClosed,
        }
    }
}

impl fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.addr;
        match &self.cause {
            Cause::Io(e) => write!(f, "connection to {a}: {e}"),
            #[cfg(feature = "tls")]
            Cause::Tls(e) => write!(f, "TLS with {a}: {e}"),
            Cause::Malformed(w) => write!(f, "{a} sent a {w}; connection closed"),
            Cause::ConnectTimeout => write!(f, "connect to {a} timed out"),
            Cause::ClosedByPeer => write!(f, "{a} closed the connection"),
        }
    }
}

impl std::error::Error for ConnectionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.cause {
            Cause::Io(e) => Some(&**e),
            #[cfg(feature = "tls")]
            Cause::Tls(e) => Some(e),
            _ => None,
        }
    }
}

/// Equal when the address and the description are (I/O errors do not compare).
impl PartialEq for ConnectionError {
    fn eq(&self, o: &Self) -> bool {
        self.addr == o.addr && self.to_string() == o.to_string()
    }
}

impl Eq for ConnectionError {}
