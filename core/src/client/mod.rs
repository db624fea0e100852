//! The client: one sans-IO value per client instance (Java's `MQClientInstance`) that owns the
//! [`Session`] and every machine attached to it (the [`PullConsumer`](crate::pull_consumer),
//! and the POP machine to come), in quinn-proto's
//! `Connection` shape. It is what runtimes drive: they move bytes and time, and never look at
//! a request code or choose which machine a frame is for.
//!
//! ## What the client joins
//!
//! - **Frames**: [`Client::handle_frame`] hands a response to whoever issued the request (the
//!   session's own, or the consumer's calls, correlated by the session's one request table)
//!   and dispatches every request a broker sends (NOTIFY_CONSUMER_IDS_CHANGED,
//!   RESET_CONSUMER_CLIENT_OFFSET, GET_CONSUMER_STATUS_FROM_CLIENT, GET_CONSUMER_RUNNING_INFO,
//!   CONSUME_MESSAGE_DIRECTLY, CHECK_TRANSACTION_STATE, PUSH_REPLY_MESSAGE_TO_CLIENT, and
//!   REQUEST_CODE_NOT_SUPPORTED for the rest).
//! - **Transmits**: [`Client::poll_transmit`] gives answers to brokers first, then the
//!   session's requests (routes, sends, heartbeats), then the consumer's (pulls, offsets,
//!   locks, send-backs).
//! - **Time**: [`Client::handle_timeout`] runs every machine's schedule; calls that timed out
//!   (or died with their connection) reach the consumer at once.
//! - **Events**: [`Client::poll_event`] reports what callers wait for ([`Event`]).
//!
//! ## Call order
//!
//! On every wake-up: the `handle_*` inputs, then application commands (on
//! [`Client::session_mut`] and [`Client::consumer_mut`], or [`Client::answer_direct`]), then
//! [`Client::poll_transmit`] until `None`, [`Client::poll_event`] until `None`, and sleep until
//! [`Client::poll_timeout`] or the next input. Time is monotonic and passed in; an early or
//! extra [`Client::handle_timeout`] is a no-op.
//!
//! ```
//! use rmq_core::client::{Client, Inbound, NoConsumer};
//! use rmq_core::session::{Config, Outbound, Peer, SendId, Session};
//! use rmq_core::time::Instant;
//! use rmq_core::wire::{CommandRepr, RequestCode, SerializeType, headers::HeartbeatRequestHeader};
//!
//! struct Lend;
//! impl Outbound for Lend {
//!     fn properties(&self, _: SendId) -> &str { "" }
//! }
//! impl rmq_core::client::Lend for Lend {}
//! let cfg = Config::new(1, "pg", "10.0.0.2@gw");
//! let mut c: Client<4, 4, 16, 8, 2, 2048> =
//!     Client::from_parts(Session::build(&cfg, Instant::ZERO), NoConsumer);
//! // A broker asks a producer for its running info (`mqadmin consumerStatus`).
//! let mut req = [0u8; 256];
//! let repr = CommandRepr::<HeartbeatRequestHeader>::request(
//!     RequestCode::GET_CONSUMER_RUNNING_INFO, 7, 0, None);
//! let n = repr.emit_frame_prefix_and_header(SerializeType::JSON, 0, &mut req).unwrap();
//! let peer = Peer::NameServer(0);
//! c.handle_frame(Instant::ZERO, peer, &req[..n], &mut |_: Inbound<'_, '_>| {}).unwrap();
//! // The client answers it itself: REQUEST_CODE_NOT_SUPPORTED, as a Java producer does.
//! let mut buf = [0u8; 512];
//! let tx = c.poll_transmit(Instant::ZERO, &mut buf, &Lend).unwrap();
//! assert!(tx.answer && tx.opaque == 7 && tx.peer == peer);
//! ```

mod answer;
mod attach;
pub mod nack;
pub mod start;

use heapless::{Deque, Vec};

pub use answer::DirectOutcome;
pub use attach::{Attached, NoConsumer};
pub use nack::{Lend, NackKey, NackOutcome, NackedMessage};

use answer::{ANSWERS, Answer};
use nack::{Entry, Step, WithResends};
use start::Start;

use crate::admin::{direct_message, is_oneway};
use crate::pull_consumer::{Delivery, PullEvent, QueueKey, Refusal};
use crate::reply::PushedReply;
use crate::retry::{RetryConfig, SendMode};
use crate::send_back::{Nack, NackError, RETRY_TOPIC_PREFIX, retry_topic};
use crate::session::{
    self, BrokerId, Features, FrameError, Full, Incoming, Peer, SendArgs, SendFailure, SendId,
    SendReceipt, Session, TopicId, Transmit,
};
use crate::store::Table;
use crate::store::{Fixed, Store};
use crate::time::Instant;
use crate::time::WallClock;
use crate::transaction::TransactionCheck;
use crate::transport::TransportError;
use crate::wire::headers::{GetConsumerRunningInfoRequestHeader, GetConsumerStatusRequestHeader};
use crate::wire::{CommandHeader, Frame, RequestCode, Scratch};

