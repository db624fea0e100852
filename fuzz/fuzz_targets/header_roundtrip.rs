//! Decode, re-encode, decode again.
//!
//! Input: byte 0 selects the serialize type of the input header (bit 0: 0 = JSON, 1 =
//! ROCKETMQ); the rest is the header. A header that decodes (and whose strings are valid
//! UTF-8) is rebuilt as a `CommandRepr` from the decoded values, emitted in *both* serialize
//! types, and decoded again: code, language, version, opaque, flag, remark and every ext field
//! (unescaped) must survive, and re-encoding the second decode must give identical bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmq_core::wire::{CommandHeader, CommandRepr, EncodeError, Frame, LanguageCode, SerializeType};

#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    code: i32,
    language: LanguageCode,
    version: i32,
    opaque: i32,
    flag: i32,
    remark: Option<String>,
    ext: Option<Vec<(String, String)>>,
}

/// Owned, unescaped view of a header; `None` if any string is not valid UTF-8 / escapes.
fn owned(h: &CommandHeader<'_>) -> Option<Decoded> {
    let s = |f: rmq_core::wire::FieldStr<'_>| {
        let mut buf = vec![0u8; f.raw().len() * 4 + 8];
        f.unescape_into(&mut buf).ok().map(str::to_owned)
    };
    let remark = match h.remark() {
        Some(r) => Some(s(r)?),
        None => None,
    };
    let ext = match h.ext_fields() {
        Some(e) => {
            let mut v = Vec::new();
            for (k, val) in e {
                v.push((s(k)?, s(val)?));
            }
            Some(v)
        }
        None => None,
    };
    Some(Decoded {
        code: h.code(),
        language: h.language(),
        version: h.version(),
        opaque: h.opaque(),
        flag: h.flag(),
        remark,
        ext,
    })
}

/// What decoding `d`, encoded as `ty`, must give back.
fn expected(d: &Decoded, ty: SerializeType) -> Decoded {
    let mut e = Decoded {
        code: d.code,
        language: d.language,
        version: d.version,
        opaque: d.opaque,
        flag: d.flag,
        remark: d.remark.clone(),
        ext: d.ext.clone(),
    };
    if ty == SerializeType::JSON {
        // A language without a JSON name is omitted; the receiver assumes JAVA.
        if e.language.name().is_none() {
            e.language = LanguageCode::JAVA;
        }
    } else {
        // Binary: zero-length remark / key / value decode as absent; no map when empty.
        e.remark = e.remark.filter(|r| !r.is_empty());
        e.ext = e.ext.map(|v| {
            v.into_iter()
                .filter(|(k, v)| !k.is_empty() && !v.is_empty())
                .collect::<Vec<_>>()
        });
        let raw_empty = d.ext.as_ref().is_none_or(|v| v.is_empty());
        if raw_empty {
            e.ext = None;
        }
    }
    e
}

fn encode(d: &Decoded, ty: SerializeType) -> Result<Vec<u8>, EncodeError> {
    let pairs: Option<Vec<(&str, &str)>> = d
        .ext
        .as_ref()
        .map(|v| v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect());
    let repr = CommandRepr {
        code: d.code,
        language: d.language,
        version: d.version,
        opaque: d.opaque,
        flag: d.flag,
        remark: d.remark.as_deref(),
        ext: pairs.as_deref(),
    };
    let len = repr.frame_len(ty, 0);
    let mut buf = vec![0xa5; len];
    let n = repr.emit_frame_prefix_and_header(ty, 0, &mut buf)?;
    assert_eq!(n, len, "emit wrote a different length than frame_len");
    assert_eq!(repr.buffer_len(ty) + 8, len);
    Ok(buf)
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, header)) = data.split_first() else {
        return;
    };
    let ty_in = SerializeType(sel & 1);
    let Ok(h) = CommandHeader::parse_bytes(ty_in, header) else {
        return;
    };
    let Some(d) = owned(&h) else {
        return;
    };
    for ty in [SerializeType::JSON, SerializeType::ROCKETMQ] {
        let bytes = match encode(&d, ty) {
            Ok(b) => b,
            Err(EncodeError::OutOfRange(_)) => {
                // Only ROCKETMQ has 16-bit code/version and 15-bit key lengths.
                assert_eq!(ty, SerializeType::ROCKETMQ);
                continue;
            }
            Err(e) => panic!("encoding a decoded header failed: {e:?}"),
        };
        let frame = Frame::new_checked(&bytes[..]).expect("emitted frame fails check_len");
        let h2 = CommandHeader::parse(&frame).expect("emitted header fails to parse");
        assert_eq!(h2.serialize_type(), ty);
        let d2 = owned(&h2).expect("emitted header has invalid strings");
        assert_eq!(
            d2,
            expected(&d, ty),
            "round trip through {ty:?} changed the header"
        );
        // Fixed point: the normalised header re-encodes and decodes to itself, byte-stable.
        let bytes2 = encode(&d2, ty).expect("re-encode failed");
        let h3 = CommandHeader::parse(&Frame::new_checked(&bytes2[..]).expect("check_len"))
            .expect("re-encoded header fails to parse");
        let d3 = owned(&h3).expect("re-encoded header has invalid strings");
        assert_eq!(
            d3,
            expected(&d2, ty),
            "second round trip changed the header"
        );
        assert_eq!(
            encode(&d3, ty).expect("re-encode"),
            bytes2,
            "encoding is not stable"
        );
    }
});
