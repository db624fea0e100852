//! RocketMQ 5.x controller mode (RIP-44, "automatic master switch"): one replica group of
//! brokers that a controller keeps with exactly one master, without DLedger commit logs.
//!
//! With [`ClusterOptions::controller_mode`](super::ClusterOptions::controller_mode) the
//! NameServer embeds the controller (`enableControllerInNamesrv=true`, a single-node DLedger
//! group on its own port, `<run dir>/namesrv/store/controller` as its store), and every broker
//! is a replica of the one group `broker-a` (`enableControllerMode=true`, `brokerId=-1`,
//! `brokerRole=SLAVE`: the controller hands out the ids and the role; `allAckInSyncStateSet=true`,
//! so that a send is acknowledged only once every replica of the SyncStateSet has it).
//!
//! The controller assigns persistent broker ids from 1 in the order the replicas first register
//! (kept in each broker's `store/brokerIdentity`); the NameServer lists the master under id 0
//! and every other replica under its controller id. [`Cluster::sync_state`] asks the controller
//! (CONTROLLER_GET_SYNC_STATE_DATA), [`Cluster::namesrv_brokers`] the NameServer
//! (GET_BROKER_CLUSTER_INFO), each with one plain request of [`crate::blocking`].

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rmq_core::wire::headers::GetRouteInfoRequestHeader;
use rmq_core::wire::{RequestCode, SerializeType};
use serde_json::Value;

use super::process::tail;
use super::{Cluster, HarnessError, count_occurrences, loopback};
use crate::blocking::Connection;

/// The replica group's `brokerName` in controller mode.
pub const REPLICA_GROUP: &str = "broker-a";

/// CONTROLLER_GET_SYNC_STATE_DATA (body: a JSON list of broker names).
const GET_SYNC_STATE_DATA: RequestCode = RequestCode(1006);
/// GET_ALL_TOPIC_CONFIG.
const GET_ALL_TOPIC_CONFIG: RequestCode = RequestCode(21);
/// The controller's answer when it is not (yet) the DLedger leader.
const CONTROLLER_NOT_LEADER: i32 = 2007;

/// What the NameServer prints once its embedded controller started (before its DLedger group
/// elected a leader).
const CONTROLLER_READY_LINE: &str = "The ControllerManager boot success";

/// One replica as the controller sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replica {
    /// The id the controller assigned (1, 2, …; the NameServer lists a slave under it).
    pub broker_id: i64,
    /// `brokerIP1:listenPort`.
    pub addr: String,
    /// The controller got a heartbeat within `controllerHeartBeatTimeoutMills`.
    pub alive: bool,
}

/// The controller's view of the replica group (CONTROLLER_GET_SYNC_STATE_DATA, what
/// `mqadmin getSyncStateSet` prints).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncState {
    /// Controller id of the master; `None` before the first election or while none is
    /// electable.
    pub master_id: Option<i64>,
    /// The master's `brokerIP1:listenPort`.
    pub master_addr: Option<String>,
    /// Incremented on every election.
    pub master_epoch: i64,
    /// Incremented on every change of the SyncStateSet.
    pub sync_state_set_epoch: i64,
    /// The SyncStateSet: the replicas that may become master.
    pub in_sync: Vec<Replica>,
    /// Known replicas outside the SyncStateSet.
    pub not_in_sync: Vec<Replica>,
}

/// A master SIGKILLed by [`Cluster::kill9_master`].
#[derive(Clone, Debug)]
pub struct KilledMaster {
    /// Its broker index.
    pub index: usize,
    /// Its address.
    pub addr: SocketAddr,
    /// The controller's state just before the kill.
    pub before: SyncState,
    /// Just before SIGKILL was sent.
    pub at: Instant,
}

/// A new master after [`Cluster::wait_for_new_master`].
#[derive(Clone, Debug)]
pub struct MasterSwitch {
    /// Broker index of the new master.
    pub index: usize,
    /// Its address.
    pub addr: SocketAddr,
    /// From the kill to the controller naming it master (polled every 20 ms).
    pub elected_after: Duration,
    /// From the kill to the NameServer listing it as brokerId 0 of the group.
    pub routed_after: Duration,
    /// The controller's state once the switch was seen.
    pub sync_state: SyncState,
    /// Every distinct list of the group's addresses the NameServer served during the wait, as
    /// (time since the kill, `(brokerId, address)` pairs): shows the window without a master.
    pub namesrv_views: Vec<(Duration, Vec<(i64, String)>)>,
}

