//! A transactional producer process for crash tests: sends one half message to `topic` as
//! `group`, prints `HALF <msg id>` once it is stored, and waits in its local transaction
//! forever (no END_TRANSACTION): kill it there. Its checker answers unknown.
//!
//! Usage: `rmq-tx-child <namesrv> <group> <topic> <body>`

use rmq_std::consumer::ConsumedMessage;
use rmq_std::transaction::LocalState;
use rmq_std::{Message, Producer};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [ns, group, topic, body] = &args[..] else {
        eprintln!("usage: rmq-tx-child <namesrv> <group> <topic> <body>");
        std::process::exit(2);
    };
    let p = Producer::builder()
        .namesrv_addr(ns)
        .producer_group(group.as_str())
        .start_transactional(|_: &ConsumedMessage| LocalState::Unknown)
        .await
        .expect("producer");
    let r = p
        .send(Message::new(topic, body.clone()), |sent| {
            println!("HALF {}", sent.msg_id);
            std::future::pending::<LocalState>()
        })
        .await;
    eprintln!("the local transaction ended: {r:?}");
    std::process::exit(1);
}
