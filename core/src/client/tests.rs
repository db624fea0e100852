//! The client on virtual time against scripted brokers: every broker request dispatched in
//! the core, answers written by `poll_transmit`, call failures reaching the consumer at once.

use std::string::{String as StdString, ToString};
use std::vec::Vec as StdVec;

use super::*;
use crate::message::stored::MessageVersion;
use crate::message::{StoredMessage, SysFlag};
use crate::pull_consumer::{PullConfig, PullConsumer};
use crate::send_back::{Nack, NackError};
use crate::session::{Config, Outbound};
use crate::wire::headers::HeartbeatRequestHeader;
use crate::wire::{CommandRepr, ResponseCode, SerializeType, flag, version};

type Pc = PullConsumer<2, 4, 8, 16, 8, 16>;
type Consuming = Client<4, 4, 16, 16, 4, 2048, Full, Fixed, Pc>;
type Producing = Client<4, 4, 16, 16, 4, 2048>;

const ME: &str = "10.0.0.2@gw";
const BROKER: Peer = Peer::Broker(BrokerId(0));

struct Lent;
impl nack::Lend for Lent {
    fn nacked(&self, key: NackKey) -> Option<NackedMessage<'_>> {
        (key.offset == 7).then_some(NackedMessage {
            properties: "TAGS\u{1}A\u{2}UNIQ_KEY\u{1}ID7\u{2}",
            body: b"seven",
            msg_id: "ID7",
            topic: "T",
            reconsume_times: 2,
            flag: 0,
        })
    }
}
impl Outbound for Lent {
    fn properties(&self, _: SendId) -> &str {
        ""
    }
    fn unix_millis(&self) -> i64 {
        1_700_000_000_000
    }
    fn running_prop(&self, i: usize) -> Option<(&str, &str)> {
        [("PROP_CLIENT_VERSION", "rmq-test")].get(i).copied()
    }
}

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn request(
    code: RequestCode,
    opaque: i32,
    oneway: bool,
    ext: &[(&str, &str)],
    body: &[u8],
) -> StdVec<u8> {
    let mut cmd = CommandRepr::request(code, opaque, version::V5_3_3, Some(ext));
    if oneway {
        cmd.flag = flag::ONEWAY;
    }
    let mut buf = std::vec![0u8; 1024];
    let n = cmd
        .emit_frame_prefix_and_header(SerializeType::JSON, body.len(), &mut buf)
        .unwrap();
    buf.truncate(n);
    buf.extend_from_slice(body);
    buf
}

fn response(code: i32, opaque: i32, body: &[u8]) -> StdVec<u8> {
    let cmd = CommandRepr::<HeartbeatRequestHeader>::response(
        ResponseCode(code),
        opaque,
        version::V5_3_3,
        None,
    );
    let mut buf = std::vec![0u8; 1024];
    let n = cmd
        .emit_frame_prefix_and_header(SerializeType::JSON, body.len(), &mut buf)
        .unwrap();
    buf.truncate(n);
    buf.extend_from_slice(body);
    buf
}

/// What a written frame says: code, opaque, remark, body.
struct Written {
    tx: Transmit,
    code: i32,
    opaque: i32,
    remark: Option<StdString>,
    body: StdVec<u8>,
}

fn written(tx: Transmit, buf: &[u8]) -> Written {
    let f = Frame::new_checked(&buf[..tx.len]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    let mut rb = [0u8; 512];
    let remark = h
        .remark()
        .map(|r| r.unescape_into(&mut rb).unwrap().to_string());
    Written {
        tx,
        code: h.code(),
        opaque: h.opaque(),
        remark,
        body: f.body_ref().to_vec(),
    }
}

fn producer() -> Producing {
    let cfg = Config::new(1, "pg", ME);
    Client::from_parts(Session::build(&cfg, t(0)), NoConsumer)
}

fn route() -> &'static str {
    r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"broker-a","cluster":"c"}],"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":1,"topicSysFlag":0,"writeQueueNums":1}]}"#
}

/// A consumer of `T` in group `cg` whose route is known.
fn consumer() -> Consuming {
    let mut cfg = Config::new(1, "", ME);
    cfg.consumer_group = Some("cg");
    cfg.heartbeat = None;
    let mut pc = PullConfig::new("cg", ME);
    pc.retry = false;
    let mut c: Consuming = Client::from_parts(Session::build(&cfg, t(0)), Pc::build(&pc, t(0)));
    let (pull, session) = c.consumer_mut();
    pull.subscribe(t(0), session, "T", "*").unwrap();
    let mut buf = [0u8; 2048];
    let tx = c.poll_transmit(t(0), &mut buf, &Lent).unwrap();
    assert!(!tx.answer && tx.peer == Peer::NameServer(0));
    let f = response(0, tx.opaque, route().as_bytes());
    c.handle_frame(t(0), tx.peer, &f, &mut |_| {}).unwrap();
    while c.poll_event().is_some() {}
    c
}

/// Every transmit due now (timers run first).
fn out<const T: usize, F: Features, C: Attached>(
    c: &mut Client<4, 4, 16, 16, 4, T, F, Fixed, C>,
    now: Instant,
) -> StdVec<Written> {
    c.handle_timeout(now);
    let mut v = StdVec::new();
    let mut buf = [0u8; 8192];
    while let Some(tx) = c.poll_transmit(now, &mut buf, &Lent) {
        v.push(written(tx, &buf));
    }
    v
}

#[test]
fn a_producer_answers_requests_for_consumers_as_not_supported_and_oneways_not_at_all() {
    let mut c = producer();
    for (code, oneway) in [
        (RequestCode::GET_CONSUMER_RUNNING_INFO, false),
        (RequestCode::NOTIFY_CONSUMER_IDS_CHANGED, true),
        (RequestCode(221), false),
        (RequestCode::CONSUME_MESSAGE_DIRECTLY, false),
    ] {
        let f = request(code, 40 + code.0, oneway, &[], b"");
        c.handle_frame(t(1), BROKER, &f, &mut |_| {
            panic!("nothing for the application")
        })
        .unwrap();
    }
    let w = out(&mut c, t(1));
    let got: StdVec<(i32, i32)> = w.iter().map(|w| (w.opaque, w.code)).collect();
    // Java's answer to a code it has no processor for; the oneway NOTIFY gets none.
    assert_eq!(got, [(40 + 307, 3), (40 + 221, 3), (40 + 309, 3)]);
    assert!(w.iter().all(|w| w.tx.answer && w.tx.peer == BROKER));
    assert_eq!(
        w[0].remark.as_deref(),
        Some(" request type 307 not supported")
    );
    assert!(c.is_live(&w[0].tx));
    assert_eq!(c.stats().answered, 3);
}

