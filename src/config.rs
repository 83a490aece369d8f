//! Module configs (`vtrr.<name>`), settable as loadmodule arguments, in
//! redis.conf and with CONFIG SET. Bounds live beside the values they bound.

use std::sync::atomic::{AtomicI64, Ordering};

pub const RECLAIM_INTERVAL_MS_DEFAULT: i64 = 1000;
pub const RECLAIM_INTERVAL_MS_MIN: i64 = 0; // 0 turns the timer off
pub const RECLAIM_INTERVAL_MS_MAX: i64 = 3_600_000;
/// `vtrr.reclaim-interval-ms`: period of the reclaim timer.
pub static RECLAIM_INTERVAL_MS: AtomicI64 = AtomicI64::new(RECLAIM_INTERVAL_MS_DEFAULT);

pub const RECLAIM_BATCH_DEFAULT: i64 = 1000;
pub const RECLAIM_BATCH_MIN: i64 = 1;
pub const RECLAIM_BATCH_MAX: i64 = 1_000_000;
/// `vtrr.reclaim-batch`: most items one timer run, or one LEASE's reclaim
/// step, may reclaim.
pub static RECLAIM_BATCH: AtomicI64 = AtomicI64::new(RECLAIM_BATCH_DEFAULT);

pub fn reclaim_interval_ms() -> i64 {
    RECLAIM_INTERVAL_MS.load(Ordering::Relaxed)
}

pub fn reclaim_batch() -> usize {
    RECLAIM_BATCH.load(Ordering::Relaxed).max(1) as usize
}
