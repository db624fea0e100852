//! End-to-end checks of the real-broker harness itself: start a genuine RocketMQ cluster, write
//! with the official Java producer, read back with the Java verifier, SIGKILL and restart the
//! broker, and make sure no JVM survives the cluster.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rmq_tests::broker::{Cluster, ClusterOptions, JavaProducer, Version, pid_alive, verifier_read};

fn round_trip(version: Version) {
    let t0 = Instant::now();
    let mut cluster = Cluster::start(version, ClusterOptions::default()).expect("cluster start");
    eprintln!(
        "[{}] cluster ready in {:?} ({})",
        version.name(),
        t0.elapsed(),
        cluster.run_dir().display()
    );
    let broker = cluster.broker_addr(0).to_string();

    let topic = "HarnessTopic";
    cluster.create_topic(topic, 4).expect("create topic");

    let sent = JavaProducer::new(topic, 3)
        .body("hello-{i}")
        .tags("TagA")
        .keys("key-{i}")
        .prop("p1", "v{i}")
        .run(&cluster)
        .expect("java producer");
    assert_eq!(sent.len(), 3, "{sent:?}");
    for (i, s) in sent.iter().enumerate() {
        assert_eq!(s.index, i as u64);
        assert_eq!(s.status, "SEND_OK", "{s:?}");
        assert_eq!(s.broker_name.as_deref(), Some("broker-a"));
    }

    let check = |label: &str, cluster: &Cluster| {
        let got = verifier_read(cluster, topic, 3, Duration::from_secs(5)).expect("verifier");
        assert_eq!(got.len(), 3, "{label}: {got:?}");
        let mut by_body: BTreeMap<Vec<u8>, _> = BTreeMap::new();
        for m in &got {
            by_body.insert(m.body.clone(), m);
        }
        for (i, s) in sent.iter().enumerate() {
            let m = by_body
                .get(format!("hello-{i}").as_bytes())
                .unwrap_or_else(|| panic!("{label}: message {i} missing in {got:?}"));
            assert_eq!(m.topic, topic);
            assert_eq!(m.tags.as_deref(), Some("TagA"));
            assert_eq!(m.keys.as_deref(), Some(format!("key-{i}").as_str()));
            assert_eq!(
                m.properties.get("p1").map(String::as_str),
                Some(format!("v{i}").as_str())
            );
            assert_eq!(m.properties.get("TAGS").map(String::as_str), Some("TagA"));
            assert_eq!(Some(m.queue_id), s.queue_id, "{label}: {m:?} vs {s:?}");
            assert_eq!(Some(m.queue_offset), s.queue_offset, "{label}");
            assert_eq!(Some(&m.msg_id), s.msg_id.as_ref(), "{label}");
            assert_eq!(m.properties.get("UNIQ_KEY"), s.msg_id.as_ref(), "{label}");
            assert_eq!(Some(&m.offset_msg_id), s.offset_msg_id.as_ref(), "{label}");
            assert_eq!(m.store_host, broker, "{label}");
            assert_eq!(m.reconsume_times, 0);
            assert_eq!(m.sys_flag & 0x1, 0, "{label}: body not compressed");
            assert!(m.born_timestamp > 1_600_000_000_000, "{m:?}");
            assert!(m.store_timestamp >= m.born_timestamp - 60_000, "{m:?}");
        }
    };
    check("before restart", &cluster);

    // kill -9 and restart on the same ports and store.
    let old_pid = cluster.broker_pid(0).expect("broker pid");
    cluster.kill9_broker(0);
    assert!(
        !pid_alive(old_pid),
        "broker {old_pid} still alive after kill -9"
    );
    assert!(TcpStream::connect_timeout(&cluster.broker_addr(0), Duration::from_secs(1)).is_err());
    let t1 = Instant::now();
    cluster.restart_broker(0).expect("restart broker");
    eprintln!(
        "[{}] broker restarted in {:?}",
        version.name(),
        t1.elapsed()
    );
    let new_pid = cluster.broker_pid(0).expect("new broker pid");
    assert_ne!(new_pid, old_pid);
    TcpStream::connect_timeout(&cluster.broker_addr(0), Duration::from_secs(2))
        .expect("connect after restart");
    // The messages survived the crash (the commit log is recovered from the same store).
    check("after restart", &cluster);

    let pids = cluster.pids();
    assert_eq!(pids.len(), 2, "namesrv + broker");
    assert!(pids.iter().all(|p| pid_alive(*p)));
    drop(cluster);
    for p in pids {
        assert!(!pid_alive(p), "JVM {p} outlived its cluster");
    }
}

#[test]
fn harness_round_trip_5_3_3() {
    round_trip(Version::V5_3_3);
}

#[test]
fn harness_round_trip_4_9_7() {
    round_trip(Version::V4_9);
}

#[test]
fn start_failure_reports_bad_options() {
    let err = Cluster::start(
        Version::V5_3_3,
        ClusterOptions {
            brokers: 0,
            ..ClusterOptions::default()
        },
    )
    .expect_err("0 brokers must be refused");
    assert!(err.to_string().contains("brokers must be"), "{err}");
}
