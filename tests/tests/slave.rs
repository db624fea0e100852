//! A consumer of a master/slave pair on the real brokers (5.3.3 and the 4.9 line): one
//! `brokerName` with a master (`brokerId=0`) and a slave (`brokerId=1`) that replicates through
//! the master's HA port, `slaveReadEnable=true` on both (5.3.3 refuses every pull on a slave
//! without it).
//!
//! The master is killed (SIGKILL) in the middle of the stream: consumption continues from the
//! slave with nothing lost (the NameServer drops the master from the route; the consumer's
//! failed pulls refresh the route at once and read the slave). The master is restarted: the
//! consumer goes back to it — new messages, which only the master takes, are consumed, and the
//! master's own offset table (`mqadmin consumerProgress`) shows every queue committed to its
//! end.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rmq_core::consumer::ConsumeFromWhere;
use rmq_std::consumer::Consumer;
use rmq_tests::broker::{Cluster, ClusterOptions, Version};

const TOPIC: &str = "MsTopic";
const GROUP: &str = "cg_ms";

async fn produce(ns: &str, version: i32, from: usize, to: usize) {
    let p = rmq_std::Producer::builder()
        .namesrv_addr(ns)
        .producer_group("pg_ms")
        .version(version)
        .start()
        .await
        .expect("producer");
    for i in from..to {
        p.send(rmq_std::Message::new(TOPIC, format!("ms-{i}")))
            .await
            .unwrap_or_else(|e| panic!("send {i}: {e}"));
    }
    p.shutdown().await;
}

/// Polls (and acknowledges) until every body `ms-0 .. ms-{want}` was seen, or `limit` passed;
/// `slow` paces the consumer (one poll of at most 16 every 50 ms).
async fn consume_until(
    c: &Consumer,
    seen: &mut BTreeSet<String>,
    want: usize,
    stop_at: Option<usize>,
    slow: bool,
    limit: Duration,
) {
    let t0 = Instant::now();
    while seen.len() < stop_at.unwrap_or(want) {
        assert!(
            t0.elapsed() < limit,
            "stalled: {} of {want} consumed",
            seen.len()
        );
        let batch = c
            .poll(if slow { 16 } else { 256 }, Duration::from_millis(500))
            .await;
        c.ack_all(&batch);
        for m in &batch {
            seen.insert(String::from_utf8_lossy(&m.body).into_owned());
        }
        if slow {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// `mqadmin consumerProgress` rows of `TOPIC`: (broker offset, consumer offset) per queue.
fn progress(cluster: &Cluster) -> Vec<(i64, i64)> {
    let ns = cluster.namesrv_addr().to_string();
    let out = cluster
        .mqadmin(&["consumerProgress", "-n", &ns, "-g", GROUP])
        .unwrap_or_default();
    out.lines()
        .filter(|l| l.starts_with(TOPIC))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.get(3)?.parse().ok()?, f.get(4)?.parse().ok()?))
        })
        .collect()
}

fn run(version: Version) {
    const N: usize = 2000;
    const MORE: usize = 200;
    let t0 = Instant::now();
    let mut cluster = Cluster::start(
        version,
        ClusterOptions {
            slaves: true,
            broker_config: vec!["slaveReadEnable=true".into()],
            ..ClusterOptions::default()
        },
    )
    .expect("cluster start");
    eprintln!("[{}] master/slave up in {:?}", version.name(), t0.elapsed());
    cluster.create_topic(TOPIC, 4).expect("create topic");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let ns = cluster.namesrv_addr().to_string();
    let v = version.client_version();
    rt.block_on(produce(&ns, v, 0, N));
    // Replication is asynchronous: give the slave a moment (a lost tail shows as a failure).
    std::thread::sleep(Duration::from_secs(3));
    let c = rt
        .block_on(
            Consumer::builder()
                .namesrv_addr(&ns)
                .group(GROUP)
                .subscribe(TOPIC, "*")
                .consume_from(ConsumeFromWhere::FirstOffset)
                .version(v)
                .start(),
        )
        .expect("consumer start");
    let mut seen = BTreeSet::new();
    let limit = Duration::from_secs(120);
    rt.block_on(consume_until(&c, &mut seen, N, Some(N / 3), true, limit));
    cluster.kill9_broker(0);
    let killed = Instant::now();
    eprintln!(
        "[{}] master killed after {} of {N} consumed",
        version.name(),
        seen.len()
    );
    rt.block_on(consume_until(&c, &mut seen, N, None, true, limit));
    eprintln!(
        "[{}] all {N} consumed, {:?} after the master was killed (from the slave)",
        version.name(),
        killed.elapsed()
    );
    assert!(cluster.broker_pid(0).is_none(), "the master is still down");
    cluster.restart_broker(0).expect("master restart");
    eprintln!("[{}] master back", version.name());
    rt.block_on(produce(&ns, v, N, N + MORE));
    rt.block_on(consume_until(&c, &mut seen, N + MORE, None, false, limit));
    let want: BTreeSet<String> = (0..N + MORE).map(|i| format!("ms-{i}")).collect();
    assert_eq!(seen, want);
    // The consumer commits to the master again: its offset table reaches every queue's end.
    let t1 = Instant::now();
    let mut rows = Vec::new();
    while t1.elapsed() < Duration::from_secs(60) {
        rows = progress(&cluster);
        if rows.len() == 4 && rows.iter().all(|(b, c)| b == c) {
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    eprintln!("[{}] master's consumerProgress: {rows:?}", version.name());
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert!(rows.iter().all(|(b, c)| b == c), "{rows:?}");
    let total: i64 = rows.iter().map(|r| r.0).sum();
    assert_eq!(total, i64::try_from(N + MORE).unwrap_or(0));
    rt.block_on(c.shutdown());
}

#[test]
fn master_slave_on_5_3_3() {
    run(Version::V5_3_3);
}

#[test]
fn master_slave_on_4_9() {
    run(Version::V4_9);
}
