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
    // a's one item is leased: only b has items queued.
    assert_eq!(stat(&mut con, "q", "queued-partitions"), 1);
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
    assert_eq!(stat(&mut con, "q", "queued-partitions"), 0);
    // A paused partition's items are queued (held): it counts.
    enqueue_items(&mut con, "q", &[("c", "c1", 1, b""), ("d", "d1", 1, b"")]);
    assert_eq!(stat(&mut con, "q", "queued-partitions"), 2);
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

// ---------------------------------------------------------------------------
// Outcomes: results, RESULT [BLOCK], the dedup window (VTRR.POLICY ...
// RESULT-TTL, DEDUP-MS).
// ---------------------------------------------------------------------------

fn result(con: &mut redis::Connection, queue: &str, id: &str) -> Option<BTreeMap<String, Value>> {
    redis::cmd("VTRR.RESULT")
        .arg(queue)
        .arg(id)
        .query(con)
        .unwrap()
}

fn ack_result(con: &mut redis::Connection, id: &[u8], token: &str, value: &[u8]) -> i64 {
    redis::cmd("VTRR.ACKRESULT")
        .arg("q")
        .arg(id)
        .arg(token)
        .arg(value)
        .query(con)
        .unwrap()
}

#[test]
fn a_result_handed_back_at_ack_is_kept_and_read_by_id() {
    let server = quiet_server();
    let mut con = server.connect();
    set_policy(&mut con, "q", &["RESULT-TTL", "60000"]);
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    assert_eq!(result(&mut con, "q", "a"), None, "queued: not finished");
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    // A lost lease stores nothing.
    assert_eq!(ack_result(&mut con, &id, "stale", b"no"), 0);
    assert_eq!(result(&mut con, "q", "a"), None);
    let before = server_time_ms(&mut con);
    assert_eq!(ack_result(&mut con, &id, &token, b"\x00answer 42"), 1);
    let done = result(&mut con, "q", "a").expect("done");
    assert_eq!(text(&done["state"]), "done");
    assert_eq!(done["result"], Value::BulkString(b"\x00answer 42".to_vec()));
    let Value::Int(finished) = done["finished-ms"] else {
        panic!("{done:?}")
    };
    assert!(finished >= before, "{finished} {before}");
    assert_eq!(job(&mut con, "q", &["a"])[0], done, "JOB says the same");
    // LEASE ... ACKRESULT settles with a result and leases the next.
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    let reply: Value = redis::cmd("VTRR.LEASE")
        .arg("q")
        .arg(60_000)
        .arg("ACKRESULT")
        .arg(&id)
        .arg(&token)
        .arg("R")
        .query(&mut con)
        .unwrap();
    assert!(matches!(reply, Value::Array(_)), "{reply:?}");
    assert_eq!(
        result(&mut con, "q", "b").unwrap()["result"],
        Value::BulkString(b"R".to_vec())
    );
    // Too long a result: refused, nothing written.
    enqueue_items(&mut con, "q", &[("p", "c", 1, b"C")]);
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    let before = dump_queue(&mut con, "q");
    let long = vec![b'x'; 1024 * 1024 + 1];
    let refused: redis::RedisResult<i64> = redis::cmd("VTRR.ACKRESULT")
        .arg("q")
        .arg(&id)
        .arg(&token)
        .arg(&long)
        .query(&mut con);
    assert_eq!(
        refused.unwrap_err().detail(),
        Some("result must be at most 1048576 bytes")
    );
    assert_eq!(dump_queue(&mut con, "q"), before);
    assert_invariants(&mut con, "q");
}

#[test]
fn a_queue_that_keeps_no_results_forgets_an_acked_job_as_before() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(ack_result(&mut con, &id, &token, b"dropped"), 1);
    assert_eq!(result(&mut con, "q", "a"), None);
    assert_eq!(text(&job(&mut con, "q", &["a"])[0]["state"]), "unknown");
    assert!(!key_exists(&mut con, "q", "results"));
    assert!(!key_exists(&mut con, "q", "finished"));
}

fn spawn_result_waiter(server: &Server, id: &str, block_ms: u64) -> std::thread::JoinHandle<Value> {
    let url = server.url();
    let id = id.to_string();
    std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        redis::cmd("VTRR.RESULT")
            .arg("q")
            .arg(id)
            .arg("BLOCK")
            .arg(block_ms)
            .query(&mut con)
            .unwrap()
    })
}

