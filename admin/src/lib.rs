//! Operator requests for Apache RocketMQ, as `mqadmin` makes them (see [`Admin`]): the
//! answers' bodies are read by [`rmq_core::ops`], the bytes move over
//! [`rmq_std::request_once`]; this crate only says what to ask whom.

#![warn(missing_docs)]

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rmq_core::acl::RequestError;
use rmq_core::message::OffsetMsgId;
use rmq_core::ops::{self, BodyError};
use rmq_core::route::{MASTER_ID, TopicRoute};
use rmq_core::wire::headers::{
    CreateTopicRequestHeader, GetConsumeStatsRequestHeader, GetRouteInfoRequestHeader,
    QueryMessageRequestHeader, ResetOffsetRequestHeader, SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader, ViewMessageRequestHeader,
};
use rmq_core::wire::{Chain, CommandHeader, ExtFields, Frame, RequestCode, ResponseCode};
use rmq_std::consumer::ConsumedMessage;
use rmq_std::{AclConfig, ConnectionError, SecurityConfig};

/// What an [`Admin`] is built from.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AdminConfig {
    /// NameServer addresses, asked in order until one answers.
    pub namesrv_addr: Vec<String>,
    /// ACL credentials and TLS, as the producer's.
    pub security: SecurityConfig,
    /// How long one request waits for its connection and answer (default 10 s).
    pub request_timeout: Duration,
}

/// Builds an [`Admin`].
#[derive(Debug)]
pub struct AdminBuilder {
    cfg: AdminConfig,
}

impl AdminBuilder {
    /// NameServer addresses; `a:9876;b:9876` is split on `;` (call again to add more).
    #[must_use]
    pub fn namesrv_addr(mut self, addrs: &str) -> Self {
        let addrs = addrs.split(';').map(str::trim).filter(|s| !s.is_empty());
        self.cfg.namesrv_addr.extend(addrs.map(str::to_owned));
        self
    }

    /// Signs every request with ACL 1.0 credentials (as `rmq_std::ProducerBuilder::acl`).
    #[must_use]
    pub fn acl(mut self, access_key: &str, secret_key: &str, security_token: Option<&str>) -> Self {
        self.cfg.security.acl = Some(AclConfig {
            access_key: access_key.to_owned(),
            secret_key: secret_key.to_owned(),
            security_token: security_token.map(str::to_owned),
        });
        self
    }

    /// Connects over TLS (to NameServers too if [`rmq_std::TlsConfig::name_server_too`]).
    #[must_use]
    pub fn tls(mut self, tls: rmq_std::TlsConfig) -> Self {
        self.cfg.security.tls = Some(tls);
        self
    }

    /// How long one request waits for its connection and answer (default 10 s).
    #[must_use]
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.cfg.request_timeout = t;
        self
    }

    /// The client.
    pub fn build(self) -> Admin {
        Admin {
            cfg: self.cfg,
            opaque: AtomicI32::new(1),
        }
    }
}

/// An operator's client: cluster and topic lists, topic creation, a group's progress, offset
/// resets. Each request goes on a connection of its own, to a NameServer or to a broker named
/// by address, as `mqadmin` does.
///
/// ```no_run
/// # async fn f() -> Result<(), rmq_admin::AdminError> {
/// let admin = rmq_admin::Admin::builder().namesrv_addr("127.0.0.1:9876").build();
/// for b in admin.cluster().await? {
///     println!("{} {} {} {}", b.cluster, b.broker, b.id, b.addr);
/// }
/// let spec = rmq_admin::TopicSpec::queues(4, 4);
/// admin.create_topic("DefaultCluster", "orders", &spec).await?;
/// for q in admin.progress("order-workers", Some("orders")).await? {
///     println!("{} {} lag {}", q.broker, q.queue_id, q.lag());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Admin {
    cfg: AdminConfig,
    opaque: AtomicI32,
}

/// An answer.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Reply {
    /// Its response code.
    pub code: ResponseCode,
    /// Its remark (the broker's reason on an error).
    pub remark: Option<String>,
    /// Its body.
    pub body: Bytes,
    /// Its ext fields (the response header's), in order.
    pub ext: Vec<(String, String)>,
}

