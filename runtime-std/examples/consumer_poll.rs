//! A clustering consumer: poll messages, process them, acknowledge them. Offsets of
//! acknowledged messages are committed every 5 s and at shutdown (Ctrl-C).
//!
//! ```sh
//! cargo run -p rmq-std --example consumer_poll -- 127.0.0.1:9876 TopicTest
//! ```

use std::time::Duration;

use rmq_std::consumer::Consumer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let namesrv = args.next().unwrap_or_else(|| "127.0.0.1:9876".into());
    let topic = args.next().unwrap_or_else(|| "TopicTest".into());
    let consumer = Consumer::builder()
        .namesrv_addr(&namesrv)
        .group("example_consumer")
        .subscribe(&topic, "*")
        .start()
        .await?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            msgs = consumer.poll(32, Duration::from_secs(1)) => {
                for m in &msgs {
                    println!(
                        "{} {}#{} tags={:?}: {}",
                        m.msg_id,
                        m.queue.broker_name,
                        m.queue_offset,
                        m.tags(),
                        String::from_utf8_lossy(&m.body)
                    );
                }
                // Acknowledged offsets become committable.
                consumer.ack_all(&msgs);
            }
        }
    }
    consumer.shutdown().await;
    Ok(())
}
