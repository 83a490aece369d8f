//! The dead-letter set and its policy: where items go when the queue gives
//! up on them, how an operator reads them, revives them or cancels items.

use super::controls::set_default_cap;
use super::partitions::{self, read_default_cap, State};
use super::scoring::{partition_of, read_placing, requeue};
use super::{counters, held, parse_meta, parse_virtual_time, Anomaly, CoreError, MAX_VIRTUAL_TIME};
use crate::store::{HashKey, Store, ZsetKey};

/// Why an item died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Its lease expired once more than MAX-TIMEOUTS allows.
    MaxTimeouts,
    /// It was nacked once more than MAX-NACKS allows.
    MaxNacks,
    /// Its worker nacked it with DEAD.
    Nacked,
    /// It had no payload when it was to be served.
    PayloadMissing,
}

impl Reason {
    pub const fn text(self) -> &'static str {
        match self {
            Reason::MaxTimeouts => "max-timeouts",
            Reason::MaxNacks => "max-nacks",
            Reason::Nacked => "nack",
            Reason::PayloadMissing => "payload missing",
        }
    }
}

/// `vtrr:<name>:policy`: when the queue gives up on an item. None (the
/// default, vtrr-queue's behaviour) never gives up.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub max_timeouts: Option<i64>,
    pub max_nacks: Option<i64>,
}

pub const MAX_TIMEOUTS_FIELD: &str = "max-timeouts";
pub const MAX_NACKS_FIELD: &str = "max-nacks";

/// One change of `VTRR.POLICY`: a field set to a limit, or (None) cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyChange {
    MaxTimeouts(Option<i64>),
    MaxNacks(Option<i64>),
    /// The cap of every partition without its own (`VTRR.LIMIT`).
    DefaultConcurrency(Option<u64>),
}

/// Reads the policy; a field that is not a count reads as NONE and is
/// reported.
pub fn read_policy(store: &mut impl Store, anomalies: &mut Vec<Anomaly>) -> Policy {
    let mut field = |name: &'static str| {
        let raw = store.hget(HashKey::Policy, name.as_bytes())?;
        let value = std::str::from_utf8(&raw)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|n| *n >= 0);
        if value.is_none() {
            anomalies.push(Anomaly::PolicyUnreadable { field: name });
        }
        value
    };
    Policy {
        max_timeouts: field(MAX_TIMEOUTS_FIELD),
        max_nacks: field(MAX_NACKS_FIELD),
    }
}

/// `VTRR.POLICY` with options: applies every change.
pub fn set_policy(store: &mut impl Store, changes: &[PolicyChange], anomalies: &mut Vec<Anomaly>) {
    for change in changes {
        let (field, value) = match *change {
            PolicyChange::MaxTimeouts(value) => (MAX_TIMEOUTS_FIELD, value),
            PolicyChange::MaxNacks(value) => (MAX_NACKS_FIELD, value),
            PolicyChange::DefaultConcurrency(cap) => {
                if read_default_cap(store, anomalies) != cap {
                    set_default_cap(store, cap, anomalies);
                }
                continue;
            }
        };
        match value {
            Some(n) => store.hset(HashKey::Policy, field.as_bytes(), n.to_string().as_bytes()),
            None => store.hdel(HashKey::Policy, field.as_bytes()),
        }
    }
}

/// Moves an item (already out of queue, inflight or delayed) to the
/// dead-letter set at `now_ms`. Its `meta` and counters stay beside it.
pub(super) fn bury(store: &mut impl Store, id: &[u8], payload: &[u8], now_ms: i64, reason: Reason) {
    store.zadd(ZsetKey::Dead, id, now_ms as f64);
    store.hset(HashKey::DeadTask, id, payload);
    store.hset(HashKey::DeadReason, id, reason.text().as_bytes());
}

