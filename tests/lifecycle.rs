//! An item's life beyond enqueue, lease and ack: delayed items (VTRR.DEFER,
//! promotion by LEASE and by the timer), VTRR.NACK, the dead-letter policy
//! and set (VTRR.POLICY, DEAD, REVIVE), VTRR.CANCEL, payloads gone missing,
//! and how STATS, INFO, notifications, CHECK and the Lua scripts see it all.

mod common;

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use redis::Connection;

/// HGET of `field` in queue `queue`'s `suffix`, in either layout, as bytes.
fn hget(con: &mut Connection, queue: &str, suffix: &str, field: &str) -> Option<Vec<u8>> {
    key_hgetall(con, queue, suffix).remove(field.as_bytes())
}

/// What `VTRR.INSPECT` shows of each of queue `queue`'s `suffixes`: the
/// logical keys' content, in either layout.
fn inspect_keys(con: &mut Connection, queue: &str, suffixes: &[&str]) -> Vec<(String, Value)> {
    suffixes
        .iter()
        .map(|suffix| {
            let content: Value = redis::cmd("VTRR.INSPECT")
                .arg(queue)
                .arg(*suffix)
                .query(con)
                .unwrap();
            (suffix.to_string(), content)
        })
        .collect()
}

/// Where `id` is in queue `queue`'s life: `queued`, `inflight`, `delayed`,
/// `dead`, or `absent`, read in one transaction (the timer may move it
/// between separate reads), through `VTRR.INSPECT` (either layout). Panics
/// if it is in two places.
fn state(con: &mut Connection, queue: &str, id: &str) -> &'static str {
    let places = [
        ("queue", "queued"),
        ("inflight", "inflight"),
        ("delayed", "delayed"),
        ("dead", "dead"),
    ];
    let mut pipe = redis::pipe();
    pipe.atomic();
    for (suffix, _) in places {
        pipe.cmd("VTRR.INSPECT").arg(queue).arg(suffix);
    }
    let zsets: Vec<Vec<Vec<u8>>> = pipe.query(con).unwrap();
    let found: Vec<&'static str> = places
        .iter()
        .zip(zsets)
        .filter(|(_, flat)| flat.chunks_exact(2).any(|pair| pair[0] == id.as_bytes()))
        .map(|((_, name), _)| *name)
        .collect();
    match found.as_slice() {
        [] => "absent",
        [one] => one,
        many => panic!("{id} is in {many:?} at once"),
    }
}

/// One entry of `VTRR.DEAD`: id, payload, partition, weight, timeouts,
/// nacks, died_at_ms, reason, last error.
type DeadEntry = (
    String,
    Vec<u8>,
    Option<String>,
    Option<i64>,
    i64,
    i64,
    i64,
    String,
    Option<Vec<u8>>,
);

fn dead_list(con: &mut Connection, queue: &str, count: Option<u64>) -> Vec<DeadEntry> {
    let mut cmd = redis::cmd("VTRR.DEAD");
    cmd.arg(queue);
    if let Some(count) = count {
        cmd.arg("COUNT").arg(count);
    }
    cmd.query(con).unwrap()
}

/// Asserts `queue` holds exactly one dead item and that it has the
/// `expected` id, payload, partition, weight, timeouts, nacks and reason;
/// returns its died_at_ms.
#[track_caller]
fn assert_one_dead(
    con: &mut Connection,
    queue: &str,
    expected: (&str, &[u8], &str, i64, i64, i64, &str),
) -> i64 {
    let dead = dead_list(con, queue, None);
    assert_eq!(dead.len(), 1, "{dead:?}");
    let (id, payload, partition, weight, timeouts, nacks, died_at, reason, _) = dead[0].clone();
    let (e_id, e_payload, e_partition, e_weight, e_timeouts, e_nacks, e_reason) = expected;
    assert_eq!(
        (
            id.as_str(),
            payload.as_slice(),
            partition.as_deref(),
            weight,
            timeouts,
            nacks,
            reason.as_str()
        ),
        (
            e_id,
            e_payload,
            Some(e_partition),
            Some(e_weight),
            e_timeouts,
            e_nacks,
            e_reason
        )
    );
    died_at
}

fn revive(con: &mut Connection, queue: &str, ids: &[&str]) -> i64 {
    redis::cmd("VTRR.REVIVE")
        .arg(queue)
        .arg(ids)
        .query(con)
        .unwrap()
}

/// The keys whose DUMP differs between two `dump_all`s (or that exist in
/// only one).
fn changed_keys(
    before: &[(Vec<u8>, Option<Vec<u8>>)],
    after: &[(Vec<u8>, Option<Vec<u8>>)],
) -> Vec<String> {
    let before: HashMap<_, _> = before.iter().cloned().collect();
    let after: HashMap<_, _> = after.iter().cloned().collect();
    let mut changed: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|key| before.get(*key) != after.get(*key))
        .map(|key| String::from_utf8_lossy(key).into_owned())
        .collect();
    changed.sort();
    changed.dedup();
    changed
}

fn text(id: &[u8]) -> &str {
    std::str::from_utf8(id).unwrap()
}

/// The keys beside the queue that hold delayed and dead items and nack
/// counts: what a drain and vtrr-queue's scripts leave alone.
const DELAYED_AND_DEAD: [&str; 6] = [
    "delayed",
    "delayed_task",
    "dead",
    "dead_task",
    "dead_reason",
    "nacks",
];

/// Leases the next item of `queue` and NACKs it with `options` (`[]`,
/// `["DEAD"]`, `["DELAY", ms]`), which must act; its id.
fn lease_and_nack(con: &mut Connection, queue: &str, options: &[&str]) -> String {
    let (id, _, token, _) = lease(con, queue, 60_000).unwrap();
    assert_eq!(nack(con, queue, &id, &token, options), 1);
    text(&id).to_string()
}

// ---------------------------------------------------------------- DEFER

#[test]
fn defer_holds_items_in_delayed_by_server_due_time_outside_the_queue() {
    let server = quiet_server();
    let mut con = server.connect();
    let before = server_time_ms(&mut con);
    let added = defer_items(
        &mut con,
        "q",
        5_000,
        &[("p", "a", 2, b"A"), ("r:s", "b", 1, b"B")],
    );
    let after = server_time_ms(&mut con);
    assert_eq!(added, 2);
    for id in ["a", "b"] {
        assert_eq!(state(&mut con, "q", id), "delayed");
        let due = key_zscore(&mut con, "q", "delayed", id).unwrap() as i64;
        assert!(
            (before + 5_000..=after + 5_000).contains(&due),
            "{id} due {due}, deferred between {before} and {after}"
        );
    }
    assert_eq!(hget(&mut con, "q", "delayed_task", "a").unwrap(), b"A");
    assert_eq!(hget(&mut con, "q", "delayed_task", "b").unwrap(), b"B");
    assert_eq!(hget(&mut con, "q", "meta", "a").unwrap(), b"2:p");
    assert_eq!(hget(&mut con, "q", "meta", "b").unwrap(), b"1:r:s");
    for key in [
        "queue",
        "task",
        "partition_virtual_time",
        "current_virtual_time",
    ] {
        assert!(!key_exists(&mut con, "q", key), "{key} written");
    }
    // Not due yet: a lease gets nothing and moves nothing.
    let held = dump_queue(&mut con, "q");
    assert_eq!(lease(&mut con, "q", 60_000), None);
    assert_eq!(dump_queue(&mut con, "q"), held);
    assert_invariants(&mut con, "q");
}

#[test]
fn a_delayed_item_is_never_served_before_its_due_time() {
    let server = quiet_server();
    let mut con = server.connect();
    assert_eq!(defer_items(&mut con, "q", 150, &[("p", "a", 1, b"A")]), 1);
    let due = key_zscore(&mut con, "q", "delayed", "a").unwrap() as i64;
    let lease_ms = 60_000;
    let mut attempts = 0;
    let mut got = None;
    wait_until(Duration::from_secs(2), "a is served", || {
        attempts += 1;
        got = lease(&mut con, "q", lease_ms);
        got.is_some()
    });
    let (id, payload, _, timeouts) = got.unwrap();
    assert_eq!(
        (text(&id), payload.as_slice(), timeouts),
        ("a", &b"A"[..], 0)
    );
    assert!(attempts > 1, "served by the first lease, 150 ms early");
    // The lease's expiry is the server's clock at the lease + lease-ms.
    let expiry = key_zscore(&mut con, "q", "inflight", "a").unwrap() as i64;
    assert!(
        expiry - lease_ms as i64 >= due,
        "leased at {} before its due time {due}",
        expiry - lease_ms as i64
    );
    assert!(!key_exists(&mut con, "q", "delayed"));
    assert!(!key_exists(&mut con, "q", "delayed_task"));
    assert_invariants(&mut con, "q");
}

