//! Reclaim of expired leases: `VTRR.RECLAIM`, and the step that LEASE and
//! the timer run first.

use super::dead::{bury, bury_without_payload, read_policy, Reason};
use super::scoring::{read_current_virtual_time, requeue};
use super::{counters, CoreError, Due};
use crate::store::{HashKey, Store, ZsetKey};

/// `VTRR.RECLAIM`: takes back up to `limit` leases whose expiry is <=
/// `now_ms`, in ascending (expiry, id) order.
pub fn reclaim(store: &mut impl Store, now_ms: i64, limit: usize) -> Result<Due, CoreError> {
    let current_virtual_time = read_current_virtual_time(store)?;
    let mut outcome = Due::default();
    reclaim_at(store, current_virtual_time, now_ms, limit, &mut outcome);
    Ok(outcome)
}

/// Each expired lease loses its lease state and has its `timeouts` counted;
/// then it is rescored as if freshly enqueued, or, once its timeouts pass
/// the policy's MAX-TIMEOUTS (or its payload is gone), dead-lettered.
pub(super) fn reclaim_at(
    store: &mut impl Store,
    current_virtual_time: i64,
    now_ms: i64,
    limit: usize,
    outcome: &mut Due,
) {
    if limit == 0 {
        return;
    }
    let expired = store.zrange_upto(ZsetKey::Inflight, now_ms as f64, limit);
    if expired.is_empty() {
        return;
    }
    let policy = read_policy(store, &mut outcome.anomalies);
    for (id, _expiry) in expired {
        store.zrem(ZsetKey::Inflight, &id);
        let payload = store.hget(HashKey::InflightTask, &id);
        store.hdel(HashKey::InflightTask, &id);
        store.hdel(HashKey::Lease, &id);
        let timeouts = counters::increment(store, HashKey::Timeouts, &id, &mut outcome.anomalies);
        outcome.reclaimed += 1;
        let Some(payload) = payload else {
            bury_without_payload(store, &id, now_ms, &mut outcome.anomalies);
            outcome.dead_lettered += 1;
            continue;
        };
        if policy.max_timeouts.is_some_and(|max| timeouts > max) {
            bury(store, &id, &payload, now_ms, Reason::MaxTimeouts);
            outcome.dead_lettered += 1;
        } else {
            requeue(
                store,
                current_virtual_time,
                &id,
                &payload,
                &mut outcome.anomalies,
            );
        }
    }
}
