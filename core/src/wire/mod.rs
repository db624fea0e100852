//! The RocketMQ remoting wire format (docs/protocol/WIRE.md §1–§6): frames, both header formats, codes and
//! typed custom headers.
//!
//! # Layers
//!
//! - [`Frame`]: a view over one frame's bytes (length word, type/header-length word, header,
//!   body). [`FrameReader`] cuts frames out of a byte stream into a caller buffer.
//! - [`CommandHeader`]: a decoded header, either format, borrowing from the frame; ext fields
//!   are read through [`FieldStr`] (abstracting binary bytes, JSON strings with escapes and
//!   JSON number literals).
//! - [`CommandRepr`]: a header to encode, with ext fields supplied by any [`ExtFields`]
//!   (typed headers in [`headers`], slices of pairs, [`Chain`]s).
//! - [`RequestCode`], [`ResponseCode`], [`LanguageCode`], [`SerializeType`]: open newtypes.
//!
//! # Contract
//!
//! - Untrusted input must go through [`Frame::new_checked`] (or [`FrameReader`], which checks
//!   the prefix before buffering the rest). After [`Frame::check_len`] succeeds, no accessor
//!   panics, and header/body lie inside the buffer. (Accessors do not panic on unchecked
//!   buffers either; they return empty slices.) The `set_*` setters never panic; changing the
//!   lengths voids the check, so re-check before trusting the view again.
//! - No decoder panics on any input: malformed input yields a typed, `Copy` error.
//! - [`CommandRepr::emit`] never panics, always succeeds on a buffer of exactly
//!   [`CommandRepr::buffer_len`] bytes (for encodable values) and returns
//!   [`EncodeError::BufferTooSmall`] on a smaller one. Encoders write into fresh buffers and do
//!   not use `new_checked` (a recycled buffer could pass the check by accident).
//! - Nothing here allocates.
//!
//! # Example: emit, then parse
//!
//! ```
//! use rmq_core::wire::{
//!     CommandHeader, CommandRepr, Frame, RequestCode, SerializeType, headers::GetRouteInfoRequestHeader,
//!     version,
//! };
//!
//! let hdr = GetRouteInfoRequestHeader { topic: "TopicTest", accept_standard_json_only: None };
//! let cmd = CommandRepr::request(RequestCode::GET_ROUTEINFO_BY_TOPIC, 1, version::V4_9_8, Some(&hdr));
//! let mut buf = [0u8; 256];
//! for ty in [SerializeType::JSON, SerializeType::ROCKETMQ] {
//!     let n = cmd.emit_frame_prefix_and_header(ty, 0, &mut buf)?;
//!     assert_eq!(n, cmd.frame_len(ty, 0));
//!     let frame = Frame::new_checked(&buf[..n])?;
//!     let parsed = CommandHeader::parse(&frame)?;
//!     assert_eq!(parsed.request_code(), RequestCode::GET_ROUTEINFO_BY_TOPIC);
//!     assert_eq!(parsed.opaque(), 1);
//!     assert!(parsed.get("topic").unwrap().eq_str("TopicTest"));
//!     let back = GetRouteInfoRequestHeader::decode(&parsed, &mut Default::default())?;
//!     assert_eq!(back, hdr);
//! }
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```

use core::fmt;

use crate::json::JsonError;

mod code;
mod field;
mod frame;
mod header;
pub mod headers;
#[cfg(test)]
mod tests;

pub use code::{LanguageCode, RequestCode, ResponseCode, SerializeType, flag, version};
pub use field::{FieldKind, FieldStr, Scratch};
pub use frame::{
    Frame, FrameReader, MAX_FRAME_LEN, MAX_HEADER_LEN, MAX_TOTAL_LENGTH, PREFIX_LEN, check_prefix,
    whole_frame,
};
pub use header::{
    Chain, CommandHeader, CommandRepr, ExtFields, ExtIter, ExtMap, ExtValue, ExtVisitor,
};

/// A frame's prefix or length is invalid. The peer is broken or hostile; Java closes the
/// connection in all these cases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum FrameError {
    /// Fewer bytes than the prefix or `total_length` announce.
    Truncated,
    /// `total_length` above [`MAX_TOTAL_LENGTH`].
    TooLong,
    /// `total_length` negative or below 4.
    BadTotalLength,
    /// `header_len` larger than `total_length - 4`.
    BadHeaderLength,
    /// A serialize type other than JSON (0) or ROCKETMQ (1).
    UnknownSerializeType(u8),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Truncated => f.write_str("frame truncated"),
            FrameError::TooLong => f.write_str("frame longer than 16 MiB"),
            FrameError::BadTotalLength => f.write_str("bad frame length"),
            FrameError::BadHeaderLength => f.write_str("header length past end of frame"),
            FrameError::UnknownSerializeType(t) => write!(f, "unknown serialize type {t}"),
        }
    }
}

impl core::error::Error for FrameError {}

/// A [`FrameReader`] error. Every variant poisons the reader: close the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ReadError {
    /// The peer sent an invalid prefix.
    Frame(FrameError),
    /// A valid frame that does not fit the caller's buffer (a resource limit, not a peer
    /// fault): `frame_len` bytes are needed.
    FrameTooLargeForBuffer {
        /// Whole frame length, prefix included.
        frame_len: usize,
    },
    /// API misuse: `commit(n)` with `n` larger than the receive buffer.
    CommitOverflow,
    /// The reader failed earlier.
    Poisoned,
}

impl From<FrameError> for ReadError {
    fn from(e: FrameError) -> Self {
        ReadError::Frame(e)
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Frame(e) => fmt::Display::fmt(e, f),
            ReadError::FrameTooLargeForBuffer { frame_len } => {
                write!(
                    f,
                    "frame of {frame_len} bytes does not fit the receive buffer"
                )
            }
            ReadError::CommitOverflow => f.write_str("commit past the receive buffer"),
            ReadError::Poisoned => f.write_str("frame reader poisoned by an earlier error"),
        }
    }
}

impl core::error::Error for ReadError {}

/// A header could not be decoded (peer fault).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum DecodeError {
    /// The binary header ends early.
    Truncated,
    /// A negative or overflowing length in a binary header.
    BadLength,
    /// Malformed JSON.
    Json(JsonError),
    /// A JSON header field has the wrong type (or an integer out of range).
    FieldType(&'static str),
    /// An `extFields` value is an object or array.
    BadExtValue,
    /// A JSON header without `opaque` (Java would invent a fresh id; the frame cannot be
    /// matched to anything).
    MissingOpaque,
    /// A serialize type other than JSON or ROCKETMQ.
    UnknownSerializeType(u8),
}

impl From<JsonError> for DecodeError {
    fn from(e: JsonError) -> Self {
        DecodeError::Json(e)
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => f.write_str("header truncated"),
            DecodeError::BadLength => f.write_str("bad length in header"),
            DecodeError::Json(e) => write!(f, "bad JSON header: {e}"),
            DecodeError::FieldType(k) => write!(f, "bad type for header field {k}"),
            DecodeError::BadExtValue => f.write_str("extFields value is not a string"),
            DecodeError::MissingOpaque => f.write_str("header has no opaque"),
            DecodeError::UnknownSerializeType(t) => write!(f, "unknown serialize type {t}"),
        }
    }
}

impl core::error::Error for DecodeError {}

/// A header could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum EncodeError {
    /// The output buffer is smaller than needed (resource).
    BufferTooSmall,
    /// The frame would exceed 16 MiB or the header 0xFF_FFFF bytes.
    FrameTooLong,
    /// A value cannot be represented in the chosen format (API misuse), e.g. a code above
    /// 32767 in a ROCKETMQ header, or an unknown serialize type.
    OutOfRange(&'static str),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::BufferTooSmall => f.write_str("output buffer too small"),
            EncodeError::FrameTooLong => f.write_str("frame would exceed 16 MiB"),
            EncodeError::OutOfRange(k) => write!(f, "{k} out of range for this format"),
        }
    }
}

impl core::error::Error for EncodeError {}

/// A frame's header and its typed custom header decoded in one pass (e.g.
/// [`headers::SendMessageRequestHeaderV2::decode_frame`]) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum HeaderError {
    /// The command header itself is malformed.
    Decode(DecodeError),
    /// The header is fine but the custom header's fields are not.
    Field(FieldError),
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Decode(e) => fmt::Display::fmt(e, f),
            HeaderError::Field(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl core::error::Error for HeaderError {}

/// A typed custom header could not be built from a decoded header's ext fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum FieldError {
    /// A required key is missing (Java: "the custom field `<x>` is null").
    Missing(&'static str),
    /// A value does not parse as the field's type.
    Invalid(&'static str),
    /// A string value has escapes and the [`Scratch`] was too small to unescape it, or it is
    /// not valid UTF-8.
    Unescape(&'static str),
}

impl FieldError {
    /// The ext-field key concerned.
    pub const fn key(&self) -> &'static str {
        match *self {
            FieldError::Missing(k) | FieldError::Invalid(k) | FieldError::Unescape(k) => k,
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldError::Missing(k) => write!(f, "the custom field {k} is missing"),
            FieldError::Invalid(k) => write!(f, "the custom field {k} is malformed"),
            FieldError::Unescape(k) => write!(f, "the custom field {k} cannot be unescaped"),
        }
    }
}

impl core::error::Error for FieldError {}
