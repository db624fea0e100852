//! Side-by-side codec benchmark of rmq-core and rocketmq-protocol: the fixture and the
//! operations both sides run (used by `benches/codec.rs` and `examples/ops.rs`; see
//! `BENCHMARKS.md` at the repository root).
//!
//! Equivalent work on both sides:
//! - **encode**: typed V2 header values in, the whole frame (prefix, header, 1 KiB body) out as
//!   contiguous bytes in a reused output buffer.
//! - **decode**: the whole frame is copied from the "socket" into the decoder's receive buffer,
//!   split off, the header decoded, the typed V2 header extracted (all fields, `properties`
//!   unescaped) and the body located.

use bytes::{BufMut, Bytes, BytesMut};
use cheetah_string::CheetahString;

use rmq_core::wire::headers::{SendMessageRequestHeader, SendMessageRequestHeaderV2};
use rmq_core::wire::{CommandRepr, FrameReader, RequestCode, Scratch, SerializeType};

use rocketmq_protocol::RemotingCommand;
use rocketmq_protocol::code::request_code::RequestCode as PeerCode;
use rocketmq_protocol::protocol::SerializeType as PeerType;
use rocketmq_protocol::protocol::header::message_operation_header::send_message_request_header_v2::SendMessageRequestHeaderV2 as PeerV2;

// ------------------------------------------------------------------------------------------
// Fixture: a realistic SEND_MESSAGE_V2 (docs/protocol/WIRE.md §6.4), 1 KiB body

pub const GROUP: &str = "please_rename_unique_group_name";
pub const TOPIC: &str = "TopicTest";
pub const TBW102: &str = "TBW102";
pub const BROKER: &str = "broker-a";
pub const PROPS: &str = "TAGS\u{1}TagA\u{2}KEYS\u{1}order-1\u{2}WAIT\u{1}true\u{2}UNIQ_KEY\u{1}C0A8010A30391B6D3586000F42400007\u{2}";
pub const BORN: i64 = 1_700_000_000_000;
pub const OPAQUE: i32 = 7;
pub const VERSION: i32 = 479;
pub static BODY: [u8; 1024] = [0x5a; 1024];

pub fn ours_header() -> SendMessageRequestHeaderV2<'static> {
    SendMessageRequestHeaderV2(SendMessageRequestHeader {
        producer_group: GROUP,
        topic: TOPIC,
        default_topic: TBW102,
        default_topic_queue_nums: 4,
        queue_id: 1,
        sys_flag: 0,
        born_timestamp: BORN,
        flag: 0,
        properties: Some(PROPS),
        reconsume_times: Some(0),
        unit_mode: Some(false),
        batch: Some(false),
        max_reconsume_times: None,
        broker_name: Some(BROKER),
    })
}

pub fn peer_header() -> PeerV2 {
    PeerV2 {
        a: CheetahString::from_static_str(GROUP),
        b: CheetahString::from_static_str(TOPIC),
        c: CheetahString::from_static_str(TBW102),
        d: 4,
        e: 1,
        f: 0,
        g: BORN,
        h: 0,
        i: Some(CheetahString::from_static_str(PROPS)),
        j: Some(0),
        k: Some(false),
        l: None,
        m: Some(false),
        n: Some(CheetahString::from_static_str(BROKER)),
        topic_request_header: None,
    }
}

pub fn ty_ours(json: bool) -> SerializeType {
    if json {
        SerializeType::JSON
    } else {
        SerializeType::ROCKETMQ
    }
}

pub fn ty_peer(json: bool) -> PeerType {
    if json {
        PeerType::JSON
    } else {
        PeerType::ROCKETMQ
    }
}

// ------------------------------------------------------------------------------------------
// The operations

/// rmq-core encode: prefix + header into the caller buffer, then the body behind it.
pub fn ours_encode(json: bool, hdr: &SendMessageRequestHeaderV2<'_>, out: &mut [u8]) -> usize {
    let repr = CommandRepr::request(RequestCode::SEND_MESSAGE_V2, OPAQUE, VERSION, Some(hdr));
    let n = repr
        .emit_frame_prefix_and_header(ty_ours(json), BODY.len(), out)
        .expect("encode");
    // Through black_box: the compiler would turn a copy of the constant body into a memset.
    out[n..n + BODY.len()].copy_from_slice(std::hint::black_box(&BODY));
    n + BODY.len()
}

/// rocketmq-protocol encode: its transport path (`try_fast_header_encode` writes prefix and
/// header into a `BytesMut`, the body is appended after it). The header is a clone of a
/// prebuilt one whose strings are `&'static` (cheapest possible for the peer).
pub fn peer_encode(json: bool, hdr: &PeerV2, body: &Bytes, dst: &mut BytesMut) -> usize {
    dst.clear();
    let mut cmd = RemotingCommand::create_request_command(PeerCode::SendMessageV2, hdr.clone())
        .set_opaque(OPAQUE)
        .set_version(VERSION)
        .set_serialize_type(ty_peer(json))
        .set_body(body.clone());
    cmd.try_fast_header_encode(dst).expect("peer encode");
    dst.put_slice(body);
    dst.len()
}

