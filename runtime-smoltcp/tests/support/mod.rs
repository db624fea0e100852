//! Deterministic test bed: an in-memory smoltcp device pair with scripted packet loss, the
//! gateway (our producer) on one end and a scripted NameServer + broker peer on the other.
//! Time is simulated (1 ms steps); nothing depends on the wall clock or on randomness.
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use core::net::{SocketAddr, SocketAddrV4};
use rmq_core::time::Instant;
use rmq_core::wire::headers::SendMessageRequestHeaderV2;
use rmq_core::wire::{CommandHeader, CommandRepr, Frame, ResponseCode, Scratch, SerializeType};
use rmq_smoltcp::{Buffers, Completion, Config, Message, Producer, SendId};
use smoltcp::iface::{Config as IfaceConfig, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;

use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, Ipv4Address};

pub const NS_PORT: u16 = 9876;
pub const BROKER_PORT: u16 = 10911;
pub const PEER_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
pub const GW_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);
pub const NAMESRVS: [SocketAddr; 1] = [SocketAddr::V4(SocketAddrV4::new(PEER_IP, NS_PORT))];

/// The wire between the two ends: one packet queue per direction, with scripted loss.
#[derive(Default)]
pub struct Wire {
    /// Packets waiting to be received by end 0 / end 1.
    queues: [VecDeque<Vec<u8>>; 2],
    /// Drop every n-th packet sent by end 0 / end 1.
    pub drop_every: [Option<u32>; 2],
    sent: [u32; 2],
    pub dropped: [u32; 2],
}

pub struct End {
    wire: Rc<RefCell<Wire>>,
    side: usize,
}

pub struct Rx(Vec<u8>);
pub struct Tx {
    wire: Rc<RefCell<Wire>>,
    from: usize,
}

impl RxToken for Rx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl TxToken for Tx {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = vec![0u8; len];
        let r = f(&mut buf);
        let mut w = self.wire.borrow_mut();
        w.sent[self.from] += 1;
        let n = w.sent[self.from];
        if w.drop_every[self.from].is_some_and(|k| n.is_multiple_of(k)) {
            w.dropped[self.from] += 1;
        } else {
            w.queues[1 - self.from].push_back(buf);
        }
        r
    }
}

impl Device for End {
    type RxToken<'a> = Rx;
    type TxToken<'a> = Tx;

    fn receive(
        &mut self,
        _t: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let p = self.wire.borrow_mut().queues[self.side].pop_front()?;
        Some((
            Rx(p),
            Tx {
                wire: self.wire.clone(),
                from: self.side,
            },
        ))
    }

    fn transmit(&mut self, _t: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        Some(Tx {
            wire: self.wire.clone(),
            from: self.side,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ip;
        c.max_transmission_unit = 1500;
        c
    }
}

fn iface(dev: &mut End, ip: Ipv4Address) -> Interface {
    let cfg = IfaceConfig::new(HardwareAddress::Ip);
    let mut iface = Interface::new(cfg, dev, smoltcp::time::Instant::ZERO);
    iface.update_ip_addrs(|a| {
        a.push(IpCidr::new(IpAddress::Ipv4(ip), 24)).unwrap();
    });
    iface
}

fn tcp_socket(rx: usize, tx: usize) -> tcp::Socket<'static> {
    tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0u8; rx]),
        tcp::SocketBuffer::new(vec![0u8; tx]),
    )
}

/// A message the scripted broker stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub body: Vec<u8>,
    pub queue_id: i32,
    pub properties: String,
    pub oneway: bool,
    pub broker_name: Option<String>,
}

struct PeerConn {
    handle: SocketHandle,
    port: u16,
    buf: Vec<u8>,
    /// (due ms, frame bytes)
    replies: VecDeque<(u64, Vec<u8>)>,
}

