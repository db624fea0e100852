//! TLS from the rmq-std `Producer` (rustls) to a REAL broker (5.3.3 and the 4.9 line) in
//! TLS-enforcing mode.
//!
//! The test makes a CA and a server certificate for 127.0.0.1 with rcgen, and starts the broker
//! with the JVM system properties of `TlsSystemConfig`: `tls.server.mode=enforcing`,
//! `tls.test.mode.enable=false`, `tls.server.certPath` / `tls.server.keyPath` (PKCS#8 PEM),
//! `tls.server.need.client.auth=none`. The NameServer stays plain TCP (and the broker registers
//! with it over plain TCP, `tls.enable` being off), so the producer uses TLS to brokers only.
//!
//! - TLS with the right CA: SEND_OK;
//! - plain TCP to the same broker: a typed transport error, within the send timeout;
//! - TLS trusting another CA: the handshake fails, `Transport(ConnectFailed)`;
//! - (5.3.3) a `Consumer` over TLS (`ConsumerBuilder::tls`) reads back exactly the messages
//!   the TLS producer stored (bodies and message ids), the large one included.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rmq_core::consumer::ConsumeFromWhere;
use rmq_std::consumer::Consumer;
use rmq_std::{Message, Producer, SendErrorKind, SendStatus, TlsConfig, TransportError};
use rmq_tests::broker::{Cluster, ClusterOptions, Version};
use rmq_tests::pki::{Pki, ca};
use rustls::CertificateError;

const TOPIC: &str = "TlsTopic";
const CONSUME_TOPIC: &str = "TlsConsumeTopic";

async fn producer(ns: &str, group: &str, tls: Option<TlsConfig>) -> Producer {
    let mut b = Producer::builder()
        .namesrv_addr(ns)
        .producer_group(group)
        .send_msg_timeout(Duration::from_secs(3));
    if let Some(t) = tls {
        b = b.tls(t);
    }
    b.start().await.expect("producer")
}

