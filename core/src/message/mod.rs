//! Message pieces: properties, ids, sysFlag, batch bodies, stored records, validation.
//!
//! Everything here follows `docs/protocol/WIRE.md` §9–§13 (the byte-level facts restated from the Apache
//! RocketMQ Java client and broker, 4.9.x and 5.x). All of it is `no_std`, allocation-free and
//! panic-free on any input:
//!
//! - [`properties`]: the `key 0x01 value 0x02 …` properties string. An encoder into a caller
//!   buffer with an exact [`properties::EncodeProperties::encoded_len`], a borrowing decoder
//!   ([`properties::PropertiesRef`]) and a fixed-capacity collection
//!   ([`properties::Properties`]).
//! - [`keys`]: the property key strings and the reserved set that `putUserProperty` rejects.
//! - [`uniq_key`]: the client message id (`UNIQ_KEY`), its generator and the
//!   "milliseconds since the start of the month" clock helper.
//! - [`msg_id`]: the broker message id (offsetMsgId).
//! - [`sysflag`]: the `sysFlag` bits and the compression type.
//! - [`batch`]: the SEND_BATCH_MESSAGE body (encoder and decoder).
//! - [`stored`]: the stored-message records of a PULL body (decoder, plus an encoder for
//!   tests and fake brokers).
//! - [`validate`]: the client-side checks Java applies before sending.
//!
//! Encoders write into a caller `&mut [u8]` and report the exact length they need up front;
//! a buffer one byte short fails cleanly with a "buffer too small" error and never panics
//! (the buffer contents are then unspecified). Decoders borrow from their input.

use core::fmt;

pub mod batch;
pub mod batch_rules;
mod codec;
mod hex;
pub mod keys;
pub mod msg_id;
pub mod properties;
pub mod stored;
pub mod sysflag;
pub mod uniq_key;
pub mod validate;

pub use batch::{BatchMessage, BatchRecord, decode_batch, encode_batch};
pub use hex::HexId;
pub use msg_id::OffsetMsgId;
pub use properties::{EncodeProperties, Properties, PropertiesEncoder, PropertiesRef};
pub use stored::{StoredMessage, StoredMessages, decode_stored};
pub use sysflag::{CompressionType, SysFlag, TransactionType};
pub use uniq_key::{UniqKey, UniqKeyGenerator, millis_since_month_start};

/// The caller's output buffer is shorter than the encoding needs.
///
/// Resource error: size the buffer with the encoder's exact-length function and retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BufferTooSmall;

impl fmt::Display for BufferTooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("output buffer too small")
    }
}

impl core::error::Error for BufferTooSmall {}

/// Why a hex message id (UNIQ_KEY or offsetMsgId) could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum IdParseError {
    /// The text is not 32 (IPv4) or 56 (IPv6) characters long (or the raw id is not 16 or 28
    /// bytes).
    BadLength,
    /// A character is not a hex digit.
    BadHex,
    /// The port field of an offsetMsgId is outside `0..=65535`.
    PortOutOfRange,
}

impl fmt::Display for IdParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdParseError::BadLength => "message id must be 32 or 56 hex characters",
            IdParseError::BadHex => "message id contains a non-hex character",
            IdParseError::PortOutOfRange => "message id port is outside 0..=65535",
        })
    }
}

impl core::error::Error for IdParseError {}
