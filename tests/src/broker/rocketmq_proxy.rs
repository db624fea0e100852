//! Apache RocketMQ's own proxy (`rocketmq-proxy`, 5.x) in cluster mode, in front of a running
//! [`Cluster`]: a client whose NameServer address is the proxy's remoting port gets routes that
//! name the proxy as every broker's address, and its broker requests then go through the proxy.
//!
//! Not to be confused with [`crate::proxy`], our frame-rewriting fault-injection proxy.
//!
//! The proxy runs in `<run dir>/proxy/`: `rmq-proxy.json` (its config), `home/` (`user.home`,
//! `ROCKETMQ_HOME` and `RMQ_PROXY_HOME`; the log is `home/logs/rocketmqlogs/proxy.log`) and
//! `out-<k>.log` (stdout and stderr of the k-th start). It is SIGKILLed with the cluster.

use std::net::SocketAddr;

use serde_json::{Map, Value};

use super::process::{Jvm, tail};
use super::{
    CLUSTER_NAME, Cluster, HarnessError, Node, common_jvm_flags, jars, loopback, ports,
    prepare_home, write,
};

/// What the proxy prints on stdout once every server of it started.
const READY_LINE: &str = "rocketmq-proxy startup successfully";

/// How to start the proxy ([`Cluster::start_proxy_with`]).
#[derive(Clone, Debug)]
pub struct ProxyOptions {
    /// Heap (-Xms/-Xmx) in MiB; direct memory gets half of it.
    pub heap_mb: u32,
    /// Extra keys of `rmq-proxy.json` (`ProxyConfig` field names); they replace the harness's
    /// own keys of the same name.
    pub config: Map<String, Value>,
}

impl Default for ProxyOptions {
    fn default() -> Self {
        ProxyOptions {
            heap_mb: 256,
            config: Map::new(),
        }
    }
}

impl Cluster {
    /// Starts `rocketmq-proxy` in cluster mode in front of this cluster with
    /// [`ProxyOptions::default`]; see [`Cluster::start_proxy_with`].
    pub fn start_proxy(&mut self) -> Result<SocketAddr, HarnessError> {
        self.start_proxy_with(ProxyOptions::default())
    }

    /// Starts (or, when one already runs, kills and restarts) `rocketmq-proxy` in cluster mode,
    /// pointed at this cluster's NameServer, and returns its remoting address
    /// (`127.0.0.1:<remotingListenPort>`) once it printed its startup line and accepts TCP
    /// connections there. Use that address as a client's NameServer address. The proxy's jars
    /// are resolved like the cluster's (Maven, cached); a 4.9 cluster has no proxy and gets an
    /// error. The error of a failed start carries the tails of the proxy's output and log.
    pub fn start_proxy_with(&mut self, options: ProxyOptions) -> Result<SocketAddr, HarnessError> {
        let lib = jars::lib_dir(self.version, jars::Part::Proxy)?;
        self.kill9_proxy();
        let remoting = self.ports.proxy_remoting();
        let grpc = self.ports.proxy_grpc();
        for port in [remoting, grpc] {
            if !ports::port_free(port) {
                return Err(HarnessError::new(format!(
                    "the proxy's port {port} is taken by another process"
                )));
            }
        }
        let starts = self.proxy.as_ref().map_or(0, |n| n.starts);
        let mut node = Node {
            name: "proxy".into(),
            dir: self.run_dir.join("proxy"),
            port: remoting,
            jvm: None,
            starts: starts + 1,
        };
        prepare_home(self.version, &node.dir)?;
        let conf = node.dir.join("rmq-proxy.json");
        write(&conf, &self.proxy_config(remoting, grpc, options.config))?;
        let heap = options.heap_mb;
        let mut args = vec![
            format!("-Xms{heap}m"),
            format!("-Xmx{heap}m"),
            format!("-XX:MaxDirectMemorySize={}m", (heap / 2).max(64)),
        ];
        args.extend(common_jvm_flags(&node.home(), "proxy"));
        args.extend([
            "-cp".into(),
            jars::classpath_of(&lib),
            "org.apache.rocketmq.proxy.ProxyStartup".into(),
            "-pc".into(),
            conf.display().to_string(),
            "-pm".into(),
            "cluster".into(),
        ]);
        let home = node.home().display().to_string();
        let env = [("ROCKETMQ_HOME", home.clone()), ("RMQ_PROXY_HOME", home)];
        let mut jvm = Jvm::spawn(&self.java, &args, &env, &node.dir, node.out_file())?;
        let ready = jvm.wait_ready(READY_LINE, loopback(remoting), self.options.start_timeout);
        if ready.is_err() {
            jvm.kill9();
        } else {
            node.jvm = Some(jvm);
        }
        let logs = proxy_log_tail(&node, 40);
        // Kept after a failed start too: its logs join the cluster's log tails.
        self.proxy = Some(node);
        ready.map_err(|e| {
            HarnessError::new(format!("rocketmq-proxy did not start: {e}")).with_logs(logs)
        })?;
        Ok(loopback(remoting))
    }

