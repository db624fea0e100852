//! `sysFlag` bits and the body compression type (`docs/protocol/WIRE.md` §10; Java `MessageSysFlag`).
//!
//! `sysFlag` travels in the send header (`sysFlag`/`f`) and in every stored record. It is not
//! the application `flag`, which the broker stores verbatim.

use core::fmt;
use core::ops::{BitOr, BitOrAssign};

/// The message `sysFlag` word.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SysFlag(pub i32);

impl SysFlag {
    /// No bits set.
    pub const NONE: SysFlag = SysFlag(0);
    /// The body is compressed (client).
    pub const COMPRESSED: SysFlag = SysFlag(0x1);
    /// The topic filter type is MULTI_TAG (broker).
    pub const MULTI_TAGS: SysFlag = SysFlag(0x2);
    /// Transaction type: not a transaction message (the value of the 2-bit field).
    pub const TRANSACTION_NOT_TYPE: SysFlag = SysFlag(0x0);
    /// Transaction type: half message (client, when `TRAN_MSG=true`).
    pub const TRANSACTION_PREPARED_TYPE: SysFlag = SysFlag(0x4);
    /// Transaction type: commit (also the `commitOrRollback` header value).
    pub const TRANSACTION_COMMIT_TYPE: SysFlag = SysFlag(0x8);
    /// Transaction type: rollback (also the `commitOrRollback` header value).
    pub const TRANSACTION_ROLLBACK_TYPE: SysFlag = SysFlag(0xC);
    /// Mask of the transaction type field (bits 2–3).
    pub const TRANSACTION_MASK: i32 = 0xC;
    /// The born host is IPv6 (broker; changes the stored layout).
    pub const BORNHOST_V6: SysFlag = SysFlag(0x10);
    /// The store host is IPv6 (broker; changes the stored layout).
    pub const STOREHOSTADDRESS_V6: SysFlag = SysFlag(0x20);
    /// Inner-batch record that needs unwrapping (broker, 4.9.4+/5.x).
    pub const NEED_UNWRAP: SysFlag = SysFlag(0x40);
    /// Inner-batch record (broker, 4.9.4+/5.x).
    pub const INNER_BATCH: SysFlag = SysFlag(0x80);
    /// Compression type LZ4 (type field value 1).
    pub const COMPRESSION_LZ4_TYPE: SysFlag = SysFlag(0x100);
    /// Compression type zstd (type field value 2).
    pub const COMPRESSION_ZSTD_TYPE: SysFlag = SysFlag(0x200);
    /// Compression type zlib (type field value 3; value 0 also means zlib).
    pub const COMPRESSION_ZLIB_TYPE: SysFlag = SysFlag(0x300);
    /// Mask of the compression type field (bits 8–10).
    pub const COMPRESSION_TYPE_MASK: i32 = 0x700;

