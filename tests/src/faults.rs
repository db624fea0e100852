//! The real-broker fault bench (issue 40): real 5.3.3 brokers on 127.0.0.1, a producer per
//! (fault, policy) cell sending two fixed-rate streams (SYNC sends and ASYNC sends, each
//! arrival its own task, as the simulator's independent callers), and one fault at a time on
//! broker 0:
//!
//! - `pause-0.5s-every-3s`, `pause-8s-once`: `SIGSTOP` / `SIGCONT` of broker 0's JVM (a GC
//!   pause);
//! - `slow-150ms`, `slow-600ms`: every answer of broker 0 held that long by [`FaultRelay`];
//! - `hang`: [`FaultRelay`] drops broker 0's answers (it still accepts and reads: a silent
//!   broker);
//! - `flap`: broker 0 killed (`SIGKILL`) and restarted on the same store.
//!
//! Broker 0 registers as `127.0.0.2:<port>` ([`ClusterOptions::register_as`]) so that every
//! client connection to it passes through the relay, which also counts the sends it carries
//! (per topic): the attempts to the bad broker. The first quarter of a cell is healthy, the
//! fault starts at a quarter of the duration and lasts to the end (the 8 s pause: once).
//!
//! Results are the simulator's [`Report`]s (latency as each caller saw it, failures included),
//! so [`crate::sim::table`] and [`crate::sim::svg`] print them. The command: `rmq-faults`
//! (tests/src/bin/rmq-faults.rs); BENCHMARKS.md has the table.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rmq_core::fault::AdaptiveConfig;
use rmq_core::wire::headers::GetMaxOffsetRequestHeader;
use rmq_core::wire::{CommandHeader, Frame, RequestCode};
use rmq_std::{FaultProfile, Message, Producer};

use crate::broker::{Cluster, ClusterOptions, HarnessError, Version};
use crate::relay::{Acceptor, read_frame};
use crate::sim::{Policy, Report};

/// The topics of the two streams (distinct: the relay counts a send by the topic its header
/// names).
pub const ASYNC_TOPIC: &str = "fault_bench_async";
/// See [`ASYNC_TOPIC`].
pub const SYNC_TOPIC: &str = "fault_bench_sync";

/// Request codes of the sends the relay counts: SEND_MESSAGE, SEND_MESSAGE_V2,
/// SEND_BATCH_MESSAGE.
const SEND_CODES: [i32; 3] = [10, 310, 320];

#[derive(Debug, Default)]
struct Ctl {
    delay_ms: AtomicU64,
    hang: AtomicBool,
    stop: AtomicBool,
    sends: Mutex<HashMap<&'static str, u64>>,
    conns: Mutex<Vec<TcpStream>>,
}

/// A TCP relay in front of one broker that forwards client frames at once (counting the sends
/// among them per topic), holds each answer for the set delay, or drops every answer while
/// hung. A connection ends when either side ends it; a broker that refuses the relay's
/// connection gets its client's connection closed at once.
#[derive(Debug)]
pub struct FaultRelay {
    addr: SocketAddr,
    ctl: Arc<Ctl>,
    accept: Option<JoinHandle<()>>,
}

