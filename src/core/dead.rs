//! The dead-letter set and its policy: where items go when the queue gives
//! up on them, how an operator reads them, revives them or cancels items.

use super::admission;
use super::backlog;
use super::controls::set_defaults;
use super::meta;
use super::numbers::parse_meta;
use super::outcomes::{self, Finish, Keeping};
use super::partitions::{
    format_queue_options, read_defaults, read_policy_field, write_policy_field, State,
    QUEUE_OPTIONS_FIELD,
};
use super::queue_limits;
use super::scoring::requeue;
use super::types::{Anomaly, CoreError};
use super::virtual_time::{read_current_virtual_time, read_placing};
use super::{counters, leased};
use crate::store::{HashKey, Rate, Store, ZsetKey};

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
    /// The rate of every partition without its own (`VTRR.LIMIT`).
    DefaultRate(Option<Rate>),
    /// Most items leased at once across the queue (`queue_limits`).
    QueueConcurrency(Option<u64>),
    /// The queue's own rate (`queue_limits`).
    QueueRate(Option<Rate>),
    /// The MAX-QUEUED of every partition without its own (`backlog`).
    DefaultMaxQueued(Option<u64>),
    /// How long finished jobs' results are kept (`outcomes`).
    ResultTtl(Option<i64>),
    /// How long a finished id is not enqueued again (`outcomes`).
    Dedup(Option<i64>),
}

/// Reads the policy; a field that is not a count reads as NONE and is
/// reported.
pub fn read_policy(store: &mut impl Store, anomalies: &mut Vec<Anomaly>) -> Policy {
    let count = |text: &str| text.parse::<i64>().ok().filter(|n| *n >= 0);
    Policy {
        max_timeouts: read_policy_field(store, MAX_TIMEOUTS_FIELD, count, anomalies),
        max_nacks: read_policy_field(store, MAX_NACKS_FIELD, count, anomalies),
    }
}

/// `VTRR.POLICY` with options: applies every change.
pub fn set_policy(
    store: &mut impl Store,
    changes: &[PolicyChange],
    anomalies: &mut Vec<Anomaly>,
) -> Result<(), CoreError> {
    // The defaults first: they read the virtual time and the partition
    // names, and refuse before their first write, so before any of these.
    let before = read_defaults(store, anomalies);
    let mut after = before;
    for change in changes {
        match *change {
            PolicyChange::DefaultConcurrency(cap) => after.cap = cap,
            PolicyChange::DefaultRate(rate) => after.rate = rate,
            PolicyChange::QueueConcurrency(cap) => after.queue.cap = cap,
            PolicyChange::QueueRate(rate) => after.queue.rate = rate,
            PolicyChange::ResultTtl(ms) => after.keeping.result_ttl_ms = ms,
            PolicyChange::Dedup(ms) => after.keeping.dedup_ms = ms,
            PolicyChange::MaxTimeouts(_)
            | PolicyChange::MaxNacks(_)
            | PolicyChange::DefaultMaxQueued(_) => {}
        }
    }
    if (after.cap, after.rate) != (before.cap, before.rate) {
        read_current_virtual_time(store)?;
        set_defaults(store, before, after, anomalies)?;
    }
    if after.queue.rate != before.queue.rate {
        // The queue's rate starts with a full bucket.
        queue_limits::fill(store);
    }
    if (after.queue, after.keeping) != (before.queue, before.keeping) {
        let text = format_queue_options(after.queue, after.keeping);
        write_policy_field(
            store,
            QUEUE_OPTIONS_FIELD,
            text.as_deref().map(str::as_bytes),
        );
    }
    for change in changes {
        let (field, text) = match *change {
            PolicyChange::MaxTimeouts(value) => (MAX_TIMEOUTS_FIELD, value.map(|n| n.to_string())),
            PolicyChange::MaxNacks(value) => (MAX_NACKS_FIELD, value.map(|n| n.to_string())),
            PolicyChange::DefaultMaxQueued(max) => (
                backlog::DEFAULT_MAX_QUEUED_FIELD,
                max.map(|n| n.to_string()),
            ),
            PolicyChange::DefaultConcurrency(_)
            | PolicyChange::DefaultRate(_)
            | PolicyChange::QueueConcurrency(_)
            | PolicyChange::QueueRate(_)
            | PolicyChange::ResultTtl(_)
            | PolicyChange::Dedup(_) => continue,
        };
        // Setting what is already set writes nothing (WATCH stays intact).
        let text = text.map(String::into_bytes);
        if store.hget(HashKey::Policy, field.as_bytes()) == text {
            continue;
        }
        write_policy_field(store, field, text.as_deref());
    }
    Ok(())
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
    /// What its last `NACK ... REASON` said failed; None when no nack gave
    /// a reason.
    pub last_error: Option<Vec<u8>>,
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
                last_error: store.hget(HashKey::LastError, &id),
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
/// and its last error reset, rescored as if freshly enqueued. It reads no clock (it
/// propagates as sent on a native queue): a partition it gives a line
/// starts that line's wait at its next lease or enqueue. One that died for a missing
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
        store.hdel(HashKey::LastError, id);
        let meta = meta::read(store, id);
        let anomalies = &mut outcome.anomalies;
        let mut partition = admission::open(store, &meta.partition, at.defaults, anomalies);
        partition.record.leave(State::Dead);
        requeue(store, &at, &mut partition, id, &payload, &meta, anomalies);
        admission::close(store, partition);
        outcome.count += 1;
    }
    Ok(outcome)
}

