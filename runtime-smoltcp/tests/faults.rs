//! Deterministic fault tests: the producer over an in-memory smoltcp device pair against a
//! scripted NameServer + broker peer (see `support`).

mod support;

use core::net::{SocketAddr, SocketAddrV4};
use rmq_core::retry::{SendErrorKind, SendStatus};
use rmq_core::time::Duration;
use rmq_core::transport::TransportError;
use rmq_smoltcp::SendFailure;
use support::{GwSizes, NS_PORT, PEER_IP, Sim, body};

const DEAD_NAMESRV: [SocketAddr; 1] = [SocketAddr::V4(SocketAddrV4::new(PEER_IP, 1))];

fn check_props(p: &str) {
    assert!(p.contains("TAGS\u{1}TagA"), "{p:?}");
    assert!(p.contains("UNIQ_KEY\u{1}0A000002"), "{p:?}");
}

#[test]
fn route_lookup_then_sync_and_oneway_sends() {
    let mut sim = Sim::new(GwSizes::default(), |_| {});
    let mut offsets = Vec::new();
    for i in 0..10 {
        let c = sim.send_and_wait(&body(i, 64), false, 5_000);
        let r = c.result.expect("send ok");
        assert_eq!(r.status, SendStatus::SendOk);
        assert_eq!(r.broker.as_str(), "broker-a");
        assert_eq!(r.attempts, 1);
        assert_eq!(r.msg_id.len(), 32);
        assert!(r.offset_msg_id.starts_with("0A00000100002A9F"));
        offsets.push(r.queue_offset.unwrap());
    }
    assert_eq!(offsets, (0..10).collect::<Vec<i64>>());
    let c = sim.send_and_wait(b"oneway", true, 5_000);
    let r = c.result.expect("oneway ok");
    assert_eq!(r.queue_offset, None);
    assert!(sim.run_until(1_000, |s| s.peer.stored.len() == 11));
    let stored = &sim.peer.stored;
    for (i, s) in stored.iter().take(10).enumerate() {
        assert_eq!(s.body, body(i, 64));
        assert!(!s.oneway);
        assert_eq!(s.broker_name.as_deref(), Some("broker-a"));
        check_props(&s.properties);
    }
    assert!(stored[10].oneway);
    assert_eq!(stored[10].body, b"oneway");
    // Round robin over the 4 queues.
    let mut qs: Vec<i32> = stored.iter().map(|s| s.queue_id).collect();
    qs.sort_unstable();
    qs.dedup();
    assert_eq!(qs, vec![0, 1, 2, 3]);
    assert_eq!(sim.peer.route_requests, 1);
    assert_eq!(sim.peer.framing_errors, 0);
    let st = sim.producer.stats();
    assert!(
        sim.immediate_polls * 50 < sim.polls,
        "poll asked to run again at once {} times out of {}",
        sim.immediate_polls,
        sim.polls
    );
    assert_eq!(st.connects, 2, "one NameServer and one broker connection");
    assert_eq!(st.connect_failures, 0);
    assert_eq!(st.connections_lost, 0);
}

#[test]
fn idle_connections_survive() {
    let mut sim = Sim::new(GwSizes::default(), |_| {});
    sim.send_and_wait(b"a", false, 5_000).result.unwrap();
    sim.run_until(40_000, |_| false);
    sim.send_and_wait(b"b", false, 5_000).result.unwrap();
    let st = sim.producer.stats();
    assert_eq!(st.connections_lost, 0, "{st:?}");
    assert_eq!(st.connects, 2, "{st:?}");
    assert_eq!(
        sim.peer.route_requests, 2,
        "one lookup plus one 30 s refresh"
    );
}

#[test]
fn route_is_refreshed_periodically() {
    let mut sim = Sim::new(GwSizes::default(), |c| {
        c.base.route_refresh = Duration::from_millis(500)
    });
    sim.send_and_wait(b"x", false, 5_000).result.unwrap();
    let t = sim.now;
    sim.run_until(2_100, |_| false);
    assert!(sim.now >= t + 2_000);
    assert!(
        (4..=6).contains(&sim.peer.route_requests),
        "{} route requests",
        sim.peer.route_requests
    );
}

