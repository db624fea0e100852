//! Reading POP answers and handles as docs/protocol/POP.md §3-§6 describe them.

use std::string::String as StdString;
use std::vec::Vec as StdVec;

use super::*;
use crate::message::stored::MessageVersion;
use crate::message::{StoredMessage, SysFlag};
use crate::wire::{CommandRepr, SerializeType, version};

fn stored(topic: &str, queue_id: i32, offset: i64, props: &[u8]) -> StdVec<u8> {
    let host = core::net::SocketAddr::from(([10, 0, 0, 1], 10911));
    let m = StoredMessage {
        version: MessageVersion::V1,
        body_crc: crate::message::stored::body_crc(b"b"),
        queue_id,
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
        body: b"b",
        topic,
        raw_properties: props,
    };
    let mut buf = std::vec![0u8; m.encoded_len().unwrap()];
    m.encode(&mut buf).unwrap();
    buf
}

fn answer(code: i32, ext: &[(&str, &str)], body: &[u8]) -> StdVec<u8> {
    let cmd = CommandRepr::response(ResponseCode(code), 7, version::V5_3_3, Some(ext));
    let mut buf = std::vec![0u8; 1024];
    let n = cmd
        .emit_frame_prefix_and_header(SerializeType::JSON, body.len(), &mut buf)
        .unwrap();
    buf.truncate(n);
    buf.extend_from_slice(body);
    buf
}

const HEADER: &[(&str, &str)] = &[
    ("popTime", "1733480000123"),
    ("invisibleTime", "60000"),
    ("reviveQid", "3"),
    ("restNum", "4"),
    ("startOffsetInfo", "0 3 100;0 1 40"),
    ("msgOffsetInfo", "0 3 100,101;0 1 41"),
];

fn handles(frame: &[u8]) -> StdVec<StdString> {
    let a = PopAnswer::read(frame).unwrap();
    a.messages()
        .map(|m| {
            let mut h = StdString::new();
            a.write_handle(&m.unwrap(), "broker-a", &mut h).unwrap();
            h
        })
        .collect()
}

#[test]
fn a_found_answers_handles_start_at_its_queues_checkpoint() {
    let mut body = stored("T", 3, 100, b"");
    body.extend(stored("T", 3, 101, b""));
    body.extend(stored("T", 1, 41, b""));
    let f = answer(0, HEADER, &body);
    let a = PopAnswer::read(&f).unwrap();
    assert_eq!(a.status(), PopStatus::Found);
    assert_eq!(
        (a.pop_time, a.invisible_time, a.revive_qid, a.rest),
        (1733480000123, 60000, 3, 4)
    );
    assert_eq!(
        handles(&f),
        [
            "100 1733480000123 60000 3 0 broker-a 3 100",
            "100 1733480000123 60000 3 0 broker-a 3 101",
            // Queue 1's checkpoint began at 40 (offset 40 was popped by another request).
            "40 1733480000123 60000 3 0 broker-a 1 41",
        ]
    );
}

#[test]
fn a_revived_message_keeps_the_handle_the_broker_wrote() {
    let ck = "7 1733470000000 60000 5 1 broker-a 0 7";
    let props = std::format!("POP_CK\u{1}{ck}\u{2}TAGS\u{1}A\u{2}");
    let mut body = stored("T", 0, 7, props.as_bytes());
    body.extend(stored("T", 3, 100, b""));
    let f = answer(0, HEADER, &body);
    assert_eq!(
        handles(&f),
        [ck, "100 1733480000123 60000 3 0 broker-a 3 100"]
    );
}

#[test]
fn without_start_offsets_the_checkpoint_is_the_first_message_of_its_queue() {
    let mut body = stored("T", 2, 50, b"");
    body.extend(stored("T", 2, 52, b""));
    body.extend(stored("%RETRY%g_T", 0, 9, b""));
    let f = answer(0, &HEADER[..4], &body);
    assert_eq!(
        handles(&f),
        [
            "50 1733480000123 60000 3 0 broker-a 2 50",
            "50 1733480000123 60000 3 0 broker-a 2 52",
            "9 1733480000123 60000 3 1 broker-a 0 9",
        ]
    );
}

#[test]
fn nothing_to_pop_is_not_a_refusal_and_has_no_messages() {
    let f = answer(209, &[], b"");
    assert_eq!(PopAnswer::read(&f).unwrap().status(), PopStatus::Full);
    for code in [210, 19] {
        let f = answer(code, &[], &stored("T", 0, 1, b""));
        let a = PopAnswer::read(&f).unwrap();
        assert_eq!(a.status(), PopStatus::Nothing, "{code}");
        assert_eq!(a.messages().count(), 0);
    }
    for code in [1, 3, 17] {
        let f = answer(code, &[], b"");
        assert_eq!(
            PopAnswer::read(&f).unwrap().status(),
            PopStatus::Refused(code)
        );
    }
    assert!(PopAnswer::read(b"\0\0\0\x01").is_none());
}

