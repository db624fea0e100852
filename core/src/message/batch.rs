//! The SEND_BATCH_MESSAGE (320) body (`docs/protocol/WIRE.md` §11; Java `MessageDecoder.encodeMessages`).
//!
//! The body is a concatenation of records:
//! ```text
//! offset size field
//! 0      4    TOTALSIZE   i32 = 22 + bodyLen + propsLen (this record, including itself)
//! 4      4    MAGICCODE   i32 = 0 (unused)
//! 8      4    BODYCRC     i32 = 0 (the broker computes its own)
//! 12     4    FLAG        i32 Message.flag
//! 16     4    BODYLEN     i32
//! 20     n    BODY        (never compressed in batches)
//! 20+n   2    PROPLEN     i16 (<= 32767)
//! 22+n   p    PROPERTIES  §9.1 string
//! ```
//! The same format is the body of a 5.x inner-batch stored record
//! ([`SysFlag::needs_batch_unwrap`](super::SysFlag::needs_batch_unwrap)); [`decode_batch`]
//! reads both.
//!
//! The Java client also enforces rules on the batch as a whole (same topic and `WAIT` for
//! every message, no delay level, no `%RETRY%` topic, each message validated and given its own
//! UNIQ_KEY, and the encoded body itself ≤ `maxMessageSize`); those are the caller's job,
//! using [`super::validate`].

use core::fmt;

use super::codec::{Reader, Writer};
use super::properties::{
    EncodeProperties, InvalidUtf8, MAX_PROPERTIES_LEN, PropertiesError, PropertiesRef,
};

/// Fixed bytes per record besides the body and the properties.
pub const RECORD_OVERHEAD: usize = 22;

/// Why a batch cannot be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum BatchError {
    /// A message's encoded properties exceed 32767 bytes (the `i16` PROPLEN).
    PropertiesTooLong,
    /// A record or the whole batch would exceed `i32::MAX` bytes.
    TooLarge,
    /// A message's properties contain an invalid entry.
    Properties(PropertiesError),
    /// The output buffer is shorter than [`batch_encoded_len`].
    BufferTooSmall,
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::PropertiesTooLong => {
                f.write_str("batch message properties exceed 32767 bytes")
            }
            BatchError::TooLarge => f.write_str("batch record exceeds i32::MAX bytes"),
            BatchError::Properties(e) => write!(f, "batch message properties: {e}"),
            BatchError::BufferTooSmall => f.write_str("output buffer too small for the batch"),
        }
    }
}

impl core::error::Error for BatchError {}

impl From<PropertiesError> for BatchError {
    fn from(e: PropertiesError) -> Self {
        match e {
            PropertiesError::BufferTooSmall => BatchError::BufferTooSmall,
            other => BatchError::Properties(other),
        }
    }
}

/// One message of a batch, to encode.
#[derive(Debug, Clone, Copy)]
pub struct BatchMessage<'a, P> {
    /// `Message.flag`, stored verbatim.
    pub flag: i32,
    /// The body (never compressed in a batch).
    pub body: &'a [u8],
    /// The message's own properties (`WAIT`, `UNIQ_KEY`, tags, keys, user properties).
    pub properties: P,
}

impl<P: EncodeProperties> BatchMessage<'_, P> {
    /// The exact encoded length of this record.
    ///
    /// # Errors
    ///
    /// [`BatchError::PropertiesTooLong`] or [`BatchError::TooLarge`].
    pub fn record_len(&self) -> Result<usize, BatchError> {
        let props = self.properties.encoded_len();
        if props > MAX_PROPERTIES_LEN {
            return Err(BatchError::PropertiesTooLong);
        }
        let len = RECORD_OVERHEAD
            .checked_add(self.body.len())
            .and_then(|n| n.checked_add(props))
            .ok_or(BatchError::TooLarge)?;
        if i32::try_from(len).is_err() {
            return Err(BatchError::TooLarge);
        }
        Ok(len)
    }

    /// Writes this record into the front of `buf`; returns [`record_len`](Self::record_len).
    ///
    /// # Errors
    ///
    /// As [`record_len`](Self::record_len), an invalid property entry, or
    /// [`BatchError::BufferTooSmall`].
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, BatchError> {
        let len = self.record_len()?;
        let props_len = len - RECORD_OVERHEAD - self.body.len();
        let buf = buf.get_mut(..len).ok_or(BatchError::BufferTooSmall)?;
        let mut w = Writer::new(buf);
        let small = |_| BatchError::BufferTooSmall;
        // record_len() bounded len, body and props to i32/i16 ranges.
        w.put_i32(i32::try_from(len).map_err(|_| BatchError::TooLarge)?)
            .map_err(small)?;
        w.put_i32(0).map_err(small)?; // MAGICCODE, unused
        w.put_i32(0).map_err(small)?; // BODYCRC, the broker computes its own
        w.put_i32(self.flag).map_err(small)?;
        w.put_i32(i32::try_from(self.body.len()).map_err(|_| BatchError::TooLarge)?)
            .map_err(small)?;
        w.put(self.body).map_err(small)?;
        w.put_i16(i16::try_from(props_len).map_err(|_| BatchError::PropertiesTooLong)?)
            .map_err(small)?;
        let dst = w.reserve(props_len).map_err(small)?;
        let written = self.properties.encode(dst)?;
        if written != props_len {
            // An EncodeProperties impl disagreed with its own encoded_len().
            return Err(BatchError::Properties(PropertiesError::BufferTooSmall));
        }
        Ok(len)
    }
}

