//! Side-by-side codec benchmark of rmq-core and rocketmq-protocol; everything is in
//! `benches/codec.rs` (run `cargo bench` here, see `BENCHMARKS.md` at the repository root).
