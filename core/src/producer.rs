//! Producer pieces shared by every runtime: the send request, the send response, compression
//! choice, heartbeat body, client id, NameServer choice and reconnect back-off.
//!
//! Read docs/protocol/STRATEGY.md §4.6 (what a send request carries), §7 (`processSendResponse`), §8.1
//! (NameServer choice) and docs/protocol/WIRE.md §8 (heartbeat), §10 (compression) first. Everything here is
//! a pure function of its inputs: runtimes (tokio, smoltcp) call these instead of building
//! headers or mapping codes themselves.
//!
//! ```
//! use rmq_core::message::CompressionType;
//! use rmq_core::producer::{SendRequest, compression_flags};
//! use rmq_core::wire::{CommandRepr, RequestCode, SerializeType, version};
//!
//! let req = SendRequest::new("pg", "TopicA", 2, "broker-a", "WAIT\u{1}true\u{2}", 1_700_000_000_000)
//!     .sys_flag(compression_flags(5000, 4096, false, CompressionType::Zlib).unwrap_or(0));
//! assert_eq!(req.code(), RequestCode::SEND_MESSAGE_V2);
//! let hdr = req.header();
//! assert_eq!(hdr.0.sys_flag, 0x301);
//! let cmd = CommandRepr::request(req.code(), 7, version::V5_3_3, Some(hdr));
//! let mut buf = [0u8; 512];
//! let n = cmd.emit_frame_prefix_and_header(SerializeType::JSON, 10, &mut buf).unwrap();
//! assert!(n > 8);
//! ```

use core::fmt;
use core::net::IpAddr;

use crate::json::SliceWriter;
use crate::message::{CompressionType, SysFlag};
use crate::retry::SendStatus;
use crate::time::Duration;
use crate::wire::headers::SendMessageResponseHeader;
use crate::wire::headers::{SendMessageRequestHeader, SendMessageRequestHeaderV2};
use crate::wire::{CommandHeader, FieldError, RequestCode, Scratch};

/// The auto-create template topic (`TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC`).
pub const DEFAULT_TOPIC: &str = "TBW102";
/// `defaultTopicQueueNums`: caps the template route's queues and goes in every send header.
pub const DEFAULT_TOPIC_QUEUE_NUMS: i32 = 4;
/// The internal producer group every Java client also announces in its heartbeats.
pub const CLIENT_INNER_PRODUCER: &str = "CLIENT_INNER_PRODUCER";
/// `compressMsgBodyOverHowmuch` default: compress bodies of at least 4096 bytes.
pub const DEFAULT_COMPRESS_OVER: usize = 4096;
/// `rocketmq.message.compressLevel` default (zlib level 5).
pub const COMPRESSION_LEVEL: u8 = 5;
/// `mqClientApiTimeout`: the timeout of route, heartbeat and unregister requests.
pub const CLIENT_API_TIMEOUT: Duration = Duration::from_millis(3000);
/// `connectTimeoutMillis`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(3000);
/// `pollNameServerInterval` default.
pub const POLL_NAME_SERVER_INTERVAL: Duration = Duration::from_millis(30_000);
/// `heartbeatBrokerInterval` default.
pub const HEARTBEAT_BROKER_INTERVAL: Duration = Duration::from_millis(30_000);

/// Least time between two route refreshes triggered by failed sends of one topic (the
/// periodic refresh runs regardless). Short enough that a master switch is followed within a
/// fraction of a second when the first refresh after a failure still names the old master
/// (the NameServer drops a dead master 20-300 ms after it died: `tests/tests/controller.rs`).
pub const ERROR_REFRESH_MIN_GAP: Duration = Duration::from_millis(200);

/// Whether a failed send should trigger a route refresh now, given the last one triggered
/// that way: at most one per [`ERROR_REFRESH_MIN_GAP`], so that a dead broker failing many
/// sends does not flood the NameServer.
pub fn error_refresh_due(last: Option<crate::time::Instant>, now: crate::time::Instant) -> bool {
    match last {
        None => true,
        Some(l) => now.saturating_duration_since(l) >= ERROR_REFRESH_MIN_GAP,
    }
}

