use super::*;
use crate::wire::{CommandRepr, Frame, ResponseCode, SerializeType, version};
use core::net::Ipv4Addr;

#[test]
fn batch_members_take_whole_entries_only() {
    let a = "7F".repeat(16);
    let cut = format!("{a},{}", "7E".repeat(11));
    let m: std::vec::Vec<_> = batch_members(&cut, 40).take(3).collect();
    assert_eq!(
        m,
        [(40, a.as_str()), (41, ""), (42, "")],
        "the cut entry is not handed out"
    );
    let m: std::vec::Vec<_> = batch_members("", -1).take(2).collect();
    assert_eq!(
        m,
        [(-1, ""), (0, "")],
        "no list: offsets only, as the broker gave them"
    );
}

#[test]
fn error_refresh_is_rate_limited() {
    use crate::time::Instant;
    assert!(error_refresh_due(None, Instant::from_millis(5)));
    let last = Some(Instant::from_millis(10_000));
    let gap = ERROR_REFRESH_MIN_GAP.millis();
    assert!(!error_refresh_due(
        last,
        Instant::from_millis(10_000 + gap - 1)
    ));
    assert!(error_refresh_due(last, Instant::from_millis(10_000 + gap)));
    // A clock that did not move (or an out-of-order call) never panics.
    assert!(!error_refresh_due(last, Instant::from_millis(0)));
}

#[test]
fn compression_threshold_is_inclusive_and_skips_batches() {
    use crate::message::CompressionType::{Lz4, Zlib, Zstd};
    use crate::wire::version;
    assert_eq!(compression_flags(4095, 4096, false, Zlib), None);
    assert_eq!(compression_flags(4096, 4096, false, Zlib), Some(0x301));
    assert_eq!(compression_flags(4096, 4096, false, Lz4), Some(0x101));
    assert_eq!(compression_flags(4096, 4096, false, Zstd), Some(0x201));
    assert_eq!(compression_flags(1 << 20, 4096, true, Zstd), None);
    assert!(compression_supported(Zlib, version::V4_5_2));
    assert!(!compression_supported(Lz4, version::V4_9_0));
    assert!(compression_supported(Zstd, version::V4_9_4));
    assert!(compression_supported(Lz4, version::V5_3_3));
}

#[test]
fn send_request_header_round_trips() {
    let props = "WAIT\u{1}true\u{2}UNIQ_KEY\u{1}AB\u{2}";
    let req = SendRequest::new("pg", "T", 3, "broker-b", props, 123)
        .flag(7)
        .sys_flag(0x301)
        .batch(false);
    let cmd = CommandRepr::request(req.code(), 9, version::V5_3_3, Some(req.header()));
    let mut buf = [0xa5u8; 600];
    for ty in [SerializeType::JSON, SerializeType::ROCKETMQ] {
        let n = cmd.emit_frame_prefix_and_header(ty, 0, &mut buf).unwrap();
        let f = Frame::new_checked(&buf[..n]).unwrap();
        let h = CommandHeader::parse(&f).unwrap();
        assert_eq!(h.code(), 310);
        let mut sbuf = [0u8; 256];
        let mut s = Scratch::new(&mut sbuf);
        let back = SendMessageRequestHeaderV2::decode(&h, &mut s).unwrap().0;
        assert_eq!(back.producer_group, "pg");
        assert_eq!(back.topic, "T");
        assert_eq!(back.default_topic, "TBW102");
        assert_eq!(back.default_topic_queue_nums, 4);
        assert_eq!(back.queue_id, 3);
        assert_eq!(back.sys_flag, 0x301);
        assert_eq!(back.flag, 7);
        assert_eq!(back.born_timestamp, 123);
        assert_eq!(back.properties, Some(props));
        assert_eq!(back.broker_name, Some("broker-b"));
        assert_eq!(back.batch, Some(false));
    }
    let b = SendRequest::new("pg", "T", 0, "b", "", 1).batch(true);
    assert_eq!(b.code(), RequestCode::SEND_BATCH_MESSAGE);
    assert_eq!(b.header().0.properties, None);
    assert_eq!(b.header().0.batch, Some(true));
}

