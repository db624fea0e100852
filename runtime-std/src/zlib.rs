//! Message body compression: zlib (RFC 1950) with a reused compressor, and the LZ4 and zstd
//! frames of the 4.9.4+/5.x compression types (features `lz4`, `zstd`).
//!
//! `miniz_oxide::deflate::compress_to_vec_zlib` builds (and zeroes) a new compressor of about
//! 300 KiB for every call; profiling the 16 KiB benchmark cells showed about 15 % of the
//! samples in that zeroing. Here each thread keeps one compressor per level and resets it, so a
//! body costs only the deflate work. The output is the same zlib stream (same parameters).

use std::cell::RefCell;

use rmq_core::message::CompressionType;

use miniz_oxide::deflate::core::{
    CompressorOxide, TDEFLFlush, TDEFLStatus, compress, create_comp_flags_from_zip_params,
};

thread_local! {
    static COMPRESSOR: RefCell<Option<(u8, Box<CompressorOxide>)>> = const { RefCell::new(None) };
}

/// Compresses `input` as a zlib stream (2-byte header, deflate, Adler-32) at `level` (0..=10).
pub fn compress_zlib(input: &[u8], level: u8) -> Vec<u8> {
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let reuse = matches!(&*slot, Some((l, _)) if *l == level);
        if !reuse {
            // window_bits > 0 selects the zlib wrapper, as Java's Deflater does by default.
            let flags = create_comp_flags_from_zip_params(level.into(), 1, 0);
            *slot = Some((level, Box::new(CompressorOxide::new(flags))));
        }
        let Some((_, comp)) = slot.as_mut() else {
            return miniz_oxide::deflate::compress_to_vec_zlib(input, level);
        };
        if reuse {
            comp.reset();
        }
        let mut out = vec![0u8; input.len() / 2 + 128];
        let (mut in_pos, mut out_pos) = (0usize, 0usize);
        loop {
            let (status, read, written) = compress(
                comp,
                &input[in_pos..],
                &mut out[out_pos..],
                TDEFLFlush::Finish,
            );
            in_pos += read;
            out_pos += written;
            match status {
                TDEFLStatus::Done => {
                    out.truncate(out_pos);
                    return out;
                }
                TDEFLStatus::Okay => {
                    if out.len() - out_pos < 64 {
                        let grow = out.len().max(256);
                        out.resize(out.len() + grow, 0);
                    }
                }
                // Not reachable with valid parameters; fall back to the one-shot API.
                _ => {
                    *slot = None;
                    return miniz_oxide::deflate::compress_to_vec_zlib(input, level);
                }
            }
        }
    })
}

#[cfg(test)]
mod tests;

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
        CompressionType::Zlib => miniz_oxide::inflate::decompress_to_vec_zlib(input).ok(),
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
mod types {
    use super::*;

    #[test]
    fn every_available_type_round_trips() {
        let body: Vec<u8> = (0..20_000u32)
            .map(|i| (i % 251) as u8 ^ (i / 97) as u8)
            .collect();
        for ty in [
            CompressionType::Zlib,
            CompressionType::Lz4,
            CompressionType::Zstd,
        ] {
            let Some(c) = compress_body(ty, &body, 5) else {
                assert!(!available(ty), "{ty:?}");
                continue;
            };
            assert!(c.len() < body.len(), "{ty:?} compresses");
            assert_eq!(
                decompress_body(ty, &c).as_deref(),
                Some(&body[..]),
                "{ty:?}"
            );
            assert_eq!(
                decompress_body(ty, &body[..100]),
                None,
                "{ty:?}: garbage does not decode"
            );
        }
        // The frame magics Java's lz4-java and zstd-jni streams start with.
        #[cfg(feature = "lz4")]
        assert_eq!(
            compress_body(CompressionType::Lz4, b"x", 5).unwrap()[..4],
            [0x04, 0x22, 0x4d, 0x18]
        );
        #[cfg(feature = "zstd")]
        assert_eq!(
            compress_body(CompressionType::Zstd, b"x", 5).unwrap()[..4],
            [0x28, 0xb5, 0x2f, 0xfd]
        );
    }
}
