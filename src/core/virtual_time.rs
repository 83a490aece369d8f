//! The virtual times a queue keeps: the current one (the score last served)
//! and each partition's next one, and what every call that moves items
//! reads once before its first write.

use std::borrow::Cow;

use super::levels::{max_time, Level};
use super::numbers::{int_field, parse_virtual_time};
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

/// The current virtual time of `level`: level 0's as the call read it
/// (`level_zero`), a level other than 0's from `level_virtual_time`
/// (missing or unreadable: 0, the start of its band).
pub(super) fn current_at(store: &mut impl Store, level_zero: i64, level: Level) -> i64 {
    if level == 0 {
        return level_zero;
    }
    let mut digits = itoa::Buffer::new();
    let field = digits.format(level).as_bytes();
    int_field(store, HashKey::LevelVirtualTime, field, parse_virtual_time)
        .flatten()
        .unwrap_or(0)
}

/// Sets a level other than 0's current virtual time.
pub(super) fn set_current_at(store: &mut impl Store, level: Level, time: i64) {
    let mut digits = itoa::Buffer::new();
    store.hset_int(
        HashKey::LevelVirtualTime,
        digits.format(level).as_bytes(),
        time,
    );
}

/// Where a partition's next virtual time at `level` is kept: level 0's in
/// `partition_virtual_time`, as the scripts keep it; the others' in
/// `level_virtual_time` as `<level> <partition>` (a level's own field has
/// no space, so the two never meet).
fn next_field(partition: &[u8], level: Level) -> (HashKey, Cow<'_, [u8]>) {
    if level == 0 {
        return (HashKey::PartitionVirtualTime, Cow::Borrowed(partition));
    }
    let mut digits = itoa::Buffer::new();
    let level = digits.format(level).as_bytes();
    let mut field = Vec::with_capacity(level.len() + 1 + partition.len());
    field.extend_from_slice(level);
    field.push(b' ');
    field.extend_from_slice(partition);
    (HashKey::LevelVirtualTime, Cow::Owned(field))
}

/// The partition's next virtual time at `level`: missing is 0; an
/// unreadable value reads as 0 and is reported.
pub(super) fn next_of(
    store: &mut impl Store,
    partition: &[u8],
    level: Level,
    anomalies: &mut Vec<Anomaly>,
) -> i64 {
    let (key, field) = next_field(partition, level);
    match int_field(store, key, &field, parse_virtual_time) {
        None => 0,
        Some(next) => next.unwrap_or_else(|| {
            anomalies.push(Anomaly::PartitionVirtualTimeUnreadable {
                partition: partition.to_vec(),
            });
            0
        }),
    }
}

pub(super) fn set_next(store: &mut impl Store, partition: &[u8], level: Level, next: i64) {
    let (key, field) = next_field(partition, level);
    store.hset_int(key, &field, next);
}

/// Moves `partition`'s next virtual time at `level` by `by`, within its
/// level's band. A partition that has none starts from `missing_as`, or,
/// with None, is left without one.
pub(super) fn move_next(
    store: &mut impl Store,
    partition: &[u8],
    level: Level,
    by: i64,
    missing_as: Option<i64>,
) {
    let (key, field) = next_field(partition, level);
    let next = int_field(store, key, &field, parse_virtual_time)
        .flatten()
        .or(missing_as);
    if let Some(next) = next {
        let moved = next.saturating_add(by).clamp(0, max_time(level));
        store.hset_int(key, &field, moved);
    }
}
