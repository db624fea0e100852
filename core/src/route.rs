//! Topic routes: the body of a `GET_ROUTEINFO_BY_TOPIC` (105) response, parsed into
//! fixed-capacity storage, and the producer's publish-queue list built from it.
//!
//! The NameServer writes `TopicRouteData` in one of two JSON forms (docs/protocol/WIRE.md §7.2): standard JSON
//! when the request's `version` is at least 401 or it carries `acceptStandardJsonOnly=true`, and
//! otherwise fastjson's legacy form with **bare-number map keys**
//! (`"brokerAddrs":{0:"10.0.0.5:10911"}`). [`TopicRoute::parse`] reads both, in any key order,
//! ignoring unknown keys, so it also copes with NameServers older than 4.9.4.
//!
//! Nothing is truncated silently: a route with more brokers, queue datas, addresses or string
//! bytes than the capacities given as const generics is rejected with a typed
//! [`RouteError`].
//!
//! The publish-queue list follows Java's `topicRouteData2TopicPublishInfo` (docs/protocol/STRATEGY.md §3,
//! docs/protocol/WIRE.md §7.4):
//! 1. with an `orderTopicConf` (`brokerA:4;brokerB:8`), queues `0..n` of each entry in the
//!    order given, with no permission or master check;
//! 2. otherwise queue datas sorted by broker name (Java `String.compareTo`, UTF-16 order),
//!    keeping only writable ones whose broker has a master (id 0), each contributing queues
//!    `0..writeQueueNums`;
//! 3. for a 5.x static topic (a non-empty `topicQueueMappingByBroker`), the logical queues,
//!    each on its leading broker ([`TopicRoute::static_queues`], `route/mapping.rs`).
//!
//! # Example
//!
//! ```
//! use rmq_core::route::{PublishQueueRef, TopicRoute};
//!
//! // Legacy (pre-4.9.4) form with a bare-number key, as a NameServer sends it to old clients.
//! let body = br#"{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a",
//!   "cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a",
//!   "perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":2}]}"#;
//! let route = TopicRoute::<8, 512>::parse(body)?;
//! assert_eq!(route.master_addr("broker-a"), Some("127.0.0.1:10911"));
//! let mut queues = heapless::Vec::<PublishQueueRef, 16>::new();
//! route.publish_queues(None, &mut queues)?;
//! assert_eq!(queues.len(), 2);
//! assert_eq!(route.broker_name(queues[1].broker), Some("broker-a"));
//! assert_eq!(queues[1].queue_id, 1);
//! # Ok::<(), rmq_core::route::RouteError>(())
//! ```

use core::cmp::Ordering;
use core::fmt;

use heapless::Vec;

use crate::json::{JsonError, JsonStr, Parser};

mod mapping;

/// Permission bit: priority (unused by clients).
pub const PERM_PRIORITY: i32 = 0x8;
/// Permission bit: readable.
pub const PERM_READ: i32 = 0x4;
/// Permission bit: writable.
pub const PERM_WRITE: i32 = 0x2;
/// Permission bit: other topics may inherit from this one (TBW102).
pub const PERM_INHERIT: i32 = 0x1;
/// Broker id of the master in `brokerAddrs` (`MixAll.MASTER_ID`).
pub const MASTER_ID: i64 = 0;
/// How many addresses (master plus slaves) one broker entry may list.
pub const MAX_ADDRS_PER_BROKER: usize = 4;

/// Why a route body was rejected or a queue list could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RouteError {
    /// The body is not JSON that fastjson would accept.
    Json(JsonError),
    /// A field has the wrong type or an impossible value; names the field.
    InvalidField(&'static str),
    /// A required field is missing; names the field.
    MissingField(&'static str),
    /// More broker entries than the route's `BROKERS` capacity.
    TooManyBrokers,
    /// More queue-data entries than the route's `BROKERS` capacity.
    TooManyQueueDatas,
    /// A broker lists more than [`MAX_ADDRS_PER_BROKER`] addresses.
    TooManyAddresses,
    /// The names and addresses need more than the route's `STR` bytes.
    StringSpaceExhausted,
    /// `orderTopicConf` is not of the form `name:count;name:count`.
    InvalidOrderTopicConf,
    /// The route describes a 5.x static topic (`topicQueueMappingByBroker`): its queues are
    /// logical, and come from [`TopicRoute::static_queues`], not from the queue datas.
    StaticTopicUnsupported,
    /// The caller's queue list is too small for the route's queues.
    TooManyQueues,
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteError::Json(e) => write!(f, "route body is not valid JSON: {e}"),
            RouteError::InvalidField(n) => write!(f, "route field `{n}` has an invalid value"),
            RouteError::MissingField(n) => write!(f, "route field `{n}` is missing"),
            RouteError::TooManyBrokers => f.write_str("route has more brokers than capacity"),
            RouteError::TooManyQueueDatas => {
                f.write_str("route has more queue datas than capacity")
            }
            RouteError::TooManyAddresses => {
                f.write_str("a broker lists more addresses than supported")
            }
            RouteError::StringSpaceExhausted => {
                f.write_str("route names and addresses exceed the string capacity")
            }
            RouteError::InvalidOrderTopicConf => f.write_str("invalid orderTopicConf"),
            RouteError::StaticTopicUnsupported => {
                f.write_str("a static topic's queues come from its topicQueueMappingByBroker")
            }
            RouteError::TooManyQueues => f.write_str("queue list capacity exceeded"),
        }
    }
}

