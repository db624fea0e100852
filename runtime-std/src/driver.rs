//! The tokio driver of the core client ([`rmq_core::client::Client`]).
//!
//! Every protocol decision is the core's: NameServer failover, routes and the TBW102 fallback,
//! queue selection, retries within one deadline, request correlation, heartbeats, ACL signing,
//! the consumer's schedules, and what every request a broker sends gets for an answer. This
//! module owns what the core cannot: sockets, the clock, and the waiters.
//!
//! - One [`Driver`] per client holds the core client behind one lock, the encoded properties
//!   and bodies of the sends in flight, and one connection per [`Peer`].
//! - A driver task (quinn's `ConnectionDriver` shape) runs `handle_timeout`, drains
//!   `poll_transmit` into the connections, hands out events and sleeps until `poll_timeout`
//!   or a wake-up.
//! - Each connection's task hands every frame it reads to the client (`handle_frame`) and
//!   reports its end (`handle_closed`); completions are handed out right there.
//! - Connections open lazily, the first time a transmit names a peer; frames queue while the
//!   connection opens. A failed connect, a lost connection or a malformed frame fails what was
//!   written to it at once (the session's plans retry elsewhere).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering as AtomicOrdering};
use std::sync::{Arc, Weak};

use bytes::{Bytes, BytesMut};
use rmq_core::acl::Credentials;
use rmq_core::client::{
    Attached, Client, DirectOutcome, Event, Inbound, Lend as ClientLend, NackKey, NackOutcome,
    NackedMessage, NoConsumer,
};
use rmq_core::metrics::AtomicHistogram;
use rmq_core::pull_consumer::{Delivery, PullConsumer, PullEvent, QueueKey};
use rmq_core::send_back::{Nack, NackError};
use rmq_core::session::{
    self, Outbound, Peer, SendArgs, SendFailure, SendId, SendReceipt, SubmitError, TopicId,
    Transmit,
};
use rmq_core::time::{Duration as CoreDuration, Instant};
use rmq_core::transaction::EndTransaction;
use rmq_core::transport::TransportError;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::clock;
use crate::config::SecurityConfig;
use crate::conn::{self, Conn, ConnStats, FrameSink};
use crate::consumer::ConsumedMessage;
// FxHash: the keys (topic names, peer ids) are ours, never the network's, so SipHash's DoS
// resistance buys nothing and costs ~20-30 ns per lookup, several lookups per message.
use crate::heap::Heap;
use crate::message::ConnectionError;
use crate::shared::Counters;
use crate::sync::{Mutex, MutexGuard, lock};
use crate::transaction::Check;
use rustc_hash::FxHashMap as FastMap;

/// Topics with a route per client.
pub(crate) const TOPICS: usize = 128;
/// Brokers per client (also the fault table's size).
pub(crate) const BROKERS: usize = 64;
/// Publish queues kept per topic.
pub(crate) const QUEUES: usize = 256;
/// Requests queued or in flight per client.
pub(crate) const REQUESTS: usize = 2048;
/// Sends in progress per client (further sends wait for a slot).
pub(crate) const SENDS: usize = 1024;
/// Bytes of names and addresses in one route.
pub(crate) const ROUTE_STR: usize = 8192;
/// Bytes of encoded heads per shared region (see `State::head`).
const HEADS_CHUNK: usize = 64 * 1024;
/// Room for one request's prefix and header (the properties travel in the header).
const TX_BUF: usize = 256 * 1024;

/// Subscriptions per consumer.
const SUBS: usize = 64;
/// Queues a consumer owns at once.
const OWNED: usize = 256;
/// Messages in flight per owned queue (Java's flow control delays pulls past 1,000).
const TRACK: usize = 1024;
/// Consumer requests in flight.
const CALLS: usize = 1024;
/// Consumers per group.
const CIDS: usize = 1024;

/// A consumer's decisions (the core's).
pub(crate) type Machine = PullConsumer<SUBS, OWNED, TRACK, CALLS, CIDS, QUEUES, CALLS, Heap>;
/// The client session.
pub(crate) type Session =
    session::Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, session::Full, Heap>;
/// The core client with consumer `C`.
pub(crate) type Core<C> =
    Client<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, session::Full, Heap, C>;

/// Where a consumer's messages and events go.
pub(crate) trait Sink<C>: Send {
    /// A message of a pull answer; its slices borrow `frame`, which they may share.
    fn message(&mut self, frame: &Bytes, d: Delivery<'_, '_>);
    /// CONSUME_MESSAGE_DIRECTLY from `peer`: run the handler, answer with
    /// [`Driver::answer_direct`].
    fn direct(&mut self, peer: Peer, opaque: i32, frame: &Bytes, d: Delivery<'_, '_>);
    /// An event of the consumer (it may act on `c`).
    fn event(&mut self, e: PullEvent, c: &mut C, s: &Session);
    /// A nacked message handed out again ([`Event::Redeliver`]).
    fn redeliver(&mut self, m: ConsumedMessage);
    /// After a run of events.
    fn flush(&mut self);
}

/// Why a request of the runtime's own ([`Driver::ask`]) got no answer.
#[derive(Debug)]
pub(crate) enum AskError<E> {
    /// It could not be made (no peer to ask, signing, size, every request slot in use).
    Request(E),
    /// Its connection failed or was lost first (with the connection's error, when known).
    Lost(TransportError, Option<ConnectionError>),
    /// No answer before the deadline.
    Timeout,
}

/// How a send ended.
///
/// The failure is boxed: it carries a remark of up to [`session::MAX_REMARK`] bytes, and an
/// unboxed one would make every successful outcome that large too, moved through the
/// oneshot and the sender's future on every send.
pub(crate) type Outcome = Result<SendReceipt, Box<SendFailure>>;

/// How a send ended, the name of the broker that stored it (empty on failure), read under the
/// lock that hands the outcome out, so the sender needs no second one, and its recall handle
/// (a timer message on 5.3.2+).
pub(crate) type Done = (Outcome, String, Option<String>);

/// A queue selector: given the topic's queue count, the index of the queue to send to.
pub(crate) type Chooser = Box<dyn FnOnce(usize) -> usize + Send>;

struct Pending {
    /// The session's whole id (its slot's generation included).
    id: u32,
    properties: String,
    body: Bytes,
    /// Asked when the session wants the queue chosen ([`Event::ChooseQueue`]).
    choose: Option<Chooser>,
    done: oneshot::Sender<Done>,
    /// The broker's recall handle, once its response came ([`Inbound::RecallHandle`]).
    recall: Option<String>,
    _slot: Room,
}

