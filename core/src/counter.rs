//! [`QueueCounter`]: the round-robin counter with an injected random start that queue
//! selection ([`crate::select`]) and the fault table's fallback
//! ([`FaultTable::pick_one_at_least`](crate::fault::FaultTable::pick_one_at_least)) share.
//! Its own module, so that `fault` does not import `select` for it.

/// Java `ThreadLocalIndex`: a round-robin counter with an injected random start.
///
/// Keep one per producer (Java keeps one per thread per route object); re-seed it when the
/// route changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QueueCounter {
    value: u32,
}

impl QueueCounter {
    /// A counter starting at `seed` (the runtime passes a random value).
    pub const fn new(seed: u32) -> Self {
        QueueCounter { value: seed }
    }

    /// 5.x `reset()`: restart from a new random `seed`.
    pub fn reset(&mut self, seed: u32) {
        self.value = seed & 0x7FFF_FFFF;
    }

    /// `incrementAndGet()`: add one (wrapping) and return the value masked to 31 bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u32 {
        self.value = self.value.wrapping_add(1);
        self.value & 0x7FFF_FFFF
    }

    /// Next position in `0..len` (`len > 0`), or 0 for an empty list.
    pub fn next_pos(&mut self, len: usize) -> usize {
        let v = usize::try_from(self.next()).unwrap_or(0);
        v.checked_rem(len).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_masks_like_thread_local_index() {
        let mut c = QueueCounter::new(0x7FFF_FFFE);
        assert_eq!(c.next(), 0x7FFF_FFFF);
        assert_eq!(c.next(), 0);
        let mut c = QueueCounter::new(u32::MAX);
        assert_eq!(c.next(), 0);
        assert_eq!(c.next_pos(0), 0);
    }
}