    /// The raw word.
    pub const fn bits(self) -> i32 {
        self.0
    }

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: SysFlag) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether the body is compressed (bit `0x1`).
    pub const fn is_compressed(self) -> bool {
        self.contains(SysFlag::COMPRESSED)
    }

    /// The compression algorithm named by the type bits (`(f & 0x700) >> 8`); meaningful only
    /// when [`is_compressed`](Self::is_compressed). 0 and 3 both mean zlib (0 is what
    /// pre-4.9.4 Java clients and Go produce).
    ///
    /// # Errors
    ///
    /// [`UnknownCompressionType`] for type values 4..=7.
    pub const fn compression_type(self) -> Result<CompressionType, UnknownCompressionType> {
        match (self.0 & Self::COMPRESSION_TYPE_MASK) >> 8 {
            0 | 3 => Ok(CompressionType::Zlib),
            1 => Ok(CompressionType::Lz4),
            2 => Ok(CompressionType::Zstd),
            other => Err(UnknownCompressionType(other as u8)),
        }
    }

    /// Sets the compressed bit and the type bits for `ty`, clearing any previous type. Java
    /// 4.9.4+ sends `0x301` for a default (zlib) compressed message.
    #[must_use]
    pub const fn with_compression(self, ty: CompressionType) -> SysFlag {
        SysFlag((self.0 & !Self::COMPRESSION_TYPE_MASK) | Self::COMPRESSED.0 | ty.type_bits())
    }

    /// Clears the compressed bit and the type bits (as Java does after decompressing).
    #[must_use]
    pub const fn without_compression(self) -> SysFlag {
        SysFlag(self.0 & !(Self::COMPRESSION_TYPE_MASK | Self::COMPRESSED.0))
    }

    /// The transaction type field (bits 2–3).
    pub const fn transaction_type(self) -> TransactionType {
        match self.0 & Self::TRANSACTION_MASK {
            0x4 => TransactionType::Prepared,
            0x8 => TransactionType::Commit,
            0xC => TransactionType::Rollback,
            _ => TransactionType::NotType,
        }
    }

    /// Replaces the transaction type field.
    #[must_use]
    pub const fn with_transaction_type(self, ty: TransactionType) -> SysFlag {
        SysFlag((self.0 & !Self::TRANSACTION_MASK) | ty.bits())
    }

    /// Whether the born host is IPv6 (`0x10`).
    pub const fn is_born_host_v6(self) -> bool {
        self.contains(SysFlag::BORNHOST_V6)
    }

    /// Whether the store host is IPv6 (`0x20`).
    pub const fn is_store_host_v6(self) -> bool {
        self.contains(SysFlag::STOREHOSTADDRESS_V6)
    }

    /// Sets or clears the born-host IPv6 bit.
    #[must_use]
    pub const fn with_born_host_v6(self, v6: bool) -> SysFlag {
        self.with_bit(Self::BORNHOST_V6, v6)
    }

    /// Sets or clears the store-host IPv6 bit.
    #[must_use]
    pub const fn with_store_host_v6(self, v6: bool) -> SysFlag {
        self.with_bit(Self::STOREHOSTADDRESS_V6, v6)
    }

    const fn with_bit(self, bit: SysFlag, on: bool) -> SysFlag {
        if on {
            SysFlag(self.0 | bit.0)
        } else {
            SysFlag(self.0 & !bit.0)
        }
    }

    /// Whether this is a 5.x inner-batch record whose body is a §11 batch to unwrap (both
    /// `INNER_BATCH` and `NEED_UNWRAP` set, as Java's consumer checks).
    pub const fn needs_batch_unwrap(self) -> bool {
        self.contains(SysFlag(SysFlag::INNER_BATCH.0 | SysFlag::NEED_UNWRAP.0))
    }
}

impl BitOr for SysFlag {
    type Output = SysFlag;
    fn bitor(self, rhs: SysFlag) -> SysFlag {
        SysFlag(self.0 | rhs.0)
    }
}

impl BitOrAssign for SysFlag {
    fn bitor_assign(&mut self, rhs: SysFlag) {
        self.0 |= rhs.0;
    }
}

impl From<i32> for SysFlag {
    fn from(v: i32) -> Self {
        SysFlag(v)
    }
}

impl From<SysFlag> for i32 {
    fn from(v: SysFlag) -> i32 {
        v.0
    }
}

impl fmt::Debug for SysFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SysFlag({:#x})", self.0)
    }
}

/// The body compression algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CompressionType {
    /// zlib stream (RFC 1950, with header and Adler-32), not raw deflate or gzip. Java's
    /// default, level 5.
    Zlib,
    /// LZ4 frame format.
    Lz4,
    /// zstd frame.
    Zstd,
}

impl CompressionType {
    /// The type bits this algorithm sets in `sysFlag` (`0x300`, `0x100`, `0x200`).
    pub const fn type_bits(self) -> i32 {
        match self {
            CompressionType::Zlib => SysFlag::COMPRESSION_ZLIB_TYPE.0,
            CompressionType::Lz4 => SysFlag::COMPRESSION_LZ4_TYPE.0,
            CompressionType::Zstd => SysFlag::COMPRESSION_ZSTD_TYPE.0,
        }
    }
}

