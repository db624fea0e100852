//! Typed custom headers (docs/protocol/WIRE.md §6, docs/protocol/STRATEGY.md §9): each encodes through [`ExtFields`] and
//! decodes from a parsed [`CommandHeader`] with `decode(&header, &mut scratch)`.
//!
//! Keys are the Java field names (or the one-letter names of
//! [`SendMessageRequestHeaderV2`]). Integers and booleans are sent as decimal strings,
//! optional fields (`Option`) are left out when `None`, exactly like Java's reflection-based
//! encoder which skips nulls. Decoding checks required keys ([`FieldError::Missing`] names the
//! key, like Java's `@CFNotNull` check), parses numbers like `Integer.parseInt` /
//! `Long.parseLong` ([`FieldError::Invalid`]) and booleans like `Boolean.parseBoolean`.
//!
//! String fields borrow from the frame when they have no escapes; otherwise (JSON escapes,
//! e.g. `properties` with `\u0001`) they are unescaped into the caller's [`Scratch`]
//! ([`FieldError::Unescape`] if it is too small). `Scratch::default()` is empty.
//!
//! Extra fields (ACL `AccessKey`/`Signature`, ...) can follow a typed header with
//! [`Chain`](super::Chain).

use super::header::{Collect, ExtSink};
use super::{
    CommandHeader, ExtFields, ExtValue, ExtVisitor, FieldError, FieldStr, Frame, HeaderError,
    Scratch,
};

impl Default for Scratch<'_> {
    fn default() -> Self {
        Scratch::empty()
    }
}

/// One header field's encoding and decoding (required `T` or optional `Option<T>`).
pub trait FieldSlot<'a>: Sized {
    /// Builds the field from the looked-up value (`None` = key absent).
    ///
    /// # Errors
    /// [`FieldError`] naming `key`.
    fn decode(
        v: Option<FieldStr<'a>>,
        scratch: &mut Scratch<'a>,
        key: &'static str,
    ) -> Result<Self, FieldError>;
    /// Visits the field (nothing when `None`).
    fn emit<V: ExtVisitor + ?Sized>(&self, key: &str, v: &mut V);
}

macro_rules! slot {
    ($ty:ty, |$f:ident, $s:ident, $k:ident| $parse:expr, |$me:ident| $to:expr) => {
        impl<'a> FieldSlot<'a> for $ty {
            #[cfg_attr(target_pointer_width = "64", inline(always))]
            fn decode(
                v: Option<FieldStr<'a>>,
                $s: &mut Scratch<'a>,
                $k: &'static str,
            ) -> Result<Self, FieldError> {
                let $f = v.ok_or(FieldError::Missing($k))?;
                $parse
            }
            fn emit<V: ExtVisitor + ?Sized>(&self, key: &str, v: &mut V) {
                let $me = self;
                v.field(key, $to);
            }
        }
        impl<'a> FieldSlot<'a> for Option<$ty> {
            #[cfg_attr(target_pointer_width = "64", inline(always))]
            fn decode(
                v: Option<FieldStr<'a>>,
                s: &mut Scratch<'a>,
                key: &'static str,
            ) -> Result<Self, FieldError> {
                match v {
                    None => Ok(None),
                    Some(_) => <$ty as FieldSlot<'a>>::decode(v, s, key).map(Some),
                }
            }
            fn emit<V: ExtVisitor + ?Sized>(&self, key: &str, v: &mut V) {
                if let Some(x) = self {
                    x.emit(key, v);
                }
            }
        }
    };
}

slot!(
    &'a str,
    |f, s, k| s.resolve(f).ok_or(FieldError::Unescape(k)),
    |me| ExtValue::Str(me)
);
slot!(
    i32,
    |f, _s, k| f.parse_i32().ok_or(FieldError::Invalid(k)),
    |me| ExtValue::Int(i64::from(*me))
);
slot!(
    i64,
    |f, _s, k| f.parse_i64().ok_or(FieldError::Invalid(k)),
    |me| ExtValue::Int(*me)
);
slot!(bool, |f, _s, _k| Ok(f.parse_bool()), |me| ExtValue::Bool(
    *me
));

/// Fills `slots[i]` with the value of `keys[i]` from the header's ext fields (last
/// occurrence wins, like Java's HashMap).
fn collect<'a>(h: &CommandHeader<'a>, keys: &[&str], slots: &mut [Option<FieldStr<'a>>]) {
    let mut c = Collect::new(keys, slots);
    h.for_each_ext(|k, v| c.field(k, v));
}

