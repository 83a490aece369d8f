//! `VTRR.LEASE`, `VTRR.ACK` and `VTRR.RENEW`: a lease's life. (`VTRR.NACK`,
//! the other way a lease ends, is in `nack.rs`.)

use super::admission::{self, park_queued, MAX_PARKED_PER_CALL};
use super::dead::bury_without_payload;
use super::due::due_at;
use super::levels::{of_queue_score, Level};
use super::meta;
use super::outcomes::{self, Finish, Keeping};
use super::partitions::{read_defaults, State};
use super::queue_limits::{Allowance, Stop};
use super::types::{Ack, Anomaly, CoreError, Due, Leased};
use super::virtual_time::{
    current_at, parse_current_virtual_time, rebase_if_idle, set_current_at, Placing,
};
use super::{charge, counters, leased};
use smallvec::SmallVec;

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
    /// It stopped after moving [`MAX_PARKED_PER_CALL`] items to `held`;
    /// more may be leasable.
    pub skipped_enough: bool,
    /// It stopped short of its count for the queue's own limits.
    pub queue_stop: Option<Stop>,
}

/// What `VTRR.ACK` finished: whether each lease took, whether that freed a
/// slot of the queue's own CONCURRENCY (blocked leases may go on), and
/// whether it kept an outcome (a write that depends on the clock).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settled {
    pub took: Vec<bool>,
    pub queue_room: bool,
    pub kept: bool,
}

impl Settled {
    /// How many leases it finished.
    pub fn finished(&self) -> u64 {
        self.took.iter().filter(|&&took| took).count() as u64
    }
}

/// `VTRR.LEASE`: acts on up to `due_limit` due items (expired leases, then
/// due delayed items) and visits up to `due_limit` items of a parking under
/// way, then leases up to `count` items, lowest score first,
/// all with expiry `now_ms + lease_ms`. A popped item without a payload is
/// dead-lettered instead of served; one whose partition may not be served
/// now moves to `held`, keeping its score (at most [`MAX_PARKED_PER_CALL`]
/// per call). `new_token` is called once per lease.
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
        defaults: read_defaults(store, &mut outcome.due.anomalies),
    };
    due_at(
        store,
        &at,
        request.now_ms,
        request.due_limit,
        &mut outcome.due,
    );
    // Parking under way goes on with every LEASE too, so it finishes with
    // the timer off.
    park_queued(store, at.defaults, request.due_limit, &mut outcome.due);
    let mut allowance = Allowance::open(
        store,
        at.defaults.queue,
        request.now_ms,
        &mut outcome.due.anomalies,
    );
    let expiry_ms = request.now_ms.saturating_add(request.lease_ms);
    // The highest virtual time served at each level (one, almost always).
    let mut served_at: SmallVec<[(Level, i64); 2]> = SmallVec::new();
    let mut parked = 0;
    while outcome.leased.len() < request.count {
        if let Some(stop) = allowance.as_ref().and_then(Allowance::stop) {
            // Only with something left to lease: an empty queue waits for
            // an enqueue, not for a slot or a token.
            if store.zcard(ZsetKey::Queue) > 0 {
                outcome.queue_stop = Some(stop);
            }
            break;
        }
        let Some((id, score)) = store.zfirst(ZsetKey::Queue) else {
            break;
        };
        store.zrem(ZsetKey::Queue, &id);
        let anomalies = &mut outcome.due.anomalies;
        let meta = meta::read(store, &id);
        let mut partition = admission::open(store, &meta.partition, at.defaults, anomalies);
        partition.now_ms = Some(request.now_ms);
        partition.record.refill(at.defaults, request.now_ms);
        if partition.record.head.as_deref() == Some(id.as_slice()) {
            partition.record.head = None;
        }
        if !partition.record.servable(at.defaults) {
            admission::park_popped(store, &mut partition, &id, score as i64);
            admission::close(store, partition);
            parked += 1;
            if parked >= MAX_PARKED_PER_CALL {
                outcome.skipped_enough = true;
                break;
            }
            continue;
        }
        let (level, time) = of_queue_score(score as i64);
        match served_at.iter_mut().find(|(at, _)| *at == level) {
            Some((_, last)) => *last = (*last).max(time),
            None => served_at.push((level, time)),
        }
        let payload = store.htake(HashKey::Task, &id);
        let Some(payload) = payload else {
            partition.record.leave_queued(level);
            partition.record.arrive(State::Dead);
            admission::close(store, partition);
            bury_without_payload(store, &id, request.now_ms, anomalies);
            outcome.due.dead_lettered += 1;
            continue;
        };
        partition.served(request.now_ms, level);
        partition.record.spend(at.defaults, meta.weight);
        if let Some(allowance) = allowance.as_mut() {
            allowance.took(meta.weight);
        }
        admission::close(store, partition);
        let token = new_token();
        leased::grant(store, &id, &payload, expiry_ms, &token);
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
            partition: meta.partition,
            score,
        });
    }
    if let Some(allowance) = allowance {
        allowance.close(store);
    }
    if served_at.is_empty() {
        return Ok(outcome);
    }
    if store.zcard(ZsetKey::Queue) == 0 && store.zcard(ZsetKey::Held) == 0 {
        // Drained: restart virtual time at every level; lease state is left
        // alone.
        store.set_current_virtual_time(0);
        store.delete(HashKey::Task.into());
        store.delete(HashKey::PartitionVirtualTime.into());
        store.delete(HashKey::LevelVirtualTime.into());
        return Ok(outcome);
    }
    for (level, last) in served_at {
        // Never backwards: a capped partition's owed item, served when its
        // slot frees, keeps the lower time it was queued at.
        let current = current_at(store, current_virtual_time, level);
        if level != 0 {
            if last > current {
                set_current_at(store, level, last);
            }
            rebase_if_idle(store, level, last.max(current));
            continue;
        }
        let popped = last.max(current);
        // Rewriting an unchanged value would cost an effect per lease
        // (most leases pop a score the previous one already set).
        let mut digits = itoa::Buffer::new();
        if stored_virtual_time.as_deref() != Some(digits.format(popped).as_bytes()) {
            store.set_current_virtual_time(popped);
        }
    }
    Ok(outcome)
}

