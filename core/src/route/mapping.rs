//! 5.x static topics: the logical queues a route's `topicQueueMappingByBroker` describes, and
//! the broker that leads each (Java `ClientMetadata.topicRouteData2EndpointsForStaticTopic`,
//! docs/protocol/STATIC-TOPIC.md).
//!
//! Each broker that hosts part of a static topic reports a `TopicQueueMappingInfo`: its `bname`,
//! the `scope`, the mapping's `epoch`, the topic's `totalQueues`, and `currIdMap`, the logical
//! (global) queue ids it leads mapped to its physical ones. A client sends, pulls and commits
//! with the **logical** queue id to the leading broker, which maps it (and proxies to an older
//! leader where the queue was remapped).
//!
//! Per scope, Java takes `totalQueues` as the largest any broker reports, and leads logical
//! queue `i` from the broker with the highest epoch whose `currIdMap` holds `i`. A logical queue
//! no broker leads is left out here (Java keeps it under a mock broker name and fails when it is
//! chosen). Queues are listed by logical id; scopes (rarely more than the default `__global__`)
//! in the order the route names them.

use heapless::Vec;

use super::{PublishQueueRef, RouteError, TopicRoute};
use crate::json::{Parser, Token};

const FIELD: &str = "topicQueueMappingByBroker";

/// One broker's `TopicQueueMappingInfo`, borrowed from the route's stored JSON.
#[derive(Clone, Copy)]
struct Info<'a> {
    /// The scope's raw JSON bytes (escapes kept: equal scopes are written alike).
    scope: &'a [u8],
    /// The index of `bname` in the route's brokers, if listed there.
    broker: Option<usize>,
    epoch: i64,
    total: i32,
    /// The raw JSON object `currIdMap` (`{0:0,2:1}`).
    ids: &'a [u8],
}

impl<const BROKERS: usize, const STR: usize> TopicRoute<BROKERS, STR> {
    /// Builds a static topic's queue list into `out`, replacing its contents: logical queue
    /// ids, each on the broker that leads it. Publish and subscribe lists are the same (as in
    /// Java). A route that is not a static topic gives an empty list.
    ///
    /// # Errors
    /// [`RouteError::InvalidField`] for a mapping of the wrong shape,
    /// [`RouteError::StaticTopicUnsupported`] when the mapping was not kept (rmq-core built
    /// without its `static-topics` feature, or a mapping over the route's `STR` bytes),
    /// [`RouteError::TooManyBrokers`] for more mapping entries than `BROKERS`,
    /// [`RouteError::TooManyQueues`] when `out` is too small (it then holds the queues with
    /// the smallest logical ids that fit).
    pub fn static_queues<const N: usize>(
        &self,
        out: &mut Vec<PublishQueueRef, N>,
    ) -> Result<(), RouteError> {
        out.clear();
        let Some(raw) = self.mapping_json() else {
            return Ok(());
        };
        if raw.is_empty() {
            // The mapping was not kept: rmq-core without its `static-topics` feature, or a
            // mapping larger than the route's string capacity.
            return Err(RouteError::StaticTopicUnsupported);
        }
        let infos = self.mapping_infos(raw)?;
        let total = |scope: &[u8]| {
            infos
                .iter()
                .filter(|o| o.scope == scope)
                .map(|o| o.total)
                .max()
                .unwrap_or(0)
        };
        // The logical ids some broker leads, each below its scope's total: the N smallest
        // (so a hostile `totalQueues` costs nothing, and a list too small for all keeps the
        // first ones, as for other topics).
        let mut ids: Vec<i32, N> = Vec::new();
        let mut dropped = false;
        for info in &infos {
            let limit = total(info.scope);
            keys(info.ids, |id| {
                if !(0..limit).contains(&id) || ids.contains(&id) {
                    return Ok(());
                }
                if let Err(id) = ids.push(id) {
                    dropped = true;
                    if let Some(max) = ids.iter_mut().max().filter(|m| **m > id) {
                        *max = id;
                    }
                }
                Ok(())
            })?;
        }
        ids.sort_unstable();
        for &id in &ids {
            for (n, info) in infos.iter().enumerate() {
                // The first info of each scope speaks for it.
                if infos[..n].iter().any(|o| o.scope == info.scope) || id >= total(info.scope) {
                    continue;
                }
                let mut leader: Option<&Info<'_>> = None;
                for o in infos.iter().filter(|o| o.scope == info.scope) {
                    if holds(o.ids, id)? && leader.is_none_or(|l| l.epoch <= o.epoch) {
                        leader = Some(o);
                    }
                }
                if let Some(broker) = leader.and_then(|l| l.broker) {
                    out.push(PublishQueueRef {
                        broker,
                        queue_id: id,
                    })
                    .map_err(|_| RouteError::TooManyQueues)?;
                }
            }
        }
        if dropped {
            return Err(RouteError::TooManyQueues);
        }
        Ok(())
    }

