//! Per-partition backpressure (`VTRR.LIMIT ... MAX-QUEUED`, `VTRR.POLICY
//! ... DEFAULT-MAX-QUEUED`): the most items a partition may have waiting
//! (queued or delayed). An ENQUEUE or DEFER that would take any partition
//! past its limit is refused whole, before anything is written, so a
//! client sees one answer for the call and retries or sheds it; items that
//! are already there (a repeated id) take no room.
//!
//! A queue pays for it only when some partition has a limit: the policy
//! keeps the default and how many partitions have their own, and the check
//! runs only when either is set. It then reads the record of each
//! partition the call adds to, and looks up each new id once.

use std::collections::{HashMap, HashSet};

use super::outcomes::Keeping;
use super::partitions::{self, read_policy_field};
use super::scoring::already_there;
use super::types::{Anomaly, CoreError, NewItem};
use crate::store::{HashKey, Store};

pub const DEFAULT_MAX_QUEUED_FIELD: &str = "default-max-queued";
/// How many partitions have a MAX-QUEUED of their own.
pub const LIMITED_COUNT_FIELD: &str = "max-queued-partitions";

/// The queue's DEFAULT-MAX-QUEUED (an unreadable one reads as none and is
/// reported).
pub fn read_default(store: &mut impl Store, anomalies: &mut Vec<Anomaly>) -> Option<u64> {
    let count = |text: &str| text.parse().ok().filter(|&n| n > 0);
    read_policy_field(store, DEFAULT_MAX_QUEUED_FIELD, count, anomalies)
}

/// Refuses `items` when they would take a partition past its MAX-QUEUED
/// (its own, else the default): [`CoreError::PartitionFull`] for the first
/// such partition in the call's order. Writes nothing.
pub(super) fn admit(
    store: &mut impl Store,
    keeping: Keeping,
    items: &[NewItem<'_>],
    now_ms: i64,
    anomalies: &mut Vec<Anomaly>,
) -> Result<(), CoreError> {
    if store.hlen(HashKey::Policy) == 0 {
        return Ok(());
    }
    let default = read_default(store, anomalies);
    let limited = store
        .hget(HashKey::Policy, LIMITED_COUNT_FIELD.as_bytes())
        .is_some_and(|count| count != b"0");
    if default.is_none() && !limited {
        return Ok(());
    }
    // The new items of each partition, in the call's order of partitions.
    let mut order: Vec<&[u8]> = Vec::new();
    let mut adding: HashMap<&[u8], u64> = HashMap::new();
    let mut seen: HashSet<&[u8]> = HashSet::new();
    for item in items {
        if !seen.insert(item.id) || already_there(store, keeping, item.id, now_ms, anomalies) {
            continue;
        }
        let count = adding.entry(item.partition).or_insert_with(|| {
            order.push(item.partition);
            0
        });
        *count += 1;
    }
    for partition in order {
        let record = partitions::read(store, partition, anomalies).1;
        let Some(max_queued) = record.max_queued.or(default) else {
            continue;
        };
        let waiting = record.queued.saturating_add(record.delayed);
        let adds = adding[partition];
        if waiting.saturating_add(adds) > max_queued {
            return Err(CoreError::PartitionFull {
                partition: partition.to_vec(),
                max_queued,
                waiting,
                adds,
                refused: items.len() as u64,
            });
        }
    }
    Ok(())
}
