//! A blocking wire probe over [`std::net::TcpStream`] (no async runtime) for interop tests
//! against the real broker: it writes exactly the frames a test asks for (SEND_MESSAGE V1,
//! V2, batches, raw requests) and takes every protocol decision from rmq-core (message
//! properties and validation, compression, route parsing, queue lists). Retries, failover
//! and the TBW102 fallback are not its business: the rmq runtimes get those from the core
//! session.
//!
//! - route: GET_ROUTEINFO_BY_TOPIC with [`GetRouteInfoRequestHeader`], body parsed by
//!   [`TopicRoute`], publish queues from [`TopicRoute::publish_queues`];
//! - send: SEND_MESSAGE (10, V1 keys), SEND_MESSAGE_V2 (310) or SEND_BATCH_MESSAGE (320),
//!   framed by [`CommandRepr`], properties by the core's `encode_message_properties` (with a
//!   UNIQ_KEY from [`UniqKeyGenerator`]), zlib level 5 when the core's `compression_flags`
//!   says so (sysFlag `0x1 | 0x300`), batch bodies by [`encode_batch`];
//! - responses: cut by [`FrameReader`], decoded by [`CommandHeader`] and
//!   [`SendMessageResponseHeader`]; the code maps to [`SendStatus`] or
//!   [`ClientError::Broker`] with the broker's code and remark.
//!
//! Client-side validation (topic, body ≤ `max_message_size`, user properties, delay level)
//! runs before any byte is written; [`Producer::bytes_sent`] lets tests check that.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmq_core::message::batch::{BatchError, BatchMessage, encode_batch};
use rmq_core::message::properties::{EncodeProperties, PropertiesEncoder, PropertiesError};
use rmq_core::message::validate::{DEFAULT_MAX_MESSAGE_SIZE, ValidationError, validate_body};
use rmq_core::message::{UniqKeyGenerator, keys};
use rmq_core::producer::{
    MessageError, MessageFields, compression_flags, encode_message_properties,
    message_properties_len,
};
use rmq_core::retry::SendStatus;
use rmq_core::route::{PublishQueueRef, RouteError, TopicRoute};
use rmq_core::wire::headers::{
    GetRouteInfoRequestHeader, SendMessageRequestHeader, SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
};
use rmq_core::wire::{
    CommandHeader, CommandRepr, ExtFields, Frame, FrameReader, RequestCode, ResponseCode, Scratch,
    SerializeType, version,
};

/// Route storage used by the blocking client: up to 8 brokers, 2 KiB of names/addresses.
pub type Route = TopicRoute<8, 2048>;

/// Default compression threshold (`compressMsgBodyOverHowmuch`).
pub const COMPRESS_OVER: usize = 4096;
/// zlib level the Java client uses by default.
pub const ZLIB_LEVEL: u8 = 5;
/// The broker's default topic template.
pub const DEFAULT_TOPIC: &str = "TBW102";

/// Why a request failed.
#[derive(Debug)]
pub enum ClientError {
    /// Rejected by client-side validation; nothing was sent.
    Validation(ValidationError),
    /// A property entry cannot be encoded; nothing was sent.
    Properties(PropertiesError),
    /// A batch cannot be encoded; nothing was sent.
    Batch(BatchError),
    /// Socket failure.
    Io(io::Error),
    /// The peer answered with a non-success code.
    Broker {
        /// Response code.
        code: i32,
        /// Remark, if any.
        remark: Option<String>,
    },
    /// The peer's answer could not be decoded.
    Protocol(String),
    /// The route body could not be parsed.
    Route(RouteError),
    /// The route has no writable queue.
    NoWritableQueue,
    /// The compressed body is larger than `max_message_size` (the broker checks the body it
    /// receives, i.e. after compression); nothing was sent.
    CompressedTooLarge {
        /// Compressed length.
        compressed: usize,
        /// The limit.
        limit: usize,
    },
}

