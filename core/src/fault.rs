//! Latency fault tolerance: which brokers to avoid for a while, and for how long.
//!
//! Read docs/protocol/STRATEGY.md §1 (the Java `LatencyFaultToleranceImpl`) and §2 (`MQFaultStrategy`) first.
//!
//! - [`FaultTable`] is the fixed-capacity map of broker → (last latency, not-available-until,
//!   reachable, plus the estimator state of our `Adaptive` profile). It never reads a clock:
//!   every method that needs the time takes `now`.
//! - [`IsolationPolicy`] turns an observed latency into an isolation window (the Java
//!   `latencyMax` / `notAvailableDuration` tables, [`IsolationPolicy::JAVA_49`] and
//!   [`IsolationPolicy::JAVA_5`], or validated custom tables).
//! - [`AdaptiveConfig`] parametrises our `Adaptive` profile (latency estimate, exponential
//!   back-off of short isolations, half-open probes, per-attempt cap).
//!
//! ## Update rules
//!
//! Java 4.9 *overwrites* the window on every update: a quick success right after a timeout
//! makes the broker available again at once. Java 5.x only ever *extends* it. Both are offered
//! by [`UpdateRule`].
//!
//! ## Eviction when full
//!
//! The table holds at most `N` brokers. When a new broker must be inserted into a full table,
//! every entry (and the newcomer) is ranked by how much it still matters:
//! `(isolated at now, unreachable or in back-off, not_available_until)`, compared
//! lexicographically. The entry with the lowest rank is evicted; when the newcomer ranks lower
//! than every resident it is dropped instead. Consequently an entry whose window has ended
//! (it behaves exactly like an absent entry for selection) is always evicted before any broker
//! that is still isolated, and an isolated broker is never forgotten in favour of one whose
//! window has ended. The outcome is reported as [`Insert`].

use core::fmt;

use crate::counter::QueueCounter;
use crate::time::{Duration, Instant};

/// How an update changes an existing isolation window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum UpdateRule {
    /// Java 4.9: `not_available_until = now + d`, always (a `d` of zero ends any window).
    Overwrite,
    /// Java 5.x: move `not_available_until` to `now + d` only when `d > 0` and that is later.
    ExtendOnly,
}

/// What one broker's entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FaultEntry<K> {
    /// The broker.
    pub broker: K,
    /// Last latency fed in (Java `currentLatency`).
    pub latency: Duration,
    /// The broker is available again at this instant (Java `startTimestamp`).
    pub not_available_until: Instant,
    /// Java 5.x `reachableFlag`.
    pub reachable: bool,
    /// Adaptive: smoothed latency estimate (only meaningful when `samples > 0`).
    pub srtt: Duration,
    /// Adaptive: smoothed mean deviation of the latency.
    pub rttvar: Duration,
    /// Adaptive: number of latency samples folded into `srtt` (saturating).
    pub samples: u32,
    /// Adaptive: faults since the last good answer; the isolation doubles with each.
    pub consecutive_faults: u8,
    /// Adaptive: a half-open probe is in flight (its failure starts a new, longer episode).
    pub probing: bool,
}

impl<K> FaultEntry<K> {
    fn new(broker: K) -> Self {
        FaultEntry {
            broker,
            latency: Duration::ZERO,
            not_available_until: Instant::ZERO,
            reachable: true,
            srtt: Duration::ZERO,
            rttvar: Duration::ZERO,
            samples: 0,
            consecutive_faults: 0,
            probing: false,
        }
    }

    /// `now >= not_available_until` (Java `isAvailable`; 5.2+ ignores reachability here).
    pub fn is_available(&self, now: Instant) -> bool {
        now >= self.not_available_until
    }

    fn rank(&self, now: Instant) -> (bool, bool, Instant) {
        (
            !self.is_available(now),
            !self.reachable || self.consecutive_faults > 0,
            self.not_available_until,
        )
    }
}

/// Result of inserting or updating an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Insert<K> {
    /// The broker had an entry; it was updated.
    Updated,
    /// A new entry was added to a table that had room.
    Inserted,
    /// The table was full; this broker's entry was evicted to make room.
    Evicted(K),
    /// The table was full of entries that matter more; the update was dropped.
    Dropped,
}

