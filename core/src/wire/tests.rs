//! Fixtures from docs/protocol/WIRE.md worked examples, boundary cases and property tests for the codec.

use std::string::String;
use std::vec;
use std::vec::Vec;

use proptest::prelude::*;

use super::headers::*;
use super::*;
use crate::json::JsonErrorKind;

/// `header` wrapped in a frame of type `ty` (no body).
fn frame_of(ty: SerializeType, header: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + header.len());
    f.extend_from_slice(&((4 + header.len()) as u32).to_be_bytes());
    f.extend_from_slice(&((u32::from(ty.0) << 24) | header.len() as u32).to_be_bytes());
    f.extend_from_slice(header);
    f
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Encodes prefix + header + body into a fresh Vec, checking sizes and too-small buffers.
fn encode<E: ExtFields>(cmd: &CommandRepr<'_, E>, ty: SerializeType, body: &[u8]) -> Vec<u8> {
    let need = cmd.frame_len(ty, body.len()) - body.len();
    assert_eq!(need, PREFIX_LEN + cmd.buffer_len(ty));
    for small in 0..need {
        // Junk-filled, like smoltcp's construct tests.
        let mut b = vec![0xa5; small];
        assert_eq!(
            cmd.emit_frame_prefix_and_header(ty, body.len(), &mut b),
            Err(EncodeError::BufferTooSmall),
            "size {small} of {need}"
        );
    }
    let mut buf = vec![0xa5; need];
    let n = cmd
        .emit_frame_prefix_and_header(ty, body.len(), &mut buf)
        .unwrap();
    assert_eq!(n, need);
    buf.extend_from_slice(body);
    buf
}

const ROUTE_JSON: &str = r#"{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":409}"#;

fn route_cmd<'h, 'a>(
    h: &'h GetRouteInfoRequestHeader<'a>,
) -> CommandRepr<'static, &'h GetRouteInfoRequestHeader<'a>> {
    CommandRepr::request(
        RequestCode::GET_ROUTEINFO_BY_TOPIC,
        1,
        version::V4_9_8,
        Some(h),
    )
}

#[test]
fn wire_1_route_request_json_139_bytes() {
    let h = GetRouteInfoRequestHeader {
        topic: "TopicTest",
        accept_standard_json_only: None,
    };
    let bytes = encode(&route_cmd(&h), SerializeType::JSON, &[]);
    let mut want = hex("00 00 00 87 00 00 00 83");
    want.extend_from_slice(ROUTE_JSON.as_bytes());
    assert_eq!(ROUTE_JSON.len(), 131);
    assert_eq!(bytes.len(), 139);
    assert_eq!(bytes, want);

    let f = Frame::new_checked(&bytes[..]).unwrap();
    assert_eq!(f.total_length(), 135);
    assert_eq!(f.serialize_type(), SerializeType::JSON);
    assert_eq!(f.header_len(), 131);
    assert!(f.body().is_empty());
    let p = CommandHeader::parse(&f).unwrap();
    assert_eq!(p.request_code(), RequestCode::GET_ROUTEINFO_BY_TOPIC);
    assert_eq!((p.opaque(), p.version(), p.flag()), (1, 409, 0));
    assert_eq!(p.language(), LanguageCode::JAVA);
    assert_eq!(p.remark(), None);
    assert!(!p.is_response());
    assert_eq!(
        GetRouteInfoRequestHeader::decode(&p, &mut Scratch::empty()),
        Ok(h)
    );
}

#[test]
fn wire_3_route_request_rocketmq_49_bytes() {
    let want = hex(
        "00 00 00 2d 01 00 00 29 00 69 00 01 99 00 00 00 01 00 00 00 00 00 00 00 00
         00 00 00 14 00 05 74 6f 70 69 63 00 00 00 09 54 6f 70 69 63 54 65 73 74",
    );
    assert_eq!(want.len(), 49);
    let h = GetRouteInfoRequestHeader {
        topic: "TopicTest",
        accept_standard_json_only: None,
    };
    assert_eq!(encode(&route_cmd(&h), SerializeType::ROCKETMQ, &[]), want);
    let f = Frame::new_checked(&want[..]).unwrap();
    assert_eq!(f.serialize_type(), SerializeType::ROCKETMQ);
    assert_eq!(f.header_len(), 41);
    let p = CommandHeader::parse(&f).unwrap();
    assert_eq!(p.serialize_type(), SerializeType::ROCKETMQ);
    assert_eq!((p.code(), p.opaque(), p.version()), (105, 1, 409));
    assert_eq!(p.ext_iter().count(), 1);
    assert!(p.get("topic").unwrap().eq_str("TopicTest"));
    assert_eq!(p.get("topic").unwrap().kind(), FieldKind::Binary);
    assert_eq!(
        GetRouteInfoRequestHeader::decode(&p, &mut Scratch::empty()),
        Ok(h)
    );
}