macro_rules! ext_header {
    (@decode $name:ident, $lt:lifetime, $h:ident, $scratch:ident, $( $f:ident = $key:literal ),*) => {{
        const KEYS: &[&str] = &[$($key),*];
        let mut slots: [Option<FieldStr<$lt>>; KEYS.len()] = [None; KEYS.len()];
        collect($h, KEYS, &mut slots);
        ext_header!(@slots $name, slots, $scratch, $( $f = $key ),*)
    }};
    (@slots $name:ident, $slots:expr, $scratch:ident, $( $f:ident = $key:literal ),*) => {{
        #[allow(unused_mut, unused_variables)]
        let mut it = $slots.into_iter();
        let _ = &$scratch;
        Ok($name { $( $f: FieldSlot::decode(it.next().flatten(), $scratch, $key)?, )* })
    }};
    (
        $(#[$m:meta])*
        pub struct $name:ident<$lt:lifetime> {
            $( $(#[$fm:meta])* $f:ident : $ty:ty = $key:literal, )*
        }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name<$lt> { $( $(#[$fm])* #[doc = concat!("Key `", $key, "`.")] pub $f: $ty, )* }
        impl<$lt> ExtFields for $name<$lt> {
            fn visit_fields<V: ExtVisitor + ?Sized>(&self, v: &mut V) {
                $( FieldSlot::emit(&self.$f, $key, v); )*
            }
        }
        impl<$lt> $name<$lt> {
            /// The ext keys, in the fields' order (the slots of [`Self::from_slots`]).
            #[allow(dead_code)]
            pub(crate) const KEYS: [&'static str; [$($key),*].len()] = [$($key),*];

            /// Decodes from a parsed header's ext fields.
            ///
            /// # Errors
            /// [`FieldError`] naming the first bad or missing key.
            pub fn decode(
                h: &CommandHeader<$lt>,
                scratch: &mut Scratch<$lt>,
            ) -> Result<Self, FieldError> {
                ext_header!(@decode $name, $lt, h, scratch, $( $f = $key ),*)
            }

            /// Decodes from the values of [`Self::KEYS`] collected while the header was
            /// parsed ([`Collect`]).
            #[allow(dead_code)]
            pub(crate) fn from_slots(
                slots: [Option<FieldStr<$lt>>; [$($key),*].len()],
                scratch: &mut Scratch<$lt>,
            ) -> Result<Self, FieldError> {
                ext_header!(@slots $name, slots, scratch, $( $f = $key ),*)
            }
        }
    };
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$fm:meta])* $f:ident : $ty:ty = $key:literal, )*
        }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
        pub struct $name { $( $(#[$fm])* #[doc = concat!("Key `", $key, "`.")] pub $f: $ty, )* }
        impl ExtFields for $name {
            fn visit_fields<V: ExtVisitor + ?Sized>(&self, _v: &mut V) {
                $( FieldSlot::emit(&self.$f, $key, _v); )*
            }
        }
        impl $name {
            /// Decodes from a parsed header's ext fields.
            ///
            /// # Errors
            /// [`FieldError`] naming the first bad or missing key.
            pub fn decode<'a>(
                h: &CommandHeader<'a>,
                scratch: &mut Scratch<'a>,
            ) -> Result<Self, FieldError> {
                ext_header!(@decode $name, 'a, h, scratch, $( $f = $key ),*)
            }
        }
    };
}

ext_header! {
    /// GET_ROUTEINFO_BY_TOPIC (105) request.
    pub struct GetRouteInfoRequestHeader<'a> {
        /// Topic (required).
        topic: &'a str = "topic",
        /// Ask for standard JSON route data (honoured from 4.9.4).
        accept_standard_json_only: Option<bool> = "acceptStandardJsonOnly",
    }
}

ext_header! {
    /// HEART_BEAT (34) request header: empty. 5.x sends it (`"extFields":{}`); 4.9.x sends no
    /// header (use `ext: None`).
    pub struct HeartbeatRequestHeader {}
}

ext_header! {
    /// UNREGISTER_CLIENT (35) request.
    pub struct UnregisterClientRequestHeader<'a> {
        /// Client id (required).
        client_id: &'a str = "clientID",
        /// Producer group.
        producer_group: Option<&'a str> = "producerGroup",
        /// Consumer group.
        consumer_group: Option<&'a str> = "consumerGroup",
    }
}

ext_header! {
    /// SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE response (docs/protocol/WIRE.md §6.4).
    pub struct SendMessageResponseHeader<'a> {
        /// offsetMsgId of the stored message (comma-joined for a batch).
        msg_id: &'a str = "msgId",
        /// Queue written.
        queue_id: i32 = "queueId",
        /// Consume-queue offset (of the first message of a batch).
        queue_offset: i64 = "queueOffset",
        /// 5.x: the message's UNIQ_KEY.
        transaction_id: Option<&'a str> = "transactionId",
        /// 5.x inner-batch topics.
        batch_uniq_id: Option<&'a str> = "batchUniqId",
        /// 5.3.2+.
        recall_handle: Option<&'a str> = "recallHandle",
        /// Broker region.
        msg_region: Option<&'a str> = "MSG_REGION",
        /// Whether tracing is on.
        trace_on: Option<bool> = "TRACE_ON",
    }
}

/// The values of [`SendMessageResponseHeader::KEYS`], collected while a frame's header is
/// parsed ([`SendMessageResponseHeader::parse_collecting`]); nothing on 32-bit targets, which
/// scan the ext fields again instead (less code in the firmware).
#[cfg(target_pointer_width = "64")]
pub(crate) type ResponseSlots<'a> =
    [Option<FieldStr<'a>>; SendMessageResponseHeader::<'static>::KEYS.len()];
/// See the 64-bit definition.
#[cfg(not(target_pointer_width = "64"))]
pub(crate) type ResponseSlots<'a> = core::marker::PhantomData<&'a ()>;

impl<'a> SendMessageResponseHeader<'a> {
    /// Parses `frame`'s header; on 64-bit targets the ext fields a send response carries are
    /// collected in the same pass (the client reads every frame this way: most answers are
    /// send responses).
    ///
    /// # Errors
    /// As [`CommandHeader::parse`].
    pub(crate) fn parse_collecting<T: AsRef<[u8]> + ?Sized>(
        frame: &Frame<&'a T>,
    ) -> Result<(CommandHeader<'a>, ResponseSlots<'a>), super::DecodeError> {
        #[cfg(target_pointer_width = "64")]
        {
            let mut slots: ResponseSlots<'a> = [None; Self::KEYS.len()];
            let h = CommandHeader::parse_bytes_into(
                frame.serialize_type(),
                frame.header_ref(),
                &mut Collect::new(&Self::KEYS, &mut slots),
            )?;
            Ok((h, slots))
        }
        #[cfg(not(target_pointer_width = "64"))]
        {
            Ok((CommandHeader::parse(frame)?, core::marker::PhantomData))
        }
    }

    /// Decodes the header [`Self::parse_collecting`] parsed, from what it collected.
    ///
    /// # Errors
    /// As [`Self::decode`].
    pub(crate) fn decode_collected(
        h: &CommandHeader<'a>,
        slots: ResponseSlots<'a>,
        scratch: &mut Scratch<'a>,
    ) -> Result<Self, FieldError> {
        #[cfg(target_pointer_width = "64")]
        {
            // One UTF-8 check for all the string fields (see `decode_frame_with`).
            if let Some(text) = h
                .ext_fields()
                .and_then(|e| core::str::from_utf8(e.raw()).ok())
            {
                scratch.set_utf8_base(text);
            }
            Self::from_slots(slots, scratch)
        }
        #[cfg(not(target_pointer_width = "64"))]
        {
            let _ = slots;
            Self::decode(h, scratch)
        }
    }
}

ext_header! {
    /// PULL_MESSAGE (11) request (docs/protocol/WIRE.md §6.5, docs/protocol/STRATEGY.md §9.1).
    pub struct PullMessageRequestHeader<'a> {
        /// Consumer group.
        consumer_group: &'a str = "consumerGroup",
        /// Topic.
        topic: &'a str = "topic",
        /// Queue id.
        queue_id: i32 = "queueId",
        /// Offset to pull from.
        queue_offset: i64 = "queueOffset",
        /// Batch size.
        max_msg_nums: i32 = "maxMsgNums",
        /// PullSysFlag bits.
        sys_flag: i32 = "sysFlag",
        /// Offset to commit (with the COMMIT_OFFSET flag).
        commit_offset: i64 = "commitOffset",
        /// Long-poll hold time.
        suspend_timeout_millis: i64 = "suspendTimeoutMillis",
        /// Subscription expression.
        subscription: Option<&'a str> = "subscription",
        /// Subscription version.
        sub_version: i64 = "subVersion",
        /// `TAG` or `SQL92`.
        expression_type: Option<&'a str> = "expressionType",
        /// 5.x byte limit.
        max_msg_bytes: Option<i32> = "maxMsgBytes",
        /// Broker name (4.9.5+).
        bname: Option<&'a str> = "bname",
    }
}

ext_header! {
    /// PULL_MESSAGE response header.
    pub struct PullMessageResponseHeader {
        /// Broker id to pull from next.
        suggest_which_broker_id: i64 = "suggestWhichBrokerId",
        /// Next offset.
        next_begin_offset: i64 = "nextBeginOffset",
        /// Queue min offset.
        min_offset: i64 = "minOffset",
        /// Queue max offset.
        max_offset: i64 = "maxOffset",
        /// 5.x static topics.
        offset_delta: Option<i64> = "offsetDelta",
        /// 5.x.
        topic_sys_flag: Option<i32> = "topicSysFlag",
        /// 5.x.
        group_sys_flag: Option<i32> = "groupSysFlag",
        /// 5.x.
        forbidden_type: Option<i32> = "forbiddenType",
    }
}

ext_header! {
    /// QUERY_CONSUMER_OFFSET (14) request.
    pub struct QueryConsumerOffsetRequestHeader<'a> {
        /// Consumer group.
        consumer_group: &'a str = "consumerGroup",
        /// Topic.
        topic: &'a str = "topic",
        /// Queue id.
        queue_id: i32 = "queueId",
        /// 5.x; the Java client leaves it out.
        set_zero_if_not_found: Option<bool> = "setZeroIfNotFound",
    }
}

