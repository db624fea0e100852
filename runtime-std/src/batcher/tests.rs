use super::*;
use crate::SendStatus;
use crate::message::MessageQueue;

fn waiter(topic: &str, n: usize) -> (Waiter, oneshot::Receiver<Result<SendResult, SendError>>) {
    let (tx, rx) = oneshot::channel();
    ((Message::new(topic, vec![0u8; n]), tx), rx)
}

#[test]
fn waiting_callers_leave_as_the_core_clock_says() {
    let cfg = AutoBatch {
        max_in_flight: 1,
        ..AutoBatch::default()
    };
    let b = Batcher::default();
    assert!(matches!(b.add(&cfg, waiter("A", 10).0), Added::Soon(t) if t == "A"));
    assert!(matches!(b.add(&cfg, waiter("A", 10).0), Added::Joined));
    assert_eq!(b.take("A").len(), 2, "the ready ones leave together");
    assert!(b.take("A").is_empty(), "once");
    assert!(matches!(b.add(&cfg, waiter("A", 10).0), Added::Arm(_, 1)));
    assert!(matches!(b.add(&cfg, waiter("A", 10).0), Added::Joined));
    assert!(
        matches!(b.add(&cfg, waiter("B", 10).0), Added::Soon(t) if t == "B"),
        "its own clock"
    );
    assert_eq!(b.take("B").len(), 1);
    assert!(b.expire("A", 0).is_empty());
    assert_eq!(b.done("A").len(), 2);
    assert!(b.expire("A", 1).is_empty(), "already left");
    assert!(b.done("A").is_empty() && b.done("B").is_empty());
}

#[test]
fn each_caller_gets_its_position() {
    let r = SendResult {
        status: SendStatus::SendOk,
        msg_id: "A,B,C".into(),
        offset_msg_id: format!("{},{}", "7F".repeat(16), "7E".repeat(11)),
        queue: MessageQueue {
            topic: "T".into(),
            broker_name: "broker-a".into(),
            queue_id: 2,
        },
        queue_offset: 40,
        attempts: 1,
        recall_handle: None,
    };
    let each = split(&r, ["A", "B", "C"].map(String::from).to_vec());
    assert_eq!(each.len(), 3);
    assert_eq!((each[2].msg_id.as_str(), each[2].queue_offset), ("C", 42));
    assert_eq!(each[0].offset_msg_id, "7F".repeat(16));
    assert_eq!(
        each[1].offset_msg_id, "",
        "cut short by the session: not handed out"
    );
    assert!(each.iter().all(|e| e.queue.queue_id == 2));
}