#[test]
fn a_consumer_answers_its_running_info_and_refuses_another_groups() {
    let mut c = consumer();
    let ours = request(
        RequestCode::GET_CONSUMER_RUNNING_INFO,
        5,
        false,
        &[("consumerGroup", "cg"), ("clientId", ME)],
        b"",
    );
    let other = request(
        RequestCode::GET_CONSUMER_RUNNING_INFO,
        6,
        false,
        &[("consumerGroup", "xx"), ("clientId", ME)],
        b"",
    );
    c.handle_frame(t(2), BROKER, &ours, &mut |_| {}).unwrap();
    c.handle_frame(t(2), BROKER, &other, &mut |_| {}).unwrap();
    let w: StdVec<Written> = out(&mut c, t(2))
        .into_iter()
        .filter(|w| w.tx.answer)
        .collect();
    assert_eq!(w.len(), 2);
    assert_eq!((w[0].opaque, w[0].code), (5, 0));
    let info = core::str::from_utf8(&w[0].body).unwrap();
    assert!(info.contains(r#""consumerGroup":"cg""#), "{info}");
    // The runtime's lent properties are part of it.
    assert!(
        info.contains(r#""PROP_CLIENT_VERSION":"rmq-test""#),
        "{info}"
    );
    assert_eq!((w[1].opaque, w[1].code), (6, 1));
    assert_eq!(
        w[1].remark.as_deref(),
        Some("The Consumer Group <cg> not exist in this consumer")
    );
}

#[test]
fn a_consumer_answers_its_offsets_of_a_topic_and_an_empty_table_for_others() {
    let mut c = consumer();
    for (opaque, group, topic) in [(7, "cg", "T"), (8, "xx", "T"), (9, "cg", "Nope")] {
        let f = request(
            RequestCode::GET_CONSUMER_STATUS_FROM_CLIENT,
            opaque,
            false,
            &[("topic", topic), ("group", group), ("clientAddr", ME)],
            b"",
        );
        c.handle_frame(t(2), BROKER, &f, &mut |_| {}).unwrap();
    }
    let w: StdVec<Written> = out(&mut c, t(2))
        .into_iter()
        .filter(|w| w.tx.answer)
        .collect();
    let got: StdVec<(i32, i32)> = w.iter().map(|w| (w.opaque, w.code)).collect();
    assert_eq!(got, [(7, 0), (8, 0), (9, 0)], "SUCCESS, as Java answers");
    // No queue owned yet (no route): every table is empty; another group's is too.
    for w in &w {
        assert_eq!(
            core::str::from_utf8(&w.body).unwrap(),
            r#"{"consumerTable":{},"messageQueueTable":{}}"#
        );
    }
}

fn stored(offset: i64) -> StdVec<u8> {
    let host = core::net::SocketAddr::from(([10, 0, 0, 1], 10911));
    encoded(&StoredMessage {
        version: MessageVersion::V1,
        body_crc: 0,
        queue_id: 3,
        flag: 0,
        queue_offset: offset,
        physical_offset: 99,
        sys_flag: SysFlag(0),
        born_timestamp: 1,
        born_host: host,
        store_timestamp: 2,
        store_host: host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: b"direct",
        topic: "T",
        raw_properties: b"TAGS\x01A\x02",
    })
}

fn encoded(m: &StoredMessage<'_>) -> StdVec<u8> {
    let mut buf = std::vec![0u8; m.encoded_len().unwrap()];
    m.encode(&mut buf).unwrap();
    buf
}

#[test]
fn consume_directly_runs_on_the_application_and_its_outcome_is_answered() {
    let mut c = consumer();
    let ext = [
        ("consumerGroup", "cg"),
        ("clientId", ME),
        ("brokerName", "broker-a"),
    ];
    let f = request(
        RequestCode::CONSUME_MESSAGE_DIRECTLY,
        8,
        false,
        &ext,
        &stored(4),
    );
    let mut seen = StdVec::new();
    c.handle_frame(t(3), BROKER, &f, &mut |i| match i {
        Inbound::Direct {
            peer,
            opaque,
            message,
        } => {
            seen.push((
                peer,
                opaque,
                message.message.body.to_vec(),
                message.broker_name.to_string(),
            ));
        }
        Inbound::Message(_)
        | Inbound::Check { .. }
        | Inbound::Reply(_)
        | Inbound::RecallHandle { .. }
        | Inbound::Refused { .. }
        | Inbound::Answer { .. } => {
            panic!("not a direct message")
        }
    })
    .unwrap();
    assert_eq!(
        seen,
        [(BROKER, 8, b"direct".to_vec(), "broker-a".to_string())]
    );
    // Nothing is answered until the application says how it went.
    assert!(out(&mut c, t(3)).iter().all(|w| !w.tx.answer));
    c.answer_direct(BROKER, 8, DirectOutcome::Success, 12);
    let w: StdVec<Written> = out(&mut c, t(4))
        .into_iter()
        .filter(|w| w.tx.answer)
        .collect();
    assert_eq!((w.len(), w[0].opaque, w[0].code), (1, 8, 0));
    let body = core::str::from_utf8(&w[0].body).unwrap();
    assert!(body.contains(r#""consumeResult":"CR_SUCCESS""#), "{body}");
    assert!(body.contains(r#""spentTimeMills":12"#), "{body}");
    // A message that does not decode is refused by the client itself.
    let bad = request(
        RequestCode::CONSUME_MESSAGE_DIRECTLY,
        9,
        false,
        &ext,
        b"\x00\x01",
    );
    c.handle_frame(t(5), BROKER, &bad, &mut |_| panic!("undecodable"))
        .unwrap();
    let w: StdVec<Written> = out(&mut c, t(5))
        .into_iter()
        .filter(|w| w.tx.answer)
        .collect();
    assert_eq!((w[0].opaque, w[0].code), (9, 1));
    assert_eq!(w[0].remark.as_deref(), Some("the message does not decode"));
}

#[test]
fn notify_consumer_ids_changed_rebalances_at_once() {
    let mut c = consumer();
    // The first round's consumer list, then nothing until the next round is due.
    let first = out(&mut c, t(0));
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].code, RequestCode::GET_CONSUMER_LIST_BY_GROUP.0);
    assert!(out(&mut c, t(1000)).is_empty());
    let f = request(
        RequestCode::NOTIFY_CONSUMER_IDS_CHANGED,
        1,
        true,
        &[("consumerGroup", "cg")],
        b"",
    );
    c.handle_frame(t(1000), BROKER, &f, &mut |_| {}).unwrap();
    let w = out(&mut c, t(1000));
    // Oneway: no answer; a new round's consumer list instead (after the first one's answer).
    assert!(w.iter().all(|w| !w.tx.answer));
    assert_eq!(c.consumer().stats().notifications, 1);
    let list = first[0].opaque;
    let body = format!(r#"{{"consumerIdList":["{ME}"]}}"#);
    c.handle_frame(
        t(1001),
        BROKER,
        &response(0, list, body.as_bytes()),
        &mut |_| {},
    )
    .unwrap();
    let w = out(&mut c, t(1001));
    assert!(
        w.iter()
            .any(|w| w.code == RequestCode::GET_CONSUMER_LIST_BY_GROUP.0),
        "the notified round asks again"
    );
}

#[test]
fn a_call_that_gets_no_answer_reaches_the_consumer_at_once() {
    let mut c = consumer();
    let list = out(&mut c, t(0)).remove(0);
    let body = format!(r#"{{"consumerIdList":["{ME}"]}}"#);
    c.handle_frame(
        t(10),
        BROKER,
        &response(0, list.opaque, body.as_bytes()),
        &mut |_| {},
    )
    .unwrap();
    let query = out(&mut c, t(10)).remove(0);
    assert_eq!(query.code, RequestCode::QUERY_CONSUMER_OFFSET.0);
    assert_eq!(c.consumer().starting(), 1);
    // Its connection dies: the consumer drops the queue (retried at the next round) without
    // any event being polled.
    c.handle_closed(t(20), BROKER, TransportError::ConnectionClosed);
    assert_eq!(c.consumer().owned().count(), 0);
    assert!(c.poll_event().is_none());
}

/// A request of the runtime's own (`Client::call`) to `BROKER` at `now`, within 100 ms.
fn runtime_call<const T: usize, F: Features, C: Attached>(
    c: &mut Client<4, 4, 16, 16, 4, T, F, Fixed, C>,
    now: Instant,
) -> i32 {
    let mut buf = [0u8; 512];
    let code = RequestCode::CHECK_CLIENT_CONFIG;
    let ms = crate::time::Duration::from_millis(100);
    let none = None::<HeartbeatRequestHeader>;
    let tx = c.call(now, BROKER, code, none, b"{}", ms, &mut buf, &Lent);
    let tx = tx.unwrap();
    assert_eq!((tx.peer, tx.body_len), (BROKER, 2));
    // The runtime writes the body after the head.
    buf[tx.len..tx.len + 2].copy_from_slice(b"{}");
    let whole = Transmit {
        len: tx.len + 2,
        ..tx
    };
    let w = written(whole, &buf);
    assert_eq!((w.code, w.body.as_slice()), (code.0, &b"{}"[..]));
    tx.opaque
}

/// The opaques `frame` hands out as [`Inbound::Answer`].
fn answers<const T: usize, F: Features, C: Attached>(
    c: &mut Client<4, 4, 16, 16, 4, T, F, Fixed, C>,
    now: Instant,
    frame: &[u8],
) -> StdVec<i32> {
    let mut seen = StdVec::new();
    c.handle_frame(now, BROKER, frame, &mut |i| {
        if let Inbound::Answer { opaque } = i {
            seen.push(opaque);
        }
    })
    .unwrap();
    seen
}

#[test]
fn runtime_calls_are_answered_through_the_client_or_fail_as_events() {
    let mut c = producer();
    let first = runtime_call(&mut c, t(1));
    assert_eq!(answers(&mut c, t(2), &response(0, first, b"")), [first]);
    // A late copy of the answer is nobody's.
    assert!(answers(&mut c, t(3), &response(0, first, b"")).is_empty());
    // No answer by the deadline: an event at the deadline, not before.
    let silent = runtime_call(&mut c, t(10));
    c.handle_timeout(t(109));
    assert!(c.poll_event().is_none());
    c.handle_timeout(t(110));
    let timed_out = TransportError::TimedOut;
    let e = Event::CallFailed {
        opaque: silent,
        error: timed_out,
    };
    assert_eq!(c.poll_event(), Some(e));
    assert!(answers(&mut c, t(111), &response(0, silent, b"")).is_empty());
    // A lost connection fails it at once.
    let lost = runtime_call(&mut c, t(120));
    c.handle_closed(t(121), BROKER, TransportError::ConnectionClosed);
    let error = TransportError::ConnectionClosed;
    let e = Event::CallFailed {
        opaque: lost,
        error,
    };
    assert_eq!(c.poll_event(), Some(e));
    assert!(c.poll_event().is_none());
}

#[test]
fn a_consumers_runtime_calls_are_the_runtimes_and_its_own_calls_the_consumers() {
    let mut c = consumer();
    let list = out(&mut c, t(0)).remove(0);
    assert_eq!(list.code, RequestCode::GET_CONSUMER_LIST_BY_GROUP.0);
    let mine = runtime_call(&mut c, t(1));
    // The consumer's answer is the consumer's; the runtime's is handed out.
    let body = format!(r#"{{"consumerIdList":["{ME}"]}}"#);
    let theirs = response(0, list.opaque, body.as_bytes());
    assert!(answers(&mut c, t(2), &theirs).is_empty());
    assert_eq!(answers(&mut c, t(3), &response(0, mine, b"")), [mine]);
    // Both fail with the connection: the consumer's at once, the runtime's as an event.
    let query = out(&mut c, t(4)).remove(0);
    assert_eq!(query.code, RequestCode::QUERY_CONSUMER_OFFSET.0);
    let lost = runtime_call(&mut c, t(5));
    c.handle_closed(t(6), BROKER, TransportError::ConnectionClosed);
    assert_eq!(c.consumer().owned().count(), 0);
    let error = TransportError::ConnectionClosed;
    let e = Event::CallFailed {
        opaque: lost,
        error,
    };
    assert_eq!(c.poll_event(), Some(e));
}

/// A consumer of `T` in group `cg` (the retry topic subscribed, heartbeats on), not started.
fn unstarted() -> Consuming {
    let mut cfg = Config::new(1, "", ME);
    cfg.consumer_group = Some("cg");
    let pc = PullConfig::new("cg", ME);
    let mut c: Consuming = Client::from_parts(Session::build(&cfg, t(0)), Pc::build(&pc, t(0)));
    let (pull, session) = c.consumer_mut();
    pull.subscribe(t(0), session, "T", "*").unwrap();
    c
}

/// The request codes (and route topics) written now, answering each route and heartbeat.
fn answer_all(
    c: &mut Consuming,
    now: Instant,
    events: &mut StdVec<Event>,
) -> StdVec<(i32, StdString, Transmit)> {
    answer_all_with(c, now, events, None, &mut StdVec::new())
}

/// [`answer_all`], answering each CHECK_CLIENT_CONFIG with `check` (code and remark; `None`:
/// not at all) and keeping the refusals heard, with their remarks.
fn answer_all_with(
    c: &mut Consuming,
    now: Instant,
    events: &mut StdVec<Event>,
    check: Option<(i32, &str)>,
    refusals: &mut StdVec<(Refusal, StdString)>,
) -> StdVec<(i32, StdString, Transmit)> {
    let mut buf = [0u8; 8192];
    let mut got = StdVec::new();
    c.handle_timeout(now);
    while let Some(tx) = c.poll_transmit(now, &mut buf, &Lent) {
        let f = Frame::new_checked(&buf[..tx.len]).unwrap();
        let h = CommandHeader::parse(&f).unwrap();
        let mut vb = [0u8; 256];
        let topic = h
            .ext_iter()
            .find(|(k, _)| k.eq_str("topic"))
            .map(|(_, v)| v.unescape_into(&mut vb).unwrap().to_string())
            .unwrap_or_default();
        got.push((h.code(), topic.clone(), tx));
        let answer = match RequestCode(h.code()) {
            RequestCode::GET_ROUTEINFO_BY_TOPIC => Some(response(0, tx.opaque, route().as_bytes())),
            RequestCode::HEART_BEAT => Some(response(0, tx.opaque, b"")),
            RequestCode::GET_CONSUMER_LIST_BY_GROUP => {
                let body = format!(r#"{{"consumerIdList":["{ME}"]}}"#);
                Some(response(0, tx.opaque, body.as_bytes()))
            }
            RequestCode::QUERY_CONSUMER_OFFSET => {
                let mut cmd = CommandRepr::response(
                    ResponseCode(0),
                    tx.opaque,
                    version::V5_3_3,
                    Some(&[("offset", "0")][..]),
                );
                cmd.remark = None;
                let mut b = std::vec![0u8; 512];
                let n = cmd
                    .emit_frame_prefix_and_header(SerializeType::JSON, 0, &mut b)
                    .unwrap();
                b.truncate(n);
                Some(b)
            }
            RequestCode::CHECK_CLIENT_CONFIG => check.map(|(code, remark)| {
                let mut cmd = CommandRepr::<HeartbeatRequestHeader>::response(
                    ResponseCode(code),
                    tx.opaque,
                    version::V5_3_3,
                    None,
                );
                cmd.remark = Some(remark);
                let mut b = std::vec![0u8; 2048];
                let n = cmd
                    .emit_frame_prefix_and_header(SerializeType::JSON, 0, &mut b)
                    .unwrap();
                b.truncate(n);
                b
            }),
            _ => None,
        };
        if let Some(a) = answer {
            c.handle_frame(now, tx.peer, &a, &mut |i| {
                if let Inbound::Refused { refusal, remark } = i {
                    refusals.push((refusal, remark.to_string()));
                }
            })
            .unwrap();
        }
        while let Some(e) = c.poll_event() {
            events.push(e);
        }
    }
    while let Some(e) = c.poll_event() {
        events.push(e);
    }
    got
}

#[test]
fn a_consumer_starts_with_routes_then_a_heartbeat_then_the_retry_route_then_a_rebalance() {
    let mut c = unstarted();
    let mut events = StdVec::new();
    c.start_consumer(t(0));
    let got = answer_all(&mut c, t(0), &mut events);
    let codes: StdVec<(i32, &str)> = got.iter().map(|(c, t, _)| (*c, t.as_str())).collect();
    let at = |code: RequestCode, topic: &str| {
        codes
            .iter()
            .position(|x| *x == (code.0, topic))
            .unwrap_or_else(|| panic!("{code:?} {topic} in {codes:?}"))
    };
    let last =
        |code: RequestCode, topic: &str| codes.iter().rposition(|x| *x == (code.0, topic)).unwrap();
    // (Subscribing looked both routes up; the retry topic's is asked again after the
    // heartbeat, which creates it on the brokers.)
    let heartbeat = at(RequestCode::HEART_BEAT, "");
    assert!(
        at(RequestCode::GET_ROUTEINFO_BY_TOPIC, "T") < heartbeat,
        "{codes:?}"
    );
    let retry_route = last(RequestCode::GET_ROUTEINFO_BY_TOPIC, "%RETRY%cg");
    assert!(heartbeat < retry_route, "{codes:?}");
    let list = at(RequestCode::GET_CONSUMER_LIST_BY_GROUP, "");
    assert!(retry_route < list, "the first round comes last: {codes:?}");
    assert!(list < at(RequestCode::QUERY_CONSUMER_OFFSET, "T"));
    assert!(events.contains(&Event::Started), "{events:?}");
    assert_eq!(c.consumer().starting(), 0);
    assert_eq!(c.consumer().owned().count(), 2);
    assert!(events.iter().filter(|e| **e == Event::Started).count() == 1);
    assert!(!c.name_servers_unreachable(), "the NameServer answered");
}

/// A consumer of `T` with an SQL92 subscription (`lazy`: [`PullConfig::lazy_start`]), not
/// started.
fn sql_unstarted(lazy: bool) -> Consuming {
    let mut cfg = Config::new(1, "", ME);
    cfg.consumer_group = Some("cg");
    let mut pc = PullConfig::new("cg", ME);
    pc.lazy_start = lazy;
    let mut c: Consuming = Client::from_parts(Session::build(&cfg, t(0)), Pc::build(&pc, t(0)));
    let (pull, session) = c.consumer_mut();
    pull.subscribe_sql(t(0), session, "T", "a > 1").unwrap();
    c
}

/// Starts `c`, answering each CHECK_CLIENT_CONFIG with `check`, until `ms`: the request
/// codes written, the events and the refusals heard.
fn start_checking(
    c: &mut Consuming,
    check: Option<(i32, &str)>,
    ms: u64,
) -> (StdVec<i32>, StdVec<Event>, StdVec<(Refusal, StdString)>) {
    let (mut codes, mut events, mut refusals) = (StdVec::new(), StdVec::new(), StdVec::new());
    c.start_consumer(t(0));
    for now in (0..=ms).step_by(250) {
        let got = answer_all_with(c, t(now), &mut events, check, &mut refusals);
        codes.extend(got.iter().map(|g| g.0));
    }
    (codes, events, refusals)
}

#[test]
fn an_sql92_subscription_is_checked_after_the_routes_and_before_the_heartbeat() {
    let mut c = sql_unstarted(false);
    let (codes, events, refusals) = start_checking(&mut c, Some((0, "")), 3000);
    let at = |code: RequestCode| codes.iter().position(|c| *c == code.0).unwrap();
    let check = at(RequestCode::CHECK_CLIENT_CONFIG);
    assert!(at(RequestCode::GET_ROUTEINFO_BY_TOPIC) < check, "{codes:?}");
    assert!(check < at(RequestCode::HEART_BEAT), "{codes:?}");
    let checks = codes
        .iter()
        .filter(|c| **c == RequestCode::CHECK_CLIENT_CONFIG.0);
    assert_eq!(
        checks.count(),
        1,
        "the retry topic's TAG subscription is not checked"
    );
    assert!(events.contains(&Event::Started), "{events:?}");
    assert!(refusals.is_empty());
}

#[test]
fn a_refused_sql92_subscription_fails_the_start_before_anything_is_announced() {
    let mut c = sql_unstarted(true);
    let remark = "The broker does not support consumer to filter message by SQL92";
    // All at 0 ms, before the session's own first heartbeat (due at 1 s): the start sends
    // none after the check.
    let (codes, events, refusals) = start_checking(&mut c, Some((1, remark)), 0);
    let t_topic = c.session().topic_id("T").unwrap();
    let failed = Event::StartFailed {
        topic: t_topic,
        code: 1,
    };
    assert_eq!(
        events.iter().filter(|e| **e == failed).count(),
        1,
        "{events:?}"
    );
    assert!(!events.contains(&Event::Started));
    assert!(!codes.contains(&RequestCode::HEART_BEAT.0), "{codes:?}");
    assert!(!codes.contains(&RequestCode::GET_CONSUMER_LIST_BY_GROUP.0));
    let (refusal, heard) = &refusals[0];
    assert_eq!(refusal.request, RequestCode::CHECK_CLIENT_CONFIG);
    assert_eq!((refusal.queue.topic, refusal.code.0), (t_topic, 1));
    assert_eq!(heard, remark);
}

#[test]
fn a_long_refusal_remark_with_escapes_is_kept_as_the_broker_wrote_it() {
    let mut c = sql_unstarted(false);
    let expecting = " Was expecting one of: \"AND\"".repeat(12);
    let long = format!("Encountered \"b\" at line 1, column 7.{expecting}");
    let (_, _, refusals) = start_checking(&mut c, Some((23, &long)), 0);
    let heard = &refusals[0].1;
    assert!(heard.starts_with(r#"Encountered \"b\""#), "{heard}");
    assert!(heard.len() > long.len(), "escaped, not cut: {heard}");
}

#[test]
fn an_sql92_check_without_an_answer_fails_the_start_unless_it_is_lazy() {
    let mut c = sql_unstarted(false);
    let (codes, events, _) = start_checking(&mut c, None, 10_000);
    let topic = c.session().topic_id("T").unwrap();
    let failed = Event::StartFailed { topic, code: -1 };
    assert!(events.contains(&failed), "{events:?}");
    assert!(!events.contains(&Event::Started));
    // No rebalance follows (the session's own heartbeat, due at 1 s, went out meanwhile).
    assert!(
        !codes.contains(&RequestCode::GET_CONSUMER_LIST_BY_GROUP.0),
        "{codes:?}"
    );
    // Lazy: the start goes on past the unanswered check.
    let mut c = sql_unstarted(true);
    let (codes, events, _) = start_checking(&mut c, None, 10_000);
    assert!(events.contains(&Event::Started), "{events:?}");
    assert!(
        codes.contains(&RequestCode::GET_CONSUMER_LIST_BY_GROUP.0),
        "{codes:?}"
    );
}

#[test]
fn a_start_that_hears_nothing_moves_on_at_each_steps_deadline() {
    let mut c = unstarted();
    c.start_consumer(t(0));
    let mut buf = [0u8; 4096];
    let mut started = None;
    // No NameServer answers: the routes' step ends at 3 s (no broker to heartbeat: that step
    // ends at once), then the retry route's, and the round that follows finds no route.
    for ms in (0..=15_000).step_by(250) {
        c.handle_timeout(t(ms));
        while c.poll_transmit(t(ms), &mut buf, &Lent).is_some() {}
        while let Some(e) = c.poll_event() {
            if e == Event::Started {
                assert!(started.is_none(), "started twice");
                started = Some(ms);
            }
        }
    }
    // (The retry topic's first lookup, from subscribing, fails at 3 s too: that ends its
    // step as well.) Never more than the three steps' deadlines.
    let started = started.expect("started");
    assert!((3000..=9000).contains(&started), "{started}");
    assert!(
        c.name_servers_unreachable(),
        "a driver can tell why nothing is assigned"
    );
}

/// A started consumer (one queue of `T`, retry topic not subscribed) whose first pull
/// delivered the message at offset 7; the client, its lease.
fn delivered() -> (Consuming, u32) {
    let mut c = consumer();
    let mut events = StdVec::new();
    let got = answer_all(&mut c, t(0), &mut events);
    let tx = got
        .iter()
        .find(|(code, _, _)| *code == RequestCode::PULL_MESSAGE.0)
        .expect("the pull")
        .2;
    let ext = [
        ("suggestWhichBrokerId", "0"),
        ("nextBeginOffset", "8"),
        ("minOffset", "0"),
        ("maxOffset", "8"),
    ];
    let mut cmd =
        CommandRepr::response(ResponseCode(0), tx.opaque, version::V5_3_3, Some(&ext[..]));
    cmd.remark = None;
    let body = stored_at(0, 7);
    let mut a = std::vec![0u8; 512];
    let n = cmd
        .emit_frame_prefix_and_header(SerializeType::JSON, body.len(), &mut a)
        .unwrap();
    a.truncate(n);
    a.extend_from_slice(&body);
    let mut lease = None;
    c.handle_frame(t(1), tx.peer, &a, &mut |i| {
        if let Inbound::Message(d) = i {
            lease = Some(d.lease);
        }
    })
    .unwrap();
    (c, lease.expect("delivered"))
}

fn stored_at(queue_id: i32, offset: i64) -> StdVec<u8> {
    let mut b = stored(offset);
    // `stored` writes queue 3; the record's QUEUEID is at byte 12.
    b[12..16].copy_from_slice(&queue_id.to_be_bytes());
    b
}

fn nack7() -> Nack<'static> {
    Nack {
        offset: 7,
        commit_log_offset: 99,
        msg_id: "ID7",
        topic: "T",
        delay_level: 0,
        reconsume_times: 2,
        body_len: 5,
        flag: 0,
    }
}

#[test]
fn a_refused_send_back_is_resent_to_the_retry_topic_then_handed_out_again_locally() {
    let (mut c, lease) = delivered();
    let queue = c.consumer().owned().next().unwrap().queue;
    c.nack(queue, lease, &nack7()).unwrap();
    assert_eq!(c.nack(queue, lease, &nack7()), Err(NackError::Pending));
    let w = out(&mut c, t(2));
    let back = w
        .iter()
        .find(|w| w.code == RequestCode::CONSUMER_SEND_MSG_BACK.0)
        .expect("the send-back");
    // Refused: the client resends it (after looking the retry topic's route up).
    let refused = response(1, back.opaque, b"");
    c.handle_frame(t(3), back.tx.peer, &refused, &mut |_| {})
        .unwrap();
    assert!(c.poll_event().is_none(), "on its way");
    let w = out(&mut c, t(3));
    let lookup = w
        .iter()
        .find(|w| w.code == RequestCode::GET_ROUTEINFO_BY_TOPIC.0)
        .expect("the retry topic's route");
    let r = route().replace("\"T\"", "\"%RETRY%cg\"");
    c.handle_frame(
        t(4),
        lookup.tx.peer,
        &response(0, lookup.opaque, r.as_bytes()),
        &mut |_| {},
    )
    .unwrap();
    while c.poll_event().is_some() {}
    let mut buf = [0u8; 8192];
    let tx = c.poll_transmit(t(4), &mut buf, &Lent).expect("the resend");
    // The body the runtime writes after the head: the message's, lent back by the client.
    let mut frame = buf[..tx.len].to_vec();
    frame.extend_from_slice(b"seven");
    let f = Frame::new_checked(&frame[..]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    assert_eq!(h.code(), RequestCode::SEND_MESSAGE_V2.0);
    let ext: StdVec<(StdString, StdString)> = h
        .ext_iter()
        .map(|(k, v)| {
            let (mut kb, mut vb) = ([0u8; 64], [0u8; 512]);
            (
                k.unescape_into(&mut kb).unwrap().to_string(),
                v.unescape_into(&mut vb).unwrap().to_string(),
            )
        })
        .collect();
    let get = |k: &str| ext.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
    assert_eq!(get("b"), Some("%RETRY%cg"));
    let props = get("i").unwrap();
    assert!(props.contains("RETRY_TOPIC\u{1}T\u{2}"), "{props:?}");
    assert!(
        props.contains("ORIGIN_MESSAGE_ID\u{1}ID7\u{2}"),
        "{props:?}"
    );
    assert!(
        props.contains("DELAY\u{1}5\u{2}"),
        "3 + reconsume times: {props:?}"
    );
    assert!(props.contains("TAGS\u{1}A\u{2}"), "{props:?}");
    // One more reconsume time in the header, and the message's own body.
    assert_eq!(get("j"), Some("3"));
    assert_eq!(
        (tx.body_len, c.resend_of(tx.body.unwrap()).map(|k| k.offset)),
        (5, Some(7))
    );
    // The resend fails: the message is handed out again 5 s later.
    let failed = response(13, tx.opaque, b""); // MESSAGE_ILLEGAL: not retried
    c.handle_frame(t(5), tx.peer, &failed, &mut |_| {}).unwrap();
    let key = NackKey {
        queue,
        lease,
        offset: 7,
    };
    let mut seen = StdVec::new();
    while let Some(e) = c.poll_event() {
        seen.push(e);
    }
    assert!(
        seen.contains(&Event::Nacked {
            key,
            outcome: NackOutcome::Local
        }),
        "{seen:?}"
    );
    c.handle_timeout(t(5004));
    assert!(core::iter::from_fn(|| c.poll_event()).all(|e| e != Event::Redeliver(key)));
    c.handle_timeout(t(5005));
    let later: StdVec<Event> = core::iter::from_fn(|| c.poll_event()).collect();
    assert!(later.contains(&Event::Redeliver(key)), "{later:?}");
    // Still in flight: nothing committable past it.
    assert_eq!(
        c.consumer().owned().next().unwrap().tracker.committable(),
        7
    );
}

#[test]
fn a_send_back_without_an_answer_is_resent_and_once_stored_counts_as_consumed() {
    let (mut c, lease) = delivered();
    let queue = c.consumer().owned().next().unwrap().queue;
    c.nack(queue, lease, &nack7()).unwrap();
    let w = out(&mut c, t(2));
    let back = w
        .iter()
        .find(|w| w.code == RequestCode::CONSUMER_SEND_MSG_BACK.0)
        .expect("the send-back");
    // Its connection dies: the resend follows.
    c.handle_closed(t(3), back.tx.peer, TransportError::ConnectionClosed);
    assert!(c.poll_event().is_none());
    // (The pull on that connection failed too: its topic's route is looked up again.)
    for lookup in out(&mut c, t(3))
        .iter()
        .filter(|w| w.code == RequestCode::GET_ROUTEINFO_BY_TOPIC.0)
    {
        let answer = response(0, lookup.opaque, route().as_bytes());
        c.handle_frame(t(4), lookup.tx.peer, &answer, &mut |_| {})
            .unwrap();
    }
    // The failed send-back starts the resend, which looks the retry topic's route up first.
    while c.poll_event().is_some() {}
    let mut buf = [0u8; 8192];
    let tx = loop {
        let tx = c.poll_transmit(t(4), &mut buf, &Lent).expect("the resend");
        if tx.body.is_some() {
            break tx; // (its body follows the head: `written` cannot read it)
        }
        let w = written(tx, &buf);
        assert_eq!(w.code, RequestCode::GET_ROUTEINFO_BY_TOPIC.0);
        let answer = response(0, w.opaque, route().as_bytes());
        c.handle_frame(t(4), tx.peer, &answer, &mut |_| {}).unwrap();
        while c.poll_event().is_some() {}
    };
    let ext = [
        ("msgId", "0A000001"),
        ("queueId", "0"),
        ("queueOffset", "3"),
    ];
    let mut cmd =
        CommandRepr::response(ResponseCode(0), tx.opaque, version::V5_3_3, Some(&ext[..]));
    cmd.remark = None;
    let mut a = std::vec![0u8; 512];
    let n = cmd
        .emit_frame_prefix_and_header(SerializeType::JSON, 0, &mut a)
        .unwrap();
    a.truncate(n);
    c.handle_frame(t(5), tx.peer, &a, &mut |_| {}).unwrap();
    let key = NackKey {
        queue,
        lease,
        offset: 7,
    };
    let seen: StdVec<Event> = core::iter::from_fn(|| c.poll_event()).collect();
    assert!(
        seen.contains(&Event::Nacked {
            key,
            outcome: NackOutcome::Resent
        }),
        "{seen:?}"
    );
    // Not the application's: the resend's SendDone is the client's.
    assert!(!seen.iter().any(|e| matches!(e, Event::SendDone { .. })));
    assert_eq!(
        c.consumer().owned().next().unwrap().tracker.committable(),
        8
    );
    assert_eq!(c.resend_of(tx.body.unwrap()), None);
}

/// A half message of `group` on topic `Orders` (the stored message of [`stored`], otherwise).
fn half(group: &str) -> StdVec<u8> {
    let mut props = StdString::from("TRAN_MSG\u{1}true\u{2}PGROUP\u{1}");
    props.push_str(group);
    props.push_str("\u{2}UNIQ_KEY\u{1}U1\u{2}");
    let b = stored(0);
    let (m, _) = StoredMessage::decode(&b, crate::message::stored::CrcCheck::Skip).unwrap();
    encoded(&StoredMessage {
        queue_id: 1,
        physical_offset: 4242,
        sys_flag: SysFlag(SysFlag::TRANSACTION_PREPARED_TYPE.0),
        body: b"order-1",
        topic: "Orders",
        raw_properties: props.as_bytes(),
        ..m
    })
}

#[test]
fn a_check_back_reaches_the_application_and_its_answer_is_a_oneway_end_transaction() {
    use crate::transaction::{EndTransaction, LocalState};
    let mut c = producer();
    let ext = [
        ("tranStateTableOffset", "17"),
        ("commitLogOffset", "4242"),
        ("msgId", "U1"),
        ("transactionId", "TX1"),
        ("topic", "RMQ_SYS_TRANS_HALF_TOPIC"),
        ("bname", "broker-a"),
    ];
    // Another group's half message: dropped, nothing answered.
    let f = request(
        RequestCode::CHECK_TRANSACTION_STATE,
        3,
        true,
        &ext,
        &half("other"),
    );
    let mut n = 0;
    c.handle_frame(t(1), BROKER, &f, &mut |_| n += 1).unwrap();
    assert_eq!(n, 0);
    let mut buf = [0u8; 2048];
    assert!(c.poll_transmit(t(1), &mut buf, &Lent).is_none());
    // Ours: handed out with the header's fields and the half message.
    let f = request(
        RequestCode::CHECK_TRANSACTION_STATE,
        4,
        true,
        &ext,
        &half("pg"),
    );
    let mut seen = StdVec::new();
    c.handle_frame(t(2), BROKER, &f, &mut |i| {
        if let Inbound::Check { peer, check } = i {
            let end = EndTransaction::answer(check, LocalState::Commit, Some("why"));
            seen.push((peer, check.topic().to_string(), check.message.body.to_vec()));
            seen.push((
                peer,
                end.msg_id.to_string(),
                end.broker_name.as_bytes().to_vec(),
            ));
            assert_eq!(end.header().tran_state_table_offset, 17);
            assert_eq!(end.header().commit_log_offset, 4242);
            assert_eq!(end.header().transaction_id, Some("TX1"));
        }
    })
    .unwrap();
    assert_eq!(
        seen,
        [
            (BROKER, "Orders".to_string(), b"order-1".to_vec()),
            (BROKER, "U1".to_string(), b"broker-a".to_vec()),
        ]
    );
    assert!(
        c.poll_transmit(t(2), &mut buf, &Lent).is_none(),
        "no response to a oneway"
    );
    // The application's answer: END_TRANSACTION, oneway, with an opaque no request has.
    let check = crate::transaction::check_request(&f, "pg").unwrap();
    let end = EndTransaction::answer(&check, LocalState::Rollback, Some("checker failed"));
    assert!(
        c.end_transaction(BROKER, &end, &mut buf[..64], &Lent)
            .is_none(),
        "too small: not written"
    );
    let tx = c.end_transaction(BROKER, &end, &mut buf, &Lent).unwrap();
    assert!(tx.answer && tx.peer == BROKER && tx.opaque < 0);
    let w = written(tx, &buf);
    assert_eq!(w.code, RequestCode::END_TRANSACTION.0);
    assert_eq!(w.opaque, -2, "-1 went to the one that did not fit");
    assert_eq!(w.remark.as_deref(), Some("checker failed"));
    let f = Frame::new_checked(&buf[..w.tx.len]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    assert!(crate::admin::is_oneway(&h));
    let fields: StdVec<(StdString, StdString)> = h
        .ext_iter()
        .map(|(k, v)| {
            let mut kb = [0u8; 64];
            let mut vb = [0u8; 64];
            (
                k.unescape_into(&mut kb).unwrap().to_string(),
                v.as_str()
                    .map(ToString::to_string)
                    .unwrap_or_else(|| v.unescape_into(&mut vb).unwrap().to_string()),
            )
        })
        .collect();
    for want in [
        ("producerGroup", "pg"),
        ("tranStateTableOffset", "17"),
        ("commitLogOffset", "4242"),
        ("commitOrRollback", "12"),
        ("fromTransactionCheck", "true"),
        ("msgId", "U1"),
        ("transactionId", "TX1"),
        // The header's topic, as Java answers (5.x: the half topic).
        ("topic", "RMQ_SYS_TRANS_HALF_TOPIC"),
        ("bname", "broker-a"),
    ] {
        assert!(
            fields.iter().any(|(k, v)| (k.as_str(), v.as_str()) == want),
            "{want:?} in {fields:?}"
        );
    }
    assert!(
        c.poll_transmit(t(3), &mut buf, &Lent).is_none(),
        "nothing queued"
    );
    // The next one counts down.
    let tx = c.end_transaction(BROKER, &end, &mut buf, &Lent).unwrap();
    assert_eq!(tx.opaque, -3);
}

#[test]
fn a_consumer_drops_check_backs() {
    let mut c = consumer();
    let ext = [("tranStateTableOffset", "1"), ("commitLogOffset", "2")];
    let f = request(
        RequestCode::CHECK_TRANSACTION_STATE,
        3,
        true,
        &ext,
        &half("cg"),
    );
    let mut n = 0;
    c.handle_frame(t(1), BROKER, &f, &mut |_| n += 1).unwrap();
    assert_eq!(n, 0);
}

#[test]
fn a_pushed_reply_reaches_the_application_and_is_answered_success() {
    let mut c = producer();
    let ext = [
        ("topic", "DefaultCluster_REPLY_TOPIC"),
        (
            "properties",
            "MSG_TYPE\u{1}reply\u{2}CORRELATION_ID\u{1}c-7\u{2}",
        ),
        ("sysFlag", "0"),
        ("queueId", "0"),
        ("bornTimestamp", "5"),
    ];
    let f = request(
        RequestCode::PUSH_REPLY_MESSAGE_TO_CLIENT,
        9,
        false,
        &ext,
        b"pong",
    );
    let mut seen = StdVec::new();
    c.handle_frame(t(1), BROKER, &f, &mut |i| {
        if let Inbound::Reply(r) = i {
            let topic = r.topic.map(ToString::to_string);
            seen.push((r.correlation_id.to_string(), r.body.to_vec(), topic));
        }
    })
    .unwrap();
    assert_eq!(
        seen,
        [(
            "c-7".to_string(),
            b"pong".to_vec(),
            Some("DefaultCluster_REPLY_TOPIC".to_string())
        )]
    );
    let mut buf = [0u8; 512];
    let w = written(c.poll_transmit(t(1), &mut buf, &Lent).unwrap(), &buf);
    assert!(w.tx.answer && w.opaque == 9);
    assert_eq!((w.code, w.remark), (0, None), "SUCCESS, as Java answers");
    // A consumer client does not take replies: REQUEST_CODE_NOT_SUPPORTED.
    let mut c = consumer();
    let mut n = 0;
    c.handle_frame(t(1), BROKER, &f, &mut |_| n += 1).unwrap();
    assert_eq!(n, 0);
    let w = written(c.poll_transmit(t(1), &mut buf, &Lent).unwrap(), &buf);
    assert_eq!(w.code, ResponseCode::REQUEST_CODE_NOT_SUPPORTED.0);
}

#[test]
fn a_burst_of_pushed_replies_asks_for_a_transmit_before_the_queue_drops_answers() {
    let mut c = producer();
    let ext = [
        ("topic", "DefaultCluster_REPLY_TOPIC"),
        (
            "properties",
            "MSG_TYPE\u{1}reply\u{2}CORRELATION_ID\u{1}c\u{2}",
        ),
        ("sysFlag", "0"),
        ("queueId", "0"),
        ("bornTimestamp", "5"),
    ];
    let mut buf = [0u8; 512];
    let mut answered = StdVec::new();
    for opaque in 1..=40 {
        let f = request(
            RequestCode::PUSH_REPLY_MESSAGE_TO_CLIENT,
            opaque,
            false,
            &ext,
            b"x",
        );
        c.handle_frame(t(1), BROKER, &f, &mut |_| {}).unwrap();
        // What a runtime does between the frames of one read.
        if c.must_transmit() {
            while let Some(tx) = c.poll_transmit(t(1), &mut buf, &Lent) {
                answered.push(written(tx, &buf).opaque);
            }
        }
    }
    while let Some(tx) = c.poll_transmit(t(1), &mut buf, &Lent) {
        answered.push(written(tx, &buf).opaque);
    }
    assert_eq!(
        answered,
        (1..=40).collect::<StdVec<_>>(),
        "every push answered once"
    );
    assert_eq!(c.stats().answers_dropped, 0);
}

#[test]
fn a_refused_offset_query_is_reported_with_the_brokers_remark_and_retried_later() {
    let mut c = consumer();
    let list = out(&mut c, t(0));
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].code, RequestCode::GET_CONSUMER_LIST_BY_GROUP.0);
    let body = format!(r#"{{"consumerIdList":["{ME}"]}}"#);
    let a = response(0, list[0].opaque, body.as_bytes());
    c.handle_frame(t(1), list[0].tx.peer, &a, &mut |_| {})
        .unwrap();
    let query = out(&mut c, t(1));
    assert_eq!(query.len(), 1);
    assert_eq!(query[0].code, RequestCode::QUERY_CONSUMER_OFFSET.0);
    // What a 5.x proxy answers a request without `bname`.
    let mut cmd = CommandRepr::<HeartbeatRequestHeader>::response(
        ResponseCode::VERSION_NOT_SUPPORTED,
        query[0].opaque,
        version::V5_3_3,
        None,
    );
    cmd.remark = Some("Request doesn't have field \"bname\"");
    let mut f = std::vec![0u8; 512];
    let n = cmd
        .emit_frame_prefix_and_header(SerializeType::JSON, 0, &mut f)
        .unwrap();
    f.truncate(n);
    let mut refused = StdVec::new();
    c.handle_frame(t(2), query[0].tx.peer, &f, &mut |i| {
        if let Inbound::Refused { refusal, remark } = i {
            refused.push((refusal, remark.to_string()));
        }
    })
    .unwrap();
    assert_eq!(refused.len(), 1, "reported once");
    let (r, remark) = &refused[0];
    assert_eq!(r.request, RequestCode::QUERY_CONSUMER_OFFSET);
    assert_eq!(r.code, ResponseCode::VERSION_NOT_SUPPORTED);
    assert_eq!(
        (r.queue.queue_id, remark.as_str()),
        (0, "Request doesn't have field \"bname\"")
    );
    // The queue is dropped and asked for again at the next rebalance round (Java's 20 s).
    assert!(out(&mut c, t(3)).is_empty());
    let again = out(&mut c, t(20_001));
    let list = again
        .iter()
        .find(|w| w.code == RequestCode::GET_CONSUMER_LIST_BY_GROUP.0)
        .expect("the next round's consumer list");
    let a = response(0, list.opaque, body.as_bytes());
    c.handle_frame(t(20_002), list.tx.peer, &a, &mut |_| {})
        .unwrap();
    let query = out(&mut c, t(20_002));
    assert_eq!(query.len(), 1);
    assert_eq!(
        query[0].code,
        RequestCode::QUERY_CONSUMER_OFFSET.0,
        "asked again"
    );
}

#[test]
fn a_recall_goes_to_the_handles_broker_or_after_a_lookup_to_any_of_the_topic() {
    use crate::recall::{RecallError, RecallHandle};
    // "v1 T broker-a 1796500000001 0A0B…01", and the same of broker-b (not in the route).
    let of_a = "djEgVCBicm9rZXItYSAxNzk2NTAwMDAwMDAxIDBBMEIwQzBEMDAwMDE4QjRBQUMyMDAxNzAwMDAwMDAx";
    let of_b = "djEgVCBicm9rZXItYiAxNzk2NTAwMDAwMDAxIDBBMEIwQzBEMDAwMDE4QjRBQUMyMDAxNzAwMDAwMDAx";
    let (mut ha, mut hb) = ([0u8; 128], [0u8; 128]);
    let a = RecallHandle::for_topic("T", of_a, &mut ha).unwrap();
    let b = RecallHandle::for_topic("T", of_b, &mut hb).unwrap();
    let ms = crate::time::Duration::from_millis(3000);
    let mut c = producer();
    let mut buf = [0u8; 1024];
    // No route yet: nobody to ask, even with `or_any`.
    let r = c.recall(t(0), "T", of_a, &a, true, ms, &mut buf, &Lent);
    assert_eq!(r, Err(RecallError::NoRoute));
    c.session_mut().topic(t(0), "T").unwrap();
    let lookup = out(&mut c, t(0)).remove(0);
    let answer = response(0, lookup.opaque, route().as_bytes());
    c.handle_frame(t(1), lookup.tx.peer, &answer, &mut |_| {})
        .unwrap();
    while c.poll_event().is_some() {}
    // The handle's broker.
    let tx = c
        .recall(t(2), "T", of_a, &a, false, ms, &mut buf, &Lent)
        .unwrap();
    assert_eq!((tx.peer, tx.body_len), (BROKER, 0));
    let w = written(tx, &buf);
    assert_eq!(w.code, RequestCode::RECALL_MESSAGE.0);
    let f = Frame::new_checked(&buf[..tx.len]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    let field = |k: &str| h.get(k).and_then(|v| v.as_str()).map(ToString::to_string);
    assert_eq!(field("producerGroup").as_deref(), Some("pg"));
    assert_eq!(field("topic").as_deref(), Some("T"));
    assert_eq!(field("recallHandle").as_deref(), Some(of_a));
    assert_eq!(field("bname").as_deref(), Some("broker-a"));
    // Another broker's handle: only once the route was looked up again, to any of the topic.
    let r = c.recall(t(3), "T", of_b, &b, false, ms, &mut buf, &Lent);
    assert_eq!(r, Err(RecallError::NoRoute));
    let tx = c
        .recall(t(3), "T", of_b, &b, true, ms, &mut buf, &Lent)
        .unwrap();
    assert_eq!(tx.peer, BROKER);
    // Its answer is the runtime's.
    let answer = response(0, tx.opaque, b"");
    let mut seen = StdVec::new();
    c.handle_frame(t(4), BROKER, &answer, &mut |i| {
        if let Inbound::Answer { opaque } = i {
            seen.push(opaque);
        }
    })
    .unwrap();
    assert_eq!(seen, [tx.opaque]);
}

#[test]
fn every_runtime_call_lost_with_its_connection_is_reported() {
    let mut c = producer();
    let calls: StdVec<i32> = (0..6).map(|i| runtime_call(&mut c, t(i))).collect();
    c.handle_closed(t(10), BROKER, TransportError::ConnectionClosed);
    let mut failed = StdVec::new();
    while let Some(e) = c.poll_event() {
        if let Event::CallFailed { opaque, error } = e {
            assert_eq!(error, TransportError::ConnectionClosed);
            failed.push(opaque);
        }
    }
    failed.sort_unstable();
    let mut want = calls.clone();
    want.sort_unstable();
    assert_eq!(
        failed, want,
        "more than the client keeps at once, none lost"
    );
}

#[test]
fn an_sql92_check_whose_connection_fails_ends_the_start_at_once() {
    let mut c = sql_unstarted(false);
    c.start_consumer(t(0));
    let (mut events, mut refusals) = (StdVec::new(), StdVec::new());
    let got = answer_all_with(&mut c, t(0), &mut events, None, &mut refusals);
    assert!(
        got.iter()
            .any(|g| g.0 == RequestCode::CHECK_CLIENT_CONFIG.0)
    );
    c.handle_closed(t(5), BROKER, TransportError::ConnectFailed);
    let mut events = StdVec::new();
    while let Some(e) = c.poll_event() {
        events.push(e);
    }
    let topic = c.session().topic_id("T").unwrap();
    let failed = Event::StartFailed { topic, code: -1 };
    assert!(
        events.contains(&failed),
        "at once, not at the step's deadline: {events:?}"
    );
}

#[test]
fn pops_ask_each_broker_once_a_round_and_only_the_last_may_wait() {
    use crate::pop::{PopError, PopRequest};
    let two = r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"broker-a","cluster":"c"},{"brokerAddrs":{"0":"10.0.0.3:10911"},"brokerName":"broker-b","cluster":"c"}],"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2},{"brokerName":"broker-b","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}]}"#;
    let mut cfg = Config::new(1, "pg", ME);
    // The binary header cannot carry the POP codes: they go as JSON all the same.
    cfg.serialize_type = SerializeType::ROCKETMQ;
    let mut c: Producing = Client::from_parts(Session::build(&cfg, t(0)), NoConsumer);
    let req = PopRequest {
        group: "cg",
        topic: "T",
        expression_type: "TAG",
        expression: "a || b",
        max: 40,
        invisible_ms: 30_000,
        from_first: true,
        order: false,
    };
    let (wait, mut buf) = (crate::time::Duration::from_millis(15_000), [0u8; 2048]);
    assert_eq!(
        c.pop(t(0), &req, (0, 0), wait, &mut buf, &Lent),
        Err(PopError::NoRoute)
    );
    c.session_mut().topic(t(0), "T").unwrap();
    let lookup = out(&mut c, t(0)).remove(0);
    let answer = response(0, lookup.opaque, two.as_bytes());
    c.handle_frame(t(1), lookup.tx.peer, &answer, &mut |_| {})
        .unwrap();
    while c.poll_event().is_some() {}
    let mut asked = StdVec::new();
    for nth in 0..2 {
        let tx = c.pop(t(2), &req, (0, nth), wait, &mut buf, &Lent).unwrap();
        let f = Frame::new_checked(&buf[..tx.len]).unwrap();
        assert_eq!(f.serialize_type(), SerializeType::JSON);
        let h = CommandHeader::parse(&f).unwrap();
        assert_eq!(h.code(), RequestCode::POP_MESSAGE.0);
        let field = |k: &str| h.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
        let fields = [
            "consumerGroup",
            "topic",
            "queueId",
            "maxMsgNums",
            "invisibleTime",
        ];
        assert_eq!(fields.map(field), ["cg", "T", "-1", "32", "30000"]);
        let fields = ["bornTime", "initMode", "expType", "exp", "order"];
        assert_eq!(fields.map(field), ["0", "0", "TAG", "a || b", "false"]);
        asked.push((tx.peer, field("bname"), field("pollTime")));
    }
    let b = Peer::Broker(BrokerId(1));
    assert_eq!(
        asked,
        [
            (BROKER, "broker-a".to_string(), "0".to_string()),
            (b, "broker-b".to_string(), "15000".to_string()),
        ]
    );
    assert_eq!(
        c.pop(t(2), &req, (0, 2), wait, &mut buf, &Lent),
        Err(PopError::RoundOver)
    );
    // The next round starts at the next broker; its last is the first.
    let peers: StdVec<(Peer, StdString)> = (0..2)
        .map(|nth| {
            let tx = c.pop(t(2), &req, (1, nth), wait, &mut buf, &Lent).unwrap();
            let f = Frame::new_checked(&buf[..tx.len]).unwrap();
            let h = CommandHeader::parse(&f).unwrap();
            let poll = h.get("pollTime").and_then(|v| v.as_str()).unwrap_or("");
            (tx.peer, poll.to_string())
        })
        .collect();
    assert_eq!(peers, [(b, "0".to_string()), (BROKER, "15000".to_string())]);

    // An ack goes to the handle's broker, naming the topic the message is in.
    let ms = crate::time::Duration::from_millis(3000);
    let handle = "7 1733470000000 60000 5 1 broker-b 0 9";
    let tx = c
        .pop_ack(t(3), "cg", "T", handle, ms, &mut buf, &Lent)
        .unwrap();
    assert_eq!(tx.peer, b);
    let f = Frame::new_checked(&buf[..tx.len]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    let field = |k: &str| h.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
    assert_eq!(h.code(), RequestCode::ACK_MESSAGE.0);
    let fields = [
        "consumerGroup",
        "topic",
        "queueId",
        "extraInfo",
        "offset",
        "bname",
    ];
    assert_eq!(
        fields.map(field),
        ["cg", "%RETRY%cg_T", "0", handle, "9", "broker-b"]
    );
    assert_eq!(field("invisibleTime"), "");
    let tx = c
        .change_invisible(t(4), "cg", "T", handle, 5000, ms, &mut buf, &Lent)
        .unwrap();
    let f = Frame::new_checked(&buf[..tx.len]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    assert_eq!(h.code(), RequestCode::CHANGE_MESSAGE_INVISIBLETIME.0);
    assert_eq!(
        h.get("invisibleTime").and_then(|v| v.as_str()),
        Some("5000")
    );
    // A broker the session does not know, and a text that is no handle.
    let other = "7 1733470000000 60000 5 0 broker-z 0 9";
    let r = c.pop_ack(t(5), "cg", "T", other, ms, &mut buf, &Lent);
    assert_eq!(r, Err(PopError::NoRoute));
    let r = c.pop_ack(t(5), "cg", "T", "garbage", ms, &mut buf, &Lent);
    assert_eq!(r, Err(PopError::InvalidHandle));
}

#[test]
fn a_pop_dead_letter_is_a_send_back_at_level_minus_one_to_the_handles_broker() {
    use crate::pop::{DeadLetter, PopError};
    let mut c = producer();
    c.session_mut().topic(t(0), "T").unwrap();
    let lookup = out(&mut c, t(0)).remove(0);
    let answer = response(0, lookup.opaque, route().as_bytes());
    c.handle_frame(t(1), lookup.tx.peer, &answer, &mut |_| {})
        .unwrap();
    while c.poll_event().is_some() {}
    let (ms, mut buf) = (crate::time::Duration::from_millis(3000), [0u8; 2048]);
    let handle = "7 1733470000000 60000 5 1 broker-a 0 9";
    let m = DeadLetter {
        commit_log_offset: 4242,
        msg_id: "ID9",
        max_reconsume_times: 2,
    };
    let tx = c
        .pop_dead_letter(t(2), ("cg", "T", handle), &m, ms, &mut buf, &Lent)
        .unwrap();
    assert_eq!(tx.peer, BROKER);
    let f = Frame::new_checked(&buf[..tx.len]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    assert_eq!(h.code(), RequestCode::CONSUMER_SEND_MSG_BACK.0);
    let field = |k: &str| h.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
    let keys = [
        "offset",
        "group",
        "delayLevel",
        "originMsgId",
        "originTopic",
        "maxReconsumeTimes",
        "bname",
    ];
    assert_eq!(
        keys.map(field),
        ["4242", "cg", "-1", "ID9", "T", "2", "broker-a"]
    );
    let other = "7 1733470000000 60000 5 1 broker-z 0 9";
    let r = c.pop_dead_letter(t(3), ("cg", "T", other), &m, ms, &mut buf, &Lent);
    assert_eq!(r, Err(PopError::NoRoute));
}
