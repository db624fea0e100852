//! ACL 1.0 through the rmq-std `Producer` (`ProducerBuilder::acl`) against the REAL broker with
//! authentication on: 5.3.3 (`authenticationEnabled=true` with an initial user) and the 4.9
//! line (`aclEnable=true` + `conf/plain_acl.yml`).
//!
//! - right keys: every request is signed (sends, heartbeats), messages are stored (SEND_OK);
//! - wrong secret: the send fails with the typed `SendErrorKind::Authentication`, after no
//!   more attempts than the retry budget (the producer's attempt counter proves how many
//!   requests went to the broker), and quickly (no retry storm, no waiting for the timeout);
//! - no credentials at all: the same typed error;
//! - a `Consumer` with the right keys (`ConsumerBuilder::acl`) reads back exactly the messages
//!   the signed producer stored (bodies and message ids); a consumer with a wrong secret gets
//!   no message and still shuts down.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rmq_core::consumer::ConsumeFromWhere;
use rmq_std::consumer::{ConsumedMessage, Consumer};
use rmq_std::{Message, Producer, SendErrorKind, SendStatus};
use rmq_tests::broker::{Cluster, ClusterOptions, Version};

const ACCESS_KEY: &str = "rmqStdAccess";
const SECRET_KEY: &str = "rmqStdSecret123";
const TOPIC: &str = "StdAclTopic";
const CONSUME_TOPIC: &str = "StdAclConsumeTopic";
const RETRIES: u8 = 2;

fn options(v: Version) -> ClusterOptions {
    ClusterOptions::default().with_acl(v, ACCESS_KEY, SECRET_KEY)
}

async fn producer(ns: &str, group: &str, creds: Option<(&str, &str)>) -> Producer {
    let mut b = Producer::builder()
        .namesrv_addr(ns)
        .producer_group(group)
        .retry_times_when_send_failed(RETRIES)
        .send_msg_timeout(Duration::from_secs(5));
    if let Some((ak, sk)) = creds {
        b = b.acl(ak, sk, None);
    }
    b.start().await.expect("producer")
}

async fn consumer(ns: &str, v: Version, group: &str, secret_key: &str) -> Consumer {
    let client_version = v.client_version();
    Consumer::builder()
        .namesrv_addr(ns)
        .group(group)
        .subscribe(CONSUME_TOPIC, "*")
        .consume_from(ConsumeFromWhere::FirstOffset)
        .version(client_version)
        .rebalance_interval(Duration::from_secs(2))
        .acl(ACCESS_KEY, secret_key, None)
        .start()
        .await
        .expect("consumer")
}

/// Polls until `want` messages arrived or `limit` passed.
async fn collect(c: &Consumer, want: usize, limit: Duration) -> Vec<ConsumedMessage> {
    let t0 = Instant::now();
    let mut got = Vec::new();
    while got.len() < want && t0.elapsed() < limit {
        let batch = c.poll(64, Duration::from_millis(500)).await;
        c.ack_all(&batch);
        got.extend(batch);
    }
    got
}

