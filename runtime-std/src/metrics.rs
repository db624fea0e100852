//! The monitoring numbers of a producer and a consumer ([`crate::Producer::metrics`],
//! [`crate::consumer::Consumer::metrics`]), and, with the `metrics` feature, the same events
//! through the [`metrics`](https://docs.rs/metrics) facade so that a Prometheus or
//! OpenTelemetry exporter picks them up:
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `rmq_send_latency_seconds` | histogram | |
//! | `rmq_send_failures_total` | counter | `kind` (as in [`FailureCounts`]) |
//! | `rmq_consume_delivered_total` | counter | |
//! | `rmq_consume_handler_seconds` | histogram | |
//! | `rmq_consume_lag` | gauge | `topic`, `broker`, `queue` (set by `Consumer::metrics`) |

pub use rmq_core::metrics::LatencySummary;

use crate::MessageQueue;
use crate::shared::CountersSnapshot;

/// A producer's monitoring numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProducerMetrics {
    /// Sent, failed, attempts, retries, isolations, late responses, lost connections.
    pub counters: CountersSnapshot,
    /// Latency of successful sends in microseconds.
    pub latency_us: LatencySummary,
    /// Successful sends per second over the last 10 s.
    pub sends_per_sec: u64,
    /// Failed sends by kind.
    pub failures: FailureCounts,
    /// Trace records dropped because the trace queue was full
    /// ([`ProducerBuilder::message_trace`](crate::ProducerBuilder::message_trace)).
    pub trace_dropped: u64,
}

/// Failed sends by [`crate::SendErrorKind`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailureCounts {
    /// `Validation` and `InvalidBatch`: refused before any byte was sent.
    pub validation: u64,
    /// `NoRoute`.
    pub no_route: u64,
    /// `NoNameServer`.
    pub no_name_server: u64,
    /// `Broker`: an error code.
    pub broker: u64,
    /// `Transport`.
    pub transport: u64,
    /// `Timeout`.
    pub timeout: u64,
    /// `Malformed` send response.
    pub malformed: u64,
    /// `Shutdown`.
    pub shutdown: u64,
    /// `Capacity`.
    pub capacity: u64,
    /// `Request` (cannot be built or signed).
    pub request: u64,
    /// `Authentication` (ACL refused).
    pub authentication: u64,
}

impl FailureCounts {
    /// The kinds, in [`crate::SendErrorKind::index`] order (also the `kind` label).
    pub const NAMES: [&'static str; 11] = [
        "validation",
        "no_route",
        "no_name_server",
        "broker",
        "transport",
        "timeout",
        "malformed",
        "shutdown",
        "capacity",
        "request",
        "authentication",
    ];

    pub(crate) fn from_fn(f: impl Fn(usize) -> u64) -> Self {
        FailureCounts {
            validation: f(0),
            no_route: f(1),
            no_name_server: f(2),
            broker: f(3),
            transport: f(4),
            timeout: f(5),
            malformed: f(6),
            shutdown: f(7),
            capacity: f(8),
            request: f(9),
            authentication: f(10),
        }
    }
}

/// A consumer's monitoring numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerMetrics {
    /// Pulls, deliveries, acknowledgements, rebalances, commits, connections.
    pub stats: crate::consumer::ConsumerStats,
    /// Messages delivered per second over the last 10 s (consume TPS).
    pub delivered_per_sec: u64,
    /// Handler time in microseconds: from [`crate::consumer::Consumer::poll`] handing a message
    /// out to its acknowledgement.
    pub handler_time_us: LatencySummary,
    /// Lag over every owned queue (messages not yet processed).
    pub lag: u64,
    /// Per owned queue, in Java's queue order.
    pub queues: Vec<QueueMetrics>,
}

/// One owned queue's offsets.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueMetrics {
    /// The queue.
    pub queue: MessageQueue,
    /// The queue's maximum offset at the broker, from the last pull answer.
    pub broker_max_offset: Option<i64>,
    /// The lowest offset not yet acknowledged.
    pub committable: i64,
    /// The last offset the broker confirmed as committed.
    pub committed: Option<i64>,
    /// Messages handed out and not acknowledged.
    pub in_flight: usize,
    /// `broker_max_offset − committable` (`None` before the first pull answer).
    pub lag: Option<u64>,
}

pub(crate) fn sent(_us: u64) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("rmq_send_latency_seconds").record(_us as f64 / 1e6);
}

pub(crate) fn failed(_kind: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("rmq_send_failures_total", "kind" => _kind).increment(1);
}

pub(crate) fn delivered(_n: u64) {
    #[cfg(feature = "metrics")]
    metrics::counter!("rmq_consume_delivered_total").increment(_n);
}

pub(crate) fn handled(_us: u64) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("rmq_consume_handler_seconds").record(_us as f64 / 1e6);
}

pub(crate) fn lag(_q: &QueueMetrics) {
    #[cfg(feature = "metrics")]
    {
        let labels = [
            ("topic", _q.queue.topic.clone()),
            ("broker", _q.queue.broker_name.clone()),
            ("queue", _q.queue.queue_id.to_string()),
        ];
        metrics::gauge!("rmq_consume_lag", &labels).set(_q.lag.unwrap_or(0) as f64);
    }
}