impl core::error::Error for RouteError {}

impl From<JsonError> for RouteError {
    fn from(e: JsonError) -> Self {
        RouteError::Json(e)
    }
}

/// A range of the route's string storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct StrRef {
    start: u32,
    len: u32,
}

#[derive(Clone, Debug, Default)]
struct BrokerRec {
    name: StrRef,
    cluster: StrRef,
    zone: Option<StrRef>,
    addrs: Vec<(i64, StrRef), MAX_ADDRS_PER_BROKER>,
    enable_acting_master: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct QueueRec {
    broker_name: StrRef,
    perm: i32,
    read_queue_nums: i32,
    write_queue_nums: i32,
    topic_sys_flag: i32,
}

/// A queue of the publish list: the index of its broker in the route
/// ([`TopicRoute::broker_name`], [`TopicRoute::broker_addr`]) and the queue id.
///
/// Runtimes map the broker index to their own stable broker key (for the fault table) when they
/// store the list, because indices change from one route to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PublishQueueRef {
    /// Index of the broker in this route's broker table.
    pub broker: usize,
    /// Queue id on that broker.
    pub queue_id: i32,
}

/// A parsed `TopicRouteData` in fixed-capacity storage.
///
/// `BROKERS` bounds both the broker entries and the queue-data entries; `STR` bounds the bytes of
/// all broker names, cluster names, zone names, addresses and the order-topic conf together.
#[derive(Clone, Debug)]
pub struct TopicRoute<const BROKERS: usize, const STR: usize> {
    text: Vec<u8, STR>,
    brokers: Vec<BrokerRec, BROKERS>,
    queues: Vec<QueueRec, BROKERS>,
    order_conf: Option<StrRef>,
    /// The raw JSON of a non-empty `topicQueueMappingByBroker` (a static topic).
    mapping: Option<StrRef>,
}

/// A view of one broker entry of a route.
#[derive(Clone, Copy, Debug)]
pub struct BrokerView<'r> {
    name: &'r str,
    cluster: &'r str,
    zone: Option<&'r str>,
    enable_acting_master: bool,
    addrs: &'r [(i64, StrRef)],
    text: &'r [u8],
}

impl<'r> BrokerView<'r> {
    /// The broker name (`brokerName`).
    pub fn name(&self) -> &'r str {
        self.name
    }
    /// The cluster name (`cluster`).
    pub fn cluster(&self) -> &'r str {
        self.cluster
    }
    /// The zone name (5.x `zoneName`), if any.
    pub fn zone(&self) -> Option<&'r str> {
        self.zone
    }
    /// 5.x `enableActingMaster`.
    pub fn enable_acting_master(&self) -> bool {
        self.enable_acting_master
    }
    /// The address of broker id `id` (0 = master).
    pub fn addr(&self, id: i64) -> Option<&'r str> {
        let text = self.text;
        self.addrs
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, s)| str_at(text, *s))
    }
    /// Every `(brokerId, address)` pair in the order received.
    pub fn addrs(&self) -> impl Iterator<Item = (i64, &'r str)> + 'r {
        let text = self.text;
        self.addrs.iter().map(move |(i, s)| (*i, str_at(text, *s)))
    }
}

/// A view of one queue-data entry of a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueDataView<'r> {
    /// `brokerName`.
    pub broker_name: &'r str,
    /// `perm` ([`PERM_READ`], [`PERM_WRITE`], ...).
    pub perm: i32,
    /// `readQueueNums`.
    pub read_queue_nums: i32,
    /// `writeQueueNums`.
    pub write_queue_nums: i32,
    /// `topicSysFlag`.
    pub topic_sys_flag: i32,
}

fn str_at(text: &[u8], r: StrRef) -> &str {
    let start = r.start as usize;
    let end = start.saturating_add(r.len as usize);
    // Only whole unescaped JSON strings (valid UTF-8) are stored, so this cannot fail; an empty
    // string is a safe answer should it ever.
    text.get(start..end)
        .and_then(|b| core::str::from_utf8(b).ok())
        .unwrap_or("")
}

