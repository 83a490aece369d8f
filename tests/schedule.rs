//! Recurring schedules on a real server: runs fired by the timer on time,
//! each enqueued once (`schedule:<schedule>:<due-ms>`, a form no client
//! may enqueue), missed runs as the policy
//! says across a kill -9 and an AOF reload, the same content on a replica,
//! a failover that neither repeats nor drops a run, and bad input refused
//! with nothing written.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use redis::{Connection, Value};

fn schedule(con: &mut Connection, queue: &str, name: &str, options: &[&str]) -> i64 {
    command(&[&["VTRR.SCHEDULE", queue, name][..], options].concat())
        .query(con)
        .unwrap()
}

fn every(con: &mut Connection, queue: &str, name: &str, ms: &str, missed: &str) -> i64 {
    let options = [
        "EVERY",
        ms,
        "PARTITION",
        name,
        "PAYLOAD",
        "P",
        "MISSED",
        missed,
    ];
    schedule(con, queue, name, &options)
}

/// The due time of each run of `name` among `ids`, in order.
fn runs_of(ids: &BTreeSet<String>, name: &str) -> Vec<i64> {
    let prefix = format!("schedule:{name}:");
    let mut runs: Vec<i64> = ids
        .iter()
        .filter_map(|id| id.strip_prefix(&prefix)?.parse().ok())
        .collect();
    runs.sort();
    runs
}

/// Leases and acks everything there is; the ids, each checked as new.
fn drain(con: &mut Connection, queue: &str, seen: &mut BTreeSet<String>) {
    loop {
        let reply: Value = command(&["VTRR.LEASE", queue, "60000", "COUNT", "100"])
            .query(con)
            .unwrap();
        let leases = leases_in(&reply);
        if leases.is_empty() {
            return;
        }
        for (id, token) in leases {
            let token = String::from_utf8(token).unwrap();
            assert_eq!(ack(con, queue, &id, &token), 1);
            let id = String::from_utf8(id).unwrap();
            assert!(seen.insert(id.clone()), "run {id} enqueued twice");
        }
    }
}

/// A schedule's `next-ms`, from its SCHEDULES entry.
fn schedule_next(view: &Value) -> i64 {
    match &map_of(view)["next-ms"] {
        Value::Int(next) => *next,
        other => panic!("next-ms {other:?}"),
    }
}

fn wall_clock_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.unwrap().as_millis() as i64
}

fn server_time_ms(con: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    s * 1000 + us / 1000
}

#[test]
fn the_timer_alone_fires_every_run_on_time() {
    // The timer's interval is a second; a schedule every 50 ms is fired on
    // time all the same: the timer wakes for the earliest due time.
    let server = timed_server("1000");
    let mut con = server.connect();
    let first = every(&mut con, "q", "tick", "50", "skip");
    std::thread::sleep(Duration::from_millis(1_100));
    // Stopped before reading, so what is read and counted holds still.
    let removed: i64 = command(&["VTRR.UNSCHEDULE", "q", "tick"])
        .query(&mut con)
        .unwrap();
    assert_eq!(removed, 1);
    let queued: BTreeSet<String> = key_zrange(&mut con, "q", "queue")
        .into_iter()
        .map(|(id, _)| String::from_utf8(id).unwrap())
        .collect();
    let runs = runs_of(&queued, "tick");
    // Under `skip`, a run fired late enough to meet the next one is lost:
    // none is, so the runs are every multiple of 50 from the first on.
    assert!(runs.len() >= 18, "{runs:?}");
    assert_eq!(runs[0], first);
    let expected: Vec<i64> = (0..runs.len() as i64).map(|n| first + 50 * n).collect();
    assert_eq!(runs, expected);
    let info = vtrr_info(&mut con);
    assert_eq!(info["vtrr_schedule_runs"], runs.len() as i64);
    assert_invariants(&mut con, "q");
}

