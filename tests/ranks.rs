//! The operator's view kept by the server: `VTRR.PARTITIONS ... TOP`
//! (rankings by queued, oldest wait, leased, dead), each partition's
//! `waiting-ms` and totals, and the queue's totals in `VTRR.STATS`, on
//! either layout (`VTRR_LAYOUT`).

mod common;

use std::time::Duration;

use common::*;
use redis::Connection;

/// `VTRR.PARTITIONS <queue> TOP ...`: (ranked, [(partition, view)]).
fn top(con: &mut Connection, queue: &str, options: &[&str]) -> (i64, Vec<(String, View)>) {
    let (ranked, views): (i64, Vec<View>) = redis::cmd("VTRR.PARTITIONS")
        .arg(queue)
        .arg("TOP")
        .arg(options)
        .query(con)
        .unwrap();
    let named = views
        .into_iter()
        .map(|view| {
            let name = match &view["partition"] {
                Value::BulkString(name) => String::from_utf8(name.clone()).unwrap(),
                other => panic!("partition is {other:?}"),
            };
            (name, view)
        })
        .collect();
    (ranked, named)
}

fn names(ranked: &[(String, View)]) -> Vec<&str> {
    ranked.iter().map(|(name, _)| name.as_str()).collect()
}

fn int(view: &View, name: &str) -> Option<i64> {
    match &view[name] {
        Value::Int(n) => Some(*n),
        Value::Nil => None,
        other => panic!("{name} is {other:?}"),
    }
}

fn backlog(con: &mut Connection, queue: &str, partition: &str, count: usize) {
    let ids: Vec<String> = (0..count).map(|i| format!("{partition}-{i}")).collect();
    let items: Vec<Item> = ids
        .iter()
        .map(|id| (partition, id.as_str(), 1, &b"x"[..]))
        .collect();
    assert_eq!(enqueue_items(con, queue, &items), count as i64);
}

#[test]
fn top_ranks_partitions_worst_first_and_pages_through_them() {
    let server = Server::start();
    let mut con = server.connect();
    backlog(&mut con, "q", "small", 1);
    backlog(&mut con, "q", "big", 5);
    backlog(&mut con, "q", "mid", 3);

    let (ranked, page) = top(&mut con, "q", &["2"]);
    assert_eq!(ranked, 3);
    assert_eq!(names(&page), ["big", "mid"], "BY queued is the default");
    assert_eq!(int(&page[0].1, "queued"), Some(5));
    let (_, rest) = top(&mut con, "q", &["2", "BY", "queued", "OFFSET", "2"]);
    assert_eq!(names(&rest), ["small"]);
    let (_, past) = top(&mut con, "q", &["2", "OFFSET", "3"]);
    assert!(past.is_empty());

    // Three leases, one from each partition (round robin). Only a
    // partition at its cap ranks by leased: mid, capped at 1.
    let _: () = command(&["VTRR.LIMIT", "q", "mid", "CONCURRENCY", "1"])
        .query(&mut con)
        .unwrap();
    let leases = lease_count(&mut con, "q", 60_000, 3);
    assert_eq!(leases.len(), 3);
    let (ranked, by_leased) = top(&mut con, "q", &["10", "BY", "leased"]);
    assert_eq!((ranked, names(&by_leased)), (1, vec!["mid"]));
    assert_eq!(int(&by_leased[0].1, "leased"), Some(1));
    assert_eq!(int(&by_leased[0].1, "concurrency-in-force"), Some(1));
    // Lifting the cap takes it out.
    let _: () = command(&["VTRR.LIMIT", "q", "mid", "CONCURRENCY", "NONE"])
        .query(&mut con)
        .unwrap();
    assert_eq!(top(&mut con, "q", &["10", "BY", "leased"]).0, 0);
    let (ranked, by_queued) = top(&mut con, "q", &["10", "BY", "QUEUED"]);
    assert_eq!(ranked, 2, "small has nothing queued: not ranked");
    assert_eq!(names(&by_queued), ["big", "mid"]);

    // Dead-lettering ranks by dead.
    let small = leases.iter().find(|l| l.0 == b"small-0").unwrap();
    assert_eq!(nack(&mut con, "q", &small.0, &small.2, &["DEAD"]), 1);
    let (ranked, by_dead) = top(&mut con, "q", &["10", "BY", "dead"]);
    assert_eq!((ranked, names(&by_dead)), (1, vec!["small"]));
    assert!(vtrr_check(&mut con, "q").is_empty());
}