impl Pending {
    /// Wakes the sender with its outcome (and frees its slot and buffers).
    fn finish(self, outcome: Outcome, broker: String) {
        let _ = self.done.send((outcome, broker, self.recall));
    }
}

/// The sends in flight, indexed by [`SendId::slot`] (below `SENDS`): no hashing on the send
/// path; an entry answers only to its whole id.
#[derive(Default)]
struct Sends {
    slots: Vec<Option<Pending>>,
}

impl Sends {
    fn get(&self, id: u32) -> Option<&Pending> {
        self.slots
            .get(SendId(id).slot())?
            .as_ref()
            .filter(|p| p.id == id)
    }

    fn get_mut(&mut self, id: u32) -> Option<&mut Pending> {
        self.slots
            .get_mut(SendId(id).slot())?
            .as_mut()
            .filter(|p| p.id == id)
    }

    fn insert(&mut self, p: Pending) {
        let i = SendId(p.id).slot();
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        if let Some(s) = self.slots.get_mut(i) {
            *s = Some(p);
        }
    }

    fn remove(&mut self, id: u32) -> Option<Pending> {
        let s = self.slots.get_mut(SendId(id).slot())?;
        if s.as_ref().is_some_and(|p| p.id == id) {
            s.take()
        } else {
            None
        }
    }
}

/// One frame on its way to a connection.
struct Frame {
    head: Bytes,
    body: Bytes,
    opaque: i32,
    report_written: bool,
}

enum Link {
    /// Opening (connection id); frames wait here.
    Opening(u32, Vec<Frame>),
    Up(Arc<Conn>),
}

/// What a caller waits for: the client's events that end a wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// A lookup of this topic ended (`true`: a route).
    Route(TopicId),
    /// Every heartbeat was answered or failed.
    Heartbeats,
    /// Every UNREGISTER_CLIENT was answered or failed.
    Unregistered,
    /// The consumer's start is done.
    Started,
    /// The rebalance round asked for is applied.
    Rebalanced,
    /// The commits asked for are answered.
    Committed,
    /// Orderly: the broker locked this queue (and lease) for us.
    Locked(QueueKey, u32),
}

/// A nacked message kept until its nack ends (the client lends it for the resend).
struct Kept {
    msg: ConsumedMessage,
    done: Option<oneshot::Sender<NackOutcome>>,
}

/// What a consumer's client lends besides the sends: its heartbeat body and the running
/// info's properties and handler times.
#[derive(Default)]
pub(crate) struct Extras {
    pub(crate) heartbeat: Option<Vec<u8>>,
    pub(crate) running: Vec<(String, String)>,
    pub(crate) handler: Option<Arc<AtomicHistogram>>,
}

struct State<C: Attached> {
    client: Box<Core<C>>,
    /// Where frames are encoded (under the lock, by whoever flushes).
    buf: Vec<u8>,
    /// Where encoded heads are kept until written: one allocation shared by many frames
    /// (each a [`Bytes`] slice of it), not one per frame.
    heads: BytesMut,
    extras: Extras,
    /// Where a consumer's messages go; `None` for a producer.
    sink: Option<Box<dyn Sink<C>>>,
    /// [`Driver::close`] ran: no new connection.
    stopped: bool,
    /// The NameServers, as the session's `Peer::NameServer` indices name them.
    namesrv_addr: Vec<String>,
    topics: FastMap<String, TopicId>,
    sends: Sends,
    links: FastMap<Peer, Link>,
    /// The last closed connection per peer (diagnostics).
    closed: HashMap<Peer, Arc<Conn>>,
    /// Why the last connection to a peer failed (cleared when one opens).
    causes: HashMap<Peer, ConnectionError>,
    /// Who waits for which event (`true`: it happened as hoped).
    waiters: Vec<(Wait, oneshot::Sender<bool>)>,
    /// The nacked messages on their way.
    nacked: FastMap<NackKey, Kept>,
    /// Where a transactional producer's check-backs go (`None`: dropped).
    checks: Option<tokio::sync::mpsc::UnboundedSender<Check>>,
    /// The requests waiting for their reply, by correlation id.
    replies: FastMap<String, oneshot::Sender<ConsumedMessage>>,
    /// Why the consumer's start failed ([`Event::StartFailed`]: the topic and code, and the
    /// remark of the broker's refusal of its SQL92 check).
    start_failed: Option<(TopicId, i32, String)>,
    /// The remarks of the SQL92 checks refused (by topic) until the start decides.
    check_remarks: Vec<(TopicId, String)>,
    /// The requests of the runtime's own waiting for their answer frame ([`Driver::ask`]).
    calls: FastMap<i32, oneshot::Sender<Result<Bytes, TransportError>>>,
    /// The last refusal of a consumer's request ([`Health::last_refusal`]).
    refused: Option<Refusal>,
    /// The deadline the driver task sleeps until (set by its last step; `None`: no deadline,
    /// or the task has not run yet). A send whose deadlines are all later needs no wake-up.
    armed: Option<Instant>,
    /// While a connection hands in its frames: the sends they ended, woken after the lock is
    /// released (a wake-up can unpark another worker thread, which then wants this lock).
    finished: Option<Vec<(Pending, Outcome, String)>>,
}

impl<C: Attached> State<C> {
    /// The first `n` bytes of `buf` (a frame just encoded), as a slice of `heads`.
    fn head(&mut self, n: usize) -> Bytes {
        let h = self.buf.get(..n).unwrap_or(&[]);
        if self.heads.capacity() - self.heads.len() < h.len() {
            // A fresh region (the old one lives on while its frames are queued).
            self.heads = BytesMut::with_capacity(HEADS_CHUNK.max(h.len()));
        }
        self.heads.extend_from_slice(h);
        self.heads.split().freeze()
    }

    /// Whether the driver task must wake to re-arm its timer: something is due before the
    /// deadline it sleeps until.
    fn wake_needed(&self) -> bool {
        match (self.armed, self.client.poll_timeout()) {
            (Some(armed), Some(d)) => d < armed,
            (None, Some(_)) => true,
            (_, None) => false,
        }
    }

    /// Keeps and logs a refusal (once while the same one repeats).
    fn refused(&mut self, r: rmq_core::pull_consumer::Refusal, remark: String) {
        if r.of_filter_check() {
            self.check_remarks.push((r.queue.topic, remark.clone()));
        }
        let s = self.client.session();
        let r = Refusal {
            request: r.request.name().unwrap_or("a request"),
            topic: s.topic_name(r.queue.topic).unwrap_or("").to_owned(),
            broker: s.broker_name(r.queue.broker).unwrap_or("").to_owned(),
            queue_id: r.queue.queue_id,
            code: r.code.0,
            remark,
        };
        let last = self.refused.as_ref();
        if last.is_none_or(|l| (l.request, l.code, &l.remark) != (r.request, r.code, &r.remark)) {
            let (topic, broker, queue) = (&r.topic, &r.broker, r.queue_id);
            warn!(
                topic,
                broker,
                queue,
                code = r.code,
                remark = r.remark,
                "{} refused",
                r.request
            );
        }
        self.refused = Some(r);
    }

