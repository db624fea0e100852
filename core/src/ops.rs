//! What an operator's tool (Java `mqadmin`, `rmq cluster|topics|progress`) asks NameServers and
//! brokers, and how their answers read: the request headers are in
//! [`wire::headers`](crate::wire::headers), the answer bodies are read here. Each reader calls
//! back once per item with strings borrowed from the body (nothing allocated), so a runtime
//! keeps what it needs.
//!
//! The bodies are JSON as fastjson writes it (docs/protocol/WIRE.md §16): bean fields sorted by
//! name, `Long` map keys bare (`{0:"127.0.0.1:10911"}`), `MessageQueue` map keys written as
//! objects, which [`Parser`] reads.
//!
//! | request | to | answer read by |
//! |---|---|---|
//! | GET_BROKER_CLUSTER_INFO (106) | NameServer | [`read_cluster_info`] |
//! | GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) | NameServer | [`read_topic_list`] |
//! | UPDATE_AND_CREATE_TOPIC (17) | each master broker | the response code |
//! | GET_CONSUME_STATS (208) | each broker of a group's topics | [`read_consume_stats`] |
//! | INVOKE_BROKER_TO_RESET_OFFSET (222) | each master of the topic | [`read_reset_offsets`] |
//! | GET_BROKER_RUNTIME_INFO (28) | a broker | [`read_kv_table`] |
//! | SET_MESSAGE_REQUEST_MODE (401) | each master of the topic | the response code; its body is [`write_request_mode`]'s |

use crate::json::{JsonError, JsonStr, Parser};

/// Why an answer's body could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BodyError {
    /// Not JSON as fastjson writes it.
    Json(JsonError),
    /// A name with JSON escapes or not UTF-8 (broker, cluster and topic names have neither).
    Name,
    /// A field the answer must carry is absent.
    Missing(&'static str),
}

impl From<JsonError> for BodyError {
    fn from(e: JsonError) -> Self {
        BodyError::Json(e)
    }
}

impl core::fmt::Display for BodyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BodyError::Json(e) => write!(f, "malformed answer body: {e}"),
            BodyError::Name => f.write_str("a name in the answer has escapes or is not UTF-8"),
            BodyError::Missing(k) => write!(f, "the answer has no `{k}`"),
        }
    }
}

impl core::error::Error for BodyError {}

fn name(s: JsonStr<'_>) -> Result<&str, BodyError> {
    s.as_str()
        .filter(|_| !s.has_escapes())
        .ok_or(BodyError::Name)
}

/// One broker address of a cluster (one row of `mqadmin clusterList`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterBroker<'a> {
    /// The cluster it belongs to.
    pub cluster: &'a str,
    /// The broker (master and slaves share it).
    pub broker: &'a str,
    /// `0` for the master, `>= 1` for a slave.
    pub id: i64,
    /// `host:port`.
    pub addr: &'a str,
}

/// Reads a `ClusterInfo` (the answer to GET_BROKER_CLUSTER_INFO): `f` once per broker address,
/// in the body's order.
///
/// # Errors
/// [`BodyError`]; `f` may have been called for the brokers before the fault.
pub fn read_cluster_info(
    body: &[u8],
    f: &mut dyn FnMut(ClusterBroker<'_>),
) -> Result<(), BodyError> {
    let mut p = Parser::new(body);
    p.expect_object_start()?;
    while let Some(key) = p.next_key()? {
        if !key.eq_str("brokerAddrTable") {
            p.skip_value()?;
            continue;
        }
        p.expect_object_start()?;
        while let Some(broker) = p.next_key()? {
            let broker = name(broker)?;
            // BrokerData: its fields sorted by name put `brokerAddrs` before `cluster`.
            let (mut cluster, mut addrs) = (None, None);
            p.expect_object_start()?;
            while let Some(k) = p.next_key()? {
                if k.eq_str("cluster") {
                    cluster = Some(name(p.string()?)?);
                } else if k.eq_str("brokerAddrs") {
                    addrs = Some(p.skip_value_span()?);
                } else {
                    p.skip_value()?;
                }
            }
            let cluster = cluster.ok_or(BodyError::Missing("cluster"))?;
            let mut a = Parser::new(addrs.ok_or(BodyError::Missing("brokerAddrs"))?);
            a.expect_object_start()?;
            while let Some(id) = a.next_key()? {
                let id = id.parse_i64().ok_or(BodyError::Missing("brokerId"))?;
                let addr = name(a.string()?)?;
                f(ClusterBroker {
                    cluster,
                    broker,
                    id,
                    addr,
                });
            }
        }
    }
    p.finish()?;
    Ok(())
}

/// Reads a `TopicList` (the answer to GET_ALL_TOPIC_LIST_FROM_NAMESERVER): `f` once per topic.
///
/// # Errors
/// [`BodyError`].
pub fn read_topic_list(body: &[u8], f: &mut dyn FnMut(&str)) -> Result<(), BodyError> {
    let mut p = Parser::new(body);
    p.expect_object_start()?;
    while let Some(key) = p.next_key()? {
        if !key.eq_str("topicList") {
            p.skip_value()?;
            continue;
        }
        p.expect_array_start()?;
        while p.array_next()? {
            f(name(p.string()?)?);
        }
    }
    p.finish()?;
    Ok(())
}

/// A queue as a `MessageQueue` map key names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueRef<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Broker name.
    pub broker: &'a str,
    /// Queue id.
    pub queue_id: i32,
}

