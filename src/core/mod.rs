//! The VTRR fair queue with leases, as plain Rust over [`Store`].
//!
//! Nothing here reads a clock or draws randomness: `now_ms` and lease tokens
//! are passed in, so every function is deterministic and testable without a
//! server. One scoring function ([`place`]) serves enqueue and reclaim.

pub mod check;
mod numbers;

use crate::store::{HashKey, Store, ZsetKey};
pub use numbers::{format_meta, parse_meta, parse_virtual_time, MAX_VIRTUAL_TIME};

/// Why a core operation refused to run. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// `current_virtual_time` holds something that is not a number.
    CurrentVirtualTimeNotInteger,
}

/// Something odd found in the keys (written by another client) and repaired
/// without losing the item. The command layer logs these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anomaly {
    /// A reclaimed item had no readable `meta`; re-enqueued with weight 1 in
    /// the empty partition.
    MetaUnreadable { id: Vec<u8> },
    /// A queued or leased item had no payload; an empty one was used.
    PayloadMissing { id: Vec<u8> },
    /// `timeouts[id]` was not an integer; counted from 0.
    TimeoutsUnreadable { id: Vec<u8> },
    /// `partition_virtual_time[partition]` was not a number; read as 0.
    PartitionVirtualTimeUnreadable { partition: Vec<u8> },
}

/// One item to enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewItem<'a> {
    pub partition: &'a [u8],
    pub id: &'a [u8],
    pub weight: u64,
    pub payload: &'a [u8],
}

/// One granted lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Leased {
    pub id: Vec<u8>,
    pub payload: Vec<u8>,
    pub token: Vec<u8>,
    pub timeouts: i64,
    /// The item's virtual-time score when it was popped.
    pub score: f64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EnqueueOutcome {
    pub added: u64,
    pub anomalies: Vec<Anomaly>,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct LeaseOutcome {
    pub leased: Vec<Leased>,
    pub reclaimed: u64,
    pub anomalies: Vec<Anomaly>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReclaimOutcome {
    pub reclaimed: u64,
    pub anomalies: Vec<Anomaly>,
}

/// Counts reported by `VTRR.STATS`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub queued: u64,
    pub inflight: u64,
    pub expired: u64,
    pub partitions: u64,
    pub current_virtual_time: i64,
    pub next_expiry_ms: Option<i64>,
}

/// Reads `current_virtual_time` (missing: 0). Call once per command, before
/// the first write, so a bad value refuses the command and changes nothing.
pub fn read_current_virtual_time(store: &mut impl Store) -> Result<i64, CoreError> {
    parse_current_virtual_time(store.current_virtual_time().as_deref())
}

fn parse_current_virtual_time(raw: Option<&[u8]>) -> Result<i64, CoreError> {
    match raw {
        None => Ok(0),
        Some(raw) => parse_virtual_time(raw).ok_or(CoreError::CurrentVirtualTimeNotInteger),
    }
}

/// The VTRR scoring rule, shared by enqueue and reclaim: the item starts at
/// `max(partition's next virtual time, current virtual time + 1)` and moves
/// its partition's virtual time on by `weight`. `stored_meta` is the item's
/// `meta` as read (reclaim); it is not rewritten when already right.
fn place(
    store: &mut impl Store,
    current_virtual_time: i64,
    item: &NewItem<'_>,
    stored_meta: Option<&[u8]>,
    anomalies: &mut Vec<Anomaly>,
) {
    let partition_virtual_time = match store.hget(HashKey::PartitionVirtualTime, item.partition) {
        None => 0,
        Some(raw) => parse_virtual_time(&raw).unwrap_or_else(|| {
            anomalies.push(Anomaly::PartitionVirtualTimeUnreadable {
                partition: item.partition.to_vec(),
            });
            0
        }),
    };
    let start = partition_virtual_time
        .max(current_virtual_time.saturating_add(1))
        .min(MAX_VIRTUAL_TIME);
    let weight = i64::try_from(item.weight).unwrap_or(i64::MAX);
    let next = start.saturating_add(weight).min(MAX_VIRTUAL_TIME);
    store.zadd(ZsetKey::Queue, item.id, start as f64);
    store.hset(
        HashKey::PartitionVirtualTime,
        item.partition,
        next.to_string().as_bytes(),
    );
    store.hset(HashKey::Task, item.id, item.payload);
    let meta = format_meta(item.weight, item.partition);
    if stored_meta != Some(meta.as_slice()) {
        store.hset(HashKey::Meta, item.id, &meta);
    }
}

/// `VTRR.ENQUEUE`: adds each item not already queued or leased.
pub fn enqueue(store: &mut impl Store, items: &[NewItem<'_>]) -> Result<EnqueueOutcome, CoreError> {
    let current_virtual_time = read_current_virtual_time(store)?;
    let mut outcome = EnqueueOutcome::default();
    for item in items {
        let present = store.zscore(ZsetKey::Queue, item.id).is_some()
            || store.zscore(ZsetKey::Inflight, item.id).is_some();
        if present {
            continue;
        }
        place(
            store,
            current_virtual_time,
            item,
            None,
            &mut outcome.anomalies,
        );
        outcome.added += 1;
    }
    Ok(outcome)
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

fn reclaim_at(
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

fn read_timeouts(store: &mut impl Store, id: &[u8], anomalies: &mut Vec<Anomaly>) -> i64 {
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

/// `VTRR.STATS`.
pub fn stats(store: &mut impl Store, now_ms: i64) -> Result<Stats, CoreError> {
    Ok(Stats {
        queued: store.zcard(ZsetKey::Queue),
        inflight: store.zcard(ZsetKey::Inflight),
        expired: store.zcount_upto(ZsetKey::Inflight, now_ms as f64),
        partitions: store.hlen(HashKey::PartitionVirtualTime),
        current_virtual_time: read_current_virtual_time(store)?,
        next_expiry_ms: store.zfirst(ZsetKey::Inflight).map(|(_, s)| s as i64),
    })
}

#[cfg(test)]
mod tests;
