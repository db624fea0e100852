//! Transactional messages (Java `TransactionMQProducer`; docs/protocol/STRATEGY.md §12): what
//! a half message carries, the END_TRANSACTION that settles it, and the broker's check-back.
//!
//! 1. **Half message**: an ordinary synchronous send whose properties say `TRAN_MSG=true` and
//!    `PGROUP=<producer group>` ([`crate::producer::MessageFields::transaction`]) and whose
//!    sysFlag has [`HALF_SYS_FLAG`]. The broker keeps it out of the topic (in
//!    `RMQ_SYS_TRANS_HALF_TOPIC`) until it is settled. A delay level is dropped, as Java does.
//! 2. **The local transaction** runs in the application once the half message is stored
//!    (`SEND_OK`; any other store status settles it as rollback, as Java does). Its outcome,
//!    a [`LocalState`], goes to the broker that stored the half message in an
//!    END_TRANSACTION (37, oneway, [`EndTransaction::after_send`]): commit delivers the
//!    message, rollback discards it, unknown leaves it to the check-back.
//! 3. **Check-back**: for a half message still unsettled after `transactionTimeOut` (6 s by
//!    default), the broker sends CHECK_TRANSACTION_STATE (39) to a producer of the group, with
//!    the half message as body ([`check_request`]); the application's checker answers, and
//!    the client sends END_TRANSACTION with `fromTransactionCheck=true`
//!    ([`EndTransaction::answer`]) to the broker that asked. The broker checks again later
//!    while the answer is unknown (at most `transactionCheckMax`, 15, times, then discards).
//!
//! The [`crate::client::Client`] hands a check to the application
//! ([`crate::client::Inbound::Check`]) and writes every END_TRANSACTION at once, oneway, with
//! an opaque no request has ([`crate::client::Client::end_transaction`]).
//!
//! ```
//! use rmq_core::transaction::{EndTransaction, LocalState};
//!
//! // The half message was stored at queue offset 7, commit-log offset 0x1234.
//! let v5 = rmq_core::wire::version::V5_3_3;
//! let end = EndTransaction::after_send(
//!     "pg", "Orders", "broker-a", v5, 7, "7F00000100002A9F0000000000001234",
//!     "7F000001000118B4AAC2000000000001", LocalState::Commit, None,
//! ).unwrap();
//! let h = end.header();
//! assert_eq!((h.commit_log_offset, h.tran_state_table_offset), (0x1234, 7));
//! assert_eq!(h.commit_or_rollback, 8);
//! assert_eq!(h.from_transaction_check, Some(false));
//! assert_eq!(h.transaction_id, Some("7F000001000118B4AAC2000000000001"));
//! ```

use crate::message::stored::CrcCheck;
use crate::message::{OffsetMsgId, StoredMessage, SysFlag, keys};
use crate::wire::headers::EndTransactionRequestHeader;
use crate::wire::{CommandHeader, Frame};

/// The sysFlag bit of a half message (`TRANSACTION_PREPARED_TYPE`).
pub const HALF_SYS_FLAG: i32 = SysFlag::TRANSACTION_PREPARED_TYPE.0;

/// The outcome of a local transaction (Java `LocalTransactionState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LocalState {
    /// Deliver the message (`COMMIT_MESSAGE`).
    Commit,
    /// Discard it (`ROLLBACK_MESSAGE`).
    Rollback,
    /// Not known yet: the broker asks again later (`UNKNOW`).
    Unknown,
}

impl LocalState {
    /// The `commitOrRollback` header value (a sysFlag transaction type: 8, 12, or 0).
    pub const fn commit_or_rollback(self) -> i32 {
        match self {
            LocalState::Commit => SysFlag::TRANSACTION_COMMIT_TYPE.0,
            LocalState::Rollback => SysFlag::TRANSACTION_ROLLBACK_TYPE.0,
            LocalState::Unknown => SysFlag::TRANSACTION_NOT_TYPE.0,
        }
    }
}

/// The fields of one END_TRANSACTION (37, oneway).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndTransaction<'a> {
    /// The producer group.
    pub producer_group: &'a str,
    /// The message's topic.
    pub topic: &'a str,
    /// The broker that stored the half message.
    pub broker_name: &'a str,
    /// The half message's queue offset (`tranStateTableOffset`).
    pub tran_state_table_offset: i64,
    /// The half message's commit-log offset.
    pub commit_log_offset: i64,
    /// The message's UNIQ_KEY (`msgId`).
    pub msg_id: &'a str,
    /// The broker's transaction id (5.x fills it in; 4.9 does not).
    pub transaction_id: Option<&'a str>,
    /// The outcome.
    pub state: LocalState,
    /// Whether this answers a check-back.
    pub from_check: bool,
    /// Why the outcome is unknown (the local transaction or the checker failed), as `remark`.
    pub remark: Option<&'a str>,
}

