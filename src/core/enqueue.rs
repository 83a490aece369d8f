//! `VTRR.ENQUEUE`.

use super::scoring::{place, read_current_virtual_time};
use super::{Anomaly, CoreError, NewItem};
use crate::store::{Store, ZsetKey};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EnqueueOutcome {
    pub added: u64,
    pub anomalies: Vec<Anomaly>,
}

/// `VTRR.ENQUEUE`: adds each item not already queued or leased.
pub fn enqueue(store: &mut impl Store, items: &[NewItem<'_>]) -> Result<EnqueueOutcome, CoreError> {
    let current_virtual_time = read_current_virtual_time(store)?;
    let mut outcome = EnqueueOutcome::default();
    for item in items {
        let present = store.zscore(ZsetKey::Queue, item.id).is_some()
            || store.zscore(ZsetKey::Inflight, item.id).is_some();
        if present {
            continue;
        }
        place(
            store,
            current_virtual_time,
            item,
            None,
            &mut outcome.anomalies,
        );
        outcome.added += 1;
    }
    Ok(outcome)
}
