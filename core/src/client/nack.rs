//! What becomes of a message the application could not process (Java
//! `ConsumeMessageConcurrentlyService.processConsumeResult` and its `sendMessageBack`):
//!
//! 1. **send-back**: CONSUMER_SEND_MSG_BACK to the message's broker (the consumer's
//!    [`PullConsumer::nack`](crate::pull_consumer::PullConsumer::nack)); the broker puts it
//!    in `%RETRY%<group>` (or `%DLQ%<group>`) and its offset is acknowledged;
//! 2. refused, or no answer: a **resend**, the message as a normal one to `%RETRY%<group>`
//!    with the retry properties ([`RetryProperties`]: `ORIGIN_MESSAGE_ID`, `RETRY_TOPIC`,
//!    `DELAY`) and one more reconsume time in the header; stored, its offset is acknowledged;
//! 3. that fails too: **local redelivery**, the message handed to the application again
//!    [`LOCAL_RETRY_DELAY`] later ([`Event::Redeliver`](super::Event::Redeliver)), still in
//!    flight.
//!
//! Each nack ends in one [`Event::Nacked`](super::Event::Nacked). The runtime keeps the
//! message meanwhile and lends it ([`Lend::nacked`]): the resend's properties are written from
//! the original's by the client ([`Outbound::write_properties`]). Orderly consumption's skip of
//! a message past its reconsume limit starts at step 2 ([`Client::resend`](super::Client::resend)).

use crate::message::PropertiesRef;
use crate::message::properties::EncodeProperties;
use crate::pull_consumer::QueueKey;
use crate::send_back::{LOCAL_RETRY_DELAY, RetryProperties};
use crate::session::{Outbound, SendId};
use crate::time::Instant;

/// A nacked message: its queue, the lease it was delivered under and its offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NackKey {
    /// Its queue.
    pub queue: QueueKey,
    /// The lease it was delivered under.
    pub lease: u32,
    /// Its queue offset.
    pub offset: i64,
}

/// How a nack ended ([`Event::Nacked`](super::Event::Nacked)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum NackOutcome {
    /// The broker took it back (CONSUMER_SEND_MSG_BACK); its offset is acknowledged.
    SentBack,
    /// The send-back failed, a copy was stored in `%RETRY%<group>`; its offset is
    /// acknowledged.
    Resent,
    /// Both failed: [`Event::Redeliver`](super::Event::Redeliver) hands it out again later.
    Local,
}

/// A nacked message as the runtime keeps it.
#[derive(Clone, Copy, Debug)]
pub struct NackedMessage<'a> {
    /// Its properties as stored (`key\u{1}value\u{2}` …).
    pub properties: &'a str,
    /// Its body as stored.
    pub body: &'a [u8],
    /// Its message id (`UNIQ_KEY`, or the offsetMsgId).
    pub msg_id: &'a str,
    /// The topic it was consumed as (the original topic of a retried message).
    pub topic: &'a str,
    /// Deliveries before the one that failed.
    pub reconsume_times: i32,
    /// `Message.flag`.
    pub flag: i32,
}

/// What a runtime lends the client besides [`Outbound`]'s: the nacked messages a consumer
/// keeps until their [`Event::Nacked`](super::Event::Nacked).
pub trait Lend: Outbound {
    /// The message of nack `key` (`None` when the runtime no longer has it: its resend is
    /// then written without properties or body and refused by the broker).
    fn nacked(&self, key: NackKey) -> Option<NackedMessage<'_>> {
        let _ = key;
        None
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// CONSUMER_SEND_MSG_BACK in flight (the consumer's).
    SendingBack,
    /// The resend of this id in flight (started when the send-back failed).
    Resending(SendId),
    /// Due to be handed out again at this instant.
    Local(Instant),
}

/// One nack on its way.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub(super) key: NackKey,
    pub(super) body_len: usize,
    pub(super) flag: i32,
    pub(super) reconsume_times: i32,
    pub(super) step: Step,
}

impl Entry {
    /// When its local redelivery is due.
    pub(super) fn due(&self) -> Option<Instant> {
        match self.step {
            Step::Local(at) => Some(at),
            _ => None,
        }
    }

    /// The local redelivery after both the send-back and the resend failed at `now`.
    pub(super) fn local(&mut self, now: Instant) {
        self.step = Step::Local(now.saturating_add(LOCAL_RETRY_DELAY));
    }
}

/// The runtime's lend, with the resends' properties and bodies the client derives.
pub(super) struct WithResends<'a, M: ?Sized> {
    pub(super) inner: &'a M,
    pub(super) nacks: &'a [Entry],
    pub(super) max_reconsume: i32,
}

impl<M: Lend + ?Sized> WithResends<'_, M> {
    fn resend(&self, id: SendId) -> Option<NackedMessage<'_>> {
        let e = self.nacks.iter().find(|e| e.step == Step::Resending(id))?;
        self.inner.nacked(e.key)
    }
}

impl<M: Lend + ?Sized> Outbound for WithResends<'_, M> {
    fn properties(&self, id: SendId) -> &str {
        self.inner.properties(id)
    }
    fn body(&self, id: SendId) -> &[u8] {
        match self.resend(id) {
            Some(m) => m.body,
            None => self.inner.body(id),
        }
    }
    fn write_properties(&self, id: SendId, buf: &mut [u8]) -> Option<usize> {
        let m = self.resend(id)?;
        let original = PropertiesRef::from_bytes(m.properties.as_bytes()).unwrap_or_default();
        let p = RetryProperties::new(
            original.iter(),
            m.msg_id,
            m.topic,
            m.reconsume_times,
            self.max_reconsume,
        );
        p.encode(buf).ok()
    }
    fn credentials(&self) -> Option<crate::acl::Credentials<'_>> {
        self.inner.credentials()
    }
    fn namespace_v2(&self) -> Option<&str> {
        self.inner.namespace_v2()
    }
    fn heartbeat_body(&self, buf: &mut [u8]) -> Option<usize> {
        self.inner.heartbeat_body(buf)
    }
    fn unix_millis(&self) -> i64 {
        self.inner.unix_millis()
    }
    fn running_prop(&self, i: usize) -> Option<(&str, &str)> {
        self.inner.running_prop(i)
    }
    fn consume_rt(&self) -> u64 {
        self.inner.consume_rt()
    }
}
