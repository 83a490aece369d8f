//! The VTRR commands against a real redis-server: semantics, replies, errors,
//! and that bad input or idle calls change and signal nothing.

mod common;

use common::*;
use redis::Connection;

fn lease_count(con: &mut Connection, queue: &str, lease_ms: u64, count: u64) -> Vec<Lease> {
    redis::cmd("VTRR.LEASE")
        .arg(queue)
        .arg(lease_ms)
        .arg("COUNT")
        .arg(count)
        .query(con)
        .unwrap()
}

fn error_of(result: redis::RedisResult<Value>) -> String {
    let error = result.expect_err("expected an error reply");
    format!(
        "{} {}",
        error.code().unwrap_or("?"),
        error.detail().unwrap_or("")
    )
}

fn ids(leases: &[Lease]) -> Vec<String> {
    leases
        .iter()
        .map(|l| String::from_utf8(l.0.clone()).unwrap())
        .collect()
}

#[test]
fn partitions_are_interleaved_in_virtual_time_order() {
    let server = Server::start();
    let mut con = server.connect();
    let added = enqueue_items(
        &mut con,
        "files",
        &[
            ("alice", "a1", 1, b"A1"),
            ("alice", "a2", 1, b"A2"),
            ("alice", "a3", 1, b"A3"),
        ],
    );
    assert_eq!(added, 3);
    enqueue_items(
        &mut con,
        "files",
        &[("bob", "b1", 1, b"B1"), ("bob", "b2", 1, b"B2")],
    );
    let leased = lease_count(&mut con, "files", 60_000, 10);
    assert_eq!(ids(&leased), ["a1", "b1", "a2", "b2", "a3"]);
    assert_eq!(leased[1].1, b"B1");
    assert!(leased.iter().all(|l| l.3 == 0));
    assert_invariants(&mut con, "files");
}

#[test]
fn weights_cost_their_partition_turns() {
    let server = Server::start();
    let mut con = server.connect();
    enqueue_items(
        &mut con,
        "q",
        &[("heavy", "h1", 4, b""), ("heavy", "h2", 4, b"")],
    );
    enqueue_items(
        &mut con,
        "q",
        &[
            ("light", "l1", 1, b""),
            ("light", "l2", 1, b""),
            ("light", "l3", 1, b""),
            ("light", "l4", 1, b""),
            ("light", "l5", 1, b""),
        ],
    );
    let leased = lease_count(&mut con, "q", 60_000, 10);
    assert_eq!(ids(&leased), ["h1", "l1", "l2", "l3", "l4", "h2", "l5"]);
}

#[test]
fn enqueue_writes_vtrr_queue_keys_and_skips_present_ids() {
    let server = Server::start();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p:with:colons", "x", 3, b"payload-x")]);
    let score: f64 = redis::cmd("ZSCORE")
        .arg("vtrr:q:queue")
        .arg("x")
        .query(&mut con)
        .unwrap();
    assert_eq!(score, 1.0);
    let meta: String = redis::cmd("HGET")
        .arg("vtrr:q:meta")
        .arg("x")
        .query(&mut con)
        .unwrap();
    assert_eq!(meta, "3:p:with:colons");
    let pvt: String = redis::cmd("HGET")
        .arg("vtrr:q:partition_virtual_time")
        .arg("p:with:colons")
        .query(&mut con)
        .unwrap();
    assert_eq!(pvt, "4");
    // Queued: skipped. Leased: skipped too (the Lua version re-queued it).
    assert_eq!(
        enqueue_items(&mut con, "q", &[("other", "x", 1, b"dup")]),
        0
    );
    lease(&mut con, "q", 60_000).unwrap();
    let before = dump_queue(&mut con, "q");
    assert_eq!(
        enqueue_items(
            &mut con,
            "q",
            &[("other", "x", 1, b"dup"), ("other", "x", 1, b"dup")]
        ),
        0
    );
    assert_eq!(before, dump_queue(&mut con, "q"));
}

