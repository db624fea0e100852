//! SEND_MESSAGE_V2 request codec, rmq-core vs rocketmq-protocol 1.0.0 (mxsm/rocketmq-rust),
//! side by side in one run, both serialize types. See BENCHMARKS.md at the repository root.
//!
//! Equivalent work on both sides:
//! - **encode**: typed V2 header values in, the whole frame (prefix, header, 1 KiB body) out as
//!   contiguous bytes in a reused output buffer.
//! - **decode**: the whole frame is copied from the "socket" into the decoder's receive buffer,
//!   split off, the header decoded, the typed V2 header extracted (all fields, `properties`
//!   unescaped) and the body located.
//!
//! Before criterion runs, a counting global allocator reports allocations per operation.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use cheetah_string::CheetahString;
use criterion::{Criterion, Throughput, criterion_group};

use rmq_core::wire::headers::{SendMessageRequestHeader, SendMessageRequestHeaderV2};
use rmq_core::wire::{
    CommandHeader, CommandRepr, FrameReader, RequestCode, Scratch, SerializeType,
};

use rocketmq_protocol::RemotingCommand;
use rocketmq_protocol::code::request_code::RequestCode as PeerCode;
use rocketmq_protocol::protocol::SerializeType as PeerType;
use rocketmq_protocol::protocol::header::message_operation_header::send_message_request_header_v2::SendMessageRequestHeaderV2 as PeerV2;

