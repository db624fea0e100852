//! Store-and-forward for gateways: messages wait in a caller-owned byte ring while the uplink
//! or every broker is down, and leave it in order, each with exactly one outcome.
//!
//! The [`Outbox`] holds messages in arrival order, bounded both in bytes (the ring) and in
//! count (`N`). When it is full, the caller's [`Overflow`] policy decides: drop the oldest
//! waiting messages (each reported through the `dropped` callback of [`Outbox::push`]) or
//! refuse the new one. The runtime sends [`Outbox::current`] — the oldest message, moved out
//! of the ring into the staging buffer, so that the ring's space is free again while it is in
//! flight — and then tells the outbox how the send ended ([`Outbox::finish`]): stored or
//! failed for good ends the message; a retryable failure keeps it current for the next
//! attempt, ahead of everything queued behind it. The message being sent is never dropped by
//! the policy. Over a long-RTT link, [`Outbox::current_batch`] takes up to `max` of the oldest
//! messages at once (as many as the staging buffer holds), to send as one SEND_BATCH_MESSAGE
//! request (rmq-smoltcp `Producer::send_batch`); they end or stay together.
//!
//! ```
//! use rmq_core::outbox::{OutMessage, Outbox, Overflow, Verdict};
//!
//! let (mut ring, mut staging) = ([0u8; 128], [0u8; 64]);
//! let mut ob: Outbox<'_, 4> = Outbox::new(&mut ring, &mut staging, Overflow::DropOldest);
//! let m = |body| OutMessage { body, tags: Some("t"), keys: None, flag: 0 };
//! let a = ob.push(&m(b"first"), |_| {}).unwrap();
//! let b = ob.push(&m(b"second"), |_| {}).unwrap();
//! assert_eq!(ob.current().map(|(id, m)| (id, m.body)), Some((a, &b"first"[..])));
//! ob.finish(Verdict::Retry); // the uplink is down: `a` stays first
//! assert_eq!(ob.current().map(|(id, _)| id), Some(a));
//! assert_eq!(ob.finish(Verdict::Stored), Some(a));
//! assert_eq!(ob.current().map(|(id, _)| id), Some(b));
//! ```
//!
//! A record in the ring is the flag (4 bytes, little-endian), the tag and key lengths (2 bytes
//! each), then tags, keys and body. A record never wraps around the end of the ring (the
//! unused tail is skipped until the oldest record there leaves), so a full ring may have room
//! for a small message and not for a large one.

use heapless::Deque;

/// Bytes of a record before its tags.
const RECORD_HEAD: usize = 8;

/// What [`Outbox::push`] does when the new message does not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Overflow {
    /// Drop the oldest waiting messages until it fits (never the one being sent).
    DropOldest,
    /// Refuse the new message ([`PushError::Full`]).
    RefuseNew,
}

/// A message's number in its outbox (from 0, in push order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct OutboxId(pub u32);

/// A message to store (and, from [`Outbox::current`], one to send).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutMessage<'m> {
    /// Body bytes.
    pub body: &'m [u8],
    /// `TAGS` property.
    pub tags: Option<&'m str>,
    /// `KEYS` property.
    pub keys: Option<&'m str>,
    /// Application flag.
    pub flag: i32,
}

/// Why [`Outbox::push`] did not store a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PushError {
    /// Larger than the ring or the staging buffer (or a tag/key over 65,535 bytes): it could
    /// never be stored.
    TooLarge,
    /// No room, and the policy is [`Overflow::RefuseNew`].
    Full,
}

impl core::fmt::Display for PushError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            PushError::TooLarge => "message larger than the outbox can hold",
            PushError::Full => "outbox full",
        })
    }
}

impl core::error::Error for PushError {}

/// How the send of [`Outbox::current`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Verdict {
    /// The broker stored it: done.
    Stored,
    /// It failed in a way a later attempt may not (no route, connection lost, broker busy):
    /// it stays current.
    Retry,
    /// It failed for good (the broker refused it): done.
    Failed,
}

/// Counters since the outbox was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct OutboxStats {
    /// Messages accepted by [`Outbox::push`].
    pub pushed: u32,
    /// Messages refused by [`Outbox::push`] (too large, or full under [`Overflow::RefuseNew`]).
    pub refused: u32,
    /// Messages dropped by [`Overflow::DropOldest`].
    pub dropped: u32,
    /// Messages finished as [`Verdict::Stored`].
    pub stored: u32,
    /// Messages finished as [`Verdict::Failed`].
    pub failed: u32,
    /// [`Verdict::Retry`]s.
    pub retries: u32,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    start: usize,
    len: usize,
}

/// The messages being sent (one, or a batch): their records are in the staging buffer, each
/// after its length (4 bytes, little-endian).
#[derive(Clone, Copy, Debug)]
struct Current {
    /// The first one's id (the others follow it).
    id: OutboxId,
    count: u16,
    /// Staging bytes in use.
    bytes: usize,
    attempts: u16,
}

