//! The smoltcp gateway against the real broker, over a real TAP device.
//!
//! The outer test (run by `cargo test`) fetches the jars, then re-runs this test binary inside
//! a new network namespace (`unshare -n`) to execute the inner test. Inside: `lo` and a TAP
//! device `tap0` (169.254.1.1/16, `route_localnet`; see `tests/netns/tap.sh`), the real
//! NameServer and broker on 127.0.0.1, and a smoltcp interface on the TAP (169.254.1.2, default
//! route via 169.254.1.1) driving `rmq_smoltcp::Producer`. The gateway publishes 1,000
//! telemetry messages; halfway through, the broker is killed (`kill -9`): a send fails with a
//! retryable transport error, the broker is restarted, and the gateway reconnects and publishes
//! the rest. The Java verifier reads them back and every one must be there exactly once, with
//! the body, keys, tags, UNIQ_KEY, queue and offset the gateway was told.
//! Needs root (for `unshare -n` and the TAP device), a JDK and Maven, like the other
//! real-broker tests.

mod gateway;

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use gateway::body;
use rmq_core::retry::{SendErrorKind, SendStatus};
use rmq_core::time::Instant;
use rmq_smoltcp::{Message, SendFailure, SendReceipt};
use rmq_tests::broker::{Cluster, ClusterOptions, Version, prefetch, verifier_read};
use rmq_tests::netns;
use smoltcp::iface::SocketSet;
use smoltcp::phy::{Medium, TunTapInterface, wait as phy_wait};

const VERSION: Version = Version::V4_9;
const TOPIC: &str = "SmolTelemetry";
const COUNT: usize = 1000;

#[test]
fn smoltcp_gateway_publishes_1000_messages_over_a_tap_device() {
    prefetch(VERSION).expect("fetch the RocketMQ jars before leaving the network");
    netns::run_inner("inner_gateway_in_netns", &[]);
}

