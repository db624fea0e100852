//! offsetMsgId, the broker message id (`docs/protocol/WIRE.md` §9.4; Java `MessageDecoder.createMessageId`).
//!
//! ```text
//! store host IP (4 or 16 bytes) | store host port (i32) | commit-log offset (i64)
//! ```
//! 16 or 28 bytes as upper-case hex (32 or 56 characters). The broker returns it as `msgId`
//! in the send response (comma-separated for a batch); for pulled messages the client
//! computes it from the store host and physical offset ([`StoredMessage::offset_msg_id`]).
//!
//! [`StoredMessage::offset_msg_id`]: super::stored::StoredMessage::offset_msg_id
//!
//! ```
//! use rmq_core::message::OffsetMsgId;
//!
//! let id: OffsetMsgId = "0A00000500002A9F0000000000012345".parse().unwrap();
//! assert_eq!(id.store_host, "10.0.0.5:10911".parse().unwrap());
//! assert_eq!(id.commit_log_offset, 0x12345);
//! assert_eq!(id.to_hex(), "0A00000500002A9F0000000000012345");
//! ```

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use core::str::FromStr;

use super::codec::{Reader, Writer};
use super::hex::{self, HexId};
use super::{BufferTooSmall, IdParseError};

/// A broker message id: where the message is stored and at which commit-log offset.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct OffsetMsgId {
    /// The broker's store address (IPv4 or IPv6, and port).
    pub store_host: SocketAddr,
    /// The message's physical offset in the commit log.
    pub commit_log_offset: i64,
}

impl OffsetMsgId {
    /// An id from its parts.
    pub const fn new(store_host: SocketAddr, commit_log_offset: i64) -> Self {
        OffsetMsgId {
            store_host,
            commit_log_offset,
        }
    }

    /// Raw length: 16 (IPv4 store host) or 28 (IPv6).
    pub fn raw_len(&self) -> usize {
        match self.store_host {
            SocketAddr::V4(_) => 16,
            SocketAddr::V6(_) => 28,
        }
    }

    /// Length of the hex form: 32 or 56.
    pub fn hex_len(&self) -> usize {
        self.raw_len() * 2
    }

    /// The raw bytes, in the front of a 28-byte array; the length is [`raw_len`](Self::raw_len).
    pub fn to_bytes(&self) -> [u8; 28] {
        let mut raw = [0u8; 28];
        let mut w = Writer::new(&mut raw);
        // 28 bytes always hold the widest form, so these writes cannot fail.
        let _ = match self.store_host.ip() {
            IpAddr::V4(v4) => w.put(&v4.octets()),
            IpAddr::V6(v6) => w.put(&v6.octets()),
        };
        let _ = w.put_i32(i32::from(self.store_host.port()));
        let _ = w.put_i64(self.commit_log_offset);
        raw
    }

    /// Writes the upper-case hex form into the front of `buf`; returns [`hex_len`](Self::hex_len).
    ///
    /// # Errors
    ///
    /// [`BufferTooSmall`] if `buf` is shorter than [`hex_len`](Self::hex_len).
    pub fn write_hex(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let raw = self.to_bytes();
        hex::encode_upper(raw.get(..self.raw_len()).unwrap_or_default(), buf)
    }

    /// The upper-case hex form, inline.
    pub fn to_hex(&self) -> HexId {
        let raw = self.to_bytes();
        HexId::from_raw(raw.get(..self.raw_len()).unwrap_or_default())
    }

    /// Parses the hex form, either case: 32 characters is an IPv4 store host, 56 is IPv6.
    ///
    /// # Errors
    ///
    /// [`IdParseError::BadLength`] for any other length, [`IdParseError::BadHex`] for a
    /// non-hex character, [`IdParseError::PortOutOfRange`] for a port outside `0..=65535`.
    pub fn parse(text: &str) -> Result<Self, IdParseError> {
        let raw_len = match text.len() {
            32 => 16,
            56 => 28,
            _ => return Err(IdParseError::BadLength),
        };
        let mut raw = [0u8; 28];
        let raw = raw.get_mut(..raw_len).ok_or(IdParseError::BadLength)?;
        hex::decode(text.as_bytes(), raw)?;
        Self::from_bytes(raw)
    }

    /// An id from its raw 16 or 28 bytes.
    ///
    /// # Errors
    ///
    /// [`IdParseError::BadLength`] or [`IdParseError::PortOutOfRange`].
    pub fn from_bytes(raw: &[u8]) -> Result<Self, IdParseError> {
        let mut r = Reader::new(raw);
        let ip = match raw.len() {
            16 => r.array::<4>().map(|a| IpAddr::V4(Ipv4Addr::from(a))),
            28 => r.array::<16>().map(|a| IpAddr::V6(Ipv6Addr::from(a))),
            _ => None,
        }
        .ok_or(IdParseError::BadLength)?;
        let port = r.i32().ok_or(IdParseError::BadLength)?;
        let offset = r.i64().ok_or(IdParseError::BadLength)?;
        let port = u16::try_from(port).map_err(|_| IdParseError::PortOutOfRange)?;
        Ok(OffsetMsgId::new(SocketAddr::new(ip, port), offset))
    }
}

