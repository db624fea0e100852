//! Backpressure by bytes (`ProducerBuilder::max_bytes_in_flight`, Java 5.x
//! `backPressureForAsyncSendSize`): sends whose bodies together pass the budget wait until
//! earlier sends end. Fault injection with the fake peers of `rmq_tests::hostile`: the fake
//! broker holds every send unanswered until the test answers it, so what is in flight is seen
//! exactly.

use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmq_std::{Message, Producer, SendErrorKind};
use rmq_tests::hostile::{Action, Peer, Request, answer_ok, route_json, send_ok, write_or_close};

const TOPIC: &str = "Held";

/// The sends the fake broker holds: opaque, queue id, and the connection to answer on.
type Held = Arc<Mutex<Vec<(i32, String, TcpStream)>>>;

/// Waits up to 5 s for `held` to reach `n` sends; how many it holds.
async fn wait_for(held: &Held, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let len = held.lock().unwrap().len();
        if len >= n || Instant::now() > deadline {
            return len;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A fake broker that holds every send unanswered (in `held`), and a NameServer routing
/// `TOPIC` to it (four queues): the sends held, the broker, the NameServer.
fn holding_broker() -> (Held, Peer, Peer) {
    let held: Held = Arc::default();
    let h = held.clone();
    let broker = Peer::start(Arc::new(move |req: &Request, s: &mut TcpStream| {
        if !req.is_send() {
            return answer_ok(req, s);
        }
        let queue = req
            .field("e")
            .or_else(|| req.field("queueId"))
            .unwrap_or("0");
        let conn = s.try_clone().expect("clone the connection");
        h.lock().unwrap().push((req.opaque, queue.to_owned(), conn));
        Action::Continue
    }))
    .expect("fake broker");
    let ns = Peer::namesrv(route_json(&[("b", broker.addr())], 4)).expect("fake namesrv");
    (held, broker, ns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_past_the_byte_budget_wait_for_earlier_ones() {
    let (held, _broker, ns) = holding_broker();
    // 2.5 KiB of bodies in flight: two 1 KiB messages, never three.
    let p = Producer::builder()
        .namesrv_addr(&ns.addr().to_string())
        .producer_group("pg_inflight_bytes")
        .max_bytes_in_flight(2560)
        .start()
        .await
        .expect("start producer");
    let sends: Vec<_> = (0..5)
        .map(|i| {
            let p = p.clone();
            tokio::spawn(async move {
                p.send(Message::new(TOPIC, vec![b'x'; 1024]))
                    .await
                    .map(|_| i)
            })
        })
        .collect();

    assert_eq!(
        wait_for(&held, 2).await,
        2,
        "the first two sends never reached the broker"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        held.lock().unwrap().len(),
        2,
        "a third 1 KiB send went past a 2.5 KiB budget"
    );

    // Each answer frees room for the sends that wait.
    let mut answered = 0;
    while answered < 5 {
        let n = wait_for(&held, 1).await;
        assert!((1..=2).contains(&n), "{n} sends in flight (budget: 2)");
        answered += answer_all(&held);
    }
    for s in sends {
        s.await.expect("send task").expect("send stored");
    }
    p.shutdown().await;
}

/// Waiting for room is part of a send's one `send_msg_timeout`: a send that waited half its
/// timeout for bytes has half left once sent. The fake broker holds the first send until it
/// times out (3 s), the second starts waiting at 1.5 s and goes at 3 s with 1.5 s left; its
/// answer at 5.25 s comes after that (with a fresh timeout, as before, it would be stored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_for_room_counts_against_the_send_timeout() {
    let (held, _broker, ns) = holding_broker();
    let p = Producer::builder()
        .namesrv_addr(&ns.addr().to_string())
        .producer_group("pg_inflight_wait")
        .max_bytes_in_flight(1536)
        .send_msg_timeout(Duration::from_secs(3))
        .retry_times_when_send_failed(0)
        .start()
        .await
        .expect("start producer");
    let start = tokio::time::Instant::now();
    let send = |p: &Producer| {
        let p = p.clone();
        tokio::spawn(async move { p.send(Message::new(TOPIC, vec![b'x'; 1024])).await })
    };
    let first = send(&p);
    assert_eq!(
        wait_for(&held, 1).await,
        1,
        "the first send reached the broker"
    );
    tokio::time::sleep_until(start + Duration::from_millis(1500)).await;
    let second = send(&p);
    let e = first
        .await
        .expect("send task")
        .expect_err("held until its timeout");
    assert!(timed_out(&e), "{e:?}");
    // The second send got the first one's bytes and reached the broker.
    assert_eq!(
        wait_for(&held, 2).await,
        2,
        "the second send reached the broker"
    );
    tokio::time::sleep_until(start + Duration::from_millis(5250)).await;
    let (opaque, queue, mut s) = held.lock().unwrap().remove(1);
    let _ = write_or_close(&mut s, &send_ok(opaque, &queue));
    let e = second
        .await
        .expect("send task")
        .expect_err("its timeout counted the wait");
    assert!(timed_out(&e), "{e:?}");
    p.shutdown().await;
}

/// A send's timeout passed (the last attempt's, or the whole send's).
fn timed_out(e: &rmq_std::SendError) -> bool {
    matches!(
        e.kind(),
        SendErrorKind::Timeout | SendErrorKind::Transport(rmq_std::TransportError::TimedOut)
    )
}

/// Answers every held send SEND_OK; how many.
fn answer_all(held: &Held) -> usize {
    let all: Vec<_> = held.lock().unwrap().drain(..).collect();
    let n = all.len();
    for (opaque, queue, mut s) in all {
        assert_eq!(
            write_or_close(&mut s, &send_ok(opaque, &queue)),
            Action::Continue
        );
    }
    n
}
