//! The driver against a model of the chip: FIFOs as queues, the MAC CSR handshake with a busy
//! period, a soft reset that takes a few reads, and a panic on any register the driver must
//! not touch (QEMU aborts on unmodelled ones).

use std::collections::VecDeque;
use std::vec::Vec;

use smoltcp::phy::{Device, RxToken as _, TxToken as _};
use smoltcp::time::Instant;

use super::*;

const MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];
const CRC: [u8; 4] = [0xC1, 0xC2, 0xC3, 0xC4];

/// Reads a busy flag stays set for.
const BUSY_READS: u32 = 2;

#[derive(Debug, Default)]
struct Chip {
    /// Every write, in order.
    writes: Vec<(u32, u32)>,
    byte_test: u32,
    /// Reads of HW_CFG left before the soft reset ends (and READY comes back).
    reset_left: u32,
    /// Reads of PMT_CTRL left before READY.
    ready_left: u32,
    in_reset: bool,
    csr_busy_left: u32,
    csr_data: u32,
    mac_cr: u32,
    addrh: u32,
    addrl: u32,
    tx_cfg: u32,
    rx_status: VecDeque<u32>,
    rx_data: VecDeque<u32>,
    /// Words of the TX frame being written: command A, command B, data.
    tx_words: Vec<u32>,
    sent: Vec<Vec<u8>>,
    tx_status: VecDeque<u32>,
    free_run: u32,
}

impl Chip {
    fn new() -> Self {
        Chip {
            byte_test: BYTE_TEST_VALUE,
            // Reset default: promiscuous, receiver off.
            mac_cr: 1 << 18,
            ..Chip::default()
        }
    }

    /// A frame as the chip queues it: status (length with CRC, error bit), data words with
    /// the CRC after the last byte.
    fn push_rx(&mut self, frame: &[u8], error: bool) {
        let mut bytes = frame.to_vec();
        bytes.extend_from_slice(&CRC);
        self.rx_status
            .push_back(((bytes.len() as u32) << 16) | if error { 1 << 15 } else { 0 });
        for c in bytes.chunks(4) {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            self.rx_data.push_back(u32::from_le_bytes(w));
        }
    }

    fn tx_word(&mut self, v: u32) {
        self.tx_words.push(v);
        let a = self.tx_words[0];
        if self.tx_words.len() < 2 {
            return;
        }
        assert_eq!(a & 0x3000, 0x3000, "one segment: first and last bits");
        let size = (a & 0x7FF) as usize;
        let b = self.tx_words[1];
        assert_eq!((b & 0x7FF) as usize, size, "packet length = buffer size");
        let data = &self.tx_words[2..];
        if data.len() == size.div_ceil(4) {
            let mut f: Vec<u8> = data.iter().flat_map(|w| w.to_le_bytes()).collect();
            f.truncate(size);
            self.sent.push(f);
            self.tx_status.push_back(b & 0xFFFF_0000);
            self.tx_words.clear();
        }
    }
}

impl Regs for &mut Chip {
    fn read(&mut self, off: u32) -> u32 {
        match off {
            reg::RX_DATA => self.rx_data.pop_front().expect("RX data FIFO underrun"),
            reg::RX_STATUS => self.rx_status.pop_front().expect("RX status FIFO empty"),
            reg::TX_STATUS => self.tx_status.pop_front().expect("TX status FIFO empty"),
            reg::BYTE_TEST => self.byte_test,
            reg::HW_CFG => {
                if self.in_reset && self.reset_left > 0 {
                    self.reset_left -= 1;
                    return SRST;
                }
                self.in_reset = false;
                0x0005_0004
            }
            reg::PMT_CTRL => {
                assert!(!self.in_reset, "PMT_CTRL read during the soft reset");
                if self.ready_left > 0 {
                    self.ready_left -= 1;
                    return 0;
                }
                READY
            }
            reg::RX_FIFO_INF => {
                ((self.rx_status.len() as u32) << 16) | (self.rx_data.len() as u32 * 4)
            }
            reg::TX_FIFO_INF => ((self.tx_status.len() as u32) << 16) | 4608,
            reg::FREE_RUN => {
                self.free_run += 7;
                self.free_run
            }
            reg::MAC_CSR_CMD => {
                if self.csr_busy_left > 0 {
                    self.csr_busy_left -= 1;
                    return CSR_BUSY;
                }
                0
            }
            _ => panic!("read of register {off:#x}, which the driver must not touch"),
        }
    }