impl Reply {
    /// The value of an ext field.
    pub fn ext_field(&self, key: &str) -> Option<&str> {
        self.ext
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Why an operator request failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum AdminError {
    /// No NameServer address is configured.
    NoNameServer,
    /// The connection failed or was lost before the answer.
    Connection(ConnectionError),
    /// No answer from `addr` within the request timeout.
    Timeout(String),
    /// `addr` answered with an error code.
    Refused {
        /// Who answered.
        addr: String,
        /// The code.
        code: ResponseCode,
        /// The remark.
        remark: String,
    },
    /// The request could not be written (credentials, size).
    Request(RequestError),
    /// The answer could not be read.
    Body(String, BodyError),
    /// The topic has no route (or a route this client cannot hold).
    NoRoute(String),
    /// `addr` answered with a frame (or a message) that cannot be read.
    Malformed(String),
    /// Not a message id of this kind.
    BadId(String),
}

impl std::fmt::Display for AdminError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminError::NoNameServer => f.write_str("no NameServer address configured"),
            AdminError::Connection(_) => f.write_str("connection failed"),
            AdminError::Timeout(a) => write!(f, "{a} did not answer in time"),
            AdminError::Refused { addr, code, remark } => {
                write!(f, "{addr} refused the request ({code:?}): {remark}")
            }
            AdminError::Request(_) => f.write_str("cannot write the request"),
            AdminError::Body(a, _) => write!(f, "cannot read the answer of {a}"),
            AdminError::NoRoute(t) => write!(f, "topic {t} has no route"),
            AdminError::Malformed(a) => write!(f, "{a} answered with something unreadable"),
            AdminError::BadId(id) => {
                write!(f, "{id:?} is not an offsetMsgId (32 or 56 hex digits)")
            }
        }
    }
}

impl std::error::Error for AdminError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AdminError::Connection(e) => Some(e),
            AdminError::Request(e) => Some(e),
            AdminError::Body(_, e) => Some(e),
            _ => None,
        }
    }
}

/// One address of a cluster ([`Admin::cluster`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterBroker {
    /// Cluster name.
    pub cluster: String,
    /// Broker name.
    pub broker: String,
    /// 0 for the master, >= 1 for a slave.
    pub id: i64,
    /// `host:port`.
    pub addr: String,
}

/// A topic's shape ([`Admin::create_topic`]); the defaults are `mqadmin updateTopic`'s.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicSpec {
    /// Read queues per broker (8).
    pub read_queues: i32,
    /// Write queues per broker (8).
    pub write_queues: i32,
    /// Permission bits: 2 write, 4 read (6).
    pub perm: i32,
    /// An ordered topic (false).
    pub order: bool,
}

impl Default for TopicSpec {
    fn default() -> Self {
        TopicSpec {
            read_queues: 8,
            write_queues: 8,
            perm: 6,
            order: false,
        }
    }
}

impl TopicSpec {
    /// `read` and `write` queues per broker, readable and writable, not ordered.
    pub fn queues(read: i32, write: i32) -> Self {
        TopicSpec {
            read_queues: read,
            write_queues: write,
            ..Self::default()
        }
    }
}

/// One queue's progress in a group ([`Admin::progress`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// Topic.
    pub topic: String,
    /// Broker name.
    pub broker: String,
    /// Queue id.
    pub queue_id: i32,
    /// The queue's max offset.
    pub broker_offset: i64,
    /// The group's committed offset.
    pub consumer_offset: i64,
    /// Store time of the last consumed message, Unix ms (0: none).
    pub last_timestamp: i64,
}

impl Progress {
    /// Messages not consumed yet.
    pub fn lag(&self) -> i64 {
        (self.broker_offset - self.consumer_offset).max(0)
    }
}

impl Admin {
    /// A builder with no NameServer and no security.
    pub fn builder() -> AdminBuilder {
        AdminBuilder {
            cfg: AdminConfig {
                namesrv_addr: Vec::new(),
                security: SecurityConfig::default(),
                request_timeout: Duration::from_secs(10),
            },
        }
    }

