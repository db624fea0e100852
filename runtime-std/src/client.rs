//! What the [`crate::Producer`] and the [`crate::consumer::Consumer`] share: the client id,
//! the connection [`Pool`] (built with the TLS and ACL options, and the client's
//! [`Counters`]), the NameServer cursor and the route request with failover, the broker-name →
//! master-address table, heartbeats to every master and unregistering at shutdown.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use bytes::Bytes;
use rmq_core::producer::{CLIENT_API_TIMEOUT, HeartbeatFlavor, NamesrvCursor, write_client_id};
use rmq_core::retry::TransportError;
use rmq_core::route::{MASTER_ID, TopicRoute};
use rmq_core::time::Duration;
use rmq_core::wire::headers::{
    GetRouteInfoRequestHeader, HeartbeatRequestHeader, UnregisterClientRequestHeader,
};
use rmq_core::wire::{CommandRepr, ExtFields, RequestCode, version};
use tokio::sync::mpsc;
use tracing::debug;

use crate::clock;
use crate::config::SecurityConfig;
use crate::conn::{Conn, Encoding, Pool, Response, ServerRequest};
use crate::shared::Counters;
use crate::sync::{Mutex, lock};

/// The session of one producer or consumer with its NameServers and brokers.
pub(crate) struct Client {
    /// `ip@instanceName`.
    pub(crate) client_id: String,
    pub(crate) enc: Encoding,
    pub(crate) pool: Pool,
    pub(crate) counters: Arc<Counters>,
    namesrv_addr: Vec<String>,
    namesrv: Mutex<NamesrvCursor>,
    /// Broker name → master address.
    masters: Mutex<HashMap<String, String>>,
}

impl Client {
    /// A client of `namesrv_addr`; connections carry `security` and, with `server_requests`,
    /// forward the requests brokers send to us.
    pub(crate) fn new(
        namesrv_addr: &[String],
        instance_name: &str,
        enc: Encoding,
        max_in_flight: usize,
        security: &SecurityConfig,
        server_requests: Option<mpsc::UnboundedSender<ServerRequest>>,
    ) -> Client {
        let ip = local_ip(namesrv_addr);
        let counters = Arc::new(Counters::new());
        Client {
            client_id: client_id(ip, instance_name),
            enc,
            pool: Pool::new(max_in_flight, counters.clone())
                .with_server_requests(server_requests)
                .with_acl(security.acl.clone())
                .with_tls(security.tls.clone(), namesrv_addr),
            counters,
            namesrv_addr: namesrv_addr.to_vec(),
            namesrv: Mutex::new(NamesrvCursor::new(clock::random_u32())),
            masters: Mutex::new(HashMap::new()),
        }
    }

    /// One request to `addr`, answered within `timeout`; `None` (logged) if it failed.
    pub(crate) async fn request<E: ExtFields>(
        &self,
        addr: &str,
        code: RequestCode,
        ext: Option<E>,
        body: Bytes,
        timeout: Duration,
    ) -> Option<Response> {
        let r = match self.pool.get(addr).await {
            Ok(conn) => self.exchange(&conn, code, ext, body, timeout).await,
            Err(e) => Err(e),
        };
        r.map_err(|e| debug!(addr, code = code.0, ?e, "request failed"))
            .ok()
    }

    async fn exchange<E: ExtFields>(
        &self,
        conn: &Conn,
        code: RequestCode,
        ext: Option<E>,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        let (v, deadline) = (self.enc.version, clock::now() + timeout);
        let build = |op| CommandRepr::request(code, op, v, ext);
        conn.request(self.enc, build, body, deadline).await
    }

    /// GET_ROUTEINFO_BY_TOPIC, trying each NameServer once, starting with the sticky one; a
    /// server that fails moves the cursor on (a timed-out connection is closed). `None` when
    /// none answered.
    pub(crate) async fn route_request(&self, topic: &str) -> Option<Response> {
        let addrs = &self.namesrv_addr;
        for _ in 0..addrs.len() {
            let addr = addrs.get(lock(&self.namesrv).current(addrs.len()))?;
            let hdr = GetRouteInfoRequestHeader {
                topic,
                accept_standard_json_only: None,
            };
            let code = RequestCode::GET_ROUTEINFO_BY_TOPIC;
            let r = match self.pool.get(addr).await {
                Ok(conn) => {
                    let r = self.exchange(&conn, code, Some(hdr), Bytes::new(), CLIENT_API_TIMEOUT);
                    let r = r.await;
                    if r.as_ref().is_err_and(|e| *e == TransportError::TimedOut) {
                        conn.close();
                    }
                    r
                }
                Err(e) => Err(e),
            };
            match r {
                Ok(r) => return Some(r),
                Err(e) => debug!(addr, ?e, "NameServer request failed"),
            }
            lock(&self.namesrv).failed();
        }
        None
    }

    /// Records the master address of every broker of `route`.
    pub(crate) fn note_masters<const B: usize, const S: usize>(&self, route: &TopicRoute<B, S>) {
        let mut masters = lock(&self.masters);
        for b in route.brokers() {
            if let Some(a) = b.addr(MASTER_ID) {
                masters.insert(b.name().to_owned(), a.to_owned());
            }
        }
    }

    /// The master address of broker `name`, if a route named it.
    pub(crate) fn master(&self, name: &str) -> Option<String> {
        lock(&self.masters).get(name).cloned()
    }

    fn masters(&self) -> Vec<String> {
        lock(&self.masters).values().cloned().collect()
    }

    /// The heartbeat body format the configured version calls for.
    pub(crate) fn heartbeat_flavor(&self) -> HeartbeatFlavor {
        if self.enc.version >= version::V5_0_0 {
            HeartbeatFlavor::V5
        } else {
            HeartbeatFlavor::V4
        }
    }

    /// Sends HEART_BEAT with `body` to every known master.
    pub(crate) async fn heartbeat_all(&self, body: Bytes) {
        let ext =
            (self.heartbeat_flavor() == HeartbeatFlavor::V5).then_some(HeartbeatRequestHeader {});
        for addr in self.masters() {
            let r = self
                .request(
                    &addr,
                    RequestCode::HEART_BEAT,
                    ext,
                    body.clone(),
                    CLIENT_API_TIMEOUT,
                )
                .await;
            debug!(
                addr,
                ok = matches!(&r, Some(x) if x.code() == 0),
                "heartbeat"
            );
        }
    }

    /// Unregisters the group from every known master, then closes every connection.
    pub(crate) async fn shutdown(
        &self,
        producer_group: Option<&str>,
        consumer_group: Option<&str>,
    ) {
        let hdr = UnregisterClientRequestHeader {
            client_id: &self.client_id,
            producer_group,
            consumer_group,
        };
        for addr in self.masters() {
            let r = self
                .request(
                    &addr,
                    RequestCode::UNREGISTER_CLIENT,
                    Some(hdr),
                    Bytes::new(),
                    CLIENT_API_TIMEOUT,
                )
                .await;
            debug!(
                addr,
                ok = matches!(&r, Some(x) if x.code() == 0),
                "unregister"
            );
        }
        self.pool.close_all();
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