/// A scripted NameServer (port 9876) and broker `broker-a` (port 10911) on 10.0.0.1.
pub struct Peer {
    pub dev: End,
    pub iface: Interface,
    pub sockets: SocketSet<'static>,
    conns: Vec<PeerConn>,
    /// Whether the broker port accepts connections (false: connections are reset).
    pub broker_up: bool,
    /// Bytes read per socket per poll (a slow reader shrinks the window).
    pub read_limit: Option<usize>,
    /// Delay before each broker reply.
    pub reply_delay_ms: u64,
    /// 1-based send numbers at which the broker resets the connection instead of storing.
    pub reset_on_sends: Vec<u32>,
    /// 1-based send numbers answered with SYSTEM_ERROR (a retryable code).
    pub error_on_sends: Vec<u32>,
    /// Send requests seen (stored or not).
    pub sends_seen: u32,
    pub route_requests: u32,
    /// Answer TOPIC_NOT_EXIST for every topic but TBW102 (the topic is not created yet).
    pub unknown_topic: bool,
    /// Topics asked for, in order.
    pub route_topics: Vec<String>,
    pub stored: Vec<Stored>,
    /// Frames that did not parse: must stay 0 (framing never corrupted).
    pub framing_errors: u32,
    next_offset: i64,
}

impl Peer {
    fn new(wire: &Rc<RefCell<Wire>>) -> Self {
        let mut dev = End {
            wire: wire.clone(),
            side: 1,
        };
        let iface = iface(&mut dev, PEER_IP);
        let mut sockets = SocketSet::new(vec![]);
        let mut conns = Vec::new();
        for port in [NS_PORT, NS_PORT, BROKER_PORT, BROKER_PORT, BROKER_PORT] {
            let mut sock = tcp_socket(8192, 8192);
            sock.listen(port).unwrap();
            let handle = sockets.add(sock);
            conns.push(PeerConn {
                handle,
                port,
                buf: Vec::new(),
                replies: VecDeque::new(),
            });
        }
        Peer {
            dev,
            iface,
            sockets,
            conns,
            broker_up: true,
            read_limit: None,
            reply_delay_ms: 0,
            reset_on_sends: Vec::new(),
            error_on_sends: Vec::new(),
            sends_seen: 0,
            route_requests: 0,
            unknown_topic: false,
            route_topics: Vec::new(),
            stored: Vec::new(),
            framing_errors: 0,
            next_offset: 0,
        }
    }

    fn poll(&mut self, now: u64) {
        let ts = smoltcp::time::Instant::from_millis(now as i64);
        self.iface.poll(ts, &mut self.dev, &mut self.sockets);
        for i in 0..self.conns.len() {
            self.service(i, now);
        }
        self.iface.poll(ts, &mut self.dev, &mut self.sockets);
    }

    fn service(&mut self, i: usize, now: u64) {
        let (handle, port) = (self.conns[i].handle, self.conns[i].port);
        let enabled = port != BROKER_PORT || self.broker_up;
        let sock = self.sockets.get_mut::<tcp::Socket<'static>>(handle);
        if !enabled {
            if sock.is_open() {
                sock.abort();
            }
            self.conns[i].buf.clear();
            self.conns[i].replies.clear();
            return;
        }
        if !sock.is_open() || sock.state() == tcp::State::CloseWait {
            sock.abort();
            self.conns[i].buf.clear();
            self.conns[i].replies.clear();
            sock.listen(port).unwrap();
            return;
        }
        if sock.can_recv() {
            let limit = self.read_limit.unwrap_or(usize::MAX);
            let buf = &mut self.conns[i].buf;
            let _ = sock.recv(|d| {
                let n = d.len().min(limit);
                buf.extend_from_slice(&d[..n]);
                (n, ())
            });
        }
        while let Some(&(due, _)) = self.conns[i].replies.front() {
            if due > now {
                break;
            }
            let (_, frame) = self.conns[i].replies.pop_front().unwrap();
            let sock = self.sockets.get_mut::<tcp::Socket<'static>>(handle);
            assert_eq!(sock.send_slice(&frame), Ok(frame.len()), "peer tx full");
        }
        // Cut complete frames.
        loop {
            let buf = &self.conns[i].buf;
            if buf.len() < 8 {
                break;
            }
            let total = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if total > 1 << 20 {
                self.framing_errors += 1;
                self.conns[i].buf.clear();
                break;
            }
            if buf.len() < total + 4 {
                break;
            }
            let frame: Vec<u8> = self.conns[i].buf.drain(..total + 4).collect();
            if !self.handle_frame(i, now, &frame) {
                break;
            }
        }
    }

