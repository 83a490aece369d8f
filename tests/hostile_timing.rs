//! Hostile timing: the expensive forms a client can send, or plant in a
//! queue's keys, against a real server, beside the hostile input of
//! `tests/hostile.rs` (#42: nothing a client sends can stall the server).
//! Rare and never-matching cron patterns in many zones, hundreds of
//! schedules listed twenty runs each, never-matching definitions written
//! straight into the keys for the timer to meet, floods of reported costs,
//! and a mass expiry; after each the server answers PING, every reply is a
//! reply, VTRR.CHECK finds nothing wrong and nothing is lost or duplicated
//! where that can be counted.
//!
//! Every call is timed: its round trip from the client, and on the server
//! its mean (`INFO commandstats`) and its slowest (SLOWLOG, every call over
//! 100 µs kept), with the timer's longest run (`vtrr_timer_longest_run_us`,
//! each scenario on a fresh server) and the round trips of a PING client on
//! its own connection throughout. Printed (`-- --nocapture`), never held to
//! a time in `make test`: benchmarks measure, they do not assert timings.
//! With `VTRR_TIMING_BUDGETS=1` (`make fuzz`, with the release module
//! `VTRR_MODULE=target/release/libvtrr.so`; the debug build is 10-50x
//! slower) each scenario runs at full size, once quiet and once with a
//! busy loop on every core, one scenario at a time, and the suite fails on
//! any measurement over its budget (below), listing them all.
//! `VTRR_SEED` replays the random patterns and plantings.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};

/// A SCHEDULE's server time: one search of at most 8,000 steps (~1 ms).
const SCHEDULE_BUDGET_US: u64 = 5_000;
/// A SCHEDULES call's server time: its searches share 40,000 steps (~5 ms).
const SCHEDULES_BUDGET_US: u64 = 10_000;
/// Any other module call made while measuring (RENEW ... COST, LEASE,
/// STATS), server time.
const CALL_BUDGET_US: u64 = 5_000;
/// The timer's longest run: `vtrr.timer-budget-us` (1 ms by default) plus
/// the one piece of each step a run may finish past it (a firing call:
/// three searches of up to ~1.3 ms): a few ms whatever the keys hold.
const TICK_BUDGET_US: u64 = 5_000;
/// PING's longest round trip during a mass expiry.
const PING_BUDGET_US: u64 = 5_000;
/// Calls slower than this (µs) are kept in the SLOWLOG.
const SLOWLOG_THRESHOLD_US: u64 = 100;
/// The error of a pattern no search of 8,000 steps answers.
const NOT_FOUND: &str = "ERR CRON: no run found within 8000 steps; simplify the pattern";

/// Whether the budgets hold (`VTRR_TIMING_BUDGETS=1`).
fn budgets_on() -> bool {
    matches!(std::env::var("VTRR_TIMING_BUDGETS").as_deref(), Ok("1"))
}

/// How much each scenario does: full size under the budgets (the release
/// module), less in `make test` (the debug module, both layouts, each
/// suite a few seconds).
struct Sizes {
    random_patterns: usize,
    listed_schedules: usize,
    planted: usize,
    cost_reports: usize,
    mass_leases: usize,
}

fn sizes() -> Sizes {
    if budgets_on() {
        Sizes {
            random_patterns: 1_000,
            listed_schedules: 500,
            planted: 1_000,
            cost_reports: 36_000,
            mass_leases: 100_000,
        }
    } else {
        Sizes {
            random_patterns: 300,
            listed_schedules: 200,
            planted: 150,
            cost_reports: 36_000,
            mass_leases: 20_000,
        }
    }
}

// --- Settings: one scenario at a time, quiet and under load ------------------

/// Under the budgets, one scenario at a time (a measurement shares the two
/// cores with nothing of this suite's).
fn one_at_a_time() -> Option<MutexGuard<'static, ()>> {
    static TURN: Mutex<()> = Mutex::new(());
    budgets_on().then(|| TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
}

