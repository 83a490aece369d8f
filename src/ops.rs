//! The operations layer: what every caller — command handlers, the
//! blocked-client callback, the timer — goes through. Each operation opens
//! the queue's keys, runs the core, commits, logs anomalies, counts INFO,
//! and notes in the timer's index what it must watch ([`watch`], the one
//! hook). It knows nothing of how its callers parse or reply.

use redis_module::{Context, RedisError};

use crate::core::{self, check, Anomaly, Leased, NewItem, Stats};
use crate::keys::QueueKey;
use crate::store::redis::{Access, Caller, RedisStore};
use crate::store::server::{new_token, now_ms, selected_db};
use crate::store::{Store, ZsetKey};
use crate::timer::index::with_index;
use crate::{config, error, info};

const ENQUEUE_KEYS: [QueueKey; 6] = [
    QueueKey::Queue,
    QueueKey::Inflight,
    QueueKey::CurrentVirtualTime,
    QueueKey::PartitionVirtualTime,
    QueueKey::Task,
    QueueKey::Meta,
];

const ACK_KEYS: [QueueKey; 5] = [
    QueueKey::Inflight,
    QueueKey::InflightTask,
    QueueKey::Lease,
    QueueKey::Meta,
    QueueKey::Timeouts,
];

const RENEW_KEYS: [QueueKey; 2] = [QueueKey::Inflight, QueueKey::Lease];

const STATS_KEYS: [QueueKey; 4] = [
    QueueKey::Queue,
    QueueKey::Inflight,
    QueueKey::PartitionVirtualTime,
    QueueKey::CurrentVirtualTime,
];

/// Opens the given keys of `queue`, mapping a wrong type or a denied key to
/// its error reply.
fn open<'ctx>(
    ctx: &'ctx Context,
    caller: Caller,
    queue: &[u8],
    keys: &[QueueKey],
    access: Access,
) -> Result<RedisStore<'ctx>, RedisError> {
    RedisStore::open(ctx, queue, keys, access, caller).map_err(|e| error::open(&e))
}

fn core_error(queue: &[u8]) -> impl Fn(core::CoreError) -> RedisError + '_ {
    move |e| error::core(&e, queue)
}

/// The one hook to the timer: something of `queue` (in the context's
/// database) falls due at `due_ms`.
fn watch(ctx: &Context, queue: &[u8], due_ms: i64) {
    let db = selected_db(ctx);
    with_index(|index| index.note_due(db, queue, due_ms));
}

/// `VTRR.ENQUEUE`: the number of items added.
pub fn enqueue(ctx: &Context, queue: &[u8], items: &[NewItem<'_>]) -> Result<u64, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, &ENQUEUE_KEYS, Access::Write)?;
    let outcome = core::enqueue(&mut store, items).map_err(core_error(queue))?;
    store.commit(c"vtrr.enqueue");
    drop(store);
    log_anomalies(ctx, queue, &outcome.anomalies);
    info::add(&info::ENQUEUED, outcome.added);
    Ok(outcome.added)
}

/// `VTRR.LEASE` (and a blocked lease's turn): reclaims, then leases up to
/// `count` items now; empty when nothing is queued.
pub fn lease(
    ctx: &Context,
    queue: &[u8],
    lease_ms: i64,
    count: usize,
) -> Result<Vec<Leased>, RedisError> {
    let now = now_ms();
    let mut store = open(ctx, Caller::Client, queue, &QueueKey::ALL, Access::Write)?;
    let outcome = core::lease(
        &mut store,
        now,
        lease_ms,
        count,
        config::reclaim_batch(),
        new_token,
    )
    .map_err(core_error(queue))?;
    store.commit(if outcome.leased.is_empty() {
        c"vtrr.reclaim"
    } else {
        c"vtrr.lease"
    });
    drop(store);
    log_anomalies(ctx, queue, &outcome.anomalies);
    info::add(&info::RECLAIMED, outcome.reclaimed);
    info::add(&info::LEASED, outcome.leased.len() as u64);
    if !outcome.leased.is_empty() {
        watch(ctx, queue, now.saturating_add(lease_ms));
    }
    Ok(outcome.leased)
}

/// `VTRR.ACK`: the number of pairs whose token was current.
pub fn ack(ctx: &Context, queue: &[u8], pairs: &[(&[u8], &[u8])]) -> Result<u64, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, &ACK_KEYS, Access::Write)?;
    let acked = core::ack(&mut store, pairs);
    store.commit(c"vtrr.ack");
    info::add(&info::ACKED, acked);
    Ok(acked)
}