    /// Ends every wait for `w`.
    fn wake(&mut self, w: Wait, ok: bool) {
        for (_, tx) in self.waiters.extract_if(.., |(x, _)| *x == w) {
            let _ = tx.send(ok);
        }
    }
}

/// What the client borrows to write frames.
struct Lend<'a> {
    sends: &'a Sends,
    nacked: &'a FastMap<NackKey, Kept>,
    acl: Option<&'a crate::AclConfig>,
    namespace_v2: Option<&'a str>,
    extras: &'a Extras,
}

impl rmq_core::client::Lend for Lend<'_> {
    fn nacked(&self, key: NackKey) -> Option<NackedMessage<'_>> {
        let m = &self.nacked.get(&key)?.msg;
        Some(NackedMessage {
            properties: m.properties.as_raw(),
            body: &m.body,
            msg_id: &m.msg_id,
            topic: &m.topic,
            reconsume_times: m.reconsume_times,
            flag: m.flag,
        })
    }
}

impl Outbound for Lend<'_> {
    fn properties(&self, id: SendId) -> &str {
        self.sends.get(id.0).map_or("", |p| p.properties.as_str())
    }

    fn body(&self, id: SendId) -> &[u8] {
        self.sends.get(id.0).map_or(&[], |p| &p.body[..])
    }

    fn credentials(&self) -> Option<Credentials<'_>> {
        self.acl.map(crate::AclConfig::credentials)
    }

    fn namespace_v2(&self) -> Option<&str> {
        self.namespace_v2
    }

    fn heartbeat_body(&self, buf: &mut [u8]) -> Option<usize> {
        let h = self.extras.heartbeat.as_deref()?;
        buf.get_mut(..h.len())?.copy_from_slice(h);
        Some(h.len())
    }

    fn unix_millis(&self) -> i64 {
        clock::unix_millis()
    }

    fn running_prop(&self, i: usize) -> Option<(&str, &str)> {
        let (k, v) = self.extras.running.get(i)?;
        Some((k, v))
    }

    fn consume_rt(&self) -> u64 {
        // Microseconds to hundredths of a millisecond.
        self.extras
            .handler
            .as_ref()
            .map_or(0, |h| h.summary().mean / 10)
    }
}

/// How a client's routes and connections stand ([`crate::Producer::health`],
/// [`crate::consumer::Consumer::health`]), for a readiness check.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// Topics the client looks up (its own, and the retry topic of a consumer's group).
    pub topics: usize,
    /// Of those, the topics with a route (queues to send to or to read from).
    pub routed_topics: usize,
    /// Topics whose last lookup reached no NameServer (they may keep an older route).
    pub unreachable_topics: usize,
    /// The last failure of a NameServer connection, if one failed.
    pub name_server_error: Option<ConnectionError>,
    /// The last request for a queue (an offset lookup, a pull, a commit) a broker refused:
    /// it is retried as Java does, and each new refusal is also logged as a warning. E.g. a 5.x proxy in front of a broker
    /// too new or too old for it, or a missing permission.
    pub last_refusal: Option<Refusal>,
}

/// A broker's refusal of a consumer's request for one queue ([`Health::last_refusal`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusal {
    /// The request (its RocketMQ name, e.g. `QUERY_CONSUMER_OFFSET`).
    pub request: &'static str,
    /// The topic of the queue.
    pub topic: String,
    /// The broker of the queue.
    pub broker: String,
    /// The queue id.
    pub queue_id: i32,
    /// The broker's response code.
    pub code: i32,
    /// The broker's remark.
    pub remark: String,
}

impl Health {
    /// Some topic has a route and every topic's last lookup reached a NameServer.
    pub fn is_ready(&self) -> bool {
        self.routed_topics > 0 && self.unreachable_topics == 0
    }
}

pub(crate) struct Inner<C: Attached> {
    state: Mutex<State<C>>,
    wake: Notify,
    slots: Arc<Semaphore>,
    /// The body bytes that sends in flight may hold together (one body larger than all of
    /// them takes all of them and goes alone).
    bytes: (Arc<Semaphore>, u32),
    counters: Arc<Counters>,
    security: SecurityConfig,
    next_conn: AtomicU32,
    task: Mutex<Option<JoinHandle<()>>>,
}

/// A handle on one core client and its driver task (cheap to clone).
pub(crate) struct Driver<C: Attached = NoConsumer> {
    inner: Arc<Inner<C>>,
}

/// A [`Driver`] that does not keep its client alive (for background tasks).
pub(crate) struct WeakDriver<C: Attached>(Weak<Inner<C>>);

impl<C: Attached> WeakDriver<C> {
    /// The driver, unless every handle on it is gone or it was closed.
    pub(crate) fn upgrade(&self) -> Option<Driver<C>> {
        let inner = self.0.upgrade()?;
        let stopped = lock(&inner.state).stopped;
        (!stopped).then_some(Driver { inner })
    }
}

impl<C: Attached> Driver<C> {
    pub(crate) fn downgrade(&self) -> WeakDriver<C> {
        WeakDriver(Arc::downgrade(&self.inner))
    }
}

impl<C: Attached> Clone for Driver<C> {
    fn clone(&self) -> Self {
        Driver {
            inner: self.inner.clone(),
        }
    }
}

/// Why a command was refused before it reached the session's plans.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The session's tables are full or the topic name does not fit.
    Session(SubmitError),
    /// The driver stopped.
    Stopped,
    /// No room for the send (sends or bytes in flight) within its timeout.
    Timeout,
}

/// A send's place among the sends in flight, and its body's bytes among theirs.
type Room = (OwnedSemaphorePermit, OwnedSemaphorePermit);

