//! Open code sets: request, response and language codes, serialize type, flag bits, versions.
//!
//! Each is a newtype over the wire integer with associated constants, so a value this crate
//! does not know still round-trips (as h2's `Reason`). Numbers are from docs/protocol/WIRE.md §2.4 and §5.

use core::fmt;

/// A request code (docs/protocol/WIRE.md §5.1). Unknown values are kept as-is.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RequestCode(pub i32);

/// A response code (docs/protocol/WIRE.md §5.2). Unknown values are kept as-is.
///
/// Codes 209–211 mean different things on 4.9.x and 5.x; the constants carry the 5.x names
/// and the 4.9.x aliases are provided as well.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ResponseCode(pub i32);

impl RequestCode {
    /// `10` SEND_MESSAGE.
    pub const SEND_MESSAGE: RequestCode = RequestCode(10);
    /// `11` PULL_MESSAGE.
    pub const PULL_MESSAGE: RequestCode = RequestCode(11);
    /// `12` QUERY_MESSAGE.
    pub const QUERY_MESSAGE: RequestCode = RequestCode(12);
    /// `14` QUERY_CONSUMER_OFFSET.
    pub const QUERY_CONSUMER_OFFSET: RequestCode = RequestCode(14);
    /// `15` UPDATE_CONSUMER_OFFSET.
    pub const UPDATE_CONSUMER_OFFSET: RequestCode = RequestCode(15);
    /// `17` UPDATE_AND_CREATE_TOPIC.
    pub const UPDATE_AND_CREATE_TOPIC: RequestCode = RequestCode(17);
    /// `28` GET_BROKER_RUNTIME_INFO.
    pub const GET_BROKER_RUNTIME_INFO: RequestCode = RequestCode(28);
    /// `29` SEARCH_OFFSET_BY_TIMESTAMP.
    pub const SEARCH_OFFSET_BY_TIMESTAMP: RequestCode = RequestCode(29);
    /// `30` GET_MAX_OFFSET.
    pub const GET_MAX_OFFSET: RequestCode = RequestCode(30);
    /// `31` GET_MIN_OFFSET.
    pub const GET_MIN_OFFSET: RequestCode = RequestCode(31);
    /// `33` VIEW_MESSAGE_BY_ID.
    pub const VIEW_MESSAGE_BY_ID: RequestCode = RequestCode(33);
    /// `34` HEART_BEAT.
    pub const HEART_BEAT: RequestCode = RequestCode(34);
    /// `35` UNREGISTER_CLIENT.
    pub const UNREGISTER_CLIENT: RequestCode = RequestCode(35);
    /// `36` CONSUMER_SEND_MSG_BACK.
    pub const CONSUMER_SEND_MSG_BACK: RequestCode = RequestCode(36);
    /// `37` END_TRANSACTION.
    pub const END_TRANSACTION: RequestCode = RequestCode(37);
    /// `38` GET_CONSUMER_LIST_BY_GROUP.
    pub const GET_CONSUMER_LIST_BY_GROUP: RequestCode = RequestCode(38);
    /// `39` CHECK_TRANSACTION_STATE.
    pub const CHECK_TRANSACTION_STATE: RequestCode = RequestCode(39);
    /// `40` NOTIFY_CONSUMER_IDS_CHANGED.
    pub const NOTIFY_CONSUMER_IDS_CHANGED: RequestCode = RequestCode(40);
    /// `41` LOCK_BATCH_MQ.
    pub const LOCK_BATCH_MQ: RequestCode = RequestCode(41);
    /// `42` UNLOCK_BATCH_MQ.
    pub const UNLOCK_BATCH_MQ: RequestCode = RequestCode(42);
    /// `46` CHECK_CLIENT_CONFIG.
    pub const CHECK_CLIENT_CONFIG: RequestCode = RequestCode(46);
    /// `101` GET_KV_CONFIG.
    pub const GET_KV_CONFIG: RequestCode = RequestCode(101);
    /// `105` GET_ROUTEINFO_BY_TOPIC.
    pub const GET_ROUTEINFO_BY_TOPIC: RequestCode = RequestCode(105);
    /// `106` GET_BROKER_CLUSTER_INFO.
    pub const GET_BROKER_CLUSTER_INFO: RequestCode = RequestCode(106);
    /// `206` GET_ALL_TOPIC_LIST_FROM_NAMESERVER.
    pub const GET_ALL_TOPIC_LIST_FROM_NAMESERVER: RequestCode = RequestCode(206);
    /// `208` GET_CONSUME_STATS.
    pub const GET_CONSUME_STATS: RequestCode = RequestCode(208);
    /// `222` INVOKE_BROKER_TO_RESET_OFFSET.
    pub const INVOKE_BROKER_TO_RESET_OFFSET: RequestCode = RequestCode(222);
    /// `220` RESET_CONSUMER_CLIENT_OFFSET.
    pub const RESET_CONSUMER_CLIENT_OFFSET: RequestCode = RequestCode(220);
    /// `221` GET_CONSUMER_STATUS_FROM_CLIENT.
    pub const GET_CONSUMER_STATUS_FROM_CLIENT: RequestCode = RequestCode(221);
    /// `307` GET_CONSUMER_RUNNING_INFO.
    pub const GET_CONSUMER_RUNNING_INFO: RequestCode = RequestCode(307);
    /// `309` CONSUME_MESSAGE_DIRECTLY.
    pub const CONSUME_MESSAGE_DIRECTLY: RequestCode = RequestCode(309);
    /// `310` SEND_MESSAGE_V2.
    pub const SEND_MESSAGE_V2: RequestCode = RequestCode(310);
    /// `320` SEND_BATCH_MESSAGE.
    pub const SEND_BATCH_MESSAGE: RequestCode = RequestCode(320);
    /// `324` SEND_REPLY_MESSAGE.
    pub const SEND_REPLY_MESSAGE: RequestCode = RequestCode(324);
    /// `325` SEND_REPLY_MESSAGE_V2.
    pub const SEND_REPLY_MESSAGE_V2: RequestCode = RequestCode(325);
    /// `326` PUSH_REPLY_MESSAGE_TO_CLIENT.
    pub const PUSH_REPLY_MESSAGE_TO_CLIENT: RequestCode = RequestCode(326);
    /// `361` LITE_PULL_MESSAGE.
    pub const LITE_PULL_MESSAGE: RequestCode = RequestCode(361);
    /// `370` RECALL_MESSAGE.
    pub const RECALL_MESSAGE: RequestCode = RequestCode(370);
    /// `401` SET_MESSAGE_REQUEST_MODE (5.x: a group's topic popped or pulled).
    pub const SET_MESSAGE_REQUEST_MODE: RequestCode = RequestCode(401);
    /// `200050` POP_MESSAGE.
    pub const POP_MESSAGE: RequestCode = RequestCode(200050);
    /// `200051` ACK_MESSAGE.
    pub const ACK_MESSAGE: RequestCode = RequestCode(200051);
    /// `200053` CHANGE_MESSAGE_INVISIBLETIME.
    pub const CHANGE_MESSAGE_INVISIBLETIME: RequestCode = RequestCode(200053);

