//! What the host-side smoltcp gateway tests (`smoltcp_real.rs`, `smoltcp_slow_link.rs`) share:
//! the gateway's interface on the TAP device (169.254.1.2/16, default route via 169.254.1.1,
//! as `tests/netns/tap.sh` sets up the kernel side), its producer, and its telemetry bodies.
#![allow(dead_code)]

pub mod qemu;

use rmq_smoltcp::{Buffers, Config, Producer};
use rmq_tests::broker::Cluster;
use smoltcp::iface::{Config as IfaceConfig, Interface, SocketHandle, SocketSet};
use smoltcp::phy::Device;
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, Ipv4Address};

/// The gateway's producer: one broker, 16 queues, 256 bytes of route strings.
pub type Gateway = Producer<'static, 'static, 1, 16, 256>;

/// A zeroed buffer that lives for the rest of the test.
pub fn leak(n: usize) -> &'static mut [u8] {
    Box::leak(vec![0u8; n].into_boxed_slice())
}

/// Message `i`'s telemetry body.
pub fn body(i: usize) -> String {
    format!(
        "{{\"gateway\":\"gw-1\",\"seq\":{i},\"temp\":{}.{},\"humidity\":{}}}",
        20 + i % 7,
        i % 10,
        40 + i % 13
    )
}

/// The gateway's interface on `dev` at `now_ms`.
pub fn iface<D: Device>(dev: &mut D, seed: u64, now_ms: u64) -> Interface {
    let mut icfg = IfaceConfig::new(HardwareAddress::Ethernet(EthernetAddress([
        0x02, 0, 0, 0, 0, 0x02,
    ])));
    icfg.random_seed = seed;
    let now = smoltcp::time::Instant::from_millis(now_ms as i64);
    let mut iface = Interface::new(icfg, dev, now);
    iface.update_ip_addrs(|a| {
        a.push(IpCidr::new(IpAddress::v4(169, 254, 1, 2), 16))
            .unwrap();
    });
    iface
        .routes_mut()
        .add_default_ipv4_route(Ipv4Address::new(169, 254, 1, 1))
        .unwrap();
    iface
}

/// A producer of `topic` in `group` talking to `cluster`'s NameServer, with two new sockets
/// (NameServer, broker) of `socket_buf` bytes each way and a message buffer of `message`.
pub fn producer(
    cluster: &Cluster,
    sockets: &mut SocketSet<'static>,
    group: &'static str,
    topic: &'static str,
    socket_buf: usize,
    message: usize,
) -> Gateway {
    let mut sock = || -> SocketHandle {
        sockets.add(tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0u8; socket_buf]),
            tcp::SocketBuffer::new(vec![0u8; socket_buf]),
        ))
    };
    let (ns, b0) = (sock(), sock());
    let ns_addr = cluster.namesrv_addr();
    let namesrvs: &'static [std::net::SocketAddr] = Box::leak(Box::new([ns_addr]));
    let mut cfg = Config::new(namesrvs, group, topic);
    cfg.base.client_ip = [169, 254, 1, 2];
    let bufs = Buffers {
        tx: leak(512),
        rx: leak(4096),
        message: leak(message),
    };
    Producer::new(cfg, bufs, ns, [b0]).expect("producer config")
}
