//! What may go into one SEND_BATCH_MESSAGE (Java `MessageBatch.generateFromList` and
//! `DefaultMQProducerImpl.batch`), checked once here for every runtime: one topic, not a
//! `%RETRY%` topic, no delay level, no timer (the broker reads only the batch's own
//! properties, so a record's timer would be ignored), one `waitStoreMsgOK`; and the request's
//! own properties, which carry `WAIT` only (each message's properties travel in its record).
//!
//! ```
//! use rmq_core::message::batch_rules::{BatchRules, RuleError};
//! use rmq_core::producer::{MessageFields, TimerDelivery};
//! let rules = BatchRules::new("T", true).unwrap();
//! let plain = MessageFields::new(Some("TagA"), None);
//! assert_eq!(rules.check("T", &plain), Ok(()));
//! assert_eq!(rules.check("U", &plain), Err(RuleError::MixedTopics));
//! let delayed = MessageFields { delay_level: Some(3), ..plain.clone() };
//! assert_eq!(rules.check("T", &delayed), Err(RuleError::Delayed));
//! let timer = MessageFields { timer: Some(TimerDelivery::After(5000)), ..plain };
//! assert_eq!(rules.check("T", &timer), Err(RuleError::Timer));
//! let mut props = [0u8; 16];
//! let n = rules.write_properties(&mut props).unwrap();
//! assert_eq!(&props[..n], b"WAIT\x01true\x02");
//! ```

use core::fmt;

use super::validate::RETRY_TOPIC_PREFIX;

/// Why a message cannot join a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RuleError {
    /// A batch needs at least one message.
    Empty,
    /// The messages of a batch must share one topic.
    MixedTopics,
    /// A batch cannot carry a delay level (Java: "TimeDelayLevel is not supported for
    /// batching").
    Delayed,
    /// A batch cannot carry a timer message (the broker would deliver it at once).
    Timer,
    /// The messages of a batch must share `waitStoreMsgOK`.
    MixedWait,
    /// A `%RETRY%` topic cannot be batched (Java: "Retry Group is not supported for
    /// batching").
    RetryTopic,
    /// The request's properties do not fit the buffer.
    BufferTooSmall,
}

impl RuleError {
    /// What is wrong, as a sentence.
    pub const fn as_str(self) -> &'static str {
        match self {
            RuleError::Empty => "empty batch",
            RuleError::MixedTopics => "messages of a batch must share one topic",
            RuleError::Delayed => "delay levels are not supported in a batch",
            RuleError::Timer => "timer messages are not supported in a batch",
            RuleError::MixedWait => "messages of a batch must share waitStoreMsgOK",
            RuleError::RetryTopic => "retry topics are not supported in a batch",
            RuleError::BufferTooSmall => "batch properties do not fit",
        }
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for RuleError {}

/// The rules of one batch, set by its first message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRules<'a> {
    topic: &'a str,
    wait: bool,
}

impl<'a> BatchRules<'a> {
    /// The batch of a first message to `topic` with `waitStoreMsgOK = wait`.
    ///
    /// # Errors
    /// [`RuleError::RetryTopic`].
    pub fn new(topic: &'a str, wait: bool) -> Result<Self, RuleError> {
        if topic.starts_with(RETRY_TOPIC_PREFIX) {
            return Err(RuleError::RetryTopic);
        }
        Ok(BatchRules { topic, wait })
    }

    /// Whether a message to `topic` with `fields` may join.
    ///
    /// # Errors
    /// [`RuleError::MixedTopics`], [`RuleError::Delayed`], [`RuleError::Timer`] or
    /// [`RuleError::MixedWait`].
    pub fn check<U>(
        &self,
        topic: &str,
        fields: &crate::producer::MessageFields<'_, U>,
    ) -> Result<(), RuleError> {
        if topic != self.topic {
            return Err(RuleError::MixedTopics);
        }
        if fields.delay_level.is_some() {
            return Err(RuleError::Delayed);
        }
        if fields.timer.is_some() {
            return Err(RuleError::Timer);
        }
        if fields.wait_store_msg_ok != self.wait {
            return Err(RuleError::MixedWait);
        }
        Ok(())
    }

    /// The topic.
    pub const fn topic(&self) -> &'a str {
        self.topic
    }

    /// Writes the batch request's own properties (`WAIT` only) into `buf`; their length.
    ///
    /// # Errors
    /// [`RuleError::BufferTooSmall`].
    pub fn write_properties(&self, buf: &mut [u8]) -> Result<usize, RuleError> {
        let p = self.properties();
        buf.get_mut(..p.len())
            .ok_or(RuleError::BufferTooSmall)?
            .copy_from_slice(p);
        Ok(p.len())
    }

    /// The length [`write_properties`](Self::write_properties) writes.
    pub fn properties_len(&self) -> usize {
        self.properties().len()
    }

    /// `WAIT`, as the properties string encodes it (`docs/protocol/WIRE.md` §9).
    fn properties(&self) -> &'static [u8] {
        if self.wait {
            b"WAIT\x01true\x02"
        } else {
            b"WAIT\x01false\x02"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_java_batch_rules() {
        assert_eq!(
            BatchRules::new("%RETRY%g", true),
            Err(RuleError::RetryTopic)
        );
        use crate::producer::{MessageFields, TimerDelivery};
        let r = BatchRules::new("T", false).unwrap();
        let nowait = MessageFields {
            wait_store_msg_ok: false,
            ..MessageFields::new(None, None)
        };
        assert_eq!(r.check("T", &nowait), Ok(()));
        assert_eq!(
            r.check("T", &MessageFields::new(None, None)),
            Err(RuleError::MixedWait)
        );
        assert_eq!(r.check("T2", &nowait), Err(RuleError::MixedTopics));
        let delayed = MessageFields {
            delay_level: Some(1),
            ..nowait.clone()
        };
        assert_eq!(r.check("T", &delayed), Err(RuleError::Delayed));
        let timer = MessageFields {
            timer: Some(TimerDelivery::At(1)),
            ..nowait
        };
        assert_eq!(r.check("T", &timer), Err(RuleError::Timer));
        let mut buf = [0u8; 32];
        let n = r.write_properties(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"WAIT\x01false\x02");
        assert_eq!(n, r.properties_len());
        assert_eq!(
            r.write_properties(&mut buf[..3]),
            Err(RuleError::BufferTooSmall)
        );
    }
}
