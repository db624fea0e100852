//! # rmq-lan9118
//!
//! A polled [`smoltcp::phy::Device`] for the SMSC LAN9118 Ethernet controller (the NIC of the
//! Arm MPS2 boards, and the one QEMU's `mps2-an385`/`mps2-an386` emulate at `0x4020_0000`).
//!
//! - **No heap, no interrupts, no unsafe.** Register access goes through [`Regs`]: firmware
//!   implements it with volatile MMIO (the `unsafe` lives there), tests with a chip model.
//! - **One frame buffer each way**, lent by the caller: a received frame is copied out of the
//!   chip's RX data FIFO into the receive buffer; a frame to send is built in the transmit
//!   buffer and then written to the TX data FIFO (the chip sends it once its last word is in).
//! - **Only the registers QEMU models** are touched (an unmodelled one aborts QEMU): the four
//!   FIFO ports, `BYTE_TEST`, `HW_CFG`, `PMT_CTRL`, `TX_CFG`, `RX_FIFO_INF`, `TX_FIFO_INF`,
//!   `FREE_RUN`, and `MAC_CR`/`ADDRH`/`ADDRL` through the `MAC_CSR_CMD`/`MAC_CSR_DATA`
//!   handshake.
//!
//! The receive path drops a frame whose status has the error bit set, or that does not fit
//! the receive buffer, by reading all of its words (so the FIFO stays in step) and goes on
//! with the next one.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

/// Largest Ethernet frame without its CRC (1500-byte payload plus the 14-byte header).
pub const MAX_FRAME: usize = 1514;

/// Register offsets from the controller's base address.
pub mod reg {
    /// RX data FIFO port (read).
    pub const RX_DATA: u32 = 0x00;
    /// TX data FIFO port (write): command words, then data.
    pub const TX_DATA: u32 = 0x20;
    /// RX status FIFO port (read).
    pub const RX_STATUS: u32 = 0x40;
    /// TX status FIFO port (read).
    pub const TX_STATUS: u32 = 0x48;
    /// Endianness test register: reads [`BYTE_TEST_VALUE`](super::BYTE_TEST_VALUE).
    pub const BYTE_TEST: u32 = 0x64;
    /// TX configuration (bit 1: `TX_ON`).
    pub const TX_CFG: u32 = 0x70;
    /// Hardware configuration (bit 0: soft reset, self-clearing).
    pub const HW_CFG: u32 = 0x74;
    /// RX FIFO information: status FIFO entries in bits 23:16.
    pub const RX_FIFO_INF: u32 = 0x7C;
    /// TX FIFO information: status FIFO entries in bits 23:16, free data bytes in 15:0.
    pub const TX_FIFO_INF: u32 = 0x80;
    /// Power management control (bit 0: `READY`).
    pub const PMT_CTRL: u32 = 0x84;
    /// Free-running 25 MHz counter.
    pub const FREE_RUN: u32 = 0x9C;
    /// MAC CSR command: bit 31 busy, bit 30 read, bits 7:0 the MAC register index.
    pub const MAC_CSR_CMD: u32 = 0xA4;
    /// MAC CSR data.
    pub const MAC_CSR_DATA: u32 = 0xA8;
}

/// MAC register indices (through [`reg::MAC_CSR_CMD`]).
pub mod mac {
    /// MAC control: bit 3 `TXEN`, bit 2 `RXEN`.
    pub const CR: u32 = 1;
    /// MAC address bytes 4 and 5.
    pub const ADDRH: u32 = 2;
    /// MAC address bytes 0 to 3.
    pub const ADDRL: u32 = 3;
}

/// What [`reg::BYTE_TEST`] reads on a present, correctly wired chip.
pub const BYTE_TEST_VALUE: u32 = 0x8765_4321;

const SRST: u32 = 1;
const READY: u32 = 1;
const TX_ON: u32 = 1 << 1;
const CSR_BUSY: u32 = 1 << 31;
const MAC_CR_TXEN: u32 = 1 << 3;
const MAC_CR_RXEN: u32 = 1 << 2;
const RX_STATUS_ERROR: u32 = 1 << 15;
const TX_CMD_A_FIRST: u32 = 1 << 13;
const TX_CMD_A_LAST: u32 = 1 << 12;
/// Register reads a wait for the chip (reset, MAC CSR) may take before [`Error::Timeout`].
const WAIT_READS: u32 = 100_000;

