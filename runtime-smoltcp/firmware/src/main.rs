//! Telemetry gateway firmware (Cortex-M4F, no global allocator) for the Arm MPS2-AN386 board
//! as QEMU emulates it (`-M mps2-an386`): publishes N telemetry messages to RocketMQ through
//! rmq-smoltcp over the board's SMSC LAN9118 NIC (rmq-lan9118, polled), one sync send at a
//! time, and reports over semihosting. Every buffer is a static, so `size.sh` reports the
//! whole RAM cost (socket and frame buffers included) in `.data` + `.bss`; the downlink
//! image's client is the exception: it lives in `main`'s frame, where it is built in place
//! (see `downlink.rs`), and counts in the stack high-water.
//!
//! Parameters come from the semihosting command line (QEMU
//! `-semihosting-config enable=on,target=native,arg=rmq-firmware,arg=ns=127.0.0.1:9876,arg=n=100`;
//! QEMU joins the `arg=` values with spaces): space-separated `key=value` words, words without
//! `=` (the program name) ignored, an unknown key refused:
//! - `ns=A.B.C.D:PORT` the NameServer (required);
//! - `n=N` messages to publish (default 10);
//! - `topic=T` (default `Telemetry`);
//! - `hdr=json|rocketmq` the header type the caller expects: the image writes JSON, or the
//!   binary ROCKETMQ header when built with the `rocketmq-headers` feature; a mismatch is
//!   refused;
//! - `seed=S` per-boot random value (TCP ports, UNIQ_KEY; default from the NameServer port);
//! - `backoff=MS` the pause after a failed message before the next one (default 1000 ms: a
//!   broker that is down is not hammered, and a restarted one is reached again).
//!
//! Output, one line each: `OK <seq> <queueId> <queueOffset> <msgId> <offsetMsgId> <broker>`
//! (`WARN` instead of `OK` for a stored message whose status is not SEND_OK) or
//! `FAIL <seq> <cause>`, exactly one per message (a failed send is not retried: the next
//! message follows); then `STATS ...`; `ERR <what>` for a bad parameter or a missing NIC.
//! `<cause>` is `no-route`, `broker <code>`, `transport <n>` (the core `TransportError` in
//! declaration order: 0 connect failed, 1 write failed, 2 timed out, 3 connection closed,
//! 4 broker not found, 5 malformed), `call-timeout`, `authentication <code>` or `client`, then
//! `attempts=<n>`. Exit status 0, or 1 after an `ERR` (or a panic). QEMU 7.2 writes the
//! semihosting console to its standard error (unless `-semihosting-config chardev=` says
//! otherwise).
//!
//! With the `store-forward` feature the image is the store-and-forward gateway instead
//! (`src/forward.rs`): telemetry generated at `rate=N` messages per second (default 10) into
//! a 200-message outbox, sent in order and kept through outages; it adds `DROP` and `RETRY`
//! lines and more `STATS` (see there).
//!
//! With the `downlink` feature (which implies `store-forward`) the store-and-forward gateway
//! also consumes a command topic on the same client session (`src/downlink.rs`): `cmds=N`
//! commands to wait for, `cmdtopic=T`; it adds `CMD`, `OWNED` and `COMMIT` lines.
//!
//! `STATS`: `instr` counts the instructions executed from the first send to the last
//! completion outside `wfi` (FREE_RUN ticks × 40 under `-icount shift=0`, where one
//! instruction takes 1 ns of virtual time and FREE_RUN ticks at 25 MHz), `instr_per_msg` that
//! over N (both include the producer polls while waiting for the broker, one per SysTick,
//! counted in `polls`); `span_ticks` the FREE_RUN ticks of the same span including the sleeps;
//! `stack` the stack high-water in bytes (RAM painted at the top of `main`, so an upper bound
//! by up to 256 bytes); `static_ram` the statics (`.data` + `.bss` + `.uninit`).
#![no_std]
#![no_main]

mod mem;

use core::ptr::{addr_of, read_volatile, write_volatile};
use core::sync::atomic::{AtomicU32, Ordering};