/// The sysFlag bits a send adds for compression, or `None` when the body stays as it is:
/// non-batch bodies of at least `threshold` bytes are compressed with `ty` and flagged
/// `COMPRESSED | <type>` (zlib: `0x301`, LZ4 `0x101`, zstd `0x201`; docs/protocol/WIRE.md §10).
/// Batches are never compressed.
pub fn compression_flags(
    body_len: usize,
    threshold: usize,
    batch: bool,
    ty: CompressionType,
) -> Option<i32> {
    if batch || body_len < threshold {
        return None;
    }
    Some(SysFlag::COMPRESSED.with_compression(ty).bits())
}

/// Whether consumers of the line a client of remoting `version` talks to can read bodies
/// compressed with `ty`: zlib always; LZ4 and zstd from 4.9.4 (when the type bits and
/// `CompressorFactory` came, on both lines). Producers refuse the others rather than store
/// what those consumers would hand over still compressed.
pub fn compression_supported(ty: CompressionType, version: i32) -> bool {
    ty == CompressionType::Zlib || version >= crate::wire::version::V4_9_4
}

/// One send request (SEND_MESSAGE_V2 or SEND_BATCH_MESSAGE), as Java's `sendKernelImpl`
/// builds it. Build with [`SendRequest::new`], adjust, then take [`SendRequest::header`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendRequest<'a> {
    producer_group: &'a str,
    topic: &'a str,
    queue_id: i32,
    broker_name: &'a str,
    properties: &'a str,
    born_timestamp: i64,
    flag: i32,
    sys_flag: i32,
    batch: bool,
    reply: bool,
    reconsume: Option<(i32, i32)>,
    default_topic: &'a str,
    default_topic_queue_nums: i32,
}

impl<'a> SendRequest<'a> {
    /// A request for queue `queue_id` of `broker_name`, with the encoded properties string
    /// and the born timestamp (Unix ms).
    pub fn new(
        producer_group: &'a str,
        topic: &'a str,
        queue_id: i32,
        broker_name: &'a str,
        properties: &'a str,
        born_timestamp: i64,
    ) -> Self {
        SendRequest {
            producer_group,
            topic,
            queue_id,
            broker_name,
            properties,
            born_timestamp,
            flag: 0,
            sys_flag: 0,
            batch: false,
            reply: false,
            reconsume: None,
            default_topic: DEFAULT_TOPIC,
            default_topic_queue_nums: DEFAULT_TOPIC_QUEUE_NUMS,
        }
    }

    /// `Message.flag` (an application integer stored verbatim).
    #[must_use]
    pub fn flag(mut self, flag: i32) -> Self {
        self.flag = flag;
        self
    }

    /// Adds sysFlag bits (e.g. [`compression_flags`]).
    #[must_use]
    pub fn sys_flag(mut self, bits: i32) -> Self {
        self.sys_flag |= bits;
        self
    }

    /// Marks the body as a batch (code 320, `batch=true`).
    #[must_use]
    pub fn batch(mut self, batch: bool) -> Self {
        self.batch = batch;
        self
    }

    /// A reply of request-reply ([`crate::reply`]): code 325.
    #[must_use]
    pub fn reply(mut self, reply: bool) -> Self {
        self.reply = reply;
        self
    }

    /// A consumed message resent to `%RETRY%<group>`: `(reconsumeTimes, maxReconsumeTimes)`.
    #[must_use]
    pub fn reconsume(mut self, reconsume: Option<(i32, i32)>) -> Self {
        self.reconsume = reconsume;
        self
    }

    /// Overrides `createTopicKey` / `defaultTopicQueueNums`.
    #[must_use]
    pub fn default_topic(mut self, topic: &'a str, queue_nums: i32) -> Self {
        self.default_topic = topic;
        self.default_topic_queue_nums = queue_nums;
        self
    }

