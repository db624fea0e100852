//! The sends: one retry plan each ([`SendPlan`]) within one total deadline, their slots,
//! what the broker answered, and how each send ends ([`Event::SendDone`]).

use super::*;

/// Which queue a send goes to. Every target waits for the topic's route within the send's
/// one deadline (`retry.send_timeout` from [`Session::send`]); a fixed queue gets one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// The retry plan selects a queue (and another for each retry).
    Select,
    /// Queue `queue_id` of broker `broker` (Java `send(msg, mq)`); a broker the route does not
    /// name ends the send with [`SendFailure::NoSuchBroker`].
    Queue {
        /// Broker name.
        broker: &'a str,
        /// Queue id.
        queue_id: i32,
    },
    /// The publish queue at `index` modulo their count.
    Index(usize),
    /// The queue `|hash % count|` (Java `SelectMessageQueueByHash`: `hash` is the sharding
    /// key's [`java_string_hash`](crate::select::java_string_hash)).
    Hash(i32),
    /// The runtime chooses once the route is known (a `MessageQueueSelector`):
    /// [`Event::ChooseQueue`] says how many queues there are, [`Session::choose_queue`]
    /// answers.
    Choose,
}

/// What a send needs besides its properties and body (which the runtime keeps).
#[derive(Clone, Copy, Debug)]
pub struct SendArgs<'a> {
    /// Retry settings; `retry.mode` is the send mode.
    pub retry: RetryConfig,
    /// Body length in bytes (after compression, as sent).
    pub body_len: usize,
    /// `Message.flag`.
    pub flag: i32,
    /// sysFlag bits (compression).
    pub sys_flag: i32,
    /// A SEND_BATCH_MESSAGE body.
    pub batch: bool,
    /// `bornTimestamp` (Unix ms, from the runtime's wall clock).
    pub born_timestamp: i64,
    /// The queue ([`Target::Select`] unless the application names one).
    pub target: Target<'a>,
    /// A consumed message resent to `%RETRY%<group>`: `(reconsumeTimes, maxReconsumeTimes)`
    /// of the send header ([`crate::send_back::RetryProperties::reconsume`]).
    pub reconsume: Option<(i32, i32)>,
    /// A timer message ([`crate::producer::MessageFields::timer`]): refused before sending to
    /// a broker older than 5.0, which would deliver it at once
    /// ([`SendFailure::TimerUnsupported`]).
    pub timer: bool,
    /// A reply of request-reply ([`crate::reply`]): sent as SEND_REPLY_MESSAGE_V2 (325).
    pub reply: bool,
}

impl SendArgs<'_> {
    /// A selected-queue send of `body_len` bytes.
    pub fn new(retry: RetryConfig, body_len: usize, born_timestamp: i64) -> Self {
        SendArgs {
            retry,
            body_len,
            flag: 0,
            sys_flag: 0,
            batch: false,
            born_timestamp,
            target: Target::Select,
            reconsume: None,
            timer: false,
            reply: false,
        }
    }
}

/// A stored message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendReceipt {
    /// Store status.
    pub status: SendStatus,
    /// The broker that stored it.
    pub broker: BrokerId,
    /// Queue id written (from the response; the chosen queue for ONEWAY).
    pub queue_id: i32,
    /// Consume-queue offset (`None` for ONEWAY).
    pub queue_offset: Option<i64>,
    /// offsetMsgId (empty for ONEWAY).
    pub offset_msg_id: String<MAX_MSG_ID>,
    /// Attempts made.
    pub attempts: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SendState {
    Free,
    /// Waiting for the topic's route.
    Route,
    /// Waiting for [`Session::choose_queue`] ([`Target::Choose`]).
    Choose,
    /// An attempt's request is queued or in flight.
    Attempt,
    /// Finished; the event is waiting in `done`.
    Done,
}

#[derive(Clone, Debug)]
pub(super) struct Stored {
    pub(super) attempt: u8,
    pub(super) queue_id: i32,
    pub(super) queue_offset: i64,
    pub(super) msg_id: String<MAX_MSG_ID>,
}

