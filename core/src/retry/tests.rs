use super::*;
use proptest::prelude::*;
use std::vec::Vec;

fn t(v: u64) -> Instant {
    Instant::from_millis(v)
}
fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

struct World {
    qs: Vec<PublishQueue<u8>>,
    table: FaultTable<u8, 8>,
    counter: QueueCounter,
}

impl World {
    fn new(profile: Profile, brokers: u8) -> Self {
        let mut qs = Vec::new();
        for b in 0..brokers {
            for q in 0..2 {
                qs.push(PublishQueue {
                    broker: b,
                    queue_id: q,
                });
            }
        }
        World {
            qs,
            table: FaultTable::new(profile.update_rule()),
            counter: QueueCounter::new(0),
        }
    }
    fn env(&mut self) -> SendEnv<'_, u8, 8> {
        SendEnv {
            queues: &self.qs,
            table: &mut self.table,
            counter: &mut self.counter,
            entropy: 7,
        }
    }
}

fn send(s: Step<u8>) -> Attempt<u8> {
    match s {
        Step::Send(a) => a,
        other => panic!("expected an attempt, got {other:?}"),
    }
}

fn done(s: Step<u8>) -> Result<Sent<u8>, SendError> {
    match s {
        Step::Done(r) => r,
        other => panic!("expected done, got {other:?}"),
    }
}

#[test]
fn sync_three_attempts_on_other_brokers() {
    let mut w = World::new(Profile::Plain, 3);
    let mut p = SendPlan::new(t(0), RetryConfig::plain(SendMode::Sync));
    let a1 = send(p.start(t(0), &mut w.env()));
    assert_eq!((a1.number, a1.deadline), (1, t(3000)));
    let fail = AttemptOutcome::Transport(TransportError::ConnectFailed);
    let a2 = send(p.handle_outcome(t(10), fail, &mut w.env()));
    assert_ne!(a2.queue.broker, a1.queue.broker);
    assert_eq!(a2.deadline, t(3000), "one total deadline");
    let a3 = send(p.handle_outcome(t(20), fail, &mut w.env()));
    assert_ne!(a3.queue.broker, a2.queue.broker);
    let e = done(p.handle_outcome(t(30), fail, &mut w.env())).unwrap_err();
    assert_eq!(
        e.kind(),
        SendErrorKind::Transport(TransportError::ConnectFailed)
    );
    assert_eq!((e.attempts(), e.java_code()), (3, Some(10001)));
    assert!(e.is_retryable());
    assert!(w.table.is_empty(), "Plain never touches the fault table");
    // Done is sticky.
    assert!(matches!(
        p.handle_outcome(t(40), fail, &mut w.env()),
        Step::Done(Err(_))
    ));
}

#[test]
fn timeout_at_the_deadline_ends_with_call_timeout() {
    let mut w = World::new(Profile::Java49, 2);
    let mut p = SendPlan::new(t(100), RetryConfig::java49(SendMode::Sync));
    let a = send(p.start(t(100), &mut w.env()));
    assert_eq!(p.poll_timeout(), Some(t(3100)));
    assert_eq!(p.handle_timeout(t(3099), &mut w.env()), Step::Wait);
    let e = done(p.handle_timeout(t(3100), &mut w.env())).unwrap_err();
    assert_eq!((e.kind(), e.attempts()), (SendErrorKind::CallTimeout, 1));
    // 4.9: isolation feeds 30000 ms → 10 minutes.
    assert!(!w.table.is_available(t(3100 + 599_999), a.queue.broker));
    assert!(w.table.is_available(t(3100 + 600_000), a.queue.broker));
    assert_eq!(w.table.get(a.queue.broker).unwrap().latency, ms(3000));
}

