//! Monotonic time for the sans-IO core.
//!
//! The core never reads a clock: runtimes convert their own clock (tokio's `Instant`,
//! smoltcp's `Instant`, a virtual clock in simulations) into [`Instant`] at the edge and pass it
//! in as `now`. The epoch is arbitrary (for example "when the runtime started"); only
//! differences matter. Time is expected to be monotonic: a `now` earlier than a previous one is
//! treated as equal to it by the state machines (an early or repeated `handle_timeout(now)` is a
//! no-op).
//!
//! Resolution is one millisecond, the unit of every RocketMQ timeout and of the Java latency
//! tables.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in time, in milliseconds since an arbitrary, runtime-chosen epoch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Instant {
    millis: u64,
}

/// A span of time, in milliseconds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Duration {
    millis: u64,
}

impl Instant {
    /// The epoch itself.
    pub const ZERO: Instant = Instant { millis: 0 };
    /// The latest representable instant ("never").
    pub const MAX: Instant = Instant { millis: u64::MAX };

    /// An instant `millis` milliseconds after the epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Instant { millis }
    }

    /// An instant `secs` seconds after the epoch (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Instant {
            millis: secs.saturating_mul(1000),
        }
    }

    /// Milliseconds since the epoch.
    pub const fn millis(self) -> u64 {
        self.millis
    }

    /// `self - earlier`, or zero when `earlier` is later than `self`.
    pub const fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration {
            millis: self.millis.saturating_sub(earlier.millis),
        }
    }

    /// `self + d`, saturating at [`Instant::MAX`].
    pub const fn saturating_add(self, d: Duration) -> Instant {
        Instant {
            millis: self.millis.saturating_add(d.millis),
        }
    }

    /// `self - d`, saturating at [`Instant::ZERO`].
    pub const fn saturating_sub(self, d: Duration) -> Instant {
        Instant {
            millis: self.millis.saturating_sub(d.millis),
        }
    }
}

impl Duration {
    /// Zero length.
    pub const ZERO: Duration = Duration { millis: 0 };
    /// The longest representable duration.
    pub const MAX: Duration = Duration { millis: u64::MAX };

    /// A duration of `millis` milliseconds.
    pub const fn from_millis(millis: u64) -> Self {
        Duration { millis }
    }

    /// A duration of `secs` seconds (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Duration {
            millis: secs.saturating_mul(1000),
        }
    }

    /// Length in milliseconds.
    pub const fn millis(self) -> u64 {
        self.millis
    }

    /// `self + other`, saturating.
    pub const fn saturating_add(self, other: Duration) -> Duration {
        Duration {
            millis: self.millis.saturating_add(other.millis),
        }
    }

    /// `self - other`, or zero.
    pub const fn saturating_sub(self, other: Duration) -> Duration {
        Duration {
            millis: self.millis.saturating_sub(other.millis),
        }
    }

    /// `self * n`, saturating.
    pub const fn saturating_mul(self, n: u64) -> Duration {
        Duration {
            millis: self.millis.saturating_mul(n),
        }
    }

    /// The smaller of two durations.
    pub const fn min(self, other: Duration) -> Duration {
        if self.millis <= other.millis {
            self
        } else {
            other
        }
    }
}

/// Saturating: adding to [`Instant::MAX`] stays at `MAX`.
impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = self.saturating_add(rhs);
    }
}

/// Saturating: an `earlier` that is later gives [`Duration::ZERO`].
impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

/// Saturating at [`Instant::ZERO`].
impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        self.saturating_sub(rhs)
    }
}

/// Saturating.
impl Add for Duration {
    type Output = Duration;
    fn add(self, rhs: Duration) -> Duration {
        self.saturating_add(rhs)
    }
}

/// Saturating at zero.
impl Sub for Duration {
    type Output = Duration;
    fn sub(self, rhs: Duration) -> Duration {
        self.saturating_sub(rhs)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{}ms", self.millis)
    }
}

impl fmt::Debug for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.millis)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms", self.millis)
    }
}

/// Wall-clock time for a runtime whose clock only counts from boot: once told that `now` is
/// `unix_millis`, it maps any later instant to Unix milliseconds (for `bornTimestamp` and
/// UNIQ_KEY); before that, the monotonic milliseconds themselves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WallClock {
    base: Option<(Instant, i64)>,
}

impl WallClock {
    /// Records that `now` is `unix_millis`.
    pub fn set(&mut self, now: Instant, unix_millis: i64) {
        self.base = Some((now, unix_millis));
    }

    /// Unix milliseconds at `now`.
    pub fn unix_millis(&self, now: Instant) -> i64 {
        let (at, unix) = self.base.unwrap_or((Instant::ZERO, 0));
        let d = i64::try_from(now.saturating_duration_since(at).millis()).unwrap_or(i64::MAX);
        unix.saturating_add(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_millis(1000);
        assert_eq!(t + Duration::from_millis(550), Instant::from_millis(1550));
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(t - Instant::from_millis(2000), Duration::ZERO);
        assert_eq!(Instant::from_millis(2000) - t, Duration::from_secs(1));
        assert_eq!(t - Duration::from_secs(5), Instant::ZERO);
        assert_eq!(
            Duration::from_millis(3) - Duration::from_millis(5),
            Duration::ZERO
        );
        assert_eq!(Duration::from_secs(u64::MAX), Duration::MAX);
    }

    #[test]
    fn debug_format() {
        assert_eq!(format!("{:?}", Instant::from_millis(5)), "t+5ms");
        assert_eq!(format!("{:?}", Duration::from_millis(7)), "7ms");
    }
}