/// A busy loop on every core while it lives: other processes' load.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    fn start() -> Load {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..cores)
            .map(|n| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut x = n as u64 + 1;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..10_000 {
                            x = std::hint::black_box(x.wrapping_mul(6364136223846793005) ^ 1);
                        }
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Runs `scenario` quiet; under the budgets also with every core busy, and
/// then fails on whatever went over its budget in either.
fn in_each_setting(name: &str, mut scenario: impl FnMut(&mut Measures)) {
    let _turn = one_at_a_time();
    let module = module_path();
    if budgets_on() {
        assert!(
            module.to_string_lossy().contains("release"),
            "VTRR_TIMING_BUDGETS=1 measures the release module: set VTRR_MODULE=target/release/libvtrr.so (make fuzz does), not {}",
            module.display()
        );
    }
    let settings: &[bool] = if budgets_on() {
        &[false, true]
    } else {
        &[false]
    };
    let mut over = Vec::new();
    for &loaded in settings {
        let setting = if loaded {
            "loaded (a busy loop on every core)"
        } else {
            "quiet"
        };
        let mut measures = Measures {
            lines: format!(
                "hostile_timing: {name}, {setting}, {} layout, {}\n",
                layout(),
                module.display()
            ),
            over: Vec::new(),
        };
        let load = loaded.then(Load::start);
        scenario(&mut measures);
        drop(load);
        println!("{}", measures.lines);
        over.extend(measures.over.into_iter().map(|o| format!("{setting}: {o}")));
    }
    if budgets_on() {
        assert!(over.is_empty(), "{name}: over budget:\n{}", over.join("\n"));
    }
}

// --- Measuring ---------------------------------------------------------------

/// What a scenario measured, printed; and under the budgets what went over.
struct Measures {
    lines: String,
    over: Vec<String>,
}

impl Measures {
    /// One measurement, held to `budget_us` (when given) under the budgets.
    fn record(&mut self, what: &str, us: u64, budget_us: Option<u64>, detail: &str) {
        let held = if budgets_on() { "" } else { ", not held here" };
        let budget = budget_us.map_or(String::new(), |b| format!(" (budget {b} µs{held})"));
        writeln!(self.lines, "  {what}: {us} µs{budget}{detail}").unwrap();
        if let Some(b) = budget_us {
            if us > b {
                self.over.push(format!("{what}: {us} µs > {b} µs{detail}"));
            }
        }
    }

    fn note(&mut self, text: &str) {
        writeln!(self.lines, "  {text}").unwrap();
    }

    /// The server's side of the calls since `phase` began: each module
    /// command's calls and mean, and its slowest call (held to its budget)
    /// and how many took over 1 ms; the client's round trips beside them;
    /// the timer's longest run so far (each scenario has a server of its
    /// own); and how long the server waited for a CPU meanwhile (what other
    /// processes took from it: a wall-clock time includes it).
    fn server_side(&mut self, con: &mut Connection, trips: &Trips, phase: &Phase) {
        let slowest = slowlog_slowest(con);
        for (command, (calls, mean)) in commandstats(con) {
            // The module's calls; the rest is this suite's own reading and
            // planting, and what the module calls inside its own.
            if !command.starts_with("vtrr.") {
                continue;
            }
            let slow = slowest.get(&command);
            let server_max = slow.map_or(0, |s| s.max_us);
            let budget = match command.as_str() {
                "vtrr.schedule" => Some(SCHEDULE_BUDGET_US),
                "vtrr.schedules" => Some(SCHEDULES_BUDGET_US),
                // Diagnostics and the layout switch of a planting, not
                // hostile calls: O(N) by design.
                "vtrr.check" | "vtrr.inspect" | "vtrr.convert" => None,
                _ => Some(CALL_BUDGET_US),
            };
            let client = trips.0.get(&command).map_or(String::new(), |t| {
                format!(", client round trip max {} µs ({})", t.max_us, t.call)
            });
            let shown = match slow {
                None => format!(" (none over {SLOWLOG_THRESHOLD_US} µs)"),
                Some(s) => format!(" ({}; {} calls over 1 ms)", s.call, s.over_1ms),
            };
            self.record(
                &format!("{command}: {calls} calls, mean {mean:.0} µs, server max"),
                server_max,
                budget,
                &format!("{shown}{client}"),
            );
        }
        for (name, trip) in &trips.0 {
            if name.starts_with("pipeline") {
                self.note(&format!(
                    "{name}: {} round trips, max {} µs",
                    trip.calls, trip.max_us
                ));
            }
        }
        let info = vtrr_info(con);
        if info["vtrr_timer_runs"] == 0 {
            self.note("timer: off");
        } else {
            self.record(
                &format!("timer: {} runs, longest run", info["vtrr_timer_runs"]),
                info["vtrr_timer_longest_run_us"] as u64,
                Some(TICK_BUDGET_US),
                "",
            );
        }
        if let (Some((cpu0, wait0)), Some((cpu1, wait1))) = (phase.sched, schedstat(phase.pid)) {
            self.note(&format!(
                "the server's main thread over {:.2} s: {:.0} ms on a CPU, {:.0} ms waiting for one",
                phase.started.elapsed().as_secs_f64(),
                (cpu1 - cpu0) as f64 / 1e6,
                (wait1 - wait0) as f64 / 1e6
            ));
        }
    }

    /// PING's round trips, held to `budget_us` when given.
    fn pings(&mut self, what: &str, round_trips: &[u64], budget_us: Option<u64>) {
        let max = round_trips.iter().copied().max().unwrap_or(0);
        let mut sorted = round_trips.to_vec();
        sorted.sort_unstable();
        let p99 = percentile(&sorted, 99);
        self.record(
            &format!("{what}: {} PINGs, p99 {p99} µs, max", round_trips.len()),
            max,
            budget_us,
            "",
        );
    }
}

/// The slowest round trip of each command the client sent, and how many.
#[derive(Default)]
struct Trips(BTreeMap<String, Trip>);

#[derive(Default)]
struct Trip {
    max_us: u64,
    calls: u64,
    call: String,
}

impl Trips {
    fn add(&mut self, name: &str, took: Duration, call: impl FnOnce() -> String) {
        let trip = self.0.entry(name.to_lowercase()).or_default();
        trip.calls += 1;
        let us = took.as_micros() as u64;
        if us >= trip.max_us {
            trip.max_us = us;
            trip.call = call();
        }
    }
}

/// A call's words for a report, each cut short.
fn shown(args: &[&[u8]]) -> String {
    args.iter()
        .map(|a| String::from_utf8_lossy(&a[..a.len().min(40)]).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `text` is printable ASCII: all an error reply may carry.
fn printable(text: &str) -> bool {
    text.bytes().all(|b| (b' '..=b'~').contains(&b))
}

/// Makes the call `args` (the command first), timing its round trip: the
/// reply, or an error reply as `CODE detail` (it must be one: a server
/// error with a code, printable).
fn call(con: &mut Connection, trips: &mut Trips, args: &[&[u8]]) -> Result<Value, String> {
    let name = std::str::from_utf8(args[0]).unwrap();
    let mut cmd = redis::cmd(name);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    let sent = Instant::now();
    let reply = cmd.query::<Value>(con);
    trips.add(name, sent.elapsed(), || shown(args));
    reply.map_err(|error| {
        let code = error
            .code()
            .unwrap_or_else(|| panic!("{}: not a server error reply: {error}", shown(args)));
        let text = format!("{code} {}", error.detail().unwrap_or(""));
        assert!(
            printable(&text),
            "{}: unprintable error {text:?}",
            shown(args)
        );
        text
    })
}

/// A server with the module, its timer every `interval_ms` (0: off), and
/// every call over `SLOWLOG_THRESHOLD_US` kept in its SLOWLOG.
fn measured_server(interval_ms: &str) -> Server {
    Server::builder()
        .module_args(&["reclaim-interval-ms", interval_ms])
        .args(&[
            "--slowlog-log-slower-than",
            &SLOWLOG_THRESHOLD_US.to_string(),
            "--slowlog-max-len",
            "1000000",
        ])
        .spawn()
}

/// A measured phase: the server's SLOWLOG and `INFO commandstats` begun
/// afresh, and its main thread's scheduling so far.
struct Phase {
    pid: u32,
    started: Instant,
    sched: Option<(u64, u64)>,
}

impl Phase {
    fn begin(server: &Server, con: &mut Connection) -> Phase {
        let _: () = redis::cmd("SLOWLOG").arg("RESET").query(con).unwrap();
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
        Phase {
            pid: server.pid(),
            started: Instant::now(),
            sched: schedstat(server.pid()),
        }
    }
}

/// The nanoseconds the process's main thread has run on a CPU and waited
/// for one (`/proc/<pid>/schedstat`; None where there is none).
fn schedstat(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some((fields.next()??, fields.next()??))
}

/// Each command's calls and mean µs (`INFO commandstats`).
fn commandstats(con: &mut Connection) -> BTreeMap<String, (u64, f64)> {
    let text: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, fields) = line.split_once(':')?;
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
                    .and_then(|v| v.parse::<f64>().ok())
            };
            Some((
                name.to_lowercase(),
                (field("calls")? as u64, field("usec_per_call")?),
            ))
        })
        .collect()
}

