//! Downlink commands on the firmware (`runtime-smoltcp/firmware`, feature `downlink`)
//! executing on an emulated Cortex-M4F against the real broker (5.3.3), over a TAP device in
//! a private network namespace, as `qemu_gateway.rs`.
//!
//! The image is the store-and-forward gateway whose `rmq_smoltcp::Client` also consumes a
//! command topic (4 queues) in clustering mode (fixed queues: it owns all 4, and sends no
//! heartbeats: its pulls carry the subscription), on the same session and connections as its
//! telemetry. The official Java producer sends 100 commands: the firmware receives each
//! exactly once, in queue order, with the body Java sent, and commits the offsets; its 20
//! telemetry messages are stored meanwhile (the Java verifier reads them back). Then 50 more
//! commands arrive and the firmware is killed (QEMU ends, no final commit). A new boot resumes
//! each queue at its committed offset: it delivers exactly the commands from there on (a
//! commit in flight at the kill may have moved it past the last one the firmware reported,
//! never before it), so nothing is lost and nothing before the commit comes again; then more
//! commands arrive, it stops cleanly (final commit) and reports its figures.
//! Needs root, `qemu-system-arm`, the thumbv7em rustup target, a JDK and Maven.

mod gateway;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gateway::qemu::{Firmware, build_firmware, require_qemu};
use rmq_tests::broker::{
    Cluster, ClusterOptions, JavaProducer, SendLine, Version, prefetch, verifier_read,
};
use rmq_tests::netns;

const IMAGE_ENV: &str = "RMQ_QEMU_IMAGE_DOWNLINK";
const VERSION: Version = Version::V5_3_3;
const COMMANDS: &str = "Commands";
const TELEMETRY: &str = "DownlinkTelemetry";
/// Static RAM plus stack high-water of the image, at most (issue 19: producer, consumer and
/// ring in 32 KiB).
const RAM_BUDGET: u64 = 32 * 1024;

#[test]
fn downlink_firmware_receives_commands_and_resumes_after_a_restart() {
    require_qemu();
    let image = build_firmware(Some("downlink"));
    prefetch(VERSION).expect("fetch the RocketMQ jars before leaving the network");
    netns::run_inner("inner_downlink_in_netns", &[(IMAGE_ENV, &image)]);
}

/// What one boot reported so far.
#[derive(Default, Debug)]
struct Seen {
    /// `CMD` lines: (queue, offset, body).
    cmds: Vec<(i32, i64, String)>,
    /// Last `COMMIT` per queue.
    committed: BTreeMap<i32, i64>,
    owned: usize,
    /// `OK` lines (telemetry stored): msgId per seq.
    stored: BTreeMap<u32, String>,
    stats: BTreeMap<String, u64>,
    exited: bool,
}

/// Reads the firmware's lines until `done` holds (or panics after `limit`).
fn watch(
    fw: &mut Firmware,
    seen: &mut Seen,
    limit: Duration,
    what: &str,
    done: impl Fn(&Seen) -> bool,
) {
    let start = Instant::now();
    while !done(seen) {
        let line = match fw.lines.recv_timeout(Duration::from_millis(100)) {
            Ok(l) => l,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                assert!(
                    start.elapsed() < limit,
                    "{what}: not done after {limit:?}: {} commands, committed {:?}, owned {}",
                    seen.cmds.len(),
                    seen.committed,
                    seen.owned
                );
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                seen.exited = true;
                assert!(done(seen), "{what}: the firmware ended first");
                return;
            }
        };
        eprintln!("firmware {:6.1}s: {line}", start.elapsed().as_secs_f64());
        let w: Vec<&str> = line.splitn(4, ' ').collect();
        match w.as_slice() {
            ["CMD", q, off, body] => {
                seen.cmds
                    .push((q.parse().unwrap(), off.parse().unwrap(), (*body).to_owned()));
            }
            ["COMMIT", q, off] => {
                seen.committed
                    .insert(q.parse().unwrap(), off.parse().unwrap());
            }
            ["OWNED", n] => seen.owned = n.parse().unwrap(),
            ["OK", seq, _queue, rest] => {
                let id = rest.split(' ').nth(1).expect("msgId").to_owned();
                seen.stored.insert(seq.parse().unwrap(), id);
            }
            ["STATS", ..] => {
                for p in line.split(' ').skip(1) {
                    let (k, v) = p.split_once('=').expect("key=value");
                    seen.stats
                        .insert(k.to_owned(), v.parse().expect("a number"));
                }
            }
            ["FAIL" | "ERR", ..] => panic!("{what}: {line}"),
            _ => {}
        }
    }
}

