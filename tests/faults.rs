//! Faults and hostile input: kill -9 under load with appendfsync always,
//! random argument fuzzing against a live server (every call answered, failed
//! calls change nothing), and running out of memory.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use redis::Connection;

#[test]
fn kill_9_mid_workload_loses_and_duplicates_nothing() {
    let mut server = Server::builder()
        .module_args(&["reclaim-interval-ms", "20"])
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .spawn();
    let enqueued = Arc::new(Mutex::new(BTreeSet::new()));
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let unknown = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let url = server.url();
    let worker = {
        let (enqueued, acked, unknown, stop) = (
            enqueued.clone(),
            acked.clone(),
            unknown.clone(),
            stop.clone(),
        );
        std::thread::spawn(move || {
            let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
            let mut rng = Rng::new(seed());
            for n in 0u64.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let id = format!("job{n}");
                let reply: redis::RedisResult<i64> = redis::cmd("VTRR.ENQUEUE")
                    .arg("crash")
                    .arg(format!("p{}", n % 7))
                    .arg(&id)
                    .arg(1 + rng.below(3))
                    .arg("payload")
                    .query(&mut con);
                match reply {
                    Ok(1) => {
                        enqueued.lock().unwrap().insert(id);
                    }
                    other => {
                        eprintln!("enqueue stopped: {other:?}");
                        break;
                    } // the server died mid-call: outcome unknown
                }
                let leased: redis::RedisResult<Option<(String, String, String, i64)>> =
                    redis::cmd("VTRR.LEASE")
                        .arg("crash")
                        .arg(if rng.chance(30) { 5 } else { 60_000 })
                        .query(&mut con);
                let Ok(Some((leased_id, _, token, _))) = leased else {
                    eprintln!("lease stopped: {leased:?}");
                    break;
                };
                if rng.chance(70) {
                    match redis::cmd("VTRR.ACK")
                        .arg("crash")
                        .arg(&leased_id)
                        .arg(&token)
                        .query::<i64>(&mut con)
                    {
                        Ok(1) => {
                            acked.lock().unwrap().insert(leased_id);
                        }
                        Ok(_) => {}
                        Err(_) => {
                            // Killed during the ACK: it may or may not have applied.
                            unknown.lock().unwrap().insert(leased_id);
                            break;
                        }
                    }
                }
            }
        })
    };
    // appendfsync always makes every write wait for the disk: let the
    // workload get going, then kill at an arbitrary point.
    assert!(
        wait_for(Duration::from_secs(20), || enqueued.lock().unwrap().len()
            >= 300),
        "workload did not start"
    );
    server.kill();
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    server.restart();
    let mut con = server.connect();
    let enqueued = enqueued.lock().unwrap().clone();
    let acked = acked.lock().unwrap().clone();
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
        .cmd("ZRANGE")
        .arg("vtrr:crash:queue")
        .arg(0)
        .arg(-1)
        .cmd("ZRANGE")
        .arg("vtrr:crash:inflight")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    let queued: BTreeSet<String> = queued.into_iter().collect();
    let inflight: BTreeSet<String> = inflight.into_iter().collect();
    assert!(
        queued.is_disjoint(&inflight),
        "an id is both queued and leased"
    );
    for id in &acked {
        assert!(
            !queued.contains(id) && !inflight.contains(id),
            "acked {id} came back"
        );
    }
    let unknown = unknown.lock().unwrap().clone();
    for id in enqueued
        .difference(&acked)
        .filter(|id| !unknown.contains(*id))
    {
        assert!(
            queued.contains(id) || inflight.contains(id),
            "un-acked {id} was lost"
        );
    }
    assert_invariants(&mut con, "crash");
}

/// Argument values chosen to break parsers.
fn nasty_arg(rng: &mut Rng) -> Vec<u8> {
    const WORDS: [&str; 24] = [
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
    ];
    match rng.below(10) {
        0 => (0..rng.below(16)).map(|_| rng.below(256) as u8).collect(), // binary, invalid UTF-8, NUL
        1 if rng.chance(3) => vec![b'x'; 1 << 20],                       // 1 MB
        _ => WORDS[rng.below(WORDS.len() as u64) as usize]
            .as_bytes()
            .to_vec(),
    }
}

fn snapshot(con: &mut Connection) -> Vec<(String, Option<Vec<u8>>)> {
    let mut all = dump_queue(con, "fz");
    all.extend(dump_queue(con, "wt"));
    all
}

#[test]
fn random_arguments_always_get_a_reply_and_failures_change_nothing() {
    let server = Server::builder()
        .module_args(&["reclaim-interval-ms", "0"])
        .spawn();
    let mut con = server.connect();
    // A queue whose keys hold wrong types.
    let _: () = redis::cmd("SET")
        .arg("vtrr:wt:task")
        .arg("not a hash")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("LPUSH")
        .arg("vtrr:wt:queue")
        .arg("not a zset")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("vtrr:wt:current_virtual_time")
        .arg("f")
        .arg("v")
        .query(&mut con)
        .unwrap();
    enqueue_one(&mut con, "fz", "p", "seed", "S");
    const COMMANDS: [&str; 7] = [
        "VTRR.ENQUEUE",
        "VTRR.LEASE",
        "VTRR.ACK",
        "VTRR.RENEW",
        "VTRR.RECLAIM",
        "VTRR.STATS",
        "VTRR.CHECK",
    ];
    let mut rng = Rng::new(seed());
    let (mut ok, mut failed) = (0, 0);
    // `make fuzz` runs a longer campaign through VTRR_FUZZ_CALLS.
    let calls: usize = std::env::var("VTRR_FUZZ_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2500);
    for _ in 0..calls {
        let command = COMMANDS[rng.below(COMMANDS.len() as u64) as usize];
        let mut args: Vec<Vec<u8>> = (0..rng.below(11)).map(|_| nasty_arg(&mut rng)).collect();
        // Mostly aim at the two watched queues, so the before/after check bites.
        if !args.is_empty() && rng.chance(80) {
            args[0] = if rng.chance(70) {
                b"fz".to_vec()
            } else {
                b"wt".to_vec()
            };
        }
        let before = snapshot(&mut con);
        let result: redis::RedisResult<Value> = redis::cmd(command).arg(&args).query(&mut con);
        match result {
            Ok(_) => ok += 1,
            Err(error) => {
                failed += 1;
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
    assert!(
        ok > 50 && failed > 50,
        "the generator should exercise both paths: {ok} ok, {failed} refused"
    );
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
