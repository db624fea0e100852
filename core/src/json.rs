//! An allocation-free, fastjson-tolerant JSON pull parser and a JSON string writer.
//!
//! RocketMQ's Java side speaks JSON through fastjson 1.x, which is more lenient than RFC 8259.
//! This module reads what fastjson writes and what its default parser features accept:
//!
//! - any key order; unknown keys can be skipped with [`Parser::skip_value`];
//! - **bare object keys**: integers (optionally negative), as in the legacy route encoding
//!   `{"brokerAddrs":{0:"10.0.0.5:10911"}}`, and identifiers (`{code:105}`);
//! - single-quoted strings (`'abc'`, where `\'` is a valid escape);
//! - a trailing comma before `}` or `]`.
//!
//! Nesting is tracked with a bit stack, never with recursion, and is limited to [`MAX_DEPTH`]
//! levels ([`JsonErrorKind::TooDeep`]), so hostile input cannot exhaust the stack.
//!
//! Strings are returned as [`JsonStr`]: the raw bytes between the quotes plus a flag telling
//! whether they contain escapes. Comparing ([`JsonStr::eq_str`]), measuring and unescaping
//! ([`JsonStr::unescape_into`]) work without allocating. UTF-8 is validated lazily, only when
//! a `&str` is asked for.
//!
//! # Example
//!
//! ```
//! use rmq_core::json::Parser;
//!
//! let mut p = Parser::new(br#"{"brokerAddrs":{0:"10.0.0.5:10911",1:"10.0.0.6:10911"},"x":[1,2]}"#);
//! p.expect_object_start()?;
//! let mut master = None;
//! while let Some(key) = p.next_key()? {
//!     if key.eq_str("brokerAddrs") {
//!         p.expect_object_start()?;
//!         while let Some(id) = p.next_key()? {
//!             let addr = p.string()?;
//!             if id.parse_i64() == Some(0) {
//!                 master = addr.as_str();
//!             }
//!         }
//!     } else {
//!         p.skip_value()?;
//!     }
//! }
//! p.finish()?;
//! assert_eq!(master, Some("10.0.0.5:10911"));
//! # Ok::<(), rmq_core::json::JsonError>(())
//! ```
//!
//! Writing: [`SliceWriter`] is a cursor over a caller buffer with a sticky overflow flag;
//! [`SliceWriter::put_json_str`] writes a quoted, escaped string exactly as fastjson does and
//! [`json_str_len`] gives its length in advance.

use core::fmt;

/// Maximum nesting depth of objects and arrays accepted by [`Parser`].
pub const MAX_DEPTH: usize = 32;

/// What went wrong while tokenizing or unescaping JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum JsonErrorKind {
    /// The input ended in the middle of a value.
    UnexpectedEnd,
    /// A byte that cannot start or continue the expected token.
    UnexpectedByte,
    /// A backslash escape that JSON does not define, or a bad `\u` hex sequence.
    InvalidEscape,
    /// A `\u` escape naming half of a surrogate pair without the other half.
    LoneSurrogate,
    /// A malformed number.
    InvalidNumber,
    /// Objects/arrays nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Non-whitespace after the top-level value.
    TrailingData,
    /// The string is not valid UTF-8.
    InvalidUtf8,
    /// The caller's output buffer is too small.
    BufferTooSmall,
    /// A well-formed token of the wrong kind for the call (e.g. a number where
    /// [`Parser::string`] expected a string).
    UnexpectedToken,
}

/// A JSON error: its kind and the byte offset in the input where it was detected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct JsonError {
    /// What went wrong.
    pub kind: JsonErrorKind,
    /// Byte offset in the parsed input (0 for errors not tied to a position).
    pub offset: usize,
}

impl JsonError {
    const fn new(kind: JsonErrorKind, offset: usize) -> Self {
        JsonError { kind, offset }
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            JsonErrorKind::UnexpectedEnd => "unexpected end of JSON input",
            JsonErrorKind::UnexpectedByte => "unexpected byte in JSON",
            JsonErrorKind::InvalidEscape => "invalid escape in JSON string",
            JsonErrorKind::LoneSurrogate => "lone UTF-16 surrogate in JSON string",
            JsonErrorKind::InvalidNumber => "invalid JSON number",
            JsonErrorKind::TooDeep => "JSON nested too deeply",
            JsonErrorKind::TrailingData => "trailing data after JSON value",
            JsonErrorKind::InvalidUtf8 => "JSON string is not valid UTF-8",
            JsonErrorKind::BufferTooSmall => "buffer too small for unescaped JSON string",
            JsonErrorKind::UnexpectedToken => "unexpected JSON token",
        };
        write!(f, "{what} at byte {}", self.offset)
    }
}

impl core::error::Error for JsonError {}

type Result<T> = core::result::Result<T, JsonError>;

/// A borrowed JSON string (or bare key): the raw bytes between the quotes.
///
/// Escapes are kept as written; the helpers below decode them on the fly. Escape syntax was
/// checked by the parser; surrogate pairing and UTF-8 are checked when decoding.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct JsonStr<'a> {
    raw: &'a [u8],
    escaped: bool,
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
    fn walk(&self, mut f: impl FnMut(&[u8]) -> bool) -> Result<bool> {
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

/// Position of the first `a` or `b` in `hay`, eight bytes at a time (SWAR).
#[inline]
fn find2(hay: &[u8], a: u8, b: u8) -> Option<usize> {
    let mut chunks = hay.chunks_exact(8);
    let mut base = 0;
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let x = u64::from_le_bytes(w);
        // The lowest mark is certain.
        let m = eq_marks(x, a) | eq_marks(x, b);
        if m != 0 {
            return Some(base + (m.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&x| x == a || x == b)
        .map(|i| base + i)
}

/// Index of the first `q` or backslash in `b` at or after `i` (SWAR, eight bytes at a time,
/// reading straight from the input rather than a sub-slice).
#[inline]
fn find_quote_or_escape(b: &[u8], mut i: usize, q: u8) -> Option<usize> {
    let mut rest = b.get(i..)?;
    while let Some(w) = rest.first_chunk::<8>() {
        let x = u64::from_le_bytes(*w);
        // The lowest mark is certain.
        let m = eq_marks(x, q) | eq_marks(x, b'\\');
        if m != 0 {
            return Some(i + (m.trailing_zeros() / 8) as usize);
        }
        i += 8;
        rest = rest.get(8..).unwrap_or(&[]);
    }
    rest.iter()
        .position(|&c| c == q || c == b'\\')
        .map(|k| i + k)
}

/// Scans a JSON string body starting at `b[start]` (just after the opening `"`): returns the
/// index of the closing quote and whether there were escapes. Escapes are validated exactly
/// like the parser does; `None` for a bad escape or a missing closing quote.
#[cfg_attr(target_pointer_width = "64", inline(always))]
fn scan_string(b: &[u8], start: usize) -> Option<(usize, bool)> {
    // One-character strings (the keys of SEND_MESSAGE_V2, small numbers) without a search.
    if let Some(&[c, b'"']) = b.get(start..).and_then(<[u8]>::first_chunk::<2>)
        && c != b'"'
        && c != b'\\'
    {
        return Some((start + 1, false));
    }
    let mut i = start;
    let mut escaped = false;
    loop {
        i = find_quote_or_escape(b, i, b'"')?;
        if *b.get(i)? == b'"' {
            return Some((i, escaped));
        }
        escaped = true;
        match b.get(i.checked_add(1)?)? {
            b'"' | b'\\' | b'/' | b'\'' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
            b'u' => {
                hex4(b, i + 2)?;
                i += 6;
            }
            _ => return None,
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

fn hex4(raw: &[u8], at: usize) -> Option<u32> {
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

/// A value yielded by [`FlatScan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlatValue<'a> {
    /// A string value.
    Str(JsonStr<'a>),
    /// A number or boolean literal's source text.
    Literal(&'a [u8]),
    /// `null`.
    Null,
}

/// Fast iteration over the text of an object that [`Parser`] has already accepted and whose
/// values are all scalars (strings, numbers, booleans, `null`); it yields the same keys and
/// values as the parser would, without re-validating. On any other input it may stop early or
/// yield meaningless pairs, but never panics or loops forever.
#[derive(Clone, Debug)]
#[cfg_attr(not(target_pointer_width = "64"), allow(dead_code))]
pub(crate) struct FlatScan<'a> {
    b: &'a [u8],
    pos: usize,
}

const fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0C | 0x08)
}

/// Byte classes for [`FlatScan`]: 1 = skipped between tokens (whitespace, `{`, `,`, `:`),
/// 2 = ends a bare token (whitespace, `,`, `:`, `}`, `]`).
const FLAT_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        let skip = is_ws(c) || c == b'{' || c == b',' || c == b':';
        let stop = is_ws(c) || c == b',' || c == b':' || c == b'}' || c == b']';
        t[i] = (skip as u8) | ((stop as u8) << 1);
        i += 1;
    }
    t
};

#[cfg_attr(not(target_pointer_width = "64"), allow(dead_code))]
impl<'a> FlatScan<'a> {
    /// A scanner positioned before the object's `{`.
    pub(crate) const fn new(b: &'a [u8]) -> Self {
        FlatScan { b, pos: 0 }
    }

    /// Skips whitespace and structural bytes between tokens (`{`, `,`, `:`).
    #[inline]
    fn skip(&mut self) {
        while let Some(&c) = self.b.get(self.pos) {
            if FLAT_CLASS[usize::from(c)] & 1 == 0 {
                break;
            }
            self.pos += 1;
        }
    }

    /// `self.pos` is at the opening quote `q`.
    #[inline]
    fn string(&mut self, q: u8) -> JsonStr<'a> {
        let start = self.pos.saturating_add(1);
        let mut i = start;
        let mut escaped = false;
        loop {
            match find_quote_or_escape(self.b, i, q) {
                Some(at) => {
                    i = at;
                    if self.b.get(i) == Some(&q) {
                        break;
                    }
                    // A validated escape: the byte after the backslash is never a quote or
                    // backslash that ends/starts anything (`\u` hex digits are neither).
                    escaped = true;
                    i = i.saturating_add(2);
                }
                None => {
                    i = self.b.len();
                    break;
                }
            }
        }
        self.pos = i.saturating_add(1);
        JsonStr {
            raw: self.b.get(start..i).unwrap_or(&[]),
            escaped,
        }
    }

    /// A bare key or literal: up to whitespace or a structural byte.
    #[inline]
    fn bare(&mut self) -> &'a [u8] {
        let start = self.pos;
        while let Some(&c) = self.b.get(self.pos) {
            if FLAT_CLASS[usize::from(c)] & 2 != 0 {
                break;
            }
            self.pos += 1;
        }
        self.b.get(start..self.pos).unwrap_or(&[])
    }

    /// The next `(key, value)` pair, or `None` at the closing `}`.
    #[inline]
    pub(crate) fn next_pair(&mut self) -> Option<(JsonStr<'a>, FlatValue<'a>)> {
        self.skip();
        let key = match *self.b.get(self.pos)? {
            b'}' => return None,
            q @ (b'"' | b'\'') => self.string(q),
            _ => {
                let k = self.bare();
                if k.is_empty() {
                    return None;
                }
                JsonStr::from_raw(k)
            }
        };
        self.skip();
        let value = match *self.b.get(self.pos)? {
            q @ (b'"' | b'\'') => FlatValue::Str(self.string(q)),
            b'n' => {
                self.bare();
                FlatValue::Null
            }
            _ => {
                let v = self.bare();
                if v.is_empty() {
                    return None;
                }
                FlatValue::Literal(v)
            }
        };
        Some((key, value))
    }
}

/// [`FlatScan`]'s pairs read with [`Parser`] (which validates again): the scanner of 32-bit
/// targets, where the parser is linked anyway and the fast scanner's 0.5 KiB of code is not
/// worth its speed (a gateway reads a few headers a second).
#[derive(Clone, Debug)]
#[cfg_attr(target_pointer_width = "64", allow(dead_code))]
pub(crate) struct ParsedScan<'a> {
    p: Parser<'a>,
    open: bool,
}