#[test]
fn partial_writes_resume_without_corrupting_frames() {
    // A 256-byte socket send buffer for ~1.2 KiB frames: every frame goes out in pieces.
    let sizes = GwSizes {
        sock_tx: 256,
        ..GwSizes::default()
    };
    let mut sim = Sim::new(sizes, |_| {});
    for i in 0..20 {
        let c = sim.send_and_wait(&body(i, 900 + i * 7), i % 3 == 2, 5_000);
        c.result.expect("send ok");
    }
    assert!(sim.run_until(2_000, |s| s.peer.stored.len() == 20));
    let want: Vec<Vec<u8>> = (0..20).map(|i| body(i, 900 + i * 7)).collect();
    assert_eq!(sim.stored_bodies(), want);
    assert_eq!(sim.peer.framing_errors, 0);
    let st = sim.producer.stats();
    assert!(st.partial_writes >= 20, "{st:?}");
    assert_eq!(st.connections_lost, 0);
}

#[test]
fn slow_peer_reading_a_few_bytes_at_a_time() {
    // 6 KB frames through a 2 KB socket buffer to a peer that reads 24 bytes a millisecond
    // and answers 300 ms late.
    let sizes = GwSizes {
        message: 8192,
        ..GwSizes::default()
    };
    let mut sim = Sim::new(sizes, |c| {
        c.base.retry.send_timeout = Duration::from_secs(10)
    });
    sim.peer.read_limit = Some(24);
    sim.peer.reply_delay_ms = 300;
    for i in 0..8 {
        let c = sim.send_and_wait(&body(i, 6000), false, 20_000);
        assert_eq!(c.result.expect("send ok").attempts, 1);
    }
    let want: Vec<Vec<u8>> = (0..8).map(|i| body(i, 6000)).collect();
    assert_eq!(sim.stored_bodies(), want);
    assert_eq!(sim.peer.framing_errors, 0);
    let st = sim.producer.stats();
    assert!(st.partial_writes > 0, "{st:?}");
    assert_eq!(st.connections_lost, 0);
}

#[test]
fn packet_loss_in_both_directions() {
    let mut sim = Sim::new(GwSizes::default(), |c| {
        c.base.retry.send_timeout = Duration::from_secs(30);
        c.base.request_timeout = Duration::from_secs(10);
        c.base.write_stall_timeout = Duration::from_secs(10);
    });
    {
        let mut w = sim.wire.borrow_mut();
        w.drop_every = [Some(4), Some(5)];
    }
    for i in 0..30 {
        let c = sim.send_and_wait(&body(i, 700), false, 40_000);
        c.result.expect("send ok");
    }
    let want: Vec<Vec<u8>> = (0..30).map(|i| body(i, 700)).collect();
    assert_eq!(sim.stored_bodies(), want);
    assert_eq!(sim.peer.framing_errors, 0);
    let w = sim.wire.borrow();
    assert!(w.dropped[0] > 5 && w.dropped[1] > 5, "{:?}", w.dropped);
}

#[test]
fn reset_mid_conversation_reconnects_and_retries() {
    let mut sim = Sim::new(GwSizes::default(), |_| {});
    sim.peer.reset_on_sends = vec![3, 7, 8];
    let mut attempts = Vec::new();
    for i in 0..10 {
        let c = sim.send_and_wait(&body(i, 200), false, 5_000);
        attempts.push(c.result.expect("send ok after retry").attempts);
    }
    // Send #3 (message 2) is reset once; sends #7 and #8 (message 5's two first attempts).
    assert_eq!(attempts, vec![1, 1, 2, 1, 1, 3, 1, 1, 1, 1]);
    let want: Vec<Vec<u8>> = (0..10).map(|i| body(i, 200)).collect();
    assert_eq!(sim.stored_bodies(), want);
    assert_eq!(sim.peer.framing_errors, 0);
    let st = sim.producer.stats();
    assert_eq!(st.connections_lost, 3, "{st:?}");
    assert_eq!(st.connects, 5, "NameServer + 4 broker connections: {st:?}");
}

#[test]
fn broker_error_code_is_retried() {
    let mut sim = Sim::new(GwSizes::default(), |_| {});
    sim.peer.error_on_sends = vec![2];
    sim.send_and_wait(b"a", false, 5_000).result.unwrap();
    let r = sim.send_and_wait(b"b", false, 5_000).result.unwrap();
    assert_eq!(r.attempts, 2);
    assert_eq!(sim.stored_bodies(), vec![b"a".to_vec(), b"b".to_vec()]);
}

