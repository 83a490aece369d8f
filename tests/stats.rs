//! `VTRR.STATS`: every field, on an empty and on a busy queue.

mod common;

use std::collections::BTreeMap;

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

/// `VTRR.JOB <queue> <ids...>`: one map per id, in order.
fn job(con: &mut redis::Connection, queue: &str, ids: &[&str]) -> Vec<BTreeMap<String, Value>> {
    redis::cmd("VTRR.JOB")
        .arg(queue)
        .arg(ids)
        .query(con)
        .unwrap()
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        Value::Okay => "OK".into(),
        other => panic!("not text: {other:?}"),
    }
}

/// Every state an item can be in, and what the queue keeps of each; the
/// same shape (every field) for each id, unknown ones included.
#[test]
fn job_reports_each_items_state() {
    let server = quiet_server();
    let mut con = server.connect();
    // Dead: leased and nacked to the dead letters, with a reason.
    enqueue_items(&mut con, "q", &[("x", "z1", 1, b"Z")]);
    let (_, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    let _: Value = redis::cmd("VTRR.NACK")
        .arg("q")
        .arg("z1")
        .arg(&token)
        .arg("DEAD")
        .arg("REASON")
        .arg("boom")
        .query(&mut con)
        .unwrap();
    // Leased, then held behind its partition's cap, delayed, queued.
    enqueue_items(&mut con, "q", &[("p", "l1", 2, b"L")]);
    let before_lease = server_time_ms(&mut con);
    let (leased, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(leased, b"l1");
    let _: () = redis::cmd("VTRR.LIMIT")
        .arg("q")
        .arg("p")
        .arg("CONCURRENCY")
        .arg(1)
        .query(&mut con)
        .unwrap();
    enqueue_items(&mut con, "q", &[("p", "h1", 1, b"H")]);
    defer_items(&mut con, "q", 60_000, &[("d", "d1", 1, b"D")]);
    let _: i64 = redis::cmd("VTRR.ENQUEUE")
        .arg("q")
        .arg("PRIORITY")
        .arg(3)
        .arg("r")
        .arg("q1")
        .arg(1)
        .arg("Q")
        .query(&mut con)
        .unwrap();

    let ids = ["q1", "h1", "l1", "d1", "z1", "never", "q1"];
    let replies = job(&mut con, "q", &ids);
    assert_eq!(replies.len(), ids.len());
    let fields: Vec<&str> = replies[0].keys().map(String::as_str).collect();
    for reply in &replies {
        assert_eq!(reply.keys().map(String::as_str).collect::<Vec<_>>(), fields);
    }
    let states: Vec<String> = replies.iter().map(|r| text(&r["state"])).collect();
    assert_eq!(
        states,
        ["queued", "held", "leased", "delayed", "dead", "unknown", "queued"]
    );
    for (reply, id) in replies.iter().zip(ids) {
        assert_eq!(text(&reply["id"]), id);
    }
    let (queued, held, leased, delayed, dead, unknown) = (
        &replies[0],
        &replies[1],
        &replies[2],
        &replies[3],
        &replies[4],
        &replies[5],
    );
    assert_eq!(
        (
            text(&queued["partition"]),
            &queued["weight"],
            &queued["priority"]
        ),
        ("r".to_string(), &Value::Int(1), &Value::Int(3))
    );
    assert_eq!(text(&held["partition"]), "p");
    assert_eq!(leased["weight"], Value::Int(2));
    match leased["expires-ms"] {
        Value::Int(at) => assert!(
            (before_lease + 60_000..before_lease + 70_000).contains(&at),
            "expires at {at}, leased at {before_lease}"
        ),
        ref other => panic!("expires-ms {other:?}"),
    }
    assert_eq!(leased["due-ms"], Value::Nil);
    match delayed["due-ms"] {
        Value::Int(at) => assert!(at >= before_lease + 60_000, "due at {at}"),
        ref other => panic!("due-ms {other:?}"),
    }
    assert_eq!(text(&dead["last-error"]), "boom");
    assert_eq!(dead["nacks"], Value::Int(1));
    assert!(matches!(dead["dead-ms"], Value::Int(at) if at >= before_lease - 60_000));
    assert!(!text(&dead["reason"]).is_empty());
    for field in [
        "partition",
        "weight",
        "priority",
        "expires-ms",
        "last-error",
    ] {
        assert_eq!(unknown[field], Value::Nil, "{field}");
    }

    // Acked, it is no longer the queue's to know.
    assert_eq!(ack(&mut con, "q", b"l1", &token), 1);
    assert_eq!(text(&job(&mut con, "q", &["l1"])[0]["state"]), "unknown");
    assert_invariants(&mut con, "q");
}

#[test]
fn job_refuses_a_missing_or_empty_id() {
    let server = Server::start();
    let mut con = server.connect();
    let missing = error_of(redis::cmd("VTRR.JOB").arg("q").query(&mut con));
    assert!(missing.contains("wrong number of arguments"), "{missing}");
    let empty = error_of(
        redis::cmd("VTRR.JOB")
            .arg("q")
            .arg("a")
            .arg("")
            .query(&mut con),
    );
    assert!(empty.starts_with("ERR") && empty.contains("id"), "{empty}");
}