/// Fixed-capacity latency fault table, generic over the broker key `K` (for example an
/// interned broker index) and the capacity `N`.
#[derive(Clone, Debug)]
pub struct FaultTable<K, const N: usize> {
    entries: heapless::Vec<FaultEntry<K>, N>,
    rule: UpdateRule,
    /// Adaptive selections made ([`FaultTable::tick`]).
    selections: u32,
}

impl<K: Copy + Eq, const N: usize> FaultTable<K, N> {
    /// An empty table using `rule` for window updates.
    pub const fn new(rule: UpdateRule) -> Self {
        FaultTable {
            entries: heapless::Vec::new(),
            rule,
            selections: 0,
        }
    }

    /// Counts one selection and returns the count before it (wrapping): the Adaptive selector
    /// probes consistently slow brokers every so many selections.
    pub fn tick(&mut self) -> u32 {
        let n = self.selections;
        self.selections = n.wrapping_add(1);
        n
    }

    /// The update rule in force.
    pub fn rule(&self) -> UpdateRule {
        self.rule
    }

    /// Number of brokers with an entry.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No entry at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The capacity `N`.
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Forget everything.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// All entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &FaultEntry<K>> {
        self.entries.iter()
    }

    /// The entry of `broker`, if any.
    pub fn get(&self, broker: K) -> Option<&FaultEntry<K>> {
        self.entries.iter().find(|e| e.broker == broker)
    }

    fn position(&self, broker: K) -> Option<usize> {
        self.entries.iter().position(|e| e.broker == broker)
    }

    /// Java `isAvailable`: true without an entry, else `now >= not_available_until`.
    pub fn is_available(&self, now: Instant, broker: K) -> bool {
        self.get(broker).is_none_or(|e| e.is_available(now))
    }

    /// Java 5.x `isReachable`: true without an entry, else the reachable flag.
    pub fn is_reachable(&self, broker: K) -> bool {
        self.get(broker).is_none_or(|e| e.reachable)
    }

    /// When `broker` becomes available ([`Instant::ZERO`] without an entry).
    pub fn available_at(&self, broker: K) -> Instant {
        self.get(broker)
            .map_or(Instant::ZERO, |e| e.not_available_until)
    }

    /// Remove `broker`'s entry; true when there was one.
    pub fn remove(&mut self, broker: K) -> bool {
        match self.position(broker) {
            Some(i) => {
                self.entries.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// Java `updateFaultItem(name, latency, notAvailableDuration[, reachable])`: record
    /// `latency`, move the window per [`UpdateRule`] and set the reachable flag.
    pub fn update(
        &mut self,
        now: Instant,
        broker: K,
        latency: Duration,
        not_available: Duration,
        reachable: bool,
    ) -> Insert<K> {
        let rule = self.rule;
        self.upsert(now, broker, |e| {
            e.latency = latency;
            let until = now + not_available;
            match rule {
                UpdateRule::Overwrite => e.not_available_until = until,
                UpdateRule::ExtendOnly => {
                    if not_available > Duration::ZERO && until > e.not_available_until {
                        e.not_available_until = until;
                    }
                }
            }
            e.reachable = reachable;
        })
    }

    /// Apply `f` to `broker`'s entry, creating it (with the eviction rule) when missing.
    fn upsert(&mut self, now: Instant, broker: K, f: impl FnOnce(&mut FaultEntry<K>)) -> Insert<K> {
        if let Some(e) = self.entries.iter_mut().find(|e| e.broker == broker) {
            f(e);
            return Insert::Updated;
        }
        let mut fresh = FaultEntry::new(broker);
        f(&mut fresh);
        let fresh = match self.entries.push(fresh) {
            Ok(()) => return Insert::Inserted,
            Err(fresh) => fresh,
        };
        // Full: find the resident that matters least.
        let mut victim: Option<(usize, (bool, bool, Instant))> = None;
        for (i, e) in self.entries.iter().enumerate() {
            let r = e.rank(now);
            if victim.is_none_or(|(_, best)| r < best) {
                victim = Some((i, r));
            }
        }
        match victim {
            Some((i, r)) if fresh.rank(now) >= r => match self.entries.get_mut(i) {
                Some(slot) => {
                    let old = slot.broker;
                    *slot = fresh;
                    Insert::Evicted(old)
                }
                None => Insert::Dropped,
            },
            // N == 0, or the newcomer matters less than every resident.
            _ => Insert::Dropped,
        }
    }

    /// Java 4.9.8 `pickOneAtLeast`: order the entries by (available first, lower latency,
    /// earlier window end), then return the entry at `counter.next() % (len / 2)`, or the only
    /// entry when there is one. Sorting is done by rank counting, without allocating
    /// (O(N²), N is small); ties keep insertion order, which 4.9.4+ leaves unspecified.
    pub fn pick_one_at_least(&self, now: Instant, counter: &mut QueueCounter) -> Option<K> {
        let len = self.entries.len();
        let half = len / 2;
        let target = if half == 0 {
            0
        } else {
            usize::try_from(counter.next()).unwrap_or(0) % half
        };
        let key = |e: &FaultEntry<K>| (!e.is_available(now), e.latency, e.not_available_until);
        for (i, e) in self.entries.iter().enumerate() {
            let k = key(e);
            let rank = self
                .entries
                .iter()
                .enumerate()
                .filter(|(j, o)| {
                    let ko = key(o);
                    ko < k || (ko == k && *j < i)
                })
                .count();
            if rank == target {
                return Some(e.broker);
            }
        }
        None
    }

    /// Adaptive: fold an attempt's outcome into `broker`'s estimator and window.
    ///
    /// - A `Good(latency)` below `cfg.slow_threshold` updates the EWMA (TCP style: gain 1/8
    ///   for the mean, 1/4 for the deviation), clears the fault count and ends any window.
    /// - A `Good` at or above the threshold, or a `Fault`, counts as a fault. If the broker is
    ///   currently available it is isolated for `base_isolation << consecutive_faults`
    ///   (capped at `max_isolation`) and the fault count grows; faults that arrive while it is
    ///   already isolated (stragglers of the same episode) change nothing, so one episode
    ///   doubles the back-off once. The failure of a half-open probe always starts the next
    ///   episode.
    /// - When the window ends the broker is *half-open*: the selector may send it one probe,
    ///   which [`FaultTable::begin_probe`] fences with a short window.
    pub fn record_adaptive(
        &mut self,
        now: Instant,
        broker: K,
        sample: AdaptiveSample,
        cfg: &AdaptiveConfig,
    ) -> Insert<K> {
        self.upsert(now, broker, |e| {
            let fault = match sample {
                AdaptiveSample::Good(lat) => {
                    e.latency = lat;
                    fold_ewma(e, lat);
                    lat >= cfg.slow_threshold
                }
                AdaptiveSample::Fault => true,
            };
            e.reachable = true;
            let probe_failed = core::mem::take(&mut e.probing) && fault;
            if !fault {
                e.consecutive_faults = 0;
                if e.not_available_until > now {
                    e.not_available_until = now;
                }
            } else if e.is_available(now) || probe_failed {
                let shift = u32::from(e.consecutive_faults.min(20));
                let d = cfg
                    .base_isolation
                    .saturating_mul(1u64 << shift)
                    .min(cfg.max_isolation);
                e.not_available_until = now + d;
                e.consecutive_faults = e.consecutive_faults.saturating_add(1);
            }
        })
    }

    /// Adaptive: a half-open broker was chosen for a probe; keep other sends away from it for
    /// `fence` (the probe's own deadline). No-op for a broker without faults.
    pub fn begin_probe(&mut self, now: Instant, broker: K, fence: Duration) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.broker == broker)
            && e.consecutive_faults > 0
            && e.is_available(now)
        {
            e.not_available_until = now + fence;
            e.probing = true;
        }
    }

    /// Adaptive: the latency estimate used for `broker`'s per-attempt cap: its own smoothed
    /// `srtt + 4 × rttvar` when it has samples, else the smallest estimate of any broker with
    /// samples, else `None`.
    pub fn latency_estimate(&self, broker: K) -> Option<Duration> {
        let est = |e: &FaultEntry<K>| e.srtt + e.rttvar.saturating_mul(4);
        if let Some(e) = self.get(broker).filter(|e| e.samples > 0) {
            return Some(est(e));
        }
        self.entries.iter().filter(|e| e.samples > 0).map(est).min()
    }
}

