//! A deterministic simulator of send policies against misbehaving brokers.
//!
//! Everything runs on a virtual clock in milliseconds with a seeded RNG, so a run is a pure
//! function of (scenario, policy, seed): results are exact and machine-independent.
//!
//! - **Load**: Poisson arrivals of SYNC `send()` calls at `rate_per_sec`, for `duration`.
//!   Every send is independent (open loop, as many concurrent sends as needed); all sends share
//!   one producer's [`FaultTable`] and [`QueueCounter`], as a runtime would.
//! - **Brokers**: `brokers.len()` brokers with `queues_per_broker` queues each. A healthy
//!   broker answers SUCCESS after `2 ms + Exp(mean 3 ms)`; broker 0 follows the scenario's
//!   [`BrokerModel`].
//! - **Policies** ([`Policy`]): the real `rmq_core::retry::SendPlan` with the `Plain`
//!   (latency switch off), `Java49`, `Java5` or `Adaptive` profile. The simulator only plays
//!   the runtime: it performs the attempts the plan asks for and reports outcomes and timeouts.
//!
//! Reported: success rate, p50/p99/max of the latency each caller sees (failures included,
//! at the time they are reported), and the share of attempts sent to broker 0 (the bad one).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;

use rmq_core::counter::QueueCounter;
use rmq_core::fault::FaultTable;
use rmq_core::retry::{AttemptOutcome, RetryConfig, SendEnv, SendMode, SendPlan, Step};
use rmq_core::select::PublishQueue;
use rmq_core::time::Instant;
use rmq_core::transport::TransportError;

/// SplitMix64: small, seedable, stable across platforms and crate versions.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
    /// Exponential with the given mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }
}

/// How broker 0 behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerModel {
    /// Like the others.
    Healthy,
    /// Every answer takes this many extra milliseconds.
    Slow(u64),
    /// Every answer takes `extra` more milliseconds until `until` ms, then none (it recovers).
    SlowUntil {
        /// Extra latency, ms.
        extra: u64,
        /// When it recovers, ms.
        until: u64,
    },
    /// Stops answering for `pause` ms every `period` ms (first pause at `offset`); requests
    /// due during a pause are answered right after it.
    GcPause {
        /// Period, ms.
        period: u64,
        /// Pause length, ms.
        pause: u64,
        /// Start of the first pause, ms.
        offset: u64,
    },
    /// Connections are refused at once (1 ms).
    DeadRefused,
    /// Accepts requests and never answers.
    DeadSilent,
    /// Alternates `up` ms healthy and `down` ms silent (starting up).
    Flapping {
        /// Healthy phase, ms.
        up: u64,
        /// Silent phase, ms.
        down: u64,
    },
}

/// A simulated workload.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Short name for reports.
    pub name: &'static str,
    /// Behaviour of broker 0.
    pub bad: BrokerModel,
    /// Number of brokers (all but broker 0 healthy).
    pub brokers: u8,
    /// Queues per broker.
    pub queues_per_broker: i32,
    /// Mean arrivals per second.
    pub rate_per_sec: f64,
    /// Arrivals stop after this many ms (sends in flight finish).
    pub duration_ms: u64,
    /// RNG seed.
    pub seed: u64,
}

impl Scenario {
    /// The standard set: 2 brokers × 4 queues, 200 sends/s for 120 s.
    pub fn standard() -> Vec<Scenario> {
        let base = |name, bad| Scenario {
            name,
            bad,
            brokers: 2,
            queues_per_broker: 4,
            rate_per_sec: 200.0,
            duration_ms: 120_000,
            seed: 42,
        };
        vec![
            base("healthy", BrokerModel::Healthy),
            base("slow-600ms", BrokerModel::Slow(600)),
            // Consistently slower but never failing: below every cap and isolation threshold.
            base("slower-100ms", BrokerModel::Slow(100)),
            base("slower-300ms", BrokerModel::Slow(300)),
            base("slower-500ms", BrokerModel::Slow(500)),
            base(
                "slower-300ms-recovers",
                BrokerModel::SlowUntil {
                    extra: 300,
                    until: 60_000,
                },
            ),
            base(
                "gc-2s-every-10s",
                BrokerModel::GcPause {
                    period: 10_000,
                    pause: 2_000,
                    offset: 5_000,
                },
            ),
            base("dead-refused", BrokerModel::DeadRefused),
            base("dead-silent", BrokerModel::DeadSilent),
            base(
                "flapping-5s",
                BrokerModel::Flapping {
                    up: 5_000,
                    down: 5_000,
                },
            ),
        ]
    }
}

