//! Counters since start-up, shown by `INFO vtrr`.

use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::{InfoContext, RedisResult};

pub static ENQUEUED: AtomicU64 = AtomicU64::new(0);
pub static LEASED: AtomicU64 = AtomicU64::new(0);
pub static ACKED: AtomicU64 = AtomicU64::new(0);
pub static RENEWED: AtomicU64 = AtomicU64::new(0);
pub static RECLAIMED: AtomicU64 = AtomicU64::new(0);
pub static DEFERRED: AtomicU64 = AtomicU64::new(0);
pub static PROMOTED: AtomicU64 = AtomicU64::new(0);
/// Runs of recurring schedules enqueued.
pub static SCHEDULE_RUNS: AtomicU64 = AtomicU64::new(0);
pub static NACKED: AtomicU64 = AtomicU64::new(0);
/// Leases given back unrun by NACK ... RELEASE (not counted as nacked).
pub static RELEASED: AtomicU64 = AtomicU64::new(0);
pub static DEAD_LETTERED: AtomicU64 = AtomicU64::new(0);
pub static REVIVED: AtomicU64 = AtomicU64::new(0);
pub static CANCELLED: AtomicU64 = AtomicU64::new(0);
/// Items of ENQUEUE and DEFER calls refused for a partition's MAX-QUEUED.
pub static REFUSED_FULL: AtomicU64 = AtomicU64::new(0);
pub static TIMER_RUNS: AtomicU64 = AtomicU64::new(0);
pub static TIMER_RECLAIMED: AtomicU64 = AtomicU64::new(0);
pub static TIMER_PROMOTED: AtomicU64 = AtomicU64::new(0);
pub static TIMER_LAST_RUN_US: AtomicU64 = AtomicU64::new(0);
pub static TIMER_LONGEST_RUN_US: AtomicU64 = AtomicU64::new(0);
pub static TIMER_MOST_RECLAIMED_IN_ONE_RUN: AtomicU64 = AtomicU64::new(0);
pub static TRACKED_QUEUES: AtomicU64 = AtomicU64::new(0);
/// Active defrag of native queues: walks finished (one per queue per
/// defrag cycle), steps (callback calls: a small queue is walked in one, a
/// large one in as many as its time slices need), allocations moved, and
/// of those the queues' own values (the struct a key points at).
pub static NATIVE_DEFRAG_RUNS: AtomicU64 = AtomicU64::new(0);
pub static NATIVE_DEFRAG_STEPS: AtomicU64 = AtomicU64::new(0);
pub static NATIVE_DEFRAG_MOVED: AtomicU64 = AtomicU64::new(0);
pub static NATIVE_DEFRAG_VALUES_MOVED: AtomicU64 = AtomicU64::new(0);

pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

fn get(counter: &AtomicU64) -> i64 {
    counter.load(Ordering::Relaxed) as i64
}

/// Writes the `vtrr` section.
pub fn section(ctx: &InfoContext) -> RedisResult<()> {
    ctx.builder()
        .add_section("")
        .field("items_enqueued", get(&ENQUEUED))?
        .field("items_leased", get(&LEASED))?
        .field("items_acked", get(&ACKED))?
        .field("items_renewed", get(&RENEWED))?
        .field("items_reclaimed", get(&RECLAIMED))?
        .field("items_deferred", get(&DEFERRED))?
        .field("items_promoted", get(&PROMOTED))?
        .field("schedule_runs", get(&SCHEDULE_RUNS))?
        .field("items_nacked", get(&NACKED))?
        .field("items_released", get(&RELEASED))?
        .field("items_dead_lettered", get(&DEAD_LETTERED))?
        .field("items_revived", get(&REVIVED))?
        .field("items_cancelled", get(&CANCELLED))?
        .field("items_refused_full", get(&REFUSED_FULL))?
        .field("timer_runs", get(&TIMER_RUNS))?
        .field("timer_items_reclaimed", get(&TIMER_RECLAIMED))?
        .field("timer_items_promoted", get(&TIMER_PROMOTED))?
        .field("timer_tracked_queues", get(&TRACKED_QUEUES))?
        .field("timer_last_run_us", get(&TIMER_LAST_RUN_US))?
        .field("timer_longest_run_us", get(&TIMER_LONGEST_RUN_US))?
        .field(
            "timer_most_reclaimed_in_one_run",
            get(&TIMER_MOST_RECLAIMED_IN_ONE_RUN),
        )?
        .field("native_defrag_runs", get(&NATIVE_DEFRAG_RUNS))?
        .field("native_defrag_steps", get(&NATIVE_DEFRAG_STEPS))?
        .field("native_defrag_moved", get(&NATIVE_DEFRAG_MOVED))?
        .field(
            "native_defrag_values_moved",
            get(&NATIVE_DEFRAG_VALUES_MOVED),
        )?
        .build_section()?
        .build_info()?;
    Ok(())
}