#[test]
fn a_handle_reads_back_and_a_changed_one_starts_at_the_message() {
    let text = "100 1733480000123 60000 3 2 broker-b 4 102";
    let h = PopHandle::parse(text).unwrap();
    let mut again = StdString::new();
    h.write(&mut again).unwrap();
    assert_eq!(again, text);
    let mut real = StdString::new();
    h.real_topic("T", "g", &mut real).unwrap();
    assert_eq!(real, "%RETRY%g+T");
    let f = answer(
        0,
        &[
            ("popTime", "1733480009999"),
            ("invisibleTime", "5000"),
            ("reviveQid", "3"),
        ],
        b"",
    );
    let changed = PopAnswer::read(&f).unwrap().changed();
    let mut next = StdString::new();
    h.write_changed(&changed, &mut next).unwrap();
    assert_eq!(next, "102 1733480009999 5000 3 2 broker-b 4 102");
    for bad in ["", "1 2 3 4 0 b 1", "x 2 3 4 0 b 1 2", "1 2 3 4 0 b 1 y"] {
        assert_eq!(PopHandle::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn an_orderly_pops_counts_are_the_messages_own_or_else_their_queues() {
    let ext = [
        ("popTime", "1733480000123"),
        ("invisibleTime", "60000"),
        ("reviveQid", "999"),
        ("startOffsetInfo", "0 1 5;0 2 8"),
        ("orderCountInfo", "0 qo1%5 2;0 qo1%6 0;0 1 1;0 2 3;1 0 7"),
    ];
    let mut body = stored("T", 1, 5, b"");
    body.extend(stored("T", 1, 6, b""));
    body.extend(stored("T", 1, 7, b""));
    body.extend(stored("T", 2, 8, b""));
    body.extend(stored("T", 3, 9, b""));
    let f = answer(0, &ext, &body);
    let a = PopAnswer::read(&f).unwrap();
    let counts: StdVec<Option<i32>> = a
        .messages()
        .map(|m| a.reconsume_times(&m.unwrap()))
        .collect();
    // Offset 6 has its own 0; offset 7 has none (its queue's 1); queue 3 none at all.
    assert_eq!(counts, [Some(2), Some(0), Some(1), Some(3), None]);
    assert_eq!(handles(&f)[0], "5 1733480000123 60000 999 0 broker-a 1 5");
}

/// Every pop a receive makes, given what the brokers of each subscription (by index) hear in
/// turn (a round over a subscription ends when its list runs out).
fn pops(subs: &[&[Heard]], first: usize) -> (StdVec<Ask>, Receive) {
    let mut r = Receive::new(subs.len(), first, Duration::from_secs(15));
    let mut asked = StdVec::new();
    while let Some(a) = r.next() {
        asked.push(a);
        let heard = subs[a.subscription].get(a.brokers.1).copied();
        r.heard(heard.unwrap_or(Heard::RoundOver));
        assert!(asked.len() < 100, "the receive never ends");
    }
    (asked, r)
}

#[test]
fn a_receive_asks_each_broker_of_each_subscription_once_and_only_the_very_last_waits() {
    let (asked, r) = pops(&[&[Heard::Nothing, Heard::Nothing], &[Heard::Nothing]], 5);
    let seen: StdVec<_> = asked
        .iter()
        .map(|a| (a.subscription, a.brokers, a.wait.millis()))
        .collect();
    // Starts with subscription 5 % 2 = 1; each round starts at broker `first` (5).
    assert_eq!(
        seen,
        [
            (1, (5, 0), 0),
            (1, (5, 1), 0),
            (0, (5, 0), 15_000),
            (0, (5, 1), 15_000),
            (0, (5, 2), 15_000)
        ]
    );
    assert!(r.answered());
    assert_eq!(r.pause(), None);
}

#[test]
fn a_failed_broker_is_passed_over_and_the_receive_pauses_after_it() {
    let (asked, r) = pops(&[&[Heard::Failed, Heard::Nothing]], 0);
    assert_eq!(asked.len(), 3);
    assert!(r.answered());
    assert_eq!(r.pause(), Some(FAILED_DELAY));
    // Every broker failed: nobody answered, the caller reports the failure.
    let (_, r) = pops(&[&[Heard::Failed, Heard::Failed]], 0);
    assert!(!r.answered());
    // No route for one subscription: the other is still asked.
    let (asked, r) = pops(&[&[Heard::NoRoute], &[Heard::Full]], 0);
    assert_eq!(asked.iter().filter(|a| a.subscription == 1).count(), 2);
    assert!(r.answered());
    assert_eq!(r.pause(), Some(FULL_DELAY));
}

#[test]
fn failures_the_client_never_saw_still_end_the_round() {
    // Every ask fails before the client could say the round is over (a stopped runtime).
    let mut r = Receive::new(1, 0, Duration::ZERO);
    let mut asks = 0;
    while r.next().is_some() {
        r.heard(Heard::Failed);
        asks += 1;
        assert!(asks <= 1000, "the receive never ends");
    }
    assert!(!r.answered());
}

#[test]
fn a_receive_without_subscriptions_asks_nothing() {
    let (asked, r) = pops(&[], 3);
    assert!(asked.is_empty());
    assert!(!r.answered());
}
