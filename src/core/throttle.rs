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

use super::partitions::Record;
use crate::store::{Rate, Store, ZsetKey};

impl Record {
    /// Whether its bucket holds a token (always, without a rate).
    pub fn has_token(&self) -> bool {
        self.rate.is_none_or(|rate| self.bucket >= token(rate))
    }

    /// When its bucket next holds a token, refilled from what it holds now;
    /// None when it holds one or has no rate.
    pub fn token_due(&self) -> Option<i64> {
        let rate = self.rate?;
        let missing = i128::from(token(rate)) - i128::from(self.bucket);
        if missing <= 0 {
            return None;
        }
        let amount = i128::from(rate.amount.max(1));
        let wait = (missing + amount - 1) / amount;
        // Never refilled: due at once (the next call with a clock starts it).
        let from = self.refilled_at.unwrap_or(0);
        Some(clamp(i128::from(from) + wait))
    }

    /// The whole tokens its bucket holds as last refilled (negative while
    /// it pays back an overdraft), as `VTRR.PARTITIONS` shows them.
    pub fn tokens(&self) -> Option<i64> {
        let rate = self.rate?;
        Some(self.bucket.div_euclid(token(rate).max(1)))
    }

    /// Refills its bucket up to `now_ms` (never backwards: a clock that went
    /// back, on a new primary, refills nothing until it passes the last).
    pub fn refill(&mut self, now_ms: i64) {
        let Some(rate) = self.rate else {
            return;
        };
        let Some(refilled_at) = self.refilled_at else {
            // Full since the rate was set: from now on, it counts.
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

    /// A lease of an item of `weight` spends it from the bucket.
    pub fn spend(&mut self, weight: u64) {
        if let Some(rate) = self.rate {
            let cost = i128::from(weight) * i128::from(rate.per_ms);
            self.bucket = clamp(i128::from(self.bucket) - cost);
        }
    }

    /// Sets (or, None, removes) its rate; a new rate starts with a full
    /// bucket.
    pub fn set_rate(&mut self, rate: Option<Rate>) {
        if self.rate == rate {
            return;
        }
        self.rate = rate;
        self.bucket = rate.map_or(0, capacity);
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
/// at when its next token is due, while it has a rate, items queued and no
/// token.
pub(super) fn list(store: &mut impl Store, name: &[u8], record: &Record) {
    let due = if record.queued > 0 {
        record.token_due()
    } else {
        None
    };
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
