//! Synchronous sends: each `send` returns once the broker stored the message (or failed after
//! its retries within `send_msg_timeout`).
//!
//! ```sh
//! cargo run -p rmq-std --example sync_send -- 127.0.0.1:9876 TopicTest
//! ```

use std::time::Duration;

use rmq_std::{Message, Producer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let namesrv = args.next().unwrap_or_else(|| "127.0.0.1:9876".into());
    let topic = args.next().unwrap_or_else(|| "TopicTest".into());
    let producer = Producer::builder()
        .namesrv_addr(&namesrv)
        .producer_group("example_sync")
        .send_msg_timeout(Duration::from_secs(3))
        .start()
        .await?;
    for i in 0..10 {
        let msg = Message::new(&topic, format!("hello {i}"))
            .with_tags("TagA")
            .with_keys([format!("order-{i}")]);
        match producer.send(msg).await {
            Ok(r) => println!("{} stored: {} at {:?}", r.msg_id, r.queue_offset, r.queue),
            // The error keeps its cause (`source()`), and the message to try again.
            Err(e) => eprintln!("send {i} failed: {e} (retryable: {})", e.is_retryable()),
        }
    }
    producer.shutdown().await;
    Ok(())
}
