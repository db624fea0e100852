//! A rough throughput check of the codec (not a benchmark harness). Run with
//! `cargo test -p rmq-core --release --test codec_speed -- --ignored --nocapture`.

mod common;

use std::hint::black_box;
use std::time::Instant;

use rmq_core::wire::headers::SendMessageRequestHeaderV2;
use rmq_core::wire::{
    CommandHeader, CommandRepr, Frame, RequestCode, Scratch, SerializeType, version,
};

#[test]
#[ignore = "timing only; run in release with --ignored --nocapture"]
fn send_v2_codec_speed() {
    let header = common::send_v2();
    // RMQ_BENCH_N / RMQ_BENCH_ROUNDS shrink the run (e.g. for callgrind instruction counts).
    let env_u32 = |k: &str, d: u32| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let n_iter: u32 = env_u32("RMQ_BENCH_N", 100_000).max(1);
    let rounds = env_u32("RMQ_BENCH_ROUNDS", 7).max(1);
    let types = match std::env::var("RMQ_BENCH_TYPE").as_deref() {
        Ok("json") => &[SerializeType::JSON][..],
        Ok("rocketmq") => &[SerializeType::ROCKETMQ][..],
        _ => &[SerializeType::JSON, SerializeType::ROCKETMQ][..],
    };
    for &ty in types {
        let mut buf = [0u8; 1024];
        let mut n = 0;
        let (mut enc, mut parse, mut dec) = (u128::MAX, u128::MAX, u128::MAX);
        // Best of several rounds: the machine may be shared.
        for _ in 0..rounds {
            let t = Instant::now();
            for i in 0..n_iter {
                let cmd = CommandRepr::request(
                    RequestCode::SEND_MESSAGE_V2,
                    i as i32,
                    version::V5_3_3,
                    Some(black_box(&header)),
                );
                n = cmd.emit_frame_prefix_and_header(ty, 0, &mut buf).unwrap();
                black_box(&buf);
            }
            enc = enc.min(t.elapsed().as_nanos() / u128::from(n_iter));
            let t = Instant::now();
            for _ in 0..n_iter {
                let f = Frame::new_checked(black_box(&buf[..n])).unwrap();
                black_box(CommandHeader::parse(&f).unwrap());
            }
            parse = parse.min(t.elapsed().as_nanos() / u128::from(n_iter));
            let t = Instant::now();
            let mut scratch = [0u8; 256];
            for _ in 0..n_iter {
                let f = Frame::new_checked(black_box(&buf[..n])).unwrap();
                let p = CommandHeader::parse(&f).unwrap();
                let h = SendMessageRequestHeaderV2::decode(&p, &mut Scratch::new(&mut scratch))
                    .unwrap();
                black_box(h);
            }
            dec = dec.min(t.elapsed().as_nanos() / u128::from(n_iter));
        }
        println!(
            "{ty:?}: header {} bytes: encode {enc} ns, parse header {parse} ns, parse + typed decode {dec} ns",
            n - 8
        );
    }
}
