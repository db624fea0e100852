//! rmq on embassy: a telemetry producer for the Arm MPS2-AN386 board (Cortex-M4F; QEMU
//! `-M mps2-an386`) that networks through embassy-net and publishes with
//! `rmq_smoltcp::aio::AsyncProducer`, which only needs embedded-nal-async's `TcpConnect` (here
//! embassy-net's `TcpClient`) and a `Clock` (here rmq-smoltcp's `EmbassyClock`, feature
//! `embassy-time`).
//!
//! What the board needs besides: an embassy-time driver (SysTick at 1 kHz, with
//! embassy-time-queue-utils' queue) and an embassy-net driver for its LAN9118 (rmq-lan9118,
//! which is a polled smoltcp `Device`: frames are copied through, and the SysTick wakes the
//! network task every millisecond). On a board with an embassy HAL both come with the HAL.
//!
//! The gateway is 169.254.1.2/16 behind 169.254.1.1 (the same TAP set-up as the firmware's
//! QEMU tests) and sends one message a second to the NameServer at 169.254.1.1:9876.
#![no_std]
#![no_main]

use core::cell::{Cell, RefCell};
use core::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use core::ptr::{read_volatile, write_volatile};
use core::task::{Context, Waker};

use cortex_m_rt::exception;
use critical_section::Mutex;
use embassy_executor::Spawner;
use embassy_net::tcp::client::{TcpClient, TcpClientState};
use embassy_net::{Ipv4Address, Ipv4Cidr, Runner, StackResources, StaticConfigV4};
use embassy_net_driver::{Capabilities, HardwareAddress, LinkState};
use embassy_time::Timer;
use embassy_time_queue_utils::Queue;
use rmq_lan9118::{Lan9118, MAX_FRAME, Regs};
use rmq_smoltcp::aio::{AsyncBuffers, AsyncProducer, EmbassyClock};
use rmq_smoltcp::{Config, Message};
use smoltcp::phy::{Device, RxToken as _, TxToken as _};
use static_cell::StaticCell;

const CORE_HZ: u32 = 25_000_000;
const NIC_BASE: usize = 0x4020_0000;
const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

// ---------------------------------------------------------------------------------------------
// embassy-time driver: SysTick at 1 kHz.

struct SysTickDriver {
    ticks: Mutex<Cell<u64>>,
    queue: Mutex<RefCell<Queue>>,
    /// The network task, woken every tick (the LAN9118 is polled).
    nic: Mutex<RefCell<Option<Waker>>>,
}

impl embassy_time_driver::Driver for SysTickDriver {
    fn now(&self) -> u64 {
        critical_section::with(|cs| self.ticks.borrow(cs).get())
    }

    fn schedule_wake(&self, at: u64, waker: &Waker) {
        critical_section::with(|cs| {
            let mut q = self.queue.borrow_ref_mut(cs);
            q.schedule_wake(at, waker);
            // Past deadlines fire at once.
            q.next_expiration(self.ticks.borrow(cs).get());
        });
    }
}

embassy_time_driver::time_driver_impl!(static DRIVER: SysTickDriver = SysTickDriver {
    ticks: Mutex::new(Cell::new(0)),
    queue: Mutex::new(RefCell::new(Queue::new())),
    nic: Mutex::new(RefCell::new(None)),
});

#[exception]
fn SysTick() {
    critical_section::with(|cs| {
        let t = DRIVER.ticks.borrow(cs).get() + 1;
        DRIVER.ticks.borrow(cs).set(t);
        DRIVER.queue.borrow_ref_mut(cs).next_expiration(t);
        if let Some(w) = DRIVER.nic.borrow_ref_mut(cs).take() {
            w.wake();
        }
    });
}

// ---------------------------------------------------------------------------------------------
// embassy-net driver over rmq-lan9118.

struct Mmio;

impl Regs for Mmio {
    fn read(&mut self, off: u32) -> u32 {
        // SAFETY: a LAN9118 register of the MPS2 board.
        unsafe { read_volatile((NIC_BASE + off as usize) as *const u32) }
    }
    fn write(&mut self, off: u32, v: u32) {
        // SAFETY: as above.
        unsafe { write_volatile((NIC_BASE + off as usize) as *mut u32, v) }
    }
}

struct Nic {
    lan: Lan9118<'static, Mmio>,
    /// The received frame, copied out of the driver's buffer.
    frame: [u8; MAX_FRAME],
}

struct Rx<'a>(&'a mut [u8]);
struct Tx<'a>(&'a mut Lan9118<'static, Mmio>);

impl embassy_net_driver::RxToken for Rx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, f: F) -> R {
        f(self.0)
    }
}

impl embassy_net_driver::TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let now = smoltcp::time::Instant::ZERO;
        match self.0.transmit(now) {
            Some(t) => t.consume(len, f),
            // No room in the FIFO: the frame is dropped (TCP sends it again).
            None => f(&mut [0u8; MAX_FRAME][..len.min(MAX_FRAME)]),
        }
    }
}

fn wake_next_tick(cx: &Context<'_>) {
    critical_section::with(|cs| *DRIVER.nic.borrow_ref_mut(cs) = Some(cx.waker().clone()));
}

