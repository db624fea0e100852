//! Answering the requests a broker forwards to a client from operators' tools (Java
//! `ClientRemotingProcessor` and `NettyRemotingAbstract`): the response frame, the answer to a
//! code this client does not serve, and the `ConsumerRunningInfo` body of
//! GET_CONSUMER_RUNNING_INFO (307, `mqadmin consumerStatus`).
//!
//! The running info is JSON as fastjson writes it: bean fields sorted by name, maps in their
//! own order, and `MessageQueue` map keys written as JSON objects
//! (`{"brokerName":"b","queueId":0,"topic":"T"}:{…}`), which the Java admin tools read back.
//! [`PullConsumer::running_info`](crate::pull_consumer::PullConsumer::running_info) fills it.

use core::cmp::Ordering;

use crate::consumer::{MessageQueue, Subscription, write_subscription};
use crate::json::{BufferTooSmall, SliceWriter};
use crate::lock::{put_queue, read_queue};
use crate::wire::{
    CommandHeader, CommandRepr, EncodeError, ResponseCode, SerializeType, flag,
    headers::HeartbeatRequestHeader,
};

/// `REQUEST_CODE_NOT_SUPPORTED` (`RemotingSysResponseCode`).
pub const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;

/// Property keys of `ConsumerRunningInfo.properties` (exact Java strings).
pub mod prop {
    /// NameServer addresses, each followed by `;`.
    pub const NAMESERVER_ADDR: &str = "PROP_NAMESERVER_ADDR";
    /// Consume threads.
    pub const THREADPOOL_CORE_SIZE: &str = "PROP_THREADPOOL_CORE_SIZE";
    /// `true` for orderly consumption (Java's constant is `PROP_CONSUME_ORDERLY`).
    pub const CONSUME_ORDERLY: &str = "PROP_CONSUMEORDERLY";
    /// `CONSUME_PASSIVELY` for a push consumer (the admin tools require it).
    pub const CONSUME_TYPE: &str = "PROP_CONSUME_TYPE";
    /// The client version (`V5_3_3`).
    pub const CLIENT_VERSION: &str = "PROP_CLIENT_VERSION";
    /// When the consumer started, Unix ms (the admin tools parse it as a number).
    pub const CONSUMER_START_TIMESTAMP: &str = "PROP_CONSUMER_START_TIMESTAMP";
}

/// Whether a broker's request expects no answer (its ONEWAY flag).
pub fn is_oneway(h: &CommandHeader<'_>) -> bool {
    h.flag() & flag::ONEWAY != 0
}

/// Writes a response frame (JSON header) with `code`, `remark` and `body` into `buf`.
///
/// # Errors
/// [`EncodeError`] when it does not fit.
pub fn write_response(
    code: i32,
    opaque: i32,
    version: i32,
    remark: Option<&str>,
    body: &[u8],
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let n = write_response_head(code, opaque, version, remark, body.len(), buf)?;
    buf.get_mut(n..n.saturating_add(body.len()))
        .ok_or(EncodeError::BufferTooSmall)?
        .copy_from_slice(body);
    Ok(n + body.len())
}

/// Writes the length prefix and header of a response whose `body_len` body follows.
///
/// # Errors
/// [`EncodeError`] when it does not fit.
pub fn write_response_head(
    code: i32,
    opaque: i32,
    version: i32,
    remark: Option<&str>,
    body_len: usize,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let mut repr =
        CommandRepr::<HeartbeatRequestHeader>::response(ResponseCode(code), opaque, version, None);
    repr.remark = remark;
    repr.emit_frame_prefix_and_header(SerializeType::JSON, body_len, buf)
}

