//! The answers to the consumer's calls (or their failures): start offsets found, pulls
//! applied, commits and send-backs settled, locks granted; and the broker's refusals, kept for
//! the client to report ([`Refusal`]).

use super::*;

/// A broker refused one of the consumer's requests for a queue (an offset lookup, a pull, a
/// commit; not yet its consumer-list, lock or send-back requests) with an unexpected code (e.g.
/// a 5.x proxy's VERSION_NOT_SUPPORTED "Request doesn't have field bname", or NO_PERMISSION):
/// the consumer retries as Java does, and the client reports it with the broker's remark
/// ([`Inbound::Refused`](crate::client::Inbound::Refused)) so that it is never silent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Refusal {
    /// The queue.
    pub queue: QueueKey,
    /// What was asked.
    pub request: RequestCode,
    /// The broker's response code.
    pub code: ResponseCode,
}

impl Refusal {
    /// A refusal of an SQL92 subscription by the start's check (see
    /// [`PullConsumer::check_filters`]): its remark is the one
    /// [`Event::StartFailed`](crate::client::Event::StartFailed) fails the start with (`queue`
    /// names the topic and the broker asked; its queue id is -1).
    pub fn of_filter_check(&self) -> bool {
        self.request == RequestCode::CHECK_CLIENT_CONFIG
    }
}

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
    /// An answer to one of this consumer's calls (`false` when `opaque` is not one): applies
    /// it, handing each delivered message to `deliver`.
    pub fn handle_response<S: SessionApi>(
        &mut self,
        now: Instant,
        session: &S,
        opaque: i32,
        frame: &[u8],
        deliver: &mut dyn FnMut(Delivery<'_, '_>),
    ) -> bool {
        let Some(call) = self.calls.swap_remove(&opaque) else {
            return false;
        };
        self.blocked = false;
        let f = Frame::new_unchecked(frame);
        let header = CommandHeader::parse(&f).ok();
        let code = header.as_ref().map_or(-1, CommandHeader::code);
        match call {
            CallRef::ConsumerList(i) if S::Features::REBALANCE => {
                let mut ids: Vec<&str, CIDS> = Vec::new();
                let ok = code == 0 && parse_consumer_list(f.body_ref(), &mut ids).is_ok();
                if let Some(s) = self.subs.get_mut(usize::from(i)) {
                    s.listing = false;
                    // (A list asked for before `assign_queues` changes nothing after it.)
                    if ok && !self.manual {
                        let t = s.topic;
                        self.assign(session, t, &mut ids);
                    }
                }
            }
            CallRef::Query(key, lease) => {
                let Some(o) = self.entry(key, lease, QState::Querying) else {
                    return true;
                };
                let offset = header.as_ref().filter(|_| code == 0).and_then(|h| {
                    QueryConsumerOffsetResponseHeader::decode(h, &mut Scratch::default()).ok()
                });
                let retry = session
                    .topic_name(key.topic)
                    .is_some_and(|t| t.starts_with("%RETRY%"));
                let start = match (code, offset) {
                    (0, Some(h)) if h.offset >= 0 => Position::Offset(h.offset),
                    (0, Some(_)) => self.start_position(retry),
                    (c, _) if c == ResponseCode::QUERY_NOT_FOUND.0 => self.start_position(retry),
                    _ => {
                        // Retried at the next rebalance, as Java does.
                        self.refuse::<S>(key, RequestCode::QUERY_CONSUMER_OFFSET, code);
                        self.drop_queue(key);
                        return true;
                    }
                };
                let o = &mut self.owned[o];
                match start {
                    Position::Offset(offset) => Self::start(o, offset, now),
                    other => o.state = QState::Locate(other),
                }
            }
            CallRef::MaxOffset(key) if S::Features::LAG_PROBES => {
                let offset = answered_offset(header.as_ref(), code);
                // By queue only: a seek meanwhile changed the lease, not the broker's offsets.
                if let Some(o) = self.owned.iter_mut().find(|o| o.key == key) {
                    o.measuring = false;
                    if let Some(offset) = offset {
                        o.max_offset = Some(offset);
                        o.max_at = Some(now);
                    }
                }
            }
            CallRef::Locate(key, lease) => {
                let Some(o) = self.owned.iter().position(|o| {
                    o.key == key && o.lease == lease && matches!(o.state, QState::Locating(_))
                }) else {
                    return true;
                };
                match answered_offset(header.as_ref(), code) {
                    Some(offset) => Self::start(&mut self.owned[o], offset, now),
                    None => {
                        let request = match self.owned[o].state {
                            QState::Locating(p) => Self::locate_request::<S>(p),
                            _ => RequestCode::GET_MAX_OFFSET,
                        };
                        self.refuse::<S>(key, request, code);
                        self.drop_queue(key);
                    }
                }
            }
            CallRef::Pull(key, lease) => {
                let Some(o) = self.entry(key, lease, QState::Pulling) else {
                    return true;
                };
                let rt = self.owned[o]
                    .last_pull
                    .map_or(0, |at| now.saturating_duration_since(at).millis());
                if let Some(s) = self.subs.iter_mut().find(|s| s.topic == key.topic) {
                    s.counts.pulls = s.counts.pulls.wrapping_add(1);
                    s.counts.pull_rt_ms = s.counts.pull_rt_ms.wrapping_add(rt);
                }
                self.pulled(now, session, o, header.as_ref(), f.body_ref(), deliver);
            }
            CallRef::Commit(key, lease, offset) => {
                if code != 0 {
                    self.refuse::<S>(key, RequestCode::UPDATE_CONSUMER_OFFSET, code);
                }
                self.committed(key, lease, offset, code == 0);
            }
            CallRef::SendBack(key, lease, offset) => {
                if S::Features::SEND_BACK {
                    self.back_done(now, key, lease, offset, code == 0);
                }
            }
            CallRef::Lock(broker) if S::Features::ORDERLY => {
                if code == 0 {
                    let (owned, subs) = (&mut self.owned, &self.subs);
                    // Granted queues this consumer no longer owns (dropped while the request
                    // was in flight): unlocked at once, or the next owner waits out the
                    // broker's 60 s lock.
                    let mut stray: Vec<QueueKey, OWNED> = Vec::new();
                    let _ = parse_locked(f.body_ref(), |q| {
                        if session.broker_name(broker) != Some(q.broker_name) {
                            return;
                        }
                        let Some(topic) = subs
                            .iter()
                            .map(|s| s.topic)
                            .find(|t| session.topic_name(*t) == Some(q.topic))
                        else {
                            return;
                        };
                        let key = QueueKey {
                            topic,
                            broker,
                            queue_id: q.queue_id,
                        };
                        match owned.iter_mut().find(|o| o.key == key) {
                            Some(o) if o.lock == LockStep::Sent => o.lock = LockStep::Granted,
                            Some(_) => {}
                            None => {
                                let _ = stray.push(key);
                            }
                        }
                    });
                    for k in stray {
                        if !self.unlocks.contains(&k) {
                            let _ = self.unlocks.push(k);
                        }
                    }
                }
                self.settle_locks(now, broker);
            }
            CallRef::Filter(i, broker) if S::Features::CALLS => {
                self.filter_checked::<S>(i, broker, code);
            }
            CallRef::Filter(..)
            | CallRef::ConsumerList(_)
            | CallRef::Lock(_)
            | CallRef::Unlock
            | CallRef::MaxOffset(_) => {}
        }
        true
    }

    /// One of this consumer's calls got no answer (`false` when `opaque` is not one).
    pub fn handle_call_failed<S: SessionApi>(
        &mut self,
        now: Instant,
        _session: &S,
        opaque: i32,
    ) -> bool {
        let Some(call) = self.calls.swap_remove(&opaque) else {
            return false;
        };
        self.blocked = false;
        match call {
            CallRef::ConsumerList(i) => {
                if let Some(s) = self.subs.get_mut(usize::from(i)) {
                    s.listing = false;
                }
            }
            CallRef::Query(key, _) | CallRef::Locate(key, _) => self.drop_queue(key),
            CallRef::Pull(key, lease) => {
                self.stats.pull_failures = self.stats.pull_failures.wrapping_add(1);
                if let Some(s) = self.subs.iter_mut().find(|s| s.topic == key.topic) {
                    s.stale = true;
                }
                if let Some(o) = self.entry(key, lease, QState::Pulling) {
                    self.owned[o].state = QState::Ready(now.saturating_add(self.exception_delay));
                }
            }
            CallRef::Commit(key, lease, offset) => self.committed(key, lease, offset, false),
            CallRef::SendBack(key, lease, offset) => self.back_done(now, key, lease, offset, false),
            CallRef::Lock(broker) => self.settle_locks(now, broker),
            CallRef::Filter(i, _) if S::Features::CALLS => self.filter_lost = Some(i),
            CallRef::Unlock | CallRef::Filter(..) => {}
            CallRef::MaxOffset(key) => {
                if let Some(o) = self.owned.iter_mut().find(|o| o.key == key) {
                    o.measuring = false;
                }
            }
        }
        true
    }

    /// Keeps a refusal of `request` for `queue` for the client to report (a code of an answer
    /// that did not parse, -1, is no refusal: the connection is failing).
    #[inline(always)]
    pub(super) fn refuse<S: SessionApi>(
        &mut self,
        queue: QueueKey,
        request: RequestCode,
        code: i32,
    ) {
        if S::Features::BROKER_REMARKS && code > 0 {
            self.refused = Some(Refusal {
                queue,
                request,
                code: ResponseCode(code),
            });
        }
    }

    /// The last refusal since the previous call (see [`Refusal`]).
    pub fn take_refusal(&mut self) -> Option<Refusal> {
        self.refused.take()
    }
}
