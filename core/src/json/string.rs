//! [`JsonStr`], a borrowed JSON string (or bare key) with its escapes kept as written, and
//! [`JsonChars`]; decoding of those escapes (`\uXXXX`, surrogate pairs) without allocating.

use core::fmt;

#[cfg(target_pointer_width = "64")]
use super::bytes::eq_marks;
use super::bytes::{copy_small, find_quote_or_escape, find2};
use super::number::parse_i64_ascii;
use super::{JsonError, JsonErrorKind, Result};

/// A borrowed JSON string (or bare key): the raw bytes between the quotes.
///
/// Escapes are kept as written; the helpers below decode them on the fly. Escape syntax was
/// checked by the parser; surrogate pairing and UTF-8 are checked when decoding.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct JsonStr<'a> {
    pub(super) raw: &'a [u8],
    pub(super) escaped: bool,
}

impl fmt::Debug for JsonStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for c in self.chars() {
            for e in c.escape_debug() {
                fmt::Write::write_char(f, e)?;
            }
        }
        f.write_str("\"")
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for JsonStr<'_> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "JsonStr({=[u8]})", self.raw)
    }
}

impl<'a> JsonStr<'a> {
    /// A string without escapes (e.g. a bare key, or bytes from a binary header).
    pub const fn from_raw(raw: &'a [u8]) -> Self {
        JsonStr {
            raw,
            escaped: false,
        }
    }

    /// The raw bytes between the quotes, escapes not decoded.
    pub const fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// Whether the raw bytes contain at least one backslash escape.
    pub const fn has_escapes(&self) -> bool {
        self.escaped
    }

