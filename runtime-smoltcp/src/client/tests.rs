extern crate std;

use super::*;
use core::net::{Ipv4Addr, SocketAddrV4};
use rmq_core::retry::{RetryConfig, SendMode};
use smoltcp::iface::SocketStorage;
use smoltcp::socket::tcp;
use std::vec;

type C = Client<'static, 'static, 1, 8, 256, 4, 2>;

fn leak(n: usize) -> &'static mut [u8] {
    vec![0; n].leak()
}

fn bufs(message: usize) -> crate::Buffers<'static> {
    crate::Buffers {
        tx: leak(768),
        rx: leak(1024),
        message: leak(message),
    }
}

const NS: &[SocketAddr] = &[SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9876))];

/// `check`, `build` and `start` refuse what `new` refuses, and build the same client
/// when it accepts.
#[test]
fn three_steps_agree_with_new() {
    let mut storage = [SocketStorage::EMPTY, SocketStorage::EMPTY];
    let mut set = SocketSet::new(&mut storage[..]);
    let mut add = || {
        let rx = tcp::SocketBuffer::new(leak(64));
        let tx = tcp::SocketBuffer::new(leak(64));
        set.add(tcp::Socket::new(rx, tx))
    };
    let (ns, b0) = (add(), add());
    let now = Instant::ZERO;
    let ok = ClientConfig::new(NS, "g", "1.2.3.4@x", "Cmds");
    let mut no_ns = ok;
    no_ns.base.namesrvs = &[];
    let mut no_group = ok;
    no_group.group = "";
    let mut long_expr = ok;
    long_expr.expression = std::string::String::leak("e".repeat(300));
    let mut adaptive = ok;
    adaptive.base.retry = RetryConfig::adaptive(SendMode::Sync);
    for (cfg, message, want) in [
        // The gateway carries the Plain and Java 4.9 fault profiles only.
        (
            adaptive,
            1024,
            Some(ClientError::Session(session::ConfigError::ProfileLeftOut)),
        ),
        (ok, 1024, None),
        (
            no_ns,
            1024,
            Some(ClientError::Session(session::ConfigError::NameServers)),
        ),
        (
            no_group,
            1024,
            Some(ClientError::Config(PullConfigError::Name)),
        ),
        (
            long_expr,
            1024,
            Some(ClientError::Config(PullConfigError::Expression)),
        ),
        // With heartbeats (feature `rebalance`) the heartbeat must fit the message buffer.
        (
            ok,
            16,
            Gateway::<true>::HEARTBEATS.then_some(ClientError::HeartbeatTooLarge),
        ),
    ] {
        let by_new = C::new(cfg, bufs(message), now, ns, [b0]);
        assert_eq!(by_new.as_ref().err().copied(), want);
        let stepped = C::check(&cfg).and_then(|()| {
            let mut c = C::build(cfg, bufs(message), now, ns, [b0]);
            c.start(&cfg, now).map(|()| c)
        });
        assert_eq!(stepped.as_ref().err().copied(), want);
        if let (Ok(a), Ok(b)) = (by_new, stepped) {
            assert_eq!(a.m.hb.is_empty(), !Gateway::<true>::HEARTBEATS);
            assert_eq!(a.m.hb, b.m.hb);
            assert_eq!(b.m.send.parts().1.len(), message - b.m.hb.len());
        }
    }
}
