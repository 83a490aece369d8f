//! `VTRR.LEASE ... BLOCK`: workers wait for work like BZPOPMIN/XREADGROUP.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;

/// A lease read with a text id and payload, for readable assertions.
type TextLease = (String, String, String, i64);

fn enqueue(con: &mut redis::Connection, queue: &str, partition: &str, id: &str) {
    assert_eq!(
        enqueue_one(con, queue, partition, id, &format!("payload-{id}")),
        1
    );
}

/// `VTRR.LEASE q 60000 BLOCK <block_ms>`.
fn lease_blocking(con: &mut redis::Connection, block_ms: u64) -> Option<TextLease> {
    lease_block_cmd("q", 60_000, block_ms).query(con).unwrap()
}

#[test]
fn a_waiter_is_served_right_after_an_enqueue_from_another_connection() {
    let server = Server::start();
    let url = server.url();
    let waiter = std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let leased = lease_blocking(&mut con, 5_000);
        (leased, Instant::now())
    });
    let mut con = server.connect();
    assert!(wait_for(Duration::from_secs(2), || {
        let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
        clients.contains("flags=b")
    }));
    let sent = Instant::now();
    enqueue(&mut con, "q", "p", "a");
    let (leased, served) = waiter.join().unwrap();
    let (id, payload, token, timeouts) = leased.expect("served");
    assert_eq!(
        (id.as_str(), payload.as_str(), timeouts),
        ("a", "payload-a", 0)
    );
    assert_eq!(token.len(), 32);
    let latency = served.duration_since(sent);
    eprintln!(
        "served {} us after the enqueue was sent",
        latency.as_micros()
    );
    assert!(latency < Duration::from_millis(100), "{latency:?}");
    // Granted at serve time: the expiry counts from now.
    let expiry = key_zscore(&mut con, "q", "inflight", "a").expect("a is leased");
    let (sec, usec): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
    let now_ms = sec * 1000 + usec / 1000;
    assert!((expiry as i64 - now_ms - 60_000).abs() < 1_000);
}

#[test]
fn fifty_waiters_share_a_thousand_items_each_exactly_once_in_arrival_order() {
    let server = Server::start();
    let waiters: Vec<_> = (0..50)
        .map(|_| {
            let url = server.url();
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                let mut got = Vec::new();
                loop {
                    let leased = lease_blocking(&mut con, 1_500);
                    match leased {
                        Some((id, _, _, _)) => got.push(id),
                        None => return got,
                    }
                }
            })
        })
        .collect();
    let mut con = server.connect();
    wait_blocked(&mut con, 50);
    for i in 0..1000 {
        enqueue(&mut con, "q", &format!("p{}", i % 7), &format!("i{i}"));
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for waiter in waiters {
        for id in waiter.join().unwrap() {
            *seen.entry(id).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), 1000, "items not served");
    assert!(seen.values().all(|&n| n == 1), "an item was leased twice");
    assert_invariants(&mut con, "q");
}

#[test]
fn waiters_are_served_in_the_order_they_started_waiting() {
    let server = Server::start();
    let mut con = server.connect();
    let mut waiters = Vec::new();
    for n in 0..3 {
        let url = server.url();
        waiters.push(std::thread::spawn(move || {
            let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
            let leased = lease_blocking(&mut con, 5_000);
            leased.map(|l| l.0)
        }));
        wait_blocked(&mut con, n + 1);
    }
    // Items a, b, c in lease order: the first waiter gets a, and so on.
    for id in ["a", "b", "c"] {
        enqueue(&mut con, "q", id, id);
        std::thread::sleep(Duration::from_millis(20));
    }
    let got: Vec<Option<String>> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
    assert_eq!(got, [Some("a".into()), Some("b".into()), Some("c".into())]);
}

#[test]
fn a_timeout_replies_nil_or_an_empty_array() {
    let server = Server::start();
    let mut con = server.connect();
    let started = Instant::now();
    let leased: Option<TextLease> = lease_block_cmd("q", 1000, 200).query(&mut con).unwrap();
    assert!(leased.is_none());
    assert!(started.elapsed() >= Duration::from_millis(200));
    let leased: Vec<TextLease> = redis::cmd("VTRR.LEASE")
        .arg("q")
        .arg(1000)
        .arg("COUNT")
        .arg(3)
        .arg("BLOCK")
        .arg(100)
        .query(&mut con)
        .unwrap();
    assert!(leased.is_empty());
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty());
}