/// A command's slow calls in the SLOWLOG.
#[derive(Default)]
struct Slow {
    max_us: u64,
    call: String,
    over_1ms: u64,
}

/// Each command's slowest call in the SLOWLOG, and how many took over 1 ms.
fn slowlog_slowest(con: &mut Connection) -> BTreeMap<String, Slow> {
    // id, time, µs, arguments, client address, client name
    type Entry = (i64, i64, i64, Vec<Vec<u8>>, String, String);
    let entries: Vec<Entry> = redis::cmd("SLOWLOG").arg("GET").arg(-1).query(con).unwrap();
    let mut slowest: BTreeMap<String, Slow> = BTreeMap::new();
    for (_, _, us, args, _, _) in entries {
        let us = us as u64;
        let name = String::from_utf8_lossy(&args[0]).to_lowercase();
        let words: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        let slow = slowest.entry(name).or_default();
        slow.over_1ms += u64::from(us > 1_000);
        if us >= slow.max_us {
            slow.max_us = us;
            slow.call = shown(&words);
        }
    }
    slowest
}

/// A PING client on its own connection and thread, one PING at a time,
/// until stopped: every round trip (µs).
struct Pinger {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<u64>>,
}

impl Pinger {
    fn start(server: &Server) -> Pinger {
        let mut con = server.connect();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut round_trips = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let pong: String = redis::cmd("PING").query(&mut con).expect("PING answered");
                assert_eq!(pong, "PONG");
                round_trips.push(sent.elapsed().as_micros() as u64);
            }
            round_trips
        });
        Pinger { stop, thread }
    }

    fn stop(self) -> Vec<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the PING client")
    }
}

/// A client on its own connection and thread reading `INFO vtrr` as fast
/// as it can, until stopped: the duration (µs) of each timer run it saw
/// (`vtrr_timer_last_run_us` by `vtrr_timer_runs`; most runs, when runs
/// come ms apart). The runs' spread, where the longest run alone may be one
/// preemption.
struct TickSampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<BTreeMap<i64, i64>>,
}

impl TickSampler {
    fn start(server: &Server) -> TickSampler {
        let mut con = server.connect();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut runs = BTreeMap::new();
            while !stopped.load(Ordering::Relaxed) {
                let info = vtrr_info(&mut con);
                runs.insert(info["vtrr_timer_runs"], info["vtrr_timer_last_run_us"]);
            }
            runs
        });
        TickSampler { stop, thread }
    }

    /// The runs seen that worked (over 100 µs), sorted.
    fn stop(self) -> Vec<u64> {
        self.stop.store(true, Ordering::Relaxed);
        let runs = self.thread.join().expect("the INFO client");
        let mut working: Vec<u64> = runs
            .into_values()
            .filter(|&us| us > 100)
            .map(|us| us as u64)
            .collect();
        working.sort_unstable();
        working
    }
}

/// The `p`th percentile of sorted `values`.
fn percentile(values: &[u64], p: usize) -> u64 {
    values
        .get(values.len().saturating_sub(1) * p / 100)
        .copied()
        .unwrap_or(0)
}

/// PING answered, and VTRR.CHECK clean on each of `queues`.
#[track_caller]
fn assert_sound(con: &mut Connection, queues: &[&str]) {
    let pong: String = redis::cmd("PING").query(con).unwrap();
    assert_eq!(pong, "PONG");
    for queue in queues {
        assert_invariants(con, queue);
    }
}

// --- Cron vocabulary -----------------------------------------------------------

