//! POP consumption (RocketMQ 5.x, docs/protocol/POP.md): a consumer asks a broker for messages
//! (POP_MESSAGE), which stay invisible to every other consumer of the group for the
//! `invisibleTime` it names, and acknowledges each one (ACK_MESSAGE) or moves its visibility
//! (CHANGE_MESSAGE_INVISIBLETIME). The broker commits the group's offset when it pops and
//! redelivers, through the group's POP retry topic, whatever is not acknowledged in time; so any
//! number of consumers can share a topic without rebalancing.
//!
//! This module decides what the requests carry and reads their answers; the requests go out
//! through the client's [`Client::call`] (`Features::CALLS`):
//! - [`Client::pop`] asks the topic's brokers in turn: the `nth` of one round of receiving
//!   (each broker once, starting where the caller says, so that successive rounds start at
//!   successive brokers and a broker with a backlog starves none; only the last one asked
//!   may hold the request while it has nothing);
//! - [`PopAnswer`] reads the answer and builds each message's receipt handle as the Java client
//!   does ([`PopAnswer::write_handle`], the `POP_CK` property);
//! - [`Client::pop_ack`] and [`Client::change_invisible`] name a message by its handle
//!   ([`PopHandle`]); [`PopHandle::write_changed`] is the handle after a visibility change.
//!
//! ```
//! use rmq_core::pop::PopHandle;
//! let h = PopHandle::parse("100 1733480000123 60000 3 0 broker-a 3 102").unwrap();
//! assert_eq!((h.broker_name, h.queue_id, h.offset), ("broker-a", 3, 102));
//! let mut topic = heapless::String::<64>::new();
//! h.real_topic("Orders", "g", &mut topic).unwrap();
//! assert_eq!(topic, "Orders");
//! let revived = PopHandle::parse("7 1733480000123 60000 3 1 broker-a 0 7").unwrap();
//! topic.clear();
//! revived.real_topic("Orders", "g", &mut topic).unwrap();
//! assert_eq!(topic, "%RETRY%g_Orders");
//! ```
use core::fmt::Write;

use crate::client::{Attached, Client, Lend};
use crate::message::StoredMessages;
use crate::message::keys::POP_CK;
use crate::message::validate::RETRY_TOPIC_PREFIX;
use crate::session::{CallError, Features, MAX_BROKER_NAME, Peer, Transmit};
use crate::store::Store;
use crate::time::{Duration, Instant};
use crate::wire::headers::{PopHandleRequestHeader, PopMessageRequestHeader};
use crate::wire::{CommandHeader, FieldStr, Frame, RequestCode, ResponseCode};

/// The most messages one pop returns (the broker refuses more).
pub const MAX_MESSAGES: u8 = 32;
/// How long past its poll time a pop's answer may take (Java: `pollTime` + 10 s).
pub const ANSWER_MARGIN: Duration = Duration::from_millis(10_000);
/// Java's `popInvisibleTime`: how long a message received by a listener stays invisible (60 s).
pub const INVISIBLE_TIME: Duration = Duration::from_millis(60_000);
/// How long Java waits before it pops again from a broker that answered POLLING_FULL (3 s).
pub const FULL_DELAY: Duration = Duration::from_millis(3_000);
/// Java's poll time: how long a broker holds a pop that finds nothing (15 s).
pub const POLL_TIME: Duration = Duration::from_millis(15_000);

/// What one pop asks for.
#[derive(Clone, Copy, Debug)]
pub struct PopRequest<'a> {
    /// The consumer group.
    pub group: &'a str,
    /// The topic.
    pub topic: &'a str,
    /// `TAG` or `SQL92`.
    pub expression_type: &'a str,
    /// The filter (`*` for every message).
    pub expression: &'a str,
    /// At most this many messages (1 to [`MAX_MESSAGES`]; others are clamped).
    pub max: u8,
    /// How long the messages stay invisible to the group's other pops (ms).
    pub invisible_ms: u64,
    /// A group without an offset starts at the topic's first message (else at its last one).
    pub from_first: bool,
    /// Orderly POP (docs/protocol/POP.md §9): a queue gives nothing more while a message of
    /// its last batch is unacknowledged and invisible, and unacknowledged messages come again
    /// from their own queue, in order ([`PopAnswer::reconsume_times`] counts their deliveries).
    pub order: bool,
}