impl ClientError {
    /// The broker's response code, for [`ClientError::Broker`].
    pub fn broker_code(&self) -> Option<i32> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Validation(e) => write!(f, "invalid message: {e}"),
            ClientError::Properties(e) => write!(f, "invalid properties: {e}"),
            ClientError::Batch(e) => write!(f, "invalid batch: {e}"),
            ClientError::Io(e) => write!(f, "i/o: {e}"),
            ClientError::Broker { code, remark } => {
                let name = ResponseCode(*code).name().unwrap_or("?");
                write!(
                    f,
                    "broker answered code {code} ({name}): {}",
                    remark.as_deref().unwrap_or("<no remark>")
                )
            }
            ClientError::Protocol(s) => write!(f, "protocol: {s}"),
            ClientError::Route(e) => write!(f, "route: {e}"),
            ClientError::NoWritableQueue => f.write_str("route has no writable queue"),
            ClientError::CompressedTooLarge { compressed, limit } => write!(
                f,
                "compressed body of {compressed} bytes exceeds the {limit}-byte limit"
            ),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}
impl From<ValidationError> for ClientError {
    fn from(e: ValidationError) -> Self {
        ClientError::Validation(e)
    }
}
impl From<RouteError> for ClientError {
    fn from(e: RouteError) -> Self {
        ClientError::Route(e)
    }
}

/// A whole response frame (length prefix included), owned.
#[derive(Clone, Debug)]
pub struct Response {
    bytes: Vec<u8>,
}

impl Response {
    /// Wraps a frame that passed [`Frame::new_checked`].
    pub fn from_frame_bytes(bytes: Vec<u8>) -> Result<Response, ClientError> {
        Frame::new_checked(&bytes[..]).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let r = Response { bytes };
        r.header()?;
        Ok(r)
    }

    /// The frame bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The frame view.
    pub fn frame(&self) -> Frame<&[u8]> {
        Frame::new_unchecked(&self.bytes[..])
    }

    /// The parsed header.
    pub fn header(&self) -> Result<CommandHeader<'_>, ClientError> {
        CommandHeader::parse(&Frame::new_unchecked(&self.bytes[..]))
            .map_err(|e| ClientError::Protocol(format!("response header: {e}")))
    }

    /// The response code.
    pub fn code(&self) -> i32 {
        self.header().map(|h| h.code()).unwrap_or(-1)
    }

    /// The remark, unescaped.
    pub fn remark(&self) -> Option<String> {
        let h = self.header().ok()?;
        field_string(h.remark()?)
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        Frame::new_unchecked(&self.bytes[..]).body_ref()
    }

    /// `Err(Broker{..})` unless the code is SUCCESS.
    pub fn ok(self) -> Result<Response, ClientError> {
        let code = self.code();
        if code == ResponseCode::SUCCESS.0 {
            Ok(self)
        } else {
            Err(ClientError::Broker {
                code,
                remark: self.remark(),
            })
        }
    }
}

/// A header string as an owned `String` (unescaping JSON escapes).
pub fn field_string(f: rmq_core::wire::FieldStr<'_>) -> Option<String> {
    if let Some(s) = f.as_str() {
        return Some(s.to_owned());
    }
    let n = f.unescaped_len().ok()?;
    let mut buf = vec![0u8; n];
    f.unescape_into(&mut buf).ok().map(str::to_owned)
}

/// One blocking connection to a NameServer or broker.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    reader: FrameReader<Vec<u8>>,
    next_opaque: i32,
    bytes_sent: u64,
}

