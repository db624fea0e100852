//! The telemetry firmware (`runtime-smoltcp/firmware`) executing on an emulated Cortex-M4F
//! against the real broker.
//!
//! The outer test builds the firmware for `thumbv7em-none-eabihf` twice (JSON headers, and
//! ROCKETMQ headers with the `rocketmq-headers` feature), fetches the jars, then re-runs this
//! test binary inside a new network namespace (`unshare -n`). Inside: `lo` and a TAP device
//! `tap0` (169.254.1.1/16, `route_localnet`; `tests/netns/tap.sh`), the real NameServer and
//! broker on 127.0.0.1, and QEMU's `mps2-an386` board (Cortex-M4 with FPU) whose emulated
//! SMSC LAN9118 NIC is attached to `tap0`. The firmware (169.254.1.2) drives its own LAN9118
//! driver (`rmq-lan9118`), smoltcp and `rmq_smoltcp::Producer`, and reports every message's
//! outcome over semihosting.
//!
//! - Both images, 1,000 messages each to their own topic, undisturbed: all stored, and the Java
//!   verifier reads every one back exactly once with the body, keys, tags, msgId, offsetMsgId,
//!   queue and offset the firmware reported.
//! - JSON image, 1,000 messages to a third topic; when half are stored, the broker is killed
//!   (`kill -9`) and restarted. The firmware recovers by itself; every message has exactly one
//!   reported outcome (stored, or failed with an error), every stored one is read back as
//!   above, and a failed one at most once (its answer may have been lost after the broker
//!   stored it).
//! - Then against a 4.9.7 NameServer and broker: the JSON image, 200 messages.
//! - The store-and-forward image (firmware feature `store-forward`, its own test and
//!   namespace): telemetry generated at 10 messages/s into a 200-message outbox that drops the
//!   oldest; the TAP link goes down for 30 s after 100 messages are stored, and the backlog
//!   leaves in batches of up to 8 (SEND_BATCH_MESSAGE) when it is back; in a second run, one
//!   message per request, the broker is killed and restarted. No message fails for good, the stored ones are
//!   stored in generation order (commit-log offsets rise with the sequence number) and read
//!   back as above, and the messages the firmware reported dropped are exactly those the
//!   verifier does not see. These runs use the host's clock in the guest (no `-icount`), so
//!   that 30 s of outage are 30 s of generated telemetry.
//!
//! Each run prints the firmware's figures (instructions per message under `-icount shift=0`,
//! stack high-water, static RAM), and the test fails if static RAM plus the measured stack
//! exceeds the 24 KiB budget, 32 KiB for the store-and-forward image (flash is checked by
//! `runtime-smoltcp/firmware/size.sh`).
//! Needs root (for `unshare -n` and the TAP device), `qemu-system-arm`, the thumbv7em rustup
//! target, a JDK and Maven.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gateway::qemu::{Firmware, build_firmware, require_qemu};
use rmq_tests::broker::{Cluster, ClusterOptions, Version, prefetch, verifier_read};
use rmq_tests::netns;

mod gateway;

const JSON_IMAGE_ENV: &str = "RMQ_QEMU_IMAGE_JSON";
const ROCKETMQ_IMAGE_ENV: &str = "RMQ_QEMU_IMAGE_ROCKETMQ";
const VERSION: Version = Version::V5_3_3;
/// Static RAM plus stack high-water, at most (issue 18).
const RAM_BUDGET: u64 = 24 * 1024;
const STORE_FORWARD_IMAGE_ENV: &str = "RMQ_QEMU_IMAGE_STORE_FORWARD";
/// The same for the store-and-forward image (issue 19: producer, consumer and ring).
const RAM_BUDGET_V2: u64 = 32 * 1024;

#[test]
fn firmware_in_qemu_publishes_to_the_real_broker() {
    require_qemu();
    let json = build_firmware(None);
    let rocketmq = build_firmware(Some("rocketmq-headers"));
    for v in [VERSION, Version::V4_9] {
        prefetch(v).expect("fetch the RocketMQ jars before leaving the network");
    }
    netns::run_inner(
        "inner_firmware_in_netns",
        &[(JSON_IMAGE_ENV, &json), (ROCKETMQ_IMAGE_ENV, &rocketmq)],
    );
}

/// The body the firmware sends as message `seq`.
fn body(seq: u32) -> String {
    format!(
        "{{\"gateway\":\"gw-1\",\"seq\":{seq},\"temp\":{}.{},\"humidity\":{}}}",
        20 + seq % 7,
        seq % 10,
        40 + seq % 13
    )
}

