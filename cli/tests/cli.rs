//! The `rmq` binary against scripted fake peers: `route`, `send` and a short `bench`.

#[path = "../../runtime-std/tests/common/mod.rs"]
mod common;

use std::process::Command;

use common::*;

fn rmq(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rmq"))
        .args(args)
        .env_remove("RMQ_NAMESRV")
        .env_remove("RMQ_NAMESRV_DOMAIN")
        .output()
        .expect("run rmq");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_send_and_bench() {
    let (a, a_seen) = peer(broker(0)).await;
    let (ns, _) = peer(namesrv(vec![("T", route_json(&[("broker-a", &a, 3)]))])).await;
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            rmq(&args)
        })
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();

    let (ok, out) = run(s(&["--namesrv", &ns, "route", "T"])).await.unwrap();
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("broker broker-a master {a}")),
        "{out}"
    );
    // The same through --namesrv-domain: the list fetched over HTTP first.
    let domain = serve_list(&format!("{ns};"));
    let (ok, out) = run(s(&["--namesrv-domain", &domain, "route", "T"]))
        .await
        .unwrap();
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("broker broker-a master {a}")),
        "{out}"
    );
    assert!(out.contains("broker-a: write queues [0, 1, 2]"), "{out}");

    let (ok, out) = run(s(&[
        "--namesrv",
        &ns,
        "send",
        "--topic",
        "T",
        "--tags",
        "TagC",
        "--prop",
        "k=v",
        "hello",
    ]))
    .await
    .unwrap();
    assert!(ok, "{out}");
    assert!(out.starts_with("SendOk msgId="), "{out}");
    let sent = a_seen
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.code == SEND_V2)
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body, b"hello");
    assert!(sent[0].get("i").unwrap().contains("k\u{1}v"));

    // Timer messages: --delay and --deliver-at write the 5.x properties.
    for (flag, value, prop) in [
        ("--delay", "90s", "TIMER_DELAY_MS\u{1}90000\u{2}"),
        (
            "--deliver-at",
            "1700000000000",
            "TIMER_DELIVER_MS\u{1}1700000000000\u{2}",
        ),
    ] {
        let (ok, out) = run(s(&[
            "--namesrv",
            &ns,
            "send",
            "--topic",
            "T",
            flag,
            value,
            "t",
        ]))
        .await
        .unwrap();
        assert!(ok, "{out}");
        let seen = a_seen.lock().unwrap();
        let last = seen.iter().rfind(|r| r.code == SEND_V2).unwrap();
        assert!(last.get("i").unwrap().contains(prop), "{flag}: {last:?}");
    }
    let (ok, out) = run(s(&[
        "--namesrv",
        &ns,
        "send",
        "--topic",
        "T",
        "--delay",
        "5",
        "t",
    ]))
    .await
    .unwrap();
    assert!(
        !ok && out.contains("expected a number with ms, s, m or h"),
        "{out}"
    );

    let (ok, out) = run(s(&[
        "--namesrv",
        &ns,
        "bench",
        "--topic",
        "T",
        "--mode",
        "async",
        "--size",
        "100",
        "--concurrency",
        "8",
        "--count",
        "200",
    ]))
    .await
    .unwrap();
    assert!(ok, "{out}");
    assert!(out.contains("bench: 200 ok, 0 failed"), "{out}");
    assert!(out.contains("latency ms: p50"), "{out}");
    assert!(out.contains("peak RSS"), "{out}");

    // --json: the same report as one object.
    let (ok, out) = run(s(&[
        "--namesrv",
        &ns,
        "--json",
        "bench",
        "--topic",
        "T",
        "--concurrency",
        "4",
        "--count",
        "50",
    ]))
    .await
    .unwrap();
    assert!(ok, "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with('{'))
        .expect("a JSON line");
    let doc: serde_json::Value = serde_json::from_str(line).expect("JSON");
    assert_eq!(
        (doc["ok"].as_u64(), doc["failed"].as_u64()),
        (Some(50), Some(0)),
        "{doc}"
    );
    assert!(doc["msgsPerSec"].as_f64().is_some_and(|r| r > 0.0), "{doc}");
    assert!(doc["latencyMs"]["p99"].as_f64().is_some(), "{doc}");
    assert_eq!(doc["failuresByKind"]["timeout"], 0, "{doc}");

    let (ok, out) = run(s(&["route", "T"])).await.unwrap();
    assert!(!ok, "no NameServer given: {out}");
    assert!(out.contains("--namesrv"), "{out}");
}

/// An HTTP endpoint that answers every request with `list` (Java's NameServer address server);
/// its `host:port`.
fn serve_list(list: &str) -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().unwrap().to_string();
    let answer = format!("HTTP/1.0 200 OK\r\n\r\n{list}\n");
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(answer.as_bytes());
        }
    });
    addr
}
