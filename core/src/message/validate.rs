//! Client-side validation (`docs/protocol/WIRE.md` §13; Java `Validators`, `TopicValidator`,
//! `Message.putUserProperty`).
//!
//! The Java client runs these checks before sending; the broker repeats some of them and
//! answers with an error code, so failing early saves a round trip and gives a precise reason.

use core::fmt;

use super::keys;
use super::properties::{NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};

/// Longest topic the client accepts (`Validators.TOPIC_MAX_LENGTH`).
pub const TOPIC_MAX_LEN: usize = 127;
/// Longest group Java clients 4.9.x … 5.3.3 accept (`Validators.CHARACTER_MAX_LENGTH`).
pub const GROUP_MAX_LEN: usize = 255;
/// Longest group the Java client accepts after 5.3.3 (`GROUP_MAX_LENGTH`, so that the
/// `%RETRY%`/`%DLQ%` topics built from it stay within limits).
pub const GROUP_MAX_LEN_STRICT: usize = 120;
/// Default `maxMessageSize` of the Java producer and broker: 4 MiB.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 4_194_304;
/// Highest delay level of the broker's default `messageDelayLevel` table
/// (`1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h`).
pub const MAX_DELAY_LEVEL: i32 = 18;

/// System topics a client may not send to (`TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET`).
pub const NOT_ALLOWED_SEND_TOPICS: &[&str] = &[
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
];

/// Prefix of the retry topic of a consumer group.
pub const RETRY_TOPIC_PREFIX: &str = "%RETRY%";
/// Prefix of the dead-letter topic of a consumer group.
pub const DLQ_TOPIC_PREFIX: &str = "%DLQ%";

/// Which validation rule failed (API-misuse errors: fix the input, do not retry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ValidationError {
    /// The topic is empty or only whitespace.
    TopicBlank,
    /// The topic is longer than [`TOPIC_MAX_LEN`] characters.
    TopicTooLong,
    /// The topic has a character outside `[%|a-zA-Z0-9_-]`.
    TopicIllegalChar,
    /// The topic is one of [`NOT_ALLOWED_SEND_TOPICS`].
    TopicNotAllowed,
    /// The group is empty or only whitespace.
    GroupBlank,
    /// The group is longer than the limit passed to [`validate_group`].
    GroupTooLong,
    /// The group has a character outside `[%|a-zA-Z0-9_-]`.
    GroupIllegalChar,
    /// The body is empty.
    BodyEmpty,
    /// The body is longer than `maxMessageSize`.
    BodyTooLarge,
    /// The property key is reserved (see [`keys::is_reserved`]).
    PropertyKeyReserved,
    /// The property key is empty after trimming.
    PropertyKeyBlank,
    /// The property value is empty after trimming.
    PropertyValueBlank,
    /// The property key or value contains byte `0x01` or `0x02`, which would corrupt the
    /// properties string (Java does not check this).
    PropertySeparator,
    /// The delay level is outside `1..=max`.
    DelayLevelOutOfRange,
    /// A timer message also has a delay level (a 5.x broker would drop the timer).
    TimerWithDelayLevel,
    /// A timer message in a batch (the broker reads only the batch's own properties, so it
    /// would be delivered at once).
    TimerInBatch,
    /// The timer's value is beyond what the broker can parse (a Java `long`).
    TimerOutOfRange,
    /// A timer on a transaction's half message (5.3.3 skips timer handling for half messages:
    /// the timer would be lost).
    TimerInTransaction,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ValidationError::TopicBlank => "topic is blank",
            ValidationError::TopicTooLong => "topic is longer than 127 characters",
            ValidationError::TopicIllegalChar => "topic has characters outside [%|a-zA-Z0-9_-]",
            ValidationError::TopicNotAllowed => "sending to this system topic is forbidden",
            ValidationError::GroupBlank => "group is blank",
            ValidationError::GroupTooLong => "group is longer than the maximum length",
            ValidationError::GroupIllegalChar => "group has characters outside [%|a-zA-Z0-9_-]",
            ValidationError::BodyEmpty => "message body is empty",
            ValidationError::BodyTooLarge => "message body is larger than maxMessageSize",
            ValidationError::PropertyKeyReserved => "property key is reserved for system use",
            ValidationError::PropertyKeyBlank => "property key is blank",
            ValidationError::PropertyValueBlank => "property value is blank",
            ValidationError::PropertySeparator => "property contains a 0x01/0x02 separator byte",
            ValidationError::DelayLevelOutOfRange => "delay level is out of range",
            ValidationError::TimerWithDelayLevel => {
                "a timer message cannot also have a delay level"
            }
            ValidationError::TimerInBatch => "timer messages are not supported in a batch",
            ValidationError::TimerOutOfRange => "timer delivery time is out of range",
            ValidationError::TimerInTransaction => {
                "a transactional message cannot be a timer message"
            }
        })
    }
}