impl Connection {
    /// Connects with a 5 s timeout; reads time out after 30 s.
    pub fn connect(addr: SocketAddr) -> io::Result<Connection> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Connection {
            stream,
            // Responses are small; route bodies are a few KiB.
            reader: FrameReader::new(vec![0u8; 4 << 20]),
            next_opaque: 1,
            bytes_sent: 0,
        })
    }

    /// Bytes written on this connection so far.
    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent
    }

    /// Encodes `code` + `ext` + `body` as one frame with a fresh opaque, writes it and waits for
    /// the response with that opaque. Returns the response whatever its code.
    pub fn request<E: ExtFields>(
        &mut self,
        code: RequestCode,
        version: i32,
        ty: SerializeType,
        ext: Option<E>,
        body: &[u8],
    ) -> Result<Response, ClientError> {
        let opaque = self.next_opaque;
        self.next_opaque = self.next_opaque.wrapping_add(1);
        let frame = encode_request(code, opaque, version, ty, ext, body)?;
        self.write_frame(&frame)?;
        self.read_response(opaque)
    }

    /// Writes raw frame bytes.
    pub fn write_frame(&mut self, frame: &[u8]) -> Result<(), ClientError> {
        self.stream.write_all(frame)?;
        self.stream.flush()?;
        self.bytes_sent += frame.len() as u64;
        Ok(())
    }

    /// Reads frames until the response to `opaque` arrives.
    pub fn read_response(&mut self, opaque: i32) -> Result<Response, ClientError> {
        loop {
            let frame = self.read_frame()?;
            let resp = Response::from_frame_bytes(frame)?;
            let h = resp.header()?;
            if h.is_response() && h.opaque() == opaque {
                return Ok(resp);
            }
        }
    }

    fn read_frame(&mut self) -> Result<Vec<u8>, ClientError> {
        loop {
            if let Some(f) = self.reader.take_frame() {
                return Ok(f.into_inner().to_vec());
            }
            let buf = self.reader.receive_buffer();
            if buf.is_empty() {
                return Err(ClientError::Protocol(format!(
                    "frame reader stuck: {:?}",
                    self.reader.error()
                )));
            }
            let n = self.stream.read(buf)?;
            if n == 0 {
                return Err(ClientError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed the connection",
                )));
            }
            self.reader
                .commit(n)
                .map_err(|e| ClientError::Protocol(format!("frame: {e}")))?;
        }
    }
}

/// Encodes a request frame: prefix, header in `ty` format, then `body`.
pub fn encode_request<E: ExtFields>(
    code: RequestCode,
    opaque: i32,
    version: i32,
    ty: SerializeType,
    ext: Option<E>,
    body: &[u8],
) -> Result<Vec<u8>, ClientError> {
    let cmd = CommandRepr::request(code, opaque, version, ext);
    let head = cmd.frame_len(ty, 0);
    let mut buf = vec![0u8; head];
    let n = cmd
        .emit_frame_prefix_and_header(ty, body.len(), &mut buf)
        .map_err(|e| ClientError::Protocol(format!("encode: {e}")))?;
    buf.truncate(n);
    buf.extend_from_slice(body);
    Ok(buf)
}

/// zlib (RFC 1950) at `level`, as `java.util.zip.Deflater` with the default wrapper.
pub fn zlib(body: &[u8], level: u8) -> Vec<u8> {
    miniz_oxide::deflate::compress_to_vec_zlib(body, level)
}

/// Inflates a zlib stream (for tests).
pub fn unzlib(data: &[u8]) -> Option<Vec<u8>> {
    miniz_oxide::inflate::decompress_to_vec_zlib(data).ok()
}

/// A message to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// Topic.
    pub topic: String,
    /// Body (uncompressed).
    pub body: Vec<u8>,
    /// `TAGS`.
    pub tags: Option<String>,
    /// `KEYS` (joined by one space).
    pub keys: Vec<String>,
    /// `DELAY` level.
    pub delay_level: Option<i32>,
    /// User properties, in order.
    pub user_properties: Vec<(String, String)>,
    /// `Message.flag`.
    pub flag: i32,
}

impl Message {
    /// A message with a topic and body.
    pub fn new(topic: &str, body: impl Into<Vec<u8>>) -> Message {
        Message {
            topic: topic.to_owned(),
            body: body.into(),
            ..Message::default()
        }
    }

