use super::*;
use proptest::prelude::*;
use std::collections::VecDeque;
use std::string::String;
use std::vec::Vec;

fn msg<'a>(body: &'a [u8], tags: Option<&'a str>, keys: Option<&'a str>) -> OutMessage<'a> {
    OutMessage {
        body,
        tags,
        keys,
        flag: 7,
    }
}

#[test]
fn messages_leave_in_order_with_their_fields() {
    let (mut ring, mut st) = ([0u8; 256], [0u8; 64]);
    let mut ob: Outbox<'_, 8> = Outbox::new(&mut ring, &mut st, Overflow::RefuseNew);
    assert!(ob.current().is_none());
    let a = ob
        .push(&msg(b"a-body", Some("tag"), Some("k1 k2")), |_| {})
        .unwrap();
    let b = ob.push(&msg(b"b", None, None), |_| {}).unwrap();
    assert_eq!((a, b), (OutboxId(0), OutboxId(1)));
    assert_eq!((ob.len(), ob.bytes_used()), (2, 8 + 3 + 5 + 6 + 8 + 1));
    let (id, m) = ob.current().unwrap();
    assert_eq!((id, m), (a, msg(b"a-body", Some("tag"), Some("k1 k2"))));
    assert_eq!(ob.bytes_used(), 9, "the current one left the ring");
    assert_eq!(ob.finish(Verdict::Stored), Some(a));
    assert_eq!(ob.current().unwrap(), (b, msg(b"b", None, None)));
    assert_eq!(ob.finish(Verdict::Failed), Some(b));
    assert!(ob.is_empty() && ob.current().is_none());
    assert_eq!(ob.finish(Verdict::Stored), None, "nothing current");
    let s = ob.stats();
    assert_eq!((s.pushed, s.stored, s.failed, s.dropped), (2, 1, 1, 0));
}

#[test]
fn retry_keeps_the_current_message_first_and_the_policy_never_drops_it() {
    let (mut ring, mut st) = ([0u8; 40], [0u8; 40]);
    let mut ob: Outbox<'_, 8> = Outbox::new(&mut ring, &mut st, Overflow::DropOldest);
    let a = ob.push(&msg(b"0123456789", None, None), |_| {}).unwrap();
    assert_eq!(ob.current().unwrap().0, a);
    assert_eq!(ob.finish(Verdict::Retry), None);
    // 18-byte records: two fit the 40-byte ring; the third drops the oldest waiting (not `a`).
    let mut dropped = Vec::new();
    for _ in 0..3 {
        ob.push(&msg(b"0123456789", None, None), |id| dropped.push(id))
            .unwrap();
    }
    assert_eq!(dropped, [OutboxId(1)]);
    assert_eq!(ob.current().unwrap().0, a);
    assert_eq!(ob.attempts(), 1);
    assert_eq!(ob.finish(Verdict::Stored), Some(a));
    assert_eq!(ob.current().unwrap().0, OutboxId(2));
    assert_eq!(ob.attempts(), 0);
}

#[test]
fn refuse_new_refuses_until_room_is_made() {
    let (mut ring, mut st) = ([0u8; 32], [0u8; 32]);
    let mut ob: Outbox<'_, 4> = Outbox::new(&mut ring, &mut st, Overflow::RefuseNew);
    let m = msg(b"12345678", None, None); // 16 bytes
    ob.push(&m, |_| unreachable!()).unwrap();
    ob.push(&m, |_| unreachable!()).unwrap();
    assert_eq!(ob.push(&m, |_| unreachable!()), Err(PushError::Full));
    ob.current().unwrap();
    assert_eq!(
        ob.push(&m, |_| unreachable!()),
        Ok(OutboxId(2)),
        "the current one's room"
    );
    assert_eq!(ob.stats().refused, 1);
    // Count bound too.
    let (mut ring, mut st) = ([0u8; 256], [0u8; 32]);
    let mut ob: Outbox<'_, 2> = Outbox::new(&mut ring, &mut st, Overflow::RefuseNew);
    ob.push(&m, |_| {}).unwrap();
    ob.push(&m, |_| {}).unwrap();
    assert_eq!(ob.push(&m, |_| {}), Err(PushError::Full));
}

#[test]
fn too_large_is_refused_under_either_policy() {
    let (mut ring, mut st) = ([0u8; 64], [0u8; 16]);
    let mut ob: Outbox<'_, 4> = Outbox::new(&mut ring, &mut st, Overflow::DropOldest);
    ob.push(&msg(b"x", None, None), |_| {}).unwrap();
    // 17 bytes: fits the ring, not the staging buffer; nothing is dropped for it.
    let big = msg(b"123456789", None, None);
    assert_eq!(
        ob.push(&big, |_| panic!("dropped")),
        Err(PushError::TooLarge)
    );
    assert_eq!(ob.len(), 1);
    let long = "t".repeat(70_000);
    assert_eq!(
        ob.push(&msg(b"x", Some(&long), None), |_| {}),
        Err(PushError::TooLarge)
    );
}

#[derive(Clone, Debug)]
enum Op {
    Push(usize),
    /// Verdict, batch size asked for.
    Send(u8, usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (1usize..40).prop_map(Op::Push),
            2 => (0u8..3, 1usize..4).prop_map(|(v, n)| Op::Send(v, n)),
        ],
        0..200,
    )
}

