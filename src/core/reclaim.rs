//! `VTRR.RECLAIM`, and the reclaim step that `VTRR.LEASE` runs first.

use super::scoring::{place, read_current_virtual_time};
use super::{parse_meta, Anomaly, CoreError, NewItem};
use crate::store::{HashKey, Store, ZsetKey};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReclaimOutcome {
    pub reclaimed: u64,
    pub anomalies: Vec<Anomaly>,
}

/// `VTRR.RECLAIM`: re-enqueues up to `limit` leases whose expiry is <= `now_ms`,
/// in ascending (expiry, id) order, each rescored as if freshly enqueued.
pub fn reclaim(
    store: &mut impl Store,
    now_ms: i64,
    limit: usize,
) -> Result<ReclaimOutcome, CoreError> {
    let current_virtual_time = read_current_virtual_time(store)?;
    let mut outcome = ReclaimOutcome::default();
    reclaim_at(store, current_virtual_time, now_ms, limit, &mut outcome);
    Ok(outcome)
}

pub(super) fn reclaim_at(
    store: &mut impl Store,
    current_virtual_time: i64,
    now_ms: i64,
    limit: usize,
    outcome: &mut ReclaimOutcome,
) {
    if limit == 0 {
        return;
    }
    for (id, _expiry) in store.zrange_upto(ZsetKey::Inflight, now_ms as f64, limit) {
        store.zrem(ZsetKey::Inflight, &id);
        let payload = store.hget(HashKey::InflightTask, &id).unwrap_or_else(|| {
            outcome
                .anomalies
                .push(Anomaly::PayloadMissing { id: id.clone() });
            Vec::new()
        });
        store.hdel(HashKey::InflightTask, &id);
        store.hdel(HashKey::Lease, &id);
        let timeouts = read_timeouts(store, &id, &mut outcome.anomalies).saturating_add(1);
        store.hset(HashKey::Timeouts, &id, timeouts.to_string().as_bytes());
        let meta = store.hget(HashKey::Meta, &id);
        let (weight, partition) = match meta.as_deref().and_then(parse_meta) {
            Some((weight, partition)) => (weight, partition.to_vec()),
            None => {
                outcome
                    .anomalies
                    .push(Anomaly::MetaUnreadable { id: id.clone() });
                (1, Vec::new())
            }
        };
        let item = NewItem {
            partition: &partition,
            id: &id,
            weight,
            payload: &payload,
        };
        place(
            store,
            current_virtual_time,
            &item,
            meta.as_deref(),
            &mut outcome.anomalies,
        );
        outcome.reclaimed += 1;
    }
}

pub(super) fn read_timeouts(
    store: &mut impl Store,
    id: &[u8],
    anomalies: &mut Vec<Anomaly>,
) -> i64 {
    match store.hget(HashKey::Timeouts, id) {
        None => 0,
        Some(raw) => std::str::from_utf8(&raw)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|n| *n >= 0)
            .unwrap_or_else(|| {
                anomalies.push(Anomaly::TimeoutsUnreadable { id: id.to_vec() });
                0
            }),
    }
}