/// The signed producer stores messages in a topic of their own; a consumer with the right keys
/// reads back exactly those, one with a wrong secret reads nothing.
async fn consume_signed(good: &Producer, ns: &str, v: Version) {
    // msg id -> body of every stored message; the first send may meet the topic being
    // auto-created, and a failed try may have been stored anyway: its body is allowed extra.
    let mut sent = BTreeMap::new();
    let mut maybe = Vec::new();
    for k in 0..30 {
        let body = format!("consume first {k}");
        match good.send(Message::new(CONSUME_TOPIC, body.clone())).await {
            Ok(r) => {
                sent.insert(r.msg_id, body);
                break;
            }
            Err(e) => {
                eprintln!("{v:?}: first send to {CONSUME_TOPIC}: {e}; retrying");
                maybe.push(body);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    assert_eq!(sent.len(), 1, "{v:?}: no send to {CONSUME_TOPIC} succeeded");
    for i in 0..15 {
        let body = format!("consume me {i}");
        let r = good
            .send(Message::new(CONSUME_TOPIC, body.clone()).with_tags("acl"))
            .await
            .unwrap_or_else(|e| panic!("{v:?}: signed send {i} to {CONSUME_TOPIC}: {e}"));
        assert_eq!(r.status, SendStatus::SendOk);
        sent.insert(r.msg_id, body);
    }

    let c = consumer(ns, v, "cg_std_acl", SECRET_KEY).await;
    let got = collect(&c, sent.len(), Duration::from_secs(60)).await;
    let extra = c.poll(64, Duration::from_secs(2)).await;
    assert!(
        extra.is_empty(),
        "{v:?}: unexpected extra messages {extra:?}"
    );
    let mut by_id: BTreeMap<String, String> = got
        .iter()
        .map(|m| {
            let body = String::from_utf8(m.body.to_vec()).expect("utf-8 body");
            assert_eq!(m.queue.topic, CONSUME_TOPIC);
            (m.msg_id.clone(), body)
        })
        .collect();
    assert_eq!(by_id.len(), got.len(), "{v:?}: a message arrived twice");
    by_id.retain(|id, body| sent.contains_key(id) || !maybe.contains(body));
    assert_eq!(
        by_id, sent,
        "{v:?}: the signed consumer reads back what was sent"
    );
    let stats = c.stats();
    eprintln!(
        "{v:?} signed consumer: {} messages read back, {stats:?}",
        got.len()
    );
    assert_eq!(stats.delivered, got.len() as u64);
    assert_eq!(stats.connections_lost, 0, "{stats:?}");
    c.shutdown().await;

    // A wrong secret: the broker refuses the consumer's requests; it gets nothing, and its
    // shutdown (commit, unregister, both refused) returns.
    let bad = consumer(ns, v, "cg_std_acl_bad", "not-the-secret").await;
    let mut none = Vec::new();
    for _ in 0..3 {
        none.extend(bad.poll(64, Duration::from_secs(2)).await);
    }
    eprintln!(
        "{v:?} wrong secret: assigned {:?}, stats {:?}",
        bad.assigned_queues(),
        bad.stats()
    );
    assert!(
        none.is_empty(),
        "{v:?}: a refused consumer received {none:?}"
    );
    assert_eq!(bad.stats().delivered, 0);
    assert!(
        bad.assigned_queues().is_empty(),
        "{v:?}: refused, yet queues assigned"
    );
    tokio::time::timeout(Duration::from_secs(60), bad.shutdown())
        .await
        .unwrap_or_else(|_| panic!("{v:?}: the refused consumer's shutdown hangs"));
}

/// A refused send: typed, bounded, fast.
async fn expect_refused(p: &Producer, what: &str, v: Version) {
    let before = p.counters();
    let t0 = Instant::now();
    let e = p
        .send(Message::new(TOPIC, format!("refused {what}")))
        .await
        .expect_err("the broker must refuse");
    let took = t0.elapsed();
    let after = p.counters();
    let requests = after.attempts - before.attempts;
    eprintln!("{v:?} {what}: {e} (attempts {requests}, {took:?})");
    assert!(
        matches!(e.kind(), SendErrorKind::Authentication { .. }),
        "{v:?} {what}: expected an authentication error, got {e:?}"
    );
    assert!(!e.is_retryable(), "an authentication failure is final");
    assert!(
        requests <= u64::from(RETRIES) + 1,
        "{v:?} {what}: {requests} send requests exceed the retry budget"
    );
    assert_eq!(
        u64::from(e.attempts()),
        requests,
        "the error counts the attempts"
    );
    assert!(
        took < Duration::from_secs(3),
        "{v:?} {what}: refused quickly, not at the send timeout ({took:?})"
    );
    assert!(e.to_string().contains("authentication failed"), "{e}");
}

fn run(v: Version) {
    let cluster = Cluster::start(v, options(v)).expect("start cluster with ACL");
    let ns = cluster.namesrv_addr().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let good = producer(&ns, "pg_std_acl", Some((ACCESS_KEY, SECRET_KEY))).await;
        // The first sends may meet the topic being auto-created from TBW102: retry a while.
        let mut first = None;
        for _ in 0..30 {
            match good.send(Message::new(TOPIC, "signed hello")).await {
                Ok(r) => {
                    first = Some(r);
                    break;
                }
                Err(e) => {
                    assert!(
                        !matches!(e.kind(), SendErrorKind::Authentication { .. }),
                        "{v:?}: right keys refused: {e}"
                    );
                    eprintln!("{v:?}: first signed send: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
        let r = first
            .unwrap_or_else(|| panic!("{v:?}: no signed send succeeded\n{}", cluster.log_tail(40)));
        assert_eq!(r.status, SendStatus::SendOk);
        assert!(!r.offset_msg_id.is_empty());
        for i in 0..20 {
            let r = good
                .send(Message::new(TOPIC, format!("signed {i}")).with_tags("acl"))
                .await
                .unwrap_or_else(|e| panic!("{v:?}: signed send {i}: {e}"));
            assert_eq!(r.status, SendStatus::SendOk);
        }
        // A compressed body is signed over the bytes actually sent (the compressed ones).
        let big: Vec<u8> = (0..20_000u32).map(|i| (i % 7) as u8).collect();
        let r = good
            .send(Message::new(TOPIC, big))
            .await
            .unwrap_or_else(|e| panic!("{v:?}: signed compressed send: {e}"));
        assert_eq!(r.status, SendStatus::SendOk);
        // A batch too.
        let batch = (0..5)
            .map(|i| Message::new(TOPIC, format!("signed batch {i}")))
            .collect();
        let r = good
            .send_batch(batch)
            .await
            .unwrap_or_else(|e| panic!("{v:?}: signed batch: {e}"));
        assert_eq!(r.status, SendStatus::SendOk);
        let stored = good.counters().sent;
        assert!(stored >= 23, "{stored}");

        let bad = producer(&ns, "pg_std_acl_bad", Some((ACCESS_KEY, "not-the-secret"))).await;
        expect_refused(&bad, "wrong secret", v).await;
        expect_refused(&bad, "wrong secret again", v).await;
        let unknown = producer(
            &ns,
            "pg_std_acl_unknown",
            Some(("nobodyKnowsMe", SECRET_KEY)),
        )
        .await;
        expect_refused(&unknown, "unknown access key", v).await;
        let unsigned = producer(&ns, "pg_std_acl_unsigned", None).await;
        expect_refused(&unsigned, "no credentials", v).await;

        consume_signed(&good, &ns, v).await;
        namespace_v2_signed(&ns, v).await;

        // The good producer is unaffected.
        good.send(Message::new(TOPIC, "still fine"))
            .await
            .unwrap_or_else(|e| panic!("{v:?}: signed send after refusals: {e}"));
        for p in [good, bad, unknown, unsigned] {
            p.shutdown_timeout(Duration::from_millis(500)).await;
        }
    });
}

/// Namespace v2 (`namespace_v2`): every request carries `nsd`/`ns`, signed with the rest, so
/// a broker checking signatures accepts the sends and pulls; names are not wrapped.
async fn namespace_v2_signed(ns: &str, v: Version) {
    let p = Producer::builder()
        .namesrv_addr(ns)
        .producer_group("pg_std_acl_v2")
        .acl(ACCESS_KEY, SECRET_KEY, None)
        .namespace_v2("v2ns")
        .start()
        .await
        .unwrap_or_else(|e| panic!("{v:?}: namespace v2 producer: {e}"));
    for i in 0..3 {
        let r = p
            .send(Message::new(CONSUME_TOPIC, format!("v2 {i}")))
            .await
            .unwrap_or_else(|e| panic!("{v:?}: namespace v2 signed send {i}: {e}"));
        assert_eq!(r.status, SendStatus::SendOk);
        assert_eq!(r.queue.topic, CONSUME_TOPIC);
    }
    p.shutdown().await;
    let c = Consumer::builder()
        .namesrv_addr(ns)
        .group("cg_std_acl_v2")
        .subscribe(CONSUME_TOPIC, "*")
        .consume_from(ConsumeFromWhere::FirstOffset)
        .version(v.client_version())
        .acl(ACCESS_KEY, SECRET_KEY, None)
        .namespace_v2("v2ns")
        .start()
        .await
        .unwrap_or_else(|e| panic!("{v:?}: namespace v2 consumer: {e}"));
    let got = collect(&c, 19, Duration::from_secs(30)).await;
    let bodies: Vec<String> = got
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert!(
        (0..3).all(|i| bodies.contains(&format!("v2 {i}"))),
        "{v:?}: namespace v2 consumer read {bodies:?}"
    );
    c.shutdown().await;
}

#[test]
fn std_producer_acl_5_3_3() {
    run(Version::V5_3_3);
}

#[test]
fn std_producer_acl_4_9() {
    run(Version::V4_9);
}
