//! The Java reference tools of `tests/java/`: `Verifier` (reads a topic back with the official
//! client) and `JavaProducer` (sends with the official client).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::{Cluster, HarnessError};

/// One message as the official Java client read it back (see `tests/java/Verifier.java`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedMessage {
    /// Topic.
    pub topic: String,
    /// Queue id.
    pub queue_id: i32,
    /// Offset in the consume queue.
    pub queue_offset: i64,
    /// `TAGS` property, if any.
    pub tags: Option<String>,
    /// `KEYS` property, if any.
    pub keys: Option<String>,
    /// Every property, system ones included (`UNIQ_KEY`, `TAGS`, `KEYS`, `MIN_OFFSET`, …).
    pub properties: BTreeMap<String, String>,
    /// The body as the client returns it (decompressed).
    pub body: Vec<u8>,
    /// `getMsgId()`: the UNIQ_KEY when the producer set one, else the offset id.
    pub msg_id: String,
    /// The broker-assigned offset message id (store host + commit-log offset).
    pub offset_msg_id: String,
    /// `ip:port` of the storing broker.
    pub store_host: String,
    /// `ip:port` the producer connected from.
    pub born_host: String,
    /// Producer timestamp, ms.
    pub born_timestamp: i64,
    /// Broker timestamp, ms.
    pub store_timestamp: i64,
    /// Message sysFlag as stored.
    pub sys_flag: i32,
    /// Reconsume times.
    pub reconsume_times: i32,
    /// Message flag.
    pub flag: i32,
    /// CRC of the body as stored.
    pub body_crc: i32,
    /// Physical commit-log offset.
    pub commit_log_offset: i64,
    /// Stored size in bytes.
    pub store_size: i32,
}

fn field<'a>(v: &'a Value, k: &str) -> Result<&'a Value, HarnessError> {
    v.get(k)
        .ok_or_else(|| HarnessError::new(format!("verifier line lacks {k:?}: {v}")))
}

fn string(v: &Value, k: &str) -> Result<String, HarnessError> {
    field(v, k)?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| HarnessError::new(format!("verifier field {k:?} is not a string: {v}")))
}

fn opt_string(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_owned)
}

fn int(v: &Value, k: &str) -> Result<i64, HarnessError> {
    field(v, k)?
        .as_i64()
        .ok_or_else(|| HarnessError::new(format!("verifier field {k:?} is not an integer: {v}")))
}

fn int32(v: &Value, k: &str) -> Result<i32, HarnessError> {
    i32::try_from(int(v, k)?)
        .map_err(|_| HarnessError::new(format!("verifier field {k:?} out of i32 range: {v}")))
}

/// Standard base64 (with padding) decoder.
fn base64_decode(s: &str) -> Result<Vec<u8>, HarnessError> {
    fn val(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let bytes: Vec<u8> = s.bytes().filter(|c| *c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            let v = val(*c).ok_or_else(|| HarnessError::new(format!("bad base64 {s:?}")))?;
            acc |= v << (18 - 6 * i);
        }
        let n = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return Err(HarnessError::new(format!("bad base64 length {s:?}"))),
        };
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + n]);
    }
    Ok(out)
}

impl VerifiedMessage {
    fn from_json(v: &Value) -> Result<VerifiedMessage, HarnessError> {
        let mut properties = BTreeMap::new();
        if let Some(map) = field(v, "properties")?.as_object() {
            for (k, val) in map {
                properties.insert(k.clone(), val.as_str().unwrap_or_default().to_owned());
            }
        }
        Ok(VerifiedMessage {
            topic: string(v, "topic")?,
            queue_id: int32(v, "queueId")?,
            queue_offset: int(v, "queueOffset")?,
            tags: opt_string(v, "tags"),
            keys: opt_string(v, "keys"),
            properties,
            body: match opt_string(v, "body") {
                Some(b) => base64_decode(&b)?,
                None => Vec::new(),
            },
            msg_id: string(v, "msgId")?,
            offset_msg_id: string(v, "offsetMsgId")?,
            store_host: string(v, "storeHost")?,
            born_host: string(v, "bornHost")?,
            born_timestamp: int(v, "bornTimestamp")?,
            store_timestamp: int(v, "storeTimestamp")?,
            sys_flag: int32(v, "sysFlag")?,
            reconsume_times: int32(v, "reconsumeTimes")?,
            flag: int32(v, "flag")?,
            body_crc: int32(v, "bodyCRC")?,
            commit_log_offset: int(v, "commitLogOffset")?,
            store_size: int32(v, "storeSize")?,
        })
    }
}

