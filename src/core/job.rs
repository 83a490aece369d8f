//! `VTRR.JOB` and `VTRR.RESULT`: what became of an item, by id — where it
//! is, with what the queue keeps of it there, or how it finished. Each answer is a few O(1) lookups (a sorted
//! set's score by member, a hash's field): no scan, whatever the backlog.

use super::counters;
use super::levels::Level;
use super::meta;
use super::numbers::parse_meta;
use super::outcomes::{self, Finish, Outcome};
use super::types::Anomaly;
use crate::store::{HashKey, Store, ZsetKey};

/// Where an item is, and what that place says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// In `queue`: a worker's LEASE may take it.
    Queued,
    /// In `held`: queued behind its partition's cap, pause or rate.
    Held,
    /// Leased until `expires_ms` (then reclaimed).
    Leased { expires_ms: i64 },
    /// Waiting until `due_ms` (DEFER, a NACK's delay).
    Delayed { due_ms: i64 },
    /// Dead-lettered at `died_ms`, for `reason`.
    Dead { died_ms: i64, reason: Vec<u8> },
    /// Acked at `finished_ms`, with the result its worker handed back
    /// (while the queue keeps outcomes: `outcomes`).
    Done {
        finished_ms: i64,
        result: Option<Vec<u8>>,
    },
    /// Cancelled at `finished_ms` (while the queue keeps outcomes).
    Cancelled { finished_ms: i64 },
    /// Not in the queue: never enqueued, or its life ended (acked,
    /// cancelled) and nothing of it is kept.
    Unknown,
}

impl JobState {
    /// Whether the job's life is over: what a waiter for its result waits
    /// for.
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            JobState::Dead { .. } | JobState::Done { .. } | JobState::Cancelled { .. }
        )
    }
}

/// One item's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStatus {
    pub state: JobState,
    /// None when the item is unknown or its `meta` is missing or
    /// unreadable.
    pub partition: Option<Vec<u8>>,
    pub weight: Option<u64>,
    pub level: Level,
    pub timeouts: i64,
    pub nacks: i64,
    /// What its last `NACK ... REASON` said failed.
    pub last_error: Option<Vec<u8>>,
}

/// The status of each of `ids`, in order.
pub fn job_status(
    store: &mut impl Store,
    ids: &[&[u8]],
    anomalies: &mut Vec<Anomaly>,
) -> Vec<JobStatus> {
    ids.iter()
        .map(|id| status_of(store, id, anomalies))
        .collect()
}

/// The status of `id` (`VTRR.RESULT`'s look).
pub fn status_of(store: &mut impl Store, id: &[u8], anomalies: &mut Vec<Anomaly>) -> JobStatus {
    let state = state_of(store, id, anomalies);
    if matches!(
        state,
        JobState::Unknown | JobState::Done { .. } | JobState::Cancelled { .. }
    ) {
        return JobStatus {
            state,
            partition: None,
            weight: None,
            level: 0,
            timeouts: 0,
            nacks: 0,
            last_error: None,
        };
    }
    let stored = store.hget(HashKey::Meta, id);
    let parsed = stored.as_deref().and_then(parse_meta);
    JobStatus {
        partition: parsed.map(|(_, partition)| partition.to_vec()),
        weight: parsed.map(|(weight, _)| weight),
        level: meta::level_of(store, id),
        timeouts: counters::read(store, HashKey::Timeouts, id, anomalies),
        nacks: counters::read(store, HashKey::Nacks, id, anomalies),
        last_error: store.hget(HashKey::LastError, id),
        state,
    }
}

/// The first place that has `id`, in the order an item moves through them,
/// then its kept outcome.
fn state_of(store: &mut impl Store, id: &[u8], anomalies: &mut Vec<Anomaly>) -> JobState {
    if store.zscore(ZsetKey::Queue, id).is_some() {
        return JobState::Queued;
    }
    if store.hget(HashKey::HeldAt, id).is_some() {
        return JobState::Held;
    }
    if let Some(expiry) = store.zscore(ZsetKey::Inflight, id) {
        return JobState::Leased {
            expires_ms: expiry as i64,
        };
    }
    if let Some(due) = store.zscore(ZsetKey::Delayed, id) {
        return JobState::Delayed { due_ms: due as i64 };
    }
    if let Some(died) = store.zscore(ZsetKey::Dead, id) {
        return JobState::Dead {
            died_ms: died as i64,
            reason: store.hget(HashKey::DeadReason, id).unwrap_or_default(),
        };
    }
    match outcomes::outcome_of(store, id, anomalies) {
        Some(Outcome {
            finish: Finish::Done { result },
            finished_ms,
        }) => JobState::Done {
            finished_ms,
            result,
        },
        Some(Outcome {
            finish: Finish::Cancelled,
            finished_ms,
        }) => JobState::Cancelled { finished_ms },
        None => JobState::Unknown,
    }
}
