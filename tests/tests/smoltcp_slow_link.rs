//! The smoltcp gateway over a slow link: 100 ms of round trip added, one message per request
//! against batches (SEND_BATCH_MESSAGE), against the real broker (5.3.3).
//!
//! As in `smoltcp_real.rs`, the outer test re-runs this binary inside `unshare -n`, where a
//! TAP device joins a smoltcp interface (169.254.1.2) to the NameServer and broker on
//! 127.0.0.1. Between smoltcp and the TAP, [`Delayed`] holds every frame for 50 ms in each
//! direction (netem is not available on these machines), as a cellular uplink would. The
//! gateway publishes 30 messages one at a time (one round trip each), then 20 batches of 32
//! messages; the test prints both rates (`SLOW-LINK` line, BENCHMARKS.md "Gateway over a slow
//! link") and the Java verifier reads every message back: body, keys, tags, UNIQ_KEY (a batch's
//! from [`rmq_smoltcp::SendReceipt::msg_id_of`]), queue and offset (a batch's are consecutive
//! in one queue). No rate is asserted (timing belongs to benchmarks, not tests).

mod gateway;

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::AsRawFd;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use gateway::body;
use rmq_core::retry::SendStatus;
use rmq_core::time::Instant;
use rmq_smoltcp::{Completion, Message};
use rmq_tests::broker::{Cluster, ClusterOptions, Version, prefetch, verifier_read};
use rmq_tests::netns;
use smoltcp::iface::SocketSet;
use smoltcp::phy::{
    Device, DeviceCapabilities, Medium, RxToken, TunTapInterface, TxToken, wait as phy_wait,
};
use smoltcp::time::Instant as SmolInstant;

const VERSION: Version = Version::V5_3_3;
const TOPIC: &str = "SlowLink";
/// Added in each direction.
const ONE_WAY: smoltcp::time::Duration = smoltcp::time::Duration::from_millis(50);
const SINGLE: usize = 30;
const BATCHES: usize = 20;
const BATCH: usize = 32;

#[test]
fn smoltcp_gateway_batches_over_a_slow_link() {
    prefetch(VERSION).expect("fetch the RocketMQ jars before leaving the network");
    netns::run_inner("inner_slow_link_in_netns", &[]);
}

/// A smoltcp `Device` that delivers every frame [`ONE_WAY`] late, both ways.
struct Delayed<D> {
    inner: D,
    rx: VecDeque<(SmolInstant, Vec<u8>)>,
    tx: VecDeque<(SmolInstant, Vec<u8>)>,
}

impl<D: Device> Delayed<D> {
    /// Takes what arrived from the inner device and hands it what is due.
    fn pump(&mut self, now: SmolInstant) {
        while let Some((rx, _)) = self.inner.receive(now) {
            let frame = rx.consume(|b| b.to_vec());
            self.rx.push_back((now + ONE_WAY, frame));
        }
        while self.tx.front().is_some_and(|(at, _)| *at <= now) {
            let Some(tok) = self.inner.transmit(now) else {
                break;
            };
            let (_, frame) = self.tx.pop_front().unwrap();
            tok.consume(frame.len(), |b| b.copy_from_slice(&frame));
        }
    }

    /// When something is due next.
    fn next_due(&self) -> Option<SmolInstant> {
        let a = self.rx.front().map(|(t, _)| *t);
        let b = self.tx.front().map(|(t, _)| *t);
        a.into_iter().chain(b).min()
    }
}

struct DelayedRx(Vec<u8>);
struct DelayedTx<'a> {
    queue: &'a mut VecDeque<(SmolInstant, Vec<u8>)>,
    at: SmolInstant,
}

impl RxToken for DelayedRx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl TxToken for DelayedTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut frame = vec![0u8; len];
        let r = f(&mut frame);
        self.queue.push_back((self.at + ONE_WAY, frame));
        r
    }
}

impl<D: Device> Device for Delayed<D> {
    type RxToken<'a>
        = DelayedRx
    where
        Self: 'a;
    type TxToken<'a>
        = DelayedTx<'a>
    where
        Self: 'a;

    fn receive(&mut self, now: SmolInstant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        self.pump(now);
        if self.rx.front().is_none_or(|(at, _)| *at > now) {
            return None;
        }
        let (_, frame) = self.rx.pop_front()?;
        Some((
            DelayedRx(frame),
            DelayedTx {
                queue: &mut self.tx,
                at: now,
            },
        ))
    }