proptest! {
    /// Against a model queue: every message ends exactly once (stored, failed or dropped), in
    /// push order, with its own bytes; drops take the oldest waiting ones; RefuseNew drops
    /// nothing; the ring never holds more than it can.
    #[test]
    fn every_message_has_exactly_one_outcome(ops in ops(), drop_oldest in any::<bool>()) {
        let policy = if drop_oldest { Overflow::DropOldest } else { Overflow::RefuseNew };
        let (mut ring, mut st) = ([0u8; 97], [0u8; 64]);
        let mut ob: Outbox<'_, 6> = Outbox::new(&mut ring, &mut st, policy);
        // Waiting (current first), by id, with the body each was given.
        let mut model: VecDeque<(u32, Vec<u8>)> = VecDeque::new();
        let mut ended: Vec<u32> = Vec::new();
        // How many at the model's front are current (being sent).
        let mut current = 0usize;
        for (i, op) in ops.iter().enumerate() {
            match *op {
                Op::Push(n) => {
                    let body: Vec<u8> = (0..n).map(|j| (i + j) as u8).collect();
                    let key = String::from("k");
                    let mut dropped = Vec::new();
                    match ob.push(&msg(&body, Some("t"), Some(&key)), |id| dropped.push(id.0)) {
                        Ok(id) => {
                            for d in &dropped {
                                // The oldest waiting, never a current one.
                                prop_assert_eq!(model.get(current).map(|m| m.0), Some(*d));
                                model.remove(current);
                                ended.push(*d);
                            }
                            model.push_back((id.0, body));
                        }
                        Err(e) => {
                            prop_assert_eq!(policy, Overflow::RefuseNew, "{}", e);
                            let waiting = model.len() - current;
                            prop_assert!(waiting > 0, "an empty ring takes any message that fits it");
                        }
                    }
                    if policy == Overflow::RefuseNew {
                        prop_assert!(dropped.is_empty());
                    }
                }
                Op::Send(v, max) => {
                    let Some(batch) = ob.current_batch(max) else {
                        prop_assert!(model.is_empty());
                        continue;
                    };
                    let n = batch.len();
                    if current > 0 {
                        prop_assert_eq!(n, current, "a retried batch comes back whole");
                    } else {
                        prop_assert!((1..=max).contains(&n));
                    }
                    let first = batch.first();
                    let got: Vec<_> = batch.iter().collect();
                    prop_assert_eq!(got.len(), n);
                    for ((id, m), (mid, body)) in got.iter().zip(model.iter()) {
                        prop_assert_eq!(id.0, *mid, "in order");
                        prop_assert_eq!(m.body, &body[..]);
                        prop_assert_eq!((m.tags, m.keys, m.flag), (Some("t"), Some("k"), 7));
                    }
                    current = n;
                    let verdict = [Verdict::Stored, Verdict::Retry, Verdict::Failed][usize::from(v)];
                    match ob.finish(verdict) {
                        Some(done) => {
                            prop_assert_eq!(done, first);
                            for _ in 0..n {
                                ended.push(model.pop_front().unwrap().0);
                            }
                            current = 0;
                        }
                        None => prop_assert_eq!(verdict, Verdict::Retry),
                    }
                }
            }
            prop_assert_eq!(ob.len(), model.len());
            prop_assert!(ob.bytes_used() <= 97);
        }
        let s = ob.stats();
        prop_assert_eq!((s.stored + s.failed + s.dropped) as usize, ended.len());
        prop_assert_eq!(s.pushed as usize, ended.len() + model.len());
        let mut seen = ended.clone();
        seen.extend(model.iter().map(|m| m.0));
        seen.sort_unstable();
        prop_assert_eq!(seen, (0..s.pushed).collect::<Vec<_>>(), "each id once");
    }
}

#[test]
fn a_batch_takes_what_the_staging_buffer_holds_and_ends_together() {
    let (mut ring, mut st) = ([0u8; 256], [0u8; 40]);
    let mut ob: Outbox<'_, 8> = Outbox::new(&mut ring, &mut st, Overflow::DropOldest);
    // Each record is 8 + 1 (key) + 3 (body) = 12 bytes, 16 staged: two fit the staging buffer.
    for i in 0..5u8 {
        ob.push(&msg(&[b'a' + i; 3], None, Some("k")), |_| {})
            .unwrap();
    }
    let b = ob.current_batch(10).unwrap();
    assert_eq!((b.first(), b.len()), (OutboxId(0), 2));
    let bodies: Vec<_> = b.iter().map(|(id, m)| (id.0, m.body.to_vec())).collect();
    assert_eq!(bodies, [(0, b"aaa".to_vec()), (1, b"bbb".to_vec())]);
    assert_eq!(ob.len(), 5);
    assert_eq!(ob.finish(Verdict::Retry), None);
    // The retried batch comes back whole, whatever is asked for.
    assert_eq!(ob.current_batch(1).unwrap().len(), 2);
    assert_eq!(
        ob.current().unwrap().0,
        OutboxId(0),
        "current() is the batch's first"
    );
    assert_eq!(ob.finish(Verdict::Stored), Some(OutboxId(0)));
    assert_eq!(ob.stats().stored, 2);
    let b = ob.current_batch(1).unwrap();
    assert_eq!((b.first(), b.len()), (OutboxId(2), 1));
    assert_eq!(ob.finish(Verdict::Failed), Some(OutboxId(2)));
    let b = ob.current_batch(2).unwrap();
    assert_eq!((b.first(), b.len()), (OutboxId(3), 2));
    assert_eq!(ob.finish(Verdict::Stored), Some(OutboxId(3)));
    assert!(ob.is_empty() && ob.current_batch(4).is_none());
    assert_eq!((ob.stats().stored, ob.stats().failed), (4, 1));
}
