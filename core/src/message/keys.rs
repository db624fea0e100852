//! Property key strings (`docs/protocol/WIRE.md` §9.2, Java `MessageConst`) and the reserved set.
//!
//! The names drop Java's `PROPERTY_` prefix. [`is_reserved`] is the 5.x `STRING_HASH_SET`
//! (a superset of 4.9.x's), the keys `Message.putUserProperty` refuses.

/// User keys, joined by [`KEY_SEPARATOR`]; the broker indexes each one. Reserved.
pub const KEYS: &str = "KEYS";
/// The single tag. Reserved.
pub const TAGS: &str = "TAGS";
/// `"true"`/`"false"`: wait for the store to flush before answering; absent means true. Reserved.
pub const WAIT_STORE_MSG_OK: &str = "WAIT";
/// Delay level `1..=18`. Reserved.
pub const DELAY_TIME_LEVEL: &str = "DELAY";
/// Original topic of a retried message. Reserved.
pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
/// Real topic (broker, delay/transaction). Reserved.
pub const REAL_TOPIC: &str = "REAL_TOPIC";
/// Real queue id (broker, delay/transaction). Reserved.
pub const REAL_QUEUE_ID: &str = "REAL_QID";
/// `"true"` on transaction half messages. Reserved.
pub const TRANSACTION_PREPARED: &str = "TRAN_MSG";
/// Producer group on half messages (routes the check-back). Reserved.
pub const PRODUCER_GROUP: &str = "PGROUP";
/// Added by the Java client to pulled messages. Reserved.
pub const MIN_OFFSET: &str = "MIN_OFFSET";
/// Added by the Java client to pulled messages. Reserved.
pub const MAX_OFFSET: &str = "MAX_OFFSET";
/// Reserved.
pub const BUYER_ID: &str = "BUYER_ID";
/// Reserved.
pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
/// Reserved.
pub const TRANSFER_FLAG: &str = "TRANSFER_FLAG";
/// Reserved.
pub const CORRECTION_FLAG: &str = "CORRECTION_FLAG";
/// Reserved.
pub const MQ2_FLAG: &str = "MQ2_FLAG";
/// Reserved.
pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
/// Reserved.
pub const MSG_REGION: &str = "MSG_REGION";
/// Reserved.
pub const TRACE_SWITCH: &str = "TRACE_ON";
/// The client message id (Java `PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX`). Reserved.
pub const UNIQ_KEY: &str = "UNIQ_KEY";
/// Reserved (5.x).
pub const EXTEND_UNIQ_INFO: &str = "EXTEND_UNIQ_INFO";
/// Reserved.
pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
/// Reserved.
pub const CONSUME_START_TIMESTAMP: &str = "CONSUME_START_TIME";
/// Inner-batch message count (5.x). Not reserved.
pub const INNER_NUM: &str = "INNER_NUM";
/// Inner-batch base offset (5.x). Not reserved.
pub const INNER_BASE: &str = "INNER_BASE";
/// Reserved (5.x).
pub const DUP_INFO: &str = "DUP_INFO";
/// Not reserved.
pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
/// Reserved.
pub const TRANSACTION_PREPARED_QUEUE_OFFSET: &str = "TRAN_PREPARED_QUEUE_OFFSET";
/// Not reserved.
pub const TRANSACTION_ID: &str = "__transactionId__";
/// Not reserved.
pub const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
/// Set to the namespace when one is configured. Reserved.
pub const INSTANCE_ID: &str = "INSTANCE_ID";
/// Request-reply. Reserved.
pub const CORRELATION_ID: &str = "CORRELATION_ID";
/// Request-reply. Reserved.
pub const MESSAGE_REPLY_TO_CLIENT: &str = "REPLY_TO_CLIENT";
/// Request-reply. Reserved.
pub const MESSAGE_TTL: &str = "TTL";
/// Request-reply. Reserved.
pub const REPLY_MESSAGE_ARRIVE_TIME: &str = "ARRIVE_TIME";
/// Request-reply. Reserved.
pub const PUSH_REPLY_TIME: &str = "PUSH_REPLY_TIME";
/// Added by the broker. Reserved.
pub const CLUSTER: &str = "CLUSTER";
/// `"reply"` for reply messages. Reserved.
pub const MESSAGE_TYPE: &str = "MSG_TYPE";
/// Pop consumption (5.x). Reserved.
pub const POP_CK: &str = "POP_CK";
/// Pop consumption (5.x). Reserved.
pub const POP_CK_OFFSET: &str = "POP_CK_OFFSET";
/// Pop consumption (5.x). Reserved.
pub const FIRST_POP_TIME: &str = "1ST_POP_TIME";
/// Sharding key (5.x; the Go client uses `SHARDING_KEY`). Not reserved.
pub const SHARDING_KEY: &str = "__SHARDINGKEY";
/// Not reserved (5.x).
pub const FORWARD_QUEUE_ID: &str = "PROPERTY_FORWARD_QUEUE_ID";
/// Not reserved (5.x).
pub const REDIRECT: &str = "REDIRECT";
/// LMQ dispatch targets (5.x). Not reserved.
pub const INNER_MULTI_DISPATCH: &str = "INNER_MULTI_DISPATCH";
/// LMQ queue offsets. Reserved.
pub const INNER_MULTI_QUEUE_OFFSET: &str = "INNER_MULTI_QUEUE_OFFSET";
/// Not reserved (5.x).
pub const TRACE_CONTEXT: &str = "TRACE_CONTEXT";
/// Arbitrary delay in seconds (5.x timer). Reserved.
pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
/// Arbitrary delay in milliseconds (5.x timer). Reserved.
pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
/// Absolute delivery time in ms (5.x timer). Reserved.
pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
/// Broker-internal timer key (5.x). Reserved.
pub const TIMER_ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
/// Broker-internal timer key (5.x). Reserved.
pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
/// Broker-internal timer key (5.x). Reserved.
pub const TIMER_ROLL_TIMES: &str = "TIMER_ROLL_TIMES";
/// Broker-internal timer key (5.x). Reserved.
pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
/// Broker-internal timer key (5.x). Reserved.
pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";
/// Broker-internal timer key (5.x). Reserved.
pub const TIMER_DELAY_LEVEL: &str = "TIMER_DELAY_LEVEL";
/// Reserved (5.x).
pub const BORN_HOST: &str = "__BORNHOST";
/// Reserved (5.x).
pub const BORN_TIMESTAMP: &str = "BORN_TIMESTAMP";
/// Appended by a 5.x broker with `enabledAppendPropCRC`. Reserved (5.x).
pub const CRC32: &str = "__CRC32#";
/// Reserved (5.x).
pub const DLQ_ORIGIN_TOPIC: &str = "DLQ_ORIGIN_TOPIC";
/// Reserved (5.x).
pub const DLQ_ORIGIN_MESSAGE_ID: &str = "DLQ_ORIGIN_MESSAGE_ID";
/// Prefix of transient keys, never stored by the broker (5.x).
pub const TRANSIENT_PREFIX: &str = "__RMQ.TRANSIENT.";
/// Transient topic sysflag key (5.x).
pub const TRANSIENT_TOPIC_CONFIG: &str = "__RMQ.TRANSIENT.TOPIC_SYS_FLAG";
/// Transient group sysflag key (5.x).
pub const TRANSIENT_GROUP_CONFIG: &str = "__RMQ.TRANSIENT.GROUP_SYS_FLAG";
/// Separator between user keys in the [`KEYS`] value.
pub const KEY_SEPARATOR: &str = " ";