/// Java `String.compareTo`: lexicographic over UTF-16 code units.
fn java_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

impl<const BROKERS: usize, const STR: usize> TopicRoute<BROKERS, STR> {
    /// Parses a `GET_ROUTEINFO_BY_TOPIC` response body (standard or legacy JSON).
    ///
    /// # Errors
    /// [`RouteError::Json`] for malformed JSON, [`RouteError::InvalidField`] /
    /// [`RouteError::MissingField`] for a wrong shape, and the capacity errors when the route is
    /// larger than this type's const generics.
    pub fn parse(body: &[u8]) -> Result<Self, RouteError> {
        let mut route = TopicRoute {
            text: Vec::new(),
            brokers: Vec::new(),
            queues: Vec::new(),
            order_conf: None,
            mapping: None,
        };
        let mut p = Parser::new(body);
        p.expect_object_start()?;
        while let Some(key) = p.next_key()? {
            if key.eq_str("brokerDatas") {
                if route.read_null(&mut p)? {
                    continue;
                }
                p.expect_array_start()?;
                while p.array_next()? {
                    let b = route.parse_broker(&mut p)?;
                    route
                        .brokers
                        .push(b)
                        .map_err(|_| RouteError::TooManyBrokers)?;
                }
            } else if key.eq_str("queueDatas") {
                if route.read_null(&mut p)? {
                    continue;
                }
                p.expect_array_start()?;
                while p.array_next()? {
                    let q = route.parse_queue(&mut p)?;
                    route
                        .queues
                        .push(q)
                        .map_err(|_| RouteError::TooManyQueueDatas)?;
                }
            } else if key.eq_str("orderTopicConf") {
                if let Some(s) = p.string_or_null()? {
                    let r = route.store(s)?;
                    route.order_conf = (r.len > 0).then_some(r);
                }
            } else if key.eq_str("topicQueueMappingByBroker") {
                let span = trim_ascii(p.skip_value_span()?);
                if !(span == b"{}" || span == b"null" || span.is_empty()) {
                    // Without the feature, only the fact is kept (no queues come of it).
                    #[cfg(not(feature = "static-topics"))]
                    let r = StrRef::default();
                    // A mapping too large to keep leaves the topic without queues; the
                    // rest of the route stands.
                    #[cfg(feature = "static-topics")]
                    let r = route.store_raw(span).unwrap_or_default();
                    route.mapping = Some(r);
                }
            } else {
                p.skip_value()?;
            }
        }
        p.finish()?;
        Ok(route)
    }

    /// Consumes a `null` value if one is next (fastjson leaves nulls out, but tolerate them).
    fn read_null(&mut self, p: &mut Parser<'_>) -> Result<bool, RouteError> {
        let mut probe = p.clone();
        if let Ok(crate::json::Token::Null) = probe.next_value() {
            *p = probe;
            return Ok(true);
        }
        Ok(false)
    }

    fn store(&mut self, s: JsonStr<'_>) -> Result<StrRef, RouteError> {
        let n = s.unescaped_len()?;
        let start = self.text.len();
        let end = start
            .checked_add(n)
            .ok_or(RouteError::StringSpaceExhausted)?;
        if end > STR || end > u32::MAX as usize {
            return Err(RouteError::StringSpaceExhausted);
        }
        self.text
            .resize(end, 0)
            .map_err(|_| RouteError::StringSpaceExhausted)?;
        let dst = self
            .text
            .get_mut(start..end)
            .ok_or(RouteError::StringSpaceExhausted)?;
        if let Err(e) = s.unescape_into(dst) {
            self.text.truncate(start);
            return Err(e.into());
        }
        Ok(StrRef {
            start: start as u32,
            len: n as u32,
        })
    }

    #[cfg(feature = "static-topics")]
    fn store_raw(&mut self, bytes: &[u8]) -> Result<StrRef, RouteError> {
        let start = self.text.len();
        if start + bytes.len() > u32::MAX as usize {
            return Err(RouteError::StringSpaceExhausted);
        }
        self.text
            .extend_from_slice(bytes)
            .map_err(|_| RouteError::StringSpaceExhausted)?;
        Ok(StrRef {
            start: start as u32,
            len: bytes.len() as u32,
        })
    }

    /// The stored `topicQueueMappingByBroker` JSON of a static topic.
    fn mapping_json(&self) -> Option<&[u8]> {
        let r = self.mapping?;
        self.text
            .get(r.start as usize..(r.start as usize).saturating_add(r.len as usize))
    }

