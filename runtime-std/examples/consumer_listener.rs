//! A consumer with a listener: each message goes to a handler; a handler that fails (returns
//! an error or panics) has its message sent back and delivered again later (10 s, then longer),
//! up to 16 times, then to the dead-letter queue `%DLQ%example_listener`. With `--orderly`,
//! each queue's messages are handled one at a time, in order, under the broker's queue lock.
//!
//! ```sh
//! cargo run -p rmq-std --example consumer_listener -- 127.0.0.1:9876 TopicTest [--orderly]
//! ```

use rmq_std::consumer::Consumer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let namesrv = args.next().unwrap_or_else(|| "127.0.0.1:9876".into());
    let topic = args.next().unwrap_or_else(|| "TopicTest".into());
    let orderly = args.next().as_deref() == Some("--orderly");
    let consumer = Consumer::builder()
        .namesrv_addr(&namesrv)
        .group("example_listener")
        .subscribe(&topic, "*")
        .orderly(orderly)
        .start()
        .await?;
    let runner = consumer.clone();
    let run = tokio::spawn(async move {
        runner
            .run(|batch| async move {
                for m in &batch {
                    let text = String::from_utf8_lossy(&m.body);
                    println!("{} (delivery {}): {text}", m.msg_id, m.reconsume_times + 1);
                    if text.contains("fail") {
                        return Err("cannot process it now");
                    }
                }
                Ok(())
            })
            .await;
    });
    tokio::signal::ctrl_c().await?;
    consumer.shutdown().await;
    run.await?;
    Ok(())
}
