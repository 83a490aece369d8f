//! Faults: kill -9 under load with appendfsync always (also with items in
//! every state of the job lifecycle, a paused partition and a capped one
//! among them), and running out of memory. Hostile input has its own
//! suite (hostile.rs).

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
            .query::<Vec<(String, Value, Value, Value, i64, i64, i64, String, Value)>>(con)
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