    fn transmit(&mut self, now: SmolInstant) -> Option<Self::TxToken<'_>> {
        Some(DelayedTx {
            queue: &mut self.tx,
            at: now,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.inner.capabilities()
    }
}

/// What the gateway was told about message `seq`.
struct Told {
    msg_id: String,
    queue_id: i32,
    queue_offset: i64,
}

#[test]
#[ignore = "runs inside `unshare -n`, started by smoltcp_gateway_batches_over_a_slow_link"]
fn inner_slow_link_in_netns() {
    if !netns::is_inner() {
        eprintln!("not inside the test namespace; run the outer test instead");
        return;
    }
    netns::setup_tap("tap0");
    let cluster = Cluster::start(VERSION, ClusterOptions::default()).expect("cluster start");
    cluster.create_topic(TOPIC, 4).expect("create topic");

    let tap = TunTapInterface::new("tap0", Medium::Ethernet).expect("open tap0");
    let fd = tap.as_raw_fd();
    let mut dev = Delayed {
        inner: tap,
        rx: VecDeque::new(),
        tx: VecDeque::new(),
    };
    let clock = StdInstant::now();
    let now = || Instant::from_millis(clock.elapsed().as_millis() as u64);
    let mut iface = gateway::iface(&mut dev, 11, now().millis());
    let mut sockets = SocketSet::new(vec![]);
    // A batch request is ~6 KB: socket buffers that hold it, so that it leaves in one round
    // trip.
    let mut p = gateway::producer(
        &cluster,
        &mut sockets,
        "slow-gateway",
        TOPIC,
        16 * 1024,
        8 * 1024,
    );

    // Runs one request (a message or a batch) to its completion.
    let mut run = |msgs: &[Message<'_>]| -> Completion {
        let deadline = StdInstant::now() + StdDuration::from_secs(30);
        let id = if msgs.len() == 1 {
            p.send(now(), &msgs[0])
        } else {
            p.send_batch(now(), msgs)
        }
        .expect("submit");
        loop {
            assert!(
                StdInstant::now() < deadline,
                "no completion: {:?}",
                p.stats()
            );
            let t = now();
            let wake = p.poll(t, &mut iface, &mut dev, &mut sockets);
            if let Some(c) = p.take_completion() {
                assert_eq!(c.id, id);
                return c;
            }
            let due = dev.next_due().map(|d| d.total_millis() as u64);
            let next = [wake.map(|w| w.millis()), due, Some(t.millis() + 20)]
                .into_iter()
                .flatten()
                .min()
                .unwrap();
            let ms = next.saturating_sub(now().millis());
            if ms > 0 {
                phy_wait(fd, Some(smoltcp::time::Duration::from_millis(ms))).unwrap();
            }
        }
    };
    let owned: Vec<(String, String)> = (0..SINGLE + BATCHES * BATCH)
        .map(|i| (body(i), format!("seq-{i}")))
        .collect();
    let msg = |i: usize| Message {
        body: owned[i].0.as_bytes(),
        tags: Some("telemetry"),
        keys: Some(&owned[i].1),
        flag: 0,
    };
    let mut told: BTreeMap<usize, Told> = BTreeMap::new();

    // Warm-up: the route lookup and the connection are not what is measured.
    let warm = run(&[msg(0)]).result.expect("first message");
    told.insert(
        0,
        Told {
            msg_id: warm.msg_id.to_string(),
            queue_id: warm.queue_id,
            queue_offset: warm.queue_offset.unwrap(),
        },
    );
    let t = StdInstant::now();
    for i in 1..SINGLE {
        let r = run(&[msg(i)]).result.expect("single send");
        assert_eq!(r.status, SendStatus::SendOk);
        told.insert(
            i,
            Told {
                msg_id: r.msg_id.to_string(),
                queue_id: r.queue_id,
                queue_offset: r.queue_offset.unwrap(),
            },
        );
    }
    let single_rate = (SINGLE - 1) as f64 / t.elapsed().as_secs_f64();

    let t = StdInstant::now();
    for k in 0..BATCHES {
        let first = SINGLE + k * BATCH;
        let msgs: Vec<Message<'_>> = (first..first + BATCH).map(msg).collect();
        let r = run(&msgs).result.expect("batch send");
        assert_eq!(r.status, SendStatus::SendOk);
        assert_eq!(usize::from(r.messages), BATCH);
        assert!(r.msg_id_of(BATCH as u16).is_none());
        for j in 0..BATCH {
            told.insert(
                first + j,
                Told {
                    msg_id: r.msg_id_of(j as u16).unwrap().to_string(),
                    queue_id: r.queue_id,
                    queue_offset: r.queue_offset.unwrap() + j as i64,
                },
            );
        }
    }
    let batch_rate = (BATCHES * BATCH) as f64 / t.elapsed().as_secs_f64();
    eprintln!(
        "SLOW-LINK +100 ms RTT: one message per request {single_rate:.1} msgs/s; batches of \
         {BATCH}: {batch_rate:.1} msgs/s ({:.1}x); {:?}",
        batch_rate / single_rate,
        p.stats()
    );

    let count = told.len();
    let got = verifier_read(&cluster, TOPIC, count, StdDuration::from_secs(5)).expect("verifier");
    assert_eq!(got.len(), count, "the verifier read {} messages", got.len());
    let mut seen = BTreeMap::new();
    for m in &got {
        let seq: usize = m.keys.as_deref().unwrap()["seq-".len()..].parse().unwrap();
        assert!(seen.insert(seq, m).is_none(), "message {seq} stored twice");
    }
    for (seq, t) in &told {
        let m = seen
            .get(seq)
            .unwrap_or_else(|| panic!("message {seq} missing"));
        assert_eq!(m.body, body(*seq).as_bytes(), "body of {seq}");
        assert_eq!(m.tags.as_deref(), Some("telemetry"));
        assert_eq!(m.msg_id, t.msg_id, "UNIQ_KEY of {seq}");
        assert_eq!(
            (m.queue_id, m.queue_offset),
            (t.queue_id, t.queue_offset),
            "{seq}"
        );
        assert!(m.born_host.starts_with("169.254.1.2"), "{}", m.born_host);
    }
}
