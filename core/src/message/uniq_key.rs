//! UNIQ_KEY, the client message id (`docs/protocol/WIRE.md` §9.3; Java `MessageClientIDSetter`).
//!
//! ```text
//! offset size  field
//! 0      4|16  client IP (IPv4 or IPv6)
//! +0     2     pid, low 16 bits
//! +2     4     ClassLoader.hashCode() of the client library (arbitrary per process)
//! +6     4     ms since the start of the current month (local time), as u32
//! +10    2     counter, low 16 bits
//! ```
//! 16 bytes (IPv4) or 28 bytes (IPv6), rendered as upper-case hex (32 or 56 characters).
//! The broker never interprets it (it only indexes it), so any unique value works; we follow
//! Java's layout so tools can read the time back.
//!
//! ```
//! use core::net::{IpAddr, Ipv4Addr};
//! use rmq_core::message::UniqKey;
//!
//! let id = UniqKey::new(IpAddr::V4(Ipv4Addr::new(192, 168, 1, 10)), 12345, 0x1B6D3586, 1_000_000, 7);
//! assert_eq!(id.to_hex(), "C0A8010A30391B6D3586000F42400007");
//! assert_eq!("c0a8010a30391b6d3586000f42400007".parse::<UniqKey>(), Ok(id));
//! ```

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

use super::hex::{self, HexId};
use super::{BufferTooSmall, IdParseError};

/// Raw length of an IPv4 UNIQ_KEY.
pub const LEN_V4: usize = 16;
/// Raw length of an IPv6 UNIQ_KEY.
pub const LEN_V6: usize = 28;
/// Hex length of an IPv4 UNIQ_KEY.
pub const HEX_LEN_V4: usize = 32;
/// Hex length of an IPv6 UNIQ_KEY.
pub const HEX_LEN_V6: usize = 56;

const MS_PER_DAY: i64 = 86_400_000;

/// Milliseconds since the start of the month (day 1, 00:00:00.000) containing `unix_millis`,
/// in the time zone `utc_offset_secs` east of UTC.
///
/// This is the time field of a UNIQ_KEY. Java uses the JVM's local zone; pass the offset in
/// force at `unix_millis` (a DST change inside the month shifts Java's value by the DST delta,
/// which nobody relies on). Works for dates before 1970 too (proleptic Gregorian calendar).
/// The result is below 31 days (2 678 400 000 ms), so it always fits in a `u32`.
pub fn millis_since_month_start(unix_millis: i64, utc_offset_secs: i32) -> u32 {
    let local = unix_millis.saturating_add(i64::from(utc_offset_secs) * 1000);
    let days = local.div_euclid(MS_PER_DAY);
    let ms_of_day = local.rem_euclid(MS_PER_DAY);
    let day_index = day_of_month(days) - 1;
    u32::try_from(day_index * MS_PER_DAY + ms_of_day).unwrap_or(u32::MAX)
}

/// Day of the month (1..=31) of the civil date `days` days after 1970-01-01
/// (Howard Hinnant's `civil_from_days`, reduced to the day). The Gregorian calendar repeats
/// every 400 years (146 097 days), so the day is that of `days` modulo 146 097, and the rest
/// is 32-bit arithmetic (hardware division on a Cortex-M, no 64-bit helpers).
fn day_of_month(days: i64) -> i64 {
    // In [0, 146096]: 1970-01-01 plus that is the same day of the month as `days`.
    let d = days.rem_euclid(146_097) as u32;
    // Days since 0000-03-01, within one 400-year era (1970-01-01 is day 719 468 of the
    // era that starts at 0000-03-01).
    let doe = (d + 719_468) % 146_097; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365], from March 1
    let mp = (5 * doy + 2) / 153; // [0, 11]
    i64::from(doy - (153 * mp + 2) / 5 + 1)
}

/// A client message id (UNIQ_KEY), 16 or 28 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqKey {
    bytes: [u8; LEN_V6],
    len: u8,
}

