//! `rmq` against a real Apache RocketMQ 5.3.3 broker that enforces TLS and ACL (the rmq-tests
//! harness): the credentials from the environment (`RMQ_ACCESS_KEY`, `RMQ_SECRET_KEY`) and the
//! CA from `--tls-ca` reach every command; `send --lines` reads its messages from stdin and
//! reports them as JSON, `route --json` and `consume --json` read them back. Without the
//! credentials, or without TLS, the same send fails with the broker's or the connection's
//! reason and exit code 1.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rmq_tests::broker::{Cluster, ClusterOptions, Version};
use rmq_tests::pki::Pki;

const AK: &str = "rmqCliAccess";
const SK: &str = "rmqCliSecret123";

/// Runs `rmq` with `args`, the environment `env` and `stdin`: (success, stdout, stderr).
fn rmq<S: AsRef<std::ffi::OsStr>>(
    args: &[S],
    env: &[(&str, &str)],
    stdin: &str,
) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rmq"));
    c.args(args)
        .env_remove("RMQ_ACCESS_KEY")
        .env_remove("RMQ_SECRET_KEY")
        .env_remove("RMQ_TLS_CA")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("run rmq");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("rmq output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The error `rmq` printed last (after any log lines).
fn failure(stderr: &str) -> &str {
    let at = stderr.rfind("rmq: ").expect("an error line");
    &stderr[at..]
}

fn json_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn every_command_reaches_a_tls_and_acl_broker() {
    let dir = std::env::temp_dir().join(format!("rmq-cli-secured-{}", std::process::id()));
    let pki = Pki::new(&dir);
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).expect("write CA");
    let o = ClusterOptions {
        broker_jvm_args: pki.broker_jvm_args(),
        ..ClusterOptions::default()
    }
    .with_acl(Version::V5_3_3, AK, SK);
    let cluster = Cluster::start(Version::V5_3_3, o).expect("TLS + ACL cluster");
    let ns = cluster.namesrv_addr().to_string();
    let ca = ca.to_str().expect("utf-8 path");
    let creds = [("RMQ_ACCESS_KEY", AK), ("RMQ_SECRET_KEY", SK)];
    let topic = "CliSecured";
    let base = ["--namesrv", ns.as_str(), "--tls-ca", ca];
    let with = |more: &[&str]| -> Vec<String> {
        base.iter().chain(more).map(|s| (*s).to_owned()).collect()
    };

    // The topic is created by the first send (auto-creation); the broker may refuse it
    // while the route settles, so the first message is retried.
    let warm = with(&["send", "--topic", topic, "warm-up"]);
    let t0 = Instant::now();
    loop {
        let (ok, out, err) = rmq(&warm, &creds, "");
        if ok {
            assert!(out.starts_with("SendOk msgId="), "{out}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{out}{err}\n{}",
            cluster.log_tail(40)
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // Three messages from stdin, one per line, each reported as JSON.
    let send = with(&["--json", "send", "--topic", topic, "--lines", "--file", "-"]);
    let (ok, out, err) = rmq(&send, &creds, "one\r\ntwo\n\nthree\n");
    assert!(ok, "{out}{err}");
    let sent = json_lines(&out);
    assert_eq!(sent.len(), 3, "{out}");
    for r in &sent {
        assert_eq!(r["status"], "SendOk", "{r}");
        assert_eq!(r["topic"], topic, "{r}");
        assert!(r["msgId"].as_str().is_some_and(|id| id.len() == 32), "{r}");
    }

    // The route as JSON: broker-a's master, its write queues.
    let (ok, out, err) = rmq(&with(&["--json", "route", topic]), &creds, "");
    assert!(ok, "{out}{err}");
    let route = json_lines(&out).remove(0);
    assert_eq!(route["fromDefaultTopic"], false, "{route}");
    assert_eq!(route["brokers"][0]["brokerName"], "broker-a", "{route}");
    assert_eq!(
        route["brokers"][0]["master"],
        cluster.broker_addr(0).to_string(),
        "{route}"
    );
    assert!(
        route["writeQueues"]
            .as_array()
            .is_some_and(|q| !q.is_empty()),
        "{route}"
    );

    // Read back over TLS with the credentials: the four bodies, the lines' msgIds.
    let consume = with(&[
        "--group",
        "cg_cli_secured",
        "--json",
        "consume",
        topic,
        "--from",
        "first",
        "--count",
        "4",
    ]);
    let (ok, out, err) = rmq(&consume, &creds, "");
    assert!(ok, "{out}{err}");
    let got = json_lines(&out);
    let mut bodies: Vec<&str> = got.iter().filter_map(|m| m["body"].as_str()).collect();
    bodies.sort_unstable();
    assert_eq!(bodies, ["one", "three", "two", "warm-up"], "{out}");
    for r in &sent {
        assert!(
            got.iter().any(|m| m["msgId"] == r["msgId"]),
            "{r} read back"
        );
    }

    // Without the credentials the broker refuses the send: exit 1 with its reason.
    // The operator's commands over the same TLS and credentials.
    let (ok, out, err) = rmq(&with(&["--json", "cluster"]), &creds, "");
    assert!(ok, "{out}{err}");
    let b = json_lines(&out).remove(0);
    assert_eq!(b["addr"], cluster.broker_addr(0).to_string(), "{b}");
    let create = with(&["topics", "create", "CliSecuredOps", "--write-queues", "2"]);
    let (ok, out, err) = rmq(&create, &creds, "");
    assert!(ok, "{out}{err}");
    assert!(out.contains("to broker-a success"), "{out}");
    let (ok, out, err) = rmq(&with(&["topics", "list"]), &creds, "");
    assert!(ok, "{err}");
    assert!(out.lines().any(|t| t == "CliSecuredOps"), "{out}");
    let (ok, out, err) = rmq(&with(&["--json", "progress", "cg_cli_secured"]), &creds, "");
    assert!(ok, "{out}{err}");
    let committed: i64 = json_lines(&out)
        .iter()
        .map(|r| r["consumerOffset"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(committed, 4, "{out}");
    let reset = with(&[
        "reset-offset",
        "cg_cli_secured",
        "--topic",
        topic,
        "--to-time",
        "first",
    ]);
    let (ok, out, err) = rmq(&reset, &creds, "");
    assert!(ok, "{out}{err}");
    let (ok, out, _) = rmq(&create, &[], "");
    assert!(
        !ok,
        "a broker enforcing ACL refuses an unsigned topic creation: {out}"
    );

    let (ok, out, err) = rmq(&with(&["send", "--topic", topic, "x"]), &[], "");
    assert!(!ok, "{out}");
    assert!(failure(&err).contains("authentication"), "{err}");
    // Without TLS the broker (enforcing) cannot be reached.
    let plain = ["--namesrv", ns.as_str(), "send", "--topic", topic, "x"];
    let (ok, out, err) = rmq(&plain, &creds, "");
    assert!(!ok, "{out}");
    assert!(failure(&err).contains("closed the connection"), "{err}");
    // One credential without the other is a usage error, before anything is sent.
    let (ok, _, err) = rmq(&with(&["send", "--topic", topic, "x"]), &creds[..1], "");
    assert!(!ok);
    assert!(
        err.contains("--access-key and --secret-key go together"),
        "{err}"
    );
}
