//! Each record against the text Java's `TraceDataEncoder` writes (docs/protocol/TRACE.md §2),
//! spelled out field by field.

use super::*;

fn text(r: Record<'_>) -> std::string::String {
    let mut buf = [0u8; 512];
    let n = r.write(&mut buf).unwrap();
    core::str::from_utf8(&buf[..n]).unwrap().into()
}

/// `fields` joined by \u{1}, ended by \u{2}.
fn record(fields: &[&str]) -> std::string::String {
    std::format!("{}\u{2}", fields.join("\u{1}"))
}

fn send() -> Pub<'static> {
    Pub {
        sent: Sent {
            timestamp: 1_700_000_000_000,
            region: "DefaultRegion",
            group: "pg",
            topic: "Orders",
            msg_id: "MID1",
            tags: None,
            keys: Some("a b"),
            store_host: "10.0.0.1:10911",
        },
        body_len: 4097,
        cost_ms: 12,
        msg_type: MsgType::Delay,
        offset_msg_id: "OFF1",
        success: false,
    }
}

#[test]
fn a_send_is_fourteen_fields_with_nulls_for_what_the_message_lacks() {
    let want = record(&[
        "Pub",
        "1700000000000",
        "DefaultRegion",
        "pg",
        "Orders",
        "MID1",
        "null",
        "a b",
        "10.0.0.1:10911",
        "4097",
        "12",
        "3",
        "OFF1",
        "false",
    ]);
    assert_eq!(text(Record::Pub(send())), want);
}

#[test]
fn a_consumed_message_is_a_sub_before_and_a_sub_after() {
    let before = SubBefore {
        timestamp: 1_700_000_000_100,
        region: "r1",
        group: "cg",
        request_id: "REQ",
        msg_id: "MID1",
        retry_times: 2,
        keys: None,
    };
    let want = [
        "SubBefore",
        "1700000000100",
        "r1",
        "cg",
        "REQ",
        "MID1",
        "2",
        "null",
    ];
    assert_eq!(text(Record::SubBefore(before)), record(&want));
    let mut after = SubAfter {
        request_id: "REQ",
        msg_id: "MID1",
        cost_ms: 7,
        success: true,
        keys: Some("k"),
        code: ConsumeReturn::Success,
        local: Some((1_700_000_000_107, "cg")),
    };
    let want = [
        "SubAfter",
        "REQ",
        "MID1",
        "7",
        "true",
        "k",
        "0",
        "1700000000107",
        "cg",
    ];
    assert_eq!(text(Record::SubAfter(after)), record(&want));
    // Java's CLOUD channel leaves the time and group out.
    after.local = None;
    after.success = false;
    after.code = ConsumeReturn::Failed;
    let want = ["SubAfter", "REQ", "MID1", "7", "false", "k", "4"];
    assert_eq!(text(Record::SubAfter(after)), record(&want));
}

#[test]
fn a_transactions_end_and_a_recall() {
    let end = EndTransaction {
        sent: Sent {
            timestamp: 5,
            region: "DefaultRegion",
            group: "pg",
            topic: "T",
            msg_id: "MID",
            tags: Some("x"),
            keys: None,
            store_host: "h:1",
        },
        transaction_id: None,
        state: TransactionState::Unknown,
        from_check: true,
    };
    let want = [
        "EndTransaction",
        "5",
        "DefaultRegion",
        "pg",
        "T",
        "MID",
        "x",
        "null",
        "h:1",
        "2",
        "null",
        "UNKNOW",
        "true",
    ];
    assert_eq!(text(Record::EndTransaction(end)), record(&want));
    let recall = Recall {
        timestamp: 6,
        region: "r",
        group: "pg",
        topic: "T",
        msg_id: "MID",
        success: true,
    };
    let want = ["Recall", "6", "r", "pg", "T", "MID", "true"];
    assert_eq!(text(Record::Recall(recall)), record(&want));
}

#[test]
fn keys_are_every_message_id_and_user_key_once() {
    let mut second = send();
    second.sent.msg_id = "MID2";
    second.sent.keys = None;
    let before = SubBefore {
        timestamp: 0,
        region: "",
        group: "cg",
        request_id: "R",
        msg_id: "MID1",
        retry_times: 0,
        keys: Some("b c"),
    };
    let records = [
        Record::Pub(send()),
        Record::SubBefore(before),
        Record::Pub(second),
    ];
    let mut buf = [0u8; 64];
    let n = write_keys(records.iter(), &mut buf).unwrap();
    assert_eq!(&buf[..n], b"MID1 a b c MID2");
}

#[test]
fn a_buffer_too_small_is_an_error_not_a_cut_record() {
    let mut buf = [0u8; 20];
    assert_eq!(Record::Pub(send()).write(&mut buf), Err(BufferTooSmall));
    let records = [Record::Pub(send())];
    assert_eq!(
        write_keys(records.iter(), &mut buf[..3]),
        Err(BufferTooSmall)
    );
}

#[test]
fn a_gathered_message_leaves_at_ten_records_at_the_size_limit_or_after_five_seconds() {
    let t0 = Instant::from_millis(50);
    let mut g = Gather::default();
    assert_eq!(g.due(), None);
    for i in 1..=BATCH_RECORDS {
        assert_eq!(
            g.add(t0 + Duration::from_millis(i as u64), 100),
            i == BATCH_RECORDS
        );
    }
    // The deadline is the first record's.
    assert_eq!(
        g.due(),
        Some(t0 + Duration::from_millis(1) + FLUSH_INTERVAL)
    );
    g.clear();
    assert_eq!(g.records(), 0);
    // A body reaching MAX_BODY leaves at once, whatever the count.
    assert!(!g.add(t0, MAX_BODY - 1));
    assert!(g.add(t0, 1));
}

#[test]
fn a_records_keys_are_its_id_and_its_user_keys_without_empty_ones() {
    let k: std::vec::Vec<_> = keys_of("ID1", Some("a  b")).collect();
    assert_eq!(k, ["ID1", "a", "b"]);
    assert_eq!(keys_of("ID1", None).count(), 1);
}

#[test]
fn failed_trace_sends_pause_the_trace_doubling_up_to_a_minute_until_one_succeeds() {
    let t0 = Instant::from_millis(1_000);
    let mut b = Backoff::default();
    let mut now = t0;
    let mut pauses = std::vec::Vec::new();
    for _ in 0..9 {
        assert!(b.allows(now));
        let pause = b.failed(now, now).expect("a pause starts");
        assert_eq!(b.until(), Some(now + pause));
        // A failure of a send already on its way neither lengthens nor restarts the pause,
        // even when it comes after the pause.
        let late = now + pause + Duration::from_millis(5);
        assert_eq!(b.failed(now, now + Duration::from_millis(1)), None);
        assert_eq!(b.failed(now, late), None);
        let mut end = now;
        while !b.allows(end) {
            end += Duration::from_millis(1);
        }
        pauses.push(end.saturating_duration_since(now).millis());
        now = end;
    }
    assert_eq!(
        pauses,
        [
            1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000
        ]
    );
    // A success of a send that left before the pause started ends nothing.
    let until = b.until().unwrap();
    let started = until - Duration::from_millis(60_000);
    b.succeeded(started - Duration::from_millis(1));
    assert_eq!(b.until(), Some(until), "still paused");
    b.succeeded(started);
    assert!(b.allows(now));
    assert_eq!(b.until(), None);
    assert_eq!(b.failed(now, now), Some(FIRST_PAUSE));
    assert!(!b.allows(now + FIRST_PAUSE - Duration::from_millis(1)));
    assert!(b.allows(now + FIRST_PAUSE));
}
