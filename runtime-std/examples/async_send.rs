//! Asynchronous sends: many sends in flight at once on one producer, awaited together.
//!
//! ```sh
//! cargo run -p rmq-std --example async_send -- 127.0.0.1:9876 TopicTest
//! ```

use rmq_std::{Message, Producer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let namesrv = args.next().unwrap_or_else(|| "127.0.0.1:9876".into());
    let topic = args.next().unwrap_or_else(|| "TopicTest".into());
    let producer = Producer::builder()
        .namesrv_addr(&namesrv)
        .producer_group("example_async")
        .start()
        .await?;
    // `send_async` returns a future that owns what it needs: spawn it or collect it.
    let pending: Vec<_> = (0..100)
        .map(|i| tokio::spawn(producer.send_async(Message::new(&topic, format!("async {i}")))))
        .collect();
    let (mut ok, mut failed) = (0, 0);
    for p in pending {
        match p.await? {
            Ok(_) => ok += 1,
            Err(e) => {
                failed += 1;
                eprintln!("{e}");
            }
        }
    }
    // Or a callback, run on the runtime when the send ends.
    producer
        .send_with_callback(Message::new(&topic, "with a callback"), |r| {
            println!("callback: {:?}", r.map(|s| s.msg_id));
        })
        .await?;
    println!(
        "{ok} stored, {failed} failed; counters {:?}",
        producer.counters()
    );
    producer.shutdown().await;
    Ok(())
}
