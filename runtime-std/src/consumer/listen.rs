//! The listener API ([`Consumer::run`]) and retries ([`Consumer::nack`]) on top of `poll`/`ack`.
//!
//! What happens to a failed message is the core's ([`rmq_core::client::Client::nack`]: the
//! send-back, the resend to `%RETRY%<group>`, the local redelivery; orderly's skip past the
//! reconsume limit, [`rmq_core::lock::orderly_skips`]): this module runs the handlers and
//! hands their results to it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration as StdDuration;

use rmq_core::client::{DirectOutcome, NackOutcome};
use rmq_core::lock::orderly_skips;
use rmq_core::send_back::{NackError, TIMEOUT_DELAY_LEVEL};
use rmq_core::session::Peer;
use rmq_core::trace::ConsumeReturn;
use tokio::sync::{Semaphore, oneshot};
use tracing::warn;

use super::{ConsumedMessage, Consumer};
use crate::clock;
use crate::driver::{Machine, Wait};
use crate::sync::{AtomicU64, Ordering, lock};
use rmq_core::pull_consumer::QueueKey;
use std::collections::HashMap;
use tokio::sync::mpsc;

/// How long an orderly worker waits for its queue's lock ([`Wait::Locked`]) before it looks
/// again whether the queue is still its own.
const LOCK_WAIT: StdDuration = StdDuration::from_secs(1);

/// How a nack ended (a driver that stopped meanwhile: handed out again, by whoever consumes
/// the queue next).
fn nacked(outcome: Result<NackOutcome, oneshot::error::RecvError>) -> Nacked {
    match outcome {
        Ok(NackOutcome::SentBack) => Nacked::SentBack,
        Ok(NackOutcome::Resent) => Nacked::Resent,
        Ok(NackOutcome::Local) | Err(_) => Nacked::Local,
    }
}

/// What a [`Consumer::run`] handler says of the messages it was given.
///
/// `Ok(())` converts to `Success` and `Err(_)` to `Later(0)`, so a handler may return a
/// `Result`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsumeResult {
    /// All processed.
    Success,
    /// None processed: each is sent back for a retry at this delay level (0 lets the broker
    /// choose: 10 s the first time, longer each time; -1 sends them to the dead-letter queue).
    Later(i32),
    /// The first `n` processed, the rest sent back with the broker's delay (Java's `ackIndex`
    /// is `n - 1`).
    Partial(usize),
}

/// What a [`Consumer::run`] handler returns: a [`ConsumeResult`], or a `Result` whose error
/// sends the messages back (`Later(0)`) and is logged (as `{:#}`: anyhow's whole chain) and
/// counted in [`super::ConsumerStats::handler_failures`].
pub trait HandlerResult: Send + 'static {
    /// The result, and the error to report if the call failed.
    fn into_result(self) -> (ConsumeResult, Option<String>);
}

impl HandlerResult for ConsumeResult {
    fn into_result(self) -> (ConsumeResult, Option<String>) {
        (self, None)
    }
}

impl<E: std::fmt::Display + Send + 'static> HandlerResult for Result<(), E> {
    fn into_result(self) -> (ConsumeResult, Option<String>) {
        match self {
            Ok(()) => (ConsumeResult::Success, None),
            Err(e) => (ConsumeResult::Later(0), Some(format!("{e:#}"))),
        }
    }
}

/// The handler calls in progress (a shutdown waits for them) and the failed ones.
#[derive(Default)]
pub(crate) struct Calls(crate::inflight::InFlight, AtomicU64);

impl Calls {
    fn enter(&self) -> crate::inflight::Entered {
        self.0.enter()
    }

    pub(crate) fn failures(&self) -> u64 {
        self.1.load(Ordering::Relaxed)
    }

    /// Counts and logs a failed call of `msgs`.
    fn failed(&self, msgs: &[ConsumedMessage], error: &str) {
        self.1.fetch_add(1, Ordering::Relaxed);
        let first = msgs.first().map(|m| (m.queue.queue_id, m.queue_offset));
        warn!(
            error,
            messages = msgs.len(),
            ?first,
            "handler failed: messages sent back"
        );
    }

