//! `rmq`: send, inspect routes, benchmark, and a self-contained demo against Apache RocketMQ.
//!
//! ```text
//! rmq demo                              # starts a local RocketMQ if none answers on :9876
//! rmq --namesrv 127.0.0.1:9876 send --topic T "hello"
//! rmq --namesrv 127.0.0.1:9876 route T
//! rmq --namesrv 127.0.0.1:9876 cluster
//! rmq --namesrv 127.0.0.1:9876 topics create T --cluster DefaultCluster --write-queues 4
//! rmq --namesrv 127.0.0.1:9876 progress my-group
//! rmq --namesrv 127.0.0.1:9876 reset-offset my-group --topic T --to-time first
//! rmq --namesrv 127.0.0.1:9876 query --topic T --key order-7
//! rmq --namesrv 127.0.0.1:9876 bench --topic T --mode async --concurrency 256 --count 100000
//! rmq --namesrv 127.0.0.1:9876 bench --topic T --mode sync --size 128 --auto-batch-ms 10
//! ```

fn main() -> std::process::ExitCode {
    cli::main()
}

mod ops;

mod cli {
    use std::net::{SocketAddr, TcpStream};
    use std::process::ExitCode;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use clap::{Parser, Subcommand, ValueEnum};
    use hdrhistogram::Histogram;
    use indicatif::{ProgressBar, ProgressStyle};
    use rmq_std::transaction::{LocalState, TransactionProducer};
    use rmq_std::{Message, Producer, SendError};

