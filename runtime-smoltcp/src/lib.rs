//! # rmq-smoltcp
//!
//! Drives the [`rmq_core`] producer over smoltcp TCP sockets, with no heap.
#![no_std]
#![forbid(unsafe_code)]

pub use rmq_core as core;