/// The answer to a request code this client does not serve, as a Java client gives it:
/// REQUEST_CODE_NOT_SUPPORTED, remark `" request type <code> not supported"`.
///
/// # Errors
/// [`EncodeError`] when it does not fit.
pub fn write_not_supported(
    code: i32,
    opaque: i32,
    version: i32,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    // (Written by hand: `core::fmt` costs a gateway's image 2 KB.)
    let mut digits = [0u8; 11];
    let mut n = code.unsigned_abs();
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut remark: heapless::String<48> = heapless::String::new();
    let _ = remark.push_str(" request type ");
    if code < 0 {
        let _ = remark.push('-');
    }
    for &d in &digits[i..] {
        let _ = remark.push(char::from(d));
    }
    let _ = remark.push_str(" not supported");
    write_response(
        REQUEST_CODE_NOT_SUPPORTED,
        opaque,
        version,
        Some(&remark),
        &[],
        buf,
    )
}

/// The answer to a broker's request `frame` no one here serves: REQUEST_CODE_NOT_SUPPORTED
/// ([`write_not_supported`]), or `None` when the request was oneway (or unreadable).
pub fn answer_not_served(frame: &[u8], version: i32, buf: &mut [u8]) -> Option<usize> {
    let f = crate::wire::Frame::new_checked(frame).ok()?;
    let h = CommandHeader::parse(&f).ok()?;
    if is_oneway(&h) {
        return None;
    }
    write_not_supported(h.code(), h.opaque(), version, buf).ok()
}

/// Reads the `offsetTable` of a RESET_CONSUMER_CLIENT_OFFSET (220) body
/// (`{"offsetTable":{{"brokerName":…,"queueId":…,"topic":…}:offset,…}}`, fastjson's object
/// keys), handing each queue and offset to `f`; `false` when the body is malformed (what was
/// read before is handed out).
pub fn parse_reset_offsets(body: &[u8], mut f: impl FnMut(MessageQueue<'_>, i64)) -> bool {
    let key = b"\"offsetTable\"";
    let Some(at) = body.windows(key.len()).position(|w| w == key) else {
        return false;
    };
    let mut rest = &body[at + key.len()..];
    let skip = |r: &mut &[u8], c: u8| -> bool {
        let t = r.trim_ascii_start();
        match t.split_first() {
            Some((&x, tail)) if x == c => {
                *r = tail;
                true
            }
            _ => false,
        }
    };
    if !skip(&mut rest, b':') || !skip(&mut rest, b'{') {
        return false;
    }
    loop {
        if skip(&mut rest, b'}') {
            return true;
        }
        rest = rest.trim_ascii_start();
        // The key: a JSON object without nested braces (names cannot hold any).
        let Some(end) = rest.iter().position(|&c| c == b'}') else {
            return false;
        };
        let (obj, tail) = rest.split_at(end + 1);
        let Some(q) = parse_queue(obj) else {
            return false;
        };
        rest = tail;
        if !skip(&mut rest, b':') {
            return false;
        }
        rest = rest.trim_ascii_start();
        let n = rest
            .iter()
            .position(|c| !(c.is_ascii_digit() || *c == b'-'))
            .unwrap_or(rest.len());
        let Some(offset) = crate::json::parse_i64_ascii(&rest[..n]) else {
            return false;
        };
        f(q, offset);
        rest = &rest[n..];
        let _ = skip(&mut rest, b',');
    }
}

fn parse_queue(obj: &[u8]) -> Option<MessageQueue<'_>> {
    read_queue(&mut crate::json::Parser::new(obj)).ok()?
}

/// What a client does with a request a broker sent
/// (by [`Client::handle_frame`](crate::client::Client::handle_frame)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Answer {
    /// Write these first bytes of the buffer back to the broker.
    Write(usize),
    /// Nothing to write (oneway, or applied).
    Nothing,
    /// CONSUME_MESSAGE_DIRECTLY: run the application's handler on [`direct_message`] and
    /// answer with [`write_direct_result`] (or SYSTEM_ERROR when there is no handler).
    ConsumeDirectly {
        /// The request's opaque.
        opaque: i32,
    },
}