impl FaultRelay {
    /// Listens on `listen` and forwards to `upstream`.
    ///
    /// # Errors
    /// The listener could not be bound.
    pub fn start(listen: SocketAddr, upstream: SocketAddr) -> io::Result<FaultRelay> {
        let listener = TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let ctl = Arc::new(Ctl::default());
        let c = ctl.clone();
        let acceptor = Acceptor {
            connect: Duration::from_secs(1),
            idle: Duration::from_millis(5),
            error: Duration::from_millis(50),
        };
        let accept = std::thread::spawn(move || {
            acceptor.run(&listener, upstream, &c.stop, |_, pair, clones| {
                relay(pair, clones, &c)
            });
        });
        Ok(FaultRelay {
            addr,
            ctl,
            accept: Some(accept),
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Holds every answer forwarded from now on for `d`.
    pub fn set_delay(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.ctl.delay_ms.store(ms, Ordering::Relaxed);
    }

    /// Drops (`true`) or forwards (`false`) the broker's answers from now on.
    pub fn set_hang(&self, on: bool) {
        self.ctl.hang.store(on, Ordering::Relaxed);
    }

    /// Sends carried to the broker so far whose header names `topic`.
    pub fn sends(&self, topic: &str) -> u64 {
        let m = self.ctl.sends.lock().unwrap_or_else(|p| p.into_inner());
        m.get(topic).copied().unwrap_or(0)
    }
}

impl Drop for FaultRelay {
    fn drop(&mut self) {
        self.ctl.stop.store(true, Ordering::Relaxed);
        for s in self
            .ctl
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// Largest frame the relay reads.
const MAX_FRAME: usize = 64 << 20;

/// The topic (of [`ASYNC_TOPIC`], [`SYNC_TOPIC`]) a send frame names, if it is a send.
fn send_topic(frame: &[u8]) -> Option<&'static str> {
    let f = Frame::new_checked(frame).ok()?;
    let h = CommandHeader::parse(&f).ok()?;
    if h.is_response() || !SEND_CODES.contains(&h.code()) {
        return None;
    }
    let header = f.header_ref();
    [ASYNC_TOPIC, SYNC_TOPIC]
        .into_iter()
        .find(|t| header.windows(t.len()).any(|w| w == t.as_bytes()))
}

/// Serves one client and its broker connection (see [`Acceptor::run`]).
fn relay([client, server]: [TcpStream; 2], [c2, s2]: [TcpStream; 2], ctl: &Arc<Ctl>) {
    {
        let mut conns = ctl.conns.lock().unwrap_or_else(|p| p.into_inner());
        conns.retain(|s| s.peer_addr().is_ok());
        if let (Ok(a), Ok(b)) = (client.try_clone(), server.try_clone()) {
            conns.extend([a, b]);
        }
    }
    let end = |a: &TcpStream, b: &TcpStream| {
        let _ = a.shutdown(Shutdown::Both);
        let _ = b.shutdown(Shutdown::Both);
    };
    // Client to broker: forwarded at once, sends counted.
    let (mut from, mut to, c) = (client, server, ctl.clone());
    std::thread::spawn(move || {
        while let Ok(frame) = read_frame(&mut from, 0..=MAX_FRAME) {
            if let Some(topic) = send_topic(&frame) {
                let mut m = c.sends.lock().unwrap_or_else(|p| p.into_inner());
                *m.entry(topic).or_default() += 1;
            }
            if to.write_all(&frame).is_err() {
                break;
            }
        }
        end(&from, &to);
    });
    // Broker to client: each answer held until its time (in order), or dropped while hung.
    let (mut from, to, c) = (s2, c2, ctl.clone());
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = to.try_clone();
    std::thread::spawn(move || {
        let Ok(mut to) = writer else { return };
        while let Ok((due, frame)) = rx.recv() {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            if to.write_all(&frame).is_err() {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        while let Ok(frame) = read_frame(&mut from, 0..=MAX_FRAME) {
            if c.hang.load(Ordering::Relaxed) {
                continue;
            }
            let due = Instant::now() + Duration::from_millis(c.delay_ms.load(Ordering::Relaxed));
            if tx.send((due, frame)).is_err() {
                break;
            }
        }
        end(&from, &to);
    });
}

/// One fault on broker 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// No fault (the baseline).
    Healthy,
    /// `SIGSTOP` 0.5 s every 3 s.
    Pause,
    /// `SIGSTOP` 8 s, once.
    Pause8s,
    /// Every answer +150 ms.
    Slow150,
    /// Every answer +600 ms.
    Slow600,
    /// Accepts and reads, never answers.
    Hang,
    /// Killed and restarted.
    Flap,
}

impl Fault {
    /// All, in report order.
    pub const ALL: [Fault; 7] = [
        Fault::Healthy,
        Fault::Pause,
        Fault::Pause8s,
        Fault::Slow150,
        Fault::Slow600,
        Fault::Hang,
        Fault::Flap,
    ];

    /// Report name (and the name `--faults` takes).
    pub fn name(self) -> &'static str {
        match self {
            Fault::Healthy => "healthy",
            Fault::Pause => "pause-0.5s-every-3s",
            Fault::Pause8s => "pause-8s-once",
            Fault::Slow150 => "slow-150ms",
            Fault::Slow600 => "slow-600ms",
            Fault::Hang => "hang",
            Fault::Flap => "flap",
        }
    }

    /// The fault named `s` (its report name, or its first word: `pause`, `slow-150ms`, …).
    pub fn parse(s: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == s).or(match s {
            "pause" => Some(Fault::Pause),
            "pause-8s" => Some(Fault::Pause8s),
            "slow-150" => Some(Fault::Slow150),
            "slow-600" => Some(Fault::Slow600),
            _ => None,
        })
    }
}

/// The streams of one cell.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// How long the streams send.
    pub duration: Duration,
    /// ASYNC sends started per second.
    pub async_rate: u32,
    /// SYNC sends started per second.
    pub sync_rate: u32,
    /// Body size, bytes.
    pub body: usize,
}

impl Default for Load {
    fn default() -> Self {
        Load {
            duration: Duration::from_secs(30),
            async_rate: 200,
            sync_rate: 100,
            body: 256,
        }
    }
}

/// One (fault, policy) cell: the ASYNC stream's report and the SYNC stream's.
#[derive(Clone, Debug)]
pub struct Cell {
    /// ASYNC sends ([`Report::scenario`] is the fault's name and ` async`).
    pub async_sends: Report,
    /// SYNC sends (` sync`).
    pub sync_sends: Report,
    /// Messages stored beyond the sends that succeeded, ASYNC and SYNC: the growth of the
    /// topics' max offsets on every broker (asked directly, after the cell) less the successful
    /// sends. An attempt cut short by the per-attempt cap and retried elsewhere is stored twice
    /// when broker 0 still stores the first copy; a send that failed after its message was
    /// stored counts too (an application that resends it stores it twice).
    pub extra_stored: [u64; 2],
}

/// One send as its caller saw it.
#[derive(Clone, Copy, Debug)]
struct Sent {
    at: Duration,
    took: Duration,
    ok: bool,
    attempts: u8,
}

/// The cluster, the relay in front of broker 0, and the two topics.
pub struct Bench {
    cluster: Cluster,
    relay: FaultRelay,
    rt: tokio::runtime::Runtime,
    cells: u32,
}

/// Queues of each topic on each broker.
const QUEUES: i32 = 4;

/// Where broker 0 registers: a second loopback address, at the relay.
const RELAYED_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

impl Bench {
    /// Starts a 5.3.3 cluster of `brokers` masters (2 or more), the relay in front of broker
    /// 0, and both topics (4 queues on every broker); then runs a 5 s healthy cell whose
    /// figures are dropped.
    ///
    /// # Errors
    /// The cluster or the relay did not start.
    pub fn start(brokers: usize) -> Result<Bench, HarnessError> {
        let options = ClusterOptions {
            brokers: brokers.max(2),
            register_as: vec![(0, RELAYED_IP)],
            ..ClusterOptions::default()
        };
        let cluster = Cluster::start(Version::V5_3_3, options)?;
        let relay = FaultRelay::start(cluster.broker_addr(0), cluster.bound_addr(0))
            .map_err(|e| HarnessError::new(format!("relay at {}: {e}", cluster.broker_addr(0))))?;
        cluster.create_topic_retrying(ASYNC_TOPIC, QUEUES as u32);
        cluster.create_topic_retrying(SYNC_TOPIC, QUEUES as u32);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| HarnessError::new(format!("tokio runtime: {e}")))?;
        let mut bench = Bench {
            cluster,
            relay,
            rt,
            cells: 0,
        };
        // The brokers' JIT warmed up by a healthy cell whose figures are dropped (the first
        // cell's p99 was several times the next ones' without it).
        let warm = Load {
            duration: Duration::from_secs(5),
            ..Load::default()
        };
        bench.run(Fault::Healthy, Policy::RoundRobin, warm)?;
        Ok(bench)
    }

    /// The cluster (logs, pids).
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Runs one cell: a fresh producer with `policy`, both streams for `load.duration`, the
    /// fault from a quarter of it on; then waits for every send to end, heals broker 0 and
    /// waits until it serves again.
    ///
    /// # Errors
    /// The producer did not start, or broker 0 did not come back after the cell.
    pub fn run(&mut self, fault: Fault, policy: Policy, load: Load) -> Result<Cell, HarnessError> {
        self.cells += 1;
        let producer = self.producer(policy)?;
        let before = [ASYNC_TOPIC, SYNC_TOPIC].map(|t| self.relay.sends(t));
        let stored_before = self.stored()?;
        let t0 = Instant::now();
        let streams = [ASYNC_TOPIC, SYNC_TOPIC].map(|topic| {
            let rate = match topic {
                ASYNC_TOPIC => load.async_rate,
                _ => load.sync_rate,
            };
            self.rt
                .spawn(stream(producer.clone(), topic, rate, load, t0))
        });
        let at_tail = self.inject(fault, load.duration, t0);
        let mut out = Vec::new();
        for (i, s) in streams.into_iter().enumerate() {
            let sent = self
                .rt
                .block_on(s)
                .map_err(|e| HarnessError::new(format!("stream task: {e}")))?;
            let topic = [ASYNC_TOPIC, SYNC_TOPIC][i];
            let bad = self.relay.sends(topic) - before[i];
            let tail_bad = self.relay.sends(topic).saturating_sub(at_tail[i]);
            let kind = ["async", "sync"][i];
            let name: &'static str = Box::leak(format!("{} {kind}", fault.name()).into_boxed_str());
            out.push(report(name, policy, &sent, bad, tail_bad, load.duration));
        }
        self.heal()?;
        let stored = self.stored()?;
        let extra_stored = [0, 1].map(|i| {
            let grown = stored[i].saturating_sub(stored_before[i]);
            grown.saturating_sub(out[i].ok)
        });
        self.rt.block_on(producer.shutdown());
        let sync_sends = out.pop().expect("two streams");
        let async_sends = out.pop().expect("two streams");
        Ok(Cell {
            async_sends,
            sync_sends,
            extra_stored,
        })
    }

    /// Messages stored in each topic ([`ASYNC_TOPIC`], [`SYNC_TOPIC`]) on every broker: the
    /// sum of its queues' max offsets (GET_MAX_OFFSET, asked of each broker directly).
    fn stored(&self) -> Result<[u64; 2], HarnessError> {
        let admin = rmq_admin::Admin::builder()
            .namesrv_addr(&self.cluster.namesrv_addr().to_string())
            .build();
        let mut out = [0u64; 2];
        for (i, topic) in [ASYNC_TOPIC, SYNC_TOPIC].into_iter().enumerate() {
            for b in 0..self.cluster.broker_count() {
                let addr = self.cluster.bound_addr(b).to_string();
                for queue_id in 0..QUEUES {
                    let header = GetMaxOffsetRequestHeader {
                        topic,
                        queue_id,
                        committed: Some(true),
                    };
                    let asked = admin.call(&addr, false, RequestCode::GET_MAX_OFFSET, header, &[]);
                    let r = self
                        .rt
                        .block_on(asked)
                        .map_err(|e| HarnessError::new(format!("max offset at {addr}: {e}")))?;
                    let offset = r.ext_field("offset").and_then(|o| o.parse::<u64>().ok());
                    out[i] += offset.ok_or_else(|| {
                        HarnessError::new(format!("max offset at {addr}: {:?}", r.code))
                    })?;
                }
            }
        }
        Ok(out)
    }

    fn producer(&self, policy: Policy) -> Result<Producer, HarnessError> {
        let b = Producer::builder()
            .namesrv_addr(&self.cluster.namesrv_addr().to_string())
            .producer_group(format!("fault_bench_{}", self.cells))
            .topics([ASYNC_TOPIC, SYNC_TOPIC]);
        let b = match policy {
            Policy::RoundRobin => b.send_latency_fault_enable(false),
            Policy::Java49 => b.fault_profile(FaultProfile::Java49),
            Policy::Java5 => b.fault_profile(FaultProfile::Java5),
            // The core's parameters (a cap of at least 200 ms), as rmq-smoltcp has them.
            Policy::Adaptive => b
                .fault_profile(FaultProfile::Adaptive)
                .adaptive_config(AdaptiveConfig::DEFAULT),
            // rmq-std's defaults (RUNTIME_ADAPTIVE).
            Policy::AdaptiveStd => b.fault_profile(FaultProfile::Adaptive),
        };
        let p = self
            .rt
            .block_on(b.start())
            .map_err(|e| HarnessError::new(format!("producer: {e}")))?;
        // Routes learned and a connection to every broker before the clock starts.
        let warm = self.cluster.broker_count() * 8;
        for topic in [ASYNC_TOPIC, SYNC_TOPIC] {
            for _ in 0..warm {
                let m = Message::new(topic, vec![b'w'; 16]);
                self.rt
                    .block_on(p.send(m))
                    .map_err(|e| HarnessError::new(format!("warm-up send: {e}")))?;
            }
        }
        Ok(p)
    }

    /// Plays `fault` on broker 0 until `duration` after `t0`; returns the relay's send counts
    /// at three quarters of it.
    fn inject(&mut self, fault: Fault, duration: Duration, t0: Instant) -> [u64; 2] {
        let start = t0 + duration / 4;
        let tail = t0 + duration * 3 / 4;
        let end = t0 + duration;
        let mut at_tail = None;
        let mut tail_mark = |relay: &FaultRelay| {
            if at_tail.is_none() && Instant::now() >= tail {
                at_tail = Some([ASYNC_TOPIC, SYNC_TOPIC].map(|t| relay.sends(t)));
            }
        };
        let sleep_until =
            |t: Instant| std::thread::sleep(t.saturating_duration_since(Instant::now()));
        let pid = self.cluster.broker_pid(0);
        let signal = |sig: &str| signal(pid, sig);
        sleep_until(start.min(tail));
        match fault {
            Fault::Healthy => {}
            Fault::Slow150 => self.relay.set_delay(Duration::from_millis(150)),
            Fault::Slow600 => self.relay.set_delay(Duration::from_millis(600)),
            Fault::Hang => self.relay.set_hang(true),
            Fault::Pause8s => {
                signal("STOP");
                sleep_until(start + Duration::from_secs(8));
                signal("CONT");
            }
            Fault::Pause => {
                let mut next = start;
                while next < end {
                    signal("STOP");
                    sleep_until(next + Duration::from_millis(500));
                    signal("CONT");
                    tail_mark(&self.relay);
                    next += Duration::from_secs(3);
                    sleep_until(next.min(end));
                    tail_mark(&self.relay);
                }
            }
            Fault::Flap => self.cluster.kill9_broker(0),
        }
        while Instant::now() < end {
            tail_mark(&self.relay);
            std::thread::sleep(Duration::from_millis(20));
        }
        tail_mark(&self.relay);
        at_tail.unwrap_or([0, 0])
    }

    /// Broker 0 healthy again: running, answering at once, serving the topics.
    fn heal(&mut self) -> Result<(), HarnessError> {
        self.relay.set_delay(Duration::ZERO);
        self.relay.set_hang(false);
        match self.cluster.broker_pid(0) {
            Some(pid) => {
                signal(Some(pid), "CONT");
                Ok(())
            }
            None => {
                self.cluster.restart_broker(0)?;
                // Registered again (the NameServer lists it within a heartbeat).
                std::thread::sleep(Duration::from_secs(5));
                Ok(())
            }
        }
    }
}

/// Sends `sig` (`STOP`, `CONT`) to `pid` with kill(1).
fn signal(pid: Option<u32>, sig: &str) {
    if let Some(pid) = pid {
        let st = std::process::Command::new("kill")
            .args([format!("-{sig}"), pid.to_string()])
            .status();
        if !st.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("kill -{sig} {pid} failed: {st:?}");
        }
    }
}

