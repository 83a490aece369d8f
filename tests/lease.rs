//! `VTRR.LEASE`, `VTRR.ACK` and `VTRR.RENEW`: tokens and server-clock
//! expiries, empty queues, draining, fenced acks and renews, and
//! current_virtual_time written only when it changes.

mod common;

use common::*;

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
    let inflight = key_zrange(&mut con, "q", "inflight");
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
    assert_eq!(
        key_hget(&mut con, "q", "lease", "a").as_ref(),
        Some(tokens[0])
    );
    assert_eq!(
        key_current_virtual_time(&mut con, "q").as_deref(),
        Some("2")
    );
    let inflight_payload = key_hgetall(&mut con, "q", "inflight_task").remove(&b"b"[..]);
    assert_eq!(inflight_payload.as_deref(), Some(&b"B"[..]));
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
    assert_key_drained(&mut con, "q");
    for kept in ["inflight", "inflight_task", "lease", "meta"] {
        assert!(key_exists(&mut con, "q", kept), "{kept}");
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
        assert!(!key_exists(&mut con, "q", key), "{key}");
    }
    let meta: Vec<Vec<u8>> = key_hgetall(&mut con, "q", "meta").into_keys().collect();
    assert_eq!(meta, [b"b"]);
    assert_invariants(&mut con, "q");
}

#[test]
fn renew_extends_only_the_current_lease() {
    let server = Server::start();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    let (id, _, token, _) = lease(&mut con, "q", 1_000).unwrap();
    let before = key_zscore(&mut con, "q", "inflight", std::str::from_utf8(&id).unwrap()).unwrap();
    assert_eq!(renew(&mut con, "q", &id, "old", 100_000), 0);
    assert_eq!(renew(&mut con, "q", &id, &token, 100_000), 1);
    let after = key_zscore(&mut con, "q", "inflight", std::str::from_utf8(&id).unwrap()).unwrap();
    assert!(after >= before + 99_000.0, "{before} -> {after}");
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
    // After each of three leases: whether it wrote current_virtual_time,
    // and what it holds.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let wrote = !keys_untouched_by(&mut watcher, key, |_| {
            lease(&mut worker, "q", 60_000).unwrap();
        });
        seen.push((wrote, key_current_virtual_time(&mut worker, "q")));
    }
    let values: Vec<Option<&str>> = seen.iter().map(|(_, v)| v.as_deref()).collect();
    assert_eq!(values, [Some("1"), Some("1"), Some("2")]);
    // Whether the key itself is written is the keys layout's: a native
    // queue is one key, which every lease writes.
    if !native_layout() {
        let wrote: Vec<bool> = seen.iter().map(|(w, _)| *w).collect();
        assert_eq!(
            wrote,
            [true, false, true],
            "popping score 1 again rewrote current_virtual_time 1"
        );
    }
    // Another client's spelling of the same number is written back as ours
    // (e, scored 3, keeps the queue from draining).
    enqueue_items(&mut worker, "q", &[("p3", "e", 1, b"E")]);
    with_keys_layout(&mut worker, "q", |con| {
        let _: () = redis::cmd("SET").arg(key).arg("02").query(con).unwrap();
    });
    assert_eq!(
        key_current_virtual_time(&mut worker, "q").as_deref(),
        Some("02")
    );
    lease(&mut worker, "q", 60_000).unwrap();
    assert_eq!(
        key_current_virtual_time(&mut worker, "q").as_deref(),
        Some("2")
    );
}

#[test]
fn a_lease_that_also_reclaimed_tells_dispatchers_so() {
    let server = notifying_server("0");
    let mut con = server.connect();
    let mut sub_con = server.connect();
    let mut pubsub = keyspace_events(&mut sub_con, "vtrr:q:queue");
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    lease(&mut con, "q", 1).unwrap(); // a, expiring at once
    let_expire();
    // This LEASE takes a back first, then leases (a again, its score lowest).
    lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(
        next_events(&mut pubsub, 4),
        ["vtrr.enqueue", "vtrr.lease", "vtrr.reclaim", "vtrr.lease"]
    );
}

