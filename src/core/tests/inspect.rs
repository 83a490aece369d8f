//! STATS, JOB and CHECK.

use super::*;
use crate::core::partitions::Totals;
use crate::core::*;
use crate::engine::memory::MemoryStore;
use crate::store::{HashKey, Store, ZsetKey};

#[test]
fn stats_counts_queue_state() {
    let mut store = MemoryStore::new();
    enqueue(
        &mut store,
        0,
        &[item("A", "a", 1), item("B", "b", 1), item("B", "c", 1)],
    )
    .unwrap();
    lease_at(&mut store, 0, 10, 1, 0).unwrap();
    lease_at(&mut store, 0, 20, 1, 0).unwrap();
    let stats = stats(&mut store, 15, &mut Vec::new()).unwrap();
    assert_eq!(
        stats,
        Stats {
            queued: 1,
            inflight: 2,
            expired: 1,
            partitions: 2,
            // B's c; A has nothing queued.
            queued_partitions: 1,
            current_virtual_time: 1,
            next_expiry_ms: Some(10),
            delayed: 0,
            dead: 0,
            next_due_ms: None,
            held: 0,
            paused_partitions: 0,
            capped_partitions: 0,
            oldest_waiting_ms: Some(15),
            totals: Totals {
                enqueued: 3,
                leased: 2,
                ..Totals::default()
            },
            tokens: None,
        }
    );
}

/// Each place an item can be, found by id through only the keys JOB
/// declares (the scoped store refuses any other).
#[test]
fn job_finds_each_item_where_it_is() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "leased", 2)]).unwrap();
    lease_at(&mut store, 0, 50, 1, 0).unwrap();
    enqueue(&mut store, 0, &[item("B", "queued", 1)]).unwrap();
    defer(&mut store, 0, 70, &[item("C", "delayed", 1)]).unwrap();
    let ids: [&[u8]; 4] = [b"leased", b"queued", b"delayed", b"gone"];
    let statuses = job_status(&mut store.scoped(CoreOp::Job), &ids, &mut Vec::new());
    let states: Vec<JobState> = statuses.iter().map(|s| s.state.clone()).collect();
    assert_eq!(
        states,
        [
            JobState::Leased { expires_ms: 50 },
            JobState::Queued,
            JobState::Delayed { due_ms: 70 },
            JobState::Unknown,
        ]
    );
    assert_eq!(
        (statuses[0].partition.as_deref(), statuses[0].weight),
        (Some(&b"A"[..]), Some(2))
    );
    assert_eq!(
        (statuses[3].partition.as_ref(), statuses[3].weight),
        (None, None)
    );
}

#[test]
fn check_finds_broken_invariants() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "a", 1)]).unwrap();
    assert!(check::check(&mut store).unwrap().is_empty());
    store.zadd(ZsetKey::Inflight, b"a", 1.0);
    store.hset(HashKey::Lease, b"ghost", b"t");
    let problems = check::check(&mut store).unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("a is both queued and in flight")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("lease holds ghost")),
        "{problems:?}"
    );
}
