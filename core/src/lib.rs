//! # rmq-core
//!
//! The protocol and strategy core of **rmq**, a client for Apache RocketMQ's TCP "remoting"
//! protocol. It is `#![no_std]`, uses no allocator and no `unsafe`, and is *sans-IO*: bytes and
//! the current time go in, bytes, deadlines and events come out. It never reads a clock, opens a
//! socket, sleeps or locks; the runtimes (`rmq-std` on tokio, `rmq-smoltcp` on smoltcp) do that.
//!
//! ## Layers
//!
//! - [`time`]: our own monotonic [`time::Instant`] and [`time::Duration`] (milliseconds).
//! - [`wire`]: the remoting frame (length word, serialize-type word, header, body), the JSON and
//!   ROCKETMQ binary headers, request/response/language codes, and the typed custom headers.
//!   Decoding borrows from the input; encoding writes into a caller buffer sized by
//!   `buffer_len()`.
//! - [`json`]: an allocation-free, fastjson-tolerant JSON tokenizer used by the header and route
//!   decoders.
//! - [`message`]: message properties, UNIQ_KEY, offsetMsgId, sysFlag, batch bodies, stored
//!   message (PULL body) decoding and client-side validation.
//! - [`route`]: TopicRouteData parsing and the producer's publish-queue list.
//! - [`acl`]: ACL 1.0 request signing (HMAC-SHA1), streamed without allocating.
//! - [`deadline`]: the deadline heap behind the session's request timeouts and route waits.
//! - [`fault`], [`select`], [`retry`]: latency fault tolerance, queue selection and the send
//!   retry plan (Java 4.9 and 5.x profiles plus our `Adaptive` profile); [`counter`]: the
//!   round-robin queue counter they share.
//! - [`transport`]: the failures below the protocol that runtimes report
//!   ([`transport::TransportError`]).
//! - [`producer`]: runtime-neutral producer pieces shared by both runtimes: the send request
//!   and response mapping, compression flags, heartbeat body, client id, NameServer cursor and
//!   reconnect back-off.
//! - [`consumer`]: pull requests and results, tag expressions, Java's queue allocation, flow
//!   control and per-queue offset tracking.
//! - [`admin`]: answers to the requests brokers forward from operators' tools (running info,
//!   codes not served).
//! - [`ops`]: what operators' tools ask NameServers and brokers (cluster, topics, a group's
//!   progress, offset resets) and how the answers' bodies read.
//! - [`lock`]: orderly consumption's queue locks (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).
//! - [`send_back`]: retries and dead letters: CONSUMER_SEND_MSG_BACK, the `%RETRY%` fallback
//!   message and its properties.
//! - [`session`]: the client session that ties the pieces together, one per client instance
//!   (Java's `MQClientInstance`): NameServer failover, topic routes with the TBW102 fallback,
//!   the broker table, request correlation with deadlines, sends on the retry plan, heartbeats
//!   and ACL signing. Runtimes drive it with `handle_*` (frames, closed connections, time)
//!   and `poll_*` (transmits, events, the next deadline); `rmq-std` and `rmq-smoltcp` are
//!   such drivers.
//!
//! ## Invariants
//!
//! - No input makes any function panic; malformed input yields a typed, `Copy` error.
//! - Every capacity is a const generic or a caller-owned buffer; "full" is reported, never
//!   silently truncated.
//! - Time only moves forward; callers pass `now` on every call that needs it.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::std_instead_of_core, clippy::alloc_instead_of_core)]

// Lets shared test fixtures (`tests/common`) name this crate the way integration tests do.
#[cfg(test)]
extern crate self as rmq_core;

pub mod acl;
pub mod admin;
pub mod autobatch;
pub mod client;
pub mod consumer;
pub mod counter;
pub mod deadline;
pub mod discovery;
pub mod fault;
pub mod gateway;
pub mod json;
pub mod link;
pub mod lock;
mod md5;
pub mod message;
pub mod metrics;
pub mod namespace;
pub mod ops;
pub mod outbox;
pub mod pop;
pub mod producer;
pub mod pull_consumer;
pub mod recall;
pub mod reply;
pub mod retry;
pub mod route;
pub mod select;
pub mod send_back;
pub mod session;
pub mod store;
pub mod time;
pub mod trace;
pub mod transaction;
pub mod transport;
pub mod wire;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
