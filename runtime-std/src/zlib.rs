//! Message body compression: zlib (RFC 1950) with a reused compressor, and the LZ4 and zstd
//! frames of the 4.9.4+/5.x compression types (features `lz4`, `zstd`).
//!
//! zlib is zlib-rs (through flate2): on 16 KiB bodies it compresses 1.5–2.4× faster than
//! miniz_oxide at the same level (`bench-peers/zlib`, BENCHMARKS.md). Each thread keeps one
//! compressor per level and resets it, so a body costs only the deflate work, not building
//! and zeroing a compressor's tables (~15 % of the samples of the 16 KiB cells with
//! miniz_oxide's one-shot API).

use std::cell::RefCell;

use flate2::{Compress, Compression, FlushCompress, Status};
use rmq_core::message::CompressionType;

thread_local! {
    static COMPRESSOR: RefCell<Option<(u8, Compress)>> = const { RefCell::new(None) };
}

/// Highest zlib level (Java's `Deflater.BEST_COMPRESSION`); higher ones are clamped to it.
pub const MAX_ZLIB_LEVEL: u8 = 9;

/// Compresses `input` as a zlib stream (2-byte header, deflate, Adler-32) at `level` (0..=9),
/// as `java.util.zip.Deflater` with its default wrapper.
pub fn compress_zlib(input: &[u8], level: u8) -> Vec<u8> {
    let level = level.min(MAX_ZLIB_LEVEL);
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        match slot.as_mut() {
            Some((l, c)) if *l == level => c.reset(),
            _ => *slot = Some((level, Compress::new(Compression::new(level.into()), true))),
        }
        let mut out = Vec::with_capacity(input.len() / 2 + 128);
        let Some((_, c)) = slot.as_mut() else {
            return out;
        };
        loop {
            let consumed = usize::try_from(c.total_in()).unwrap_or(usize::MAX);
            let rest = input.get(consumed..).unwrap_or(&[]);
            match c.compress_vec(rest, &mut out, FlushCompress::Finish) {
                Ok(Status::StreamEnd) => return out,
                // Out of room: grow and go on.
                Ok(Status::Ok | Status::BufError) => out.reserve(out.capacity().max(256)),
                // Not reachable with valid parameters: a fresh compressor next time.
                Err(_) => {
                    *slot = None;
                    return one_shot(input, level);
                }
            }
        }
    })
}

/// zlib with a new compressor (the fallback of [`compress_zlib`]).
fn one_shot(input: &[u8], level: u8) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), Compression::new(level.into()));
    let _ = enc.write_all(input);
    enc.finish().unwrap_or_default()
}

/// Inflates a zlib stream; `None` when it does not decode (or is truncated).
pub fn decompress_zlib(input: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::with_capacity(input.len().saturating_mul(4).clamp(64, 1 << 20));
    flate2::read::ZlibDecoder::new(input)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

/// Compresses `input` with `ty` (Java's `Compressor`s): zlib at `level`, LZ4 frame (lz4-java
/// `LZ4FrameOutputStream` has no level either), zstd frame at `level`. `None` when this build
/// lacks the type's feature (the producer's configuration check refuses that earlier).
pub fn compress_body(ty: CompressionType, input: &[u8], level: u8) -> Option<Vec<u8>> {
    match ty {
        CompressionType::Zlib => Some(compress_zlib(input, level)),
        #[cfg(feature = "lz4")]
        CompressionType::Lz4 => {
            use std::io::Write;
            let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::with_capacity(input.len()));
            enc.write_all(input).ok()?;
            enc.finish().ok()
        }
        #[cfg(feature = "zstd")]
        CompressionType::Zstd => zstd::bulk::compress(input, i32::from(level)).ok(),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// Whether this build can compress and decompress `ty`.
pub fn available(ty: CompressionType) -> bool {
    match ty {
        CompressionType::Zlib => true,
        CompressionType::Lz4 => cfg!(feature = "lz4"),
        CompressionType::Zstd => cfg!(feature = "zstd"),
    }
}

/// Inflates a pulled body compressed with `ty`; `None` when it does not decode (or this build
/// lacks the type's feature).
pub fn decompress_body(ty: CompressionType, input: &[u8]) -> Option<Vec<u8>> {
    match ty {
        CompressionType::Zlib => decompress_zlib(input),
        #[cfg(feature = "lz4")]
        CompressionType::Lz4 => {
            use std::io::Read;
            let mut out = Vec::with_capacity(input.len() * 4);
            lz4_flex::frame::FrameDecoder::new(input)
                .read_to_end(&mut out)
                .ok()?;
            Some(out)
        }
        #[cfg(feature = "zstd")]
        CompressionType::Zstd => zstd::stream::decode_all(input).ok(),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

#[cfg(test)]
mod tests;
