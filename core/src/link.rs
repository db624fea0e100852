//! One connection's life, for runtimes whose TCP stack has no timers of its own (smoltcp):
//! the connect deadline, and a peer that vanished with data outstanding (no ACK for the stall
//! timeout). The runtime reports what its socket says; the [`Link`] says when the connection
//! is up, and when and why to abort it. [`Outgoing`] is the one frame being written through a
//! socket that takes part of it at a time. [`Links`] is a gateway runtime's table of them: one
//! connection to the NameServer the session talks to, one per broker.
//!
//! ```text
//!   Idle ──connecting(now, timeout)──► Connecting ──check: established──► Up
//!     ▲                                    │ closed / past the deadline     │ closed, or data
//!     └──────────── reset() ◄──────────────┴─────── Failed(cause) ◄─────────┘ unacked too long
//! ```

use crate::session::{BrokerId, Peer, Transmit};
use crate::time::{Duration, Instant};
use crate::transport::TransportError;

/// Where a [`Link`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LinkState {
    /// No connection.
    Idle,
    /// Connecting until the deadline.
    Connecting(Instant),
    /// Established.
    Up,
}

/// What [`Link::check`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LinkCheck {
    /// Nothing changed.
    Fine,
    /// The connection just came up.
    Established,
    /// Abort the socket and report this cause to the session ([`crate::session::Session::handle_closed`]).
    Failed(TransportError),
}

/// One connection (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Link {
    state: LinkState,
    /// The NameServer a NameServer connection goes to.
    namesrv: Option<u8>,
    /// Bytes waiting for the peer's ACK at the last check.
    unacked: usize,
    /// Last time the peer acknowledged something (or nothing was outstanding).
    acked_at: Instant,
}

impl Link {
    /// A link with no connection.
    pub const IDLE: Link = Link {
        state: LinkState::Idle,
        namesrv: None,
        unacked: 0,
        acked_at: Instant::ZERO,
    };

    /// Where it is.
    pub const fn state(&self) -> LinkState {
        self.state
    }

    /// The NameServer a NameServer connection was opened to.
    pub const fn name_server(&self) -> Option<u8> {
        self.namesrv
    }

    /// Whether this link carries frames for `peer` now: open (or opening), and for a
    /// NameServer the same one the session talks to.
    pub fn serves(&self, peer: Peer) -> bool {
        self.state != LinkState::Idle
            && !matches!(peer, Peer::NameServer(i) if self.namesrv != Some(i))
    }

    /// A connect to `peer` started: it must be established within `timeout`.
    pub fn connecting(&mut self, now: Instant, timeout: Duration, peer: Peer) {
        self.state = LinkState::Connecting(now.saturating_add(timeout));
        if let Peer::NameServer(i) = peer {
            self.namesrv = Some(i);
        }
    }

    /// A connect to `peer` completed at `now` (a runtime whose stack keeps the connect's
    /// timer itself, such as an async one): the link is up.
    pub fn established(&mut self, now: Instant, peer: Peer) {
        self.connecting(now, Duration::ZERO, peer);
        self.state = LinkState::Up;
        self.unacked = 0;
        self.acked_at = now;
    }

    /// The connection is gone (aborted or failed); returns whether it had been up.
    pub fn reset(&mut self) -> bool {
        let was_up = self.state == LinkState::Up;
        self.state = LinkState::Idle;
        was_up
    }

    /// What the socket says now: `established`, `closed` (closed or reset), and the bytes
    /// written but not yet acknowledged. A connect past its deadline, a closed connection, or
    /// data unacknowledged for `stall` fails the link.
    pub fn check(
        &mut self,
        now: Instant,
        established: bool,
        closed: bool,
        unacked: usize,
        stall: Duration,
    ) -> LinkCheck {
        match self.state {
            LinkState::Idle => LinkCheck::Fine,
            LinkState::Connecting(_) if established => {
                self.state = LinkState::Up;
                self.unacked = 0;
                self.acked_at = now;
                LinkCheck::Established
            }
            LinkState::Connecting(deadline) if closed || now >= deadline => {
                LinkCheck::Failed(TransportError::ConnectFailed)
            }
            LinkState::Connecting(_) => LinkCheck::Fine,
            LinkState::Up => {
                if unacked == 0 || unacked < self.unacked {
                    self.acked_at = now;
                }
                self.unacked = unacked;
                let silent = unacked > 0 && now >= self.acked_at.saturating_add(stall);
                if !established || silent {
                    LinkCheck::Failed(TransportError::ConnectionClosed)
                } else {
                    LinkCheck::Fine
                }
            }
        }
    }

