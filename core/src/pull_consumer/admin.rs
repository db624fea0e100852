//! What the consumer answers to the requests brokers forward from operators' tools
//! (running info, offset resets, NOTIFY_CONSUMER_IDS_CHANGED) and its heartbeat body.

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
    /// NOTIFY_CONSUMER_IDS_CHANGED: a member joined or left the group; a rebalance round
    /// starts at once (unless the queues were assigned by hand).
    pub fn notify_ids_changed(&mut self, now: Instant) {
        self.stats.notifications = self.stats.notifications.wrapping_add(1);
        if !self.manual {
            self.rebalance_now(now);
        }
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Deliveries of a message before the broker moves it to `%DLQ%<group>`.
    pub fn max_reconsume_times(&self) -> i32 {
        self.max_reconsume_times
    }

    /// Whether this consumer consumes orderly (CONSUME_MESSAGE_DIRECTLY's answer says so).
    pub fn is_orderly(&self) -> bool {
        self.orderly
    }

    /// RESET_CONSUMER_CLIENT_OFFSET (`mqadmin resetOffsetByTime` through a 4.9 broker, a
    /// oneway request whose `body` lists queues and offsets): each listed owned queue restarts
    /// at its offset, which is committed (5.x brokers reset on their side and answer the next
    /// pull with PULL_OFFSET_MOVED instead).
    pub fn reset_offsets<S: SessionApi>(&mut self, now: Instant, session: &S, body: &[u8]) {
        let mut reset: Vec<(QueueKey, i64), OWNED> = Vec::new();
        parse_reset_offsets(body, |q, offset| {
            let key = self.queue_key(session, q.topic, q.broker_name, q.queue_id);
            if let Some(k) = key.filter(|k| self.owned.iter().any(|o| o.key == *k)) {
                let _ = reset.push((k, offset));
            }
        });
        for (k, offset) in reset {
            self.seek(now, k, Position::Offset(offset));
        }
    }

    /// The `GetConsumerStatusBody` of GET_CONSUMER_STATUS_FROM_CLIENT (the admin
    /// API's `getConsumeStatus`, see [`crate::admin::write_consumer_status`]): each owned queue of
    /// topic `t` with its offset as Java's offset store holds it (what is committable now).
    /// `None` when it does not fit.
    pub fn consumer_status<S: SessionApi>(
        &self,
        session: &S,
        t: TopicId,
        buf: &mut [u8],
    ) -> Option<usize> {
        let mut queues: Vec<(MessageQueue<'_>, i64), OWNED> = Vec::new();
        let topic = session.topic_name(t)?;
        for o in self.owned.iter().filter(|o| o.key.topic == t) {
            let Some(broker) = session.broker_name(o.key.broker) else {
                continue;
            };
            let q = MessageQueue::new(topic, broker, o.key.queue_id);
            let _ = queues.push((q, o.tracker.committable()));
        }
        crate::admin::write_consumer_status(&mut queues, buf).ok()
    }

    /// The `ConsumerRunningInfo` body of GET_CONSUMER_RUNNING_INFO (see [`crate::admin`]):
    /// every owned queue's state, this consumer's settings plus the runtime's `extra`
    /// properties, each topic's pull and consume rates since the previous report (mean
    /// processing time `consume_rt`, hundredths of ms, from the runtime), and the
    /// subscriptions. `unix_now` is the wall clock at `now`. `None` when it does not fit.
    #[allow(clippy::too_many_arguments)]
    pub fn running_info<S: SessionApi>(
        &mut self,
        now: Instant,
        unix_now: i64,
        session: &S,
        extra: &[(&str, &str)],
        consume_rt: u64,
        buf: &mut [u8],
    ) -> Option<usize> {
        let unix = |at: Option<Instant>| {
            at.map_or(0, |t| {
                let ago = now.saturating_duration_since(t).millis();
                unix_now.saturating_sub(i64::try_from(ago).unwrap_or(i64::MAX))
            })
        };
        let mut queues: Vec<(MessageQueue<'_>, ProcessQueueInfo), OWNED> = Vec::new();
        for o in self.owned.iter() {
            let (Some(topic), Some(broker)) = (
                session.topic_name(o.key.topic),
                session.broker_name(o.key.broker),
            ) else {
                continue;
            };
            let (min, max) = o.tracker.in_flight_range().unwrap_or((0, 0));
            let mib = o.tracker.cached_bytes() / (1024 * 1024);
            let info = ProcessQueueInfo {
                // Java reports its in-memory offset: what is committable now.
                commit_offset: o.tracker.committable(),
                cached_msg_min_offset: min,
                cached_msg_max_offset: max,
                cached_msg_count: u32::try_from(o.tracker.cached_count()).unwrap_or(u32::MAX),
                cached_msg_size_mib: u32::try_from(mib).unwrap_or(u32::MAX),
                locked: Self::locked(o, now),
                last_lock_timestamp: unix(o.locked_at),
                last_pull_timestamp: unix(o.last_pull),
                last_consume_timestamp: unix(o.last_consume),
                lag: lag_of(o.max_offset, &o.tracker),
            };
            let _ = queues.push((MessageQueue::new(topic, broker, o.key.queue_id), info));
        }
        let mut status: Vec<(&str, ConsumeStatus), SUBS> = Vec::new();
        let mut subs: Vec<Subscription<'_>, SUBS> = Vec::new();
        for s in &mut self.subs {
            let Some(topic) = session.topic_name(s.topic) else {
                continue;
            };
            let (at, before) = s.reported;
            let ms = now.saturating_duration_since(at).millis().max(1);
            // Per second, in hundredths.
            let rate = |n: u64| n.saturating_mul(100_000) / ms;
            let c = s.counts;
            let pulls = c.pulls.wrapping_sub(before.pulls);
            let st = ConsumeStatus {
                pull_rt: c.pull_rt_ms.saturating_mul(100) / c.pulls.max(1),
                pull_tps: rate(pulls),
                consume_rt,
                consume_ok_tps: rate(c.acked.wrapping_sub(before.acked)),
                consume_failed_tps: rate(c.failed.wrapping_sub(before.failed)),
                consume_failed_msgs: c.failed.wrapping_sub(before.failed),
            };
            s.reported = (now, c);
            let _ = status.push((topic, st));
            let _ = subs.push(Subscription {
                topic,
                expression: s.expr(),
                sub_version: self.sub_version,
            });
        }
        let (mut batch, mut retries) = (String::<12>::new(), String::<12>::new());
        let mut lag = String::<24>::new();
        let total: u64 = queues.iter().filter_map(|q| q.1.lag).sum();
        let _ = core::fmt::write(&mut lag, format_args!("{total}"));
        let _ = core::fmt::write(&mut batch, format_args!("{}", self.batch));
        let _ = core::fmt::write(&mut retries, format_args!("{}", self.max_reconsume_times));
        let mut props: Vec<(&str, &str), 48> = Vec::new();
        let own = [
            ("consumerGroup", self.group.as_str()),
            ("messageModel", self.model.name()),
            ("consumeFromWhere", self.consume_from.name()),
            ("pullBatchSize", batch.as_str()),
            ("maxReconsumeTimes", retries.as_str()),
            // rmq: the owned queues' summed lag (each queue's is its `"lag"`).
            ("consumeLag", lag.as_str()),
            (prop::CONSUME_TYPE, ConsumeType::Passively.name()),
            (
                prop::CONSUME_ORDERLY,
                if self.orderly { "true" } else { "false" },
            ),
        ];
        for p in own.into_iter().chain(extra.iter().copied()) {
            let _ = props.push(p);
        }
        write_running_info(&mut queues, &props, &mut status, &mut subs, buf).ok()
    }

    /// Writes the HEART_BEAT body announcing this consumer (its subscriptions) into `buf`.
    /// `None` when it does not fit.
    pub fn heartbeat_body<S: SessionApi>(&self, session: &S, buf: &mut [u8]) -> Option<usize> {
        let mut subs: Vec<Subscription<'_>, SUBS> = Vec::new();
        for s in &self.subs {
            let topic = session.topic_name(s.topic)?;
            let sub = Subscription {
                topic,
                expression: s.expr(),
                sub_version: self.sub_version,
            };
            subs.push(sub).ok()?;
        }
        let data = [ConsumerData {
            group: &self.group,
            consume_type: ConsumeType::Passively,
            message_model: self.model,
            consume_from_where: self.consume_from,
            subscriptions: &subs,
        }];
        let flavor = if self.version >= version::V5_0_0 {
            HeartbeatFlavor::V5
        } else {
            HeartbeatFlavor::V4
        };
        write_heartbeat(&self.client_id, &data, &[], flavor, buf).ok()
    }
}