/// Something a caller of the client waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A send ended (its slot is free again).
    SendDone {
        /// Which send.
        id: SendId,
        /// Its result.
        result: Result<SendReceipt, SendFailure>,
    },
    /// Close the connection to this peer and report it with [`Client::handle_closed`]; the
    /// next transmit opens a new one (see [`session::Event::Reconnect`]).
    Reconnect(Peer),
    /// A route of this topic was applied.
    RouteUpdated(TopicId),
    /// A lookup of this topic, which has no route, failed (it is retried with back-off).
    RouteFailed(TopicId),
    /// Send `id` waits for the runtime's choice of one of its `queues` publish queues
    /// ([`session::Target::Choose`], answered with `Session::choose_queue`).
    ChooseQueue {
        /// Which send.
        id: SendId,
        /// How many publish queues the topic has.
        queues: usize,
    },
    /// Every heartbeat sent was answered or failed.
    HeartbeatsDone,
    /// Every UNREGISTER_CLIENT was answered or failed.
    Unregistered,
    /// The consumer's start ([`Client::start_consumer`]) is done: routes, heartbeat, the
    /// first rebalance (see [`start`]).
    Started,
    /// The consumer's start ended before announcing anything: the broker refused the SQL92
    /// subscription of `topic` with response `code` (its remark came as
    /// [`Inbound::Refused`]), or, code -1, could not be asked in time (see [`start`]). Stop the
    /// consumer; its start does not go on.
    StartFailed {
        /// The subscribed topic.
        topic: TopicId,
        /// The broker's response code, or -1.
        code: i32,
    },
    /// A nack ended ([`Client::nack`], [`Client::resend`]; see [`nack`]): the runtime may
    /// forget the message unless the outcome is [`NackOutcome::Local`].
    Nacked {
        /// Which message.
        key: NackKey,
        /// How.
        outcome: NackOutcome,
    },
    /// A message whose send-back and resend both failed is due again: hand it to the
    /// application (one more reconsume time); it is still in flight.
    Redeliver(NackKey),
    /// What the consumer reports (milestones, broadcasting offsets, locks).
    Consumer(PullEvent),
    /// A request of the runtime's own ([`Client::call`]) got no answer before its deadline,
    /// or its connection was lost (`error`).
    CallFailed {
        /// The request's opaque.
        opaque: i32,
        /// Why.
        error: TransportError,
    },
}

/// What a frame hands the application (through [`Client::handle_frame`]'s closure).
#[derive(Clone, Copy, Debug)]
pub enum Inbound<'a, 'm> {
    /// A pulled message: acknowledge it through the consumer.
    Message(Delivery<'a, 'm>),
    /// CONSUME_MESSAGE_DIRECTLY (`mqadmin queryMsgById … -d <clientId>`): run the
    /// application's handler on `message` (not in flight: acknowledging it does nothing),
    /// then answer with [`Client::answer_direct`]`(peer, opaque, ..)`.
    Direct {
        /// The broker that asked.
        peer: Peer,
        /// Its request's opaque.
        opaque: i32,
        /// The message.
        message: Delivery<'a, 'm>,
    },
    /// The recall handle of send `send`'s stored message (a timer message on a 5.3.2+ broker,
    /// see [`crate::recall`]); its [`Event::SendDone`] follows.
    RecallHandle {
        /// The send.
        send: SendId,
        /// The handle, as the broker wrote it.
        handle: &'a str,
    },
    /// PUSH_REPLY_MESSAGE_TO_CLIENT: the reply to one of this requester's requests (see
    /// [`crate::reply`]), matched by its `correlation_id`. The client answers SUCCESS.
    Reply(&'m PushedReply<'a>),
    /// CHECK_TRANSACTION_STATE for a half message of this producer's group (see
    /// [`crate::transaction`]): ask the application's checker, then answer with
    /// [`Client::end_transaction`]`(peer, `[`crate::transaction::EndTransaction::answer`]`, ..)`.
    /// Another group's checks are dropped, as Java does.
    Check {
        /// The broker that asked (the answer goes to it).
        peer: Peer,
        /// The check and its half message.
        check: &'m TransactionCheck<'a>,
    },
    /// The answer to a request of the runtime's own ([`Client::call`] returned its opaque):
    /// the frame handed to [`Client::handle_frame`] is it.
    Answer {
        /// The request's opaque.
        opaque: i32,
    },
    /// A broker refused one of the consumer's requests for a queue (see [`Refusal`]): the
    /// consumer retries as Java does; the runtime makes it heard (a log line, a health
    /// field), so that a consumer that reads nothing says why.
    Refused {
        /// What was refused, and with which code.
        refusal: Refusal,
        /// The broker's remark (empty when it gave none).
        remark: &'a str,
    },
}

/// Counters of the client's own work (the session's and the consumer's have theirs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ClientStats {
    /// Answers written to brokers' requests.
    pub answered: u32,
    /// Answers dropped: too many waiting, or one that does not fit the transmit buffer.
    pub answers_dropped: u32,
}

/// The client (see the [module docs](self)): a [`Session`] with these capacities, features and
/// store, and the consumer `C` ([`NoConsumer`] for a producer).
pub struct Client<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features = Full,
    St: Store = Fixed,
    C: Attached = NoConsumer,
> {
    session: Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>,
    consumer: C,
    answers: Deque<Answer, ANSWERS>,
    /// Nacks on their way (the consumer's send-backs, resends, local redeliveries).
    nacks: St::Vec<Entry, SENDS>,
    start: Start,
    stats: ClientStats,
    /// The latest `now` an input brought.
    now: Instant,
    /// The wall clock, as the runtime lent it last (a resend's born timestamp).
    wall: WallClock,
    /// The opaque of the last oneway request the client wrote (negative: never a session's).
    oneway: i32,
    /// The runtime's calls that failed, until [`Client::poll_event`] reports them.
    failed: Deque<(i32, TransportError), FAILED_CALLS>,
}