    /// Waits up to `limit` for the calls in progress to end; how many still run.
    pub(crate) async fn drained(&self, limit: StdDuration) -> usize {
        self.0.drained(limit).await
    }
}

/// Where a [`Consumer::nack`]ed message went. In each case it comes back later; in the first
/// two its offset counts as consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nacked {
    /// The broker took it back (CONSUMER_SEND_MSG_BACK): it returns through `%RETRY%<group>`
    /// after its delay, or went to `%DLQ%<group>` after `max_reconsume_times` deliveries.
    SentBack,
    /// The broker refused the send-back: a copy was sent to `%RETRY%<group>`.
    Resent,
    /// Both failed: this consumer hands it out again in 5 s.
    Local,
    /// A broadcasting consumer has no retry topic: the message is dropped (acknowledged), as
    /// Java drops it.
    Dropped,
}

/// The handler of [`Consumer::run`], for one message (CONSUME_MESSAGE_DIRECTLY).
pub(crate) type Direct = Arc<
    dyn Fn(ConsumedMessage) -> Pin<Box<dyn Future<Output = ConsumeResult> + Send>> + Send + Sync,
>;

/// Runs CONSUME_MESSAGE_DIRECTLY requests (`mqadmin queryMsgById … -d <clientId>`) on the
/// registered handler and has the core answer each (without a handler, a poll-only consumer,
/// the core answers that there is none).
pub(crate) async fn serve_directs(
    weak: Weak<super::Inner>,
    mut rx: mpsc::UnboundedReceiver<(Peer, i32, ConsumedMessage)>,
) {
    while let Some((peer, opaque, m)) = rx.recv().await {
        let Some(inner) = weak.upgrade() else { return };
        let handler = lock(&inner.direct).clone();
        tokio::spawn(async move {
            let t0 = std::time::Instant::now();
            let outcome = match handler {
                Some(h) => match tokio::spawn(h(m)).await {
                    Ok(ConsumeResult::Success) => DirectOutcome::Success,
                    Ok(ConsumeResult::Partial(n)) if n > 0 => DirectOutcome::Success,
                    Ok(_) => DirectOutcome::Later,
                    Err(_) => DirectOutcome::Failed,
                },
                None => DirectOutcome::NoHandler,
            };
            let spent = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
            inner.driver.answer_direct(peer, opaque, outcome, spent);
        });
    }
}

impl Consumer {
    /// Hands a message back for a later retry: CONSUMER_SEND_MSG_BACK to its broker with
    /// `delay_level` (0: the broker's choice); if the broker refuses, a copy to
    /// `%RETRY%<group>`; if that fails too, the message is handed out again in 5 s. Until one
    /// of these succeeds the message stays in flight (its offset is not committed).
    ///
    /// # Errors
    /// [`NackError::NotInFlight`] when it was acknowledged or nacked already, or its queue
    /// moved to another consumer; [`NackError::Full`] when too many send-backs are under way.
    pub async fn nack(&self, m: &ConsumedMessage, delay_level: i32) -> Result<Nacked, NackError> {
        let m = &*self.wired(m);
        match self.inner.driver.nack(m, Some(delay_level)) {
            Err(NackError::Broadcasting) if self.ack(m) => Ok(Nacked::Dropped),
            Err(e) => Err(e),
            Ok(rx) => Ok(nacked(rx.await)),
        }
    }

