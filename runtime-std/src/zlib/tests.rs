use super::*;

#[test]
fn round_trips_and_reads_as_an_independent_inflater_does() {
    let mut seed = 0x1234_5678u32;
    for len in [0usize, 1, 100, 4096, 70_000, 300_000] {
        // Half compressible, half pseudo-random, so the output can exceed the first guess.
        let data: Vec<u8> = (0..len)
            .map(|i| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                if i % 2 == 0 { b'a' } else { seed as u8 }
            })
            .collect();
        for _ in 0..2 {
            let ours = compress_zlib(&data, 5);
            // miniz_oxide, another implementation, inflates what zlib-rs wrote...
            assert_eq!(
                miniz_oxide::inflate::decompress_to_vec_zlib(&ours).unwrap(),
                data,
                "len {len}"
            );
            assert_eq!(decompress_zlib(&ours).as_deref(), Some(&data[..]));
            // ...and ours inflates what it wrote (Java's Deflater writes the same format).
            let theirs = miniz_oxide::deflate::compress_to_vec_zlib(&data, 5);
            assert_eq!(decompress_zlib(&theirs).as_deref(), Some(&data[..]));
        }
    }
    // A level change rebuilds the compressor; levels above 9 are clamped.
    let d = vec![7u8; 10_000];
    for level in [1, 5, 9, 10] {
        let z = compress_zlib(&d, level);
        assert_eq!(
            decompress_zlib(&z).as_deref(),
            Some(&d[..]),
            "level {level}"
        );
    }
    // Truncated or damaged streams do not decode.
    let z = compress_zlib(&d, 5);
    assert_eq!(decompress_zlib(&z[..z.len() - 5]), None);
    assert_eq!(decompress_zlib(b"not zlib at all"), None);
}
