//! Message trace against a real Apache RocketMQ 5.3.3 (`traceTopicEnable=true`, which creates
//! `RMQ_SYS_TRACE_TOPIC`): an rmq producer and an rmq consumer with `message_trace(true)`, and
//! the official Java producer with `DefaultMQProducer(group, true)` as the reference.
//!
//! - The trace topic, read back by the Java client, holds rmq's `Pub` record with the fields
//!   Java's record of a like message has (14 fields: region, group, topic, msgId, tags, keys,
//!   the broker's address, body length, type, offsetMsgId, success), and the consumer's
//!   `SubBefore`/`SubAfter` pair (paired by request id); each trace message's keys carry its
//!   records' message ids and user keys.
//! - `mqadmin queryMsgTraceById` (which finds trace messages by those keys) shows the rmq
//!   message's send and consumption.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmq_std::consumer::{ConsumeFromWhere, ConsumeResult, Consumer};
use rmq_std::{Message, Producer};
use rmq_tests::broker::{Cluster, ClusterOptions, JavaProducer, Version, verifier_read};

const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";

/// Every record of the trace messages read, as its fields; and each message's keys.
fn records(cluster: &Cluster, messages: usize) -> (Vec<Vec<String>>, Vec<String>) {
    let read = verifier_read(cluster, TRACE_TOPIC, messages, Duration::from_secs(8))
        .expect("read the trace topic");
    let mut records = Vec::new();
    let mut keys = Vec::new();
    for m in read {
        let body = String::from_utf8(m.body).expect("a trace body is UTF-8");
        for r in body.split('\u{2}').filter(|r| !r.is_empty()) {
            records.push(r.split('\u{1}').map(str::to_owned).collect());
        }
        keys.push(m.keys.unwrap_or_default());
    }
    (records, keys)
}

fn find<'a>(records: &'a [Vec<String>], kind: &str, msg_id_at: usize, id: &str) -> &'a [String] {
    records
        .iter()
        .find(|r| r[0] == kind && r.get(msg_id_at).map(String::as_str) == Some(id))
        .unwrap_or_else(|| panic!("no {kind} record of {id} in {records:?}"))
}

#[test]
fn trace_5_3_3() {
    let options = ClusterOptions {
        broker_config: vec!["traceTopicEnable=true".into()],
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start(Version::V5_3_3, options).expect("cluster");
    let ns = cluster.namesrv_addr().to_string();
    let topic = "RmqTraced";
    cluster.create_topic(topic, 2).expect("create topic");

    // Java's Pub record of a message like rmq's, for comparison.
    let java = JavaProducer::new(topic, 1)
        .body("java")
        .tags("TagT")
        .keys("k-java")
        .group("java-traced")
        .trace()
        .run(&cluster)
        .expect("java producer");
    let java_id = java[0].msg_id.clone().expect("java msgId");

    let rt = rmq_tests::runtime();
    let sent = rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-traced")
            .message_trace(true)
            .start()
            .await
            .expect("producer");
        let m = Message::new(topic, "rmq")
            .with_tags("TagT")
            .with_keys(["k-rmq"]);
        let sent = p.send(m).await.expect("send");
        assert_eq!(p.metrics().trace_dropped, 0);

        let c = Consumer::builder()
            .namesrv_addr(&ns)
            .group("rmq-trace-consumer")
            .subscribe(topic, "*")
            .consume_from(ConsumeFromWhere::FirstOffset)
            .message_trace(true)
            .start()
            .await
            .expect("consumer");
        let seen = Arc::new(AtomicUsize::new(0));
        let (c2, s2) = (c.clone(), seen.clone());
        let run = tokio::spawn(async move {
            c2.run(move |_| {
                s2.fetch_add(1, Ordering::SeqCst);
                async { ConsumeResult::Success }
            })
            .await;
        });
        let t0 = Instant::now();
        while seen.load(Ordering::SeqCst) < 2 && t0.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(seen.load(Ordering::SeqCst), 2, "both messages consumed");
        // Each shutdown sends what its trace gathered.
        c.shutdown().await;
        run.abort();
        p.shutdown().await;
        sent
    });

    // Java's producer, rmq's and rmq's consumer each wrote at least one trace message.
    let (records, keys) = records(&cluster, 3);
    let ours = find(&records, "Pub", 5, &sent.msg_id);
    let theirs = find(&records, "Pub", 5, &java_id);
    assert_eq!(ours.len(), 14, "{ours:?}");
    assert_eq!(ours.len(), theirs.len(), "Java's Pub: {theirs:?}");
    let broker = cluster.broker_addr(0).to_string();
    let expected = [
        (2, "DefaultRegion"),
        (3, "rmq-traced"),
        (4, topic),
        (6, "TagT"),
        (7, "k-rmq"),
        (8, broker.as_str()),
        (9, "3"),
        (11, "0"),
        (12, sent.offset_msg_id.as_str()),
        (13, "true"),
    ];
    for (i, want) in expected {
        assert_eq!(ours[i], want, "field {i} of {ours:?}");
    }
    // Where Java's differs, it is its own message's.
    for (i, same) in [
        (2, true),
        (3, false),
        (4, true),
        (6, true),
        (8, true),
        (11, true),
        (13, true),
    ] {
        assert_eq!(
            ours[i] == theirs[i],
            same,
            "field {i}: ours {ours:?}, Java's {theirs:?}"
        );
    }
    assert!(ours[1].parse::<i64>().is_ok() && ours[10].parse::<u64>().is_ok());

    // The consumer's pair, for the rmq message and Java's.
    for id in [&sent.msg_id, &java_id] {
        let before = find(&records, "SubBefore", 5, id);
        assert_eq!(before.len(), 8, "{before:?}");
        assert_eq!(before[3], "rmq-trace-consumer");
        assert_eq!(before[6], "0", "first delivery");
        let after = find(&records, "SubAfter", 2, id);
        assert_eq!(after.len(), 9, "{after:?}");
        assert_eq!(after[1], before[4], "paired by request id");
        assert_eq!((after[4].as_str(), after[6].as_str()), ("true", "0"));
        assert_eq!(after[8], "rmq-trace-consumer");
    }
    let key_of = |k: &str| keys.iter().any(|ks| ks.split(' ').any(|x| x == k));
    assert!(
        key_of(&sent.msg_id) && key_of("k-rmq"),
        "trace keys: {keys:?}"
    );

    // mqadmin finds the rmq message's trace by its id.
    let out = cluster
        .mqadmin(&["queryMsgTraceById", "-n", &ns, "-i", &sent.msg_id])
        .expect("mqadmin");
    // Its rows: `#Type #Group #ClientHost #Time #CostTimes #Status` (SubAfter shows as Sub).
    let row = |kind: &str, group: &str| {
        out.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.first() == Some(&kind) && f.get(1) == Some(&group) && f.last() == Some(&"success")
        })
    };
    assert!(row("Pub", "rmq-traced"), "{out}");
    assert!(row("Sub", "rmq-trace-consumer"), "{out}");
}