    fn write(&mut self, off: u32, v: u32) {
        self.writes.push((off, v));
        match off {
            reg::TX_DATA => self.tx_word(v),
            reg::HW_CFG => {
                assert_eq!(v, SRST, "only the soft reset is written");
                self.in_reset = true;
                self.reset_left = BUSY_READS;
                self.ready_left = BUSY_READS;
                self.mac_cr = 1 << 18;
            }
            reg::TX_CFG => self.tx_cfg = v,
            reg::MAC_CSR_DATA => {
                assert_eq!(self.csr_busy_left, 0, "CSR data written while busy");
                self.csr_data = v;
            }
            reg::MAC_CSR_CMD => {
                assert_eq!(self.csr_busy_left, 0, "CSR command written while busy");
                assert_eq!(v & 0xC000_0000, CSR_BUSY, "a write command");
                let r = match v & 0xFF {
                    mac::CR => &mut self.mac_cr,
                    mac::ADDRH => &mut self.addrh,
                    mac::ADDRL => &mut self.addrl,
                    i => panic!("MAC CSR index {i} is not modelled"),
                };
                *r = self.csr_data;
                self.csr_busy_left = BUSY_READS;
            }
            _ => panic!("write of register {off:#x}, which the driver must not touch"),
        }
    }
}

fn ready_chip() -> Chip {
    let mut chip = Chip::new();
    let (mut rx, mut tx) = ([0u8; MAX_FRAME], [0u8; MAX_FRAME]);
    Lan9118::new(&mut chip, &mut rx, &mut tx, MAC).expect("init");
    chip.writes.clear();
    chip
}

