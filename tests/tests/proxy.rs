//! rmq through Apache RocketMQ's own proxy (`rocketmq-proxy` 5.3.3, cluster mode) in front of a
//! real 5.3.3 cluster: the client's NameServer address is the proxy's remoting port, so the
//! route it gets names the proxy as the broker's address and every request goes through the
//! proxy. The proxy routes a request by the broker name the client writes in it (`bname`, `n`
//! for SEND_MESSAGE_V2) and refuses one without it: the consumer's offset requests carry it as
//! the Java 5.x client's do, and a refusal is reported (`Health::last_refusal`, a warning)
//! instead of a consumer that silently reads nothing.
//!
//! With authentication on (5.3.3 `authenticationEnabled` on the broker and on the proxy), the
//! proxy checks the signature of every request itself, the route lookup included, fetching the
//! account from the broker, and signs what it forwards with its own inner-client credentials.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rmq_std::consumer::{ConsumeFromWhere, Consumer};
use rmq_std::core::wire::version;
use rmq_std::{Message, Producer, SendErrorKind, SendStatus};
use rmq_tests::broker::{
    Cluster, ClusterOptions, JavaProducer, ProxyOptions, Version, verifier_read,
};
use serde_json::{Map, Value, json};

/// The topic every test of this file uses (4 queues, created on every broker).
const TOPIC: &str = "RmqProxyTopic";

/// A 5.3.3 cluster (one broker, auto-create off) with [`TOPIC`] created, and a proxy started in
/// front of it; returns the cluster (which kills the proxy when dropped) and the proxy's remoting
/// address, the NameServer address to give a client.
fn cluster_with_proxy() -> (Cluster, SocketAddr) {
    cluster_with_proxy_using(ClusterOptions::default(), ProxyOptions::default(), None)
}

/// [`cluster_with_proxy`] with `options` (auto-create forced off) and `proxy`; `admin` is the
/// ACL account mqadmin signs with (its `conf/tools.yml`) to create [`TOPIC`] on a broker that
/// authenticates.
fn cluster_with_proxy_using(
    options: ClusterOptions,
    proxy: ProxyOptions,
    admin: Option<(&str, &str)>,
) -> (Cluster, SocketAddr) {
    let options = ClusterOptions {
        auto_create_topic: false,
        ..options
    };
    let t0 = Instant::now();
    let mut cluster = Cluster::start(Version::V5_3_3, options).expect("cluster");
    eprintln!(
        "cluster ready in {:?} ({})",
        t0.elapsed(),
        cluster.run_dir().display()
    );
    if let Some((ak, sk)) = admin {
        // mqadmin runs with ROCKETMQ_HOME = <run>/tools/home and reads its keys there.
        let conf = cluster.run_dir().join("tools").join("home").join("conf");
        std::fs::create_dir_all(&conf).expect("tools conf dir");
        std::fs::write(
            conf.join("tools.yml"),
            format!("accessKey: {ak}\nsecretKey: {sk}\n"),
        )
        .expect("tools.yml");
    }
    cluster.create_topic(TOPIC, 4).expect("create topic");
    let t1 = Instant::now();
    let proxy = cluster.start_proxy_with(proxy).expect("proxy");
    eprintln!("proxy ready at {proxy} in {:?}", t1.elapsed());
    (cluster, proxy)
}

fn consumer(proxy: &str, group: &str) -> rmq_std::consumer::ConsumerBuilder {
    Consumer::builder()
        .namesrv_addr(proxy)
        .group(group)
        .subscribe(TOPIC, "*")
        .consume_from(ConsumeFromWhere::FirstOffset)
}

