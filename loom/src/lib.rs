//! rmq-std's shared-state layer, compiled here on loom's primitives for the models in
//! `tests/` (run: `RUSTFLAGS="--cfg loom" cargo test --release -p rmq-loom`).
//!
//! The files are rmq-std's own (`runtime-std/src/sync.rs`, `shared.rs`): under `--cfg loom`
//! `sync` re-exports loom's `Mutex` and atomics instead of std's. This crate depends on
//! rmq-core and loom only, so the flag changes no other crate (tokio is not built here).
#![cfg(loom)]

#[path = "../../runtime-std/src/sync.rs"]
pub mod sync;

#[path = "../../runtime-std/src/shared.rs"]
pub mod shared;
