//! The monitoring numbers against a real Apache RocketMQ 5.3.3: what `Producer::metrics` and
//! `Consumer::metrics` report matches what was sent and consumed, failures are counted by
//! kind, and the consumer's lag is exactly the unprocessed messages, falling to 0 once
//! everything is acknowledged.

use std::time::{Duration, Instant};

use rmq_core::consumer::ConsumeFromWhere;
use rmq_std::consumer::Consumer;
use rmq_std::{Message, Producer, SendErrorKind};
use rmq_tests::broker::{Cluster, ClusterOptions, Version};

const TOPIC: &str = "MetricsTopic";
const N: usize = 200;

#[test]
fn metrics_match_what_was_sent_and_consumed() {
    let cluster = Cluster::start(Version::V5_3_3, ClusterOptions::default()).expect("cluster");
    cluster.create_topic(TOPIC, 2).expect("topic");
    let ns = cluster.namesrv_addr().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("pg_metrics")
            .start()
            .await
            .expect("producer");
        for i in 0..N {
            p.send(Message::new(TOPIC, format!("m{i}")))
                .await
                .unwrap_or_else(|e| panic!("send {i}: {e}"));
        }
        let e = p.send(Message::new("bad topic!", "x")).await.unwrap_err();
        assert!(matches!(e.kind(), SendErrorKind::Validation(_)));
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let m = p.metrics();
        eprintln!("producer: {m:?}");
        assert_eq!(m.counters.sent, N as u64);
        assert_eq!(m.counters.failed, 1);
        assert_eq!(
            m.latency_us.count, N as u64,
            "one latency per stored message"
        );
        assert!(m.latency_us.p50 > 0 && m.latency_us.p50 <= m.latency_us.p99);
        assert!(m.latency_us.p99 <= m.latency_us.max);
        assert!(m.latency_us.max < 10_000_000, "{:?}", m.latency_us);
        assert!(m.sends_per_sec > 0, "{m:?}");
        assert_eq!(m.failures.validation, 1);
        let f = m.failures;
        assert_eq!(
            f.no_route + f.no_name_server + f.broker + f.transport + f.timeout + f.malformed,
            0
        );
        p.shutdown().await;

        let c = Consumer::builder()
            .namesrv_addr(&ns)
            .group("cg_metrics")
            .subscribe(TOPIC, "*")
            .consume_from(ConsumeFromWhere::FirstOffset)
            .start()
            .await
            .expect("consumer");
        let t0 = Instant::now();
        let mut got = Vec::new();
        while got.len() < N && t0.elapsed() < Duration::from_secs(60) {
            got.extend(c.poll(64, Duration::from_millis(500)).await);
        }
        assert_eq!(got.len(), N);
        // Nothing acknowledged yet: the lag is every message, N / 2 per queue.
        let m = c.metrics();
        eprintln!("consumer before acks: lag {} {:?}", m.lag, m.queues);
        // The topic's two queues (and the group's `%RETRY%` queue, empty).
        let topic = m.queues.iter().filter(|q| q.queue.topic == TOPIC);
        assert_eq!(topic.clone().count(), 2);
        for q in topic {
            assert_eq!(q.broker_max_offset, Some((N / 2) as i64), "{q:?}");
            assert_eq!((q.committable, q.in_flight), (0, N / 2), "{q:?}");
            assert_eq!(q.lag, Some((N / 2) as u64));
        }
        assert_eq!(m.lag, N as u64);
        assert_eq!(m.stats.delivered, N as u64);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(c.ack_all(&got), N);
        let m = c.metrics();
        eprintln!("consumer after acks: {m:?}");
        assert_eq!(m.lag, 0, "drained: {:?}", m.queues);
        assert!(
            m.queues
                .iter()
                .filter(|q| q.queue.topic == TOPIC)
                .all(|q| q.lag == Some(0) && q.in_flight == 0)
        );
        assert_eq!(m.stats.acked, N as u64);
        let h = m.handler_time_us;
        assert_eq!(h.count, N as u64, "one handler time per acknowledgement");
        assert!(
            h.p50 >= 20_000,
            "acked at least 20 ms after the poll: {h:?}"
        );
        assert!(m.delivered_per_sec <= N as u64);
        c.shutdown().await;
    });
}