#[cfg_attr(target_pointer_width = "64", allow(dead_code))]
impl<'a> ParsedScan<'a> {
    /// A scanner positioned before the object's `{`.
    pub(crate) const fn new(b: &'a [u8]) -> Self {
        ParsedScan {
            p: Parser::new(b),
            open: false,
        }
    }

    /// The next `(key, value)` pair, or `None` at the closing `}` (or at anything that is
    /// not an object of scalars).
    pub(crate) fn next_pair(&mut self) -> Option<(JsonStr<'a>, FlatValue<'a>)> {
        if !self.open {
            self.p.expect_object_start().ok()?;
            self.open = true;
        }
        let key = self.p.next_key().ok()??;
        let value = match self.p.next_value().ok()? {
            Token::Str(s) => FlatValue::Str(s),
            Token::Number(n) => FlatValue::Literal(n.raw()),
            Token::Bool(true) => FlatValue::Literal(b"true"),
            Token::Bool(false) => FlatValue::Literal(b"false"),
            Token::Null => FlatValue::Null,
            _ => return None,
        };
        Some((key, value))
    }
}

/// The scanner of validated ext-field objects: [`FlatScan`] on 64-bit targets,
/// [`ParsedScan`] elsewhere (both yield the same pairs).
#[cfg(target_pointer_width = "64")]
pub(crate) type ExtScan<'a> = FlatScan<'a>;
/// The scanner of validated ext-field objects: [`FlatScan`] on 64-bit targets,
/// [`ParsedScan`] elsewhere (both yield the same pairs).
#[cfg(not(target_pointer_width = "64"))]
pub(crate) type ExtScan<'a> = ParsedScan<'a>;

/// A strict scanner for the compact JSON that Java (fastjson) writes: no whitespace,
/// double-quoted keys, values that are strings, integers, `true`/`false`/`null`, or (via
/// [`Compact::flat_object_visit`]) an object of such values.
///
/// Everything it accepts, [`Parser`] accepts with the same tokens; anything else (whitespace,
/// single quotes, bare keys, fractions, arrays, any error) makes a method return `None`, and
/// the caller falls back to [`Parser`], which then decides (and reports errors).
#[derive(Clone, Debug)]
pub(crate) struct Compact<'a> {
    b: &'a [u8],
    pos: usize,
    first: bool,
}

impl<'a> Compact<'a> {
    /// A scanner at the start of `b`.
    pub(crate) const fn new(b: &'a [u8]) -> Self {
        Compact {
            b,
            pos: 0,
            first: true,
        }
    }

    /// The next byte.
    pub(crate) fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    /// Consumes `{`.
    pub(crate) fn object_start(&mut self) -> Option<()> {
        if self.peek()? != b'{' {
            return None;
        }
        self.pos += 1;
        self.first = true;
        Some(())
    }

