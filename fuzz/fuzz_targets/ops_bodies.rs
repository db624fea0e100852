//! The bodies of operators' requests (docs/protocol/WIRE.md §16): ClusterInfo, TopicList,
//! ConsumeStats, ResetOffsetBody, read by `rmq_core::ops`, whose JSON includes fastjson's
//! object map keys.
//!
//! Input: byte 0 selects the reader (mod 4); the rest is the body. Invariants: no reader
//! panics or recurses on any input; every item handed to a callback has names that are
//! sub-slices of the body (nothing invented), a progress row's lag is never negative, and a
//! reader that succeeds succeeds again with the same items (it is a pure function).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmq_core::ops;

fn within(body: &[u8], s: &str) -> bool {
    let (b, p) = (body.as_ptr() as usize, s.as_ptr() as usize);
    s.is_empty() || (p >= b && p + s.len() <= b + body.len())
}

fn items(which: u8, body: &[u8]) -> Option<usize> {
    let mut n = 0;
    let ok = match which % 4 {
        0 => ops::read_cluster_info(body, &mut |b| {
            assert!(within(body, b.cluster) && within(body, b.broker) && within(body, b.addr));
            n += 1;
        })
        .is_ok(),
        1 => ops::read_topic_list(body, &mut |t| {
            assert!(within(body, t));
            n += 1;
        })
        .is_ok(),
        2 => ops::read_consume_stats(body, &mut |q| {
            assert!(within(body, q.queue.topic) && within(body, q.queue.broker));
            assert!(q.lag() >= 0);
            n += 1;
        })
        .is_ok(),
        _ => ops::read_reset_offsets(body, &mut |q, _| {
            assert!(within(body, q.topic) && within(body, q.broker));
            n += 1;
        })
        .is_ok(),
    };
    ok.then_some(n)
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    if let Some(n) = items(which, body) {
        assert_eq!(items(which, body), Some(n));
    }
});
