//! [`CommandRepr`]: a command header to encode, in either format, with or without the frame's
//! prefix words.

use crate::json::SliceWriter;
use crate::wire::frame::{MAX_HEADER_LEN, MAX_TOTAL_LENGTH, PREFIX_LEN};
use crate::wire::{
    EncodeError, Frame, LanguageCode, RequestCode, ResponseCode, SerializeType, flag,
};

use super::ExtFields;

/// A command to encode: the header fields plus optional ext fields. The body is not part of
/// it; it is written separately (e.g. with vectored I/O) after
/// [`CommandRepr::emit_frame_prefix_and_header`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandRepr<'r, E> {
    /// Request or response code.
    pub code: i32,
    /// Sender language (JAVA for a Java-compatible client).
    pub language: LanguageCode,
    /// Sender version ordinal (see [`crate::wire::version`]).
    pub version: i32,
    /// Request id.
    pub opaque: i32,
    /// Flag bits ([`crate::wire::flag`]).
    pub flag: i32,
    /// Remark (omitted when `None`).
    pub remark: Option<&'r str>,
    /// Custom header: `None` omits `extFields`; `Some` with no fields writes `{}`.
    pub ext: Option<E>,
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