    fn mapping_infos<'a>(&self, raw: &'a [u8]) -> Result<Vec<Info<'a>, BROKERS>, RouteError> {
        let bad = |_| RouteError::InvalidField(FIELD);
        let mut infos = Vec::new();
        let mut p = Parser::new(raw);
        p.expect_object_start().map_err(bad)?;
        while p.next_key().map_err(bad)?.is_some() {
            let mut info = Info {
                scope: &[],
                broker: None,
                epoch: 0,
                total: 0,
                ids: b"{}",
            };
            let mut scoped = false;
            p.expect_object_start().map_err(bad)?;
            while let Some(key) = p.next_key().map_err(bad)? {
                if key.eq_str("bname") {
                    let name = p.string().map_err(bad)?;
                    info.broker = self.brokers().position(|b| name.eq_str(b.name()));
                } else if key.eq_str("scope") {
                    if let Some(s) = p.string_or_null().map_err(bad)? {
                        info.scope = s.raw();
                        scoped = true;
                    }
                } else if key.eq_str("epoch") {
                    info.epoch = p.i64().map_err(bad)?;
                } else if key.eq_str("totalQueues") {
                    info.total = i32::try_from(p.i64().map_err(bad)?)
                        .map_err(|_| RouteError::InvalidField(FIELD))?;
                } else if key.eq_str("currIdMap") {
                    info.ids = p.skip_value_span().map_err(bad)?;
                } else {
                    p.skip_value().map_err(bad)?;
                }
            }
            // Java leaves out a mapping without a scope.
            if scoped {
                infos.push(info).map_err(|_| RouteError::TooManyBrokers)?;
            }
        }
        Ok(infos)
    }
}

/// Calls `f` with each key of the `currIdMap` object `ids` that is an `i32`.
fn keys(ids: &[u8], mut f: impl FnMut(i32) -> Result<(), RouteError>) -> Result<(), RouteError> {
    let bad = |_| RouteError::InvalidField(FIELD);
    let mut p = Parser::new(ids);
    if let Ok(Token::Null) = p.clone().next_value() {
        return Ok(());
    }
    p.expect_object_start().map_err(bad)?;
    while let Some(key) = p.next_key().map_err(bad)? {
        if let Some(id) = key.parse_i32() {
            f(id)?;
        }
        p.skip_value().map_err(bad)?;
    }
    Ok(())
}

/// Whether the `currIdMap` object `ids` has the logical queue id `id` as a key.
fn holds(ids: &[u8], id: i32) -> Result<bool, RouteError> {
    let mut found = false;
    keys(ids, |k| {
        found |= k == id;
        Ok(())
    })?;
    Ok(found)
}

#[cfg(all(test, feature = "static-topics"))]
mod tests {
    use super::*;

    type Route = TopicRoute<8, 2048>;

    fn body(mapping: &str) -> std::string::String {
        format!(
            r#"{{"brokerDatas":[{{"brokerAddrs":{{0:"10.0.0.1:10911"}},"brokerName":"broker-a","cluster":"c"}},{{"brokerAddrs":{{0:"10.0.0.2:10911"}},"brokerName":"broker-b","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}},{{"brokerName":"broker-b","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}}],"topicQueueMappingByBroker":{mapping}}}"#
        )
    }

    fn info(bname: &str, epoch: i64, total: i32, ids: &str) -> std::string::String {
        format!(
            r#""{bname}":{{"bname":"{bname}","currIdMap":{ids},"dirty":false,"epoch":{epoch},"scope":"__global__","topic":"T","totalQueues":{total}}}"#
        )
    }

    fn logical(r: &Route) -> std::vec::Vec<(&str, i32)> {
        let mut out = Vec::<PublishQueueRef, 16>::new();
        r.static_queues(&mut out).unwrap();
        out.iter()
            .map(|q| (r.broker_name(q.broker).unwrap(), q.queue_id))
            .collect()
    }

