//! POP consumption (RocketMQ 5.x): [`PopConsumer`].

use std::sync::Arc;
use std::time::Duration as StdDuration;

use bytes::Bytes;
use rmq_core::client::Lend;
use rmq_core::consumer::ConsumeFromWhere;
use rmq_core::pop::{self, Heard, PopAnswer, PopError, PopHandle, PopRequest, PopStatus, Retry};
use rmq_core::session::{self, Transmit};
use rmq_core::time::{Duration, Instant};
use tracing::warn;

use super::{
    ConsumeResult, ConsumedMessage, ConsumerBuilder, ConsumerConfig, ConsumerConfigError,
    Expression, HandlerResult,
};
use crate::client::{client_id, local_ip};
use crate::clock;
use crate::driver::{AskError, Driver};
use crate::message::{MessageQueue, SendError, SendErrorKind};
use crate::producer::{answered, ask_error, call_error};
use crate::shared::Counters;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

type Core = crate::driver::Core<rmq_core::client::NoConsumer>;

/// A message a [`PopConsumer`] received, with its receipt handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoppedMessage {
    /// The message (its `topic` is the subscription's, also for a message the broker
    /// redelivered through the group's POP retry topic).
    pub message: ConsumedMessage,
    handle: String,
}

impl PoppedMessage {
    /// The receipt handle (the broker's `POP_CK`): what [`PopConsumer::ack`] and
    /// [`PopConsumer::change_invisible_time`] name the message by.
    pub fn handle(&self) -> &str {
        &self.handle
    }
}

/// A POP consumer (RocketMQ 5.x, docs/protocol/POP.md): it takes messages from its
/// subscriptions' brokers with [`receive`](Self::receive); each one stays invisible to the
/// group's other consumers for the time asked and comes again (with
/// [`ConsumedMessage::reconsume_times`] one higher) unless it is acknowledged
/// ([`ack`](Self::ack)) before then. The broker keeps the group's progress: any number of
/// consumers of a group share its topics without rebalancing, and no heartbeat is needed.
///
/// Built by [`ConsumerBuilder::start_pop`], which uses the builder's NameServers, group,
/// subscriptions (TAG or SQL92), [`consume_from`](ConsumerBuilder::consume_from) (first or
/// last offset, for a group new to a topic), [`suspend`](ConsumerBuilder::suspend) (how long
/// a broker holds a receive that finds nothing), [`orderly`](ConsumerBuilder::orderly)
/// (orderly POP: a queue gives nothing more while a message of its last batch is
/// unacknowledged and invisible, and such a message comes again from its own queue, in order,
/// counted in `reconsume_times`), ACL and TLS settings. A broker before 5.0 has no POP: it
/// refuses with REQUEST_CODE_NOT_SUPPORTED (3).
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// let c = rmq_std::consumer::Consumer::builder()
///     .namesrv_addr("127.0.0.1:9876")
///     .group("workers")
///     .subscribe("Jobs", "*")
///     .start_pop()
///     .await?;
/// for m in c.receive(16, Duration::from_secs(60)).await? {
///     // ... the work, within the minute ...
///     c.ack(&m).await?;
/// }
/// c.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PopConsumer {
    inner: Arc<Inner>,
}

struct Inner {
    driver: Driver,
    cfg: ConsumerConfig,
    /// The subscription the next receive starts with, and the broker its rounds start at.
    next: AtomicUsize,
    /// [`PopConsumer::shutdown`] was called: [`PopConsumer::run`] returns.
    stopped: AtomicBool,
    /// Held (read) by [`PopConsumer::run`] while it hands a batch out and settles it; a
    /// shutdown takes it (write) before it closes the connections.
    handling: tokio::sync::RwLock<()>,
}

impl std::fmt::Debug for PopConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = &self.inner.cfg.group;
        f.debug_struct("PopConsumer").field("group", group).finish()
    }
}

