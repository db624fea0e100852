//! The core's large tables on the heap ([`rmq_core::store`]): a session's topics and sends
//! and a consumer's owned queues and send-backs, each growing up to the capacity the core
//! type names. The core values themselves are then small enough to be built on any stack
//! and boxed.

use std::ops::{Deref, DerefMut};

use rmq_core::store::{Empty, Slots, Store, Table};

/// rmq-std's [`Store`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Heap;

impl Store for Heap {
    type Vec<T, const N: usize> = HeapVec<T, N>;
    type Slots<T: Empty, const N: usize> = HeapSlots<T, N>;
}

/// At most `N` values, allocated as they come.
#[derive(Debug)]
pub(crate) struct HeapVec<T, const N: usize>(Vec<T>);

impl<T, const N: usize> Deref for HeapVec<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T, const N: usize> DerefMut for HeapVec<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<T, const N: usize> Table<T> for HeapVec<T, N> {
    fn new() -> Self {
        HeapVec(Vec::new())
    }
    fn push(&mut self, value: T) -> Result<(), T> {
        if self.0.len() >= N {
            return Err(value);
        }
        self.0.push(value);
        Ok(())
    }
    fn pop(&mut self) -> Option<T> {
        self.0.pop()
    }
    fn swap_remove(&mut self, index: usize) -> T {
        self.0.swap_remove(index)
    }
    fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.0.retain(|t| keep(t));
    }
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// `N` slots in one allocation.
#[derive(Debug)]
pub(crate) struct HeapSlots<T, const N: usize>(Box<[T]>);

impl<T, const N: usize> Deref for HeapSlots<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T, const N: usize> DerefMut for HeapSlots<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<T: Empty, const N: usize> Slots<T> for HeapSlots<T, N> {
    fn new() -> Self {
        HeapSlots((0..N).map(|_| T::EMPTY).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heap_table_refuses_past_its_capacity_and_hands_the_value_back() {
        let mut v: HeapVec<u32, 2> = Table::new();
        assert_eq!(v.push(1), Ok(()));
        assert_eq!(v.push(2), Ok(()));
        assert_eq!(v.push(3), Err(3));
        assert_eq!(v.swap_remove(0), 1);
        v.retain(|x| *x != 2);
        assert!(v.is_empty());
        struct Seven(u8);
        impl Empty for Seven {
            const EMPTY: Self = Seven(7);
        }
        let s: HeapSlots<Seven, 3> = Slots::new();
        assert!(s.iter().all(|x| x.0 == 7) && s.len() == 3);
    }
}
