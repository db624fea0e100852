//! Writing: [`SliceWriter`], a cursor over a caller buffer with a sticky overflow flag, and
//! JSON strings escaped exactly as fastjson writes them ([`json_str_len`] gives their length).

use core::fmt;

use super::bytes::{HI, LO, copy_small, eq_marks};
use super::number::{fmt_i64, small_dec};

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