/// `VTRR.CANCEL`: deletes each id outright, whatever its state. A leased
/// item loses its lease too, so its worker's RENEW and ACK reply 0, and
/// its slot of its partition's cap is free again.
///
/// A cancelled queued item's cost goes back to its partition once the
/// partition has nothing queued (`admission::close`), as if it had never
/// been enqueued; until then it is a gap in the partition's turns (its
/// later items keep their places). The whole weight goes back: the share
/// it was charged at may have changed since, and giving back too much only
/// lets the partition re-enter as a newcomer would, never before the
/// current virtual time.
///
/// While the queue keeps outcomes, each is recorded cancelled at `now_ms`
/// (`outcomes`).
pub fn cancel_at(
    store: &mut impl Store,
    ids: &[&[u8]],
    now_ms: i64,
    anomalies: &mut Vec<Anomaly>,
) -> Cancelled {
    let defaults = read_defaults(store, anomalies);
    let mut cancelled = Cancelled::default();
    let keep = |store: &mut _, id: &[u8], cancelled: &mut Cancelled| {
        cancelled.count += 1;
        if defaults.keeping != Keeping::default() {
            outcomes::keep(store, defaults.keeping, id, Finish::Cancelled, now_ms);
            cancelled.kept = true;
        }
    };
    for id in ids {
        let meta = meta::read(store, id);
        let mut partition = admission::open(store, &meta.partition, defaults, anomalies);
        if let Some(level) = admission::take_queued(store, &mut partition, id) {
            // Level 0's gap only: a cancelled item of another level is
            // charged to its level as if served.
            if level == 0 {
                partition.record.gap = partition.record.gap.saturating_add(meta.weight);
            }
            store.hdel(HashKey::Task, id);
            partition.record.leave_queued(level);
            meta::forget(store, id);
            admission::close(store, partition);
            keep(store, id, &mut cancelled);
            continue;
        }
        let from = if store.zrem(ZsetKey::Delayed, id) {
            store.hdel(HashKey::DelayedTask, id);
            State::Delayed
        } else if store.zrem(ZsetKey::Dead, id) {
            store.hdel(HashKey::DeadReason, id);
            store.hdel(HashKey::DeadTask, id);
            State::Dead
        } else if leased::end(store, id) {
            State::Leased
        } else {
            continue; // not there, or named twice
        };
        partition.record.leave(from);
        meta::forget(store, id);
        admission::close(store, partition);
        keep(store, id, &mut cancelled);
    }
    cancelled
}

/// What `VTRR.CANCEL` did: how many it cancelled, and whether it kept an
/// outcome (a write that depends on the clock).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled {
    pub count: u64,
    pub kept: bool,
}

/// [`cancel_at`], counting (the core's tests use it).
#[cfg(test)]
pub fn cancel(store: &mut impl Store, ids: &[&[u8]], anomalies: &mut Vec<Anomaly>) -> u64 {
    cancel_at(store, ids, 0, anomalies).count
}
