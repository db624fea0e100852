use super::*;
use crate::wire::{CommandRepr, Frame, SerializeType, version};
use proptest::prelude::*;
use std::string::String;
use std::vec::Vec as StdVec;

fn response(code: i32, ext: &[(&str, &str)], buf: &mut [u8]) -> usize {
    let cmd = CommandRepr::response(ResponseCode(code), 5, version::V5_3_3, Some(ext));
    cmd.emit_frame_prefix_and_header(SerializeType::JSON, 0, buf)
        .unwrap()
}

fn pull(code: i32, ext: &[(&str, &str)]) -> Result<PullResult, PullError> {
    let mut buf = [0u8; 512];
    let n = response(code, ext, &mut buf);
    let f = Frame::new_checked(&buf[..n]).unwrap();
    let h = CommandHeader::parse(&f).unwrap();
    parse_pull_response(&h)
}

const PULL_EXT: [(&str, &str); 4] = [
    ("suggestWhichBrokerId", "1"),
    ("nextBeginOffset", "42"),
    ("minOffset", "3"),
    ("maxOffset", "50"),
];

#[test]
fn pull_status_mapping() {
    for (code, st) in [
        (0, PullStatus::Found),
        (19, PullStatus::NoNewMsg),
        (20, PullStatus::NoMatchedMsg),
        (21, PullStatus::OffsetIllegal),
    ] {
        let r = pull(code, &PULL_EXT).unwrap();
        assert_eq!(r.status, st);
        assert_eq!(r.next_begin_offset, 42);
        assert_eq!(r.min_offset, 3);
        assert_eq!(r.max_offset, 50);
        assert_eq!(r.suggest_which_broker_id, 1);
        assert_eq!(r.offset_delta, None);
    }
    let mut ext = PULL_EXT.to_vec();
    ext.push(("offsetDelta", "-7"));
    assert_eq!(pull(0, &ext).unwrap().offset_delta, Some(-7));
}

#[test]
fn pull_errors() {
    let e = pull(215, &[]).unwrap_err();
    assert_eq!(e, PullError::Broker(ResponseCode::FLOW_CONTROL));
    assert_eq!(
        e.retry_delay(PULL_EXCEPTION_DELAY_V5),
        Duration::from_millis(20)
    );
    let e = pull(24, &PULL_EXT).unwrap_err();
    assert_eq!(e, PullError::Broker(ResponseCode::SUBSCRIPTION_NOT_EXIST));
    assert_eq!(
        e.retry_delay(PULL_EXCEPTION_DELAY_V4),
        Duration::from_millis(3000)
    );
    let e = pull(19, &PULL_EXT[..1]).unwrap_err();
    assert_eq!(e, PullError::Header(FieldError::Missing("nextBeginOffset")));
    let e = pull(
        0,
        &[
            ("suggestWhichBrokerId", "x"),
            ("nextBeginOffset", "1"),
            ("minOffset", "0"),
            ("maxOffset", "1"),
        ],
    )
    .unwrap_err();
    assert_eq!(
        e,
        PullError::Header(FieldError::Invalid("suggestWhichBrokerId"))
    );
}

