//! Nacked messages: CONSUMER_SEND_MSG_BACK and its outcome.

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
    /// Room for an event other than a send-back outcome (those always have theirs).
    pub(super) fn room(&self) -> bool {
        self.backs.len() + self.events.len() < CALLS
    }

    /// Sends a message the application could not process back to its broker
    /// (CONSUMER_SEND_MSG_BACK, see [`crate::send_back`]); the answer is a [`PullEvent`].
    /// The message stays in flight (its offset is not committable) until then.
    ///
    /// # Errors
    /// [`NackError`]; nothing changed.
    pub fn nack(&mut self, queue: QueueKey, lease: u32, nack: &Nack<'_>) -> Result<(), NackError> {
        if self.model == MessageModel::Broadcasting {
            return Err(NackError::Broadcasting);
        }
        let in_flight = self
            .owned
            .iter()
            .any(|o| o.key == queue && o.lease == lease && o.tracker.contains(nack.offset));
        if !in_flight {
            return Err(NackError::NotInFlight);
        }
        if self
            .backs
            .iter()
            .any(|b| b.key == queue && b.lease == lease && b.offset == nack.offset)
        {
            return Err(NackError::Pending);
        }
        // Every send-back ends in one event: keep room for them all.
        if self.backs.len() + self.events.len() >= CALLS {
            return Err(NackError::Full);
        }
        let (mut msg_id, mut topic) = (String::new(), String::new());
        if msg_id.push_str(nack.msg_id).is_err() || topic.push_str(nack.topic).is_err() {
            return Err(NackError::TooLong);
        }
        self.count(queue, |c| c.failed = c.failed.wrapping_add(1));
        let back = Back {
            key: queue,
            lease,
            offset: nack.offset,
            commit_log_offset: nack.commit_log_offset,
            delay_level: nack.delay_level,
            msg_id,
            topic,
            sent: false,
        };
        self.backs.push(back).map_err(|_| NackError::Full)
    }

    /// Send-backs not yet answered.
    pub fn sends_back_pending(&self) -> usize {
        self.backs.len()
    }

    /// A send-back ended: the message counts as consumed when the broker took it.
    pub(super) fn back_done(
        &mut self,
        now: Instant,
        queue: QueueKey,
        lease: u32,
        offset: i64,
        ok: bool,
    ) {
        let this = |b: &Back| b.key == queue && b.lease == lease && b.offset == offset;
        if let Some(i) = self.backs.iter().position(this) {
            let _ = self.backs.swap_remove(i);
        }
        let event = if ok {
            self.stats.sent_back = self.stats.sent_back.wrapping_add(1);
            let _ = self.ack(now, queue, lease, offset);
            PullEvent::SentBack {
                queue,
                lease,
                offset,
            }
        } else {
            self.stats.send_back_failures = self.stats.send_back_failures.wrapping_add(1);
            PullEvent::SendBackFailed {
                queue,
                lease,
                offset,
            }
        };
        // Room is kept by `nack`.
        let _ = self.events.push_back(event);
    }

    pub(super) fn back_call<S: SessionApi, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        session: &mut S,
        i: usize,
        buf: &mut [u8],
        lend: &M,
    ) -> Result<Transmit, CallError> {
        let b = &self.backs[i];
        let (key, lease, offset) = (b.key, b.lease, b.offset);
        let (commit_log_offset, delay_level) = (b.commit_log_offset, b.delay_level);
        let (msg_id, topic, group) = (b.msg_id.clone(), b.topic.clone(), self.group.clone());
        let bname = self.bname(session, key.broker);
        let hdr = ConsumerSendMsgBackRequestHeader {
            offset: commit_log_offset,
            group: &group,
            delay_level,
            origin_msg_id: Some(&msg_id),
            origin_topic: Some(&topic),
            unit_mode: false,
            max_reconsume_times: Some(self.max_reconsume_times),
            bname: bname.as_deref(),
        };
        let what = CallRef::SendBack(key, lease, offset);
        let peer = Peer::Broker(key.broker);
        let code = RequestCode::CONSUMER_SEND_MSG_BACK;
        let t = SEND_BACK_TIMEOUT;
        Self::call(
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
}
