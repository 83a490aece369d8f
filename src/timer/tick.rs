//! One run of the timer: a rebuild step, a reread of the queues others
//! wrote, then the queues whose due time has passed, at most
//! `vtrr.reclaim-batch` items in all: expired leases reclaimed (as
//! `VTRR.RECLAIM`) and due delayed items promoted. It acts only through the
//! operations layer. A tick with nothing due opens
//! no key for writing, so it signals nothing.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis_module::{Context, ContextFlags};

use super::index::with_index;
use super::{arm, rebuild, TIMER_ID};
use crate::ops;
use crate::store::server::{now_ms, select_db, selected_db};
use crate::{config, info};

/// How soon the next tick comes while a rebuild scan is unfinished.
const SCAN_RESUME_MS: u64 = 1;

pub fn tick(ctx: &Context, _: ()) {
    TIMER_ID.store(0, Ordering::Relaxed);
    let started = Instant::now();
    let original_db = selected_db(ctx);
    let scanning = rebuild::step(ctx);
    recheck_written(ctx);
    let is_master = ctx.get_flags().contains(ContextFlags::MASTER);
    if is_master {
        reclaim_due(ctx, now_ms());
    }
    select_db(ctx, original_db);

    let elapsed = started.elapsed().as_micros() as u64;
    info::TIMER_LAST_RUN_US.store(elapsed, Ordering::Relaxed);
    info::TIMER_LONGEST_RUN_US.fetch_max(elapsed, Ordering::Relaxed);
    info::add(&info::TIMER_RUNS, 1);
    info::TRACKED_QUEUES.store(
        with_index(|index| index.tracked()) as u64,
        Ordering::Relaxed,
    );

    let interval = config::reclaim_interval_ms();
    if interval > 0 && TIMER_ID.load(Ordering::Relaxed) == 0 {
        let next = if scanning {
            SCAN_RESUME_MS
        } else {
            interval as u64
        };
        arm(ctx, Duration::from_millis(next));
    }
}

/// Rereads the next due time of every queue written by others since the
/// last tick.
fn recheck_written(ctx: &Context) {
    let written: Vec<(i32, Vec<u8>)> = with_index(|index| index.recheck.drain().collect());
    for (db, queue) in written {
        if select_db(ctx, db) {
            let due = ops::next_due(ctx, &queue);
            with_index(|index| index.set_due(db, &queue, due));
        }
    }
}

/// Acts on the queues with something due (expired leases, due delayed
/// items), within the batch budget.
fn reclaim_due(ctx: &Context, now: i64) {
    let batch = config::reclaim_batch();
    let mut budget = batch;
    while budget > 0 {
        let Some((db, queue)) = with_index(|index| index.pop_due(now)) else {
            break;
        };
        if !select_db(ctx, db) {
            continue;
        }
        match ops::run_due(ctx, &queue, now, budget) {
            Ok(done) => {
                info::add(&info::TIMER_RECLAIMED, done.reclaimed);
                info::add(&info::TIMER_PROMOTED, done.promoted);
                budget = budget.saturating_sub((done.reclaimed + done.promoted) as usize);
            }
            Err(error) => {
                // A wrong key type or unreadable virtual time: leave the queue
                // alone until a client writes it again.
                ctx.log_warning(&format!(
                    "vtrr: timer skipped queue {}: {}",
                    String::from_utf8_lossy(&queue),
                    error
                ));
                continue;
            }
        }
        let due = ops::next_due(ctx, &queue);
        with_index(|index| index.set_due(db, &queue, due));
    }
    info::TIMER_MOST_RECLAIMED_IN_ONE_RUN.fetch_max((batch - budget) as u64, Ordering::Relaxed);
}
