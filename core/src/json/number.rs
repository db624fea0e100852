//! Numbers: [`JsonNumber`] (a number token kept as its source text), Java-compatible decimal
//! parsing ([`parse_i64_ascii`]) and the table-driven decimal formatting the writers use.

/// Parses an optionally signed ASCII decimal integer (Java `Long.parseLong` rules).
#[inline]
pub fn parse_i64_ascii(s: &[u8]) -> Option<i64> {
    // One digit (queue ids, flags, counters).
    if let &[d] = s {
        let x = d.wrapping_sub(b'0');
        return (x <= 9).then_some(i64::from(x));
    }
    let (neg, digits) = match s.split_first()? {
        (b'-', rest) => (true, rest),
        (b'+', rest) => (false, rest),
        _ => (false, s),
    };
    if digits.is_empty() {
        return None;
    }
    if digits.len() <= 18 {
        // Below 10^18: cannot overflow, no checked arithmetic needed.
        let mut v: i64 = 0;
        for &d in digits {
            let x = d.wrapping_sub(b'0');
            if x > 9 {
                return None;
            }
            v = v * 10 + i64::from(x);
        }
        return Some(if neg { -v } else { v });
    }
    // Accumulate negatively so i64::MIN parses.
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    if neg { Some(v) } else { v.checked_neg() }
}

/// A JSON number token, kept as its source text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct JsonNumber<'a> {
    pub(super) raw: &'a [u8],
}

impl<'a> JsonNumber<'a> {
    /// The number's source text.
    pub const fn raw(&self) -> &'a [u8] {
        self.raw
    }
    /// The value if it is an integer that fits `i64` (no fraction or exponent).
    #[inline]
    pub fn as_i64(&self) -> Option<i64> {
        parse_i64_ascii(self.raw)
    }
    /// The value if it is an integer that fits `i32`.
    #[inline]
    pub fn as_i32(&self) -> Option<i32> {
        self.as_i64().and_then(|v| i32::try_from(v).ok())
    }
    /// The value as `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        core::str::from_utf8(self.raw).ok()?.parse().ok()
    }
}

/// "00".."99": two decimal digits per table lookup.
const DIGITS2: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// The decimal digits of `v` if it is in 0..=99 (flags, queue ids, counters), from the table.
#[inline]
pub(crate) fn small_dec(v: i64) -> Option<&'static [u8]> {
    let i = usize::try_from(v).ok().filter(|&i| i < 100)?;
    DIGITS2.get(i * 2 + usize::from(i < 10)..i * 2 + 2)
}

/// Formats `v` right-aligned into `tmp`; returns the number of bytes used.
#[inline]
pub(crate) fn fmt_i64(v: i64, tmp: &mut [u8; 20]) -> usize {
    let mut u = v.unsigned_abs();
    let mut i = tmp.len();
    while u >= 100 {
        let r = (u % 100) as usize * 2;
        u /= 100;
        i -= 2;
        tmp[i] = DIGITS2[r];
        tmp[i + 1] = DIGITS2[r + 1];
    }
    if u >= 10 {
        let r = u as usize * 2;
        i -= 2;
        tmp[i] = DIGITS2[r];
        tmp[i + 1] = DIGITS2[r + 1];
    } else {
        i -= 1;
        tmp[i] = b'0' + u as u8;
    }
    if v < 0 {
        i -= 1;
        tmp[i] = b'-';
    }
    tmp.len() - i
}

/// Number of bytes of `v` in decimal.
pub const fn i64_dec_len(v: i64) -> usize {
    let u = v.unsigned_abs();
    let mut n = if v < 0 { 2 } else { 1 };
    let mut p: u64 = 10;
    while u >= p {
        n += 1;
        match p.checked_mul(10) {
            Some(q) => p = q,
            None => break,
        }
    }
    n
}
