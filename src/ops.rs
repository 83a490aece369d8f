//! The operations layer: what every caller — command handlers, the
//! blocked-client callback, the timer — goes through. Each operation opens
//! the queue's keys, runs the core, commits, logs anomalies, counts INFO,
//! and notes in the timer's index what it must watch ([`watch`], the one
//! hook). It knows nothing of how its callers parse or reply.

use std::ffi::CStr;

use redis_module::{Context, RedisError};

use crate::config::Replication;
use crate::core::partitions::Record;
use crate::core::{
    self, check, Anomaly, CoreOp, DeadItem, Due, LeaseRequest, Leased, LimitChange, Nack, Nacked,
    NewItem, PartitionView, Policy, PolicyChange, Stats,
};
use crate::replay::{Apply, Operation};
use crate::store::redis::{Caller, OpenError, Propagate, RedisStore};
use crate::store::server::{new_token, now_ms, selected_db};
use crate::store::{Store, ZsetKey};
use crate::timer::index::with_index;
use crate::{config, error, info};

/// Opens the keys of `queue` that `op` declares, mapping a wrong type or a
/// denied key to its error reply.
fn open<'ctx>(
    ctx: &'ctx Context,
    caller: Caller,
    queue: &[u8],
    op: CoreOp,
) -> Result<RedisStore<'ctx>, RedisError> {
    RedisStore::open(ctx, queue, op.into(), caller).map_err(|e| error::open(&e))
}

fn core_error(queue: &[u8]) -> impl Fn(core::CoreError) -> RedisError + '_ {
    move |e| error::core(&e, queue)
}

/// When a time-dependent operation runs, and the lease tokens it draws: the
/// server's clock and fresh tokens, or the master's (`VTRR.APPLY`).
pub struct Moment<'a> {
    pub now_ms: i64,
    replayed_tokens: Option<&'a [&'a [u8]]>,
}

impl<'a> Moment<'a> {
    pub fn now() -> Moment<'static> {
        Moment {
            now_ms: now_ms(),
            replayed_tokens: None,
        }
    }

    /// As the master ran it: its clock reading and the tokens it drew.
    pub fn replayed(now_ms: i64, tokens: &'a [&'a [u8]]) -> Moment<'a> {
        Moment {
            now_ms,
            replayed_tokens: Some(tokens),
        }
    }
}

/// How a time-dependent call propagates: as `VTRR.APPLY` with what it used,
/// or as its effects in `vtrr.replication effects` mode.
fn applied(queue: &[u8], now_ms: i64, operation: Operation<'_>) -> Propagate {
    match config::replication() {
        Replication::effects => Propagate::Effects,
        Replication::commands => Propagate::Apply(Apply { now_ms, operation }.to_args(queue)),
    }
}

/// How a deterministic call (ENQUEUE, ACK) propagates: as it was sent, or
/// as its effects in `vtrr.replication effects` mode.
fn verbatim() -> Propagate {
    match config::replication() {
        Replication::effects => Propagate::Effects,
        Replication::commands => Propagate::Verbatim,
    }
}

/// The one hook to the timer: something of `queue` (in the context's
/// database) falls due at `due_ms`.
fn watch(ctx: &Context, queue: &[u8], due_ms: i64) {
    let db = selected_db(ctx);
    with_index(|index| index.note_due(db, queue, due_ms));
}