impl ConsumerBuilder {
    /// Starts a [`PopConsumer`] of this configuration (no rebalancing, no heartbeats: the
    /// settings of those are not used).
    ///
    /// # Errors
    /// [`ConsumerConfigError`]: no NameServer, group or subscription, an empty ACL key, a
    /// refused session configuration.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn start_pop(mut self) -> Result<PopConsumer, ConsumerConfigError> {
        let follow = self.discover().await?;
        let cfg = self.checked()?.wired();
        let id = client_id(local_ip(&cfg.namesrv_addr), &cfg.instance_name);
        let mut sc = session::Config::new(cfg.namesrv_addr.len(), "", &id);
        sc.consumer_group = Some(&cfg.group);
        (sc.version, sc.language) = (cfg.version, cfg.language);
        sc.serialize_type = cfg.serialize_type;
        sc.heartbeat = None;
        sc.seed = clock::random_u32();
        let driver = Driver::start(
            &sc,
            rmq_core::client::NoConsumer,
            cfg.namesrv_addr.clone(),
            cfg.security.clone(),
            (16, usize::MAX),
            Arc::new(Counters::new()),
        )
        .map_err(ConsumerConfigError::Session)?;
        if let Some(f) = follow {
            f.attach(&driver, None);
        }
        let (next, stopped) = (AtomicUsize::new(0), AtomicBool::new(false));
        Ok(PopConsumer {
            inner: Arc::new(Inner {
                driver,
                cfg,
                next,
                stopped,
                handling: tokio::sync::RwLock::new(()),
            }),
        })
    }
}