/// Why a pop, an ack or a visibility change could not be asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PopError {
    /// The session knows no broker to ask (the topic's route, or the handle's broker): look the
    /// topic's route up and ask again.
    NoRoute,
    /// `nth` is past the topic's brokers: the round is over.
    RoundOver,
    /// Not a handle a broker wrote (fewer than eight fields, or one that is not a number).
    InvalidHandle,
    /// The request could not be made.
    Call(CallError),
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
    C: Attached,
> Client<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St, C>
{
    /// POP_MESSAGE `req` to the `nth` broker (0, 1, ...) of a round over the topic's route
    /// that starts at its broker `first` (taken modulo their number), for all of its queues (a [`Client::call`] answered within `wait` + [`ANSWER_MARGIN`]): the last broker
    /// of the round may hold the request up to `wait` while it has nothing, the others answer
    /// at once. The broker's clock times the request (`bornTime` 0: no clock skew can make
    /// it refuse the pop as late). Read its answer with [`PopAnswer::read`].
    ///
    /// # Errors
    /// [`PopError::NoRoute`], [`PopError::RoundOver`], [`PopError::Call`].
    #[allow(clippy::too_many_arguments)]
    pub fn pop<M: Lend + ?Sized>(
        &mut self,
        now: Instant,
        req: &PopRequest<'_>,
        (first, nth): (usize, usize),
        wait: Duration,
        buf: &mut [u8],
        lend: &M,
    ) -> Result<Transmit, PopError> {
        let s = self.session();
        let queues = s
            .topic_id(req.topic)
            .map(|t| s.subscribe_queues(t))
            .filter(|q| !q.is_empty())
            .ok_or(PopError::NoRoute)?;
        // The topic's brokers in route order, each once.
        let brokers = queues
            .iter()
            .enumerate()
            .filter(|&(i, q)| queues[..i].iter().all(|p| p.broker != q.broker))
            .map(|(_, q)| q.broker);
        let n = brokers.clone().count();
        if nth >= n {
            return Err(PopError::RoundOver);
        }
        let last = nth + 1 == n;
        let broker = brokers
            .clone()
            .nth((first % n + nth) % n)
            .ok_or(PopError::RoundOver)?;
        // (The session's own copy, of the same capacity: it fits.)
        let mut bname: heapless::String<{ MAX_BROKER_NAME }> = heapless::String::new();
        let _ = bname.push_str(s.broker_name(broker).unwrap_or(""));
        let ext = PopMessageRequestHeader {
            consumer_group: req.group,
            topic: req.topic,
            queue_id: -1,
            max_msg_nums: i32::from(req.max.clamp(1, MAX_MESSAGES)),
            invisible_time: i64::try_from(req.invisible_ms).unwrap_or(i64::MAX),
            poll_time: if last {
                i64::try_from(wait.millis()).unwrap_or(i64::MAX)
            } else {
                0
            },
            born_time: 0,
            init_mode: if req.from_first { 0 } else { 1 },
            exp_type: Some(req.expression_type),
            exp: Some(req.expression),
            order: Some(req.order),
            bname: Some(&bname),
        };
        let timeout = Duration::from_millis(ext.poll_time as u64).saturating_add(ANSWER_MARGIN);
        let (peer, code) = (Peer::Broker(broker), RequestCode::POP_MESSAGE);
        self.call(now, peer, code, Some(ext), &[], timeout, buf, lend)
            .map_err(PopError::Call)
    }

    /// ACK_MESSAGE of the message whose handle is `handle` (popped from `topic` by `group`),
    /// to the broker that popped it (a [`Client::call`]). The broker answers SUCCESS even for a
    /// handle whose invisible time has passed (the message comes again then); NO_MESSAGE
    /// (208) only when the offset is outside its queue.
    ///
    /// # Errors
    /// [`PopError`] but `RoundOver`.
    #[allow(clippy::too_many_arguments)]
    pub fn pop_ack<M: Lend + ?Sized>(
        &mut self,
        now: Instant,
        group: &str,
        topic: &str,
        handle: &str,
        timeout: Duration,
        buf: &mut [u8],
        lend: &M,
    ) -> Result<Transmit, PopError> {
        self.by_handle(now, (group, topic, handle), None, timeout, buf, lend)
    }

    /// CHANGE_MESSAGE_INVISIBLETIME: the message whose handle is `handle` stays invisible for
    /// `invisible_ms` from now, and then comes again unless acknowledged. Its answer gives the
    /// new handle ([`PopHandle::write_changed`]); the old one is spent.
    ///
    /// # Errors
    /// [`PopError`] but `RoundOver`.
    #[allow(clippy::too_many_arguments)]
    pub fn change_invisible<M: Lend + ?Sized>(
        &mut self,
        now: Instant,
        group: &str,
        topic: &str,
        handle: &str,
        invisible_ms: u64,
        timeout: Duration,
        buf: &mut [u8],
        lend: &M,
    ) -> Result<Transmit, PopError> {
        let ms = i64::try_from(invisible_ms).unwrap_or(i64::MAX);
        self.by_handle(now, (group, topic, handle), Some(ms), timeout, buf, lend)
    }

    /// CONSUMER_SEND_MSG_BACK of the message `m` (popped from `topic` by `group`, handle
    /// `handle`) with delay level -1: the broker puts a copy in `%DLQ%<group>` (its
    /// `RETRY_TOPIC` property: the topic the copy was in, for a revived message the POP retry
    /// topic). What [`retry`] says of a message consumed too often; acknowledge it once this is
    /// answered SUCCESS. (The broker's own revive never gives up
    /// on a POP message; the 5.x proxy sends it to the dead-letter queue this way.)
    ///
    /// # Errors
    /// [`PopError`] but `RoundOver`.
    #[allow(clippy::too_many_arguments)]
    pub fn pop_dead_letter<M: Lend + ?Sized>(
        &mut self,
        now: Instant,
        (group, topic, handle): (&str, &str, &str),
        m: &DeadLetter<'_>,
        timeout: Duration,
        buf: &mut [u8],
        lend: &M,
    ) -> Result<Transmit, PopError> {
        let (h, peer) = self.handle_peer(handle)?;
        let ext = crate::wire::headers::ConsumerSendMsgBackRequestHeader {
            offset: m.commit_log_offset,
            group,
            delay_level: -1,
            origin_msg_id: Some(m.msg_id),
            origin_topic: Some(topic),
            unit_mode: false,
            max_reconsume_times: Some(m.max_reconsume_times),
            bname: Some(h.broker_name),
        };
        let code = RequestCode::CONSUMER_SEND_MSG_BACK;
        self.call(now, peer, code, Some(ext), &[], timeout, buf, lend)
            .map_err(PopError::Call)
    }

    fn by_handle<M: Lend + ?Sized>(
        &mut self,
        now: Instant,
        (group, topic, handle): (&str, &str, &str),
        invisible_time: Option<i64>,
        timeout: Duration,
        buf: &mut [u8],
        lend: &M,
    ) -> Result<Transmit, PopError> {
        let (h, peer) = self.handle_peer(handle)?;
        let mut real: heapless::String<{ REAL_TOPIC_LEN }> = heapless::String::new();
        h.real_topic(topic, group, &mut real)
            .map_err(|_| PopError::InvalidHandle)?;
        let ext = PopHandleRequestHeader {
            consumer_group: group,
            topic: &real,
            queue_id: h.queue_id,
            extra_info: handle,
            offset: h.offset,
            invisible_time,
            bname: Some(h.broker_name),
        };
        let code = match invisible_time {
            Some(_) => RequestCode::CHANGE_MESSAGE_INVISIBLETIME,
            None => RequestCode::ACK_MESSAGE,
        };
        self.call(now, peer, code, Some(ext), &[], timeout, buf, lend)
            .map_err(PopError::Call)
    }

    /// `handle` read, and the broker it names if the session knows its address.
    fn handle_peer<'h>(&self, handle: &'h str) -> Result<(PopHandle<'h>, Peer), PopError> {
        let h = PopHandle::parse(handle).ok_or(PopError::InvalidHandle)?;
        let s = self.session();
        let broker = s
            .find_broker(h.broker_name)
            .filter(|b| s.broker_addr(*b).is_some())
            .ok_or(PopError::NoRoute)?;
        Ok((h, Peer::Broker(broker)))
    }
}

