//! rmq-std's tokio `Producer` against a real Apache RocketMQ (5.3.3 and the 4.9 line), every
//! message read back with the official Java client (the Verifier).
//!
//! One cluster per test function: starting one takes 10–20 s.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmq_std::core::producer::TimerRefusal;
use rmq_std::core::wire::LanguageCode;
use rmq_std::{
    FaultProfile, Message, MessageQueue, Producer, SendErrorKind, SendResult, SendStatus,
};
use rmq_tests::broker::{Cluster, ClusterOptions, JavaProducer, Version, verifier_read};
use rmq_tests::runtime;

/// The machine running these tests may have two cores: one cluster at a time, or the JVMs
/// starve each other and the latency-driven parts (timeouts, fault isolation) stop meaning
/// anything.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn check_ok(r: &SendResult, topic: &str) {
    assert_eq!(r.status, SendStatus::SendOk, "{r:?}");
    assert_eq!(r.queue.topic, topic);
    assert!(r.queue_offset >= 0, "{r:?}");
    assert_eq!(r.msg_id.len(), 32, "UNIQ_KEY is 32 hex chars: {r:?}");
    assert!(!r.offset_msg_id.is_empty(), "{r:?}");
}

/// Every send flavour on one single-broker cluster, then one read-back.
fn features(version: Version) {
    let _serial = serial();
    let cluster = Cluster::start(version, ClusterOptions::default()).expect("cluster");
    let topic = "RmqStdFeatures";
    cluster.create_topic_retrying(topic, 4);
    let ns = cluster.namesrv_addr().to_string();
    let rt = runtime();
    // Expected on read-back: body -> (send result if any, tags).
    let mut expect: BTreeMap<Vec<u8>, Option<SendResult>> = BTreeMap::new();
    let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();

    rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-std-it")
            .language(LanguageCode::RUST)
            .start()
            .await
            .expect("producer");

        // Validation: nothing is sent, the error is typed and not retryable.
        let e = p.send(Message::new(topic, "")).await.unwrap_err();
        assert!(matches!(e.kind(), SendErrorKind::Validation(_)), "{e:?}");
        assert_eq!(e.attempts(), 0);
        assert!(!e.is_retryable());
        let e = p
            .send(Message::new(topic, "x").with_property("UNIQ_KEY", "forged"))
            .await
            .unwrap_err();
        assert!(matches!(e.kind(), SendErrorKind::Validation(_)), "{e:?}");

        // A timer message: this cluster runs without the timer wheel, so 5.3.3 refuses it;
        // a 4.9 broker would deliver it at once, so rmq refuses it before sending.
        let timer = Message::new(topic, "timer-refused").with_delay(Duration::from_secs(5));
        let e = p.send(timer).await.unwrap_err();
        match (version, e.kind()) {
            (
                Version::V5_3_3,
                SendErrorKind::TimerRefused {
                    refusal: TimerRefusal::Disabled,
                    code: 1,
                    ..
                },
            ) => {
                assert_eq!(e.attempts(), 1, "not retried");
                assert_eq!(p.counters().brokers_isolated, 0, "no fault counted");
            }
            (Version::V4_9, SendErrorKind::TimerUnsupported { broker_version }) => {
                assert_eq!(*broker_version, rmq_std::core::wire::version::V4_9_7);
                assert_eq!(e.attempts(), 0, "nothing sent");
            }
            _ => panic!("{version:?}: {e:?}"),
        }
        assert!(!e.to_string().is_empty());

        // SYNC.
        for i in 0..10 {
            let body = format!("sync-{i}");
            let r = p
                .send(
                    Message::new(topic, body.clone())
                        .with_tags("TagS")
                        .with_keys([format!("k-{i}")])
                        .with_property("p", format!("v{i}")),
                )
                .await
                .expect("sync send");
            check_ok(&r, topic);
            assert_eq!(r.queue.broker_name, "broker-a");
            expect.insert(body.into_bytes(), Some(r));
        }

        // ASYNC, many concurrent, as spawned futures.
        let mut handles = Vec::new();
        for i in 0..300 {
            let body = format!("async-{i}");
            let fut = p.send_async(Message::new(topic, body.clone()).with_tags("TagA"));
            handles.push((body, tokio::spawn(fut)));
        }
        for (body, h) in handles {
            let r = h.await.expect("join").expect("async send");
            check_ok(&r, topic);
            expect.insert(body.into_bytes(), Some(r));
        }

        // ASYNC with a callback.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..5 {
            let body = format!("callback-{i}");
            let tx = tx.clone();
            let b = body.clone();
            p.send_with_callback(Message::new(topic, body), move |r| {
                let _ = tx.send((b, r));
            });
        }
        drop(tx);
        while let Some((body, r)) = rx.recv().await {
            let r = r.expect("callback send");
            check_ok(&r, topic);
            expect.insert(body.into_bytes(), Some(r));
        }

        // ONEWAY.
        for i in 0..20 {
            let body = format!("oneway-{i}");
            p.send_oneway(Message::new(topic, body.clone()))
                .await
                .expect("oneway");
            expect.insert(body.into_bytes(), None);
        }

        // To a given queue.
        let q2 = MessageQueue {
            topic: topic.to_owned(),
            broker_name: "broker-a".to_owned(),
            queue_id: 2,
        };
        for i in 0..3 {
            let body = format!("toq-{i}");
            let r = p
                .send_to_queue(Message::new(topic, body.clone()), &q2)
                .await
                .expect("send_to_queue");
            check_ok(&r, topic);
            assert_eq!(r.queue, q2);
            expect.insert(body.into_bytes(), Some(r));
        }

        // Ordered by selector and by sharding key: one queue, increasing offsets.
        let mut last = -1;
        for i in 0..5 {
            let body = format!("ordered-{i}");
            let r = p
                .send_ordered(Message::new(topic, body.clone()), |n| 7 % n)
                .await
                .expect("ordered");
            check_ok(&r, topic);
            assert_eq!(r.queue.queue_id, 3, "7 % 4");
            assert!(r.queue_offset > last);
            last = r.queue_offset;
            expect.insert(body.into_bytes(), Some(r));
        }
        let mut queues = BTreeSet::new();
        let mut last = -1;
        for i in 0..5 {
            let body = format!("sharded-{i}");
            let r = p
                .send_sharded(Message::new(topic, body.clone()), "order-42")
                .await
                .expect("sharded");
            check_ok(&r, topic);
            queues.insert(r.queue.queue_id);
            assert!(r.queue_offset > last);
            last = r.queue_offset;
            expect.insert(body.into_bytes(), Some(r));
        }
        assert_eq!(queues.len(), 1, "one sharding key, one queue");

        // Batch.
        let batch: Vec<Message> = (0..10)
            .map(|i| Message::new(topic, format!("batch-{i}")).with_tags("TagB"))
            .collect();
        let r = p.send_batch(batch).await.expect("batch");
        assert_eq!(r.status, SendStatus::SendOk);
        let ids: Vec<&str> = r.msg_id.split(',').collect();
        assert_eq!(ids.len(), 10, "{r:?}");
        for i in 0..10 {
            expect.insert(format!("batch-{i}").into_bytes(), None);
        }
        let batch_ids: BTreeSet<String> = ids.iter().map(|s| s.to_string()).collect();

        // Compressed (20 000 bytes >= 4096).
        let r = p
            .send(Message::new(topic, big.clone()))
            .await
            .expect("compressed");
        check_ok(&r, topic);
        expect.insert(big.clone(), Some(r));

        // A topic that does not exist: the TBW102 path (autoCreateTopicEnable=true).
        let auto = "RmqStdAutoCreated";
        let r = p
            .send(Message::new(auto, "auto-0"))
            .await
            .expect("auto-created topic");
        check_ok(&r, auto);

        // The binary (ROCKETMQ) header format, with a Java-language producer.
        let pb = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-std-it-bin")
            .serialize_type(rmq_std::core::wire::SerializeType::ROCKETMQ)
            .language(LanguageCode::JAVA)
            .start()
            .await
            .expect("producer");
        for i in 0..3 {
            let body = format!("binary-{i}");
            let r = pb
                .send(Message::new(topic, body.clone()).with_tags("TagR"))
                .await
                .expect("ROCKETMQ-format send");
            check_ok(&r, topic);
            expect.insert(body.into_bytes(), Some(r));
        }
        pb.shutdown().await;

        let route = p.route(topic).await.expect("route");
        assert_eq!(route.queues.len(), 4);
        assert!(!route.from_default_topic);

        let c = p.counters();
        // 10 sync + 300 async + 5 callback + 20 oneway + 3 to-queue + 10 ordered + 1 batch
        // + 1 compressed + 1 auto-created; the 2 validation failures and the refused timer.
        assert_eq!((c.sent, c.failed), (351, 3), "{c:?}");
        assert!(c.attempts >= c.sent, "{c:?}");
        p.shutdown().await;
        let e = p.send(Message::new(topic, "late")).await.unwrap_err();
        assert!(matches!(e.kind(), SendErrorKind::Shutdown), "{e:?}");

        // Read everything back with the Java client.
        let got = verifier_read(&cluster, topic, expect.len() + 100, Duration::from_secs(5))
            .expect("verifier");
        // At-least-once: an attempt cut short by its timeout may have stored a copy before
        // the retry stored another. Every expected body is there; a body appears more than
        // once only if its send needed more than one attempt.
        let mut by_body: BTreeMap<&[u8], Vec<_>> = BTreeMap::new();
        for m in &got {
            assert_eq!(m.topic, topic);
            by_body.entry(&m.body[..]).or_default().push(m);
        }
        let missing: Vec<_> = expect
            .keys()
            .filter(|b| !by_body.contains_key(&b[..]))
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        assert!(missing.is_empty(), "not read back: {missing:?}");
        assert_eq!(by_body.len(), expect.len(), "unexpected bodies read back");
        let mut seen_batch = BTreeSet::new();
        for (body, copies) in &by_body {
            let want = &expect[*body];
            if copies.len() > 1 {
                assert!(
                    want.as_ref().is_some_and(|r| r.attempts > 1),
                    "{} copies of {:?} although it was sent once",
                    copies.len(),
                    String::from_utf8_lossy(body)
                );
            }
            if let Some(r) = want {
                let m = copies
                    .iter()
                    .find(|m| m.queue_offset == r.queue_offset && m.queue_id == r.queue.queue_id)
                    .unwrap_or_else(|| panic!("no copy at {r:?}: {copies:?}"));
                assert_eq!(m.msg_id, r.msg_id);
                assert_eq!(m.offset_msg_id, r.offset_msg_id);
            }
            let m = copies[0];
            let text = String::from_utf8_lossy(&m.body);
            if let Some(i) = text.strip_prefix("sync-") {
                let i: u32 = i.parse().unwrap();
                assert_eq!(m.tags.as_deref(), Some("TagS"));
                assert_eq!(m.keys.as_deref(), Some(format!("k-{i}").as_str()));
                assert_eq!(m.properties.get("p"), Some(&format!("v{i}")));
            }
            if text.starts_with("binary-") {
                assert_eq!(m.tags.as_deref(), Some("TagR"));
            }
            if text.starts_with("batch-") {
                assert_eq!(m.tags.as_deref(), Some("TagB"));
                seen_batch.insert(m.properties.get("UNIQ_KEY").cloned().unwrap_or_default());
            }
        }
        assert_eq!(seen_batch, batch_ids, "batch UNIQ_KEYs");
        assert!(
            by_body.contains_key(&big[..]),
            "compressed body read back intact"
        );
        let auto_got = verifier_read(&cluster, auto, 1, Duration::from_secs(5)).expect("verifier");
        assert_eq!(auto_got.len(), 1);
        assert_eq!(auto_got[0].body, b"auto-0");
    });
}

