//! Message trace (Java `enableMsgTrace`, docs/protocol/TRACE.md): a producer's sends and a
//! consumer's handler calls become trace records ([`rmq_core::trace`]) that an inner producer
//! writes to the trace topic in the background, where the RocketMQ dashboard and
//! `mqadmin queryMsgTraceById` read them.
//!
//! A record is encoded where it happens and queued without waiting: when the queue
//! ([`QUEUE_CAPACITY`] records) is full, it is dropped and counted, so a slow or missing trace
//! topic costs the traced client nothing but the encoding. One task gathers the records of
//! each user topic ([`Gather`]: ten records, 128,000 bytes, or 5 s) into one trace message
//! whose keys are the records' message ids and user keys; a failed trace send is logged, never
//! retried beyond the inner producer's own retries.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rmq_core::message::keys;
use rmq_core::trace::{
    ConsumeReturn, DEFAULT_REGION, Gather, QUEUE_CAPACITY, Record, SubAfter, SubBefore, keys_of,
};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::consumer::ConsumedMessage;
use crate::{Message, Producer, ProducerConfig, clock};

/// One encoded record and what its trace message needs of it.
struct Entry {
    topic: String,
    text: Vec<u8>,
    keys: Vec<String>,
}

enum Msg {
    Record(Entry),
    /// Send what is gathered, stop the inner producer, then answer.
    Stop(oneshot::Sender<()>),
}

/// A traced client's side of its trace (cheap to clone).
#[derive(Clone)]
pub(crate) struct Tracer {
    tx: mpsc::Sender<Msg>,
    dropped: Arc<AtomicU64>,
}

/// Trace producers started in this process (Java numbers their groups the same way).
static STARTED: AtomicU64 = AtomicU64::new(0);

impl Tracer {
    /// The trace of a client of `group` (`role`: `PRODUCE` or `CONSUME`): records go to
    /// `topic` through an inner producer with `base`'s NameServers, ACL, TLS and protocol
    /// settings, of group `_INNER_TRACE_PRODUCER-<group>-<role>-<n>` (as Java's).
    pub(crate) fn start(
        base: &ProducerConfig,
        group: &str,
        role: &str,
        topic: String,
    ) -> Result<Tracer, crate::ConfigError> {
        let n = STARTED.fetch_add(1, Ordering::Relaxed) + 1;
        let mut cfg = base.clone();
        cfg.producer_group = format!("{}-{group}-{role}-{n}", rmq_core::trace::GROUP_PREFIX);
        cfg.instance_name = format!("PID_CLIENT_INNER_TRACE_PRODUCER_{}", std::process::id());
        cfg.send_msg_timeout = std::time::Duration::from_secs(5);
        (cfg.auto_batch, cfg.topics, cfg.lazy_start) = (None, Vec::new(), true);
        cfg.trace_topic = None;
        let producer = crate::ProducerBuilder::from_config(cfg).launch()?;
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        tokio::spawn(run(rx, producer, topic));
        let dropped = Arc::new(AtomicU64::new(0));
        Ok(Tracer { tx, dropped })
    }

    /// The trace of consumer `c`, to `topic` (its inner producer has the consumer's
    /// NameServers, ACL, TLS and protocol settings).
    pub(crate) fn of_consumer(
        c: &crate::consumer::ConsumerConfig,
        topic: &str,
    ) -> Result<Tracer, crate::ConfigError> {
        rmq_core::message::validate::validate_topic(topic)
            .map_err(|e| crate::ConfigError::Topic(topic.to_owned(), e))?;
        let mut base = crate::Producer::builder().config().clone();
        base.namesrv_addr.clone_from(&c.namesrv_addr);
        base.security = c.security.clone();
        (base.version, base.language) = (c.version, c.language);
        base.serialize_type = c.serialize_type;
        Tracer::start(&base, &c.group, "CONSUME", topic.to_owned())
    }

