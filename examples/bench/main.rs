//! `make bench`: what the same queue work costs as the module (a queue in
//! the keys layout, and `native`: the same commands on a queue in the native
//! layout), as the Lua scripts it replaces, as Redis Streams and as a plain
//! list, measured side by side on one server in one run; then the job lifecycle's own commands
//! (DEFER, NACK, promotion), scaling, the tenant controls' cost, fairness
//! (by weight and by share), the timer and a mass expiry.
//!
//! `bench [--smoke] [--out FILE] [--plot FILE] [--section NAME]`. `--smoke`
//! runs tiny sizes once (seconds), so `make test` keeps this program working;
//! it measures, never asserts. `--plot` draws the fairness run's service
//! order, and service by share, as an SVG. `--section` runs one section
//! only (throughput, lifecycle, scaling, tenant-controls, fairness, timer,
//! mass-expiry).
//! `bench --instructions` instead counts each operation's instructions on a
//! server run under callgrind (`instructions.rs`).

#[path = "../../tests/common/mod.rs"]
mod common;
mod instructions;
mod plot;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use common::{lease, stat, stats, vtrr_info, LuaScripts, Server, Value};
use redis::Connection;

/// Sizes of one run.
struct Sizes {
    repeats: usize,
    /// Rounds per repeat: each system runs one slice per round, in turn.
    rounds: usize,
    slice: Duration,
    connections: usize,
    pipeline: usize,
    /// Pipeline depth of the 100-item enqueue (400 items per round trip).
    pipeline_100: usize,
    reclaim_items: usize,
    /// Reclaim calls per repeat and system, interleaved across systems.
    reclaim_calls: usize,
    scaling: [usize; 3],
    heavy: usize,
    light_partitions: usize,
    light_items: usize,
    weighted_items: usize,
    unrelated_keys: usize,
    /// Mass expiry: leases of one queue expiring together (scenario A),
    /// queues of one lease each (B), and the expired leases of the queue one
    /// LEASE meets with the timer off.
    mass_leases: usize,
    mass_queues: usize,
    inline_expired: usize,
    /// Tenant controls: the standing backlog (over 100 partitions) under
    /// each configuration's lease+ack cycle.
    tenant_backlog: usize,
    /// `--instructions`: operations counted per system and repeat, and the
    /// items queued first (enough for every repeat's cycles).
    counted_ops: usize,
    counted_backlog: usize,
}

const FULL: Sizes = Sizes {
    repeats: 5,
    // Many short slices rather than a few long ones: the machine's bursts of
    // speed then fall on every system's slices alike (40 x 40 ms held
    // module ÷ other within 10% in more rows than 8 x 200 ms).
    rounds: 40,
    slice: Duration::from_millis(40),
    connections: 4,
    pipeline: 32,
    pipeline_100: 4,
    reclaim_items: 10_000,
    reclaim_calls: 6,
    scaling: [1_000, 100_000, 1_000_000],
    heavy: 100_000,
    light_partitions: 100,
    light_items: 10,
    weighted_items: 3_000,
    unrelated_keys: 1_000_000,
    mass_leases: 100_000,
    mass_queues: 20_000,
    inline_expired: 10_000,
    tenant_backlog: 40_000,
    counted_ops: 2_000,
    counted_backlog: 20_000,
};

const SMOKE: Sizes = Sizes {
    repeats: 1,
    rounds: 2,
    slice: Duration::from_millis(5),
    connections: 2,
    pipeline: 8,
    pipeline_100: 2,
    reclaim_items: 100,
    reclaim_calls: 1,
    scaling: [100, 300, 1_000],
    heavy: 500,
    light_partitions: 10,
    light_items: 3,
    weighted_items: 60,
    unrelated_keys: 1_000,
    mass_leases: 300,
    mass_queues: 100,
    inline_expired: 100,
    tenant_backlog: 1_000,
    counted_ops: 100,
    counted_backlog: 300,
};

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum System {
    /// The module's commands on a queue in the keys layout.
    Module,
    /// The module's commands on a queue in the native layout.
    Native,
    Lua,
    Streams,
    List,
    Ping,
}

impl System {
    const ALL: [System; 6] = [
        System::Module,
        System::Native,
        System::Lua,
        System::Streams,
        System::List,
        System::Ping,
    ];

    fn name(self) -> &'static str {
        match self {
            System::Module => "module",
            System::Native => "native",
            System::Lua => "Lua",
            System::Streams => "Streams",
            System::List => "list",
            System::Ping => "PING",
        }
    }

    /// Whether this system sends the module's commands (either layout).
    fn is_module(self) -> bool {
        matches!(self, System::Module | System::Native)
    }
}

/// One system's figures in one repeat: items per second, latency of one
/// pipelined batch, and the server's own cost per call of each command.
#[derive(Clone, Default)]
struct Run {
    items_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    usec_per_call: BTreeMap<String, f64>,
}

impl Run {
    /// The `server µs/call` column: each command's `usec_per_call`, as
    /// `vtrr.ack 0.90, vtrr.lease 1.20`.
    fn usec_per_call_text(&self) -> String {
        let stats: Vec<String> = self
            .usec_per_call
            .iter()
            .map(|(c, u)| format!("{c} {u:.2}"))
            .collect();
        stats.join(", ")
    }
}

/// Repeats of one measurement, reported as min/median/max.
#[derive(Default)]
struct Repeats(Vec<Run>);

impl Repeats {
    fn median(&self) -> Run {
        let mut runs = self.0.clone();
        runs.sort_by(|a, b| a.items_per_sec.total_cmp(&b.items_per_sec));
        runs[runs.len() / 2].clone()
    }
    fn rates(&self) -> Vec<f64> {
        self.0.iter().map(|r| r.items_per_sec).collect()
    }
}

/// Milliseconds a fixed CPU-bound loop takes on this thread's core: how
/// fast the machine itself runs at this moment, independent of Redis.
fn machine_speed_probe() -> f64 {
    let started = Instant::now();
    let mut x = 0u64;
    for i in 0..20_000_000u64 {
        x = std::hint::black_box(x.wrapping_add(i.wrapping_mul(i)));
    }
    std::hint::black_box(x);
    started.elapsed().as_secs_f64() * 1e3
}

/// Median, min and max of a list of figures.
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    (
        sorted[sorted.len() / 2],
        sorted[0],
        sorted[sorted.len() - 1],
    )
}

const PAYLOAD: &str = "{\"task\":\"process_file\",\"args\":[\"s3://bucket/a.pdf\"],\"kwargs\":{}}";

struct Bench<'a> {
    server: &'a Server,
    sizes: &'a Sizes,
    lua: LuaScripts,
    admin: Connection,
    report: String,
    /// Where to draw the fairness picture (`--plot`).
    plot: Option<String>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn command_stats(con: &mut Connection) -> BTreeMap<String, f64> {
    let text: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    text.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let per_call = rest
                .split(',')
                .find_map(|f| f.strip_prefix("usec_per_call="))?;
            Some((name.to_string(), per_call.parse().ok()?))
        })
        .filter(|(name, _)| !name.starts_with("config") && name != "info")
        .collect()
}

/// INFO commandstats' `calls` and `usec` of every command (CONFIG and INFO
/// aside).
fn command_totals(con: &mut Connection) -> BTreeMap<String, (f64, f64)> {
    let text: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    text.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| -> Option<f64> {
                rest.split(',')
                    .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))?
                    .parse()
                    .ok()
            };
            Some((name.to_string(), (field("calls")?, field("usec")?)))
        })
        .filter(|(name, _)| !name.starts_with("config") && name != "info")
        .collect()
}

fn reset(con: &mut Connection) {
    let _: () = redis::cmd("FLUSHALL").query(con).unwrap();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
}

/// `CONFIG SET <name> <value>`.
fn set_config(con: &mut Connection, name: &str, value: impl redis::ToRedisArgs) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(con)
        .unwrap();
}

/// A numeric config's value (`CONFIG GET <name>`).
fn config_value(con: &mut Connection, name: &str) -> usize {
    let (_, value): (String, usize) = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(con)
        .unwrap();
    value
}

/// Adds `count` items (ids `i0`, `i1`, ...) of `partitions` partitions,
/// weighing `weight(partition number)`, in calls of 100: each call `call`
/// (the command and its arguments before the items) with items appended
/// (setup).
fn fill_in_calls_of_100(
    con: &mut Connection,
    call: &redis::Cmd,
    count: usize,
    partitions: usize,
    weight: impl Fn(usize) -> u64,
) {
    for start in (0..count).step_by(100) {
        let mut cmd = call.clone();
        for n in start..(start + 100).min(count) {
            cmd.arg(format!("p{}", n % partitions))
                .arg(format!("i{n}"))
                .arg(weight(n % partitions))
                .arg(PAYLOAD);
        }
        let _: i64 = cmd.query(con).unwrap();
    }
}

/// Enqueues `count` items of `partitions` partitions in calls of 100 (setup).
fn fill_module(
    con: &mut Connection,
    queue: &str,
    count: usize,
    partitions: usize,
    weight: impl Fn(usize) -> u64,
) {
    let mut call = redis::cmd("VTRR.ENQUEUE");
    call.arg(queue);
    fill_in_calls_of_100(con, &call, count, partitions, weight);
}

/// Enqueues `count` items of `partitions` partitions and leases them all for
/// 1 ms, in one call, then lets the leases expire (setup: on a server whose
/// timer is off nothing reclaims them).
fn fill_expired(con: &mut Connection, queue: &str, count: usize, partitions: usize) {
    fill_module(con, queue, count, partitions, |_| 1);
    let _: Value = redis::cmd("VTRR.LEASE")
        .arg(queue)
        .arg(1)
        .arg("COUNT")
        .arg(count)
        .query(con)
        .unwrap();
    std::thread::sleep(Duration::from_millis(5));
}

fn fill_stream(con: &mut Connection, count: usize, partitions: usize) {
    for start in (0..count).step_by(500) {
        let mut pipe = redis::pipe();
        for n in start..(start + 500).min(count) {
            pipe.cmd("XADD")
                .arg("s")
                .arg("*")
                .arg("partition")
                .arg(format!("p{}", n % partitions))
                .arg("payload")
                .arg(PAYLOAD)
                .ignore();
        }
        let _: () = pipe.query(con).unwrap();
    }
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("s")
        .arg("g")
        .arg("0")
        .query(con)
        .unwrap();
}

fn fill_list(con: &mut Connection, count: usize) {
    for start in (0..count).step_by(1000) {
        let n = (start + 1000).min(count) - start;
        let _: i64 = redis::cmd("LPUSH")
            .arg("l")
            .arg(vec![PAYLOAD; n])
            .query(con)
            .unwrap();
    }
}

/// What one enqueue call carries: items spread over `partitions`.
struct EnqueueShape {
    partitions: usize,
    items_per_call: usize,
}

impl EnqueueShape {
    /// The partition and id of item `k` of operation `op` of connection
    /// `worker` (ids stay unique).
    fn item(&self, worker: usize, op: usize, k: usize) -> (String, String) {
        (
            format!("p{}", (op * self.items_per_call + k) % self.partitions),
            format!("w{worker}-{op}-{k}"),
        )
    }

    /// Appends operation `op`'s items (weight 1) to `cmd`.
    fn add_items(&self, cmd: &mut redis::Cmd, worker: usize, op: usize) {
        for k in 0..self.items_per_call {
            let (partition, id) = self.item(worker, op, k);
            cmd.arg(partition).arg(id).arg(1).arg(PAYLOAD);
        }
    }
}

