//! Scanners of ext-field objects that the parser has already validated (every value a
//! scalar): [`FlatScan`], fast, on 64-bit targets, and [`ParsedScan`], through [`Parser`],
//! elsewhere; [`ExtScan`] names the one of the target.

use super::bytes::find_quote_or_escape;
use super::{JsonStr, Parser, Token};

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
