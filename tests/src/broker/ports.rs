//! Port blocks for clusters, safe across parallel tests and parallel test processes.
//!
//! A cluster takes one block of [`BLOCK`] consecutive ports below the Linux ephemeral range
//! (which starts at 32768), claimed by creating `<tmp>/rmq-test-ports/block-<n>.lock` with
//! `create_new` (the file holds the owner's pid; a lock whose pid is gone is stale and reclaimed).
//! Inside block `B`: NameServer `B`; broker `i` listens on `B + 3 + 4i`, which also takes
//! `B + 1 + 4i` (fast/VIP server, listenPort - 2) and `B + 4 + 4i` (HA, listenPort + 1).
//! A proxy started in front of the cluster takes `B + 17` (remoting) and `B + 18` (gRPC), past
//! the last broker's ports; they are checked when the proxy starts, not when the block is
//! claimed.
//! The controller embedded in the NameServer (controller mode) takes `B + 19`, checked when the
//! cluster starts.

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;

use super::HarnessError;

/// Ports per block.
pub(crate) const BLOCK: u16 = 20;
/// Most brokers a block can hold.
pub(crate) const MAX_BROKERS: usize = 4;
const FIRST: u16 = 20_000;
const BLOCKS: u16 = (32_760 - FIRST) / BLOCK;

/// A claimed block; the claim is released on drop.
#[derive(Debug)]
pub(crate) struct PortBlock {
    base: u16,
    lock: PathBuf,
}

impl PortBlock {
    /// The NameServer port.
    pub(crate) fn namesrv(&self) -> u16 {
        self.base
    }

    /// The main listen port of broker `i` (`i < MAX_BROKERS`).
    pub(crate) fn broker(&self, i: usize) -> u16 {
        let i = u16::try_from(i).unwrap_or(0);
        self.base + 3 + 4 * i
    }

    /// The proxy's remoting listen port (`remotingListenPort`).
    pub(crate) fn proxy_remoting(&self) -> u16 {
        self.base + 17
    }

    /// The proxy's gRPC port (`grpcServerPort`).
    pub(crate) fn proxy_grpc(&self) -> u16 {
        self.base + 18
    }

    /// The port of the controller embedded in the NameServer (its DLedger peer address).
    pub(crate) fn controller(&self) -> u16 {
        self.base + 19
    }

    /// Every port a cluster with `brokers` brokers binds.
    fn used(&self, brokers: usize) -> Vec<u16> {
        let mut v = vec![self.namesrv()];
        for i in 0..brokers {
            let p = self.broker(i);
            v.extend([p - 2, p, p + 1]);
        }
        v
    }

    /// Claims a free block whose ports are all bindable right now.
    pub(crate) fn claim(brokers: usize) -> Result<PortBlock, HarnessError> {
        let dir = std::env::temp_dir().join("rmq-test-ports");
        fs::create_dir_all(&dir)
            .map_err(|e| HarnessError::new(format!("create {}: {e}", dir.display())))?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
            ^ std::process::id().wrapping_mul(2_654_435_761);
        let start = u16::try_from(seed % u32::from(BLOCKS)).unwrap_or(0);
        for k in 0..BLOCKS {
            let n = (start + k) % BLOCKS;
            let lock = dir.join(format!("block-{n}.lock"));
            if !try_lock(&lock) {
                continue;
            }
            let block = PortBlock {
                base: FIRST + n * BLOCK,
                lock,
            };
            if block.used(brokers).iter().all(|p| port_free(*p)) {
                return Ok(block);
            }
            // `block` drops here and releases the lock file.
        }
        Err(HarnessError::new(
            "no free block of ports in 20000..32760".into(),
        ))
    }
}

impl Drop for PortBlock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.lock);
    }
}

fn try_lock(path: &PathBuf) -> bool {
    for _ in 0..2 {
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(mut f) => {
                let _ = writeln!(f, "{}", std::process::id());
                return true;
            }
            Err(_) => {
                let owner = fs::read_to_string(path)
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok());
                match owner {
                    Some(pid) if std::path::Path::new(&format!("/proc/{pid}")).exists() => {
                        return false;
                    }
                    // Maybe being written by its owner right now.
                    None if fs::metadata(path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_none_or(|age| age.as_secs() < 10) =>
                    {
                        return false;
                    }
                    // Stale (owner gone, or never written): reclaim once.
                    _ => {
                        let _ = fs::remove_file(path);
                    }
                }
            }
        }
    }
    false
}

/// True when nothing listens on `port` on any interface (the HA listener binds 0.0.0.0).
pub(crate) fn port_free(port: u16) -> bool {
    TcpListener::bind(("0.0.0.0", port)).is_ok()
}
