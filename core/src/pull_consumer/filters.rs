//! The SQL92 check at a consumer's start (Java `MQClientInstance.checkClientInBroker`): after
//! the routes and before the first heartbeat, each SQL92 subscription whose topic has a route
//! goes to one broker of the topic (CHECK_CLIENT_CONFIG, docs/protocol/WIRE.md), which
//! compiles the expression. A refusal fails the start, and so does a broker that cannot be
//! asked in time (as in Java) unless [`PullConfig::lazy_start`]; a topic without a route is
//! not checked (Java skips it too). A check that got no answer (its call timed out, or its
//! connection was lost) is given up at the step's deadline, [`CLIENT_API_TIMEOUT`] after the
//! routes (the call's own timeout, so a lost connection waits that long too). The client runs
//! it as a step of its start ([`crate::client::start`]); only with
//! [`Features::CALLS`](crate::session::Features::CALLS).

use super::*;
use crate::consumer::write_check_client;

/// Where a subscription's SQL92 check stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FilterCheck {
    /// Not asked for (a TAG subscription, or before the start).
    Idle,
    /// Due: [`PullConsumer::poll_call`] sends it.
    Wanted,
    /// Sent, not answered yet.
    Sent,
    /// Done: compiled by the broker, or failed (the consumer keeps the first failure that
    /// fails the start).
    Done,
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
    /// Asks for the check of every SQL92 subscription whose topic has a route (sent by the
    /// next [`poll_call`](Self::poll_call)s); how many there are.
    pub fn check_filters<S: SessionApi>(&mut self, session: &S) -> usize {
        (self.filter_failure, self.filter_lost) = (None, None);
        let mut n = 0;
        for sub in self.subs.iter_mut() {
            sub.check = FilterCheck::Idle;
            if sub.sql && !session.subscribe_queues(sub.topic).is_empty() {
                sub.check = FilterCheck::Wanted;
                n += 1;
            }
        }
        n
    }

    /// How the checks asked for by [`check_filters`](Self::check_filters) ended: `None`
    /// while one is under way (unless `give_up`: the start's step timed out, and those count
    /// as unanswered), `Err((topic, code))` for the first that fails the start (code -1: its
    /// broker could not be asked, which fails the start unless [`PullConfig::lazy_start`]).
    /// Once it says, no check is sent any more.
    pub fn filters_checked(&mut self, give_up: bool) -> Option<Result<(), (TopicId, i32)>> {
        if let Some(i) = self.filter_lost.take() {
            self.filter_failed(usize::from(i), -1);
        }
        let pending = self
            .subs
            .iter()
            .find(|s| matches!(s.check, FilterCheck::Wanted | FilterCheck::Sent));
        let r = match (self.filter_failure, pending) {
            (Some(failure), _) => Err(failure),
            (None, Some(s)) if give_up && !self.lazy_start => Err((s.topic, -1)),
            (None, Some(_)) if !give_up => return None,
            _ => Ok(()),
        };
        for sub in self.subs.iter_mut() {
            sub.check = FilterCheck::Done;
        }
        Some(r)
    }

    /// Check `i` failed with `code` (-1: it could not be asked): the start fails on it unless
    /// it could not be asked and the start is lazy.
    fn filter_failed(&mut self, i: usize, code: i32) {
        let Some(sub) = self.subs.get_mut(i) else {
            return;
        };
        sub.check = FilterCheck::Done;
        if (code != -1 || !self.lazy_start) && self.filter_failure.is_none() {
            self.filter_failure = Some((sub.topic, code));
        }
    }

    /// The next check due, encoded into `buf` with its body (one frame of `len` bytes);
    /// `Err` only when every request slot is in use.
    pub(super) fn filter_call<S: SessionApi, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        buf: &mut [u8],
        lend: &M,
    ) -> Option<Result<Transmit, CallError>> {
        while let Some(i) = self
            .subs
            .iter()
            .position(|s| s.check == FilterCheck::Wanted)
        {
            let sub = &self.subs[i];
            let Some(broker) = session
                .subscribe_queues(sub.topic)
                .first()
                .map(|q| q.broker)
            else {
                // The route went away meanwhile: not checked, as a topic without one.
                self.subs[i].check = FilterCheck::Idle;
                continue;
            };
            let half = buf.len() / 2;
            let (frame, tail) = buf.split_at_mut(half);
            let s = Subscription {
                topic: session.topic_name(sub.topic).unwrap_or(""),
                expression: sub.expr(),
                sub_version: 0,
            };
            let too_small = CallError::Encode(crate::wire::EncodeError::BufferTooSmall);
            let written = write_check_client(&self.client_id, &self.group, &s, tail);
            let r = written.map_err(|_| too_small).and_then(|len| {
                let (peer, ext) = (Peer::Broker(broker), None::<HeartbeatRequestHeader>);
                let (code, body) = (RequestCode::CHECK_CLIENT_CONFIG, &tail[..len]);
                let tx = session.call(now, peer, code, ext, body, CLIENT_API_TIMEOUT, frame, lend);
                tx.map(|tx| (tx, len))
            });
            match r {
                Ok((mut tx, len)) => {
                    // The body follows the header in `buf`.
                    buf.copy_within(half..half + len, tx.len);
                    tx.len += len;
                    tx.body_len = 0;
                    // `calls` has room: checked at the top of `poll_call`.
                    let what = CallRef::Filter(u8::try_from(i).unwrap_or(u8::MAX), broker);
                    let _ = self.calls.insert(tx.opaque, what);
                    self.subs[i].check = FilterCheck::Sent;
                    return Some(Ok(tx));
                }
                Err(CallError::TooManyRequests) => return Some(Err(CallError::TooManyRequests)),
                // Cannot be written (signing, size): it could not be asked.
                Err(_) => self.filter_failed(i, -1),
            }
        }
        None
    }

    /// The answer to check `i`, asked of `broker`: its response `code`.
    pub(super) fn filter_checked<S: SessionApi>(&mut self, i: u8, broker: BrokerId, code: i32) {
        let i = usize::from(i);
        let Some(sub) = self.subs.get_mut(i) else {
            return;
        };
        if code == ResponseCode::SUCCESS.0 {
            sub.check = FilterCheck::Done;
            return;
        }
        let queue = QueueKey {
            topic: sub.topic,
            broker,
            queue_id: -1,
        };
        // (A code of an answer that does not parse, -1: it could not be asked.)
        self.filter_failed(i, code);
        self.refuse::<S>(queue, RequestCode::CHECK_CLIENT_CONFIG, code);
    }
}
