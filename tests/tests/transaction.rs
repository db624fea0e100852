//! Transactional messages through rmq-std's `TransactionProducer` against a real Apache
//! RocketMQ (5.3.3 and the 4.9 line), read back with the official Java client (the Verifier):
//!
//! - commit is delivered, rollback never;
//! - "unknown" followed by the broker's check-back answered commit is delivered (answered
//!   rollback: never); the checker sees the half message as sent; a panicking local
//!   transaction reaches its caller and leaves the outcome to the check-back;
//! - a producer process killed with `kill -9` between the half message and END_TRANSACTION:
//!   its group's next producer gets the check-back, and its answer decides;
//! - a Java `TransactionMQProducer`'s committed message and rmq's carry the same properties.
//!
//! The brokers check half messages older than 3 s every second (`transactionTimeOut`,
//! `transactionCheckInterval`; 6 s and 30/60 s by default).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmq_std::consumer::ConsumedMessage;
use rmq_std::transaction::LocalState;
use rmq_std::{Message, Producer, SendStatus};
use rmq_tests::broker::{Cluster, ClusterOptions, JavaProducer, Version, verifier_read};
use rmq_tests::runtime;

/// What a checker was asked: (keys, topic, msg id, body).
type Asked = Arc<Mutex<Vec<(String, String, String, Vec<u8>)>>>;

/// A checker that records what it is asked and answers by the message's body: `check-commit`
/// and the killed producer's `killed` commit, `check-rollback` rolls back; messages the
/// application settled itself get the opposite of their own outcome (so a lost
/// END_TRANSACTION shows in what is delivered).
fn checker(asked: Asked) -> impl Fn(&ConsumedMessage) -> LocalState + Send + Sync + 'static {
    move |m: &ConsumedMessage| {
        let keys = m.keys().unwrap_or_default().to_owned();
        let body = m.body.to_vec();
        let entry = (keys.clone(), m.topic.clone(), m.msg_id.clone(), body);
        asked.lock().unwrap().push(entry);
        match &*String::from_utf8_lossy(&m.body) {
            "check-commit" | "rollback" | "killed" => LocalState::Commit,
            _ => LocalState::Rollback,
        }
    }
}

fn run(version: Version) {
    let options = ClusterOptions::default().quick_transactions();
    let cluster = Cluster::start(version, options).expect("cluster");
    let topic = "RmqTx";
    cluster.create_topic(topic, 4).expect("create topic");
    let ns = cluster.namesrv_addr().to_string();
    let group = "rmq-tx";
    let rt = runtime();
    let asked: Asked = Arc::default();

    // A producer process dies inside its local transaction (half message stored, no
    // END_TRANSACTION): the next producer of the group answers the check-back.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rmq-tx-child"))
        .args([&ns, group, topic, "killed"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("rmq-tx-child");
    let out = child.stdout.take().expect("stdout");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).expect("read");
    let killed_id = line
        .trim()
        .strip_prefix("HALF ")
        .expect("HALF line")
        .to_owned();
    child.kill().expect("kill -9");
    child.wait().expect("reaped");

    let sent = rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group(group)
            .start_transactional(checker(asked.clone()))
            .await
            .expect("transactional producer");
        let mut sent = BTreeMap::new();
        for (keys, state) in [
            ("commit", LocalState::Commit),
            ("rollback", LocalState::Rollback),
            ("check-commit", LocalState::Unknown),
            ("check-rollback", LocalState::Unknown),
        ] {
            let msg = Message::new(topic, keys)
                .with_keys([keys])
                .with_tags("TagTx");
            let r = p
                .send(msg, |s| {
                    assert_eq!(s.status, SendStatus::SendOk);
                    async move { state }
                })
                .await
                .expect("transactional send");
            assert_eq!((r.state, r.ended), (state, true), "{keys}: {r:?}");
            sent.insert(keys.to_owned(), r.send.msg_id.clone());
        }
        // A local transaction that panics: the panic reaches the caller, the broker is told
        // "unknown" and its check-back decides (rolled back: "panic" is not a commit body).
        let p2 = p.clone();
        let panicked = tokio::spawn(async move {
            let msg = Message::new(topic, "panic").with_keys(["panic"]);
            p2.send(msg, |_| async { panic!("local transaction failed") })
                .await
        })
        .await;
        assert!(
            panicked.is_err_and(|e| e.is_panic()),
            "the panic is resumed"
        );
        // The killed child's message keys are its body: "killed" by key below.
        sent.insert("killed".to_owned(), killed_id.clone());
        // The check-backs of the two unknown ones and of the killed child's.
        let asked_keys =
            || -> BTreeSet<String> { asked.lock().unwrap().iter().map(|a| a.0.clone()).collect() };
        let t0 = Instant::now();
        while !["check-commit", "check-rollback", "panic"]
            .iter()
            .all(|k| asked_keys().contains(*k))
            || !asked.lock().unwrap().iter().any(|a| a.2 == killed_id)
        {
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "check-backs: {:?}",
                asked.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        p.shutdown().await;
        sent
    });
    let asked = asked.lock().unwrap().clone();
    eprintln!("checker asked: {asked:?}");
    for (keys, topic_seen, msg_id, body) in &asked {
        assert_eq!(topic_seen, topic, "the check names the real topic");
        if msg_id == &killed_id {
            assert_eq!(body, b"killed");
            continue;
        }
        assert!(
            ["check-commit", "check-rollback", "panic"].contains(&keys.as_str()),
            "{keys}: settled by END_TRANSACTION, never checked: {asked:?}"
        );
        if keys != "panic" {
            assert_eq!(Some(msg_id), sent.get(keys), "the half message's UNIQ_KEY");
        }
        assert_eq!(body, keys.as_bytes());
    }

    // A Java TransactionMQProducer's committed message, for the comparison.
    let java = JavaProducer::new(topic, 1)
        .body("java")
        .keys("java")
        .tags("TagTx")
        .group("java-tx")
        .transactional()
        .run(&cluster)
        .expect("java transactional producer");
    assert_eq!(java.len(), 1);

    // What is delivered: the committed ones, nothing rolled back.
    let read = verifier_read(&cluster, topic, 10, Duration::from_secs(8)).expect("verifier");
    let bodies: BTreeSet<String> = read
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    let want: BTreeSet<String> = ["commit", "check-commit", "killed", "java"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(bodies, want, "delivered: {read:?}");
    assert_eq!(read.len(), 4, "each once: {read:?}");
    let by_body = |b: &str| read.iter().find(|m| m.body == b.as_bytes()).expect(b);
    for k in ["commit", "check-commit", "killed"] {
        assert_eq!(by_body(k).msg_id, sent[k], "{k}: UNIQ_KEY");
    }
    // rmq's and Java's transactional messages carry the same properties (names; the values
    // that name the sender aside).
    let names = |b: &str| -> BTreeSet<String> { by_body(b).properties.keys().cloned().collect() };
    assert_eq!(names("commit"), names("java"), "{read:?}");
    for (k, v) in &by_body("commit").properties {
        let java = &by_body("java").properties[k];
        match k.as_str() {
            "TRAN_MSG" | "TAGS" | "WAIT" | "REAL_TOPIC" => assert_eq!(v, java, "{k}"),
            "PGROUP" => assert_eq!((v.as_str(), java.as_str()), (group, "java-tx")),
            _ => {}
        }
    }
}

#[test]
fn transactions_5_3_3() {
    run(Version::V5_3_3);
}

#[test]
fn transactions_4_9() {
    run(Version::V4_9);
}
