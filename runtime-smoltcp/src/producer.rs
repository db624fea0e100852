//! The producer: the core [`Session`] driven over the connections of [`crate::net`].
//!
//! Every protocol decision (NameServer choice, route and TBW102 fallback, queue selection,
//! retries, request correlation, message properties) is the core's. This file encodes the
//! message into the caller's buffer, hands it to the session and reports how it ended.

use heapless::String;
use rmq_core::message::UniqKeyGenerator;
use rmq_core::message::validate::DEFAULT_MAX_MESSAGE_SIZE;
use rmq_core::message::{EncodeProperties, PropertiesEncoder, keys};
use rmq_core::producer::{
    MessageError, MessageFields, encode_batch_record, encode_message_properties,
};
use rmq_core::retry::{SendMode, TransportError};
use rmq_core::session::{self, Event, Features, Outbound, SendArgs, Session, TopicId};
use rmq_core::time::{Instant, WallClock};
use rmq_core::wire::SerializeType;
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::phy::Device;

use crate::net::{Net, NetConfig, Stats, smol};
use crate::{Buffers, Completion, Config, Message, SendId, SendReceipt, SubmitError};
/// A refused message's error.
fn refused(e: MessageError) -> SubmitError {
    match e {
        MessageError::BufferTooSmall => SubmitError::TooLarge,
        MessageError::Invalid(v) => SubmitError::Invalid(v),
    }
}

/// Requests queued or in flight: a route lookup and the one send (plus slack).
const REQUESTS: usize = 4;

/// What a gateway compiles in: JSON headers (what every broker answers; the
/// `rocketmq-headers` feature writes the binary ROCKETMQ header instead), no heartbeats (a
/// producer without transactions needs none, and they cost cellular traffic), no broker
/// remarks ([`SendFailure`] carries the code). Flash is what this saves (BENCHMARKS.md).
#[derive(Clone, Copy, Debug)]
struct Gateway;

impl Features for Gateway {
    const ROCKETMQ_HEADERS: bool = cfg!(feature = "rocketmq-headers");
    const HEARTBEATS: bool = false;
    const BROKER_REMARKS: bool = false;
    const CONSUMER: bool = false;
}

/// The session of a gateway producer: one topic, one send at a time.
type Core<const B: usize, const Q: usize, const S: usize> =
    Session<1, B, Q, REQUESTS, 1, S, Gateway>;

/// Lends the session the properties of the one message in the message buffer.
struct Props<'m>(&'m str);

impl Outbound for Props<'_> {
    fn properties(&self, _: session::SendId) -> &str {
        self.0
    }
}

/// The message in the message buffer while its send runs.
#[derive(Debug)]
struct Job {
    props_len: usize,
    uniq: String<32>,
    /// Messages in the request (a batch's records, or 1).
    messages: u16,
}

/// A heap-free RocketMQ producer over smoltcp.
///
/// - `BROKERS`: broker connections (one socket each) and route capacity;
/// - `QUEUES`: publish queues kept from the route;
/// - `ROUTE_STR`: bytes for the names and addresses of a parsed route.
///
/// ```ignore
/// let mut p: Producer<'_, '_, 2, 16, 256> = Producer::new(cfg, bufs, ns_handle, [b0, b1])?;
/// let id = p.send(now, &Message { body: b"21.5C", ..Default::default() })?;
/// loop {
///     let next = p.poll(now(), &mut iface, &mut device, &mut sockets);
///     if let Some(c) = p.take_completion() { /* c.id == id */ }
///     wait_until(next);
/// }
/// ```
#[derive(Debug)]
pub struct Producer<'a, 'b, const BROKERS: usize, const QUEUES: usize, const ROUTE_STR: usize> {
    cfg: Config<'a>,
    net: Net<'a, 'b, BROKERS>,
    msg: &'b mut [u8],
    core: Core<BROKERS, QUEUES, ROUTE_STR>,
    topic: Option<TopicId>,
    job: Option<Job>,
    done: Option<Completion>,
    uniq: UniqKeyGenerator,
    clock: WallClock,
}