#[test]
fn broker_goes_away_and_comes_back() {
    let mut sim = Sim::new(GwSizes::default(), |_| {});
    for i in 0..3 {
        sim.send_and_wait(&body(i, 100), false, 5_000)
            .result
            .unwrap();
    }
    sim.peer.broker_up = false;
    let c = sim.send_and_wait(b"lost", false, 10_000);
    match c.result {
        Err(SendFailure::Plan { error: e, .. }) => {
            assert_eq!(
                e.kind(),
                SendErrorKind::Transport(TransportError::ConnectFailed),
                "{e}"
            );
            assert_eq!(e.attempts(), 3);
            assert!(e.is_retryable());
        }
        other => panic!("expected a transport failure, got {other:?}"),
    }
    // While it is down every send fails fast, and none hangs.
    let c = sim.send_and_wait(b"lost too", false, 10_000);
    assert!(c.result.is_err());
    sim.run_until(2_000, |_| false);
    sim.peer.broker_up = true;
    for i in 3..8 {
        let c = sim.send_and_wait(&body(i, 100), false, 10_000);
        c.result.expect("send ok after the broker came back");
    }
    let want: Vec<Vec<u8>> = (0..8).map(|i| body(i, 100)).collect();
    assert_eq!(sim.stored_bodies(), want);
    assert_eq!(sim.peer.framing_errors, 0);
    assert!(
        sim.immediate_polls * 50 < sim.polls,
        "poll asked to run again at once {} times out of {}",
        sim.immediate_polls,
        sim.polls
    );
    let st = sim.producer.stats();
    assert!(st.connect_failures >= 3, "{st:?}");
    assert!(st.connections_lost >= 1, "{st:?}");
}

#[test]
fn stalled_half_written_frame_resets_its_connection() {
    // The peer stops reading while a frame is half written: the write stalls, the attempt
    // times out, and the frame dies with its connection instead of being restarted on it.
    let sizes = GwSizes {
        sock_tx: 256,
        message: 16384,
        ..GwSizes::default()
    };
    let mut sim = Sim::new(sizes, |c| {
        c.base.retry.send_timeout = Duration::from_millis(1500);
        c.base.write_stall_timeout = Duration::from_millis(400);
    });
    sim.send_and_wait(&body(0, 100), false, 5_000)
        .result
        .unwrap();
    sim.peer.read_limit = Some(0);
    let c = sim.send_and_wait(&body(1, 12_000), false, 10_000);
    assert!(c.result.is_err(), "{:?}", c.result);
    assert!(sim.producer.stats().connections_lost >= 1);
    sim.peer.read_limit = None;
    sim.send_and_wait(&body(2, 100), false, 10_000)
        .result
        .expect("a fresh connection works");
    let stored = sim.stored_bodies();
    assert_eq!(stored.first(), Some(&body(0, 100)));
    assert_eq!(stored.last(), Some(&body(2, 100)));
    assert!(!stored.contains(&body(1, 12_000)));
    assert_eq!(sim.peer.framing_errors, 0);
}

#[test]
fn no_route_fails_after_the_send_timeout() {
    let mut sim = Sim::new(GwSizes::default(), |c| {
        c.base.namesrvs = &DEAD_NAMESRV; // nothing listens there
        c.base.retry.send_timeout = Duration::from_millis(800);
    });
    let c = sim.send_and_wait(b"x", false, 5_000);
    assert!(c.result.is_err());
    assert!(sim.now < 2_000);
    assert_eq!(sim.peer.sends_seen, 0);
}

#[test]
fn silent_peer_is_detected_by_missing_acks() {
    // The network turns into a black hole: no RST, no FIN, nothing. Unacknowledged data
    // resets the connection after the stall timeout; once packets flow again a new
    // connection carries the next message.
    let mut sim = Sim::new(GwSizes::default(), |c| {
        c.base.write_stall_timeout = Duration::from_millis(1000);
        c.base.retry.send_timeout = Duration::from_millis(2500);
    });
    sim.send_and_wait(b"before", false, 5_000).result.unwrap();
    sim.wire.borrow_mut().drop_every = [Some(1), Some(1)];
    let c = sim.send_and_wait(b"into the void", false, 10_000);
    assert!(c.result.is_err(), "{:?}", c.result);
    let lost = sim.producer.stats().connections_lost;
    assert!(lost >= 1, "{:?}", sim.producer.stats());
    sim.wire.borrow_mut().drop_every = [None, None];
    sim.send_and_wait(b"after", false, 10_000)
        .result
        .expect("a new connection works");
    let bodies = sim.stored_bodies();
    assert_eq!(bodies.first().map(Vec::as_slice), Some(&b"before"[..]));
    assert_eq!(bodies.last().map(Vec::as_slice), Some(&b"after"[..]));
    assert_eq!(sim.peer.framing_errors, 0);
}