    /// Queues `record` about a message of `user_topic`; dropped (and counted) when the queue
    /// is full.
    pub(crate) fn record(&self, user_topic: &str, record: &Record<'_>) {
        let mut text = vec![0u8; 512];
        let n = loop {
            match record.write(&mut text) {
                Ok(n) => break n,
                Err(_) if text.len() < 1 << 20 => text.resize(text.len() * 8, 0),
                Err(_) => return,
            }
        };
        text.truncate(n);
        let keys = keys_of(record.msg_id(), record.keys());
        let entry = Entry {
            topic: user_topic.to_owned(),
            text,
            keys: keys.map(str::to_owned).collect(),
        };
        if self.tx.try_send(Msg::Record(entry)).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records dropped because the queue was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Sends what is gathered and stops the inner producer (at most 5 s).
    pub(crate) async fn shutdown(&self) {
        let (ack, done) = oneshot::channel();
        let limit = std::time::Duration::from_secs(5);
        let stop = async {
            if self.tx.send(Msg::Stop(ack)).await.is_ok() {
                let _ = done.await;
            }
        };
        let _ = tokio::time::timeout(limit, stop).await;
    }
}

/// The records gathered for one user topic's next trace message.
#[derive(Default)]
struct Gathered {
    gather: Gather,
    body: Vec<u8>,
    keys: BTreeSet<String>,
}

/// Gathers the records and sends the trace messages, until stopped (or every [`Tracer`] is
/// gone).
async fn run(mut rx: mpsc::Receiver<Msg>, producer: Producer, topic: String) {
    let mut gathered: HashMap<String, Gathered> = HashMap::new();
    loop {
        let due = gathered.values().filter_map(|g| g.gather.due()).min();
        let msg = match due {
            Some(due) => tokio::select! {
                m = rx.recv() => m,
                () = tokio::time::sleep_until(clock::to_tokio(due)) => {
                    let now = clock::now();
                    for g in gathered.values_mut() {
                        if g.gather.due().is_some_and(|d| d <= now) {
                            send(&producer, &topic, g);
                        }
                    }
                    continue;
                }
            },
            None => rx.recv().await,
        };
        match msg {
            Some(Msg::Record(e)) => {
                let g = gathered.entry(e.topic).or_default();
                g.body.extend_from_slice(&e.text);
                g.keys.extend(e.keys);
                if g.gather.add(clock::now(), e.text.len()) {
                    send(&producer, &topic, g);
                }
            }
            stop => {
                // What is gathered leaves before the producer stops.
                for m in gathered.values_mut().filter_map(|g| message(&topic, g)) {
                    if let Err(e) = producer.send(m).await {
                        warn!(error = %e, "send trace data failed");
                    }
                }
                producer.shutdown().await;
                if let Some(Msg::Stop(ack)) = stop {
                    let _ = ack.send(());
                }
                return;
            }
        }
    }
}

/// `g` as one trace message (`None` when empty), and `g` emptied.
fn message(topic: &str, g: &mut Gathered) -> Option<Message> {
    if g.gather.records() == 0 {
        return None;
    }
    g.gather.clear();
    let body = std::mem::take(&mut g.body);
    Some(Message::new(topic, body).with_keys(std::mem::take(&mut g.keys)))
}

/// Sends `g` as one trace message, in a task of its own, and empties it.
fn send(producer: &Producer, topic: &str, g: &mut Gathered) {
    let Some(m) = message(topic, g) else { return };
    let sending = producer.send_async(m);
    tokio::spawn(async move {
        match sending.await {
            Ok(r) => debug!(msg_id = r.msg_id, "trace data sent"),
            Err(e) => warn!(error = %e, "send trace data failed"),
        }
    });
}

/// One handler call's records (Java's consume hook): its `SubBefore`s are written by
/// [`Tracer::before`], its `SubAfter`s by [`Tracer::after`].
pub(crate) struct Call {
    request_id: String,
    started: std::time::Instant,
}

/// The messages of `batch` a trace covers (a message whose `TRACE_ON` is `false` is left out,
/// as Java does), with their region (`MSG_REGION`, which brokers add).
fn traced(batch: &[ConsumedMessage]) -> impl Iterator<Item = (&ConsumedMessage, &str)> {
    batch
        .iter()
        .filter(|m| m.property(keys::TRACE_SWITCH) != Some("false"))
        .map(|m| (m, m.property(keys::MSG_REGION).unwrap_or(DEFAULT_REGION)))
}

impl Tracer {
    /// A `SubBefore` of each message of `batch`, handed to a handler of `group` now.
    pub(crate) fn before(&self, group: &str, batch: &[ConsumedMessage]) -> Call {
        let id = format!("{:08X}{:012X}", clock::random_u32(), clock::unix_millis());
        let timestamp = clock::unix_millis();
        for (m, region) in traced(batch) {
            let r = SubBefore {
                timestamp,
                region,
                group,
                request_id: &id,
                msg_id: &m.msg_id,
                retry_times: m.reconsume_times,
                keys: m.keys(),
            };
            self.record(&m.topic, &Record::SubBefore(r));
        }
        let started = std::time::Instant::now();
        Call {
            request_id: id,
            started,
        }
    }

    /// A `SubAfter` of each message of the `call` on `batch` that ended (`code`; `success`:
    /// every message consumed).
    pub(crate) fn after(
        &self,
        group: &str,
        call: &Call,
        batch: &[ConsumedMessage],
        (success, code): (bool, ConsumeReturn),
    ) {
        let spent = u64::try_from(call.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let cost_ms = spent / u64::try_from(batch.len().max(1)).unwrap_or(1);
        let end = clock::unix_millis();
        for (m, _) in traced(batch) {
            let r = SubAfter {
                request_id: &call.request_id,
                msg_id: &m.msg_id,
                cost_ms,
                success,
                keys: m.keys(),
                code,
                local: Some((end, group)),
            };
            self.record(&m.topic, &Record::SubAfter(r));
        }
    }
}