/// How a send ended (the remark, if any, waits in its slot).
#[derive(Clone, Copy, Debug)]
pub(super) enum Ending {
    Plan(Result<Sent<BrokerId>, SendError>),
    Encode(EncodeError),
    Acl(AclError),
    Authentication {
        code: i32,
        attempts: u8,
    },
    TooManyRequests,
    /// No NameServer answered the lookups of the send's topic.
    NoNameServer,
    /// The target's broker is not in the route.
    NoSuchBroker,
    /// A timer send to a broker older than 5.0 (its remoting version).
    TimerUnsupported(i32),
    /// The broker refused a timer send for good (the remark is the slot's).
    TimerRefused {
        refusal: TimerRefusal,
        code: i32,
        attempts: u8,
    },
}

/// A send's target while it waits for its route (the broker name copied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Aim {
    Select,
    Queue(String<MAX_BROKER_NAME>, i32),
    Index(usize),
    Hash(i32),
    Choose,
}

#[derive(Debug)]
pub(super) struct SendSlot<P> {
    pub(super) generation: u16,
    pub(super) state: SendState,
    pub(super) topic: u16,
    pub(super) mode: SendMode,
    pub(super) body_len: usize,
    pub(super) flag: i32,
    pub(super) sys_flag: i32,
    pub(super) batch: bool,
    pub(super) born: i64,
    pub(super) reconsume: Option<(i32, i32)>,
    pub(super) timer: bool,
    pub(super) reply: bool,
    pub(super) plan: Option<SendPlan<BrokerId, P>>,
    pub(super) aim: Aim,
    pub(super) req: Option<u16>,
    /// When its last attempt could not reach its broker, that broker and its address's
    /// [`moves`](super::routes::Broker::moves) then: it waits for the route
    /// ([`Features::MASTER_SWITCH`]).
    pub(super) held: Option<(Instant, BrokerId, u16)>,
    pub(super) stored: Option<Stored>,
    pub(super) remark: String<MAX_REMARK>,
    pub(super) ending: Option<Ending>,
}

