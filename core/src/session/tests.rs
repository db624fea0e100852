//! Deterministic session tests: virtual time, a scripted in-memory NameServer and brokers, and
//! assertions on the exact frames the session writes and the deadlines it asks for.

use std::collections::HashMap;
use std::string::{String as StdString, ToString};
use std::vec::Vec as StdVec;

use super::*;
use crate::retry::{RetryConfig, SendErrorKind};
use crate::wire::headers::SendMessageRequestHeaderV2;

type S = Session<4, 4, 16, 8, 4, 2048>;

const PROPS: &str = "WAIT\u{1}true\u{2}";

struct Props;
impl Outbound for Props {
    fn properties(&self, _: SendId) -> &str {
        PROPS
    }
}

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn cfg(name_servers: usize) -> Config<'static> {
    let mut c = Config::new(name_servers, "pg", "10.0.0.2@gw");
    c.seed = 7;
    c
}

/// A route body naming `brokers` (name, master address), each with `queues` writable queues.
fn route(brokers: &[(&str, &str)], queues: i32) -> StdString {
    let bd: StdVec<StdString> = brokers
        .iter()
        .map(|(n, a)| {
            format!(r#"{{"brokerAddrs":{{"0":"{a}"}},"brokerName":"{n}","cluster":"c"}}"#)
        })
        .collect();
    let qd: StdVec<StdString> = brokers
        .iter()
        .map(|(n, _)| {
            format!(
                r#"{{"brokerName":"{n}","perm":6,"readQueueNums":{queues},"topicSysFlag":0,"writeQueueNums":{queues}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"brokerDatas":[{}],"queueDatas":[{}]}}"#,
        bd.join(","),
        qd.join(",")
    )
}

fn response(code: i32, opaque: i32, ext: &[(&str, &str)], body: &[u8]) -> StdVec<u8> {
    response_of(version::V5_3_3, code, opaque, ext, body)
}

/// A response from a server of remoting version `v`.
fn response_of(v: i32, code: i32, opaque: i32, ext: &[(&str, &str)], body: &[u8]) -> StdVec<u8> {
    let cmd = CommandRepr::response(ResponseCode(code), opaque, v, Some(ext));
    let mut buf = std::vec![0u8; 1024];
    let n = cmd
        .emit_frame_prefix_and_header(SerializeType::JSON, body.len(), &mut buf)
        .unwrap();
    buf.truncate(n);
    buf.extend_from_slice(body);
    buf
}

/// A refusal with `code` and `remark`.
fn rejected(code: i32, opaque: i32, remark: &str) -> StdVec<u8> {
    let mut cmd = CommandRepr::response(
        ResponseCode(code),
        opaque,
        version::V5_3_3,
        None::<&[(&str, &str)]>,
    );
    cmd.remark = Some(remark);
    let mut buf = std::vec![0u8; 512];
    let n = cmd
        .emit_frame_prefix_and_header(SerializeType::JSON, 0, &mut buf)
        .unwrap();
    buf.truncate(n);
    buf
}

/// One written frame, decoded.
#[derive(Debug)]
struct Sent {
    peer: Peer,
    code: i32,
    opaque: i32,
    oneway: bool,
    ext: HashMap<StdString, StdString>,
    body: StdVec<u8>,
}

/// The session plus its world: virtual clock and everything written so far.
struct World {
    s: S,
    now: Instant,
    events: StdVec<Event>,
}

impl World {
    fn new(name_servers: usize) -> Self {
        let mut c = cfg(name_servers);
        c.heartbeat = None;
        Self::with(&c)
    }

    fn with(c: &Config<'_>) -> Self {
        World {
            s: S::new(c, t(0)).unwrap(),
            now: t(0),
            events: StdVec::new(),
        }
    }

    /// Every frame the session wants to write now (bodies filled in as the runtime would).
    fn out(&mut self) -> StdVec<Sent> {
        let mut v = StdVec::new();
        let mut buf = [0u8; 1024];
        while let Some(tx) = self.s.poll_transmit(self.now, &mut buf, &Props) {
            let mut frame = buf[..tx.len].to_vec();
            if tx.body.is_some() {
                frame.extend(core::iter::repeat_n(b'x', tx.body_len));
            }
            let f = Frame::new_checked(&frame[..]).expect("whole frame");
            let h = CommandHeader::parse(&f).expect("header");
            assert_eq!(h.opaque(), tx.opaque);
            let ext = h
                .ext_iter()
                .map(|(k, v)| {
                    let mut kb = [0u8; 64];
                    let mut vb = [0u8; 512];
                    (
                        k.unescape_into(&mut kb).unwrap().to_string(),
                        v.unescape_into(&mut vb).unwrap().to_string(),
                    )
                })
                .collect();
            v.push(Sent {
                peer: tx.peer,
                code: h.code(),
                opaque: tx.opaque,
                oneway: h.flag() & flag::ONEWAY != 0,
                ext,
                body: f.body().to_vec(),
            });
            if tx.report_written {
                self.s.handle_written(self.now, tx.opaque);
            }
        }
        self.drain();
        v
    }

    fn drain(&mut self) {
        self.s.check_invariants().unwrap();
        while let Some(e) = self.s.poll_event() {
            self.events.push(e);
        }
        self.s.check_invariants().unwrap();
    }

    fn reply(&mut self, to: &Sent, code: i32, ext: &[(&str, &str)], body: &[u8]) {
        let f = response(code, to.opaque, ext, body);
        assert_eq!(
            self.s.handle_frame(self.now, to.peer, &f).unwrap(),
            Incoming::Handled
        );
        self.drain();
    }

    fn stored(&mut self, to: &Sent, offset: i64) {
        let off = offset.to_string();
        let qid = to.ext["e"].clone();
        self.reply(
            to,
            0,
            &[
                ("msgId", "0A0000010000"),
                ("queueId", &qid),
                ("queueOffset", &off),
            ],
            b"",
        );
    }

    fn advance_to(&mut self, at: Instant) {
        self.now = at;
        self.s.handle_timeout(at);
        self.drain();
    }

    fn send(&mut self, topic: &str) -> SendId {
        let tid = self.s.topic(self.now, topic).unwrap();
        let args = SendArgs::new(RetryConfig::java49(SendMode::Sync), 5, 1_700_000_000_000);
        self.s.send(self.now, tid, &args).unwrap()
    }

    fn done(&mut self, id: SendId) -> Option<Result<SendReceipt, SendFailure>> {
        let i = self
            .events
            .iter()
            .position(|e| matches!(e, Event::SendDone { id: x, .. } if *x == id))?;
        match self.events.remove(i) {
            Event::SendDone { result, .. } => Some(result),
            _ => None,
        }
    }
}

fn one(mut v: StdVec<Sent>) -> Sent {
    assert_eq!(v.len(), 1, "{v:?}");
    v.remove(0)
}

const A: (&str, &str) = ("broker-a", "10.0.0.1:10911");
const B: (&str, &str) = ("broker-b", "10.0.0.2:10911");

#[test]
fn first_send_looks_the_route_up_then_sends_to_the_master() {
    let mut w = World::new(1);
    let id = w.send("T");
    let r = one(w.out());
    assert_eq!(r.peer, Peer::NameServer(0));
    assert_eq!(r.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
    assert_eq!(r.ext["topic"], "T");
    assert_eq!(w.s.poll_timeout(), Some(t(3000)), "route request timeout");
    w.reply(&r, 0, &[], route(&[A], 4).as_bytes());
    let s = one(w.out());
    assert_eq!(s.peer, Peer::Broker(BrokerId(0)));
    assert_eq!(w.s.broker_addr(BrokerId(0)), Some("10.0.0.1:10911"));
    assert_eq!(s.code, RequestCode::SEND_MESSAGE_V2.0);
    assert!(!s.oneway);
    assert_eq!(s.body, b"xxxxx");
    // The exact V2 header (single-letter keys), checked through the typed decoder.
    let f = {
        let mut buf = [0u8; 1024];
        let _ = &mut buf;
        s.ext.clone()
    };
    assert_eq!(f["a"], "pg");
    assert_eq!(f["b"], "T");
    assert_eq!(f["c"], "TBW102");
    assert_eq!(f["d"], "4");
    assert_eq!(f["i"], PROPS);
    assert_eq!(f["n"], "broker-a");
    assert_eq!(f["g"], "1700000000000");
    let _ = SendMessageRequestHeaderV2::decode;
    // Java 4.9 with 3 s: the attempt's deadline is the send's.
    assert_eq!(w.s.poll_timeout(), Some(t(3000)));
    w.now = t(40);
    w.stored(&s, 17);
    let r = w.done(id).expect("done").expect("stored");
    assert_eq!(r.status, SendStatus::SendOk);
    assert_eq!(r.broker, BrokerId(0));
    assert_eq!(r.queue_offset, Some(17));
    assert_eq!(r.offset_msg_id.as_str(), "0A0000010000");
    assert_eq!(r.attempts, 1);
    // A second send goes straight to a broker, round robin to the next queue.
    let id2 = w.send("T");
    let s2 = one(w.out());
    assert_ne!(s2.ext["e"], s.ext["e"], "next queue");
    w.stored(&s2, 18);
    assert!(w.done(id2).unwrap().is_ok());
    assert_eq!(w.s.stats().attempts, 2);
}

#[test]
fn unknown_topic_falls_back_to_tbw102_capped_at_four_queues() {
    let mut w = World::new(1);
    let id = w.send("NewTopic");
    let r = one(w.out());
    w.reply(&r, ResponseCode::TOPIC_NOT_EXIST.0, &[], b"");
    let d = one(w.out());
    assert_eq!(d.peer, Peer::NameServer(0));
    assert_eq!(d.ext["topic"], "TBW102");
    w.reply(&d, 0, &[], route(&[A], 8).as_bytes());
    let tid = w.s.topic(w.now, "NewTopic").unwrap();
    assert!(w.s.from_default_topic(tid));
    assert_eq!(
        w.s.publish_queues(tid).len(),
        4,
        "capped at defaultTopicQueueNums"
    );
    assert!(
        w.s.subscribe_queues(tid).is_empty(),
        "a topic that does not exist has nothing to consume"
    );
    let s = one(w.out());
    assert_eq!(s.ext["b"], "NewTopic");
    w.stored(&s, 0);
    assert!(w.done(id).unwrap().is_ok());
}

#[test]
fn the_template_itself_missing_is_looked_up_once() {
    let mut w = World::new(1);
    let tid = w.s.topic(w.now, "TBW102").unwrap();
    let r = one(w.out());
    assert_eq!(r.ext["topic"], "TBW102");
    w.reply(&r, ResponseCode::TOPIC_NOT_EXIST.0, &[], b"");
    assert!(w.out().is_empty(), "not asked again on its own behalf");
    assert!(w.s.publish_queues(tid).is_empty());
    assert!(
        !w.s.name_servers_unreachable([tid]),
        "the NameServer answered"
    );
}

#[test]
fn template_missing_too_fails_the_send_at_once_with_no_route() {
    let mut w = World::new(1);
    let id = w.send("NewTopic");
    let r = one(w.out());
    w.reply(&r, ResponseCode::TOPIC_NOT_EXIST.0, &[], b"");
    let d = one(w.out());
    w.reply(&d, ResponseCode::TOPIC_NOT_EXIST.0, &[], b"");
    match w.done(id) {
        Some(Err(SendFailure::Plan { error, .. })) => {
            assert_eq!(error.kind(), SendErrorKind::NoRoute)
        }
        other => panic!("{other:?}"),
    }
    // The lookup is retried after the back-off (1 s), not at once.
    assert!(w.out().is_empty());
    assert_eq!(w.s.poll_timeout(), Some(t(1000)));
    w.advance_to(t(999));
    assert!(w.out().is_empty(), "nothing at t-1");
    w.advance_to(t(1000));
    assert_eq!(one(w.out()).ext["topic"], "NewTopic");
}

#[test]
fn name_server_failover_on_timeout_and_on_close() {
    let mut w = World::new(3);
    let first = w.s.name_server();
    w.s.topic(w.now, "T").unwrap();
    let r = one(w.out());
    assert_eq!(r.peer, Peer::NameServer(first));
    // No answer within 3 s: the next NameServer is asked at once.
    w.advance_to(t(2999));
    assert!(w.out().is_empty());
    w.advance_to(t(3000));
    let r2 = one(w.out());
    let second = (first + 1) % 3;
    assert_eq!(r2.peer, Peer::NameServer(second));
    // That one closes the connection: the third is asked at once.
    w.s.handle_closed(w.now, r2.peer, TransportError::ConnectionClosed);
    let r3 = one(w.out());
    assert_eq!(r3.peer, Peer::NameServer((first + 2) % 3));
    // A late answer from the first NameServer is dropped and counted.
    w.reply(&r, 0, &[], route(&[A], 4).as_bytes());
    assert_eq!(w.s.stats().late_responses, 1);
    w.reply(&r3, 0, &[], route(&[A], 4).as_bytes());
    w.send("T");
    assert_eq!(one(w.out()).peer, Peer::Broker(BrokerId(0)));
    // The cursor stays on the NameServer that worked.
    assert_eq!(w.s.name_server(), (first + 2) % 3);
}

#[test]
fn no_name_server_answering_fails_the_waiting_sends_at_once() {
    let mut w = World::new(2);
    let id = w.send("T");
    let tid = w.s.topic(w.now, "T").unwrap();
    let r = one(w.out());
    w.s.handle_closed(w.now, r.peer, TransportError::ConnectFailed);
    w.drain();
    assert!(w.done(id).is_none(), "the other NameServer is asked first");
    let r2 = one(w.out());
    assert_ne!(r2.peer, r.peer);
    w.s.handle_closed(w.now, r2.peer, TransportError::ConnectFailed);
    w.drain();
    // Both failed in this round: the send ends now, and says why there is no route (Java:
    // "No route info of this topic", from connect failures to every NameServer).
    assert_eq!(w.done(id), Some(Err(SendFailure::NoNameServer)));
    assert!(w.s.route_unreachable(tid));
    assert!(w.s.name_servers_unreachable([tid]));
    assert!(
        !w.s.name_servers_unreachable([]),
        "nothing asked, nothing unanswered"
    );
    let h = w.s.route_health();
    assert_eq!((h.topics, h.routed, h.unreachable), (1, 0, 1));
    assert!(w.events.contains(&Event::RouteFailed(tid)));
    // Lookups go on with back-off (two failures: 2 s).
    assert!(w.out().is_empty());
    assert_eq!(w.s.poll_timeout(), Some(t(2000)));
    w.advance_to(t(2000));
    let r3 = one(w.out());
    w.reply(&r3, 0, &[], route(&[A], 1).as_bytes());
    assert!(!w.s.route_unreachable(tid));
    assert!(!w.s.name_servers_unreachable([tid]));
    let h = w.s.route_health();
    assert_eq!((h.topics, h.routed, h.unreachable), (1, 1, 0));
}

#[test]
fn route_is_refreshed_periodically_and_a_moved_broker_reconnects() {
    let mut w = World::with(&cfg(1));
    let id = w.send("T");
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A], 2).as_bytes());
    let s = one(w.out());
    w.stored(&s, 1);
    assert!(w.done(id).unwrap().is_ok());
    assert!(w.out().is_empty());
    // Heartbeat at 1 s, then every 30 s; route refresh at 30 s.
    w.advance_to(t(1000));
    let hb = one(w.out());
    assert_eq!(hb.peer, Peer::Broker(BrokerId(0)));
    assert_eq!(hb.code, RequestCode::HEART_BEAT.0);
    let body = core::str::from_utf8(&hb.body).unwrap();
    assert!(body.starts_with(r#"{"clientID":"10.0.0.2@gw""#), "{body}");
    assert!(body.contains(r#"{"groupName":"pg"}"#), "{body}");
    w.reply(&hb, 0, &[], b"");
    assert_eq!(w.s.stats().heartbeats_ok, 1);
    w.advance_to(t(29_999));
    assert!(w.out().is_empty());
    w.advance_to(t(30_000));
    let r = one(w.out());
    assert_eq!(r.ext["topic"], "T");
    // broker-a moved to a new address.
    w.reply(
        &r,
        0,
        &[],
        route(&[("broker-a", "10.0.0.9:10911")], 2).as_bytes(),
    );
    assert!(
        w.events
            .contains(&Event::Reconnect(Peer::Broker(BrokerId(0))))
    );
    assert_eq!(w.s.broker_addr(BrokerId(0)), Some("10.0.0.9:10911"));
    w.advance_to(t(31_000));
    assert_eq!(one(w.out()).code, RequestCode::HEART_BEAT.0);
}

#[test]
fn broker_lost_mid_send_retries_on_another_broker() {
    let mut w = World::new(1);
    let id = w.send("T");
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A, B], 1).as_bytes());
    let s1 = one(w.out());
    w.now = t(10);
    w.s.handle_closed(w.now, s1.peer, TransportError::ConnectionClosed);
    let s2 = one(w.out());
    assert_ne!(s2.peer, s1.peer, "4.9 avoids the broker that failed");
    assert_eq!(s2.ext["a"], "pg");
    w.stored(&s2, 5);
    let r = w.done(id).unwrap().unwrap();
    assert_eq!(r.attempts, 2);
    // The answer to the first attempt arriving late on the old connection is dropped.
    w.reply(
        &s1,
        0,
        &[("msgId", "X"), ("queueId", "0"), ("queueOffset", "1")],
        b"",
    );
    assert_eq!(w.s.stats().late_responses, 1);
    // A send that succeeded in the end does not refresh the route.
    assert!(w.out().is_empty());
    // Refused by one broker, with another in the route: the retry goes there at once, no
    // waiting for the route (`Features::MASTER_SWITCH` waits only with nowhere else to go).
    let mut w = World::new(1);
    let id = w.send("T");
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A, B], 1).as_bytes());
    let s1 = one(w.out());
    w.s.handle_closed(w.now, s1.peer, TransportError::ConnectFailed);
    let s2 = one(w.out());
    assert_eq!(s2.code, RequestCode::SEND_MESSAGE_V2.0);
    assert_ne!(s2.peer, s1.peer);
    w.stored(&s2, 6);
    assert_eq!(w.done(id).unwrap().unwrap().attempts, 2);
}