impl core::error::Error for ValidationError {}

/// Java's `Character.isWhitespace`, which `StringUtils.isBlank` uses: the space, line and
/// paragraph separators (Zs, Zl, Zp) but the no-break ones (U+00A0, U+2007, U+202F), plus
/// U+0009–U+000D and U+001C–U+001F. Spelled out: `char::is_whitespace` would link a 256 B
/// Unicode table into the firmware.
fn is_java_whitespace(c: char) -> bool {
    matches!(
        c,
        '\t'..='\r'
            | '\u{1C}'..='\u{20}'
            | '\u{1680}'
            | '\u{2000}'..='\u{2006}'
            | '\u{2008}'..='\u{200A}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{205F}'
            | '\u{3000}'
    )
}

fn is_blank(s: &str) -> bool {
    s.chars().all(is_java_whitespace)
}

/// Java `String.trim().isEmpty()`: every char is `<= U+0020`.
fn is_trim_empty(s: &str) -> bool {
    s.chars().all(|c| c <= ' ')
}

/// Java `String.length()`: UTF-16 code units.
fn java_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// Whether every character is in `[%|a-zA-Z0-9_-]`.
pub fn is_valid_name_charset(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
}

/// Checks a topic as Java's producer does before sending: not blank, at most
/// [`TOPIC_MAX_LEN`] characters, only `[%|a-zA-Z0-9_-]`, not a forbidden system topic.
///
/// # Errors
///
/// The first rule that fails, in Java's order.
pub fn validate_topic(topic: &str) -> Result<(), ValidationError> {
    if is_blank(topic) {
        Err(ValidationError::TopicBlank)
    } else if java_len(topic) > TOPIC_MAX_LEN {
        Err(ValidationError::TopicTooLong)
    } else if !is_valid_name_charset(topic) {
        Err(ValidationError::TopicIllegalChar)
    } else if NOT_ALLOWED_SEND_TOPICS.contains(&topic) {
        Err(ValidationError::TopicNotAllowed)
    } else {
        Ok(())
    }
}

/// Checks a producer or consumer group: not blank, at most `max_len` characters
/// ([`GROUP_MAX_LEN`] for Java ≤ 5.3.3, [`GROUP_MAX_LEN_STRICT`] after), only
/// `[%|a-zA-Z0-9_-]`.
///
/// # Errors
///
/// The first rule that fails, in Java's order.
pub fn validate_group(group: &str, max_len: usize) -> Result<(), ValidationError> {
    if is_blank(group) {
        Err(ValidationError::GroupBlank)
    } else if java_len(group) > max_len {
        Err(ValidationError::GroupTooLong)
    } else if !is_valid_name_charset(group) {
        Err(ValidationError::GroupIllegalChar)
    } else {
        Ok(())
    }
}

/// Checks a body (uncompressed; for a batch, each inner body and the encoded batch body):
/// non-empty and at most `max_message_size` bytes ([`DEFAULT_MAX_MESSAGE_SIZE`] by default).
///
/// # Errors
///
/// [`ValidationError::BodyEmpty`] or [`ValidationError::BodyTooLarge`].
pub fn validate_body(body: &[u8], max_message_size: usize) -> Result<(), ValidationError> {
    if body.is_empty() {
        Err(ValidationError::BodyEmpty)
    } else if body.len() > max_message_size {
        Err(ValidationError::BodyTooLarge)
    } else {
        Ok(())
    }
}