/// The runtime's failed calls kept for [`Event::CallFailed`] (more wait in the session's
/// queue of failed calls).
const FAILED_CALLS: usize = 4;

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
    C: Attached,
> Client<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St, C>
{
    /// The client of `session` and `consumer`. Inlined, so that
    /// `Client::from_parts(Session::build(..), PullConsumer::build(..))` builds both where the
    /// client lives (a gateway's client is kilobytes: no copy through the stack).
    #[inline(always)]
    pub fn from_parts(
        session: Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>,
        consumer: C,
    ) -> Self {
        Client {
            session,
            consumer,
            answers: Deque::new(),
            nacks: Table::new(),
            start: Start::Idle,
            stats: ClientStats::default(),
            now: Instant::ZERO,
            wall: WallClock::default(),
            oneway: 0,
            failed: Deque::new(),
        }
    }

    /// The client of a session built from `cfg` (which passed [`session::Config::check`]) and
    /// of the consumer `consumer` builds, each written straight into the client's place (a
    /// gateway's client is kilobytes, built on its `main`'s stack: no copy of the session
    /// or the consumer through the stack, as [`Client::from_parts`]' arguments may be).
    // Not inlined, nor the session's build: each result is written straight into its place
    // (QEMU: the downlink image's stack 11.4 KiB; 13.9 with this inlined, 14.2 with the
    // session assembled here).
    #[inline(never)]
    pub fn build(cfg: &session::Config<'_>, now: Instant, consumer: impl FnOnce() -> C) -> Self {
        Client {
            session: Session::build(cfg, now),
            consumer: consumer(),
            answers: Deque::new(),
            nacks: Table::new(),
            start: Start::Idle,
            stats: ClientStats::default(),
            now,
            wall: WallClock::default(),
            oneway: 0,
            failed: Deque::new(),
        }
    }

    /// [`Client::build`], inlined: for a caller that wraps the client (a `Result`, a larger
    /// struct built in a `Result`), where a call would build it aside and copy it (QEMU: the
    /// telemetry image's stack 4.8 KiB, 11.6 through [`Client::build`]).
    #[inline(always)]
    pub fn assemble(cfg: &session::Config<'_>, now: Instant, consumer: impl FnOnce() -> C) -> Self {
        Client {
            session: Session::assemble(cfg, now),
            consumer: consumer(),
            answers: Deque::new(),
            nacks: Table::new(),
            start: Start::Idle,
            stats: ClientStats::default(),
            now,
            wall: WallClock::default(),
            oneway: 0,
            failed: Deque::new(),
        }
    }

    // ----- getters -------------------------------------------------------------------------

    /// The session (routes, brokers, sends, counters).
    pub fn session(&self) -> &Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St> {
        &self.session
    }

    /// The consumer.
    pub fn consumer(&self) -> &C {
        &self.consumer
    }

    /// The client's counters.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// Whether `tx` must still be written: an answer always; a request while the session
    /// waits for it (a runtime that holds a frame of a request given up on drops it).
    pub fn is_live(&self, tx: &Transmit) -> bool {
        tx.answer || self.session.is_live(tx.opaque)
    }

    /// Whether work is due now without waiting for [`Client::poll_timeout`] (answers or
    /// requests queued, a queue an acknowledgement unblocked).
    pub fn has_work(&mut self) -> bool {
        (F::ADMIN && !self.answers.is_empty())
            || self.session.has_transmit()
            || self.consumer.take_wake()
    }

    /// Whether the answer queue is full: the runtime writes what [`Client::poll_transmit`]
    /// gives before it hands in the next frame of a read, or a further request's answer is
    /// dropped (counted in [`ClientStats::answers_dropped`]) and the broker waits for it until
    /// its own timeout (10 s for a pushed reply, a thread of its reply pool blocked).
    pub fn must_transmit(&self) -> bool {
        F::ADMIN && self.answers.is_full()
    }

    // ----- commands ------------------------------------------------------------------------

    /// The session, for its commands (topics, sends, routes, heartbeats, unregistering).
    pub fn session_mut(
        &mut self,
    ) -> &mut Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St> {
        &mut self.session
    }

    /// The consumer, for its commands (acks, seeks, pauses, nacks, stop), with the session to
    /// name things.
    pub fn consumer_mut(
        &mut self,
    ) -> (
        &mut C,
        &mut Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>,
    ) {
        (&mut self.consumer, &mut self.session)
    }

    /// Starts the consumer (see [`start`]): [`Event::Started`] when its queues are assigned.
    /// A client without a consumer, or whose consumer owns fixed queues
    /// ([`Features::REBALANCE`] `false`), has nothing to start: no event.
    pub fn start_consumer(&mut self, now: Instant) {
        self.now = now;
        if !C::ATTACHED || !F::REBALANCE {
            // Nothing to start (fixed queues: no group to announce; the queues are the
            // routes', owned on the consumer's own schedule).
            return;
        }
        // The first round comes last (not on the consumer's own schedule).
        self.consumer.defer_rebalance(now);
        let session = &mut self.session;
        for t in self.consumer.topics() {
            if !is_retry(session.topic_name(t)) {
                session.refresh_route(now, t);
            }
        }
        self.start = Start::Routes(Start::step(now));
        self.advance_start(now, None);
    }

    /// Whether no NameServer answered the consumer's start: every subscribed topic (the retry
    /// topic aside) is without a route because its last lookup reached no NameServer. A
    /// driver fails its start on it (rmq-std's `ConsumerBuilder::start`), as opposed to a
    /// topic that does not exist, whose lookup was answered.
    pub fn name_servers_unreachable(&self) -> bool {
        let s = &self.session;
        s.name_servers_unreachable(
            self.consumer
                .topics()
                .filter(|t| !is_retry(s.topic_name(*t))),
        )
    }

    /// A rebalance round now; [`PullEvent::Rebalanced`] when it is applied.
    pub fn rebalance_now(&mut self, now: Instant) {
        self.consumer.rebalance_now(now);
    }

    /// Hands a message the application could not process back for a later retry (see
    /// [`nack`]): [`Event::Nacked`] tells how it ended. `nack.body_len`, `flag` and
    /// `reconsume_times` are the message's, for the resend.
    ///
    /// # Errors
    /// [`NackError`] (nothing changed): not in flight, already nacked, tables full, too long.
    pub fn nack(&mut self, queue: QueueKey, lease: u32, nack: &Nack<'_>) -> Result<(), NackError> {
        if !F::SEND_BACK {
            return self.consumer.nack(queue, lease, nack);
        }
        let key = NackKey {
            queue,
            lease,
            offset: nack.offset,
        };
        self.track(key, nack, Step::SendingBack)?;
        if let Err(e) = self.consumer.nack(queue, lease, nack) {
            let _ = self.untrack(key);
            return Err(e);
        }
        Ok(())
    }

    /// Orderly consumption's skip of a message past its reconsume limit (Java
    /// `ConsumeMessageOrderlyService.checkReconsumeTimes`): no send-back, the resend to
    /// `%RETRY%<group>` at once ([`Event::Nacked`]: `Resent`, its offset acknowledged, or
    /// `Local`: keep it and retry).
    ///
    /// # Errors
    /// As [`Client::nack`].
    pub fn resend(
        &mut self,
        now: Instant,
        queue: QueueKey,
        lease: u32,
        nack: &Nack<'_>,
    ) -> Result<(), NackError> {
        if !F::SEND_BACK {
            return Err(NackError::NotInFlight);
        }
        let key = NackKey {
            queue,
            lease,
            offset: nack.offset,
        };
        self.track(key, nack, Step::SendingBack)?;
        self.start_resend(now, key);
        Ok(())
    }

    /// A request of the runtime's own (a recall, an SQL92 filter check; see
    /// [`Session::call`]): `code` with `ext` to `peer`, signed over `body` with the lent
    /// credentials, within `timeout`. The runtime writes the returned transmit's `len` bytes
    /// of `buf` at once, then `body`; the answer comes as [`Inbound::Answer`] with its
    /// opaque, or [`Event::CallFailed`] when there is none in time or the connection is lost.
    ///
    /// # Errors
    /// [`session::CallError`] ([`session::CallError::Unsupported`] without
    /// [`Features::CALLS`]); nothing is registered then.
    #[allow(clippy::too_many_arguments)]
    pub fn call<E: crate::wire::ExtFields, M: Lend + ?Sized>(
        &mut self,
        now: Instant,
        peer: Peer,
        code: RequestCode,
        ext: Option<E>,
        body: &[u8],
        timeout: crate::time::Duration,
        buf: &mut [u8],
        lend: &M,
    ) -> Result<Transmit, session::CallError> {
        if !F::CALLS {
            return Err(session::CallError::Unsupported);
        }
        self.now = now;
        self.session
            .call(now, peer, code, ext, body, timeout, buf, lend)
    }

    /// The application's handler ran the message of [`Inbound::Direct`] in `spent_ms`: the
    /// answer to that CONSUME_MESSAGE_DIRECTLY goes out with the next transmits.
    pub fn answer_direct(
        &mut self,
        peer: Peer,
        opaque: i32,
        outcome: DirectOutcome,
        spent_ms: u64,
    ) {
        self.answer(Answer::Direct {
            peer,
            opaque,
            outcome: Some(outcome),
            spent_ms,
        });
    }

    /// Writes END_TRANSACTION `end` for `peer` (the broker that stored the half message, or
    /// the one whose check it answers; see [`crate::transaction`]) into `buf` at once: a
    /// oneway request with an opaque no request of the session's has (-1, -2, ...), signed
    /// with what `lend` lends. The runtime writes the transmit's `len` bytes to `peer`.
    /// `None`: a build without [`Features::TRANSACTIONS`], or `buf` too small.
    pub fn end_transaction<M: Lend + ?Sized>(
        &mut self,
        peer: Peer,
        end: &crate::transaction::EndTransaction<'_>,
        buf: &mut [u8],
        lend: &M,
    ) -> Option<Transmit> {
        if !F::TRANSACTIONS {
            return None;
        }
        // -1, -2, ... down to i32::MIN, then -1 again.
        self.oneway = match self.oneway {
            i32::MIN | 0.. => -1,
            o => o - 1,
        };
        let (code, opaque) = (RequestCode::END_TRANSACTION, self.oneway);
        let len = self
            .session
            .emit_oneway(code, opaque, end.header(), end.remark, buf, lend)?;
        Some(Transmit {
            peer,
            len,
            opaque,
            body: None,
            body_len: 0,
            report_written: false,
            answer: true,
        })
    }

    // ----- inputs --------------------------------------------------------------------------

    /// A whole frame arrived from `peer`. Responses go to whoever asked (a pull answer's
    /// messages to `inbound`); a broker's request is acted on, and answered with the next
    /// transmits.
    ///
    /// # Errors
    /// [`FrameError`] when the frame cannot be read: close that connection and report it with
    /// [`Client::handle_closed`].
    pub fn handle_frame(
        &mut self,
        now: Instant,
        peer: Peer,
        frame: &[u8],
        inbound: &mut dyn FnMut(Inbound<'_, '_>),
    ) -> Result<(), FrameError> {
        self.now = now;
        match self.session.handle_frame(now, peer, frame)? {
            Incoming::Handled => {}
            Incoming::RecallHandle { send, start, end } => {
                if let Some(handle) = frame
                    .get(start..end)
                    .and_then(|b| core::str::from_utf8(b).ok())
                {
                    inbound(Inbound::RecallHandle { send, handle });
                }
            }
            Incoming::Response(opaque) => {
                let deliver = &mut |d: Delivery<'_, '_>| inbound(Inbound::Message(d));
                let consumers =
                    self.consumer
                        .handle_response(now, &self.session, opaque, frame, deliver);
                if F::CALLS && !consumers {
                    inbound(Inbound::Answer { opaque });
                }
                if F::CALLS && matches!(self.start, Start::Filters(_)) {
                    self.advance_start(now, None);
                }
                // (A runtime that keeps no broker remarks hears of no refusal.)
                let refusal = F::BROKER_REMARKS.then(|| self.consumer.take_refusal());
                if let Some(refusal) = refusal.flatten() {
                    let f = Frame::new_unchecked(frame);
                    let mut buf = [0u8; 256];
                    let header = CommandHeader::parse(&f).ok();
                    // (A remark longer than `buf` with escapes in it: as the broker wrote it.)
                    let remark = match &header {
                        Some(h) => match h.remark_text(&mut buf) {
                            Some(r) => Some(r),
                            None => h.remark().and_then(|r| core::str::from_utf8(r.raw()).ok()),
                        },
                        None => None,
                    };
                    let remark = remark.unwrap_or("");
                    inbound(Inbound::Refused { refusal, remark });
                }
            }
            Incoming::Request { code, opaque } => {
                self.request(now, peer, code, opaque, frame, inbound);
            }
        }
        Ok(())
    }

    /// The connection to `peer` is gone (or could not be opened): what was written to it
    /// fails at once.
    pub fn handle_closed(&mut self, now: Instant, peer: Peer, cause: TransportError) {
        self.session.handle_closed(now, peer, cause);
        self.settle(now);
    }

    /// The frame of `opaque` was written completely (when [`Transmit::report_written`] was
    /// set).
    pub fn handle_written(&mut self, now: Instant, opaque: i32) {
        self.session.handle_written(now, opaque);
    }

    /// Runs every schedule due at `now` (request deadlines, routes, heartbeats, the
    /// consumer's rebalance, commits and locks). An early or extra call is a no-op.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.session.handle_timeout(now);
        self.consumer.handle_timeout(now);
        self.settle(now);
        if C::ATTACHED && self.start.deadline().is_some_and(|d| d <= now) {
            self.advance_start(now, None);
        }
    }

    // ----- outputs -------------------------------------------------------------------------

    /// The next frame to write, encoded into `buf`: answers to brokers first, then the
    /// session's requests, then the consumer's.
    pub fn poll_transmit<M: Lend + ?Sized>(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        lend: &M,
    ) -> Option<Transmit> {
        if C::ATTACHED && F::SEND_BACK {
            // (A resend's born timestamp.)
            self.wall.set(now, lend.unix_millis());
        }
        while let Some(a) = F::ADMIN.then(|| self.answers.pop_front()).flatten() {
            if let Some(tx) = self.write_answer(now, a, buf, lend) {
                return Some(tx);
            }
        }
        let tx = if F::SEND_BACK {
            let with = WithResends {
                inner: lend,
                nacks: &self.nacks,
                max_reconsume: self.consumer.max_reconsume(),
            };
            self.session.poll_transmit(now, buf, &with)
        } else {
            self.session.poll_transmit(now, buf, lend)
        };
        if let Some(tx) = tx {
            return Some(tx);
        }
        self.consumer.poll_call(now, &mut self.session, buf, lend)
    }

    /// The nack whose resend send `id` is, if it is one (a runtime that copies bodies into
    /// its frames finds this one's in the message it keeps).
    pub fn resend_of(&self, id: SendId) -> Option<NackKey> {
        self.nacks
            .iter()
            .find(|e| e.step == Step::Resending(id))
            .map(|e| e.key)
    }

    /// When [`Client::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut d = self.session.poll_timeout();
        let mut min = |t: Option<Instant>| {
            if let Some(t) = t {
                d = Some(d.map_or(t, |d| if d <= t { d } else { t }));
            }
        };
        min(self.consumer.poll_timeout());
        if C::ATTACHED && F::REBALANCE {
            min(self.start.deadline());
        }
        if C::ATTACHED && F::SEND_BACK {
            min(self.nacks.iter().filter_map(Entry::due).min());
        }
        d
    }

    /// The next event, or `None`.
    pub fn poll_event(&mut self) -> Option<Event> {
        let now = self.now;
        // Failed calls go to the consumer first (its events may follow from them).
        self.settle(now);
        if F::CALLS
            && let Some((opaque, error)) = self.failed.pop_front()
        {
            return Some(Event::CallFailed { opaque, error });
        }
        loop {
            if let Some(e) = self.session.poll_event() {
                if C::ATTACHED {
                    if let Some(e) = self.consumer_view(now, e) {
                        return Some(e);
                    }
                    continue;
                }
                match client_event(e) {
                    Some(e) => return Some(e),
                    None => continue,
                }
            }
            if let Some(pe) = self.consumer.poll_event(F::MILESTONES) {
                match self.pull_event(now, pe) {
                    Some(e) => return Some(e),
                    None => continue,
                }
            }
            if !C::ATTACHED {
                return None;
            }
            if F::REBALANCE && self.start == Start::Done {
                self.start = Start::Idle;
                return Some(Event::Started);
            }
            if let (true, Start::Failed(topic, code)) = (F::CALLS, self.start) {
                self.start = Start::Idle;
                return Some(Event::StartFailed { topic, code });
            }
            if !F::SEND_BACK {
                return None;
            }
            let due = self
                .nacks
                .iter()
                .position(|e| e.due().is_some_and(|d| d <= now))?;
            let e = self.nacks.swap_remove(due);
            return Some(Event::Redeliver(e.key));
        }
    }

    // ----- internals -----------------------------------------------------------------------

    /// Hands the calls that got no answer to the consumer.
    fn settle(&mut self, now: Instant) {
        self.now = now;
        if C::ATTACHED || F::CALLS {
            // (With the runtime's failures queued in full, the rest wait in the session's
            // queue: each `poll_event` hands one out and takes more.)
            while !(F::CALLS && self.failed.is_full())
                && let Some((opaque, error)) = self.session.poll_call_failed()
            {
                let consumers = self.consumer.handle_call_failed(now, &self.session, opaque);
                if !consumers && F::CALLS {
                    let _ = self.failed.push_back((opaque, error));
                }
            }
            if F::CALLS && matches!(self.start, Start::Filters(_)) {
                self.advance_start(now, None);
            }
        }
    }

    /// A session event of a consumer's client: the consumer's failed calls, its resends, and
    /// its start's steps are the client's; the rest goes on to the runtime.
    fn consumer_view(&mut self, now: Instant, e: session::Event) -> Option<Event> {
        match e {
            // The consumer's: `poll_event` settles them first, so none comes here.
            session::Event::CallFailed { .. } => None,
            session::Event::SendDone { id, result } => {
                let resend = F::SEND_BACK.then(|| {
                    self.nacks
                        .iter()
                        .position(|e| e.step == Step::Resending(id))
                });
                let Some(i) = resend.flatten() else {
                    return Some(Event::SendDone { id, result });
                };
                let key = self.nacks[i].key;
                let outcome = if result.is_ok() {
                    let _ = self.nacks.swap_remove(i);
                    let _ = self.consumer.ack(now, key.queue, key.lease, key.offset);
                    NackOutcome::Resent
                } else {
                    self.nacks[i].local(now);
                    NackOutcome::Local
                };
                Some(Event::Nacked { key, outcome })
            }
            e => {
                if F::REBALANCE && self.start != Start::Idle {
                    self.advance_start(now, Some(&e));
                }
                client_event(e)
            }
        }
    }

    /// A consumer event: its send-backs' outcomes are the nacks'; its first rebalance ends
    /// the start.
    fn pull_event(&mut self, now: Instant, pe: PullEvent) -> Option<Event> {
        match pe {
            PullEvent::SentBack {
                queue,
                lease,
                offset,
            }
            | PullEvent::SendBackFailed {
                queue,
                lease,
                offset,
            } if F::SEND_BACK => {
                let key = NackKey {
                    queue,
                    lease,
                    offset,
                };
                if !matches!(pe, PullEvent::SentBack { .. }) {
                    return self.start_resend(now, key);
                }
                let _ = self.untrack(key);
                Some(Event::Nacked {
                    key,
                    outcome: NackOutcome::SentBack,
                })
            }
            PullEvent::Rebalanced if F::REBALANCE && matches!(self.start, Start::Rebalance(_)) => {
                self.start = Start::Done;
                Some(Event::Consumer(pe))
            }
            pe => Some(Event::Consumer(pe)),
        }
    }

    /// Records nack `key` on its way.
    fn track(&mut self, key: NackKey, nack: &Nack<'_>, step: Step) -> Result<(), NackError> {
        if self.nacks.iter().any(|e| e.key == key) {
            return Err(NackError::Pending);
        }
        let e = Entry {
            key,
            body_len: nack.body_len,
            flag: nack.flag,
            reconsume_times: nack.reconsume_times,
            step,
        };
        self.nacks.push(e).map_err(|_| NackError::Full)
    }

    fn untrack(&mut self, key: NackKey) -> Option<Entry> {
        let i = self.nacks.iter().position(|e| e.key == key)?;
        Some(self.nacks.swap_remove(i))
    }

    /// The resend of nack `key` to `%RETRY%<group>`; `Some` when it could not start (the
    /// nack ends in a local redelivery).
    fn start_resend(&mut self, now: Instant, key: NackKey) -> Option<Event> {
        if !F::SEND_BACK {
            return None;
        }
        let i = self.nacks.iter().position(|e| e.key == key)?;
        let e = self.nacks[i];
        let name: Option<heapless::String<{ crate::pull_consumer::MAX_NAME + 8 }>> =
            retry_topic(self.consumer.group());
        let topic = name.and_then(|n| self.session.topic(now, &n).ok());
        let mut args = SendArgs::new(
            RetryConfig::plain(SendMode::Sync),
            e.body_len,
            self.wall.unix_millis(now),
        );
        args.flag = e.flag;
        let max = self.consumer.max_reconsume();
        args.reconsume = Some((e.reconsume_times.max(0).saturating_add(1), max));
        match topic.map(|t| self.session.send(now, t, &args)) {
            Some(Ok(id)) => {
                self.nacks[i].step = Step::Resending(id);
                None
            }
            _ => {
                self.nacks[i].local(now);
                Some(Event::Nacked {
                    key,
                    outcome: NackOutcome::Local,
                })
            }
        }
    }

    /// Moves the consumer's start on after `e` (or at its step's deadline).
    fn advance_start(&mut self, now: Instant, e: Option<&session::Event>) {
        if !F::REBALANCE {
            return;
        }
        let expired = self.start.deadline().is_some_and(|d| d <= now);
        match self.start {
            Start::Routes(_) => {
                let session = &self.session;
                let routed = self
                    .consumer
                    .topics()
                    .filter(|t| !is_retry(session.topic_name(*t)))
                    .all(|t| !session.subscribe_queues(t).is_empty());
                let failed = matches!(e, Some(session::Event::RouteFailed(_)));
                if routed || failed || expired {
                    if F::CALLS && self.consumer.check_filters(&self.session) > 0 {
                        self.start = Start::Filters(Start::step(now));
                    } else {
                        self.heartbeat_start(now);
                    }
                }
            }
            Start::Filters(_) if F::CALLS => match self.consumer.filters_checked(expired) {
                Some(Ok(())) => self.heartbeat_start(now),
                Some(Err((topic, code))) => self.start = Start::Failed(topic, code),
                None => {}
            },
            Start::Heartbeat(_) => {
                if expired || matches!(e, Some(session::Event::HeartbeatsDone)) {
                    // The heartbeat made the brokers create `%RETRY%<group>`: its route
                    // exists now.
                    let session = &self.session;
                    let retry = self
                        .consumer
                        .topics()
                        .find(|t| is_retry(session.topic_name(*t)));
                    match retry {
                        Some(t) => {
                            self.session.refresh_route(now, t);
                            self.start = Start::RetryRoute(t, Start::step(now));
                        }
                        None => self.rebalance_start(now),
                    }
                }
            }
            Start::RetryRoute(t, _) => {
                let routed = matches!(e, Some(session::Event::RouteUpdated(x) | session::Event::RouteFailed(x)) if *x == t);
                if routed || expired {
                    self.rebalance_start(now);
                }
            }
            Start::Rebalance(_) if expired => self.start = Start::Done,
            Start::Rebalance(_)
            | Start::Idle
            | Start::Done
            | Start::Filters(_)
            | Start::Failed(..) => {}
        }
    }

    fn heartbeat_start(&mut self, now: Instant) {
        self.start = Start::Heartbeat(Start::step(now));
        self.session.heartbeat_now(now);
    }

    fn rebalance_start(&mut self, now: Instant) {
        self.start = Start::rebalance(now);
        self.consumer.rebalance_now(now);
    }

    fn answer(&mut self, a: Answer) {
        if !F::ADMIN {
            return;
        }
        if self.answers.push_back(a).is_err() {
            self.stats.answers_dropped = self.stats.answers_dropped.wrapping_add(1);
        }
    }

    /// A request `peer` sent (see [`answer`]).
    fn request(
        &mut self,
        now: Instant,
        peer: Peer,
        code: i32,
        opaque: i32,
        frame: &[u8],
        inbound: &mut dyn FnMut(Inbound<'_, '_>),
    ) {
        if !F::ADMIN {
            // Nothing is answered; a consumer still rebalances when told to.
            if C::ATTACHED && RequestCode(code) == RequestCode::NOTIFY_CONSUMER_IDS_CHANGED {
                self.consumer.notify_ids_changed(now);
            }
            return;
        }
        // The session read the header already: this cannot fail.
        let Some(f) = Frame::new_checked(frame).ok() else {
            return;
        };
        let Some(h) = CommandHeader::parse(&f).ok() else {
            return;
        };
        let c = RequestCode(code);
        if C::ATTACHED && c == RequestCode::NOTIFY_CONSUMER_IDS_CHANGED {
            self.consumer.notify_ids_changed(now);
        } else if C::ATTACHED && c == RequestCode::RESET_CONSUMER_CLIENT_OFFSET {
            self.consumer
                .reset_offsets(now, &self.session, f.body_ref());
        } else if C::ATTACHED && c == RequestCode::GET_CONSUMER_RUNNING_INFO {
            let group = self.consumer.group();
            let ours = GetConsumerRunningInfoRequestHeader::decode(&h, &mut Scratch::default())
                .is_ok_and(|r| r.consumer_group == group);
            self.answer(Answer::RunningInfo { peer, opaque, ours });
        } else if C::ATTACHED && c == RequestCode::GET_CONSUMER_STATUS_FROM_CLIENT {
            let group = self.consumer.group();
            let topic = GetConsumerStatusRequestHeader::decode(&h, &mut Scratch::default())
                .ok()
                .filter(|r| r.group == group)
                .and_then(|r| self.session.topic_id(r.topic));
            self.answer(Answer::ConsumerStatus {
                peer,
                opaque,
                topic,
            });
        } else if C::ATTACHED && c == RequestCode::CONSUME_MESSAGE_DIRECTLY {
            match direct_message(frame) {
                Some((m, broker_name)) => {
                    // Not in flight: acknowledging or nacking it does nothing.
                    let queue = QueueKey {
                        topic: TopicId(u16::MAX),
                        broker: BrokerId(u16::MAX),
                        queue_id: m.queue_id,
                    };
                    let message = Delivery {
                        queue,
                        lease: 0,
                        topic: crate::send_back::origin_topic(&m),
                        queue_topic: m.topic,
                        broker_name,
                        message: &m,
                    };
                    inbound(Inbound::Direct {
                        peer,
                        opaque,
                        message,
                    });
                }
                None => self.answer(Answer::Direct {
                    peer,
                    opaque,
                    outcome: None,
                    spent_ms: 0,
                }),
            }
        } else if F::REPLIES && !C::ATTACHED && c == RequestCode::PUSH_REPLY_MESSAGE_TO_CLIENT {
            let reply = crate::reply::pushed_reply(frame);
            if let Some(r) = &reply {
                inbound(Inbound::Reply(r));
            }
            let ok = reply.is_some();
            self.answer(Answer::Status { peer, opaque, ok });
        } else if F::TRANSACTIONS && !C::ATTACHED && c == RequestCode::CHECK_TRANSACTION_STATE {
            if let Some(check) = crate::transaction::check_request(frame, self.session.group()) {
                inbound(Inbound::Check {
                    peer,
                    check: &check,
                });
            }
        } else if !is_oneway(&h) {
            self.answer(Answer::NotServed { peer, opaque, code });
        }
    }

    /// Encodes answer `a` into `buf`.
    fn write_answer<M: Lend + ?Sized>(
        &mut self,
        now: Instant,
        a: Answer,
        buf: &mut [u8],
        lend: &M,
    ) -> Option<Transmit> {
        let version = self.session.config_version();
        let n = match a {
            Answer::NotServed { opaque, code, .. } => {
                crate::admin::write_not_supported(code, opaque, version, buf).ok()
            }
            _ => {
                let (consumer, session) = (&mut self.consumer, &self.session);
                let mut name = heapless::String::<{ crate::pull_consumer::MAX_NAME }>::new();
                let _ = name.push_str(consumer.group());
                let orderly = consumer.orderly();
                if let Answer::ConsumerStatus { topic, .. } = a {
                    let n = a.write(version, &name, orderly, buf, |tail| match topic {
                        Some(t) => consumer.consumer_status(session, t, tail),
                        None => crate::admin::write_consumer_status(&mut [], tail).ok(),
                    });
                    return answered(&mut self.stats, a, n);
                }
                a.write(version, &name, orderly, buf, |tail| {
                    let mut extra: Vec<(&str, &str), 32> = Vec::new();
                    let mut i = 0;
                    while let Some(p) = lend.running_prop(i) {
                        if extra.push(p).is_err() {
                            break;
                        }
                        i += 1;
                    }
                    let unix = lend.unix_millis();
                    consumer.running_info(now, unix, session, &extra, lend.consume_rt(), tail)
                })
            }
        };
        answered(&mut self.stats, a, n)
    }
}

