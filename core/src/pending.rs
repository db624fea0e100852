//! The in-flight request table: opaque → (deadline, caller's completion token).
//!
//! Every request that expects a response is registered here under its `opaque` with a deadline.
//! A response is matched by opaque alone ([`PendingTable::complete`]), as the Java client does
//! (docs/protocol/STRATEGY.md §6); a response whose opaque is unknown (late, duplicate, or a reply to a oneway
//! request) finds nothing and must be dropped and counted by the runtime. Expired entries come
//! out of [`PendingTable::poll_expired`] one at a time, and when a connection is lost every entry
//! on it comes out of [`PendingTable::drain_connection`], so that each request ends **exactly
//! once**: completed, expired or failed.
//!
//! The table has a fixed capacity `N`; a full table hands the token back
//! ([`PendingFull`]) so the runtime can fail that request at once instead of losing it.
//! `T` is whatever the runtime needs to finish a request (a oneshot sender, a slot index, ...).
//!
//! Opaques come from [`OpaqueGen`]: a wrapping counter that skips values still in flight, so a
//! wrapped counter never aliases a live request.
//!
//! ```
//! use rmq_core::pending::{OpaqueGen, PendingTable};
//! use rmq_core::time::{Duration, Instant};
//!
//! let mut table = PendingTable::<&str, 4>::new();
//! let mut ids = OpaqueGen::new(1);
//! let t0 = Instant::from_millis(0);
//! let a = ids.next(&table);
//! table.insert(a, 0, t0 + Duration::from_millis(3000), "send #1").unwrap();
//! let b = ids.next(&table);
//! table.insert(b, 0, t0 + Duration::from_millis(100), "route").unwrap();
//! assert_eq!(table.next_deadline(), Some(Instant::from_millis(100)));
//! // The route request times out; the send gets its response.
//! assert_eq!(table.poll_expired(Instant::from_millis(100)), Some((b, "route")));
//! assert_eq!(table.complete(a), Some("send #1"));
//! // A late duplicate finds nothing.
//! assert_eq!(table.complete(a), None);
//! ```

use core::fmt;

use heapless::Vec;

use crate::time::Instant;

/// The table is full; the rejected token is handed back.
#[derive(Debug, PartialEq, Eq)]
pub struct PendingFull<T>(pub T);

impl<T> fmt::Display for PendingFull<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("too many requests in flight")
    }
}

impl<T: fmt::Debug> core::error::Error for PendingFull<T> {}

/// The opaque is already in flight (a caller bug: opaques must be unique).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DuplicateOpaque(pub i32);

/// Why an entry could not be inserted.
#[derive(Debug, PartialEq, Eq)]
pub enum InsertError<T> {
    /// No free slot; the token is handed back.
    Full(PendingFull<T>),
    /// The opaque is already in flight; the token is handed back.
    Duplicate(DuplicateOpaque, T),
}

impl<T> InsertError<T> {
    /// The token that was not inserted.
    pub fn into_inner(self) -> T {
        match self {
            InsertError::Full(PendingFull(t)) | InsertError::Duplicate(_, t) => t,
        }
    }
}

impl<T> fmt::Display for InsertError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InsertError::Full(_) => f.write_str("too many requests in flight"),
            InsertError::Duplicate(d, _) => write!(f, "opaque {} already in flight", d.0),
        }
    }
}

impl<T: fmt::Debug> core::error::Error for InsertError<T> {}

#[derive(Debug)]
struct Entry<T> {
    opaque: i32,
    connection: u32,
    deadline: Instant,
    token: T,
}

/// A fixed-capacity table of requests awaiting a response.
#[derive(Debug)]
pub struct PendingTable<T, const N: usize> {
    entries: Vec<Entry<T>, N>,
}

impl<T, const N: usize> Default for PendingTable<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const N: usize> PendingTable<T, N> {
    /// An empty table.
    pub const fn new() -> Self {
        PendingTable {
            entries: Vec::new(),
        }
    }

    /// Requests in flight.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether no further request fits.
    pub fn is_full(&self) -> bool {
        self.entries.len() == N
    }

