//! Reclaiming expired leases.

use super::*;
use crate::core::*;
use crate::engine::memory::MemoryStore;
use crate::store::{HashKey, Store, ZsetKey};

#[test]
fn reclaim_requeues_expired_leases_rescored_and_counts_timeouts() {
    let mut store = MemoryStore::new();
    enqueue(
        &mut store,
        0,
        &[item("A", "a1", 2), item("A", "a2", 1), item("B", "b1", 1)],
    )
    .unwrap();
    lease_at(&mut store, 0, 100, 1, 1000).unwrap(); // a1, expiry 100
    assert_eq!(reclaim(&mut store, 99, usize::MAX).unwrap().reclaimed, 0);
    assert_eq!(reclaim(&mut store, 100, usize::MAX).unwrap().reclaimed, 1);
    assert_eq!(store.hget(HashKey::Timeouts, b"a1").unwrap(), b"1");
    assert_eq!(store.hget(HashKey::Lease, b"a1"), None);
    assert_eq!(store.hget(HashKey::InflightTask, b"a1"), None);
    // Rescored as if fresh: after a2 (pvt of A was 4 after a2 at 3).
    assert_eq!(store.zscore(ZsetKey::Queue, b"a1"), Some(4.0));
    assert_eq!(
        store.hget(HashKey::PartitionVirtualTime, b"A").unwrap(),
        b"6"
    );
    let leased = lease_at(&mut store, 200, 100, 3, 1000).unwrap().leased;
    let order: Vec<_> = leased.iter().map(|l| (l.id.clone(), l.timeouts)).collect();
    assert_eq!(
        order,
        [
            (b"b1".to_vec(), 0),
            (b"a2".to_vec(), 0),
            (b"a1".to_vec(), 1)
        ]
    );
}

#[test]
fn reclaim_takes_the_oldest_expiry_first_and_honours_the_limit() {
    let mut store = MemoryStore::new();
    enqueue(
        &mut store,
        0,
        &[item("A", "a", 1), item("B", "b", 1), item("C", "c", 1)],
    )
    .unwrap();
    lease_at(&mut store, 0, 30, 1, 0).unwrap(); // a expires 30
    lease_at(&mut store, 0, 10, 1, 0).unwrap(); // b expires 10
    lease_at(&mut store, 0, 20, 1, 0).unwrap(); // c expires 20
    assert_eq!(reclaim(&mut store, 100, 2).unwrap().reclaimed, 2);
    assert_eq!(
        store.zset_entries(ZsetKey::Inflight),
        [(b"a".to_vec(), 30.0)]
    );
}

#[test]
fn lease_reclaims_first_within_its_limit() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "a", 1), item("B", "b", 1)]).unwrap();
    lease_at(&mut store, 0, 10, 2, 0).unwrap();
    let outcome = lease_at(&mut store, 50, 10, 1, 1).unwrap();
    assert_eq!(outcome.due.reclaimed, 1);
    assert_eq!(outcome.leased[0].id, b"a");
    assert_eq!(outcome.leased[0].timeouts, 1);
    assert_eq!(store.zcard(ZsetKey::Inflight), 2);
}

#[test]
fn reclaim_without_meta_still_requeues_the_item() {
    let mut store = MemoryStore::new();
    store.zadd(ZsetKey::Inflight, b"lost", 5.0);
    store.hset(HashKey::InflightTask, b"lost", b"payload");
    store.hset(HashKey::Lease, b"lost", b"t");
    let outcome = reclaim(&mut store, 10, usize::MAX).unwrap();
    assert_eq!(outcome.reclaimed, 1);
    assert_eq!(
        outcome.anomalies,
        [Anomaly::MetaUnreadable {
            id: b"lost".to_vec()
        }]
    );
    assert_eq!(store.hget(HashKey::Meta, b"lost").unwrap(), b"1:");
    assert_eq!(store.hget(HashKey::Task, b"lost").unwrap(), b"payload");
    assert_eq!(store.zscore(ZsetKey::Queue, b"lost"), Some(1.0));
}
