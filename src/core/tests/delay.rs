//! Delayed items: held until due, then scored as if enqueued then.

use super::*;
use crate::core::*;
use crate::engine::memory::MemoryStore;
use crate::store::{HashKey, Store, ZsetKey};

#[test]
fn a_delayed_item_waits_outside_the_queue_until_due() {
    let mut store = MemoryStore::new();
    let added = defer(&mut store, 1_000, 1_500, &[item("A", "d", 2)]).unwrap();
    assert_eq!(added.added, 1);
    assert_eq!(
        store.zset_entries(ZsetKey::Delayed),
        [(b"d".to_vec(), 1_500.0)]
    );
    assert_eq!(store.hget(HashKey::DelayedTask, b"d").unwrap(), b"d");
    assert_eq!(store.hget(HashKey::Meta, b"d").unwrap(), b"2:A");
    assert_eq!(store.zcard(ZsetKey::Queue), 0);
    // Never served early.
    assert!(lease_at(&mut store, 1_499, 100, 1, 1000)
        .unwrap()
        .leased
        .is_empty());
    let outcome = lease_at(&mut store, 1_500, 100, 1, 1000).unwrap();
    assert_eq!(outcome.due.promoted, 1);
    assert_eq!(outcome.leased[0].id, b"d");
    assert_eq!(outcome.leased[0].payload, b"d");
    assert_eq!(store.zcard(ZsetKey::Delayed), 0);
    assert_eq!(store.hlen(HashKey::DelayedTask), 0);
}

#[test]
fn a_promoted_item_gets_no_credit_for_the_time_it_waited() {
    let mut store = MemoryStore::new();
    // B's item is deferred while A's three are queued at 1, 2, 3.
    defer(&mut store, 0, 50, &[item("B", "b", 1)]).unwrap();
    enqueue(
        &mut store,
        0,
        &[item("A", "a1", 1), item("A", "a2", 1), item("A", "a3", 1)],
    )
    .unwrap();
    assert_eq!(lease_ids(&mut store, 10, 2), ["a1", "a2"]);
    // Promoted at 50 with current virtual time 2: it starts at 3, as if
    // enqueued then, tied with a3 (members break the tie), not at 1.
    run_due(&mut store, 50, 100, STEPS_FOR_ANY_FIRING).unwrap();
    assert_eq!(store.zscore(ZsetKey::Queue, b"b"), Some(3.0));
}

#[test]
fn defer_zero_is_enqueue() {
    let mut deferred = MemoryStore::new();
    let mut enqueued = MemoryStore::new();
    defer(&mut deferred, 7, 7, &[item("A", "a", 3)]).unwrap();
    enqueue(&mut enqueued, 0, &[item("A", "a", 3)]).unwrap();
    assert_eq!(
        deferred.zset_entries(ZsetKey::Queue),
        enqueued.zset_entries(ZsetKey::Queue)
    );
    assert_eq!(deferred.zcard(ZsetKey::Delayed), 0);
}

#[test]
fn an_id_anywhere_in_the_queues_life_is_skipped() {
    let mut store = MemoryStore::new();
    enqueue(
        &mut store,
        0,
        &[item("A", "queued", 1), item("A", "leased", 1)],
    )
    .unwrap();
    store.zrem(ZsetKey::Queue, b"leased");
    store.zadd(ZsetKey::Inflight, b"leased", 100.0);
    defer(&mut store, 0, 10, &[item("A", "delayed", 1)]).unwrap();
    store.zadd(ZsetKey::Dead, b"dead", 1.0);
    for id in ["queued", "leased", "delayed", "dead"] {
        let fresh = [item("Z", id, 9)];
        assert_eq!(defer(&mut store, 0, 10, &fresh).unwrap().added, 0, "{id}");
        assert_eq!(enqueue(&mut store, 0, &fresh).unwrap().added, 0, "{id}");
    }
    assert_eq!(store.zset_entries(ZsetKey::Delayed).len(), 1);
}

#[test]
fn promotion_is_bounded_and_oldest_due_first() {
    let mut store = MemoryStore::new();
    defer(&mut store, 0, 30, &[item("A", "late", 1)]).unwrap();
    defer(&mut store, 0, 10, &[item("A", "early", 1)]).unwrap();
    defer(&mut store, 0, 20, &[item("A", "middle", 1)]).unwrap();
    let outcome = run_due(&mut store, 100, 2, STEPS_FOR_ANY_FIRING).unwrap();
    assert_eq!(outcome.promoted, 2);
    assert_eq!(
        store.zset_entries(ZsetKey::Delayed),
        [(b"late".to_vec(), 30.0)]
    );
}

#[test]
fn expired_leases_come_before_due_items_within_one_limit() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "a", 1)]).unwrap();
    lease_at(&mut store, 0, 10, 1, 0).unwrap();
    defer(&mut store, 0, 10, &[item("B", "b", 1)]).unwrap();
    let outcome = run_due(&mut store, 20, 1, STEPS_FOR_ANY_FIRING).unwrap();
    assert_eq!((outcome.reclaimed, outcome.promoted), (1, 0));
    let outcome = run_due(&mut store, 20, 1, STEPS_FOR_ANY_FIRING).unwrap();
    assert_eq!((outcome.reclaimed, outcome.promoted), (0, 1));
}

#[test]
fn the_drain_leaves_delayed_items_alone() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "a", 1)]).unwrap();
    defer(&mut store, 0, 1_000, &[item("B", "b", 1)]).unwrap();
    assert_eq!(lease_ids(&mut store, 0, 1), ["a"]);
    assert_eq!(store.current_virtual_time().unwrap(), b"0");
    assert_eq!(store.hget(HashKey::DelayedTask, b"b").unwrap(), b"b");
    assert_eq!(store.hget(HashKey::Meta, b"b").unwrap(), b"1:B");
}

#[test]
fn a_due_item_without_payload_is_dead_lettered() {
    let mut store = MemoryStore::new();
    defer(&mut store, 0, 10, &[item("A", "d", 1)]).unwrap();
    store.hdel(HashKey::DelayedTask, b"d");
    let outcome = run_due(&mut store, 10, 10, STEPS_FOR_ANY_FIRING).unwrap();
    assert_eq!((outcome.promoted, outcome.dead_lettered), (0, 1));
    assert_eq!(
        store.hget(HashKey::DeadReason, b"d").unwrap(),
        b"payload missing"
    );
    assert_eq!(store.zcard(ZsetKey::Queue), 0);
}
