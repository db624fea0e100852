//! Private network namespaces for the gateway tests: the outer test re-runs its own test binary
//! inside `unshare -n` to execute an `#[ignore]`d inner test, which sets up a TAP device there
//! (`tests/netns/tap.sh`). Nothing outside the namespace is touched.

use std::path::Path;
use std::process::Command;

/// Environment variable set for the inner run (the inner test returns early without it).
pub const INNER_ENV: &str = "RMQ_NETNS_INNER";

/// Runs the test named `inner` of the current test binary inside a new network namespace,
/// with `env` added, prints its output, and fails unless it ran and passed. Needs root and
/// util-linux's `unshare`.
pub fn run_inner(inner: &str, env: &[(&str, &Path)]) {
    let exe = std::env::current_exe().expect("the test binary");
    let mut cmd = Command::new("unshare");
    cmd.args(["-n", "--"])
        .arg(&exe)
        .args([inner, "--exact", "--ignored", "--nocapture"])
        .env(INNER_ENV, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run unshare (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- inner stdout\n{stdout}\n--- inner stderr\n{stderr}");
    assert!(
        out.status.success(),
        "the inner test failed inside `unshare -n` (needs root and /dev/net/tun): {}",
        out.status
    );
    assert!(
        stdout.contains("1 passed"),
        "the inner test did not run: {stdout}"
    );
}

/// Whether this is the inner run (else the inner test should return at once).
pub fn is_inner() -> bool {
    std::env::var_os(INNER_ENV).is_some()
}

/// Inside the namespace: `lo` up and a TAP device `dev` with 169.254.1.1/16 and
/// `route_localnet`, so that a peer at 169.254.1.2 reaches what listens on 127.0.0.1.
pub fn setup_tap(dev: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("netns/tap.sh");
    let st = Command::new("bash")
        .arg(script)
        .arg(dev)
        .status()
        .expect("run bash");
    assert!(st.success(), "tests/netns/tap.sh failed");
}
