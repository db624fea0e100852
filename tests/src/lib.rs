//! Test support: the real-broker harness, fault-injection peers and the policy simulator.
//!
//! - [`blocking`]: a minimal blocking producer over `std::net::TcpStream` built from rmq-core
//!   (no runtime), used by the interop suite.
//! - [`broker`]: starts a genuine Apache RocketMQ NameServer and brokers (5.3.3, or 4.9.7 for
//!   the 4.9 line) from Maven Central jars, plus the Java-side reference tools (`Verifier`,
//!   `JavaProducer`).
//! - [`hostile`]: scripted fake NameServer and brokers for fault injection (hostile peers).
//! - [`netns`]: private network namespaces with a TAP device (the gateway tests).
//! - [`proxy`]: a frame-aware proxy that answers or rewrites chosen frames (fault injection).
//! - [`relay`]: a recording TCP relay that captures every remoting frame in both directions.
//! - [`sim`]: the deterministic fault-tolerance policy simulator (`rmq-sim`).

pub mod blocking;
pub mod broker;
pub mod faults;
pub mod hostile;
pub mod netns;
pub mod pki;
pub mod proxy;
pub mod relay;
pub mod sim;

/// Polls `c` until `want` messages were read and then 3 s passed without more (60 s at most):
/// acknowledges each, fails on a body read twice, returns the bodies (as UTF-8 text).
pub async fn read_all(
    c: &rmq_std::consumer::Consumer,
    want: usize,
) -> std::collections::BTreeSet<String> {
    use std::time::{Duration, Instant};
    let mut got = std::collections::BTreeSet::new();
    let t0 = Instant::now();
    let mut quiet_since = None;
    while t0.elapsed() < Duration::from_secs(60) {
        let batch = c.poll(64, Duration::from_millis(500)).await;
        for m in &batch {
            let body = String::from_utf8_lossy(&m.body).into_owned();
            assert!(got.insert(body.clone()), "{body} delivered twice");
            assert!(c.ack(m), "ack {body}");
        }
        if got.len() >= want {
            let since = *quiet_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(3) {
                break;
            }
        }
    }
    got
}

/// The tokio runtime the real-broker tests drive rmq-std on: multi-threaded, two workers.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}
