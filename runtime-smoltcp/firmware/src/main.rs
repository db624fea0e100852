//! Link probe: a firmware image with no global allocator that runs rmq-core code paths, so the
//! linker keeps them and `size.sh` can report what rmq costs in flash and RAM.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use panic_halt as _;
use rmq_core::time::{Duration, Instant};

#[entry]
fn main() -> ! {
    let mut now = Instant::ZERO;
    loop {
        now += Duration::from_millis(1000);
        cortex_m::asm::wfi();
        core::hint::black_box(now);
    }
}
