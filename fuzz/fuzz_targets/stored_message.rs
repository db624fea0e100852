//! Stored-message records (PULL body, docs/protocol/WIRE.md §12): `decode_stored` over arbitrary bytes.
//!
//! Input: byte 0 bit 0 chooses the CRC mode (0 = `Verify`, 1 = `Skip`); the rest is the body.
//! Invariants: no panic; each decoded record re-encodes to exactly the bytes it was decoded
//! from (TOTALSIZE must match, so the encoding is canonical); the iterator ends after a framing
//! error; with `Verify` every `Ok` record has a matching body CRC; derived ids and properties
//! never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmq_core::message::stored::{CrcCheck, StoredDecodeError, StoredMessage, decode_stored};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let crc = if sel & 1 == 0 {
        CrcCheck::Verify
    } else {
        CrcCheck::Skip
    };
    let mut it = decode_stored(body).crc_check(crc);
    let mut offset = 0;
    let mut steps = 0;
    loop {
        let before = it.remaining();
        assert_eq!(before, &body[offset..]);
        let Some(item) = it.next() else {
            assert!(before.is_empty());
            break;
        };
        steps += 1;
        assert!(steps <= body.len(), "iterator does not make progress");
        let consumed = before.len() - it.remaining().len();
        let record = &before[..consumed];
        match item {
            Ok(msg) => {
                if crc == CrcCheck::Verify {
                    assert!(msg.body_crc_ok());
                }
                check_message(&msg, record);
            }
            Err(StoredDecodeError::BodyCrcMismatch) => {
                assert_eq!(crc, CrcCheck::Verify);
                // Framing is intact: the record decodes without the check and re-encodes.
                let (msg, len) = StoredMessage::decode(record, CrcCheck::Skip)
                    .expect("CRC-mismatched record must decode with CrcCheck::Skip");
                assert_eq!(len, consumed);
                assert!(!msg.body_crc_ok());
                check_message(&msg, record);
            }
            Err(_) => {
                assert!(
                    it.remaining().is_empty(),
                    "iteration continues after a framing error"
                );
                assert!(it.next().is_none());
                break;
            }
        }
        offset += consumed;
    }
});

fn check_message(msg: &StoredMessage<'_>, record: &[u8]) {
    let _ = msg.offset_msg_id().to_hex();
    let _ = msg.message_id();
    if let Ok(p) = msg.properties() {
        for (k, _) in p.iter() {
            assert!(p.get(k).is_some());
        }
    }
    let _ = msg.sys_flag.compression_type();
    let len = msg
        .encoded_len()
        .expect("a decoded record must be encodable");
    assert_eq!(len, record.len());
    let mut buf = vec![0xa5u8; len];
    for n in [0, len / 2, len.saturating_sub(1)] {
        if n < len {
            assert!(msg.encode(&mut buf[..n]).is_err());
        }
    }
    assert_eq!(msg.encode(&mut buf), Ok(len));
    assert_eq!(&buf[..], record, "re-encoded record differs from the input");
}
