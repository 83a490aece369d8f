//! The reclaim timer: expired leases come back with no client traffic, after
//! restarts, when written by other clients, in bounded batches; each run
//! keeps to its time budget and comes back soon while work is left; configs
//! and INFO; SWAPDB; idle ticks, and a reclaim that finds nothing expired,
//! disturb no WATCH.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::Connection;

/// Whether `id` is queued again with one timeout counted (in either layout).
fn queued_with_timeouts(con: &mut Connection, queue: &str, id: &str) -> bool {
    let score = key_zscore(con, queue, "queue", id);
    let timeouts = key_hget(con, queue, "timeouts", id);
    score.is_some() && timeouts.as_deref() == Some("1")
}

#[test]
fn an_expired_lease_comes_back_with_no_command_sent() {
    let server = timed_server("50");
    let mut con = server.connect();
    // Past the start-up index rebuild, so only LEASE's own tracking can find it.
    wait_past_startup_rebuild(&mut con);
    enqueue_one(&mut con, "q", "p", "a", "A");
    lease(&mut con, "q", 100).unwrap();
    let leased_at = Instant::now();
    let mut observer = server.connect();
    // Only reads from here on.
    wait_until(Duration::from_millis(500), "a is reclaimed", || {
        queued_with_timeouts(&mut observer, "q", "a")
    });
    eprintln!(
        "reclaimed {} ms after the lease",
        leased_at.elapsed().as_millis()
    );
    assert_invariants(&mut observer, "q");
    let counters = vtrr_info(&mut observer);
    assert_eq!(counters["vtrr_timer_items_reclaimed"], 1);
    assert!(counters["vtrr_timer_runs"] > 0);
}

#[test]
fn leases_survive_a_restart_and_are_reclaimed_by_the_timer_alone() {
    for persistence in ["rdb", "aof"] {
        let args: &[&str] = if persistence == "aof" {
            &["--appendonly", "yes"]
        } else {
            &[]
        };
        let mut server = Server::builder()
            .module_args(&["reclaim-interval-ms", "50"])
            .args(args)
            .spawn();
        let mut con = server.connect();
        enqueue_one(&mut con, "q", "p", "a", "A");
        lease(&mut con, "q", 300).unwrap();
        server.stop(true);
        server.restart();
        let mut con = server.connect();
        let what = format!("{persistence}: a is reclaimed after restart");
        wait_until(Duration::from_secs(2), &what, || {
            queued_with_timeouts(&mut con, "q", "a")
        });
    }
}

#[test]
fn leases_written_by_other_clients_are_found_and_reclaimed() {
    let server = timed_server("50");
    let mut con = server.connect();
    // Past the start-up index rebuild, so only the keyspace subscription can find it.
    wait_past_startup_rebuild(&mut con);
    // No module command at all: a plain ZADD/HSET lease, in database 3.
    let _: () = redis::cmd("SELECT").arg(3).query(&mut con).unwrap();
    let (sec, _): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg("vtrr:foreign:inflight_task")
        .arg("f")
        .arg("F")
        .ignore()
        .cmd("HSET")
        .arg("vtrr:foreign:lease")
        .arg("f")
        .arg("tok")
        .ignore()
        .cmd("HSET")
        .arg("vtrr:foreign:meta")
        .arg("f")
        .arg("2:tenant")
        .ignore()
        .cmd("ZADD")
        .arg("vtrr:foreign:inflight")
        .arg(sec * 1000 + 100)
        .arg("f")
        .ignore()
        .query(&mut con)
        .unwrap();
    wait_until(Duration::from_secs(1), "f is reclaimed", || {
        queued_with_timeouts(&mut con, "foreign", "f")
    });
    let pvt: i64 = redis::cmd("HGET")
        .arg("vtrr:foreign:partition_virtual_time")
        .arg("tenant")
        .query(&mut con)
        .unwrap();
    assert_eq!(pvt, 3, "rescored with weight 2 from meta");
}

#[test]
fn a_queue_moved_by_swapdb_is_reclaimed_in_its_new_database() {
    let server = timed_server("20");
    let mut con = server.connect();
    wait_past_startup_rebuild(&mut con);
    let _: () = redis::cmd("SELECT").arg(1).query(&mut con).unwrap();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    assert!(lease(&mut con, "q", 300).is_some());
    // SWAPDB fires no keyspace event; the lease now lives in database 0.
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(&mut con).unwrap();
    let _: () = redis::cmd("SELECT").arg(0).query(&mut con).unwrap();
    wait_until(
        Duration::from_secs(3),
        "the moved lease is reclaimed",
        || queued_with_timeouts(&mut con, "q", "a"),
    );
    assert_eq!(vtrr_info(&mut con)["vtrr_timer_items_reclaimed"], 1);
    let _: () = redis::cmd("SELECT").arg(1).query(&mut con).unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "database 1 got {keys:?}");
}