    /// The request code: SEND_BATCH_MESSAGE (320) for a batch, SEND_REPLY_MESSAGE_V2 (325) for
    /// a reply, else SEND_MESSAGE_V2 (310) (`sendSmartMsg` on, the Java default;
    /// docs/protocol/WIRE.md §6.3).
    pub fn code(&self) -> RequestCode {
        if self.batch {
            RequestCode::SEND_BATCH_MESSAGE
        } else if self.reply {
            RequestCode::SEND_REPLY_MESSAGE_V2
        } else {
            RequestCode::SEND_MESSAGE_V2
        }
    }

    /// The V2 header.
    pub fn header(&self) -> SendMessageRequestHeaderV2<'a> {
        SendMessageRequestHeaderV2(SendMessageRequestHeader {
            producer_group: self.producer_group,
            topic: self.topic,
            default_topic: self.default_topic,
            default_topic_queue_nums: self.default_topic_queue_nums,
            queue_id: self.queue_id,
            sys_flag: self.sys_flag,
            born_timestamp: self.born_timestamp,
            flag: self.flag,
            properties: if self.properties.is_empty() {
                None
            } else {
                Some(self.properties)
            },
            reconsume_times: Some(self.reconsume.map_or(0, |r| r.0)),
            unit_mode: Some(false),
            batch: Some(self.batch),
            max_reconsume_times: self.reconsume.map(|r| r.1),
            broker_name: Some(self.broker_name),
        })
    }
}

/// A decoded send response (docs/protocol/STRATEGY.md §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendResponse<'a> {
    /// The message was stored (`status` may still report a flush/replication problem).
    Stored {
        /// The send status.
        status: SendStatus,
        /// The response code (0, 10, 11 or 12).
        code: i32,
        /// The broker's message id (offsetMsgId).
        offset_msg_id: &'a str,
        /// The queue written.
        queue_id: i32,
        /// The consume-queue offset.
        queue_offset: i64,
    },
    /// Any other code: a broker error (`MQBrokerException`).
    Rejected {
        /// The response code.
        code: i32,
    },
}

impl SendResponse<'_> {
    /// The response code, for [`crate::retry::AttemptOutcome::Response`].
    pub fn code(&self) -> i32 {
        match *self {
            SendResponse::Stored { code, .. } | SendResponse::Rejected { code } => code,
        }
    }
}

/// Decodes a send response header: a status code with its required fields, or a broker error.
///
/// # Errors
/// [`FieldError`] when a status code comes without `msgId`, `queueId` or `queueOffset`
/// (Java fails the same way decoding the required fields).
pub fn parse_send_response<'a>(
    h: &CommandHeader<'a>,
    scratch: &mut Scratch<'a>,
) -> Result<SendResponse<'a>, FieldError> {
    send_response_with(h, scratch, SendMessageResponseHeader::decode)
}

/// [`parse_send_response`] from the ext fields collected while the header was parsed
/// ([`SendMessageResponseHeader::parse_collecting`]).
pub(crate) fn parse_send_response_collected<'a>(
    h: &CommandHeader<'a>,
    slots: crate::wire::headers::ResponseSlots<'a>,
    scratch: &mut Scratch<'a>,
) -> Result<SendResponse<'a>, FieldError> {
    send_response_with(h, scratch, |h, s| {
        SendMessageResponseHeader::decode_collected(h, slots, s)
    })
}

fn send_response_with<'a>(
    h: &CommandHeader<'a>,
    scratch: &mut Scratch<'a>,
    decode: impl FnOnce(
        &CommandHeader<'a>,
        &mut Scratch<'a>,
    ) -> Result<SendMessageResponseHeader<'a>, FieldError>,
) -> Result<SendResponse<'a>, FieldError> {
    let code = h.code();
    match SendStatus::from_code(code) {
        None => Ok(SendResponse::Rejected { code }),
        Some(status) => {
            let r = decode(h, scratch)?;
            Ok(SendResponse::Stored {
                status,
                code,
                offset_msg_id: r.msg_id,
                queue_id: r.queue_id,
                queue_offset: r.queue_offset,
            })
        }
    }
}