/// One pipelined batch of `n` enqueue calls (operations `start..start + n`
/// of connection `worker`, so ids stay unique) in `system`'s way.
fn enqueue_batch(
    lua: &LuaScripts,
    system: System,
    shape: &EnqueueShape,
    con: &mut Connection,
    worker: usize,
    start: usize,
    n: usize,
) {
    let mut pipe = redis::pipe();
    for op in start..start + n {
        match system {
            System::Module | System::Native | System::Lua => {
                let mut cmd = if system.is_module() {
                    let mut c = redis::cmd("VTRR.ENQUEUE");
                    c.arg(queue_of(system));
                    c
                } else {
                    lua.cmd("enqueue", queue_of(system))
                };
                shape.add_items(&mut cmd, worker, op);
                pipe.add_command(cmd).ignore();
            }
            System::Streams => {
                for k in 0..shape.items_per_call {
                    let (partition, id) = shape.item(worker, op, k);
                    pipe.cmd("XADD")
                        .arg("s")
                        .arg("*")
                        .arg("partition")
                        .arg(partition)
                        .arg("id")
                        .arg(id)
                        .arg("payload")
                        .arg(PAYLOAD)
                        .ignore();
                }
            }
            System::List => {
                pipe.cmd("LPUSH")
                    .arg("l")
                    .arg(vec![PAYLOAD; shape.items_per_call])
                    .ignore();
            }
            System::Ping => {
                pipe.cmd("PING").ignore();
            }
        }
    }
    let _: () = pipe.query(con).unwrap();
}

/// One pipelined batch of `n` lease+ack cycles (operations
/// `start..start + n` of connection `worker`) in `system`'s way; the
/// backlog must not run dry.
fn cycle_batch(
    lua: &LuaScripts,
    system: System,
    con: &mut Connection,
    worker: usize,
    start: usize,
    n: usize,
) {
    cycle_batch_on(lua, system, queue_of(system), con, worker, start, n);
}

/// [`cycle_batch`] on the module's or Lua's queue `queue` (Streams and the
/// list keep their own keys).
fn cycle_batch_on(
    lua: &LuaScripts,
    system: System,
    queue: &str,
    con: &mut Connection,
    worker: usize,
    start: usize,
    n: usize,
) {
    match system {
        System::Module | System::Native | System::Lua => {
            let mut leases = redis::pipe();
            for op in start..start + n {
                if system.is_module() {
                    leases.cmd("VTRR.LEASE").arg(queue).arg(60_000);
                } else {
                    leases.add_command(
                        lua.cmd("lease", queue)
                            .arg(60_000)
                            .arg(1)
                            .arg(1000)
                            .arg(format!("t{worker}-{op}"))
                            .clone(),
                    );
                }
            }
            let replies: Vec<Value> = leases.query(con).unwrap();
            let mut acks = redis::pipe();
            for reply in replies {
                let lease: Vec<Value> = match (system, reply) {
                    (s, Value::Array(fields)) if s.is_module() => fields,
                    (_, Value::Array(mut leases)) if !leases.is_empty() => match leases.remove(0) {
                        Value::Array(fields) => fields,
                        other => panic!("{other:?}"),
                    },
                    (_, other) => panic!("backlog ran dry: {other:?}"),
                };
                let (id, token): (Vec<u8>, Vec<u8>) = (
                    redis::from_redis_value(lease[0].clone()).unwrap(),
                    redis::from_redis_value(lease[2].clone()).unwrap(),
                );
                if system.is_module() {
                    acks.cmd("VTRR.ACK").arg(queue).arg(id).arg(token).ignore();
                } else {
                    acks.add_command(lua.cmd("ack", queue).arg(id).arg(token).clone())
                        .ignore();
                }
            }
            let _: () = acks.query(con).unwrap();
        }
        System::Streams => {
            let mut reads = redis::pipe();
            for _ in 0..n {
                reads
                    .cmd("XREADGROUP")
                    .arg("GROUP")
                    .arg("g")
                    .arg(format!("c{worker}"))
                    .arg("COUNT")
                    .arg(1)
                    .arg("STREAMS")
                    .arg("s")
                    .arg(">");
            }
            let replies: Vec<redis::streams::StreamReadReply> = reads.query(con).unwrap();
            let mut acks = redis::pipe();
            for reply in replies {
                let entries = reply.keys.first().map_or(0, |key| key.ids.len());
                assert_eq!(entries, 1, "backlog ran dry");
                for entry in &reply.keys[0].ids {
                    acks.cmd("XACK").arg("s").arg("g").arg(&entry.id).ignore();
                }
            }
            let _: () = acks.query(con).unwrap();
        }
        System::List => {
            let mut pops = redis::pipe();
            for _ in 0..n {
                pops.cmd("RPOP").arg("l");
            }
            let popped: Vec<Option<Vec<u8>>> = pops.query(con).unwrap();
            assert!(popped.iter().all(Option::is_some), "backlog ran dry");
        }
        System::Ping => {
            for _ in 0..2 {
                let mut pings = redis::pipe();
                for _ in 0..n {
                    pings.cmd("PING").ignore();
                }
                let _: () = pings.query(con).unwrap();
            }
        }
    }
}

/// The items of one batched lease (and of its one ack).
const BATCH: usize = 10;

/// One pipelined batch of `n` batched cycles of connection `worker`: `n`
/// leases of [`BATCH`] items, then `n` acks of their pairs (module and
/// native), or `n` XREADGROUPs of COUNT [`BATCH`] then `n` XACKs of their
/// ids (Streams); the backlog must not run dry.
fn batch_cycle_batch(system: System, con: &mut Connection, worker: usize, n: usize) {
    if system == System::Streams {
        let mut reads = redis::pipe();
        for _ in 0..n {
            reads
                .cmd("XREADGROUP")
                .arg("GROUP")
                .arg("g")
                .arg(format!("c{worker}"))
                .arg("COUNT")
                .arg(BATCH)
                .arg("STREAMS")
                .arg("s")
                .arg(">");
        }
        let replies: Vec<redis::streams::StreamReadReply> = reads.query(con).unwrap();
        let mut acks = redis::pipe();
        for reply in replies {
            let ids = &reply.keys.first().expect("backlog ran dry").ids;
            assert_eq!(ids.len(), BATCH, "backlog ran dry");
            let ack = acks.cmd("XACK").arg("s").arg("g");
            for entry in ids {
                ack.arg(&entry.id);
            }
            ack.ignore();
        }
        let _: () = acks.query(con).unwrap();
        return;
    }
    let queue = queue_of(system);
    let mut leases = redis::pipe();
    for _ in 0..n {
        leases
            .cmd("VTRR.LEASE")
            .arg(queue)
            .arg(60_000)
            .arg("COUNT")
            .arg(BATCH);
    }
    let replies: Vec<Vec<Vec<Value>>> = leases.query(con).unwrap();
    let mut acks = redis::pipe();
    for leased in replies {
        assert_eq!(leased.len(), BATCH, "backlog ran dry");
        let ack = acks.cmd("VTRR.ACK").arg(queue);
        for lease in leased {
            let (id, token): (Vec<u8>, Vec<u8>) = (
                redis::from_redis_value(lease[0].clone()).unwrap(),
                redis::from_redis_value(lease[2].clone()).unwrap(),
            );
            ack.arg(id).arg(token);
        }
        ack.ignore();
    }
    let _: () = acks.query(con).unwrap();
}

/// A delay that never falls due during a run: deferred items stay delayed.
const HOUR_MS: u64 = 3_600_000;

/// One pipelined batch of `n` VTRR.DEFER calls (operations `start..start + n`
/// of connection `worker`), each of `shape.items_per_call` items due in
/// `delay_ms`.
fn defer_batch(
    shape: &EnqueueShape,
    delay_ms: u64,
    con: &mut Connection,
    worker: usize,
    start: usize,
    n: usize,
) {
    let mut pipe = redis::pipe();
    for op in start..start + n {
        let mut cmd = redis::cmd("VTRR.DEFER");
        cmd.arg("qm").arg(delay_ms);
        shape.add_items(&mut cmd, worker, op);
        pipe.add_command(cmd).ignore();
    }
    let _: () = pipe.query(con).unwrap();
}

/// One pipelined batch of `n` leases, then one of their `n` plain NACKs: each
/// item goes back to the queue, so the backlog never runs dry.
fn nack_cycle_batch(con: &mut Connection, n: usize) {
    let mut leases = redis::pipe();
    for _ in 0..n {
        leases.cmd("VTRR.LEASE").arg("qm").arg(60_000);
    }
    let leased: Vec<Option<common::Lease>> = leases.query(con).unwrap();
    let mut nacks = redis::pipe();
    for lease in leased {
        let (id, _, token, _) = lease.expect("backlog ran dry");
        nacks.cmd("VTRR.NACK").arg("qm").arg(id).arg(token).ignore();
    }
    let _: () = nacks.query(con).unwrap();
}

/// DEFERs `count` items of `partitions` partitions, due in `delay_ms`, in
/// calls of 100 (setup).
fn fill_delayed(con: &mut Connection, queue: &str, count: usize, partitions: usize, delay_ms: u64) {
    let mut call = redis::cmd("VTRR.DEFER");
    call.arg(queue).arg(delay_ms);
    fill_in_calls_of_100(con, &call, count, partitions, |_| 1);
}

/// Queues `count` items of weight 1 for `system`'s lease+ack cycle (setup).
fn fill_backlog(con: &mut Connection, system: System, count: usize, partitions: usize) {
    match system {
        System::Module | System::Lua => {
            fill_module(con, queue_of(system), count, partitions, |_| 1)
        }
        System::Native => {
            let queue = queue_of(system);
            in_layout(con, "native", |con| {
                fill_module(con, queue, count, partitions, |_| 1)
            });
            assert_layout(con, queue, "native");
        }
        System::Streams => fill_stream(con, count, partitions),
        System::List => fill_list(con, count),
        System::Ping => {}
    }
}

/// The queue each system works on in a scenario (module and Lua side by
/// side, so their rounds can interleave).
fn queue_of(system: System) -> &'static str {
    match system {
        System::Lua => "ql",
        System::Native => "qn",
        _ => "qm",
    }
}

/// Every bench server's `vtrr.default-layout`: `module` is the keys
/// layout whatever `VTRR_LAYOUT` says; `native` queues are made so.
const DEFAULT_LAYOUT: &str = "keys";

/// Runs `f` with `vtrr.default-layout` set to `layout`, so the queues it
/// creates take that layout; then sets it back to `DEFAULT_LAYOUT`.
fn in_layout<T>(con: &mut Connection, layout: &str, f: impl FnOnce(&mut Connection) -> T) -> T {
    set_config(con, "vtrr.default-layout", layout);
    let result = f(con);
    set_config(con, "vtrr.default-layout", DEFAULT_LAYOUT);
    result
}

/// `VTRR.STATS <queue>`'s `layout`.
fn layout_of(con: &mut Connection, queue: &str) -> String {
    let layout = stats(con, queue).remove("layout").expect("STATS layout");
    redis::from_redis_value(layout).unwrap()
}

/// Asserts that queue `queue` is in `layout` (before it is measured).
fn assert_layout(con: &mut Connection, queue: &str, layout: &str) {
    assert_eq!(layout_of(con, queue), layout, "queue {queue}'s layout");
}

/// Creates queue `queue` in the native layout, one item (`seed`, of its
/// own partition) queued so that it stays (setup: the enqueue rows then
/// add to an existing native queue, as the keys layout's add to new keys).
fn create_native(con: &mut Connection, queue: &str) {
    in_layout(con, "native", |con| {
        let _: i64 = redis::cmd("VTRR.ENQUEUE")
            .arg(queue)
            .arg("seed")
            .arg("seed")
            .arg(1)
            .arg(PAYLOAD)
            .query(con)
            .unwrap();
    });
    assert_layout(con, queue, "native");
}