/// Every send mode and the clustering consumer through the proxy, with the Java client on the
/// other end both ways; a consumer restarted in its group goes on from its committed offsets;
/// a consumer that announces a 4.x version (no `bname`) is refused by the proxy and says so.
#[test]
fn through_the_proxy_rmq_sends_and_consumes_and_interoperates_with_java() {
    let (cluster, proxy) = cluster_with_proxy();
    assert_eq!(cluster.proxy_addr(), Some(proxy));
    assert_ne!(proxy, cluster.namesrv_addr());
    let broker_name = cluster.broker_name(0);
    let ns = proxy.to_string();
    let rt = rmq_tests::runtime();
    rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-proxy-modes")
            .start()
            .await
            .expect("producer");
        let mut sent = BTreeSet::new();
        for i in 0..10 {
            let body = format!("sync-{i}");
            let r = p
                .send(Message::new(TOPIC, body.clone()).with_keys([body.clone()]))
                .await
                .unwrap_or_else(|e| panic!("sync {i}: {e}"));
            assert_eq!(r.status, SendStatus::SendOk, "sync {i}: {r:?}");
            // The route names the proxy as the broker's address, and the broker by its name.
            assert_eq!(r.queue.broker_name, broker_name, "sync {i}: {r:?}");
            sent.insert(body);
        }
        let futs: Vec<_> = (0..10)
            .map(|i| p.send_async(Message::new(TOPIC, format!("async-{i}"))))
            .collect();
        for (i, f) in futs.into_iter().enumerate() {
            f.await.unwrap_or_else(|e| panic!("async {i}: {e}"));
            sent.insert(format!("async-{i}"));
        }
        for i in 0..10 {
            let body = format!("oneway-{i}");
            p.send_oneway(Message::new(TOPIC, body.clone()))
                .await
                .unwrap_or_else(|e| panic!("oneway {i}: {e}"));
            sent.insert(body);
        }
        let batch: Vec<_> = (0..10)
            .map(|i| Message::new(TOPIC, format!("batch-{i}")))
            .collect();
        let r = p.send_batch(batch).await.expect("batch");
        assert_eq!(r.status, SendStatus::SendOk, "{r:?}");
        sent.extend((0..10).map(|i| format!("batch-{i}")));

        // The Java client reads what rmq sent through the proxy (from the brokers).
        let read =
            verifier_read(&cluster, TOPIC, sent.len(), Duration::from_secs(5)).expect("verifier");
        let java_read: BTreeSet<String> = read
            .iter()
            .map(|m| String::from_utf8_lossy(&m.body).into_owned())
            .collect();
        assert_eq!(java_read, sent, "what the Java client read back");
        let keyed = read.iter().filter(|m| m.keys.is_some()).count();
        assert_eq!(keyed, 10, "the sync sends' keys");

        // The Java client's sends through the proxy, then rmq's consumer reads everything.
        let lines = JavaProducer::new(TOPIC, 20)
            .body("java-{i}")
            .namesrv(&ns)
            .run(&cluster)
            .expect("java producer through the proxy");
        assert_eq!(lines.len(), 20);
        let mut want = sent.clone();
        want.extend((0..20).map(|i| format!("java-{i}")));
        let c = consumer(&ns, "rmq-proxy-group")
            .start()
            .await
            .expect("consumer through the proxy");
        let got = rmq_tests::read_all(&c, want.len()).await;
        assert_eq!(got, want, "what rmq's consumer read through the proxy");
        assert_eq!(c.health().last_refusal, None);
        c.shutdown().await;

        // Restarted in its group: only what came after its committed offsets.
        let c = consumer(&ns, "rmq-proxy-group")
            .start()
            .await
            .expect("consumer restarted");
        let mut later = BTreeSet::new();
        for i in 0..5 {
            let body = format!("later-{i}");
            p.send(Message::new(TOPIC, body.clone()))
                .await
                .expect("later");
            later.insert(body);
        }
        let got = rmq_tests::read_all(&c, later.len()).await;
        assert_eq!(got, later, "a restart goes on from the committed offsets");
        c.shutdown().await;
        p.shutdown().await;

        // A 4.x client writes no `bname`: the proxy refuses its offset queries, and the
        // consumer says so (it keeps trying, as Java does).
        let c = consumer(&ns, "rmq-proxy-4x")
            .version(version::V4_9_7)
            .lazy_start(true)
            .start()
            .await
            .expect("lazy consumer");
        let t0 = Instant::now();
        let refusal = loop {
            if let Some(r) = c.health().last_refusal {
                break r;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no refusal reported"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        eprintln!("{refusal:?}");
        assert_eq!(refusal.request, "QUERY_CONSUMER_OFFSET", "{refusal:?}");
        assert_eq!(refusal.code, 15, "VERSION_NOT_SUPPORTED: {refusal:?}");
        assert!(refusal.remark.contains("bname"), "{refusal:?}");
        assert_eq!(refusal.topic, TOPIC);
        assert!(c.poll(64, Duration::from_millis(500)).await.is_empty());
        c.shutdown().await;
    });
}

/// The ACL account of [`acl_through_the_proxy`] (broker, proxy and rmq).
const ACCESS_KEY: &str = "rmqProxyAccess";
const SECRET_KEY: &str = "rmqProxySecret123";