    /// Inside an object: `Some(Some(key))` (with its `:` consumed), `Some(None)` after the
    /// closing `}`, `None` outside the subset.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    pub(crate) fn next_key(&mut self) -> Option<Option<JsonStr<'a>>> {
        let mut c = self.peek()?;
        if !self.first {
            match c {
                b',' => {
                    self.pos += 1;
                    c = self.peek()?;
                }
                b'}' => {
                    self.pos += 1;
                    return Some(None);
                }
                _ => return None,
            }
        }
        self.first = false;
        match c {
            // Also after a trailing comma, which the parser accepts too.
            b'}' => {
                self.pos += 1;
                Some(None)
            }
            b'"' => {
                let k = self.string()?;
                if self.peek()? != b':' {
                    return None;
                }
                self.pos += 1;
                Some(Some(k))
            }
            _ => None,
        }
    }

    /// `self.pos` is at `"`; validates escapes exactly like the parser.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn string(&mut self) -> Option<JsonStr<'a>> {
        let start = self.pos.checked_add(1)?;
        let (end, escaped) = scan_string(self.b, start)?;
        self.pos = end + 1;
        Some(JsonStr {
            raw: self.b.get(start..end)?,
            escaped,
        })
    }

    /// Consumes exactly the bytes `lit` (a key with its punctuation, compared as a whole).
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    pub(crate) fn expect<const N: usize>(&mut self, lit: &[u8; N]) -> Option<()> {
        let w = self.b.get(self.pos..)?.first_chunk::<N>()?;
        if w != lit {
            return None;
        }
        self.pos += N;
        Some(())
    }

    fn literal(&mut self, word: &[u8], tok: Token<'a>) -> Option<Token<'a>> {
        let end = self.pos.checked_add(word.len())?;
        if self.b.get(self.pos..end)? != word {
            return None;
        }
        self.pos = end;
        Some(tok)
    }

    /// A scalar value: string, integer (no fraction or exponent), `true`, `false`, `null`.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    pub(crate) fn next_scalar(&mut self) -> Option<Token<'a>> {
        match self.peek()? {
            b'"' => Some(Token::Str(self.string()?)),
            b'-' | b'0'..=b'9' => {
                let start = self.pos;
                if self.peek() == Some(b'-') {
                    self.pos += 1;
                }
                let digits = self.pos;
                while matches!(self.peek(), Some(b'0'..=b'9')) {
                    self.pos += 1;
                }
                if self.pos == digits || matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
                    return None;
                }
                Some(Token::Number(JsonNumber {
                    raw: self.b.get(start..self.pos)?,
                }))
            }
            b't' => self.literal(b"true", Token::Bool(true)),
            b'f' => self.literal(b"false", Token::Bool(false)),
            b'n' => self.literal(b"null", Token::Null),
            _ => None,
        }
    }

    /// An object whose values are all scalars; returns its text from `{` to `}` and hands
    /// each pair to `f` as it goes (the same pairs [`FlatScan`] yields over that text).
    ///
    /// Accepts exactly what `object_start` + `next_key`/`next_scalar` accept (a trailing
    /// comma included), in one tight loop over positions: this is the hot path of every
    /// JSON header with a custom header.
    #[inline]
    pub(crate) fn flat_object_visit(
        &mut self,
        mut f: impl FnMut(JsonStr<'a>, FlatValue<'a>),
    ) -> Option<&'a [u8]> {
        let b = self.b;
        let start = self.pos;
        if *b.get(start)? != b'{' {
            return None;
        }
        let mut i = start + 1;
        if *b.get(i)? != b'}' {
            loop {
                if *b.get(i)? != b'"' {
                    return None;
                }
                let (k_end, k_esc) = scan_string(b, i + 1)?;
                let key = JsonStr {
                    raw: b.get(i + 1..k_end)?,
                    escaped: k_esc,
                };
                i = k_end + 1;
                if *b.get(i)? != b':' {
                    return None;
                }
                i += 1;
                let value = if *b.get(i)? == b'"' {
                    let (v_end, v_esc) = scan_string(b, i + 1)?;
                    let v = JsonStr {
                        raw: b.get(i + 1..v_end)?,
                        escaped: v_esc,
                    };
                    i = v_end + 1;
                    FlatValue::Str(v)
                } else {
                    self.pos = i;
                    let tok = self.next_scalar()?;
                    let raw = b.get(i..self.pos)?;
                    i = self.pos;
                    if tok == Token::Null {
                        FlatValue::Null
                    } else {
                        FlatValue::Literal(raw)
                    }
                };
                f(key, value);
                match *b.get(i)? {
                    b',' => {
                        i += 1;
                        // A trailing comma (the parser accepts it too).
                        if *b.get(i)? == b'}' {
                            break;
                        }
                    }
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        // `b[i]` is the closing `}`.
        self.pos = i + 1;
        self.first = false;
        b.get(start..self.pos)
    }

    /// Whether the whole input has been consumed.
    pub(crate) const fn at_end(&self) -> bool {
        self.pos == self.b.len()
    }
}

/// A JSON number token, kept as its source text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct JsonNumber<'a> {
    raw: &'a [u8],
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

/// One token of the pull parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Token<'a> {
    /// `{`
    ObjectStart,
    /// `}`
    ObjectEnd,
    /// `[`
    ArrayStart,
    /// `]`
    ArrayEnd,
    /// An object key, quoted or bare; the following `:` is consumed with it.
    Key(JsonStr<'a>),
    /// A string value.
    Str(JsonStr<'a>),
    /// A number value.
    Number(JsonNumber<'a>),
    /// `true` or `false`.
    Bool(bool),
    /// `null`.
    Null,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// A value must follow (top level, after a key).
    Value,
    /// After `[` or `,` in an array: a value or `]`.
    ValueOrEnd,
    /// After `{` or `,` in an object: a key or `}`.
    KeyOrEnd,
    /// After a value inside a container.
    CommaOrEnd,
    /// The top-level value is complete.
    Done,
}

/// An iterative, allocation-free JSON pull parser over a byte slice.
///
/// Use [`Parser::next_token`] for raw tokens, or the structured helpers
/// ([`Parser::expect_object_start`], [`Parser::next_key`], [`Parser::array_next`],
/// [`Parser::string`], [`Parser::skip_value`], ...). After an error the parser's state is
/// unspecified; stop using it.
#[derive(Clone, Debug)]
pub struct Parser<'a> {
    input: &'a [u8],
    pos: usize,
    /// Bit `i` set: level `i` is an object; clear: an array.
    stack: u32,
    depth: u8,
    state: State,
}

const _: () = assert!(MAX_DEPTH <= 32);

impl<'a> Parser<'a> {
    /// A parser positioned before the single top-level value of `input`.
    pub const fn new(input: &'a [u8]) -> Self {
        Parser {
            input,
            pos: 0,
            stack: 0,
            depth: 0,
            state: State::Value,
        }
    }

    /// Current byte offset.
    pub const fn position(&self) -> usize {
        self.pos
    }

    /// Current nesting depth (0 at top level).
    pub const fn depth(&self) -> usize {
        self.depth as usize
    }

    fn err(&self, kind: JsonErrorKind) -> JsonError {
        JsonError::new(kind, self.pos)
    }

    fn skip_ws(&mut self) {
        while let Some(b) = self.input.get(self.pos) {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0C | 0x08) {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn in_object(&self) -> bool {
        self.depth > 0 && (self.stack >> (self.depth - 1)) & 1 == 1
    }

    fn push(&mut self, object: bool) -> Result<()> {
        if self.depth as usize >= MAX_DEPTH {
            return Err(self.err(JsonErrorKind::TooDeep));
        }
        let bit = 1u32 << self.depth;
        if object {
            self.stack |= bit;
        } else {
            self.stack &= !bit;
        }
        self.depth += 1;
        self.state = if object {
            State::KeyOrEnd
        } else {
            State::ValueOrEnd
        };
        Ok(())
    }

    fn pop(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        self.after_value();
    }

    fn after_value(&mut self) {
        self.state = if self.depth == 0 {
            State::Done
        } else {
            State::CommaOrEnd
        };
    }

    /// The next token, or `None` once the top-level value is complete and only whitespace
    /// remains.
    ///
    /// # Errors
    /// Any syntax error, [`JsonErrorKind::TooDeep`], [`JsonErrorKind::TrailingData`].
    pub fn next_token(&mut self) -> Result<Option<Token<'a>>> {
        loop {
            self.skip_ws();
            match self.state {
                State::Done => {
                    return if self.pos >= self.input.len() {
                        Ok(None)
                    } else {
                        Err(self.err(JsonErrorKind::TrailingData))
                    };
                }
                State::CommaOrEnd => {
                    let obj = self.in_object();
                    match self.peek() {
                        Some(b',') => {
                            self.pos += 1;
                            self.state = if obj {
                                State::KeyOrEnd
                            } else {
                                State::ValueOrEnd
                            };
                        }
                        Some(b'}') if obj => {
                            self.pos += 1;
                            self.pop();
                            return Ok(Some(Token::ObjectEnd));
                        }
                        Some(b']') if !obj => {
                            self.pos += 1;
                            self.pop();
                            return Ok(Some(Token::ArrayEnd));
                        }
                        Some(_) => return Err(self.err(JsonErrorKind::UnexpectedByte)),
                        None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
                    }
                }
                State::KeyOrEnd => {
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        self.pop();
                        return Ok(Some(Token::ObjectEnd));
                    }
                    let key = self.key()?;
                    self.skip_ws();
                    match self.peek() {
                        Some(b':') => self.pos += 1,
                        Some(_) => return Err(self.err(JsonErrorKind::UnexpectedByte)),
                        None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
                    }
                    self.state = State::Value;
                    return Ok(Some(Token::Key(key)));
                }
                State::ValueOrEnd => {
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        self.pop();
                        return Ok(Some(Token::ArrayEnd));
                    }
                    return self.value().map(Some);
                }
                State::Value => return self.value().map(Some),
            }
        }
    }

    fn key(&mut self) -> Result<JsonStr<'a>> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => self.string_body(q),
            Some(b) if b == b'-' || b.is_ascii_digit() => {
                let start = self.pos;
                self.pos += 1;
                self.digits();
                let raw = self.input.get(start..self.pos).unwrap_or(&[]);
                if raw == b"-" {
                    return Err(self.err(JsonErrorKind::InvalidNumber));
                }
                Ok(JsonStr::from_raw(raw))
            }
            Some(b) if b.is_ascii_alphabetic() || b == b'_' || b == b'$' => {
                let start = self.pos;
                while let Some(b) = self.peek() {
                    if b.is_ascii_alphanumeric() || b == b'_' || b == b'$' {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                Ok(JsonStr::from_raw(
                    self.input.get(start..self.pos).unwrap_or(&[]),
                ))
            }
            Some(_) => Err(self.err(JsonErrorKind::UnexpectedByte)),
            None => Err(self.err(JsonErrorKind::UnexpectedEnd)),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// `self.pos` is at the opening quote `q`.
    fn string_body(&mut self, q: u8) -> Result<JsonStr<'a>> {
        self.pos += 1;
        let start = self.pos;
        let mut escaped = false;
        loop {
            let Some(at) = find_quote_or_escape(self.input, self.pos, q) else {
                self.pos = self.input.len();
                return Err(self.err(JsonErrorKind::UnexpectedEnd));
            };
            self.pos = at;
            if self.peek() == Some(q) {
                let raw = self.input.get(start..self.pos).unwrap_or(&[]);
                self.pos += 1;
                return Ok(JsonStr { raw, escaped });
            }
            // Backslash: validate the escape's syntax now so later decoding only has
            // surrogate pairing and UTF-8 left to check.
            escaped = true;
            match self.input.get(self.pos + 1) {
                Some(b'"' | b'\\' | b'/' | b'\'' | b'b' | b'f' | b'n' | b'r' | b't') => {
                    self.pos += 2;
                }
                Some(b'u') => {
                    if hex4(self.input, self.pos + 2).is_none() {
                        return Err(self.err(JsonErrorKind::InvalidEscape));
                    }
                    self.pos += 6;
                }
                Some(_) => return Err(self.err(JsonErrorKind::InvalidEscape)),
                None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
            }
        }
    }

    fn number(&mut self) -> Result<JsonNumber<'a>> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        if self.digits() == 0 {
            return Err(self.err(JsonErrorKind::InvalidNumber));
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.err(JsonErrorKind::InvalidNumber));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.err(JsonErrorKind::InvalidNumber));
            }
        }
        Ok(JsonNumber {
            raw: self.input.get(start..self.pos).unwrap_or(&[]),
        })
    }

    fn literal(&mut self, word: &[u8]) -> Result<()> {
        let end = self.pos.saturating_add(word.len());
        match self.input.get(self.pos..end) {
            Some(w) if w == word => {
                self.pos = end;
                Ok(())
            }
            Some(_) => Err(self.err(JsonErrorKind::UnexpectedByte)),
            None => Err(self.err(JsonErrorKind::UnexpectedEnd)),
        }
    }

    fn value(&mut self) -> Result<Token<'a>> {
        let tok = match self.peek() {
            Some(b'{') => {
                self.pos += 1;
                self.push(true)?;
                return Ok(Token::ObjectStart);
            }
            Some(b'[') => {
                self.pos += 1;
                self.push(false)?;
                return Ok(Token::ArrayStart);
            }
            Some(q @ (b'"' | b'\'')) => Token::Str(self.string_body(q)?),
            Some(b'-' | b'0'..=b'9') => Token::Number(self.number()?),
            Some(b't') => {
                self.literal(b"true")?;
                Token::Bool(true)
            }
            Some(b'f') => {
                self.literal(b"false")?;
                Token::Bool(false)
            }
            Some(b'n') => {
                self.literal(b"null")?;
                Token::Null
            }
            Some(_) => return Err(self.err(JsonErrorKind::UnexpectedByte)),
            None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
        };
        self.after_value();
        Ok(tok)
    }

    /// Reads the next value token (not a key, not an end token).
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] if the next token is a key or a container end.
    pub fn next_value(&mut self) -> Result<Token<'a>> {
        if self.state == State::Value {
            // Fast path (the usual case after a key): same as `next_token` in this state.
            self.skip_ws();
            return self.value();
        }
        match self.next_token()? {
            Some(Token::Key(_) | Token::ObjectEnd | Token::ArrayEnd) => {
                Err(self.err(JsonErrorKind::UnexpectedToken))
            }
            Some(t) => Ok(t),
            None => Err(self.err(JsonErrorKind::UnexpectedEnd)),
        }
    }

    /// Skips the next value, including a whole object or array, iteratively.
    ///
    /// # Errors
    /// Syntax errors inside the skipped value.
    pub fn skip_value(&mut self) -> Result<()> {
        let base = self.depth;
        match self.next_value()? {
            Token::ObjectStart | Token::ArrayStart => loop {
                match self.next_token()? {
                    Some(Token::ObjectEnd | Token::ArrayEnd) if self.depth == base => {
                        return Ok(());
                    }
                    Some(_) => {}
                    None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
                }
            },
            _ => Ok(()),
        }
    }

    /// Skips the next value like [`Parser::skip_value`] and returns its source text.
    ///
    /// # Errors
    /// As [`Parser::skip_value`].
    pub fn skip_value_span(&mut self) -> Result<&'a [u8]> {
        self.skip_ws();
        let start = self.pos;
        self.skip_value()?;
        Ok(self.input.get(start..self.pos).unwrap_or(&[]))
    }

    /// Expects `{`.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] if the next value is not an object.
    pub fn expect_object_start(&mut self) -> Result<()> {
        match self.next_value()? {
            Token::ObjectStart => Ok(()),
            _ => Err(self.err(JsonErrorKind::UnexpectedToken)),
        }
    }

    /// Expects `[`.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] if the next value is not an array.
    pub fn expect_array_start(&mut self) -> Result<()> {
        match self.next_value()? {
            Token::ArrayStart => Ok(()),
            _ => Err(self.err(JsonErrorKind::UnexpectedToken)),
        }
    }

    /// Inside an object: the next key, or `None` after consuming the closing `}`. After a key
    /// the caller must consume its value (read it or [`Parser::skip_value`]).
    ///
    /// # Errors
    /// Syntax errors; [`JsonErrorKind::UnexpectedToken`] if not positioned inside an object.
    pub fn next_key(&mut self) -> Result<Option<JsonStr<'a>>> {
        if !self.in_object() || !matches!(self.state, State::KeyOrEnd | State::CommaOrEnd) {
            return Err(self.err(JsonErrorKind::UnexpectedToken));
        }
        // Inlined `next_token` for these two states (same acceptance, same error offsets).
        self.skip_ws();
        if self.state == State::CommaOrEnd {
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.state = State::KeyOrEnd;
                    self.skip_ws();
                }
                Some(b'}') => {
                    self.pos += 1;
                    self.pop();
                    return Ok(None);
                }
                Some(_) => return Err(self.err(JsonErrorKind::UnexpectedByte)),
                None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
            }
        }
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.pop();
            return Ok(None);
        }
        let key = self.key()?;
        self.skip_ws();
        match self.peek() {
            Some(b':') => self.pos += 1,
            Some(_) => return Err(self.err(JsonErrorKind::UnexpectedByte)),
            None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
        }
        self.state = State::Value;
        Ok(Some(key))
    }

    /// Inside an array: `true` if another element follows (then read or skip it), `false`
    /// after consuming the closing `]`.
    ///
    /// # Errors
    /// Syntax errors; [`JsonErrorKind::UnexpectedToken`] if not positioned inside an array.
    pub fn array_next(&mut self) -> Result<bool> {
        if self.depth == 0 || self.in_object() {
            return Err(self.err(JsonErrorKind::UnexpectedToken));
        }
        self.skip_ws();
        if self.state == State::CommaOrEnd {
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.state = State::ValueOrEnd;
                    self.skip_ws();
                }
                Some(b']') => {}
                Some(_) => return Err(self.err(JsonErrorKind::UnexpectedByte)),
                None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
            }
        }
        match self.peek() {
            Some(b']') => {
                self.pos += 1;
                self.pop();
                Ok(false)
            }
            Some(_) if self.state == State::ValueOrEnd => {
                self.state = State::Value;
                Ok(true)
            }
            Some(_) => Err(self.err(JsonErrorKind::UnexpectedToken)),
            None => Err(self.err(JsonErrorKind::UnexpectedEnd)),
        }
    }

    /// Reads a string value.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] for any other value.
    pub fn string(&mut self) -> Result<JsonStr<'a>> {
        match self.next_value()? {
            Token::Str(s) => Ok(s),
            _ => Err(self.err(JsonErrorKind::UnexpectedToken)),
        }
    }

    /// Reads a string value or `null` (`None`).
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] for any other value.
    pub fn string_or_null(&mut self) -> Result<Option<JsonStr<'a>>> {
        match self.next_value()? {
            Token::Str(s) => Ok(Some(s)),
            Token::Null => Ok(None),
            _ => Err(self.err(JsonErrorKind::UnexpectedToken)),
        }
    }

    /// Reads a number value.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] for any other value.
    pub fn number_value(&mut self) -> Result<JsonNumber<'a>> {
        match self.next_value()? {
            Token::Number(n) => Ok(n),
            _ => Err(self.err(JsonErrorKind::UnexpectedToken)),
        }
    }

    /// Reads an integer: a JSON number, or (fastjson leniency) a string holding one.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] for other values; [`JsonErrorKind::InvalidNumber`]
    /// if it is not an integer in `i64` range.
    pub fn i64(&mut self) -> Result<i64> {
        let v = match self.next_value()? {
            Token::Number(n) => n.as_i64(),
            Token::Str(s) => s.parse_i64(),
            _ => return Err(self.err(JsonErrorKind::UnexpectedToken)),
        };
        v.ok_or(self.err(JsonErrorKind::InvalidNumber))
    }

    /// Reads a boolean: `true`/`false`, or (fastjson leniency) a string `"true"`/`"false"`.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] for other values.
    pub fn boolean(&mut self) -> Result<bool> {
        match self.next_value()? {
            Token::Bool(b) => Ok(b),
            Token::Str(s) => Ok(s.parse_bool()),
            _ => Err(self.err(JsonErrorKind::UnexpectedToken)),
        }
    }

    /// Checks that the top-level value is complete and only whitespace follows.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedEnd`] if a container is still open,
    /// [`JsonErrorKind::TrailingData`] if anything follows.
    pub fn finish(&mut self) -> Result<()> {
        if self.state != State::Done {
            return Err(self.err(JsonErrorKind::UnexpectedEnd));
        }
        match self.next_token()? {
            None => Ok(()),
            Some(_) => Err(self.err(JsonErrorKind::TrailingData)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Writing

/// A write cursor over a caller-owned buffer.
///
/// Writes past the end set a sticky overflow flag and are dropped; [`SliceWriter::finish`]
/// then reports [`BufferTooSmall`]. This keeps encoders branch-light and panic-free.
#[derive(Debug)]
pub struct SliceWriter<'b> {
    buf: &'b mut [u8],
    pos: usize,
    overflow: bool,
}

/// The output buffer is too small.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BufferTooSmall;

impl fmt::Display for BufferTooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("output buffer too small")
    }
}

