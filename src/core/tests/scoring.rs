//! Scoring: turns, weights, what enqueue writes.

use super::*;
use crate::core::*;
use crate::engine::memory::MemoryStore;
use crate::store::{HashKey, Store, ZsetKey};

#[test]
fn partitions_are_served_in_turn_however_much_each_queued() {
    let mut store = MemoryStore::new();
    let a: Vec<_> = (1..=4).map(|i| format!("a{i}")).collect();
    let a_items: Vec<_> = a.iter().map(|id| item("A", id, 1)).collect();
    enqueue(&mut store, 0, &a_items).unwrap();
    enqueue(&mut store, 0, &[item("B", "b1", 1), item("B", "b2", 1)]).unwrap();
    assert_eq!(
        lease_ids(&mut store, 0, 10),
        ["a1", "b1", "a2", "b2", "a3", "a4"]
    );
}

#[test]
fn a_weight_n_item_costs_its_partition_n_turns() {
    let mut store = MemoryStore::new();
    enqueue(
        &mut store,
        0,
        &[item("heavy", "h1", 3), item("heavy", "h2", 3)],
    )
    .unwrap();
    let light: Vec<_> = (1..=5).map(|i| format!("l{i}")).collect();
    let light_items: Vec<_> = light.iter().map(|id| item("light", id, 1)).collect();
    enqueue(&mut store, 0, &light_items).unwrap();
    // h1 at 1, h2 at 4; light at 1..=5.
    assert_eq!(
        lease_ids(&mut store, 0, 10),
        ["h1", "l1", "l2", "l3", "h2", "l4", "l5"]
    );
}

#[test]
fn enqueue_writes_the_documented_keys() {
    let mut store = MemoryStore::new();
    store.set_raw_current_virtual_time(b"10");
    let outcome = enqueue(&mut store, 0, &[item("p:x", "i1", 2), item("p:x", "i2", 1)]).unwrap();
    assert_eq!(outcome.added, 2);
    assert_eq!(
        store.zset_entries(ZsetKey::Queue),
        [(b"i1".to_vec(), 11.0), (b"i2".to_vec(), 13.0)]
    );
    assert_eq!(
        store.hget(HashKey::PartitionVirtualTime, b"p:x").unwrap(),
        b"14"
    );
    assert_eq!(store.hget(HashKey::Meta, b"i1").unwrap(), b"2:p:x");
    assert_eq!(store.hget(HashKey::Task, b"i2").unwrap(), b"i2");
}

#[test]
fn enqueue_skips_ids_already_queued_or_leased() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "x", 1), item("A", "y", 1)]).unwrap();
    lease_at(&mut store, 0, 100, 1, 0).unwrap(); // x leased
    let before = store.clone();
    let outcome = enqueue(
        &mut store,
        0,
        &[item("B", "x", 5), item("B", "y", 5), item("B", "y", 1)],
    )
    .unwrap();
    assert_eq!(outcome.added, 0);
    assert_eq!(format!("{before:?}"), format!("{store:?}"));
}

#[test]
fn a_non_numeric_current_virtual_time_refuses_and_changes_nothing() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "a", 1)]).unwrap();
    store.set_raw_current_virtual_time(b"garbage");
    let before = format!("{store:?}");
    assert_eq!(
        enqueue(&mut store, 0, &[item("A", "b", 1)]),
        Err(CoreError::CurrentVirtualTimeNotInteger)
    );
    assert_eq!(
        lease_at(&mut store, 0, 1, 1, 1),
        Err(CoreError::CurrentVirtualTimeNotInteger)
    );
    assert_eq!(
        reclaim(&mut store, 0, 1),
        Err(CoreError::CurrentVirtualTimeNotInteger)
    );
    assert_eq!(before, format!("{store:?}"));
}

/// The start rule exactly: a partition under control follows its last item
/// only while it has items queued. Capped at 1 with its one lease out and
/// nothing queued, it re-enters just after the current virtual time, not
/// at its old next time (that would put it one item ahead: x x b instead
/// of b x).
#[test]
fn a_controlled_partition_with_nothing_queued_re_enters_after_the_current_time() {
    let mut store = MemoryStore::new();
    apply_limit(&mut store, "X", LimitChange::Concurrency(Some(1)));
    enqueue(&mut store, 0, &[item("X", "x1", 1)]).unwrap();
    let b: Vec<_> = (1..=3)
        .map(|i| item("B", ["b1", "b2", "b3"][i - 1], 1))
        .collect();
    enqueue(&mut store, 0, &b).unwrap();
    assert_eq!(lease_ids(&mut store, 0, 3), ["b1", "x1", "b2"]);
    // X has its lease out and nothing queued; the current time is 2. x2
    // waits in `held` (X is at its cap) at virtual time 3.
    enqueue(&mut store, 0, &[item("X", "x2", 1)]).unwrap();
    assert_eq!(store.hget(HashKey::HeldAt, b"x2"), Some(b"3".to_vec()));
    let token = store.hget(HashKey::Lease, b"x1").unwrap();
    assert_eq!(
        ack(&mut store, &[Ack::pair(b"x1", &token)], &mut Vec::new()),
        1
    );
    // b3 and x2 tie at 3; member order serves b3 first.
    assert_eq!(lease_ids(&mut store, 0, 2), ["b3", "x2"]);
}