#[test]
fn a_blocked_lease_is_served_the_next_run() {
    let server = timed_server("1000");
    let mut con = server.connect();
    let next = every(&mut con, "q", "tick", "300", "one");
    let reply: Value = command(&["VTRR.LEASE", "q", "60000", "BLOCK", "2000"])
        .query(&mut con)
        .unwrap();
    let leases = leases_in(&reply);
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].0, format!("schedule:tick:{next}").into_bytes());
    assert!(server_time_ms(&mut con) >= next);
}

#[test]
fn a_run_cannot_be_taken_first_by_a_client() {
    // A run's id is predictable: enqueued first, the genuine run would be a
    // duplicate, skipped, and workers would get the impostor's payload.
    let server = timed_server("1000");
    let mut con = server.connect();
    let next = every(&mut con, "q", "tick", "400", "one");
    let run = format!("schedule:tick:{next}");
    let refusal =
        "id must not begin with 'schedule:': that form is the runs of recurring schedules";
    for call in [
        &[
            "VTRR.ENQUEUE",
            "q",
            "p",
            "ok",
            "1",
            "x",
            "p",
            &run,
            "1",
            "forged",
        ][..],
        &[
            "VTRR.DEFER",
            "q",
            "0",
            "PRIORITY",
            "3",
            "p",
            &run,
            "1",
            "forged",
        ],
    ] {
        let refused: redis::RedisResult<i64> = command(call).query(&mut con);
        let error = refused.expect_err("refused").to_string();
        assert!(error.contains(refusal), "{error}");
    }
    assert_eq!(
        (
            stat(&mut con, "q", "queued"),
            stat(&mut con, "q", "delayed")
        ),
        (0, 0),
        "nothing written"
    );
    let reply: Value = command(&["VTRR.LEASE", "q", "60000", "BLOCK", "3000"])
        .query(&mut con)
        .unwrap();
    let leases = leases_in(&reply);
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].0, run.into_bytes(), "the genuine run");
}

#[test]
fn missed_runs_across_a_kill_and_an_aof_reload_follow_each_policy_and_none_is_enqueued_twice() {
    let mut server = Server::builder()
        .module_args(&["reclaim-interval-ms", "1000", "reclaim-batch", "1000"])
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .spawn();
    let mut con = server.connect();
    for missed in ["skip", "one", "all"] {
        every(&mut con, "q", missed, "100", missed);
    }
    let mut seen = BTreeSet::new();
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(100));
        drain(&mut con, "q", &mut seen);
    }
    // Killed just after a run (`fired`, the same for all three), so the
    // runs after it are all missed ones: what each policy fires of them is
    // told apart from a run fired before the kill.
    let view: Value = command(&["VTRR.SCHEDULES", "q", "SCHEDULE", "skip"])
        .query(&mut con)
        .unwrap();
    let fired = schedule_next(&view);
    while wall_clock_ms() < fired + 50 {
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill();
    std::thread::sleep(Duration::from_millis(1_000));
    // Nothing fires before the server is back: the first timer run after
    // the load (at some time T at or after `back_from`) meets every missed
    // run, the three schedules at the same T.
    let back_from = wall_clock_ms();
    server.restart();
    let mut con = server.connect();
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(100));
        drain(&mut con, "q", &mut seen);
    }
    let in_stop = |name: &str, to: i64| -> Vec<i64> {
        runs_of(&seen, name)
            .into_iter()
            .filter(|&r| r > fired && r <= to)
            .collect()
    };
    let first_after_kill = |name: &str| {
        runs_of(&seen, name)
            .into_iter()
            .find(|&r| r > fired)
            .unwrap()
    };
    // `all`: every run, those of the stop included, once each.
    let all = runs_of(&seen, "all");
    assert!(all.windows(2).all(|w| w[1] - w[0] == 100), "{all:?}");
    assert!(in_stop("all", back_from - 100).len() >= 8, "{all:?}");
    // `one`: none from the stop but the latest due at T (> T - 100).
    assert_eq!(in_stop("one", back_from - 100), Vec::<i64>::new());
    // `skip`: none; its first is the first run after T, one period after
    // `one`'s catch-up run (the latest at or before T).
    assert_eq!(in_stop("skip", back_from), Vec::<i64>::new());
    assert_eq!(first_after_kill("skip"), first_after_kill("one") + 100);
    // And each goes on from there, none left out, none twice (`drain`).
    for name in ["skip", "one", "all"] {
        let after: Vec<i64> = runs_of(&seen, name)
            .into_iter()
            .filter(|&r| r >= first_after_kill(name))
            .collect();
        assert!(after.len() >= 4, "{name}: {after:?}");
        assert!(
            after.windows(2).all(|w| w[1] - w[0] == 100),
            "{name}: {after:?}"
        );
    }
    assert_invariants(&mut con, "q");
}

