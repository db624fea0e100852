//! Request-reply (Java `DefaultMQProducer.request`, `MessageUtil.createReplyMessage` and
//! `ClientRemotingProcessor.receiveReplyMessage`; docs/protocol/STRATEGY.md §13).
//!
//! 1. **Request**: an ordinary send whose properties carry `CORRELATION_ID` (unique per
//!    request), `REPLY_TO_CLIENT` (the requester's client id) and `TTL` (its timeout in ms)
//!    ([`Correlation::request`], written through
//!    [`crate::producer::MessageFields::correlation`]). The broker adds `CLUSTER` when it
//!    stores it.
//! 2. **Reply**: a consumer of the request sends a message to `<CLUSTER>_REPLY_TOPIC`
//!    ([`reply_topic`]) with the request's three properties and `MSG_TYPE=reply`
//!    ([`Correlation::reply_to`]), as SEND_REPLY_MESSAGE_V2 (325).
//! 3. **Push**: the broker that receives the reply pushes it to the requester's connection
//!    (PUSH_REPLY_MESSAGE_TO_CLIENT, 326, [`pushed_reply`]) — the requester must have sent it
//!    a heartbeat — and answers the replier's send; the requester matches the reply to its
//!    request by `CORRELATION_ID` and answers the push with SUCCESS.
//!
//! ```
//! use rmq_core::message::PropertiesRef;
//! use rmq_core::reply::{Correlation, reply_topic};
//!
//! let stored = PropertiesRef::new(
//!     "CORRELATION_ID\u{1}c-1\u{2}REPLY_TO_CLIENT\u{1}10.0.0.2@app\u{2}TTL\u{1}3000\u{2}CLUSTER\u{1}DefaultCluster\u{2}",
//! );
//! let (reply, cluster) = Correlation::reply_to(&stored).unwrap();
//! assert!(reply.reply && reply.correlation_id == "c-1" && reply.ttl == "3000");
//! let mut buf = [0u8; 160];
//! assert_eq!(reply_topic(cluster, &mut buf), Some("DefaultCluster_REPLY_TOPIC"));
//! ```

use heapless::String;

use crate::message::{PropertiesRef, keys};
use crate::wire::{CommandHeader, FieldStr, Frame};

/// `MSG_TYPE` of a reply (Java `MixAll.REPLY_MESSAGE_FLAG`).
pub const REPLY_FLAG: &str = "reply";
/// The reply topic of a cluster is `<cluster>` followed by this.
pub const REPLY_TOPIC_SUFFIX: &str = "_REPLY_TOPIC";
/// Longest correlation id read from a pushed reply (Java's are 36-character UUIDs).
pub const MAX_CORRELATION_ID: usize = 64;

/// What ties a reply to its request: the properties both carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Correlation<'a> {
    /// `CORRELATION_ID`.
    pub correlation_id: &'a str,
    /// `REPLY_TO_CLIENT`: the requester's client id.
    pub reply_to: &'a str,
    /// `TTL`: the requester's timeout in ms (as text).
    pub ttl: &'a str,
    /// A reply (`MSG_TYPE=reply`, sent as SEND_REPLY_MESSAGE_V2), not a request.
    pub reply: bool,
}

/// Why a message cannot be replied to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ReplyError {
    /// It has no `CLUSTER` (Java: "create reply message fail, requestMessage error,
    /// property\[CLUSTER\] is null"): not a message a broker stored.
    NoCluster,
    /// It has no `CORRELATION_ID` or `REPLY_TO_CLIENT`: not a request.
    NotARequest,
}

impl core::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ReplyError::NoCluster => "the message has no CLUSTER property",
            ReplyError::NotARequest => {
                "the message is not a request (no CORRELATION_ID or REPLY_TO_CLIENT)"
            }
        })
    }
}

impl core::error::Error for ReplyError {}

impl<'a> Correlation<'a> {
    /// A request of `reply_to` (the requester's client id) waiting `ttl` ms.
    pub fn request(correlation_id: &'a str, reply_to: &'a str, ttl: &'a str) -> Self {
        Correlation {
            correlation_id,
            reply_to,
            ttl,
            reply: false,
        }
    }