/// Reads `topic` from offset 0 of every queue with the official Java client (a fresh consumer
/// group) until `expected_count` messages were read or no new message arrived for `idle`.
/// Messages are sorted by (queue id, queue offset). Returns what was read even if fewer than
/// expected: callers assert the count.
pub fn verifier_read(
    cluster: &Cluster,
    topic: &str,
    expected_count: usize,
    idle: Duration,
) -> Result<Vec<VerifiedMessage>, HarnessError> {
    let args = vec![
        cluster.namesrv_addr().to_string(),
        topic.to_owned(),
        expected_count.to_string(),
        idle.as_millis().to_string(),
    ];
    let out = cluster.run_java_tool("Verifier", &args, idle + Duration::from_secs(60))?;
    let mut msgs = Vec::new();
    let mut end = None;
    for line in out.lines() {
        if let Some(json) = line.strip_prefix("RMQV ") {
            let v: Value = serde_json::from_str(json)
                .map_err(|e| HarnessError::new(format!("bad verifier line {line:?}: {e}")))?;
            msgs.push(VerifiedMessage::from_json(&v)?);
        } else if let Some(n) = line.strip_prefix("RMQV-END ") {
            end = n.trim().parse::<usize>().ok();
        }
    }
    if end != Some(msgs.len()) {
        return Err(HarnessError::new(format!(
            "verifier output incomplete (end line {end:?}, {} messages):\n{out}",
            msgs.len()
        )));
    }
    if msgs.len() < expected_count {
        let debug: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("RMQV-DEBUG"))
            .collect();
        eprintln!(
            "verifier_read({topic}): {} of {expected_count} messages; {}",
            msgs.len(),
            debug.join("\n")
        );
    }
    msgs.sort_by_key(|m| (m.queue_id, m.queue_offset));
    Ok(msgs)
}

/// One send result printed by `JavaProducer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendLine {
    /// Message index.
    pub index: u64,
    /// `SEND_OK`, `FLUSH_DISK_TIMEOUT`, …, `ONEWAY`, or `ERROR`.
    pub status: String,
    /// Client message id (UNIQ_KEY).
    pub msg_id: Option<String>,
    /// Broker offset message id.
    pub offset_msg_id: Option<String>,
    /// Broker that stored it.
    pub broker_name: Option<String>,
    /// Queue id.
    pub queue_id: Option<i32>,
    /// Queue offset.
    pub queue_offset: Option<i64>,
    /// The exception text for `ERROR`.
    pub error: Option<String>,
}

/// Builder for a run of `tests/java/JavaProducer.java` against a [`Cluster`].
#[derive(Debug, Clone)]
pub struct JavaProducer {
    topic: String,
    count: u64,
    body: Option<String>,
    size: usize,
    tags: Option<String>,
    keys: Option<String>,
    props: Vec<(String, String)>,
    mode: &'static str,
    group: Option<String>,
    compress_over: Option<usize>,
    compress_type: Option<String>,
    timeout: Duration,
    namesrv: Option<String>,
    delay_ms: Option<String>,
    trace: Option<String>,
    namespace: Option<String>,
}

impl JavaProducer {
    /// `count` sync sends of 16-byte generated bodies to `topic`.
    pub fn new(topic: &str, count: u64) -> JavaProducer {
        JavaProducer {
            topic: topic.to_owned(),
            count,
            body: None,
            size: 16,
            tags: None,
            keys: None,
            props: Vec::new(),
            mode: "sync",
            group: None,
            compress_over: None,
            compress_type: None,
            timeout: Duration::from_secs(120),
            namesrv: None,
            delay_ms: None,
            trace: None,
            namespace: None,
        }
    }

