//! Request-reply against a real Apache RocketMQ (5.3.3 and the 4.9 line), the official Java
//! client on the other side:
//!
//! - rmq's `Producer::request` with a Java replier (`MessageUtil.createReplyMessage`): 1,000
//!   requests, 16 in flight, every reply matched to its request;
//! - a Java requester (`DefaultMQProducer.request`) with an rmq replier (`Producer::reply` on
//!   what an rmq consumer reads): 1,000 requests, every reply matched;
//! - a request nobody answers ends in `SendErrorKind::ReplyTimeout`; a message that is not a
//!   request cannot be replied to (`SendErrorKind::NotARequest`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmq_std::consumer::{ConsumeFromWhere, Consumer};
use rmq_std::{Message, Producer, SendErrorKind};
use rmq_tests::broker::{Cluster, ClusterOptions, JavaProducer, Version};
use rmq_tests::runtime;

const N: usize = 1000;

fn run(version: Version) {
    let cluster = Cluster::start(version, ClusterOptions::default()).expect("cluster");
    let ns = cluster.namesrv_addr().to_string();
    let rt = runtime();
    let p = rt.block_on(async {
        Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-requester")
            .start()
            .await
            .expect("producer")
    });

    // rmq requests, Java replies.
    let topic = "RmqRequests";
    cluster.create_topic(topic, 4).expect("create topic");
    let replier = std::thread::scope(|s| {
        let java = s.spawn(|| {
            let args = [&ns, topic, "java-replier", "5000", "240000"].map(String::from);
            cluster.run_java_tool("JavaReplier", &args, Duration::from_secs(300))
        });
        rt.block_on(async {
            // Until the replier answers (its consumer's start; earlier requests time out and
            // their late replies are dropped).
            let t0 = Instant::now();
            loop {
                let m = Message::new(topic, "warm-up");
                match p.request(m, Duration::from_secs(2)).await {
                    Ok(r) => {
                        assert_eq!(&r.body[..], b"r:warm-up");
                        break;
                    }
                    Err(e) if matches!(e.kind(), SendErrorKind::ReplyTimeout) => {
                        assert!(t0.elapsed() < Duration::from_secs(90), "no replier");
                    }
                    Err(e) => panic!("request: {e}"),
                }
            }
            let gate = Arc::new(tokio::sync::Semaphore::new(16));
            let mut tasks = Vec::new();
            for i in 0..N {
                let (p, gate) = (p.clone(), gate.clone());
                tasks.push(tokio::spawn(async move {
                    let _slot = gate.acquire_owned().await.expect("gate");
                    let body = format!("q-{i}");
                    let r = p
                        .request(Message::new(topic, body.clone()), Duration::from_secs(10))
                        .await
                        .unwrap_or_else(|e| panic!("request {i}: {e}"));
                    assert_eq!(r.body, format!("r:{body}").into_bytes(), "reply {i}");
                    assert!(r.topic.ends_with("_REPLY_TOPIC"), "{}", r.topic);
                    assert_eq!(r.property("MSG_TYPE"), Some("reply"));
                    assert!(r.property("CORRELATION_ID").is_some_and(|c| !c.is_empty()));
                    assert_eq!(r.property("REPLY_TO_CLIENT"), Some(p.client_id()));
                }));
            }
            for t in tasks {
                t.await.expect("request task");
            }
        });
        java.join().expect("replier thread")
    })
    .expect("JavaReplier");
    let end = replier.lines().find_map(|l| l.strip_prefix("RMQR-END "));
    let (replied, failed) = end.and_then(|e| e.split_once(' ')).expect("RMQR-END line");
    eprintln!("Java replier: {replied} replies, {failed} failed");
    assert_eq!(failed, "0", "{replier}");
    assert!(replied.parse::<usize>().unwrap() > N, "{replier}");

    // Java requests, rmq replies.
    let topic = "RmqReplies";
    cluster.create_topic(topic, 4).expect("create topic");
    let c = rt.block_on(async {
        Consumer::builder()
            .namesrv_addr(&ns)
            .group("rmq-replier")
            .subscribe(topic, "*")
            .consume_from(ConsumeFromWhere::FirstOffset)
            .start()
            .await
            .expect("consumer")
    });
    let stop = Arc::new(AtomicBool::new(false));
    let serving = {
        let (c, p, stop) = (c.clone(), p.clone(), stop.clone());
        rt.spawn(async move {
            let mut replied = 0usize;
            loop {
                let batch = c.poll(64, Duration::from_millis(200)).await;
                if batch.is_empty() && stop.load(Ordering::Relaxed) {
                    return replied;
                }
                for m in batch {
                    let body = format!("r:{}", String::from_utf8_lossy(&m.body));
                    p.reply(&m, body).await.expect("reply");
                    c.ack(&m);
                    replied += 1;
                }
            }
        })
    };
    let args = [&ns, topic, &N.to_string(), "5000"].map(String::from);
    let out = cluster
        .run_java_tool("JavaRequester", &args, Duration::from_secs(300))
        .expect("JavaRequester");
    let end = out.lines().find_map(|l| l.strip_prefix("RMQQ-END "));
    assert_eq!(end, Some(format!("{N} 0").as_str()), "{out}");
    stop.store(true, Ordering::Relaxed);
    let replied = rt.block_on(serving).expect("replier task");
    assert_eq!(replied, N, "each Java request answered once");

    // Nobody answers: the typed timeout. Not a request: nothing to reply to.
    rt.block_on(async {
        let quiet = "RmqNoReplier";
        cluster.create_topic(quiet, 1).expect("create topic");
        let e = p
            .request(Message::new(quiet, "anyone?"), Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(matches!(e.kind(), SendErrorKind::ReplyTimeout), "{e:?}");
        c.shutdown().await;
    });
    let plain = JavaProducer::new(topic, 1).body("plain").run(&cluster);
    assert!(plain.is_ok());
    rt.block_on(async {
        let c = Consumer::builder()
            .namesrv_addr(&ns)
            .group("rmq-replier-2")
            .subscribe(topic, "*")
            .consume_from(ConsumeFromWhere::FirstOffset)
            .start()
            .await
            .expect("consumer");
        let t0 = Instant::now();
        let m = loop {
            let batch = c.poll(64, Duration::from_millis(500)).await;
            if let Some(m) = batch.into_iter().find(|m| &m.body[..] == b"plain") {
                break m;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "plain message");
        };
        let e = p.reply(&m, "no").await.unwrap_err();
        assert!(matches!(e.kind(), SendErrorKind::NotARequest(_)), "{e:?}");
        c.shutdown().await;
        p.shutdown().await;
    });
}

#[test]
fn request_reply_5_3_3() {
    run(Version::V5_3_3);
}

#[test]
fn request_reply_4_9() {
    run(Version::V4_9);
}
