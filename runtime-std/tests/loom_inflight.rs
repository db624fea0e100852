//! loom: a response racing its timeout (and a lost connection) completes a request exactly
//! once and frees its slot.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use rmq_core::time::Instant;
use rmq_std::shared::Inflight;

#[test]
fn response_races_timeout_exactly_once() {
    loom::model(|| {
        let table = Arc::new(Inflight::<u32, 2>::new(1));
        let opaque = table
            .register(0, Instant::from_millis(100), 7)
            .expect("free slot");
        let done = Arc::new(AtomicUsize::new(0));

        let (t1, d1) = (table.clone(), done.clone());
        let reader = thread::spawn(move || {
            if let Some(tok) = t1.complete(opaque) {
                assert_eq!(tok, 7);
                d1.fetch_add(1, Ordering::SeqCst);
            }
        });
        let (t2, d2) = (table.clone(), done.clone());
        let caller = thread::spawn(move || {
            if let Some(tok) = t2.cancel(opaque) {
                assert_eq!(tok, 7);
                d2.fetch_add(1, Ordering::SeqCst);
            }
        });
        reader.join().unwrap();
        caller.join().unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 1, "completed exactly once");
        assert!(table.is_empty(), "slot freed");
        // The freed slot is reusable up to capacity.
        table.register(0, Instant::from_millis(1), 1).unwrap();
        table.register(0, Instant::from_millis(1), 2).unwrap();
        assert!(table.register(0, Instant::from_millis(1), 3).is_err());
    });
}

#[test]
fn response_races_connection_loss_and_expiry() {
    loom::model(|| {
        let table = Arc::new(Inflight::<u32, 4>::new(1));
        let a = table.register(9, Instant::from_millis(10), 1).unwrap();
        let b = table.register(9, Instant::from_millis(10), 2).unwrap();
        let done = Arc::new(AtomicUsize::new(0));

        let (t1, d1) = (table.clone(), done.clone());
        let reader = thread::spawn(move || {
            for op in [a, b] {
                if t1.complete(op).is_some() {
                    d1.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        let (t2, d2) = (table.clone(), done.clone());
        let closer = thread::spawn(move || {
            let n = t2.drain_connection(9).len();
            d2.fetch_add(n, Ordering::SeqCst);
        });
        let (t3, d3) = (table.clone(), done.clone());
        let sweeper = thread::spawn(move || {
            let n = t3.expire(Instant::from_millis(10)).len();
            d3.fetch_add(n, Ordering::SeqCst);
        });
        reader.join().unwrap();
        closer.join().unwrap();
        sweeper.join().unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 2, "each request ended once");
        assert!(table.is_empty());
    });
}

#[test]
fn concurrent_registrations_get_distinct_opaques() {
    loom::model(|| {
        let table = Arc::new(Inflight::<u32, 2>::new(i32::MAX));
        let t1 = table.clone();
        let h = thread::spawn(move || t1.register(0, Instant::from_millis(5), 1).unwrap());
        let o2 = table.register(0, Instant::from_millis(5), 2).unwrap();
        let o1 = h.join().unwrap();
        assert_ne!(o1, o2, "opaques never alias (also across the i32 wrap)");
        assert_eq!(table.len(), 2);
    });
}