// The SEND_MESSAGE_V2 fixture the integration tests use too (`extern crate self as rmq_core`
// in lib.rs lets its `rmq_core::` paths resolve here).
#[path = "../../tests/common/mod.rs"]
mod common;
use common::{PROPS, send_v2};

#[test]
fn wire_6_4_send_v2_request_375_bytes() {
    let want_header = concat!(
        r#"{"code":310,"extFields":{"a":"pg-demo","b":"TopicTest","c":"TBW102","d":"4","e":"1","f":"0","#,
        r#""g":"1700000000000","h":"0","i":"TAGS\u0001TagA\u0002KEYS\u0001order-1\u0002WAIT\u0001true\u0002UNIQ_KEY\u0001C0A8010A30391B6D3586000F42400007\u0002","#,
        r#""j":"0","k":"false","m":"false","n":"broker-a"},"flag":0,"language":"JAVA","opaque":7,"#,
        r#""serializeTypeCurrentRPC":"JSON","version":479}"#
    );
    assert_eq!(want_header.len(), 375);
    let h = send_v2();
    let cmd = CommandRepr::request(RequestCode::SEND_MESSAGE_V2, 7, version::V5_3_3, Some(&h));
    let bytes = encode(&cmd, SerializeType::JSON, b"Hello");
    let mut want = hex("00 00 01 80 00 00 01 77");
    want.extend_from_slice(want_header.as_bytes());
    want.extend_from_slice(b"Hello");
    assert_eq!(bytes, want);

    let f = Frame::new_checked(&bytes[..]).unwrap();
    assert_eq!(f.body(), b"Hello");
    let p = CommandHeader::parse(&f).unwrap();
    let i = p.get("i").unwrap();
    assert!(i.has_escapes());
    assert_eq!(i.as_str(), None);
    assert!(i.eq_str(PROPS));
    // Without scratch space the escaped properties cannot be borrowed.
    assert_eq!(
        SendMessageRequestHeaderV2::decode(&p, &mut Scratch::empty()),
        Err(FieldError::Unescape("i"))
    );
    let mut scratch = [0u8; 128];
    let back = SendMessageRequestHeaderV2::decode(&p, &mut Scratch::new(&mut scratch)).unwrap();
    assert_eq!(back, h);

    // The same command in ROCKETMQ form decodes to the same header, with no scratch needed.
    let bin = encode(&cmd, SerializeType::ROCKETMQ, b"Hello");
    let f = Frame::new_checked(&bin[..]).unwrap();
    let p = CommandHeader::parse(&f).unwrap();
    assert_eq!(f.body(), b"Hello");
    assert_eq!(
        SendMessageRequestHeaderV2::decode(&p, &mut Scratch::empty()),
        Ok(h)
    );
    // A V2 header is not a V1 header.
    assert_eq!(
        SendMessageRequestHeader::decode(&p, &mut Scratch::empty()),
        Err(FieldError::Missing("producerGroup"))
    );
}

#[test]
fn wire_6_4_send_response_decode() {
    let json = concat!(
        r#"{"code":0,"extFields":{"MSG_REGION":"DefaultRegion","TRACE_ON":"true","msgId":"0A00000500002A9F0000000000012345","#,
        r#""queueId":"1","queueOffset":"37","transactionId":"C0A8010A30391B6D3586000F42400007"},"flag":1,"#,
        r#""language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":479}"#
    );
    let p = CommandHeader::parse_json(json.as_bytes()).unwrap();
    assert_eq!(p.response_code(), ResponseCode::SUCCESS);
    assert!(p.is_response());
    assert_eq!(p.opaque(), 7);
    let r = SendMessageResponseHeader::decode(&p, &mut Scratch::empty()).unwrap();
    assert_eq!(
        r,
        SendMessageResponseHeader {
            msg_id: "0A00000500002A9F0000000000012345",
            queue_id: 1,
            queue_offset: 37,
            transaction_id: Some("C0A8010A30391B6D3586000F42400007"),
            batch_uniq_id: None,
            recall_handle: None,
            msg_region: Some("DefaultRegion"),
            trace_on: Some(true),
        }
    );
}

