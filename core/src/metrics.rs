//! Latency histograms without allocation: log-linear buckets (8 per power of two, so a
//! reported quantile is at most 12.5 % above the true value) over whole units (a runtime
//! records microseconds), counted by the runtime in whatever cells it likes (plain integers,
//! atomics) and summarised here.
//!
//! ```
//! use rmq_core::metrics::{BUCKETS, LatencySummary, bucket};
//! let mut counts = [0u64; BUCKETS];
//! for us in [120, 130, 150, 900, 40_000] {
//!     counts[bucket(us)] += 1;
//! }
//! let s = LatencySummary::from_buckets(&counts, 41_300, 40_000);
//! assert_eq!(s.count, 5);
//! assert!(s.p50 >= 130 && s.p50 <= 150 * 9 / 8);
//! assert_eq!(s.max, 40_000);
//! ```

/// Sub-buckets per power of two (3 bits).
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Buckets: values below 8 exactly, then 8 per power of two up to 2^64.
pub const BUCKETS: usize = (SUB as usize) * (64 - SUB_BITS as usize + 1);

/// The bucket of `v`.
pub const fn bucket(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    let shift = msb - SUB_BITS;
    let sub = (v >> shift) & (SUB - 1);
    ((shift as u64 + 1) * SUB + sub) as usize
}

/// The largest value that falls in bucket `i`.
pub const fn bucket_max(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let shift = i / SUB - 1;
    let sub = i % SUB;
    let low = (SUB + sub) << shift;
    low.saturating_add((1u64 << shift) - 1)
}

/// Quantiles of one histogram, in the recorded unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LatencySummary {
    /// Values recorded.
    pub count: u64,
    /// Mean (exact, from the sum).
    pub mean: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest value recorded (exact).
    pub max: u64,
}

impl LatencySummary {
    /// Summarises `counts` (one per bucket, [`BUCKETS`] long or shorter) with the exact `sum`
    /// and `max` of the recorded values.
    pub fn from_buckets(counts: &[u64], sum: u64, max: u64) -> Self {
        let count: u64 = counts.iter().fold(0u64, |a, c| a.saturating_add(*c));
        if count == 0 {
            return LatencySummary::default();
        }
        let at = |permille: u64| {
            // The smallest value with at least `permille`/1000 of the values at or below it.
            let rank = (count.saturating_mul(permille)).div_ceil(1000).max(1);
            let mut seen = 0u64;
            for (i, c) in counts.iter().enumerate() {
                seen = seen.saturating_add(*c);
                if seen >= rank {
                    return bucket_max(i).min(max);
                }
            }
            max
        };
        LatencySummary {
            count,
            mean: sum / count,
            p50: at(500),
            p90: at(900),
            p99: at(990),
            p999: at(999),
            max,
        }
    }
}

/// A histogram many threads record into at once (relaxed atomics, no lock), on targets with
/// 64-bit atomics.
#[cfg(target_has_atomic = "64")]
#[derive(Debug)]
pub struct AtomicHistogram {
    counts: [core::sync::atomic::AtomicU64; BUCKETS],
    sum: core::sync::atomic::AtomicU64,
    max: core::sync::atomic::AtomicU64,
}