    /// When [`check`](Self::check) may fail the link next without news from the socket.
    pub fn deadline(&self, stall: Duration) -> Option<Instant> {
        match self.state {
            LinkState::Connecting(deadline) => Some(deadline),
            LinkState::Up if self.unacked > 0 => Some(self.acked_at.saturating_add(stall)),
            _ => None,
        }
    }
}

/// One frame being written: the transmit's `len` encoded bytes, then its `body_len` body
/// bytes, a part at a time, and when the socket last took some.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// The frame.
    pub tx: Transmit,
    written: usize,
    progress: Instant,
}

impl Outgoing {
    /// `tx`, nothing written yet.
    pub const fn new(tx: Transmit, now: Instant) -> Self {
        Outgoing {
            tx,
            written: 0,
            progress: now,
        }
    }

    /// Whether part of it is on the wire already (the connection cannot carry another frame).
    pub const fn started(&self) -> bool {
        self.written > 0
    }

    /// Whether all of it was written.
    pub const fn done(&self) -> bool {
        self.written >= self.tx.len.saturating_add(self.tx.body_len)
    }

    /// When a socket that takes nothing more makes the write stalled.
    pub const fn deadline(&self, stall: Duration) -> Instant {
        self.progress.saturating_add(stall)
    }

    /// The bytes to offer next: the rest of `head` (the encoded `tx.len` bytes), then the rest
    /// of `body` (`tx.body_len` bytes); `None` when done, or when a buffer is shorter than the
    /// transmit says.
    pub fn pending<'x>(&self, head: &'x [u8], body: &'x [u8]) -> Option<&'x [u8]> {
        if self.written < self.tx.len {
            head.get(self.written..self.tx.len)
        } else {
            let end = self.tx.body_len;
            body.get(self.written - self.tx.len..end)
                .filter(|b| !b.is_empty())
        }
    }

    /// The socket took `n` bytes at `now`.
    pub fn advance(&mut self, now: Instant, n: usize) {
        if n > 0 {
            self.written = self.written.saturating_add(n);
            self.progress = now;
        }
    }
}

/// A [`Link`] and what the runtime keeps for it (a socket handle, a stream and its buffer).
#[derive(Debug)]
pub struct Conn<T> {
    /// The connection's life.
    pub link: Link,
    /// The runtime's part.
    pub io: T,
}

/// The connections of a runtime that keeps one per peer: connection 0 to the NameServer the
/// session talks to, connection `1 + b` to broker `b` (its master: a slave's frames go to its
/// master's connection, as a gateway reads from no slave).
#[derive(Debug)]
pub struct Links<T, const B: usize> {
    /// The NameServer connection.
    pub ns: Conn<T>,
    /// One connection per broker.
    pub brokers: [Conn<T>; B],
}

impl<T, const B: usize> Links<T, B> {
    /// Idle links around the runtime's parts.
    pub fn new(ns: T, brokers: [T; B]) -> Self {
        let idle = |io| Conn {
            link: Link::IDLE,
            io,
        };
        Links {
            ns: idle(ns),
            brokers: brokers.map(idle),
        }
    }

    /// The connection that carries `peer`'s frames (`None`: a broker past `B`).
    pub fn get_mut(&mut self, peer: Peer) -> Option<&mut Conn<T>> {
        match peer {
            Peer::NameServer(_) => Some(&mut self.ns),
            Peer::Broker(b) | Peer::Slave(b) => self.brokers.get_mut(usize::from(b.0)),
        }
    }

    /// The peer behind connection `i` (for 0, the NameServer it was last opened to).
    pub fn peer(&self, i: usize) -> Peer {
        match i.checked_sub(1) {
            None => Peer::NameServer(self.ns.link.name_server().unwrap_or(0)),
            Some(b) => Peer::Broker(BrokerId(b as u16)),
        }
    }

    /// Whether `peer`'s connection carries its frames now ([`Link::serves`]).
    pub fn serves(&mut self, peer: Peer) -> bool {
        self.get_mut(peer).is_some_and(|c| c.link.serves(peer))
    }

