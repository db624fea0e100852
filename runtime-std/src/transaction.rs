//! Transactional messages, in the Java `TransactionMQProducer`'s spirit: a half message, the
//! application's local transaction, and the broker's check-back answered by a
//! [`TransactionChecker`]. What is sent and when is the core's ([`rmq_core::transaction`]);
//! this module runs the application's code and hands its outcomes back.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use rmq_std::consumer::ConsumedMessage;
//! use rmq_std::transaction::LocalState;
//! use rmq_std::{Message, Producer};
//!
//! // Asked by the broker about a half message whose outcome it does not know (the process
//! // that sent it answered "unknown", or died before answering).
//! let checker = |m: &ConsumedMessage| match m.keys() {
//!     Some(order) if order_was_saved(order) => LocalState::Commit,
//!     _ => LocalState::Rollback,
//! };
//! let producer = Producer::builder()
//!     .namesrv_addr("127.0.0.1:9876")
//!     .producer_group("pg-orders")
//!     .start_transactional(checker)
//!     .await?;
//! let r = producer
//!     .send(Message::new("Orders", "order-1").with_keys(["order-1"]), |sent| async move {
//!         // The half message is stored (not delivered yet): run the local transaction.
//!         println!("half message {}", sent.msg_id);
//!         if save_order("order-1").await { LocalState::Commit } else { LocalState::Rollback }
//!     })
//!     .await?;
//! assert_eq!(r.state, LocalState::Commit);
//! producer.shutdown().await;
//! # Ok(()) }
//! # fn order_was_saved(_: &str) -> bool { true }
//! # async fn save_order(_: &str) -> bool { true }
//! ```

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use rmq_core::session::Peer;
use rmq_core::transaction::{EndTransaction, TransactionCheck};
use tokio::sync::mpsc;
use tracing::warn;

use crate::consumer::ConsumedMessage;
use crate::{Message, MessageQueue, Producer, SendError, SendResult, SendStatus};

pub use rmq_core::transaction::LocalState;

/// Answers the broker's check-back of a half message (Java `checkLocalTransaction`): the
/// message as stored (its topic, keys, properties, body, `msg_id`). It runs on a blocking
/// thread; a panic answers [`LocalState::Unknown`] (the broker asks again later).
pub trait TransactionChecker: Send + Sync + 'static {
    /// The outcome of the local transaction of `msg`.
    fn check(&self, msg: &ConsumedMessage) -> LocalState;
}

impl<F: Fn(&ConsumedMessage) -> LocalState + Send + Sync + 'static> TransactionChecker for F {
    fn check(&self, msg: &ConsumedMessage) -> LocalState {
        self(msg)
    }
}

/// What [`TransactionProducer::send`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransactionSendResult {
    /// The half message's send.
    pub send: SendResult,
    /// The outcome sent to the broker in END_TRANSACTION (a store status other than
    /// `SendOk` rolls back without running the local transaction, as Java does).
    pub state: LocalState,
    /// Whether END_TRANSACTION was written (`false`: the broker settles the message through
    /// its check-back).
    pub ended: bool,
}

/// A producer of transactional messages (built with
/// [`crate::ProducerBuilder::start_transactional`]); its [`Producer`] sends plain messages
/// too. Cheap to clone.
#[derive(Clone)]
pub struct TransactionProducer {
    producer: Producer,
    _checks: Arc<AbortOnDrop>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl TransactionProducer {
    pub(crate) fn new(producer: Producer, checker: impl TransactionChecker) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        producer.driver().on_checks(tx);
        let task = tokio::spawn(answer_checks(producer.clone(), Arc::new(checker), rx));
        TransactionProducer {
            producer,
            _checks: Arc::new(AbortOnDrop(task)),
        }
    }

    /// The plain producer (same group and connections).
    pub fn producer(&self) -> &Producer {
        &self.producer
    }

