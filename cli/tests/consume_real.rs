//! `rmq send` then `rmq consume` against a real Apache RocketMQ 5.3.3 (the rmq-tests harness):
//! what was sent comes back, in the documented plain and `--json` line formats, and the
//! printed messages' offsets are committed (a second run of the same group gets only what
//! is new); `--no-commit --exit-at-end` reads everything without a group's offsets and exits
//! at the end.

use std::process::Command;

use rmq_tests::broker::{Cluster, ClusterOptions, Version};

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

#[test]
fn consume_receives_what_send_sent() {
    let cluster = Cluster::start(Version::V5_3_3, ClusterOptions::default()).expect("cluster");
    let ns = cluster.namesrv_addr().to_string();
    let topic = "CliConsume";
    cluster.create_topic(topic, 1).expect("topic");
    let bodies = ["first \"quoted\"", "second\nline", "third"];
    for (i, b) in bodies.iter().enumerate() {
        let tag = if i == 1 { "B" } else { "A" };
        let key = format!("k{i}");
        let (ok, out, err) = rmq(
            &ns,
            &[
                "send", "--topic", topic, "--tags", tag, "--keys", &key, "--prop", "p=v", b,
            ],
        );
        assert!(ok, "send {i}: {out}{err}\n{}", cluster.log_tail(40));
        assert!(out.starts_with("SendOk msgId="), "{out}");
    }
    // JSON lines, from the first offset, tag A only.
    let (ok, out, err) = rmq(
        &ns,
        &[
            "--group",
            "cg_cli_json",
            "consume",
            topic,
            "--from",
            "first",
            "--tag",
            "A",
            "--count",
            "2",
            "--json",
        ],
    );
    assert!(ok, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}{err}");
    for (line, (i, body)) in lines.iter().zip([(0, bodies[0]), (2, bodies[2])]) {
        let body = body.replace('"', "\\\"");
        assert!(
            line.starts_with(&format!(
                "{{\"topic\":\"{topic}\",\"broker\":\"broker-a\",\"queueId\":0,\"queueOffset\":{i},"
            )),
            "{line}"
        );
        assert!(line.contains("\"tags\":\"A\""), "{line}");
        assert!(line.contains(&format!("\"keys\":\"k{i}\"")), "{line}");
        assert!(line.contains("\"p\":\"v\""), "{line}");
        assert!(line.ends_with(&format!("\"body\":\"{body}\"}}")), "{line}");
    }
    assert!(err.contains("2 message(s) received"), "{err}");

    // Plain lines, another group, every tag; the newline of the second body comes through.
    let (ok, out, err) = rmq(
        &ns,
        &[
            "--group",
            "cg_cli_plain",
            "consume",
            topic,
            "--from",
            "first",
            "--count",
            "3",
        ],
    );
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("broker-a:0#0 msgId="), "{out}");
    assert!(out.contains(" tags=A keys=k0 first \"quoted\"\n"), "{out}");
    assert!(out.contains(" tags=B keys=k1 second\nline\n"), "{out}");
    assert!(out.contains(" tags=A keys=k2 third\n"), "{out}");

    // The same group again: its offsets were committed, so only a new message comes.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let before_fourth = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (ok, _, err) = rmq(&ns, &["send", "--topic", topic, "fourth"]);
    assert!(ok, "{err}");
    let (ok, out, err) = rmq(
        &ns,
        &[
            "--group",
            "cg_cli_plain",
            "consume",
            topic,
            "--from",
            "first",
            "--count",
            "1",
        ],
    );
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("broker-a:0#3 msgId="), "{out}");
    assert!(out.ends_with(" fourth\n"), "{out}");

    // A new group from a timestamp: every queue sought there, so only the fourth comes.
    let (ok, out, err) = rmq(
        &ns,
        &[
            "--group",
            "cg_cli_ts",
            "consume",
            topic,
            "--from",
            &before_fourth,
            "--count",
            "1",
        ],
    );
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("broker-a:0#3 msgId="), "{out}");
    let (ok, _, err) = rmq(
        &ns,
        &["--group", "g", "consume", topic, "--from", "yesterday"],
    );
    assert!(
        !ok && err.contains("expected first, last or a Unix time in ms"),
        "{err}"
    );

    // A read-only tail to the end: all four, from a throwaway group, then it exits by itself.
    let (ok, out, err) = rmq(
        &ns,
        &[
            "consume",
            topic,
            "--from",
            "first",
            "--no-commit",
            "--exit-at-end",
        ],
    );
    assert!(ok, "{out}{err}");
    assert_eq!(out.matches(" msgId=").count(), 4, "{out}{err}");
    assert!(out.ends_with(" fourth\n"), "{out}");
    // Its offsets lived in a temporary file, removed at the end.
    let group = err
        .split("as group ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .expect("the group named");
    assert!(group.starts_with("rmq-tail-"), "{err}");
    let scratch = std::env::temp_dir().join(format!("{group}.offsets"));
    assert!(!scratch.exists(), "{} left behind", scratch.display());
    // A group at the end already: nothing to print, and it exits.
    let (ok, out, err) = rmq(
        &ns,
        &[
            "--group",
            "cg_cli_plain",
            "consume",
            topic,
            "--from",
            "first",
            "--exit-at-end",
        ],
    );
    assert!(ok, "{out}{err}");
    assert_eq!(out, "", "{err}");
}

