//! Reclaim of expired leases: `VTRR.RECLAIM`, and the step that LEASE and
//! the timer run first.

use super::dead::{bury, bury_without_payload, read_policy, Reason};
use super::partitions::{self, State};
use super::scoring::{partition_of, read_placing, requeue, Placing};
use super::{counters, CoreError, Due};
use crate::store::{HashKey, Store, ZsetKey};

/// `VTRR.RECLAIM`: takes back up to `limit` leases whose expiry is <=
/// `now_ms`, in ascending (expiry, id) order.
pub fn reclaim(store: &mut impl Store, now_ms: i64, limit: usize) -> Result<Due, CoreError> {
    let mut outcome = Due::default();
    let at = read_placing(store, &mut outcome.anomalies)?;
    reclaim_at(store, &at, now_ms, limit, &mut outcome);
    Ok(outcome)
}

/// Each expired lease loses its lease state and has its `timeouts` counted;
/// then it is rescored as if freshly enqueued, or, once its timeouts pass
/// the policy's MAX-TIMEOUTS (or its payload is gone), dead-lettered. Each
/// frees a slot of its partition's cap.
pub(super) fn reclaim_at(
    store: &mut impl Store,
    at: &Placing,
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
        let name = partition_of(store, &id);
        let dies = payload.is_none() || policy.max_timeouts.is_some_and(|max| timeouts > max);
        let to = dies.then_some(State::Dead);
        let anomalies = &mut outcome.anomalies;
        partitions::shift(
            store,
            &name,
            Some(State::Leased),
            to,
            at.default_cap,
            anomalies,
        );
        match payload {
            None => bury_without_payload(store, &id, now_ms, anomalies),
            Some(payload) if dies => bury(store, &id, &payload, now_ms, Reason::MaxTimeouts),
            Some(payload) => requeue(store, at, &id, &payload, anomalies),
        }
        if dies {
            outcome.dead_lettered += 1;
        }
    }
}
