//! Message trace (Java `enableMsgTrace`, docs/protocol/TRACE.md): a producer's sends and a
//! consumer's handler calls become trace records ([`rmq_core::trace`]) that an inner producer
//! writes to the trace topic in the background, where the RocketMQ dashboard and
//! `mqadmin queryMsgTraceById` read them.
//!
//! A record is encoded where it happens and gathered at once, under a lock, with the other
//! records of its user topic ([`Gather`]: ten records, 128,000 bytes, or 5 s); the record that
//! completes a trace message hands it to the inner producer in a task of its own. Nothing is
//! queued per record and no task is woken per record: tracing costs a traced send the encoding,
//! the lock and a tenth of a spawn. At most [`QUEUE_CAPACITY`] records are gathered or on
//! their way; past that (a slow trace topic) a record is dropped and counted. After a failed
//! trace send (a stopped or missing trace topic) records are dropped and counted for a pause
//! ([`Backoff`]: 1 s doubling up to 60 s, until a trace send succeeds). A trace message's keys
//! are its records' message ids and user keys; a failed trace send is logged, never retried
//! beyond the inner producer's own retries.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use rmq_core::message::keys;
use rmq_core::time::Instant;
use rmq_core::trace::{
    Backoff, ConsumeReturn, DEFAULT_REGION, FLUSH_INTERVAL, Gather, QUEUE_CAPACITY, Record,
    SubAfter, SubBefore, keys_of,
};
use tokio::runtime::Handle;
use tokio::sync::Notify;
use tracing::{debug, warn};

use crate::consumer::ConsumedMessage;
use crate::sync::lock;
use crate::{Message, Producer, ProducerConfig, clock};

/// What the [`Tracer`]s of one traced client share.
struct Shared {
    /// The inner producer and the trace topic.
    producer: Producer,
    topic: String,
    /// The records gathered per user topic, and the pause after failed trace sends.
    gathered: Mutex<(HashMap<String, Gathered>, Backoff)>,
    /// The end of the pause (ms of [`clock::now`]), read without the lock.
    paused_until: AtomicU64,
    /// Records gathered or in trace messages on their way ([`QUEUE_CAPACITY`] at most).
    held: AtomicUsize,
    dropped: AtomicU64,
    /// Wakes the flush task: a topic's first record set a new due time, or the trace stops.
    due_changed: Arc<Notify>,
    stopped: AtomicBool,
    runtime: Handle,
}

/// A traced client's side of its trace (cheap to clone).
#[derive(Clone)]
pub(crate) struct Tracer(Arc<Shared>);

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
        // Java's trace producer has the host's namespace v2 only: trace topics are not wrapped.
        (cfg.trace_topic, cfg.namespace) = (None, None);
        let producer = crate::ProducerBuilder::from_config(cfg).launch()?;
        let shared = Arc::new(Shared {
            producer,
            topic,
            gathered: Mutex::default(),
            paused_until: AtomicU64::new(0),
            held: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            due_changed: Arc::new(Notify::new()),
            stopped: AtomicBool::new(false),
            runtime: Handle::current(),
        });
        let wake = Arc::clone(&shared.due_changed);
        tokio::spawn(flush_when_due(Arc::downgrade(&shared), wake));
        Ok(Tracer(shared))
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

    /// Gathers `record` about a message of `user_topic`; dropped (and counted) when
    /// [`QUEUE_CAPACITY`] records are held already.
    pub(crate) fn record(&self, user_topic: &str, record: &Record<'_>) {
        let sh = &*self.0;
        let now = clock::now();
        let paused = now.millis() < sh.paused_until.load(Ordering::Relaxed);
        if paused || sh.stopped.load(Ordering::Relaxed) {
            sh.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if sh.held.fetch_add(1, Ordering::Relaxed) >= QUEUE_CAPACITY {
            sh.held.fetch_sub(1, Ordering::Relaxed);
            sh.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut small = [0u8; 1024];
        let mut large = Vec::new();
        let text = match record.write(&mut small) {
            Ok(n) => &small[..n],
            Err(_) => loop {
                large.resize((large.len() * 8).max(8 << 10), 0);
                match record.write(&mut large) {
                    Ok(n) => break &large[..n],
                    Err(_) if large.len() < 1 << 20 => {}
                    Err(_) => {
                        sh.held.fetch_sub(1, Ordering::Relaxed);
                        return;
                    }
                }
            },
        };
        let (full, first) = {
            let all = &mut lock(&sh.gathered).0;
            let g = match all.get_mut(user_topic) {
                Some(g) => g,
                None => all.entry(user_topic.to_owned()).or_default(),
            };
            let first = g.gather.records() == 0;
            g.body.extend_from_slice(text);
            for k in keys_of(record.msg_id(), record.keys()) {
                if !g.keys.contains(k) {
                    g.keys.insert(k.to_owned());
                }
            }
            let full = g.gather.add(now, text.len());
            (
                full.then(|| message(&sh.topic, g)).flatten(),
                first && !full,
            )
        };
        if let Some(m) = full {
            send(&self.0, m);
        } else if first {
            sh.due_changed.notify_one();
        }
    }

    /// Makes the inner producer follow the NameServer list its host follows
    /// ([`crate::NamesrvDomain`]).
    pub(crate) fn driver(&self) -> &crate::driver::Driver {
        self.0.producer.driver()
    }

    /// Records dropped because [`QUEUE_CAPACITY`] records were held.
    pub(crate) fn dropped(&self) -> u64 {
        self.0.dropped.load(Ordering::Relaxed)
    }

    /// Sends what is gathered and stops the inner producer (at most 5 s).
    pub(crate) async fn shutdown(&self) {
        let sh = &self.0;
        sh.stopped.store(true, Ordering::Relaxed);
        sh.due_changed.notify_one();
        let left: Vec<Message> = {
            let all = &mut lock(&sh.gathered).0;
            all.values_mut()
                .filter_map(|g| message(&sh.topic, g).map(|(m, _)| m))
                .collect()
        };
        let stopping = stop(Arc::clone(sh), left);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), stopping).await;
    }
}

