//! Every write reaches replicas and the AOF as effects: after a random
//! workload of every command (the job lifecycle's DEFER, NACK, POLICY,
//! REVIVE and CANCEL and the tenant controls' LIMIT, PAUSE, RESUME,
//! DEFAULT-CONCURRENCY and RECOUNT included, large enough that the
//! lifecycle keys and `partitions`, `held` and `held_at` are hash tables
//! and skip lists, not listpacks) a replica's keys hold the
//! master's content, whether or not the replica loads the module, and an
//! AOF/RDB reload gives the same content. Content, not DUMP bytes: a hash
//! table's DUMP lists entries in table order, which two servers with equal
//! content need not share.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use redis::Connection;

/// A random workload of every command, including expiring leases that the
/// master's timer (50 ms) and LEASE reclaim.
fn workload(con: &mut Connection, seed: u64, queue: &str) {
    let mut rng = Rng::new(seed);
    for step in 0..300u64 {
        let id = format!("i{}", rng.below(50));
        match rng.below(8) {
            6 => {
                // From Lua: the script's effects are what replicates.
                let _: Value = redis::cmd("EVAL")
                    .arg("return redis.call('VTRR.LEASE', KEYS[1], ARGV[1], 'COUNT', ARGV[2])")
                    .arg(1)
                    .arg(queue)
                    .arg(1 + rng.below(20))
                    .arg(1 + rng.below(3))
                    .query(con)
                    .unwrap();
            }
            7 => {
                // Inside MULTI/EXEC.
                let _: Value = redis::pipe()
                    .atomic()
                    .cmd("VTRR.ENQUEUE")
                    .arg(queue)
                    .arg("multi")
                    .arg(&id)
                    .arg(1)
                    .arg("M")
                    .cmd("VTRR.LEASE")
                    .arg(queue)
                    .arg(1 + rng.below(20))
                    .cmd("VTRR.RECLAIM")
                    .arg(queue)
                    .query(con)
                    .unwrap();
            }
            0 | 1 => {
                let mut cmd = redis::cmd("VTRR.ENQUEUE");
                cmd.arg(queue);
                maybe_priority(&mut cmd, &mut rng);
                let _: i64 = cmd
                    .arg(format!("p{}", rng.below(5)))
                    .arg(&id)
                    .arg(1 + rng.below(3))
                    .arg(format!("payload-{step}"))
                    .query(con)
                    .unwrap();
            }
            2 => {
                let lease_ms = if rng.chance(50) {
                    1 + rng.below(20)
                } else {
                    600_000
                };
                let _: Value = redis::cmd("VTRR.LEASE")
                    .arg(queue)
                    .arg(lease_ms)
                    .arg("COUNT")
                    .arg(1 + rng.below(3))
                    .query(con)
                    .unwrap();
            }
            3 | 4 => {
                if let Some(token) = key_hget(con, queue, "lease", &id) {
                    let command = match rng.below(10) {
                        0..=3 => "VTRR.ACK",
                        4..=6 => "VTRR.ACKCOST",
                        _ => "VTRR.RENEW",
                    };
                    let mut cmd = redis::cmd(command);
                    cmd.arg(queue).arg(&id).arg(token);
                    match command {
                        "VTRR.RENEW" if rng.chance(50) => {
                            cmd.arg(1 + rng.below(30)).arg("COST").arg(rng.below(6))
                        }
                        "VTRR.RENEW" => cmd.arg(1 + rng.below(30)),
                        // Below, at and above the weights (1..=3): charges
                        // that move held items, heads and parkings.
                        "VTRR.ACKCOST" => cmd.arg(1 + rng.below(12)),
                        _ => &mut cmd,
                    };
                    let _: i64 = cmd.query(con).unwrap();
                }
            }
            _ => {
                reclaim(con, queue);
            }
        }
        if rng.chance(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // Let some leases expire and be reclaimed by the timer alone.
    std::thread::sleep(Duration::from_millis(200));
}

/// A far-future delay: items deferred by it never fall due during a test.
const FAR_MS: u64 = 1_000_000_000;

/// `VTRR.DEFER queue delay_ms` of `ids`, each in a random partition (p0-p4)
/// with a random weight (1-3).
fn defer(con: &mut Connection, rng: &mut Rng, queue: &str, delay_ms: u64, ids: &[String]) {
    let mut cmd = redis::cmd("VTRR.DEFER");
    cmd.arg(queue).arg(delay_ms);
    maybe_priority(&mut cmd, rng);
    for id in ids {
        cmd.arg(format!("p{}", rng.below(5)))
            .arg(id)
            .arg(1 + rng.below(3))
            .arg(format!("deferred-{id}"));
    }
    let _: i64 = cmd.query(con).unwrap();
}

/// The dead-letter policy the lifecycle workload starts and ends with.
const DEAD_LETTER_POLICY: [&str; 4] = ["MAX-TIMEOUTS", "1", "MAX-NACKS", "2"];

/// Partitions of the tenant controls' bulk (`b0`, `b1`, ...): more than
/// Redis keeps in a listpack hash (512).
const BULK_PARTITIONS: u64 = 600;

/// `PRIORITY <level>` a third of the time (levels above and below 0, the
/// extremes among them), else nothing: ENQUEUE's and DEFER's.
fn maybe_priority(cmd: &mut redis::Cmd, rng: &mut Rng) {
    if rng.chance(33) {
        let levels = [-100, -3, 2, 100];
        cmd.arg("PRIORITY").arg(levels[rng.below(4) as usize]);
    }
}

/// A NACK's `REASON` half the time: what failed, binary, naming `id` (the
/// item keeps it as its last error).
fn maybe_reason(rng: &mut Rng, id: &[u8]) -> Option<Vec<u8>> {
    rng.chance(50)
        .then(|| [&b"boom \x00\xff\r\n at "[..], id].concat())
}

/// `<option> <n> PER <ms> BURST <b>` (a quarter of the time), `<option>
/// NONE` (another quarter) or nothing: RATE of LIMIT, DEFAULT-RATE and RATE
/// of POLICY.
fn maybe_rate(cmd: &mut redis::Cmd, rng: &mut Rng, option: &str) {
    match rng.below(4) {
        0 => {
            cmd.arg(option)
                .arg(1 + rng.below(5))
                .arg("PER")
                .arg(1 + rng.below(50))
                .arg("BURST")
                .arg(1 + rng.below(3));
        }
        1 => {
            cmd.arg(option).arg("NONE");
        }
        _ => {}
    }
}

/// A partition the random part puts under tenant controls: one of the
/// workloads' own (p0-p4), now and then one of the bulk.
fn controlled_partition(rng: &mut Rng) -> String {
    if rng.chance(25) {
        format!("b{}", rng.below(BULK_PARTITIONS))
    } else {
        format!("p{}", rng.below(5))
    }
}

/// The job lifecycle and the tenant controls, on `queue` under a
/// dead-letter policy: DEFER (due soon, for the timer or LEASE to promote,
/// and far in the future), NACK (plain, DELAY, DEAD), leases left to expire
/// until MAX-TIMEOUTS dead-letters them, MAX-NACKS, REVIVE, CANCEL, POLICY
/// changes, and among them LIMIT (CONCURRENCY and SHARE), PAUSE, RESUME,
/// POLICY DEFAULT-CONCURRENCY and RECOUNT (after the reference Lua enqueue
/// script wrote behind the module's back); some of it from Lua and inside
/// MULTI/EXEC. Large enough that `delayed`, `dead` and their hashes (more
/// than 512 entries), and `partitions`, `held` and `held_at` (600
/// partitions, paused or capped, with two items each) leave the listpack
/// encoding before the random part runs.
fn lifecycle_workload(con: &mut Connection, seed: u64, queue: &str) {
    let mut rng = Rng::new(seed ^ 0x5eed);
    let lua = LuaScripts::load(con);
    let mut leases: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    // Ids are numbered life1, life2, ...: `made` so far.
    let mut made = 0u64;
    fn fresh(n: u64, made: &mut u64) -> Vec<String> {
        (0..n)
            .map(|_| {
                *made += 1;
                format!("life{made}")
            })
            .collect()
    }
    set_policy(con, queue, &DEAD_LETTER_POLICY);
    // A schedule firing every few milliseconds through the whole workload
    // (runs fired by the timer and by LEASEs' due steps, all replicated),
    // removed before the snapshots; and one whose only run is in 2045,
    // left (`schedules`, `schedule_due`): far off, yet within what one cron
    // search looks ahead (about 21 years; a time bomb for 2045, to move then).
    for (name, timing) in [
        ("pulse", vec!["EVERY", "7"]),
        ("far", vec!["CRON", "0 0 0 1 1 * 2045"]),
    ] {
        let _: i64 = redis::cmd("VTRR.SCHEDULE")
            .arg(queue)
            .arg(name)
            .arg(timing)
            .arg(vec!["PARTITION", "sched", "PAYLOAD", "S", "MISSED", "all"])
            .query(con)
            .unwrap();
    }
    // Bulk first, so the random part works on hash tables and skip lists:
    // more than 512 delayed and dead items (Redis keeps a hash of up to 512
    // entries, a sorted set of up to 128, as a listpack).
    for _ in 0..60 {
        let (far, soon) = (FAR_MS + rng.below(1000), 1 + rng.below(30));
        defer(con, &mut rng, queue, far, &fresh(10, &mut made));
        if rng.chance(30) {
            defer(con, &mut rng, queue, soon, &fresh(4, &mut made));
        }
    }
    for round in 0..5 {
        for _ in 0..4 {
            let mut cmd = redis::cmd("VTRR.ENQUEUE");
            cmd.arg(queue);
            maybe_priority(&mut cmd, &mut rng);
            for id in fresh(50, &mut made) {
                cmd.arg(format!("p{}", rng.below(5)))
                    .arg(id)
                    .arg(1)
                    .arg("P");
            }
            let _: i64 = cmd.query(con).unwrap();
        }
        // Every item queued so far: most die by NACK DEAD, some by
        // MAX-NACKS, some by MAX-TIMEOUTS (their leases of 1 ms below
        // expire twice); the rest are nacked back with or without a delay.
        let reply: Value = redis::cmd("VTRR.LEASE")
            .arg(queue)
            .arg(600_000)
            .arg("COUNT")
            .arg(1000)
            .arg("WITHCOUNTERS")
            .query(con)
            .unwrap();
        let mut nacks = redis::pipe();
        for (id, token) in leases_in(&reply) {
            let nack = nacks.cmd("VTRR.NACK").arg(queue).arg(&id).arg(&token);
            match rng.below(10) {
                0..=5 => {
                    nack.arg("DEAD");
                }
                6 => {
                    nack.arg("DELAY").arg(1 + rng.below(20));
                }
                7 if round < 2 => {
                    nack.arg("DELAY").arg(FAR_MS);
                }
                _ => {}
            }
            if let Some(text) = maybe_reason(&mut rng, &id) {
                nack.arg("REASON").arg(text);
            }
        }
        let _: Vec<i64> = nacks.query(con).unwrap();
        for _ in 0..3 {
            let _: Value = redis::cmd("VTRR.LEASE")
                .arg(queue)
                .arg(1)
                .arg("COUNT")
                .arg(40)
                .query(con)
                .unwrap();
            std::thread::sleep(Duration::from_millis(3));
        }
    }
    // The tenant controls' bulk: every third bulk partition capped at one
    // lease (its head in `queue`, its second item held), the others paused
    // (both items held): 600 records, 1,000 held items. The random part
    // resumes and uncaps only a few of them.
    let mut controls = redis::pipe();
    for k in 0..BULK_PARTITIONS {
        let partition = format!("b{k}");
        if k % 3 == 0 {
            controls
                .cmd("VTRR.LIMIT")
                .arg(queue)
                .arg(&partition)
                .arg("CONCURRENCY")
                .arg(1)
                .arg("SHARE")
                .arg(1 + k % 4);
        } else {
            controls.cmd("VTRR.PAUSE").arg(queue).arg(&partition);
        }
    }
    let _: Vec<Value> = controls.query(con).unwrap();
    for chunk in 0..BULK_PARTITIONS / 100 {
        let mut cmd = redis::cmd("VTRR.ENQUEUE");
        cmd.arg(queue);
        for k in chunk * 100..(chunk + 1) * 100 {
            for id in fresh(2, &mut made) {
                cmd.arg(format!("b{k}")).arg(id).arg(1 + k % 3).arg("B");
            }
        }
        let _: i64 = cmd.query(con).unwrap();
    }
    // A parking longer than one call: `late-pause` has 1,500 items in
    // `queue` when it is paused; the PAUSE parks a call's bound, the random
    // part's LEASEs and the timer the rest (on the master; the replica
    // redoes the same runs).
    let mut cmd = redis::cmd("VTRR.ENQUEUE");
    cmd.arg(queue);
    for id in fresh(1500, &mut made) {
        cmd.arg("late-pause").arg(id).arg(1).arg("L");
    }
    let _: i64 = cmd.query(con).unwrap();
    // In one transaction: the master's timer may go on parking right after.
    // `parking` read through VTRR.INSPECT: member and score, in either layout.
    let (paused, parking): (i64, Vec<Vec<u8>>) = redis::pipe()
        .atomic()
        .cmd("VTRR.PAUSE")
        .arg(queue)
        .arg("late-pause")
        .cmd("VTRR.INSPECT")
        .arg(queue)
        .arg("parking")
        .query(con)
        .unwrap();
    assert_eq!(
        (paused, parking.len() / 2),
        (1, 1),
        "the PAUSE left parking under way"
    );
    // Finished jobs kept a day (no record goes during the test): ACKs and
    // CANCELs record outcomes at the master's time, which replicas must
    // replay, and ENQUEUE's dedup reads them.
    set_policy(
        con,
        queue,
        &["RESULT-TTL", "86400000", "DEDUP-MS", "86400000"],
    );
    for step in 0..1500u64 {
        match rng.below(22) {
            0 | 1 => {
                let n = 1 + rng.below(3);
                let mut cmd = redis::cmd("VTRR.ENQUEUE");
                cmd.arg(queue);
                for id in fresh(n, &mut made) {
                    cmd.arg(format!("p{}", rng.below(5)))
                        .arg(id)
                        .arg(1 + rng.below(3))
                        .arg(format!("payload-{step}"));
                }
                let _: i64 = cmd.query(con).unwrap();
            }
            2 => {
                let ids = fresh(1 + rng.below(3), &mut made);
                let delay = if rng.chance(10) { 0 } else { 1 + rng.below(40) };
                defer(con, &mut rng, queue, delay, &ids);
            }
            3 => {
                let ids = fresh(1 + rng.below(2), &mut made);
                let far = FAR_MS + rng.below(1000);
                defer(con, &mut rng, queue, far, &ids);
            }
            4..=6 => {
                let lease_ms = if rng.chance(40) {
                    1 + rng.below(20)
                } else {
                    600_000
                };
                let mut cmd = redis::cmd("VTRR.LEASE");
                cmd.arg(queue)
                    .arg(lease_ms)
                    .arg("COUNT")
                    .arg(1 + rng.below(5));
                if rng.chance(50) {
                    cmd.arg("WITHCOUNTERS");
                }
                // Settling leases in the same call (replicated as the ACK
                // then the lease).
                if !leases.is_empty() && rng.chance(40) {
                    let with_results = rng.chance(50);
                    cmd.arg(if with_results { "ACKRESULT" } else { "ACK" });
                    for _ in 0..1 + rng.below(2).min(leases.len() as u64 - 1) {
                        let (id, token) =
                            leases.swap_remove(rng.below(leases.len() as u64) as usize);
                        cmd.arg(id).arg(token);
                        if with_results {
                            cmd.arg(format!("result-{step}"));
                        }
                    }
                }
                let reply: Value = cmd.query(con).unwrap();
                leases.extend(leases_in(&reply));
            }
            7..=9 if !leases.is_empty() => {
                let (id, token) = leases.swap_remove(rng.below(leases.len() as u64) as usize);
                let mut nack = redis::cmd("VTRR.NACK");
                nack.arg(queue).arg(&id).arg(&token);
                let how = rng.below(7);
                match how {
                    0 | 1 => {}
                    6 => {
                        nack.arg("RELEASE");
                    }
                    2 => {
                        nack.arg("DELAY").arg(1 + rng.below(30));
                    }
                    3 => {
                        nack.arg("DELAY").arg(FAR_MS);
                    }
                    4 => {
                        nack.arg("DELAY").arg(0);
                    }
                    _ => {
                        nack.arg("DEAD");
                    }
                }
                // A release is no failure: it takes no reason.
                if let Some(text) = maybe_reason(&mut rng, &id).filter(|_| how != 6) {
                    nack.arg("REASON").arg(text);
                }
                let _: i64 = nack.query(con).unwrap();
            }
            10 if !leases.is_empty() => {
                let (id, token) = leases.swap_remove(rng.below(leases.len() as u64) as usize);
                if rng.chance(35) {
                    let _: i64 = ack(con, queue, &id, std::str::from_utf8(&token).unwrap());
                } else if rng.chance(50) {
                    let _: i64 = redis::cmd("VTRR.ACKRESULT")
                        .arg(queue)
                        .arg(&id)
                        .arg(&token)
                        .arg(format!("\x00result {step}"))
                        .query(con)
                        .unwrap();
                } else {
                    leases.push((id.clone(), token.clone()));
                    let lease_ms = if rng.chance(50) {
                        1 + rng.below(30)
                    } else {
                        600_000
                    };
                    let _: i64 = renew(
                        con,
                        queue,
                        &id,
                        std::str::from_utf8(&token).unwrap(),
                        lease_ms,
                    );
                }
            }
            11 => {
                // The oldest dead items back to the queue.
                let oldest = 1 + rng.below(2) as usize;
                let dead: Vec<Vec<u8>> = key_zrange(con, queue, "dead")
                    .into_iter()
                    .take(oldest)
                    .map(|(id, _)| id)
                    .collect();
                if !dead.is_empty() {
                    let _: i64 = redis::cmd("VTRR.REVIVE")
                        .arg(queue)
                        .arg(&dead)
                        .query(con)
                        .unwrap();
                }
            }
            12 => {
                // Any state: ids drawn from everything made so far.
                let mut cmd = redis::cmd("VTRR.CANCEL");
                cmd.arg(queue);
                for _ in 0..1 + rng.below(2) {
                    cmd.arg(format!("life{}", 1 + rng.below(made.max(1))));
                }
                let _: i64 = cmd.query(con).unwrap();
            }
            13 => {
                let limit = |rng: &mut Rng| match rng.below(4) {
                    0 => "NONE".to_string(),
                    n => n.to_string(),
                };
                let _: () = redis::cmd("VTRR.POLICY")
                    .arg(queue)
                    .arg("MAX-TIMEOUTS")
                    .arg(limit(&mut rng))
                    .arg("MAX-NACKS")
                    .arg(limit(&mut rng))
                    .query(con)
                    .unwrap();
            }
            14 => {
                // From Lua: the script's effects are what replicates.
                let id = fresh(1, &mut made).remove(0);
                let reply: Value = redis::cmd("EVAL")
                    .arg(
                        "redis.call('VTRR.DEFER', KEYS[1], ARGV[1], 'lua', ARGV[2], 1, 'L') \
                         return redis.call('VTRR.LEASE', KEYS[1], ARGV[3], 'COUNT', 2, 'WITHCOUNTERS')",
                    )
                    .arg(1)
                    .arg(queue)
                    .arg(rng.below(20))
                    .arg(&id)
                    .arg(if rng.chance(50) { 5 } else { 600_000 })
                    .query(con)
                    .unwrap();
                leases.extend(leases_in(&reply));
            }
            15 if !leases.is_empty() => {
                // Inside MULTI/EXEC.
                let (id, token) = leases.swap_remove(rng.below(leases.len() as u64) as usize);
                let ids = fresh(2, &mut made);
                let _: Value = redis::pipe()
                    .atomic()
                    .cmd("VTRR.NACK")
                    .arg(queue)
                    .arg(&id)
                    .arg(&token)
                    .arg("DELAY")
                    .arg(1 + rng.below(10))
                    .arg("REASON")
                    .arg("in MULTI")
                    .cmd("VTRR.DEFER")
                    .arg(queue)
                    .arg(1 + rng.below(10))
                    .arg("multi")
                    .arg(&ids[0])
                    .arg(2)
                    .arg("M")
                    .cmd("VTRR.CANCEL")
                    .arg(queue)
                    .arg(&ids[1])
                    .cmd("VTRR.LEASE")
                    .arg(queue)
                    .arg(1 + rng.below(20))
                    .cmd("VTRR.RECLAIM")
                    .arg(queue)
                    .query(con)
                    .unwrap();
            }
            16 | 17 => {
                let mut cmd = redis::cmd("VTRR.LIMIT");
                cmd.arg(queue).arg(controlled_partition(&mut rng));
                let (cap, share) = match rng.below(3) {
                    0 => (true, false),
                    1 => (false, true),
                    _ => (true, true),
                };
                if cap {
                    cmd.arg("CONCURRENCY");
                    match rng.below(4) {
                        0 => cmd.arg("NONE"),
                        n => cmd.arg(n),
                    };
                }
                if share {
                    cmd.arg("SHARE").arg(1 + rng.below(4));
                }
                // A rate limit: its bucket refills by the clock of each
                // LEASE and timer run, which replicas replay.
                maybe_rate(&mut cmd, &mut rng, "RATE");
                let _: () = cmd.query(con).unwrap();
            }
            18 => {
                let command = if rng.chance(50) {
                    "VTRR.PAUSE"
                } else {
                    "VTRR.RESUME"
                };
                let _: i64 = redis::cmd(command)
                    .arg(queue)
                    .arg(controlled_partition(&mut rng))
                    .query(con)
                    .unwrap();
            }
            19 => {
                let mut cmd = redis::cmd("VTRR.POLICY");
                cmd.arg(queue).arg("DEFAULT-CONCURRENCY");
                match rng.below(4) {
                    0 => cmd.arg("NONE"),
                    n => cmd.arg(n),
                };
                if rng.chance(30) {
                    cmd.arg("MAX-NACKS").arg(1 + rng.below(3));
                }
                // A default rate: every partition without its own gets a
                // bucket, and idle ones keep theirs until it is full.
                maybe_rate(&mut cmd, &mut rng, "DEFAULT-RATE");
                // The queue's own cap and rate: its bucket, spent by LEASE
                // and written by the timer, must replay the same.
                if rng.chance(20) {
                    match rng.below(3) {
                        0 => cmd.arg("CONCURRENCY").arg("NONE"),
                        n => cmd.arg("CONCURRENCY").arg(2 * n),
                    };
                }
                maybe_rate(&mut cmd, &mut rng, "RATE");
                let _: () = cmd.query(con).unwrap();
            }
            20 => {
                // The reference Lua script enqueues behind the module's back
                // (no counts kept), RECOUNT puts the counts right, inside
                // MULTI/EXEC: the script's effects and RECOUNT's replicate.
                let mut enqueue = lua.cmd("enqueue", queue);
                for id in fresh(1 + rng.below(3), &mut made) {
                    enqueue
                        .arg(format!("p{}", rng.below(5)))
                        .arg(id)
                        .arg(1 + rng.below(3))
                        .arg("S");
                }
                // A native queue is moved to the keys layout around it.
                let (added, corrected): (i64, i64) = with_keys_layout(con, queue, |con| {
                    redis::pipe()
                        .atomic()
                        .add_command(enqueue)
                        .cmd("VTRR.RECOUNT")
                        .arg(queue)
                        .query(con)
                        .unwrap()
                });
                assert!(
                    added == 0 || corrected > 0,
                    "RECOUNT corrected nothing after {added} Lua enqueues"
                );
            }
            21 => {
                // From Lua: the commands' effects are what replicates.
                let id = fresh(1, &mut made).remove(0);
                let reply: Value = redis::cmd("EVAL")
                    .arg(
                        "redis.call('VTRR.PAUSE', KEYS[1], ARGV[1]) \
                         redis.call('VTRR.ENQUEUE', KEYS[1], ARGV[1], ARGV[2], 1, 'L') \
                         redis.call('VTRR.LIMIT', KEYS[1], ARGV[1], 'SHARE', ARGV[3]) \
                         redis.call('VTRR.RESUME', KEYS[1], ARGV[1]) \
                         return redis.call('VTRR.LEASE', KEYS[1], ARGV[4], 'COUNT', 2)",
                    )
                    .arg(1)
                    .arg(queue)
                    .arg(controlled_partition(&mut rng))
                    .arg(&id)
                    .arg(1 + rng.below(3))
                    .arg(if rng.chance(50) { 5 } else { 600_000 })
                    .query(con)
                    .unwrap();
                leases.extend(leases_in(&reply));
            }
            _ => {
                reclaim(con, queue);
            }
        }
        if rng.chance(3) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // Leave every key of the queue non-empty: a dead-letter policy, long
    // leases, and queued items after them (no drain); held items of the
    // paused and capped bulk partitions. No default cap, so the callers'
    // last items of partitions of their own land in `queue`.
    set_policy(con, queue, &DEAD_LETTER_POLICY);
    set_policy(con, queue, &["DEFAULT-CONCURRENCY", "NONE"]);
    set_policy(con, queue, &["DEFAULT-RATE", "NONE"]);
    // The queue's own rate stays, with a day's period and tokens to spare:
    // the leases below spend from its bucket, and none falls due after.
    set_policy(
        con,
        queue,
        &[
            "CONCURRENCY",
            "NONE",
            "RATE",
            "1000",
            "PER",
            "86400000",
            "DEFAULT-MAX-QUEUED",
            "1000000",
        ],
    );
    // A tenant's own backlog limit: its record in the form that carries it.
    let _: () = redis::cmd("VTRR.LIMIT")
        .arg(queue)
        .arg("p0")
        .arg(vec!["MAX-QUEUED", "1000000"])
        .query(con)
        .unwrap();
    // No run falls due after the workload either.
    let _: i64 = redis::cmd("VTRR.UNSCHEDULE")
        .arg(queue)
        .arg("pulse")
        .query(con)
        .unwrap();
    // No token falls due after the workload: the timer would refill a
    // partition between the master's and a replica's snapshot.
    let controlled = (0..5)
        .map(|n| format!("p{n}"))
        .chain((0..BULK_PARTITIONS).map(|n| format!("b{n}")));
    for partition in controlled {
        let _: () = redis::cmd("VTRR.LIMIT")
            .arg(queue)
            .arg(partition)
            .arg(vec!["RATE", "NONE"])
            .query(con)
            .unwrap();
    }
    // A partition waiting a day for its next token (`throttled`): its
    // first item leased (with what lay before it), its second held.
    let _: () = redis::cmd("VTRR.LIMIT")
        .arg(queue)
        .arg("rated")
        .arg(vec!["RATE", "1", "PER", "86400000"])
        .query(con)
        .unwrap();
    let rated = fresh(2, &mut made);
    let _: i64 = redis::cmd("VTRR.ENQUEUE")
        .arg(queue)
        .arg(vec!["rated", rated[0].as_str(), "1", "R"])
        .arg(vec!["rated", rated[1].as_str(), "1", "R"])
        .query(con)
        .unwrap();
    let mut leased_ids: Vec<Vec<u8>> = Vec::new();
    while !leased_ids.iter().any(|id| *id == rated[0].as_bytes()) {
        let reply: Value = redis::cmd("VTRR.LEASE")
            .arg(queue)
            .arg(600_000)
            .arg("COUNT")
            .arg(10)
            .query(con)
            .unwrap();
        let got = leases_in(&reply);
        assert!(
            !got.is_empty(),
            "the rated partition's first item is leased"
        );
        leased_ids.extend(got.into_iter().map(|(id, ..)| id));
    }
    for round in 0..2 {
        let mut cmd = redis::cmd("VTRR.ENQUEUE");
        cmd.arg(queue);
        for id in fresh(3, &mut made) {
            cmd.arg(format!("tail{round}")).arg(id).arg(1).arg("T");
        }
        let _: i64 = cmd.query(con).unwrap();
        if round == 0 {
            let _: Value = redis::cmd("VTRR.LEASE")
                .arg(queue)
                .arg(600_000)
                .arg("COUNT")
                .arg(2)
                .query(con)
                .unwrap();
        }
    }
}

/// `workload`, then `lifecycle_workload`, on `queue`, from one seed (printed
/// by `seed()` for replay); the seed.
fn both_workloads(con: &mut Connection, queue: &str) -> u64 {
    let seed = seed();
    workload(con, seed, queue);
    lifecycle_workload(con, seed, queue);
    seed
}

/// What a server holds: `contents_all`, and of every native queue each
/// logical key as VTRR.INSPECT shows it (a native queue's content is its
/// DUMP bytes; its logical keys say what differs when those do).
struct Snapshot {
    contents: Vec<(Vec<u8>, Option<Content>)>,
    native: Vec<(String, Value)>,
}

fn snapshot(con: &mut Connection) -> Snapshot {
    let contents = contents_all(con);
    let mut native = Vec::new();
    for (key, content) in &contents {
        let Some(Content::Native(_)) = content else {
            continue;
        };
        let key = String::from_utf8_lossy(key);
        let queue = key
            .strip_prefix("vtrr:")
            .and_then(|k| k.strip_suffix(":queue"))
            .unwrap_or_else(|| panic!("native key {key}"));
        for suffix in ALL_SUFFIXES {
            let view: Value = redis::cmd("VTRR.INSPECT")
                .arg(queue)
                .arg(suffix)
                .query(con)
                .unwrap();
            native.push((format!("{queue} {suffix}"), view));
        }
    }
    Snapshot { contents, native }
}

/// Asserts two snapshots are equal, naming the first key that differs (on
/// native queues, the first logical key, then the DUMP bytes).
#[track_caller]
fn assert_same_contents(expected: &Snapshot, got: &Snapshot, what: &str) {
    let names = |views: &[(String, Value)]| -> Vec<String> {
        views.iter().map(|(name, _)| name.clone()).collect()
    };
    assert_eq!(
        names(&expected.native),
        names(&got.native),
        "{what}: native queues differ"
    );
    for ((name, e), (_, g)) in expected.native.iter().zip(&got.native) {
        if e != g {
            let entries = |view: &Value| -> Vec<String> {
                match view {
                    Value::Array(flat) => flat.chunks(2).map(|pair| format!("{pair:?}")).collect(),
                    other => vec![format!("{other:?}")],
                }
            };
            let (e, g) = (entries(e), entries(g));
            let only_expected: Vec<&String> = e.iter().filter(|x| !g.contains(x)).collect();
            let only_got: Vec<&String> = g.iter().filter(|x| !e.contains(x)).collect();
            panic!(
                "{what}: {name} differs:\nonly expected {only_expected:?}\nonly got      {only_got:?}"
            );
        }
    }
    assert_same_keys(&expected.contents, &got.contents, what);
}

/// Asserts two snapshots of `contents_all` are equal, naming the first key
/// that differs.
#[track_caller]
fn assert_same_keys(
    expected: &[(Vec<u8>, Option<Content>)],
    got: &[(Vec<u8>, Option<Content>)],
    what: &str,
) {
    assert!(!expected.is_empty(), "{what}: nothing to compare");
    let names = |snapshot: &[(Vec<u8>, Option<Content>)]| -> Vec<String> {
        snapshot
            .iter()
            .map(|(key, _)| String::from_utf8_lossy(key).into_owned())
            .collect()
    };
    assert_eq!(names(expected), names(got), "{what}: key names differ");
    for ((key, e), (_, g)) in expected.iter().zip(got) {
        assert!(
            e == g,
            "{what}: {} differs: {}",
            String::from_utf8_lossy(key),
            difference(e, g)
        );
    }
}

/// What differs between two contents of one key: for a hash or a sorted
/// set only the entries that are not in both (a large key's whole content
/// would bury them), else both in full.
fn difference(expected: &Option<Content>, got: &Option<Content>) -> String {
    fn one_sided<T: PartialEq + std::fmt::Debug>(a: &[T], b: &[T]) -> Vec<String> {
        a.iter()
            .filter(|entry| !b.contains(entry))
            .map(|entry| format!("{entry:?}"))
            .collect()
    }
    let (only_expected, only_got) = match (expected, got) {
        (Some(Content::Hash(e)), Some(Content::Hash(g))) => {
            let (e, g): (Vec<_>, Vec<_>) = (e.iter().collect(), g.iter().collect());
            (one_sided(&e, &g), one_sided(&g, &e))
        }
        (Some(Content::Zset(e)), Some(Content::Zset(g))) => (one_sided(e, g), one_sided(g, e)),
        (Some(Content::Native(e)), Some(Content::Native(g))) => {
            let first = e.iter().zip(g).position(|(a, b)| a != b);
            return format!(
                "\nDUMP of {} and {} bytes, first difference at byte {first:?}",
                e.len(),
                g.len()
            );
        }
        _ => return format!("\nexpected {expected:?}\ngot      {got:?}"),
    };
    format!("\nonly expected {only_expected:?}\nonly got      {only_got:?}")
}

/// The eight keys the workloads make large, and the encoding each leaves
/// listpacks for.
const LARGE_KEYS: [(&str, &str); 8] = [
    ("delayed", "skiplist"),
    ("delayed_task", "hashtable"),
    ("dead", "skiplist"),
    ("dead_task", "hashtable"),
    ("dead_reason", "hashtable"),
    ("partitions", "hashtable"),
    ("held", "skiplist"),
    ("held_at", "hashtable"),
];

/// Asserts every one of the queue's keys exists on `con` (so the
/// comparison covers each) but `parking`, which the workload fills and the
/// timer empties before any comparison, and that `delayed`, `delayed_task`, `dead`,
/// `dead_task`, `dead_reason`, `partitions`, `held` and `held_at` are no
/// longer listpacks. On a native queue: its one key is all there is, every
/// logical key but `parking` holds entries, and those eight hold more than
/// a listpack of the keys layout would (so the workload is as large).
fn assert_all_keys_present_and_large(con: &mut Connection, queue: &str) {
    if native_layout() {
        assert_native_queue_present_and_large(con, queue);
        return;
    }
    for key in all_queue_keys(queue) {
        if key.ends_with(":parking") {
            continue;
        }
        assert!(
            exists(con, &key),
            "{key} is missing: the workload never left it filled"
        );
    }
    for (suffix, encoding) in LARGE_KEYS {
        let key = format!("vtrr:{queue}:{suffix}");
        let got: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&key)
            .query(con)
            .unwrap();
        let size: i64 = redis::cmd(if encoding == "skiplist" {
            "ZCARD"
        } else {
            "HLEN"
        })
        .arg(&key)
        .query(con)
        .unwrap();
        eprintln!("{key}: {size} entries, {got}");
        assert_eq!(got, encoding, "{key} is still small ({size} entries)");
    }
}

/// `assert_all_keys_present_and_large` of a native queue.
fn assert_native_queue_present_and_large(con: &mut Connection, queue: &str) {
    assert_eq!(layout_of(con, queue), "native");
    let main = format!("vtrr:{queue}:queue");
    for key in all_queue_keys(queue) {
        assert_eq!(exists(con, &key), key == main, "{key} on a native queue");
    }
    let kind: String = redis::cmd("TYPE").arg(&main).query(con).unwrap();
    assert_eq!(kind, "vtrrqueue");
    for suffix in ALL_SUFFIXES {
        if suffix == "parking" {
            continue;
        }
        assert!(
            key_exists(con, queue, suffix),
            "{queue}'s {suffix} is empty: the workload never left it filled"
        );
    }
    let limit = |con: &mut Connection, name: &str| -> usize {
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query(con)
            .unwrap();
        pair[1].parse().unwrap()
    };
    let zset_limit = limit(con, "zset-max-listpack-entries");
    let hash_limit = limit(con, "hash-max-listpack-entries");
    for (suffix, encoding) in LARGE_KEYS {
        let entries: Vec<Vec<u8>> = redis::cmd("VTRR.INSPECT")
            .arg(queue)
            .arg(suffix)
            .query(con)
            .unwrap();
        let size = entries.len() / 2;
        let most_in_a_listpack = if encoding == "skiplist" {
            zset_limit
        } else {
            hash_limit
        };
        eprintln!("{queue}'s {suffix}: {size} entries");
        assert!(
            size > most_in_a_listpack,
            "{queue}'s {suffix} is still small ({size} entries)"
        );
    }
}

/// Waits until the master's timer has nothing left to do on `queue`: no
/// expired lease and none about to expire (only the workloads' leases of
/// ten minutes remain: a short one granted by the last steps would
/// otherwise come back, or die, while the contents are compared), no
/// delayed item due (only the far-future ones remain).
fn wait_timer_idle(master: &mut Connection, queue: &str) {
    wait_until(
        Duration::from_secs(5),
        "the master's timer caught up",
        || {
            let (stats, time): (BTreeMap<String, Value>, (i64, i64)) = redis::pipe()
                .cmd("VTRR.STATS")
                .arg(queue)
                .cmd("TIME")
                .query(master)
                .unwrap();
            let now_ms = time.0 * 1000 + time.1 / 1000;
            let nothing_due = match &stats["next-due-ms"] {
                Value::Nil => true,
                Value::Int(due) => *due > now_ms + FAR_MS as i64 / 2,
                other => panic!("next_due_ms {other:?}"),
            };
            let no_short_lease = match &stats["next-expiry-ms"] {
                Value::Nil => true,
                Value::Int(expiry) => *expiry > now_ms + 60_000,
                other => panic!("next_expiry_ms {other:?}"),
            };
            stats["expired"] == Value::Int(0) && nothing_due && no_short_lease
        },
    );
}

/// Asserts the timer of replica `r` has reclaimed and promoted nothing.
fn assert_replica_timer_wrote_nothing(r: &mut Connection) {
    let on_replica = vtrr_info(r);
    assert_eq!(
        (
            on_replica["vtrr_timer_items_reclaimed"],
            on_replica["vtrr_timer_items_promoted"]
        ),
        (0, 0),
        "replica timer wrote"
    );
}

/// `INFO commandstats` calls of `command` (lowercase) on `con`.
fn calls_of(con: &mut Connection, command: &str) -> i64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[test]
fn a_replica_with_the_module_ends_identical_in_commands_mode() {
    let replica = replica_with_the_module_ends_identical("commands");
    // One command per call reached it: no effects but the Lua scripts'.
    let mut r = replica.connect();
    assert!(calls_of(&mut r, "vtrr.apply") > 0);
    assert!(calls_of(&mut r, "vtrr.ack") > 0);
}

#[test]
fn a_replica_with_the_module_ends_identical_in_effects_mode() {
    let replica = replica_with_the_module_ends_identical("effects");
    let mut r = replica.connect();
    if native_layout() {
        // A native queue replicates as commands even in effects mode: the
        // call that created it as VTRR.LOAD, the rest one command a call.
        assert!(calls_of(&mut r, "vtrr.load") > 0);
        assert!(calls_of(&mut r, "vtrr.apply") > 0);
        assert!(calls_of(&mut r, "vtrr.ack") > 0);
    } else {
        assert_eq!(calls_of(&mut r, "vtrr.apply"), 0);
        assert_eq!(calls_of(&mut r, "vtrr.ack"), 0);
    }
}

/// A master in `vtrr.replication <mode>` and its replica with the module
/// end with the same contents after both workloads, timer runs and leases
/// served to blocked clients included;
/// the replica's timer never writes. Returns the replica.
fn replica_with_the_module_ends_identical(mode: &str) -> Server {
    let master = Server::builder()
        .module_args(&["reclaim-interval-ms", "50", "replication", mode])
        .spawn();
    let replica = timed_server("10");
    attach_replica(&replica, &master);
    let mut m = master.connect();
    let mut r = replica.connect();
    let seed = both_workloads(&mut m, "jobs");
    // Expired leases and due delayed items on the master, for its timer
    // only: nothing leases after them.
    enqueue_one(&mut m, "jobs", "late", "z", "Z");
    let _: Value = redis::cmd("VTRR.LEASE")
        .arg("jobs")
        .arg(30)
        .arg("COUNT")
        .arg(100)
        .query(&mut m)
        .unwrap();
    // Leases granted to blocked clients, when an enqueue wakes them.
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let mut con = master.connect();
            std::thread::spawn(move || {
                let leased: Option<Lease> = lease_block_cmd("waiters", 600_000, 10_000)
                    .query(&mut con)
                    .unwrap();
                leased.expect("a blocked waiter was served")
            })
        })
        .collect();
    wait_blocked(&mut m, 3);
    for n in 0..3 {
        enqueue_one(&mut m, "waiters", &format!("p{n}"), &format!("w{n}"), "W");
    }
    for waiter in waiters {
        waiter.join().unwrap();
    }
    let mut rng = Rng::new(seed);
    let late: Vec<String> = (0..20).map(|n| format!("late{n}")).collect();
    defer(&mut m, &mut rng, "jobs", 30, &late);
    let promoted_before = vtrr_info(&mut m)["vtrr_timer_items_promoted"];
    wait_replicated(&mut m);
    assert_replica_timer_wrote_nothing(&mut r);
    wait_timer_idle(&mut m, "jobs");
    std::thread::sleep(Duration::from_millis(100));
    wait_replicated(&mut m);
    assert_all_keys_present_and_large(&mut m, "jobs");
    assert_same_contents(&snapshot(&mut m), &snapshot(&mut r), "replica");
    assert_invariants(&mut m, "jobs");
    assert_invariants(&mut r, "jobs");
    assert_replica_timer_wrote_nothing(&mut r);
    let on_master = vtrr_info(&mut m);
    assert!(
        on_master["vtrr_timer_items_reclaimed"] > 0,
        "master timer reclaimed nothing"
    );
    assert!(
        on_master["vtrr_timer_items_promoted"] >= promoted_before + 20,
        "master timer did not promote the late items"
    );
    replica
}