    /// Sends one request to `addr` (a NameServer's when `name_server`: TLS only if it applies
    /// to NameServers) on a new connection and returns its answer, whatever its code.
    ///
    /// # Errors
    /// [`AdminError::Connection`], [`AdminError::Timeout`], [`AdminError::Request`].
    pub async fn call<E: ExtFields>(
        &self,
        addr: &str,
        name_server: bool,
        code: RequestCode,
        ext: E,
        body: &[u8],
    ) -> Result<Reply, AdminError> {
        let opaque = self.opaque.fetch_add(1, Ordering::Relaxed);
        let frame = rmq_std::request_frame(code, opaque, ext, body, &self.cfg.security)
            .map_err(AdminError::Request)?;
        let sent = rmq_std::request_once(addr, &self.cfg.security, name_server, frame, opaque);
        match tokio::time::timeout(self.cfg.request_timeout, sent).await {
            Err(_) => Err(AdminError::Timeout(addr.to_owned())),
            Ok(Err(e)) => Err(AdminError::Connection(e)),
            Ok(Ok(f)) => reply(&f).ok_or_else(|| AdminError::Malformed(addr.to_owned())),
        }
    }

    /// [`Admin::call`] that wants SUCCESS: any other code is [`AdminError::Refused`].
    async fn ok<E: ExtFields>(
        &self,
        addr: &str,
        name_server: bool,
        code: RequestCode,
        ext: E,
    ) -> Result<Bytes, AdminError> {
        let r = self.call(addr, name_server, code, ext, &[]).await?;
        if r.code != ResponseCode::SUCCESS {
            return Err(AdminError::Refused {
                addr: addr.to_owned(),
                code: r.code,
                remark: r.remark.unwrap_or_default(),
            });
        }
        Ok(r.body)
    }

