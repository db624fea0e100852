//! The tokio driver of the core client session ([`rmq_core::session`]).
//!
//! Every protocol decision (NameServer failover, routes and the TBW102 fallback, queue
//! selection, retries within one deadline, request correlation, heartbeats, ACL signing) is
//! the session's. This module owns what the core cannot: sockets, the clock, and the waiters.
//!
//! - One [`Driver`] per client holds the session behind one lock, the encoded properties and
//!   bodies of the sends in flight, one connection per [`Peer`], and for a consumer's client
//!   the core `PullConsumer` (its requests go out in `flush` beside the session's, its answers
//!   and failed calls are handed to it, its deadlines join the session's).
//! - A driver task (quinn's `ConnectionDriver` shape) runs `handle_timeout`, drains
//!   `poll_transmit` into the connections, hands out events and sleeps until
//!   `poll_timeout` or a wake-up.
//! - Each connection's task hands every frame it reads to the session (`handle_frame`) and
//!   reports its end (`handle_closed`); completions are handed out right there.
//! - Connections open lazily, the first time a transmit names a peer; frames queue while the
//!   connection opens. A failed connect, a lost connection or a malformed frame fails what was
//!   written to it at once (the session's plans retry elsewhere).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering as AtomicOrdering};
use std::sync::{Arc, Weak};

use bytes::{Bytes, BytesMut};
use rmq_core::acl::Credentials;
use rmq_core::admin;
use rmq_core::pull_consumer::{Delivery, PullConfig, PullConfigError, PullConsumer, PullEvent};
use rmq_core::session::{
    self, Event, Incoming, Outbound, Peer, SendArgs, SendFailure, SendId, SendReceipt, Session,
    SubmitError, TopicId,
};
use rmq_core::time::Instant;
use rmq_core::transport::TransportError;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::clock;
use crate::config::SecurityConfig;
use crate::conn::{self, Conn, ConnStats, FrameSink};
use crate::hash::FastMap;
use crate::message::ConnectionError;
use crate::shared::Counters;
use crate::sync::{Mutex, MutexGuard, lock};

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

pub(crate) type Core = Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR>;

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
pub(crate) type Machine = PullConsumer<SUBS, OWNED, TRACK, CALLS, CIDS, QUEUES, CALLS>;

/// Where a consumer's messages and the outcomes of its send-backs go.
pub(crate) trait Sink: Send {
    /// A message of a pull answer; its slices borrow `frame`, which they may share.
    fn message(&mut self, frame: &Bytes, d: Delivery<'_, '_>);
    /// An outcome or request of the consumer (it may answer on `c`).
    fn event(&mut self, e: PullEvent, c: &mut Machine, s: &Core);
    /// After a run of events.
    fn flush(&mut self);
    /// The runtime's part of GET_CONSUMER_RUNNING_INFO: properties, and the mean processing
    /// time (hundredths of ms).
    fn running_extra(&self) -> (Vec<(String, String)>, u64);
    /// CONSUME_MESSAGE_DIRECTLY (`frame`) from `peer`: run the handler, answer with
    /// [`Driver::reply`].
    fn direct(&mut self, peer: Peer, opaque: i32, frame: &Bytes);
}

pub(crate) type Deliver = Box<dyn Sink>;

/// How a send ended.
///
/// The failure is boxed: it carries a remark of up to [`session::MAX_REMARK`] bytes, and an
/// unboxed one would make every successful outcome that large too, moved through the
/// oneshot and the sender's future on every send.
pub(crate) type Outcome = Result<SendReceipt, Box<SendFailure>>;

/// How a send ended, and the name of the broker that stored it (empty on failure): read under
/// the lock that hands the outcome out, so the sender needs no second one.
pub(crate) type Done = (Outcome, String);

struct Pending {
    /// The session's whole id (its slot's generation included).
    id: u32,
    properties: String,
    body: Bytes,
    done: oneshot::Sender<Done>,
    _slot: OwnedSemaphorePermit,
}

/// The sends in flight, indexed by [`SendId::slot`] (below `SENDS`): no hashing on the send
/// path; an entry answers only to its whole id.
#[derive(Default)]
struct Sends {
    slots: Vec<Option<Pending>>,
}