/// Java's `CMResult`: what the handler did with a message CONSUME_MESSAGE_DIRECTLY gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CmResult {
    /// Processed.
    Success,
    /// To be consumed again later.
    Later,
    /// Orderly: rolled back.
    Rollback,
    /// Orderly: committed.
    Commit,
    /// The handler failed (panicked).
    ThrowException,
    /// The handler returned nothing.
    ReturnNull,
}

impl CmResult {
    /// The Java name.
    pub const fn name(self) -> &'static str {
        match self {
            CmResult::Success => "CR_SUCCESS",
            CmResult::Later => "CR_LATER",
            CmResult::Rollback => "CR_ROLLBACK",
            CmResult::Commit => "CR_COMMIT",
            CmResult::ThrowException => "CR_THROW_EXCEPTION",
            CmResult::ReturnNull => "CR_RETURN_NULL",
        }
    }
}

/// The message a CONSUME_MESSAGE_DIRECTLY (309) request carries (its body is one stored
/// message), with the broker name of its header.
pub fn direct_message(frame: &[u8]) -> Option<(crate::message::StoredMessage<'_>, &str)> {
    let f = crate::wire::Frame::new_checked(frame).ok()?;
    let h = CommandHeader::parse(&f).ok()?;
    let broker = h
        .ext_iter()
        .find(|(k, _)| k.eq_str("brokerName"))?
        .1
        .as_str()?;
    let crc = crate::message::stored::CrcCheck::Skip;
    let (m, _) = crate::message::StoredMessage::decode(f.body_ref(), crc).ok()?;
    Some((m, broker))
}