/// The members of a stored batch, in order (a SEND_BATCH_MESSAGE answer describes the
/// first): message `i`'s queue offset is the batch's plus `i`, and its offsetMsgId is the
/// `i`-th entry of the broker's comma-joined list when that entry reached the client whole
/// (as long as the first; the session keeps [`crate::session::MAX_MSG_ID`] characters of the
/// list, so past the first entry they are usually cut), else `""`. Endless: zip it with the
/// batch's messages.
///
/// ```
/// let ids = "0A0000050000270F0000000000000100,0A0000050000270F0000000000000180";
/// let mut m = rmq_core::producer::batch_members(ids, 40);
/// assert_eq!(m.next(), Some((40, "0A0000050000270F0000000000000100")));
/// assert_eq!(m.next(), Some((41, "0A0000050000270F0000000000000180")));
/// assert_eq!(m.next(), Some((42, "")), "past the list");
/// ```
pub fn batch_members(offset_msg_ids: &str, queue_offset: i64) -> impl Iterator<Item = (i64, &str)> {
    let first_len = offset_msg_ids.split(',').next().map_or(0, str::len);
    let mut ids = offset_msg_ids.split(',');
    (0i64..).map(move |i| {
        let id = ids.next().filter(|o| o.len() == first_len).unwrap_or("");
        (queue_offset.saturating_add(i), id)
    })
}

/// Whether a broker's answer refuses the request's ACL credentials: code 1 (SYSTEM_ERROR, how
/// 4.9 reports an `AclException`) or 16 (NO_PERMISSION, 5.x), with a remark naming the
/// signature, the access key or the user. Such a refusal is the same on every broker, so a
/// send ends at once instead of retrying.
pub fn is_auth_failure(code: i32, remark: Option<&str>) -> bool {
    const WORDS: [&[u8]; 7] = [
        b"signature",
        b"aclexception",
        b"authenticat",
        b"accesskey",
        b"access key",
        b"user:",
        b"username",
    ];
    if code != 1 && code != 16 {
        return false;
    }
    let Some(r) = remark else { return false };
    let r = r.as_bytes();
    WORDS
        .iter()
        .any(|w| r.windows(w.len()).any(|win| win.eq_ignore_ascii_case(w)))
}

/// Why a 5.x broker refused a timer message (`SendMessageProcessor.handlePutMessageResult`,
/// docs/protocol/STRATEGY.md §11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TimerRefusal {
    /// Further ahead than the broker's `timerMaxDelaySec` (MESSAGE_ILLEGAL, 13, "timer message
    /// illegal").
    TooFarAhead,
    /// The broker runs without its timer wheel, `timerWheelEnable=false` (SYSTEM_ERROR, 1,
    /// "accurate timer message is not enabled").
    Disabled,
    /// The timer wheel's slot is full (SYSTEM_ERROR, 1, "timer message is under flow
    /// control").
    FlowControl,
}

impl TimerRefusal {
    /// The refusal a broker's answer to a timer message's send means, if any.
    pub fn of(code: i32, remark: &str) -> Option<Self> {
        match code {
            13 if remark.starts_with("timer message illegal") => Some(TimerRefusal::TooFarAhead),
            1 if remark.starts_with("accurate timer message is not enabled") => {
                Some(TimerRefusal::Disabled)
            }
            1 if remark.starts_with("timer message is under flow control") => {
                Some(TimerRefusal::FlowControl)
            }
            _ => None,
        }
    }
}