/// Zones with odd offsets, gaps and rules (chrono-tz names).
const ZONES: &[&str] = &[
    "UTC",
    "Europe/Paris",
    "Europe/Dublin",
    "Europe/Chisinau",
    "America/New_York",
    "America/St_Johns",
    "America/Santiago",
    "America/Asuncion",
    "America/Havana",
    "America/Nuuk",
    "America/Scoresbysund",
    "Antarctica/Troll",
    "Antarctica/Macquarie",
    "Australia/Lord_Howe",
    "Australia/Eucla",
    "Asia/Kathmandu",
    "Asia/Tehran",
    "Asia/Gaza",
    "Asia/Pyongyang",
    "Asia/Colombo",
    "Africa/Casablanca",
    "Africa/Cairo",
    "Pacific/Chatham",
    "Pacific/Kiritimati",
    "Pacific/Apia",
    "Pacific/Norfolk",
    "Pacific/Pago_Pago",
    "Etc/GMT+12",
    "Etc/GMT-14",
];

/// The costliest search measured: every step a time in Troll's March gap
/// (all 8,000 steps of a search: about 1 ms in release on the 2-core machine).
const COSTLIEST: (&str, &str) = ("* * 1-2 * 3 +SUNL", "Antarctica/Troll");

/// Patterns no search answers, each with its zone: refused by SCHEDULE.
const NEVER: &[(&str, &str)] = &[
    ("0 0 0 1 * +MON#5", "UTC"),
    ("0 0 30 2 *", "UTC"),
    ("0 0 0 31 4 *", "Europe/Paris"),
    COSTLIEST,
    ("0 0 0 30 2 * *", "Pacific/Chatham"),
    ("0 0 0 31 2,4,6,9,11 *", "Australia/Lord_Howe"),
    ("0 0 0 1 * +MON#5", "Asia/Kathmandu"),
    ("0 0 0 1 1 * 2090", "UTC"),
    ("0 0 0 1 1 * 2200", "America/New_York"),
    ("0 0 0 29 2 * 2100", "Pacific/Kiritimati"),
];

/// Patterns that match rarely (or in a zone's gap), each with its zone:
/// accepted, their next run found within a search.
const RARE: &[(&str, &str)] = &[
    ("0 0 0 29 2 +MON", "UTC"),
    ("* * 2 * * *", "America/New_York"),
    ("0 0 0 29 2 *", "Australia/Lord_Howe"),
    ("0 0 12 13 * +FRI", "Asia/Kathmandu"),
    ("0 0 0 * * 5#5", "Pacific/Chatham"),
    ("0 30 2 * 3 SUN#L", "Europe/Paris"),
    ("0 30 2 * 10 SUN#L", "Australia/Lord_Howe"),
    ("0 0 0 31 12 +SAT", "Etc/GMT-14"),
    ("0 0 0 L 2 *", "America/St_Johns"),
    ("0 0 0 15W * *", "Asia/Tehran"),
    ("0 0 0 1 1 * 2040", "UTC"),
    ("0 0 0 1 1 * 2045", "Pacific/Apia"),
    ("@yearly", "Antarctica/Troll"),
    ("0 45 23 31 12 *", "Pacific/Chatham"),
    // A time inside the gap (run after it): each further run is a search
    // of nearly all its steps, the costliest a listing can ask for.
    ("0 30 1 * 3 +SUNL", "Antarctica/Troll"),
    ("0 30 0 * 9 +SUN#1", "America/Santiago"),
];

const SECONDS: &[&str] = &["0", "*", "*/7", "59", "0-59/13", "30", "1,31"];
const MINUTES: &[&str] = &["0", "*", "*/15", "59", "30", "0,30", "1-2"];
const HOURS: &[&str] = &["0", "1-2", "2", "23", "*", "*/5", "12", "2-3"];
const DAYS: &[&str] = &[
    "1", "29", "30", "31", "L", "15W", "1W", "?", "*", "29-31", "13", "31W",
];
const MONTHS: &[&str] = &["*", "2", "FEB", "2,4", "3", "11", "12", "*/5", "4,6,9,11"];
const WEEKDAYS: &[&str] = &[
    "*",
    "?",
    "MON#5",
    "+MON",
    "+FRI",
    "+SUNL",
    "5#L",
    "+5#5",
    "0L",
    "MON-FRI#2",
    "SAT,SUN",
    "+MON#5",
    "+SUN#1",
    "7",
];
const YEARS: &[&str] = &[
    "*",
    "2027",
    "2030-2040",
    "2045",
    "2060",
    "2099",
    "2500",
    "9999",
];
const ALIASES: &[&str] = &["@yearly", "@annually", "@monthly", "@weekly", "@daily"];

fn one_of<'a>(rng: &mut Rng, options: &[&'a str]) -> &'a str {
    options[rng.below(options.len() as u64) as usize]
}

/// A random mix of the cron vocabulary: 5 fields, 6 with seconds first, 7
/// with a year last, or an alias.
fn random_pattern(rng: &mut Rng) -> String {
    if rng.chance(5) {
        return one_of(rng, ALIASES).to_string();
    }
    let seconds = rng.chance(50);
    let mut fields = Vec::new();
    if seconds {
        fields.push(one_of(rng, SECONDS));
    }
    for vocabulary in [MINUTES, HOURS, DAYS, MONTHS, WEEKDAYS] {
        fields.push(one_of(rng, vocabulary));
    }
    if seconds && rng.chance(30) {
        fields.push(one_of(rng, YEARS));
    }
    fields.join(" ")
}

/// A random zone, or none (UTC).
fn random_zone(rng: &mut Rng) -> Option<&'static str> {
    (!rng.chance(15)).then(|| one_of(rng, ZONES))
}

