//! The send retry plan: a sans-IO state machine for one `send()`.
//!
//! Read docs/protocol/STRATEGY.md §4 (`sendDefaultImpl`, the async path, oneway) and §7
//! (`processSendResponse`) first. The plan does not know the wire codec: the broker's answer
//! comes in as a plain response code (`i32`), transport trouble as [`TransportError`].
//!
//! ## Call order
//!
//! ```text
//!   new / to_queue ──start()──► Step::Send(attempt) ──(runtime sends it)──┐
//!          ▲                                                              │
//!          │  Step::Send(next attempt)                                    ▼
//!          └──────── handle_outcome(now, outcome) ◄── response / transport error
//!                    handle_timeout(now)          ◄── poll_timeout() reached
//!                          │
//!                          └──► Step::Done(Ok(Sent) | Err(SendError))
//! ```
//!
//! The plan applies the fault-table updates itself (through the [`SendEnv`] the runtime
//! passes in), with the profile's rules:
//!
//! | outcome | Java49 (latency, isolation) | Java5 (isolation, reachable) | Adaptive |
//! | --- | --- | --- | --- |
//! | status 0/10/11/12 | (elapsed, false) | (false, true) | good sample |
//! | other response code | (elapsed, true) | sync (true, false); async (true, true) | fault |
//! | transport failure | (elapsed, true) | (true, !start_detector_enable) | fault |
//! | broker address unknown | (elapsed, true) | (false, true) | fault |
//!
//! [`Profile::Plain`] (the Java default, latency switch off) never touches the table.
//!
//! ## Deliberate differences from Java
//!
//! - The total deadline (`send_timeout`) is checked before every attempt, also in ASYNC mode
//!   (4.9 does not check before an async retry). An attempt is never issued with zero budget
//!   left: when `now >= begin + send_timeout` the send ends with
//!   [`SendErrorKind::CallTimeout`] (Java issues one more attempt at exactly zero left).
//! - Async retries re-select a full queue (Java keeps the old queue id and `bname`).
//! - The 4.9 "async submit clears isolation" update is not copied.
//! - A oneway write that fails is reported (5.x drops connect failures silently).

use core::fmt;
use core::marker::PhantomData;

use crate::counter::QueueCounter;
use crate::fault::{AdaptiveConfig, AdaptiveSample, FaultTable, IsolationPolicy};
use crate::select::{AllProfiles, Profile, ProfileSet, PublishQueue, select};
use crate::time::{Duration, Instant};
use crate::transport::TransportError;
use crate::wire::ResponseCode;

/// How the caller sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SendMode {
    /// Wait for the answer; 1 + `retry_times_when_send_failed` attempts.
    Sync,
    /// Callback; 1 + `retry_times_when_send_async_failed` attempts, transport failures only.
    Async,
    /// No answer; one attempt, done when written.
    Oneway,
}

/// The broker stored the message (docs/protocol/STRATEGY.md §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SendStatus {
    /// SUCCESS (0).
    SendOk,
    /// FLUSH_DISK_TIMEOUT (10).
    FlushDiskTimeout,
    /// FLUSH_SLAVE_TIMEOUT (12).
    FlushSlaveTimeout,
    /// SLAVE_NOT_AVAILABLE (11).
    SlaveNotAvailable,
}

impl SendStatus {
    /// Java `processSendResponse`: the status for `code`, or `None` (an `MQBrokerException`).
    pub fn from_code(c: i32) -> Option<Self> {
        match ResponseCode(c) {
            ResponseCode::SUCCESS => Some(SendStatus::SendOk),
            ResponseCode::FLUSH_DISK_TIMEOUT => Some(SendStatus::FlushDiskTimeout),
            ResponseCode::FLUSH_SLAVE_TIMEOUT => Some(SendStatus::FlushSlaveTimeout),
            ResponseCode::SLAVE_NOT_AVAILABLE => Some(SendStatus::SlaveNotAvailable),
            _ => None,
        }
    }
}

