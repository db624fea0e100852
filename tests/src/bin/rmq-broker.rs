//! Start a real Apache RocketMQ NameServer + broker (the rmq-tests harness) for scripts such as
//! `tests/bench/compare`, and keep it alive until standard input closes.
//!
//! Usage:
//!
//! ```text
//! rmq-broker [--version 5.3.3|4.9] [--topic NAME]... [--queues N] [--broker-heap-mb N] [--proxy]
//! ```
//!
//! `--proxy` (5.3.3 only) also starts `rocketmq-proxy` in cluster mode in front of the cluster
//! and prints `PROXY 127.0.0.1:<port>` (its remoting port: the NameServer address a client
//! gives to go through it).
//!
//! Prints, one per line, once the cluster is up (and the topics created, each with N queues):
//!
//! ```text
//! NAMESRV 127.0.0.1:<port>
//! BROKER 127.0.0.1:<port>
//! RUN_DIR <path>
//! READY
//! ```
//!
//! Then waits for end of input on stdin and stops the cluster (every JVM SIGKILLed and reaped).
//! If this process is killed by a signal instead, the harness's per-JVM watchdog kills the JVMs
//! within about a second, so no JVM outlives it either way.
//!
//! The jar cache is `$RMQ_CACHE_DIR` or `<workspace>/target/rocketmq` (see tests/README.md); the
//! client jars end up in `<cache>/lib-<version>/client/` because creating the topic runs mqadmin.

use std::io::{Read, Write};
use std::time::Duration;

use rmq_tests::broker::{Cluster, ClusterOptions, Version};

fn main() {
    let mut version = Version::V5_3_3;
    let mut topics: Vec<String> = Vec::new();
    let mut queues: u32 = 8;
    let mut options = ClusterOptions::default();
    let mut proxy = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| fail(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--version" => {
                version = match value().as_str() {
                    "5.3.3" | "5" => Version::V5_3_3,
                    "4.9" | "4.9.7" | "4" => Version::V4_9,
                    v => fail(&format!("unknown version {v} (5.3.3 or 4.9)")),
                }
            }
            "--topic" => topics.push(value()),
            "--proxy" => proxy = true,
            // No topic is created by sending to it (and no TBW102): a client's trace topic,
            // for one, then has no route.
            "--no-auto-create" => options.auto_create_topic = false,
            "--queues" => {
                queues = value()
                    .parse()
                    .ok()
                    .filter(|q| *q >= 1)
                    .unwrap_or_else(|| fail("--queues needs a number >= 1"))
            }
            "--broker-heap-mb" => {
                options.broker_heap_mb = value()
                    .parse()
                    .ok()
                    .filter(|m| *m >= 128)
                    .unwrap_or_else(|| fail("--broker-heap-mb needs a number >= 128"))
            }
            "-h" | "--help" => {
                println!(
                    "rmq-broker [--version 5.3.3|4.9] [--topic NAME]... [--queues N] [--broker-heap-mb N] [--proxy] [--no-auto-create]"
                );
                return;
            }
            other => fail(&format!("unknown argument {other}")),
        }
    }
    options.start_timeout = Duration::from_secs(180);

    let mut cluster = Cluster::start(version, options).unwrap_or_else(|e| fail(&e.to_string()));
    for t in &topics {
        cluster
            .create_topic(t, queues)
            .unwrap_or_else(|e| fail(&e.to_string()));
    }
    let proxy = proxy.then(|| {
        cluster
            .start_proxy()
            .unwrap_or_else(|e| fail(&e.to_string()))
    });
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "NAMESRV {}", cluster.namesrv_addr());
    if let Some(p) = proxy {
        let _ = writeln!(out, "PROXY {p}");
    }
    let _ = writeln!(out, "BROKER {}", cluster.broker_addr(0));
    let _ = writeln!(out, "RUN_DIR {}", cluster.run_dir().display());
    let _ = writeln!(out, "READY");
    let _ = out.flush();
    drop(out);

    // Block until stdin reaches end of input (or fails), then drop the cluster.
    let mut sink = [0u8; 256];
    let mut stdin = std::io::stdin().lock();
    while let Ok(n) = stdin.read(&mut sink) {
        if n == 0 {
            break;
        }
    }
    drop(cluster);
    eprintln!("rmq-broker: cluster stopped");
}

fn fail(msg: &str) -> ! {
    eprintln!("rmq-broker: {msg}");
    std::process::exit(2);
}