// ------------------------------------------------------------------------------------------
// Counting allocator

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(l.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(l.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(n as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Average allocations and allocated bytes per call of `f` (after a warm-up).
fn allocs_per_op(mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..100 {
        f();
    }
    const N: u64 = 10_000;
    let (a0, b0) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    for _ in 0..N {
        f();
    }
    let (a1, b1) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    ((a1 - a0) as f64 / N as f64, (b1 - b0) as f64 / N as f64)
}

// ------------------------------------------------------------------------------------------
// Fixture: a realistic SEND_MESSAGE_V2 (WIRE.md §6.4), 1 KiB body

const GROUP: &str = "please_rename_unique_group_name";
const TOPIC: &str = "TopicTest";
const TBW102: &str = "TBW102";
const BROKER: &str = "broker-a";
const PROPS: &str = "TAGS\u{1}TagA\u{2}KEYS\u{1}order-1\u{2}WAIT\u{1}true\u{2}UNIQ_KEY\u{1}C0A8010A30391B6D3586000F42400007\u{2}";
const BORN: i64 = 1_700_000_000_000;
const OPAQUE: i32 = 7;
const VERSION: i32 = 479;
static BODY: [u8; 1024] = [0x5a; 1024];

fn ours_header() -> SendMessageRequestHeaderV2<'static> {
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

fn peer_header() -> PeerV2 {
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

fn ty_ours(json: bool) -> SerializeType {
    if json {
        SerializeType::JSON
    } else {
        SerializeType::ROCKETMQ
    }
}

fn ty_peer(json: bool) -> PeerType {
    if json {
        PeerType::JSON
    } else {
        PeerType::ROCKETMQ
    }
}

// ------------------------------------------------------------------------------------------
// The operations

/// rmq-core encode: prefix + header into the caller buffer, then the body behind it.
fn ours_encode(json: bool, hdr: &SendMessageRequestHeaderV2<'_>, out: &mut [u8]) -> usize {
    let repr = CommandRepr::request(RequestCode::SEND_MESSAGE_V2, OPAQUE, VERSION, Some(hdr));
    let n = repr
        .emit_frame_prefix_and_header(ty_ours(json), BODY.len(), out)
        .expect("encode");
    out[n..n + BODY.len()].copy_from_slice(&BODY);
    n + BODY.len()
}

/// rocketmq-protocol encode: its transport path (`try_fast_header_encode` writes prefix and
/// header into a `BytesMut`, the body is appended after it). The header is a clone of a
/// prebuilt one whose strings are `&'static` (cheapest possible for the peer).
fn peer_encode(json: bool, hdr: &PeerV2, body: &Bytes, dst: &mut BytesMut) -> usize {
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
struct Extracted {
    code: i32,
    opaque: i32,
    version: i32,
    group: String,
    topic: String,
    default_topic: String,
    queue_id: i32,
    sys_flag: i32,
    born: i64,
    properties: String,
    broker: String,
    body_len: usize,
}

/// rmq-core decode: feed the frame into a `FrameReader`, parse header and typed header
/// (properties unescaped into a scratch buffer), hand the extracted fields to `sink`.
fn ours_decode<R>(
    frame: &[u8],
    reader: &mut FrameReader<Vec<u8>>,
    sink: impl FnOnce(i32, i32, i32, &SendMessageRequestHeader<'_>, &[u8]) -> R,
) -> R {
    let used = reader.feed(frame).expect("feed");
    debug_assert_eq!(used, frame.len());
    let f = reader.take_frame().expect("complete frame");
    let h = CommandHeader::parse(&f).expect("header");
    let mut sbuf = [0u8; 256];
    let mut scratch = Scratch::new(&mut sbuf);
    let v2 = SendMessageRequestHeaderV2::decode(&h, &mut scratch).expect("typed header");
    sink(h.code(), h.opaque(), h.version(), &v2.0, f.body_ref())
}

/// rocketmq-protocol decode: the frame is appended to the receive `BytesMut`, `decode` splits
/// it off and parses the header, then the typed header is extracted.
fn peer_decode<R>(
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

fn extract_ours(c: i32, o: i32, v: i32, h: &SendMessageRequestHeader<'_>, b: &[u8]) -> Extracted {
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

fn extract_peer(c: i32, o: i32, v: i32, h: &PeerV2, b: &[u8]) -> Extracted {
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
fn cross_check() {
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

fn report_allocations() {
    println!("allocations per operation (average of 10000 after warm-up):");
    println!(
        "{:<10} {:<7} {:>22} {:>28}",
        "type", "op", "rmq-core allocs/bytes", "rocketmq-protocol allocs/bytes"
    );
    let body = Bytes::from_static(&BODY);
    for json in [true, false] {
        let name = if json { "JSON" } else { "ROCKETMQ" };
        let ours_hdr = ours_header();
        let peer_hdr = peer_header();
        let mut out = vec![0u8; 4096];
        let mut dst = BytesMut::with_capacity(4096);
        let e_ours = allocs_per_op(|| {
            black_box(ours_encode(json, black_box(&ours_hdr), &mut out));
        });
        let e_peer = allocs_per_op(|| {
            black_box(peer_encode(json, black_box(&peer_hdr), &body, &mut dst));
        });
        let n = ours_encode(json, &ours_hdr, &mut out);
        let frame = out[..n].to_vec();
        let mut reader = FrameReader::new(vec![0u8; 4096]);
        let d_ours = allocs_per_op(|| {
            black_box(ours_decode(
                black_box(&frame),
                &mut reader,
                |c, o, v, h, b| {
                    black_box((c, o, v, h.properties, b.len()));
                },
            ));
        });
        let mut src = BytesMut::with_capacity(4096);
        let d_peer = allocs_per_op(|| {
            black_box(peer_decode(black_box(&frame), &mut src, |c, o, v, h, b| {
                black_box((c, o, v, h.i.as_ref().map(|s| s.as_str().len()), b.len()));
            }));
        });
        for (op, o, p) in [("encode", e_ours, e_peer), ("decode", d_ours, d_peer)] {
            println!(
                "{:<10} {:<7} {:>12.2} / {:>7.0} {:>18.2} / {:>7.0}",
                name, op, o.0, o.1, p.0, p.1
            );
        }
    }
}

// ------------------------------------------------------------------------------------------
// Criterion

fn codec(c: &mut Criterion) {
    let body = Bytes::from_static(&BODY);
    for json in [true, false] {
        let name = if json { "json" } else { "rocketmq" };
        let ours_hdr = ours_header();
        let peer_hdr = peer_header();
        let mut out = vec![0u8; 4096];
        let n = ours_encode(json, &ours_hdr, &mut out);
        let frame = out[..n].to_vec();

        let mut g = c.benchmark_group(format!("send_v2_encode/{name}"));
        g.throughput(Throughput::Elements(1));
        g.bench_function("rmq-core", |b| {
            b.iter(|| ours_encode(json, black_box(&ours_hdr), &mut out))
        });
        let mut dst = BytesMut::with_capacity(4096);
        g.bench_function("rocketmq-protocol", |b| {
            b.iter(|| peer_encode(json, black_box(&peer_hdr), &body, &mut dst))
        });
        g.finish();

        let mut g = c.benchmark_group(format!("send_v2_decode/{name}"));
        g.throughput(Throughput::Elements(1));
        let mut reader = FrameReader::new(vec![0u8; 4096]);
        g.bench_function("rmq-core", |b| {
            b.iter(|| {
                ours_decode(black_box(&frame), &mut reader, |c, o, v, h, body| {
                    black_box((c, o, v, h, body.len()));
                })
            })
        });
        let mut src = BytesMut::with_capacity(4096);
        g.bench_function("rocketmq-protocol", |b| {
            b.iter(|| {
                peer_decode(black_box(&frame), &mut src, |c, o, v, h, body| {
                    black_box((c, o, v, h, body.len()));
                })
            })
        });
        g.finish();
    }
}

criterion_group!(benches, codec);

fn main() {
    cross_check();
    report_allocations();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
