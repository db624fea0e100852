//! Recalling timer messages against a real Apache RocketMQ 5.3.3 (timer wheel on,
//! `recallMessageEnable=true`): a timer message's send result carries the broker's recall
//! handle (a plain message's none), `Producer::recall` stops it before it is due, and the
//! official Java client reads the topic afterwards: the recalled message never comes, its
//! sibling and the plain message do. The broker's refusals come back typed: another topic's
//! recall ("topic not match"), a recall once the message is due ("timestamp invalid"), and a
//! handle that is not one (nothing sent).

use std::collections::BTreeSet;
use std::time::Duration;

use rmq_std::{Message, Producer, SendErrorKind};
use rmq_tests::broker::{Cluster, ClusterOptions, Version, verifier_read};

/// ResponseCode.ILLEGAL_OPERATION.
const ILLEGAL_OPERATION: i32 = 604;

#[test]
fn recall_5_3_3() {
    let options = ClusterOptions {
        broker_config: vec![
            "timerWheelEnable=true".into(),
            "mappedFileSizeTimerLog=4194304".into(),
            "timerPrecisionMs=100".into(),
            "timerMaxDelaySec=60".into(),
            "recallMessageEnable=true".into(),
        ],
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start(Version::V5_3_3, options).expect("cluster");
    let ns = cluster.namesrv_addr().to_string();
    let topic = "RmqRecall";
    cluster.create_topic(topic, 2).expect("create topic");
    cluster
        .create_topic("RmqRecallOther", 1)
        .expect("create topic");
    let rt = rmq_tests::runtime();
    let keep = rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-recall")
            .start()
            .await
            .expect("producer");
        let delay = Duration::from_secs(4);
        let keep = p
            .send(Message::new(topic, "keep").with_delay(delay))
            .await
            .expect("send keep");
        let drop = p
            .send(Message::new(topic, "drop").with_delay(delay))
            .await
            .expect("send drop");
        let now = p.send(Message::new(topic, "now")).await.expect("send now");
        assert_eq!(now.recall_handle, None, "a plain message has no handle");
        let handle = drop.recall_handle.clone().expect("a timer message's handle");
        assert!(keep.recall_handle.is_some());

        // Another topic's recall: the broker checks the handle's topic.
        let e = p.recall("RmqRecallOther", &handle).await.unwrap_err();
        assert!(
            matches!(e.kind(), SendErrorKind::Broker { code: ILLEGAL_OPERATION, remark: Some(r) } if r.contains("topic not match")),
            "{e:?}"
        );
        // Not a handle: refused before anything is sent.
        let e = p.recall(topic, "not a handle").await.unwrap_err();
        assert!(matches!(e.kind(), SendErrorKind::InvalidRecallHandle(_)), "{e:?}");
        let e = p.recall("%DLQ%g", &handle).await.unwrap_err();
        assert!(matches!(e.kind(), SendErrorKind::InvalidRecallHandle(_)), "{e:?}");

        let id = p.recall(topic, &handle).await.expect("recall");
        assert_eq!(id, drop.msg_id, "the recalled message's UNIQ_KEY");
        p.shutdown().await;
        keep
    });

    // What the Java client reads once both were due: the kept timer message and the plain one.
    let read = verifier_read(&cluster, topic, 3, Duration::from_secs(10)).expect("verifier");
    let bodies: BTreeSet<String> = read
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert_eq!(
        bodies,
        ["keep", "now"].into_iter().map(String::from).collect(),
        "delivered: {read:?}"
    );

    // Once due, a recall is refused.
    rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-recall")
            .start()
            .await
            .expect("producer");
        let handle = keep.recall_handle.expect("handle");
        let e = p.recall(topic, &handle).await.unwrap_err();
        assert!(
            matches!(e.kind(), SendErrorKind::Broker { code: ILLEGAL_OPERATION, remark: Some(r) } if r.contains("timestamp invalid")),
            "{e:?}"
        );
        p.shutdown().await;
    });
}
