//! Where the core's large tables live: fixed arrays in the value itself ([`Fixed`], the
//! default: a gateway's statics or stack), or storage the runtime provides (rmq-std keeps
//! them on the heap, allocated as they fill up to the same capacity).
//!
//! The capacity is always the const generic `N`, whatever the storage: a [`Table`] refuses
//! the `N + 1`-th element as `heapless::Vec` does. Only the session's topics and sends and
//! the pull consumer's owned queues and send-backs are stored this way (they make up almost
//! all of a server-sized client: 6 MB of a consumer's 6.1 MB at rmq-std's capacities); the
//! small tables stay inline.
//!
//! ```
//! use rmq_core::store::{Fixed, Store, Table};
//! let mut v: <Fixed as Store>::Vec<u8, 2> = Table::new();
//! assert!(v.push(1).is_ok() && v.push(2).is_ok());
//! assert_eq!(v.push(3), Err(3)); // full: the value is handed back
//! assert_eq!(&v[..], &[1, 2]);
//! ```

use core::ops::{Deref, DerefMut};

/// A vector of at most `N` elements (the capacity of the [`Store::Vec`] it is).
pub trait Table<T>: Deref<Target = [T]> + DerefMut {
    /// An empty table.
    fn new() -> Self;
    /// Appends `value`, or hands it back when the table is full.
    ///
    /// # Errors
    /// The value, when the table holds its capacity already.
    fn push(&mut self, value: T) -> Result<(), T>;
    /// Removes and returns the last element.
    fn pop(&mut self) -> Option<T>;
    /// Removes element `index`, moving the last one into its place.
    ///
    /// # Panics
    /// When `index` is out of bounds (as `heapless::Vec::swap_remove`); callers pass indices
    /// they just found.
    fn swap_remove(&mut self, index: usize) -> T;
    /// Keeps the elements `keep` returns `true` for, in order.
    fn retain(&mut self, keep: impl FnMut(&T) -> bool);
    /// Removes every element.
    fn clear(&mut self);
}

/// A value a slot starts as (and returns to when freed).
pub trait Empty {
    /// The empty slot.
    const EMPTY: Self;
}

/// A fixed number of slots, all there from the start (indexed by a slot number).
pub trait Slots<T: Empty>: Deref<Target = [T]> + DerefMut {
    /// `N` empty slots.
    fn new() -> Self;
}

/// Where a core value keeps its large tables.
pub trait Store {
    /// A table of at most `N` values of `T`.
    type Vec<T, const N: usize>: Table<T>;
    /// `N` slots of `T`.
    type Slots<T: Empty, const N: usize>: Slots<T>;
}

/// Tables inside the value (`heapless::Vec`): no allocator, the size known at build time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fixed;

impl Store for Fixed {
    type Vec<T, const N: usize> = heapless::Vec<T, N>;
    type Slots<T: Empty, const N: usize> = Inline<T, N>;
}

/// `N` slots inside the value ([`Fixed`]'s [`Store::Slots`]).
#[derive(Debug)]
pub struct Inline<T, const N: usize>([T; N]);

impl<T, const N: usize> Deref for Inline<T, N> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T, const N: usize> DerefMut for Inline<T, N> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<T: Empty, const N: usize> Slots<T> for Inline<T, N> {
    #[inline(always)]
    fn new() -> Self {
        Inline([const { T::EMPTY }; N])
    }
}

impl<T, const N: usize> Table<T> for heapless::Vec<T, N> {
    #[inline(always)]
    fn new() -> Self {
        heapless::Vec::new()
    }
    #[inline(always)]
    fn push(&mut self, value: T) -> Result<(), T> {
        heapless::Vec::push(self, value)
    }
    #[inline(always)]
    fn pop(&mut self) -> Option<T> {
        heapless::Vec::pop(self)
    }
    #[inline(always)]
    fn swap_remove(&mut self, index: usize) -> T {
        heapless::Vec::swap_remove(self, index)
    }
    #[inline(always)]
    fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        heapless::Vec::retain(self, keep);
    }
    #[inline(always)]
    fn clear(&mut self) {
        heapless::Vec::clear(self);
    }
}
