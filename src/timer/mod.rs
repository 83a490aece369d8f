//! The timer: with no client traffic, re-enqueues expired leases of every
//! queue (exactly as `VTRR.RECLAIM`) and moves due delayed items into their
//! queue (exactly as LEASE's promotion step).
//!
//! It never scans the keyspace per tick. Its [`index`] maps each (db, queue)
//! with leases, delayed items or a parking under way to the earliest time
//! one may be due:
//! - the operations layer notes the expiry of every lease it grants and the
//!   due time of every item it delays, and has a queue rechecked after a
//!   tenant-control change (which may start a parking);
//! - writes by other clients (Lua scripts, a plain ZADD, RESTORE, RENAME,
//!   replicated effects on a replica) reach it through a keyspace
//!   subscription on `vtrr:*:inflight`, `vtrr:*:delayed` and
//!   `vtrr:*:parking` keys, which queues a recheck;
//! - after loading an RDB/AOF, a full sync, or a role change, [`rebuild`]
//!   walks every database once, in bounded steps;
//! - SWAPDB (which fires no keyspace event) moves its entries between the
//!   two databases.
//!
//! Each [`tick`] acts on the index through the operations layer; its cost is
//! proportional to the queues due or written, not to the keyspace.

pub mod index;
mod rebuild;
mod tick;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use redis_module::Context;

use crate::config;
use crate::server::{now_ms, selected_db};
use crate::store::keys;
use index::with_index;

/// Id of the armed timer, 0 when none.
static TIMER_ID: AtomicU64 = AtomicU64::new(0);
/// When the armed timer fires (Unix ms).
static ARMED_FOR_MS: AtomicI64 = AtomicI64::new(0);

/// Keyspace events on zset and generic keys: another client (or a replicated
/// effect) wrote an inflight or delayed key, so its queue is rechecked at the
/// next tick.
pub fn on_keyspace_event(ctx: &Context, kind: redis_module::NotifyEvent, _event: &str, key: &[u8]) {
    // A native queue arrives whole (RESTORE, COPY, RENAME, MOVE: generic
    // events on `vtrr:<name>:queue`); the keys layout's ZADDs there say
    // nothing about due items.
    let native_arrived = kind == redis_module::NotifyEvent::GENERIC;
    let queue = keys::queue_of_due_key(key).or_else(|| {
        native_arrived
            .then(|| keys::queue_of_queue_key(key))
            .flatten()
    });
    if let Some(queue) = queue {
        let db = selected_db(ctx);
        with_index(|index| index.recheck.insert((db, queue.to_vec())));
    }
}

/// FLUSHDB or FLUSHALL emptied `db` (every database with None).
pub fn on_flush(db: Option<i32>) {
    with_index(|index| index.forget_db(db));
}

/// SWAPDB traded the contents of two databases (no keyspace event tells).
pub fn on_swapdb(first: i32, second: i32) {
    with_index(|index| index.swap_dbs(first, second));
}

/// Rebuild the index from the keyspace (after loading, sync, role change,
/// or module load on a populated server), from the timer's next run, which
/// comes at once: what fell due while the server was down (a schedule's
/// runs above all) is acted on when it is back, not an interval later.
pub fn request_rebuild(ctx: &Context) {
    with_index(|index| index.scan = Some((0, "0".to_string())));
    wake_by(ctx, now_ms());
}

/// (Re)arms the timer for the current `vtrr.reclaim-interval-ms`, or
/// sooner when something it knows of is due sooner; with 0 it stays
/// stopped.
pub fn reschedule(ctx: &Context) {
    let armed = TIMER_ID.swap(0, Ordering::Relaxed);
    if armed != 0 {
        let _ = ctx.stop_timer::<()>(armed);
    }
    let interval = config::reclaim_interval_ms();
    if interval > 0 {
        arm(ctx, Duration::from_millis(interval as u64));
        if let Some(run_ms) = with_index(|index| index.earliest_run()) {
            wake_by(ctx, run_ms);
        }
    }
}

fn arm(ctx: &Context, after: Duration) {
    let id = ctx.create_timer(after, tick::tick, ());
    TIMER_ID.store(id, Ordering::Relaxed);
    let after_ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
    ARMED_FOR_MS.store(now_ms().saturating_add(after_ms), Ordering::Relaxed);
}

/// Something must be acted on at `due_ms` (a schedule's run, a rebuild): a
/// timer armed for later is brought forward. (Within a run the tick arms
/// for the earliest run itself.)
pub fn wake_by(ctx: &Context, due_ms: i64) {
    let armed = TIMER_ID.load(Ordering::Relaxed);
    if armed == 0 || ARMED_FOR_MS.load(Ordering::Relaxed) <= due_ms {
        return;
    }
    if ctx.stop_timer::<()>(armed).is_ok() {
        TIMER_ID.store(0, Ordering::Relaxed);
        let after = due_ms.saturating_sub(now_ms()).max(1) as u64;
        arm(ctx, Duration::from_millis(after));
    }
}
