//! The timer: with no client traffic, re-enqueues expired leases of every
//! queue (exactly as `VTRR.RECLAIM`) and moves due delayed items into their
//! queue (exactly as LEASE's promotion step).
//!
//! It never scans the keyspace per tick. Its index ([`crate::watch::index`]) maps each (db, queue)
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

mod rebuild;
mod tick;

use std::time::Duration;

use redis_module::Context;

use crate::config;
use crate::server::now_ms;
use crate::store::vocabulary;
use crate::watch;
use crate::watch::alarm::{arm, disarm, ring, wake_by};
use crate::watch::index::with_index;

/// Keyspace events on zset and generic keys: another client (or a replicated
/// effect) wrote an inflight or delayed key, so its queue is rechecked at the
/// next tick.
pub fn on_keyspace_event(ctx: &Context, kind: redis_module::NotifyEvent, _event: &str, key: &[u8]) {
    // A native queue arrives whole (RESTORE, COPY, RENAME, MOVE: generic
    // events on `vtrr:<name>:queue`); the keys layout's ZADDs there say
    // nothing about due items.
    let native_arrived = kind == redis_module::NotifyEvent::GENERIC;
    let queue = vocabulary::queue_of_due_key(key).or_else(|| {
        native_arrived
            .then(|| vocabulary::queue_of_queue_key(key))
            .flatten()
    });
    if let Some(queue) = queue {
        watch::recheck(ctx, queue);
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
    ring(tick::tick);
    disarm(ctx);
    let interval = config::reclaim_interval_ms();
    if interval > 0 {
        arm(ctx, Duration::from_millis(interval as u64));
        if let Some(run_ms) = with_index(|index| index.earliest_run()) {
            wake_by(ctx, run_ms);
        }
    }
}
