//! The runtime's edge between wall/monotonic clocks and the core's [`rmq_core::time`].

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use rmq_core::time::{Duration, Instant};

fn epoch() -> std::time::Instant {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}

/// Now, as a core instant (milliseconds since a process-wide epoch).
pub fn now() -> Instant {
    at(std::time::Instant::now())
}

/// A std instant as a core instant (saturating at the epoch).
pub fn at(t: std::time::Instant) -> Instant {
    let since = t.saturating_duration_since(epoch());
    Instant::from_millis(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

/// A core instant as a tokio instant (saturating: see [`after`]).
pub fn to_tokio(i: Instant) -> tokio::time::Instant {
    let e = tokio::time::Instant::from_std(epoch());
    later(e, std::time::Duration::from_millis(i.millis()))
}

/// `d` from now, as a tokio instant; a `d` too large for the clock (a caller's
/// `Duration::MAX`) is ~30 years from now rather than a panic.
pub fn after(d: std::time::Duration) -> tokio::time::Instant {
    later(tokio::time::Instant::now(), d)
}

fn later(t: tokio::time::Instant, d: std::time::Duration) -> tokio::time::Instant {
    const FAR: std::time::Duration = std::time::Duration::from_secs(30 * 365 * 86_400);
    t.checked_add(d.min(FAR)).unwrap_or(t)
}

/// A std duration as a core duration (saturating, ms).
pub fn to_core(d: std::time::Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A core duration as a std duration.
pub fn to_std(d: Duration) -> std::time::Duration {
    std::time::Duration::from_millis(d.millis())
}

/// Unix time in milliseconds (born timestamps, UNIQ_KEY).
pub fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A cheap random `u32` (queue counter seeds, NameServer start index, entropy for the plan).
/// Not cryptographic: SplitMix64 over a process counter and the clock.
pub fn random_u32() -> u32 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut z = STATE
        .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        .wrapping_add(unix_millis() as u64)
        .wrapping_add(u64::from(std::process::id()) << 32);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as u32
}