fn response(code: i32, ext: &[(&str, &str)], buf: &mut [u8]) -> usize {
    let cmd = CommandRepr::response(ResponseCode(code), 5, version::V5_3_3, Some(ext));
    cmd.emit_frame_prefix_and_header(SerializeType::JSON, 0, buf)
        .unwrap()
}

#[test]
fn send_response_maps_codes() {
    let mut buf = [0u8; 400];
    let ext = [("msgId", "7F00"), ("queueId", "2"), ("queueOffset", "41")];
    let n = response(10, &ext, &mut buf);
    let f = Frame::new_checked(&buf[..n]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    let r = parse_send_response(&h, &mut Scratch::empty()).unwrap();
    assert_eq!(
        r,
        SendResponse::Stored {
            status: SendStatus::FlushDiskTimeout,
            code: 10,
            offset_msg_id: "7F00",
            queue_id: 2,
            queue_offset: 41
        }
    );
    let n = response(17, &[], &mut buf);
    let f = Frame::new_checked(&buf[..n]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    let r = parse_send_response(&h, &mut Scratch::empty()).unwrap();
    assert_eq!(r, SendResponse::Rejected { code: 17 });
    assert_eq!(r.code(), 17);
    // SUCCESS without the required fields is malformed.
    let n = response(0, &[("queueId", "1")], &mut buf);
    let f = Frame::new_checked(&buf[..n]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    assert_eq!(
        parse_send_response(&h, &mut Scratch::empty()),
        Err(FieldError::Missing("msgId"))
    );
}

#[test]
fn heartbeat_body_matches_wire_md_example() {
    let mut buf = [0u8; 300];
    let n = write_heartbeat(
        "192.168.1.10@12345#83272164793012",
        &["pg-demo"],
        HeartbeatFlavor::V5,
        &mut buf,
    )
    .unwrap();
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        r#"{"clientID":"192.168.1.10@12345#83272164793012","consumerDataSet":[],"heartbeatFingerprint":0,"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"},{"groupName":"pg-demo"}],"withoutSub":false}"#
    );
    let n = write_heartbeat("c", &[], HeartbeatFlavor::V4, &mut buf).unwrap();
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        r#"{"clientID":"c","consumerDataSet":[],"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}"#
    );
    assert!(write_heartbeat("c", &[], HeartbeatFlavor::V4, &mut buf[..20]).is_err());
}

#[test]
fn client_id() {
    let mut buf = [0u8; 64];
    let n = write_client_id(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5)), "42#7", &mut buf).unwrap();
    assert_eq!(&buf[..n], b"10.0.0.5@42#7");
    assert!(write_client_id(IpAddr::V4(Ipv4Addr::LOCALHOST), "x", &mut buf[..4]).is_err());
}

#[test]
fn namesrv_cursor_sticks_then_rotates() {
    let mut c = NamesrvCursor::new(u32::MAX);
    assert_eq!(c.current(3), (u32::MAX % 3) as usize);
    let first = c.current(3);
    assert_eq!(c.current(3), first, "sticky while it works");
    c.failed();
    assert_eq!(c.current(3), 0, "wraps to the next one");
    c.failed();
    assert_eq!(c.current(3), 1);
    assert_eq!(c.current(0), 0);
}

#[test]
fn backoff_doubles_and_caps() {
    let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(1000));
    assert_eq!(b.delay(), Duration::ZERO);
    b.failed();
    assert_eq!(b.delay(), Duration::from_millis(100));
    b.failed();
    assert_eq!(b.delay(), Duration::from_millis(200));
    for _ in 0..100 {
        b.failed();
    }
    assert_eq!(b.delay(), Duration::from_millis(1000));
    b.reset();
    assert_eq!(b.delay(), Duration::ZERO);
}

