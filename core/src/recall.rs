//! Recalling a timer message before it is delivered (RocketMQ 5.3.2+,
//! docs/protocol/STRATEGY.md §14).
//!
//! A 5.x broker answers the send of a timer or delay message (not a batch) with a
//! `recallHandle`: base64url (padded) of `v1 <topic> <brokerName> <deliverMs+1> <UNIQ_KEY>`.
//! RECALL_MESSAGE (370) to the broker named in it, with the handle and the topic, puts a delete
//! marker in the timer wheel: the message is not delivered. The broker refuses a handle whose
//! time has passed (ILLEGAL_OPERATION "timestamp invalid"), another topic's, and every recall
//! unless it runs with `recallMessageEnable=true` (NO_PERMISSION); a 4.9 broker does not know
//! the code (REQUEST_CODE_NOT_SUPPORTED).
//!
//! ```
//! use rmq_core::recall::RecallHandle;
//! // "v1 Orders broker-a 1796500000001 0A0B0C0D000018B4AAC2001700000001"
//! let h = "djEgT3JkZXJzIGJyb2tlci1hIDE3OTY1MDAwMDAwMDEgMEEwQjBDMEQwMDAwMThCNEFBQzIwMDE3MDAwMDAwMDE=";
//! let mut buf = [0u8; 128];
//! let r = RecallHandle::decode(h, &mut buf).unwrap();
//! assert_eq!((r.topic, r.broker_name), ("Orders", "broker-a"));
//! assert_eq!(r.deliver_ms, 1_796_500_000_001);
//! assert_eq!(r.message_id, "0A0B0C0D000018B4AAC2001700000001");
//! ```

use crate::client::{Attached, Client, Lend};
use crate::session::{CallError, Features, Peer, Transmit};
use crate::store::Store;
use crate::time::{Duration, Instant};
use crate::wire::RequestCode;
use crate::wire::headers::RecallMessageRequestHeader;

/// A recall handle, decoded (Java `RecallMessageHandle.HandleV1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecallHandle<'b> {
    /// The message's topic.
    pub topic: &'b str,
    /// The broker that stored it (RECALL_MESSAGE goes there).
    pub broker_name: &'b str,
    /// When it is due, Unix ms (one more than the broker's timer slot, as the broker writes
    /// it).
    pub deliver_ms: i64,
    /// Its UNIQ_KEY (the message id Java reports).
    pub message_id: &'b str,
}

/// Why a recall handle cannot be used (Java's `DecoderException("recall handle is invalid")`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum HandleError {
    /// Not base64url, not `v1`, or fewer than five fields.
    Invalid,
    /// Longer than the buffer given to decode it.
    TooLong,
    /// A retry or dead-letter topic (Java refuses these before asking).
    TopicNotSupported,
}

impl core::fmt::Display for HandleError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            HandleError::Invalid => "recall handle is invalid",
            HandleError::TooLong => "recall handle is too long",
            HandleError::TopicNotSupported => "topic is not supported",
        })
    }
}

impl core::error::Error for HandleError {}

impl<'b> RecallHandle<'b> {
    /// [`RecallHandle::decode`] for a recall of `topic`, refusing a retry or dead-letter topic
    /// as Java does (the broker checks that the handle names `topic`).
    ///
    /// # Errors
    /// [`HandleError`].
    pub fn for_topic(topic: &str, handle: &str, buf: &'b mut [u8]) -> Result<Self, HandleError> {
        use crate::message::validate::{DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX};
        if topic.starts_with(RETRY_TOPIC_PREFIX) || topic.starts_with(DLQ_TOPIC_PREFIX) {
            return Err(HandleError::TopicNotSupported);
        }
        Self::decode(handle, buf)
    }

    /// Decodes `handle` into `buf` (3/4 of its length is enough).
    ///
    /// # Errors
    /// [`HandleError`].
    pub fn decode(handle: &str, buf: &'b mut [u8]) -> Result<Self, HandleError> {
        let n = base64url_decode(handle.as_bytes(), buf)?;
        let text = buf.get(..n).ok_or(HandleError::TooLong)?;
        let text = core::str::from_utf8(text).map_err(|_| HandleError::Invalid)?;
        let mut items = text.split(' ');
        if items.next() != Some("v1") {
            return Err(HandleError::Invalid);
        }
        let mut next = || items.next().ok_or(HandleError::Invalid);
        let (topic, broker_name, deliver, message_id) = (next()?, next()?, next()?, next()?);
        Ok(RecallHandle {
            topic,
            broker_name,
            // Java reads it with NumberUtils.toLong(.., -1): a bad number is a past time.
            deliver_ms: deliver.parse().unwrap_or(-1),
            message_id,
        })
    }
}

/// Why [`Client::recall`] could not ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecallError {
    /// The session knows no broker to ask (the handle's, or with `or_any` one of the
    /// topic's): look the topic's route up and ask again.
    NoRoute,
    /// The request could not be made ([`CallError::Unsupported`] without
    /// [`Features::RECALL`]).
    Call(CallError),
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
    C: Attached,