    /// The contents of `rmq-proxy.json`: cluster mode against our NameServer, every address it
    /// hands out 127.0.0.1, then `extra` on top.
    fn proxy_config(&self, remoting: u16, grpc: u16, extra: Map<String, Value>) -> String {
        let mut config = serde_json::json!({
            "rocketMQClusterName": CLUSTER_NAME,
            "proxyClusterName": CLUSTER_NAME,
            "proxyName": "rmq-test-proxy",
            "proxyMode": "cluster",
            "namesrvAddr": self.namesrv_addr().to_string(),
            "remotingListenPort": remoting,
            "grpcServerPort": grpc,
            // Otherwise the machine's first non-loopback address, which routes would name.
            "localServeAddr": "127.0.0.1",
            "remotingAccessAddr": "127.0.0.1",
            // A thread dump every minute into the watermark log when a pool is busy: noise here.
            "enablePrintJstack": false,
        });
        if let Value::Object(map) = &mut config {
            map.extend(extra);
        }
        serde_json::to_string_pretty(&config).unwrap_or_default()
    }

    /// `127.0.0.1:<remotingListenPort>` of the proxy while it runs.
    pub fn proxy_addr(&self) -> Option<SocketAddr> {
        self.running_proxy()
            .map(|_| loopback(self.ports.proxy_remoting()))
    }

    /// `127.0.0.1:<grpcServerPort>` of the proxy while it runs.
    pub fn proxy_grpc_addr(&self) -> Option<SocketAddr> {
        self.running_proxy()
            .map(|_| loopback(self.ports.proxy_grpc()))
    }

    /// Pid of the proxy's JVM while it runs.
    pub fn proxy_pid(&self) -> Option<u32> {
        self.running_proxy()
            .and_then(|n| n.jvm.as_ref().map(Jvm::pid))
    }

    /// SIGKILLs the proxy, if one runs.
    pub fn kill9_proxy(&mut self) {
        if let Some(mut jvm) = self.proxy.as_mut().and_then(|n| n.jvm.take()) {
            jvm.kill9();
        }
    }

    fn running_proxy(&self) -> Option<&Node> {
        self.proxy.as_ref().filter(|n| n.jvm.is_some())
    }
}

/// The last `n` lines of the proxy's output and of its main log.
fn proxy_log_tail(node: &Node, n: usize) -> String {
    let log = proxy_log(node);
    let mut s = String::new();
    for file in [node.out_file(), log] {
        let t = tail(&file, n);
        let t: Vec<&str> = t.lines().filter(|l| !l.contains("|-INFO in ")).collect();
        s.push_str(&format!("==> {} <==\n{}\n", file.display(), t.join("\n")));
    }
    s
}

/// `home/logs/rocketmqlogs/proxy.log` of the proxy's folder.
pub(super) fn proxy_log(node: &Node) -> std::path::PathBuf {
    node.home()
        .join("logs")
        .join("rocketmqlogs")
        .join("proxy.log")
}
