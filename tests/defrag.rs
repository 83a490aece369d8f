//! Active defrag of native queues on a real server: a queue made
//! fragmented (most of its items cancelled or acked) is defragged — a large
//! one in steps resumed by cursor, a small one in one call, the queues' own
//! values moved where most queues were deleted — and reads exactly as
//! before, its leases still ack and it drains in order.
//!
//! Needs a server built with a jemalloc that can defrag (Redis 7.4 and 8.2
//! from `make test-matrix`); one that refuses `activedefrag yes` (Debian's
//! redis-server, built on the system jemalloc; the Valkey wheels, built on
//! libc malloc) skips the test with a line saying so.

mod common;

use std::time::Duration;

use common::*;
use redis::Connection;

/// A server creating native queues with active defrag off, or None (and a
/// line saying why) when its allocator cannot defrag at all.
fn server_that_can_defrag() -> Option<Server> {
    let server = Server::builder()
        .module_args(&["default-layout", "native", "reclaim-interval-ms", "0"])
        .spawn();
    let mut con = server.connect();
    match command(&["CONFIG", "SET", "activedefrag", "yes"]).query::<()>(&mut con) {
        Ok(()) => {}
        Err(e)
            if e.to_string()
                .contains("Active defragmentation cannot be enabled") =>
        {
            eprintln!(
                "skipped: {} cannot defrag (CONFIG SET activedefrag yes: {e}); \
                 run with VTRR_REDIS_SERVER=.servers/bin/redis-7.4 or redis-8.2",
                server_binary()
            );
            return None;
        }
        Err(e) => panic!("CONFIG SET activedefrag yes: {e}"),
    }
    config_set(&mut con, "activedefrag", "no");
    Some(server)
}