/// The TLS producer stores messages in a topic of their own; a TLS consumer reads back exactly
/// those.
async fn consume_over_tls(p: &Producer, ns: &str, tls: TlsConfig) {
    // msg id -> body of every stored message; the first send may meet the topic being
    // auto-created, and a failed try may have been stored anyway: its body is allowed extra.
    let mut sent = BTreeMap::new();
    let mut maybe = Vec::new();
    for k in 0..30 {
        let body = format!("first over TLS {k}").into_bytes();
        match p.send(Message::new(CONSUME_TOPIC, body.clone())).await {
            Ok(r) => {
                sent.insert(r.msg_id, body);
                break;
            }
            Err(e) => {
                eprintln!("first send to {CONSUME_TOPIC}: {e}; retrying");
                maybe.push(body);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    assert_eq!(sent.len(), 1, "no send to {CONSUME_TOPIC} succeeded");
    for i in 0..15u32 {
        // Every fifth body is large (compressed by the producer, inflated by the consumer).
        let body = if i % 5 == 4 {
            (0..100_000u32)
                .map(|j| ((i + j) * 13 % 256) as u8)
                .collect()
        } else {
            format!("read back over TLS {i}").into_bytes()
        };
        let r = p
            .send(Message::new(CONSUME_TOPIC, body.clone()))
            .await
            .unwrap_or_else(|e| panic!("TLS send {i} to {CONSUME_TOPIC}: {e}"));
        assert_eq!(r.status, SendStatus::SendOk);
        sent.insert(r.msg_id, body);
    }

    let c = Consumer::builder()
        .namesrv_addr(ns)
        .group("cg_tls")
        .subscribe(CONSUME_TOPIC, "*")
        .consume_from(ConsumeFromWhere::FirstOffset)
        .rebalance_interval(Duration::from_secs(2))
        .tls(tls)
        .start()
        .await
        .expect("TLS consumer");
    let t0 = Instant::now();
    let mut got = Vec::new();
    while got.len() < sent.len() && t0.elapsed() < Duration::from_secs(60) {
        let batch = c.poll(64, Duration::from_millis(500)).await;
        c.ack_all(&batch);
        got.extend(batch);
    }
    let extra = c.poll(64, Duration::from_secs(2)).await;
    assert!(extra.is_empty(), "unexpected extra messages {extra:?}");
    let mut by_id: BTreeMap<String, Vec<u8>> = got
        .iter()
        .map(|m| (m.msg_id.clone(), m.body.to_vec()))
        .collect();
    assert_eq!(by_id.len(), got.len(), "a message arrived twice");
    by_id.retain(|id, body| sent.contains_key(id) || !maybe.contains(body));
    assert!(
        by_id == sent,
        "the TLS consumer reads back what was sent: got {} of {}",
        by_id.len(),
        sent.len()
    );
    let stats = c.stats();
    eprintln!("TLS consumer: {} messages read back, {stats:?}", got.len());
    assert_eq!(stats.delivered, got.len() as u64);
    assert_eq!(stats.connections_lost, 0, "{stats:?}");
    c.shutdown().await;
}

/// The TLS failure behind a send error, found through the `source()` chain.
fn tls_cause(e: &rmq_std::SendError) -> Option<rustls::Error> {
    let c = std::error::Error::source(e)?.downcast_ref::<rmq_std::ConnectionError>()?;
    let t = std::error::Error::source(c)?.downcast_ref::<rustls::Error>()?;
    assert_eq!(c.tls(), Some(t));
    assert_eq!(c.io_kind(), std::io::ErrorKind::InvalidData);
    Some(t.clone())
}

fn run(v: Version) {
    let dir = std::env::temp_dir().join(format!("rmq-tls-{}-{}", std::process::id(), v.name()));
    let pki = Pki::new(&dir);
    let o = ClusterOptions {
        broker_jvm_args: pki.broker_jvm_args(),
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start(v, o).expect("start TLS cluster");
    let ns = cluster.namesrv_addr().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tls = TlsConfig::with_ca_pem(pki.ca_pem.as_bytes()).expect("CA");
        let p = producer(&ns, "pg_tls", Some(tls)).await;
        let mut first = None;
        for _ in 0..30 {
            match p.send(Message::new(TOPIC, "over TLS")).await {
                Ok(r) => {
                    first = Some(r);
                    break;
                }
                Err(e) => {
                    eprintln!("first TLS send: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
        let r = first.unwrap_or_else(|| panic!("no TLS send succeeded\n{}", cluster.log_tail(60)));
        assert_eq!(r.status, SendStatus::SendOk);
        for i in 0..20 {
            let r = p
                .send(Message::new(TOPIC, format!("over TLS {i}")))
                .await
                .unwrap_or_else(|e| panic!("TLS send {i}: {e}"));
            assert_eq!(r.status, SendStatus::SendOk);
        }
        let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 256) as u8).collect();
        let r = p
            .send(Message::new(TOPIC, big))
            .await
            .expect("large body over TLS");
        assert_eq!(r.status, SendStatus::SendOk);
        assert_eq!(p.counters().connections_lost, 0);
        if v == Version::V5_3_3 {
            let tls = TlsConfig::with_ca_pem(pki.ca_pem.as_bytes()).expect("CA");
            consume_over_tls(&p, &ns, tls).await;
        }

        // Plain TCP to the enforcing broker: refused, typed, within the send timeout.
        let plain = producer(&ns, "pg_plain", None).await;
        let t0 = Instant::now();
        let e = plain
            .send(Message::new(TOPIC, "plain"))
            .await
            .expect_err("an enforcing broker refuses plain TCP");
        eprintln!("plain TCP: {e} after {:?}", t0.elapsed());
        assert!(
            matches!(
                e.kind(),
                SendErrorKind::Transport(_) | SendErrorKind::Timeout
            ),
            "{e:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(3) + Duration::from_millis(700));

        // TLS trusting another CA: the handshake fails, and the cause is kept (the rustls
        // error, reachable through `source()`): an unknown issuer, or a bad signature when
        // an impostor CA carries the real one's name.
        let mut trusting_others = Vec::new();
        for (name, why) in [
            ("another CA", CertificateError::UnknownIssuer),
            ("rmq test CA", CertificateError::BadSignature),
        ] {
            let (other, _) = ca(name);
            let wrong = TlsConfig::with_ca_pem(other.pem().as_bytes()).expect("other CA");
            let w = producer(&ns, "pg_wrong_ca", Some(wrong)).await;
            let e = w
                .send(Message::new(TOPIC, "untrusted"))
                .await
                .expect_err("the broker's certificate is not trusted");
            eprintln!("trusting {name:?}: {e}");
            assert_eq!(
                e.kind(),
                &SendErrorKind::Transport(TransportError::ConnectFailed),
                "{e:?}"
            );
            assert_eq!(
                tls_cause(&e),
                Some(rustls::Error::InvalidCertificate(why)),
                "{e:?}"
            );
            trusting_others.push(w);
        }

        // The right CA, but the certificate is checked against another name.
        let named = TlsConfig::with_ca_pem(pki.ca_pem.as_bytes())
            .expect("CA")
            .server_name("broker.example")
            .expect("name");
        let n = producer(&ns, "pg_wrong_name", Some(named)).await;
        let e = n
            .send(Message::new(TOPIC, "wrong name"))
            .await
            .expect_err("the certificate names 127.0.0.1 only");
        eprintln!("wrong name: {e}");
        assert!(
            matches!(
                tls_cause(&e),
                Some(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                        | CertificateError::NotValidForNameContext { .. }
                ))
            ),
            "{e:?}"
        );
        for x in [p, plain, n].into_iter().chain(trusting_others) {
            x.shutdown_timeout(Duration::from_millis(500)).await;
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tls_to_an_enforcing_broker_5_3_3() {
    run(Version::V5_3_3);
}

#[test]
fn tls_to_an_enforcing_broker_4_9() {
    run(Version::V4_9);
}
