//! The ROCKETMQ binary header codec (docs/protocol/WIRE.md §3): big-endian fields, signed
//! length words, the ext map as length-prefixed key/value pairs.

use crate::json::SliceWriter;
use crate::wire::{DecodeError, EncodeError, FieldStr, LanguageCode, SerializeType};

use super::ext::ext_value_text;
use super::{CommandHeader, CommandRepr, ExtFields, ExtMap, ExtSink, ExtValue, ExtVisitor};

impl<'a> CommandHeader<'a> {
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
    pub(super) fn parse_rocketmq_into(
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
}

pub(super) struct Rd<'a> {
    pub(super) b: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Rd<'a> {
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    pub(super) fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
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
    pub(super) fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.arr()?))
    }
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.arr()?))
    }
    /// A signed length word: negative is an error; beyond the input is caught by `bytes`.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    pub(super) fn len32(&mut self) -> Result<usize, DecodeError> {
        usize::try_from(self.i32()?).map_err(|_| DecodeError::BadLength)
    }
}

impl<'r, E: ExtFields> CommandRepr<'r, E> {
    pub(super) fn rocketmq_len(&self) -> usize {
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

    pub(super) fn emit_rocketmq(&self, w: &mut SliceWriter<'_>) -> Result<(), EncodeError> {
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
}
