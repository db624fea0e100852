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
mod tests;
