//! Downlink commands (feature `downlink`, on top of `store-forward`): the gateway consumes its
//! command topic (`cmdtopic=`, default `Commands`) in group `gateway-cmds` while its telemetry
//! goes on through the outbox, both on one `rmq_smoltcp::Client` (one session, one NameServer
//! and one broker connection): clustering with fixed queues (it owns every queue of the topic:
//! the group is this gateway's own; no heartbeats, each pull carries the subscription), long
//! polling, offsets committed every second.
//!
//! Output lines: `CMD <queueId> <queueOffset> <body>` for each command as it arrives,
//! `OWNED <n>` when the number of queues it owns changes, `COMMIT <queueId> <offset>` when a
//! queue's committed offset moves (the broker confirmed it). With `cmds=N` the run ends once N
//! commands arrived and the telemetry is done: the consumer stops (committing what it
//! processed), and `STATS` adds `cmds=` and the consumer's counters.

use core::net::SocketAddr;
use rmq_smoltcp::core::consumer::ConsumeFromWhere;
use rmq_smoltcp::core::time::{Duration, Instant};
use rmq_smoltcp::{Client, ClientConfig, Completion, Message, SendId, Stats, SubmitError};

use crate::forward::Uplink;
use crate::{Line, Net, Out, Params};

/// One broker, 8 queues per route, 256 bytes of route strings, 4 queues owned, 2 messages in
/// flight per queue (one pull's).
pub(crate) type Downlink = Client<'static, 'static, 1, 8, 256, 4, 2>;

/// Queue ids whose committed offsets are reported.
const QUEUES: usize = 8;

/// The client's settings (checked): publishes to `p.topic`, consumes `p.cmd_topic`.
pub(crate) fn config(p: &Params, namesrvs: &'static [SocketAddr]) -> ClientConfig<'static> {
    let mut cfg = ClientConfig::new(namesrvs, "gateway-cmds", "169.254.1.2@gateway", p.cmd_topic);
    cfg.publish_topic = Some(p.topic);
    cfg.base.client_ip = [169, 254, 1, 2];
    cfg.consume_from = ConsumeFromWhere::FirstOffset;
    // Small answers: 2 commands (~250 bytes each as stored, with their properties) and the
    // header fit the 1 KiB socket and frame buffers.
    cfg.pull_batch_size = 2;
    cfg.commit_interval = Duration::from_millis(1000);
    cfg.base.seed = p.seed;
    // Valid by construction (a panic exits with status 1).
    if Downlink::check(&cfg).is_err() {
        panic!("client config")
    }
    cfg
}

/// The client and what was last reported of it.
pub(crate) struct Commands<'c> {
    c: &'c mut Downlink,
    owned: usize,
    committed: [i64; QUEUES],
    /// Commands received.
    got: u32,
    /// `cmds=`: commands to wait for before the run ends.
    want: u32,
    stopping: Option<Instant>,
}

impl<'c> Commands<'c> {
    /// The client `c`, built from `cfg` by [`config`] and `Downlink::build` (in `main`'s
    /// frame: built by value, `Downlink::new`, the 7 KiB client and the parts it is made of
    /// were copied through ~20 KiB of stack; built in a static, it is still copied once), is
    /// started: subscribed.
    pub(crate) fn new(
        p: &Params,
        c: &'c mut Downlink,
        cfg: &ClientConfig<'static>,
        now: Instant,
    ) -> Self {
        if c.start(cfg, now).is_err() {
            panic!("client config")
        }
        Commands {
            c,
            owned: 0,
            committed: [-1; QUEUES],
            got: 0,
            want: p.cmds,
            stopping: None,
        }
    }
}

impl Uplink for Commands<'_> {
    fn can_send(&self) -> bool {
        self.c.can_send()
    }

    fn send(&mut self, t: Instant, m: &Message<'_>) -> Result<SendId, SubmitError> {
        self.c.send(t, m)
    }

    fn send_batch(&mut self, t: Instant, m: &[Message<'_>]) -> Result<SendId, SubmitError> {
        self.c.send_batch(t, m)
    }

    fn stats(&self) -> Stats {
        self.c.stats()
    }

    /// One client poll; prints the commands and what changed.
    fn poll(
        &mut self,
        out: &mut Out,
        net: &mut Net<'_>,
        t: Instant,
        idle: bool,
    ) -> (Option<Instant>, Option<Completion>) {
        let got = &mut self.got;
        let next = self
            .c
            .poll(t, net.iface, &mut net.eth, &mut net.sockets, |d| {
                let m = d.message;
                let mut l = Line::new();
                l.s(b"CMD ")
                    .i(m.queue_id.into())
                    .s(b" ")
                    .i(m.queue_offset)
                    .s(b" ")
                    .s(m.body);
                out.line(&mut l);
                *got += 1;
            });
        let mut owned = 0;
        for (q, committed) in self.c.owned() {
            owned += 1;
            let (Some(slot), Some(off)) = (self.committed.get_mut(q as usize), committed) else {
                continue;
            };
            if *slot != off {
                *slot = off;
                out.line(Line::new().s(b"COMMIT ").i(q.into()).s(b" ").i(off));
            }
        }
        if owned != self.owned {
            self.owned = owned;
            out.line(Line::new().s(b"OWNED ").u(owned as u64));
        }
        if idle && self.stopping.is_none() && self.got >= self.want {
            self.stopping = Some(t);
            self.c.stop();
        }
        (next, self.c.take_completion())
    }

    /// Until `cmds=` commands arrived and the final commits are done (at most 5 s).
    fn busy(&self, t: Instant) -> bool {
        match self.stopping {
            None => true,
            Some(at) => !self.c.stopped() && t < at + Duration::from_millis(5000),
        }
    }

    fn report(&self, l: &mut Line) {
        let s = self.c.pull_stats();
        l.s(b" cmds=")
            .u(self.got.into())
            .s(b" pulls=")
            .u(s.pulls)
            .s(b" commits=")
            .u(s.commits)
            .s(b" rebalances=")
            .u(s.rebalances);
    }
}
