//! The client on virtual time against scripted brokers: every broker request dispatched in
//! the core, answers written by `poll_transmit`, call failures reaching the consumer at once.

use std::string::{String as StdString, ToString};
use std::vec::Vec as StdVec;

use super::*;
use crate::message::stored::MessageVersion;
use crate::message::{StoredMessage, SysFlag};
use crate::pull_consumer::{PullConfig, PullConsumer};
use crate::session::Config;
use crate::wire::headers::HeartbeatRequestHeader;
use crate::wire::{CommandRepr, ResponseCode, SerializeType, flag, version};

type Pc = PullConsumer<2, 4, 8, 16, 8, 16>;
type Consuming = Client<4, 4, 16, 16, 4, 2048, Full, Fixed, Pc>;
type Producing = Client<4, 4, 16, 16, 4, 2048>;

const ME: &str = "10.0.0.2@gw";
const BROKER: Peer = Peer::Broker(BrokerId(0));

struct Lend;
impl Outbound for Lend {
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
    let tx = c.poll_transmit(t(0), &mut buf, &Lend).unwrap();
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
    while let Some(tx) = c.poll_transmit(now, &mut buf, &Lend) {
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

fn stored(offset: i64) -> StdVec<u8> {
    let host = core::net::SocketAddr::from(([10, 0, 0, 1], 10911));
    let m = StoredMessage {
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
    };
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
        Inbound::Message(_) => panic!("not a pull answer"),
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
