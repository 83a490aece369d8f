//! What an item's `meta` says of it: its weight and its partition.

use super::levels::{Level, MAX_LEVEL};
use super::numbers::{int_field, parse_decimal, parse_meta};
use super::types::Anomaly;
use crate::store::{HashKey, Store};

/// An item's `meta` as read, and what it says.
pub(super) struct Meta {
    pub stored: Option<Vec<u8>>,
    pub weight: u64,
    /// Empty when `meta` is missing or unreadable (where such an item is
    /// placed, weight 1).
    pub partition: Vec<u8>,
}

impl Meta {
    pub fn readable(&self) -> bool {
        self.stored.as_deref().and_then(parse_meta).is_some()
    }

    /// Reports an item about to re-enter the queue without a readable
    /// `meta`: it enters with weight 1 in the empty partition.
    pub fn report_unreadable(&self, id: &[u8], anomalies: &mut Vec<Anomaly>) {
        if !self.readable() {
            anomalies.push(Anomaly::MetaUnreadable { id: id.to_vec() });
        }
    }
}

pub(super) fn read(store: &mut impl Store, id: &[u8]) -> Meta {
    let stored = store.hget(HashKey::Meta, id);
    let (weight, partition) = match stored.as_deref().and_then(parse_meta) {
        Some((weight, partition)) => (weight, partition.to_vec()),
        None => (1, Vec::new()),
    };
    Meta {
        stored,
        weight,
        partition,
    }
}

/// The partition an item's `meta` names (the empty partition when `meta`
/// is missing or unreadable, as it would be placed).
pub(super) fn partition_of(store: &mut impl Store, id: &[u8]) -> Vec<u8> {
    read(store, id).partition
}

/// The item's priority level (`priority`; missing or unreadable: 0).
pub(super) fn level_of(store: &mut impl Store, id: &[u8]) -> Level {
    int_field(store, HashKey::Priority, id, parse_decimal)
        .flatten()
        .and_then(|level| Level::try_from(level).ok())
        .filter(|level| (-MAX_LEVEL..=MAX_LEVEL).contains(level))
        .unwrap_or(0)
}

/// Records a new item's priority level, kept in every state until the
/// item leaves ([`forget`]); level 0 is the absence of one.
pub(super) fn set_level(store: &mut impl Store, id: &[u8], level: Level) {
    if level != 0 {
        store.hset_int(HashKey::Priority, id, i64::from(level));
    }
}

/// Deletes what an item leaves beside its state when it leaves the queue's
/// life: `meta`, its level, its counters and its last error.
pub(super) fn forget(store: &mut impl Store, id: &[u8]) {
    store.hdel(HashKey::Meta, id);
    store.hdel(HashKey::Priority, id);
    store.hdel(HashKey::Timeouts, id);
    store.hdel(HashKey::Nacks, id);
    store.hdel(HashKey::LastError, id);
}