ext_header! {
    /// QUERY_CONSUMER_OFFSET response.
    pub struct QueryConsumerOffsetResponseHeader {
        /// Stored offset.
        offset: i64 = "offset",
    }
}

ext_header! {
    /// UPDATE_CONSUMER_OFFSET (15) request.
    pub struct UpdateConsumerOffsetRequestHeader<'a> {
        /// Consumer group.
        consumer_group: &'a str = "consumerGroup",
        /// Topic.
        topic: &'a str = "topic",
        /// Queue id.
        queue_id: i32 = "queueId",
        /// Offset to store.
        commit_offset: i64 = "commitOffset",
    }
}

ext_header! {
    /// CONSUMER_SEND_MSG_BACK (36) request: a message the consumer could not process goes
    /// back to the broker, which stores it in `%RETRY%<group>` (or `%DLQ%<group>`).
    pub struct ConsumerSendMsgBackRequestHeader<'a> {
        /// The message's commit-log offset (not its queue offset).
        offset: i64 = "offset",
        /// Consumer group.
        group: &'a str = "group",
        /// Delay level of the retry; 0 lets the broker choose (3 + reconsume times), -1 sends
        /// the message to the dead-letter queue at once.
        delay_level: i32 = "delayLevel",
        /// The message's id.
        origin_msg_id: Option<&'a str> = "originMsgId",
        /// The topic it was consumed from (the original topic for a retried message).
        origin_topic: Option<&'a str> = "originTopic",
        /// Unit mode (always `false`).
        unit_mode: bool = "unitMode",
        /// Deliveries before the broker moves it to `%DLQ%<group>` (honoured from 3.4.9).
        max_reconsume_times: Option<i32> = "maxReconsumeTimes",
        /// Broker name (5.x `RpcRequestHeader`).
        bname: Option<&'a str> = "bname",
    }
}

