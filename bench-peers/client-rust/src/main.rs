//! Bench-only producer (and push consumer) on mxsm `rocketmq-client-rust` for `tests/bench/compare`.
//!
//! Same command line and same result line as the other bench clients:
//!
//! ```text
//! rmq-bench-peer-rust --namesrv 127.0.0.1:9876 --topic T --mode sync|async --size 1024 \
//!     --conc 64 --count 20000 [--warmup 2000] [--group G] [--timeout-ms 3000]
//! RESULT client=rust mode=async size=1024 conc=64 msgs=20000 errors=0 secs=.. msgs_per_s=.. p50_us=.. p99_us=..
//! ```
//!
//! `sync`: `conc` tasks, each awaiting one `send_with_timeout` at a time.
//! `async`: one loop issuing `send_with_callback_timeout`, at most `conc` in flight (a semaphore
//! permit is returned by the callback).
//!
//! `consume`: a push consumer with the crate's default settings (group `--group`, from the first
//! offset, `subscribe(topic, "*")`) and a concurrent listener that only records each message:
//!
//! ```text
//! rmq-bench-peer-rust --mode consume --namesrv H:P --topic T --group G --count N [--timeout-ms MS]
//! RESULT client=rust mode=consume size=<first body> conc=0 msgs=.. errors=<N-msgs> secs=.. msgs_per_s=.. p50_us=.. p99_us=..
//! ```
//!
//! Per message `latency_us = (now_unix_ms - born_timestamp_ms) * 1000`; `secs` runs from the
//! first delivered message to the N-th, `msgs_per_s = (N-1)/secs`. `--timeout-ms` defaults to
//! 300000 in this mode; on timeout the line reports what arrived and the process exits with 1.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocketmq_client_rust::{
    ClientError, ClientResult, ClientRuntime, ClientRuntimeConfig, ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus, DefaultMQProducer, DefaultMQPushConsumer, MQPushConsumer,
    MessageListenerConcurrently, SendResult, SendStatus,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};
use tokio::sync::Semaphore;

#[derive(Clone)]
struct Args {
    namesrv: String,
    topic: String,
    group: String,
    mode: String,
    size: usize,
    conc: usize,
    count: u64,
    warmup: u64,
    timeout_ms: u64,
    timeout_given: bool,
}

