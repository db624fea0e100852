//! Telemetry gateway firmware (Cortex-M4F, no global allocator): publishes one telemetry
//! message a second to RocketMQ through rmq-smoltcp. Every buffer is a static, so `size.sh`
//! reports the whole RAM cost (socket buffers included) in `.data` + `.bss`.
//!
//! The Ethernet MAC is a stand-in (`Eth`): a real board plugs its MAC driver's
//! `smoltcp::phy::Device` in its place. Its frame buffers are counted in the RAM figures.
#![no_std]
#![no_main]

use core::fmt::Write as _;
use core::hint::black_box;
use core::sync::atomic::{AtomicU32, Ordering};

use cortex_m_rt::{entry, exception};
use panic_halt as _;
use rmq_smoltcp::core::time::{Duration, Instant};
use rmq_smoltcp::{Buffers, Config, Message, Producer};
use smoltcp::iface::{Config as IfaceConfig, Interface, SocketSet, SocketStorage};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint, Ipv4Address};

/// System clock for SysTick: 16 MHz (HSI of an STM32F4 after reset).
const CORE_HZ: u32 = 16_000_000;
const MTU: usize = 1514;

static MILLIS: AtomicU32 = AtomicU32::new(0);
static NAMESRVS: [IpEndpoint; 1] = [IpEndpoint::new(
    IpAddress::Ipv4(Ipv4Address::new(169, 254, 1, 1)),
    9876,
)];

#[exception]
fn SysTick() {
    MILLIS.fetch_add(1, Ordering::Relaxed);
}

fn now() -> Instant {
    Instant::from_millis(u64::from(MILLIS.load(Ordering::Relaxed)))
}

/// Stand-in for an Ethernet MAC driver with one receive and one transmit frame buffer.
struct Eth {
    rx: &'static mut [u8; MTU],
    tx: &'static mut [u8; MTU],
}

struct EthRx<'a>(&'a [u8]);
struct EthTx<'a>(&'a mut [u8]);

impl RxToken for EthRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.0)
    }
}

impl TxToken for EthTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let n = len.min(self.0.len());
        let r = f(&mut self.0[..n]);
        // "Start DMA".
        black_box(&self.0[..n]);
        r
    }
}

impl Device for Eth {
    type RxToken<'a> = EthRx<'a>;
    type TxToken<'a> = EthTx<'a>;

    fn receive(
        &mut self,
        _t: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        // "Read the DMA descriptor": opaque to the optimiser, like a volatile register.
        let len = black_box(0usize).min(MTU);
        if len == 0 {
            return None;
        }
        let Eth { rx, tx } = self;
        Some((EthRx(&rx[..len]), EthTx(&mut tx[..])))
    }

    fn transmit(&mut self, _t: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        Some(EthTx(&mut self.tx[..]))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = MTU;
        c
    }
}

/// Gateway sizes: one broker, 8 publish queues, 256 bytes of route strings.
type Gateway = Producer<'static, 'static, 1, 8, 256>;

#[entry]
fn main() -> ! {
    let mut cp = cortex_m::Peripherals::take().unwrap();
    cp.SYST
        .set_clock_source(cortex_m::peripheral::syst::SystClkSource::Core);
    cp.SYST.set_reload(CORE_HZ / 1000 - 1);
    cp.SYST.clear_current();
    cp.SYST.enable_counter();
    cp.SYST.enable_interrupt();

    let mut eth = Eth {
        rx: cortex_m::singleton!(: [u8; MTU] = [0; MTU]).unwrap(),
        tx: cortex_m::singleton!(: [u8; MTU] = [0; MTU]).unwrap(),
    };
    let mut icfg = IfaceConfig::new(HardwareAddress::Ethernet(EthernetAddress([
        0x02, 0, 0, 0, 0, 0x02,
    ])));
    icfg.random_seed = 0x1234_5678;
    // In a static too, so that `.bss` shows it (376 bytes).
    let iface: &'static mut Interface = cortex_m::singleton!(
        : Interface = Interface::new(icfg, &mut eth, smoltcp::time::Instant::ZERO)
    )
    .unwrap();
    iface.update_ip_addrs(|a| {
        let _ = a.push(IpCidr::new(IpAddress::v4(169, 254, 1, 2), 16));
    });
    let _ = iface
        .routes_mut()
        .add_default_ipv4_route(Ipv4Address::new(169, 254, 1, 1));

    // Sockets: NameServer (route responses ~0.7 KiB) and one broker.
    let storage =
        cortex_m::singleton!(: [SocketStorage<'static>; 2] = [SocketStorage::EMPTY; 2]).unwrap();
    let mut sockets = SocketSet::new(&mut storage[..]);
    let ns_rx = cortex_m::singleton!(: [u8; 1024] = [0; 1024]).unwrap();
    let ns_tx = cortex_m::singleton!(: [u8; 256] = [0; 256]).unwrap();
    let b_rx = cortex_m::singleton!(: [u8; 512] = [0; 512]).unwrap();
    let b_tx = cortex_m::singleton!(: [u8; 1024] = [0; 1024]).unwrap();
    let ns = sockets.add(tcp::Socket::new(
        tcp::SocketBuffer::new(&mut ns_rx[..]),
        tcp::SocketBuffer::new(&mut ns_tx[..]),
    ));
    let b0 = sockets.add(tcp::Socket::new(
        tcp::SocketBuffer::new(&mut b_rx[..]),
        tcp::SocketBuffer::new(&mut b_tx[..]),
    ));

    let mut cfg = Config::new(&NAMESRVS, "gateway", "Telemetry");
    cfg.client_ip = [169, 254, 1, 2];
    let bufs = Buffers {
        tx: &mut cortex_m::singleton!(: [u8; 512] = [0; 512]).unwrap()[..],
        rx: &mut cortex_m::singleton!(: [u8; 1024] = [0; 1024]).unwrap()[..],
        message: &mut cortex_m::singleton!(: [u8; 256] = [0; 256]).unwrap()[..],
    };
    // The configuration is a constant: it cannot fail (a panic here would halt, as any panic).
    let Ok(gateway) = Gateway::new(cfg, bufs, ns, [b0]) else {
        panic!("producer config")
    };
    let producer: &'static mut Gateway = cortex_m::singleton!(: Gateway = gateway).unwrap();

    let mut seq: u32 = 0;
    let mut next_publish = Instant::from_millis(1000);
    loop {
        let t = now();
        if t >= next_publish && producer.can_send() {
            let mut body: heapless::String<64> = heapless::String::new();
            let temp = black_box(215u32 + seq % 7);
            let _ = write!(
                body,
                "{{\"seq\":{seq},\"temp\":{}.{}}}",
                temp / 10,
                temp % 10
            );
            let msg = Message {
                body: body.as_bytes(),
                tags: Some("telemetry"),
                keys: None,
                flag: 0,
            };
            if producer.send(t, &msg).is_ok() {
                seq = seq.wrapping_add(1);
            }
            next_publish = next_publish + Duration::from_millis(1000);
        }
        let _next = producer.poll(t, iface, &mut eth, &mut sockets);
        if let Some(done) = producer.take_completion() {
            black_box(&done);
        }
        cortex_m::asm::wfi();
    }
}
