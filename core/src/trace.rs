//! Message trace records (Java `enableMsgTrace`; docs/protocol/TRACE.md): the text the Java
//! client's `TraceDataEncoder` writes into the bodies of `RMQ_SYS_TRACE_TOPIC` messages, which
//! the RocketMQ dashboard and `mqadmin queryMsgTraceById` read, and the KEYS such a message
//! carries so that a query by message id finds it.
//!
//! Each record is its fields joined by `\u{1}` and ended by `\u{2}`; a trace message's body is
//! records one after the other (up to [`MAX_BODY`] bytes). A value Java would print as `null`
//! (a message without tags or keys) is written `null`.
//!
//! Which records leave together is [`Gather`]'s decision (Java 5.3.3's `AsyncTraceDispatcher`:
//! ten records of one user topic, [`MAX_BODY`] bytes, or [`FLUSH_INTERVAL`] after the first);
//! which events become records and how a trace message is sent (an inner producer, a bounded
//! queue of [`QUEUE_CAPACITY`] that drops and counts) are the runtime's.
//!
//! ```
//! use rmq_core::trace::{MsgType, Pub, Record, Sent};
//! let sent = Sent {
//!     timestamp: 1_700_000_000_000,
//!     region: "DefaultRegion",
//!     group: "pg",
//!     topic: "Orders",
//!     msg_id: "0A0B0C0D000018B4AAC2001700000001",
//!     tags: Some("TagA"),
//!     keys: None,
//!     store_host: "10.0.0.1:10911",
//! };
//! let p = Pub {
//!     sent,
//!     body_len: 5,
//!     cost_ms: 3,
//!     msg_type: MsgType::Normal,
//!     offset_msg_id: "0A00000100002A9F0000000000000000",
//!     success: true,
//! };
//! let mut buf = [0u8; 256];
//! let n = Record::Pub(p).write(&mut buf).unwrap();
//! let text = core::str::from_utf8(&buf[..n]).unwrap();
//! assert!(text.starts_with("Pub\u{1}1700000000000\u{1}DefaultRegion\u{1}pg\u{1}Orders\u{1}"));
//! assert!(text.ends_with("\u{1}TagA\u{1}null\u{1}10.0.0.1:10911\u{1}5\u{1}3\u{1}0\u{1}0A00000100002A9F0000000000000000\u{1}true\u{2}"));
//! ```

use crate::json::{BufferTooSmall, SliceWriter};
use crate::time::{Duration, Instant};

/// The default trace topic (Java `TopicValidator.RMQ_SYS_TRACE_TOPIC`).
pub const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";
/// The trace producer's group prefix (Java `TraceConstants.GROUP_NAME_PREFIX`).
pub const GROUP_PREFIX: &str = "_INNER_TRACE_PRODUCER";
/// The region a send result without `MSG_REGION` reports (Java `MixAll.DEFAULT_TRACE_REGION_ID`).
pub const DEFAULT_REGION: &str = "DefaultRegion";
/// A trace message's body is sent once it reaches this many bytes (Java's trace producer's
/// `maxMessageSize`, 128,000).
pub const MAX_BODY: usize = 128_000;

/// Records per trace message (Java 5.3.3's `traceMsgBatchNum` default).
pub const BATCH_RECORDS: usize = 10;
/// The longest a record waits for others before its trace message leaves (Java's
/// `flushTraceInterval`, 5 s).
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(5_000);
/// Records waiting to be sent at most (Java's `traceContextQueue`); past it a record is dropped
/// and counted, never waited for.
pub const QUEUE_CAPACITY: usize = 2048;

const FIELD: u8 = 1;
const END: u8 = 2;

/// What kind of message a record is of (Java `MessageType`, written as its ordinal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgType {
    /// `Normal_Msg`.
    Normal = 0,
    /// `Trans_Msg_Half`: a transaction's half message.
    TransHalf = 1,
    /// `Trans_msg_Commit`: every END_TRANSACTION record.
    TransCommit = 2,
    /// `Delay_Msg`: a delay level or a timer.
    Delay = 3,
    /// `Order_Msg` (Java never sets it).
    Order = 4,
}

/// How a consumer's handler call ended (Java `ConsumeReturnType`, written as its ordinal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsumeReturn {
    /// Consumed.
    Success = 0,
    /// Ran past the consume timeout.
    TimeOut = 1,
    /// Threw (panicked).
    Exception = 2,
    /// Returned nothing.
    ReturnNull = 3,
    /// Asked for a later retry.
    Failed = 4,
}

/// A transaction's outcome (Java `LocalTransactionState`, written by name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransactionState {
    /// `COMMIT_MESSAGE`.
    Commit,
    /// `ROLLBACK_MESSAGE`.
    Rollback,
    /// `UNKNOW` (sic).
    Unknown,
}