#[test]
fn a_flood_of_expired_leases_is_reclaimed_in_bounded_batches() {
    let server = Server::builder()
        .module_args(&["reclaim-interval-ms", "20", "reclaim-batch", "1000"])
        .spawn();
    let mut con = server.connect();
    let total: i64 = 100_000;
    for chunk in 0..(total / 1000) {
        let mut cmd = redis::cmd("VTRR.ENQUEUE");
        cmd.arg("flood");
        for i in 0..1000 {
            cmd.arg(format!("p{}", i % 100))
                .arg(format!("i{}", chunk * 1000 + i))
                .arg(1)
                .arg("x");
        }
        let _: i64 = cmd.query(&mut con).unwrap();
    }
    set_reclaim_interval_ms(&mut con, 0);
    for _ in 0..(total / 10_000) {
        let _: Value = redis::cmd("VTRR.LEASE")
            .arg("flood")
            .arg(1)
            .arg("COUNT")
            .arg(10_000)
            .query(&mut con)
            .unwrap();
    }
    // The leases were for 1 ms; the timer is off, so they stay expired.
    wait_until(
        Duration::from_secs(5),
        "every flood lease has expired",
        || {
            let stats = stats(&mut con, "flood");
            stats["expired"] == stats["inflight"]
        },
    );
    // A LEASE reclaims at most vtrr.reclaim-batch before leasing.
    let before = vtrr_info(&mut con)["vtrr_items_reclaimed"];
    lease(&mut con, "flood", 600_000).unwrap();
    assert_eq!(vtrr_info(&mut con)["vtrr_items_reclaimed"] - before, 1000);
    set_reclaim_interval_ms(&mut con, 20);
    let started = Instant::now();
    wait_until(
        Duration::from_secs(30),
        "every flood lease is reclaimed",
        || {
            let stats = stats(&mut con, "flood");
            stats["expired"] == Value::Int(0)
        },
    );
    let counters = vtrr_info(&mut con);
    let most = counters["vtrr_timer_most_reclaimed_in_one_run"];
    assert!((1..=1000).contains(&most), "one timer run reclaimed {most}");
    let stats = stats(&mut con, "flood");
    assert_eq!(
        (stats["queued"].clone(), stats["inflight"].clone()),
        (Value::Int(total - 1), Value::Int(1)),
        "items lost or duplicated"
    );
    eprintln!(
        "{} expired leases reclaimed by the timer in {} ms; longest run {} us",
        counters["vtrr_timer_items_reclaimed"],
        started.elapsed().as_millis(),
        counters["vtrr_timer_longest_run_us"]
    );
    assert_invariants(&mut con, "flood");
}

#[test]
fn config_set_stops_and_restarts_the_timer() {
    let server = timed_server("20");
    let mut con = server.connect();
    let invalid = redis::cmd("CONFIG")
        .arg("SET")
        .arg("vtrr.reclaim-interval-ms")
        .arg(-1)
        .query::<()>(&mut con);
    assert!(invalid.is_err());
    let invalid = redis::cmd("CONFIG")
        .arg("SET")
        .arg("vtrr.reclaim-batch")
        .arg(0)
        .query::<()>(&mut con);
    assert!(invalid.is_err());
    let value: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("vtrr.reclaim-interval-ms")
        .query(&mut con)
        .unwrap();
    assert_eq!(value[1], "20");
    set_reclaim_interval_ms(&mut con, 0);
    // A duration on purpose, with no condition to wait for: CONFIG SET
    // disarms the timer before it replies; this is only a margin before the
    // baseline count below.
    std::thread::sleep(Duration::from_millis(50));
    let runs = vtrr_info(&mut con)["vtrr_timer_runs"];
    enqueue_one(&mut con, "q", "p", "a", "A");
    lease(&mut con, "q", 10).unwrap();
    // A duration on purpose: this shows that nothing happens. 200 ms is ten
    // of the 20 ms intervals the timer ran at and far past the 10 ms lease,
    // so a timer still running would have ticked and reclaimed "a".
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        vtrr_info(&mut con)["vtrr_timer_runs"],
        runs,
        "timer ran while off"
    );
    assert!(!queued_with_timeouts(&mut con, "q", "a"));
    set_reclaim_interval_ms(&mut con, 20);
    wait_until(
        Duration::from_millis(500),
        "the restarted timer reclaims a",
        || queued_with_timeouts(&mut con, "q", "a"),
    );
}

