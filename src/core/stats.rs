//! `VTRR.STATS`.

use super::controls::control_counts;
use super::partitions::read_defaults;
use super::partitions::Totals;
use super::queue_limits;
use super::ranks::{oldest_waiting_since, queue_totals, waited};
use super::types::{Anomaly, CoreError};
use super::virtual_time::read_current_virtual_time;
use crate::store::{HashKey, Store, ZsetKey};

/// Counts reported by `VTRR.STATS`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub queued: u64,
    pub inflight: u64,
    pub expired: u64,
    /// Partitions with a record: those with items or settings, the ones
    /// `VTRR.PARTITIONS` lists.
    pub partitions: u64,
    /// Partitions with items queued (held ones included): the queued
    /// ranking's size, O(1) (what a sharded queue's rotation weighs a
    /// sub-queue by, without a scan).
    pub queued_partitions: u64,
    pub current_virtual_time: i64,
    pub next_expiry_ms: Option<i64>,
    pub delayed: u64,
    pub dead: u64,
    /// When the earliest delayed item falls due.
    pub next_due_ms: Option<i64>,
    /// Of the queued items, those waiting in `held` (their partition is
    /// paused, at its cap, or has its head in `queue`).
    pub held: u64,
    pub paused_partitions: u64,
    pub capped_partitions: u64,
    /// How long the longest-waiting partition's line has waited (ms).
    pub oldest_waiting_ms: Option<i64>,
    pub totals: Totals,
    /// The whole tokens of the queue's own rate (None: it has none).
    pub tokens: Option<i64>,
}

/// `VTRR.STATS`.
pub fn stats(
    store: &mut impl Store,
    now_ms: i64,
    anomalies: &mut Vec<Anomaly>,
) -> Result<Stats, CoreError> {
    let held = store.zcard(ZsetKey::Held);
    let (paused_partitions, capped_partitions) = control_counts(store);
    Ok(Stats {
        queued: store.zcard(ZsetKey::Queue) + held,
        held,
        paused_partitions,
        capped_partitions,
        inflight: store.zcard(ZsetKey::Inflight),
        expired: store.zcount_upto(ZsetKey::Inflight, now_ms as f64)?,
        partitions: store.hlen(HashKey::Partitions),
        queued_partitions: store.zcard(ZsetKey::RankQueued),
        current_virtual_time: read_current_virtual_time(store)?,
        next_expiry_ms: store.zfirst(ZsetKey::Inflight).map(|(_, s)| s as i64),
        delayed: store.zcard(ZsetKey::Delayed),
        dead: store.zcard(ZsetKey::Dead),
        next_due_ms: store.zfirst(ZsetKey::Delayed).map(|(_, s)| s as i64),
        oldest_waiting_ms: oldest_waiting_since(store, anomalies)
            .map(|since| waited(since, now_ms)),
        totals: queue_totals(store, anomalies),
        tokens: {
            let limits = read_defaults(store, anomalies).queue;
            queue_limits::tokens(store, limits, now_ms, anomalies)
        },
    })
}