#[test]
fn pull_request_header() {
    let mut req = PullRequest {
        group: "g",
        topic: "T",
        broker_name: "broker-a",
        queue_id: 3,
        offset: 17,
        max_msgs: 32,
        commit_offset: Some(0),
        suspend: Some(BROKER_SUSPEND_MAX_TIME),
        expression: TagExpression::new("a || b"),
        sub_version: 99,
    };
    // commitOffset 0 does not set COMMIT_OFFSET (Java: only when the memory offset is > 0).
    assert_eq!(req.sys_flag(), 0x2 | 0x4);
    req.commit_offset = Some(5);
    let h = req.header();
    assert_eq!(h.sys_flag, 0x1 | 0x2 | 0x4);
    assert_eq!(h.commit_offset, 5);
    assert_eq!(h.suspend_timeout_millis, 15_000);
    assert_eq!(h.subscription, Some("a || b"));
    assert_eq!(h.expression_type, Some("TAG"));
    assert_eq!(h.queue_offset, 17);
    assert_eq!(h.max_msg_nums, 32);
    assert_eq!(h.bname, Some("broker-a"));
    assert_eq!(
        req.rpc_timeout(Duration::from_millis(10)),
        CONSUMER_TIMEOUT_WHEN_SUSPEND
    );
    req.expression = TagExpression::sql("a > 1 || b = '*'");
    let h = req.header();
    assert_eq!(h.subscription, Some("a > 1 || b = '*'"), "as given");
    assert_eq!(h.expression_type, Some("SQL92"));
    req.suspend = None;
    req.commit_offset = None;
    req.expression = TagExpression::new("");
    assert_eq!(req.sys_flag(), 0x4);
    assert_eq!(req.header().suspend_timeout_millis, 0);
    assert_eq!(req.header().subscription, Some("*"));
    assert_eq!(
        req.rpc_timeout(Duration::from_millis(10)),
        Duration::from_millis(10)
    );
}

#[test]
fn tag_expressions() {
    let all = TagExpression::new("*");
    assert!(all.is_all());
    assert_eq!(all.tags().count(), 0);
    assert!(all.matches(None));
    assert!(all.matches(Some("x")));
    assert!(TagExpression::new("").is_all());
    assert_eq!(TagExpression::new("").sub_string(), "*");

    let e = TagExpression::new(" TagA ||  || TagB||TagA ");
    assert!(!e.is_all());
    assert_eq!(e.tags().collect::<StdVec<_>>(), ["TagA", "TagB"]);
    // docs/protocol/WIRE.md §8: "TagA" -> 2598919.
    assert_eq!(
        e.codes().collect::<StdVec<_>>(),
        [2_598_919, java_string_hash("TagB")]
    );
    assert!(e.matches(Some("TagA")));
    assert!(e.matches(Some("TagB")));
    assert!(!e.matches(Some("TagC")));
    assert!(!e.matches(Some(" TagA")));
    assert!(!e.matches(None));

    // Java's split on "||" is left to right: "a|||b" gives "a" and "|b".
    let odd = TagExpression::new("a|||b");
    assert_eq!(odd.tags().collect::<StdVec<_>>(), ["a", "|b"]);
    // " * " is not SUB_ALL in Java: a tag named "*".
    assert_eq!(
        TagExpression::new(" * ").tags().collect::<StdVec<_>>(),
        ["*"]
    );
    // Java's String.trim(): every char <= U+0020 goes, Unicode white space above it stays
    // (a different tag, and a different hash code, than the trimmed one).
    let java = TagExpression::new("\u{1}\tA\u{A0}||\u{2003}B\u{1F}");
    assert_eq!(java.tags().collect::<StdVec<_>>(), ["A\u{A0}", "\u{2003}B"]);
    assert!(!java.matches(Some("A")));
    // Only separators: empty tag set, the client keeps everything.
    let none = TagExpression::new("||");
    assert!(!none.is_all());
    assert!(none.matches(None));
}

