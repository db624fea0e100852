//! zlib (RFC 1950) compression of message bodies with a reused compressor.
//!
//! `miniz_oxide::deflate::compress_to_vec_zlib` builds (and zeroes) a new compressor of about
//! 300 KiB for every call; profiling the 16 KiB benchmark cells showed about 15 % of the
//! samples in that zeroing. Here each thread keeps one compressor per level and resets it, so a
//! body costs only the deflate work. The output is the same zlib stream (same parameters).

use std::cell::RefCell;

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