impl Cluster {
    /// Whether this cluster runs in controller mode.
    pub fn controller_mode(&self) -> bool {
        self.options.controller_mode
    }

    /// `127.0.0.1:<port>` of the controller (embedded in the NameServer), in controller mode.
    pub fn controller_addr(&self) -> Option<SocketAddr> {
        self.controller_mode()
            .then(|| loopback(self.ports.controller()))
    }

    /// The `key=value` lines that turn the NameServer's embedded controller on.
    pub(super) fn controller_namesrv_lines(&self) -> String {
        let store = self.namesrv.dir.join("store").join("controller");
        format!(
            "enableControllerInNamesrv=true\n\
             controllerDLegerGroup=rmq-test\n\
             controllerDLegerPeers=n0-127.0.0.1:{port}\n\
             controllerDLegerSelfId=n0\n\
             controllerStorePath={store}\n\
             mappedFileSize=16777216\n\
             enableElectUncleanMaster=false\n\
             notifyBrokerRoleChanged=true\n",
            port = self.ports.controller(),
            store = store.display(),
        )
    }

    /// The controller-mode lines of broker `i`'s config (its id and role are the controller's).
    pub(super) fn controller_broker_lines(&self) -> String {
        format!(
            "brokerId=-1\n\
             brokerRole=SLAVE\n\
             enableControllerMode=true\n\
             controllerAddr=127.0.0.1:{port}\n\
             allAckInSyncStateSet=true\n\
             brokerIP2=127.0.0.1\n\
             syncBrokerMetadataPeriod=1000\n\
             checkSyncStateSetPeriod=1000\n\
             syncControllerMetadataPeriod=2000\n",
            port = self.ports.controller(),
        )
    }

