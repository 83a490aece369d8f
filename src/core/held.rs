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
//! `partitions::Record`): RESUME moves a partition's whole held backlog to
//! the current virtual time by raising the offset, in O(1).

use super::partitions::Partition;
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
/// time `score`.
pub(super) fn park(store: &mut impl Store, partition: &mut Partition, id: &[u8], score: i64) {
    let relative = score.saturating_sub(partition.record.offset);
    store.zadd(ZsetKey::Held, &member(&partition.name, relative, id), 0.0);
    store.hset(HashKey::HeldAt, id, relative.to_string().as_bytes());
    partition.record.held += 1;
}

/// An item popped from `queue` whose partition may not be served now goes
/// to `held` at its score. It was queued before its partition came under
/// control, so it sits in `queue` beside the partition's head and may come
/// before it: the head waits in `held` too, so the next promotion takes the
/// lowest.
pub(super) fn park_popped(
    store: &mut impl Store,
    partition: &mut Partition,
    id: &[u8],
    score: i64,
) {
    park(store, partition, id, score);
    if let Some(head) = partition.record.head.take() {
        if let Some(head_score) = store.zscore(ZsetKey::Queue, &head) {
            store.zrem(ZsetKey::Queue, &head);
            park(store, partition, &head, head_score as i64);
        }
    }
}

/// The partition's lowest held item: (virtual time, id).
pub(super) fn first(store: &mut impl Store, partition: &Partition) -> Option<(i64, Vec<u8>)> {
    let prefix = prefix(&partition.name);
    let found = store.zfirst_from(ZsetKey::Held, &prefix)?;
    if !found.starts_with(&prefix) {
        return None;
    }
    let (relative, id) = decode(&found, prefix.len())?;
    Some((
        relative.saturating_add(partition.record.offset),
        id.to_vec(),
    ))
}

/// Moves the partition's lowest held item into `queue` as its head. False
/// when it has none (its `held` count is corrected to 0).
pub(super) fn promote(store: &mut impl Store, partition: &mut Partition) -> bool {
    let Some((score, id)) = first(store, partition) else {
        partition.record.held = 0;
        return false;
    };
    remove_known(store, partition, &id, score);
    store.zadd(ZsetKey::Queue, &id, score as f64);
    partition.record.head = Some(id);
    true
}

/// Takes `id` out of `held`; its virtual time, None when it was not held.
pub(super) fn remove(store: &mut impl Store, partition: &mut Partition, id: &[u8]) -> Option<i64> {
    let relative = held_at(store, id)?;
    let score = relative.saturating_add(partition.record.offset);
    remove_known(store, partition, id, score);
    Some(score)
}

fn remove_known(store: &mut impl Store, partition: &mut Partition, id: &[u8], score: i64) {
    let relative = score.saturating_sub(partition.record.offset);
    store.zrem(ZsetKey::Held, &member(&partition.name, relative, id));
    store.hdel(HashKey::HeldAt, id);
    partition.record.held = partition.record.held.saturating_sub(1);
}

/// The relative virtual time of a held id; None when it is not held.
pub(super) fn held_at(store: &mut impl Store, id: &[u8]) -> Option<i64> {
    let raw = store.hget(HashKey::HeldAt, id)?;
    std::str::from_utf8(&raw).ok()?.parse().ok()
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