/// Tenant controls: the partitions of the measured queue, the default cap
/// set on every one of them (high enough never to bind), and the
/// partitions paused or capped at 1 (their numbers, `p<n>`).
const TENANT_PARTITIONS: usize = 100;
const TENANT_DEFAULT_CAP: u64 = 1000;
const TENANT_PAUSED: Range<usize> = 0..10;
const TENANT_CAPPED_AT_ONE: Range<usize> = 10..20;

/// A configuration of the tenant controls section.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Controls {
    None,
    /// `VTRR.POLICY ... DEFAULT-CONCURRENCY` before the items are queued:
    /// every partition's items go through `held`, one head in `queue`.
    DefaultCap,
    /// After the fill, some partitions paused and some capped at 1 with
    /// their one lease held: LEASE meets their items in `queue` and moves
    /// them to `held`.
    PausedAndCapped,
}

impl Controls {
    const ALL: [Controls; 3] = [
        Controls::None,
        Controls::DefaultCap,
        Controls::PausedAndCapped,
    ];

    fn name(self) -> String {
        match self {
            Controls::None => "no controls".to_string(),
            Controls::DefaultCap => format!("default cap {TENANT_DEFAULT_CAP} (every partition)"),
            Controls::PausedAndCapped => format!(
                "{} paused, {} capped at 1 with their lease held",
                TENANT_PAUSED.len(),
                TENANT_CAPPED_AT_ONE.len()
            ),
        }
    }
}

/// The partition number of an item the `fill_*` helpers queued (`i<n>` of
/// `p<n % partitions>`).
fn partition_number(id: &str, partitions: usize) -> usize {
    id[1..].parse::<usize>().unwrap() % partitions
}

/// Leases until each partition of `partitions` has one lease, held for an
/// hour; acks every other item it leases (setup).
fn hold_one_lease_each(con: &mut Connection, queue: &str, partitions: Range<usize>) {
    let mut holding = std::collections::BTreeSet::new();
    while holding.len() < partitions.len() {
        let leased: Vec<(String, String, String, i64)> = redis::cmd("VTRR.LEASE")
            .arg(queue)
            .arg(HOUR_MS)
            .arg("COUNT")
            .arg(100)
            .query(con)
            .unwrap();
        assert!(!leased.is_empty(), "backlog ran dry");
        let mut ack = redis::cmd("VTRR.ACK");
        ack.arg(queue);
        let mut acking = false;
        for (id, _, token, _) in leased {
            let p = partition_number(&id, TENANT_PARTITIONS);
            if partitions.contains(&p) && holding.insert(p) {
                continue;
            }
            ack.arg(id).arg(token);
            acking = true;
        }
        if acking {
            let _: i64 = ack.query(con).unwrap();
        }
    }
}

/// `VTRR.PARTITIONS <queue> PARTITION p<n>`'s `leased`.
fn leased_of(con: &mut Connection, queue: &str, n: usize) -> i64 {
    let (_, mut maps): (String, Vec<BTreeMap<String, Value>>) = redis::cmd("VTRR.PARTITIONS")
        .arg(queue)
        .arg("PARTITION")
        .arg(format!("p{n}"))
        .query(con)
        .unwrap();
    maps.pop()
        .and_then(|mut map| map.remove("leased"))
        .map_or(0, |leased| redis::from_redis_value(leased).unwrap())
}

/// One repeat of the tenant controls section under `controls`.
struct ControlledRun {
    run: Run,
    /// `held`'s change over the run, per cycle: -1 when every LEASE
    /// promotes a held item, positive when LEASE parks items it meets.
    held_per_cycle: f64,
    /// Most leases out at the end in a paused partition, and in a
    /// partition capped at 1 (0 and 1 when the controls held).
    paused_leased: i64,
    capped_leased: i64,
}

/// What one system did over its slices: per connection, the operations
/// done and the seconds that connection was busy; and every batch's latency.
#[derive(Default)]
struct Work {
    ops: Vec<usize>,
    seconds: Vec<f64>,
    latencies_us: Vec<f64>,
}

impl Work {
    /// The sum of each connection's own rate, so a slice's tail (connections
    /// finishing their last batch at different times) neither flatters nor
    /// penalizes a system with long batches.
    fn ops_per_sec(&self) -> f64 {
        self.ops
            .iter()
            .zip(&self.seconds)
            .map(|(&ops, &seconds)| ops as f64 / seconds)
            .sum()
    }
}

