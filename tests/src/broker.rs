//! A real Apache RocketMQ cluster (one NameServer, N master brokers) on 127.0.0.1, started from
//! released jars that Maven downloads from Maven Central, plus the Java-side reference tools.
//!
//! ```no_run
//! use rmq_tests::broker::{Cluster, ClusterOptions, Version};
//! let cluster = Cluster::start(Version::V5_3_3, ClusterOptions::default()).expect("cluster");
//! cluster.create_topic("TopicA", 4).expect("topic");
//! println!("namesrv at {}", cluster.namesrv_addr());
//! // every JVM is killed when `cluster` is dropped (also on panic)
//! ```
//!
//! Layout of one run, under `<target>/rmq-runs/<version>-<pid>-<n>/`: `namesrv/` and
//! `broker-<i>/`, each with `home/` (`user.home` and `ROCKETMQ_HOME`: logs go to
//! `home/logs/`), the properties file, `store/` (brokers), and `out-<k>.log` (stdout+stderr of
//! the k-th start). `tools/` holds the outputs of mqadmin, Verifier and JavaProducer runs.
//! `proxy/` holds `rocketmq-proxy` (5.x) once [`Cluster::start_proxy`] started it.
//! In controller mode ([`ClusterOptions::controller_mode`], 5.x) the NameServer embeds the
//! controller (its store under `namesrv/store/`) and the brokers are the replicas of one group.
//! When the cluster is dropped the brokers' `store/` directories are removed (not after a
//! panic); the logs stay.
//!
//! **The 4.9 line is 4.9.7:** `rocketmq-namesrv`, `rocketmq-broker` and `rocketmq-filter` 4.9.8
//! are not on Maven Central (404), so [`Version::V4_9`] runs 4.9.7 for every jar (server,
//! client, tools). The server code of 4.9.7 and 4.9.8 differs only in admin-config blacklists
//! (UPDATE_BROKER_CONFIG / UPDATE_NAMESRV_CONFIG) and the removal of request code 54
//! (`GET_BROKER_CLUSTER_ACL_CONFIG`); send, pull, heartbeat and route handling are identical.

mod controller;
mod jars;
mod java;
mod ports;
mod process;
mod rocketmq_proxy;

use std::fmt;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use controller::{KilledMaster, MasterSwitch, REPLICA_GROUP, Replica, SyncState};
pub use java::{JavaProducer, SendLine, VerifiedMessage, verifier_read};
pub use process::pid_alive;
use process::{Jvm, tail};
pub use rocketmq_proxy::ProxyOptions;

/// A RocketMQ release line under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// 5.3.3 (server, client and tools jars 5.3.3).
    V5_3_3,
    /// The 4.9 line, run as 4.9.7 (4.9.8 server jars are not on Maven Central; see the module
    /// docs).
    V4_9,
}

impl Version {
    /// The 4.9 line under the name the issues use; it runs 4.9.7 server jars (see above).
    pub const V4_9_8: Version = Version::V4_9;

    /// The Maven version of every jar: "5.3.3" or "4.9.7".
    pub fn name(self) -> &'static str {
        match self {
            Version::V5_3_3 => "5.3.3",
            Version::V4_9 => "4.9.7",
        }
    }

    /// The remoting `version` a client speaking to this line announces (rmq-core's
    /// `wire::version`): 5.3.3, or 4.9.8 for the 4.9 line.
    pub fn client_version(self) -> i32 {
        match self {
            Version::V5_3_3 => rmq_core::wire::version::V5_3_3,
            Version::V4_9 => rmq_core::wire::version::V4_9_8,
        }
    }

    fn is_v4(self) -> bool {
        matches!(self, Version::V4_9)
    }
}

/// Why the harness could not do something; the message includes log tails where useful.
#[derive(Debug, Clone)]
pub struct HarnessError {
    msg: String,
}

impl HarnessError {
    pub(crate) fn new(msg: String) -> HarnessError {
        HarnessError { msg }
    }