/// A wait keeps its place in the ranking until it restarts ten seconds or
/// more after the wait the place was written for.
const WAIT_GRAIN: Duration = Duration::from_millis(10_000);

#[test]
fn the_oldest_line_comes_first_and_a_lease_restarts_its_wait() {
    let server = Server::start();
    let mut con = server.connect();
    // Named against their order, so a ranking by name would fail.
    backlog(&mut con, "q", "z-early", 3);
    std::thread::sleep(WAIT_GRAIN + Duration::from_millis(50));
    // a-late paused: it waits, and the leases below serve z-early.
    let paused: i64 = command(&["VTRR.PAUSE", "q", "a-late"])
        .query(&mut con)
        .unwrap();
    assert_eq!(paused, 1);
    backlog(&mut con, "q", "a-late", 2);
    let (_, oldest) = top(&mut con, "q", &["10", "BY", "oldest"]);
    assert_eq!(names(&oldest), ["z-early", "a-late"]);
    let early_wait = int(&oldest[0].1, "waiting-ms").unwrap();
    let late_wait = int(&oldest[1].1, "waiting-ms").unwrap();
    assert!(early_wait > late_wait, "{early_wait} vs {late_wait}");
    assert!(stat(&mut con, "q", "oldest-waiting-ms") >= early_wait);

    // Serving z-early a grain after its place was written restarts its
    // wait and moves its place behind a-late's.
    let first = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(first.0, b"z-early-0");
    let (_, oldest) = top(&mut con, "q", &["10", "BY", "oldest"]);
    assert_eq!(names(&oldest), ["a-late", "z-early"]);
    assert!(int(&oldest[1].1, "waiting-ms").unwrap() < 1_000);
    let place = key_zscore(&mut con, "q", "rank_waiting", "z-early");
    // Served again within the grain: its wait restarts, its place stays.
    std::thread::sleep(Duration::from_millis(20));
    let again = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(again.0, b"z-early-1");
    assert_eq!(key_zscore(&mut con, "q", "rank_waiting", "z-early"), place);
    assert!(vtrr_check(&mut con, "q").is_empty());

    // A line that empties leaves the ranking, and its wait is nil.
    let resumed: i64 = command(&["VTRR.RESUME", "q", "a-late"])
        .query(&mut con)
        .unwrap();
    assert_eq!(resumed, 1);
    let rest = lease_count(&mut con, "q", 60_000, 3);
    assert_eq!(rest.len(), 3);
    let (ranked, _) = top(&mut con, "q", &["10", "BY", "oldest"]);
    assert_eq!(ranked, 0);
    assert_eq!(
        int(&partition_view(&mut con, "q", "z-early"), "waiting-ms"),
        None
    );
    assert_eq!(stats(&mut con, "q")["oldest-waiting-ms"], Value::Nil);
}

