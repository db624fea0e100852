//! TLS and ACL: a producer and a consumer to brokers running with
//! `tls.server.mode=enforcing` and `aclEnable=true`.
//!
//! ```sh
//! cargo run -p rmq-std --example tls_acl -- 127.0.0.1:9876 TopicTest ca.pem AK SK
//! ```

use rmq_std::consumer::Consumer;
use rmq_std::{Message, Producer, TlsConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let namesrv = args.next().unwrap_or_else(|| "127.0.0.1:9876".into());
    let topic = args.next().unwrap_or_else(|| "TopicTest".into());
    let ca = std::fs::read(args.next().unwrap_or_else(|| "ca.pem".into()))?;
    let access_key = args.next().unwrap_or_else(|| "rocketmq2".into());
    let secret_key = args.next().unwrap_or_else(|| "12345678".into());
    // Trust the CA that signed the brokers' certificates (checked against the address's host,
    // or `.server_name(..)`); NameServers stay plain TCP unless `.name_server_too(true)`.
    let tls = TlsConfig::with_ca_pem(&ca)?;
    let producer = Producer::builder()
        .namesrv_addr(&namesrv)
        .producer_group("example_secure")
        .tls(tls.clone())
        .acl(&access_key, &secret_key, None)
        .start()
        .await?;
    match producer.send(Message::new(&topic, "secret")).await {
        Ok(r) => println!("stored {}", r.msg_id),
        Err(e) => {
            // A refused key is `SendErrorKind::Authentication`; a TLS failure keeps the
            // rustls error (unknown CA, name mismatch) in `connection_error()`.
            eprintln!("{e}");
            if let Some(tls_err) = e.connection_error().and_then(|c| c.tls()) {
                eprintln!("TLS: {tls_err}");
            }
        }
    }
    let consumer = Consumer::builder()
        .namesrv_addr(&namesrv)
        .group("example_secure_consumer")
        .subscribe(&topic, "*")
        .tls(tls)
        .acl(&access_key, &secret_key, None)
        .start()
        .await?;
    let msgs = consumer.poll(16, std::time::Duration::from_secs(5)).await;
    println!("received {}", msgs.len());
    consumer.ack_all(&msgs);
    consumer.shutdown().await;
    producer.shutdown().await;
    Ok(())
}
