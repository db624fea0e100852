//! [`CommandHeader`]: a decoded command header of either format, borrowing from the frame:
//! dispatch on the serialize type, the getters, and ext-field lookup.

use crate::json::{ExtScan, FlatValue};
use crate::wire::{
    DecodeError, FieldStr, Frame, LanguageCode, RequestCode, ResponseCode, SerializeType, flag,
};

use super::{ExtIter, ExtMap, ExtSink};

/// A decoded command header, borrowing its strings from the frame.
///
/// Produced by [`CommandHeader::parse`] from either format. JSON decoding is as tolerant as
/// fastjson (docs/protocol/WIRE.md §2.2): any key order, unknown keys ignored, missing `code`/`version`/
/// `flag` = 0, missing `language` = JAVA, unknown language name =
/// [`LanguageCode::UNKNOWN`], `null` = missing. A missing `opaque` is an error
/// ([`DecodeError::MissingOpaque`]) because such a frame cannot be matched to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandHeader<'a> {
    pub(super) code: i32,
    pub(super) language: LanguageCode,
    pub(super) version: i32,
    pub(super) opaque: i32,
    pub(super) flag: i32,
    pub(super) remark: Option<FieldStr<'a>>,
    pub(super) ext: Option<ExtMap<'a>>,
    pub(super) serialize_type: SerializeType,
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
    /// The remark as text: borrowed when it has no escapes, else unescaped into `buf`
    /// (`None` when absent, or when it does not fit `buf`).
    pub fn remark_text<'b>(&self, buf: &'b mut [u8]) -> Option<&'b str>
    where
        'a: 'b,
    {
        let r = self.remark?;
        r.as_str().or_else(|| r.unescape_into(buf).ok())
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