impl<'a, 'b, const BROKERS: usize, const QUEUES: usize, const ROUTE_STR: usize>
    Producer<'a, 'b, BROKERS, QUEUES, ROUTE_STR>
{
    /// A producer using the NameServer socket `ns` and one socket per broker, all already in
    /// the caller's [`SocketSet`] (any buffer sizes; see the crate docs for the receive side).
    ///
    /// # Errors
    /// [`session::ConfigError`]: no NameServer (or more than 255), or a producer group longer
    /// than Java allows.
    pub fn new(
        cfg: Config<'a>,
        bufs: Buffers<'b>,
        ns: SocketHandle,
        brokers: [SocketHandle; BROKERS],
    ) -> Result<Self, session::ConfigError> {
        let seed = if cfg.seed == 0 { 0x9E37_79B9 } else { cfg.seed };
        let mut sc = session::Config::new(cfg.namesrvs.len(), cfg.producer_group, "");
        sc.version = cfg.version;
        sc.fault_rule = cfg.retry.profile.update_rule();
        sc.route_refresh = cfg.route_refresh;
        sc.request_timeout = cfg.route_timeout;
        sc.route_retry = cfg.route_retry;
        // A producer without transactions needs no heartbeat; a gateway saves the traffic.
        sc.heartbeat = None;
        sc.seed = seed;
        // JSON (0), or ROCKETMQ (1) with the feature.
        sc.serialize_type = SerializeType(u8::from(Gateway::ROCKETMQ_HEADERS));
        let ip = ::core::net::IpAddr::V4(::core::net::Ipv4Addr::from(cfg.client_ip));
        let net = NetConfig {
            namesrvs: cfg.namesrvs,
            connect_timeout: cfg.connect_timeout,
            write_stall_timeout: cfg.write_stall_timeout,
            local_port_base: cfg.local_port_base,
        };
        Ok(Producer {
            core: Session::new(&sc, Instant::ZERO)?,
            cfg,
            net: Net::new(net, bufs.tx, bufs.rx, ns, brokers, seed),
            msg: bufs.message,
            topic: None,
            job: None,
            done: None,
            uniq: UniqKeyGenerator::new(ip, seed >> 16, seed),
            clock: WallClock::default(),
        })
    }

    /// Tells the producer that `now` is `unix_millis` wall-clock time (for `bornTimestamp` and
    /// UNIQ_KEY); without it the monotonic milliseconds are used.
    pub fn set_unix_time(&mut self, now: Instant, unix_millis: i64) {
        self.clock.set(now, unix_millis);
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        let s = self.core.stats();
        Stats {
            stale_responses: s.late_responses,
            route_updates: s.route_updates,
            attempts: s.attempts,
            ..self.net.stats
        }
    }

    /// Whether a route with at least one writable queue is known.
    pub fn has_route(&self) -> bool {
        self.topic
            .is_some_and(|t| !self.core.publish_queues(t).is_empty())
    }

    /// Whether [`Producer::send`] would accept a message now.
    pub fn can_send(&self) -> bool {
        // The message buffer is free once its send ended and no frame reads from it.
        self.job.is_none() && self.done.is_none() && !self.net.writing_body()
    }

    /// The end of the last send, once.
    pub fn take_completion(&mut self) -> Option<Completion> {
        self.done.take()
    }

    /// Publishes `msg` and waits for the broker's answer (retries per [`Config::retry`]).
    /// The result comes from [`Producer::take_completion`].
    ///
    /// # Errors
    /// [`SubmitError`]: busy, too large, invalid message (the core's checks, as in rmq-std).
    pub fn send(&mut self, now: Instant, msg: &Message<'_>) -> Result<SendId, SubmitError> {
        self.single(now, msg, SendMode::Sync)
    }

    /// Publishes `msg` without asking for an answer: complete once the frame is written
    /// (reported through [`Producer::take_completion`] with no offset or offsetMsgId).
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub fn send_oneway(&mut self, now: Instant, msg: &Message<'_>) -> Result<SendId, SubmitError> {
        self.single(now, msg, SendMode::Oneway)
    }

    fn topic_id(&mut self, now: Instant) -> Result<TopicId, SubmitError> {
        if let Some(t) = self.topic {
            return Ok(t);
        }
        let t = self
            .core
            .topic(now, self.cfg.topic)
            .map_err(SubmitError::Session)?;
        self.topic = Some(t);
        Ok(t)
    }

    /// Publishes `msgs` as one SEND_BATCH_MESSAGE request (all stored in one queue, in order,
    /// or none): one round trip for all of them, which is what a long-RTT link needs. The
    /// completion's [`SendReceipt`] describes the first message; message `i` has queue offset
    /// `queue_offset + i` and msgId [`SendReceipt::msg_id_of`]`(i)`. Each message is checked
    /// as by [`Producer::send`]; the records (body, properties) must fit
    /// [`Buffers::message`] together.
    ///
    /// # Errors
    /// As [`Producer::send`]; [`SubmitError::EmptyBatch`] for no message.
    pub fn send_batch(
        &mut self,
        now: Instant,
        msgs: &[Message<'_>],
    ) -> Result<SendId, SubmitError> {
        if !self.can_send() {
            return Err(SubmitError::Busy);
        }
        let count = u16::try_from(msgs.len()).map_err(|_| SubmitError::TooLarge)?;
        if count == 0 {
            return Err(SubmitError::EmptyBatch);
        }
        let born = self.clock.unix_millis(now);
        // The request's own properties: WAIT only (Java's MessageBatch).
        let wait = PropertiesEncoder::new([(keys::WAIT_STORE_MSG_OK, "true")]);
        let props_len = wait.encode(self.msg).map_err(|_| SubmitError::TooLarge)?;
        let (mut end, mut first) = (props_len, String::new());
        for m in msgs {
            let hex = self.uniq.next_id_at(born, 0).to_hex();
            if first.is_empty() {
                let _ = first.push_str(hex.as_str());
            }
            let rest = self.msg.get_mut(end..).ok_or(SubmitError::TooLarge)?;
            let fields = MessageFields::new(m.tags, m.keys);
            end += encode_batch_record(
                self.cfg.topic,
                m.body,
                DEFAULT_MAX_MESSAGE_SIZE,
                &fields,
                Some(hex.as_str()),
                m.flag,
                rest,
            )
            .map_err(refused)?;
        }
        let job = Job {
            props_len,
            uniq: first,
            messages: count,
        };
        self.submit(now, job, end - props_len, 0, SendMode::Sync, true)
    }

    fn single(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        mode: SendMode,
    ) -> Result<SendId, SubmitError> {
        if !self.can_send() {
            return Err(SubmitError::Busy);
        }
        let born = self.clock.unix_millis(now);
        let hex = self.uniq.next_id_at(born, 0).to_hex();
        let fields = MessageFields::new(msg.tags, msg.keys);
        let props_len = encode_message_properties(
            self.cfg.topic,
            msg.body,
            DEFAULT_MAX_MESSAGE_SIZE,
            &fields,
            Some(hex.as_str()),
            self.msg,
        )
        .map_err(refused)?;
        let end = props_len
            .checked_add(msg.body.len())
            .ok_or(SubmitError::TooLarge)?;
        self.msg
            .get_mut(props_len..end)
            .ok_or(SubmitError::TooLarge)?
            .copy_from_slice(msg.body);
        let mut uniq = String::new();
        let _ = uniq.push_str(hex.as_str());
        let job = Job {
            props_len,
            uniq,
            messages: 1,
        };
        self.submit(now, job, msg.body.len(), msg.flag, mode, false)
    }

    /// Hands the encoded request (properties and body in the message buffer) to the session.
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        now: Instant,
        job: Job,
        body_len: usize,
        flag: i32,
        mode: SendMode,
        batch: bool,
    ) -> Result<SendId, SubmitError> {
        let topic = self.topic_id(now)?;
        let mut retry = self.cfg.retry;
        retry.mode = mode;
        let mut args = SendArgs::new(retry, body_len, self.clock.unix_millis(now));
        args.flag = flag;
        args.batch = batch;
        let id = self
            .core
            .send(now, topic, &args)
            .map_err(SubmitError::Session)?;
        debug!("send {=u32} queued ({=usize} body bytes)", id.0, body_len);
        self.job = Some(job);
        Ok(SendId(id.0))
    }

    /// Does bounded work: polls the interface, hands complete frames and connection events
    /// to the session, writes (or resumes) the current frame and stages the next, polls the
    /// interface again. Returns the latest instant at which to call it again (sooner if
    /// packets arrive); `now` itself when more work is ready.
    pub fn poll<D: Device + ?Sized>(
        &mut self,
        now: Instant,
        iface: &mut Interface,
        device: &mut D,
        sockets: &mut SocketSet<'_>,
    ) -> Option<Instant> {
        let ts = smol(now);
        iface.poll(ts, device, sockets);
        // The topic is registered (and its route looked up) at the first poll.
        let _ = self.topic_id(now);
        let mut again = self
            .net
            .read(now, sockets, &mut self.core, &mut |c, peer, f| {
                c.handle_frame(now, peer, f).is_ok()
            });
        self.net.check_conns(now, sockets, &mut self.core);
        self.core.handle_timeout(now);
        self.events(now, sockets);
        // A frame written to completion lets the next one be staged at once.
        for _ in 0..2 {
            let props_len = self.job.as_ref().map_or(0, |j| j.props_len);
            let (props, body) = self.msg.split_at(props_len.min(self.msg.len()));
            let props = core::str::from_utf8(props).unwrap_or("");
            self.net
                .stage(now, iface, sockets, &mut self.core, |c, tx| {
                    c.poll_transmit(now, tx, &Props(props))
                });
            self.net.write(now, sockets, &mut self.core, body);
            self.events(now, sockets);
        }
        iface.poll(ts, device, sockets);
        again |= !self.net.writing() && self.core.has_transmit();
        if again {
            return Some(now);
        }
        self.net.next_deadline(now, iface, sockets, &self.core)
    }

    /// Forwards the session's events: completions, and brokers that moved.
    fn events(&mut self, now: Instant, sockets: &mut SocketSet<'_>) {
        while let Some(e) = self.core.poll_event() {
            match e {
                Event::SendDone { id, result } => {
                    let Some(job) = self.job.take() else {
                        continue;
                    };
                    let result = match result {
                        Ok(r) => {
                            let mut broker = String::new();
                            let _ = broker.push_str(self.core.broker_name(r.broker).unwrap_or(""));
                            Ok(SendReceipt {
                                status: r.status,
                                broker,
                                queue_id: r.queue_id,
                                queue_offset: r.queue_offset,
                                offset_msg_id: r.offset_msg_id,
                                msg_id: job.uniq,
                                messages: job.messages,
                                attempts: r.attempts,
                            })
                        }
                        Err(f) => Err(f),
                    };
                    debug!("send {=u32} done, ok={=bool}", id.0, result.is_ok());
                    self.done = Some(Completion {
                        id: SendId(id.0),
                        result,
                    });
                }
                // Reopened at the next frame for it (the NameServer socket only if it still
                // talks to that NameServer).
                Event::Reconnect(peer) if self.net.serves(peer) => {
                    let err = TransportError::ConnectionClosed;
                    self.net.fail_conn(now, sockets, &mut self.core, peer, err);
                }
                _ => {}
            }
        }
    }
}