> Client<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St, C>
{
    /// RECALL_MESSAGE for `handle` (decoded as `h`, see [`RecallHandle::for_topic`]) of
    /// `topic`, from the session's group (a [`Client::call`]): to the broker the handle names
    /// when the session knows its address, else (`or_any`: after the topic's route was looked
    /// up again) to any broker of the topic's route (Java's choice). Its answer ([`Inbound::Answer`](crate::client::Inbound::Answer)) carries the
    /// message id (`msgId`) on SUCCESS; the broker's refusals are listed in the module docs.
    ///
    /// # Errors
    /// [`RecallError`].
    #[allow(clippy::too_many_arguments)]
    pub fn recall<M: Lend + ?Sized>(
        &mut self,
        now: Instant,
        topic: &str,
        handle: &str,
        h: &RecallHandle<'_>,
        or_any: bool,
        timeout: Duration,
        buf: &mut [u8],
        lend: &M,
    ) -> Result<Transmit, RecallError> {
        if !F::RECALL {
            return Err(RecallError::Call(CallError::Unsupported));
        }
        let s = self.session();
        let named = s
            .find_broker(h.broker_name)
            .filter(|b| s.broker_addr(*b).is_some());
        let any = || {
            let b = s.publish_queues(s.topic_id(topic)?).first()?.broker;
            s.broker_addr(b).map(|_| b)
        };
        let any = || or_any.then(any).flatten();
        let broker = named.or_else(any).ok_or(RecallError::NoRoute)?;
        // (The session's own copy, of the same capacity: it fits.)
        let mut g: heapless::String<{ crate::session::MAX_GROUP_LEN }> = heapless::String::new();
        let _ = g.push_str(s.group());
        let ext = RecallMessageRequestHeader {
            producer_group: Some(&g),
            topic,
            recall_handle: handle,
            bname: Some(h.broker_name),
        };
        let (peer, code) = (Peer::Broker(broker), RequestCode::RECALL_MESSAGE);
        self.call(now, peer, code, Some(ext), &[], timeout, buf, lend)
            .map_err(RecallError::Call)
    }
}

/// The RECALL_MESSAGE header for `handle` (decoded as `h`) of `topic`, from `group`.
pub fn request_header<'a>(
    group: &'a str,
    topic: &'a str,
    handle: &'a str,
    h: &RecallHandle<'a>,
) -> RecallMessageRequestHeader<'a> {
    RecallMessageRequestHeader {
        producer_group: Some(group),
        topic,
        recall_handle: handle,
        bname: Some(h.broker_name),
    }
}

/// RFC 4648 §5 (URL-safe alphabet) with optional padding, as Java's `Base64.getUrlDecoder`
/// accepts it; returns the decoded length.
fn base64url_decode(input: &[u8], out: &mut [u8]) -> Result<usize, HandleError> {
    fn val(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        }))
    }
    let body = match input {
        [rest @ .., b'=', b'='] | [rest @ .., b'='] if input.len().is_multiple_of(4) => rest,
        _ => input,
    };
    if body.is_empty() || body.len() % 4 == 1 {
        return Err(HandleError::Invalid);
    }
    let (mut acc, mut bits, mut n) = (0u32, 0u32, 0usize);
    for &c in body {
        acc = (acc << 6) | val(c).ok_or(HandleError::Invalid)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            *out.get_mut(n).ok_or(HandleError::TooLong)? = (acc >> bits) as u8;
            n += 1;
            acc &= (1 << bits) - 1;
        }
    }
    Ok(n)
}

/// The `recallHandle` of a send response, from the collected ext fields (64-bit) or a scan.
pub(crate) fn response_handle<'a>(
    h: &crate::wire::CommandHeader<'a>,
    resp: &crate::wire::headers::ResponseSlots<'a>,
) -> Option<crate::wire::FieldStr<'a>> {
    #[cfg(target_pointer_width = "64")]
    {
        let _ = h;
        let i = crate::wire::headers::SendMessageResponseHeader::KEYS
            .iter()
            .position(|k| *k == "recallHandle")?;
        resp.get(i).copied().flatten()
    }
    #[cfg(not(target_pointer_width = "64"))]
    {
        let _ = resp;
        h.get("recallHandle")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_java_encodes_and_refuses_the_rest() {
        // Java: Base64.getUrlEncoder().encodeToString("v1 T b 5 id".getBytes(UTF_8)).
        let mut buf = [0u8; 64];
        let h = RecallHandle::decode("djEgVCBiIDUgaWQ=", &mut buf).unwrap();
        assert_eq!(
            h,
            RecallHandle {
                topic: "T",
                broker_name: "b",
                deliver_ms: 5,
                message_id: "id"
            }
        );
        // Without padding, and the URL-safe alphabet ("v1 T? b 5 ~~" ends in `-`).
        let h = RecallHandle::decode("djEgVD8gYiA1IH5-", &mut buf).unwrap();
        assert_eq!((h.topic, h.message_id), ("T?", "~~"));
        for bad in ["", "!!!!", "djEgVCBi", "djIgVCBiIDUgaWQ=", "d"] {
            assert_eq!(
                RecallHandle::decode(bad, &mut buf),
                Err(HandleError::Invalid),
                "{bad}"
            );
        }
        assert_eq!(
            RecallHandle::decode("djEgVCBiIDUgaWQ=", &mut [0u8; 4]),
            Err(HandleError::TooLong)
        );
        let h = RecallHandle::decode("djEgVCBiIHggaWQ=", &mut buf).unwrap();
        assert_eq!(h.deliver_ms, -1, "v1 T b x id: Java's toLong(.., -1)");
        for t in ["%RETRY%g", "%DLQ%g"] {
            assert_eq!(
                RecallHandle::for_topic(t, "djEgVCBiIDUgaWQ=", &mut buf),
                Err(HandleError::TopicNotSupported)
            );
        }
        assert!(RecallHandle::for_topic("T", "djEgVCBiIDUgaWQ=", &mut buf).is_ok());
    }
}