#[test]
fn a_lease_with_acks_that_leases_nothing_still_tells_of_what_it_put_back() {
    let server = notifying_server("0");
    let mut con = server.connect();
    let mut sub_con = server.connect();
    let mut pubsub = keyspace_events(&mut sub_con, "vtrr:q:queue");
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    let (a, _, a_token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(a, b"a");
    lease(&mut con, "q", 1).unwrap(); // b, expiring at once
    let paused: i64 = command(&["VTRR.PAUSE", "q", "p"]).query(&mut con).unwrap();
    assert_eq!(paused, 1);
    let_expire();
    // Acks a, takes b back (into `held`: p is paused), leases nothing.
    let reply: Value = command(&["VTRR.LEASE", "q", "60000", "ACK", "a", &a_token])
        .query(&mut con)
        .unwrap();
    assert_eq!(leases_in(&reply), []);
    assert_eq!(
        next_events(&mut pubsub, 6),
        [
            "vtrr.enqueue",
            "vtrr.lease",
            "vtrr.lease",
            "vtrr.pause",
            "vtrr.reclaim",
            "vtrr.ack"
        ]
    );
}

/// `VTRR.LEASE ... ACK <id> <token> ...`: one call finishes the leases given
/// (fenced like ACK) and leases the next items; the reply tells, pair by
/// pair, which acks took: a lost lease among them is reported, not an
/// error for the others.
#[test]
fn lease_with_ack_settles_then_leases_in_one_call() {
    let server = quiet_server();
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
    let (a, _, a_token, _) = lease(&mut con, "q", 60_000).unwrap();
    let (b, _, b_token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(ack(&mut con, "q", &b, &b_token), 1, "b is done already");
    let (acked, leases): (Vec<i64>, Vec<Lease>) = redis::cmd("VTRR.LEASE")
        .arg("q")
        .arg(60_000)
        .arg("COUNT")
        .arg(5)
        .arg("ACK")
        .arg(&a)
        .arg(&a_token)
        .arg(&b)
        .arg(&b_token)
        .query(&mut con)
        .unwrap();
    assert_eq!(
        acked,
        [1, 0],
        "a's ack took; b's lease was no longer current"
    );
    assert_eq!(ids(&leases), ["c"]);
    assert_eq!(stat(&mut con, "q", "inflight"), 1, "only c is leased");
    assert_eq!(vtrr_info(&mut con)["vtrr_items_acked"], 2);

    // Without COUNT the lease part is one lease or nil, as plain LEASE.
    let (c, _, c_token, _) = &leases[0];
    let (acked, lease): (Vec<i64>, Option<Lease>) = redis::cmd("VTRR.LEASE")
        .arg("q")
        .arg(60_000)
        .arg("ACK")
        .arg(c)
        .arg(c_token)
        .query(&mut con)
        .unwrap();
    assert_eq!((acked, lease), (vec![1], None));
    assert_eq!(
        stat(&mut con, "q", "inflight"),
        0,
        "c is done: nothing left"
    );
    assert_invariants(&mut con, "q");
}

/// The acks of a blocking call take at once; only the leasing waits, and
/// the reply that ends the wait (an item, or the timeout) carries them.
#[test]
fn a_blocked_lease_with_ack_has_acked_before_it_waits() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_one(&mut con, "q", "p", "a", "A");
    let (a, _, a_token, _) = lease(&mut con, "q", 60_000).unwrap();
    let url = server.url();
    let (id, token) = (a.clone(), a_token.clone());
    let waiter = std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let reply: (Vec<i64>, Option<Lease>) = redis::cmd("VTRR.LEASE")
            .arg("q")
            .arg(60_000)
            .arg("BLOCK")
            .arg(0)
            .arg("ACK")
            .arg(&id)
            .arg(&token)
            .query(&mut con)
            .unwrap();
        reply
    });
    wait_blocked(&mut con, 1);
    assert_eq!(stat(&mut con, "q", "inflight"), 0, "acked while blocked");
    enqueue_one(&mut con, "q", "p", "b", "B");
    let (acked, lease) = waiter.join().unwrap();
    assert_eq!(acked, [1]);
    assert_eq!(lease.unwrap().0, b"b");

    // A timed-out wait replies the acks too (here a stale token's 0).
    let (acked, lease): (Vec<i64>, Option<Lease>) = redis::cmd("VTRR.LEASE")
        .arg("q")
        .arg(60_000)
        .arg("BLOCK")
        .arg(50)
        .arg("ACK")
        .arg(&a)
        .arg(&a_token)
        .query(&mut con)
        .unwrap();
    assert_eq!((acked, lease), (vec![0], None));
}

/// A slot an ack frees in a capped partition goes to the lease in the
/// same call: settling comes first.
#[test]
fn an_ack_in_a_lease_frees_its_slot_for_that_lease() {
    let server = quiet_server();
    let mut con = server.connect();
    let _: Value = command(&["VTRR.LIMIT", "q", "p", "CONCURRENCY", "1"])
        .query(&mut con)
        .unwrap();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    let (a, _, a_token, _) = lease(&mut con, "q", 60_000).unwrap();
    assert_eq!(lease(&mut con, "q", 60_000), None, "b waits for a's slot");
    let (acked, lease): (Vec<i64>, Option<Lease>) = redis::cmd("VTRR.LEASE")
        .arg("q")
        .arg(60_000)
        .arg("ACK")
        .arg(&a)
        .arg(&a_token)
        .query(&mut con)
        .unwrap();
    assert_eq!(acked, [1]);
    assert_eq!(lease.unwrap().0, b"b");
    assert_invariants(&mut con, "q");
}

