//! Command headers: decoding ([`CommandHeader`], both formats) and encoding
//! ([`CommandRepr`] + [`ExtFields`]).

use crate::json::{Compact, ExtScan, FlatValue, JsonStr, Parser};
use crate::json::{SliceWriter, Token, fmt_i64, i64_dec_len, json_str_len, small_dec};

use super::frame::{MAX_HEADER_LEN, MAX_TOTAL_LENGTH, PREFIX_LEN};
use super::{
    DecodeError, EncodeError, FieldStr, Frame, LanguageCode, RequestCode, ResponseCode,
    SerializeType, flag,
};

// ---------------------------------------------------------------------------------------------
// Decoding

/// A decoded command header, borrowing its strings from the frame.
///
/// Produced by [`CommandHeader::parse`] from either format. JSON decoding is as tolerant as
/// fastjson (docs/protocol/WIRE.md §2.2): any key order, unknown keys ignored, missing `code`/`version`/
/// `flag` = 0, missing `language` = JAVA, unknown language name =
/// [`LanguageCode::UNKNOWN`], `null` = missing. A missing `opaque` is an error
/// ([`DecodeError::MissingOpaque`]) because such a frame cannot be matched to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandHeader<'a> {
    code: i32,
    language: LanguageCode,
    version: i32,
    opaque: i32,
    flag: i32,
    remark: Option<FieldStr<'a>>,
    ext: Option<ExtMap<'a>>,
    serialize_type: SerializeType,
}