#[test]
fn broker_code_is_retried_and_the_remark_kept_when_all_fail() {
    let mut w = World::new(1);
    let id = w.send("T");
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A, B], 1).as_bytes());
    let mut last = None;
    for _ in 0..3 {
        let s = one(w.out());
        last = Some(s.peer);
        let f = rejected(14, s.opaque, "service not available now");
        assert_eq!(
            w.s.handle_frame(w.now, s.peer, &f).unwrap(),
            Incoming::Handled
        );
        w.drain();
    }
    match w.done(id) {
        Some(Err(SendFailure::Plan {
            error,
            remark,
            broker,
        })) => {
            // The failure names the broker of the last attempt.
            assert_eq!(broker.map(Peer::Broker), last);
            assert_eq!(error.kind(), SendErrorKind::Broker { code: 14 });
            assert_eq!(error.attempts(), 3);
            assert_eq!(remark.as_str(), "service not available now");
        }
        other => panic!("{other:?}"),
    }
    // The failed send refreshes its topic's route, at most once a second.
    let refresh = one(w.out());
    assert_eq!(refresh.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
    w.reply(&refresh, 0, &[], route(&[A, B], 1).as_bytes());
    let id = w.send("T");
    let s = one(w.out());
    w.s.handle_closed(w.now, s.peer, TransportError::ConnectionClosed);
    let s = one(w.out());
    w.s.handle_closed(w.now, s.peer, TransportError::ConnectionClosed);
    let s = one(w.out());
    w.s.handle_closed(w.now, s.peer, TransportError::ConnectionClosed);
    w.drain();
    assert!(matches!(w.done(id), Some(Err(_))));
    assert!(w.out().is_empty(), "no second refresh within the second");
}