/// [`ack_each`], counting the leases it finished (the core's tests use it).
#[cfg(test)]
pub fn ack(store: &mut impl Store, acks: &[Ack<'_>], anomalies: &mut Vec<Anomaly>) -> u64 {
    ack_each(store, acks, 0, anomalies).finished()
}

/// `VTRR.ACK` and `VTRR.ACKCOST`: finishes each lease whose token is
/// current, telling for each, in order, whether it finished its item
/// (`VTRR.LEASE ... ACK` replies it: a lost lease among the acks is
/// reported, not an error). The slot each frees lets its partition's next
/// held item into `queue`; a reported cost is charged to its partition
/// (`charge`); while the queue keeps outcomes, the job is recorded done at
/// `now_ms`, with its result (`outcomes`).
pub fn ack_each(
    store: &mut impl Store,
    acks: &[Ack<'_>],
    now_ms: i64,
    anomalies: &mut Vec<Anomaly>,
) -> Settled {
    let mut settled = Settled {
        took: Vec::with_capacity(acks.len()),
        ..Settled::default()
    };
    let mut defaults = None;
    for ack in acks {
        let took = leased::holds(store, ack.id, ack.token);
        settled.took.push(took);
        if !took {
            continue;
        }
        let defaults = *defaults.get_or_insert_with(|| read_defaults(store, anomalies));
        settled.queue_room |= defaults.queue.cap.is_some();
        let meta = meta::read(store, ack.id);
        let mut partition = admission::open(store, &meta.partition, defaults, anomalies);
        partition.record.leave(State::Leased);
        partition.record.totals.acked += 1;
        if let Some(cost) = ack.cost {
            let level = meta::level_of(store, ack.id);
            charge::charge(store, &mut partition, level, meta.weight, cost);
        }
        admission::close(store, partition);
        leased::end(store, ack.id);
        meta::forget(store, ack.id);
        if defaults.keeping != Keeping::default() {
            let result = ack.result.map(<[u8]>::to_vec);
            outcomes::keep(
                store,
                defaults.keeping,
                ack.id,
                Finish::Done { result },
                now_ms,
            );
            settled.kept = true;
        }
    }
    settled
}

/// `VTRR.RENEW`: moves the lease's expiry to `now_ms + lease_ms` when its
/// token is current; with a cost (`RENEW ... COST`), charges the item's
/// partition what the job cost since its last report, in full (its weight
/// is settled by the ACKCOST that ends it: `charge`).
pub fn renew(
    store: &mut impl Store,
    lease: &Ack<'_>,
    now_ms: i64,
    lease_ms: i64,
    anomalies: &mut Vec<Anomaly>,
) -> bool {
    if !leased::holds(store, lease.id, lease.token) {
        return false;
    }
    store.zadd(
        ZsetKey::Inflight,
        lease.id,
        now_ms.saturating_add(lease_ms) as f64,
    );
    if let Some(cost) = lease.cost.filter(|&cost| cost > 0) {
        let defaults = read_defaults(store, anomalies);
        let meta = meta::read(store, lease.id);
        let mut partition = admission::open(store, &meta.partition, defaults, anomalies);
        let level = meta::level_of(store, lease.id);
        charge::charge(store, &mut partition, level, 0, cost);
        admission::close(store, partition);
    }
    true
}
