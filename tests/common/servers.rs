//! Server guards: a real `redis-server` on a free loopback port, with its
//! own directory and the built module loaded, killed and cleaned up on drop
//! (even when a test panics); the common configurations (timer off, timer
//! at an interval, keyspace notifications on), and replicas.
//!
//! Environment: `VTRR_REDIS_SERVER` (default `redis-server` on PATH),
//! `VTRR_MODULE` (default `target/debug/libvtrr.so`), `VTRR_LAYOUT`
//! (`keys`, the default, or `native`: the `vtrr.default-layout` every
//! server starts with, so each suite runs on either layout).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::wait_for;

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

/// The layout queues are created in: `VTRR_LAYOUT`, `keys` by default.
pub fn layout() -> &'static str {
    match std::env::var("VTRR_LAYOUT").as_deref() {
        Ok("native") => "native",
        Ok("keys") | Err(_) => "keys",
        Ok(other) => panic!("VTRR_LAYOUT must be keys or native, not {other}"),
    }
}

/// Whether this run creates native queues.
pub fn native_layout() -> bool {
    layout() == "native"
}

/// For a test of the keys layout itself (its keys, its Lua scripts): true,
/// with a line saying so, when this run is on the native layout.
pub fn keys_layout_only(what: &str) -> bool {
    if native_layout() {
        eprintln!("not run on the native layout: {what}");
    }
    native_layout()
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
            .arg("no")
            // A replica's full sync starts at once, not after the default
            // 5 s wait for more replicas (which a loaded machine stretched
            // past a test's 10 s bound).
            .args(["--repl-diskless-sync-delay", "0"]);
        if self.with_module {
            command
                .arg("--loadmodule")
                .arg(module_path())
                .args(&self.module_args);
            if !self.module_args.iter().any(|a| a == "default-layout") {
                command.args(["default-layout", layout()]);
            }
        }
        command
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(command.spawn().expect("cannot start redis-server"));
        // Generous: a server run under valgrind (the bench's counts) takes
        // seconds, and the debug module replaying a replication test's AOF
        // on a loaded CI machine took more than 30.
        let deadline = Instant::now() + Duration::from_secs(90);
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

/// Makes `replica` replicate `master` and waits for the link to come up.
pub fn attach_replica(replica: &Server, master: &Server) {
    let mut con = replica.connect();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(&mut con)
        .unwrap();
    let up = wait_for(Duration::from_secs(10), || master_link_up(&mut con));
    assert!(up, "replica did not sync");
}

/// Whether the replica `con` is connected to has its link to its master up
/// (`master_link_status:up` in `INFO replication`).
pub fn master_link_up(con: &mut redis::Connection) -> bool {
    let info: String = redis::cmd("INFO").arg("replication").query(con).unwrap();
    info.contains("master_link_status:up")
}

/// Waits (up to 5 s) until the one replica of `master` has acknowledged
/// every write so far.
pub fn wait_replicated(master: &mut redis::Connection) {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(master).unwrap();
    assert_eq!(acked, 1);
}