impl UniqKey {
    /// Builds an id from its fields. Only the low 16 bits of `pid` are kept, as in Java.
    pub fn new(
        ip: IpAddr,
        pid: u32,
        class_loader_hash: u32,
        month_millis: u32,
        counter: u16,
    ) -> Self {
        let mut id = Self::prefix(ip, pid, class_loader_hash);
        id.set_tail(month_millis, counter);
        id
    }

    fn prefix(ip: IpAddr, pid: u32, class_loader_hash: u32) -> Self {
        let mut bytes = [0u8; LEN_V6];
        let ip_len = match ip {
            IpAddr::V4(v4) => {
                bytes[..4].copy_from_slice(&v4.octets());
                4
            }
            IpAddr::V6(v6) => {
                bytes[..16].copy_from_slice(&v6.octets());
                16
            }
        };
        // `pid as u16` keeps the low 16 bits, as Java's `(short) pid`.
        bytes[ip_len..ip_len + 2].copy_from_slice(&(pid as u16).to_be_bytes());
        bytes[ip_len + 2..ip_len + 6].copy_from_slice(&class_loader_hash.to_be_bytes());
        UniqKey {
            bytes,
            len: if ip_len == 4 {
                LEN_V4 as u8
            } else {
                LEN_V6 as u8
            },
        }
    }

    fn ip_len(&self) -> usize {
        if usize::from(self.len) == LEN_V4 {
            4
        } else {
            16
        }
    }

    fn set_tail(&mut self, month_millis: u32, counter: u16) {
        let at = self.ip_len() + 6;
        self.bytes[at..at + 4].copy_from_slice(&month_millis.to_be_bytes());
        self.bytes[at + 4..at + 6].copy_from_slice(&counter.to_be_bytes());
    }

    /// The same id with another counter: the ids a generator gives in a row differ only
    /// there (while the millisecond field stays), as those of one batch do.
    pub fn with_counter(mut self, counter: u16) -> Self {
        let month_millis = self.month_millis();
        self.set_tail(month_millis, counter);
        self
    }

    fn field<const N: usize>(&self, offset: usize) -> [u8; N] {
        let at = self.ip_len() + offset;
        let mut out = [0u8; N];
        out.copy_from_slice(&self.bytes[at..at + N]);
        out
    }

    /// An id from its raw bytes (16 = IPv4, 28 = IPv6).
    ///
    /// # Errors
    ///
    /// [`IdParseError::BadLength`] for any other length.
    pub fn from_bytes(raw: &[u8]) -> Result<Self, IdParseError> {
        if raw.len() != LEN_V4 && raw.len() != LEN_V6 {
            return Err(IdParseError::BadLength);
        }
        let mut bytes = [0u8; LEN_V6];
        bytes[..raw.len()].copy_from_slice(raw);
        Ok(UniqKey {
            bytes,
            len: raw.len() as u8,
        })
    }

    /// Parses the hex form, either case (32 characters = IPv4, 56 = IPv6). Go clients emit the
    /// last 6 bytes in lower case; Java upper-cases before parsing, so mixed case is fine.
    ///
    /// # Errors
    ///
    /// [`IdParseError::BadLength`] or [`IdParseError::BadHex`].
    pub fn parse(text: &str) -> Result<Self, IdParseError> {
        let raw_len = match text.len() {
            HEX_LEN_V4 => LEN_V4,
            HEX_LEN_V6 => LEN_V6,
            _ => return Err(IdParseError::BadLength),
        };
        let mut bytes = [0u8; LEN_V6];
        hex::decode(text.as_bytes(), &mut bytes[..raw_len])?;
        Ok(UniqKey {
            bytes,
            len: raw_len as u8,
        })
    }

    /// The raw 16 or 28 bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The client IP field.
    pub fn ip(&self) -> IpAddr {
        if self.ip_len() == 4 {
            let mut v4 = [0u8; 4];
            v4.copy_from_slice(&self.bytes[..4]);
            IpAddr::V4(Ipv4Addr::from(v4))
        } else {
            let mut v6 = [0u8; 16];
            v6.copy_from_slice(&self.bytes[..16]);
            IpAddr::V6(Ipv6Addr::from(v6))
        }
    }

    /// The pid field (low 16 bits of the process id).
    pub fn pid(&self) -> u16 {
        u16::from_be_bytes(self.field(0))
    }

