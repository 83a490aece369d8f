//! Delayed items: held outside the queue (`delayed`, scored by due time,
//! with payloads in `delayed_task`) until due, then scored into the queue
//! as if enqueued at that moment: no credit for the time waited, no jump
//! ahead of their partition.

use super::dead::bury_without_payload;
use super::enqueue::{enqueue, EnqueueOutcome};
use super::lease::{park_front, MAX_PARKED_PER_LEASE};
use super::partitions::{self, State};
use super::reclaim::reclaim_at;
use super::scoring::{is_present, partition_of, read_placing, requeue, Placing};
use super::{format_meta, CoreError, Due, NewItem};
use crate::store::{HashKey, Store, ZsetKey};

/// `VTRR.DEFER`: each item whose id is not already in the queue's life
/// becomes leasable at `due_ms`. A due time not after `now_ms` enqueues at
/// once, exactly as `VTRR.ENQUEUE`.
pub fn defer(
    store: &mut impl Store,
    now_ms: i64,
    due_ms: i64,
    items: &[NewItem<'_>],
) -> Result<EnqueueOutcome, CoreError> {
    if due_ms <= now_ms {
        return enqueue(store, items);
    }
    let mut outcome = EnqueueOutcome::default();
    for item in items {
        if is_present(store, item.id) {
            continue;
        }
        store.hset(
            HashKey::Meta,
            item.id,
            &format_meta(item.weight, item.partition),
        );
        hold(store, item.id, item.payload, due_ms);
        // Entering `delayed` never changes whether a partition may be
        // served, so the default cap does not matter here.
        partitions::shift(
            store,
            item.partition,
            None,
            Some(State::Delayed),
            None,
            &mut outcome.anomalies,
        );
        outcome.added += 1;
    }
    Ok(outcome)
}

/// Holds an item (its `meta` already written) until `due_ms`.
pub(super) fn hold(store: &mut impl Store, id: &[u8], payload: &[u8], due_ms: i64) {
    store.zadd(ZsetKey::Delayed, id, due_ms as f64);
    store.hset(HashKey::DelayedTask, id, payload);
}

/// Moves up to `limit` delayed items due at `now_ms` into the queue, in
/// ascending (due, id) order. One without a payload is dead-lettered.
pub(super) fn promote_at(
    store: &mut impl Store,
    at: &Placing,
    now_ms: i64,
    limit: usize,
    outcome: &mut Due,
) {
    if limit == 0 {
        return;
    }
    for (id, _due) in store.zrange_upto(ZsetKey::Delayed, now_ms as f64, limit) {
        store.zrem(ZsetKey::Delayed, &id);
        let payload = store.hget(HashKey::DelayedTask, &id);
        store.hdel(HashKey::DelayedTask, &id);
        let name = partition_of(store, &id);
        let to = payload.is_none().then_some(State::Dead);
        let anomalies = &mut outcome.anomalies;
        partitions::shift(
            store,
            &name,
            Some(State::Delayed),
            to,
            at.default_cap,
            anomalies,
        );
        match payload {
            Some(payload) => {
                requeue(store, at, &id, &payload, anomalies);
                outcome.promoted += 1;
            }
            None => {
                bury_without_payload(store, &id, now_ms, &mut outcome.anomalies);
                outcome.dead_lettered += 1;
            }
        }
    }
}

/// Everything of a queue due at `now_ms`, at most `limit` items: expired
/// leases first, then due delayed items. What LEASE runs before it pops,
/// and what the timer runs.
pub(super) fn due_at(
    store: &mut impl Store,
    at: &Placing,
    now_ms: i64,
    limit: usize,
    outcome: &mut Due,
) {
    let before = outcome.reclaimed;
    reclaim_at(store, at, now_ms, limit, outcome);
    let reclaimed = (outcome.reclaimed - before) as usize;
    promote_at(store, at, now_ms, limit.saturating_sub(reclaimed), outcome);
}

/// The timer's run on one queue: [`due_at`], then the parking a LEASE left
/// (see `lease::park_front`).
pub fn run_due(store: &mut impl Store, now_ms: i64, limit: usize) -> Result<Due, CoreError> {
    let mut outcome = Due::default();
    let at = read_placing(store, &mut outcome.anomalies)?;
    due_at(store, &at, now_ms, limit, &mut outcome);
    outcome.parking_left = park_front(store, &at, MAX_PARKED_PER_LEASE, &mut outcome);
    Ok(outcome)
}
