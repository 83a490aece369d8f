//! `VTRR.STATS`.

use super::{read_current_virtual_time, CoreError};
use crate::store::{HashKey, Store, ZsetKey};

/// Counts reported by `VTRR.STATS`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub queued: u64,
    pub inflight: u64,
    pub expired: u64,
    pub partitions: u64,
    pub current_virtual_time: i64,
    pub next_expiry_ms: Option<i64>,
    pub delayed: u64,
    pub dead: u64,
    /// When the earliest delayed item falls due.
    pub next_due_ms: Option<i64>,
}

/// `VTRR.STATS`.
pub fn stats(store: &mut impl Store, now_ms: i64) -> Result<Stats, CoreError> {
    Ok(Stats {
        queued: store.zcard(ZsetKey::Queue),
        inflight: store.zcard(ZsetKey::Inflight),
        expired: store.zcount_upto(ZsetKey::Inflight, now_ms as f64),
        partitions: store.hlen(HashKey::PartitionVirtualTime),
        current_virtual_time: read_current_virtual_time(store)?,
        next_expiry_ms: store.zfirst(ZsetKey::Inflight).map(|(_, s)| s as i64),
        delayed: store.zcard(ZsetKey::Delayed),
        dead: store.zcard(ZsetKey::Dead),
        next_due_ms: store.zfirst(ZsetKey::Delayed).map(|(_, s)| s as i64),
    })
}
