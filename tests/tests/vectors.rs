//! Golden vectors: frames the official Java producer (5.3.3 and 4.9.8 clients) sent to the real
//! NameServer/broker, and their answers, captured with the recording relay (see
//! `tests/vectors/README.md`). The tests decode every frame with rmq-core and re-encode the same
//! field values with rmq-core's encoders; no broker is needed.
//!
//! Regenerate (needs a JDK and Maven, starts real clusters; ~3 min):
//! `cargo test -p rmq-tests --test vectors -- --ignored regenerate --test-threads 1`

use std::path::{Path, PathBuf};

use rmq_core::message::batch::{BatchMessage, decode_batch, encode_batch};
use rmq_core::message::properties::{
    EncodeProperties, Preencoded, PropertiesEncoder, PropertiesRef, TrailingSeparator,
};
use rmq_core::message::{OffsetMsgId, UniqKey};
use rmq_core::route::PublishQueueRef;
use rmq_core::wire::headers::{
    GetRouteInfoRequestHeader, SendMessageRequestHeader, SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
};
use rmq_core::wire::{
    CommandHeader, CommandRepr, ExtFields, Frame, LanguageCode, RequestCode, Scratch,
    SerializeType, version,
};
use rmq_tests::blocking::{Route, unzlib, zlib};

/// Topic, group and message contents used by the capture (`regenerate`).
const TOPIC: &str = "VectorTopic";
const GROUP: &str = "vector_pg";
const COMPRESSED_SIZE: usize = 5000;

fn dir(v: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("vectors")
        .join(v)
}