    /// The Java constant name, if this code is known.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            10 => "SEND_MESSAGE",
            11 => "PULL_MESSAGE",
            12 => "QUERY_MESSAGE",
            14 => "QUERY_CONSUMER_OFFSET",
            15 => "UPDATE_CONSUMER_OFFSET",
            17 => "UPDATE_AND_CREATE_TOPIC",
            28 => "GET_BROKER_RUNTIME_INFO",
            29 => "SEARCH_OFFSET_BY_TIMESTAMP",
            30 => "GET_MAX_OFFSET",
            31 => "GET_MIN_OFFSET",
            33 => "VIEW_MESSAGE_BY_ID",
            34 => "HEART_BEAT",
            35 => "UNREGISTER_CLIENT",
            36 => "CONSUMER_SEND_MSG_BACK",
            37 => "END_TRANSACTION",
            38 => "GET_CONSUMER_LIST_BY_GROUP",
            39 => "CHECK_TRANSACTION_STATE",
            40 => "NOTIFY_CONSUMER_IDS_CHANGED",
            41 => "LOCK_BATCH_MQ",
            42 => "UNLOCK_BATCH_MQ",
            46 => "CHECK_CLIENT_CONFIG",
            101 => "GET_KV_CONFIG",
            105 => "GET_ROUTEINFO_BY_TOPIC",
            106 => "GET_BROKER_CLUSTER_INFO",
            206 => "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
            208 => "GET_CONSUME_STATS",
            220 => "RESET_CONSUMER_CLIENT_OFFSET",
            221 => "GET_CONSUMER_STATUS_FROM_CLIENT",
            222 => "INVOKE_BROKER_TO_RESET_OFFSET",
            307 => "GET_CONSUMER_RUNNING_INFO",
            309 => "CONSUME_MESSAGE_DIRECTLY",
            310 => "SEND_MESSAGE_V2",
            320 => "SEND_BATCH_MESSAGE",
            324 => "SEND_REPLY_MESSAGE",
            325 => "SEND_REPLY_MESSAGE_V2",
            326 => "PUSH_REPLY_MESSAGE_TO_CLIENT",
            361 => "LITE_PULL_MESSAGE",
            370 => "RECALL_MESSAGE",
            200050 => "POP_MESSAGE",
            200051 => "ACK_MESSAGE",
            200053 => "CHANGE_MESSAGE_INVISIBLETIME",
            _ => return None,
        })
    }
}