#[test]
fn json_header_tolerance() {
    // Any key order, unknown keys (with nested values), missing defaults, numbers in
    // extFields, null ext values, unknown language, bare keys, single quotes.
    let j = br#" { "zzz":{"a":[1,{"b":null}]}, opaque:42, 'remark':'it\'s', "language":"KLINGON",
        "extFields":{"queueId":3,"gone":null,"queueOffset":"-5",'msgId':"m\u0041"} } "#;
    let p = CommandHeader::parse_json(j).unwrap();
    assert_eq!((p.code(), p.flag(), p.version(), p.opaque()), (0, 0, 0, 42));
    assert_eq!(p.language(), LanguageCode::UNKNOWN);
    let mut buf = [0u8; 16];
    assert_eq!(p.remark().unwrap().unescape_into(&mut buf), Ok("it's"));
    assert_eq!(p.get("gone"), None);
    assert_eq!(p.get("queueId").unwrap().kind(), FieldKind::JsonLiteral);
    assert_eq!(p.ext_iter().count(), 3);
    let mut s = [0u8; 8];
    let r = SendMessageResponseHeader::decode(&p, &mut Scratch::new(&mut s)).unwrap();
    assert_eq!((r.msg_id, r.queue_id, r.queue_offset), ("mA", 3, -5));

    // Missing language = JAVA; extFields null = none; numbers as strings accepted.
    let p = CommandHeader::parse_json(br#"{"code":"17","opaque":1,"extFields":null}"#).unwrap();
    assert_eq!(p.code(), 17);
    assert_eq!(p.language(), LanguageCode::JAVA);
    assert_eq!(p.ext_fields(), None);
    assert_eq!(
        QueryConsumerOffsetResponseHeader::decode(&p, &mut Scratch::empty()),
        Err(FieldError::Missing("offset"))
    );

    // Errors.
    assert_eq!(
        CommandHeader::parse_json(br#"{"code":1}"#),
        Err(DecodeError::MissingOpaque)
    );
    assert_eq!(
        CommandHeader::parse_json(br#"{"opaque":1,"code":2147483648}"#),
        Err(DecodeError::FieldType("code"))
    );
    assert_eq!(
        CommandHeader::parse_json(br#"{"opaque":1,"extFields":{"a":{}}}"#),
        Err(DecodeError::BadExtValue)
    );
    assert!(matches!(
        CommandHeader::parse_json(br#"{"opaque":1} x"#),
        Err(DecodeError::Json(e)) if e.kind == JsonErrorKind::TrailingData
    ));
    let deep = "[".repeat(10_000);
    let j = std::format!(r#"{{"opaque":1,"x":{deep}"#);
    assert!(matches!(
        CommandHeader::parse_json(j.as_bytes()),
        Err(DecodeError::Json(e)) if e.kind == JsonErrorKind::TooDeep
    ));
    // Invalid integer in a typed field names the key.
    let p = CommandHeader::parse_json(br#"{"opaque":1,"extFields":{"offset":"12x"}}"#).unwrap();
    assert_eq!(
        GetMaxOffsetResponseHeader::decode(&p, &mut Scratch::empty()),
        Err(FieldError::Invalid("offset"))
    );
}

#[test]
fn rocketmq_header_edge_cases() {
    // code, lang, version, opaque, flag, remark_len, remark, ext_len, ext
    let mut h = hex("ff ff 0c 01 99 00 00 00 05 00 00 00 01 00 00 00 00");
    // ext: key "a" -> "" (absent), key "" -> "x" (absent), key "k" -> "v"
    let ext = hex("00 01 61 00 00 00 00  00 00 00 00 00 01 78  00 01 6b 00 00 00 01 76");
    h.extend_from_slice(&(ext.len() as i32).to_be_bytes());
    h.extend_from_slice(&ext);
    let p = CommandHeader::parse_rocketmq(&h).unwrap();
    assert_eq!(p.code(), -1);
    assert_eq!(p.language(), LanguageCode::RUST);
    assert_eq!(p.remark(), None);
    assert!(p.is_response());
    let all: Vec<_> = p.ext_iter().collect();
    assert_eq!(all.len(), 1);
    assert!(all[0].0.eq_str("k") && all[0].1.eq_str("v"));
    assert_eq!(p.get("a"), None);

    // Truncations at every length are errors, never panics.
    for n in 0..h.len() {
        assert!(CommandHeader::parse_rocketmq(&h[..n]).is_err(), "{n}");
    }
    // Negative remark length, negative ext length, negative key length.
    let neg = hex("00 01 00 00 01 00 00 00 01 00 00 00 00 ff ff ff ff");
    assert_eq!(
        CommandHeader::parse_rocketmq(&neg),
        Err(DecodeError::BadLength)
    );
    let neg = hex("00 01 00 00 01 00 00 00 01 00 00 00 00 00 00 00 00 80 00 00 00");
    assert_eq!(
        CommandHeader::parse_rocketmq(&neg),
        Err(DecodeError::BadLength)
    );
    let neg = hex("00 01 00 00 01 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 02 ff ff");
    assert_eq!(
        CommandHeader::parse_rocketmq(&neg),
        Err(DecodeError::BadLength)
    );
    // ext_len past the header.
    let past = hex("00 01 00 00 01 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 09 00 01 61");
    assert_eq!(
        CommandHeader::parse_rocketmq(&past),
        Err(DecodeError::Truncated)
    );
    // An entry that overruns ext_len.
    let over = hex(
        "00 01 00 00 01 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 04 00 01 61 00 00 00 00 01 62",
    );
    assert_eq!(
        CommandHeader::parse_rocketmq(&over),
        Err(DecodeError::Truncated)
    );

    // Encoding limits.
    let cmd = CommandRepr::<()>::request(RequestCode::POP_MESSAGE, 1, 479, None);
    let mut buf = [0u8; 128];
    assert_eq!(
        cmd.emit(SerializeType::ROCKETMQ, &mut buf),
        Err(EncodeError::OutOfRange("code"))
    );
    assert!(cmd.emit(SerializeType::JSON, &mut buf).is_ok());
    assert_eq!(
        cmd.emit(SerializeType(7), &mut buf),
        Err(EncodeError::OutOfRange("serializeType"))
    );
    let long_key = "k".repeat(40_000);
    let ext = [(long_key.as_str(), "v")];
    let cmd = CommandRepr::request(RequestCode::SEND_MESSAGE, 1, 479, Some(&ext));
    let mut big = vec![0u8; cmd.buffer_len(SerializeType::ROCKETMQ)];
    assert_eq!(
        cmd.emit(SerializeType::ROCKETMQ, &mut big),
        Err(EncodeError::OutOfRange("ext key"))
    );
}

#[test]
fn json_encode_shapes() {
    let mut buf = [0u8; 512];
    // No custom header: extFields omitted (docs/protocol/WIRE.md §2.1 "request w/o header").
    let cmd = CommandRepr::<()>::request(RequestCode::HEART_BEAT, 5, 409, None);
    let n = cmd.emit(SerializeType::JSON, &mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        br#"{"code":34,"flag":0,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":409}"#
    );
    // Empty custom header: extFields {} (5.x heartbeat).
    let hb = HeartbeatRequestHeader {};
    let cmd = CommandRepr::request(RequestCode::HEART_BEAT, 5, 479, Some(&hb));
    let n = cmd.emit(SerializeType::JSON, &mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        br#"{"code":34,"extFields":{},"flag":0,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":479}"#
    );
    // Error response with a remark, negative numbers, unknown language omitted, chained ext.
    let acl = [("AccessKey", "ak"), ("Signature", "s/g=")];
    let q = QueryConsumerOffsetResponseHeader { offset: -2 };
    let mut cmd = CommandRepr::response(
        ResponseCode::TOPIC_NOT_EXIST,
        -3,
        479,
        Some(Chain(&q, &acl)),
    );
    cmd.remark = Some("No topic\n\"x\"");
    cmd.language = LanguageCode(200);
    let n = cmd.emit(SerializeType::JSON, &mut buf).unwrap();
    assert_eq!(n, cmd.buffer_len(SerializeType::JSON));
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        r#"{"code":17,"extFields":{"offset":"-2","AccessKey":"ak","Signature":"s/g="},"flag":1,"opaque":-3,"remark":"No topic\n\"x\"","serializeTypeCurrentRPC":"JSON","version":479}"#
    );
    let p = CommandHeader::parse_json(&buf[..n]).unwrap();
    assert_eq!(p.language(), LanguageCode::JAVA);
    assert!(p.get("Signature").unwrap().eq_str("s/g="));
    assert_eq!(
        QueryConsumerOffsetResponseHeader::decode(&p, &mut Scratch::empty()),
        Ok(q)
    );
}

#[test]
fn frame_checks() {
    let good = hex("00 00 00 06 00 00 00 01 7b 7d");
    let f = Frame::new_checked(&good[..]).unwrap();
    assert_eq!(f.header(), b"{");
    assert_eq!(f.body(), b"}");
    // Longer buffers are fine; the frame ends where total_length says.
    let mut longer = good.clone();
    longer.push(0xee);
    assert_eq!(Frame::new_checked(&longer[..]).unwrap().body(), b"}");

    let cases: &[(&str, FrameError)] = &[
        ("00 00 00 06 00 00 00", FrameError::Truncated),
        ("00 00 00 06 00 00 00 01 7b", FrameError::Truncated),
        ("01 00 00 00 00 00 00 00", FrameError::TooLong),
        ("ff ff ff fc 00 00 00 00", FrameError::BadTotalLength),
        ("00 00 00 03 00 00 00 00", FrameError::BadTotalLength),
        ("00 00 00 06 00 00 00 03 7b 7d", FrameError::BadHeaderLength),
        (
            "00 00 00 06 02 00 00 01 7b 7d",
            FrameError::UnknownSerializeType(2),
        ),
    ];
    for (h, e) in cases {
        assert_eq!(Frame::new_checked(&hex(h)[..]).unwrap_err(), *e, "{h}");
    }
    // Largest accepted total_length.
    let max = (MAX_TOTAL_LENGTH as u32).to_be_bytes();
    let mut r = FrameReader::new(vec![0u8; 64]);
    r.feed(&max).unwrap();
    assert_eq!(
        r.feed(&[0, 0, 0, 0]),
        Err(ReadError::FrameTooLargeForBuffer {
            frame_len: MAX_FRAME_LEN
        })
    );
    let mut r = FrameReader::new(vec![0u8; 64]);
    r.feed(&(MAX_TOTAL_LENGTH as u32 + 1).to_be_bytes())
        .unwrap();
    assert_eq!(
        r.feed(&[0, 0, 0, 0]),
        Err(ReadError::Frame(FrameError::TooLong))
    );
    assert!(r.receive_buffer().is_empty());
    assert_eq!(r.commit(1), Err(ReadError::Poisoned));
    assert_eq!(r.error(), Some(ReadError::Frame(FrameError::TooLong)));

    // Setters.
    let mut b = [0xa5u8; 10];
    let mut f = Frame::new_unchecked(&mut b[..]);
    f.set_total_length(6);
    f.set_type_and_header_len(SerializeType::ROCKETMQ, 1);
    f.header_mut().copy_from_slice(b"h");
    f.body_mut().copy_from_slice(b"b");
    assert_eq!(b, *b"\0\0\0\x06\x01\0\0\x01hb");
}

#[test]
fn whole_frame_waits_for_the_prefix_then_the_frame() {
    let f = hex("00 00 00 05 00 00 00 01 41");
    assert_eq!(whole_frame(&f[..7], 7, 64), Ok(None), "no prefix yet");
    assert_eq!(
        whole_frame(&f[..8], 8, 64),
        Ok(None),
        "prefix, no header yet"
    );
    assert_eq!(
        whole_frame(&f[..8], 9, 64),
        Ok(Some(9)),
        "a peeked prefix, all queued"
    );
    assert_eq!(
        whole_frame(&f, 12, 64),
        Ok(Some(9)),
        "the next frame's bytes stay"
    );
    assert_eq!(
        whole_frame(&f, 9, 8),
        Err(FrameError::TooLong),
        "cannot fit"
    );
    let bad = hex("00 00 00 08 00 00 00 05");
    assert_eq!(whole_frame(&bad, 8, 64), Err(FrameError::BadHeaderLength));
}

#[test]
fn reader_rejects_prefix_before_buffering() {
    let mut r = FrameReader::new([0u8; 32]);
    assert_eq!(r.receive_buffer().len(), 8);
    // Header length past the frame: rejected as soon as the prefix is in.
    assert_eq!(
        r.feed(&hex("00 00 00 08 00 00 00 05 aa bb")),
        Err(ReadError::Frame(FrameError::BadHeaderLength))
    );
    let mut r = FrameReader::new([0u8; 32]);
    r.receive_buffer()[..3].copy_from_slice(&[0, 0, 0]);
    assert_eq!(r.commit(9), Err(ReadError::CommitOverflow));
    let mut r = FrameReader::new([0u8; 32]);
    let two = hex("00 00 00 05 00 00 00 01 41  00 00 00 04 01 00 00 00");
    let used = r.feed(&two).unwrap();
    assert_eq!(used, 9, "never reads past the current frame");
    assert!(r.receive_buffer().is_empty());
    assert_eq!(r.take_frame().unwrap().header(), b"A");
    assert_eq!(r.feed(&two[used..]).unwrap(), 8);
    let f = r.take_frame().unwrap();
    assert_eq!(f.serialize_type(), SerializeType::ROCKETMQ);
    assert!(f.header().is_empty() && f.body().is_empty());
    assert!(r.take_frame().is_none());
}

// ---------------------------------------------------------------------------------------------
// Property tests

fn small_str() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9_%|-]{1,12}",
        "\\PC{1,8}",
        any::<String>().prop_filter("non-empty", |s| !s.is_empty()),
    ]
}

fn ext_pairs() -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::btree_map(small_str(), small_str(), 0..6)
        .prop_map(|m| m.into_iter().collect())
}

proptest! {
    #[test]
    fn command_round_trip(
        code in any::<i16>(),
        lang in 0u8..=13,
        version in any::<i16>(),
        opaque in any::<i32>(),
        flag in any::<i32>(),
        remark in proptest::option::of(small_str()),
        ext in proptest::option::of(ext_pairs()),
        binary in any::<bool>(),
    ) {
        let pairs: Option<Vec<(&str, &str)>> =
            ext.as_ref().map(|v| v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect());
        let cmd = CommandRepr {
            code: code.into(),
            language: LanguageCode(lang),
            version: version.into(),
            opaque,
            flag,
            remark: remark.as_deref(),
            ext: pairs.as_deref(),
        };
        let ty = if binary { SerializeType::ROCKETMQ } else { SerializeType::JSON };
        let bytes = encode(&cmd, ty, b"body");
        let f = Frame::new_checked(&bytes[..]).unwrap();
        prop_assert_eq!(f.body(), b"body");
        let p = CommandHeader::parse(&f).unwrap();
        prop_assert_eq!(p.code(), i32::from(code));
        prop_assert_eq!(p.language(), LanguageCode(lang));
        prop_assert_eq!(p.version(), i32::from(version));
        prop_assert_eq!(p.opaque(), opaque);
        prop_assert_eq!(p.flag(), flag);
        match (&remark, p.remark()) {
            (Some(r), Some(got)) => prop_assert!(got.eq_str(r)),
            (None, None) => {}
            (r, got) => prop_assert!(false, "remark {:?} vs {:?}", r, got),
        }
        let got: Vec<(String, String)> = p
            .ext_iter()
            .map(|(k, v)| (k.chars().collect(), v.chars().collect()))
            .collect();
        prop_assert_eq!(&got, &ext.clone().unwrap_or_default());
        if !binary {
            prop_assert_eq!(p.ext_fields().is_some(), ext.is_some());
        }
        for (k, v) in ext.iter().flatten() {
            let f = p.get(k).unwrap();
            prop_assert!(f.eq_str(v));
            let mut buf = vec![0u8; v.len()];
            prop_assert_eq!(f.unescape_into(&mut buf).unwrap(), v.as_str());
        }
    }

    #[test]
    fn decode_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut scratch = [0u8; 64];
        for ty in [SerializeType::JSON, SerializeType::ROCKETMQ] {
            if let Ok(p) = CommandHeader::parse_bytes(ty, &data) {
                for (k, v) in p.ext_iter() {
                    let _ = (k.eq_str("a"), v.parse_i64(), v.unescape_into(&mut scratch));
                }
                let _ = p.remark().map(|r| r.chars().count());
                let two = SendMessageRequestHeaderV2::decode(&p, &mut Scratch::new(&mut scratch));
                let mut scratch2 = [0u8; 64];
                let framed = frame_of(ty, &data);
                let one = SendMessageRequestHeaderV2::decode_frame(
                    &Frame::new_checked(&framed[..]).unwrap(),
                    &mut Scratch::new(&mut scratch2),
                );
                prop_assert_eq!(one, two.map(|v| (p, v)).map_err(HeaderError::Field));
                let _ = PullMessageResponseHeader::decode(&p, &mut Scratch::empty());
                let _ = SendMessageResponseHeader::decode(&p, &mut Scratch::empty());
            }
        }
        if let Ok(f) = Frame::new_checked(&data[..]) {
            let _ = CommandHeader::parse(&f);
            let _ = (f.header(), f.body(), f.total_length());
        }
        let f = Frame::new_unchecked(&data[..]);
        let _ = (f.header(), f.body(), f.total_length(), f.header_len());
        let mut r = FrameReader::new([0u8; 128]);
        let mut rest = &data[..];
        while let Ok(n) = r.feed(rest) {
            rest = &rest[n..];
            if let Some(f) = r.take_frame() {
                let _ = CommandHeader::parse(&f);
            } else if n == 0 || rest.is_empty() {
                break;
            }
        }
    }

    #[test]
    fn reader_fragments(
        frames in proptest::collection::vec(
            (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..40),
             proptest::collection::vec(any::<u8>(), 0..40)), 1..5),
        cuts in proptest::collection::vec(1usize..20, 1..200),
    ) {
        let mut stream = Vec::new();
        for (bin, h, b) in &frames {
            let total = 4 + h.len() + b.len();
            stream.extend_from_slice(&(total as u32).to_be_bytes());
            stream.extend_from_slice(&(((*bin as u32) << 24) | h.len() as u32).to_be_bytes());
            stream.extend_from_slice(h);
            stream.extend_from_slice(b);
        }
        let mut r = FrameReader::new(vec![0u8; 100]);
        let mut got = Vec::new();
        let mut pos = 0;
        let mut i = 0;
        while pos < stream.len() {
            let want = cuts[i % cuts.len()];
            i += 1;
            let dst = r.receive_buffer();
            prop_assert!(!dst.is_empty());
            let n = want.min(dst.len()).min(stream.len() - pos);
            dst[..n].copy_from_slice(&stream[pos..pos + n]);
            pos += n;
            r.commit(n).unwrap();
            if let Some(f) = r.take_frame() {
                got.push((
                    f.serialize_type() == SerializeType::ROCKETMQ,
                    f.header().to_vec(),
                    f.body().to_vec(),
                ));
            }
        }
        prop_assert_eq!(got, frames);
        prop_assert_eq!(r.remaining(), 8);
    }

    #[test]
    fn send_request_round_trip(
        pg in small_str(), topic in small_str(), dt in small_str(),
        nums in any::<i32>(), qid in any::<i32>(), sys in any::<i32>(), born in any::<i64>(),
        fl in any::<i32>(), props in proptest::option::of(small_str()),
        rt in proptest::option::of(any::<i32>()), um in proptest::option::of(any::<bool>()),
        batch in proptest::option::of(any::<bool>()), mrt in proptest::option::of(any::<i32>()),
        bn in proptest::option::of(small_str()), v2 in any::<bool>(), binary in any::<bool>(),
    ) {
        let h = SendMessageRequestHeader {
            producer_group: &pg, topic: &topic, default_topic: &dt,
            default_topic_queue_nums: nums, queue_id: qid, sys_flag: sys, born_timestamp: born,
            flag: fl, properties: props.as_deref(), reconsume_times: rt, unit_mode: um,
            batch, max_reconsume_times: mrt, broker_name: bn.as_deref(),
        };
        let ty = if binary { SerializeType::ROCKETMQ } else { SerializeType::JSON };
        let mut scratch = vec![0u8; 1024];
        if v2 {
            let v = SendMessageRequestHeaderV2(h);
            let bytes = encode(&CommandRepr::request(RequestCode::SEND_MESSAGE_V2, 1, 479, Some(&v)), ty, &[]);
            let frame = Frame::new_checked(&bytes[..]).unwrap();
            let p = CommandHeader::parse(&frame).unwrap();
            let back = SendMessageRequestHeaderV2::decode(&p, &mut Scratch::new(&mut scratch)).unwrap();
            let mut scratch2 = vec![0u8; 1024];
            let one_pass = SendMessageRequestHeaderV2::decode_frame(&frame, &mut Scratch::new(&mut scratch2));
            prop_assert_eq!(one_pass, Ok((p, back)));
            let mut want = h;
            want.unit_mode = Some(um.unwrap_or(false));
            want.batch = Some(batch.unwrap_or(false));
            prop_assert_eq!(back.0, want);
        } else {
            let bytes = encode(&CommandRepr::request(RequestCode::SEND_MESSAGE, 1, 479, Some(&h)), ty, &[]);
            let frame = Frame::new_checked(&bytes[..]).unwrap();
            let p = CommandHeader::parse(&frame).unwrap();
            let back = SendMessageRequestHeader::decode(&p, &mut Scratch::new(&mut scratch)).unwrap();
            prop_assert_eq!(back, h);
            let mut scratch2 = vec![0u8; 1024];
            let one_pass = SendMessageRequestHeader::decode_frame(&frame, &mut Scratch::new(&mut scratch2));
            prop_assert_eq!(one_pass, Ok((p, h)));
        }
    }

    #[test]
    fn typed_headers_round_trip(
        s1 in small_str(), s2 in small_str(), o1 in proptest::option::of(small_str()),
        o2 in proptest::option::of(small_str()),
        a in any::<i32>(), b in any::<i64>(), c in any::<i64>(), d in any::<i64>(),
        oa in proptest::option::of(any::<i32>()), ob in proptest::option::of(any::<i64>()),
        bo in proptest::option::of(any::<bool>()), binary in any::<bool>(),
    ) {
        let ty = if binary { SerializeType::ROCKETMQ } else { SerializeType::JSON };
        let mut scratch = vec![0u8; 512];
        macro_rules! rt {
            ($ty:ident, $val:expr) => {{
                let h = $val;
                let bytes = encode(&CommandRepr::request(RequestCode(1), 9, 479, Some(&h)), ty, &[]);
                let p = CommandHeader::parse(&Frame::new_checked(&bytes[..]).unwrap()).unwrap();
                let back = $ty::decode(&p, &mut Scratch::new(&mut scratch));
                prop_assert_eq!(back, Ok(h));
            }};
        }
        rt!(GetRouteInfoRequestHeader, GetRouteInfoRequestHeader { topic: &s1, accept_standard_json_only: bo });
        rt!(HeartbeatRequestHeader, HeartbeatRequestHeader {});
        rt!(UnregisterClientRequestHeader, UnregisterClientRequestHeader {
            client_id: &s1, producer_group: o1.as_deref(), consumer_group: o2.as_deref() });
        rt!(SendMessageResponseHeader, SendMessageResponseHeader {
            msg_id: &s1, queue_id: a, queue_offset: b, transaction_id: o1.as_deref(),
            batch_uniq_id: o2.as_deref(), recall_handle: o1.as_deref(), msg_region: Some(&s2),
            trace_on: bo });
        rt!(PullMessageRequestHeader, PullMessageRequestHeader {
            consumer_group: &s1, topic: &s2, queue_id: a, queue_offset: b, max_msg_nums: a,
            sys_flag: a, commit_offset: c, suspend_timeout_millis: d, subscription: o1.as_deref(),
            sub_version: b, expression_type: o2.as_deref(), max_msg_bytes: oa, bname: o1.as_deref() });
        rt!(PullMessageResponseHeader, PullMessageResponseHeader {
            suggest_which_broker_id: b, next_begin_offset: c, min_offset: d, max_offset: b,
            offset_delta: ob, topic_sys_flag: oa, group_sys_flag: oa, forbidden_type: oa });
        rt!(QueryConsumerOffsetRequestHeader, QueryConsumerOffsetRequestHeader {
            consumer_group: &s1, topic: &s2, queue_id: a, set_zero_if_not_found: bo });
        rt!(QueryConsumerOffsetResponseHeader, QueryConsumerOffsetResponseHeader { offset: b });
        rt!(UpdateConsumerOffsetRequestHeader, UpdateConsumerOffsetRequestHeader {
            consumer_group: &s1, topic: &s2, queue_id: a, commit_offset: c });
        rt!(GetConsumerListByGroupRequestHeader, GetConsumerListByGroupRequestHeader { consumer_group: &s1 });
        rt!(NotifyConsumerIdsChangedRequestHeader, NotifyConsumerIdsChangedRequestHeader { consumer_group: &s2 });
        rt!(GetMaxOffsetRequestHeader, GetMaxOffsetRequestHeader { topic: &s1, queue_id: a, committed: bo });
        rt!(GetMinOffsetRequestHeader, GetMinOffsetRequestHeader { topic: &s1, queue_id: a });
        rt!(GetMaxOffsetResponseHeader, GetMaxOffsetResponseHeader { offset: c });
        rt!(EndTransactionRequestHeader, EndTransactionRequestHeader {
            producer_group: &s1, tran_state_table_offset: b, commit_log_offset: c,
            commit_or_rollback: a, from_transaction_check: bo, msg_id: &s2,
            transaction_id: o1.as_deref(), topic: o2.as_deref(), bname: None });
        rt!(CheckTransactionStateRequestHeader, CheckTransactionStateRequestHeader {
            tran_state_table_offset: b, commit_log_offset: d, msg_id: o1.as_deref(),
            transaction_id: o2.as_deref(), offset_msg_id: Some(&s1), topic: None, bname: Some(&s2) });
    }
}

