//! Rate limits (`VTRR.LIMIT ... RATE <n> PER <ms> [BURST <b>]`): a token
//! bucket per partition that each lease spends its item's weight from.
//!
//! A partition with a rate is under control (`admission`): its head is in
//! `queue` only while it may be served, and "may be served" includes a
//! token in its bucket. So LEASE never meets an item it would have to
//! refuse and reschedule: a partition without a token has nothing in
//! `queue`, keeps its place and its items' virtual times, and is listed in
//! `throttled` with when its next token is due. The due step of every LEASE
//! and the timer refill those due and let their heads back in (`due`).
//!
//! Integers only, so replicas refill exactly as the primary: the bucket
//! counts token-milliseconds (a token is `per_ms` of them), refilled by
//! `amount` per millisecond, up to `burst` tokens. A lease needs one whole
//! token and spends its item's weight, which may leave the bucket below
//! zero: an item heavier than the burst is served, and what it overdrew is
//! paid back before the next.

use super::bucket::{capacity, Bucket};
use super::partitions::{Defaults, Record};
use crate::store::{Rate, Store, ZsetKey};

impl Record {
    fn bucket_state(&self) -> Bucket {
        Bucket {
            held: self.bucket,
            refilled_at: self.refilled_at,
        }
    }

    fn set_bucket_state(&mut self, bucket: Bucket) {
        self.bucket = bucket.held;
        self.refilled_at = bucket.refilled_at;
    }

    /// Whether its bucket holds a token (always, without a rate in force).
    pub fn has_token(&self, defaults: Defaults) -> bool {
        self.rate_in_force(defaults)
            .is_none_or(|rate| self.bucket_state().has_token(rate))
    }

    /// When its bucket next holds a token, refilled from what it holds now;
    /// None when it holds one or has no rate in force.
    pub fn token_due(&self, defaults: Defaults) -> Option<i64> {
        let rate = self.rate_in_force(defaults)?;
        self.bucket_state().token_due(rate)
    }

    /// The whole tokens its bucket holds as last refilled (negative while
    /// it pays back an overdraft), as `VTRR.PARTITIONS` shows them.
    pub fn tokens(&self, defaults: Defaults) -> Option<i64> {
        let rate = self.rate_in_force(defaults)?;
        Some(self.bucket_state().tokens(rate))
    }

    /// Refills its bucket up to `now_ms` (see [`Bucket::refill`]).
    pub fn refill(&mut self, defaults: Defaults, now_ms: i64) {
        if let Some(rate) = self.rate_in_force(defaults) {
            let mut bucket = self.bucket_state();
            bucket.refill(rate, now_ms);
            self.set_bucket_state(bucket);
        }
    }

    /// A full bucket is full as of any time (`refilled_at` None): an idle
    /// partition under the default rate then has nothing left to keep its
    /// record for.
    pub(super) fn forget_full_bucket(&mut self, defaults: Defaults) {
        if let Some(rate) = self.rate_in_force(defaults) {
            if self.refilled_at.is_some() && self.bucket_state().is_full(rate) {
                self.fill();
            }
        }
    }

    /// A lease of an item of `weight` spends it from the bucket.
    pub fn spend(&mut self, defaults: Defaults, weight: u64) {
        if let Some(rate) = self.rate_in_force(defaults) {
            let mut bucket = self.bucket_state();
            bucket.spend(rate, weight);
            self.set_bucket_state(bucket);
        }
    }

    /// Sets (or, None, removes) its own rate; the rate in force then
    /// starts with a full bucket.
    pub fn set_rate(&mut self, rate: Option<Rate>) {
        if self.rate == rate {
            return;
        }
        self.rate = rate;
        self.fill();
    }

    /// Its bucket full, as of any time (a rate in force just changed).
    pub fn fill(&mut self) {
        self.set_bucket_state(Bucket::default());
    }
}

/// Keeps the partition's place in `throttled` true to its record: listed,
/// while it has items queued and no token, at when its next token is due;
/// idle under the default rate with its bucket not full, at when it is
/// full (its record is kept till then: dropping it would refill the bucket
/// at once, and a partition could escape its rate by going idle).
pub(super) fn list(store: &mut impl Store, name: &[u8], record: &Record, defaults: Defaults) {
    let due = listed_at(record, defaults);
    let listed = store.zscore(ZsetKey::Throttled, name);
    match due {
        Some(due) if listed != Some(due as f64) => store.zadd(ZsetKey::Throttled, name, due as f64),
        Some(_) => {}
        None if listed.is_some() => {
            store.zrem(ZsetKey::Throttled, name);
        }
        None => {}
    }
}

/// Where [`list`] lists a partition in `throttled` (None: not listed).
pub(super) fn listed_at(record: &Record, defaults: Defaults) -> Option<i64> {
    match record.rate_in_force(defaults) {
        Some(_) if record.queued > 0 => record.token_due(defaults),
        Some(rate) if record.rate.is_none() => {
            record.bucket_state().refilled_by(rate, capacity(rate))
        }
        _ => None,
    }
}
