//! Namespace v1 (`namespace("ns")`, Java's `ClientConfig.setNamespace`) against a real 5.3.3
//! broker, the official Java client as the oracle:
//!
//! - an rmq producer in namespace `rmqns` sends to `NsTopic`: the Java client reads the
//!   messages from the wire topic `rmqns%NsTopic`; the results name `NsTopic`;
//! - a Java producer in the same namespace sends to `NsTopic` (so to `rmqns%NsTopic`);
//! - an rmq transactional producer in the namespace: a committed message, and one left
//!   unknown whose check-back (the broker asks the group `rmqns%tpg_ns` its half message
//!   named) reaches the checker with the application's topic and is committed there;
//! - an rmq consumer in the namespace (group `cg_ns`, so `rmqns%cg_ns`) subscribed to
//!   `NsTopic` receives both producers' messages named `NsTopic`; a message it sends back
//!   comes again through `%RETRY%rmqns%cg_ns`, still named `NsTopic`; its queues are named
//!   `NsTopic` and `%RETRY%cg_ns`, and queue-level calls take those names.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmq_std::consumer::{ConsumeFromWhere, ConsumedMessage, Consumer};
use rmq_std::transaction::LocalState;
use rmq_std::{Message, MessageQueue, Producer};
use rmq_tests::broker::{Cluster, ClusterOptions, JavaProducer, Version, verifier_read};

const NS: &str = "rmqns";
const TOPIC: &str = "NsTopic";
const WIRE: &str = "rmqns%NsTopic";
/// The group's retry topic as the application sees it (`%RETRY%rmqns%cg_ns` on the wire).
const RETRY: &str = "%RETRY%cg_ns";

#[test]
fn namespace_v1_5_3_3() {
    let options = ClusterOptions::default().quick_transactions();
    let cluster = Cluster::start(Version::V5_3_3, options).expect("cluster");
    let addr = cluster.namesrv_addr().to_string();
    cluster.create_topic(WIRE, 2).expect("create topic");
    let rt = rmq_tests::runtime();

    rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&addr)
            .producer_group("pg_ns")
            .namespace(NS)
            .start()
            .await
            .expect("producer");
        for i in 0..5 {
            let r = p
                .send(Message::new(TOPIC, format!("rmq-{i}")))
                .await
                .expect("send");
            assert_eq!(
                r.queue.topic, TOPIC,
                "the result names the application's topic"
            );
        }
        let batch = (0..3)
            .map(|i| Message::new(TOPIC, format!("rmq-batch-{i}")))
            .collect();
        let r = p.send_batch(batch).await.expect("batch");
        assert_eq!(r.queue.topic, TOPIC);
        let route = p.route(TOPIC).await.expect("route");
        assert!(route.queues.iter().all(|q| q.topic == TOPIC));
        p.shutdown().await;
    });

    // The Java client reads them from the wire topic.
    let read = verifier_read(&cluster, WIRE, 8, Duration::from_secs(5)).expect("java read");
    assert_eq!(read.len(), 8, "{read:?}");
    assert!(read.iter().all(|m| m.topic == WIRE));
    let bodies: BTreeSet<String> = read
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert!(
        bodies.contains("rmq-0") && bodies.contains("rmq-batch-2"),
        "{bodies:?}"
    );

    // A Java producer in the namespace.
    let java = JavaProducer::new(TOPIC, 5)
        .namespace(NS)
        .body("java-{i}")
        .group("jpg_ns")
        .run(&cluster)
        .expect("java producer");
    assert_eq!(java.len(), 5);

    rt.block_on(async {
        let asked: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = asked.clone();
        let checker = move |m: &ConsumedMessage| {
            seen.lock().unwrap().push(m.topic.clone());
            LocalState::Commit
        };
        let tp = Producer::builder()
            .namesrv_addr(&addr)
            .producer_group("tpg_ns")
            .namespace(NS)
            .start_transactional(checker)
            .await
            .expect("transactional producer");
        for (body, state) in [
            ("tx-commit", LocalState::Commit),
            ("tx-check", LocalState::Unknown),
        ] {
            let r = tp
                .send(Message::new(TOPIC, body), |_| async move { state })
                .await
                .expect("transactional send");
            assert!(r.ended, "{body}: {r:?}");
            assert_eq!(r.send.queue.topic, TOPIC);
        }
        let deadline = Instant::now() + Duration::from_secs(40);
        while asked.lock().unwrap().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let asked = asked.lock().unwrap().clone();
        assert!(
            !asked.is_empty(),
            "no check-back reached the namespaced producer"
        );
        assert!(asked.iter().all(|t| t == TOPIC), "{asked:?}");
        tp.shutdown().await;
    });

    rt.block_on(async {
        let c = Consumer::builder()
            .namesrv_addr(&addr)
            .group("cg_ns")
            .namespace(NS)
            .subscribe(TOPIC, "*")
            .consume_from(ConsumeFromWhere::FirstOffset)
            .start()
            .await
            .expect("consumer");
        let mut seen = BTreeSet::new();
        let mut retried = None;
        let deadline = Instant::now() + Duration::from_secs(60);
        while (seen.len() < 15 || retried.is_none()) && Instant::now() < deadline {
            for m in c.poll(32, Duration::from_secs(1)).await {
                assert_eq!(
                    m.topic, TOPIC,
                    "a consumed message names the application's topic"
                );
                // A retried message comes from the group's retry queue, named without the
                // namespace too (Java's withoutNamespace).
                assert!(
                    m.queue.topic == TOPIC || m.queue.topic == RETRY,
                    "{:?}",
                    m.queue
                );
                let body = String::from_utf8_lossy(&m.body).into_owned();
                if body == "java-0" && m.reconsume_times == 0 && retried.is_none() {
                    // Sent back once: it must come again through %RETRY%rmqns%cg_ns.
                    c.nack(&m, 1).await.expect("nack");
                    retried = Some(false);
                    continue;
                }
                if body == "java-0" && m.reconsume_times == 1 {
                    retried = Some(true);
                }
                c.ack(&m);
                seen.insert(body);
            }
        }
        assert_eq!(seen.len(), 15, "{seen:?}");
        assert!(
            seen.contains("tx-commit") && seen.contains("tx-check"),
            "{seen:?}"
        );
        assert_eq!(
            retried,
            Some(true),
            "the sent-back message did not come again"
        );
        let queues = c.assigned_queues();
        assert!(
            queues.iter().all(|q| q.topic == TOPIC || q.topic == RETRY),
            "{queues:?}"
        );
        // A queue named as the application names it is the consumer's queue.
        let q = queues
            .iter()
            .find(|q| q.topic == TOPIC)
            .expect("a queue of the topic");
        let q = MessageQueue {
            topic: TOPIC.into(),
            ..q.clone()
        };
        assert!(c.committable_offset(&q).is_some());
        assert!(c.pause(&q) && c.resume(&q));
        c.shutdown().await;
    });

    // The group's retry topic is the namespaced one.
    let admin = rmq_admin::Admin::builder().namesrv_addr(&addr).build();
    let topics = rt.block_on(admin.topics()).expect("topics");
    assert!(
        topics.iter().any(|t| t == "%RETRY%rmqns%cg_ns"),
        "no %RETRY%rmqns%cg_ns among {topics:?}"
    );
}
