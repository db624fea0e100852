//! Topic routes: lookups on the NameServer with failover and back-off, the TBW102 fallback,
//! the broker table, and the route events.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lookup {
    /// No lookup in flight; retry at this instant when set.
    Idle(Option<Instant>),
    InFlight,
}

#[derive(Debug)]
pub(super) struct Topic<const Q: usize> {
    pub(super) name: String<MAX_TOPIC_LEN>,
    pub(super) queues: Vec<PublishQueue<BrokerId>, Q>,
    /// Subscribe (read) queues, with [`Features::CONSUMER`].
    pub(super) read: Vec<PublishQueue<BrokerId>, Q>,
    pub(super) from_default: bool,
    pub(super) lookup: Lookup,
    pub(super) backoff: Backoff,
    pub(super) error_refresh: Option<Instant>,
    /// When the lookup in flight (or the last one) was asked: an answer asked before a send's
    /// attempt could not connect says nothing of that failure.
    pub(super) asked: Option<Instant>,
    /// An event waiting in `route_events`: updated (`true`) or failed.
    pub(super) notify: Option<bool>,
    /// The last lookup failed because no NameServer answered.
    pub(super) unreachable: bool,
    /// The last route listed the topic's brokers without a master ([`TopicRoute::awaits_master`]):
    /// sends wait for the lookups [`MASTER_RETRY`] apart instead of each asking at once.
    pub(super) masterless: bool,
}

/// How a session's topic routes stand ([`Session::route_health`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteHealth {
    /// Topics the session knows (looked up at least once).
    pub topics: usize,
    /// Topics with a route (queues to send to or to read from).
    pub routed: usize,
    /// Topics whose last lookup reached no NameServer (they may keep an older route).
    pub unreachable: usize,
}

