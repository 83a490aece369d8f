//! The one server-spawning helper of the integration suites: a real
//! `redis-server` on a free loopback port, with its own directory and the
//! built module loaded, killed and cleaned up on drop (even when a test
//! panics).
//!
//! Environment: `VTRR_REDIS_SERVER` (default `redis-server` on PATH),
//! `VTRR_MODULE` (default `target/debug/libvtrr.so`).
#![allow(dead_code, unused_imports)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use redis::Value;

pub mod cluster;

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

pub fn server_binary() -> String {
    std::env::var("VTRR_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

pub fn module_path() -> PathBuf {
    let path = std::env::var("VTRR_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/debug/libvtrr.so"));
    assert!(
        path.exists(),
        "module not built at {} (run `cargo build` or `make test`)",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running redis-server with the module.
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    module_args: Vec<String>,
    extra: Vec<String>,
    pub with_module: bool,
}

impl Server {
    /// A server with the module and no persistence.
    pub fn start() -> Server {
        Server::builder().spawn()
    }

    pub fn builder() -> Builder {
        Builder {
            module_args: Vec::new(),
            extra: Vec::new(),
            with_module: true,
        }
    }

    fn launch(&mut self) {
        let mut command = Command::new(server_binary());
        command
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .arg("--daemonize")
            .arg("no");
        if self.with_module {
            command
                .arg("--loadmodule")
                .arg(module_path())
                .args(&self.module_args);
        }
        command
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(command.spawn().expect("cannot start redis-server"));
        // Generous: a server run under valgrind (the bench's counts) takes seconds.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut con) = self.try_connect() {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    let loading: String = redis::cmd("INFO")
                        .arg("persistence")
                        .query(&mut con)
                        .unwrap();
                    if loading.contains("loading:0") {
                        return;
                    }
                }
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("redis-server exited with {status}; log:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not start; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn try_connect(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        client.get_connection_with_timeout(Duration::from_secs(5))
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    pub fn connect(&self) -> redis::Connection {
        self.try_connect().expect("connect")
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// SHUTDOWN (saving or not per the server's config) and wait.
    pub fn stop(&mut self, save: bool) {
        if let Ok(mut con) = self.try_connect() {
            let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN")
                .arg(if save { "SAVE" } else { "NOSAVE" })
                .query(&mut con);
        }
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL, no shutdown.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sets `--name value` for the next (re)start.
    pub fn set_option(&mut self, name: &str, value: &str) {
        match self.extra.iter().rposition(|a| a == name) {
            Some(i) if i + 1 < self.extra.len() => self.extra[i + 1] = value.to_string(),
            _ => self.extra.extend([name.to_string(), value.to_string()]),
        }
    }

    /// Starts again on the same port and directory (to reload RDB/AOF).
    pub fn restart(&mut self) {
        self.launch();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub struct Builder {
    module_args: Vec<String>,
    extra: Vec<String>,
    with_module: bool,
}

impl Builder {
    /// Arguments after `--loadmodule <path>`, e.g. `["reclaim-interval-ms", "50"]`.
    pub fn module_args(mut self, args: &[&str]) -> Self {
        self.module_args = args.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Extra `--option value` arguments.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.extra.extend(args.iter().map(|s| s.to_string()));
        self
    }

    pub fn without_module(mut self) -> Self {
        self.with_module = false;
        self
    }

    pub fn spawn(self) -> Server {
        let dir = std::env::temp_dir().join(format!(
            "vtrr-test-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut extra = vec![
            "--save".to_string(),
            "".to_string(),
            "--appendonly".to_string(),
            "no".to_string(),
        ];
        extra.extend(self.extra);
        let mut server = Server {
            port: free_port(),
            dir,
            child: None,
            module_args: self.module_args,
            extra,
            with_module: self.with_module,
        };
        server.launch();
        server
    }
}

/// A server whose timer runs every `reclaim_interval_ms` ("0": off).
pub fn timed_server(reclaim_interval_ms: &str) -> Server {
    Server::builder()
        .module_args(&["reclaim-interval-ms", reclaim_interval_ms])
        .spawn()
}

/// A server whose timer is off (`reclaim-interval-ms 0`): only commands act
/// on expired leases and due items.
pub fn quiet_server() -> Server {
    timed_server("0")
}

/// A server that fires keyspace notifications for module events (`Kd`),
/// its timer running every `reclaim_interval_ms` ("0": off).
pub fn notifying_server(reclaim_interval_ms: &str) -> Server {
    Server::builder()
        .args(&["--notify-keyspace-events", "Kd"])
        .module_args(&["reclaim-interval-ms", reclaim_interval_ms])
        .spawn()
}

/// Every key suffix of a queue, in the module's order (src/keys.rs):
/// vtrr-queue's nine (`SUFFIXES`), then the module's own (delayed and dead
/// items, nack counts, the dead-letter policy and default cap, held items
/// of partitions under control, per-partition records).
pub const ALL_SUFFIXES: [&str; 19] = [
    "queue",
    "current_virtual_time",
    "partition_virtual_time",
    "task",
    "meta",
    "inflight",
    "inflight_task",
    "lease",
    "timeouts",
    "delayed",
    "delayed_task",
    "nacks",
    "dead",
    "dead_task",
    "dead_reason",
    "policy",
    "held",
    "held_at",
    "partitions",
];

/// The nine key suffixes of a queue that vtrr-queue knows: the first nine
/// of `ALL_SUFFIXES`.
pub const SUFFIXES: [&str; 9] = *ALL_SUFFIXES.first_chunk().unwrap();

/// The key names `vtrr:<name>:<suffix>` of queue `name`, in `suffixes` order.
pub fn keys_of(name: &str, suffixes: &[&str]) -> Vec<String> {
    suffixes
        .iter()
        .map(|suffix| format!("vtrr:{name}:{suffix}"))
        .collect()
}

/// The nine key names of queue `name`, in `SUFFIXES` order.
pub fn queue_keys(name: &str) -> Vec<String> {
    keys_of(name, &SUFFIXES)
}

/// All nineteen key names of queue `name`, in `ALL_SUFFIXES` order.
pub fn all_queue_keys(name: &str) -> Vec<String> {
    keys_of(name, &ALL_SUFFIXES)
}

/// Whether `key` exists.
pub fn exists(con: &mut redis::Connection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS").arg(key).query(con).unwrap();
    n == 1
}

/// Asserts queue `name` is drained: current_virtual_time back to 0, and
/// `queue`, `task` and `partition_virtual_time` gone.
#[track_caller]
pub fn assert_drained(con: &mut redis::Connection, name: &str) {
    let cvt: String = redis::cmd("GET")
        .arg(format!("vtrr:{name}:current_virtual_time"))
        .query(con)
        .unwrap();
    assert_eq!(cvt, "0");
    for gone in ["queue", "task", "partition_virtual_time"] {
        assert!(!exists(con, &format!("vtrr:{name}:{gone}")), "{gone}");
    }
}

/// DUMP of each of `keys`, in order, beside its name (None for a missing
/// key), in one round trip.
pub fn dump_keys<K: redis::ToRedisArgs>(
    con: &mut redis::Connection,
    keys: Vec<K>,
) -> Vec<(K, Option<Vec<u8>>)> {
    if keys.is_empty() {
        return Vec::new();
    }
    let mut dumps = redis::pipe();
    for key in &keys {
        dumps.cmd("DUMP").arg(key);
    }
    let dumps: Vec<Option<Vec<u8>>> = dumps.query(con).unwrap();
    keys.into_iter().zip(dumps).collect()
}

/// DUMP of every key of queue `name`, all nineteen (None for missing keys).
pub fn dump_queue(con: &mut redis::Connection, name: &str) -> Vec<(String, Option<Vec<u8>>)> {
    dump_keys(con, all_queue_keys(name))
}

/// DUMP of every key of the database, sorted by name.
pub fn dump_all(con: &mut redis::Connection) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.sort();
    dump_keys(con, keys)
}

/// Asserts `VTRR.CHECK name` finds nothing wrong.
pub fn assert_invariants(con: &mut redis::Connection, name: &str) {
    let problems: Vec<String> = redis::cmd("VTRR.CHECK").arg(name).query(con).unwrap();
    assert!(problems.is_empty(), "queue {name}: {problems:?}");
}

/// A command from its words.
pub fn command(words: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(words[0]);
    for word in &words[1..] {
        cmd.arg(*word);
    }
    cmd
}

/// The error reply `result` must be, as `CODE detail`.
pub fn error_of(result: redis::RedisResult<Value>) -> String {
    let error = result.expect_err("expected an error reply");
    format!(
        "{} {}",
        error.code().unwrap_or("?"),
        error.detail().unwrap_or("")
    )
}

/// Polls `condition` until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    condition()
}

/// Polls `condition` until it holds, and panics naming `what` if `timeout`
/// passes first. For waiting on something that must happen; a test showing
/// that something does *not* happen lets a fixed time pass instead.
#[track_caller]
pub fn wait_until(timeout: Duration, what: &str, condition: impl FnMut() -> bool) {
    assert!(
        wait_for(timeout, condition),
        "timed out after {timeout:?} waiting until {what}"
    );
}

/// `CONFIG SET vtrr.reclaim-interval-ms <ms>`: the timer's interval, 0 to
/// stop it.
pub fn set_reclaim_interval_ms(con: &mut redis::Connection, ms: u64) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("vtrr.reclaim-interval-ms")
        .arg(ms)
        .query(con)
        .unwrap();
}

/// Waits for the timer's second run: by then the start-up index rebuild has
/// run, so whatever the timer finds later it learned some other way (from
/// the commands, or the keyspace subscription).
pub fn wait_past_startup_rebuild(con: &mut redis::Connection) {
    wait_until(Duration::from_secs(2), "the timer has run twice", || {
        vtrr_info(con)["vtrr_timer_runs"] >= 2
    });
}

/// `VTRR.ENQUEUE queue` with `(partition, id, weight, payload)` items in one
/// call; the number added.
pub fn enqueue_items(
    con: &mut redis::Connection,
    queue: &str,
    items: &[(&str, &str, u64, &[u8])],
) -> i64 {
    let mut cmd = redis::cmd("VTRR.ENQUEUE");
    cmd.arg(queue);
    for (partition, id, weight, payload) in items {
        cmd.arg(*partition).arg(*id).arg(*weight).arg(*payload);
    }
    cmd.query(con).unwrap()
}

/// `VTRR.ENQUEUE` of one weight-1 item; returns how many were added.
pub fn enqueue_one(
    con: &mut redis::Connection,
    queue: &str,
    partition: &str,
    id: &str,
    payload: &str,
) -> i64 {
    enqueue_items(con, queue, &[(partition, id, 1, payload.as_bytes())])
}

/// `VTRR.DEFER queue delay_ms` with `(partition, id, weight, payload)`
/// items in one call; the number added.
pub fn defer_items(
    con: &mut redis::Connection,
    queue: &str,
    delay_ms: u64,
    items: &[(&str, &str, u64, &[u8])],
) -> i64 {
    let mut cmd = redis::cmd("VTRR.DEFER");
    cmd.arg(queue).arg(delay_ms);
    for (partition, id, weight, payload) in items {
        cmd.arg(*partition).arg(*id).arg(*weight).arg(*payload);
    }
    cmd.query(con).unwrap()
}

/// The server's clock (`TIME`) in Unix ms.
pub fn server_time_ms(con: &mut redis::Connection) -> i64 {
    let (sec, usec): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    sec * 1000 + usec / 1000
}

/// `VTRR.STATS <queue>`, by field name.
pub fn stats(
    con: &mut redis::Connection,
    queue: &str,
) -> std::collections::BTreeMap<String, Value> {
    redis::cmd("VTRR.STATS").arg(queue).query(con).unwrap()
}

/// One lease as VTRR.LEASE replies: id, payload, token, timeouts.
pub type Lease = (Vec<u8>, Vec<u8>, String, i64);

/// `VTRR.LEASE <queue> <lease_ms>`: the lease, or None on an empty queue.
pub fn lease(con: &mut redis::Connection, queue: &str, lease_ms: u64) -> Option<Lease> {
    redis::cmd("VTRR.LEASE")
        .arg(queue)
        .arg(lease_ms)
        .query(con)
        .unwrap()
}

/// `VTRR.ACK <queue> <id> <token>`: the number acked (0 or 1).
pub fn ack(con: &mut redis::Connection, queue: &str, id: &[u8], token: &str) -> i64 {
    redis::cmd("VTRR.ACK")
        .arg(queue)
        .arg(id)
        .arg(token)
        .query(con)
        .unwrap()
}

/// `VTRR.RENEW <queue> <id> <token> <lease_ms>`: 1 when renewed, else 0.
pub fn renew(
    con: &mut redis::Connection,
    queue: &str,
    id: &[u8],
    token: &str,
    lease_ms: u64,
) -> i64 {
    redis::cmd("VTRR.RENEW")
        .arg(queue)
        .arg(id)
        .arg(token)
        .arg(lease_ms)
        .query(con)
        .unwrap()
}

/// `VTRR.NACK <queue> <id> <token> [options...]` (options such as
/// `["DELAY", "100"]` or `["DEAD"]`): 1 when the token was current, else 0.
pub fn nack(
    con: &mut redis::Connection,
    queue: &str,
    id: &[u8],
    token: &str,
    options: &[&str],
) -> i64 {
    redis::cmd("VTRR.NACK")
        .arg(queue)
        .arg(id)
        .arg(token)
        .arg(options)
        .query(con)
        .unwrap()
}

/// `VTRR.POLICY <queue> <options...>` (such as `["MAX-NACKS", "2"]`), which
/// must reply OK.
pub fn set_policy(con: &mut redis::Connection, queue: &str, options: &[&str]) {
    let reply: String = redis::cmd("VTRR.POLICY")
        .arg(queue)
        .arg(options)
        .query(con)
        .unwrap();
    assert_eq!(reply, "OK");
}

/// RENEWs the lease of `id` (`token` must be current) to 1 ms and lets it
/// expire: nothing has reclaimed it yet on a server whose timer is off.
pub fn expire_lease(con: &mut redis::Connection, queue: &str, id: &[u8], token: &str) {
    assert_eq!(renew(con, queue, id, token, 1), 1);
    std::thread::sleep(Duration::from_millis(5));
}

/// One lease as `VTRR.LEASE ... WITHCOUNTERS` replies: id, payload, token,
/// timeouts, nacks.
pub type CountedLease = (Vec<u8>, Vec<u8>, String, i64, i64);

/// `VTRR.LEASE <queue> <lease_ms> WITHCOUNTERS`: the lease, or None on an
/// empty queue.
pub fn lease_with_counters(
    con: &mut redis::Connection,
    queue: &str,
    lease_ms: u64,
) -> Option<CountedLease> {
    redis::cmd("VTRR.LEASE")
        .arg(queue)
        .arg(lease_ms)
        .arg("WITHCOUNTERS")
        .query(con)
        .unwrap()
}

/// `VTRR.LEASE <queue> <lease_ms> COUNT <count>`: up to `count` leases.
pub fn lease_count(
    con: &mut redis::Connection,
    queue: &str,
    lease_ms: u64,
    count: u64,
) -> Vec<Lease> {
    redis::cmd("VTRR.LEASE")
        .arg(queue)
        .arg(lease_ms)
        .arg("COUNT")
        .arg(count)
        .query(con)
        .unwrap()
}

/// The ids of `leases`, as text, in order.
pub fn ids(leases: &[Lease]) -> Vec<String> {
    leases
        .iter()
        .map(|l| String::from_utf8(l.0.clone()).unwrap())
        .collect()
}

/// The (id, token) of every lease in a LEASE reply (nil, one lease, or an
/// array of them with COUNT; four or five elements with WITHCOUNTERS), in
/// order.
pub fn leases_in(reply: &Value) -> Vec<(Vec<u8>, Vec<u8>)> {
    let Value::Array(elements) = reply else {
        return Vec::new();
    };
    match elements.as_slice() {
        [Value::BulkString(id), _, Value::BulkString(token), Value::Int(_), ..] => {
            vec![(id.clone(), token.clone())]
        }
        _ => elements.iter().flat_map(leases_in).collect(),
    }
}

/// `VTRR.LEASE <queue> <lease_ms> BLOCK <block_ms>` (0: wait forever).
pub fn lease_block_cmd(queue: &str, lease_ms: u64, block_ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("VTRR.LEASE");
    cmd.arg(queue).arg(lease_ms).arg("BLOCK").arg(block_ms);
    cmd
}

/// WATCHes `keys` on `watcher`, runs `act` (given the watcher, for reads),
/// and says whether a transaction begun after it still executes: false when
/// something in `act` touched one of the keys.
pub fn keys_untouched_by(
    watcher: &mut redis::Connection,
    keys: impl redis::ToRedisArgs,
    act: impl FnOnce(&mut redis::Connection),
) -> bool {
    let _: () = redis::cmd("WATCH").arg(keys).query(watcher).unwrap();
    act(watcher);
    let _: () = redis::cmd("MULTI").query(watcher).unwrap();
    let _: () = redis::cmd("PING").query(watcher).unwrap();
    let result: Option<Vec<String>> = redis::cmd("EXEC").query(watcher).unwrap();
    result.is_some()
}

/// The integer fields of `INFO vtrr`, by name (`vtrr_timer_runs`, ...).
pub fn vtrr_info(con: &mut redis::Connection) -> std::collections::HashMap<String, i64> {
    let text: String = redis::cmd("INFO").arg("vtrr").query(con).unwrap();
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
        .collect()
}

/// Makes `replica` replicate `master` and waits for the link to come up.
pub fn attach_replica(replica: &Server, master: &Server) {
    let mut con = replica.connect();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(&mut con)
        .unwrap();
    let up = wait_for(Duration::from_secs(10), || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut con)
            .unwrap();
        info.contains("master_link_status:up")
    });
    assert!(up, "replica did not sync");
}

/// Waits (up to 5 s) until the one replica of `master` has acknowledged
/// every write so far.
pub fn wait_replicated(master: &mut redis::Connection) {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(master).unwrap();
    assert_eq!(acked, 1);
}

/// Waits until exactly `n` clients are blocked.
pub fn wait_blocked(con: &mut redis::Connection, n: usize) {
    let reached = wait_for(Duration::from_secs(5), || blocked_clients(con) == n);
    assert!(reached, "never saw {n} blocked clients");
}

/// `blocked_clients` of `INFO clients`.
pub fn blocked_clients(con: &mut redis::Connection) -> usize {
    let info: String = redis::cmd("INFO").arg("clients").query(con).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("blocked_clients:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Subscribes `con` to the keyspace events of `key` in database 0, each
/// read waiting at most 2 s.
pub fn keyspace_events<'a>(con: &'a mut redis::Connection, key: &str) -> redis::PubSub<'a> {
    let mut pubsub = con.as_pubsub();
    pubsub.subscribe(format!("__keyspace@0__:{key}")).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    pubsub
}

/// The next `n` events (`vtrr.enqueue`, ...) `pubsub` receives, in order;
/// fewer if one does not come within the read timeout.
pub fn next_events(pubsub: &mut redis::PubSub, n: usize) -> Vec<String> {
    let mut events = Vec::new();
    while events.len() < n {
        let Ok(message) = pubsub.get_message() else {
            break;
        };
        events.push(message.get_payload::<String>().unwrap());
    }
    events
}

/// Queue `name` with an item in every state, so all nineteen keys exist:
/// `a` leased (the token is returned), `b` dead (nacked with DEAD), `c`
/// queued after one expired lease and one nack (so `timeouts` and `nacks`
/// hold it), `d` delayed by a minute, all of partition `p`; `h1` held
/// (its partition `h` is paused, so it waits in `held`); and a
/// MAX-TIMEOUTS policy. Needs a server whose timer is off (`quiet_server`).
pub fn queue_in_every_state(con: &mut redis::Connection, name: &str) -> String {
    enqueue_items(
        con,
        name,
        &[
            ("p", "a", 1, b"A"),
            ("p", "b", 1, b"B"),
            ("p", "c", 1, b"C"),
        ],
    );
    let (id, _, token, _) = lease(con, name, 60_000).unwrap();
    assert_eq!(id, b"a");
    let (id, _, dead_token, _) = lease(con, name, 60_000).unwrap();
    assert_eq!(id, b"b");
    assert_eq!(nack(con, name, b"b", &dead_token, &["DEAD"]), 1);
    let (id, _, _, _) = lease(con, name, 1).unwrap();
    assert_eq!(id, b"c");
    std::thread::sleep(Duration::from_millis(5));
    let reclaimed: i64 = command(&["VTRR.RECLAIM", name]).query(con).unwrap();
    assert_eq!(reclaimed, 1);
    let (id, _, c_token, timeouts) = lease(con, name, 60_000).unwrap();
    assert_eq!((id.as_slice(), timeouts), (&b"c"[..], 1));
    assert_eq!(nack(con, name, b"c", &c_token, &[]), 1);
    assert_eq!(defer_items(con, name, 60_000, &[("p", "d", 1, b"d")]), 1);
    let paused: i64 = command(&["VTRR.PAUSE", name, "h"]).query(con).unwrap();
    assert_eq!(paused, 1);
    assert_eq!(enqueue_items(con, name, &[("h", "h1", 1, b"H1")]), 1);
    set_policy(con, name, &["MAX-TIMEOUTS", "3"]);
    let missing: Vec<String> = dump_queue(con, name)
        .into_iter()
        .filter(|(_, dump)| dump.is_none())
        .map(|(key, _)| key)
        .collect();
    assert!(missing.is_empty(), "set-up left keys missing: {missing:?}");
    assert_invariants(con, name);
    token
}

/// A `quiet_server`, a connection to it, and queue `q` in every state
/// (`queue_in_every_state`): the server, the connection and a's token.
pub fn queue_in_every_state_on_a_quiet_server() -> (Server, redis::Connection, String) {
    let server = quiet_server();
    let mut con = server.connect();
    let token = queue_in_every_state(&mut con, "q");
    (server, con, token)
}

/// The module's own keys of queue `q` (beyond vtrr-queue's nine), each with
/// every call that opens it (src/ops.rs), as words: one well-formed call of
/// each command, on `q` as `queue_in_every_state` leaves it (`token` is
/// a's), each of which would change the queue or read the key if let
/// through.
pub fn module_key_openers(token: &str) -> Vec<(&'static str, Vec<Vec<&str>>)> {
    let calls: [(&str, Vec<&str>); 21] = [
        ("enqueue", vec!["VTRR.ENQUEUE", "q", "p", "new", "1", "N"]),
        (
            "defer",
            vec!["VTRR.DEFER", "q", "60000", "p", "new", "1", "N"],
        ),
        ("lease", vec!["VTRR.LEASE", "q", "60000", "WITHCOUNTERS"]),
        ("ack", vec!["VTRR.ACK", "q", "a", token]),
        ("nack", vec!["VTRR.NACK", "q", "a", token]),
        ("reclaim", vec!["VTRR.RECLAIM", "q"]),
        ("stats", vec!["VTRR.STATS", "q"]),
        ("check", vec!["VTRR.CHECK", "q"]),
        ("dead", vec!["VTRR.DEAD", "q"]),
        ("policy-set", vec!["VTRR.POLICY", "q", "MAX-NACKS", "2"]),
        ("policy-read", vec!["VTRR.POLICY", "q"]),
        ("revive", vec!["VTRR.REVIVE", "q", "b"]),
        ("cancel", vec!["VTRR.CANCEL", "q", "c"]),
        (
            "limit-set",
            vec!["VTRR.LIMIT", "q", "p", "CONCURRENCY", "1", "SHARE", "2"],
        ),
        ("limit-read", vec!["VTRR.LIMIT", "q", "p"]),
        ("pause", vec!["VTRR.PAUSE", "q", "p"]),
        ("resume", vec!["VTRR.RESUME", "q", "h"]),
        ("partitions", vec!["VTRR.PARTITIONS", "q", "COUNT", "100"]),
        ("partition", vec!["VTRR.PARTITIONS", "q", "PARTITION", "h"]),
        ("recount", vec!["VTRR.RECOUNT", "q"]),
        (
            "default-cap",
            vec!["VTRR.POLICY", "q", "DEFAULT-CONCURRENCY", "1"],
        ),
    ];
    let openers: [(&str, &[&str]); 10] = [
        (
            "delayed",
            &[
                "enqueue", "defer", "lease", "nack", "reclaim", "stats", "check", "revive",
                "cancel", "recount",
            ],
        ),
        (
            "delayed_task",
            &[
                "defer", "lease", "nack", "reclaim", "check", "revive", "cancel", "recount",
            ],
        ),
        (
            "nacks",
            &[
                "ack", "lease", "nack", "reclaim", "check", "dead", "revive", "cancel", "recount",
            ],
        ),
        (
            "dead",
            &[
                "enqueue", "defer", "lease", "nack", "reclaim", "stats", "check", "dead", "revive",
                "cancel", "recount",
            ],
        ),
        (
            "dead_task",
            &[
                "lease", "nack", "reclaim", "check", "dead", "revive", "cancel", "recount",
            ],
        ),
        (
            "dead_reason",
            &[
                "lease", "nack", "reclaim", "check", "dead", "revive", "cancel", "recount",
            ],
        ),
        (
            "policy",
            &[
                "enqueue",
                "defer",
                "lease",
                "ack",
                "nack",
                "reclaim",
                "stats",
                "check",
                "policy-set",
                "policy-read",
                "revive",
                "cancel",
                "limit-set",
                "pause",
                "resume",
                "partitions",
                "partition",
                "recount",
                "default-cap",
            ],
        ),
        (
            "held",
            &[
                "enqueue",
                "defer",
                "lease",
                "ack",
                "nack",
                "reclaim",
                "stats",
                "check",
                "revive",
                "cancel",
                "limit-set",
                "pause",
                "resume",
                "recount",
                "default-cap",
            ],
        ),
        (
            "held_at",
            &[
                "enqueue",
                "defer",
                "lease",
                "ack",
                "nack",
                "reclaim",
                "check",
                "revive",
                "cancel",
                "limit-set",
                "pause",
                "resume",
                "recount",
                "default-cap",
            ],
        ),
        (
            "partitions",
            &[
                "enqueue",
                "defer",
                "lease",
                "ack",
                "nack",
                "reclaim",
                "check",
                "revive",
                "cancel",
                "limit-set",
                "limit-read",
                "pause",
                "resume",
                "partitions",
                "partition",
                "recount",
                "default-cap",
            ],
        ),
    ];
    openers
        .into_iter()
        .map(|(suffix, names)| {
            let words = names
                .iter()
                .map(|name| calls.iter().find(|(n, _)| n == name).unwrap().1.clone())
                .collect();
            (suffix, words)
        })
        .collect()
}

/// A small deterministic PRNG (xorshift64*), so randomized tests can print
/// and replay their seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Seed from `VTRR_SEED` or the clock; printed so a failure can be replayed.
pub fn seed() -> u64 {
    let seed = std::env::var("VTRR_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("VTRR_SEED={seed}");
    seed
}

/// The reference Lua scripts (`lua/`), loaded into a server.
pub struct LuaScripts {
    shas: std::collections::BTreeMap<&'static str, String>,
}

impl LuaScripts {
    pub const NAMES: [&'static str; 5] = ["enqueue", "lease", "ack", "renew", "reclaim"];

    pub fn load(con: &mut redis::Connection) -> LuaScripts {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
        let common = std::fs::read_to_string(dir.join("common.lua")).unwrap();
        let shas = Self::NAMES
            .iter()
            .map(|name| {
                let body = std::fs::read_to_string(dir.join(format!("{name}.lua"))).unwrap();
                let sha: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(format!("{common}\n{body}"))
                    .query(con)
                    .unwrap();
                (*name, sha)
            })
            .collect();
        LuaScripts { shas }
    }

    /// `EVALSHA <script> 9 <the queue's keys>`; add the ARGV with `.arg()`.
    pub fn cmd(&self, script: &str, queue: &str) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.shas[script]).arg(9).arg(queue_keys(queue));
        cmd
    }
}

/// One map of a `VTRR.PARTITIONS` (or `VTRR.LIMIT` without options)
/// reply, by field name.
pub type View = std::collections::BTreeMap<String, Value>;

/// `VTRR.PARTITIONS <queue> PARTITION <p>`: its one map (the cursor must
/// be "0").
pub fn partition_view(con: &mut redis::Connection, queue: &str, partition: &str) -> View {
    let (cursor, mut maps): (String, Vec<View>) = redis::cmd("VTRR.PARTITIONS")
        .arg(queue)
        .arg("PARTITION")
        .arg(partition)
        .query(con)
        .unwrap();
    assert_eq!(cursor, "0");
    assert_eq!(maps.len(), 1, "{maps:?}");
    maps.pop().unwrap()
}

/// `VTRR.RECOUNT` then the invariant check: after Lua scripts (which keep
/// no per-partition counts) moved items of a queue.
pub fn recount_and_assert_invariants(con: &mut redis::Connection, name: &str) {
    let _: i64 = redis::cmd("VTRR.RECOUNT").arg(name).query(con).unwrap();
    assert_invariants(con, name);
}

/// A key's type and content, read back in an order that does not depend on
/// its encoding: sorted fields, members by (score, member), the string.
#[derive(Debug, PartialEq)]
pub enum Content {
    String(Vec<u8>),
    Hash(std::collections::BTreeMap<Vec<u8>, Vec<u8>>),
    Zset(Vec<(Vec<u8>, String)>),
}

pub fn content(con: &mut redis::Connection, key: &[u8]) -> Option<Content> {
    let kind: String = redis::cmd("TYPE").arg(key).query(con).unwrap();
    Some(match kind.as_str() {
        "none" => return None,
        "string" => Content::String(redis::cmd("GET").arg(key).query(con).unwrap()),
        "hash" => Content::Hash(redis::cmd("HGETALL").arg(key).query(con).unwrap()),
        // Scores as the server prints them: exact, no float rounding here.
        "zset" => Content::Zset(
            redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(con)
                .unwrap(),
        ),
        other => panic!("{} has type {other}", String::from_utf8_lossy(key)),
    })
}

/// Every key of the database with its content, sorted by name.
pub fn contents_all(con: &mut redis::Connection) -> Vec<(Vec<u8>, Option<Content>)> {
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|key| {
            let content = content(con, &key);
            (key, content)
        })
        .collect()
}

/// `ERR wrong number of arguments for '<name>' command`.
pub fn arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

/// Calls that must each be refused with exactly their error: (words, error).
#[derive(Default)]
pub struct Refusals(Vec<(Vec<String>, String)>);

impl Refusals {
    pub fn case(&mut self, words: &[&str], error: &str) {
        let words = words.iter().map(|w| w.to_string()).collect();
        self.0.push((words, error.to_string()));
    }

    /// Makes each call on `con`: it must be refused with its error and leave
    /// queue `queue` as it was. Returns the queue's DUMP they were held to.
    pub fn assert_refused(
        &self,
        con: &mut redis::Connection,
        queue: &str,
    ) -> Vec<(String, Option<Vec<u8>>)> {
        self.assert_refused_leaving(con, |con| dump_queue(con, queue))
    }

    /// As `assert_refused`, each call leaving every key of the server as
    /// it was (for calls that would write outside one queue's keys).
    pub fn assert_refused_leaving_all(&self, con: &mut redis::Connection) {
        self.assert_refused_leaving(con, dump_all);
    }

    fn assert_refused_leaving<S: PartialEq + std::fmt::Debug>(
        &self,
        con: &mut redis::Connection,
        snapshot: impl Fn(&mut redis::Connection) -> S,
    ) -> S {
        let before = snapshot(con);
        for (words, expected) in &self.0 {
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            let got = error_of(command(&words).query(con));
            assert_eq!(&got, expected, "{words:?}");
            assert_eq!(before, snapshot(con), "{words:?} changed something");
        }
        before
    }
}
