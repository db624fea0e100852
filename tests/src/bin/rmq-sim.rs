//! Run the policy simulator: prints a Markdown table, writes an SVG chart.
//!
//! Usage: `cargo run --release -p rmq-tests --bin rmq-sim -- [--svg PATH] [--seed N] [--brokers N]`

use rmq_tests::sim::{Policy, Scenario, run, svg, table};

fn main() {
    let mut svg_path = String::from("tests/sim/chart.svg");
    let mut seed: Option<u64> = None;
    let mut brokers: Option<u8> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--svg" => svg_path = args.next().expect("--svg needs a path"),
            "--brokers" => {
                brokers = Some(
                    args.next()
                        .and_then(|s| s.parse().ok())
                        .filter(|n| *n >= 1)
                        .expect("--brokers needs a number >= 1"),
                )
            }
            "--seed" => {
                seed = Some(
                    args.next()
                        .and_then(|s| s.parse().ok())
                        .expect("--seed needs a number"),
                )
            }
            _ => {
                eprintln!("usage: rmq-sim [--svg PATH] [--seed N] [--brokers N]");
                std::process::exit(2);
            }
        }
    }
    let mut reports = Vec::new();
    for mut scn in Scenario::standard() {
        if let Some(s) = seed {
            scn.seed = s;
        }
        if let Some(b) = brokers {
            scn.brokers = b;
        }
        for p in Policy::ALL {
            reports.push(run(&scn, p));
        }
    }
    print!("{}", table(&reports));
    std::fs::write(&svg_path, svg(&reports)).expect("write SVG");
    eprintln!("chart written to {svg_path}");
}