impl<C: Attached + Send + 'static> Driver<C> {
    /// Starts a client of a session configured by `cfg` and `consumer`, and its driver task.
    pub(crate) fn start(
        cfg: &session::Config<'_>,
        consumer: C,
        namesrv_addr: Vec<String>,
        security: SecurityConfig,
        (max_sends, max_bytes): (usize, usize),
        counters: Arc<Counters>,
    ) -> Result<Self, session::ConfigError> {
        // At most what one acquire can take (u32) and what a semaphore holds (on 32-bit
        // targets tokio's MAX_PERMITS is below u32::MAX).
        let max_bytes = max_bytes.clamp(1, Semaphore::MAX_PERMITS);
        let max_bytes = u32::try_from(max_bytes).unwrap_or(u32::MAX);
        cfg.check()?;
        let client = Box::new(Client::from_parts(
            Session::build(cfg, clock::now()),
            consumer,
        ));
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                client,
                buf: vec![0u8; TX_BUF],
                heads: BytesMut::new(),
                extras: Extras::default(),
                sink: None,
                stopped: false,
                topics: FastMap::default(),
                sends: Sends::default(),
                namesrv_addr,
                links: FastMap::default(),
                closed: HashMap::new(),
                causes: HashMap::new(),
                waiters: Vec::new(),
                nacked: FastMap::default(),
                checks: None,
                replies: FastMap::default(),
                calls: FastMap::default(),
                start_failed: None,
                check_remarks: Vec::new(),
                refused: None,
                armed: None,
                finished: None,
            }),
            wake: Notify::new(),
            slots: Arc::new(Semaphore::new(max_sends.clamp(1, SENDS))),
            bytes: (Arc::new(Semaphore::new(max_bytes as usize)), max_bytes),
            counters,
            security,
            next_conn: AtomicU32::new(1),
            task: Mutex::new(None),
        });
        let task = tokio::spawn(run(Arc::downgrade(&inner)));
        *lock(&inner.task) = Some(task);
        Ok(Driver { inner })
    }

    /// Runs `f` on the client (its consumer and session) and hands the consumer's messages
    /// to `sink` from now on, with `extras` lent to the frames.
    pub(crate) fn attach<R>(
        &self,
        sink: Box<dyn Sink<C>>,
        f: impl FnOnce(&mut C, &mut Session, &mut Extras) -> R,
    ) -> R {
        let mut st = lock(&self.inner.state);
        let st = &mut *st;
        let (c, s) = st.client.consumer_mut();
        let r = f(c, s, &mut st.extras);
        st.sink = Some(sink);
        self.inner.wake.notify_one();
        r
    }

    /// Runs `f` on the consumer (with the session, to name things); `wake` lets the driver
    /// act on what `f` changed at once.
    pub(crate) fn consumer<R>(&self, wake: bool, f: impl FnOnce(&mut C, &Session) -> R) -> R {
        let mut st = lock(&self.inner.state);
        let (c, s) = st.client.consumer_mut();
        let r = f(c, s);
        // An ack that let a flow-controlled queue pull again wakes the driver too.
        let woken = st.client.has_work();
        drop(st);
        if wake || woken {
            self.inner.wake.notify_one();
        }
        r
    }

    /// The answer to a CONSUME_MESSAGE_DIRECTLY of `peer`.
    pub(crate) fn answer_direct(&self, peer: Peer, opaque: i32, o: DirectOutcome, spent: u64) {
        let mut st = lock(&self.inner.state);
        st.client.answer_direct(peer, opaque, o, spent);
        self.inner.flush(&mut st, clock::now());
    }

    /// The reply to the request with correlation id `id`, when it comes.
    pub(crate) fn await_reply(&self, id: String) -> oneshot::Receiver<ConsumedMessage> {
        let (tx, rx) = oneshot::channel();
        lock(&self.inner.state).replies.insert(id, tx);
        rx
    }

    /// Stops waiting for the reply to `id`.
    pub(crate) fn forget_reply(&self, id: &str) {
        lock(&self.inner.state).replies.remove(id);
    }

    /// Hands the broker's transaction check-backs to `checks` from now on.
    pub(crate) fn on_checks(&self, checks: tokio::sync::mpsc::UnboundedSender<Check>) {
        lock(&self.inner.state).checks = Some(checks);
    }

    /// Writes END_TRANSACTION `end` to the broker named in it (a check's answer: to the
    /// broker that asked, `peer`); `false` when it could not be (no such broker, stopped).
    pub(crate) fn end_transaction(&self, peer: Option<Peer>, end: &EndTransaction<'_>) -> bool {
        let mut st = lock(&self.inner.state);
        let Some(peer) = peer.or_else(|| {
            let b = st.client.session().find_broker(end.broker_name)?;
            Some(Peer::Broker(b))
        }) else {
            return false;
        };
        let tx = self.inner.emit(&mut st, |c, buf, lend| {
            c.end_transaction(peer, end, buf, lend).ok_or(())
        });
        tx.is_ok() && !st.stopped
    }

    /// A request of the runtime's own that `f` makes through the client (see
    /// [`Client::call`]; given `now`, the time left and where to encode), on the client's
    /// connection to its peer, answered before `deadline`: the peer and the answer's frame.
    pub(crate) async fn ask<E>(
        &self,
        f: impl FnOnce(
            &mut Core<C>,
            Instant,
            CoreDuration,
            &mut [u8],
            &dyn ClientLend,
        ) -> Result<Transmit, E>,
        deadline: tokio::time::Instant,
    ) -> Result<(Peer, Bytes), AskError<E>> {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let (rx, peer) = {
            let mut st = lock(&self.inner.state);
            if st.stopped {
                return Err(AskError::Lost(TransportError::ConnectionClosed, None));
            }
            let (now, timeout) = (clock::now(), clock::to_core(left));
            let tx = self
                .inner
                .emit(&mut st, |c, buf, lend| f(c, now, timeout, buf, lend));
            let tx = tx.map_err(AskError::Request)?;
            let (done, rx) = oneshot::channel();
            // (A connection that failed at once reported it to the client: its event is
            // handed out next.)
            st.calls.insert(tx.opaque, done);
            self.inner.events(&mut st);
            (rx, tx.peer)
        };
        // The driver task arms its timer for the call's deadline.
        self.inner.wake.notify_one();
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(Ok(f))) => Ok((peer, f)),
            Ok(Ok(Err(TransportError::TimedOut))) | Err(_) => Err(AskError::Timeout),
            Ok(Ok(Err(e))) => Err(AskError::Lost(e, self.cause(Some(peer)))),
            Ok(Err(_)) => Err(AskError::Lost(TransportError::ConnectionClosed, None)),
        }
    }

    /// Why the consumer's start failed ([`Event::StartFailed`]), if it did.
    pub(crate) fn start_failed(&self) -> Option<(TopicId, i32, String)> {
        lock(&self.inner.state).start_failed.clone()
    }

    /// Runs `f` on the session (read-only work: getters, stats).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Session) -> R) -> R {
        self.client(|c| f(c.session()))
    }

    /// Runs `f` on the client (read-only).
    pub(crate) fn client<R>(&self, f: impl FnOnce(&Core<C>) -> R) -> R {
        f(&lock(&self.inner.state).client)
    }

    /// The topic's id, registering it (and starting its lookup) when new.
    pub(crate) fn topic(&self, topic: &str) -> Result<TopicId, Refused> {
        let mut st = lock(&self.inner.state);
        let t = topic_id(&mut st, topic)?;
        drop(st);
        self.inner.wake.notify_one();
        Ok(t)
    }

    /// Waits until `topic` has a route (looking it up now if it has none, or if `refresh`):
    /// `true` when it has one, `false` when the lookup failed or `timeout` passed.
    pub(crate) async fn route(
        &self,
        topic: &str,
        refresh: bool,
        timeout: std::time::Duration,
    ) -> bool {
        let rx = {
            let mut st = lock(&self.inner.state);
            let Ok(t) = topic_id(&mut st, topic) else {
                return false;
            };
            if !refresh && !st.client.session().publish_queues(t).is_empty() {
                return true;
            }
            st.client.session_mut().refresh_route(clock::now(), t);
            self.inner.waiter(&mut st, Wait::Route(t))
        };
        self.inner.wake.notify_one();
        matches!(tokio::time::timeout(timeout, rx).await, Ok(Ok(true)))
    }

    /// Runs `f` on the client, then waits up to `timeout` for `w` (registered under the same
    /// lock: it cannot be missed); `true` when it happened as hoped.
    pub(crate) async fn wait<R>(
        &self,
        w: Wait,
        timeout: std::time::Duration,
        f: impl FnOnce(&mut Core<C>) -> R,
    ) -> (R, bool) {
        self.wait_if(w, timeout, f, |_| true).await
    }

    /// As [`Driver::wait`], when `needed` says so of what `f` returned (`false`: no wait).
    pub(crate) async fn wait_if<R>(
        &self,
        w: Wait,
        timeout: std::time::Duration,
        f: impl FnOnce(&mut Core<C>) -> R,
        needed: impl FnOnce(&R) -> bool,
    ) -> (R, bool) {
        let (r, rx) = {
            let mut st = lock(&self.inner.state);
            let r = f(&mut st.client);
            let rx = needed(&r).then(|| self.inner.waiter(&mut st, w));
            self.inner.events(&mut st);
            self.inner.flush(&mut st, clock::now());
            (r, rx)
        };
        self.inner.wake.notify_one();
        let Some(rx) = rx else { return (r, false) };
        (
            r,
            matches!(tokio::time::timeout(timeout, rx).await, Ok(Ok(true))),
        )
    }

    /// Hands `m` back for a later retry at `delay_level` (see
    /// [`rmq_core::client::Client::nack`]); `None`: orderly's skip past the reconsume limit,
    /// straight to the resend ([`rmq_core::client::Client::resend`]). The receiver tells how
    /// the nack ended.
    pub(crate) fn nack(
        &self,
        m: &ConsumedMessage,
        delay_level: Option<i32>,
    ) -> Result<oneshot::Receiver<NackOutcome>, NackError> {
        self.nack_with(m, |c, key| {
            let n = Nack {
                offset: m.queue_offset,
                commit_log_offset: m.commit_log_offset,
                msg_id: &m.msg_id,
                topic: &m.topic,
                delay_level: delay_level.unwrap_or(0),
                reconsume_times: m.reconsume_times,
                body_len: m.body.len(),
                flag: m.flag,
            };
            match delay_level {
                Some(_) => c.nack(key.queue, key.lease, &n),
                None => c.resend(clock::now(), key.queue, key.lease, &n),
            }
        })
    }

    fn nack_with(
        &self,
        m: &ConsumedMessage,
        f: impl FnOnce(&mut Core<C>, NackKey) -> Result<(), NackError>,
    ) -> Result<oneshot::Receiver<NackOutcome>, NackError> {
        let key = m.nack_key();
        let (tx, rx) = oneshot::channel();
        let mut st = lock(&self.inner.state);
        // Kept first: a resend started at once lends it.
        let kept = Kept {
            msg: m.clone(),
            done: Some(tx),
        };
        if st.nacked.insert(key, kept).is_some() {
            return Err(NackError::Pending);
        }
        if let Err(e) = f(&mut st.client, key) {
            st.nacked.remove(&key);
            return Err(e);
        }
        self.inner.events(&mut st);
        self.inner.flush(&mut st, clock::now());
        drop(st);
        self.inner.wake.notify_one();
        Ok(rx)
    }

    /// Room for one more send of `len` body bytes
    /// ([`ProducerBuilder::max_requests_in_flight`], [`ProducerBuilder::max_bytes_in_flight`]):
    /// at once when there is, else waited for up to `budget` (the send's timeout).
    ///
    /// [`ProducerBuilder::max_requests_in_flight`]: crate::ProducerBuilder::max_requests_in_flight
    /// [`ProducerBuilder::max_bytes_in_flight`]: crate::ProducerBuilder::max_bytes_in_flight
    async fn room(&self, len: usize, budget: rmq_core::time::Duration) -> Result<Room, Refused> {
        let (bytes, max) = &self.inner.bytes;
        let size = u32::try_from(len).unwrap_or(u32::MAX).clamp(1, *max);
        let slots = &self.inner.slots;
        // The usual case, without a timer.
        if let Ok(slot) = slots.clone().try_acquire_owned() {
            if let Ok(b) = bytes.clone().try_acquire_many_owned(size) {
                return Ok((slot, b));
            }
            drop(slot);
        }
        let wait = async {
            let slot = slots.clone().acquire_owned().await;
            let b = bytes.clone().acquire_many_owned(size).await;
            slot.and_then(|s| b.map(|b| (s, b)))
                .map_err(|_| Refused::Stopped)
        };
        tokio::time::timeout(clock::to_std(budget), wait)
            .await
            .map_err(|_| Refused::Timeout)?
    }

    /// Starts a send of `properties` + `body` to `topic` and waits for its end.
    pub(crate) async fn send(
        &self,
        topic: &str,
        args: SendArgs<'_>,
        properties: String,
        body: Bytes,
        choose: Option<Chooser>,
    ) -> Result<Done, Refused> {
        let mut args = args;
        let waited = clock::now();
        let slot = self.room(body.len(), args.retry.send_timeout).await?;
        // Waiting for room counts against the send's one deadline.
        let spent = clock::now().saturating_duration_since(waited);
        args.retry.send_timeout = args.retry.send_timeout.saturating_sub(spent);
        let (done, rx) = oneshot::channel();
        let wake = {
            let mut st = lock(&self.inner.state);
            let t = topic_id(&mut st, topic)?;
            let now = clock::now();
            let id = st
                .client
                .session_mut()
                .send(now, t, &args)
                .map_err(Refused::Session)?;
            st.sends.insert(Pending {
                id: id.0,
                properties,
                body,
                choose,
                done,
                recall: None,
                _slot: slot,
            });
            self.inner.events(&mut st);
            // Written from here, without a hop through the driver task, which only wakes when
            // this send brought a deadline earlier than the one it sleeps until (one wake-up
            // per send otherwise: a measurable share of the CPU per message).
            self.inner.flush(&mut st, now);
            st.wake_needed()
        };
        if wake {
            self.inner.wake.notify_one();
        }
        rx.await.map_err(|_| Refused::Stopped)
    }

    /// The NameServer list changed ([`crate::discovery`]): later lookups go to `addrs`;
    /// connections to the old list close and their requests fail over at once.
    pub(crate) fn set_name_servers(&self, addrs: Vec<String>) {
        let mut st = lock(&self.inner.state);
        if addrs.is_empty() || st.namesrv_addr == addrs || st.stopped {
            return;
        }
        st.client.session_mut().set_name_servers(addrs.len());
        st.namesrv_addr = addrs;
        // Why the old ones failed says nothing of the new ones at their indexes.
        st.causes.retain(|p, _| !matches!(p, Peer::NameServer(_)));
        let now = clock::now();
        let old: Vec<Peer> = st
            .links
            .keys()
            .filter(|p| matches!(p, Peer::NameServer(_)))
            .copied()
            .collect();
        for p in old {
            if let Some(Link::Up(c)) = st.links.remove(&p) {
                c.close();
            }
            st.client
                .handle_closed(now, p, TransportError::ConnectionClosed);
        }
        self.inner.events(&mut st);
        self.inner.flush(&mut st, now);
        drop(st);
        self.inner.wake.notify_one();
    }

    /// Stops the driver task and closes every connection at once (no unregister). Whatever is
    /// still waiting (sends past the shutdown drain, route waits) ends now: nothing
    /// would time it out any more.
    pub(crate) fn close(&self) {
        if let Some(t) = lock(&self.inner.task).take() {
            t.abort();
        }
        self.inner.slots.close();
        self.inner.bytes.0.close();
        let mut st = lock(&self.inner.state);
        st.stopped = true;
        for (_, link) in st.links.drain() {
            if let Link::Up(c) = link {
                c.close();
            }
        }
        // Dropping the waiters ends their futures (Shutdown / ConnectionClosed).
        st.sends = Sends::default();
        st.waiters.clear();
        st.nacked.clear();
        st.replies.clear();
    }

    /// Unregisters from every broker (waiting up to `timeout` for the answers), then stops the
    /// driver and closes every connection.
    pub(crate) async fn shutdown(&self, timeout: std::time::Duration) {
        let now = clock::now();
        self.wait(Wait::Unregistered, timeout, |c| {
            c.session_mut().unregister_all(now);
        })
        .await;
        self.close();
    }

    /// Every connection: address, whether closed, requests in flight, read buffer (tests).
    pub(crate) fn connection_stats(&self) -> Vec<ConnStats> {
        let st = lock(&self.inner.state);
        let up = st.links.iter().filter_map(|(peer, link)| match link {
            Link::Up(c) => Some((peer, c)),
            Link::Opening(..) => None,
        });
        let closed = st
            .closed
            .iter()
            .filter(|(peer, _)| !matches!(st.links.get(peer), Some(Link::Up(_))));
        up.chain(closed)
            .map(|(peer, c)| {
                let mut s = c.stats();
                s.in_flight = st.client.session().in_flight(*peer);
                s
            })
            .collect()
    }

    /// Why the last connection to `peer` failed (any NameServer's with `None`), if it did.
    pub(crate) fn cause(&self, peer: Option<Peer>) -> Option<ConnectionError> {
        let st = lock(&self.inner.state);
        match peer {
            Some(p) => st.causes.get(&p).cloned(),
            None => st
                .causes
                .iter()
                .find(|(p, _)| matches!(p, Peer::NameServer(_)))
                .map(|(_, c)| c.clone()),
        }
    }

    /// How the client's routes and NameServer connections stand.
    pub(crate) fn health(&self) -> Health {
        let h = self.with(|s| s.route_health());
        Health {
            topics: h.topics,
            routed_topics: h.routed,
            unreachable_topics: h.unreachable,
            name_server_error: self.cause(None),
            last_refusal: lock(&self.inner.state).refused.clone(),
        }
    }

    /// The shared counters.
    pub(crate) fn counters(&self) -> &Arc<Counters> {
        &self.inner.counters
    }
}