/// The message [`Client::pop_dead_letter`] sends to the dead-letter queue.
#[derive(Clone, Copy, Debug)]
pub struct DeadLetter<'a> {
    /// Its commit-log offset (where the broker finds it).
    pub commit_log_offset: i64,
    /// Its message id.
    pub msg_id: &'a str,
    /// The consumer's limit (the broker's dead-letter decision is -1's anyway).
    pub max_reconsume_times: i32,
}

/// What follows a failed consumption of a popped message (Java's
/// `ConsumeMessagePopConcurrentlyService`, docs/protocol/POP.md §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Make it visible again after this long ([`Client::change_invisible`]).
    After(Duration),
    /// It was delivered `max_reconsume_times` times, or the application asked: to the
    /// dead-letter queue ([`Client::pop_dead_letter`]), then acknowledge it.
    DeadLetter,
}

/// Java's POP retry delays (s), by delay level or delivery count.
pub const RETRY_DELAYS_S: [u64; 16] = [
    10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
];

/// What follows a failed consumption of a message delivered `reconsume_times` times before,
/// for which the application asked `delay_level` (0: the next delay by its count, -1: the
/// dead-letter queue at once), with the consumer's `max_reconsume_times`. Java's push consumer
/// drops (acknowledges) a message past the limit; rmq keeps it in the dead-letter queue, as
/// the 5.x proxy does.
///
/// ```
/// use rmq_core::pop::{retry, Retry};
/// use rmq_core::time::Duration;
/// assert_eq!(retry(0, 0, 16), Retry::After(Duration::from_secs(10)));
/// assert_eq!(retry(2, 0, 16), Retry::After(Duration::from_secs(60)));
/// assert_eq!(retry(0, 3, 16), Retry::After(Duration::from_secs(120)));
/// assert_eq!(retry(16, 0, 16), Retry::DeadLetter);
/// assert_eq!(retry(0, -1, 16), Retry::DeadLetter);
/// ```
pub fn retry(reconsume_times: i32, delay_level: i32, max_reconsume_times: i32) -> Retry {
    if delay_level < 0 || reconsume_times >= max_reconsume_times {
        return Retry::DeadLetter;
    }
    let i = if delay_level > 0 {
        delay_level
    } else {
        reconsume_times
    };
    let i = usize::try_from(i)
        .unwrap_or(0)
        .min(RETRY_DELAYS_S.len() - 1);
    Retry::After(Duration::from_secs(RETRY_DELAYS_S[i]))
}

