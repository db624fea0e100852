//! An allocation-free, fastjson-tolerant JSON pull parser and a JSON string writer.
//!
//! RocketMQ's Java side speaks JSON through fastjson 1.x, which is more lenient than RFC 8259.
//! This module reads what fastjson writes and what its default parser features accept:
//!
//! - any key order; unknown keys can be skipped with [`Parser::skip_value`];
//! - **bare object keys**: integers (optionally negative), as in the legacy route encoding
//!   `{"brokerAddrs":{0:"10.0.0.5:10911"}}`, and identifiers (`{code:105}`);
//! - **objects as keys**, as fastjson writes `MessageQueue` map keys
//!   (`{{"brokerName":"b","queueId":0,"topic":"T"}:{…}}`): the key is the object's source text,
//!   read with a parser of its own (an object key inside one is an error);
//! - single-quoted strings (`'abc'`, where `\'` is a valid escape);
//! - a trailing comma before `}` or `]`.
//!
//! Nesting is tracked with a bit stack, never with recursion, and is limited to [`MAX_DEPTH`]
//! levels ([`JsonErrorKind::TooDeep`]), so hostile input cannot exhaust the stack.
//!
//! Strings are returned as [`JsonStr`]: the raw bytes between the quotes plus a flag telling
//! whether they contain escapes. Comparing ([`JsonStr::eq_str`]), measuring and unescaping
//! ([`JsonStr::unescape_into`]) work without allocating. UTF-8 is validated lazily, only when
//! a `&str` is asked for.
//!
//! # Example
//!
//! ```
//! use rmq_core::json::Parser;
//!
//! let mut p = Parser::new(br#"{"brokerAddrs":{0:"10.0.0.5:10911",1:"10.0.0.6:10911"},"x":[1,2]}"#);
//! p.expect_object_start()?;
//! let mut master = None;
//! while let Some(key) = p.next_key()? {
//!     if key.eq_str("brokerAddrs") {
//!         p.expect_object_start()?;
//!         while let Some(id) = p.next_key()? {
//!             let addr = p.string()?;
//!             if id.parse_i64() == Some(0) {
//!                 master = addr.as_str();
//!             }
//!         }
//!     } else {
//!         p.skip_value()?;
//!     }
//! }
//! p.finish()?;
//! assert_eq!(master, Some("10.0.0.5:10911"));
//! # Ok::<(), rmq_core::json::JsonError>(())
//! ```
//!
//! Writing: [`SliceWriter`] is a cursor over a caller buffer with a sticky overflow flag;
//! [`SliceWriter::put_json_str`] writes a quoted, escaped string exactly as fastjson does and
//! [`json_str_len`] gives its length in advance.
//!
//! # Files
//!
//! - `mod.rs`: these docs, [`MAX_DEPTH`], the error types and the re-exports;
//! - `string.rs`: [`JsonStr`] and [`JsonChars`], borrowed strings and their escape decoding;
//! - `number.rs`: [`JsonNumber`], [`parse_i64_ascii`] and decimal formatting;
//! - `parser.rs`: the pull [`Parser`] and its [`Token`]s;
//! - `compact.rs`: the strict scanner of the compact JSON Java writes (the headers' fast path);
//! - `scan.rs`: the scanners of already validated ext-field objects (fast on 64-bit targets,
//!   through the parser elsewhere);
//! - `writer.rs`: [`SliceWriter`] and fastjson's string escaping ([`json_str_len`]);
//! - `bytes.rs`: word-at-a-time (SWAR) byte searches and small copies shared by both sides;
//! - `tests.rs`: the unit and property tests.

use core::fmt;

mod bytes;
mod compact;
mod number;
mod parser;
mod scan;
mod string;
#[cfg(test)]
mod tests;
mod writer;

pub(crate) use compact::Compact;
pub use number::{JsonNumber, i64_dec_len, parse_i64_ascii};
pub(crate) use number::{fmt_i64, small_dec};
pub use parser::{Parser, Token};
pub(crate) use scan::{ExtScan, FlatValue};
// The header tests compare the fast scanner with this reference.
#[cfg(test)]
pub(crate) use scan::ParsedScan;
pub use string::{JsonChars, JsonStr};
pub use writer::{BufferTooSmall, SliceWriter, json_str_len};

/// Maximum nesting depth of objects and arrays accepted by [`Parser`].
pub const MAX_DEPTH: usize = 32;

/// What went wrong while tokenizing or unescaping JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum JsonErrorKind {
    /// The input ended in the middle of a value.
    UnexpectedEnd,
    /// A byte that cannot start or continue the expected token.
    UnexpectedByte,
    /// A backslash escape that JSON does not define, or a bad `\u` hex sequence.
    InvalidEscape,
    /// A `\u` escape naming half of a surrogate pair without the other half.
    LoneSurrogate,
    /// A malformed number.
    InvalidNumber,
    /// Objects/arrays nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Non-whitespace after the top-level value.
    TrailingData,
    /// The string is not valid UTF-8.
    InvalidUtf8,
    /// The caller's output buffer is too small.
    BufferTooSmall,
    /// A well-formed token of the wrong kind for the call (e.g. a number where
    /// [`Parser::string`] expected a string).
    UnexpectedToken,
}

/// A JSON error: its kind and the byte offset in the input where it was detected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct JsonError {
    /// What went wrong.
    pub kind: JsonErrorKind,
    /// Byte offset in the parsed input (0 for errors not tied to a position).
    pub offset: usize,
}

impl JsonError {
    const fn new(kind: JsonErrorKind, offset: usize) -> Self {
        JsonError { kind, offset }
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            JsonErrorKind::UnexpectedEnd => "unexpected end of JSON input",
            JsonErrorKind::UnexpectedByte => "unexpected byte in JSON",
            JsonErrorKind::InvalidEscape => "invalid escape in JSON string",
            JsonErrorKind::LoneSurrogate => "lone UTF-16 surrogate in JSON string",
            JsonErrorKind::InvalidNumber => "invalid JSON number",
            JsonErrorKind::TooDeep => "JSON nested too deeply",
            JsonErrorKind::TrailingData => "trailing data after JSON value",
            JsonErrorKind::InvalidUtf8 => "JSON string is not valid UTF-8",
            JsonErrorKind::BufferTooSmall => "buffer too small for unescaped JSON string",
            JsonErrorKind::UnexpectedToken => "unexpected JSON token",
        };
        write!(f, "{what} at byte {}", self.offset)
    }
}

impl core::error::Error for JsonError {}

type Result<T> = core::result::Result<T, JsonError>;
