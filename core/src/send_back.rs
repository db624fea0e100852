//! Retries and dead letters of a clustering consumer (Java `DefaultMQPushConsumerImpl.
//! sendMessageBack` and `ConsumeMessageConcurrentlyService`): what happens to a message the
//! application could not process.
//!
//! 1. **Send-back**: CONSUMER_SEND_MSG_BACK (36) to the message's broker, naming the message by
//!    its commit-log offset; the broker stores a copy in `%RETRY%<group>` with a delay (level
//!    `3 + reconsumeTimes` when the consumer says 0), or in `%DLQ%<group>` once the message was
//!    delivered `maxReconsumeTimes` times. [`PullConsumer::nack`](crate::pull_consumer::PullConsumer::nack)
//!    queues it; the answer is a [`PullEvent`](crate::pull_consumer::PullEvent).
//! 2. **Fallback** when the send-back fails: the runtime sends the message itself to
//!    `%RETRY%<group>` as a normal message, with [`RetryProperties`] and the reconsume counts
//!    of [`RetryProperties::reconsume`] in the send header (`SendArgs::reconsume`).
//! 3. If that fails too, the runtime hands the message to the application again after
//!    [`LOCAL_RETRY_DELAY`].
//!
//! A message sent back (or resent) counts as consumed: its offset is acknowledged, so the
//! committed offset moves past it. The consumer subscribes `%RETRY%<group>` itself and
//! restores the original topic of what it pulls from there (`RETRY_TOPIC`).

use heapless::String;

use crate::message::keys;
use crate::message::properties::{EncodeProperties, PropertiesEncoder, PropertiesError};
pub use crate::message::validate::{DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX};
use crate::time::Duration;

/// Deliveries of a message before the broker moves it to `%DLQ%<group>` (Java's default for
/// concurrent consumption).
pub const MAX_RECONSUME_TIMES: i32 = 16;
/// How long CONSUMER_SEND_MSG_BACK may take (Java: 5 s).
pub const SEND_BACK_TIMEOUT: Duration = Duration::from_millis(5000);
/// When both the send-back and the fallback failed: the message is handed to the application
/// again after this long (Java: 5 s).
pub const LOCAL_RETRY_DELAY: Duration = Duration::from_millis(5000);
/// A message held by the application longer than this is sent back (Java `consumeTimeout`,
/// 15 min).
pub const CONSUME_TIMEOUT: Duration = Duration::from_millis(15 * 60 * 1000);
/// The delay level of a message sent back because it was held too long.
pub const TIMEOUT_DELAY_LEVEL: i32 = 3;
/// The first delay level the broker uses when the consumer leaves the choice to it.
pub const FIRST_RETRY_LEVEL: i32 = 3;
/// Longest message id kept for a send-back (an IPv6 offsetMsgId is 40 characters).
pub const MAX_MSG_ID: usize = 64;

/// `%RETRY%<group>`; `None` when it does not fit `N` bytes.
pub fn retry_topic<const N: usize>(group: &str) -> Option<String<N>> {
    prefixed(RETRY_TOPIC_PREFIX, group)
}

/// `%DLQ%<group>`; `None` when it does not fit `N` bytes.
pub fn dlq_topic<const N: usize>(group: &str) -> Option<String<N>> {
    prefixed(DLQ_TOPIC_PREFIX, group)
}

fn prefixed<const N: usize>(prefix: &str, group: &str) -> Option<String<N>> {
    let mut s = String::new();
    s.push_str(prefix).ok()?;
    s.push_str(group).ok()?;
    Some(s)
}

/// The topic a consumed message belongs to: its `RETRY_TOPIC` for a message of a
/// `%RETRY%<group>` queue (the topic it was first consumed from), else its own.
pub fn origin_topic<'m>(m: &crate::message::StoredMessage<'m>) -> &'m str {
    let retried = m.topic.starts_with(RETRY_TOPIC_PREFIX);
    let props = m.properties().ok().filter(|_| retried);
    props
        .and_then(|p| p.get(keys::RETRY_TOPIC))
        .unwrap_or(m.topic)
}