    /// The class-loader hash field.
    pub fn class_loader_hash(&self) -> u32 {
        u32::from_be_bytes(self.field(2))
    }

    /// The time field: ms since the start of the month, as u32.
    pub fn month_millis(&self) -> u32 {
        u32::from_be_bytes(self.field(6))
    }

    /// The counter field.
    pub fn counter(&self) -> u16 {
        u16::from_be_bytes(self.field(10))
    }

    /// Length of the hex form: 32 or 56.
    pub fn hex_len(&self) -> usize {
        usize::from(self.len) * 2
    }

    /// Writes the upper-case hex form into the front of `buf`; returns [`hex_len`](Self::hex_len).
    ///
    /// # Errors
    ///
    /// [`BufferTooSmall`] if `buf` is shorter than [`hex_len`](Self::hex_len).
    pub fn write_hex(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        hex::encode_upper(self.as_bytes(), buf)
    }

    /// The upper-case hex form, inline.
    pub fn to_hex(&self) -> HexId {
        HexId::from_raw(self.as_bytes())
    }
}

impl fmt::Display for UniqKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for UniqKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UniqKey({})", self.to_hex())
    }
}

impl FromStr for UniqKey {
    type Err = IdParseError;
    fn from_str(s: &str) -> Result<Self, IdParseError> {
        UniqKey::parse(s)
    }
}

/// Generates UNIQ_KEYs for one process: a fixed prefix (IP, pid, class-loader hash) plus a
/// 16-bit counter that starts at 0 and wraps, as Java's per-process counter does.
///
/// The caller supplies the time (the core never reads a clock), either as
/// [`millis_since_month_start`] output or as unix time plus a UTC offset.
#[derive(Clone, Debug)]
pub struct UniqKeyGenerator {
    template: UniqKey,
    counter: u16,
}

impl UniqKeyGenerator {
    /// A generator for this process. Runtimes without a real pid or class loader can pass any
    /// per-process values (the Go client passes a hash of 0); a random `class_loader_hash`
    /// makes collisions between processes on one host unlikely.
    pub fn new(ip: IpAddr, pid: u32, class_loader_hash: u32) -> Self {
        UniqKeyGenerator {
            template: UniqKey::prefix(ip, pid, class_loader_hash),
            counter: 0,
        }
    }

    /// Starts the counter at `counter` instead of 0.
    #[must_use]
    pub fn with_counter(mut self, counter: u16) -> Self {
        self.counter = counter;
        self
    }

    /// The counter value the next id will carry.
    pub fn counter(&self) -> u16 {
        self.counter
    }

    /// The next id, stamped with `month_millis` (see [`millis_since_month_start`]).
    pub fn next_id(&mut self, month_millis: u32) -> UniqKey {
        let mut id = self.template;
        id.set_tail(month_millis, self.counter);
        self.counter = self.counter.wrapping_add(1);
        id
    }