#[test]
fn producer_features_5_3_3() {
    features(Version::V5_3_3);
}

#[test]
fn producer_features_4_9_8() {
    features(Version::V4_9_8);
}

/// Timer messages on 5.3.3 with the timer wheel on (`timerMaxDelaySec` lowered to 60 s):
/// delivered no earlier than asked (to the broker's 100 ms precision), read back by the Java
/// client with their properties; the broker's refusal beyond the maximum and the client's
/// refusals (timer with a delay level, in a batch, in auto-batch it goes alone) are typed.
#[test]
fn timer_messages_5_3_3() {
    let _serial = serial();
    let options = ClusterOptions {
        broker_config: vec![
            "timerWheelEnable=true".into(),
            "mappedFileSizeTimerLog=4194304".into(),
            "timerPrecisionMs=100".into(),
            "timerMaxDelaySec=60".into(),
        ],
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start(Version::V5_3_3, options).expect("cluster");
    let topic = "RmqTimer";
    cluster.create_topic_retrying(topic, 4);
    let ns = cluster.namesrv_addr().to_string();
    let rt = runtime();
    let unix_ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
    };
    // body -> the earliest Unix ms it may be delivered at.
    let mut due: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
    rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-std-timer")
            .auto_batch(rmq_std::AutoBatch::default())
            .start()
            .await
            .expect("producer");
        let at = std::time::SystemTime::now() + Duration::from_secs(3);
        let r = p
            .send(Message::new(topic, "at").with_deliver_at(at))
            .await
            .expect("deliver_at send");
        check_ok(&r, topic);
        due.insert(b"at".to_vec(), unix_ms(at));
        let sent = std::time::SystemTime::now();
        let r = p
            .send(Message::new(topic, "after").with_delay(Duration::from_secs(2)))
            .await
            .expect("delay send");
        check_ok(&r, topic);
        due.insert(b"after".to_vec(), unix_ms(sent) + 2000);
        let past = std::time::SystemTime::now() - Duration::from_secs(10);
        p.send(Message::new(topic, "past").with_deliver_at(past))
            .await
            .expect("past send");
        due.insert(b"past".to_vec(), 0);

        // Beyond timerMaxDelaySec: the broker's refusal, typed, not retried.
        let far = Message::new(topic, "far").with_delay(Duration::from_secs(120));
        let e = p.send(far).await.unwrap_err();
        assert!(
            matches!(
                e.kind(),
                SendErrorKind::TimerRefused {
                    refusal: TimerRefusal::TooFarAhead,
                    code: 13,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.attempts(), 1, "MESSAGE_ILLEGAL is final");
        // Refused before sending: a delay level too, or in a batch.
        let both = Message::new(topic, "both")
            .with_delay(Duration::from_secs(5))
            .with_delay_level(2);
        let e = p.send(both).await.unwrap_err();
        assert!(matches!(e.kind(), SendErrorKind::Validation(_)), "{e:?}");
        let batch = vec![
            Message::new(topic, "b1"),
            Message::new(topic, "b2").with_delay(Duration::from_secs(5)),
        ];
        let e = p.send_batch(batch).await.unwrap_err();
        assert!(matches!(e.kind(), SendErrorKind::InvalidBatch(_)), "{e:?}");
        p.shutdown().await;
    });
    // A timer message from the official Java client, read below by rmq's consumer.
    let before_java = unix_ms(std::time::SystemTime::now());
    let sent = JavaProducer::new(topic, 1)
        .body("java-timer")
        .delay_ms(2000)
        .run(&cluster)
        .expect("java producer");
    assert_eq!(sent.len(), 1, "{sent:?}");
    due.insert(b"java-timer".to_vec(), before_java + 2000);
    let got = verifier_read(&cluster, topic, due.len(), Duration::from_secs(10)).expect("verifier");
    let bodies: BTreeSet<&[u8]> = got.iter().map(|m| &m.body[..]).collect();
    assert_eq!(bodies, due.keys().map(|b| &b[..]).collect(), "{got:?}");
    for m in &got {
        let due_ms = due[&m.body];
        let key = match &m.body[..] {
            b"after" | b"java-timer" => "TIMER_DELAY_MS",
            _ => "TIMER_DELIVER_MS",
        };
        assert!(m.properties.contains_key(key), "{key}: {m:?}");
        // Stored again when due: never earlier than asked, to the wheel's precision.
        assert!(
            m.store_timestamp >= due_ms - 100,
            "{} delivered {} ms early: {m:?}",
            String::from_utf8_lossy(&m.body),
            due_ms - m.store_timestamp
        );
        if due_ms > 0 {
            assert!(m.properties.contains_key("TIMER_OUT_MS"), "{m:?}");
            eprintln!(
                "timer {}: delivered {} ms after its due time",
                String::from_utf8_lossy(&m.body),
                m.store_timestamp - due_ms
            );
        }
    }
    // rmq's consumer reads the same messages with the same properties (the Java client's
    // timer message too).
    let read = rt.block_on(async {
        let c = rmq_std::consumer::Consumer::builder()
            .namesrv_addr(&ns)
            .group("cg_timer")
            .subscribe(topic, "*")
            .consume_from(rmq_std::consumer::ConsumeFromWhere::FirstOffset)
            .start()
            .await
            .expect("consumer");
        let mut read = BTreeMap::new();
        let t0 = Instant::now();
        while read.len() < due.len() && t0.elapsed() < Duration::from_secs(60) {
            for m in c.poll(16, Duration::from_secs(2)).await {
                assert!(c.ack(&m), "ack");
                read.insert(m.body.to_vec(), m);
            }
        }
        c.shutdown().await;
        read
    });
    assert_eq!(
        read.keys().collect::<BTreeSet<_>>(),
        due.keys().collect::<BTreeSet<_>>()
    );
    for v in &got {
        let m = &read[&v.body];
        assert_eq!(m.msg_id, v.msg_id);
        assert_eq!(m.store_timestamp, v.store_timestamp);
        for k in ["TIMER_DELAY_MS", "TIMER_DELIVER_MS", "TIMER_OUT_MS"] {
            assert_eq!(
                m.property(k),
                v.properties.get(k).map(String::as_str),
                "{k}"
            );
        }
    }
    assert_eq!(
        read[&b"java-timer"[..]].property("TIMER_DELAY_MS"),
        Some("2000")
    );
}

