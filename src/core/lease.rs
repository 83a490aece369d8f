//! `VTRR.LEASE`, `VTRR.ACK` and `VTRR.RENEW`: a lease's life. (`VTRR.NACK`,
//! the other way a lease ends, is in `nack.rs`.)

use super::dead::bury_without_payload;
use super::delay::due_at;
use super::partitions::{self, read_default_cap, Partition, Record, State};
use super::scoring::{parse_current_virtual_time, partition_of, Placing};
use super::{counters, held, Anomaly, CoreError, Due, Leased};
use crate::store::{HashKey, Store, ZsetKey};

/// What `VTRR.LEASE` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRequest {
    pub now_ms: i64,
    pub lease_ms: i64,
    /// Most items to lease.
    pub count: usize,
    /// Most due items (expired leases, due delayed items) to act on first.
    pub due_limit: usize,
    /// Read each item's nack count too (WITHCOUNTERS).
    pub with_counters: bool,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct LeaseOutcome {
    pub leased: Vec<Leased>,
    /// What the call did to due items first, and what it dead-lettered.
    pub due: Due,
    /// It stopped after moving [`MAX_PARKED_PER_LEASE`] items to `held`;
    /// more may be leasable.
    pub skipped_enough: bool,
}

/// The most items of paused or capped partitions one LEASE moves out of
/// `queue` into `held`. Such items are in `queue` only if they were queued
/// before their partition came under control (later ones wait in `held`,
/// see `partitions.rs`), and each is moved once; the bound keeps the first
/// LEASE after a pause of a large backlog short. A LEASE that reaches it
/// returns what it has and says so (`LeaseOutcome::skipped_enough`).
pub const MAX_PARKED_PER_LEASE: usize = 1024;

/// `VTRR.LEASE`: acts on up to `due_limit` due items (expired leases, then
/// due delayed items), then leases up to `count` items, lowest score first,
/// all with expiry `now_ms + lease_ms`. A popped item without a payload is
/// dead-lettered instead of served; one whose partition is paused or at its
/// cap moves to `held`, keeping its score. `new_token` is called once per
/// lease.
pub fn lease(
    store: &mut impl Store,
    request: &LeaseRequest,
    mut new_token: impl FnMut() -> Vec<u8>,
) -> Result<LeaseOutcome, CoreError> {
    // Kept as stored: the end compares against it to skip an unchanged write.
    let stored_virtual_time = store.current_virtual_time();
    let current_virtual_time = parse_current_virtual_time(stored_virtual_time.as_deref())?;
    let mut outcome = LeaseOutcome::default();
    let at = Placing {
        current_virtual_time,
        default_cap: read_default_cap(store, &mut outcome.due.anomalies),
    };
    due_at(
        store,
        &at,
        request.now_ms,
        request.due_limit,
        &mut outcome.due,
    );
    let expiry_ms = request.now_ms.saturating_add(request.lease_ms);
    let mut last_served = None;
    let mut parked = 0;
    while outcome.leased.len() < request.count {
        let Some((id, score)) = store.zfirst(ZsetKey::Queue) else {
            break;
        };
        store.zrem(ZsetKey::Queue, &id);
        let anomalies = &mut outcome.due.anomalies;
        let name = partition_of(store, &id);
        let mut partition = partitions::open(store, &name, anomalies);
        let was_head = partition.record.head.as_deref() == Some(id.as_slice());
        if was_head {
            partition.record.head = None;
        }
        if let Some(time) = parking_time(&partition.record, was_head, score, at.default_cap) {
            park(store, partition, &id, time, at.default_cap);
            parked += 1;
            if parked >= MAX_PARKED_PER_LEASE {
                outcome.skipped_enough = true;
                break;
            }
            continue;
        }
        last_served = Some(score);
        partition.record.queued = partition.record.queued.saturating_sub(1);
        let payload = store.hget(HashKey::Task, &id);
        store.hdel(HashKey::Task, &id);
        let Some(payload) = payload else {
            partition.record.dead += 1;
            partitions::settle(store, &mut partition, at.default_cap);
            partitions::close(store, partition);
            bury_without_payload(store, &id, request.now_ms, anomalies);
            outcome.due.dead_lettered += 1;
            continue;
        };
        partition.record.leased += 1;
        partitions::settle(store, &mut partition, at.default_cap);
        partitions::close(store, partition);
        store.hset(HashKey::InflightTask, &id, &payload);
        store.zadd(ZsetKey::Inflight, &id, expiry_ms as f64);
        let token = new_token();
        store.hset(HashKey::Lease, &id, &token);
        let timeouts = counters::read(store, HashKey::Timeouts, &id, anomalies);
        let nacks = request
            .with_counters
            .then(|| counters::read(store, HashKey::Nacks, &id, anomalies));
        outcome.leased.push(Leased {
            id,
            payload,
            token,
            timeouts,
            nacks,
            score,
        });
    }
    if let Some(last) = last_served {
        if store.zcard(ZsetKey::Queue) == 0 && store.zcard(ZsetKey::Held) == 0 {
            // Drained: restart virtual time; lease state is left alone.
            store.set_current_virtual_time(0);
            store.delete(HashKey::Task);
            store.delete(HashKey::PartitionVirtualTime);
        } else {
            // Never backwards: a capped partition's owed item, served when
            // its slot frees, keeps the lower time it was queued at.
            let popped = (last.floor() as i64).max(current_virtual_time);
            // Rewriting an unchanged value would cost an effect per lease
            // (most leases pop a score the previous one already set).
            if stored_virtual_time.as_deref() != Some(popped.to_string().as_bytes()) {
                store.set_current_virtual_time(popped);
            }
        }
    }
    Ok(outcome)
}

