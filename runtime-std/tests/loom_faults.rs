//! loom: concurrent fault-table updates never lose an isolation; counters never lose a bump.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use rmq_core::fault::UpdateRule;
use rmq_core::time::{Duration, Instant};
use rmq_std::shared::{Counter, Counters, Faults};

#[test]
fn concurrent_isolations_are_all_kept() {
    loom::model(|| {
        let faults = Arc::new(Faults::new(UpdateRule::Overwrite, 1));
        let now = Instant::from_millis(1_000);
        let mut hs = Vec::new();
        for broker in 0..2u16 {
            let f = faults.clone();
            hs.push(thread::spawn(move || {
                f.with(|st| {
                    let _ = st.table.update(
                        now,
                        broker,
                        Duration::from_millis(3000),
                        Duration::from_millis(30_000),
                        true,
                    );
                });
                // A reader interleaving with the other writer still sees its own isolation.
                assert!(!f.is_available(now, broker));
            }));
        }
        for h in hs {
            h.join().unwrap();
        }
        for broker in 0..2u16 {
            assert!(
                !faults.is_available(now, broker),
                "isolation of {broker} lost"
            );
            assert!(faults.is_available(now + Duration::from_millis(30_000), broker));
        }
    });
}

#[test]
fn counters_are_fair() {
    loom::model(|| {
        let c = Arc::new(Counters::new());
        let mut hs = Vec::new();
        for which in [Counter::Sent, Counter::Failed] {
            let c = c.clone();
            hs.push(thread::spawn(move || {
                c.bump(which);
                c.bump(Counter::Attempts);
            }));
        }
        c.bump(Counter::Attempts);
        for h in hs {
            h.join().unwrap();
        }
        let s = c.snapshot();
        assert_eq!((s.sent, s.failed, s.attempts), (1, 1, 3), "no bump lost");
        assert_eq!(s.sent + s.failed, 2, "every send counted once");
    });
}
