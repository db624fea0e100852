//! A recording TCP relay: listens on 127.0.0.1, forwards each accepted connection to an upstream
//! (NameServer or broker) and records every remoting frame in both directions.
//!
//! Frames are split on the 4-byte big-endian length prefix (docs/protocol/WIRE.md §1): a frame is the prefix
//! plus `length` bytes. Bytes are forwarded as they arrive, independent of the framing, so the
//! relay never changes the traffic. The recording file has one line per frame:
//!
//! ```text
//! <connection number> <c2s|s2c> <hex of the whole frame, length prefix included>
//! ```

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Direction of a recorded frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to server.
    ClientToServer,
    /// Server to client.
    ServerToClient,
}

impl Direction {
    fn tag(self) -> &'static str {
        match self {
            Direction::ClientToServer => "c2s",
            Direction::ServerToClient => "s2c",
        }
    }
}

/// One recorded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Connection number, from 0 in accept order.
    pub conn: u64,
    /// Direction.
    pub dir: Direction,
    /// The whole frame, length prefix included.
    pub bytes: Vec<u8>,
    /// When the relay had read the whole frame (and forwarded it).
    pub at: Instant,
}

#[derive(Debug)]
struct Shared {
    frames: Mutex<Vec<Frame>>,
    file: Mutex<BufWriter<File>>,
    stop: AtomicBool,
}

impl Shared {
    fn record(&self, frame: Frame) {
        {
            let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
            let hex: String = frame.bytes.iter().map(|b| format!("{b:02x}")).collect();
            let _ = writeln!(f, "{} {} {hex}", frame.conn, frame.dir.tag());
            let _ = f.flush();
        }
        self.frames
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(frame);
    }
}

/// A running relay; stops accepting on drop (open connections end when either side closes).
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    /// Listens on `127.0.0.1:0`, forwards to `upstream`, records frames to `record_path`.
    pub fn start(upstream: SocketAddr, record_path: &Path) -> io::Result<Relay> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), upstream, record_path)
    }

    /// Like [`start`](Self::start) on a given listen address.
    pub fn start_on(
        listen: SocketAddr,
        upstream: SocketAddr,
        record_path: &Path,
    ) -> io::Result<Relay> {
        let listener = TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            frames: Mutex::new(Vec::new()),
            file: Mutex::new(BufWriter::new(File::create(record_path)?)),
            stop: AtomicBool::new(false),
        });
        let sh = shared.clone();
        let accept = std::thread::spawn(move || {
            Acceptor::RELAY.run(&listener, upstream, &sh.stop, |n, [c, s], [c2, s2]| {
                let sh2 = sh.clone();
                std::thread::spawn(move || pump(c, s, n, Direction::ClientToServer, &sh2));
                let sh2 = sh.clone();
                std::thread::spawn(move || pump(s2, c2, n, Direction::ServerToClient, &sh2));
            });
        });
        Ok(Relay {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// Where clients should connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every frame recorded so far.
    pub fn frames(&self) -> Vec<Frame> {
        self.shared
            .frames
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// Accepts clients and pairs each with a connection upstream ([`run`](Self::run)): waits
/// `connect` for the upstream, and `idle` (no client waiting) or `error` (accept failed) before
/// polling the listener again.
pub(crate) struct Acceptor {
    pub(crate) connect: Duration,
    pub(crate) idle: Duration,
    pub(crate) error: Duration,
}

impl Acceptor {
    /// The recording relay's (and the proxy's).
    pub(crate) const RELAY: Acceptor = Acceptor {
        connect: Duration::from_secs(5),
        idle: Duration::from_millis(20),
        error: Duration::from_millis(20),
    };

    /// Accepts on the non-blocking `listener` until `stop`. Each client is made blocking and
    /// paired with a new connection to `upstream` (a client whose upstream refuses is shut
    /// down); both get no-delay, and `serve` gets the connection number (from 0, counting
    /// paired connections), `[client, server]` and a clone of each, `[client, server]` again.
    pub(crate) fn run(
        &self,
        listener: &TcpListener,
        upstream: SocketAddr,
        stop: &AtomicBool,
        mut serve: impl FnMut(u64, [TcpStream; 2], [TcpStream; 2]),
    ) {
        let mut conns = 0u64;
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((client, _)) => {
                    let _ = client.set_nonblocking(false);
                    let Ok(server) = TcpStream::connect_timeout(&upstream, self.connect) else {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    };
                    let conn = conns;
                    conns += 1;
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                        continue;
                    };
                    serve(conn, [client, server], [c2, s2]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(self.idle),
                Err(_) => std::thread::sleep(self.error),
            }
        }
    }
}

/// Reads one whole remoting frame, length prefix included, whose length (the prefix's value)
/// is in `lengths`; a length outside it is `InvalidData` (nothing more read).
pub(crate) fn read_frame(s: &mut impl Read, lengths: RangeInclusive<usize>) -> io::Result<Vec<u8>> {
    let mut prefix = [0u8; 4];
    s.read_exact(&mut prefix)?;
    let len = u32::from_be_bytes(prefix) as usize;
    if !lengths.contains(&len) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "bad length"));
    }
    let mut frame = vec![0u8; 4 + len];
    frame[..4].copy_from_slice(&prefix);
    s.read_exact(&mut frame[4..])?;
    Ok(frame)
}