#[test]
fn heartbeat_body() {
    let subs = [
        Subscription {
            topic: "T1",
            expression: TagExpression::new("*"),
            sub_version: 1_700_000_000_000,
        },
        Subscription {
            topic: "T2",
            expression: TagExpression::new("TagA || TagB"),
            sub_version: 5,
        },
    ];
    let consumers = [ConsumerData {
        group: "cg",
        consume_type: ConsumeType::Passively,
        message_model: MessageModel::Clustering,
        consume_from_where: ConsumeFromWhere::FirstOffset,
        subscriptions: &subs,
    }];
    let mut buf = [0u8; 1024];
    let n = write_heartbeat(
        "10.0.0.1@1#2",
        &consumers,
        &[],
        HeartbeatFlavor::V4,
        &mut buf,
    )
    .unwrap();
    let expected = concat!(
        r#"{"clientID":"10.0.0.1@1#2","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","#,
        r#""consumeType":"CONSUME_PASSIVELY","groupName":"cg","messageModel":"CLUSTERING","#,
        r#""subscriptionDataSet":[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","#,
        r#""subString":"*","subVersion":1700000000000,"tagsSet":[],"topic":"T1"},"#,
        r#"{"classFilterMode":false,"codeSet":[2598919,2598920],"expressionType":"TAG","#,
        r#""subString":"TagA || TagB","subVersion":5,"tagsSet":["TagA","TagB"],"topic":"T2"}],"#,
        r#""unitMode":false}],"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}"#
    );
    assert_eq!(core::str::from_utf8(&buf[..n]).unwrap(), expected);

    let n = write_heartbeat("c", &[], &["pg"], HeartbeatFlavor::V5, &mut buf).unwrap();
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        r#"{"clientID":"c","consumerDataSet":[],"heartbeatFingerprint":0,"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"},{"groupName":"pg"}],"withoutSub":false}"#
    );
    for short in 0..n {
        assert!(
            write_heartbeat("c", &[], &["pg"], HeartbeatFlavor::V5, &mut buf[..short]).is_err()
        );
    }
}