    /// The string without copying, if it has no escapes and is valid UTF-8.
    #[inline]
    pub fn as_str(&self) -> Option<&'a str> {
        if self.escaped {
            None
        } else {
            core::str::from_utf8(self.raw).ok()
        }
    }

    /// Walks the decoded bytes in chunks; `f` returns `false` to stop early.
    /// Returns `Ok(false)` if stopped early.
    pub(super) fn walk(&self, mut f: impl FnMut(&[u8]) -> bool) -> Result<bool> {
        let raw = self.raw;
        if !self.escaped {
            return Ok(f(raw));
        }
        let mut run = 0;
        let mut i = 0;
        while i < raw.len() {
            match find2(raw.get(i..).unwrap_or(&[]), b'\\', b'\\') {
                Some(off) => i += off,
                None => break,
            }
            if !f(raw.get(run..i).unwrap_or(&[])) {
                return Ok(false);
            }
            let (c, next) = decode_escape(raw, i)?;
            let mut tmp = [0u8; 4];
            if !f(c.encode_utf8(&mut tmp).as_bytes()) {
                return Ok(false);
            }
            i = next;
            run = next;
        }
        Ok(f(raw.get(run..).unwrap_or(&[])))
    }

    /// Whether the decoded string equals `s`. Malformed escapes compare unequal.
    #[inline]
    pub fn eq_str(&self, s: &str) -> bool {
        self.eq_bytes(s.as_bytes())
    }

    /// Whether the decoded string's UTF-8 bytes equal `s`.
    #[inline]
    pub fn eq_bytes(&self, s: &[u8]) -> bool {
        if !self.escaped {
            return self.raw == s;
        }
        let mut rest = s;
        match self.walk(|chunk| match rest.strip_prefix(chunk) {
            Some(r) => {
                rest = r;
                true
            }
            None => false,
        }) {
            Ok(true) => rest.is_empty(),
            _ => false,
        }
    }

    /// Length in bytes of the decoded (UTF-8) string.
    ///
    /// # Errors
    /// [`JsonErrorKind::InvalidEscape`] / [`JsonErrorKind::LoneSurrogate`] on bad escapes.
    pub fn unescaped_len(&self) -> Result<usize> {
        let mut n = 0usize;
        self.walk(|c| {
            n = n.saturating_add(c.len());
            true
        })?;
        Ok(n)
    }

    /// Decodes the string into `buf` and returns it as `&str`. Bytes of `buf` after the
    /// result may be overwritten too (up to seven).
    ///
    /// # Errors
    /// [`JsonErrorKind::BufferTooSmall`] if it does not fit (see [`JsonStr::unescaped_len`]),
    /// escape errors, or [`JsonErrorKind::InvalidUtf8`].
    pub fn unescape_into<'b>(&self, buf: &'b mut [u8]) -> Result<&'b str> {
        let pos = self.unescape_bytes_into(buf)?;
        let out = buf.get(..pos).unwrap_or(&[]);
        core::str::from_utf8(out)
            .map_err(|e| JsonError::new(JsonErrorKind::InvalidUtf8, e.valid_up_to()))
    }

    /// As [`JsonStr::unescape_into`] but without the final UTF-8 check; returns the number
    /// of bytes written to the front of `buf`.
    pub(crate) fn unescape_bytes_into(&self, buf: &mut [u8]) -> Result<usize> {
        let too_small = JsonError::new(JsonErrorKind::BufferTooSmall, 0);
        let raw = self.raw;
        let mut out = 0usize;
        let put = |buf: &mut [u8], bytes: &[u8], out: &mut usize| -> Result<()> {
            let end = out.checked_add(bytes.len()).ok_or(too_small)?;
            copy_small(buf.get_mut(*out..end).ok_or(too_small)?, bytes);
            *out = end;
            Ok(())
        };
        if !self.escaped {
            put(buf, raw, &mut out)?;
            return Ok(out);
        }
        let mut i = 0;
        loop {
            // 64-bit targets: while eight bytes are left on both sides, copy whole words up
            // to the next backslash (the bytes copied past it are overwritten), and decode
            // the common `\u00XX` escape (`properties` separators) on the spot.
            #[cfg_attr(not(target_pointer_width = "64"), allow(unused_mut))]
            let mut found = None;
            #[cfg(target_pointer_width = "64")]
            while let (Some(rest), Some(d)) = (
                raw.get(i..).filter(|r| !r.is_empty()),
                buf.get_mut(out..).and_then(<[u8]>::first_chunk_mut::<8>),
            ) {
                // The last bytes padded with zeros (never a backslash); only `rest.len()`
                // of them count.
                let w = match rest.first_chunk::<8>() {
                    Some(w) => *w,
                    None => {
                        let mut w = [0u8; 8];
                        copy_small(w.get_mut(..rest.len()).unwrap_or(&mut []), rest);
                        w
                    }
                };
                *d = w;
                // The lowest mark is certain.
                let m = eq_marks(u64::from_le_bytes(w), b'\\');
                if m == 0 {
                    let n = rest.len().min(8);
                    i += n;
                    out += n;
                    continue;
                }
                let k = (m.trailing_zeros() / 8) as usize;
                if let Some(&[_, b'u', b'0', b'0', h, l]) =
                    raw.get(i + k..).and_then(<[u8]>::first_chunk::<6>)
                {
                    let (h, l) = (HEX_VAL[usize::from(h)], HEX_VAL[usize::from(l)]);
                    if let (true, Some(c)) = (h < 8 && l < 16, d.get_mut(k)) {
                        *c = (h << 4) | l;
                        i += k + 6;
                        out += k + 1;
                        continue;
                    }
                }
                i += k;
                out += k;
                found = Some(i);
                break;
            }
            let at = match found {
                Some(at) => at,
                None => {
                    let at = find_quote_or_escape(raw, i, b'\\').unwrap_or(raw.len());
                    put(buf, raw.get(i..at).unwrap_or(&[]), &mut out)?;
                    at
                }
            };
            if at >= raw.len() {
                return Ok(out);
            }
            // The common case in headers: `\u00XX` for an ASCII control character
            // (`properties` separators), one output byte.
            if let Some(&[_, b'u', b'0', b'0', h, l]) =
                raw.get(at..).and_then(<[u8]>::first_chunk::<6>)
            {
                let (h, l) = (HEX_VAL[usize::from(h)], HEX_VAL[usize::from(l)]);
                if h < 8 && l < 16 {
                    put(buf, &[(h << 4) | l], &mut out)?;
                    i = at + 6;
                    continue;
                }
            }
            let (c, next) = decode_escape(raw, at)?;
            let mut tmp = [0u8; 4];
            put(buf, c.encode_utf8(&mut tmp).as_bytes(), &mut out)?;
            i = next;
        }
    }

    /// Iterates over the decoded characters. Malformed UTF-8 or escapes yield
    /// `char::REPLACEMENT_CHARACTER` (use [`JsonStr::unescape_into`] for strict decoding).
    pub fn chars(&self) -> JsonChars<'a> {
        JsonChars {
            raw: self.raw,
            pos: 0,
            escaped: self.escaped,
        }
    }

    /// Parses the decoded string as a decimal `i64` the way Java's `Long.parseLong` does
    /// (optional `+`/`-`, ASCII digits only, no whitespace).
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    pub fn parse_i64(&self) -> Option<i64> {
        if !self.escaped {
            return parse_i64_ascii(self.raw);
        }
        self.parse_i64_escaped()
    }

    /// [`JsonStr::parse_i64`] of a string with escapes (rare: kept out of line).
    #[inline(never)]
    fn parse_i64_escaped(&self) -> Option<i64> {
        let mut tmp = [0u8; 24];
        let s = self.unescape_into(&mut tmp).ok()?;
        parse_i64_ascii(s.as_bytes())
    }

    /// As [`JsonStr::parse_i64`], range-checked to `i32` (Java `Integer.parseInt`).
    #[inline]
    pub fn parse_i32(&self) -> Option<i32> {
        self.parse_i64().and_then(|v| i32::try_from(v).ok())
    }

    /// Java `Boolean.parseBoolean`: `true` only for a case-insensitive `"true"`.
    #[inline]
    pub fn parse_bool(&self) -> bool {
        let mut tmp = [0u8; 4];
        let s: &[u8] = if self.escaped {
            match self.unescape_into(&mut tmp) {
                Ok(s) => s.as_bytes(),
                Err(_) => return false,
            }
        } else {
            self.raw
        };
        s.eq_ignore_ascii_case(b"true")
    }
}