/// What happened to the attempt in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AttemptOutcome {
    /// The broker answered with this response code.
    Response(i32),
    /// ONEWAY only: the request was written.
    Written,
    /// A transport failure.
    Transport(TransportError),
}

/// Maximum number of retryable codes in a [`RetryCodes`] set.
pub const MAX_RETRY_CODES: usize = 12;

/// The set of broker response codes that a SYNC send retries (Java `retryResponseCodes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RetryCodes {
    codes: [i32; MAX_RETRY_CODES],
    len: u8,
}

/// [`RetryCodes::with`] on a full set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RetryCodesFull;

impl fmt::Display for RetryCodesFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "retry code set is full ({MAX_RETRY_CODES} codes)")
    }
}

impl core::error::Error for RetryCodesFull {}

const J49_CODES: [i32; 6] = [
    ResponseCode::TOPIC_NOT_EXIST.0,
    ResponseCode::SERVICE_NOT_AVAILABLE.0,
    ResponseCode::SYSTEM_ERROR.0,
    ResponseCode::NO_PERMISSION.0,
    ResponseCode::NO_BUYER_ID.0,
    ResponseCode::NOT_IN_CURRENT_UNIT.0,
];

impl RetryCodes {
    const fn from_list(list: &[i32]) -> Self {
        let mut codes = [0; MAX_RETRY_CODES];
        let mut i = 0;
        while i < list.len() && i < MAX_RETRY_CODES {
            codes[i] = list[i];
            i += 1;
        }
        RetryCodes {
            codes,
            len: i as u8,
        }
    }

    /// 4.9.2 … 5.2.0: 17, 14, 1, 16, 204, 205.
    pub const JAVA_49: RetryCodes = RetryCodes::from_list(&J49_CODES);
    /// 5.3.0: adds SYSTEM_BUSY (2).
    pub const JAVA_530: RetryCodes = RetryCodes::from_list(&[
        J49_CODES[0],
        J49_CODES[1],
        J49_CODES[2],
        J49_CODES[3],
        J49_CODES[4],
        J49_CODES[5],
        ResponseCode::SYSTEM_BUSY.0,
    ]);
    /// 5.3.1 … 5.3.3: adds SYSTEM_BUSY (2) and GO_AWAY (1500).
    pub const JAVA_533: RetryCodes = RetryCodes::from_list(&[
        J49_CODES[0],
        J49_CODES[1],
        J49_CODES[2],
        J49_CODES[3],
        J49_CODES[4],
        J49_CODES[5],
        ResponseCode::SYSTEM_BUSY.0,
        ResponseCode::GO_AWAY.0,
    ]);

    /// `addRetryResponseCode`: this set plus `c`.
    ///
    /// # Errors
    /// [`RetryCodesFull`] when the set already holds [`MAX_RETRY_CODES`] codes.
    pub fn with(mut self, c: i32) -> Result<Self, RetryCodesFull> {
        if self.contains(c) {
            return Ok(self);
        }
        let slot = self
            .codes
            .get_mut(usize::from(self.len))
            .ok_or(RetryCodesFull)?;
        *slot = c;
        self.len += 1;
        Ok(self)
    }

    /// Whether `c` is retried.
    pub fn contains(&self, c: i32) -> bool {
        self.codes
            .get(..usize::from(self.len))
            .is_some_and(|s| s.contains(&c))
    }
}