/// `VTRR.ENQUEUE`: the number of items added.
pub fn enqueue(ctx: &Context, queue: &[u8], items: &[NewItem<'_>]) -> Result<u64, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, CoreOp::Enqueue)?;
    let outcome = core::enqueue(&mut store, items).map_err(core_error(queue))?;
    // Deterministic: the same call on the same keys writes the same.
    store.commit(c"vtrr.enqueue", verbatim);
    drop(store);
    log_anomalies(ctx, queue, &outcome.anomalies);
    info::add(&info::ENQUEUED, outcome.added);
    Ok(outcome.added)
}

/// `VTRR.DEFER`: the number of items added, leasable at `due_ms`.
pub fn defer(
    ctx: &Context,
    queue: &[u8],
    at: &Moment,
    due_ms: i64,
    items: &[NewItem<'_>],
) -> Result<u64, RedisError> {
    let now = at.now_ms;
    let delayed = due_ms > now;
    let mut store = open(ctx, Caller::Client, queue, CoreOp::Defer)?;
    let outcome = core::defer(&mut store, now, due_ms, items).map_err(core_error(queue))?;
    store.commit(
        if delayed {
            c"vtrr.defer"
        } else {
            c"vtrr.enqueue"
        },
        || {
            applied(
                queue,
                now,
                Operation::Defer {
                    due_ms,
                    items: items.to_vec(),
                },
            )
        },
    );
    drop(store);
    log_anomalies(ctx, queue, &outcome.anomalies);
    if delayed {
        info::add(&info::DEFERRED, outcome.added);
        if outcome.added > 0 {
            watch(ctx, queue, due_ms);
        }
    } else {
        info::add(&info::ENQUEUED, outcome.added);
    }
    Ok(outcome.added)
}

/// `VTRR.LEASE` (and a blocked lease's turn): acts on due items, then leases
/// up to `count` items now; empty when nothing is queued.
pub fn lease(
    ctx: &Context,
    queue: &[u8],
    at: &Moment,
    lease_ms: i64,
    count: usize,
    due_limit: usize,
    with_counters: bool,
) -> Result<Vec<Leased>, RedisError> {
    let request = LeaseRequest {
        now_ms: at.now_ms,
        lease_ms,
        count,
        due_limit,
        with_counters,
    };
    let mut store = open(ctx, Caller::Client, queue, CoreOp::Lease)?;
    let mut replayed = at.replayed_tokens.map(|tokens| tokens.iter());
    let mut diverged = false;
    let draw = || match replayed.as_mut() {
        None => new_token(),
        Some(tokens) => tokens.next().map(|t| t.to_vec()).unwrap_or_else(|| {
            diverged = true;
            new_token()
        }),
    };
    let outcome = core::lease(&mut store, &request, draw).map_err(core_error(queue))?;
    if diverged || replayed.is_some_and(|mut left| left.next().is_some()) {
        ctx.log_warning(&format!(
            "vtrr: replaying a LEASE of queue {} leased {} items where the master leased another number: this server's copy differs from its master's",
            String::from_utf8_lossy(queue),
            outcome.leased.len()
        ));
    }
    let event = if outcome.leased.is_empty() {
        due_event(&outcome.due)
    } else {
        // What the first step put back in the queue beyond the items just
        // leased, for dispatchers that wake workers on these events.
        if outcome.due.reclaimed > 0 {
            store.notify(c"vtrr.reclaim");
        }
        if outcome.due.promoted > 0 {
            store.notify(c"vtrr.promote");
        }
        c"vtrr.lease"
    };
    notify_dead(&store, &outcome.due, event);
    store.commit(event, || {
        applied(
            queue,
            request.now_ms,
            Operation::Lease {
                lease_ms,
                count,
                due_limit,
                tokens: outcome.leased.iter().map(|l| l.token.as_slice()).collect(),
            },
        )
    });
    drop(store);
    if outcome.skipped_enough {
        // It stopped early: the timer goes on parking (a bounded number per
        // run), with no client traffic, and wakes blocked clients when
        // it has. (Signalling here would let a blocked client's turns run
        // back to back in one event-loop pass, unbounded.)
        watch(ctx, queue, request.now_ms);
    }
    count_due(ctx, queue, &outcome.due);
    info::add(&info::LEASED, outcome.leased.len() as u64);
    if !outcome.leased.is_empty() {
        watch(ctx, queue, request.now_ms.saturating_add(lease_ms));
    }
    Ok(outcome.leased)
}

/// `VTRR.ACK`: the number of pairs whose token was current.
pub fn ack(ctx: &Context, queue: &[u8], pairs: &[(&[u8], &[u8])]) -> Result<u64, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, CoreOp::Ack)?;
    let mut anomalies = Vec::new();
    let acked = core::ack(&mut store, pairs, &mut anomalies);
    store.commit(c"vtrr.ack", verbatim);
    drop(store);
    log_anomalies(ctx, queue, &anomalies);
    info::add(&info::ACKED, acked);
    Ok(acked)
}