impl core::error::Error for BufferTooSmall {}

impl<'b> SliceWriter<'b> {
    /// A writer starting at offset 0 of `buf`.
    pub fn new(buf: &'b mut [u8]) -> Self {
        SliceWriter {
            buf,
            pos: 0,
            overflow: false,
        }
    }

    /// Bytes written so far (meaningless after an overflow).
    pub const fn position(&self) -> usize {
        self.pos
    }

    /// Whether a write did not fit.
    pub const fn overflowed(&self) -> bool {
        self.overflow
    }

    /// The number of bytes written, or [`BufferTooSmall`].
    ///
    /// # Errors
    /// [`BufferTooSmall`] if any write did not fit.
    pub fn finish(&self) -> core::result::Result<usize, BufferTooSmall> {
        if self.overflow {
            Err(BufferTooSmall)
        } else {
            Ok(self.pos)
        }
    }

    /// Appends raw bytes.
    #[inline]
    pub fn put(&mut self, bytes: &[u8]) {
        self.put_with(bytes.len(), |d| copy_small(d, bytes));
    }

    /// Appends `open`, `bytes`, `close` (one bounds check).
    #[inline]
    pub(crate) fn put_wrapped(&mut self, open: u8, bytes: &[u8], close: u8) {
        self.put_with(bytes.len().saturating_add(2), |d| {
            if let Some((first, rest)) = d.split_first_mut() {
                *first = open;
                if let Some((last, mid)) = rest.split_last_mut() {
                    *last = close;
                    copy_small(mid, bytes);
                }
            }
        });
    }

