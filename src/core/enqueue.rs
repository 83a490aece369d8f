//! `VTRR.ENQUEUE`.

use super::backlog;
use super::levels::Level;
use super::outcomes;
use super::scoring::{already_there, enter};
use super::types::{Anomaly, CoreError, NewItem};
use super::virtual_time::read_placing;
use crate::store::Store;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EnqueueOutcome {
    pub added: u64,
    pub anomalies: Vec<Anomaly>,
    /// A partition's line started waiting at the call's clock: what it
    /// wrote depends on the clock (otherwise the same call redoes it).
    pub started_waits: bool,
}

/// `VTRR.ENQUEUE`: adds each item whose id is not already in the queue's
/// life (queued, leased, delayed or dead) nor finished within DEDUP-MS
/// (`outcomes`), at priority level 0; or none, when they would take a
/// partition past its MAX-QUEUED (`backlog`).
pub fn enqueue(
    store: &mut impl Store,
    now_ms: i64,
    items: &[NewItem<'_>],
) -> Result<EnqueueOutcome, CoreError> {
    enqueue_at(store, now_ms, 0, items)
}

/// `VTRR.ENQUEUE ... PRIORITY <level>`: [`enqueue`] at `level`.
pub fn enqueue_at(
    store: &mut impl Store,
    now_ms: i64,
    level: Level,
    items: &[NewItem<'_>],
) -> Result<EnqueueOutcome, CoreError> {
    let mut outcome = EnqueueOutcome::default();
    let at = read_placing(store, &mut outcome.anomalies)?;
    backlog::admit(
        store,
        at.defaults.keeping,
        items,
        now_ms,
        &mut outcome.anomalies,
    )?;
    for item in items {
        if already_there(
            store,
            at.defaults.keeping,
            item.id,
            now_ms,
            &mut outcome.anomalies,
        ) {
            continue;
        }
        outcomes::forget_previous(store, at.defaults.keeping, item.id);
        outcome.started_waits |= enter(store, &at, now_ms, item, level, &mut outcome.anomalies);
        outcome.added += 1;
    }
    Ok(outcome)
}
