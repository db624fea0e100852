use super::*;
use rmq_core::message::stored::MessageVersion;
use rmq_core::message::{StoredMessage, SysFlag};
use rmq_core::session::{BrokerId, TopicId};
use std::net::SocketAddr;

fn stored<'a>(body: &'a [u8], sys_flag: SysFlag, props: &'a [u8]) -> StoredMessage<'a> {
    let host: SocketAddr = "10.0.0.5:10911".parse().unwrap();
    StoredMessage {
        version: MessageVersion::V1,
        body_crc: rmq_core::message::stored::body_crc(body),
        queue_id: 2,
        flag: 7,
        queue_offset: 41,
        physical_offset: 0x12345,
        sys_flag,
        born_timestamp: 1,
        born_host: host,
        store_timestamp: 2,
        store_host: host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body,
        topic: "T",
        raw_properties: props,
    }
}

#[test]
fn pulled_message_is_decompressed_and_mapped() {
    let plain: Vec<u8> = (0..5000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let z = miniz_oxide::deflate::compress_to_vec_zlib(&plain, 5);
    let props = b"TAGS\x01TagA\x02KEYS\x01k1\x02UNIQ_KEY\x01ABCDEF\x02";
    let key = QueueKey {
        topic: TopicId(0),
        broker: BrokerId(1),
        queue_id: 2,
    };
    let deliver = |m: &StoredMessage<'_>, lease| {
        to_message(
            &Bytes::new(),
            &Delivery {
                queue: key,
                lease,
                topic: "T",
                queue_topic: "%RETRY%g",
                broker_name: "broker-a",
                message: m,
            },
        )
    };
    let flags = SysFlag::COMPRESSED | SysFlag::COMPRESSION_ZLIB_TYPE;
    let m = deliver(&stored(&z, flags, props), 9);
    assert_eq!(m.queue.broker_name, "broker-a");
    assert_eq!(
        (m.topic.as_str(), m.queue.topic.as_str()),
        ("T", "%RETRY%g")
    );
    assert_eq!(m.queue.queue_id, 2);
    assert_eq!(m.key, key);
    assert_eq!(m.body.as_ref(), &plain[..]);
    assert_eq!(m.tags(), Some("TagA"));
    assert_eq!(m.keys(), Some("k1"));
    assert_eq!(m.msg_id, "ABCDEF");
    assert_eq!(m.offset_msg_id, "0A00000500002A9F0000000000012345");
    assert_eq!((m.queue_offset, m.flag, m.lease), (41, 7, 9));

    // Not compressed: as stored; no UNIQ_KEY: the offsetMsgId.
    let m = deliver(&stored(b"raw", SysFlag::default(), b""), 1);
    assert_eq!(m.body.as_ref(), b"raw");
    assert_eq!(m.msg_id, m.offset_msg_id);
    assert_eq!(m.tags(), None);
}

#[test]
fn body_and_properties_share_the_frame() {
    let frame = Bytes::from_static(b"....raw body....TAGS\x01a\x02....");
    let (body, props) = (&frame[4..12], &frame[16..23]);
    let key = QueueKey {
        topic: TopicId(0),
        broker: BrokerId(1),
        queue_id: 2,
    };
    let m = to_message(
        &frame,
        &Delivery {
            queue: key,
            lease: 1,
            topic: "T",
            queue_topic: "T",
            broker_name: "b",
            message: &stored(body, SysFlag::default(), props),
        },
    );
    assert_eq!((m.body.as_ref(), m.tags()), (&b"raw body"[..], Some("a")));
    assert_eq!(
        m.body.as_ptr(),
        body.as_ptr(),
        "a slice of the frame, not a copy"
    );
    assert_eq!(m.properties.as_raw().as_ptr(), props.as_ptr());
    // Bytes from elsewhere are copied; invalid UTF-8 properties read as none.
    let other = b"elsewhere".to_vec();
    let bad = b"TAGS\x01\xff\x02".to_vec();
    let m2 = to_message(
        &frame,
        &Delivery {
            queue: key,
            lease: 1,
            topic: "T",
            queue_topic: "T",
            broker_name: "b",
            message: &stored(&other, SysFlag::default(), &bad),
        },
    );
    assert_eq!(m2.body.as_ref(), b"elsewhere");
    assert_ne!(m2.body.as_ptr(), other.as_ptr());
    assert!(m2.properties.is_empty());
}

#[tokio::test]
async fn builder_validation() {
    let e = Consumer::builder()
        .group("g")
        .subscribe("T", "*")
        .start()
        .await;
    assert_eq!(e.unwrap_err(), ConsumerConfigError::NoNameServer);
    let b = Consumer::builder().namesrv_addr("127.0.0.1:1");
    // Nothing listens there: the start fails, saying why (unless lazy).
    let g = b.clone().group("g").subscribe("T", "*");
    match g.clone().start().await.unwrap_err() {
        ConsumerConfigError::NameServersUnreachable(Some(e)) => {
            assert_eq!(e.addr(), "127.0.0.1:1");
            assert_eq!(e.io_kind(), std::io::ErrorKind::ConnectionRefused);
        }
        e => panic!("{e:?}"),
    }
    let lazy = g
        .lazy_start(true)
        .start_timeout(StdDuration::from_millis(50));
    lazy.start().await.unwrap().shutdown().await;
    assert_eq!(
        b.clone().subscribe("T", "*").start().await.unwrap_err(),
        ConsumerConfigError::NoGroup
    );
    assert_eq!(
        b.clone().group("g").start().await.unwrap_err(),
        ConsumerConfigError::NoSubscription
    );
    assert_eq!(
        b.clone()
            .group("g")
            .subscribe("T", "*")
            .pull_batch_size(0)
            .start()
            .await
            .unwrap_err(),
        ConsumerConfigError::ZeroBatch
    );
    let no_key = b.clone().group("g").subscribe("T", "*").acl("", "sk", None);
    assert!(no_key.config().security.acl.is_some());
    assert_eq!(
        no_key.start().await.unwrap_err(),
        ConsumerConfigError::AclAccessKey
    );
    // A later subscribe replaces the expression of the same topic.
    let b = b.subscribe("T", "a").subscribe("T", "b || c");
    assert_eq!(
        b.config().subscriptions,
        [("T".to_owned(), Expression::Tag("b || c".to_owned()))]
    );
    // Two default builders never share an instance name (client ids must differ).
    assert_ne!(
        Consumer::builder().config().instance_name,
        Consumer::builder().config().instance_name
    );
}