/// An item found without its payload where it was to be served or moved:
/// dead-lettered (reason `payload missing`) and reported, never served empty.
pub(super) fn bury_without_payload(
    store: &mut impl Store,
    id: &[u8],
    now_ms: i64,
    anomalies: &mut Vec<Anomaly>,
) {
    anomalies.push(Anomaly::PayloadMissing { id: id.to_vec() });
    bury(store, id, &[], now_ms, Reason::PayloadMissing);
}

/// One dead item, as `VTRR.DEAD` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadItem {
    pub id: Vec<u8>,
    pub payload: Vec<u8>,
    /// None when `meta` is missing or unreadable.
    pub partition: Option<Vec<u8>>,
    pub weight: Option<u64>,
    pub timeouts: i64,
    pub nacks: i64,
    pub died_at_ms: i64,
    pub reason: Vec<u8>,
}

/// `VTRR.DEAD`: the `count` oldest dead items, oldest first.
pub fn dead_items(store: &mut impl Store, count: usize) -> Vec<DeadItem> {
    let mut anomalies = Vec::new();
    store
        .zrange_upto(ZsetKey::Dead, f64::INFINITY, count)
        .into_iter()
        .map(|(id, died_at)| {
            let meta = store.hget(HashKey::Meta, &id);
            let parsed = meta.as_deref().and_then(parse_meta);
            DeadItem {
                payload: store.hget(HashKey::DeadTask, &id).unwrap_or_default(),
                partition: parsed.map(|(_, partition)| partition.to_vec()),
                weight: parsed.map(|(weight, _)| weight),
                timeouts: counters::read(store, HashKey::Timeouts, &id, &mut anomalies),
                nacks: counters::read(store, HashKey::Nacks, &id, &mut anomalies),
                died_at_ms: died_at as i64,
                reason: store.hget(HashKey::DeadReason, &id).unwrap_or_default(),
                id,
            }
        })
        .collect()
}

/// What a call that moves items out of their state did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Moved {
    pub count: u64,
    pub anomalies: Vec<Anomaly>,
}

/// `VTRR.REVIVE`: each dead id goes back to the queue with its counters
/// reset, rescored as if freshly enqueued. One that died for a missing
/// payload (or has lost its dead payload since) has nothing to run: it
/// stays dead, and CANCEL removes it.
pub fn revive(store: &mut impl Store, ids: &[&[u8]]) -> Result<Moved, CoreError> {
    let mut outcome = Moved::default();
    let at = read_placing(store, &mut outcome.anomalies)?;
    for id in ids {
        if store.zscore(ZsetKey::Dead, id).is_none() {
            continue;
        }
        let reason = store.hget(HashKey::DeadReason, id);
        if reason.as_deref() == Some(Reason::PayloadMissing.text().as_bytes()) {
            continue;
        }
        let Some(payload) = store.hget(HashKey::DeadTask, id) else {
            continue;
        };
        store.zrem(ZsetKey::Dead, id);
        store.hdel(HashKey::DeadTask, id);
        store.hdel(HashKey::DeadReason, id);
        store.hdel(HashKey::Timeouts, id);
        store.hdel(HashKey::Nacks, id);
        let name = partition_of(store, id);
        let anomalies = &mut outcome.anomalies;
        partitions::shift(
            store,
            &name,
            Some(State::Dead),
            None,
            at.default_cap,
            anomalies,
        );
        requeue(store, &at, id, &payload, anomalies);
        outcome.count += 1;
    }
    Ok(outcome)
}