impl fmt::Display for OffsetMsgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl FromStr for OffsetMsgId {
    type Err = IdParseError;
    fn from_str(s: &str) -> Result<Self, IdParseError> {
        OffsetMsgId::parse(s)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wire_example() {
        let id = OffsetMsgId::parse("0A00000500002A9F0000000000012345").unwrap();
        assert_eq!(
            id.store_host,
            SocketAddr::new(Ipv4Addr::new(10, 0, 0, 5).into(), 10911)
        );
        assert_eq!(id.commit_log_offset, 74565);
        assert_eq!(id.to_hex(), "0A00000500002A9F0000000000012345");
        assert_eq!(
            OffsetMsgId::parse("0a00000500002a9f0000000000012345"),
            Ok(id)
        );
        let mut buf = [0xa5u8; 33];
        assert_eq!(id.write_hex(&mut buf), Ok(32));
        assert_eq!(&buf[..32], b"0A00000500002A9F0000000000012345");
        assert_eq!(buf[32], 0xa5);
        for n in 0..32 {
            assert_eq!(id.write_hex(&mut buf[..n]), Err(BufferTooSmall));
        }
    }

    #[test]
    fn ipv6_is_56_chars() {
        let host: SocketAddr = "[2001:db8::5]:10911".parse().unwrap();
        let id = OffsetMsgId::new(host, -1);
        let hex = id.to_hex();
        assert_eq!(
            hex.as_str(),
            "20010DB8000000000000000000000005".to_string() + "00002A9F" + "FFFFFFFFFFFFFFFF"
        );
        assert_eq!(OffsetMsgId::parse(&hex), Ok(id));
        let mut buf = [0u8; 56];
        for n in 0..56 {
            assert_eq!(id.write_hex(&mut buf[..n]), Err(BufferTooSmall));
        }
    }

    #[test]
    fn parse_errors() {
        assert_eq!(OffsetMsgId::parse(""), Err(IdParseError::BadLength));
        assert_eq!(
            OffsetMsgId::parse(&"0".repeat(31)),
            Err(IdParseError::BadLength)
        );
        assert_eq!(
            OffsetMsgId::parse(&"0".repeat(40)),
            Err(IdParseError::BadLength)
        );
        assert_eq!(
            OffsetMsgId::parse(&"0".repeat(57)),
            Err(IdParseError::BadLength)
        );
        assert_eq!(
            OffsetMsgId::parse("0A00000500002A9F000000000001234x"),
            Err(IdParseError::BadHex)
        );
        // Port 0x00010000 does not fit a u16.
        assert_eq!(
            OffsetMsgId::parse("0A000005000100000000000000012345"),
            Err(IdParseError::PortOutOfRange)
        );
        assert_eq!(
            OffsetMsgId::parse("0A000005FFFFFFFF0000000000012345"),
            Err(IdParseError::PortOutOfRange)
        );
        assert_eq!(
            OffsetMsgId::from_bytes(&[0; 20]),
            Err(IdParseError::BadLength)
        );
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(
            v6 in any::<bool>(),
            ip4 in any::<[u8; 4]>(),
            ip6 in any::<[u8; 16]>(),
            port in any::<u16>(),
            offset in any::<i64>(),
            lower in any::<bool>(),
        ) {
            let ip = if v6 { IpAddr::V6(ip6.into()) } else { IpAddr::V4(ip4.into()) };
            let id = OffsetMsgId::new(SocketAddr::new(ip, port), offset);
            let text = id.to_hex();
            prop_assert_eq!(text.len(), id.hex_len());
            let text = if lower { text.to_ascii_lowercase() } else { text.to_string() };
            prop_assert_eq!(OffsetMsgId::parse(&text), Ok(id));
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,60}") {
            if let Ok(id) = OffsetMsgId::parse(&s) {
                prop_assert!(id.to_hex().eq_ignore_ascii_case(&s));
            }
        }

        #[test]
        fn parse_never_panics_on_hexish(s in "[0-9a-fA-F]{32}|[0-9a-fA-F]{56}") {
            // Valid hex of the right length only fails on the port.
            match OffsetMsgId::parse(&s) {
                Ok(id) => prop_assert!(id.to_hex().eq_ignore_ascii_case(&s)),
                Err(e) => prop_assert_eq!(e, IdParseError::PortOutOfRange),
            }
        }
    }
}
