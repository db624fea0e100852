//! Subscriptions and queue ownership: rebalance rounds (GET_CONSUMER_LIST_BY_GROUP and
//! the allocation), assignment, revoking and adding queues.

use super::*;

impl<
    const SUBS: usize,
    const OWNED: usize,
    const TRACK: usize,
    const CALLS: usize,
    const CIDS: usize,
    const QUEUES: usize,
    const BACKS: usize,
    St: Store,
> PullConsumer<SUBS, OWNED, TRACK, CALLS, CIDS, QUEUES, BACKS, St>
{
    /// Subscribes `topic` with the TAG `expression` (`*` for all); registers the topic with
    /// the session, which looks its route up.
    ///
    /// # Errors
    /// [`PullConfigError`].
    pub fn subscribe<S: SessionApi>(
        &mut self,
        now: Instant,
        session: &mut S,
        topic: &str,
        expression: &str,
    ) -> Result<TopicId, PullConfigError> {
        self.subscribe_as(now, session, topic, TagExpression::new(expression))
    }

    /// Subscribes `topic` with an SQL92 `expression` on the messages' properties (the broker
    /// evaluates it and must run with `enablePropertyFilter=true`); the group's retry topic
    /// stays subscribed to `*`, as in Java.
    ///
    /// # Errors
    /// [`PullConfigError`]; [`PullConfigError::Expression`] for an empty expression too.
    pub fn subscribe_sql<S: SessionApi>(
        &mut self,
        now: Instant,
        session: &mut S,
        topic: &str,
        expression: &str,
    ) -> Result<TopicId, PullConfigError> {
        if java_blank(expression) {
            return Err(PullConfigError::Expression);
        }
        self.subscribe_as(now, session, topic, TagExpression::sql(expression))
    }

    fn subscribe_as<S: SessionApi>(
        &mut self,
        now: Instant,
        session: &mut S,
        topic: &str,
        expr: TagExpression<'_>,
    ) -> Result<TopicId, PullConfigError> {
        let expression = expr.sub_string();
        let broadcasting = self.model == MessageModel::Broadcasting;
        let timestamp = self.consume_from == ConsumeFromWhere::Timestamp;
        if self.orderly != self.orderly::<S>()
            || broadcasting != self.broadcasting::<S>()
            || (timestamp && !S::Features::TIMESTAMPS)
        {
            return Err(PullConfigError::Unsupported);
        }
        self.timestamps = S::Features::TIMESTAMPS;
        let mut e = String::new();
        e.push_str(expression)
            .map_err(|_| PullConfigError::Expression)?;
        let t = session
            .topic(now, topic)
            .map_err(|_| PullConfigError::Topic)?;
        if self.subs.iter().any(|s| s.topic == t) {
            return Err(PullConfigError::Duplicate);
        }
        self.add_sub(t, e, expr.is_sql())?;
        if self.retry && !topic.starts_with(RETRY_TOPIC_PREFIX) {
            // Where this group's messages sent back return (Java `copySubscription`).
            let name: String<{ MAX_NAME + 8 }> =
                retry_topic(&self.group).ok_or(PullConfigError::Name)?;
            let r = session
                .topic(now, &name)
                .map_err(|_| PullConfigError::Topic)?;
            if !self.subs.iter().any(|s| s.topic == r) {
                let mut all = String::new();
                let _ = all.push_str(SUB_ALL);
                self.add_sub(r, all, false)?;
            }
        }
        Ok(t)
    }

    pub(super) fn add_sub(
        &mut self,
        topic: TopicId,
        expression: String<MAX_EXPRESSION>,
        sql: bool,
    ) -> Result<(), PullConfigError> {
        let sub = Sub {
            topic,
            expression,
            sql,
            list: false,
            listing: false,
            unrouted: false,
            stale: false,
            refreshed_at: None,
            check: super::filters::FilterCheck::Idle,
            counts: SubCounts::default(),
            reported: (self.rebalance_at, SubCounts::default()),
        };
        self.subs
            .push(sub)
            .map_err(|_| PullConfigError::TooManySubscriptions)
    }

    /// Starts a rebalance round now (NOTIFY_CONSUMER_IDS_CHANGED, or the application asks).
    pub fn rebalance_now(&mut self, now: Instant) {
        self.watch_round = true;
        if !self.manual && !self.stopping {
            self.start_round(now);
        }
    }

    /// Holds the periodic rounds back for a rebalance interval (a start that announces the
    /// consumer first: [`Client::start_consumer`](crate::client::Client::start_consumer)
    /// asks for the first round itself).
    pub fn defer_rebalance(&mut self, now: Instant) {
        self.rebalance_at = now.saturating_add(self.rebalance_interval);
    }

    /// A rebalance round: every subscription's consumer list is asked for (and the next
    /// round is due a rebalance interval later).
    pub(super) fn start_round(&mut self, now: Instant) {
        self.rebalance_at = now.saturating_add(self.rebalance_interval);
        self.stats.rebalances = self.stats.rebalances.wrapping_add(1);
        for s in &mut self.subs {
            s.list = true;
        }
    }

    /// Owns exactly `queues` from now on, without rebalancing (Java lite pull `assign`):
    /// owned queues not listed are committed and dropped, listed ones start from their
    /// committed offset; rebalance rounds and NOTIFY_CONSUMER_IDS_CHANGED no longer change
    /// what is owned. Queues of topics not subscribed are ignored. Returns how many queues
    /// are owned.
    pub fn assign_queues(&mut self, queues: &[QueueKey]) -> usize {
        self.manual = true;
        self.watch_round = true;
        for i in 0..self.subs.len() {
            let t = self.subs[i].topic;
            let mut wanted: Vec<QueueKey, QUEUES> = Vec::new();
            for q in queues.iter().filter(|q| q.topic == t) {
                let _ = wanted.push(*q);
            }
            self.apply(t, &wanted);
            self.subs[i].list = false;
        }
        self.owned.len()
    }

    /// The key of queue `queue_id` of `broker_name` in subscribed topic `topic`, if its route
    /// has it.
    pub fn queue_key<S: SessionApi>(
        &self,
        session: &S,
        topic: &str,
        broker_name: &str,
        queue_id: i32,
    ) -> Option<QueueKey> {
        let t = self
            .topics()
            .find(|t| session.topic_name(*t) == Some(topic))?;
        let q = session.subscribe_queues(t).iter().find(|q| {
            q.queue_id == queue_id && session.broker_name(q.broker) == Some(broker_name)
        })?;
        Some(QueueKey {
            topic: t,
            broker: q.broker,
            queue_id,
        })
    }

    pub(super) fn drop_queue(&mut self, key: QueueKey) {
        if let Some(i) = self.owned.iter().position(|o| o.key == key) {
            let o = self.owned.swap_remove(i);
            if o.locked_at.is_some() {
                let _ = self.unlocks.push(key);
            }
        }
    }

    /// Applies an allocation round of topic `t` with the (unsorted) consumer ids `ids`.
    pub(super) fn assign<S: SessionApi>(&mut self, session: &S, t: TopicId, ids: &mut [&str]) {
        let Some(topic) = session.topic_name(t) else {
            return;
        };
        let mut all: Vec<(MessageQueue<'_>, BrokerId), QUEUES> = Vec::new();
        for q in session.subscribe_queues(t) {
            let Some(b) = session.broker_name(q.broker) else {
                continue;
            };
            let _ = all.push((MessageQueue::new(topic, b, q.queue_id), q.broker));
        }
        if all.is_empty() {
            return;
        }
        // Java sorts both lists before allocating (MessageQueue.compareTo, String.compareTo).
        crate::consumer::heapsort_by(&mut all, |a, b| a.0.cmp(&b.0));
        sort_consumer_ids(ids);
        let mut mine: Vec<(MessageQueue<'_>, BrokerId), QUEUES> = Vec::new();
        if allocate(self.strategy, &all, ids, &self.client_id, &mut mine).is_err() {
            return;
        }
        let mut wanted: Vec<QueueKey, QUEUES> = Vec::new();
        for (m, broker) in &mine {
            let _ = wanted.push(QueueKey {
                topic: t,
                broker: *broker,
                queue_id: m.queue_id,
            });
        }
        self.apply(t, &wanted);
    }

    /// Owns exactly `wanted` of topic `t`: revoked queues committed and forgotten, new ones
    /// added.
    pub(super) fn apply(&mut self, t: TopicId, wanted: &[QueueKey]) {
        // Revoke: commit the offset, forget the queue (Java removeUnnecessaryMessageQueue).
        let mut i = 0;
        while i < self.owned.len() {
            let o = &mut self.owned[i];
            let keep = wanted.contains(&o.key);
            if keep {
                o.leaving = false;
            }
            if o.key.topic != t || keep {
                i += 1;
                continue;
            }
            if o.busy {
                // Orderly: the application is on it; dropped when it ends.
                o.leaving = true;
                i += 1;
                continue;
            }
            self.release(i);
        }
        for &key in wanted {
            if self.owned.iter().any(|o| o.key == key) {
                continue;
            }
            let lease = self.lease();
            let (state, lock) = match self.orderly {
                true => (QState::Lock, LockStep::Wanted),
                false => (QState::New, LockStep::Idle),
            };
            let o = Owned {
                key,
                lease,
                state,
                commit: false,
                committing: false,
                tracker: QueueTracker::new(0),
                max_offset: None,
                seek: false,
                paused: false,
                locked_at: None,
                lock,
                lock_news: false,
                busy: false,
                leaving: false,
                last_pull: None,
                last_consume: None,
                flow_delayed: false,
                max_at: None,
                measure: false,
                measuring: false,
                slave: false,
            };
            if self.owned.push(o).is_err() {
                self.stats.owned_full = self.stats.owned_full.wrapping_add(1);
            }
        }
    }

    /// Forgets owned queue `i`: its offset committed (broadcasting: handed to the runtime),
    /// then (orderly) its lock released.
    pub(super) fn release(&mut self, i: usize) {
        let o = self.owned.swap_remove(i);
        let started = matches!(o.state, QState::Ready(_) | QState::Pulling);
        match (started, o.tracker.commit_due()) {
            (true, Some(offset)) if self.model == MessageModel::Broadcasting => {
                let queue = o.key;
                let _ = self.events.push_back(PullEvent::Persist { queue, offset });
            }
            // The unlock follows the commit's answer.
            (true, Some(offset)) => {
                let _ = self.revoked.push((o.key, offset));
            }
            _ if o.locked_at.is_some() => {
                let _ = self.unlocks.push(o.key);
            }
            _ => {}
        }
    }

    pub(super) fn list_call<S: SessionApi, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        i: usize,
        buf: &mut [u8],
        lend: &M,
    ) -> Option<Transmit> {
        let t = self.subs.get(i)?.topic;
        let queues = session.subscribe_queues(t);
        if queues.is_empty() {
            // No route yet: look it up; a round runs again when it is there.
            self.subs[i].unrouted = true;
            session.refresh_route(now, t);
            return None;
        }
        // Java asks a random broker of the route; any broker of the group answers the same.
        let pick = self.next_random() as usize % queues.len();
        let broker = queues.get(pick)?.broker;
        let hdr = GetConsumerListByGroupRequestHeader {
            consumer_group: &self.group,
        };
        let what = CallRef::ConsumerList(u8::try_from(i).ok()?);
        let peer = session.read_peer(broker, false);
        let code = RequestCode::GET_CONSUMER_LIST_BY_GROUP;
        Self::call(
            &mut self.calls,
            now,
            session,
            peer,
            code,
            hdr,
            CLIENT_API_TIMEOUT,
            what,
            buf,
            lend,
        )
        .ok()
    }
}

/// Java `StringUtils.isBlank` for ASCII white space (what `FilterAPI.build` refuses).
fn java_blank(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_whitespace())
}