impl Sends {
    fn slot(id: u32) -> usize {
        SendId(id).slot()
    }

    fn get(&self, id: u32) -> Option<&Pending> {
        self.slots
            .get(Self::slot(id))?
            .as_ref()
            .filter(|p| p.id == id)
    }

    fn insert(&mut self, p: Pending) {
        let i = Self::slot(p.id);
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        if let Some(s) = self.slots.get_mut(i) {
            *s = Some(p);
        }
    }

    fn remove(&mut self, id: u32) -> Option<Pending> {
        let s = self.slots.get_mut(Self::slot(id))?;
        if s.as_ref().is_some_and(|p| p.id == id) {
            s.take()
        } else {
            None
        }
    }

    fn clear(&mut self) {
        self.slots.clear();
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

struct State {
    session: Box<Core>,
    /// Where frames are encoded (under the lock, by whoever flushes).
    buf: Vec<u8>,
    /// Where encoded heads are kept until written: one allocation shared by many frames
    /// (each a [`Bytes`] slice of it), not one per frame.
    heads: BytesMut,
    /// A consumer's HEART_BEAT body (its subscriptions); `None` for a producer.
    heartbeat: Option<Vec<u8>>,
    /// A consumer's decisions and where its messages go; `None` for a producer.
    consumer: Option<(Box<Machine>, Deliver)>,
    /// [`Driver::close`] ran: no new connection.
    stopped: bool,
    topics: FastMap<String, TopicId>,
    sends: Sends,
    links: FastMap<Peer, Link>,
    /// The last closed connection per peer (diagnostics).
    closed: HashMap<Peer, Arc<Conn>>,
    /// Why the last connection to a peer failed (cleared when one opens).
    causes: HashMap<Peer, ConnectionError>,
    route_waiters: HashMap<u16, Vec<oneshot::Sender<bool>>>,
    /// The deadline the driver task sleeps until (set by its last step; `None`: no deadline,
    /// or the task has not run yet). A send whose deadlines are all later needs no wake-up.
    armed: Option<Instant>,
}

impl State {
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

    /// The earliest deadline of the session and the consumer.
    fn deadline(&self) -> Option<Instant> {
        let consumer = self.consumer.as_ref().and_then(|(c, _)| c.poll_timeout());
        match (self.session.poll_timeout(), consumer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the driver task must wake to re-arm its timer: something is due before the
    /// deadline it sleeps until.
    fn wake_needed(&self) -> bool {
        match (self.armed, self.deadline()) {
            (Some(armed), Some(d)) => d < armed,
            (None, Some(_)) => true,
            (_, None) => false,
        }
    }
}

/// What the session borrows to write frames.
struct Lend<'a> {
    sends: &'a Sends,
    acl: Option<&'a crate::AclConfig>,
    heartbeat: Option<&'a [u8]>,
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

    fn heartbeat_body(&self, buf: &mut [u8]) -> Option<usize> {
        let h = self.heartbeat?;
        buf.get_mut(..h.len())?.copy_from_slice(h);
        Some(h.len())
    }
}

pub(crate) struct Inner {
    state: Mutex<State>,
    wake: Notify,
    slots: Arc<Semaphore>,
    counters: Arc<Counters>,
    namesrv_addr: Vec<String>,
    security: SecurityConfig,
    next_conn: AtomicU32,
    task: Mutex<Option<JoinHandle<()>>>,
}

/// A handle on one client session and its driver task (cheap to clone).
#[derive(Clone)]
pub(crate) struct Driver {
    inner: Arc<Inner>,
}

/// Why a command was refused before it reached the session's plans.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The session's tables are full or the topic name does not fit.
    Session(SubmitError),
    /// The driver stopped.
    Stopped,
}

impl Driver {
    /// Starts a session with `cfg` and its driver task.
    pub(crate) fn start(
        cfg: &session::Config<'_>,
        namesrv_addr: Vec<String>,
        security: SecurityConfig,
        max_sends: usize,
        counters: Arc<Counters>,
    ) -> Result<Driver, session::ConfigError> {
        let session = on_big_stack(|| Core::new(cfg, clock::now()).map(Box::new))
            .unwrap_or(Err(session::ConfigError::NameServers))?;
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                session,
                buf: vec![0u8; TX_BUF],
                heads: BytesMut::new(),
                heartbeat: None,
                consumer: None,
                stopped: false,
                topics: FastMap::default(),
                sends: Sends::default(),
                links: FastMap::default(),
                closed: HashMap::new(),
                causes: HashMap::new(),
                route_waiters: HashMap::new(),
                armed: None,
            }),
            wake: Notify::new(),
            slots: Arc::new(Semaphore::new(max_sends.clamp(1, SENDS))),
            counters,
            namesrv_addr,
            security,
            next_conn: AtomicU32::new(1),
            task: Mutex::new(None),
        });
        let task = tokio::spawn(run(Arc::downgrade(&inner)));
        *lock(&inner.task) = Some(task);
        Ok(Driver { inner })
    }

    /// Makes this client a consumer of `subscriptions` (topic, TAG expression) deciding as
    /// `pull` says and handing every message to `deliver`; its first rebalance is due now.
    pub(crate) fn attach_consumer(
        &self,
        pull: &PullConfig<'_>,
        subscriptions: &[(String, String)],
        deliver: Deliver,
    ) -> Result<(), PullConfigError> {
        let now = clock::now();
        let mut c = on_big_stack(|| Machine::new(pull, now).map(Box::new))
            .unwrap_or(Err(PullConfigError::Name))?;
        let mut st = lock(&self.inner.state);
        for (topic, expression) in subscriptions {
            c.subscribe(now, &mut *st.session, topic, expression)?;
        }
        let mut body = vec![0u8; 4096];
        while c.heartbeat_body(&*st.session, &mut body).is_none() && body.len() < (1 << 24) {
            body.resize(body.len() * 2, 0);
        }
        let n = c.heartbeat_body(&*st.session, &mut body).unwrap_or(0);
        body.truncate(n);
        st.heartbeat = Some(body);
        st.consumer = Some((c, deliver));
        drop(st);
        self.inner.wake.notify_one();
        Ok(())
    }

    /// Runs `f` on the consumer's decisions (with the session, to name things); `wake` lets the
    /// driver act on what `f` changed at once.
    pub(crate) fn consumer<R>(
        &self,
        wake: bool,
        f: impl FnOnce(&mut Machine, &Core) -> R,
    ) -> Option<R> {
        let mut st = lock(&self.inner.state);
        let state = &mut *st;
        let r = state.consumer.as_mut().map(|(c, _)| {
            let r = f(c, &state.session);
            // An ack that let a flow-controlled queue pull again wakes the driver too.
            (r, c.take_wake())
        });
        drop(st);
        if wake || r.as_ref().is_some_and(|r| r.1) {
            self.inner.wake.notify_one();
        }
        r.map(|r| r.0)
    }

    /// Writes `frame` (an answer to a broker's request) to `peer`'s connection.
    pub(crate) fn reply(&self, peer: Peer, frame: Vec<u8>) {
        let mut st = lock(&self.inner.state);
        let f = Frame {
            head: Bytes::from(frame),
            body: Bytes::new(),
            opaque: 0,
            report_written: false,
        };
        self.inner.dispatch(&mut st, peer, f);
    }

    /// Runs `f` on the session (read-only work: getters, stats).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Core) -> R) -> R {
        f(&lock(&self.inner.state).session)
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
            if !refresh && !st.session.publish_queues(t).is_empty() {
                return true;
            }
            st.session.refresh_route(clock::now(), t);
            let (tx, rx) = oneshot::channel();
            st.route_waiters.entry(t.0).or_default().push(tx);
            rx
        };
        self.inner.wake.notify_one();
        matches!(tokio::time::timeout(timeout, rx).await, Ok(Ok(true)))
    }

    /// Starts a send of `properties` + `body` to `topic` and waits for its end.
    pub(crate) async fn send(
        &self,
        topic: &str,
        args: SendArgs,
        properties: String,
        body: Bytes,
    ) -> Result<(TopicId, Done), Refused> {
        let slot = self
            .inner
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Refused::Stopped)?;
        let (done, rx) = oneshot::channel();
        let (t, wake) = {
            let mut st = lock(&self.inner.state);
            let t = topic_id(&mut st, topic)?;
            let now = clock::now();
            let id = st.session.send(now, t, &args).map_err(Refused::Session)?;
            st.sends.insert(Pending {
                id: id.0,
                properties,
                body,
                done,
                _slot: slot,
            });
            self.inner.events(&mut st);
            // Written from here, without a hop through the driver task, which only wakes when
            // this send brought a deadline earlier than the one it sleeps until (one wake-up
            // per send otherwise: a measurable share of the CPU per message).
            self.inner.flush(&mut st, now);
            (t, st.wake_needed())
        };
        if wake {
            self.inner.wake.notify_one();
        }
        rx.await.map(|o| (t, o)).map_err(|_| Refused::Stopped)
    }

    /// Sends the HEART_BEAT to every known master now; waits up to `timeout` for the answers.
    pub(crate) async fn heartbeat(&self, timeout: std::time::Duration) {
        {
            let mut st = lock(&self.inner.state);
            st.session.heartbeat_now(clock::now());
            self.inner.flush(&mut st, clock::now());
        }
        self.inner.wake.notify_one();
        let end = tokio::time::Instant::now() + timeout;
        while lock(&self.inner.state).session.heartbeats_pending() > 0
            && tokio::time::Instant::now() < end
        {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Stops the driver task and closes every connection at once (no unregister). Whatever is
    /// still waiting (sends past the shutdown drain, route waits) ends now: nothing
    /// would time it out any more.
    pub(crate) fn close(&self) {
        if let Some(t) = lock(&self.inner.task).take() {
            t.abort();
        }
        self.inner.slots.close();
        let mut st = lock(&self.inner.state);
        st.stopped = true;
        for (_, link) in st.links.drain() {
            if let Link::Up(c) = link {
                c.close();
            }
        }
        // Dropping the waiters ends their futures (Shutdown / ConnectionClosed).
        st.sends.clear();
        st.route_waiters.clear();
    }

    /// Unregisters from every broker (waiting up to `timeout` for the answers), then stops the
    /// driver and closes every connection.
    pub(crate) async fn shutdown(&self, timeout: std::time::Duration) {
        let queued = {
            let mut st = lock(&self.inner.state);
            let n = st.session.unregister_all(clock::now());
            self.inner.flush(&mut st, clock::now());
            n
        };
        self.inner.wake.notify_one();
        let end = tokio::time::Instant::now() + timeout;
        while queued > 0
            && lock(&self.inner.state).session.pending_requests() > 0
            && tokio::time::Instant::now() < end
        {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
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
                s.in_flight = st.session.in_flight(*peer);
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

    /// The shared counters.
    pub(crate) fn counters(&self) -> &Arc<Counters> {
        &self.inner.counters
    }
}

/// Runs `f` on a thread with a stack large enough for the core's tables (a session is a few
/// hundred KiB, a consumer a few MiB, before they reach the heap); `None` if no such thread
/// could run.
fn on_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> Option<T> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(32 << 20)
            .spawn_scoped(s, f)
            .ok()?
            .join()
            .ok()
    })
}