#[test]
fn idle_ticks_do_not_abort_watch() {
    let server = timed_server("10");
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    lease(&mut con, "q", 600_000).unwrap();
    let keys = queue_keys("q");
    let untouched = keys_untouched_by(&mut con, &keys, |con| {
        let runs = vtrr_info(con)["vtrr_timer_runs"];
        // A duration on purpose: this shows that idle ticks do NOT touch the
        // keys, so it lets about 30 ticks' time pass, then checks that enough
        // of them really ran.
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            vtrr_info(con)["vtrr_timer_runs"] >= runs + 10,
            "too few ticks to prove anything"
        );
    });
    assert!(untouched, "an idle tick aborted WATCH");
}

#[test]
fn a_timer_reclaim_that_finds_nothing_expired_does_not_abort_watch() {
    // RENEW moves the lease past the due time the timer's index holds for
    // the queue, so once that time passes the timer opens the queue for a
    // reclaim that finds nothing: it must signal and replicate nothing.
    let server = timed_server("10");
    let mut con = server.connect();
    wait_past_startup_rebuild(&mut con);
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    let (id, _, token, _) = lease(&mut con, "q", 500).unwrap();
    assert_eq!(renew(&mut con, "q", &id, &token, 600_000), 1);
    let keys = queue_keys("q");
    let untouched = keys_untouched_by(&mut con, &keys, |con| {
        // A duration on purpose: this shows that the reclaim does NOT touch
        // the keys, so it lets time pass well beyond the lease's first due
        // time (500 ms), for the timer to open the queue and find nothing.
        std::thread::sleep(Duration::from_millis(800));
        let info = vtrr_info(con);
        assert_eq!(info["vtrr_timer_items_reclaimed"], 0);
        assert_eq!(info["vtrr_timer_tracked_queues"], 1);
    });
    assert!(untouched, "a reclaim that found nothing aborted WATCH");
}

#[test]
fn reclaims_fire_a_notification_dispatchers_can_wait_on() {
    let server = notifying_server("20");
    let mut con = server.connect();
    let mut sub = server.connect();
    let mut pubsub = keyspace_events(&mut sub, "vtrr:q:queue");
    enqueue_one(&mut con, "q", "p", "a", "A");
    lease(&mut con, "q", 30).unwrap();
    assert_eq!(
        next_events(&mut pubsub, 3),
        ["vtrr.enqueue", "vtrr.lease", "vtrr.reclaim"]
    );
}

#[test]
fn info_reports_the_timer() {
    let server = timed_server("10");
    let mut con = server.connect();
    enqueue_one(&mut con, "a", "p", "x", "X");
    enqueue_one(&mut con, "b", "p", "y", "Y");
    lease(&mut con, "a", 600_000).unwrap();
    lease(&mut con, "b", 600_000).unwrap();
    // The tracked count is published by a tick.
    wait_until(
        Duration::from_secs(2),
        "a tick has counted both queues",
        || vtrr_info(&mut con)["vtrr_timer_tracked_queues"] == 2,
    );
    let counters = vtrr_info(&mut con);
    assert_eq!(counters["vtrr_items_enqueued"], 2);
    assert_eq!(counters["vtrr_items_leased"], 2);
    assert_eq!(counters["vtrr_timer_tracked_queues"], 2);
    let modules: String = redis::cmd("INFO").arg("modules").query(&mut con).unwrap();
    assert!(
        modules.contains("vtrr_timer_runs:"),
        "INFO modules lacks the section"
    );
}

/// A server whose timer runs every `interval_ms` with `budget_us` per run
/// and chunks of 10, and `n` leases of queue "mass" that expired together
/// while the timer was off.
fn expired_leases(interval_ms: &str, budget_us: &str, n: usize) -> (Server, Connection) {
    let server = Server::builder()
        .module_args(&[
            "reclaim-interval-ms",
            "0",
            "reclaim-batch",
            "10",
            "timer-budget-us",
            budget_us,
        ])
        .spawn();
    let mut con = server.connect();
    let ids: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
    let items: Vec<(&str, &str, u64, &[u8])> = ids
        .iter()
        .map(|id| ("p", id.as_str(), 1, &b"x"[..]))
        .collect();
    enqueue_items(&mut con, "mass", &items);
    assert_eq!(lease_count(&mut con, "mass", 1, n as u64).len(), n);
    let_expire(); // the 1 ms leases expire
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("vtrr.reclaim-interval-ms")
        .arg(interval_ms)
        .query(&mut con)
        .unwrap();
    (server, con)
}