/// Copies `from` to `to`, recording complete frames; on EOF or error shuts both down.
fn pump(mut from: TcpStream, mut to: TcpStream, conn: u64, dir: Direction, shared: &Shared) {
    let mut buf = [0u8; 16 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        pending.extend_from_slice(&buf[..n]);
        while pending.len() >= 4 {
            let len = u32::from_be_bytes([pending[0], pending[1], pending[2], pending[3]]);
            let total = usize::try_from(len).unwrap_or(usize::MAX).saturating_add(4);
            if pending.len() < total {
                break;
            }
            let rest = pending.split_off(total);
            shared.record(Frame {
                conn,
                dir,
                bytes: std::mem::replace(&mut pending, rest),
                at: Instant::now(),
            });
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relays_and_splits_frames() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let up = server.local_addr().unwrap();
        let echo = std::thread::spawn(move || {
            let (mut s, _) = server.accept().unwrap();
            let mut got = [0u8; 11];
            s.read_exact(&mut got).unwrap();
            // Reply with one frame written in two pieces.
            s.write_all(&[0, 0, 0, 3, b'x']).unwrap();
            s.flush().unwrap();
            std::thread::sleep(Duration::from_millis(20));
            s.write_all(b"yz").unwrap();
            got
        });
        let path = std::env::temp_dir().join(format!("rmq-relay-test-{}.txt", std::process::id()));
        let relay = Relay::start(up, &path).unwrap();
        let mut c = TcpStream::connect(relay.addr()).unwrap();
        // Two frames in one write: len 1 "a", len 2 "bc" (4+1 + 4+2 = 11 bytes).
        c.write_all(&[0, 0, 0, 1, b'a', 0, 0, 0, 2, b'b', b'c'])
            .unwrap();
        let mut back = [0u8; 7];
        c.read_exact(&mut back).unwrap();
        assert_eq!(back, [0, 0, 0, 3, b'x', b'y', b'z']);
        assert_eq!(
            echo.join().unwrap(),
            [0, 0, 0, 1, b'a', 0, 0, 0, 2, b'b', b'c']
        );
        // The recording thread may finish after the reader saw the bytes.
        let mut frames = relay.frames();
        for _ in 0..100 {
            if frames.len() == 3 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
            frames = relay.frames();
        }
        let c2s: Vec<_> = frames
            .iter()
            .filter(|f| f.dir == Direction::ClientToServer)
            .collect();
        let s2c: Vec<_> = frames
            .iter()
            .filter(|f| f.dir == Direction::ServerToClient)
            .collect();
        assert_eq!(c2s.len(), 2);
        assert_eq!(c2s[0].bytes, [0, 0, 0, 1, b'a']);
        assert_eq!(c2s[1].bytes, [0, 0, 0, 2, b'b', b'c']);
        assert_eq!(s2c.len(), 1);
        assert_eq!(s2c[0].bytes, [0, 0, 0, 3, b'x', b'y', b'z']);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("0 c2s 0000000161\n"), "{text}");
        assert!(text.contains("0 s2c 0000000378797a\n"), "{text}");
        let _ = std::fs::remove_file(&path);
    }
}