#[cfg(target_has_atomic = "64")]
impl Default for AtomicHistogram {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(target_has_atomic = "64")]
impl AtomicHistogram {
    /// Empty.
    pub fn new() -> Self {
        use core::sync::atomic::AtomicU64;
        AtomicHistogram {
            counts: core::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }

    /// Records `v`.
    pub fn record(&self, v: u64) {
        use core::sync::atomic::Ordering::Relaxed;
        if let Some(c) = self.counts.get(bucket(v)) {
            c.fetch_add(1, Relaxed);
        }
        self.sum.fetch_add(v, Relaxed);
        self.max.fetch_max(v, Relaxed);
    }

    /// The quantiles of what was recorded so far.
    pub fn summary(&self) -> LatencySummary {
        use core::sync::atomic::Ordering::Relaxed;
        let counts: [u64; BUCKETS] = core::array::from_fn(|i| self.counts[i].load(Relaxed));
        LatencySummary::from_buckets(&counts, self.sum.load(Relaxed), self.max.load(Relaxed))
    }
}

/// Events per second over the last [`RATE_WINDOW_SECS`] whole seconds (one cell per second,
/// recycled), on targets with 64-bit atomics.
#[cfg(target_has_atomic = "64")]
#[derive(Debug)]
pub struct RateWindow {
    /// Per cell: the second it counts (+1; 0 = unused) and its count.
    cells: [(core::sync::atomic::AtomicU64, core::sync::atomic::AtomicU64); RATE_WINDOW_SECS],
}

/// Seconds a [`RateWindow`] averages over.
pub const RATE_WINDOW_SECS: usize = 10;

#[cfg(target_has_atomic = "64")]
impl Default for RateWindow {
    fn default() -> Self {
        use core::sync::atomic::AtomicU64;
        RateWindow {
            cells: core::array::from_fn(|_| (AtomicU64::new(0), AtomicU64::new(0))),
        }
    }
}

#[cfg(target_has_atomic = "64")]
impl RateWindow {
    /// Counts `n` events at `now` (a cell recycled at a second boundary may lose a few counts
    /// to a racing thread; this is a gauge, not an account).
    pub fn add(&self, now: crate::time::Instant, n: u64) {
        use core::sync::atomic::Ordering::Relaxed;
        let sec = now.millis() / 1000;
        let (stamp, count) = &self.cells[(sec % RATE_WINDOW_SECS as u64) as usize];
        if stamp.swap(sec + 1, Relaxed) != sec + 1 {
            count.store(0, Relaxed);
        }
        count.fetch_add(n, Relaxed);
    }

    /// Events per second over the last whole seconds before `now`.
    pub fn per_sec(&self, now: crate::time::Instant) -> u64 {
        use core::sync::atomic::Ordering::Relaxed;
        let sec = now.millis() / 1000;
        let window = sec.saturating_sub(RATE_WINDOW_SECS as u64)..sec;
        let total: u64 = self
            .cells
            .iter()
            .filter(|(stamp, _)| window.contains(&stamp.load(Relaxed).wrapping_sub(1)))
            .map(|(_, count)| count.load(Relaxed))
            .sum();
        total / RATE_WINDOW_SECS as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_tight() {
        let mut last = 0;
        for v in (0..100_000u64).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]) {
            let b = bucket(v);
            assert!(b < BUCKETS, "{v}");
            assert!(b >= last || v > 100_000, "monotonic at {v}");
            last = b;
            let hi = bucket_max(b);
            assert!(hi >= v, "{v} above its bucket's max {hi}");
            // At most 12.5 % above.
            assert!(hi - v <= v / 8, "{v} in a bucket up to {hi}");
            if b > 0 {
                assert!(bucket_max(b - 1) < v, "{v} belongs to an earlier bucket");
            }
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn atomic_histogram_and_rate_window() {
        let h = AtomicHistogram::new();
        for v in [10, 20, 30, 4000] {
            h.record(v);
        }
        let s = h.summary();
        assert_eq!((s.count, s.mean, s.max), (4, 1015, 4000));
        assert!(s.p50 >= 20 && s.p50 <= 22, "{s:?}");
        let r = RateWindow::default();
        let at = |ms| crate::time::Instant::from_millis(ms);
        for sec in 100..120u64 {
            r.add(at(sec * 1000 + 500), 30);
        }
        // Seconds 110..=119 are the last whole ones before 120.5 s: 30/s.
        assert_eq!(r.per_sec(at(120_500)), 30);
        // Later, with nothing new, the window empties.
        assert_eq!(r.per_sec(at(125_000)), 15);
        assert_eq!(r.per_sec(at(200_000)), 0);
    }

    #[test]
    fn quantiles_of_a_known_distribution() {
        let mut counts = [0u64; BUCKETS];
        let (mut sum, mut max) = (0u64, 0u64);
        for v in 1..=1000u64 {
            counts[bucket(v)] += 1;
            sum += v;
            max = max.max(v);
        }
        let s = LatencySummary::from_buckets(&counts, sum, max);
        assert_eq!((s.count, s.mean, s.max), (1000, 500, 1000));
        for (got, want) in [(s.p50, 500), (s.p90, 900), (s.p99, 990), (s.p999, 999)] {
            assert!(got >= want && got <= want + want / 8, "{got} for {want}");
        }
        assert_eq!(
            LatencySummary::from_buckets(&[0; 4], 0, 0),
            LatencySummary::default()
        );
    }
}
