//! What falls due with time: expired leases, due delayed items and
//! refills, acted on first by every LEASE and by the timer; and the
//! timer's own: recurring schedules' runs, and its share of the parking of
//! partitions that came under control.

use super::admission::{self, park_queued, MAX_PARKED_PER_CALL};
use super::cron_search::Steps;
use super::delay::promote_at;
use super::outcomes;
use super::partitions::read_defaults;
use super::queue_limits;
use super::reclaim::reclaim_at;
use super::schedule::fire_at;
use super::types::{CoreError, Due};
use super::virtual_time::{read_placing, Placing};
use crate::store::{Store, ZsetKey};

/// What of a queue is due at `now_ms`, at most `limit` items: expired
/// leases first, then due delayed items, then rate-limited partitions
/// whose next token is due. How many it took.
pub(super) fn due_at(
    store: &mut impl Store,
    at: &Placing,
    now_ms: i64,
    limit: usize,
    outcome: &mut Due,
) -> usize {
    let reclaimed = reclaim_at(store, at, now_ms, limit, outcome);
    let limit = limit.saturating_sub(reclaimed);
    let promoted = promote_at(store, at, now_ms, limit, outcome);
    let refilled = refill_due(store, at, now_ms, limit.saturating_sub(promoted), outcome);
    reclaimed + promoted + refilled
}

/// The timer's run on one queue: [`due_at`], the finished jobs' records
/// whose time is up, then the due runs of
/// recurring schedules (the timer's alone: a LEASE pays nothing for them)
/// within `schedule_steps` of cron searches, then up to
/// [`MAX_PARKED_PER_CALL`] items' worth of parking under way.
pub fn run_due(
    store: &mut impl Store,
    now_ms: i64,
    limit: usize,
    schedule_steps: u32,
) -> Result<Due, CoreError> {
    let mut outcome = Due::default();
    let at = read_placing(store, &mut outcome.anomalies)?;
    let taken = due_at(store, &at, now_ms, limit, &mut outcome);
    // Outcomes past their time go (the timer's alone: a LEASE pays
    // nothing for them).
    let taken = taken + outcomes::expire_due(store, now_ms, limit.saturating_sub(taken));
    let queue = at.defaults.queue;
    let refilled = queue_limits::refill_due(store, queue, now_ms, &mut outcome.anomalies);
    // An expired lease taken back frees a slot of the queue's cap, requeued
    // or not.
    outcome.queue_room = refilled || (queue.cap.is_some() && outcome.reclaimed > 0);
    fire_at(
        store,
        &at,
        now_ms,
        limit.saturating_sub(taken),
        Steps::new(schedule_steps),
        &mut outcome,
    );
    outcome.parking_left = park_queued(store, at.defaults, MAX_PARKED_PER_CALL, &mut outcome);
    Ok(outcome)
}

/// When the queue next has something for the timer: the earliest lease
/// expiry, delayed item's due time, partition's or (with items queued) the
/// queue's next token, finished job's record's end, or schedule's next run (rounded up: a fractional score
/// written by another client must not make the timer look before anything
/// is due), or at once while a parking is under way.
pub fn next_due(store: &mut impl Store) -> Option<i64> {
    if store.zcard(ZsetKey::Parking) > 0 {
        return Some(0);
    }
    let expiry = first_due(store, ZsetKey::Inflight);
    let delayed = first_due(store, ZsetKey::Delayed);
    let token = first_due(store, ZsetKey::Throttled);
    let forgotten = first_due(store, ZsetKey::Finished);
    let limits = read_defaults(store, &mut Vec::new()).queue;
    let queue_token = queue_limits::token_due(store, limits);
    let run = next_run(store);
    expiry
        .into_iter()
        .chain(delayed)
        .chain(token)
        .chain(queue_token)
        .chain(forgotten)
        .chain(run)
        .min()
}

/// When the queue's next schedule run is due (the timer wakes for it on
/// time).
pub fn next_run(store: &mut impl Store) -> Option<i64> {
    first_due(store, ZsetKey::ScheduleDue)
}

/// The first due time of a sorted set of due times, rounded up.
fn first_due(store: &mut impl Store, key: ZsetKey) -> Option<i64> {
    store.zfirst(key).map(|(_, score)| score.ceil() as i64)
}

/// The due step's part: up to `limit` partitions whose next token is due
/// at `now_ms` are refilled, and may be served again. How many it took.
fn refill_due(
    store: &mut impl Store,
    at: &Placing,
    now_ms: i64,
    limit: usize,
    outcome: &mut Due,
) -> usize {
    if limit == 0 {
        return 0;
    }
    let due = store.zrange_upto(ZsetKey::Throttled, now_ms as f64, limit);
    for (name, _) in &due {
        let mut partition = admission::open(store, name, at.defaults, &mut outcome.anomalies);
        if partition.record.rate_in_force(at.defaults).is_none() {
            // Listed by another client, or left by one: nothing to wait for.
            store.zrem(ZsetKey::Throttled, name);
        }
        partition.record.refill(at.defaults, now_ms);
        if partition.record.has_token(at.defaults) {
            outcome.refilled += 1;
        }
        admission::close(store, partition);
    }
    due.len()
}
