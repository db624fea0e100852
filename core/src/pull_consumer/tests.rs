//! Deterministic consumer tests: a real [`Session`] and [`PullConsumer`] on virtual time, a
//! scripted NameServer and brokers, assertions on the exact requests written.

use std::collections::HashMap;
use std::string::{String as StdString, ToString};
use std::vec::Vec as StdVec;

use super::*;
use crate::message::SysFlag;
use crate::message::stored::MessageVersion;
use crate::session::{Config, Event, Incoming};
use crate::wire::{CommandRepr, SerializeType};

type S = crate::session::Session<4, 4, 16, 16, 4, 2048>;
type C = PullConsumer<2, 4, 8, 16, 8, 16>;

const ME: &str = "10.0.0.2@gw";
const OTHER: &str = "10.0.0.9@other";

struct NoLend;
impl Outbound for NoLend {
    fn properties(&self, _: crate::session::SendId) -> &str {
        ""
    }
}

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn response(code: i32, opaque: i32, ext: &[(&str, &str)], body: &[u8]) -> StdVec<u8> {
    let cmd = CommandRepr::response(ResponseCode(code), opaque, version::V5_3_3, Some(ext));
    let mut buf = std::vec![0u8; 1024];
    let n = cmd
        .emit_frame_prefix_and_header(SerializeType::JSON, body.len(), &mut buf)
        .unwrap();
    buf.truncate(n);
    buf.extend_from_slice(body);
    buf
}

fn route(queues: i32) -> StdString {
    format!(
        r#"{{"brokerDatas":[{{"brokerAddrs":{{"0":"10.0.0.1:10911"}},"brokerName":"broker-a","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":{queues},"topicSysFlag":0,"writeQueueNums":{queues}}}]}}"#
    )
}

/// Stored records of `(offset, tag)` in queue 0 of topic `T`.
fn records(msgs: &[(i64, &str)]) -> StdVec<u8> {
    let host = core::net::SocketAddr::from(([10, 0, 0, 1], 10911));
    let mut out = StdVec::new();
    for (offset, tag) in msgs {
        let props = format!("TAGS\u{1}{tag}\u{2}");
        let body = format!("m{offset}");
        let m = StoredMessage {
            version: MessageVersion::V1,
            body_crc: 0,
            queue_id: 0,
            flag: 0,
            queue_offset: *offset,
            physical_offset: 1000 + offset,
            sys_flag: SysFlag(0),
            born_timestamp: 1,
            born_host: host,
            store_timestamp: 2,
            store_host: host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: body.as_bytes(),
            topic: "T",
            raw_properties: props.as_bytes(),
        };
        let mut buf = std::vec![0u8; m.encoded_len().unwrap()];
        m.encode(&mut buf).unwrap();
        out.extend_from_slice(&buf);
    }
    out
}

#[derive(Debug)]
struct Sent {
    peer: Peer,
    code: i32,
    opaque: i32,
    ext: HashMap<StdString, StdString>,
}

fn decode(frame: &[u8], peer: Peer, opaque: i32) -> Sent {
    let f = Frame::new_checked(frame).expect("whole frame");
    let h = CommandHeader::parse(&f).expect("header");
    assert_eq!(h.opaque(), opaque);
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
    Sent {
        peer,
        code: h.code(),
        opaque,
        ext,
    }
}

struct World {
    s: S,
    c: C,
    now: Instant,
    got: StdVec<(QueueKey, u32, i64, StdString)>,
}

impl World {
    /// A consumer of `T` (`TagA || TagC`) whose route (broker-a, `queues` queues) is known;
    /// no retry topic.
    fn new(queues: i32) -> World {
        World::with(queues, false)
    }