fn frame(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn recv<R: Regs>(d: &mut Lan9118<'_, R>) -> Option<Vec<u8>> {
    let (rx, _tx) = d.receive(Instant::ZERO)?;
    Some(rx.consume(|b| b.to_vec()))
}

#[test]
fn init_resets_waits_and_starts_the_mac() {
    let mut chip = Chip::new();
    let (mut rx, mut tx) = ([0u8; MAX_FRAME], [0u8; MAX_FRAME]);
    let d = Lan9118::new(&mut chip, &mut rx, &mut tx, MAC).expect("init");
    assert_eq!(d.capabilities().max_transmission_unit, MAX_FRAME);
    assert!(
        !chip.in_reset && chip.ready_left == 0,
        "waited for the reset and READY"
    );
    assert_eq!(
        chip.mac_cr,
        MAC_CR_TXEN | MAC_CR_RXEN,
        "TX and RX on, not promiscuous"
    );
    assert_eq!(chip.addrl, 0x0000_0002, "bytes 0..4, little-endian");
    assert_eq!(chip.addrh, 0x0000_0200, "bytes 4..6");
    assert_eq!(chip.tx_cfg, TX_ON);
    let offs: Vec<u32> = chip.writes.iter().map(|w| w.0).collect();
    assert_eq!(offs[0], reg::HW_CFG, "the soft reset comes first");
    // Each MAC register: data, then command.
    assert_eq!(
        offs[1..7],
        [reg::MAC_CSR_DATA, reg::MAC_CSR_CMD].repeat(3)[..]
    );
    assert_eq!(
        chip.writes[6],
        (reg::MAC_CSR_CMD, CSR_BUSY | mac::CR),
        "MAC_CR last"
    );
}

#[test]
fn init_fails_without_a_chip_or_when_it_stays_in_reset() {
    let (mut rx, mut tx) = ([0u8; 64], [0u8; 64]);
    let mut chip = Chip::new();
    chip.byte_test = 0;
    assert_eq!(
        Lan9118::new(&mut chip, &mut rx, &mut tx, MAC).err(),
        Some(Error::NotFound)
    );
    assert!(chip.writes.is_empty(), "nothing written to a missing chip");

    struct Stuck;
    impl Regs for Stuck {
        fn read(&mut self, off: u32) -> u32 {
            if off == reg::BYTE_TEST {
                BYTE_TEST_VALUE
            } else {
                SRST
            }
        }
        fn write(&mut self, _: u32, _: u32) {}
    }
    assert_eq!(
        Lan9118::new(Stuck, &mut rx, &mut tx, MAC).err(),
        Some(Error::Timeout)
    );
}

#[test]
fn receives_every_length_and_strips_the_crc() {
    let mut chip = ready_chip();
    let (mut rx, mut tx) = ([0u8; MAX_FRAME], [0u8; MAX_FRAME]);
    let frames: Vec<Vec<u8>> = (60..68)
        .chain([14, MAX_FRAME])
        .map(|n| frame(n, n as u8))
        .collect();
    for f in &frames {
        chip.push_rx(f, false);
    }
    let mut d = Lan9118 {
        regs: &mut chip,
        rx: &mut rx,
        tx: &mut tx,
    };
    for f in &frames {
        assert_eq!(recv(&mut d).as_ref(), Some(f), "frame of {} bytes", f.len());
    }
    assert_eq!(recv(&mut d), None);
    assert!(
        chip.rx_data.is_empty() && chip.rx_status.is_empty(),
        "FIFOs drained"
    );
}

#[test]
fn no_frame_is_none() {
    let mut chip = ready_chip();
    let (mut rx, mut tx) = ([0u8; MAX_FRAME], [0u8; MAX_FRAME]);
    let mut d = Lan9118 {
        regs: &mut chip,
        rx: &mut rx,
        tx: &mut tx,
    };
    assert!(d.receive(Instant::ZERO).is_none());
    assert!(d.transmit(Instant::ZERO).is_some());
}

#[test]
fn oversized_and_bad_frames_are_dropped_in_step() {
    let mut chip = ready_chip();
    let (mut rx, mut tx) = ([0u8; 100], [0u8; MAX_FRAME]);
    let (big, bad, good, last) = (frame(101, 1), frame(61, 2), frame(100, 3), frame(42, 4));
    chip.push_rx(&big, false);
    chip.push_rx(&bad, true);
    chip.push_rx(&good, false);
    chip.push_rx(&frame(1000, 5), false);
    chip.push_rx(&last, false);
    let mut d = Lan9118 {
        regs: &mut chip,
        rx: &mut rx,
        tx: &mut tx,
    };
    assert_eq!(recv(&mut d), Some(good));
    assert_eq!(recv(&mut d), Some(last));
    assert_eq!(recv(&mut d), None);
    assert!(chip.rx_data.is_empty() && chip.rx_status.is_empty());
}

#[test]
fn transmits_command_words_then_data_and_drains_tx_status() {
    let mut chip = ready_chip();
    chip.tx_status.extend([0xAAAA_0000, 0xBBBB_0000]);
    let (mut rx, mut tx) = ([0u8; MAX_FRAME], [0u8; MAX_FRAME]);
    let mut d = Lan9118 {
        regs: &mut chip,
        rx: &mut rx,
        tx: &mut tx,
    };
    let mut sent = Vec::new();
    for n in [61usize, 64, 14, MAX_FRAME] {
        let f = frame(n, 9);
        let t = d.transmit(Instant::ZERO).expect("room");
        t.consume(n, |b| b.copy_from_slice(&f));
        sent.push(f);
    }
    // A reply through the token that comes with a received frame.
    d.regs.push_rx(&frame(60, 1), false);
    let (rxt, txt) = d.receive(Instant::ZERO).expect("frame");
    rxt.consume(|_| ());
    txt.consume(20, |b| b.fill(0x55));
    sent.push(std::vec![0x55; 20]);
    assert_eq!(chip.sent, sent);
    assert!(chip.tx_words.is_empty(), "every frame complete");
    assert!(
        chip.tx_status.len() <= 1,
        "status of earlier frames drained"
    );
    let a: Vec<u32> = chip
        .writes
        .iter()
        .filter(|w| w.0 == reg::TX_DATA)
        .map(|w| w.1)
        .take(2)
        .collect();
    assert_eq!(a, [0x3000 | 61, 61]);
}

#[test]
fn free_run_reads_the_counter() {
    let mut chip = ready_chip();
    let (mut rx, mut tx) = ([0u8; 64], [0u8; 64]);
    let mut d = Lan9118 {
        regs: &mut chip,
        rx: &mut rx,
        tx: &mut tx,
    };
    let a = d.free_run();
    assert_eq!(d.free_run().wrapping_sub(a), 7);
}
