//! ACL 1.0 request signing (rmq-core `acl`) against the REAL broker with authentication on:
//! 4.9.x plain ACL (`aclEnable=true` + `conf/plain_acl.yml`) and 5.3.3 authentication
//! (`authenticationEnabled=true` with an initial user). The right keys give SEND_OK; a wrong
//! secret gives an authentication error from the broker, and a retry with the same wrong key
//! fails the same way (nothing is stored).

use std::time::{SystemTime, UNIX_EPOCH};

use rmq_core::acl::{Credentials, SignedFields};
use rmq_core::wire::headers::{SendMessageRequestHeader, SendMessageRequestHeaderV2};
use rmq_core::wire::{RequestCode, SerializeType, version};
use rmq_tests::blocking::{Connection, Response, encode_properties};
use rmq_tests::broker::{Cluster, ClusterOptions, Version};

const ACCESS_KEY: &str = "rmqTestAccess";
const SECRET_KEY: &str = "rmqTestSecret123";

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn options(v: Version) -> ClusterOptions {
    ClusterOptions::default().with_acl(v, ACCESS_KEY, SECRET_KEY)
}

/// One SEND_MESSAGE_V2 signed with `creds` (or unsigned when `None`).
fn send(
    conn: &mut Connection,
    broker_name: &str,
    topic: &str,
    body: &[u8],
    creds: Option<&Credentials<'_>>,
    ty: SerializeType,
) -> Response {
    let props = encode_properties(&[
        ("WAIT".to_string(), "true".to_string()),
        ("TAGS".to_string(), "acl".to_string()),
    ])
    .unwrap();
    let header = SendMessageRequestHeaderV2(SendMessageRequestHeader {
        producer_group: "rmq_acl_test",
        topic,
        default_topic: "TBW102",
        default_topic_queue_nums: 4,
        queue_id: 0,
        sys_flag: 0,
        born_timestamp: now_millis(),
        flag: 0,
        properties: Some(&props),
        reconsume_times: Some(0),
        unit_mode: Some(false),
        batch: Some(false),
        max_reconsume_times: None,
        broker_name: Some(broker_name),
    });
    match creds {
        Some(c) => {
            let signed = SignedFields::sign(c, &header, body).expect("sign");
            conn.request(
                RequestCode::SEND_MESSAGE_V2,
                version::V5_3_3,
                ty,
                Some(&signed),
                body,
            )
            .expect("request")
        }
        None => conn
            .request(
                RequestCode::SEND_MESSAGE_V2,
                version::V5_3_3,
                ty,
                Some(&header),
                body,
            )
            .expect("request"),
    }
}

fn run(v: Version) {
    let cluster = Cluster::start(v, options(v)).expect("start cluster with ACL");
    let broker = cluster.broker_addr(0);
    let name = cluster.broker_name(0);
    let mut conn = Connection::connect(broker).expect("connect");
    let good = Credentials {
        access_key: ACCESS_KEY,
        secret_key: SECRET_KEY,
        security_token: None,
    };
    let bad = Credentials {
        secret_key: "not-the-secret",
        ..good
    };

    for ty in [SerializeType::JSON, SerializeType::ROCKETMQ] {
        // Right keys: stored (the topic is auto-created from TBW102 on the first send).
        let mut ok = None;
        for _ in 0..20 {
            let r = send(
                &mut conn,
                &name,
                "AclTopic",
                b"signed hello",
                Some(&good),
                ty,
            );
            if r.code() == 0 {
                ok = Some(r);
                break;
            }
            eprintln!(
                "{v:?} {ty:?}: good keys answered {} {:?}; retrying",
                r.code(),
                r.remark()
            );
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        let ok = ok.unwrap_or_else(|| {
            panic!(
                "{v:?}: signed send never succeeded\n{}",
                cluster.log_tail(40)
            )
        });
        let h = ok.header().unwrap();
        assert!(h.get("msgId").is_some(), "SEND_OK carries the offsetMsgId");

        // Wrong secret: refused by the broker, with a remark naming the failure.
        for attempt in 0..2 {
            let r = send(&mut conn, &name, "AclTopic", b"forged", Some(&bad), ty);
            let remark = r.remark().unwrap_or_default();
            eprintln!(
                "{v:?} {ty:?}: wrong secret (attempt {attempt}) -> code {} remark {remark:?}",
                r.code()
            );
            assert_ne!(r.code(), 0, "a wrong secret must not be accepted");
            assert!(
                remark.to_ascii_lowercase().contains("signature")
                    || remark.to_ascii_lowercase().contains("auth"),
                "the broker's remark explains the refusal: {remark:?}"
            );
        }
        // Unsigned: refused too.
        let r = send(&mut conn, &name, "AclTopic", b"unsigned", None, ty);
        eprintln!(
            "{v:?} {ty:?}: unsigned -> code {} remark {:?}",
            r.code(),
            r.remark()
        );
        assert_ne!(r.code(), 0, "an unsigned request must not be accepted");
    }
}

#[test]
fn acl_signing_against_real_broker_5_3_3() {
    run(Version::V5_3_3);
}

#[test]
fn acl_signing_against_real_broker_4_9() {
    run(Version::V4_9);
}
