//! `VTRR.ENQUEUE`.

use super::scoring::{enter, is_present};
use super::types::{Anomaly, CoreError, NewItem};
use super::virtual_time::read_placing;
use crate::store::Store;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EnqueueOutcome {
    pub added: u64,
    pub anomalies: Vec<Anomaly>,
}

/// `VTRR.ENQUEUE`: adds each item whose id is not already in the queue's
/// life (queued, leased, delayed or dead).
pub fn enqueue(store: &mut impl Store, items: &[NewItem<'_>]) -> Result<EnqueueOutcome, CoreError> {
    let mut outcome = EnqueueOutcome::default();
    let at = read_placing(store, &mut outcome.anomalies)?;
    for item in items {
        if is_present(store, item.id) {
            continue;
        }
        enter(store, &at, item, &mut outcome.anomalies);
        outcome.added += 1;
    }
    Ok(outcome)
}
