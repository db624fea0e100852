//! NameServer discovery from an HTTP endpoint (`namesrv_domain`, Java's
//! `rocketmq.namesrv.domain`): a local HTTP server serves the address list the way Java's
//! `DefaultTopAddressing` reads it (`GET /rocketmq/<subgroup>`, body `addr;addr`).
//!
//! - Against a real 5.3.3 NameServer and broker: the producer starts on the list served (the
//!   NameServer behind a recording relay), sends, and, once the list names the NameServer
//!   itself, its next route lookup goes there: nothing more passes the relay.
//! - Without a broker: an endpoint that is down, answers 404 or serves a blank list fails the
//!   start with `ConfigError::Discovery`, typed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmq_std::{ConfigError, DiscoveryError, Message, NamesrvDomain, Producer};
use rmq_tests::broker::{Cluster, ClusterOptions, Version};
use rmq_tests::relay::{Direction, Relay};

/// A tiny HTTP server: answers `GET /rocketmq/nsaddr` with `status` and the current `list`.
struct ListServer {
    addr: SocketAddr,
    list: Arc<Mutex<(u16, String)>>,
    asked: Arc<AtomicUsize>,
}

impl ListServer {
    fn start(status: u16, list: &str) -> ListServer {
        Self::start_with(status, list, false)
    }

    /// With `hold`, every connection stays open after the answer (as a keep-alive server's).
    fn start_with(status: u16, list: &str, hold: bool) -> ListServer {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().unwrap();
        let list = Arc::new(Mutex::new((status, list.to_owned())));
        let asked = Arc::new(AtomicUsize::new(0));
        let (shared, count) = (list.clone(), asked.clone());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                let mut req = Vec::new();
                let mut buf = [0u8; 512];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                assert!(
                    req.starts_with(b"GET /rocketmq/nsaddr HTTP/1.0\r\n"),
                    "{}",
                    String::from_utf8_lossy(&req)
                );
                count.fetch_add(1, Ordering::SeqCst);
                let (status, body) = shared.lock().unwrap().clone();
                let answer = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n{body}\n",
                    body.len() + 1
                );
                let _ = s.write_all(answer.as_bytes());
                if hold {
                    held.push(s);
                }
            }
        });
        ListServer { addr, list, asked }
    }

    fn serve(&self, list: &str) {
        self.list.lock().unwrap().1 = list.to_owned();
    }

    fn domain(&self) -> NamesrvDomain {
        NamesrvDomain::new(&self.addr.to_string()).refresh(Duration::from_millis(300))
    }
}

fn frames_from_client(relay: &Relay) -> usize {
    let all = relay.frames();
    all.iter()
        .filter(|f| f.dir == Direction::ClientToServer)
        .count()
}

#[test]
fn the_producer_follows_the_served_list_5_3_3() {
    let cluster = Cluster::start(Version::V5_3_3, ClusterOptions::default()).expect("cluster");
    let (first, second) = ("DiscoveredA", "DiscoveredB");
    cluster.create_topic(first, 2).expect("create topic");
    cluster.create_topic(second, 2).expect("create topic");
    let record = cluster.run_dir().join("ns-relay.bin");
    let relay = Relay::start(cluster.namesrv_addr(), &record).expect("relay");
    let http = ListServer::start(200, &format!("{};", relay.addr()));

    rmq_tests::runtime().block_on(async {
        let p = Producer::builder()
            .namesrv_domain(http.domain())
            .producer_group("pg_discovered")
            .topics([first])
            .start()
            .await
            .expect("start on the served list");
        p.send(Message::new(first, "via the relay"))
            .await
            .expect("send");
        assert!(
            frames_from_client(&relay) > 0,
            "the start's lookups did not use the list"
        );

        // The list now names the NameServer itself; wait for two fetches after the change.
        let asked = http.asked.load(Ordering::SeqCst);
        http.serve(&cluster.namesrv_addr().to_string());
        let deadline = Instant::now() + Duration::from_secs(10);
        while http.asked.load(Ordering::SeqCst) < asked + 2 {
            assert!(Instant::now() < deadline, "the list was not fetched again");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let before = frames_from_client(&relay);
        // A topic never looked up: its route comes from the new list's NameServer.
        let r = p
            .send(Message::new(second, "direct"))
            .await
            .expect("send after the change");
        assert_eq!(r.queue.topic, second);
        assert_eq!(
            frames_from_client(&relay),
            before,
            "a lookup went to the old NameServer after the list changed"
        );
        p.shutdown().await;
    });
}

/// An answer that names its length ends there: a server that keeps the connection open
/// still gives the list (not a fetch timeout).
#[test]
fn an_answer_ends_at_its_content_length() {
    rmq_tests::runtime().block_on(async {
        let open = ListServer::start_with(200, "127.0.0.1:9876;127.0.0.2:9876", true);
        let list = rmq_std::fetch_name_servers(&open.domain())
            .await
            .expect("the list, though the connection stays open");
        assert_eq!(list, ["127.0.0.1:9876", "127.0.0.2:9876"]);
    });
}

#[test]
fn a_start_without_a_list_fails_typed() {
    rmq_tests::runtime().block_on(async {
        let start = |d: NamesrvDomain| {
            Producer::builder()
                .namesrv_domain(d)
                .producer_group("pg")
                .start()
        };

        // Nobody listens there.
        let dead = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        match start(NamesrvDomain::new(&dead.to_string())).await {
            Err(ConfigError::Discovery(DiscoveryError::Io(_))) => {}
            other => panic!("expected an I/O discovery error, got {other:?}"),
        }
        let missing = ListServer::start(404, "");
        match start(missing.domain()).await {
            Err(ConfigError::Discovery(DiscoveryError::Answer(e))) => {
                assert_eq!(e, rmq_std::core::discovery::ResponseError::Status(404));
            }
            other => panic!("expected HTTP 404, got {other:?}"),
        }
        let blank = ListServer::start(200, "  ");
        match start(blank.domain()).await {
            Err(ConfigError::Discovery(DiscoveryError::Empty)) => {}
            other => panic!("expected an empty list, got {other:?}"),
        }
        // An address given wins: the endpoint is not asked.
        let unused = ListServer::start(200, "127.0.0.1:1");
        let p = Producer::builder()
            .namesrv_addr("127.0.0.1:1")
            .namesrv_domain(unused.domain())
            .producer_group("pg")
            .lazy_start(true)
            .start()
            .await
            .expect("lazy start");
        assert_eq!(unused.asked.load(Ordering::SeqCst), 0);
        p.shutdown().await;
    });
}