    /// Returns false when the connection was reset.
    fn handle_frame(&mut self, i: usize, now: u64, bytes: &[u8]) -> bool {
        let Ok(frame) = Frame::new_checked(bytes) else {
            self.framing_errors += 1;
            return true;
        };
        let Ok(h) = CommandHeader::parse(&frame) else {
            self.framing_errors += 1;
            return true;
        };
        let opaque = h.opaque();
        match h.request_code().0 {
            105 => {
                self.route_requests += 1;
                let topic = h
                    .get("topic")
                    .and_then(|t| t.as_str())
                    .unwrap_or("")
                    .to_string();
                self.route_topics.push(topic.clone());
                if self.unknown_topic && topic != "TBW102" {
                    let f = response(17, opaque, &[], b"");
                    self.conns[i].replies.push_back((now, f));
                    return true;
                }
                // TBW102 has 8 queues here; a new topic gets min(4, 8) of them.
                let queues = if topic == "TBW102" { 8 } else { 4 };
                let body = format!(
                    "{{\"brokerDatas\":[{{\"brokerAddrs\":{{\"0\":\"{PEER_IP}:{BROKER_PORT}\"}},\"brokerName\":\"broker-a\",\"cluster\":\"DefaultCluster\"}}],\"filterServerTable\":{{}},\"queueDatas\":[{{\"brokerName\":\"broker-a\",\"perm\":6,\"readQueueNums\":{queues},\"topicSysFlag\":0,\"writeQueueNums\":{queues}}}]}}"
                );
                let f = response(0, opaque, &[], body.as_bytes());
                self.conns[i].replies.push_back((now, f));
            }
            310 => {
                let mut scratch_buf = [0u8; 2048];
                let mut scratch = Scratch::new(&mut scratch_buf);
                let Ok(req) = SendMessageRequestHeaderV2::decode(&h, &mut scratch) else {
                    self.framing_errors += 1;
                    return true;
                };
                self.sends_seen += 1;
                let n = self.sends_seen;
                if self.reset_on_sends.contains(&n) {
                    let sock = self
                        .sockets
                        .get_mut::<tcp::Socket<'static>>(self.conns[i].handle);
                    sock.abort();
                    self.conns[i].buf.clear();
                    self.conns[i].replies.clear();
                    return false;
                }
                if self.error_on_sends.contains(&n) {
                    let f = response(1, opaque, &[], b"");
                    self.conns[i]
                        .replies
                        .push_back((now + self.reply_delay_ms, f));
                    return true;
                }
                let req = req.0;
                self.stored.push(Stored {
                    body: frame.body().to_vec(),
                    queue_id: req.queue_id,
                    properties: req.properties.unwrap_or("").to_string(),
                    oneway: h.is_oneway(),
                    broker_name: req.broker_name.map(str::to_string),
                });
                let off = self.next_offset;
                self.next_offset += 1;
                if !h.is_oneway() {
                    let q = req.queue_id.to_string();
                    let o = off.to_string();
                    let id = format!("0A00000100002A9F{off:016X}");
                    let f = response(
                        0,
                        opaque,
                        &[("msgId", &id), ("queueId", &q), ("queueOffset", &o)],
                        b"",
                    );
                    self.conns[i]
                        .replies
                        .push_back((now + self.reply_delay_ms, f));
                }
            }
            _ => self.framing_errors += 1,
        }
        true
    }
}

fn response(code: i32, opaque: i32, ext: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let repr = CommandRepr::response(ResponseCode(code), opaque, 409, Some(ext));
    let mut buf = vec![0u8; repr.frame_len(SerializeType::JSON, body.len())];
    let n = repr
        .emit_frame_prefix_and_header(SerializeType::JSON, body.len(), &mut buf)
        .unwrap();
    buf[n..].copy_from_slice(body);
    buf
}

pub type Gw = Producer<'static, 'static, 1, 8, 256>;

/// Sizes of the gateway side.
#[derive(Clone, Copy, Debug)]
pub struct GwSizes {
    pub sock_rx: usize,
    pub sock_tx: usize,
    pub message: usize,
}

impl Default for GwSizes {
    fn default() -> Self {
        GwSizes {
            sock_rx: 2048,
            sock_tx: 2048,
            message: 2048,
        }
    }
}

