//! # rmq-std
//!
//! The tokio runtime of rmq: it moves bytes between sockets and [`rmq_core`], owns timers and
//! shares state. Every protocol decision (headers, codes, queue choice, retries, deadlines) is
//! made in the core; this crate only drives it.
//!
//! ## Shape
//!
//! - [`Producer`] (built with [`ProducerBuilder`]): a thin front end on the core client
//!   session ([`rmq_core::session`]). It builds the message (properties and validation by the
//!   core, zlib, batch bodies) and hands it to the session, which owns routes (NameServer
//!   failover, refresh every `poll_name_server_interval`, the TBW102 template route for topics
//!   that do not exist yet), queue choice and retries within one total deadline, heartbeats,
//!   ACL signing and the fault table.
//! - [`transaction::TransactionProducer`] (built with
//!   [`ProducerBuilder::start_transactional`]): half messages, the application's local
//!   transaction and its checker for the broker's check-backs.
//! - `driver`: drives the session over tokio: one task runs its timers and writes what it
//!   wants written; each connection's task hands the frames it reads to the session; the
//!   session's events complete the callers' futures.
//! - [`consumer::Consumer`] (built with [`consumer::ConsumerBuilder`]): the clustering-mode
//!   long-polling pull consumer (rebalance, one pull loop per queue, acks, offset commits),
//!   with the same `.tls(TlsConfig)` and `.acl(access_key, secret_key, security_token)` as
//!   the producer. It drives its own core session through the same driver (`client`): routes
//!   and their subscribe queues, NameServer failover, the broker table, heartbeats with its
//!   subscriptions, unregistering and ACL signing are the session's; its pulls and offset
//!   requests are session calls (correlated and timed out by the session).
//! - `conn`: one TCP (or TLS) connection per peer, owned by one task: a frame pipe that hands
//!   every frame it reads to the session; a lost connection fails everything in flight on it
//!   at once.
//! - `shared`: counters, built from the primitives of `sync` (std; loom in the `rmq-loom`
//!   models, which compile these two files under `--cfg loom`).
//!
//! ## CPU per message and the tokio runtime
//!
//! A client is one connection's work per broker, mostly waiting. On tokio's multi-thread
//! runtime its tasks move between workers, which park and wake each other: in the async 1 KiB,
//! 64-in-flight cell that costs about 1.3-1.4x the CPU per message of a current-thread
//! runtime (issue 40, `docs/bench-log/producer.md`). Where CPU matters more than sharing the
//! application's workers, run the clients on a current-thread runtime of their own:
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! std::thread::spawn(move || rt.block_on(async {
//!     let producer = rmq_std::Producer::builder()
//!         .producer_group("my_group")
//!         .namesrv_addr("127.0.0.1:9876")
//!         .start()
//!         .await
//!         .expect("started");
//!     // ... sends; other threads reach this one through channels ...
//!     producer.shutdown().await;
//! }));
//! # Ok(())
//! # }
//! ```
//!
//! ## Deliberate differences from the Java client
//!
//! - `send_latency_fault_enable` defaults to **on** with the Adaptive policy (Java: off), with
//!   a per-attempt cap of at least 1 s ([`RUNTIME_ADAPTIVE`]); the core's tighter default cap
//!   turns bursts behind a cold broker into duplicate sends.
//! - The language sent is RUST (12, known to brokers from 4.9.4); set JAVA for older ones.
//! - A lost connection fails every request in flight on it at once (Java 4.9 waits for the
//!   timeouts on a peer FIN); late and unknown responses are counted.
//! - One total deadline also bounds async retries; async retries re-select a queue (Java keeps
//!   the old queue id and broker name); a failed oneway write is reported.
//! - A failed send triggers a background route refresh of its topic (at most one per second).
//! - UNIQ_KEY timestamps use UTC month starts (the broker never interprets them).
//!
//! ## Cancellation
//!
//! What dropping each async method's future before it completes (a `select!` whose other
//! branch won, a `timeout`) does. Nothing is lost in any case; at worst a message is delivered
//! again.
//!
//! | Method | Dropped before it completes |
//! | --- | --- |
//! | [`ProducerBuilder::start`], [`consumer::ConsumerBuilder::start`] | the client is dropped; its tasks end |
//! | [`Producer::send`], [`send_to_queue`](Producer::send_to_queue), [`send_ordered`](Producer::send_ordered), [`send_sharded`](Producer::send_sharded), [`send_batch`](Producer::send_batch), [`send_oneway`](Producer::send_oneway) | a send not yet handed to the session (waiting for a route or a request slot) is withdrawn; one handed to the session goes on (it may be stored), only its result is lost. An auto-batched message leaves with its batch |
//! | [`Producer::request`] | as a send; once the request is stored, its reply is dropped when it comes |
//! | [`Producer::route`] | the lookup goes on; its route serves later sends |
//! | [`Producer::shutdown`], [`consumer::Consumer::shutdown`] | new sends / pulls are already refused; what the shutdown had not done yet (the drain, the consumer's last commit, unregistering) is skipped: uncommitted messages are delivered again |
//! | [`consumer::Consumer::poll`], the [`consumer::MessageStream`] | cancellation safe: no message is taken before the future completes |
//! | [`consumer::Consumer::run`] | no new message is taken; the handler calls in progress run to their end and settle their messages |
//! | [`consumer::Consumer::nack`] | the send-back goes on; only its outcome is lost |
//! | [`consumer::Consumer::commit_all`], [`rebalance`](consumer::Consumer::rebalance), [`assign`](consumer::Consumer::assign) | the commits / the round go on; only the wait for them ends |
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use rmq_std::{Message, Producer};
//! let producer = Producer::builder()
//!     .namesrv_addr("127.0.0.1:9876")
//!     .producer_group("pg-demo")
//!     .start()
//!     .await?;
//! let r = producer.send(Message::new("TopicA", "hello").with_tags("TagA")).await?;
//! println!("stored as {} in {:?} at offset {}", r.msg_id, r.queue, r.queue_offset);
//! let pending = producer.send_async(Message::new("TopicA", "async"));
//! tokio::spawn(pending);
//! producer.shutdown().await;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod batcher;
mod client;
mod clock;
mod config;
mod conn;
pub mod consumer;
mod discovery;
mod driver;
mod heap;
mod inflight;
mod message;
pub mod metrics;
mod producer;
mod shared;
mod sync;
#[cfg(feature = "tls")]
mod tls;
mod trace;
pub mod transaction;
mod zlib;

pub use batcher::AutoBatch;
pub use config::{
    AclConfig, ConfigError, FaultProfile, ProducerBuilder, ProducerConfig, RUNTIME_ADAPTIVE,
    SecurityConfig,
};
/// Connection diagnostics for tests (memory bounds); not part of the API.
#[doc(hidden)]
pub use conn::{ConnStats, MAX_RX_FRAME};
pub use conn::{request_frame, request_once};
pub use discovery::{DiscoveryError, NamesrvDomain, fetch_name_servers};
pub use driver::{Health, Refusal};
pub use message::{ConnectionError, Message, MessageQueue, SendError, SendErrorKind, SendResult};
pub use producer::{Producer, RouteInfo};
pub use rmq_core as core;
pub use rmq_core::message::CompressionType;
pub use rmq_core::{retry::SendStatus, transport::TransportError};
pub use shared::CountersSnapshot;
#[cfg(feature = "tls")]
pub use tls::{TlsConfig, TlsError};

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