/// The body the store-and-forward image sends as message `seq` (its outbox stores it).
fn compact_body(seq: u32) -> String {
    format!(
        "{{\"seq\":{seq},\"t\":{}.{},\"h\":{}}}",
        20 + seq % 7,
        seq % 10,
        40 + seq % 13
    )
}

/// One line of the firmware's report.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Stored {
        queue_id: i32,
        queue_offset: i64,
        msg_id: String,
        offset_msg_id: String,
        warn: bool,
    },
    Failed(String),
    /// The store-and-forward image's outbox dropped it to make room (`DROP`).
    Dropped,
}

/// What a run reported.
struct Report {
    outcomes: BTreeMap<u32, Outcome>,
    stats: BTreeMap<String, u64>,
    /// Messages the store-and-forward image kept for another try (`RETRY`), with how often.
    retried: BTreeMap<u32, u32>,
    /// The body the image sends as a message.
    body: fn(u32) -> String,
    /// Whether QEMU counted instructions (the `instr` figures mean something).
    icount: bool,
}

/// Runs `image` publishing `count` messages to `topic` (with `extra` parameters); `at` runs
/// once `at_stored` of them are stored (while the firmware keeps going).
fn run(
    cluster: &mut Cluster,
    image: &str,
    topic: &str,
    count: u32,
    extra: &[&str],
    at_stored: u32,
    mut at: impl FnMut(&mut Cluster),
) -> Report {
    let ns = cluster.namesrv_addr();
    let hdr = if image.contains("rocketmq-headers") {
        "rocketmq"
    } else {
        "json"
    };
    let mut args = vec![
        format!("ns={ns}"),
        format!("n={count}"),
        format!("topic={topic}"),
        format!("hdr={hdr}"),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    // The store-and-forward image runs at a message rate on the guest's clock, with outages on
    // the host's: the two clocks must agree.
    let store_forward = image.contains("store-forward");
    let mut fw = Firmware::start(image, &args, !store_forward);
    let mut outcomes = BTreeMap::new();
    let mut stats = BTreeMap::new();
    let mut retried = BTreeMap::new();
    let (mut stored, mut triggered) = (0, false);
    let start = Instant::now();
    // Generous: under -icount the guest's timers follow executed instructions.
    let limit = Duration::from_secs(300);
    loop {
        let left = limit.saturating_sub(start.elapsed());
        let line = match fw.lines.recv_timeout(left) {
            Ok(l) => l,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("no report from the firmware for {limit:?}: {outcomes:?}")
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        eprintln!("firmware {:6.1}s: {line}", start.elapsed().as_secs_f64());
        let w: Vec<&str> = line.split(' ').collect();
        match w.as_slice() {
            [tag @ ("OK" | "WARN"), seq, q, off, id, oid, _broker, ..] => {
                let seq: u32 = seq.parse().unwrap();
                let o = Outcome::Stored {
                    queue_id: q.parse().unwrap(),
                    queue_offset: off.parse().unwrap(),
                    msg_id: (*id).to_owned(),
                    offset_msg_id: (*oid).to_owned(),
                    warn: *tag == "WARN",
                };
                assert!(outcomes.insert(seq, o).is_none(), "two outcomes for {seq}");
                stored += 1;
            }
            ["FAIL", seq, cause @ ..] => {
                let seq: u32 = seq.parse().unwrap();
                let o = Outcome::Failed(cause.join(" "));
                assert!(outcomes.insert(seq, o).is_none(), "two outcomes for {seq}");
            }
            ["DROP", seq] => {
                let seq: u32 = seq.parse().unwrap();
                let o = Outcome::Dropped;
                assert!(outcomes.insert(seq, o).is_none(), "two outcomes for {seq}");
            }
            ["RETRY", seq, ..] => {
                let seq: u32 = seq.parse().unwrap();
                assert!(
                    !outcomes.contains_key(&seq),
                    "{seq} retried after its outcome"
                );
                *retried.entry(seq).or_insert(0) += 1;
            }
            ["STATS", kv @ ..] => {
                for p in kv {
                    let (k, v) = p.split_once('=').expect("key=value");
                    stats.insert(k.to_owned(), v.parse().expect("a number"));
                }
            }
            ["ERR", ..] => panic!("the firmware refused to run: {line}"),
            _ => {}
        }
        if !triggered && stored >= at_stored {
            triggered = true;
            at(cluster);
        }
    }
    let status = fw.child.wait().expect("qemu exit status");
    assert!(
        status.success(),
        "the firmware exits with semihosting status 0: {status}"
    );
    assert!(!stats.is_empty(), "no STATS line");
    let seqs: Vec<u32> = outcomes.keys().copied().collect();
    assert_eq!(
        seqs,
        (0..count).collect::<Vec<_>>(),
        "exactly one outcome per message"
    );
    let body = if store_forward { compact_body } else { body };
    Report {
        outcomes,
        stats,
        retried,
        body,
        icount: !store_forward,
    }
}

/// Reads the topic back with the official Java client and checks it against the report.
fn verify(cluster: &Cluster, topic: &str, r: &Report) {
    let stored = r
        .outcomes
        .values()
        .filter(|o| matches!(o, Outcome::Stored { .. }))
        .count();
    let got = verifier_read(cluster, topic, stored, Duration::from_secs(5)).expect("verifier");
    let mut by_seq: BTreeMap<u32, _> = BTreeMap::new();
    let mut twice = Vec::new();
    for m in &got {
        let key = m.keys.as_deref().expect("KEYS");
        let seq: u32 = key.strip_prefix("seq-").unwrap().parse().unwrap();
        // The copy the firmware reported wins; another is only possible when an attempt's
        // answer was lost after the broker stored it, and that attempt was then retried.
        let reported = |m: &&rmq_tests::broker::VerifiedMessage| {
            matches!(r.outcomes.get(&seq), Some(Outcome::Stored { offset_msg_id, .. })
                if *offset_msg_id == m.offset_msg_id)
        };
        match by_seq.insert(seq, m) {
            None => {}
            Some(old) => {
                assert!(
                    r.retried.contains_key(&seq),
                    "message {seq} stored twice without a retry"
                );
                twice.push(seq);
                if reported(&old) {
                    by_seq.insert(seq, old);
                }
            }
        }
    }
    if !twice.is_empty() {
        eprintln!("{topic}: stored twice (an answer lost, then retried): {twice:?}");
    }
    for (seq, o) in &r.outcomes {
        let m = by_seq.get(seq);
        match o {
            Outcome::Stored {
                queue_id,
                queue_offset,
                msg_id,
                offset_msg_id,
                warn,
            } => {
                assert!(
                    !warn,
                    "message {seq} stored with a status other than SEND_OK"
                );
                let m = m.unwrap_or_else(|| panic!("message {seq} reported stored but missing"));
                assert_eq!(m.topic, topic);
                assert_eq!(m.body, (r.body)(*seq).as_bytes(), "body of message {seq}");
                assert_eq!(m.tags.as_deref(), Some("telemetry"));
                assert_eq!(&m.msg_id, msg_id, "UNIQ_KEY of message {seq}");
                // `-`: a later message of a batch (its answer keeps only the first's).
                if offset_msg_id != "-" {
                    assert_eq!(&m.offset_msg_id, offset_msg_id);
                }
                assert_eq!((m.queue_id, m.queue_offset), (*queue_id, *queue_offset));
                assert!(m.born_host.starts_with("169.254.1.2"), "{}", m.born_host);
            }
            Outcome::Failed(_) => {
                // Its answer may have been lost after the broker stored it: at most once
                // (checked above), with the right body.
                if let Some(m) = m {
                    assert_eq!(m.body, (r.body)(*seq).as_bytes());
                }
            }
            Outcome::Dropped => assert!(m.is_none(), "message {seq} dropped but stored"),
        }
    }
    let reported: BTreeSet<u32> = r.outcomes.keys().copied().collect();
    for seq in by_seq.keys() {
        assert!(
            reported.contains(seq),
            "message {seq} stored but never reported"
        );
    }
}

fn print_figures(what: &str, r: &Report, budget: u64) {
    let s = &r.stats;
    let stack = s.get("stack").copied().expect("stack high-water");
    let ram = s.get("static_ram").copied().expect("static RAM");
    let instr = match s.get("instr_per_msg") {
        Some(i) if r.icount => format!("{i} instructions per message"),
        _ => "no instruction count (real-time clock)".to_owned(),
    };
    eprintln!(
        "QEMU-FIGURES {what}: {} messages, {} stored; {instr}; \
         stack high-water {stack} B; static RAM {ram} B; RAM total {} B (budget {budget})",
        r.outcomes.len(),
        s.get("ok").copied().unwrap_or(0),
        stack + ram
    );
    assert!(
        stack + ram <= budget,
        "{what}: static RAM {ram} B + stack {stack} B exceeds {budget} B"
    );
}

#[test]
#[ignore = "runs inside `unshare -n`, started by firmware_in_qemu_publishes_to_the_real_broker"]
fn inner_firmware_in_netns() {
    if !netns::is_inner() {
        eprintln!("not inside the test namespace; run the outer test instead");
        return;
    }
    let json = std::env::var(JSON_IMAGE_ENV).expect("image path");
    let rocketmq = std::env::var(ROCKETMQ_IMAGE_ENV).expect("image path");
    netns::setup_tap("tap0");
    let t0 = Instant::now();
    let mut cluster = Cluster::start(VERSION, ClusterOptions::default()).expect("cluster start");
    for t in ["Telemetry", "TelemetryBin", "TelemetryKill"] {
        cluster.create_topic(t, 4).expect("create topic");
    }
    eprintln!("cluster ready in {:?}", t0.elapsed());

    // Undisturbed runs of both header types: the figures.
    for (image, topic, what) in [
        (&json, "Telemetry", "JSON headers"),
        (&rocketmq, "TelemetryBin", "ROCKETMQ headers"),
    ] {
        let t = Instant::now();
        let r = run(&mut cluster, image, topic, 1000, &[], 0, |_| {});
        eprintln!("{what}: 1000 outcomes in {:?}", t.elapsed());
        let failed: Vec<_> = r
            .outcomes
            .iter()
            .filter(|(_, o)| !matches!(o, Outcome::Stored { .. }))
            .collect();
        assert!(
            failed.is_empty(),
            "{what}: every message stored: {failed:?}"
        );
        verify(&cluster, topic, &r);
        print_figures(what, &r, RAM_BUDGET);
    }

    // JSON headers, with the broker killed and restarted mid-stream.
    let t = Instant::now();
    let r = run(&mut cluster, &json, "TelemetryKill", 1000, &[], 500, |c| {
        c.kill9_broker(0);
        let t = Instant::now();
        c.restart_broker(0).expect("broker restart");
        eprintln!("broker killed and restarted in {:?}", t.elapsed());
    });
    let failed = r
        .outcomes
        .values()
        .filter(|o| matches!(o, Outcome::Failed(_)))
        .count();
    eprintln!(
        "broker restart run: 1000 outcomes in {:?}, {failed} failed while the broker was down",
        t.elapsed()
    );
    assert!(failed >= 1, "a send failed while the broker was down");
    let recovered = r
        .outcomes
        .values()
        .rev()
        .take(100)
        .all(|o| matches!(o, Outcome::Stored { .. }));
    assert!(
        recovered,
        "the last 100 messages are stored: the firmware recovered"
    );
    verify(&cluster, "TelemetryKill", &r);
    print_figures("JSON headers, broker restarted", &r, RAM_BUDGET);
    drop(cluster);

    // The 4.9 line (4.9.7 server jars): the JSON image, undisturbed.
    let mut cluster =
        Cluster::start(Version::V4_9, ClusterOptions::default()).expect("4.9 cluster");
    cluster.create_topic("Telemetry", 4).expect("create topic");
    let r = run(&mut cluster, &json, "Telemetry", 200, &[], 0, |_| {});
    assert!(
        r.outcomes
            .values()
            .all(|o| matches!(o, Outcome::Stored { .. })),
        "4.9: every message stored: {:?}",
        r.outcomes
    );
    verify(&cluster, "Telemetry", &r);
    print_figures("JSON headers, 4.9.7 broker", &r, RAM_BUDGET);
}

#[test]
fn store_and_forward_firmware_rides_out_outages() {
    require_qemu();
    let image = build_firmware(Some("store-forward"));
    prefetch(VERSION).expect("fetch the RocketMQ jars before leaving the network");
    netns::run_inner(
        "inner_store_and_forward_in_netns",
        &[(STORE_FORWARD_IMAGE_ENV, &image)],
    );
}

/// The commit-log offset in an offsetMsgId (IPv4: 8 hex digits of address, 8 of port, 16 of
/// offset).
fn commit_offset(offset_msg_id: &str) -> u64 {
    let hex = &offset_msg_id[offset_msg_id.len() - 16..];
    u64::from_str_radix(hex, 16).expect("offsetMsgId")
}

/// Checks a store-and-forward run: every message stored or dropped by the outbox (none failed),
/// stored ones in generation order (commit-log offsets rise with seq), and the verifier misses
/// exactly the dropped ones. Returns the number dropped.
fn check_store_forward(cluster: &Cluster, topic: &str, r: &Report) -> usize {
    let failed: Vec<_> = r
        .outcomes
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Failed(_)))
        .collect();
    assert!(failed.is_empty(), "no message fails for good: {failed:?}");
    let mut last = None;
    for (seq, o) in &r.outcomes {
        if let Outcome::Stored { offset_msg_id, .. } = o
            && offset_msg_id != "-"
        {
            let off = commit_offset(offset_msg_id);
            assert!(
                last.is_none_or(|(_, l)| l < off),
                "message {seq} stored before {last:?} (commit-log offset {off})"
            );
            last = Some((*seq, off));
        }
    }
    verify(cluster, topic, r);
    let dropped = r
        .outcomes
        .values()
        .filter(|o| matches!(o, Outcome::Dropped))
        .count();
    assert_eq!(
        r.stats.get("dropped").copied(),
        Some(dropped as u64),
        "the firmware's dropped count is its DROP lines"
    );
    dropped
}