fn send(cluster: &Cluster, count: u64, tag: &str) -> Vec<SendLine> {
    let lines = JavaProducer::new(COMMANDS, count)
        .body(&format!("{{\"cmd\":\"{tag}\",\"n\":{{i}}}}"))
        .tags(tag)
        .run(cluster)
        .expect("java producer");
    assert_eq!(lines.len() as u64, count);
    assert!(lines.iter().all(|l| l.status == "SEND_OK"), "{lines:?}");
    lines
}

/// What Java sent, by (queue, offset).
type Sent = BTreeMap<(i32, i64), String>;

fn record(sent: &mut Sent, lines: &[SendLine], tag: &str) {
    for l in lines {
        let k = (l.queue_id.unwrap(), l.queue_offset.unwrap());
        let body = format!("{{\"cmd\":\"{tag}\",\"n\":{}}}", l.index);
        assert!(sent.insert(k, body).is_none());
    }
}

/// Every delivered command is one Java sent, once per boot, each queue in order.
fn check(cmds: &[(i32, i64, String)], sent: &Sent, what: &str) {
    let mut last: BTreeMap<i32, i64> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for (q, off, body) in cmds {
        let want = sent
            .get(&(*q, *off))
            .unwrap_or_else(|| panic!("{what}: ({q}, {off}) was never sent"));
        assert_eq!(body, want, "{what}: body at ({q}, {off})");
        assert!(
            seen.insert((*q, *off)),
            "{what}: ({q}, {off}) delivered twice"
        );
        if let Some(prev) = last.insert(*q, *off) {
            assert!(prev < *off, "{what}: queue {q} out of order");
        }
    }
}

fn ends(sent: &Sent) -> BTreeMap<i32, i64> {
    let mut e = BTreeMap::new();
    for (q, off) in sent.keys() {
        let v = e.entry(*q).or_insert(0);
        *v = (*v).max(off + 1);
    }
    e
}

fn args(ns: &str, cmds: usize) -> Vec<String> {
    vec![
        format!("ns={ns}"),
        "n=20".to_owned(),
        format!("topic={TELEMETRY}"),
        "hdr=json".to_owned(),
        "rate=10".to_owned(),
        format!("cmds={cmds}"),
        format!("cmdtopic={COMMANDS}"),
    ]
}