/// A message the application could not process, for
/// [`PullConsumer::nack`](crate::pull_consumer::PullConsumer::nack).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nack<'a> {
    /// Its queue offset (it must be in flight).
    pub offset: i64,
    /// Its commit-log offset (how the broker finds it).
    pub commit_log_offset: i64,
    /// Its message id (`ORIGIN_MESSAGE_ID` when it has one, else its id).
    pub msg_id: &'a str,
    /// The topic it was consumed as (the original topic of a retried message).
    pub topic: &'a str,
    /// Delay level of the retry: 0 lets the broker choose (3 + reconsume times; 10 s first),
    /// 1..=18 picks one (`1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h`), -1
    /// sends it to the dead-letter queue at once.
    pub delay_level: i32,
    /// Deliveries before the one that failed (its `reconsumeTimes`; the resend of the
    /// fallback counts one more).
    pub reconsume_times: i32,
    /// Its body length as stored (the fallback resend sends it again).
    pub body_len: usize,
    /// Its `Message.flag`.
    pub flag: i32,
}

/// Why [`PullConsumer::nack`](crate::pull_consumer::PullConsumer::nack) refused a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum NackError {
    /// The message is not in flight under that lease (acknowledged, sent back already, or its
    /// queue moved to another consumer or was reset).
    NotInFlight,
    /// A send-back of this message is already under way.
    Pending,
    /// The send-back table is full: try again after an answer.
    Full,
    /// Its id or topic is too long to keep.
    TooLong,
    /// A broadcasting consumer has no retry topic: the message is dropped (as Java does);
    /// acknowledge it.
    Broadcasting,
}

impl core::fmt::Display for NackError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            NackError::NotInFlight => "message not in flight",
            NackError::Pending => "message already being sent back",
            NackError::Full => "send-back table full",
            NackError::TooLong => "message id or topic too long",
            NackError::Broadcasting => "broadcasting consumers do not send messages back",
        })
    }
}

impl core::error::Error for NackError {}

/// The properties of the fallback copy of a message sent to `%RETRY%<group>` as a normal
/// message: every original property except the transaction mark, with `ORIGIN_MESSAGE_ID`
/// (kept when present, else the message id), `RETRY_TOPIC` (the original topic) and `DELAY`
/// (`3 + reconsumeTimes`). The reconsume counts travel in the send header instead
/// ([`RetryProperties::reconsume`]), as the Java producer moves them there.
#[derive(Clone, Debug)]
pub struct RetryProperties<'a, I> {
    original: I,
    origin_msg_id: &'a str,
    topic: &'a str,
    delay: String<11>,
    reconsume_times: i32,
    max_reconsume_times: i32,
}

const REPLACED: [&str; 6] = [
    keys::TRANSACTION_PREPARED,
    keys::ORIGIN_MESSAGE_ID,
    keys::RETRY_TOPIC,
    keys::DELAY_TIME_LEVEL,
    keys::RECONSUME_TIME,
    keys::MAX_RECONSUME_TIMES,
];

impl<'a, I> RetryProperties<'a, I>
where
    I: Iterator<Item = (&'a str, &'a str)> + Clone,
{
    /// The fallback of a message with these `original` properties, id `msg_id`, consumed as
    /// `topic` and delivered `reconsume_times` times before.
    pub fn new(
        original: I,
        msg_id: &'a str,
        topic: &'a str,
        reconsume_times: i32,
        max_reconsume_times: i32,
    ) -> Self {
        let origin = original
            .clone()
            .filter(|(k, _)| *k == keys::ORIGIN_MESSAGE_ID)
            .last()
            .map_or(msg_id, |(_, v)| v);
        let mut delay = String::new();
        let level = FIRST_RETRY_LEVEL.saturating_add(reconsume_times.max(0));
        let _ = core::fmt::write(&mut delay, format_args!("{level}"));
        RetryProperties {
            original,
            origin_msg_id: origin,
            topic,
            delay,
            reconsume_times,
            max_reconsume_times,
        }
    }

    /// `(reconsumeTimes, maxReconsumeTimes)` of the send header: one more delivery than before.
    pub fn reconsume(&self) -> (i32, i32) {
        (
            self.reconsume_times.max(0).saturating_add(1),
            self.max_reconsume_times,
        )
    }

    fn encoder(&self) -> PropertiesEncoder<impl Iterator<Item = (&str, &str)> + Clone + '_> {
        let kept = self
            .original
            .clone()
            .filter(|(k, _)| !REPLACED.contains(k))
            .map(|(k, v)| (k as &str, v as &str));
        let added = [
            (keys::ORIGIN_MESSAGE_ID, self.origin_msg_id),
            (keys::RETRY_TOPIC, self.topic),
            (keys::DELAY_TIME_LEVEL, self.delay.as_str()),
        ];
        PropertiesEncoder::new(kept.chain(added))
    }
}

