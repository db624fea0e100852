//! Downlink: the smoltcp gateway's consumer against the real broker, over a real TAP device
//! (inside `unshare -n`, as `smoltcp_real.rs`).
//!
//! The official Java producer sends 100 commands to the gateway's topic (4 queues). The
//! gateway's `rmq_smoltcp::Client` (clustering with fixed queues and no heartbeats: its pulls
//! carry the subscription; long polling) must receive each
//! exactly once, in queue order, with the body, tags and keys Java sent, and commit the
//! offsets. Over the same session and connections it publishes 20 telemetry messages, which
//! the Java verifier reads back. Then 50 more commands arrive, are delivered, and the gateway "crashes" (its
//! sockets reset, no final commit). A new consumer with the same client id resumes from the
//! committed offsets: it must deliver exactly the commands at or after the last committed
//! offset of each queue, nothing below it and nothing lost.
//! Needs root (for `unshare -n` and the TAP device), a JDK and Maven.

mod gateway;

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::AsRawFd;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use rmq_core::consumer::ConsumeFromWhere;
use rmq_core::message::keys;
use rmq_core::time::{Duration, Instant};
use rmq_smoltcp::{Buffers, Client, ClientConfig, Message};
use rmq_tests::broker::{
    Cluster, ClusterOptions, JavaProducer, SendLine, Version, prefetch, verifier_read,
};
use rmq_tests::netns;
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::phy::{Medium, TunTapInterface, wait as phy_wait};
use smoltcp::socket::tcp;

const VERSION: Version = Version::V5_3_3;
const TOPIC: &str = "SmolCommands";
const GROUP: &str = "smol-downlink";
const CLIENT_ID: &str = "169.254.1.2@gateway-1";
/// What the same client publishes to.
const UPLINK: &str = "SmolUplink";

/// The gateway's consumer: 1 broker, 16 queues, 256 B of route strings, 8 queues owned,
/// 8 messages in flight per queue.
type Downlink = Client<'static, 'static, 1, 16, 256, 8, 8>;

/// One delivered command.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Got {
    queue_id: i32,
    offset: i64,
    body: String,
    tags: Option<String>,
    keys: Option<String>,
}

struct Rig {
    dev: TunTapInterface,
    iface: Interface,
    sockets: SocketSet<'static>,
    clock: StdInstant,
}

impl Rig {
    fn now(&self) -> Instant {
        Instant::from_millis(self.clock.elapsed().as_millis() as u64)
    }

    fn consumer(&mut self, cluster: &Cluster) -> (Downlink, [SocketHandle; 2]) {
        self.member(cluster, CLIENT_ID)
    }

    /// A consumer of the group with its own client id.
    fn member(
        &mut self,
        cluster: &Cluster,
        client_id: &'static str,
    ) -> (Downlink, [SocketHandle; 2]) {
        let mut sock = || -> SocketHandle {
            self.sockets.add(tcp::Socket::new(
                tcp::SocketBuffer::new(vec![0u8; 8192]),
                tcp::SocketBuffer::new(vec![0u8; 2048]),
            ))
        };
        let (ns, b0) = (sock(), sock());
        let addr = cluster.namesrv_addr();
        let namesrvs: &'static [std::net::SocketAddr] = Box::leak(Box::new([addr]));
        let mut cfg = ClientConfig::new(namesrvs, GROUP, client_id, TOPIC);
        cfg.expression = "cmd || config";
        cfg.consume_from = ConsumeFromWhere::FirstOffset;
        cfg.commit_interval = Duration::from_millis(2000);
        cfg.rebalance_interval = Duration::from_millis(2000);
        cfg.base.version = VERSION.client_version();
        cfg.publish_topic = Some(UPLINK);
        cfg.base.client_ip = [169, 254, 1, 2];
        cfg.base.seed = self.clock.elapsed().subsec_nanos() | 1;
        let bufs = Buffers {
            // Room for the running info the client answers `mqadmin consumerStatus` with.
            tx: gateway::leak(8192),
            rx: gateway::leak(8192),
            message: gateway::leak(1024),
        };
        let now = self.now();
        let mut c = Client::new(cfg, bufs, now, ns, [b0]).expect("consumer config");
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock");
        c.set_unix_time(now, unix.as_millis() as i64);
        (c, [ns, b0])
    }