/// `VTRR.RENEW`: whether the token was current. The new expiry is watched:
/// a renewal may shorten a lease, and the index keeps the earliest time, so
/// a later expiry costs nothing.
pub fn renew(
    ctx: &Context,
    queue: &[u8],
    at: &Moment,
    id: &[u8],
    token: &[u8],
    lease_ms: i64,
) -> Result<bool, RedisError> {
    let now = at.now_ms;
    let mut store = open(ctx, Caller::Client, queue, CoreOp::Renew)?;
    let renewed = core::renew(&mut store, id, token, now, lease_ms);
    store.commit(c"vtrr.renew", || {
        applied(
            queue,
            now,
            Operation::Renew {
                id,
                token,
                lease_ms,
            },
        )
    });
    drop(store);
    if renewed {
        info::add(&info::RENEWED, 1);
        watch(ctx, queue, now.saturating_add(lease_ms));
    }
    Ok(renewed)
}

/// `VTRR.NACK`: None when the token was stale (nothing changed), else
/// where the item went.
pub fn nack(
    ctx: &Context,
    queue: &[u8],
    at: &Moment,
    id: &[u8],
    token: &[u8],
    how: Nack,
) -> Result<Option<Nacked>, RedisError> {
    let now = at.now_ms;
    let mut store = open(ctx, Caller::Client, queue, CoreOp::Nack)?;
    let mut anomalies = Vec::new();
    let nacked =
        core::nack(&mut store, id, token, now, how, &mut anomalies).map_err(core_error(queue))?;
    if matches!(nacked, Some(Nacked::Dead(_))) {
        store.notify(DEAD_EVENT);
    }
    store.commit(c"vtrr.nack", || {
        applied(queue, now, Operation::Nack { id, token, how })
    });
    drop(store);
    log_anomalies(ctx, queue, &anomalies);
    match nacked {
        None => {}
        Some(how) => {
            info::add(&info::NACKED, 1);
            match how {
                Nacked::Dead(_) => info::add(&info::DEAD_LETTERED, 1),
                Nacked::Delayed { due_ms } => watch(ctx, queue, due_ms),
                Nacked::Requeued => {}
            }
        }
    }
    Ok(nacked)
}

/// `VTRR.RECLAIM`: takes back up to `limit` leases of `queue` expired now.
pub fn reclaim(ctx: &Context, queue: &[u8], at: &Moment, limit: usize) -> Result<u64, RedisError> {
    let now = at.now_ms;
    let mut store = open(ctx, Caller::Client, queue, CoreOp::Reclaim)?;
    let outcome = core::reclaim(&mut store, now, limit).map_err(core_error(queue))?;
    notify_dead(&store, &outcome, c"vtrr.reclaim");
    store.commit(c"vtrr.reclaim", || {
        applied(queue, now, Operation::Reclaim { limit })
    });
    drop(store);
    count_due(ctx, queue, &outcome);
    Ok(outcome.reclaimed)
}

/// The timer's run on one queue (in the context's database): up to `limit`
/// items due at `now_ms`, expired leases first, then due delayed items. The
/// number of items acted on; None when the queue's slot is being migrated
/// (the timer leaves it alone until it has an owner).
pub fn run_due(
    ctx: &Context,
    queue: &[u8],
    now_ms: i64,
    limit: usize,
) -> Result<Option<Due>, RedisError> {
    let mut store = match RedisStore::open(ctx, queue, CoreOp::RunDue.into(), Caller::Server) {
        Err(OpenError::SlotMoving) => return Ok(None),
        opened => opened.map_err(|e| error::open(&e))?,
    };
    let outcome = core::run_due(&mut store, now_ms, limit).map_err(core_error(queue))?;
    let event = due_event(&outcome);
    notify_dead(&store, &outcome, event);
    store.commit(event, || applied(queue, now_ms, Operation::Due { limit }));
    if outcome.parked > 0 {
        // What it parked may have uncovered servable items.
        store.signal_ready();
    }
    drop(store);
    count_due(ctx, queue, &outcome);
    Ok(Some(outcome))
}

/// `VTRR.POLICY` without options: the policy and the default cap.
pub fn policy(ctx: &Context, queue: &[u8]) -> Result<(Policy, Option<u64>), RedisError> {
    let mut store = open(ctx, Caller::Client, queue, CoreOp::ReadPolicy)?;
    let mut anomalies = Vec::new();
    let policy = core::read_policy(&mut store, &mut anomalies);
    let default_cap = core::partitions::read_default_cap(&mut store, &mut anomalies);
    drop(store);
    log_anomalies(ctx, queue, &anomalies);
    Ok((policy, default_cap))
}

