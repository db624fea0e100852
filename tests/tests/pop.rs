//! POP consumption against a real Apache RocketMQ 5.3.3 (two brokers, timer wheel on, which
//! POP needs): two rmq `PopConsumer`s of one group share a topic without rebalancing, each
//! message reaching exactly one of them; acknowledged messages never come again; one message
//! whose visibility was shortened (CHANGE_MESSAGE_INVISIBLETIME) and one left unacknowledged
//! are redelivered by the broker's revive pass through the group's POP retry topic, under the
//! original topic with `reconsume_times` 1, and acknowledging those (ACK_MESSAGE to the retry
//! topic) ends them; a TAG filter is the broker's; and a 4.9 broker, which has no POP,
//! refuses with REQUEST_CODE_NOT_SUPPORTED instead of a consumer that waits forever.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmq_std::consumer::{ConsumeFromWhere, Consumer, PopConsumer, PoppedMessage};
use rmq_std::{Message, Producer, SendErrorKind};
use rmq_tests::broker::{Cluster, ClusterOptions, Version};
use rmq_tests::runtime;

const N: usize = 20;
const TOPIC: &str = "RmqPop";

async fn pop_consumer(ns: &str, group: &str, tags: &str) -> PopConsumer {
    Consumer::builder()
        .namesrv_addr(ns)
        .group(group)
        .subscribe(TOPIC, tags)
        .consume_from(ConsumeFromWhere::FirstOffset)
        // A receive that finds nothing ends within 2 s.
        .suspend(Duration::from_secs(2))
        .start_pop()
        .await
        .expect("pop consumer")
}

fn body(m: &PoppedMessage) -> String {
    String::from_utf8_lossy(&m.message.body).into_owned()
}

/// Receives with `c` until `total` (counting every receive of this round) reaches `want`, or
/// `limit` passed: what `c` received.
async fn receive_until(
    c: &PopConsumer,
    total: &AtomicUsize,
    want: usize,
    invisible: Duration,
    limit: Duration,
) -> Vec<PoppedMessage> {
    let start = Instant::now();
    let mut got = Vec::new();
    while total.load(Ordering::SeqCst) < want && start.elapsed() < limit {
        let more = c.receive(8, invisible).await.expect("receive");
        total.fetch_add(more.len(), Ordering::SeqCst);
        got.extend(more);
    }
    got
}

/// [`receive_until`] with `c` alone.
async fn receive(c: &PopConsumer, want: usize, limit: Duration) -> Vec<PoppedMessage> {
    receive_until(c, &AtomicUsize::new(0), want, Duration::from_secs(8), limit).await
}