#[test]
#[ignore = "runs inside `unshare -n`, started by downlink_firmware_receives_commands_and_resumes_after_a_restart"]
fn inner_downlink_in_netns() {
    if !netns::is_inner() {
        eprintln!("not inside the test namespace; run the outer test instead");
        return;
    }
    let image = std::env::var(IMAGE_ENV).expect("image path");
    netns::setup_tap("tap0");
    let cluster = Cluster::start(VERSION, ClusterOptions::default()).expect("cluster start");
    cluster.create_topic(COMMANDS, 4).expect("create topic");
    cluster.create_topic(TELEMETRY, 4).expect("create topic");
    let ns = cluster.namesrv_addr().to_string();
    let minute = Duration::from_secs(60);

    // First boot: takes the 4 queues, receives 100 commands, commits them.
    let mut fw = Firmware::start(&image, &args(&ns, 1_000_000), false);
    let mut one = Seen::default();
    watch(&mut fw, &mut one, minute, "rebalance", |s| s.owned == 4);
    let mut sent = Sent::new();
    let t = Instant::now();
    record(&mut sent, &send(&cluster, 100, "set"), "set");
    watch(&mut fw, &mut one, minute, "first 100", |s| {
        s.cmds.len() >= 100
    });
    eprintln!(
        "100 commands received {:?} after Java began sending",
        t.elapsed()
    );
    check(&one.cmds, &sent, "first boot");
    assert_eq!(one.cmds.len(), 100);
    let e = ends(&sent);
    watch(&mut fw, &mut one, minute, "commits", |s| {
        e.iter().all(|(q, end)| s.committed.get(q) >= Some(end))
    });
    // Its telemetry went out meanwhile, on the same connections.
    watch(&mut fw, &mut one, minute, "telemetry", |s| {
        s.stored.len() == 20
    });
    let up = verifier_read(&cluster, TELEMETRY, 20, Duration::from_secs(5)).expect("verifier");
    let ids: BTreeSet<&str> = up.iter().map(|m| m.msg_id.as_str()).collect();
    assert_eq!(ids, one.stored.values().map(String::as_str).collect());

    // 50 more; the firmware is killed as soon as it has them.
    record(&mut sent, &send(&cluster, 50, "reboot"), "reboot");
    watch(&mut fw, &mut one, minute, "next 50", |s| {
        s.cmds.len() >= 150
    });
    drop(fw);
    check(&one.cmds, &sent, "first boot");
    let committed = one.committed.clone();
    eprintln!("killed; last commits reported {committed:?}");

    // Second boot: resumes at the committed offsets.
    let e = ends(&sent);
    let mut fw = Firmware::start(&image, &args(&ns, 1_000_000), false);
    let mut two = Seen::default();
    watch(&mut fw, &mut two, minute, "resume", |s| {
        s.owned == 4
            && e.iter().all(|(q, end)| {
                let last = s.cmds.iter().filter(|c| c.0 == *q).map(|c| c.1 + 1).max();
                last == Some(*end) || s.committed.get(q) >= Some(end)
            })
    });
    let settle = Instant::now();
    watch(&mut fw, &mut two, Duration::from_secs(10), "settle", |_| {
        settle.elapsed() > Duration::from_secs(2)
    });
    check(&two.cmds, &sent, "second boot");
    let first: BTreeSet<(i32, i64)> = one.cmds.iter().map(|c| (c.0, c.1)).collect();
    let mut again = 0;
    for (q, end) in &e {
        let offs: Vec<i64> = two.cmds.iter().filter(|c| c.0 == *q).map(|c| c.1).collect();
        let start = offs.first().copied().unwrap_or(*end);
        let floor = committed.get(q).copied().unwrap_or(0);
        assert!(
            start >= floor,
            "queue {q}: resumed at {start}, below the commit {floor}"
        );
        let want: Vec<i64> = sent
            .keys()
            .filter(|(sq, o)| sq == q && *o >= start)
            .map(|k| k.1)
            .collect();
        assert_eq!(offs, want, "queue {q}: everything from {start} on, once");
        for (sq, o) in sent.keys().filter(|(sq, o)| sq == q && *o < start) {
            assert!(first.contains(&(*sq, *o)), "({sq}, {o}) lost");
        }
        again += offs.len();
    }
    eprintln!("second boot: {again} commands delivered again (after the last commit)");
    drop(fw);

    // Third boot: 10 new commands, then a clean stop (final commit) and the figures.
    let mut fw = Firmware::start(&image, &args(&ns, 10), false);
    let mut three = Seen::default();
    watch(&mut fw, &mut three, minute, "third boot", |s| s.owned == 4);
    record(&mut sent, &send(&cluster, 10, "last"), "last");
    watch(
        &mut fw,
        &mut three,
        Duration::from_secs(120),
        "clean stop",
        |s| s.exited,
    );
    let status = fw.child.wait().expect("qemu exit status");
    assert!(
        status.success(),
        "the firmware exits with status 0: {status}"
    );
    check(&three.cmds, &sent, "third boot");
    let s = &three.stats;
    assert_eq!(s.get("cmds").copied(), Some(three.cmds.len() as u64));
    assert!(three.cmds.len() >= 10);
    let (stack, ram) = (s["stack"], s["static_ram"]);
    eprintln!(
        "QEMU-FIGURES downlink (producer, consumer and a 200-message outbox on one client): \
         stack high-water {stack} B; static RAM {ram} B; RAM total {} B (issue 19 budget {RAM_BUDGET})",
        stack + ram
    );
    assert!(
        stack + ram <= RAM_BUDGET,
        "downlink image: static RAM {ram} B + stack {stack} B exceeds {RAM_BUDGET} B"
    );
}