#[test]
fn a_waiter_is_woken_by_the_ack_that_finishes_its_job_or_by_its_death() {
    let server = quiet_server();
    let mut con = server.connect();
    set_policy(&mut con, "q", &["RESULT-TTL", "60000"]);
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    let for_a = spawn_result_waiter(&server, "a", 10_000);
    let for_b = spawn_result_waiter(&server, "b", 10_000);
    wait_blocked(&mut con, 2);
    let (a, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(a, b"a");
    assert_eq!(ack_result(&mut con, &a, &token, b"ok"), 1);
    let woken: BTreeMap<String, Value> = redis::from_redis_value(for_a.join().unwrap()).unwrap();
    assert_eq!(woken["result"], Value::BulkString(b"ok".to_vec()));
    assert_eq!(blocked_clients(&mut con), 1, "b's waiter still waits");
    let (b, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    let _: Value = redis::cmd("VTRR.NACK")
        .arg("q")
        .arg(&b)
        .arg(&token)
        .arg("DEAD")
        .query(&mut con)
        .unwrap();
    let dead: BTreeMap<String, Value> = redis::from_redis_value(for_b.join().unwrap()).unwrap();
    assert_eq!(text(&dead["state"]), "dead");
    // Nothing finishes: nil at the timeout.
    enqueue_items(&mut con, "q", &[("p", "c", 1, b"C")]);
    let timed_out = spawn_result_waiter(&server, "c", 100).join().unwrap();
    assert_eq!(timed_out, Value::Nil);
}

#[test]
fn an_id_finished_within_dedup_ms_is_counted_as_already_there() {
    let server = quiet_server();
    let mut con = server.connect();
    set_policy(&mut con, "q", &["DEDUP-MS", "60000"]);
    let policy: BTreeMap<String, Value> =
        redis::cmd("VTRR.POLICY").arg("q").query(&mut con).unwrap();
    assert_eq!(policy["dedup-ms"], Value::Int(60_000));
    assert_eq!(policy["result-ttl-ms"], Value::Nil);
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(ack(&mut con, "q", &id, &token), 1);
    let again: i64 = redis::cmd("VTRR.ENQUEUE")
        .arg("q")
        .arg(&["p", "a", "1", "A"])
        .query(&mut con)
        .unwrap();
    assert_eq!(again, 0, "a duplicate within the window");
    let done = result(&mut con, "q", "a").expect("the state is kept");
    assert_eq!(
        (text(&done["state"]), &done["result"]),
        ("done".into(), &Value::Nil)
    );
    // Cancelled ids count too.
    enqueue_items(&mut con, "q", &[("p", "b", 1, b"B")]);
    assert_eq!(cancel(&mut con, "q", &["b"]), 1);
    assert_eq!(text(&job(&mut con, "q", &["b"])[0]["state"]), "cancelled");
    let again: i64 = redis::cmd("VTRR.ENQUEUE")
        .arg("q")
        .arg(&["p", "b", "1", "B"])
        .query(&mut con)
        .unwrap();
    assert_eq!(again, 0);
    assert_invariants(&mut con, "q");
}

#[test]
fn the_timer_forgets_an_outcome_when_its_time_is_up() {
    let server = Server::start();
    let mut con = server.connect();
    set_policy(&mut con, "q", &["RESULT-TTL", "200"]);
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(ack_result(&mut con, &id, &token, b"soon gone"), 1);
    assert!(result(&mut con, "q", "a").is_some());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while key_exists(&mut con, "q", "results") {
        assert!(
            std::time::Instant::now() < deadline,
            "the record was never forgotten"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(result(&mut con, "q", "a"), None);
    assert!(!key_exists(&mut con, "q", "finished"));
}

#[test]
fn bad_outcome_options_get_an_error_and_change_nothing() {
    let server = quiet_server();
    let mut con = server.connect();
    set_policy(&mut con, "q", &["RESULT-TTL", "1000"]);
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    let mut refusals = Refusals::default();
    for bad in ["0", "-1", "2592000001", "x", ""] {
        refusals.case(
            &["VTRR.POLICY", "q", "RESULT-TTL", bad],
            "ERR RESULT-TTL must be an integer between 1 and 2592000000, or NONE",
        );
        refusals.case(
            &["VTRR.POLICY", "q", "DEDUP-MS", bad],
            "ERR DEDUP-MS must be an integer between 1 and 2592000000, or NONE",
        );
    }
    for bad in ["-1", "31536000001", "x", ""] {
        refusals.case(
            &["VTRR.RESULT", "q", "a", "BLOCK", bad],
            "ERR BLOCK timeout-ms must be an integer between 0 and 31536000000",
        );
    }
    refusals.case(&["VTRR.RESULT", "q", "a", "WAIT", "5"], "ERR syntax error");
    refusals.case(&["VTRR.RESULT", "q", ""], "ERR id must not be empty");
    refusals.case(
        &["VTRR.LEASE", "q", "1000", "ACKRESULT", "a", "t"],
        "ERR ACKRESULT must be followed by one or more <id> <token> <result> triples, and be the last option",
    );
    refusals.assert_refused(&mut con, "q");
}
