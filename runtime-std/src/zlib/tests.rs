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