#[test]
fn a_replica_ends_with_the_masters_schedules_and_runs_and_a_promoted_one_goes_on() {
    let master = timed_server("1000");
    let replica = timed_server("1000");
    attach_replica(&replica, &master);
    let mut m = master.connect();
    let mut r = replica.connect();
    every(&mut m, "q", "fast", "20", "all");
    schedule(
        &mut m,
        "q",
        "nightly",
        &[
            "CRON",
            "30 2 * * *",
            "TZ",
            "Europe/Paris",
            "PARTITION",
            "n",
            "PAYLOAD",
            "N",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    // Stop firing, then compare.
    let _: i64 = command(&["VTRR.UNSCHEDULE", "q", "fast"])
        .query(&mut m)
        .unwrap();
    wait_replicated(&mut m);
    for suffix in [
        "queue",
        "task",
        "meta",
        "schedules",
        "schedule_due",
        "partitions",
    ] {
        let key = format!("vtrr:q:{suffix}");
        let on_master = content(&mut m, key.as_bytes());
        assert_eq!(on_master, content(&mut r, key.as_bytes()), "{suffix}");
    }
    assert!(key_zrange(&mut m, "q", "queue").len() >= 20);
    // Failover: the promoted replica fires the next runs, none twice.
    let second_first = every(&mut m, "q", "fast", "20", "all");
    wait_replicated(&mut m);
    drop(master);
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    let before = key_zrange(&mut r, "q", "queue").len();
    wait_until(Duration::from_secs(2), "the promoted replica fires", || {
        key_zrange(&mut r, "q", "queue").len() > before + 5
    });
    let mut seen = BTreeSet::new();
    drain(&mut r, "q", &mut seen);
    // Every run of the second `fast` from its first on, once each, across
    // the failover (`all`: the runs due while no master fired are fired by
    // the new one).
    let second: Vec<i64> = runs_of(&seen, "fast")
        .into_iter()
        .filter(|&t| t >= second_first)
        .collect();
    assert!(second.len() > 5, "{second:?}");
    assert_eq!(second[0], second_first);
    assert!(second.windows(2).all(|w| w[1] - w[0] == 20), "{second:?}");
    assert_invariants(&mut r, "q");
}

#[test]
fn schedules_lists_definitions_and_next_runs_and_setting_again_keeps_the_next_run() {
    let server = quiet_server();
    let mut con = server.connect();
    let next = every(&mut con, "q", "hourly", "3600000", "one");
    // Set again at a deploy, with another payload: the next run stays.
    let again = schedule(
        &mut con,
        "q",
        "hourly",
        &[
            "EVERY",
            "3600000",
            "PARTITION",
            "ops",
            "PAYLOAD",
            "v2",
            "WEIGHT",
            "3",
        ],
    );
    assert_eq!(again, next);
    let view: Value = command(&["VTRR.SCHEDULES", "q", "SCHEDULE", "hourly", "RUNS", "3"])
        .query(&mut con)
        .unwrap();
    let view = map_of(&view);
    assert_eq!(view["next-ms"], Value::Int(next));
    assert_eq!(
        view["runs"],
        Value::Array(vec![
            Value::Int(next),
            Value::Int(next + 3_600_000),
            Value::Int(next + 7_200_000)
        ])
    );
    assert_eq!(view["every-ms"], Value::Int(3_600_000));
    assert_eq!(view["cron"], Value::Nil);
    assert_eq!(view["weight"], Value::Int(3));
    assert_eq!(view["missed"], Value::SimpleString("one".into()));
    assert_eq!(view["payload"], Value::BulkString(b"v2".to_vec()));
    let page: (String, Vec<Value>) = command(&["VTRR.SCHEDULES", "q", "COUNT", "10"])
        .query(&mut con)
        .unwrap();
    assert_eq!((page.0.as_str(), page.1.len()), ("0", 1));
    let missing: Value = command(&["VTRR.SCHEDULES", "q", "SCHEDULE", "nope"])
        .query(&mut con)
        .unwrap();
    assert_eq!(missing, Value::Nil);
    let removed: i64 = command(&["VTRR.UNSCHEDULE", "q", "hourly", "nope"])
        .query(&mut con)
        .unwrap();
    assert_eq!(removed, 1);
    assert!(!key_exists(&mut con, "q", "schedules"));
}

#[test]
fn bad_schedules_are_refused_with_nothing_written() {
    let server = quiet_server();
    let mut con = server.connect();
    let refusals: &[(&[&str], &str)] = &[
        (
            &["EVERY", "0", "PARTITION", "p", "PAYLOAD", "x"],
            "ERR EVERY must be an integer between 1 and 31536000000 (a year)",
        ),
        (
            &["EVERY", "-5", "PARTITION", "p", "PAYLOAD", "x"],
            "ERR EVERY must be",
        ),
        (
            &["CRON", "61 * * * *", "PARTITION", "p", "PAYLOAD", "x"],
            "ERR CRON is not a valid pattern: its minutes field",
        ),
        (
            &["CRON", "* * *", "PARTITION", "p", "PAYLOAD", "x"],
            "ERR CRON is not a valid pattern",
        ),
        (
            &["CRON", "0 0 0 1 1 * 2020", "PARTITION", "p", "PAYLOAD", "x"],
            "ERR the schedule has no run after now",
        ),
        // Patterns that never match: croner alone walks to the year 5000
        // (tens of milliseconds); a search stops within its steps.
        (
            &["CRON", "0 0 0 30 2 *", "PARTITION", "p", "PAYLOAD", "x"],
            "ERR CRON: no run found within 8000 steps; simplify the pattern",
        ),
        (
            &["CRON", "0 0 0 1 * +MON#5", "PARTITION", "p", "PAYLOAD", "x"],
            "ERR CRON: no run found within 8000 steps; simplify the pattern",
        ),
        (
            &[
                "CRON",
                "* * 1-2 * 3 +SUNL",
                "TZ",
                "Antarctica/Troll",
                "PARTITION",
                "p",
                "PAYLOAD",
                "x",
            ],
            "ERR CRON: no run found within 8000 steps; simplify the pattern",
        ),
        (
            &["CRON", "0 0 0 1 1 * 2020", "PARTITION", "p", "PAYLOAD", "x"],
            "ERR the schedule has no run after now",
        ),
        (
            &[
                "CRON",
                "* * * * *",
                "TZ",
                "Europe/Nowhere",
                "PARTITION",
                "p",
                "PAYLOAD",
                "x",
            ],
            "ERR TZ must be an IANA time zone name such as Europe/Paris, not 'Europe/Nowhere'",
        ),
        (
            &["EVERY", "10", "TZ", "UTC", "PARTITION", "p", "PAYLOAD", "x"],
            "ERR TZ needs CRON",
        ),
        (
            &[
                "EVERY",
                "10",
                "CRON",
                "* * * * *",
                "PARTITION",
                "p",
                "PAYLOAD",
                "x",
            ],
            "ERR EVERY and CRON cannot be combined",
        ),
        (
            &["PARTITION", "p", "PAYLOAD", "x", "WEIGHT", "1"],
            "ERR EVERY or CRON is required",
        ),
        (
            &["EVERY", "10", "PAYLOAD", "x", "WEIGHT", "1"],
            "ERR PARTITION is required",
        ),
        (
            &["EVERY", "10", "PARTITION", "p", "WEIGHT", "1"],
            "ERR PAYLOAD is required",
        ),
        (
            &[
                "EVERY",
                "10",
                "PARTITION",
                "p",
                "PAYLOAD",
                "x",
                "WEIGHT",
                "0",
            ],
            "ERR weight must be an integer between 1 and 1000000000",
        ),
        (
            &[
                "EVERY",
                "10",
                "PARTITION",
                "p",
                "PAYLOAD",
                "x",
                "MISSED",
                "some",
            ],
            "ERR MISSED must be one of skip, one, all",
        ),
        (
            &["EVERY", "10", "PARTITION", "p", "PAYLOAD", "x", "WHEN"],
            "ERR syntax error",
        ),
    ];
    for (options, expected) in refusals {
        let reply: redis::RedisResult<i64> =
            command(&[&["VTRR.SCHEDULE", "q", "s"][..], options].concat()).query(&mut con);
        let error = reply.expect_err("refused").to_string();
        let error = error.replace(": ", " ").replace("  ", " ");
        let expected_words = expected.trim_start_matches("ERR ").replace(": ", " ");
        assert!(error.contains(&expected_words), "{options:?}: {error}");
    }
    let empty: redis::RedisResult<i64> = command(&[
        "VTRR.SCHEDULE",
        "q",
        "",
        "EVERY",
        "10",
        "PARTITION",
        "p",
        "PAYLOAD",
        "x",
    ])
    .query(&mut con);
    assert!(empty
        .unwrap_err()
        .to_string()
        .contains("schedule must not be empty"));
    for (options, expected) in [
        (
            &["COUNT", "0"][..],
            "COUNT must be an integer between 1 and 100",
        ),
        (&["RUNS", "21"], "RUNS must be an integer between 0 and 20"),
        (
            &["SCHEDULE", "s", "CURSOR", "0"],
            "SCHEDULE and CURSOR cannot be combined",
        ),
        (&["CURSOR", "x"], "invalid cursor"),
    ] {
        let reply: redis::RedisResult<Value> =
            command(&[&["VTRR.SCHEDULES", "q"][..], options].concat()).query(&mut con);
        let error = reply.expect_err("refused").to_string();
        assert!(error.contains(expected), "{options:?}: {error}");
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

#[test]
fn any_bytes_as_a_pattern_or_a_zone_are_refused_or_scheduled_never_a_crash() {
    let server = quiet_server();
    let mut con = server.connect();
    let mut rng = Rng::new(7);
    for n in 0..300 {
        let len = rng.below(40) as usize;
        let words = [
            "*", "/", "-", ",", "L", "W", "#", "?", "%", " ", "1", "59", "@", "\u{0100}",
        ];
        let pattern: String = (0..len)
            .map(|_| words[rng.below(words.len() as u64) as usize])
            .collect();
        let zone: Vec<u8> = (0..rng.below(12)).map(|_| rng.below(256) as u8).collect();
        let mut cmd = redis::cmd("VTRR.SCHEDULE");
        cmd.arg("q").arg(format!("s{n}")).arg("CRON").arg(&pattern);
        if n % 2 == 0 {
            cmd.arg("TZ").arg(zone);
        }
        cmd.arg("PARTITION").arg("p").arg("PAYLOAD").arg("x");
        let _: redis::RedisResult<Value> = cmd.query(&mut con);
    }
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert_invariants(&mut con, "q");
}
