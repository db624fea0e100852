//! 5.x static topics against a real Apache RocketMQ 5.3.3 cluster of two brokers, the official
//! Java client as the oracle (issue 39 item 4).
//!
//! `mqadmin updateStaticTopic -c DefaultCluster -qn 4` spreads four logical queues over the two
//! brokers, each hosting two physical queues (0 and 1). The route then carries a
//! `topicQueueMappingByBroker`, and a client must send, pull and commit with the logical queue
//! id to the broker that leads it (Java `ClientMetadata.topicRouteData2EndpointsForStaticTopic`):
//!
//! - an rmq producer's sends land on all four logical queues (ids 2 and 3 exist only as
//!   logical ids), each logical queue always on the same broker, and both brokers lead some;
//! - the Java client (`DefaultMQPullConsumer`) reads every rmq-sent message back;
//! - a Java producer's messages and rmq's are all read by an rmq consumer, whose queues are
//!   the four logical ones, and whose committed offsets the brokers keep per logical queue;
//! - `mqadmin remappingStaticTopic` moves every logical queue to the second broker, whose
//!   physical queues start at offset 0: rmq sends there, and the group's consumer goes on from
//!   its committed logical offsets (the pull answers' `offsetDelta` applied), reading only the
//!   new messages.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rmq_std::consumer::{ConsumeFromWhere, Consumer};
use rmq_std::{Message, Producer};
use rmq_tests::broker::{Cluster, ClusterOptions, JavaProducer, Version, verifier_read};

const TOPIC: &str = "RmqStatic";
const RMQ_SENT: usize = 40;
const JAVA_SENT: usize = 10;
const AFTER_REMAP: usize = 20;

async fn producer(ns: &str) -> Producer {
    let p = Producer::builder()
        .namesrv_addr(ns)
        .producer_group("pg_static");
    p.start().await.expect("producer")
}

/// The group's consumer, from the first offset (then from its committed ones).
async fn consumer(ns: &str) -> Consumer {
    let c = Consumer::builder()
        .namesrv_addr(ns)
        .group("cg_static")
        .subscribe(TOPIC, "*")
        .consume_from(ConsumeFromWhere::FirstOffset);
    c.start().await.expect("consumer")
}

