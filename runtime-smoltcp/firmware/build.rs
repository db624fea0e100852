//! Puts memory.x where cortex-m-rt's link.x looks for it, and the device.x its `device`
//! feature includes (empty: every interrupt vector is `DefaultHandler`, see `__INTERRUPTS`).
use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    fs::copy("memory.x", out.join("memory.x")).unwrap();
    fs::write(
        out.join("device.x"),
        "/* no device interrupt handlers: see __INTERRUPTS in src/main.rs */\n",
    )
    .unwrap();
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory.x");
}