    /// Runs `handler` on every message until [`Consumer::shutdown`]: up to
    /// `consume_concurrency` calls at once, each with up to `consume_batch_size` messages.
    /// What it returns ([`ConsumeResult`], or a `Result`: [`HandlerResult`]) acknowledges the
    /// messages or sends them back ([`Consumer::nack`]); a handler that panics counts as
    /// `Later(0)`, one that runs past `consume_timeout` has its messages sent back (delay level
    /// 3). Errors, panics and timeouts are logged (`tracing` warnings with the error) and
    /// counted ([`super::ConsumerStats::handler_failures`]); none stops the consumer.
    /// [`Consumer::shutdown`] waits for the calls in progress.
    ///
    /// ```no_run
    /// # async fn f(consumer: rmq_std::consumer::Consumer) {
    /// consumer
    ///     .run(|batch| async move {
    ///         for m in &batch {
    ///             if m.body.is_empty() {
    ///                 return Err("empty body"); // retried later, by the broker
    ///             }
    ///         }
    ///         Ok(())
    ///     })
    ///     .await;
    /// # }
    /// ```
    pub async fn run<F, Fut, R>(&self, handler: F)
    where
        F: Fn(Vec<ConsumedMessage>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: HandlerResult,
    {
        let cfg = &self.inner.cfg;
        let handler = Arc::new(handler);
        let h = handler.clone();
        let direct: Direct = Arc::new(move |m| {
            let h = h.clone();
            Box::pin(async move { h(vec![m]).await.into_result().0 })
        });
        *lock(&self.inner.direct) = Some(direct);
        if cfg.orderly {
            return self.run_orderly(handler).await;
        }
        let slots = Arc::new(Semaphore::new(cfg.consume_concurrency.max(1)));
        let size = cfg.consume_batch_size.max(1);
        while self.inner.running.load(Ordering::Acquire) {
            // One poll for as many batches as there are free slots (at least one): the poll's
            // locks and timer are paid once for all of them.
            // The slots are taken before the poll, so that no message is held across an
            // await (a `run` dropped there would leave it in flight).
            let Ok(first) = slots.clone().acquire_owned().await else {
                return;
            };
            let mut free = vec![first];
            free.extend(std::iter::from_fn(|| {
                slots.clone().try_acquire_owned().ok()
            }));
            let mut msgs = self
                .poll(free.len() * size, StdDuration::from_millis(200))
                .await;
            while let Some(slot) = free.pop().filter(|_| !msgs.is_empty()) {
                let rest = msgs.split_off(size.min(msgs.len()));
                self.spawn_call(std::mem::replace(&mut msgs, rest), slot, &handler);
            }
        }
    }

    /// Runs the handler on `batch` in its own task and settles the result; `slot` is released
    /// when it is settled.
    fn spawn_call<F, Fut, R>(
        &self,
        batch: Vec<ConsumedMessage>,
        slot: tokio::sync::OwnedSemaphorePermit,
        handler: &Arc<F>,
    ) where
        F: Fn(Vec<ConsumedMessage>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: HandlerResult,
    {
        let (this, h) = (self.clone(), handler.clone());
        let timeout = Some(self.inner.cfg.consume_timeout);
        let call = self.inner.calls.enter();
        tokio::spawn(async move {
            let (done, level) = this.call(&h, &batch, timeout).await;
            this.ack_all(&batch[..done]);
            for m in &batch[done..] {
                if let Err(e) = this.nack(m, level).await {
                    tracing::debug!(offset = m.queue_offset, "not sent back: {e}");
                }
            }
            drop((slot, call));
        });
    }

    /// Runs the handler on `batch` in a task of its own (a panic fails the batch), for at
    /// most `timeout`: past it, the call goes on detached and the batch counts as failed
    /// ([`TIMEOUT_DELAY_LEVEL`]). A failed call is counted and logged. How many messages were
    /// processed, and the delay level for the rest.
    async fn call<F, Fut, R>(
        &self,
        h: &Arc<F>,
        batch: &[ConsumedMessage],
        timeout: Option<StdDuration>,
    ) -> (usize, i32)
    where
        F: Fn(Vec<ConsumedMessage>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: HandlerResult,
    {
        let (h, msgs) = (h.clone(), batch.to_vec());
        let (group, tracer) = (&self.inner.cfg.group, self.inner.tracer.as_ref());
        let traced = tracer.map(|t| t.before(group, batch));
        let run = tokio::spawn(async move { h(msgs).await.into_result() });
        let limit = timeout.unwrap_or(StdDuration::MAX);
        let (result, error, code) = match tokio::time::timeout(limit, run).await {
            // A handler's `Err` is Java's exception.
            Ok(Ok((r, None))) => (r, None, ConsumeReturn::Success),
            Ok(Ok((r, e))) => (r, e, ConsumeReturn::Exception),
            Ok(Err(_)) => {
                let e = Some("panicked".to_owned());
                (ConsumeResult::Later(0), e, ConsumeReturn::Exception)
            }
            Err(_) => {
                let late = Some("ran past consume_timeout".to_owned());
                (
                    ConsumeResult::Later(TIMEOUT_DELAY_LEVEL),
                    late,
                    ConsumeReturn::TimeOut,
                )
            }
        };
        if let (Some(t), Some(call)) = (tracer, &traced) {
            let ok = matches!(result, ConsumeResult::Success);
            let code = if ok || code != ConsumeReturn::Success {
                code
            } else {
                ConsumeReturn::Failed
            };
            t.after(group, call, batch, (ok, code));
        }
        if let Some(e) = error {
            self.inner.calls.failed(batch, &e);
        }
        match result {
            ConsumeResult::Success => (batch.len(), 0),
            ConsumeResult::Later(level) => (0, level),
            ConsumeResult::Partial(n) => (n.min(batch.len()), 0),
        }
    }

    /// Orderly: one worker per queue (and lease) takes its messages in queue order.
    async fn run_orderly<F, Fut, R>(&self, handler: Arc<F>)
    where
        F: Fn(Vec<ConsumedMessage>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: HandlerResult,
    {
        let mut workers: HashMap<(QueueKey, u32), mpsc::UnboundedSender<ConsumedMessage>> =
            HashMap::new();
        while self.inner.running.load(Ordering::Acquire) {
            for m in self.poll(256, StdDuration::from_millis(200)).await {
                let tx = workers.entry((m.key, m.lease)).or_insert_with(|| {
                    let (tx, rx) = mpsc::unbounded_channel();
                    let worker = self
                        .clone()
                        .queue_worker(m.key, m.lease, rx, handler.clone());
                    tokio::spawn(worker);
                    tx
                });
                let _ = tx.send(m);
            }
            workers.retain(|_, tx| !tx.is_closed());
        }
    }

    /// Orderly: the messages of one queue, one batch at a time and only while this consumer
    /// holds the queue's lock; a failed batch again after `suspend_current_queue_time`, past
    /// `max_reconsume_times` sent to the retry topic and skipped. Ends when the queue moves.
    async fn queue_worker<F, Fut, R>(
        self,
        queue: QueueKey,
        lease: u32,
        mut rx: mpsc::UnboundedReceiver<ConsumedMessage>,
        handler: Arc<F>,
    ) where
        F: Fn(Vec<ConsumedMessage>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: HandlerResult,
    {
        let cfg = &self.inner.cfg;
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while batch.len() < cfg.consume_batch_size.max(1) {
                let Ok(m) = rx.try_recv() else { break };
                batch.push(m);
            }
            while !batch.is_empty() {
                loop {
                    let now = clock::now();
                    let turn = |cl: &mut crate::driver::Core<Machine>| {
                        let c = cl.consumer_mut().0;
                        (c.is_current(queue, lease), c.begin(now, queue, lease))
                    };
                    let locked = Wait::Locked(queue, lease);
                    let wait = |r: &(bool, bool)| *r == (true, false);
                    let driver = &self.inner.driver;
                    match driver.wait_if(locked, LOCK_WAIT, turn, wait).await.0 {
                        (_, true) => break,
                        (true, false) => {}
                        (false, false) => return,
                    }
                }
                let call = self.inner.calls.enter();
                let (done, _) = self.call(&handler, &batch, None).await;
                self.ack_all(&batch[..done]);
                batch.drain(..done);
                let mut kept = Vec::new();
                for mut m in std::mem::take(&mut batch) {
                    // Past the limit: to the retry topic (then the dead-letter queue), skipped
                    // (the core acknowledges it once stored).
                    if orderly_skips(m.reconsume_times, cfg.max_reconsumes()) {
                        let resent = self.inner.driver.nack(&self.wired(&m), None).map_err(drop);
                        if let Ok(rx) = resent
                            && nacked(rx.await) == Nacked::Resent
                        {
                            continue;
                        }
                    }
                    m.reconsume_times = m.reconsume_times.saturating_add(1);
                    kept.push(m);
                }
                batch = kept;
                self.with(false, |c, _| c.end(queue, lease));
                drop(call);
                if !batch.is_empty() {
                    tokio::time::sleep(cfg.suspend_current_queue_time).await;
                }
            }
        }
    }
}