#[test]
fn totals_count_what_each_partition_and_the_queue_were_served() {
    let server = Server::start();
    let mut con = server.connect();
    set_policy(&mut con, "q", &["MAX-TIMEOUTS", "NONE"]);
    backlog(&mut con, "q", "a", 4);
    backlog(&mut con, "q", "b", 1);
    assert_eq!(
        defer_items(&mut con, "q", 60_000, &[("b", "later", 1, b"x")]),
        1
    );
    let leases = lease_count(&mut con, "q", 60_000, 4);
    let of = |id: &[u8]| leases.iter().find(|l| l.0 == id).unwrap();
    assert_eq!(ack(&mut con, "q", b"a-0", &of(b"a-0").2), 1);
    assert_eq!(nack(&mut con, "q", b"a-1", &of(b"a-1").2, &[]), 1);
    assert_eq!(nack(&mut con, "q", b"b-0", &of(b"b-0").2, &["DEAD"]), 1);
    expire_lease(&mut con, "q", b"a-2", &of(b"a-2").2);
    assert_eq!(reclaim(&mut con, "q"), 1);
    // Released leases are given back, not failed: not counted as nacked.
    let again = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(nack(&mut con, "q", &again.0, &again.2, &["RELEASE"]), 1);

    let totals = |view: &View, suffix: &str| -> Vec<i64> {
        ["enqueued", "leased", "acked", "nacked", "dead", "expired"]
            .iter()
            .map(|name| int(view, &format!("{name}{suffix}")).unwrap())
            .collect()
    };
    let a = partition_view(&mut con, "q", "a");
    let b = partition_view(&mut con, "q", "b");
    assert_eq!(totals(&a, "-total"), [4, 4, 1, 1, 0, 1]);
    assert_eq!(
        totals(&b, "-total"),
        [2, 1, 0, 1, 1, 0],
        "NACK ... DEAD is a nack"
    );
    let queue: View = stats(&mut con, "q").into_iter().collect();
    assert_eq!(totals(&queue, "-total"), [6, 5, 1, 2, 1, 1]);

    // A partition whose record goes (nothing left counted or set) takes
    // its totals with it; the queue keeps them.
    assert_eq!(cancel(&mut con, "q", &["b-0", "later"]), 2);
    assert_eq!(
        totals(&partition_view(&mut con, "q", "b"), "-total"),
        [0; 6]
    );
    let queue: View = stats(&mut con, "q").into_iter().collect();
    assert_eq!(totals(&queue, "-total"), [6, 5, 1, 2, 1, 1]);
    assert!(vtrr_check(&mut con, "q").is_empty());
}

#[test]
fn recount_restores_rankings_a_queue_lacks() {
    if keys_layout_only("a native queue's rankings are no keys a client can delete") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    backlog(&mut con, "q", "a", 2);
    backlog(&mut con, "q", "b", 1);
    // As a queue written before the rankings: none of them.
    let _: () = command(&["DEL", "vtrr:q:rank_queued", "vtrr:q:rank_waiting"])
        .query(&mut con)
        .unwrap();
    let problems = vtrr_check(&mut con, "q");
    assert!(
        problems.iter().any(|p| p.contains("ranks by queued")),
        "{problems:?}"
    );
    assert_eq!(top(&mut con, "q", &["10"]).0, 0);
    recount(&mut con, "q");
    assert!(vtrr_check(&mut con, "q").is_empty());
    assert_eq!(names(&top(&mut con, "q", &["10"]).1), ["a", "b"]);
    assert_eq!(top(&mut con, "q", &["10", "BY", "oldest"]).0, 2);
}

#[test]
fn bad_top_arguments_get_clear_errors() {
    let server = Server::start();
    let mut con = server.connect();
    backlog(&mut con, "q", "a", 1);
    for (words, error) in [
        (
            &["TOP", "0"][..],
            "ERR TOP must be an integer between 1 and 10000",
        ),
        (
            &["TOP", "10001"],
            "ERR TOP must be an integer between 1 and 10000",
        ),
        (
            &["TOP", "x"],
            "ERR TOP must be an integer between 1 and 10000",
        ),
        (
            &["TOP", "5", "BY", "age"],
            "ERR BY must be one of queued, oldest, leased, dead",
        ),
        (
            &["TOP", "5", "OFFSET", "-1"],
            "ERR OFFSET must be an integer between 0 and 100000",
        ),
        (
            &["TOP", "5", "OFFSET", "100001"],
            "ERR OFFSET must be an integer between 0 and 100000",
        ),
        (
            &["TOP", "5", "CURSOR", "0"],
            "ERR TOP and CURSOR cannot be combined",
        ),
        (
            &["TOP", "5", "COUNT", "3"],
            "ERR TOP and COUNT cannot be combined",
        ),
        (
            &["TOP", "5", "PARTITION", "a"],
            "ERR TOP and PARTITION cannot be combined",
        ),
        (&["BY", "queued"], "ERR BY needs TOP"),
        (&["OFFSET", "1"], "ERR OFFSET needs TOP"),
        (&["TOP"], "ERR syntax error"),
    ] {
        let mut call = redis::cmd("VTRR.PARTITIONS");
        call.arg("q").arg(words);
        assert_eq!(error_of(call.query(&mut con)), error, "{words:?}");
    }
}
