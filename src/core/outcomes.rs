//! What became of a finished job, while the queue keeps it (`VTRR.POLICY
//! ... RESULT-TTL`, `... DEDUP-MS`): one record per finished id in
//! `results` (`d <finished-ms>[ <result>]` for done, `c <finished-ms>` for
//! cancelled), and when it goes in `finished` (id -> Unix ms). The same
//! record serves both: a producer reads (or waits for) a job's result, and
//! ENQUEUE counts an id finished within DEDUP-MS as already there.
//!
//! A queue with neither option writes and reads none of it: ACK and CANCEL
//! write a record only when the policy keeps outcomes, and ENQUEUE looks
//! only when DEDUP-MS is set. Records go by the timer (`expire_due`, a
//! bounded number per run, oldest first), never by a scan.

use super::types::Anomaly;
use crate::store::{HashKey, Store, ZsetKey};

/// How long the queue keeps finished jobs' outcomes; none by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keeping {
    /// Results (and done/cancelled states) are kept this long.
    pub result_ttl_ms: Option<i64>,
    /// An id finished less than this long ago is not enqueued again.
    pub dedup_ms: Option<i64>,
}

impl Keeping {
    /// How long a record is kept: the longer of the two (None: none kept).
    fn window_ms(self) -> Option<i64> {
        self.result_ttl_ms.max(self.dedup_ms)
    }

    /// Whether anything is kept of finished jobs.
    pub(super) fn keeps_any(self) -> bool {
        self.window_ms().is_some()
    }
}

/// How a job finished, as its record keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// Acked, with the result its worker handed back (if the queue keeps
    /// results and one was given).
    Done {
        result: Option<Vec<u8>>,
    },
    Cancelled,
}

/// A finished job's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub finish: Finish,
    pub finished_ms: i64,
}

impl Outcome {
    fn format(&self) -> Vec<u8> {
        let mut out = match self.finish {
            Finish::Done { .. } => b"d ".to_vec(),
            Finish::Cancelled => b"c ".to_vec(),
        };
        out.extend_from_slice(itoa::Buffer::new().format(self.finished_ms).as_bytes());
        if let Finish::Done {
            result: Some(result),
        } = &self.finish
        {
            out.push(b' ');
            out.extend_from_slice(result);
        }
        out
    }

    fn parse(raw: &[u8]) -> Option<Outcome> {
        let (kind, rest) = (raw.first()?, raw.get(2..)?);
        if raw.get(1) != Some(&b' ') {
            return None;
        }
        let (time, result) = match rest.iter().position(|&b| b == b' ') {
            Some(at) => (&rest[..at], Some(rest[at + 1..].to_vec())),
            None => (rest, None),
        };
        let finished_ms = std::str::from_utf8(time).ok()?.parse().ok()?;
        let finish = match (kind, result) {
            (b'd', result) => Finish::Done { result },
            (b'c', None) => Finish::Cancelled,
            _ => return None,
        };
        Some(Outcome {
            finish,
            finished_ms,
        })
    }
}

/// Records that job `id` finished at `now_ms` as `finish`, when the queue
/// keeps outcomes (its result only when it keeps results).
pub(super) fn keep(
    store: &mut impl Store,
    keeping: Keeping,
    id: &[u8],
    finish: Finish,
    now_ms: i64,
) {
    let Some(window) = keeping.window_ms() else {
        return;
    };
    let finish = match finish {
        Finish::Done { result } if keeping.result_ttl_ms.is_some() => Finish::Done { result },
        Finish::Done { .. } => Finish::Done { result: None },
        Finish::Cancelled => Finish::Cancelled,
    };
    let outcome = Outcome {
        finish,
        finished_ms: now_ms,
    };
    store.hset(HashKey::Results, id, &outcome.format());
    store.zadd(ZsetKey::Finished, id, now_ms.saturating_add(window) as f64);
}

/// The record of job `id`, if the queue still keeps one (an unreadable
/// one is reported and reads as none).
pub fn outcome_of(
    store: &mut impl Store,
    id: &[u8],
    anomalies: &mut Vec<Anomaly>,
) -> Option<Outcome> {
    let raw = store.hget(HashKey::Results, id)?;
    let outcome = Outcome::parse(&raw);
    if outcome.is_none() {
        anomalies.push(Anomaly::OutcomeUnreadable { id: id.to_vec() });
    }
    outcome
}

/// Whether ENQUEUE takes `id` as already there: it finished less than
/// DEDUP-MS before `now_ms`. Reads only (a refused call writes nothing).
pub(super) fn deduplicated(
    store: &mut impl Store,
    keeping: Keeping,
    id: &[u8],
    now_ms: i64,
    anomalies: &mut Vec<Anomaly>,
) -> bool {
    let Some(dedup_ms) = keeping.dedup_ms else {
        return false;
    };
    outcome_of(store, id, anomalies)
        .is_some_and(|outcome| now_ms < outcome.finished_ms.saturating_add(dedup_ms))
}

/// An id enqueued again starts a new life: a record of its last one (past
/// the dedup window, kept for its result) goes.
pub(super) fn forget_previous(store: &mut impl Store, keeping: Keeping, id: &[u8]) {
    if keeping.window_ms().is_some() && store.hget(HashKey::Results, id).is_some() {
        forget(store, id);
    }
}

fn forget(store: &mut impl Store, id: &[u8]) {
    store.hdel(HashKey::Results, id);
    store.zrem(ZsetKey::Finished, id);
}

/// The timer's part: up to `limit` records whose time is up at `now_ms`
/// go, oldest first. How many.
pub(super) fn expire_due(store: &mut impl Store, now_ms: i64, limit: usize) -> usize {
    if limit == 0 {
        return 0;
    }
    let due = store.zrange_upto(ZsetKey::Finished, now_ms as f64, limit);
    for (id, _) in &due {
        forget(store, id);
    }
    due.len()
}
