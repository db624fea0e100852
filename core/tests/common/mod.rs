//! The SEND_MESSAGE_V2 header the core's integration tests encode and decode (docs/protocol/WIRE.md §6.4
//! shape, producer group `pg-demo`).

use rmq_core::wire::headers::{SendMessageRequestHeader, SendMessageRequestHeaderV2};

/// `properties` with tags, keys, WAIT and a UNIQ_KEY (escaped as `\u0001`/`\u0002` in JSON).
pub const PROPS: &str = "TAGS\u{1}TagA\u{2}KEYS\u{1}order-1\u{2}WAIT\u{1}true\u{2}UNIQ_KEY\u{1}C0A8010A30391B6D3586000F42400007\u{2}";

/// A typical producer's V2 header.
pub fn send_v2() -> SendMessageRequestHeaderV2<'static> {
    SendMessageRequestHeaderV2(SendMessageRequestHeader {
        producer_group: "pg-demo",
        topic: "TopicTest",
        default_topic: "TBW102",
        default_topic_queue_nums: 4,
        queue_id: 1,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        flag: 0,
        properties: Some(PROPS),
        reconsume_times: Some(0),
        unit_mode: Some(false),
        batch: Some(false),
        max_reconsume_times: None,
        broker_name: Some("broker-a"),
    })
}