impl Scenario {
    /// The same set, scaled down for CI: 100 sends/s for 20 s (GC pauses at 5 s and 15 s; the
    /// slow broker that recovers does at 10 s).
    pub fn small() -> Vec<Scenario> {
        Scenario::standard()
            .into_iter()
            .map(|s| Scenario {
                rate_per_sec: 100.0,
                duration_ms: 20_000,
                bad: match s.bad {
                    BrokerModel::SlowUntil { extra, .. } => BrokerModel::SlowUntil {
                        extra,
                        until: 10_000,
                    },
                    b => b,
                },
                ..s
            })
            .collect()
    }
}

/// A send policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Java default: latency switch off.
    RoundRobin,
    /// Java 4.9.8, latency switch on.
    Java49,
    /// Java 5.3.3, latency switch on.
    Java5,
    /// rmq's adaptive profile with the core's parameters (`AdaptiveConfig::DEFAULT`: a
    /// per-attempt cap of at least 200 ms), as rmq-smoltcp uses it.
    Adaptive,
    /// The same profile with rmq-std's default parameters (`rmq_std::RUNTIME_ADAPTIVE`: a cap
    /// of at least 1 s, so that a burst behind a slow broker is not sent twice).
    AdaptiveStd,
}

impl Policy {
    /// All five, in report order.
    pub const ALL: [Policy; 5] = [
        Policy::RoundRobin,
        Policy::Java49,
        Policy::Java5,
        Policy::Adaptive,
        Policy::AdaptiveStd,
    ];

    /// Report name.
    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round-robin",
            Policy::Java49 => "Java49",
            Policy::Java5 => "Java5",
            Policy::Adaptive => "Adaptive",
            Policy::AdaptiveStd => "Adaptive-std",
        }
    }

    /// The core configuration.
    pub fn config(self) -> RetryConfig {
        match self {
            Policy::RoundRobin => RetryConfig::plain(SendMode::Sync),
            Policy::Java49 => RetryConfig::java49(SendMode::Sync),
            Policy::Java5 => RetryConfig::java5(SendMode::Sync),
            Policy::Adaptive => RetryConfig::adaptive(SendMode::Sync),
            Policy::AdaptiveStd => {
                let mut c = RetryConfig::adaptive(SendMode::Sync);
                c.adaptive = rmq_std::RUNTIME_ADAPTIVE;
                c
            }
        }
    }
}

/// Results of one (scenario, policy) run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Scenario name.
    pub scenario: &'static str,
    /// Policy.
    pub policy: Policy,
    /// Sends started.
    pub sends: u64,
    /// Sends that succeeded.
    pub ok: u64,
    /// Median caller-seen latency, ms.
    pub p50: u64,
    /// 99th percentile, ms.
    pub p99: u64,
    /// 99.9th percentile, ms.
    pub p999: u64,
    /// Maximum, ms.
    pub max: u64,
    /// Attempts made.
    pub attempts: u64,
    /// Attempts sent to broker 0.
    pub bad_attempts: u64,
    /// Attempts made in the last quarter of the run (arrivals' span).
    pub tail_attempts: u64,
    /// Of those, sent to broker 0.
    pub tail_bad_attempts: u64,
}

