//! Leases, acks and renewals.

use super::*;
use crate::core::*;
use crate::engine::memory::MemoryStore;
use crate::store::{HashKey, Store, ZsetKey};

#[test]
fn lease_moves_the_item_and_grants_a_token() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "a1", 1), item("A", "a2", 1)]).unwrap();
    let outcome = lease_at(&mut store, 5_000, 300, 1, 1000).unwrap();
    let leased = &outcome.leased[0];
    assert_eq!(
        (leased.id.as_slice(), leased.payload.as_slice()),
        (&b"a1"[..], &b"a1"[..])
    );
    assert_eq!(leased.token, b"token-1");
    assert_eq!(leased.timeouts, 0);
    assert_eq!(
        store.zset_entries(ZsetKey::Inflight),
        [(b"a1".to_vec(), 5_300.0)]
    );
    assert_eq!(store.hget(HashKey::InflightTask, b"a1").unwrap(), b"a1");
    assert_eq!(store.hget(HashKey::Task, b"a1"), None);
    assert_eq!(store.hget(HashKey::Lease, b"a1").unwrap(), b"token-1");
    assert_eq!(store.current_virtual_time().unwrap(), b"1");
}

#[test]
fn lease_count_gives_every_item_the_same_expiry() {
    let mut store = MemoryStore::new();
    enqueue(
        &mut store,
        0,
        &[item("A", "a1", 1), item("B", "b1", 1), item("C", "c1", 1)],
    )
    .unwrap();
    let outcome = lease_at(&mut store, 7, 10, 2, 1000).unwrap();
    assert_eq!(outcome.leased.len(), 2);
    assert!(store
        .zset_entries(ZsetKey::Inflight)
        .iter()
        .all(|(_, s)| *s == 17.0));
    assert_ne!(outcome.leased[0].token, outcome.leased[1].token);
}

#[test]
fn draining_resets_virtual_time_but_keeps_lease_state() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "a1", 1)]).unwrap();
    lease_at(&mut store, 0, 100, 5, 1000).unwrap();
    assert_eq!(store.current_virtual_time().unwrap(), b"0");
    assert_eq!(store.hlen(HashKey::PartitionVirtualTime), 0);
    assert_eq!(store.hlen(HashKey::Task), 0);
    assert_eq!(store.hlen(HashKey::Lease), 1);
    assert_eq!(store.hlen(HashKey::Meta), 1);
}

#[test]
fn lease_on_an_empty_queue_changes_nothing() {
    let mut store = MemoryStore::new();
    let outcome = lease_at(&mut store, 0, 100, 1, 1000).unwrap();
    assert!(outcome.leased.is_empty());
    assert_eq!(store.current_virtual_time(), None);
}

#[test]
fn ack_is_fenced_by_the_token() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "a1", 1)]).unwrap();
    lease_at(&mut store, 0, 100, 1, 1000).unwrap();
    let before = store.clone();
    assert_eq!(
        ack(
            &mut store,
            &[Ack::pair(b"a1", b"wrong"), Ack::pair(b"zz", b"token-1")],
            &mut Vec::new()
        ),
        0
    );
    assert_eq!(format!("{before:?}"), format!("{store:?}"));
    assert_eq!(
        ack(
            &mut store,
            &[Ack::pair(b"a1", b"token-1"), Ack::pair(b"a1", b"token-1")],
            &mut Vec::new()
        ),
        1
    );
    for key in [
        HashKey::InflightTask,
        HashKey::Lease,
        HashKey::Meta,
        HashKey::Timeouts,
    ] {
        assert_eq!(store.hlen(key), 0, "{key:?}");
    }
    assert_eq!(store.zcard(ZsetKey::Inflight), 0);
}

#[test]
fn renew_moves_the_expiry_only_with_the_current_token() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "a1", 1)]).unwrap();
    lease_at(&mut store, 0, 100, 1, 1000).unwrap();
    assert!(!renew(
        &mut store,
        &Ack::pair(b"a1", b"old"),
        50,
        1000,
        &mut Vec::new()
    ));
    assert_eq!(store.zscore(ZsetKey::Inflight, b"a1"), Some(100.0));
    assert!(renew(
        &mut store,
        &Ack::pair(b"a1", b"token-1"),
        50,
        1000,
        &mut Vec::new()
    ));
    assert_eq!(store.zscore(ZsetKey::Inflight, b"a1"), Some(1050.0));
}

#[test]
fn ack_each_tells_which_pairs_finished_their_item() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, 0, &[item("A", "a1", 1), item("A", "a2", 1)]).unwrap();
    let leased = lease_at(&mut store, 0, 100, 2, 1000).unwrap().leased;
    let (a1, a2) = (&leased[0], &leased[1]);
    let acked = ack_each(
        &mut store,
        &[
            Ack::pair(&a1.id, &a1.token),
            Ack::pair(&a2.id, b"stale"),
            Ack::pair(&a1.id, &a1.token),
        ],
        0,
        &mut Vec::new(),
    );
    assert_eq!(
        acked.took,
        [true, false, false],
        "the second ack of a1 finds it done"
    );
    assert_eq!(store.zcard(ZsetKey::Inflight), 1);
}