#[test]
fn a_promoted_item_is_scored_as_if_enqueued_at_promotion() {
    let server = quiet_server();
    let mut con = server.connect();
    // Queue "q" gets b deferred; its twin gets b enqueued at the moment b
    // falls due. Everything else is the same.
    let backlog: Vec<(&str, String)> = (1..=5).map(|n| ("a", format!("a{n}"))).collect();
    for queue in ["q", "twin"] {
        let items: Vec<(&str, &str, u64, &[u8])> = backlog
            .iter()
            .map(|(p, id)| (*p, id.as_str(), 1, &b"x"[..]))
            .collect();
        assert_eq!(enqueue_items(&mut con, queue, &items), 5); // scores 1..5
    }
    assert_eq!(defer_items(&mut con, "q", 200, &[("b", "b", 1, b"B")]), 1);
    for queue in ["q", "twin"] {
        assert_eq!(
            ids(&lease_count(&mut con, queue, 60_000, 3)),
            ["a1", "a2", "a3"]
        );
    }
    let due = key_zscore(&mut con, "q", "delayed", "b").unwrap() as i64;
    wait_until(Duration::from_secs(2), "b is due", || {
        server_time_ms(&mut con) >= due
    });
    assert_eq!(enqueue_items(&mut con, "twin", &[("b", "b", 1, b"B")]), 1);
    // The lease promotes b at current_virtual_time 3 + 1 = 4, behind a4 by
    // member order: no credit for the time it waited (at defer time it
    // would have scored 1 and been served first).
    let next = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(text(&next.0), "a4");
    assert_eq!(key_zscore(&mut con, "q", "queue", "b"), Some(4.0));
    assert_eq!(
        key_hget(&mut con, "q", "partition_virtual_time", "b").as_deref(),
        Some("5")
    );
    assert_eq!(text(&lease(&mut con, "twin", 60_000).unwrap().0), "a4");
    let scored = ["queue", "partition_virtual_time", "current_virtual_time"];
    let [q, twin] = ["q", "twin"].map(|queue| inspect_keys(&mut con, queue, &scored));
    for ((key, (_, q)), (_, twin)) in scored.iter().zip(&q).zip(&twin) {
        assert_eq!(q, twin, "{key} differs from an enqueue at promotion");
    }
    assert_eq!(ids(&lease_count(&mut con, "q", 60_000, 5)), ["b", "a5"]);
    assert_invariants(&mut con, "q");
}

#[test]
fn defer_zero_is_exactly_enqueue() {
    let server = quiet_server();
    let mut con = server.connect();
    let items: [(&str, &str, u64, &[u8]); 3] = [
        ("p", "a", 2, b"A"),
        ("r", "b", 1, b"B"),
        ("p", "c", 3, b"C"),
    ];
    assert_eq!(defer_items(&mut con, "deferred", 0, &items), 3);
    assert_eq!(enqueue_items(&mut con, "enqueued", &items), 3);
    // The records and `rank_waiting` hold the clock reading each call
    // started its partitions' waits at; every other key is the same.
    let keys = |con: &mut Connection, queue: &str| -> Vec<Value> {
        ALL_SUFFIXES
            .into_iter()
            .filter(|suffix| !["partitions", "rank_waiting"].contains(suffix))
            .map(|suffix| {
                command(&["VTRR.INSPECT", queue, suffix])
                    .query(con)
                    .unwrap()
            })
            .collect()
    };
    assert_eq!(keys(&mut con, "deferred"), keys(&mut con, "enqueued"));
    assert_eq!(
        observed(&mut con, "deferred"),
        observed(&mut con, "enqueued")
    );
    assert!(!key_exists(&mut con, "deferred", "delayed"));
    let info = vtrr_info(&mut con);
    assert_eq!(info["vtrr_items_enqueued"], 6);
    assert_eq!(info["vtrr_items_deferred"], 0);
}

#[test]
fn defer_and_enqueue_skip_ids_already_queued_leased_delayed_or_dead() {
    let server = quiet_server();
    let mut con = server.connect();
    // All score 1: leases come in member order dead, leased, queued.
    enqueue_items(
        &mut con,
        "q",
        &[
            ("a", "dead", 1, b"D"),
            ("b", "leased", 1, b"L"),
            ("c", "queued", 1, b"Q"),
        ],
    );
    assert_eq!(lease_and_nack(&mut con, "q", &["DEAD"]), "dead");
    assert_eq!(text(&lease(&mut con, "q", 60_000).unwrap().0), "leased");
    defer_items(&mut con, "q", 60_000, &[("d", "delayed", 1, b"W")]);
    let present = ["queued", "leased", "delayed", "dead"];
    for id in present {
        assert_eq!(
            state(&mut con, "q", id),
            if id == "leased" { "inflight" } else { id }
        );
    }

    let before = dump_all(&mut con);
    for id in present {
        for delay in [0, 1_000] {
            let added = defer_items(&mut con, "q", delay, &[("x", id, 7, b"other")]);
            assert_eq!(added, 0, "DEFER {delay} re-added {id}");
        }
        assert_eq!(
            enqueue_items(&mut con, "q", &[("x", id, 7, b"other")]),
            0,
            "ENQUEUE re-added {id}"
        );
    }
    let changed = changed_keys(&before, &dump_all(&mut con));
    assert!(changed.is_empty(), "a skipped id changed {changed:?}");

    // The reply counts only what was added; an id twice in one call once.
    let added = defer_items(
        &mut con,
        "q",
        1_000,
        &[
            ("x", "dead", 1, b"1"),
            ("x", "new", 1, b"2"),
            ("x", "new", 1, b"3"),
        ],
    );
    assert_eq!(added, 1);
    assert_eq!(hget(&mut con, "q", "delayed_task", "new").unwrap(), b"2");
    let added = enqueue_items(
        &mut con,
        "q",
        &[("x", "new", 1, b"4"), ("x", "fresh", 1, b"5")],
    );
    assert_eq!(added, 1);
    assert_eq!(state(&mut con, "q", "fresh"), "queued");
    assert_invariants(&mut con, "q");
}

#[test]
fn defer_refuses_a_bad_delay_with_nothing_written() {
    let server = quiet_server();
    let mut con = server.connect();
    for bad in ["-1", "315360000001", "1.5", "soon"] {
        let result = command(&["VTRR.DEFER", "q", bad, "p", "a", "1", "A"]).query(&mut con);
        assert_eq!(
            error_of(result),
            "ERR delay-ms must be an integer between 0 and 315360000000",
            "{bad}"
        );
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

// ---------------------------------------------------------------- the timer

#[test]
fn the_timer_promotes_a_due_delayed_item_with_no_command_sent() {
    let server = timed_server("20");
    let mut con = server.connect();
    // Past the start-up index rebuild: only DEFER's own note can find it.
    wait_past_startup_rebuild(&mut con);
    defer_items(&mut con, "q", 50, &[("p", "a", 1, b"A")]);
    let due = key_zscore(&mut con, "q", "delayed", "a").unwrap() as i64;
    let mut observer = server.connect();
    // Only reads from here on.
    wait_until(Duration::from_secs(2), "the timer queues a", || {
        key_zscore(&mut observer, "q", "queue", "a").is_some()
    });
    assert!(server_time_ms(&mut observer) >= due);
    assert_eq!(state(&mut observer, "q", "a"), "queued");
    assert_eq!(key_zscore(&mut observer, "q", "queue", "a"), Some(1.0));
    assert_eq!(hget(&mut observer, "q", "task", "a").unwrap(), b"A");
    assert!(!key_exists(&mut observer, "q", "delayed_task"));
    let info = vtrr_info(&mut observer);
    assert_eq!(info["vtrr_timer_items_promoted"], 1);
    assert_eq!(info["vtrr_items_promoted"], 1);
    assert_invariants(&mut observer, "q");
}

#[test]
fn a_due_delayed_item_wakes_a_blocked_lease() {
    let server = timed_server("20");
    let url = server.url();
    let (sent, received) = mpsc::channel();
    std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let leased: Option<Lease> = lease_block_cmd("q", 1000, 0).query(&mut con).unwrap();
        let _ = sent.send(leased);
    });
    let mut con = server.connect();
    // Past the start-up index rebuild: only DEFER's own note can find it.
    wait_past_startup_rebuild(&mut con);
    wait_blocked(&mut con, 1);
    // A delayed item does not wake the waiter; falling due does, with no
    // other command sent.
    defer_items(&mut con, "q", 100, &[("p", "a", 1, b"A")]);
    let due = key_zscore(&mut con, "q", "delayed", "a").unwrap() as i64;
    let leased = received
        .recv_timeout(Duration::from_secs(3))
        .expect("the waiter was not woken by the due item");
    let (id, payload, _, timeouts) = leased.expect("woken with an item");
    assert_eq!(
        (text(&id), payload.as_slice(), timeouts),
        ("a", &b"A"[..], 0)
    );
    let expiry = key_zscore(&mut con, "q", "inflight", "a").unwrap() as i64;
    assert!(expiry - 1000 >= due, "served before its due time");
    assert_eq!(vtrr_info(&mut con)["vtrr_timer_items_promoted"], 1);
    assert_invariants(&mut con, "q");
}

#[test]
fn a_drain_leaves_delayed_and_dead_items_alone() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_items(
        &mut con,
        "q",
        &[
            ("p", "x", 1, b"X"),
            ("p", "y", 1, b"Y"),
            ("p", "a", 1, b"A"),
        ],
    );
    assert_eq!(lease_and_nack(&mut con, "q", &["DEAD"]), "x");
    assert_eq!(lease_and_nack(&mut con, "q", &["DELAY", "60000"]), "y");
    defer_items(&mut con, "q", 60_000, &[("r", "d", 1, b"D")]);
    let kept = [DELAYED_AND_DEAD.as_slice(), &["meta"]].concat();
    let before = inspect_keys(&mut con, "q", &kept);
    for suffix in &kept {
        assert!(key_exists(&mut con, "q", suffix), "{suffix}");
    }
    // a is the last queued item: leasing it drains the queue.
    assert_eq!(text(&lease(&mut con, "q", 60_000).unwrap().0), "a");
    assert_key_drained(&mut con, "q");
    let after = inspect_keys(&mut con, "q", &kept);
    for ((key, before), (_, after)) in before.iter().zip(&after) {
        assert!(before == after, "the drain changed {key}");
    }
    assert_invariants(&mut con, "q");
}

