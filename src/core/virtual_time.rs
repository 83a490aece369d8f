//! The virtual times a queue keeps: the current one (the score last served)
//! and each partition's next one, and what every call that moves items
//! reads once before its first write.

use super::numbers::{int_field, parse_virtual_time, MAX_VIRTUAL_TIME};
use super::partitions::{read_defaults, Defaults};
use super::types::{Anomaly, CoreError};
use crate::store::{HashKey, Store};

/// What every call that moves items reads once, before its first write:
/// the current virtual time and the queue's default cap.
#[derive(Debug, Clone, Copy)]
pub(super) struct Placing {
    pub current_virtual_time: i64,
    pub defaults: Defaults,
}

pub(super) fn read_placing(
    store: &mut impl Store,
    anomalies: &mut Vec<Anomaly>,
) -> Result<Placing, CoreError> {
    let current_virtual_time = read_current_virtual_time(store)?;
    Ok(Placing {
        current_virtual_time,
        defaults: read_defaults(store, anomalies),
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

/// `partition_virtual_time[partition]`: missing is 0; an unreadable value
/// reads as 0 and is reported.
pub(super) fn next_of(
    store: &mut impl Store,
    partition: &[u8],
    anomalies: &mut Vec<Anomaly>,
) -> i64 {
    match int_field(
        store,
        HashKey::PartitionVirtualTime,
        partition,
        parse_virtual_time,
    ) {
        None => 0,
        Some(next) => next.unwrap_or_else(|| {
            anomalies.push(Anomaly::PartitionVirtualTimeUnreadable {
                partition: partition.to_vec(),
            });
            0
        }),
    }
}

pub(super) fn set_next(store: &mut impl Store, partition: &[u8], next: i64) {
    store.hset_int(HashKey::PartitionVirtualTime, partition, next);
}

/// Moves `partition`'s next virtual time by `by`, within 0 and
/// `MAX_VIRTUAL_TIME`. A partition that has none starts from `missing_as`,
/// or, with None, is left without one.
pub(super) fn move_next(
    store: &mut impl Store,
    partition: &[u8],
    by: i64,
    missing_as: Option<i64>,
) {
    let next = int_field(
        store,
        HashKey::PartitionVirtualTime,
        partition,
        parse_virtual_time,
    )
    .flatten()
    .or(missing_as);
    if let Some(next) = next {
        set_next(
            store,
            partition,
            next.saturating_add(by).clamp(0, MAX_VIRTUAL_TIME),
        );
    }
}