#[test]
fn batch_records_carry_the_properties_of_single_sends() {
    use crate::message::decode_batch;
    use crate::message::validate::ValidationError;
    let m = MessageFields::new(Some("t"), Some("k"));
    let mut buf = [0u8; 128];
    let a = encode_batch_record("T", b"one", 100, &m, Some("A1"), 7, &mut buf).unwrap();
    let b = encode_batch_record("T", b"two!", 100, &m, Some("A2"), 0, &mut buf[a..]).unwrap();
    let recs: Vec<_> = decode_batch(&buf[..a + b]).map(|r| r.unwrap()).collect();
    assert_eq!(recs.len(), 2);
    assert_eq!((recs[0].flag, recs[0].body), (7, &b"one"[..]));
    assert_eq!(recs[1].body, b"two!");
    let mut props = [0u8; 64];
    let n = encode_message_properties("T", b"two!", 100, &m, Some("A2"), &mut props).unwrap();
    assert_eq!(
        recs[1].properties().unwrap().as_str(),
        core::str::from_utf8(&props[..n]).unwrap()
    );
    // The same checks as a single send; a record that does not fit is refused.
    assert_eq!(
        encode_batch_record("T", b"", 100, &m, None, 0, &mut buf),
        Err(MessageError::Invalid(ValidationError::BodyEmpty))
    );
    assert_eq!(
        encode_batch_record("T", b"one", 100, &m, Some("A1"), 7, &mut buf[..a - 1]),
        Err(MessageError::BufferTooSmall)
    );
}

#[test]
fn message_properties_are_validated_and_ordered() {
    use crate::message::validate::ValidationError;
    let user = [("region", "eu")];
    let m = MessageFields {
        tags: Some("TagA"),
        keys: Some("k1 k2"),
        delay_level: Some(12),
        wait_store_msg_ok: true,
        timer: None,
        transaction: None,
        #[cfg(feature = "replies")]
        correlation: None,
        user: user.iter().copied(),
    };
    let mut buf = [0u8; 128];
    let n = encode_message_properties("T", b"x", 10, &m, Some("AB"), &mut buf).unwrap();
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        "TAGS\u{1}TagA\u{2}KEYS\u{1}k1 k2\u{2}DELAY\u{1}12\u{2}WAIT\u{1}true\u{2}UNIQ_KEY\u{1}AB\u{2}region\u{1}eu\u{2}"
    );
    assert_eq!(message_properties_len("T", b"x", 10, &m, Some("AB")), Ok(n));
    assert_eq!(
        encode_message_properties("T", b"x", 10, &m, Some("AB"), &mut buf[..n - 1]),
        Err(MessageError::BufferTooSmall)
    );
    // Empty tags and keys are absent; WAIT false is written.
    let m = MessageFields {
        wait_store_msg_ok: false,
        ..MessageFields::new(Some(""), None)
    };
    let n = encode_message_properties("T", b"x", 10, &m, None, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"WAIT\x01false\x02");
    let mut bad = |m: &MessageFields<'_, NoUserProperties>, topic: &str, body: &[u8]| {
        encode_message_properties(topic, body, 10, m, None, &mut buf)
    };
    let plain = MessageFields::new(None, None);
    assert_eq!(
        bad(&MessageFields::new(Some("a\u{1}b"), None), "T", b"x"),
        Err(MessageError::Invalid(ValidationError::PropertySeparator))
    );
    assert_eq!(
        bad(&plain, "T", b""),
        Err(MessageError::Invalid(ValidationError::BodyEmpty))
    );
    assert_eq!(
        bad(&plain, "T", &[0u8; 11]),
        Err(MessageError::Invalid(ValidationError::BodyTooLarge))
    );
    assert_eq!(
        bad(&plain, "a b", b"x"),
        Err(MessageError::Invalid(ValidationError::TopicIllegalChar))
    );
    let delayed = MessageFields {
        delay_level: Some(19),
        ..plain
    };
    assert_eq!(
        bad(&delayed, "T", b"x"),
        Err(MessageError::Invalid(ValidationError::DelayLevelOutOfRange))
    );
    let reserved = [("UNIQ_KEY", "x")];
    let m = MessageFields {
        tags: None,
        keys: None,
        delay_level: None,
        wait_store_msg_ok: true,
        timer: None,
        transaction: None,
        #[cfg(feature = "replies")]
        correlation: None,
        user: reserved.iter().copied(),
    };
    assert_eq!(
        encode_message_properties("T", b"x", 10, &m, None, &mut buf),
        Err(MessageError::Invalid(ValidationError::PropertyKeyReserved))
    );
}