impl embassy_net_driver::Driver for Nic {
    type RxToken<'a> = Rx<'a>;
    type TxToken<'a> = Tx<'a>;

    fn receive(&mut self, cx: &mut Context<'_>) -> Option<(Rx<'_>, Tx<'_>)> {
        let now = smoltcp::time::Instant::ZERO;
        let Nic { lan, frame } = self;
        let n = match lan.receive(now) {
            Some((rx, _)) => rx.consume(|b| {
                let n = b.len().min(frame.len());
                frame[..n].copy_from_slice(&b[..n]);
                n
            }),
            None => {
                wake_next_tick(cx);
                return None;
            }
        };
        Some((Rx(&mut frame[..n]), Tx(lan)))
    }

    fn transmit(&mut self, _: &mut Context<'_>) -> Option<Tx<'_>> {
        Some(Tx(&mut self.lan))
    }

    fn link_state(&mut self, _: &mut Context<'_>) -> LinkState {
        LinkState::Up
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::default();
        c.max_transmission_unit = MAX_FRAME;
        c
    }

    fn hardware_address(&self) -> HardwareAddress {
        HardwareAddress::Ethernet(MAC)
    }
}

#[embassy_executor::task]
async fn net_task(mut runner: Runner<'static, &'static mut Nic>) -> ! {
    runner.run().await
}

// ---------------------------------------------------------------------------------------------

type Producer = AsyncProducer<'static, 'static, TcpClient<'static, 2>, EmbassyClock, 1, 8, 256>;

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    // SAFETY: the only use of the core peripherals.
    let mut cp = unsafe { cortex_m::Peripherals::steal() };
    cp.SYST
        .set_clock_source(cortex_m::peripheral::syst::SystClkSource::Core);
    cp.SYST.set_reload(CORE_HZ / 1000 - 1);
    cp.SYST.clear_current();
    cp.SYST.enable_counter();
    cp.SYST.enable_interrupt();

    static RX: StaticCell<[u8; MAX_FRAME]> = StaticCell::new();
    static TX: StaticCell<[u8; MAX_FRAME]> = StaticCell::new();
    let Ok(lan) = Lan9118::new(Mmio, RX.init([0; MAX_FRAME]), TX.init([0; MAX_FRAME]), MAC) else {
        panic!("no LAN9118")
    };
    let config = embassy_net::Config::ipv4_static(StaticConfigV4 {
        address: Ipv4Cidr::new(Ipv4Address::new(169, 254, 1, 2), 16),
        gateway: Some(Ipv4Address::new(169, 254, 1, 1)),
        dns_servers: Default::default(),
    });
    static RESOURCES: StaticCell<StackResources<3>> = StaticCell::new();
    static NIC: StaticCell<Nic> = StaticCell::new();
    let nic = NIC.init(Nic {
        lan,
        frame: [0; MAX_FRAME],
    });
    let (stack, runner) =
        embassy_net::new(nic, config, RESOURCES.init(StackResources::new()), 0x5EED);
    spawner.spawn(net_task(runner).expect("one network task"));
    stack.wait_config_up().await;

    static STATE: StaticCell<TcpClientState<2, 1024, 1024>> = StaticCell::new();
    static CLIENT: StaticCell<TcpClient<'static, 2>> = StaticCell::new();
    let client = CLIENT.init(TcpClient::new(stack, STATE.init(TcpClientState::new())));
    static CLOCK: EmbassyClock = EmbassyClock;
    static NAMESRVS: [SocketAddr; 1] = [SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::new(169, 254, 1, 1),
        9876,
    ))];
    let mut cfg = Config::new(&NAMESRVS, "gateway", "Telemetry");
    cfg.base.client_ip = [169, 254, 1, 2];
    static TXB: StaticCell<[u8; 512]> = StaticCell::new();
    static MSG: StaticCell<[u8; 256]> = StaticCell::new();
    static NS_RX: StaticCell<[u8; 1024]> = StaticCell::new();
    static B_RX: StaticCell<[u8; 512]> = StaticCell::new();
    let bufs = AsyncBuffers {
        tx: TXB.init([0; 512]),
        message: MSG.init([0; 256]),
        ns_rx: NS_RX.init([0; 1024]),
        broker_rx: [B_RX.init([0; 512])],
    };
    static PRODUCER: StaticCell<Producer> = StaticCell::new();
    let Ok(p) = Producer::new(cfg, bufs, client, &CLOCK) else {
        panic!("producer config")
    };
    let p = PRODUCER.init(p);
    let mut seq = 0u32;
    loop {
        let mut body = [0u8; 10];
        let n = digits(seq, &mut body);
        let msg = Message {
            body: &body[..n],
            tags: Some("telemetry"),
            keys: None,
            flag: 0,
        };
        // A failed send is reported by its error; the next one follows a second later.
        let _ = p.send(&msg).await;
        seq = seq.wrapping_add(1);
        Timer::after_secs(1).await;
    }
}

/// `v` in decimal at the start of `out`; its length.
fn digits(mut v: u32, out: &mut [u8; 10]) -> usize {
    let mut t = [0u8; 10];
    let mut i = t.len();
    loop {
        i -= 1;
        t[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let n = t.len() - i;
    out[..n].copy_from_slice(&t[i..]);
    n
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {
        cortex_m::asm::wfi();
    }
}
