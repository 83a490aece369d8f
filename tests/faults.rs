//! Faults and hostile input: kill -9 under load with appendfsync always
//! (also with items in every state of the job lifecycle, a paused
//! partition and a capped one among them), random argument fuzzing
//! against a live server (every call answered, failed calls change
//! nothing), and running out of memory.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use common::*;
use redis::Connection;

/// What a crash workload knows for sure: only replies received count (with
/// `appendfsync always` a reply means the write is on disk).
#[derive(Default)]
struct Outcomes {
    /// Added by VTRR.ENQUEUE or VTRR.DEFER (reply 1).
    added: BTreeSet<String>,
    /// Acked (reply 1): must never come back.
    acked: BTreeSet<String>,
    /// Cancelled (reply 1): must never come back.
    cancelled: BTreeSet<String>,
    /// An ACK or CANCEL the kill interrupted: it may or may not have applied.
    unknown: BTreeSet<String>,
}

/// Records the reply to a call that removes `id` for good (ACK, CANCEL):
/// 1 puts it in the set `removed` picks, an error (the kill came mid-call)
/// in `unknown`, and the error is passed on.
fn record_removal(
    outcomes: &Mutex<Outcomes>,
    removed: fn(&mut Outcomes) -> &mut BTreeSet<String>,
    id: String,
    reply: redis::RedisResult<i64>,
) -> redis::RedisResult<()> {
    let mut outcomes = outcomes.lock().unwrap();
    match reply {
        Ok(1) => {
            removed(&mut outcomes).insert(id);
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(error) => {
            outcomes.unknown.insert(id);
            Err(error)
        }
    }
}

/// One step of a crash workload: its number, and what it learns goes into
/// the outcomes; an error (its message) when the server is gone.
type Step = fn(&mut Connection, &mut Rng, u64, &Mutex<Outcomes>) -> Result<(), String>;

/// A server with its timer on that fsyncs every write before the reply
/// (`appendfsync always`): a reply means the write survives kill -9.
/// `mode` is the `vtrr.replication` mode: what the AOF holds.
fn durable_server(mode: &str) -> Server {
    Server::builder()
        .module_args(&["reclaim-interval-ms", "20", "replication", mode])
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .spawn()
}

/// Runs `step` against `server` on a thread, n = 0, 1, ..., until told to
/// stop or the server is gone: what it learns, the stop flag, the thread.
fn start_workload(
    server: &Server,
    step: Step,
) -> (Arc<Mutex<Outcomes>>, Arc<AtomicBool>, JoinHandle<()>) {
    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (url, outcomes, stop) = (server.url(), outcomes.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
            let mut rng = Rng::new(seed());
            for n in 0u64.. {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                if let Err(why) = step(&mut con, &mut rng, n, &outcomes) {
                    return eprintln!("{why}");
                }
            }
        })
    };
    (outcomes, stop, worker)
}

/// Kills `server` with SIGKILL mid-workload, stops the workload and starts
/// the server again from its AOF; a connection to it.
fn kill_9_and_restart(
    server: &mut Server,
    stop: &AtomicBool,
    worker: JoinHandle<()>,
) -> Connection {
    server.kill();
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    server.restart();
    server.connect()
}

/// Enqueues one item, leases one (some leases short enough to expire) and
/// acks most.
fn crash_step(
    con: &mut Connection,
    rng: &mut Rng,
    n: u64,
    outcomes: &Mutex<Outcomes>,
) -> Result<(), String> {
    let id = format!("job{n}");
    let reply: redis::RedisResult<i64> = redis::cmd("VTRR.ENQUEUE")
        .arg("crash")
        .arg(format!("p{}", n % 7))
        .arg(&id)
        .arg(1 + rng.below(3))
        .arg("payload")
        .query(con);
    match reply {
        Ok(1) => {
            outcomes.lock().unwrap().added.insert(id);
        }
        // The server died mid-call: outcome unknown.
        other => return Err(format!("enqueue stopped: {other:?}")),
    }
    let leased: redis::RedisResult<Option<(String, String, String, i64)>> =
        redis::cmd("VTRR.LEASE")
            .arg("crash")
            .arg(if rng.chance(30) { 5 } else { 60_000 })
            .query(con);
    let Ok(Some((leased_id, _, token, _))) = leased else {
        return Err(format!("lease stopped: {leased:?}"));
    };
    if rng.chance(70) {
        let acked = redis::cmd("VTRR.ACK")
            .arg("crash")
            .arg(&leased_id)
            .arg(&token)
            .query::<i64>(con);
        // Killed during the ACK: it may or may not have applied.
        record_removal(outcomes, |o| &mut o.acked, leased_id, acked)
            .map_err(|error| format!("ack stopped: {error}"))?;
    }
    Ok(())
}