#[test]
fn attempt_timeout_and_late_answer() {
    let mut w = World::with(&cfg(1));
    let id = w.send("T");
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A], 1).as_bytes());
    let s = one(w.out());
    assert_eq!(w.s.poll_timeout(), Some(t(1000)), "heartbeat first");
    w.advance_to(t(1000));
    let hb = one(w.out());
    assert_eq!(hb.code, RequestCode::HEART_BEAT.0);
    assert_eq!(w.s.poll_timeout(), Some(t(3000)));
    w.advance_to(t(3000));
    match w.done(id) {
        Some(Err(f @ SendFailure::Plan { error, .. })) => {
            assert_eq!(error.attempts(), 1);
            assert!(error.is_retryable());
            assert!(f.is_retryable(), "an outbox keeps a timed-out message");
        }
        other => panic!("{other:?}"),
    }
    assert!(!w.s.is_live(s.opaque));
    w.stored(&s, 3);
    assert_eq!(w.s.stats().late_responses, 1);
    // An opaque never issued, and a response on the wrong connection, are dropped too.
    let f = response(0, 123_456, &[], b"");
    assert_eq!(
        w.s.handle_frame(w.now, Peer::Broker(BrokerId(0)), &f)
            .unwrap(),
        Incoming::Handled
    );
    assert_eq!(
        w.s.handle_frame(
            w.now,
            Peer::NameServer(0),
            &response(0, hb.opaque, &[], b""),
        )
        .unwrap(),
        Incoming::Handled
    );
    assert_eq!(w.s.stats().late_responses, 3);
}

#[test]
fn oneway_ends_when_written_and_malformed_frames_are_errors() {
    let mut w = World::new(1);
    let tid = w.s.topic(w.now, "T").unwrap();
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A], 1).as_bytes());
    let args = SendArgs::new(RetryConfig::java49(SendMode::Oneway), 5, 1);
    let id = w.s.send(w.now, tid, &args).unwrap();
    let s = one(w.out());
    assert!(s.oneway);
    let r = w.done(id).unwrap().unwrap();
    assert_eq!(r.queue_offset, None);
    assert_eq!(
        w.s.handle_frame(w.now, s.peer, b"\x00\x00\x00\x02\x00\x00"),
        Err(FrameError::Framing(crate::wire::FrameError::Truncated))
    );
    let r =
        w.s.handle_frame(w.now, s.peer, b"\x00\x00\x00\x06\x00\x00\x00\x02{x");
    assert!(
        matches!(
            r,
            Err(FrameError::Header(crate::wire::DecodeError::Json(_)))
        ),
        "{r:?}"
    );
}

#[test]
fn buffers_too_small_fail_only_that_send() {
    let mut w = World::new(1);
    let id = w.send("T");
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A], 1).as_bytes());
    let mut tiny = [0u8; 40];
    assert!(w.s.poll_transmit(w.now, &mut tiny, &Props).is_none());
    w.drain();
    assert!(matches!(w.done(id), Some(Err(SendFailure::Encode(_)))));
    assert!(w.s.can_send());
}

#[test]
fn capacities_are_reported_not_exceeded() {
    let mut w = World::new(1);
    for i in 0..4 {
        w.s.topic(w.now, &format!("T{i}")).unwrap();
    }
    assert_eq!(w.s.topic(w.now, "T9"), Err(SubmitError::TooManyTopics));
    let long = "x".repeat(200);
    assert_eq!(w.s.topic(w.now, &long), Err(SubmitError::TopicTooLong));
    let tid = w.s.topic(w.now, "T0").unwrap();
    let args = SendArgs::new(RetryConfig::java49(SendMode::Sync), 1, 1);
    for _ in 0..4 {
        w.s.send(w.now, tid, &args).unwrap();
    }
    assert_eq!(w.s.send(w.now, tid, &args), Err(SubmitError::TooManySends));
    assert_eq!(
        w.s.send(w.now, TopicId(9), &args),
        Err(SubmitError::UnknownTopic)
    );
}

#[test]
fn a_timeout_on_a_silent_connection_asks_for_a_reconnect() {
    let mut w = World::with(&cfg(1));
    let id = w.send("T");
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A], 1).as_bytes());
    let s = one(w.out());
    w.advance_to(t(3000));
    assert!(matches!(w.done(id), Some(Err(_))));
    // The heartbeat at 1 s went unanswered too: the broker said nothing since the send.
    assert!(
        w.events
            .contains(&Event::Reconnect(Peer::Broker(BrokerId(0))))
    );
    assert!(!w.s.is_live(s.opaque));
    // A route request that times out closes that NameServer connection.
    let mut w = World::new(2);
    w.s.topic(w.now, "T").unwrap();
    let r = one(w.out());
    w.advance_to(t(3000));
    assert!(w.events.contains(&Event::Reconnect(r.peer)));
}