/// Where an item popped at `score` waits instead of being served: an item
/// queued before its partition rejoined takes its shifted place among the
/// partition's held items; one whose partition is paused or at its cap
/// waits there at its time. None: serve it.
fn parking_time(
    record: &Record,
    was_head: bool,
    score: f64,
    default_cap: Option<u64>,
) -> Option<i64> {
    let score = score as i64;
    match record.owed_shift(was_head, score) {
        Some(shift) => Some(score.saturating_add(shift)),
        None => (!record.servable(default_cap)).then_some(score),
    }
}

/// Moves a popped item to `held` at `time` and settles its partition.
fn park(
    store: &mut impl Store,
    mut partition: Partition,
    id: &[u8],
    time: i64,
    default_cap: Option<u64>,
) {
    held::park_popped(store, &mut partition, id, time);
    partitions::settle(store, &mut partition, default_cap);
    partitions::close(store, partition);
}

/// Parks up to `limit` items at the front of `queue` as a LEASE would
/// (what a LEASE that stopped at [`MAX_PARKED_PER_LEASE`] left; the timer
/// goes on with it), stopping at the first item a LEASE would serve.
/// Whether it stopped at `limit`.
pub(super) fn park_front(
    store: &mut impl Store,
    at: &Placing,
    limit: usize,
    outcome: &mut Due,
) -> bool {
    let mut parked = 0;
    while parked < limit {
        let Some((id, score)) = store.zfirst(ZsetKey::Queue) else {
            return false;
        };
        let name = partition_of(store, &id);
        let mut partition = partitions::open(store, &name, &mut outcome.anomalies);
        let was_head = partition.record.head.as_deref() == Some(id.as_slice());
        let Some(time) = parking_time(&partition.record, was_head, score, at.default_cap) else {
            return false;
        };
        store.zrem(ZsetKey::Queue, &id);
        if was_head {
            partition.record.head = None;
        }
        park(store, partition, &id, time, at.default_cap);
        parked += 1;
        outcome.parked += 1;
    }
    true
}

/// Fenced: true when `token` is the item's current lease token.
pub(super) fn holds_lease(store: &mut impl Store, id: &[u8], token: &[u8]) -> bool {
    store
        .hget(HashKey::Lease, id)
        .is_some_and(|stored| stored == token)
}

/// `VTRR.ACK`: finishes each (id, token) pair whose token is current. The
/// slot each frees lets its partition's next held item into `queue`.
pub fn ack(store: &mut impl Store, pairs: &[(&[u8], &[u8])], anomalies: &mut Vec<Anomaly>) -> u64 {
    let mut acked = 0;
    let mut default_cap = None;
    for (id, token) in pairs {
        if !holds_lease(store, id, token) {
            continue;
        }
        let default_cap = *default_cap.get_or_insert_with(|| read_default_cap(store, anomalies));
        let name = partition_of(store, id);
        partitions::shift(
            store,
            &name,
            Some(State::Leased),
            None,
            default_cap,
            anomalies,
        );
        store.zrem(ZsetKey::Inflight, id);
        store.hdel(HashKey::InflightTask, id);
        store.hdel(HashKey::Lease, id);
        store.hdel(HashKey::Meta, id);
        store.hdel(HashKey::Timeouts, id);
        store.hdel(HashKey::Nacks, id);
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
