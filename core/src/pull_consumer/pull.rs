//! Pulling: each owned queue's next request (flow control, long polling) and what a pull
//! answer does (deliver, advance, reset, back off).

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
    /// Applies a pull answer to owned queue `i`.
    pub(super) fn pulled<S: SessionApi>(
        &mut self,
        now: Instant,
        session: &S,
        i: usize,
        header: Option<&CommandHeader<'_>>,
        body: &[u8],
        deliver: &mut dyn FnMut(Delivery<'_, '_>),
    ) {
        let result = match header.map(parse_pull_response) {
            Some(Ok(r)) => r,
            Some(Err(e)) => {
                self.stats.pull_failures = self.stats.pull_failures.wrapping_add(1);
                match e {
                    crate::consumer::PullError::Broker(code) if S::Features::BROKER_REMARKS => {
                        let key = self.owned[i].key;
                        self.refuse::<S>(key, RequestCode::PULL_MESSAGE, code.0);
                    }
                    _ => {}
                }
                let at = now.saturating_add(e.retry_delay(self.exception_delay));
                self.owned[i].state = QState::Ready(at);
                return;
            }
            None => {
                self.stats.pull_failures = self.stats.pull_failures.wrapping_add(1);
                self.owned[i].state = QState::Ready(now.saturating_add(self.exception_delay));
                return;
            }
        };
        let key = self.owned[i].key;
        self.owned[i].max_offset = Some(result.max_offset);
        self.owned[i].max_at = Some(now);
        self.owned[i].slave = result.suggest_which_broker_id != MASTER_ID;
        match result.status {
            PullStatus::Found => {
                let sub = self.subs.iter().find(|s| s.topic == key.topic);
                let expr = sub.map_or(TagExpression::new(SUB_ALL), Sub::expr);
                let topic = session.topic_name(key.topic).unwrap_or("");
                let retry = topic.starts_with(RETRY_TOPIC_PREFIX);
                let broker_name = session.broker_name(key.broker).unwrap_or("");
                let o = &mut self.owned[i];
                let mut complete = true;
                let (mut delivered, mut acked) = (0u64, 0u64);
                let auto = self.ack_on_delivery;
                for m in StoredMessages::new(body).crc_check(CrcCheck::Skip) {
                    let Ok(mut m) = m else {
                        self.stats.undecodable = self.stats.undecodable.wrapping_add(1);
                        break;
                    };
                    // A static topic's leader answers with the physical queue's offsets and
                    // the delta to the logical ones, which the consumer tracks and commits;
                    // the message is the logical queue's (Java
                    // `PullAPIWrapper.processPullResult`).
                    if cfg!(feature = "static-topics")
                        && let Some(delta) = result.offset_delta
                    {
                        m.queue_offset = m.queue_offset.saturating_add(delta);
                        m.queue_id = key.queue_id;
                    }
                    if !expr.matches_message(&m) {
                        continue;
                    }
                    let len = u32::try_from(m.body.len()).unwrap_or(u32::MAX);
                    match o.tracker.push(m.queue_offset, len) {
                        Ok(()) => {
                            delivered += 1;
                            let origin = if retry { origin_topic(&m) } else { topic };
                            deliver(Delivery {
                                queue: key,
                                lease: o.lease,
                                topic: origin,
                                queue_topic: topic,
                                broker_name,
                                message: &m,
                            });
                            if auto && o.tracker.ack(m.queue_offset) {
                                acked += 1;
                                o.last_consume = Some(now);
                            }
                        }
                        Err(TrackError::NotAscending) => {}
                        Err(TrackError::Full) => {
                            // Cannot happen: a pull asks for at most the free slots.
                            complete = false;
                            break;
                        }
                    }
                }
                if complete {
                    o.tracker.advance(result.next_begin_offset);
                }
                o.state = QState::Ready(now);
                self.stats.delivered = self.stats.delivered.wrapping_add(delivered);
                if acked > 0 {
                    self.stats.acked = self.stats.acked.wrapping_add(acked);
                    self.count(key, |c| c.acked = c.acked.wrapping_add(acked));
                }
            }
            PullStatus::NoNewMsg | PullStatus::NoMatchedMsg => {
                let o = &mut self.owned[i];
                o.tracker.advance(result.next_begin_offset);
                o.state = QState::Ready(now);
            }
            PullStatus::OffsetIllegal => {
                // Everything in flight is void: a new lease, and the new offset committed.
                let lease = self.lease();
                let o = &mut self.owned[i];
                o.tracker.reset(result.next_begin_offset);
                o.lease = lease;
                o.commit = true;
                // A commit of the old lease may be in flight: its answer is ignored.
                o.committing = false;
                o.state = QState::Ready(now);
            }
        }
    }

    /// The next request of owned queue `i`, if it needs one now.
    pub(super) fn queue_call<S: SessionApi, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        i: usize,
        buf: &mut [u8],
        lend: &M,
    ) -> Option<Transmit> {
        let o = self.owned.get(i)?;
        let (key, lease, state) = (o.key, o.lease, o.state);
        if matches!(state, QState::Ready(at) if at > now || o.paused || self.suspended)
            || !matches!(state, QState::New | QState::Locate(_) | QState::Ready(_))
        {
            return None;
        }
        let (mut topic, mut broker) = (String::<MAX_NAME>::new(), String::<MAX_NAME>::new());
        let sub = self.subs.iter().find(|s| s.topic == key.topic);
        let named = session
            .topic_name(key.topic)
            .is_some_and(|t| topic.push_str(t).is_ok())
            && session
                .broker_name(key.broker)
                .is_some_and(|b| broker.push_str(b).is_ok());
        let (true, Some(sub)) = (named, sub) else {
            // The session forgot the topic or the broker: retried at the next rebalance.
            self.drop_queue(key);
            return None;
        };
        let mut expression: String<MAX_EXPRESSION> = String::new();
        let _ = expression.push_str(&sub.expression);
        let sql = sub.sql;
        let peer = session.read_peer(key.broker, false);
        // Offset requests name the broker as `bname` does (see `Self::bname`).
        let bname = self.names_brokers::<S>().then_some(broker.as_str());
        let (tx, next) = match state {
            QState::New if self.broadcasting::<S>() => {
                if self.room() {
                    self.owned[i].state = QState::Loading;
                    let _ = self
                        .events
                        .push_back(PullEvent::LoadOffset { queue: key, lease });
                }
                return None;
            }
            QState::New => {
                let hdr = QueryConsumerOffsetRequestHeader {
                    consumer_group: &self.group,
                    topic: &topic,
                    queue_id: key.queue_id,
                    set_zero_if_not_found: None,
                };
                let hdr = (hdr, bname);
                let what = CallRef::Query(key, lease);
                let code = RequestCode::QUERY_CONSUMER_OFFSET;
                let r = Self::named_call(
                    &mut self.calls,
                    now,
                    session,
                    peer,
                    code,
                    hdr,
                    OFFSET_RPC_TIMEOUT,
                    what,
                    buf,
                    lend,
                );
                (r, QState::Querying)
            }
            QState::Locate(position) => {
                let what = CallRef::Locate(key, lease);
                let topic = topic.as_str();
                let queue_id = key.queue_id;
                let t = CLIENT_API_TIMEOUT;
                let code = Self::locate_request::<S>(position);
                let r = match position {
                    Position::Begin => {
                        let hdr = (GetMinOffsetRequestHeader { topic, queue_id }, bname);
                        Self::named_call(
                            &mut self.calls,
                            now,
                            session,
                            peer,
                            code,
                            hdr,
                            t,
                            what,
                            buf,
                            lend,
                        )
                    }
                    Position::Timestamp(timestamp) if S::Features::TIMESTAMPS => {
                        let hdr = SearchOffsetRequestHeader {
                            topic,
                            queue_id,
                            timestamp,
                        };
                        let hdr = (hdr, bname);
                        Self::named_call(
                            &mut self.calls,
                            now,
                            session,
                            peer,
                            code,
                            hdr,
                            t,
                            what,
                            buf,
                            lend,
                        )
                    }
                    // A timestamp only when the session leaves them out, which `subscribe`
                    // and `seek` refuse: never.
                    Position::End | Position::Offset(_) | Position::Timestamp(_) => {
                        let hdr = (self.max_offset_header(topic, queue_id), bname);
                        Self::named_call(
                            &mut self.calls,
                            now,
                            session,
                            peer,
                            code,
                            hdr,
                            t,
                            what,
                            buf,
                            lend,
                        )
                    }
                };
                (r, QState::Locating(position))
            }
            QState::Ready(at) if at <= now => {
                let o = &self.owned[i];
                if self.orderly::<S>() && (!Self::locked(o, now) || o.leaving) {
                    // Orderly: only a locked queue is pulled.
                    self.owned[i].state = QState::Ready(now.saturating_add(UNLOCKED_PULL_DELAY));
                    return None;
                }
                let max = match o.tracker.flow(&self.flow, self.batch) {
                    FlowDecision::DelayPull(d) => {
                        self.stats.flow_control_delays =
                            self.stats.flow_control_delays.wrapping_add(1);
                        self.owned[i].state = QState::Ready(now.saturating_add(d));
                        self.owned[i].flow_delayed = true;
                        return None;
                    }
                    FlowDecision::Pull(n) => n,
                };
                self.owned[i].flow_delayed = false;
                let o = &self.owned[i];
                let peer = session.read_peer(key.broker, o.slave);
                // What Java sends (the offset store's memory value): everything below is
                // processed. Not the last confirmed commit: the broker handles pulls and offset
                // updates on different thread pools, so a pull carrying an older value can land
                // after a newer UPDATE_CONSUMER_OFFSET and move the stored offset back (seen on
                // 5.3.3: a restart then redelivered from the older offset). For the same reason,
                // while messages are in flight only news: a value the broker already confirmed
                // is not sent again (on 5.3.3 the pull that follows a delivery, carrying the
                // offset before it, landed after the final commit of a consumer that stopped
                // right after acknowledging it). With nothing in flight it goes on every pull,
                // as Java's (a new group's start position, offsets a broker lost): no later
                // commit can be higher before this pull's answer. Java clears COMMIT_OFFSET for
                // a slave (it keeps no offsets of its own), and sends none for a broadcasting
                // group (its offsets stay with the client).
                let c = o.tracker.committable();
                let news = o.tracker.committed() != Some(c);
                let carried = !matches!(peer, Peer::Slave(_)) && !self.broadcasting::<S>();
                let commit_offset =
                    (carried && (news || o.tracker.cached_count() == 0)).then_some(c);
                let req = PullRequest {
                    group: &self.group,
                    topic: &topic,
                    broker_name: &broker,
                    queue_id: key.queue_id,
                    offset: o.tracker.next_offset(),
                    max_msgs: max,
                    commit_offset,
                    suspend: self.suspend,
                    expression: if sql {
                        TagExpression::sql(&expression)
                    } else {
                        TagExpression::new(&expression)
                    },
                    sub_version: self.sub_version,
                };
                let timeout = req.rpc_timeout(CLIENT_API_TIMEOUT);
                let what = CallRef::Pull(key, lease);
                let code = RequestCode::PULL_MESSAGE;
                let r = Self::call(
                    &mut self.calls,
                    now,
                    session,
                    peer,
                    code,
                    req.header(),
                    timeout,
                    what,
                    buf,
                    lend,
                );
                if r.is_ok() {
                    self.stats.pulls = self.stats.pulls.wrapping_add(1);
                    self.owned[i].last_pull = Some(now);
                }
                (r, QState::Pulling)
            }
            _ => return None,
        };
        match tx {
            Ok(tx) => {
                self.owned[i].state = next;
                Some(tx)
            }
            Err(CallError::TooManyRequests) => {
                self.blocked = true;
                None
            }
            Err(_) if matches!(state, QState::Ready(_)) => {
                // Cannot be encoded or signed: try again after the exception delay.
                self.owned[i].state = QState::Ready(now.saturating_add(self.exception_delay));
                None
            }
            Err(_) => {
                // Retried at the next rebalance.
                self.drop_queue(key);
                None
            }
        }
    }
}