#[test]
fn retry_codes_by_version() {
    for (cfg, busy_retried) in [
        (RetryConfig::java49(SendMode::Sync), false),
        (RetryConfig::java5(SendMode::Sync), true),
    ] {
        let mut w = World::new(cfg.profile, 2);
        let mut p = SendPlan::new(t(0), cfg);
        let _ = send(p.start(t(0), &mut w.env()));
        let _ = send(p.handle_outcome(
            t(1),
            AttemptOutcome::Response(ResponseCode::TOPIC_NOT_EXIST.0),
            &mut w.env(),
        ));
        let s = p.handle_outcome(
            t(2),
            AttemptOutcome::Response(ResponseCode::SYSTEM_BUSY.0),
            &mut w.env(),
        );
        assert_eq!(matches!(s, Step::Send(_)), busy_retried);
        if !busy_retried {
            let e = done(s).unwrap_err();
            assert_eq!(e.kind(), SendErrorKind::Broker { code: 2 });
            assert!(!e.is_retryable());
            assert_eq!(e.attempts(), 2);
        }
    }
    assert!(RetryCodes::JAVA_533.contains(ResponseCode::GO_AWAY.0));
    assert!(!RetryCodes::JAVA_530.contains(ResponseCode::GO_AWAY.0));
    assert!(RetryCodes::JAVA_530.contains(ResponseCode::SYSTEM_BUSY.0));
    assert!(!RetryCodes::JAVA_49.contains(ResponseCode::MESSAGE_ILLEGAL.0));
    let c = RetryCodes::JAVA_49.with(215).unwrap();
    assert!(c.contains(215));
    let mut full = RetryCodes::JAVA_533;
    for x in 0..4 {
        full = full.with(1000 + x).unwrap();
    }
    assert_eq!(full.with(9999), Err(RetryCodesFull));
    assert_eq!(full.with(1000), Ok(full), "already present");
}

#[test]
fn message_illegal_is_final_and_status_codes_map() {
    let mut w = World::new(Profile::Plain, 2);
    let mut p = SendPlan::new(t(0), RetryConfig::plain(SendMode::Sync));
    let _ = send(p.start(t(0), &mut w.env()));
    let e = done(p.handle_outcome(t(5), AttemptOutcome::Response(13), &mut w.env())).unwrap_err();
    assert_eq!(
        (e.kind(), e.attempts(), e.java_code()),
        (SendErrorKind::Broker { code: 13 }, 1, Some(13))
    );
    assert_eq!(SendStatus::from_code(0), Some(SendStatus::SendOk));
    assert_eq!(
        SendStatus::from_code(10),
        Some(SendStatus::FlushDiskTimeout)
    );
    assert_eq!(
        SendStatus::from_code(11),
        Some(SendStatus::SlaveNotAvailable)
    );
    assert_eq!(
        SendStatus::from_code(12),
        Some(SendStatus::FlushSlaveTimeout)
    );
    assert_eq!(SendStatus::from_code(14), None);
}

#[test]
fn retry_another_broker_when_not_store_ok() {
    let mut cfg = RetryConfig::plain(SendMode::Sync);
    // Off (default): a non-OK status is returned at once.
    let mut w = World::new(Profile::Plain, 2);
    let mut p = SendPlan::new(t(0), cfg);
    let a = send(p.start(t(0), &mut w.env()));
    let r = done(p.handle_outcome(t(5), AttemptOutcome::Response(10), &mut w.env())).unwrap();
    assert_eq!(
        (r.status, r.queue, r.attempts),
        (SendStatus::FlushDiskTimeout, a.queue, 1)
    );
    // On: keep it, try another broker; a final non-retryable error returns the kept result.
    cfg.retry_another_broker_when_not_store_ok = true;
    let mut p = SendPlan::new(t(0), cfg);
    let a = send(p.start(t(0), &mut w.env()));
    let b = send(p.handle_outcome(t(5), AttemptOutcome::Response(12), &mut w.env()));
    assert_ne!(a.queue.broker, b.queue.broker);
    let r = done(p.handle_outcome(t(9), AttemptOutcome::Response(13), &mut w.env())).unwrap();
    assert_eq!(
        (r.status, r.queue),
        (SendStatus::FlushSlaveTimeout, a.queue)
    );
    // On, and every attempt non-OK: the kept result after exhaustion.
    let mut p = SendPlan::new(t(0), cfg);
    let _ = send(p.start(t(0), &mut w.env()));
    let _ = send(p.handle_outcome(t(1), AttemptOutcome::Response(11), &mut w.env()));
    let c = send(p.handle_outcome(t(2), AttemptOutcome::Response(11), &mut w.env()));
    let r = done(p.handle_outcome(t(3), AttemptOutcome::Response(11), &mut w.env())).unwrap();
    assert_eq!(
        (r.status, r.queue, r.attempts),
        (SendStatus::SlaveNotAvailable, c.queue, 3)
    );
}

