//! The deadline heap ([`DeadlineHeap`]) behind the client session's request timeouts and
//! route waits.

use crate::time::Instant;

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
    use proptest::prelude::*;

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
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