impl<'a> CommandHeader<'a> {
    /// Decodes the header of a checked frame, dispatching on its serialize type.
    ///
    /// # Errors
    /// [`DecodeError`] for a malformed header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &Frame<&'a T>) -> Result<Self, DecodeError> {
        Self::parse_bytes(frame.serialize_type(), frame.header_ref())
    }

    /// Decodes header bytes of the given type.
    ///
    /// # Errors
    /// [`DecodeError::UnknownSerializeType`] or a malformed header.
    pub fn parse_bytes(ty: SerializeType, header: &'a [u8]) -> Result<Self, DecodeError> {
        Self::parse_bytes_into(ty, header, &mut ())
    }

    /// [`CommandHeader::parse_bytes`] that also hands every ext field to `sink` during the
    /// same pass (exactly the fields [`CommandHeader::ext_iter`] yields, in order), so a
    /// typed header can be decoded without scanning `extFields` a second time.
    pub(crate) fn parse_bytes_into(
        ty: SerializeType,
        header: &'a [u8],
        sink: &mut impl ExtSink<'a>,
    ) -> Result<Self, DecodeError> {
        match ty {
            SerializeType::JSON => Self::parse_json_into(header, sink),
            SerializeType::ROCKETMQ => Self::parse_rocketmq_into(header, sink),
            SerializeType(t) => Err(DecodeError::UnknownSerializeType(t)),
        }
    }

    /// Decodes a JSON header (docs/protocol/WIRE.md §2).
    ///
    /// # Errors
    /// [`DecodeError::Json`], [`DecodeError::FieldType`], [`DecodeError::BadExtValue`],
    /// [`DecodeError::MissingOpaque`].
    pub fn parse_json(header: &'a [u8]) -> Result<Self, DecodeError> {
        Self::parse_json_into(header, &mut ())
    }

    fn parse_json_into(header: &'a [u8], sink: &mut impl ExtSink<'a>) -> Result<Self, DecodeError> {
        // Java writes compact JSON: try the strict fast scanners first. They accept only
        // input the full parser accepts with the same result; on anything else the full
        // parser runs from the start and decides.
        // 64-bit targets only: on the Cortex-M firmware they cost 1.1 KiB (fastjson) and
        // 1.5 KiB (compact) of flash, and a gateway reads a few frames a second.
        if cfg!(target_pointer_width = "64") {
            if let Some(h) = Self::parse_json_fastjson(header, sink) {
                return Ok(h);
            }
            if let Some(h) = Self::parse_json_compact(header, sink) {
                return Ok(h);
            }
        }
        sink.reset();
        let h = Self::parse_json_full(header)?;
        h.for_each_ext(|k, v| sink.field(k, v));
        Ok(h)
    }

    const fn json_default() -> Self {
        CommandHeader {
            code: 0,
            language: LanguageCode::JAVA,
            version: 0,
            opaque: 0,
            flag: 0,
            remark: None,
            ext: None,
            serialize_type: SerializeType::JSON,
        }
    }

    /// The layout fastjson (Java) and [`CommandRepr`] write: the keys in this order, each
    /// compared as a whole, no whitespace; `extFields` and `remark` may be missing. Anything
    /// else returns `None` and [`CommandHeader::parse_json_compact`] decides. The values go
    /// through the same code as there, so the result is the same.
    fn parse_json_fastjson(header: &'a [u8], sink: &mut impl ExtSink<'a>) -> Option<Self> {
        let mut c = Compact::new(header);
        let mut h = Self::json_default();
        let mut have_opaque = false;
        let mut scalar = |c: &mut Compact<'a>, h: &mut Self, key| {
            let tok = c.next_scalar()?;
            h.apply_json_scalar(key, tok, &mut have_opaque).ok()
        };
        c.expect(br#"{"code":"#)?;
        scalar(&mut c, &mut h, Key::Code)?;
        if c.expect(br#","extFields":"#).is_some() {
            h.ext = Self::json_ext(&mut c, sink)?;
        }
        c.expect(br#","flag":"#)?;
        scalar(&mut c, &mut h, Key::Flag)?;
        c.expect(br#","language":"#)?;
        scalar(&mut c, &mut h, Key::Language)?;
        c.expect(br#","opaque":"#)?;
        scalar(&mut c, &mut h, Key::Opaque)?;
        if c.expect(br#","remark":"#).is_some() {
            scalar(&mut c, &mut h, Key::Remark)?;
        }
        c.expect(br#","serializeTypeCurrentRPC":"#)?;
        c.next_scalar()?;
        c.expect(br#","version":"#)?;
        scalar(&mut c, &mut h, Key::Version)?;
        c.expect(b"}")?;
        (c.at_end() && have_opaque).then_some(h)
    }

    /// The value of `extFields` (the scanner is at it): an object of scalars, handed to
    /// `sink` pair by pair, or `null`. A repeated `extFields` replaces the earlier one (last
    /// key wins), so the sink starts over.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn json_ext(c: &mut Compact<'a>, sink: &mut impl ExtSink<'a>) -> Option<Option<ExtMap<'a>>> {
        sink.reset();
        if c.peek()? == b'{' {
            Some(Some(ExtMap {
                bytes: c.flat_object_visit(|k, v| match v {
                    FlatValue::Str(s) => sink.field(FieldStr::json(k), FieldStr::json(s)),
                    FlatValue::Literal(raw) => {
                        sink.field(FieldStr::json(k), FieldStr::json_literal(raw));
                    }
                    FlatValue::Null => {}
                })?,
                json: true,
            }))
        } else if c.next_scalar()? == Token::Null {
            Some(None)
        } else {
            None
        }
    }

    fn parse_json_compact(header: &'a [u8], sink: &mut impl ExtSink<'a>) -> Option<Self> {
        let mut c = Compact::new(header);
        c.object_start()?;
        let mut h = Self::json_default();
        let mut have_opaque = false;
        while let Some(k) = c.next_key()? {
            match json_key(k) {
                Key::ExtFields => h.ext = Self::json_ext(&mut c, sink)?,
                Key::Other => {
                    c.next_scalar()?;
                }
                key => {
                    let tok = c.next_scalar()?;
                    h.apply_json_scalar(key, tok, &mut have_opaque).ok()?;
                }
            }
        }
        (c.at_end() && have_opaque).then_some(h)
    }

    fn parse_json_full(header: &'a [u8]) -> Result<Self, DecodeError> {
        let mut p = Parser::new(header);
        p.expect_object_start()?;
        let mut h = Self::json_default();
        let mut have_opaque = false;
        while let Some(k) = p.next_key()? {
            match json_key(k) {
                Key::ExtFields => h.ext = parse_json_ext(&mut p, header)?,
                Key::Other => p.skip_value()?,
                key => {
                    let tok = p.next_value()?;
                    h.apply_json_scalar(key, tok, &mut have_opaque)?;
                }
            }
        }
        p.finish()?;
        if !have_opaque {
            return Err(DecodeError::MissingOpaque);
        }
        Ok(h)
    }

    /// Stores the value of one of the scalar top-level keys.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn apply_json_scalar(
        &mut self,
        key: Key,
        tok: Token<'a>,
        have_opaque: &mut bool,
    ) -> Result<(), DecodeError> {
        match key {
            Key::Code => self.code = json_int(tok, "code")?,
            Key::Flag => self.flag = json_int(tok, "flag")?,
            Key::Version => self.version = json_int(tok, "version")?,
            Key::Opaque => {
                if let Some(v) = json_int_opt(tok, "opaque")? {
                    self.opaque = v;
                    *have_opaque = true;
                }
            }
            Key::Language => {
                self.language = match tok {
                    Token::Str(s) => language_from_json(s),
                    Token::Null => LanguageCode::JAVA,
                    Token::Number(n) => n
                        .as_i64()
                        .and_then(|v| u8::try_from(v).ok())
                        .map_or(LanguageCode::UNKNOWN, LanguageCode),
                    _ => return Err(DecodeError::FieldType("language")),
                }
            }
            Key::Remark => {
                self.remark = match tok {
                    Token::Str(s) => Some(FieldStr::json(s)),
                    Token::Null => None,
                    _ => return Err(DecodeError::FieldType("remark")),
                }
            }
            Key::ExtFields | Key::Other => {}
        }
        Ok(())
    }

    /// Decodes a ROCKETMQ binary header (docs/protocol/WIRE.md §3). Lengths are signed; negative or
    /// past-the-end lengths are errors. Bytes after the ext map are ignored.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`], [`DecodeError::BadLength`].
    pub fn parse_rocketmq(header: &'a [u8]) -> Result<Self, DecodeError> {
        Self::parse_rocketmq_into(header, &mut ())
    }

    // Its own function on 64-bit targets: inlined into `parse_bytes_into`, its loop spilled
    // registers for the JSON path's sake.
    #[cfg_attr(target_pointer_width = "64", inline(never))]
    fn parse_rocketmq_into(
        header: &'a [u8],
        sink: &mut impl ExtSink<'a>,
    ) -> Result<Self, DecodeError> {
        let mut r = Rd { b: header, pos: 0 };
        let code = i32::from(r.i16()?);
        let language = LanguageCode(r.u8()?);
        let version = i32::from(r.i16()?);
        let opaque = r.i32()?;
        let flag = r.i32()?;
        let remark_len = r.len32()?;
        let remark = r.bytes(remark_len)?;
        let ext_len = r.len32()?;
        let ext = r.bytes(ext_len)?;
        // Validate the map once so iteration cannot fail later.
        let mut e = Rd { b: ext, pos: 0 };
        while e.pos < ext.len() {
            let kl = usize::try_from(e.i16()?).map_err(|_| DecodeError::BadLength)?;
            let k = e.bytes(kl)?;
            let vl = e.len32()?;
            let v = e.bytes(vl)?;
            // Empty keys and values count as missing (as in `ExtIter`).
            if !k.is_empty() && !v.is_empty() {
                sink.field(FieldStr::binary(k), FieldStr::binary(v));
            }
        }
        Ok(CommandHeader {
            code,
            language,
            version,
            opaque,
            flag,
            remark: (!remark.is_empty()).then(|| FieldStr::binary(remark)),
            ext: (!ext.is_empty()).then_some(ExtMap {
                bytes: ext,
                json: false,
            }),
            serialize_type: SerializeType::ROCKETMQ,
        })
    }

    /// The raw `code` (request or response code, see [`CommandHeader::is_response`]).
    pub const fn code(&self) -> i32 {
        self.code
    }
    /// The code as a request code.
    pub const fn request_code(&self) -> RequestCode {
        RequestCode(self.code)
    }
    /// The code as a response code.
    pub const fn response_code(&self) -> ResponseCode {
        ResponseCode(self.code)
    }
    /// The sender's language.
    pub const fn language(&self) -> LanguageCode {
        self.language
    }
    /// The sender's version ordinal.
    pub const fn version(&self) -> i32 {
        self.version
    }
    /// The request id.
    pub const fn opaque(&self) -> i32 {
        self.opaque
    }
    /// The flag word.
    pub const fn flag(&self) -> i32 {
        self.flag
    }
    /// Whether the response bit is set.
    pub const fn is_response(&self) -> bool {
        self.flag & flag::RESPONSE != 0
    }
    /// Whether the oneway bit is set.
    pub const fn is_oneway(&self) -> bool {
        self.flag & flag::ONEWAY != 0
    }
    /// The remark, if present (a zero-length binary remark is absent, as in Java).
    pub const fn remark(&self) -> Option<FieldStr<'a>> {
        self.remark
    }
    /// The format this header was decoded from.
    pub const fn serialize_type(&self) -> SerializeType {
        self.serialize_type
    }
    /// The ext fields, if the header has an `extFields` object / a non-empty ext map.
    pub const fn ext_fields(&self) -> Option<ExtMap<'a>> {
        self.ext
    }
    /// Looks up an ext field (last occurrence wins, like Java's HashMap).
    pub fn get(&self, key: &str) -> Option<FieldStr<'a>> {
        self.ext.and_then(|e| e.get(key))
    }
    /// Calls `f` for each ext field, exactly as [`CommandHeader::ext_iter`] yields them, in a
    /// tight loop (used by the typed headers' `decode`).
    pub(crate) fn for_each_ext(&self, mut f: impl FnMut(FieldStr<'a>, FieldStr<'a>)) {
        let Some(e) = self.ext else { return };
        if !e.json {
            e.iter().for_each(|(k, v)| f(k, v));
            return;
        }
        let mut scan = ExtScan::new(e.bytes);
        while let Some((k, v)) = scan.next_pair() {
            let v = match v {
                FlatValue::Str(s) => FieldStr::json(s),
                FlatValue::Literal(raw) => FieldStr::json_literal(raw),
                FlatValue::Null => continue,
            };
            f(FieldStr::json(k), v);
        }
    }

    /// Iterates over the ext fields (empty if none).
    pub fn ext_iter(&self) -> ExtIter<'a> {
        match self.ext {
            Some(e) => e.iter(),
            None => ExtMap {
                bytes: &[],
                json: false,
            }
            .iter(),
        }
    }
}

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Code,
    ExtFields,
    Flag,
    Language,
    Opaque,
    Remark,
    Version,
    Other,
}