// ---------------------------------------------------------------- NACK

#[test]
fn a_nack_with_a_stale_token_replies_0_and_changes_nothing() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    let (_, _, stale, _) = lease(&mut con, "q", 1).unwrap();
    let_expire();
    assert_eq!(reclaim(&mut con, "q"), 1);
    let leased = lease_count(&mut con, "q", 60_000, 2);
    assert_eq!(ids(&leased), ["b", "a"]);
    let (b_token, a_token) = (leased[0].2.clone(), leased[1].2.clone());
    let before = dump_all(&mut con);
    let attempts: [(&str, &str, &[&str]); 6] = [
        ("a", &stale, &[]),
        ("a", &stale, &["DEAD"]),
        ("a", &stale, &["DELAY", "10"]),
        ("a", &b_token, &[]),
        ("a", "", &[]),
        ("nosuch", &a_token, &[]),
    ];
    for (id, token, options) in attempts {
        assert_eq!(
            nack(&mut con, "q", id.as_bytes(), token, options),
            0,
            "{id} {token:?} {options:?}"
        );
    }
    let changed = changed_keys(&before, &dump_all(&mut con));
    assert!(changed.is_empty(), "a stale nack changed {changed:?}");
    assert_eq!(vtrr_info(&mut con)["vtrr_items_nacked"], 0);
    // The current token still works.
    assert_eq!(nack(&mut con, "q", b"a", &a_token, &[]), 1);
    assert_eq!(vtrr_info(&mut con)["vtrr_items_nacked"], 1);
}

#[test]
fn a_plain_nack_requeues_rescored_and_counts_nacks_apart_from_timeouts() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    lease(&mut con, "q", 1).unwrap();
    let_expire();
    // This lease reclaims a (timeouts 1) and leases it again.
    let (id, _, token, timeouts) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!((text(&id), timeouts), ("a", 1));
    // Drained: b and c score 1 and 2, the partition's next time is 3.
    enqueue_items(&mut con, "q", &[("p", "b", 1, b"B"), ("p", "c", 1, b"C")]);
    assert_eq!(nack(&mut con, "q", b"a", &token, &[]), 1);
    assert_eq!(state(&mut con, "q", "a"), "queued");
    assert_eq!(
        key_zscore(&mut con, "q", "queue", "a"),
        Some(3.0),
        "rescored like a reclaim: max(partition 3, current 0 + 1)"
    );
    assert_eq!(
        key_hget(&mut con, "q", "partition_virtual_time", "p").as_deref(),
        Some("4")
    );
    assert_eq!(hget(&mut con, "q", "task", "a").unwrap(), b"A");
    assert_eq!(key_hget(&mut con, "q", "nacks", "a").as_deref(), Some("1"));
    assert_eq!(
        key_hget(&mut con, "q", "timeouts", "a").as_deref(),
        Some("1"),
        "a nack is not a timeout"
    );
    for key in ["inflight", "inflight_task", "lease"] {
        assert!(!key_exists(&mut con, "q", key), "{key}");
    }
    // The nacked lease is over.
    assert_eq!(ack(&mut con, "q", b"a", &token), 0);
    assert_eq!(renew(&mut con, "q", b"a", &token, 60_000), 0);
    assert_eq!(nack(&mut con, "q", b"a", &token, &[]), 0);
    assert_eq!(state(&mut con, "q", "a"), "queued");
    let leased = lease_count(&mut con, "q", 60_000, 3);
    assert_eq!(ids(&leased), ["b", "c", "a"]);
    assert_eq!(leased[2].3, 1, "timeouts still reported");
    assert_invariants(&mut con, "q");
}

#[test]
fn nack_delay_holds_the_item_until_its_retry_time() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    let (_, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    let before = server_time_ms(&mut con);
    assert_eq!(nack(&mut con, "q", b"a", &token, &["DELAY", "250"]), 1);
    let after = server_time_ms(&mut con);
    assert_eq!(state(&mut con, "q", "a"), "delayed");
    let due = key_zscore(&mut con, "q", "delayed", "a").unwrap() as i64;
    assert!(
        (before + 250..=after + 250).contains(&due),
        "due {due}, nacked between {before} and {after}"
    );
    assert_eq!(hget(&mut con, "q", "delayed_task", "a").unwrap(), b"A");
    assert_eq!(key_hget(&mut con, "q", "nacks", "a").as_deref(), Some("1"));
    assert_eq!(stats(&mut con, "q")["next-due-ms"], Value::Int(due));
    assert_invariants(&mut con, "q");
    assert_eq!(lease(&mut con, "q", 60_000), None, "served before due");
    let mut got = None;
    wait_until(Duration::from_secs(2), "a is served again", || {
        got = lease_with_counters(&mut con, "q", 60_000);
        got.is_some()
    });
    let (id, payload, token, timeouts, nacks) = got.unwrap();
    assert_eq!(
        (text(&id), payload.as_slice(), timeouts, nacks),
        ("a", &b"A"[..], 0, 1)
    );
    let expiry = key_zscore(&mut con, "q", "inflight", "a").unwrap() as i64;
    assert!(expiry - 60_000 >= due, "served before its retry time");
    // DELAY 0 is the plain nack: straight back to the queue.
    assert_eq!(nack(&mut con, "q", b"a", &token, &["DELAY", "0"]), 1);
    assert_eq!(state(&mut con, "q", "a"), "queued");
    assert_eq!(key_hget(&mut con, "q", "nacks", "a").as_deref(), Some("2"));
    assert_invariants(&mut con, "q");
}

#[test]
fn nack_dead_dead_letters_the_item_with_reason_nack() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 3, b"A")]);
    let (_, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    for (options, message) in [
        (
            &["DELAY", "5", "DEAD"][..],
            "ERR DELAY and DEAD cannot be combined",
        ),
        (
            &["DELAY", "-1"],
            "ERR DELAY ms must be an integer between 0 and 315360000000",
        ),
        (&["DELAY"], "ERR syntax error"),
        (&["LATER"], "ERR syntax error"),
    ] {
        let result = redis::cmd("VTRR.NACK")
            .arg("q")
            .arg("a")
            .arg(&token)
            .arg(options)
            .query(&mut con);
        assert_eq!(error_of(result), message, "{options:?}");
    }
    assert_eq!(
        state(&mut con, "q", "a"),
        "inflight",
        "a refused nack acted"
    );
    let before = server_time_ms(&mut con);
    assert_eq!(nack(&mut con, "q", b"a", &token, &["DEAD"]), 1);
    let after = server_time_ms(&mut con);
    assert_eq!(state(&mut con, "q", "a"), "dead");
    assert_eq!(hget(&mut con, "q", "dead_task", "a").unwrap(), b"A");
    assert_eq!(
        key_hget(&mut con, "q", "dead_reason", "a").as_deref(),
        Some("nack")
    );
    let died_at = assert_one_dead(&mut con, "q", ("a", b"A", "p", 3, 0, 1, "nack"));
    assert!((before..=after).contains(&died_at), "{died_at}");
    assert_eq!(lease(&mut con, "q", 60_000), None, "a dead item was served");
    assert_invariants(&mut con, "q");
}

#[test]
fn max_nacks_dead_letters_an_item_nacked_once_more_than_allowed() {
    let server = quiet_server();
    let mut con = server.connect();
    set_policy(&mut con, "q", &["MAX-NACKS", "1"]);
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    assert_eq!(lease_and_nack(&mut con, "q", &[]), "a");
    assert_eq!(state(&mut con, "q", "a"), "queued", "first nack is allowed");
    // Whatever the worker asks for.
    assert_eq!(lease_and_nack(&mut con, "q", &["DELAY", "1000"]), "a");
    assert_eq!(state(&mut con, "q", "a"), "dead");
    let dead = dead_list(&mut con, "q", None);
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].5, dead[0].7.as_str()), (2, "max-nacks"));
    assert_invariants(&mut con, "q");

    // MAX-NACKS 0: the first nack dead-letters.
    set_policy(&mut con, "zero", &["MAX-NACKS", "0"]);
    enqueue_items(&mut con, "zero", &[("p", "z", 1, b"Z")]);
    assert_eq!(lease_and_nack(&mut con, "zero", &[]), "z");
    assert_eq!(state(&mut con, "zero", "z"), "dead");
    assert_eq!(dead_list(&mut con, "zero", None)[0].7, "max-nacks");
    assert_eq!(vtrr_info(&mut con)["vtrr_items_dead_lettered"], 2);
}

