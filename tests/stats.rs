//! `VTRR.STATS`: every field, on an empty and on a busy queue.

mod common;

use common::*;

#[test]
fn stats_reports_every_field() {
    let server = Server::start();
    let mut con = server.connect();
    let empty = stats(&mut con, "q");
    assert_eq!(empty["queued"], Value::Int(0));
    assert_eq!(empty["next-expiry-ms"], Value::Nil);
    enqueue_items(
        &mut con,
        "q",
        &[("p", "a", 1, b""), ("r", "b", 1, b""), ("r", "c", 1, b"")],
    );
    lease(&mut con, "q", 60_000).unwrap();
    let stats = stats(&mut con, "q");
    assert_eq!(stats["queued"], Value::Int(2));
    assert_eq!(stats["inflight"], Value::Int(1));
    assert_eq!(stats["expired"], Value::Int(0));
    assert_eq!(stats["partitions"], Value::Int(2));
    assert_eq!(stats["current-virtual-time"], Value::Int(1));
    assert!(matches!(stats["next-expiry-ms"], Value::Int(n) if n > 1_700_000_000_000));
}

/// The partitions VTRR.PARTITIONS lists, in one call (a small queue).
fn listed(con: &mut redis::Connection, queue: &str) -> usize {
    let (cursor, maps): (String, Vec<View>) = redis::cmd("VTRR.PARTITIONS")
        .arg(queue)
        .arg("COUNT")
        .arg("100")
        .query(con)
        .unwrap();
    assert_eq!(cursor, "0");
    maps.len()
}

#[test]
fn stats_counts_the_partitions_partitions_lists() {
    let server = Server::start();
    let mut con = server.connect();
    enqueue_items(
        &mut con,
        "q",
        &[
            ("a", "a1", 1, b""),
            ("b", "b1", 1, b""),
            ("b", "b2", 1, b""),
        ],
    );
    lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(
        (stat(&mut con, "q", "partitions"), listed(&mut con, "q")),
        (2, 2)
    );
    // Every item cancelled: nothing left to count or list (a virtual time
    // kept until the drain is not a partition).
    assert_eq!(cancel(&mut con, "q", &["a1", "b1", "b2"]), 3);
    assert_eq!(
        (stat(&mut con, "q", "partitions"), listed(&mut con, "q")),
        (0, 0)
    );
    // A setting makes a partition, with nothing queued.
    let _: () = redis::cmd("VTRR.PAUSE")
        .arg("q")
        .arg("c")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        (stat(&mut con, "q", "partitions"), listed(&mut con, "q")),
        (1, 1)
    );
}