#[test]
fn kill_9_mid_workload_loses_and_duplicates_nothing_in_commands_mode() {
    kill_9_mid_workload_loses_and_duplicates_nothing("commands");
}

#[test]
fn kill_9_mid_workload_loses_and_duplicates_nothing_in_effects_mode() {
    kill_9_mid_workload_loses_and_duplicates_nothing("effects");
}

fn kill_9_mid_workload_loses_and_duplicates_nothing(mode: &str) {
    let mut server = durable_server(mode);
    let (outcomes, stop, worker) = start_workload(&server, crash_step);
    // appendfsync always makes every write wait for the disk: let the
    // workload get going, then kill at an arbitrary point.
    assert!(
        wait_for(Duration::from_secs(20), || outcomes
            .lock()
            .unwrap()
            .added
            .len()
            >= 300),
        "workload did not start"
    );
    let mut con = kill_9_and_restart(&mut server, &stop, worker);
    let outcomes = outcomes.lock().unwrap();
    let (enqueued, acked) = (&outcomes.added, &outcomes.acked);
    assert!(
        enqueued.len() >= 300,
        "workload too small: {}",
        enqueued.len()
    );
    // One transaction: the restarted server's timer may move an expired
    // lease back to the queue between two separate reads, which would make
    // it look lost.
    let (queued, inflight): (Vec<String>, Vec<String>) = redis::pipe()
        .atomic()
        .cmd("VTRR.INSPECT")
        .arg("crash")
        .arg("queue")
        .cmd("VTRR.INSPECT")
        .arg("crash")
        .arg("inflight")
        .query(&mut con)
        .unwrap();
    let queued: BTreeSet<String> = members(queued);
    let inflight: BTreeSet<String> = members(inflight);
    assert!(
        queued.is_disjoint(&inflight),
        "an id is both queued and leased"
    );
    for id in acked {
        assert!(
            !queued.contains(id) && !inflight.contains(id),
            "acked {id} came back"
        );
    }
    for id in enqueued
        .difference(acked)
        .filter(|id| !outcomes.unknown.contains(*id))
    {
        assert!(
            queued.contains(id) || inflight.contains(id),
            "un-acked {id} was lost"
        );
    }
    assert_invariants(&mut con, "crash");
}

const LIFE: &str = "life";
/// A delay no test outlives.
const FAR_MS: u64 = 1_000_000_000;

