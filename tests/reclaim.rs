//! `VTRR.RECLAIM` and the reclaim inside `VTRR.LEASE`: expired leases
//! re-queued with their timeouts counted, and meta written only when it
//! changes. (The background timer is in timer.rs.)

mod common;

use common::*;
use redis::Connection;

#[test]
fn reclaim_requeues_expired_leases_and_counts_timeouts() {
    let server = quiet_server();
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
    assert_eq!(stats(&mut con, "q")["expired"], Value::Int(1));
    let reclaimed: i64 = redis::cmd("VTRR.RECLAIM")
        .arg("q")
        .arg("LIMIT")
        .arg(10)
        .query(&mut con)
        .unwrap();
    assert_eq!(reclaimed, 1);
    assert_eq!(
        key_hget(&mut con, "q", "timeouts", "a").as_deref(),
        Some("1")
    );
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
    let server = quiet_server();
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
fn a_reclaim_writes_meta_only_when_it_changes() {
    let server = Server::start();
    let mut watcher = server.connect();
    let mut worker = server.connect();
    let reclaim_one = |worker: &mut Connection| {
        lease(worker, "q", 1).unwrap();
        let_expire();
        assert_eq!(reclaim(worker, "q"), 1);
    };
    enqueue_items(&mut worker, "q", &[("p", "a", 3, b"A")]);
    // Whether the meta key itself is written is the keys layout's: a native
    // queue is one key, which every reclaim writes.
    let untouched = keys_untouched_by(&mut watcher, "vtrr:q:meta", |_| reclaim_one(&mut worker));
    if !native_layout() {
        assert!(untouched, "reclaim rewrote an unchanged meta");
    }
    assert_eq!(
        key_hget(&mut worker, "q", "meta", "a").as_deref(),
        Some("3:p")
    );
    // Another client's spelling of the same weight is written back as ours.
    with_keys_layout(&mut worker, "q", |con| {
        let _: () = redis::cmd("HSET")
            .arg("vtrr:q:meta")
            .arg("a")
            .arg("03:p")
            .query(con)
            .unwrap();
    });
    assert_eq!(
        key_hget(&mut worker, "q", "meta", "a").as_deref(),
        Some("03:p")
    );
    reclaim_one(&mut worker);
    assert_eq!(
        key_hget(&mut worker, "q", "meta", "a").as_deref(),
        Some("3:p")
    );
}