/// The keys `putUserProperty` rejects (Java 5.x `MessageConst.STRING_HASH_SET`).
pub const RESERVED: &[&str] = &[
    TRACE_SWITCH,
    MSG_REGION,
    KEYS,
    TAGS,
    WAIT_STORE_MSG_OK,
    DELAY_TIME_LEVEL,
    RETRY_TOPIC,
    REAL_TOPIC,
    REAL_QUEUE_ID,
    TRANSACTION_PREPARED,
    PRODUCER_GROUP,
    MIN_OFFSET,
    MAX_OFFSET,
    BUYER_ID,
    ORIGIN_MESSAGE_ID,
    TRANSFER_FLAG,
    CORRECTION_FLAG,
    MQ2_FLAG,
    RECONSUME_TIME,
    UNIQ_KEY,
    MAX_RECONSUME_TIMES,
    CONSUME_START_TIMESTAMP,
    POP_CK,
    POP_CK_OFFSET,
    FIRST_POP_TIME,
    TRANSACTION_PREPARED_QUEUE_OFFSET,
    DUP_INFO,
    EXTEND_UNIQ_INFO,
    INSTANCE_ID,
    CORRELATION_ID,
    MESSAGE_REPLY_TO_CLIENT,
    MESSAGE_TTL,
    REPLY_MESSAGE_ARRIVE_TIME,
    PUSH_REPLY_TIME,
    CLUSTER,
    MESSAGE_TYPE,
    INNER_MULTI_QUEUE_OFFSET,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TIMER_ENQUEUE_MS,
    TIMER_DEQUEUE_MS,
    TIMER_ROLL_TIMES,
    TIMER_OUT_MS,
    TIMER_DEL_UNIQKEY,
    TIMER_DELAY_LEVEL,
    BORN_HOST,
    BORN_TIMESTAMP,
    DLQ_ORIGIN_TOPIC,
    DLQ_ORIGIN_MESSAGE_ID,
    CRC32,
];

/// Whether `key` is reserved for the client or broker (exact, case-sensitive match, as Java's
/// `HashSet<String>`).
pub fn is_reserved(key: &str) -> bool {
    RESERVED.contains(&key)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn reserved_set_matches_wire_table() {
        assert_eq!(RESERVED.len(), 51);
        for key in [
            "KEYS",
            "TAGS",
            "WAIT",
            "DELAY",
            "UNIQ_KEY",
            "TRAN_MSG",
            "PGROUP",
            "__CRC32#",
            "1ST_POP_TIME",
            "TIMER_DELAY_MS",
            "INNER_MULTI_QUEUE_OFFSET",
            "MIN_OFFSET",
        ] {
            assert!(is_reserved(key), "{key} should be reserved");
        }
        for key in [
            "TRANSACTION_CHECK_TIMES",
            "CHECK_IMMUNITY_TIME_IN_SECONDS",
            "__transactionId__",
            "INNER_MULTI_DISPATCH",
            "INNER_NUM",
            "INNER_BASE",
            "__SHARDINGKEY",
            "REDIRECT",
            "TRACE_CONTEXT",
            "PROPERTY_FORWARD_QUEUE_ID",
            "tags",
            "my-key",
            "",
        ] {
            assert!(!is_reserved(key), "{key} should not be reserved");
        }
    }

    #[test]
    fn reserved_entries_are_distinct() {
        for (i, a) in RESERVED.iter().enumerate() {
            assert!(!RESERVED[i + 1..].contains(a), "{a} listed twice");
        }
    }
}
