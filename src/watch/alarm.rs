//! The timer's one armed alarm: when the next tick comes. The operations
//! layer brings it forward for a schedule's run ([`wake_by`]) without
//! importing the tick, which imports the operations layer: the tick is
//! registered here once, at load ([`ring`]).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use redis_module::Context;

use crate::server::now_ms;

/// Id of the armed timer, 0 when none.
static TIMER_ID: AtomicU64 = AtomicU64::new(0);
/// When the armed timer fires (Unix ms).
static ARMED_FOR_MS: AtomicI64 = AtomicI64::new(0);
/// What the alarm runs.
static TICK: OnceLock<fn(&Context, ())> = OnceLock::new();

/// Registers what the alarm runs (the first registration stays).
pub fn ring(tick: fn(&Context, ())) {
    let _ = TICK.set(tick);
}

/// Whether an alarm is armed.
pub fn armed() -> bool {
    TIMER_ID.load(Ordering::Relaxed) != 0
}

/// The armed alarm fired: none is armed until the tick arms the next.
pub fn fired() {
    TIMER_ID.store(0, Ordering::Relaxed);
}

/// Stops the armed alarm, if any.
pub fn disarm(ctx: &Context) {
    let armed = TIMER_ID.swap(0, Ordering::Relaxed);
    if armed != 0 {
        let _ = ctx.stop_timer::<()>(armed);
    }
}

/// Arms the alarm `after` from now (nothing before [`ring`]).
pub fn arm(ctx: &Context, after: Duration) {
    let Some(&tick) = TICK.get() else {
        return;
    };
    let id = ctx.create_timer(after, tick, ());
    TIMER_ID.store(id, Ordering::Relaxed);
    let after_ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
    ARMED_FOR_MS.store(now_ms().saturating_add(after_ms), Ordering::Relaxed);
}

/// Something must be acted on at `due_ms` (a schedule's run, a rebuild): an
/// alarm armed for later is brought forward. (Within a run the tick arms
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