    /// Namespace v1 (`ClientConfig.setNamespace`): the topic and group are sent as `ns%name`.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.to_owned());
        self
    }

    /// Timer messages delivered `ms` after the broker receives them (`TIMER_DELAY_MS`, Java
    /// 5.x `Message.setDelayTimeMs`).
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.delay_ms = Some(ms.to_string());
        self
    }

    /// Message trace on (`DefaultMQProducer(group, true, null)`: Pub records to
    /// `RMQ_SYS_TRACE_TOPIC`).
    pub fn trace(mut self) -> Self {
        self.trace = Some("true".to_owned());
        self
    }

    /// Body text; `{i}` is replaced by the message index.
    pub fn body(mut self, text: &str) -> Self {
        self.body = Some(text.to_owned());
        self
    }

    /// Generated body size (when no [`body`](Self::body) is set).
    pub fn size(mut self, size: usize) -> Self {
        self.size = size;
        self
    }

    /// Tags; `{i}` is replaced by the message index.
    pub fn tags(mut self, tags: &str) -> Self {
        self.tags = Some(tags.to_owned());
        self
    }

    /// Keys; `{i}` is replaced by the message index.
    pub fn keys(mut self, keys: &str) -> Self {
        self.keys = Some(keys.to_owned());
        self
    }

    /// A user property; `{i}` in the value is replaced by the message index.
    pub fn prop(mut self, k: &str, v: &str) -> Self {
        self.props.push((k.to_owned(), v.to_owned()));
        self
    }

    /// Asynchronous sends.
    pub fn asynchronous(mut self) -> Self {
        self.mode = "async";
        self
    }

    /// Transactional sends (a `TransactionMQProducer` whose listener commits).
    pub fn transactional(mut self) -> Self {
        self.mode = "transaction";
        self
    }

    /// One-way sends.
    pub fn oneway(mut self) -> Self {
        self.mode = "oneway";
        self
    }

    /// Producer group.
    pub fn group(mut self, g: &str) -> Self {
        self.group = Some(g.to_owned());
        self
    }

    /// `compressMsgBodyOverHowmuch` (the client default is 4096).
    pub fn compress_over(mut self, bytes: usize) -> Self {
        self.compress_over = Some(bytes);
        self
    }

    /// Java's `rocketmq.message.compressType` (`ZLIB`, `LZ4`, `ZSTD`; 4.9.4+ and 5.x clients).
    pub fn compress_type(mut self, ty: &str) -> Self {
        self.compress_type = Some(ty.to_owned());
        self
    }

    /// NameServer address to use instead of the cluster's (for example a recording relay).
    pub fn namesrv(mut self, addr: &str) -> Self {
        self.namesrv = Some(addr.to_owned());
        self
    }

    /// Overall time limit of the JVM.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Runs the producer; fails if the JVM fails or any send failed.
    pub fn run(&self, cluster: &Cluster) -> Result<Vec<SendLine>, HarnessError> {
        let mut args = vec![
            "--namesrv".to_owned(),
            self.namesrv
                .clone()
                .unwrap_or_else(|| cluster.namesrv_addr().to_string()),
            "--topic".to_owned(),
            self.topic.clone(),
            "--count".to_owned(),
            self.count.to_string(),
            "--size".to_owned(),
            self.size.to_string(),
            "--mode".to_owned(),
            self.mode.to_owned(),
        ];
        let mut opt = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                args.push(k.to_owned());
                args.push(v.clone());
            }
        };
        opt("--body", &self.body);
        opt("--tags", &self.tags);
        opt("--keys", &self.keys);
        opt("--group", &self.group);
        opt(
            "--compress-over",
            &self.compress_over.map(|n| n.to_string()),
        );
        opt("--compress-type", &self.compress_type);
        opt("--delay-ms", &self.delay_ms);
        opt("--trace", &self.trace);
        opt("--namespace", &self.namespace);
        for (k, v) in &self.props {
            args.push("--prop".to_owned());
            args.push(format!("{k}={v}"));
        }
        let out = cluster.run_java_tool("JavaProducer", &args, self.timeout)?;
        let mut lines = Vec::new();
        for line in out.lines() {
            let Some(json) = line.strip_prefix("RMQP ") else {
                continue;
            };
            let v: Value = serde_json::from_str(json)
                .map_err(|e| HarnessError::new(format!("bad producer line {line:?}: {e}")))?;
            lines.push(SendLine {
                index: v.get("i").and_then(Value::as_u64).unwrap_or(u64::MAX),
                status: opt_string(&v, "status").unwrap_or_default(),
                msg_id: opt_string(&v, "msgId"),
                offset_msg_id: opt_string(&v, "offsetMsgId"),
                broker_name: opt_string(&v, "brokerName"),
                queue_id: v
                    .get("queueId")
                    .and_then(Value::as_i64)
                    .and_then(|q| i32::try_from(q).ok()),
                queue_offset: v.get("queueOffset").and_then(Value::as_i64),
                error: opt_string(&v, "error"),
            });
        }
        lines.sort_by_key(|l| l.index);
        if !out.lines().any(|l| l.starts_with("RMQP-END ")) {
            return Err(HarnessError::new(format!(
                "producer printed no end line:\n{out}"
            )));
        }
        Ok(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::base64_decode;

    #[test]
    fn base64_vectors() {
        // RFC 4648 §10 test vectors.
        for (enc, dec) in [
            ("", ""),
            ("Zg==", "f"),
            ("Zm8=", "fo"),
            ("Zm9v", "foo"),
            ("Zm9vYg==", "foob"),
            ("Zm9vYmE=", "fooba"),
            ("Zm9vYmFy", "foobar"),
        ] {
            assert_eq!(base64_decode(enc).unwrap(), dec.as_bytes(), "{enc}");
        }
        assert!(base64_decode("Z").is_err());
        assert!(base64_decode("Zm9*").is_err());
    }
}