impl fmt::Display for TimerRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimerRefusal::TooFarAhead => {
                "the delivery time is beyond the broker's timerMaxDelaySec"
            }
            TimerRefusal::Disabled => "the broker's timer wheel is off (timerWheelEnable=false)",
            TimerRefusal::FlowControl => "the broker's timer wheel is under flow control",
        })
    }
}

/// What a message carries besides topic and body, as Java's `Message` sets its properties
/// (docs/protocol/WIRE.md §9). Every runtime builds the properties string through
/// [`encode_message_properties`], so that validation, order and defaults are the same
/// everywhere.
#[derive(Clone, Copy, Debug)]
pub struct MessageFields<'a, U> {
    /// `TAGS` (absent when `None` or empty).
    pub tags: Option<&'a str>,
    /// `KEYS`, already joined by [`crate::message::keys::KEY_SEPARATOR`] (absent when `None`
    /// or empty).
    pub keys: Option<&'a str>,
    /// `DELAY` level (checked against `1..=`[`crate::message::validate::MAX_DELAY_LEVEL`]).
    pub delay_level: Option<i32>,
    /// `WAIT` (`waitStoreMsgOK`, Java's default `true`).
    pub wait_store_msg_ok: bool,
    /// A 5.x timer message's delivery time (`TIMER_DELIVER_MS` or `TIMER_DELAY_MS`); not
    /// with a delay level, not in a batch.
    pub timer: Option<TimerDelivery>,
    /// A transaction's half message of this producer group (`TRAN_MSG=true`, `PGROUP`; see
    /// [`crate::transaction`]): its delay level is dropped, as Java does.
    pub transaction: Option<&'a str>,
    /// A request's or a reply's correlation properties ([`crate::reply`]; feature `replies`).
    #[cfg(feature = "replies")]
    pub correlation: Option<crate::reply::Correlation<'a>>,
    /// User properties (checked with [`crate::message::validate::validate_user_property`]).
    pub user: U,
}

/// No user properties.
pub type NoUserProperties = core::iter::Empty<(&'static str, &'static str)>;

impl<'a> MessageFields<'a, NoUserProperties> {
    /// Only tags and keys (WAIT true, no delay, no user properties).
    pub fn new(tags: Option<&'a str>, keys: Option<&'a str>) -> Self {
        MessageFields {
            tags,
            keys,
            delay_level: None,
            wait_store_msg_ok: true,
            timer: None,
            transaction: None,
            #[cfg(feature = "replies")]
            correlation: None,
            user: core::iter::empty(),
        }
    }
}

/// When the broker delivers a timer message (RocketMQ 5.x, docs/protocol/STRATEGY.md §11): it
/// keeps the message in its timer wheel (`timerWheelEnable`) until then, at most
/// `timerMaxDelaySec` (3 days by default) ahead, rounded down to `timerPrecisionMs`. A time
/// already past is delivered at once. A 4.x broker ignores the properties and delivers at once,
/// so the session refuses such sends to it ([`crate::session::SendFailure::TimerUnsupported`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TimerDelivery {
    /// At this Unix time in ms (`TIMER_DELIVER_MS`, Java `Message.setDeliverTimeMs`).
    At(u64),
    /// This many ms after the broker receives it (`TIMER_DELAY_MS`, Java
    /// `Message.setDelayTimeMs`).
    After(u64),
}

impl TimerDelivery {
    /// The property it is written as.
    pub const fn key(self) -> &'static str {
        match self {
            TimerDelivery::At(_) => crate::message::keys::TIMER_DELIVER_MS,
            TimerDelivery::After(_) => crate::message::keys::TIMER_DELAY_MS,
        }
    }

    /// The property's value as Java's `String.valueOf(long)` writes it, in `buf`; `None` past
    /// `i64::MAX` (the broker could not parse it).
    pub fn write_value(self, buf: &mut [u8; 20]) -> Option<&str> {
        let (TimerDelivery::At(v) | TimerDelivery::After(v)) = self;
        let n = crate::json::fmt_i64(i64::try_from(v).ok()?, buf);
        core::str::from_utf8(buf.get(buf.len() - n..)?).ok()
    }
}