#[test]
fn async_retries_transport_only_and_oneway_once() {
    let mut w = World::new(Profile::Plain, 2);
    let mut p = SendPlan::new(t(0), RetryConfig::plain(SendMode::Async));
    let _ = send(p.start(t(0), &mut w.env()));
    let e = done(p.handle_outcome(
        t(1),
        AttemptOutcome::Response(ResponseCode::SYSTEM_ERROR.0),
        &mut w.env(),
    ))
    .unwrap_err();
    assert_eq!(e.attempts(), 1, "async never retries a broker code");
    let mut p = SendPlan::new(t(0), RetryConfig::plain(SendMode::Async));
    let _ = send(p.start(t(0), &mut w.env()));
    let closed = AttemptOutcome::Transport(TransportError::ConnectionClosed);
    let _ = send(p.handle_outcome(t(1), closed, &mut w.env()));
    let _ = send(p.handle_outcome(t(2), closed, &mut w.env()));
    let e = done(p.handle_outcome(t(3), closed, &mut w.env())).unwrap_err();
    assert_eq!(e.attempts(), 3);
    let mut p = SendPlan::new(t(0), RetryConfig::plain(SendMode::Oneway));
    let _ = send(p.start(t(0), &mut w.env()));
    assert!(
        !p.handle_outcome(t(1), AttemptOutcome::Response(0), &mut w.env())
            .is_send()
    );
    let mut p = SendPlan::new(t(0), RetryConfig::plain(SendMode::Oneway));
    let _ = send(p.start(t(0), &mut w.env()));
    assert_eq!(
        done(p.handle_outcome(t(1), AttemptOutcome::Written, &mut w.env()))
            .unwrap()
            .status,
        SendStatus::SendOk
    );
    let mut p = SendPlan::new(t(0), RetryConfig::plain(SendMode::Oneway));
    let _ = send(p.start(t(0), &mut w.env()));
    let e = done(p.handle_outcome(
        t(1),
        AttemptOutcome::Transport(TransportError::WriteFailed),
        &mut w.env(),
    ))
    .unwrap_err();
    assert_eq!(e.attempts(), 1);
    // Sync ignores a stray `Written`.
    let mut p = SendPlan::new(t(0), RetryConfig::plain(SendMode::Sync));
    let _ = send(p.start(t(0), &mut w.env()));
    assert_eq!(
        p.handle_outcome(t(1), AttemptOutcome::Written, &mut w.env()),
        Step::Wait
    );
}

impl Step<u8> {
    fn is_send(&self) -> bool {
        matches!(self, Step::Send(_))
    }
}

#[test]
fn held_attempts_and_reopened_plans_keep_the_budget() {
    let mut w = World::new(Profile::Java5, 1);
    let mut p = SendPlan::new(t(0), RetryConfig::java5(SendMode::Sync));
    let refused = TransportError::ConnectFailed;
    // Nothing in flight: nothing to hold.
    assert!(!p.hold(t(0), refused, &mut w.env()));
    assert_eq!(send(p.start(t(0), &mut w.env())).number, 1);
    // Held: counted, but no attempt issued until `start`.
    assert!(p.hold(t(5), refused, &mut w.env()));
    assert_eq!((p.current(), p.attempts_made()), (None, 1));
    assert!(!w.table.is_empty(), "the failure reaches the fault table");
    assert_eq!(send(p.start(t(100), &mut w.env())).number, 2);
    assert!(p.hold(t(105), refused, &mut w.env()));
    assert_eq!(send(p.start(t(200), &mut w.env())).number, 3);
    // The last attempt cannot be held: the plan ends as usual, with what it met.
    assert!(!p.hold(t(205), refused, &mut w.env()));
    let e = done(p.handle_outcome(t(205), AttemptOutcome::Transport(refused), &mut w.env()))
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.attempts()),
        (SendErrorKind::Transport(refused), 3)
    );
    // A spent plan does not reopen; nor does one that ended for another reason than NoRoute.
    assert!(!p.reopen());
    // A plan that found no queue after an attempt reopens with its attempts left.
    let mut p = SendPlan::new(t(0), RetryConfig::java5(SendMode::Sync));
    assert_eq!(send(p.start(t(0), &mut w.env())).number, 1);
    let mut empty = World::new(Profile::Java5, 0);
    let e = done(p.handle_outcome(t(5), AttemptOutcome::Transport(refused), &mut empty.env()))
        .unwrap_err();
    assert_eq!((e.kind(), e.attempts()), (SendErrorKind::NoRoute, 1));
    assert!(p.reopen());
    assert_eq!(p.result(), None);
    assert_eq!(send(p.start(t(50), &mut w.env())).number, 2);
    // Given up between attempts: the last attempt's error.
    assert!(p.hold(t(60), refused, &mut w.env()));
    let e = done(p.give_up()).unwrap_err();
    assert_eq!(
        (e.kind(), e.attempts()),
        (SendErrorKind::Transport(refused), 2)
    );
    // Past the deadline nothing is held.
    let mut p = SendPlan::new(t(0), RetryConfig::java5(SendMode::Sync));
    assert_eq!(send(p.start(t(0), &mut w.env())).number, 1);
    assert!(!p.hold(t(3000), refused, &mut w.env()));
}