/// Adds one item (queued, or delayed: due soon, for the timer or a LEASE
/// to promote, or far in the future), and half the time leases one
/// (WITHCOUNTERS) and then acks it, nacks it (plain, DELAY, DEAD) or keeps
/// it (short leases expire, and past MAX-TIMEOUTS the reclaim dead-letters
/// them); now and then a CANCEL or a REVIVE.
fn lifecycle_crash_step(
    con: &mut Connection,
    rng: &mut Rng,
    n: u64,
    outcomes: &Mutex<Outcomes>,
) -> Result<(), String> {
    let id = format!("job{n}");
    let kind = rng.below(10);
    let mut add = redis::cmd(if kind < 6 {
        "VTRR.ENQUEUE"
    } else {
        "VTRR.DEFER"
    });
    add.arg(LIFE);
    match kind {
        6 | 7 => add.arg(5 + rng.below(50)),
        8 | 9 => add.arg(FAR_MS),
        _ => &mut add,
    };
    let reply = add
        .arg(format!("p{}", n % 7))
        .arg(&id)
        .arg(1 + rng.below(3))
        .arg("payload")
        .query::<i64>(con);
    match reply {
        Ok(1) => {
            outcomes.lock().unwrap().added.insert(id);
        }
        // Killed mid-call: the item may or may not be there, and
        // nothing is claimed about it.
        other => return Err(format!("add stopped: {other:?}")),
    }
    if rng.chance(50) {
        let lease_ms = if rng.chance(30) { 5 } else { 60_000 };
        let leased = redis::cmd("VTRR.LEASE")
            .arg(LIFE)
            .arg(lease_ms)
            .arg("WITHCOUNTERS")
            .query::<Option<(String, Vec<u8>, String, i64, i64)>>(con)
            .map_err(|error| format!("lease stopped: {error}"))?;
        if let Some((leased_id, _, token, _, _)) = leased {
            let mut nack = redis::cmd("VTRR.NACK");
            nack.arg(LIFE).arg(&leased_id).arg(&token);
            let fate = rng.below(20);
            match fate {
                0..=7 => {
                    let acked = redis::cmd("VTRR.ACK")
                        .arg(LIFE)
                        .arg(&leased_id)
                        .arg(&token)
                        .query::<i64>(con);
                    record_removal(outcomes, |o| &mut o.acked, leased_id, acked)
                        .map_err(|error| format!("ack stopped: {error}"))?;
                }
                8..=15 => {
                    match fate {
                        8..=10 => {}
                        11 | 12 => {
                            nack.arg("DELAY").arg(5 + rng.below(50));
                        }
                        13 => {
                            nack.arg("DELAY").arg(FAR_MS);
                        }
                        _ => {
                            nack.arg("DEAD");
                        }
                    }
                    nack.query::<i64>(con)
                        .map_err(|error| format!("nack stopped: {error}"))?;
                }
                _ => {} // kept: it expires, or is still leased at the kill
            }
        }
    }
    if rng.chance(4) {
        let victim = format!("job{}", rng.below(n + 1));
        let cancelled = redis::cmd("VTRR.CANCEL")
            .arg(LIFE)
            .arg(&victim)
            .query::<i64>(con);
        record_removal(outcomes, |o| &mut o.cancelled, victim, cancelled)
            .map_err(|error| format!("cancel stopped: {error}"))?;
    }
    if rng.chance(2) {
        redis::cmd("VTRR.DEAD")
            .arg(LIFE)
            .arg("COUNT")
            .arg(1)
            .query::<Vec<(String, Value, Value, Value, i64, i64, i64, String)>>(con)
            .and_then(|oldest| {
                redis::cmd("VTRR.REVIVE")
                    .arg(LIFE)
                    .arg(oldest.first().map_or("none", |dead| dead.0.as_str()))
                    .query::<i64>(con)
            })
            .map_err(|error| format!("revive stopped: {error}"))?;
    }
    Ok(())
}

/// The members (or fields) of a `VTRR.INSPECT` reply of a sorted set (or
/// hash): every other entry of the flat list, the first.
fn members(flat: Vec<String>) -> BTreeSet<String> {
    flat.into_iter().step_by(2).collect()
}