impl Report {
    /// Success rate in percent.
    pub fn success_pct(&self) -> f64 {
        100.0 * self.ok as f64 / self.sends.max(1) as f64
    }
    /// Share of attempts to broker 0, percent.
    pub fn bad_pct(&self) -> f64 {
        100.0 * self.bad_attempts as f64 / self.attempts.max(1) as f64
    }
    /// Share of attempts to broker 0 in the last quarter of the run, percent.
    pub fn tail_bad_pct(&self) -> f64 {
        100.0 * self.tail_bad_attempts as f64 / self.tail_attempts.max(1) as f64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    // Order matters at equal times: answers before deadlines, both before new arrivals.
    Outcome {
        send: usize,
        attempt: u8,
        code: Option<i32>,
    },
    Deadline {
        send: usize,
        attempt: u8,
    },
    Arrival,
}

const FAULT_CAPACITY: usize = 16;

struct Sim {
    scn: Scenario,
    /// Broker latencies.
    rng: Rng,
    /// Entropy handed to the core (Java 5 re-seeds).
    entropy: Rng,
    queues: Vec<PublishQueue<u8>>,
    table: FaultTable<u8, FAULT_CAPACITY>,
    counter: QueueCounter,
    heap: BinaryHeap<Reverse<(u64, Ev, u64)>>,
    seq: u64,
    plans: Vec<Option<SendPlan<u8>>>,
    latencies: Vec<u64>,
    ok: u64,
    attempts: u64,
    bad_attempts: u64,
    tail_attempts: u64,
    tail_bad_attempts: u64,
}

impl Sim {
    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((at, ev, self.seq)));
    }

    fn healthy_latency(&mut self) -> u64 {
        2 + self.rng.exp(3.0).ceil() as u64
    }

    /// When (and how) broker `b` answers a request sent at `t`; `None` = never.
    /// `Some((at, None))` = connection refused.
    fn answer(&mut self, b: u8, t: u64) -> Option<(u64, Option<i32>)> {
        let l = self.healthy_latency();
        if b != 0 {
            return Some((t + l, Some(0)));
        }
        match self.scn.bad {
            BrokerModel::Healthy => Some((t + l, Some(0))),
            BrokerModel::Slow(extra) => Some((t + extra + l, Some(0))),
            BrokerModel::SlowUntil { extra, until } if t < until => Some((t + extra + l, Some(0))),
            BrokerModel::SlowUntil { .. } => Some((t + l, Some(0))),
            BrokerModel::GcPause {
                period,
                pause,
                offset,
            } => {
                let r = t + l;
                let in_pause = |x: u64| x >= offset && (x - offset) % period < pause;
                for x in [t, r] {
                    if in_pause(x) {
                        let end = x - (x - offset) % period + pause;
                        let l2 = self.healthy_latency();
                        return Some((end + l2, Some(0)));
                    }
                }
                Some((r, Some(0)))
            }
            BrokerModel::DeadRefused => Some((t + 1, None)),
            BrokerModel::DeadSilent => None,
            BrokerModel::Flapping { up, down } => {
                let r = t + l;
                let down_at = |x: u64| x % (up + down) >= up;
                if down_at(t) || down_at(r) {
                    None
                } else {
                    Some((r, Some(0)))
                }
            }
        }
    }

    fn drive(&mut self, send: usize, now: u64, step: Step<u8>) {
        match step {
            Step::Wait => {}
            Step::Done(r) => {
                if let Some(p) = self.plans[send].take() {
                    self.latencies.push(now - p.begin().millis());
                    if r.is_ok() {
                        self.ok += 1;
                    }
                }
            }
            Step::Send(a) => {
                self.attempts += 1;
                let b = a.queue.broker;
                if b == 0 {
                    self.bad_attempts += 1;
                }
                if now >= self.scn.duration_ms / 4 * 3 {
                    self.tail_attempts += 1;
                    self.tail_bad_attempts += u64::from(b == 0);
                }
                self.push(
                    a.deadline.millis(),
                    Ev::Deadline {
                        send,
                        attempt: a.number,
                    },
                );
                if let Some((at, code)) = self.answer(b, now) {
                    self.push(
                        at,
                        Ev::Outcome {
                            send,
                            attempt: a.number,
                            code,
                        },
                    );
                }
            }
        }
    }

    fn with_plan(
        &mut self,
        send: usize,
        attempt: Option<u8>,
        f: impl FnOnce(&mut SendPlan<u8>, &mut SendEnv<'_, u8, FAULT_CAPACITY>) -> Step<u8>,
    ) -> Option<Step<u8>> {
        let entropy = self.entropy.next_u32();
        let plan = self.plans.get_mut(send)?.as_mut()?;
        if let Some(n) = attempt
            && plan.current().map(|c| c.number) != Some(n)
        {
            return None; // a late answer to an abandoned attempt
        }
        let mut env = SendEnv {
            queues: &self.queues,
            table: &mut self.table,
            counter: &mut self.counter,
            entropy,
        };
        Some(f(plan, &mut env))
    }
}