    fn parse_broker(&mut self, p: &mut Parser<'_>) -> Result<BrokerRec, RouteError> {
        let mut rec = BrokerRec::default();
        let mut have_name = false;
        p.expect_object_start()?;
        while let Some(key) = p.next_key()? {
            if key.eq_str("brokerName") {
                rec.name = self.store(p.string()?)?;
                have_name = true;
            } else if key.eq_str("cluster") {
                if let Some(s) = p.string_or_null()? {
                    rec.cluster = self.store(s)?;
                }
            } else if key.eq_str("zoneName") {
                if let Some(s) = p.string_or_null()? {
                    rec.zone = Some(self.store(s)?);
                }
            } else if key.eq_str("enableActingMaster") {
                rec.enable_acting_master = p.boolean()?;
            } else if key.eq_str("brokerAddrs") {
                if self.read_null(p)? {
                    continue;
                }
                p.expect_object_start()?;
                while let Some(id) = p.next_key()? {
                    let id = id
                        .parse_i64()
                        .ok_or(RouteError::InvalidField("brokerAddrs"))?;
                    let Some(addr) = p.string_or_null()? else {
                        continue;
                    };
                    let addr = self.store(addr)?;
                    // A repeated id keeps its last address, like Java's HashMap.
                    if let Some(slot) = rec.addrs.iter_mut().find(|(i, _)| *i == id) {
                        slot.1 = addr;
                        continue;
                    }
                    rec.addrs
                        .push((id, addr))
                        .map_err(|_| RouteError::TooManyAddresses)?;
                }
            } else {
                p.skip_value()?;
            }
        }
        if !have_name {
            return Err(RouteError::MissingField("brokerName"));
        }
        Ok(rec)
    }

    fn parse_queue(&mut self, p: &mut Parser<'_>) -> Result<QueueRec, RouteError> {
        let mut rec = QueueRec::default();
        let mut have_name = false;
        p.expect_object_start()?;
        while let Some(key) = p.next_key()? {
            if key.eq_str("brokerName") {
                rec.broker_name = self.store(p.string()?)?;
                have_name = true;
            } else if key.eq_str("perm") {
                rec.perm = read_i32(p, "perm")?;
            } else if key.eq_str("readQueueNums") {
                rec.read_queue_nums = read_i32(p, "readQueueNums")?;
            } else if key.eq_str("writeQueueNums") {
                rec.write_queue_nums = read_i32(p, "writeQueueNums")?;
            } else if key.eq_str("topicSysFlag") {
                rec.topic_sys_flag = read_i32(p, "topicSysFlag")?;
            } else {
                p.skip_value()?;
            }
        }
        if !have_name {
            return Err(RouteError::MissingField("brokerName"));
        }
        Ok(rec)
    }

    fn s(&self, r: StrRef) -> &str {
        str_at(&self.text, r)
    }

    fn view<'r>(&'r self, b: &'r BrokerRec) -> BrokerView<'r> {
        BrokerView {
            name: self.s(b.name),
            cluster: self.s(b.cluster),
            zone: b.zone.map(|z| self.s(z)),
            enable_acting_master: b.enable_acting_master,
            addrs: &b.addrs,
            text: &self.text,
        }
    }

    /// The broker entries, in the order received.
    pub fn brokers(&self) -> impl Iterator<Item = BrokerView<'_>> + '_ {
        self.brokers.iter().map(move |b| self.view(b))
    }

    /// Number of broker entries.
    pub fn broker_count(&self) -> usize {
        self.brokers.len()
    }

