//! Topic route JSON (GET_ROUTEINFO_BY_TOPIC body, docs/protocol/WIRE.md §7), standard and legacy forms.
//!
//! Input: byte 0 = `defaultTopicQueueNums` for the TBW102 variant (as i8); the rest is the
//! body. Invariants: `TopicRoute::parse` never panics (two capacities); on success every view
//! accessor works, `publish_queues` / `subscribe_queues` either fill the list or report
//! `TooManyQueues`, every queue they (and a static topic's `static_queues`) return points at a
//! broker of the route with an id in range, and a route is `same_as` itself.
#![no_main]

use heapless::Vec as HVec;
use libfuzzer_sys::fuzz_target;
use rmq_core::route::{PublishQueueRef, RouteError, TopicRoute};

fn check<const B: usize, const S: usize>(body: &[u8], cap: i32) {
    let Ok(route) = TopicRoute::<B, S>::parse(body) else {
        return;
    };
    assert!(route.same_as(&route));
    for b in route.brokers() {
        let _ = (
            b.name(),
            b.cluster(),
            b.zone(),
            b.enable_acting_master(),
            b.addr(0),
        );
        for (id, _) in b.addrs() {
            assert!(b.addr(id).is_some());
        }
        assert!(route.broker_index(b.name()).is_some());
    }
    for i in 0..route.broker_count() + 1 {
        let _ = (route.broker(i), route.broker_name(i), route.broker_addr(i));
    }
    for q in route.queue_datas() {
        let _ = route.master_addr(q.broker_name);
    }
    let _ = (
        route.order_topic_conf(),
        route.is_order_topic(),
        route.is_static_topic(),
    );
    let mut out: HVec<PublishQueueRef, 64> = HVec::new();
    for c in [None, Some(cap)] {
        match route.publish_queues(c, &mut out) {
            Ok(()) => {
                for q in &out {
                    assert!(q.broker < route.broker_count());
                    assert!(q.queue_id >= 0);
                }
            }
            Err(RouteError::TooManyQueues) => assert_eq!(out.len(), 64),
            Err(_) => {}
        }
    }
    // A static topic's logical queues: bounded by the list, whatever `totalQueues` says.
    match route.static_queues(&mut out) {
        Ok(()) => {
            for q in &out {
                assert!(q.broker < route.broker_count());
                assert!(q.queue_id >= 0);
            }
            assert!(route.is_static_topic() || out.is_empty());
        }
        Err(RouteError::TooManyQueues) => {}
        Err(_) => assert!(route.is_static_topic()),
    }
    if route.subscribe_queues(&mut out).is_ok() {
        for q in &out {
            assert!(q.broker < route.broker_count());
            assert!(q.queue_id >= 0);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&cap, body)) = data.split_first() else {
        return;
    };
    let cap = i32::from(cap as i8);
    check::<4, 256>(body, cap);
    check::<16, 2048>(body, cap);
});