/// `rmq consume --pop` on a 5.3.3 broker with its timer wheel on (POP needs it): prints what
/// was sent and acknowledges it (a later run of the group, past the invisible time and the
/// broker's revive pass, gets nothing); a second group reads everything again.
#[test]
fn consume_pop_prints_and_acknowledges() {
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
    let topic = "CliPop";
    cluster.create_topic(topic, 2).expect("topic");
    for b in ["one", "two", "three"] {
        let (ok, out, err) = rmq(&ns, &["send", "--topic", topic, b]);
        assert!(ok, "send: {out}{err}");
    }
    let pop = |group: &str, extra: &[&str]| {
        let mut args = vec![
            "--group", group, "consume", topic, "--pop", "--from", "first",
        ];
        args.extend_from_slice(extra);
        rmq(&ns, &args)
    };
    let (ok, out, err) = pop(
        "cg_cli_pop",
        &["--invisible", "2", "--count", "3", "--json"],
    );
    assert!(ok, "{out}{err}");
    let mut bodies: Vec<&str> = out
        .lines()
        .map(|l| {
            assert!(l.starts_with(&format!("{{\"topic\":\"{topic}\"")), "{l}");
            l.rsplit("\"body\":\"")
                .next()
                .unwrap()
                .trim_end_matches("\"}")
        })
        .collect();
    bodies.sort_unstable();
    assert_eq!(bodies, ["one", "three", "two"], "{out}{err}");
    assert!(
        err.contains("3 message(s) received and acknowledged"),
        "{err}"
    );
    // Unacknowledged messages would be visible again 2 s after their pop, redelivered within
    // a few more seconds by the broker's revive pass.
    std::thread::sleep(std::time::Duration::from_secs(10));
    let (ok, out, err) = pop("cg_cli_pop", &["--exit-at-end"]);
    assert!(ok, "{out}{err}");
    assert_eq!(out, "", "acknowledged messages came again: {err}");
    assert!(err.contains("0 message(s) received"), "{err}");
    let (ok, out, err) = pop("cg_cli_pop_other", &["--exit-at-end"]);
    assert!(ok, "{out}{err}");
    assert_eq!(out.lines().count(), 3, "{out}{err}");
    // The group's mode for Java POP consumers (SET_MESSAGE_REQUEST_MODE), and a refusal.
    let mode = [
        "consume-mode",
        "cg_cli_pop",
        "--topic",
        topic,
        "--mode",
        "pop",
    ];
    let (ok, out, err) = rmq(&ns, &mode);
    assert!(ok, "{out}{err}");
    assert_eq!(out, "cg_cli_pop reads CliPop by pop on broker-a\n", "{err}");
    let retry = [
        "consume-mode",
        "cg_cli_pop",
        "--topic",
        "%RETRY%cg_cli_pop",
        "--mode",
        "pop",
    ];
    let (ok, out, err) = rmq(&ns, &retry);
    assert!(!ok, "a retry topic is always pulled: {out}{err}");
    // A timestamp start is not POP's.
    let (ok, _, err) = rmq(&ns, &["consume", topic, "--pop", "--from", "1700000000000"]);
    assert!(
        !ok && err.contains("--pop starts at the first or the last offset"),
        "{err}"
    );
}