    /// Whether `opaque` is in flight.
    pub fn contains(&self, opaque: i32) -> bool {
        self.entries.iter().any(|e| e.opaque == opaque)
    }

    /// Registers a request sent on `connection` (any runtime-chosen id) that must be answered
    /// before `deadline`.
    ///
    /// # Errors
    /// [`InsertError::Full`] when `N` requests are in flight, [`InsertError::Duplicate`] when
    /// `opaque` already is; both hand the token back.
    pub fn insert(
        &mut self,
        opaque: i32,
        connection: u32,
        deadline: Instant,
        token: T,
    ) -> Result<(), InsertError<T>> {
        if self.contains(opaque) {
            return Err(InsertError::Duplicate(DuplicateOpaque(opaque), token));
        }
        self.entries
            .push(Entry {
                opaque,
                connection,
                deadline,
                token,
            })
            .map_err(|e| InsertError::Full(PendingFull(e.token)))
    }

    /// A response with `opaque` arrived: removes and returns its token, or `None` when nothing
    /// waits for it (late, duplicate or unsolicited: drop the response and count it).
    pub fn complete(&mut self, opaque: i32) -> Option<T> {
        let i = self.entries.iter().position(|e| e.opaque == opaque)?;
        Some(self.entries.swap_remove(i).token)
    }

    /// Removes `opaque` without a response (the caller gave up or the write failed).
    pub fn cancel(&mut self, opaque: i32) -> Option<T> {
        self.complete(opaque)
    }

    /// The earliest deadline in the table, for the runtime's timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.entries.iter().map(|e| e.deadline).min()
    }

    /// Removes and returns one entry whose deadline is `<= now`, earliest first; call until
    /// `None`.
    pub fn poll_expired(&mut self, now: Instant) -> Option<(i32, T)> {
        let (i, _) = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.deadline <= now)
            .min_by_key(|(_, e)| e.deadline)?;
        let e = self.entries.swap_remove(i);
        Some((e.opaque, e.token))
    }

    /// Removes and returns one entry sent on `connection` (which was lost); call until `None`.
    pub fn drain_connection(&mut self, connection: u32) -> Option<(i32, T)> {
        let i = self
            .entries
            .iter()
            .position(|e| e.connection == connection)?;
        let e = self.entries.swap_remove(i);
        Some((e.opaque, e.token))
    }

    /// Removes and returns any one entry (shutdown); call until `None`.
    pub fn drain_any(&mut self) -> Option<(i32, T)> {
        let e = self.entries.pop()?;
        Some((e.opaque, e.token))
    }
}

/// A source of request opaques: a wrapping `i32` counter that skips values still in flight.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct OpaqueGen {
    next: i32,
}

impl OpaqueGen {
    /// Starts at `first` (Java starts at 0, Go at 1; any value works).
    pub const fn new(first: i32) -> Self {
        OpaqueGen { next: first }
    }

    /// The next opaque not in flight in `table`.
    ///
    /// With at most `N < 2^32` entries in flight this always terminates within `N + 1` steps.
    pub fn next<T, const N: usize>(&mut self, table: &PendingTable<T, N>) -> i32 {
        loop {
            let v = self.next;
            self.next = self.next.wrapping_add(1);
            if !table.contains(v) {
                return v;
            }
        }
    }

    /// The next opaque, without checking any table (for oneway requests, which are not tracked).
    pub fn next_untracked(&mut self) -> i32 {
        let v = self.next;
        self.next = self.next.wrapping_add(1);
        v
    }
}

/// Deadlines of up to `N` keys (`0..N`, e.g. slot indices), earliest first: an indexed binary
/// min-heap, so setting, moving or removing a key's deadline is O(log N) and the earliest is
/// O(1). The client session keeps one for its request slots and one for sends waiting on a
/// route, so that neither a response nor a timer ever scans a table.
#[derive(Clone, Debug)]
pub struct DeadlineHeap<const N: usize> {
    /// Keys in heap order.
    heap: [u16; N],
    /// Position + 1 of each key in `heap`; 0 when absent.
    pos: [u16; N],
    at: [Instant; N],
    len: usize,
}

