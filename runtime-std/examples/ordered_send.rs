//! Ordered sends: messages with the same sharding key go to the same queue, so a consumer
//! reads them in the order they were sent (Java `SelectMessageQueueByHash`).
//!
//! ```sh
//! cargo run -p rmq-std --example ordered_send -- 127.0.0.1:9876 TopicTest
//! ```

use rmq_std::{Message, Producer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let namesrv = args.next().unwrap_or_else(|| "127.0.0.1:9876".into());
    let topic = args.next().unwrap_or_else(|| "TopicTest".into());
    let producer = Producer::builder()
        .namesrv_addr(&namesrv)
        .producer_group("example_ordered")
        .start()
        .await?;
    for order in ["order-1", "order-2", "order-3"] {
        for step in ["created", "paid", "shipped"] {
            let msg = Message::new(&topic, format!("{order} {step}")).with_keys([order]);
            let r = producer.send_sharded(msg, order).await?;
            println!("{order} {step}: queue {}", r.queue.queue_id);
        }
    }
    // Or pick the queue yourself: the selector gets the number of queues.
    let r = producer
        .send_ordered(Message::new(&topic, "to queue 0"), |_queues| 0)
        .await?;
    println!("selector: queue {}", r.queue.queue_id);
    producer.shutdown().await;
    Ok(())
}
