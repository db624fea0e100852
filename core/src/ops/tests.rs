use super::*;
use crate::json::JsonErrorKind;

// Constructed in the shapes fastjson writes (bean fields sorted, bare Long keys, objects as
// `MessageQueue` keys); the real brokers' answers are read in cli/tests/admin_real.rs.
const CLUSTER: &[u8] = br#"{"brokerAddrTable":{"broker-b":{"brokerAddrs":{0:"127.0.0.1:20911",1:"127.0.0.1:20921"},"brokerName":"broker-b","cluster":"C2","enableActingMaster":false},"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"C1"}},"clusterAddrTable":{"C1":["broker-a"],"C2":["broker-b"]}}"#;

#[test]
fn cluster_info_lists_every_address_with_its_cluster() {
    let mut got = std::vec::Vec::new();
    read_cluster_info(CLUSTER, &mut |b| {
        got.push((
            b.cluster.to_owned(),
            b.broker.to_owned(),
            b.id,
            b.addr.to_owned(),
        ))
    })
    .unwrap();
    let row = |c: &str, b: &str, id, a: &str| (c.to_owned(), b.to_owned(), id, a.to_owned());
    assert_eq!(
        got,
        [
            row("C2", "broker-b", 0, "127.0.0.1:20911"),
            row("C2", "broker-b", 1, "127.0.0.1:20921"),
            row("C1", "broker-a", 0, "127.0.0.1:10911"),
        ]
    );
}

#[test]
fn cluster_info_without_a_cluster_is_an_error() {
    let body = br#"{"brokerAddrTable":{"b":{"brokerAddrs":{0:"x:1"}}}}"#;
    assert_eq!(
        read_cluster_info(body, &mut |_| {}),
        Err(BodyError::Missing("cluster"))
    );
}

#[test]
fn topic_list_reads_every_topic() {
    let mut got = std::vec::Vec::new();
    let body = br#"{"brokerAddr":null,"topicList":["TBW102","orders","%RETRY%g"]}"#;
    read_topic_list(body, &mut |t| got.push(t.to_owned())).unwrap();
    assert_eq!(got, ["TBW102", "orders", "%RETRY%g"]);
}

const STATS: &[u8] = br#"{"consumeTps":1.5,"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"brokerOffset":10,"consumerOffset":4,"lastTimestamp":1700000000000,"pullOffset":6},{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"brokerOffset":3,"consumerOffset":3,"lastTimestamp":0}}}"#;

#[test]
fn consume_stats_reads_object_keys_and_offsets() {
    let mut got = std::vec::Vec::new();
    let tps = read_consume_stats(STATS, &mut |q| {
        got.push((
            q.queue.topic.to_owned(),
            q.queue.queue_id,
            q.broker_offset,
            q.consumer_offset,
            q.lag(),
        ))
    })
    .unwrap();
    assert_eq!(tps, 1.5);
    assert_eq!(
        got,
        [("T".to_owned(), 1, 10, 4, 6), ("T".to_owned(), 0, 3, 3, 0)]
    );
}

#[test]
fn reset_offsets_reads_each_queue() {
    let body = br#"{"offsetTable":{{"brokerName":"b","queueId":2,"topic":"T"}:7}}"#;
    let mut got = std::vec::Vec::new();
    read_reset_offsets(body, &mut |q, o| {
        got.push((q.broker.to_owned(), q.queue_id, o))
    })
    .unwrap();
    assert_eq!(got, [("b".to_owned(), 2, 7)]);
}

#[test]
fn kv_table_skips_only_escaped_entries() {
    let body = br#"{"table":{"brokerVersionDesc":"V5_3_3","putTps":"1.5 2.0 0.3","path":"a\\b"}}"#;
    let mut got = std::vec::Vec::new();
    read_kv_table(body, &mut |k, v| got.push((k.to_owned(), v.to_owned()))).unwrap();
    let kv = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(
        got,
        [
            kv("brokerVersionDesc", "V5_3_3"),
            kv("putTps", "1.5 2.0 0.3")
        ]
    );
    assert!(read_kv_table(br#"{"table":{"a":1}}"#, &mut |_, _| {}).is_err());
}

#[test]
fn an_object_key_inside_an_object_key_is_refused_not_recursed() {
    let body = br#"{"offsetTable":{{{"a":1}:2}:7}}"#;
    match read_reset_offsets(body, &mut |_, _| {}) {
        Err(BodyError::Json(e)) => assert_eq!(e.kind, JsonErrorKind::UnexpectedByte),
        other => panic!("{other:?}"),
    }
    // Deep nesting of such keys stays an error (no stack growth per level).
    let mut deep = std::vec::Vec::new();
    deep.extend_from_slice(br#"{"offsetTable":{"#);
    deep.extend(core::iter::repeat_n(b'{', 10_000));
    assert!(read_reset_offsets(&deep, &mut |_, _| {}).is_err());
}

#[test]
fn truncated_and_hostile_bodies_are_errors() {
    for cut in 0..STATS.len() {
        assert!(
            read_consume_stats(&STATS[..cut], &mut |_| {}).is_err(),
            "{cut}"
        );
    }
    for cut in 0..CLUSTER.len() {
        assert!(
            read_cluster_info(&CLUSTER[..cut], &mut |_| {}).is_err(),
            "{cut}"
        );
    }
    let escaped = br#"{"topicList":["a\u0041"]}"#;
    assert_eq!(read_topic_list(escaped, &mut |_| {}), Err(BodyError::Name));
}

#[test]
fn a_request_mode_body_is_the_json_mqadmin_sends() {
    let mut buf = [0u8; 128];
    let n = write_request_mode("T\"1", "g", true, -1, &mut buf).unwrap();
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        r#"{"consumerGroup":"g","mode":"POP","popShareQueueNum":-1,"topic":"T\"1"}"#
    );
    let n = write_request_mode("T", "g", false, 2, &mut buf).unwrap();
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        r#"{"consumerGroup":"g","mode":"PULL","popShareQueueNum":2,"topic":"T"}"#
    );
    assert!(write_request_mode("T", "g", true, -1, &mut buf[..20]).is_err());
}