/// Runs `batch` on every connection in parallel for `duration` (each
/// connection finishes the batch in progress), `pipeline` operations per
/// batch, and adds what was done to `work`. `next_op[worker]` numbers
/// operations across slices, so ids stay unique.
fn timed_slice<F>(
    connections: &mut [Connection],
    pipeline: usize,
    duration: Duration,
    next_op: &mut [usize],
    batch: &F,
    work: &mut Work,
) where
    F: Fn(&mut Connection, usize, usize, usize) + Sync,
{
    let start_line = Barrier::new(connections.len());
    let done: Vec<(usize, f64, Vec<f64>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = connections
            .iter_mut()
            .zip(next_op.iter_mut())
            .enumerate()
            .map(|(worker, (con, op))| {
                let start_line = &start_line;
                scope.spawn(move || {
                    start_line.wait();
                    let started = Instant::now();
                    let deadline = started + duration;
                    let (first, mut latencies) = (*op, Vec::new());
                    while Instant::now() < deadline {
                        let sent = Instant::now();
                        batch(con, worker, *op, pipeline);
                        latencies.push(sent.elapsed().as_secs_f64() * 1e6);
                        *op += pipeline;
                    }
                    (*op - first, started.elapsed().as_secs_f64(), latencies)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    work.ops.resize(connections.len(), 0);
    work.seconds.resize(connections.len(), 0.0);
    for (worker, (ops, seconds, latencies)) in done.into_iter().enumerate() {
        work.ops[worker] += ops;
        work.seconds[worker] += seconds;
        work.latencies_us.extend(latencies);
    }
}

impl System {
    /// Whether `command` (as INFO commandstats names it) is this system's.
    /// The Lua scripts' own calls (zadd, hset, ...) count as Lua's.
    fn owns(self, command: &str) -> bool {
        let streams = command.starts_with('x');
        let list = matches!(command, "lpush" | "rpop");
        match self {
            System::Module | System::Native => command.starts_with("vtrr."),
            System::Streams => streams,
            System::List => list,
            System::Ping => command == "ping",
            System::Lua => !(command.starts_with("vtrr.") || streams || list || command == "ping"),
        }
    }

    /// Items per second this system cannot exceed on the lease+ack cycle
    /// here (2.5 times the fastest seen), to size its backlog for a run.
    fn cycle_rate_bound(self) -> f64 {
        match self {
            System::Module | System::Lua => 150_000.0,
            System::Native => 250_000.0,
            System::Streams => 300_000.0,
            System::List => 2_500_000.0,
            System::Ping => 0.0,
        }
    }
}

/// One repeat of a scenario, interleaved: every system's state is set up
/// first (by the caller), then in each of `rounds` rounds every system runs
/// one slice in turn, so a change in the machine's speed during the repeat
/// (frequent on a shared virtual machine) hits every system alike.
fn interleaved<F>(
    server: &Server,
    sizes: &Sizes,
    admin: &mut Connection,
    systems: &[System],
    pipeline: usize,
    items_per_op: impl Fn(System) -> usize,
    batch: F,
) -> BTreeMap<System, Run>
where
    F: Fn(System, &mut Connection, usize, usize, usize) + Sync,
{
    let mut connections: Vec<Connection> =
        (0..sizes.connections).map(|_| server.connect()).collect();
    let mut next_op = vec![vec![0usize; sizes.connections]; systems.len()];
    let mut totals: Vec<Work> = systems.iter().map(|_| Work::default()).collect();
    // Each system's commands' calls and µs, read after each of its slices
    // (module and native send the same commands).
    let mut costs: Vec<BTreeMap<String, (f64, f64)>> =
        systems.iter().map(|_| BTreeMap::new()).collect();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(admin).unwrap();
    for _ in 0..sizes.rounds {
        for (i, &system) in systems.iter().enumerate() {
            let per_batch = |con: &mut Connection, worker: usize, start: usize, n: usize| {
                batch(system, con, worker, start, n)
            };
            timed_slice(
                &mut connections,
                pipeline,
                sizes.slice,
                &mut next_op[i],
                &per_batch,
                &mut totals[i],
            );
            for (command, (calls, usec)) in command_totals(admin) {
                if system.owns(&command) {
                    let cost = costs[i].entry(command).or_default();
                    cost.0 += calls;
                    cost.1 += usec;
                }
            }
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(admin).unwrap();
        }
    }
    systems
        .iter()
        .zip(totals)
        .zip(costs)
        .map(|((&system, mut total), costs)| {
            total.latencies_us.sort_by(f64::total_cmp);
            let run = Run {
                items_per_sec: total.ops_per_sec() * items_per_op(system) as f64,
                p50_us: percentile(&total.latencies_us, 0.5),
                p99_us: percentile(&total.latencies_us, 0.99),
                usec_per_call: costs
                    .into_iter()
                    .filter(|(_, (calls, _))| *calls > 0.0)
                    .map(|(command, (calls, usec))| (command, usec / calls))
                    .collect(),
            };
            (system, run)
        })
        .collect()
}

/// `batch` on the module alone, in the interleaved runner's slices.
fn module_only<F>(
    server: &Server,
    sizes: &Sizes,
    admin: &mut Connection,
    pipeline: usize,
    items_per_op: usize,
    batch: F,
) -> Run
where
    F: Fn(&mut Connection, usize, usize, usize) + Sync,
{
    let per_batch = |_, con: &mut Connection, worker, start, n| batch(con, worker, start, n);
    let mut runs = interleaved(
        server,
        sizes,
        admin,
        &[System::Module],
        pipeline,
        |_| items_per_op,
        per_batch,
    );
    runs.remove(&System::Module).unwrap()
}

impl Bench<'_> {
    fn enqueue(&mut self, partitions: usize, items_per_call: usize) -> BTreeMap<System, Run> {
        reset(&mut self.admin);
        create_native(&mut self.admin, queue_of(System::Native));
        let lua = &self.lua;
        let shape = EnqueueShape {
            partitions,
            items_per_call,
        };
        let per_batch = |system, con: &mut Connection, worker, start, n| {
            enqueue_batch(lua, system, &shape, con, worker, start, n)
        };
        let pipeline = if items_per_call == 1 {
            self.sizes.pipeline
        } else {
            self.sizes.pipeline_100
        };
        let items_per_op = |system| match system {
            System::Ping => 1,
            _ => items_per_call,
        };
        interleaved(
            self.server,
            self.sizes,
            &mut self.admin,
            &System::ALL,
            pipeline,
            items_per_op,
            per_batch,
        )
    }

    /// Lease + ack with a standing backlog: at least `backlog` items stay
    /// queued to the end of the repeat.
    fn cycle(
        &mut self,
        systems: &[System],
        partitions: usize,
        backlog: usize,
    ) -> BTreeMap<System, Run> {
        reset(&mut self.admin);
        let run_seconds = self.sizes.slice.as_secs_f64() * self.sizes.rounds as f64;
        for &system in systems {
            let needed = backlog + (system.cycle_rate_bound() * run_seconds) as usize;
            fill_backlog(&mut self.admin, system, needed, partitions);
        }
        let lua = &self.lua;
        let per_batch = |system, con: &mut Connection, worker, start, n| {
            cycle_batch(lua, system, con, worker, start, n)
        };
        let pipeline = self.sizes.pipeline;
        interleaved(
            self.server,
            self.sizes,
            &mut self.admin,
            systems,
            pipeline,
            |_| 1,
            per_batch,
        )
    }

    /// Lease + ack in batches of [`BATCH`]: one LEASE of that COUNT and one
    /// ACK of its pairs against one XREADGROUP of that COUNT and one XACK of
    /// its ids (module, native and Streams: the others have no such calls).
    fn batch_cycle(&mut self, partitions: usize) -> BTreeMap<System, Run> {
        reset(&mut self.admin);
        let systems = [System::Module, System::Native, System::Streams];
        let run_seconds = self.sizes.slice.as_secs_f64() * self.sizes.rounds as f64;
        for system in systems {
            // Batches move items faster than single cycles.
            let needed = 1_000 + (2.0 * system.cycle_rate_bound() * run_seconds) as usize;
            fill_backlog(&mut self.admin, system, needed, partitions);
        }
        let pipeline = self.sizes.pipeline / BATCH;
        interleaved(
            self.server,
            self.sizes,
            &mut self.admin,
            &systems,
            pipeline.max(1),
            |_| BATCH,
            |system, con, worker, _, n| batch_cycle_batch(system, con, worker, n),
        )
    }

    /// Reclaim of `reclaim_items` expired leases in one call, `reclaim_calls`
    /// times per system, the systems taking turns.
    fn reclaim(&mut self, partitions: usize) -> BTreeMap<System, Run> {
        let count = self.sizes.reclaim_items;
        let systems = [System::Module, System::Native, System::Lua, System::Streams];
        let mut seconds: BTreeMap<System, Vec<f64>> = BTreeMap::new();
        let mut costs: BTreeMap<System, BTreeMap<String, f64>> = BTreeMap::new();
        for _ in 0..self.sizes.reclaim_calls {
            for system in systems {
                reset(&mut self.admin);
                let con = &mut self.admin;
                let call = match system {
                    System::Module | System::Native | System::Lua => {
                        if system == System::Native {
                            in_layout(con, "native", |con| {
                                fill_expired(con, "q", count, partitions)
                            });
                        } else {
                            fill_expired(con, "q", count, partitions);
                        }
                        assert_layout(
                            con,
                            "q",
                            if system == System::Native {
                                "native"
                            } else {
                                "keys"
                            },
                        );
                        if system.is_module() {
                            let mut c = redis::cmd("VTRR.RECLAIM");
                            c.arg("q");
                            c
                        } else {
                            self.lua.cmd("reclaim", "q")
                        }
                    }
                    _ => {
                        fill_stream(con, count, partitions);
                        let _: Value = redis::cmd("XREADGROUP")
                            .arg("GROUP")
                            .arg("g")
                            .arg("dead")
                            .arg("COUNT")
                            .arg(count)
                            .arg("STREAMS")
                            .arg("s")
                            .arg(">")
                            .query(con)
                            .unwrap();
                        let mut c = redis::cmd("XAUTOCLAIM");
                        c.arg("s")
                            .arg("g")
                            .arg("alive")
                            .arg(0)
                            .arg("0-0")
                            .arg("COUNT")
                            .arg(count);
                        c
                    }
                };
                std::thread::sleep(Duration::from_millis(5));
                let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
                let started = Instant::now();
                let _: Value = call.query(con).unwrap();
                seconds
                    .entry(system)
                    .or_default()
                    .push(started.elapsed().as_secs_f64());
                for (command, cost) in command_stats(con) {
                    if system.owns(&command) {
                        *costs.entry(system).or_default().entry(command).or_default() +=
                            cost / self.sizes.reclaim_calls as f64;
                    }
                }
            }
        }
        systems
            .into_iter()
            .map(|system| {
                // The median call, not the mean: a burst of the machine's
                // speed during one call of a few would move the mean.
                let mut calls = seconds.remove(&system).unwrap_or_default();
                calls.sort_by(f64::total_cmp);
                let median = percentile(&calls, 0.5);
                let run = Run {
                    items_per_sec: count as f64 / median,
                    p50_us: median * 1e6,
                    p99_us: percentile(&calls, 0.99) * 1e6,
                    usec_per_call: costs.remove(&system).unwrap_or_default(),
                };
                (system, run)
            })
            .collect()
    }

    fn throughput_section(&mut self) {
        let sizes = self.sizes;
        writeln!(
            self.report,
            "## Throughput: the same work each way\n\n{} connections, pipeline {} (enqueue 100/call: pipeline {}, so {} items per round trip), payload {} bytes. Each repeat sets up every system's keys, then runs {} rounds in which each system works for {} ms in turn (reclaim: {} calls per system, taking turns), so drifts in the machine's speed hit every system alike. {} repeats: items/s as median (min–max); latency = one pipelined batch round trip (p50/p99, µs; reclaim: the call, and its rate is that of the median call); `server µs/call` from INFO commandstats. `module ÷ this` is the module's rate over this system's within each repeat: median (min–max); `native ÷ this` the same for `native`. `module` is a queue in the keys layout (vtrr-queue's keys, every server started with `default-layout keys`); `native` sends the same commands to a queue of its own in the native layout (the whole queue in one key of the module's type), made with `vtrr.default-layout native` set around its creation (the enqueue rows: around its first item, of a partition of its own), its layout checked in `VTRR.STATS` before it is measured. `lease+ack, batches of 10`: one LEASE COUNT 10 and one ACK of its ten pairs against one XREADGROUP COUNT 10 and one XACK of its ten ids (module, native and Streams only; pipeline {} batches). The issue's targets for `native` (not asserted): enqueue 1/call ≥ 0.8× Streams, enqueue 100/call ≥ 1.0× Streams, lease+ack cycle ≥ 1.0× Streams, batches of 10 ≥ 1.0× Streams.\n",
            sizes.connections,
            sizes.pipeline,
            sizes.pipeline_100,
            sizes.pipeline_100 * 100,
            PAYLOAD.len(),
            sizes.rounds,
            sizes.slice.as_millis(),
            sizes.reclaim_calls,
            sizes.repeats,
            (sizes.pipeline / BATCH).max(1)
        )
        .unwrap();
        let (mut rows, mut steady_rows) = (0, 0);
        let (mut ratio_rows, mut steady_ratio_rows) = (0, 0);
        let mut probes = Vec::new();
        for partitions in [1, 100, 10_000] {
            writeln!(self.report, "### {partitions} partition(s)\n").unwrap();
            writeln!(self.report, "| scenario | system | items/s median (min–max) | p50 µs | p99 µs | server µs/call | module ÷ this | native ÷ this |").unwrap();
            writeln!(self.report, "|---|---|---|---|---|---|---|---|").unwrap();
            type Scenario = (
                &'static str,
                fn(&mut Bench<'_>, usize) -> BTreeMap<System, Run>,
            );
            let scenarios: [Scenario; 5] = [
                ("enqueue 1/call", |b, p| b.enqueue(p, 1)),
                ("enqueue 100/call", |b, p| b.enqueue(p, 100)),
                ("lease+ack cycle", |b, p| b.cycle(&System::ALL, p, 1_000)),
                ("lease+ack, batches of 10", |b, p| b.batch_cycle(p)),
                ("reclaim 10k expired", |b, p| b.reclaim(p)),
            ];
            for (name, scenario) in scenarios {
                let mut results: BTreeMap<System, Repeats> = BTreeMap::new();
                for _ in 0..sizes.repeats {
                    probes.push(machine_speed_probe());
                    for (system, run) in scenario(self, partitions) {
                        results.entry(system).or_default().0.push(run);
                    }
                }
                let module_rates = results[&System::Module].rates();
                let native_rates = results[&System::Native].rates();
                for (system, repeats) in &results {
                    let median = repeats.median();
                    let (rate, min, max) = spread(&repeats.rates());
                    rows += 1;
                    if (rate - min).max(max - rate) <= 0.10 * rate {
                        steady_rows += 1;
                    }
                    let ratio_of = |rates: &[f64]| {
                        let ratios: Vec<f64> = rates
                            .iter()
                            .zip(repeats.rates())
                            .map(|(rate, this)| rate / this)
                            .collect();
                        spread(&ratios)
                    };
                    let (ratio, ratio_min, ratio_max) = ratio_of(&module_rates);
                    let (native, native_min, native_max) = ratio_of(&native_rates);
                    if *system != System::Module {
                        ratio_rows += 1;
                        if (ratio - ratio_min).max(ratio_max - ratio) <= 0.10 * ratio {
                            steady_ratio_rows += 1;
                        }
                    }
                    writeln!(
                        self.report,
                        "| {name} | {} | {rate:.0} ({min:.0}–{max:.0}) | {:.0} | {:.0} | {} | {ratio:.2}× ({ratio_min:.2}–{ratio_max:.2}) | {native:.2}× ({native_min:.2}–{native_max:.2}) |",
                        system.name(),
                        median.p50_us,
                        median.p99_us,
                        median.usec_per_call_text(),
                    )
                    .unwrap();
                }
            }
            writeln!(self.report).unwrap();
        }
        let (probe, probe_min, probe_max) = spread(&probes);
        writeln!(
            self.report,
            "Repeats within ±10% of their median: module ÷ other system in {steady_ratio_rows} of {ratio_rows} rows; items/s in {steady_rows} of {rows} rows (the min–max columns show the spread). The machine itself drifts: a fixed CPU-bound loop on the load generator's core, timed before every repeat, took {probe:.1} ms median ({probe_min:.1}–{probe_max:.1}), {:+.0}% to {:+.0}%.\n",
            (probe_min / probe - 1.0) * 100.0,
            (probe_max / probe - 1.0) * 100.0
        )
        .unwrap();
    }

    /// VTRR.DEFER of `items_per_call` items per call, due in an hour (the
    /// delayed set grows as the queue does under ENQUEUE).
    fn defer(&mut self, partitions: usize, items_per_call: usize) -> Run {
        reset(&mut self.admin);
        let shape = EnqueueShape {
            partitions,
            items_per_call,
        };
        let pipeline = if items_per_call == 1 {
            self.sizes.pipeline
        } else {
            self.sizes.pipeline_100
        };
        module_only(
            self.server,
            self.sizes,
            &mut self.admin,
            pipeline,
            items_per_call,
            |con, worker, start, n| defer_batch(&shape, HOUR_MS, con, worker, start, n),
        )
    }

    /// Lease + plain NACK with a standing backlog of 1,000.
    fn nack_cycle(&mut self, partitions: usize) -> Run {
        reset(&mut self.admin);
        fill_module(&mut self.admin, "qm", 1_000, partitions, |_| 1);
        let pipeline = self.sizes.pipeline;
        module_only(
            self.server,
            self.sizes,
            &mut self.admin,
            pipeline,
            1,
            |con, _, _, n| nack_cycle_batch(con, n),
        )
    }

    /// Promotion of `reclaim_items` due delayed items at once, by one LEASE
    /// (its first step) or by one timer run, `reclaim_calls` times, rated by
    /// the median. `vtrr.reclaim-batch` is raised so one call or run takes
    /// them all.
    fn promotion(&mut self, partitions: usize, by_timer: bool) -> Run {
        let count = self.sizes.reclaim_items;
        let con = &mut self.admin;
        let batch = config_value(con, "vtrr.reclaim-batch");
        set_config(con, "vtrr.reclaim-batch", count);
        let (mut seconds, mut cost) = (Vec::new(), 0.0);
        for _ in 0..self.sizes.reclaim_calls {
            reset(con);
            fill_delayed(con, "q", count, partitions, 1);
            std::thread::sleep(Duration::from_millis(5));
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
            if by_timer {
                // A long interval, so no later tick overwrites the last
                // run's time before it is read.
                let promoted = |con: &mut Connection| vtrr_info(con)["vtrr_timer_items_promoted"];
                let before = promoted(con);
                set_config(con, "vtrr.reclaim-interval-ms", 200);
                let started = Instant::now();
                while promoted(con) - before < count as i64 {
                    assert!(started.elapsed() < Duration::from_secs(60), "timer stalled");
                    std::thread::sleep(Duration::from_millis(1));
                }
                let run_us = vtrr_info(con)["vtrr_timer_last_run_us"] as f64;
                set_config(con, "vtrr.reclaim-interval-ms", 0);
                seconds.push(run_us / 1e6);
                cost += run_us;
            } else {
                let started = Instant::now();
                let _: Value = redis::cmd("VTRR.LEASE")
                    .arg("q")
                    .arg(60_000)
                    .query(con)
                    .unwrap();
                seconds.push(started.elapsed().as_secs_f64());
                cost += command_stats(con).get("vtrr.lease").copied().unwrap_or(0.0);
            }
        }
        set_config(con, "vtrr.reclaim-batch", batch);
        seconds.sort_by(f64::total_cmp);
        let median = percentile(&seconds, 0.5);
        let what = if by_timer { "timer run" } else { "vtrr.lease" };
        Run {
            items_per_sec: count as f64 / median,
            p50_us: median * 1e6,
            p99_us: percentile(&seconds, 0.99) * 1e6,
            usec_per_call: BTreeMap::from([(
                what.to_string(),
                cost / self.sizes.reclaim_calls as f64,
            )]),
        }
    }

    /// The job lifecycle's own commands, which neither the Lua scripts nor
    /// Streams have: DEFER, lease + NACK, and the promotion of due delayed
    /// items; beside the module's ENQUEUE and lease + ACK for scale.
    fn lifecycle_section(&mut self) {
        const PARTITIONS: usize = 100;
        let sizes = self.sizes;
        writeln!(
            self.report,
            "## Job lifecycle: DEFER, NACK, promotion (module, {PARTITIONS} partitions)\n\nMeasured as the throughput rows, the module alone ({} repeats, {} slices of {} ms each; promotion: {} calls per repeat, rated by the median call). DEFER's items are due in an hour, so the delayed set grows as the queue does under ENQUEUE; the NACK cycle leases one item and nacks it back to the queue (no option), over a backlog of 1,000. Promotion: {} delayed items all due at once, moved into the queue by the first step of one LEASE, or by one timer run (its time from `INFO vtrr` `timer_last_run_us`), `vtrr.reclaim-batch` raised to take them all. `server µs per item`: the row's commands' `usec_per_call` from INFO commandstats (the timer run's time for the timer), per item.\n",
            sizes.repeats,
            sizes.rounds,
            sizes.slice.as_millis(),
            sizes.reclaim_calls,
            sizes.reclaim_items,
        )
        .unwrap();
        writeln!(
            self.report,
            "| scenario | items/s median (min–max) | p50 µs | p99 µs | server µs/call | server µs per item |\n|---|---|---|---|---|---|"
        )
        .unwrap();
        let promoted = format!("promotion of {} due items", sizes.reclaim_items);
        // Name, items per call, measurement.
        type Scenario<'s> = (String, usize, &'s dyn Fn(&mut Bench<'_>) -> Run);
        let scenarios: [Scenario<'_>; 7] = [
            ("enqueue 1/call (for scale)".to_string(), 1, &|b| {
                b.module_enqueue(PARTITIONS)
            }),
            ("defer 1/call".to_string(), 1, &|b| b.defer(PARTITIONS, 1)),
            ("defer 100/call".to_string(), 100, &|b| {
                b.defer(PARTITIONS, 100)
            }),
            ("lease+ack cycle (for scale)".to_string(), 1, &|b| {
                b.cycle(&[System::Module], PARTITIONS, 1_000)[&System::Module].clone()
            }),
            ("lease+nack cycle".to_string(), 1, &|b| {
                b.nack_cycle(PARTITIONS)
            }),
            (format!("{promoted}, by LEASE"), sizes.reclaim_items, &|b| {
                b.promotion(PARTITIONS, false)
            }),
            (
                format!("{promoted}, by the timer"),
                sizes.reclaim_items,
                &|b| b.promotion(PARTITIONS, true),
            ),
        ];
        let mut results: Vec<Repeats> = scenarios.iter().map(|_| Repeats::default()).collect();
        // The scenarios take turns within each repeat, as the systems do.
        for _ in 0..sizes.repeats {
            for ((_, _, scenario), repeats) in scenarios.iter().zip(&mut results) {
                repeats.0.push(scenario(self));
            }
        }
        for ((name, items_per_call, _), repeats) in scenarios.iter().zip(&results) {
            let median = repeats.median();
            let (rate, min, max) = spread(&repeats.rates());
            let per_item = median.usec_per_call.values().sum::<f64>() / *items_per_call as f64;
            writeln!(
                self.report,
                "| {name} | {rate:.0} ({min:.0}–{max:.0}) | {:.0} | {:.0} | {} | {per_item:.2} |",
                median.p50_us,
                median.p99_us,
                median.usec_per_call_text(),
            )
            .unwrap();
        }
        writeln!(self.report).unwrap();
    }

    /// VTRR.ENQUEUE of one item per call, the module alone.
    fn module_enqueue(&mut self, partitions: usize) -> Run {
        reset(&mut self.admin);
        let lua = &self.lua;
        let shape = EnqueueShape {
            partitions,
            items_per_call: 1,
        };
        let pipeline = self.sizes.pipeline;
        module_only(
            self.server,
            self.sizes,
            &mut self.admin,
            pipeline,
            1,
            |con, worker, start, n| {
                enqueue_batch(lua, System::Module, &shape, con, worker, start, n)
            },
        )
    }

    /// The lease+ack cycle with a standing backlog of `tenant_backlog` items
    /// over `TENANT_PARTITIONS` partitions, under `controls`.
    fn controlled_cycle(&mut self, controls: Controls) -> ControlledRun {
        const QUEUE: &str = "qm"; // cycle_batch's
        let sizes = self.sizes;
        reset(&mut self.admin);
        let run_seconds = sizes.slice.as_secs_f64() * sizes.rounds as f64;
        let needed =
            sizes.tenant_backlog + (System::Module.cycle_rate_bound() * run_seconds) as usize;
        let con = &mut self.admin;
        if controls == Controls::DefaultCap {
            let _: () = redis::cmd("VTRR.POLICY")
                .arg(QUEUE)
                .arg("DEFAULT-CONCURRENCY")
                .arg(TENANT_DEFAULT_CAP)
                .query(con)
                .unwrap();
        }
        fill_module(con, QUEUE, needed, TENANT_PARTITIONS, |_| 1);
        if controls == Controls::PausedAndCapped {
            for p in TENANT_PAUSED {
                let _: i64 = redis::cmd("VTRR.PAUSE")
                    .arg(QUEUE)
                    .arg(format!("p{p}"))
                    .query(con)
                    .unwrap();
            }
            for p in TENANT_CAPPED_AT_ONE {
                let _: () = redis::cmd("VTRR.LIMIT")
                    .arg(QUEUE)
                    .arg(format!("p{p}"))
                    .arg("CONCURRENCY")
                    .arg(1)
                    .query(con)
                    .unwrap();
            }
            hold_one_lease_each(con, QUEUE, TENANT_CAPPED_AT_ONE);
        }
        let queued_before = stat(con, QUEUE, "queued");
        let held_before = stat(con, QUEUE, "held");
        let lua = &self.lua;
        let run = module_only(
            self.server,
            sizes,
            &mut self.admin,
            sizes.pipeline,
            1,
            |con, worker, start, n| cycle_batch(lua, System::Module, con, worker, start, n),
        );
        let con = &mut self.admin;
        let cycles = queued_before - stat(con, QUEUE, "queued");
        let held_change = stat(con, QUEUE, "held") - held_before;
        let most_leased = |con: &mut Connection, partitions: Range<usize>| {
            partitions
                .map(|p| leased_of(con, QUEUE, p))
                .max()
                .unwrap_or(0)
        };
        ControlledRun {
            run,
            held_per_cycle: held_change as f64 / cycles.max(1) as f64,
            paused_leased: most_leased(con, TENANT_PAUSED),
            capped_leased: most_leased(con, TENANT_CAPPED_AT_ONE),
        }
    }

    /// What the tenant controls cost the lease+ack cycle: none, a default
    /// cap on every partition (the held/head path), and paused and capped
    /// partitions whose queued items LEASE has to move out of its way.
    fn tenant_controls_section(&mut self) {
        let sizes = self.sizes;
        writeln!(
            self.report,
            "## Tenant controls: the lease+ack cycle under caps and pauses (module, {TENANT_PARTITIONS} partitions)\n\nMeasured as the lifecycle rows ({} repeats, {} slices of {} ms each, the configurations taking turns within each repeat), each on a standing backlog of {} items of weight 1 over {TENANT_PARTITIONS} partitions (with enough on top for the run). `no controls`: no settings, as in the throughput rows. `default cap {TENANT_DEFAULT_CAP}`: `VTRR.POLICY <queue> DEFAULT-CONCURRENCY {TENANT_DEFAULT_CAP}` before the items are queued, so every partition is under control and keeps one item, its head, in `queue` and the rest in `held`: each LEASE pops a head and promotes that partition's next held item, each ACK settles the partition; the cap never binds (at most {} leases are out). `{}`: after the fill, `VTRR.PAUSE` of {} partitions and `VTRR.LIMIT <queue> <partition> CONCURRENCY 1` of {} others, each of which then holds one lease (an hour long); their items, queued before the controls, are still in `queue`, so LEASE moves each one it meets to `held` (the `held` change column), and a fifth of the backlog cannot be served. `server µs per cycle`: LEASE's and ACK's `usec_per_call` from INFO commandstats, summed; `÷ no controls`: that over the no-controls configuration's in the same repeat, median (min–max).\n",
            sizes.repeats,
            sizes.rounds,
            sizes.slice.as_millis(),
            sizes.tenant_backlog,
            sizes.connections * sizes.pipeline,
            Controls::PausedAndCapped.name(),
            TENANT_PAUSED.len(),
            TENANT_CAPPED_AT_ONE.len(),
        )
        .unwrap();
        writeln!(
            self.report,
            "| configuration | cycles/s median (min–max) | p50 µs | p99 µs | server µs/call | server µs per cycle | ÷ no controls | `held` change per cycle |\n|---|---|---|---|---|---|---|---|"
        )
        .unwrap();
        let mut results: Vec<Vec<ControlledRun>> =
            Controls::ALL.iter().map(|_| Vec::new()).collect();
        for _ in 0..sizes.repeats {
            for (controls, runs) in Controls::ALL.into_iter().zip(&mut results) {
                runs.push(self.controlled_cycle(controls));
            }
        }
        let per_cycle = |run: &Run| run.usec_per_call.values().sum::<f64>();
        let baseline: Vec<f64> = results[0].iter().map(|r| per_cycle(&r.run)).collect();
        for (controls, runs) in Controls::ALL.into_iter().zip(&results) {
            let repeats = Repeats(runs.iter().map(|r| r.run.clone()).collect());
            let median = repeats.median();
            let (rate, min, max) = spread(&repeats.rates());
            let ratios: Vec<f64> = runs
                .iter()
                .zip(&baseline)
                .map(|(r, base)| per_cycle(&r.run) / base)
                .collect();
            let (ratio, ratio_min, ratio_max) = spread(&ratios);
            let (held, _, _) = spread(&runs.iter().map(|r| r.held_per_cycle).collect::<Vec<_>>());
            writeln!(
                self.report,
                "| {} | {rate:.0} ({min:.0}–{max:.0}) | {:.0} | {:.0} | {} | {:.2} | {ratio:.2}× ({ratio_min:.2}–{ratio_max:.2}) | {held:+.2} |",
                controls.name(),
                median.p50_us,
                median.p99_us,
                median.usec_per_call_text(),
                per_cycle(&median),
            )
            .unwrap();
        }
        let controlled = &results[2];
        writeln!(
            self.report,
            "\nAt the end of every run, the most leases out in a paused partition: {}; in a partition capped at 1: {} (the hour-long lease).\n",
            controlled.iter().map(|r| r.paused_leased).max().unwrap_or(0),
            controlled.iter().map(|r| r.capped_leased).max().unwrap_or(0),
        )
        .unwrap();
    }

    fn scaling_section(&mut self) {
        writeln!(
            self.report,
            "## Scaling: lease+ack cycle by queue size (module and native, 100 partitions)\n\nEach size: the keys-layout queue (`module`) and a native one (`native`), each with at least that many items queued to the end, their slices taking turns as in the throughput rows (one repeat).\n"
        )
        .unwrap();
        writeln!(
            self.report,
            "| queued | system | cycles/s | server µs/call LEASE | server µs/call ACK |\n|---|---|---|---|---|"
        )
        .unwrap();
        let systems = [System::Module, System::Native];
        let mut costs: BTreeMap<System, Vec<f64>> = BTreeMap::new();
        for queued in self.sizes.scaling {
            let runs = self.cycle(&systems, 100, queued);
            for (system, run) in &runs {
                let lease = run.usec_per_call.get("vtrr.lease").copied().unwrap_or(0.0);
                let ack = run.usec_per_call.get("vtrr.ack").copied().unwrap_or(0.0);
                costs.entry(*system).or_default().push(lease + ack);
                writeln!(
                    self.report,
                    "| {queued} | {} | {:.0} | {lease:.2} | {ack:.2} |",
                    system.name(),
                    run.items_per_sec
                )
                .unwrap();
            }
        }
        writeln!(self.report).unwrap();
        for system in systems {
            let costs = &costs[&system];
            writeln!(
                self.report,
                "{}: server cost per cycle at the largest size ÷ at the smallest: **{:.2}×**{}.",
                system.name(),
                costs[2] / costs[0],
                if system == System::Native {
                    " (target ≤ 1.2×, not asserted)"
                } else {
                    ""
                }
            )
            .unwrap();
        }
        writeln!(
            self.report,
            "\n### Memory, conversion and deletion by queue size (100 partitions)\n\nFresh fills of each size, nothing leased: `MEMORY USAGE <key> SAMPLES 0` summed over the queue's keys, per item queued (`module`: the keys layout's sorted sets, hashes and strings; `native`: its one key; Streams: a stream of as many entries, fields `partition` and `payload`, with a consumer group, nothing pending). Then `VTRR.CONVERT <queue> NATIVE` of the keys-layout queue, the whole backlog at once, and `UNLINK` of the native queue (freed in the background when large: this is the main thread's share); client round trip, and in brackets the server's `usec_per_call` (INFO commandstats). Timings shown, never asserted.\n\n| queued | module bytes/item | native bytes/item | Streams bytes/entry | native ÷ Streams | VTRR.CONVERT keys→native ms (server µs) | UNLINK native ms (server µs) |\n|---|---|---|---|---|---|---|"
        )
        .unwrap();
        for queued in self.sizes.scaling {
            self.memory_row(queued);
        }
        writeln!(
            self.report,
            "\nTarget (issue, not asserted): native bytes per queued item ≤ 1.5× a stream entry's.\n"
        )
        .unwrap();
    }

    /// One row of the memory table: `queued` items in each layout and in a
    /// stream; then the keys-layout queue converted and the native one
    /// unlinked, timed.
    fn memory_row(&mut self, queued: usize) {
        let con = &mut self.admin;
        reset(con);
        fill_backlog(con, System::Module, queued, 100);
        fill_backlog(con, System::Native, queued, 100);
        fill_stream(con, queued, 100);
        assert_layout(con, queue_of(System::Module), "keys");
        let per_item = |con: &mut Connection, keys: &[String]| -> f64 {
            let bytes: i64 = keys
                .iter()
                .map(|key| -> i64 {
                    redis::cmd("MEMORY")
                        .arg("USAGE")
                        .arg(key)
                        .arg("SAMPLES")
                        .arg(0)
                        .query::<Option<i64>>(con)
                        .unwrap()
                        .unwrap_or(0)
                })
                .sum();
            bytes as f64 / queued as f64
        };
        let module_keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("vtrr:{}:*", queue_of(System::Module)))
            .query(con)
            .unwrap();
        let module = per_item(con, &module_keys);
        let native_key = format!("vtrr:{}:queue", queue_of(System::Native));
        let native = per_item(con, std::slice::from_ref(&native_key));
        let stream = per_item(con, &["s".to_string()]);
        let timed = |con: &mut Connection, cmd: &redis::Cmd, stat: &str| -> String {
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
            let started = Instant::now();
            let _: Value = cmd.query(con).unwrap();
            let ms = started.elapsed().as_secs_f64() * 1e3;
            let usec = command_stats(con).get(stat).copied().unwrap_or(0.0);
            format!("{ms:.2} ({usec:.0})")
        };
        let mut convert = redis::cmd("VTRR.CONVERT");
        convert.arg(queue_of(System::Module)).arg("NATIVE");
        let converted = timed(con, &convert, "vtrr.convert");
        assert_layout(con, queue_of(System::Module), "native");
        let mut unlink = redis::cmd("UNLINK");
        unlink.arg(&native_key);
        let unlinked = timed(con, &unlink, "unlink");
        writeln!(
            self.report,
            "| {queued} | {module:.0} | {native:.0} | {stream:.0} | {:.2}× | {converted} | {unlinked} |",
            native / stream
        )
        .unwrap();
    }

    /// Served order of every item: VTRR (module) or FIFO (list).
    fn served_order(&mut self, vtrr: bool) -> Vec<String> {
        let con = &mut self.admin;
        let mut order = Vec::new();
        loop {
            if vtrr {
                let leased: Vec<(String, String, String, i64)> = redis::cmd("VTRR.LEASE")
                    .arg("f")
                    .arg(60_000)
                    .arg("COUNT")
                    .arg(100)
                    .query(con)
                    .unwrap();
                if leased.is_empty() {
                    return order;
                }
                let mut ack = redis::cmd("VTRR.ACK");
                ack.arg("f");
                for (id, _, token, _) in leased {
                    ack.arg(&id).arg(token);
                    order.push(id);
                }
                let _: i64 = ack.query(con).unwrap();
            } else {
                let popped: Option<Vec<String>> =
                    redis::cmd("RPOP").arg("fifo").arg(100).query(con).unwrap();
                match popped {
                    Some(items) if !items.is_empty() => order.extend(items),
                    _ => return order,
                }
            }
        }
    }

    fn fairness_section(&mut self) {
        let sizes = self.sizes;
        writeln!(
            self.report,
            "## Fairness\n\nA heavy partition enqueues {} items; then {} light partitions enqueue {} items each; workers lease and ack until empty. Items served before each light partition's first and last item:\n",
            sizes.heavy, sizes.light_partitions, sizes.light_items
        )
        .unwrap();
        writeln!(self.report, "| queue | first item p50 | p99 | max | last item p50 | p99 | max |\n|---|---|---|---|---|---|---|").unwrap();
        let mut panels = Vec::new();
        for vtrr in [true, false] {
            reset(&mut self.admin);
            let con = &mut self.admin;
            let light_id = |p: usize, n: usize| format!("light{p}-{n}");
            if vtrr {
                fill_module(con, "f", sizes.heavy, 1, |_| 1); // ids i0.., partition p0
                for p in 0..sizes.light_partitions {
                    let mut cmd = redis::cmd("VTRR.ENQUEUE");
                    cmd.arg("f");
                    for n in 0..sizes.light_items {
                        cmd.arg(format!("light{p}"))
                            .arg(light_id(p, n))
                            .arg(1)
                            .arg(PAYLOAD);
                    }
                    let _: i64 = cmd.query(con).unwrap();
                }
            } else {
                for start in (0..sizes.heavy).step_by(1000) {
                    let ids: Vec<String> = (start..(start + 1000).min(sizes.heavy))
                        .map(|n| format!("i{n}"))
                        .collect();
                    let _: i64 = redis::cmd("LPUSH").arg("fifo").arg(ids).query(con).unwrap();
                }
                for p in 0..sizes.light_partitions {
                    let ids: Vec<String> = (0..sizes.light_items).map(|n| light_id(p, n)).collect();
                    let _: i64 = redis::cmd("LPUSH").arg("fifo").arg(ids).query(con).unwrap();
                }
            }
            let order = self.served_order(vtrr);
            panels.push(service_panel(vtrr, &order, sizes.light_partitions));
            let position: BTreeMap<&str, usize> = order
                .iter()
                .enumerate()
                .map(|(i, id)| (id.as_str(), i))
                .collect();
            let mut firsts: Vec<f64> = (0..sizes.light_partitions)
                .map(|p| position[light_id(p, 0).as_str()] as f64)
                .collect();
            let mut lasts: Vec<f64> = (0..sizes.light_partitions)
                .map(|p| position[light_id(p, sizes.light_items - 1).as_str()] as f64)
                .collect();
            firsts.sort_by(f64::total_cmp);
            lasts.sort_by(f64::total_cmp);
            writeln!(
                self.report,
                "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
                if vtrr { "VTRR (module)" } else { "FIFO list" },
                percentile(&firsts, 0.5),
                percentile(&firsts, 0.99),
                percentile(&firsts, 1.0),
                percentile(&lasts, 0.5),
                percentile(&lasts, 0.99),
                percentile(&lasts, 1.0)
            )
            .unwrap();
        }

        // The picture is written once the shares run below has drawn its panel.
        if let Some(path) = &self.plot {
            writeln!(
                self.report,
                "\n![When each partition was served, VTRR against FIFO; below, weight served by share]({path})"
            )
            .unwrap();
        }

        // Shares while three partitions, with items of weight 1, 2 and 4, are all backlogged.
        reset(&mut self.admin);
        let weights = [1u64, 2, 4];
        fill_module(&mut self.admin, "f", sizes.weighted_items * 3, 3, |p| {
            weights[p]
        });
        let order = self.served_order(true);
        let partition_of = |id: &str| id[1..].parse::<usize>().unwrap() % 3;
        let mut served = [0usize; 3];
        for id in &order {
            let p = partition_of(id);
            served[p] += 1;
            if served[p] == sizes.weighted_items {
                break; // one partition ran out: the backlogged window ends
            }
        }
        let cost: Vec<u64> = (0..3).map(|p| served[p] as u64 * weights[p]).collect();
        let total: u64 = cost.iter().sum();
        writeln!(
            self.report,
            "\nWhile partitions with items of weight 1, 2 and 4 are all backlogged ({} items each), each gets an equal share of service measured in weight (a weight-N item costs N turns):\n\n| item weight | items served | weight served | share | ideal | deviation |\n|---|---|---|---|---|---|",
            sizes.weighted_items
        )
        .unwrap();
        let mut worst: f64 = 0.0;
        for p in 0..3 {
            let share = cost[p] as f64 / total as f64;
            worst = worst.max((share - 1.0 / 3.0).abs());
            writeln!(
                self.report,
                "| {} | {} | {} | {:.4} | 0.3333 | {:+.4} |",
                weights[p],
                served[p],
                cost[p],
                share,
                share - 1.0 / 3.0
            )
            .unwrap();
        }
        writeln!(
            self.report,
            "\nWorst deviation from the ideal share: {worst:.4}.\n"
        )
        .unwrap();

        writeln!(self.report, "A weight-N partition against a weight-1 partition, both backlogged: weight-1 items served per weight-N item.\n\n| N | weight-1 items per weight-N item |\n|---|---|").unwrap();
        for n in [1u64, 2, 4, 8] {
            reset(&mut self.admin);
            fill_module(&mut self.admin, "f", sizes.weighted_items * 2, 2, |p| {
                if p == 0 {
                    1
                } else {
                    n
                }
            });
            let order = self.served_order(true);
            let mut served = [0usize; 2];
            for id in &order {
                let p = id[1..].parse::<usize>().unwrap() % 2;
                served[p] += 1;
                if served[p] == sizes.weighted_items {
                    break;
                }
            }
            writeln!(
                self.report,
                "| {n} | {:.2} |",
                served[0] as f64 / served[1].max(1) as f64
            )
            .unwrap();
        }
        writeln!(self.report).unwrap();

        let shares = self.shares_run();
        if let Some(path) = &self.plot {
            let caption = format!(
                "Service order: {} light partitions ({} items each) queued after a heavy one ({} items)",
                sizes.light_partitions, sizes.light_items, sizes.heavy
            );
            std::fs::write(
                path,
                plot::service_order_svg(&caption, &panels, Some(&shares)),
            )
            .unwrap();
        }
    }

    /// Partitions of shares 1, 2 and 3 (`VTRR.LIMIT ... SHARE`, set before
    /// their items are queued), `weighted_items` items of weight 1 each, all
    /// backlogged: the weight each is served, as a table, and as the
    /// picture's panel (weight served so far after each item served).
    fn shares_run(&mut self) -> plot::SharesPanel<'static> {
        let sizes = self.sizes;
        let shares = [1u64, 2, 3];
        reset(&mut self.admin);
        for (p, share) in shares.iter().enumerate() {
            let _: () = redis::cmd("VTRR.LIMIT")
                .arg("f")
                .arg(format!("p{p}"))
                .arg("SHARE")
                .arg(share)
                .query(&mut self.admin)
                .unwrap();
        }
        fill_module(&mut self.admin, "f", sizes.weighted_items * 3, 3, |_| 1);
        let order = self.served_order(true);
        let mut served = [0u64; 3];
        let mut cumulative: Vec<Vec<u64>> = vec![Vec::new(); 3];
        for id in &order {
            let p = partition_number(id, 3);
            served[p] += 1;
            for (q, line) in cumulative.iter_mut().enumerate() {
                line.push(served[q]); // weight 1 each: weight served = items served
            }
            if served[p] == sizes.weighted_items as u64 {
                break; // one partition ran out: the backlogged window ends
            }
        }
        let total: u64 = served.iter().sum();
        let total_share: u64 = shares.iter().sum();
        writeln!(
            self.report,
            "Partitions with shares 1, 2 and 3 (`VTRR.LIMIT <queue> <partition> SHARE <s>`, set before their items are queued), {} items of weight 1 each, all backlogged until the first runs out: each is served weight in proportion to its share (the picture's lower panel shows the weight served so far; its lines have slopes 1 : 2 : 3).\n\n| share | items served | weight served | fraction | ideal | deviation |\n|---|---|---|---|---|---|",
            sizes.weighted_items
        )
        .unwrap();
        let mut worst: f64 = 0.0;
        for (p, share) in shares.iter().enumerate() {
            let fraction = served[p] as f64 / total as f64;
            let ideal = *share as f64 / total_share as f64;
            worst = worst.max((fraction - ideal).abs());
            writeln!(
                self.report,
                "| {share} | {} | {} | {fraction:.4} | {ideal:.4} | {:+.4} |",
                served[p],
                served[p],
                fraction - ideal
            )
            .unwrap();
        }
        // The largest lag behind the ideal at any point of the window, in
        // items (how bursty the interleaving is, not only its end result).
        let mut lag: f64 = 0.0;
        for (p, share) in shares.iter().enumerate() {
            for (position, weight) in cumulative[p].iter().enumerate() {
                let ideal = (position + 1) as f64 * *share as f64 / total_share as f64;
                lag = lag.max((*weight as f64 - ideal).abs());
            }
        }
        writeln!(
            self.report,
            "\nWorst deviation from the ideal fraction: {worst:.4}; at any point of the window, no partition was more than {lag:.2} items of weight from its share of the items served so far.\n"
        )
        .unwrap();
        plot::SharesPanel {
            title: "Shares 1, 2, 3 (VTRR.LIMIT ... SHARE), all backlogged",
            series: shares.into_iter().zip(cumulative).collect(),
        }
    }

    fn timer_section(&mut self) {
        let sizes = self.sizes;
        writeln!(self.report, "## Timer\n").unwrap();
        reset(&mut self.admin);
        let con = &mut self.admin;
        let info =
            |con: &mut Connection, field: &str| -> i64 { vtrr_info(con)[&format!("vtrr_{field}")] };
        let idle_tick = |con: &mut Connection| -> f64 {
            set_config(con, "vtrr.reclaim-interval-ms", 10);
            fill_module(con, "t", 1, 1, |_| 1);
            let _: Value = redis::cmd("VTRR.LEASE")
                .arg("t")
                .arg(3_600_000)
                .query(con)
                .unwrap();
            std::thread::sleep(Duration::from_millis(100));
            let samples: Vec<i64> = (0..20)
                .map(|_| {
                    std::thread::sleep(Duration::from_millis(15));
                    info(con, "timer_last_run_us")
                })
                .collect();
            samples.iter().sum::<i64>() as f64 / samples.len() as f64
        };
        let empty = idle_tick(con);
        let _: () = redis::cmd("DEBUG")
            .arg("POPULATE")
            .arg(sizes.unrelated_keys)
            .query(con)
            .unwrap();
        let populated = idle_tick(con);
        writeln!(self.report, "| keyspace | idle tick (mean of 20, µs) |\n|---|---|\n| one queue only | {empty:.1} |\n| plus {} unrelated keys | {populated:.1} |\n", sizes.unrelated_keys).unwrap();
        writeln!(
            self.report,
            "A flood of expired leases: see Mass expiry, where each scenario has a fresh server, so the timer's longest run covers only it.\n"
        )
        .unwrap();
    }

    /// The timer draining a mass expiry, each scenario on a fresh server;
    /// then the worst single LEASE with the timer off.
    fn mass_expiry_section(&mut self) {
        let sizes = self.sizes;
        reset(&mut self.admin); // the shared server idles meanwhile
        let server = expiry_server();
        let mut con = server.connect();
        writeln!(
            self.report,
            "## Mass expiry\n\nLeases expiring together, the timer draining them with no client traffic but observers. Each scenario on a fresh server, so `vtrr_timer_longest_run_us` covers only it (and one run on the empty server, which does the keyspace walk a freshly loaded module owes); default configs (`vtrr.timer-budget-us` {}, `vtrr.reclaim-batch` {}) but the timer: off (`vtrr.reclaim-interval-ms` 0) while the leases are made (1 ms each) and expire, then `CONFIG SET vtrr.reclaim-interval-ms {DRAIN_INTERVAL_MS}` (the default) starts the drain, so the first run comes one interval later. Observers: a PING client on its own connection and thread, one PING at a time (round trips of those sent from the last look before the first reclaim until all are back); and a poller on another connection, one look every {} ms (A: `VTRR.STATS` inflight; B: INFO `vtrr_items_reclaimed`). The idle baseline: the same PING client at A's server once it is idle again, for as long as A's drain took: the machine's own hiccups, which bound the PING max as much as the server does. Longest command: the slowest SLOWLOG entry (every command over {SLOWLOG_THRESHOLD_US} µs logged, the log reset as the timer starts), the bench's own CONFIG and SLOWLOG aside (commands the module runs through `RM_Call` are logged too); timer runs are not commands, so they show in the timer column and in the PING round trips. `all back after`: from switching the timer on (every lease expired already) to the first look that found none out; `reclaimed/s`: the leases over the time from the last look before the first reclaim to then.\n",
            config_value(&mut con, "vtrr.timer-budget-us"),
            config_value(&mut con, "vtrr.reclaim-batch"),
            DRAIN_POLL.as_millis(),
        )
        .unwrap();
        writeln!(
            self.report,
            "| scenario | longest timer run µs | timer runs | longest command µs | PINGs | PING p99 µs | p99.9 µs | max µs | first reclaim after s | all back after s | reclaimed/s |\n|---|---|---|---|---|---|---|---|---|---|---|"
        )
        .unwrap();

        fill_expired(&mut con, "a", sizes.mass_leases, 100);
        let inflight = |con: &mut Connection| -> usize {
            redis::from_redis_value(stats(con, "a").remove("inflight").unwrap()).unwrap()
        };
        let drained = drain(&server, sizes.mass_leases, inflight);
        self.drain_row(
            &format!("A: one queue, {} leases", sizes.mass_leases),
            sizes.mass_leases,
            &drained,
        );
        // The machine's own hiccups, for comparison: PINGs at the same server,
        // idle after its drain, for as long as the drain took.
        let drain_time = Duration::from_secs_f64(drained.all_back_s - drained.first_reclaim_s);
        let ((), idle) = pinging(&server, || {
            let from = Instant::now();
            std::thread::sleep(drain_time);
            ((), from..Instant::now())
        });
        writeln!(
            self.report,
            "| idle baseline: A's server after its drain, {:.2} s | | | | {} | | | |",
            drain_time.as_secs_f64(),
            ping_cells(&idle)
        )
        .unwrap();
        drop((con, server));

        let server = expiry_server();
        let mut con = server.connect();
        fill_expired_one_per_queue(&mut con, sizes.mass_queues);
        let reclaimed = |con: &mut Connection| vtrr_info(con)["vtrr_items_reclaimed"] as usize;
        let before = reclaimed(&mut con);
        let drained = drain(&server, sizes.mass_queues, |con| {
            sizes.mass_queues - (reclaimed(con) - before)
        });
        self.drain_row(
            &format!("B: one lease per queue, {} queues", sizes.mass_queues),
            sizes.mass_queues,
            &drained,
        );
        writeln!(
            self.report,
            "| target (issue, not asserted) | ≤ 2000 | | ≤ 1000 | | | | ≤ 5000 | | ≤ 5 (100000 leases) | |\n"
        )
        .unwrap();
        drop((con, server));

        let server = expiry_server();
        let mut con = server.connect();
        fill_expired(&mut con, "l", sizes.inline_expired, 100);
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut con)
            .unwrap();
        let before = reclaimed(&mut con);
        lease(&mut con, "l", 60_000).expect("a lease");
        let usec = command_stats(&mut con)["vtrr.lease"];
        writeln!(
            self.report,
            "One `VTRR.LEASE` on a queue with {} expired leases, the timer off: {usec:.0} µs of server time (INFO commandstats; target ≤ 1000). It reclaimed {} of them (`vtrr.reclaim-batch` {}) and leased one; the rest wait for the next calls or the timer.\n",
            sizes.inline_expired,
            reclaimed(&mut con) - before,
            config_value(&mut con, "vtrr.reclaim-batch"),
        )
        .unwrap();
    }

    /// A row of the mass expiry table: scenario `name`, `count` leases.
    fn drain_row(&mut self, name: &str, count: usize, drained: &Drain) {
        let slowest = match &drained.slowest_command {
            Some((command, us)) => format!("{us} ({command})"),
            None => format!("< {SLOWLOG_THRESHOLD_US} (none logged)"),
        };
        writeln!(
            self.report,
            "| {name} | {} | {} | {slowest} | {} | {:.2} | {:.2} | {:.0} |",
            drained.longest_run_us,
            drained.timer_runs,
            ping_cells(&drained.ping_us),
            drained.first_reclaim_s,
            drained.all_back_s,
            count as f64 / (drained.all_back_s - drained.first_reclaim_s),
        )
        .unwrap();
    }
}

/// Commands slower than this (µs) are logged during a mass expiry.
const SLOWLOG_THRESHOLD_US: &str = "100";
/// How often a mass expiry's progress is read, one command per look.
const DRAIN_POLL: Duration = Duration::from_millis(10);
/// `vtrr.reclaim-interval-ms` during a mass expiry (the default).
const DRAIN_INTERVAL_MS: u64 = 1000;

/// A server for one mass expiry: every command slower than
/// `SLOWLOG_THRESHOLD_US` kept in the SLOWLOG, and the timer off once it has
/// run once, so the walk of the keyspace it owes a freshly loaded module
/// (`src/timer/rebuild.rs`) is done on the empty server, not in the drain.
fn expiry_server() -> Server {
    let server = Server::builder()
        .module_args(&["reclaim-interval-ms", "1", "default-layout", DEFAULT_LAYOUT])
        .args(&[
            "--slowlog-log-slower-than",
            SLOWLOG_THRESHOLD_US,
            "--slowlog-max-len",
            "100000",
        ])
        .spawn();
    let mut con = server.connect();
    while vtrr_info(&mut con)["vtrr_timer_runs"] == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    set_config(&mut con, "vtrr.reclaim-interval-ms", 0);
    server
}

/// Queues `q0`, `q1`, ... (`queues` of them) with one item each, leased for
/// 1 ms, 1,000 queues per round trip; then lets the leases expire (setup).
fn fill_expired_one_per_queue(con: &mut Connection, queues: usize) {
    for start in (0..queues).step_by(1000) {
        let mut pipe = redis::pipe();
        for n in start..(start + 1000).min(queues) {
            let queue = format!("q{n}");
            pipe.cmd("VTRR.ENQUEUE")
                .arg(&queue)
                .arg("p0")
                .arg("i0")
                .arg(1)
                .arg(PAYLOAD)
                .ignore();
            pipe.cmd("VTRR.LEASE").arg(&queue).arg(1).ignore();
        }
        let _: () = pipe.query(con).unwrap();
    }
    std::thread::sleep(Duration::from_millis(5));
}

/// Runs `work` while a PING client, on its own connection and thread, sends
/// one PING at a time: what `work` returned, and the round trips (µs, sorted)
/// of the PINGs sent within the window `work` returned.
fn pinging<T>(server: &Server, work: impl FnOnce() -> (T, Range<Instant>)) -> (T, Vec<f64>) {
    let mut con = server.connect();
    let stop = AtomicBool::new(false);
    let ((result, window), samples) = std::thread::scope(|scope| {
        let pings = scope.spawn(|| {
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let _: String = redis::cmd("PING").query(&mut con).unwrap();
                samples.push((sent, sent.elapsed().as_secs_f64() * 1e6));
            }
            samples
        });
        let result = work();
        stop.store(true, Ordering::Relaxed);
        (result, pings.join().unwrap())
    });
    let mut round_trips: Vec<f64> = samples
        .into_iter()
        .filter(|(sent, _)| window.contains(sent))
        .map(|(_, round_trip)| round_trip)
        .collect();
    round_trips.sort_by(f64::total_cmp);
    (result, round_trips)
}

/// The PING columns of the mass expiry table: PINGs, p99, p99.9, max (µs).
fn ping_cells(round_trips: &[f64]) -> String {
    format!(
        "{} | {:.0} | {:.0} | {:.0}",
        round_trips.len(),
        percentile(round_trips, 0.99),
        percentile(round_trips, 0.999),
        percentile(round_trips, 1.0)
    )
}

/// One mass expiry, seen from outside the server.
struct Drain {
    /// `vtrr_timer_longest_run_us` (the server's timer ran for nothing else).
    longest_run_us: i64,
    /// Timer runs from switching the timer on until every lease was back.
    timer_runs: i64,
    /// The slowest command in the SLOWLOG (name, µs), the bench's own CONFIG
    /// and SLOWLOG aside; None when no command took `SLOWLOG_THRESHOLD_US`.
    slowest_command: Option<(String, i64)>,
    /// Round trips of the PINGs sent while draining, sorted.
    ping_us: Vec<f64>,
    /// Seconds from switching the timer on to the last look before its first
    /// reclaim, and to the first look that found every lease back.
    first_reclaim_s: f64,
    all_back_s: f64,
}

/// Switches the timer of `server` on (`count` leases expired, the timer off
/// until now) and waits until `out` reads that none is still out, looking
/// every `DRAIN_POLL`; meanwhile a PING client on its own connection and
/// thread measures round trips.
fn drain(server: &Server, count: usize, out: impl Fn(&mut Connection) -> usize) -> Drain {
    let mut con = server.connect();
    let runs_before = vtrr_info(&mut con)["vtrr_timer_runs"];
    let ((started, untouched, done), ping_us) = pinging(server, || {
        let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut con).unwrap();
        set_config(&mut con, "vtrr.reclaim-interval-ms", DRAIN_INTERVAL_MS);
        let started = Instant::now();
        // The last look that found every lease still out: the first reclaim
        // came after it.
        let mut untouched = started;
        loop {
            std::thread::sleep(DRAIN_POLL);
            let looked = Instant::now();
            let left = out(&mut con);
            if left == 0 {
                break;
            }
            if left == count {
                untouched = looked;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "timer stalled, {left} leases out"
            );
        }
        let done = Instant::now();
        ((started, untouched, done), untouched..done)
    });
    let info = vtrr_info(&mut con);
    // id, time, µs, arguments, client address, client name
    type Entry = (i64, i64, i64, Vec<Vec<u8>>, String, String);
    let slowlog: Vec<Entry> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(&mut con)
        .unwrap();
    let slowest_command = slowlog
        .into_iter()
        .map(|(_, _, us, args, _, _)| (String::from_utf8_lossy(&args[0]).to_lowercase(), us))
        .filter(|(name, _)| name != "config" && name != "slowlog")
        .max_by_key(|(_, us)| *us);
    Drain {
        longest_run_us: info["vtrr_timer_longest_run_us"],
        timer_runs: info["vtrr_timer_runs"] - runs_before,
        slowest_command,
        ping_us,
        first_reclaim_s: (untouched - started).as_secs_f64(),
        all_back_s: (done - started).as_secs_f64(),
    }
}

/// Where the heavy partition (ids `i<n>`) and each light one (`light<p>-<n>`)
/// were served in `order`.
fn service_panel(vtrr: bool, order: &[String], light_partitions: usize) -> plot::Panel<'static> {
    let mut panel = plot::Panel {
        title: if vtrr { "VTRR (module)" } else { "FIFO list" },
        heavy: Vec::new(),
        light: vec![Vec::new(); light_partitions],
    };
    for (position, id) in order.iter().enumerate() {
        let light = id
            .strip_prefix("light")
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<usize>().ok());
        match light {
            Some(p) => panel.light[p].push(position),
            None => panel.heavy.push(position),
        }
    }
    panel
}