/// `VTRR.SCHEDULE queue name CRON pattern [TZ zone] PARTITION p PAYLOAD x
/// MISSED missed`, timed.
fn schedule_cron(
    con: &mut Connection,
    trips: &mut Trips,
    queue: &str,
    name: &str,
    pattern: &str,
    zone: Option<&str>,
) -> Result<Value, String> {
    let mut args: Vec<&[u8]> = vec![
        b"VTRR.SCHEDULE",
        queue.as_bytes(),
        name.as_bytes(),
        b"CRON",
        pattern.as_bytes(),
    ];
    if let Some(zone) = zone {
        args.extend([b"TZ".as_slice(), zone.as_bytes()]);
    }
    args.extend([
        b"PARTITION".as_slice(),
        b"p",
        b"PAYLOAD",
        b"x",
        b"MISSED",
        b"one",
    ]);
    call(con, trips, &args)
}

// --- The scenarios -----------------------------------------------------------

#[test]
fn rare_and_never_matching_patterns_in_many_zones_are_answered_or_refused() {
    let seed = seed();
    let sizes = sizes();
    in_each_setting("SCHEDULE with rare and never-matching patterns", |m| {
        let server = measured_server("10");
        let mut con = server.connect();
        let mut rng = Rng::new(seed);
        let mut trips = Trips::default();
        let pinger = Pinger::start(&server);
        let phase = Phase::begin(&server, &mut con);
        let before = server_time_ms(&mut con);
        // name -> the next run SCHEDULE replied
        let mut accepted: BTreeMap<String, i64> = BTreeMap::new();
        let mut refused = BTreeSet::new();
        for (n, (pattern, zone)) in NEVER.iter().enumerate() {
            let name = format!("never{n}");
            let reply = schedule_cron(&mut con, &mut trips, "q", &name, pattern, Some(zone));
            assert_eq!(reply, Err(NOT_FOUND.to_string()), "{pattern} in {zone}");
            refused.insert(name);
        }
        for (n, (pattern, zone)) in RARE.iter().enumerate() {
            let name = format!("rare{n}");
            match schedule_cron(&mut con, &mut trips, "q", &name, pattern, Some(zone)) {
                Ok(Value::Int(next)) => assert!(next >= before, "{pattern} in {zone}: {next}"),
                other => panic!("{pattern} in {zone}: {other:?}"),
            };
            accepted.insert(name, 0);
        }
        let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
        for n in 0..sizes.random_patterns {
            let pattern = random_pattern(&mut rng);
            let zone = random_zone(&mut rng);
            let name = format!("mix{n}");
            let outcome = match schedule_cron(&mut con, &mut trips, "q", &name, &pattern, zone) {
                Ok(Value::Int(next)) => {
                    assert!(next >= before, "{pattern} in {zone:?}: {next}");
                    accepted.insert(name.clone(), next);
                    "accepted"
                }
                Err(e) if e == NOT_FOUND => "no run found",
                Err(e) if e.starts_with("ERR CRON is not a valid pattern") => "not a pattern",
                Err(e) if e == "ERR the schedule has no run after now" => "no run after now",
                other => panic!("{pattern} in {zone:?}: {other:?}"),
            };
            if outcome != "accepted" {
                refused.insert(name);
            }
            *outcomes.entry(outcome).or_default() += 1;
        }
        let round_trips = pinger.stop();
        m.note(&format!(
            "{} fixed never-matching, {} fixed rare, {} random patterns: {outcomes:?}",
            NEVER.len(),
            RARE.len(),
            sizes.random_patterns
        ));
        m.server_side(&mut con, &trips, &phase);
        m.pings("PING meanwhile", &round_trips, None);

        // What was accepted is scheduled, each at its next run or later
        // (a run may have fired since); nothing refused was written.
        let due: BTreeMap<String, i64> = key_zrange(&mut con, "q", "schedule_due")
            .into_iter()
            .map(|(name, score)| (String::from_utf8(name).unwrap(), score as i64))
            .collect();
        let definitions: BTreeSet<String> = key_hgetall(&mut con, "q", "schedules")
            .into_keys()
            .map(|name| String::from_utf8(name).unwrap())
            .collect();
        assert_eq!(
            definitions,
            accepted.keys().cloned().collect::<BTreeSet<_>>()
        );
        for (name, next) in &accepted {
            let at = due.get(name).unwrap_or_else(|| panic!("{name} not due"));
            assert!(at >= next, "{name}: due {at}, replied {next}");
        }
        assert!(refused.iter().all(|name| !due.contains_key(name)));
        assert_sound(&mut con, &["q"]);
    });
}

/// Checks a SCHEDULES entry against the next runs SCHEDULE replied: its
/// `next-ms` that run, its runs from it on, increasing, at most 20. Its name.
fn check_entry(entry: &Value, next_of: &BTreeMap<String, i64>) -> String {
    let entry = map_of(entry);
    let name: String = redis::from_redis_value(entry["schedule"].clone()).unwrap();
    let next = next_of
        .get(&name)
        .unwrap_or_else(|| panic!("listed {name}, never scheduled"));
    assert_eq!(entry["next-ms"], Value::Int(*next), "{name}");
    let runs: Vec<i64> = redis::from_redis_value(entry["runs"].clone()).unwrap();
    assert!(runs.len() <= 20, "{name}: {runs:?}");
    if let Some(first) = runs.first() {
        assert_eq!(first, next, "{name}: {runs:?}");
    }
    assert!(runs.windows(2).all(|w| w[0] < w[1]), "{name}: {runs:?}");
    name
}