    /// Sets `TAGS`.
    pub fn tags(mut self, t: &str) -> Self {
        self.tags = Some(t.to_owned());
        self
    }

    /// Adds a key.
    pub fn key(mut self, k: &str) -> Self {
        self.keys.push(k.to_owned());
        self
    }

    /// Adds a user property.
    pub fn prop(mut self, k: &str, v: &str) -> Self {
        self.user_properties.push((k.to_owned(), v.to_owned()));
        self
    }

    /// Sets the delay level.
    pub fn delay(mut self, level: i32) -> Self {
        self.delay_level = Some(level);
        self
    }

    /// The properties string, built and validated by the core exactly as every rmq runtime
    /// builds it ([`rmq_core::producer::encode_message_properties`]).
    pub fn properties(
        &self,
        uniq_key: &str,
        max_message_size: usize,
    ) -> Result<String, ClientError> {
        let keys = self.keys.join(keys::KEY_SEPARATOR);
        let fields = MessageFields {
            tags: self.tags.as_deref(),
            keys: Some(keys.as_str()),
            delay_level: self.delay_level,
            wait_store_msg_ok: true,
            timer: None,
            transaction: None,
            correlation: None,
            user: self
                .user_properties
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        };
        let err = |e| match e {
            MessageError::Invalid(v) => ClientError::Validation(v),
            MessageError::BufferTooSmall => {
                ClientError::Properties(PropertiesError::BufferTooSmall)
            }
        };
        let (topic, body, uniq) = (&self.topic, &self.body, Some(uniq_key));
        let len =
            message_properties_len(topic, body, max_message_size, &fields, uniq).map_err(err)?;
        let mut buf = vec![0u8; len];
        let n = encode_message_properties(topic, body, max_message_size, &fields, uniq, &mut buf)
            .map_err(err)?;
        buf.truncate(n);
        String::from_utf8(buf).map_err(|_| ClientError::Properties(PropertiesError::BufferTooSmall))
    }
}

/// Encodes property entries with the core encoder (trailing separator written).
pub fn encode_properties(entries: &[(String, String)]) -> Result<String, PropertiesError> {
    let enc = PropertiesEncoder::new(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let mut buf = vec![0u8; enc.encoded_len()];
    let n = enc.encode(&mut buf)?;
    buf.truncate(n);
    // Entries are `str`s and separators are ASCII.
    String::from_utf8(buf).map_err(|_| PropertiesError::BufferTooSmall)
}

/// Which send request to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendCode {
    /// SEND_MESSAGE (10), V1 (Java field name) keys.
    V1,
    /// SEND_MESSAGE_V2 (310), one-letter keys.
    V2,
}

/// The result of a successful send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendOutcome {
    /// Status from the response code.
    pub status: SendStatus,
    /// Our UNIQ_KEY(s), comma-joined for a batch (Java `SendResult.msgId`).
    pub msg_id: String,
    /// The broker's `msgId` (offsetMsgId; comma-joined for a batch).
    pub offset_msg_id: String,
    /// Queue written.
    pub queue_id: i32,
    /// Consume-queue offset.
    pub queue_offset: i64,
    /// Broker name the message went to.
    pub broker_name: String,
    /// 5.x `transactionId` (the UNIQ_KEY), if sent.
    pub transaction_id: Option<String>,
    /// sysFlag sent.
    pub sys_flag: i32,
    /// Body bytes sent (after compression / batch encoding).
    pub wire_body_len: usize,
}