/// Waits until every lease of "mass" is back; INFO vtrr then.
fn drained(con: &mut Connection) -> std::collections::HashMap<String, i64> {
    wait_until(Duration::from_secs(5), "every lease is back", || {
        let stats: std::collections::HashMap<String, Value> =
            redis::cmd("VTRR.STATS").arg("mass").query(con).unwrap();
        stats["inflight"] == Value::Int(0)
    });
    vtrr_info(con)
}

#[test]
fn a_timer_run_stops_once_its_budget_is_spent_and_comes_back_soon() {
    // A 1 µs budget: every run stops after its first chunk of 10. With a
    // 200 ms interval, 500 leases would take 10 s if the timer waited a
    // whole interval between runs; it comes back after 1 ms instead.
    let (_server, mut con) = expired_leases("200", "1", 500);
    let counters = drained(&mut con);
    assert_eq!(counters["vtrr_timer_items_reclaimed"], 500);
    assert_eq!(counters["vtrr_timer_most_reclaimed_in_one_run"], 10);
    assert!(counters["vtrr_timer_runs"] >= 50, "{counters:?}");
}

#[test]
fn a_generous_budget_takes_several_chunks_in_one_run() {
    let (_server, mut con) = expired_leases("20", "1000000", 500);
    let counters = drained(&mut con);
    assert_eq!(counters["vtrr_timer_most_reclaimed_in_one_run"], 500);
}

#[test]
fn a_renewal_that_shortens_a_lease_is_reclaimed_on_time() {
    let server = timed_server("20");
    let mut con = server.connect();
    // Past the start-up index rebuild, so only the operations' own
    // tracking can find the new expiry.
    wait_past_startup_rebuild(&mut con);
    enqueue_one(&mut con, "q", "p", "a", "A");
    let (id, _, token, _) = lease(&mut con, "q", 3_600_000).unwrap();
    assert_eq!(renew(&mut con, "q", &id, &token, 50), 1);
    wait_until(Duration::from_secs(2), "a is reclaimed", || {
        queued_with_timeouts(&mut con, "q", "a")
    });
}

#[test]
fn a_queue_the_timer_could_not_act_on_is_tried_again_once_repaired() {
    let server = timed_server("20");
    let mut con = server.connect();
    wait_past_startup_rebuild(&mut con);
    enqueue_one(&mut con, "q", "p", "a", "A");
    lease(&mut con, "q", 50).unwrap();
    // Unreadable: the timer's runs on q fail until it is repaired (planted
    // in the keys layout; a native queue gets it through VTRR.CONVERT).
    let set_virtual_time = |con: &mut Connection, value: &str| {
        with_keys_layout(con, "q", |con| {
            let _: () = redis::cmd("SET")
                .arg("vtrr:q:current_virtual_time")
                .arg(value)
                .query(con)
                .unwrap();
        })
    };
    set_virtual_time(&mut con, "abc");
    // In this run's layout: a native queue's one key, or the keys' lease.
    let (key, kind) = if native_layout() {
        ("vtrr:q:queue", "vtrrqueue")
    } else {
        ("vtrr:q:inflight", "zset")
    };
    let got: String = redis::cmd("TYPE").arg(key).query(&mut con).unwrap();
    assert_eq!(got, kind, "{key}");
    let unreadable = redis::cmd("VTRR.STATS").arg("q").query::<Value>(&mut con);
    assert!(
        error_of(unreadable).contains("not an integer"),
        "the fault is not planted"
    );
    std::thread::sleep(Duration::from_millis(200)); // the timer fails on q
    assert!(!queued_with_timeouts(&mut con, "q", "a"));
    set_virtual_time(&mut con, "5");
    wait_until(Duration::from_secs(3), "a is reclaimed", || {
        queued_with_timeouts(&mut con, "q", "a")
    });
}

/// CLIENT PAUSE WRITE (and the pause of a manual or atomic-migration
/// failover) freezes the dataset: a write propagated then would trip the
/// server's assertion. The timer waits it out and reclaims after.
#[test]
fn the_timer_writes_nothing_while_writes_are_paused() {
    let server = Server::builder()
        .module_args(&["reclaim-interval-ms", "10"])
        .args(&["--appendonly", "yes"])
        .spawn();
    let mut con = server.connect();
    enqueue_one(&mut con, "files", "alice", "a1", "A1");
    let (id, _, _, _) = lease(&mut con, "files", 100).unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(800)
        .arg("WRITE")
        .query(&mut con)
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let _: String = redis::cmd("PING").query(&mut con).expect("server alive");
    assert!(
        !queued_with_timeouts(&mut con, "files", "a1"),
        "reclaimed while paused"
    );
    assert_eq!(id, b"a1");
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut con).unwrap();
    wait_until(Duration::from_secs(5), "reclaimed after the pause", || {
        queued_with_timeouts(&mut con, "files", "a1")
    });
}