#[test]
#[ignore = "runs inside `unshare -n`, started by smoltcp_gateway_publishes_1000_messages_over_a_tap_device"]
fn inner_gateway_in_netns() {
    if !netns::is_inner() {
        eprintln!("not inside the test namespace; run the outer test instead");
        return;
    }
    netns::setup_tap("tap0");
    let t0 = StdInstant::now();
    let mut cluster = Cluster::start(VERSION, ClusterOptions::default()).expect("cluster start");
    cluster.create_topic(TOPIC, 4).expect("create topic");
    eprintln!("cluster ready in {:?}", t0.elapsed());

    let mut dev = TunTapInterface::new("tap0", Medium::Ethernet).expect("open tap0");
    let fd = dev.as_raw_fd();
    let clock = StdInstant::now();
    let now = || Instant::from_millis(clock.elapsed().as_millis() as u64);
    let mut iface = gateway::iface(&mut dev, 7, now().millis());
    let mut sockets = SocketSet::new(vec![]);
    let mut p = gateway::producer(&cluster, &mut sockets, "smol-gateway", TOPIC, 4096, 1024);
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    p.set_unix_time(now(), unix_ms);

    // The core's SendFailure carries the broker's remark inline (no heap on a gateway).
    #[allow(clippy::result_large_err)]
    let mut send_one = |i: usize| -> Result<SendReceipt, SendFailure> {
        let b = body(i);
        let key = format!("seq-{i}");
        let msg = Message {
            body: b.as_bytes(),
            tags: Some("telemetry"),
            keys: Some(&key),
            flag: 0,
        };
        let deadline = StdInstant::now() + StdDuration::from_secs(30);
        while !p.can_send() {
            assert!(
                StdInstant::now() < deadline,
                "producer stuck: {:?}",
                p.stats()
            );
            p.poll(now(), &mut iface, &mut dev, &mut sockets);
            phy_wait(fd, Some(smoltcp::time::Duration::from_millis(5))).unwrap();
        }
        let id = p.send(now(), &msg).expect("submit");
        loop {
            assert!(
                StdInstant::now() < deadline,
                "send {i} never completed: {:?}",
                p.stats()
            );
            let t = now();
            let wake = p.poll(t, &mut iface, &mut dev, &mut sockets);
            if let Some(c) = p.take_completion() {
                assert_eq!(c.id, id);
                return c.result;
            }
            let delay_ms = wake.map_or(50, |w| w.millis().saturating_sub(t.millis()).min(50));
            if delay_ms > 0 {
                phy_wait(fd, Some(smoltcp::time::Duration::from_millis(delay_ms))).unwrap();
            }
        }
    };

    let mut receipts: Vec<SendReceipt> = Vec::with_capacity(COUNT);
    let t_send = StdInstant::now();
    for i in 0..COUNT / 2 {
        let r = send_one(i).unwrap_or_else(|e| panic!("message {i} failed: {e}"));
        assert_eq!(r.status, SendStatus::SendOk);
        receipts.push(r);
    }
    let first_half = t_send.elapsed();

    // The broker goes away (kill -9) and comes back on the same address.
    cluster.kill9_broker(0);
    match send_one(COUNT / 2) {
        Err(SendFailure::Plan { error: e, .. }) => {
            assert!(e.is_retryable(), "{e}");
            assert!(
                matches!(e.kind(), SendErrorKind::Transport(_)),
                "a dead broker is a transport failure: {e}"
            );
        }
        other => panic!("a send to a killed broker must fail, got {other:?}"),
    }
    let t_restart = StdInstant::now();
    cluster.restart_broker(0).expect("broker restart");
    eprintln!("broker restarted in {:?}", t_restart.elapsed());
    let t_second = StdInstant::now();
    for i in COUNT / 2..COUNT {
        let r = send_one(i).unwrap_or_else(|e| panic!("message {i} failed after the restart: {e}"));
        assert_eq!(r.status, SendStatus::SendOk);
        receipts.push(r);
    }
    let st = p.stats();
    eprintln!(
        "gateway published {COUNT} messages: first {} in {first_half:?}, last {} in {:?} after the restart; {st:?}",
        COUNT / 2,
        COUNT - COUNT / 2,
        t_second.elapsed()
    );
    assert!(
        st.connects >= 3,
        "a new broker connection after the restart: {st:?}"
    );

    let got = verifier_read(&cluster, TOPIC, COUNT, StdDuration::from_secs(5)).expect("verifier");
    assert_eq!(got.len(), COUNT, "the verifier read {} messages", got.len());
    let mut by_seq: BTreeMap<usize, _> = BTreeMap::new();
    for m in &got {
        let key = m.keys.as_deref().expect("KEYS");
        let seq: usize = key.strip_prefix("seq-").unwrap().parse().unwrap();
        assert!(
            by_seq.insert(seq, m).is_none(),
            "message {seq} stored twice"
        );
    }
    for (i, r) in receipts.iter().enumerate() {
        let m = by_seq
            .get(&i)
            .unwrap_or_else(|| panic!("message {i} missing"));
        assert_eq!(m.topic, TOPIC);
        assert_eq!(m.body, body(i).as_bytes(), "body of message {i}");
        assert_eq!(m.tags.as_deref(), Some("telemetry"));
        assert_eq!(m.msg_id, r.msg_id.as_str(), "UNIQ_KEY of message {i}");
        assert_eq!(m.offset_msg_id, r.offset_msg_id.as_str());
        assert_eq!(m.queue_id, r.queue_id);
        assert_eq!(Some(m.queue_offset), r.queue_offset);
        assert!(m.born_host.starts_with("169.254.1.2"), "{}", m.born_host);
    }
    let queues: std::collections::BTreeSet<i32> = got.iter().map(|m| m.queue_id).collect();
    assert_eq!(queues.len(), 4, "round robin over the 4 queues");
}