fn queue_key(raw: &[u8]) -> Result<QueueRef<'_>, BodyError> {
    let mut p = Parser::new(raw);
    let (mut topic, mut broker, mut queue_id) = (None, None, None);
    p.expect_object_start()?;
    while let Some(k) = p.next_key()? {
        if k.eq_str("topic") {
            topic = Some(name(p.string()?)?);
        } else if k.eq_str("brokerName") {
            broker = Some(name(p.string()?)?);
        } else if k.eq_str("queueId") {
            queue_id = i32::try_from(p.i64()?).ok();
        } else {
            p.skip_value()?;
        }
    }
    p.finish()?;
    Ok(QueueRef {
        topic: topic.ok_or(BodyError::Missing("topic"))?,
        broker: broker.ok_or(BodyError::Missing("brokerName"))?,
        queue_id: queue_id.ok_or(BodyError::Missing("queueId"))?,
    })
}

/// One queue's progress in a group (`OffsetWrapper`): a row of `mqadmin consumerProgress`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueProgress<'a> {
    /// The queue.
    pub queue: QueueRef<'a>,
    /// The queue's max offset on the broker.
    pub broker_offset: i64,
    /// The group's committed offset.
    pub consumer_offset: i64,
    /// When the last consumed message was stored, Unix ms (0: none).
    pub last_timestamp: i64,
}

impl QueueProgress<'_> {
    /// Messages not consumed yet (`brokerOffset - consumerOffset`, never negative).
    pub fn lag(&self) -> i64 {
        self.broker_offset
            .saturating_sub(self.consumer_offset)
            .max(0)
    }
}

/// Reads a `ConsumeStats` (the answer to GET_CONSUME_STATS): `f` once per queue; returns the
/// group's `consumeTps` on that broker.
///
/// # Errors
/// [`BodyError`].
pub fn read_consume_stats(
    body: &[u8],
    f: &mut dyn FnMut(QueueProgress<'_>),
) -> Result<f64, BodyError> {
    let mut p = Parser::new(body);
    let mut tps = 0.0;
    p.expect_object_start()?;
    while let Some(key) = p.next_key()? {
        if key.eq_str("consumeTps") {
            tps = p.number_value()?.as_f64().unwrap_or(0.0);
            continue;
        }
        if !key.eq_str("offsetTable") {
            p.skip_value()?;
            continue;
        }
        p.expect_object_start()?;
        while let Some(k) = p.next_key()? {
            let queue = queue_key(k.raw())?;
            let mut q = QueueProgress {
                queue,
                broker_offset: 0,
                consumer_offset: 0,
                last_timestamp: 0,
            };
            p.expect_object_start()?;
            while let Some(field) = p.next_key()? {
                let slot = if field.eq_str("brokerOffset") {
                    &mut q.broker_offset
                } else if field.eq_str("consumerOffset") {
                    &mut q.consumer_offset
                } else if field.eq_str("lastTimestamp") {
                    &mut q.last_timestamp
                } else {
                    p.skip_value()?;
                    continue;
                };
                *slot = p.i64()?;
            }
            f(q);
        }
    }
    p.finish()?;
    Ok(tps)
}

/// Reads a `ResetOffsetBody` (the answer to INVOKE_BROKER_TO_RESET_OFFSET): `f` once per
/// queue with the offset the group was moved to.
///
/// # Errors
/// [`BodyError`].
pub fn read_reset_offsets(
    body: &[u8],
    f: &mut dyn FnMut(QueueRef<'_>, i64),
) -> Result<(), BodyError> {
    let mut p = Parser::new(body);
    p.expect_object_start()?;
    while let Some(key) = p.next_key()? {
        if !key.eq_str("offsetTable") {
            p.skip_value()?;
            continue;
        }
        p.expect_object_start()?;
        while let Some(k) = p.next_key()? {
            let queue = queue_key(k.raw())?;
            f(queue, p.i64()?);
        }
    }
    p.finish()?;
    Ok(())
}

/// Reads a `KVTable` (the answer to GET_BROKER_RUNTIME_INFO: `brokerVersionDesc`, `putTps`,
/// ...): `f` once per entry whose key and value have no JSON escapes (the statistics never
/// do; an entry that has some is skipped).
///
/// # Errors
/// [`BodyError`].
pub fn read_kv_table(body: &[u8], f: &mut dyn FnMut(&str, &str)) -> Result<(), BodyError> {
    let mut p = Parser::new(body);
    p.expect_object_start()?;
    while let Some(key) = p.next_key()? {
        if !key.eq_str("table") {
            p.skip_value()?;
            continue;
        }
        p.expect_object_start()?;
        while let Some(k) = p.next_key()? {
            let v = p.string()?;
            if let (Ok(k), Ok(v)) = (name(k), name(v)) {
                f(k, v);
            }
        }
    }
    p.finish()?;
    Ok(())
}

/// The body of SET_MESSAGE_REQUEST_MODE (docs/protocol/POP.md §7, Java
/// `SetMessageRequestModeRequestBody`, as `mqadmin setConsumeMode` sends it): `group` reads
/// `topic` by POP (`pop`) or by pull; with POP, `pop_share_queue_num` -1 gives every consumer
/// every queue (popped with queue id -1). Written into `buf`; returns its length.
///
/// # Errors
/// `buf` is too small.
pub fn write_request_mode(
    topic: &str,
    group: &str,
    pop: bool,
    pop_share_queue_num: i32,
    buf: &mut [u8],
) -> Result<usize, crate::json::BufferTooSmall> {
    let mut w = crate::json::SliceWriter::new(buf);
    w.put(b"{\"consumerGroup\":");
    w.put_json_str(group);
    w.put(b",\"mode\":");
    w.put(if pop { b"\"POP\"" } else { b"\"PULL\"" });
    w.put(b",\"popShareQueueNum\":");
    w.put_i64_dec(i64::from(pop_share_queue_num));
    w.put(b",\"topic\":");
    w.put_json_str(topic);
    w.put(b"}");
    w.finish()
}

#[cfg(test)]
mod tests;
