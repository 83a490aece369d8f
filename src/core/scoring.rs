//! The VTRR scoring rule and the virtual time it reads.

use super::partitions::{self, read_default_cap};
use super::{
    format_meta, parse_meta, parse_virtual_time, Anomaly, CoreError, NewItem, MAX_VIRTUAL_TIME,
};
use crate::store::{HashKey, Store, ZsetKey};

/// What every call that moves items reads once, before its first write:
/// the current virtual time and the queue's default cap.
#[derive(Debug, Clone, Copy)]
pub(super) struct Placing {
    pub current_virtual_time: i64,
    pub default_cap: Option<u64>,
}

pub(super) fn read_placing(
    store: &mut impl Store,
    anomalies: &mut Vec<Anomaly>,
) -> Result<Placing, CoreError> {
    let current_virtual_time = read_current_virtual_time(store)?;
    Ok(Placing {
        current_virtual_time,
        default_cap: read_default_cap(store, anomalies),
    })
}

/// Reads `current_virtual_time` (missing: 0). Call once per command, before
/// the first write, so a bad value refuses the command and changes nothing.
pub fn read_current_virtual_time(store: &mut impl Store) -> Result<i64, CoreError> {
    parse_current_virtual_time(store.current_virtual_time().as_deref())
}

pub(super) fn parse_current_virtual_time(raw: Option<&[u8]>) -> Result<i64, CoreError> {
    match raw {
        None => Ok(0),
        Some(raw) => parse_virtual_time(raw).ok_or(CoreError::CurrentVirtualTimeNotInteger),
    }
}

/// The VTRR scoring rule, shared by every way an item enters the queue:
/// the item starts at `max(partition's next virtual time, current virtual
/// time + 1)` (just the former while a partition under control has items
/// queued) and moves its partition's virtual time on by `weight / share`
/// (the remainder is carried to the partition's next item, so nothing is
/// lost to rounding). It then goes to `queue`, or to `held` when its
/// partition is under a cap or pause (`partitions::enter_queue`).
/// `stored_meta` is the item's `meta` as read (reclaim); it is not
/// rewritten when already right.
pub(super) fn place(
    store: &mut impl Store,
    at: &Placing,
    item: &NewItem<'_>,
    stored_meta: Option<&[u8]>,
    anomalies: &mut Vec<Anomaly>,
) {
    let current_virtual_time = at.current_virtual_time;
    let mut partition = partitions::open(store, item.partition, anomalies);
    let partition_virtual_time = match store.hget(HashKey::PartitionVirtualTime, item.partition) {
        None => 0,
        Some(raw) => parse_virtual_time(&raw).unwrap_or_else(|| {
            anomalies.push(Anomaly::PartitionVirtualTimeUnreadable {
                partition: item.partition.to_vec(),
            });
            0
        }),
    };
    // A partition re-entering starts at the current virtual time. One under
    // control with items still queued follows its last item, even when
    // that is behind (paused or capped, its backlog waits; the new item
    // waits after it). Without controls the two agree whenever the counts
    // are exact, and the scripts' rule is kept for queues they share (they
    // keep no counts).
    let start = if partition.record.queued > 0 && partition.record.controlled(at.default_cap) {
        partition_virtual_time
    } else {
        partition_virtual_time.max(current_virtual_time.saturating_add(1))
    }
    .min(MAX_VIRTUAL_TIME);
    let share = partition.record.share.max(1);
    let owed = partition.record.carry.saturating_add(item.weight);
    partition.record.carry = owed % share;
    let advance = i64::try_from(owed / share).unwrap_or(i64::MAX);
    let next = start.saturating_add(advance).min(MAX_VIRTUAL_TIME);
    partitions::enter_queue(store, &mut partition, item.id, start, at.default_cap);
    store.hset(
        HashKey::PartitionVirtualTime,
        item.partition,
        next.to_string().as_bytes(),
    );
    store.hset(HashKey::Task, item.id, item.payload);
    let meta = format_meta(item.weight, item.partition);
    if stored_meta != Some(meta.as_slice()) {
        store.hset(HashKey::Meta, item.id, &meta);
    }
    partitions::close(store, partition);
}

/// Puts an item that is already known (its `meta` holds weight and
/// partition) back in the queue through [`place`]: a reclaimed lease, a due
/// delayed item, a nacked or revived item. A missing or unreadable `meta`
/// is reported and the item still enters the queue (weight 1, the empty
/// partition): nothing is lost.
pub(super) fn requeue(
    store: &mut impl Store,
    at: &Placing,
    id: &[u8],
    payload: &[u8],
    anomalies: &mut Vec<Anomaly>,
) {
    let meta = store.hget(HashKey::Meta, id);
    let (weight, partition) = match meta.as_deref().and_then(parse_meta) {
        Some((weight, partition)) => (weight, partition.to_vec()),
        None => {
            anomalies.push(Anomaly::MetaUnreadable { id: id.to_vec() });
            (1, Vec::new())
        }
    };
    let item = NewItem {
        partition: &partition,
        id,
        weight,
        payload,
    };
    place(store, at, &item, meta.as_deref(), anomalies);
}

/// The partition an item's `meta` names; the empty partition when `meta`
/// is missing or unreadable (as `requeue` would place it).
pub(super) fn partition_of(store: &mut impl Store, id: &[u8]) -> Vec<u8> {
    store
        .hget(HashKey::Meta, id)
        .as_deref()
        .and_then(parse_meta)
        .map(|(_, partition)| partition.to_vec())
        .unwrap_or_default()
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