/// Everything a send plan needs to know. Build one with a profile constructor and adjust.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RetryConfig {
    /// Selection and fault-update profile.
    pub profile: Profile,
    /// SYNC, ASYNC or ONEWAY.
    pub mode: SendMode,
    /// `sendMsgTimeout`: one total deadline for all attempts (default 3000 ms).
    pub send_timeout: Duration,
    /// `retryTimesWhenSendFailed` (default 2).
    pub retry_times_when_send_failed: u8,
    /// `retryTimesWhenSendAsyncFailed` (default 2).
    pub retry_times_when_send_async_failed: u8,
    /// `retryAnotherBrokerWhenNotStoreOK` (default false).
    pub retry_another_broker_when_not_store_ok: bool,
    /// Retryable response codes (SYNC only).
    pub retry_codes: RetryCodes,
    /// 5.x `sendMsgMaxTimeoutPerRequest` (default off): caps an attempt that is not the last.
    pub max_timeout_per_request: Option<Duration>,
    /// 5.x `startDetectorEnable`: a transport failure then marks the broker unreachable.
    pub start_detector_enable: bool,
    /// Latency → isolation tables (Java profiles).
    pub policy: IsolationPolicy<'static>,
    /// Parameters of [`Profile::Adaptive`].
    pub adaptive: AdaptiveConfig,
}

impl RetryConfig {
    const fn base(
        profile: Profile,
        mode: SendMode,
        policy: IsolationPolicy<'static>,
        codes: RetryCodes,
    ) -> Self {
        RetryConfig {
            profile,
            mode,
            send_timeout: Duration::from_millis(3000),
            retry_times_when_send_failed: 2,
            retry_times_when_send_async_failed: 2,
            retry_another_broker_when_not_store_ok: false,
            retry_codes: codes,
            max_timeout_per_request: None,
            start_detector_enable: false,
            policy,
            adaptive: AdaptiveConfig::DEFAULT,
        }
    }

    /// Java default (latency switch off), 4.9.8 retry codes.
    pub const fn plain(mode: SendMode) -> Self {
        Self::base(
            Profile::Plain,
            mode,
            IsolationPolicy::JAVA_49,
            RetryCodes::JAVA_49,
        )
    }

    /// Java 4.9.8 with the latency switch on.
    pub const fn java49(mode: SendMode) -> Self {
        Self::base(
            Profile::Java49,
            mode,
            IsolationPolicy::JAVA_49,
            RetryCodes::JAVA_49,
        )
    }

    /// Java 5.3.3 with the latency switch on.
    pub const fn java5(mode: SendMode) -> Self {
        Self::base(
            Profile::Java5,
            mode,
            IsolationPolicy::JAVA_5,
            RetryCodes::JAVA_533,
        )
    }

    /// Our adaptive profile (5.3.3 retry codes).
    pub const fn adaptive(mode: SendMode) -> Self {
        Self::base(
            Profile::Adaptive,
            mode,
            IsolationPolicy::JAVA_5,
            RetryCodes::JAVA_533,
        )
    }

    /// Total attempts allowed for the mode.
    pub fn max_attempts(&self) -> u8 {
        match self.mode {
            SendMode::Sync => self.retry_times_when_send_failed.saturating_add(1),
            SendMode::Async => self.retry_times_when_send_async_failed.saturating_add(1),
            SendMode::Oneway => 1,
        }
    }
}

/// Why a send failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SendErrorKind {
    /// The route has no publish queue (Java "No route info of this topic").
    NoRoute,
    /// The broker answered with a code that is not a send status.
    Broker {
        /// The response code.
        code: i32,
    },
    /// The last attempt failed below the protocol.
    Transport(TransportError),
    /// The total deadline passed before another attempt could start (Java "sendDefaultImpl
    /// call timeout").
    CallTimeout,
}

/// A failed send: the cause of the last failure and how many attempts were made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SendError {
    kind: SendErrorKind,
    attempts: u8,
    retryable: bool,
}

impl SendError {
    /// The total deadline passed after `attempts` attempts (a send that waited for its route
    /// or its queue until then).
    pub(crate) const fn call_timeout(attempts: u8) -> Self {
        SendError {
            kind: SendErrorKind::CallTimeout,
            attempts,
            retryable: true,
        }
    }

    /// The cause.
    pub fn kind(&self) -> SendErrorKind {
        self.kind
    }

    /// Attempts made (0 for [`SendErrorKind::NoRoute`]).
    pub fn attempts(&self) -> u8 {
        self.attempts
    }