    /// Polls `c` until `done` says so (or panics after `limit`), collecting deliveries.
    fn run(
        &mut self,
        c: &mut Downlink,
        got: &mut Vec<Got>,
        limit: StdDuration,
        what: &str,
        mut done: impl FnMut(&mut Downlink, &[Got]) -> bool,
    ) {
        let fd = self.dev.as_raw_fd();
        let deadline = StdInstant::now() + limit;
        while !done(c, got) {
            assert!(
                StdInstant::now() < deadline,
                "{what}: not done after {limit:?}; {} delivered; {:?}; {:?}; owned {:?}",
                got.len(),
                c.stats(),
                c.pull_stats(),
                c.owned().collect::<Vec<_>>()
            );
            let t = self.now();
            let wake = self.poll_one(c, got);
            self.wait(fd, t, wake);
        }
    }

    /// One poll of `c`, its deliveries added to `got`; when it wants to be polled again.
    fn poll_one(&mut self, c: &mut Downlink, got: &mut Vec<Got>) -> Option<Instant> {
        let t = self.now();
        c.poll(t, &mut self.iface, &mut self.dev, &mut self.sockets, |d| {
            let m = d.message;
            let props = m.properties().expect("UTF-8 properties");
            got.push(Got {
                queue_id: m.queue_id,
                offset: m.queue_offset,
                body: String::from_utf8(m.body.to_vec()).expect("UTF-8 body"),
                tags: props.get(keys::TAGS).map(str::to_owned),
                keys: props.get(keys::KEYS).map(str::to_owned),
            });
        })
    }

    /// Waits for a frame on the TAP device, until `wake` (at most 20 ms).
    fn wait(&self, fd: i32, t: Instant, wake: Option<Instant>) {
        let ms = wake.map_or(20, |w| w.millis().saturating_sub(t.millis()).min(20));
        if ms > 0 {
            phy_wait(fd, Some(smoltcp::time::Duration::from_millis(ms))).unwrap();
        }
    }

    /// As [`Rig::run`] for two consumers on the same interface.
    #[cfg(feature = "smoltcp-rebalance")]
    fn run_two(
        &mut self,
        c: [&mut Downlink; 2],
        got: &mut [Vec<Got>; 2],
        limit: StdDuration,
        what: &str,
        mut done: impl FnMut([&Downlink; 2], &[Vec<Got>; 2]) -> bool,
    ) {
        let fd = self.dev.as_raw_fd();
        let deadline = StdInstant::now() + limit;
        let [a, b] = c;
        while !done([&*a, &*b], got) {
            assert!(
                StdInstant::now() < deadline,
                "{what}: not done after {limit:?}; delivered {} + {}; owned {:?} and {:?}; {:?}; {:?}",
                got[0].len(),
                got[1].len(),
                a.owned().collect::<Vec<_>>(),
                b.owned().collect::<Vec<_>>(),
                a.pull_stats(),
                b.pull_stats(),
            );
            let t = self.now();
            let [ga, gb] = got;
            let wa = self.poll_one(a, ga);
            let wb = self.poll_one(b, gb);
            let wake = match (wa, wb) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            };
            self.wait(fd, t, wake);
        }
    }

    /// Publishes message `i` through the client (while it goes on consuming).
    fn publish(
        &mut self,
        c: &mut Downlink,
        got: &mut Vec<Got>,
        i: usize,
    ) -> rmq_smoltcp::SendReceipt {
        let body = gateway::body(i);
        let key = format!("up-{i}");
        let msg = Message {
            body: body.as_bytes(),
            tags: Some("telemetry"),
            keys: Some(&key),
            flag: 0,
        };
        let mut sent = None;
        let mut done = None;
        self.run(c, got, StdDuration::from_secs(30), "publish", |c, _| {
            c.can_send() || sent.is_some()
        });
        let now = self.now();
        sent = Some(c.send(now, &msg).expect("submit"));
        self.run(c, got, StdDuration::from_secs(30), "send", |c, _| {
            done = c.take_completion();
            done.is_some()
        });
        let done = done.unwrap();
        assert_eq!(Some(done.id), sent);
        done.result
            .unwrap_or_else(|e| panic!("uplink message {i}: {e}"))
    }

    /// Resets the sockets (RST), as a gateway that lost power leaves its connections.
    fn crash(&mut self, handles: [SocketHandle; 2]) {
        for h in handles {
            self.sockets.get_mut::<tcp::Socket<'_>>(h).abort();
        }
        let now = smoltcp::time::Instant::from_millis(self.now().millis() as i64);
        self.iface.poll(now, &mut self.dev, &mut self.sockets);
        for h in handles {
            self.sockets.remove(h);
        }
    }
}