#[test]
fn lease_withcounters_adds_the_nack_count_and_ack_clears_it() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    let lengths = |value: &Value| match value {
        Value::Array(items) => items.len(),
        other => panic!("{other:?}"),
    };
    for round in 0..3 {
        let plain: Value = redis::cmd("VTRR.LEASE")
            .arg("q")
            .arg(60_000)
            .query(&mut con)
            .unwrap();
        assert_eq!(lengths(&plain), 4, "default LEASE keeps four elements");
        let (_, _, token, _): Lease = redis::from_redis_value(plain).unwrap();
        assert_eq!(nack(&mut con, "q", b"a", &token, &[]), 1);
        let counted: Value = redis::cmd("VTRR.LEASE")
            .arg("q")
            .arg(60_000)
            .arg("WITHCOUNTERS")
            .query(&mut con)
            .unwrap();
        assert_eq!(lengths(&counted), 5);
        let (id, _, token, timeouts, nacks): CountedLease =
            redis::from_redis_value(counted).unwrap();
        assert_eq!((text(&id), timeouts, nacks), ("a", 0, 2 * round + 1));
        assert_eq!(nack(&mut con, "q", b"a", &token, &[]), 1);
    }
    enqueue_items(&mut con, "q", &[("r", "b", 1, b"B")]);
    let leased: Vec<Value> = redis::cmd("VTRR.LEASE")
        .arg("q")
        .arg(60_000)
        .arg("COUNT")
        .arg(2)
        .arg("WITHCOUNTERS")
        .query(&mut con)
        .unwrap();
    let leased: Vec<CountedLease> = leased
        .into_iter()
        .map(|value| {
            assert_eq!(lengths(&value), 5);
            redis::from_redis_value(value).unwrap()
        })
        .collect();
    let counts: Vec<(&str, i64)> = leased.iter().map(|l| (text(&l.0), l.4)).collect();
    assert_eq!(counts, [("a", 6), ("b", 0)]);
    assert_eq!(ack(&mut con, "q", b"a", &leased[0].2), 1);
    assert_eq!(hget(&mut con, "q", "nacks", "a"), None, "ACK left nacks");
    assert!(!key_exists(&mut con, "q", "nacks"));
    assert_eq!(hget(&mut con, "q", "meta", "a"), None);
    assert_invariants(&mut con, "q");
}

// ---------------------------------------------------------------- POLICY

#[test]
fn policy_reads_nil_by_default_reads_back_what_was_set_and_none_clears_it() {
    let server = quiet_server();
    let mut con = server.connect();
    let read = |con: &mut Connection| {
        let p: HashMap<String, Option<i64>> = policy(con, "q");
        assert_eq!(p.len(), 13, "{p:?}");
        for limit in ["concurrency", "rate", "per-ms", "burst"] {
            assert_eq!(p[&format!("default-{limit}")], None);
            assert_eq!(p[limit], None);
        }
        assert_eq!(p["default-max-queued"], None);
        assert_eq!((p["result-ttl-ms"], p["dedup-ms"]), (None, None));
        (p["max-timeouts"], p["max-nacks"])
    };
    assert_eq!(read(&mut con), (None, None));
    assert!(
        !key_exists(&mut con, "q", "policy"),
        "reading wrote the policy"
    );
    set_policy(&mut con, "q", &["MAX-TIMEOUTS", "3", "MAX-NACKS", "0"]);
    assert_eq!(read(&mut con), (Some(3), Some(0)));
    let stored: HashMap<String, String> = key_hgetall(&mut con, "q", "policy")
        .into_iter()
        .map(|(field, value)| {
            (
                String::from_utf8(field).unwrap(),
                String::from_utf8(value).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        stored,
        HashMap::from([
            ("max-timeouts".to_string(), "3".to_string()),
            ("max-nacks".to_string(), "0".to_string())
        ])
    );
    set_policy(&mut con, "q", &["max-nacks", "none"]);
    assert_eq!(read(&mut con), (Some(3), None));
    set_policy(&mut con, "q", &["MAX-NACKS", "1000000000"]);
    assert_eq!(read(&mut con), (Some(3), Some(1_000_000_000)));
    for (options, message) in [
        (
            &["MAX-TIMEOUTS", "-1"][..],
            "ERR MAX-TIMEOUTS must be an integer between 0 and 1000000000, or NONE",
        ),
        (
            &["MAX-NACKS", "1000000001"],
            "ERR MAX-NACKS must be an integer between 0 and 1000000000, or NONE",
        ),
        (
            &["MAX-TIMEOUTS", "1", "MAX-NACKS", "never"],
            "ERR MAX-NACKS must be an integer between 0 and 1000000000, or NONE",
        ),
        (&["MAX-NACKS"], "ERR syntax error"),
        (&["MAX-DEATHS", "1"], "ERR syntax error"),
    ] {
        let result = redis::cmd("VTRR.POLICY")
            .arg("q")
            .arg(options)
            .query(&mut con);
        assert_eq!(error_of(result), message, "{options:?}");
    }
    assert_eq!(
        read(&mut con),
        (Some(3), Some(1_000_000_000)),
        "a refused call changed it"
    );
    set_policy(
        &mut con,
        "q",
        &["MAX-TIMEOUTS", "NONE", "MAX-NACKS", "NONE"],
    );
    assert_eq!(read(&mut con), (None, None));
    assert!(!key_exists(&mut con, "q", "policy"));
}

/// Who takes the expired leases back in the MAX-TIMEOUTS tests.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Reclaimer {
    ReclaimCommand,
    LeaseInline,
    Timer,
}

/// With MAX-TIMEOUTS 1 and 1 ms leases, the first expiry requeues the item
/// and the second dead-letters it with the reason `max-timeouts`.
fn max_timeouts_one_dead_letters_on_the_second_expiry(by: Reclaimer) {
    let server = if by == Reclaimer::Timer {
        timed_server("20")
    } else {
        quiet_server()
    };
    let mut con = server.connect();
    set_policy(&mut con, "q", &["MAX-TIMEOUTS", "1"]);
    enqueue_items(&mut con, "q", &[("p", "a", 2, b"A")]);
    assert_eq!(text(&lease(&mut con, "q", 1).unwrap().0), "a");
    match by {
        Reclaimer::ReclaimCommand => {
            let_expire();
            assert_eq!(reclaim(&mut con, "q"), 1);
        }
        Reclaimer::LeaseInline => let_expire(),
        Reclaimer::Timer => wait_until(Duration::from_secs(2), "the timer requeues a", || {
            state(&mut con, "q", "a") == "queued"
        }),
    }
    if by != Reclaimer::LeaseInline {
        assert_eq!(state(&mut con, "q", "a"), "queued", "first expiry requeues");
    }
    // (LeaseInline: this lease reclaims a, then leases it.)
    let (id, _, _, timeouts) = lease(&mut con, "q", 1).unwrap();
    assert_eq!((text(&id), timeouts), ("a", 1));
    let started = server_time_ms(&mut con);
    match by {
        Reclaimer::ReclaimCommand => {
            let_expire();
            assert_eq!(reclaim(&mut con, "q"), 1, "a dead-lettered lease counts");
        }
        Reclaimer::LeaseInline => {
            let_expire();
            assert_eq!(lease(&mut con, "q", 60_000), None);
        }
        Reclaimer::Timer => wait_until(Duration::from_secs(2), "the timer buries a", || {
            state(&mut con, "q", "a") != "inflight"
        }),
    }
    assert_eq!(state(&mut con, "q", "a"), "dead", "second expiry");
    let died_at = assert_one_dead(&mut con, "q", ("a", b"A", "p", 2, 2, 0, "max-timeouts"));
    assert!(died_at >= started, "{died_at} < {started}");
    assert_eq!(lease(&mut con, "q", 60_000), None);
    let info = vtrr_info(&mut con);
    assert_eq!(info["vtrr_items_dead_lettered"], 1);
    assert_eq!(info["vtrr_items_reclaimed"], 2);
    if by == Reclaimer::Timer {
        assert_eq!(info["vtrr_timer_items_reclaimed"], 2);
    }
    assert_invariants(&mut con, "q");
}

#[test]
fn max_timeouts_dead_letters_on_the_second_expiry_via_reclaim() {
    max_timeouts_one_dead_letters_on_the_second_expiry(Reclaimer::ReclaimCommand);
}

#[test]
fn max_timeouts_dead_letters_on_the_second_expiry_via_lease() {
    max_timeouts_one_dead_letters_on_the_second_expiry(Reclaimer::LeaseInline);
}

#[test]
fn max_timeouts_dead_letters_on_the_second_expiry_via_the_timer_alone() {
    max_timeouts_one_dead_letters_on_the_second_expiry(Reclaimer::Timer);
}

// ---------------------------------------------------------------- DEAD, REVIVE, CANCEL

#[test]
fn dead_lists_the_oldest_first_with_every_field_ten_by_default() {
    let server = quiet_server();
    let mut con = server.connect();
    // "slow" times out once before it dies, so its timeouts show.
    enqueue_items(&mut con, "q", &[("s", "slow", 4, b"Pslow")]);
    lease(&mut con, "q", 1).unwrap();
    let_expire();
    let names: Vec<String> = (0..12).map(|n| format!("i{n:02}")).collect();
    let items: Vec<(String, &str, u64, String)> = names
        .iter()
        .enumerate()
        .map(|(n, id)| {
            let partition = ["t0", "t1", "t2"][n % 3];
            (
                partition.to_string(),
                id.as_str(),
                n as u64 % 4 + 1,
                format!("P{id}"),
            )
        })
        .collect();
    let args: Vec<(&str, &str, u64, &[u8])> = items
        .iter()
        .map(|(p, id, w, payload)| (p.as_str(), *id, *w, payload.as_bytes()))
        .collect();
    enqueue_items(&mut con, "q", &args);
    // Reclaims slow (timeouts 1) and leases all thirteen.
    let leased = lease_count(&mut con, "q", 60_000, 20);
    assert_eq!(leased.len(), 13);
    let tokens: HashMap<String, String> = leased
        .iter()
        .map(|l| (text(&l.0).to_string(), l.2.clone()))
        .collect();
    // Die in an order unlike the ids' order: slow, i11, i10, ..., i00, a
    // few ms apart.
    let order: Vec<String> = std::iter::once("slow".to_string())
        .chain(names.iter().rev().cloned())
        .collect();
    let started = server_time_ms(&mut con);
    for id in &order {
        assert_eq!(
            nack(&mut con, "q", id.as_bytes(), &tokens[id], &["DEAD"]),
            1
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let finished = server_time_ms(&mut con);

    let all = dead_list(&mut con, "q", Some(100));
    let listed: Vec<&str> = all.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(listed, order, "not oldest first");
    for pair in all.windows(2) {
        assert!(pair[0].6 < pair[1].6, "died_at not increasing: {pair:?}");
    }
    for (id, payload, partition, weight, timeouts, nacks, died_at, reason, last_error) in &all {
        let (expected_partition, expected_weight) = if id == "slow" {
            ("s".to_string(), 4)
        } else {
            let n: usize = id[1..].parse().unwrap();
            (format!("t{}", n % 3), n as i64 % 4 + 1)
        };
        assert_eq!(payload, format!("P{id}").as_bytes());
        assert_eq!(
            partition.as_deref(),
            Some(expected_partition.as_str()),
            "{id}"
        );
        assert_eq!(*weight, Some(expected_weight), "{id}");
        assert_eq!(*timeouts, i64::from(id == "slow"), "{id}");
        assert_eq!(*nacks, 1, "{id}");
        assert!((started..=finished).contains(died_at), "{id} {died_at}");
        assert_eq!(reason, "nack");
        assert_eq!(*last_error, None, "{id}: no nack gave a reason");
    }
    assert_eq!(
        dead_list(&mut con, "q", None),
        all[..10].to_vec(),
        "default 10"
    );
    assert_eq!(dead_list(&mut con, "q", Some(3)), all[..3].to_vec());
    assert_eq!(dead_list(&mut con, "q", Some(1)), all[..1].to_vec());
    assert!(dead_list(&mut con, "other", None).is_empty());
    for bad in ["0", "-1", "many"] {
        let result = command(&["VTRR.DEAD", "q", "COUNT", bad]).query(&mut con);
        assert_eq!(error_of(result), "ERR COUNT must be a positive integer");
    }
    let result = command(&["VTRR.DEAD", "q", "LIMIT", "1"]).query(&mut con);
    assert_eq!(error_of(result), "ERR syntax error");
    assert_invariants(&mut con, "q");
}

#[test]
fn revive_puts_dead_items_back_fresh_with_counters_reset() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("r", "d", 1, b"D")]);
    lease(&mut con, "q", 1).unwrap();
    let_expire();
    // Drained: x1..x4 score 1..4.
    let xs: Vec<(&str, &str, u64, &[u8])> = ["x1", "x2", "x3", "x4"]
        .iter()
        .map(|id| ("p", *id, 1, &b"X"[..]))
        .collect();
    enqueue_items(&mut con, "q", &xs);
    // Reclaims d (timeouts 1, score 1), leases it ahead of x1 by member order.
    let (id, _, token, timeouts) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!((text(&id), timeouts), ("d", 1));
    assert_eq!(nack(&mut con, "q", b"d", &token, &["DEAD"]), 1);
    assert_eq!(ids(&lease_count(&mut con, "q", 60_000, 2)), ["x1", "x2"]);
    let dead = dead_list(&mut con, "q", None);
    assert_eq!((dead[0].4, dead[0].5), (1, 1));

    // x3 queued, x1 leased, nosuch absent: skipped.
    assert_eq!(revive(&mut con, "q", &["x3", "d", "nosuch", "x1"]), 1);
    assert_eq!(state(&mut con, "q", "d"), "queued");
    assert_eq!(state(&mut con, "q", "x1"), "inflight");
    assert_eq!(
        key_zscore(&mut con, "q", "queue", "d"),
        Some(3.0),
        "scored as if enqueued now: max(partition 2, current 2 + 1)"
    );
    assert_eq!(
        key_hget(&mut con, "q", "partition_virtual_time", "r").as_deref(),
        Some("4")
    );
    assert_eq!(hget(&mut con, "q", "task", "d").unwrap(), b"D");
    assert_eq!(hget(&mut con, "q", "meta", "d").unwrap(), b"1:r");
    for key in ["timeouts", "nacks", "dead_task", "dead_reason"] {
        assert_eq!(hget(&mut con, "q", key, "d"), None, "{key}");
    }
    assert!(dead_list(&mut con, "q", None).is_empty());
    assert_eq!(revive(&mut con, "q", &["d"]), 0, "no longer dead");
    let (id, payload, _, timeouts, nacks) = lease_with_counters(&mut con, "q", 60_000).unwrap();
    assert_eq!(
        (text(&id), payload.as_slice(), timeouts, nacks),
        ("d", &b"D"[..], 0, 0)
    );
    let result = command(&["VTRR.REVIVE", "q", ""]).query(&mut con);
    assert_eq!(error_of(result), "ERR id must not be empty");
    assert_eq!(vtrr_info(&mut con)["vtrr_items_revived"], 1);
    assert_invariants(&mut con, "q");
}

