//! `VTRR.LEASE`, `VTRR.ACK` and `VTRR.RENEW`: a lease's life.

use super::reclaim::{read_timeouts, reclaim_at, ReclaimOutcome};
use super::scoring::parse_current_virtual_time;
use super::{Anomaly, CoreError, Leased};
use crate::store::{HashKey, Store, ZsetKey};

#[derive(Debug, Default, Clone, PartialEq)]
pub struct LeaseOutcome {
    pub leased: Vec<Leased>,
    pub reclaimed: u64,
    pub anomalies: Vec<Anomaly>,
}

/// `VTRR.LEASE`: reclaims up to `reclaim_limit` expired leases, then leases up
/// to `count` items, lowest score first, all with expiry `now_ms + lease_ms`.
/// `new_token` is called once per granted lease.
pub fn lease(
    store: &mut impl Store,
    now_ms: i64,
    lease_ms: i64,
    count: usize,
    reclaim_limit: usize,
    mut new_token: impl FnMut() -> Vec<u8>,
) -> Result<LeaseOutcome, CoreError> {
    // Kept as stored: the end compares against it to skip an unchanged write.
    let stored_virtual_time = store.current_virtual_time();
    let current_virtual_time = parse_current_virtual_time(stored_virtual_time.as_deref())?;
    let mut reclaimed = ReclaimOutcome::default();
    reclaim_at(
        store,
        current_virtual_time,
        now_ms,
        reclaim_limit,
        &mut reclaimed,
    );
    let mut outcome = LeaseOutcome {
        leased: Vec::new(),
        reclaimed: reclaimed.reclaimed,
        anomalies: reclaimed.anomalies,
    };
    let expiry_ms = now_ms.saturating_add(lease_ms);
    while outcome.leased.len() < count {
        let Some((id, score)) = store.zfirst(ZsetKey::Queue) else {
            break;
        };
        store.zrem(ZsetKey::Queue, &id);
        let payload = store.hget(HashKey::Task, &id).unwrap_or_else(|| {
            outcome
                .anomalies
                .push(Anomaly::PayloadMissing { id: id.clone() });
            Vec::new()
        });
        store.hdel(HashKey::Task, &id);
        store.hset(HashKey::InflightTask, &id, &payload);
        store.zadd(ZsetKey::Inflight, &id, expiry_ms as f64);
        let token = new_token();
        store.hset(HashKey::Lease, &id, &token);
        let timeouts = read_timeouts(store, &id, &mut outcome.anomalies);
        outcome.leased.push(Leased {
            id,
            payload,
            token,
            timeouts,
            score,
        });
    }
    if let Some(last) = outcome.leased.last() {
        if store.zcard(ZsetKey::Queue) == 0 {
            // Drained: restart virtual time; lease state is left alone.
            store.set_current_virtual_time(0);
            store.delete(HashKey::Task);
            store.delete(HashKey::PartitionVirtualTime);
        } else {
            // Rewriting an unchanged value would cost an effect per lease
            // (most leases pop a score the previous one already set).
            let popped = last.score.floor() as i64;
            if stored_virtual_time.as_deref() != Some(popped.to_string().as_bytes()) {
                store.set_current_virtual_time(popped);
            }
        }
    }
    Ok(outcome)
}

/// Fenced: true when `token` is the item's current lease token.
fn holds_lease(store: &mut impl Store, id: &[u8], token: &[u8]) -> bool {
    store
        .hget(HashKey::Lease, id)
        .is_some_and(|stored| stored == token)
}

/// `VTRR.ACK`: finishes each (id, token) pair whose token is current.
pub fn ack(store: &mut impl Store, pairs: &[(&[u8], &[u8])]) -> u64 {
    let mut acked = 0;
    for (id, token) in pairs {
        if !holds_lease(store, id, token) {
            continue;
        }
        store.zrem(ZsetKey::Inflight, id);
        store.hdel(HashKey::InflightTask, id);
        store.hdel(HashKey::Lease, id);
        store.hdel(HashKey::Meta, id);
        store.hdel(HashKey::Timeouts, id);
        acked += 1;
    }
    acked
}

/// `VTRR.RENEW`: moves the lease's expiry to `now_ms + lease_ms` when `token`
/// is current.
pub fn renew(store: &mut impl Store, id: &[u8], token: &[u8], now_ms: i64, lease_ms: i64) -> bool {
    if !holds_lease(store, id, token) {
        return false;
    }
    store.zadd(
        ZsetKey::Inflight,
        id,
        now_ms.saturating_add(lease_ms) as f64,
    );
    true
}