    /// The broker at index `i` (as used by [`PublishQueueRef::broker`]).
    pub fn broker(&self, i: usize) -> Option<BrokerView<'_>> {
        self.brokers.get(i).map(|b| self.view(b))
    }

    /// The name of the broker at index `i`.
    pub fn broker_name(&self, i: usize) -> Option<&str> {
        self.brokers.get(i).map(|b| self.s(b.name))
    }

    /// The master address of the broker at index `i`.
    pub fn broker_addr(&self, i: usize) -> Option<&str> {
        self.broker(i).and_then(|b| b.addr(MASTER_ID))
    }

    /// Index of the broker entry named `name`.
    pub fn broker_index(&self, name: &str) -> Option<usize> {
        self.brokers.iter().position(|b| self.s(b.name) == name)
    }

    /// The master (id 0) address of broker `name`, where a producer sends.
    pub fn master_addr(&self, name: &str) -> Option<&str> {
        self.broker_index(name).and_then(|i| self.broker_addr(i))
    }

    /// The queue-data entries, in the order received.
    pub fn queue_datas(&self) -> impl Iterator<Item = QueueDataView<'_>> + '_ {
        self.queues.iter().map(move |q| QueueDataView {
            broker_name: self.s(q.broker_name),
            perm: q.perm,
            read_queue_nums: q.read_queue_nums,
            write_queue_nums: q.write_queue_nums,
            topic_sys_flag: q.topic_sys_flag,
        })
    }

    /// `orderTopicConf`, when present and non-empty.
    pub fn order_topic_conf(&self) -> Option<&str> {
        self.order_conf.map(|r| self.s(r))
    }

    /// Whether the topic is ordered (has an `orderTopicConf`).
    pub fn is_order_topic(&self) -> bool {
        self.order_conf.is_some()
    }

    /// Whether the route carries a non-empty 5.x `topicQueueMappingByBroker`.
    pub fn is_static_topic(&self) -> bool {
        self.mapping.is_some()
    }

    /// Builds the producer's publish-queue list (Java `topicRouteData2TopicPublishInfo`) into
    /// `out`, replacing its contents.
    ///
    /// `default_topic_cap` is `Some(defaultTopicQueueNums)` when this is the route of the default
    /// topic (TBW102) used for a topic that does not exist yet: Java then sets every queue
    /// data's read and write counts to `min(cap, readQueueNums)` (docs/protocol/STRATEGY.md §8.2).
    ///
    /// With an order-topic conf, a broker named there but absent from `brokerDatas` is skipped
    /// (a queue the producer could not address), whereas Java keeps it and fails at send time.
    ///
    /// # Errors
    /// [`RouteError::TooManyQueues`] when `out` is too small (nothing is truncated silently),
    /// [`RouteError::InvalidOrderTopicConf`], [`RouteError::StaticTopicUnsupported`] for a static
    /// topic, whose queues [`TopicRoute::static_queues`] gives.
    pub fn publish_queues<const N: usize>(
        &self,
        default_topic_cap: Option<i32>,
        out: &mut Vec<PublishQueueRef, N>,
    ) -> Result<(), RouteError> {
        out.clear();
        if let Some(conf) = self.order_topic_conf() {
            for entry in conf.split(';') {
                if entry.is_empty() {
                    continue;
                }
                let mut parts = entry.split(':');
                let (Some(name), Some(count)) = (parts.next(), parts.next()) else {
                    return Err(RouteError::InvalidOrderTopicConf);
                };
                let count: i32 = count
                    .trim_ascii()
                    .parse()
                    .map_err(|_| RouteError::InvalidOrderTopicConf)?;
                let Some(broker) = self.broker_index(name) else {
                    continue;
                };
                push_range(out, broker, count)?;
            }
            return Ok(());
        }
        if self.mapping.is_some() {
            return Err(RouteError::StaticTopicUnsupported);
        }
        let mut order: Vec<usize, BROKERS> = Vec::new();
        for i in 0..self.queues.len() {
            // Cannot fail: there are at most BROKERS queue datas.
            let _ = order.push(i);
        }
        // Insertion sort by broker name, stable like Java's Collections.sort.
        for i in 1..order.len() {
            let mut j = i;
            while j > 0 {
                let (a, b) = (order[j - 1], order[j]);
                let (na, nb) = (
                    self.s(self.queues[a].broker_name),
                    self.s(self.queues[b].broker_name),
                );
                if java_cmp(na, nb) == Ordering::Greater {
                    order.swap(j - 1, j);
                    j -= 1;
                } else {
                    break;
                }
            }
        }
        for &qi in order.iter() {
            let q = &self.queues[qi];
            let (perm, write) = match default_topic_cap {
                Some(cap) => (q.perm, cap.min(q.read_queue_nums)),
                None => (q.perm, q.write_queue_nums),
            };
            if perm & PERM_WRITE == 0 {
                continue;
            }
            let Some(broker) = self.broker_index(self.s(q.broker_name)) else {
                continue;
            };
            if self.broker_addr(broker).is_none() {
                continue;
            }
            push_range(out, broker, write)?;
        }
        Ok(())
    }

    /// Whether a writable queue of this route belongs to a broker listed without its master
    /// (only slaves): the topic exists, but its master is gone for now (a controller-mode
    /// master switch under way, or a master down), unlike a topic nobody may write to.
    pub fn awaits_master(&self) -> bool {
        self.queues.iter().any(|q| {
            q.perm & PERM_WRITE != 0
                && self
                    .broker_index(self.s(q.broker_name))
                    .and_then(|i| self.broker(i))
                    .is_some_and(|b| b.addr(MASTER_ID).is_none() && b.addrs().next().is_some())
        })
    }

    /// Builds a consumer's subscribe set: for every readable queue data, queues
    /// `0..readQueueNums` (no master check), in the order received.
    ///
    /// # Errors
    /// [`RouteError::TooManyQueues`] when `out` is too small;
    /// [`RouteError::StaticTopicUnsupported`] for a static topic, whose queues
    /// [`TopicRoute::static_queues`] gives.
    pub fn subscribe_queues<const N: usize>(
        &self,
        out: &mut Vec<PublishQueueRef, N>,
    ) -> Result<(), RouteError> {
        out.clear();
        if self.mapping.is_some() {
            return Err(RouteError::StaticTopicUnsupported);
        }
        for q in &self.queues {
            if q.perm & PERM_READ == 0 {
                continue;
            }
            let Some(broker) = self.broker_index(self.s(q.broker_name)) else {
                continue;
            };
            push_range(out, broker, q.read_queue_nums)?;
        }
        Ok(())
    }

    /// Whether two routes are equal the way Java's change detection sees it: the same queue
    /// datas and broker datas regardless of their order (docs/protocol/STRATEGY.md §8.2).
    pub fn same_as<const B2: usize, const S2: usize>(&self, other: &TopicRoute<B2, S2>) -> bool {
        if self.queues.len() != other.queues.len()
            || self.brokers.len() != other.brokers.len()
            || self.order_topic_conf() != other.order_topic_conf()
            || self.mapping_json() != other.mapping_json()
        {
            return false;
        }
        let queues_match = self.queue_datas().all(|q| {
            other.queue_datas().filter(|o| *o == q).count()
                == self.queue_datas().filter(|o| *o == q).count()
        });
        let brokers_match = self.brokers().all(|b| {
            other.brokers().any(|o| {
                o.name() == b.name()
                    && o.cluster() == b.cluster()
                    && o.zone() == b.zone()
                    && o.addrs().count() == b.addrs().count()
                    && b.addrs().all(|(id, a)| o.addr(id) == Some(a))
            })
        });
        queues_match && brokers_match
    }
}

