//! The Producer against scripted fake NameServer and broker peers (fast, no JVM): retries on
//! another broker, async not retrying broker codes, the TBW102 path, no NameServer, the
//! request headers actually sent, UNREGISTER_CLIENT on shutdown, and sends still waiting when
//! the shutdown drain ends.

mod common;

use std::time::Duration;

use common::*;
use rmq_core::message::PropertiesRef;
use rmq_std::{ConnectionError, Message, Producer, SendErrorKind, SendStatus, TransportError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn producer(ns: &str) -> Producer {
    Producer::builder()
        .namesrv_addr(ns)
        .producer_group("pg-mock")
        .send_msg_timeout(Duration::from_millis(2000))
        .lazy_start(true)
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn start_looks_up_its_topics_and_fails_when_no_name_server_answers() {
    // A NameServer that answers: TBW102 is looked up (it does not exist here: an answer).
    let (a, _) = peer(broker(0)).await;
    let (ns, ns_seen) = peer(namesrv(vec![("T", route_json(&[("broker-a", &a, 4)]))])).await;
    let asked = |seen: &Seen| seen.get("topic").map(str::to_owned);
    let p = Producer::builder().namesrv_addr(&ns).start().await.unwrap();
    let topics: Vec<_> = ns_seen.lock().unwrap().iter().filter_map(asked).collect();
    assert_eq!(topics, ["TBW102"]);
    let h = p.health();
    assert_eq!((h.topics, h.routed_topics, h.unreachable_topics), (1, 0, 0));
    assert!(!h.is_ready(), "no topic has a route");
    p.shutdown().await;
    // With `topics`, those are looked up: their routes are known when start returns.
    ns_seen.lock().unwrap().clear();
    let p = Producer::builder()
        .namesrv_addr(&ns)
        .topics(["T"])
        .start()
        .await
        .unwrap();
    let topics: Vec<_> = ns_seen.lock().unwrap().iter().filter_map(asked).collect();
    assert_eq!(topics, ["T"]);
    assert!(p.health().is_ready(), "{:?}", p.health());
    assert_eq!(p.route("T").await.unwrap().queues.len(), 4);
    p.shutdown().await;

    // No NameServer listening: the start fails with the connection's error.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let e = Producer::builder()
        .namesrv_addr(&format!("{dead};{dead}"))
        .start()
        .await
        .expect_err("no NameServer: the start fails");
    let rmq_std::ConfigError::NameServersUnreachable(Some(c)) = &e else {
        panic!("{e:?}");
    };
    assert_eq!(c.io_kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(
        std::error::Error::source(&e).is_some(),
        "the cause is chained"
    );
    // `lazy_start` starts anyway; the health says what is wrong after the first lookup.
    let p = Producer::builder()
        .namesrv_addr(&dead)
        .lazy_start(true)
        .start()
        .await
        .unwrap();
    assert!(p.route("T").await.is_err());
    let h = p.health();
    assert_eq!((h.topics, h.unreachable_topics), (1, 1));
    assert!(!h.is_ready());
    assert!(h.name_server_error.is_some());
    p.shutdown().await;
    // A topic name that cannot be one is refused before anything starts.
    let e = Producer::builder()
        .namesrv_addr(&dead)
        .topics(["bad topic!"])
        .start()
        .await
        .unwrap_err();
    assert!(
        matches!(e, rmq_std::ConfigError::Topic(ref t, _) if t == "bad topic!"),
        "{e:?}"
    );
}

#[tokio::test]
async fn sync_retries_a_failing_broker_on_the_other_one() {
    let (a, a_seen) = peer(broker(1)).await; // SYSTEM_ERROR, retryable
    let (b, b_seen) = peer(broker(0)).await;
    let route = route_json(&[("broker-a", &a, 2), ("broker-b", &b, 2)]);
    let (ns, _) = peer(namesrv(vec![("T", route)])).await;
    let p = producer(&ns).await;
    for i in 0..6 {
        let r = p
            .send(Message::new("T", format!("m{i}")).with_tags("TagA"))
            .await
            .expect("stored on broker-b");
        assert_eq!(r.status, SendStatus::SendOk);
        assert_eq!(r.queue.broker_name, "broker-b");
        assert!((0..2).contains(&r.queue.queue_id));
        assert!(r.attempts <= 2, "{r:?}");
    }
    assert!(!a_seen.lock().unwrap().is_empty(), "broker-a was tried");
    let c = p.counters();
    assert_eq!(c.sent, 6);
    assert!(c.retried >= 1, "{c:?}");
    // What broker-b received: a V2 header naming it, with the UNIQ_KEY we returned.
    let sends: Vec<Seen> = b_seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.code == SEND_V2)
        .cloned()
        .collect();
    assert_eq!(sends.len(), 6);
    for s in &sends {
        assert_eq!(s.get("a"), Some("pg-mock"));
        assert_eq!(s.get("b"), Some("T"));
        assert_eq!(s.get("c"), Some("TBW102"));
        assert_eq!(s.get("d"), Some("4"));
        assert_eq!(s.get("n"), Some("broker-b"));
        assert_eq!(s.get("f"), Some("0"));
        let props = s.get("i").unwrap().to_owned();
        let props = PropertiesRef::new(&props);
        assert_eq!(props.get("TAGS"), Some("TagA"));
        assert_eq!(props.get("WAIT"), Some("true"));
        assert_eq!(props.get("UNIQ_KEY").map(str::len), Some(32));
    }
    p.shutdown().await;
    let unregistered = b_seen
        .lock()
        .unwrap()
        .iter()
        .any(|s| s.code == UNREGISTER && s.get("producerGroup") == Some("pg-mock"));
    assert!(unregistered, "UNREGISTER_CLIENT sent on shutdown");
}

#[tokio::test]
async fn broker_codes_end_async_sends_but_sync_retries_them() {
    let (a, a_seen) = peer(broker(1)).await;
    let (ns, _) = peer(namesrv(vec![("T", route_json(&[("broker-a", &a, 4)]))])).await;
    let p = producer(&ns).await;
    let e = p.send_async(Message::new("T", "x")).await.unwrap_err();
    assert_eq!(e.attempts(), 1, "async never retries a broker code");
    assert_eq!(e.broker_code(), Some(1));
    match e.kind() {
        SendErrorKind::Broker { remark, .. } => {
            assert_eq!(remark.as_deref(), Some("scripted failure"))
        }
        k => panic!("{k:?}"),
    }
    assert!(e.is_retryable(), "SYSTEM_ERROR is in the retry set");
    let e = p.send(Message::new("T", "y")).await.unwrap_err();
    assert_eq!(e.attempts(), 3, "sync: 1 + retry_times_when_send_failed");
    let sends = a_seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.code == SEND_V2)
        .count();
    assert_eq!(sends, 4);
    p.shutdown().await;
}

#[tokio::test]
async fn unknown_topic_uses_the_tbw102_route() {
    let (a, a_seen) = peer(broker(0)).await;
    let (ns, ns_seen) = peer(namesrv(vec![(
        "TBW102",
        route_json(&[("broker-a", &a, 8)]),
    )]))
    .await;
    let p = producer(&ns).await;
    let route = p.route("Fresh").await.unwrap();
    assert!(route.from_default_topic);
    assert_eq!(route.queues.len(), 4, "capped at defaultTopicQueueNums");
    let r = p.send(Message::new("Fresh", "x")).await.unwrap();
    assert_eq!(r.queue.topic, "Fresh");
    assert!(r.queue.queue_id < 4);
    let asked: Vec<String> = ns_seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|s| s.get("topic").map(str::to_owned))
        .collect();
    assert!(
        asked.starts_with(&["Fresh".to_owned(), "TBW102".to_owned()]),
        "{asked:?}"
    );
    let s = a_seen
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.code == SEND_V2)
        .cloned()
        .unwrap();
    assert_eq!(s.get("b"), Some("Fresh"));
    assert_eq!(s.get("c"), Some("TBW102"));
    p.shutdown().await;
}

