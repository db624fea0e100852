//! Test support: the real-broker harness, fault-injection peers and the policy simulator.
//!
//! - [`blocking`]: a minimal blocking producer built from rmq-core pieces (interop tests).
//! - [`broker`]: starts a genuine Apache RocketMQ NameServer and brokers (5.3.3 or 4.9.x line)
//!   from Maven Central jars, plus the Java-side reference tools (`Verifier`, `JavaProducer`).
//! - [`relay`]: a recording TCP relay that captures every remoting frame in both directions.
//! - [`sim`]: the deterministic fault-tolerance policy simulator (`rmq-sim`).

pub mod blocking;
pub mod broker;
pub mod relay;
pub mod sim;