#[test]
fn a_replica_without_the_module_ends_identical() {
    if keys_layout_only(
        "a replica without the module cannot hold a native queue's key (its type is the \
         module's), and a native queue replicates as commands even in effects mode",
    ) {
        return;
    }
    // What `vtrr.replication effects` is for.
    let master = Server::builder()
        .module_args(&["reclaim-interval-ms", "50", "replication", "effects"])
        .spawn();
    let replica = Server::builder().without_module().spawn();
    attach_replica(&replica, &master);
    let mut m = master.connect();
    let mut r = replica.connect();
    both_workloads(&mut m, "plain");
    wait_timer_idle(&mut m, "plain");
    wait_replicated(&mut m);
    assert_all_keys_present_and_large(&mut m, "plain");
    assert_same_contents(&snapshot(&mut m), &snapshot(&mut r), "replica");
}

#[test]
fn aof_and_rdb_reloads_give_back_the_same_state_in_commands_mode() {
    aof_and_rdb_reloads_give_back_the_same_state_and_leases_still_ack("commands");
}

#[test]
fn aof_and_rdb_reloads_give_back_the_same_state_in_effects_mode() {
    aof_and_rdb_reloads_give_back_the_same_state_and_leases_still_ack("effects");
}

fn aof_and_rdb_reloads_give_back_the_same_state_and_leases_still_ack(mode: &str) {
    // No fsync per write: the server writes the AOF before it replies, so
    // a killed process loses nothing the workload was told of (only a
    // machine's crash could); fsyncs took 40% of this test.
    let mut server = Server::builder()
        .module_args(&["reclaim-interval-ms", "0", "replication", mode])
        .args(&["--appendonly", "yes", "--appendfsync", "no"])
        .spawn();
    let mut con = server.connect();
    both_workloads(&mut con, "durable");
    enqueue_one(&mut con, "durable", "p", "keep", "K");
    let _: Value = redis::cmd("VTRR.LEASE")
        .arg("durable")
        .arg(600_000)
        .arg("COUNT")
        .arg(1000)
        .query(&mut con)
        .unwrap();
    let token = key_hget(&mut con, "durable", "lease", "keep").expect("keep is leased");
    // Queued items again (that LEASE drained the queue), so every key is there.
    enqueue_one(&mut con, "durable", "p", "after", "A");
    assert_all_keys_present_and_large(&mut con, "durable");
    let before = snapshot(&mut con);

    // From the AOF.
    server.kill();
    server.restart();
    let mut con = server.connect();
    assert_same_contents(&before, &snapshot(&mut con), "AOF reload");

    // After a rewrite, and from an RDB snapshot.
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
    assert!(wait_for(Duration::from_secs(10), || {
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut con)
            .unwrap();
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
    }));
    server.kill();
    server.restart();
    let mut con = server.connect();
    assert_same_contents(&before, &snapshot(&mut con), "rewritten AOF reload");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("no")
        .query(&mut con)
        .unwrap();
    server.stop(true);
    // Only the RDB remains to load from.
    std::fs::remove_dir_all(server.dir.join("appendonlydir")).unwrap();
    assert!(server.dir.join("dump.rdb").exists());
    server.set_option("--appendonly", "no");
    server.restart();
    let mut con = server.connect();
    assert_same_contents(&before, &snapshot(&mut con), "RDB reload");
    assert_eq!(ack(&mut con, "durable", b"keep", &token), 1);
    assert_invariants(&mut con, "durable");
}