#[test]
fn consumer_list() {
    let mut out = heapless::Vec::<&str, 4>::new();
    parse_consumer_list(
        br#"{"consumerIdList":["10.0.0.2@1","10.0.0.1@2"]}"#,
        &mut out,
    )
    .unwrap();
    assert_eq!(out.as_slice(), ["10.0.0.2@1", "10.0.0.1@2"]);
    parse_consumer_list(br#"{ "consumerIdList" : [ ] }"#, &mut out).unwrap();
    assert!(out.is_empty());
    let mut small = heapless::Vec::<&str, 1>::new();
    assert_eq!(
        parse_consumer_list(br#"{"consumerIdList":["a","b"]}"#, &mut small),
        Err(ConsumerListError::Full)
    );
    for bad in [
        &br#"{}"#[..],
        br#"{"consumerIdList":["a""#,
        br#"{"consumerIdList":["a" "b"]}"#,
        b"\xff",
    ] {
        assert_eq!(
            parse_consumer_list(bad, &mut out),
            Err(ConsumerListError::Malformed)
        );
    }
}

/// Java's AllocateMessageQueueAveragely, transcribed with Java `int` arithmetic and list calls.
fn java_avg(mq_all: &[u32], cid_all: &[&str], current: &str) -> StdVec<u32> {
    let mut result = StdVec::new();
    let Some(index) = cid_all.iter().position(|c| *c == current) else {
        return result;
    };
    let (index, n, c) = (index as i32, mq_all.len() as i32, cid_all.len() as i32);
    let m = n % c;
    let average_size = if n <= c {
        1
    } else if m > 0 && index < m {
        n / c + 1
    } else {
        n / c
    };
    let start_index = if m > 0 && index < m {
        index * average_size
    } else {
        index * average_size + m
    };
    let range = average_size.min(n - start_index);
    for i in 0..range {
        result.push(mq_all[((start_index + i) % n) as usize]);
    }
    result
}

/// Java's AllocateMessageQueueAveragelyByCircle, transcribed.
#[allow(clippy::needless_range_loop)]
fn java_circle(mq_all: &[u32], cid_all: &[&str], current: &str) -> StdVec<u32> {
    let mut result = StdVec::new();
    let Some(index) = cid_all.iter().position(|c| *c == current) else {
        return result;
    };
    for i in index..mq_all.len() {
        if i % cid_all.len() == index {
            result.push(mq_all[i]);
        }
    }
    result
}

/// The queue ids of `T` on `broker-a` (queues `0..n`) that `me` gets.
fn alloc(s: AllocateStrategy, n: usize, cids: &[&str], me: &str) -> StdVec<u32> {
    let queues: StdVec<MessageQueue<'_>> = (0..n as i32)
        .map(|q| MessageQueue::new("T", "broker-a", q))
        .collect();
    let mut out = heapless::Vec::<MessageQueue<'_>, 256>::new();
    allocate(s, &queues, cids, me, &mut out).unwrap();
    out.iter().map(|q| q.queue_id as u32).collect()
}

#[test]
fn consistent_hash_places_each_queue_once_and_moves_only_a_leavers_queues() {
    let hash = AllocateStrategy::ConsistentHash {
        virtual_nodes: VIRTUAL_NODES,
    };
    let cids = ["a@1", "b@2", "c@3"];
    // The ring as Java's ConsistentHashRouter builds it (MD5 of "a@1-0".."c@3-9", computed
    // apart with Python's hashlib): queue i goes to the first point at or after the MD5 of
    // "MessageQueue [topic=T, brokerName=broker-a, queueId=i]".
    assert_eq!(alloc(hash, 8, &cids, "a@1"), [1, 6]);
    assert_eq!(alloc(hash, 8, &cids, "b@2"), [2, 3, 7]);
    assert_eq!(alloc(hash, 8, &cids, "c@3"), [0, 4, 5]);
    // 64 queues: each exactly once; when c leaves, only c's queues move.
    let owner = |cids: &[&'static str]| -> [&'static str; 64] {
        let mut o = [""; 64];
        for me in cids {
            for q in alloc(hash, 64, cids, me) {
                assert_eq!(o[q as usize], "", "queue {q} twice");
                o[q as usize] = me;
            }
        }
        assert!(
            o.iter().all(|c| !c.is_empty()),
            "a queue without owner: {o:?}"
        );
        o
    };
    let (three, two) = (owner(&cids), owner(&cids[..2]));
    for (q, (before, after)) in three.iter().zip(&two).enumerate() {
        if *before != "c@3" {
            assert_eq!(before, after, "queue {q} moved");
        }
    }
    // No points: nobody gets anything (Java's router returns no node).
    let none = AllocateStrategy::ConsistentHash { virtual_nodes: 0 };
    assert!(alloc(none, 8, &cids, "a@1").is_empty());
}

#[test]
fn allocation_examples() {
    // docs/protocol/STRATEGY.md §9.5: N = 8, C = 3.
    let cids = ["c0", "c1", "c2"];
    assert_eq!(
        alloc(AllocateStrategy::Averagely, 8, &cids, "c0"),
        [0, 1, 2]
    );
    assert_eq!(
        alloc(AllocateStrategy::Averagely, 8, &cids, "c1"),
        [3, 4, 5]
    );
    assert_eq!(alloc(AllocateStrategy::Averagely, 8, &cids, "c2"), [6, 7]);
    assert_eq!(
        alloc(AllocateStrategy::AveragelyByCircle, 8, &cids, "c1"),
        [1, 4, 7]
    );
    // Fewer queues than consumers: the last ones get nothing.
    assert_eq!(
        alloc(AllocateStrategy::Averagely, 2, &cids, "c2"),
        [] as [u32; 0]
    );
    assert_eq!(alloc(AllocateStrategy::Averagely, 2, &cids, "c1"), [1]);
    // Not a member: empty, not an error.
    assert_eq!(
        alloc(AllocateStrategy::Averagely, 8, &cids, "zz"),
        [] as [u32; 0]
    );

    let q = |i| MessageQueue::new("T", "b", i);
    let mut out = heapless::Vec::<MessageQueue<'_>, 2>::new();
    let avg = AllocateStrategy::Averagely;
    let three = [q(1), q(2), q(3)];
    assert_eq!(
        allocate(avg, &three, &["a"], "a", &mut out),
        Err(AllocateError::Full)
    );
    assert_eq!(
        allocate(avg, &[q(1)], &["a"], "", &mut out),
        Err(AllocateError::EmptyConsumerId)
    );
    assert_eq!(
        allocate(avg, &[], &["a"], "a", &mut out),
        Err(AllocateError::NoQueues)
    );
    assert_eq!(
        allocate(avg, &[q(1)], &[], "a", &mut out),
        Err(AllocateError::NoConsumers)
    );
}

#[test]
fn java_sort_orders() {
    let mut q = [
        MessageQueue::new("T", "b", 0),
        MessageQueue::new("T", "a", 10),
        MessageQueue::new("S", "z", 5),
        MessageQueue::new("T", "a", 2),
    ];
    sort_queues(&mut q);
    assert_eq!(
        q,
        [
            MessageQueue::new("S", "z", 5),
            MessageQueue::new("T", "a", 2),
            MessageQueue::new("T", "a", 10),
            MessageQueue::new("T", "b", 0),
        ]
    );
    // UTF-16 order: a supplementary character (surrogate 0xD800..) sorts before U+FF61,
    // although its UTF-8 bytes sort after.
    let mut ids = ["\u{FF61}", "\u{10000}", "B", "A"];
    sort_consumer_ids(&mut ids);
    assert_eq!(ids, ["A", "B", "\u{10000}", "\u{FF61}"]);
}

proptest! {
    #[test]
    fn allocation_matches_java_and_partitions(n in 1usize..70, c in 1usize..12) {
        let names: StdVec<String> = (0..c).map(|i| std::format!("cid-{i:02}")).collect();
        let cids: StdVec<&str> = names.iter().map(String::as_str).collect();
        let queues: StdVec<u32> = (0..n as u32).collect();
        for s in [AllocateStrategy::Averagely, AllocateStrategy::AveragelyByCircle] {
            let mut seen = std::vec![0u32; n];
            for me in &cids {
                let got = alloc(s, n, &cids, me);
                let want = match s {
                    AllocateStrategy::Averagely => java_avg(&queues, &cids, me),
                    AllocateStrategy::AveragelyByCircle => java_circle(&queues, &cids, me),
                    _ => unreachable!(),
                };
                prop_assert_eq!(&got, &want);
                for q in got { seen[q as usize] += 1; }
            }
            prop_assert!(seen.iter().all(|&x| x == 1), "{:?}", seen);
        }
        // Shares differ by at most one.
        let sizes: StdVec<usize> = cids.iter().map(|me| alloc(AllocateStrategy::Averagely, n, &cids, me).len()).collect();
        prop_assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
    }

    #[test]
    fn tracker_committable_is_lowest_unacked(acks in proptest::collection::vec(any::<prop::sample::Index>(), 0..40), n in 1usize..40, start in 0i64..1000) {
        let mut t = QueueTracker::<64>::new(start);
        let offs: StdVec<i64> = (0..n as i64).map(|i| start + 2 * i).collect();
        for &o in &offs { t.push(o, 10).unwrap(); }
        t.advance(start + 2 * n as i64 + 5);
        let mut pending: std::collections::BTreeSet<i64> = offs.iter().copied().collect();
        let mut last = i64::MIN;
        for a in acks {
            let o = offs[a.index(offs.len())];
            prop_assert_eq!(t.ack(o), pending.remove(&o));
            let want = pending.first().copied().unwrap_or(start + 2 * n as i64 + 5);
            prop_assert_eq!(t.committable(), want);
            prop_assert!(t.committable() >= last);
            last = t.committable();
            prop_assert_eq!(t.cached_count(), pending.len());
            prop_assert_eq!(t.cached_bytes(), 10 * pending.len() as u64);
        }
    }

    #[test]
    fn averagely_range_never_panics(n in any::<usize>(), c in any::<usize>(), i in any::<usize>()) {
        if let Some(r) = averagely_range(n, c, i) {
            prop_assert!(r.start <= r.end);
            prop_assert!(r.end <= n.max(r.start));
        }
        let _ = by_circle_indices(n.min(1000), c, i).count();
    }
}

#[derive(Clone, Debug)]
enum Op {
    Push { gap: u8, size: u32 },
    Ack(prop::sample::Index),
    Advance(u8),
    Reset(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, 0u32..(3 << 20)).prop_map(|(gap, size)| Op::Push { gap, size }),
        3 => any::<prop::sample::Index>().prop_map(Op::Ack),
        1 => (0u8..5).prop_map(Op::Advance),
        1 => any::<u16>().prop_map(Op::Reset),
    ]
}

proptest! {
    /// QueueTracker against a trivial model (an ordered map plus the next offset), with Java's
    /// flow-control formulas evaluated on the model.
    #[test]
    fn tracker_matches_model(start in 0i64..100, ops in proptest::collection::vec(op(), 0..200)) {
        const CAP: usize = 48;
        let limits = FlowLimits { max_cached_msgs: 20, max_cached_mib: 30, max_span: 60, delay: FLOW_CONTROL_DELAY };
        let mut t = QueueTracker::<CAP>::new(start);
        let mut model: std::collections::BTreeMap<i64, u32> = std::collections::BTreeMap::new();
        let mut next = start;
        for op in ops {
            match op {
                Op::Push { gap, size } => {
                    let off = next + i64::from(gap);
                    let r = t.push(off, size);
                    if model.len() == CAP {
                        prop_assert_eq!(r, Err(TrackError::Full));
                    } else {
                        prop_assert_eq!(r, Ok(()));
                        model.insert(off, size);
                        next = off + 1;
                    }
                    prop_assert_eq!(t.push(next - 1, 1).is_err(), true);
                }
                Op::Ack(i) => {
                    if model.is_empty() {
                        prop_assert!(!t.ack(next));
                    } else {
                        let off = *model.keys().nth(i.index(model.len())).unwrap();
                        prop_assert!(t.ack(off));
                        model.remove(&off);
                        prop_assert!(!t.ack(off));
                    }
                }
                Op::Advance(d) => {
                    t.advance(next + i64::from(d) - 2);
                    next = next.max(next + i64::from(d) - 2);
                }
                Op::Reset(o) => {
                    t.reset(i64::from(o));
                    model.clear();
                    next = i64::from(o);
                }
            }
            prop_assert_eq!(t.next_offset(), next);
            prop_assert_eq!(t.committable(), model.keys().next().copied().unwrap_or(next));
            prop_assert_eq!(t.cached_count(), model.len());
            let bytes: u64 = model.values().map(|v| u64::from(*v)).sum();
            prop_assert_eq!(t.cached_bytes(), bytes);
            let span = match (model.keys().next(), model.keys().next_back()) {
                (Some(a), Some(b)) => (b - a) as u64,
                _ => 0,
            };
            prop_assert_eq!(t.span(), span);
            let want = if model.len() > 20 {
                Some(FlowReason::Count)
            } else if bytes / (1024 * 1024) > 30 {
                Some(FlowReason::Size)
            } else if span > 60 {
                Some(FlowReason::Span)
            } else if model.len() >= CAP {
                Some(FlowReason::Capacity)
            } else {
                None
            };
            prop_assert_eq!(t.flow_reason(&limits, 32), want);
            let decision = t.flow(&limits, 32);
            match want {
                Some(_) => prop_assert_eq!(decision, FlowDecision::DelayPull(FLOW_CONTROL_DELAY)),
                None => prop_assert_eq!(decision, FlowDecision::Pull(32.min((CAP - model.len()) as u32))),
            }
        }
    }
}

#[test]
fn tracker_offsets() {
    let mut t = QueueTracker::<8>::new(100);
    assert_eq!(t.committable(), 100);
    assert_eq!(t.commit_due(), Some(100));
    t.mark_committed(100);
    assert_eq!(t.commit_due(), None);
    t.push(100, 5).unwrap();
    t.push(103, 7).unwrap(); // 101, 102 filtered out on the client
    assert_eq!(t.push(103, 1), Err(TrackError::NotAscending));
    t.advance(104);
    assert_eq!(t.next_offset(), 104);
    t.advance(90); // never backwards
    assert_eq!(t.next_offset(), 104);
    assert_eq!(t.span(), 3);
    assert_eq!(t.cached_bytes(), 12);
    assert!(t.ack(103));
    assert!(!t.ack(103));
    assert_eq!(t.committable(), 100);
    assert!(t.ack(100));
    assert_eq!(t.committable(), 104);
    assert_eq!(t.commit_due(), Some(104));
    t.push(104, 1).unwrap();
    t.reset(50);
    assert_eq!(t.cached_count(), 0);
    assert_eq!(t.committable(), 50);
    let mut full = QueueTracker::<2>::new(0);
    full.push(0, 1).unwrap();
    full.push(1, 1).unwrap();
    assert_eq!(full.push(2, 1), Err(TrackError::Full));
}

#[test]
fn flow_control_thresholds() {
    let limits = FlowLimits::default();
    let mut t = QueueTracker::<1100>::new(0);
    for o in 0..1000 {
        t.push(o, 1).unwrap();
    }
    // Java: cachedMessageCount > 1000 delays; exactly 1000 still pulls.
    assert_eq!(t.flow(&limits, 32), FlowDecision::Pull(32));
    t.push(1000, 1).unwrap();
    assert_eq!(t.flow_reason(&limits, 32), Some(FlowReason::Count));
    assert_eq!(
        t.flow(&limits, 32),
        FlowDecision::DelayPull(Duration::from_millis(50))
    );

    // Size: whole MiB must exceed 100.
    let mut s = QueueTracker::<8>::new(0);
    s.push(0, 100 * 1024 * 1024).unwrap();
    s.push(1, 1024 * 1024 - 1).unwrap();
    assert_eq!(s.flow_reason(&limits, 32), None);
    assert_eq!(s.flow(&limits, 32), FlowDecision::Pull(6)); // capped by free slots
    s.push(2, 1).unwrap();
    assert_eq!(s.flow_reason(&limits, 32), Some(FlowReason::Size));

    // Span: last - first > 2000.
    let mut sp = QueueTracker::<8>::new(0);
    sp.push(0, 1).unwrap();
    sp.push(2000, 1).unwrap();
    assert_eq!(sp.flow_reason(&limits, 32), None);
    sp.push(2001, 1).unwrap();
    assert_eq!(sp.flow_reason(&limits, 32), Some(FlowReason::Span));
    assert!(sp.ack(0));
    assert_eq!(sp.flow_reason(&limits, 32), None);

    let mut cap = QueueTracker::<1>::new(0);
    cap.push(0, 1).unwrap();
    assert_eq!(cap.flow_reason(&limits, 32), Some(FlowReason::Capacity));
}

proptest! {
    /// The heapsort the rebalance uses orders exactly as the standard library's sort.
    #[test]
    fn heapsort_orders_as_std(mut v in proptest::collection::vec(any::<u16>(), 0..200)) {
        let mut want = v.clone();
        want.sort_unstable();
        heapsort_by(&mut v, Ord::cmp);
        prop_assert_eq!(v, want);
    }
}

proptest! {
    /// Tag expressions split on `||` as `str::split` does.
    #[test]
    fn or_parts_split_as_std(raw in "[a|b ]{0,12}") {
        let want: StdVec<&str> = raw.split("||").collect();
        let got: StdVec<&str> = super::or_parts(&raw).collect();
        prop_assert_eq!(got, want);
    }
}

#[test]
fn sql92_subscriptions_have_no_tags_and_filter_nothing_on_the_client() {
    let e = TagExpression::sql("*");
    assert!(!e.is_all(), "an SQL92 `*` is an expression, not SUB_ALL");
    assert_eq!(e.sub_string(), "*");
    assert_eq!((e.tags().count(), e.codes().count()), (0, 0));
    assert!(
        e.matches(None) && e.matches(Some("x")),
        "the broker filtered already"
    );
    let sub = Subscription {
        topic: "T",
        expression: TagExpression::sql("color = 'red'"),
        sub_version: 7,
    };
    let mut buf = [0u8; 512];
    let n = write_check_client("1.2.3.4@x", "g", &sub, &mut buf).unwrap();
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        concat!(
            r#"{"clientId":"1.2.3.4@x","group":"g","subscriptionData":{"classFilterMode":false,"#,
            r#""codeSet":[],"expressionType":"SQL92","subString":"color = 'red'","subVersion":7,"#,
            r#""tagsSet":[],"topic":"T"}}"#
        )
    );
    assert!(write_check_client("c", "g", &sub, &mut buf[..40]).is_err());
}

