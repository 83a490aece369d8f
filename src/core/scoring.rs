//! The VTRR scoring rule and the virtual time it reads.

use super::{
    format_meta, parse_meta, parse_virtual_time, Anomaly, CoreError, NewItem, MAX_VIRTUAL_TIME,
};
use crate::store::{HashKey, Store, ZsetKey};

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

/// The VTRR scoring rule, shared by enqueue and reclaim: the item starts at
/// `max(partition's next virtual time, current virtual time + 1)` and moves
/// its partition's virtual time on by `weight`. `stored_meta` is the item's
/// `meta` as read (reclaim); it is not rewritten when already right.
pub(super) fn place(
    store: &mut impl Store,
    current_virtual_time: i64,
    item: &NewItem<'_>,
    stored_meta: Option<&[u8]>,
    anomalies: &mut Vec<Anomaly>,
) {
    let partition_virtual_time = match store.hget(HashKey::PartitionVirtualTime, item.partition) {
        None => 0,
        Some(raw) => parse_virtual_time(&raw).unwrap_or_else(|| {
            anomalies.push(Anomaly::PartitionVirtualTimeUnreadable {
                partition: item.partition.to_vec(),
            });
            0
        }),
    };
    let start = partition_virtual_time
        .max(current_virtual_time.saturating_add(1))
        .min(MAX_VIRTUAL_TIME);
    let weight = i64::try_from(item.weight).unwrap_or(i64::MAX);
    let next = start.saturating_add(weight).min(MAX_VIRTUAL_TIME);
    store.zadd(ZsetKey::Queue, item.id, start as f64);
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
}

/// Puts an item that is already known (its `meta` holds weight and
/// partition) back in the queue through [`place`]: a reclaimed lease, a due
/// delayed item, a nacked or revived item. A missing or unreadable `meta`
/// is reported and the item still enters the queue (weight 1, the empty
/// partition): nothing is lost.
pub(super) fn requeue(
    store: &mut impl Store,
    current_virtual_time: i64,
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
    place(
        store,
        current_virtual_time,
        &item,
        meta.as_deref(),
        anomalies,
    );
}

/// Whether `id` is anywhere in the queue's life: queued, leased, delayed or
/// dead. An id lives in exactly one of these.
pub(super) fn is_present(store: &mut impl Store, id: &[u8]) -> bool {
    [
        ZsetKey::Queue,
        ZsetKey::Inflight,
        ZsetKey::Delayed,
        ZsetKey::Dead,
    ]
    .into_iter()
    .any(|key| store.zscore(key, id).is_some())
}