/// The transmit of answer `a`, `len` bytes long (`None`: it did not fit, and is dropped).
// One copy for every client type (a gateway's flash).
#[inline(never)]
fn answered(stats: &mut ClientStats, a: Answer, len: Option<usize>) -> Option<Transmit> {
    let Some(len) = len else {
        stats.answers_dropped = stats.answers_dropped.wrapping_add(1);
        return None;
    };
    stats.answered = stats.answered.wrapping_add(1);
    Some(Transmit {
        peer: a.peer(),
        len,
        opaque: a.opaque(),
        body: None,
        body_len: 0,
        report_written: false,
        answer: true,
    })
}

/// Whether a topic is a group's retry topic.
fn is_retry(name: Option<&str>) -> bool {
    name.is_some_and(|n| n.starts_with(RETRY_TOPIC_PREFIX))
}

/// A session event as the client reports it (`None`: a call's, which is the consumer's).
fn client_event(e: session::Event) -> Option<Event> {
    Some(match e {
        session::Event::SendDone { id, result } => Event::SendDone { id, result },
        session::Event::Reconnect(p) => Event::Reconnect(p),
        session::Event::RouteUpdated(t) => Event::RouteUpdated(t),
        session::Event::RouteFailed(t) => Event::RouteFailed(t),
        session::Event::ChooseQueue { id, queues } => Event::ChooseQueue { id, queues },
        session::Event::HeartbeatsDone => Event::HeartbeatsDone,
        session::Event::Unregistered => Event::Unregistered,
        session::Event::CallFailed { .. } => return None,
    })
}

#[cfg(test)]
mod tests;
