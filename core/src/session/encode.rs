//! Encoding a request into the transmit buffer (one header encoder for every request),
//! signed with the lent ACL credentials.

use super::*;

/// Every request the session writes has one header type, so that the header encoders are
/// compiled once (flash matters on a gateway); the runtime's and the consumer's calls
/// ([`Session::call`]) come in as [`Header::Call`].
pub(super) enum Header<'a> {
    Route(GetRouteInfoRequestHeader<'a>),
    Heartbeat(Option<HeartbeatRequestHeader>),
    Unregister(UnregisterClientRequestHeader<'a>),
    Send(crate::wire::headers::SendMessageRequestHeaderV2<'a>),
    Call(&'a dyn CallFields),
}

/// A call's header fields behind a pointer (object safe, unlike [`crate::wire::ExtFields`]),
/// so that the calls of every header type share one encoder: 1.8 KB less flash on the
/// downlink gateway.
pub(super) trait CallFields {
    fn visit(&self, v: &mut dyn crate::wire::ExtVisitor);
}

impl<E: crate::wire::ExtFields> CallFields for E {
    fn visit(&self, v: &mut dyn crate::wire::ExtVisitor) {
        self.visit_fields(v);
    }
}

/// Hands the fields of [`Header::Call`] on to the encoder's visitor.
pub(super) struct Forward<'v, V: ?Sized>(&'v mut V);

impl<V: crate::wire::ExtVisitor + ?Sized> crate::wire::ExtVisitor for Forward<'_, V> {
    fn field(&mut self, key: &str, value: crate::wire::ExtValue<'_>) {
        self.0.field(key, value);
    }
}

impl crate::wire::ExtFields for Header<'_> {
    fn visit_fields<V: crate::wire::ExtVisitor + ?Sized>(&self, v: &mut V) {
        match self {
            Header::Route(h) => h.visit_fields(v),
            Header::Heartbeat(h) => h.visit_fields(v),
            Header::Unregister(h) => h.visit_fields(v),
            Header::Send(h) => h.visit_fields(v),
            Header::Call(h) => h.visit(&mut Forward(v)),
        }
    }
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
> Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>
{
    /// Encodes request `r` into `buf` (signed when the runtime lends credentials).
    pub(super) fn encode<M: Outbound + ?Sized>(
        &self,
        r: Req,
        opaque: i32,
        buf: &mut [u8],
        out: &M,
    ) -> Result<Transmit, Ending> {
        let mut tx = Transmit {
            peer: r.peer,
            len: 0,
            opaque,
            body: None,
            body_len: 0,
            report_written: false,
            answer: false,
        };
        let too_small = Ending::Encode(EncodeError::BufferTooSmall);
        // A small body (heartbeat), or properties the runtime writes rather than lends (a
        // consumer's resend), is written into `buf` too: first at its front, then moved to the
        // end, where the header refers to it (properties) or after which it follows (body).
        let mut inline = 0;
        let version = self.cfg.version;
        let flavor = if version >= version::V5_0_0 {
            HeartbeatFlavor::V5
        } else {
            HeartbeatFlavor::V4
        };
        match r.kind {
            ReqKind::Heartbeat | ReqKind::Unregister if !F::HEARTBEATS => return Err(too_small),
            ReqKind::Heartbeat => {
                inline = match out.heartbeat_body(buf) {
                    Some(n) => n,
                    None => write_heartbeat(&self.client_id, &[self.group.as_str()], flavor, buf)
                        .map_err(|_| too_small)?,
                };
            }
            ReqKind::Send { send } if F::CONSUMER && F::SEND_BACK => {
                let g = self
                    .sends
                    .get(usize::from(send))
                    .map_or(0, |s| s.generation);
                inline = out.write_properties(SendId::new(send, g), buf).unwrap_or(0);
            }
            _ => {}
        }
        let total = buf.len();
        let inline = inline.min(total);
        buf.copy_within(..inline, total - inline);
        let (head, tail) = buf.split_at_mut(total - inline);
        let (code, header) = match r.kind {
            ReqKind::Route { topic, default } => {
                let name = if default {
                    DEFAULT_TOPIC
                } else {
                    self.topics
                        .get(usize::from(topic))
                        .map_or("", |t| t.name.as_str())
                };
                let hdr = GetRouteInfoRequestHeader {
                    topic: name,
                    accept_standard_json_only: None,
                };
                (RequestCode::GET_ROUTEINFO_BY_TOPIC, Header::Route(hdr))
            }
            ReqKind::Call => return Err(too_small),
            ReqKind::Heartbeat => {
                let ext = (flavor == HeartbeatFlavor::V5).then_some(HeartbeatRequestHeader {});
                (RequestCode::HEART_BEAT, Header::Heartbeat(ext))
            }
            ReqKind::Unregister => {
                let hdr = UnregisterClientRequestHeader {
                    client_id: &self.client_id,
                    producer_group: (!self.consumer).then_some(self.group.as_str()),
                    consumer_group: self.consumer.then_some(self.group.as_str()),
                };
                (RequestCode::UNREGISTER_CLIENT, Header::Unregister(hdr))
            }
            ReqKind::Send { send } => {
                let slot = self.sends.get(usize::from(send)).ok_or(too_small)?;
                let att = slot
                    .plan
                    .as_ref()
                    .and_then(SendPlan::current)
                    .ok_or(too_small)?;
                let id = SendId::new(send, slot.generation);
                let topic = self
                    .topics
                    .get(usize::from(slot.topic))
                    .map_or("", |t| t.name.as_str());
                let props = match inline {
                    0 => out.properties(id),
                    _ => core::str::from_utf8(tail).map_err(|_| too_small)?,
                };
                let req = SendRequest::new(
                    &self.group,
                    topic,
                    att.queue.queue_id,
                    self.broker_name(att.queue.broker).unwrap_or(""),
                    props,
                    slot.born,
                )
                .flag(slot.flag)
                .sys_flag(slot.sys_flag)
                .batch(slot.batch)
                .reply(slot.reply)
                .reconsume(slot.reconsume);
                tx.body = Some(id);
                tx.body_len = slot.body_len;
                tx.report_written = slot.mode == SendMode::Oneway;
                (req.code(), Header::Send(req.header()))
            }
        };
        // A heartbeat's body follows the header; written properties are part of it.
        let (body_len, after) = match tx.body {
            Some(_) => (tx.body_len, 0),
            None => (inline, inline),
        };
        let flag = if tx.report_written { flag::ONEWAY } else { 0 };
        let body: &[u8] = match tx.body {
            Some(id) => out.body(id),
            None => tail,
        };
        let h = self.emit(
            code,
            opaque,
            Some(header),
            flag,
            None,
            (body, body_len),
            head,
            out,
        )?;
        buf.copy_within(total - after.., h);
        tx.len = h + after;
        Ok(tx)
    }

    /// A oneway request with no body (END_TRANSACTION) written into `buf` with `opaque`
    /// (signed when the runtime lends credentials): its length, or `None` when it does not
    /// fit. Nothing is registered: no answer comes.
    pub(crate) fn emit_oneway<E: crate::wire::ExtFields, M: Outbound + ?Sized>(
        &self,
        code: RequestCode,
        opaque: i32,
        ext: E,
        remark: Option<&str>,
        buf: &mut [u8],
        out: &M,
    ) -> Option<usize> {
        let (flag, body) = (flag::ONEWAY, (&[][..], 0));
        self.emit(code, opaque, ext, flag, remark, body, buf, out)
            .ok()
    }

    /// Writes the prefix and header of a request into `head` (signed over `body` when the
    /// runtime lends credentials); the frame counts `body_len` body bytes after it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn emit<E: crate::wire::ExtFields, M: Outbound + ?Sized>(
        &self,
        code: RequestCode,
        opaque: i32,
        ext: E,
        flag: i32,
        remark: Option<&str>,
        (body, body_len): (&[u8], usize),
        head: &mut [u8],
        out: &M,
    ) -> Result<usize, Ending> {
        // The binary header's code is 16 bits: the 5.x POP codes (200050...) go as JSON.
        let ty = if F::ROCKETMQ_HEADERS && i16::try_from(code.0).is_ok() {
            self.cfg.serialize_type
        } else {
            SerializeType::JSON
        };
        let mut repr = CommandRepr::request(code, opaque, self.cfg.version, None::<()>);
        repr.language = self.cfg.language;
        repr.flag = flag;
        repr.remark = remark;
        let creds = out.credentials();
        let ext = crate::wire::Chain(ext, crate::namespace::V2Fields(out.namespace_v2()));
        crate::acl::emit_request(&repr, ext, creds.as_ref(), ty, (body, body_len), head).map_err(
            |e| match e {
                crate::acl::RequestError::Acl(e) => Ending::Acl(e),
                crate::acl::RequestError::Encode(e) => Ending::Encode(e),
            },
        )
    }
}
