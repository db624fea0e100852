//! Test support: the real-broker harness and fault-injection peers.