#[test]
fn timer_messages_carry_their_property_and_are_refused_where_the_broker_would_drop_it() {
    use crate::message::validate::ValidationError;
    let mut buf = [0u8; 128];
    let user = [("region", "eu")];
    let at = MessageFields {
        tags: Some("TagA"),
        keys: None,
        delay_level: None,
        wait_store_msg_ok: true,
        timer: Some(TimerDelivery::At(1_700_000_003_000)),
        transaction: None,
        #[cfg(feature = "replies")]
        correlation: None,
        user: user.iter().copied(),
    };
    let n = encode_message_properties("T", b"x", 10, &at, Some("AB"), &mut buf).unwrap();
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        "TAGS\u{1}TagA\u{2}TIMER_DELIVER_MS\u{1}1700000003000\u{2}WAIT\u{1}true\u{2}UNIQ_KEY\u{1}AB\u{2}region\u{1}eu\u{2}"
    );
    assert_eq!(
        message_properties_len("T", b"x", 10, &at, Some("AB")),
        Ok(n)
    );
    let after = MessageFields {
        timer: Some(TimerDelivery::After(0)),
        ..MessageFields::new(None, None)
    };
    let n = encode_message_properties("T", b"x", 10, &after, None, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"TIMER_DELAY_MS\x010\x02WAIT\x01true\x02");
    let mut digits = [0u8; 20];
    assert_eq!(
        TimerDelivery::After(i64::MAX as u64).write_value(&mut digits),
        Some("9223372036854775807")
    );
    let refused = |m: &MessageFields<'_, NoUserProperties>, e| {
        let mut buf = [0u8; 128];
        assert_eq!(
            encode_message_properties("T", b"x", 10, m, None, &mut buf),
            Err(MessageError::Invalid(e))
        );
    };
    refused(
        &MessageFields {
            timer: Some(TimerDelivery::At(i64::MAX as u64 + 1)),
            ..MessageFields::new(None, None)
        },
        ValidationError::TimerOutOfRange,
    );
    refused(
        &MessageFields {
            delay_level: Some(3),
            timer: Some(TimerDelivery::After(5000)),
            ..MessageFields::new(None, None)
        },
        ValidationError::TimerWithDelayLevel,
    );
    // By hand, the keys stay reserved.
    let by_hand = [("TIMER_DELAY_MS", "5000")];
    let m = MessageFields {
        tags: None,
        keys: None,
        delay_level: None,
        wait_store_msg_ok: true,
        timer: None,
        transaction: None,
        #[cfg(feature = "replies")]
        correlation: None,
        user: by_hand.iter().copied(),
    };
    assert_eq!(
        encode_message_properties("T", b"x", 10, &m, None, &mut buf),
        Err(MessageError::Invalid(ValidationError::PropertyKeyReserved))
    );
    // Not in a batch: the broker would deliver the record at once.
    let at_none = MessageFields {
        timer: Some(TimerDelivery::After(5000)),
        ..MessageFields::new(None, None)
    };
    assert_eq!(
        encode_batch_record("T", b"x", 10, &at_none, None, 0, &mut buf),
        Err(MessageError::Invalid(ValidationError::TimerInBatch))
    );
}

#[test]
fn timer_refusals_are_read_from_code_and_remark() {
    // The remarks of SendMessageProcessor 5.3.3 with the default settings.
    let of = TimerRefusal::of;
    assert_eq!(
        of(
            13,
            "timer message illegal, the delay time should not be bigger than the max delay 259200000ms; or if set del msg, the delay time should be bigger than the current time"
        ),
        Some(TimerRefusal::TooFarAhead)
    );
    assert_eq!(
        of(
            1,
            "accurate timer message is not enabled, timerWheelEnable is false"
        ),
        Some(TimerRefusal::Disabled)
    );
    assert_eq!(
        of(
            1,
            "timer message is under flow control, max num limit is 2 or the current value is greater than 1 and less than 2, trigger random flow control"
        ),
        Some(TimerRefusal::FlowControl)
    );
    assert_eq!(
        of(1, "timer message illegal"),
        None,
        "code and remark together"
    );
    assert_eq!(of(13, "the message is illegal, maybe msg body"), None);
}