impl PopConsumer {
    /// `name` on the wire ([`ConsumerBuilder::namespace`](super::ConsumerBuilder::namespace)).
    fn wire<'a>(&self, name: &'a str) -> std::borrow::Cow<'a, str> {
        crate::client::wire(self.inner.cfg.namespace.as_deref(), name)
    }

    /// Up to `max` messages (at most [`pop::MAX_MESSAGES`], 32, from one broker), each
    /// invisible to the group's other receives for `invisible` and then delivered again unless
    /// acknowledged. It asks each broker of each subscription in turn, starting with the
    /// subscription after the last receive's, and returns the first messages found; the last
    /// broker asked may hold the request up to the builder's `suspend` (15 s) while it has
    /// none ([`rmq_core::pop::Receive`]). A broker that fails is passed over (logged); after a
    /// failed or full broker the receive waits 3 s before it returns empty, as Java does.
    /// Empty: nothing came in that time (`max` 0: at once).
    ///
    /// # Errors
    /// [`SendError`]: the broker's refusal ([`SendErrorKind::Broker`] with its code and remark);
    /// [`SendErrorKind::Shutdown`] once [`shutdown`](Self::shutdown) was called;
    /// when no broker answered at all, the last failure: no route for a topic
    /// ([`SendErrorKind::NoRoute`]), the connection's failure, no answer in time.
    pub async fn receive(
        &self,
        max: usize,
        invisible: StdDuration,
    ) -> Result<Vec<PoppedMessage>, SendError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let cfg = &self.inner.cfg;
        let first = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let suspend = clock::to_core(cfg.suspend);
        let mut round = pop::Receive::new(cfg.subscriptions.len(), first, suspend);
        let mut failure = None;
        while let Some(ask) = round.next() {
            if self.inner.stopped.load(Ordering::SeqCst) {
                return Err(SendError::new(SendErrorKind::Shutdown, 0));
            }
            let (topic, exp) = &cfg.subscriptions[ask.subscription];
            let (expression_type, expression) = match exp {
                Expression::Tag(e) => ("TAG", e.as_str()),
                Expression::Sql92(e) => ("SQL92", e.as_str()),
            };
            let req = PopRequest {
                group: &cfg.group,
                topic,
                expression_type,
                expression,
                max: u8::try_from(max).unwrap_or(u8::MAX),
                invisible_ms: u64::try_from(invisible.as_millis()).unwrap_or(u64::MAX),
                from_first: cfg.consume_from == ConsumeFromWhere::FirstOffset,
                order: cfg.orderly,
            };
            let within = clock::to_std(ask.wait.saturating_add(pop::ANSWER_MARGIN));
            let asked = self.ask(topic, within, |c, now, _, buf, lend| {
                c.pop(now, &req, ask.brokers, ask.wait, buf, lend)
            });
            let (broker, frame) = match asked.await {
                Ok(Some(answer)) => answer,
                Ok(None) => {
                    round.heard(Heard::RoundOver);
                    continue;
                }
                Err(e) => {
                    warn!(topic, error = %e, "POP receive: a broker failed; the next one is asked");
                    let no_route = matches!(e.kind(), SendErrorKind::NoRoute);
                    round.heard(if no_route {
                        Heard::NoRoute
                    } else {
                        Heard::Failed
                    });
                    failure = Some(e);
                    continue;
                }
            };
            let Some(a) = PopAnswer::read(&frame) else {
                return Err(SendError::new(SendErrorKind::Malformed, 1));
            };
            match a.status() {
                PopStatus::Found => {
                    let mut found = popped(&frame, &a, topic, &broker);
                    let ns = self.inner.cfg.namespace.as_deref();
                    for p in &mut found {
                        super::unwrap_names(ns, &mut p.message);
                    }
                    return Ok(found);
                }
                PopStatus::Nothing => round.heard(Heard::Nothing),
                PopStatus::Full => round.heard(Heard::Full),
                PopStatus::Refused(_) => {
                    let a = crate::conn::Answer::read(&frame, "");
                    return answered(a).map(|_| Vec::new());
                }
            }
        }
        match failure {
            Some(e) if !round.answered() => return Err(e),
            _ => {}
        }
        if let Some(pause) = round.pause() {
            // A broker was full or failed: no receive loop asks it again at once.
            tokio::time::sleep(clock::to_std(pause)).await;
        }
        Ok(Vec::new())
    }

    /// Acknowledges `m`: it is not delivered again. The broker accepts a handle whose
    /// invisible time has passed too, but then the message comes again all the same.
    ///
    /// # Errors
    /// As [`PopConsumer::receive`]; NO_MESSAGE (208) when its offset is no longer in its queue.
    pub async fn ack(&self, m: &PoppedMessage) -> Result<(), SendError> {
        let (group, topic) = (&self.inner.cfg.group, &*self.wire(&m.message.topic));
        self.settled(topic, |c, now, left, buf, lend| {
            c.pop_ack(now, group, topic, &m.handle, left, buf, lend)
        })
        .await
        .map(drop)
    }

    /// Keeps `m` invisible for `invisible` from now (then it comes again unless acknowledged),
    /// and gives it the broker's new handle (the old one is spent).
    ///
    /// # Errors
    /// As [`PopConsumer::ack`].
    pub async fn change_invisible_time(
        &self,
        m: &mut PoppedMessage,
        invisible: StdDuration,
    ) -> Result<(), SendError> {
        let (group, topic) = (&self.inner.cfg.group, &*self.wire(&m.message.topic));
        let ms = u64::try_from(invisible.as_millis()).unwrap_or(u64::MAX);
        let handle = &m.handle;
        let frame = self.settled(topic, |c, now, left, buf, lend| {
            c.change_invisible(now, group, topic, handle, ms, left, buf, lend)
        });
        let frame = frame.await?;
        let changed = PopAnswer::read(&frame).map(|a| a.changed());
        let old = PopHandle::parse(handle);
        let mut next = String::new();
        match old.zip(changed) {
            Some((h, c)) if h.write_changed(&c, &mut next).is_ok() => m.handle = next,
            _ => return Err(SendError::new(SendErrorKind::Malformed, 1)),
        }
        Ok(())
    }

    /// Runs `handler` on every message received, until [`shutdown`](Self::shutdown): up to
    /// `consume_concurrency` (at most 32) at a time, each invisible to the group's other
    /// consumers for Java's 60 s meanwhile. A message handled with success is acknowledged; one
    /// whose handler failed (`ConsumeResult::Later(level)`, an `Err`) comes again after Java's
    /// POP retry delay ([`rmq_core::pop::retry`]: 10 s, 30 s, ... by delivery count or level),
    /// and once it was delivered `max_reconsume_times` times (16; or at level -1) it goes to
    /// `%DLQ%<group>` and is acknowledged: the broker itself never gives up on a POP message,
    /// and Java's consumer would drop it. A receive that fails is logged and tried again after
    /// 1 s.
    ///
    /// ```no_run
    /// # async fn f(c: rmq_std::consumer::PopConsumer) {
    /// use rmq_std::consumer::ConsumeResult;
    /// c.run(|m| async move {
    ///     println!("{}", String::from_utf8_lossy(&m.body));
    ///     ConsumeResult::Success
    /// })
    /// .await;
    /// # }
    /// ```
    pub async fn run<F, Fut, R>(&self, handler: F)
    where
        F: Fn(ConsumedMessage) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = R> + Send + 'static,
        R: HandlerResult,
    {
        let (handler, max) = (Arc::new(handler), self.inner.cfg.consume_concurrency);
        let invisible = clock::to_std(pop::INVISIBLE_TIME);
        while !self.inner.stopped.load(Ordering::SeqCst) {
            let batch = match self.receive(max.clamp(1, 32), invisible).await {
                Ok(batch) => batch,
                Err(e) if !self.inner.stopped.load(Ordering::SeqCst) => {
                    warn!(error = %e, "POP receive failed; again in 1 s");
                    tokio::time::sleep(StdDuration::from_secs(1)).await;
                    continue;
                }
                Err(_) => break,
            };
            let _handling = self.inner.handling.read().await;
            if self.inner.stopped.load(Ordering::SeqCst) {
                // Received as the shutdown began: not handed out; it comes again after its
                // invisible time.
                break;
            }
            if self.inner.cfg.orderly {
                // Orderly POP: each queue's messages one after another, in order.
                for m in batch {
                    let result = handler(m.message.clone()).await.into_result();
                    self.settle(m, result).await;
                }
                continue;
            }
            let mut calls = tokio::task::JoinSet::new();
            for m in batch {
                let (h, me) = (handler.clone(), self.clone());
                calls.spawn(async move {
                    let result = h(m.message.clone()).await.into_result();
                    me.settle(m, result).await;
                });
            }
            while calls.join_next().await.is_some() {}
        }
    }

    /// Acknowledges `m`, or has it come again or go to the dead-letter queue, by `result`.
    async fn settle(&self, mut m: PoppedMessage, result: (ConsumeResult, Option<String>)) {
        let id = m.message.msg_id.clone();
        if let Some(e) = &result.1 {
            warn!(msg_id = %id, error = %e, "POP handler failed");
        }
        let level = match result.0 {
            ConsumeResult::Success | ConsumeResult::Partial(1..) => None,
            ConsumeResult::Later(level) => Some(level),
            ConsumeResult::Partial(0) => Some(0),
        };
        let max = self.inner.cfg.max_reconsumes();
        let settled = match level.map(|l| pop::retry(m.message.reconsume_times, l, max)) {
            None => self.ack(&m).await,
            Some(Retry::After(d)) => self.change_invisible_time(&mut m, clock::to_std(d)).await,
            Some(Retry::DeadLetter) => match self.dead_letter(&m).await {
                Ok(()) => self.ack(&m).await,
                Err(e) => Err(e),
            },
        };
        if let Err(e) = settled {
            warn!(msg_id = %id, error = %e, "POP message not settled: it comes again later");
        }
    }

    /// Sends `m` to `%DLQ%<group>` (see [`Client::pop_dead_letter`]).
    ///
    /// [`Client::pop_dead_letter`]: rmq_core::client::Client::pop_dead_letter
    async fn dead_letter(&self, m: &PoppedMessage) -> Result<(), SendError> {
        let (group, topic) = (&self.inner.cfg.group, &*self.wire(&m.message.topic));
        let letter = pop::DeadLetter {
            commit_log_offset: m.message.commit_log_offset,
            msg_id: &m.message.msg_id,
            max_reconsume_times: self.inner.cfg.max_reconsumes(),
        };
        let who = (group.as_str(), topic, m.handle.as_str());
        let asked = self.settled(topic, |c, now, left, buf, lend| {
            c.pop_dead_letter(now, who, &letter, left, buf, lend)
        });
        asked.await.map(drop)
    }

    /// A request about a received message (of `topic`), made by `f` and answered SUCCESS
    /// within the client's 3 s: the answer's frame.
    async fn settled(
        &self,
        topic: &str,
        f: impl Fn(&mut Core, Instant, Duration, &mut [u8], &dyn Lend) -> Result<Transmit, PopError>,
    ) -> Result<Bytes, SendError> {
        let deadline = clock::to_std(rmq_core::producer::CLIENT_API_TIMEOUT);
        let (_, frame) = self.ask(topic, deadline, f).await?.ok_or_else(no_route)?;
        answered(crate::conn::Answer::read(&frame, "")).map(|_| frame)
    }

    /// Ends [`PopConsumer::run`]: waits up to 3 s for the handler calls in progress and their
    /// acknowledgements (a message whose call takes longer comes again after its invisible
    /// time), then closes the connections (nothing to unregister: POP needs no heartbeat).
    pub async fn shutdown(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        let limit = clock::to_std(rmq_core::producer::CLIENT_API_TIMEOUT);
        let _ = tokio::time::timeout(limit, self.inner.handling.write()).await;
        self.inner.driver.shutdown(limit).await;
    }

    /// Asks what `f` makes through the client within `within`, looking the topic's route up
    /// once when the client knows no broker to ask: the broker's name and its answer's frame;
    /// `None` at the end of a round.
    async fn ask(
        &self,
        topic: &str,
        within: StdDuration,
        f: impl Fn(&mut Core, Instant, Duration, &mut [u8], &dyn Lend) -> Result<Transmit, PopError>,
    ) -> Result<Option<(String, Bytes)>, SendError> {
        let d = &self.inner.driver;
        let mut looked_up = false;
        loop {
            let deadline = clock::after(within);
            match d.ask(&f, deadline).await {
                Ok((peer, frame)) => {
                    let name = |s: &crate::driver::Session| match peer {
                        session::Peer::Broker(b) => s.broker_name(b).map(str::to_owned),
                        _ => None,
                    };
                    return Ok(Some((d.with(name).unwrap_or_default(), frame)));
                }
                Err(AskError::Request(PopError::RoundOver)) => return Ok(None),
                Err(AskError::Request(PopError::NoRoute)) if !looked_up => {
                    looked_up = true;
                    d.route(topic, false, within).await;
                }
                Err(e) => return Err(ask_error(e, pop_error)),
            }
        }
    }
}