/// The exact encoded length of a batch body.
///
/// # Errors
///
/// As [`BatchMessage::record_len`], or [`BatchError::TooLarge`] when the total exceeds
/// `i32::MAX`.
pub fn batch_encoded_len<'a, P, I>(messages: I) -> Result<usize, BatchError>
where
    P: EncodeProperties,
    I: IntoIterator<Item = BatchMessage<'a, P>>,
{
    let mut total = 0usize;
    for m in messages {
        total = total
            .checked_add(m.record_len()?)
            .ok_or(BatchError::TooLarge)?;
    }
    if i32::try_from(total).is_err() {
        return Err(BatchError::TooLarge);
    }
    Ok(total)
}

/// Encodes a batch body into the front of `buf`; returns its length, which equals
/// [`batch_encoded_len`] of the same messages.
///
/// # Errors
///
/// As [`batch_encoded_len`], an invalid property entry, or [`BatchError::BufferTooSmall`]. On
/// error the contents of `buf` are unspecified.
pub fn encode_batch<'a, P, I>(messages: I, buf: &mut [u8]) -> Result<usize, BatchError>
where
    P: EncodeProperties,
    I: IntoIterator<Item = BatchMessage<'a, P>>,
{
    let mut pos = 0usize;
    for m in messages {
        let rest = buf.get_mut(pos..).ok_or(BatchError::BufferTooSmall)?;
        pos = pos
            .checked_add(m.encode(rest)?)
            .ok_or(BatchError::TooLarge)?;
    }
    if i32::try_from(pos).is_err() {
        return Err(BatchError::TooLarge);
    }
    Ok(pos)
}

/// Why a batch body cannot be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum BatchDecodeError {
    /// The body ends inside a record.
    Truncated,
    /// BODYLEN or PROPLEN is negative.
    NegativeLength,
    /// TOTALSIZE disagrees with the fields it covers.
    BadTotalSize,
}

impl fmt::Display for BatchDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BatchDecodeError::Truncated => "batch body ends inside a record",
            BatchDecodeError::NegativeLength => "batch record has a negative length field",
            BatchDecodeError::BadTotalSize => "batch record TOTALSIZE disagrees with its fields",
        })
    }
}

impl core::error::Error for BatchDecodeError {}

/// One decoded batch record, borrowed from the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRecord<'a> {
    /// MAGICCODE (0 from clients).
    pub magic: i32,
    /// BODYCRC (0 from clients).
    pub body_crc: i32,
    /// `Message.flag`.
    pub flag: i32,
    /// The body.
    pub body: &'a [u8],
    /// The raw properties bytes.
    pub raw_properties: &'a [u8],
}

impl<'a> BatchRecord<'a> {
    /// The properties, decoded.
    ///
    /// # Errors
    ///
    /// [`InvalidUtf8`] if they are not UTF-8.
    pub fn properties(&self) -> Result<PropertiesRef<'a>, InvalidUtf8> {
        PropertiesRef::from_bytes(self.raw_properties)
    }
}

/// Iterator over the records of a batch body; see [`decode_batch`].
#[derive(Debug, Clone)]
pub struct BatchRecords<'a> {
    rest: &'a [u8],
}

/// Decodes a batch body record by record.
///
/// Each record's TOTALSIZE must equal `22 + BODYLEN + PROPLEN`. The first malformed or
/// truncated record yields an error and ends the iteration (Java likewise stops at the first
/// record it cannot read).
pub fn decode_batch(body: &[u8]) -> BatchRecords<'_> {
    BatchRecords { rest: body }
}

