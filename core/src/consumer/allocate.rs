//! Queue allocation (docs/protocol/STRATEGY.md §9.5): Java's `MessageQueue` order and the
//! strategies of `org.apache.rocketmq.client.consumer.rebalance` (averagely, by circle,
//! consistent hash), each checked against the Java class's output on the same inputs
//! (`tests/java/AllocateOracle.java`).

use core::cmp::Ordering;
use core::fmt;
use core::ops::Range;

use heapless::Vec;

/// A message queue as Java's `MessageQueue`, ordered as its `compareTo`: topic, then broker
/// name (both `String.compareTo`, UTF-16 order), then queue id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MessageQueue<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Broker name.
    pub broker_name: &'a str,
    /// Queue id.
    pub queue_id: i32,
}

impl<'a> MessageQueue<'a> {
    /// A queue.
    pub const fn new(topic: &'a str, broker_name: &'a str, queue_id: i32) -> Self {
        MessageQueue {
            topic,
            broker_name,
            queue_id,
        }
    }
}

/// Java `String.compareTo`: lexicographic over UTF-16 code units.
pub fn java_str_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

impl Ord for MessageQueue<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        java_str_cmp(self.topic, other.topic)
            .then_with(|| java_str_cmp(self.broker_name, other.broker_name))
            .then_with(|| self.queue_id.cmp(&other.queue_id))
    }
}

impl PartialOrd for MessageQueue<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Sorts queues as `Collections.sort(mqAll)` does before allocating.
pub fn sort_queues(queues: &mut [MessageQueue<'_>]) {
    heapsort_by(queues, Ord::cmp);
}

/// Sorts consumer ids as `Collections.sort(cidAll)` does (Java string order).
pub fn sort_consumer_ids(cids: &mut [&str]) {
    heapsort_by(cids, |a, b| java_str_cmp(a, b));
}

/// Sorts `v` by `cmp` (heapsort: O(n log n), in place, not stable). The standard library's
/// sorts are faster on large inputs but take several KiB of flash per element type (each
/// `sort_unstable` instance brings a quicksort and a sorting network); a consumer's rebalance
/// sorts at most a few hundred queues or ids every 20 s, and a gateway cannot spare the flash.
pub fn heapsort_by<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> Ordering) {
    // Sift `root` down within `v[..end]`.
    let mut sift = |v: &mut [T], mut root: usize, end: usize| loop {
        let mut child = 2 * root + 1;
        if child >= end {
            break;
        }
        if child + 1 < end && cmp(&v[child], &v[child + 1]) == Ordering::Less {
            child += 1;
        }
        if cmp(&v[root], &v[child]) != Ordering::Less {
            break;
        }
        v.swap(root, child);
        root = child;
    };
    let n = v.len();
    for root in (0..n / 2).rev() {
        sift(v, root, n);
    }
    for end in (1..n).rev() {
        v.swap(0, end);
        sift(v, 0, end);
    }
}