    /// Appends one byte.
    #[inline]
    pub fn put_u8(&mut self, b: u8) {
        self.put_array(&[b]);
    }

    /// Appends a fixed-size array (one bounds check, no `memcpy` call).
    #[inline]
    fn put_array<const N: usize>(&mut self, bytes: &[u8; N]) {
        self.put_with(N, |d| {
            if let Some(d) = d.first_chunk_mut::<N>() {
                *d = *bytes;
            }
        });
    }

    /// Appends a big-endian `i16`.
    #[inline]
    pub fn put_i16_be(&mut self, v: i16) {
        self.put_array(&v.to_be_bytes());
    }

    /// Appends a big-endian `i32`.
    #[inline]
    pub fn put_i32_be(&mut self, v: i32) {
        self.put_array(&v.to_be_bytes());
    }

    /// Appends `v` in decimal.
    #[inline]
    pub fn put_i64_dec(&mut self, v: i64) {
        if let Some(d) = small_dec(v) {
            self.put(d);
            return;
        }
        let mut tmp = [0u8; 20];
        let n = fmt_i64(v, &mut tmp);
        self.put(tmp.get(tmp.len() - n..).unwrap_or(&[]));
    }

    /// Appends `,"key":"value"` (the comma if `comma`) in one piece if neither needs
    /// escaping (`value_plain`: the caller knows the value is plain, e.g. digits); returns
    /// `false`, writing nothing, if one does.
    #[inline]
    pub(crate) fn put_plain_json_entry(
        &mut self,
        comma: bool,
        key: &[u8],
        value: &[u8],
        value_plain: bool,
    ) -> bool {
        if plain_run(key) != key.len() || (!value_plain && plain_run(value) != value.len()) {
            return false;
        }
        let lead = usize::from(comma);
        self.put_with(lead + key.len() + value.len() + 5, |d| {
            let d = match (comma, d.split_first_mut()) {
                (true, Some((c, rest))) => {
                    *c = b',';
                    rest
                }
                (_, _) => d,
            };
            let Some((q, d)) = d.split_first_mut() else {
                return;
            };
            *q = b'"';
            let Some((k, d)) = d.split_at_mut_checked(key.len()) else {
                return;
            };
            copy_small(k, key);
            let Some((sep, d)) = d.split_first_chunk_mut::<3>() else {
                return;
            };
            *sep = *b"\":\"";
            let Some((v, close)) = d.split_at_mut_checked(value.len()) else {
                return;
            };
            copy_small(v, value);
            if let Some(c) = close.first_mut() {
                *c = b'"';
            }
        });
        true
    }

    /// Appends one ROCKETMQ ext-map entry: key length (`i16`), key, value length (`i32`),
    /// value, with one bounds check. Returns `false` (writing nothing) if a length does not
    /// fit its field.
    #[inline]
    pub(crate) fn put_binary_entry(&mut self, key: &[u8], value: &[u8]) -> bool {
        let (Ok(kl), Ok(vl)) = (i16::try_from(key.len()), i32::try_from(value.len())) else {
            return false;
        };
        self.put_with(6 + key.len() + value.len(), |d| {
            let Some((kd, d)) = d.split_first_chunk_mut::<2>() else {
                return;
            };
            *kd = kl.to_be_bytes();
            let Some((k, d)) = d.split_at_mut_checked(key.len()) else {
                return;
            };
            copy_small(k, key);
            let Some((vd, v)) = d.split_first_chunk_mut::<4>() else {
                return;
            };
            *vd = vl.to_be_bytes();
            copy_small(v, value);
        });
        true
    }

    /// Reserves four bytes for a big-endian `i32` written later with
    /// [`SliceWriter::patch_i32_be`] (a length that is only known after what follows it);
    /// returns their offset.
    #[inline]
    pub(crate) fn reserve_i32(&mut self) -> usize {
        let at = self.pos;
        self.put(&[0; 4]);
        at
    }

    /// Overwrites the four bytes at `at` (from [`SliceWriter::reserve_i32`]) with `v`; does
    /// nothing after an overflow.
    #[inline]
    pub(crate) fn patch_i32_be(&mut self, at: usize, v: i32) {
        if self.overflow {
            return;
        }
        if let Some(dst) = at.checked_add(4).and_then(|end| self.buf.get_mut(at..end)) {
            dst.copy_from_slice(&v.to_be_bytes());
        }
    }

    /// Appends `s` as a quoted JSON string, escaped exactly as fastjson 1.2.x writes it
    /// without BrowserCompatible (see [`json_str_len`]).
    #[inline]
    pub fn put_json_str(&mut self, s: &str) {
        let bytes = s.as_bytes();
        let plain = plain_run(bytes);
        if plain == bytes.len() {
            // The usual case, nothing to escape: quote, copy, quote.
            self.put_wrapped(b'"', bytes, b'"');
            return;
        }
        self.put_json_str_escaped(bytes, plain);
    }

