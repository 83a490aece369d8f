//! Per-partition backpressure (`VTRR.LIMIT ... MAX-QUEUED`, `VTRR.POLICY
//! ... DEFAULT-MAX-QUEUED`): a call that would take a partition past it is
//! refused whole, nothing written.

use super::*;
use crate::store::{HashKey, Store, ZsetKey};

fn items<'a>(partition: &'a str, ids: &'a [String]) -> Vec<NewItem<'a>> {
    ids.iter().map(|id| item(partition, id, 1)).collect()
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn add(store: &mut MemoryStore, new: &[NewItem<'_>]) -> Result<u64, CoreError> {
    enqueue(&mut store.scoped(CoreOp::Enqueue), 0, new).map(|outcome| outcome.added)
}

/// Everything the queue holds, to compare before and after a refusal.
fn contents(store: &MemoryStore) -> Vec<String> {
    let mut all = Vec::new();
    for key in ZsetKey::ALL {
        all.push(format!("{key:?} {:?}", store.zset_entries(key)));
    }
    for key in HashKey::ALL {
        all.push(format!("{key:?} {:?}", store.hash_entries(key)));
    }
    all.push(format!("{:?}", store.raw_current_virtual_time()));
    all
}

fn full(partition: &str, max_queued: u64, waiting: u64, adds: u64, refused: u64) -> CoreError {
    CoreError::PartitionFull {
        partition: partition.as_bytes().to_vec(),
        max_queued,
        waiting,
        adds,
        refused,
    }
}

#[test]
fn a_call_past_a_partitions_max_queued_is_refused_whole_and_writes_nothing() {
    let mut store = MemoryStore::new();
    apply_limit(&mut store, "p", LimitChange::MaxQueued(Some(3)));
    let first = names("p", 2);
    assert_eq!(add(&mut store, &items("p", &first)), Ok(2));
    let before = contents(&store);
    // Two more would make four: refused, with the other partition's item.
    let more = names("q", 1);
    let next = names("p-next", 2);
    let mut call = items("q", &more);
    call.extend(items("p", &next));
    assert_eq!(add(&mut store, &call), Err(full("p", 3, 2, 2, 3)));
    assert_eq!(contents(&store), before, "nothing written");
    // One more fits exactly.
    assert_eq!(add(&mut store, &items("p", &next[..1])), Ok(1));
    let check = check::check(&mut store.scoped(CoreOp::Check)).unwrap();
    assert!(check.is_empty(), "{check:?}");
}

#[test]
fn ids_already_there_take_no_room_and_a_repeated_id_counts_once() {
    let mut store = MemoryStore::new();
    apply_limit(&mut store, "p", LimitChange::MaxQueued(Some(2)));
    let ids = names("p", 2);
    assert_eq!(add(&mut store, &items("p", &ids)), Ok(2));
    // Both already queued: accepted, nothing added.
    assert_eq!(add(&mut store, &items("p", &ids)), Ok(0));
    let mut store = MemoryStore::new();
    apply_limit(&mut store, "p", LimitChange::MaxQueued(Some(1)));
    let twice = [item("p", "same", 1), item("p", "same", 1)];
    assert_eq!(add(&mut store, &twice), Ok(1));
}

#[test]
fn the_default_holds_partitions_without_their_own_and_leasing_makes_room() {
    let mut store = MemoryStore::new();
    apply_policy(&mut store, &[PolicyChange::DefaultMaxQueued(Some(2))]);
    apply_limit(&mut store, "big", LimitChange::MaxQueued(Some(5)));
    let small = names("small", 3);
    assert_eq!(
        add(&mut store, &items("small", &small)),
        Err(full("small", 2, 0, 3, 3))
    );
    assert_eq!(add(&mut store, &items("small", &small[..2])), Ok(2));
    let big = names("big", 5);
    assert_eq!(add(&mut store, &items("big", &big)), Ok(5), "its own wins");
    // A leased item no longer waits: it frees room.
    assert_eq!(lease_ids(&mut store, 0, 2), ["big-0", "small-0"]);
    assert_eq!(add(&mut store, &items("small", &small[2..])), Ok(1));
    apply_policy(&mut store, &[PolicyChange::DefaultMaxQueued(None)]);
    let many = names("small-more", 10);
    assert_eq!(add(&mut store, &items("small", &many)), Ok(10));
}

#[test]
fn delayed_items_wait_too() {
    let mut store = MemoryStore::new();
    apply_limit(&mut store, "p", LimitChange::MaxQueued(Some(2)));
    let later = names("later", 2);
    let deferred = defer(
        &mut store.scoped(CoreOp::defer(0)),
        0,
        1_000,
        &items("p", &later),
    );
    assert_eq!(deferred.map(|outcome| outcome.added), Ok(2));
    let now = names("now", 1);
    assert_eq!(
        add(&mut store, &items("p", &now)),
        Err(full("p", 2, 2, 1, 1))
    );
    let refused = defer(
        &mut store.scoped(CoreOp::defer(0)),
        0,
        1_000,
        &items("p", &now),
    );
    assert_eq!(refused, Err(full("p", 2, 2, 1, 1)));
}

#[test]
fn the_policy_counts_partitions_with_their_own_and_recount_restores_it() {
    let mut store = MemoryStore::new();
    let count = |store: &MemoryStore| {
        store
            .hash_value(HashKey::Policy, b"max-queued-partitions")
            .map(|raw| raw.into_owned())
    };
    apply_limit(&mut store, "a", LimitChange::MaxQueued(Some(3)));
    apply_limit(&mut store, "b", LimitChange::MaxQueued(Some(4)));
    assert_eq!(count(&store), Some(b"2".to_vec()));
    apply_limit(&mut store, "a", LimitChange::MaxQueued(Some(5)));
    assert_eq!(count(&store), Some(b"2".to_vec()), "a change is no new one");
    store
        .scoped(CoreOp::Recount)
        .hdel(HashKey::Policy, b"max-queued-partitions");
    assert_eq!(count(&store), None);
    recount(&mut store.scoped(CoreOp::Recount), &mut Vec::new()).unwrap();
    assert_eq!(count(&store), Some(b"2".to_vec()));
    apply_limit(&mut store, "a", LimitChange::MaxQueued(None));
    apply_limit(&mut store, "b", LimitChange::MaxQueued(None));
    assert_eq!(count(&store), None, "no field at 0");
    // A record kept only for its limit goes with it.
    assert_eq!(store.hash_len(HashKey::Partitions), 0);
}