/// Producer settings.
#[derive(Clone, Debug)]
pub struct ProducerConfig {
    /// Producer group.
    pub group: String,
    /// Header serialize type.
    pub serialize_type: SerializeType,
    /// `version` sent in every request.
    pub version: i32,
    /// Send code for single messages.
    pub send_code: SendCode,
    /// Compress bodies at least this long.
    pub compress_over: usize,
    /// Client-side body limit.
    pub max_message_size: usize,
    /// Also check the body after compression against `max_message_size` (Java does not; the
    /// broker does).
    pub check_compressed_size: bool,
    /// Give the batch wrapper its own UNIQ_KEY in the header properties (the 5.x Java client
    /// does). A 5.x broker appends the wrapper properties to every inner message, so the
    /// wrapper's UNIQ_KEY then replaces each inner one on read-back.
    pub batch_wrapper_uniq_key: bool,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            group: "rmq_blocking_producer".to_owned(),
            serialize_type: SerializeType::JSON,
            version: version::V5_3_3,
            send_code: SendCode::V2,
            compress_over: COMPRESS_OVER,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            check_compressed_size: true,
            batch_wrapper_uniq_key: false,
        }
    }
}

/// A minimal blocking producer: route from the NameServer, round-robin over publish queues.
#[derive(Debug)]
pub struct Producer {
    namesrv: SocketAddr,
    /// Settings (may be changed between sends).
    pub config: ProducerConfig,
    conns: HashMap<SocketAddr, Connection>,
    ids: UniqKeyGenerator,
    counter: usize,
    closed_bytes: u64,
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Producer {
    /// A producer using the NameServer at `namesrv`. Nothing is connected yet.
    pub fn new(namesrv: SocketAddr, config: ProducerConfig) -> Producer {
        let hash = std::process::id().wrapping_mul(0x9E37_79B9) ^ (now_millis() as u32);
        Producer {
            namesrv,
            config,
            conns: HashMap::new(),
            ids: UniqKeyGenerator::new(IpAddr::V4(Ipv4Addr::LOCALHOST), std::process::id(), hash),
            counter: 0,
            closed_bytes: 0,
        }
    }

    /// Total bytes written to any peer (NameServer included).
    pub fn bytes_sent(&self) -> u64 {
        self.closed_bytes + self.conns.values().map(Connection::bytes_sent).sum::<u64>()
    }

    /// The connection to `addr` (opened on first use).
    pub fn conn(&mut self, addr: SocketAddr) -> Result<&mut Connection, ClientError> {
        match self.conns.entry(addr) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => {
                Ok(e.insert(Connection::connect(addr)?))
            }
        }
    }

    /// Drops a connection (after an i/o error, or when the broker closed it).
    pub fn disconnect(&mut self, addr: SocketAddr) {
        if let Some(c) = self.conns.remove(&addr) {
            self.closed_bytes += c.bytes_sent();
        }
    }

    /// GET_ROUTEINFO_BY_TOPIC with an explicit `version` and `acceptStandardJsonOnly`;
    /// returns the raw response (any code).
    pub fn route_raw(
        &mut self,
        topic: &str,
        version: i32,
        accept_standard_json_only: Option<bool>,
    ) -> Result<Response, ClientError> {
        let ty = self.config.serialize_type;
        let ns = self.namesrv;
        let hdr = GetRouteInfoRequestHeader {
            topic,
            accept_standard_json_only,
        };
        self.conn(ns)?.request(
            RequestCode::GET_ROUTEINFO_BY_TOPIC,
            version,
            ty,
            Some(hdr),
            &[],
        )
    }

    /// The route of `topic` (standard JSON requested); `Broker{code: 17}` if unknown.
    pub fn route(&mut self, topic: &str) -> Result<Route, ClientError> {
        let v = self.config.version;
        let resp = self.route_raw(topic, v, Some(true))?.ok()?;
        Ok(Route::parse(resp.body())?)
    }

