use super::*;
use crate::consumer::TagExpression;
use crate::wire::{CommandHeader, Frame};

#[test]
fn a_code_not_served_is_answered_as_java_does() {
    let mut buf = [0u8; 256];
    let n = write_not_supported(999, 42, 479, &mut buf).unwrap();
    let f = Frame::new_checked(&buf[..n]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    assert_eq!((h.code(), h.opaque()), (REQUEST_CODE_NOT_SUPPORTED, 42));
    assert!(h.is_response());
    assert!(
        h.remark()
            .is_some_and(|r| r.eq_str(" request type 999 not supported"))
    );
    assert!(f.body_ref().is_empty());
    // The code as Java's `String.valueOf` writes it, for every range.
    for code in [0, 7, -1, i32::MAX, i32::MIN] {
        let n = write_not_supported(code, 1, 479, &mut buf).unwrap();
        let f = Frame::new_checked(&buf[..n]).unwrap();
        let h = CommandHeader::parse(&f).unwrap();
        let want = std::format!(" request type {code} not supported");
        assert!(h.remark().is_some_and(|r| r.eq_str(&want)), "{code}");
    }
}

#[test]
fn running_info_is_fastjson_shaped() {
    let info = ProcessQueueInfo {
        commit_offset: 7,
        cached_msg_min_offset: 7,
        cached_msg_max_offset: 9,
        cached_msg_count: 3,
        cached_msg_size_mib: 0,
        locked: true,
        last_lock_timestamp: 5,
        last_pull_timestamp: 6,
        last_consume_timestamp: 0,
        lag: Some(4),
    };
    let mut queues = [
        (MessageQueue::new("T", "b", 1), info),
        (MessageQueue::new("T", "a", 0), ProcessQueueInfo::default()),
    ];
    let status = ConsumeStatus {
        pull_rt: 150_000,
        pull_tps: 5,
        consume_rt: 250,
        consume_ok_tps: 1234,
        consume_failed_tps: 0,
        consume_failed_msgs: 0,
    };
    let mut statuses = [("T", status)];
    let mut subs = [
        Subscription {
            topic: "T",
            expression: TagExpression::new("*"),
            sub_version: 1,
        },
        Subscription {
            topic: "%RETRY%g",
            expression: TagExpression::new("*"),
            sub_version: 1,
        },
    ];
    let props = [(prop::CONSUME_TYPE, "CONSUME_PASSIVELY")];
    let mut buf = [0u8; 4096];
    let n = write_running_info(&mut queues, &props, &mut statuses, &mut subs, &mut buf).unwrap();
    let text = core::str::from_utf8(&buf[..n]).unwrap();
    let zero = r#"{"cachedMsgCount":0,"cachedMsgMaxOffset":0,"cachedMsgMinOffset":0,"cachedMsgSizeInMiB":0,"commitOffset":0,"droped":false,"lastConsumeTimestamp":0,"lastLockTimestamp":0,"lastPullTimestamp":0,"locked":false,"transactionMsgCount":0,"transactionMsgMaxOffset":0,"transactionMsgMinOffset":0,"tryUnlockTimes":0}"#;
    let one = r#"{"cachedMsgCount":3,"cachedMsgMaxOffset":9,"cachedMsgMinOffset":7,"cachedMsgSizeInMiB":0,"commitOffset":7,"droped":false,"lastConsumeTimestamp":0,"lastLockTimestamp":5,"lastPullTimestamp":6,"lag":4,"locked":true,"transactionMsgCount":0,"transactionMsgMaxOffset":0,"transactionMsgMinOffset":0,"tryUnlockTimes":0}"#;
    let want = std::format!(
        concat!(
            r#"{{"mqPopTable":{{}},"mqTable":{{{{"brokerName":"a","queueId":0,"topic":"T"}}:{zero},"#,
            r#"{{"brokerName":"b","queueId":1,"topic":"T"}}:{one}}},"#,
            r#""properties":{{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"}},"#,
            r#""statusTable":{{"T":{{"consumeFailedMsgs":0,"consumeFailedTPS":0.00,"consumeOKTPS":12.34,"consumeRT":2.50,"pullRT":1500.00,"pullTPS":0.05}}}},"#,
            r#""subscriptionSet":[{{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1,"tagsSet":[],"topic":"%RETRY%g"}},"#,
            r#"{{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1,"tagsSet":[],"topic":"T"}}],"#,
            r#""userConsumerInfo":{{}}}}"#
        ),
        zero = zero,
        one = one
    );
    assert_eq!(text, want);
    assert!(
        write_running_info(
            &mut queues,
            &props,
            &mut statuses,
            &mut subs,
            &mut buf[..64]
        )
        .is_err()
    );
}

#[test]
fn reset_offsets_are_read_from_object_keys() {
    let body = br#"{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:42, {"topic":"T","queueId":0,"brokerName":"b"} : 7}}"#;
    let mut got = std::vec::Vec::new();
    assert!(parse_reset_offsets(body, |q, o| got.push((q.queue_id, o))));
    assert_eq!(got, [(1, 42), (0, 7)]);
    let mut n = 0;
    assert!(parse_reset_offsets(br#"{"offsetTable":{}}"#, |_, _| n += 1));
    assert_eq!(n, 0);
    assert!(!parse_reset_offsets(
        br#"{"offsetTable":{{"topic":"T"}:1}}"#,
        |_, _| n += 1
    ));
    assert!(!parse_reset_offsets(b"{}", |_, _| n += 1));
    assert!(!parse_reset_offsets(
        br#"{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:x}}"#,
        |_, _| n += 1
    ));
    assert_eq!(n, 0);
}

#[test]
fn direct_result_is_fastjson_shaped() {
    let mut buf = [0u8; 1024];
    let n =
        write_direct_result(9, 479, false, CmResult::Later, Some("x\"y"), 12, &mut buf).unwrap();
    let f = Frame::new_checked(&buf[..n]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    assert_eq!((h.code(), h.opaque()), (0, 9));
    assert_eq!(
        core::str::from_utf8(f.body_ref()).unwrap(),
        r#"{"autoCommit":true,"consumeResult":"CR_LATER","order":false,"remark":"x\"y","spentTimeMills":12}"#
    );
}
