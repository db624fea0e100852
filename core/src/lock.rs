//! Orderly consumption's broker-side queue locks (Java `RebalanceImpl.lock/lockAll/unlock`,
//! `ConsumeMessageOrderlyService`): the constants, and the LOCK_BATCH_MQ (41) /
//! UNLOCK_BATCH_MQ (42) bodies. The schedule is the
//! [`PullConsumer`](crate::pull_consumer::PullConsumer)'s (with `PullConfig::orderly`):
//!
//! - a queue allocated to this consumer is taken only once the broker locked it for us, and
//!   starts locked (a failed lock drops it and rebalances again after
//!   [`RELOCK_REBALANCE_DELAY`]);
//! - every lock is renewed every [`LOCK_INTERVAL`]; one not renewed for [`LOCK_MAX_LIVE`] is
//!   treated as lost (the broker's lasts 60 s): its queue is neither pulled nor processed;
//! - the application processes a queue only between `begin` and `end`, one batch at a time;
//!   a queue revoked while it is busy is dropped when it ends;
//! - a dropped queue's offset is committed first, then the queue is unlocked, so its next
//!   owner starts exactly where this one stopped; [`stop`](crate::pull_consumer::PullConsumer::stop)
//!   unlocks every queue, so the next owner does not wait for the broker's lock to expire.

use crate::consumer::MessageQueue;
use crate::json::{BufferTooSmall, JsonError, Parser, SliceWriter};
use crate::time::Duration;

/// Time between lock renewals (Java `lockAll`, every 20 s).
pub const LOCK_INTERVAL: Duration = Duration::from_millis(20_000);
/// A lock not renewed for this long is treated as lost (Java `REBALANCE_LOCK_MAX_LIVE_TIME`).
pub const LOCK_MAX_LIVE: Duration = Duration::from_millis(30_000);
/// How long LOCK_BATCH_MQ and UNLOCK_BATCH_MQ may take (Java: 1 s).
pub const LOCK_TIMEOUT: Duration = Duration::from_millis(1000);
/// The next rebalance after a queue could not be locked (Java: 500 ms).
pub const RELOCK_REBALANCE_DELAY: Duration = Duration::from_millis(500);
/// A queue without its lock is pulled again after this (Java 5.x: 1 s; 4.9: 3 s).
pub const UNLOCKED_PULL_DELAY: Duration = Duration::from_millis(1000);
/// A failed batch is processed again after this (`suspendCurrentQueueTimeMillis`).
pub const SUSPEND_CURRENT_QUEUE_TIME: Duration = Duration::from_millis(1000);
/// Java's orderly default for `maxReconsumeTimes`: retried in place without end.
pub const MAX_RECONSUME_TIMES_ORDERLY: i32 = i32::MAX;

/// Orderly consumption, after the application failed a batch (Java
/// `ConsumeMessageOrderlyService.checkReconsumeTimes`): whether a message delivered
/// `reconsume_times + 1` times is skipped, resent to `%RETRY%<group>` as a normal message
/// ([`Client::resend`](crate::client::Client::resend)) and acknowledged once stored. Otherwise
/// (or when that resend fails) it is processed again, with its batch, after
/// [`SUSPEND_CURRENT_QUEUE_TIME`], counting one more reconsume time.
pub fn orderly_skips(reconsume_times: i32, max_reconsume_times: i32) -> bool {
    reconsume_times >= max_reconsume_times
}

/// Bytes one queue takes in a lock body (for sizing a batch).
pub fn queue_len(q: &MessageQueue<'_>) -> usize {
    crate::json::json_str_len(q.topic) + crate::json::json_str_len(q.broker_name) + 48
}

/// Writes a `LockBatchRequestBody` (also UNLOCK_BATCH_MQ's `UnlockBatchRequestBody`) as
/// fastjson does (keys sorted): `{"clientId":…,"consumerGroup":…,"mqSet":[{"brokerName":…,
/// "queueId":…,"topic":…}…],"onlyThisBroker":false}`.
///
/// # Errors
/// [`BufferTooSmall`].
pub fn write_lock_body<'q>(
    group: &str,
    client_id: &str,
    queues: impl Iterator<Item = MessageQueue<'q>>,
    buf: &mut [u8],
) -> Result<usize, BufferTooSmall> {
    let mut w = SliceWriter::new(buf);
    w.put(br#"{"clientId":"#);
    w.put_json_str(client_id);
    w.put(br#","consumerGroup":"#);
    w.put_json_str(group);
    w.put(br#","mqSet":["#);
    for (i, q) in queues.enumerate() {
        if i > 0 {
            w.put_u8(b',');
        }
        put_queue(&mut w, &q);
    }
    w.put(br#"],"onlyThisBroker":false}"#);
    w.finish()
}

/// A `MessageQueue` as fastjson writes it: `{"brokerName":…,"queueId":…,"topic":…}`.
pub(crate) fn put_queue(w: &mut SliceWriter<'_>, q: &MessageQueue<'_>) {
    w.put(br#"{"brokerName":"#);
    w.put_json_str(q.broker_name);
    w.put(br#","queueId":"#);
    w.put_i64_dec(i64::from(q.queue_id));
    w.put(br#","topic":"#);
    w.put_json_str(q.topic);
    w.put_u8(b'}');
}

/// Reads a `MessageQueue` object (any key order, unknown keys skipped) at `p`; `None` when a
/// field is missing (or a name has escapes).
pub(crate) fn read_queue<'b>(p: &mut Parser<'b>) -> Result<Option<MessageQueue<'b>>, JsonError> {
    p.expect_object_start()?;
    let (mut topic, mut broker, mut queue_id) = (None, None, None);
    while let Some(k) = p.next_key()? {
        if k.eq_str("topic") {
            topic = p.string()?.as_str();
        } else if k.eq_str("brokerName") {
            broker = p.string()?.as_str();
        } else if k.eq_str("queueId") {
            queue_id = i32::try_from(p.i64()?).ok();
        } else {
            p.skip_value()?;
        }
    }
    Ok(topic
        .zip(broker)
        .zip(queue_id)
        .map(|((t, b), q)| MessageQueue::new(t, b, q)))
}

/// Reads a `LockBatchResponseBody` (`{"lockOKMQSet":[{topic, brokerName, queueId}…]}`),
/// handing each locked queue to `f`. Names with escapes are skipped (topic and broker names
/// never have any).
///
/// # Errors
/// [`JsonError`] for malformed JSON.
pub fn parse_locked(body: &[u8], mut f: impl FnMut(MessageQueue<'_>)) -> Result<(), JsonError> {
    let mut p = Parser::new(body);
    p.expect_object_start()?;
    while let Some(key) = p.next_key()? {
        if !key.eq_str("lockOKMQSet") {
            p.skip_value()?;
            continue;
        }
        p.expect_array_start()?;
        while p.array_next()? {
            if let Some(q) = read_queue(&mut p)? {
                f(q);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
