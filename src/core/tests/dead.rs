//! The dead-letter set: policy, reading, reviving, cancelling.

use super::*;
use crate::core::*;
use crate::engine::memory::MemoryStore;
use crate::store::{HashKey, Store, ZsetKey};

#[test]
fn max_timeouts_dead_letters_on_the_expiry_past_the_limit() {
    let mut store = MemoryStore::new();
    apply_policy(&mut store, &[PolicyChange::MaxTimeouts(Some(1))]);
    enqueue(&mut store, 0, &[item("A", "a", 1)]).unwrap();
    lease_at(&mut store, 0, 10, 1, 0).unwrap();
    let first = reclaim(&mut store, 10, 10).unwrap();
    assert_eq!((first.reclaimed, first.dead_lettered), (1, 0));
    lease_at(&mut store, 20, 10, 1, 0).unwrap();
    let second = reclaim(&mut store, 30, 10).unwrap();
    assert_eq!((second.reclaimed, second.dead_lettered), (1, 1));
    let dead = dead_items(&mut store, 10);
    assert_eq!(
        dead,
        [DeadItem {
            id: b"a".to_vec(),
            payload: b"a".to_vec(),
            partition: Some(b"A".to_vec()),
            weight: Some(1),
            timeouts: 2,
            nacks: 0,
            died_at_ms: 30,
            reason: b"max-timeouts".to_vec(),
            last_error: None,
        }]
    );
    assert_eq!(store.zcard(ZsetKey::Queue), 0);
    assert!(check::check(&mut store).unwrap().is_empty());
}

#[test]
fn policy_reads_back_and_none_clears() {
    let mut store = MemoryStore::new();
    assert_eq!(read_policy(&mut store, &mut Vec::new()), Policy::default());
    apply_policy(
        &mut store,
        &[
            PolicyChange::MaxTimeouts(Some(3)),
            PolicyChange::MaxNacks(Some(0)),
        ],
    );
    let policy = read_policy(&mut store, &mut Vec::new());
    assert_eq!((policy.max_timeouts, policy.max_nacks), (Some(3), Some(0)));
    apply_policy(&mut store, &[PolicyChange::MaxTimeouts(None)]);
    let policy = read_policy(&mut store, &mut Vec::new());
    assert_eq!((policy.max_timeouts, policy.max_nacks), (None, Some(0)));
    // A value another client wrote badly reads as NONE, reported.
    store.hset(HashKey::Policy, b"max-nacks", b"many");
    let mut anomalies = Vec::new();
    assert_eq!(read_policy(&mut store, &mut anomalies).max_nacks, None);
    assert_eq!(
        anomalies,
        [Anomaly::PolicyUnreadable { field: "max-nacks" }]
    );
}

#[test]
fn dead_items_list_oldest_first_up_to_count() {
    let mut store = MemoryStore::new();
    for (id, at) in [("c", 30.0), ("a", 10.0), ("b", 20.0)] {
        store.zadd(ZsetKey::Dead, id.as_bytes(), at);
        store.hset(HashKey::DeadTask, id.as_bytes(), b"p");
        store.hset(HashKey::DeadReason, id.as_bytes(), b"nack");
    }
    let ids: Vec<_> = dead_items(&mut store, 2)
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(ids, [b"a".to_vec(), b"b".to_vec()]);
}

#[test]
fn revive_requeues_fresh_with_counters_reset() {
    let mut store = MemoryStore::new();
    apply_policy(&mut store, &[PolicyChange::MaxTimeouts(Some(0))]);
    enqueue(&mut store, 0, &[item("A", "a", 1), item("B", "b", 1)]).unwrap();
    lease_at(&mut store, 0, 10, 1, 0).unwrap(); // a
    reclaim(&mut store, 10, 10).unwrap(); // a dies
    assert_eq!(store.zcard(ZsetKey::Dead), 1);
    let revived = revive(&mut store, &[b"a", b"b", b"missing"]).unwrap();
    assert_eq!(revived.count, 1);
    assert_eq!(store.zcard(ZsetKey::Dead), 0);
    assert_eq!(store.hlen(HashKey::DeadTask), 0);
    assert_eq!(store.hget(HashKey::Timeouts, b"a"), None);
    // Current virtual time is 1 (a was popped), so a starts at 2 beside b.
    assert_eq!(store.zscore(ZsetKey::Queue, b"a"), Some(2.0));
    assert_eq!(store.hget(HashKey::Task, b"a").unwrap(), b"a");
    assert!(check::check(&mut store).unwrap().is_empty());
}