#[test]
fn calls_on_many_queues_in_turn_keep_each_queues_keys_apart() {
    // More queues than the module keeps key names for (8), with names that
    // are prefixes of one another, used in an order that evicts and reuses;
    // and two names too long to be kept (over 256 bytes).
    let server = Server::start();
    let mut con = server.connect();
    let mut queues: Vec<String> = (0..20).map(|i| "q".repeat(i + 1)).collect();
    queues.extend(["q".repeat(300), "q".repeat(301)]);
    for round in 0..3 {
        for (i, queue) in queues.iter().enumerate() {
            let id = format!("{queue}-{round}");
            assert_eq!(enqueue_one(&mut con, queue, &format!("p{i}"), &id, &id), 1);
        }
    }
    for round in 0..3 {
        for queue in queues.iter().rev() {
            let (id, payload, token, _) = lease(&mut con, queue, 60_000).unwrap();
            assert_eq!(
                String::from_utf8(id.clone()).unwrap(),
                format!("{queue}-{round}")
            );
            assert_eq!(payload, id);
            assert_eq!(ack(&mut con, queue, &id, &token), 1);
        }
    }
    for queue in &queues {
        let queued: i64 = redis::cmd("ZCARD")
            .arg(format!("vtrr:{queue}:queue"))
            .query(&mut con)
            .unwrap();
        assert_eq!(queued, 0, "{queue}");
        assert_invariants(&mut con, queue);
    }
}

#[test]
fn lease_grants_a_fresh_token_and_a_server_clock_expiry() {
    let server = Server::start();
    let mut con = server.connect();
    enqueue_items(
        &mut con,
        "q",
        &[
            ("p", "a", 1, b"A"),
            ("p", "b", 1, b"B"),
            ("p", "c", 1, b"C"),
        ],
    );
    let (sec, usec): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
    let before_ms = sec * 1000 + usec / 1000;
    let leased = lease_count(&mut con, "q", 5_000, 2);
    let tokens: Vec<&String> = leased.iter().map(|l| &l.2).collect();
    assert_eq!(tokens.len(), 2);
    assert_ne!(tokens[0], tokens[1]);
    for token in &tokens {
        assert_eq!(token.len(), 32);
        assert!(token.chars().all(|c| c.is_ascii_hexdigit()));
    }
    let inflight: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("vtrr:q:inflight")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut con)
        .unwrap();
    assert_eq!(inflight.len(), 2);
    assert_eq!(
        inflight[0].1, inflight[1].1,
        "one clock reading per command"
    );
    let expiry = inflight[0].1 as i64;
    assert!(
        (before_ms + 5_000..before_ms + 5_000 + 1_000).contains(&expiry),
        "{expiry} vs {before_ms}"
    );
    let stored: String = redis::cmd("HGET")
        .arg("vtrr:q:lease")
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert_eq!(&stored, tokens[0]);
    let cvt: i64 = redis::cmd("GET")
        .arg("vtrr:q:current_virtual_time")
        .query(&mut con)
        .unwrap();
    assert_eq!(cvt, 2);
    let inflight_payload: Vec<u8> = redis::cmd("HGET")
        .arg("vtrr:q:inflight_task")
        .arg("b")
        .query(&mut con)
        .unwrap();
    assert_eq!(inflight_payload, b"B");
}