/// Access to the controller's 32-bit registers at byte offset `off` from its base.
pub trait Regs {
    /// Reads a register (a FIFO port pops a word).
    fn read(&mut self, off: u32) -> u32;
    /// Writes a register (a FIFO port pushes a word).
    fn write(&mut self, off: u32, v: u32);
}

/// Why [`Lan9118::new`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// `BYTE_TEST` did not read [`BYTE_TEST_VALUE`]: no chip, or a bus/endianness problem.
    NotFound,
    /// The chip stayed busy (soft reset, `READY`, or a MAC CSR access).
    Timeout,
}

/// The driver: registers plus one receive and one transmit frame buffer.
#[derive(Debug)]
pub struct Lan9118<'a, R: Regs> {
    regs: R,
    rx: &'a mut [u8],
    tx: &'a mut [u8],
}

/// Polls `off` until `reg & mask == want`, at most [`WAIT_READS`] reads.
fn wait<R: Regs>(regs: &mut R, off: u32, mask: u32, want: u32) -> Result<(), Error> {
    for _ in 0..WAIT_READS {
        if regs.read(off) & mask == want {
            return Ok(());
        }
    }
    Err(Error::Timeout)
}

impl<'a, R: Regs> Lan9118<'a, R> {
    /// Resets the chip and starts it: soft reset, wait for `READY`, MAC address `mac`,
    /// transmitter and receiver on (which also ends the reset default of promiscuous mode:
    /// the chip then takes frames for `mac` and broadcasts). Frames up to `rx.len()` bytes
    /// are received and up to `tx.len()` sent (both at most [`MAX_FRAME`] are useful).
    ///
    /// # Errors
    /// [`Error`]: no chip, or it did not come out of reset.
    pub fn new(
        mut regs: R,
        rx: &'a mut [u8],
        tx: &'a mut [u8],
        mac: [u8; 6],
    ) -> Result<Self, Error> {
        if regs.read(reg::BYTE_TEST) != BYTE_TEST_VALUE {
            return Err(Error::NotFound);
        }
        regs.write(reg::HW_CFG, SRST);
        wait(&mut regs, reg::HW_CFG, SRST, 0)?;
        wait(&mut regs, reg::PMT_CTRL, READY, READY)?;
        let [a0, a1, a2, a3, a4, a5] = mac;
        let mut d = Lan9118 { regs, rx, tx };
        d.mac_write(mac::ADDRH, u32::from_le_bytes([a4, a5, 0, 0]))?;
        d.mac_write(mac::ADDRL, u32::from_le_bytes([a0, a1, a2, a3]))?;
        d.mac_write(mac::CR, MAC_CR_TXEN | MAC_CR_RXEN)?;
        d.regs.write(reg::TX_CFG, TX_ON);
        Ok(d)
    }

    /// Writes MAC register `index` through the CSR handshake (wait idle, data, command).
    fn mac_write(&mut self, index: u32, v: u32) -> Result<(), Error> {
        wait(&mut self.regs, reg::MAC_CSR_CMD, CSR_BUSY, 0)?;
        self.regs.write(reg::MAC_CSR_DATA, v);
        self.regs.write(reg::MAC_CSR_CMD, CSR_BUSY | index);
        wait(&mut self.regs, reg::MAC_CSR_CMD, CSR_BUSY, 0)
    }

    /// The chip's free-running counter ([`reg::FREE_RUN`], 25 MHz, wraps).
    pub fn free_run(&mut self) -> u32 {
        self.regs.read(reg::FREE_RUN)
    }

    /// The register access, for anything this driver does not do.
    pub fn regs(&mut self) -> &mut R {
        &mut self.regs
    }

