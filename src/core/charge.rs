//! Fairness by reported cost: a partition is charged what its finished
//! items really cost, as their workers report it (`VTRR.ACKCOST`), instead
//! of the weight they were queued with.
//!
//! An item's weight is charged when it is queued (its place follows its
//! partition's last by `weight / share`); the difference the worker
//! reports, `(cost - weight) / share`, moves the partition's queued items
//! and next virtual time when the item is finished (`admission::shift`).
//! So a partition's virtual time is exact for its finished items and off
//! by at most the weight of its items in flight (their costs are not known
//! yet), as in Kubernetes' API Priority and Fairness and the VTC scheduler.
//! A long job may report as it goes (`VTRR.RENEW ... COST`): each report
//! is charged in full, and the finish reports what it cost since the last,
//! charged less the weight; so a job's charges add up to its whole cost
//! less its weight, however it reported. An expired or nacked lease keeps
//! its weight and what its renewals reported. A refund (cost below weight) brings a partition's items to the
//! front of the queue at most: a partition banks no credit, as an idle one
//! re-enters at the current virtual time.

use super::admission::{self, Partition};
use super::levels::Level;
use crate::store::Store;

/// Charges `partition` an item's reported `cost` in place of its `weight`,
/// at the item's priority `level`, the remainder below the share carried as
/// its weights' are.
pub(super) fn charge(
    store: &mut impl Store,
    partition: &mut Partition,
    level: Level,
    weight: u64,
    cost: u64,
) {
    let record = &mut partition.record;
    let share = i128::from(record.share.max(1));
    let owed = i128::from(record.carry) + i128::from(cost) - i128::from(weight);
    record.carry = owed.rem_euclid(share) as u64;
    let by = owed.div_euclid(share);
    let by = i64::try_from(by).unwrap_or(if by < 0 { i64::MIN } else { i64::MAX });
    admission::shift(store, partition, level, by);
}