#[test]
#[ignore = "runs inside `unshare -n`, started by store_and_forward_firmware_rides_out_outages"]
fn inner_store_and_forward_in_netns() {
    if !netns::is_inner() {
        eprintln!("not inside the test namespace; run the outer test instead");
        return;
    }
    let image = std::env::var(STORE_FORWARD_IMAGE_ENV).expect("image path");
    netns::setup_tap("tap0");
    let mut cluster = Cluster::start(VERSION, ClusterOptions::default()).expect("cluster start");
    for t in ["TelemetryOutage", "TelemetryRestart"] {
        cluster.create_topic(t, 4).expect("create topic");
    }
    // 10 messages/s into a 200-message outbox; a retry waits 500 ms; the backlog leaves in
    // batches of up to 8 after the outage (one message per request after the restart).
    let extra = ["rate=10", "backoff=500", "batch=8"];

    // The uplink goes down for 30 s after 100 messages are stored: 300 are generated meanwhile.
    let t = Instant::now();
    let mut outage = None;
    let r = run(
        &mut cluster,
        &image,
        "TelemetryOutage",
        700,
        &extra,
        100,
        |_| {
            let ip = |state: &str| {
                let st = Command::new("ip")
                    .args(["link", "set", "tap0", state])
                    .status()
                    .expect("run ip");
                assert!(st.success(), "ip link set tap0 {state}");
            };
            ip("down");
            eprintln!("tap0 down");
            outage = Some(std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(30));
                ip("up");
                eprintln!("tap0 up");
            }));
        },
    );
    outage
        .expect("the link went down")
        .join()
        .expect("link up again");
    let dropped = check_store_forward(&cluster, "TelemetryOutage", &r);
    eprintln!(
        "link outage: 700 messages in {:?}, {dropped} dropped by the outbox, {} retries, peak {}",
        t.elapsed(),
        r.retried.values().sum::<u32>(),
        r.stats.get("peak").copied().unwrap_or(0)
    );
    assert!(
        dropped > 0 && !r.retried.is_empty(),
        "a 30 s outage at 10 msgs/s overflows a 200-message outbox"
    );
    let batched = r
        .outcomes
        .values()
        .filter(|o| matches!(o, Outcome::Stored { offset_msg_id, .. } if offset_msg_id == "-"))
        .count();
    assert!(batched > 0, "the backlog left in batches");
    print_figures("store-and-forward, link down 30 s", &r, RAM_BUDGET_V2);

    // The broker is killed and restarted after 100 messages are stored.
    let t = Instant::now();
    let extra = ["rate=10", "backoff=500"];
    let r = run(
        &mut cluster,
        &image,
        "TelemetryRestart",
        400,
        &extra,
        100,
        |c| {
            c.kill9_broker(0);
            c.restart_broker(0).expect("broker restart");
        },
    );
    let dropped = check_store_forward(&cluster, "TelemetryRestart", &r);
    eprintln!(
        "broker restart: 400 messages in {:?}, {dropped} dropped, {} retries, peak {}",
        t.elapsed(),
        r.retried.values().sum::<u32>(),
        r.stats.get("peak").copied().unwrap_or(0)
    );
    assert!(
        !r.retried.is_empty(),
        "sends failed while the broker was down"
    );
    print_figures("store-and-forward, broker restarted", &r, RAM_BUDGET_V2);
}
