//! # rmq-std
//!
//! The tokio runtime of rmq: it moves bytes between sockets and [`rmq_core`], owns timers and
//! shares state. Every protocol decision is made in the core.

pub use rmq_core as core;