    /// Whether sending the same message again later may succeed: transport failures,
    /// timeouts, a missing route, and broker codes in the configured retry set.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The code Java puts on the final `MQClientException` (docs/protocol/STRATEGY.md §4.1), if any.
    pub fn java_code(&self) -> Option<i32> {
        match self.kind {
            SendErrorKind::Broker { code } => Some(code),
            SendErrorKind::Transport(TransportError::ConnectFailed) => {
                Some(ResponseCode::CONNECT_BROKER_EXCEPTION.0)
            }
            SendErrorKind::Transport(TransportError::TimedOut) => {
                Some(ResponseCode::ACCESS_BROKER_TIMEOUT.0)
            }
            SendErrorKind::Transport(TransportError::BrokerNotFound) => {
                Some(ResponseCode::BROKER_NOT_EXIST_EXCEPTION.0)
            }
            SendErrorKind::NoRoute => Some(ResponseCode::NOT_FOUND_TOPIC_EXCEPTION.0),
            _ => None,
        }
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            SendErrorKind::NoRoute => f.write_str("no route info for the topic"),
            SendErrorKind::Broker { code } => {
                write!(
                    f,
                    "broker answered code {code} after {} attempt(s)",
                    self.attempts
                )
            }
            SendErrorKind::Transport(e) => {
                write!(
                    f,
                    "transport failure {e:?} after {} attempt(s)",
                    self.attempts
                )
            }
            SendErrorKind::CallTimeout => {
                write!(f, "send timeout after {} attempt(s)", self.attempts)
            }
        }
    }
}

impl core::error::Error for SendError {}

/// A successful send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Sent<K> {
    /// The status.
    pub status: SendStatus,
    /// The queue that stored the message.
    pub queue: PublishQueue<K>,
    /// Attempts made.
    pub attempts: u8,
}

/// One attempt the runtime must perform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use]
pub struct Attempt<K> {
    /// Where to send.
    pub queue: PublishQueue<K>,
    /// 1-based attempt number.
    pub number: u8,
    /// When the attempt started.
    pub started: Instant,
    /// Give up on it at this instant (report [`TransportError::TimedOut`] through
    /// [`SendPlan::handle_timeout`]). Use `deadline - started` as the request timeout.
    pub deadline: Instant,
}

/// What to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use]
pub enum Step<K> {
    /// Send this attempt (and forget the previous one: a late answer to it is ignored).
    Send(Attempt<K>),
    /// Keep waiting for the attempt in flight.
    Wait,
    /// The send is over.
    Done(Result<Sent<K>, SendError>),
}

/// What the runtime lends the plan on every call.
#[derive(Debug)]
pub struct SendEnv<'a, K, const N: usize> {
    /// The topic's publish queues, in route order.
    pub queues: &'a [PublishQueue<K>],
    /// The producer's fault table (built with [`Profile::update_rule`]).
    pub table: &'a mut FaultTable<K, N>,
    /// The producer's round-robin counter.
    pub counter: &'a mut QueueCounter,
    /// A fresh random value (Java 5.x re-seeds the counter on every retry).
    pub entropy: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FaultEvent {
    Good,
    BrokerCode,
    Transport,
    BrokerNotFound,
}

/// The retry plan of one send. See the module docs for the call order.
///
/// `P` is the set of fault profiles the build carries ([`AllProfiles`] by default): a plan
/// whose [`RetryConfig::profile`] `P` leaves out runs as [`Profile::Plain`] (a session
/// refuses such a send before it makes the plan).
#[derive(Clone, Debug)]
pub struct SendPlan<K, P = AllProfiles> {
    profiles: PhantomData<P>,
    cfg: RetryConfig,
    begin: Instant,
    deadline: Instant,
    total: u8,
    made: u8,
    fixed: Option<PublishQueue<K>>,
    current: Option<Attempt<K>>,
    last_broker: Option<K>,
    kept: Option<Sent<K>>,
    last_error: Option<SendErrorKind>,
    call_timeout: bool,
    result: Option<Result<Sent<K>, SendError>>,
}