/// Checks a user property as `Message.putUserProperty` does: the key is not reserved, key
/// and value are not empty after trimming; and, beyond Java, neither contains `0x01`/`0x02`.
///
/// # Errors
///
/// The first rule that fails.
pub fn validate_user_property(key: &str, value: &str) -> Result<(), ValidationError> {
    let has_sep = |s: &str| {
        s.bytes()
            .any(|b| b == NAME_VALUE_SEPARATOR || b == PROPERTY_SEPARATOR)
    };
    if keys::is_reserved(key) {
        Err(ValidationError::PropertyKeyReserved)
    } else if is_trim_empty(value) {
        Err(ValidationError::PropertyValueBlank)
    } else if is_trim_empty(key) {
        Err(ValidationError::PropertyKeyBlank)
    } else if has_sep(key) || has_sep(value) {
        Err(ValidationError::PropertySeparator)
    } else {
        Ok(())
    }
}

/// Checks a delay level against `1..=max_level` ([`MAX_DELAY_LEVEL`] for the broker's default
/// table). Java does not check this on the client; a broker clamps a level above its maximum
/// to the maximum and treats 0 or less as "no delay".
///
/// # Errors
///
/// [`ValidationError::DelayLevelOutOfRange`].
pub fn validate_delay_level(level: i32, max_level: i32) -> Result<(), ValidationError> {
    if (1..=max_level).contains(&level) {
        Ok(())
    } else {
        Err(ValidationError::DelayLevelOutOfRange)
    }
}