#[test]
fn a_timeout_on_a_connection_that_answers_keeps_it() {
    let mut w = World::with(&cfg(1));
    let id = w.send("T");
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A], 1).as_bytes());
    let _s = one(w.out());
    w.advance_to(t(1000));
    let hb = one(w.out());
    assert_eq!(hb.code, RequestCode::HEART_BEAT.0);
    w.reply(&hb, 0, &[], b"");
    w.advance_to(t(3000));
    assert!(matches!(w.done(id), Some(Err(_))));
    assert!(!w.events.iter().any(|e| matches!(e, Event::Reconnect(_))));
}

#[test]
fn route_events_tell_when_a_topic_can_be_used() {
    let mut w = World::new(1);
    let tid = w.s.topic(w.now, "T").unwrap();
    let r = one(w.out());
    w.s.handle_closed(w.now, r.peer, TransportError::ConnectFailed);
    w.drain();
    assert_eq!(w.events, [Event::RouteFailed(tid)]);
    w.events.clear();
    w.advance_to(t(1000));
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A], 2).as_bytes());
    assert_eq!(w.events, [Event::RouteUpdated(tid)]);
    assert_eq!(w.s.find_broker("broker-a"), Some(BrokerId(0)));
    assert_eq!(w.s.find_broker("broker-x"), None);
}

#[test]
fn a_route_lookup_refused_for_the_credentials_ends_waiting_sends_as_authentication() {
    // A 5.x proxy with authentication on checks the route lookup's signature first.
    let mut w = World::new(1);
    let id = w.send("T");
    let r = one(w.out());
    assert_eq!(r.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
    let f = rejected(1, r.opaque, "check signature failed.");
    assert_eq!(
        w.s.handle_frame(w.now, r.peer, &f).unwrap(),
        Incoming::Handled
    );
    w.drain();
    match w.done(id) {
        Some(Err(SendFailure::Authentication {
            code,
            attempts,
            remark,
        })) => {
            assert_eq!((code, attempts), (1, 0));
            assert_eq!(remark.as_str(), "check signature failed.");
        }
        other => panic!("{other:?}"),
    }
    // Any other refusal of a lookup still ends it as no route.
    let id = w.send("U");
    let r = one(w.out());
    let f = rejected(1, r.opaque, "disk full");
    let _ = w.s.handle_frame(w.now, r.peer, &f).unwrap();
    w.drain();
    match w.done(id) {
        Some(Err(SendFailure::Plan { error, .. })) => {
            assert_eq!(error.kind(), SendErrorKind::NoRoute)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn refused_credentials_end_the_send_without_retry() {
    let mut w = World::new(1);
    let id = w.send("T");
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A, B], 1).as_bytes());
    let s = one(w.out());
    let f = rejected(16, s.opaque, "User:rmq is not found");
    assert_eq!(
        w.s.handle_frame(w.now, s.peer, &f).unwrap(),
        Incoming::Handled
    );
    w.drain();
    match w.done(id) {
        Some(Err(f)) if !f.is_retryable() => {
            let SendFailure::Authentication {
                code,
                attempts,
                remark,
            } = f
            else {
                panic!("{f:?}")
            };
            assert_eq!((code, attempts), (16, 1));
            assert_eq!(remark.as_str(), "User:rmq is not found");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        w.out()
            .iter()
            .all(|f| f.code != RequestCode::SEND_MESSAGE_V2.0),
        "no retry"
    );
}

struct Signed;
impl Outbound for Signed {
    fn properties(&self, _: SendId) -> &str {
        PROPS
    }
    fn body(&self, _: SendId) -> &[u8] {
        b"xxxxx"
    }
    fn credentials(&self) -> Option<crate::acl::Credentials<'_>> {
        Some(crate::acl::Credentials {
            access_key: "ak",
            secret_key: "sk",
            security_token: None,
        })
    }
}

#[test]
fn requests_are_signed_with_the_lent_credentials() {
    let mut w = World::new(1);
    w.send("T");
    let mut buf = [0u8; 1024];
    let tx = w.s.poll_transmit(w.now, &mut buf, &Signed).unwrap();
    let f = Frame::new_checked(&buf[..tx.len]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    assert!(h.get("AccessKey").unwrap().eq_str("ak"));
    let route_sig = crate::acl::SignedFields::sign(
        &Signed.credentials().unwrap(),
        GetRouteInfoRequestHeader {
            topic: "T",
            accept_standard_json_only: None,
        },
        b"",
    )
    .unwrap();
    assert!(h.get("Signature").unwrap().eq_str(route_sig.signature()));
    let resp = response(0, tx.opaque, &[], route(&[A], 1).as_bytes());
    assert_eq!(
        w.s.handle_frame(w.now, tx.peer, &resp).unwrap(),
        Incoming::Handled
    );
    let tx = w.s.poll_transmit(w.now, &mut buf, &Signed).unwrap();
    let mut frame = buf[..tx.len].to_vec();
    frame.extend_from_slice(b"xxxxx");
    let f = Frame::new_checked(&frame[..]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    assert!(h.get("AccessKey").unwrap().eq_str("ak"));
    assert!(h.get("Signature").is_some());
    assert!(
        h.get("b").unwrap().eq_str("T"),
        "the send header is still there"
    );
}

#[test]
fn unregister_goes_to_every_known_broker() {
    let mut w = World::new(1);
    w.s.topic(w.now, "T").unwrap();
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A, B], 1).as_bytes());
    assert_eq!(w.s.unregister_all(w.now), 2);
    let out = w.out();
    assert_eq!(out.len(), 2);
    for f in &out {
        assert_eq!(f.code, RequestCode::UNREGISTER_CLIENT.0);
        assert_eq!(f.ext["clientID"], "10.0.0.2@gw");
        assert_eq!(f.ext["producerGroup"], "pg");
    }
    assert_eq!(w.s.pending_requests(), 2);
    for f in &out {
        w.reply(f, 0, &[], b"");
    }
    assert_eq!(w.s.pending_requests(), 0);
}

#[test]
fn a_broker_that_fails_is_isolated_and_counted() {
    let mut w = World::new(1);
    let id = w.send("T");
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A, B], 1).as_bytes());
    let s1 = one(w.out());
    w.now = t(10);
    w.s.handle_closed(w.now, s1.peer, TransportError::ConnectionClosed);
    let s2 = one(w.out());
    w.stored(&s2, 1);
    assert!(w.done(id).unwrap().is_ok());
    let st = w.s.stats();
    assert_eq!((st.attempts, st.retries, st.brokers_isolated), (2, 1, 1));
    let Peer::Broker(b1) = s1.peer else { panic!() };
    assert!(!w.s.fault_table().is_available(w.now, b1));
}

struct ConsumerOut;
impl Outbound for ConsumerOut {
    fn properties(&self, _: SendId) -> &str {
        ""
    }
    fn heartbeat_body(&self, buf: &mut [u8]) -> Option<usize> {
        let b = br#"{"clientID":"c","consumerDataSet":[{"groupName":"cg"}]}"#;
        buf.get_mut(..b.len())?.copy_from_slice(b);
        Some(b.len())
    }
}

