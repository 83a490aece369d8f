//! `VTRR.NACK`: a worker gives its leased item back, fenced by its token.

use super::admission;
use super::dead::{bury, bury_without_payload, read_policy, Reason};
use super::delay::postpone;
use super::meta;
use super::partitions::State;
use super::scoring::requeue;
use super::types::{Anomaly, CoreError};
use super::virtual_time::read_placing;
use super::{counters, leased};
use crate::store::{HashKey, Store};

/// What the worker asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nack {
    /// Back in the queue at once, rescored like a reclaim.
    Requeue,
    /// A delayed item due `ms` after now (a retry with backoff).
    Delay { ms: i64 },
    /// Straight to the dead-letter set (a poison job).
    Dead,
    /// Back in the queue at once without counting a nack: the worker gives
    /// the item back unrun (it is shutting down), which is no failure, so
    /// MAX-NACKS never buries an item for being released.
    Release,
}

/// Where a nacked item went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nacked {
    Requeued,
    Delayed { due_ms: i64 },
    Dead(Reason),
}

/// `VTRR.NACK`: None when `token` is not the item's current lease token
/// (nothing changed). Otherwise the lease ends, `nacks[id]` counts one more
/// (but for a release), and the item goes where `nack` asks, unless that
/// count passes the policy's MAX-NACKS: then it is dead-lettered. A
/// `reason` (`REASON`: what failed) becomes the item's `last_error`, kept
/// with it in every state until it leaves (`meta::forget`) or is revived;
/// a nack without one leaves the last one given as it is.
pub fn nack(
    store: &mut impl Store,
    id: &[u8],
    token: &[u8],
    now_ms: i64,
    nack: Nack,
    reason: Option<&[u8]>,
    anomalies: &mut Vec<Anomaly>,
) -> Result<Option<Nacked>, CoreError> {
    if !leased::holds(store, id, token) {
        return Ok(None);
    }
    let at = read_placing(store, anomalies)?;
    let payload = leased::take(store, id);
    if let Some(reason) = reason {
        store.hset(HashKey::LastError, id, reason);
    }
    let past_policy = nack != Nack::Release && {
        let nacks = counters::increment(store, HashKey::Nacks, id, anomalies);
        let policy = read_policy(store, anomalies);
        policy.max_nacks.is_some_and(|max| nacks > max)
    };
    let nacked = match nack {
        _ if payload.is_none() => Nacked::Dead(Reason::PayloadMissing),
        Nack::Dead => Nacked::Dead(Reason::Nacked),
        _ if past_policy => Nacked::Dead(Reason::MaxNacks),
        Nack::Delay { ms } if ms > 0 => Nacked::Delayed {
            due_ms: now_ms.saturating_add(ms),
        },
        Nack::Delay { .. } | Nack::Requeue | Nack::Release => Nacked::Requeued,
    };
    let meta = meta::read(store, id);
    let mut partition = admission::open(store, &meta.partition, at.defaults, anomalies);
    partition.now_ms = Some(now_ms);
    partition.record.leave(State::Leased);
    if nack != Nack::Release {
        partition.record.totals.nacked += 1;
    }
    match (nacked, payload) {
        (_, None) => {
            partition.record.arrive(State::Dead);
            bury_without_payload(store, id, now_ms, anomalies);
        }
        (Nacked::Dead(reason), Some(payload)) => {
            partition.record.arrive(State::Dead);
            bury(store, id, &payload, now_ms, reason);
        }
        (Nacked::Delayed { due_ms }, Some(payload)) => {
            partition.record.arrive(State::Delayed);
            postpone(store, id, &payload, due_ms);
        }
        (Nacked::Requeued, Some(payload)) => {
            requeue(store, &at, &mut partition, id, &payload, &meta, anomalies);
        }
    }
    admission::close(store, partition);
    Ok(Some(nacked))
}