#[test]
fn static_topic_5_3_3() {
    let options = ClusterOptions {
        brokers: 2,
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start(Version::V5_3_3, options).expect("cluster");
    let ns = cluster.namesrv_addr().to_string();
    let out = cluster
        .mqadmin(&[
            "updateStaticTopic",
            "-n",
            &ns,
            "-t",
            TOPIC,
            "-c",
            "DefaultCluster",
            "-qn",
            "4",
        ])
        .expect("mqadmin updateStaticTopic");
    assert!(
        out.contains("The new mapping data is written") && !out.contains("command failed"),
        "mqadmin updateStaticTopic:\n{out}"
    );
    let rt = rmq_tests::runtime();

    // The brokers register the mapping with the NameServer at once; the producer's first
    // lookup may still miss it, so its sends retry within their timeout.
    let leaders = rt.block_on(async {
        let p = producer(&ns).await;
        let mut leaders: BTreeMap<i32, BTreeSet<String>> = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut sent = 0;
        while sent < RMQ_SENT {
            match p.send(Message::new(TOPIC, format!("rmq-{sent}"))).await {
                Ok(r) => {
                    assert_eq!(r.queue.topic, TOPIC);
                    leaders
                        .entry(r.queue.queue_id)
                        .or_default()
                        .insert(r.queue.broker_name.clone());
                    sent += 1;
                }
                Err(e) if sent == 0 && Instant::now() < deadline => {
                    eprintln!("first send to the static topic failed, again: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => panic!("send {sent} to the static topic: {e}"),
            }
        }
        p.shutdown().await;
        leaders
    });
    assert_eq!(
        leaders.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "the sends' queues are the four logical ones: {leaders:?}"
    );
    assert!(
        leaders.values().all(|b| b.len() == 1),
        "each logical queue on one broker: {leaders:?}"
    );
    let brokers: BTreeSet<&String> = leaders.values().flatten().collect();
    assert_eq!(brokers.len(), 2, "both brokers lead queues: {leaders:?}");

    // The Java client reads them all back.
    let read = verifier_read(&cluster, TOPIC, RMQ_SENT, Duration::from_secs(10)).expect("verifier");
    let bodies: BTreeSet<String> = read
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    let want: BTreeSet<String> = (0..RMQ_SENT).map(|i| format!("rmq-{i}")).collect();
    assert_eq!(bodies, want, "the Java client reads what rmq sent");

    // A Java producer writes to it too.
    let java = JavaProducer::new(TOPIC, JAVA_SENT as u64)
        .body("java-{i}")
        .group("jpg_static")
        .run(&cluster)
        .expect("java producer");
    assert_eq!(java.len(), JAVA_SENT);

    // An rmq consumer reads both producers' messages from the four logical queues.
    let committed = rt.block_on(async {
        let c = consumer(&ns).await;
        let mut queues: Vec<(String, i32)> = c
            .assigned_queues()
            .into_iter()
            .filter(|q| q.topic == TOPIC)
            .map(|q| (q.broker_name, q.queue_id))
            .collect();
        queues.sort_by_key(|q| q.1);
        let expect: Vec<(String, i32)> = leaders
            .iter()
            .map(|(q, b)| (b.first().unwrap().clone(), *q))
            .collect();
        assert_eq!(queues, expect, "the consumer's queues are the logical ones");

        let mut seen = BTreeSet::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen.len() < RMQ_SENT + JAVA_SENT && Instant::now() < deadline {
            for m in c.poll(32, Duration::from_secs(1)).await {
                assert_eq!(m.topic, TOPIC);
                c.ack(&m);
                seen.insert(String::from_utf8_lossy(&m.body).into_owned());
            }
        }
        let mut want = want.clone();
        want.extend((0..JAVA_SENT).map(|i| format!("java-{i}")));
        assert_eq!(
            seen, want,
            "the rmq consumer reads both producers' messages"
        );

        // Offsets are kept per logical queue: together they cover every message.
        c.commit_all().await;
        let mut committed = BTreeMap::new();
        for q in c.assigned_queues().iter().filter(|q| q.topic == TOPIC) {
            let o = c.committed_offset(q).unwrap_or(0);
            assert!(o > 0, "queue {q:?} committed {o}");
            committed.insert(q.queue_id, o);
        }
        let total: i64 = committed.values().sum();
        assert_eq!(total as usize, RMQ_SENT + JAVA_SENT, "committed offsets");
        c.shutdown().await;
        committed
    });

    // Every logical queue moves to one broker: the new leader's physical queues start at 0, and
    // its pull answers carry the delta to the logical offsets, which the consumer commits.
    let to = cluster.broker_name(1);
    let out = cluster
        .mqadmin(&["remappingStaticTopic", "-n", &ns, "-t", TOPIC, "-b", &to])
        .expect("mqadmin remappingStaticTopic");
    assert!(
        !out.contains("command failed"),
        "mqadmin remappingStaticTopic:\n{out}"
    );
    rt.block_on(async {
        let p = producer(&ns).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut sent = 0;
        while sent < AFTER_REMAP {
            // The route may name the old leader for a while (the brokers register the new
            // mapping at once; the NameServer answers what it has): it may refuse, or store.
            match p.send(Message::new(TOPIC, format!("after-{sent}"))).await {
                Ok(r) => {
                    if r.queue.broker_name != to {
                        assert!(Instant::now() < deadline, "still sent to {:?}", r.queue);
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    sent += 1;
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("send {sent} after the remap failed, again: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => panic!("send {sent} after the remap: {e}"),
            }
        }
        p.shutdown().await;

        let c = consumer(&ns).await;
        let mut seen = BTreeSet::new();
        let mut per_queue: BTreeMap<i32, i64> = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen.len() < AFTER_REMAP && Instant::now() < deadline {
            for m in c.poll(32, Duration::from_secs(1)).await {
                let body = String::from_utf8_lossy(&m.body).into_owned();
                assert!(
                    body.starts_with("after-"),
                    "{body} came again after the remap ({:?} offset {})",
                    m.queue,
                    m.queue_offset
                );
                // Logical offsets go on from the committed ones (the broker leaves a gap at
                // a remap); the new leader's physical ones start at 0.
                let before = committed[&m.queue.queue_id];
                assert!(
                    m.queue_offset >= before,
                    "{body} at {} of {:?}, committed {before} before the remap",
                    m.queue_offset,
                    m.queue
                );
                *per_queue.entry(m.queue.queue_id).or_default() += 1;
                c.ack(&m);
                seen.insert(body);
            }
        }
        let want: BTreeSet<String> = (0..AFTER_REMAP).map(|i| format!("after-{i}")).collect();
        assert_eq!(
            seen, want,
            "the rmq consumer reads what was sent after the remap"
        );
        c.commit_all().await;
        for q in c.assigned_queues().iter().filter(|q| q.topic == TOPIC) {
            assert_eq!(q.broker_name, to, "{q:?} moved");
            let now = c.committed_offset(q).unwrap_or(0);
            let read = per_queue.get(&q.queue_id).copied().unwrap_or(0);
            assert!(
                now >= committed[&q.queue_id] + read,
                "{q:?} committed {now}: {read} read since {}",
                committed[&q.queue_id]
            );
            assert_eq!(Some(now), c.committable_offset(q), "{q:?} all committed");
        }
        c.shutdown().await;
    });
}