    /// [`SliceWriter::put_json_str`] for a string with something to escape at or after
    /// `bytes[i]` (everything before it is plain).
    ///
    /// While there is room (64-bit targets), eight input bytes at a time: the word is stored
    /// as it is, then for each byte that may need escaping ([`escape_marks`]; a false mark
    /// above a true one only rewrites the byte itself) its escape from [`ESC_WORD`] is stored
    /// over the copy, followed by the rest of the word again. Up to 72 bytes of the buffer
    /// past the string's end may be written too; what follows overwrites them. Near the end
    /// of the buffer, run by run.
    fn put_json_str_escaped(&mut self, bytes: &[u8], i: usize) {
        self.put_u8(b'"');
        self.put(bytes.get(..i).unwrap_or(&[]));
        if self.overflow {
            return;
        }
        let mut p = i;
        #[cfg(target_pointer_width = "64")]
        {
            let n = bytes.len();
            // Output position of input byte `p`.
            let mut o = self.pos;
            'words: while p < n {
                // Eight input bytes write at most 8 escapes of 6 bytes: 48 bytes plus the
                // 8-byte stores, all inside this window.
                let Some(out) = self
                    .buf
                    .get_mut(o..)
                    .and_then(<[u8]>::first_chunk_mut::<72>)
                else {
                    break;
                };
                // The next (up to) eight input bytes; lanes past the end are masked off.
                let (x, count) = match bytes.get(p..).and_then(<[u8]>::first_chunk::<8>) {
                    Some(w) => (u64::from_le_bytes(*w), 8),
                    None => {
                        let rest = bytes.get(p..).unwrap_or(&[]);
                        let mut w = [0u8; 8];
                        copy_small(w.get_mut(..rest.len()).unwrap_or(&mut []), rest);
                        (u64::from_le_bytes(w), rest.len())
                    }
                };
                let mut m = escape_marks(x);
                if count < 8 {
                    m &= (1u64 << (count * 8)) - 1;
                }
                store8(out, 0, x);
                // Output bytes added by the escapes so far in this word.
                let mut extra = 0usize;
                while m != 0 {
                    let k = (m.trailing_zeros() / 8) as usize;
                    m &= m - 1;
                    let b = (x >> (k * 8)) as u8;
                    let e = ESC_WORD[usize::from(b)];
                    let len = (e >> 56) as usize;
                    if len == 0 {
                        // 0xC2 or 0xE2: the sequence decides; the next word starts after it.
                        let (consumed, esc) = classify(bytes, p + k, b);
                        let (e, len) = escape8(&esc).unwrap_or((u64::from(b), 1));
                        store8(out, k + extra, e);
                        o += k + extra + len;
                        p += k + if len == 1 { 1 } else { consumed };
                        continue 'words;
                    }
                    // The escape, then the rest of the word behind it.
                    store8(out, k + extra, e);
                    extra += len - 1;
                    store8(out, k + 1 + extra, x >> (k * 8) >> 8);
                }
                p += count;
                o += count + extra;
            }
            self.pos = o;
        }
        // The rest, run by run.
        while let Some(rest) = bytes.get(p..).filter(|r| !r.is_empty()) {
            let run = plain_run(rest);
            self.put(rest.get(..run).unwrap_or(&[]));
            p += run;
            let Some(&b) = bytes.get(p) else { break };
            let (consumed, esc) = classify(bytes, p, b);
            match esc {
                Esc::None => self.put(bytes.get(p..p + consumed).unwrap_or(&[])),
                Esc::Short(c) => self.put_array(&[b'\\', c]),
                Esc::Unicode(cp) => self.put_array(&unicode_escape(cp)),
            }
            p += consumed;
        }
        self.put_u8(b'"');
    }

    /// Appends an object key: `,` (if `comma`), the key as a JSON string, and `:`.
    #[inline]
    pub(crate) fn put_json_key(&mut self, key: &str, comma: bool) {
        let kb = key.as_bytes();
        if plain_run(kb) != kb.len() {
            if comma {
                self.put_u8(b',');
            }
            self.put_json_str(key);
            self.put_u8(b':');
            return;
        }
        // `,"key":` in one bounds check.
        let lead = usize::from(comma);
        self.put_with(kb.len() + 3 + lead, |d| {
            let Some((d, tail)) = d.split_last_chunk_mut::<2>() else {
                return;
            };
            *tail = *b"\":";
            let d = match (comma, d.split_first_mut()) {
                (true, Some((c, rest))) => {
                    *c = b',';
                    rest
                }
                (_, _) => d,
            };
            if let Some((q, k)) = d.split_first_mut() {
                *q = b'"';
                copy_small(k, kb);
            }
        });
    }

    /// Appends `v` in decimal inside double quotes (a JSON string holding a number).
    #[inline]
    pub(crate) fn put_quoted_i64(&mut self, v: i64) {
        let mut tmp = [0u8; 22];
        let Some((digits, close)) = tmp.split_first_chunk_mut::<21>() else {
            return;
        };
        let Some(d20) = digits.last_chunk_mut::<20>() else {
            return;
        };
        let n = fmt_i64(v, d20);
        close[0] = b'"';
        // The digits end at index 20; the opening quote goes right before them.
        let start = 20 - n;
        if let Some(q) = tmp.get_mut(start) {
            *q = b'"';
        }
        self.put(tmp.get(start..).unwrap_or(&[]));
    }

    /// Appends exactly `n` bytes written by `f` (one bounds check for the whole piece).
    #[inline]
    fn put_with(&mut self, n: usize, f: impl FnOnce(&mut [u8])) {
        if self.overflow {
            return;
        }
        match self
            .pos
            .checked_add(n)
            .and_then(|end| self.buf.get_mut(self.pos..end))
        {
            Some(dst) => {
                f(dst);
                self.pos += n;
            }
            None => self.overflow = true,
        }
    }
}

/// An escape as an eight-byte word (little-endian) and its length (`None` for a byte
/// written raw).
#[cfg(target_pointer_width = "64")]
#[inline]
fn escape8(esc: &Esc) -> Option<(u64, usize)> {
    match *esc {
        Esc::None => None,
        Esc::Short(c) => Some((u64::from_le_bytes([b'\\', c, 0, 0, 0, 0, 0, 0]), 2)),
        Esc::Unicode(cp) => {
            let [a, b, c, d, e, f] = unicode_escape(cp);
            Some((u64::from_le_bytes([a, b, c, d, e, f, 0, 0]), 6))
        }
    }
}

/// Every byte as written inside a JSON string (fastjson's escaping, see [`classify`]): the
/// bytes of its escape, or the byte itself, in the low bytes (little-endian) and the length
/// in the top byte; 0 for the lead bytes 0xC2 and 0xE2, whose sequence decides.
#[cfg(target_pointer_width = "64")]
const ESC_WORD: [u64; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            0x09 => b't',
            0x0A => b'n',
            0x0C => b'f',
            0x0D => b'r',
            _ => 0,
        };
        let w = if short != 0 {
            [b'\\', short, 0, 0, 0, 0, 0, 2]
        } else if b < 0x20 || b == 0x7F {
            [b'\\', b'u', b'0', b'0', HEX[i >> 4], HEX[i & 0xF], 0, 6]
        } else if b == 0xC2 || b == 0xE2 {
            [0; 8]
        } else {
            [b, 0, 0, 0, 0, 0, 0, 1]
        };
        t[i] = u64::from_le_bytes(w);
        i += 1;
    }
    t
};

/// Stores `x` (little-endian) at `out[at..at + 8]`; `at` is below 64 (the mask only lets
/// the compiler see that).
#[cfg(target_pointer_width = "64")]
#[inline(always)]
fn store8(out: &mut [u8; 72], at: usize, x: u64) {
    if let Some(d) = out
        .get_mut(at & 63..)
        .and_then(<[u8]>::first_chunk_mut::<8>)
    {
        *d = x.to_le_bytes();
    }
}

/// `\\uXXXX` (lowercase hex) for `cp`.
#[inline]
fn unicode_escape(cp: u16) -> [u8; 6] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let h = |shift: u32| HEX[usize::from((cp >> shift) & 0xF)];
    [b'\\', b'u', h(12), h(8), h(4), h(0)]
}

/// `dst.copy_from_slice(src)` for `dst.len() == src.len()`, with short copies done as one
/// or two overlapping fixed-size moves instead of a `memcpy` call (header fields are mostly
/// a few bytes long).
#[inline]
fn copy_small(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n != dst.len() {
        return;
    }
    // Small targets (firmware) prefer the smaller code of a plain `memcpy` call.
    if cfg!(not(target_pointer_width = "64")) {
        dst.copy_from_slice(src);
        return;
    }
    if (8..=16).contains(&n) {
        if let (Some(d), Some(s)) = (dst.first_chunk_mut::<8>(), src.first_chunk::<8>()) {
            *d = *s;
        }
        if let (Some(d), Some(s)) = (dst.last_chunk_mut::<8>(), src.last_chunk::<8>()) {
            *d = *s;
        }
    } else if (4..8).contains(&n) {
        if let (Some(d), Some(s)) = (dst.first_chunk_mut::<4>(), src.first_chunk::<4>()) {
            *d = *s;
        }
        if let (Some(d), Some(s)) = (dst.last_chunk_mut::<4>(), src.last_chunk::<4>()) {
            *d = *s;
        }
    } else if n < 4 {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    } else {
        dst.copy_from_slice(src);
    }
}

/// Bytes that may start an escaped sequence (see [`classify`]).
const MAYBE_ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t[0x7F] = true;
    t[0xC2] = true;
    t[0xE2] = true;
    t
};