#[test]
fn runtime_calls_are_correlated_and_fail_typed() {
    let mut c = cfg(1);
    c.producer_group = "";
    c.consumer_group = Some("cg");
    let mut w = World::with(&c);
    let tid = w.s.topic(w.now, "T").unwrap();
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A, B], 2).as_bytes());
    // Subscribe queues come with the route.
    assert_eq!(w.s.subscribe_queues(tid).len(), 4);
    let b = w.s.find_broker("broker-b").unwrap();
    let mut buf = [0u8; 512];
    let hdr = [("consumerGroup", "cg")];
    let tx =
        w.s.call(
            w.now,
            Peer::Broker(b),
            RequestCode::GET_CONSUMER_LIST_BY_GROUP,
            Some(&hdr[..]),
            b"",
            crate::time::Duration::from_millis(3000),
            &mut buf,
            &ConsumerOut,
        )
        .unwrap();
    let f = Frame::new_checked(&buf[..tx.len]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    assert_eq!(h.code(), RequestCode::GET_CONSUMER_LIST_BY_GROUP.0);
    assert_eq!(h.opaque(), tx.opaque);
    assert!(w.s.is_live(tx.opaque));
    assert!(w.out().is_empty(), "the runtime wrote it: not queued");
    let resp = response(0, tx.opaque, &[], b"{}");
    assert_eq!(
        w.s.handle_frame(w.now, Peer::Broker(b), &resp),
        Ok(Incoming::Response(tx.opaque))
    );
    assert!(!w.s.is_live(tx.opaque));
    // Unanswered: CallFailed at the deadline; a lost connection fails the others at once.
    let call = |w: &mut World, buf: &mut [u8]| {
        w.s.call(
            w.now,
            Peer::Broker(b),
            RequestCode::QUERY_CONSUMER_OFFSET,
            None::<()>,
            b"",
            crate::time::Duration::from_millis(100),
            buf,
            &ConsumerOut,
        )
        .unwrap()
        .opaque
    };
    let o1 = call(&mut w, &mut buf);
    w.advance_to(t(100));
    assert!(w.events.contains(&Event::CallFailed {
        opaque: o1,
        error: TransportError::TimedOut
    }));
    let o2 = call(&mut w, &mut buf);
    w.s.handle_closed(w.now, Peer::Broker(b), TransportError::ConnectionClosed);
    w.drain();
    assert!(w.events.contains(&Event::CallFailed {
        opaque: o2,
        error: TransportError::ConnectionClosed
    }));
    // A request from the broker is handed to the runtime.
    let mut cmd = CommandRepr::request(
        RequestCode::NOTIFY_CONSUMER_IDS_CHANGED,
        77,
        version::V5_3_3,
        None::<()>,
    );
    cmd.flag = flag::ONEWAY;
    let mut fb = [0u8; 256];
    let n = cmd
        .emit_frame_prefix_and_header(SerializeType::JSON, 0, &mut fb)
        .unwrap();
    assert_eq!(
        w.s.handle_frame(w.now, Peer::Broker(b), &fb[..n]),
        Ok(Incoming::Request {
            code: RequestCode::NOTIFY_CONSUMER_IDS_CHANGED.0,
            opaque: 77
        })
    );
    // The consumer's heartbeat body and unregister.
    w.s.heartbeat_now(w.now);
    let mut buf = [0u8; 1024];
    let mut hbs = 0;
    while let Some(tx) = w.s.poll_transmit(w.now, &mut buf, &ConsumerOut) {
        let f = Frame::new_checked(&buf[..tx.len]).unwrap();
        assert!(
            f.body()
                .starts_with(br#"{"clientID":"c","consumerDataSet""#)
        );
        hbs += 1;
    }
    assert_eq!(hbs, 2);
    assert_eq!(w.s.heartbeats_pending(), 2);
    assert_eq!(w.s.unregister_all(w.now), 2);
    let u = w.out();
    assert_eq!(
        u[0].ext.get("consumerGroup").map(StdString::as_str),
        Some("cg")
    );
    assert!(!u[0].ext.contains_key("producerGroup"));
}

#[test]
fn check_refuses_what_new_refuses_and_build_never_panics() {
    let long = "g".repeat(MAX_GROUP_LEN + 1);
    let long_id = "c".repeat(MAX_CLIENT_ID_LEN + 1);
    let mut cases = StdVec::new();
    cases.push((cfg(0), Some(ConfigError::NameServers)));
    cases.push((cfg(256), Some(ConfigError::NameServers)));
    let mut c = cfg(1);
    c.producer_group = &long;
    cases.push((c, Some(ConfigError::GroupTooLong)));
    let mut c = cfg(1);
    c.consumer_group = Some(&long);
    cases.push((c, Some(ConfigError::GroupTooLong)));
    let mut c = cfg(1);
    c.client_id = &long_id;
    cases.push((c, Some(ConfigError::ClientIdTooLong)));
    let mut c = cfg(2);
    c.producer_group = &long[..MAX_GROUP_LEN];
    c.client_id = &long_id[..MAX_CLIENT_ID_LEN];
    cases.push((c, None));
    for (c, want) in cases {
        assert_eq!(c.check().err(), want, "{c:?}");
        assert_eq!(S::new(&c, t(0)).err(), want, "{c:?}");
        // Unchecked: clamped, never a panic; usable at once.
        let mut s = S::build(&c, t(0));
        assert!(usize::from(s.name_server()) < c.name_servers.clamp(1, 255));
        let _ = s.topic(t(0), "T");
        let mut buf = [0u8; 512];
        s.handle_timeout(t(100_000));
        let _ = s.poll_transmit(t(100_000), &mut buf, &Props);
    }
}

#[test]
fn sends_with_a_profile_left_out_are_refused() {
    #[derive(Debug)]
    struct Lean;
    impl Features for Lean {
        const ROCKETMQ_HEADERS: bool = false;
        const HEARTBEATS: bool = false;
        const BROKER_REMARKS: bool = false;
        const CONSUMER: bool = false;
        const PROFILE_JAVA5: bool = false;
        const PROFILE_ADAPTIVE: bool = false;
    }
    let mut lean = Session::<1, 1, 4, 4, 2, 512, Lean>::new(&cfg(1), t(0)).unwrap();
    let mut full = S::new(&cfg(1), t(0)).unwrap();
    let (lt, ft) = (
        lean.topic(t(0), "T").unwrap(),
        full.topic(t(0), "T").unwrap(),
    );
    let args = |r: RetryConfig| SendArgs::new(r, 1, 1);
    for refused in [RetryConfig::java5, RetryConfig::adaptive] {
        let a = args(refused(SendMode::Sync));
        assert_eq!(lean.send(t(0), lt, &a), Err(SubmitError::ProfileLeftOut));
        assert!(full.send(t(0), ft, &a).is_ok());
    }
    // Nothing was taken by the refusals: both of the lean session's slots are free.
    for kept in [RetryConfig::plain, RetryConfig::java49] {
        assert!(lean.send(t(0), lt, &args(kept(SendMode::Sync))).is_ok());
    }
}

impl World {
    fn send_to(&mut self, topic: &str, target: Target<'_>) -> SendId {
        let tid = self.s.topic(self.now, topic).unwrap();
        let mut args = SendArgs::new(RetryConfig::java49(SendMode::Sync), 5, 1_700_000_000_000);
        args.target = target;
        self.s.send(self.now, tid, &args).unwrap()
    }
}

#[test]
fn a_targeted_send_without_a_route_fails_within_one_send_timeout() {
    // Two NameServers that never answer: the lookups fail over, and the send (3 s budget,
    // Java 4.9) ends when its budget is spent, not a second budget later.
    let mut w = World::new(2);
    let target = Target::Queue {
        broker: "broker-a",
        queue_id: 1,
    };
    let id = w.send_to("T", target);
    let r = one(w.out());
    assert_eq!(r.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
    w.advance_to(t(2999));
    assert!(w.done(id).is_none(), "nothing at t-1");
    w.advance_to(t(3000));
    assert_eq!(w.done(id), Some(Err(SendFailure::NoNameServer)));
    // The second NameServer is still asked (for later sends).
    assert_eq!(one(w.out()).code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
}

#[test]
fn a_targeted_send_whose_route_comes_late_keeps_the_deadline_it_started_with() {
    let mut w = World::new(1);
    let id = w.send_to("T", Target::Index(0));
    let r = one(w.out());
    w.advance_to(t(2500));
    w.reply(&r, 0, &[], route(&[A], 4).as_bytes());
    let s = one(w.out());
    assert_eq!(s.ext["e"], "0");
    // The attempt may run until 3 s after the send started, not 3 s after the route came.
    assert_eq!(w.s.poll_timeout(), Some(t(3000)));
    w.advance_to(t(3000));
    match w.done(id) {
        Some(Err(SendFailure::Plan { error, .. })) => {
            assert_eq!(
                error.kind(),
                SendErrorKind::Transport(TransportError::TimedOut)
            );
            assert_eq!(error.attempts(), 1, "a fixed queue gets one attempt");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn targets_are_resolved_on_the_route_when_it_arrives() {
    let mut w = World::new(1);
    let to_b = w.send_to(
        "T",
        Target::Queue {
            broker: "broker-b",
            queue_id: 1,
        },
    );
    let by_index = w.send_to("T", Target::Index(6));
    let key = crate::select::java_string_hash("order-42");
    let by_key = w.send_to("T", Target::Hash(key));
    let nowhere = w.send_to(
        "T",
        Target::Queue {
            broker: "broker-x",
            queue_id: 0,
        },
    );
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A, B], 2).as_bytes());
    assert_eq!(w.done(nowhere), Some(Err(SendFailure::NoSuchBroker)));
    let tid = w.s.topic(w.now, "T").unwrap();
    let queues: StdVec<(u16, i32)> =
        w.s.publish_queues(tid)
            .iter()
            .map(|q| (q.broker.0, q.queue_id))
            .collect();
    let sent = w.out();
    assert_eq!(sent.len(), 3);
    let queue_of = |s: &Sent| {
        let Peer::Broker(b) = s.peer else {
            panic!("{s:?}")
        };
        (b.0, s.ext["e"].parse::<i32>().unwrap())
    };
    let b = w.s.find_broker("broker-b").unwrap();
    assert_eq!(queue_of(&sent[0]), (b.0, 1));
    assert_eq!(queue_of(&sent[1]), queues[6 % 4]);
    let h = usize::try_from((key % 4).unsigned_abs()).unwrap();
    assert_eq!(queue_of(&sent[2]), queues[h]);
    for (s, id) in sent.iter().zip([to_b, by_index, by_key]) {
        w.stored(s, 1);
        assert!(w.done(id).unwrap().is_ok());
    }
}

#[test]
fn a_chosen_queue_is_asked_for_once_the_route_is_known_within_the_deadline() {
    let mut w = World::new(1);
    let id = w.send_to("T", Target::Choose);
    let late = w.send_to("T", Target::Choose);
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A], 4).as_bytes());
    assert!(w.events.contains(&Event::ChooseQueue { id, queues: 4 }));
    assert!(w.events.contains(&Event::ChooseQueue {
        id: late,
        queues: 4
    }));
    assert!(w.out().is_empty(), "nothing is sent before the choice");
    assert!(w.s.choose_queue(w.now, id, 7));
    assert!(!w.s.choose_queue(w.now, id, 1), "chosen once");
    let s = one(w.out());
    assert_eq!(s.ext["e"], "3");
    w.stored(&s, 1);
    assert!(w.done(id).unwrap().is_ok());
    // The other is never chosen: it ends at its deadline.
    w.advance_to(t(2999));
    assert!(w.done(late).is_none());
    w.advance_to(t(3000));
    match w.done(late) {
        Some(Err(SendFailure::Plan { error, .. })) => {
            assert_eq!(error.kind(), SendErrorKind::CallTimeout);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_chooser_on_a_known_route_is_asked_at_once_and_still_bound_by_the_deadline() {
    let mut w = World::new(1);
    w.send("T");
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A], 4).as_bytes());
    let first = one(w.out());
    w.stored(&first, 0);
    let id = w.send_to("T", Target::Choose);
    w.drain();
    assert!(w.events.contains(&Event::ChooseQueue { id, queues: 4 }));
    assert_eq!(w.s.poll_timeout(), Some(t(3000)));
    w.advance_to(t(3000));
    assert!(matches!(w.done(id), Some(Err(SendFailure::Plan { .. }))));
}

