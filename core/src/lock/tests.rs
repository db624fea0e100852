use super::*;
use std::string::String;
use std::vec::Vec;

#[test]
fn lock_body_is_fastjson_shaped() {
    let qs = [
        MessageQueue::new("T", "broker-a", 0),
        MessageQueue::new("T", "broker-a", 3),
    ];
    let mut buf = [0u8; 512];
    let n = write_lock_body("cg", "10.0.0.2@x", qs.iter().copied(), &mut buf).unwrap();
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        r#"{"clientId":"10.0.0.2@x","consumerGroup":"cg","mqSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"},{"brokerName":"broker-a","queueId":3,"topic":"T"}],"onlyThisBroker":false}"#
    );
    assert!(n <= qs.iter().map(queue_len).sum::<usize>() + 80);
    assert!(write_lock_body("cg", "c", qs.iter().copied(), &mut buf[..40]).is_err());
}

#[test]
fn locked_set_is_read_in_any_key_order() {
    let body = br#"{"lockOKMQSet":[{"topic":"T","queueId":2,"brokerName":"b"},{"brokerName":"b","queueId":5,"topic":"T","x":[1]}],"other":1}"#;
    let mut got: Vec<(String, String, i32)> = Vec::new();
    parse_locked(body, |q| {
        got.push((q.topic.into(), q.broker_name.into(), q.queue_id))
    })
    .unwrap();
    assert_eq!(
        got,
        [("T".into(), "b".into(), 2), ("T".into(), "b".into(), 5)]
    );
    assert!(parse_locked(b"{\"lockOKMQSet\":[{", |_| {}).is_err());
    let mut n = 0;
    parse_locked(b"{}", |_| n += 1).unwrap();
    assert_eq!(n, 0);
}

#[test]
fn orderly_skips_a_message_only_once_it_reached_the_reconsume_limit() {
    // Java checkReconsumeTimes: `reconsumeTimes >= maxReconsumeTimes` goes to the retry topic.
    assert!(!orderly_skips(0, 3));
    assert!(!orderly_skips(2, 3));
    assert!(orderly_skips(3, 3));
    assert!(orderly_skips(4, 3));
    // The orderly default has no end.
    assert!(!orderly_skips(i32::MAX - 1, MAX_RECONSUME_TIMES_ORDERLY));
}