use core::net::{SocketAddr, SocketAddrV4};
use cortex_m_rt::{entry, exception};
use cortex_m_semihosting::debug::{self, EXIT_FAILURE, EXIT_SUCCESS};
use cortex_m_semihosting::{nr, syscall1};
use rmq_lan9118::{Lan9118, MAX_FRAME, Regs};
use rmq_smoltcp::core::retry::{SendErrorKind, SendStatus};
use rmq_smoltcp::core::time::Instant;
use rmq_smoltcp::{Buffers, SendFailure, SendReceipt};
#[cfg(not(feature = "downlink"))]
use rmq_smoltcp::{Completion, Config, Producer};
#[cfg(not(feature = "store-forward"))]
use rmq_smoltcp::{Message, core::time::Duration};
use smoltcp::iface::{Config as IfaceConfig, Interface, SocketSet, SocketStorage};
use smoltcp::socket::tcp;

use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, Ipv4Address};

/// The device part of the vector table: the 32 interrupts of QEMU's MPS2-AN386 (`num-irq`),
/// all `DefaultHandler`; none is enabled (the NIC is polled, the clock is SysTick, an
/// exception). cortex-m-rt's generic table has 240 (960 B of flash; feature `device`).
#[unsafe(link_section = ".vector_table.interrupts")]
#[unsafe(no_mangle)]
static __INTERRUPTS: [unsafe extern "C" fn(); 32] = [{
    unsafe extern "C" {
        fn DefaultHandler();
    }
    DefaultHandler
}; 32];

/// MPS2 core clock (SysTick source): 25 MHz.
const CORE_HZ: u32 = 25_000_000;
/// The LAN9118 on MPS2-AN385/AN386.
const NIC_BASE: usize = 0x4020_0000;
const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
/// The request header type this image writes.
const HEADER: &[u8] = if cfg!(feature = "rocketmq-headers") {
    b"rocketmq"
} else {
    b"json"
};
/// The producer's message buffer: one message (properties and body), or with
/// `store-forward` a batch of up to 8 (about 130 bytes per record); with the downlink, the
/// consumer's heartbeat (~250 bytes) first.
const MESSAGE_BUF: usize = if cfg!(feature = "downlink") {
    1472
} else if cfg!(feature = "store-forward") {
    1152
} else {
    256
};
/// The broker socket's receive buffer: a send answer, or with the downlink a pull answer of
/// up to 2 commands (~0.7 KiB).
const BROKER_SOCKET_RX: usize = if cfg!(feature = "downlink") {
    1024
} else {
    512
};
/// The broker socket's send buffer: a frame larger than it is written as it drains (the
/// downlink image trades a little of its batches' speed for RAM).
const BROKER_SOCKET_TX: usize = if cfg!(feature = "downlink") {
    768
} else {
    1024
};
/// Frame staging (prefix and header; a heartbeat's body too): the consumer's heartbeat, with
/// its subscription, takes ~450 bytes with its header.
const TX_BUF: usize = if cfg!(feature = "downlink") { 768 } else { 512 };
/// The frame buffer: a route answer (~0.7 KiB), or with the downlink a pull answer.
const BROKER_RX: usize = 1024;
/// Stack paint pattern.
const PAINT: u32 = 0xDEAD_BEEF;

/// A `&'static mut` to a new static set to the value (`const`: at build time, in `.bss` when
/// zero). Each expansion has its own static and `main`, which never returns, runs each
/// expansion once: the reference is the only one.
macro_rules! stat {
    ($t:ty = const $v:expr) => {{
        static mut S: $t = $v;
        // SAFETY: see above.
        unsafe { &mut *::core::ptr::addr_of_mut!(S) }
    }};
    ($t:ty = $v:expr) => {{
        static mut S: ::core::mem::MaybeUninit<$t> = ::core::mem::MaybeUninit::uninit();
        // SAFETY: see above.
        unsafe { (*::core::ptr::addr_of_mut!(S)).write($v) }
    }};
}

#[cfg(feature = "downlink")]
mod downlink;
#[cfg(feature = "store-forward")]
mod forward;

static MILLIS: AtomicU32 = AtomicU32::new(0);

#[exception]
fn SysTick() {
    MILLIS.fetch_add(1, Ordering::Relaxed);
}

fn now() -> Instant {
    Instant::from_millis(u64::from(MILLIS.load(Ordering::Relaxed)))
}

/// The NIC's registers, memory-mapped.
struct Mmio;