    fn pick_queue(&mut self, topic: &str) -> Result<(String, SocketAddr, i32), ClientError> {
        let route = self.route(topic)?;
        let mut queues: heapless::Vec<PublishQueueRef, 256> = heapless::Vec::new();
        route.publish_queues(None, &mut queues)?;
        if queues.is_empty() {
            return Err(ClientError::NoWritableQueue);
        }
        let q = queues[self.counter % queues.len()];
        self.counter = self.counter.wrapping_add(1);
        let name = route
            .broker_name(q.broker)
            .ok_or(ClientError::NoWritableQueue)?
            .to_owned();
        let addr: SocketAddr = route
            .broker_addr(q.broker)
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| ClientError::Protocol("bad broker address in route".into()))?;
        Ok((name, addr, q.queue_id))
    }

    fn next_uniq_key(&mut self) -> String {
        self.ids
            .next_id_at(now_millis(), 0)
            .to_hex()
            .as_str()
            .to_owned()
    }

    /// Sends one message (validated first) to the next publish queue of its topic.
    pub fn send(&mut self, msg: &Message) -> Result<SendOutcome, ClientError> {
        // Everything that can fail client-side happens before the route query.
        let prepared = self.prepare(msg)?;
        let (name, addr, queue) = self.pick_queue(&msg.topic)?;
        self.send_prepared(addr, &name, queue, msg, prepared)
    }

    /// Sends one message (validated first) to a given broker and queue.
    pub fn send_to(
        &mut self,
        addr: SocketAddr,
        broker_name: &str,
        queue_id: i32,
        msg: &Message,
    ) -> Result<SendOutcome, ClientError> {
        let prepared = self.prepare(msg)?;
        self.send_prepared(addr, broker_name, queue_id, msg, prepared)
    }

    /// Validates, encodes the properties (with a fresh UNIQ_KEY) and compresses, with the
    /// core's rules.
    fn prepare(&mut self, msg: &Message) -> Result<Prepared, ClientError> {
        let uniq = self.next_uniq_key();
        let props = msg.properties(&uniq, self.config.max_message_size)?;
        let (body, sys_flag) = match compression_flags(
            msg.body.len(),
            self.config.compress_over,
            false,
            rmq_core::message::CompressionType::Zlib,
        ) {
            Some(flag) => (zlib(&msg.body, ZLIB_LEVEL), flag),
            None => (msg.body.clone(), 0),
        };
        if self.config.check_compressed_size && body.len() > self.config.max_message_size {
            return Err(ClientError::CompressedTooLarge {
                compressed: body.len(),
                limit: self.config.max_message_size,
            });
        }
        Ok(Prepared {
            uniq,
            props,
            body,
            sys_flag,
        })
    }

    fn send_prepared(
        &mut self,
        addr: SocketAddr,
        broker_name: &str,
        queue_id: i32,
        msg: &Message,
        p: Prepared,
    ) -> Result<SendOutcome, ClientError> {
        let group = self.config.group.clone();
        let header = SendMessageRequestHeader {
            producer_group: &group,
            topic: &msg.topic,
            default_topic: DEFAULT_TOPIC,
            default_topic_queue_nums: 4,
            queue_id,
            sys_flag: p.sys_flag,
            born_timestamp: now_millis(),
            flag: msg.flag,
            properties: Some(&p.props),
            reconsume_times: Some(0),
            unit_mode: Some(false),
            batch: Some(false),
            max_reconsume_times: None,
            broker_name: Some(broker_name),
        };
        let code = code_of(self.config.send_code);
        let resp = self.send_request(addr, code, header, &p.body)?;
        finish(resp, p.uniq, broker_name, p.sys_flag, p.body.len())
    }

    /// Sends `msgs` (same topic) as one SEND_BATCH_MESSAGE to the next publish queue.
    pub fn send_batch(&mut self, msgs: &[Message]) -> Result<SendOutcome, ClientError> {
        let topic = msgs
            .first()
            .map(|m| m.topic.clone())
            .ok_or(ClientError::Validation(ValidationError::BodyEmpty))?;
        for m in msgs {
            if m.topic != topic {
                return Err(ClientError::Protocol("batch mixes topics".into()));
            }
            if m.delay_level.is_some() {
                return Err(ClientError::Protocol(
                    "batch message with a delay level".into(),
                ));
            }
        }
        let (name, addr, queue) = self.pick_queue(&topic)?;
        let mut uniqs = Vec::new();
        let mut props = Vec::new();
        for m in msgs {
            let u = self.next_uniq_key();
            props.push(m.properties(&u, self.config.max_message_size)?);
            uniqs.push(u);
        }
        let records: Vec<_> = msgs
            .iter()
            .zip(&props)
            .map(|(m, p)| BatchMessage {
                flag: m.flag,
                body: &m.body,
                properties: rmq_core::message::properties::Preencoded(p.as_bytes()),
            })
            .collect();
        let len = rmq_core::message::batch::batch_encoded_len(records.iter().copied())
            .map_err(ClientError::Batch)?;
        let mut body = vec![0u8; len];
        encode_batch(records.iter().copied(), &mut body).map_err(ClientError::Batch)?;
        validate_body(&body, self.config.max_message_size)?;
        let group = self.config.group.clone();
        let mut wrapper = vec![(keys::WAIT_STORE_MSG_OK.to_owned(), "true".to_owned())];
        if self.config.batch_wrapper_uniq_key {
            wrapper.push((keys::UNIQ_KEY.to_owned(), self.next_uniq_key()));
        }
        let wrapper_props = encode_properties(&wrapper).map_err(ClientError::Properties)?;
        let header = SendMessageRequestHeader {
            producer_group: &group,
            topic: &topic,
            default_topic: DEFAULT_TOPIC,
            default_topic_queue_nums: 4,
            queue_id: queue,
            sys_flag: 0,
            born_timestamp: now_millis(),
            flag: 0,
            properties: Some(&wrapper_props),
            reconsume_times: Some(0),
            unit_mode: Some(false),
            batch: Some(true),
            max_reconsume_times: None,
            broker_name: Some(&name),
        };
        let resp = self.send_request(addr, RequestCode::SEND_BATCH_MESSAGE, header, &body)?;
        finish(resp, uniqs.join(","), &name, 0, body.len())
    }

    fn send_request(
        &mut self,
        addr: SocketAddr,
        code: RequestCode,
        header: SendMessageRequestHeader<'_>,
        body: &[u8],
    ) -> Result<Response, ClientError> {
        let ty = self.config.serialize_type;
        let v = self.config.version;
        let conn = self.conn(addr)?;
        let r = if code == RequestCode::SEND_MESSAGE {
            conn.request(code, v, ty, Some(header), body)
        } else {
            conn.request(code, v, ty, Some(SendMessageRequestHeaderV2(header)), body)
        };
        if matches!(r, Err(ClientError::Io(_))) {
            self.disconnect(addr);
        }
        r
    }
}