/// Bytes before each record in the staging buffer (its length).
const STAGED_HEAD: usize = 4;

/// The messages being sent, as [`Outbox::current_batch`] gives them: consecutive ids from
/// [`Batch::first`], oldest first.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    first: OutboxId,
    count: u16,
    staged: &'a [u8],
}

impl<'a> Batch<'a> {
    /// The first message's id.
    pub fn first(&self) -> OutboxId {
        self.first
    }

    /// How many messages.
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// Always false (a batch has at least one message).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The messages with their ids, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (OutboxId, OutMessage<'a>)> + 'a {
        let (first, mut rest) = (self.first, self.staged);
        (0..u32::from(self.count)).map_while(move |i| {
            let (len, tail) = rest.split_at_checked(STAGED_HEAD)?;
            let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
            let (rec, tail) = tail.split_at_checked(len)?;
            rest = tail;
            Some((OutboxId(first.0.wrapping_add(i)), parse(rec)?))
        })
    }
}

/// A ring record's fields.
fn parse(rec: &[u8]) -> Option<OutMessage<'_>> {
    let (head, rest) = rec.split_at_checked(RECORD_HEAD)?;
    let flag = i32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let tl = usize::from(u16::from_le_bytes([head[4], head[5]]));
    let kl = usize::from(u16::from_le_bytes([head[6], head[7]]));
    let (t, rest) = rest.split_at_checked(tl)?;
    let (k, body) = rest.split_at_checked(kl)?;
    // Both were `&str` when stored.
    let text = |b| {
        core::str::from_utf8(b)
            .ok()
            .filter(|s: &&str| !s.is_empty())
    };
    Some(OutMessage {
        body,
        tags: text(t),
        keys: text(k),
        flag,
    })
}

/// Messages waiting to be sent, at most `N` (see the [module docs](self)).
#[derive(Debug)]
pub struct Outbox<'b, const N: usize> {
    ring: &'b mut [u8],
    staging: &'b mut [u8],
    slots: Deque<Slot, N>,
    current: Option<Current>,
    next_id: u32,
    overflow: Overflow,
    stats: OutboxStats,
}

impl<'b, const N: usize> Outbox<'b, N> {
    /// An empty outbox storing messages in `ring` and sending each from `staging` (which must
    /// hold the largest message: record head, tags, keys and body).
    pub fn new(ring: &'b mut [u8], staging: &'b mut [u8], overflow: Overflow) -> Self {
        Outbox {
            ring,
            staging,
            slots: Deque::new(),
            current: None,
            next_id: 0,
            overflow,
            stats: OutboxStats::default(),
        }
    }

    /// Stores `m` behind every waiting message. Under [`Overflow::DropOldest`] the oldest
    /// waiting messages make room, each reported to `dropped` (in order) before this returns.
    ///
    /// # Errors
    /// [`PushError::TooLarge`] for a message this outbox can never hold,
    /// [`PushError::Full`] when there is no room under [`Overflow::RefuseNew`].
    pub fn push(
        &mut self,
        m: &OutMessage<'_>,
        mut dropped: impl FnMut(OutboxId),
    ) -> Result<OutboxId, PushError> {
        let (tags, keys) = (m.tags.unwrap_or(""), m.keys.unwrap_or(""));
        let len = RECORD_HEAD + tags.len() + keys.len() + m.body.len();
        let fits_ever = len <= self.ring.len() && len + STAGED_HEAD <= self.staging.len();
        let (Ok(tl), Ok(kl), true) = (
            u16::try_from(tags.len()),
            u16::try_from(keys.len()),
            fits_ever,
        ) else {
            self.stats.refused += 1;
            return Err(PushError::TooLarge);
        };
        let start = loop {
            if !self.slots.is_full()
                && let Some(start) = self.place(len)
            {
                break start;
            }
            let old = match self.overflow {
                Overflow::DropOldest => self.slots.pop_front(),
                Overflow::RefuseNew => None,
            };
            // An empty ring holds any record that fits it: only RefuseNew ends without one.
            if old.is_none() {
                self.stats.refused += 1;
                return Err(PushError::Full);
            };
            self.stats.dropped += 1;
            // Slots hold consecutive ids ending just before `next_id`.
            let gone = self.next_id.wrapping_sub(self.slots.len() as u32 + 1);
            dropped(OutboxId(gone));
        };
        let id = OutboxId(self.next_id);
        let rec = self
            .ring
            .get_mut(start..start + len)
            .ok_or(PushError::Full)?;
        let (head, rest) = rec.split_at_mut(RECORD_HEAD);
        head[..4].copy_from_slice(&m.flag.to_le_bytes());
        head[4..6].copy_from_slice(&tl.to_le_bytes());
        head[6..8].copy_from_slice(&kl.to_le_bytes());
        let (t, rest) = rest.split_at_mut(tags.len());
        let (k, b) = rest.split_at_mut(keys.len());
        t.copy_from_slice(tags.as_bytes());
        k.copy_from_slice(keys.as_bytes());
        b.copy_from_slice(m.body);
        // Not full: checked above.
        let _ = self.slots.push_back(Slot { start, len });
        self.next_id = self.next_id.wrapping_add(1);
        self.stats.pushed += 1;
        Ok(id)
    }

