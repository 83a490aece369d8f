//! `bench --instructions`: what each system's operations cost the server in
//! instructions, counted by callgrind. Timed rates drift with the machine;
//! an instruction count does not (the same binaries give the same count
//! whatever else the machine is doing), so these ratios can be compared
//! across runs and machines exactly.
//!
//! The server runs under `scripts/callgrind-server.sh`; each measurement
//! zeroes the counters, runs its operations on one connection and dumps the
//! counters (`callgrind_control`), so set-up is never counted.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{
    assert_layout, cycle_batch, cycle_batch_on, enqueue_batch, fill_backlog, fill_module,
    in_layout, spread, Bench, EnqueueShape, System,
};

/// The module's queue whose every partition has a cap (the default cap, set
/// before its items are queued, so they wait in `held` behind one head per
/// partition), and that cap: high enough never to bind.
const CAPPED_QUEUE: &str = "qc";
/// The same, in the native layout.
const CAPPED_NATIVE_QUEUE: &str = "qcn";
const DEFAULT_CAP: u64 = 1000;
/// The partitions every counted queue's items are spread over.
const PARTITIONS: usize = 100;
/// The module's ranking grain for waits (`WAIT_GRAIN_MS` in
/// `src/core/ranks.rs`), and half a second more.
const WAIT_GRAIN: Duration = Duration::from_millis(10_500);

/// Control of the callgrind instance the server runs under.
pub struct Callgrind {
    pid: u32,
    /// Where the wrapper script writes `callgrind.<pid>` and its dumps.
    dir: PathBuf,
    dumps: usize,
}

impl Callgrind {
    pub fn new(pid: u32) -> Callgrind {
        let dir = std::env::var_os("VTRR_CALLGRIND_DIR")
            .map(PathBuf::from)
            .expect("VTRR_CALLGRIND_DIR: where scripts/callgrind-server.sh writes its counts");
        Callgrind { pid, dir, dumps: 0 }
    }

    fn control(&self, option: &str) {
        let status = Command::new("callgrind_control")
            .arg(option)
            .arg(self.pid.to_string())
            .output()
            .expect("callgrind_control (valgrind) is not installed")
            .status;
        assert!(status.success(), "callgrind_control {option} failed");
    }

    fn zero(&self) {
        self.control("-z");
    }

    /// Dumps the counters and returns the instructions since the last zero.
    fn dump(&mut self) -> u64 {
        self.control("-d");
        self.dumps += 1;
        let path = self
            .dir
            .join(format!("callgrind.{}.{}", self.pid, self.dumps));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let total = text.lines().find_map(|line| {
                line.strip_prefix("summary:")
                    .or_else(|| line.strip_prefix("totals:"))
                    .and_then(|n| n.trim().parse().ok())
            });
            if let Some(total) = total {
                return total;
            }
            assert!(Instant::now() < deadline, "no callgrind dump at {path:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One way of running the server the counts are taken in.
pub struct Setting {
    pub name: &'static str,
    pub server_args: &'static [&'static str],
    /// `vtrr.replication`.
    pub replication: &'static str,
    /// The AOF is on: bytes appended per operation are measured too.
    pub aof: bool,
}

const AOF: &[&str] = &["--appendonly", "yes", "--appendfsync", "no"];

pub const SETTINGS: [Setting; 4] = [
    Setting {
        name: "persistence off",
        server_args: &[],
        replication: "commands",
        aof: false,
    },
    Setting {
        name: "AOF on",
        server_args: AOF,
        replication: "commands",
        aof: true,
    },
    Setting {
        name: "AOF on, effects mode",
        server_args: AOF,
        replication: "effects",
        aof: true,
    },
    Setting {
        name: "no listpacks",
        server_args: &[
            "--hash-max-listpack-entries",
            "0",
            "--zset-max-listpack-entries",
            "0",
        ],
        replication: "commands",
        aof: false,
    },
];

/// Where the warm-up operations' numbers start (their ids stay apart from
/// the counted ones), and how many there are per run: one per partition.
const WARM_UP_OPS: usize = 1_000_000_000;
const WARM_UP_LEN: usize = 100;

/// One measured figure, as `--json` writes it: the median of the repeats.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Counted {
    pub scenario: String,
    pub setting: String,
    pub system: String,
    /// Whole-server instructions per operation.
    pub instructions: f64,
    /// AOF bytes appended per operation (settings with the AOF on).
    pub aof_bytes: Option<f64>,
}

/// The columns of the counts table: every system, and the module's own
/// reads and writes sent as plain commands.
const PLAIN: &str = "plain commands";

/// One system's repeats: instructions per operation, and AOF bytes per
/// operation when the AOF is on.
struct Figures {
    name: &'static str,
    instructions: Vec<f64>,
    aof_bytes: Vec<f64>,
}

type Batch<'f, 'b> = &'f dyn Fn(&mut Bench<'b>, usize, usize);

