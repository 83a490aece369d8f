//! Held items: queued items of a partition under a cap or a pause wait in
//! `held` instead of `queue`, so LEASE never has to step over them.
//!
//! `held` is a sorted set whose scores are all 0; a member is
//! `<partition length, 4 bytes BE><partition><virtual time, 8 bytes,
//! order-preserving><id>`, so one O(log N) lookup finds a partition's
//! lowest item. `held_at` maps each held id to that virtual time, so an id
//! is found (ENQUEUE's duplicate check, CANCEL) without knowing it.
//!
//! The virtual time stored is relative to the partition's `offset` (see
//! `partitions::Record`): a rejoin moves a partition's whole held backlog
//! to the current virtual time by raising the offset, in O(1). This file
//! is the encoding only; what goes in and out, and the counts, are
//! `admission.rs`.

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

fn member(partition: &[u8], relative: i64, id: &[u8]) -> Vec<u8> {
    let mut member = prefix(partition);
    // Flipping the sign bit makes byte order match numeric order.
    member.extend_from_slice(&((relative as u64) ^ (1 << 63)).to_be_bytes());
    member.extend_from_slice(id);
    member
}

/// (relative virtual time, id) of a member with the given prefix length.
fn decode(member: &[u8], prefix_len: usize) -> Option<(i64, &[u8])> {
    let time = member.get(prefix_len..prefix_len + 8)?;
    let time = u64::from_be_bytes(time.try_into().ok()?) ^ (1 << 63);
    Some((time as i64, &member[prefix_len + 8..]))
}

/// The (partition, virtual time, id) a `held` member names, for the
/// invariant check.
pub(super) fn parse_member(member: &[u8]) -> Option<(&[u8], i64, &[u8])> {
    let length = u32::from_be_bytes(member.get(..4)?.try_into().ok()?) as usize;
    let partition = member.get(4..4 + length)?;
    let (time, id) = decode(member, 4 + length)?;
    Some((partition, time, id))
}

/// Puts a queued item (its payload stays in `task`) in `held` at virtual
/// time `score`, for a partition whose held times are relative to `offset`.
pub(super) fn add(store: &mut impl Store, partition: &[u8], offset: i64, id: &[u8], score: i64) {
    let relative = score.saturating_sub(offset);
    store.zadd(ZsetKey::Held, &member(partition, relative, id), 0.0);
    store.hset_int(HashKey::HeldAt, id, relative);
}

/// The partition's lowest held item: (virtual time, id).
pub(super) fn first(
    store: &mut impl Store,
    partition: &[u8],
    offset: i64,
) -> Option<(i64, Vec<u8>)> {
    let prefix = prefix(partition);
    let found = store.zfirst_from(ZsetKey::Held, &prefix)?;
    if !found.starts_with(&prefix) {
        return None;
    }
    let (relative, id) = decode(&found, prefix.len())?;
    Some((relative.saturating_add(offset), id.to_vec()))
}

/// Takes `id`, held at virtual time `score`, out of `held`.
pub(super) fn remove(store: &mut impl Store, partition: &[u8], offset: i64, id: &[u8], score: i64) {
    let relative = score.saturating_sub(offset);
    store.zrem(ZsetKey::Held, &member(partition, relative, id));
    store.hdel(HashKey::HeldAt, id);
}

/// The virtual time `id` is held at (None: it is not held).
pub(super) fn held_at(store: &mut impl Store, id: &[u8], offset: i64) -> Option<i64> {
    let relative = int_field(store, HashKey::HeldAt, id, parse_decimal)??;
    Some(relative.saturating_add(offset))
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
            .map(|m| parse_member(m).map(|(p, t, i)| (p.to_vec(), t, i.to_vec())))
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
