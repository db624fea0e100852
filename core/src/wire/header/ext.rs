//! Ext fields: the decoded map of a header ([`ExtMap`], [`ExtIter`]), the sinks that receive
//! the fields while a header is parsed ([`ExtSink`], [`Collect`]), and what the encoders take
//! ([`ExtFields`], [`ExtVisitor`], [`ExtValue`], [`Chain`]).

use crate::json::{ExtScan, FlatValue, fmt_i64, i64_dec_len, json_str_len, small_dec};
use crate::wire::{DecodeError, FieldStr};

#[cfg(doc)]
use super::CommandHeader;
use super::rocketmq::Rd;

/// Receives the ext fields of a header while it is parsed
/// ([`CommandHeader::parse_bytes_into`]).
pub(crate) trait ExtSink<'a> {
    /// One present field, in wire order.
    fn field(&mut self, key: FieldStr<'a>, value: FieldStr<'a>);
    /// Forgets the fields seen so far (parsing restarted, or a later `extFields` replaces
    /// an earlier one).
    fn reset(&mut self);
}

/// No sink: plain parsing.
impl<'a> ExtSink<'a> for () {
    #[inline]
    fn field(&mut self, _: FieldStr<'a>, _: FieldStr<'a>) {}
    #[inline]
    fn reset(&mut self) {}
}

/// Collects the values of known keys into slots (last occurrence wins, like Java's HashMap).
///
/// Senders usually write keys in declaration order, so the search starts after the previous
/// match and wraps around: typically one comparison per field.
pub(crate) struct Collect<'k, 's, 'a> {
    keys: &'k [&'k str],
    slots: &'s mut [Option<FieldStr<'a>>],
    next: usize,
}

impl<'k, 's, 'a> Collect<'k, 's, 'a> {
    /// A collector filling `slots[i]` with the value of `keys[i]`; the slots start as `None`.
    pub(crate) fn new(keys: &'k [&'k str], slots: &'s mut [Option<FieldStr<'a>>]) -> Self {
        Collect {
            keys,
            slots,
            next: 0,
        }
    }
}

impl<'a> ExtSink<'a> for Collect<'_, '_, 'a> {
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn field(&mut self, k: FieldStr<'a>, v: FieldStr<'a>) {
        let n = self.keys.len();
        let mut i = if self.next < n { self.next } else { 0 };
        for _ in 0..n {
            if self.keys.get(i).is_some_and(|key| k.eq_key(key)) {
                if let Some(slot) = self.slots.get_mut(i) {
                    *slot = Some(v);
                }
                self.next = i + 1;
                return;
            }
            i += 1;
            if i >= n {
                i = 0;
            }
        }
    }

    fn reset(&mut self) {
        // `next` is 0 until a slot is written (then it is one past that slot).
        if self.next != 0 {
            self.slots.fill(None);
            self.next = 0;
        }
    }
}

/// The ext fields of a decoded header (validated at parse time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtMap<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) json: bool,
}

impl<'a> ExtMap<'a> {
    /// Looks up `key`; the last occurrence wins. `null` (JSON) and zero-length (binary)
    /// values count as missing.
    pub fn get(&self, key: &str) -> Option<FieldStr<'a>> {
        let mut found = None;
        for (k, v) in self.iter() {
            if k.eq_str(key) {
                found = Some(v);
            }
        }
        found
    }

    /// Iterates `(key, value)` pairs in wire order, skipping missing values.
    pub fn iter(&self) -> ExtIter<'a> {
        ExtIter {
            inner: if self.json {
                // The object was validated by `parse_json_ext` (only scalar values), so the
                // fast scanner yields exactly what the parser would.
                IterInner::Json(ExtScan::new(self.bytes))
            } else {
                IterInner::Binary(Rd {
                    b: self.bytes,
                    pos: 0,
                })
            },
        }
    }

    /// Whether the map has no (non-missing) entries.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The raw bytes: a JSON object's text, or the binary entries.
    pub const fn raw(&self) -> &'a [u8] {
        self.bytes
    }
}

impl<'a> IntoIterator for ExtMap<'a> {
    type Item = (FieldStr<'a>, FieldStr<'a>);
    type IntoIter = ExtIter<'a>;
    fn into_iter(self) -> ExtIter<'a> {
        self.iter()
    }
}

/// Iterator over ext fields; see [`ExtMap::iter`].
pub struct ExtIter<'a> {
    inner: IterInner<'a>,
}

