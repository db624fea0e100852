//! The message properties string (`docs/protocol/WIRE.md` §9.1).
//!
//! Encoding is `key 0x01 value 0x02 key 0x01 value …`. The last `0x02` is written by Java
//! clients ≤ 4.9.0 and ≥ 5.2.0 and omitted by 4.9.1 … 5.1.4; every decoder accepts both, and
//! we write it by default ([`TrailingSeparator::Write`]).
//!
//! Java neither escapes nor rejects the separator bytes inside keys or values; we reject them
//! (and empty keys or values, which Java's decoder would drop) so that what we encode decodes
//! back to the same entries.
//!
//! ```
//! use rmq_core::message::properties::{EncodeProperties, PropertiesEncoder, PropertiesRef};
//!
//! let entries = [("TAGS", "TagA"), ("WAIT", "true")];
//! let enc = PropertiesEncoder::new(entries.iter().copied());
//! let mut buf = [0u8; 64];
//! let n = enc.encode(&mut buf).unwrap();
//! assert_eq!(n, enc.encoded_len());
//! assert_eq!(&buf[..n], b"TAGS\x01TagA\x02WAIT\x01true\x02");
//!
//! let props = PropertiesRef::from_bytes(&buf[..n]).unwrap();
//! assert_eq!(props.get("WAIT"), Some("true"));
//! ```

use core::fmt;

use super::codec::Writer;

/// `NAME_VALUE_SEPARATOR`: between a key and its value.
pub const NAME_VALUE_SEPARATOR: u8 = 0x01;
/// `PROPERTY_SEPARATOR`: after each entry (optionally not after the last one).
pub const PROPERTY_SEPARATOR: u8 = 0x02;
/// The broker rejects stored properties longer than this (`MESSAGE_ILLEGAL`), and the batch and
/// stored formats carry the length as an `i16`.
pub const MAX_PROPERTIES_LEN: usize = 32767;

/// Why a property entry cannot be encoded or stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum PropertiesError {
    /// A key is empty (Java's decoder would drop the entry).
    EmptyKey,
    /// A value is empty (Java's decoder would drop the entry).
    EmptyValue,
    /// A key contains byte `0x01` or `0x02`.
    SeparatorInKey,
    /// A value contains byte `0x01` or `0x02`.
    SeparatorInValue,
    /// The output buffer is shorter than [`EncodeProperties::encoded_len`].
    BufferTooSmall,
    /// A fixed-capacity [`Properties`] collection is full.
    Full,
}

impl fmt::Display for PropertiesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PropertiesError::EmptyKey => "property key is empty",
            PropertiesError::EmptyValue => "property value is empty",
            PropertiesError::SeparatorInKey => "property key contains a 0x01/0x02 separator",
            PropertiesError::SeparatorInValue => "property value contains a 0x01/0x02 separator",
            PropertiesError::BufferTooSmall => "output buffer too small for the properties",
            PropertiesError::Full => "properties collection is full",
        })
    }
}

impl core::error::Error for PropertiesError {}

/// The properties bytes are not valid UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct InvalidUtf8;

impl fmt::Display for InvalidUtf8 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("properties are not valid UTF-8")
    }
}

impl core::error::Error for InvalidUtf8 {}

/// Whether the encoder writes a `0x02` after the last entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TrailingSeparator {
    /// Write it, as Java ≤ 4.9.0 and ≥ 5.2.0 do (the default).
    #[default]
    Write,
    /// Omit it, as Java 4.9.1 … 5.1.4 do.
    Omit,
}

fn has_separator(s: &str) -> bool {
    // The separators are 0x01 and 0x02: one unsigned compare per byte (`b - 1 < 2`), and no
    // early exit, so the loop vectorises (keys and values are short; this runs per message).
    // (32-bit targets keep the early exit: the smaller code.)
    const _: () = assert!(NAME_VALUE_SEPARATOR == 1 && PROPERTY_SEPARATOR == 2);
    if cfg!(target_pointer_width = "64") {
        s.bytes()
            .fold(false, |found, b| found | (b.wrapping_sub(1) < 2))
    } else {
        s.bytes().any(|b| b.wrapping_sub(1) < 2)
    }
}

