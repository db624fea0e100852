//! The QEMU side of the firmware tests: building an image, running it on `mps2-an386` with its
//! NIC on `tap0`, and its report lines.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

/// Fails with what to install when QEMU is missing.
pub fn require_qemu() {
    let qemu = Command::new("qemu-system-arm").arg("--version").output();
    assert!(
        qemu.is_ok_and(|o| o.status.success()),
        "qemu-system-arm is missing: install it (Debian: apt-get install qemu-system-arm; \
         .ci/run does this)"
    );
}

/// Builds the firmware (its own workspace; the default image in its usual target directory,
/// where `size.sh` measures it) and returns the ELF's path.
pub fn build_firmware(feature: Option<&str>) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime-smoltcp/firmware");
    let target = match feature {
        Some(f) => dir.join("target").join(f),
        None => dir.join("target"),
    };
    let name = feature.unwrap_or("default features");
    let st = Command::new(env!("CARGO"))
        .current_dir(&dir)
        .args(["build", "--release", "--locked"])
        .args(feature.map(|f| ["--features", f]).into_iter().flatten())
        .arg("--target-dir")
        .arg(&target)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .expect("run cargo");
    assert!(
        st.success(),
        "the firmware does not build ({name}); it needs the thumbv7em-none-eabihf target \
         (rustup target add thumbv7em-none-eabihf)"
    );
    target.join("thumbv7em-none-eabihf/release/rmq-firmware")
}

/// A running image: its report lines arrive on a channel.
pub struct Firmware {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
}

impl Firmware {
    /// `icount`: one instruction per nanosecond of virtual time (`-icount shift=0`), which
    /// the instruction figures need; without it the guest's clock follows the host's, which a
    /// test timing an outage on the host's clock against the guest's message rate needs (under
    /// `-icount` a busy host slows the guest's clock down).
    pub fn start(image: &str, args: &[String], icount: bool) -> Firmware {
        let mut semi = String::from("enable=on,target=native,arg=rmq-firmware");
        for a in args {
            semi.push_str(",arg=");
            semi.push_str(a);
        }
        let mut child = Command::new("qemu-system-arm")
            .args(["-M", "mps2-an386", "-display", "none", "-nographic"])
            .args(if icount {
                &["-icount", "shift=0"][..]
            } else {
                &[]
            })
            .args(["-semihosting-config", &semi])
            .args([
                "-nic",
                "tap,ifname=tap0,script=no,downscript=no,model=lan9118",
            ])
            .arg("-kernel")
            .arg(image)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // Semihosting output goes to QEMU's standard error.
            .stderr(Stdio::piped())
            .spawn()
            .expect("start qemu-system-arm");
        let out = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Firmware { child, lines }
    }
}

impl Drop for Firmware {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
