//! SQL92 subscriptions against a real Apache RocketMQ (5.3.3 and the 4.9 line) started with
//! `enablePropertyFilter=true`: the broker evaluates the expression on the messages'
//! properties (set by rmq's producer and by the Java client's), so the consumer receives
//! exactly the matching messages, the same set as a Java SQL92 consumer in another group
//! (`tests/java/SqlConsumer.java`, `MessageSelector.bySql`); a client that sent the
//! expression as a TAG one would receive none, a broker that ignored it all. The start asks
//! the broker to check the expression first (CHECK_CLIENT_CONFIG, as Java does): an expression
//! that does not parse fails the start with the broker's SUBSCRIPTION_PARSE_FAILED, and so does
//! a broker without property filtering (SYSTEM_ERROR), instead of a consumer that silently
//! receives nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use rmq_std::consumer::{ConsumeFromWhere, Consumer, ConsumerConfigError};
use rmq_std::{Message, Producer};
use rmq_tests::broker::{Cluster, ClusterOptions, JavaProducer, Version};
use rmq_tests::runtime;

const N: usize = 40;
const SQL: &str = "color = 'red' AND n >= 10";

fn consumer(ns: &str, group: &str, topic: &str, sql: &str) -> rmq_std::consumer::ConsumerBuilder {
    Consumer::builder()
        .namesrv_addr(ns)
        .group(group)
        .subscribe_sql(topic, sql)
        .consume_from(ConsumeFromWhere::FirstOffset)
}

fn run(version: Version) {
    let options = ClusterOptions {
        broker_config: vec!["enablePropertyFilter=true".into()],
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start(version, options).expect("cluster");
    let ns = cluster.namesrv_addr().to_string();
    let topic = "RmqSql";
    cluster.create_topic(topic, 4).expect("create topic");
    let rt = runtime();
    rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-sql-producer")
            .start()
            .await
            .expect("producer");
        let mut want = BTreeSet::new();
        for i in 0..N {
            let color = if i % 2 == 0 { "red" } else { "blue" };
            let m = Message::new(topic, format!("m-{i}"))
                .with_property("color", color)
                .with_property("n", i.to_string());
            p.send(m).await.expect("send");
            if color == "red" && i >= 10 {
                want.insert(format!("m-{i}"));
            }
        }
        p.shutdown().await;
        // The Java client's: red 0..19 and blue 0..19.
        for color in ["red", "blue"] {
            JavaProducer::new(topic, 20)
                .body(&format!("java-{color}-{{i}}"))
                .prop("color", color)
                .prop("n", "{i}")
                .run(&cluster)
                .expect("java producer");
        }
        want.extend((10..20).map(|i| format!("java-red-{i}")));

        let c = consumer(&ns, "rmq-sql", topic, SQL)
            .start()
            .await
            .expect("consumer");
        // Everything that matches, then 3 s more for anything that should not come.
        let got = rmq_tests::read_all(&c, want.len()).await;
        assert_eq!(got, want, "what the broker's SQL92 filter let through");
        c.shutdown().await;

        // The Java client's SQL92 consumer, in another group, reads the same set.
        let args = [&ns, topic, "java-sql", SQL, "5000", "90000"].map(String::from);
        let out = cluster
            .run_java_tool("SqlConsumer", &args, Duration::from_secs(150))
            .expect("SqlConsumer");
        let java: BTreeSet<String> = out
            .lines()
            .filter_map(|l| l.strip_prefix("RMQS "))
            .map(str::to_owned)
            .collect();
        assert_eq!(java, got, "rmq's and Java's SQL92 consumers: {out}");

        // An expression that does not parse: refused at the start, with the parser's message.
        let e = consumer(&ns, "rmq-sql-bad", topic, "color = = 'red'")
            .start()
            .await
            .map(|_| ())
            .unwrap_err();
        match &e {
            ConsumerConfigError::Filter {
                topic: t,
                code,
                remark,
            } => {
                assert_eq!((t.as_str(), *code), (topic, 23), "{e}");
                assert!(!remark.is_empty(), "the parser's message: {e}");
            }
            other => panic!("expected a filter refusal, got {other:?}"),
        }
        eprintln!("{e}");
        // An empty one never reaches the broker.
        let e = consumer(&ns, "rmq-sql-empty", topic, " ")
            .start()
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(e, ConsumerConfigError::Subscription(_)), "{e:?}");
    });
}

#[test]
fn sql92_5_3_3() {
    run(Version::V5_3_3);
}

#[test]
fn sql92_4_9() {
    run(Version::V4_9);
}

/// A broker without `enablePropertyFilter` cannot evaluate SQL92: the start says so.
#[test]
fn sql92_refused_without_property_filter() {
    let cluster = Cluster::start(Version::V5_3_3, ClusterOptions::default()).expect("cluster");
    let ns = cluster.namesrv_addr().to_string();
    cluster.create_topic("RmqSqlOff", 1).expect("create topic");
    let e = runtime()
        .block_on(consumer(&ns, "rmq-sql-off", "RmqSqlOff", SQL).start())
        .map(|_| ())
        .unwrap_err();
    match &e {
        ConsumerConfigError::Filter { code, remark, .. } => {
            assert_eq!(*code, 1, "{e}");
            assert!(remark.contains("SQL92"), "{e}");
        }
        other => panic!("expected a filter refusal, got {other:?}"),
    }
}