#[test]
fn no_route_and_fixed_queue() {
    let mut w = World::new(Profile::Plain, 0);
    let mut p = SendPlan::new(t(0), RetryConfig::plain(SendMode::Sync));
    let e = done(p.start(t(0), &mut w.env())).unwrap_err();
    assert_eq!(
        (e.kind(), e.attempts(), e.java_code()),
        (SendErrorKind::NoRoute, 0, Some(10005))
    );
    let q = PublishQueue {
        broker: 4,
        queue_id: 3,
    };
    let mut p = SendPlan::to_queue(t(0), RetryConfig::java49(SendMode::Sync), q);
    let a = send(p.start(t(0), &mut w.env()));
    assert_eq!(a.queue, q);
    let e = done(p.handle_outcome(
        t(1),
        AttemptOutcome::Transport(TransportError::TimedOut),
        &mut w.env(),
    ))
    .unwrap_err();
    assert_eq!((e.attempts(), e.java_code()), (1, Some(10002)));
}

#[test]
fn java5_fault_updates_and_per_request_cap() {
    let mut cfg = RetryConfig::java5(SendMode::Sync);
    cfg.max_timeout_per_request = Some(ms(800));
    let mut w = World::new(Profile::Java5, 2);
    let mut p = SendPlan::new(t(0), cfg);
    let a = send(p.start(t(0), &mut w.env()));
    assert_eq!(a.deadline, t(800));
    let b = send(p.handle_timeout(t(800), &mut w.env()));
    // Isolation feeds 10000 ms → 10 s; reachable stays true without the detector.
    assert!(!w.table.is_available(t(10_799), a.queue.broker));
    assert!(w.table.is_available(t(10_800), a.queue.broker));
    assert!(w.table.is_reachable(a.queue.broker));
    assert_eq!(b.deadline, t(1600));
    let c = send(p.handle_outcome(
        t(900),
        AttemptOutcome::Response(ResponseCode::SYSTEM_ERROR.0),
        &mut w.env(),
    ));
    assert!(
        !w.table.is_reachable(b.queue.broker),
        "5.x: broker error → unreachable"
    );
    assert_eq!(c.deadline, t(3000), "the last attempt is not capped");
    let r = done(p.handle_outcome(t(1000), AttemptOutcome::Response(0), &mut w.env())).unwrap();
    assert_eq!(r.attempts, 3);
    // Third attempt: nothing is available and not last; "reachable and not last" picks the
    // isolated first broker again, and its success does not shorten the 5.x window.
    assert_eq!(c.queue.broker, a.queue.broker);
    assert!(!w.table.is_available(t(10_799), a.queue.broker));
}

#[test]
fn java49_slow_success_isolates_549_does_not() {
    let mut w = World::new(Profile::Java49, 2);
    let mut p = SendPlan::new(t(0), RetryConfig::java49(SendMode::Sync));
    let a = send(p.start(t(0), &mut w.env()));
    let _ = done(p.handle_outcome(t(549), AttemptOutcome::Response(0), &mut w.env()));
    assert!(w.table.is_available(t(549), a.queue.broker));
    let mut p = SendPlan::new(t(1000), RetryConfig::java49(SendMode::Sync));
    let a = send(p.start(t(1000), &mut w.env()));
    let _ = done(p.handle_outcome(t(1550), AttemptOutcome::Response(0), &mut w.env()));
    assert!(!w.table.is_available(t(31_549), a.queue.broker));
    assert!(w.table.is_available(t(31_550), a.queue.broker));
}