impl<P> crate::store::Empty for SendSlot<P> {
    const EMPTY: Self = SendSlot {
        generation: 0,
        state: SendState::Free,
        topic: 0,
        mode: SendMode::Sync,
        body_len: 0,
        flag: 0,
        sys_flag: 0,
        batch: false,
        born: 0,
        reconsume: None,
        timer: false,
        reply: false,
        plan: None,
        aim: Aim::Select,
        req: None,
        held: None,
        stored: None,
        remark: String::new(),
        ending: None,
    };
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
> Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>
{
    /// Starts a send to topic `t`; its properties come from [`Outbound`] and its body from the
    /// runtime when the frame is written. The result comes as [`Event::SendDone`].
    ///
    /// # Errors
    /// [`SubmitError::TooManySends`], [`SubmitError::UnknownTopic`],
    /// [`SubmitError::ProfileLeftOut`], [`SubmitError::TargetLeftOut`], or
    /// [`SubmitError::BrokerNameTooLong`].
    pub fn send(
        &mut self,
        now: Instant,
        t: TopicId,
        args: &SendArgs<'_>,
    ) -> Result<SendId, SubmitError> {
        if usize::from(t.0) >= self.topics.len() {
            return Err(SubmitError::UnknownTopic);
        }
        if !F::carries(args.retry.profile) {
            return Err(SubmitError::ProfileLeftOut);
        }
        let aim = match args.target {
            Target::Select => Aim::Select,
            _ if !F::TARGETS => return Err(SubmitError::TargetLeftOut),
            Target::Queue { broker, queue_id } => Aim::Queue(
                copy_exact(broker).ok_or(SubmitError::BrokerNameTooLong)?,
                queue_id,
            ),
            Target::Index(i) => Aim::Index(i),
            Target::Hash(h) => Aim::Hash(h),
            Target::Choose => Aim::Choose,
        };
        let s = self.send_free.pop().ok_or(SubmitError::TooManySends)?;
        let Some(slot) = self.sends.get_mut(usize::from(s)) else {
            return Err(SubmitError::TooManySends);
        };
        let plan = SendPlan::carrying(now, args.retry);
        let deadline = now.saturating_add(args.retry.send_timeout);
        *slot = SendSlot {
            generation: slot.generation,
            state: SendState::Route,
            topic: t.0,
            mode: args.retry.mode,
            body_len: args.body_len,
            flag: args.flag,
            sys_flag: args.sys_flag,
            batch: args.batch,
            born: args.born_timestamp,
            reconsume: args.reconsume,
            timer: args.timer,
            reply: args.reply,
            plan: Some(plan),
            aim,
            ..<SendSlot<F> as crate::store::Empty>::EMPTY
        };
        let id = SendId::new(s, slot.generation);
        let topic = self.topics.get(usize::from(t.0));
        let has_route = topic.is_some_and(|t| !t.queues.is_empty());
        let masterless = topic.is_some_and(|t| t.masterless);
        // Until it starts (the route, and for a chooser the choice): `start_send` ends it.
        self.route_waits.set(s, deadline);
        if has_route {
            self.start_send(now, s);
        } else if !masterless {
            self.lookup(now, t.0, false);
        }
        Ok(id)
    }
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
> Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>
{
    /// Starts (or ends, when there is still no route) the sends waiting for topic `t`. `asked`:
    /// when the route that woke them was asked for. A send whose attempt could not connect
    /// keeps waiting for a later lookup (when one comes before its deadline) if this route
    /// still names the address that refused and was asked within
    /// [`ERROR_REFRESH_MIN_GAP`] of the refusal: on a master switch the NameServer lists the
    /// dead master for another 20-300 ms, and an attempt there would only spend the budget.
    pub(super) fn wake_waiting(&mut self, now: Instant, t: u16, asked: Option<Instant>) {
        for s in 0..self.sends.len() {
            let slot = &self.sends[s];
            if slot.state == SendState::Route && slot.topic == t {
                let stale = F::MASTER_SWITCH
                    && asked.zip(slot.held).is_some_and(|(a, (h, b, moves))| {
                        a < h.saturating_add(ERROR_REFRESH_MIN_GAP)
                            && self
                                .brokers
                                .get(usize::from(b.0))
                                .is_some_and(|x| x.moves == moves)
                    });
                if stale && self.route_coming(now, s as u16, true) {
                    continue;
                }
                // (`start_send` ends its route wait, unless it now waits for a choice.)
                self.start_send(now, s as u16);
            }
        }
    }

    pub(super) fn start_send(&mut self, now: Instant, s: u16) {
        if F::TARGETS && !self.aim(now, s) {
            return;
        }
        if F::MASTER_SWITCH
            && let Some(slot) = self.sends.get_mut(usize::from(s))
        {
            slot.held = None;
        }
        self.route_waits.remove(s);
        let step = self.plan_call(s, |p, env| p.start(now, env));
        self.apply(now, s, step);
    }

    /// Fixes the queue of a targeted send `s` once its topic has a route: `false` when it
    /// does not start now (waiting for [`Session::choose_queue`], or ended).
    fn aim(&mut self, now: Instant, s: u16) -> bool {
        let Some(slot) = self.sends.get_mut(usize::from(s)) else {
            return false;
        };
        let queues = self
            .topics
            .get(usize::from(slot.topic))
            .map_or(&[][..], |t| t.queues.as_slice());
        if queues.is_empty() || slot.aim == Aim::Select {
            // No route (the plan ends the send: NoRoute), or nothing to fix.
            return true;
        }
        let q = match &slot.aim {
            Aim::Queue(name, queue_id) => {
                let b = self.brokers.iter().position(|b| b.name == *name);
                let Some(b) = b.and_then(|b| u16::try_from(b).ok()) else {
                    self.finish(now, s, Ending::NoSuchBroker);
                    return false;
                };
                Some(PublishQueue {
                    broker: BrokerId(b),
                    queue_id: *queue_id,
                })
            }
            Aim::Index(i) => crate::select::select_by_index(queues, *i),
            Aim::Hash(h) => crate::select::select_by_hash(queues, *h),
            Aim::Select | Aim::Choose => None,
        };
        let Some(q) = q else {
            // Choose: the runtime picks; the send's deadline still runs.
            if slot.state != SendState::Choose {
                slot.state = SendState::Choose;
                let _ = self.choices.push_back(s);
            }
            return false;
        };
        slot.aim = Aim::Select;
        slot.plan = slot.plan.take().map(|p| p.fixed_to(q));
        true
    }

    /// Answers [`Event::ChooseQueue`]: send `id` goes to the publish queue at `index` (modulo
    /// their count). `false` when the send does not wait for a choice.
    pub fn choose_queue(&mut self, now: Instant, id: SendId, index: usize) -> bool {
        let s = id.slot();
        let Some(slot) = self
            .sends
            .get_mut(s)
            .filter(|x| x.state == SendState::Choose && SendId::new(s as u16, x.generation) == id)
        else {
            return false;
        };
        slot.aim = Aim::Index(index);
        slot.state = SendState::Route;
        self.start_send(now, s as u16);
        true
    }

    /// Runs one plan transition of send `s` with the client's fault table and counter.
    pub(super) fn plan_call(
        &mut self,
        s: u16,
        f: impl FnOnce(
            &mut SendPlan<BrokerId, F>,
            &mut SendEnv<'_, BrokerId, BROKERS>,
        ) -> Step<BrokerId>,
    ) -> Step<BrokerId> {
        self.plan_with(s, f).unwrap_or(Step::Wait)
    }

    /// Runs `f` on the plan of send `s` with the client's fault table and counter (`None`:
    /// no such plan).
    fn plan_with<R>(
        &mut self,
        s: u16,
        f: impl FnOnce(&mut SendPlan<BrokerId, F>, &mut SendEnv<'_, BrokerId, BROKERS>) -> R,
    ) -> Option<R> {
        let entropy = self.next_random();
        let slot = self.sends.get_mut(usize::from(s))?;
        let plan = slot.plan.as_mut()?;
        let queues = self
            .topics
            .get(usize::from(slot.topic))
            .map_or(&[][..], |t| t.queues.as_slice());
        let mut env = SendEnv {
            queues,
            table: &mut self.faults,
            counter: &mut self.counter,
            entropy,
        };
        Some(f(plan, &mut env))
    }

    /// Carries out plan steps of send `s` until it waits or ends.
    pub(super) fn apply(&mut self, now: Instant, s: u16, mut step: Step<BrokerId>) {
        // Each round consumes an attempt, so this ends within the plan's attempt budget.
        for _ in 0..=u8::MAX {
            match step {
                Step::Wait => return,
                Step::Done(Err(e)) if F::MASTER_SWITCH && self.await_master(now, s, &e) => return,
                Step::Done(r) => return self.finish(now, s, Ending::Plan(r)),
                Step::Send(att) => {
                    self.stats.attempts = self.stats.attempts.wrapping_add(1);
                    if att.number > 1 {
                        self.stats.retries = self.stats.retries.wrapping_add(1);
                    }
                    let b = att.queue.broker;
                    if self.broker_addr(b).is_none() {
                        let t = TransportError::BrokerNotFound;
                        step = self.transport_failed(now, s, t);
                        continue;
                    }
                    if let Some(v) = self.timer_refused(s, b) {
                        return self.finish(now, s, Ending::TimerUnsupported(v));
                    }
                    let Some(r) =
                        self.alloc_req(Peer::Broker(b), ReqKind::Send { send: s }, att.deadline)
                    else {
                        return self.finish(now, s, Ending::TooManyRequests);
                    };
                    if let Some(slot) = self.sends.get_mut(usize::from(s)) {
                        slot.state = SendState::Attempt;
                        slot.req = Some(r);
                    }
                    return;
                }
            }
        }
    }

    /// The remoting version of broker `b` when send `s` is a timer message and `b` is older
    /// than 5.0: the version of its last answer, or before it answered, the NameServer's (a
    /// cluster runs one line; docs/protocol/STRATEGY.md §11).
    fn timer_refused(&self, s: u16, b: BrokerId) -> Option<i32> {
        if !self.sends.get(usize::from(s)).is_some_and(|x| x.timer) {
            return None;
        }
        let v = self
            .brokers
            .get(usize::from(b.0))
            .map_or(0, |x| x.version)
            .max(0);
        let v = if v == 0 { self.namesrv_version } else { v };
        (v > 0 && v < crate::wire::version::V5_0_0).then_some(v)
    }

    pub(super) fn finish(&mut self, now: Instant, s: u16, ending: Ending) {
        let Some(slot) = self.sends.get_mut(usize::from(s)) else {
            return;
        };
        if matches!(slot.state, SendState::Free | SendState::Done) {
            return;
        }
        // A send that failed on a broker (not for want of a route) refreshes the route.
        let failed = matches!(&ending, Ending::Plan(Err(e)) if e.attempts() > 0);
        let t = slot.topic;
        // No route because no NameServer answered: say so (Java's "No name server address").
        let unrouted = matches!(&ending, Ending::Plan(Err(e))
            if e.attempts() == 0 && matches!(e.kind(), SendErrorKind::NoRoute | SendErrorKind::CallTimeout));
        let ending = match self.topics.get(usize::from(t)) {
            Some(topic) if unrouted && topic.unreachable => Ending::NoNameServer,
            _ => ending,
        };
        let Some(slot) = self.sends.get_mut(usize::from(s)) else {
            return;
        };
        slot.state = SendState::Done;
        slot.ending = Some(ending);
        if let Some(r) = slot.req.take()
            && self
                .reqs
                .get(usize::from(r))
                .is_some_and(|q| q.kind == ReqKind::Send { send: s } && q.state != ReqState::Free)
        {
            let _ = self.free_req(r);
        }
        self.route_waits.remove(s);
        let _ = self.done.push_back(s);
        if failed {
            self.refresh_failing(now, t);
        }
    }

    /// Send `s` waited for its route (or a choice) until its deadline.
    pub(super) fn route_wait_over(&mut self, now: Instant, s: u16) {
        let Some(slot) = self.sends.get(usize::from(s)) else {
            return;
        };
        if slot.state == SendState::Choose {
            // Not chosen in time.
            let e = SendError::call_timeout(0);
            return self.finish(now, s, Ending::Plan(Err(e)));
        }
        // A send that waited for a new master after its attempts failed ends with what they
        // met.
        if F::MASTER_SWITCH && slot.plan.as_ref().is_some_and(|p| p.attempts_made() > 0) {
            let step = self.plan_call(s, |p, _| p.give_up());
            return self.apply(now, s, step);
        }
        // No route in time: the plan ends the send (NoRoute or a call timeout).
        self.start_send(now, s);
    }

    /// A send to topic `t` failed on a broker: its route is looked up again, at most once per
    /// [`ERROR_REFRESH_MIN_GAP`](crate::producer::ERROR_REFRESH_MIN_GAP) (the periodic refresh
    /// runs regardless).
    fn refresh_failing(&mut self, now: Instant, t: u16) {
        if let Some(topic) = self.topics.get_mut(usize::from(t))
            && error_refresh_due(topic.error_refresh, now)
        {
            topic.error_refresh = Some(now);
            self.lookup(now, t, false);
        }
    }

    /// Whether send `s`, whose plan just ended in `e`, waits for its topic's next route
    /// instead (and now does): no queue was left, with attempts to spare, on a route that
    /// now lists no master, which a master switch brings back at another address. It waits
    /// within its deadline, as a send that never had a route does.
    fn await_master(&mut self, now: Instant, s: u16, e: &SendError) -> bool {
        if e.attempts() == 0
            || e.kind() != SendErrorKind::NoRoute
            || !self.route_coming(now, s, false)
        {
            return false;
        }
        let reopened = self
            .sends
            .get_mut(usize::from(s))
            .and_then(|x| x.plan.as_mut())
            .is_some_and(SendPlan::reopen);
        reopened && self.park(s)
    }

    /// The attempt of send `s` failed on its connection (`t`): held for a master switch
    /// ([`Self::hold_for_master`]), or handled by the plan as any transport failure.
    fn transport_failed(&mut self, now: Instant, s: u16, t: TransportError) -> Step<BrokerId> {
        match self.hold_for_master(now, s, t) {
            Some(step) => step,
            None => self.plan_call(s, |p, env| {
                p.handle_outcome(now, AttemptOutcome::Transport(t), env)
            }),
        }
    }

    /// The attempt of send `s` could not reach its broker, or its connection closed under it
    /// (`t`): when the topic's route is being looked up again, the next attempt waits for it
    /// (within the deadline, out of the same budget: the plan would retry at once otherwise,
    /// so no attempt is added) rather than going to the address that just failed; the
    /// master switch of a controller-mode cluster. The step to carry out once the failure is
    /// counted ([`Step::Wait`] while it waits), or `None` when the plan is to handle it as
    /// usual.
    fn hold_for_master(
        &mut self,
        now: Instant,
        s: u16,
        t: TransportError,
    ) -> Option<Step<BrokerId>> {
        let refused = matches!(
            t,
            TransportError::ConnectFailed | TransportError::BrokerNotFound
        );
        if !F::MASTER_SWITCH || !(refused || t == TransportError::ConnectionClosed) {
            return None;
        }
        let slot = self.sends.get(usize::from(s))?;
        let b = slot
            .plan
            .as_ref()
            .and_then(SendPlan::current)
            .map(|a| a.queue.broker)?;
        // With another broker to turn to, the plan's next attempt goes there at once (Java's
        // latency fault tolerance); only a send left with this broker waits. (A targeted
        // send has one attempt, as Java's: nothing to hold.)
        let elsewhere = self
            .topics
            .get(usize::from(slot.topic))
            .is_some_and(|x| x.queues.iter().any(|q| q.broker != b));
        if elsewhere || self.plan_with(s, |p, env| p.hold(now, t, env)) != Some(true) {
            return None;
        }
        if self.route_coming(now, s, true) && self.park(s) {
            // A refused address is not tried again on a route that could not know of it (see
            // `wake_waiting`); a closed connection is, on the next route (its broker may be
            // up: a connection lost on the way, or closed by the broker).
            let moves = self.brokers.get(usize::from(b.0)).map_or(0, |x| x.moves);
            if refused && let Some(slot) = self.sends.get_mut(usize::from(s)) {
                slot.held = Some((now, b, moves));
            }
            return Some(Step::Wait);
        }
        // Nothing to wait for: the next attempt now, as the plan would have issued it.
        Some(self.plan_call(s, |p, env| p.start(now, env)))
    }

    /// Whether a route for the topic of send `s` is coming before its deadline: its route
    /// lists no master (it is looked up until it does), or, after an attempt that failed on
    /// its connection (`failed`), a lookup is in flight or is now scheduled.
    fn route_coming(&mut self, now: Instant, s: u16, failed: bool) -> bool {
        let Some(slot) = self.sends.get(usize::from(s)) else {
            return false;
        };
        let t = slot.topic;
        let Some(deadline) = slot.plan.as_ref().map(SendPlan::deadline) else {
            return false;
        };
        if now >= deadline {
            return false;
        }
        self.refresh_failing(now, t);
        let Some(x) = self.topics.get_mut(usize::from(t)) else {
            return false;
        };
        match x.lookup {
            _ if x.masterless && x.queues.is_empty() => true,
            _ if !failed => false,
            Lookup::InFlight => true,
            // The last refresh still named the broker that refuses connections (the
            // NameServer had not dropped it yet): the next one, when due, within the deadline.
            Lookup::Idle(at) => {
                let due = x
                    .error_refresh
                    .map_or(now, |l| l.saturating_add(ERROR_REFRESH_MIN_GAP));
                let due = at.map_or(due, |a| a.min(due));
                if due < deadline {
                    // (It counts as this failure's refresh: the next one is due a gap later.)
                    x.lookup = Lookup::Idle(Some(due));
                    x.error_refresh = Some(due);
                    self.rearm_route_retry();
                }
                due < deadline
            }
        }
    }

    /// Send `s` waits for its topic's route until its deadline (`false`: no such send).
    fn park(&mut self, s: u16) -> bool {
        let Some(slot) = self.sends.get_mut(usize::from(s)) else {
            return false;
        };
        let Some(deadline) = slot.plan.as_ref().map(SendPlan::deadline) else {
            return false;
        };
        slot.state = SendState::Route;
        if let Some(r) = slot.req.take()
            && self
                .reqs
                .get(usize::from(r))
                .is_some_and(|q| q.kind == ReqKind::Send { send: s } && q.state != ReqState::Free)
        {
            let _ = self.free_req(r);
        }
        self.route_waits.set(s, deadline);
        true
    }

    pub(super) fn send_response<'a>(
        &mut self,
        now: Instant,
        s: u16,
        h: &CommandHeader<'a>,
        resp: ResponseSlots<'a>,
    ) {
        let mut sbuf = [0u8; MAX_REMARK];
        let mut scratch = Scratch::new(&mut sbuf);
        let parsed = parse_send_response_collected(h, resp, &mut scratch);
        let Some(slot) = self.sends.get_mut(usize::from(s)) else {
            return;
        };
        slot.req = None;
        let attempt = slot.plan.as_ref().map_or(0, |p| p.attempts_made());
        let code = match parsed {
            Ok(SendResponse::Stored {
                code,
                offset_msg_id,
                queue_id,
                queue_offset,
                ..
            }) => {
                slot.stored = Some(Stored {
                    attempt,
                    queue_id,
                    queue_offset,
                    msg_id: copy_cut(offset_msg_id),
                });
                code
            }
            Ok(SendResponse::Rejected { code }) if F::BROKER_REMARKS => {
                slot.remark = h.remark_text(&mut sbuf).map(copy_cut).unwrap_or_default();
                if is_auth_failure(code, Some(slot.remark.as_str())) {
                    // The same credentials fail the same way on every broker: no retry.
                    return self.finish(
                        now,
                        s,
                        Ending::Authentication {
                            code,
                            attempts: attempt,
                        },
                    );
                }
                // A timer too far ahead, or a wheel that is off (a cluster's brokers share
                // their settings): no retry, and no fault counted against the broker. Flow
                // control is retried, as Java does.
                if let Some(refusal) = TimerRefusal::of(code, &slot.remark).filter(|r| {
                    slot.timer && matches!(r, TimerRefusal::TooFarAhead | TimerRefusal::Disabled)
                }) {
                    return self.finish(
                        now,
                        s,
                        Ending::TimerRefused {
                            refusal,
                            code,
                            attempts: attempt,
                        },
                    );
                }
                code
            }
            Ok(SendResponse::Rejected { code }) => code,
            Err(_) => {
                slot.stored = None;
                h.code()
            }
        };
        self.outcome(now, s, AttemptOutcome::Response(code));
    }

    /// The attempt of send `s` ended with `outcome`; counts a broker the fault table isolates.
    pub(super) fn outcome(&mut self, now: Instant, s: u16, outcome: AttemptOutcome) {
        let broker = self
            .sends
            .get(usize::from(s))
            .and_then(|x| x.plan.as_ref())
            .and_then(SendPlan::current)
            .map(|a| a.queue.broker);
        let before = broker.is_some_and(|b| self.faults.is_available(now, b));
        let step = match outcome {
            AttemptOutcome::Transport(t) => self.transport_failed(now, s, t),
            _ => self.plan_call(s, |p, env| p.handle_outcome(now, outcome, env)),
        };
        if before && broker.is_some_and(|b| !self.faults.is_available(now, b)) {
            self.stats.brokers_isolated = self.stats.brokers_isolated.wrapping_add(1);
        }
        self.apply(now, s, step);
    }
}
