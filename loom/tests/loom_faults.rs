//! loom: counters never lose a bump. (The fault table lives in the core session now, behind
//! the driver's lock: `loom_session.rs`.)
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use rmq_loom::shared::{Counter, Counters};

#[test]
fn counters_are_fair() {
    loom::model(|| {
        let c = Arc::new(Counters::new());
        let mut hs = Vec::new();
        for which in [Counter::Sent, Counter::Failed] {
            let c = c.clone();
            hs.push(thread::spawn(move || {
                c.bump(which);
                c.bump(Counter::ConnectionsLost);
            }));
        }
        c.bump(Counter::ConnectionsLost);
        for h in hs {
            h.join().unwrap();
        }
        let s = c.snapshot();
        assert_eq!(
            (s.sent, s.failed, s.connections_lost),
            (1, 1, 3),
            "no bump lost"
        );
        assert_eq!(s.sent + s.failed, 2, "every send counted once");
    });
}