/// A queue-allocation strategy (the name Java's `getName()` gives in [`Self::name`]). Members of
/// one group must allocate alike, or queues go twice or not at all.
#[derive(Clone, Copy, Debug, Default)]
pub enum AllocateStrategy {
    /// `AllocateMessageQueueAveragely` ("AVG", the default): contiguous blocks.
    #[default]
    Averagely,
    /// `AllocateMessageQueueAveragelyByCircle` ("AVG_BY_CIRCLE"): every C-th queue.
    AveragelyByCircle,
    /// `AllocateMessageQueueConsistentHash` ("CONSISTENT_HASH"): every consumer id stands on a
    /// hash ring at `virtual_nodes` points, and a queue goes to the first point at or after its
    /// own hash (wrapping), so that few queues move when members come and go. The hash is the
    /// first 4 bytes of MD5, big-endian: of `"<cid>-<i>"` for a point, of Java's
    /// `MessageQueue.toString()` for a queue (see [`consistent_hash_owner`]).
    ConsistentHash {
        /// Points per consumer id (Java's `virtualNodeCnt`, [`VIRTUAL_NODES`] by default; an
        /// `int` there, at most 255 here); 0 places no queue.
        virtual_nodes: u8,
    },
    /// `AllocateMessageQueueByMachineRoom` ("MACHINE_ROOM"): only the queues of brokers named
    /// `<room>@<name>` whose room `consumes` accepts (Java's `consumeridcs`); of those, each
    /// member takes a block of `queues / members`, and the first `queues % members` members
    /// one more from the end.
    MachineRoom {
        /// Whether the group consumes the brokers of this room.
        consumes: fn(&str) -> bool,
    },
    /// `AllocateMachineRoomNearby` ("MACHINE_ROOM_NEARBY-AVG", "-AVG_BY_CIRCLE"): the queues
    /// of a room go to the members in that room, shared by `inner`; the queues of a room
    /// without members go to every member, shared by `inner` too.
    MachineRoomNearby {
        /// How a room's queues are shared.
        inner: Nearby,
        /// The room of a broker, from its name (Java's `MachineRoomResolver.brokerDeployIn`,
        /// which gets the queue); never empty.
        broker_room: fn(&str) -> &str,
        /// The room of a consumer, from its id (`consumerDeployIn`); never empty.
        consumer_room: fn(&str) -> &str,
    },
    /// `AllocateMessageQueueByConfig` ("CONFIG"): the queues `takes` accepts, whatever the
    /// other members take (Java's fixed `messageQueueList`; here a filter of the route's
    /// queues, so a configured queue the route does not have is not pulled).
    ByConfig {
        /// Whether this consumer takes the queue.
        takes: fn(&MessageQueue<'_>) -> bool,
    },
}

/// How [`AllocateStrategy::MachineRoomNearby`] shares a room's queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Nearby {
    /// As [`AllocateStrategy::Averagely`].
    Averagely,
    /// As [`AllocateStrategy::AveragelyByCircle`].
    AveragelyByCircle,
}

impl AllocateStrategy {
    /// Java's name of the strategy (`AllocateMessageQueueStrategy.getName()`).
    pub const fn name(&self) -> &'static str {
        match self {
            AllocateStrategy::Averagely => "AVG",
            AllocateStrategy::AveragelyByCircle => "AVG_BY_CIRCLE",
            AllocateStrategy::ConsistentHash { .. } => "CONSISTENT_HASH",
            AllocateStrategy::MachineRoom { .. } => "MACHINE_ROOM",
            AllocateStrategy::MachineRoomNearby {
                inner: Nearby::Averagely,
                ..
            } => "MACHINE_ROOM_NEARBY-AVG",
            AllocateStrategy::MachineRoomNearby {
                inner: Nearby::AveragelyByCircle,
                ..
            } => "MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE",
            AllocateStrategy::ByConfig { .. } => "CONFIG",
        }
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for AllocateStrategy {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{=str}", self.name());
    }
}

/// Java's default number of points per consumer id of [`AllocateStrategy::ConsistentHash`].
pub const VIRTUAL_NODES: u8 = 10;

/// What [`allocate`] knows a queue by: its Java `MessageQueue`.
pub trait AsMessageQueue {
    /// The queue.
    fn message_queue(&self) -> MessageQueue<'_>;
}

impl AsMessageQueue for MessageQueue<'_> {
    fn message_queue(&self) -> MessageQueue<'_> {
        *self
    }
}

impl<X> AsMessageQueue for (MessageQueue<'_>, X) {
    fn message_queue(&self) -> MessageQueue<'_> {
        self.0
    }
}

/// The ring hash of Java's `ConsistentHashRouter.MD5Hash`: MD5 of the UTF-8 bytes of the
/// concatenated `parts`, its first 4 bytes as a big-endian number.
fn ring_hash(parts: &[&[u8]]) -> u32 {
    let mut h = crate::md5::Md5::default();
    for p in parts {
        h.update(p);
    }
    let [a, b, c, d, ..] = h.finish();
    u32::from_be_bytes([a, b, c, d])
}