/// The `sysFlag` compression type field holds a value Java does not define (4..=7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct UnknownCompressionType(pub u8);

impl fmt::Display for UnknownCompressionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown compression type {} in sysFlag", self.0)
    }
}

impl core::error::Error for UnknownCompressionType {}

/// The transaction type field of `sysFlag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TransactionType {
    /// Not a transaction message (`0x0`).
    NotType,
    /// Half message (`0x4`).
    Prepared,
    /// Commit (`0x8`).
    Commit,
    /// Rollback (`0xC`).
    Rollback,
}

impl TransactionType {
    /// The field value (`0x0`, `0x4`, `0x8`, `0xC`), also the END_TRANSACTION
    /// `commitOrRollback` value.
    pub const fn bits(self) -> i32 {
        match self {
            TransactionType::NotType => 0x0,
            TransactionType::Prepared => 0x4,
            TransactionType::Commit => 0x8,
            TransactionType::Rollback => 0xC,
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn compression_type_decode() {
        assert_eq!(SysFlag(0x1).compression_type(), Ok(CompressionType::Zlib));
        assert_eq!(SysFlag(0x301).compression_type(), Ok(CompressionType::Zlib));
        assert_eq!(SysFlag(0x101).compression_type(), Ok(CompressionType::Lz4));
        assert_eq!(SysFlag(0x201).compression_type(), Ok(CompressionType::Zstd));
        for t in 4..8u8 {
            assert_eq!(
                SysFlag((i32::from(t) << 8) | 1).compression_type(),
                Err(UnknownCompressionType(t))
            );
        }
        assert_eq!(
            SysFlag(-1).compression_type(),
            Err(UnknownCompressionType(7))
        );
        assert!(SysFlag(0x301).is_compressed());
        assert!(!SysFlag(0x300).is_compressed());
    }

    #[test]
    fn producer_flags_match_wire() {
        // A default compressed send is 769; a compressed half message 773.
        let plain = SysFlag::NONE.with_compression(CompressionType::Zlib);
        assert_eq!(plain.bits(), 769);
        let half = SysFlag::NONE
            .with_transaction_type(TransactionType::Prepared)
            .with_compression(CompressionType::Zlib);
        assert_eq!(half.bits(), 773);
        assert_eq!(half.transaction_type(), TransactionType::Prepared);
        assert_eq!(
            SysFlag(0x301).with_compression(CompressionType::Lz4).bits(),
            0x101
        );
        assert_eq!(SysFlag(0x325).without_compression().bits(), 0x24);
        assert_eq!(TransactionType::Rollback.bits(), 0xC);
        assert_eq!(
            SysFlag(0x4)
                .with_transaction_type(TransactionType::Commit)
                .transaction_type(),
            TransactionType::Commit
        );
        assert_eq!(SysFlag(0x3).transaction_type(), TransactionType::NotType);
    }

    #[test]
    fn host_and_batch_bits() {
        let f = SysFlag::NONE
            .with_born_host_v6(true)
            .with_store_host_v6(true);
        assert_eq!(f.bits(), 0x30);
        assert!(f.is_born_host_v6() && f.is_store_host_v6());
        assert_eq!(f.with_born_host_v6(false).bits(), 0x20);
        assert!(!SysFlag(0x80).needs_batch_unwrap());
        assert!((SysFlag::INNER_BATCH | SysFlag::NEED_UNWRAP).needs_batch_unwrap());
        let mut g = SysFlag::MULTI_TAGS;
        g |= SysFlag::COMPRESSED;
        assert_eq!(i32::from(g), 3);
        assert_eq!(format!("{g:?}"), "SysFlag(0x3)");
    }
}