    fn with_logs(self, logs: String) -> HarnessError {
        HarnessError {
            msg: format!("{}\n---- log tails ----\n{logs}", self.msg),
        }
    }
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for HarnessError {}

/// Extra readiness check run after every broker reported "boot success" (for example a
/// GET_ROUTEINFO_BY_TOPIC query by the Rust client). Polled every 200 ms until it returns true.
pub type ReadyProbe = Arc<dyn Fn(&Cluster) -> bool + Send + Sync>;

/// How to start a [`Cluster`].
#[derive(Clone)]
pub struct ClusterOptions {
    /// Number of master brokers (`broker-a`, `broker-b`, …), 1..=4.
    pub brokers: usize,
    /// `autoCreateTopicEnable` (also makes the broker create TBW102).
    pub auto_create_topic: bool,
    /// Extra `key=value` lines appended to every broker's config (later lines win).
    pub broker_config: Vec<String>,
    /// Extra `key=value` lines appended to the NameServer's config.
    pub namesrv_config: Vec<String>,
    /// NameServer heap (-Xms/-Xmx) in MiB.
    pub namesrv_heap_mb: u32,
    /// Broker heap (-Xms/-Xmx, and MaxDirectMemorySize) in MiB.
    pub broker_heap_mb: u32,
    /// Time allowed for one process to become ready.
    pub start_timeout: Duration,
    /// Optional extra readiness check, see [`ReadyProbe`].
    pub ready_probe: Option<ReadyProbe>,
    /// Files written into every broker's `ROCKETMQ_HOME` before it starts, as
    /// `(path relative to the home folder, contents)`; e.g. 4.9's `conf/plain_acl.yml`.
    pub broker_home_files: Vec<(String, String)>,
    /// Extra JVM arguments for every broker, before the main class (e.g. `-Dtls.server.mode=
    /// enforcing`: TLS is configured through system properties).
    pub broker_jvm_args: Vec<String>,
    /// Give every master a slave (same `brokerName`, `brokerId=1`, `brokerRole=SLAVE`,
    /// replicating through the master's HA port): brokers `0..brokers` are the masters,
    /// `brokers..2 * brokers` their slaves in the same order.
    pub slaves: bool,
    /// RocketMQ 5.x controller mode (automatic master switch, see `broker/controller.rs`):
    /// the NameServer embeds the controller, and the `brokers` brokers (2..=4) are the
    /// replicas of ONE group `broker-a` (`enableControllerMode=true`,
    /// `allAckInSyncStateSet=true`); the controller elects the master. The start waits until
    /// a master is elected and listed by the NameServer and every replica is in the
    /// SyncStateSet. Not with `slaves`, nor on the 4.9 line.
    pub controller_mode: bool,
    /// Brokers that register with the NameServer under another loopback address
    /// (`brokerIP1`; they still listen on `127.0.0.1` and the same port), e.g. `(0,
    /// 127.0.0.2)`: whatever listens at `127.0.0.2:<port>` stands between every client and
    /// broker 0 (the fault bench's relay, [`crate::faults`]). [`Cluster::broker_addr`] is
    /// the registered address, [`Cluster::bound_addr`] the broker's own.
    pub register_as: Vec<(usize, std::net::Ipv4Addr)>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            brokers: 1,
            auto_create_topic: true,
            broker_config: Vec::new(),
            namesrv_config: Vec::new(),
            namesrv_heap_mb: 256,
            broker_heap_mb: 512,
            start_timeout: Duration::from_secs(120),
            ready_probe: None,
            broker_home_files: Vec::new(),
            broker_jvm_args: Vec::new(),
            slaves: false,
            controller_mode: false,
            register_as: Vec::new(),
        }
    }
}

impl ClusterOptions {
    /// Quick transaction check-backs: a half message is checked 3 s after it was written,
    /// every second. 5.x writes the settled messages' op records in batches (3 s by default):
    /// at 200 ms a check does not come before them (docs/protocol/STRATEGY.md §12).
    pub fn quick_transactions(mut self) -> Self {
        self.broker_config.extend([
            "transactionTimeOut=3000".into(),
            "transactionCheckInterval=1000".into(),
            "transactionOpBatchInterval=200".into(),
        ]);
        self
    }

