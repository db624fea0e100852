//! The producer: a core client without a consumer and the sending side ([`rmq_core::gateway`]) as
//! a [`Gw`], driven over smoltcp sockets by [`crate::net`] (or, with the `async` feature,
//! over any async stack by [`crate::aio`]).
//!
//! Every protocol decision (NameServer choice, route and TBW102 fallback, queue selection,
//! retries, request correlation, message properties) is the core's.

use rmq_core::client::{Client, NoConsumer};
use rmq_core::select::ProfileSet;
use rmq_core::session;
use rmq_core::time::Instant;
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::phy::Device;

use crate::machine::{Gateway, Gw};
use crate::net::{Net, Stats};
use crate::{Buffers, Completion, Config, Message, SendId, SubmitError};
use rmq_core::gateway::Sender;

/// Requests queued or in flight: a route lookup and the one send (plus slack).
const REQUESTS: usize = 4;

/// The producer's machine: a core client without a consumer (its answers to a broker's
/// consumer requests are REQUEST_CODE_NOT_SUPPORTED, as a Java producer's), and the sending
/// side.
pub(crate) type ProducerMachine<'a, 'b, const B: usize, const Q: usize, const S: usize> =
    Gw<'a, 'b, 1, B, Q, REQUESTS, S, Gateway<false>, NoConsumer>;

impl<'a, 'b, const B: usize, const Q: usize, const S: usize> ProducerMachine<'a, 'b, B, Q, S> {
    /// The settings' checks (the profile this image carries, the session's).
    pub(crate) fn check(cfg: &Config<'a>) -> Result<(), session::ConfigError> {
        if !Gateway::<false>::carries(cfg.base.retry.profile) {
            return Err(session::ConfigError::ProfileLeftOut);
        }
        cfg.base.session("").check()
    }

    /// The machine of `cfg` (checked by [`Self::check`]), built in the caller's place (no
    /// copy of the client through the stack: a `Result` around it would be one).
    #[inline(always)]
    pub(crate) fn build(cfg: &Config<'a>, message: &'b mut [u8], now: Instant) -> Self {
        let sc = cfg.base.session("");
        Gw {
            client: Client::assemble(&sc, now, || NoConsumer),
            send: Sender::new(
                Some(cfg.topic),
                cfg.base.retry,
                cfg.base.client_ip,
                message,
                sc.seed,
            ),
            hb: &[],
        }
    }
}

/// A heap-free RocketMQ producer over smoltcp.
///
/// - `BROKERS`: broker connections (one socket each) and route capacity;
/// - `QUEUES`: publish queues kept from the route;
/// - `ROUTE_STR`: bytes for the names and addresses of a parsed route.
///
/// ```no_run
/// # use rmq_smoltcp::{Buffers, Config, Message, Producer};
/// # use rmq_smoltcp::core::time::Instant;
/// # use smoltcp::iface::{Interface, SocketHandle, SocketSet};
/// # fn gateway(
/// #     cfg: Config<'_>, bufs: Buffers<'_>, iface: &mut Interface,
/// #     device: &mut smoltcp::phy::Loopback, sockets: &mut SocketSet<'_>,
/// #     [ns, b0, b1]: [SocketHandle; 3], now: impl Fn() -> Instant, wait_until: impl Fn(Instant),
/// # ) -> Result<(), Box<dyn std::error::Error>> {
/// let mut p: Producer<'_, '_, 2, 16, 256> = Producer::new(cfg, bufs, ns, [b0, b1])?;
/// let id = p.send(now(), &Message { body: b"21.5C", ..Default::default() })?;
/// loop {
///     let next = p.poll(now(), iface, device, sockets);
///     if let Some(c) = p.take_completion() {
///         assert_eq!(c.id, id);
///     }
///     wait_until(next.unwrap_or(now()));
/// }
/// # }
/// ```
pub struct Producer<'a, 'b, const BROKERS: usize, const QUEUES: usize, const ROUTE_STR: usize> {
    net: Net<'a, 'b, BROKERS>,
    m: ProducerMachine<'a, 'b, BROKERS, QUEUES, ROUTE_STR>,
}

impl<const BROKERS: usize, const QUEUES: usize, const ROUTE_STR: usize> core::fmt::Debug
    for Producer<'_, '_, BROKERS, QUEUES, ROUTE_STR>
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Producer")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
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
        ProducerMachine::<BROKERS, QUEUES, ROUTE_STR>::check(&cfg)?;
        Ok(Producer {
            m: ProducerMachine::build(&cfg, bufs.message, Instant::ZERO),
            net: Net::new(&cfg.base, bufs.tx, bufs.rx, ns, brokers),
        })
    }

    sending_api!("Producer");

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
        self.net
            .poll(now, iface, device, sockets, &mut self.m, &mut |_| {})
    }
}

#[cfg(test)]
mod tests;