/// A named run of operations: `run(bench, start, n)` does operations
/// `start..start + n`.
type Run<'f, 'b> = (&'static str, Box<dyn Fn(&mut Bench<'b>, usize, usize) + 'f>);

impl<'b> Bench<'b> {
    /// Empties the server and fills the two queues with a default cap that
    /// [`Self::instruction_rows`] counts last; returns when. Every capped
    /// partition's wait is ranked during its fill, and its place is
    /// rewritten at its first lease a grain later (the module's
    /// `WAIT_GRAIN_MS`, ten seconds), so the capped count waits out the
    /// grain from here and its warm-up does those rewrites: otherwise they
    /// fell in the counted window on a slow machine (one listpack ZADD per
    /// operation, +11%) and not on a fast one. Every setting's server is
    /// filled so before any is counted: their grains run out together, not
    /// one after another (the gate counts four settings).
    pub fn fill_capped(&mut self) -> Instant {
        let sizes = self.sizes;
        super::reset(&mut self.admin);
        let capped_fill = |con: &mut redis::Connection, queue: &str| {
            let _: () = redis::cmd("VTRR.POLICY")
                .arg(queue)
                .arg("DEFAULT-CONCURRENCY")
                .arg(DEFAULT_CAP)
                .query(con)
                .unwrap();
            fill_module(con, queue, sizes.counted_backlog, PARTITIONS, |_| 1);
        };
        capped_fill(&mut self.admin, CAPPED_QUEUE);
        in_layout(&mut self.admin, "native", |con| {
            capped_fill(con, CAPPED_NATIVE_QUEUE)
        });
        Instant::now()
    }