/// The checks Java's `Validators.checkMessage` applies: [`validate_topic`] then
/// [`validate_body`].
///
/// # Errors
///
/// The first rule that fails.
pub fn validate_message(
    topic: &str,
    body: &[u8],
    max_message_size: usize,
) -> Result<(), ValidationError> {
    validate_topic(topic)?;
    validate_body(body, max_message_size)
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn topics() {
        assert_eq!(validate_topic("TopicTest"), Ok(()));
        assert_eq!(validate_topic("%RETRY%group|a_b-c9"), Ok(()));
        assert_eq!(validate_topic(""), Err(ValidationError::TopicBlank));
        assert_eq!(validate_topic(" \t\n"), Err(ValidationError::TopicBlank));
        assert_eq!(
            validate_topic("a b"),
            Err(ValidationError::TopicIllegalChar)
        );
        assert_eq!(
            validate_topic("a.b"),
            Err(ValidationError::TopicIllegalChar)
        );
        assert_eq!(
            validate_topic("tópico"),
            Err(ValidationError::TopicIllegalChar)
        );
        assert_eq!(
            validate_topic("\u{A0}"),
            Err(ValidationError::TopicIllegalChar)
        );
        let max = "t".repeat(127);
        assert_eq!(validate_topic(&max), Ok(()));
        assert_eq!(
            validate_topic(&(max + "t")),
            Err(ValidationError::TopicTooLong)
        );
        // 127 chars but more bytes: Java counts UTF-16 units, so it is the charset that fails.
        assert_eq!(
            validate_topic(&"é".repeat(100)),
            Err(ValidationError::TopicIllegalChar)
        );
        for t in NOT_ALLOWED_SEND_TOPICS {
            assert_eq!(validate_topic(t), Err(ValidationError::TopicNotAllowed));
        }
        assert_eq!(validate_topic("RMQ_SYS_TRACE_TOPIC"), Ok(()));
    }

    #[test]
    fn groups() {
        assert_eq!(
            validate_group("please_rename_unique_group_name", GROUP_MAX_LEN_STRICT),
            Ok(())
        );
        assert_eq!(
            validate_group("", GROUP_MAX_LEN),
            Err(ValidationError::GroupBlank)
        );
        assert_eq!(
            validate_group("g.1", GROUP_MAX_LEN),
            Err(ValidationError::GroupIllegalChar)
        );
        let g = "g".repeat(121);
        assert_eq!(validate_group(&g, GROUP_MAX_LEN), Ok(()));
        assert_eq!(
            validate_group(&g, GROUP_MAX_LEN_STRICT),
            Err(ValidationError::GroupTooLong)
        );
        assert_eq!(
            validate_group(&"g".repeat(120), GROUP_MAX_LEN_STRICT),
            Ok(())
        );
        assert_eq!(
            validate_group(&"g".repeat(256), GROUP_MAX_LEN),
            Err(ValidationError::GroupTooLong)
        );
    }

    #[test]
    fn bodies_and_messages() {
        assert_eq!(
            validate_body(b"", DEFAULT_MAX_MESSAGE_SIZE),
            Err(ValidationError::BodyEmpty)
        );
        let body = vec![0u8; DEFAULT_MAX_MESSAGE_SIZE];
        assert_eq!(validate_body(&body, DEFAULT_MAX_MESSAGE_SIZE), Ok(()));
        let body = vec![0u8; DEFAULT_MAX_MESSAGE_SIZE + 1];
        assert_eq!(
            validate_body(&body, DEFAULT_MAX_MESSAGE_SIZE),
            Err(ValidationError::BodyTooLarge)
        );
        assert_eq!(validate_message("T", b"x", 1), Ok(()));
        assert_eq!(
            validate_message("SCHEDULE_TOPIC_XXXX", b"x", 1),
            Err(ValidationError::TopicNotAllowed)
        );
        assert_eq!(
            validate_message("T", b"xy", 1),
            Err(ValidationError::BodyTooLarge)
        );
    }

    #[test]
    fn user_properties() {
        assert_eq!(validate_user_property("orderId", "42"), Ok(()));
        assert_eq!(
            validate_user_property("TAGS", "x"),
            Err(ValidationError::PropertyKeyReserved)
        );
        assert_eq!(
            validate_user_property("UNIQ_KEY", "x"),
            Err(ValidationError::PropertyKeyReserved)
        );
        assert_eq!(
            validate_user_property("k", " \t"),
            Err(ValidationError::PropertyValueBlank)
        );
        assert_eq!(
            validate_user_property("  ", "v"),
            Err(ValidationError::PropertyKeyBlank)
        );
        assert_eq!(
            validate_user_property("k\x01", "v"),
            Err(ValidationError::PropertySeparator)
        );
        assert_eq!(
            validate_user_property("k", "v\x02"),
            Err(ValidationError::PropertySeparator)
        );
        // The trim rule only strips chars <= U+0020.
        assert_eq!(validate_user_property("k", "\u{A0}"), Ok(()));
    }

    #[test]
    fn delay_levels() {
        assert_eq!(validate_delay_level(1, MAX_DELAY_LEVEL), Ok(()));
        assert_eq!(validate_delay_level(18, MAX_DELAY_LEVEL), Ok(()));
        assert_eq!(
            validate_delay_level(0, MAX_DELAY_LEVEL),
            Err(ValidationError::DelayLevelOutOfRange)
        );
        assert_eq!(
            validate_delay_level(19, MAX_DELAY_LEVEL),
            Err(ValidationError::DelayLevelOutOfRange)
        );
        assert_eq!(
            validate_delay_level(-1, MAX_DELAY_LEVEL),
            Err(ValidationError::DelayLevelOutOfRange)
        );
    }

    proptest! {
        #[test]
        fn valid_charset_topics_pass(t in "[%|a-zA-Z0-9_-]{1,127}") {
            prop_assume!(!NOT_ALLOWED_SEND_TOPICS.contains(&t.as_str()));
            prop_assert_eq!(validate_topic(&t), Ok(()));
        }

        #[test]
        fn any_topic_never_panics(t in "\\PC{0,200}") {
            if validate_topic(&t).is_ok() {
                prop_assert!(t.len() <= TOPIC_MAX_LEN && is_valid_name_charset(&t) && !t.is_empty());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// The spelled-out set equals Java's definition written with the Unicode table, for every
    /// `char`.
    #[test]
    fn java_whitespace_is_exact() {
        let java = |c: char| {
            matches!(
                c,
                '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r' | '\u{1C}'..='\u{1F}'
            ) || (c.is_whitespace() && !matches!(c, '\u{85}' | '\u{A0}' | '\u{2007}' | '\u{202F}'))
        };
        for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            assert_eq!(super::is_java_whitespace(c), java(c), "{:#x}", u32::from(c));
        }
    }
}