ext_header! {
    /// GET_CONSUMER_RUNNING_INFO (307, broker to client) request.
    pub struct GetConsumerRunningInfoRequestHeader<'a> {
        /// Consumer group.
        consumer_group: &'a str = "consumerGroup",
        /// Client id.
        client_id: Option<&'a str> = "clientId",
        /// Whether a thread dump is wanted (Java only).
        jstack_enable: Option<bool> = "jstackEnable",
    }
}

ext_header! {
    /// GET_CONSUMER_STATUS_FROM_CLIENT (221, broker to client, fanned out from the admin API's
    /// `getConsumeStatus`, 223)
    /// request.
    pub struct GetConsumerStatusRequestHeader<'a> {
        /// The topic whose offsets are asked for.
        topic: &'a str = "topic",
        /// Consumer group.
        group: &'a str = "group",
        /// The client the operator named (unused by the client).
        client_addr: Option<&'a str> = "clientAddr",
    }
}

ext_header! {
    /// GET_CONSUMER_LIST_BY_GROUP (38) request.
    pub struct GetConsumerListByGroupRequestHeader<'a> {
        /// Consumer group.
        consumer_group: &'a str = "consumerGroup",
    }
}

ext_header! {
    /// NOTIFY_CONSUMER_IDS_CHANGED (40, broker to client) request.
    pub struct NotifyConsumerIdsChangedRequestHeader<'a> {
        /// Consumer group.
        consumer_group: &'a str = "consumerGroup",
    }
}

ext_header! {
    /// UPDATE_AND_CREATE_TOPIC (17) request (`mqadmin updateTopic`; 5.x also knows
    /// `attributes` and `force`, both optional).
    pub struct CreateTopicRequestHeader<'a> {
        /// Topic.
        topic: &'a str = "topic",
        /// The template topic (`TBW102`).
        default_topic: &'a str = "defaultTopic",
        /// Read queues.
        read_queue_nums: i32 = "readQueueNums",
        /// Write queues.
        write_queue_nums: i32 = "writeQueueNums",
        /// Permission bits (2 write, 4 read).
        perm: i32 = "perm",
        /// `SINGLE_TAG`.
        topic_filter_type: &'a str = "topicFilterType",
        /// System flags (0).
        topic_sys_flag: Option<i32> = "topicSysFlag",
        /// An ordered topic.
        order: bool = "order",
    }
}