/// Why a message's properties cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MessageError {
    /// A rule of client-side validation failed (fix the message; nothing was sent).
    Invalid(crate::message::validate::ValidationError),
    /// The properties do not fit the buffer.
    BufferTooSmall,
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MessageError::Invalid(e) => fmt::Display::fmt(e, f),
            MessageError::BufferTooSmall => f.write_str("properties do not fit the buffer"),
        }
    }
}

impl core::error::Error for MessageError {}

/// Checks a message as Java's `Validators.checkMessage` does (topic, body not empty and at most
/// `max_message_size`), then its fields, and runs `f` with the encoder of its properties:
/// `TAGS`, `KEYS`, `DELAY`, the timer's, `WAIT`, `UNIQ_KEY`, then the user properties.
fn with_properties<'a, U, R>(
    topic: &str,
    body: &[u8],
    max_message_size: usize,
    m: &MessageFields<'a, U>,
    uniq: Option<&'a str>,
    f: impl FnOnce(&dyn crate::message::EncodeProperties) -> Result<R, MessageError>,
) -> Result<R, MessageError>
where
    U: Iterator<Item = (&'a str, &'a str)> + Clone,
{
    use crate::message::PropertiesEncoder;
    use crate::message::keys;
    use crate::message::validate::{
        MAX_DELAY_LEVEL, ValidationError, validate_delay_level, validate_message,
        validate_user_property,
    };
    let invalid = MessageError::Invalid;
    validate_message(topic, body, max_message_size).map_err(invalid)?;
    for (k, v) in m.user.clone() {
        validate_user_property(k, v).map_err(invalid)?;
    }
    const LEVELS: [&str; 18] = [
        "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
        "17", "18",
    ];
    let delay = match m.delay_level {
        // Java's sendMessageInTransaction clears the delay level of a half message.
        Some(_) if m.transaction.is_some() => None,
        Some(l) => {
            validate_delay_level(l, MAX_DELAY_LEVEL).map_err(invalid)?;
            usize::try_from(l - 1)
                .ok()
                .and_then(|i| LEVELS.get(i))
                .copied()
        }
        None => None,
    };
    let mut digits = [0u8; 20];
    let timer = match m.timer {
        // A 5.x broker lets the delay level win and drops the timer silently: refuse both.
        Some(_) if delay.is_some() => return Err(invalid(ValidationError::TimerWithDelayLevel)),
        Some(_) if m.transaction.is_some() => {
            return Err(invalid(ValidationError::TimerInTransaction));
        }
        Some(t) => Some((
            t.key(),
            t.write_value(&mut digits)
                .ok_or(invalid(ValidationError::TimerOutOfRange))?,
        )),
        None => None,
    };
    let wait = if m.wait_store_msg_ok { "true" } else { "false" };
    // A request's or a reply's properties (absent entries are filtered out below).
    #[cfg(feature = "replies")]
    let [e0, e1, e2, e3] = m.correlation.map_or([("", None); 4], |c| c.entries());
    let fixed = [
        (keys::TAGS, m.tags),
        (keys::KEYS, m.keys),
        (keys::DELAY_TIME_LEVEL, delay),
        (timer.map_or("", |t| t.0), timer.map(|t| t.1)),
        (keys::WAIT_STORE_MSG_OK, Some(wait)),
        (keys::UNIQ_KEY, uniq),
        (keys::TRANSACTION_PREPARED, m.transaction.map(|_| "true")),
        (keys::PRODUCER_GROUP, m.transaction),
        #[cfg(feature = "replies")]
        e0,
        #[cfg(feature = "replies")]
        e1,
        #[cfg(feature = "replies")]
        e2,
        #[cfg(feature = "replies")]
        e3,
    ];
    // The map of the user entries is not an identity: it shortens their lifetime to the
    // timer digits'.
    #[allow(clippy::map_identity)]
    let entries = fixed
        .into_iter()
        .filter_map(|(k, v)| v.filter(|v| !v.is_empty()).map(|v| (k, v)))
        .chain(m.user.clone().map(|(k, v)| (k, v)));
    let enc = PropertiesEncoder::new(entries);
    // A separator byte in tags or keys would corrupt the string (Java does not check).
    enc.validate()
        .map_err(|_| invalid(ValidationError::PropertySeparator))?;
    // Checked once here: encoding does not check again (64-bit; 32-bit targets keep the one
    // encoder, the smaller code).
    #[cfg(target_pointer_width = "64")]
    return f(&crate::message::properties::Checked(enc));
    #[cfg(not(target_pointer_width = "64"))]
    f(&enc)
}