impl<K: Copy + Eq> SendPlan<K> {
    /// A send through queue selection over the route (Java `sendDefaultImpl`), with every
    /// profile.
    pub fn new(now: Instant, cfg: RetryConfig) -> Self {
        Self::carrying(now, cfg)
    }

    /// A send to a fixed queue: send-to-queue, or an ordered send whose queue the caller chose
    /// with [`crate::select::select_by_index`] / [`crate::select::select_by_sharding_key`].
    /// One attempt, as Java's `sendKernelImpl` / `sendSelectImpl`.
    pub fn to_queue(now: Instant, cfg: RetryConfig, queue: PublishQueue<K>) -> Self {
        Self::carrying(now, cfg).fixed_to(queue)
    }
}

impl<K: Copy + Eq, P: ProfileSet> SendPlan<K, P> {
    /// As [`SendPlan::new`], in a build carrying the profiles `P`.
    pub fn carrying(now: Instant, cfg: RetryConfig) -> Self {
        SendPlan {
            profiles: PhantomData,
            cfg,
            begin: now,
            deadline: now + cfg.send_timeout,
            total: cfg.max_attempts(),
            made: 0,
            fixed: None,
            current: None,
            last_broker: None,
            kept: None,
            last_error: None,
            call_timeout: false,
            result: None,
        }
    }

    /// This plan sending to `queue` only, in one attempt (as [`SendPlan::to_queue`]).
    #[must_use]
    pub fn fixed_to(mut self, queue: PublishQueue<K>) -> Self {
        self.fixed = Some(queue);
        self.total = 1;
        self
    }

    /// When the send began.
    pub fn begin(&self) -> Instant {
        self.begin
    }

    /// Attempts issued so far.
    pub fn attempts_made(&self) -> u8 {
        self.made
    }

    /// The broker of the latest attempt (kept after the plan ends).
    pub fn last_broker(&self) -> Option<K> {
        self.last_broker
    }

    /// The attempt in flight.
    pub fn current(&self) -> Option<Attempt<K>> {
        self.current
    }

    /// The final result, once done.
    pub fn result(&self) -> Option<Result<Sent<K>, SendError>> {
        self.result
    }