#[tokio::test]
async fn validation_fails_before_any_byte_and_no_namesrv_is_typed() {
    let (ns, ns_seen) = peer(namesrv(vec![])).await;
    let p = producer(&ns).await;
    let e = p.send(Message::new("bad topic!", "x")).await.unwrap_err();
    assert!(matches!(e.kind(), SendErrorKind::Validation(_)), "{e:?}");
    // A failed send hands the message back.
    assert_eq!(e.message().map(Message::topic), Some("bad topic!"));
    let e = p
        .send_batch(vec![Message::new("A", "1"), Message::new("B", "2")])
        .await
        .unwrap_err();
    assert!(matches!(e.kind(), SendErrorKind::InvalidBatch(_)), "{e:?}");
    assert!(ns_seen.lock().unwrap().is_empty(), "nothing was sent");
    p.shutdown().await;

    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let p = producer(&format!("{dead};{dead}")).await;
    let e = p
        .send(Message::new("T", "x").with_tags("TagA"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), &SendErrorKind::NoNameServer);
    assert!(e.is_retryable());
    // Why: the refused connect, its io::Error behind `source()`.
    let c = e
        .connection_error()
        .expect("the NameServer's connect error");
    assert_eq!(c.addr(), dead);
    assert_eq!(c.io_kind(), std::io::ErrorKind::ConnectionRefused);
    let io = std::error::Error::source(c).and_then(|s| s.downcast_ref::<std::io::Error>());
    assert_eq!(
        io.map(std::io::Error::kind),
        Some(std::io::ErrorKind::ConnectionRefused)
    );
    let back = e.into_message().expect("the message comes back");
    assert_eq!((back.topic(), back.tags()), ("T", Some("TagA")));
    assert_eq!(back.body().as_ref(), b"x");
    assert_eq!(p.counters().failed, 1);
    p.shutdown().await;
}

