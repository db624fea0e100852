//! The compressors compared by `benches/compress.rs`, each the way a producer would call it
//! for every message (a reused compressor state where the library allows it).

use std::cell::RefCell;
use std::io::Write;

use miniz_oxide::deflate::core::{
    CompressorOxide, TDEFLFlush, TDEFLStatus, compress, create_comp_flags_from_zip_params,
};

/// miniz_oxide with one reused compressor (what rmq-std's `zlib.rs` does).
pub fn miniz(input: &[u8], level: u8) -> Vec<u8> {
    thread_local! {
        static C: RefCell<Option<Box<CompressorOxide>>> = const { RefCell::new(None) };
    }
    C.with(|c| {
        let mut c = c.borrow_mut();
        let comp = c.get_or_insert_with(|| {
            Box::new(CompressorOxide::new(create_comp_flags_from_zip_params(
                level.into(),
                1,
                0,
            )))
        });
        comp.reset();
        let mut out = vec![0u8; input.len() / 2 + 64];
        let (mut rin, mut wout) = (0, 0);
        loop {
            let (st, r, w) = compress(comp, &input[rin..], &mut out[wout..], TDEFLFlush::Finish);
            rin += r;
            wout += w;
            match st {
                TDEFLStatus::Done => break,
                TDEFLStatus::Okay => {
                    let n = out.len();
                    out.resize(n * 2, 0);
                }
                _ => panic!("deflate failed"),
            }
        }
        out.truncate(wout);
        out
    })
}

/// zlib-rs through flate2's `Compress`, reused (reset per body).
pub fn zlib_rs(input: &[u8], level: u8) -> Vec<u8> {
    thread_local! {
        static C: RefCell<Option<flate2::Compress>> = const { RefCell::new(None) };
    }
    C.with(|c| {
        let mut c = c.borrow_mut();
        let comp = c.get_or_insert_with(|| {
            flate2::Compress::new(flate2::Compression::new(level.into()), true)
        });
        comp.reset();
        let mut out = Vec::with_capacity(input.len() / 2 + 64);
        loop {
            let before = comp.total_in() as usize;
            let st = comp
                .compress_vec(&input[before..], &mut out, flate2::FlushCompress::Finish)
                .expect("deflate");
            if st == flate2::Status::StreamEnd {
                break;
            }
            out.reserve(out.capacity().max(64));
        }
        out
    })
}

/// LZ4 frame (lz4_flex), as rmq-std sends compression type 1.
pub fn lz4(input: &[u8]) -> Vec<u8> {
    let mut e = lz4_flex::frame::FrameEncoder::new(Vec::with_capacity(input.len()));
    e.write_all(input).expect("lz4");
    e.finish().expect("lz4")
}

/// zstd frame at `level`, as rmq-std sends compression type 2.
pub fn zstd(input: &[u8], level: i32) -> Vec<u8> {
    zstd::bulk::compress(input, level).expect("zstd")
}

/// The bodies: `rmq bench`'s (one byte repeated) and telemetry-like JSON lines.
pub fn bodies(len: usize) -> [(&'static str, Vec<u8>); 2] {
    let mut json = Vec::with_capacity(len + 128);
    let mut i = 0u64;
    while json.len() < len {
        let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        json.extend_from_slice(
            format!(
                "{{\"device\":\"gw-{:04}\",\"seq\":{i},\"temp\":{}.{},\"humidity\":{},\"ok\":true}}\n",
                x % 5000,
                15 + x % 20,
                x % 10,
                30 + (x >> 8) % 50
            )
            .as_bytes(),
        );
        i += 1;
    }
    json.truncate(len);
    [("repeated", vec![b'x'; len]), ("telemetry-json", json)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn every_candidate_writes_what_java_reads() {
        for (_, b) in bodies(16 * 1024) {
            for z in [miniz(&b, 5), zlib_rs(&b, 5)] {
                let mut out = Vec::new();
                flate2::read::ZlibDecoder::new(&z[..])
                    .read_to_end(&mut out)
                    .unwrap();
                assert_eq!(out, b);
            }
            let mut out = Vec::new();
            lz4_flex::frame::FrameDecoder::new(&lz4(&b)[..])
                .read_to_end(&mut out)
                .unwrap();
            assert_eq!(out, b);
            assert_eq!(zstd::stream::decode_all(&zstd(&b, 5)[..]).unwrap(), b);
        }
    }
}