/// Marks (high bit of each byte lane) the bytes of `x` that may need escaping: below 0x20,
/// `"`, `\\`, 0x7F, and everything from 0x80 on (non-ASCII is checked byte by byte). Every
/// such byte is marked; only the lowest mark is certain (borrows propagate upward and may
/// mark a plain byte above a marked one), so callers look at the marked bytes.
#[inline]
const fn escape_marks(x: u64) -> u64 {
    (x.wrapping_sub(LO * 0x20) & !x & HI)
        | eq_marks(x, b'"')
        | eq_marks(x, b'\\')
        | eq_marks(x, 0x7F)
        | (x & HI)
}

/// One in every byte lane of a word (SWAR).
const LO: u64 = 0x0101_0101_0101_0101;
/// The high bit of every byte lane.
const HI: u64 = 0x8080_8080_8080_8080;

/// Marks (high bit of the lane) the bytes of `x` equal to `c`. Every such byte is marked;
/// only the lowest mark is certain (a borrow can mark the lane above a true one).
#[inline(always)]
const fn eq_marks(x: u64, c: u8) -> u64 {
    let y = x ^ (LO * c as u64);
    y.wrapping_sub(LO) & !y & HI
}

/// Length of the leading run of bytes that are certainly written unchanged. Short strings
/// go byte by byte through [`MAYBE_ESCAPE`]; longer ones eight bytes at a time (SWAR), the
/// tail as one overlapping chunk. A marked non-ASCII byte is looked up in the table (most are
/// written raw) and scanning goes on after it.
#[inline]
fn plain_run(bytes: &[u8]) -> usize {
    let n = bytes.len();
    if n < 8 {
        return bytes
            .iter()
            .position(|&b| MAYBE_ESCAPE[usize::from(b)])
            .unwrap_or(n);
    }
    let mut i = 0;
    loop {
        let (base, w) = match bytes.get(i..).and_then(<[u8]>::first_chunk::<8>) {
            Some(w) => (i, w),
            None if i >= n => return n,
            None => match bytes.last_chunk::<8>() {
                Some(w) => (n - 8, w),
                None => return n,
            },
        };
        // Lanes below `i` were already accepted (plain non-ASCII bytes are marked too, and
        // never start a borrow, so the lowest mark left is exact).
        let skip = (i - base) * 8;
        let m = escape_marks(u64::from_le_bytes(*w)) & (u64::MAX << skip);
        if m == 0 {
            if base + 8 >= n {
                return n;
            }
            i = base + 8;
            continue;
        }
        i = base + (m.trailing_zeros() / 8) as usize;
        match bytes.get(i) {
            Some(&b) if b >= 0x80 && !MAYBE_ESCAPE[usize::from(b)] => i += 1,
            _ => return i.min(n),
        }
    }
}

enum Esc {
    None,
    Short(u8),
    Unicode(u16),
}

/// How the UTF-8 sequence starting at `bytes[i] == b` is written; returns bytes consumed.
///
/// fastjson 1.2.x (SerializeWriter, no BrowserCompatible): `"` and `\` and `\b \t \n \f \r`
/// get short escapes; other C0 controls, U+007F..=U+00A0 and U+2028 become `\uXXXX` with
/// lowercase hex; everything else is raw UTF-8 (`/` is not escaped).
#[inline]
fn classify(bytes: &[u8], i: usize, b: u8) -> (usize, Esc) {
    match b {
        b'"' => (1, Esc::Short(b'"')),
        b'\\' => (1, Esc::Short(b'\\')),
        0x08 => (1, Esc::Short(b'b')),
        0x09 => (1, Esc::Short(b't')),
        0x0A => (1, Esc::Short(b'n')),
        0x0C => (1, Esc::Short(b'f')),
        0x0D => (1, Esc::Short(b'r')),
        0x00..=0x1F | 0x7F => (1, Esc::Unicode(u16::from(b))),
        0xC2 => match bytes.get(i + 1) {
            Some(&c @ 0x80..=0xA0) => (2, Esc::Unicode(u16::from(c))),
            _ => (1, Esc::None),
        },
        0xE2 if bytes.get(i + 1) == Some(&0x80) && bytes.get(i + 2) == Some(&0xA8) => {
            (3, Esc::Unicode(0x2028))
        }
        _ => (1, Esc::None),
    }
}

/// Exact length of `s` written by [`SliceWriter::put_json_str`], quotes included.
pub fn json_str_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    let mut n = 2usize;
    let mut i = 0;
    while i < bytes.len() {
        let run = plain_run(bytes.get(i..).unwrap_or(&[]));
        n += run;
        i += run;
        let Some(&b) = bytes.get(i) else { break };
        let (consumed, esc) = classify(bytes, i, b);
        n += match esc {
            Esc::None => consumed,
            Esc::Short(_) => 2,
            Esc::Unicode(_) => 6,
        };
        i += consumed;
    }
    n
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

#[cfg(test)]
mod test {
    use super::*;
    use std::string::String;
    use std::vec::Vec;

