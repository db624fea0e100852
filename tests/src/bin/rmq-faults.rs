//! The real-broker fault bench ([`rmq_tests::faults`]): prints the simulator's Markdown table
//! for real 5.3.3 brokers, writes an SVG chart and a JSON line per row.
//!
//! Usage (one broker run at a time on the machine; needs Java and Maven like the broker
//! tests):
//!
//! ```text
//! cargo run --release -p rmq-tests --bin rmq-faults -- [--seconds 30] [--brokers 3]
//!     [--async-rate 200] [--sync-rate 100] [--faults healthy,pause,...] [--policies java49,...]
//!     [--svg tests/bench/faults.svg] [--jsonl PATH]
//! ```

use std::io::Write;
use std::time::{Duration, Instant};

use rmq_tests::faults::{Bench, Fault, Load};
use rmq_tests::sim::{Policy, svg, table};

fn usage() -> ! {
    eprintln!(
        "usage: rmq-faults [--seconds N] [--brokers N] [--async-rate N] [--sync-rate N] \
         [--faults a,b] [--policies round-robin,java49,java5,adaptive] [--svg PATH] [--jsonl PATH]"
    );
    std::process::exit(2);
}

fn policy(s: &str) -> Policy {
    Policy::ALL
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(s))
        .unwrap_or_else(|| usage())
}

fn main() {
    let mut load = Load::default();
    let mut brokers = 3;
    let mut faults = Fault::ALL.to_vec();
    let mut policies = Policy::ALL.to_vec();
    let mut svg_path = String::from("tests/bench/faults.svg");
    let mut jsonl: Option<String> = None;
    let mut args = std::env::args().skip(1);
    let num = |args: &mut dyn Iterator<Item = String>| -> u64 {
        args.next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| usage())
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => load.duration = Duration::from_secs(num(&mut args)),
            "--brokers" => brokers = num(&mut args) as usize,
            "--async-rate" => load.async_rate = num(&mut args) as u32,
            "--sync-rate" => load.sync_rate = num(&mut args) as u32,
            "--faults" => {
                let list = args.next().unwrap_or_else(|| usage());
                faults = list
                    .split(',')
                    .map(|f| Fault::parse(f).unwrap_or_else(|| usage()))
                    .collect();
            }
            "--policies" => {
                let list = args.next().unwrap_or_else(|| usage());
                policies = list.split(',').map(policy).collect();
            }
            "--svg" => svg_path = args.next().unwrap_or_else(|| usage()),
            "--jsonl" => jsonl = Some(args.next().unwrap_or_else(|| usage())),
            _ => usage(),
        }
    }
    let t0 = Instant::now();
    eprintln!("starting a 5.3.3 cluster of {brokers} brokers ...");
    let mut bench = Bench::start(brokers).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1);
    });
    eprintln!("cluster up in {:.0} s", t0.elapsed().as_secs_f64());
    let mut reports = Vec::new();
    let mut twice = String::from(
        "| scenario | policy | extra stored, async | extra stored, sync |\n| --- | --- | ---: | ---: |\n",
    );
    let total = faults.len() * policies.len();
    for (i, &fault) in faults.iter().enumerate() {
        for (j, &p) in policies.iter().enumerate() {
            let n = i * policies.len() + j + 1;
            eprint!("[{n}/{total}] {} {} ... ", fault.name(), p.name());
            let cell = bench.run(fault, p, load).unwrap_or_else(|e| {
                eprintln!("{e}\n{}", bench.cluster().log_tail(40));
                std::process::exit(1);
            });
            for r in [&cell.async_sends, &cell.sync_sends] {
                eprint!(
                    "{}: {:.2} % ok, p99 {} ms; ",
                    r.scenario,
                    r.success_pct(),
                    r.p99
                );
            }
            eprintln!("extra stored {:?}", cell.extra_stored);
            twice.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                fault.name(),
                p.name(),
                cell.extra_stored[0],
                cell.extra_stored[1]
            ));
            reports.push(cell.async_sends);
            reports.push(cell.sync_sends);
        }
    }
    // Rows grouped by stream, then fault (the chart's groups).
    reports.sort_by_key(|r| r.scenario.ends_with(" sync"));
    print!("{}\n{twice}", table(&reports));
    if let Some(path) = jsonl {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("open --jsonl file");
        for r in &reports {
            let _ = writeln!(
                f,
                "{{\"scenario\":\"{}\",\"policy\":\"{}\",\"sends\":{},\"ok\":{},\"p50\":{},\"p99\":{},\"p999\":{},\"max\":{},\"attempts\":{},\"bad_attempts\":{},\"seconds\":{},\"brokers\":{brokers}}}",
                r.scenario,
                r.policy.name(),
                r.sends,
                r.ok,
                r.p50,
                r.p99,
                r.p999,
                r.max,
                r.attempts,
                r.bad_attempts,
                load.duration.as_secs()
            );
        }
    }
    std::fs::write(&svg_path, svg(&reports)).expect("write SVG");
    eprintln!(
        "chart written to {svg_path}; {:.0} s in all",
        t0.elapsed().as_secs_f64()
    );
}