#[test]
fn a_session_without_slaves_keeps_none_and_reads_from_the_master() {
    #[derive(Debug)]
    struct MasterOnly;
    impl Features for MasterOnly {
        const ROCKETMQ_HEADERS: bool = false;
        const HEARTBEATS: bool = false;
        const BROKER_REMARKS: bool = false;
        const CONSUMER: bool = true;
        const SLAVES: bool = false;
    }
    let route = br#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.3:10911"},"brokerName":"broker-a","cluster":"c"}],"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":1,"topicSysFlag":0,"writeQueueNums":1}]}"#;
    let mut c = cfg(1);
    c.consumer_group = Some("cg");
    c.heartbeat = None;
    let mut lean = Session::<1, 1, 4, 4, 2, 512, MasterOnly>::new(&c, t(0)).unwrap();
    let mut full = S::new(&c, t(0)).unwrap();
    let mut buf = [0u8; 1024];
    let (lt, ft) = (
        lean.topic(t(0), "T").unwrap(),
        full.topic(t(0), "T").unwrap(),
    );
    let tx = lean.poll_transmit(t(0), &mut buf, &Props).expect("lookup");
    let f = response(0, tx.opaque, &[], route);
    assert_eq!(lean.handle_frame(t(1), tx.peer, &f), Ok(Incoming::Handled));
    let tx = full.poll_transmit(t(0), &mut buf, &Props).expect("lookup");
    let f = response(0, tx.opaque, &[], route);
    assert_eq!(full.handle_frame(t(1), tx.peer, &f), Ok(Incoming::Handled));
    let b = BrokerId(0);
    assert!(!lean.subscribe_queues(lt).is_empty() && !full.subscribe_queues(ft).is_empty());
    // The full session knows the slave and reads from it when asked; the lean one never.
    assert_eq!(full.slave_addr(b), Some("10.0.0.3:10911"));
    assert_eq!(full.read_peer(b, true), Peer::Slave(b));
    assert_eq!(lean.slave_addr(b), None);
    assert_eq!(lean.read_peer(b, true), Peer::Broker(b));
    assert_eq!(lean.peer_addr(Peer::Broker(b)), Some("10.0.0.1:10911"));
}

impl World {
    fn send_timer(&mut self, topic: &str) -> SendId {
        let tid = self.s.topic(self.now, topic).unwrap();
        let mut args = SendArgs::new(RetryConfig::java49(SendMode::Sync), 5, 1_700_000_000_000);
        args.timer = true;
        self.s.send(self.now, tid, &args).unwrap()
    }

    fn reply_of(&mut self, v: i32, to: &Sent, code: i32, ext: &[(&str, &str)], body: &[u8]) {
        let f = response_of(v, code, to.opaque, ext, body);
        assert_eq!(
            self.s.handle_frame(self.now, to.peer, &f).unwrap(),
            Incoming::Handled
        );
        self.drain();
    }

    fn stored_by(&mut self, v: i32, to: &Sent) {
        let qid = to.ext["e"].clone();
        let ext = [
            ("msgId", "0A0000010000"),
            ("queueId", &*qid),
            ("queueOffset", "1"),
        ];
        self.reply_of(v, to, 0, &ext, b"");
    }
}

#[test]
fn a_timer_send_to_a_4x_broker_is_refused_before_anything_is_sent() {
    // A 4.9.7 cluster: the NameServer's answer says so before the broker has said anything.
    let mut w = World::new(1);
    let timer = w.send_timer("T");
    let r = one(w.out());
    w.reply_of(version::V4_9_7, &r, 0, &[], route(&[A], 4).as_bytes());
    assert!(w.out().is_empty(), "nothing written for the timer send");
    let refused = Some(Err(SendFailure::TimerUnsupported {
        broker_version: version::V4_9_7,
    }));
    assert_eq!(w.done(timer), refused);
    assert_eq!(w.s.stats().attempts, 1, "counted, not written");
    // A plain send still goes; the broker's own answer (4.9.7) then decides.
    let plain = w.send("T");
    let s = one(w.out());
    w.stored_by(version::V4_9_7, &s);
    assert!(w.done(plain).unwrap().is_ok());
    let timer = w.send_timer("T");
    assert!(w.out().is_empty());
    assert_eq!(w.done(timer), refused);
    assert!(
        !SendFailure::TimerUnsupported {
            broker_version: 407
        }
        .is_retryable()
    );
}

#[test]
fn a_timer_send_follows_the_brokers_own_version_once_it_answered() {
    // A 5.x NameServer in front of a broker that answers as 4.9.7: the broker's word wins.
    let mut w = World::new(1);
    let plain = w.send("T");
    let r = one(w.out());
    w.reply_of(version::V5_3_3, &r, 0, &[], route(&[A, B], 1).as_bytes());
    let s = one(w.out());
    let (old, new) = (
        s.peer,
        if s.peer == Peer::Broker(BrokerId(0)) {
            1
        } else {
            0
        },
    );
    w.stored_by(version::V4_9_7, &s);
    assert!(w.done(plain).unwrap().is_ok());
    // Round robin: the next send goes to the other broker, not heard from yet (the
    // NameServer's 5.3.3 stands for it), the one after to the 4.9.7 broker.
    let timer = w.send_timer("T");
    let s = one(w.out());
    assert_eq!(s.peer, Peer::Broker(BrokerId(new)));
    assert_ne!(s.peer, old);
    w.stored_by(version::V5_3_3, &s);
    assert!(w.done(timer).unwrap().is_ok());
    let timer = w.send_timer("T");
    assert!(w.out().is_empty());
    assert_eq!(
        w.done(timer),
        Some(Err(SendFailure::TimerUnsupported {
            broker_version: version::V4_9_7
        }))
    );
}