#[test]
fn adaptive_caps_all_but_the_last_attempt() {
    let mut w = World::new(Profile::Adaptive, 3);
    let cfg = RetryConfig::adaptive(SendMode::Sync);
    // Teach it that broker 0 answers in 10 ms.
    w.table
        .record_adaptive(t(0), 0, AdaptiveSample::Good(ms(10)), &cfg.adaptive);
    let mut p = SendPlan::new(t(0), cfg);
    let a = send(p.start(t(0), &mut w.env()));
    assert_eq!(a.deadline, t(200), "floor of the cap");
    let b = send(p.handle_timeout(t(200), &mut w.env()));
    assert_ne!(b.queue.broker, a.queue.broker);
    assert!(
        !w.table.is_available(t(1199), a.queue.broker),
        "1 s isolation"
    );
    assert_eq!(b.deadline, t(400));
    let c = send(p.handle_timeout(t(400), &mut w.env()));
    assert_eq!(
        c.deadline,
        t(3000),
        "last attempt gets the whole remaining budget"
    );
    let r = done(p.handle_outcome(t(420), AttemptOutcome::Response(0), &mut w.env())).unwrap();
    assert_eq!(r.attempts, 3);
}

#[test]
fn a_profile_left_out_runs_as_plain() {
    struct NoAdaptive;
    impl ProfileSet for NoAdaptive {
        const JAVA5: bool = true;
        const ADAPTIVE: bool = false;
    }
    let cfg = RetryConfig::adaptive(SendMode::Sync);
    let mut w = World::new(Profile::Adaptive, 3);
    let mut p = SendPlan::<u8, NoAdaptive>::carrying(t(0), cfg);
    let a = send(p.start(t(0), &mut w.env()));
    assert_eq!(a.deadline, t(3000), "no Adaptive cap: the whole budget");
    let b = send(p.handle_outcome(t(10), AttemptOutcome::Response(2), &mut w.env()));
    assert_ne!(
        b.queue.broker, a.queue.broker,
        "Plain avoids the last broker"
    );
    assert!(w.table.is_empty(), "Plain never touches the fault table");
    // The same plan with every profile caps the attempt and records the fault.
    let mut w = World::new(Profile::Adaptive, 3);
    let mut p = SendPlan::new(t(0), cfg);
    let a = send(p.start(t(0), &mut w.env()));
    assert!(a.deadline < t(3000));
    let b = send(p.handle_outcome(t(10), AttemptOutcome::Response(2), &mut w.env()));
    assert_ne!(b.queue.broker, a.queue.broker);
    assert!(
        !w.table.is_available(t(10), a.queue.broker),
        "Adaptive isolates it"
    );
}

proptest! {
    /// Attempts stay bounded and inside the total deadline, whatever happens.
    #[test]
    fn attempts_bounded(
        profile in prop_oneof![Just(Profile::Plain), Just(Profile::Java49), Just(Profile::Java5), Just(Profile::Adaptive)],
        mode in prop_oneof![Just(SendMode::Sync), Just(SendMode::Async), Just(SendMode::Oneway)],
        events in proptest::collection::vec((0u64..1500, 0u8..6, any::<i32>()), 1..20),
    ) {
        let cfg = RetryConfig { profile, mode, ..RetryConfig::plain(mode) };
        let mut w = World::new(profile, 3);
        let mut p = SendPlan::new(t(0), cfg);
        let mut step = p.start(t(0), &mut w.env());
        let mut now = 0;
        let mut sends = 1;
        for (dt, kind, c) in events {
            let Step::Send(a) = step else { break };
            prop_assert!(a.deadline <= t(3000) && a.started <= a.deadline);
            now += dt;
            let o = match kind {
                0 => AttemptOutcome::Response(c),
                1 => AttemptOutcome::Response(0),
                2 => AttemptOutcome::Written,
                3 => AttemptOutcome::Transport(TransportError::TimedOut),
                4 => AttemptOutcome::Transport(TransportError::BrokerNotFound),
                _ => AttemptOutcome::Transport(TransportError::ConnectFailed),
            };
            step = if kind == 3 { p.handle_timeout(t(now.max(a.deadline.millis())), &mut w.env()) } else { p.handle_outcome(t(now), o, &mut w.env()) };
            if matches!(step, Step::Send(_)) { sends += 1; }
            if step == Step::Wait { step = Step::Send(a); }
        }
        prop_assert!(sends <= cfg.max_attempts());
        prop_assert!(sends == p.attempts_made());
    }
}
