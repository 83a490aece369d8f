//! Real clusters on loopback: nodes started with the module, slots assigned
//! and met by hand (no dependency on a `redis-cli --cluster` of the same
//! version), slot moves done the two ways operators do them, and a small
//! client that follows MOVED, ASK and TRYAGAIN as cluster clients do.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::{ConnectionLike, ErrorKind, ServerErrorKind, Value};

use super::{master_link_up, wait_for, Server};

pub const SLOTS: u16 = 16384;

pub struct Cluster {
    pub nodes: Vec<Server>,
    pub ids: Vec<String>,
}

/// `CLUSTER KEYSLOT` computed here (CRC16/XMODEM of the hash tag).
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    let mut crc: u16 = 0;
    for &byte in tagged.unwrap_or(bytes) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS
}

fn cluster_args() -> Vec<&'static str> {
    vec![
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "2000",
    ]
}

impl Cluster {
    /// `masters` masters sharing the slots evenly, the module loaded
    /// everywhere with `module_args`.
    pub fn start(masters: usize, module_args: &[&str]) -> Cluster {
        Cluster::start_with(masters, 0, 0, module_args, &[])
    }

    /// As `start`, plus `replicas` replicas of master `replicated`, and
    /// `extra` server arguments on every node.
    pub fn start_with(
        masters: usize,
        replicas: usize,
        replicated: usize,
        module_args: &[&str],
        extra: &[&str],
    ) -> Cluster {
        let nodes: Vec<Server> = (0..masters + replicas)
            .map(|_| {
                let mut args = cluster_args();
                args.extend_from_slice(extra);
                Server::builder()
                    .module_args(module_args)
                    .args(&args)
                    .spawn()
            })
            .collect();
        let ids: Vec<String> = nodes
            .iter()
            .map(|n| {
                redis::cmd("CLUSTER")
                    .arg("MYID")
                    .query(&mut n.connect())
                    .unwrap()
            })
            .collect();
        let cluster = Cluster { nodes, ids };
        let per_master = SLOTS as usize / masters;
        for m in 0..masters {
            let first = m * per_master;
            let last = if m + 1 == masters {
                SLOTS as usize - 1
            } else {
                first + per_master - 1
            };
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query(&mut cluster.con(m))
                .unwrap();
        }
        for n in 1..cluster.nodes.len() {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(cluster.nodes[0].port)
                .query(&mut cluster.con(n))
                .unwrap();
        }
        cluster.wait_until_all_know_each_other();
        for r in masters..masters + replicas {
            let _: () = redis::cmd("CLUSTER")
                .arg("REPLICATE")
                .arg(&cluster.ids[replicated])
                .query(&mut cluster.con(r))
                .unwrap();
        }
        cluster.wait_ok();
        for r in masters..masters + replicas {
            let mut con = cluster.con(r);
            let synced = wait_for(Duration::from_secs(20), || master_link_up(&mut con));
            assert!(synced, "replica {r} did not sync");
        }
        cluster
    }

    pub fn con(&self, node: usize) -> redis::Connection {
        self.nodes[node].connect()
    }