#[test]
fn a_timer_refused_for_good_ends_at_once_and_flow_control_is_retried() {
    use crate::producer::TimerRefusal;
    let mut w = World::new(1);
    let off = w.send_timer("T");
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A, B], 1).as_bytes());
    let s = one(w.out());
    let remark = "accurate timer message is not enabled, timerWheelEnable is false";
    let f = rejected(1, s.opaque, remark);
    assert_eq!(
        w.s.handle_frame(w.now, s.peer, &f).unwrap(),
        Incoming::Handled
    );
    w.drain();
    assert!(w.out().is_empty(), "not retried");
    match w.done(off) {
        Some(Err(SendFailure::TimerRefused {
            refusal: TimerRefusal::Disabled,
            code: 1,
            attempts: 1,
            remark: r,
        })) => assert_eq!(r.as_str(), remark),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.s.stats().brokers_isolated, 0, "no fault counted");
    // Flow control is retried on the other broker, as Java does.
    let busy = w.send_timer("T");
    let s = one(w.out());
    let remark = "timer message is under flow control, max num limit is 2";
    let f = rejected(1, s.opaque, remark);
    assert_eq!(
        w.s.handle_frame(w.now, s.peer, &f).unwrap(),
        Incoming::Handled
    );
    w.drain();
    let again = one(w.out());
    assert_ne!(again.peer, s.peer);
    w.stored(&again, 3);
    assert!(w.done(busy).unwrap().is_ok());
}

#[test]
fn a_recall_handle_in_a_send_response_is_pointed_out_in_the_frame() {
    let mut w = World::new(1);
    let id = w.send("T");
    let r = one(w.out());
    w.reply(&r, 0, &[], route(&[A], 4).as_bytes());
    let s = one(w.out());
    let qid = s.ext["e"].clone();
    let handle = "djEgVCBiIDUgaWQ=";
    let ext = [
        ("msgId", "0A0000010000"),
        ("queueId", qid.as_str()),
        ("queueOffset", "7"),
        ("recallHandle", handle),
    ];
    let f = response(0, s.opaque, &ext, b"");
    match w.s.handle_frame(w.now, s.peer, &f).unwrap() {
        Incoming::RecallHandle { send, start, end } => {
            assert_eq!(send, id);
            assert_eq!(&f[start..end], handle.as_bytes());
        }
        other => panic!("{other:?}"),
    }
    w.drain();
    let r = w.done(id).unwrap().unwrap();
    assert_eq!(r.queue_offset, Some(7), "an ordinary stored send otherwise");
}

/// A route of `broker-a` listing only a slave (brokerId 1) at `slave`: its master is gone.
impl World {
    /// One NameServer, and topic `T` routed to `brokers` with `queues` queues each, its first
    /// send stored.
    fn routed(brokers: &[(&str, &str)], queues: i32) -> Self {
        let mut w = World::new(1);
        let id = w.send("T");
        let r = one(w.out());
        w.reply(&r, 0, &[], route(brokers, queues).as_bytes());
        let s = one(w.out());
        w.stored(&s, 1);
        assert!(w.done(id).unwrap().is_ok());
        w
    }
}

fn masterless_route(slave: &str) -> StdString {
    format!(
        r#"{{"brokerDatas":[{{"brokerAddrs":{{"1":"{slave}"}},"brokerName":"broker-a","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}}]}}"#
    )
}

