//! The one machine both runtimes ([`crate::net`], [`crate::aio`]) drive, for the producer and
//! the client alike: the core [`Client`] (its session, and a consuming gateway's pull
//! consumer) and the sending side ([`rmq_core::gateway`]).
//!
//! The core client correlates every answer, answers every request a broker sends (running
//! info for `mqadmin consumerStatus`, REQUEST_CODE_NOT_SUPPORTED from a producer) and reports
//! events; this file only lends it the message being sent and hands messages to the caller.

use rmq_core::client::{Attached, Client, DirectOutcome, Event, Inbound};
use rmq_core::pull_consumer::Delivery;
use rmq_core::session::{Features, Peer, Transmit};
use rmq_core::store::Fixed;
use rmq_core::time::Instant;
use rmq_core::transport::TransportError;

use crate::net::{Machine, Stats};
use rmq_core::gateway::{Lend, Sender};

/// What a gateway compiles in (`CONSUMER`: a client's session, else a producer's). JSON
/// headers unless `rocketmq-headers` (every broker answers either); no broker remarks (the
/// failure carries the code); the fault profiles Plain and Java 4.9 only (3 KB of flash less
/// than all four); no sends to a chosen queue (the session selects). A client: no orderly
/// consumption, send-backs (every message is acknowledged when the closure returns), lag
/// probes, broadcasting or timestamp starts (6 KB less); without `rebalance` it owns every
/// queue of its topic (fixed queues: a group of one) and sends no heartbeats (its pulls carry
/// the subscription; 6 KB less), with it the group's members share the queues; no milestones
/// without `rebalance` (its poll loop reads the state it waits for); no slave reads (one
/// socket per broker, its master's: a slave's answer on it would match no request); no waits
/// for a new master (a send fails at once when its master is gone). Answers
/// to brokers' requests (running info, REQUEST_CODE_NOT_SUPPORTED) with `admin` only: 3 KB of
/// a producer's flash, 5 KB of a client's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gateway<const CONSUMER: bool>;

impl<const CONSUMER: bool> Features for Gateway<CONSUMER> {
    const ROCKETMQ_HEADERS: bool = cfg!(feature = "rocketmq-headers");
    const HEARTBEATS: bool = CONSUMER && cfg!(feature = "rebalance");
    const BROKER_REMARKS: bool = false;
    const CONSUMER: bool = CONSUMER;
    const ORDERLY: bool = false;
    const SEND_BACK: bool = false;
    const LAG_PROBES: bool = false;
    const BROADCASTING: bool = false;
    const TIMESTAMPS: bool = false;
    const REBALANCE: bool = cfg!(feature = "rebalance");
    const PROFILE_JAVA5: bool = false;
    const PROFILE_ADAPTIVE: bool = false;
    const TARGETS: bool = false;
    const ADMIN: bool = cfg!(feature = "admin");
    const MILESTONES: bool = cfg!(feature = "rebalance");
    const SLAVES: bool = false;
    const BROKER_NAMES: bool = false;
    const MASTER_SWITCH: bool = false;
    // A gateway sends neither half messages nor requests.
    const TRANSACTIONS: bool = false;
    const REPLIES: bool = false;
    const RECALL: bool = false;
    const CALLS: bool = false;
}

/// A gateway: the core client of a session with `T` topics, `B` brokers, `Q` queues, `R`
/// requests, one send, `S` route bytes and features `F`, consumer `C`; and the sending side.
pub(crate) struct Gw<
    'a,
    'b,
    const T: usize,
    const B: usize,
    const Q: usize,
    const R: usize,
    const S: usize,
    F: Features,
    C: Attached,
> {
    pub(crate) client: Client<T, B, Q, R, 1, S, F, Fixed, C>,
    pub(crate) send: Sender<'a, 'b>,
    /// The heartbeat body (a consuming gateway's with the `rebalance` feature; else empty).
    pub(crate) hb: &'b [u8],
}

impl<
    const T: usize,
    const B: usize,
    const Q: usize,
    const R: usize,
    const S: usize,
    F: Features,
    C: Attached,