    #[test]
    fn logical_queues_go_to_their_leaders() {
        // As `mqadmin updateStaticTopic -c c -qn 4` spreads them: logical 0 and 2 on broker-a
        // (physical 0 and 1), 1 and 3 on broker-b.
        let m = format!(
            "{{{},{}}}",
            info("broker-a", 7, 4, "{0:0,2:1}"),
            info("broker-b", 7, 4, r#"{"1":0,"3":1}"#)
        );
        let r = Route::parse(body(&m).as_bytes()).unwrap();
        assert!(r.is_static_topic());
        assert_eq!(
            logical(&r),
            [
                ("broker-a", 0),
                ("broker-b", 1),
                ("broker-a", 2),
                ("broker-b", 3)
            ]
        );
        // The queue datas (physical queues) are not the topic's queues.
        let mut out = Vec::<PublishQueueRef, 16>::new();
        assert_eq!(
            r.publish_queues(None, &mut out),
            Err(RouteError::StaticTopicUnsupported)
        );
        assert_eq!(
            r.subscribe_queues(&mut out),
            Err(RouteError::StaticTopicUnsupported)
        );
    }

    #[test]
    fn the_highest_epoch_leads_and_unled_queues_are_left_out() {
        // Logical 1 moved from broker-a (epoch 1) to broker-b (epoch 2); broker-b also says
        // there are 4 queues, but nobody leads 3.
        let m = format!(
            "{{{},{}}}",
            info("broker-b", 2, 4, "{1:0,2:1}"),
            info("broker-a", 1, 2, "{0:0,1:1}")
        );
        let r = Route::parse(body(&m).as_bytes()).unwrap();
        assert_eq!(
            logical(&r),
            [("broker-a", 0), ("broker-b", 1), ("broker-b", 2)]
        );
    }

    #[test]
    fn unscoped_or_unknown_brokers_lead_nothing() {
        let unscoped = r#"{"broker-a":{"bname":"broker-a","currIdMap":{0:0},"epoch":1,"totalQueues":2},"broker-b":{"bname":"broker-b","currIdMap":{1:0},"epoch":1,"scope":"__global__","totalQueues":2}}"#;
        let r = Route::parse(body(unscoped).as_bytes()).unwrap();
        assert_eq!(logical(&r), [("broker-b", 1)]);
        let m = format!("{{{}}}", info("broker-z", 1, 1, "{0:0}"));
        let r = Route::parse(body(&m).as_bytes()).unwrap();
        assert!(logical(&r).is_empty());
    }

    #[test]
    fn scopes_are_listed_side_by_side_by_logical_id() {
        let m = r#"{"broker-a":{"bname":"broker-a","currIdMap":{0:0,1:1},"epoch":1,"scope":"s1","totalQueues":2},"broker-b":{"bname":"broker-b","currIdMap":{0:0},"epoch":1,"scope":"s2","totalQueues":1}}"#;
        let r = Route::parse(body(m).as_bytes()).unwrap();
        assert_eq!(
            logical(&r),
            [("broker-a", 0), ("broker-b", 0), ("broker-a", 1)]
        );
    }

    #[test]
    fn malformed_mappings_are_typed_errors() {
        let mut out = Vec::<PublishQueueRef, 16>::new();
        for m in [
            r#"{"broker-a":[]}"#,
            r#"{"broker-a":{"bname":"broker-a","scope":"g","totalQueues":2,"currIdMap":[0]}}"#,
            r#"{"broker-a":{"bname":"broker-a","scope":"g","totalQueues":99999999999}}"#,
            r#"{"broker-a":{"bname":7}}"#,
        ] {
            let r = Route::parse(body(m).as_bytes()).unwrap();
            assert_eq!(
                r.static_queues(&mut out),
                Err(RouteError::InvalidField(FIELD)),
                "{m}"
            );
        }
        // A hostile total costs nothing: only led ids are listed.
        let m = format!("{{{}}}", info("broker-a", 1, i32::MAX, "{2147483646:0}"));
        let r = Route::parse(body(&m).as_bytes()).unwrap();
        assert_eq!(logical(&r), [("broker-a", i32::MAX - 1)]);
        let mut small = Vec::<PublishQueueRef, 1>::new();
        let m = format!("{{{}}}", info("broker-a", 1, 2, "{1:1,0:0}"));
        let two = Route::parse(body(&m).as_bytes()).unwrap();
        assert_eq!(
            two.static_queues(&mut small),
            Err(RouteError::TooManyQueues)
        );
        // What fits is kept: the smallest logical ids.
        assert_eq!(small.len(), 1);
        assert_eq!(small[0].queue_id, 0);
        // A mapping over the string capacity: the route stands, without queues.
        let tight = TopicRoute::<8, 100>::parse(body(&m).as_bytes()).unwrap();
        assert!(tight.is_static_topic());
        assert_eq!(
            tight.static_queues(&mut small),
            Err(RouteError::StaticTopicUnsupported)
        );
        // A remap is a route change.
        assert!(!r.same_as(&two));
        assert!(two.same_as(&Route::parse(body(&m).as_bytes()).unwrap()));
    }
}