/// The answer to CONSUME_MESSAGE_DIRECTLY: SUCCESS with a `ConsumeMessageDirectlyResult`
/// (`{"autoCommit":true,"consumeResult":…,"order":…,"remark":…,"spentTimeMills":…}`).
///
/// # Errors
/// [`EncodeError`] when it does not fit.
pub fn write_direct_result(
    opaque: i32,
    version: i32,
    order: bool,
    result: CmResult,
    remark: Option<&str>,
    spent_ms: u64,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let mut body = [0u8; 512];
    let mut w = SliceWriter::new(&mut body);
    w.put(br#"{"autoCommit":true,"consumeResult":""#);
    w.put(result.name().as_bytes());
    w.put(if order {
        br#"","order":true"#.as_slice()
    } else {
        br#"","order":false"#.as_slice()
    });
    if let Some(r) = remark {
        w.put(br#","remark":"#);
        // Long remarks are cut at a character boundary.
        let mut end = r.len().min(256);
        while !r.is_char_boundary(end) {
            end -= 1;
        }
        w.put_json_str(&r[..end]);
    }
    w.put(br#","spentTimeMills":"#);
    w.put_i64_dec(i64::try_from(spent_ms).unwrap_or(i64::MAX));
    w.put_u8(b'}');
    let n = w.finish().map_err(|_| EncodeError::BufferTooSmall)?;
    write_response(0, opaque, version, None, &body[..n], buf)
}

/// One owned queue as `ProcessQueueInfo` describes it (timestamps in Unix ms, 0 for never).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessQueueInfo {
    /// The committed (or committable) offset.
    pub commit_offset: i64,
    /// Lowest offset handed out and not acknowledged (0 when none).
    pub cached_msg_min_offset: i64,
    /// Highest such offset (0 when none).
    pub cached_msg_max_offset: i64,
    /// Messages handed out and not acknowledged.
    pub cached_msg_count: u32,
    /// Their body bytes, MiB.
    pub cached_msg_size_mib: u32,
    /// Orderly: locked by its broker for us.
    pub locked: bool,
    /// Orderly: when the lock was last confirmed.
    pub last_lock_timestamp: i64,
    /// When the last pull went out.
    pub last_pull_timestamp: i64,
    /// When a message of the queue was last acknowledged.
    pub last_consume_timestamp: i64,
    /// Messages not processed yet: the broker's maximum offset minus `commit_offset` (an
    /// rmq field, `"lag"`; Java's tools ignore it). `None` before the broker told it.
    pub lag: Option<u64>,
}

/// One topic's `ConsumeStatus`; rates and times in hundredths (`1234` is written `12.34`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumeStatus {
    /// Mean pull round trip, ms (long polls included, as Java counts it).
    pub pull_rt: u64,
    /// Pulls per second.
    pub pull_tps: u64,
    /// Mean processing time, ms.
    pub consume_rt: u64,
    /// Messages processed per second.
    pub consume_ok_tps: u64,
    /// Messages failed per second.
    pub consume_failed_tps: u64,
    /// Messages failed in the last hour (Java's figure; ours: since the previous report).
    pub consume_failed_msgs: u64,
}

fn put_hundredths(w: &mut SliceWriter<'_>, v: u64) {
    w.put_i64_dec(i64::try_from(v / 100).unwrap_or(i64::MAX));
    w.put_u8(b'.');
    let f = v % 100;
    w.put_u8(b'0' + (f / 10) as u8);
    w.put_u8(b'0' + (f % 10) as u8);
}

fn put_field_i64(w: &mut SliceWriter<'_>, first: bool, key: &str, v: i64) {
    if !first {
        w.put_u8(b',');
    }
    w.put_json_str(key);
    w.put_u8(b':');
    w.put_i64_dec(v);
}

fn put_info(w: &mut SliceWriter<'_>, p: &ProcessQueueInfo) {
    w.put_u8(b'{');
    put_field_i64(w, true, "cachedMsgCount", i64::from(p.cached_msg_count));
    put_field_i64(w, false, "cachedMsgMaxOffset", p.cached_msg_max_offset);
    put_field_i64(w, false, "cachedMsgMinOffset", p.cached_msg_min_offset);
    put_field_i64(
        w,
        false,
        "cachedMsgSizeInMiB",
        i64::from(p.cached_msg_size_mib),
    );
    put_field_i64(w, false, "commitOffset", p.commit_offset);
    w.put(br#","droped":false"#);
    put_field_i64(w, false, "lastConsumeTimestamp", p.last_consume_timestamp);
    put_field_i64(w, false, "lastLockTimestamp", p.last_lock_timestamp);
    put_field_i64(w, false, "lastPullTimestamp", p.last_pull_timestamp);
    if let Some(lag) = p.lag {
        put_field_i64(w, false, "lag", i64::try_from(lag).unwrap_or(i64::MAX));
    }
    w.put(if p.locked {
        br#","locked":true"#.as_slice()
    } else {
        br#","locked":false"#.as_slice()
    });
    w.put(br#","transactionMsgCount":0,"transactionMsgMaxOffset":0,"transactionMsgMinOffset":0,"tryUnlockTimes":0}"#);
}

fn put_status(w: &mut SliceWriter<'_>, s: &ConsumeStatus) {
    w.put(br#"{"consumeFailedMsgs":"#);
    w.put_i64_dec(i64::try_from(s.consume_failed_msgs).unwrap_or(i64::MAX));
    for (key, v) in [
        ("consumeFailedTPS", s.consume_failed_tps),
        ("consumeOKTPS", s.consume_ok_tps),
        ("consumeRT", s.consume_rt),
        ("pullRT", s.pull_rt),
        ("pullTPS", s.pull_tps),
    ] {
        w.put_u8(b',');
        w.put_json_str(key);
        w.put_u8(b':');
        put_hundredths(w, v);
    }
    w.put_u8(b'}');
}

/// Java's order of a `TreeSet<SubscriptionData>`: by `topic + "@" + subString`.
fn sub_order(a: &Subscription<'_>, b: &Subscription<'_>) -> Ordering {
    fn key<'s>(s: &Subscription<'s>) -> impl Iterator<Item = u8> + 's {
        let sub = s.expression.sub_string().as_bytes().iter().copied();
        s.topic.as_bytes().iter().copied().chain([b'@']).chain(sub)
    }
    key(a).cmp(key(b))
}

/// Writes a `ConsumerRunningInfo` body: `queues` (sorted here, Java's queue order),
/// `properties`, per-topic `status` (sorted here) and `subscriptions` (sorted here).
///
/// # Errors
/// [`BufferTooSmall`].
pub fn write_running_info(
    queues: &mut [(MessageQueue<'_>, ProcessQueueInfo)],
    properties: &[(&str, &str)],
    status: &mut [(&str, ConsumeStatus)],
    subscriptions: &mut [Subscription<'_>],
    buf: &mut [u8],
) -> Result<usize, BufferTooSmall> {
    queues.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    status.sort_unstable_by(|a, b| a.0.cmp(b.0));
    subscriptions.sort_unstable_by(sub_order);
    let mut w = SliceWriter::new(buf);
    w.put(br#"{"mqPopTable":{},"mqTable":{"#);
    for (i, (q, info)) in queues.iter().enumerate() {
        if i > 0 {
            w.put_u8(b',');
        }
        put_queue(&mut w, q);
        w.put_u8(b':');
        put_info(&mut w, info);
    }
    w.put(br#"},"properties":{"#);
    for (i, (k, v)) in properties.iter().enumerate() {
        if i > 0 {
            w.put_u8(b',');
        }
        w.put_json_str(k);
        w.put_u8(b':');
        w.put_json_str(v);
    }
    w.put(br#"},"statusTable":{"#);
    for (i, (topic, s)) in status.iter().enumerate() {
        if i > 0 {
            w.put_u8(b',');
        }
        w.put_json_str(topic);
        w.put_u8(b':');
        put_status(&mut w, s);
    }
    w.put(br#"},"subscriptionSet":["#);
    for (i, s) in subscriptions.iter().enumerate() {
        if i > 0 {
            w.put_u8(b',');
        }
        write_subscription(&mut w, s);
    }
    w.put(br#"],"userConsumerInfo":{}}"#);
    w.finish()
}

/// Writes a `GetConsumerStatusBody` (the answer to GET_CONSUMER_STATUS_FROM_CLIENT, Java
/// `ClientRemotingProcessor.getConsumeStatus`): `messageQueueTable`, each queue of the asked
/// topic with the consumer's offset (sorted here), and an empty `consumerTable` (the broker
/// fills that one when it gathers every client's answer).
///
/// ```
/// use rmq_core::admin::write_consumer_status;
/// use rmq_core::consumer::MessageQueue;
/// let mut queues = [(MessageQueue::new("T", "broker-a", 1), 7), (MessageQueue::new("T", "broker-a", 0), 3)];
/// let mut buf = [0u8; 256];
/// let n = write_consumer_status(&mut queues, &mut buf).unwrap();
/// assert_eq!(
///     core::str::from_utf8(&buf[..n]).unwrap(),
///     r#"{"consumerTable":{},"messageQueueTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:3,{"brokerName":"broker-a","queueId":1,"topic":"T"}:7}}"#
/// );
/// ```
///
/// # Errors
/// [`BufferTooSmall`].
pub fn write_consumer_status(
    queues: &mut [(MessageQueue<'_>, i64)],
    buf: &mut [u8],
) -> Result<usize, BufferTooSmall> {
    queues.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut w = SliceWriter::new(buf);
    w.put(br#"{"consumerTable":{},"messageQueueTable":{"#);
    for (i, (q, offset)) in queues.iter().enumerate() {
        if i > 0 {
            w.put_u8(b',');
        }
        put_queue(&mut w, q);
        w.put_u8(b':');
        w.put_i64_dec(*offset);
    }
    w.put(b"}}");
    w.finish()
}

#[cfg(test)]
mod tests;