impl<'a> BatchRecords<'a> {
    /// The bytes not yet decoded.
    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }

    fn decode_one(&self) -> Result<(BatchRecord<'a>, usize), BatchDecodeError> {
        let mut r = Reader::new(self.rest);
        let t = BatchDecodeError::Truncated;
        let total = r.i32().ok_or(t)?;
        let magic = r.i32().ok_or(t)?;
        let body_crc = r.i32().ok_or(t)?;
        let flag = r.i32().ok_or(t)?;
        let body_len =
            usize::try_from(r.i32().ok_or(t)?).map_err(|_| BatchDecodeError::NegativeLength)?;
        let body = r.take(body_len).ok_or(t)?;
        let props_len =
            usize::try_from(r.i16().ok_or(t)?).map_err(|_| BatchDecodeError::NegativeLength)?;
        let raw_properties = r.take(props_len).ok_or(t)?;
        if usize::try_from(total).ok() != Some(r.pos()) {
            return Err(BatchDecodeError::BadTotalSize);
        }
        let record = BatchRecord {
            magic,
            body_crc,
            flag,
            body,
            raw_properties,
        };
        Ok((record, r.pos()))
    }
}

impl<'a> Iterator for BatchRecords<'a> {
    type Item = Result<BatchRecord<'a>, BatchDecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match self.decode_one() {
            Ok((record, used)) => {
                self.rest = self.rest.get(used..).unwrap_or_default();
                Some(Ok(record))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::message::properties::{Preencoded, PropertiesEncoder, TrailingSeparator};
    use proptest::prelude::*;

    /// docs/protocol/WIRE.md §11 example: two messages, properties without the trailing 0x02 (58 bytes).
    const EXAMPLE: [u8; 58] = [
        0x00, 0x00, 0x00, 0x21, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x68, 0x69, 0x00, 0x09, 0x57, 0x41, 0x49, 0x54, 0x01, 0x74,
        0x72, 0x75, 0x65, // msg1
        0x00, 0x00, 0x00, 0x19, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x03, 0x79, 0x6f, 0x21, 0x00, 0x00, // msg2
    ];

    type Entries<'a> = core::iter::Copied<core::slice::Iter<'a, (&'a str, &'a str)>>;

    fn example_messages<'a>(
        wait: &'a [(&'a str, &'a str)],
    ) -> [BatchMessage<'a, PropertiesEncoder<Entries<'a>>>; 2] {
        let omit = TrailingSeparator::Omit;
        [
            BatchMessage {
                flag: 0,
                body: b"hi",
                properties: PropertiesEncoder::new(wait.iter().copied()).trailing_separator(omit),
            },
            BatchMessage {
                flag: 0,
                body: b"yo!",
                properties: PropertiesEncoder::new([].iter().copied()).trailing_separator(omit),
            },
        ]
    }

    #[test]
    fn wire_example_encodes_byte_for_byte() {
        let wait = [("WAIT", "true")];
        let msgs = example_messages(&wait);
        assert_eq!(batch_encoded_len(msgs.iter().cloned()), Ok(58));
        assert_eq!(msgs[0].record_len(), Ok(33));
        assert_eq!(msgs[1].record_len(), Ok(25));
        let mut buf = [0xa5u8; 60];
        assert_eq!(encode_batch(msgs.iter().cloned(), &mut buf), Ok(58));
        assert_eq!(&buf[..58], &EXAMPLE[..]);
        assert_eq!(&buf[58..], &[0xa5, 0xa5]);

        // Pre-encoded properties give the same bytes.
        let pre = [
            BatchMessage {
                flag: 0,
                body: &b"hi"[..],
                properties: Preencoded(b"WAIT\x01true"),
            },
            BatchMessage {
                flag: 0,
                body: &b"yo!"[..],
                properties: Preencoded(b""),
            },
        ];
        let mut buf2 = [0u8; 58];
        assert_eq!(encode_batch(pre, &mut buf2), Ok(58));
        assert_eq!(buf2, EXAMPLE);
    }

    #[test]
    fn too_small_buffer_fails_at_every_size() {
        let wait = [("WAIT", "true")];
        let mut buf = [0u8; 58];
        for n in 0..58 {
            assert_eq!(
                encode_batch(example_messages(&wait), &mut buf[..n]),
                Err(BatchError::BufferTooSmall),
                "size {n}"
            );
        }
    }

    #[test]
    fn wire_example_decodes() {
        let records: Vec<_> = decode_batch(&EXAMPLE).collect();
        assert_eq!(records.len(), 2);
        let first = records[0].unwrap();
        assert_eq!((first.magic, first.body_crc, first.flag), (0, 0, 0));
        assert_eq!(first.body, b"hi");
        assert_eq!(first.properties().unwrap().get("WAIT"), Some("true"));
        let second = records[1].unwrap();
        assert_eq!(second.body, b"yo!");
        assert!(second.raw_properties.is_empty());
    }