fn fold_ewma<K>(e: &mut FaultEntry<K>, lat: Duration) {
    let l = lat.millis();
    if e.samples == 0 {
        e.srtt = lat;
        e.rttvar = Duration::from_millis(l / 2);
    } else {
        let s = e.srtt.millis();
        let v = e.rttvar.millis();
        let dev = s.abs_diff(l);
        // rttvar = 3/4 rttvar + 1/4 |srtt - l|;  srtt = 7/8 srtt + 1/8 l  (RFC 6298 gains)
        e.rttvar = Duration::from_millis((v - v / 4).saturating_add(dev / 4));
        e.srtt = Duration::from_millis((s - s / 8).saturating_add(l / 8));
    }
    e.samples = e.samples.saturating_add(1);
}

/// One observation for [`FaultTable::record_adaptive`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AdaptiveSample {
    /// The broker answered (any status that means "stored") after this latency.
    Good(Duration),
    /// Transport failure, per-attempt timeout or an error response.
    Fault,
}

/// Parameters of the `Adaptive` profile (our design, off in the Java profiles).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AdaptiveConfig {
    /// A successful answer at least this slow counts as a fault (default 550 ms, the first
    /// isolating row of both Java tables).
    pub slow_threshold: Duration,
    /// First isolation after a fault (default 1 s); doubles per consecutive fault episode.
    pub base_isolation: Duration,
    /// Longest isolation (default 60 s; Java 4.9 goes up to 10 min).
    pub max_isolation: Duration,
    /// Per-attempt cap = `cap_multiplier × estimate`, where the estimate is
    /// [`FaultTable::latency_estimate`] (default 2).
    pub cap_multiplier: u32,
    /// Lower bound of the per-attempt cap (default 200 ms).
    pub cap_floor: Duration,
    /// Cap used when no broker has any sample yet (default 1000 ms).
    pub initial_cap: Duration,
}

