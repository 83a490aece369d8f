//! `VTRR.NACK`: a worker gives its leased item back, fenced by its token.

use super::dead::{bury, bury_without_payload, read_policy, Reason};
use super::delay::hold;
use super::lease::holds_lease;
use super::partitions::{self, State};
use super::scoring::{partition_of, read_placing, requeue};
use super::{counters, Anomaly, CoreError};
use crate::store::{HashKey, Store, ZsetKey};

/// What the worker asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nack {
    /// Back in the queue at once, rescored like a reclaim.
    Requeue,
    /// A delayed item due `ms` after now (a retry with backoff).
    Delay { ms: i64 },
    /// Straight to the dead-letter set (a poison job).
    Dead,
}

/// Where a nacked item went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nacked {
    Requeued,
    Delayed { due_ms: i64 },
    Dead(Reason),
}

/// `VTRR.NACK`: None when `token` is not the item's current lease token
/// (nothing changed). Otherwise the lease ends, `nacks[id]` counts one more,
/// and the item goes where `nack` asks, unless that count passes the
/// policy's MAX-NACKS: then it is dead-lettered.
pub fn nack(
    store: &mut impl Store,
    id: &[u8],
    token: &[u8],
    now_ms: i64,
    nack: Nack,
    anomalies: &mut Vec<Anomaly>,
) -> Result<Option<Nacked>, CoreError> {
    if !holds_lease(store, id, token) {
        return Ok(None);
    }
    let at = read_placing(store, anomalies)?;
    store.zrem(ZsetKey::Inflight, id);
    let payload = store.hget(HashKey::InflightTask, id);
    store.hdel(HashKey::InflightTask, id);
    store.hdel(HashKey::Lease, id);
    let nacks = counters::increment(store, HashKey::Nacks, id, anomalies);
    let policy = read_policy(store, anomalies);
    let past_policy = policy.max_nacks.is_some_and(|max| nacks > max);
    let nacked = match nack {
        _ if payload.is_none() => Nacked::Dead(Reason::PayloadMissing),
        Nack::Dead => Nacked::Dead(Reason::Nacked),
        _ if past_policy => Nacked::Dead(Reason::MaxNacks),
        Nack::Delay { ms } if ms > 0 => Nacked::Delayed {
            due_ms: now_ms.saturating_add(ms),
        },
        Nack::Delay { .. } | Nack::Requeue => Nacked::Requeued,
    };
    let to = match nacked {
        Nacked::Dead(_) => Some(State::Dead),
        Nacked::Delayed { .. } => Some(State::Delayed),
        Nacked::Requeued => None,
    };
    let name = partition_of(store, id);
    let (from, cap) = (Some(State::Leased), at.default_cap);
    partitions::shift(store, &name, from, to, cap, anomalies);
    let Some(payload) = payload else {
        bury_without_payload(store, id, now_ms, anomalies);
        return Ok(Some(nacked));
    };
    match nacked {
        Nacked::Dead(reason) => bury(store, id, &payload, now_ms, reason),
        Nacked::Delayed { due_ms } => hold(store, id, &payload, due_ms),
        Nacked::Requeued => requeue(store, &at, id, &payload, anomalies),
    }
    Ok(Some(nacked))
}