#[test]
fn auth_failures_are_recognised() {
    assert!(is_auth_failure(
        1,
        Some(
            "org.apache.rocketmq.acl.common.AclException: [10003:signature-failed] check signature failed"
        )
    ));
    assert!(is_auth_failure(16, Some("User:rmq is not found")));
    assert!(is_auth_failure(16, Some("the AccessKey is invalid")));
    assert!(!is_auth_failure(16, Some("the topic is not writable")));
    assert!(!is_auth_failure(14, Some("signature")));
    assert!(!is_auth_failure(1, None));
    // Remarks of the real brokers (tests/tests/std_acl.rs): 5.3.3 and 4.9.
    assert!(is_auth_failure(16, Some("check signature failed.")));
    assert!(is_auth_failure(
        16,
        Some("User:nobodyKnowsMe is not found.")
    ));
    assert!(is_auth_failure(16, Some("username cannot be null.")));
    assert!(!is_auth_failure(
        16,
        Some("the broker[broker-a] sending message is forbidden")
    ));
    assert!(!is_auth_failure(13, Some("check signature failed.")));
}

#[test]
fn a_half_message_says_so_and_names_its_group_and_drops_its_delay_level() {
    let m = MessageFields {
        delay_level: Some(3),
        transaction: Some("pg-orders"),
        ..MessageFields::new(Some("TagA"), None)
    };
    let mut buf = [0u8; 128];
    let n = encode_message_properties("T", b"x", 10, &m, Some("AB"), &mut buf).unwrap();
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        "TAGS\u{1}TagA\u{2}WAIT\u{1}true\u{2}UNIQ_KEY\u{1}AB\u{2}TRAN_MSG\u{1}true\u{2}PGROUP\u{1}pg-orders\u{2}"
    );
    assert_eq!(message_properties_len("T", b"x", 10, &m, Some("AB")), Ok(n));
    // Without a transaction the same fields carry the delay level and no mark.
    let plain = MessageFields {
        transaction: None,
        ..m.clone()
    };
    let n = encode_message_properties("T", b"x", 10, &plain, Some("AB"), &mut buf).unwrap();
    let text = core::str::from_utf8(&buf[..n]).unwrap();
    assert!(text.contains("DELAY\u{1}3\u{2}") && !text.contains("TRAN_MSG"));
    // A timer is refused (5.3.3 would lose it).
    let timer = MessageFields {
        timer: Some(TimerDelivery::After(1000)),
        ..m
    };
    assert_eq!(
        encode_message_properties("T", b"x", 10, &timer, Some("AB"), &mut buf),
        Err(MessageError::Invalid(
            crate::message::validate::ValidationError::TimerInTransaction
        ))
    );
}

#[test]
#[cfg(feature = "replies")]
fn requests_and_replies_carry_their_correlation_and_a_reply_is_code_325() {
    use crate::reply::Correlation;
    let request = MessageFields {
        correlation: Some(Correlation::request("c-1", "10.0.0.2@app", "3000")),
        ..MessageFields::new(None, None)
    };
    let mut buf = [0u8; 160];
    let n = encode_message_properties("T", b"x", 10, &request, Some("AB"), &mut buf).unwrap();
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        "WAIT\u{1}true\u{2}UNIQ_KEY\u{1}AB\u{2}CORRELATION_ID\u{1}c-1\u{2}REPLY_TO_CLIENT\u{1}10.0.0.2@app\u{2}TTL\u{1}3000\u{2}"
    );
    let reply = MessageFields {
        correlation: Some(Correlation {
            reply: true,
            ..Correlation::request("c-1", "10.0.0.2@app", "3000")
        }),
        ..MessageFields::new(None, None)
    };
    let n = encode_message_properties("T", b"x", 10, &reply, Some("AB"), &mut buf).unwrap();
    assert!(
        core::str::from_utf8(&buf[..n])
            .unwrap()
            .contains("MSG_TYPE\u{1}reply\u{2}")
    );
    let req = SendRequest::new("pg", "C_REPLY_TOPIC", 0, "b", "", 0);
    assert_eq!(req.code(), crate::wire::RequestCode::SEND_MESSAGE_V2);
    assert_eq!(
        req.reply(true).code(),
        crate::wire::RequestCode::SEND_REPLY_MESSAGE_V2
    );
}