impl<'a> Bench<'a> {
    /// A bench on `server`, its Lua scripts loaded.
    fn new(server: &'a Server, sizes: &'a Sizes, plot: Option<String>) -> Bench<'a> {
        let mut admin = server.connect();
        let lua = LuaScripts::load(&mut admin);
        Bench {
            server,
            sizes,
            lua,
            admin,
            report: String::new(),
            plot,
        }
    }

    /// The report's head: what ran where.
    fn header(&mut self, title: &str, smoke: bool, setting: &str) {
        let version: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut self.admin)
            .unwrap();
        let version = version
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim();
        writeln!(
            self.report,
            "# {title}{}\n\nredis-server {version} on 127.0.0.1, {setting}; module built in release mode, a {}-core machine.\n\nThe Lua side is `lua/*.lua`, the reference scripts written the way vtrr-queue's are (EVALSHA, the same nine keys, no argument validation beyond what its Python client relies on: `tonumber` on weights and times, `HGET`-based checks only where the semantics need them).\n",
            if smoke { " (smoke run: tiny sizes, not a measurement)" } else { "" },
            std::fs::read_to_string("/proc/cpuinfo")
                .map_or(0, |info| info.lines().filter(|l| l.starts_with("processor")).count())
        )
        .unwrap();
    }
}

