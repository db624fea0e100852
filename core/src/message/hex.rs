//! Upper-case hex rendering and case-insensitive hex parsing for message ids.

use core::fmt;
use core::ops::Deref;

use super::{BufferTooSmall, IdParseError};

const DIGITS: &[u8; 16] = b"0123456789ABCDEF";

/// The longest rendered id: 28 bytes (IPv6 UNIQ_KEY or offsetMsgId) as 56 hex characters.
pub const MAX_HEX_ID_LEN: usize = 56;

/// Writes `src` as upper-case hex into the front of `dst`; returns the number of characters.
pub(crate) fn encode_upper(src: &[u8], dst: &mut [u8]) -> Result<usize, BufferTooSmall> {
    let n = src.len().checked_mul(2).ok_or(BufferTooSmall)?;
    let dst = dst.get_mut(..n).ok_or(BufferTooSmall)?;
    for (pair, &b) in dst.chunks_exact_mut(2).zip(src) {
        pair.copy_from_slice(&[DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 0xF)]]);
    }
    Ok(n)
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Parses hex text (either case) into exactly `dst.len()` bytes.
pub(crate) fn decode(src: &[u8], dst: &mut [u8]) -> Result<(), IdParseError> {
    if src.len() != dst.len().saturating_mul(2) {
        return Err(IdParseError::BadLength);
    }
    for (out, pair) in dst.iter_mut().zip(src.chunks_exact(2)) {
        let (hi, lo) = match pair {
            [hi, lo] => (nibble(*hi), nibble(*lo)),
            _ => (None, None),
        };
        *out = (hi.ok_or(IdParseError::BadHex)? << 4) | lo.ok_or(IdParseError::BadHex)?;
    }
    Ok(())
}

/// A message id rendered as upper-case hex (32 or 56 characters), stored inline.
///
/// Dereferences to `str`; compare it with a `&str` directly.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HexId {
    buf: [u8; MAX_HEX_ID_LEN],
    len: u8,
}

impl HexId {
    /// Renders `raw` (at most 28 bytes) as upper-case hex.
    pub(crate) fn from_raw(raw: &[u8]) -> Self {
        let mut id = HexId {
            buf: [0; MAX_HEX_ID_LEN],
            len: 0,
        };
        if let Ok(n) = encode_upper(raw, &mut id.buf) {
            id.len = u8::try_from(n).unwrap_or(0);
        }
        id
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }

    /// The id as ASCII bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..usize::from(self.len)).unwrap_or_default()
    }
}

impl Deref for HexId {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for HexId {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for HexId {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for HexId {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for HexId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for HexId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn encode_and_decode() {
        let mut out = [0u8; 8];
        assert_eq!(encode_upper(&[0x0a, 0xbc, 0xff, 0x00], &mut out), Ok(8));
        assert_eq!(&out, b"0ABCFF00");
        assert_eq!(encode_upper(&[1, 2], &mut out[..3]), Err(BufferTooSmall));
        let mut raw = [0u8; 4];
        assert_eq!(decode(b"0aBcfF00", &mut raw), Ok(()));
        assert_eq!(raw, [0x0a, 0xbc, 0xff, 0x00]);
        assert_eq!(decode(b"0aBcfF0", &mut raw), Err(IdParseError::BadLength));
        assert_eq!(decode(b"0aBcfF0g", &mut raw), Err(IdParseError::BadHex));
        assert_eq!(decode(b"0aBc fF0", &mut raw), Err(IdParseError::BadHex));
    }

    #[test]
    fn hex_id_renders() {
        let id = HexId::from_raw(&[0xde, 0xad]);
        assert_eq!(id, "DEAD");
        assert_eq!(id.len(), 4);
        assert_eq!(std::format!("{id} {id:?}"), "DEAD \"DEAD\"");
    }
}