impl<'a, I> EncodeProperties for RetryProperties<'a, I>
where
    I: Iterator<Item = (&'a str, &'a str)> + Clone,
{
    fn encoded_len(&self) -> usize {
        self.encoder().encoded_len()
    }

    fn encode(&self, buf: &mut [u8]) -> Result<usize, PropertiesError> {
        self.encoder().encode(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::properties::PropertiesRef;

    fn decoded(
        p: &impl EncodeProperties,
    ) -> std::vec::Vec<(std::string::String, std::string::String)> {
        let mut buf = [0u8; 512];
        let n = p.encode(&mut buf).unwrap();
        assert_eq!(n, p.encoded_len());
        PropertiesRef::from_bytes(&buf[..n])
            .unwrap()
            .iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect()
    }

    #[test]
    fn fallback_properties_follow_java() {
        let original = [
            ("TAGS", "TagA"),
            ("UNIQ_KEY", "AC11000100002A9F0000000000000001"),
            ("TRAN_MSG", "true"),
            ("DELAY", "1"),
            ("RECONSUME_TIME", "7"),
        ];
        let p = RetryProperties::new(original.iter().copied(), "ID1", "T", 2, 16);
        assert_eq!(p.reconsume(), (3, 16));
        let got = decoded(&p);
        let want: std::vec::Vec<(std::string::String, std::string::String)> = [
            ("TAGS", "TagA"),
            ("UNIQ_KEY", "AC11000100002A9F0000000000000001"),
            ("ORIGIN_MESSAGE_ID", "ID1"),
            ("RETRY_TOPIC", "T"),
            ("DELAY", "5"),
        ]
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn an_existing_origin_id_is_kept() {
        let original = [("ORIGIN_MESSAGE_ID", "FIRST"), ("RETRY_TOPIC", "Old")];
        let p = RetryProperties::new(original.iter().copied(), "SECOND", "T", 0, 2);
        let got = decoded(&p);
        assert!(got.contains(&("ORIGIN_MESSAGE_ID".into(), "FIRST".into())));
        assert!(got.contains(&("RETRY_TOPIC".into(), "T".into())));
        assert!(got.contains(&("DELAY".into(), "3".into())));
        assert_eq!(got.len(), 3);
        assert_eq!(p.reconsume(), (1, 2));
    }

    #[test]
    fn a_retried_message_belongs_to_its_first_topic() {
        let host = core::net::SocketAddr::from(([10, 0, 0, 1], 10911));
        let mut m = crate::message::StoredMessage {
            version: crate::message::stored::MessageVersion::V1,
            body_crc: 0,
            queue_id: 0,
            flag: 0,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: crate::message::SysFlag(0),
            born_timestamp: 0,
            born_host: host,
            store_timestamp: 0,
            store_host: host,
            reconsume_times: 1,
            prepared_transaction_offset: 0,
            body: b"",
            topic: "%RETRY%g",
            raw_properties: b"RETRY_TOPIC\x01T\x02",
        };
        assert_eq!(origin_topic(&m), "T");
        m.topic = "U";
        assert_eq!(
            origin_topic(&m),
            "U",
            "only a retry queue's message is restored"
        );
    }

    #[test]
    fn topic_names() {
        assert_eq!(retry_topic::<32>("cg").unwrap().as_str(), "%RETRY%cg");
        assert_eq!(dlq_topic::<32>("cg").unwrap().as_str(), "%DLQ%cg");
        assert!(retry_topic::<8>("cg").is_none());
    }
}
