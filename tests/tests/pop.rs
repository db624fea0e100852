//! POP consumption against a real Apache RocketMQ 5.3.3 (two brokers, timer wheel on, which
//! POP needs): two rmq `PopConsumer`s of one group share a topic without rebalancing, each
//! message reaching exactly one of them; acknowledged messages never come again; one message
//! whose visibility was shortened (CHANGE_MESSAGE_INVISIBLETIME) and one left unacknowledged
//! are redelivered by the broker's revive pass through the group's POP retry topic, under the
//! original topic with `reconsume_times` 1, and acknowledging those (ACK_MESSAGE to the retry
//! topic) ends them; a TAG filter is the broker's; and a 4.9 broker, which has no POP,
//! refuses with REQUEST_CODE_NOT_SUPPORTED instead of a consumer that waits forever.
//!
//! And the group shared with the official Java client: eight rmq POP consumers and a Java push
//! consumer in POP mode (client rebalance off, the group set to POP by rmq-admin's
//! `set_consume_mode`, SET_MESSAGE_REQUEST_MODE, `tests/java/PopJavaConsumer.java`) on a topic
//! of two queues while messages
//! arrive: each of the nine receives messages, and every message is acknowledged by exactly one
//! of them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmq_std::consumer::{ConsumeFromWhere, ConsumeResult, Consumer, PopConsumer, PoppedMessage};
use rmq_std::{Message, Producer, SendErrorKind};
use rmq_tests::broker::{Cluster, ClusterOptions, Version, verifier_read};
use rmq_tests::runtime;

const N: usize = 20;
const TOPIC: &str = "RmqPop";

async fn pop_consumer(ns: &str, group: &str, tags: &str) -> PopConsumer {
    // A receive that finds nothing ends within 2 s.
    pop_consumer_waiting(ns, group, tags, Duration::from_secs(2)).await
}

/// A POP consumer whose receives that find nothing end within `suspend`.
async fn pop_consumer_waiting(ns: &str, group: &str, tags: &str, suspend: Duration) -> PopConsumer {
    Consumer::builder()
        .namesrv_addr(ns)
        .group(group)
        .subscribe(TOPIC, tags)
        .consume_from(ConsumeFromWhere::FirstOffset)
        .suspend(suspend)
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
    cluster
        .create_topic("RmqPopOrdered", 1)
        .expect("create topic");
    cluster.create_topic(LISTENED, 1).expect("create topic");
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
        orderly(&ns).await;
        listener(&ns).await;
    });
    // The message the listener gave up on, in the dead-letter queue (read by the Java client).
    let read = verifier_read(&cluster, "%DLQ%rmq-pop-listen", 1, Duration::from_secs(10))
        .expect("verifier");
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(read[0].body, b"l-2");
    // The broker names the topic its copy was in: a revived message's POP retry topic.
    assert_eq!(
        read[0].properties.get("RETRY_TOPIC").map(String::as_str),
        Some("%RETRY%rmq-pop-listen_RmqPopListened")
    );
}

const LISTENED: &str = "RmqPopListened";

/// `PopConsumer::run`: handled messages acknowledged once; one whose handler keeps failing comes
/// again after Java's first POP retry delay (10 s) counted, and with `max_reconsume_times` 1 it
/// then goes to `%DLQ%<group>`.
async fn listener(ns: &str) {
    let p = Producer::builder()
        .namesrv_addr(ns)
        .producer_group("rmq-pop-producer")
        .start()
        .await
        .expect("producer");
    for i in 0..5 {
        p.send(Message::new(LISTENED, format!("l-{i}")))
            .await
            .expect("send");
    }
    p.shutdown().await;
    let c = Consumer::builder()
        .namesrv_addr(ns)
        .group("rmq-pop-listen")
        .subscribe(LISTENED, "*")
        .consume_from(ConsumeFromWhere::FirstOffset)
        .suspend(Duration::from_secs(2))
        .max_reconsume_times(1)
        .start_pop()
        .await
        .expect("pop consumer");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let run = {
        let (c, seen) = (c.clone(), seen.clone());
        tokio::spawn(async move {
            c.run(move |m| {
                let seen = seen.clone();
                async move {
                    let b = String::from_utf8_lossy(&m.body).into_owned();
                    let fail = b == "l-2";
                    seen.lock().unwrap().push((b, m.reconsume_times));
                    if fail {
                        ConsumeResult::Later(0)
                    } else {
                        ConsumeResult::Success
                    }
                }
            })
            .await;
        })
    };
    let twice = || {
        seen.lock()
            .unwrap()
            .iter()
            .filter(|(b, _)| b == "l-2")
            .count()
            >= 2
    };
    let t0 = Instant::now();
    while !twice() && t0.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The dead letter and its ack.
    tokio::time::sleep(Duration::from_secs(2)).await;
    c.shutdown().await;
    run.await.expect("run ends at the shutdown");
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    let want: Vec<(String, i32)> = [
        ("l-0", 0),
        ("l-1", 0),
        ("l-2", 0),
        ("l-2", 1),
        ("l-3", 0),
        ("l-4", 0),
    ]
    .map(|(b, n)| (b.to_owned(), n))
    .into();
    assert_eq!(seen, want);
}