enum IterInner<'a> {
    Json(ExtScan<'a>),
    Binary(Rd<'a>),
}

impl<'a> Iterator for ExtIter<'a> {
    type Item = (FieldStr<'a>, FieldStr<'a>);
    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            IterInner::Json(scan) => loop {
                let (k, v) = scan.next_pair()?;
                let v = match v {
                    FlatValue::Str(s) => FieldStr::json(s),
                    FlatValue::Literal(raw) => FieldStr::json_literal(raw),
                    FlatValue::Null => continue,
                };
                return Some((FieldStr::json(k), v));
            },
            IterInner::Binary(r) => loop {
                if r.pos >= r.b.len() {
                    return None;
                }
                let entry = (|| {
                    let kl = usize::try_from(r.i16()?).map_err(|_| DecodeError::BadLength)?;
                    let k = r.bytes(kl)?;
                    let vl = r.len32()?;
                    let v = r.bytes(vl)?;
                    Ok::<_, DecodeError>((k, v))
                })();
                match entry {
                    Ok((k, v)) if !k.is_empty() && !v.is_empty() => {
                        return Some((FieldStr::binary(k), FieldStr::binary(v)));
                    }
                    Ok(_) => continue,
                    Err(_) => {
                        r.pos = r.b.len();
                        return None;
                    }
                }
            },
        }
    }
}

/// An ext-field value to encode. Integers and booleans are written in decimal / as
/// `true`/`false` (always as JSON strings, like Java's `toString()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtValue<'v> {
    /// A string.
    Str(&'v str),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

impl ExtValue<'_> {
    pub(super) fn text_len(&self) -> usize {
        match *self {
            ExtValue::Str(s) => s.len(),
            ExtValue::Int(v) => i64_dec_len(v),
            ExtValue::Bool(true) => 4,
            ExtValue::Bool(false) => 5,
        }
    }
    pub(super) fn json_len(&self) -> usize {
        match *self {
            ExtValue::Str(s) => json_str_len(s),
            _ => self.text_len() + 2,
        }
    }
}

/// Receives ext fields from an [`ExtFields`] implementation.
pub trait ExtVisitor {
    /// One `(key, value)` pair.
    fn field(&mut self, key: &str, value: ExtValue<'_>);
}

/// A set of ext fields that can be encoded without allocating (a typed custom header, a
/// slice of pairs, a [`Chain`] of both, ...).
///
/// Implementations must visit the same fields every time they are called on the same value
/// (the encoder visits once to size and once to write).
pub trait ExtFields {
    /// Calls `v.field(..)` once per present field, in encoding order.
    fn visit_fields<V: ExtVisitor + ?Sized>(&self, v: &mut V);
}

impl<T: ExtFields + ?Sized> ExtFields for &T {
    fn visit_fields<V: ExtVisitor + ?Sized>(&self, v: &mut V) {
        (**self).visit_fields(v);
    }
}

/// No fields: as a command's `ext` it yields `"extFields":{}` (an empty custom header).
impl ExtFields for () {
    fn visit_fields<V: ExtVisitor + ?Sized>(&self, _: &mut V) {}
}

impl<T: ExtFields> ExtFields for Option<T> {
    fn visit_fields<V: ExtVisitor + ?Sized>(&self, v: &mut V) {
        if let Some(t) = self {
            t.visit_fields(v);
        }
    }
}

impl ExtFields for [(&str, &str)] {
    fn visit_fields<V: ExtVisitor + ?Sized>(&self, v: &mut V) {
        for (k, val) in self {
            v.field(k, ExtValue::Str(val));
        }
    }
}

impl<const N: usize> ExtFields for [(&str, &str); N] {
    fn visit_fields<V: ExtVisitor + ?Sized>(&self, v: &mut V) {
        self.as_slice().visit_fields(v);
    }
}

/// Two field sets encoded one after the other (e.g. a typed header, then ACL keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain<A, B>(pub A, pub B);

impl<A: ExtFields, B: ExtFields> ExtFields for Chain<A, B> {
    fn visit_fields<V: ExtVisitor + ?Sized>(&self, v: &mut V) {
        self.0.visit_fields(v);
        self.1.visit_fields(v);
    }
}

/// The text of an ext value as both header formats write it (numbers in decimal), using
/// `digits` for numbers above 99.
#[cfg_attr(target_pointer_width = "64", inline(always))]
pub(super) fn ext_value_text<'v>(value: ExtValue<'v>, digits: &'v mut [u8; 20]) -> &'v [u8] {
    match value {
        ExtValue::Str(s) => s.as_bytes(),
        ExtValue::Int(v) => small_dec(v).unwrap_or_else(|| {
            let n = fmt_i64(v, digits);
            digits.get(20 - n..).unwrap_or(&[])
        }),
        ExtValue::Bool(true) => b"true",
        ExtValue::Bool(false) => b"false",
    }
}
