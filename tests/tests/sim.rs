//! The small simulator scenario: exact, deterministic results on a virtual clock.

use rmq_tests::sim::{Policy, Report, Scenario, run};

fn all(name: &str) -> Vec<Report> {
    let scn = Scenario::small()
        .into_iter()
        .find(|s| s.name == name)
        .expect("scenario");
    Policy::ALL.iter().map(|p| run(&scn, *p)).collect()
}

fn by(rs: &[Report], p: Policy) -> &Report {
    rs.iter().find(|r| r.policy == p).expect("policy")
}

#[test]
fn runs_are_deterministic_and_consistent() {
    for scn in Scenario::small() {
        for p in Policy::ALL {
            let a = run(&scn, p);
            assert_eq!(a, run(&scn, p), "{} {:?} not deterministic", scn.name, p);
            assert!(
                a.sends > 1500,
                "{}: Poisson arrivals at 100/s for 20 s",
                scn.name
            );
            assert!(a.attempts >= a.sends && a.attempts <= 3 * a.sends);
            assert!(a.bad_attempts <= a.attempts);
            assert!(a.p50 <= a.p99 && a.p99 <= a.max);
            assert!(a.max <= 3000, "no send outlives sendMsgTimeout");
        }
    }
}

#[test]
fn healthy_cluster_is_unaffected_by_fault_awareness() {
    let rs = all("healthy");
    let rr = by(&rs, Policy::RoundRobin);
    assert_eq!(rr.ok, rr.sends);
    for r in &rs {
        let mut same = r.clone();
        same.policy = Policy::RoundRobin;
        assert_eq!(&same, rr, "{:?} differs on a healthy cluster", r.policy);
    }
    // Round robin over 2 brokers: half the attempts each, within 1%.
    assert!((rr.bad_pct() - 50.0).abs() < 1.0);
}

#[test]
fn adaptive_beats_java49_on_slow_and_gc_brokers() {
    for name in ["slow-600ms", "gc-2s-every-10s"] {
        let rs = all(name);
        let (j, a) = (by(&rs, Policy::Java49), by(&rs, Policy::Adaptive));
        assert!(
            a.p99 * 10 <= j.p99 * 7,
            "{name}: Adaptive p99 {} not 30% below Java49 {}",
            a.p99,
            j.p99
        );
        assert!(a.ok >= j.ok, "{name}: success");
        // Without the latency switch, half the sends wait on the bad broker.
        let rr = by(&rs, Policy::RoundRobin);
        assert!(rr.p99 >= 550, "{name}: plain round robin p99 {}", rr.p99);
    }
}

#[test]
fn silent_broker_eats_the_java_budget_but_not_adaptive() {
    let rs = all("dead-silent");
    let (rr, j49, j5, a) = (
        by(&rs, Policy::RoundRobin),
        by(&rs, Policy::Java49),
        by(&rs, Policy::Java5),
        by(&rs, Policy::Adaptive),
    );
    // Java: an attempt to a hung broker gets the whole remaining budget, so the send fails.
    assert!(rr.ok < rr.sends * 6 / 10);
    assert!(j49.ok < j49.sends && j49.max == 3000);
    // 5.x isolates for only 10 s and keeps coming back: more failures than 4.9's 10 min.
    assert!(j5.ok < j49.ok);
    // Adaptive caps all but the last attempt and retries elsewhere.
    assert_eq!(a.ok, a.sends);
    assert!(a.max < 3000);
}

#[test]
fn refused_connections_are_retried_elsewhere() {
    let rs = all("dead-refused");
    for r in &rs {
        assert_eq!(r.ok, r.sends, "{:?}", r.policy);
    }
    // The fault-aware profiles stop sending there; plain round robin keeps trying first.
    let rr = by(&rs, Policy::RoundRobin);
    assert!(rr.bad_pct() > 15.0);
    for p in [Policy::Java49, Policy::Java5, Policy::Adaptive] {
        assert!(by(&rs, p).bad_pct() < 2.0, "{p:?}");
    }
}

/// The standard-size run (200 sends/s for 120 s): start-up effects (the first answers of a
/// broker slower than the 200 ms cap floor time out before it has an estimate) stay under 1 %.
fn standard(name: &str) -> Vec<Report> {
    let scn = Scenario::standard()
        .into_iter()
        .find(|s| s.name == name)
        .expect("scenario");
    Policy::ALL.iter().map(|p| run(&scn, *p)).collect()
}

#[test]
fn adaptive_passes_over_consistently_slower_brokers_and_gives_the_share_back() {
    let healthy = by(&standard("healthy"), Policy::Adaptive).p99;
    for name in ["slower-100ms", "slower-300ms", "slower-500ms"] {
        let rs = standard(name);
        let (j, a) = (by(&rs, Policy::Java49), by(&rs, Policy::Adaptive));
        // No Java table isolates a broker below 550 ms: it keeps its share, callers wait.
        assert!(
            j.bad_pct() > 45.0,
            "{name}: Java49 share {:.2}",
            j.bad_pct()
        );
        assert!(
            a.p99 * 10 <= j.p99 * 7,
            "{name}: Adaptive p99 {} not 30% below Java49 {}",
            a.p99,
            j.p99
        );
        assert!(
            a.p99 <= healthy + 5,
            "{name}: Adaptive p99 {} vs {healthy} healthy",
            a.p99
        );
        assert_eq!(a.ok, a.sends, "{name}");
        // Still probed (re-measured), under 1 % of the attempts.
        assert!(
            a.bad_attempts > 0 && a.bad_pct() < 1.0,
            "{name}: {:.2} %",
            a.bad_pct()
        );
    }
    // Slow until 60 s, then healthy: in the last quarter it has its share again.
    let rs = standard("slower-300ms-recovers");
    let a = by(&rs, Policy::Adaptive);
    assert!(
        a.tail_bad_pct() > 40.0,
        "recovered broker's share {:.2} %",
        a.tail_bad_pct()
    );
    assert!(a.p99 * 10 <= by(&rs, Policy::Java49).p99 * 7);
}

#[test]
fn std_adaptive_waits_out_what_its_cap_allows_and_still_caps_a_silent_broker() {
    // rmq-std's parameters (`RUNTIME_ADAPTIVE`): no attempt is cut before 1 s, so the 2 s GC
    // pauses cost up to about 1 s (the core's 200 ms floor cuts them at 200 ms), and fewer
    // attempts are left behind on the paused broker to be stored twice.
    let rs = all("gc-2s-every-10s");
    let (a, s, j) = (
        by(&rs, Policy::Adaptive),
        by(&rs, Policy::AdaptiveStd),
        by(&rs, Policy::Java49),
    );
    assert!(s.p99 > a.p99, "std {} vs core {}", s.p99, a.p99);
    assert!(s.max < 1500, "capped near 1 s: {}", s.max);
    assert!(s.ok >= j.ok, "success");
    // A hung broker: capped at 1 s, retried elsewhere, nothing fails.
    let rs = all("dead-silent");
    let s = by(&rs, Policy::AdaptiveStd);
    assert_eq!(s.ok, s.sends);
    assert!(s.max < 3000);
}
