//! Priorities (`VTRR.ENQUEUE ... PRIORITY`, `VTRR.DEFER ... PRIORITY`) on
//! a real server: strict between levels, fair inside one, kept across a
//! save and a load and through a pause; what the scripts do beside them.

mod common;

use common::*;

fn enqueue_at(con: &mut redis::Connection, queue: &str, level: i64, items: &[Item]) -> i64 {
    let mut cmd = redis::cmd("VTRR.ENQUEUE");
    cmd.arg(queue).arg("PRIORITY").arg(level);
    for (partition, id, weight, payload) in items {
        cmd.arg(*partition).arg(*id).arg(*weight).arg(*payload);
    }
    cmd.query(con).unwrap()
}

fn debug_server() -> Server {
    Server::builder()
        .args(&["--enable-debug-command", "yes"])
        .spawn()
}

fn reload(con: &mut redis::Connection) {
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(con).unwrap();
}

#[test]
fn a_high_priority_item_overtakes_a_ten_thousand_item_backlog_across_a_reload() {
    let server = debug_server();
    let mut con = server.connect();
    let backlog: Vec<String> = (0..10_000).map(|n| format!("b{n:05}")).collect();
    for chunk in backlog.chunks(1000) {
        let items: Vec<Item> = chunk
            .iter()
            .map(|id| ("big", id.as_str(), 1, &b"B"[..]))
            .collect();
        enqueue_items(&mut con, "q", &items);
    }
    assert_eq!(
        enqueue_at(&mut con, "q", 10, &[("small", "urgent", 1, b"U")]),
        1
    );
    assert_eq!(
        enqueue_at(&mut con, "q", -10, &[("small", "whenever", 1, b"W")]),
        1
    );
    reload(&mut con);
    let first = lease_count(&mut con, "q", 60_000, 2);
    assert_eq!(ids(&first), ["urgent", "b00000"]);
    assert_eq!(first[0].1, b"U");
    assert_invariants(&mut con, "q");
    let rest = lease_count(&mut con, "q", 60_000, 20_000);
    assert_eq!(rest.len(), 10_000);
    assert_eq!(ids(&rest).last().map(String::as_str), Some("whenever"));
}

#[test]
fn partitions_take_turns_inside_a_level_and_keep_their_order() {
    let server = debug_server();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("a", "a-low", 1, b"")]);
    enqueue_at(
        &mut con,
        "q",
        3,
        &[
            ("a", "a1", 1, b""),
            ("a", "a2", 1, b""),
            ("a", "a3", 1, b""),
        ],
    );
    enqueue_at(
        &mut con,
        "q",
        3,
        &[("b", "b1", 2, b""), ("b", "b2", 1, b"")],
    );
    reload(&mut con);
    let leased = lease_count(&mut con, "q", 60_000, 10);
    // b1 weighs 2: a takes two turns for it.
    assert_eq!(ids(&leased), ["a1", "b1", "a2", "a3", "b2", "a-low"]);
    assert_invariants(&mut con, "q");
}

#[test]
fn a_paused_tenants_prioritised_backlog_rejoins_its_level_and_a_deferred_item_keeps_its_level() {
    let server = debug_server();
    let mut con = server.connect();
    let paused: i64 = command(&["VTRR.PAUSE", "q", "a"]).query(&mut con).unwrap();
    assert_eq!(paused, 1);
    enqueue_at(
        &mut con,
        "q",
        5,
        &[("a", "a1", 1, b""), ("a", "a2", 1, b"")],
    );
    enqueue_at(
        &mut con,
        "q",
        5,
        &[
            ("b", "b1", 1, b""),
            ("b", "b2", 1, b""),
            ("b", "b3", 1, b""),
        ],
    );
    enqueue_items(&mut con, "q", &[("c", "c1", 1, b""), ("c", "c2", 1, b"")]);
    // Due in 3 s: well after the leases below, even on a loaded machine.
    let deferred_at = std::time::Instant::now();
    let deferred: i64 = command(&[
        "VTRR.DEFER",
        "q",
        "3000",
        "PRIORITY",
        "5",
        "d",
        "d1",
        "1",
        "D",
    ])
    .query(&mut con)
    .unwrap();
    assert_eq!(deferred, 1);
    assert_eq!(ids(&lease_count(&mut con, "q", 60_000, 2)), ["b1", "b2"]);
    reload(&mut con);
    assert_invariants(&mut con, "q");
    let resumed: i64 = command(&["VTRR.RESUME", "q", "a"]).query(&mut con).unwrap();
    assert_eq!(resumed, 1);
    assert_eq!(
        ids(&lease_count(&mut con, "q", 60_000, 3)),
        ["a1", "b3", "a2"]
    );
    assert!(deferred_at.elapsed().as_millis() < 3000, "too slow to tell");
    std::thread::sleep(
        std::time::Duration::from_millis(3100).saturating_sub(deferred_at.elapsed()),
    );
    // Due now, d1 enters at level 5, ahead of c's level-0 items.
    assert_eq!(
        ids(&lease_count(&mut con, "q", 60_000, 3)),
        ["d1", "c1", "c2"]
    );
    assert_invariants(&mut con, "q");
}

/// The scripts pop the lowest score, so their LEASE serves the levels in
/// order too, but records a band's score as level 0's current virtual
/// time: CHECK says so, and level 0 goes on within its band.
#[test]
fn a_scripts_lease_of_a_prioritised_item_is_reported_and_harms_no_item() {
    if keys_layout_only("the Lua scripts drive keys-layout queues only") {
        return;
    }
    let server = debug_server();
    let mut con = server.connect();
    let scripts = LuaScripts::load(&mut con);
    enqueue_items(&mut con, "q", &[("a", "a1", 1, b"")]);
    enqueue_at(&mut con, "q", -2, &[("a", "later", 1, b"")]);
    enqueue_at(&mut con, "q", 2, &[("a", "first", 1, b"")]);
    let leased: Vec<(Vec<u8>, Vec<u8>, String, i64)> = scripts
        .cmd("lease", "q")
        .arg(60_000)
        .arg(1)
        .arg(0)
        .arg("script-token")
        .query(&mut con)
        .unwrap();
    assert_eq!(leased[0].0, b"first");
    let problems = vtrr_check(&mut con, "q");
    assert!(
        problems.iter().any(|p| p.contains("current_virtual_time")),
        "{problems:?}"
    );
    // A newcomer at level 0 starts at the start of level 0's band (the
    // negative time read is below it), so before a1: no item is lost, and
    // the levels keep their order.
    enqueue_items(&mut con, "q", &[("b", "b1", 1, b"")]);
    assert_eq!(
        ids(&lease_count(&mut con, "q", 60_000, 3)),
        ["b1", "a1", "later"]
    );
}