impl<const N: usize> Default for DeadlineHeap<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> DeadlineHeap<N> {
    /// An empty heap. `N` must fit a `u16` (larger keys are ignored by [`Self::set`]).
    pub const fn new() -> Self {
        DeadlineHeap {
            heap: [0; N],
            pos: [0; N],
            at: [Instant::ZERO; N],
            len: 0,
        }
    }

    /// Keys with a deadline.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key has a deadline.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The deadline of `key`, if set.
    pub fn get(&self, key: u16) -> Option<Instant> {
        let k = usize::from(key);
        (*self.pos.get(k)? != 0).then(|| self.at.get(k).copied())?
    }

    /// Tables this small are scanned instead of kept in heap order (less code, as fast).
    const SCAN: bool = N <= 16;

    /// The earliest deadline and its key.
    pub fn peek(&self) -> Option<(u16, Instant)> {
        if Self::SCAN {
            return (0..N)
                .filter(|&k| self.pos.get(k).is_some_and(|p| *p != 0))
                .filter_map(|k| Some((k as u16, *self.at.get(k)?)))
                .min_by_key(|e| e.1);
        }
        let k = *self.heap.get(..self.len)?.first()?;
        Some((k, self.at.get(usize::from(k)).copied()?))
    }

    fn view(&mut self) -> HeapView<'_> {
        HeapView {
            heap: &mut self.heap,
            pos: &mut self.pos,
            at: &mut self.at,
            len: &mut self.len,
        }
    }

    /// Sets (or moves) the deadline of `key`. Keys `>= N` are ignored.
    pub fn set(&mut self, key: u16, at: Instant) {
        if Self::SCAN {
            let k = usize::from(key);
            if let (Some(p), Some(slot)) = (self.pos.get_mut(k), self.at.get_mut(k)) {
                self.len += usize::from(*p == 0);
                *p = 1;
                *slot = at;
            }
            return;
        }
        self.view().set(key, at);
    }

    /// Removes the deadline of `key`; whether it had one.
    pub fn remove(&mut self, key: u16) -> bool {
        if Self::SCAN {
            let had = self
                .pos
                .get_mut(usize::from(key))
                .is_some_and(|p| core::mem::take(p) != 0);
            self.len -= usize::from(had);
            return had;
        }
        self.view().remove(key)
    }

    /// Removes and returns the earliest key whose deadline is `<= now`.
    pub fn pop_expired(&mut self, now: Instant) -> Option<u16> {
        let (k, at) = self.peek()?;
        if at > now {
            return None;
        }
        self.remove(k);
        Some(k)
    }
}

/// The heap's storage without its capacity, so that the sift code is compiled once for every
/// `N` (heapless `VecView` does the same).
struct HeapView<'a> {
    heap: &'a mut [u16],
    pos: &'a mut [u16],
    at: &'a mut [Instant],
    len: &'a mut usize,
}