impl AdaptiveConfig {
    /// The defaults documented on each field.
    pub const DEFAULT: AdaptiveConfig = AdaptiveConfig {
        slow_threshold: Duration::from_millis(550),
        base_isolation: Duration::from_millis(1000),
        max_isolation: Duration::from_millis(60_000),
        cap_multiplier: 2,
        cap_floor: Duration::from_millis(200),
        initial_cap: Duration::from_millis(1000),
    };

    /// The per-attempt cap for `broker` (before taking the remaining budget into account).
    pub fn attempt_cap<K: Copy + Eq, const N: usize>(
        &self,
        table: &FaultTable<K, N>,
        broker: K,
    ) -> Duration {
        match table.latency_estimate(broker) {
            Some(est) => est
                .saturating_mul(u64::from(self.cap_multiplier))
                .max(self.cap_floor),
            None => self.initial_cap.max(self.cap_floor),
        }
    }
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Maximum number of rows in an [`IsolationPolicy`] table.
pub const MAX_POLICY_ROWS: usize = 16;

/// Why a custom latency table was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum PolicyError {
    /// `latency_max` and `not_available` differ in length.
    LengthMismatch,
    /// The tables are empty or longer than [`MAX_POLICY_ROWS`].
    BadLength,
    /// `latency_max[index]` is not strictly greater than the row before it, or
    /// `not_available[index]` is smaller than the row before it.
    NotAscending {
        /// First offending row.
        index: usize,
    },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::LengthMismatch => {
                f.write_str("latency and isolation tables differ in length")
            }
            PolicyError::BadLength => {
                write!(f, "latency tables must have 1..={MAX_POLICY_ROWS} rows")
            }
            PolicyError::NotAscending { index } => {
                write!(f, "latency tables are not ascending at row {index}")
            }
        }
    }
}

impl core::error::Error for PolicyError {}

/// Latency → isolation mapping (Java `MQFaultStrategy`, docs/protocol/STRATEGY.md §2.1–§2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IsolationPolicy<'a> {
    latency_max: &'a [Duration],
    not_available: &'a [Duration],
    isolation_latency: Duration,
}

const fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

const J49_LAT: [Duration; 7] = [
    ms(50),
    ms(100),
    ms(550),
    ms(1000),
    ms(2000),
    ms(3000),
    ms(15000),
];
const J49_NA: [Duration; 7] = [
    ms(0),
    ms(0),
    ms(30000),
    ms(60000),
    ms(120000),
    ms(180000),
    ms(600000),
];
const J5_LAT: [Duration; 7] = [
    ms(50),
    ms(100),
    ms(550),
    ms(1800),
    ms(3000),
    ms(5000),
    ms(15000),
];
const J5_NA: [Duration; 7] = [
    ms(0),
    ms(0),
    ms(2000),
    ms(5000),
    ms(6000),
    ms(10000),
    ms(30000),
];

