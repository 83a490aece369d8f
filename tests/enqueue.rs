//! `VTRR.ENQUEUE`: virtual-time scoring (partitions interleaved, weights
//! costing turns), the keys it writes, ids already present, binary-safe
//! ids, payloads and partitions, and many queues used in turn.

mod common;

use common::*;

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
    assert_eq!(key_zscore(&mut con, "q", "queue", "x"), Some(1.0));
    assert_eq!(
        key_hget(&mut con, "q", "meta", "x").as_deref(),
        Some("3:p:with:colons")
    );
    assert_eq!(
        key_hget(&mut con, "q", "partition_virtual_time", "p:with:colons").as_deref(),
        Some("4")
    );
    if native_layout() {
        // The whole queue is the one key of the module's type.
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
        assert_eq!(keys, ["vtrr:q:queue"]);
        let kind: String = redis::cmd("TYPE")
            .arg("vtrr:q:queue")
            .query(&mut con)
            .unwrap();
        assert_eq!(kind, "vtrrqueue");
    } else {
        // vtrr-queue's own keys, as its scripts read them.
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
    }
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
        assert!(key_zrange(&mut con, queue, "queue").is_empty(), "{queue}");
        assert_invariants(&mut con, queue);
    }
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
    let meta = key_hgetall(&mut con, "q", "meta").remove(&id[..]);
    assert_eq!(meta.as_deref(), Some(&b"1:p\x00art"[..]));
    assert_eq!(ack(&mut con, "q", &id[..], &token), 1);
}
