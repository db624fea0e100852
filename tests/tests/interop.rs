//! rmq-core frames against the real Apache RocketMQ NameServer and broker (5.3.3 and the 4.9
//! line): the blocking client of `rmq_tests::blocking` sends, the official Java client reads
//! every message back (`Verifier`), and the two views must agree byte for byte.
//!
//! One cluster per version (auto-create off), reused by every case of that version.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmq_core::message::validate::{DEFAULT_MAX_MESSAGE_SIZE, ValidationError};
use rmq_core::retry::SendStatus;
use rmq_core::route::PublishQueueRef;
use rmq_core::wire::{ResponseCode, SerializeType, version};
use rmq_tests::blocking::{
    ClientError, Message, Producer, ProducerConfig, Route, SendCode, SendOutcome, zlib,
};
use rmq_tests::broker::{
    Cluster, ClusterOptions, ReadyProbe, VerifiedMessage, Version, verifier_read,
};

const TOPIC: &str = "InteropTopic";
const UNKNOWN: &str = "NoSuchTopic_interop";
/// Largest incompressible body our zlib (level 5) keeps at ≤ 4 MiB on the wire (see the
/// assertion in `bounds`).
const MAX_RANDOM_COMPRESSED: usize = 4_193_633;

/// Deterministic incompressible bytes (xorshift64).
fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Text-like (compressible) body of `n` bytes.
fn text_bytes(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| b'a' + ((i + usize::from(salt)) % 26) as u8)
        .collect()
}

/// What we sent, to compare with what the Java client reads back.
struct Expected {
    label: String,
    msg: Message,
    outcome: SendOutcome,
    /// Delayed messages are re-stored by the broker: new offset id and queue offset.
    delayed: bool,
    /// Part of a batch.
    batch: bool,
}

fn send_ok(p: &mut Producer, label: &str, msg: Message, sent: &mut Vec<Expected>) -> SendOutcome {
    let out = p
        .send(&msg)
        .unwrap_or_else(|e| panic!("{label}: send failed: {e}"));
    assert_eq!(out.status, SendStatus::SendOk, "{label}: {out:?}");
    assert_eq!(out.offset_msg_id.len(), 32, "{label}: {out:?}");
    sent.push(Expected {
        label: label.to_owned(),
        delayed: msg.delay_level.is_some(),
        batch: false,
        msg,
        outcome: out.clone(),
    });
    out
}

fn check_read_back(version: Version, sent: &[Expected], got: &[VerifiedMessage]) {
    let by_id: BTreeMap<&str, &VerifiedMessage> =
        got.iter().map(|m| (m.msg_id.as_str(), m)).collect();
    for e in sent {
        let label = format!("[{}] {}", version.name(), e.label);
        let m = by_id
            .get(e.outcome.msg_id.as_str())
            .unwrap_or_else(|| panic!("{label}: UNIQ_KEY {} not read back", e.outcome.msg_id));
        assert_eq!(m.topic, e.msg.topic, "{label}");
        assert!(
            m.body == e.msg.body,
            "{label}: body differs ({} vs {} bytes)",
            m.body.len(),
            e.msg.body.len()
        );
        assert_eq!(m.tags, e.msg.tags, "{label}");
        let keys = (!e.msg.keys.is_empty()).then(|| e.msg.keys.join(" "));
        assert_eq!(m.keys, keys, "{label}");
        assert_eq!(
            m.properties.get("UNIQ_KEY"),
            Some(&e.outcome.msg_id),
            "{label}"
        );
        // WAIT=true: kept by 5.3.3; the 4.9.7 broker strips it from single messages (not from
        // batch records, nor from delayed messages re-stored by the schedule service).
        let wait = match version {
            Version::V4_9 if !e.batch && !e.delayed => None,
            _ => Some("true"),
        };
        assert_eq!(
            m.properties.get("WAIT").map(String::as_str),
            wait,
            "{label}"
        );
        for (k, v) in &e.msg.user_properties {
            assert_eq!(m.properties.get(k), Some(v), "{label}: property {k:?}");
        }
        assert_eq!(m.flag, e.msg.flag, "{label}");
        // Both Java consumers return the inflated body; 5.3.3 also clears the compressed bit
        // (keeping the type bits 0x300), 4.9.8 leaves sysFlag as stored.
        let flag = match version {
            Version::V5_3_3 => e.outcome.sys_flag & !0x1,
            Version::V4_9 => e.outcome.sys_flag,
        };
        assert_eq!(m.sys_flag, flag, "{label}: sysFlag {:#x}", m.sys_flag);
        if e.delayed {
            let level = e.msg.delay_level.unwrap_or_default().to_string();
            assert_eq!(m.properties.get("DELAY"), Some(&level), "{label}");
            assert_eq!(
                m.properties.get("REAL_TOPIC"),
                Some(&e.msg.topic),
                "{label}"
            );
        } else {
            assert_eq!(m.queue_id, e.outcome.queue_id, "{label}");
            if !e.outcome.offset_msg_id.contains(',') {
                assert_eq!(m.offset_msg_id, e.outcome.offset_msg_id, "{label}");
                assert_eq!(m.queue_offset, e.outcome.queue_offset, "{label}");
            }
        }
    }
}

