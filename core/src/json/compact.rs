//! [`Compact`], the strict scanner of the compact JSON that Java (fastjson) writes: the fast
//! path of header decoding, falling back to [`Parser`] on anything else.

use super::bytes::find_quote_or_escape;
use super::string::hex4;
use super::{FlatValue, JsonNumber, JsonStr, Token};
#[cfg(doc)]
use super::{Parser, scan::FlatScan};

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