    /// Turns authentication on for `version` with one account `access_key`/`secret_key` that
    /// may do everything: the 4.9 line's plain ACL (`aclEnable=true` and a
    /// `conf/plain_acl.yml` in the broker home), or 5.3.3's authentication
    /// (`authenticationEnabled=true`, the account as initial user and as the broker's own
    /// inner-client credentials).
    pub fn with_acl(mut self, version: Version, access_key: &str, secret_key: &str) -> Self {
        match version {
            Version::V4_9 => {
                self.broker_config.push("aclEnable=true".into());
                self.broker_home_files.push((
                    "conf/plain_acl.yml".into(),
                    format!(
                        "globalWhiteRemoteAddresses:\n\
                         accounts:\n\
                         - accessKey: {access_key}\n\
                         \x20 secretKey: {secret_key}\n\
                         \x20 whiteRemoteAddress:\n\
                         \x20 admin: true\n\
                         \x20 defaultTopicPerm: PUB|SUB\n\
                         \x20 defaultGroupPerm: PUB|SUB\n"
                    ),
                ));
            }
            _ => self.broker_config.extend([
                "authenticationEnabled=true".to_string(),
                "authenticationProvider=org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider".to_string(),
                "authenticationMetadataProvider=org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider".to_string(),
                format!("initAuthenticationUser={{\"username\":\"{access_key}\",\"password\":\"{secret_key}\"}}"),
                format!("innerClientAuthenticationCredentials={{\"accessKey\":\"{access_key}\",\"secretKey\":\"{secret_key}\"}}"),
            ]),
        }
        self
    }
}

impl fmt::Debug for ClusterOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterOptions")
            .field("brokers", &self.brokers)
            .field("auto_create_topic", &self.auto_create_topic)
            .field("broker_config", &self.broker_config)
            .field("namesrv_config", &self.namesrv_config)
            .field("namesrv_heap_mb", &self.namesrv_heap_mb)
            .field("broker_heap_mb", &self.broker_heap_mb)
            .field("start_timeout", &self.start_timeout)
            .field("ready_probe", &self.ready_probe.is_some())
            .field("slaves", &self.slaves)
            .field("controller_mode", &self.controller_mode)
            .field("register_as", &self.register_as)
            .finish()
    }
}

/// Cluster name every broker registers under.
pub const CLUSTER_NAME: &str = "DefaultCluster";

/// One NameServer, broker or proxy process slot.
#[derive(Debug)]
struct Node {
    /// "namesrv", "broker-<i>" or "proxy".
    name: String,
    dir: PathBuf,
    port: u16,
    jvm: Option<Jvm>,
    starts: u32,
}

impl Node {
    fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    fn out_file(&self) -> PathBuf {
        self.dir.join(format!("out-{}.log", self.starts))
    }
}

/// A running NameServer plus brokers; every JVM is killed (SIGKILL) on drop.
pub struct Cluster {
    version: Version,
    options: ClusterOptions,
    run_dir: PathBuf,
    server_lib: PathBuf,
    java: PathBuf,
    namesrv: Node,
    brokers: Vec<Node>,
    /// `rocketmq-proxy`, once [`Cluster::start_proxy`] ran.
    proxy: Option<Node>,
    tool_runs: AtomicU64,
    // Declared last: released after the JVMs are dead.
    ports: ports::PortBlock,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("version", &self.version)
            .field("run_dir", &self.run_dir)
            .field("namesrv", &self.namesrv_addr())
            .field("brokers", &self.brokers.len())
            .finish()
    }
}

const LOGBACK_V4: &str = r#"<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${user.home}/logs/rmq-${rmq.proc:-proc}.log</file>
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level [%thread] %logger{20} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"#;

fn write(path: &Path, text: &str) -> Result<(), HarnessError> {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p)
            .map_err(|e| HarnessError::new(format!("create {}: {e}", p.display())))?;
    }
    fs::write(path, text).map_err(|e| HarnessError::new(format!("write {}: {e}", path.display())))
}

/// Sets up `home/` (and 4.9's `home/conf/logback_*.xml`) of one process folder.
fn prepare_home(version: Version, dir: &Path) -> Result<(), HarnessError> {
    let home = dir.join("home");
    fs::create_dir_all(home.join("logs"))
        .map_err(|e| HarnessError::new(format!("create {}: {e}", home.display())))?;
    if version.is_v4() {
        for n in ["namesrv", "broker", "tools"] {
            write(
                &home.join("conf").join(format!("logback_{n}.xml")),
                LOGBACK_V4,
            )?;
        }
    }
    Ok(())
}

/// JVM flags common to every process of `version`, with `home` as user.home and ROCKETMQ_HOME.
fn common_jvm_flags(home: &Path, proc_name: &str) -> Vec<String> {
    vec![
        "-XX:+UseSerialGC".into(),
        "-XX:-OmitStackTraceInFastThrow".into(),
        "-Djava.net.preferIPv4Stack=true".into(),
        format!("-Duser.home={}", home.display()),
        format!("-Drocketmq.home.dir={}", home.display()),
        // 4.9 needs these on JDK 17 (MappedFile unmapping, DirectBuffer); harmless on 5.x.
        "--add-opens=java.base/java.nio=ALL-UNNAMED".into(),
        "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED".into(),
        "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED".into(),
        // 4.9: names the log file of our logback_*.xml; 5.x: picks the module's logback file.
        format!("-Drmq.proc={proc_name}"),
        format!("-Drmq.logback.configurationFile=rmq.{proc_name}.logback.xml"),
    ]
}