    /// Where a record of `len` bytes fits behind the newest one, if it does.
    fn place(&self, len: usize) -> Option<usize> {
        let cap = self.ring.len();
        let (Some(first), Some(last)) = (self.slots.front(), self.slots.back()) else {
            return (len <= cap).then_some(0);
        };
        let (head, tail) = (first.start, last.start + last.len);
        if tail > head {
            // [head, tail) in use: room at the end, else at the start.
            if cap - tail >= len {
                Some(tail)
            } else {
                (head >= len).then_some(0)
            }
        } else {
            // Wrapped: [tail, head) is free.
            (head - tail >= len).then_some(tail)
        }
    }

    /// The message to send now: the one a [`Verdict::Retry`] left current, else the oldest
    /// waiting one (moved out of the ring). `None` when there is none. Its attempts so far are
    /// [`Outbox::attempts`]. (After [`Outbox::current_batch`], the first of that batch.)
    pub fn current(&mut self) -> Option<(OutboxId, OutMessage<'_>)> {
        self.current_batch(1)?.iter().next()
    }

    /// The messages to send now as one batch: those a [`Verdict::Retry`] left current (the
    /// same batch again), else up to `max` of the oldest waiting ones (at least one), as many
    /// as the staging buffer holds, moved out of the ring. [`Outbox::finish`] then ends or
    /// keeps them all together. `None` when nothing waits.
    pub fn current_batch(&mut self, max: usize) -> Option<Batch<'_>> {
        if self.current.is_none() {
            // Slots hold consecutive ids ending just before `next_id`.
            let first = self.next_id.wrapping_sub(self.slots.len() as u32);
            let (mut count, mut at) = (0u16, 0);
            while usize::from(count) < max.max(1) {
                let Some(&s) = self.slots.front() else {
                    break;
                };
                let end = at + STAGED_HEAD + s.len;
                let (Some(src), Some(dst), Ok(len)) = (
                    self.ring.get(s.start..s.start + s.len),
                    self.staging.get_mut(at..end),
                    u32::try_from(s.len),
                ) else {
                    // Full (`push` made sure that any one record fits alone).
                    break;
                };
                dst[..STAGED_HEAD].copy_from_slice(&len.to_le_bytes());
                dst[STAGED_HEAD..].copy_from_slice(src);
                self.slots.pop_front();
                (count, at) = (count + 1, end);
            }
            if count == 0 {
                return None;
            }
            self.current = Some(Current {
                id: OutboxId(first),
                count,
                bytes: at,
                attempts: 0,
            });
        }
        let c = self.current?;
        Some(Batch {
            first: c.id,
            count: c.count,
            staged: self.staging.get(..c.bytes)?,
        })
    }

    /// Attempts finished with [`Verdict::Retry`] on the current message.
    pub fn attempts(&self) -> u16 {
        self.current.map_or(0, |c| c.attempts)
    }

    /// How the send of the current message (or batch) ended. Returns its id (a batch's first)
    /// when that ends it ([`Verdict::Stored`], [`Verdict::Failed`]: every message of the batch);
    /// `None` after [`Verdict::Retry`] or when no message is current.
    pub fn finish(&mut self, v: Verdict) -> Option<OutboxId> {
        let c = self.current.as_mut()?;
        match v {
            Verdict::Retry => {
                c.attempts = c.attempts.saturating_add(1);
                self.stats.retries += 1;
                None
            }
            Verdict::Stored | Verdict::Failed => {
                let (id, n) = (c.id, u32::from(c.count));
                self.current = None;
                if v == Verdict::Stored {
                    self.stats.stored += n;
                } else {
                    self.stats.failed += n;
                }
                Some(id)
            }
        }
    }

    /// Messages waiting, the current ones included.
    pub fn len(&self) -> usize {
        self.slots.len() + self.current.map_or(0, |c| usize::from(c.count))
    }

    /// Whether no message waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ring bytes in use (the current message's record is in the staging buffer, not here).
    pub fn bytes_used(&self) -> usize {
        self.slots.iter().map(|s| s.len).sum()
    }

    /// The counters.
    pub fn stats(&self) -> OutboxStats {
        self.stats
    }
}

#[cfg(test)]
mod tests;