/// Checks that one entry can be encoded so that it decodes back unchanged: key and value
/// non-empty and free of `0x01`/`0x02`.
///
/// # Errors
///
/// [`PropertiesError::EmptyKey`], [`PropertiesError::EmptyValue`],
/// [`PropertiesError::SeparatorInKey`] or [`PropertiesError::SeparatorInValue`].
pub fn check_entry(key: &str, value: &str) -> Result<(), PropertiesError> {
    if key.is_empty() {
        Err(PropertiesError::EmptyKey)
    } else if value.is_empty() {
        Err(PropertiesError::EmptyValue)
    } else if has_separator(key) {
        Err(PropertiesError::SeparatorInKey)
    } else if has_separator(value) {
        Err(PropertiesError::SeparatorInValue)
    } else {
        Ok(())
    }
}

/// Something that can write a properties string into a caller buffer.
///
/// Implemented by [`PropertiesEncoder`], [`Properties`], [`PropertiesRef`] (re-encoding a
/// decoded string) and [`Preencoded`] (bytes copied verbatim).
pub trait EncodeProperties {
    /// The exact number of bytes [`encode`](Self::encode) writes on success.
    fn encoded_len(&self) -> usize;

    /// Writes the properties string into the front of `buf` and returns its length, which is
    /// always [`encoded_len`](Self::encoded_len).
    ///
    /// # Errors
    ///
    /// An invalid entry (see [`check_entry`]) or [`PropertiesError::BufferTooSmall`]. On error
    /// the contents of `buf` are unspecified.
    fn encode(&self, buf: &mut [u8]) -> Result<usize, PropertiesError>;
}

impl<T: EncodeProperties + ?Sized> EncodeProperties for &T {
    fn encoded_len(&self) -> usize {
        (**self).encoded_len()
    }
    fn encode(&self, buf: &mut [u8]) -> Result<usize, PropertiesError> {
        (**self).encode(buf)
    }
}

/// An already encoded properties string, copied verbatim (not checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Preencoded<'a>(pub &'a [u8]);

impl EncodeProperties for Preencoded<'_> {
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn encode(&self, buf: &mut [u8]) -> Result<usize, PropertiesError> {
        let dst = buf
            .get_mut(..self.0.len())
            .ok_or(PropertiesError::BufferTooSmall)?;
        dst.copy_from_slice(self.0);
        Ok(self.0.len())
    }
}

/// Encodes `(key, value)` entries from a cloneable iterator, in iteration order.
///
/// The iterator is walked once by [`encoded_len`](EncodeProperties::encoded_len) and twice by
/// [`encode`](EncodeProperties::encode) (check, then write), so it must yield the same entries
/// every time it is cloned.
#[derive(Debug, Clone)]
pub struct PropertiesEncoder<I> {
    entries: I,
    trailing: TrailingSeparator,
}

impl<I, K, V> PropertiesEncoder<I>
where
    I: Iterator<Item = (K, V)> + Clone,
    K: AsRef<str>,
    V: AsRef<str>,
{
    /// An encoder over `entries` that writes the trailing separator.
    pub fn new<T: IntoIterator<IntoIter = I>>(entries: T) -> Self {
        PropertiesEncoder {
            entries: entries.into_iter(),
            trailing: TrailingSeparator::Write,
        }
    }

    /// Chooses whether to write the `0x02` after the last entry.
    #[must_use]
    pub fn trailing_separator(mut self, trailing: TrailingSeparator) -> Self {
        self.trailing = trailing;
        self
    }

    /// Checks every entry with [`check_entry`].
    ///
    /// # Errors
    ///
    /// The first invalid entry's error.
    pub fn validate(&self) -> Result<(), PropertiesError> {
        self.entries
            .clone()
            .try_for_each(|(k, v)| check_entry(k.as_ref(), v.as_ref()))
    }
}