    /// Asks the NameServers in order; the first answer wins (a refusal too).
    async fn ask_name_server<E: ExtFields + Copy>(
        &self,
        code: RequestCode,
        ext: E,
    ) -> Result<(String, Bytes), AdminError> {
        let mut last = AdminError::NoNameServer;
        for addr in &self.cfg.namesrv_addr {
            match self.ok(addr, true, code, ext).await {
                Ok(b) => return Ok((addr.clone(), b)),
                Err(e @ AdminError::Refused { .. }) => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Every broker address of every cluster (GET_BROKER_CLUSTER_INFO), as `mqadmin
    /// clusterList` lists them.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn cluster(&self) -> Result<Vec<ClusterBroker>, AdminError> {
        let (ns, body) = self
            .ask_name_server(RequestCode::GET_BROKER_CLUSTER_INFO, ())
            .await?;
        let mut out = Vec::new();
        ops::read_cluster_info(&body, &mut |b| {
            out.push(ClusterBroker {
                cluster: b.cluster.to_owned(),
                broker: b.broker.to_owned(),
                id: b.id,
                addr: b.addr.to_owned(),
            });
        })
        .map_err(|e| AdminError::Body(ns, e))?;
        Ok(out)
    }

    /// A broker's runtime statistics (GET_BROKER_RUNTIME_INFO, the table `mqadmin
    /// clusterList` reads): `brokerVersionDesc`, `putTps` and `getTransferredTps` (4.9:
    /// `getTransferedTps`; each "10 s, 1 min, 10 min" rates), queue sizes, disk ratios...
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn broker_runtime(&self, addr: &str) -> Result<BTreeMap<String, String>, AdminError> {
        let body = self
            .ok(addr, false, RequestCode::GET_BROKER_RUNTIME_INFO, ())
            .await?;
        let mut out = BTreeMap::new();
        ops::read_kv_table(&body, &mut |k, v| {
            out.insert(k.to_owned(), v.to_owned());
        })
        .map_err(|e| AdminError::Body(addr.to_owned(), e))?;
        Ok(out)
    }

    /// Every topic the NameServer knows (GET_ALL_TOPIC_LIST_FROM_NAMESERVER).
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn topics(&self) -> Result<Vec<String>, AdminError> {
        let (ns, body) = self
            .ask_name_server(RequestCode::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, ())
            .await?;
        let mut out = Vec::new();
        ops::read_topic_list(&body, &mut |t| out.push(t.to_owned()))
            .map_err(|e| AdminError::Body(ns, e))?;
        out.sort();
        Ok(out)
    }

    /// Creates (or updates) `topic` on every master of `cluster` (UPDATE_AND_CREATE_TOPIC, as
    /// `mqadmin updateTopic -c`); returns the brokers that accepted it.
    ///
    /// # Errors
    /// [`AdminError::NoRoute`] when the cluster has no master; the first broker's refusal.
    pub async fn create_topic(
        &self,
        cluster: &str,
        topic: &str,
        spec: &TopicSpec,
    ) -> Result<Vec<String>, AdminError> {
        let masters = self.masters(Some(cluster)).await?;
        if masters.is_empty() {
            return Err(AdminError::NoRoute(format!("cluster {cluster}")));
        }
        let header = CreateTopicRequestHeader {
            topic,
            default_topic: "TBW102",
            read_queue_nums: spec.read_queues,
            write_queue_nums: spec.write_queues,
            perm: spec.perm,
            topic_filter_type: "SINGLE_TAG",
            topic_sys_flag: Some(0),
            order: spec.order,
        };
        for (_, addr) in &masters {
            self.ok(addr, false, RequestCode::UPDATE_AND_CREATE_TOPIC, header)
                .await?;
        }
        Ok(masters.into_iter().map(|(name, _)| name).collect())
    }

    /// Has `group` read `topic` by POP (`pop`) or by pull on every master of `cluster`
    /// (SET_MESSAGE_REQUEST_MODE, as `mqadmin setConsumeMode -c`; RocketMQ 5.x): the mode the
    /// brokers hand out to Java push consumers whose client rebalance is off.
    /// `pop_share_queue_num` -1 gives every consumer every queue. Every master is asked, as
    /// mqadmin does, whatever the others answered: each broker's name with its outcome
    /// (a refusal: TOPIC_NOT_EXIST, SUBSCRIPTION_GROUP_NOT_EXIST, NO_PERMISSION for a
    /// `%RETRY%` topic; a 4.9 broker: REQUEST_CODE_NOT_SUPPORTED).
    ///
    /// # Errors
    /// [`AdminError::NoRoute`] when the cluster has no master; the cluster lookup's errors.
    pub async fn set_consume_mode(
        &self,
        cluster: &str,
        topic: &str,
        group: &str,
        pop: bool,
        pop_share_queue_num: i32,
    ) -> Result<Vec<(String, Result<(), AdminError>)>, AdminError> {
        let masters = self.masters(Some(cluster)).await?;
        if masters.is_empty() {
            return Err(AdminError::NoRoute(format!("cluster {cluster}")));
        }
        let len = 80 + rmq_core::json::json_str_len(topic) + rmq_core::json::json_str_len(group);
        let mut body = vec![0u8; len];
        let n = ops::write_request_mode(topic, group, pop, pop_share_queue_num, &mut body)
            .map_err(|_| AdminError::Malformed(format!("{topic} {group}")))?;
        let code = RequestCode::SET_MESSAGE_REQUEST_MODE;
        let mut out = Vec::with_capacity(masters.len());
        for (name, addr) in masters {
            let r = match self.call(&addr, false, code, (), &body[..n]).await {
                Ok(r) if r.code == ResponseCode::SUCCESS => Ok(()),
                Ok(r) => Err(AdminError::Refused {
                    addr,
                    code: r.code,
                    remark: r.remark.unwrap_or_default(),
                }),
                Err(e) => Err(e),
            };
            out.push((name, r));
        }
        Ok(out)
    }

    /// The masters of `cluster` (all clusters when `None`): `(broker name, address)`.
    async fn masters(&self, cluster: Option<&str>) -> Result<Vec<(String, String)>, AdminError> {
        let all = self.cluster().await?;
        Ok(all
            .into_iter()
            .filter(|b| b.id == MASTER_ID && cluster.is_none_or(|c| c == b.cluster))
            .map(|b| (b.broker, b.addr))
            .collect())
    }

    /// Where `group` stands on each queue it has offsets for (GET_CONSUME_STATS asked of every
    /// master, as `mqadmin consumerProgress -g` does), `topic` only when given; sorted by
    /// topic, broker and queue.
    ///
    /// # Errors
    /// [`AdminError`]; a broker that does not know the group answers with no queue.
    pub async fn progress(
        &self,
        group: &str,
        topic: Option<&str>,
    ) -> Result<Vec<Progress>, AdminError> {
        let mut out = Vec::new();
        let header = GetConsumeStatsRequestHeader {
            consumer_group: group,
            topic,
        };
        for (_, addr) in self.masters(None).await? {
            let body = match self
                .ok(&addr, false, RequestCode::GET_CONSUME_STATS, header)
                .await
            {
                Err(AdminError::Refused { code, .. })
                    if code == ResponseCode::SUBSCRIPTION_GROUP_NOT_EXIST =>
                {
                    continue;
                }
                r => r?,
            };
            ops::read_consume_stats(&body, &mut |q| {
                out.push(Progress {
                    topic: q.queue.topic.to_owned(),
                    broker: q.queue.broker.to_owned(),
                    queue_id: q.queue.queue_id,
                    broker_offset: q.broker_offset,
                    consumer_offset: q.consumer_offset,
                    last_timestamp: q.last_timestamp,
                });
            })
            .map_err(|e| AdminError::Body(addr.clone(), e))?;
        }
        out.sort_by(|a, b| {
            (&a.topic, &a.broker, a.queue_id).cmp(&(&b.topic, &b.broker, b.queue_id))
        });
        Ok(out)
    }

    /// Moves `group`'s offsets on `topic` to the first message stored at or after `timestamp`
    /// (Unix ms) on every master of the topic's route (INVOKE_BROKER_TO_RESET_OFFSET, as
    /// `mqadmin resetOffsetByTime`): the offsets set, per queue. Running consumers of the
    /// group are told by their brokers and restart from there.
    ///
    /// # Errors
    /// [`AdminError::NoRoute`]; the first broker's refusal.
    pub async fn reset_offset(
        &self,
        group: &str,
        topic: &str,
        timestamp: i64,
    ) -> Result<Vec<(String, i32, i64)>, AdminError> {
        let masters = self.route_masters(topic).await?;
        let header = ResetOffsetRequestHeader {
            topic,
            group,
            timestamp,
            is_force: true,
        };
        let mut out = Vec::new();
        for (broker, addr, queues) in &masters {
            let answer = self
                .ok(
                    addr,
                    false,
                    RequestCode::INVOKE_BROKER_TO_RESET_OFFSET,
                    header,
                )
                .await;
            let body = match answer {
                // 4.9 resets through the group's online consumers only. With none, the offsets
                // are set here queue by queue, as mqadmin's fallback (resetOffsetByTimeOld).
                Err(AdminError::Refused { code, .. })
                    if code == ResponseCode::CONSUMER_NOT_ONLINE =>
                {
                    for queue_id in 0..*queues {
                        let offset = self.set_offset(addr, group, topic, queue_id, timestamp);
                        out.push((broker.clone(), queue_id, offset.await?));
                    }
                    continue;
                }
                r => r?,
            };
            ops::read_reset_offsets(&body, &mut |q, o| {
                out.push((q.broker.to_owned(), q.queue_id, o));
            })
            .map_err(|e| AdminError::Body(addr.clone(), e))?;
        }
        out.sort();
        Ok(out)
    }

    /// Moves `group` on one queue to the first message stored at or after `timestamp`
    /// (SEARCH_OFFSET_BY_TIMESTAMP, then UPDATE_CONSUMER_OFFSET); returns the offset.
    async fn set_offset(
        &self,
        addr: &str,
        group: &str,
        topic: &str,
        queue_id: i32,
        timestamp: i64,
    ) -> Result<i64, AdminError> {
        let search = SearchOffsetRequestHeader {
            topic,
            queue_id,
            timestamp,
        };
        let code = RequestCode::SEARCH_OFFSET_BY_TIMESTAMP;
        let r = self.call(addr, false, code, search, &[]).await?;
        let offset = r.ext_field("offset").and_then(|o| o.parse().ok());
        let offset = match (r.code, offset) {
            (ResponseCode::SUCCESS, Some(o)) => o,
            (code, _) => {
                let (addr, remark) = (addr.to_owned(), r.remark.unwrap_or_default());
                return Err(AdminError::Refused { addr, code, remark });
            }
        };
        let update = UpdateConsumerOffsetRequestHeader {
            consumer_group: group,
            topic,
            queue_id,
            commit_offset: offset,
        };
        self.ok(addr, false, RequestCode::UPDATE_CONSUMER_OFFSET, update)
            .await?;
        Ok(offset)
    }

    /// The masters of `topic`'s route: `(broker name, address, read queues)`.
    async fn route_masters(&self, topic: &str) -> Result<Vec<(String, String, i32)>, AdminError> {
        let route = GetRouteInfoRequestHeader {
            topic,
            accept_standard_json_only: Some(true),
        };
        let (_, body) = self
            .ask_name_server(RequestCode::GET_ROUTEINFO_BY_TOPIC, route)
            .await
            .map_err(|e| match e {
                AdminError::Refused { code, .. } if code == ResponseCode::TOPIC_NOT_EXIST => {
                    AdminError::NoRoute(topic.to_owned())
                }
                e => e,
            })?;
        let route = TopicRoute::<64, 8192>::parse(&body)
            .map_err(|_| AdminError::NoRoute(topic.to_owned()))?;
        let queues = |name: &str| {
            let q = route.queue_datas().find(|q| q.broker_name == name);
            q.map_or(0, |q| q.read_queue_nums)
        };
        Ok(route
            .brokers()
            .filter_map(|b| {
                let addr = b.addr(MASTER_ID)?.to_owned();
                Some((b.name().to_owned(), addr, queues(b.name())))
            })
            .collect())
    }

    /// The messages of `topic` indexed under `key` and stored within `[begin, end]` (Unix
    /// ms), at most `max` per broker: QUERY_MESSAGE asked of every master of the topic, as
    /// `mqadmin queryMsgByKey` does. `unique` looks `key` up as a producer's message id
    /// (`UNIQ_KEY`); otherwise it is one of the messages' `KEYS`. Index hash collisions are
    /// filtered out. Messages are indexed a moment after they are stored.
    ///
    /// # Errors
    /// [`AdminError::NoRoute`]; the first broker's refusal other than "not found".
    pub async fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        unique: bool,
        max: i32,
        (begin, end): (i64, i64),
    ) -> Result<Vec<ConsumedMessage>, AdminError> {
        let header = QueryMessageRequestHeader {
            topic,
            key,
            max_num: max,
            begin_timestamp: begin,
            end_timestamp: end,
        };
        let flag: &[(&str, &str)] = if unique {
            &[("_UNIQUE_KEY_QUERY", "true")]
        } else {
            &[]
        };
        let mut out = Vec::new();
        for (broker, addr, _) in self.route_masters(topic).await? {
            let ext = Chain(header, flag);
            let r = self
                .call(&addr, false, RequestCode::QUERY_MESSAGE, ext, &[])
                .await?;
            match r.code {
                ResponseCode::SUCCESS => {}
                ResponseCode::QUERY_NOT_FOUND => continue,
                code => {
                    let remark = r.remark.unwrap_or_default();
                    return Err(AdminError::Refused { addr, code, remark });
                }
            }
            out.extend(
                ConsumedMessage::decode_stored(&r.body, &broker)
                    .into_iter()
                    .filter(|m| match unique {
                        true => m.msg_id == key,
                        false => m.keys().is_some_and(|k| k.split(' ').any(|k| k == key)),
                    }),
            );
        }
        out.sort_by_key(|m| m.store_timestamp);
        Ok(out)
    }

    /// The message stored under `offset_msg_id` (the broker's id: store host and commit-log
    /// offset), read from that host (VIEW_MESSAGE_BY_ID, as `mqadmin queryMsgById`).
    ///
    /// # Errors
    /// [`AdminError::BadId`] when it is not an offsetMsgId; the store host's refusal (it has
    /// no message at that offset).
    pub async fn view_message(&self, offset_msg_id: &str) -> Result<ConsumedMessage, AdminError> {
        let id = OffsetMsgId::parse(offset_msg_id)
            .map_err(|_| AdminError::BadId(offset_msg_id.to_owned()))?;
        let addr = id.store_host.to_string();
        let header = ViewMessageRequestHeader {
            offset: id.commit_log_offset,
            topic: None,
        };
        let body = self
            .ok(&addr, false, RequestCode::VIEW_MESSAGE_BY_ID, header)
            .await?;
        let broker = match self.cluster().await {
            Ok(all) => all.into_iter().find(|b| b.addr == addr).map(|b| b.broker),
            Err(_) => None,
        };
        let broker = broker.unwrap_or_else(|| addr.clone());
        ConsumedMessage::decode_stored(&body, &broker)
            .into_iter()
            .next()
            .ok_or_else(|| AdminError::Malformed(addr))
    }
}

/// The answer in frame `f` (a response [`rmq_std::request_once`] matched).
fn reply(f: &[u8]) -> Option<Reply> {
    let frame = Frame::new_checked(f).ok()?;
    let h = CommandHeader::parse(&frame).ok()?;
    Some(Reply {
        code: h.response_code(),
        remark: h.remark().and_then(|r| r.as_str().map(str::to_owned)),
        body: Bytes::copy_from_slice(frame.body()),
        ext: h
            .ext_iter()
            .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())))
            .collect(),
    })
}