impl ResponseCode {
    /// `0` SUCCESS.
    pub const SUCCESS: ResponseCode = ResponseCode(0);
    /// `1` SYSTEM_ERROR.
    pub const SYSTEM_ERROR: ResponseCode = ResponseCode(1);
    /// `2` SYSTEM_BUSY.
    pub const SYSTEM_BUSY: ResponseCode = ResponseCode(2);
    /// `3` REQUEST_CODE_NOT_SUPPORTED.
    pub const REQUEST_CODE_NOT_SUPPORTED: ResponseCode = ResponseCode(3);
    /// `4` TRANSACTION_FAILED.
    pub const TRANSACTION_FAILED: ResponseCode = ResponseCode(4);
    /// `10` FLUSH_DISK_TIMEOUT.
    pub const FLUSH_DISK_TIMEOUT: ResponseCode = ResponseCode(10);
    /// `11` SLAVE_NOT_AVAILABLE.
    pub const SLAVE_NOT_AVAILABLE: ResponseCode = ResponseCode(11);
    /// `12` FLUSH_SLAVE_TIMEOUT.
    pub const FLUSH_SLAVE_TIMEOUT: ResponseCode = ResponseCode(12);
    /// `13` MESSAGE_ILLEGAL.
    pub const MESSAGE_ILLEGAL: ResponseCode = ResponseCode(13);
    /// `14` SERVICE_NOT_AVAILABLE.
    pub const SERVICE_NOT_AVAILABLE: ResponseCode = ResponseCode(14);
    /// `15` VERSION_NOT_SUPPORTED.
    pub const VERSION_NOT_SUPPORTED: ResponseCode = ResponseCode(15);
    /// `16` NO_PERMISSION.
    pub const NO_PERMISSION: ResponseCode = ResponseCode(16);
    /// `17` TOPIC_NOT_EXIST.
    pub const TOPIC_NOT_EXIST: ResponseCode = ResponseCode(17);
    /// `18` TOPIC_EXIST_ALREADY.
    pub const TOPIC_EXIST_ALREADY: ResponseCode = ResponseCode(18);
    /// `19` PULL_NOT_FOUND.
    pub const PULL_NOT_FOUND: ResponseCode = ResponseCode(19);
    /// `20` PULL_RETRY_IMMEDIATELY.
    pub const PULL_RETRY_IMMEDIATELY: ResponseCode = ResponseCode(20);
    /// `21` PULL_OFFSET_MOVED.
    pub const PULL_OFFSET_MOVED: ResponseCode = ResponseCode(21);
    /// `22` QUERY_NOT_FOUND.
    pub const QUERY_NOT_FOUND: ResponseCode = ResponseCode(22);
    /// `23` SUBSCRIPTION_PARSE_FAILED.
    pub const SUBSCRIPTION_PARSE_FAILED: ResponseCode = ResponseCode(23);
    /// `24` SUBSCRIPTION_NOT_EXIST.
    pub const SUBSCRIPTION_NOT_EXIST: ResponseCode = ResponseCode(24);
    /// `25` SUBSCRIPTION_NOT_LATEST.
    pub const SUBSCRIPTION_NOT_LATEST: ResponseCode = ResponseCode(25);
    /// `26` SUBSCRIPTION_GROUP_NOT_EXIST.
    pub const SUBSCRIPTION_GROUP_NOT_EXIST: ResponseCode = ResponseCode(26);
    /// `27` FILTER_DATA_NOT_EXIST.
    pub const FILTER_DATA_NOT_EXIST: ResponseCode = ResponseCode(27);
    /// `28` FILTER_DATA_NOT_LATEST.
    pub const FILTER_DATA_NOT_LATEST: ResponseCode = ResponseCode(28);
    /// `29` INVALID_PARAMETER.
    pub const INVALID_PARAMETER: ResponseCode = ResponseCode(29);
    /// `200` TRANSACTION_SHOULD_COMMIT.
    pub const TRANSACTION_SHOULD_COMMIT: ResponseCode = ResponseCode(200);
    /// `201` TRANSACTION_SHOULD_ROLLBACK.
    pub const TRANSACTION_SHOULD_ROLLBACK: ResponseCode = ResponseCode(201);
    /// `202` TRANSACTION_STATE_UNKNOW.
    pub const TRANSACTION_STATE_UNKNOW: ResponseCode = ResponseCode(202);
    /// `203` TRANSACTION_STATE_GROUP_WRONG.
    pub const TRANSACTION_STATE_GROUP_WRONG: ResponseCode = ResponseCode(203);
    /// `204` NO_BUYER_ID.
    pub const NO_BUYER_ID: ResponseCode = ResponseCode(204);
    /// `205` NOT_IN_CURRENT_UNIT.
    pub const NOT_IN_CURRENT_UNIT: ResponseCode = ResponseCode(205);
    /// `206` CONSUMER_NOT_ONLINE.
    pub const CONSUMER_NOT_ONLINE: ResponseCode = ResponseCode(206);
    /// `207` CONSUME_MSG_TIMEOUT.
    pub const CONSUME_MSG_TIMEOUT: ResponseCode = ResponseCode(207);
    /// `208` NO_MESSAGE.
    pub const NO_MESSAGE: ResponseCode = ResponseCode(208);
    /// `209` POLLING_FULL.
    pub const POLLING_FULL: ResponseCode = ResponseCode(209);
    /// `210` POLLING_TIMEOUT.
    pub const POLLING_TIMEOUT: ResponseCode = ResponseCode(210);
    /// `211` BROKER_NOT_EXIST.
    pub const BROKER_NOT_EXIST: ResponseCode = ResponseCode(211);
    /// `212` BROKER_DISPATCH_NOT_COMPLETE.
    pub const BROKER_DISPATCH_NOT_COMPLETE: ResponseCode = ResponseCode(212);
    /// `213` BROADCAST_CONSUMPTION.
    pub const BROADCAST_CONSUMPTION: ResponseCode = ResponseCode(213);
    /// `215` FLOW_CONTROL.
    pub const FLOW_CONTROL: ResponseCode = ResponseCode(215);
    /// `501` NOT_LEADER_FOR_QUEUE.
    pub const NOT_LEADER_FOR_QUEUE: ResponseCode = ResponseCode(501);
    /// `604` ILLEGAL_OPERATION.
    pub const ILLEGAL_OPERATION: ResponseCode = ResponseCode(604);
    /// `1500` GO_AWAY.
    pub const GO_AWAY: ResponseCode = ResponseCode(1500);
    /// `3001` USER_NOT_EXIST.
    pub const USER_NOT_EXIST: ResponseCode = ResponseCode(3001);
    /// `3002` POLICY_NOT_EXIST.
    pub const POLICY_NOT_EXIST: ResponseCode = ResponseCode(3002);
    /// `2000` CONTROLLER_FENCED_MASTER_EPOCH.
    pub const CONTROLLER_FENCED_MASTER_EPOCH: ResponseCode = ResponseCode(2000);
    /// `2001` CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH.
    pub const CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH: ResponseCode = ResponseCode(2001);
    /// `2002` CONTROLLER_INVALID_MASTER.
    pub const CONTROLLER_INVALID_MASTER: ResponseCode = ResponseCode(2002);
    /// `2003` CONTROLLER_INVALID_REPLICAS.
    pub const CONTROLLER_INVALID_REPLICAS: ResponseCode = ResponseCode(2003);
    /// `2004` CONTROLLER_MASTER_NOT_AVAILABLE.
    pub const CONTROLLER_MASTER_NOT_AVAILABLE: ResponseCode = ResponseCode(2004);
    /// `2005` CONTROLLER_INVALID_REQUEST.
    pub const CONTROLLER_INVALID_REQUEST: ResponseCode = ResponseCode(2005);
    /// `2006` CONTROLLER_BROKER_NOT_ALIVE.
    pub const CONTROLLER_BROKER_NOT_ALIVE: ResponseCode = ResponseCode(2006);
    /// `2007` CONTROLLER_NOT_LEADER.
    pub const CONTROLLER_NOT_LEADER: ResponseCode = ResponseCode(2007);
    /// `2008` CONTROLLER_BROKER_METADATA_NOT_EXIST.
    pub const CONTROLLER_BROKER_METADATA_NOT_EXIST: ResponseCode = ResponseCode(2008);
    /// `2009` CONTROLLER_INVALID_CLEAN_BROKER_METADATA.
    pub const CONTROLLER_INVALID_CLEAN_BROKER_METADATA: ResponseCode = ResponseCode(2009);
    /// `2010` CONTROLLER_BROKER_NEED_TO_BE_REGISTERED.
    pub const CONTROLLER_BROKER_NEED_TO_BE_REGISTERED: ResponseCode = ResponseCode(2010);
    /// `2011` CONTROLLER_MASTER_STILL_EXIST.
    pub const CONTROLLER_MASTER_STILL_EXIST: ResponseCode = ResponseCode(2011);
    /// `2012` CONTROLLER_ELECT_MASTER_FAILED.
    pub const CONTROLLER_ELECT_MASTER_FAILED: ResponseCode = ResponseCode(2012);
    /// `2013` CONTROLLER_ALTER_SYNC_STATE_SET_FAILED.
    pub const CONTROLLER_ALTER_SYNC_STATE_SET_FAILED: ResponseCode = ResponseCode(2013);
    /// `2014` CONTROLLER_BROKER_ID_INVALID.
    pub const CONTROLLER_BROKER_ID_INVALID: ResponseCode = ResponseCode(2014);
    /// `2015` CONTROLLER_JRAFT_INTERNAL_ERROR.
    pub const CONTROLLER_JRAFT_INTERNAL_ERROR: ResponseCode = ResponseCode(2015);
    /// `2016` CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS.
    pub const CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS: ResponseCode = ResponseCode(2016);