#[test]
fn a_reclaimed_item_wakes_a_waiter() {
    let server = timed_server("20");
    let mut con = server.connect();
    enqueue(&mut con, "q", "p", "a");
    lease(&mut con, "q", 100).unwrap();
    let leased = lease_blocking(&mut con, 3_000);
    let (id, _, _, timeouts) = leased.expect("woken by the timer's reclaim");
    assert_eq!((id.as_str(), timeouts), ("a", 1));
}

#[test]
fn a_disconnected_or_unblocked_waiter_loses_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let url = server.url();
    let waiter = std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut con).unwrap();
        let leased: Option<TextLease> = lease_block_cmd("q", 1000, 0).query(&mut con).unwrap();
        (id, leased)
    });
    wait_blocked(&mut con, 1);
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
    let blocked_id: i64 = clients
        .lines()
        .find(|l| l.contains("flags=b"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|f| f.strip_prefix("id="))
        .unwrap()
        .parse()
        .unwrap();
    let unblocked: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(blocked_id)
        .query(&mut con)
        .unwrap();
    assert_eq!(unblocked, 1);
    let (id, leased) = waiter.join().unwrap();
    assert_eq!(id, blocked_id);
    assert!(leased.is_none(), "CLIENT UNBLOCK replies nil");

    // A waiter that disconnects: the item enqueued afterwards stays queued.
    let mut doomed = server.connect();
    doomed
        .send_packed_command(&lease_block_cmd("q", 1000, 0).get_packed_command())
        .unwrap();
    wait_blocked(&mut con, 1);
    drop(doomed);
    wait_blocked(&mut con, 0);
    enqueue(&mut con, "q", "p", "kept");
    let queued: Vec<Vec<u8>> = key_zrange(&mut con, "q", "queue")
        .into_iter()
        .map(|(member, _)| member)
        .collect();
    assert_eq!(queued, [b"kept".to_vec()]);
}

#[test]
fn inside_multi_and_lua_block_does_not_wait() {
    let server = Server::start();
    let mut con = server.connect();
    let started = Instant::now();
    let (leased,): (Option<TextLease>,) = redis::pipe()
        .atomic()
        .cmd("VTRR.LEASE")
        .arg("q")
        .arg(1000)
        .arg("BLOCK")
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert!(leased.is_none());
    let from_lua: Option<TextLease> = redis::cmd("EVAL")
        .arg("return redis.call('VTRR.LEASE', KEYS[1], 1000, 'BLOCK', 0)")
        .arg(1)
        .arg("q")
        .query(&mut con)
        .unwrap();
    assert!(from_lua.is_none());
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn a_served_waiter_replicates_its_lease_as_effects() {
    let master = Server::start();
    let replica = Server::start();
    attach_replica(&replica, &master);
    let mut r = replica.connect();
    let waiter = spawn_waiter::<Option<TextLease>>(&master, 5_000);
    let mut m = master.connect();
    wait_blocked(&mut m, 1);
    enqueue(&mut m, "q", "p", "a");
    enqueue(&mut m, "q", "p", "b");
    assert!(waiter.join().unwrap().0.is_some());
    wait_replicated(&mut m);
    assert_eq!(dump_all(&mut m), dump_all(&mut r));
}

#[test]
fn a_plain_zadd_by_another_client_wakes_a_waiter() {
    let server = Server::start();
    let waiter = spawn_waiter::<Option<TextLease>>(&server, 5_000);
    let mut con = server.connect();
    wait_blocked(&mut con, 1);
    // What the old Lua enqueue writes, without any module command.
    let _: () = redis::pipe()
        .atomic()
        .cmd("HSET")
        .arg("vtrr:q:task")
        .arg("x")
        .arg("X")
        .ignore()
        .cmd("HSET")
        .arg("vtrr:q:meta")
        .arg("x")
        .arg("1:p")
        .ignore()
        .cmd("ZADD")
        .arg("vtrr:q:queue")
        .arg(1)
        .arg("x")
        .ignore()
        .query(&mut con)
        .unwrap();
    let (id, payload, _, _) = waiter.join().unwrap().0.expect("woken by ZADD");
    assert_eq!((id.as_str(), payload.as_str()), ("x", "X"));
}