/// Run one scenario under one policy.
pub fn run(scn: &Scenario, policy: Policy) -> Report {
    let cfg = policy.config();
    // Three streams, so every policy sees the same arrivals.
    let mut arrivals = Rng::new(scn.seed);
    let rng = Rng::new(scn.seed ^ 0x5EED_0001);
    let mut entropy = Rng::new(scn.seed ^ 0x5EED_0002);
    let counter = QueueCounter::new(entropy.next_u32());
    let mut queues = Vec::new();
    for b in 0..scn.brokers {
        for q in 0..scn.queues_per_broker {
            queues.push(PublishQueue {
                broker: b,
                queue_id: q,
            });
        }
    }
    let mut sim = Sim {
        scn: scn.clone(),
        rng,
        entropy,
        queues,
        table: FaultTable::new(cfg.profile.update_rule()),
        counter,
        heap: BinaryHeap::new(),
        seq: 0,
        plans: Vec::new(),
        latencies: Vec::new(),
        ok: 0,
        attempts: 0,
        bad_attempts: 0,
        tail_attempts: 0,
        tail_bad_attempts: 0,
    };
    let mean_gap = 1000.0 / scn.rate_per_sec;
    let mut next_arrival = arrivals.exp(mean_gap);
    sim.push(next_arrival as u64, Ev::Arrival);
    while let Some(Reverse((now, ev, _))) = sim.heap.pop() {
        let t = Instant::from_millis(now);
        match ev {
            Ev::Arrival => {
                let send = sim.plans.len();
                sim.plans.push(Some(SendPlan::new(t, cfg)));
                if let Some(step) = sim.with_plan(send, None, |p, env| p.start(t, env)) {
                    sim.drive(send, now, step);
                }
                next_arrival += arrivals.exp(mean_gap);
                if (next_arrival as u64) < scn.duration_ms {
                    sim.push(next_arrival as u64, Ev::Arrival);
                }
            }
            Ev::Outcome {
                send,
                attempt,
                code,
            } => {
                let o = match code {
                    Some(c) => AttemptOutcome::Response(c),
                    None => AttemptOutcome::Transport(TransportError::ConnectFailed),
                };
                if let Some(step) =
                    sim.with_plan(send, Some(attempt), |p, env| p.handle_outcome(t, o, env))
                {
                    sim.drive(send, now, step);
                }
            }
            Ev::Deadline { send, attempt } => {
                if let Some(step) =
                    sim.with_plan(send, Some(attempt), |p, env| p.handle_timeout(t, env))
                {
                    sim.drive(send, now, step);
                }
            }
        }
    }
    let mut l = std::mem::take(&mut sim.latencies);
    l.sort_unstable();
    let pct = |p: f64| -> u64 {
        if l.is_empty() {
            return 0;
        }
        let idx = ((p * l.len() as f64).ceil() as usize).clamp(1, l.len()) - 1;
        l[idx]
    };
    Report {
        scenario: scn.name,
        policy,
        sends: sim.plans.len() as u64,
        ok: sim.ok,
        p50: pct(0.50),
        p99: pct(0.99),
        p999: pct(0.999),
        max: l.last().copied().unwrap_or(0),
        attempts: sim.attempts,
        bad_attempts: sim.bad_attempts,
        tail_attempts: sim.tail_attempts,
        tail_bad_attempts: sim.tail_bad_attempts,
    }
}