    /// The Java constant name, if this code is known.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "SUCCESS",
            1 => "SYSTEM_ERROR",
            2 => "SYSTEM_BUSY",
            3 => "REQUEST_CODE_NOT_SUPPORTED",
            4 => "TRANSACTION_FAILED",
            10 => "FLUSH_DISK_TIMEOUT",
            11 => "SLAVE_NOT_AVAILABLE",
            12 => "FLUSH_SLAVE_TIMEOUT",
            13 => "MESSAGE_ILLEGAL",
            14 => "SERVICE_NOT_AVAILABLE",
            15 => "VERSION_NOT_SUPPORTED",
            16 => "NO_PERMISSION",
            17 => "TOPIC_NOT_EXIST",
            18 => "TOPIC_EXIST_ALREADY",
            19 => "PULL_NOT_FOUND",
            20 => "PULL_RETRY_IMMEDIATELY",
            21 => "PULL_OFFSET_MOVED",
            22 => "QUERY_NOT_FOUND",
            23 => "SUBSCRIPTION_PARSE_FAILED",
            24 => "SUBSCRIPTION_NOT_EXIST",
            25 => "SUBSCRIPTION_NOT_LATEST",
            26 => "SUBSCRIPTION_GROUP_NOT_EXIST",
            27 => "FILTER_DATA_NOT_EXIST",
            28 => "FILTER_DATA_NOT_LATEST",
            29 => "INVALID_PARAMETER",
            200 => "TRANSACTION_SHOULD_COMMIT",
            201 => "TRANSACTION_SHOULD_ROLLBACK",
            202 => "TRANSACTION_STATE_UNKNOW",
            203 => "TRANSACTION_STATE_GROUP_WRONG",
            204 => "NO_BUYER_ID",
            205 => "NOT_IN_CURRENT_UNIT",
            206 => "CONSUMER_NOT_ONLINE",
            207 => "CONSUME_MSG_TIMEOUT",
            208 => "NO_MESSAGE",
            209 => "POLLING_FULL",
            210 => "POLLING_TIMEOUT",
            211 => "BROKER_NOT_EXIST",
            212 => "BROKER_DISPATCH_NOT_COMPLETE",
            213 => "BROADCAST_CONSUMPTION",
            215 => "FLOW_CONTROL",
            501 => "NOT_LEADER_FOR_QUEUE",
            604 => "ILLEGAL_OPERATION",
            1500 => "GO_AWAY",
            3001 => "USER_NOT_EXIST",
            3002 => "POLICY_NOT_EXIST",
            2000 => "CONTROLLER_FENCED_MASTER_EPOCH",
            2001 => "CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH",
            2002 => "CONTROLLER_INVALID_MASTER",
            2003 => "CONTROLLER_INVALID_REPLICAS",
            2004 => "CONTROLLER_MASTER_NOT_AVAILABLE",
            2005 => "CONTROLLER_INVALID_REQUEST",
            2006 => "CONTROLLER_BROKER_NOT_ALIVE",
            2007 => "CONTROLLER_NOT_LEADER",
            2008 => "CONTROLLER_BROKER_METADATA_NOT_EXIST",
            2009 => "CONTROLLER_INVALID_CLEAN_BROKER_METADATA",
            2010 => "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED",
            2011 => "CONTROLLER_MASTER_STILL_EXIST",
            2012 => "CONTROLLER_ELECT_MASTER_FAILED",
            2013 => "CONTROLLER_ALTER_SYNC_STATE_SET_FAILED",
            2014 => "CONTROLLER_BROKER_ID_INVALID",
            2015 => "CONTROLLER_JRAFT_INTERNAL_ERROR",
            2016 => "CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS",
            _ => return None,
        })
    }
}
impl ResponseCode {
    /// 4.9.x meaning of 209 (5.x: [`ResponseCode::POLLING_FULL`]).
    pub const UPDATE_AND_CREATE_ACL_CONFIG_FAILED: ResponseCode = ResponseCode(209);
    /// 4.9.x meaning of 210 (5.x: [`ResponseCode::POLLING_TIMEOUT`]).
    pub const DELETE_ACL_CONFIG_FAILED: ResponseCode = ResponseCode(210);
    /// 4.9.x meaning of 211 (5.x: [`ResponseCode::BROKER_NOT_EXIST`]).
    pub const UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED: ResponseCode = ResponseCode(211);
    /// Client-local (never on the wire): unknown RPC failure.
    pub const RPC_UNKNOWN: ResponseCode = ResponseCode(-1000);
    /// Client-local: no address.
    pub const RPC_ADDR_IS_NULL: ResponseCode = ResponseCode(-1002);
    /// Client-local: write to the channel failed.
    pub const RPC_SEND_TO_CHANNEL_FAILED: ResponseCode = ResponseCode(-1004);
    /// Client-local: timed out.
    pub const RPC_TIME_OUT: ResponseCode = ResponseCode(-1006);
    /// Client-local (Java `ClientErrorCode`, never on the wire): connecting to the broker
    /// failed.
    pub const CONNECT_BROKER_EXCEPTION: ResponseCode = ResponseCode(10001);
    /// Client-local (`ClientErrorCode`): the broker did not answer in time.
    pub const ACCESS_BROKER_TIMEOUT: ResponseCode = ResponseCode(10002);
    /// Client-local (`ClientErrorCode`): no address for the broker.
    pub const BROKER_NOT_EXIST_EXCEPTION: ResponseCode = ResponseCode(10003);
    /// Client-local (`ClientErrorCode`): no route for the topic.
    pub const NOT_FOUND_TOPIC_EXCEPTION: ResponseCode = ResponseCode(10005);
}

