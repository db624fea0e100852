//! ACL 1.0 through the rmq-std `Producer` (`ProducerBuilder::acl`) against the REAL broker with
//! authentication on: 5.3.3 (`authenticationEnabled=true` with an initial user) and the 4.9
//! line (`aclEnable=true` + `conf/plain_acl.yml`).
//!
//! - right keys: every request is signed (sends, heartbeats), messages are stored (SEND_OK);
//! - wrong secret: the send fails with the typed `SendErrorKind::Authentication`, after no
//!   more attempts than the retry budget (the producer's attempt counter proves how many
//!   requests went to the broker), and quickly (no retry storm, no waiting for the timeout);
//! - no credentials at all: the same typed error.

use std::time::{Duration, Instant};

use rmq_std::{Message, Producer, SendErrorKind, SendStatus};
use rmq_tests::broker::{Cluster, ClusterOptions, Version};

const ACCESS_KEY: &str = "rmqStdAccess";
const SECRET_KEY: &str = "rmqStdSecret123";
const TOPIC: &str = "StdAclTopic";
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

        // The good producer is unaffected.
        good.send(Message::new(TOPIC, "still fine"))
            .await
            .unwrap_or_else(|e| panic!("{v:?}: signed send after refusals: {e}"));
        for p in [good, bad, unknown, unsigned] {
            p.shutdown_timeout(Duration::from_millis(500)).await;
        }
    });
}

#[test]
fn std_producer_acl_5_3_3() {
    run(Version::V5_3_3);
}

#[test]
fn std_producer_acl_4_9() {
    run(Version::V4_9);
}