#[test]
fn cancel_deletes_queued_delayed_dead_and_leased_items_for_good() {
    let server = timed_server("20");
    let mut con = server.connect();
    // "leased" times out once (by the timer), then is leased for 300 ms.
    enqueue_items(&mut con, "q", &[("b", "leased", 1, b"L")]);
    lease(&mut con, "q", 1).unwrap();
    wait_until(Duration::from_secs(2), "the timer requeues leased", || {
        state(&mut con, "q", "leased") == "queued"
    });
    let (id, _, lease_token, timeouts) = lease(&mut con, "q", 300).unwrap();
    assert_eq!((text(&id), timeouts), ("leased", 1));
    let expiry = key_zscore(&mut con, "q", "inflight", "leased").unwrap() as i64;
    // All score 1: leases come in member order dead, queued, zkeep.
    enqueue_items(
        &mut con,
        "q",
        &[
            ("a", "dead", 1, b"D"),
            ("c", "queued", 1, b"Q"),
            ("d", "zkeep", 1, b"K"),
        ],
    );
    assert_eq!(lease_and_nack(&mut con, "q", &["DEAD"]), "dead");
    defer_items(&mut con, "q", 60_000, &[("e", "delayed", 1, b"W")]);
    let doomed = ["queued", "delayed", "dead", "leased"];
    for (id, expected) in doomed.iter().zip(["queued", "delayed", "dead", "inflight"]) {
        assert_eq!(state(&mut con, "q", id), expected, "{id}");
    }

    assert_eq!(
        cancel(
            &mut con,
            "q",
            &["queued", "delayed", "nosuch", "dead", "leased"]
        ),
        4
    );
    assert_eq!(cancel(&mut con, "q", &["queued", "nosuch"]), 0);
    let hashes = [
        "task",
        "delayed_task",
        "dead_task",
        "dead_reason",
        "inflight_task",
        "lease",
        "meta",
        "timeouts",
        "nacks",
    ];
    for id in doomed {
        assert_eq!(state(&mut con, "q", id), "absent", "{id}");
        for hash in hashes {
            assert_eq!(hget(&mut con, "q", hash, id), None, "{id} left in {hash}");
        }
    }
    // The cancelled lease is lost to its worker.
    assert_eq!(renew(&mut con, "q", b"leased", &lease_token, 60_000), 0);
    assert_eq!(ack(&mut con, "q", b"leased", &lease_token), 0);
    assert_eq!(nack(&mut con, "q", b"leased", &lease_token, &[]), 0);
    assert_eq!(state(&mut con, "q", "zkeep"), "queued");
    assert_invariants(&mut con, "q");
    // Nothing brings it back: not its old expiry, not the timer.
    let runs = vtrr_info(&mut con)["vtrr_timer_runs"];
    wait_until(
        Duration::from_secs(2),
        "the expiry has passed and the timer has run twice since",
        || server_time_ms(&mut con) > expiry && vtrr_info(&mut con)["vtrr_timer_runs"] >= runs + 2,
    );
    for id in doomed {
        assert_eq!(state(&mut con, "q", id), "absent", "{id} came back");
    }
    assert_eq!(ids(&lease_count(&mut con, "q", 60_000, 10)), ["zkeep"]);
    let result = command(&["VTRR.CANCEL", "q", ""]).query(&mut con);
    assert_eq!(error_of(result), "ERR id must not be empty");
    assert_eq!(vtrr_info(&mut con)["vtrr_items_cancelled"], 4);
    assert_invariants(&mut con, "q");
}