macro_rules! code_fmt {
    ($ty:ident) => {
        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(n) => write!(f, "{}({})", n, self.0),
                    None => write!(f, "{}({})", stringify!($ty), self.0),
                }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self, f)
            }
        }
    };
}
code_fmt!(RequestCode);
code_fmt!(ResponseCode);
code_fmt!(LanguageCode);

/// The sender's language (docs/protocol/WIRE.md §2.4): a name in JSON headers, a byte in ROCKETMQ headers.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LanguageCode(pub u8);

const LANGUAGES: [&str; 14] = [
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
    "OMS", "RUST", "NODE_JS",
];

impl LanguageCode {
    /// `0`, the default when a JSON header has no `language`.
    pub const JAVA: LanguageCode = LanguageCode(0);
    /// `1`
    pub const CPP: LanguageCode = LanguageCode(1);
    /// `2`
    pub const DOTNET: LanguageCode = LanguageCode(2);
    /// `3`
    pub const PYTHON: LanguageCode = LanguageCode(3);
    /// `4`
    pub const DELPHI: LanguageCode = LanguageCode(4);
    /// `5`
    pub const ERLANG: LanguageCode = LanguageCode(5);
    /// `6`
    pub const RUBY: LanguageCode = LanguageCode(6);
    /// `7`
    pub const OTHER: LanguageCode = LanguageCode(7);
    /// `8`
    pub const HTTP: LanguageCode = LanguageCode(8);
    /// `9`
    pub const GO: LanguageCode = LanguageCode(9);
    /// `10`
    pub const PHP: LanguageCode = LanguageCode(10);
    /// `11`
    pub const OMS: LanguageCode = LanguageCode(11);
    /// `12`, known to servers from 4.9.4.
    pub const RUST: LanguageCode = LanguageCode(12);
    /// `13`, known to servers from 5.3.2.
    pub const NODE_JS: LanguageCode = LanguageCode(13);
    /// What a JSON header's unrecognised language *name* decodes to (Java: `null`). It has no
    /// name, so it is omitted when encoded as JSON (the receiver then assumes JAVA).
    pub const UNKNOWN: LanguageCode = LanguageCode(0xFF);