ext_header! {
    /// GET_CONSUME_STATS (208) request.
    pub struct GetConsumeStatsRequestHeader<'a> {
        /// Consumer group.
        consumer_group: &'a str = "consumerGroup",
        /// Only this topic (all the group's topics when absent).
        topic: Option<&'a str> = "topic",
    }
}

ext_header! {
    /// INVOKE_BROKER_TO_RESET_OFFSET (222) request (`mqadmin resetOffsetByTime`).
    pub struct ResetOffsetRequestHeader<'a> {
        /// Topic.
        topic: &'a str = "topic",
        /// Consumer group.
        group: &'a str = "group",
        /// Store timestamp, Unix ms: each queue moves to its first message at or after it.
        timestamp: i64 = "timestamp",
        /// Move offsets backwards too.
        is_force: bool = "isForce",
    }
}

ext_header! {
    /// QUERY_MESSAGE (12) request: the messages of `topic` indexed under `key` (a `KEYS` entry
    /// or a `UNIQ_KEY`) stored between the timestamps. With the extra field
    /// `_UNIQUE_KEY_QUERY=true` the broker looks for one unique key (`maxNum` its own).
    pub struct QueryMessageRequestHeader<'a> {
        /// Topic.
        topic: &'a str = "topic",
        /// The key.
        key: &'a str = "key",
        /// At most this many messages.
        max_num: i32 = "maxNum",
        /// Stored at or after, Unix ms.
        begin_timestamp: i64 = "beginTimestamp",
        /// Stored at or before, Unix ms.
        end_timestamp: i64 = "endTimestamp",
    }
}

ext_header! {
    /// VIEW_MESSAGE_BY_ID (33) request, to the store host an offsetMsgId names (5.3.3 clients
    /// also send the optional `topic`).
    pub struct ViewMessageRequestHeader<'a> {
        /// The commit-log offset.
        offset: i64 = "offset",
        /// Topic.
        topic: Option<&'a str> = "topic",
    }
}

ext_header! {
    /// GET_MAX_OFFSET (30) request.
    pub struct GetMaxOffsetRequestHeader<'a> {
        /// Topic.
        topic: &'a str = "topic",
        /// Queue id.
        queue_id: i32 = "queueId",
        /// 5.x (a primitive there, default `true`, always sent by 5.x clients).
        committed: Option<bool> = "committed",
    }
}

ext_header! {
    /// SEARCH_OFFSET_BY_TIMESTAMP (29) request (5.x also knows `boundaryType`, LOWER when
    /// absent: the first message stored at or after `timestamp`).
    pub struct SearchOffsetRequestHeader<'a> {
        /// Topic.
        topic: &'a str = "topic",
        /// Queue id.
        queue_id: i32 = "queueId",
        /// Store timestamp, ms.
        timestamp: i64 = "timestamp",
    }
}

ext_header! {
    /// GET_MIN_OFFSET (31) request.
    pub struct GetMinOffsetRequestHeader<'a> {
        /// Topic.
        topic: &'a str = "topic",
        /// Queue id.
        queue_id: i32 = "queueId",
    }
}

ext_header! {
    /// GET_MAX_OFFSET / GET_MIN_OFFSET response.
    pub struct GetMaxOffsetResponseHeader {
        /// The offset.
        offset: i64 = "offset",
    }
}

ext_header! {
    /// END_TRANSACTION (37, oneway) request.
    pub struct EndTransactionRequestHeader<'a> {
        /// Producer group.
        producer_group: &'a str = "producerGroup",
        /// The send result's queueOffset.
        tran_state_table_offset: i64 = "tranStateTableOffset",
        /// Offset decoded from offsetMsgId.
        commit_log_offset: i64 = "commitLogOffset",
        /// 0 unknown / 8 commit / 12 rollback.
        commit_or_rollback: i32 = "commitOrRollback",
        /// Whether answering a check.
        from_transaction_check: Option<bool> = "fromTransactionCheck",
        /// UNIQ_KEY.
        msg_id: &'a str = "msgId",
        /// Transaction id.
        transaction_id: Option<&'a str> = "transactionId",
        /// 5.x.
        topic: Option<&'a str> = "topic",
        /// Broker name (4.9.5+).
        bname: Option<&'a str> = "bname",
    }
}

ext_header! {
    /// RECALL_MESSAGE (370, 5.3.2+) request.
    pub struct RecallMessageRequestHeader<'a> {
        /// Producer group.
        producer_group: Option<&'a str> = "producerGroup",
        /// The message's topic.
        topic: &'a str = "topic",
        /// The send result's recall handle.
        recall_handle: &'a str = "recallHandle",
        /// The broker named in the handle.
        bname: Option<&'a str> = "bname",
    }
}