/// Two brokers; `kill -9` one during a stream of async sends. Every acknowledged message is
/// read back, every failure reaches its caller, and sends after the kill land on the other
/// broker within the retry budget.
#[test]
fn kill9_broker_during_async_stream_5_3_3() {
    let _serial = serial();
    let mut cluster = Cluster::start(
        Version::V5_3_3,
        ClusterOptions {
            brokers: 2,
            ..ClusterOptions::default()
        },
    )
    .expect("cluster");
    let topic = "RmqStdKill";
    cluster.create_topic_retrying(topic, 4);
    let ns = cluster.namesrv_addr().to_string();
    let rt = runtime();
    const TOTAL: usize = 2000;
    const KILL_AT: usize = 700;
    let (oks, errs, after_kill_failures) = rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-std-kill")
            .fault_profile(FaultProfile::Adaptive)
            .start()
            .await
            .expect("producer");
        // Warm up: both brokers known and connected.
        for i in 0..8 {
            p.send(Message::new(topic, format!("warm-{i}")))
                .await
                .expect("warm-up");
        }
        let returned = Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::with_capacity(TOTAL);
        let mut killed_at = None;
        for i in 0..TOTAL {
            if i == KILL_AT {
                cluster.kill9_broker(0);
                killed_at = Some(Instant::now());
            }
            let started = Instant::now();
            let fut = p.send_async(Message::new(topic, format!("kill-{i}")));
            let returned = returned.clone();
            handles.push(tokio::spawn(async move {
                let r = fut.await;
                returned.fetch_add(1, Ordering::Relaxed);
                (i, started, r)
            }));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let killed_at = killed_at.unwrap();
        let mut oks = Vec::new();
        let mut errs = Vec::new();
        let mut after_kill_failures = 0;
        for h in handles {
            let (i, started, r) = h.await.expect("join");
            match r {
                Ok(r) => oks.push((i, r)),
                Err(e) => {
                    if started > killed_at + Duration::from_millis(500) {
                        after_kill_failures += 1;
                    }
                    errs.push((i, e));
                }
            }
        }
        assert_eq!(
            returned.load(Ordering::Relaxed),
            TOTAL,
            "every send returned"
        );
        let c = p.counters();
        eprintln!(
            "kill test: {} ok, {} failed, counters {c:?}",
            oks.len(),
            errs.len()
        );
        for (i, e) in errs.iter().take(10) {
            eprintln!("  failure #{i}: {e}");
        }
        assert!(c.connections_lost >= 1, "{c:?}");
        p.shutdown().await;
        (oks, errs, after_kill_failures)
    });
    assert_eq!(oks.len() + errs.len(), TOTAL);
    assert_eq!(
        after_kill_failures, 0,
        "sends issued after the kill must land on the surviving broker"
    );
    assert!(
        oks.iter()
            .any(|(i, r)| *i > KILL_AT && r.queue.broker_name == "broker-b"),
        "sends after the kill went to broker-b"
    );
    for (_, r) in &oks {
        assert_eq!(r.status, SendStatus::SendOk);
    }
    // Restart the killed broker so that its acknowledged messages can be read back.
    cluster.restart_broker(0).expect("restart");
    // The Verifier only sees broker-a once it re-registered the topic with the NameServer.
    rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-std-kill-route")
            .start()
            .await
            .expect("producer");
        let t0 = Instant::now();
        loop {
            let r = p.route(topic).await;
            if let Ok(r) = &r
                && r.queues.iter().any(|q| q.broker_name == "broker-a")
            {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "broker-a never re-registered: {r:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        p.shutdown().await;
    });
    let got =
        verifier_read(&cluster, topic, oks.len() + 8, Duration::from_secs(10)).expect("verifier");
    let ids: BTreeSet<&str> = got.iter().map(|m| m.msg_id.as_str()).collect();
    let lost: Vec<_> = oks
        .iter()
        .filter(|(_, r)| !ids.contains(r.msg_id.as_str()))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged but lost, e.g. {:?}",
        lost.len(),
        lost.iter().take(3).collect::<Vec<_>>()
    );
}