fn topic_id(st: &mut State, topic: &str) -> Result<TopicId, Refused> {
    if let Some(t) = st.topics.get(topic) {
        return Ok(*t);
    }
    let t = st
        .session
        .topic(clock::now(), topic)
        .map_err(Refused::Session)?;
    st.topics.insert(topic.to_owned(), t);
    Ok(t)
}

/// The driver task: timeouts, transmits, events; then sleep until the next deadline or a
/// wake-up.
async fn run(weak: Weak<Inner>) {
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

impl Inner {
    fn step(self: &Arc<Self>) -> Option<Instant> {
        let mut st = lock(&self.state);
        let now = clock::now();
        st.session.handle_timeout(now);
        if let Some((c, _)) = st.consumer.as_mut() {
            c.handle_timeout(now);
        }
        self.events(&mut st);
        self.flush(&mut st, now);
        st.armed = st.deadline();
        st.armed
    }

    /// Moves every queued transmit to its connection.
    fn flush(self: &Arc<Self>, st: &mut MutexGuard<'_, State>, now: Instant) {
        loop {
            let state = &mut **st;
            let lend = Lend {
                sends: &state.sends,
                acl: self.security.acl.as_ref(),
                heartbeat: state.heartbeat.as_deref(),
            };
            let Some(tx) = state.session.poll_transmit(now, &mut state.buf, &lend) else {
                break;
            };
            let body = tx
                .body
                .and_then(|id| state.sends.get(id.0))
                .map(|p| p.body.clone())
                .unwrap_or_default();
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
        // The consumer's requests (offsets, pulls, commits, consumer lists).
        loop {
            let state = &mut **st;
            let Some((c, _)) = state.consumer.as_mut() else {
                break;
            };
            let lend = Lend {
                sends: &state.sends,
                acl: self.security.acl.as_ref(),
                heartbeat: None,
            };
            let Some(tx) = c.poll_call(now, &mut *state.session, &mut state.buf, &lend) else {
                // What it decided without a request (stored offsets) may make requests due.
                if self.consumer_events(st) {
                    continue;
                }
                break;
            };
            let frame = Frame {
                head: state.head(tx.len),
                body: Bytes::new(),
                opaque: tx.opaque,
                report_written: false,
            };
            self.dispatch(st, tx.peer, frame);
            self.events(st);
        }
    }

    /// Hands `frame` to the connection to `peer`, opening one if there is none.
    fn dispatch(self: &Arc<Self>, st: &mut MutexGuard<'_, State>, peer: Peer, frame: Frame) {
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
                    Peer::NameServer(i) => self.namesrv_addr.get(usize::from(i)).cloned(),
                    p => st.session.peer_addr(p).map(str::to_owned),
                };
                let Some(addr) = addr else {
                    st.links.remove(&peer);
                    let now = clock::now();
                    st.session
                        .handle_closed(now, peer, TransportError::BrokerNotFound);
                    return;
                };
                tokio::spawn(open(Arc::downgrade(self), peer, id, addr));
            }
        }
    }

    fn write(
        self: &Arc<Self>,
        st: &mut MutexGuard<'_, State>,
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
                    st.session.handle_written(clock::now(), opaque);
                    inner.events(&mut st);
                }
            }) as conn::OnWritten
        });
        if !c.send_frame(f.head, f.body, on_written) {
            st.links.remove(&peer);
            st.closed.insert(peer, c.clone());
            st.session
                .handle_closed(clock::now(), peer, TransportError::ConnectionClosed);
        }
    }

    /// Hands out every pending event.
    fn events(&self, st: &mut State) {
        while let Some(e) = st.session.poll_event() {
            match e {
                Event::SendDone { id, result } => {
                    if let Some(p) = st.sends.remove(id.0) {
                        let broker = match &result {
                            Ok(r) => st.session.broker_name(r.broker).unwrap_or("").to_owned(),
                            Err(_) => String::new(),
                        };
                        let _ = p.done.send((result.map_err(Box::new), broker));
                    }
                }
                Event::Reconnect(peer) => {
                    if let Some(link) = st.links.remove(&peer) {
                        if let Link::Up(c) = link {
                            warn!(addr = c.addr(), "closing the connection ({peer:?})");
                            c.close();
                            st.closed.insert(peer, c);
                        }
                        st.session.handle_closed(
                            clock::now(),
                            peer,
                            TransportError::ConnectionClosed,
                        );
                    }
                }
                Event::CallFailed { opaque, .. } => {
                    if let Some((c, _)) = st.consumer.as_mut() {
                        c.handle_call_failed(clock::now(), opaque);
                    }
                }
                Event::RouteUpdated(t) | Event::RouteFailed(t) => {
                    let ok = matches!(e, Event::RouteUpdated(_));
                    for w in st.route_waiters.remove(&t.0).unwrap_or_default() {
                        let _ = w.send(ok);
                    }
                }
                _ => {}
            }
        }
        self.consumer_events(st);
    }

    /// Hands the consumer's events to its sink; `true` when there were any.
    fn consumer_events(&self, st: &mut State) -> bool {
        let Some((c, sink)) = st.consumer.as_mut() else {
            return false;
        };
        let mut any = false;
        while let Some(e) = c.poll_event() {
            sink.event(e, c, &st.session);
            any = true;
        }
        if any {
            sink.flush();
        }
        any
    }
}