#[test]
fn cancelling_a_partitions_last_queued_items_gives_their_cost_back() {
    let server = quiet_server();
    let mut con = server.connect();
    // c1 scores 1, c2 3 (c's next time 6); g1 1, g2 2 (g's next time 3).
    enqueue_items(
        &mut con,
        "q",
        &[
            ("c", "c1", 2, b"1"),
            ("c", "c2", 3, b"2"),
            ("g", "g1", 1, b"3"),
            ("g", "g2", 1, b"4"),
            ("k", "keep", 1, b"5"),
        ],
    );
    let next_time = |con: &mut Connection, partition: &str| {
        key_hget(con, "q", "partition_virtual_time", partition)
    };
    // c2 is behind c1: c1's cost stays charged (a gap in c's turns).
    assert_eq!(cancel(&mut con, "q", &["c1"]), 1);
    assert_eq!(next_time(&mut con, "c").as_deref(), Some("6"));
    // c2 is c's last queued item: c's time goes back to c2's start, and
    // c1's gap comes back too now that c has nothing queued.
    assert_eq!(cancel(&mut con, "q", &["c2"]), 1);
    assert_eq!(next_time(&mut con, "c").as_deref(), Some("1"));
    // Both of g's in one call, named first to last: all of it back.
    assert_eq!(cancel(&mut con, "q", &["g1", "g2", "g1"]), 2);
    assert_eq!(next_time(&mut con, "g").as_deref(), Some("1"));
    // A new item of g is scored as if g1 and g2 had never been enqueued.
    enqueue_items(&mut con, "q", &[("g", "g3", 1, b"6")]);
    assert_eq!(key_zscore(&mut con, "q", "queue", "g3"), Some(1.0));
    assert_eq!(next_time(&mut con, "k").as_deref(), Some("2"));
    assert_invariants(&mut con, "q");
}

#[test]
fn a_queued_item_whose_payload_is_missing_is_dead_lettered_not_served() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    let removed: i64 = with_keys_layout(&mut con, "q", |con| {
        redis::cmd("HDEL")
            .arg("vtrr:q:task")
            .arg("a")
            .query(con)
            .unwrap()
    });
    assert_eq!(removed, 1);
    let before = server_time_ms(&mut con);
    let (id, payload, _, _) = lease(&mut con, "q", 60_000).unwrap();
    let after = server_time_ms(&mut con);
    assert_eq!((text(&id), payload.as_slice()), ("b", &b"B"[..]));
    assert_eq!(state(&mut con, "q", "a"), "dead");
    let died_at = assert_one_dead(&mut con, "q", ("a", b"", "p", 1, 0, 0, "payload missing"));
    assert!((before..=after).contains(&died_at));
    let warning = "vtrr: queue q: item a had no payload; moved to the dead-letter set (reason: payload missing)";
    wait_until(Duration::from_secs(2), "the warning is logged", || {
        server.log().contains(warning)
    });
    assert_eq!(vtrr_info(&mut con)["vtrr_items_dead_lettered"], 1);
    assert_invariants(&mut con, "q");
}

/// Ids, partitions and queue names are binary: a warning that names one
/// holding a NUL byte is logged with `\x00` (the log call takes C strings;
/// an unescaped NUL made it panic and abort the server).
#[test]
fn a_warning_naming_an_id_with_a_nul_byte_is_logged_escaped() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_items(&mut con, "q\0x", &[("p\0q", "a\0b", 1, b"A")]);
    let removed: i64 = with_keys_layout(&mut con, "q\0x", |con| {
        redis::cmd("HDEL")
            .arg("vtrr:q\0x:task")
            .arg("a\0b")
            .query(con)
            .unwrap()
    });
    assert_eq!(removed, 1);
    assert_eq!(lease(&mut con, "q\0x", 60_000), None);
    let warning = r"vtrr: queue q\x00x: item a\x00b had no payload";
    wait_until(Duration::from_secs(2), "the warning is logged", || {
        server.log().contains(warning)
    });
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert_invariants(&mut con, "q\0x");
}

#[test]
fn a_delayed_or_leased_item_whose_payload_is_missing_is_dead_lettered_when_due() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("r", "leased", 2, b"L")]);
    assert_eq!(text(&lease(&mut con, "q", 1).unwrap().0), "leased");
    defer_items(&mut con, "q", 1, &[("p", "held", 1, b"H")]);
    with_keys_layout(&mut con, "q", |con| {
        let _: () = redis::pipe()
            .cmd("HDEL")
            .arg("vtrr:q:delayed_task")
            .arg("held")
            .ignore()
            .cmd("HDEL")
            .arg("vtrr:q:inflight_task")
            .arg("leased")
            .ignore()
            .query(con)
            .unwrap();
    });
    let_expire();
    // The lease reclaims "leased" and would promote "held": both are buried.
    assert_eq!(lease(&mut con, "q", 60_000), None);
    let dead: Vec<(String, Vec<u8>, i64, String)> = dead_list(&mut con, "q", None)
        .into_iter()
        .map(|d| (d.0, d.1, d.4, d.7))
        .collect();
    assert_eq!(
        dead,
        [
            ("held".into(), vec![], 0, "payload missing".into()),
            ("leased".into(), vec![], 1, "payload missing".into())
        ]
    );
    assert_eq!(vtrr_info(&mut con)["vtrr_items_dead_lettered"], 2);
    assert_invariants(&mut con, "q");
}

// ---------------------------------------------------------------- STATS, INFO, notifications, CHECK

#[test]
fn stats_count_delayed_and_dead_items_and_the_next_due_time() {
    let server = quiet_server();
    let mut con = server.connect();
    let fresh = stats(&mut con, "q");
    let mut names: Vec<&str> = fresh.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "acked-total",
            "capped-partitions",
            "current-virtual-time",
            "dead",
            "dead-total",
            "delayed",
            "enqueued-total",
            "expired",
            "expired-total",
            "held",
            "inflight",
            "layout",
            "leased-total",
            "nacked-total",
            "next-due-ms",
            "next-expiry-ms",
            "oldest-waiting-ms",
            "partitions",
            "paused-partitions",
            "queued",
            "queued-partitions",
            "tokens"
        ]
    );
    assert_eq!(fresh["tokens"], Value::Nil, "no queue rate");
    assert_eq!(fresh["layout"], Value::SimpleString(layout().to_string()));
    assert_eq!(fresh["delayed"], Value::Int(0));
    assert_eq!(fresh["dead"], Value::Int(0));
    assert_eq!(fresh["next-due-ms"], Value::Nil);
    defer_items(&mut con, "q", 20_000, &[("p", "late", 1, b"L")]);
    defer_items(&mut con, "q", 10_000, &[("p", "soon", 1, b"S")]);
    enqueue_items(&mut con, "q", &[("p", "c", 1, b"C"), ("p", "d", 1, b"D")]);
    assert_eq!(lease_and_nack(&mut con, "q", &["DEAD"]), "c");
    let soon = key_zscore(&mut con, "q", "delayed", "soon").unwrap() as i64;
    let now = stats(&mut con, "q");
    assert_eq!(now["delayed"], Value::Int(2));
    assert_eq!(now["dead"], Value::Int(1));
    assert_eq!(now["next-due-ms"], Value::Int(soon));
    assert_eq!(now["queued"], Value::Int(1));
    assert_eq!(now["inflight"], Value::Int(0));
    assert_eq!(now["next-expiry-ms"], Value::Nil);
    assert_eq!(cancel(&mut con, "q", &["soon"]), 1);
    let late = key_zscore(&mut con, "q", "delayed", "late").unwrap() as i64;
    assert_eq!(stats(&mut con, "q")["next-due-ms"], Value::Int(late));
    assert_eq!(cancel(&mut con, "q", &["late", "c"]), 2);
    let after = stats(&mut con, "q");
    assert_eq!(after["delayed"], Value::Int(0));
    assert_eq!(after["dead"], Value::Int(0));
    assert_eq!(after["next-due-ms"], Value::Nil);
}

#[test]
fn info_counts_each_lifecycle_step() {
    let server = timed_server("20");
    let mut con = server.connect();
    defer_items(
        &mut con,
        "q",
        30,
        &[("p", "a", 1, b"A"), ("r", "b", 1, b"B")],
    );
    wait_until(Duration::from_secs(2), "the timer queues a and b", || {
        state(&mut con, "q", "a") == "queued" && state(&mut con, "q", "b") == "queued"
    });
    let info = vtrr_info(&mut con);
    assert_eq!(info["vtrr_items_deferred"], 2);
    assert_eq!(info["vtrr_items_promoted"], 2);
    assert_eq!(info["vtrr_timer_items_promoted"], 2);
    assert_eq!(
        info["vtrr_items_enqueued"], 0,
        "a promotion is not an enqueue"
    );
    defer_items(&mut con, "q", 0, &[("s", "c", 1, b"C")]);
    let info = vtrr_info(&mut con);
    assert_eq!(
        (info["vtrr_items_enqueued"], info["vtrr_items_deferred"]),
        (1, 2)
    );

    // From here only commands act on due items.
    set_reclaim_interval_ms(&mut con, 0);
    lease_and_nack(&mut con, "q", &[]);
    let y = lease_and_nack(&mut con, "q", &["DEAD"]);
    assert_eq!(revive(&mut con, "q", &[y.as_str()]), 1);
    lease_and_nack(&mut con, "q", &["DELAY", "1"]);
    let_expire();
    // This lease promotes the item nacked with DELAY 1.
    let leased = lease_count(&mut con, "q", 60_000, 10);
    assert_eq!(leased.len(), 3);
    let info = vtrr_info(&mut con);
    assert_eq!(info["vtrr_items_nacked"], 3);
    assert_eq!(info["vtrr_items_dead_lettered"], 1);
    assert_eq!(info["vtrr_items_revived"], 1);
    assert_eq!(info["vtrr_items_promoted"], 3);
    assert_eq!(info["vtrr_timer_items_promoted"], 2);
    assert_eq!(info["vtrr_items_leased"], 6);
    assert_eq!(info["vtrr_items_cancelled"], 0);
    assert_eq!(cancel(&mut con, "q", &["a", "b", "c", "nosuch"]), 3);
    let info = vtrr_info(&mut con);
    assert_eq!(info["vtrr_items_cancelled"], 3);
    assert_eq!(info["vtrr_items_acked"], 0);
}