fn count_occurrences(path: &Path, needle: &str) -> usize {
    fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).matches(needle).count())
        .unwrap_or(0)
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

static RUN_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Above this share of a partition in use, a broker storing there refuses every write
/// (`SERVICE_NOT_AVAILABLE`, "the broker's disk is full"): `diskSpaceWarningLevelRatio`, which
/// 5.x caps at 0.90 whatever the configuration says. The margin leaves room for what the tests
/// themselves write.
const DISK_FULL_RATIO: f64 = 0.88;

/// Fails with a clear message when the partition holding `dir` is so full that the brokers
/// would refuse writes (their check: (size - free) / size, free including reserved blocks).
fn check_disk(dir: &Path) -> Result<(), HarnessError> {
    let _ = fs::create_dir_all(dir);
    let out = match Command::new("df").arg("-P").arg("-B1").arg(dir).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        // No df: nothing to say; the brokers' own log tells if the disk is full.
        _ => return Ok(()),
    };
    let cols: Vec<u64> = out
        .lines()
        .nth(1)
        .map(|l| {
            l.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    if let [size, used, ..] = cols[..] {
        let ratio = used as f64 / size.max(1) as f64;
        if ratio > DISK_FULL_RATIO {
            return Err(HarnessError::new(format!(
                "the partition holding {} is {:.1} % full ({} MiB free of {} MiB): a RocketMQ \
                 broker refuses every write above 90 % (diskSpaceWarningLevelRatio, capped at \
                 0.90 in 5.x), so its tests cannot run; free some space (target/ directories, \
                 target/rmq-runs) and run again",
                dir.display(),
                ratio * 100.0,
                (size - used) >> 20,
                size >> 20
            )));
        }
    }
    Ok(())
}

impl Cluster {
    /// Downloads the jars if needed (Maven), then starts a NameServer and
    /// `options.brokers` brokers and waits until all are ready.
    pub fn start(version: Version, options: ClusterOptions) -> Result<Cluster, HarnessError> {
        let nodes = options.brokers * (1 + usize::from(options.slaves));
        if options.brokers == 0 || nodes > ports::MAX_BROKERS {
            return Err(HarnessError::new(format!(
                "brokers must be 1..={} (masters and slaves), got {nodes}",
                ports::MAX_BROKERS,
            )));
        }
        if options.controller_mode && (options.slaves || options.brokers < 2 || version.is_v4()) {
            return Err(HarnessError::new(format!(
                "controller mode needs 2..={} replicas, no `slaves`, and the 5.x line",
                ports::MAX_BROKERS,
            )));
        }
        let java = jars::jdk_tool("java");
        jars::require_tool(&java, "-version")?;
        let server_lib = jars::lib_dir(version, jars::Part::Server)?;
        let ports = ports::PortBlock::claim(nodes)?;
        if options.controller_mode && !ports::port_free(ports.controller()) {
            return Err(HarnessError::new(format!(
                "the controller's port {} is taken by another process",
                ports.controller()
            )));
        }
        let run_dir = jars::target_dir().join("rmq-runs").join(format!(
            "{}-{}-{}",
            version.name(),
            std::process::id(),
            RUN_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&run_dir);
        check_disk(&jars::target_dir())?;
        let namesrv = Node {
            name: "namesrv".into(),
            dir: run_dir.join("namesrv"),
            port: ports.namesrv(),
            jvm: None,
            starts: 0,
        };
        let brokers = (0..nodes)
            .map(|i| Node {
                name: format!("broker-{i}"),
                dir: run_dir.join(format!("broker-{i}")),
                port: ports.broker(i),
                jvm: None,
                starts: 0,
            })
            .collect();
        let mut cluster = Cluster {
            version,
            options,
            run_dir,
            server_lib,
            java,
            namesrv,
            brokers,
            proxy: None,
            tool_runs: AtomicU64::new(0),
            ports,
        };
        // From here on, a failure drops `cluster`, which kills what was started.
        cluster
            .start_namesrv()
            .map_err(|e| e.with_logs(cluster.log_tail(40)))?;
        if cluster.options.controller_mode {
            cluster
                .wait_controller_leader()
                .map_err(|e| e.with_logs(cluster.log_tail(40)))?;
        }
        for i in 0..cluster.brokers.len() {
            cluster
                .start_broker(i)
                .map_err(|e| e.with_logs(cluster.log_tail(40)))?;
        }
        if cluster.options.controller_mode {
            cluster
                .wait_replicas_in_sync()
                .map_err(|e| e.with_logs(cluster.log_tail(40)))?;
        }
        cluster
            .run_probe()
            .map_err(|e| e.with_logs(cluster.log_tail(40)))?;
        Ok(cluster)
    }

    fn run_probe(&self) -> Result<(), HarnessError> {
        let Some(probe) = self.options.ready_probe.clone() else {
            return Ok(());
        };
        let deadline = Instant::now() + self.options.start_timeout;
        while !probe(self) {
            if Instant::now() >= deadline {
                return Err(HarnessError::new(
                    "the ready probe never returned true".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    fn start_namesrv(&mut self) -> Result<(), HarnessError> {
        let node = &self.namesrv;
        prepare_home(self.version, &node.dir)?;
        let conf = node.dir.join("namesrv.properties");
        let mut text = format!(
            "listenPort={}\nbindAddress=127.0.0.1\nkvConfigPath={}\n",
            node.port,
            node.home().join("namesrv").join("kvConfig.json").display()
        );
        if self.options.controller_mode {
            text.push_str(&self.controller_namesrv_lines());
        }
        let node = &mut self.namesrv;
        for l in &self.options.namesrv_config {
            text.push_str(l);
            text.push('\n');
        }
        write(&conf, &text)?;
        let mut args = vec![
            format!("-Xms{}m", self.options.namesrv_heap_mb),
            format!("-Xmx{}m", self.options.namesrv_heap_mb),
            "-XX:MaxDirectMemorySize=128m".into(),
        ];
        args.extend(common_jvm_flags(&node.home(), "namesrv"));
        args.extend([
            "-cp".into(),
            jars::classpath_of(&self.server_lib),
            "org.apache.rocketmq.namesrv.NamesrvStartup".into(),
            "-c".into(),
            conf.display().to_string(),
        ]);
        node.starts += 1;
        let env = [("ROCKETMQ_HOME", node.home().display().to_string())];
        let mut jvm = Jvm::spawn(&self.java, &args, &env, &node.dir, node.out_file())?;
        let ready = jvm.wait_ready(
            "The Name Server boot success",
            loopback(node.port),
            self.options.start_timeout,
        );
        node.jvm = Some(jvm);
        ready
    }

    fn broker_conf(&self, i: usize) -> String {
        let node = &self.brokers[i];
        let name = self.broker_name(i);
        let roles = match (self.options.controller_mode, i < self.options.brokers) {
            // The controller assigns ids and roles.
            (true, _) => self.controller_broker_lines(),
            (false, true) => {
                "brokerId=0\nbrokerRole=ASYNC_MASTER\nenableControllerMode=false\n".into()
            }
            (false, false) => "brokerId=1\nbrokerRole=SLAVE\nenableControllerMode=false\n".into(),
        };
        let store = node.dir.join("store");
        let mut text = format!(
            "brokerClusterName={CLUSTER_NAME}\n\
             brokerName={name}\n\
             {roles}\
             flushDiskType=ASYNC_FLUSH\n\
             namesrvAddr={ns}\n\
             brokerIP1={ip}\n\
             listenPort={port}\n\
             bindAddress=127.0.0.1\n\
             storePathRootDir={store}\n\
             storePathCommitLog={store}/commitlog\n\
             mappedFileSizeCommitLog=67108864\n\
             mappedFileSizeConsumeQueue=600000\n\
             maxHashSlotNum=50000\n\
             maxIndexNum=200000\n\
             fileReservedTime=1\n\
             autoCreateTopicEnable={auto}\n\
             autoCreateSubscriptionGroup=true\n\
             waitTimeMillsInSendQueue=1000\n\
             osPageCacheBusyTimeOutMills=3000\n\
             timerWheelEnable=false\n",
            ns = self.namesrv_addr(),
            ip = self.broker_addr(i).ip(),
            port = node.port,
            store = store.display(),
            auto = self.options.auto_create_topic,
        );
        for l in &self.options.broker_config {
            text.push_str(l);
            text.push('\n');
        }
        text
    }

    fn start_broker(&mut self, i: usize) -> Result<(), HarnessError> {
        let text = self.broker_conf(i);
        let node = &mut self.brokers[i];
        prepare_home(self.version, &node.dir)?;
        for (rel, contents) in &self.options.broker_home_files {
            let path = node.home().join(rel);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)
                    .map_err(|e| HarnessError::new(format!("create {}: {e}", parent.display())))?;
            }
            write(&path, contents)?;
        }
        let conf = node.dir.join("broker.conf");
        write(&conf, &text)?;
        let heap = self.options.broker_heap_mb;
        let mut args = vec![
            format!("-Xms{heap}m"),
            format!("-Xmx{heap}m"),
            format!("-XX:MaxDirectMemorySize={heap}m"),
        ];
        args.extend(common_jvm_flags(&node.home(), "broker"));
        args.extend(self.options.broker_jvm_args.iter().cloned());
        args.extend([
            "-cp".into(),
            jars::classpath_of(&self.server_lib),
            "org.apache.rocketmq.broker.BrokerStartup".into(),
            "-c".into(),
            conf.display().to_string(),
        ]);
        node.starts += 1;
        let env = [("ROCKETMQ_HOME", node.home().display().to_string())];
        // "boot success" does not mean the broker is in the NameServer's routes: 5.3.3 registers
        // at start only with NameServers its client already saw as available, and otherwise
        // waits for the periodic registration (first run 10 s after start). So also wait for
        // the broker's own "registered" log line of this start.
        let log = self.main_log(&self.brokers[i]);
        let needle = self.registration_line();
        let before = count_occurrences(&log, &needle);
        let node = &mut self.brokers[i];
        let mut jvm = Jvm::spawn(&self.java, &args, &env, &node.dir, node.out_file())?;
        let deadline = Instant::now() + self.options.start_timeout;
        let ready = jvm.wait_ready(
            "boot success",
            loopback(node.port),
            self.options.start_timeout,
        );
        node.jvm = Some(jvm);
        ready?;
        while count_occurrences(&log, &needle) <= before {
            if Instant::now() >= deadline {
                return Err(HarnessError::new(format!(
                    "broker {i} never logged {needle:?} in {}",
                    log.display()
                )));
            }
            if let Some(jvm) = self.brokers[i].jvm.as_mut()
                && let Some(s) = jvm.exited()
            {
                return Err(HarnessError::new(format!("broker {i} exited with {s}")));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// The broker log line that confirms a registration with our NameServer.
    fn registration_line(&self) -> String {
        if self.version.is_v4() {
            format!("to name server {} OK", self.namesrv_addr())
        } else {
            format!(
                "Registering current broker to name server completed. TargetHost={}",
                self.namesrv_addr()
            )
        }
    }

    /// The release line of this cluster.
    pub fn version(&self) -> Version {
        self.version
    }

    /// `127.0.0.1:<port>` of the NameServer.
    pub fn namesrv_addr(&self) -> SocketAddr {
        loopback(self.namesrv.port)
    }

    /// Number of brokers (masters and slaves).
    pub fn broker_count(&self) -> usize {
        self.brokers.len()
    }

    /// `127.0.0.1:<listenPort>` of broker `i` as registered with the NameServer (another
    /// loopback address for a broker in [`ClusterOptions::register_as`]).
    pub fn broker_addr(&self, i: usize) -> SocketAddr {
        let ip = self.options.register_as.iter().find(|(b, _)| *b == i);
        ip.map_or_else(
            || self.bound_addr(i),
            |(_, ip)| SocketAddr::from((*ip, self.brokers[i].port)),
        )
    }

    /// `127.0.0.1:<listenPort>`, where broker `i` listens.
    pub fn bound_addr(&self, i: usize) -> SocketAddr {
        loopback(self.brokers[i].port)
    }

    /// The `brokerName` of broker `i`: `broker-a`, `broker-b`, … (a slave has its master's).
    /// In controller mode every broker is a replica of `broker-a`.
    pub fn broker_name(&self, i: usize) -> String {
        let i = match self.options.controller_mode {
            true => 0,
            false => i % self.options.brokers.max(1),
        };
        format!("broker-{}", char::from(b'a' + u8::try_from(i).unwrap_or(0)))
    }

    /// Folder of this run (configs, stores, logs).
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Pids of the NameServer, broker and proxy JVMs currently started (killed ones excluded).
    pub fn pids(&self) -> Vec<u32> {
        std::iter::once(&self.namesrv)
            .chain(&self.brokers)
            .chain(&self.proxy)
            .filter_map(|n| n.jvm.as_ref().map(Jvm::pid))
            .collect()
    }

    /// Pid of broker `i`'s JVM, if started.
    pub fn broker_pid(&self, i: usize) -> Option<u32> {
        self.brokers[i].jvm.as_ref().map(Jvm::pid)
    }

    /// SIGKILLs broker `i` (no shutdown hook runs; its store keeps the `abort` file).
    pub fn kill9_broker(&mut self, i: usize) {
        if let Some(mut jvm) = self.brokers[i].jvm.take() {
            jvm.kill9();
        }
    }

    /// Restarts broker `i` on the same ports and store (kills it first if it still runs) and
    /// waits until it is ready again.
    pub fn restart_broker(&mut self, i: usize) -> Result<(), HarnessError> {
        self.kill9_broker(i);
        self.start_broker(i)
            .map_err(|e| e.with_logs(self.log_tail(40)))?;
        self.run_probe().map_err(|e| e.with_logs(self.log_tail(40)))
    }

    /// Calls `check` every 200 ms until it returns true; false on timeout. The hook for route
    /// polling by the Rust client.
    pub fn poll_until(&self, timeout: Duration, mut check: impl FnMut(&Cluster) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if check(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn main_log(&self, node: &Node) -> PathBuf {
        if node.name == "proxy" {
            return rocketmq_proxy::proxy_log(node);
        }
        let logs = node.home().join("logs");
        let kind = if node.name == "namesrv" {
            "namesrv"
        } else {
            "broker"
        };
        if self.version.is_v4() {
            logs.join(format!("rmq-{kind}.log"))
        } else {
            logs.join("rocketmqlogs").join(format!("{kind}.log"))
        }
    }

    /// The last `n` lines of every process's stdout and main log.
    pub fn log_tail(&self, n: usize) -> String {
        let mut s = String::new();
        for node in std::iter::once(&self.namesrv)
            .chain(&self.brokers)
            .chain(&self.proxy)
        {
            for file in [node.out_file(), self.main_log(node)] {
                let t = tail(&file, n);
                let t: Vec<&str> = t.lines().filter(|l| !l.contains("|-INFO in ")).collect();
                s.push_str(&format!("==> {} <==\n{}\n", file.display(), t.join("\n")));
            }
        }
        s
    }

    /// Runs a Java main class from the client jars (+ the compiled `tests/java` classes) and
    /// returns its stdout+stderr; fails on timeout or non-zero exit.
    pub fn run_java_tool(
        &self,
        main_class: &str,
        args: &[String],
        timeout: Duration,
    ) -> Result<String, HarnessError> {
        let client = jars::lib_dir(self.version, jars::Part::Client)?;
        let mut cp = jars::classpath_of(&client);
        if main_class.contains('.') {
            // A class of the jars (mqadmin): no need to compile ours.
        } else {
            let classes = jars::java_classes(self.version)?;
            cp = format!("{}:{cp}", classes.display());
        }
        let n = self.tool_runs.fetch_add(1, Ordering::Relaxed);
        let dir = self.run_dir.join("tools");
        prepare_home(self.version, &dir)?;
        let short = main_class.rsplit('.').next().unwrap_or(main_class);
        let out = dir.join(format!("{n:03}-{short}.log"));
        let proc_name = if main_class.contains("MQAdminStartup") {
            "tools"
        } else {
            "client"
        };
        let mut jvm_args = vec!["-Xms64m".to_string(), "-Xmx256m".to_string()];
        jvm_args.extend(common_jvm_flags(&dir.join("home"), proc_name));
        jvm_args.extend(["-cp".to_string(), cp, main_class.to_string()]);
        jvm_args.extend(args.iter().cloned());
        let env = [("ROCKETMQ_HOME", dir.join("home").display().to_string())];
        let mut jvm = Jvm::spawn(&self.java, &jvm_args, &env, &dir, out)?;
        let status = jvm.wait_timeout(timeout);
        let output = jvm.output();
        match status {
            Some(s) if s.success() => Ok(output),
            Some(s) => Err(HarnessError::new(format!(
                "{main_class} {args:?} exited with {s}; output ({}):\n{}",
                jvm.out.display(),
                tail(&jvm.out, 60)
            ))),
            None => Err(HarnessError::new(format!(
                "{main_class} {args:?} timed out after {timeout:?}; output ({}):\n{}",
                jvm.out.display(),
                tail(&jvm.out, 60)
            ))),
        }
    }

    /// Runs `mqadmin <args>` (the namesrv address is NOT added). mqadmin exits 0 even when the
    /// command failed: check the returned output.
    pub fn mqadmin(&self, args: &[&str]) -> Result<String, HarnessError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        self.run_java_tool(
            "org.apache.rocketmq.tools.command.MQAdminStartup",
            &args,
            Duration::from_secs(60),
        )
    }

    /// [`Cluster::create_topic`], retried every 2 s for up to 60 s while the brokers are still
    /// registering with the NameServer.
    pub fn create_topic_retrying(&self, topic: &str, queues: u32) {
        let t0 = Instant::now();
        loop {
            match self.create_topic(topic, queues) {
                Ok(()) => return,
                Err(e) if t0.elapsed() < Duration::from_secs(60) => {
                    eprintln!("create_topic {topic}: {e}; retrying");
                    std::thread::sleep(Duration::from_secs(2));
                }
                Err(e) => panic!("create_topic {topic}: {e}"),
            }
        }
    }

    /// Creates (or updates) `topic` with `queues` read and write queues on every broker, via
    /// `mqadmin updateTopic -c DefaultCluster`, and checks that every broker reported success.
    /// In controller mode mqadmin creates it on the master only; this then waits until every
    /// running replica copied it (so that a new master still serves the topic).
    pub fn create_topic(&self, topic: &str, queues: u32) -> Result<(), HarnessError> {
        let ns = self.namesrv_addr().to_string();
        let q = queues.to_string();
        let out = self.mqadmin(&[
            "updateTopic",
            "-n",
            &ns,
            "-c",
            CLUSTER_NAME,
            "-t",
            topic,
            "-r",
            &q,
            "-w",
            &q,
        ])?;
        // mqadmin creates it on the masters; in controller mode on the group's one master, and
        // the other replicas copy it from there.
        let masters: Vec<SocketAddr> = match self.options.controller_mode {
            true => self.namesrv_master()?.into_iter().collect(),
            false => (0..self.options.brokers)
                .map(|i| self.broker_addr(i))
                .collect(),
        };
        let mut missing = Vec::new();
        for addr in masters {
            let line = format!("create topic to {addr} success");
            if !out.contains(&line) {
                missing.push(addr);
            }
        }
        if missing.is_empty() {
            if self.options.controller_mode {
                self.wait_topic_on_replicas(topic, self.options.start_timeout)?;
            }
            Ok(())
        } else {
            Err(HarnessError::new(format!(
                "updateTopic {topic} did not succeed on {missing:?}; mqadmin said:\n{}",
                out.lines()
                    .filter(|l| !l.contains("|-INFO in "))
                    .collect::<Vec<_>>()
                    .join("\n")
            )))
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!(
                "rmq cluster {} dropped during a panic; log tails:\n{}",
                self.run_dir.display(),
                self.log_tail(30)
            );
        }
        // The proxy, brokers, then the NameServer; SIGKILL, so nothing lingers.
        self.kill9_proxy();
        for b in &mut self.brokers {
            if let Some(mut jvm) = b.jvm.take() {
                jvm.kill9();
            }
        }
        if let Some(mut jvm) = self.namesrv.jvm.take() {
            jvm.kill9();
        }
        // The stores are the bulk of a run (a benchmark leaves gigabytes, and a broker refuses
        // writes once its disk is 90 % full); logs and tool outputs stay. After a panic the
        // stores stay too, for the post-mortem.
        if !panicking {
            for b in &self.brokers {
                let _ = fs::remove_dir_all(b.dir.join("store"));
            }
            // The embedded controller's (controller mode).
            let _ = fs::remove_dir_all(self.namesrv.dir.join("store"));
        }
    }
}

/// Downloads (Maven) and compiles everything a [`Cluster`] of `version` and its Java tools
/// need, without starting anything. Tests that later run inside a network namespace with no
/// route to Maven Central call this first, outside it.
pub fn prefetch(version: Version) -> Result<(), HarnessError> {
    jars::require_tool(&jars::jdk_tool("java"), "-version")?;
    jars::lib_dir(version, jars::Part::Server)?;
    jars::lib_dir(version, jars::Part::Client)?;
    jars::java_classes(version)?;
    Ok(())
}