fn topic_id<C: Attached>(st: &mut State<C>, topic: &str) -> Result<TopicId, Refused> {
    if let Some(t) = st.topics.get(topic) {
        return Ok(*t);
    }
    let t = st
        .client
        .session_mut()
        .topic(clock::now(), topic)
        .map_err(Refused::Session)?;
    st.topics.insert(topic.to_owned(), t);
    Ok(t)
}

/// The driver task: timeouts, transmits, events; then sleep until the next deadline or a
/// wake-up.
async fn run<C: Attached + Send + 'static>(weak: Weak<Inner<C>>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let deadline = inner.step();
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(clock::to_tokio(d)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = inner.wake.notified() => {}
            () = sleep => {}
        }
    }
}

impl<C: Attached + Send + 'static> Inner<C> {
    /// A waiter for `w` (its receiver fails at once once the driver stopped).
    fn waiter(&self, st: &mut State<C>, w: Wait) -> oneshot::Receiver<bool> {
        let (tx, rx) = oneshot::channel();
        if !st.stopped {
            // (Waits that timed out are forgotten here.)
            st.waiters.retain(|(_, tx)| !tx.is_closed());
            st.waiters.push((w, tx));
        }
        rx
    }

    fn step(self: &Arc<Self>) -> Option<Instant> {
        let mut st = lock(&self.state);
        let now = clock::now();
        st.client.handle_timeout(now);
        self.events(&mut st);
        self.flush(&mut st, now);
        st.armed = st.client.poll_timeout();
        st.armed
    }

    /// Has the client encode one frame with `f` (lent what it borrows) and hands it to its
    /// peer's connection (no body: `f` wrote all of it); the frame's transmit, or `f`'s error.
    fn emit<E>(
        self: &Arc<Self>,
        st: &mut MutexGuard<'_, State<C>>,
        f: impl FnOnce(&mut Core<C>, &mut [u8], &dyn ClientLend) -> Result<Transmit, E>,
    ) -> Result<Transmit, E> {
        let state = &mut **st;
        let lend = Lend {
            sends: &state.sends,
            nacked: &state.nacked,
            acl: self.security.acl.as_ref(),
            namespace_v2: self.security.namespace_v2.as_deref(),
            extras: &state.extras,
        };
        let tx = f(&mut state.client, &mut state.buf, &lend)?;
        debug_assert_eq!(tx.body_len, 0, "the frame has no body of its own");
        let frame = Frame {
            head: state.head(tx.len),
            body: Bytes::new(),
            opaque: tx.opaque,
            report_written: false,
        };
        self.dispatch(st, tx.peer, frame);
        Ok(tx)
    }

    /// Moves every queued transmit to its connection.
    fn flush(self: &Arc<Self>, st: &mut MutexGuard<'_, State<C>>, now: Instant) {
        loop {
            let state = &mut **st;
            let lend = Lend {
                sends: &state.sends,
                nacked: &state.nacked,
                acl: self.security.acl.as_ref(),
                namespace_v2: self.security.namespace_v2.as_deref(),
                extras: &state.extras,
            };
            let Some(tx) = state.client.poll_transmit(now, &mut state.buf, &lend) else {
                break;
            };
            let body = tx.body.and_then(|id| match state.sends.get(id.0) {
                Some(p) => Some(p.body.clone()),
                // A consumer's resend: the nacked message's body.
                None => Some(
                    state
                        .nacked
                        .get(&state.client.resend_of(id)?)?
                        .msg
                        .body
                        .clone(),
                ),
            });
            let body = body.unwrap_or_default();
            let frame = Frame {
                head: state.head(tx.len),
                body,
                opaque: tx.opaque,
                report_written: tx.report_written,
            };
            self.dispatch(st, tx.peer, frame);
            // A failed encode or a connection that failed at once may have ended sends.
            self.events(st);
        }
    }

    /// Hands `frame` to the connection to `peer`, opening one if there is none.
    fn dispatch(self: &Arc<Self>, st: &mut MutexGuard<'_, State<C>>, peer: Peer, frame: Frame) {
        match st.links.get_mut(&peer) {
            Some(Link::Opening(_, q)) => q.push(frame),
            Some(Link::Up(c)) if !c.is_closed() => {
                let c = c.clone();
                self.write(st, peer, &c, frame);
            }
            _ => {
                if st.stopped {
                    return;
                }
                let id = self.next_conn.fetch_add(1, AtomicOrdering::Relaxed);
                st.links.insert(peer, Link::Opening(id, vec![frame]));
                let addr = match peer {
                    Peer::NameServer(i) => st.namesrv_addr.get(usize::from(i)).cloned(),
                    p => st.client.session().peer_addr(p).map(str::to_owned),
                };
                let Some(addr) = addr else {
                    st.links.remove(&peer);
                    let now = clock::now();
                    st.client
                        .handle_closed(now, peer, TransportError::BrokerNotFound);
                    return;
                };
                tokio::spawn(open(Arc::downgrade(self), peer, id, addr));
            }
        }
    }

    fn write(
        self: &Arc<Self>,
        st: &mut MutexGuard<'_, State<C>>,
        peer: Peer,
        c: &Arc<Conn>,
        f: Frame,
    ) {
        let on_written = f.report_written.then(|| {
            let weak = Arc::downgrade(self);
            let opaque = f.opaque;
            Box::new(move |ok: bool| {
                // A failed write closes the connection, which reports it.
                if let (true, Some(inner)) = (ok, weak.upgrade()) {
                    let mut st = lock(&inner.state);
                    st.client.handle_written(clock::now(), opaque);
                    inner.events(&mut st);
                }
            }) as conn::OnWritten
        });
        if !c.send_frame(f.head, f.body, on_written) {
            st.links.remove(&peer);
            st.closed.insert(peer, c.clone());
            st.client
                .handle_closed(clock::now(), peer, TransportError::ConnectionClosed);
        }
    }

    /// Hands out every pending event.
    fn events(&self, st: &mut State<C>) {
        let mut consumer_events = false;
        while let Some(e) = st.client.poll_event() {
            match e {
                Event::SendDone { id, result } => {
                    if let Some(p) = st.sends.remove(id.0) {
                        let broker = match &result {
                            Ok(r) => st.client.session().broker_name(r.broker),
                            Err(_) => None,
                        };
                        let broker = broker.unwrap_or("").to_owned();
                        let outcome = result.map_err(Box::new);
                        match st.finished.as_mut() {
                            Some(later) => later.push((p, outcome, broker)),
                            None => p.finish(outcome, broker),
                        }
                    }
                }
                Event::Reconnect(peer) => {
                    if let Some(link) = st.links.remove(&peer) {
                        if let Link::Up(c) = link {
                            warn!(addr = c.addr(), "closing the connection ({peer:?})");
                            c.close();
                            st.closed.insert(peer, c);
                        }
                        let cause = TransportError::ConnectionClosed;
                        st.client.handle_closed(clock::now(), peer, cause);
                    }
                }
                Event::RouteUpdated(t) => st.wake(Wait::Route(t), true),
                Event::RouteFailed(t) => st.wake(Wait::Route(t), false),
                Event::ChooseQueue { id, queues } => {
                    let choose = st.sends.get_mut(id.0).and_then(|p| p.choose.take());
                    let index = choose.map_or(0, |f| f(queues));
                    st.client
                        .session_mut()
                        .choose_queue(clock::now(), id, index);
                }
                Event::HeartbeatsDone => st.wake(Wait::Heartbeats, true),
                Event::Unregistered => st.wake(Wait::Unregistered, true),
                Event::Started => st.wake(Wait::Started, true),
                Event::StartFailed { topic, code } => {
                    let remarks = std::mem::take(&mut st.check_remarks);
                    let remark = remarks.into_iter().find(|(t, _)| *t == topic);
                    let remark = remark.map(|(_, r)| r).unwrap_or_default();
                    warn!(
                        code,
                        remark, "the consumer's start failed on an SQL92 subscription"
                    );
                    st.start_failed = Some((topic, code, remark));
                    st.wake(Wait::Started, false);
                }
                Event::Consumer(PullEvent::Rebalanced) => st.wake(Wait::Rebalanced, true),
                Event::Consumer(PullEvent::Committed) => st.wake(Wait::Committed, true),
                Event::Consumer(PullEvent::Locked { queue, lease }) => {
                    st.wake(Wait::Locked(queue, lease), true);
                }
                Event::Nacked { key, outcome } => {
                    // Kept for its local redelivery; forgotten otherwise.
                    let done = match outcome {
                        NackOutcome::Local => st.nacked.get_mut(&key).and_then(|k| k.done.take()),
                        _ => st.nacked.remove(&key).and_then(|k| k.done),
                    };
                    if let Some(d) = done {
                        let _ = d.send(outcome);
                    }
                }
                Event::Redeliver(key) => {
                    if let (Some(mut k), Some(sink)) = (st.nacked.remove(&key), st.sink.as_mut()) {
                        k.msg.reconsume_times = k.msg.reconsume_times.saturating_add(1);
                        sink.redeliver(k.msg);
                        consumer_events = true;
                    }
                }
                Event::CallFailed { opaque, error } => {
                    if let Some(tx) = st.calls.remove(&opaque) {
                        let _ = tx.send(Err(error));
                    }
                }
                Event::Consumer(pe) => {
                    if let Some(sink) = st.sink.as_mut() {
                        let (c, s) = st.client.consumer_mut();
                        sink.event(pe, c, s);
                        consumer_events = true;
                    }
                }
                _ => {}
            }
        }
        if let (true, Some(sink)) = (consumer_events, st.sink.as_mut()) {
            sink.flush();
        }
    }
}