/// Every pair is checked before anything is written: a malformed ACK is an
/// error and acks nothing.
#[test]
fn lease_with_malformed_acks_is_refused_and_changes_nothing() {
    let server = quiet_server();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    let (a, _, a_token, _) = lease(&mut con, "q", 60_000).unwrap();
    let a = String::from_utf8(a).unwrap();
    let pairs =
        "ERR ACK must be followed by one or more <id> <token> pairs, and be the last option";
    let mut refusals = Refusals::default();
    refusals.case(&["VTRR.LEASE", "q", "1000", "ACK"], pairs);
    refusals.case(&["VTRR.LEASE", "q", "1000", "ACK", &a], pairs);
    refusals.case(
        &["VTRR.LEASE", "q", "1000", "ACK", &a, &a_token, "b"],
        pairs,
    );
    refusals.case(
        &["VTRR.LEASE", "q", "1000", "ACK", &a, &a_token, "", "t"],
        "ERR id must not be empty",
    );
    refusals.case(
        &["VTRR.LEASE", "q", "0", "ACK", &a, &a_token],
        "ERR lease-ms must be an integer between 1 and 315360000000",
    );
    refusals.assert_refused(&mut con, "q");
    assert_eq!(
        ack(&mut con, "q", a.as_bytes(), &a_token),
        1,
        "a's lease was untouched"
    );
}

/// A lease WITHPARTITION: id, payload, token, timeouts, partition.
type PartitionedLease = (Vec<u8>, Vec<u8>, String, i64, Vec<u8>);

/// The same WITHCOUNTERS: the nack count before the partition.
type CountedPartitionedLease = (Vec<u8>, Vec<u8>, String, i64, i64, Vec<u8>);

/// WITHPARTITION: each lease ends with its item's partition (after the nack
/// count with WITHCOUNTERS), as given at enqueue, any bytes; with COUNT,
/// ACK and BLOCK alike.
#[test]
fn withpartition_ends_each_lease_with_its_partition() {
    let server = quiet_server();
    let mut con = server.connect();
    let binary: &[u8] = b"t\x00:\xff";
    let _: i64 = redis::cmd("VTRR.ENQUEUE")
        .arg("q")
        .arg("alice")
        .arg("a")
        .arg(1)
        .arg("A")
        .arg(binary)
        .arg("b")
        .arg(1)
        .arg("B")
        .query(&mut con)
        .unwrap();
    let one: PartitionedLease = command(&["VTRR.LEASE", "q", "60000", "WITHPARTITION"])
        .query(&mut con)
        .unwrap();
    assert_eq!(
        (one.0.as_slice(), one.4.as_slice()),
        (&b"a"[..], &b"alice"[..])
    );
    // With WITHCOUNTERS the partition comes after the nack count, whatever
    // order the options were given in.
    assert_eq!(nack(&mut con, "q", b"a", &one.2, &[]), 1);
    let leased: Vec<CountedPartitionedLease> = command(&[
        "VTRR.LEASE",
        "q",
        "60000",
        "WITHPARTITION",
        "COUNT",
        "5",
        "WITHCOUNTERS",
    ])
    .query(&mut con)
    .unwrap();
    let seen: Vec<(&[u8], i64, &[u8])> = leased
        .iter()
        .map(|l| (l.0.as_slice(), l.4, l.5.as_slice()))
        .collect();
    assert_eq!(seen, [(&b"b"[..], 0, binary), (b"a", 1, b"alice")]);
    // A blocked lease's reply, served later, carries it too; so does one
    // that acks first.
    let url = server.url();
    let waiter = std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let (acked, lease): (Vec<i64>, PartitionedLease) = redis::cmd("VTRR.LEASE")
            .arg("q")
            .arg(60_000)
            .arg("BLOCK")
            .arg(0)
            .arg("WITHPARTITION")
            .arg("ACK")
            .arg("a")
            .arg(&leased[1].2)
            .query(&mut con)
            .unwrap();
        (acked, lease)
    });
    wait_blocked(&mut con, 1);
    enqueue_one(&mut con, "q", "bob", "c", "C");
    let (acked, lease) = waiter.join().unwrap();
    assert_eq!(acked, [1]);
    assert_eq!(
        (lease.0.as_slice(), lease.4.as_slice()),
        (&b"c"[..], &b"bob"[..])
    );
    // Without it, replies keep their four (or five) elements.
    enqueue_one(&mut con, "q", "bob", "d", "D");
    let plain: Value = command(&["VTRR.LEASE", "q", "60000"])
        .query(&mut con)
        .unwrap();
    assert!(
        matches!(plain, Value::Array(ref e) if e.len() == 4),
        "{plain:?}"
    );
    assert_invariants(&mut con, "q");
}