impl<I, K, V> EncodeProperties for PropertiesEncoder<I>
where
    I: Iterator<Item = (K, V)> + Clone,
    K: AsRef<str>,
    V: AsRef<str>,
{
    fn encoded_len(&self) -> usize {
        let mut any = false;
        let total = self.entries.clone().fold(0usize, |acc, (k, v)| {
            any = true;
            acc.saturating_add(k.as_ref().len())
                .saturating_add(v.as_ref().len())
                .saturating_add(2)
        });
        if any && self.trailing == TrailingSeparator::Omit {
            total.saturating_sub(1)
        } else {
            total
        }
    }

    fn encode(&self, buf: &mut [u8]) -> Result<usize, PropertiesError> {
        self.validate()?;
        self.write_checked(buf)
    }
}

impl<I, K, V> PropertiesEncoder<I>
where
    I: Iterator<Item = (K, V)> + Clone,
    K: AsRef<str>,
    V: AsRef<str>,
{
    /// [`EncodeProperties::encode`] of entries [`validate`](Self::validate) already
    /// accepted (the check is not repeated).
    pub(crate) fn write_checked(&self, buf: &mut [u8]) -> Result<usize, PropertiesError> {
        let len = self.encoded_len();
        let buf = buf.get_mut(..len).ok_or(PropertiesError::BufferTooSmall)?;
        let mut w = Writer::new(buf);
        let too_small = |_| PropertiesError::BufferTooSmall;
        for (i, (k, v)) in self.entries.clone().enumerate() {
            if i > 0 {
                w.put_u8(PROPERTY_SEPARATOR).map_err(too_small)?;
            }
            w.put(k.as_ref().as_bytes()).map_err(too_small)?;
            w.put_u8(NAME_VALUE_SEPARATOR).map_err(too_small)?;
            w.put(v.as_ref().as_bytes()).map_err(too_small)?;
        }
        if w.pos() > 0 && self.trailing == TrailingSeparator::Write {
            w.put_u8(PROPERTY_SEPARATOR).map_err(too_small)?;
        }
        Ok(w.pos())
    }
}

/// A [`PropertiesEncoder`] whose entries were validated: encoding does not check them again.
#[cfg_attr(not(target_pointer_width = "64"), allow(dead_code))]
#[derive(Debug, Clone)]
pub(crate) struct Checked<I>(pub(crate) PropertiesEncoder<I>);

impl<I, K, V> EncodeProperties for Checked<I>
where
    I: Iterator<Item = (K, V)> + Clone,
    K: AsRef<str>,
    V: AsRef<str>,
{
    fn encoded_len(&self) -> usize {
        self.0.encoded_len()
    }

    fn encode(&self, buf: &mut [u8]) -> Result<usize, PropertiesError> {
        self.0.write_checked(buf)
    }
}

/// A decoded properties string, borrowed from the input.
///
/// Iteration follows the Java 4.9.1+/5.x decoder: the text is cut into segments at each `0x02`
/// (and at the end); a segment shorter than 3 bytes is skipped; a segment is split at its first
/// `0x01`; the entry is kept only if both the key and the value are non-empty. Both the forms
/// with and without a trailing `0x02` decode to the same entries. Java builds a `HashMap`, so a
/// repeated key keeps its *last* value: [`get`](Self::get) does the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PropertiesRef<'a> {
    text: &'a str,
}

impl<'a> PropertiesRef<'a> {
    /// Wraps a properties string.
    pub const fn new(text: &'a str) -> Self {
        PropertiesRef { text }
    }

    /// Wraps raw properties bytes (as found in stored messages), checking they are UTF-8.
    ///
    /// # Errors
    ///
    /// [`InvalidUtf8`] if they are not.
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self, InvalidUtf8> {
        core::str::from_utf8(bytes)
            .map(PropertiesRef::new)
            .map_err(|_| InvalidUtf8)
    }