#[cfg_attr(target_pointer_width = "64", inline(always))]
fn json_key(k: JsonStr<'_>) -> Key {
    // The match is the fast path of 64-bit hosts; 32-bit targets take the loop below, which
    // reads the same keys in a third of the code.
    if cfg!(target_pointer_width = "64") && !k.has_escapes() {
        return match k.raw() {
            b"code" => Key::Code,
            b"extFields" => Key::ExtFields,
            b"flag" => Key::Flag,
            b"language" => Key::Language,
            b"opaque" => Key::Opaque,
            b"remark" => Key::Remark,
            b"version" => Key::Version,
            _ => Key::Other,
        };
    }
    json_key_by_table(k)
}

/// The header keys [`json_key`] tells apart.
const HEADER_KEYS: [(&str, Key); 7] = [
    ("code", Key::Code),
    ("extFields", Key::ExtFields),
    ("flag", Key::Flag),
    ("language", Key::Language),
    ("opaque", Key::Opaque),
    ("remark", Key::Remark),
    ("version", Key::Version),
];

/// [`json_key`] for any key, escaped or not.
fn json_key_by_table(k: JsonStr<'_>) -> Key {
    for (name, key) in HEADER_KEYS {
        if k.eq_str(name) {
            return key;
        }
    }
    Key::Other
}

