//! A frame-aware TCP proxy for fault injection in front of a real NameServer or broker: every
//! remoting frame passes a [`Rule`] that forwards it (changed or not) or answers it itself.
//!
//! Used to make a real broker look like one that refuses a request (e.g. a broker that refuses
//! CONSUMER_SEND_MSG_BACK), with [`rewrite_addr`] on a NameServer proxy so that clients reach
//! the broker through its proxy. What the client then gets from the real broker is real.

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rmq_core::wire::{CommandHeader, Frame};

pub use crate::relay::Direction;
use crate::relay::{Acceptor, read_frame};

/// What becomes of one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Passed on (these bytes, a whole frame).
    Forward(Vec<u8>),
    /// Not passed on; these bytes go back to the sender instead.
    Answer(Vec<u8>),
}

/// Decides each frame's fate.
pub type Rule = Arc<dyn Fn(Direction, Vec<u8>) -> Verdict + Send + Sync>;

/// A running proxy; stops accepting on drop.
pub struct Proxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on `127.0.0.1:0` and forwards to `upstream` through `rule`.
    pub fn start(upstream: SocketAddr, rule: Rule) -> io::Result<Proxy> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let accept = std::thread::spawn(move || {
            Acceptor::RELAY.run(&listener, upstream, &st, |_, [c, s], [c2, s2]| {
                let (cw, sw) = (Arc::new(Mutex::new(c2)), Arc::new(Mutex::new(s2)));
                let (r1, r2) = (rule.clone(), rule.clone());
                let (cw2, sw2) = (cw.clone(), sw.clone());
                std::thread::spawn(move || pump(c, &sw, &cw, Direction::ClientToServer, &r1));
                std::thread::spawn(move || pump(s, &cw2, &sw2, Direction::ServerToClient, &r2));
            });
        });
        Ok(Proxy {
            addr,
            stop,
            accept: Some(accept),
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// Reads whole frames from `from`; each goes on to `to` or back to `back`, as `rule` says.
fn pump(
    mut from: TcpStream,
    to: &Mutex<TcpStream>,
    back: &Mutex<TcpStream>,
    dir: Direction,
    rule: &Rule,
) {
    while let Ok(frame) = read_frame(&mut from, 0..=usize::MAX) {
        let (dest, bytes) = match rule(dir, frame) {
            Verdict::Forward(b) => (to, b),
            Verdict::Answer(b) => (back, b),
        };
        let mut d = dest.lock().unwrap_or_else(|p| p.into_inner());
        if d.write_all(&bytes).is_err() {
            break;
        }
    }
    for s in [to, back] {
        let _ = s
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .shutdown(Shutdown::Both);
    }
}

/// `(code, opaque)` of a frame's header.
pub fn code_and_opaque(frame: &[u8]) -> Option<(i32, i32)> {
    let f = Frame::new_checked(frame).ok()?;
    let h = CommandHeader::parse(&f).ok()?;
    Some((h.code(), h.opaque()))
}

/// `frame` with every `from` in its body replaced by `to` (the length prefix adjusted; the
/// header is left alone).
pub fn rewrite_addr(frame: &[u8], from: &str, to: &str) -> Vec<u8> {
    let Ok(f) = Frame::new_checked(frame) else {
        return frame.to_vec();
    };
    let body = f.body_ref();
    let head = &frame[..frame.len() - body.len()];
    let text = String::from_utf8_lossy(body);
    if !text.contains(from) {
        return frame.to_vec();
    }
    let body = text.replace(from, to).into_bytes();
    let mut out = head.to_vec();
    let total = (head.len() - 4 + body.len()) as u32;
    out[..4].copy_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// A rule for a NameServer proxy: routes name `via` instead of the broker at `broker`.
pub fn route_through(broker: SocketAddr, via: SocketAddr) -> Rule {
    let (from, to) = (broker.to_string(), via.to_string());
    Arc::new(move |dir, frame| match dir {
        Direction::ServerToClient => Verdict::Forward(rewrite_addr(&frame, &from, &to)),
        Direction::ClientToServer => Verdict::Forward(frame),
    })
}

/// A rule for a broker proxy: requests with code `code` are answered with `answer` (a response
/// code) and `remark`; everything else passes.
pub fn refuse(code: i32, answer: i32, remark: &'static str) -> Rule {
    Arc::new(move |dir, frame| match (dir, code_and_opaque(&frame)) {
        (Direction::ClientToServer, Some((c, opaque))) if c == code => Verdict::Answer(
            crate::hostile::response(answer, opaque, &[], Some(remark), &[]),
        ),
        _ => Verdict::Forward(frame),
    })
}