    /// The deadline of the attempt in flight.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.current.map(|a| a.deadline)
    }

    /// Issue the first attempt (or finish at once with [`SendErrorKind::NoRoute`]).
    /// Calling it again is a no-op returning [`Step::Wait`] or the final result.
    pub fn start<const N: usize>(&mut self, now: Instant, env: &mut SendEnv<'_, K, N>) -> Step<K> {
        if let Some(r) = self.result {
            return Step::Done(r);
        }
        if self.current.is_some() {
            return Step::Wait;
        }
        self.next_attempt(now, env)
    }

    /// Ends a plan that waits between attempts (after [`SendPlan::reopen`]) with the error of
    /// its last attempt, or [`SendErrorKind::CallTimeout`] without one.
    pub fn give_up(&mut self) -> Step<K> {
        if let Some(r) = self.result {
            return Step::Done(r);
        }
        let e = self.error(self.last_error.unwrap_or(SendErrorKind::CallTimeout));
        self.finish(Err(e))
    }

    /// The send's one deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Reopens a plan that ended in [`SendErrorKind::NoRoute`] with attempts left, within the
    /// same deadline: for a send whose route lost its master while a master switch is about
    /// to name the new one. [`SendPlan::start`] then issues the next attempt; the budget is
    /// not renewed. A plan that ended otherwise, or spent its attempts, is left as it is
    /// (`false`).
    pub fn reopen(&mut self) -> bool {
        let no_route = matches!(self.result, Some(Err(e)) if e.kind == SendErrorKind::NoRoute);
        if !no_route || self.made >= self.total {
            return false;
        }
        self.result = None;
        self.current = None;
        self.call_timeout = false;
        true
    }

    /// The attempt in flight failed on its connection (`t`), and the caller holds the next
    /// attempt until the route is looked up again (a master switch):
    /// the failure is counted as [`SendPlan::handle_outcome`] counts it, but no attempt is
    /// issued. `true` when the plan can go on ([`SendPlan::start`] issues the next attempt,
    /// [`SendPlan::give_up`] ends it); `false` (nothing changed) when no attempt or no time
    /// is left, or no attempt is in flight: then call [`SendPlan::handle_outcome`].
    pub fn hold<const N: usize>(
        &mut self,
        now: Instant,
        t: TransportError,
        env: &mut SendEnv<'_, K, N>,
    ) -> bool {
        let Some(att) = self.current else {
            return false;
        };
        if self.result.is_some() || self.made >= self.total || now >= self.deadline {
            return false;
        }
        self.transport_failed(now, att, t, env);
        true
    }

    /// Attempt `att` failed on its connection (`t`): counted in the fault table and kept as
    /// the last error; no attempt is in flight any more.
    fn transport_failed<const N: usize>(
        &mut self,
        now: Instant,
        att: Attempt<K>,
        t: TransportError,
        env: &mut SendEnv<'_, K, N>,
    ) {
        self.current = None;
        let ev = if t == TransportError::BrokerNotFound {
            FaultEvent::BrokerNotFound
        } else {
            FaultEvent::Transport
        };
        self.fault(now, att.queue.broker, now - att.started, ev, env);
        self.last_error = Some(SendErrorKind::Transport(t));
    }

    /// The attempt in flight expired when `now >= deadline`: treated as
    /// [`TransportError::TimedOut`]. Earlier calls return [`Step::Wait`].
    pub fn handle_timeout<const N: usize>(
        &mut self,
        now: Instant,
        env: &mut SendEnv<'_, K, N>,
    ) -> Step<K> {
        match self.current {
            Some(a) if now >= a.deadline => self.handle_outcome(
                now,
                AttemptOutcome::Transport(TransportError::TimedOut),
                env,
            ),
            _ => match self.result {
                Some(r) => Step::Done(r),
                None => Step::Wait,
            },
        }
    }

    /// The attempt in flight ended with `outcome`.
    pub fn handle_outcome<const N: usize>(
        &mut self,
        now: Instant,
        outcome: AttemptOutcome,
        env: &mut SendEnv<'_, K, N>,
    ) -> Step<K> {
        if let Some(r) = self.result {
            return Step::Done(r);
        }
        let Some(att) = self.current else {
            return Step::Wait;
        };
        let elapsed = now - att.started;
        let broker = att.queue.broker;
        match outcome {
            AttemptOutcome::Written if self.cfg.mode != SendMode::Oneway => Step::Wait,
            AttemptOutcome::Written => {
                self.current = None;
                self.fault(now, broker, elapsed, FaultEvent::Good, env);
                self.finish(Ok(self.sent(SendStatus::SendOk, att.queue)))
            }
            AttemptOutcome::Response(c) => {
                self.current = None;
                match SendStatus::from_code(c) {
                    Some(status) => {
                        self.fault(now, broker, elapsed, FaultEvent::Good, env);
                        let sent = self.sent(status, att.queue);
                        if self.cfg.mode == SendMode::Sync
                            && status != SendStatus::SendOk
                            && self.cfg.retry_another_broker_when_not_store_ok
                        {
                            self.kept = Some(sent);
                            return self.next_attempt(now, env);
                        }
                        self.finish(Ok(sent))
                    }
                    None => {
                        self.fault(now, broker, elapsed, FaultEvent::BrokerCode, env);
                        self.last_error = Some(SendErrorKind::Broker { code: c });
                        if self.cfg.mode == SendMode::Sync && self.cfg.retry_codes.contains(c) {
                            return self.next_attempt(now, env);
                        }
                        match self.kept {
                            Some(k) => self.finish(Ok(k)),
                            None => {
                                let e = self.error(SendErrorKind::Broker { code: c });
                                self.finish(Err(e))
                            }
                        }
                    }
                }
            }
            AttemptOutcome::Transport(t) => {
                self.transport_failed(now, att, t, env);
                self.next_attempt(now, env)
            }
        }
    }

    fn sent(&self, status: SendStatus, queue: PublishQueue<K>) -> Sent<K> {
        Sent {
            status,
            queue,
            attempts: self.made,
        }
    }

    fn error(&self, kind: SendErrorKind) -> SendError {
        let retryable = match kind {
            SendErrorKind::Broker { code } => self.cfg.retry_codes.contains(code),
            _ => true,
        };
        SendError {
            kind,
            attempts: self.made,
            retryable,
        }
    }

    fn finish(&mut self, r: Result<Sent<K>, SendError>) -> Step<K> {
        self.current = None;
        self.result = Some(r);
        Step::Done(r)
    }

    fn exhausted(&mut self) -> Step<K> {
        if let Some(k) = self.kept {
            return self.finish(Ok(k));
        }
        let kind = if self.call_timeout {
            SendErrorKind::CallTimeout
        } else {
            self.last_error.unwrap_or(SendErrorKind::NoRoute)
        };
        let e = self.error(kind);
        self.finish(Err(e))
    }

    fn next_attempt<const N: usize>(
        &mut self,
        now: Instant,
        env: &mut SendEnv<'_, K, N>,
    ) -> Step<K> {
        if self.made >= self.total {
            return self.exhausted();
        }
        if now >= self.deadline {
            self.call_timeout = true;
            return self.exhausted();
        }
        let remaining = self.deadline - now;
        let profile = self.cfg.profile.within::<P>();
        let queue = match self.fixed {
            Some(q) => Some(q),
            None => {
                if profile == Profile::Java5 && self.made > 0 {
                    env.counter.reset(env.entropy);
                }
                select(
                    profile,
                    env.queues,
                    self.last_broker,
                    now,
                    env.table,
                    env.counter,
                )
            }
        };
        let Some(queue) = queue else {
            let e = self.error(SendErrorKind::NoRoute);
            return self.finish(Err(e));
        };
        let another_left = self.made.saturating_add(1) < self.total;
        let mut budget = remaining;
        match profile {
            Profile::Java5 => {
                if let Some(m) = self.cfg.max_timeout_per_request
                    && another_left
                {
                    budget = budget.min(m);
                }
            }
            Profile::Adaptive if another_left => {
                let cap = self.cfg.adaptive.attempt_cap(env.table, queue.broker);
                budget = budget.min(cap);
                env.table.begin_probe(now, queue.broker, budget);
            }
            _ => {}
        }
        self.made += 1;
        self.last_broker = Some(queue.broker);
        let att = Attempt {
            queue,
            number: self.made,
            started: now,
            deadline: now + budget,
        };
        self.current = Some(att);
        Step::Send(att)
    }

    fn fault<const N: usize>(
        &self,
        now: Instant,
        broker: K,
        elapsed: Duration,
        ev: FaultEvent,
        env: &mut SendEnv<'_, K, N>,
    ) {
        let policy = self.cfg.policy;
        match self.cfg.profile.within::<P>() {
            Profile::Plain => {}
            Profile::Java49 => {
                let iso = ev != FaultEvent::Good;
                env.table
                    .update(now, broker, elapsed, policy.window(elapsed, iso), true);
            }
            Profile::Java5 => {
                let (iso, reachable) = match ev {
                    FaultEvent::Good => (false, true),
                    FaultEvent::BrokerCode => (true, self.cfg.mode == SendMode::Async),
                    FaultEvent::Transport => (true, !self.cfg.start_detector_enable),
                    FaultEvent::BrokerNotFound => (false, true),
                };
                env.table
                    .update(now, broker, elapsed, policy.window(elapsed, iso), reachable);
            }
            Profile::Adaptive => {
                let s = if ev == FaultEvent::Good {
                    AdaptiveSample::Good(elapsed)
                } else {
                    AdaptiveSample::Fault
                };
                env.table
                    .record_adaptive(now, broker, s, &self.cfg.adaptive);
            }
        }
    }
}

#[cfg(test)]
mod tests;
