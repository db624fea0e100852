//! The sending side of a heap-free runtime (a gateway): one message, or one batch, at a time,
//! encoded into a buffer the caller lends. It encodes the message's properties and body (the
//! core's validation and batch rules), hands the request to the session, lends the session the
//! properties and body while the frame is written ([`Lend`]), and turns the session's
//! `SendDone` into a [`Completion`] with the message id. rmq-smoltcp's producer and client (over
//! smoltcp sockets, or any async stack) drive it; rmq-std keeps many sends in flight on the
//! heap instead.
//!
//! ```
//! use rmq_core::gateway::{Message, Sender};
//! use rmq_core::retry::{RetryConfig, SendMode};
//! let mut buf = [0u8; 512];
//! let s = Sender::new(Some("TopicA"), RetryConfig::java49(SendMode::Sync), [10, 0, 0, 2], &mut buf, 7);
//! assert!(s.can_send(false));
//! let _ = Message { body: b"21.5C", tags: Some("temp"), ..Default::default() };
//! ```

use core::fmt;

use heapless::String;

use crate::message::UniqKeyGenerator;
use crate::message::batch_rules::BatchRules;
use crate::message::validate::{DEFAULT_MAX_MESSAGE_SIZE, ValidationError};
use crate::producer::{
    MessageError, MessageFields, encode_batch_record, encode_message_properties,
};
use crate::retry::{RetryConfig, SendMode, SendStatus};
use crate::session::{
    self, MAX_BROKER_NAME, MAX_MSG_ID, Outbound, SendArgs, SendFailure, SessionApi, TopicId,
};
use crate::time::{Instant, WallClock};

/// A refused message's error.
fn refused(e: MessageError) -> SubmitError {
    match e {
        MessageError::BufferTooSmall => SubmitError::TooLarge,
        MessageError::Invalid(v) => SubmitError::Invalid(v),
    }
}

/// Lends the session the properties of the one message in the message buffer (and a
/// consumer's heartbeat body, when there is one).
pub struct Lend<'m> {
    /// The message's encoded properties ([`Sender::parts`]).
    pub props: &'m str,
    /// A consuming gateway's heartbeat body.
    pub heartbeat: Option<&'m [u8]>,
    /// The wall clock and `now`, for the running info's timestamps.
    pub clock: (&'m WallClock, Instant),
}

impl crate::client::Lend for Lend<'_> {}

