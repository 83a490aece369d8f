//! The VTRR scoring rule: where an item enters the queue, whichever way it
//! enters (enqueue, a due delayed item, a reclaim, a nack, a revive).

use super::admission::{self, Partition};
use super::levels::{max_time, Level};
use super::meta::{self, Meta};
use super::numbers::format_meta;
use super::outcomes::{self, Keeping};
use super::types::{Anomaly, NewItem};
use super::virtual_time::{current_at, next_of, set_next, Placing};
use crate::store::{HashKey, Store, ZsetKey};

/// The VTRR scoring rule, shared by every way an item enters the queue,
/// within the item's priority level (each level keeps its own virtual
/// times, `levels`): the item starts at `max(partition's next virtual
/// time, current virtual time + 1)` (just the former while a partition
/// under control has items queued at that level) and moves its partition's
/// virtual time on by `weight / share` (the remainder is carried to the
/// partition's next item, so nothing is lost to rounding). It then goes to
/// `queue`, or to `held` when its partition is under control
/// (`admission::enter_queue`). `partition` is the item's, opened by the
/// caller; `stored_meta` is the item's `meta` as read (None: a new item,
/// whose level is recorded here), not rewritten when already right.
pub(super) fn place(
    store: &mut impl Store,
    at: &Placing,
    partition: &mut Partition,
    item: &NewItem<'_>,
    level: Level,
    stored_meta: Option<&[u8]>,
    anomalies: &mut Vec<Anomaly>,
) {
    let partition_virtual_time = next_of(store, item.partition, level, anomalies);
    // A partition re-entering starts at the current virtual time. One under
    // control with items still queued follows its last item, even when
    // that is behind (paused or capped, its backlog waits; the new item
    // waits after it). Without controls the two agree whenever the counts
    // are exact, and the scripts' rule is kept for queues they share (they
    // keep no counts).
    let current_virtual_time = current_at(store, at.current_virtual_time, level);
    let record = &mut partition.record;
    let start = if record.queued_at(level) > 0 && record.controlled(at.defaults) {
        partition_virtual_time
    } else {
        partition_virtual_time.max(current_virtual_time.saturating_add(1))
    }
    .clamp(0, max_time(level));
    let share = record.share.max(1);
    let owed = record.carry.saturating_add(item.weight);
    record.carry = owed % share;
    let advance = i64::try_from(owed / share).unwrap_or(i64::MAX);
    let next = start.saturating_add(advance).min(max_time(level));
    // The item first, then its place: a store that keeps an item's scores
    // in the item (a native queue) builds it once, with room for its score.
    let meta = format_meta(item.weight, item.partition);
    let changed_meta = (stored_meta != Some(meta.as_slice())).then_some(meta.as_slice());
    store.set_item(item.id, (HashKey::Task, item.payload), changed_meta);
    if stored_meta.is_none() {
        meta::set_level(store, item.id, level);
    }
    admission::enter_queue(store, partition, item.id, level, start);
    set_next(store, item.partition, level, next);
}

/// A new item enters the queue through [`place`] at `now_ms`, at `level`.
/// True when its partition's line started waiting then.
pub(super) fn enter(
    store: &mut impl Store,
    at: &Placing,
    now_ms: i64,
    item: &NewItem<'_>,
    level: Level,
    anomalies: &mut Vec<Anomaly>,
) -> bool {
    let mut partition = admission::open(store, item.partition, at.defaults, anomalies);
    partition.now_ms = Some(now_ms);
    partition.record.totals.enqueued += 1;
    place(store, at, &mut partition, item, level, None, anomalies);
    admission::close(store, partition)
}

/// Puts an item that is already known (its `meta` read as `meta`, its
/// partition opened by the caller) back in the queue through [`place`], at
/// its level: a reclaimed lease, a due delayed item, a nacked or revived
/// item. A missing or unreadable `meta` is reported and the item still
/// enters the queue (weight 1, the empty partition): nothing is lost.
pub(super) fn requeue(
    store: &mut impl Store,
    at: &Placing,
    partition: &mut Partition,
    id: &[u8],
    payload: &[u8],
    meta: &Meta,
    anomalies: &mut Vec<Anomaly>,
) {
    meta.report_unreadable(id, anomalies);
    let item = NewItem {
        partition: &meta.partition,
        id,
        weight: meta.weight,
        payload,
    };
    let level = meta::level_of(store, id);
    place(
        store,
        at,
        partition,
        &item,
        level,
        meta.stored.as_deref(),
        anomalies,
    );
}

/// Whether `id` is anywhere in the queue's life: queued (in `queue` or
/// `held`), leased, delayed or dead. An id lives in exactly one of these.
pub(super) fn is_present(store: &mut impl Store, id: &[u8]) -> bool {
    [
        ZsetKey::Queue,
        ZsetKey::Inflight,
        ZsetKey::Delayed,
        ZsetKey::Dead,
    ]
    .into_iter()
    .any(|key| store.zscore(key, id).is_some())
        || store.hget(HashKey::HeldAt, id).is_some()
}

/// Whether ENQUEUE (or DEFER) skips `id`: it is in the queue's life, or
/// finished within DEDUP-MS of `now_ms`. Reads only.
pub(super) fn already_there(
    store: &mut impl Store,
    keeping: Keeping,
    id: &[u8],
    now_ms: i64,
    anomalies: &mut Vec<Anomaly>,
) -> bool {
    is_present(store, id) || outcomes::deduplicated(store, keeping, id, now_ms, anomalies)
}