/// The decimal text of `v` in `buf`.
fn decimal(v: i64, buf: &mut [u8; 20]) -> &[u8] {
    let n = crate::json::fmt_i64(v, buf);
    buf.get(buf.len() - n..).unwrap_or(&[])
}

/// The ring hash of queue `q`: of `MessageQueue [topic=T, brokerName=B, queueId=N]`.
fn queue_hash(q: MessageQueue<'_>) -> u32 {
    let mut digits = [0u8; 20];
    let id = decimal(i64::from(q.queue_id), &mut digits);
    ring_hash(&[
        b"MessageQueue [topic=",
        q.topic.as_bytes(),
        b", brokerName=",
        q.broker_name.as_bytes(),
        b", queueId=",
        id,
        b"]",
    ])
}

/// Queues placed per pass over the ring's points (each pass hashes every point once).
const RING_CHUNK: usize = 32;

/// [`AllocateStrategy::ConsistentHash`]: the index into `cids` of the owner of each queue of
/// `queues`, handed to `owner(queue index, cid index)`. As Java's `ConsistentHashRouter`: the
/// points are put in `cids` order, `i` ascending, into a sorted map where a point of an equal
/// hash replaces the earlier one; a queue goes to the point with the least hash at or above its
/// own, else to the point with the least hash. An id listed again (two connections of one
/// client) adds its points after the ones it has (`"<cid>-10"`.. for the second copy of 10
/// points: Java's `getExistingReplicas`); `cids` is sorted, so copies are next to each other.
/// No ring is stored: each pass over the points places 32 queues.
pub fn consistent_hash_owner<T: AsMessageQueue>(
    queues: &[T],
    cids: &[&str],
    virtual_nodes: u8,
    mut owner: impl FnMut(usize, usize),
) {
    let points = cids.len().saturating_mul(usize::from(virtual_nodes));
    let point = |p: usize| {
        let (c, i) = (
            p / usize::from(virtual_nodes),
            p % usize::from(virtual_nodes),
        );
        let mut digits = [0u8; 20];
        let id = cids.get(c).copied().unwrap_or("");
        let copies = cids.get(..c).map_or(0, |before| {
            before.iter().rev().take_while(|x| **x == id).count()
        });
        let index = i.saturating_add(copies.saturating_mul(usize::from(virtual_nodes)));
        ring_hash(&[id.as_bytes(), b"-", decimal(index as i64, &mut digits)])
    };
    for (start, chunk) in (0..).step_by(RING_CHUNK).zip(queues.chunks(RING_CHUNK)) {
        let mut want = [0u32; RING_CHUNK];
        for (w, q) in want.iter_mut().zip(chunk) {
            *w = queue_hash(q.message_queue());
        }
        // Per queue the best point at or above its hash; and the least point of all. A later
        // point of an equal hash wins (`>=` on the order), as a map's `put` replaces.
        let mut at_or_above: [Option<(u32, usize)>; RING_CHUNK] = [None; RING_CHUNK];
        let mut least: Option<(u32, usize)> = None;
        for p in 0..points {
            let h = point(p);
            if least.is_none_or(|(lh, _)| h <= lh) {
                least = Some((h, p));
            }
            for (best, w) in at_or_above.iter_mut().zip(&want).take(chunk.len()) {
                if h >= *w && best.is_none_or(|(bh, _)| h <= bh) {
                    *best = Some((h, p));
                }
            }
        }
        for (k, best) in at_or_above.iter().take(chunk.len()).enumerate() {
            if let Some((_, p)) = best.or(least) {
                owner(start + k, p / usize::from(virtual_nodes));
            }
        }
    }
}

/// Why an allocation failed (Java throws `IllegalArgumentException` for the first three).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum AllocateError {
    /// `currentCID` is empty.
    EmptyConsumerId,
    /// `mqAll` is empty.
    NoQueues,
    /// `cidAll` is empty.
    NoConsumers,
    /// The output storage is too small for this consumer's share.
    Full,
    /// [`AllocateStrategy::MachineRoomNearby`]: a broker's or a consumer's room is empty (Java
    /// throws `IllegalArgumentException`).
    NoMachineRoom,
}