impl HeapView<'_> {
    fn set(&mut self, key: u16, at: Instant) {
        let k = usize::from(key);
        let (Some(p), Some(slot)) = (self.pos.get(k).copied(), self.at.get_mut(k)) else {
            return;
        };
        *slot = at;
        let i = if p == 0 {
            let i = *self.len;
            let Some(h) = self.heap.get_mut(i) else {
                return;
            };
            *h = key;
            *self.len += 1;
            self.place(i);
            i
        } else {
            usize::from(p) - 1
        };
        let i = self.up(i);
        self.down(i);
    }

    fn remove(&mut self, key: u16) -> bool {
        let p = self.pos.get(usize::from(key)).copied().unwrap_or(0);
        if p == 0 {
            return false;
        }
        let i = usize::from(p) - 1;
        let last = *self.len - 1;
        self.heap.swap(i, last);
        self.place(i);
        *self.len = last;
        if let Some(q) = self.pos.get_mut(usize::from(key)) {
            *q = 0;
        }
        if i < last {
            let i = self.up(i);
            self.down(i);
        }
        true
    }

    fn deadline_at(&self, i: usize) -> Instant {
        let k = self.heap.get(i).copied().unwrap_or(0);
        self.at.get(usize::from(k)).copied().unwrap_or(Instant::MAX)
    }

    /// Records where `heap[i]` now sits.
    fn place(&mut self, i: usize) {
        if let Some(&k) = self.heap.get(i)
            && let Some(p) = self.pos.get_mut(usize::from(k))
        {
            *p = u16::try_from(i + 1).unwrap_or(0);
        }
    }

    fn up(&mut self, mut i: usize) -> usize {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.deadline_at(parent) <= self.deadline_at(i) {
                break;
            }
            self.heap.swap(i, parent);
            self.place(i);
            self.place(parent);
            i = parent;
        }
        i
    }

    fn down(&mut self, mut i: usize) {
        let len = *self.len;
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < len && self.deadline_at(l) < self.deadline_at(m) {
                m = l;
            }
            if r < len && self.deadline_at(r) < self.deadline_at(m) {
                m = r;
            }
            if m == i {
                return;
            }
            self.heap.swap(i, m);
            self.place(i);
            self.place(m);
            i = m;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Duration;
    use proptest::prelude::*;

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn full_hands_token_back_and_duplicates_rejected() {
        let mut tb = PendingTable::<u32, 2>::new();
        tb.insert(1, 0, t(10), 100).unwrap();
        assert_eq!(
            tb.insert(1, 0, t(10), 101),
            Err(InsertError::Duplicate(DuplicateOpaque(1), 101))
        );
        tb.insert(2, 0, t(10), 102).unwrap();
        assert!(tb.is_full());
        assert_eq!(
            tb.insert(3, 0, t(10), 103),
            Err(InsertError::Full(PendingFull(103)))
        );
        assert_eq!(tb.len(), 2);
    }

    #[test]
    fn expiry_is_exact_and_earliest_first() {
        let mut tb = PendingTable::<&str, 8>::new();
        tb.insert(1, 0, t(300), "c").unwrap();
        tb.insert(2, 0, t(100), "a").unwrap();
        tb.insert(3, 0, t(200), "b").unwrap();
        assert_eq!(tb.poll_expired(t(99)), None);
        assert_eq!(tb.poll_expired(t(250)), Some((2, "a")));
        assert_eq!(tb.poll_expired(t(250)), Some((3, "b")));
        assert_eq!(tb.poll_expired(t(250)), None);
        assert_eq!(tb.next_deadline(), Some(t(300)));
        assert_eq!(tb.poll_expired(t(300)), Some((1, "c")));
        assert!(tb.is_empty());
        assert_eq!(tb.next_deadline(), None);
    }

    #[test]
    fn losing_a_connection_fails_only_its_requests() {
        let mut tb = PendingTable::<u8, 8>::new();
        tb.insert(1, 7, t(100), 1).unwrap();
        tb.insert(2, 8, t(100), 2).unwrap();
        tb.insert(3, 7, t(100), 3).unwrap();
        let mut failed = std::vec::Vec::new();
        while let Some((o, _)) = tb.drain_connection(7) {
            failed.push(o);
        }
        failed.sort();
        assert_eq!(failed, [1, 3]);
        assert_eq!(tb.complete(2), Some(2));
    }

    #[test]
    fn opaque_generator_wraps_and_skips_live_values() {
        let mut tb = PendingTable::<(), 4>::new();
        let mut g = OpaqueGen::new(i32::MAX);
        let a = g.next(&tb);
        assert_eq!(a, i32::MAX);
        tb.insert(i32::MIN, 0, t(1), ()).unwrap();
        // i32::MIN is in flight, so the wrapped counter skips it.
        assert_eq!(g.next(&tb), i32::MIN + 1);
    }

    proptest! {
        /// Every inserted request ends exactly once, whatever the interleaving of responses,
        /// expiries and connection losses.
        #[test]
        fn every_request_ends_exactly_once(ops in proptest::collection::vec((0u8..4, 0i32..16, 0u64..50), 0..200)) {
            let mut tb = PendingTable::<(i32, usize), 8>::new();
            let mut inserts = 0usize;
            let mut ended = std::vec::Vec::new();
            let mut now = 0u64;
            for (op, o, dt) in ops {
                now += dt;
                match op {
                    0 => {
                        let token = (o, inserts);
                        if tb.insert(o, (o % 3) as u32, t(now) + Duration::from_millis(dt * 3), token).is_ok() {
                            inserts += 1;
                        }
                    }
                    1 => if let Some(v) = tb.complete(o) { prop_assert_eq!(v.0, o); ended.push(v.1); },
                    2 => while let Some((k, v)) = tb.poll_expired(t(now)) { prop_assert_eq!(k, v.0); ended.push(v.1); },
                    _ => while let Some((k, v)) = tb.drain_connection((o % 3) as u32) { prop_assert_eq!(k, v.0); ended.push(v.1); },
                }
                prop_assert!(tb.len() <= 8);
                let mut live: std::vec::Vec<i32> = tb.entries.iter().map(|e| e.opaque).collect();
                let n = live.len();
                live.sort();
                live.dedup();
                prop_assert_eq!(live.len(), n, "an opaque is live twice");
            }
            while let Some((_, v)) = tb.drain_any() { ended.push(v.1); }
            // Every insert ended exactly once: the sequence numbers are 0..inserts, each once.
            ended.sort();
            prop_assert_eq!(ended, (0..inserts).collect::<std::vec::Vec<_>>());
        }
    }

    trait HeapOps {
        fn set(&mut self, k: u16, at: Instant);
        fn remove(&mut self, k: u16) -> bool;
        fn pop_expired(&mut self, now: Instant) -> Option<u16>;
        fn len(&self) -> usize;
        fn peek(&self) -> Option<(u16, Instant)>;
        fn get(&self, k: u16) -> Option<Instant>;
    }

    impl<const N: usize> HeapOps for DeadlineHeap<N> {
        fn set(&mut self, k: u16, at: Instant) {
            DeadlineHeap::set(self, k, at)
        }
        fn remove(&mut self, k: u16) -> bool {
            DeadlineHeap::remove(self, k)
        }
        fn pop_expired(&mut self, now: Instant) -> Option<u16> {
            DeadlineHeap::pop_expired(self, now)
        }
        fn len(&self) -> usize {
            DeadlineHeap::len(self)
        }
        fn peek(&self) -> Option<(u16, Instant)> {
            DeadlineHeap::peek(self)
        }
        fn get(&self, k: u16) -> Option<Instant> {
            DeadlineHeap::get(self, k)
        }
    }

    proptest! {
        /// The heap agrees with a plain list of (key, deadline) under any sequence of sets,
        /// moves, removals and expiries.
        #[test]
        fn deadline_heap_matches_a_list(big in any::<bool>(), ops in proptest::collection::vec((0u8..3, 0u16..12, 0u64..100), 0..300)) {
            // 10 keys used of 10 (scanned) or of 40 (heap order).
            let mut small = DeadlineHeap::<10>::new();
            let mut large = DeadlineHeap::<40>::new();
            let h: &mut dyn HeapOps = if big { &mut large } else { &mut small };
            let mut model: std::vec::Vec<(u16, u64)> = std::vec::Vec::new();
            for (op, k, at) in ops {
                match op {
                    0 => {
                        h.set(k, t(at));
                        if k < if big { 40 } else { 10 } {
                            model.retain(|e| e.0 != k);
                            model.push((k, at));
                        }
                    }
                    1 => {
                        let had = model.iter().any(|e| e.0 == k);
                        prop_assert_eq!(h.remove(k), had);
                        model.retain(|e| e.0 != k);
                    }
                    _ => {
                        let got = h.pop_expired(t(at));
                        let min = model.iter().map(|e| e.1).min().filter(|m| *m <= at);
                        match (got, min) {
                            (Some(g), Some(m)) => {
                                let e = model.iter().position(|e| e.0 == g).unwrap();
                                prop_assert_eq!(model[e].1, m, "not the earliest");
                                model.remove(e);
                            }
                            (None, None) => {}
                            other => prop_assert!(false, "heap {:?} vs model", other),
                        }
                    }
                }
                prop_assert_eq!(h.len(), model.len());
                prop_assert_eq!(h.peek().map(|p| p.1.millis()), model.iter().map(|e| e.1).min());
                for k in 0..12u16 {
                    prop_assert_eq!(h.get(k).map(Instant::millis), model.iter().find(|e| e.0 == k).map(|e| e.1));
                }
            }
        }
    }
}