/// A master whose timer is off, and its replica whose timer runs every 20 ms.
fn quiet_master_and_timed_replica() -> (Server, Server) {
    let master = quiet_server();
    let replica = timed_server("20");
    attach_replica(&replica, &master);
    (master, replica)
}

/// Turns a replica into a master (a failover).
fn promote(replica: &mut Connection) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(replica)
        .unwrap();
}

#[test]
fn a_promoted_replica_starts_reclaiming() {
    // The master's timer is off, so an expired lease stays expired on both.
    let (master, replica) = quiet_master_and_timed_replica();
    let mut m = master.connect();
    let mut r = replica.connect();
    enqueue_one(&mut m, "q", "p", "a", "A");
    lease(&mut m, "q", 30).unwrap();
    wait_replicated(&mut m);
    std::thread::sleep(Duration::from_millis(200));
    let inflight = key_zrange(&mut r, "q", "inflight").len();
    assert_eq!(inflight, 1, "a replica's timer must not reclaim");
    promote(&mut r);
    assert!(
        wait_for(Duration::from_secs(2), || {
            key_hget(&mut r, "q", "timeouts", "a").as_deref() == Some("1")
        }),
        "the promoted replica did not reclaim"
    );
    assert_invariants(&mut r, "q");
}

#[test]
fn a_promoted_replica_promotes_due_delayed_items() {
    // The master's timer is off, so a due delayed item stays delayed on both.
    let (master, replica) = quiet_master_and_timed_replica();
    let mut m = master.connect();
    let mut r = replica.connect();
    defer_items(&mut m, "q", 30, &[("p", "d", 1, b"D")]);
    wait_replicated(&mut m);
    std::thread::sleep(Duration::from_millis(200));
    let delayed = key_zrange(&mut r, "q", "delayed").len();
    assert_eq!(delayed, 1, "a replica's timer must not promote");
    promote(&mut r);
    wait_until(
        Duration::from_secs(2),
        "the promoted replica promotes d",
        || key_zscore(&mut r, "q", "queue", "d").is_some(),
    );
    assert_invariants(&mut r, "q");
}