/// `VTRR.CANCEL`: deletes each id outright, whatever its state. A leased
/// item loses its lease too, so its worker's RENEW and ACK reply 0, and
/// its slot of its partition's cap is free again.
///
/// A queued item that is its partition's last gives its cost back (the
/// partition's virtual time returns to the item's start, as if it had
/// never been enqueued). The ids are taken from the highest score down, so
/// cancelling all of a partition's queued items gives all of it back; one
/// with later items of its partition behind it leaves a gap in the
/// partition's turns until the partition is next idle.
pub fn cancel(store: &mut impl Store, ids: &[&[u8]], anomalies: &mut Vec<Anomaly>) -> u64 {
    let default_cap = read_default_cap(store, anomalies);
    let mut queued: Vec<(i64, &[u8], Vec<u8>)> = Vec::new();
    let mut others: Vec<&[u8]> = Vec::new();
    for id in ids {
        let score = match store.zscore(ZsetKey::Queue, id) {
            Some(score) => Some(score as i64),
            None => held::held_at(store, id).map(|relative| {
                let name = partition_of(store, id);
                let offset = partitions::open(store, &name, anomalies).record.offset;
                relative.saturating_add(offset)
            }),
        };
        match score {
            Some(score) => queued.push((score, id, partition_of(store, id))),
            None => others.push(id),
        }
    }
    queued.sort_by(|a, b| b.0.cmp(&a.0));
    let mut cancelled = 0;
    for (score, id, name) in queued {
        let mut partition = partitions::open(store, &name, anomalies);
        let removed =
            store.zrem(ZsetKey::Queue, id) || held::remove(store, &mut partition, id).is_some();
        if !removed {
            continue; // named twice
        }
        if partition.record.head.as_deref() == Some(id) {
            partition.record.head = None;
        }
        partition.record.queued = partition.record.queued.saturating_sub(1);
        let weight = store
            .hget(HashKey::Meta, id)
            .as_deref()
            .and_then(parse_meta)
            .map(|(w, _)| w);
        let given_back = partition.record.share == 1 && give_back(store, id, score);
        if !given_back {
            // Its later items keep their places: the cost is given back
            // once the partition has nothing queued.
            let cost = weight.unwrap_or(1) / partition.record.share.max(1);
            partition.record.gap = partition.record.gap.saturating_add(cost);
        }
        store.hdel(HashKey::Task, id);
        forget(store, id);
        partitions::settle(store, &mut partition, default_cap);
        partitions::close(store, partition);
        cancelled += 1;
    }
    for id in others {
        let (from, payload_key) = if store.zrem(ZsetKey::Delayed, id) {
            (State::Delayed, HashKey::DelayedTask)
        } else if store.zrem(ZsetKey::Dead, id) {
            store.hdel(HashKey::DeadReason, id);
            (State::Dead, HashKey::DeadTask)
        } else if store.zrem(ZsetKey::Inflight, id) {
            store.hdel(HashKey::Lease, id);
            (State::Leased, HashKey::InflightTask)
        } else {
            continue;
        };
        let name = partition_of(store, id);
        partitions::shift(store, &name, Some(from), None, default_cap, anomalies);
        store.hdel(payload_key, id);
        forget(store, id);
        cancelled += 1;
    }
    cancelled
}

/// Returns a cancelled queued item's cost to its partition when nothing of
/// the partition was placed after it; whether it did.
fn give_back(store: &mut impl Store, id: &[u8], score: i64) -> bool {
    let Some(meta) = store.hget(HashKey::Meta, id) else {
        return false;
    };
    let Some((weight, partition)) = parse_meta(&meta) else {
        return false;
    };
    let start = score;
    let end = start.saturating_add(i64::try_from(weight).unwrap_or(i64::MAX));
    let next = store
        .hget(HashKey::PartitionVirtualTime, partition)
        .and_then(|raw| parse_virtual_time(&raw));
    if next != Some(end.min(MAX_VIRTUAL_TIME)) {
        return false;
    }
    store.hset(
        HashKey::PartitionVirtualTime,
        partition,
        start.to_string().as_bytes(),
    );
    true
}

/// Deletes what an item leaves beside its state: `meta` and its counters.
fn forget(store: &mut impl Store, id: &[u8]) {
    store.hdel(HashKey::Meta, id);
    store.hdel(HashKey::Timeouts, id);
    store.hdel(HashKey::Nacks, id);
}