impl TransactionState {
    /// Java's name.
    pub const fn name(self) -> &'static str {
        match self {
            TransactionState::Commit => "COMMIT_MESSAGE",
            TransactionState::Rollback => "ROLLBACK_MESSAGE",
            TransactionState::Unknown => "UNKNOW",
        }
    }
}

/// The eight fields a [`Pub`] and an [`EndTransaction`] begin with: a message a producer
/// sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent<'a> {
    /// When the send (or the end) started, Unix ms.
    pub timestamp: i64,
    /// The send result's region (`MSG_REGION`, else [`DEFAULT_REGION`]).
    pub region: &'a str,
    /// The producer group (without namespace).
    pub group: &'a str,
    /// The topic (without namespace).
    pub topic: &'a str,
    /// The message id (`UNIQ_KEY`).
    pub msg_id: &'a str,
    /// Its tags.
    pub tags: Option<&'a str>,
    /// Its keys, space-separated.
    pub keys: Option<&'a str>,
    /// The broker address it went to (`ip:port`).
    pub store_host: &'a str,
}

/// A send (`Pub`, 14 fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pub<'a> {
    /// The message.
    pub sent: Sent<'a>,
    /// The body's length as sent (after compression).
    pub body_len: usize,
    /// The send's time, ms.
    pub cost_ms: u64,
    /// What kind of message.
    pub msg_type: MsgType,
    /// The broker's message id.
    pub offset_msg_id: &'a str,
    /// Stored with SEND_OK.
    pub success: bool,
}

/// A message handed to a consumer's handler (`SubBefore`, 8 fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubBefore<'a> {
    /// When the handler was called, Unix ms.
    pub timestamp: i64,
    /// The message's `MSG_REGION`.
    pub region: &'a str,
    /// The consumer group (without namespace).
    pub group: &'a str,
    /// The id pairing this record with its [`SubAfter`] (a new unique id per handler call).
    pub request_id: &'a str,
    /// The message id.
    pub msg_id: &'a str,
    /// Its reconsume times.
    pub retry_times: i32,
    /// Its keys.
    pub keys: Option<&'a str>,
}

/// How a consumer's handler call ended, per message (`SubAfter`, 9 fields; 7 on Java's
/// CLOUD channel, `local` `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubAfter<'a> {
    /// As its [`SubBefore`].
    pub request_id: &'a str,
    /// The message id.
    pub msg_id: &'a str,
    /// The call's time divided by its message count, ms.
    pub cost_ms: u64,
    /// Consumed.
    pub success: bool,
    /// Its keys.
    pub keys: Option<&'a str>,
    /// How the call ended.
    pub code: ConsumeReturn,
    /// When the call ended (Unix ms) and the consumer group: written on Java's LOCAL channel.
    pub local: Option<(i64, &'a str)>,
}

/// A transaction's END_TRANSACTION (`EndTransaction`, 13 fields; message type always
/// [`MsgType::TransCommit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndTransaction<'a> {
    /// The half message (its region: `MSG_REGION`, else [`DEFAULT_REGION`]).
    pub sent: Sent<'a>,
    /// The broker's transaction id.
    pub transaction_id: Option<&'a str>,
    /// The outcome.
    pub state: TransactionState,
    /// Answering the broker's check-back.
    pub from_check: bool,
}

/// A recall (`Recall`, 7 fields; 5.3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recall<'a> {
    /// Unix ms.
    pub timestamp: i64,
    /// The region.
    pub region: &'a str,
    /// The producer group.
    pub group: &'a str,
    /// The topic.
    pub topic: &'a str,
    /// The recalled message's id.
    pub msg_id: &'a str,
    /// The broker recalled it.
    pub success: bool,
}