/// A Markdown table of reports.
pub fn table(reports: &[Report]) -> String {
    let mut s = String::new();
    s.push_str("| scenario | policy | sends | success % | p50 ms | p99 ms | p99.9 ms | max ms | attempts to bad broker % | same, last quarter % |\n");
    s.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for r in reports {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.3} | {} | {} | {} | {} | {:.2} | {:.2} |",
            r.scenario,
            r.policy.name(),
            r.sends,
            r.success_pct(),
            r.p50,
            r.p99,
            r.p999,
            r.max,
            r.bad_pct(),
            r.tail_bad_pct()
        );
    }
    s
}

/// A hand-made SVG: grouped bars of p99 (log scale) per scenario and policy, with the success
/// rate printed under each bar.
pub fn svg(reports: &[Report]) -> String {
    let mut scenarios: Vec<&str> = Vec::new();
    for r in reports {
        if !scenarios.contains(&r.scenario) {
            scenarios.push(r.scenario);
        }
    }
    let colors = ["#9e9e9e", "#e07b39", "#3b7dd8", "#2e9e44", "#8e44ad"];
    let (left, top, plot_h, group_w, bar_w) = (70.0, 50.0, 320.0, 170.0, 28.0);
    let width = left + group_w * scenarios.len() as f64 + 20.0;
    let height = top + plot_h + 110.0;
    let (lo, hi) = (1.0f64.log10(), 10_000.0f64.log10());
    let y = |v: f64| top + plot_h - (v.max(1.0).log10() - lo) / (hi - lo) * plot_h;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="20" font-size="14">p99 send() latency as the caller sees it (ms, log scale); success % under each bar</text>"#
    );
    for tick in [1.0, 10.0, 100.0, 1000.0, 10_000.0] {
        let ty = y(tick);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{ty}" y2="{ty}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{tick}</text>"##,
            width - 20.0,
            left - 6.0,
            ty + 4.0
        );
    }
    for (gi, scn) in scenarios.iter().enumerate() {
        let gx = left + group_w * gi as f64 + 10.0;
        for (pi, p) in Policy::ALL.iter().enumerate() {
            let Some(r) = reports
                .iter()
                .find(|r| r.scenario == *scn && r.policy == *p)
            else {
                continue;
            };
            let x = gx + bar_w * pi as f64 + 4.0;
            let yt = y(r.p99 as f64);
            let _ = writeln!(
                s,
                r#"<rect x="{x}" y="{yt}" width="{}" height="{}" fill="{}"><title>{} {}: p99 {} ms, success {:.3}%</title></rect>"#,
                bar_w - 4.0,
                top + plot_h - yt,
                colors[pi],
                scn,
                p.name(),
                r.p99,
                r.success_pct()
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle" font-size="9">{}</text>"#,
                x + (bar_w - 4.0) / 2.0,
                yt - 3.0,
                r.p99
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end" font-size="9" transform="rotate(-90 {} {})">{:.2}%</text>"#,
                x + bar_w / 2.0,
                top + plot_h + 8.0,
                x + bar_w / 2.0,
                top + plot_h + 8.0,
                r.success_pct()
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{scn}</text>"#,
            gx + group_w / 2.0 - 10.0,
            top + plot_h + 62.0
        );
    }
    for (pi, p) in Policy::ALL.iter().enumerate() {
        let lx = left + 110.0 * pi as f64;
        let ly = height - 22.0;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{ly}">{}</text>"#,
            ly - 10.0,
            colors[pi],
            lx + 16.0,
            p.name()
        );
    }
    s.push_str("</svg>\n");
    s
}