/// A small deterministic generator for the sweep below.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn sweep_of_buffer_sizes_loss_and_slow_reads_never_corrupts_a_frame() {
    for seed in 0..24u64 {
        let mut g = Lcg(seed);
        let sizes = GwSizes {
            sock_tx: 64 + g.next(1500) as usize,
            message: 4096,
            ..GwSizes::default()
        };
        let mut sim = Sim::new(sizes, |c| {
            c.base.retry.send_timeout = Duration::from_secs(60);
            c.base.request_timeout = Duration::from_secs(20);
            c.base.write_stall_timeout = Duration::from_secs(20);
        });
        let loss = [g.next(4), g.next(4)].map(|k| (k > 0).then(|| 3 + k as u32 * 2));
        sim.wire.borrow_mut().drop_every = loss;
        sim.peer.read_limit = (g.next(2) == 0).then(|| 1 + g.next(64) as usize);
        sim.peer.reply_delay_ms = g.next(50);
        let lens: Vec<usize> = (0..8).map(|_| 1 + g.next(3000) as usize).collect();
        for (i, &len) in lens.iter().enumerate() {
            let c = sim.send_and_wait(&body(i, len), false, 120_000);
            c.result.unwrap_or_else(|e| {
                panic!(
                    "seed {seed}: message {i} failed: {e} {:?}",
                    sim.producer.stats()
                )
            });
        }
        let want: Vec<Vec<u8>> = lens.iter().enumerate().map(|(i, &l)| body(i, l)).collect();
        assert_eq!(sim.stored_bodies(), want, "seed {seed}");
        assert_eq!(sim.peer.framing_errors, 0, "seed {seed}");
    }
}

#[test]
fn dead_namesrv_is_skipped_for_the_next_one() {
    // Both orders: whichever the seed picks first, the route comes from the live one.
    for seed in [1u32 << 8, 2 << 8] {
        static BOTH: [SocketAddr; 2] = [
            SocketAddr::V4(SocketAddrV4::new(PEER_IP, 1)),
            SocketAddr::V4(SocketAddrV4::new(PEER_IP, NS_PORT)),
        ];
        let mut sim = Sim::new(GwSizes::default(), |c| {
            c.base.namesrvs = &BOTH;
            c.base.seed = seed;
        });
        let r = sim.send_and_wait(b"via the live NameServer", false, 10_000);
        r.result.expect("send ok");
        assert_eq!(sim.peer.route_requests, 1);
        assert!(sim.producer.stats().connect_failures <= 1);
    }
}

#[test]
fn unknown_topic_uses_the_tbw102_route_capped_at_four_queues() {
    let mut sim = Sim::new(GwSizes::default(), |c| {
        c.base.route_refresh = Duration::from_millis(1000)
    });
    sim.peer.unknown_topic = true;
    for i in 0..12 {
        sim.send_and_wait(&body(i, 50), false, 5_000)
            .result
            .unwrap();
    }
    assert_eq!(sim.peer.route_topics[..2], ["Telemetry", "TBW102"]);
    let mut qs: Vec<i32> = sim.peer.stored.iter().map(|s| s.queue_id).collect();
    qs.sort_unstable();
    qs.dedup();
    assert_eq!(
        qs,
        vec![0, 1, 2, 3],
        "defaultTopicQueueNums caps the 8 queues of TBW102"
    );
    // Once the topic exists, the next refresh uses its own route.
    sim.peer.unknown_topic = false;
    sim.run_until(1_500, |_| false);
    assert_eq!(
        sim.peer.route_topics.last().map(String::as_str),
        Some("Telemetry")
    );
    assert!(
        sim.peer
            .route_topics
            .iter()
            .filter(|t| *t == "Telemetry")
            .count()
            >= 2,
        "{:?}",
        sim.peer.route_topics
    );
}