/// Opens the connection for `peer` and sends what queued meanwhile.
async fn open<C: Attached + Send + 'static>(
    weak: Weak<Inner<C>>,
    peer: Peer,
    id: u32,
    addr: String,
) {
    let Some(inner) = weak.upgrade() else { return };
    let tls = inner.security.tls_for(matches!(peer, Peer::NameServer(_)));
    let sink = Arc::new(PeerSink {
        inner: weak.clone(),
        peer,
        id,
    });
    let r = conn::connect(id, &addr, tls.as_ref(), inner.counters.clone(), sink).await;
    let mut st = lock(&inner.state);
    let queued = match st.links.remove(&peer) {
        Some(Link::Opening(i, q)) if i == id => q,
        other => {
            // Closed or replaced while opening.
            if let Some(l) = other {
                st.links.insert(peer, l);
            }
            if let Ok(c) = r {
                c.close();
            }
            return;
        }
    };
    match r {
        Ok(c) => {
            debug!(addr, ?peer, "connected");
            st.causes.remove(&peer);
            st.links.insert(peer, Link::Up(c.clone()));
            for f in queued {
                inner.write(&mut st, peer, &c, f);
            }
        }
        Err(e) => {
            debug!(?peer, %e, "connect failed");
            st.client
                .handle_closed(clock::now(), peer, e.transport(true));
            st.causes.insert(peer, e);
        }
    }
    inner.events(&mut st);
    drop(st);
    inner.wake.notify_one();
}

