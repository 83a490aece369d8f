//! Delayed items: kept outside the queue (`delayed`, scored by due time,
//! with payloads in `delayed_task`) until due, then scored into the queue
//! as if enqueued at that moment: no credit for the time waited, no jump
//! ahead of their partition.

use super::admission;
use super::backlog;
use super::dead::bury_without_payload;
use super::enqueue::{enqueue_at, EnqueueOutcome};
use super::levels::Level;
use super::meta;
use super::numbers::format_meta;
use super::outcomes;
use super::partitions::{read_defaults, State};
use super::scoring::{already_there, requeue};
use super::types::{CoreError, Due, NewItem};
use super::virtual_time::Placing;
use crate::store::{HashKey, Store, ZsetKey};

/// `VTRR.DEFER`: each item whose id is not already in the queue's life
/// becomes leasable at `due_ms`, at priority level 0. A due time not after
/// `now_ms` enqueues at once, exactly as `VTRR.ENQUEUE`.
pub fn defer(
    store: &mut impl Store,
    now_ms: i64,
    due_ms: i64,
    items: &[NewItem<'_>],
) -> Result<EnqueueOutcome, CoreError> {
    defer_at(store, now_ms, due_ms, 0, items)
}

/// `VTRR.DEFER ... PRIORITY <level>`: [`defer`] at `level`, which the item
/// keeps while delayed.
pub fn defer_at(
    store: &mut impl Store,
    now_ms: i64,
    due_ms: i64,
    level: Level,
    items: &[NewItem<'_>],
) -> Result<EnqueueOutcome, CoreError> {
    if due_ms <= now_ms {
        return enqueue_at(store, now_ms, level, items);
    }
    let mut outcome = EnqueueOutcome::default();
    let defaults = read_defaults(store, &mut outcome.anomalies);
    backlog::admit(
        store,
        defaults.keeping,
        items,
        now_ms,
        &mut outcome.anomalies,
    )?;
    for item in items {
        if already_there(
            store,
            defaults.keeping,
            item.id,
            now_ms,
            &mut outcome.anomalies,
        ) {
            continue;
        }
        outcomes::forget_previous(store, defaults.keeping, item.id);
        store.hset(
            HashKey::Meta,
            item.id,
            &format_meta(item.weight, item.partition),
        );
        meta::set_level(store, item.id, level);
        postpone(store, item.id, item.payload, due_ms);
        let anomalies = &mut outcome.anomalies;
        let mut partition = admission::open(store, item.partition, defaults, anomalies);
        partition.record.arrive(State::Delayed);
        partition.record.totals.enqueued += 1;
        admission::close(store, partition);
        outcome.added += 1;
    }
    Ok(outcome)
}

/// Keeps an item (its `meta` already written) out of the queue until
/// `due_ms`.
pub(super) fn postpone(store: &mut impl Store, id: &[u8], payload: &[u8], due_ms: i64) {
    store.zadd(ZsetKey::Delayed, id, due_ms as f64);
    store.hset(HashKey::DelayedTask, id, payload);
}

/// Promotes up to `limit` delayed items due at `now_ms` into the queue, in
/// ascending (due, id) order. One without a payload is dead-lettered. How
/// many it took.
pub(super) fn promote_at(
    store: &mut impl Store,
    at: &Placing,
    now_ms: i64,
    limit: usize,
    outcome: &mut Due,
) -> usize {
    if limit == 0 {
        return 0;
    }
    let due = store.zrange_upto(ZsetKey::Delayed, now_ms as f64, limit);
    let taken = due.len();
    for (id, _due) in due {
        store.zrem(ZsetKey::Delayed, &id);
        let payload = store.htake(HashKey::DelayedTask, &id);
        let meta = meta::read(store, &id);
        let anomalies = &mut outcome.anomalies;
        let mut partition = admission::open(store, &meta.partition, at.defaults, anomalies);
        partition.now_ms = Some(now_ms);
        partition.record.leave(State::Delayed);
        match payload {
            Some(payload) => {
                requeue(store, at, &mut partition, &id, &payload, &meta, anomalies);
                outcome.promoted += 1;
            }
            None => {
                partition.record.arrive(State::Dead);
                bury_without_payload(store, &id, now_ms, anomalies);
                outcome.dead_lettered += 1;
            }
        }
        admission::close(store, partition);
    }
    taken
}