ext_header! {
    /// RECALL_MESSAGE (370) response.
    pub struct RecallMessageResponseHeader<'a> {
        /// The recalled message's UNIQ_KEY.
        msg_id: &'a str = "msgId",
    }
}

ext_header! {
    /// POP_MESSAGE (200050, 5.x) request (docs/protocol/POP.md §2). Its code does not fit the
    /// ROCKETMQ binary header: it always goes as JSON.
    pub struct PopMessageRequestHeader<'a> {
        /// Consumer group.
        consumer_group: &'a str = "consumerGroup",
        /// The topic (never a retry topic).
        topic: &'a str = "topic",
        /// The queue, or -1: every readable queue of the broker.
        queue_id: i32 = "queueId",
        /// At most this many messages (the broker refuses more than 32).
        max_msg_nums: i32 = "maxMsgNums",
        /// How long the popped messages stay invisible (ms).
        invisible_time: i64 = "invisibleTime",
        /// How long the broker may hold the request when nothing is there (ms; 0: answer now).
        poll_time: i64 = "pollTime",
        /// The request's birth (Unix ms); 0: the broker's clock.
        born_time: i64 = "bornTime",
        /// Where a group without an offset starts: 0 the first message, 1 the last.
        init_mode: i32 = "initMode",
        /// `TAG` or `SQL92`.
        exp_type: Option<&'a str> = "expType",
        /// The filter expression.
        exp: Option<&'a str> = "exp",
        /// Orderly pop.
        order: Option<bool> = "order",
        /// The broker asked.
        bname: Option<&'a str> = "bname",
    }
}

ext_header! {
    /// ACK_MESSAGE (200051) and, with `invisible_time`, CHANGE_MESSAGE_INVISIBLETIME (200053)
    /// requests (docs/protocol/POP.md §5, §6): both name a popped message by its handle.
    pub struct PopHandleRequestHeader<'a> {
        /// Consumer group.
        consumer_group: &'a str = "consumerGroup",
        /// The topic the message is in (the retry topic for a revived message).
        topic: &'a str = "topic",
        /// Its queue.
        queue_id: i32 = "queueId",
        /// The whole handle (`POP_CK`).
        extra_info: &'a str = "extraInfo",
        /// Its queue offset.
        offset: i64 = "offset",
        /// CHANGE_MESSAGE_INVISIBLETIME only: invisible for this long from now (ms).
        invisible_time: Option<i64> = "invisibleTime",
        /// The broker that popped it.
        bname: Option<&'a str> = "bname",
    }
}

ext_header! {
    /// CHECK_TRANSACTION_STATE (39, broker to producer) request.
    pub struct CheckTransactionStateRequestHeader<'a> {
        /// Half-message queue offset.
        tran_state_table_offset: i64 = "tranStateTableOffset",
        /// Commit-log offset.
        commit_log_offset: i64 = "commitLogOffset",
        /// UNIQ_KEY.
        msg_id: Option<&'a str> = "msgId",
        /// Transaction id.
        transaction_id: Option<&'a str> = "transactionId",
        /// offsetMsgId.
        offset_msg_id: Option<&'a str> = "offsetMsgId",
        /// 5.x.
        topic: Option<&'a str> = "topic",
        /// Broker name.
        bname: Option<&'a str> = "bname",
    }
}

/// SEND_MESSAGE (10) request header content (docs/protocol/WIRE.md §6.1); encodes with the V1 (Java field
/// name) keys. Wrap it in [`SendMessageRequestHeaderV2`] for codes 310/320.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendMessageRequestHeader<'a> {
    /// `producerGroup` / `a` (required).
    pub producer_group: &'a str,
    /// `topic` / `b` (required).
    pub topic: &'a str,
    /// `defaultTopic` / `c` (required; `"TBW102"`).
    pub default_topic: &'a str,
    /// `defaultTopicQueueNums` / `d` (required; 4).
    pub default_topic_queue_nums: i32,
    /// `queueId` / `e` (required).
    pub queue_id: i32,
    /// `sysFlag` / `f` (required).
    pub sys_flag: i32,
    /// `bornTimestamp` / `g` (required, ms).
    pub born_timestamp: i64,
    /// `flag` / `h` (required).
    pub flag: i32,
    /// `properties` / `i` (docs/protocol/WIRE.md §9 encoding).
    pub properties: Option<&'a str>,
    /// `reconsumeTimes` / `j`.
    pub reconsume_times: Option<i32>,
    /// `unitMode` / `k` (V2 always sends it; `None` is sent as `false`).
    pub unit_mode: Option<bool>,
    /// `batch` / `m` (V2 always sends it; `None` is sent as `false`).
    pub batch: Option<bool>,
    /// `maxReconsumeTimes` / `l` (retry topics only).
    pub max_reconsume_times: Option<i32>,
    /// `bname` (V1) / `n` (V2): target broker name (4.9.5+).
    pub broker_name: Option<&'a str>,
}