/// The client reads send responses in one pass (`parse_collecting` + `decode_collected`):
/// the same header and the same fields (or the same error) as parsing, then decoding.
#[test]
fn send_response_single_pass_matches_two_passes() {
    use super::headers::SendMessageResponseHeader as R;
    let json: &[&[u8]] = &[
        br#"{"code":0,"extFields":{"MSG_REGION":"DefaultRegion","TRACE_ON":"true","msgId":"0A00000500002A9F0000000000012345","queueId":"1","queueOffset":"37","transactionId":"C0A8"},"flag":1,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":479}"#,
        // Keys in any order, repeated (the last wins), escaped, numbers bare, nulls.
        br#"{"opaque":8,"extFields":{"queueOffset":"1","msgId":"a","msgId":"b\u0041","queueId":2,"recallHandle":null,"queueOffset":"-9"},"code":10,"flag":1}"#,
        // A later extFields replaces an earlier one.
        br#"{"code":0,"opaque":9,"flag":1,"extFields":{"msgId":"x","queueId":"1","queueOffset":"2"},"extFields":{"msgId":"y","queueId":"3"}}"#,
        // Tolerant JSON (whitespace, single quotes, bare keys): the slow parser.
        br#" { opaque:10, 'flag':1, "extFields":{ 'msgId':'m', "queueId":"4", queueOffset:5 } } "#,
        // Missing and invalid fields.
        br#"{"code":0,"opaque":11,"flag":1,"extFields":{"msgId":"m","queueId":"x","queueOffset":"1"}}"#,
        br#"{"code":0,"opaque":12,"flag":1,"extFields":{"msgId":"m"}}"#,
        br#"{"code":0,"opaque":13,"flag":1}"#,
    ];
    let mut frames: Vec<std::vec::Vec<u8>> = json
        .iter()
        .map(|h| {
            let mut f = std::vec::Vec::new();
            f.extend_from_slice(&((4 + h.len()) as u32).to_be_bytes());
            f.extend_from_slice(&(h.len() as u32).to_be_bytes());
            f.extend_from_slice(h);
            f
        })
        .collect();
    // The same fields in the binary (ROCKETMQ) header.
    let ext = [
        ("msgId", "0A0B"),
        ("queueId", "6"),
        ("queueOffset", "77"),
        ("msgId", "0A0C"),
    ];
    let cmd = CommandRepr::response(ResponseCode(0), 14, version::V5_3_3, Some(&ext[..]));
    let mut buf = [0u8; 512];
    let n = cmd
        .emit_frame_prefix_and_header(SerializeType::ROCKETMQ, 0, &mut buf)
        .unwrap();
    frames.push(buf[..n].to_vec());
    for bytes in &frames {
        let f = Frame::new_checked(&bytes[..]).unwrap();
        let h = CommandHeader::parse(&f).unwrap();
        let (h1, slots) = R::parse_collecting(&f).unwrap();
        assert_eq!(h1, h);
        let (mut s1, mut s2) = ([0u8; 64], [0u8; 64]);
        let two = R::decode(&h, &mut Scratch::new(&mut s1));
        let one = R::decode_collected(&h1, slots, &mut Scratch::new(&mut s2));
        assert_eq!(one, two, "{}", String::from_utf8_lossy(bytes));
    }
}