/// One stream: a send started every `1 / rate` s for `load.duration`, each its own task;
/// returns every send once all ended.
async fn stream(p: Producer, topic: &'static str, rate: u32, load: Load, t0: Instant) -> Vec<Sent> {
    let mut tasks = Vec::new();
    let every = Duration::from_secs(1) / rate.max(1);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    while t0.elapsed() < load.duration {
        tick.tick().await;
        let p = p.clone();
        let m = Message::new(topic, vec![b'x'; load.body]);
        let at = t0.elapsed();
        tasks.push(tokio::spawn(async move {
            let begun = Instant::now();
            let r = match topic {
                ASYNC_TOPIC => p.send_async(m).await,
                _ => p.send(m).await,
            };
            let took = begun.elapsed();
            let (ok, attempts) = match &r {
                Ok(s) => (true, s.attempts),
                Err(e) => (false, e.attempts()),
            };
            Sent {
                at,
                took,
                ok,
                attempts,
            }
        }));
    }
    let mut sent = Vec::with_capacity(tasks.len());
    for t in tasks {
        if let Ok(s) = t.await {
            sent.push(s);
        }
    }
    sent
}

fn report(
    scenario: &'static str,
    policy: Policy,
    sent: &[Sent],
    bad: u64,
    tail_bad: u64,
    duration: Duration,
) -> Report {
    let mut ms: Vec<u64> = sent
        .iter()
        .map(|s| u64::try_from(s.took.as_millis()).unwrap_or(u64::MAX))
        .collect();
    ms.sort_unstable();
    let pct = |q: f64| {
        let i = ((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len().max(1)) - 1;
        ms.get(i).copied().unwrap_or(0)
    };
    let tail_from = duration * 3 / 4;
    Report {
        scenario,
        policy,
        sends: sent.len() as u64,
        ok: sent.iter().filter(|s| s.ok).count() as u64,
        p50: pct(0.50),
        p99: pct(0.99),
        p999: pct(0.999),
        max: ms.last().copied().unwrap_or(0),
        attempts: sent.iter().map(|s| u64::from(s.attempts)).sum(),
        bad_attempts: bad,
        tail_attempts: sent
            .iter()
            .filter(|s| s.at >= tail_from)
            .map(|s| u64::from(s.attempts))
            .sum(),
        tail_bad_attempts: tail_bad,
    }
}