impl<'a> IsolationPolicy<'a> {
    /// The 4.9 tables (used up to 5.1.3); an isolation feeds in 30000 ms (→ 600 s).
    pub const JAVA_49: IsolationPolicy<'static> = IsolationPolicy {
        latency_max: &J49_LAT,
        not_available: &J49_NA,
        isolation_latency: ms(30000),
    };
    /// The 5.x tables (5.1.4+); an isolation feeds in 10000 ms (→ 10 s).
    pub const JAVA_5: IsolationPolicy<'static> = IsolationPolicy {
        latency_max: &J5_LAT,
        not_available: &J5_NA,
        isolation_latency: ms(10000),
    };

    /// A custom policy.
    ///
    /// # Errors
    /// [`PolicyError`] unless both tables have the same length in `1..=MAX_POLICY_ROWS`,
    /// `latency_max` is strictly ascending and `not_available` is non-decreasing.
    pub fn new(
        latency_max: &'a [Duration],
        not_available: &'a [Duration],
        isolation_latency: Duration,
    ) -> Result<Self, PolicyError> {
        if latency_max.len() != not_available.len() {
            return Err(PolicyError::LengthMismatch);
        }
        if latency_max.is_empty() || latency_max.len() > MAX_POLICY_ROWS {
            return Err(PolicyError::BadLength);
        }
        for i in 1..latency_max.len() {
            let (l0, l1) = (latency_max.get(i - 1), latency_max.get(i));
            let (n0, n1) = (not_available.get(i - 1), not_available.get(i));
            if l1 <= l0 || n1 < n0 {
                return Err(PolicyError::NotAscending { index: i });
            }
        }
        Ok(IsolationPolicy {
            latency_max,
            not_available,
            isolation_latency,
        })
    }

    /// The latency fed in when an attempt failed (`isolation = true`).
    pub fn isolation_latency(&self) -> Duration {
        self.isolation_latency
    }

    /// Java `computeNotAvailableDuration`: the window of the highest row whose latency bound is
    /// `<= latency`, or zero.
    pub fn not_available_for(&self, latency: Duration) -> Duration {
        self.latency_max
            .iter()
            .zip(self.not_available.iter())
            .rev()
            .find(|(max, _)| latency >= **max)
            .map_or(Duration::ZERO, |(_, d)| *d)
    }

    /// The window for an update: computed from [`Self::isolation_latency`] when `isolation`,
    /// else from `latency` (Java `MQFaultStrategy.updateFaultItem`).
    pub fn window(&self, latency: Duration, isolation: bool) -> Duration {
        self.not_available_for(if isolation {
            self.isolation_latency
        } else {
            latency
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn t(v: u64) -> Instant {
        Instant::from_millis(v)
    }

    #[test]
    fn java49_table_boundaries() {
        let p = IsolationPolicy::JAVA_49;
        let cases = [
            (0, 0),
            (49, 0),
            (549, 0),
            (550, 30_000),
            (999, 30_000),
            (1000, 60_000),
            (1999, 60_000),
            (2000, 120_000),
            (2999, 120_000),
            (3000, 180_000),
            (14_999, 180_000),
            (15_000, 600_000),
            (u64::MAX, 600_000),
        ];
        for (lat, want) in cases {
            assert_eq!(p.not_available_for(ms(lat)), ms(want), "latency {lat}");
        }
        assert_eq!(p.window(ms(10), true), ms(600_000));
        assert_eq!(p.window(ms(10), false), Duration::ZERO);
        assert_eq!(p.isolation_latency(), ms(30_000));
    }

    #[test]
    fn java5_table_boundaries() {
        let p = IsolationPolicy::JAVA_5;
        let cases = [
            (549, 0),
            (550, 2000),
            (1799, 2000),
            (1800, 5000),
            (2999, 5000),
            (3000, 6000),
            (4999, 6000),
            (5000, 10_000),
            (14_999, 10_000),
            (15_000, 30_000),
        ];
        for (lat, want) in cases {
            assert_eq!(p.not_available_for(ms(lat)), ms(want), "latency {lat}");
        }
        assert_eq!(p.window(ms(0), true), ms(10_000));
    }

    #[test]
    fn custom_tables_are_validated() {
        static L: [Duration; 3] = [ms(10), ms(20), ms(30)];
        static D: [Duration; 3] = [ms(0), ms(100), ms(200)];
        static D2: [Duration; 2] = [ms(0), ms(100)];
        static LBAD: [Duration; 3] = [ms(10), ms(10), ms(30)];
        static DBAD: [Duration; 3] = [ms(0), ms(100), ms(50)];
        let p = IsolationPolicy::new(&L, &D, ms(25)).unwrap();
        assert_eq!(p.not_available_for(ms(19)), ms(0));
        assert_eq!(p.not_available_for(ms(20)), ms(100));
        assert_eq!(p.window(ms(0), true), ms(100));
        assert_eq!(
            IsolationPolicy::new(&L, &D2, ms(1)),
            Err(PolicyError::LengthMismatch)
        );
        assert_eq!(
            IsolationPolicy::new(&[], &[], ms(1)),
            Err(PolicyError::BadLength)
        );
        assert_eq!(
            IsolationPolicy::new(&LBAD, &D, ms(1)),
            Err(PolicyError::NotAscending { index: 1 })
        );
        assert_eq!(
            IsolationPolicy::new(&L, &DBAD, ms(1)),
            Err(PolicyError::NotAscending { index: 2 })
        );
        assert!(!format!("{}", PolicyError::NotAscending { index: 2 }).is_empty());
    }

    #[test]
    fn window_ends_exactly() {
        let mut f: FaultTable<u8, 4> = FaultTable::new(UpdateRule::Overwrite);
        let p = IsolationPolicy::JAVA_49;
        assert!(f.is_available(t(0), 1), "no entry means available");
        f.update(t(1000), 1, ms(550), p.window(ms(550), false), true);
        assert!(!f.is_available(t(1000), 1));
        assert!(!f.is_available(t(30_999), 1));
        assert!(f.is_available(t(31_000), 1));
        // 549 ms isolates nothing.
        f.update(t(2000), 2, ms(549), p.window(ms(549), false), true);
        assert!(f.is_available(t(2000), 2));
    }

    #[test]
    fn overwrite_shortens_extend_only_does_not() {
        let mut a: FaultTable<u8, 4> = FaultTable::new(UpdateRule::Overwrite);
        let mut b: FaultTable<u8, 4> = FaultTable::new(UpdateRule::ExtendOnly);
        for f in [&mut a, &mut b] {
            f.update(t(0), 1, ms(3000), ms(10_000), false);
            f.update(t(100), 1, ms(5), Duration::ZERO, true);
        }
        assert!(a.is_available(t(100), 1), "4.9: a success ends the window");
        assert!(!b.is_available(t(9_999), 1), "5.x: only extends");
        assert!(b.is_available(t(10_000), 1));
        assert!(b.is_reachable(1));
        b.update(t(200), 1, ms(5), ms(1000), false);
        assert_eq!(
            b.available_at(1),
            t(10_000),
            "shorter window does not shrink"
        );
        assert!(!b.is_reachable(1));
        assert!(b.remove(1));
        assert!(!b.remove(1));
        assert!(b.is_reachable(1));
    }

    #[test]
    fn eviction_prefers_ended_windows() {
        let mut f: FaultTable<u8, 3> = FaultTable::new(UpdateRule::Overwrite);
        f.update(t(0), 1, ms(1), ms(5000), true); // isolated until 5000
        f.update(t(0), 2, ms(1), ms(100), true); // ends at 100
        f.update(t(0), 3, ms(1), ms(9000), true); // isolated until 9000
        // At t=200, broker 2's window ended: it goes first, even for a non-isolated newcomer.
        assert_eq!(f.update(t(200), 4, ms(1), ms(0), true), Insert::Evicted(2));
        // Now 1, 3 isolated and 4 available: a non-isolated newcomer replaces 4 (tie rank).
        assert_eq!(f.update(t(300), 5, ms(1), ms(0), true), Insert::Evicted(4));
        f.update(t(300), 5, ms(1), ms(20_000), true);
        // All isolated: a non-isolated newcomer is dropped, isolated ones are kept.
        assert_eq!(f.update(t(400), 6, ms(1), ms(0), true), Insert::Dropped);
        assert!(!f.is_available(t(400), 1) && !f.is_available(t(400), 3));
        // An isolated newcomer evicts the one whose window ends first.
        assert_eq!(
            f.update(t(400), 7, ms(1), ms(7000), true),
            Insert::Evicted(1)
        );
        assert_eq!(f.len(), 3);
    }

    #[test]
    fn pick_one_at_least_rotates_over_better_half() {
        let mut f: FaultTable<u8, 8> = FaultTable::new(UpdateRule::Overwrite);
        let mut c = QueueCounter::new(0);
        assert_eq!(f.pick_one_at_least(t(0), &mut c), None);
        f.update(t(0), 1, ms(300), ms(1000), true);
        assert_eq!(f.pick_one_at_least(t(0), &mut c), Some(1));
        f.update(t(0), 2, ms(100), ms(2000), true);
        // Two items: half = 1, the best (lower latency) always wins.
        for _ in 0..5 {
            assert_eq!(f.pick_one_at_least(t(0), &mut c), Some(2));
        }
        f.update(t(0), 3, ms(50), ms(3000), true);
        f.update(t(0), 4, ms(900), ms(500), true);
        // At t=600 broker 4 is available: order 4, 3, 2, 1; half = 2 → rotate over {4, 3}.
        let mut c = QueueCounter::new(0);
        let picks: std::vec::Vec<_> = (0..4)
            .map(|_| f.pick_one_at_least(t(600), &mut c).unwrap())
            .collect();
        assert_eq!(picks, [3, 4, 3, 4]);
    }

    #[test]
    fn adaptive_backoff_and_half_open() {
        let cfg = AdaptiveConfig::DEFAULT;
        let mut f: FaultTable<u8, 4> = FaultTable::new(UpdateRule::Overwrite);
        f.record_adaptive(t(0), 1, AdaptiveSample::Good(ms(10)), &cfg);
        assert_eq!(f.get(1).unwrap().srtt, ms(10));
        f.record_adaptive(t(100), 1, AdaptiveSample::Fault, &cfg);
        assert!(!f.is_available(t(1099), 1));
        assert!(f.is_available(t(1100), 1));
        // A straggler of the same episode does not double the back-off.
        f.record_adaptive(t(500), 1, AdaptiveSample::Fault, &cfg);
        assert_eq!(f.available_at(1), t(1100));
        // Half-open: a probe fences the broker.
        f.begin_probe(t(1100), 1, ms(200));
        assert!(!f.is_available(t(1299), 1));
        // The probe fails early (refused at 1101, inside its own fence): second episode, 2 s.
        f.record_adaptive(t(1101), 1, AdaptiveSample::Fault, &cfg);
        assert_eq!(f.available_at(1), t(3101));
        // A straggler right after does not double again.
        f.record_adaptive(t(1300), 1, AdaptiveSample::Fault, &cfg);
        assert_eq!(f.available_at(1), t(3101));
        // Next probe at 3101 fails at 3300: third episode, 4 s.
        f.begin_probe(t(3101), 1, ms(200));
        f.record_adaptive(t(1300 + 2000), 1, AdaptiveSample::Fault, &cfg);
        assert_eq!(f.available_at(1), t(7300));
        f.begin_probe(t(7300), 1, ms(200));
        assert!(f.get(1).unwrap().probing);
        f.record_adaptive(t(7300), 1, AdaptiveSample::Good(ms(10)), &cfg);
        assert!(!f.get(1).unwrap().probing);
        assert!(f.is_available(t(7300), 1));
        // Back to one second after a success.
        f.record_adaptive(t(8000), 1, AdaptiveSample::Fault, &cfg);
        assert_eq!(f.available_at(1), t(9000));
        // A slow answer (>= 550 ms) is a fault too: second episode, 2 s.
        f.record_adaptive(t(9000), 1, AdaptiveSample::Good(ms(550)), &cfg);
        assert_eq!(f.available_at(1), t(11_000));
        // 549 ms is a good answer: closes the episode.
        f.record_adaptive(t(11_000), 1, AdaptiveSample::Good(ms(549)), &cfg);
        assert_eq!(f.get(1).unwrap().consecutive_faults, 0);
        assert!(f.is_available(t(11_000), 1));
        // Back-off is capped.
        let mut last = Duration::ZERO;
        for i in 0..30 {
            let now = f.available_at(1);
            f.record_adaptive(now, 1, AdaptiveSample::Fault, &cfg);
            last = f.available_at(1) - now;
            assert!(last <= cfg.max_isolation, "round {i}");
        }
        assert_eq!(last, cfg.max_isolation);
    }

    #[test]
    fn adaptive_cap_uses_estimates() {
        let cfg = AdaptiveConfig::DEFAULT;
        let mut f: FaultTable<u8, 4> = FaultTable::new(UpdateRule::Overwrite);
        assert_eq!(cfg.attempt_cap(&f, 1), ms(1000), "nothing known");
        f.record_adaptive(t(0), 1, AdaptiveSample::Good(ms(10)), &cfg);
        assert_eq!(cfg.attempt_cap(&f, 1), ms(200), "floor");
        assert_eq!(
            cfg.attempt_cap(&f, 2),
            ms(200),
            "unknown broker uses the best estimate"
        );
        f.record_adaptive(t(0), 2, AdaptiveSample::Good(ms(400)), &cfg);
        // srtt 400, rttvar 200 → (400 + 800) × 2.
        assert_eq!(cfg.attempt_cap(&f, 2), ms(2400));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Update {
            key: u8,
            at: u16,
            lat: u16,
            d: u16,
            reachable: bool,
        },
        Remove {
            key: u8,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..6, 0u16..2000, 0u16..2000, 0u16..2000, any::<bool>()).prop_map(
                |(key, at, lat, d, reachable)| Op::Update {
                    key,
                    at,
                    lat,
                    d,
                    reachable
                }
            ),
            (0u8..6).prop_map(|key| Op::Remove { key }),
        ]
    }

    proptest! {
        /// With room for every key, the table behaves like a plain map under both rules.
        #[test]
        fn matches_reference_map(ops in proptest::collection::vec(op(), 0..60), extend in any::<bool>()) {
            let rule = if extend { UpdateRule::ExtendOnly } else { UpdateRule::Overwrite };
            let mut f: FaultTable<u8, 6> = FaultTable::new(rule);
            let mut m: BTreeMap<u8, (u64, u64, bool)> = BTreeMap::new();
            let mut now = 0u64;
            for o in ops {
                match o {
                    Op::Update { key, at, lat, d, reachable } => {
                        now += u64::from(at);
                        f.update(t(now), key, ms(u64::from(lat)), ms(u64::from(d)), reachable);
                        let e = m.entry(key).or_insert((0, 0, true));
                        e.0 = u64::from(lat);
                        let until = now + u64::from(d);
                        if !extend || (d > 0 && until > e.1) { e.1 = until; }
                        e.2 = reachable;
                    }
                    Op::Remove { key } => {
                        prop_assert_eq!(f.remove(key), m.remove(&key).is_some());
                    }
                }
                prop_assert_eq!(f.len(), m.len());
                for k in 0..6u8 {
                    for probe in [now, now + 1, now + 1000, now + 2000] {
                        let want = m.get(&k).is_none_or(|e| probe >= e.1);
                        prop_assert_eq!(f.is_available(t(probe), k), want);
                    }
                    prop_assert_eq!(f.is_reachable(k), m.get(&k).is_none_or(|e| e.2));
                    prop_assert_eq!(f.get(k).map(|e| e.latency), m.get(&k).map(|e| ms(e.0)));
                }
            }
        }

        /// A small table never forgets an isolated broker for one whose window ended.
        #[test]
        fn eviction_keeps_isolated(ops in proptest::collection::vec(op(), 0..60)) {
            let mut f: FaultTable<u8, 3> = FaultTable::new(UpdateRule::Overwrite);
            let mut now = 0u64;
            for o in ops {
                if let Op::Update { key, at, lat, d, reachable } = o {
                    now += u64::from(at);
                    let before: std::vec::Vec<(u8, bool, bool)> = f
                        .iter()
                        .map(|e| (e.broker, e.is_available(t(now)), e.reachable))
                        .collect();
                    let r = f.update(t(now), key, ms(u64::from(lat)), ms(u64::from(d)), reachable);
                    if let Insert::Evicted(v) = r {
                        let victim_isolated = before.iter().any(|(b, a, _)| *b == v && !a);
                        let some_available = before.iter().any(|(_, a, _)| *a);
                        prop_assert!(!(victim_isolated && some_available));
                        prop_assert!(!victim_isolated || d > 0);
                    }
                    if r == Insert::Dropped {
                        // Only entries that still matter (isolated or unreachable) block it.
                        prop_assert!(before.iter().all(|(_, a, r)| !a || !r));
                    }
                    prop_assert!(f.len() <= 3);
                }
            }
        }
    }
}
