//! [`FieldStr`]: a borrowed header string from either header format, and [`Scratch`], a bump
//! buffer for the rare strings that must be unescaped.

use core::fmt;

use crate::json::{JsonChars, JsonError, JsonStr};

/// Where a [`FieldStr`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FieldKind {
    /// Raw bytes from a ROCKETMQ binary header (no escapes).
    Binary,
    /// A JSON string (may contain escapes).
    JsonString,
    /// A JSON number or boolean literal where a string was expected (fastjson turns these
    /// into strings when decoding `Map<String,String>`).
    JsonLiteral,
}

/// A header string (remark, ext-field key or value) borrowed from the input.
///
/// The same helpers work for all three sources ([`FieldKind`]): compare with
/// [`FieldStr::eq_str`], borrow with [`FieldStr::as_str`] (when there are no escapes), decode
/// with [`FieldStr::unescape_into`] / [`Scratch::resolve`], or parse numbers.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldStr<'a> {
    s: JsonStr<'a>,
    kind: FieldKind,
}

impl fmt::Debug for FieldStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.s, f)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for FieldStr<'_> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{=[u8]}", self.s.raw())
    }
}

impl<'a> FieldStr<'a> {
    /// Raw bytes from a binary header.
    pub const fn binary(raw: &'a [u8]) -> Self {
        FieldStr {
            s: JsonStr::from_raw(raw),
            kind: FieldKind::Binary,
        }
    }
    /// A JSON string.
    pub const fn json(s: JsonStr<'a>) -> Self {
        FieldStr {
            s,
            kind: FieldKind::JsonString,
        }
    }
    /// The source text of a JSON number/boolean literal.
    pub const fn json_literal(raw: &'a [u8]) -> Self {
        FieldStr {
            s: JsonStr::from_raw(raw),
            kind: FieldKind::JsonLiteral,
        }
    }
    /// The source of this string.
    pub const fn kind(&self) -> FieldKind {
        self.kind
    }
    /// Raw bytes (escapes not decoded).
    pub const fn raw(&self) -> &'a [u8] {
        self.s.raw()
    }
    /// Whether decoding is needed (JSON escapes present).
    pub const fn has_escapes(&self) -> bool {
        self.s.has_escapes()
    }
    /// Whether the (decoded) string is empty.
    pub const fn is_empty(&self) -> bool {
        self.s.raw().is_empty()
    }
    /// The string without copying, if it has no escapes and is valid UTF-8.
    #[inline]
    pub fn as_str(&self) -> Option<&'a str> {
        self.s.as_str()
    }
    /// Compares the decoded string with `s`, without allocating.
    pub fn eq_str(&self, s: &str) -> bool {
        self.s.eq_str(s)
    }
    /// [`FieldStr::eq_str`] tuned for header keys (short, almost never escaped): compares
    /// the lengths first and short keys without a `memcmp` call.
    #[inline]
    pub(crate) fn eq_key(&self, key: &str) -> bool {
        if self.has_escapes() {
            return self.eq_str(key);
        }
        let (a, b) = (self.raw(), key.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        match (a, b) {
            ([x], [y]) => x == y,
            _ if a.len() <= 8 => a.iter().zip(b).all(|(x, y)| x == y),
            _ => a == b,
        }
    }

    /// Decoded length in bytes.
    ///
    /// # Errors
    /// Bad escapes.
    pub fn unescaped_len(&self) -> Result<usize, JsonError> {
        self.s.unescaped_len()
    }
    /// Decodes into `buf`.
    ///
    /// # Errors
    /// `BufferTooSmall`, bad escapes, invalid UTF-8.
    pub fn unescape_into<'b>(&self, buf: &'b mut [u8]) -> Result<&'b str, JsonError> {
        self.s.unescape_into(buf)
    }
    /// The decoded characters (lossy; see [`JsonStr::chars`]).
    pub fn chars(&self) -> JsonChars<'a> {
        self.s.chars()
    }
    /// Java `Long.parseLong` of the decoded string.
    #[inline]
    pub fn parse_i64(&self) -> Option<i64> {
        self.s.parse_i64()
    }
    /// Java `Integer.parseInt` of the decoded string.
    #[inline]
    pub fn parse_i32(&self) -> Option<i32> {
        self.s.parse_i32()
    }
    /// Java `Boolean.parseBoolean` (case-insensitive `"true"`).
    #[inline]
    pub fn parse_bool(&self) -> bool {
        self.s.parse_bool()
    }
    /// The underlying [`JsonStr`].
    pub const fn as_json_str(&self) -> JsonStr<'a> {
        self.s
    }
}

/// A bump buffer that hands out unescaped strings (for JSON header values with escapes,
/// such as `properties`, which always contains `\u0001`).
///
/// Strings without escapes are borrowed from the input and use no scratch space.
#[derive(Debug)]
pub struct Scratch<'a> {
    buf: &'a mut [u8],
    /// Already-validated UTF-8 that decoded strings may borrow from (see
    /// [`Scratch::set_utf8_base`]); empty if none.
    base: &'a str,
}

impl<'a> Scratch<'a> {
    /// A scratch area over `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Scratch { buf, base: "" }
    }
    /// No scratch space: escaped strings fail to resolve.
    pub fn empty() -> Self {
        Scratch {
            buf: &mut [],
            base: "",
        }
    }
    /// Declares `base` (e.g. a whole header, checked once) as text that resolved strings
    /// lying inside it may borrow without another UTF-8 check.
    pub(crate) fn set_utf8_base(&mut self, base: &'a str) {
        self.base = base;
    }

    /// `raw` as a `&str` if it lies inside the UTF-8 base (same memory, on char
    /// boundaries).
    #[inline]
    fn in_base(&self, raw: &'a [u8]) -> Option<&'a str> {
        let off = (raw.as_ptr() as usize).wrapping_sub(self.base.as_ptr() as usize);
        let s = self.base.get(off..off.checked_add(raw.len())?)?;
        // Same memory, not just equal offsets: only then are the bytes the same.
        (s.as_ptr() == raw.as_ptr()).then_some(s)
    }

    /// Bytes still free.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    /// The decoded string: borrowed from the input when it has no escapes, otherwise
    /// unescaped into (and carved off) the scratch buffer. `None` if the scratch is too small
    /// or the string is malformed (invalid UTF-8, lone surrogate).
    #[inline]
    pub fn resolve(&mut self, f: FieldStr<'a>) -> Option<&'a str> {
        if !f.has_escapes() {
            return self.in_base(f.raw()).or_else(|| f.as_str());
        }
        // One pass: unescape into the free space, then carve off what was written. On
        // failure (too small, bad escape) the scratch is left as free as before.
        let buf = core::mem::take(&mut self.buf);
        let n = match f.as_json_str().unescape_bytes_into(buf) {
            Ok(n) => n,
            Err(_) => {
                self.buf = buf;
                return None;
            }
        };
        // `n <= buf.len()` always (the writer checks bounds).
        let (head, tail) = buf.split_at_mut_checked(n)?;
        self.buf = tail;
        core::str::from_utf8(head).ok()
    }
}