fn send(cluster: &Cluster, from: usize, count: usize, tag: &'static str) -> Vec<SendLine> {
    let lines = JavaProducer::new(TOPIC, count as u64)
        .body(&format!("{tag}-{{i}}+{from}"))
        .tags(tag)
        .keys(&format!("k-{{i}}+{from}"))
        .run(cluster)
        .expect("java producer");
    assert_eq!(lines.len(), count);
    assert!(lines.iter().all(|l| l.status == "SEND_OK"), "{lines:?}");
    lines
}

/// What Java sent, by (queue, offset): (body, tag, key).
type Sent = BTreeMap<(i32, i64), (String, String, String)>;

fn record(sent: &mut Sent, lines: &[SendLine], from: usize, tag: &str) {
    for l in lines {
        let i = l.index as usize;
        let q = (l.queue_id.expect("queue"), l.queue_offset.expect("offset"));
        let v = (
            format!("{tag}-{i}+{from}"),
            tag.to_owned(),
            format!("k-{i}+{from}"),
        );
        assert!(sent.insert(q, v).is_none(), "{q:?} twice");
    }
}

/// Each delivered command is one Java sent, once, and each queue's offsets rise.
fn check(got: &[Got], sent: &Sent, what: &str) {
    let mut seen = BTreeSet::new();
    let mut last: BTreeMap<i32, i64> = BTreeMap::new();
    for g in got {
        let (body, tag, key) = sent
            .get(&(g.queue_id, g.offset))
            .unwrap_or_else(|| panic!("{what}: {g:?} was never sent"));
        assert_eq!(
            &g.body,
            body,
            "{what}: body at {:?}",
            (g.queue_id, g.offset)
        );
        assert_eq!(g.tags.as_deref(), Some(tag.as_str()));
        assert_eq!(g.keys.as_deref(), Some(key.as_str()));
        assert!(
            seen.insert((g.queue_id, g.offset)),
            "{what}: {g:?} delivered twice"
        );
        if let Some(prev) = last.insert(g.queue_id, g.offset) {
            assert!(prev < g.offset, "{what}: queue {} out of order", g.queue_id);
        }
    }
}

#[test]
fn smoltcp_consumer_receives_commands_and_resumes_after_a_crash() {
    prefetch(VERSION).expect("fetch the RocketMQ jars before leaving the network");
    netns::run_inner("inner_consumer_in_netns", &[]);
}