impl<'a> EndTransaction<'a> {
    /// The END_TRANSACTION after the half message of `topic` was stored on `broker_name` at
    /// `queue_offset` with `offset_msg_id` (the send's receipt), for the message whose
    /// UNIQ_KEY is `msg_id`, by a broker answering with remoting version `broker_version`: a
    /// 5.x broker returns the UNIQ_KEY as the send's `transactionId`, which Java then names
    /// here; a 4.9 broker returns none. `None` when `offset_msg_id` does not parse (no
    /// commit-log offset to name).
    #[allow(clippy::too_many_arguments)]
    pub fn after_send(
        producer_group: &'a str,
        topic: &'a str,
        broker_name: &'a str,
        broker_version: i32,
        queue_offset: i64,
        offset_msg_id: &str,
        msg_id: &'a str,
        state: LocalState,
        remark: Option<&'a str>,
    ) -> Option<Self> {
        let id: OffsetMsgId = offset_msg_id.parse().ok()?;
        let transaction_id = (broker_version >= crate::wire::version::V5_0_0).then_some(msg_id);
        Some(EndTransaction {
            producer_group,
            topic,
            broker_name,
            tran_state_table_offset: queue_offset,
            commit_log_offset: id.commit_log_offset,
            msg_id,
            transaction_id,
            state,
            from_check: false,
            remark,
        })
    }

    /// The END_TRANSACTION answering `check` (to the broker that sent it).
    pub fn answer(
        check: &TransactionCheck<'a>,
        state: LocalState,
        remark: Option<&'a str>,
    ) -> Self {
        EndTransaction {
            producer_group: check.producer_group,
            // Java names the header's topic (5.x: the half topic), else none.
            topic: check.header_topic.unwrap_or(""),
            broker_name: check.broker_name.unwrap_or(""),
            tran_state_table_offset: check.tran_state_table_offset,
            commit_log_offset: check.commit_log_offset,
            msg_id: check.uniq_key(),
            transaction_id: check.transaction_id,
            state,
            from_check: true,
            remark,
        }
    }

    /// The request header (`topic` and `bname` are sent to every broker version: a 4.9
    /// broker before 4.9.5 ignores them).
    pub fn header(&self) -> EndTransactionRequestHeader<'a> {
        let some = |s: &'a str| (!s.is_empty()).then_some(s);
        EndTransactionRequestHeader {
            producer_group: self.producer_group,
            tran_state_table_offset: self.tran_state_table_offset,
            commit_log_offset: self.commit_log_offset,
            commit_or_rollback: self.state.commit_or_rollback(),
            from_transaction_check: Some(self.from_check),
            msg_id: self.msg_id,
            transaction_id: self.transaction_id,
            topic: some(self.topic),
            bname: some(self.broker_name),
        }
    }
}

/// A broker's CHECK_TRANSACTION_STATE (39): the header's fields and the half message.
#[derive(Clone, Copy, Debug)]
pub struct TransactionCheck<'a> {
    /// The half message's queue offset.
    pub tran_state_table_offset: i64,
    /// Its commit-log offset.
    pub commit_log_offset: i64,
    /// The header's `msgId` (UNIQ_KEY).
    pub msg_id: Option<&'a str>,
    /// The transaction id.
    pub transaction_id: Option<&'a str>,
    /// The header's `offsetMsgId`.
    pub offset_msg_id: Option<&'a str>,
    /// The broker's name (`bname`, 4.9.5+).
    pub broker_name: Option<&'a str>,
    /// The half message, as stored (the broker restores its real topic and queue id).
    pub message: StoredMessage<'a>,
    /// The header's `topic` (5.x: the half topic, `RMQ_SYS_TRANS_HALF_TOPIC`).
    pub header_topic: Option<&'a str>,
    /// The producer group the half message names (`PGROUP`): this producer's.
    pub producer_group: &'a str,
}

/// The topic where brokers keep half messages.
pub const HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";

impl<'a> TransactionCheck<'a> {
    /// The message's topic (the half topic's message names it in `REAL_TOPIC`).
    pub fn topic(&self) -> &'a str {
        let m = &self.message;
        if m.topic != HALF_TOPIC {
            return m.topic;
        }
        let real = m.properties().ok().and_then(|p| p.get(keys::REAL_TOPIC));
        real.unwrap_or(m.topic)
    }

    /// The message's UNIQ_KEY (from its properties, else the header's `msgId`), which
    /// END_TRANSACTION names as `msgId`, as Java does.
    pub fn uniq_key(&self) -> &'a str {
        self.message
            .properties()
            .ok()
            .and_then(|p| p.get(keys::UNIQ_KEY))
            .or(self.msg_id)
            .unwrap_or("")
    }
}

/// The check-back in `frame` (a CHECK_TRANSACTION_STATE request) when its half message names
/// `producer_group` (property `PGROUP`); `None` for another group's (Java drops those: it has
/// no producer of that group) or when the header or the message does not decode.
pub fn check_request<'a>(frame: &'a [u8], producer_group: &str) -> Option<TransactionCheck<'a>> {
    let f = Frame::new_checked(frame).ok()?;
    let h = CommandHeader::parse(&f).ok()?;
    let field = |key: &str| {
        h.ext_iter()
            .find(|(k, _)| k.eq_str(key))
            .and_then(|(_, v)| v.as_str())
    };
    let num = |key: &str| field(key).and_then(|v| v.parse::<i64>().ok());
    let (message, _) = StoredMessage::decode(f.body_ref(), CrcCheck::Skip).ok()?;
    let group = message.properties().ok()?.get(keys::PRODUCER_GROUP)?;
    if group != producer_group {
        return None;
    }
    Some(TransactionCheck {
        tran_state_table_offset: num("tranStateTableOffset")?,
        commit_log_offset: num("commitLogOffset")?,
        msg_id: field("msgId"),
        transaction_id: field("transactionId"),
        offset_msg_id: field("offsetMsgId"),
        broker_name: field("bname"),
        header_topic: field("topic"),
        producer_group: group,
        message,
    })
}
