//! Test support: the real-broker harness and fault-injection peers.

pub mod sim;