    /// The enum name used in JSON headers, if known.
    pub const fn name(self) -> Option<&'static str> {
        if (self.0 as usize) < LANGUAGES.len() {
            Some(LANGUAGES[self.0 as usize])
        } else {
            None
        }
    }

    /// Looks a name up (exact, case-sensitive, as Java's `Enum.valueOf`).
    pub fn from_name(name: &str) -> Option<LanguageCode> {
        Self::from_name_bytes(name.as_bytes())
    }

    /// As [`LanguageCode::from_name`], on bytes.
    pub fn from_name_bytes(name: &[u8]) -> Option<LanguageCode> {
        LANGUAGES
            .iter()
            .position(|n| n.as_bytes() == name)
            .and_then(|i| u8::try_from(i).ok())
            .map(LanguageCode)
    }
}

/// The serialize type byte of a frame (docs/protocol/WIRE.md §1). Only JSON and ROCKETMQ are valid on the
/// wire; [`super::Frame::check_len`] rejects anything else.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SerializeType(pub u8);

impl SerializeType {
    /// `0`: JSON header (the Java default).
    pub const JSON: SerializeType = SerializeType(0);
    /// `1`: ROCKETMQ binary header.
    pub const ROCKETMQ: SerializeType = SerializeType(1);

    /// `"JSON"` / `"ROCKETMQ"`, as written in `serializeTypeCurrentRPC`.
    pub const fn name(self) -> Option<&'static str> {
        match self.0 {
            0 => Some("JSON"),
            1 => Some("ROCKETMQ"),
            _ => None,
        }
    }

    /// Whether this is one of the two defined types.
    pub const fn is_known(self) -> bool {
        self.0 <= 1
    }
}