    /// Counts a single-item enqueue and a lease+ack cycle for every system
    /// and the plain-command baseline, with `counted_backlog` items queued
    /// over 100 partitions, and the module's lease+ack cycle on the queues
    /// [`Self::fill_capped`] filled at `capped_filled`; one table row per
    /// scenario, labelled with the setting, and one row of the native
    /// layout's table per scenario in `native_rows`.
    pub fn instruction_rows(
        &mut self,
        callgrind: &mut Callgrind,
        setting: &Setting,
        capped_filled: Instant,
        counted: &mut Vec<Counted>,
        native_rows: &mut String,
    ) {
        let sizes = self.sizes;
        let partitions = PARTITIONS;
        for system in System::ALL {
            fill_backlog(&mut self.admin, system, sizes.counted_backlog, partitions);
        }
        fill_module(
            &mut self.admin,
            PLAIN_QUEUE,
            sizes.counted_backlog,
            partitions,
            |_| 1,
        );
        assert_layout(&mut self.admin, CAPPED_QUEUE, "keys");
        assert_layout(&mut self.admin, CAPPED_NATIVE_QUEUE, "native");
        assert_layout(&mut self.admin, PLAIN_QUEUE, "keys");
        let shape = EnqueueShape {
            partitions,
            items_per_call: 1,
        };
        let systems = |batch: fn(&mut Bench<'b>, System, &EnqueueShape, usize, usize)| {
            System::ALL.map(move |system| (system, batch))
        };
        let enqueue_of = |bench: &mut Bench<'b>, system: System, shape: &EnqueueShape, start, n| {
            enqueue_batch(&bench.lua, system, shape, &mut bench.admin, 0, start, n)
        };
        let cycle_of = |bench: &mut Bench<'b>, system: System, _: &EnqueueShape, start, n| {
            cycle_batch(&bench.lua, system, &mut bench.admin, 0, start, n)
        };
        let mut measure = |bench: &mut Bench<'b>,
                           batch: fn(&mut Bench<'b>, System, &EnqueueShape, usize, usize),
                           plain: Batch<'_, 'b>| {
            let mut runs: Vec<Run<'_, 'b>> = systems(batch)
                .into_iter()
                .map(|(system, batch)| {
                    let shape = &shape;
                    let run: Run<'_, 'b> = (
                        system.name(),
                        Box::new(move |b, start, n| batch(b, system, shape, start, n)),
                    );
                    run
                })
                .collect();
            runs.insert(1, (PLAIN, Box::new(plain)));
            bench.count(callgrind, setting.aof, &runs)
        };
        let plain_enqueue =
            |b: &mut Bench<'b>, start, n| plain_enqueue_batch(&mut b.admin, start, n);
        let plain_cycle = |b: &mut Bench<'b>, start, n| plain_cycle_batch(&mut b.admin, start, n);
        let enqueue = measure(self, enqueue_of, &plain_enqueue);
        let cycle = measure(self, cycle_of, &plain_cycle);
        let capped_cycle = |system: System, queue: &'static str| {
            move |b: &mut Bench<'b>, start, n| {
                cycle_batch_on(&b.lua, system, queue, &mut b.admin, 0, start, n)
            }
        };
        if let Some(left) = WAIT_GRAIN.checked_sub(capped_filled.elapsed()) {
            std::thread::sleep(left);
        }
        let capped = self.count(
            callgrind,
            setting.aof,
            &[
                (
                    "module",
                    Box::new(capped_cycle(System::Module, CAPPED_QUEUE)),
                ),
                (
                    "native",
                    Box::new(capped_cycle(System::Native, CAPPED_NATIVE_QUEUE)),
                ),
            ],
        );
        for (scenario, figures) in [
            ("enqueue, 1 item per call".to_string(), enqueue),
            ("lease + ack cycle".to_string(), cycle),
            (
                format!("lease + ack cycle, default cap {DEFAULT_CAP} (module and native only)"),
                capped,
            ),
        ] {
            let of = |name: &str| figures.iter().find(|f| f.name == name);
            for figure in &figures {
                counted.push(Counted {
                    scenario: scenario.clone(),
                    setting: setting.name.to_string(),
                    system: figure.name.to_string(),
                    instructions: spread(&figure.instructions).0,
                    aof_bytes: setting.aof.then(|| spread(&figure.aof_bytes).0),
                });
            }
            let cells = |names: &[&str]| -> String {
                names
                    .iter()
                    .map(|name| of(name).map_or_else(|| "—".to_string(), |f| cell(&f.instructions)))
                    .collect::<Vec<_>>()
                    .join(" | ")
            };
            // Speed ratios per repeat, as the timed tables compute them:
            // the other's instructions over `base`'s.
            let speedup = |base: &str, other: Option<&Figures>| -> String {
                let base = &of(base).unwrap().instructions;
                other.map_or_else(
                    || "—".to_string(),
                    |other| {
                        ratio_cell(
                            &other
                                .instructions
                                .iter()
                                .zip(base)
                                .map(|(o, m)| o / m)
                                .collect::<Vec<_>>(),
                        )
                    },
                )
            };
            writeln!(
                self.report,
                "| {scenario}, {} | {} | {} | {} | {} |",
                setting.name,
                cells(&["module", PLAIN, "Lua", "Streams", "list", "PING"]),
                speedup("module", of(PLAIN)),
                speedup("module", of("Lua")),
                speedup("module", of("Streams")),
            )
            .unwrap();
            writeln!(
                native_rows,
                "| {scenario}, {} | {} | {} | {} | {} |",
                setting.name,
                cells(&["native", "module", "Lua", "Streams"]),
                speedup("native", of("module")),
                speedup("native", of("Lua")),
                speedup("native", of("Streams")),
            )
            .unwrap();
        }
    }

    /// Runs each of `runs` for `counted_ops` operations per repeat, in
    /// batches of 100, the runs taking turns within each repeat; returns
    /// each repeat's instructions (and with `aof`, AOF bytes) per operation.
    fn count(
        &mut self,
        callgrind: &mut Callgrind,
        aof: bool,
        runs: &[Run<'_, 'b>],
    ) -> Vec<Figures> {
        let ops = self.sizes.counted_ops;
        let mut figures: Vec<Figures> = runs
            .iter()
            .map(|(name, _)| Figures {
                name,
                instructions: Vec::new(),
                aof_bytes: Vec::new(),
            })
            .collect();
        for repeat in 0..self.sizes.repeats {
            for ((_, run), figure) in runs.iter().zip(&mut figures) {
                // One uncounted operation per partition first: what a call
                // rewrites once per partition in a while (a wait's place in
                // `rank_waiting`, once per ten seconds of its own) is then
                // fresh, so the count does not move with how long the
                // set-up took on this machine.
                run(self, WARM_UP_OPS + repeat * WARM_UP_LEN, WARM_UP_LEN);
                let aof_before = aof.then(|| aof_size(&mut self.admin));
                callgrind.zero();
                let end = (repeat + 1) * ops;
                for start in (repeat * ops..end).step_by(100) {
                    run(self, start, 100.min(end - start));
                }
                figure
                    .instructions
                    .push(callgrind.dump() as f64 / ops as f64);
                if let Some(before) = aof_before {
                    let grown = aof_size(&mut self.admin) - before;
                    figure.aof_bytes.push(grown as f64 / ops as f64);
                }
            }
        }
        figures
    }
}

