//! A consumer process for crash tests: consumes `topic` as `group` from the first offset and
//! prints `MSG <queue id> <queue offset> <unix ms>` for every message (flushed at once), then
//! acknowledges it; offsets are committed on the usual 5 s schedule. It runs until killed.
//!
//! Usage: `rmq-consume-child <namesrv> <group> <topic> <remoting version>`

use std::io::Write;
use std::time::Duration;

use rmq_std::consumer::{ConsumeFromWhere, Consumer};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [ns, group, topic, version] = &args[..] else {
        eprintln!("usage: rmq-consume-child <namesrv> <group> <topic> <remoting version>");
        std::process::exit(2);
    };
    let c = Consumer::builder()
        .namesrv_addr(ns)
        .group(group.as_str())
        .subscribe(topic, "*")
        .consume_from(ConsumeFromWhere::FirstOffset)
        .version(version.parse().expect("version"))
        .start()
        .await
        .expect("consumer");
    println!("READY {}", c.client_id());
    let mut out = std::io::stdout().lock();
    loop {
        for m in c.poll(64, Duration::from_millis(500)).await {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            let _ = writeln!(out, "MSG {} {} {now}", m.queue.queue_id, m.queue_offset);
            let _ = out.flush();
            c.ack(&m);
        }
    }
}