impl Regs for Mmio {
    fn read(&mut self, off: u32) -> u32 {
        // SAFETY: a LAN9118 register (the driver only names modelled ones).
        unsafe { read_volatile((NIC_BASE + off as usize) as *const u32) }
    }
    fn write(&mut self, off: u32, v: u32) {
        // SAFETY: as above.
        unsafe { write_volatile((NIC_BASE + off as usize) as *mut u32, v) }
    }
}

unsafe extern "C" {
    /// cortex-m-rt: the start of `.data`, the first static in RAM.
    static __sdata: u32;
    /// cortex-m-rt: the end of `.bss`/`.uninit`, where the free RAM below the stack starts.
    static __sheap: u32;
    /// cortex-m-rt: the initial stack pointer (top of RAM).
    static _stack_start: u32;
}

fn ram_bounds() -> (usize, usize) {
    (addr_of!(__sheap) as usize, addr_of!(_stack_start) as usize)
}

/// One output line (also used to build the message body and key).
struct Line {
    buf: [u8; 256],
    len: usize,
}

impl Line {
    fn new() -> Self {
        Line {
            buf: [0; 256],
            len: 0,
        }
    }

    #[inline(never)]
    fn s(&mut self, b: &[u8]) -> &mut Self {
        for &c in b {
            // The last byte is kept for the NUL.
            if self.len + 1 < self.buf.len() {
                self.buf[self.len] = c;
                self.len += 1;
            }
        }
        self
    }