/// One trace record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// A send.
    Pub(Pub<'a>),
    /// A message handed to a handler.
    SubBefore(SubBefore<'a>),
    /// A handler call's end.
    SubAfter(SubAfter<'a>),
    /// A transaction's end.
    EndTransaction(EndTransaction<'a>),
    /// A recall.
    Recall(Recall<'a>),
}

/// Writes a record's fields, [`FIELD`] between them.
struct Fields<'w, 'b> {
    w: &'w mut SliceWriter<'b>,
    first: bool,
}

impl Fields<'_, '_> {
    fn s(&mut self, v: &str) -> &mut Self {
        if !core::mem::take(&mut self.first) {
            self.w.put_u8(FIELD);
        }
        self.w.put(v.as_bytes());
        self
    }
    fn opt(&mut self, v: Option<&str>) -> &mut Self {
        self.s(v.unwrap_or("null"))
    }
    fn n(&mut self, v: i64) -> &mut Self {
        self.s("");
        self.w.put_i64_dec(v);
        self
    }
    fn u(&mut self, v: u64) -> &mut Self {
        self.n(i64::try_from(v).unwrap_or(i64::MAX))
    }
    fn b(&mut self, v: bool) -> &mut Self {
        self.s(if v { "true" } else { "false" })
    }
    fn sent(&mut self, kind: &str, m: &Sent<'_>) -> &mut Self {
        self.s(kind)
            .n(m.timestamp)
            .s(m.region)
            .s(m.group)
            .s(m.topic);
        self.s(m.msg_id).opt(m.tags).opt(m.keys).s(m.store_host)
    }
}

impl Record<'_> {
    /// Writes the record into `buf`; its length.
    ///
    /// # Errors
    /// [`BufferTooSmall`].
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let mut w = SliceWriter::new(buf);
        let mut f = Fields {
            w: &mut w,
            first: true,
        };
        match self {
            Record::Pub(p) => {
                f.sent("Pub", &p.sent);
                f.u(u64::try_from(p.body_len).unwrap_or(u64::MAX))
                    .u(p.cost_ms)
                    .n(p.msg_type as i64);
                f.s(p.offset_msg_id).b(p.success);
            }
            Record::SubBefore(s) => {
                f.s("SubBefore")
                    .n(s.timestamp)
                    .s(s.region)
                    .s(s.group)
                    .s(s.request_id);
                f.s(s.msg_id).n(i64::from(s.retry_times)).opt(s.keys);
            }
            Record::SubAfter(s) => {
                f.s("SubAfter")
                    .s(s.request_id)
                    .s(s.msg_id)
                    .u(s.cost_ms)
                    .b(s.success);
                f.opt(s.keys).n(s.code as i64);
                if let Some((timestamp, group)) = s.local {
                    f.n(timestamp).s(group);
                }
            }
            Record::EndTransaction(e) => {
                f.sent("EndTransaction", &e.sent);
                f.n(MsgType::TransCommit as i64)
                    .opt(e.transaction_id)
                    .s(e.state.name());
                f.b(e.from_check);
            }
            Record::Recall(r) => {
                f.s("Recall")
                    .n(r.timestamp)
                    .s(r.region)
                    .s(r.group)
                    .s(r.topic);
                f.s(r.msg_id).b(r.success);
            }
        }
        w.put_u8(END);
        w.finish()
    }

    /// The message id the record is about.
    pub fn msg_id(&self) -> &str {
        match self {
            Record::Pub(p) => p.sent.msg_id,
            Record::SubBefore(s) => s.msg_id,
            Record::SubAfter(s) => s.msg_id,
            Record::EndTransaction(e) => e.sent.msg_id,
            Record::Recall(r) => r.msg_id,
        }
    }

    /// The user keys of its message (space-separated).
    pub fn keys(&self) -> Option<&str> {
        match self {
            Record::Pub(p) => p.sent.keys,
            Record::SubBefore(s) => s.keys,
            Record::SubAfter(s) => s.keys,
            Record::EndTransaction(e) => e.sent.keys,
            Record::Recall(_) => None,
        }
    }
}

/// The KEYS of a trace message carrying `records` (Java `TraceTransferBean`): every record's
/// message id and its user keys, each once, space-separated, written into `buf`; its length.
/// (Java's order is a hash set's; any order finds the same messages.)
///
/// # Errors
/// [`BufferTooSmall`].
pub fn write_keys<'r>(
    records: impl Iterator<Item = &'r Record<'r>> + Clone,
    buf: &mut [u8],
) -> Result<usize, BufferTooSmall> {
    let mut w = SliceWriter::new(buf);
    let all = records.flat_map(|r| keys_of(r.msg_id(), r.keys()));
    for (i, key) in all.clone().enumerate() {
        if all.clone().take(i).any(|k| k == key) {
            continue;
        }
        if w.position() > 0 {
            w.put_u8(b' ');
        }
        w.put(key.as_bytes());
    }
    w.finish()
}

/// The keys one record gives its trace message: its message id, then each of its user keys
/// (space-separated `keys`), empty ones left out.
pub fn keys_of<'a>(
    msg_id: &'a str,
    keys: Option<&'a str>,
) -> impl Iterator<Item = &'a str> + Clone {
    let user = keys.unwrap_or("").split(' ');
    core::iter::once(msg_id)
        .chain(user)
        .filter(|k| !k.is_empty())
}

/// The records of one user topic gathered for one trace message (Java 5.3.3 groups a batch's
/// records by user topic): when the message must leave.
///
/// ```
/// use rmq_core::time::{Duration, Instant};
/// use rmq_core::trace::{BATCH_RECORDS, FLUSH_INTERVAL, Gather};
/// let t0 = Instant::from_millis(1_000);
/// let mut g = Gather::default();
/// assert!(!g.add(t0, 120));
/// assert_eq!(g.due(), Some(t0 + FLUSH_INTERVAL));
/// for _ in 1..BATCH_RECORDS - 1 {
///     assert!(!g.add(t0 + Duration::from_millis(10), 120));
/// }
/// assert!(g.add(t0 + Duration::from_millis(20), 120)); // the tenth: it leaves now
/// g.clear();
/// assert_eq!(g.due(), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gather {
    records: usize,
    bytes: usize,
    first: Option<Instant>,
}