fn config_set(con: &mut Connection, name: &str, value: &str) {
    let _: () = command(&["CONFIG", "SET", name, value])
        .query(con)
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

/// Active defrag on, starting at the least fragmentation and working in
/// short slices (1% of the CPU), so a large queue takes several steps.
fn defrag_eagerly(con: &mut Connection) {
    for (name, value) in [
        ("active-defrag-ignore-bytes", "1048576"),
        ("active-defrag-threshold-lower", "1"),
        ("active-defrag-cycle-min", "1"),
        ("active-defrag-cycle-max", "1"),
        // A queue with more entries is defragged late, in steps.
        ("active-defrag-max-scan-fields", "1000"),
        ("activedefrag", "yes"),
    ] {
        config_set(con, name, value);
    }
}

/// `queue` with `n` items of payloads from 64 to 320 bytes (several
/// allocation size classes) over 50 partitions; their ids.
fn fill(con: &mut Connection, queue: &str, n: usize) -> Vec<String> {
    let ids: Vec<String> = (0..n).map(|i| format!("{queue}-{i:06}")).collect();
    let payloads: Vec<Vec<u8>> = (0..n)
        .map(|i| vec![b'a' + (i % 26) as u8; 64 + (i * 37) % 257])
        .collect();
    let partitions: Vec<String> = (0..50).map(|p| format!("p{p}")).collect();
    for start in (0..n).step_by(1000) {
        let end = (start + 1000).min(n);
        let items: Vec<(&str, &str, u64, &[u8])> = (start..end)
            .map(|i| {
                (
                    partitions[i % 50].as_str(),
                    ids[i].as_str(),
                    1 + (i % 3) as u64,
                    &payloads[i][..],
                )
            })
            .collect();
        assert_eq!(enqueue_items(con, queue, &items), (end - start) as i64);
    }
    ids
}

/// Acks every lease of `leases` in one round trip.
fn ack_all(con: &mut Connection, queue: &str, leases: &[Lease]) {
    let mut acks = redis::pipe();
    for (id, _, token, _) in leases {
        acks.cmd("VTRR.ACK").arg(queue).arg(id).arg(token);
    }
    let acked: Vec<i64> = acks.query(con).unwrap();
    assert!(acked.iter().all(|&a| a == 1), "every lease acks");
}

/// The module's defrag counters: (runs, steps, moved, values moved).
fn defrag_counters(con: &mut Connection) -> (i64, i64, i64, i64) {
    let info = vtrr_info(con);
    (
        info["vtrr_native_defrag_runs"],
        info["vtrr_native_defrag_steps"],
        info["vtrr_native_defrag_moved"],
        info["vtrr_native_defrag_values_moved"],
    )
}

/// `n` small queues `tiny<i>` of two items each, three in four of them
/// deleted again (their values' slots left empty): the survivors' names.
fn sparse_small_queues(con: &mut Connection, n: usize) -> Vec<String> {
    let mut writes = redis::pipe();
    for i in 0..n {
        writes
            .cmd("VTRR.ENQUEUE")
            .arg(format!("tiny{i}"))
            .arg("p")
            .arg("a")
            .arg(1)
            .arg(format!("payload {i}"))
            .arg("q")
            .arg("b")
            .arg(2)
            .arg("B");
    }
    let _: Vec<i64> = writes.query(con).unwrap();
    let mut deletes = redis::pipe();
    let mut kept = Vec::new();
    for i in 0..n {
        if i % 4 == 1 {
            kept.push(format!("tiny{i}"));
        } else {
            deletes.cmd("DEL").arg(format!("vtrr:tiny{i}:queue"));
        }
    }
    let _: Vec<i64> = deletes.query(con).unwrap();
    kept
}

#[test]
fn active_defrag_moves_a_fragmented_native_queue_and_changes_nothing() {
    let Some(server) = server_that_can_defrag() else {
        return;
    };
    let mut con = server.connect();
    assert_eq!(defrag_counters(&mut con), (0, 0, 0, 0));

    // Fragmented: of 60,000 items, 2,000 leased (1,900 of them acked) and
    // three in four of the rest cancelled, scattered over every slab.
    let ids = fill(&mut con, "big", 60_000);
    let mut leased = Vec::new();
    for _ in 0..4 {
        leased.extend(lease_count(&mut con, "big", 600_000, 500));
    }
    let (acked, kept) = leased.split_at(1900);
    ack_all(&mut con, "big", acked);
    let leased_ids: std::collections::HashSet<&[u8]> =
        leased.iter().map(|(id, ..)| id.as_slice()).collect();
    let doomed: Vec<&str> = ids
        .iter()
        .enumerate()
        .filter(|(i, id)| i % 4 != 0 && !leased_ids.contains(id.as_bytes()))
        .map(|(_, id)| id.as_str())
        .collect();
    for chunk in doomed.chunks(1000) {
        assert_eq!(cancel(&mut con, "big", chunk), chunk.len() as i64);
    }
    // A small queue, walked in one call; and many smaller ones, most of
    // them deleted, so their values are worth moving.
    fill(&mut con, "small", 100);
    let small_lease = lease(&mut con, "small", 600_000).unwrap();
    let tiny = sparse_small_queues(&mut con, 4000);
    let before = contents_all(&mut con);
    let observed_before = [observed(&mut con, "big"), observed(&mut con, "small")];
    let queued = stat(&mut con, "big", "queued");

    defrag_eagerly(&mut con);
    // Moved allocations and values, a walk resumed by cursor (more steps
    // than finished walks), and every queue walked to the end at least
    // once.
    let queues = 2 + tiny.len() as i64;
    wait_until(Duration::from_secs(60), "native queues defragged", || {
        let (runs, steps, moved, values) = defrag_counters(&mut con);
        moved > 0 && values > 0 && steps > runs && runs >= queues
    });
    let (runs, steps, moved, values) = defrag_counters(&mut con);
    eprintln!(
        "defrag: {runs} walks in {steps} steps moved {moved} allocations, {values} of them queue values"
    );

    assert_eq!(contents_all(&mut con), before, "DUMPs after defrag");
    // New queues take the places defrag freed, and the small ones are
    // deleted: a key left pointing at its value's old place would share it
    // with a new queue, and its value would be freed twice (the server
    // dies).
    let _: Vec<i64> = (0..1000)
        .fold(&mut redis::pipe(), |pipe, i| {
            pipe.cmd("VTRR.ENQUEUE")
                .arg(format!("new{i}"))
                .arg("p")
                .arg("x")
                .arg(1)
                .arg("X")
        })
        .query(&mut con)
        .unwrap();
    let _: Vec<i64> = tiny
        .iter()
        .fold(&mut redis::pipe(), |pipe, name| {
            pipe.cmd("DEL").arg(format!("vtrr:{name}:queue"))
        })
        .query(&mut con)
        .unwrap();
    let mut before = before;
    before.retain(|(key, _)| !key.starts_with(b"vtrr:tiny"));
    let mut after = contents_all(&mut con);
    after.retain(|(key, _)| !key.starts_with(b"vtrr:new"));
    assert_eq!(after, before, "DUMPs after new queues came and old went");
    let observed_after = [observed(&mut con, "big"), observed(&mut con, "small")];
    assert_eq!(observed_after, observed_before);
    assert_invariants(&mut con, "big");
    assert_invariants(&mut con, "small");
    ack_all(&mut con, "big", kept);
    ack_all(&mut con, "small", &[small_lease]);

    // Drained in order while defrag goes on (the queue changing between
    // its steps): every queued item leases once, and the queue empties.
    let mut drained = 0;
    loop {
        let batch = lease_count(&mut con, "big", 600_000, 1000);
        if batch.is_empty() {
            break;
        }
        drained += batch.len() as i64;
        ack_all(&mut con, "big", &batch);
    }
    assert_eq!(drained, queued);
    assert_eq!(stat(&mut con, "big", "queued"), 0);
    assert_invariants(&mut con, "big");
    assert_invariants(&mut con, "small");
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}