> Gw<'_, '_, T, B, Q, R, S, F, C>
{
    /// The connection counters with the session's.
    pub(crate) fn stats(&self, net: Stats) -> Stats {
        let s = self.client.session().stats();
        Stats {
            stale_responses: s.late_responses,
            route_updates: s.route_updates,
            attempts: s.attempts,
            ..net
        }
    }
}

impl<
    const T: usize,
    const B: usize,
    const Q: usize,
    const R: usize,
    const S: usize,
    F: Features,
    C: Attached,
> Machine for Gw<'_, '_, T, B, Q, R, S, F, C>
{
    fn closed(&mut self, now: Instant, peer: Peer, cause: TransportError) {
        self.client.handle_closed(now, peer, cause);
    }

    fn written(&mut self, now: Instant, tx: &Transmit) {
        if tx.report_written {
            self.client.handle_written(now, tx.opaque);
        }
    }

    fn is_live(&self, tx: &Transmit) -> bool {
        self.client.is_live(tx)
    }

    fn peer_addr(&self, peer: Peer) -> Option<&str> {
        match peer {
            // A gateway keeps one socket per broker: its master.
            Peer::Broker(b) | Peer::Slave(b) => self.client.session().broker_addr(b),
            Peer::NameServer(_) => None,
        }
    }

    /// Runs the timers at `now` (the publish topic is registered, and its route looked up,
    /// at the first call).
    fn tick(&mut self, now: Instant) {
        if self.send.has_topic() {
            let _ = self.send.topic_id(now, self.client.session_mut());
        }
        self.client.handle_timeout(now);
    }

    /// A whole frame from `peer` (messages go to `deliver`); `false` when it is malformed.
    // Not inlined (nor `transmit`): the frame handler's and the transmitter's stack frames
    // then follow each other instead of adding up in the caller's.
    #[inline(never)]
    fn frame(
        &mut self,
        now: Instant,
        peer: Peer,
        frame: &[u8],
        deliver: &mut dyn FnMut(&Delivery<'_, '_>),
    ) -> bool {
        let mut direct = None;
        let ok = self
            .client
            .handle_frame(now, peer, frame, &mut |i| match i {
                Inbound::Message(d) => deliver(&d),
                // `mqadmin queryMsgById -d`: the closure runs it like any message.
                Inbound::Direct {
                    peer,
                    opaque,
                    message,
                } if F::ADMIN => {
                    deliver(&message);
                    direct = Some((peer, opaque));
                }
                // (A gateway sends no half messages: no check-back names its group. It keeps
                // no broker remarks, so no refusal is reported.)
                Inbound::Direct { .. }
                | Inbound::Check { .. }
                | Inbound::Reply(_)
                | Inbound::RecallHandle { .. }
                | Inbound::Refused { .. }
                | Inbound::Answer { .. } => {}
            });
        if let Some((peer, opaque)) = direct.filter(|_| F::ADMIN) {
            self.client
                .answer_direct(peer, opaque, DirectOutcome::Success, 0);
        }
        ok.is_ok()
    }

    /// The next frame to write, encoded into `tx`.
    #[inline(never)]
    fn transmit(&mut self, now: Instant, tx: &mut [u8]) -> Option<Transmit> {
        let (props, _) = self.send.parts();
        let lend = Lend {
            props,
            heartbeat: Some(self.hb),
            clock: (self.send.clock(), now),
        };
        self.client.poll_transmit(now, tx, &lend)
    }

    /// Where a frame with a body reads it.
    fn body(&self) -> &[u8] {
        self.send.parts().1
    }

    /// Hands the client's events out; returns the next peer whose connection must be dropped.
    fn reconnect(&mut self) -> Option<Peer> {
        while let Some(e) = self.client.poll_event() {
            match e {
                Event::Reconnect(peer) => return Some(peer),
                Event::SendDone { id, result } => {
                    self.send.done(self.client.session(), id, result);
                }
                _ => {}
            }
        }
        None
    }

    /// Work is due now (a transmit or an answer waiting).
    fn ready(&mut self) -> bool {
        self.client.has_work()
    }

    /// When [`Gw::tick`] has work next.
    fn deadline(&self) -> Option<Instant> {
        self.client.poll_timeout()
    }
}