/// The longest topic a handle can name: the POP retry topic of the longest group and topic.
const REAL_TOPIC_LEN: usize =
    RETRY_TOPIC_PREFIX.len() + crate::session::MAX_GROUP_LEN + 1 + crate::session::MAX_TOPIC_LEN;

/// A popped message's receipt handle (the `POP_CK` text: eight fields, one space apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PopHandle<'a> {
    /// Where the broker's checkpoint for the pop starts in the queue.
    pub ck_offset: i64,
    /// When the broker popped it (its clock, ms).
    pub pop_time: i64,
    /// How long it stays invisible from `pop_time` (ms).
    pub invisible_time: i64,
    /// The revive queue of the checkpoint (999: an orderly pop).
    pub revive_qid: i32,
    /// 0: the topic's own queue; 1: the group's v1 POP retry topic (`%RETRY%<group>_<topic>`);
    /// 2: v2 (`%RETRY%<group>+<topic>`).
    pub retry: u8,
    /// The broker that popped it.
    pub broker_name: &'a str,
    /// Its queue (in the retry topic when `retry` is not 0).
    pub queue_id: i32,
    /// Its offset in that queue.
    pub offset: i64,
}

impl<'a> PopHandle<'a> {
    /// Reads a handle; `None` when it is not one (Java reads the same fields by index).
    pub fn parse(text: &'a str) -> Option<Self> {
        let mut f = text.split(' ');
        let mut next = || f.next();
        let ck_offset = next()?.parse().ok()?;
        let pop_time = next()?.parse().ok()?;
        let invisible_time = next()?.parse().ok()?;
        let revive_qid = next()?.parse().ok()?;
        let retry = next()?.parse().ok()?;
        let broker_name = next()?;
        let queue_id = next()?.parse().ok()?;
        let offset = next()?.parse().ok()?;
        Some(PopHandle {
            ck_offset,
            pop_time,
            invisible_time,
            revive_qid,
            retry,
            broker_name,
            queue_id,
            offset,
        })
    }

