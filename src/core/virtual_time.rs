//! The virtual times a queue keeps: the current one (the score last served)
//! and each partition's next one, and what every call that moves items
//! reads once before its first write.

use std::borrow::Cow;

use super::levels::{max_time, queue_score, Level, SPAN};
use super::numbers::{int_field, parse_virtual_time};
use super::partitions::{read_defaults, Defaults};
use super::types::{Anomaly, CoreError};
use crate::store::{HashKey, Store, ZsetKey};

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

/// Where a level other than 0 keeps its base: what its partitions' next
/// times are stored above (no space, so no partition's field; not digits
/// alone, so not the level's current time).
fn base_field(level: Level) -> Vec<u8> {
    let mut field = b"base:".to_vec();
    field.extend_from_slice(itoa::Buffer::new().format(level).as_bytes());
    field
}

/// A level's base (0 for level 0, which scripts share, and for a level
/// never rebased).
fn base_of(store: &mut impl Store, level: Level) -> i64 {
    if level == 0 {
        return 0;
    }
    int_field(
        store,
        HashKey::LevelVirtualTime,
        &base_field(level),
        parse_virtual_time,
    )
    .flatten()
    .unwrap_or(0)
}

/// The partition's next virtual time at `level`: missing is 0; an
/// unreadable value reads as 0 and is reported. One stored below its
/// level's base (it was behind the level's clock when the level rebased)
/// reads as 0.
pub(super) fn next_of(
    store: &mut impl Store,
    partition: &[u8],
    level: Level,
    anomalies: &mut Vec<Anomaly>,
) -> i64 {
    let (key, field) = next_field(partition, level);
    let stored = match int_field(store, key, &field, parse_virtual_time) {
        None => return 0,
        Some(next) => next.unwrap_or_else(|| {
            anomalies.push(Anomaly::PartitionVirtualTimeUnreadable {
                partition: partition.to_vec(),
            });
            0
        }),
    };
    stored.saturating_sub(base_of(store, level)).max(0)
}

pub(super) fn set_next(store: &mut impl Store, partition: &[u8], level: Level, next: i64) {
    let base = base_of(store, level);
    let (key, field) = next_field(partition, level);
    store.hset_int(key, &field, next.saturating_add(base));
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
    let base = base_of(store, level);
    let (key, field) = next_field(partition, level);
    let next = int_field(store, key, &field, parse_virtual_time)
        .flatten()
        .map(|stored| stored.saturating_sub(base).max(0))
        .or(missing_as);
    if let Some(next) = next {
        let moved = next.saturating_add(by).clamp(0, max_time(level));
        store.hset_int(key, &field, moved.saturating_add(base));
    }
}

/// A level other than 0 whose current virtual time has run past half its
/// band starts again from 0 once nothing is queued at it and nothing is
/// held anywhere (a held item's time is its partition's: a rebase under it
/// would reorder the partition's items). The partitions' next times there
/// move down with it, by raising the level's base: one behind the clock
/// rejoins at 0, one ahead of it (a partition charged more than it ran)
/// keeps its lead. So a level whose clock was driven to the end of its
/// band, where new items tie and go by id, recovers when it empties, as
/// the whole queue does at a drain; level 0's times are the scripts' and
/// restart only there.
pub(super) fn rebase_if_idle(store: &mut impl Store, level: Level, current: i64) {
    if level == 0 || current < SPAN / 2 || store.zcard(ZsetKey::Held) > 0 {
        return;
    }
    let lowest = queue_score(level, 0) as f64;
    let highest = queue_score(level, max_time(level)) as f64;
    if !store
        .zrange_above(ZsetKey::Queue, lowest - 1.0, highest, 1)
        .is_empty()
    {
        return;
    }
    let base = base_of(store, level).saturating_add(current);
    store.hset_int(HashKey::LevelVirtualTime, &base_field(level), base);
    set_current_at(store, level, 0);
}