#[test]
fn hundreds_of_schedules_are_listed_with_twenty_runs_each() {
    let seed = seed();
    let sizes = sizes();
    in_each_setting("hundreds of schedules, SCHEDULES ... RUNS 20", |m| {
        // The timer off: no run fires, each next run stays as replied.
        let server = measured_server("0");
        let mut con = server.connect();
        let mut rng = Rng::new(seed);
        let mut trips = Trips::default();
        let pinger = Pinger::start(&server);
        let phase = Phase::begin(&server, &mut con);
        let mut next_of: BTreeMap<String, i64> = BTreeMap::new();
        let mut refused = 0;
        for n in 0..sizes.listed_schedules {
            // Each pattern in its own zone (the costly gaps) or another.
            let (pattern, own) = RARE[rng.below(RARE.len() as u64) as usize];
            let zone = if rng.chance(50) {
                own
            } else {
                one_of(&mut rng, ZONES)
            };
            let name = format!("s{n}");
            // A rare pattern whose runs in some zone all fall in gaps may
            // find none: refused, and not listed.
            match schedule_cron(&mut con, &mut trips, "q", &name, pattern, Some(zone)) {
                Ok(Value::Int(next)) => {
                    next_of.insert(name, next);
                }
                Err(e) if e == NOT_FOUND => refused += 1,
                other => panic!("{pattern} in {zone}: {other:?}"),
            };
        }
        let created: BTreeSet<String> = next_of.keys().cloned().collect();
        // Every page, largest and default COUNT, twenty runs each.
        let mut pages = 0;
        for count in [&b"100"[..], b"10"] {
            let mut seen = BTreeSet::new();
            let mut cursor = b"0".to_vec();
            loop {
                let reply = call(
                    &mut con,
                    &mut trips,
                    &[
                        b"VTRR.SCHEDULES",
                        b"q",
                        b"CURSOR",
                        &cursor,
                        b"COUNT",
                        count,
                        b"RUNS",
                        b"20",
                    ],
                )
                .expect("a page");
                pages += 1;
                let (next, entries): (Vec<u8>, Vec<Value>) =
                    redis::from_redis_value(reply).unwrap();
                for entry in &entries {
                    seen.insert(check_entry(entry, &next_of));
                }
                if next == b"0" {
                    break;
                }
                cursor = next;
                assert!(pages < 10_000, "the cursor never came back to 0");
            }
            assert_eq!(seen, created, "COUNT {}", String::from_utf8_lossy(count));
        }
        // And each alone.
        for name in &created {
            let reply = call(
                &mut con,
                &mut trips,
                &[
                    b"VTRR.SCHEDULES",
                    b"q",
                    b"SCHEDULE",
                    name.as_bytes(),
                    b"RUNS",
                    b"20",
                ],
            )
            .expect("a schedule");
            assert_eq!(&check_entry(&reply, &next_of), name);
            let runs: Vec<i64> = redis::from_redis_value(map_of(&reply)["runs"].clone()).unwrap();
            assert!(!runs.is_empty(), "{name}: no run shown");
        }
        let round_trips = pinger.stop();
        m.note(&format!(
            "{} schedules of {} rare patterns in {} zones ({refused} refused); {pages} pages, then each alone",
            created.len(),
            RARE.len(),
            ZONES.len()
        ));
        m.server_side(&mut con, &trips, &phase);
        m.pings("PING meanwhile", &round_trips, None);
        assert_sound(&mut con, &["q"]);
    });
}

/// A definition planted in a queue's keys: name, definition, due time.
type Planting = (String, Vec<u8>, i64);

/// `<len>:<bytes>,` of each field: a definition as Schedule::encode writes
/// one (kind, pattern, zone, missed, weight, partition, payload).
fn encoded(fields: &[&str]) -> Vec<u8> {
    fields
        .iter()
        .flat_map(|f| format!("{}:{f},", f.len()).into_bytes())
        .collect()
}