#[test]
fn lifecycle_changes_fire_module_keyspace_notifications() {
    let server = notifying_server("20");
    let mut con = server.connect();
    let mut sub_con = server.connect();
    let mut pubsub = keyspace_events(&mut sub_con, "vtrr:q:queue");
    set_policy(&mut con, "q", &["MAX-NACKS", "5"]);
    defer_items(&mut con, "q", 30, &[("p", "a", 1, b"A")]);
    wait_until(Duration::from_secs(2), "the timer queues a", || {
        state(&mut con, "q", "a") == "queued"
    });
    let (_, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(nack(&mut con, "q", b"a", "stale", &[]), 0); // no event
    assert_eq!(nack(&mut con, "q", b"a", &token, &[]), 1);
    assert_eq!(lease_and_nack(&mut con, "q", &["DEAD"]), "a");
    assert_eq!(revive(&mut con, "q", &["a"]), 1);
    assert_eq!(revive(&mut con, "q", &["a"]), 0); // no event
    assert_eq!(cancel(&mut con, "q", &["a"]), 1);
    assert_eq!(cancel(&mut con, "q", &["a"]), 0); // no event
    let _: HashMap<String, Option<i64>> = policy(&mut con, "q"); // no event
    dead_list(&mut con, "q", None); // no event
    enqueue_items(&mut con, "q", &[("p", "last", 1, b"L")]);
    assert_eq!(
        next_events(&mut pubsub, 11),
        [
            "vtrr.policy",
            "vtrr.defer",
            "vtrr.promote",
            "vtrr.lease",
            "vtrr.nack",
            "vtrr.lease",
            "vtrr.dead",
            "vtrr.nack",
            "vtrr.revive",
            "vtrr.cancel",
            "vtrr.enqueue"
        ]
    );
}

#[test]
fn check_is_clean_through_every_state_and_reports_planted_faults() {
    let server = quiet_server();
    let mut con = server.connect();
    let ids_a_to_g: Vec<(&str, &str, u64, &[u8])> = ["a", "b", "c", "d", "e", "f", "g"]
        .iter()
        .map(|id| ("p", *id, 1, id.as_bytes()))
        .collect();
    enqueue_items(&mut con, "q", &ids_a_to_g);
    set_policy(&mut con, "q", &["MAX-TIMEOUTS", "0"]);
    assert_invariants(&mut con, "q");
    // Expires once: dead (max-timeouts).
    let (timed_out, _, _, _) = lease(&mut con, "q", 1).unwrap();
    let_expire();
    assert_eq!(reclaim(&mut con, "q"), 1);
    assert_invariants(&mut con, "q");
    let nacked = |con: &mut Connection, options: &[&str]| -> String {
        let id = lease_and_nack(con, "q", options);
        assert_invariants(con, "q");
        id
    };
    let poison = nacked(&mut con, &["DEAD"]);
    let held = nacked(&mut con, &["DELAY", "60000"]);
    nacked(&mut con, &[]);
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(ack(&mut con, "q", &id, &token), 1);
    assert_invariants(&mut con, "q");
    let (kept, _, _, _) = lease(&mut con, "q", 60_000).unwrap();
    defer_items(&mut con, "q", 60_000, &[("r", "later", 1, b"L")]);
    defer_items(&mut con, "q", 1, &[("r", "soon", 1, b"S")]);
    assert_invariants(&mut con, "q");
    let_expire();
    // The next queued item loses its payload: the next lease buries it
    // (and promotes soon).
    let first: Vec<String> = key_zrange(&mut con, "q", "queue")
        .into_iter()
        .take(1)
        .map(|(member, _)| String::from_utf8(member).unwrap())
        .collect();
    let removed: i64 = with_keys_layout(&mut con, "q", |con| {
        redis::cmd("HDEL")
            .arg("vtrr:q:task")
            .arg(&first[0])
            .query(con)
            .unwrap()
    });
    assert_eq!(removed, 1);
    let (served, _, _, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_ne!(text(&served), first[0]);
    assert_invariants(&mut con, "q");
    assert_eq!(revive(&mut con, "q", &[poison.as_str()]), 1);
    assert_invariants(&mut con, "q");
    assert_eq!(cancel(&mut con, "q", &["later", text(&kept)]), 2);
    assert_invariants(&mut con, "q");
    let reasons: Vec<String> = dead_list(&mut con, "q", None)
        .into_iter()
        .map(|d| d.7)
        .collect();
    assert_eq!(reasons, ["max-timeouts", "payload missing"]);
    assert_eq!(state(&mut con, "q", text(&timed_out)), "dead");
    let s = stats(&mut con, "q");
    for (field, expected) in [("delayed", 1), ("dead", 2), ("inflight", 1)] {
        assert_eq!(s[field], Value::Int(expected), "{field}");
    }
    assert!(matches!(s["queued"], Value::Int(n) if n > 0));

    // Planted: an id both delayed and queued, and strays in the new hashes.
    with_keys_layout(&mut con, "q", |con| {
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg("vtrr:q:queue")
            .arg(5)
            .arg(&held)
            .ignore()
            .cmd("HSET")
            .arg("vtrr:q:task")
            .arg(&held)
            .arg("X")
            .ignore()
            .cmd("HSET")
            .arg("vtrr:q:dead_task")
            .arg("ghost")
            .arg("X")
            .ignore()
            .cmd("HSET")
            .arg("vtrr:q:nacks")
            .arg("ghost2")
            .arg(1)
            .ignore()
            .cmd("HSET")
            .arg("vtrr:q:last_error")
            .arg("ghost3")
            .arg("boom")
            .ignore()
            .query(con)
            .unwrap();
    });
    let problems = vtrr_check(&mut con, "q");
    let mut expected = vec![
        format!("{held} is both queued and delayed"),
        "dead_task holds ghost which is not dead".to_string(),
        "nacks holds ghost2 which is neither queued, in flight, delayed nor dead".to_string(),
        "last_error holds ghost3 which is neither queued, in flight, delayed nor dead".to_string(),
        // The planted queue entry was never counted.
        "partition p counts (queued, held, leased, delayed, dead) [2, 0, 0, 1, 2] but the keys hold [3, 0, 0, 1, 2]".to_string(),
    ];
    expected.sort();
    assert_eq!(problems, expected);
}

// ---------------------------------------------------------------- Lua

#[test]
fn the_lua_scripts_still_drive_a_queue_holding_delayed_and_dead_items() {
    if keys_layout_only("vtrr-queue's Lua scripts read and write the keys layout's keys") {
        return;
    }
    let server = quiet_server();
    let mut con = server.connect();
    let scripts = LuaScripts::load(&mut con);
    // Module: one delayed item, one dead item (with a nack count).
    defer_items(&mut con, "q", 60_000, &[("p", "later", 1, b"L")]);
    enqueue_items(&mut con, "q", &[("p", "poison", 1, b"P")]);
    assert_eq!(lease_and_nack(&mut con, "q", &["DEAD"]), "poison");
    let snapshot = |con: &mut Connection| {
        let dumps = dump_keys(con, keys_of("q", &DELAYED_AND_DEAD));
        let metas = [
            hget(con, "q", "meta", "later"),
            hget(con, "q", "meta", "poison"),
        ];
        (dumps, metas)
    };
    let before = snapshot(&mut con);

    type LuaLease = (String, String, String, i64);
    let added: i64 = scripts
        .cmd("enqueue", "q")
        .arg(&["a", "x", "1", "X", "b", "y", "2", "Y"])
        .query(&mut con)
        .unwrap();
    assert_eq!(added, 2);
    let leased: Vec<LuaLease> = scripts
        .cmd("lease", "q")
        .arg(&["1", "1", "1000", "lua-1"])
        .query(&mut con)
        .unwrap();
    assert_eq!(leased, [("x".into(), "X".into(), "lua-1".into(), 0)]);
    let_expire();
    let reclaimed: i64 = scripts.cmd("reclaim", "q").query(&mut con).unwrap();
    assert_eq!(reclaimed, 1);
    recount_and_assert_invariants(&mut con, "q");
    let leased: Vec<LuaLease> = scripts
        .cmd("lease", "q")
        .arg(&["600000", "2", "1000", "lua-2", "lua-3"])
        .query(&mut con)
        .unwrap();
    let got: Vec<(&str, i64)> = leased.iter().map(|l| (l.0.as_str(), l.3)).collect();
    assert_eq!(got, [("y", 0), ("x", 1)]);
    recount_and_assert_invariants(&mut con, "q");
    for (id, token) in [("y", "lua-2"), ("x", "lua-3")] {
        let acked: i64 = scripts
            .cmd("ack", "q")
            .arg(&[id, token])
            .query(&mut con)
            .unwrap();
        assert_eq!(acked, 1, "{id}");
    }
    assert_eq!(
        snapshot(&mut con),
        before,
        "the scripts touched delayed or dead items"
    );
    assert_eq!(state(&mut con, "q", "later"), "delayed");
    assert_eq!(state(&mut con, "q", "poison"), "dead");
    recount_and_assert_invariants(&mut con, "q");

    // A revived item is the scripts' to lease and ack.
    assert_eq!(revive(&mut con, "q", &["poison"]), 1);
    let leased: Vec<LuaLease> = scripts
        .cmd("lease", "q")
        .arg(&["600000", "1", "1000", "lua-4"])
        .query(&mut con)
        .unwrap();
    assert_eq!(leased, [("poison".into(), "P".into(), "lua-4".into(), 0)]);
    let acked: i64 = scripts
        .cmd("ack", "q")
        .arg(&["poison", "lua-4"])
        .query(&mut con)
        .unwrap();
    assert_eq!(acked, 1);
    assert_eq!(state(&mut con, "q", "later"), "delayed");
    recount_and_assert_invariants(&mut con, "q");
}

/// `VTRR.NACK <name> <id> <token> <state>`, with WITHSTATE: where the item
/// went. A caller learns the truth: the policy may have dead-lettered an
/// item it asked to requeue or delay.
fn nack_state(
    con: &mut redis::Connection,
    queue: &str,
    id: &[u8],
    token: &str,
    options: &[&str],
) -> Option<String> {
    redis::cmd("VTRR.NACK")
        .arg(queue)
        .arg(id)
        .arg(token)
        .arg(options)
        .arg("WITHSTATE")
        .query(con)
        .unwrap()
}

#[test]
fn nack_withstate_tells_where_the_item_went() {
    let server = quiet_server();
    let mut con = server.connect();
    set_policy(&mut con, "q", &["MAX-NACKS", "1"]);
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    let (a, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(
        nack_state(&mut con, "q", &a, &token, &[]).as_deref(),
        Some("queued")
    );
    assert_eq!(
        nack_state(&mut con, "q", &a, &token, &[]),
        None,
        "a stale token: nil"
    );
    let (b, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(b, b"b");
    assert_eq!(
        nack_state(&mut con, "q", &b, &token, &["DELAY", "60000"]).as_deref(),
        Some("delayed")
    );
    // a's second nack passes MAX-NACKS 1: asked to requeue, it is dead.
    let (a2, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(a2, a);
    assert_eq!(
        nack_state(&mut con, "q", &a, &token, &[]).as_deref(),
        Some("dead")
    );
    assert_eq!(stat(&mut con, "q", "dead"), 1);
    // Without WITHSTATE the reply is still 1 or 0.
    let mut con2 = server.connect();
    enqueue_one(&mut con2, "q", "p", "c", "C");
    let (c, _, token, _) = lease(&mut con2, "q", 60_000).unwrap();
    assert_eq!(nack(&mut con2, "q", &c, &token, &["DEAD"]), 1);
    assert_eq!(nack(&mut con2, "q", &c, &token, &["DEAD"]), 0);
}

/// NACK ... RELEASE gives an item back unrun (a worker shutting down):
/// requeued at once, and no nack is counted, so MAX-NACKS never buries an
/// item for being given back at deploys.
#[test]
fn nack_release_requeues_without_counting_a_nack() {
    let server = quiet_server();
    let mut con = server.connect();
    set_policy(&mut con, "q", &["MAX-NACKS", "0"]);
    enqueue_one(&mut con, "q", "p", "a", "A");
    for _ in 0..3 {
        let (a, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
        assert_eq!(
            nack_state(&mut con, "q", &a, &token, &["RELEASE"]).as_deref(),
            Some("queued")
        );
    }
    let (_, _, _, _, nacks) = lease_with_counters(&mut con, "q", 60_000).unwrap();
    assert_eq!(nacks, 0, "three releases counted no nack");
    assert_eq!(stat(&mut con, "q", "dead"), 0);
    let info = vtrr_info(&mut con);
    assert_eq!(
        (info["vtrr_items_released"], info["vtrr_items_nacked"]),
        (3, 0)
    );
    let mut refusals = Refusals::default();
    refusals.case(
        &["VTRR.NACK", "q", "a", "t", "RELEASE", "DELAY", "5"],
        "ERR DELAY and RELEASE cannot be combined",
    );
    refusals.case(
        &["VTRR.NACK", "q", "a", "t", "DEAD", "RELEASE"],
        "ERR DEAD and RELEASE cannot be combined",
    );
    refusals.assert_refused(&mut con, "q");
}

/// The last error (`last_error`) of queue `queue`'s item `id`, in either
/// layout.
fn last_error(con: &mut Connection, queue: &str, id: &str) -> Option<Vec<u8>> {
    hget(con, queue, "last_error", id)
}

/// NACK ... REASON: what failed, any bytes up to 4096, kept with the item
/// while it waits for its retry, shown by VTRR.DEAD once it dies, replaced
/// by the next reason, kept by a nack that gives none; gone once the item
/// is acked, cancelled or revived.
#[test]
fn nack_reason_is_the_items_last_error_until_it_leaves() {
    let server = quiet_server();
    let mut con = server.connect();
    set_policy(&mut con, "q", &["MAX-NACKS", "2"]);
    enqueue_items(&mut con, "q", &[("p", "a", 2, b"A")]);
    let first: Vec<u8> = [&b"ValueError: \x00\xff\r\n"[..], &[b'x'; 4080]].concat();
    assert_eq!(first.len(), 4096);
    let (_, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    let nacked: i64 = redis::cmd("VTRR.NACK")
        .arg("q")
        .arg("a")
        .arg(&token)
        .arg("REASON")
        .arg(&first)
        .query(&mut con)
        .unwrap();
    assert_eq!(nacked, 1);
    assert_eq!(state(&mut con, "q", "a"), "queued");
    assert_eq!(last_error(&mut con, "q", "a"), Some(first.clone()));
    // A nack without a reason keeps the last one given.
    let (_, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(nack(&mut con, "q", b"a", &token, &["DELAY", "0"]), 1);
    assert_eq!(last_error(&mut con, "q", "a"), Some(first));
    // The third nack passes MAX-NACKS 2: dead, and DEAD shows the reason
    // beside why it died.
    let (_, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    let options = ["DELAY", "10", "REASON", "KeyError: 'b'", "WITHSTATE"];
    let went: String = command(&[&["VTRR.NACK", "q", "a", &token][..], &options].concat())
        .query(&mut con)
        .unwrap();
    assert_eq!(went, "dead");
    let dead = dead_list(&mut con, "q", None);
    assert_eq!(dead.len(), 1);
    let (id, _, partition, _, _, nacks, _, reason, error) = dead[0].clone();
    assert_eq!(
        (id.as_str(), partition.as_deref(), nacks, reason.as_str()),
        ("a", Some("p"), 3, "max-nacks")
    );
    assert_eq!(error.as_deref(), Some(&b"KeyError: 'b'"[..]));
    assert_invariants(&mut con, "q");
    // Revived, it starts afresh.
    assert_eq!(revive(&mut con, "q", &["a"]), 1);
    assert_eq!(last_error(&mut con, "q", "a"), None);

    // Acked or cancelled (leased) after a nack that said what failed:
    // nothing of it is left.
    for (queue, ends) in [("acked", "VTRR.ACK"), ("cancelled", "VTRR.CANCEL")] {
        enqueue_items(&mut con, queue, &[("p", "b", 1, b"B")]);
        let (_, _, token, _) = lease(&mut con, queue, 60_000).unwrap();
        assert_eq!(nack(&mut con, queue, b"b", &token, &["REASON", "boom"]), 1);
        let (_, _, token, _) = lease(&mut con, queue, 60_000).unwrap();
        assert_eq!(
            last_error(&mut con, queue, "b").as_deref(),
            Some(&b"boom"[..])
        );
        let ended: i64 = match ends {
            "VTRR.ACK" => ack(&mut con, queue, b"b", &token),
            _ => command(&[ends, queue, "b"]).query(&mut con).unwrap(),
        };
        assert_eq!(ended, 1, "{ends}");
        assert!(!key_exists(&mut con, queue, "last_error"), "after {ends}");
        assert_invariants(&mut con, queue);
    }
}

/// A bad REASON is refused before anything is written: empty, longer than
/// 4096 bytes, missing, or given with RELEASE (a release is no failure).
#[test]
fn a_bad_nack_reason_is_refused_with_nothing_changed() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    let (_, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    let long = "x".repeat(4097);
    let mut refusals = Refusals::default();
    let size = "ERR REASON must be between 1 and 4096 bytes";
    refusals.case(&["VTRR.NACK", "q", "a", &token, "REASON", ""], size);
    refusals.case(&["VTRR.NACK", "q", "a", &token, "REASON", &long], size);
    refusals.case(
        &["VTRR.NACK", "q", "a", &token, "DEAD", "REASON"],
        "ERR syntax error",
    );
    refusals.case(
        &["VTRR.NACK", "q", "a", &token, "REASON", "boom", "RELEASE"],
        "ERR REASON and RELEASE cannot be combined",
    );
    refusals.case(
        &["VTRR.NACK", "q", "a", &token, "RELEASE", "REASON", "boom"],
        "ERR REASON and RELEASE cannot be combined",
    );
    refusals.assert_refused(&mut con, "q");
    assert_eq!(state(&mut con, "q", "a"), "inflight");
    assert_eq!(nack(&mut con, "q", b"a", &token, &["reason", "ok"]), 1);
    assert_eq!(last_error(&mut con, "q", "a").as_deref(), Some(&b"ok"[..]));
}