fn producer(cluster: &Cluster, ty: SerializeType, code: SendCode) -> Producer {
    let v = cluster.version().client_version();
    Producer::new(
        cluster.namesrv_addr(),
        ProducerConfig {
            serialize_type: ty,
            send_code: code,
            version: v,
            ..ProducerConfig::default()
        },
    )
}

/// Ready when the NameServer knows every broker: the route of each broker's own system topic
/// (named after the broker) answers SUCCESS. "boot success" in the broker log comes before the
/// registration, and `mqadmin updateTopic -c` fails until then.
pub fn registered_probe() -> ReadyProbe {
    Arc::new(|c: &Cluster| {
        let mut p = Producer::new(c.namesrv_addr(), ProducerConfig::default());
        (0..c.broker_count()).all(|i| {
            p.route_raw(&c.broker_name(i), version::V5_3_3, Some(true))
                .is_ok_and(|r| r.code() == 0)
        })
    })
}

fn suite(version: Version) {
    let t0 = Instant::now();
    let cluster = Cluster::start(
        version,
        ClusterOptions {
            auto_create_topic: false,
            ready_probe: Some(registered_probe()),
            ..ClusterOptions::default()
        },
    )
    .expect("cluster start");
    cluster.create_topic(TOPIC, 4).expect("create topic");
    eprintln!(
        "[{}] cluster + topic ready in {:?}",
        version.name(),
        t0.elapsed()
    );
    let v = version.name();
    let mut sent: Vec<Expected> = Vec::new();
    let mut p = producer(&cluster, SerializeType::JSON, SendCode::V2);

    // ---- client-side validation: nothing may reach the wire -----------------------------
    let e = p
        .send(&Message::new(TOPIC, Vec::new()))
        .expect_err("empty body");
    assert!(
        matches!(e, ClientError::Validation(ValidationError::BodyEmpty)),
        "[{v}] {e}"
    );
    let too_big = random_bytes(DEFAULT_MAX_MESSAGE_SIZE + 1, 7);
    let e = p
        .send(&Message::new(TOPIC, too_big.clone()))
        .expect_err("4 MiB + 1");
    assert!(
        matches!(e, ClientError::Validation(ValidationError::BodyTooLarge)),
        "[{v}] {e}"
    );
    let e = p
        .send(&Message::new("bad topic!", "x"))
        .expect_err("bad topic");
    assert!(
        matches!(
            e,
            ClientError::Validation(ValidationError::TopicIllegalChar)
        ),
        "[{v}] {e}"
    );
    let e = p
        .send(&Message::new(TOPIC, "x").prop("UNIQ_KEY", "mine"))
        .expect_err("reserved property");
    assert!(
        matches!(
            e,
            ClientError::Validation(ValidationError::PropertyKeyReserved)
        ),
        "[{v}] {e}"
    );
    assert_eq!(
        p.bytes_sent(),
        0,
        "[{v}] a rejected message reached the wire"
    );

    // ---- routes ---------------------------------------------------------------------------
    let r = p
        .route_raw(UNKNOWN, version::V5_3_3, Some(true))
        .expect("route request");
    assert_eq!(
        r.code(),
        ResponseCode::TOPIC_NOT_EXIST.0,
        "[{v}] remark {:?}",
        r.remark()
    );
    assert!(r.body().is_empty(), "[{v}] unknown-topic route has a body");
    let e = p
        .send(&Message::new(UNKNOWN, "x"))
        .expect_err("route of unknown topic");
    assert_eq!(e.broker_code(), Some(17), "[{v}] {e}");

    // Legacy form: version < 401 and no acceptStandardJsonOnly -> bare-number map keys.
    let legacy = p
        .route_raw(TOPIC, version::V4_9_0, None)
        .expect("legacy route")
        .ok()
        .expect("ok");
    let legacy_text = String::from_utf8(legacy.body().to_vec()).expect("utf-8");
    assert!(
        legacy_text.contains(r#""brokerAddrs":{0:""#),
        "[{v}] legacy body: {legacy_text}"
    );
    assert!(
        serde_json::from_str::<serde_json::Value>(&legacy_text).is_err(),
        "[{v}] legacy body is strict JSON?"
    );
    // Standard form: version ≥ 401, or acceptStandardJsonOnly with an old version.
    let std_v = p
        .route_raw(TOPIC, version::V4_9_4, None)
        .expect("route")
        .ok()
        .expect("ok");
    let std_flag = p
        .route_raw(TOPIC, version::V4_9_0, Some(true))
        .expect("route")
        .ok()
        .expect("ok");
    for (what, resp) in [
        ("version 401", &std_v),
        ("acceptStandardJsonOnly", &std_flag),
    ] {
        let text = String::from_utf8(resp.body().to_vec()).expect("utf-8");
        assert!(
            text.contains(r#""brokerAddrs":{"0":""#),
            "[{v}] {what}: {text}"
        );
        serde_json::from_str::<serde_json::Value>(&text)
            .unwrap_or_else(|e| panic!("[{v}] {what}: not strict JSON ({e}): {text}"));
    }
    let broker = cluster.broker_addr(0).to_string();
    for (what, body) in [("legacy", legacy.body()), ("standard", std_v.body())] {
        let route = Route::parse(body).unwrap_or_else(|e| panic!("[{v}] {what}: {e}"));
        assert_eq!(
            route.master_addr("broker-a"),
            Some(broker.as_str()),
            "[{v}] {what}"
        );
        let mut q: heapless::Vec<PublishQueueRef, 64> = heapless::Vec::new();
        route.publish_queues(None, &mut q).expect("publish queues");
        let ids: Vec<i32> = q.iter().map(|q| q.queue_id).collect();
        assert_eq!(ids, [0, 1, 2, 3], "[{v}] {what}");
    }

    // Unknown topic sent straight to the broker (auto-create off).
    let e = p
        .send_to(
            cluster.broker_addr(0),
            "broker-a",
            0,
            &Message::new(UNKNOWN, "x"),
        )
        .expect_err("unknown topic");
    match &e {
        ClientError::Broker { code, remark } => {
            assert_eq!(*code, ResponseCode::TOPIC_NOT_EXIST.0, "[{v}] {e}");
            let remark = remark.as_deref().unwrap_or_default();
            assert!(remark.contains(UNKNOWN), "[{v}] remark {remark:?}");
        }
        other => panic!("[{v}] expected TOPIC_NOT_EXIST, got {other}"),
    }

    // ---- bodies around the compression threshold ------------------------------------------
    send_ok(&mut p, "1 byte", Message::new(TOPIC, "x"), &mut sent);
    for (n, compressed) in [(4095, false), (4096, true), (4097, true)] {
        let out = send_ok(
            &mut p,
            &format!("{n} bytes"),
            Message::new(TOPIC, text_bytes(n, 3)),
            &mut sent,
        );
        let want = if compressed { 0x301 } else { 0 };
        assert_eq!(out.sys_flag, want, "[{v}] {n}");
        assert_eq!(
            out.wire_body_len < n,
            compressed,
            "[{v}] {n}: {}",
            out.wire_body_len
        );
    }
    // Incompressible 4096 B: compressed anyway (like Java), the reader must still inflate it.
    let out = send_ok(
        &mut p,
        "4096 random",
        Message::new(TOPIC, random_bytes(4096, 1)),
        &mut sent,
    );
    assert_eq!(out.sys_flag, 0x301);
    assert!(out.wire_body_len > 4096, "{out:?}");

    // ---- the largest bodies the broker accepts ---------------------------------------------
    // The broker limits the body it receives (after compression) to 4 MiB.
    let limit = DEFAULT_MAX_MESSAGE_SIZE;
    let at = random_bytes(MAX_RANDOM_COMPRESSED, 11);
    let over = random_bytes(MAX_RANDOM_COMPRESSED + 1, 12);
    assert_eq!(zlib(&at, 5).len(), limit, "zlib overhead changed");
    assert!(zlib(&over, 5).len() > limit);
    let out = send_ok(&mut p, "max compressed", Message::new(TOPIC, at), &mut sent);
    assert_eq!(out.wire_body_len, limit);
    let before = p.bytes_sent();
    let e = p
        .send(&Message::new(TOPIC, over.clone()))
        .expect_err("compressed > 4 MiB");
    assert!(
        matches!(e, ClientError::CompressedTooLarge { compressed, limit: l } if compressed == limit + 1 && l == limit),
        "[{v}] {e}"
    );
    assert_eq!(
        p.bytes_sent(),
        before,
        "[{v}] rejected message reached the wire"
    );
    // Without our post-compression check (Java's behaviour) the broker refuses it.
    p.config.check_compressed_size = false;
    let e = p
        .send(&Message::new(TOPIC, over))
        .expect_err("broker must refuse");
    assert_eq!(
        e.broker_code(),
        Some(ResponseCode::MESSAGE_ILLEGAL.0),
        "[{v}] {e}"
    );
    p.config.check_compressed_size = true;
    // Uncompressed: exactly 4 MiB passes, one byte more is refused by the broker too.
    p.config.compress_over = usize::MAX;
    let out = send_ok(
        &mut p,
        "max uncompressed",
        Message::new(TOPIC, random_bytes(limit, 13)),
        &mut sent,
    );
    assert_eq!((out.sys_flag, out.wire_body_len), (0, limit));
    p.config.max_message_size = limit + 1;
    let e = p
        .send(&Message::new(TOPIC, too_big))
        .expect_err("broker must refuse 4 MiB + 1");
    assert_eq!(
        e.broker_code(),
        Some(ResponseCode::MESSAGE_ILLEGAL.0),
        "[{v}] {e}"
    );
    p.config.max_message_size = limit;
    p.config.compress_over = 4096;

    // ---- tags, keys and properties ---------------------------------------------------------
    let unicode = Message::new(TOPIC, "unicode body ✓ 中文 🙂".as_bytes())
        .tags("标签-ü")
        .key("ключ-1")
        .key("キー2")
        .prop("emoji🙂", "värde ✓ \"quoted\" \\ back")
        .prop("k", "tab\there");
    send_ok(&mut p, "unicode", unicode.clone(), &mut sent);
    let mut many = Message::new(TOPIC, "many properties").tags("TagMany");
    for i in 0..64 {
        many = many.prop(&format!("p{i:02}"), &format!("value-{i}-{}", "x".repeat(i)));
    }
    many.flag = 0x1234_5678;
    send_ok(&mut p, "64 properties", many, &mut sent);
    send_ok(
        &mut p,
        "delay 1",
        Message::new(TOPIC, "delayed").tags("D").delay(1),
        &mut sent,
    );

    // ---- header serialize types and codes --------------------------------------------------
    for (ty, code) in [
        (SerializeType::ROCKETMQ, SendCode::V2),
        (SerializeType::JSON, SendCode::V1),
        (SerializeType::ROCKETMQ, SendCode::V1),
    ] {
        let mut q = producer(&cluster, ty, code);
        let label = format!("{ty:?}/{code:?}");
        let m = unicode.clone().prop("via", &label);
        send_ok(&mut q, &format!("{label} unicode"), m, &mut sent);
        send_ok(
            &mut q,
            &format!("{label} compressed"),
            Message::new(TOPIC, text_bytes(10_000, 5)).key("big"),
            &mut sent,
        );
        // Response format: 4.9 mirrors the request's serialize type, 5.x answers JSON.
        let r = q
            .route_raw(TOPIC, version::V5_3_3, Some(true))
            .expect("route");
        let want = match (version, ty) {
            (Version::V5_3_3, _) => SerializeType::JSON,
            (Version::V4_9, t) => t,
        };
        assert_eq!(
            r.frame().serialize_type(),
            want,
            "[{v}] {label}: namesrv response type"
        );
    }

    // ---- batch -----------------------------------------------------------------------------
    let batch: Vec<Message> = (0..3)
        .map(|i| {
            Message::new(TOPIC, format!("batch-{i}").into_bytes())
                .tags("TagB")
                .key(&format!("bk-{i}"))
                .prop("idx", &i.to_string())
        })
        .collect();
    let out = p.send_batch(&batch).expect("batch");
    assert_eq!(out.status, SendStatus::SendOk);
    let uniqs: Vec<&str> = out.msg_id.split(',').collect();
    let offs: Vec<&str> = out.offset_msg_id.split(',').collect();
    assert_eq!((uniqs.len(), offs.len()), (3, 3), "[{v}] {out:?}");
    for (i, m) in batch.iter().enumerate() {
        let mut o = out.clone();
        o.msg_id = uniqs[i].to_owned();
        o.offset_msg_id = offs[i].to_owned();
        o.queue_offset = out.queue_offset + i as i64;
        sent.push(Expected {
            label: format!("batch {i}"),
            msg: m.clone(),
            outcome: o,
            delayed: false,
            batch: true,
        });
    }

    // A batch whose wrapper carries its own UNIQ_KEY (as the 5.x Java client sends it).
    p.config.batch_wrapper_uniq_key = true;
    let wrapped: Vec<Message> = (0..2)
        .map(|i| Message::new(TOPIC, format!("wrapped-{i}").into_bytes()).key(&format!("wk-{i}")))
        .collect();
    let wout = p.send_batch(&wrapped).expect("wrapped batch");
    p.config.batch_wrapper_uniq_key = false;
    assert_eq!(wout.msg_id.split(',').count(), 2, "[{v}] {wout:?}");

    // ---- read everything back with the Java client -----------------------------------------
    let total = sent.len() + wrapped.len();
    let got = verifier_read(&cluster, TOPIC, total, Duration::from_secs(8)).expect("verifier");
    assert_eq!(got.len(), total, "[{v}] read back {} of {total}", got.len());
    check_read_back(version, &sent, &got);
    // The wrapped batch: bodies and keys come back; which UNIQ_KEY wins depends on the broker.
    let inner: Vec<&str> = wout.msg_id.split(',').collect();
    let mut wrapper_ids = Vec::new();
    for (i, m) in wrapped.iter().enumerate() {
        let r = got
            .iter()
            .find(|g| g.body == m.body)
            .unwrap_or_else(|| panic!("[{v}] wrapped batch message {i} not read back"));
        assert_eq!(r.keys.as_deref(), Some(format!("wk-{i}").as_str()), "[{v}]");
        // Both brokers append the wrapper's properties to every record: its UNIQ_KEY replaces
        // the inner one.
        assert!(
            !inner.contains(&r.msg_id.as_str()),
            "[{v}] inner UNIQ_KEY survived: {r:?}"
        );
        wrapper_ids.push(r.msg_id.clone());
    }
    assert!(
        wrapper_ids.windows(2).all(|w| w[0] == w[1]),
        "[{v}] {wrapper_ids:?}"
    );
    eprintln!(
        "[{v}] {} messages verified; total {:?}",
        sent.len(),
        t0.elapsed()
    );
}

#[test]
fn interop_5_3_3() {
    suite(Version::V5_3_3);
}

#[test]
fn interop_4_9_8() {
    suite(Version::V4_9);
}