#[cfg_attr(target_pointer_width = "64", inline(always))]
fn json_int_opt(tok: Token<'_>, name: &'static str) -> Result<Option<i32>, DecodeError> {
    let v = match tok {
        Token::Number(n) => n.as_i32(),
        Token::Str(s) => s.parse_i32(),
        Token::Null => return Ok(None),
        _ => None,
    };
    v.map(Some).ok_or(DecodeError::FieldType(name))
}

#[cfg_attr(target_pointer_width = "64", inline(always))]
fn json_int(tok: Token<'_>, name: &'static str) -> Result<i32, DecodeError> {
    Ok(json_int_opt(tok, name)?.unwrap_or(0))
}

fn language_from_json(s: JsonStr<'_>) -> LanguageCode {
    if !s.has_escapes() {
        return LanguageCode::from_name_bytes(s.raw()).unwrap_or(LanguageCode::UNKNOWN);
    }
    (0..=13u8)
        .map(LanguageCode)
        .find(|l| l.name().is_some_and(|n| s.eq_str(n)))
        .unwrap_or(LanguageCode::UNKNOWN)
}

fn parse_json_ext<'a>(
    p: &mut Parser<'a>,
    header: &'a [u8],
) -> Result<Option<ExtMap<'a>>, DecodeError> {
    match p.next_value()? {
        Token::Null => Ok(None),
        Token::ObjectStart => {
            let start = p.position().saturating_sub(1);
            while p.next_key()?.is_some() {
                match p.next_value()? {
                    Token::Str(_) | Token::Number(_) | Token::Bool(_) | Token::Null => {}
                    _ => return Err(DecodeError::BadExtValue),
                }
            }
            let bytes = header.get(start..p.position()).unwrap_or(&[]);
            Ok(Some(ExtMap { bytes, json: true }))
        }
        _ => Err(DecodeError::FieldType("extFields")),
    }
}

struct Rd<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Rd<'a> {
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::BadLength)?;
        let s = self.b.get(self.pos..end).ok_or(DecodeError::Truncated)?;
        self.pos = end;
        Ok(s)
    }
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let a = *self
            .b
            .get(self.pos..)
            .and_then(<[u8]>::first_chunk::<N>)
            .ok_or(DecodeError::Truncated)?;
        self.pos += N;
        Ok(a)
    }
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn u8(&mut self) -> Result<u8, DecodeError> {
        let [b] = self.arr::<1>()?;
        Ok(b)
    }
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.arr()?))
    }
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.arr()?))
    }
    /// A signed length word: negative is an error; beyond the input is caught by `bytes`.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn len32(&mut self) -> Result<usize, DecodeError> {
        usize::try_from(self.i32()?).map_err(|_| DecodeError::BadLength)
    }
}

/// The ext fields of a decoded header (validated at parse time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtMap<'a> {
    bytes: &'a [u8],
    json: bool,
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

// ---------------------------------------------------------------------------------------------
// Encoding

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
    fn text_len(&self) -> usize {
        match *self {
            ExtValue::Str(s) => s.len(),
            ExtValue::Int(v) => i64_dec_len(v),
            ExtValue::Bool(true) => 4,
            ExtValue::Bool(false) => 5,
        }
    }
    fn json_len(&self) -> usize {
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

/// A command to encode: the header fields plus optional ext fields. The body is not part of
/// it; it is written separately (e.g. with vectored I/O) after
/// [`CommandRepr::emit_frame_prefix_and_header`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandRepr<'r, E> {
    /// Request or response code.
    pub code: i32,
    /// Sender language (JAVA for a Java-compatible client).
    pub language: LanguageCode,
    /// Sender version ordinal (see [`super::version`]).
    pub version: i32,
    /// Request id.
    pub opaque: i32,
    /// Flag bits ([`super::flag`]).
    pub flag: i32,
    /// Remark (omitted when `None`).
    pub remark: Option<&'r str>,
    /// Custom header: `None` omits `extFields`; `Some` with no fields writes `{}`.
    pub ext: Option<E>,
}