    /// Sends `msg` as a half message (stored, not delivered; a delay level is dropped, as
    /// Java does; a timer is refused), runs `local` with its result, and ends the transaction with the outcome:
    /// [`LocalState::Commit`] delivers it, [`LocalState::Rollback`] discards it,
    /// [`LocalState::Unknown`] leaves it to the check-back. A panic in `local` is
    /// answered as unknown and then resumed.
    ///
    /// # Errors
    /// The half message's [`SendError`] (`local` did not run).
    pub async fn send<F, Fut>(
        &self,
        msg: Message,
        local: F,
    ) -> Result<TransactionSendResult, SendError>
    where
        F: FnOnce(SendResult) -> Fut,
        Fut: Future<Output = LocalState>,
    {
        let topic = msg.topic.clone();
        let sent = self.producer.send_half(msg).await?;
        let (state, panic) = if sent.status == SendStatus::SendOk {
            match (CatchUnwind(Box::pin(local(sent.clone())))).await {
                Ok(s) => (s, None),
                Err(p) => (LocalState::Unknown, Some(p)),
            }
        } else {
            (LocalState::Rollback, None)
        };
        let remark = panic
            .is_some()
            .then_some("executeLocalTransactionBranch exception: the local transaction panicked");
        let ended = self.end(&topic, &sent, state, remark);
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
        Ok(TransactionSendResult {
            send: sent,
            state,
            ended,
        })
    }

    fn end(&self, topic: &str, sent: &SendResult, state: LocalState, remark: Option<&str>) -> bool {
        let d = self.producer.driver();
        let group = self.producer.wire_group();
        let topic = &*self.producer.wire(topic);
        let broker = &sent.queue.broker_name;
        let version = d.with(|s| s.find_broker(broker).map_or(0, |b| s.broker_version(b)));
        let end = EndTransaction::after_send(
            group,
            topic,
            broker,
            version,
            sent.queue_offset,
            &sent.offset_msg_id,
            &sent.msg_id,
            state,
            remark,
        );
        match end {
            Some(e) => d.end_transaction(None, &e),
            None => {
                warn!(
                    offset_msg_id = sent.offset_msg_id,
                    "no commit-log offset to end with"
                );
                false
            }
        }
    }

    /// Stops as [`Producer::shutdown`] does; check-backs are no longer answered.
    pub async fn shutdown(&self) {
        self.producer.shutdown().await;
    }
}

/// Answers every check-back with the checker's outcome.
async fn answer_checks(
    producer: Producer,
    checker: Arc<dyn TransactionChecker>,
    mut rx: mpsc::UnboundedReceiver<Check>,
) {
    while let Some(c) = rx.recv().await {
        let checker = checker.clone();
        // The checker sees the application's names ([`ProducerBuilder::namespace`]).
        let ns = producer.config().namespace.as_deref();
        let msg = crate::consumer::unwrapped(ns, c.message);
        let outcome = tokio::task::spawn_blocking(move || checker.check(&msg)).await;
        // As Java: a remark only when the checker failed (a panic here), not on "unknown".
        let (state, remark) = match outcome {
            Ok(s) => (s, None),
            Err(_) => (
                LocalState::Unknown,
                Some("checkLocalTransactionState Exception: panicked"),
            ),
        };
        // The check as the client handed it out (the frame is kept for this).
        if let Some(check) = rmq_core::transaction::check_request(&c.frame, producer.wire_group()) {
            let end = EndTransaction::answer(&check, state, remark);
            producer.driver().end_transaction(Some(c.peer), &end);
        }
    }
}

/// A future whose panic is returned instead of unwinding.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let f = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| f.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(p) => Poll::Ready(Err(p)),
        }
    }
}

/// A check-back handed to the checker's task: the half message, and the frame it came in
/// (its END_TRANSACTION is written from it).
pub(crate) struct Check {
    peer: Peer,
    message: ConsumedMessage,
    frame: Bytes,
}

impl Check {
    pub(crate) fn new(peer: Peer, frame: &Bytes, check: &TransactionCheck<'_>) -> Self {
        let m = &check.message;
        let queue = MessageQueue {
            topic: check.topic().to_owned(),
            broker_name: check.broker_name.unwrap_or_default().to_owned(),
            queue_id: m.queue_id,
        };
        Check {
            peer,
            message: crate::consumer::outside(frame, m, check.topic(), queue),
            frame: frame.clone(),
        }
    }
}
