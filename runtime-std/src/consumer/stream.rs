//! [`Consumer::stream`]: the consumer as a [`futures_core::Stream`] of messages.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration as StdDuration;

use futures_core::Stream;

use super::{ConsumedMessage, Consumer};
use crate::sync::Ordering;

/// Messages per poll of the channel behind a [`MessageStream`].
const BATCH: usize = 64;

type Polling = Pin<Box<dyn Future<Output = Vec<ConsumedMessage>> + Send>>;

/// The messages of a [`Consumer`] as a [`Stream`] (from [`Consumer::stream`]). It ends after
/// [`Consumer::shutdown`].
///
/// Each message must be acknowledged ([`Consumer::ack`], or [`MessageStream::consumer`]'s) or
/// nacked, as with [`Consumer::poll`]: an unacknowledged message holds its queue's committed
/// offset back. Dropping the stream loses nothing: messages it had fetched and not yet
/// yielded go back to the consumer, for the next [`Consumer::poll`] or stream. For orderly
/// consumption use [`Consumer::run`].
pub struct MessageStream {
    consumer: Consumer,
    fetched: VecDeque<ConsumedMessage>,
    polling: Option<Polling>,
}

impl Consumer {
    /// The consumer's messages as a [`Stream`] (`futures::StreamExt::next` yields them one
    /// at a time, in the order they were pulled). Cancellation safe: a `next()` dropped
    /// before it yields loses no message.
    ///
    /// ```no_run
    /// # async fn f(consumer: rmq_std::consumer::Consumer) {
    /// use std::future::poll_fn;
    /// use std::pin::pin;
    /// use futures_core::Stream;
    /// let mut messages = pin!(consumer.stream());
    /// while let Some(m) = poll_fn(|cx| messages.as_mut().poll_next(cx)).await {
    ///     println!("{} {:?}", m.queue_offset, m.body);
    ///     consumer.ack(&m);
    /// }
    /// # }
    /// ```
    pub fn stream(&self) -> MessageStream {
        MessageStream {
            consumer: self.clone(),
            fetched: VecDeque::new(),
            polling: None,
        }
    }
}

impl MessageStream {
    /// The consumer the messages come from (to acknowledge them).
    pub fn consumer(&self) -> &Consumer {
        &self.consumer
    }
}

impl Stream for MessageStream {
    type Item = ConsumedMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ConsumedMessage>> {
        let this = self.get_mut();
        loop {
            if let Some(m) = this.fetched.pop_front() {
                return Poll::Ready(Some(m));
            }
            if !this.consumer.inner.running.load(Ordering::Acquire) {
                return Poll::Ready(None);
            }
            let polling = this.polling.get_or_insert_with(|| {
                let c = this.consumer.clone();
                // A short wait, so that a shutdown ends the stream soon.
                Box::pin(async move { c.poll(BATCH, StdDuration::from_millis(200)).await })
            });
            let batch = std::task::ready!(polling.as_mut().poll(cx));
            this.polling = None;
            this.fetched.extend(batch);
        }
    }
}

impl Drop for MessageStream {
    fn drop(&mut self) {
        for m in self.fetched.drain(..) {
            let _ = self.consumer.inner.requeue.send(m);
        }
    }
}
