//! The `rmq` command line (placeholder while the CLI is written).
fn main() {}