/// The messages of a found answer `a` (in `frame`), popped from `topic` on `broker`.
fn popped(frame: &Bytes, a: &PopAnswer<'_>, topic: &str, broker: &str) -> Vec<PoppedMessage> {
    let mut undecodable = 0;
    let messages = a.messages().filter_map(|m| {
        undecodable += usize::from(m.is_err());
        m.ok()
    });
    let out = messages
        .map(|m| {
            let mut handle = String::new();
            // (Writing to a String does not fail.)
            let _ = a.write_handle(&m, broker, &mut handle);
            let queue = MessageQueue {
                topic: m.topic.to_owned(),
                broker_name: broker.to_owned(),
                queue_id: m.queue_id,
            };
            let mut message = super::outside(frame, &m, topic, queue);
            if let Some(n) = a.reconsume_times(&m) {
                message.reconsume_times = n;
            }
            PoppedMessage { message, handle }
        })
        .collect();
    if undecodable > 0 {
        // Not acknowledged: the broker delivers it again after its invisible time.
        warn!(
            topic,
            broker, undecodable, "POP answer: a message does not decode"
        );
    }
    out
}

fn no_route() -> SendError {
    SendError::new(SendErrorKind::NoRoute, 0)
}

fn pop_error(e: PopError) -> SendErrorKind {
    match e {
        PopError::NoRoute | PopError::RoundOver => SendErrorKind::NoRoute,
        PopError::InvalidHandle => SendErrorKind::Malformed,
        PopError::Call(e) => call_error(e),
    }
}