/// Fields both decoders must extract.
#[derive(Debug, PartialEq, Eq)]
pub struct Extracted {
    pub code: i32,
    pub opaque: i32,
    pub version: i32,
    pub group: String,
    pub topic: String,
    pub default_topic: String,
    pub queue_id: i32,
    pub sys_flag: i32,
    pub born: i64,
    pub properties: String,
    pub broker: String,
    pub body_len: usize,
}

/// rmq-core decode: feed the frame into a `FrameReader`, parse the header and the typed
/// header in one pass (`decode_frame`; properties unescaped into a scratch buffer), hand the
/// extracted fields to `sink`.
pub fn ours_decode<R>(
    frame: &[u8],
    reader: &mut FrameReader<Vec<u8>>,
    sink: impl FnOnce(i32, i32, i32, &SendMessageRequestHeader<'_>, &[u8]) -> R,
) -> R {
    let used = reader.feed(frame).expect("feed");
    debug_assert_eq!(used, frame.len());
    let f = reader.take_frame().expect("complete frame");
    let mut sbuf = [0u8; 256];
    let mut scratch = Scratch::new(&mut sbuf);
    // One pass: the command header and the typed header together.
    let (h, v2) = SendMessageRequestHeaderV2::decode_frame(&f, &mut scratch).expect("header");
    sink(h.code(), h.opaque(), h.version(), &v2.0, f.body_ref())
}

/// rocketmq-protocol decode: the frame is appended to the receive `BytesMut`, `decode` splits
/// it off and parses the header, then the typed header is extracted.
pub fn peer_decode<R>(
    frame: &[u8],
    src: &mut BytesMut,
    sink: impl FnOnce(i32, i32, i32, &PeerV2, &[u8]) -> R,
) -> R {
    src.extend_from_slice(frame);
    let cmd = RemotingCommand::decode(src)
        .expect("decode")
        .expect("complete");
    let h: PeerV2 = cmd.decode_command_custom_header().expect("typed header");
    let body: &[u8] = cmd.body().map_or(&[], |b| b.as_ref());
    sink(cmd.code(), cmd.opaque(), cmd.version(), &h, body)
}

pub fn extract_ours(
    c: i32,
    o: i32,
    v: i32,
    h: &SendMessageRequestHeader<'_>,
    b: &[u8],
) -> Extracted {
    Extracted {
        code: c,
        opaque: o,
        version: v,
        group: h.producer_group.into(),
        topic: h.topic.into(),
        default_topic: h.default_topic.into(),
        queue_id: h.queue_id,
        sys_flag: h.sys_flag,
        born: h.born_timestamp,
        properties: h.properties.unwrap_or_default().into(),
        broker: h.broker_name.unwrap_or_default().into(),
        body_len: b.len(),
    }
}

pub fn extract_peer(c: i32, o: i32, v: i32, h: &PeerV2, b: &[u8]) -> Extracted {
    Extracted {
        code: c,
        opaque: o,
        version: v,
        group: h.a.as_str().into(),
        topic: h.b.as_str().into(),
        default_topic: h.c.as_str().into(),
        queue_id: h.e,
        sys_flag: h.f,
        born: h.g,
        properties: h
            .i
            .as_ref()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default(),
        broker: h
            .n
            .as_ref()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default(),
        body_len: b.len(),
    }
}

/// Cross-check: each side decodes both sides' frames to the same values, so the two encoders
/// produce equivalent frames and the two decoders extract the same fields.
pub fn cross_check() {
    let expected = Extracted {
        code: 310,
        opaque: OPAQUE,
        version: VERSION,
        group: GROUP.into(),
        topic: TOPIC.into(),
        default_topic: TBW102.into(),
        queue_id: 1,
        sys_flag: 0,
        born: BORN,
        properties: PROPS.into(),
        broker: BROKER.into(),
        body_len: BODY.len(),
    };
    let body = Bytes::from_static(&BODY);
    for json in [true, false] {
        let mut ours = vec![0u8; 4096];
        let n = ours_encode(json, &ours_header(), &mut ours);
        ours.truncate(n);
        let mut peer = BytesMut::new();
        peer_encode(json, &peer_header(), &body, &mut peer);
        for frame in [&ours[..], &peer[..]] {
            let mut reader = FrameReader::new(vec![0u8; 4096]);
            assert_eq!(ours_decode(frame, &mut reader, extract_ours), expected);
            let mut src = BytesMut::new();
            assert_eq!(peer_decode(frame, &mut src, extract_peer), expected);
        }
        println!(
            "frame bytes ({}): rmq-core {} / rocketmq-protocol {}",
            if json { "JSON" } else { "ROCKETMQ" },
            ours.len(),
            peer.len()
        );
    }
}
