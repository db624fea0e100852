//! Runs one benchmark operation N times with nothing else in the loop, for instruction and
//! cycle counts that do not depend on the machine's load as much as wall time does:
//!
//! ```sh
//! cargo build --release --example ops
//! perf stat -e instructions:u,cycles:u target/release/examples/ops encode-json-ours 1000000
//! ```
//!
//! Cells: `{encode,decode}-{json,rocketmq}-{ours,peer}`. Setup (fixtures, buffers, one frame)
//! costs the same for every cell; subtract a run with N = 0 for exact per-operation counts.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use rmq_bench_codec::{
    BODY, ours_decode, ours_encode, ours_header, peer_decode, peer_encode, peer_header,
};
use rmq_core::wire::FrameReader;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(cell), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: ops {{encode,decode}}-{{json,rocketmq}}-{{ours,peer}} N");
        std::process::exit(2);
    };
    let parts: Vec<&str> = cell.split('-').collect();
    let [op, ty, side] = parts[..] else {
        eprintln!("bad cell {cell}");
        std::process::exit(2);
    };
    let json = ty == "json";
    let body = Bytes::from_static(&BODY);
    let ours_hdr = ours_header();
    let peer_hdr = peer_header();
    let mut out = vec![0u8; 4096];
    let len = ours_encode(json, &ours_hdr, &mut out);
    let frame = out[..len].to_vec();
    let mut dst = BytesMut::with_capacity(4096);
    let mut reader = FrameReader::new(vec![0u8; 4096]);
    let mut src = BytesMut::with_capacity(4096);
    for _ in 0..n {
        match (op, side) {
            ("encode", "ours") => {
                black_box(ours_encode(json, black_box(&ours_hdr), &mut out));
            }
            ("encode", "peer") => {
                black_box(peer_encode(json, black_box(&peer_hdr), &body, &mut dst));
            }
            ("decode", "ours") => {
                ours_decode(black_box(&frame), &mut reader, |c, o, v, h, b| {
                    black_box((c, o, v, h, b.len()));
                });
            }
            ("decode", "peer") => {
                peer_decode(black_box(&frame), &mut src, |c, o, v, h, b| {
                    black_box((c, o, v, h, b.len()));
                });
            }
            _ => {
                eprintln!("bad cell {cell}");
                std::process::exit(2);
            }
        }
    }
}