/// `VTRR.POLICY` with options.
pub fn set_policy(ctx: &Context, queue: &[u8], changes: &[PolicyChange]) -> Result<(), RedisError> {
    let op = CoreOp::set_policy(changes);
    let mut store = open(ctx, Caller::Client, queue, op)?;
    let mut anomalies = Vec::new();
    core::set_policy(&mut store, changes, &mut anomalies).map_err(core_error(queue))?;
    store.commit(c"vtrr.policy", || Propagate::Effects);
    drop(store);
    log_anomalies(ctx, queue, &anomalies);
    Ok(())
}

/// Runs a change of tenant controls on `queue` and commits it with `event`.
fn control<T>(
    ctx: &Context,
    queue: &[u8],
    op: CoreOp,
    event: &CStr,
    change: impl FnOnce(&mut RedisStore<'_>, &mut Vec<Anomaly>) -> Result<T, core::CoreError>,
) -> Result<T, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, op)?;
    let mut anomalies = Vec::new();
    let result = change(&mut store, &mut anomalies).map_err(core_error(queue))?;
    store.commit(event, || Propagate::Effects);
    drop(store);
    log_anomalies(ctx, queue, &anomalies);
    Ok(result)
}

/// `VTRR.LIMIT` with options.
pub fn set_limit(
    ctx: &Context,
    queue: &[u8],
    partition: &[u8],
    changes: &[LimitChange],
) -> Result<(), RedisError> {
    control(
        ctx,
        queue,
        CoreOp::SetLimit,
        c"vtrr.limit",
        |store, anomalies| core::set_limit(store, partition, changes, anomalies),
    )
}

/// `VTRR.LIMIT` without options.
pub fn limit(ctx: &Context, queue: &[u8], partition: &[u8]) -> Result<Record, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, CoreOp::Limit)?;
    let mut anomalies = Vec::new();
    let record = core::limit(&mut store, partition, &mut anomalies);
    drop(store);
    log_anomalies(ctx, queue, &anomalies);
    Ok(record)
}

/// `VTRR.PAUSE`: whether it was not paused yet.
pub fn pause(ctx: &Context, queue: &[u8], partition: &[u8]) -> Result<bool, RedisError> {
    control(
        ctx,
        queue,
        CoreOp::Pause,
        c"vtrr.pause",
        |store, anomalies| Ok(core::pause(store, partition, anomalies)),
    )
}

/// `VTRR.RESUME`: whether it was paused.
pub fn resume(ctx: &Context, queue: &[u8], partition: &[u8]) -> Result<bool, RedisError> {
    control(
        ctx,
        queue,
        CoreOp::Resume,
        c"vtrr.resume",
        |store, anomalies| core::resume(store, partition, anomalies),
    )
}

/// `VTRR.PARTITIONS ... PARTITION`.
pub fn partition_view(
    ctx: &Context,
    queue: &[u8],
    partition: &[u8],
) -> Result<PartitionView, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, CoreOp::PartitionView)?;
    let mut anomalies = Vec::new();
    let view = core::partition_view(&mut store, partition, &mut anomalies);
    drop(store);
    log_anomalies(ctx, queue, &anomalies);
    Ok(view)
}

/// `VTRR.PARTITIONS`: one cursor step.
pub fn partitions_page(
    ctx: &Context,
    queue: &[u8],
    cursor: u64,
    count: usize,
) -> Result<(u64, Vec<PartitionView>), RedisError> {
    let mut store = open(ctx, Caller::Client, queue, CoreOp::PartitionsPage)?;
    let mut anomalies = Vec::new();
    let page = core::partitions_page(&mut store, cursor, count, &mut anomalies);
    drop(store);
    log_anomalies(ctx, queue, &anomalies);
    Ok(page)
}

/// `VTRR.RECOUNT`: the number of partition records corrected.
pub fn recount(ctx: &Context, queue: &[u8]) -> Result<u64, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, CoreOp::Recount)?;
    let mut anomalies = Vec::new();
    let changed = core::recount(&mut store, &mut anomalies);
    store.commit(c"vtrr.recount", || Propagate::Effects);
    drop(store);
    log_anomalies(ctx, queue, &anomalies);
    Ok(changed)
}

/// `VTRR.DEAD`: the `count` oldest dead items.
pub fn dead_items(ctx: &Context, queue: &[u8], count: usize) -> Result<Vec<DeadItem>, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, CoreOp::DeadItems)?;
    Ok(core::dead_items(&mut store, count))
}