/// `bench --instructions`: the callgrind counts in each of
/// `instructions::SETTINGS` (persistence off, AOF on in both replication
/// modes, and no listpacks: every hash and sorted set a hash table or skip
/// list, as they are once a queue holds more than 128 leases), then the AOF
/// bytes per operation; with the figures for `--json`.
fn count_instructions(sizes: &Sizes, smoke: bool) -> (String, Vec<instructions::Counted>) {
    let mut report = String::new();
    let mut counted = Vec::new();
    let mut native_rows = String::new();
    // Every setting's server starts, and its capped queues fill, before
    // any is counted: the grain their counts wait out runs for all at once.
    let servers: Vec<Server> = instructions::SETTINGS
        .iter()
        .map(|setting| {
            Server::builder()
                .module_args(&[
                    "reclaim-interval-ms",
                    "0",
                    "replication",
                    setting.replication,
                    "default-layout",
                    DEFAULT_LAYOUT,
                ])
                .args(setting.server_args)
                .spawn()
        })
        .collect();
    let mut benches: Vec<(Bench, std::time::Instant)> = servers
        .iter()
        .map(|server| {
            let mut bench = Bench::new(server, sizes, None);
            let capped_filled = bench.fill_capped();
            (bench, capped_filled)
        })
        .collect();
    for (setting, (bench, capped_filled)) in instructions::SETTINGS.iter().zip(&mut benches) {
        let mut callgrind = instructions::Callgrind::new(bench.server.pid());
        bench.report = std::mem::take(&mut report);
        if bench.report.is_empty() {
            bench.header(
                "vtrr instruction counts",
                smoke,
                "run under callgrind by `make bench-instructions`",
            );
            instructions::table_head(&mut bench.report, sizes);
        }
        bench.instruction_rows(
            &mut callgrind,
            setting,
            *capped_filled,
            &mut counted,
            &mut native_rows,
        );
        report = std::mem::take(&mut bench.report);
    }
    instructions::native_table(&mut report, &native_rows);
    instructions::aof_table(&mut report, &counted);
    (report, counted)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let out = value_of("--out");
    let sizes = if smoke { &SMOKE } else { &FULL };
    let report = if args.iter().any(|a| a == "--instructions") {
        let (report, counted) = count_instructions(sizes, smoke);
        if let Some(path) = value_of("--json") {
            let json = serde_json::to_string_pretty(&counted).unwrap();
            std::fs::write(&path, json + "\n").unwrap();
            eprintln!("wrote {path}");
        }
        report
    } else {
        let server = Server::builder()
            .module_args(&["reclaim-interval-ms", "0", "default-layout", DEFAULT_LAYOUT])
            .args(&["--enable-debug-command", "yes", "--maxmemory", "0"])
            .spawn();
        let mut bench = Bench::new(&server, sizes, value_of("--plot"));
        bench.header(
            "vtrr benchmark",
            smoke,
            "persistence off, run by `make bench`, which pins the server to CPU 0 and this load generator to CPU 1",
        );
        type Section = (&'static str, fn(&mut Bench<'_>));
        let sections: [Section; 7] = [
            ("throughput", |b| b.throughput_section()),
            ("lifecycle", |b| b.lifecycle_section()),
            ("scaling", |b| b.scaling_section()),
            ("tenant-controls", |b| b.tenant_controls_section()),
            ("fairness", |b| b.fairness_section()),
            ("timer", |b| b.timer_section()),
            ("mass-expiry", |b| b.mass_expiry_section()),
        ];
        let only = value_of("--section");
        if let Some(name) = &only {
            assert!(
                sections.iter().any(|(n, _)| n == name),
                "no section {name}; the sections: {:?}",
                sections.map(|(n, _)| n)
            );
        }
        for (name, section) in sections {
            if only.as_deref().is_none_or(|only| only == name) {
                section(&mut bench);
            }
        }
        bench.report
    };
    print!("{report}");
    if let Some(path) = out {
        std::fs::write(&path, &report).unwrap();
        eprintln!("wrote {path}");
    }
}