/// The text of an ext value as both header formats write it (numbers in decimal), using
/// `digits` for numbers above 99.
#[cfg_attr(target_pointer_width = "64", inline(always))]
fn ext_value_text<'v>(value: ExtValue<'v>, digits: &'v mut [u8; 20]) -> &'v [u8] {
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

impl<'r, E: ExtFields> CommandRepr<'r, E> {
    /// A request (flag 0, language JAVA).
    pub fn request(code: RequestCode, opaque: i32, version: i32, ext: Option<E>) -> Self {
        CommandRepr {
            code: code.0,
            language: LanguageCode::JAVA,
            version,
            opaque,
            flag: 0,
            remark: None,
            ext,
        }
    }

    /// A response to `opaque` (flag [`flag::RESPONSE`], language JAVA).
    pub fn response(code: ResponseCode, opaque: i32, version: i32, ext: Option<E>) -> Self {
        CommandRepr {
            code: code.0,
            language: LanguageCode::JAVA,
            version,
            opaque,
            flag: flag::RESPONSE,
            remark: None,
            ext,
        }
    }

    /// Exact header length in `ty` format.
    pub fn buffer_len(&self, ty: SerializeType) -> usize {
        if ty == SerializeType::ROCKETMQ {
            self.rocketmq_len()
        } else {
            self.json_len()
        }
    }

    fn json_len(&self) -> usize {
        // {"code":N,"flag":N,"opaque":N,"serializeTypeCurrentRPC":"JSON","version":N}
        let mut n = r#"{"code":,"flag":,"opaque":,"serializeTypeCurrentRPC":"JSON","version":}"#
            .len()
            + i64_dec_len(self.code.into())
            + i64_dec_len(self.flag.into())
            + i64_dec_len(self.opaque.into())
            + i64_dec_len(self.version.into());
        if let Some(name) = self.language.name() {
            n += r#","language":"#.len() + json_str_len(name);
        }
        if let Some(r) = self.remark {
            n += r#","remark":"#.len() + json_str_len(r);
        }
        if let Some(e) = &self.ext {
            struct Len(usize, usize);
            impl ExtVisitor for Len {
                fn field(&mut self, key: &str, value: ExtValue<'_>) {
                    self.0 += json_str_len(key) + 1 + value.json_len();
                    self.1 += 1;
                }
            }
            let mut l = Len(0, 0);
            e.visit_fields(&mut l);
            n += r#","extFields":{}"#.len() + l.0 + l.1.saturating_sub(1);
        }
        n
    }

    fn rocketmq_len(&self) -> usize {
        21 + self.remark.map_or(0, str::len) + self.rocketmq_ext_len()
    }

    fn rocketmq_ext_len(&self) -> usize {
        struct Len(usize);
        impl ExtVisitor for Len {
            fn field(&mut self, key: &str, value: ExtValue<'_>) {
                self.0 += 6 + key.len() + value.text_len();
            }
        }
        let mut l = Len(0);
        self.ext.visit_fields(&mut l);
        l.0
    }

    /// Writes the header in `ty` format into `buf`; returns the bytes written (=
    /// [`CommandRepr::buffer_len`]). Never panics; a buffer of `buffer_len()` bytes always
    /// suffices.
    ///
    /// # Errors
    /// [`EncodeError::BufferTooSmall`]; for ROCKETMQ, [`EncodeError::OutOfRange`] if the
    /// code or version does not fit 16 bits or a key exceeds 32767 bytes.
    pub fn emit(&self, ty: SerializeType, buf: &mut [u8]) -> Result<usize, EncodeError> {
        if !ty.is_known() {
            return Err(EncodeError::OutOfRange("serializeType"));
        }
        let mut w = SliceWriter::new(buf);
        if ty == SerializeType::ROCKETMQ {
            self.emit_rocketmq(&mut w)?;
        } else {
            self.emit_json(&mut w);
        }
        w.finish().map_err(|_| EncodeError::BufferTooSmall)
    }

    fn emit_json(&self, w: &mut SliceWriter<'_>) {
        w.put(br#"{"code":"#);
        w.put_i64_dec(self.code.into());
        if let Some(e) = &self.ext {
            w.put(br#","extFields":{"#);
            struct Wr<'w, 'b>(&'w mut SliceWriter<'b>, bool);
            impl ExtVisitor for Wr<'_, '_> {
                #[cfg_attr(target_pointer_width = "64", inline(always))]
                #[cfg_attr(not(target_pointer_width = "64"), inline(never))]
                fn field(&mut self, key: &str, value: ExtValue<'_>) {
                    let mut digits = [0u8; 20];
                    let v = ext_value_text(value, &mut digits);
                    // Digits and booleans never need escaping.
                    let plain = !matches!(value, ExtValue::Str(_));
                    let comma = self.1;
                    self.1 = true;
                    // Usually nothing to escape: the whole `,"key":"value"` in one piece.
                    if self.0.put_plain_json_entry(comma, key.as_bytes(), v, plain) {
                        return;
                    }
                    self.0.put_json_key(key, comma);
                    match value {
                        ExtValue::Str(s) => self.0.put_json_str(s),
                        ExtValue::Int(v) => self.0.put_quoted_i64(v),
                        ExtValue::Bool(true) => self.0.put(br#""true""#),
                        ExtValue::Bool(false) => self.0.put(br#""false""#),
                    }
                }
            }
            e.visit_fields(&mut Wr(w, false));
            w.put_u8(b'}');
        }
        w.put(br#","flag":"#);
        w.put_i64_dec(self.flag.into());
        if let Some(name) = self.language.name() {
            w.put(br#","language":"#);
            w.put_json_str(name);
        }
        w.put(br#","opaque":"#);
        w.put_i64_dec(self.opaque.into());
        if let Some(r) = self.remark {
            w.put(br#","remark":"#);
            w.put_json_str(r);
        }
        w.put(br#","serializeTypeCurrentRPC":"JSON","version":"#);
        w.put_i64_dec(self.version.into());
        w.put_u8(b'}');
    }

    fn emit_rocketmq(&self, w: &mut SliceWriter<'_>) -> Result<(), EncodeError> {
        let code = i16::try_from(self.code).map_err(|_| EncodeError::OutOfRange("code"))?;
        let version =
            i16::try_from(self.version).map_err(|_| EncodeError::OutOfRange("version"))?;
        w.put_i16_be(code);
        w.put_u8(self.language.0);
        w.put_i16_be(version);
        w.put_i32_be(self.opaque);
        w.put_i32_be(self.flag);
        let remark = self.remark.unwrap_or("");
        w.put_i32_be(i32::try_from(remark.len()).map_err(|_| EncodeError::OutOfRange("remark"))?);
        w.put(remark.as_bytes());
        // One pass: the map length is patched in once the entries are written.
        let len_at = w.reserve_i32();
        let start = w.position();
        struct Wr<'w, 'b>(&'w mut SliceWriter<'b>, bool);
        impl ExtVisitor for Wr<'_, '_> {
            #[cfg_attr(target_pointer_width = "64", inline(always))]
            #[cfg_attr(not(target_pointer_width = "64"), inline(never))]
            fn field(&mut self, key: &str, value: ExtValue<'_>) {
                let mut digits = [0u8; 20];
                let v = ext_value_text(value, &mut digits);
                if !self.0.put_binary_entry(key.as_bytes(), v) {
                    self.1 = true;
                }
            }
        }
        let mut wr = Wr(w, false);
        self.ext.visit_fields(&mut wr);
        if wr.1 {
            return Err(EncodeError::OutOfRange("ext key"));
        }
        let ext_len = w.position() - start;
        w.patch_i32_be(
            len_at,
            i32::try_from(ext_len).map_err(|_| EncodeError::OutOfRange("extFields"))?,
        );
        Ok(())
    }

    /// Whole frame length: 8 prefix bytes + header + `body_len`.
    pub fn frame_len(&self, ty: SerializeType, body_len: usize) -> usize {
        PREFIX_LEN
            .saturating_add(self.buffer_len(ty))
            .saturating_add(body_len)
    }

    /// Writes the two prefix words and the header into `buf` (which needs
    /// `8 + buffer_len(ty)` bytes); the caller sends `body_len` body bytes after them.
    /// Returns the bytes written.
    ///
    /// # Errors
    /// As [`CommandRepr::emit`], plus [`EncodeError::FrameTooLong`] if the frame would exceed
    /// 16 MiB (the peer would close the connection).
    pub fn emit_frame_prefix_and_header(
        &self,
        ty: SerializeType,
        body_len: usize,
        buf: &mut [u8],
    ) -> Result<usize, EncodeError> {
        let h = self.emit(ty, buf.get_mut(PREFIX_LEN..).unwrap_or(&mut []))?;
        if h > MAX_HEADER_LEN {
            return Err(EncodeError::FrameTooLong);
        }
        let total = 4usize
            .checked_add(h)
            .and_then(|t| t.checked_add(body_len))
            .filter(|&t| t <= MAX_TOTAL_LENGTH)
            .ok_or(EncodeError::FrameTooLong)?;
        let mut f = Frame::new_unchecked(
            buf.get_mut(..PREFIX_LEN)
                .ok_or(EncodeError::BufferTooSmall)?,
        );
        f.set_total_length(total as u32);
        f.set_type_and_header_len(ty, h as u32);
        Ok(PREFIX_LEN + h)
    }
}

#[cfg(test)]
mod fast_path_tests {
    use super::*;
    use std::vec::Vec;

    /// Reference ext iteration with the full parser ([`crate::json::ParsedScan`], the
    /// scanner of 32-bit targets; what `ExtIter` did before `FlatScan`).
    fn ext_by_parser(bytes: &[u8]) -> Vec<(FieldStr<'_>, FieldStr<'_>)> {
        let mut out = Vec::new();
        let mut scan = crate::json::ParsedScan::new(bytes);
        while let Some((k, v)) = scan.next_pair() {
            let v = match v {
                FlatValue::Str(s) => FieldStr::json(s),
                FlatValue::Literal(raw) => FieldStr::json_literal(raw),
                FlatValue::Null => continue,
            };
            out.push((FieldStr::json(k), v));
        }
        out
    }

    /// The compact fast path must agree with the full parser whenever it accepts, and the
    /// flat ext scanner must yield what the parser yields.
    /// Records what a parse hands to its sink.
    #[derive(Default)]
    struct Rec<'a>(Vec<(FieldStr<'a>, FieldStr<'a>)>);

    impl<'a> ExtSink<'a> for Rec<'a> {
        fn field(&mut self, k: FieldStr<'a>, v: FieldStr<'a>) {
            self.0.push((k, v));
        }
        fn reset(&mut self) {
            self.0.clear();
        }
    }

    /// A one-pass parse gives the same header as a plain one, and its sink sees exactly
    /// the fields `ext_iter` yields afterwards.
    fn check_sink(ty: SerializeType, input: &[u8]) {
        let mut rec = Rec::default();
        let r = CommandHeader::parse_bytes_into(ty, input, &mut rec);
        assert_eq!(r, CommandHeader::parse_bytes(ty, input));
        if let Ok(h) = r {
            assert_eq!(rec.0, h.ext_iter().collect::<Vec<_>>(), "{input:?}");
        }
    }

    fn check(input: &[u8]) {
        check_sink(SerializeType::JSON, input);
        let full = CommandHeader::parse_json_full(input);
        if let Some(fast) = CommandHeader::parse_json_compact(input, &mut ()) {
            assert_eq!(Ok(fast), full, "{:?}", core::str::from_utf8(input));
        }
        let mut rec = Rec::default();
        if let Some(fj) = CommandHeader::parse_json_fastjson(input, &mut rec) {
            assert_eq!(Ok(fj), full, "{:?}", core::str::from_utf8(input));
            assert_eq!(rec.0, fj.ext_iter().collect::<Vec<_>>());
        }
        if let Ok(h) = CommandHeader::parse_json(input) {
            assert_eq!(Ok(h), full);
            if let Some(e) = h.ext_fields() {
                let fast: Vec<_> = e.iter().collect();
                assert_eq!(
                    fast,
                    ext_by_parser(e.raw()),
                    "{:?}",
                    core::str::from_utf8(input)
                );
            }
        }
    }

    #[test]
    fn header_keys_by_match_and_by_table() {
        let others = [
            ("serializeTypeCurrentRPC", Key::Other),
            ("cod", Key::Other),
            ("codes", Key::Other),
            ("Code", Key::Other),
            ("", Key::Other),
        ];
        for (text, want) in HEADER_KEYS.into_iter().chain(others) {
            let plain = JsonStr::from_raw(text.as_bytes());
            assert_eq!(json_key(plain), want, "{text}");
            assert_eq!(json_key_by_table(plain), want, "{text}");
        }
        let escaped = Parser::new(br#""\u0063ode""#).string().unwrap();
        assert!(escaped.has_escapes());
        assert_eq!(json_key(escaped), Key::Code);
        assert_eq!(json_key_by_table(escaped), Key::Code);
    }

    #[test]
    fn fast_path_examples() {
        let cases: &[&str] = &[
            r#"{"code":10,"opaque":1}"#,
            r#"{"code":"10","opaque":"1","flag":null,"version":-3}"#,
            r#"{"opaque":1,"extFields":{"a":"x\u0001y","b":1,"c":true,"d":null,"e\"f":"g\\"}}"#,
            r#"{"opaque":1,"extFields":{},"remark":"r\n","language":"JAVA"}"#,
            r#"{"opaque":1,"extFields":{"a":1,},"x":2,}"#,
            r#"{ "opaque" : 1 , "extFields" : { 'a' : 'b' , c : 1.5e3 , "d" : false } }"#,
            r#"{"opaque":1,"extFields":{"a":[1]}}"#,
            r#"{"opaque":1,"code":1.5}"#,
            r#"{"opaque":1,"extFields":null,"other":{"x":[1,2]}}"#,
            r#"{"opaque":1} "#,
            r#"{"opaque":1}x"#,
            r#"{"opaque":1,"language":7,"remark":null}"#,
            r#"{"opaque":null}"#,
            r#"{"opaque":1,"extFields":{"a":"\x"}}"#,
            r#"{"opaque":1,"extFields":{"a":"\u12"}}"#,
        ];
        for c in cases {
            check(c.as_bytes());
        }
        // The layout path takes what Java (and our encoder) writes.
        let java = br#"{"code":310,"extFields":{"a":"pg","i":"K\u0001V"},"flag":0,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":479}"#;
        assert!(CommandHeader::parse_json_fastjson(java, &mut ()).is_some());
        check(java);
        // The fast path does take the common compact form.
        let ok = br#"{"code":310,"extFields":{"a":"pg","i":"K\u0001V"},"flag":0,"opaque":7}"#;
        assert!(CommandHeader::parse_json_compact(ok, &mut ()).is_some());
        // A repeated extFields replaces the earlier one, for the sink too.
        check(br#"{"opaque":1,"extFields":{"a":"x"},"extFields":{"b":"y"}}"#);
        check(br#"{"opaque":1,"extFields":{"a":"x"},"extFields":null}"#);
        check(br#"{"opaque":1,"extFields":{"a":"x"}, "extFields":{"b":"y"}}"#);
        // ... and leaves anything with whitespace to the full parser.
        assert!(CommandHeader::parse_json_compact(br#"{"opaque": 7}"#, &mut ()).is_none());
        assert_eq!(
            CommandHeader::parse_json(br#"{"opaque": 7}"#).map(|h| h.opaque()),
            Ok(7)
        );
    }

    const PIECES: &[&str] = &[
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        " ",
        "\"code\"",
        "\"opaque\"",
        "\"extFields\"",
        "\"flag\"",
        "\"language\"",
        "\"remark\"",
        "\"version\"",
        "\"a\"",
        "'b'",
        "c",
        "1",
        "-2",
        "1.5",
        "2e3",
        "-",
        "\"x\\u0001y\"",
        "\"\\\"\"",
        "\"\\q\"",
        "\"\\u12\"",
        "\"",
        "null",
        "true",
        "false",
        "nul",
        "\"JAVA\"",
        "\"7\"",
        "\\",
    ];

    proptest::proptest! {
        #[test]
        fn binary_sink_agrees_with_iter(
            entries in proptest::collection::vec(
                (proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4),
                 proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4)),
                0..6),
            cut in 0usize..64,
        ) {
            let mut ext = Vec::new();
            for (k, v) in &entries {
                ext.extend_from_slice(&(k.len() as i16).to_be_bytes());
                ext.extend_from_slice(k);
                ext.extend_from_slice(&(v.len() as i32).to_be_bytes());
                ext.extend_from_slice(v);
            }
            let mut h = std::vec![0, 10, 0, 1, 223, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0];
            h.extend_from_slice(&(ext.len() as i32).to_be_bytes());
            h.extend_from_slice(&ext);
            check_sink(SerializeType::ROCKETMQ, &h);
            // And truncated anywhere (errors must agree too).
            h.truncate(h.len().saturating_sub(cut));
            check_sink(SerializeType::ROCKETMQ, &h);
        }

        /// Headers in (or one byte away from) the fastjson layout: the layout path, the
        /// compact scanner and the full parser agree.
        #[test]
        fn fastjson_layout_agrees_with_parser(
            parts in (
                (0..6usize, 0..6usize, 0..4usize, 0..4usize),
                (0..3usize, 0..3usize, 0..3usize, 0..3usize),
            ),
            edit in proptest::option::of((0usize..400, proptest::prelude::any::<u8>(), proptest::prelude::any::<bool>())),
        ) {
            const NUM: &[&str] = &["310", "-1", "\"10\"", "1.5", "null", "x"];
            const EXT: &[&str] = &[
                "",
                r#","extFields":null"#,
                r#","extFields":{}"#,
                r#","extFields":{"a":"x\u0001y","b":1,"c":true,"d":null,"e\"f":"g\\"}"#,
                r#","extFields":[1]"#,
                r#","extFields":{"a":"1","a":"2"},"extFields":{"b":"3"}"#,
            ];
            const LANG: &[&str] = &["\"JAVA\"", "7", "null", "\"GO\""];
            const OPQ: &[&str] = &["7", "null", "\"8\"", "-2147483648"];
            const REMARK: &[&str] = &["", r#","remark":"r\n""#, r#","remark":null"#];
            const SER: &[&str] = &["\"JSON\"", "1", "{}"];
            const VER: &[&str] = &["479", "-3", "\"1\""];
            let ((code, ext, flag, lang), (opq, remark, ser, ver)) = parts;
            let s = std::format!(
                r#"{{"code":{}{},"flag":{},"language":{},"opaque":{}{},"serializeTypeCurrentRPC":{},"version":{}}}"#,
                NUM[code], EXT[ext], NUM[flag % 3], LANG[lang], OPQ[opq], REMARK[remark], SER[ser], VER[ver],
            );
            let mut b = s.into_bytes();
            check(&b);
            if let Some((at, byte, insert)) = edit {
                let at = at % (b.len() + 1);
                if insert {
                    b.insert(at, byte);
                } else if at < b.len() {
                    b[at] = byte;
                }
                check(&b);
            }
        }

        #[test]
        fn fast_path_agrees_with_parser(ix in proptest::collection::vec(0..PIECES.len(), 0..40)) {
            let mut s = std::string::String::new();
            for i in ix {
                s.push_str(PIECES[i]);
            }
            check(s.as_bytes());
        }

        #[test]
        fn fast_path_agrees_on_shaped_input(
            pairs in proptest::collection::vec((0..PIECES.len(), 0..PIECES.len()), 0..12),
            ext in proptest::collection::vec((0..PIECES.len(), 0..PIECES.len()), 0..8),
        ) {
            // Mostly well-formed objects, so the accepting paths get exercised.
            let mut s = std::string::String::from("{\"opaque\":1,\"extFields\":{");
            for (n, (k, v)) in ext.iter().enumerate() {
                if n > 0 {
                    s.push(',');
                }
                s.push_str(PIECES[*k]);
                s.push(':');
                s.push_str(PIECES[*v]);
            }
            s.push('}');
            for (k, v) in pairs {
                s.push(',');
                s.push_str(PIECES[k]);
                s.push(':');
                s.push_str(PIECES[v]);
            }
            s.push('}');
            check(s.as_bytes());
        }
    }
}