#[test]
#[ignore = "runs inside `unshare -n`, started by smoltcp_consumer_receives_commands_and_resumes_after_a_crash"]
fn inner_consumer_in_netns() {
    if !netns::is_inner() {
        eprintln!("not inside the test namespace; run the outer test instead");
        return;
    }
    netns::setup_tap("tap0");
    let cluster = Cluster::start(VERSION, ClusterOptions::default()).expect("cluster start");
    cluster.create_topic(TOPIC, 4).expect("create topic");
    let mut dev = TunTapInterface::new("tap0", Medium::Ethernet).expect("open tap0");
    let clock = StdInstant::now();
    let iface = gateway::iface(&mut dev, 11, 0);
    let mut rig = Rig {
        dev,
        iface,
        sockets: SocketSet::new(vec![]),
        clock,
    };

    // The gateway starts and takes the 4 queues (its group's only member).
    let (mut c, handles) = rig.consumer(&cluster);
    let mut got = Vec::new();
    rig.run(
        &mut c,
        &mut got,
        StdDuration::from_secs(60),
        "rebalance",
        |c, _| c.owned().count() == 4,
    );

    // 100 commands (plus 10 with a tag the gateway does not subscribe, which the broker
    // filters out), all delivered once, in queue order.
    let mut sent = Sent::new();
    let lines = send(&cluster, 0, 100, "cmd");
    record(&mut sent, &lines, 0, "cmd");
    let ignored = send(&cluster, 100, 10, "other");
    let t0 = StdInstant::now();
    rig.run(
        &mut c,
        &mut got,
        StdDuration::from_secs(60),
        "first 100",
        |_, g| g.len() >= 100,
    );
    eprintln!("100 commands delivered in {:?}", t0.elapsed());
    check(&got, &sent, "first 100");
    assert_eq!(got.len(), 100);
    // Their offsets are committed: each queue's committed offset is past its last command
    // (including the filtered ones, which the broker skipped over).
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    for l in lines.iter().chain(&ignored) {
        let e = ends.entry(l.queue_id.unwrap()).or_default();
        *e = (*e).max(l.queue_offset.unwrap() + 1);
    }
    rig.run(
        &mut c,
        &mut got,
        StdDuration::from_secs(30),
        "commit",
        |c, _| {
            c.owned()
                .all(|(q, committed)| committed.is_some() && committed >= ends.get(&q).copied())
        },
    );
    assert!(c.pull_stats().commits > 0);

    // The same client publishes telemetry over its session; Java reads it back.
    let receipts: Vec<_> = (0..20).map(|i| rig.publish(&mut c, &mut got, i)).collect();
    assert_eq!(got.len(), 100, "no command came meanwhile");
    let up = verifier_read(&cluster, UPLINK, 20, StdDuration::from_secs(5)).expect("verifier");
    assert_eq!(up.len(), 20);
    for m in &up {
        let i: usize = m
            .keys
            .as_deref()
            .unwrap()
            .strip_prefix("up-")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(m.body, gateway::body(i).as_bytes());
        assert_eq!(m.msg_id, receipts[i].msg_id.as_str());
        assert_eq!(Some(m.queue_offset), receipts[i].queue_offset);
    }

    // 50 more, delivered; then the gateway crashes before (all of) their commit.
    let more = send(&cluster, 200, 50, "config");
    record(&mut sent, &more, 200, "config");
    rig.run(
        &mut c,
        &mut got,
        StdDuration::from_secs(60),
        "next 50",
        |_, g| g.len() >= 150,
    );
    check(&got, &sent, "before the crash");
    assert_eq!(got.len(), 150);
    let committed: BTreeMap<i32, i64> = c
        .owned()
        .map(|(q, off)| (q, off.expect("committed before")))
        .collect();
    let stats = c.pull_stats();
    drop(c);
    rig.crash(handles);
    eprintln!("crashed with committed offsets {committed:?}; {stats:?}");

    // The same gateway (client id) comes back and resumes each queue where its offset was
    // committed: a commit in flight at the crash may have moved it past what the gateway
    // recorded, never before it.
    let (mut c, _handles) = rig.consumer(&cluster);
    let mut again = Vec::new();
    let ends: BTreeMap<i32, i64> = sent.keys().fold(BTreeMap::new(), |mut m, (q, off)| {
        let e = m.entry(*q).or_insert(0);
        *e = (*e).max(off + 1);
        m
    });
    let caught_up = |c: &mut Downlink, g: &[Got]| {
        let owned: BTreeMap<i32, Option<i64>> = c.owned().collect();
        owned.len() == 4
            && ends.iter().all(|(q, end)| {
                let last = g
                    .iter()
                    .filter(|x| x.queue_id == *q)
                    .map(|x| x.offset + 1)
                    .max();
                // Either redelivered up to the end, or started at (committed) the end.
                last == Some(*end) || owned.get(q).copied().flatten() >= Some(*end)
            })
    };
    rig.run(
        &mut c,
        &mut again,
        StdDuration::from_secs(60),
        "after the restart",
        caught_up,
    );
    // A moment more: anything extra would be a repeat.
    let settle = StdInstant::now();
    rig.run(
        &mut c,
        &mut again,
        StdDuration::from_secs(10),
        "settle",
        |_, _| settle.elapsed() > StdDuration::from_secs(2),
    );
    check(&again, &sent, "after the restart");
    let first: BTreeSet<(i32, i64)> = got.iter().map(|g| (g.queue_id, g.offset)).collect();
    for (q, end) in &ends {
        let offs: Vec<i64> = again
            .iter()
            .filter(|g| g.queue_id == *q)
            .map(|g| g.offset)
            .collect();
        let start = offs.first().copied().unwrap_or(*end);
        assert!(
            start >= committed[q],
            "queue {q}: redelivery from {start}, below the committed {}",
            committed[q]
        );
        let want: Vec<i64> = sent
            .keys()
            .filter(|(sq, off)| sq == q && *off >= start)
            .map(|(_, off)| *off)
            .collect();
        assert_eq!(offs, want, "queue {q}: everything from {start} on, once");
        for (sq, off) in sent.keys().filter(|(sq, off)| sq == q && *off < start) {
            assert!(first.contains(&(*sq, *off)), "({sq}, {off}) lost");
        }
    }
    eprintln!(
        "resumed: {} delivered again (after the last commit the gateway saw: {committed:?}); {:?}",
        again.len(),
        c.pull_stats()
    );

    // A clean stop commits everything.
    c.stop();
    rig.run(
        &mut c,
        &mut again,
        StdDuration::from_secs(10),
        "stop",
        |c, _| c.stopped(),
    );
}