#[test]
fn cancel_deletes_an_item_in_any_state() {
    let mut store = MemoryStore::new();
    enqueue(
        &mut store,
        0,
        &[item("A", "queued", 1), item("A", "leased", 1)],
    )
    .unwrap();
    let token = lease_at(&mut store, 0, 100, 1, 0).unwrap().leased[0]
        .token
        .clone(); // "leased" (tie at 1, member order)
    defer(&mut store, 0, 50, &[item("A", "delayed", 1)]).unwrap();
    store.zadd(ZsetKey::Dead, b"dead", 1.0);
    store.hset(HashKey::DeadTask, b"dead", b"p");
    store.hset(HashKey::DeadReason, b"dead", b"nack");
    store.hset(HashKey::Meta, b"dead", b"1:A");
    let ids: [&[u8]; 5] = [b"queued", b"leased", b"delayed", b"dead", b"missing"];
    assert_eq!(cancel(&mut store, &ids, &mut Vec::new()), 4);
    for key in [
        ZsetKey::Queue,
        ZsetKey::Inflight,
        ZsetKey::Delayed,
        ZsetKey::Dead,
    ] {
        assert_eq!(store.zcard(key), 0, "{key:?}");
    }
    for key in [
        HashKey::Task,
        HashKey::InflightTask,
        HashKey::Lease,
        HashKey::DelayedTask,
        HashKey::DeadTask,
        HashKey::DeadReason,
        HashKey::Meta,
    ] {
        assert_eq!(store.hlen(key), 0, "{key:?}");
    }
    // The cancelled lease can be neither renewed nor acked.
    assert!(!renew(
        &mut store,
        &Ack::pair(b"leased", &token),
        10,
        100,
        &mut Vec::new()
    ));
    assert_eq!(
        ack(&mut store, &[Ack::pair(b"leased", &token)], &mut Vec::new()),
        0
    );
    // And nothing brings it back.
    assert!(run_due(&mut store, 1_000, 100, STEPS_FOR_ANY_FIRING).unwrap() == Due::default());
}

#[test]
fn a_popped_item_without_payload_is_dead_lettered_not_served_empty() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "a", 1), item("B", "b", 1)]).unwrap();
    store.hdel(HashKey::Task, b"a");
    let outcome = lease_at(&mut store, 0, 100, 1, 0).unwrap();
    assert_eq!(outcome.leased[0].id, b"b");
    assert_eq!(outcome.due.dead_lettered, 1);
    assert_eq!(
        store.hget(HashKey::DeadReason, b"a").unwrap(),
        b"payload missing"
    );
    assert!(check::check(&mut store).unwrap().is_empty());
}

#[test]
fn cancelled_items_cost_comes_back_once_their_partition_has_nothing_queued() {
    let mut store = MemoryStore::new();
    enqueue(
        &mut store,
        0,
        &[item("A", "a1", 2), item("A", "a2", 3), item("A", "a3", 1)],
    )
    .unwrap(); // a1 at 1, a2 at 3, a3 at 6; A's next is 7
    let next = |store: &mut MemoryStore| store.hget(HashKey::PartitionVirtualTime, b"A").unwrap();
    // a1 is still queued: the cost stays charged (a gap in A's turns).
    assert_eq!(cancel(&mut store, &[b"a2", b"a3"], &mut Vec::new()), 2);
    assert_eq!(next(&mut store), b"7");
    enqueue(&mut store, 0, &[item("A", "b1", 1)]).unwrap();
    assert_eq!(store.zscore(ZsetKey::Queue, b"b1"), Some(7.0));
    // Nothing of A queued: all of it comes back, as if never enqueued.
    assert_eq!(cancel(&mut store, &[b"a1", b"b1"], &mut Vec::new()), 2);
    assert_eq!(next(&mut store), b"1"); // a1's start
    enqueue(&mut store, 0, &[item("A", "c1", 1)]).unwrap();
    assert_eq!(store.zscore(ZsetKey::Queue, b"c1"), Some(1.0));
    assert!(check::check(&mut store).unwrap().is_empty());
}

#[test]
fn an_item_that_died_without_payload_is_not_revived() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "a", 1), item("B", "b", 1)]).unwrap();
    store.hdel(HashKey::Task, b"a");
    lease_at(&mut store, 0, 100, 1, 0).unwrap(); // a dies, b is leased
    assert_eq!(revive(&mut store, &[b"a"]).unwrap().count, 0);
    assert_eq!(store.zset_entries(ZsetKey::Dead).len(), 1);
    assert_eq!(store.zcard(ZsetKey::Queue), 0);
    assert_eq!(cancel(&mut store, &[b"a"], &mut Vec::new()), 1);
    assert!(check::check(&mut store).unwrap().is_empty());
}