/// The keys of `rmq-proxy.json` that make the proxy authenticate its remoting clients against
/// the account the broker holds: `authenticationEnabled` with the default provider, the
/// account looked up from the broker (`ProxyAuthenticationMetadataProvider`), and the proxy's
/// own requests to the broker signed (`enableAclRpcHookForClusterMode` with
/// `innerClientAuthenticationCredentials`; without it the broker refuses the proxy's creation
/// of its system topic and the proxy exits at start). The proxy ignores
/// `initAuthenticationUser`: with `LocalAuthenticationMetadataProvider` its own store stays
/// empty and it refuses the right keys.
fn proxy_acl_config(access_key: &str, secret_key: &str) -> Map<String, Value> {
    let config = json!({
        "authenticationEnabled": true,
        "authenticationProvider":
            "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
        "authenticationMetadataProvider":
            "org.apache.rocketmq.proxy.auth.ProxyAuthenticationMetadataProvider",
        "innerClientAuthenticationCredentials":
            json!({ "accessKey": access_key, "secretKey": secret_key }).to_string(),
        "enableAclRpcHookForClusterMode": true,
    });
    match config {
        Value::Object(map) => map,
        _ => unreachable!("a JSON object"),
    }
}

/// Authentication on the broker and on the proxy: an rmq producer with the account's keys sends
/// through the proxy and an rmq consumer with them reads everything back through it; a producer
/// with a wrong secret is refused with the typed authentication error and stores nothing. The
/// proxy refuses it at its route lookup already (GET_ROUTEINFO_BY_TOPIC answered with code 1,
/// "check signature failed."), before any send.
#[test]
fn acl_through_the_proxy() {
    let t0 = Instant::now();
    let options = ClusterOptions::default().with_acl(Version::V5_3_3, ACCESS_KEY, SECRET_KEY);
    let proxy_options = ProxyOptions {
        config: proxy_acl_config(ACCESS_KEY, SECRET_KEY),
        ..ProxyOptions::default()
    };
    let (cluster, proxy) =
        cluster_with_proxy_using(options, proxy_options, Some((ACCESS_KEY, SECRET_KEY)));
    let broker_name = cluster.broker_name(0);
    let ns = proxy.to_string();
    let rt = rmq_tests::runtime();
    rt.block_on(async {
        let p = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-proxy-acl")
            .acl(ACCESS_KEY, SECRET_KEY, None)
            .start()
            .await
            .expect("producer");
        let mut sent = BTreeSet::new();
        for i in 0..20 {
            let body = format!("acl-{i}");
            let r = p
                .send(Message::new(TOPIC, body.clone()))
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "signed send {i} through the proxy: {e:?}\n{}",
                        cluster.log_tail(40)
                    )
                });
            assert_eq!(r.status, SendStatus::SendOk, "send {i}: {r:?}");
            assert_eq!(r.queue.broker_name, broker_name, "send {i}: {r:?}");
            sent.insert(body);
        }

        // A wrong secret: the proxy refuses it (it authenticates every request, the route
        // lookup included), and nothing of it is stored. Its errors are checked last, once the
        // signed consumer showed what the topic holds.
        let bad = Producer::builder()
            .namesrv_addr(&ns)
            .producer_group("rmq-proxy-acl-bad")
            .acl(ACCESS_KEY, "not-the-secret", None)
            .send_msg_timeout(Duration::from_secs(5))
            .start()
            .await
            .expect("producer with a wrong secret");
        let mut refused = Vec::new();
        for i in 0..2 {
            let t = Instant::now();
            let e = bad
                .send(Message::new(TOPIC, format!("refused-{i}")))
                .await
                .expect_err("the proxy must refuse a wrong secret");
            eprintln!(
                "wrong secret through the proxy: {e} ({e:?}, {:?})",
                t.elapsed()
            );
            refused.push(e);
        }
        assert_eq!(bad.counters().sent, 0);
        bad.shutdown_timeout(Duration::from_millis(500)).await;

        let c = consumer(&ns, "rmq-proxy-acl-group")
            .acl(ACCESS_KEY, SECRET_KEY, None)
            .start()
            .await
            .expect("signed consumer through the proxy");
        let got = rmq_tests::read_all(&c, sent.len()).await;
        assert_eq!(
            got, sent,
            "what the signed consumer read through the proxy (the refused sends stored nothing)"
        );
        assert_eq!(c.health().last_refusal, None);
        c.shutdown().await;
        p.shutdown().await;

        let audit = cluster
            .run_dir()
            .join("proxy/home/logs/rocketmqlogs/auth_audit.log");
        let audit = std::fs::read_to_string(&audit).unwrap_or_default();
        for e in &refused {
            assert!(
                matches!(e.kind(), SendErrorKind::Authentication { .. }),
                "expected an authentication error, got {e:?}; the proxy's auth_audit.log:\n{audit}"
            );
            assert!(!e.is_retryable(), "{e:?}");
        }
    });
    eprintln!("acl_through_the_proxy took {:?}", t0.elapsed());
}
