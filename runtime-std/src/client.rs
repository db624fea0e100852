//! What the [`crate::consumer::Consumer`] asks of the core client session, through the same
//! [`Driver`] the [`crate::Producer`] uses: routes with NameServer failover, the broker table,
//! heartbeats, unregistering, ACL signing and the connections (TLS) are the session's. This
//! module only names brokers by name and turns answers into [`Response`]s.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use bytes::Bytes;
use rmq_core::producer::{HeartbeatFlavor, write_client_id};
use rmq_core::session::{self, TopicId};
use rmq_core::time::Duration;
use rmq_core::wire::{ExtFields, LanguageCode, RequestCode, SerializeType, version};
use tokio::sync::mpsc;
use tracing::debug;

use crate::clock;
use crate::config::SecurityConfig;
use crate::conn::{Response, ServerRequest};
use crate::driver::Driver;
use crate::shared::{Counters, CountersSnapshot};

/// How a consumer's client is set up.
pub(crate) struct ClientSetup<'a> {
    pub(crate) namesrv_addr: &'a [String],
    pub(crate) instance_name: &'a str,
    pub(crate) group: &'a str,
    pub(crate) version: i32,
    pub(crate) serialize_type: SerializeType,
    pub(crate) language: LanguageCode,
    pub(crate) heartbeat: std::time::Duration,
    pub(crate) security: &'a SecurityConfig,
    pub(crate) server_requests: mpsc::UnboundedSender<ServerRequest>,
}

/// A consumer's client session.
pub(crate) struct Client {
    /// `ip@instanceName`.
    pub(crate) client_id: String,
    pub(crate) driver: Driver,
    version: i32,
}

impl Client {
    /// Starts the session of a consumer.
    pub(crate) fn new(s: &ClientSetup<'_>) -> Result<Client, session::ConfigError> {
        let client_id = client_id(local_ip(s.namesrv_addr), s.instance_name);
        let mut cfg = session::Config::new(s.namesrv_addr.len(), "", &client_id);
        cfg.consumer_group = Some(s.group);
        cfg.version = s.version;
        cfg.serialize_type = s.serialize_type;
        cfg.language = s.language;
        cfg.heartbeat = Some(clock::to_core(s.heartbeat));
        cfg.seed = clock::random_u32();
        let driver = Driver::start(
            &cfg,
            s.namesrv_addr.to_vec(),
            s.security.clone(),
            1,
            Arc::new(Counters::new()),
            Some(s.server_requests.clone()),
        )?;
        Ok(Client {
            client_id,
            driver,
            version: s.version,
        })
    }

    /// One request to the master of `broker`, answered within `timeout`; `None` (logged) if
    /// the broker is unknown or the request failed.
    pub(crate) async fn request<E: ExtFields>(
        &self,
        broker: &str,
        code: RequestCode,
        ext: Option<E>,
        timeout: Duration,
    ) -> Option<Response> {
        let Some(peer) = self.driver.broker(broker) else {
            debug!(broker, code = code.0, "request to an unknown broker");
            return None;
        };
        let r = self
            .driver
            .call(peer, code, ext, Bytes::new(), clock::to_std(timeout))
            .await;
        r.map_err(|e| debug!(broker, code = code.0, ?e, "request failed"))
            .ok()
    }

    /// The subscribe queues of `topic` as `(broker name, queue id)`, looked up now; `None`
    /// when the lookup failed.
    pub(crate) async fn subscribe_queues(
        &self,
        topic: &str,
        timeout: std::time::Duration,
    ) -> Option<Vec<(String, i32)>> {
        let t: TopicId = self.driver.topic(topic).ok()?;
        if !self.driver.route(topic, true, timeout).await {
            return None;
        }
        self.driver.with(|s| {
            let qs = s.subscribe_queues(t);
            Some(
                qs.iter()
                    .filter_map(|q| Some((s.broker_name(q.broker)?.to_owned(), q.queue_id)))
                    .collect(),
            )
        })
    }

    /// The heartbeat body format the configured version calls for.
    pub(crate) fn heartbeat_flavor(&self) -> HeartbeatFlavor {
        if self.version >= version::V5_0_0 {
            HeartbeatFlavor::V5
        } else {
            HeartbeatFlavor::V4
        }
    }

    /// Sets the HEART_BEAT body the session sends to every master, and sends it now.
    pub(crate) async fn heartbeat(&self, body: Vec<u8>) {
        self.driver
            .heartbeat(body, clock::to_std(rmq_core::producer::CLIENT_API_TIMEOUT))
            .await;
    }

    /// Unregisters from every master, then closes every connection.
    pub(crate) async fn shutdown(&self) {
        self.driver
            .shutdown(clock::to_std(rmq_core::producer::CLIENT_API_TIMEOUT))
            .await;
    }

    /// Connection and response counters.
    pub(crate) fn counters(&self) -> CountersSnapshot {
        let late = self.driver.with(|s| s.stats().late_responses);
        CountersSnapshot {
            late_responses_dropped: u64::from(late),
            ..self.driver.counters().snapshot()
        }
    }
}

/// The local address that routes to the first NameServer (no packet is sent), or loopback.
pub(crate) fn local_ip(namesrv_addrs: &[String]) -> IpAddr {
    let namesrv = namesrv_addrs
        .first()
        .map_or("127.0.0.1:9876", |s| s.as_str());
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect(namesrv)?;
            s.local_addr()
        })
        .map(|a| a.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// The client id (`ip@instanceName`, core `write_client_id`).
pub(crate) fn client_id(ip: IpAddr, instance_name: &str) -> String {
    let mut idbuf = [0u8; 512];
    write_client_id(ip, instance_name, &mut idbuf)
        .ok()
        .and_then(|n| std::str::from_utf8(&idbuf[..n]).ok().map(str::to_owned))
        .unwrap_or_else(|| format!("{ip}@{instance_name}"))
}