    /// Every connection, the NameServer's first.
    pub fn iter(&self) -> impl Iterator<Item = &Conn<T>> {
        core::iter::once(&self.ns).chain(self.brokers.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    const STALL: Duration = Duration::from_millis(1000);

    #[test]
    fn links_map_peers_to_connections() {
        let mut l: Links<u8, 2> = Links::new(9, [1, 2]);
        assert_eq!(l.get_mut(Peer::Slave(BrokerId(1))).map(|c| c.io), Some(2));
        assert!(l.get_mut(Peer::Broker(BrokerId(2))).is_none());
        assert_eq!(l.peer(2), Peer::Broker(BrokerId(1)));
        assert!(!l.serves(Peer::NameServer(1)));
        l.ns.link.established(t(5), Peer::NameServer(1));
        assert_eq!(l.ns.link.state(), LinkState::Up);
        assert_eq!(l.peer(0), Peer::NameServer(1));
        assert!(l.serves(Peer::NameServer(1)) && !l.serves(Peer::NameServer(0)));
        assert_eq!(l.iter().map(|c| c.io).sum::<u8>(), 12);
    }

    #[test]
    fn a_frame_goes_out_in_parts() {
        let tx = Transmit {
            peer: Peer::NameServer(0),
            len: 3,
            opaque: 1,
            body: None,
            body_len: 2,
            report_written: false,
            answer: false,
        };
        let mut o = Outgoing::new(tx, t(0));
        let (head, body) = (&b"abc"[..], &b"de"[..]);
        assert!(!o.started());
        assert_eq!(o.pending(head, body), Some(&b"abc"[..]));
        o.advance(t(5), 2);
        assert!(o.started());
        assert_eq!(o.pending(head, body), Some(&b"c"[..]));
        o.advance(t(6), 0);
        assert_eq!(o.deadline(STALL), t(1005), "no progress, no new deadline");
        o.advance(t(7), 1);
        assert_eq!(o.pending(head, body), Some(&b"de"[..]));
        o.advance(t(8), 2);
        assert!(o.done());
        assert_eq!(o.pending(head, body), None);
        // A body shorter than the transmit says: nothing to offer, never done.
        let mut o = Outgoing::new(tx, t(0));
        o.advance(t(1), 3);
        assert_eq!(o.pending(head, b"d"), None);
        assert!(!o.done());
    }

    #[test]
    fn connect_deadline_and_establishment() {
        let mut l = Link::IDLE;
        l.connecting(t(0), Duration::from_millis(500), Peer::NameServer(1));
        assert_eq!(l.name_server(), Some(1));
        assert!(l.serves(Peer::NameServer(1)));
        assert!(!l.serves(Peer::NameServer(0)));
        assert_eq!(l.deadline(STALL), Some(t(500)));
        assert_eq!(l.check(t(100), false, false, 0, STALL), LinkCheck::Fine);
        assert_eq!(
            l.check(t(500), false, false, 0, STALL),
            LinkCheck::Failed(TransportError::ConnectFailed)
        );
        assert!(!l.reset());
        l.connecting(t(600), Duration::from_millis(500), Peer::NameServer(1));
        assert_eq!(
            l.check(t(601), false, true, 0, STALL),
            LinkCheck::Failed(TransportError::ConnectFailed),
            "refused"
        );
        l.connecting(t(700), Duration::from_millis(500), Peer::NameServer(1));
        assert_eq!(
            l.check(t(710), true, false, 0, STALL),
            LinkCheck::Established
        );
        assert_eq!(l.state(), LinkState::Up);
        assert!(l.reset());
        assert!(!l.serves(Peer::NameServer(1)));
    }

    #[test]
    fn a_peer_that_stops_acknowledging_fails_after_the_stall_timeout() {
        let mut l = Link::IDLE;
        l.connecting(
            t(0),
            Duration::from_millis(500),
            Peer::Broker(crate::session::BrokerId(0)),
        );
        assert_eq!(l.check(t(0), true, false, 0, STALL), LinkCheck::Established);
        assert_eq!(l.deadline(STALL), None, "nothing outstanding");
        assert_eq!(l.check(t(100), true, false, 300, STALL), LinkCheck::Fine);
        assert_eq!(l.deadline(STALL), Some(t(1000)));
        // Some of it acknowledged: the clock restarts.
        assert_eq!(l.check(t(900), true, false, 200, STALL), LinkCheck::Fine);
        assert_eq!(l.deadline(STALL), Some(t(1900)));
        assert_eq!(l.check(t(1899), true, false, 200, STALL), LinkCheck::Fine);
        assert_eq!(
            l.check(t(1900), true, false, 200, STALL),
            LinkCheck::Failed(TransportError::ConnectionClosed)
        );
        // Closed by the peer.
        let mut l = Link::IDLE;
        l.connecting(
            t(0),
            Duration::from_millis(500),
            Peer::Broker(crate::session::BrokerId(0)),
        );
        let _ = l.check(t(0), true, false, 0, STALL);
        assert_eq!(
            l.check(t(5), false, true, 0, STALL),
            LinkCheck::Failed(TransportError::ConnectionClosed)
        );
    }
}