/// With rmq-smoltcp's `rebalance` feature (`--features smoltcp-rebalance`; `.ci/run` runs it
/// as a step of its own): two gateway clients of one group share the topic's 4 queues (each
/// announces itself in heartbeats; each reads the group's members from the broker), every
/// command reaches exactly one of them, and when one stops and leaves, the other takes its
/// queues at the committed offsets.
#[cfg(feature = "smoltcp-rebalance")]
#[test]
fn smoltcp_consumers_of_one_group_share_the_queues() {
    prefetch(VERSION).expect("fetch the RocketMQ jars before leaving the network");
    netns::run_inner("inner_shared_in_netns", &[]);
}

#[cfg(feature = "smoltcp-rebalance")]
#[test]
#[ignore = "runs inside `unshare -n`, started by smoltcp_consumers_of_one_group_share_the_queues"]
fn inner_shared_in_netns() {
    if !netns::is_inner() {
        eprintln!("not inside the test namespace; run the outer test instead");
        return;
    }
    netns::setup_tap("tap0");
    let cluster = Cluster::start(VERSION, ClusterOptions::default()).expect("cluster start");
    cluster.create_topic(TOPIC, 4).expect("create topic");
    let mut dev = TunTapInterface::new("tap0", Medium::Ethernet).expect("open tap0");
    let clock = StdInstant::now();
    let iface = gateway::iface(&mut dev, 12, 0);
    let mut rig = Rig {
        dev,
        iface,
        sockets: SocketSet::new(vec![]),
        clock,
    };
    let (mut a, _) = rig.member(&cluster, "169.254.1.2@gateway-a");
    let (mut b, b_handles) = rig.member(&cluster, "169.254.1.2@gateway-b");
    let mut got = [Vec::new(), Vec::new()];
    let owned = |c: &Downlink| c.owned().map(|(q, _)| q).collect::<BTreeSet<i32>>();

    // Both announce themselves; each then owns two of the 4 queues.
    rig.run_two(
        [&mut a, &mut b],
        &mut got,
        StdDuration::from_secs(60),
        "sharing",
        |[a, b], _| {
            let (qa, qb) = (owned(a), owned(b));
            qa.len() == 2 && qb.len() == 2 && qa.is_disjoint(&qb)
        },
    );
    let (qa, qb) = (owned(&a), owned(&b));
    eprintln!("gateway-a owns {qa:?}, gateway-b owns {qb:?}");

    // 100 commands: each delivered once, by the member owning its queue.
    let mut sent = Sent::new();
    let lines = send(&cluster, 0, 100, "cmd");
    record(&mut sent, &lines, 0, "cmd");
    rig.run_two(
        [&mut a, &mut b],
        &mut got,
        StdDuration::from_secs(60),
        "100 shared",
        |_, g| g[0].len() + g[1].len() >= 100,
    );
    for (g, qs, who) in [(&got[0], &qa, "a"), (&got[1], &qb, "b")] {
        check(g, &sent, who);
        assert!(g.iter().all(|x| qs.contains(&x.queue_id)), "{who}: {g:?}");
        assert!(!g.is_empty(), "{who} received nothing");
    }
    let both: BTreeSet<(i32, i64)> = got
        .iter()
        .flatten()
        .map(|x| (x.queue_id, x.offset))
        .collect();
    assert_eq!(both.len(), 100, "each command once");
    assert_eq!(both, sent.keys().copied().collect::<BTreeSet<_>>());

    // `mqadmin consumerStatus` reaches gateway-a through its broker (GET_CONSUMER_RUNNING_INFO,
    // 307), answered by the core client while the gateway polls.
    let ns = cluster.namesrv_addr().to_string();
    let args = [
        "consumerStatus",
        "-n",
        &ns,
        "-g",
        GROUP,
        "-i",
        "169.254.1.2@gateway-a",
    ];
    let status = std::thread::scope(|scope| {
        let admin = scope.spawn(|| cluster.mqadmin(&args));
        rig.run_two(
            [&mut a, &mut b],
            &mut got,
            StdDuration::from_secs(120),
            "consumerStatus",
            |_, _| admin.is_finished(),
        );
        admin.join().expect("mqadmin thread")
    })
    .expect("consumerStatus");
    eprintln!("consumerStatus of gateway-a:\n{status}");
    for want in [
        "#Consumer Subscription#",
        "#Consumer MQ Detail#",
        "CONSUME_PASSIVELY",
        "cmd || config",
    ] {
        assert!(
            status.contains(want),
            "{want:?} missing from consumerStatus"
        );
    }
    // Its two queues, each with its committed offset, in the MQ detail.
    let detail: BTreeSet<i32> = status
        .lines()
        .filter(|l| l.starts_with(TOPIC) && l.contains("ProcessQueueInfo ["))
        .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
        .collect();
    assert_eq!(detail, qa, "gateway-a's queues in the MQ detail");
    // Times on the wall clock the gateway was given (not from 1970).
    assert!(!status.contains("lastPullTimestamp=1970"), "{status}");

    // gateway-b stops (its offsets committed) and goes away; gateway-a takes its queues.
    b.stop();
    rig.run(
        &mut b,
        &mut got[1],
        StdDuration::from_secs(10),
        "stop",
        |c, _| c.stopped(),
    );
    drop(b);
    rig.crash(b_handles);
    let [got_a, got_b] = &mut got;
    rig.run(
        &mut a,
        got_a,
        StdDuration::from_secs(60),
        "takeover",
        |c, _| c.owned().count() == 4,
    );

    // 40 more: all to gateway-a, none of the first 100 again.
    let more = send(&cluster, 200, 40, "config");
    record(&mut sent, &more, 200, "config");
    rig.run(
        &mut a,
        got_a,
        StdDuration::from_secs(60),
        "after the takeover",
        |_, g| g.len() + got_b.len() >= 140,
    );
    let settle = StdInstant::now();
    rig.run(
        &mut a,
        got_a,
        StdDuration::from_secs(10),
        "settle",
        |_, _| settle.elapsed() > StdDuration::from_secs(2),
    );
    check(got_a, &sent, "a, after the takeover");
    let all: Vec<(i32, i64)> = got
        .iter()
        .flatten()
        .map(|x| (x.queue_id, x.offset))
        .collect();
    assert_eq!(all.len(), 140, "nothing twice, nothing lost");
    assert_eq!(
        all.into_iter().collect::<BTreeSet<_>>(),
        sent.keys().copied().collect::<BTreeSet<_>>()
    );
    eprintln!("after the takeover: {:?}", a.pull_stats());
}