    /// The whole properties string.
    pub const fn as_str(&self) -> &'a str {
        self.text
    }

    /// The entries, in order of appearance (repeated keys included).
    pub fn iter(&self) -> PropertiesIter<'a> {
        PropertiesIter { rest: self.text }
    }

    /// The value of `key`; the last one if the key repeats.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
            .last()
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.iter().any(|(k, _)| k == key)
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

impl<'a> IntoIterator for PropertiesRef<'a> {
    type Item = (&'a str, &'a str);
    type IntoIter = PropertiesIter<'a>;
    fn into_iter(self) -> PropertiesIter<'a> {
        self.iter()
    }
}

impl EncodeProperties for PropertiesRef<'_> {
    fn encoded_len(&self) -> usize {
        PropertiesEncoder::new(self.iter()).encoded_len()
    }
    fn encode(&self, buf: &mut [u8]) -> Result<usize, PropertiesError> {
        PropertiesEncoder::new(self.iter()).encode(buf)
    }
}

/// Iterator over the `(key, value)` entries of a [`PropertiesRef`].
#[derive(Debug, Clone)]
pub struct PropertiesIter<'a> {
    rest: &'a str,
}

impl<'a> Iterator for PropertiesIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        // Both separators are ASCII, so every split point is a char boundary.
        while !self.rest.is_empty() {
            let (segment, rest) = self
                .rest
                .split_once(char::from(PROPERTY_SEPARATOR))
                .unwrap_or((self.rest, ""));
            self.rest = rest;
            if segment.len() < 3 {
                continue;
            }
            if let Some((k, v)) = segment.split_once(char::from(NAME_VALUE_SEPARATOR))
                && !k.is_empty()
                && !v.is_empty()
            {
                return Some((k, v));
            }
        }
        None
    }
}

/// A fixed-capacity, insertion-ordered property map (at most `N` entries), borrowing its
/// strings. Every inserted entry passes [`check_entry`], so encoding it cannot fail except
/// for a too-small buffer.
#[derive(Debug, Clone, Default)]
pub struct Properties<'a, const N: usize> {
    entries: heapless::Vec<(&'a str, &'a str), N>,
    trailing: TrailingSeparator,
}

impl<'a, const N: usize> Properties<'a, N> {
    /// An empty map that encodes with the trailing separator.
    pub const fn new() -> Self {
        Properties {
            entries: heapless::Vec::new(),
            trailing: TrailingSeparator::Write,
        }
    }

    /// Chooses whether [`encode`](EncodeProperties::encode) writes the final `0x02`.
    pub fn set_trailing_separator(&mut self, trailing: TrailingSeparator) {
        self.trailing = trailing;
    }

    /// Inserts or replaces `key`, returning the previous value.
    ///
    /// # Errors
    ///
    /// An invalid entry (see [`check_entry`]), or [`PropertiesError::Full`] when `key` is new
    /// and the map already holds `N` entries. The map is unchanged on error.
    pub fn insert(
        &mut self,
        key: &'a str,
        value: &'a str,
    ) -> Result<Option<&'a str>, PropertiesError> {
        check_entry(key, value)?;
        if let Some(slot) = self.entries.iter_mut().find(|(k, _)| *k == key) {
            return Ok(Some(core::mem::replace(&mut slot.1, value)));
        }
        self.entries
            .push((key, value))
            .map_err(|_| PropertiesError::Full)?;
        Ok(None)
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Removes `key`, returning its value; the order of the others is kept.
    pub fn remove(&mut self, key: &str) -> Option<&'a str> {
        let idx = self.entries.iter().position(|(k, _)| *k == key)?;
        Some(self.entries.remove(idx).1)
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + Clone + '_ {
        self.entries.iter().copied()
    }
}