impl Gather {
    /// Counts a record of `len` bytes gathered at `now`; `true` when the message must leave
    /// now ([`BATCH_RECORDS`] records, or [`MAX_BODY`] bytes: Java sends a body once it
    /// reaches that size, so one may pass it by a record).
    pub fn add(&mut self, now: Instant, len: usize) -> bool {
        self.records += 1;
        self.bytes = self.bytes.saturating_add(len);
        self.first.get_or_insert(now);
        self.records >= BATCH_RECORDS || self.bytes >= MAX_BODY
    }

    /// When the message must leave at the latest ([`FLUSH_INTERVAL`] after its first record);
    /// `None` with nothing gathered.
    pub fn due(&self) -> Option<Instant> {
        self.first.map(|f| f.saturating_add(FLUSH_INTERVAL))
    }

    /// Records gathered.
    pub fn records(&self) -> usize {
        self.records
    }

    /// The message left: nothing gathered.
    pub fn clear(&mut self) {
        *self = Gather::default();
    }
}

/// The first pause of trace sending after a failed trace send ([`Backoff`]).
pub const FIRST_PAUSE: Duration = Duration::from_millis(1_000);
/// The longest pause of trace sending ([`Backoff`]).
pub const MAX_PAUSE: Duration = Duration::from_millis(60_000);

/// Whether trace records are worth gathering now: after a failed trace send (a stopped,
/// missing or refused trace topic) none is, for [`FIRST_PAUSE`], doubling with each failure
/// after a pause up to [`MAX_PAUSE`]; a trace send that succeeds ends it. Records met in a
/// pause are dropped and counted by the runtime, so a trace topic that cannot take them costs
/// the traced client one failed trace send per pause instead of one per ten records. (Java
/// keeps sending, and so asks the NameServer for the missing topic's route for each.)
///
/// A failure of a send that left before the last pause ended (one already on its way, or
/// retried by the inner producer past the pause) changes nothing, nor does a success of one
/// that left before the last pause started.
///
/// ```
/// use rmq_core::time::{Duration, Instant};
/// use rmq_core::trace::{Backoff, FIRST_PAUSE};
/// let t0 = Instant::from_millis(10_000);
/// let mut b = Backoff::default();
/// assert!(b.allows(t0));
/// b.failed(t0, t0);
/// assert!(!b.allows(t0 + Duration::from_millis(999)));
/// assert!(b.allows(t0 + FIRST_PAUSE));
/// b.succeeded(t0 - Duration::from_millis(1)); // left before the pause: changes nothing
/// assert!(!b.allows(t0));
/// b.succeeded(t0);
/// assert!(b.allows(t0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The pauses' lengths: the reconnect back-off's doubling, from [`FIRST_PAUSE`] to
    /// [`MAX_PAUSE`].
    pauses: crate::producer::Backoff,
    /// When the last pause started (`None`: no pause since the last success).
    started: Option<Instant>,
    until: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            pauses: crate::producer::Backoff::new(FIRST_PAUSE, MAX_PAUSE),
            started: None,
            until: None,
        }
    }
}

impl Backoff {
    /// Whether a record met at `now` is gathered (not in a pause).
    pub fn allows(&self, now: Instant) -> bool {
        self.until.is_none_or(|u| now >= u)
    }

    /// A trace send that left at `sent` failed at `now`: a pause starts, twice the last one
    /// (at most [`MAX_PAUSE`]), unless the send left before the last pause ended; the pause
    /// started, if one did.
    pub fn failed(&mut self, sent: Instant, now: Instant) -> Option<Duration> {
        if self.until.is_some_and(|u| sent < u) {
            return None;
        }
        self.pauses.failed();
        let pause = self.pauses.delay();
        self.started = Some(now);
        self.until = Some(now.saturating_add(pause));
        Some(pause)
    }

    /// When the pause ends (`None`: no pause since the last success).
    pub fn until(&self) -> Option<Instant> {
        self.until
    }

    /// A trace send that left at `sent` succeeded: no pause, and the next failure pauses for
    /// [`FIRST_PAUSE`]; unless it left before the last pause started (it says nothing of the
    /// trace topic since).
    pub fn succeeded(&mut self, sent: Instant) {
        if self.started.is_some_and(|s| sent < s) {
            return;
        }
        *self = Backoff::default();
    }
}

#[cfg(test)]
mod tests;
