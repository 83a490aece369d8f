//! The queue's own limits (`VTRR.POLICY ... CONCURRENCY`, `... RATE`): at
//! most so many items leased at once across every partition, and a token
//! bucket every lease spends its item's weight from, on top of each
//! partition's own cap and rate.
//!
//! They are enforced where LEASE takes the next item, so the slots and
//! tokens go out in the order LEASE serves: VTRR order, each backlogged
//! partition in its turn, shares respected. A whale holds the global budget
//! no longer than its turn; nothing is leased and put back. A LEASE that
//! meets a full queue or an empty bucket stops there: the next finished
//! lease (ACK, NACK, CANCEL, an expiry) or the timer at the next token
//! wakes blocked clients.
//!
//! Kept in `policy`: the cap and rate in `queue-options` (with the
//! outcomes' options: `partitions::QUEUE_OPTIONS_FIELD`) and the bucket,
//! `rate-bucket` (`<held> <refilled-at>`, token-milliseconds as a
//! partition's; absent: full). The
//! bucket is written only by a call that spends from it or finds a token
//! that came due (the timer): a refill need not be written to count
//! (`Bucket::refill`), so an idle queue's polls write nothing.

use super::bucket::Bucket;
use super::types::Anomaly;
use crate::store::{HashKey, Rate, Store, ZsetKey};

pub const BUCKET_FIELD: &str = "rate-bucket";

/// The queue's own limits; none by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueLimits {
    /// Most items leased at once, across the queue.
    pub cap: Option<u64>,
    /// The queue's rate: weight units per `per_ms`, at most `burst` at once.
    pub rate: Option<Rate>,
}

impl QueueLimits {
    pub fn is_none(self) -> bool {
        self.cap.is_none() && self.rate.is_none()
    }
}

/// Why a LEASE stopped short of its count for the queue's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// CONCURRENCY items are leased.
    Full,
    /// The bucket holds no token until `token_due` (Unix ms).
    Starved { token_due: i64 },
}

/// What the queue's limits allow one LEASE, as it goes: the slots left and
/// the bucket, refilled to the call's time.
pub(super) struct Allowance {
    limits: QueueLimits,
    leased: u64,
    bucket: Bucket,
    spent: bool,
}

impl Allowance {
    /// None when the queue has no limits of its own (it pays nothing more).
    pub fn open(
        store: &mut impl Store,
        limits: QueueLimits,
        now_ms: i64,
        anomalies: &mut Vec<Anomaly>,
    ) -> Option<Allowance> {
        if limits.is_none() {
            return None;
        }
        let leased = match limits.cap {
            Some(_) => store.zcard(ZsetKey::Inflight),
            None => 0,
        };
        let mut bucket = Bucket::default();
        if let Some(rate) = limits.rate {
            bucket = read_bucket(store, anomalies);
            bucket.refill(rate, now_ms);
        }
        Some(Allowance {
            limits,
            leased,
            bucket,
            spent: false,
        })
    }

    /// Why the next lease may not be granted now, if it may not.
    pub fn stop(&self) -> Option<Stop> {
        if self.limits.cap.is_some_and(|cap| self.leased >= cap) {
            return Some(Stop::Full);
        }
        let rate = self.limits.rate?;
        let token_due = self.bucket.token_due(rate)?;
        Some(Stop::Starved { token_due })
    }

    /// A lease of an item of `weight` was granted.
    pub fn took(&mut self, weight: u64) {
        self.leased += 1;
        if let Some(rate) = self.limits.rate {
            self.bucket.spend(rate, weight);
            self.spent = true;
        }
    }

    /// Writes the bucket if the call spent from it.
    pub fn close(self, store: &mut impl Store) {
        if self.spent {
            write_bucket(store, self.bucket);
        }
    }
}

/// When the queue's bucket next holds a token while it has items queued
/// (None: it holds one, has no rate, or nothing waits for it): the timer
/// wakes then.
pub fn token_due(store: &mut impl Store, limits: QueueLimits) -> Option<i64> {
    let rate = limits.rate?;
    if store.zcard(ZsetKey::Queue) == 0 {
        return None;
    }
    read_bucket(store, &mut Vec::new()).token_due(rate)
}

/// The timer's part: a bucket that was written empty and holds a token by
/// `now_ms` is written refilled (so the queue is no longer due), and blocked
/// clients may go on. Whether it was.
pub fn refill_due(
    store: &mut impl Store,
    limits: QueueLimits,
    now_ms: i64,
    anomalies: &mut Vec<Anomaly>,
) -> bool {
    let Some(rate) = limits.rate else {
        return false;
    };
    let mut bucket = read_bucket(store, anomalies);
    if bucket.has_token(rate) {
        return false;
    }
    bucket.refill(rate, now_ms);
    if !bucket.has_token(rate) {
        return false;
    }
    write_bucket(store, bucket);
    true
}

/// The whole tokens the queue's bucket holds at `now_ms` (None: no rate).
pub fn tokens(
    store: &mut impl Store,
    limits: QueueLimits,
    now_ms: i64,
    anomalies: &mut Vec<Anomaly>,
) -> Option<i64> {
    let rate = limits.rate?;
    let mut bucket = read_bucket(store, anomalies);
    bucket.refill(rate, now_ms);
    Some(bucket.tokens(rate))
}

/// The bucket as `rate-bucket` keeps it; absent (or unreadable, reported)
/// reads as full.
fn read_bucket(store: &mut impl Store, anomalies: &mut Vec<Anomaly>) -> Bucket {
    let Some(raw) = store.hget(HashKey::Policy, BUCKET_FIELD.as_bytes()) else {
        return Bucket::default();
    };
    let parsed = std::str::from_utf8(&raw).ok().and_then(|text| {
        let (held, refilled_at) = text.split_once(' ')?;
        Some(Bucket {
            held: held.parse().ok()?,
            refilled_at: Some(refilled_at.parse().ok()?),
        })
    });
    parsed.unwrap_or_else(|| {
        anomalies.push(Anomaly::PolicyUnreadable {
            field: BUCKET_FIELD,
        });
        Bucket::default()
    })
}

fn write_bucket(store: &mut impl Store, bucket: Bucket) {
    match bucket.refilled_at {
        Some(at) => {
            let text = format!("{} {}", bucket.held, at);
            store.hset(HashKey::Policy, BUCKET_FIELD.as_bytes(), text.as_bytes());
        }
        None => store.hdel(HashKey::Policy, BUCKET_FIELD.as_bytes()),
    }
}

/// Forgets the bucket (it starts full): the queue's rate changed.
pub(super) fn fill(store: &mut impl Store) {
    if store
        .hget(HashKey::Policy, BUCKET_FIELD.as_bytes())
        .is_some()
    {
        store.hdel(HashKey::Policy, BUCKET_FIELD.as_bytes());
    }
}
