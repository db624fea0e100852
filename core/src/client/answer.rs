//! The requests brokers send a client (Java `ClientRemotingProcessor`), dispatched here and
//! nowhere else: what each does, and the answers waiting to be written.
//!
//! | code | request | what the client does |
//! | --- | --- | --- |
//! | 40 | NOTIFY_CONSUMER_IDS_CHANGED | the consumer rebalances now (oneway: no answer) |
//! | 220 | RESET_CONSUMER_CLIENT_OFFSET | the consumer seeks the listed queues (oneway) |
//! | 307 | GET_CONSUMER_RUNNING_INFO | answered with the consumer's running info (`mqadmin consumerStatus`), or SYSTEM_ERROR for another group |
//! | 309 | CONSUME_MESSAGE_DIRECTLY | the message goes to the application ([`Inbound::Direct`](super::Inbound::Direct)), whose outcome [`Client::answer_direct`](super::Client::answer_direct) writes |
//! | 221 | GET_CONSUMER_STATUS_FROM_CLIENT | answered with the offsets of the asked topic's owned queues (`DefaultMQAdminExt.getConsumeStatus`, via the broker's 223; mqadmin 5.3.3 and 4.9.7 register no command for it); an empty table for another group or topic, as Java |
//! | other | (39, 326, ...) | REQUEST_CODE_NOT_SUPPORTED unless oneway, as Java answers a code it has no processor for |
//!
//! A client without a consumer answers every code but the oneway ones with
//! REQUEST_CODE_NOT_SUPPORTED. Answers are encoded when they are polled
//! ([`Client::poll_transmit`](super::Client::poll_transmit)), before any request: the broker
//! (and the operator's tool behind it) is waiting for them.

use heapless::String;

use crate::admin::{CmResult, write_direct_result, write_response};
use crate::session::Peer;

/// Answers waiting at once (more are dropped: the broker times the request out).
pub(super) const ANSWERS: usize = 8;

/// What the application's handler did with a CONSUME_MESSAGE_DIRECTLY message
/// ([`Client::answer_direct`](super::Client::answer_direct)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum DirectOutcome {
    /// Processed (`CR_SUCCESS`).
    Success,
    /// Not processed, to be consumed later (`CR_LATER`).
    Later,
    /// The handler failed (panicked: `CR_THROW_EXCEPTION`).
    Failed,
    /// The client has no handler to run (a consumer that only polls): SYSTEM_ERROR.
    NoHandler,
}

/// An answer waiting to be written.
#[derive(Clone, Copy, Debug)]
pub(super) enum Answer {
    /// REQUEST_CODE_NOT_SUPPORTED for `code`.
    NotServed { peer: Peer, opaque: i32, code: i32 },
    /// GET_CONSUMER_RUNNING_INFO: the running info when it names our group.
    RunningInfo { peer: Peer, opaque: i32, ours: bool },
    /// GET_CONSUMER_STATUS_FROM_CLIENT: the offsets of topic `topic` (`None`: another group's
    /// or a topic it does not consume: an empty table).
    ConsumerStatus {
        peer: Peer,
        opaque: i32,
        topic: Option<crate::session::TopicId>,
    },
    /// A bare status: SUCCESS, or SYSTEM_ERROR "process reply message fail" (Java's answers to
    /// PUSH_REPLY_MESSAGE_TO_CLIENT).
    Status { peer: Peer, opaque: i32, ok: bool },
    /// CONSUME_MESSAGE_DIRECTLY's result (`None`: the message did not decode).
    Direct {
        peer: Peer,
        opaque: i32,
        outcome: Option<DirectOutcome>,
        spent_ms: u64,
    },
}

impl Answer {
    pub(super) fn peer(&self) -> Peer {
        match *self {
            Answer::NotServed { peer, .. }
            | Answer::RunningInfo { peer, .. }
            | Answer::ConsumerStatus { peer, .. }
            | Answer::Status { peer, .. }
            | Answer::Direct { peer, .. } => peer,
        }
    }

    pub(super) fn opaque(&self) -> i32 {
        match *self {
            Answer::NotServed { opaque, .. }
            | Answer::RunningInfo { opaque, .. }
            | Answer::ConsumerStatus { opaque, .. }
            | Answer::Status { opaque, .. }
            | Answer::Direct { opaque, .. } => opaque,
        }
    }

    /// Writes this answer into `buf` (the body of the running info or of the consumer status
    /// comes from `info`, written into the buffer it is given); its length, or `None` when it
    /// does not fit.
    pub(super) fn write(
        &self,
        version: i32,
        group: &str,
        orderly: bool,
        buf: &mut [u8],
        info: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> Option<usize> {
        match *self {
            Answer::NotServed { opaque, code, .. } => {
                crate::admin::write_not_supported(code, opaque, version, buf).ok()
            }
            // Written by the client (a request, signed by the session).
            Answer::Status { opaque, ok, .. } => {
                let (code, remark) = match ok {
                    true => (0, None),
                    false => (1, Some("process reply message fail")),
                };
                write_response(code, opaque, version, remark, &[], buf).ok()
            }
            Answer::RunningInfo {
                opaque,
                ours: false,
                ..
            } => {
                let mut remark: String<320> = String::new();
                for part in [
                    "The Consumer Group <",
                    group,
                    "> not exist in this consumer",
                ] {
                    let _ = remark.push_str(part);
                }
                write_response(1, opaque, version, Some(&remark), &[], buf).ok()
            }
            Answer::RunningInfo { opaque, .. } | Answer::ConsumerStatus { opaque, .. } => {
                // The body is written behind room for the header, then moved up to it.
                let start = buf.len().min(1024);
                let (head, tail) = buf.split_at_mut(start);
                let n = info(tail)?;
                let h =
                    crate::admin::write_response_head(0, opaque, version, None, n, head).ok()?;
                buf.copy_within(start..start + n, h);
                Some(h + n)
            }
            Answer::Direct {
                opaque,
                outcome,
                spent_ms,
                ..
            } => {
                let (result, remark) = match outcome {
                    Some(DirectOutcome::Success) => (CmResult::Success, None),
                    Some(DirectOutcome::Later) => (CmResult::Later, None),
                    Some(DirectOutcome::Failed) => {
                        (CmResult::ThrowException, Some("the handler panicked"))
                    }
                    Some(DirectOutcome::NoHandler) => {
                        let remark = "this consumer has no handler to run the message on";
                        return write_response(1, opaque, version, Some(remark), &[], buf).ok();
                    }
                    None => {
                        let remark = "the message does not decode";
                        return write_response(1, opaque, version, Some(remark), &[], buf).ok();
                    }
                };
                write_direct_result(opaque, version, orderly, result, remark, spent_ms, buf).ok()
            }
        }
    }
}