    #[derive(Parser, Debug)]
    #[command(
        name = "rmq",
        version,
        about = "Apache RocketMQ client (Rust): send, route, consume, operate (cluster, topics, progress, reset-offset, query), bench, demo",
        after_help = "Exit codes: 0 done (consume: Ctrl-C or --count reached, offsets committed); \
                      1 the command failed (no NameServer, send refused, ...); 2 bad arguments."
    )]
    struct Cli {
        /// NameServer address(es), `;`-separated.
        #[arg(long, global = true, env = "RMQ_NAMESRV")]
        namesrv: Option<String>,
        /// Without `--namesrv`: fetch the NameServer list from this HTTP endpoint first
        /// (`host[:port]`, port 8080 by default: `http://<domain>/rocketmq/nsaddr`, Java's
        /// `rocketmq.namesrv.domain`). The list is fetched once, at the command's start.
        #[arg(long, global = true, env = "RMQ_NAMESRV_DOMAIN")]
        namesrv_domain: Option<String>,
        /// Client group: the producer group of `send`, `route`, `bench` and `demo`; the
        /// consumer group of `consume` and `bench-consume`.
        #[arg(long, global = true, default_value = "rmq-cli")]
        group: String,
        /// Output JSON, one object per line (every command but `demo`).
        #[arg(long, global = true)]
        json: bool,
        #[command(flatten)]
        security: Security,
        /// Log spans and events to stderr (`-v` debug, `-vv` trace; or set RUST_LOG).
        #[arg(short, long, global = true, action = clap::ArgAction::Count)]
        verbose: u8,
        /// sendMsgTimeout in milliseconds.
        #[arg(long, global = true, default_value_t = 3000)]
        timeout_ms: u64,
        /// Runtime threads: 1 runs the whole client on this thread (tokio's current-thread
        /// runtime: no hand-offs between threads, the least CPU per message); more is a
        /// multi-thread runtime with that many workers (default: one per core).
        #[arg(long, global = true)]
        threads: Option<usize>,
        /// Header format of the requests (`serializeTypeCurrentRPC`; the broker answers in
        /// the same one): `json` as Java's default, or `rocketmq`, the binary header (Java's
        /// `-Drocketmq.serialize.type=ROCKETMQ`).
        #[arg(long, global = true, value_enum, default_value_t = Header::Json)]
        serialize_type: Header,
        #[command(subcommand)]
        cmd: Cmd,
    }

    /// Reaching a secured cluster (every command). Secrets are best passed in the
    /// environment (`RMQ_SECRET_KEY`), which keeps them out of the process list.
    #[derive(clap::Args, Debug)]
    struct Security {
        /// ACL 1.0 access key (Java `AclClientRPCHook`): every request is signed.
        #[arg(long, global = true, env = "RMQ_ACCESS_KEY")]
        access_key: Option<String>,
        /// ACL 1.0 secret key (with --access-key).
        #[arg(long, global = true, env = "RMQ_SECRET_KEY", hide_env_values = true)]
        secret_key: Option<String>,
        /// ACL security token (optional).
        #[arg(
            long,
            global = true,
            env = "RMQ_SECURITY_TOKEN",
            hide_env_values = true
        )]
        security_token: Option<String>,
        /// TLS to the brokers, trusting the CA certificates of this PEM file.
        #[arg(long, global = true, env = "RMQ_TLS_CA", value_name = "PEM")]
        tls_ca: Option<std::path::PathBuf>,
        /// With --tls-ca: the NameServers use TLS too.
        #[arg(long, global = true)]
        tls_name_server: bool,
        /// With --tls-ca: check the peers' certificates against this name instead of the
        /// host of their address.
        #[arg(long, global = true, value_name = "NAME")]
        tls_server_name: Option<String>,
    }

    type Acl<'a> = (&'a str, &'a str, Option<&'a str>);

    impl Security {
        /// `(access key, secret key, security token)`.
        fn acl(&self) -> Result<Option<Acl<'_>>, String> {
            match (&self.access_key, &self.secret_key) {
                (None, None) => Ok(None),
                (Some(ak), Some(sk)) => Ok(Some((ak, sk, self.security_token.as_deref()))),
                _ => Err("--access-key and --secret-key go together".into()),
            }
        }

        fn tls(&self) -> Result<Option<rmq_std::TlsConfig>, Box<dyn std::error::Error>> {
            let Some(path) = &self.tls_ca else {
                return Ok(None);
            };
            let pem =
                std::fs::read(path).map_err(|e| format!("--tls-ca {}: {e}", path.display()))?;
            let mut t = rmq_std::TlsConfig::with_ca_pem(&pem)
                .map_err(|e| format!("--tls-ca {}: {e}", path.display()))?
                .name_server_too(self.tls_name_server);
            if let Some(n) = &self.tls_server_name {
                t = t.server_name(n)?;
            }
            Ok(Some(t))
        }
    }

    /// Applies `--access-key`/`--secret-key` and `--tls-ca` to a producer or consumer builder.
    macro_rules! secured {
        ($b:expr, $cli:expr) => {{
            let mut b = $b;
            if let Some((ak, sk, token)) = $cli.security.acl()? {
                b = b.acl(ak, sk, token);
            }
            if let Some(t) = $cli.security.tls()? {
                b = b.tls(t);
            }
            b
        }};
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
    enum Header {
        Json,
        Rocketmq,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
    enum Mode {
        Sync,
        Async,
        Oneway,
        /// A transactional send whose local transaction commits at once (a half message,
        /// then END_TRANSACTION).
        Transaction,
        /// A request (`Producer::request`, 3 s): `rmq send` prints the reply; `rmq bench`
        /// answers its requests with a replier in the same process (a consumer of the topic,
        /// group `rmq-bench-replier`, echoing each body with `Producer::reply`): one round
        /// trip per message.
        Request,
    }

    /// How a producer picks queues around slow or failing brokers (`--fault-profile`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
    enum Fault {
        /// No latency fault tolerance (Java's default, `sendLatencyFaultEnable=false`): round
        /// robin, avoiding the last failed broker on a retry.
        Off,
        /// Java 4.9's `MQFaultStrategy`.
        Java49,
        /// Java 5.3's `MQFaultStrategy`.
        Java5,
        /// rmq's default: latency-aware isolation with back-off and probing.
        Adaptive,
    }

    /// Where `rmq consume` starts.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum From {
        /// The group's committed offset, else the oldest message kept.
        First,
        /// The group's committed offset, else only messages stored from now on.
        Last,
        /// Every assigned queue sought to the first message stored at or after this Unix
        /// time in ms (whatever the group committed).
        Timestamp(i64),
    }

    fn parse_from(s: &str) -> Result<From, String> {
        match s {
            "first" => Ok(From::First),
            "last" => Ok(From::Last),
            ms => ms
                .parse()
                .map(From::Timestamp)
                .map_err(|_| format!("{ms:?}: expected first, last or a Unix time in ms")),
        }
    }

    #[derive(Subcommand, Debug)]
    enum Cmd {
        /// Tail a topic as a member of a consumer group (`--group`); Ctrl-C or `--count` ends
        /// it with the offsets of what was printed committed. `--json`: one object per line
        /// (topic, broker, queueId, queueOffset, msgId, tags, keys, properties,
        /// bornTimestamp, storeTimestamp, reconsumeTimes, and the body as text, `body`, or,
        /// when it is not UTF-8, as base64, `bodyBase64`).
        Consume {
            /// Topic.
            topic: String,
            /// Tag expression (`*`, `TagA`, `TagA || TagB`).
            #[arg(long, default_value = "*", conflicts_with = "sql")]
            tag: String,
            /// SQL92 expression on the messages' properties (`a > 5 AND b = 'x'`), evaluated
            /// by the broker (it needs `enablePropertyFilter=true`; a broker that cannot
            /// evaluate it, or an expression that does not parse, is an error at the start).
            #[arg(long)]
            sql: Option<String>,
            /// `first` or `last`: where a group without a committed offset starts; or a Unix
            /// time in ms: every assigned queue starts at the first message stored then or later.
            #[arg(long, default_value = "last", value_parser = parse_from)]
            from: From,
            /// Stop after this many messages.
            #[arg(long)]
            count: Option<u64>,
            /// Stop once every queue of the topic is read to its end (kcat's `-e`).
            #[arg(long)]
            exit_at_end: bool,
            /// Read without any group's offsets: as the only member of a throwaway
            /// broadcasting group (`rmq-tail-<pid>-<ms>`, `--group` unused), keeping offsets
            /// in a temporary file; nothing is committed to the brokers.
            #[arg(long, conflicts_with = "pop")]
            no_commit: bool,
            /// POP consumption (RocketMQ 5.x brokers with `timerWheelEnable=true`): receive
            /// as one of any number of consumers of the group, no rebalancing, each message
            /// acknowledged once printed. A message received but not printed (Ctrl-C) comes
            /// again after `--invisible`. With `--exit-at-end`: stop when a receive finds
            /// nothing. `--from first|last` says where a group new to the topic starts.
            #[arg(long)]
            pop: bool,
            /// With `--pop`: seconds a received message stays invisible to the group's other
            /// consumers before it is delivered again unless acknowledged.
            #[arg(long, default_value_t = 60, requires = "pop")]
            invisible: u64,
        },
        /// Send a message: the body given, or read from `--file` (`-` for stdin), or with
        /// `--lines` one message per line of it. `--json`: one result object per message
        /// (status, msgId, offsetMsgId, broker, queueId, queueOffset, attempts).
        Send {
            /// Topic.
            #[arg(long)]
            topic: String,
            /// Tag.
            #[arg(long)]
            tags: Option<String>,
            /// Keys (repeatable).
            #[arg(long)]
            keys: Vec<String>,
            /// User property `k=v` (repeatable).
            #[arg(long = "prop")]
            props: Vec<String>,
            /// Delay level (1..=18).
            #[arg(long)]
            delay_level: Option<i32>,
            /// Deliver at this Unix time in ms (a 5.x timer message, `TIMER_DELIVER_MS`; the
            /// broker needs `timerWheelEnable=true`).
            #[arg(long, value_name = "UNIX_MS", conflicts_with_all = ["delay", "delay_level"])]
            deliver_at: Option<u64>,
            /// Deliver this long after the broker receives it (a 5.x timer message,
            /// `TIMER_DELAY_MS`): e.g. `1500ms`, `90s`, `5m`, `2h`.
            #[arg(long, value_parser = parse_delay, conflicts_with = "delay_level")]
            delay: Option<Duration>,
            /// How to send.
            #[arg(long, value_enum, default_value_t = Mode::Sync)]
            mode: Mode,
            /// Read the body from this file (`-`: standard input) instead of the argument.
            #[arg(long, value_name = "PATH", conflicts_with = "body")]
            file: Option<std::path::PathBuf>,
            /// One message per line of the body (empty lines skipped), sent in order.
            #[arg(long)]
            lines: bool,
            /// Body text.
            #[arg(required_unless_present = "file")]
            body: Option<String>,
        },
        /// Show a topic's route (brokers and publish queues).
        Route {
            /// Topic.
            topic: String,
        },
        /// Measure throughput and latency.
        Bench {
            /// Topic.
            #[arg(long, default_value = "rmq-bench")]
            topic: String,
            /// How to send.
            #[arg(long, value_enum, default_value_t = Mode::Async)]
            mode: Mode,
            /// Body size in bytes.
            #[arg(long, default_value_t = 256)]
            size: usize,
            /// Sends in flight (async) or sending tasks (sync, oneway).
            #[arg(long, default_value_t = 64)]
            concurrency: usize,
            /// Stop after this many messages.
            #[arg(long)]
            count: Option<u64>,
            /// Stop after this many seconds (default 10 when no --count).
            #[arg(long)]
            duration: Option<u64>,
            /// Send at most this many messages per second (a steady stream, e.g. for measuring
            /// a consumer's latency).
            #[arg(long)]
            rate: Option<u64>,
            /// Auto-batching of sync sends (rmq-std `AutoBatch`): hold time in ms (Java's
            /// default is 10); messages to the topic leave together up to 32 KiB.
            #[arg(long)]
            auto_batch_ms: Option<u64>,
            /// With `--auto-batch-ms`: batches of the topic in flight before new messages wait
            /// (rmq-std `AutoBatch::max_in_flight`).
            #[arg(long, default_value_t = rmq_std::AutoBatch::default().max_in_flight)]
            auto_batch_in_flight: usize,
            /// The producer's fault tolerance.
            #[arg(long, value_enum, default_value_t = Fault::Adaptive)]
            fault_profile: Fault,
            /// Message trace on (`ProducerBuilder::message_trace`): a Pub record of every
            /// send to RMQ_SYS_TRACE_TOPIC, or to `--trace-topic`.
            #[arg(long)]
            trace: bool,
            /// The trace topic (implies `--trace`).
            #[arg(long)]
            trace_topic: Option<String>,
        },
        /// Measure consumer throughput and latency: a new group (`--group`) consumes `--count`
        /// messages of `--topic` from its first offset through the `run` listener with a
        /// handler that does nothing; prints one `RESULT` line (first to last message: msgs/s;
        /// born-to-consume latency p50/p99), the format of tests/bench/compare's peers.
        BenchConsume {
            /// Topic.
            #[arg(long)]
            topic: String,
            /// Messages to consume.
            #[arg(long)]
            count: u64,
            /// Give up (exit 1) after this many seconds.
            #[arg(long, default_value_t = 300)]
            timeout_s: u64,
        },
        /// Publish a telemetry stream; starts a local RocketMQ first when none answers on
        /// 127.0.0.1:9876 and no --namesrv is given.
        Demo {
            /// Topic.
            #[arg(long, default_value = "rmq-demo-telemetry")]
            topic: String,
            /// Messages to publish.
            #[arg(long, default_value_t = 5000)]
            count: u64,
            /// Simulated devices (message keys; ordered per device by sharding key).
            #[arg(long, default_value_t = 16)]
            devices: u32,
        },
        /// Every broker of every cluster: cluster, broker name, id (0 master) and address
        /// (`mqadmin clusterList`).
        Cluster,
        /// List topics (`mqadmin topicList`) or create one on every master of a cluster
        /// (`mqadmin updateTopic -c`).
        Topics {
            #[command(subcommand)]
            action: Topics,
        },
        /// How a group reads a topic on every master of a cluster, RocketMQ 5.x (`mqadmin
        /// setConsumeMode -c`): `pop` (Java push consumers whose client rebalance is off pop
        /// the queues the brokers hand out) or `pull`.
        ConsumeMode {
            /// Consumer group.
            group: String,
            /// Topic.
            #[arg(long)]
            topic: String,
            /// `pop` or `pull`.
            #[arg(long, value_parser = ["pop", "pull"])]
            mode: String,
            /// Cluster.
            #[arg(long, default_value = "DefaultCluster")]
            cluster: String,
            /// With `pop`: how many consumers share each queue (-1: every consumer pops every
            /// queue).
            #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
            pop_share_queues: i32,
        },
        /// A consumer group's offsets and lag per queue, and the total (`mqadmin
        /// consumerProgress -g`); exits 1 when no broker has offsets of the group.
        Progress {
            /// Consumer group.
            group: String,
            /// Only this topic.
            #[arg(long)]
            topic: Option<String>,
        },
        /// Find messages by key (`mqadmin queryMsgByKey`) or by id (`queryMsgById`: the
        /// producer's msgId looked up in the topic's index, else an offsetMsgId read from its
        /// broker); prints them as `consume` does. Exits 1 when nothing is found.
        Query {
            #[command(flatten)]
            lookup: Lookup,
            /// Topic (required with `--key`; lets `--id` be the producer's msgId).
            #[arg(long)]
            topic: Option<String>,
            /// At most this many messages per broker (`--key`).
            #[arg(long, default_value_t = 64)]
            max: i32,
        },
        /// Move a consumer group's offsets on a topic to a point in time (`mqadmin
        /// resetOffsetByTime`): each queue to its first message stored then or later. Running
        /// consumers of the group restart from there.
        ResetOffset {
            /// Consumer group.
            group: String,
            /// Topic.
            #[arg(long)]
            topic: String,
            /// Unix time in ms, `now` (skip everything stored), or `first` (0: from the start).
            #[arg(long, value_parser = parse_time)]
            to_time: i64,
        },
    }

    /// What `rmq query` looks for.
    #[derive(clap::Args, Debug)]
    #[group(required = true, multiple = false)]
    struct Lookup {
        /// A message id: the producer's (`msgId`, with `--topic`) or the broker's
        /// (`offsetMsgId`).
        #[arg(long)]
        id: Option<String>,
        /// One of the messages' keys (with `--topic`).
        #[arg(long)]
        key: Option<String>,
    }

    #[derive(Subcommand, Debug)]
    enum Topics {
        /// Every topic the NameServer knows, one per line, sorted.
        List,
        /// Create (or update) a topic on every master of `--cluster`.
        Create {
            /// Topic.
            topic: String,
            /// Cluster.
            #[arg(long, default_value = "DefaultCluster")]
            cluster: String,
            /// Read queues per broker.
            #[arg(long, default_value_t = 8)]
            read_queues: i32,
            /// Write queues per broker.
            #[arg(long, default_value_t = 8)]
            write_queues: i32,
            /// Permission: 6 read and write, 4 read only, 2 write only.
            #[arg(long, default_value_t = 6)]
            perm: i32,
            /// An ordered topic.
            #[arg(long)]
            order: bool,
        },
    }

    /// `1500ms`, `90s`, `5m` or `2h`.
    fn parse_delay(s: &str) -> Result<Duration, String> {
        let bad = || format!("{s:?}: expected a number with ms, s, m or h (e.g. 90s)");
        let at = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let n: u64 = s[..at].parse().map_err(|_| bad())?;
        let unit = match &s[at..] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return Err(bad()),
        };
        n.checked_mul(unit)
            .map(Duration::from_millis)
            .ok_or_else(bad)
    }

    fn parse_time(s: &str) -> Result<i64, String> {
        match s {
            "now" => Ok(unix_ms()),
            "first" => Ok(0),
            ms => ms
                .parse()
                .map_err(|_| format!("{ms:?}: expected a Unix time in ms, now or first")),
        }
    }

    /// The operator's client, with the global options.
    fn admin(cli: &Cli) -> Result<rmq_admin::Admin, Box<dyn std::error::Error>> {
        let b = rmq_admin::Admin::builder()
            .namesrv_addr(&need_namesrv(cli)?)
            .request_timeout(Duration::from_millis(cli.timeout_ms.max(1000)));
        Ok(secured!(b, cli).build())
    }

    pub fn main() -> ExitCode {
        let cli = Cli::parse();
        let level = match cli.verbose {
            0 => "warn",
            1 => "rmq_std=debug,info",
            _ => "rmq_std=trace,debug",
        };
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .try_init();
        let mut builder = match cli.threads {
            Some(1) => tokio::runtime::Builder::new_current_thread(),
            n => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                if let Some(n) = n.filter(|n| *n > 1) {
                    b.worker_threads(n);
                }
                b
            }
        };
        let rt = match builder.enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("rmq: cannot start the tokio runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
        match rt.block_on(run(cli)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                warn_chain("", &*e);
                ExitCode::FAILURE
            }
        }
    }

    /// Prints `rmq: <context: >error` and its cause chain to stderr, each cause once (a
    /// message may quote its source already).
    pub(crate) fn warn_chain(context: &str, e: &dyn std::error::Error) {
        let sep = if context.is_empty() { "" } else { ": " };
        eprintln!("rmq: {context}{sep}{e}");
        let (mut shown, mut cause) = (e.to_string(), e.source());
        while let Some(c) = cause {
            let text = c.to_string();
            if !shown.contains(&text) {
                eprintln!("  caused by: {text}");
            }
            shown = text;
            cause = c.source();
        }
    }

    type Res = Result<(), Box<dyn std::error::Error>>;

    /// One line per message `rmq send` sent (`None`: written oneway).
    fn print_sent(r: Option<&rmq_std::SendResult>, json: bool) {
        match (r, json) {
            (Some(r), false) => println!(
                "{:?} msgId={} offsetMsgId={} broker={} queue={} offset={} attempts={}",
                r.status,
                r.msg_id,
                r.offset_msg_id,
                r.queue.broker_name,
                r.queue.queue_id,
                r.queue_offset,
                r.attempts
            ),
            (Some(r), true) => println!(
                "{}",
                serde_json::json!({
                    "status": format!("{:?}", r.status),
                    "msgId": r.msg_id,
                    "offsetMsgId": r.offset_msg_id,
                    "topic": r.queue.topic,
                    "brokerName": r.queue.broker_name,
                    "queueId": r.queue.queue_id,
                    "queueOffset": r.queue_offset,
                    "attempts": r.attempts,
                })
            ),
            (None, false) => println!("written (oneway)"),
            (None, true) => println!("{}", serde_json::json!({"status": "Oneway"})),
        }
    }

    /// The producer's own monitoring numbers (`Producer::metrics`), beside the tool's report.
    fn print_producer_metrics(m: &rmq_std::metrics::ProducerMetrics) {
        let l = m.latency_us;
        println!(
            "client metrics: {} sent, {} failed, {} retries; latency p50 {} us p99 {} us max {} us; {} sends/s (last 10 s)",
            m.counters.sent,
            m.counters.failed,
            m.counters.retried,
            l.p50,
            l.p99,
            l.max,
            m.sends_per_sec
        );
        let f = m.failures;
        let kinds = [
            f.validation,
            f.no_route,
            f.no_name_server,
            f.broker,
            f.transport,
            f.timeout,
            f.malformed,
            f.shutdown,
            f.capacity,
            f.request,
            f.authentication,
        ];
        let failed: Vec<String> = rmq_std::metrics::FailureCounts::NAMES
            .iter()
            .zip(kinds)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        if !failed.is_empty() {
            println!("failures by kind: {}", failed.join(", "));
        }
    }

    fn builder(
        cli: &Cli,
        namesrv: &str,
    ) -> Result<rmq_std::ProducerBuilder, Box<dyn std::error::Error>> {
        let b = Producer::builder()
            .namesrv_addr(namesrv)
            .producer_group(&cli.group)
            .send_msg_timeout(Duration::from_millis(cli.timeout_ms))
            .serialize_type(match cli.serialize_type {
                Header::Json => rmq_std::core::wire::SerializeType::JSON,
                Header::Rocketmq => rmq_std::core::wire::SerializeType::ROCKETMQ,
            });
        Ok(secured!(b, cli))
    }

    /// The producer of `b`, and for `--mode transaction` its transactional front (whose local
    /// transactions commit at once, as do its answers to check-backs).
    async fn start(
        b: rmq_std::ProducerBuilder,
        mode: Mode,
    ) -> Result<(Producer, Option<TransactionProducer>), Box<dyn std::error::Error>> {
        if mode != Mode::Transaction {
            return Ok((b.start().await?, None));
        }
        let t = b
            .start_transactional(|_: &rmq_std::consumer::ConsumedMessage| LocalState::Commit)
            .await?;
        Ok((t.producer().clone(), Some(t)))
    }

    /// Sends `m` as `mode` says (`None`: written oneway).
    async fn send(
        p: &Producer,
        tx: Option<&TransactionProducer>,
        mode: Mode,
        m: Message,
    ) -> Result<Option<rmq_std::SendResult>, SendError> {
        match (mode, tx) {
            (Mode::Sync, _) | (Mode::Transaction, None) => p.send(m).await.map(Some),
            (Mode::Async, _) => p.send_async(m).await.map(Some),
            (Mode::Oneway, _) => p.send_oneway(m).await.map(|()| None),
            (Mode::Transaction, Some(t)) => {
                let r = t.send(m, |_| async { LocalState::Commit }).await?;
                Ok(Some(r.send))
            }
            (Mode::Request, _) => p.request(m, Duration::from_secs(3)).await.map(|_| None),
        }
    }

    /// For `--mode request`: a consumer of `topic` (from its last offset) whose messages `p`
    /// answers with their own body, each reply on a task of its own (the producer's metrics
    /// count the replies too), until the returned task is aborted.
    async fn serve_replies(
        cli: &Cli,
        topic: &str,
        p: Producer,
    ) -> Result<
        (rmq_std::consumer::Consumer, tokio::task::JoinHandle<()>),
        Box<dyn std::error::Error>,
    > {
        use rmq_std::consumer::{ConsumeFromWhere, Consumer};
        let b = Consumer::builder()
            .namesrv_addr(&need_namesrv(cli)?)
            .group("rmq-bench-replier")
            .subscribe(topic, "*")
            .consume_from(ConsumeFromWhere::LastOffset);
        let c = secured!(b, cli).start().await?;
        let (serving, warm) = (c.clone(), p.clone());
        let task = tokio::spawn(async move {
            loop {
                for m in serving.poll(256, Duration::from_millis(100)).await {
                    let (p, c) = (p.clone(), serving.clone());
                    tokio::spawn(async move {
                        let _ = p.reply(&m, m.body.clone()).await;
                        c.ack(&m);
                    });
                }
            }
        });
        // Until it answers: a queue starts at its last offset when first pulled, so requests
        // stored before that are never seen (they would time out inside the measurement).
        let t0 = Instant::now();
        loop {
            let probe = Message::new(topic, "warm-up");
            match warm.request(probe, Duration::from_millis(500)).await {
                Ok(_) => break,
                Err(_) if t0.elapsed() < Duration::from_secs(30) => {}
                Err(e) => return Err(format!("the replier does not answer: {e}").into()),
            }
        }
        Ok((c, task))
    }

    /// A producer whose start looks `topic`'s route up.
    async fn producer(
        cli: &Cli,
        namesrv: &str,
        topic: &str,
    ) -> Result<Producer, Box<dyn std::error::Error>> {
        Ok(builder(cli, namesrv)?.topics([topic]).start().await?)
    }

    /// The bodies `rmq send` sends: the argument or the file's content, whole or by line.
    fn bodies(
        body: Option<&str>,
        file: Option<&std::path::Path>,
        lines: bool,
    ) -> Result<Vec<Vec<u8>>, Box<dyn std::error::Error>> {
        let whole = match (body, file) {
            (Some(b), _) => b.as_bytes().to_vec(),
            (None, Some(p)) if p.as_os_str() == "-" => {
                let mut v = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut v)?;
                v
            }
            (None, Some(p)) => {
                std::fs::read(p).map_err(|e| format!("--file {}: {e}", p.display()))?
            }
            (None, None) => return Err("no body: give it, or --file".into()),
        };
        if !lines {
            return Ok(vec![whole]);
        }
        Ok(whole
            .split(|b| *b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect())
    }

    fn need_namesrv(cli: &Cli) -> Result<String, Box<dyn std::error::Error>> {
        cli.namesrv.clone().ok_or_else(|| {
            "no NameServer: pass --namesrv host:9876 (or set RMQ_NAMESRV), or --namesrv-domain"
                .into()
        })
    }

    async fn run(mut cli: Cli) -> Res {
        if let (None, Some(d)) = (&cli.namesrv, &cli.namesrv_domain) {
            let list = rmq_std::fetch_name_servers(&rmq_std::NamesrvDomain::new(d)).await?;
            cli.namesrv = Some(list.join(";"));
        }
        match &cli.cmd {
            Cmd::Send {
                topic,
                tags,
                keys,
                props,
                delay_level,
                deliver_at,
                delay,
                mode,
                file,
                lines,
                body,
            } => {
                let bodies = bodies(body.as_deref(), file.as_deref(), *lines)?;
                let mut props_kv = Vec::new();
                for kv in props {
                    let (k, v) = kv
                        .split_once('=')
                        .ok_or_else(|| format!("--prop {kv:?}: expected k=v"))?;
                    props_kv.push((k, v));
                }
                let b = builder(&cli, &need_namesrv(&cli)?)?.topics([topic]);
                let (p, tx) = start(b, *mode).await?;
                let mut outcome = Ok(());
                for body in bodies {
                    let mut m = Message::new(topic.clone(), body);
                    if let Some(t) = tags {
                        m = m.with_tags(t.clone());
                    }
                    if !keys.is_empty() {
                        m = m.with_keys(keys.clone());
                    }
                    for (k, v) in &props_kv {
                        m = m.with_property(*k, *v);
                    }
                    if let Some(l) = delay_level {
                        m = m.with_delay_level(*l);
                    }
                    if let Some(ms) = deliver_at {
                        let at = std::time::UNIX_EPOCH + Duration::from_millis(*ms);
                        m = m.with_deliver_at(at);
                    }
                    if let Some(d) = delay {
                        m = m.with_delay(*d);
                    }
                    if *mode == Mode::Request {
                        // The reply, as `rmq consume` prints a message.
                        match p.request(m, Duration::from_secs(3)).await {
                            Ok(r) if cli.json => println!("{}", json_line(&r)),
                            Ok(r) => println!("{}", String::from_utf8_lossy(&r.body)),
                            Err(e) => {
                                outcome = Err(e);
                                break;
                            }
                        }
                        continue;
                    }
                    match send(&p, tx.as_ref(), *mode, m).await {
                        Ok(r) => print_sent(r.as_ref(), cli.json),
                        Err(e) => {
                            outcome = Err(e);
                            break;
                        }
                    }
                }
                p.shutdown().await;
                Ok(outcome?)
            }
            Cmd::Route { topic } => {
                let p = producer(&cli, &need_namesrv(&cli)?, topic).await?;
                let r = p.route(topic).await;
                p.shutdown_timeout(Duration::ZERO).await;
                let r = r?;
                if cli.json {
                    let brokers: Vec<_> = r
                        .brokers
                        .iter()
                        .map(|(name, addr)| serde_json::json!({"brokerName": name, "master": addr}))
                        .collect();
                    let queues: Vec<_> = r
                        .queues
                        .iter()
                        .map(|q| serde_json::json!({"brokerName": q.broker_name, "queueId": q.queue_id}))
                        .collect();
                    let doc = serde_json::json!({
                        "topic": topic,
                        "fromDefaultTopic": r.from_default_topic,
                        "brokers": brokers,
                        "writeQueues": queues,
                    });
                    println!("{doc}");
                    return Ok(());
                }
                if r.from_default_topic {
                    println!("topic {topic} does not exist; the TBW102 template route applies");
                }
                for (name, addr) in &r.brokers {
                    println!("broker {name} master {}", addr.as_deref().unwrap_or("-"));
                }
                let mut per: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
                for q in &r.queues {
                    per.entry(&q.broker_name).or_default().push(q.queue_id);
                }
                for (b, qs) in per {
                    println!("  {b}: write queues {qs:?}");
                }
                Ok(())
            }
            Cmd::Bench {
                topic,
                mode,
                size,
                concurrency,
                count,
                duration,
                rate,
                auto_batch_ms,
                auto_batch_in_flight,
                fault_profile,
                trace,
                trace_topic,
            } => {
                let mut b = builder(&cli, &need_namesrv(&cli)?)?.topics([topic]);
                b = match trace_topic {
                    Some(t) => b.trace_topic(t.as_str()),
                    None => b.message_trace(*trace),
                };
                b = match fault_profile {
                    Fault::Off => b.send_latency_fault_enable(false),
                    Fault::Java49 => b.fault_profile(rmq_std::FaultProfile::Java49),
                    Fault::Java5 => b.fault_profile(rmq_std::FaultProfile::Java5),
                    Fault::Adaptive => b.fault_profile(rmq_std::FaultProfile::Adaptive),
                };
                if let Some(ms) = auto_batch_ms {
                    b = b.auto_batch(rmq_std::AutoBatch {
                        hold: Duration::from_millis(*ms),
                        max_in_flight: (*auto_batch_in_flight).max(1),
                        ..rmq_std::AutoBatch::default()
                    });
                }
                let (p, tx) = start(b, *mode).await?;
                let replier = match mode {
                    Mode::Request => Some(serve_replies(&cli, topic, p.clone()).await?),
                    _ => None,
                };
                let limit = match (count, duration) {
                    (Some(n), _) => Limit::Count(*n),
                    (None, Some(s)) => Limit::Time(Duration::from_secs(*s)),
                    (None, None) => Limit::Time(Duration::from_secs(10)),
                };
                let shape = Shape {
                    mode: *mode,
                    size: *size,
                    concurrency: *concurrency,
                    rate: *rate,
                };
                let report = bench(&p, tx, topic, shape, limit, "bench").await;
                let m = p.metrics();
                if let Some((c, task)) = replier {
                    task.abort();
                    c.shutdown().await;
                }
                p.shutdown().await;
                if cli.json {
                    println!("{}", report.json(&m));
                } else {
                    report.print();
                    print_producer_metrics(&m);
                }
                Ok(())
            }
            Cmd::Demo {
                topic,
                count,
                devices,
            } => demo(&cli, topic, *count, *devices).await,
            Cmd::Consume {
                topic,
                tag,
                sql,
                from,
                count,
                exit_at_end,
                no_commit,
                pop,
                invisible,
            } => {
                let tail = Tail {
                    sql: sql.clone(),
                    from: *from,
                    count: *count,
                    exit_at_end: *exit_at_end,
                    no_commit: *no_commit,
                };
                if *pop {
                    let invisible = Duration::from_secs(*invisible);
                    consume_pop(&cli, topic, tag, tail, invisible).await
                } else {
                    consume(&cli, topic, tag, tail).await
                }
            }
            Cmd::BenchConsume {
                topic,
                count,
                timeout_s,
            } => bench_consume(&cli, topic, *count, Duration::from_secs(*timeout_s)).await,
            Cmd::Cluster => crate::ops::cluster(&admin(&cli)?, cli.json).await,
            Cmd::Topics {
                action: Topics::List,
            } => crate::ops::list_topics(&admin(&cli)?, cli.json).await,
            Cmd::Topics {
                action:
                    Topics::Create {
                        topic,
                        cluster,
                        read_queues,
                        write_queues,
                        perm,
                        order,
                    },
            } => {
                let mut spec = rmq_admin::TopicSpec::queues(*read_queues, *write_queues);
                spec.perm = *perm;
                spec.order = *order;
                crate::ops::create_topic(&admin(&cli)?, cli.json, cluster, topic, &spec).await
            }
            Cmd::ConsumeMode {
                group,
                topic,
                mode,
                cluster,
                pop_share_queues,
            } => {
                let pop = mode == "pop";
                let admin = admin(&cli)?;
                let brokers = admin
                    .set_consume_mode(cluster, topic, group, pop, *pop_share_queues)
                    .await?;
                // Every master was asked (as mqadmin does); any refusal fails the command.
                let mut refused = 0;
                for (b, r) in brokers {
                    match r {
                        Ok(()) => println!("{group} reads {topic} by {mode} on {b}"),
                        Err(e) => {
                            eprintln!("{b}: {e}");
                            refused += 1;
                        }
                    }
                }
                match refused {
                    0 => Ok(()),
                    n => Err(format!("{n} broker(s) refused the consume mode").into()),
                }
            }
            Cmd::Progress { group, topic } => {
                crate::ops::progress(&admin(&cli)?, cli.json, group, topic.as_deref()).await
            }
            Cmd::Query { lookup, topic, max } => {
                let admin = admin(&cli)?;
                let found = match (&lookup.id, &lookup.key, topic) {
                    (_, Some(key), Some(t)) => {
                        admin
                            .query_by_key(t, key, false, *max, (0, i64::MAX))
                            .await?
                    }
                    (_, Some(_), None) => return Err("--key needs --topic".into()),
                    (Some(id), _, Some(t)) => {
                        let by_key = admin.query_by_key(t, id, true, 1, (0, i64::MAX)).await?;
                        match by_key.is_empty() {
                            true => vec![admin.view_message(id).await?],
                            false => by_key,
                        }
                    }
                    (Some(id), _, None) => vec![admin.view_message(id).await?],
                    (None, None, _) => return Err("give --id or --key".into()),
                };
                if found.is_empty() {
                    return Err("no message found".into());
                }
                for m in &found {
                    println!(
                        "{}",
                        if cli.json {
                            json_line(m)
                        } else {
                            plain_line(m)
                        }
                    );
                }
                Ok(())
            }
            Cmd::ResetOffset {
                group,
                topic,
                to_time,
            } => crate::ops::reset_offset(&admin(&cli)?, cli.json, group, topic, *to_time).await,
        }
    }

    /// `rmq bench-consume`: see [`Cmd::BenchConsume`].
    async fn bench_consume(cli: &Cli, topic: &str, count: u64, timeout: Duration) -> Res {
        use rmq_std::consumer::{ConsumeResult, Consumer};
        use rmq_std::core::consumer::ConsumeFromWhere;
        struct Seen {
            first: Option<Instant>,
            last: Option<Instant>,
            size: usize,
            lat: Histogram<u64>,
        }
        let b = Consumer::builder()
            .namesrv_addr(&need_namesrv(cli)?)
            .group(&cli.group)
            .subscribe(topic, "*")
            .consume_from(ConsumeFromWhere::FirstOffset);
        let c = secured!(b, cli).start().await?;
        let n = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(std::sync::Mutex::new(Seen {
            first: None,
            last: None,
            size: 0,
            lat: Histogram::new_with_bounds(1, 3_600_000_000, 3)?,
        }));
        let done = Arc::new(tokio::sync::Notify::new());
        let runner = c.clone();
        let (n2, seen2, done2) = (n.clone(), seen.clone(), done.clone());
        let run = tokio::spawn(async move {
            runner
                .run(move |batch| {
                    let (n, seen, done) = (n2.clone(), seen2.clone(), done2.clone());
                    async move {
                        let now_ms = unix_ms();
                        let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
                        for m in &batch {
                            let k = n.fetch_add(1, Ordering::Relaxed) + 1;
                            if k > count {
                                break;
                            }
                            let at = Instant::now();
                            if s.first.is_none() {
                                s.first = Some(at);
                                s.size = m.body.len();
                            }
                            let us = now_ms.saturating_sub(m.born_timestamp).max(0) * 1000;
                            let _ = s.lat.record((us as u64).max(1));
                            if k == count {
                                s.last = Some(at);
                                done.notify_one();
                            }
                        }
                        ConsumeResult::Success
                    }
                })
                .await;
        });
        let finished = tokio::time::timeout(timeout, done.notified()).await.is_ok();
        let st = c.stats();
        eprintln!(
            "consumer: {} pulls, {} flow-control delays, {} delivered, {} acked, {} rebalances",
            st.pulls, st.flow_control_delays, st.delivered, st.acked, st.rebalances
        );
        c.shutdown().await;
        let _ = run.await;
        let s = seen.lock().unwrap_or_else(|p| p.into_inner());
        let got = n.load(Ordering::Relaxed).min(count);
        let secs = match (s.first, s.last) {
            (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
            (Some(a), None) => a.elapsed().as_secs_f64(),
            _ => 0.0,
        };
        let rate = got.saturating_sub(1) as f64 / secs.max(1e-9);
        let (p50, p99) = (s.lat.value_at_quantile(0.5), s.lat.value_at_quantile(0.99));
        if cli.json {
            let doc = serde_json::json!({
                "mode": "consume", "size": s.size, "msgs": got, "errors": count - got,
                "seconds": secs, "msgsPerSec": rate, "latencyUs": {"p50": p50, "p99": p99},
            });
            println!("{doc}");
        } else {
            println!(
                "RESULT client=rmq mode=consume size={} conc=0 msgs={got} errors={} \
                 secs={secs:.3} msgs_per_s={rate:.1} p50_us={p50} p99_us={p99}",
                s.size,
                count - got,
            );
        }
        if finished {
            Ok(())
        } else {
            Err(format!("only {got} of {count} messages within {timeout:?}").into())
        }
    }

    fn unix_ms() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// How `rmq consume` reads.
    struct Tail {
        sql: Option<String>,
        from: From,
        count: Option<u64>,
        exit_at_end: bool,
        no_commit: bool,
    }

    async fn consume(cli: &Cli, topic: &str, tag: &str, tail: Tail) -> Res {
        use rmq_std::consumer::{Consumer, MessageModel};
        use rmq_std::core::consumer::ConsumeFromWhere;
        use std::io::Write;
        let (from, json) = (tail.from, cli.json);
        let mut b = Consumer::builder().namesrv_addr(&need_namesrv(cli)?);
        b = match &tail.sql {
            Some(sql) => b.subscribe_sql(topic, sql),
            None => b.subscribe(topic, tag),
        };
        let mut b = b.consume_from(match from {
            From::First => ConsumeFromWhere::FirstOffset,
            From::Last | From::Timestamp(_) => ConsumeFromWhere::LastOffset,
        });
        let mut scratch = None;
        let group = if tail.no_commit {
            let g = format!(
                "rmq-tail-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis())
            );
            let path = std::env::temp_dir().join(format!("{g}.offsets"));
            b = b
                .message_model(MessageModel::Broadcasting)
                .offset_store(path.clone());
            scratch = Some(path);
            g
        } else {
            cli.group.clone()
        };
        let c = secured!(b.group(&group), cli).start().await?;
        if let From::Timestamp(ms) = from {
            for q in c.assigned_queues().iter().filter(|q| q.topic == topic) {
                c.seek(q, rmq_std::consumer::Position::Timestamp(ms));
            }
        }
        eprintln!("consuming {topic} ({tag}) as group {group}; Ctrl-C to stop");
        let count = tail.count;
        let mut left = count.unwrap_or(u64::MAX);
        let mut out = std::io::stdout().lock();
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        let mut result = Ok(());
        while left > 0 {
            let batch = tokio::select! {
                _ = &mut ctrl_c => break,
                b = c.poll(usize::try_from(left.min(64)).unwrap_or(64), Duration::from_secs(1)) => b,
            };
            for m in batch
                .iter()
                .take(usize::try_from(left).unwrap_or(usize::MAX))
            {
                let line = if json { json_line(m) } else { plain_line(m) };
                if let Err(e) = writeln!(out, "{line}") {
                    // A closed pipe (`| head`) ends the run like Ctrl-C.
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        result = Err(e.into());
                    }
                    left = 0;
                    break;
                }
                c.ack(m);
                left -= 1;
            }
            let _ = out.flush();
            if tail.exit_at_end && at_end(&c, topic) {
                break;
            }
        }
        let m = c.metrics();
        c.shutdown().await;
        if let Some(p) = scratch {
            let _ = std::fs::remove_file(p);
        }
        let s = c.stats();
        eprintln!(
            "{} message(s) received, {} committed offset update(s)",
            s.acked, s.commits
        );
        let h = m.handler_time_us;
        eprintln!(
            "consumer metrics: {} delivered/s (last 10 s), handler time p50 {} us p99 {} us, lag {} over {} queue(s)",
            m.delivered_per_sec,
            h.p50,
            h.p99,
            m.lag,
            m.queues.len()
        );
        result
    }

    /// `rmq consume --pop`.
    async fn consume_pop(
        cli: &Cli,
        topic: &str,
        tag: &str,
        tail: Tail,
        invisible: Duration,
    ) -> Res {
        use rmq_std::consumer::Consumer;
        use rmq_std::core::consumer::ConsumeFromWhere;
        use std::io::Write;
        let mut b = Consumer::builder().namesrv_addr(&need_namesrv(cli)?);
        b = match &tail.sql {
            Some(sql) => b.subscribe_sql(topic, sql),
            None => b.subscribe(topic, tag),
        };
        b = b.consume_from(match tail.from {
            From::First => ConsumeFromWhere::FirstOffset,
            From::Last => ConsumeFromWhere::LastOffset,
            From::Timestamp(_) => return Err("--pop starts at the first or the last offset".into()),
        });
        if tail.exit_at_end {
            // A receive that finds nothing ends within a second.
            b = b.suspend(Duration::from_secs(1));
        }
        let group = &cli.group;
        let c = secured!(b.group(group), cli).start_pop().await?;
        eprintln!("popping {topic} ({tag}) as group {group}; Ctrl-C to stop");
        let (mut left, mut acked) = (tail.count.unwrap_or(u64::MAX), 0u64);
        let mut out = std::io::stdout().lock();
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        let mut result = Ok(());
        while left > 0 && result.is_ok() {
            let max = usize::try_from(left.min(32)).unwrap_or(32);
            let batch = tokio::select! {
                _ = &mut ctrl_c => break,
                b = c.receive(max, invisible) => b,
            };
            let batch = match batch {
                Ok(b) if b.is_empty() && tail.exit_at_end => break,
                Ok(b) => b,
                Err(e) => {
                    result = Err(e.into());
                    break;
                }
            };
            for m in batch
                .iter()
                .take(usize::try_from(left).unwrap_or(usize::MAX))
            {
                let line = if cli.json {
                    json_line(&m.message)
                } else {
                    plain_line(&m.message)
                };
                if let Err(e) = writeln!(out, "{line}") {
                    // A closed pipe (`| head`) ends the run like Ctrl-C.
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        result = Err(e.into());
                    }
                    left = 0;
                    break;
                }
                if let Err(e) = c.ack(m).await {
                    result = Err(e.into());
                    break;
                }
                (left, acked) = (left - 1, acked + 1);
            }
            let _ = out.flush();
        }
        c.shutdown().await;
        eprintln!("{acked} message(s) received and acknowledged");
        result
    }

    /// Every assigned queue of `topic` read to the end the broker last reported.
    fn at_end(c: &rmq_std::consumer::Consumer, topic: &str) -> bool {
        let queues = c.metrics().queues;
        let mut of_topic = queues.iter().filter(|q| q.queue.topic == topic).peekable();
        of_topic.peek().is_some() && of_topic.all(|q| q.lag == Some(0))
    }

    fn plain_line(m: &rmq_std::consumer::ConsumedMessage) -> String {
        format!(
            "{}:{}#{} msgId={} tags={} keys={} {}",
            m.queue.broker_name,
            m.queue.queue_id,
            m.queue_offset,
            m.msg_id,
            m.tags().unwrap_or("-"),
            m.keys().unwrap_or("-"),
            String::from_utf8_lossy(&m.body)
        )
    }

    fn json_line(m: &rmq_std::consumer::ConsumedMessage) -> String {
        use base64::Engine as _;
        let props: serde_json::Map<String, serde_json::Value> = m
            .properties
            .iter()
            .map(|(k, v)| (k.to_owned(), v.into()))
            .collect();
        let mut line = serde_json::json!({
            "topic": m.queue.topic,
            "broker": m.queue.broker_name,
            "queueId": m.queue.queue_id,
            "queueOffset": m.queue_offset,
            "msgId": m.msg_id,
            "tags": m.tags(),
            "keys": m.keys(),
            "properties": props,
            "bornTimestamp": m.born_timestamp,
            "storeTimestamp": m.store_timestamp,
            "reconsumeTimes": m.reconsume_times,
        });
        // The body last, as text or (not UTF-8) as base64.
        let (key, body) = match std::str::from_utf8(&m.body) {
            Ok(t) => ("body", t.to_owned()),
            Err(_) => (
                "bodyBase64",
                base64::engine::general_purpose::STANDARD.encode(&m.body),
            ),
        };
        line[key] = body.into();
        line.to_string()
    }

    #[derive(Clone, Copy, Debug)]
    enum Limit {
        Count(u64),
        Time(Duration),
    }

    struct Report {
        label: &'static str,
        ok: u64,
        failed: u64,
        elapsed: Duration,
        hist: Histogram<u64>,
        first_error: Option<String>,
        counters: rmq_std::CountersSnapshot,
    }

    impl Report {
        /// The report and the producer's metrics as one JSON object (`bench --json`).
        fn json(&self, m: &rmq_std::metrics::ProducerMetrics) -> serde_json::Value {
            let secs = self.elapsed.as_secs_f64().max(1e-9);
            let q = |v: f64| self.hist.value_at_quantile(v) as f64 / 1000.0;
            let (cpu, rss_kib) = usage();
            let c = &self.counters;
            let f = m.failures;
            let kinds = [
                f.validation,
                f.no_route,
                f.no_name_server,
                f.broker,
                f.transport,
                f.timeout,
                f.malformed,
                f.shutdown,
                f.capacity,
                f.request,
                f.authentication,
            ];
            let failures: serde_json::Map<String, serde_json::Value> =
                rmq_std::metrics::FailureCounts::NAMES
                    .iter()
                    .zip(kinds)
                    .map(|(k, n)| ((*k).to_owned(), n.into()))
                    .collect();
            serde_json::json!({
                "label": self.label, "ok": self.ok, "failed": self.failed, "seconds": secs,
                "msgsPerSec": self.ok as f64 / secs,
                "latencyMs": {
                    "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p999": q(0.999),
                    "max": self.hist.max() as f64 / 1000.0,
                },
                "cpuSeconds": cpu.as_secs_f64(),
                "cpuMicrosPerMsg": cpu.as_secs_f64() * 1e6 / (self.ok.max(1) as f64),
                "peakRssMiB": rss_kib as f64 / 1024.0,
                "counters": {
                    "attempts": c.attempts, "retried": c.retried,
                    "brokersIsolated": c.brokers_isolated,
                    "lateResponsesDropped": c.late_responses_dropped,
                    "connectionsLost": c.connections_lost,
                },
                "failuresByKind": failures,
                "firstError": self.first_error,
            })
        }

        fn print(&self) {
            let secs = self.elapsed.as_secs_f64().max(1e-9);
            println!(
                "{}: {} ok, {} failed in {:.2} s = {:.0} msgs/s",
                self.label,
                self.ok,
                self.failed,
                secs,
                self.ok as f64 / secs
            );
            if !self.hist.is_empty() {
                let q = |v: f64| self.hist.value_at_quantile(v) as f64 / 1000.0;
                println!(
                    "latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
                    q(0.5),
                    q(0.9),
                    q(0.99),
                    q(0.999),
                    self.hist.max() as f64 / 1000.0
                );
            }
            let (cpu, rss_kib) = usage();
            println!(
                "process: cpu {:.2} s since start ({:.1} µs/msg), peak RSS {:.1} MiB",
                cpu.as_secs_f64(),
                cpu.as_secs_f64() * 1e6 / (self.ok.max(1) as f64),
                rss_kib as f64 / 1024.0
            );
            let c = &self.counters;
            println!(
                "counters: attempts {} retried {} brokers isolated {} late responses {} connections lost {}",
                c.attempts,
                c.retried,
                c.brokers_isolated,
                c.late_responses_dropped,
                c.connections_lost
            );
            if let Some(e) = &self.first_error {
                println!("first error: {e}");
            }
        }
    }

    /// The demo's two phases: warm-up (the first `warm` stored messages) and steady state.
    struct Phases {
        started: Instant,
        first: std::sync::OnceLock<Duration>,
        warm_end: std::sync::OnceLock<Instant>,
        hist: [std::sync::Mutex<Histogram<u64>>; 2],
    }

    impl Phases {
        fn new(started: Instant) -> Self {
            let h = || {
                std::sync::Mutex::new(
                    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds"),
                )
            };
            Phases {
                started,
                first: std::sync::OnceLock::new(),
                warm_end: std::sync::OnceLock::new(),
                hist: [h(), h()],
            }
        }

        /// The `n`-th message was stored after `us` microseconds.
        fn stored(&self, n: u64, warm: u64, us: u64) {
            let _ = self.first.set(self.started.elapsed());
            if n == warm {
                let _ = self.warm_end.set(Instant::now());
            }
            if let Ok(mut h) = self.hist[usize::from(n > warm)].lock() {
                let _ = h.record(us);
            }
        }

        fn print(&self, warm: u64, ok: u64, cpu: Duration, auto_created: bool) {
            let p99 = |i: usize| {
                self.hist[i]
                    .lock()
                    .map_or(0.0, |h| h.value_at_quantile(0.99) as f64 / 1000.0)
            };
            let first = self.first.get().map_or(0.0, |d| d.as_secs_f64() * 1000.0);
            let why = if auto_created {
                "route lookup, topic auto-created from TBW102"
            } else {
                "route lookup"
            };
            println!("cold start: first message stored {first:.0} ms after the first send ({why})");
            if let Some(w) = self.warm_end.get() {
                let warm_s = w.duration_since(self.started).as_secs_f64().max(1e-9);
                let rest_s = w.elapsed().as_secs_f64().max(1e-9);
                println!(
                    "warm-up, first {warm}: {:.0} msgs/s, p99 {:.2} ms; steady state, next {}: {:.0} msgs/s, p99 {:.2} ms",
                    warm as f64 / warm_s,
                    p99(0),
                    ok.saturating_sub(warm),
                    ok.saturating_sub(warm) as f64 / rest_s,
                    p99(1)
                );
            }
            println!(
                "client CPU during the run: {:.2} s ({:.1} µs/msg; the broker launcher's startup is not counted)",
                cpu.as_secs_f64(),
                cpu.as_secs_f64() * 1e6 / ok.max(1) as f64
            );
        }
    }

    /// Client CPU time (user + system) and peak RSS in KiB, from getrusage(2).
    #[allow(unsafe_code)]
    fn usage() -> (Duration, u64) {
        // SAFETY: getrusage only writes into the zero-initialised struct we own and pass by
        // pointer; RUSAGE_SELF is a valid `who`.
        let ru = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
                return (Duration::ZERO, 0);
            }
            ru
        };
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec.max(0) as u64)
                + Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        (
            tv(ru.ru_utime) + tv(ru.ru_stime),
            ru.ru_maxrss.max(0) as u64,
        )
    }

    fn progress(limit: Limit, label: &str) -> ProgressBar {
        let (len, unit) = match limit {
            Limit::Count(n) => (n, "msgs"),
            Limit::Time(d) => (d.as_millis() as u64, "ms"),
        };
        let pb = ProgressBar::new(len);
        let tpl = format!(
            "{label} [{{elapsed_precise}}] {{bar:40.cyan/blue}} {{pos}}/{{len}} {unit} {{msg}}"
        );
        if let Ok(style) = ProgressStyle::with_template(&tpl) {
            pb.set_style(style.progress_chars("=> "));
        }
        pb
    }

    /// What `bench` sends: how, how big, how many at once, at most how many per second.
    #[derive(Clone, Copy, Debug)]
    struct Shape {
        mode: Mode,
        size: usize,
        concurrency: usize,
        rate: Option<u64>,
    }

    /// Runs the benchmark loop: `concurrency` sends in flight until `limit`.
    /// Significant figures of the send bench's latency histograms: 1 % resolution. (3 figures
    /// made each of the 64 tasks' histograms ~400 KiB, and recording a sample a cache miss:
    /// ~4 % of the client's CPU in a profile of the async 1 KiB cell.)
    const SEND_SIGFIG: u8 = 2;

    async fn bench(
        p: &Producer,
        tx: Option<TransactionProducer>,
        topic: &str,
        shape: Shape,
        limit: Limit,
        label: &'static str,
    ) -> Report {
        let Shape {
            mode,
            size,
            concurrency,
            rate,
        } = shape;
        let paced = Arc::new(AtomicU64::new(0));
        let body = bytes::Bytes::from(vec![b'x'; size.max(1)]);
        let started = Instant::now();
        let issued = Arc::new(AtomicU64::new(0));
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
        let pb = progress(limit, label);
        let take = {
            let issued = issued.clone();
            let stop = stop.clone();
            move || -> bool {
                if stop.load(Ordering::Relaxed) {
                    return false;
                }
                match limit {
                    Limit::Count(n) => issued.fetch_add(1, Ordering::Relaxed) < n,
                    Limit::Time(d) => started.elapsed() < d,
                }
            }
        };
        let mut workers = Vec::new();
        for _ in 0..concurrency.max(1) {
            let (p, tx, topic, body) = (p.clone(), tx.clone(), topic.to_owned(), body.clone());
            let (ok, failed, first_error, take, paced) = (
                ok.clone(),
                failed.clone(),
                first_error.clone(),
                take.clone(),
                paced.clone(),
            );
            workers.push(tokio::spawn(async move {
                let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, SEND_SIGFIG)
                    .expect("histogram bounds");
                // One clock read per message: a send's end is the next one's start.
                let mut t0 = Instant::now();
                while take() {
                    if let Some(r) = rate.filter(|r| *r > 0) {
                        // The k-th message of the stream leaves at k / rate seconds.
                        let k = paced.fetch_add(1, Ordering::Relaxed);
                        let at = started + Duration::from_secs_f64(k as f64 / r as f64);
                        tokio::time::sleep_until(at.into()).await;
                        t0 = Instant::now();
                    }
                    let m = Message::new(topic.clone(), body.clone());
                    let r = send(&p, tx.as_ref(), mode, m).await.map(|_| ());
                    let end = Instant::now();
                    let us = (end - t0).as_micros() as u64;
                    t0 = end;
                    match r {
                        Ok(()) => {
                            ok.fetch_add(1, Ordering::Relaxed);
                            let _ = hist.record(us.max(1));
                        }
                        Err(e) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            let mut g = first_error.lock().unwrap_or_else(|p| p.into_inner());
                            if g.is_none() {
                                *g = Some(e.to_string());
                            }
                        }
                    }
                }
                hist
            }));
        }
        // Progress updates while the workers run.
        let ticker = {
            let (pb, ok, failed) = (pb.clone(), ok.clone(), failed.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let done = ok.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed);
                    match limit {
                        Limit::Count(_) => pb.set_position(done),
                        Limit::Time(_) => pb.set_position(started.elapsed().as_millis() as u64),
                    }
                    let secs = started.elapsed().as_secs_f64().max(1e-9);
                    pb.set_message(format!(
                        "{:.0} msgs/s, {} failed",
                        ok.load(Ordering::Relaxed) as f64 / secs,
                        failed.load(Ordering::Relaxed)
                    ));
                }
            })
        };
        let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, SEND_SIGFIG)
            .expect("histogram bounds");
        for w in workers {
            if let Ok(h) = w.await {
                let _ = hist.add(h);
            }
        }
        stop.store(true, Ordering::Relaxed);
        ticker.abort();
        pb.finish_and_clear();
        let first_error = first_error.lock().ok().and_then(|g| g.clone());
        Report {
            label,
            ok: ok.load(Ordering::Relaxed),
            failed: failed.load(Ordering::Relaxed),
            elapsed: started.elapsed(),
            hist,
            first_error,
            counters: p.counters(),
        }
    }

    fn answers(addr: &str) -> bool {
        addr.parse::<SocketAddr>()
            .ok()
            .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok())
    }

    #[cfg(feature = "demo")]
    type Local = Option<rmq_tests::broker::Cluster>;
    #[cfg(not(feature = "demo"))]
    type Local = Option<()>;

    #[cfg(feature = "demo")]
    fn start_local() -> Result<(String, Local), Box<dyn std::error::Error>> {
        use rmq_tests::broker::{Cluster, ClusterOptions, Version};
        println!(
            "No NameServer on 127.0.0.1:9876: starting a local Apache RocketMQ 5.3.3 (NameServer + broker, \
             jars from Maven Central on first use; 10-60 s)..."
        );
        let spinner = ProgressBar::new_spinner();
        spinner.enable_steady_tick(Duration::from_millis(120));
        spinner.set_message("starting RocketMQ");
        let t0 = Instant::now();
        let cluster = Cluster::start(Version::V5_3_3, ClusterOptions::default())?;
        spinner.finish_and_clear();
        let ns = cluster.namesrv_addr().to_string();
        println!(
            "RocketMQ is up in {:.1} s: NameServer {ns}, broker {} (logs in {})",
            t0.elapsed().as_secs_f64(),
            cluster.broker_addr(0),
            cluster.run_dir().display()
        );
        Ok((ns, Some(cluster)))
    }

    #[cfg(not(feature = "demo"))]
    fn start_local() -> Result<(String, Local), Box<dyn std::error::Error>> {
        Err(
            "no NameServer answers on 127.0.0.1:9876; pass --namesrv, or rebuild with \
             `cargo run -p rmq-cli --features demo -- demo` to start a local RocketMQ"
                .into(),
        )
    }

    async fn demo(cli: &Cli, topic: &str, count: u64, devices: u32) -> Res {
        let (ns, local): (String, Local) = match &cli.namesrv {
            Some(ns) => (ns.clone(), None),
            None if answers("127.0.0.1:9876") => {
                println!("Using the RocketMQ NameServer on 127.0.0.1:9876");
                ("127.0.0.1:9876".to_owned(), None)
            }
            None => tokio::task::block_in_place(start_local)?,
        };
        let p = producer(cli, &ns, topic).await?;
        let route = p.route(topic).await?;
        println!(
            "Topic {topic}: {} write queues on {} broker(s){}",
            route.queues.len(),
            route.brokers.len(),
            if route.from_default_topic {
                " (auto-created on first send)"
            } else {
                ""
            }
        );
        println!(
            "Publishing {count} telemetry readings from {devices} devices (ordered per device)..."
        );
        let pb = progress(Limit::Count(count), "telemetry");
        let (cpu0, _) = usage();
        let started = Instant::now();
        // Cold start (route lookup, topic auto-created from TBW102, a broker JVM that may have
        // just started) and steady state are reported apart: the first 20 % of the messages
        // are the warm-up phase.
        let warm = (count / 5).max(1);
        let phases = Arc::new(Phases::new(started));
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let hist = Arc::new(std::sync::Mutex::new(
            Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds"),
        ));
        // One task per device, each sending its readings one after the other (SYNC, by
        // sharding key): a device's readings are stored in order in one queue.
        let devices = u64::from(devices.max(1));
        let mut tasks = Vec::new();
        for d in 0..devices.min(count) {
            let (p, ok, failed, hist, pb, phases) = (
                p.clone(),
                ok.clone(),
                failed.clone(),
                hist.clone(),
                pb.clone(),
                phases.clone(),
            );
            let topic = topic.to_owned();
            tasks.push(tokio::spawn(async move {
                let device = format!("device-{d:03}");
                for (seq, _) in (d..count).step_by(devices as usize).enumerate() {
                    let reading = format!(
                        r#"{{"device":"{device}","seq":{seq},"ts":{},"temperature_c":{:.2},"humidity_pct":{:.1}}}"#,
                        std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |t| t.as_millis() as i64),
                        20.0 + ((seq as u64 * 7 + d) % 100) as f64 / 10.0,
                        40.0 + ((seq as u64 * 13 + d) % 300) as f64 / 10.0,
                    );
                    let m = Message::new(topic.clone(), reading)
                        .with_tags("telemetry")
                        .with_keys([device.clone()]);
                    let t0 = Instant::now();
                    match p.send_sharded(m, &device).await {
                        Ok(_) => {
                            let n = ok.fetch_add(1, Ordering::Relaxed) + 1;
                            let us = (t0.elapsed().as_micros() as u64).max(1);
                            if let Ok(mut h) = hist.lock() {
                                let _ = h.record(us);
                            }
                            phases.stored(n, warm, us);
                        }
                        Err(e) => {
                            if failed.fetch_add(1, Ordering::Relaxed) == 0 {
                                pb.println(format!("first failure: {e}"));
                            }
                        }
                    }
                    pb.inc(1);
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        pb.finish_and_clear();
        let hist = hist
            .lock()
            .map(|h| h.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        let report = Report {
            label: "telemetry",
            ok: ok.load(Ordering::Relaxed),
            failed: failed.load(Ordering::Relaxed),
            elapsed: started.elapsed(),
            hist,
            first_error: None,
            counters: p.counters(),
        };
        let m = p.metrics();
        let (cpu1, _) = usage();
        p.shutdown().await;
        report.print();
        phases.print(
            warm,
            report.ok,
            cpu1.saturating_sub(cpu0),
            route.from_default_topic,
        );
        print_producer_metrics(&m);
        let after = {
            let p = producer(cli, &ns, topic).await?;
            let r = p.route(topic).await;
            p.shutdown_timeout(Duration::ZERO).await;
            r
        };
        if let Ok(r) = after {
            println!(
                "Topic {topic} now has {} queue(s) on {:?}",
                r.queues.len(),
                r.brokers.iter().map(|b| b.0.as_str()).collect::<Vec<_>>()
            );
        }
        if local.is_some() {
            println!("Stopping the local RocketMQ.");
        }
        // Dropping the cluster (feature `demo`) kills its JVMs.
        let _ = local;
        if report.failed > 0 {
            return Err(format!("{} message(s) failed", report.failed).into());
        }
        Ok(())
    }
}
