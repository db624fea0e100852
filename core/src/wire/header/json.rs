//! The JSON header codec (docs/protocol/WIRE.md §2): decoding through the fastjson-layout and
//! compact fast paths (64-bit targets) or the full parser, and encoding as fastjson writes it.

use crate::json::{
    Compact, FlatValue, JsonStr, Parser, SliceWriter, Token, i64_dec_len, json_str_len,
};
use crate::wire::{DecodeError, FieldStr, LanguageCode, SerializeType};

use super::ext::ext_value_text;
use super::{CommandHeader, CommandRepr, ExtFields, ExtMap, ExtSink, ExtValue, ExtVisitor};

impl<'a> CommandHeader<'a> {
    /// Decodes a JSON header (docs/protocol/WIRE.md §2).
    ///
    /// # Errors
    /// [`DecodeError::Json`], [`DecodeError::FieldType`], [`DecodeError::BadExtValue`],
    /// [`DecodeError::MissingOpaque`].
    pub fn parse_json(header: &'a [u8]) -> Result<Self, DecodeError> {
        Self::parse_json_into(header, &mut ())
    }

    pub(super) fn parse_json_into(
        header: &'a [u8],
        sink: &mut impl ExtSink<'a>,
    ) -> Result<Self, DecodeError> {
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
    pub(super) fn parse_json_fastjson(
        header: &'a [u8],
        sink: &mut impl ExtSink<'a>,
    ) -> Option<Self> {
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

    pub(super) fn parse_json_compact(
        header: &'a [u8],
        sink: &mut impl ExtSink<'a>,
    ) -> Option<Self> {
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

    pub(super) fn parse_json_full(header: &'a [u8]) -> Result<Self, DecodeError> {
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Key {
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
pub(super) fn json_key(k: JsonStr<'_>) -> Key {
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
pub(super) const HEADER_KEYS: [(&str, Key); 7] = [
    ("code", Key::Code),
    ("extFields", Key::ExtFields),
    ("flag", Key::Flag),
    ("language", Key::Language),
    ("opaque", Key::Opaque),
    ("remark", Key::Remark),
    ("version", Key::Version),
];

/// [`json_key`] for any key, escaped or not.
pub(super) fn json_key_by_table(k: JsonStr<'_>) -> Key {
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

impl<'r, E: ExtFields> CommandRepr<'r, E> {
    pub(super) fn json_len(&self) -> usize {
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

    pub(super) fn emit_json(&self, w: &mut SliceWriter<'_>) {
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
}