    /// The reply to the request whose stored properties are `request`, and the cluster whose
    /// reply topic it goes to.
    ///
    /// # Errors
    /// [`ReplyError`]: no `CLUSTER`, or not a request.
    pub fn reply_to(request: &PropertiesRef<'a>) -> Result<(Self, &'a str), ReplyError> {
        let cluster = request.get(keys::CLUSTER).ok_or(ReplyError::NoCluster)?;
        let id = request.get(keys::CORRELATION_ID);
        let to = request.get(keys::MESSAGE_REPLY_TO_CLIENT);
        let (Some(correlation_id), Some(reply_to)) = (id, to) else {
            return Err(ReplyError::NotARequest);
        };
        let ttl = request.get(keys::MESSAGE_TTL).unwrap_or("");
        let c = Correlation {
            correlation_id,
            reply_to,
            ttl,
            reply: true,
        };
        Ok((c, cluster))
    }

    /// The property entries this writes, in order (`TTL` left out when empty).
    pub fn entries(&self) -> [(&'static str, Option<&'a str>); 4] {
        [
            (keys::MESSAGE_TYPE, self.reply.then_some(REPLY_FLAG)),
            (keys::CORRELATION_ID, Some(self.correlation_id)),
            (keys::MESSAGE_REPLY_TO_CLIENT, Some(self.reply_to)),
            (keys::MESSAGE_TTL, Some(self.ttl).filter(|t| !t.is_empty())),
        ]
    }
}

/// `<cluster>_REPLY_TOPIC` written into `buf`; `None` when it does not fit.
pub fn reply_topic<'b>(cluster: &str, buf: &'b mut [u8]) -> Option<&'b str> {
    let n = cluster.len() + REPLY_TOPIC_SUFFIX.len();
    let out = buf.get_mut(..n)?;
    let (a, b) = out.split_at_mut(cluster.len());
    a.copy_from_slice(cluster.as_bytes());
    b.copy_from_slice(REPLY_TOPIC_SUFFIX.as_bytes());
    core::str::from_utf8(out).ok()
}

/// A reply a broker pushed (PUSH_REPLY_MESSAGE_TO_CLIENT, 326): the header's fields and the
/// body (compressed when `sys_flag` says so, as sent).
#[derive(Clone, Debug)]
pub struct PushedReply<'a> {
    /// Its `CORRELATION_ID` (empty when it has none or a longer one: it matches nothing).
    pub correlation_id: String<MAX_CORRELATION_ID>,
    /// The reply topic.
    pub topic: Option<&'a str>,
    /// The properties (`key\u{1}value\u{2}`…), JSON-escaped in a JSON header: decode with
    /// [`FieldStr::unescape_into`].
    pub properties: Option<FieldStr<'a>>,
    /// The body.
    pub body: &'a [u8],
    /// sysFlag (compression).
    pub sys_flag: i32,
    /// `Message.flag`.
    pub flag: i32,
    /// Queue id.
    pub queue_id: i32,
    /// Born timestamp (Unix ms).
    pub born_timestamp: i64,
    /// Store timestamp (Unix ms).
    pub store_timestamp: i64,
    /// Reconsume times.
    pub reconsume_times: i32,
    /// `ip:port` the replier sent from.
    pub born_host: Option<&'a str>,
    /// `ip:port` of the broker.
    pub store_host: Option<&'a str>,
}

/// The reply a PUSH_REPLY_MESSAGE_TO_CLIENT request carries; `None` when its header does not
/// decode.
pub fn pushed_reply(frame: &[u8]) -> Option<PushedReply<'_>> {
    let f = Frame::new_checked(frame).ok()?;
    let h = CommandHeader::parse(&f).ok()?;
    let field = |key: &str| h.ext_iter().find(|(k, _)| k.eq_str(key)).map(|(_, v)| v);
    let text = |key: &str| field(key).and_then(|v| v.as_str());
    let int = |key: &str| field(key).and_then(|v| v.parse_i64()).unwrap_or(0);
    let properties = field("properties");
    let mut correlation_id = String::new();
    if let Some(p) = properties {
        let _ = property_of(p, keys::CORRELATION_ID, &mut correlation_id);
    }
    Some(PushedReply {
        correlation_id,
        topic: text("topic"),
        properties,
        body: f.body_ref(),
        sys_flag: i32::try_from(int("sysFlag")).ok()?,
        flag: i32::try_from(int("flag")).unwrap_or(0),
        queue_id: i32::try_from(int("queueId")).unwrap_or(0),
        born_timestamp: int("bornTimestamp"),
        store_timestamp: int("storeTimestamp"),
        reconsume_times: i32::try_from(int("reconsumeTimes")).unwrap_or(0),
        born_host: text("bornHost"),
        store_host: text("storeHost"),
    })
}