fn parse_args() -> Args {
    let mut a = Args {
        namesrv: "127.0.0.1:9876".into(),
        topic: "BenchTopic".into(),
        group: "bench_rust".into(),
        mode: "async".into(),
        size: 1024,
        conc: 1,
        count: 10_000,
        warmup: 0,
        timeout_ms: 3000,
        timeout_given: false,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let v = argv.get(i + 1).cloned().unwrap_or_default();
        match argv[i].as_str() {
            "--namesrv" => a.namesrv = v,
            "--topic" => a.topic = v,
            "--group" => a.group = v,
            "--mode" => a.mode = v,
            "--size" => a.size = v.parse().expect("--size"),
            "--conc" => a.conc = v.parse().expect("--conc"),
            "--count" => a.count = v.parse().expect("--count"),
            "--warmup" => a.warmup = v.parse().expect("--warmup"),
            "--timeout-ms" => {
                a.timeout_ms = v.parse().expect("--timeout-ms");
                a.timeout_given = true;
            }
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    assert!(a.conc >= 1, "--conc must be >= 1");
    if a.mode == "consume" {
        assert!(a.count >= 1, "--count must be >= 1");
        if !a.timeout_given {
            a.timeout_ms = 300_000;
        }
    }
    a
}

fn message(topic: &str, body: &[u8]) -> Message {
    Message::builder()
        .topic(topic)
        .body_slice(body)
        .build_unchecked()
}

/// Latencies in microseconds, one per completed send (success or failure).
#[derive(Default)]
struct Stats {
    lat_us: Mutex<Vec<u64>>,
    errors: AtomicU64,
}

async fn run_sync(
    producer: &Arc<DefaultMQProducer>,
    a: &Args,
    body: &Arc<Vec<u8>>,
    n: u64,
) -> Arc<Stats> {
    let stats = Arc::new(Stats::default());
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..a.conc {
        let (producer, stats, next, body, a) = (
            producer.clone(),
            stats.clone(),
            next.clone(),
            body.clone(),
            a.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut local = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let t0 = Instant::now();
                let r = producer
                    .send_with_timeout(message(&a.topic, &body), a.timeout_ms)
                    .await;
                local.push(t0.elapsed().as_micros() as u64);
                match r {
                    Ok(Some(res)) if res.send_status == SendStatus::SendOk => {}
                    _ => {
                        stats.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            stats.lat_us.lock().unwrap().extend(local);
        }));
    }
    for t in tasks {
        t.await.expect("sync sender task");
    }
    stats
}

async fn run_async(
    producer: &Arc<DefaultMQProducer>,
    a: &Args,
    body: &Arc<Vec<u8>>,
    n: u64,
) -> Arc<Stats> {
    let stats = Arc::new(Stats::default());
    let sem = Arc::new(Semaphore::new(a.conc));
    for _ in 0..n {
        sem.acquire().await.expect("semaphore").forget();
        let t0 = Instant::now();
        let (stats_cb, sem_cb) = (stats.clone(), sem.clone());
        let r = producer
            .send_with_callback_timeout(
                message(&a.topic, body),
                move |res: Option<&SendResult>, err: Option<&ClientError>| {
                    let us = t0.elapsed().as_micros() as u64;
                    stats_cb.lat_us.lock().unwrap().push(us);
                    match (res, err) {
                        (Some(r), None) if r.send_status == SendStatus::SendOk => {}
                        _ => {
                            stats_cb.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    sem_cb.add_permits(1);
                },
                a.timeout_ms,
            )
            .await;
        if r.is_err() {
            stats.errors.fetch_add(1, Ordering::Relaxed);
            stats
                .lat_us
                .lock()
                .unwrap()
                .push(t0.elapsed().as_micros() as u64);
            sem.add_permits(1);
        }
    }
    // Wait for every callback: all permits back.
    let deadline = Instant::now() + Duration::from_millis(a.timeout_ms * 3);
    let all = sem.acquire_many(a.conc as u32);
    if tokio::time::timeout_at(deadline.into(), all).await.is_err() {
        eprintln!("rust peer: callbacks missing after timeout");
    }
    stats
}

/// What the consume listener records. `lat_us` is preallocated to `--count`; a slot is claimed
/// with one `fetch_add`, deliveries beyond `--count` (redeliveries included) are counted only.
struct ConsumeStats {
    n: u64,
    /// Base for the `*_ns` instants below (monotonic clock).
    base: Instant,
    lat_us: Box<[AtomicU64]>,
    next: AtomicU64,
    first_size: AtomicU64,
    first_ns: AtomicU64,
    nth_ns: AtomicU64,
    last_ns: AtomicU64,
    done: tokio::sync::Notify,
}

impl ConsumeStats {
    fn new(n: u64) -> Self {
        Self {
            n,
            base: Instant::now(),
            lat_us: (0..n).map(|_| AtomicU64::new(0)).collect(),
            next: AtomicU64::new(0),
            first_size: AtomicU64::new(0),
            first_ns: AtomicU64::new(u64::MAX),
            nth_ns: AtomicU64::new(u64::MAX),
            last_ns: AtomicU64::new(0),
            done: tokio::sync::Notify::new(),
        }
    }

    fn record(&self, msg: &MessageExt) {
        let now_ns = self.base.elapsed().as_nanos() as u64;
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let lat_us = (now_ms - msg.born_timestamp()).max(0) as u64 * 1000;
        let i = self.next.fetch_add(1, Ordering::AcqRel);
        self.last_ns.fetch_max(now_ns, Ordering::AcqRel);
        if i == 0 {
            self.first_size.store(
                msg.message_inner().body_slice().len() as u64,
                Ordering::Release,
            );
            self.first_ns.store(now_ns, Ordering::Release);
        }
        if i < self.n {
            self.lat_us[i as usize].store(lat_us, Ordering::Relaxed);
        }
        if i + 1 == self.n {
            self.nth_ns.store(now_ns, Ordering::Release);
            self.done.notify_one();
        }
    }
}

/// The listener: record every message of the batch, always succeed.
struct RecordListener(Arc<ConsumeStats>);

impl MessageListenerConcurrently for RecordListener {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        for m in msgs {
            self.0.record(m);
        }
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

/// Runs the consume benchmark, prints the RESULT line, returns the process exit code.
async fn run_consume(client_runtime: Arc<ClientRuntime>, a: &Args) -> i32 {
    let stats = Arc::new(ConsumeStats::new(a.count));
    let mut consumer = DefaultMQPushConsumer::builder(client_runtime)
        .consumer_group(a.group.clone())
        .name_server_addr(a.namesrv.clone())
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .build();
    consumer
        .subscribe(a.topic.clone(), "*")
        .await
        .expect("consumer subscribe");
    consumer.register_message_listener_concurrently(RecordListener(stats.clone()));
    consumer.start().await.expect("consumer start");

    let timeout = Duration::from_millis(a.timeout_ms);
    let timed_out = tokio::time::timeout(timeout, stats.done.notified())
        .await
        .is_err();

    let n = a.count;
    let delivered = stats.next.load(Ordering::Acquire);
    let received = delivered.min(n);
    // The thread that took slot 0 may still be between its fetch_add and its store.
    let mut first_ns = stats.first_ns.load(Ordering::Acquire);
    while received > 0 && first_ns == u64::MAX {
        std::thread::yield_now();
        first_ns = stats.first_ns.load(Ordering::Acquire);
    }
    let end_ns = if timed_out {
        stats.last_ns.load(Ordering::Acquire)
    } else {
        stats.nth_ns.load(Ordering::Acquire)
    };
    let secs = if received > 0 {
        end_ns.saturating_sub(first_ns) as f64 / 1e9
    } else {
        0.0
    };
    let rate = if secs > 0.0 {
        received.saturating_sub(1) as f64 / secs
    } else {
        0.0
    };
    let mut lat: Vec<u64> = stats.lat_us[..received as usize]
        .iter()
        .map(|v| v.load(Ordering::Relaxed))
        .collect();
    lat.sort_unstable();
    println!(
        "RESULT client=rust mode=consume size={} conc=0 msgs={} errors={} secs={:.3} msgs_per_s={:.1} p50_us={} p99_us={}",
        stats.first_size.load(Ordering::Acquire),
        received,
        n - received,
        secs,
        rate,
        pct(&lat, 0.50),
        pct(&lat, 0.99)
    );
    if timed_out {
        eprintln!(
            "rust peer: timeout after {} ms, {delivered} of {n} messages delivered",
            a.timeout_ms
        );
    }
    if tokio::time::timeout(Duration::from_secs(5), consumer.shutdown())
        .await
        .is_err()
    {
        eprintln!("rust peer: consumer shutdown exceeded 5 s");
    }
    if timed_out { 1 } else { 0 }
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let idx = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx]
}

fn main() {
    let a = parse_args();
    let owner = RuntimeOwner::plan(RuntimeConfig {
        thread_name: "bench-peer-rust".to_string(),
        ..Default::default()
    })
    .expect("runtime plan")
    .build()
    .expect("runtime build");
    let mut tcfg = rocketmq_observability::TelemetryBootstrapConfig::default();
    tcfg.logging.enabled = false;
    // Diagnostics only: RMQ_BENCH_PEER_LOG=<tracing filter> turns the client's logging on (stderr).
    if let Ok(filter) = std::env::var("RMQ_BENCH_PEER_LOG") {
        tcfg.logging.enabled = true;
        tcfg.logging.filter = filter;
        tcfg.logging.console.ansi = false;
    }
    let telemetry = rocketmq_observability::install_global(&tcfg).expect("telemetry");
    let client_runtime = ClientRuntime::try_new(
        owner.root_context().component("client"),
        ClientRuntimeConfig::default(),
        telemetry.handle(),
    )
    .expect("client runtime");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");
    if a.mode == "consume" {
        let code = rt.block_on(run_consume(client_runtime.clone(), &a));
        std::process::exit(code);
    }
    rt.block_on(async {
        let mut producer = DefaultMQProducer::builder(client_runtime.clone())
            .producer_group(a.group.clone())
            .name_server_addr(a.namesrv.clone())
            .build();
        producer.set_send_latency_fault_enable(true);
        producer.start().await.expect("producer start");
        let producer = Arc::new(producer);
        let body = Arc::new(vec![b'x'; a.size]);
        let run = |n: u64| {
            let (producer, a, body) = (producer.clone(), a.clone(), body.clone());
            async move {
                if a.mode == "sync" {
                    run_sync(&producer, &a, &body, n).await
                } else {
                    run_async(&producer, &a, &body, n).await
                }
            }
        };
        if a.warmup > 0 {
            run(a.warmup).await;
        }
        let t0 = Instant::now();
        let stats = run(a.count).await;
        let secs = t0.elapsed().as_secs_f64();
        let mut lat = std::mem::take(&mut *stats.lat_us.lock().unwrap());
        lat.sort_unstable();
        let errors = stats.errors.load(Ordering::Relaxed);
        println!(
            "RESULT client=rust mode={} size={} conc={} msgs={} errors={} secs={:.3} msgs_per_s={:.0} p50_us={} p99_us={}",
            a.mode,
            a.size,
            a.conc,
            a.count,
            errors,
            secs,
            a.count as f64 / secs,
            pct(&lat, 0.50),
            pct(&lat, 0.99)
        );
        match Arc::try_unwrap(producer) {
            Ok(mut p) => p.shutdown().await,
            Err(_) => eprintln!("rust peer: producer still shared at shutdown"),
        }
    });
    // Process exit tears down the client runtime threads; no graceful report needed for a bench.
    std::process::exit(0);
}
