//! Reclaim of expired leases: `VTRR.RECLAIM`, and the step that LEASE and
//! the timer run first.

use super::admission;
use super::dead::{bury, bury_without_payload, read_policy, Reason};
use super::meta;
use super::partitions::State;
use super::scoring::requeue;
use super::types::{CoreError, Due};
use super::virtual_time::{read_placing, Placing};
use super::{counters, leased};
use crate::store::{HashKey, Store, ZsetKey};

/// `VTRR.RECLAIM`: takes back up to `limit` leases whose expiry is <=
/// `now_ms`, in ascending (expiry, id) order.
pub fn reclaim(store: &mut impl Store, now_ms: i64, limit: usize) -> Result<Due, CoreError> {
    let mut outcome = Due::default();
    let at = read_placing(store, &mut outcome.anomalies)?;
    reclaim_at(store, &at, now_ms, limit, &mut outcome);
    Ok(outcome)
}

/// Each expired lease ends and has its `timeouts` counted; then it is
/// rescored as if freshly enqueued, or, once its timeouts pass the policy's
/// MAX-TIMEOUTS (or its payload is gone), dead-lettered. Each frees a slot
/// of its partition's cap. How many it took back.
pub(super) fn reclaim_at(
    store: &mut impl Store,
    at: &Placing,
    now_ms: i64,
    limit: usize,
    outcome: &mut Due,
) -> usize {
    if limit == 0 {
        return 0;
    }
    let expired = store.zrange_upto(ZsetKey::Inflight, now_ms as f64, limit);
    if expired.is_empty() {
        return 0;
    }
    let taken = expired.len();
    let policy = read_policy(store, &mut outcome.anomalies);
    for (id, _expiry) in expired {
        let payload = leased::take(store, &id);
        let anomalies = &mut outcome.anomalies;
        let timeouts = counters::increment(store, HashKey::Timeouts, &id, anomalies);
        outcome.reclaimed += 1;
        let meta = meta::read(store, &id);
        let mut partition = admission::open(store, &meta.partition, at.defaults, anomalies);
        partition.now_ms = Some(now_ms);
        partition.record.leave(State::Leased);
        partition.record.totals.expired += 1;
        let dies = payload.is_none() || policy.max_timeouts.is_some_and(|max| timeouts > max);
        match payload {
            Some(payload) if !dies => {
                requeue(store, at, &mut partition, &id, &payload, &meta, anomalies)
            }
            Some(payload) => bury(store, &id, &payload, now_ms, Reason::MaxTimeouts),
            None => bury_without_payload(store, &id, now_ms, anomalies),
        }
        if dies {
            partition.record.arrive(State::Dead);
            outcome.dead_lettered += 1;
        }
        admission::close(store, partition);
    }
    taken
}