impl Outbound for Lend<'_> {
    fn properties(&self, _: session::SendId) -> &str {
        self.props
    }

    fn heartbeat_body(&self, buf: &mut [u8]) -> Option<usize> {
        let h = self.heartbeat?;
        buf.get_mut(..h.len())?.copy_from_slice(h);
        Some(h.len())
    }

    fn unix_millis(&self) -> i64 {
        self.clock.0.unix_millis(self.clock.1)
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

/// The sending side (see the module docs).
#[derive(Debug)]
pub struct Sender<'a, 'b> {
    /// The topic published to (`None`: this client does not publish).
    topic_name: Option<&'a str>,
    retry: RetryConfig,
    msg: &'b mut [u8],
    topic: Option<TopicId>,
    job: Option<Job>,
    done: Option<Completion>,
    uniq: UniqKeyGenerator,
    clock: WallClock,
}

impl<'a, 'b> Sender<'a, 'b> {
    /// A sender to `topic_name` (`None`: it refuses every send) with `retry`, encoding into
    /// `msg`; `client_ip` and `seed` make the UNIQ_KEYs.
    pub fn new(
        topic_name: Option<&'a str>,
        retry: RetryConfig,
        client_ip: [u8; 4],
        msg: &'b mut [u8],
        seed: u32,
    ) -> Self {
        let ip = core::net::IpAddr::V4(core::net::Ipv4Addr::from(client_ip));
        Sender {
            topic_name,
            retry,
            msg,
            topic: None,
            job: None,
            done: None,
            uniq: UniqKeyGenerator::new(ip, seed >> 16, seed),
            clock: WallClock::default(),
        }
    }

    /// Lends the message buffer to `write` (which returns the bytes it wrote) and keeps those
    /// bytes out of it for good: the consumer's heartbeat goes at its start. `None` (and the
    /// buffer unchanged) when `write` fails.
    pub fn take_front(
        &mut self,
        write: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> Option<&'b [u8]> {
        let n = write(self.msg)?.min(self.msg.len());
        let (front, rest) = core::mem::take(&mut self.msg).split_at_mut(n);
        self.msg = rest;
        Some(front)
    }

    /// Whether it has a topic to publish to.
    pub fn has_topic(&self) -> bool {
        self.topic_name.is_some()
    }

    /// Tells it that `now` is `unix_millis` wall-clock time (for `bornTimestamp` and UNIQ_KEY).
    pub fn set_unix_time(&mut self, now: Instant, unix_millis: i64) {
        self.clock.set(now, unix_millis);
    }

    /// The wall clock (Unix ms from 0 until [`Sender::set_unix_time`]).
    pub fn clock(&self) -> &WallClock {
        &self.clock
    }

    /// Whether a route of the publish topic with at least one writable queue is known.
    pub fn has_route<S: SessionApi>(&self, session: &S) -> bool {
        self.topic
            .is_some_and(|t| !session.publish_queues(t).is_empty())
    }

    /// Whether a send would be accepted (`writing_body`: a frame still reads the buffer).
    pub fn can_send(&self, writing_body: bool) -> bool {
        self.job.is_none() && self.done.is_none() && !writing_body
    }

    /// Whether a completion waits to be taken (the async runtime waits for it).
    pub fn completed(&self) -> bool {
        self.done.is_some()
    }

    /// The end of the last send, once.
    pub fn take_completion(&mut self) -> Option<Completion> {
        self.done.take()
    }

    /// The publish topic's session id, registered (and looked up) at the first call.
    pub fn topic_id<S: SessionApi>(
        &mut self,
        now: Instant,
        session: &mut S,
    ) -> Result<TopicId, SubmitError> {
        if let Some(t) = self.topic {
            return Ok(t);
        }
        let name = self.topic_name.ok_or(SubmitError::NoTopic)?;
        let t = session.topic(now, name).map_err(SubmitError::Session)?;
        self.topic = Some(t);
        Ok(t)
    }

    /// The request being sent: its properties, and the buffer from its body on.
    pub fn parts(&self) -> (&str, &[u8]) {
        let props_len = self.job.as_ref().map_or(0, |j| j.props_len);
        let (props, body) = self.msg.split_at(props_len.min(self.msg.len()));
        (core::str::from_utf8(props).unwrap_or(""), body)
    }

    /// One message (sync or oneway).
    pub fn single<S: SessionApi>(
        &mut self,
        now: Instant,
        session: &mut S,
        msg: &Message<'_>,
        mode: SendMode,
        writing_body: bool,
    ) -> Result<SendId, SubmitError> {
        if !self.can_send(writing_body) {
            return Err(SubmitError::Busy);
        }
        let topic = self.topic_name.ok_or(SubmitError::NoTopic)?;
        let born = self.clock.unix_millis(now);
        let hex = self.uniq.next_id_at(born, 0).to_hex();
        let fields = MessageFields::new(msg.tags, msg.keys);
        let props_len = encode_message_properties(
            topic,
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
        self.submit(now, session, job, msg.body.len(), msg.flag, mode, false)
    }

    /// Several messages in one SEND_BATCH_MESSAGE request.
    pub fn batch<S: SessionApi>(
        &mut self,
        now: Instant,
        session: &mut S,
        msgs: &[Message<'_>],
        writing_body: bool,
    ) -> Result<SendId, SubmitError> {
        if !self.can_send(writing_body) {
            return Err(SubmitError::Busy);
        }
        let topic = self.topic_name.ok_or(SubmitError::NoTopic)?;
        let count = u16::try_from(msgs.len()).map_err(|_| SubmitError::TooLarge)?;
        if count == 0 {
            return Err(SubmitError::EmptyBatch);
        }
        let born = self.clock.unix_millis(now);
        // The core's batch rules (every message here shares the topic and waits for the
        // store); the request's own properties are WAIT only.
        let rules = BatchRules::new(topic, true).map_err(SubmitError::Batch)?;
        let props_len = rules
            .write_properties(self.msg)
            .map_err(|_| SubmitError::TooLarge)?;
        let (mut end, mut first) = (props_len, String::new());
        for m in msgs {
            let hex = self.uniq.next_id_at(born, 0).to_hex();
            if first.is_empty() {
                let _ = first.push_str(hex.as_str());
            }
            let rest = self.msg.get_mut(end..).ok_or(SubmitError::TooLarge)?;
            let fields = MessageFields::new(m.tags, m.keys);
            end += encode_batch_record(
                topic,
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
        self.submit(now, session, job, end - props_len, 0, SendMode::Sync, true)
    }

    /// Hands the encoded request (properties and body in the message buffer) to the session.
    #[allow(clippy::too_many_arguments)]
    fn submit<S: SessionApi>(
        &mut self,
        now: Instant,
        session: &mut S,
        job: Job,
        body_len: usize,
        flag: i32,
        mode: SendMode,
        batch: bool,
    ) -> Result<SendId, SubmitError> {
        let topic = self.topic_id(now, session)?;
        let mut retry = self.retry;
        retry.mode = mode;
        let mut args = SendArgs::new(retry, body_len, self.clock.unix_millis(now));
        args.flag = flag;
        args.batch = batch;
        let id = session
            .send(now, topic, &args)
            .map_err(SubmitError::Session)?;
        #[cfg(feature = "defmt")]
        defmt::debug!("send {=u32} queued ({=usize} body bytes)", id.0, body_len);
        self.job = Some(job);
        Ok(SendId(id.0))
    }

    /// The session's `SendDone` of send `id`: the completion, with the message id.
    pub fn done<S: SessionApi>(
        &mut self,
        session: &S,
        id: session::SendId,
        result: Result<session::SendReceipt, SendFailure>,
    ) {
        let Some(job) = self.job.take() else { return };
        let result = match result {
            Ok(r) => {
                let mut broker = String::new();
                let _ = broker.push_str(session.broker_name(r.broker).unwrap_or(""));
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
        #[cfg(feature = "defmt")]
        defmt::debug!("send {=u32} done, ok={=bool}", id.0, result.is_ok());
        self.done = Some(Completion {
            id: SendId(id.0),
            result,
        });
    }
}

/// A message to publish.
#[derive(Clone, Copy, Debug, Default)]
pub struct Message<'m> {
    /// Body bytes.
    pub body: &'m [u8],
    /// `TAGS` property.
    pub tags: Option<&'m str>,
    /// `KEYS` property.
    pub keys: Option<&'m str>,
    /// Application flag (stored verbatim).
    pub flag: i32,
}

/// Identifies a send in [`Completion`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SendId(pub u32);

/// A stored message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendReceipt {
    /// Store status.
    pub status: SendStatus,
    /// Broker name the message went to.
    pub broker: heapless::String<MAX_BROKER_NAME>,
    /// Queue id written (from the response header; the chosen queue for oneway).
    pub queue_id: i32,
    /// Consume-queue offset (`None` for oneway).
    pub queue_offset: Option<i64>,
    /// offsetMsgId (empty for oneway).
    pub offset_msg_id: heapless::String<MAX_MSG_ID>,
    /// The UNIQ_KEY (client message id), upper-case hex; of the first message of a batch.
    pub msg_id: heapless::String<32>,
    /// Messages stored: 1, or a batch's count ([`Sender::batch`]).
    pub messages: u16,
    /// Attempts made.
    pub attempts: u8,
}

impl SendReceipt {
    /// The msgId (UNIQ_KEY) of message `i` of a batch (`i` = 0 is [`SendReceipt::msg_id`]):
    /// the ids of one batch are generated in a row and differ only in their counter.
    /// `None` past the batch.
    pub fn msg_id_of(&self, i: u16) -> Option<heapless::String<32>> {
        if i >= self.messages {
            return None;
        }
        let first = crate::message::UniqKey::parse(&self.msg_id).ok()?;
        let id = first.with_counter(first.counter().wrapping_add(i)).to_hex();
        let mut s = heapless::String::new();
        s.push_str(id.as_str()).ok()?;
        Some(s)
    }
}

/// The end of a send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Which send.
    pub id: SendId,
    /// Its result.
    pub result: Result<SendReceipt, SendFailure>,
}

/// [`Sender`] refused the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SubmitError {
    /// A send is in flight, a frame is half written or a completion was not taken yet.
    Busy,
    /// Properties plus body do not fit the message buffer.
    TooLarge,
    /// The message fails the client-side checks every rmq runtime applies (topic, empty
    /// body, a tag or key with a separator character, ...): nothing was sent.
    Invalid(ValidationError),
    /// The core session refused it (e.g. a topic name that does not fit).
    Session(crate::session::SubmitError),
    /// A batch of no message.
    EmptyBatch,
    /// The sender has no topic to publish to (a consuming gateway configured without one).
    NoTopic,
    /// The batch breaks the core's batch rules (a `%RETRY%` topic).
    Batch(crate::message::batch_rules::RuleError),
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubmitError::Busy => f.write_str("a send is in flight"),
            SubmitError::TooLarge => f.write_str("message does not fit the message buffer"),
            SubmitError::Invalid(e) => write!(f, "invalid message: {e}"),
            SubmitError::Session(e) => fmt::Display::fmt(e, f),
            SubmitError::EmptyBatch => f.write_str("a batch needs at least one message"),
            SubmitError::NoTopic => f.write_str("this client publishes to no topic"),
            SubmitError::Batch(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl core::error::Error for SubmitError {}

/// Why a send did not store the message (an async runtime's answer to a send it waits for).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendError {
    /// Refused before anything was sent (too large, invalid, ...).
    Submit(SubmitError),
    /// Sent and failed (the retries ran out, or a broker refused it).
    Failed(SendFailure),
}

impl core::fmt::Display for SendError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SendError::Submit(e) => write!(f, "{e}"),
            SendError::Failed(e) => write!(f, "{e}"),
        }
    }
}

impl core::error::Error for SendError {}