    #[inline(never)]
    fn u(&mut self, mut v: u64) -> &mut Self {
        let mut t = [0u8; 20];
        let mut i = t.len();
        loop {
            i -= 1;
            t[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.s(&t[i..])
    }

    fn i(&mut self, v: i64) -> &mut Self {
        if v < 0 {
            self.s(b"-");
        }
        self.u(v.unsigned_abs())
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The host's console (semihosting SYS_WRITE0).
struct Out;

impl Out {
    fn line(&mut self, l: &mut Line) {
        l.s(b"\n");
        // NUL-terminated: the last byte of the buffer is never written by `Line::s`.
        l.buf[l.len] = 0;
        // SAFETY: SYS_WRITE0 reads the NUL-terminated string.
        unsafe { syscall1(nr::WRITE0, l.buf.as_ptr() as usize) };
    }

    fn err(&mut self, what: &[u8]) -> ! {
        self.line(Line::new().s(b"ERR ").s(what));
        fail()
    }
}

/// Ends the QEMU run with status 1.
fn fail() -> ! {
    exit(EXIT_FAILURE)
}

/// Ends the QEMU run (semihosting SYS_EXIT); on a debugger that resumes, sleeps.
fn exit(status: debug::ExitStatus) -> ! {
    debug::exit(status);
    loop {
        cortex_m::asm::wfi();
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    fail()
}

/// A decimal number (no sign, at least one digit).
fn num(s: &[u8]) -> Option<u32> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u32, |a, &c| {
        let d = c.wrapping_sub(b'0');
        (d < 10).then(|| a.wrapping_mul(10).wrapping_add(u32::from(d)))
    })
}

/// `A.B.C.D:PORT`.
fn endpoint(v: &[u8]) -> Option<SocketAddr> {
    let (mut f, mut k) = ([0u32; 5], 0);
    for &c in v {
        if c == b'.' || c == b':' {
            k += 1;
        } else {
            let d = c.wrapping_sub(b'0');
            let x = f.get_mut(k).filter(|_| d < 10)?;
            *x = *x * 10 + u32::from(d);
        }
    }
    let [a, b, c, d, port] = f;
    (k == 4 && a | b | c | d < 256 && port > 0 && port < 65536).then(|| {
        SocketAddr::V4(SocketAddrV4::new(
            Ipv4Address::new(a as u8, b as u8, c as u8, d as u8),
            port as u16,
        ))
    })
}

/// Run parameters from the semihosting command line.
struct Params {
    ns: SocketAddr,
    count: u32,
    topic: &'static str,
    seed: u32,
    backoff: u32,
    /// Messages generated per second (store-and-forward image).
    #[cfg(feature = "store-forward")]
    rate: u32,
    /// Most messages per request (store-and-forward image).
    #[cfg(feature = "store-forward")]
    batch: u32,
    /// Commands to receive before the run ends (downlink image).
    #[cfg(feature = "downlink")]
    cmds: u32,
    /// The command topic (downlink image).
    #[cfg(feature = "downlink")]
    cmd_topic: &'static str,
}

fn params(out: &mut Out) -> Params {
    // Static: the topic is used from it for the whole run.
    let buf = stat!([u8; 256] = const [0; 256]);
    let mut block = [buf.as_mut_ptr() as usize, buf.len() - 1];
    // SAFETY: SYS_GET_CMDLINE writes at most `block[1]` bytes plus a NUL into `buf`, and the
    // length into `block[1]`.
    let got = unsafe { syscall1(nr::GET_CMDLINE, block.as_mut_ptr() as usize) } == 0;
    let cmd: &'static [u8] = buf;
    let (mut ns, mut count, mut topic, mut seed, mut backoff) =
        (None, Some(10), Some("Telemetry"), None, Some(1000));
    #[cfg(feature = "store-forward")]
    let (mut rate, mut batch) = (Some(10), Some(1));
    #[cfg(feature = "downlink")]
    let (mut cmds, mut cmd_topic) = (Some(0), Some("Commands"));
    let mut good = got;
    for word in cmd[..block[1].min(cmd.len())].split(|&c| c == b' ') {
        let Some(eq) = word.iter().position(|&c| c == b'=') else {
            continue;
        };
        let v = &word[eq + 1..];
        match &word[..eq] {
            b"ns" => ns = endpoint(v),
            b"n" => count = num(v),
            b"topic" => topic = core::str::from_utf8(v).ok(),
            b"seed" => seed = num(v),
            b"backoff" => backoff = num(v),
            #[cfg(feature = "store-forward")]
            b"rate" => rate = num(v).filter(|&r| (1..=1000).contains(&r)),
            #[cfg(feature = "store-forward")]
            b"batch" => batch = num(v).filter(|&b| (1..=forward::MAX_BATCH).contains(&b)),
            #[cfg(feature = "downlink")]
            b"cmds" => cmds = num(v),
            #[cfg(feature = "downlink")]
            b"cmdtopic" => cmd_topic = core::str::from_utf8(v).ok(),
            // The header type is the build's (feature `rocketmq-headers`): say which is expected.
            b"hdr" => good &= v == HEADER,
            _ => good = false,
        }
    }
    #[cfg(not(feature = "store-forward"))]
    let (rate, batch) = (Some(()), Some(()));
    #[cfg(not(feature = "downlink"))]
    let (cmds, cmd_topic) = (Some(()), Some(()));
    match (ns, count, topic, backoff, (rate, batch), (cmds, cmd_topic)) {
        (
            Some(ns),
            Some(count),
            Some(topic),
            Some(backoff),
            (Some(_rate), Some(_batch)),
            (Some(_cmds), Some(_cmd_topic)),
        ) if good => Params {
            ns,
            count,
            topic,
            seed: seed.unwrap_or(0x5EED_0000 ^ u32::from(ns.port())),
            backoff,
            #[cfg(feature = "store-forward")]
            rate: _rate,
            #[cfg(feature = "store-forward")]
            batch: _batch,
            #[cfg(feature = "downlink")]
            cmds: _cmds,
            #[cfg(feature = "downlink")]
            cmd_topic: _cmd_topic,
        },
        _ => out.err(if cfg!(feature = "downlink") {
            b"usage: ns=A.B.C.D:PORT [n=N] [topic=T] [hdr=json|rocketmq] [seed=S] [backoff=MS] [rate=1..1000] [batch=1..8] [cmds=N] [cmdtopic=T]"
        } else if cfg!(feature = "store-forward") {
            b"usage: ns=A.B.C.D:PORT [n=N] [topic=T] [hdr=json|rocketmq] [seed=S] [backoff=MS] [rate=1..1000] [batch=1..8]"
        } else {
            b"usage: ns=A.B.C.D:PORT [n=N] [topic=T] [hdr=json|rocketmq] [seed=S] [backoff=MS]"
        }),
    }
}

/// `<cause> <code> attempts=<n>` of a failed send (see the crate docs).
fn failure(l: &mut Line, f: &SendFailure) {
    let (what, code): (&[u8], i32) = match f {
        SendFailure::Plan { error, .. } => match error.kind() {
            SendErrorKind::NoRoute => (b"no-route", 0),
            SendErrorKind::Broker { code } => (b"broker", code),
            SendErrorKind::Transport(t) => (b"transport", t as i32),
            SendErrorKind::CallTimeout => (b"call-timeout", 0),
        },
        SendFailure::Authentication { code, .. } => (b"authentication", *code),
        _ => (b"client", 0),
    };
    l.s(what)
        .s(b" ")
        .i(code.into())
        .s(b" attempts=")
        .u(f.attempts().into());
}

/// Prints the outcome line of message `seq`; whether it was stored.
#[cfg(not(feature = "store-forward"))]
#[inline(never)]
fn report(out: &mut Out, seq: u32, c: &Completion) -> bool {
    match &c.result {
        Ok(r) => {
            stored(out, seq, 0, r);
            true
        }
        Err(f) => {
            let mut l = Line::new();
            l.s(b"FAIL ").u(seq.into()).s(b" ");
            failure(&mut l, f);
            out.line(&mut l);
            false
        }
    }
}

/// The `OK`/`WARN` line of message `seq`, message `i` of a stored request (0 for a single
/// message): queue offset and msgId are the `i`-th of the batch; a batch's answer lists every
/// offsetMsgId, and only the first message's is kept (`-` for the others).
#[inline(never)]
fn stored(out: &mut Out, seq: u32, i: u32, r: &SendReceipt) {
    let mut l = Line::new();
    let nth;
    let (id, oid) = match i {
        0 => (&r.msg_id, r.offset_msg_id.split(',').next().unwrap_or("")),
        _ => {
            nth = r.msg_id_of(i as u16).unwrap_or_default();
            (&nth, "-")
        }
    };
    l.s(if r.status == SendStatus::SendOk {
        b"OK "
    } else {
        b"WARN "
    })
    .u(seq.into())
    .s(b" ")
    .i(r.queue_id.into())
    .s(b" ")
    .i(r.queue_offset.map_or(-1, |o| o + i64::from(i)))
    .s(b" ")
    .s(id.as_bytes())
    .s(b" ")
    .s(oid.as_bytes())
    .s(b" ")
    .s(r.broker.as_bytes());
    out.line(&mut l);
}

/// Paints the free RAM between the statics and 256 bytes below the current stack.
#[inline(always)]
fn paint_stack() {
    // The stack pointer itself, below all of `main`'s frame: a local's address may lie above
    // slots `main` already wrote (a 10 KiB frame painted over its own spills hard-faulted).
    let sp = cortex_m::register::msp::read() as usize;
    let (mut a, _) = ram_bounds();
    while a + 256 < sp {
        // SAFETY: free RAM: above every static, below the live stack.
        unsafe { write_volatile(a as *mut u32, PAINT) };
        a += 4;
    }
}

/// Bytes of stack ever used (from the lowest word whose paint was overwritten).
fn stack_high_water() -> usize {
    let (mut a, top) = ram_bounds();
    // SAFETY: RAM between the statics and the top of the stack.
    while a < top && unsafe { read_volatile(a as *const u32) } == PAINT {
        a += 4;
    }
    top - a
}

/// Gateway sizes: one broker, 8 publish queues, 256 bytes of route strings.
#[cfg(not(feature = "downlink"))]
type Gateway = Producer<'static, 'static, 1, 8, 256>;

#[entry]
fn main() -> ! {
    paint_stack();
    let mut out = Out;
    let p = params(&mut out);

    // SAFETY: the only use of the core peripherals.
    let mut cp = unsafe { cortex_m::Peripherals::steal() };
    cp.SYST
        .set_clock_source(cortex_m::peripheral::syst::SystClkSource::Core);
    cp.SYST.set_reload(CORE_HZ / 1000 - 1);
    cp.SYST.clear_current();
    cp.SYST.enable_counter();
    cp.SYST.enable_interrupt();

    let rx = stat!([u8; MAX_FRAME] = const [0; MAX_FRAME]);
    let tx = stat!([u8; MAX_FRAME] = const [0; MAX_FRAME]);
    let Ok(mut eth) = Lan9118::new(Mmio, &mut rx[..], &mut tx[..], MAC) else {
        out.err(b"no LAN9118")
    };
    let mut icfg = IfaceConfig::new(HardwareAddress::Ethernet(EthernetAddress(MAC)));
    icfg.random_seed = u64::from(p.seed);
    // In a static too, so that `.bss` shows it.
    let iface = stat!(Interface = Interface::new(icfg, &mut eth, smoltcp::time::Instant::ZERO));
    iface.update_ip_addrs(|a| {
        let _ = a.push(IpCidr::new(IpAddress::v4(169, 254, 1, 2), 16));
    });
    let _ = iface
        .routes_mut()
        .add_default_ipv4_route(Ipv4Address::new(169, 254, 1, 1));

    // Sockets: NameServer (route responses ~0.7 KiB) and one broker (send answers; with the
    // downlink, pull answers too).
    let storage = stat!([SocketStorage<'static>; 2] = [SocketStorage::EMPTY; 2]);
    let mut sockets = SocketSet::new(&mut storage[..]);
    let ns_rx = stat!([u8; 1024] = const [0; 1024]);
    let ns_tx = stat!([u8; 256] = const [0; 256]);
    let b_rx = stat!([u8; BROKER_SOCKET_RX] = const [0; BROKER_SOCKET_RX]);
    let b_tx = stat!([u8; BROKER_SOCKET_TX] = const [0; BROKER_SOCKET_TX]);
    let ns = sockets.add(tcp::Socket::new(
        tcp::SocketBuffer::new(&mut ns_rx[..]),
        tcp::SocketBuffer::new(&mut ns_tx[..]),
    ));
    let b0 = sockets.add(tcp::Socket::new(
        tcp::SocketBuffer::new(&mut b_rx[..]),
        tcp::SocketBuffer::new(&mut b_tx[..]),
    ));

    let namesrvs: &'static [SocketAddr; 1] = stat!([SocketAddr; 1] = [p.ns]);
    let bufs = Buffers {
        tx: &mut stat!([u8; TX_BUF] = const [0; TX_BUF])[..],
        rx: &mut stat!([u8; BROKER_RX] = const [0; BROKER_RX])[..],
        message: &mut stat!([u8; MESSAGE_BUF] = const [0; MESSAGE_BUF])[..],
    };
    #[cfg(not(feature = "downlink"))]
    let producer = {
        let mut cfg = Config::new(&namesrvs[..], "gateway", p.topic);
        cfg.base.client_ip = [169, 254, 1, 2];
        cfg.base.seed = p.seed;
        // The configuration is valid by construction (a panic here exits with status 1).
        let Ok(gateway) = Gateway::new(cfg, bufs, ns, [b0]) else {
            panic!("producer config")
        };
        stat!(Gateway = gateway)
    };
    // The producer and the command consumer on one client session.
    // The client lives in `main`'s frame, built there in place (see `downlink::Commands::new`).
    #[cfg(feature = "downlink")]
    let cfg = downlink::config(&p, &namesrvs[..]);
    #[cfg(feature = "downlink")]
    let mut client = downlink::Downlink::build(cfg, bufs, now(), ns, [b0]);
    #[cfg(feature = "downlink")]
    let producer = &mut downlink::Commands::new(&p, &mut client, &cfg, now());

    let mut net = Net {
        iface,
        eth,
        sockets,
    };
    #[cfg(not(feature = "store-forward"))]
    direct(&mut out, &p, producer, &mut net);
    #[cfg(feature = "store-forward")]
    forward::run(&mut out, &p, producer, &mut net);
    exit(EXIT_SUCCESS)
}

/// The network side the producer is polled with.
struct Net<'a> {
    iface: &'a mut Interface,
    eth: Lan9118<'a, Mmio>,
    sockets: SocketSet<'a>,
}

#[cfg(not(feature = "downlink"))]
impl Net<'_> {
    /// One producer poll: the deadline it asks for and a completion, if any.
    fn poll(
        &mut self,
        producer: &mut Gateway,
        t: Instant,
    ) -> (Option<Instant>, Option<Completion>) {
        let next = producer.poll(t, self.iface, &mut self.eth, &mut self.sockets);
        (next, producer.take_completion())
    }
}

/// CPU accounting over the run: FREE_RUN ticks outside `wfi` from the first send on.
#[derive(Default)]
struct Meter {
    busy: u64,
    first: Option<u32>,
    last: u32,
    polls: u32,
}

impl Meter {
    fn start(&mut self, t0: u32) {
        self.first.get_or_insert(t0);
    }

    fn poll(&mut self, t0: u32, t1: u32) {
        if self.first.is_some() {
            self.busy += u64::from(t1.wrapping_sub(t0));
            self.polls += 1;
        }
    }

    /// The `STATS` line (`more` adds the caller's words).
    fn report(&self, out: &mut Out, n: u32, ok: u32, more: impl FnOnce(&mut Line)) {
        let mut l = Line::new();
        l.s(b"STATS n=")
            .u(n.into())
            .s(b" ok=")
            .u(ok.into())
            .s(b" instr=")
            .u(self.busy * 40)
            .s(b" instr_per_msg=")
            .u(self.busy * 40 / u64::from(n.max(1)))
            .s(b" polls=")
            .u(self.polls.into())
            .s(b" span_ticks=")
            .u(self
                .last
                .wrapping_sub(self.first.unwrap_or(self.last))
                .into())
            .s(b" stack=")
            .u(stack_high_water() as u64)
            .s(b" static_ram=")
            .u((ram_bounds().0 - addr_of!(__sdata) as usize) as u64);
        more(&mut l);
        out.line(&mut l);
    }
}

/// Message `seq`'s key, `seq-<seq>`.
fn key(seq: u32, buf: &mut [u8; KEY]) {
    let mut l = Line::new();
    l.s(b"seq-").u(seq.into());
    buf.fill(0);
    buf[..l.len.min(KEY)].copy_from_slice(&l.bytes()[..l.len.min(KEY)]);
}

/// Bytes of a key: `seq-` and up to 10 digits.
const KEY: usize = 14;

/// The key as text (up to its first NUL).
fn text(k: &[u8; KEY]) -> &str {
    let n = k.iter().position(|&c| c == 0).unwrap_or(KEY);
    // SAFETY: `key` writes ASCII only.
    unsafe { core::str::from_utf8_unchecked(&k[..n]) }
}

/// The producer-only gateway: message `seq` is built when the previous one has its outcome,
/// and sent once (the producer's own retries within its deadline); a failure is reported and
/// the next message follows after `backoff`.
#[cfg(not(feature = "store-forward"))]
fn direct(out: &mut Out, p: &Params, producer: &mut Gateway, net: &mut Net<'_>) {
    let (mut seq, mut in_flight, mut ok) = (0u32, false, 0u32);
    // After a failure, the next message waits until then.
    let mut resume = Instant::ZERO;
    let mut m = Meter::default();
    while seq < p.count {
        let t0 = net.eth.free_run();
        let t = now();
        if !in_flight && t >= resume && producer.can_send() {
            let mut body = Line::new();
            body.s(b"{\"gateway\":\"gw-1\",\"seq\":")
                .u(seq.into())
                .s(b",\"temp\":")
                .u((20 + seq % 7).into())
                .s(b".")
                .u((seq % 10).into())
                .s(b",\"humidity\":")
                .u((40 + seq % 13).into())
                .s(b"}");
            let mut k = [0; KEY];
            key(seq, &mut k);
            let msg = Message {
                body: body.bytes(),
                tags: Some("telemetry"),
                keys: Some(text(&k)),
                flag: 0,
            };
            m.start(t0);
            if producer.send(t, &msg).is_ok() {
                in_flight = true;
            } else {
                out.line(Line::new().s(b"FAIL ").u(seq.into()).s(b" submit-refused"));
                seq += 1;
                resume = t + Duration::from_millis(p.backoff.into());
            }
        }
        let (next, done) = net.poll(producer, t);
        let t1 = net.eth.free_run();
        m.poll(t0, t1);
        if let Some(c) = &done {
            m.last = t1;
            if report(out, seq, c) {
                ok += 1;
            } else {
                resume = t + Duration::from_millis(p.backoff.into());
            }
            in_flight = false;
            seq += 1;
            continue;
        }
        if next.is_none_or(|d| d > now()) {
            cortex_m::asm::wfi();
        }
    }
    m.report(out, p.count, ok, |_| {});
}