    fn wait_until_all_know_each_other(&self) {
        let total = self.nodes.len();
        for n in 0..total {
            let mut con = self.con(n);
            let met = wait_for(Duration::from_secs(20), || {
                let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut con).unwrap();
                nodes.lines().count() == total && !nodes.contains("handshake")
            });
            assert!(met, "node {n} did not meet the others");
        }
    }

    /// Every node reports `cluster_state:ok`.
    pub fn wait_ok(&self) {
        for n in 0..self.nodes.len() {
            let mut con = self.con(n);
            let ok = wait_for(Duration::from_secs(20), || {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).unwrap();
                info.contains("cluster_state:ok")
            });
            assert!(ok, "node {n} never reached cluster_state:ok");
        }
    }

    /// The node (index) every node agrees owns `slot`, waiting for gossip.
    pub fn wait_owner(&self, slot: u16, owner: usize) {
        let owner_id = &self.ids[owner];
        for n in 0..self.nodes.len() {
            let mut con = self.con(n);
            let agreed = wait_for(Duration::from_secs(20), || {
                owner_of(&mut con, slot).as_deref() == Some(owner_id.as_str())
            });
            assert!(agreed, "node {n} does not see node {owner} own slot {slot}");
        }
    }

    /// The master (index) a fresh cluster of `masters` gives `slot`.
    pub fn first_owner(masters: usize, slot: u16) -> usize {
        (usize::from(slot) / (SLOTS as usize / masters)).min(masters - 1)
    }

    /// The index of the node `node` reports as the owner of `slot`.
    pub fn owner(&self, from: usize, slot: u16) -> usize {
        let id = owner_of(&mut self.con(from), slot).expect("slot has an owner");
        self.ids.iter().position(|i| *i == id).unwrap()
    }

    /// Moves `slot` from node `from` to node `to` as `redis-cli --cluster
    /// reshard` does without `--cluster-replace`: IMPORTING on the target,
    /// MIGRATING on the source, MIGRATE `batch` keys at a time (waiting
    /// `pause` between batches, so traffic meets the half-moved slot), then
    /// SETSLOT NODE on the target, the source and every other master. Panics
    /// on any MIGRATE error (BUSYKEY means the target created a key itself).
    pub fn migrate_slot_legacy(
        &self,
        slot: u16,
        from: usize,
        to: usize,
        batch: usize,
        pause: Duration,
    ) -> usize {
        let mut source = self.con(from);
        let mut target = self.con(to);
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("IMPORTING")
            .arg(&self.ids[from])
            .query(&mut target)
            .unwrap();
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(&self.ids[to])
            .query(&mut source)
            .unwrap();
        let mut moved = 0;
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(batch)
                .query(&mut source)
                .unwrap();
            if keys.is_empty() {
                break;
            }
            let reply: redis::RedisResult<Value> = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.nodes[to].port)
                .arg("")
                .arg(0)
                .arg(10_000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut source);
            if let Err(e) = reply {
                panic!("MIGRATE of {keys:?} failed: {e}");
            }
            moved += keys.len();
            std::thread::sleep(pause);
        }
        for node in [to, from]
            .into_iter()
            .chain((0..self.nodes.len()).filter(|n| *n != to && *n != from))
        {
            if self.is_master(node) {
                let _: () = redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&self.ids[to])
                    .query(&mut self.con(node))
                    .unwrap();
            }
        }
        self.wait_owner(slot, to);
        moved
    }

    /// Whether the servers move slots atomically (`CLUSTER MIGRATESLOTS`,
    /// Valkey 9).
    pub fn has_atomic_slot_migration(&self) -> bool {
        let reply: Value = redis::cmd("COMMAND")
            .arg("INFO")
            .arg("CLUSTER|MIGRATESLOTS")
            .query(&mut self.con(0))
            .unwrap();
        matches!(reply, Value::Array(entries) if entries.iter().any(|e| *e != Value::Nil))
    }

    /// Moves `slot` from `from` to `to` with `CLUSTER MIGRATESLOTS` and
    /// waits for the job to succeed (panics if it fails).
    pub fn migrate_slot_atomic(&self, slot: u16, from: usize, to: usize) {
        let mut source = self.con(from);
        let started: redis::RedisResult<()> = redis::cmd("CLUSTER")
            .arg("MIGRATESLOTS")
            .arg("SLOTSRANGE")
            .arg(slot)
            .arg(slot)
            .arg("NODE")
            .arg(&self.ids[to])
            .query(&mut source);
        if let Err(e) = started {
            panic!("MIGRATESLOTS refused: {e}");
        }
        let finished = wait_for(Duration::from_secs(60), || {
            let jobs: Value = redis::cmd("CLUSTER")
                .arg("GETSLOTMIGRATIONS")
                .query(&mut source)
                .unwrap();
            let text = format!("{jobs:?}");
            assert!(
                !text.contains("\"failed\"") && !text.contains("\"cancelled\""),
                "slot migration failed: {text}"
            );
            text.contains("\"success\"")
        });
        assert!(finished, "slot migration never finished");
        self.wait_owner(slot, to);
    }

    pub fn is_master(&self, node: usize) -> bool {
        let role: Vec<Value> = redis::cmd("ROLE").query(&mut self.con(node)).unwrap();
        matches!(role.first(), Some(Value::BulkString(r)) if r == b"master")
    }

    /// Keys of `slot` on node `node`.
    pub fn keys_in_slot(&self, node: usize, slot: u16) -> i64 {
        redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot)
            .query(&mut self.con(node))
            .unwrap()
    }
}