/// A message ready to frame.
struct Prepared {
    uniq: String,
    props: String,
    body: Vec<u8>,
    sys_flag: i32,
}

fn code_of(c: SendCode) -> RequestCode {
    match c {
        SendCode::V1 => RequestCode::SEND_MESSAGE,
        SendCode::V2 => RequestCode::SEND_MESSAGE_V2,
    }
}

fn finish(
    resp: Response,
    msg_id: String,
    broker_name: &str,
    sys_flag: i32,
    wire_body_len: usize,
) -> Result<SendOutcome, ClientError> {
    let h = resp.header()?;
    let Some(status) = SendStatus::from_code(h.code()) else {
        return Err(ClientError::Broker {
            code: h.code(),
            remark: h.remark().and_then(field_string),
        });
    };
    let mut scratch_buf = vec![0u8; resp.bytes().len()];
    let mut scratch = Scratch::new(&mut scratch_buf);
    let r = SendMessageResponseHeader::decode(&h, &mut scratch)
        .map_err(|e| ClientError::Protocol(format!("send response header: {e}")))?;
    Ok(SendOutcome {
        status,
        msg_id,
        offset_msg_id: r.msg_id.to_owned(),
        queue_id: r.queue_id,
        queue_offset: r.queue_offset,
        broker_name: broker_name.to_owned(),
        transaction_id: r.transaction_id.map(str::to_owned),
        sys_flag,
        wire_body_len,
    })
}
