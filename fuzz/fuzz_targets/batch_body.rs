//! SEND_BATCH_MESSAGE body (docs/protocol/WIRE.md §11): `decode_batch` over arbitrary bytes.
//!
//! Input: the body. Invariants: no panic; records tile the input; a record with the zero
//! MAGICCODE/BODYCRC our encoder writes re-encodes (properties passed through pre-encoded) to
//! exactly its input bytes; iteration stops after an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmq_core::message::batch::{BatchMessage, decode_batch, encode_batch};
use rmq_core::message::properties::Preencoded;

fuzz_target!(|body: &[u8]| {
    let mut it = decode_batch(body);
    let mut offset = 0;
    while let Some(item) = it.next() {
        let rest = it.remaining();
        let consumed = body.len() - offset - rest.len();
        let record = &body[offset..offset + consumed];
        match item {
            Ok(r) => {
                let _ = r.properties();
                if r.magic == 0 && r.body_crc == 0 {
                    let m = BatchMessage {
                        flag: r.flag,
                        body: r.body,
                        properties: Preencoded(r.raw_properties),
                    };
                    let len = m.record_len().expect("decoded record has a length");
                    assert_eq!(len, record.len());
                    let mut buf = vec![0xa5u8; len];
                    assert!(encode_batch([m], &mut buf[..len - 1]).is_err());
                    assert_eq!(encode_batch([m], &mut buf), Ok(len));
                    assert_eq!(&buf[..], record, "re-encoded batch record differs");
                }
            }
            Err(_) => {
                assert!(it.remaining().is_empty());
                assert!(it.next().is_none());
                return;
            }
        }
        offset += consumed;
    }
    assert_eq!(offset, body.len());
});
