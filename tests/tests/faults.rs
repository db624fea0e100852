//! The real-broker fault bench's smoke run (issue 40; the reference run is `rmq-faults`,
//! BENCHMARKS.md): two real 5.3.3 brokers, broker 0 behind the fault relay, a few seconds per
//! cell. It shows that the bench's faults reach the producer (not how fast anything is).

use std::time::Duration;

use rmq_tests::faults::{Bench, Fault, Load};
use rmq_tests::sim::Policy;

#[test]
fn fault_bench_smoke() {
    let mut bench = Bench::start(2).unwrap_or_else(|e| panic!("{e}"));
    let load = Load {
        duration: Duration::from_secs(6),
        async_rate: 100,
        sync_rate: 50,
        body: 128,
    };
    for (fault, policy) in [
        (Fault::Slow150, Policy::Adaptive),
        (Fault::Pause, Policy::Java49),
    ] {
        let cell = bench
            .run(fault, policy, load)
            .unwrap_or_else(|e| panic!("{e}\n{}", bench.cluster().log_tail(40)));
        for r in [&cell.async_sends, &cell.sync_sends] {
            // Every arrival of 6 s was sent, each ended, and broker 0 (behind the relay) took
            // a share of them.
            let want = if r.scenario.ends_with(" async") {
                600
            } else {
                300
            };
            assert!(r.sends + 2 >= want && r.sends <= want + 2, "{r:?}");
            assert!(r.bad_attempts > 0, "nothing passed the relay: {r:?}");
            // Neither fault outlasts a send's 3 s budget: nothing may fail.
            assert_eq!(r.ok, r.sends, "{r:?}");
            if fault == Fault::Pause {
                // Java never cuts an attempt short: what it stored is what it acknowledged
                // (read back from the brokers' max offsets).
                assert_eq!(cell.extra_stored, [0, 0], "{r:?}");
            }
            if fault == Fault::Slow150 {
                // Answers through the relay come 150 ms late: some send waited for one.
                assert!(r.max >= 150, "the delay did not reach the producer: {r:?}");
            }
        }
    }
}