    /// The topic the message is in, for a message popped from `topic` by `group`: `topic`, or
    /// the group's POP retry topic for a revived one (Java `ExtraInfoUtil.getRealTopic`).
    ///
    /// # Errors
    /// `out` is too small.
    pub fn real_topic(&self, topic: &str, group: &str, out: &mut impl Write) -> core::fmt::Result {
        match self.retry {
            1 => write!(out, "{RETRY_TOPIC_PREFIX}{group}_{topic}"),
            2 => write!(out, "{RETRY_TOPIC_PREFIX}{group}+{topic}"),
            _ => out.write_str(topic),
        }
    }

    /// The handle after a visibility change the broker answered with `changed` (Java
    /// `MQClientAPIImpl.changeInvisibleTimeAsync`): its checkpoint now starts at the message.
    ///
    /// # Errors
    /// `out` is too small.
    pub fn write_changed(&self, changed: &Changed, out: &mut impl Write) -> core::fmt::Result {
        let h = PopHandle {
            ck_offset: self.offset,
            pop_time: changed.pop_time,
            invisible_time: changed.invisible_time,
            revive_qid: changed.revive_qid,
            ..*self
        };
        h.write(out)
    }

    fn write(&self, out: &mut impl Write) -> core::fmt::Result {
        let h = self;
        write!(
            out,
            "{} {} {} {} {} {} {} {}",
            h.ck_offset,
            h.pop_time,
            h.invisible_time,
            h.revive_qid,
            h.retry,
            h.broker_name,
            h.queue_id,
            h.offset
        )
    }
}

/// What a broker's answer to CHANGE_MESSAGE_INVISIBLETIME says (on SUCCESS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Changed {
    /// The new checkpoint's pop time.
    pub pop_time: i64,
    /// The new invisible time.
    pub invisible_time: i64,
    /// The revive queue.
    pub revive_qid: i32,
}

