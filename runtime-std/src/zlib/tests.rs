use super::*;

#[test]
fn same_stream_as_one_shot_and_round_trips() {
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
            assert_eq!(
                ours,
                miniz_oxide::deflate::compress_to_vec_zlib(&data, 5),
                "len {len}"
            );
            assert_eq!(
                miniz_oxide::inflate::decompress_to_vec_zlib(&ours).unwrap(),
                data
            );
        }
    }
    // A level change rebuilds the compressor.
    let d = vec![7u8; 10_000];
    assert_eq!(
        compress_zlib(&d, 1),
        miniz_oxide::deflate::compress_to_vec_zlib(&d, 1)
    );
    assert_eq!(
        compress_zlib(&d, 5),
        miniz_oxide::deflate::compress_to_vec_zlib(&d, 5)
    );
}
