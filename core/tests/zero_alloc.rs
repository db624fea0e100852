//! Proves that encoding and decoding a SEND_MESSAGE_V2 frame with a 1 KiB body performs zero
//! heap allocations, in both serialize types, through the streaming reader.
//!
//! A counting `#[global_allocator]` needs `unsafe impl GlobalAlloc`; this test binary is the
//! only place that is allowed (the library itself forbids unsafe code).
#![allow(unsafe_code)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use rmq_core::wire::headers::{SendMessageRequestHeaderV2, SendMessageResponseHeader};
use rmq_core::wire::{
    CommandHeader, CommandRepr, FrameReader, RequestCode, ResponseCode, Scratch, SerializeType,
    version,
};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Everything on the stack; returns a checksum so nothing is optimised away.
fn round_trip(ty: SerializeType) -> usize {
    let body = [0x5au8; 1024];
    let header = common::send_v2();
    let cmd = CommandRepr::request(
        RequestCode::SEND_MESSAGE_V2,
        7,
        version::V5_3_3,
        Some(&header),
    );

    // Encode: prefix + header into one buffer, body "sent" separately.
    let mut out = [0u8; 2048];
    let n = cmd
        .emit_frame_prefix_and_header(ty, body.len(), &mut out)
        .unwrap();
    out[n..n + body.len()].copy_from_slice(&body);
    let wire = &out[..n + body.len()];

    // Decode through the streaming reader, in odd-sized pieces.
    let mut rx = [0u8; 4096];
    let mut reader = FrameReader::new(&mut rx[..]);
    let mut rest = wire;
    while reader.remaining() > 0 && !rest.is_empty() {
        let take = rest.len().min(97);
        let used = reader.feed(&rest[..take]).unwrap();
        rest = &rest[used..];
    }
    let frame = reader.take_frame().unwrap();
    let parsed = CommandHeader::parse(&frame).unwrap();
    let mut scratch = [0u8; 256];
    let back =
        SendMessageRequestHeaderV2::decode(&parsed, &mut Scratch::new(&mut scratch)).unwrap();
    assert_eq!(back, header);
    assert_eq!(frame.body(), &body[..]);
    // The one-pass decode too.
    let mut scratch2 = [0u8; 256];
    let (parsed2, back2) =
        SendMessageRequestHeaderV2::decode_frame(&frame, &mut Scratch::new(&mut scratch2)).unwrap();
    assert_eq!((parsed2, back2), (parsed, header));

    // And a response header.
    let resp = SendMessageResponseHeader {
        msg_id: "0A00000500002A9F0000000000012345",
        queue_id: 1,
        queue_offset: 37,
        transaction_id: Some("C0A8010A30391B6D3586000F42400007"),
        batch_uniq_id: None,
        recall_handle: None,
        msg_region: Some("DefaultRegion"),
        trace_on: Some(true),
    };
    let rcmd = CommandRepr::response(ResponseCode::SUCCESS, 7, version::V5_3_3, Some(&resp));
    let mut rbuf = [0u8; 512];
    let rn = rcmd.emit(ty, &mut rbuf).unwrap();
    let rparsed = CommandHeader::parse_bytes(ty, &rbuf[..rn]).unwrap();
    let rback = SendMessageResponseHeader::decode(&rparsed, &mut Scratch::empty()).unwrap();
    assert_eq!(rback, resp);

    n + back.0.topic.len() + rn
}

#[test]
fn encode_and_decode_do_not_allocate() {
    for ty in [SerializeType::JSON, SerializeType::ROCKETMQ] {
        // Warm up anything lazily initialised by the test harness on this thread.
        let _ = round_trip(ty);
        let before = ALLOCS.load(Ordering::SeqCst);
        let sum = round_trip(ty);
        let after = ALLOCS.load(Ordering::SeqCst);
        assert!(sum > 0);
        assert_eq!(after - before, 0, "{ty:?}: {} allocations", after - before);
    }
}
