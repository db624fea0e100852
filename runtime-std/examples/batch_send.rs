//! A batch: messages of one topic stored with one request (`SEND_BATCH_MESSAGE`).
//!
//! ```sh
//! cargo run -p rmq-std --example batch_send -- 127.0.0.1:9876 TopicTest
//! ```

use rmq_std::{Message, Producer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let namesrv = args.next().unwrap_or_else(|| "127.0.0.1:9876".into());
    let topic = args.next().unwrap_or_else(|| "TopicTest".into());
    let producer = Producer::builder()
        .namesrv_addr(&namesrv)
        .producer_group("example_batch")
        .start()
        .await?;
    let batch: Vec<Message> = (0..32)
        .map(|i| Message::new(&topic, format!("reading {i}")).with_keys([format!("sensor-{i}")]))
        .collect();
    let r = producer.send_batch(batch).await?;
    // One msgId per message, comma-joined, in order.
    println!(
        "{} messages stored in {:?} from offset {}",
        r.msg_id.split(',').count(),
        r.queue,
        r.queue_offset
    );
    producer.shutdown().await;
    Ok(())
}