#[test]
fn lease_replies_nil_or_empty_on_an_empty_queue() {
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(lease(&mut con, "none", 100), None);
    assert!(lease_count(&mut con, "none", 100, 5).is_empty());
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

#[test]
fn draining_resets_virtual_time_and_keeps_leases() {
    let server = Server::start();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("r", "b", 1, b"B")]);
    lease_count(&mut con, "q", 60_000, 5);
    let cvt: String = redis::cmd("GET")
        .arg("vtrr:q:current_virtual_time")
        .query(&mut con)
        .unwrap();
    assert_eq!(cvt, "0");
    for gone in ["queue", "task", "partition_virtual_time"] {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(format!("vtrr:q:{gone}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(exists, 0, "{gone}");
    }
    for kept in ["inflight", "inflight_task", "lease", "meta"] {
        let len: i64 = redis::cmd("EXISTS")
            .arg(format!("vtrr:q:{kept}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(len, 1, "{kept}");
    }
}

#[test]
fn ack_is_fenced_and_removes_all_lease_state() {
    let server = Server::start();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(ack(&mut con, "q", &id, "not-the-token"), 0);
    let acked: i64 = redis::cmd("VTRR.ACK")
        .arg("q")
        .arg(&id)
        .arg(&token)
        .arg(&id)
        .arg(&token)
        .arg("b")
        .arg("x")
        .query(&mut con)
        .unwrap();
    assert_eq!(acked, 1);
    for key in ["inflight", "inflight_task", "lease", "timeouts"] {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(format!("vtrr:q:{key}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(exists, 0, "{key}");
    }
    let meta: Vec<String> = redis::cmd("HKEYS")
        .arg("vtrr:q:meta")
        .query(&mut con)
        .unwrap();
    assert_eq!(meta, ["b"]);
    assert_invariants(&mut con, "q");
}

#[test]
fn renew_extends_only_the_current_lease() {
    let server = Server::start();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    let (id, _, token, _) = lease(&mut con, "q", 1_000).unwrap();
    let before: f64 = redis::cmd("ZSCORE")
        .arg("vtrr:q:inflight")
        .arg(&id)
        .query(&mut con)
        .unwrap();
    assert_eq!(renew(&mut con, "q", &id, "old", 100_000), 0);
    assert_eq!(renew(&mut con, "q", &id, &token, 100_000), 1);
    let after: f64 = redis::cmd("ZSCORE")
        .arg("vtrr:q:inflight")
        .arg(&id)
        .query(&mut con)
        .unwrap();
    assert!(after >= before + 99_000.0, "{before} -> {after}");
}

#[test]
fn reclaim_requeues_expired_leases_and_counts_timeouts() {
    let server = Server::builder()
        .module_args(&["reclaim-interval-ms", "0"])
        .spawn();
    let mut con = server.connect();
    enqueue_items(
        &mut con,
        "q",
        &[
            ("p", "a", 2, b"A"),
            ("p", "b", 1, b"B"),
            ("r", "c", 1, b"C"),
        ],
    );
    let leased = lease_count(&mut con, "q", 600_000, 2);
    assert_eq!(ids(&leased), ["a", "c"]);
    let token = leased[0].2.clone();
    // a's lease now expires in 1 ms; c's stays valid.
    assert_eq!(renew(&mut con, "q", b"a", &token, 1), 1);
    std::thread::sleep(std::time::Duration::from_millis(10));
    let stats: std::collections::HashMap<String, Value> =
        redis::cmd("VTRR.STATS").arg("q").query(&mut con).unwrap();
    assert_eq!(stats["expired"], Value::Int(1));
    let reclaimed: i64 = redis::cmd("VTRR.RECLAIM")
        .arg("q")
        .arg("LIMIT")
        .arg(10)
        .query(&mut con)
        .unwrap();
    assert_eq!(reclaimed, 1);
    let timeouts: i64 = redis::cmd("HGET")
        .arg("vtrr:q:timeouts")
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert_eq!(timeouts, 1);
    // The old holder's token no longer acks.
    assert_eq!(ack(&mut con, "q", b"a", &token), 0);
    let rest = lease_count(&mut con, "q", 60_000, 5);
    assert_eq!(ids(&rest), ["b", "a"]);
    assert_eq!(rest[1].3, 1, "timeouts reported on redelivery");
    assert_eq!(rest[1].1, b"A");
    assert_invariants(&mut con, "q");
}

#[test]
fn lease_reclaims_expired_leases_first() {
    let server = Server::builder()
        .module_args(&["reclaim-interval-ms", "0"])
        .spawn();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    lease(&mut con, "q", 1).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(10));
    let (id, payload, _, timeouts) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(
        (id.as_slice(), payload.as_slice(), timeouts),
        (&b"a"[..], &b"A"[..], 1)
    );
}

#[test]
fn stats_reports_every_field() {
    let server = Server::start();
    let mut con = server.connect();
    let empty: std::collections::HashMap<String, Value> =
        redis::cmd("VTRR.STATS").arg("q").query(&mut con).unwrap();
    assert_eq!(empty["queued"], Value::Int(0));
    assert_eq!(empty["next_expiry_ms"], Value::Nil);
    enqueue_items(
        &mut con,
        "q",
        &[("p", "a", 1, b""), ("r", "b", 1, b""), ("r", "c", 1, b"")],
    );
    lease(&mut con, "q", 60_000).unwrap();
    let stats: std::collections::HashMap<String, Value> =
        redis::cmd("VTRR.STATS").arg("q").query(&mut con).unwrap();
    assert_eq!(stats["queued"], Value::Int(2));
    assert_eq!(stats["inflight"], Value::Int(1));
    assert_eq!(stats["expired"], Value::Int(0));
    assert_eq!(stats["partitions"], Value::Int(2));
    assert_eq!(stats["current_virtual_time"], Value::Int(1));
    assert!(matches!(stats["next_expiry_ms"], Value::Int(n) if n > 1_700_000_000_000));
}

#[test]
fn ids_payloads_and_partitions_are_binary_safe() {
    let server = Server::start();
    let mut con = server.connect();
    let id = b"id\x00\xff";
    let payload = b"\x00\x01\xfe payload";
    let added: i64 = redis::cmd("VTRR.ENQUEUE")
        .arg("q")
        .arg(&b"p\x00art"[..])
        .arg(&id[..])
        .arg(1)
        .arg(&payload[..])
        .query(&mut con)
        .unwrap();
    assert_eq!(added, 1);
    let (got_id, got_payload, token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(
        (got_id.as_slice(), got_payload.as_slice()),
        (&id[..], &payload[..])
    );
    let meta: Vec<u8> = redis::cmd("HGET")
        .arg("vtrr:q:meta")
        .arg(&id[..])
        .query(&mut con)
        .unwrap();
    assert_eq!(meta, b"1:p\x00art");
    assert_eq!(ack(&mut con, "q", &id[..], &token), 1);
}

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    let id = String::from_utf8(id).unwrap();
    let before = dump_queue(&mut con, "q");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["VTRR.ENQUEUE", "q", "p", "x", "1"],
            "ERR wrong number of arguments for 'vtrr.enqueue' command",
        ),
        (
            vec!["VTRR.ENQUEUE", "q", "p", "x", "1", "X", "p2"],
            "ERR wrong number of arguments for 'vtrr.enqueue' command",
        ),
        (
            vec!["VTRR.ENQUEUE", "", "p", "x", "1", "X"],
            "ERR queue name must not be empty",
        ),
        (
            vec!["VTRR.ENQUEUE", "q", "p", "", "1", "X"],
            "ERR id must not be empty",
        ),
        (
            vec!["VTRR.ENQUEUE", "q", "p", "x", "0", "X"],
            "ERR weight must be an integer between 1 and 1000000000",
        ),
        (
            vec!["VTRR.ENQUEUE", "q", "p", "x", "-1", "X"],
            "ERR weight must be an integer between 1 and 1000000000",
        ),
        (
            vec!["VTRR.ENQUEUE", "q", "p", "x", "1.5", "X"],
            "ERR weight must be an integer between 1 and 1000000000",
        ),
        (
            vec!["VTRR.ENQUEUE", "q", "p", "x", "99999999999999999999", "X"],
            "ERR weight must be an integer between 1 and 1000000000",
        ),
        // The first item is valid: the bad second one refuses the whole call.
        (
            vec![
                "VTRR.ENQUEUE",
                "q",
                "p",
                "ok",
                "1",
                "X",
                "p",
                "y",
                "abc",
                "Y",
            ],
            "ERR weight must be an integer between 1 and 1000000000",
        ),
        (
            vec!["VTRR.LEASE", "q"],
            "ERR wrong number of arguments for 'vtrr.lease' command",
        ),
        (
            vec!["VTRR.LEASE", "q", "0"],
            "ERR lease-ms must be an integer between 1 and 315360000000",
        ),
        (
            vec!["VTRR.LEASE", "q", "ten"],
            "ERR lease-ms must be an integer between 1 and 315360000000",
        ),
        (
            vec!["VTRR.LEASE", "q", "100", "COUNT", "0"],
            "ERR COUNT must be a positive integer",
        ),
        (vec!["VTRR.LEASE", "q", "100", "COUNT"], "ERR syntax error"),
        (
            vec!["VTRR.LEASE", "q", "100", "LIMIT", "1"],
            "ERR syntax error",
        ),
        (
            vec!["VTRR.ACK", "q", &id],
            "ERR wrong number of arguments for 'vtrr.ack' command",
        ),
        (
            vec!["VTRR.ACK", "q", &id, &token, "b"],
            "ERR wrong number of arguments for 'vtrr.ack' command",
        ),
        (
            vec!["VTRR.ACK", "q", &id, &token, "", "t"],
            "ERR id must not be empty",
        ),
        (
            vec!["VTRR.RENEW", "q", &id, &token],
            "ERR wrong number of arguments for 'vtrr.renew' command",
        ),
        (
            vec!["VTRR.RENEW", "q", &id, &token, "-5"],
            "ERR lease-ms must be an integer between 1 and 315360000000",
        ),
        (
            vec!["VTRR.RECLAIM", "q", "LIMIT", "0"],
            "ERR LIMIT must be a positive integer",
        ),
        (vec!["VTRR.RECLAIM", "q", "BOGUS", "1"], "ERR syntax error"),
        (
            vec!["VTRR.STATS", "q", "extra"],
            "ERR wrong number of arguments for 'vtrr.stats' command",
        ),
    ];
    for (args, expected) in cases {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        let got = error_of(cmd.query(&mut con));
        assert_eq!(got, expected, "{args:?}");
        assert_eq!(
            before,
            dump_queue(&mut con, "q"),
            "{args:?} changed the queue"
        );
    }
}

#[test]
fn a_key_of_the_wrong_type_is_refused_before_any_write() {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = redis::cmd("SET")
        .arg("vtrr:q:meta")
        .arg("oops")
        .query(&mut con)
        .unwrap();
    let err = error_of(
        redis::cmd("VTRR.ENQUEUE")
            .arg("q")
            .arg("p")
            .arg("x")
            .arg(1)
            .arg("X")
            .query(&mut con),
    );
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    assert!(err.contains("vtrr:q:meta must be a hash"), "{err}");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(keys, ["vtrr:q:meta"]);
    let err = error_of(redis::cmd("VTRR.LEASE").arg("q").arg(100).query(&mut con));
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    let _: () = redis::cmd("DEL")
        .arg("vtrr:q:meta")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("vtrr:q:current_virtual_time")
        .arg("garbage")
        .query(&mut con)
        .unwrap();
    let err = error_of(
        redis::cmd("VTRR.ENQUEUE")
            .arg("q")
            .arg("p")
            .arg("x")
            .arg(1)
            .arg("X")
            .query(&mut con),
    );
    assert_eq!(err, "ERR vtrr:q:current_virtual_time is not an integer");
}

#[test]
fn idle_calls_do_not_abort_a_watching_client() {
    let server = Server::start();
    let mut watcher = server.connect();
    let mut worker = server.connect();
    enqueue_items(&mut worker, "q", &[("p", "a", 1, b"A")]);
    let (id, _, _, _) = lease(&mut worker, "q", 60_000).unwrap();
    let keys = queue_keys("q");
    let untouched = keys_untouched_by(&mut watcher, &keys, |_| {
        assert_eq!(lease(&mut worker, "q", 100), None);
        assert_eq!(ack(&mut worker, "q", &id, "stale"), 0);
        assert_eq!(renew(&mut worker, "q", &id, "stale", 5), 0);
        let reclaimed: i64 = redis::cmd("VTRR.RECLAIM")
            .arg("q")
            .query(&mut worker)
            .unwrap();
        assert_eq!(reclaimed, 0);
    });
    assert!(untouched, "EXEC aborted by a command that changed nothing");
    // A real change does abort it.
    let untouched = keys_untouched_by(&mut watcher, &keys, |_| {
        enqueue_items(&mut worker, "q", &[("p", "b", 1, b"B")]);
    });
    assert!(!untouched, "a real change must abort EXEC");
}

#[test]
fn a_lease_writes_current_virtual_time_only_when_it_changes() {
    let server = Server::start();
    let mut watcher = server.connect();
    let mut worker = server.connect();
    let key = "vtrr:q:current_virtual_time";
    // Scores: a 1, b 1, c 2, d 2.
    enqueue_items(
        &mut worker,
        "q",
        &[
            ("p1", "a", 1, b"A"),
            ("p2", "b", 1, b"B"),
            ("p1", "c", 1, b"C"),
            ("p2", "d", 1, b"D"),
        ],
    );
    assert!(!keys_untouched_by(&mut watcher, key, |_| {
        lease(&mut worker, "q", 60_000).unwrap();
    }));
    assert!(
        keys_untouched_by(&mut watcher, key, |_| {
            lease(&mut worker, "q", 60_000).unwrap();
        }),
        "popping score 1 again rewrote current_virtual_time 1"
    );
    assert!(!keys_untouched_by(&mut watcher, key, |_| {
        lease(&mut worker, "q", 60_000).unwrap();
    }));
    let value: String = redis::cmd("GET").arg(key).query(&mut worker).unwrap();
    assert_eq!(value, "2");
    // Another client's spelling of the same number is written back as ours
    // (e, scored 3, keeps the queue from draining).
    enqueue_items(&mut worker, "q", &[("p3", "e", 1, b"E")]);
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("02")
        .query(&mut worker)
        .unwrap();
    lease(&mut worker, "q", 60_000).unwrap();
    let value: String = redis::cmd("GET").arg(key).query(&mut worker).unwrap();
    assert_eq!(value, "2");
}

#[test]
fn a_reclaim_writes_meta_only_when_it_changes() {
    let server = Server::start();
    let mut watcher = server.connect();
    let mut worker = server.connect();
    let reclaim_one = |worker: &mut Connection| {
        lease(worker, "q", 1).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let reclaimed: i64 = redis::cmd("VTRR.RECLAIM").arg("q").query(worker).unwrap();
        assert_eq!(reclaimed, 1);
    };
    enqueue_items(&mut worker, "q", &[("p", "a", 3, b"A")]);
    assert!(
        keys_untouched_by(&mut watcher, "vtrr:q:meta", |_| reclaim_one(&mut worker)),
        "reclaim rewrote an unchanged meta"
    );
    // Another client's spelling of the same weight is written back as ours.
    let _: () = redis::cmd("HSET")
        .arg("vtrr:q:meta")
        .arg("a")
        .arg("03:p")
        .query(&mut worker)
        .unwrap();
    reclaim_one(&mut worker);
    let meta: String = redis::cmd("HGET")
        .arg("vtrr:q:meta")
        .arg("a")
        .query(&mut worker)
        .unwrap();
    assert_eq!(meta, "3:p");
}

#[test]
fn changes_fire_module_keyspace_notifications() {
    let server = Server::builder()
        .args(&["--notify-keyspace-events", "Kd"])
        .module_args(&["reclaim-interval-ms", "0"])
        .spawn();
    let mut con = server.connect();
    let mut sub_con = server.connect();
    let mut pubsub = sub_con.as_pubsub();
    pubsub.subscribe("__keyspace@0__:vtrr:q:queue").unwrap();
    pubsub
        .set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    lease(&mut con, "q", 1).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let reclaimed: i64 = redis::cmd("VTRR.RECLAIM").arg("q").query(&mut con).unwrap();
    assert_eq!(reclaimed, 1);
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    renew(&mut con, "q", &id, &token, 60_000);
    ack(&mut con, "q", &id, "stale"); // no event
    ack(&mut con, "q", &id, &token);
    let mut events = Vec::new();
    while events.len() < 6 {
        let Ok(message) = pubsub.get_message() else {
            break;
        };
        events.push(message.get_payload::<String>().unwrap());
    }
    assert_eq!(
        events,
        [
            "vtrr.enqueue",
            "vtrr.lease",
            "vtrr.reclaim",
            "vtrr.lease",
            "vtrr.renew",
            "vtrr.ack"
        ]
    );
}

#[test]
fn commands_declare_arity_flags_and_key_position() {
    let server = Server::start();
    let mut con = server.connect();
    let expected = [
        (
            "vtrr.enqueue",
            -6,
            vec!["write", "denyoom", "module", "fast"],
        ),
        ("vtrr.lease", -3, vec!["write", "module", "fast"]),
        ("vtrr.ack", -4, vec!["write", "module", "fast"]),
        ("vtrr.renew", 5, vec!["write", "module", "fast"]),
        ("vtrr.reclaim", -2, vec!["write", "module"]),
        ("vtrr.stats", 2, vec!["readonly", "module", "fast"]),
        ("vtrr.check", 2, vec!["readonly", "module"]),
    ];
    for (name, arity, flags) in expected {
        let info: Vec<Vec<Value>> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(name)
            .query(&mut con)
            .unwrap();
        let entry = &info[0];
        assert_eq!(entry[1], Value::Int(arity), "{name} arity");
        let got_flags: Vec<String> = redis::from_redis_value(entry[2].clone()).unwrap();
        assert_eq!(got_flags, flags, "{name} flags");
        assert_eq!(
            (entry[3].clone(), entry[4].clone(), entry[5].clone()),
            (Value::Int(1), Value::Int(1), Value::Int(1)),
            "{name} keys"
        );
    }
}

#[test]
fn commands_are_atomic_inside_multi_and_lua() {
    let server = Server::start();
    let mut con = server.connect();
    let (leased,): (Option<Lease>,) = redis::pipe()
        .atomic()
        .cmd("VTRR.ENQUEUE")
        .arg("q")
        .arg("p")
        .arg("a")
        .arg(1)
        .arg("A")
        .ignore()
        .cmd("VTRR.LEASE")
        .arg("q")
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    let (id, _, token, _) = leased.unwrap();
    let acked: i64 = redis::cmd("EVAL")
        .arg("return redis.call('VTRR.ACK', KEYS[1], ARGV[1], ARGV[2])")
        .arg(1)
        .arg("q")
        .arg(&id)
        .arg(&token)
        .query(&mut con)
        .unwrap();
    assert_eq!(acked, 1);
    assert_invariants(&mut con, "q");
}