/// The value of `key` in a (possibly escaped) properties field, decoded into `out`; `None`
/// when absent or longer than `out` holds.
fn property_of<const N: usize>(props: FieldStr<'_>, key: &str, out: &mut String<N>) -> Option<()> {
    let mut chars = props.chars();
    loop {
        // One entry: the key up to \u{1}, the value up to \u{2}.
        let mut k = key.chars();
        let mut matches = true;
        let mut ended = false;
        loop {
            match chars.next() {
                None => return None,
                Some('\u{1}') => break,
                Some('\u{2}') => {
                    ended = true;
                    break;
                }
                Some(c) => matches &= k.next() == Some(c),
            }
        }
        if ended {
            continue;
        }
        let found = matches && k.next().is_none();
        out.clear();
        for c in chars.by_ref() {
            if c == '\u{2}' {
                break;
            }
            if found && out.push(c).is_err() {
                out.clear();
                return None;
            }
        }
        if found {
            return Some(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_property_is_found_in_raw_and_in_escaped_text() {
        let raw = FieldStr::binary(b"TTL\x013000\x02CORRELATION_ID\x01abc-1\x02UNIQ_KEY\x01U\x02");
        let mut out: String<64> = String::new();
        assert_eq!(property_of(raw, "CORRELATION_ID", &mut out), Some(()));
        assert_eq!(out.as_str(), "abc-1");
        assert_eq!(property_of(raw, "CORRELATION", &mut out), None);
        assert_eq!(property_of(raw, "TTL", &mut out), Some(()));
        assert_eq!(out.as_str(), "3000");
        let mut short: String<3> = String::new();
        assert_eq!(property_of(raw, "CORRELATION_ID", &mut short), None);
        // The same text as a JSON header carries it (escaped), in a pushed reply.
        for ty in [
            crate::wire::SerializeType::JSON,
            crate::wire::SerializeType::ROCKETMQ,
        ] {
            let ext: &[(&str, &str)] = &[
                ("topic", "C_REPLY_TOPIC"),
                (
                    "properties",
                    "TTL\u{1}3000\u{2}CORRELATION_ID\u{1}abc-1\u{2}",
                ),
                ("sysFlag", "0"),
                ("bornTimestamp", "17"),
                ("queueId", "2"),
            ];
            let code = crate::wire::RequestCode::PUSH_REPLY_MESSAGE_TO_CLIENT;
            let cmd = crate::wire::CommandRepr::request(code, 5, 0, Some(ext));
            let mut buf = [0u8; 512];
            let n = cmd.emit_frame_prefix_and_header(ty, 2, &mut buf).unwrap();
            buf[n..n + 2].copy_from_slice(b"hi");
            let r = pushed_reply(&buf[..n + 2]).unwrap();
            assert_eq!(r.correlation_id.as_str(), "abc-1");
            assert_eq!(
                (r.topic, r.body, r.born_timestamp, r.queue_id),
                (Some("C_REPLY_TOPIC"), &b"hi"[..], 17, 2)
            );
            let mut pb = [0u8; 64];
            let props = r.properties.unwrap().unescape_into(&mut pb).unwrap();
            assert_eq!(props, "TTL\u{1}3000\u{2}CORRELATION_ID\u{1}abc-1\u{2}");
        }
    }

    #[test]
    fn a_request_without_cluster_or_correlation_gets_no_reply() {
        let p = PropertiesRef::new("CORRELATION_ID\u{1}c\u{2}REPLY_TO_CLIENT\u{1}x\u{2}");
        assert_eq!(Correlation::reply_to(&p), Err(ReplyError::NoCluster));
        let p = PropertiesRef::new("CLUSTER\u{1}c\u{2}");
        assert_eq!(Correlation::reply_to(&p), Err(ReplyError::NotARequest));
        let mut buf = [0u8; 4];
        assert_eq!(reply_topic("DefaultCluster", &mut buf), None);
    }
}