pub struct Sim {
    pub now: u64,
    pub wire: Rc<RefCell<Wire>>,
    pub dev: End,
    pub iface: Interface,
    pub sockets: SocketSet<'static>,
    pub producer: Gw,
    pub peer: Peer,
    pub completions: Vec<Completion>,
    /// Polls that asked to be called again at once.
    pub immediate_polls: u64,
    pub polls: u64,
}

fn leak(n: usize) -> &'static mut [u8] {
    Box::leak(vec![0u8; n].into_boxed_slice())
}

impl Sim {
    pub fn new(sizes: GwSizes, tweak: impl FnOnce(&mut Config<'static>)) -> Sim {
        let wire = Rc::new(RefCell::new(Wire::default()));
        let mut dev = End {
            wire: wire.clone(),
            side: 0,
        };
        let iface = iface(&mut dev, GW_IP);
        let mut sockets = SocketSet::new(vec![]);
        let ns = sockets.add(tcp_socket(sizes.sock_rx, 512));
        let b0 = sockets.add(tcp_socket(sizes.sock_rx, sizes.sock_tx));
        let mut cfg = Config::new(&NAMESRVS, "pg-gateway", "Telemetry");
        cfg.base.client_ip = [10, 0, 0, 2];
        tweak(&mut cfg);
        let bufs = Buffers {
            tx: leak(512),
            rx: leak(2048),
            message: leak(sizes.message),
        };
        let producer = Producer::new(cfg, bufs, ns, [b0]).expect("producer config");
        let peer = Peer::new(&wire);
        Sim {
            now: 0,
            wire,
            dev,
            iface,
            sockets,
            producer,
            peer,
            completions: Vec::new(),
            immediate_polls: 0,
            polls: 0,
        }
    }

    /// One millisecond of simulated time.
    pub fn step(&mut self) {
        let next = self.producer.poll(
            Instant::from_millis(self.now),
            &mut self.iface,
            &mut self.dev,
            &mut self.sockets,
        );
        self.polls += 1;
        if next == Some(Instant::from_millis(self.now)) {
            self.immediate_polls += 1;
        }
        if let Some(n) = next {
            assert!(
                n.millis() >= self.now,
                "deadline in the past: {n:?} < {}",
                self.now
            );
        }
        self.peer.poll(self.now);
        if let Some(c) = self.producer.take_completion() {
            self.completions.push(c);
        }
        self.now += 1;
    }

    /// Steps until `cond` holds or `limit_ms` of simulated time pass.
    pub fn run_until(&mut self, limit_ms: u64, mut cond: impl FnMut(&Sim) -> bool) -> bool {
        let end = self.now + limit_ms;
        while self.now < end {
            if cond(self) {
                return true;
            }
            self.step();
        }
        cond(self)
    }

    /// Sends `msg` (sync or oneway) and runs until its completion arrives.
    pub fn send_and_wait(&mut self, body: &[u8], oneway: bool, limit_ms: u64) -> Completion {
        assert!(
            self.run_until(limit_ms, |s| s.producer.can_send()),
            "producer never became free"
        );
        let msg = Message {
            body,
            tags: Some("TagA"),
            keys: None,
            flag: 0,
        };
        let now = Instant::from_millis(self.now);
        let id: SendId = if oneway {
            self.producer.send_oneway(now, &msg).unwrap()
        } else {
            self.producer.send(now, &msg).unwrap()
        };
        let before = self.completions.len();
        assert!(
            self.run_until(limit_ms, |s| s.completions.len() > before),
            "send {id:?} never completed (t={} ms, stats {:?})",
            self.now,
            self.producer.stats()
        );
        let c = self.completions.pop().unwrap();
        assert_eq!(c.id, id);
        c
    }

    pub fn stored_bodies(&self) -> Vec<Vec<u8>> {
        self.peer.stored.iter().map(|s| s.body.clone()).collect()
    }
}

/// A telemetry body of `len` bytes for message `i` (distinct per message, checkable).
pub fn body(i: usize, len: usize) -> Vec<u8> {
    let head = format!("{{\"seq\":{i},\"temp\":21.5,\"pad\":\"");
    let mut b = head.into_bytes();
    while b.len() + 2 < len {
        b.push(b'a' + (b.len() % 26) as u8);
    }
    b.extend_from_slice(b"\"}");
    b
}
