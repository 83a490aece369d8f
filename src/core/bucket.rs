//! A token bucket's arithmetic, in integers so replicas refill exactly as
//! the primary: what it holds counts token-milliseconds (a token is
//! `per_ms` of them), refilled by `amount` per millisecond up to `burst`
//! tokens. A partition's bucket (`throttle`) and the queue's
//! (`queue_limits`) are both this.

use crate::store::Rate;

/// A token bucket: what it holds, in token-milliseconds, as of when it was
/// last refilled (None: full, as of any time). A partition's is kept in its
/// record; the queue's own (`VTRR.POLICY ... RATE`) in `policy`
/// (`queue_limits`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bucket {
    pub held: i64,
    pub refilled_at: Option<i64>,
}

impl Bucket {
    /// What it holds at `rate`: full while it has not been refilled since
    /// it was (`refilled_at` None).
    fn level(self, rate: Rate) -> i64 {
        match self.refilled_at {
            None => capacity(rate),
            Some(_) => self.held,
        }
    }

    /// Whether it holds a token.
    pub fn has_token(self, rate: Rate) -> bool {
        self.level(rate) >= token(rate)
    }

    /// When it next holds a token, refilled from what it holds now; None
    /// when it holds one.
    pub fn token_due(self, rate: Rate) -> Option<i64> {
        self.refilled_by(rate, token(rate))
    }

    /// When it holds `level` token-milliseconds (None: it does).
    pub(super) fn refilled_by(self, rate: Rate, level: i64) -> Option<i64> {
        let missing = i128::from(level) - i128::from(self.level(rate));
        if missing <= 0 {
            return None;
        }
        let amount = i128::from(rate.amount.max(1));
        let wait = (missing + amount - 1) / amount;
        Some(clamp(i128::from(self.refilled_at.unwrap_or(0)) + wait))
    }

    /// The whole tokens it holds as last refilled (negative while it pays
    /// back an overdraft).
    pub fn tokens(self, rate: Rate) -> i64 {
        self.level(rate).div_euclid(token(rate).max(1))
    }

    /// Refilled up to `now_ms` (never backwards: a clock that went back, on
    /// a new primary, refills nothing until it passes the last). Refilling
    /// in steps ends where one refill would: what it holds grows linearly
    /// and stops at full, so a refill need not be written to count.
    pub fn refill(&mut self, rate: Rate, now_ms: i64) {
        let Some(refilled_at) = self.refilled_at else {
            // Full as of any time: from now on, it counts.
            self.held = capacity(rate);
            self.refilled_at = Some(now_ms);
            return;
        };
        if now_ms <= refilled_at {
            return;
        }
        let elapsed = i128::from(now_ms) - i128::from(refilled_at);
        let filled = i128::from(self.held) + elapsed * i128::from(rate.amount);
        self.held = clamp(filled.min(i128::from(capacity(rate))));
        self.refilled_at = Some(now_ms);
    }

    /// A lease of an item of `weight` spends it (refilled by the same call
    /// first: it counts from then).
    pub fn spend(&mut self, rate: Rate, weight: u64) {
        let cost = i128::from(weight) * i128::from(rate.per_ms);
        self.held = clamp(i128::from(self.level(rate)) - cost);
    }

    /// Whether it is full as of when it was last refilled.
    pub(super) fn is_full(self, rate: Rate) -> bool {
        self.level(rate) >= capacity(rate)
    }
}

/// One token, in token-milliseconds.
pub(super) fn token(rate: Rate) -> i64 {
    i64::try_from(rate.per_ms).unwrap_or(i64::MAX)
}

/// A full bucket, in token-milliseconds.
pub(super) fn capacity(rate: Rate) -> i64 {
    clamp(i128::from(rate.burst) * i128::from(rate.per_ms))
}

fn clamp(value: i128) -> i64 {
    i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX })
}