/// `aof_current_size` of `INFO persistence`: what the AOF holds, written
/// out (before the reply of the call that wrote it is sent).
fn aof_size(con: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("persistence").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("aof_current_size:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("aof_current_size")
}

/// The module's queue the plain-command baseline works on: filled by
/// VTRR.ENQUEUE, then driven by plain commands only.
const PLAIN_QUEUE: &str = "qp";

fn plain_key(suffix: &str) -> String {
    format!("vtrr:{PLAIN_QUEUE}:{suffix}")
}

/// Adds `words` to `pipe` as one command whose reply is ignored.
fn send(pipe: &mut redis::Pipeline, words: &[&str]) {
    let mut cmd = redis::cmd(words[0]);
    for word in &words[1..] {
        cmd.arg(*word);
    }
    pipe.add_command(cmd).ignore();
}

/// The reads and writes of one VTRR.ENQUEUE of one item into an
/// uncontrolled partition, as plain pipelined commands (two round trips:
/// the reads, then the writes): the id checked absent from `meta`,
/// `delayed` and `dead`; the current and partition virtual times, the
/// partition's record and the default cap read; the item scored into
/// `queue`, its payload, meta, partition time and record written.
fn plain_enqueue_batch(con: &mut redis::Connection, start: usize, n: usize) {
    let key = plain_key;
    let items: Vec<(String, String, String)> = (start..start + n)
        .map(|op| {
            (
                format!("p{}", op % 100),
                format!("plain{op}"),
                (1_000_000 + op).to_string(),
            )
        })
        .collect();
    let mut reads = redis::pipe();
    for (partition, id, _) in &items {
        send(&mut reads, &["HEXISTS", &key("meta"), id]);
        send(&mut reads, &["ZSCORE", &key("delayed"), id]);
        send(&mut reads, &["ZSCORE", &key("dead"), id]);
        send(&mut reads, &["GET", &key("current_virtual_time")]);
        send(
            &mut reads,
            &["HGET", &key("partition_virtual_time"), partition],
        );
        send(&mut reads, &["HGET", &key("partitions"), partition]);
        send(&mut reads, &["HGET", &key("policy"), "default-concurrency"]);
    }
    let _: () = reads.query(con).unwrap();
    let mut writes = redis::pipe();
    for (partition, id, score) in &items {
        send(&mut writes, &["ZADD", &key("queue"), score, id]);
        send(&mut writes, &["HSET", &key("task"), id, super::PAYLOAD]);
        send(
            &mut writes,
            &["HSET", &key("meta"), id, &format!("1 {partition}")],
        );
        send(
            &mut writes,
            &["HSET", &key("partition_virtual_time"), partition, score],
        );
        send(
            &mut writes,
            &["HSET", &key("partitions"), partition, "1 0 0 0 0"],
        );
    }
    let _: () = writes.query(con).unwrap();
}

/// The reads and writes of one VTRR.LEASE and one VTRR.ACK of an
/// uncontrolled partition's item, as plain pipelined commands. Lease: the
/// due check of `inflight` and `delayed`, the current virtual time and the
/// default cap, the lowest item popped; then its payload, meta, counters
/// and partition record read, the payload moved to `inflight_task`, the
/// expiry and token written, the record and current virtual time updated.
/// Ack: the token checked; the item removed from `inflight`,
/// `inflight_task`, `lease`, `meta`, `timeouts` and `nacks`; the record
/// updated.
fn plain_cycle_batch(con: &mut redis::Connection, start: usize, n: usize) {
    let key = plain_key;
    let mut pops = redis::pipe();
    for _ in 0..n {
        send(
            &mut pops,
            &[
                "ZRANGEBYSCORE",
                &key("inflight"),
                "-inf",
                "0",
                "LIMIT",
                "0",
                "16",
            ],
        );
        send(
            &mut pops,
            &[
                "ZRANGEBYSCORE",
                &key("delayed"),
                "-inf",
                "0",
                "LIMIT",
                "0",
                "16",
            ],
        );
        send(&mut pops, &["GET", &key("current_virtual_time")]);
        send(&mut pops, &["HGET", &key("policy"), "default-concurrency"]);
        pops.cmd("ZPOPMIN").arg(key("queue"));
    }
    let popped: Vec<Vec<(String, f64)>> = pops.query(con).unwrap();
    let leased: Vec<(String, String, String)> = (start..)
        .zip(popped)
        .map(|(op, mut pop)| {
            let (id, score) = pop.pop().expect("backlog ran dry");
            (id, format!("p{}", op % 100), (score as i64).to_string())
        })
        .collect();
    let mut leases = redis::pipe();
    for (op, (id, partition, score)) in (start..).zip(&leased) {
        let token = format!("{op:032x}");
        send(&mut leases, &["HGET", &key("task"), id]);
        send(&mut leases, &["HGET", &key("meta"), id]);
        send(&mut leases, &["HGET", &key("timeouts"), id]);
        send(&mut leases, &["HGET", &key("partitions"), partition]);
        send(&mut leases, &["HDEL", &key("task"), id]);
        send(
            &mut leases,
            &["HSET", &key("inflight_task"), id, super::PAYLOAD],
        );
        send(
            &mut leases,
            &["ZADD", &key("inflight"), "9000000000000", id],
        );
        send(&mut leases, &["HSET", &key("lease"), id, &token]);
        send(
            &mut leases,
            &["HSET", &key("partitions"), partition, "0 0 1 0 0"],
        );
        send(&mut leases, &["SET", &key("current_virtual_time"), score]);
    }
    let _: () = leases.query(con).unwrap();
    let mut checks = redis::pipe();
    for (id, _, _) in &leased {
        send(&mut checks, &["HGET", &key("lease"), id]);
    }
    let _: () = checks.query(con).unwrap();
    let mut acks = redis::pipe();
    for (id, partition, _) in &leased {
        send(&mut acks, &["ZREM", &key("inflight"), id]);
        for hash in ["inflight_task", "lease", "meta", "timeouts", "nacks"] {
            send(&mut acks, &["HDEL", &key(hash), id]);
        }
        send(&mut acks, &["HGET", &key("partitions"), partition]);
        send(
            &mut acks,
            &["HSET", &key("partitions"), partition, "0 0 0 0 0"],
        );
    }
    let _: () = acks.query(con).unwrap();
}

/// The table's head, before the rows of `instruction_rows`.
pub fn table_head(report: &mut String, sizes: &super::Sizes) {
    writeln!(
        report,
        "## Instructions per operation (whole server)\n\nEvery instruction the server ran (`valgrind --tool=callgrind`, counters zeroed after the set-up), divided by the operations done: {} repeats of {} operations per system (each after 100 uncounted ones, one per partition, so what a partition rewrites once in a while is fresh whatever the set-up took), the systems taking turns, on one connection, pipeline 100, {} items queued over 100 partitions; median (min–max) of the repeats. A lease + ack cycle is one operation; PING's cycle is two PINGs. Repeatable: the same binaries give nearly the same count whatever else the machine is doing (what differs is the server's own background work and its random hash seeds). `plain commands` is the module's own reads and writes of the operation sent as plain pipelined commands (ZPOPMIN, HGET, HSET, ZADD, ...; listed in `examples/bench/instructions.rs`) on a queue the module filled: what the same work costs without the module's commands. `module ÷ …` compare speeds, as in the timed tables (the other's instructions over the module's). `vtrr.replication` is `commands` except in `effects mode`. `no listpacks` is persistence off with `hash-max-listpack-entries 0` and `zset-max-listpack-entries 0`: every hash and sorted set is then a hash table or skip list, as a queue's in-flight set and its two hashes are once it holds more than 128 leases; with up to 100 leases held here, Redis otherwise keeps them as listpacks, which it scans linearly. `default cap {DEFAULT_CAP}` is the module's cycle on a queue of its own, the same backlog queued after `VTRR.POLICY <queue> DEFAULT-CONCURRENCY {DEFAULT_CAP}`: every partition then keeps one item, its head, in `queue` and the rest in `held`, so each LEASE pops a head and promotes the partition's next held item (the cap never binds); the other systems have no such setting.\n\n| scenario | module | {PLAIN} | Lua | Streams | list | PING | module ÷ plain | module ÷ Lua | module ÷ Streams |\n|---|---|---|---|---|---|---|---|---|---|",
        sizes.repeats, sizes.counted_ops, sizes.counted_backlog
    )
    .unwrap();
}

/// The native layout's table: the rows `instruction_rows` gathered.
pub fn native_table(report: &mut String, rows: &str) {
    writeln!(
        report,
        "\n## Instructions per operation: the native layout\n\nThe same counts, the same runs: `native` is the module's commands on a queue of its own in the native layout (the whole queue in one key of the module's type, made with `vtrr.default-layout native` set around its fill; every server here starts with `default-layout keys`, so `module` is the keys layout). `native ÷ …` compare speeds (the other's instructions over native's). The issue's targets for the native layout (timed, not asserted here): lease + ack cycle ≥ 1.0× Streams, single enqueue ≥ 0.8× Streams.\n\n| scenario | native | module | Lua | Streams | native ÷ module | native ÷ Lua | native ÷ Streams |\n|---|---|---|---|---|---|---|---|\n{}",
        rows.trim_end()
    )
    .unwrap();
}

/// The AOF table: bytes appended per operation, by system, for every
/// setting with the AOF on.
pub fn aof_table(report: &mut String, counted: &[Counted]) {
    writeln!(
        report,
        "\n## AOF bytes per operation\n\n`aof_current_size` before and after each system's operations above (payloads of {} bytes), divided by the operations.\n\n| scenario | module | native | {PLAIN} | Lua | Streams | list | PING |\n|---|---|---|---|---|---|---|---|",
        super::PAYLOAD.len()
    )
    .unwrap();
    let mut rows: Vec<(&str, &str)> = Vec::new();
    for c in counted.iter().filter(|c| c.aof_bytes.is_some()) {
        if !rows.contains(&(c.scenario.as_str(), c.setting.as_str())) {
            rows.push((&c.scenario, &c.setting));
        }
    }
    for (scenario, setting) in rows {
        let cells: Vec<String> = ["module", "native", PLAIN, "Lua", "Streams", "list", "PING"]
            .iter()
            .map(|system| {
                counted
                    .iter()
                    .find(|c| c.scenario == scenario && c.setting == setting && c.system == *system)
                    .and_then(|c| c.aof_bytes)
                    .map_or_else(|| "—".to_string(), |b| format!("{b:.0}"))
            })
            .collect();
        writeln!(report, "| {scenario}, {setting} | {} |", cells.join(" | ")).unwrap();
    }
}

/// Instructions as `125.6k (125.4–125.9)`: median (min–max) of the repeats.
fn cell(repeats: &[f64]) -> String {
    let (median, min, max) = spread(repeats);
    format!(
        "{:.1}k ({:.1}–{:.1})",
        median / 1000.0,
        min / 1000.0,
        max / 1000.0
    )
}

fn ratio_cell(ratios: &[f64]) -> String {
    let (median, min, max) = spread(ratios);
    format!("{median:.2}× ({min:.2}–{max:.2})")
}