/// Auto-batching: 64 tasks each send 20 small messages synchronously; they leave in
/// SEND_BATCH_MESSAGE requests (far fewer attempts than messages) and every caller gets its
/// own result: the Java verifier reads each message back with the msgId, queue and offset its
/// caller was given.
#[test]
fn auto_batch_5_3_3() {
    use rmq_std::AutoBatch;
    let _serial = serial();
    let cluster = Cluster::start(Version::V5_3_3, ClusterOptions::default()).expect("cluster");
    let topic = "RmqAutoBatch";
    cluster.create_topic_retrying(topic, 4);
    let ns = cluster.namesrv_addr().to_string();
    let rt = runtime();
    const TASKS: usize = 64;
    const EACH: usize = 20;
    let body = |t: usize, i: usize| format!("{t:02}-{i:02}-{}", "x".repeat(122));
    let (results, counters) = rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-std-auto-batch")
            .auto_batch(AutoBatch::default())
            .start()
            .await
            .expect("producer");
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let p = p.clone();
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::new();
                for i in 0..EACH {
                    let r = p
                        .send(Message::new(topic, body(t, i)))
                        .await
                        .unwrap_or_else(|e| panic!("send {t}/{i}: {e}"));
                    out.push((body(t, i), r));
                }
                out
            }));
        }
        let mut results = Vec::new();
        for h in tasks {
            results.extend(h.await.expect("task"));
        }
        let c = p.counters();
        p.shutdown().await;
        (results, c)
    });
    assert_eq!(results.len(), TASKS * EACH);
    eprintln!(
        "auto-batch: {} messages in {} attempts: {counters:?}",
        results.len(),
        counters.attempts
    );
    assert!(
        counters.attempts * 4 < counters.sent,
        "messages left in batches: {counters:?}"
    );
    let ids: BTreeSet<&str> = results.iter().map(|(_, r)| r.msg_id.as_str()).collect();
    assert_eq!(ids.len(), results.len(), "every caller has its own msgId");
    let got =
        verifier_read(&cluster, topic, results.len(), Duration::from_secs(5)).expect("verifier");
    assert_eq!(got.len(), results.len());
    let by_id: BTreeMap<&str, _> = got.iter().map(|m| (m.msg_id.as_str(), m)).collect();
    for (b, r) in &results {
        assert_eq!(r.status, SendStatus::SendOk);
        let m = by_id
            .get(r.msg_id.as_str())
            .unwrap_or_else(|| panic!("{} not read back", r.msg_id));
        assert_eq!(m.body, b.as_bytes(), "the body of {}", r.msg_id);
        assert_eq!(
            (m.queue_id, m.queue_offset),
            (r.queue.queue_id, r.queue_offset)
        );
        if !r.offset_msg_id.is_empty() {
            assert_eq!(m.offset_msg_id, r.offset_msg_id);
        }
    }
}