    fn tokens(s: &str) -> core::result::Result<Vec<Token<'_>>, JsonError> {
        let mut p = Parser::new(s.as_bytes());
        let mut v = Vec::new();
        while let Some(t) = p.next_token()? {
            v.push(t);
        }
        Ok(v)
    }

    #[test]
    fn tokenizes_nested() {
        let t = tokens(r#" {"a":[1,-2.5e3,true,false,null,"x"],"b":{}} "#).unwrap();
        assert_eq!(t.len(), 14);
        assert_eq!(t[0], Token::ObjectStart);
        assert!(matches!(t[1], Token::Key(k) if k.eq_str("a")));
        assert!(matches!(t[4], Token::Number(n) if n.raw() == b"-2.5e3"));
        assert_eq!(t[13], Token::ObjectEnd);
    }

    #[test]
    fn bare_and_single_quoted_keys() {
        let mut p = Parser::new(b"{0:'a',-1:\"b\",name:'it\\'s',}");
        p.expect_object_start().unwrap();
        let k = p.next_key().unwrap().unwrap();
        assert_eq!(k.parse_i64(), Some(0));
        assert!(p.string().unwrap().eq_str("a"));
        let k = p.next_key().unwrap().unwrap();
        assert_eq!(k.parse_i64(), Some(-1));
        assert!(p.string().unwrap().eq_str("b"));
        let k = p.next_key().unwrap().unwrap();
        assert!(k.eq_str("name"));
        assert!(p.string().unwrap().eq_str("it's"));
        assert_eq!(p.next_key().unwrap(), None);
        p.finish().unwrap();
    }

    #[test]
    fn errors() {
        for bad in [
            "",
            "{",
            "[1,",
            "{\"a\"}",
            "{\"a\":}",
            "[1 2]",
            "\"\\x\"",
            "\"\\u12\"",
            "-",
            "1.",
            "1e",
            "tru",
            "{}x",
            "[}",
            "{]",
            "{-:1}",
        ] {
            assert!(tokens(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn depth_limit() {
        let ok: String = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        tokens(&ok).unwrap();
        let bad: String = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(tokens(&bad).unwrap_err().kind, JsonErrorKind::TooDeep);
        let huge = "[".repeat(100_000);
        assert_eq!(tokens(&huge).unwrap_err().kind, JsonErrorKind::TooDeep);
    }

    #[test]
    fn unescape_and_compare() {
        let mut p = Parser::new(br#""a\u0001b\n\"\\\/\ud83d\ude00\u00e9""#);
        let s = p.string().unwrap();
        assert!(s.has_escapes());
        assert_eq!(s.as_str(), None);
        let want = "a\u{1}b\n\"\\/\u{1F600}\u{e9}";
        assert!(s.eq_str(want));
        assert!(!s.eq_str("a\u{1}b"));
        assert!(!s.eq_str(&(String::from(want) + "x")));
        assert_eq!(s.unescaped_len().unwrap(), want.len());
        let mut buf = [0u8; 64];
        assert_eq!(s.unescape_into(&mut buf).unwrap(), want);
        let mut small = [0u8; 5];
        assert_eq!(
            s.unescape_into(&mut small).unwrap_err().kind,
            JsonErrorKind::BufferTooSmall
        );
        assert_eq!(s.chars().collect::<String>(), want);
        let lone = Parser::new(br#""\ud83d x""#).string().unwrap();
        assert_eq!(
            lone.unescape_into(&mut buf).unwrap_err().kind,
            JsonErrorKind::LoneSurrogate
        );
        assert!(!lone.eq_str("\u{fffd} x"));
    }

    #[test]
    fn find2_matches_naive() {
        let hay = b"abcdefgh\\ijklmnopq\"rstuvwxyz0123456789\x80\xff";
        for start in 0..hay.len() {
            for (a, b) in [(b'"', b'\\'), (b'z', b'q'), (0x80, 0xff), (b'!', b'#')] {
                let h = &hay[start..];
                let naive = h.iter().position(|&x| x == a || x == b);
                assert_eq!(find2(h, a, b), naive, "{start} {a} {b}");
            }
        }
    }

    #[test]
    fn ints() {
        for v in -3i64..=130 {
            let mut tmp = [0u8; 20];
            let n = fmt_i64(v, &mut tmp);
            let want = &tmp[20 - n..];
            match small_dec(v) {
                Some(d) => assert_eq!(d, want, "{v}"),
                None => assert!(!(0..100).contains(&v), "{v}"),
            }
        }
        assert_eq!(parse_i64_ascii(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64_ascii(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64_ascii(b"9223372036854775808"), None);
        assert_eq!(parse_i64_ascii(b"+7"), Some(7));
        assert_eq!(parse_i64_ascii(b"7 "), None);
        assert_eq!(parse_i64_ascii(b""), None);
        assert_eq!(JsonStr::from_raw(b"2147483648").parse_i32(), None);
        assert!(JsonStr::from_raw(b"TrUe").parse_bool());
        assert!(!JsonStr::from_raw(b"yes").parse_bool());
        for v in [0i64, 9, 10, -1, -10, i64::MIN, i64::MAX, 1_700_000_000_000] {
            let mut buf = [0u8; 32];
            let mut w = SliceWriter::new(&mut buf);
            w.put_i64_dec(v);
            let n = w.finish().unwrap();
            assert_eq!(&buf[..n], std::format!("{v}").as_bytes());
            assert_eq!(i64_dec_len(v), n);
        }
    }

    #[test]
    fn writer_escapes_like_fastjson() {
        let cases: &[(&str, &str)] = &[
            ("abc", r#""abc""#),
            ("a\"b\\c/", r#""a\"b\\c/""#),
            ("\u{1}\u{2}\u{b}\u{1f}", r#""\u0001\u0002\u000b\u001f""#),
            ("\u{8}\t\n\u{c}\r", r#""\b\t\n\f\r""#),
            (
                "\u{7f}\u{80}\u{a0}\u{a1}é",
                "\"\\u007f\\u0080\\u00a0\u{a1}é\"",
            ),
            ("x\u{2028}y\u{2029}", "\"x\\u2028y\u{2029}\""),
            ("中文🙂", "\"中文🙂\""),
        ];
        for (input, want) in cases {
            let mut buf = [0u8; 64];
            let mut w = SliceWriter::new(&mut buf);
            w.put_json_str(input);
            let n = w.finish().unwrap();
            assert_eq!(core::str::from_utf8(&buf[..n]).unwrap(), *want);
            assert_eq!(json_str_len(input), n);
            // And it parses back.
            let s = Parser::new(&buf[..n]).string().unwrap();
            assert!(s.eq_str(input));
            for small in 0..n {
                let mut b = std::vec![0u8; small];
                let mut w = SliceWriter::new(&mut b);
                w.put_json_str(input);
                assert_eq!(w.finish(), Err(BufferTooSmall));
            }
        }
    }

    #[test]
    fn array_helpers_and_skip() {
        let mut p = Parser::new(br#"{"skip":{"x":[1,{"y":[]}]},"arr":[ "a" , "b" ,],"n":5}"#);
        p.expect_object_start().unwrap();
        let mut seen = Vec::new();
        while let Some(k) = p.next_key().unwrap() {
            if k.eq_str("arr") {
                p.expect_array_start().unwrap();
                while p.array_next().unwrap() {
                    seen.push(p.string().unwrap().as_str().unwrap());
                }
            } else if k.eq_str("n") {
                assert_eq!(p.i64().unwrap(), 5);
            } else {
                let span = p.skip_value_span().unwrap();
                assert_eq!(span, br#"{"x":[1,{"y":[]}]}"#);
            }
        }
        p.finish().unwrap();
        assert_eq!(seen, ["a", "b"]);
        let mut p = Parser::new(b"[]");
        p.expect_array_start().unwrap();
        assert!(!p.array_next().unwrap());
        p.finish().unwrap();
    }

    proptest::proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let mut p = Parser::new(&data);
            let mut buf = [0u8; 64];
            for _ in 0..512 {
                match p.next_token() {
                    Ok(Some(Token::Str(s) | Token::Key(s))) => {
                        let _ = s.unescape_into(&mut buf);
                        let _ = s.chars().count();
                        let _ = s.eq_str("abc");
                        let _ = s.parse_i64();
                    }
                    Ok(Some(_)) => {}
                    _ => break,
                }
            }
            let mut p = Parser::new(&data);
            let _ = p.skip_value();
        }

        /// The SWAR writer against a char-by-char model of fastjson's escaping, on strings
        /// dense in the characters that matter (controls, quotes, U+007F..U+00A1, U+2028).
        #[test]
        fn writer_matches_char_model(
            s in "[\\x00-\\x7f\u{80}-\u{a1}\u{2028}\u{2029}é中🙂]{0,40}|[a-z\\x01\\x02\u{80}-\u{a1}\u{2028}é]{0,120}",
            room in 0usize..80,
        ) {
            let mut want = String::from("\"");
            for c in s.chars() {
                match c {
                    '"' => want.push_str("\\\""),
                    '\\' => want.push_str("\\\\"),
                    '\u{8}' => want.push_str("\\b"),
                    '\t' => want.push_str("\\t"),
                    '\n' => want.push_str("\\n"),
                    '\u{c}' => want.push_str("\\f"),
                    '\r' => want.push_str("\\r"),
                    '\0'..='\u{1f}' | '\u{7f}'..='\u{a0}' | '\u{2028}' => {
                        want.push_str(&std::format!("\\u{:04x}", u32::from(c)));
                    }
                    c => want.push(c),
                }
            }
            want.push('"');
            // Exactly the room needed, up to 80 bytes more (the word-at-a-time path needs 64
            // spare bytes), and with something written before the string.
            for lead in [0usize, 3] {
                let mut buf = std::vec![0xEEu8; lead + want.len() + room];
                let mut w = SliceWriter::new(&mut buf);
                w.put(&b"xyz"[..lead]);
                w.put_json_str(&s);
                let n = w.finish().unwrap();
                proptest::prop_assert_eq!(
                    core::str::from_utf8(&buf[lead..n]).unwrap(),
                    want.as_str()
                );
                proptest::prop_assert_eq!(json_str_len(&s), n - lead);
                // One byte less does not fit.
                let mut buf = std::vec![0u8; lead + want.len() - 1];
                let mut w = SliceWriter::new(&mut buf);
                w.put(&b"xyz"[..lead]);
                w.put_json_str(&s);
                proptest::prop_assert_eq!(w.finish(), Err(BufferTooSmall));
            }
        }

        /// Unescaping (word-at-a-time with the `\u00XX` shortcut) agrees with the reference
        /// walk on string bodies dense in escapes, valid or not, into buffers of every size
        /// around the result.
        #[test]
        fn unescape_matches_walk(
            pieces in proptest::collection::vec(
                proptest::prop_oneof![
                    "[a-zA-Z0-9 é]{0,12}",
                    "\\\\u00[0-9a-fA-FgG]{2}",
                    "\\\\u[0-9a-fA-F]{4}",
                    proptest::strategy::Just(String::from("\\uD83D\\uDE00")),
                    "\\\\[nrtbf/\\\\\"'x]",
                ],
                0..24,
            ),
            room in 0usize..12,
        ) {
            let raw: String = pieces.concat();
            let js = JsonStr { raw: raw.as_bytes(), escaped: true };
            let mut want = Vec::new();
            let walked = js.walk(|c| {
                want.extend_from_slice(c);
                true
            });
            for len in [want.len().saturating_sub(1), want.len(), want.len() + room] {
                let mut buf = std::vec![0u8; len];
                let got = js.unescape_bytes_into(&mut buf);
                match (&walked, got) {
                    (Ok(_), Ok(n)) => {
                        proptest::prop_assert_eq!(&buf[..n], &want[..]);
                    }
                    (Ok(_), Err(e)) => {
                        proptest::prop_assert!(len < want.len());
                        proptest::prop_assert_eq!(e.kind, JsonErrorKind::BufferTooSmall);
                    }
                    (Err(_), Ok(_)) => proptest::prop_assert!(false, "accepted a bad escape"),
                    (Err(_), Err(_)) => {}
                }
            }
        }

        #[test]
        fn string_round_trip(s in ".*") {
            let mut buf = std::vec![0u8; json_str_len(&s)];
            let mut w = SliceWriter::new(&mut buf);
            w.put_json_str(&s);
            proptest::prop_assert_eq!(w.finish(), Ok(buf.len()));
            let js = Parser::new(&buf).string().unwrap();
            proptest::prop_assert!(js.eq_str(&s));
            let mut out = std::vec![0u8; s.len()];
            proptest::prop_assert_eq!(js.unescape_into(&mut out).unwrap(), s.as_str());
            proptest::prop_assert_eq!(js.chars().collect::<String>(), s);
        }
    }
}