impl fmt::Display for AllocateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AllocateError::EmptyConsumerId => "current consumer id is empty",
            AllocateError::NoQueues => "no message queues to allocate",
            AllocateError::NoConsumers => "no consumer ids",
            AllocateError::Full => "allocation output storage is full",
            AllocateError::NoMachineRoom => "a broker or consumer has no machine room",
        })
    }
}

impl core::error::Error for AllocateError {}

/// `AllocateMessageQueueAveragely` on indices: the contiguous range of queue indices consumer
/// `index` of `consumers` gets out of `queues` (empty when it gets none). `None` when
/// `consumers == 0` or `index >= consumers`.
pub fn averagely_range(queues: usize, consumers: usize, index: usize) -> Option<Range<usize>> {
    if index >= consumers {
        return None;
    }
    let modulo = queues % consumers;
    let extra = modulo > 0 && index < modulo;
    let avg = if queues <= consumers {
        1
    } else if extra {
        queues / consumers + 1
    } else {
        queues / consumers
    };
    let start = if extra {
        index.saturating_mul(avg)
    } else {
        index.saturating_mul(avg).saturating_add(modulo)
    };
    let range = avg.min(queues.saturating_sub(start));
    Some(start..start.saturating_add(range))
}

/// `AllocateMessageQueueAveragelyByCircle` on indices: queue indices `index, index+C, …` below
/// `queues`. Empty when `consumers == 0` or `index >= consumers`.
pub fn by_circle_indices(
    queues: usize,
    consumers: usize,
    index: usize,
) -> impl Iterator<Item = usize> {
    let (start, step) = if consumers == 0 || index >= consumers {
        (queues, 1)
    } else {
        (index, consumers)
    };
    (start..queues).step_by(step)
}

/// Allocates this consumer's queues, as Java's strategies do: `queues` and `cids` must already
/// be sorted ([`sort_queues`], [`sort_consumer_ids`]) — Java's `RebalanceImpl` sorts both before
/// calling the strategy. `me` is located with `indexOf` (first match). When `me` is not in
/// `cids`, the result is empty and `Ok` (Java logs "\[BUG\]").
///
/// `out` is cleared first.
///
/// # Errors
/// [`AllocateError`]: empty `me`, `queues` or `cids`, or `out` too small.
pub fn allocate<T: Clone + AsMessageQueue, const N: usize>(
    strategy: AllocateStrategy,
    queues: &[T],
    cids: &[&str],
    me: &str,
    out: &mut Vec<T, N>,
) -> Result<(), AllocateError> {
    out.clear();
    if let AllocateStrategy::ByConfig { takes } = strategy {
        // Java returns its list without any check.
        for q in queues.iter().filter(|q| takes(&q.message_queue())) {
            out.push(q.clone()).map_err(|_| AllocateError::Full)?;
        }
        return Ok(());
    }
    if me.is_empty() {
        return Err(AllocateError::EmptyConsumerId);
    }
    if queues.is_empty() {
        return Err(AllocateError::NoQueues);
    }
    if cids.is_empty() {
        return Err(AllocateError::NoConsumers);
    }
    let Some(index) = cids.iter().position(|c| *c == me) else {
        return Ok(());
    };
    let mut push = |i: usize| -> Result<(), AllocateError> {
        let q = queues.get(i).ok_or(AllocateError::NoQueues)?;
        out.push(q.clone()).map_err(|_| AllocateError::Full)
    };
    match strategy {
        AllocateStrategy::Averagely => {
            for i in averagely_range(queues.len(), cids.len(), index).unwrap_or(0..0) {
                push(i)?;
            }
        }
        AllocateStrategy::AveragelyByCircle => {
            for i in by_circle_indices(queues.len(), cids.len(), index) {
                push(i)?;
            }
        }
        AllocateStrategy::MachineRoom { consumes } => {
            let in_room = |q: &T| {
                // Java: `split("@")` into exactly two parts, trailing empty parts dropped.
                let b = q.message_queue().broker_name.trim_end_matches('@');
                let mut parts = b.split('@');
                let room = parts.next().unwrap_or("");
                matches!((parts.next(), parts.next()), (Some(_), None)) && consumes(room)
            };
            let n = queues.iter().filter(|q| in_room(q)).count();
            let (c, block) = (cids.len(), n / cids.len());
            let start = block * index;
            let extra = (n % c > index).then_some(index + block * c);
            for (k, q) in queues.iter().filter(|q| in_room(q)).enumerate() {
                if (start..start + block).contains(&k) || extra == Some(k) {
                    out.push(q.clone()).map_err(|_| AllocateError::Full)?;
                }
            }
        }
        AllocateStrategy::MachineRoomNearby {
            inner,
            broker_room,
            consumer_room,
        } => nearby(inner, broker_room, consumer_room, queues, cids, me, out)?,
        AllocateStrategy::ByConfig { .. } => {}
        AllocateStrategy::ConsistentHash { virtual_nodes } => {
            // Java compares the owner's id with `me` (equal ids are one owner).
            let mut r = Ok(());
            consistent_hash_owner(queues, cids, virtual_nodes, |q, c| {
                if r.is_ok() && cids.get(c) == Some(&me) {
                    r = push(q);
                }
            });
            r?;
        }
    }
    Ok(())
}