    /// Copies the next good frame that fits into the receive buffer and returns its length
    /// (CRC stripped), dropping bad or oversized frames on the way; `None` when the RX status
    /// FIFO is empty.
    #[inline(never)]
    fn next_frame(&mut self) -> Option<usize> {
        while (self.regs.read(reg::RX_FIFO_INF) >> 16) & 0xFF != 0 {
            let status = self.regs.read(reg::RX_STATUS);
            // The length includes the 4-byte CRC.
            let len = ((status >> 16) & 0x3FFF) as usize;
            let frame = len.saturating_sub(4);
            let keep = status & RX_STATUS_ERROR == 0 && len > 4 && frame <= self.rx.len();
            let mut words = len.div_ceil(4);
            if keep {
                // Little-endian words; the last one may hold the first CRC bytes too.
                let mut chunks = self.rx[..frame].chunks_exact_mut(4);
                for c in &mut chunks {
                    c.copy_from_slice(&self.regs.read(reg::RX_DATA).to_le_bytes());
                    words -= 1;
                }
                let rest = chunks.into_remainder();
                if !rest.is_empty() {
                    let w = self.regs.read(reg::RX_DATA).to_le_bytes();
                    rest.copy_from_slice(&w[..rest.len()]);
                    words -= 1;
                }
            }
            // The rest of the CRC, or the whole dropped frame.
            for _ in 0..words {
                self.regs.read(reg::RX_DATA);
            }
            if keep {
                return Some(frame);
            }
        }
        None
    }

    /// Whether the TX data FIFO has room for a whole frame and its command words.
    fn tx_room(&mut self) -> bool {
        (self.regs.read(reg::TX_FIFO_INF) & 0xFFFF) as usize >= self.tx.len() + 8
    }
}

/// Writes `frame` to the TX data FIFO (the chip sends it once the last word is in), after
/// taking the status of earlier frames (the chip stops when its status FIFO is full). Not
/// inlined: every `TxToken::consume` instance shares it.
#[inline(never)]
fn push_frame<R: Regs>(regs: &mut R, frame: &[u8]) {
    while (regs.read(reg::TX_FIFO_INF) >> 16) & 0xFF != 0 {
        regs.read(reg::TX_STATUS);
    }
    // One segment: command A (first and last, buffer size), B (frame length; tag = 0).
    let n = frame.len() as u32;
    regs.write(reg::TX_DATA, TX_CMD_A_FIRST | TX_CMD_A_LAST | n);
    regs.write(reg::TX_DATA, n);
    let mut chunks = frame.chunks_exact(4);
    for c in &mut chunks {
        let mut w = [0u8; 4];
        w.copy_from_slice(c);
        regs.write(reg::TX_DATA, u32::from_le_bytes(w));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 4];
        w[..rest.len()].copy_from_slice(rest);
        regs.write(reg::TX_DATA, u32::from_le_bytes(w));
    }
}

/// A received frame, in the driver's receive buffer.
#[derive(Debug)]
pub struct RxToken<'t>(&'t [u8]);

/// Room for one frame to send: the transmit buffer and the registers to push it out with.
#[derive(Debug)]
pub struct TxToken<'t, R: Regs> {
    regs: &'t mut R,
    buf: &'t mut [u8],
}

impl phy::RxToken for RxToken<'_> {
    fn consume<T, F: FnOnce(&[u8]) -> T>(self, f: F) -> T {
        f(self.0)
    }
}

impl<R: Regs> phy::TxToken for TxToken<'_, R> {
    fn consume<T, F: FnOnce(&mut [u8]) -> T>(self, len: usize, f: F) -> T {
        let n = len.min(self.buf.len());
        let buf = &mut self.buf[..n];
        let r = f(buf);
        push_frame(self.regs, buf);
        r
    }
}

impl<R: Regs> phy::Device for Lan9118<'_, R> {
    type RxToken<'t>
        = RxToken<'t>
    where
        Self: 't;
    type TxToken<'t>
        = TxToken<'t, R>
    where
        Self: 't;

    fn receive(&mut self, _: Instant) -> Option<(RxToken<'_>, TxToken<'_, R>)> {
        // The token pair includes room to answer: leave the frame in the FIFO until there is.
        if !self.tx_room() {
            return None;
        }
        let n = self.next_frame()?;
        let Lan9118 { regs, rx, tx } = self;
        Some((RxToken(&rx[..n]), TxToken { regs, buf: tx }))
    }

    fn transmit(&mut self, _: Instant) -> Option<TxToken<'_, R>> {
        if !self.tx_room() {
            return None;
        }
        Some(TxToken {
            regs: &mut self.regs,
            buf: self.tx,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = self.tx.len().min(self.rx.len()).min(MAX_FRAME);
        c
    }
}

#[cfg(test)]
mod tests;