/// How a pop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PopStatus {
    /// Messages came ([`PopAnswer::messages`]).
    Found,
    /// Nothing to pop now (POLLING_TIMEOUT, PULL_NOT_FOUND): ask again.
    Nothing,
    /// The broker holds too many waiting pops (POLLING_FULL): ask it again after
    /// [`FULL_DELAY`] (Java's wait).
    Full,
    /// Refused with this code (REQUEST_CODE_NOT_SUPPORTED 3: a broker before 5.0, which has
    /// no POP; SYSTEM_ERROR 1: its timer wheel is off; TOPIC_NOT_EXIST 17, NO_PERMISSION 16,
    /// ...): the remark says why.
    Refused(i32),
}

/// The most brokers one subscription's round asks (more than any route names).
const MAX_ROUND: usize = 256;

/// Java's `pullTimeDelayMillsWhenException`: how long a receive whose broker failed (lost
/// connection, no answer in time, no route) waits before the next one (3 s).
pub const FAILED_DELAY: Duration = Duration::from_millis(3_000);

/// One receive over a consumer's subscriptions (Java's pop loop): which subscription and which
/// broker each pop asks and how long it may wait, from what the earlier pops heard. Each
/// subscription's brokers are asked in turn ([`Client::pop`]'s round); only the last broker
/// of the last subscription may hold the request (up to `suspend`) while it has nothing. A
/// broker that fails is passed over, not the end of the receive; the first messages found
/// end it.
///
/// ```
/// use rmq_core::pop::{Ask, FAILED_DELAY, Heard, Receive};
/// use rmq_core::time::Duration;
/// let suspend = Duration::from_secs(15);
/// // Two subscriptions; this receive starts with the second (`first` 3).
/// let mut r = Receive::new(2, 3, suspend);
/// assert_eq!(r.next(), Some(Ask { subscription: 1, brokers: (3, 0), wait: Duration::ZERO }));
/// r.heard(Heard::Failed); // its first broker is down: the next one
/// assert_eq!(r.next(), Some(Ask { subscription: 1, brokers: (3, 1), wait: Duration::ZERO }));
/// r.heard(Heard::RoundOver); // no third broker: the next subscription
/// assert_eq!(r.next(), Some(Ask { subscription: 0, brokers: (3, 0), wait: suspend }));
/// r.heard(Heard::Nothing);
/// r.heard(Heard::RoundOver);
/// assert_eq!(r.next(), None);
/// assert!(r.answered());
/// assert_eq!(r.pause(), Some(FAILED_DELAY));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receive {
    subscriptions: usize,
    first: usize,
    suspend: Duration,
    /// Subscriptions done (the current one is `(first + done) % subscriptions`).
    done: usize,
    /// The current subscription's next broker in its round.
    nth: usize,
    answered: bool,
    pause: Option<Duration>,
}

/// The next pop of a [`Receive`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask {
    /// Which subscription (an index into the consumer's).
    pub subscription: usize,
    /// `(first, nth)` for [`Client::pop`].
    pub brokers: (usize, usize),
    /// How long the broker may hold it ([`Client::pop`]'s `wait`).
    pub wait: Duration,
}

/// What a pop of a [`Receive`] heard (messages found end the receive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heard {
    /// [`PopStatus::Nothing`].
    Nothing,
    /// [`PopStatus::Full`]: the receive waits [`FULL_DELAY`] at its end.
    Full,
    /// The broker could not be asked or did not answer (lost connection, timeout): the
    /// receive waits [`FAILED_DELAY`] at its end.
    Failed,
    /// [`PopError::RoundOver`]: every broker of the subscription was asked.
    RoundOver,
    /// [`PopError::NoRoute`] after a lookup: the subscription is passed over (as `Failed`).
    NoRoute,
}

impl Receive {
    /// A receive over `subscriptions` subscriptions, starting with subscription `first`
    /// (modulo their number) and, in each, at its broker `first` (so that successive receives
    /// start at successive ones), the last one asked waiting up to `suspend`.
    pub fn new(subscriptions: usize, first: usize, suspend: Duration) -> Self {
        Receive {
            subscriptions,
            first,
            suspend,
            done: 0,
            nth: 0,
            answered: false,
            pause: None,
        }
    }

