//! The operator's commands (`rmq cluster`, `topics list|create`, `progress`, `reset-offset`,
//! `query`) against real Apache RocketMQ 5.3.3 and 4.9.7 (the rmq-tests harness), each
//! compared with what Java's `mqadmin` reports of the same cluster.

use std::collections::BTreeSet;
use std::process::Command;

use rmq_tests::broker::{Cluster, ClusterOptions, Version};
use serde_json::Value;

fn rmq(ns: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rmq"))
        .arg("--namesrv")
        .arg(ns)
        .args(args)
        .output()
        .expect("run rmq");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// mqadmin's output without its logging lines.
fn mqadmin(cluster: &Cluster, args: &[&str]) -> String {
    let out = cluster.mqadmin(args).expect("mqadmin");
    out.lines()
        .filter(|l| !l.contains("|-") && !l.contains("SLF4J") && !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A progress row: topic, broker, queue id, broker offset, consumer offset.
type Row = (String, String, i32, i64, i64);

/// The rows of `mqadmin consumerProgress -g` (topic, broker, qid, broker offset, consumer
/// offset, ...), and its whole output.
fn mqadmin_progress(cluster: &Cluster, ns: &str, group: &str) -> (Vec<Row>, String) {
    let out = mqadmin(cluster, &["consumerProgress", "-n", ns, "-g", group]);
    let rows = out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| f.get(i).and_then(|s| s.parse::<i64>().ok());
            Some((
                (*f.first()?).to_owned(),
                (*f.get(1)?).to_owned(),
                i32::try_from(n(2)?).ok()?,
                n(3)?,
                n(4)?,
            ))
        })
        .collect();
    (rows, out)
}

#[test]
fn operator_commands_agree_with_mqadmin_5_3_3() {
    operator_commands_agree_with_mqadmin(Version::V5_3_3);
}

/// 4.9 resets offsets through the group's online consumers only (CONSUMER_NOT_ONLINE without
/// any): `rmq reset-offset` then sets them queue by queue, as mqadmin's fallback does.
#[test]
fn operator_commands_agree_with_mqadmin_4_9() {
    operator_commands_agree_with_mqadmin(Version::V4_9);
}

fn operator_commands_agree_with_mqadmin(version: Version) {
    let cluster = Cluster::start(version, ClusterOptions::default()).expect("cluster");
    let ns = cluster.namesrv_addr().to_string();

    // cluster: the one broker, as mqadmin clusterList lists it. mqadmin first: a broker
    // answers the statistics request (the version) only once it has sampled its rates, a
    // second or so after its start (before that, 5.3.3 and 4.9 answer with an error).
    let addr = cluster.broker_addr(0).to_string();
    let mq = mqadmin(&cluster, &["clusterList", "-n", &ns]);
    let row = mq
        .lines()
        // Then 4.9's clusterList also prints a stack trace naming the broker: the row is the
        // line that starts with the cluster.
        .find(|l| l.starts_with("DefaultCluster") && l.contains(&addr))
        .unwrap_or_else(|| panic!("mqadmin clusterList has no {addr}:\n{mq}"));
    let f: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        f[..4],
        ["DefaultCluster", "broker-a", "0", addr.as_str()],
        "{mq}"
    );
    let theirs = f.get(4).filter(|v| v.starts_with('V')).copied();
    let (ok, out, err) = rmq(&ns, &["--json", "cluster"]);
    assert!(ok, "{out}{err}");
    let brokers = json_lines(&out);
    assert_eq!(brokers.len(), 1, "{out}");
    let b = &brokers[0];
    assert_eq!(b["cluster"], "DefaultCluster", "{out}");
    assert_eq!(b["brokerName"], "broker-a", "{out}");
    assert_eq!(b["brokerId"], 0, "{out}");
    assert_eq!(b["addr"], addr.as_str(), "{out}");
    // The version the broker reports, as mqadmin showed it (had it one by then).
    if theirs.is_some() {
        assert_eq!(b["version"].as_str(), theirs, "{out}{err}\n{mq}");
    }
    if version == Version::V5_3_3 {
        assert_eq!(b["version"], "V5_3_3", "{out}{err}\n{mq}");
    }
    let (ok, plain, err) = rmq(&ns, &["cluster"]);
    assert!(ok, "{err}");
    let f: Vec<&str> = plain
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        f[..4],
        ["DefaultCluster", "broker-a", "0", addr.as_str()],
        "{plain}"
    );
    assert_eq!(f.len(), 7, "version, in and out rates: {plain}");

    // topics create, then the route mqadmin sees has 4 + 4 queues on the broker.
    let topic = "CliAdminTopic";
    let (ok, out, err) = rmq(
        &ns,
        &[
            "topics",
            "create",
            topic,
            "--read-queues",
            "4",
            "--write-queues",
            "4",
        ],
    );
    assert!(ok, "{out}{err}\n{}", cluster.log_tail(40));
    assert_eq!(
        out.trim(),
        format!("create topic {topic} to broker-a success")
    );
    let route = mqadmin(&cluster, &["topicRoute", "-n", &ns, "-t", topic]);
    let compact: String = route.split_whitespace().collect();
    assert!(compact.contains("\"readQueueNums\":4"), "{route}");
    assert!(compact.contains("\"writeQueueNums\":4"), "{route}");
    assert!(compact.contains("\"perm\":6"), "{route}");

    // topics list: the same set as mqadmin topicList.
    let (ok, out, err) = rmq(&ns, &["topics", "list"]);
    assert!(ok, "{err}");
    let ours: BTreeSet<&str> = out.lines().collect();
    assert!(ours.contains(topic), "{out}");
    let theirs = mqadmin(&cluster, &["topicList", "-n", &ns]);
    let theirs: BTreeSet<&str> = theirs.lines().map(str::trim).collect();
    assert_eq!(ours, theirs);
    let (ok, out, _) = rmq(&ns, &["--json", "topics", "list"]);
    assert!(ok);
    assert!(
        json_lines(&out).iter().any(|t| t["topic"] == topic),
        "{out}"
    );

    // progress: ten messages, a group that consumed them all, then reset to the start.
    let group = "cg_cli_admin";
    let bodies: String = (0..10).map(|i| format!("m{i}\n")).collect();
    let path = std::env::temp_dir().join(format!("rmq-admin-{}.txt", std::process::id()));
    std::fs::write(&path, bodies).expect("write bodies");
    let file = path.to_str().expect("utf-8 path");
    let (ok, out, err) = rmq(&ns, &["send", "--topic", topic, "--lines", "--file", file]);
    let _ = std::fs::remove_file(&path);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = rmq(
        &ns,
        &[
            "--group", group, "consume", topic, "--from", "first", "--count", "10",
        ],
    );
    assert!(ok, "{out}{err}");
    let (ok, out, err) = rmq(&ns, &["--json", "progress", group]);
    assert!(ok, "{out}{err}");
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 4, "one row per queue: {out}");
    let sum = |k: &str| {
        rows.iter()
            .map(|r| r[k].as_i64().unwrap_or(-1))
            .sum::<i64>()
    };
    assert_eq!(
        (sum("brokerOffset"), sum("consumerOffset"), sum("diff")),
        (10, 10, 0)
    );
    let (theirs, raw) = mqadmin_progress(&cluster, &ns, group);
    let ours: Vec<Row> = rows
        .iter()
        .map(|r| {
            (
                r["topic"].as_str().unwrap_or("").to_owned(),
                r["brokerName"].as_str().unwrap_or("").to_owned(),
                r["queueId"].as_i64().unwrap_or(-1) as i32,
                r["brokerOffset"].as_i64().unwrap_or(-1),
                r["consumerOffset"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(ours, theirs, "mqadmin consumerProgress:\n{raw}");

    // reset-offset to the start: every queue back to 0, as mqadmin then reports.
    let (ok, out, err) = rmq(
        &ns,
        &[
            "--json",
            "reset-offset",
            group,
            "--topic",
            topic,
            "--to-time",
            "first",
        ],
    );
    assert!(ok, "{out}{err}\n{}", cluster.log_tail(40));
    let moved = json_lines(&out);
    assert_eq!(moved.len(), 4, "{out}");
    assert!(moved.iter().all(|r| r["offset"] == 0), "{out}");
    let (ok, out, err) = rmq(&ns, &["progress", group, "--topic", topic]);
    assert!(ok, "{err}");
    assert!(out.ends_with("Diff Total: 10\n"), "{out}");
    let (theirs, raw) = mqadmin_progress(&cluster, &ns, group);
    assert_eq!(theirs.len(), 4, "{raw}");
    assert!(theirs.iter().all(|r| r.4 == 0), "{raw}");

    // query: by key, by the producer's msgId and by the broker's offsetMsgId, the message
    // mqadmin finds too. The broker indexes a message a moment after storing it.
    let (ok, out, err) = rmq(
        &ns,
        &[
            "--json",
            "send",
            "--topic",
            topic,
            "--keys",
            "order-7 other",
            "keyed body",
        ],
    );
    assert!(ok, "{out}{err}");
    let sent = json_lines(&out).remove(0);
    let (msg_id, offset_id) = (
        sent["msgId"].as_str().expect("msgId").to_owned(),
        sent["offsetMsgId"]
            .as_str()
            .expect("offsetMsgId")
            .to_owned(),
    );
    let t0 = std::time::Instant::now();
    let by_key = loop {
        let (ok, out, err) = rmq(
            &ns,
            &["--json", "query", "--topic", topic, "--key", "order-7"],
        );
        if ok {
            break json_lines(&out);
        }
        assert!(err.contains("no message found"), "{err}");
        assert!(t0.elapsed().as_secs() < 30, "never indexed: {err}");
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    assert_eq!(by_key.len(), 1, "{by_key:?}");
    assert_eq!(by_key[0]["msgId"], msg_id.as_str());
    assert_eq!(by_key[0]["body"], "keyed body");
    assert_eq!(by_key[0]["broker"], "broker-a");
    let theirs = mqadmin(
        &cluster,
        &["queryMsgByKey", "-n", &ns, "-t", topic, "-k", "order-7"],
    );
    assert!(theirs.contains(&msg_id), "mqadmin queryMsgByKey:\n{theirs}");
    let (ok, out, err) = rmq(&ns, &["query", "--topic", topic, "--id", &msg_id]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains(&format!("msgId={msg_id}")) && out.ends_with("keyed body\n"),
        "{out}"
    );
    let (ok, out, err) = rmq(&ns, &["--json", "query", "--id", &offset_id]);
    assert!(ok, "{out}{err}");
    let viewed = json_lines(&out).remove(0);
    assert_eq!(viewed["msgId"], msg_id.as_str(), "{viewed}");
    assert_eq!(viewed["keys"], "order-7 other", "{viewed}");
    // 5.3.3's queryMsgById requires the topic; 4.9's does not know the option.
    let mut view = vec!["queryMsgById", "-n", &ns, "-i", &offset_id];
    if version == Version::V5_3_3 {
        view.extend(["-t", topic]);
    }
    let theirs = mqadmin(&cluster, &view);
    assert!(theirs.contains(&msg_id), "mqadmin queryMsgById:\n{theirs}");
    let (ok, _, err) = rmq(&ns, &["query", "--topic", topic, "--key", "no-such-key"]);
    assert!(!ok && err.contains("no message found"), "{err}");
    let (ok, _, err) = rmq(&ns, &["query", "--id", "not-hex"]);
    assert!(!ok && err.contains("not an offsetMsgId"), "{err}");

    // A group without offsets is an error, with the reason.
    let (ok, _, err) = rmq(&ns, &["progress", "cg_nobody"]);
    assert!(!ok);
    assert!(err.contains("has no offsets"), "{err}");
}