    /// The next id for wall-clock time `unix_millis` in a zone `utc_offset_secs` east of UTC.
    pub fn next_id_at(&mut self, unix_millis: i64, utc_offset_secs: i32) -> UniqKey {
        self.next_id(millis_since_month_start(unix_millis, utc_offset_secs))
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_in_a_row_differ_only_in_the_counter() {
        let mut g = UniqKeyGenerator::new(example_ip(), 4242, 0x1234_5678).with_counter(u16::MAX);
        let first = g.next_id(1_000);
        let second = g.next_id(1_000);
        assert_eq!(first.counter(), u16::MAX);
        assert_eq!(first.with_counter(first.counter().wrapping_add(1)), second);
        assert_eq!(second.with_counter(u16::MAX), first);
    }

    fn example_ip() -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 168, 1, 10))
    }

    #[test]
    fn wire_example() {
        let id = UniqKey::new(example_ip(), 12345, 0x1B6D_3586, 1_000_000, 7);
        assert_eq!(id.to_hex(), "C0A8010A30391B6D3586000F42400007");
        assert_eq!(id.hex_len(), 32);
        assert_eq!(
            id.as_bytes(),
            &[
                0xC0, 0xA8, 0x01, 0x0A, 0x30, 0x39, 0x1B, 0x6D, 0x35, 0x86, 0x00, 0x0F, 0x42, 0x40,
                0x00, 0x07
            ]
        );
        let mut buf = [0xa5u8; 40];
        assert_eq!(id.write_hex(&mut buf), Ok(32));
        assert_eq!(&buf[..32], b"C0A8010A30391B6D3586000F42400007");
        assert_eq!(buf[32], 0xa5);
        for n in 0..32 {
            assert_eq!(id.write_hex(&mut buf[..n]), Err(BufferTooSmall));
        }
        // Go style: lower-case tail.
        let parsed = UniqKey::parse("C0A8010A30391B6D3586000f42400007").unwrap();
        assert_eq!(parsed, id);
        assert_eq!(parsed.ip(), example_ip());
        assert_eq!(parsed.pid(), 12345);
        assert_eq!(parsed.class_loader_hash(), 0x1B6D_3586);
        assert_eq!(parsed.month_millis(), 1_000_000);
        assert_eq!(parsed.counter(), 7);
    }

    #[test]
    fn pid_keeps_low_16_bits_and_ipv6_is_56_chars() {
        let ip = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
        let id = UniqKey::new(ip, 0x0012_3039, 0xFFFF_FFFF, 0x8000_0000, 0xFFFF);
        assert_eq!(id.pid(), 0x3039);
        assert_eq!(id.hex_len(), 56);
        let want = "20010DB8000000000000000000000001".to_string()
            + "3039"
            + "FFFFFFFF"
            + "80000000"
            + "FFFF";
        assert_eq!(id.to_hex().as_str(), want);
        assert_eq!(UniqKey::parse(&id.to_hex()), Ok(id));
        assert_eq!(UniqKey::from_bytes(id.as_bytes()), Ok(id));
    }

    #[test]
    fn parse_errors() {
        assert_eq!(UniqKey::parse(""), Err(IdParseError::BadLength));
        assert_eq!(
            UniqKey::parse("C0A8010A30391B6D3586000F4240000"),
            Err(IdParseError::BadLength)
        );
        assert_eq!(
            UniqKey::parse("C0A8010A30391B6D3586000F424000077"),
            Err(IdParseError::BadLength)
        );
        assert_eq!(
            UniqKey::parse("C0A8010A30391B6D3586000F4240000G"),
            Err(IdParseError::BadHex)
        );
        assert_eq!(
            UniqKey::parse("C0A8010A30391B6D3586000F424000é"),
            Err(IdParseError::BadHex)
        );
        assert_eq!(UniqKey::from_bytes(&[0; 17]), Err(IdParseError::BadLength));
    }

    #[test]
    fn generator_counts_and_wraps() {
        let mut generator = UniqKeyGenerator::new(example_ip(), 12345, 0x1B6D_3586);
        assert_eq!(generator.counter(), 0);
        let first = generator.next_id(1_000_000);
        assert_eq!(first.to_hex(), "C0A8010A30391B6D3586000F42400000");
        let second = generator.next_id(1_000_001);
        assert_eq!(second.counter(), 1);
        assert_eq!(second.month_millis(), 1_000_001);
        let mut generator = generator.with_counter(u16::MAX);
        assert_eq!(generator.next_id(0).counter(), u16::MAX);
        assert_eq!(generator.next_id(0).counter(), 0);
        // 2023-11-14T22:13:20Z is 13 days, 22:13:20 into November (UTC).
        let id = generator.next_id_at(1_700_000_000_000, 0);
        assert_eq!(id.month_millis(), 1_203_200_000);
        assert_eq!(id.counter(), 1);
    }

    /// The 32-bit day-of-month agrees with the 64-bit `civil_from_days` on the whole
    /// Gregorian cycle and on dates far from the epoch.
    #[test]
    fn day_of_month_matches_civil_from_days() {
        fn reference(days: i64) -> i64 {
            let z = days + 719_468;
            let era = z.div_euclid(146_097);
            let doe = z - era * 146_097;
            let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
            let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
            let mp = (5 * doy + 2) / 153;
            doy - (153 * mp + 2) / 5 + 1
        }
        for days in (-146_097 * 2..146_097 * 2).chain([
            i64::MAX / MS_PER_DAY,
            i64::MIN / MS_PER_DAY,
            1_000_000_000,
            -1_000_000_007,
        ]) {
            assert_eq!(day_of_month(days), reference(days), "{days}");
        }
    }

    #[test]
    fn month_start_fixtures() {
        // 2023-11-14T22:13:20Z; Nov 1 00:00Z = 1698796800000.
        assert_eq!(
            millis_since_month_start(1_700_000_000_000, 0),
            1_203_200_000
        );
        // UTC+8: local 2023-11-15T06:13:20.
        assert_eq!(
            millis_since_month_start(1_700_000_000_000, 8 * 3600),
            1_232_000_000
        );
        // 2024-03-01T00:00:00Z: month start; 1 ms earlier is the end of a leap February.
        assert_eq!(millis_since_month_start(1_709_251_200_000, 0), 0);
        assert_eq!(
            millis_since_month_start(1_709_251_199_999, 0),
            2_505_599_999
        );
        // UTC-5: local 2024-02-29T19:00.
        assert_eq!(
            millis_since_month_start(1_709_251_200_000, -5 * 3600),
            2_487_600_000
        );
        // Before the epoch: 1969-12-31T23:59:59.999Z.
        assert_eq!(millis_since_month_start(-1, 0), 2_678_399_999);
        assert_eq!(millis_since_month_start(0, 0), 0);
        // Extremes do not panic.
        let _ = millis_since_month_start(i64::MAX, i32::MAX);
        let _ = millis_since_month_start(i64::MIN, i32::MIN);
    }

    /// Reference model: walk the calendar month by month.
    fn naive_month_millis(unix_millis: i64) -> u32 {
        fn leap(y: i64) -> bool {
            (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
        }
        fn month_days(y: i64, m: usize) -> i64 {
            [
                31,
                if leap(y) { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ][m]
        }
        // Start from 1900-01-01T00:00Z = -2208988800000.
        let mut start = -2_208_988_800_000i64;
        let mut year = 1900;
        let mut month = 0;
        loop {
            let next = start + month_days(year, month) * MS_PER_DAY;
            if next > unix_millis {
                return (unix_millis - start) as u32;
            }
            start = next;
            month += 1;
            if month == 12 {
                month = 0;
                year += 1;
            }
        }
    }

    proptest! {
        #[test]
        fn month_millis_matches_calendar_walk(
            // 1900-01-01 .. 2200-01-01
            t in -2_208_988_800_000i64..7_258_118_400_000i64,
            offset in -14 * 3600..14 * 3600i32,
        ) {
            let local = t + i64::from(offset) * 1000;
            prop_assume!(local >= -2_208_988_800_000);
            prop_assert_eq!(millis_since_month_start(t, offset), naive_month_millis(local));
        }

        #[test]
        fn build_parse_round_trip(
            v6 in any::<bool>(),
            ip4 in any::<[u8; 4]>(),
            ip6 in any::<[u8; 16]>(),
            pid in any::<u32>(),
            hash in any::<u32>(),
            ms in any::<u32>(),
            counter in any::<u16>(),
            lower in any::<bool>(),
        ) {
            let ip = if v6 { IpAddr::V6(ip6.into()) } else { IpAddr::V4(ip4.into()) };
            let id = UniqKey::new(ip, pid, hash, ms, counter);
            let text = id.to_hex();
            prop_assert_eq!(text.len(), if v6 { 56 } else { 32 });
            prop_assert!(text.bytes().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b)));
            let text = if lower { text.to_ascii_lowercase() } else { text.to_string() };
            let back = UniqKey::parse(&text).unwrap();
            prop_assert_eq!(back, id);
            prop_assert_eq!(back.ip(), ip);
            prop_assert_eq!(back.pid(), pid as u16);
            prop_assert_eq!(back.class_loader_hash(), hash);
            prop_assert_eq!(back.month_millis(), ms);
            prop_assert_eq!(back.counter(), counter);
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,60}") {
            if let Ok(id) = UniqKey::parse(&s) {
                prop_assert!(id.to_hex().eq_ignore_ascii_case(&s));
            }
        }
    }
}