    /// The next pop to make; `None` once every subscription's round is over.
    pub fn next(&self) -> Option<Ask> {
        if self.done >= self.subscriptions {
            return None;
        }
        let last = self.done + 1 == self.subscriptions;
        Some(Ask {
            subscription: (self.first % self.subscriptions + self.done) % self.subscriptions,
            brokers: (self.first, self.nth),
            wait: if last { self.suspend } else { Duration::ZERO },
        })
    }

    /// What the last pop ([`Receive::next`]) heard.
    pub fn heard(&mut self, h: Heard) {
        match h {
            Heard::Nothing | Heard::Full => self.answered = true,
            Heard::Failed | Heard::RoundOver | Heard::NoRoute => {}
        }
        let pause = match h {
            Heard::Full => FULL_DELAY,
            Heard::Failed | Heard::NoRoute => FAILED_DELAY,
            Heard::Nothing | Heard::RoundOver => Duration::ZERO,
        };
        if pause > Duration::ZERO {
            self.pause = Some(self.pause.map_or(pause, |p| p.max(pause)));
        }
        match h {
            // (A failure the client's round never saw, e.g. of a stopped runtime, ends the
            // round after as many brokers as a route can name.)
            Heard::Nothing | Heard::Full | Heard::Failed if self.nth + 1 < MAX_ROUND => {
                self.nth += 1;
            }
            _ => (self.done, self.nth) = (self.done + 1, 0),
        }
    }

    /// Whether some broker answered (nothing, or full): when none did, the receive's failure
    /// is the caller's to report.
    pub fn answered(&self) -> bool {
        self.answered
    }

    /// How long to wait after a receive that found nothing: [`FULL_DELAY`] after a full
    /// broker, [`FAILED_DELAY`] after a failed one; `None` when every broker simply had
    /// nothing (the last one held the request already).
    pub fn pause(&self) -> Option<Duration> {
        self.pause
    }
}

/// A broker's answer to POP_MESSAGE or CHANGE_MESSAGE_INVISIBLETIME, read from its frame.
#[derive(Clone, Copy, Debug)]
pub struct PopAnswer<'a> {
    /// The response code.
    pub code: i32,
    /// The broker's remark (JSON-escaped).
    pub remark: Option<FieldStr<'a>>,
    /// When the broker popped (its clock, ms).
    pub pop_time: i64,
    /// The invisible time the broker applied (ms).
    pub invisible_time: i64,
    /// The checkpoint's revive queue.
    pub revive_qid: i32,
    /// How many messages were left in the queues it read.
    pub rest: i64,
    start_offsets: &'a str,
    order_counts: &'a str,
    body: &'a [u8],
}

impl<'a> PopAnswer<'a> {
    /// The answer in response `frame`; `None` when the frame does not decode.
    pub fn read(frame: &'a [u8]) -> Option<Self> {
        let f = Frame::new_checked(frame).ok()?;
        let h = CommandHeader::parse(&f).ok()?;
        let text = |k: &str| h.get(k).and_then(|v| v.as_str());
        let int = |k: &str| text(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        Some(PopAnswer {
            code: h.code(),
            remark: h.remark(),
            pop_time: int("popTime"),
            invisible_time: int("invisibleTime"),
            revive_qid: i32::try_from(int("reviveQid")).unwrap_or(0),
            rest: int("restNum"),
            start_offsets: text("startOffsetInfo").unwrap_or(""),
            order_counts: text("orderCountInfo").unwrap_or(""),
            body: f.body_ref(),
        })
    }

    /// How the pop ended (Java `MQClientAPIImpl.processPopResponse`).
    pub fn status(&self) -> PopStatus {
        match ResponseCode(self.code) {
            ResponseCode::SUCCESS => PopStatus::Found,
            ResponseCode::POLLING_TIMEOUT | ResponseCode::PULL_NOT_FOUND => PopStatus::Nothing,
            ResponseCode::POLLING_FULL => PopStatus::Full,
            _ => PopStatus::Refused(self.code),
        }
    }

    /// The popped messages (empty unless [`PopStatus::Found`]).
    pub fn messages(&self) -> StoredMessages<'a> {
        let body = if self.code == ResponseCode::SUCCESS.0 {
            self.body
        } else {
            &[]
        };
        crate::message::decode_stored(body)
    }