/// Iterator over the characters of a [`JsonStr`]; see [`JsonStr::chars`].
#[derive(Clone, Debug)]
pub struct JsonChars<'a> {
    raw: &'a [u8],
    pos: usize,
    escaped: bool,
}

impl Iterator for JsonChars<'_> {
    type Item = char;
    fn next(&mut self) -> Option<char> {
        let b = *self.raw.get(self.pos)?;
        if b == b'\\' && self.escaped {
            match decode_escape(self.raw, self.pos) {
                Ok((c, next)) => {
                    self.pos = next;
                    Some(c)
                }
                Err(_) => {
                    self.pos = self.pos.saturating_add(2);
                    Some(char::REPLACEMENT_CHARACTER)
                }
            }
        } else {
            let width = utf8_width(b).max(1);
            let end = self.pos.saturating_add(width);
            let c = self
                .raw
                .get(self.pos..end)
                .and_then(|s| core::str::from_utf8(s).ok())
                .and_then(|s| s.chars().next());
            match c {
                Some(c) => {
                    self.pos = end;
                    Some(c)
                }
                None => {
                    self.pos += 1;
                    Some(char::REPLACEMENT_CHARACTER)
                }
            }
        }
    }
}

const fn utf8_width(b: u8) -> usize {
    match b {
        0x00..=0x7F => 1,
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 0,
    }
}

/// Hex digit values; 0xFF for non-digits.
const HEX_VAL: [u8; 256] = {
    let mut t = [0xFFu8; 256];
    let mut i = 0u8;
    while i < 10 {
        t[(b'0' + i) as usize] = i;
        i += 1;
    }
    let mut i = 0u8;
    while i < 6 {
        t[(b'a' + i) as usize] = 10 + i;
        t[(b'A' + i) as usize] = 10 + i;
        i += 1;
    }
    t
};

pub(super) fn hex4(raw: &[u8], at: usize) -> Option<u32> {
    let [a, b, c, d]: [u8; 4] = raw.get(at..at.checked_add(4)?)?.try_into().ok()?;
    let v = |x: u8| HEX_VAL[usize::from(x)];
    let (a, b, c, d) = (v(a), v(b), v(c), v(d));
    if (a | b | c | d) & 0xF0 != 0 {
        return None;
    }
    Some((u32::from(a) << 12) | (u32::from(b) << 8) | (u32::from(c) << 4) | u32::from(d))
}

/// Decodes the escape starting at `raw[i] == b'\\'`; returns the char and the index after it.
fn decode_escape(raw: &[u8], i: usize) -> Result<(char, usize)> {
    let bad = JsonError::new(JsonErrorKind::InvalidEscape, i);
    let c = match raw.get(i + 1) {
        Some(b'"') => '"',
        Some(b'\\') => '\\',
        Some(b'/') => '/',
        Some(b'\'') => '\'',
        Some(b'b') => '\u{8}',
        Some(b'f') => '\u{c}',
        Some(b'n') => '\n',
        Some(b'r') => '\r',
        Some(b't') => '\t',
        Some(b'u') => {
            let hi = hex4(raw, i + 2).ok_or(bad)?;
            let lone = JsonError::new(JsonErrorKind::LoneSurrogate, i);
            if (0xD800..0xDC00).contains(&hi) {
                if raw.get(i + 6) != Some(&b'\\') || raw.get(i + 7) != Some(&b'u') {
                    return Err(lone);
                }
                let lo = hex4(raw, i + 8).ok_or(bad)?;
                if !(0xDC00..0xE000).contains(&lo) {
                    return Err(lone);
                }
                let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                return Ok((char::from_u32(c).ok_or(lone)?, i + 12));
            }
            return Ok((char::from_u32(hi).ok_or(lone)?, i + 6));
        }
        _ => return Err(bad),
    };
    Ok((c, i + 2))
}
