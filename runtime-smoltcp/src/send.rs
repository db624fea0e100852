//! The sending side, shared by the [`Producer`](crate::Producer) and the
//! [`Client`](crate::Client): encodes one message (or a batch) into the caller's message
//! buffer, hands it to the session, and turns the session's `SendDone` into a [`Completion`].
//! One request at a time.

use heapless::String;
use rmq_core::message::UniqKeyGenerator;
use rmq_core::message::batch_rules::BatchRules;
use rmq_core::message::validate::DEFAULT_MAX_MESSAGE_SIZE;
use rmq_core::producer::{
    MessageError, MessageFields, encode_batch_record, encode_message_properties,
};
use rmq_core::retry::{RetryConfig, SendMode};
use rmq_core::session::{self, Outbound, SendArgs, SendFailure, SessionApi, TopicId};
use rmq_core::time::{Instant, WallClock};

use crate::{BaseConfig, Completion, Message, SendId, SendReceipt, SubmitError};

/// A refused message's error.
fn refused(e: MessageError) -> SubmitError {
    match e {
        MessageError::BufferTooSmall => SubmitError::TooLarge,
        MessageError::Invalid(v) => SubmitError::Invalid(v),
    }
}

/// Lends the session the properties of the one message in the message buffer (and a
/// consumer's heartbeat body, when there is one).
pub(crate) struct Lend<'m> {
    pub(crate) props: &'m str,
    pub(crate) heartbeat: Option<&'m [u8]>,
    /// The wall clock and `now`, for the running info's timestamps.
    pub(crate) clock: (&'m WallClock, Instant),
}

impl rmq_core::client::Lend for Lend<'_> {}

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
pub(crate) struct Sender<'a, 'b> {
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
    pub(crate) fn new(
        topic_name: Option<&'a str>,
        cfg: &BaseConfig<'_>,
        msg: &'b mut [u8],
        seed: u32,
    ) -> Self {
        let ip = ::core::net::IpAddr::V4(::core::net::Ipv4Addr::from(cfg.client_ip));
        Sender {
            topic_name,
            retry: cfg.retry,
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
    pub(crate) fn take_front(
        &mut self,
        write: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> Option<&'b [u8]> {
        let n = write(self.msg)?.min(self.msg.len());
        let (front, rest) = core::mem::take(&mut self.msg).split_at_mut(n);
        self.msg = rest;
        Some(front)
    }

    pub(crate) fn has_topic(&self) -> bool {
        self.topic_name.is_some()
    }

    pub(crate) fn set_unix_time(&mut self, now: Instant, unix_millis: i64) {
        self.clock.set(now, unix_millis);
    }

    /// The wall clock (Unix ms from 0 until [`Sender::set_unix_time`]).
    pub(crate) fn clock(&self) -> &WallClock {
        &self.clock
    }

    pub(crate) fn has_route<S: SessionApi>(&self, session: &S) -> bool {
        self.topic
            .is_some_and(|t| !session.publish_queues(t).is_empty())
    }

    /// Whether a send would be accepted (`writing_body`: a frame still reads the buffer).
    pub(crate) fn can_send(&self, writing_body: bool) -> bool {
        self.job.is_none() && self.done.is_none() && !writing_body
    }

    /// Whether a completion waits to be taken (the async runtime waits for it).
    #[cfg(feature = "async")]
    pub(crate) fn completed(&self) -> bool {
        self.done.is_some()
    }

    pub(crate) fn take_completion(&mut self) -> Option<Completion> {
        self.done.take()
    }

    /// The publish topic's session id, registered (and looked up) at the first call.
    pub(crate) fn topic_id<S: SessionApi>(
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
    pub(crate) fn parts(&self) -> (&str, &[u8]) {
        let props_len = self.job.as_ref().map_or(0, |j| j.props_len);
        let (props, body) = self.msg.split_at(props_len.min(self.msg.len()));
        (core::str::from_utf8(props).unwrap_or(""), body)
    }

    /// One message (sync or oneway).
    pub(crate) fn single<S: SessionApi>(
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
    pub(crate) fn batch<S: SessionApi>(
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
        debug!("send {=u32} queued ({=usize} body bytes)", id.0, body_len);
        self.job = Some(job);
        Ok(SendId(id.0))
    }

    /// The session's `SendDone` of send `id`: the completion, with the message id.
    pub(crate) fn done<S: SessionApi>(
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
        debug!("send {=u32} done, ok={=bool}", id.0, result.is_ok());
        self.done = Some(Completion {
            id: SendId(id.0),
            result,
        });
    }
}
