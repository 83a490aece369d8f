//! One run of the timer, within `vtrr.timer-budget-us`: a rebuild step, a
//! reread of the queues others wrote, then the queues whose due time has
//! passed, `vtrr.reclaim-batch` items at a time: expired leases reclaimed
//! (as `VTRR.RECLAIM`) and due delayed items promoted. It acts only through
//! the operations layer. Each step looks at the clock between two pieces of
//! work and stops once the budget is spent (after at least one piece, so
//! every run makes progress); while work is left the next run comes after
//! `RESUME_MS`, not a whole interval, and otherwise when the earliest due
//! time it knows comes, at most an interval later. A run with nothing due opens no key
//! for writing, so it signals nothing.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis_module::{Context, ContextFlags};

use super::rebuild;
use crate::core::{STEPS_FOR_ANY_FIRING, STEPS_PER_SEARCH};
use crate::ops;
use crate::server::cluster;
use crate::server::log_warning;
use crate::server::{now_ms, select_db, selected_db, writes_paused};
use crate::text::Quoted;
use crate::watch::alarm::{self, arm};
use crate::watch::index::with_index;
use crate::{config, info};

/// How soon the next run comes while work is left.
const RESUME_MS: u64 = 1;
/// How soon the timer looks again at a queue it could not act on.
const RETRY_BROKEN_MS: i64 = 1_000;
/// How soon the timer looks again at a queue whose slot was migrating.
const RETRY_MIGRATING_MS: i64 = 100;

pub fn tick(ctx: &Context, _: ()) {
    alarm::fired();
    let started = Instant::now();
    let deadline = started + config::timer_budget();
    let original_db = selected_db(ctx);
    let now = now_ms();
    cluster::settle_suspicion(ctx);
    let mut work_left = rebuild::step(ctx, deadline);
    work_left |= recheck_written(ctx, deadline);
    // While writes are paused the dataset must not change: what is due
    // waits for the next run after the pause.
    let acts = ctx.get_flags().contains(ContextFlags::MASTER) && !writes_paused();
    if acts {
        work_left |= act_on_due(ctx, now, deadline);
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
    if interval > 0 && !alarm::armed() {
        let next = if work_left {
            RESUME_MS
        } else {
            sleep_ms(interval, acts.then(now_ms))
        };
        arm(ctx, Duration::from_millis(next));
    }
}

/// How long the timer sleeps with nothing left over: on a node that acts
/// on due items (`now` given), until the earliest schedule run it knows (a
/// run falls due on time, not up to an interval late); at most the
/// interval, at which it meets expired leases and due delayed items.
fn sleep_ms(interval: i64, now: Option<i64>) -> u64 {
    let until_due = now.and_then(|now| {
        with_index(|index| index.earliest_run()).map(|run| run.saturating_sub(now))
    });
    until_due
        .map_or(interval, |ms| ms.clamp(RESUME_MS as i64, interval))
        .max(1) as u64
}

/// Rereads the next due time of the queues written by others since the
/// last run; true when the budget ran out first.
fn recheck_written(ctx: &Context, deadline: Instant) -> bool {
    let written: Vec<(i32, Vec<u8>)> = with_index(|index| index.recheck.drain().collect());
    let mut written = written.into_iter();
    for (db, queue) in written.by_ref() {
        if select_db(ctx, db) {
            let (due, run) = ops::next_due(ctx, &queue);
            with_index(|index| {
                index.set_due(db, &queue, due);
                index.set_run(db, &queue, run);
            });
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    let left: Vec<(i32, Vec<u8>)> = written.collect();
    let work_left = !left.is_empty();
    with_index(|index| index.recheck.extend(left));
    work_left
}

/// Acts on the queues with something due (expired leases, due delayed
/// items), earliest first, a chunk at a time; true when the budget ran out
/// with something still due.
fn act_on_due(ctx: &Context, now: i64, deadline: Instant) -> bool {
    let chunk = config::reclaim_batch();
    let mut done_in_run = 0u64;
    // The first call may fund any firing (a costly one is made in the next
    // run at the latest); the later ones one search each, so no call holds
    // the server more than a search's cost past the run's budget.
    let mut schedule_steps = STEPS_FOR_ANY_FIRING;
    let work_left = loop {
        let Some((db, queue)) = with_index(|index| index.pop_due(now)) else {
            break false;
        };
        if select_db(ctx, db) {
            // The next run is read again when the queue is next visited.
            let steps = std::mem::replace(&mut schedule_steps, STEPS_PER_SEARCH);
            let (due, run) = match ops::run_due(ctx, &queue, now, chunk, steps) {
                Ok(None) => (Some(now.saturating_add(RETRY_MIGRATING_MS)), None),
                Ok(Some(done)) => {
                    info::add(&info::TIMER_RECLAIMED, done.reclaimed);
                    info::add(&info::TIMER_PROMOTED, done.promoted);
                    done_in_run += done.reclaimed + done.promoted;
                    let (due, run) = ops::next_due(ctx, &queue);
                    (if done.parking_left { Some(now) } else { due }, run)
                }
                Err(error) => {
                    // A wrong key type or unreadable virtual time: try the
                    // queue again later (a client may repair it), at most
                    // one warning per `RETRY_BROKEN_MS`.
                    log_warning(
                        ctx,
                        &format!("vtrr: timer skipped queue {}: {}", Quoted(&queue), error),
                    );
                    let retry_ms = config::reclaim_interval_ms().max(RETRY_BROKEN_MS);
                    (Some(now.saturating_add(retry_ms)), None)
                }
            };
            with_index(|index| {
                index.set_due(db, &queue, due);
                index.set_run(db, &queue, run);
            });
        }
        if Instant::now() >= deadline {
            break with_index(|index| index.has_due(now));
        }
    };
    info::TIMER_MOST_RECLAIMED_IN_ONE_RUN.fetch_max(done_in_run, Ordering::Relaxed);
    work_left
}