#[tokio::test]
async fn a_malformed_answer_is_a_protocol_error_naming_what_was_wrong() {
    // broker-a answers every read with a frame whose header is not JSON.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {
                    let bad = [0, 0, 0, 8, 0, 0, 0, 4, b'n', b'o', b'p', b'e'];
                    if s.write_all(&bad).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let (ns, _) = peer(namesrv(vec![("T", route_json(&[("broker-a", &a, 1)]))])).await;
    let p = producer(&ns).await;
    let e = p.send(Message::new("T", "x")).await.unwrap_err();
    assert_eq!(
        e.kind(),
        &SendErrorKind::Transport(TransportError::Malformed),
        "{e}"
    );
    assert!(e.is_retryable());
    let c = std::error::Error::source(&e)
        .and_then(|s| s.downcast_ref::<ConnectionError>())
        .expect("the connection error behind the send error");
    assert_eq!(c.addr(), a);
    let what = c.malformed().expect("what was malformed");
    assert!(what.starts_with("malformed header: bad JSON"), "{what}");
    assert_eq!(c.io_kind(), std::io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("malformed header"), "{e}");
    // Every attempt met a broken connection; the message comes back to retry.
    assert!(p.counters().connections_lost >= 1);
    assert!(e.into_message().is_some());
    p.shutdown().await;
}

#[tokio::test]
async fn heartbeat_carries_the_producer_groups() {
    let (a, a_seen) = peer(broker(0)).await;
    let (ns, _) = peer(namesrv(vec![("T", route_json(&[("broker-a", &a, 1)]))])).await;
    let p = Producer::builder()
        .namesrv_addr(&ns)
        .producer_group("pg-hb")
        .heartbeat_broker_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    p.send(Message::new("T", "x")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let hb = a_seen
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.code == HEART_BEAT)
        .cloned()
        .expect("a heartbeat reached the broker");
    let body = String::from_utf8(hb.body).unwrap();
    assert!(
        body.contains(&format!(r#""clientID":"{}""#, p.client_id())),
        "{body}"
    );
    assert!(body.contains(r#"{"groupName":"pg-hb"}"#), "{body}");
    assert!(body.contains("CLIENT_INNER_PRODUCER"), "{body}");
    p.shutdown().await;
}

#[tokio::test]
async fn shutdown_ends_sends_still_waiting_past_the_drain() {
    // A broker that never answers a send, and a send timeout far beyond the drain deadline.
    let silent: Handler = std::sync::Arc::new(|r: &Seen| match r.code {
        SEND_V2 => None,
        _ => Some((0, Vec::new(), Vec::new())),
    });
    let (a, a_seen) = peer(silent).await;
    let (ns, _) = peer(namesrv(vec![("T", route_json(&[("broker-a", &a, 1)]))])).await;
    let p = Producer::builder()
        .namesrv_addr(&ns)
        .producer_group("pg-stuck")
        .send_msg_timeout(Duration::from_secs(600))
        .start()
        .await
        .unwrap();
    let stuck = tokio::spawn(p.send_async(Message::new("T", "never answered")));
    while !a_seen.lock().unwrap().iter().any(|s| s.code == SEND_V2) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    p.shutdown_timeout(Duration::from_millis(100)).await;
    // The guard only keeps a regression from hanging the suite; the send ends at once.
    let r = tokio::time::timeout(Duration::from_secs(60), stuck)
        .await
        .expect("the send ended after shutdown")
        .unwrap();
    let e = r.expect_err("nobody answered");
    assert_eq!(e.kind(), &SendErrorKind::Shutdown, "{e}");
    // And nothing new starts.
    let e = p.send(Message::new("T", "late")).await.unwrap_err();
    assert_eq!(e.kind(), &SendErrorKind::Shutdown);
}