#[test]
fn planted_never_matching_definitions_due_now_leave_the_timer_in_time() {
    let seed = seed();
    let sizes = sizes();
    in_each_setting("definitions planted in the keys, due now", |m| {
        let server = measured_server("10");
        let mut con = server.connect();
        let mut rng = Rng::new(seed);
        let queues = ["pl0", "pl1", "pl2"];
        for queue in queues {
            enqueue_one(&mut con, queue, "p", "seed", "S");
        }
        let now = server_time_ms(&mut con);
        // Per queue: (name, definition, due); the runs each must fire once,
        // and the names that stay due (their next run found, a year ahead
        // at most).
        let mut plantings: BTreeMap<&str, Vec<Planting>> = BTreeMap::new();
        let mut runs: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        let mut staying: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for n in 0..sizes.planted {
            let queue = queues[n % queues.len()];
            let name = format!("planted{n}");
            let due = now - rng.below(10_000) as i64;
            let missed = one_of(&mut rng, &["skip", "one", "all"]);
            let roll = rng.below(100);
            let (kind, definition) = if roll < 80 {
                // Half of them the costliest search, three of which one
                // firing call funds.
                let (pattern, zone) = if rng.chance(50) {
                    COSTLIEST
                } else {
                    NEVER[rng.below(NEVER.len() as u64) as usize]
                };
                let def = encoded(&["cron", pattern, zone, missed, "1", "p", "x"]);
                ("never-matching", def)
            } else if roll < 90 {
                // Yearly: fired now, next due within a year.
                let pattern = one_of(&mut rng, &["@yearly", "0 0 12 29 2 *"]);
                let zone = one_of(&mut rng, ZONES);
                staying.entry(queue).or_default().insert(name.clone());
                (
                    "ordinary",
                    encoded(&["cron", pattern, zone, missed, "1", "p", "x"]),
                )
            } else {
                let garbage: &[&[u8]] = &[
                    b"",
                    b"4:cron,",
                    b"4:cron,99999999999:x,",
                    b"\xff\xfe%s%n",
                    b"4:cron,16:0 0 0 1 * +MON#5,9:Nowhere/X,3:one,1:1,1:p,1:x,",
                ];
                let def = garbage[rng.below(garbage.len() as u64) as usize].to_vec();
                plantings.entry(queue).or_default().push((name, def, due));
                *kinds.entry("unreadable").or_default() += 1;
                continue;
            };
            runs.entry(queue)
                .or_default()
                .insert(format!("schedule:{name}:{due}"));
            plantings
                .entry(queue)
                .or_default()
                .push((name, definition, due));
            *kinds.entry(kind).or_default() += 1;
        }
        let pinger = Pinger::start(&server);
        let ticks = TickSampler::start(&server);
        let phase = Phase::begin(&server, &mut con);
        let trips = Trips::default();
        let started = Instant::now();
        for queue in queues {
            let planted = plantings.remove(queue).unwrap_or_default();
            with_keys_layout(&mut con, queue, |con| {
                let mut pipe = redis::pipe();
                for (name, definition, due) in &planted {
                    pipe.cmd("HSET")
                        .arg(format!("vtrr:{queue}:schedules"))
                        .arg(name)
                        .arg(definition)
                        .ignore();
                    pipe.cmd("ZADD")
                        .arg(format!("vtrr:{queue}:schedule_due"))
                        .arg(due)
                        .arg(name)
                        .ignore();
                }
                let _: () = pipe.query(con).unwrap();
            });
        }
        // The timer meets every one: a never-matching or unreadable one
        // leaves schedule_due, an ordinary one stays due a year ahead at most.
        let left = |con: &mut Connection, queue: &str| -> BTreeSet<String> {
            key_zrange(con, queue, "schedule_due")
                .into_iter()
                .map(|(name, _)| String::from_utf8(name).unwrap())
                .collect()
        };
        wait_until(
            Duration::from_secs(300),
            "the timer met every planted definition",
            || {
                queues
                    .iter()
                    .all(|q| left(&mut con, q) == staying.get(q).cloned().unwrap_or_default())
            },
        );
        let drained_in = started.elapsed();
        let round_trips = pinger.stop();
        let ticks = ticks.stop();
        m.note(&format!(
            "{} planted over {} queues {kinds:?}, all met in {:.2} s",
            sizes.planted,
            queues.len(),
            drained_in.as_secs_f64()
        ));
        m.server_side(&mut con, &trips, &phase);
        m.note(&format!(
            "timer runs that worked, as sampled: {}, median {} µs, p90 {} µs, max {} µs",
            ticks.len(),
            percentile(&ticks, 50),
            percentile(&ticks, 90),
            percentile(&ticks, 100)
        ));
        m.pings("PING meanwhile", &round_trips, None);

        // Each readable definition fired its due run once; the unreadable
        // fired nothing; the schedules stay for an operator to read.
        for queue in queues {
            let queued: BTreeSet<String> = key_zrange(&mut con, queue, "queue")
                .into_iter()
                .map(|(id, _)| String::from_utf8(id).unwrap())
                .collect();
            let mut expected = runs.get(queue).cloned().unwrap_or_default();
            expected.insert("seed".to_string());
            assert_eq!(queued, expected, "queue {queue}");
            assert_eq!(stat(&mut con, queue, "queued"), expected.len() as i64);
            for name in &staying.get(queue).cloned().unwrap_or_default() {
                let due = key_zscore(&mut con, queue, "schedule_due", name);
                let due = due.unwrap_or_else(|| panic!("{name} not due")) as i64;
                assert!(
                    due > now && due <= now + 366 * 4 * 86_400_000,
                    "{name}: {due}"
                );
            }
        }
        assert_sound(&mut con, &queues);
    });
}