/// Opens the connection for `peer` and sends what queued meanwhile.
async fn open(weak: Weak<Inner>, peer: Peer, id: u32, addr: String) {
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
            st.session
                .handle_closed(clock::now(), peer, e.transport(true));
            st.causes.insert(peer, e);
        }
    }
    inner.events(&mut st);
    drop(st);
    inner.wake.notify_one();
}

/// Hands a connection's frames to the session.
struct PeerSink {
    inner: Weak<Inner>,
    peer: Peer,
    id: u32,
}

impl PeerSink {
    /// One frame, under the lock: to the session, a response's messages to the consumer, a
    /// broker's request answered.
    fn frame(
        &self,
        inner: &Arc<Inner>,
        st: &mut MutexGuard<'_, State>,
        now: Instant,
        bytes: &Bytes,
    ) -> Result<(), String> {
        let frame = &bytes[..];
        let r = st.session.handle_frame(now, self.peer, frame);
        let state = &mut **st;
        match (r, state.consumer.as_mut()) {
            (Ok(Incoming::Response(opaque)), Some((c, deliver))) => {
                c.handle_response(now, &*state.session, opaque, frame, &mut |d| {
                    deliver.message(bytes, d);
                });
            }
            (Ok(Incoming::Request { code, .. }), consumer) => {
                let buf = &mut state.buf;
                let version = state.session.config_version();
                let answer = match consumer {
                    Some((c, sink)) => {
                        let (props, rt) = sink.running_extra();
                        let extra: Vec<(&str, &str)> = props
                            .iter()
                            .map(|(k, v)| (k.as_str(), v.as_str()))
                            .collect();
                        let unix = clock::unix_millis();
                        let a =
                            c.answer_request(now, unix, &*state.session, frame, &extra, rt, buf);
                        if let admin::Answer::ConsumeDirectly { opaque } = a {
                            sink.direct(self.peer, opaque, bytes);
                        }
                        a
                    }
                    None => admin::answer_not_served(frame, version, buf)
                        .map_or(admin::Answer::Nothing, admin::Answer::Write),
                };
                debug!(code, ?answer, "request from {:?}", self.peer);
                if let admin::Answer::Write(n) = answer {
                    let head = state.head(n);
                    let f = Frame {
                        head,
                        body: Bytes::new(),
                        opaque: 0,
                        report_written: false,
                    };
                    inner.dispatch(st, self.peer, f);
                }
            }
            _ => {}
        }
        r.map(|_| ()).map_err(|e| e.to_string())
    }
}

impl FrameSink for PeerSink {
    fn frames(&self, frames: &[Bytes]) -> Result<(), String> {
        let Some(inner) = self.inner.upgrade() else {
            return Ok(());
        };
        // One lock, one hand-out of completions and one flush for every frame of a read.
        let mut st = lock(&inner.state);
        let now = clock::now();
        let mut r = Ok(());
        for bytes in frames {
            r = self.frame(&inner, &mut st, now, bytes);
            if r.is_err() {
                break;
            }
        }
        inner.events(&mut st);
        // Retries the answers caused go out from here; a deadline they brought earlier (a
        // retry's back-off, a consumer's next pull) re-arms the driver's timer.
        inner.flush(&mut st, now);
        let wake = st.wake_needed();
        drop(st);
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
            st.session.handle_closed(clock::now(), self.peer, cause);
            if let Some(e) = lost {
                st.causes.insert(self.peer, e);
            }
            inner.events(&mut st);
        }
        drop(st);
        inner.wake.notify_one();
    }
}