    /// After the NameServer started: waits for its controller's start line, then until the
    /// single-node DLedger group elected itself leader (the controller answers
    /// CONTROLLER_NOT_LEADER before).
    pub(super) fn wait_controller_leader(&self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + self.options.start_timeout;
        let out = self.namesrv.out_file();
        loop {
            if count_occurrences(&out, CONTROLLER_READY_LINE) > 0 {
                match self.sync_state_raw() {
                    Ok(_) => return Ok(()),
                    Err((Some(CONTROLLER_NOT_LEADER), _)) | Err((None, _)) => {}
                    Err((_, e)) => return Err(e),
                }
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::new(format!(
                    "the controller embedded in the NameServer never became leader; output \
                     ({}):\n{}",
                    out.display(),
                    tail(&out, 40)
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// After every replica started: waits until the controller names a master that the
    /// NameServer lists as brokerId 0, and the SyncStateSet holds every replica.
    pub(super) fn wait_replicas_in_sync(&self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + self.options.start_timeout;
        loop {
            let last = match self.sync_state() {
                Ok(s) => {
                    let master = self.master_index_of(&s);
                    let routed = master.is_some_and(|m| {
                        self.namesrv_master().ok().flatten() == Some(self.broker_addr(m))
                    });
                    if routed && s.in_sync.len() == self.brokers.len() {
                        return Ok(());
                    }
                    format!("{s:?} (NameServer's master: {:?})", self.namesrv_master())
                }
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(HarnessError::new(format!(
                    "the replica group never got a master with every replica in sync; last \
                     state: {last}"
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn sync_state_raw(&self) -> Result<Value, (Option<i32>, HarnessError)> {
        let addr = self
            .controller_addr()
            .ok_or_else(|| (None, HarnessError::new("not in controller mode".into())))?;
        let body = format!("[\"{REPLICA_GROUP}\"]");
        let resp = request(
            addr,
            self.version.client_version(),
            GET_SYNC_STATE_DATA,
            None,
            body.as_bytes(),
        )
        .map_err(|e| (None, e))?;
        if resp.code() != 0 {
            return Err((
                Some(resp.code()),
                HarnessError::new(format!(
                    "CONTROLLER_GET_SYNC_STATE_DATA answered {} {:?}",
                    resp.code(),
                    resp.remark()
                )),
            ));
        }
        serde_json::from_slice(resp.body()).map_err(|e| {
            (
                None,
                HarnessError::new(format!(
                    "CONTROLLER_GET_SYNC_STATE_DATA body {:?}: {e}",
                    String::from_utf8_lossy(resp.body())
                )),
            )
        })
    }

    /// The controller's view of the replica group (what `mqadmin getSyncStateSet -b broker-a`
    /// prints). Empty ([`SyncState::default`]) before any replica registered.
    pub fn sync_state(&self) -> Result<SyncState, HarnessError> {
        let v = self.sync_state_raw().map_err(|(_, e)| e)?;
        let Some(g) = v.pointer(&format!("/replicasInfoTable/{REPLICA_GROUP}")) else {
            return Ok(SyncState::default());
        };
        let replicas = |key: &str| -> Vec<Replica> {
            g.get(key)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|r| Replica {
                            broker_id: r.get("brokerId").and_then(Value::as_i64).unwrap_or(-1),
                            addr: r
                                .get("brokerAddress")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            alive: r.get("alive").and_then(Value::as_bool).unwrap_or(false),
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        Ok(SyncState {
            master_id: g.get("masterBrokerId").and_then(Value::as_i64),
            master_addr: g
                .get("masterAddress")
                .and_then(Value::as_str)
                .filter(|a| !a.is_empty())
                .map(str::to_owned),
            master_epoch: g.get("masterEpoch").and_then(Value::as_i64).unwrap_or(0),
            sync_state_set_epoch: g
                .get("syncStateSetEpoch")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            in_sync: replicas("inSyncReplicas"),
            not_in_sync: replicas("notInSyncReplicas"),
        })
    }

    /// Broker index of the master `s` names, if it is one of ours.
    fn master_index_of(&self, s: &SyncState) -> Option<usize> {
        let addr = s.master_addr.as_deref()?;
        (0..self.brokers.len()).find(|&i| self.broker_addr(i).to_string() == addr)
    }

    /// Broker index of the current master according to the controller.
    pub fn master_index(&self) -> Result<Option<usize>, HarnessError> {
        Ok(self.master_index_of(&self.sync_state()?))
    }

    /// Every broker address the NameServer lists (GET_BROKER_CLUSTER_INFO), as
    /// `(brokerName, brokerId, address)`: the master under id 0.
    pub fn namesrv_brokers(&self) -> Result<Vec<(String, i64, String)>, HarnessError> {
        let resp = request(
            self.namesrv_addr(),
            self.version.client_version(),
            RequestCode::GET_BROKER_CLUSTER_INFO,
            None,
            &[],
        )?;
        if resp.code() != 0 {
            return Err(HarnessError::new(format!(
                "GET_BROKER_CLUSTER_INFO answered {} {:?}",
                resp.code(),
                resp.remark()
            )));
        }
        let mut v = Vec::new();
        rmq_core::ops::read_cluster_info(resp.body(), &mut |b| {
            v.push((b.broker.to_owned(), b.id, b.addr.to_owned()));
        })
        .map_err(|e| HarnessError::new(format!("cluster info: {e:?}")))?;
        Ok(v)
    }

    /// The address the NameServer lists as the replica group's master (brokerId 0), if any.
    pub fn namesrv_master(&self) -> Result<Option<SocketAddr>, HarnessError> {
        Ok(self
            .namesrv_brokers()?
            .into_iter()
            .find(|(name, id, _)| name == REPLICA_GROUP && *id == 0)
            .and_then(|(_, _, a)| a.parse().ok()))
    }

    /// The route of `topic` exactly as the NameServer serves it (GET_ROUTEINFO_BY_TOPIC, the
    /// JSON body), or the NameServer's code and remark when it has none.
    pub fn route_json(&self, topic: &str) -> Result<String, HarnessError> {
        let hdr = GetRouteInfoRequestHeader {
            topic,
            accept_standard_json_only: Some(true),
        };
        let resp = request(
            self.namesrv_addr(),
            self.version.client_version(),
            RequestCode::GET_ROUTEINFO_BY_TOPIC,
            Some(&hdr),
            &[],
        )?;
        if resp.code() != 0 {
            return Ok(format!("code {} {:?}", resp.code(), resp.remark()));
        }
        Ok(String::from_utf8_lossy(resp.body()).into_owned())
    }

    /// Waits until every running replica has `topic` in its topic config (a slave copies the
    /// master's every 10 s; until it has, a switch to it would lose the topic's route).
    pub(super) fn wait_topic_on_replicas(
        &self,
        topic: &str,
        timeout: Duration,
    ) -> Result<(), HarnessError> {
        let deadline = Instant::now() + timeout;
        let needle = format!("\"{topic}\"");
        loop {
            let mut missing = Vec::new();
            for i in 0..self.brokers.len() {
                if self.brokers[i].jvm.is_none() {
                    continue;
                }
                let addr = self.broker_addr(i);
                let has = request(
                    addr,
                    self.version.client_version(),
                    GET_ALL_TOPIC_CONFIG,
                    None,
                    &[],
                )
                .is_ok_and(|r| {
                    r.code() == 0 && String::from_utf8_lossy(r.body()).contains(&needle)
                });
                if !has {
                    missing.push(addr);
                }
            }
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::new(format!(
                    "topic {topic} never reached the replicas {missing:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// SIGKILLs the current master (as the controller names it) and returns which one it was.
    pub fn kill9_master(&mut self) -> Result<KilledMaster, HarnessError> {
        let before = self.sync_state()?;
        let index = self.master_index_of(&before).ok_or_else(|| {
            HarnessError::new(format!(
                "the controller names no master of ours: {before:?}"
            ))
        })?;
        let at = Instant::now();
        self.kill9_broker(index);
        Ok(KilledMaster {
            index,
            addr: self.broker_addr(index),
            before,
            at,
        })
    }

    /// Polls the controller and the NameServer every 20 ms until another running replica is
    /// master in both: the controller names it (with a master epoch above the old one's) and
    /// the NameServer lists it as brokerId 0. Call it right after [`Cluster::kill9_master`]:
    /// the times are measured from the kill.
    pub fn wait_for_new_master(
        &self,
        killed: &KilledMaster,
        timeout: Duration,
    ) -> Result<MasterSwitch, HarnessError> {
        let deadline = killed.at + timeout;
        let mut elected: Option<(usize, Duration, SyncState)> = None;
        let mut last = String::new();
        let mut views: Vec<(Duration, Vec<(i64, String)>)> = Vec::new();
        loop {
            let view = self.namesrv_brokers().map(|v| {
                v.into_iter()
                    .filter(|(name, _, _)| name == REPLICA_GROUP)
                    .map(|(_, id, addr)| (id, addr))
                    .collect::<Vec<_>>()
            });
            let seen = killed.at.elapsed();
            if let Ok(v) = &view
                && views.last().is_none_or(|(_, l)| l != v)
            {
                views.push((seen, v.clone()));
            }
            if elected.is_none() {
                match self.sync_state() {
                    Ok(s) => {
                        if let Some(i) = self.master_index_of(&s)
                            && i != killed.index
                            && self.brokers[i].jvm.is_some()
                            && s.master_epoch > killed.before.master_epoch
                        {
                            elected = Some((i, killed.at.elapsed(), s));
                        } else {
                            last = format!("controller: {s:?}");
                        }
                    }
                    Err(e) => last = format!("controller: {e}"),
                }
            }
            if let Some((index, elected_after, s)) = &elected {
                let addr = self.broker_addr(*index);
                match &view {
                    Ok(v) if v.iter().any(|(id, a)| *id == 0 && *a == addr.to_string()) => {
                        return Ok(MasterSwitch {
                            index: *index,
                            addr,
                            elected_after: *elected_after,
                            routed_after: seen,
                            sync_state: s.clone(),
                            namesrv_views: views,
                        });
                    }
                    Ok(v) => last = format!("elected {index}, NameServer lists {v:?}"),
                    Err(e) => last = format!("NameServer: {e}"),
                }
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::new(format!(
                    "no new master {timeout:?} after killing broker {} ({}); last: {last}",
                    killed.index, killed.addr
                ))
                .with_logs(self.log_tail(40)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One request on a fresh connection (closed afterwards).
fn request(
    addr: SocketAddr,
    version: i32,
    code: RequestCode,
    ext: Option<&GetRouteInfoRequestHeader<'_>>,
    body: &[u8],
) -> Result<crate::blocking::Response, HarnessError> {
    let mut c =
        Connection::connect(addr).map_err(|e| HarnessError::new(format!("connect {addr}: {e}")))?;
    c.request(code, version, SerializeType::JSON, ext, body)
        .map_err(|e| HarnessError::new(format!("{code:?} to {addr}: {e}")))
}