fn owner_of(con: &mut redis::Connection, slot: u16) -> Option<String> {
    let shards: Vec<Value> = redis::cmd("CLUSTER").arg("SLOTS").query(con).ok()?;
    for range in shards {
        let Value::Array(parts) = range else { continue };
        let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        if (*first..=*last).contains(&i64::from(slot)) {
            return match master.get(2) {
                Some(Value::BulkString(id)) => Some(String::from_utf8_lossy(id).into_owned()),
                _ => None,
            };
        }
    }
    None
}

/// What a cluster client saw on its way to an answer.
#[derive(Default, Debug, Clone, Copy)]
pub struct Redirects {
    pub moved: u64,
    pub ask: u64,
    pub try_again: u64,
}

/// A cluster client reduced to what matters here: it sends to the node it
/// believes owns the slot, follows MOVED (and remembers), follows ASK once
/// with ASKING, and retries TRYAGAIN after a short sleep, within `deadline`.
pub struct ClusterClient {
    connections: HashMap<u16, redis::Connection>,
    owner_port: u16,
    pub redirects: Redirects,
}

impl ClusterClient {
    pub fn new(cluster: &Cluster, first_guess: usize) -> ClusterClient {
        ClusterClient {
            connections: HashMap::new(),
            owner_port: cluster.nodes[first_guess].port,
            redirects: Redirects::default(),
        }
    }

    fn connection(&mut self, port: u16) -> &mut redis::Connection {
        self.connections.entry(port).or_insert_with(|| {
            redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .unwrap()
                .get_connection()
                .unwrap()
        })
    }

    /// The reply, following redirects for up to 30 s; other errors return.
    /// A closed connection (a demoted master drops its clients) is
    /// forgotten and its error returned: the command may or may not have
    /// run, which only the caller can judge.
    pub fn query(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut asking_port = None;
        loop {
            let port = asking_port.take().unwrap_or(self.owner_port);
            let asked = port != self.owner_port;
            let con = self.connection(port);
            if asked {
                let _: () = redis::cmd("ASKING").query(con)?;
            }
            let error = match con.req_command(cmd).and_then(Value::extract_error) {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            if error.is_io_error() || error.is_connection_dropped() {
                self.connections.remove(&port);
                return Err(error);
            }
            assert!(
                Instant::now() < deadline,
                "still redirected after 30 s: {error}"
            );
            match error.kind() {
                ErrorKind::Server(ServerErrorKind::Moved) => {
                    self.redirects.moved += 1;
                    self.owner_port = port_of(error.redirect_node().unwrap().0);
                }
                ErrorKind::Server(ServerErrorKind::Ask) => {
                    self.redirects.ask += 1;
                    asking_port = Some(port_of(error.redirect_node().unwrap().0));
                }
                ErrorKind::Server(ServerErrorKind::TryAgain) => {
                    self.redirects.try_again += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
                // A failover in progress: wait for the new topology.
                ErrorKind::Server(ServerErrorKind::ClusterDown | ServerErrorKind::MasterDown) => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => return Err(error),
            }
        }
    }
}

impl ClusterClient {
    /// `WAIT 1` on the node that served the last command: whether one
    /// replica has everything written so far.
    pub fn replicated(&mut self) -> bool {
        let port = self.owner_port;
        let acked: redis::RedisResult<i64> = redis::cmd("WAIT")
            .arg(1)
            .arg(2_000)
            .query(self.connection(port));
        acked.is_ok_and(|n| n >= 1)
    }
}

fn port_of(address: &str) -> u16 {
    address.rsplit(':').next().unwrap().parse().unwrap()
}
