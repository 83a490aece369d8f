//! What the queue keeps of finished jobs (`VTRR.POLICY ... RESULT-TTL`,
//! `... DEDUP-MS`): results and states by id, a dedup window, and their
//! expiry by the timer.

use super::*;
use crate::store::{HashKey, ZsetKey};

fn add(store: &mut MemoryStore, now_ms: i64, ids: &[&str]) -> u64 {
    let items: Vec<_> = ids.iter().map(|id| item("p", id, 1)).collect();
    enqueue(&mut store.scoped(CoreOp::Enqueue), now_ms, &items)
        .unwrap()
        .added
}

/// Leases one item and acks it at `now_ms` with `result`.
fn finish(store: &mut MemoryStore, now_ms: i64, result: Option<&[u8]>) -> Vec<u8> {
    let leased = lease_at(store, now_ms, 60_000, 1, 16).unwrap().leased;
    let lease = &leased[0];
    let ack = Ack {
        result,
        ..Ack::pair(&lease.id, &lease.token)
    };
    let settled = ack_each(
        &mut store.scoped(CoreOp::Ack),
        &[ack],
        now_ms,
        &mut Vec::new(),
    );
    assert_eq!(settled.took, [true]);
    lease.id.clone()
}

fn state(store: &mut MemoryStore, id: &[u8]) -> JobState {
    status_of(&mut store.scoped(CoreOp::Job), id, &mut Vec::new()).state
}

fn keep(store: &mut MemoryStore, result_ttl_ms: Option<i64>, dedup_ms: Option<i64>) {
    let mut changes = vec![];
    changes.extend(result_ttl_ms.map(|ms| PolicyChange::ResultTtl(Some(ms))));
    changes.extend(dedup_ms.map(|ms| PolicyChange::Dedup(Some(ms))));
    apply_policy(store, &changes);
}

#[test]
fn a_queue_that_keeps_nothing_writes_nothing_and_forgets_an_acked_job() {
    let mut store = MemoryStore::new();
    add(&mut store, 0, &["a"]);
    let id = finish(&mut store, 10, Some(b"42"));
    assert_eq!(store.hash_len(HashKey::Results), 0);
    assert_eq!(store.zset_entries(ZsetKey::Finished), []);
    assert_eq!(state(&mut store, &id), JobState::Unknown);
    assert_eq!(add(&mut store, 20, &["a"]), 1, "no dedup: a new life");
}

#[test]
fn a_result_is_kept_for_the_ttl_then_the_timer_forgets_it() {
    let mut store = MemoryStore::new();
    keep(&mut store, Some(1_000), None);
    add(&mut store, 0, &["a", "b"]);
    let a = finish(&mut store, 100, Some(b"the answer"));
    let b = finish(&mut store, 150, None);
    assert_eq!(
        state(&mut store, &a),
        JobState::Done {
            finished_ms: 100,
            result: Some(b"the answer".to_vec())
        }
    );
    assert_eq!(
        state(&mut store, &b),
        JobState::Done {
            finished_ms: 150,
            result: None
        }
    );
    assert_eq!(next_due(&mut store.scoped(CoreOp::NextDue)), Some(1_100));
    run_due(&mut store.scoped(CoreOp::RunDue), 1_099, 16, 0).unwrap();
    assert!(state(&mut store, &a).is_finished(), "not yet");
    run_due(&mut store.scoped(CoreOp::RunDue), 1_100, 16, 0).unwrap();
    assert_eq!(state(&mut store, &a), JobState::Unknown);
    assert!(state(&mut store, &b).is_finished());
    run_due(&mut store.scoped(CoreOp::RunDue), 1_150, 16, 0).unwrap();
    assert_eq!(store.hash_len(HashKey::Results), 0);
    assert_eq!(next_due(&mut store.scoped(CoreOp::NextDue)), None);
}

#[test]
fn the_timer_forgets_at_most_its_limit_per_run_oldest_first() {
    let mut store = MemoryStore::new();
    keep(&mut store, Some(10), None);
    let ids: Vec<String> = (0..5).map(|i| format!("j{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    add(&mut store, 0, &ids);
    for at in 0..5 {
        finish(&mut store, at, None);
    }
    run_due(&mut store.scoped(CoreOp::RunDue), 1_000, 2, 0).unwrap();
    assert_eq!(store.hash_len(HashKey::Results), 3);
    assert_eq!(state(&mut store, b"j0"), JobState::Unknown);
    assert!(state(&mut store, b"j4").is_finished());
}

#[test]
fn an_id_finished_within_the_dedup_window_is_not_enqueued_again() {
    let mut store = MemoryStore::new();
    keep(&mut store, None, Some(500));
    add(&mut store, 0, &["a"]);
    finish(&mut store, 100, Some(b"dropped: no RESULT-TTL"));
    assert_eq!(
        state(&mut store, b"a"),
        JobState::Done {
            finished_ms: 100,
            result: None
        },
        "the dedup window keeps the state, not the result"
    );
    assert_eq!(add(&mut store, 599, &["a"]), 0, "already there");
    assert_eq!(
        add(&mut store, 600, &["a"]),
        1,
        "past the window: a new life"
    );
    assert_eq!(state(&mut store, b"a"), JobState::Queued);
    assert_eq!(store.hash_len(HashKey::Results), 0, "the old record went");
    let check = check::check(&mut store.scoped(CoreOp::Check)).unwrap();
    assert!(check.is_empty(), "{check:?}");
}

#[test]
fn a_cancelled_job_is_kept_as_cancelled_and_deduplicated() {
    let mut store = MemoryStore::new();
    keep(&mut store, Some(1_000), Some(1_000));
    add(&mut store, 0, &["a"]);
    let cancelled = cancel_at(
        &mut store.scoped(CoreOp::Cancel),
        &[b"a"],
        50,
        &mut Vec::new(),
    );
    assert_eq!(
        cancelled,
        Cancelled {
            count: 1,
            kept: true
        }
    );
    assert_eq!(
        state(&mut store, b"a"),
        JobState::Cancelled { finished_ms: 50 }
    );
    assert_eq!(add(&mut store, 60, &["a"]), 0);
}

#[test]
fn a_deduplicated_id_takes_no_room_under_max_queued() {
    let mut store = MemoryStore::new();
    keep(&mut store, None, Some(1_000));
    apply_limit(&mut store, "p", LimitChange::MaxQueued(Some(1)));
    add(&mut store, 0, &["a"]);
    finish(&mut store, 10, None);
    add(&mut store, 20, &["b"]);
    // `a` is a duplicate, `b` is queued: the call adds nothing, refuses nothing.
    assert_eq!(add(&mut store, 30, &["a"]), 0);
}

#[test]
fn an_outcome_record_reads_back_whatever_bytes_the_result_holds() {
    let mut store = MemoryStore::new();
    keep(&mut store, Some(1_000), None);
    add(&mut store, 0, &["a"]);
    let result: &[u8] = b" d 12 \x00\xff spaces and bytes ";
    finish(&mut store, 7, Some(result));
    assert_eq!(
        state(&mut store, b"a"),
        JobState::Done {
            finished_ms: 7,
            result: Some(result.to_vec())
        }
    );
}