/// Sends `left` and stops the inner producer, in a task of its own (the inner producer's
/// shutdown is a caller of [`Tracer::shutdown`]).
fn stop(sh: Arc<Shared>, left: Vec<Message>) -> tokio::task::JoinHandle<()> {
    sh.runtime.clone().spawn(async move {
        for m in left {
            if let Err(e) = sh.producer.send(m).await {
                warn!(error = %e, "send trace data failed");
            }
        }
        sh.producer.shutdown().await;
    })
}

/// The records gathered for one user topic's next trace message.
#[derive(Default)]
struct Gathered {
    gather: Gather,
    body: Vec<u8>,
    keys: BTreeSet<String>,
}

/// Sends the trace messages whose [`FLUSH_INTERVAL`] is up, until the trace stops or every
/// [`Tracer`] is gone.
async fn flush_when_due(shared: Weak<Shared>, wake: Arc<Notify>) {
    loop {
        let Some(sh) = shared.upgrade() else { return };
        if sh.stopped.load(Ordering::Relaxed) {
            return;
        }
        let now = clock::now();
        let (due, ready) = {
            let all = &mut lock(&sh.gathered).0;
            let ready: Vec<_> = all
                .values_mut()
                .filter(|g| g.gather.due().is_some_and(|d| d <= now))
                .filter_map(|g| message(&sh.topic, g))
                .collect();
            (all.values().filter_map(|g| g.gather.due()).min(), ready)
        };
        for m in ready {
            send(&sh, m);
        }
        // Woken by a new due time; looks again at least every FLUSH_INTERVAL (to end once
        // every Tracer is gone).
        let until = due.unwrap_or(now.saturating_add(FLUSH_INTERVAL));
        drop(sh);
        let _ = tokio::time::timeout_at(clock::to_tokio(until), wake.notified()).await;
    }
}

/// `g` as one trace message with its record count (`None` when empty), and `g` emptied.
fn message(topic: &str, g: &mut Gathered) -> Option<(Message, usize)> {
    let records = g.gather.records();
    if records == 0 {
        return None;
    }
    g.gather.clear();
    let body = std::mem::take(&mut g.body);
    Some((
        Message::new(topic, body).with_keys(std::mem::take(&mut g.keys)),
        records,
    ))
}

/// Sends trace message `m` of `records` records in a task of its own (they stop being held
/// when it ends), or drops them in a pause.
fn send(sh: &Arc<Shared>, (m, records): (Message, usize)) {
    if clock::now().millis() < sh.paused_until.load(Ordering::Relaxed) {
        sh.held.fetch_sub(records, Ordering::Relaxed);
        sh.dropped.fetch_add(records as u64, Ordering::Relaxed);
        return;
    }
    let (sending, sent) = (sh.producer.send_async(m), clock::now());
    let sh = Arc::clone(sh);
    sh.runtime.clone().spawn(async move {
        let r = sending.await;
        let paused = {
            let backoff = &mut lock(&sh.gathered).1;
            let paused = match &r {
                Ok(_) => {
                    backoff.succeeded(sent);
                    None
                }
                Err(_) => backoff.failed(sent, clock::now()),
            };
            let until = backoff.until().map_or(0, Instant::millis);
            sh.paused_until.store(until, Ordering::Relaxed);
            paused
        };
        match (r, paused) {
            (Ok(r), _) => debug!(msg_id = r.msg_id, "trace data sent"),
            (Err(e), Some(p)) => {
                warn!(error = %e, pause_ms = p.millis(), "send trace data failed: records dropped for the pause");
            }
            (Err(e), None) => debug!(error = %e, "send trace data failed"),
        }
        sh.held.fetch_sub(records, Ordering::Relaxed);
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
