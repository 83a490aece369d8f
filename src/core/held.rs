//! Held items: queued items of a partition under a cap or a pause wait in
//! `held` instead of `queue`, so LEASE never has to step over them.
//!
//! `held` is a sorted set whose scores are all 0; a member is
//! `<partition length, 4 bytes BE><partition><virtual time, 8 bytes,
//! order-preserving><id>`, so one O(log N) lookup finds a partition's
//! lowest item. `held_at` maps each held id to that virtual time, so an id
//! is found (ENQUEUE's duplicate check, CANCEL) without knowing it.
//!
//! The virtual time stored is relative to the partition's offset at the
//! item's priority level (see `partitions::Record`), and carries the level
//! in its band (`levels::held_time`): a partition's items order by level,
//! highest first, then by virtual time, and a rejoin moves a level's whole
//! held backlog to the level's current virtual time by raising its offset,
//! in O(1). This file is the encoding only; what goes in and out, and the
//! counts, are `admission.rs`.

use super::levels::{held_band_start, held_time, of_held_time, Level, MAX_LEVEL};
use super::numbers::{int_field, parse_decimal};
use crate::store::{HashKey, Store, ZsetKey};

/// The member prefix shared by every held item of `partition`.
pub(super) fn prefix(partition: &[u8]) -> Vec<u8> {
    let length = u32::try_from(partition.len()).unwrap_or(u32::MAX);
    let mut prefix = Vec::with_capacity(4 + partition.len() + 8 + 16);
    prefix.extend_from_slice(&length.to_be_bytes());
    prefix.extend_from_slice(partition);
    prefix
}

fn member(partition: &[u8], time: i64, id: &[u8]) -> Vec<u8> {
    let mut member = prefix(partition);
    member.extend_from_slice(&encode_time(time));
    member.extend_from_slice(id);
    member
}

/// Flipping the sign bit makes byte order match numeric order.
fn encode_time(time: i64) -> [u8; 8] {
    ((time as u64) ^ (1 << 63)).to_be_bytes()
}

/// (held time, id) of a member with the given prefix length.
fn decode(member: &[u8], prefix_len: usize) -> Option<(i64, &[u8])> {
    let time = member.get(prefix_len..prefix_len + 8)?;
    let time = u64::from_be_bytes(time.try_into().ok()?) ^ (1 << 63);
    Some((time as i64, &member[prefix_len + 8..]))
}

/// The (partition, level, relative virtual time, id) a `held` member
/// names, for the invariant check.
pub(super) fn parse_member(member: &[u8]) -> Option<(&[u8], Level, i64, &[u8])> {
    let length = u32::from_be_bytes(member.get(..4)?.try_into().ok()?) as usize;
    let partition = member.get(4..4 + length)?;
    let (time, id) = decode(member, 4 + length)?;
    let (level, relative) = of_held_time(time);
    Some((partition, level, relative, id))
}

/// Puts a queued item (its payload stays in `task`) in `held` at virtual
/// time `time` of `level`, for a partition whose held times at that level
/// are relative to `offset`.
pub(super) fn add(
    store: &mut impl Store,
    partition: &[u8],
    offset: i64,
    id: &[u8],
    (level, time): (Level, i64),
) {
    let held = held_time(level, time.saturating_sub(offset));
    store.zadd(ZsetKey::Held, &member(partition, held, id), 0.0);
    store.hset_int(HashKey::HeldAt, id, held);
}

/// The partition's first held item, from `level` down: (level, virtual
/// time, id), its time read with its level's offset (`offset_at`).
pub(super) fn first_from(
    store: &mut impl Store,
    partition: &[u8],
    level: Level,
    offset_at: impl Fn(Level) -> i64,
) -> Option<(Level, i64, Vec<u8>)> {
    let prefix = prefix(partition);
    let mut from = prefix.clone();
    from.extend_from_slice(&encode_time(held_band_start(level)));
    let found = store.zfirst_from(ZsetKey::Held, &from)?;
    if !found.starts_with(&prefix) {
        return None;
    }
    let (held, id) = decode(&found, prefix.len())?;
    let (level, relative) = of_held_time(held);
    Some((
        level,
        relative.saturating_add(offset_at(level)),
        id.to_vec(),
    ))
}

/// The partition's first held item: its highest level's lowest.
pub(super) fn first(
    store: &mut impl Store,
    partition: &[u8],
    offset_at: impl Fn(Level) -> i64,
) -> Option<(Level, i64, Vec<u8>)> {
    first_from(store, partition, MAX_LEVEL, offset_at)
}

/// The partition's first held item at `level`: (virtual time, id).
pub(super) fn first_at(
    store: &mut impl Store,
    partition: &[u8],
    level: Level,
    offset: i64,
) -> Option<(i64, Vec<u8>)> {
    match first_from(store, partition, level, |_| offset)? {
        (found, time, id) if found == level => Some((time, id)),
        _ => None,
    }
}

/// Takes `id`, held at `(level, time)`, out of `held`.
pub(super) fn remove(
    store: &mut impl Store,
    partition: &[u8],
    offset: i64,
    id: &[u8],
    (level, time): (Level, i64),
) {
    let held = held_time(level, time.saturating_sub(offset));
    store.zrem(ZsetKey::Held, &member(partition, held, id));
    store.hdel(HashKey::HeldAt, id);
}

/// The level and virtual time `id` is held at, its time read with its
/// level's offset (None: it is not held).
pub(super) fn held_at(
    store: &mut impl Store,
    id: &[u8],
    offset_at: impl Fn(Level) -> i64,
) -> Option<(Level, i64)> {
    let held = int_field(store, HashKey::HeldAt, id, parse_decimal)??;
    let (level, relative) = of_held_time(held);
    Some((level, relative.saturating_add(offset_at(level))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_sort_by_partition_then_time_then_id() {
        let mut members = [
            member(b"b", 1, b"x"),
            member(b"a", 5, b"y"),
            member(b"a", -3, b"z"),
            member(b"a", 5, b"a"),
            member(b"ab", 0, b"q"),
        ];
        members.sort();
        let decoded: Vec<_> = members
            .iter()
            .map(|m| parse_member(m).map(|(p, _, t, i)| (p.to_vec(), t, i.to_vec())))
            .collect::<Option<_>>()
            .unwrap();
        assert_eq!(
            decoded,
            vec![
                (b"a".to_vec(), -3, b"z".to_vec()),
                (b"a".to_vec(), 5, b"a".to_vec()),
                (b"a".to_vec(), 5, b"y".to_vec()),
                (b"b".to_vec(), 1, b"x".to_vec()),
                (b"ab".to_vec(), 0, b"q".to_vec()),
            ]
        );
    }

    #[test]
    fn a_prefix_never_matches_another_partition() {
        // "a" followed by bytes that look like a length must not read as "ab".
        assert!(!member(b"ab", 0, b"q").starts_with(&prefix(b"a")));
        assert!(member(b"a", 0, b"q").starts_with(&prefix(b"a")));
    }
}