/// Hands a connection's frames to the client.
struct PeerSink<C: Attached> {
    inner: Weak<Inner<C>>,
    peer: Peer,
    id: u32,
}

impl<C: Attached + Send + 'static> FrameSink for PeerSink<C> {
    fn frames(&self, frames: &[Bytes]) -> Result<(), String> {
        let Some(inner) = self.inner.upgrade() else {
            return Ok(());
        };
        // One lock, one hand-out of completions and one flush for every frame of a read.
        let mut st = lock(&inner.state);
        // `Some` only if a panic (in an application's queue selector) ended the last call
        // early: what it had collected is handed out with this call's.
        let stale = st.finished.replace(Vec::new());
        let now = clock::now();
        let mut r = Ok(());
        for bytes in frames {
            let state = &mut *st;
            let (sink, checks, replies) = (&mut state.sink, &state.checks, &mut state.replies);
            let calls = &mut state.calls;
            let sends = &mut state.sends;
            let mut refused = None;
            r = state
                .client
                .handle_frame(now, self.peer, bytes, &mut |i| match (i, sink.as_mut()) {
                    (Inbound::Message(d), Some(s)) => s.message(bytes, d),
                    (
                        Inbound::Direct {
                            peer,
                            opaque,
                            message,
                        },
                        Some(s),
                    ) => {
                        s.direct(peer, opaque, bytes, message);
                    }
                    (Inbound::RecallHandle { send, handle }, _) => {
                        if let Some(p) = sends.get_mut(send.0) {
                            p.recall = Some(handle.to_owned());
                        }
                    }
                    (Inbound::Reply(r), _) => {
                        // A reply nobody waits for any more (timed out) is dropped, as Java does.
                        if let Some(tx) = replies.remove(r.correlation_id.as_str()) {
                            let _ = tx.send(crate::consumer::pushed(bytes, r));
                        }
                    }
                    (Inbound::Check { peer, check }, _) => {
                        if let Some(tx) = checks {
                            let _ = tx.send(Check::new(peer, bytes, check));
                        }
                    }
                    (Inbound::Answer { opaque }, _) => {
                        if let Some(tx) = calls.remove(&opaque) {
                            let _ = tx.send(Ok(bytes.clone()));
                        }
                    }
                    (Inbound::Refused { refusal, remark }, _) => {
                        refused = Some((refusal, remark.to_owned()));
                    }
                    (_, None) => {}
                })
                .map_err(|e| e.to_string());
            if let Some((r, remark)) = refused {
                st.refused(r, remark);
            }
            if r.is_err() {
                break;
            }
            if st.client.must_transmit() {
                // A burst of broker requests (pushed replies) outgrew the answer queue.
                inner.flush(&mut st, now);
            }
        }
        inner.events(&mut st);
        // Retries the answers caused go out from here; a deadline they brought earlier (a
        // retry's back-off, a consumer's next pull) re-arms the driver's timer.
        inner.flush(&mut st, now);
        let wake = st.wake_needed();
        let finished = st.finished.take().unwrap_or_default();
        drop(st);
        for (p, outcome, broker) in stale.into_iter().flatten().chain(finished) {
            p.finish(outcome, broker);
        }
        if wake {
            inner.wake.notify_one();
        }
        r
    }

    fn closed(&self, lost: Option<ConnectionError>) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        let mut st = lock(&inner.state);
        let ours = matches!(st.links.get(&self.peer), Some(Link::Up(c)) if c.id() == self.id);
        if ours {
            if let Some(Link::Up(c)) = st.links.remove(&self.peer) {
                st.closed.insert(self.peer, c);
            }
            let cause = lost
                .as_ref()
                .map_or(TransportError::ConnectionClosed, |e| e.transport(false));
            st.client.handle_closed(clock::now(), self.peer, cause);
            if let Some(e) = lost {
                st.causes.insert(self.peer, e);
            }
            inner.events(&mut st);
        }
        drop(st);
        inner.wake.notify_one();
    }
}