#[test]
fn a_flood_of_reported_costs_leaves_the_other_partitions_taking_turns() {
    let sizes = sizes();
    in_each_setting("RENEW ... COST 1000000000, pipelined", |m| {
        let server = measured_server("10");
        let mut con = server.connect();
        // A paused tenant's item at level 0, so level 5 never empties into a
        // rebase while A floods; A leased at level 5.
        enqueue_one(&mut con, "q", "low", "l0", "L");
        let paused: i64 = command(&["VTRR.PAUSE", "q", "low"])
            .query(&mut con)
            .unwrap();
        assert_eq!(paused, 1);
        let added: i64 = command(&["VTRR.ENQUEUE", "q", "PRIORITY", "5", "A", "a0", "1", "x"])
            .query(&mut con)
            .unwrap();
        assert_eq!(added, 1);
        let (id, _, token, _) = lease(&mut con, "q", 3_600_000).expect("a0 leased");
        assert_eq!(id, b"a0");
        let pinger = Pinger::start(&server);
        let phase = Phase::begin(&server, &mut con);
        let mut trips = Trips::default();
        for start in (0..sizes.cost_reports).step_by(1_000) {
            let n = (start + 1_000).min(sizes.cost_reports) - start;
            let mut pipe = redis::pipe();
            for _ in 0..n {
                pipe.cmd("VTRR.RENEW")
                    .arg("q")
                    .arg("a0")
                    .arg(&token)
                    .arg(3_600_000)
                    .arg("COST")
                    .arg(1_000_000_000);
            }
            let sent = Instant::now();
            let renewed: Vec<i64> = pipe.query(&mut con).expect("replies");
            trips.add(
                "pipeline of 1,000 RENEW ... COST",
                sent.elapsed(),
                String::new,
            );
            assert_eq!(renewed, vec![1; n], "every report renews");
        }
        // A, B and C at level 5: B and C take turns, A (2^40 ahead at most)
        // after them.
        let added: i64 = command(&[
            "VTRR.ENQUEUE",
            "q",
            "PRIORITY",
            "5",
            "A",
            "a1",
            "1",
            "x",
            "B",
            "b0",
            "1",
            "x",
            "C",
            "c0",
            "1",
            "x",
            "B",
            "b1",
            "1",
            "x",
            "C",
            "c1",
            "1",
            "x",
            "B",
            "b2",
            "1",
            "x",
            "C",
            "c2",
            "1",
            "x",
        ])
        .query(&mut con)
        .unwrap();
        assert_eq!(added, 7);
        let mut served = Vec::new();
        for _ in 0..7 {
            let reply = call(&mut con, &mut trips, &[b"VTRR.LEASE", b"q", b"60000"]).unwrap();
            let leased = leases_in(&reply);
            assert_eq!(leased.len(), 1, "{reply:?}");
            served.push(String::from_utf8(leased[0].0.clone()).unwrap());
        }
        let round_trips = pinger.stop();
        m.note(&format!(
            "{} reports of 1e9 on one lease at level 5; then served {served:?}",
            sizes.cost_reports
        ));
        m.server_side(&mut con, &trips, &phase);
        m.pings("PING meanwhile", &round_trips, None);
        assert_eq!(served, ["b0", "c0", "b1", "c1", "b2", "c2", "a1"]);
        let acked: i64 = command(&["VTRR.ACKCOST", "q", "a0", &token, "1000000000"])
            .query(&mut con)
            .unwrap();
        assert_eq!(acked, 1);
        assert_sound(&mut con, &["q"]);
    });
}

#[test]
fn a_mass_expiry_keeps_ping_answered() {
    let sizes = sizes();
    in_each_setting("a mass expiry", |m| {
        let count = sizes.mass_leases;
        // The timer runs once on the empty server (the keyspace walk a
        // freshly loaded module owes), then is off while the leases are
        // made and expire.
        let server = measured_server("1");
        let mut con = server.connect();
        wait_until(Duration::from_secs(10), "the timer ran", || {
            vtrr_info(&mut con)["vtrr_timer_runs"] > 0
        });
        set_reclaim_interval_ms(&mut con, 0);
        let ids: BTreeSet<String> = (0..count).map(|n| format!("i{n}")).collect();
        let ids: Vec<String> = ids.into_iter().collect();
        for chunk in ids.chunks(1_000) {
            let mut cmd = redis::cmd("VTRR.ENQUEUE");
            cmd.arg("q");
            for (n, id) in chunk.iter().enumerate() {
                cmd.arg(format!("p{}", n % 100))
                    .arg(id)
                    .arg(1)
                    .arg("payload");
            }
            let added: i64 = cmd.query(&mut con).unwrap();
            assert_eq!(added, chunk.len() as i64);
        }
        let leased: Value = command(&["VTRR.LEASE", "q", "1", "COUNT", &count.to_string()])
            .query(&mut con)
            .unwrap();
        assert_eq!(leases_in(&leased).len(), count);
        std::thread::sleep(Duration::from_millis(5));
        if budgets_on() {
            // The machine's own hiccups: PING at the idle server.
            let pinger = Pinger::start(&server);
            std::thread::sleep(Duration::from_secs(1));
            m.pings("PING at the idle server (1 s)", &pinger.stop(), None);
        }

        let pinger = Pinger::start(&server);
        let phase = Phase::begin(&server, &mut con);
        let mut trips = Trips::default();
        set_reclaim_interval_ms(&mut con, 10);
        let started = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(10));
            let reply = call(&mut con, &mut trips, &[b"VTRR.STATS", b"q"]).unwrap();
            let stats: BTreeMap<String, Value> = redis::from_redis_value(reply).unwrap();
            if stats["inflight"] == Value::Int(0) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "the timer stalled: {:?} still out",
                stats["inflight"]
            );
        }
        let drained_in = started.elapsed();
        let round_trips = pinger.stop();
        m.note(&format!(
            "{count} leases expired together, all back in {:.2} s",
            drained_in.as_secs_f64()
        ));
        m.server_side(&mut con, &trips, &phase);
        m.pings("PING during the expiry", &round_trips, Some(PING_BUDGET_US));

        // Each came back once: leased again, every id once, timed out once.
        assert_eq!(stat(&mut con, "q", "queued"), count as i64);
        let mut again = BTreeSet::new();
        loop {
            let reply: Value = command(&["VTRR.LEASE", "q", "600000", "COUNT", "1000"])
                .query(&mut con)
                .unwrap();
            let Value::Array(leases) = reply else {
                break;
            };
            if leases.is_empty() {
                break;
            }
            for lease in leases {
                let Value::Array(fields) = lease else {
                    panic!("not a lease: {lease:?}")
                };
                let id = String::from_utf8(redis::from_redis_value(fields[0].clone()).unwrap());
                let id = id.unwrap();
                assert_eq!(fields[3], Value::Int(1), "{id} timed out once");
                assert!(again.insert(id.clone()), "{id} came back twice");
            }
        }
        assert_eq!(again.len(), count);
        assert!(again.iter().eq(ids.iter()), "the ids that came back");
        assert_sound(&mut con, &["q"]);
    });
}