#[test]
fn pop_5_3_3() {
    let options = ClusterOptions {
        brokers: 2,
        broker_config: vec![
            "timerWheelEnable=true".into(),
            "mappedFileSizeTimerLog=4194304".into(),
            "timerPrecisionMs=100".into(),
        ],
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start(Version::V5_3_3, options).expect("cluster");
    let ns = cluster.namesrv_addr().to_string();
    cluster.create_topic(TOPIC, 2).expect("create topic");
    let rt = runtime();
    rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-pop-producer")
            .start()
            .await
            .expect("producer");
        let mut brokers = BTreeSet::new();
        for i in 0..N {
            let tag = if i % 2 == 0 { "A" } else { "B" };
            let m = Message::new(TOPIC, format!("m-{i}")).with_tags(tag);
            brokers.insert(p.send(m).await.expect("send").queue.broker_name);
        }
        p.shutdown().await;
        assert_eq!(brokers.len(), 2, "the messages are on both brokers");

        // Two consumers of one group: each message reaches one of them, once.
        let c1 = pop_consumer(&ns, "rmq-pop", "*").await;
        let c2 = pop_consumer(&ns, "rmq-pop", "*").await;
        let invisible = Duration::from_secs(8);
        let limit = Duration::from_secs(30);
        let total = AtomicUsize::new(0);
        let (a, b) = tokio::join!(
            receive_until(&c1, &total, N, invisible, limit),
            receive_until(&c2, &total, N, invisible, limit),
        );
        let mut got: Vec<PoppedMessage> = a.into_iter().chain(b).collect();
        let bodies: Vec<String> = got.iter().map(body).collect();
        let unique: BTreeSet<&String> = bodies.iter().collect();
        assert_eq!(unique.len(), bodies.len(), "no message twice: {bodies:?}");
        assert_eq!(bodies.len(), N, "{bodies:?}");
        let on: BTreeSet<&str> = got
            .iter()
            .map(|m| m.message.queue.broker_name.as_str())
            .collect();
        assert_eq!(on.len(), 2, "popped from both brokers");
        for m in &got {
            assert_eq!(m.message.topic, TOPIC);
            assert_eq!(m.message.reconsume_times, 0);
            let fields: Vec<&str> = m.handle().split(' ').collect();
            assert_eq!(fields.len(), 8, "{}", m.handle());
            assert_eq!(fields[5], m.message.queue.broker_name, "{}", m.handle());
            assert_eq!(fields[7], m.message.queue_offset.to_string());
        }

        // Ack all but two: one made visible again in 1 s, one left to its 8 s.
        let mut shortened = got.pop().expect("a message");
        let left = got.pop().expect("a message");
        for m in &got {
            c1.ack(m).await.expect("ack");
        }
        let before = shortened.handle().to_owned();
        c2.change_invisible_time(&mut shortened, Duration::from_secs(1))
            .await
            .expect("change invisible time");
        assert_ne!(shortened.handle(), before, "a new handle");
        let again = receive(&c1, 2, Duration::from_secs(60)).await;
        let mut again_bodies: Vec<(String, i32)> = again
            .iter()
            .map(|m| (body(m), m.message.reconsume_times))
            .collect();
        again_bodies.sort();
        let mut want = vec![(body(&shortened), 1), (body(&left), 1)];
        want.sort();
        assert_eq!(
            again_bodies, want,
            "only the two unacknowledged came again, once"
        );
        for m in &again {
            assert_eq!(m.message.topic, TOPIC, "under the original topic");
            // Redelivered through the POP retry topic: the handle says so.
            assert_ne!(m.handle().split(' ').nth(4), Some("0"), "{}", m.handle());
            c2.ack(m).await.expect("ack a redelivered message");
        }
        // Nothing comes again: everything is acknowledged (past the invisible time and the
        // revive pass).
        let late = receive(&c1, 1, Duration::from_secs(16)).await;
        let late: Vec<String> = late.iter().map(body).collect();
        assert!(
            late.is_empty(),
            "acknowledged messages came again: {late:?}"
        );

        // The broker applies the TAG filter (another group: all messages again).
        let tagged = pop_consumer(&ns, "rmq-pop-tags", "A").await;
        let a = receive(&tagged, N / 2, limit).await;
        let a: BTreeSet<String> = a.iter().map(body).collect();
        let want: BTreeSet<String> = (0..N).step_by(2).map(|i| format!("m-{i}")).collect();
        assert_eq!(a, want);
        for c in [c1, c2, tagged] {
            c.shutdown().await;
        }
    });
}

#[test]
fn pop_4_9_is_refused() {
    let cluster = Cluster::start(Version::V4_9, ClusterOptions::default()).expect("cluster");
    let ns = cluster.namesrv_addr().to_string();
    cluster.create_topic(TOPIC, 2).expect("create topic");
    runtime().block_on(async {
        let c = pop_consumer(&ns, "rmq-pop", "*").await;
        let e = c.receive(8, Duration::from_secs(30)).await.unwrap_err();
        assert!(
            matches!(e.kind(), SendErrorKind::Broker { code: 3, .. }),
            "REQUEST_CODE_NOT_SUPPORTED: {e:?}"
        );
        c.shutdown().await;
    });
}