impl<const N: usize> EncodeProperties for Properties<'_, N> {
    fn encoded_len(&self) -> usize {
        PropertiesEncoder::new(self.iter())
            .trailing_separator(self.trailing)
            .encoded_len()
    }
    fn encode(&self, buf: &mut [u8]) -> Result<usize, PropertiesError> {
        PropertiesEncoder::new(self.iter())
            .trailing_separator(self.trailing)
            .encode(buf)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    /// docs/protocol/WIRE.md §9.1 example (5.2+ style, 83 bytes).
    const EXAMPLE: &[u8] = b"TAGS\x01TagA\x02KEYS\x01order-1 order-2\x02WAIT\x01true\x02UNIQ_KEY\x01C0A8010A30391B6D3586000F42400007\x02";
    const EXAMPLE_ENTRIES: [(&str, &str); 4] = [
        ("TAGS", "TagA"),
        ("KEYS", "order-1 order-2"),
        ("WAIT", "true"),
        ("UNIQ_KEY", "C0A8010A30391B6D3586000F42400007"),
    ];

    #[test]
    fn wire_example_encodes_byte_for_byte() {
        assert_eq!(EXAMPLE.len(), 83);
        let enc = PropertiesEncoder::new(EXAMPLE_ENTRIES.iter().copied());
        assert_eq!(enc.encoded_len(), 83);
        let mut buf = [0xa5u8; 100];
        assert_eq!(enc.encode(&mut buf), Ok(83));
        assert_eq!(&buf[..83], EXAMPLE);
        assert_eq!(buf[83], 0xa5, "wrote past the exact length");

        let omit = enc.clone().trailing_separator(TrailingSeparator::Omit);
        assert_eq!(omit.encoded_len(), 82);
        assert_eq!(omit.encode(&mut buf), Ok(82));
        assert_eq!(&buf[..82], &EXAMPLE[..82]);
    }

    #[test]
    fn wire_example_decodes_with_and_without_trailing() {
        for text in [EXAMPLE, &EXAMPLE[..82]] {
            let props = PropertiesRef::from_bytes(text).unwrap();
            assert_eq!(props.iter().collect::<Vec<_>>(), EXAMPLE_ENTRIES.to_vec());
            assert_eq!(props.get("KEYS"), Some("order-1 order-2"));
            assert_eq!(props.get("NOPE"), None);
            assert!(props.contains_key("WAIT"));
        }
    }

    #[test]
    fn decoder_follows_java_rules() {
        let cases: &[(&str, &[(&str, &str)])] = &[
            ("", &[]),
            ("\x02\x02", &[]),
            ("a\x01", &[]),            // empty value
            ("\x01b", &[]),            // empty key
            ("abc", &[]),              // no name/value separator
            ("a\x01b", &[("a", "b")]), // 3 bytes, no trailing separator
            ("a\x01b\x02\x02c\x01d\x02", &[("a", "b"), ("c", "d")]),
            ("k\x01v\x01w", &[("k", "v\x01w")]), // split at the first 0x01
            ("junk\x02k\x01v", &[("k", "v")]),
            ("k\x01é\x02ü\x01x", &[("k", "é"), ("ü", "x")]),
        ];
        for (text, want) in cases {
            let got: Vec<_> = PropertiesRef::new(text).iter().collect();
            assert_eq!(&got, want, "decoding {text:?}");
        }
        let dup = PropertiesRef::new("k\x01first\x02k\x01second");
        assert_eq!(dup.get("k"), Some("second"));
        assert!(PropertiesRef::new("\x02").is_empty());
        assert_eq!(PropertiesRef::from_bytes(b"k\x01\xff"), Err(InvalidUtf8));
    }

    #[test]
    fn encoder_rejects_bad_entries() {
        let cases = [
            (("", "v"), PropertiesError::EmptyKey),
            (("k", ""), PropertiesError::EmptyValue),
            (("k\x01", "v"), PropertiesError::SeparatorInKey),
            (("k", "v\x02"), PropertiesError::SeparatorInValue),
            (("k\x02", "v"), PropertiesError::SeparatorInKey),
            (("k", "\x01v"), PropertiesError::SeparatorInValue),
        ];
        let mut buf = [0u8; 64];
        for ((k, v), err) in cases {
            let enc = PropertiesEncoder::new([("ok", "fine"), (k, v)]);
            assert_eq!(enc.validate(), Err(err));
            assert_eq!(enc.encode(&mut buf), Err(err));
        }
        let empty = PropertiesEncoder::new(core::iter::empty::<(&str, &str)>());
        assert_eq!(empty.encoded_len(), 0);
        assert_eq!(empty.encode(&mut []), Ok(0));
    }

    #[test]
    fn too_small_buffer_fails_at_every_size() {
        let enc = PropertiesEncoder::new(EXAMPLE_ENTRIES.iter().copied());
        let mut buf = [0u8; 83];
        for n in 0..83 {
            assert_eq!(
                enc.encode(&mut buf[..n]),
                Err(PropertiesError::BufferTooSmall)
            );
        }
        let pre = Preencoded(EXAMPLE);
        assert_eq!(pre.encoded_len(), 83);
        for n in 0..83 {
            assert_eq!(
                pre.encode(&mut buf[..n]),
                Err(PropertiesError::BufferTooSmall)
            );
        }
        assert_eq!(pre.encode(&mut buf), Ok(83));
        assert_eq!(&buf[..], EXAMPLE);
    }

    #[test]
    fn fixed_capacity_map() {
        let mut p: Properties<'_, 2> = Properties::new();
        assert_eq!(p.insert("WAIT", "true"), Ok(None));
        assert_eq!(p.insert("TAGS", "a"), Ok(None));
        assert_eq!(p.insert("KEYS", "k"), Err(PropertiesError::Full));
        assert_eq!(p.insert("TAGS", "b"), Ok(Some("a")));
        assert_eq!(p.insert("TAGS", ""), Err(PropertiesError::EmptyValue));
        assert_eq!(p.get("TAGS"), Some("b"));
        let mut buf = [0u8; 32];
        let n = p.encode(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"WAIT\x01true\x02TAGS\x01b\x02");
        p.set_trailing_separator(TrailingSeparator::Omit);
        assert_eq!(p.encoded_len(), n - 1);
        assert_eq!(p.remove("WAIT"), Some("true"));
        assert_eq!(p.remove("WAIT"), None);
        assert_eq!(p.len(), 1);
        let n = p.encode(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"TAGS\x01b");
        p.clear();
        assert!(p.is_empty());
        assert_eq!(p.encoded_len(), 0);
    }

    fn entry() -> impl Strategy<Value = (String, String)> {
        let text = "[^\\x01\\x02]{1,12}";
        (text, text)
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(
            entries in proptest::collection::vec(entry(), 0..8),
            omit in any::<bool>(),
        ) {
            let trailing = if omit { TrailingSeparator::Omit } else { TrailingSeparator::Write };
            let enc = PropertiesEncoder::new(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .trailing_separator(trailing);
            let len = enc.encoded_len();
            let mut buf = vec![0u8; len];
            if len > 0 {
                prop_assert_eq!(enc.encode(&mut buf[..len - 1]), Err(PropertiesError::BufferTooSmall));
            }
            prop_assert_eq!(enc.encode(&mut buf), Ok(len));
            let text = core::str::from_utf8(&buf).unwrap();
            let decoded: Vec<(String, String)> = PropertiesRef::new(text)
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            prop_assert_eq!(decoded, entries.clone());
            // Re-encoding a decoded string reproduces the bytes (with the same trailing rule).
            let reencoded = PropertiesEncoder::new(PropertiesRef::new(text).iter()).trailing_separator(trailing);
            let mut again = vec![0u8; reencoded.encoded_len()];
            prop_assert_eq!(reencoded.encode(&mut again), Ok(len));
            prop_assert_eq!(&again, &buf);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(props) = PropertiesRef::from_bytes(&bytes) {
                for (k, v) in props.iter() {
                    prop_assert!(!k.is_empty() && !v.is_empty());
                    prop_assert!(!k.contains('\x02') && !v.contains('\x02') && !k.contains('\x01'));
                }
                let _ = props.get("k");
                let n = props.encoded_len();
                prop_assert!(n <= bytes.len() + 1);
            }
        }
    }
}
