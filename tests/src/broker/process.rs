//! JVM child processes that cannot outlive the test process.
//!
//! Each JVM is started as `sh -c '<watchdog> & exec java …'`: the shell forks a tiny loop that
//! checks once a second that the test process (and the JVM) still exist, then `exec`s the JVM
//! under the shell's own pid. When the test process disappears, even by SIGKILL where no `Drop`
//! runs, the loop sends SIGKILL to the JVM. The pid of the [`Child`] is the JVM's pid.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::HarnessError;

const WATCHDOG: &str = "p=$1; shift; \
    ( while kill -0 \"$p\" 2>/dev/null && kill -0 $$ 2>/dev/null; do sleep 1; done; \
      kill -0 \"$p\" 2>/dev/null || kill -9 $$ 2>/dev/null ) </dev/null >/dev/null 2>&1 & \
    exec \"$@\"";

/// A running JVM whose stdout and stderr go to `out`.
#[derive(Debug)]
pub(crate) struct Jvm {
    child: Child,
    /// File with the JVM's stdout and stderr.
    pub(crate) out: PathBuf,
}

impl Jvm {
    /// Starts `java <args>` with `env`, output appended to `out`.
    pub(crate) fn spawn(
        java: &Path,
        args: &[String],
        env: &[(&str, String)],
        cwd: &Path,
        out: PathBuf,
    ) -> Result<Jvm, HarnessError> {
        let file = File::create(&out)
            .map_err(|e| HarnessError::new(format!("create {}: {e}", out.display())))?;
        let err = file
            .try_clone()
            .map_err(|e| HarnessError::new(format!("dup {}: {e}", out.display())))?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(WATCHDOG)
            .arg("rmq-jvm-watchdog")
            .arg(std::process::id().to_string())
            .arg(java)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .map_err(|e| HarnessError::new(format!("cannot start {}: {e}", java.display())))?;
        Ok(Jvm { child, out })
    }

    /// The JVM's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` once the JVM has exited.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL and reap.
    pub(crate) fn kill9(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// Waits up to `timeout` for the JVM to exit by itself; kills it on timeout.
    pub(crate) fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill9();
        None
    }

    /// Everything the JVM printed so far.
    pub(crate) fn output(&self) -> String {
        fs::read(&self.out)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Waits until the JVM printed a line containing `needle` and `addr` accepts a TCP
    /// connection. `offset` skips output printed before (a restart appends to a new file, so 0).
    pub(crate) fn wait_ready(
        &mut self,
        needle: &str,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<(), HarnessError> {
        let deadline = Instant::now() + timeout;
        let mut seen = false;
        loop {
            if !seen {
                seen = file_contains(&self.out, needle);
            }
            if seen && TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
                return Ok(());
            }
            if let Some(s) = self.exited() {
                return Err(HarnessError::new(format!(
                    "JVM (output {}) exited with {s} before printing {needle:?}",
                    self.out.display()
                )));
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::new(format!(
                    "timeout after {timeout:?} waiting for {needle:?} (seen: {seen}) and a TCP \
                     connect to {addr}; output in {}",
                    self.out.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn file_contains(path: &Path, needle: &str) -> bool {
    fs::read(path).is_ok_and(|b| String::from_utf8_lossy(&b).contains(needle))
}

/// The last `n` lines of a file (empty if it does not exist); reads at most the last 256 KiB.
pub(crate) fn tail(path: &Path, n: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(256 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// True while `/proc/<pid>` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // Field 3 (after the parenthesised command name) is the state.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z" | "X") | None)
        }
        Err(_) => false,
    }
}