    /// The same, subscribing `%RETRY%cg` (one queue) as well when `retry`.
    fn with(queues: i32, retry: bool) -> World {
        let mut cfg = Config::new(1, "", ME);
        cfg.consumer_group = Some("cg");
        cfg.heartbeat = None;
        let mut s = S::new(&cfg, t(0)).unwrap();
        let mut pc = PullConfig::new("cg", ME);
        pc.sub_version = 77;
        pc.retry = retry;
        let mut c = C::new(&pc, t(0)).unwrap();
        c.subscribe(t(0), &mut s, "T", "TagA || TagC").unwrap();
        let mut w = World {
            s,
            c,
            now: t(0),
            got: StdVec::new(),
        };
        let r = w.session_out();
        assert_eq!(r.len(), 1 + usize::from(retry));
        for (r, queues) in r.iter().zip([queues, 1]) {
            assert_eq!(r.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
            let f = response(0, r.opaque, &[], route(queues).as_bytes());
            assert_eq!(
                w.s.handle_frame(w.now, r.peer, &f).unwrap(),
                Incoming::Handled
            );
        }
        while w.s.poll_event().is_some() {}
        w
    }

    /// [`World::new`] with a consumer of `T` (`*`, no retry topic) configured by `f`.
    fn configured(queues: i32, f: impl FnOnce(&mut PullConfig<'_>)) -> World {
        let mut w = World::new(queues);
        let mut pc = PullConfig::new("cg", ME);
        pc.retry = false;
        f(&mut pc);
        w.c = C::new(&pc, t(0)).unwrap();
        w.c.subscribe(t(0), &mut w.s, "T", "*").unwrap();
        w
    }

    fn session_out(&mut self) -> StdVec<Sent> {
        let mut v = StdVec::new();
        let mut buf = [0u8; 2048];
        while let Some(tx) = self.s.poll_transmit(self.now, &mut buf, &NoLend) {
            v.push(decode(&buf[..tx.len], tx.peer, tx.opaque));
        }
        v
    }

    /// The consumer's requests due now.
    fn out(&mut self) -> StdVec<Sent> {
        self.c.check_invariants().unwrap();
        self.c.handle_timeout(self.now);
        let mut v = StdVec::new();
        let mut buf = [0u8; 2048];
        while let Some(tx) = self.c.poll_call(self.now, &mut self.s, &mut buf, &NoLend) {
            v.push(decode(&buf[..tx.len], tx.peer, tx.opaque));
        }
        v
    }

    fn reply(&mut self, to: &Sent, code: i32, ext: &[(&str, &str)], body: &[u8]) {
        let f = response(code, to.opaque, ext, body);
        assert_eq!(
            self.s.handle_frame(self.now, to.peer, &f).unwrap(),
            Incoming::Response(to.opaque)
        );
        let got = &mut self.got;
        let mut deliver = |d: Delivery<'_, '_>| {
            assert_eq!((d.topic, d.broker_name), ("T", "broker-a"));
            let body = core::str::from_utf8(d.message.body).unwrap().to_string();
            got.push((d.queue, d.lease, d.message.queue_offset, body));
        };
        assert!(
            self.c
                .handle_response(self.now, &self.s, to.opaque, &f, &mut deliver)
        );
        self.c.check_invariants().unwrap();
    }

    fn consumers(&mut self, to: &Sent, ids: &[&str]) {
        let list: StdVec<StdString> = ids.iter().map(|i| format!("\"{i}\"")).collect();
        let body = format!("{{\"consumerIdList\":[{}]}}", list.join(","));
        self.reply(to, 0, &[], body.as_bytes());
    }

    fn pull_answer(&mut self, to: &Sent, next: i64, msgs: &[(i64, &str)]) {
        let next = next.to_string();
        let ext = [
            ("suggestWhichBrokerId", "0"),
            ("nextBeginOffset", next.as_str()),
            ("minOffset", "0"),
            ("maxOffset", "100"),
        ];
        let code = if msgs.is_empty() { 19 } else { 0 };
        self.reply(to, code, &ext, &records(msgs));
    }
}

fn one(mut v: StdVec<Sent>) -> Sent {
    assert_eq!(v.len(), 1, "{v:?}");
    v.remove(0)
}

fn q(i: i32) -> QueueKey {
    QueueKey {
        topic: TopicId(0),
        broker: BrokerId(0),
        queue_id: i,
    }
}

/// Rebalances `w` (alone or with `OTHER`) and starts queue `queue` at `offset` (found in the
/// broker's offset store); returns the first pull.
fn start(w: &mut World, ids: &[&str], queue: i32, offset: i64) -> Sent {
    let l = one(w.out());
    assert_eq!(l.code, RequestCode::GET_CONSUMER_LIST_BY_GROUP.0);
    assert_eq!(l.peer, Peer::Broker(BrokerId(0)));
    assert_eq!(l.ext["consumerGroup"], "cg");
    w.consumers(&l, ids);
    let query = one(w.out());
    assert_eq!(query.code, RequestCode::QUERY_CONSUMER_OFFSET.0);
    assert_eq!(query.ext["queueId"], queue.to_string());
    assert_eq!(query.ext["topic"], "T");
    // As the Java 5.x client: a 5.x proxy routes offset requests by the broker's name.
    assert_eq!(query.ext["bname"], "broker-a");
    w.reply(&query, 0, &[("offset", &offset.to_string())], b"");
    one(w.out())
}

#[test]
fn assigns_queries_the_offset_pulls_filters_and_delivers() {
    let mut w = World::new(2);
    let pull = start(&mut w, &[OTHER, ME], 0, 5);
    // Java's sorted consumer ids: "10.0.0.2@gw" < "10.0.0.9@other": we are first, queue 0.
    assert_eq!(w.c.owned().map(|o| o.queue).collect::<StdVec<_>>(), [q(0)]);
    assert_eq!(pull.code, RequestCode::PULL_MESSAGE.0);
    let e = &pull.ext;
    assert_eq!(e["consumerGroup"], "cg");
    assert_eq!(e["queueOffset"], "5");
    // min(pullBatchSize 32, 8 free tracking slots).
    assert_eq!(e["maxMsgNums"], "8");
    // SUBSCRIPTION | SUSPEND | COMMIT_OFFSET (5 committed, nothing in flight).
    assert_eq!(e["sysFlag"], "7");
    assert_eq!(e["commitOffset"], "5");
    assert_eq!(e["suspendTimeoutMillis"], "15000");
    assert_eq!(e["subscription"], "TagA || TagC");
    assert_eq!(e["subVersion"], "77");
    assert_eq!(e["bname"], "broker-a");
    w.pull_answer(&pull, 8, &[(5, "TagA"), (6, "TagB"), (7, "TagC")]);
    let lease = w.got[0].1;
    assert_eq!(
        w.got,
        [
            (q(0), lease, 5, "m5".to_string()),
            (q(0), lease, 7, "m7".to_string())
        ]
    );
    // The broker said its max offset is 100; 5 is the lowest unprocessed offset.
    let o = w.c.owned().next().unwrap();
    assert_eq!((o.max_offset, o.lag()), (Some(100), Some(95)));
    // The next long poll goes out at once, from the next begin offset.
    let next = one(w.out());
    assert_eq!(next.ext["queueOffset"], "8");
    let st = w.c.stats();
    assert_eq!((st.pulls, st.delivered, st.rebalances), (2, 2, 1));
}

#[test]
fn pulls_carry_no_stale_commit_offset_while_messages_are_in_flight() {
    let flags = |s: &Sent| (s.ext["sysFlag"].clone(), s.ext["commitOffset"].clone());
    let carried = |o: &str| ("7".to_string(), o.to_string());
    let none = ("6".to_string(), "0".to_string());
    let mut w = World::new(1);
    let pull = start(&mut w, &[ME], 0, 5);
    assert_eq!(
        flags(&pull),
        carried("5"),
        "nothing in flight: carried, as Java does"
    );
    w.pull_answer(&pull, 8, &[(5, "TagA"), (6, "TagA"), (7, "TagA")]);
    let lease = w.got[0].1;
    // Sent right after the delivery: 5 is still what the broker stores. A stale 5 landing
    // after the final commit of 8 would move the group back.
    let poll = one(w.out());
    assert_eq!(flags(&poll), none);
    // News while 7 is still in flight: carried.
    assert!(w.c.ack(w.now, q(0), lease, 5));
    assert!(w.c.ack(w.now, q(0), lease, 6));
    w.pull_answer(&poll, 8, &[]);
    let poll = one(w.out());
    assert_eq!(flags(&poll), carried("7"));
    // Committed and confirmed, 7 still in flight: nothing.
    w.c.commit_now();
    let commit = one(w.out());
    assert_eq!(commit.ext["commitOffset"], "7");
    w.reply(&commit, 0, &[], b"");
    w.pull_answer(&poll, 8, &[]);
    let poll = one(w.out());
    assert_eq!(flags(&poll), none);
    // Nothing in flight: every pull carries it again (a broker that lost it learns it back).
    assert!(w.c.ack(w.now, q(0), lease, 7));
    w.pull_answer(&poll, 8, &[]);
    let poll = one(w.out());
    assert_eq!(flags(&poll), carried("8"));
    w.c.commit_now();
    let commit = one(w.out());
    w.reply(&commit, 0, &[], b"");
    w.pull_answer(&poll, 8, &[]);
    assert_eq!(flags(&one(w.out())), carried("8"));
}

#[test]
fn commits_the_lowest_unacknowledged_offset_on_schedule() {
    let mut w = World::new(1);
    let pull = start(&mut w, &[ME], 0, 5);
    w.pull_answer(&pull, 8, &[(5, "TagA"), (6, "TagA"), (7, "TagA")]);
    let lease = w.got[0].1;
    let _long_poll = one(w.out());
    assert!(w.c.ack(w.now, q(0), lease, 6));
    assert!(!w.c.ack(w.now, q(0), lease, 6), "acknowledged once");
    assert!(!w.c.ack(w.now, q(0), lease + 1, 5), "another lease");
    // 5 is still in flight: nothing to commit yet at the persist tick.
    w.now = t(5000);
    assert!(w.out().is_empty());
    assert!(w.c.ack(w.now, q(0), lease, 5));
    w.now = t(10_000);
    let commit = one(w.out());
    assert_eq!(commit.code, RequestCode::UPDATE_CONSUMER_OFFSET.0);
    assert_eq!(commit.ext["commitOffset"], "7");
    assert_eq!(commit.ext["queueId"], "0");
    assert_eq!(commit.ext["bname"], "broker-a");
    assert_eq!(w.c.commits_pending(), 1);
    w.reply(&commit, 0, &[], b"");
    assert_eq!(w.c.commits_pending(), 0);
    assert_eq!(w.c.stats().commits, 1);
    // Nothing moved since: the next tick commits nothing.
    w.now = t(15_000);
    assert!(w.out().is_empty());
}

#[test]
fn a_group_without_offset_starts_at_the_max_offset() {
    let mut w = World::new(1);
    let l = one(w.out());
    w.consumers(&l, &[ME]);
    let query = one(w.out());
    w.reply(&query, ResponseCode::QUERY_NOT_FOUND.0, &[], b"");
    let max = one(w.out());
    assert_eq!(max.code, RequestCode::GET_MAX_OFFSET.0);
    assert_eq!(max.ext["committed"], "true");
    assert_eq!(max.ext["bname"], "broker-a");
    w.reply(&max, 0, &[("offset", "42")], b"");
    let pull = one(w.out());
    assert_eq!(pull.ext["queueOffset"], "42");
}

#[test]
fn a_4x_client_names_no_broker_on_offset_requests() {
    let mut w = World::configured(1, |pc| pc.version = version::V4_9_7);
    let l = one(w.out());
    w.consumers(&l, &[ME]);
    let query = one(w.out());
    assert_eq!(query.code, RequestCode::QUERY_CONSUMER_OFFSET.0);
    assert!(!query.ext.contains_key("bname"), "{:?}", query.ext);
    w.reply(&query, ResponseCode::QUERY_NOT_FOUND.0, &[], b"");
    let max = one(w.out());
    assert_eq!(max.code, RequestCode::GET_MAX_OFFSET.0);
    assert!(!max.ext.contains_key("bname") && !max.ext.contains_key("committed"));
}

#[test]
fn rebalance_moves_queues_and_voids_the_old_lease() {
    let mut w = World::new(2);
    let l = one(w.out());
    w.consumers(&l, &[ME]);
    // Alone: both queues, both queried at once.
    let queries = w.out();
    assert_eq!(queries.len(), 2, "{queries:?}");
    for query in &queries {
        w.reply(query, 0, &[("offset", "0")], b"");
    }
    let pulls = w.out();
    assert_eq!(pulls.len(), 2, "{pulls:?}");
    let pull = pulls.iter().find(|p| p.ext["queueId"] == "0").unwrap();
    w.pull_answer(pull, 2, &[(0, "TagA"), (1, "TagA")]);
    let lease = w.got[0].1;
    assert!(w.c.ack(w.now, q(0), lease, 0));
    let _ = w.out();
    // Another consumer joins; the broker says so.
    w.c.notify_ids_changed(w.now);
    let l = one(w.out());
    w.consumers(&l, &[OTHER, ME]);
    // We keep queue 0 (first id); queue 1 is revoked. Queue 0's offset moved (1): it keeps
    // its lease and its in-flight message.
    assert_eq!(w.c.owned().map(|o| o.queue).collect::<StdVec<_>>(), [q(0)]);
    assert!(w.c.is_current(q(0), lease));
    // Now we are second: queue 0 goes, its offset is committed first.
    w.c.notify_ids_changed(w.now);
    let l = one(w.out());
    w.consumers(&l, &["10.0.0.1@first", ME]);
    assert!(!w.c.is_current(q(0), lease), "revoked");
    assert!(
        !w.c.ack(w.now, q(0), lease, 1),
        "nothing to acknowledge any more"
    );
    let out = w.out();
    assert_eq!(out.len(), 2, "{out:?}");
    let commit = &out[0];
    assert_eq!(commit.code, RequestCode::UPDATE_CONSUMER_OFFSET.0);
    assert_eq!(commit.ext["queueId"], "0");
    assert_eq!(commit.ext["commitOffset"], "1");
    assert_eq!(out[1].code, RequestCode::QUERY_CONSUMER_OFFSET.0);
    assert_eq!(out[1].ext["queueId"], "1");
    assert_eq!(w.c.commits_pending(), 1);
    w.reply(commit, 0, &[], b"");
    assert_eq!(w.c.commits_pending(), 0);
}

#[test]
fn late_pull_answers_of_revoked_queues_deliver_nothing() {
    let mut w = World::new(1);
    let pull = start(&mut w, &[ME], 0, 0);
    w.c.notify_ids_changed(w.now);
    let l = one(w.out());
    w.consumers(&l, &["10.0.0.1@first", ME]);
    assert_eq!(w.c.owned().count(), 0);
    w.pull_answer(&pull, 1, &[(0, "TagA")]);
    assert!(w.got.is_empty());
}

#[test]
fn offset_illegal_resets_commits_and_takes_a_new_lease() {
    let mut w = World::new(1);
    let pull = start(&mut w, &[ME], 0, 5);
    let first_lease = w.c.owned().next().unwrap().lease;
    let ext = [
        ("suggestWhichBrokerId", "0"),
        ("nextBeginOffset", "20"),
        ("minOffset", "20"),
        ("maxOffset", "30"),
    ];
    w.reply(&pull, ResponseCode::PULL_OFFSET_MOVED.0, &ext, b"");
    let out = w.out();
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[0].code, RequestCode::UPDATE_CONSUMER_OFFSET.0);
    assert_eq!(out[0].ext["commitOffset"], "20");
    assert_eq!(out[1].code, RequestCode::PULL_MESSAGE.0);
    assert_eq!(out[1].ext["queueOffset"], "20");
    w.pull_answer(&out[1], 21, &[(20, "TagA")]);
    let (_, new_lease, ..) = w.got[0];
    assert_ne!(new_lease, first_lease);
    assert!(!w.c.is_current(q(0), first_lease));
    assert!(w.c.is_current(q(0), new_lease));
}

#[test]
fn flow_control_waits_for_acks_and_errors_back_off() {
    let mut w = World::new(1);
    let pull = start(&mut w, &[ME], 0, 0);
    let msgs: StdVec<(i64, &str)> = (0..8).map(|i| (i, "TagA")).collect();
    w.pull_answer(&pull, 8, &msgs);
    // Eight in flight fill the tracker: the pull is delayed 50 ms.
    assert!(w.out().is_empty());
    assert_eq!(w.c.stats().flow_control_delays, 1);
    assert_eq!(w.c.poll_timeout(), Some(t(50)));
    let lease = w.got[0].1;
    assert!(!w.c.take_wake());
    // An ack that brings the queue under its limits pulls at once (not after the 50 ms).
    w.now = t(10);
    assert!(w.c.ack(w.now, q(0), lease, 3));
    assert!(w.c.take_wake());
    assert!(!w.c.take_wake());
    let pull = one(w.out());
    assert_eq!(pull.ext["maxMsgNums"], "1");
    // A broker error: pull again after the exception delay (1 s on 5.x).
    w.reply(&pull, ResponseCode::SYSTEM_ERROR.0, &[], b"");
    assert!(w.out().is_empty());
    assert_eq!(w.c.poll_timeout(), Some(t(1010)));
    w.now = t(1010);
    let pull = one(w.out());
    // No answer at all: the same back-off.
    assert!(w.c.handle_call_failed(w.now, &w.s, pull.opaque));
    assert_eq!(w.c.stats().pull_failures, 2);
    assert_eq!(w.c.poll_timeout(), Some(t(2010)));
}

#[test]
fn stop_commits_and_pulls_no_more() {
    let mut w = World::new(1);
    let pull = start(&mut w, &[ME], 0, 0);
    w.pull_answer(&pull, 2, &[(0, "TagA"), (1, "TagA")]);
    let lease = w.got[0].1;
    let _ = w.out();
    assert!(w.c.ack(w.now, q(0), lease, 0));
    w.c.stop();
    assert_eq!(w.c.commits_pending(), 1);
    let commit = one(w.out());
    assert_eq!(commit.ext["commitOffset"], "1");
    w.reply(&commit, 0, &[], b"");
    assert_eq!(w.c.commits_pending(), 0);
    w.now = t(60_000);
    assert!(w.out().is_empty(), "no pull, no rebalance after stop");
    assert_eq!(w.c.poll_timeout(), None);
}

#[test]
fn heartbeat_announces_the_subscription() {
    let w = World::new(1);
    let mut buf = [0u8; 1024];
    let n = w.c.heartbeat_body(&w.s, &mut buf).unwrap();
    let body = core::str::from_utf8(&buf[..n]).unwrap();
    assert!(body.contains(r#""clientID":"10.0.0.2@gw""#), "{body}");
    assert!(body.contains(r#""groupName":"cg""#), "{body}");
    assert!(body.contains(r#""subString":"TagA || TagC""#), "{body}");
    assert!(body.contains(r#""subVersion":77"#), "{body}");
    assert!(body.contains(r#""topic":"T""#), "{body}");
}

#[test]
fn an_sql92_subscription_is_announced_as_such() {
    let mut w = World::new(1);
    assert_eq!(
        w.c.subscribe_sql(w.now, &mut w.s, "S", " \t"),
        Err(PullConfigError::Expression),
        "blank, as Java refuses it"
    );
    w.c.subscribe_sql(w.now, &mut w.s, "S", "a > 5").unwrap();
    let mut buf = [0u8; 2048];
    let n = w.c.heartbeat_body(&w.s, &mut buf).unwrap();
    let body = core::str::from_utf8(&buf[..n]).unwrap();
    assert!(
        body.contains(r#""expressionType":"SQL92","subString":"a > 5","subVersion":77,"tagsSet":[],"topic":"S""#),
        "{body}"
    );
}

#[test]
fn unknown_opaques_are_not_the_consumers() {
    let mut w = World::new(1);
    let f = response(0, 12345, &[], b"");
    assert!(!w.c.handle_response(w.now, &w.s, 12345, &f, &mut |_| {}));
    assert!(!w.c.handle_call_failed(w.now, &w.s, 12345));
}

#[test]
fn seek_moves_a_queue_and_voids_what_was_in_flight() {
    let mut w = World::new(1);
    let pull = start(&mut w, &[ME], 0, 5);
    let lease = w.c.owned().next().unwrap().lease;
    // To an offset: at once, the pull in flight is forgotten, the new position committed.
    assert!(w.c.seek(w.now, q(0), Position::Offset(50)));
    assert!(!w.c.is_current(q(0), lease));
    let out = w.out();
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[0].code, RequestCode::UPDATE_CONSUMER_OFFSET.0);
    assert_eq!(out[0].ext["commitOffset"], "50");
    assert_eq!(out[1].ext["queueOffset"], "50");
    w.reply(&out[0], 0, &[], b"");
    // The old pull's answer delivers nothing.
    let f = response(0, pull.opaque, &[], b"");
    assert!(!w.c.handle_response(w.now, &w.s, pull.opaque, &f, &mut |_| panic!()));
    // To the beginning, the end, a timestamp: located first.
    for (to, code, ext) in [
        (Position::Begin, RequestCode::GET_MIN_OFFSET, None),
        (Position::End, RequestCode::GET_MAX_OFFSET, None),
        (
            Position::Timestamp(1_700_000_000_000),
            RequestCode::SEARCH_OFFSET_BY_TIMESTAMP,
            Some("1700000000000"),
        ),
    ] {
        assert!(w.c.seek(w.now, q(0), to));
        let locate = one(w.out());
        assert_eq!(locate.code, code.0);
        assert_eq!(locate.ext["topic"], "T");
        assert_eq!(locate.ext["bname"], "broker-a");
        assert_eq!(locate.ext.get("timestamp").map(StdString::as_str), ext);
        w.reply(&locate, 0, &[("offset", "7")], b"");
        let out = w.out();
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].ext["commitOffset"], "7");
        assert_eq!(out[1].ext["queueOffset"], "7");
        w.reply(&out[0], 0, &[], b"");
    }
    assert!(!w.c.seek(w.now, q(3), Position::Begin), "not owned");
}

#[test]
fn paused_queues_are_not_pulled_until_resumed() {
    let mut w = World::new(1);
    let pull = start(&mut w, &[ME], 0, 0);
    assert!(w.c.pause(q(0)));
    w.pull_answer(&pull, 1, &[(0, "TagA")]);
    assert_eq!(w.got.len(), 1, "what was pulled is still delivered");
    assert!(w.out().is_empty());
    assert_ne!(
        w.c.poll_timeout(),
        Some(w.now),
        "a paused queue asks for no wake-up"
    );
    assert!(w.c.resume(q(0)));
    assert_eq!(one(w.out()).ext["queueOffset"], "1");
    assert!(!w.c.pause(q(2)));
}

#[test]
fn a_suspended_consumer_pulls_no_queue_until_it_resumes_and_still_commits() {
    let mut w = World::new(2);
    let l = one(w.out());
    w.consumers(&l, &[ME]);
    let queries = w.out();
    assert_eq!(queries.len(), 2);
    w.c.set_suspended(true);
    assert!(w.c.is_suspended());
    for query in &queries {
        w.reply(query, 0, &[("offset", "0")], b"");
    }
    assert!(w.out().is_empty(), "no pull while suspended");
    assert!(
        w.c.poll_timeout().is_none_or(|t| t > w.now),
        "nothing due to pull"
    );
    w.c.set_suspended(false);
    let pulls = w.out();
    assert_eq!(pulls.len(), 2, "both queues pulled at once: {pulls:?}");
    // Suspended with pulls in flight: what they bring is delivered, acknowledged, committed.
    w.c.set_suspended(true);
    let p0 = pulls.iter().find(|p| p.ext["queueId"] == "0").unwrap();
    w.pull_answer(p0, 1, &[(0, "TagA")]);
    assert_eq!(w.got.len(), 1, "what was pulled is still delivered");
    assert!(w.out().is_empty(), "no next pull while suspended");
    assert!(w.c.ack(w.now, q(0), w.got[0].1, 0));
    w.now = t(5_000);
    // The commit (and a lag probe of the queue not being pulled), no pull.
    let due = w.out();
    assert!(
        due.iter().all(|r| r.code != RequestCode::PULL_MESSAGE.0),
        "{due:?}"
    );
    let commit = due
        .iter()
        .find(|r| r.code == RequestCode::UPDATE_CONSUMER_OFFSET.0)
        .expect("the commit");
    assert_eq!(commit.ext["commitOffset"], "1");
    w.reply(commit, 0, &[], b"");
    w.c.set_suspended(false);
    let next = one(w.out());
    assert_eq!(next.code, RequestCode::PULL_MESSAGE.0);
    assert_eq!(
        (
            next.ext["queueId"].as_str(),
            next.ext["queueOffset"].as_str()
        ),
        ("0", "1")
    );
}

#[test]
fn a_group_without_offset_can_start_from_a_timestamp() {
    let mut w = World::new(1);
    let mut pc = PullConfig::new("cg", ME);
    pc.consume_from = ConsumeFromWhere::Timestamp;
    pc.consume_timestamp = 1_234;
    w.c = C::new(&pc, w.now).unwrap();
    w.c.subscribe(w.now, &mut w.s, "T", "*").unwrap();
    let l = one(w.out());
    w.consumers(&l, &[ME]);
    let query = one(w.out());
    w.reply(&query, ResponseCode::QUERY_NOT_FOUND.0, &[], b"");
    let search = one(w.out());
    assert_eq!(search.code, RequestCode::SEARCH_OFFSET_BY_TIMESTAMP.0);
    assert_eq!(search.ext["timestamp"], "1234");
    w.reply(&search, 0, &[("offset", "3")], b"");
    let pull = one(w.out());
    assert_eq!(pull.ext["queueOffset"], "3");
}

#[test]
fn commits_go_one_at_a_time_per_broker() {
    let mut w = World::new(2);
    let l = one(w.out());
    w.consumers(&l, &[ME]);
    for query in w.out() {
        w.reply(&query, 0, &[("offset", "0")], b"");
    }
    for pull in w.out() {
        w.pull_answer(&pull, 1, &[(0, "TagA")]);
    }
    for (k, lease, off, _) in w.got.clone() {
        assert!(w.c.ack(w.now, k, lease, off));
    }
    let _long_polls = w.out();
    w.now = t(5000);
    let first = one(w.out());
    assert_eq!(first.code, RequestCode::UPDATE_CONSUMER_OFFSET.0);
    assert_eq!(w.c.commits_pending(), 2);
    w.reply(&first, 0, &[], b"");
    let second = one(w.out());
    assert_eq!(second.code, RequestCode::UPDATE_CONSUMER_OFFSET.0);
    assert_ne!(first.ext["queueId"], second.ext["queueId"]);
    w.reply(&second, 0, &[], b"");
    assert_eq!(w.c.commits_pending(), 0);
}

/// The CONSUMER_SEND_MSG_BACK of the message at `offset` (built by `records`).
fn nack_of(w: &mut World, lease: u32, offset: i64) -> Result<(), NackError> {
    let n = Nack {
        offset,
        commit_log_offset: 1000 + offset,
        msg_id: "MSGID",
        topic: "T",
        delay_level: 0,
        reconsume_times: 0,
        body_len: 2,
        flag: 0,
    };
    w.c.nack(q(0), lease, &n)
}

#[test]
fn nack_sends_the_message_back_and_it_counts_as_consumed() {
    let mut w = World::new(1);
    let pull = start(&mut w, &[ME], 0, 5);
    w.pull_answer(&pull, 7, &[(5, "TagA"), (6, "TagA")]);
    let lease = w.got[0].1;
    let _long_poll = one(w.out());
    assert_eq!(nack_of(&mut w, lease, 9), Err(NackError::NotInFlight));
    assert_eq!(nack_of(&mut w, lease + 1, 5), Err(NackError::NotInFlight));
    nack_of(&mut w, lease, 5).unwrap();
    assert_eq!(nack_of(&mut w, lease, 5), Err(NackError::Pending));
    let back = one(w.out());
    assert_eq!(back.code, RequestCode::CONSUMER_SEND_MSG_BACK.0);
    assert_eq!(back.peer, Peer::Broker(BrokerId(0)));
    let e = &back.ext;
    assert_eq!(e["offset"], "1005", "the commit-log offset");
    assert_eq!(e["group"], "cg");
    assert_eq!(e["delayLevel"], "0");
    assert_eq!(e["originMsgId"], "MSGID");
    assert_eq!(e["originTopic"], "T");
    assert_eq!(e["unitMode"], "false");
    assert_eq!(e["maxReconsumeTimes"], "16");
    assert_eq!(e["bname"], "broker-a");
    // Still in flight until the broker answers.
    assert_eq!(w.c.owned().next().unwrap().tracker.committable(), 5);
    assert_eq!(w.c.poll_event(), None);
    w.reply(&back, 0, &[], b"");
    let sent = PullEvent::SentBack {
        queue: q(0),
        lease,
        offset: 5,
    };
    assert_eq!(w.c.poll_event(), Some(sent));
    assert_eq!(w.c.poll_event(), None);
    assert_eq!(w.c.owned().next().unwrap().tracker.committable(), 6);
    assert!(!w.c.ack(w.now, q(0), lease, 5), "consumed by the send-back");
    // A refused send-back and one without an answer: the runtime's fallback, still in flight.
    nack_of(&mut w, lease, 6).unwrap();
    let back = one(w.out());
    w.reply(&back, ResponseCode(1).0, &[], b"");
    let failed = PullEvent::SendBackFailed {
        queue: q(0),
        lease,
        offset: 6,
    };
    assert_eq!(w.c.poll_event(), Some(failed));
    nack_of(&mut w, lease, 6).unwrap();
    let back = one(w.out());
    assert!(w.c.handle_call_failed(w.now, &w.s, back.opaque));
    assert_eq!(w.c.poll_event(), Some(failed));
    assert_eq!(w.c.sends_back_pending(), 0);
    let st = w.c.stats();
    assert_eq!((st.sent_back, st.send_back_failures), (1, 2));
    assert!(w.c.ack(w.now, q(0), lease, 6), "the fallback stored it");
    assert_eq!(w.c.owned().next().unwrap().tracker.committable(), 7);
}

#[test]
fn the_retry_topic_is_subscribed_and_keeps_the_original_topic() {
    let mut w = World::with(1, true);
    let topics: StdVec<_> = w.c.topics().map(|t| w.s.topic_name(t).unwrap()).collect();
    assert_eq!(topics, ["T", "%RETRY%cg"]);
    let mut buf = [0u8; 2048];
    let n = w.c.heartbeat_body(&w.s, &mut buf).unwrap();
    let body = core::str::from_utf8(&buf[..n]).unwrap();
    assert!(body.contains(r#""subString":"*""#), "{body}");
    assert!(body.contains(r#""topic":"%RETRY%cg""#), "{body}");
    // Both topics rebalance; the retry queue starts at 0 without a stored offset.
    let lists = w.out();
    assert_eq!(lists.len(), 2, "{lists:?}");
    for l in &lists {
        w.consumers(l, &[ME]);
    }
    let queries = w.out();
    assert_eq!(queries.len(), 2, "{queries:?}");
    let retry_query = queries
        .iter()
        .find(|q| q.ext["topic"] == "%RETRY%cg")
        .unwrap();
    w.reply(retry_query, ResponseCode::QUERY_NOT_FOUND.0, &[], b"");
    let pull = one(w.out());
    assert_eq!(pull.ext["topic"], "%RETRY%cg");
    assert_eq!(pull.ext["queueOffset"], "0");
    assert_eq!(pull.ext["subscription"], "*");
    // A retried message is delivered as a message of its original topic.
    let host = core::net::SocketAddr::from(([10, 0, 0, 1], 10911));
    let m = StoredMessage {
        version: MessageVersion::V1,
        body_crc: 0,
        queue_id: 0,
        flag: 0,
        queue_offset: 0,
        physical_offset: 77,
        sys_flag: SysFlag(0),
        born_timestamp: 1,
        born_host: host,
        store_timestamp: 2,
        store_host: host,
        reconsume_times: 1,
        prepared_transaction_offset: 0,
        body: b"again",
        topic: "%RETRY%cg",
        raw_properties: b"RETRY_TOPIC\x01T\x02TAGS\x01TagZ\x02",
    };
    let mut body = std::vec![0u8; m.encoded_len().unwrap()];
    m.encode(&mut body).unwrap();
    let ext = [
        ("suggestWhichBrokerId", "0"),
        ("nextBeginOffset", "1"),
        ("minOffset", "0"),
        ("maxOffset", "1"),
    ];
    let f = response(0, pull.opaque, &ext, &body);
    assert_eq!(
        w.s.handle_frame(w.now, pull.peer, &f).unwrap(),
        Incoming::Response(pull.opaque)
    );
    let mut seen = StdVec::new();
    let mut deliver = |d: Delivery<'_, '_>| {
        seen.push((
            d.topic.to_string(),
            d.queue_topic.to_string(),
            d.message.reconsume_times,
        ));
    };
    assert!(w.c.handle_response(w.now, &w.s, pull.opaque, &f, &mut deliver));
    assert_eq!(seen, [("T".to_string(), "%RETRY%cg".to_string(), 1)]);
}

#[test]
fn assigned_queues_are_owned_without_rebalancing() {
    let mut w = World::new(4);
    let list = one(w.out());
    let picked = [q(1), q(3)];
    assert_eq!(w.c.assign_queues(&picked), 2);
    // The round's list, asked for before, answers after: it changes nothing (it would give
    // this only member all four queues).
    w.consumers(&list, &[ME]);
    assert_eq!(w.c.owned().count(), 2);
    assert_eq!(
        w.c.queue_key(&w.s, "T", "broker-a", 3),
        Some(q(3)),
        "named queues map to keys"
    );
    assert_eq!(w.c.queue_key(&w.s, "T", "broker-a", 9), None);
    let queries = w.out();
    let ids: StdVec<_> = queries.iter().map(|r| r.ext["queueId"].clone()).collect();
    assert_eq!(ids, ["1", "3"]);
    // No rebalance round any more: neither the timer nor a notification asks for consumers.
    w.c.notify_ids_changed(w.now);
    w.now = t(60_000);
    let later = w.out();
    assert!(
        later
            .iter()
            .all(|r| r.code != RequestCode::GET_CONSUMER_LIST_BY_GROUP.0),
        "{later:?}"
    );
    let owned: StdVec<_> = w.c.owned().map(|o| o.queue).collect();
    assert_eq!(owned.len(), 2);
    assert!(owned.iter().all(|k| picked.contains(k)));
}

#[test]
fn broadcasting_owns_every_queue_and_keeps_offsets_with_the_runtime() {
    let mut w = World::configured(2, |c| {
        c.model = MessageModel::Broadcasting;
        c.retry = true;
    });
    assert_eq!(w.c.topics().count(), 1, "no retry topic");
    let mut buf = [0u8; 2048];
    let n = w.c.heartbeat_body(&w.s, &mut buf).unwrap();
    let body = core::str::from_utf8(&buf[..n]).unwrap();
    assert!(body.contains(r#""messageModel":"BROADCASTING""#), "{body}");
    // No consumer list, no offset query: both queues, offsets asked of the runtime.
    assert!(w.out().is_empty());
    assert_eq!(w.c.owned().count(), 2);
    let mut loads = StdVec::new();
    while let Some(e) = w.c.poll_event() {
        let PullEvent::LoadOffset { queue, lease } = e else {
            panic!("{e:?}");
        };
        loads.push((queue, lease));
    }
    assert_eq!(loads.len(), 2);
    loads.sort_by_key(|l| l.0.queue_id);
    assert!(w.c.set_local_offset(w.now, loads[0].0, loads[0].1, Some(5)));
    assert!(!w.c.set_local_offset(w.now, loads[0].0, loads[0].1, Some(6)));
    assert!(w.c.set_local_offset(w.now, loads[1].0, loads[1].1, None));
    let out = w.out();
    // Queue 0 pulls from 5; queue 1 (nothing stored, LAST_OFFSET) asks for the max offset.
    let pull = out
        .iter()
        .find(|r| r.code == RequestCode::PULL_MESSAGE.0)
        .unwrap();
    assert_eq!(
        (
            pull.ext["queueId"].as_str(),
            pull.ext["queueOffset"].as_str()
        ),
        ("0", "5")
    );
    assert!(out.iter().any(|r| r.code == RequestCode::GET_MAX_OFFSET.0));
    w.pull_answer(pull, 7, &[(5, "TagA"), (6, "TagA")]);
    let lease = w.got[0].1;
    let poll = one(w.out());
    assert!(w.c.ack(w.now, q(0), lease, 5));
    // The pulls carry no commit offset: the broker keeps none for a broadcasting group (Java
    // sets COMMIT_OFFSET only when clustering).
    w.pull_answer(&poll, 7, &[]);
    let poll = one(w.out());
    let flag: i32 = poll.ext["sysFlag"].parse().unwrap();
    assert_eq!(
        flag & crate::consumer::pull_flag::COMMIT_OFFSET,
        0,
        "{poll:?}"
    );
    let n = Nack {
        offset: 6,
        commit_log_offset: 1006,
        msg_id: "M",
        topic: "T",
        delay_level: 0,
        reconsume_times: 0,
        body_len: 2,
        flag: 0,
    };
    assert_eq!(w.c.nack(q(0), lease, &n), Err(NackError::Broadcasting));
    // The persist tick hands the offset to the runtime instead of the broker.
    w.now = t(5000);
    let out = w.out();
    assert!(
        out.iter()
            .all(|r| r.code != RequestCode::UPDATE_CONSUMER_OFFSET.0),
        "{out:?}"
    );
    let persist = PullEvent::Persist {
        queue: q(0),
        offset: 6,
    };
    assert_eq!(w.c.poll_event(), Some(persist));
    assert_eq!(w.c.poll_event(), None);
}

fn lock_body(frame_body: &str) -> StdVec<StdString> {
    let v: StdVec<StdString> = frame_body
        .split("\"queueId\":")
        .skip(1)
        .map(|s| s.split(',').next().unwrap().to_string())
        .collect();
    v
}

/// The request body of `sent` (decoded again from its frame).
fn body_of(w: &mut World, code: RequestCode) -> (Sent, StdString) {
    w.c.check_invariants().unwrap();
    w.c.handle_timeout(w.now);
    let mut buf = [0u8; 4096];
    let tx =
        w.c.poll_call(w.now, &mut w.s, &mut buf, &NoLend)
            .expect("a request");
    let frame = &buf[..tx.len];
    let sent = decode(frame, tx.peer, tx.opaque);
    assert_eq!(sent.code, code.0, "{sent:?}");
    let body = Frame::new_checked(frame).unwrap().body_ref();
    (sent, core::str::from_utf8(body).unwrap().to_string())
}

#[test]
fn orderly_queues_are_locked_first_processed_one_batch_at_a_time_and_unlocked_after_commit() {
    let mut w = World::configured(2, |c| c.orderly = true);
    let l = one(w.out());
    w.consumers(&l, &[ME]);
    // Both queues are asked for in one LOCK_BATCH_MQ before anything else.
    let (lock, body) = body_of(&mut w, RequestCode::LOCK_BATCH_MQ);
    assert_eq!(lock.peer, Peer::Broker(BrokerId(0)));
    assert!(body.starts_with(r#"{"clientId":"10.0.0.2@gw","consumerGroup":"cg","mqSet":["#));
    let mut ids = lock_body(&body);
    ids.sort();
    assert_eq!(ids, ["0", "1"]);
    assert!(w.out().is_empty(), "nothing before the lock answer");
    // Only queue 0 is granted: queue 1 is dropped, a rebalance follows in 500 ms.
    w.reply(
        &lock,
        0,
        &[],
        br#"{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}"#,
    );
    assert_eq!(w.c.owned().map(|o| o.queue).collect::<StdVec<_>>(), [q(0)]);
    assert_eq!(w.c.poll_timeout(), Some(t(500)));
    let query = one(w.out());
    assert_eq!(query.code, RequestCode::QUERY_CONSUMER_OFFSET.0);
    w.reply(&query, 0, &[("offset", "5")], b"");
    let pull = one(w.out());
    w.pull_answer(&pull, 7, &[(5, "TagA"), (6, "TagA")]);
    let lease = w.got[0].1;
    // One batch at a time.
    assert!(w.c.begin(w.now, q(0), lease));
    assert!(!w.c.begin(w.now, q(0), lease), "busy");
    assert!(!w.c.begin(w.now, q(0), lease + 1), "another lease");
    assert!(w.c.ack(w.now, q(0), lease, 5));
    w.c.end(q(0), lease);
    // The lock is renewed every 20 s; a refused renewal stops processing and pulling.
    w.now = t(20_000);
    let out = w.out();
    let renew = out
        .iter()
        .find(|r| r.code == RequestCode::LOCK_BATCH_MQ.0)
        .expect("renewal");
    // The rebalance asked for at 500 ms ran too; its answer comes later.
    w.reply(renew, 0, &[], br#"{"lockOKMQSet":[]}"#);
    for c in out
        .iter()
        .filter(|r| r.code == RequestCode::UPDATE_CONSUMER_OFFSET.0)
    {
        w.reply(c, 0, &[], b"");
    }
    let list = out
        .into_iter()
        .find(|r| r.code == RequestCode::GET_CONSUMER_LIST_BY_GROUP.0)
        .expect("a rebalance round");
    assert!(!w.c.begin(w.now, q(0), lease), "lock lost");
    w.now = t(40_000);
    let out = w.out();
    let renew = out
        .iter()
        .find(|r| r.code == RequestCode::LOCK_BATCH_MQ.0)
        .expect("renewal");
    w.reply(
        renew,
        0,
        &[],
        br#"{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}"#,
    );
    for c in out
        .iter()
        .filter(|r| r.code == RequestCode::UPDATE_CONSUMER_OFFSET.0)
    {
        w.reply(c, 0, &[], b"");
    }
    assert!(w.c.begin(w.now, q(0), lease), "locked again");
    // Revoked while busy: kept until `end`, then committed, and unlocked after the commit.
    w.consumers(&list, &[ME, "10.0.0.1@first"]);
    // "10.0.0.1@first" sorts first: queue 0 is theirs now, queue 1 ours (to be locked).
    let mut owned: StdVec<_> = w.c.owned().map(|o| o.queue).collect();
    owned.sort_by_key(|k| k.queue_id);
    assert_eq!(owned, [q(0), q(1)], "queue 0 kept while busy");
    assert!(!w.c.begin(w.now, q(0), lease), "leaving");
    assert!(w.c.ack(w.now, q(0), lease, 6));
    w.c.end(q(0), lease);
    assert_eq!(w.c.owned().map(|o| o.queue).collect::<StdVec<_>>(), [q(1)]);
    let out = w.out();
    let commit = out
        .iter()
        .find(|r| r.code == RequestCode::UPDATE_CONSUMER_OFFSET.0)
        .expect("commit first");
    assert!(
        out.iter().all(|r| r.code != RequestCode::UNLOCK_BATCH_MQ.0),
        "no unlock before the commit's answer"
    );
    assert_eq!(commit.ext["commitOffset"], "7");
    w.reply(commit, 0, &[], b"");
    let (unlock, body) = body_of(&mut w, RequestCode::UNLOCK_BATCH_MQ);
    assert_eq!(lock_body(&body), ["0"]);
    w.reply(&unlock, 0, &[], b"");
    assert_eq!(w.c.commits_pending(), 0);
}

#[test]
fn orderly_stop_commits_then_unlocks_every_queue() {
    let mut w = World::configured(1, |c| c.orderly = true);
    let l = one(w.out());
    w.consumers(&l, &[ME]);
    let (lock, _) = body_of(&mut w, RequestCode::LOCK_BATCH_MQ);
    w.reply(
        &lock,
        0,
        &[],
        br#"{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}"#,
    );
    let query = one(w.out());
    w.reply(&query, 0, &[("offset", "5")], b"");
    let pull = one(w.out());
    w.pull_answer(&pull, 6, &[(5, "TagA")]);
    let lease = w.got[0].1;
    assert!(w.c.ack(w.now, q(0), lease, 5));
    w.c.stop();
    assert!(w.c.commits_pending() > 0);
    let commit = one(w.out());
    assert_eq!(commit.code, RequestCode::UPDATE_CONSUMER_OFFSET.0);
    w.reply(&commit, 0, &[], b"");
    let (unlock, body) = body_of(&mut w, RequestCode::UNLOCK_BATCH_MQ);
    assert_eq!(lock_body(&body), ["0"]);
    assert_eq!(w.c.commits_pending(), 1, "the unlock's answer");
    w.reply(&unlock, 0, &[], b"");
    assert_eq!(w.c.commits_pending(), 0);
    assert!(w.out().is_empty());
}

/// Answers the next route lookup of `T` with broker-a at `addrs` (a `brokerAddrs` object).
fn reroute(w: &mut World, addrs: &str) {
    let r = one(w.session_out());
    assert_eq!(r.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
    let body = format!(
        r#"{{"brokerDatas":[{{"brokerAddrs":{addrs},"brokerName":"broker-a","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":1,"topicSysFlag":0,"writeQueueNums":1}}]}}"#
    );
    let f = response(0, r.opaque, &[], body.as_bytes());
    assert_eq!(
        w.s.handle_frame(w.now, r.peer, &f).unwrap(),
        Incoming::Handled
    );
}

fn pull_answer_from(w: &mut World, to: &Sent, suggest: &str) {
    let ext = [
        ("suggestWhichBrokerId", suggest),
        ("nextBeginOffset", "5"),
        ("minOffset", "0"),
        ("maxOffset", "5"),
    ];
    w.reply(to, ResponseCode::PULL_NOT_FOUND.0, &ext, b"");
}

#[test]
fn pulls_follow_the_suggested_node_and_the_slave_while_the_master_is_gone() {
    const M: &str = r#"{"0":"10.0.0.1:10911","1":"10.0.0.3:10911","2":"10.0.0.4:10911"}"#;
    let mut w = World::new(1);
    w.s.refresh_route(w.now, TopicId(0));
    reroute(&mut w, M);
    let b = BrokerId(0);
    assert_eq!(w.s.slave_addr(b), Some("10.0.0.3:10911"));
    let pull = start(&mut w, &[ME], 0, 5);
    assert_eq!(pull.peer, Peer::Broker(b));
    // The master suggests its slave (a slow consumer): the next pull goes there, without
    // COMMIT_OFFSET (Java clears it for a slave).
    pull_answer_from(&mut w, &pull, "1");
    let pull = one(w.out());
    assert_eq!(pull.peer, Peer::Slave(b));
    let flag: i32 = pull.ext["sysFlag"].parse().unwrap();
    assert_eq!(flag & crate::consumer::pull_flag::COMMIT_OFFSET, 0);
    // The slave suggests the master again.
    pull_answer_from(&mut w, &pull, "0");
    let pull = one(w.out());
    assert_eq!(pull.peer, Peer::Broker(b));
    // The master dies: its pull fails and the topic's route is refreshed at once.
    assert!(w.c.handle_call_failed(w.now, &w.s, pull.opaque));
    assert!(w.session_out().is_empty());
    assert!(w.out().is_empty());
    reroute(&mut w, r#"{"1":"10.0.0.3:10911"}"#);
    assert_eq!(w.s.broker_addr(b), None);
    assert_eq!(w.s.poll_event(), Some(Event::Reconnect(Peer::Broker(b))));
    // Reads (pulls, commits) go to the slave while the route names no master.
    w.now = t(1000);
    let pull = one(w.out());
    assert_eq!(pull.peer, Peer::Slave(b));
    w.pull_answer(&pull, 6, &[(5, "TagA")]);
    let lease = w.got[0].1;
    assert!(w.c.ack(w.now, q(0), lease, 5));
    w.c.commit_now();
    let calls = w.out();
    assert!(calls.iter().all(|c| c.peer == Peer::Slave(b)), "{calls:?}");
    assert!(
        calls
            .iter()
            .any(|c| c.code == RequestCode::UPDATE_CONSUMER_OFFSET.0)
    );
    // The slave fails too: another refresh (a second after the first) finds the master back.
    let pull = calls
        .iter()
        .find(|c| c.code == RequestCode::PULL_MESSAGE.0)
        .unwrap();
    assert!(w.c.handle_call_failed(w.now, &w.s, pull.opaque));
    assert!(w.out().is_empty());
    reroute(&mut w, M);
    // The master is back in the route: the next pull goes to it.
    w.now = t(2000);
    let pull = one(w.out());
    assert_eq!(pull.peer, Peer::Broker(b));
}

#[test]
fn the_lag_of_a_queue_not_pulled_comes_from_get_max_offset() {
    let mut w = World::new(1);
    let pull = start(&mut w, &[ME], 0, 0);
    assert!(w.c.pause(q(0)));
    w.pull_answer(&pull, 1, &[(0, "TagA")]);
    let lag = |w: &World| w.c.owned().next().and_then(|o| o.lag());
    // maxOffset 100 from the pull answer, nothing acknowledged.
    assert_eq!(lag(&w), Some(100));
    w.now = t(1000);
    assert!(w.c.ack(w.now, q(0), w.got[0].1, 0));
    assert_eq!(lag(&w), Some(99));
    // A persist period without a pull: GET_MAX_OFFSET to the queue's broker.
    w.now = t(5000);
    let calls = w.out();
    let max = calls
        .iter()
        .find(|c| c.code == RequestCode::GET_MAX_OFFSET.0)
        .unwrap_or_else(|| panic!("{calls:?}"));
    assert_eq!(
        (max.peer, max.ext["queueId"].as_str()),
        (Peer::Broker(BrokerId(0)), "0")
    );
    assert!(
        w.out()
            .iter()
            .all(|c| c.code != RequestCode::GET_MAX_OFFSET.0)
    );
    w.reply(max, 0, &[("offset", "250")], b"");
    assert_eq!(lag(&w), Some(249));
    let mut buf = [0u8; 4096];
    let n =
        w.c.running_info(w.now, 1_700_000_000_000, &w.s, &[], 0, &mut buf)
            .unwrap();
    let info = core::str::from_utf8(&buf[..n]).unwrap();
    assert!(info.contains(r#""lag":249"#), "{info}");
    assert!(info.contains(r#""consumeLag":"249""#), "{info}");
    // Acknowledged 4 s before the report.
    assert!(
        info.contains(r#""lastConsumeTimestamp":1699999996000"#),
        "{info}"
    );
    // A queue being pulled (a long poll in flight) is not measured.
    assert!(w.c.resume(q(0)));
    let pull = one(w.out());
    assert_eq!(pull.code, RequestCode::PULL_MESSAGE.0);
    w.now = t(10_000);
    assert!(
        w.out()
            .iter()
            .all(|c| c.code != RequestCode::GET_MAX_OFFSET.0)
    );
}

#[test]
fn check_refuses_what_new_refuses_and_build_never_panics() {
    let long = "g".repeat(MAX_NAME + 1);
    for (group, id, ok) in [
        ("g", "c", true),
        ("", "c", false),
        ("g", "", false),
        (&long[..], "c", false),
        ("g", &long[..], false),
        (&long[..MAX_NAME], &long[..MAX_NAME], true),
    ] {
        let cfg = PullConfig::new(group, id);
        let want = (!ok).then_some(PullConfigError::Name);
        assert_eq!(cfg.check().err(), want, "{group:?} {id:?}");
        assert_eq!(C::new(&cfg, Instant::ZERO).err(), want);
        // Unchecked: built anyway, no panic; a refused name is left empty.
        let c = C::build(&cfg, Instant::ZERO);
        assert_eq!(c.stats().pulls, 0);
        assert!(c.poll_timeout().is_some());
    }
}

/// Answers the session `s`'s route lookup (its first transmit) with a route of `queues`
/// queues of one broker.
fn answer_route<F: crate::session::Features>(
    s: &mut crate::session::Session<4, 4, 16, 16, 4, 2048, F>,
    buf: &mut [u8],
    queues: i32,
) {
    let tx = s.poll_transmit(t(0), buf, &NoLend).unwrap();
    let r = decode(&buf[..tx.len], tx.peer, tx.opaque);
    let f = response(0, r.opaque, &[], route(queues).as_bytes());
    assert_eq!(s.handle_frame(t(0), r.peer, &f).unwrap(), Incoming::Handled);
    while s.poll_event().is_some() {}
}

/// A session that leaves the optional consumer paths out (as the gateway's does).
#[derive(Clone, Copy, Debug)]
struct Lean;
impl crate::session::Features for Lean {
    const ROCKETMQ_HEADERS: bool = false;
    const HEARTBEATS: bool = true;
    const BROKER_REMARKS: bool = false;
    const CONSUMER: bool = true;
    const ORDERLY: bool = false;
    const SEND_BACK: bool = false;
    const LAG_PROBES: bool = false;
    const BROADCASTING: bool = false;
}

#[test]
fn paths_a_session_leaves_out_are_refused_or_fail_at_once() {
    type L = crate::session::Session<4, 4, 16, 16, 4, 2048, Lean>;
    let mut cfg = Config::new(1, "", ME);
    cfg.consumer_group = Some("cg");
    cfg.heartbeat = None;
    let mut s = L::new(&cfg, t(0)).unwrap();
    let mut buf = [0u8; 2048];
    let pc = |f: fn(&mut PullConfig<'_>)| {
        let mut pc = PullConfig::new("cg", ME);
        pc.retry = false;
        f(&mut pc);
        pc
    };
    // Orderly and broadcasting are not compiled in: refused, not silently ignored.
    for f in [
        (|p: &mut PullConfig<'_>| p.orderly = true) as fn(&mut PullConfig<'_>),
        |p| p.model = MessageModel::Broadcasting,
    ] {
        let mut c = C::new(&pc(f), t(0)).unwrap();
        assert_eq!(
            c.subscribe(t(0), &mut s, "T", "*"),
            Err(PullConfigError::Unsupported)
        );
    }
    let mut c = C::new(&pc(|_| {}), t(0)).unwrap();
    c.subscribe(t(0), &mut s, "T", "*").unwrap();
    answer_route(&mut s, &mut buf, 1);
    let mut now = t(0);
    let mut got = StdVec::new();
    let mut step = |now: Instant, c: &mut C, s: &mut L, reply: &dyn Fn(&Sent) -> StdVec<u8>| {
        c.handle_timeout(now);
        let tx = c.poll_call(now, s, &mut buf, &NoLend).expect("a request");
        let sent = decode(&buf[..tx.len], tx.peer, tx.opaque);
        let f = reply(&sent);
        let _ = s.handle_frame(now, sent.peer, &f).unwrap();
        c.handle_response(now, s, sent.opaque, &f, &mut |d: Delivery<'_, '_>| {
            got.push((d.lease, d.message.queue_offset));
        });
        sent.code
    };
    let list = |r: &Sent| response(0, r.opaque, &[], br#"{"consumerIdList":["10.0.0.2@gw"]}"#);
    assert_eq!(
        step(now, &mut c, &mut s, &list),
        RequestCode::GET_CONSUMER_LIST_BY_GROUP.0
    );
    let offset = |r: &Sent| response(0, r.opaque, &[("offset", "5")], b"");
    assert_eq!(
        step(now, &mut c, &mut s, &offset),
        RequestCode::QUERY_CONSUMER_OFFSET.0
    );
    let pull = |r: &Sent| {
        let ext = [
            ("suggestWhichBrokerId", "0"),
            ("nextBeginOffset", "6"),
            ("minOffset", "0"),
            ("maxOffset", "6"),
        ];
        response(0, r.opaque, &ext, &records(&[(5, "TagA")]))
    };
    assert_eq!(
        step(now, &mut c, &mut s, &pull),
        RequestCode::PULL_MESSAGE.0
    );
    let lease = got[0].0;
    // A nack: no CONSUMER_SEND_MSG_BACK is written; the send-back fails at once, so the
    // runtime's fallback follows, as for a refused one.
    let n = Nack {
        offset: 5,
        commit_log_offset: 1005,
        msg_id: "MSGID",
        topic: "T",
        delay_level: 0,
        reconsume_times: 0,
        body_len: 2,
        flag: 0,
    };
    c.nack(q(0), lease, &n).unwrap();
    now += Duration::from_millis(1);
    c.handle_timeout(now);
    while let Some(tx) = c.poll_call(now, &mut s, &mut buf, &NoLend) {
        let sent = decode(&buf[..tx.len], tx.peer, tx.opaque);
        assert_ne!(sent.code, RequestCode::CONSUMER_SEND_MSG_BACK.0);
        assert_ne!(sent.code, RequestCode::GET_MAX_OFFSET.0);
    }
    let failed = PullEvent::SendBackFailed {
        queue: q(0),
        lease,
        offset: 5,
    };
    assert_eq!(c.poll_event(), Some(failed));
    assert_eq!(c.sends_back_pending(), 0);
    assert!(c.ack(now, q(0), lease, 5), "the fallback stored it");
}

/// A session with fixed queues and no timestamp positions (the gateway's, without its
/// `rebalance` feature).
#[derive(Clone, Copy, Debug)]
struct Fixed;
impl crate::session::Features for Fixed {
    const ROCKETMQ_HEADERS: bool = false;
    const HEARTBEATS: bool = false;
    const BROKER_REMARKS: bool = false;
    const CONSUMER: bool = true;
    const REBALANCE: bool = false;
    const TIMESTAMPS: bool = false;
}

#[test]
fn fixed_queues_own_every_queue_with_no_consumer_list() {
    type F = crate::session::Session<4, 4, 16, 16, 4, 2048, Fixed>;
    let mut cfg = Config::new(1, "", ME);
    cfg.consumer_group = Some("cg");
    let mut s = F::new(&cfg, t(0)).unwrap();
    let mut buf = [0u8; 2048];
    let mut pc = PullConfig::new("cg", ME);
    pc.retry = false;
    // A timestamp start is not compiled in: refused.
    let mut by_time = pc;
    by_time.consume_from = ConsumeFromWhere::Timestamp;
    let mut c = C::new(&by_time, t(0)).unwrap();
    assert_eq!(
        c.subscribe(t(0), &mut s, "T", "*"),
        Err(PullConfigError::Unsupported)
    );
    let mut c = C::new(&pc, t(0)).unwrap();
    c.subscribe(t(0), &mut s, "T", "*").unwrap();
    // The first round comes before the route: nothing to own yet.
    c.handle_timeout(t(0));
    assert!(c.poll_call(t(0), &mut s, &mut buf, &NoLend).is_none());
    answer_route(&mut s, &mut buf, 3);
    // With the route, a round runs at once (not a rebalance interval later): it owns all 3
    // queues and asks for their committed offsets; no GET_CONSUMER_LIST_BY_GROUP, nothing
    // shared.
    let mut queried = StdVec::new();
    while let Some(tx) = c.poll_call(t(0), &mut s, &mut buf, &NoLend) {
        let sent = decode(&buf[..tx.len], tx.peer, tx.opaque);
        assert_eq!(sent.code, RequestCode::QUERY_CONSUMER_OFFSET.0);
        queried.push(sent.ext["queueId"].clone());
        let f = response(0, sent.opaque, &[("offset", "7")], b"");
        let _ = s.handle_frame(t(0), sent.peer, &f).unwrap();
        assert!(c.handle_response(t(0), &s, sent.opaque, &f, &mut |_| {}));
        if queried.len() == 3 {
            break;
        }
    }
    queried.sort();
    assert_eq!(queried, ["0", "1", "2"]);
    assert_eq!(c.owned().count(), 3);
    // Each queue then pulls from its committed offset, the subscription in the request.
    let tx = c.poll_call(t(0), &mut s, &mut buf, &NoLend).unwrap();
    let sent = decode(&buf[..tx.len], tx.peer, tx.opaque);
    assert_eq!(sent.code, RequestCode::PULL_MESSAGE.0);
    assert_eq!(sent.ext["queueOffset"], "7");
    assert_eq!(sent.ext["subscription"], "*");
    let flag: i32 = sent.ext["sysFlag"].parse().unwrap();
    assert_ne!(flag & crate::consumer::pull_flag::SUBSCRIPTION, 0);
    // Seeks: to a timestamp refused, to the beginning taken.
    assert!(!c.seek(t(0), q(1), Position::Timestamp(1)));
    assert!(c.seek(t(0), q(1), Position::Begin));
}

/// Every event the consumer has now.
fn events(w: &mut World) -> StdVec<PullEvent> {
    core::iter::from_fn(|| w.c.poll_event()).collect()
}

#[test]
fn milestones_a_command_asked_for_are_reported_once_reached_and_only_then() {
    let mut w = World::new(2);
    // The periodic first round is nobody's command: no milestone for it.
    let pull = start(&mut w, &[OTHER, ME], 0, 5);
    assert!(events(&mut w).is_empty());
    // A round asked for: reported once the list is answered and the new queues located.
    w.now = t(100);
    w.c.rebalance_now(w.now);
    assert!(
        events(&mut w).is_empty(),
        "the consumer list is not even asked for"
    );
    let out = w.out();
    let list = out
        .iter()
        .find(|r| r.code == RequestCode::GET_CONSUMER_LIST_BY_GROUP.0)
        .expect("the round's list");
    w.consumers(list, &[ME]);
    assert!(
        events(&mut w).is_empty(),
        "queue 1 is new and still looks up its offset"
    );
    let query = w
        .out()
        .into_iter()
        .find(|r| r.code == RequestCode::QUERY_CONSUMER_OFFSET.0)
        .expect("queue 1's offset");
    w.reply(&query, 0, &[("offset", "0")], b"");
    assert_eq!(events(&mut w), [PullEvent::Rebalanced]);
    assert!(events(&mut w).is_empty(), "once");
    // Commits asked for: reported when answered; the periodic ones are not.
    w.pull_answer(&pull, 6, &[(5, "TagA")]);
    let lease = w.got[0].1;
    assert!(w.c.ack(w.now, q(0), lease, 5));
    w.c.commit_now();
    assert!(events(&mut w).is_empty());
    let commit = w
        .out()
        .into_iter()
        .find(|r| r.code == RequestCode::UPDATE_CONSUMER_OFFSET.0)
        .expect("the commit");
    assert!(events(&mut w).is_empty(), "in flight");
    w.reply(&commit, 0, &[], b"");
    assert_eq!(events(&mut w), [PullEvent::Committed]);
}

#[test]
fn orderly_a_granted_lock_is_reported_to_whoever_waits_for_its_turn() {
    let mut w = World::configured(1, |c| c.orderly = true);
    let l = one(w.out());
    w.consumers(&l, &[ME]);
    let (lock, _) = body_of(&mut w, RequestCode::LOCK_BATCH_MQ);
    assert!(events(&mut w).is_empty());
    w.reply(
        &lock,
        0,
        &[],
        br#"{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}"#,
    );
    let lease = w.c.owned().next().unwrap().lease;
    assert_eq!(events(&mut w), [PullEvent::Locked { queue: q(0), lease }]);
    assert!(events(&mut w).is_empty(), "once per grant");
}

#[test]
fn ack_on_delivery_acknowledges_each_message_when_the_closure_returns() {
    for auto in [false, true] {
        let mut w = World::configured(1, |c| c.ack_on_delivery = auto);
        let pull = start(&mut w, &[ME], 0, 5);
        w.pull_answer(&pull, 8, &[(5, "TagA"), (6, "TagB"), (7, "TagA")]);
        assert_eq!(w.got.len(), 3);
        let o = w.c.owned().next().unwrap();
        // Acknowledged: committable past the last one; otherwise still in flight.
        let (committable, in_flight) = if auto { (8, 0) } else { (5, 3) };
        assert_eq!(o.tracker.committable(), committable, "auto {auto}");
        assert_eq!(o.tracker.cached_count(), in_flight, "auto {auto}");
        assert_eq!(w.c.stats().acked, if auto { 3 } else { 0 });
        // A later ack of one of them finds nothing in flight.
        assert_eq!(w.c.ack(w.now, q(0), w.got[0].1, 5), !auto);
    }
}

#[test]
fn orderly_a_lock_granted_for_a_queue_dropped_meanwhile_is_given_back_at_once() {
    let mut w = World::configured(2, |c| c.orderly = true);
    let l = one(w.out());
    w.consumers(&l, &[ME]);
    let (lock, body) = body_of(&mut w, RequestCode::LOCK_BATCH_MQ);
    assert_eq!(lock_body(&body).len(), 2);
    // Another member joins while the lock request is in flight: one queue goes to it.
    w.c.rebalance_now(w.now);
    let list = one(w.out());
    assert_eq!(list.code, RequestCode::GET_CONSUMER_LIST_BY_GROUP.0);
    w.consumers(&list, &[ME, OTHER]);
    let kept: StdVec<QueueKey> = w.c.owned().map(|o| o.queue).collect();
    assert_eq!(kept.len(), 1);
    // The broker granted both: the one no longer ours is unlocked at once (else the other
    // member waits out the broker's 60 s lock).
    w.reply(
        &lock,
        0,
        &[],
        br#"{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"},{"brokerName":"broker-a","queueId":1,"topic":"T"}]}"#,
    );
    let (unlock, body) = body_of(&mut w, RequestCode::UNLOCK_BATCH_MQ);
    assert_eq!(unlock.peer, Peer::Broker(BrokerId(0)));
    let gone = if kept[0] == q(0) { "1" } else { "0" };
    assert_eq!(lock_body(&body), [gone]);
    assert_eq!(w.c.owned().map(|o| o.queue).collect::<StdVec<_>>(), kept);
}