/// Orderly POP: one queue's messages in order, the queue blocked while its last batch is
/// unacknowledged, an unacknowledged batch delivered again from the queue in order with the
/// broker's delivery count.
async fn orderly(ns: &str) {
    const ORDERED: &str = "RmqPopOrdered";
    let p = Producer::builder()
        .namesrv_addr(ns)
        .producer_group("rmq-pop-producer")
        .start()
        .await
        .expect("producer");
    for i in 0..6 {
        let m = Message::new(ORDERED, format!("o-{i}"));
        p.send_sharded(m, "one-key").await.expect("send");
    }
    p.shutdown().await;
    let c = Consumer::builder()
        .namesrv_addr(ns)
        .group("rmq-pop-orderly")
        .subscribe(ORDERED, "*")
        .consume_from(ConsumeFromWhere::FirstOffset)
        .suspend(Duration::from_secs(2))
        .orderly(true)
        .start_pop()
        .await
        .expect("pop consumer");
    let short = Duration::from_secs(3);
    let mut first = Vec::new();
    let t0 = Instant::now();
    while first.is_empty() && t0.elapsed() < Duration::from_secs(20) {
        first = c
            .receive(3, Duration::from_secs(60))
            .await
            .expect("receive");
    }
    let bodies = |v: &[PoppedMessage]| v.iter().map(body).collect::<Vec<_>>();
    assert_eq!(bodies(&first), ["o-0", "o-1", "o-2"]);
    assert!(
        first
            .iter()
            .all(|m| m.handle().split(' ').nth(3) == Some("999"))
    );
    // The queue gives nothing more while its batch is out.
    let blocked = c.receive(3, short).await.expect("receive");
    assert!(blocked.is_empty(), "{:?}", bodies(&blocked));
    for m in &first {
        c.ack(m).await.expect("ack");
    }
    let next = c.receive(3, short).await.expect("receive");
    assert_eq!(bodies(&next), ["o-3", "o-4", "o-5"]);
    assert!(next.iter().all(|m| m.message.reconsume_times == 0));
    // Not acknowledged: after 3 s the same batch again, in order, counted.
    let mut again = Vec::new();
    let t0 = Instant::now();
    while again.is_empty() && t0.elapsed() < Duration::from_secs(30) {
        again = c.receive(3, short).await.expect("receive");
    }
    assert_eq!(bodies(&again), ["o-3", "o-4", "o-5"]);
    let counts: Vec<i32> = again.iter().map(|m| m.message.reconsume_times).collect();
    assert_eq!(counts, [1, 1, 1]);
    for m in &again {
        c.ack(m).await.expect("ack");
    }
    let rest = c.receive(3, short).await.expect("receive");
    assert!(rest.is_empty(), "{:?}", bodies(&rest));
    c.shutdown().await;
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

#[test]
fn pop_shared_by_eight_rmq_consumers_and_a_java_one_5_3_3() {
    const N: usize = 400;
    const GROUP: &str = "rmq-pop-mixed";
    let options = ClusterOptions {
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
    // The group pops (SET_MESSAGE_REQUEST_MODE from rmq-admin, as `mqadmin setConsumeMode`):
    // the Java consumer gets a POP assignment only then.
    let admin = rmq_admin::Admin::builder().namesrv_addr(&ns).build();
    let set = admin.set_consume_mode("DefaultCluster", TOPIC, GROUP, true, -1);
    let brokers = runtime().block_on(set).expect("set consume mode");
    let accepted: Vec<&str> = brokers
        .iter()
        .map(|(b, r)| {
            assert!(r.is_ok(), "{b}: {r:?}");
            b.as_str()
        })
        .collect();
    assert_eq!(accepted, ["broker-a"]);
    let ready = std::env::temp_dir().join(format!("rmq-pop-java-ready-{}", std::process::id()));
    let _ = std::fs::remove_file(&ready);
    let t = Instant::now();
    let (java, rmq) = std::thread::scope(|s| {
        let (ready, java_ns) = (&ready, &ns);
        let java = s.spawn(move || {
            let ready = ready.display().to_string();
            // It stops 40 s after its last message: after the rmq consumers, which stop 6 s
            // after the last message anyone received and within one receive's 15 s more.
            let args = [java_ns, TOPIC, GROUP, "40000", "180000", &ready].map(String::from);
            let r = cluster.run_java_tool("PopJavaConsumer", &args, Duration::from_secs(240));
            eprintln!("java done at {:?}", t.elapsed());
            r
        });
        let rmq = runtime().block_on(async {
            let start = Instant::now();
            let sent_all = Arc::new(AtomicBool::new(false));
            // When any rmq consumer last received, in ms since `start`.
            let last = Arc::new(AtomicU64::new(0));
            let mut consumers = Vec::new();
            for _ in 0..8 {
                // The Java client's poll time (15 s): a broker wakes the parked pop that
                // expires first when a message comes, so a consumer that polls for less
                // would always come before the Java one.
                let c = pop_consumer_waiting(&ns, GROUP, "*", Duration::from_secs(15)).await;
                let (sent_all, last) = (sent_all.clone(), last.clone());
                consumers.push(tokio::spawn(async move {
                    let mut got = Vec::new();
                    let idle = |now: u64| now.saturating_sub(last.load(Ordering::SeqCst)) > 6_000;
                    while !(sent_all.load(Ordering::SeqCst) && idle(ms_since(start))) {
                        let batch = match c.receive(4, Duration::from_secs(30)).await {
                            Ok(b) => b,
                            Err(e) => panic!("receive at {:?}: {e:?}", t.elapsed()),
                        };
                        if !batch.is_empty() {
                            last.store(ms_since(start), Ordering::SeqCst);
                        }
                        for m in batch {
                            // Some work, so that the others get their turn.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            c.ack(&m).await.expect("ack");
                            got.push(body(&m));
                        }
                    }
                    c.shutdown().await;
                    got
                }));
            }
            // The Java consumer pops once the broker assigned it the queues (or it gave up).
            let t0 = Instant::now();
            while !ready.exists() && t0.elapsed() < Duration::from_secs(90) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let p = Producer::builder()
                .namesrv_addr(&ns)
                .producer_group("rmq-pop-producer")
                .start()
                .await
                .expect("producer");
            for i in 0..N {
                p.send(Message::new(TOPIC, format!("m-{i}")))
                    .await
                    .expect("send");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            p.shutdown().await;
            last.store(ms_since(start), Ordering::SeqCst);
            sent_all.store(true, Ordering::SeqCst);
            let mut rmq = Vec::new();
            for c in consumers {
                rmq.push(c.await.expect("consumer task"));
            }
            rmq
        });
        (java.join().expect("java thread"), rmq)
    });
    let _ = std::fs::remove_file(&ready);
    let java = java.expect("PopJavaConsumer");
    let java: Vec<String> = java
        .lines()
        .filter_map(|l| l.strip_prefix("RMQP "))
        .map(str::to_owned)
        .collect();
    let per: Vec<usize> = rmq.iter().map(Vec::len).collect();
    eprintln!("received: rmq {per:?}, Java {}", java.len());
    assert!(
        per.iter().all(|&n| n > 0),
        "every rmq consumer received: {per:?}"
    );
    assert!(
        !java.is_empty(),
        "the Java consumer received (rmq: {per:?})"
    );
    let mut all: Vec<String> = rmq
        .into_iter()
        .flatten()
        .chain(java.iter().cloned())
        .collect();
    all.sort();
    let mut want: Vec<String> = (0..N).map(|i| format!("m-{i}")).collect();
    want.sort();
    let twice: Vec<&String> = all
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| &w[0])
        .collect();
    assert!(twice.is_empty(), "acknowledged twice: {twice:?}");
    assert_eq!(
        all,
        want,
        "every message once (rmq {per:?}, Java {})",
        java.len()
    );
}

fn ms_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}