/// Validates a message of a batch as [`encode_message_properties`] does and writes its
/// SEND_BATCH_MESSAGE record ([`crate::message::batch`]: header, body, the same properties)
/// into the front of `buf`; returns the record's length. A batch body is such records one
/// after the other; its request carries only `WAIT` as properties.
///
/// # Errors
/// [`MessageError::Invalid`] (nothing may be sent) or [`MessageError::BufferTooSmall`] (also
/// for properties longer than a record can hold).
pub fn encode_batch_record<'a, U>(
    topic: &str,
    body: &[u8],
    max_message_size: usize,
    m: &MessageFields<'a, U>,
    uniq: Option<&'a str>,
    flag: i32,
    buf: &mut [u8],
) -> Result<usize, MessageError>
where
    U: Iterator<Item = (&'a str, &'a str)> + Clone,
{
    // The broker reads only the batch's own properties: a timer in a record would be
    // delivered at once.
    if m.timer.is_some() {
        return Err(MessageError::Invalid(
            crate::message::validate::ValidationError::TimerInBatch,
        ));
    }
    with_properties(topic, body, max_message_size, m, uniq, |e| {
        let record = crate::message::BatchMessage {
            flag,
            body,
            properties: e,
        };
        record.encode(buf).map_err(|_| MessageError::BufferTooSmall)
    })
}

/// The exact length of the properties [`encode_message_properties`] writes.
///
/// # Errors
/// [`MessageError::Invalid`] as [`encode_message_properties`].
pub fn message_properties_len<'a, U>(
    topic: &str,
    body: &[u8],
    max_message_size: usize,
    m: &MessageFields<'a, U>,
    uniq: Option<&'a str>,
) -> Result<usize, MessageError>
where
    U: Iterator<Item = (&'a str, &'a str)> + Clone,
{
    with_properties(topic, body, max_message_size, m, uniq, |e| {
        Ok(e.encoded_len())
    })
}

/// Validates a message and writes its properties string into `buf` (see [`MessageFields`]);
/// returns its length.
///
/// # Errors
/// [`MessageError::Invalid`] (nothing may be sent) or [`MessageError::BufferTooSmall`].
pub fn encode_message_properties<'a, U>(
    topic: &str,
    body: &[u8],
    max_message_size: usize,
    m: &MessageFields<'a, U>,
    uniq: Option<&'a str>,
    buf: &mut [u8],
) -> Result<usize, MessageError>
where
    U: Iterator<Item = (&'a str, &'a str)> + Clone,
{
    with_properties(topic, body, max_message_size, m, uniq, |e| {
        e.encode(buf).map_err(|_| MessageError::BufferTooSmall)
    })
}

/// Writes the client id `ip@instance` (docs/protocol/WIRE.md §8, `buildMQClientId` without unit name).
///
/// # Errors
/// [`crate::json::BufferTooSmall`] when `buf` is too short.
pub fn write_client_id(
    ip: IpAddr,
    instance: &str,
    buf: &mut [u8],
) -> Result<usize, crate::json::BufferTooSmall> {
    struct W<'w, 'b>(&'w mut SliceWriter<'b>);
    impl fmt::Write for W<'_, '_> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0.put(s.as_bytes());
            Ok(())
        }
    }
    let mut w = SliceWriter::new(buf);
    // SliceWriter records overflow itself; the formatter never fails.
    let _ = fmt::write(&mut W(&mut w), format_args!("{ip}@{instance}"));
    w.finish()
}