/// An AOF written by a newer module (a `VTRR.APPLY` version this one does
/// not read) is not applied as if it were understood: the server says so
/// in its log, and applies nothing of that command.
#[test]
fn an_apply_of_an_unknown_version_is_refused_loudly() {
    let mut server = Server::builder()
        .module_args(&["reclaim-interval-ms", "0"])
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .spawn();
    let mut con = server.connect();
    enqueue_one(&mut con, "q", "p", "a", "A");
    lease(&mut con, "q", 1).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    let before = snapshot(&mut con);
    server.stop(false);
    // What a newer master would write: the same reclaim, as version 2.
    let dir = server.dir.join("appendonlydir");
    let incr = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .unwrap();
    let words = ["VTRR.APPLY", "q", "2", "RECLAIM", "99999999999999", "100"];
    let mut resp = format!("*{}\r\n", words.len());
    for word in words {
        resp.push_str(&format!("${}\r\n{word}\r\n", word.len()));
    }
    let mut aof = std::fs::OpenOptions::new().append(true).open(incr).unwrap();
    std::io::Write::write_all(&mut aof, resp.as_bytes()).unwrap();
    server.restart();
    let mut con = server.connect();
    assert_same_contents(&before, &snapshot(&mut con), "AOF reload");
    assert!(
        server.log().contains(
            "vtrr: not applied to queue q: ERR VTRR.APPLY version 2 is not one this module reads (1)"
        ),
        "{}",
        server.log()
    );
}