    #[test]
    fn decode_errors_stop_iteration() {
        // Truncated at every length of the first record.
        for n in 1..33 {
            let mut it = decode_batch(&EXAMPLE[..n]);
            assert_eq!(it.next(), Some(Err(BatchDecodeError::Truncated)), "len {n}");
            assert_eq!(it.next(), None);
        }
        // Second record truncated: first decodes, then an error.
        let mut it = decode_batch(&EXAMPLE[..57]);
        assert!(matches!(it.next(), Some(Ok(_))));
        assert_eq!(it.next(), Some(Err(BatchDecodeError::Truncated)));
        assert_eq!(it.next(), None);
        // Wrong TOTALSIZE.
        let mut bad = EXAMPLE;
        bad[3] = 0x22;
        assert_eq!(
            decode_batch(&bad).next(),
            Some(Err(BatchDecodeError::BadTotalSize))
        );
        // Negative BODYLEN and PROPLEN.
        let mut bad = EXAMPLE;
        bad[16] = 0xff;
        assert_eq!(
            decode_batch(&bad).next(),
            Some(Err(BatchDecodeError::NegativeLength))
        );
        let mut bad = EXAMPLE;
        bad[22] = 0x80;
        assert_eq!(
            decode_batch(&bad).next(),
            Some(Err(BatchDecodeError::NegativeLength))
        );
    }

    #[test]
    fn properties_limit_is_checked() {
        let big = [b'x'; MAX_PROPERTIES_LEN + 1];
        let m = BatchMessage {
            flag: 0,
            body: b"b",
            properties: Preencoded(&big),
        };
        assert_eq!(m.record_len(), Err(BatchError::PropertiesTooLong));
        let ok = BatchMessage {
            flag: 0,
            body: b"b",
            properties: Preencoded(&big[1..]),
        };
        assert_eq!(
            ok.record_len(),
            Ok(RECORD_OVERHEAD + 1 + MAX_PROPERTIES_LEN)
        );
        let mut buf = vec![0u8; RECORD_OVERHEAD + 1 + MAX_PROPERTIES_LEN];
        assert_eq!(ok.encode(&mut buf), Ok(buf.len()));
        let rec = decode_batch(&buf).next().unwrap().unwrap();
        assert_eq!(rec.raw_properties.len(), MAX_PROPERTIES_LEN);
        // Invalid entries surface as a properties error.
        let bad = BatchMessage {
            flag: 0,
            body: b"b",
            properties: PropertiesEncoder::new([("k", "")]),
        };
        assert_eq!(
            bad.encode(&mut buf),
            Err(BatchError::Properties(PropertiesError::EmptyValue))
        );
    }

    fn message() -> impl Strategy<Value = (i32, Vec<u8>, Vec<(String, String)>)> {
        (
            any::<i32>(),
            proptest::collection::vec(any::<u8>(), 0..64),
            proptest::collection::vec(("[^\\x01\\x02]{1,8}", "[^\\x01\\x02]{1,8}"), 0..4),
        )
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(msgs in proptest::collection::vec(message(), 0..6)) {
            let batch: Vec<_> = msgs
                .iter()
                .map(|(flag, body, props)| BatchMessage {
                    flag: *flag,
                    body: body.as_slice(),
                    properties: PropertiesEncoder::new(props.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
                })
                .collect();
            let len = batch_encoded_len(batch.iter().cloned()).unwrap();
            let mut buf = vec![0u8; len];
            prop_assert_eq!(encode_batch(batch.iter().cloned(), &mut buf), Ok(len));
            if len > 0 {
                prop_assert_eq!(encode_batch(batch.iter().cloned(), &mut buf[..len - 1]), Err(BatchError::BufferTooSmall));
            }
            let decoded: Vec<_> = decode_batch(&buf).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(decoded.len(), msgs.len());
            for (rec, (flag, body, props)) in decoded.iter().zip(&msgs) {
                prop_assert_eq!(rec.flag, *flag);
                prop_assert_eq!(rec.body, body.as_slice());
                let got: Vec<(String, String)> = rec
                    .properties()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                prop_assert_eq!(&got, props);
            }
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let mut consumed = 0usize;
            for rec in decode_batch(&bytes) {
                match rec {
                    Ok(r) => consumed += RECORD_OVERHEAD + r.body.len() + r.raw_properties.len(),
                    Err(_) => break,
                }
            }
            prop_assert!(consumed <= bytes.len());
        }
    }
}