/// Header `flag` bits (docs/protocol/WIRE.md §4).
pub mod flag {
    /// Set on responses.
    pub const RESPONSE: i32 = 0x1;
    /// Set on oneway requests: the receiver must not reply.
    pub const ONEWAY: i32 = 0x2;
}

/// `version` values: ordinals of Java's `MQVersion.Version` (docs/protocol/WIRE.md §2.4).
pub mod version {
    /// 4.5.2 (what the Go client sends).
    pub const V4_5_2: i32 = 317;
    /// 4.9.0
    pub const V4_9_0: i32 = 393;
    /// 4.9.4: the NameServer sends standard JSON routes to versions >= this.
    pub const V4_9_4: i32 = 401;
    /// 4.9.7
    pub const V4_9_7: i32 = 407;
    /// 4.9.8
    pub const V4_9_8: i32 = 409;
    /// 5.0.0
    pub const V5_0_0: i32 = 413;
    /// 5.1.0
    pub const V5_1_0: i32 = 433;
    /// 5.1.4
    pub const V5_1_4: i32 = 441;
    /// 5.2.0
    pub const V5_2_0: i32 = 453;
    /// 5.3.0
    pub const V5_3_0: i32 = 473;
    /// 5.3.1 (servers from 5.3.2 send GO_AWAY only to versions above this).
    pub const V5_3_1: i32 = 475;
    /// 5.3.2
    pub const V5_3_2: i32 = 477;
    /// 5.3.3
    pub const V5_3_3: i32 = 479;
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn names_round_trip() {
        for b in 0..=255u8 {
            let l = LanguageCode(b);
            match l.name() {
                Some(n) => assert_eq!(LanguageCode::from_name(n), Some(l)),
                None => assert!(b > 13),
            }
        }
        assert_eq!(LanguageCode::from_name("RUST"), Some(LanguageCode::RUST));
        assert_eq!(LanguageCode::from_name("rust"), None);
        assert_eq!(RequestCode::SEND_MESSAGE_V2.0, 310);
        assert_eq!(RequestCode(310).name(), Some("SEND_MESSAGE_V2"));
        assert_eq!(RequestCode(9999).name(), None);
        assert_eq!(ResponseCode::GO_AWAY.name(), Some("GO_AWAY"));
        assert_eq!(
            ResponseCode(2016).name(),
            Some("CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS")
        );
        assert_eq!(version::V5_3_3, 479);
    }
}