const V1_KEYS: [&str; 14] = [
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "unitMode",
    "batch",
    "maxReconsumeTimes",
    "bname",
];
// Same order as V1_KEYS: batch is `m`, maxReconsumeTimes is `l`.
const V2_KEYS: [&str; 14] = [
    "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "l", "n",
];

impl<'a> SendMessageRequestHeader<'a> {
    fn decode_with(
        h: &CommandHeader<'a>,
        scratch: &mut Scratch<'a>,
        keys: &[&'static str; 14],
    ) -> Result<Self, FieldError> {
        let mut s: [Option<FieldStr<'a>>; 14] = [None; 14];
        collect(h, keys, &mut s);
        Self::from_slots(&s, scratch, keys)
    }

    /// Parses the frame's header and collects the ext fields in the same pass.
    fn decode_frame_with<T: AsRef<[u8]> + ?Sized>(
        frame: &Frame<&'a T>,
        scratch: &mut Scratch<'a>,
        keys: &[&'static str; 14],
    ) -> Result<(CommandHeader<'a>, Self), HeaderError> {
        let mut s: [Option<FieldStr<'a>>; 14] = [None; 14];
        let h = CommandHeader::parse_bytes_into(
            frame.serialize_type(),
            frame.header_ref(),
            &mut Collect::new(keys, &mut s),
        )
        .map_err(HeaderError::Decode)?;
        // Check UTF-8 once for all the ext fields rather than once per string field (Java
        // writes UTF-8; if this fails, each field is checked on its own as usual).
        if let Some(text) = h
            .ext_fields()
            .and_then(|e| core::str::from_utf8(e.raw()).ok())
        {
            scratch.set_utf8_base(text);
        }
        let v = Self::from_slots(&s, scratch, keys).map_err(HeaderError::Field)?;
        Ok((h, v))
    }

    #[inline]
    fn from_slots(
        s: &[Option<FieldStr<'a>>; 14],
        scratch: &mut Scratch<'a>,
        keys: &[&'static str; 14],
    ) -> Result<Self, FieldError> {
        let [a, b, c, d, e, f, g, hh, i, j, k, m, l, n] = *s;
        let [ka, kb, kc, kd, ke, kf, kg, kh, ki, kj, kk, km, kl, kn] = *keys;
        Ok(SendMessageRequestHeader {
            producer_group: FieldSlot::decode(a, scratch, ka)?,
            topic: FieldSlot::decode(b, scratch, kb)?,
            default_topic: FieldSlot::decode(c, scratch, kc)?,
            default_topic_queue_nums: FieldSlot::decode(d, scratch, kd)?,
            queue_id: FieldSlot::decode(e, scratch, ke)?,
            sys_flag: FieldSlot::decode(f, scratch, kf)?,
            born_timestamp: FieldSlot::decode(g, scratch, kg)?,
            flag: FieldSlot::decode(hh, scratch, kh)?,
            properties: FieldSlot::decode(i, scratch, ki)?,
            reconsume_times: FieldSlot::decode(j, scratch, kj)?,
            unit_mode: FieldSlot::decode(k, scratch, kk)?,
            batch: FieldSlot::decode(m, scratch, km)?,
            max_reconsume_times: FieldSlot::decode(l, scratch, kl)?,
            broker_name: FieldSlot::decode(n, scratch, kn)?,
        })
    }

    /// Decodes a V1 (code 10) header.
    ///
    /// # Errors
    /// [`FieldError`] naming the first bad or missing key.
    pub fn decode(h: &CommandHeader<'a>, scratch: &mut Scratch<'a>) -> Result<Self, FieldError> {
        Self::decode_with(h, scratch, &V1_KEYS)
    }

    /// Decodes a frame's command header and its V1 header in one pass over the header bytes
    /// (the same result as [`CommandHeader::parse`] followed by
    /// [`SendMessageRequestHeader::decode`], without scanning the ext fields twice).
    ///
    /// # Errors
    /// [`HeaderError::Decode`] for a malformed header, [`HeaderError::Field`] naming the
    /// first bad or missing key.
    pub fn decode_frame<T: AsRef<[u8]> + ?Sized>(
        frame: &Frame<&'a T>,
        scratch: &mut Scratch<'a>,
    ) -> Result<(CommandHeader<'a>, Self), HeaderError> {
        Self::decode_frame_with(frame, scratch, &V1_KEYS)
    }

    fn visit<V: ExtVisitor + ?Sized>(&self, v: &mut V, keys: &[&str; 14], v2: bool) {
        let [ka, kb, kc, kd, ke, kf, kg, kh, ki, kj, kk, km, kl, kn] = *keys;
        self.producer_group.emit(ka, v);
        self.topic.emit(kb, v);
        self.default_topic.emit(kc, v);
        self.default_topic_queue_nums.emit(kd, v);
        self.queue_id.emit(ke, v);
        self.sys_flag.emit(kf, v);
        self.born_timestamp.emit(kg, v);
        self.flag.emit(kh, v);
        self.properties.emit(ki, v);
        self.reconsume_times.emit(kj, v);
        if v2 {
            // Java always sends k and m (primitive booleans in 4.9.x); l goes between them
            // in key order.
            self.unit_mode.unwrap_or(false).emit(kk, v);
            self.max_reconsume_times.emit(kl, v);
            self.batch.unwrap_or(false).emit(km, v);
        } else {
            self.unit_mode.emit(kk, v);
            self.batch.emit(km, v);
            self.max_reconsume_times.emit(kl, v);
        }
        self.broker_name.emit(kn, v);
    }
}

impl ExtFields for SendMessageRequestHeader<'_> {
    fn visit_fields<V: ExtVisitor + ?Sized>(&self, v: &mut V) {
        self.visit(v, &V1_KEYS, false);
    }
}

/// SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320) header: the same content under the keys
/// `a`..`n` (docs/protocol/WIRE.md §6.2), written in key order; `k` and `m` are always sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendMessageRequestHeaderV2<'a>(pub SendMessageRequestHeader<'a>);

impl<'a> SendMessageRequestHeaderV2<'a> {
    /// Decodes a V2 header.
    ///
    /// # Errors
    /// [`FieldError`] naming the first bad or missing key.
    pub fn decode(h: &CommandHeader<'a>, scratch: &mut Scratch<'a>) -> Result<Self, FieldError> {
        SendMessageRequestHeader::decode_with(h, scratch, &V2_KEYS).map(SendMessageRequestHeaderV2)
    }

    /// Decodes a frame's command header and its V2 header in one pass over the header bytes
    /// (the same result as [`CommandHeader::parse`] followed by
    /// [`SendMessageRequestHeaderV2::decode`], without scanning the ext fields twice).
    ///
    /// ```
    /// use rmq_core::wire::headers::{SendMessageRequestHeader, SendMessageRequestHeaderV2};
    /// use rmq_core::wire::{CommandRepr, Frame, RequestCode, Scratch, SerializeType};
    ///
    /// let v2 = SendMessageRequestHeaderV2(SendMessageRequestHeader {
    ///     producer_group: "pg",
    ///     topic: "TopicTest",
    ///     default_topic: "TBW102",
    ///     default_topic_queue_nums: 4,
    ///     queue_id: 1,
    ///     sys_flag: 0,
    ///     born_timestamp: 1_700_000_000_000,
    ///     flag: 0,
    ///     properties: Some("TAGS\u{1}TagA\u{2}"),
    ///     reconsume_times: Some(0),
    ///     unit_mode: Some(false),
    ///     batch: Some(false),
    ///     max_reconsume_times: None,
    ///     broker_name: None,
    /// });
    /// let repr = CommandRepr::request(RequestCode::SEND_MESSAGE_V2, 7, 479, Some(&v2));
    /// let mut buf = [0u8; 512];
    /// let n = repr.emit_frame_prefix_and_header(SerializeType::JSON, 0, &mut buf).unwrap();
    ///
    /// let frame = Frame::new_checked(&buf[..n]).unwrap();
    /// let mut space = [0u8; 64]; // `properties` has escapes in JSON
    /// let (header, back) =
    ///     SendMessageRequestHeaderV2::decode_frame(&frame, &mut Scratch::new(&mut space)).unwrap();
    /// assert_eq!((header.opaque(), back), (7, v2));
    /// ```
    ///
    /// # Errors
    /// [`HeaderError::Decode`] for a malformed header, [`HeaderError::Field`] naming the
    /// first bad or missing key.
    pub fn decode_frame<T: AsRef<[u8]> + ?Sized>(
        frame: &Frame<&'a T>,
        scratch: &mut Scratch<'a>,
    ) -> Result<(CommandHeader<'a>, Self), HeaderError> {
        SendMessageRequestHeader::decode_frame_with(frame, scratch, &V2_KEYS)
            .map(|(h, v)| (h, SendMessageRequestHeaderV2(v)))
    }
}

impl ExtFields for SendMessageRequestHeaderV2<'_> {
    fn visit_fields<V: ExtVisitor + ?Sized>(&self, v: &mut V) {
        self.0.visit(v, &V2_KEYS, true);
    }
}