#[test]
fn machine_room_strategies_read_rooms_out_of_names() {
    let qs = [
        MessageQueue::new("T", "plain", 0),
        MessageQueue::new("T", "r1@a", 0),
        MessageQueue::new("T", "r1@a", 1),
        MessageQueue::new("T", "r2@b", 0),
        MessageQueue::new("T", "r3@c", 0),
    ];
    let get = |s: AllocateStrategy, cids: &[&str], me: &str| {
        let mut out = heapless::Vec::<MessageQueue<'_>, 8>::new();
        allocate(s, &qs, cids, me, &mut out).map(|()| {
            out.iter()
                .map(|q| std::format!("{}/{}", q.broker_name, q.queue_id))
                .collect::<StdVec<_>>()
        })
    };
    // Rooms r1 and r2 only: 3 queues, blocks of 1, the first member one more from the end.
    let room = AllocateStrategy::MachineRoom {
        consumes: |r| r == "r1" || r == "r2",
    };
    assert_eq!(get(room, &["a", "b"], "a").unwrap(), ["r1@a/0", "r2@b/0"]);
    assert_eq!(get(room, &["a", "b"], "b").unwrap(), ["r1@a/1"]);
    // Nearby: a consumer of room "r1@a" takes its room's queues; each room without a member
    // is shared by all, one room at a time (a room of one queue: the first member's).
    let nearby = AllocateStrategy::MachineRoomNearby {
        inner: Nearby::Averagely,
        broker_room: |b| b,
        consumer_room: |c| c.split('#').next().unwrap_or(c),
    };
    let cids = ["r1@a#1", "x#2"];
    assert_eq!(
        get(nearby, &cids, "r1@a#1").unwrap(),
        ["r1@a/0", "r1@a/1", "plain/0", "r2@b/0", "r3@c/0"]
    );
    assert!(get(nearby, &cids, "x#2").unwrap().is_empty());
    let no_room = AllocateStrategy::MachineRoomNearby {
        inner: Nearby::Averagely,
        broker_room: |_| "",
        consumer_room: |c| c,
    };
    assert_eq!(
        get(no_room, &cids, "x#2"),
        Err(AllocateError::NoMachineRoom)
    );
    // By config: what the filter takes, whoever else is there.
    let config = AllocateStrategy::ByConfig {
        takes: |q| q.queue_id == 1,
    };
    assert_eq!(get(config, &cids, "x#2").unwrap(), ["r1@a/1"]);
    // Without Java's checks: also for a consumer not (yet) listed.
    assert_eq!(get(config, &cids, "not-listed").unwrap(), ["r1@a/1"]);
    // Java's split drops trailing empty parts: "r2@b@" is room r2.
    let trailing = [MessageQueue::new("T", "r2@b@", 0)];
    let mut out = heapless::Vec::<MessageQueue<'_>, 2>::new();
    allocate(room, &trailing, &["a"], "a", &mut out).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(room.name(), "MACHINE_ROOM");
    assert_eq!(nearby.name(), "MACHINE_ROOM_NEARBY-AVG");
}