#[derive(Debug)]
pub(super) struct Broker {
    pub(super) name: String<MAX_BROKER_NAME>,
    pub(super) addr: String<MAX_ADDR_LEN>,
    /// A slave's address (consumers only), empty when the route lists none.
    pub(super) slave: String<MAX_ADDR_LEN>,
    /// When a response last came from it.
    pub(super) last_answer: Option<Instant>,
    /// The remoting version of its last answer (0 before any).
    pub(super) version: i32,
    /// How often its master's address changed (wrapping): a send refused at one address
    /// knows whether a route names another.
    pub(super) moves: u16,
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
    /// The id of `topic`, adding it to the route table (and starting its lookup) if new.
    ///
    /// # Errors
    /// [`SubmitError::TopicTooLong`] or [`SubmitError::TooManyTopics`].
    pub fn topic(&mut self, now: Instant, topic: &str) -> Result<TopicId, SubmitError> {
        if let Some(i) = self.topics.iter().position(|t| t.name == topic) {
            return Ok(TopicId(i as u16));
        }
        let name = copy_exact(topic).ok_or(SubmitError::TopicTooLong)?;
        let id = u16::try_from(self.topics.len()).map_err(|_| SubmitError::TooManyTopics)?;
        self.topics
            .push(Topic {
                name,
                queues: Vec::new(),
                read: Vec::new(),
                from_default: false,
                lookup: Lookup::Idle(None),
                backoff: Backoff::new(self.cfg.route_retry, MAX_ROUTE_RETRY),
                error_refresh: None,
                asked: None,
                notify: None,
                unreachable: false,
                masterless: false,
            })
            .map_err(|_| SubmitError::TooManyTopics)?;
        self.lookup(now, id, false);
        Ok(TopicId(id))
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
    /// Looks the topic's route up now (unless a lookup is already in flight).
    pub fn refresh_route(&mut self, now: Instant, t: TopicId) {
        self.lookup(now, t.0, false);
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
    /// Queues a route event of topic `t` (the latest outcome wins while one waits).
    pub(super) fn notify(&mut self, t: u16, updated: bool) {
        let Some(topic) = self.topics.get_mut(usize::from(t)) else {
            return;
        };
        if topic.notify.replace(updated).is_none() {
            let _ = self.route_events.push_back(t);
        }
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
    pub(super) fn set_lookup(&mut self, t: u16, l: Lookup) {
        if let Some(t) = self.topics.get_mut(usize::from(t)) {
            t.lookup = l;
        }
    }

    /// Queues a route lookup of topic `t` (of `TBW102` on its behalf when `default`).
    pub(super) fn lookup(&mut self, now: Instant, t: u16, default: bool) {
        let Some(topic) = self.topics.get(usize::from(t)) else {
            return;
        };
        if topic.lookup == Lookup::InFlight {
            return;
        }
        let peer = Peer::NameServer(self.name_server());
        let deadline = now.saturating_add(self.cfg.request_timeout);
        if self
            .alloc_req(peer, ReqKind::Route { topic: t, default }, deadline)
            .is_some()
        {
            self.set_lookup(t, Lookup::InFlight);
            if F::MASTER_SWITCH
                && let Some(topic) = self.topics.get_mut(usize::from(t))
            {
                topic.asked = Some(now);
            }
        } else {
            // No request slot now: try again shortly.
            self.set_lookup(
                t,
                Lookup::Idle(Some(now.saturating_add(self.cfg.route_retry))),
            );
            self.rearm_route_retry();
        }
    }

    pub(super) fn rearm_route_retry(&mut self) {
        let next = self
            .topics
            .iter()
            .filter_map(|t| match t.lookup {
                Lookup::Idle(at) => at,
                Lookup::InFlight => None,
            })
            .min();
        self.timers[Timer::RouteRetry as usize] = next;
    }

    /// A lookup of topic `t` failed. `definitive`: the NameServer answered (the topic and the
    /// template do not exist, or the route is unusable): sends waiting for it fail now with
    /// NoRoute; otherwise they wait for a later lookup until their deadline.
    pub(super) fn route_failed(&mut self, now: Instant, t: u16, transport: bool, definitive: bool) {
        self.stats.route_failures = self.stats.route_failures.wrapping_add(1);
        let servers = self.cfg.name_servers;
        let Some(topic) = self.topics.get_mut(usize::from(t)) else {
            return;
        };
        topic.backoff.failed();
        topic.unreachable = transport;
        topic.masterless = false;
        let failures = topic.backoff.failures() as usize;
        topic.lookup = Lookup::Idle(None);
        let failover = transport && failures < servers;
        if failover {
            // Fail over: ask the next NameServer at once (each one once per round).
            self.lookup(now, t, false);
        } else if let Some(topic) = self.topics.get_mut(usize::from(t)) {
            if topic.queues.is_empty() {
                topic.lookup = Lookup::Idle(Some(now.saturating_add(topic.backoff.delay())));
            } else {
                // Keep the old route (Java does); the periodic refresh tries again.
                topic.backoff.reset();
            }
            self.rearm_route_retry();
        }
        if self.publish_queues(TopicId(t)).is_empty() && !failover {
            self.notify(t, false);
            // The NameServers said no, or none answered this round: the sends waiting for
            // this topic end now with NoRoute (Java's "No route info of this topic"); later
            // sends trigger the next lookup.
            self.wake_waiting(now, t, None);
        } else if definitive || (F::MASTER_SWITCH && !failover) {
            // (Sends that waited for this lookup after a failed attempt go on with the route
            // kept rather than wait out their deadline.)
            self.wake_waiting(now, t, None);
        }
    }

    /// Topic `t` exists, but no broker with its writable queues has a master now: the sends
    /// waiting for it keep waiting within their deadlines (they end unsent, a call timeout, if none
    /// comes),
    /// and it is looked up again [`MASTER_RETRY`] later, doubling while no master is listed (up
    /// to the periodic refresh). Java fails such sends at once ("No route info of this topic").
    fn master_missing(&mut self, now: Instant, t: u16) {
        let refresh = self.cfg.route_refresh;
        let Some(topic) = self.topics.get_mut(usize::from(t)) else {
            return;
        };
        topic.backoff.failed();
        topic.unreachable = false;
        topic.masterless = true;
        let doublings = topic.backoff.failures().saturating_sub(1).min(16);
        let ms = MASTER_RETRY.millis().saturating_mul(1 << doublings);
        let delay = Duration::from_millis(ms.min(refresh.millis()));
        topic.lookup = Lookup::Idle(Some(now.saturating_add(delay)));
        self.stats.route_failures = self.stats.route_failures.wrapping_add(1);
        self.rearm_route_retry();
        self.notify(t, false);
    }

    /// A lookup of topic `t` was refused with `code`: when for the client's credentials (a
    /// NameServer or a 5.x proxy with authentication on, e.g. SYSTEM_ERROR "check signature
    /// failed."), the sends waiting for it end with [`SendFailure::Authentication`] and the
    /// remark, not NoRoute (Java's "No route info", the refusal only in its log): the same
    /// keys fail the same way again.
    pub(super) fn route_refused(&mut self, now: Instant, t: u16, code: i32, h: &CommandHeader<'_>) {
        let mut buf = [0u8; MAX_REMARK];
        let remark = h.remark_text(&mut buf).unwrap_or("");
        if !is_auth_failure(code, Some(remark)) {
            return;
        }
        for s in 0..self.sends.len() {
            let slot = &mut self.sends[s];
            if slot.state == SendState::Route && slot.topic == t {
                slot.remark = copy_cut(remark);
                let attempts = 0;
                self.finish(now, s as u16, Ending::Authentication { code, attempts });
            }
        }
    }

    /// Whether the last lookup of topic `t` failed because no NameServer answered.
    pub fn route_unreachable(&self, t: TopicId) -> bool {
        self.topics
            .get(usize::from(t.0))
            .is_some_and(|x| x.unreachable)
    }

    /// Whether no NameServer answered: each of `topics` (at least one) has no route, neither
    /// to send to nor to read from, because its last lookup reached no NameServer. A topic
    /// that does not exist was answered (`false`). Runtimes fail a client's start on it.
    pub fn name_servers_unreachable(&self, topics: impl IntoIterator<Item = TopicId>) -> bool {
        let mut any = false;
        let all = topics.into_iter().all(|t| {
            any = true;
            self.topics
                .get(usize::from(t.0))
                .is_some_and(|x| x.unreachable && x.queues.is_empty() && x.read.is_empty())
        });
        any && all
    }

    /// How the topics' routes stand, for a health or readiness check.
    pub fn route_health(&self) -> RouteHealth {
        let mut h = RouteHealth::default();
        for x in self.topics.iter() {
            h.topics += 1;
            h.routed += usize::from(!x.queues.is_empty() || !x.read.is_empty());
            h.unreachable += usize::from(x.unreachable);
        }
        h
    }

    pub(super) fn install_route(
        &mut self,
        now: Instant,
        t: u16,
        route: &TopicRoute<BROKERS, ROUTE_STR>,
        default: bool,
    ) {
        let mut refs: Vec<PublishQueueRef, QUEUES> = Vec::new();
        // A 5.x static topic: its logical queues (the `static-topics` feature; without it such
        // a topic has no queues).
        // Java reads an order conf first, and TBW102 is a template only.
        let logical = cfg!(feature = "static-topics")
            && route.is_static_topic()
            && !route.is_order_topic()
            && !default;
        // More queues than fit: keep what fits (a partial list still publishes).
        let _ = if logical {
            route.static_queues(&mut refs)
        } else {
            route.publish_queues(default.then_some(DEFAULT_TOPIC_QUEUE_NUMS), &mut refs)
        };
        // The old queues go first, so that brokers only they named can be replaced.
        if let Some(topic) = self.topics.get_mut(usize::from(t)) {
            topic.queues.clear();
        }
        let mut ids: Vec<Option<BrokerId>, BROKERS> = Vec::new();
        for b in route.brokers() {
            let id = self.intern(b.name());
            if let Some(id) = id {
                // A route that lists a broker without its master: the master is gone (a
                // consumer reads from the slave meanwhile; a producer has no queue there).
                match b.addr(MASTER_ID) {
                    Some(addr) => self.set_addr(id, false, addr),
                    None if F::CONSUMER && b.addrs().next().is_some() => {
                        self.set_addr(id, false, "");
                    }
                    None => {}
                }
                if F::CONSUMER && self.consumer {
                    let slave = b
                        .addrs()
                        .filter(|(i, _)| *i > MASTER_ID)
                        .min_by_key(|(i, _)| *i);
                    self.set_addr(id, true, slave.map_or("", |(_, a)| a));
                }
            }
            let _ = ids.push(id);
        }
        // A topic that does not exist has nothing to read (TBW102 is a template to write).
        if F::CONSUMER {
            let mut read: Vec<PublishQueueRef, QUEUES> = Vec::new();
            if logical {
                read.clone_from(&refs);
            } else if !default {
                let _ = route.subscribe_queues(&mut read);
            }
            if let Some(topic) = self.topics.get_mut(usize::from(t)) {
                topic.read.clear();
                for r in &read {
                    if let Some(Some(b)) = ids.get(r.broker) {
                        let _ = topic.read.push(PublishQueue {
                            broker: *b,
                            queue_id: r.queue_id,
                        });
                    }
                }
            }
        }
        let Some(topic) = self.topics.get_mut(usize::from(t)) else {
            return;
        };
        for r in &refs {
            if let Some(Some(b)) = ids.get(r.broker) {
                let _ = topic.queues.push(PublishQueue {
                    broker: *b,
                    queue_id: r.queue_id,
                });
            }
        }
        if topic.queues.is_empty() {
            if F::MASTER_SWITCH && !default && route.awaits_master() {
                return self.master_missing(now, t);
            }
            self.route_failed(now, t, false, true);
            return;
        }
        topic.masterless = false;
        topic.from_default = default;
        topic.unreachable = false;
        topic.backoff.reset();
        topic.lookup = Lookup::Idle(None);
        let asked = topic.asked;
        self.stats.route_updates = self.stats.route_updates.wrapping_add(1);
        self.rearm_route_retry();
        self.notify(t, true);
        self.wake_waiting(now, t, asked);
    }

    /// The id of broker `name`, adding it to the table. A full table reuses the slot of a
    /// broker no route refers to any more (its connection is closed through
    /// [`Event::Reconnect`]).
    pub(super) fn intern(&mut self, name: &str) -> Option<BrokerId> {
        if let Some(i) = self.brokers.iter().position(|b| b.name == name) {
            return Some(BrokerId(i as u16));
        }
        let entry = Broker {
            name: copy_exact(name)?,
            addr: String::new(),
            slave: String::new(),
            last_answer: None,
            version: 0,
            moves: 0,
        };
        if self.brokers.len() < BROKERS {
            let id = BrokerId(u16::try_from(self.brokers.len()).ok()?);
            self.brokers.push(entry).ok()?;
            return Some(id);
        }
        let topics = &self.topics;
        let free = (0..self.brokers.len()).find(|&i| {
            let id = BrokerId(i as u16);
            !topics
                .iter()
                .any(|t| t.queues.iter().any(|q| q.broker == id))
        })?;
        let id = BrokerId(free as u16);
        if self.brokers.get(free).is_some_and(|b| !b.addr.is_empty()) {
            self.close_broker(id);
        }
        if F::CONSUMER && self.brokers.get(free).is_some_and(|b| !b.slave.is_empty()) {
            self.close_peer(Peer::Slave(id));
        }
        let slot = self.brokers.get_mut(free)?;
        // (The slot's count goes on: a send refused by the broker that had it sees a move.)
        let moves = if F::MASTER_SWITCH {
            slot.moves.wrapping_add(1)
        } else {
            0
        };
        *slot = Broker { moves, ..entry };
        self.faults.remove(id);
        Some(id)
    }

    /// Sets the address of broker `id`'s master (or slave); a changed one closes the old
    /// connection.
    pub(super) fn set_addr(&mut self, id: BrokerId, slave: bool, addr: &str) {
        let Some(b) = self
            .brokers
            .get_mut(usize::from(id.0))
            .filter(|_| (F::CONSUMER && F::SLAVES) || !slave)
        else {
            return;
        };
        let field = if slave { &mut b.slave } else { &mut b.addr };
        if field == addr {
            return;
        }
        let moved = !field.is_empty();
        *field = copy_cut(addr);
        if F::MASTER_SWITCH && !slave {
            b.moves = b.moves.wrapping_add(1);
        }
        if moved {
            self.close_peer(if slave {
                Peer::Slave(id)
            } else {
                Peer::Broker(id)
            });
        }
    }
}