/// Which HeartbeatData fields to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeartbeatFlavor {
    /// 4.9.x: clientID, consumerDataSet, producerDataSet.
    V4,
    /// 5.x: also `heartbeatFingerprint: 0` and `withoutSub: false`.
    V5,
}

/// Writes a producer-only HEART_BEAT (34) JSON body (fastjson order: keys sorted), announcing
/// `groups` plus [`CLIENT_INNER_PRODUCER`].
///
/// # Errors
/// [`crate::json::BufferTooSmall`] when `buf` is too short.
pub fn write_heartbeat(
    client_id: &str,
    groups: &[&str],
    flavor: HeartbeatFlavor,
    buf: &mut [u8],
) -> Result<usize, crate::json::BufferTooSmall> {
    let mut w = SliceWriter::new(buf);
    write_heartbeat_body(&mut w, client_id, groups, flavor, |_| {});
    w.finish()
}

/// The HEART_BEAT body shared by producers and consumers (fastjson order: keys sorted);
/// `consumers` writes the entries of `consumerDataSet` (nothing for a producer).
pub(crate) fn write_heartbeat_body(
    w: &mut SliceWriter<'_>,
    client_id: &str,
    producers: &[&str],
    flavor: HeartbeatFlavor,
    consumers: impl FnOnce(&mut SliceWriter<'_>),
) {
    w.put(br#"{"clientID":"#);
    w.put_json_str(client_id);
    w.put(br#","consumerDataSet":["#);
    consumers(w);
    w.put_u8(b']');
    if flavor == HeartbeatFlavor::V5 {
        w.put(br#","heartbeatFingerprint":0"#);
    }
    w.put(br#","producerDataSet":[{"groupName":"#);
    w.put_json_str(CLIENT_INNER_PRODUCER);
    w.put_u8(b'}');
    for g in producers.iter().filter(|g| **g != CLIENT_INNER_PRODUCER) {
        w.put(br#",{"groupName":"#);
        w.put_json_str(g);
        w.put_u8(b'}');
    }
    w.put_u8(b']');
    if flavor == HeartbeatFlavor::V5 {
        w.put(br#","withoutSub":false"#);
    }
    w.put_u8(b'}');
}

/// The NameServer choice of docs/protocol/STRATEGY.md §8.1: start at a random index, stay on one server
/// while it works, move to the next one after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamesrvCursor {
    index: u32,
}

impl NamesrvCursor {
    /// A cursor starting at `seed` (the runtime passes a random value).
    pub const fn new(seed: u32) -> Self {
        NamesrvCursor { index: seed }
    }

    /// The server to use among `len` (0 when `len == 0`).
    pub fn current(&self, len: usize) -> usize {
        (self.index as usize).checked_rem(len).unwrap_or(0)
    }

    /// The current server failed (connect error, timeout, closed): use the next one.
    pub fn failed(&mut self) {
        self.index = self.index.wrapping_add(1);
    }
}

/// Exponential reconnect back-off: `base · 2^failures`, capped at `max`, reset on success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    /// A back-off starting at `base`, never longer than `max`.
    pub const fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            failures: 0,
        }
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// How long to wait before the next connect attempt (zero before the first failure).
    pub fn delay(&self) -> Duration {
        if self.failures == 0 {
            return Duration::ZERO;
        }
        let shift = (self.failures - 1).min(20);
        let ms = self.base.millis().saturating_mul(1u64 << shift);
        Duration::from_millis(ms.min(self.max.millis()))
    }

    /// A connect attempt failed.
    pub fn failed(&mut self) {
        self.failures = self.failures.saturating_add(1);
    }

    /// A connect attempt succeeded.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests;