/// The ids in each of a queue's states — in `queue`, held (queued in
/// `held`, named by `held_at`), leased, delayed, dead — read in one
/// transaction (the timer may move an item between two separate reads),
/// in either layout.
fn states(con: &mut Connection, queue: &str) -> [(&'static str, BTreeSet<String>); 5] {
    const STATES: [&str; 5] = ["queue", "held", "inflight", "delayed", "dead"];
    let mut pipe = redis::pipe();
    pipe.atomic();
    for state in STATES {
        let suffix = if state == "held" { "held_at" } else { state };
        pipe.cmd("VTRR.INSPECT").arg(queue).arg(suffix);
    }
    let ids: Vec<Vec<String>> = pipe.query(con).unwrap();
    let mut ids = ids.into_iter().map(members);
    STATES.map(|state| (state, ids.next().unwrap()))
}

/// A partition of the lifecycle crash workload (items n with n % 7 == 5)
/// paused throughout: its items wait in `held`.
const PAUSED: &str = "p5";
/// A partition of the lifecycle crash workload (n % 7 == 6) capped at one
/// lease: its other queued items wait in `held` while one is out.
const CAPPED: &str = "p6";

#[test]
fn kill_9_with_items_in_every_state_loses_nothing_in_commands_mode() {
    kill_9_with_items_in_every_state_loses_nothing("commands");
}

#[test]
fn kill_9_with_items_in_every_state_loses_nothing_in_effects_mode() {
    kill_9_with_items_in_every_state_loses_nothing("effects");
}

fn kill_9_with_items_in_every_state_loses_nothing(mode: &str) {
    let mut server = durable_server(mode);
    let mut con = server.connect();
    set_policy(&mut con, LIFE, &["MAX-TIMEOUTS", "1", "MAX-NACKS", "2"]);
    let paused: i64 = command(&["VTRR.PAUSE", LIFE, PAUSED])
        .query(&mut con)
        .unwrap();
    assert_eq!(paused, 1);
    let capped: Value = command(&["VTRR.LIMIT", LIFE, CAPPED, "CONCURRENCY", "1"])
        .query(&mut con)
        .unwrap();
    assert_eq!(capped, Value::Okay);
    let (outcomes, stop, worker) = start_workload(&server, lifecycle_crash_step);
    // Kill only once items are in every state: queued, held (of the paused
    // partition, and of the capped one while it has a lease out), leased,
    // delayed, dead, and acked ones gone.
    wait_until(Duration::from_secs(30), "items were in every state", || {
        let stats = stats(&mut con, LIFE);
        let at_least = |field: &str, n: i64| matches!(stats[field], Value::Int(m) if m >= n);
        assert!(
            !worker.is_finished(),
            "the workload stopped before the kill"
        );
        let capped = partition_view(&mut con, LIFE, CAPPED);
        let outcomes = outcomes.lock().unwrap();
        outcomes.added.len() >= 300
            && outcomes.acked.len() >= 20
            && ["queued", "held", "inflight", "delayed", "dead"]
                .iter()
                .all(|field| at_least(field, 10))
            && capped["leased"] == Value::Int(1)
            && matches!(capped["held"], Value::Int(n) if n >= 2)
    });
    let mut con = kill_9_and_restart(&mut server, &stop, worker);
    let outcomes = outcomes.lock().unwrap();
    let states = states(&mut con, LIFE);
    for (i, (state, ids)) in states.iter().enumerate() {
        assert!(!ids.is_empty(), "no {state} item survived the restart");
        for (other, other_ids) in &states[i + 1..] {
            let both: Vec<_> = ids.intersection(other_ids).collect();
            assert!(both.is_empty(), "in both {state} and {other}: {both:?}");
        }
    }
    let state_of = |id: &String| -> Vec<&str> {
        states
            .iter()
            .filter(|(_, ids)| ids.contains(id))
            .map(|(state, _)| *state)
            .collect()
    };
    for (gone, ids) in [
        ("acked", &outcomes.acked),
        ("cancelled", &outcomes.cancelled),
    ] {
        for id in ids {
            let found = state_of(id);
            assert!(found.is_empty(), "{gone} {id} came back in {found:?}");
        }
    }
    let mut alive = 0;
    for id in outcomes
        .added
        .iter()
        .filter(|id| !outcomes.acked.contains(*id))
        .filter(|id| !outcomes.cancelled.contains(*id))
        .filter(|id| !outcomes.unknown.contains(*id))
    {
        assert_eq!(state_of(id).len(), 1, "{id} was lost");
        alive += 1;
    }
    eprintln!(
        "{} added, {} acked, {} cancelled, {} unknown, {alive} alive: {}",
        outcomes.added.len(),
        outcomes.acked.len(),
        outcomes.cancelled.len(),
        outcomes.unknown.len(),
        states
            .iter()
            .map(|(state, ids)| format!("{} {state}", ids.len()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // The pause and the cap survived, and the cap still holds.
    let paused = partition_view(&mut con, LIFE, PAUSED);
    assert_eq!(
        (&paused["paused"], &paused["leased"]),
        (&Value::Int(1), &Value::Int(0)),
        "{paused:?}"
    );
    assert!(
        matches!(paused["held"], Value::Int(n) if n > 0),
        "{paused:?}"
    );
    let capped = partition_view(&mut con, LIFE, CAPPED);
    assert_eq!(capped["concurrency"], Value::Int(1), "{capped:?}");
    assert!(matches!(capped["leased"], Value::Int(0 | 1)), "{capped:?}");
    assert_invariants(&mut con, LIFE);
}

/// Argument values chosen to break parsers.
fn nasty_arg(rng: &mut Rng) -> Vec<u8> {
    const WORDS: [&str; 48] = [
        "fz",
        "wt",
        "",
        "0",
        "1",
        "2",
        "-1",
        "10",
        "1000",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "1.5",
        "1e3",
        " 1",
        "+1",
        "01",
        "abc",
        "COUNT",
        "count",
        "LIMIT",
        "BLOCK",
        "p:x",
        "nan",
        // The lifecycle commands' options and bounds.
        "DELAY",
        "delay",
        "DEAD",
        "MAX-TIMEOUTS",
        "max-nacks",
        "MAX-NACKS",
        "NONE",
        "WITHCOUNTERS",
        "315360000000",
        "315360000001",
        "1000000000",
        "1000000001",
        "seed",
        "stale",
        // The tenant controls' options and bounds.
        "CONCURRENCY",
        "concurrency",
        "SHARE",
        "DEFAULT-CONCURRENCY",
        "PARTITION",
        "CURSOR",
        "1000000",
        "1000001",
        "10000",
        "10001",
    ];
    match rng.below(10) {
        0 => (0..rng.below(16)).map(|_| rng.below(256) as u8).collect(), // binary, invalid UTF-8, NUL
        1 if rng.chance(3) => vec![b'x'; 1 << 20],                       // 1 MB
        _ => WORDS[rng.below(WORDS.len() as u64) as usize]
            .as_bytes()
            .to_vec(),
    }
}

/// Every command the fuzz calls.
const FUZZED: [&str; 18] = [
    "VTRR.ENQUEUE",
    "VTRR.DEFER",
    "VTRR.LEASE",
    "VTRR.ACK",
    "VTRR.RENEW",
    "VTRR.NACK",
    "VTRR.RECLAIM",
    "VTRR.STATS",
    "VTRR.CHECK",
    "VTRR.POLICY",
    "VTRR.DEAD",
    "VTRR.REVIVE",
    "VTRR.CANCEL",
    "VTRR.LIMIT",
    "VTRR.PAUSE",
    "VTRR.RESUME",
    "VTRR.PARTITIONS",
    "VTRR.RECOUNT",
];

/// The commands of shaped calls, weighted so items keep flowing: enough
/// enqueues and leases to nack, enough deaths to revive, and caps and
/// pauses that come and go.
const SHAPED_MIX: [&str; 28] = [
    "VTRR.ENQUEUE",
    "VTRR.ENQUEUE",
    "VTRR.ENQUEUE",
    "VTRR.DEFER",
    "VTRR.DEFER",
    "VTRR.LEASE",
    "VTRR.LEASE",
    "VTRR.LEASE",
    "VTRR.LEASE",
    "VTRR.NACK",
    "VTRR.NACK",
    "VTRR.NACK",
    "VTRR.ACK",
    "VTRR.RENEW",
    "VTRR.RECLAIM",
    "VTRR.STATS",
    "VTRR.CHECK",
    "VTRR.POLICY",
    "VTRR.DEAD",
    "VTRR.REVIVE",
    "VTRR.REVIVE",
    "VTRR.CANCEL",
    "VTRR.LIMIT",
    "VTRR.LIMIT",
    "VTRR.PAUSE",
    "VTRR.RESUME",
    "VTRR.PARTITIONS",
    "VTRR.RECOUNT",
];

/// One of `options`, or now and then a nasty value instead.
fn one_of(rng: &mut Rng, options: &[&str]) -> Vec<u8> {
    if rng.chance(8) {
        return nasty_arg(rng);
    }
    options[rng.below(options.len() as u64) as usize]
        .as_bytes()
        .to_vec()
}

/// An (id, token) pair: mostly a lease seen recently (current or stale by
/// now), else made up.
fn lease_pair(rng: &mut Rng, leases: &[(Vec<u8>, Vec<u8>)]) -> [Vec<u8>; 2] {
    if !leases.is_empty() && rng.chance(85) {
        // The newest most often: it is the likeliest to be still current.
        let back = if rng.chance(50) {
            0
        } else {
            rng.below(8) as usize
        };
        let (id, token) = &leases[leases.len() - 1 - back.min(leases.len() - 1)];
        return [id.clone(), token.clone()];
    }
    [one_of(rng, ITEM_IDS), one_of(rng, &["stale", ""])]
}

const ITEM_IDS: &[&str] = &["seed", "a", "b", "c", "d", "e"];

/// Arguments shaped like `command`'s syntax, each value drawn from a few
/// plausible ones (now and then a nasty one), so calls often succeed and
/// drive items through every state: leased, nacked, delayed, dead,
/// revived, cancelled.
fn shaped_args(command: &str, rng: &mut Rng, leases: &[(Vec<u8>, Vec<u8>)]) -> Vec<Vec<u8>> {
    let mut args = vec![one_of(rng, &["fz", "fz", "fz", "fz", "fz", "wt"])];
    let items = |rng: &mut Rng, args: &mut Vec<Vec<u8>>| {
        for _ in 0..1 + rng.below(2) {
            args.push(one_of(rng, &["p", "q", ""]));
            args.push(one_of(rng, ITEM_IDS));
            args.push(one_of(rng, &["1", "2", "3"]));
            args.push(one_of(rng, &["P", "", "payload"]));
        }
    };
    match command {
        "VTRR.ENQUEUE" => items(rng, &mut args),
        "VTRR.DEFER" => {
            args.push(one_of(rng, &["0", "1", "5", "60000"]));
            items(rng, &mut args);
        }
        "VTRR.LEASE" => {
            args.push(one_of(rng, &["1", "5", "60000"]));
            if rng.chance(30) {
                args.extend([b"COUNT".to_vec(), one_of(rng, &["1", "3"])]);
            }
            if rng.chance(50) {
                args.push(b"WITHCOUNTERS".to_vec());
            }
            if rng.chance(3) {
                // Blocks at most about one `hz` tick on an empty queue.
                args.extend([b"BLOCK".to_vec(), b"1".to_vec()]);
            }
        }
        "VTRR.ACK" => {
            for _ in 0..1 + rng.below(2) {
                args.extend(lease_pair(rng, leases));
            }
        }
        "VTRR.RENEW" => {
            args.extend(lease_pair(rng, leases));
            args.push(one_of(rng, &["1", "60000"]));
        }
        "VTRR.NACK" => {
            args.extend(lease_pair(rng, leases));
            match rng.below(5) {
                0 => args.extend([b"DELAY".to_vec(), one_of(rng, &["0", "1", "5", "60000"])]),
                1 => args.push(b"DEAD".to_vec()),
                2 if rng.chance(20) => {
                    args.extend([b"DELAY".to_vec(), b"1".to_vec(), b"DEAD".to_vec()])
                }
                _ => {}
            }
        }
        "VTRR.RECLAIM" if rng.chance(30) => {
            args.extend([b"LIMIT".to_vec(), one_of(rng, &["1", "2"])]);
        }
        "VTRR.POLICY" => {
            for option in ["MAX-TIMEOUTS", "MAX-NACKS"] {
                if rng.chance(40) {
                    args.push(option.as_bytes().to_vec());
                    args.push(one_of(rng, &["0", "1", "2", "NONE", "none"]));
                }
            }
            if rng.chance(30) {
                args.push(b"DEFAULT-CONCURRENCY".to_vec());
                args.push(one_of(rng, &["1", "2", "NONE", "NONE", "0"]));
            }
        }
        "VTRR.LIMIT" => {
            args.push(one_of(rng, &["p", "p", "q", ""]));
            // Else the reading form.
            if rng.chance(75) {
                if rng.chance(70) {
                    args.push(b"CONCURRENCY".to_vec());
                    args.push(one_of(rng, &["1", "2", "NONE", "NONE", "0"]));
                }
                if rng.chance(40) {
                    args.extend([b"SHARE".to_vec(), one_of(rng, &["1", "3", "0"])]);
                }
            }
        }
        "VTRR.PAUSE" | "VTRR.RESUME" => args.push(one_of(rng, &["p", "q", ""])),
        "VTRR.PARTITIONS" => match rng.below(4) {
            0 => args.extend([b"PARTITION".to_vec(), one_of(rng, &["p", "q", "none", ""])]),
            1 => args.extend([b"COUNT".to_vec(), one_of(rng, &["1", "10", "0"])]),
            2 => args.extend([
                b"CURSOR".to_vec(),
                one_of(rng, &["0", "1", "x"]),
                b"COUNT".to_vec(),
                one_of(rng, &["2", "10000", "10001"]),
            ]),
            _ => {}
        },
        "VTRR.DEAD" if rng.chance(40) => {
            args.extend([b"COUNT".to_vec(), one_of(rng, &["1", "5"])]);
        }
        "VTRR.REVIVE" | "VTRR.CANCEL" => {
            for _ in 0..1 + rng.below(2) {
                args.push(one_of(rng, ITEM_IDS));
            }
        }
        _ => {}
    }
    args
}

/// A LEASE ... BLOCK on an empty queue waits for its timeout (0: forever,
/// 1000000000: eleven days): timeouts of 0 and from 11 ms up to the largest
/// valid one (a year) become 10 ms, so the run never hangs; out-of-range
/// and malformed ones stay, to be refused.
fn cap_block_timeouts(args: &mut [Vec<u8>]) {
    const MAX_BLOCK_MS: i64 = 31_536_000_000;
    for i in 1..args.len() {
        if args[i - 1].eq_ignore_ascii_case(b"BLOCK") {
            let timeout = std::str::from_utf8(&args[i])
                .ok()
                .and_then(|s| s.parse::<i64>().ok());
            if timeout.is_some_and(|ms| ms == 0 || (11..=MAX_BLOCK_MS).contains(&ms)) {
                args[i] = b"10".to_vec();
            }
        }
    }
}

fn snapshot(con: &mut Connection) -> Vec<(String, Option<Vec<u8>>)> {
    let mut all = dump_queue(con, "fz");
    all.extend(dump_queue(con, "wt"));
    all
}

#[test]
fn random_arguments_always_get_a_reply_and_failures_change_nothing() {
    let server = quiet_server();
    let mut con = server.connect();
    for words in [
        // A queue whose keys hold wrong types.
        &["SET", "vtrr:wt:task", "not a hash"][..],
        &["LPUSH", "vtrr:wt:queue", "not a zset"],
        &["HSET", "vtrr:wt:current_virtual_time", "f", "v"],
        // ... and among the lifecycle keys, so ACK, DEAD and POLICY are
        // refused on it too.
        &["SET", "vtrr:wt:nacks", "not a hash"],
        &["LPUSH", "vtrr:wt:policy", "not a hash"],
        // ... and `partitions`, the one key LIMIT's reading form opens.
        &["LPUSH", "vtrr:wt:partitions", "not a hash"],
    ] {
        let _: () = command(words).query(&mut con).unwrap();
    }
    enqueue_one(&mut con, "fz", "p", "seed", "S");
    let mut rng = Rng::new(seed());
    let (mut ok, mut failed) = (0, 0);
    // Per command: calls answered, calls refused.
    let mut per_command: std::collections::BTreeMap<&str, (u64, u64)> =
        FUZZED.iter().map(|c| (*c, (0, 0))).collect();
    // Replies of 1 from NACK and REVIVE on fz: items really moved; from
    // PAUSE and RESUME: partitions really stopped and started.
    let (mut nacked, mut revived, mut paused, mut resumed) = (0, 0, 0, 0);
    let mut leases: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    // `make fuzz` runs a longer campaign through VTRR_FUZZ_CALLS.
    let calls: usize = std::env::var("VTRR_FUZZ_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2500);
    for _ in 0..calls {
        let shaped = rng.chance(50);
        let command = if shaped {
            SHAPED_MIX[rng.below(SHAPED_MIX.len() as u64) as usize]
        } else {
            FUZZED[rng.below(FUZZED.len() as u64) as usize]
        };
        let mut args = if shaped {
            shaped_args(command, &mut rng, &leases)
        } else {
            let mut args: Vec<Vec<u8>> = (0..rng.below(11)).map(|_| nasty_arg(&mut rng)).collect();
            // Mostly aim at the two watched queues, so the before/after check bites.
            if !args.is_empty() && rng.chance(80) {
                args[0] = if rng.chance(70) {
                    b"fz".to_vec()
                } else {
                    b"wt".to_vec()
                };
            }
            args
        };
        if command == "VTRR.LEASE" {
            cap_block_timeouts(&mut args);
        }
        let before = snapshot(&mut con);
        let result: redis::RedisResult<Value> = redis::cmd(command).arg(&args).query(&mut con);
        let counts = per_command.get_mut(command).unwrap();
        match result {
            Ok(reply) => {
                ok += 1;
                counts.0 += 1;
                if args.first().is_some_and(|queue| queue == b"fz") {
                    match command {
                        "VTRR.LEASE" => leases.extend(leases_in(&reply)),
                        "VTRR.NACK" if reply == Value::Int(1) => nacked += 1,
                        "VTRR.REVIVE" if reply != Value::Int(0) => revived += 1,
                        "VTRR.PAUSE" if reply == Value::Int(1) => paused += 1,
                        "VTRR.RESUME" if reply == Value::Int(1) => resumed += 1,
                        _ => {}
                    }
                }
            }
            Err(error) => {
                failed += 1;
                counts.1 += 1;
                assert!(
                    error.code().is_some(),
                    "{command}: not a server error reply: {error}"
                );
                assert_eq!(
                    before,
                    snapshot(&mut con),
                    "{command} {:?} failed ({error}) but changed keys",
                    args.iter()
                        .map(|a| String::from_utf8_lossy(&a[..a.len().min(30)]).into_owned())
                        .collect::<Vec<_>>()
                );
            }
        }
        if rng.chance(10) {
            assert_invariants(&mut con, "fz");
        }
    }
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert_invariants(&mut con, "fz");
    eprintln!("{ok} calls succeeded, {failed} were refused");
    eprintln!("per command (answered, refused): {per_command:?}");
    eprintln!(
        "{} leases seen, {nacked} nacks, {revived} revives, {paused} pauses and {resumed} resumes took effect",
        leases.len()
    );
    assert!(
        ok > 50 && failed > 50,
        "the generator should exercise both paths: {ok} ok, {failed} refused"
    );
    if calls >= 2000 {
        for (command, (answered, refused)) in &per_command {
            assert!(
                *answered > 0 && *refused > 0,
                "{command} should be both answered and refused: {answered} answered, {refused} refused"
            );
        }
        assert!(
            nacked > 0 && revived > 0 && paused > 0 && resumed > 0,
            "the shaped calls should move items: {nacked} nacks, {revived} revives, {paused} pauses, {resumed} resumes took effect"
        );
    }
}

#[test]
fn a_full_server_refuses_enqueue_but_can_still_drain() {
    let server = Server::builder()
        .args(&[
            "--maxmemory-policy",
            "noeviction",
            "--enable-debug-command",
            "yes",
        ])
        .spawn();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    let _: () = redis::cmd("DEBUG")
        .arg("POPULATE")
        .arg(20_000)
        .query(&mut con)
        .unwrap();
    let info: String = redis::cmd("INFO").arg("memory").query(&mut con).unwrap();
    let used: i64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used - 200_000)
        .query(&mut con)
        .unwrap();
    let refused = redis::cmd("VTRR.ENQUEUE")
        .arg("q")
        .arg("p")
        .arg("c")
        .arg(1)
        .arg("C")
        .query::<i64>(&mut con)
        .unwrap_err();
    assert_eq!(refused.code(), Some("OOM"), "{refused}");
    let (id, _, token, _) = lease(&mut con, "q", 60_000).expect("LEASE works on a full server");
    assert_eq!(ack(&mut con, "q", &id, &token), 1);
}