    /// For an orderly pop: how many times message `m` was delivered before (the broker's
    /// `orderCountInfo`: the message's own count, else its queue's when above 0), which
    /// replaces its stored `reconsumeTimes` as in the Java client; `None` when the answer says
    /// nothing of it.
    pub fn reconsume_times(&self, m: &crate::message::StoredMessage<'_>) -> Option<i32> {
        let retry = retry_flag(m.topic);
        let mut own = None;
        let mut queue = None;
        for e in self.order_counts.split(';') {
            let mut f = e.split(' ');
            let (Some(flag), Some(key), Some(count)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let Ok(count) = count.parse::<i32>() else {
                continue;
            };
            if flag.parse() != Ok(retry) {
                continue;
            }
            match key.strip_prefix("qo").and_then(|k| k.split_once('%')) {
                Some((q, o)) if q.parse() == Ok(m.queue_id) && o.parse() == Ok(m.queue_offset) => {
                    own = Some(count);
                }
                Some(_) => {}
                None if key.parse() == Ok(m.queue_id) && count > 0 => queue = Some(count),
                None => {}
            }
        }
        own.or(queue)
    }

    /// What a visibility change's answer says.
    pub fn changed(&self) -> Changed {
        Changed {
            pop_time: self.pop_time,
            invisible_time: self.invisible_time,
            revive_qid: self.revive_qid,
        }
    }

    /// Writes the receipt handle of message `m` of this answer from `broker_name`: its
    /// `POP_CK` property when the broker wrote one (a revived message), else built from the
    /// answer as Java's `processPopResponse` does (the checkpoint's start in the message's
    /// queue from `startOffsetInfo`; a broker that sends none: the offset of the first message
    /// of that queue in the answer).
    ///
    /// # Errors
    /// `out` is too small.
    pub fn write_handle(
        &self,
        m: &crate::message::StoredMessage<'_>,
        broker_name: &str,
        out: &mut impl Write,
    ) -> core::fmt::Result {
        if let Some(ck) = m.properties().ok().and_then(|p| p.get(POP_CK)) {
            return out.write_str(ck);
        }
        let retry = retry_flag(m.topic);
        let listed = self.start_offsets.split(';').find_map(|e| {
            let mut f = e.split(' ');
            let (flag, qid, off) = (f.next()?, f.next()?, f.next()?);
            let hit = flag.parse() == Ok(retry) && qid.parse() == Ok(m.queue_id);
            hit.then(|| off.parse().ok()).flatten()
        });
        let first = || {
            self.messages()
                .map_while(Result::ok)
                .find(|o| o.topic == m.topic && o.queue_id == m.queue_id)
                .map(|o| o.queue_offset)
        };
        let h = PopHandle {
            ck_offset: listed.or_else(first).unwrap_or(m.queue_offset),
            pop_time: self.pop_time,
            invisible_time: self.invisible_time,
            revive_qid: self.revive_qid,
            retry,
            broker_name,
            queue_id: m.queue_id,
            offset: m.queue_offset,
        };
        h.write(out)
    }
}

/// Which topic a popped message's topic is (Java `ExtraInfoUtil.getRetry`).
fn retry_flag(topic: &str) -> u8 {
    match topic.strip_prefix(RETRY_TOPIC_PREFIX) {
        Some(rest) if rest.contains('+') => 2,
        Some(_) => 1,
        None => 0,
    }
}

#[cfg(test)]
mod tests;