/// [`AllocateStrategy::MachineRoomNearby`] (see there), on indices: no map of rooms is kept.
#[allow(clippy::too_many_arguments)]
fn nearby<T: Clone + AsMessageQueue, const N: usize>(
    inner: Nearby,
    broker_room: fn(&str) -> &str,
    consumer_room: fn(&str) -> &str,
    queues: &[T],
    cids: &[&str],
    me: &str,
    out: &mut Vec<T, N>,
) -> Result<(), AllocateError> {
    fn room<T: AsMessageQueue>(broker_room: fn(&str) -> &str, q: &T) -> &str {
        broker_room(q.message_queue().broker_name)
    }
    let room_of = |q| room(broker_room, q);
    if queues.iter().any(|q| room_of(q).is_empty())
        || cids.iter().any(|c| consumer_room(c).is_empty())
    {
        return Err(AllocateError::NoMachineRoom);
    }
    // The queues of `room` shared among `members` (a filter of `cids`) as `inner` does: the
    // share of the first member equal to `me`.
    let mut share = |room: &str, members: &dyn Fn(&str) -> bool| -> Result<(), AllocateError> {
        let c = cids.iter().filter(|c| members(c)).count();
        let Some(index) = cids.iter().filter(|c| members(c)).position(|c| *c == me) else {
            return Ok(());
        };
        let n = queues.iter().filter(|q| room_of(q) == room).count();
        let range = averagely_range(n, c, index).unwrap_or(0..0);
        for (k, q) in queues.iter().filter(|q| room_of(q) == room).enumerate() {
            let mine = match inner {
                Nearby::Averagely => range.contains(&k),
                Nearby::AveragelyByCircle => k % c == index,
            };
            if mine {
                out.push(q.clone()).map_err(|_| AllocateError::Full)?;
            }
        }
        Ok(())
    };
    let mine = consumer_room(me);
    share(mine, &|c| consumer_room(c) == mine)?;
    // Then every other room without a member, for everyone, in Java's room order (a TreeMap:
    // `String.compareTo`).
    let mut last: Option<&str> = None;
    loop {
        let next = queues
            .iter()
            .map(room_of)
            .filter(|r| last.is_none_or(|l| java_str_cmp(r, l) == Ordering::Greater))
            .min_by(|a, b| java_str_cmp(a, b));
        let Some(room) = next else { break };
        last = Some(room);
        if room != mine && !cids.iter().any(|c| consumer_room(c) == room) {
            share(room, &|_| true)?;
        }
    }
    Ok(())
}