fn push_range<const N: usize>(
    out: &mut Vec<PublishQueueRef, N>,
    broker: usize,
    count: i32,
) -> Result<(), RouteError> {
    for queue_id in 0..count.max(0) {
        out.push(PublishQueueRef { broker, queue_id })
            .map_err(|_| RouteError::TooManyQueues)?;
    }
    Ok(())
}

fn read_i32(p: &mut Parser<'_>, field: &'static str) -> Result<i32, RouteError> {
    let v = p.i64().map_err(|_| RouteError::InvalidField(field))?;
    i32::try_from(v).map_err(|_| RouteError::InvalidField(field))
}

fn trim_ascii(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if first.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = s {
        if last.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    type Route = TopicRoute<8, 1024>;

    const STANDARD: &[u8] = br#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.5:10911","1":"10.0.0.6:10911"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#;
    const LEGACY: &[u8] = br#"{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.5:10911",1:"10.0.0.6:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#;

    fn queues(r: &Route, cap: Option<i32>) -> std::vec::Vec<(std::string::String, i32)> {
        let mut out = Vec::<PublishQueueRef, 64>::new();
        r.publish_queues(cap, &mut out).unwrap();
        out.iter()
            .map(|q| (r.broker_name(q.broker).unwrap().to_string(), q.queue_id))
            .collect()
    }

    /// Fuzz finding (route_json): a repeated broker id made a route differ from itself in
    /// `same_as`, and `addr` returned the first address where Java keeps the last.
    #[test]
    fn repeated_broker_id_keeps_last_address() {
        let body = br#"{"brokerDatas":[{"brokerAddrs":{1:"10.0.0.5:10911","1":"10.0.0.6:10911"},"brokerName":"broker-a","cluster":"c"}],"queueDatas":[]}"#;
        let r = Route::parse(body).unwrap();
        let b = r.broker(0).unwrap();
        assert_eq!(b.addr(1), Some("10.0.0.6:10911"));
        assert_eq!(b.addrs().count(), 1);
        assert!(r.same_as(&r));
    }

    #[test]
    fn wire_examples_standard_and_legacy_parse_the_same() {
        for body in [STANDARD, LEGACY] {
            let r = Route::parse(body).unwrap();
            assert_eq!(r.broker_count(), 1);
            let b = r.broker(0).unwrap();
            assert_eq!(b.name(), "broker-a");
            assert_eq!(b.cluster(), "DefaultCluster");
            assert_eq!(b.addr(0), Some("10.0.0.5:10911"));
            assert_eq!(b.addr(1), Some("10.0.0.6:10911"));
            assert_eq!(b.addr(2), None);
            assert_eq!(r.master_addr("broker-a"), Some("10.0.0.5:10911"));
            let q: std::vec::Vec<_> = r.queue_datas().collect();
            assert_eq!(q.len(), 1);
            assert_eq!(q[0].perm, 6);
            assert_eq!((q[0].read_queue_nums, q[0].write_queue_nums), (4, 4));
            assert_eq!(queues(&r, None).len(), 4);
        }
        let a = Route::parse(STANDARD).unwrap();
        let b = Route::parse(LEGACY).unwrap();
        assert!(a.same_as(&b));
    }

    #[test]
    fn publish_list_sorted_by_name_writable_with_master_only() {
        // Received out of order; broker-c is read-only; broker-d has no master; broker-e has
        // no broker data at all.
        let body = br#"{"queueDatas":[
            {"brokerName":"broker-b","perm":6,"readQueueNums":2,"writeQueueNums":2,"topicSysFlag":0},
            {"brokerName":"broker-c","perm":4,"readQueueNums":2,"writeQueueNums":2,"topicSysFlag":0},
            {"brokerName":"broker-a","perm":2,"readQueueNums":3,"writeQueueNums":1,"topicSysFlag":0},
            {"brokerName":"broker-d","perm":6,"readQueueNums":2,"writeQueueNums":2,"topicSysFlag":0},
            {"brokerName":"broker-e","perm":6,"readQueueNums":2,"writeQueueNums":2,"topicSysFlag":0}],
          "brokerDatas":[
            {"brokerName":"broker-b","cluster":"c","brokerAddrs":{"0":"b:1"}},
            {"brokerName":"broker-a","cluster":"c","brokerAddrs":{"0":"a:1"}},
            {"brokerName":"broker-c","cluster":"c","brokerAddrs":{"0":"c:1"}},
            {"brokerName":"broker-d","cluster":"c","brokerAddrs":{"1":"d:1"}}]}"#;
        let r = Route::parse(body).unwrap();
        let q = queues(&r, None);
        let expect: std::vec::Vec<(std::string::String, i32)> =
            [("broker-a", 0), ("broker-b", 0), ("broker-b", 1)]
                .iter()
                .map(|(n, i)| (n.to_string(), *i))
                .collect();
        assert_eq!(q, expect);
        // Subscribe set: readable queue datas (a is write-only), no master check, input order.
        let mut sub = Vec::<PublishQueueRef, 64>::new();
        r.subscribe_queues(&mut sub).unwrap();
        let names: std::vec::Vec<_> = sub
            .iter()
            .map(|q| r.broker_name(q.broker).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "broker-b", "broker-b", "broker-c", "broker-c", "broker-d", "broker-d"
            ]
        );
    }

    #[test]
    fn default_topic_cap_uses_min_of_cap_and_read_nums() {
        let body = br#"{"brokerDatas":[{"brokerAddrs":{"0":"h:1"},"brokerName":"b","cluster":"c"}],
            "queueDatas":[{"brokerName":"b","perm":7,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]}"#;
        let r = Route::parse(body).unwrap();
        assert_eq!(queues(&r, None).len(), 8);
        assert_eq!(queues(&r, Some(4)).len(), 4);
        assert_eq!(queues(&r, Some(16)).len(), 8);
    }

    #[test]
    fn order_topic_conf_drives_the_list() {
        let body = br#"{"orderTopicConf":"broker-b:2;broker-a:1","brokerDatas":[
            {"brokerAddrs":{"0":"a:1"},"brokerName":"broker-a","cluster":"c"},
            {"brokerAddrs":{"0":"b:1"},"brokerName":"broker-b","cluster":"c"}],"queueDatas":[]}"#;
        let r = Route::parse(body).unwrap();
        assert!(r.is_order_topic());
        let q = queues(&r, None);
        assert_eq!(q[0], ("broker-b".to_string(), 0));
        assert_eq!(q[1], ("broker-b".to_string(), 1));
        assert_eq!(q[2], ("broker-a".to_string(), 0));
        assert_eq!(q.len(), 3);

        let bad = br#"{"orderTopicConf":"broker-b","brokerDatas":[],"queueDatas":[]}"#;
        let r = Route::parse(bad).unwrap();
        let mut out = Vec::<PublishQueueRef, 8>::new();
        assert_eq!(
            r.publish_queues(None, &mut out),
            Err(RouteError::InvalidOrderTopicConf)
        );
    }

    #[test]
    fn capacity_errors_are_typed_never_truncated() {
        let r = TopicRoute::<1, 1024>::parse(
            br#"{"brokerDatas":[{"brokerName":"a","brokerAddrs":{}},{"brokerName":"b","brokerAddrs":{}}]}"#,
        );
        assert_eq!(r.unwrap_err(), RouteError::TooManyBrokers);
        let r = TopicRoute::<4, 8>::parse(br#"{"brokerDatas":[{"brokerName":"a-long-name"}]}"#);
        assert_eq!(r.unwrap_err(), RouteError::StringSpaceExhausted);
        let r = Route::parse(
            br#"{"brokerDatas":[{"brokerName":"a","brokerAddrs":{0:"x",1:"x",2:"x",3:"x",4:"x"}}]}"#,
        );
        assert_eq!(r.unwrap_err(), RouteError::TooManyAddresses);
        let r = Route::parse(STANDARD).unwrap();
        let mut out = Vec::<PublishQueueRef, 3>::new();
        assert_eq!(
            r.publish_queues(None, &mut out),
            Err(RouteError::TooManyQueues)
        );
    }

    #[test]
    fn escapes_unknown_keys_and_static_topics() {
        // BrowserCompatible writes non-ASCII as \u escapes; unknown keys and nulls are ignored.
        let body = br#"{"x":{"deep":[1,2,{"a":null}]},"brokerDatas":[{"brokerName":"br\u00f6ker","cluster":null,"zoneName":"z1","brokerAddrs":{"0":"h:1","1":null}}],
            "queueDatas":[{"brokerName":"br\u00f6ker","perm":"6","readQueueNums":1,"writeQueueNums":1,"topicSysFlag":0,"extra":true}],"topicQueueMappingByBroker":{}}"#;
        let r = Route::parse(body).unwrap();
        assert_eq!(r.broker_name(0), Some("bröker"));
        assert_eq!(r.broker(0).unwrap().zone(), Some("z1"));
        assert_eq!(queues(&r, None), [("bröker".to_string(), 0)]);
        let st = br#"{"brokerDatas":[],"queueDatas":[],"topicQueueMappingByBroker":{"b":{"bname":"b"}}}"#;
        let r = Route::parse(st).unwrap();
        assert!(r.is_static_topic());
        let mut out = Vec::<PublishQueueRef, 8>::new();
        assert_eq!(
            r.publish_queues(None, &mut out),
            Err(RouteError::StaticTopicUnsupported)
        );
    }

    #[test]
    fn malformed_bodies_are_errors() {
        for body in [
            &b""[..],
            b"[]",
            b"{",
            br#"{"brokerDatas":[{"brokerAddrs":{"x":"h"},"brokerName":"a"}]}"#,
            br#"{"brokerDatas":[{"cluster":"c"}]}"#,
            br#"{"queueDatas":[{"brokerName":"a","perm":99999999999}]}"#,
            br#"{"queueDatas":[{"brokerName":"a"}]} trailing"#,
        ] {
            assert!(
                Route::parse(body).is_err(),
                "{:?}",
                core::str::from_utf8(body)
            );
        }
    }

    #[test]
    fn java_string_order_is_utf16() {
        // U+FF21 (one UTF-16 unit 0xFF21) sorts after U+1F600 (surrogates 0xD83D..) in Java,
        // although its UTF-8 bytes sort first.
        assert_eq!(java_cmp("\u{FF21}", "\u{1F600}"), Ordering::Greater);
        assert_eq!(java_cmp("broker-a", "broker-b"), Ordering::Less);
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = Route::parse(&data);
        }

        #[test]
        fn legacy_keys_equal_standard_keys(ids in proptest::collection::btree_set(0i64..1000, 1..4),
                                           nums in 0i32..16) {
            let mut std_addrs = std::string::String::new();
            let mut legacy_addrs = std::string::String::new();
            for (n, id) in ids.iter().enumerate() {
                if n > 0 { std_addrs.push(','); legacy_addrs.push(','); }
                std_addrs.push_str(&format!("\"{id}\":\"h{id}:1\""));
                legacy_addrs.push_str(&format!("{id}:\"h{id}:1\""));
            }
            let mk = |addrs: &str| format!(
                "{{\"brokerDatas\":[{{\"brokerAddrs\":{{{addrs}}},\"brokerName\":\"b\",\"cluster\":\"c\"}}],\"queueDatas\":[{{\"brokerName\":\"b\",\"perm\":6,\"readQueueNums\":{nums},\"writeQueueNums\":{nums},\"topicSysFlag\":0}}]}}");
            let a = Route::parse(mk(&std_addrs).as_bytes()).unwrap();
            let b = Route::parse(mk(&legacy_addrs).as_bytes()).unwrap();
            proptest::prop_assert!(a.same_as(&b));
            for id in &ids {
                let want = format!("h{id}:1");
                proptest::prop_assert_eq!(b.broker(0).unwrap().addr(*id), Some(want.as_str()));
            }
            let expect = if ids.contains(&0) { nums as usize } else { 0 };
            proptest::prop_assert_eq!(queues(&b, None).len(), expect);
        }
    }
}