/// `VTRR.RENEW`: whether the token was current. A later expiry needs no
/// watch: the index's earlier due time only makes the timer look sooner.
pub fn renew(
    ctx: &Context,
    queue: &[u8],
    id: &[u8],
    token: &[u8],
    lease_ms: i64,
) -> Result<bool, RedisError> {
    let now = now_ms();
    let mut store = open(ctx, Caller::Client, queue, &RENEW_KEYS, Access::Write)?;
    let renewed = core::renew(&mut store, id, token, now, lease_ms);
    store.commit(c"vtrr.renew");
    if renewed {
        info::add(&info::RENEWED, 1);
    }
    Ok(renewed)
}

/// `VTRR.RECLAIM` and the timer: reclaims up to `limit` leases of `queue`
/// (in the context's database) expired at `now_ms`.
pub fn reclaim(
    ctx: &Context,
    caller: Caller,
    queue: &[u8],
    now_ms: i64,
    limit: usize,
) -> Result<u64, RedisError> {
    let mut store = open(ctx, caller, queue, &QueueKey::ALL, Access::Write)?;
    let outcome = core::reclaim(&mut store, now_ms, limit).map_err(core_error(queue))?;
    store.commit(c"vtrr.reclaim");
    drop(store);
    log_anomalies(ctx, queue, &outcome.anomalies);
    info::add(&info::RECLAIMED, outcome.reclaimed);
    Ok(outcome.reclaimed)
}

/// `VTRR.STATS`.
pub fn stats(ctx: &Context, queue: &[u8]) -> Result<Stats, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, &STATS_KEYS, Access::Read)?;
    core::stats(&mut store, now_ms()).map_err(core_error(queue))
}

/// `VTRR.CHECK`: every broken invariant, as a sentence.
pub fn check(ctx: &Context, queue: &[u8]) -> Result<Vec<String>, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, &QueueKey::ALL, Access::Read)?;
    Ok(check::check(&mut store))
}

/// The earliest time something of `queue` (in the context's database) falls
/// due, read without opening anything for writing (so no WATCH is
/// disturbed); None when nothing is.
pub fn next_due(ctx: &Context, queue: &[u8]) -> Option<i64> {
    let mut store = open(
        ctx,
        Caller::Server,
        queue,
        &[QueueKey::Inflight],
        Access::Read,
    )
    .ok()?;
    store
        .zfirst(ZsetKey::Inflight)
        .map(|(_, score)| score as i64)
}

/// Logs what an operation repaired in keys written by other clients.
fn log_anomalies(ctx: &Context, queue: &[u8], anomalies: &[Anomaly]) {
    if anomalies.is_empty() {
        return;
    }
    let queue = String::from_utf8_lossy(queue);
    for anomaly in anomalies {
        let text = match anomaly {
            Anomaly::MetaUnreadable { id } => format!(
                "item {} had no readable meta; re-enqueued with weight 1 in the empty partition",
                String::from_utf8_lossy(id)
            ),
            Anomaly::PayloadMissing { id } => format!(
                "item {} had no payload; used an empty one",
                String::from_utf8_lossy(id)
            ),
            Anomaly::TimeoutsUnreadable { id } => format!(
                "item {} had an unreadable timeouts count; counted from 0",
                String::from_utf8_lossy(id)
            ),
            Anomaly::PartitionVirtualTimeUnreadable { partition } => format!(
                "partition {} had an unreadable virtual time; read as 0",
                String::from_utf8_lossy(partition)
            ),
        };
        ctx.log_warning(&format!("vtrr: queue {queue}: {text}"));
    }
}