/// `VTRR.REVIVE`: the number of dead items put back in the queue.
pub fn revive(ctx: &Context, queue: &[u8], ids: &[&[u8]]) -> Result<u64, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, CoreOp::Revive)?;
    let outcome = core::revive(&mut store, ids).map_err(core_error(queue))?;
    store.commit(c"vtrr.revive", || Propagate::Effects);
    drop(store);
    log_anomalies(ctx, queue, &outcome.anomalies);
    info::add(&info::REVIVED, outcome.count);
    Ok(outcome.count)
}

/// `VTRR.CANCEL`: the number of items deleted.
pub fn cancel(ctx: &Context, queue: &[u8], ids: &[&[u8]]) -> Result<u64, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, CoreOp::Cancel)?;
    let mut anomalies = Vec::new();
    let cancelled = core::cancel(&mut store, ids, &mut anomalies);
    store.commit(c"vtrr.cancel", || Propagate::Effects);
    drop(store);
    log_anomalies(ctx, queue, &anomalies);
    info::add(&info::CANCELLED, cancelled);
    Ok(cancelled)
}

/// The event of a call that leased nothing: what it did to due items.
fn due_event(due: &Due) -> &'static CStr {
    if due.reclaimed > 0 {
        c"vtrr.reclaim"
    } else if due.promoted > 0 {
        c"vtrr.promote"
    } else if due.dead_lettered > 0 {
        DEAD_EVENT
    } else {
        // Only items of paused or capped partitions moved to `held`.
        c"vtrr.hold"
    }
}

const DEAD_EVENT: &CStr = c"vtrr.dead";

/// `vtrr.dead` beside the call's own `event` when it dead-lettered anything.
fn notify_dead(store: &RedisStore<'_>, due: &Due, event: &CStr) {
    if due.dead_lettered > 0 && event != DEAD_EVENT {
        store.notify(DEAD_EVENT);
    }
}

/// Logs and counts what a call did to due items.
fn count_due(ctx: &Context, queue: &[u8], due: &Due) {
    log_anomalies(ctx, queue, &due.anomalies);
    info::add(&info::RECLAIMED, due.reclaimed);
    info::add(&info::PROMOTED, due.promoted);
    info::add(&info::DEAD_LETTERED, due.dead_lettered);
}

/// `VTRR.STATS`.
pub fn stats(ctx: &Context, queue: &[u8]) -> Result<Stats, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, CoreOp::Stats)?;
    core::stats(&mut store, now_ms()).map_err(core_error(queue))
}

/// `VTRR.CHECK`: every broken invariant, as a sentence.
pub fn check(ctx: &Context, queue: &[u8]) -> Result<Vec<String>, RedisError> {
    let mut store = open(ctx, Caller::Client, queue, CoreOp::Check)?;
    Ok(check::check(&mut store))
}

/// The earliest time something of `queue` (in the context's database) falls
/// due, read without opening anything for writing (so no WATCH is
/// disturbed); None when nothing is.
pub fn next_due(ctx: &Context, queue: &[u8]) -> Option<i64> {
    let mut store = open(ctx, Caller::Server, queue, CoreOp::NextDue).ok()?;
    // Rounded up: a fractional score written by another client must not
    // make the timer look before anything is due.
    let mut first = |key| store.zfirst(key).map(|(_, score)| score.ceil() as i64);
    let expiry = first(ZsetKey::Inflight);
    let delayed = first(ZsetKey::Delayed);
    expiry.into_iter().chain(delayed).min()
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
                "item {} had no payload; moved to the dead-letter set (reason: payload missing)",
                String::from_utf8_lossy(id)
            ),
            Anomaly::CounterUnreadable { counter, id } => format!(
                "item {} had an unreadable {counter} count; counted from 0",
                String::from_utf8_lossy(id)
            ),
            Anomaly::PolicyUnreadable { field } => {
                format!("policy field {field} is not a count; read as NONE")
            }
            Anomaly::PartitionRecordUnreadable { partition } => format!(
                "partition {} had an unreadable record in partitions; counted afresh (VTRR.RECOUNT repairs it)",
                String::from_utf8_lossy(partition)
            ),
            Anomaly::PartitionVirtualTimeUnreadable { partition } => format!(
                "partition {} had an unreadable virtual time; read as 0",
                String::from_utf8_lossy(partition)
            ),
        };
        ctx.log_warning(&format!("vtrr: queue {queue}: {text}"));
    }
}
