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

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_group};

use rmq_bench_codec::{
    BODY, cross_check, ours_decode, ours_encode, ours_header, peer_decode, peer_encode, peer_header,
};
use rmq_core::wire::FrameReader;

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
        // The sinks hand the results to `black_box`.
        let d_ours = allocs_per_op(|| {
            ours_decode(black_box(&frame), &mut reader, |c, o, v, h, b| {
                black_box((c, o, v, h.properties, b.len()));
            });
        });
        let mut src = BytesMut::with_capacity(4096);
        let d_peer = allocs_per_op(|| {
            peer_decode(black_box(&frame), &mut src, |c, o, v, h, b| {
                black_box((c, o, v, h.i.as_ref().map(|s| s.as_str().len()), b.len()));
            });
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
