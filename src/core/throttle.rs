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

use super::partitions::{Defaults, Record};
use crate::store::{Rate, Store, ZsetKey};

impl Record {
    /// Whether its bucket holds a token (always, without a rate in force).
    pub fn has_token(&self, defaults: Defaults) -> bool {
        self.rate_in_force(defaults)
            .is_none_or(|rate| self.level(rate) >= token(rate))
    }

    /// What its bucket holds, in token-milliseconds: full while it has
    /// not been refilled since it was (`refilled_at` None).
    fn level(&self, rate: Rate) -> i64 {
        match self.refilled_at {
            None => capacity(rate),
            Some(_) => self.bucket,
        }
    }

    /// When its bucket next holds a token, refilled from what it holds now;
    /// None when it holds one or has no rate in force.
    pub fn token_due(&self, defaults: Defaults) -> Option<i64> {
        let rate = self.rate_in_force(defaults)?;
        self.refilled_by(rate, token(rate))
    }

    /// When its bucket holds `level` token-milliseconds (None: it does).
    fn refilled_by(&self, rate: Rate, level: i64) -> Option<i64> {
        let missing = i128::from(level) - i128::from(self.level(rate));
        if missing <= 0 {
            return None;
        }
        let amount = i128::from(rate.amount.max(1));
        let wait = (missing + amount - 1) / amount;
        Some(clamp(i128::from(self.refilled_at.unwrap_or(0)) + wait))
    }

    /// The whole tokens its bucket holds as last refilled (negative while
    /// it pays back an overdraft), as `VTRR.PARTITIONS` shows them.
    pub fn tokens(&self, defaults: Defaults) -> Option<i64> {
        let rate = self.rate_in_force(defaults)?;
        Some(self.level(rate).div_euclid(token(rate).max(1)))
    }

    /// Refills its bucket up to `now_ms` (never backwards: a clock that went
    /// back, on a new primary, refills nothing until it passes the last).
    pub fn refill(&mut self, defaults: Defaults, now_ms: i64) {
        let Some(rate) = self.rate_in_force(defaults) else {
            return;
        };
        let Some(refilled_at) = self.refilled_at else {
            // Full as of any time: from now on, it counts.
            self.bucket = capacity(rate);
            self.refilled_at = Some(now_ms);
            return;
        };
        if now_ms <= refilled_at {
            return;
        }
        let elapsed = i128::from(now_ms) - i128::from(refilled_at);
        let filled = i128::from(self.bucket) + elapsed * i128::from(rate.amount);
        self.bucket = clamp(filled.min(i128::from(capacity(rate))));
        self.refilled_at = Some(now_ms);
    }

    /// A full bucket is full as of any time (`refilled_at` None): an idle
    /// partition under the default rate then has nothing left to keep its
    /// record for.
    pub(super) fn forget_full_bucket(&mut self, defaults: Defaults) {
        if let Some(rate) = self.rate_in_force(defaults) {
            if self.refilled_at.is_some() && self.bucket >= capacity(rate) {
                self.fill();
            }
        }
    }

    /// A lease of an item of `weight` spends it from the bucket (refilled
    /// by the same call first: it counts from then).
    pub fn spend(&mut self, defaults: Defaults, weight: u64) {
        if let Some(rate) = self.rate_in_force(defaults) {
            let cost = i128::from(weight) * i128::from(rate.per_ms);
            self.bucket = clamp(i128::from(self.level(rate)) - cost);
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
        self.bucket = 0;
        self.refilled_at = None;
    }
}

/// One token, in token-milliseconds.
fn token(rate: Rate) -> i64 {
    i64::try_from(rate.per_ms).unwrap_or(i64::MAX)
}

/// A full bucket, in token-milliseconds.
fn capacity(rate: Rate) -> i64 {
    clamp(i128::from(rate.burst) * i128::from(rate.per_ms))
}

fn clamp(value: i128) -> i64 {
    i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX })
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
        Some(rate) if record.rate.is_none() => record.refilled_by(rate, capacity(rate)),
        _ => None,
    }
}