#[test]
fn sends_wait_within_their_deadline_while_the_route_lists_no_master() {
    let mut w = World::routed(&[A], 2);
    // The master dies: the attempt's connection closes, and the refresh that failure asks for
    // names only a slave (a controller-mode switch under way).
    let first = w.send("T");
    let s = one(w.out());
    w.now = t(10);
    w.s.handle_closed(w.now, s.peer, TransportError::ConnectionClosed);
    // No other broker to turn to: the retry waits for the route instead of going to the dead
    // address (4.9 and 5.x Java retry there at once, and are refused).
    let r = one(w.out());
    assert_eq!(r.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
    assert!(w.done(first).is_none(), "waits for the route");
    w.now = t(20);
    w.reply(&r, 0, &[], masterless_route("10.0.0.5:10911").as_bytes());
    // A new send does not fail with NoRoute: it waits, and does not look up on its own.
    w.now = t(30);
    let waiting = w.send("T");
    assert!(w.out().is_empty(), "no lookup per send while masterless");
    assert!(w.done(waiting).is_none());
    // The route is looked up again 100 ms after the masterless answer, then 200 ms after the
    // next one.
    assert_eq!(w.s.poll_timeout(), Some(t(120)));
    w.advance_to(t(119));
    assert!(w.out().is_empty());
    w.advance_to(t(120));
    let r = one(w.out());
    assert_eq!(r.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
    w.now = t(125);
    w.reply(&r, 0, &[], masterless_route("10.0.0.5:10911").as_bytes());
    assert!(w.done(waiting).is_none(), "still waiting");
    assert_eq!(w.s.poll_timeout(), Some(t(325)));
    w.advance_to(t(325));
    let r = one(w.out());
    // The slave became the master: the waiting send goes to it.
    w.now = t(330);
    w.reply(
        &r,
        0,
        &[],
        route(&[("broker-a", "10.0.0.5:10911")], 2).as_bytes(),
    );
    assert_eq!(w.s.broker_addr(BrokerId(0)), Some("10.0.0.5:10911"));
    let sent = w.out();
    assert_eq!(sent.len(), 2, "{sent:?}");
    for (i, s) in sent.iter().enumerate() {
        assert_eq!(s.code, RequestCode::SEND_MESSAGE_V2.0);
        w.stored(s, 2 + i as i64);
    }
    let ok = w
        .done(waiting)
        .expect("done")
        .expect("stored on the new master");
    assert_eq!(ok.attempts, 1);
    let ok = w
        .done(first)
        .expect("done")
        .expect("stored on the new master");
    assert_eq!(
        ok.attempts, 2,
        "closed, then the new master: within the budget"
    );
}

#[test]
fn a_send_that_cannot_connect_waits_only_while_its_route_is_looked_up() {
    let mut w = World::routed(&[A], 2);
    // The broker refuses connections; the refresh names it again (not yet dropped).
    let id = w.send("T");
    let mut lookup = None;
    for _ in 0..4 {
        for f in w.out() {
            if f.code == RequestCode::GET_ROUTEINFO_BY_TOPIC.0 {
                lookup = Some(f);
            } else {
                w.s.handle_closed(w.now, f.peer, TransportError::ConnectFailed);
            }
        }
    }
    assert!(w.done(id).is_none(), "waits for the refresh");
    w.now = t(50);
    w.reply(&lookup.unwrap(), 0, &[], route(&[A], 2).as_bytes());
    // The answer names the address that just refused: the send waits for the next refresh,
    // due 200 ms after the last. That one names it too: the second attempt, refused again;
    // the same once more, and its three attempts spent, it ends with what they met, long
    // before its 3 s.
    let mut refreshes = StdVec::new();
    let mut ended = None;
    while ended.is_none() {
        loop {
            let sent = w.out();
            if sent.is_empty() {
                break;
            }
            for f in sent {
                if f.code == RequestCode::GET_ROUTEINFO_BY_TOPIC.0 {
                    refreshes.push(w.now);
                    w.reply(&f, 0, &[], route(&[A], 2).as_bytes());
                } else {
                    w.s.handle_closed(w.now, f.peer, TransportError::ConnectFailed);
                }
            }
        }
        ended = w.done(id);
        if ended.is_none() {
            let next = w.s.poll_timeout().expect("a timer");
            assert!(next <= t(3000), "{next:?}");
            w.advance_to(next);
        }
    }
    assert_eq!(refreshes, [t(200), t(400)]);
    assert_eq!(w.now, t(400));
    match ended {
        Some(Err(SendFailure::Plan { error, .. })) => {
            assert_eq!(
                error.kind(),
                SendErrorKind::Transport(TransportError::ConnectFailed)
            );
            assert_eq!(error.attempts(), 3, "the retry budget, not more");
        }
        other => panic!("{other:?}"),
    }
    // A connection that closed under an attempt: the next attempt (the plan would make it at
    // once) waits for the route too, and goes on the answer even when it names the same
    // address (the broker may be up). One attempt more, not a new budget.
    w.now = t(1000);
    let id = w.send("T");
    let s = one(w.out());
    w.s.handle_closed(w.now, s.peer, TransportError::ConnectionClosed);
    let r = one(w.out());
    assert_eq!(r.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
    assert!(w.done(id).is_none());
    w.now = t(1005);
    w.reply(&r, 0, &[], route(&[A], 2).as_bytes());
    let s = one(w.out());
    assert_ne!(s.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
    w.stored(&s, 1);
    assert_eq!(w.done(id).expect("done").expect("stored").attempts, 2);
}

#[test]
fn a_refused_send_is_not_woken_by_a_route_that_still_names_the_refusing_address() {
    let mut w = World::routed(&[A], 2);
    // The master dies with an attempt written (t=10): the retry waits for the route, whose
    // answer still names the dead master (the NameServer has not dropped it yet). The retry
    // goes there (a closed connection says nothing of the address) and is refused (t=22).
    let id = w.send("T");
    let s = one(w.out());
    w.now = t(10);
    w.s.handle_closed(w.now, s.peer, TransportError::ConnectionClosed);
    let lookup = one(w.out());
    w.now = t(20);
    w.reply(&lookup, 0, &[], route(&[A], 2).as_bytes());
    let retry = one(w.out());
    assert_eq!(retry.code, RequestCode::SEND_MESSAGE_V2.0);
    w.now = t(22);
    w.s.handle_closed(w.now, retry.peer, TransportError::ConnectFailed);
    // The next lookup is due 200 ms after the first (t=210); its answer, asked within 200 ms
    // of the refusal, names the address that refused: no attempt there.
    assert!(w.out().is_empty());
    assert_eq!(w.s.poll_timeout(), Some(t(210)));
    w.advance_to(t(210));
    let lookup = one(w.out());
    w.now = t(215);
    w.reply(&lookup, 0, &[], route(&[A], 2).as_bytes());
    assert!(w.out().is_empty(), "no attempt on the address that refused");
    assert!(w.done(id).is_none());
    // The next refresh, 200 ms later, names the new master: the third attempt.
    assert_eq!(w.s.poll_timeout(), Some(t(410)));
    w.advance_to(t(410));
    let r = one(w.out());
    assert_eq!(r.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
    w.now = t(415);
    let new_master = ("broker-a", "10.0.0.5:10911");
    w.reply(&r, 0, &[], route(&[new_master], 2).as_bytes());
    let s = one(w.out());
    assert_eq!(w.s.broker_addr(BrokerId(0)), Some("10.0.0.5:10911"));
    w.stored(&s, 2);
    let receipt = w.done(id).expect("done").expect("stored");
    assert_eq!(receipt.attempts, 3);
    // A refusal that a later route does not explain (the same address, 200 ms on): the
    // attempt goes there again.
    let id = w.send("T");
    let s = one(w.out());
    w.now = t(1000);
    w.s.handle_closed(w.now, s.peer, TransportError::ConnectFailed);
    let r = one(w.out());
    w.now = t(1005);
    w.reply(&r, 0, &[], route(&[new_master], 2).as_bytes());
    assert!(w.out().is_empty());
    assert_eq!(w.s.poll_timeout(), Some(t(1200)));
    w.advance_to(t(1200));
    let r = one(w.out());
    w.now = t(1205);
    w.reply(&r, 0, &[], route(&[new_master], 2).as_bytes());
    let s = one(w.out());
    w.stored(&s, 3);
    assert_eq!(w.done(id).expect("done").expect("stored").attempts, 2);
}

#[test]
fn a_send_waiting_for_a_lookup_that_fails_goes_on_with_the_route_kept() {
    let mut w = World::routed(&[A], 2);
    let id = w.send("T");
    let s = one(w.out());
    w.now = t(10);
    w.s.handle_closed(w.now, s.peer, TransportError::ConnectionClosed);
    let lookup = one(w.out());
    assert_eq!(lookup.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
    // The NameServer cannot be reached: the send does not wait out its 3 s for a route that
    // is not coming; its next attempt goes to the broker of the route it has.
    w.now = t(20);
    w.s.handle_closed(w.now, lookup.peer, TransportError::ConnectFailed);
    let s = one(w.out());
    assert_eq!(s.code, RequestCode::SEND_MESSAGE_V2.0);
    w.stored(&s, 2);
    assert_eq!(w.done(id).expect("done").expect("stored").attempts, 2);
}

#[test]
fn a_send_waiting_for_a_master_that_never_comes_ends_at_its_deadline_unsent() {
    let mut w = World::new(1);
    let id = w.send("T");
    let r = one(w.out());
    w.now = t(5);
    w.reply(&r, 0, &[], masterless_route("10.0.0.5:10911").as_bytes());
    assert!(w.done(id).is_none(), "waits for a master");
    // Lookups back off: 100, 200, 400, 800 ms ... until the send's 3 s are up.
    let mut asked = StdVec::new();
    let mut ended = None;
    while ended.is_none() {
        let next = w.s.poll_timeout().expect("a timer");
        assert!(next <= t(3000), "{next:?}");
        w.advance_to(next);
        for f in w.out() {
            assert_eq!(f.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
            asked.push(w.now);
            w.reply(&f, 0, &[], masterless_route("10.0.0.5:10911").as_bytes());
        }
        ended = w.done(id);
    }
    assert_eq!(asked, [t(105), t(305), t(705), t(1505)]);
    assert_eq!(w.now, t(3000));
    let e = ended.map(Result::unwrap_err);
    assert!(
        matches!(&e, Some(SendFailure::Plan { error, .. }) if error.kind() == SendErrorKind::CallTimeout && error.attempts() == 0),
        "{e:?}"
    );
}

#[test]
fn a_topic_nobody_may_write_still_fails_at_once() {
    let mut w = World::new(1);
    let id = w.send("T");
    let r = one(w.out());
    // Read-only queues (perm 4) on a broker with its master: no publish queue, for good.
    let body = r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"broker-a","cluster":"c"}],"queueDatas":[{"brokerName":"broker-a","perm":4,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}]}"#;
    w.reply(&r, 0, &[], body.as_bytes());
    let e = w.done(id).expect("ended at once").unwrap_err();
    assert!(
        matches!(&e, SendFailure::Plan { error, .. } if error.kind() == SendErrorKind::NoRoute),
        "{e:?}"
    );
}

/// A static topic's logical queues are what the session publishes to and reads, each on its
/// leading broker; a session without STATIC_TOPICS leaves such a topic without queues.
#[test]
#[cfg(feature = "static-topics")]
fn static_topics_publish_and_read_logical_queues() {
    let body = route(&[A, B], 2).replace(
        "]}",
        r#"],"topicQueueMappingByBroker":{"broker-a":{"bname":"broker-a","currIdMap":{0:0,2:1},"epoch":5,"scope":"__global__","totalQueues":4},"broker-b":{"bname":"broker-b","currIdMap":{1:0,3:1},"epoch":5,"scope":"__global__","totalQueues":4}}}"#,
    );
    let mut c = cfg(1);
    c.consumer_group = Some("cg");
    let mut w = World::with(&c);
    let tid = w.s.topic(w.now, "T").unwrap();
    let r = one(w.out());
    w.reply(&r, 0, &[], body.as_bytes());
    let named = |qs: &[PublishQueue<BrokerId>]| -> StdVec<(StdString, i32)> {
        qs.iter()
            .map(|q| (w.s.broker_name(q.broker).unwrap().to_string(), q.queue_id))
            .collect()
    };
    let want: StdVec<(StdString, i32)> = [
        ("broker-a", 0),
        ("broker-b", 1),
        ("broker-a", 2),
        ("broker-b", 3),
    ]
    .iter()
    .map(|(b, q)| (b.to_string(), *q))
    .collect();
    assert_eq!(named(w.s.publish_queues(tid)), want);
    assert_eq!(named(w.s.subscribe_queues(tid)), want);
}