fn load(v: &str, name: &str) -> Vec<u8> {
    let path = dir(v).join(format!("{name}.hex"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run the regenerate test)", path.display()));
    let t = text.trim();
    assert!(
        t.len().is_multiple_of(2),
        "{}: odd hex length",
        path.display()
    );
    (0..t.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&t[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Java's JavaProducer body for message 0 of `--size n`.
fn generated_body(n: usize) -> Vec<u8> {
    (0..n).map(|j| b'a' + (j % 26) as u8).collect()
}

struct Versioned {
    dir: &'static str,
    version: i32,
    trailing: TrailingSeparator,
}

const VERSIONS: [Versioned; 2] = [
    Versioned {
        dir: "5.3.3",
        version: version::V5_3_3,
        trailing: TrailingSeparator::Write,
    },
    Versioned {
        dir: "4.9.8",
        version: version::V4_9_8,
        trailing: TrailingSeparator::Omit,
    },
];

/// Re-encodes `hdr` (same code, opaque, version, flag, language) with rmq-core; returns the
/// whole frame (prefix + header + `body`).
fn reencode<E: ExtFields>(h: &CommandHeader<'_>, ext: E, body: &[u8]) -> Vec<u8> {
    let cmd = CommandRepr {
        code: h.code(),
        language: h.language(),
        version: h.version(),
        opaque: h.opaque(),
        flag: h.flag(),
        remark: None,
        ext: Some(ext),
    };
    let ty = h.serialize_type();
    let mut buf = vec![0u8; cmd.frame_len(ty, 0)];
    let n = cmd
        .emit_frame_prefix_and_header(ty, body.len(), &mut buf)
        .expect("encode");
    buf.truncate(n);
    buf.extend_from_slice(body);
    buf
}

/// Checks the properties string decodes to `want` (besides UNIQ_KEY/WAIT) and that
/// rmq-core's encoder, fed the same entries in the same order, writes the identical bytes.
fn check_properties(v: &Versioned, what: &str, props: &str, want: &[(&str, &str)]) -> String {
    let p = PropertiesRef::new(props);
    for (k, val) in want {
        assert_eq!(p.get(k), Some(*val), "{} {what}: {k} in {props:?}", v.dir);
    }
    let uniq = p.get("UNIQ_KEY").unwrap_or_default().to_owned();
    let trailing = props.ends_with('\u{2}');
    assert_eq!(
        trailing,
        v.trailing == TrailingSeparator::Write,
        "{} {what}: trailing 0x02 in {props:?}",
        v.dir
    );
    let entries: Vec<(&str, &str)> = p.iter().collect();
    let enc = PropertiesEncoder::new(entries.iter().copied()).trailing_separator(v.trailing);
    let mut buf = vec![0u8; enc.encoded_len()];
    let n = enc.encode(&mut buf).expect("encode properties");
    assert_eq!(
        &buf[..n],
        props.as_bytes(),
        "{} {what}: properties bytes",
        v.dir
    );
    uniq
}

fn parse(frame: &[u8]) -> (Frame<&[u8]>, CommandHeader<'_>) {
    let f = Frame::new_checked(frame).expect("frame");
    let h = CommandHeader::parse(&f).expect("header");
    (f, h)
}

/// Decodes a send request and checks the common fields; returns the header and properties.
fn check_send_request<'a>(
    v: &Versioned,
    what: &str,
    frame: &'a [u8],
    code: RequestCode,
    scratch: &'a mut [u8],
) -> (SendMessageRequestHeader<'a>, CommandHeader<'a>, &'a [u8]) {
    let (f, h) = parse(frame);
    assert_eq!(h.request_code(), code, "{} {what}", v.dir);
    assert_eq!(h.serialize_type(), SerializeType::JSON, "{} {what}", v.dir);
    assert_eq!(h.language(), LanguageCode::JAVA, "{} {what}", v.dir);
    assert_eq!(h.version(), v.version, "{} {what}", v.dir);
    assert_eq!(h.flag(), 0, "{} {what}", v.dir);
    assert!(h.remark().is_none(), "{} {what}", v.dir);
    let mut s = Scratch::new(scratch);
    let SendMessageRequestHeaderV2(r) = SendMessageRequestHeaderV2::decode(&h, &mut s)
        .unwrap_or_else(|e| panic!("{} {what}: {e}", v.dir));
    assert_eq!(r.producer_group, GROUP);
    assert_eq!(r.topic, TOPIC);
    assert_eq!(r.default_topic, "TBW102");
    assert_eq!(r.default_topic_queue_nums, 4);
    assert_eq!(r.queue_id, 0, "{} {what}: one queue", v.dir);
    assert_eq!(r.flag, 0);
    assert_eq!(r.reconsume_times, Some(0));
    assert_eq!(r.unit_mode, Some(false));
    assert_eq!(r.max_reconsume_times, None);
    assert_eq!(r.broker_name, Some("broker-a"), "{} {what}", v.dir);
    assert!(r.born_timestamp > 1_600_000_000_000);
    // Same field values through rmq-core's V2 encoder: the identical frame, byte for byte
    // (extFields in Java's HashMap order, which for one-letter keys is alphabetical).
    let body = f.body_ref();
    let again = reencode(&h, SendMessageRequestHeaderV2(r), body);
    assert_eq!(
        String::from_utf8_lossy(&again),
        String::from_utf8_lossy(frame),
        "{} {what}: re-encoded frame differs",
        v.dir
    );
    (r, h, body)
}

fn check_send_response(v: &Versioned, what: &str, frame: &[u8], opaque: i32, ids: usize) {
    let (f, h) = parse(frame);
    assert!(h.is_response(), "{} {what}", v.dir);
    assert_eq!(h.code(), 0, "{} {what}: {:?}", v.dir, h.remark());
    assert_eq!(h.opaque(), opaque, "{} {what}", v.dir);
    assert!(f.body_ref().is_empty());
    let mut buf = vec![0u8; 1024];
    let mut s = Scratch::new(&mut buf);
    let r = SendMessageResponseHeader::decode(&h, &mut s).expect("response header");
    assert_eq!(r.queue_id, 0);
    let offs: Vec<&str> = r.msg_id.split(',').collect();
    assert_eq!(offs.len(), ids, "{} {what}: {}", v.dir, r.msg_id);
    for o in offs {
        let id = OffsetMsgId::parse(o).expect("offsetMsgId");
        assert_eq!(
            id.store_host.ip().to_string(),
            "127.0.0.1",
            "{} {what}",
            v.dir
        );
    }
    match v.dir {
        // 5.x fills transactionId with the UNIQ_KEY and adds MSG_REGION / TRACE_ON.
        "5.3.3" => {
            assert!(r.transaction_id.is_some(), "{} {what}", v.dir);
            assert_eq!(r.msg_region, Some("DefaultRegion"));
        }
        _ => assert_eq!(r.transaction_id, None, "{} {what}", v.dir),
    }
}

#[test]
fn small_message_frames() {
    for v in &VERSIONS {
        let req = load(v.dir, "send-small.req");
        let mut scratch = vec![0u8; 4096];
        let (r, h, body) =
            check_send_request(v, "small", &req, RequestCode::SEND_MESSAGE_V2, &mut scratch);
        assert_eq!(body, b"hello");
        assert_eq!(r.sys_flag, 0);
        assert_eq!(r.batch, Some(false));
        let uniq = check_properties(
            v,
            "small",
            r.properties.expect("properties"),
            &[
                ("TAGS", "TagA"),
                ("KEYS", "key-1"),
                ("p1", "v1"),
                ("WAIT", "true"),
            ],
        );
        UniqKey::parse(&uniq).expect("UNIQ_KEY is a client message id");
        check_send_response(v, "small", &load(v.dir, "send-small.resp"), h.opaque(), 1);
    }
}

#[test]
fn compressed_message_frames() {
    for v in &VERSIONS {
        let req = load(v.dir, "send-compressed.req");
        let mut scratch = vec![0u8; 4096];
        let (r, h, body) = check_send_request(
            v,
            "compressed",
            &req,
            RequestCode::SEND_MESSAGE_V2,
            &mut scratch,
        );
        // 0x1 | ZLIB type bits (both 4.9.8 and 5.3.3 clients).
        assert_eq!(r.sys_flag, 0x301, "{}", v.dir);
        // java.util.zip.Deflater(5): zlib header 78 5E (FLEVEL 1, "fast").
        assert_eq!(&body[..2], &[0x78, 0x5E], "{}: zlib header, level 5", v.dir);
        let plain = unzlib(body).expect("zlib");
        assert_eq!(plain, generated_body(COMPRESSED_SIZE));
        // miniz_oxide at level 5 writes header 78 9C (FLEVEL 2, informational only: decoders
        // ignore it) and different deflate bytes; what matters is that each side inflates the
        // other's stream to the same data.
        let ours = zlib(&plain, 5);
        assert_eq!(&ours[..2], &[0x78, 0x9C], "{}: our zlib header", v.dir);
        assert!(
            u16::from_be_bytes([ours[0], ours[1]]).is_multiple_of(31),
            "FCHECK"
        );
        assert_eq!(unzlib(&ours).expect("our zlib"), plain);
        check_properties(v, "compressed", r.properties.expect("properties"), &[]);
        check_send_response(
            v,
            "compressed",
            &load(v.dir, "send-compressed.resp"),
            h.opaque(),
            1,
        );
    }
}

#[test]
fn batch_frames() {
    for v in &VERSIONS {
        let req = load(v.dir, "send-batch.req");
        let mut scratch = vec![0u8; 4096];
        let (r, h, body) = check_send_request(
            v,
            "batch",
            &req,
            RequestCode::SEND_BATCH_MESSAGE,
            &mut scratch,
        );
        assert_eq!(r.sys_flag, 0);
        assert_eq!(r.batch, Some(true));
        let wrapper = r.properties.expect("wrapper properties");
        let wp = PropertiesRef::new(wrapper);
        assert_eq!(wp.get("WAIT"), Some("true"), "{}", v.dir);
        // Whether the batch wrapper carries a UNIQ_KEY of its own.
        let wrapper_uniq = wp.get("UNIQ_KEY");
        match v.dir {
            "5.3.3" => assert!(wrapper_uniq.is_some(), "{}: {wrapper:?}", v.dir),
            _ => assert!(wrapper_uniq.is_none(), "{}: {wrapper:?}", v.dir),
        }
        let records: Vec<_> = decode_batch(body)
            .collect::<Result<_, _>>()
            .expect("batch body");
        assert_eq!(records.len(), 2);
        for (i, rec) in records.iter().enumerate() {
            assert_eq!(rec.body, format!("batch-{i}").as_bytes());
            assert_eq!((rec.magic, rec.body_crc, rec.flag), (0, 0, 0));
            let props = std::str::from_utf8(rec.raw_properties).expect("utf-8");
            let idx = i.to_string();
            let key = format!("bk-{i}");
            let uniq = check_properties(
                v,
                "batch record",
                props,
                &[
                    ("TAGS", "TagB"),
                    ("KEYS", &key),
                    ("idx", &idx),
                    ("WAIT", "true"),
                ],
            );
            UniqKey::parse(&uniq).expect("inner UNIQ_KEY");
        }
        // The same records through rmq-core's batch encoder: identical body bytes.
        let msgs: Vec<_> = records
            .iter()
            .map(|r| BatchMessage {
                flag: r.flag,
                body: r.body,
                properties: Preencoded(r.raw_properties),
            })
            .collect();
        let mut again = vec![0u8; body.len()];
        let n = encode_batch(msgs.iter().copied(), &mut again).expect("encode batch");
        assert_eq!(&again[..n], body, "{}: batch body", v.dir);
        check_send_response(v, "batch", &load(v.dir, "send-batch.resp"), h.opaque(), 2);
    }
}

#[test]
fn route_frames() {
    for v in &VERSIONS {
        let req = load(v.dir, "route.req");
        let (_, h) = parse(&req);
        assert_eq!(h.request_code(), RequestCode::GET_ROUTEINFO_BY_TOPIC);
        assert_eq!(h.version(), v.version);
        let hdr = GetRouteInfoRequestHeader::decode(&h, &mut Scratch::default()).expect("hdr");
        assert_eq!(hdr.topic, TOPIC);
        let again = reencode(&h, hdr, &[]);
        assert_eq!(
            String::from_utf8_lossy(&again),
            String::from_utf8_lossy(&req),
            "{}: route request",
            v.dir
        );
        let resp = load(v.dir, "route.resp");
        let (f, rh) = parse(&resp);
        assert_eq!((rh.code(), rh.opaque()), (0, h.opaque()));
        let body = f.body_ref();
        // Clients ≥ 4.9.4 send a version ≥ 401: standard JSON with quoted map keys.
        let text = std::str::from_utf8(body).expect("utf-8");
        assert!(
            text.contains(r#""brokerAddrs":{"0":"127.0.0.1:"#),
            "{}: {text}",
            v.dir
        );
        let route = Route::parse(body).expect("route");
        let mut q: heapless::Vec<PublishQueueRef, 8> = heapless::Vec::new();
        route.publish_queues(None, &mut q).expect("queues");
        assert_eq!(q.len(), 1);
        assert_eq!(route.broker_name(q[0].broker), Some("broker-a"));
    }
}

/// Captures the vectors from the real Java producer (see `tests/vectors/README.md`).
#[test]
#[ignore = "starts real clusters and rewrites tests/vectors/"]
fn regenerate() {
    for v in [
        rmq_tests::broker::Version::V5_3_3,
        rmq_tests::broker::Version::V4_9,
    ] {
        capture::run(v);
    }
}

mod capture {
    use std::io::{Read, Write};
    use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
    use std::sync::Arc;
    use std::time::Duration;

    use rmq_core::wire::{CommandHeader, Frame, RequestCode};
    use rmq_tests::blocking::{Producer, ProducerConfig};
    use rmq_tests::broker::{Cluster, ClusterOptions, JavaProducer, Version};
    use rmq_tests::relay::{Direction, Relay};

    use super::{COMPRESSED_SIZE, GROUP, TOPIC, dir};

    /// A NameServer proxy that replaces `from` with `to` (same length) in every frame the
    /// NameServer sends, so the route the Java producer sees points at the broker relay.
    fn rewriting_proxy(upstream: SocketAddr, from: String, to: String) -> SocketAddr {
        assert_eq!(
            from.len(),
            to.len(),
            "{from} -> {to}: the frame length must not change"
        );
        let l = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = l.local_addr().expect("addr");
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { continue };
                let Ok(mut u) = TcpStream::connect(upstream) else {
                    continue;
                };
                let (Ok(mut c2), Ok(mut u2)) = (c.try_clone(), u.try_clone()) else {
                    continue;
                };
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut u2);
                    let _ = u2.shutdown(Shutdown::Write);
                });
                let (from, to) = (from.clone(), to.clone());
                std::thread::spawn(move || {
                    let mut len = [0u8; 4];
                    while u.read_exact(&mut len).is_ok() {
                        let mut rest = vec![0u8; u32::from_be_bytes(len) as usize];
                        if u.read_exact(&mut rest).is_err() {
                            break;
                        }
                        let mut frame = len.to_vec();
                        frame.extend(replace(&rest, from.as_bytes(), to.as_bytes()));
                        if c.write_all(&frame).is_err() {
                            break;
                        }
                    }
                    let _ = c.shutdown(Shutdown::Write);
                });
            }
        });
        addr
    }

    fn replace(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(hay.len());
        let mut i = 0;
        while i < hay.len() {
            if hay[i..].starts_with(from) {
                out.extend_from_slice(to);
                i += from.len();
            } else {
                out.push(hay[i]);
                i += 1;
            }
        }
        out
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// The first request with `code` (after `skip` frames) and its response.
    fn pick(
        frames: &[rmq_tests::relay::Frame],
        skip: usize,
        code: RequestCode,
    ) -> (Vec<u8>, Vec<u8>) {
        for (i, f) in frames.iter().enumerate().skip(skip) {
            if f.dir != Direction::ClientToServer {
                continue;
            }
            let Ok(fr) = Frame::new_checked(&f.bytes[..]) else {
                continue;
            };
            let Ok(h) = CommandHeader::parse(&fr) else {
                continue;
            };
            // Route requests: the one for our topic (the producer also asks for TBW102).
            let other_topic = h.get("topic").is_some_and(|t| !t.eq_str(TOPIC));
            if h.request_code() != code || h.is_response() || other_topic {
                continue;
            }
            let opaque = h.opaque();
            let resp = frames[i..].iter().find(|r| {
                r.conn == f.conn
                    && r.dir == Direction::ServerToClient
                    && Frame::new_checked(&r.bytes[..])
                        .ok()
                        .and_then(|x| {
                            CommandHeader::parse(&x)
                                .ok()
                                .map(|h| h.is_response() && h.opaque() == opaque)
                        })
                        .unwrap_or(false)
            });
            let resp = resp.unwrap_or_else(|| panic!("no response to {code:?}"));
            return (f.bytes.clone(), resp.bytes.clone());
        }
        panic!("no {code:?} request recorded");
    }

    pub fn run(version: Version) {
        let cluster = Cluster::start(
            version,
            ClusterOptions {
                ready_probe: Some(Arc::new(|c: &Cluster| {
                    let mut p = Producer::new(c.namesrv_addr(), ProducerConfig::default());
                    p.route_raw("broker-a", 479, Some(true))
                        .is_ok_and(|r| r.code() == 0)
                })),
                ..ClusterOptions::default()
            },
        )
        .expect("cluster");
        cluster.create_topic(TOPIC, 1).expect("topic");
        let out = dir(version.name());
        std::fs::create_dir_all(&out).expect("mkdir");
        let tmp = cluster.run_dir().to_path_buf();
        // producer -> rewriting proxy -> recording relay -> NameServer (records the original
        // route); producer -> recording relay -> broker.
        let broker_relay =
            Relay::start(cluster.broker_addr(0), &tmp.join("broker-relay.txt")).expect("relay");
        let ns_relay =
            Relay::start(cluster.namesrv_addr(), &tmp.join("ns-relay.txt")).expect("ns relay");
        let proxy = rewriting_proxy(
            ns_relay.addr(),
            cluster.broker_addr(0).to_string(),
            broker_relay.addr().to_string(),
        );
        let ns = proxy.to_string();

        let n0 = broker_relay.frames().len();
        let r0 = ns_relay.frames().len();
        let sent = JavaProducer::new(TOPIC, 1)
            .namesrv(&ns)
            .group(GROUP)
            .body("hello")
            .tags("TagA")
            .keys("key-1")
            .prop("p1", "v1")
            .run(&cluster)
            .expect("small");
        assert_eq!(sent[0].status, "SEND_OK", "{sent:?}");
        let n1 = broker_relay.frames().len();
        let sent = JavaProducer::new(TOPIC, 1)
            .namesrv(&ns)
            .group(GROUP)
            .size(COMPRESSED_SIZE)
            .run(&cluster)
            .expect("compressed");
        assert_eq!(sent[0].status, "SEND_OK", "{sent:?}");
        let n2 = broker_relay.frames().len();
        let out_b = cluster
            .run_java_tool(
                "BatchProducer",
                &[ns.clone(), TOPIC.into(), "2".into(), GROUP.into()],
                Duration::from_secs(120),
            )
            .expect("batch");
        assert!(out_b.contains("\"SEND_OK\""), "{out_b}");
        std::thread::sleep(Duration::from_millis(300));

        let frames = broker_relay.frames();
        let files = [
            (
                "send-small",
                pick(&frames[..n1], n0, RequestCode::SEND_MESSAGE_V2),
            ),
            (
                "send-compressed",
                pick(&frames[..n2], n1, RequestCode::SEND_MESSAGE_V2),
            ),
            (
                "send-batch",
                pick(&frames, n2, RequestCode::SEND_BATCH_MESSAGE),
            ),
            (
                "route",
                pick(&ns_relay.frames(), r0, RequestCode::GET_ROUTEINFO_BY_TOPIC),
            ),
        ];
        for (name, (req, resp)) in files {
            std::fs::write(out.join(format!("{name}.req.hex")), hex(&req) + "\n").expect("write");
            std::fs::write(out.join(format!("{name}.resp.hex")), hex(&resp) + "\n").expect("write");
        }
        eprintln!("[{}] vectors written to {}", version.name(), out.display());
    }
}
