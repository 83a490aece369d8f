//! The VTRR fair queue with leases, as plain Rust over [`Store`].
//!
//! Nothing here reads a clock or draws randomness: `now_ms` and lease tokens
//! are passed in, so every function is deterministic and testable without a
//! server. One scoring function (`scoring::place`) serves every way an item
//! enters the queue. One file per concept, imports running one way (each
//! line uses only those below it):
//!
//! - access: the keys each operation declares (what the layouts open)
//! - commands: enqueue, lease (with ack and renew), nack, dead (the
//!   dead-letter set, its policy, revive, cancel), controls (LIMIT, PAUSE,
//!   RESUME, PARTITIONS, RECOUNT), stats, job (an item's status), check,
//!   key_view (INSPECT),
//!   convert (a whole queue read and written, for CONVERT)
//! - due (what falls due: the step LEASE and the timer run first), delay,
//!   reclaim, schedule (recurring runs) and cron_search (its metered search)
//! - charge (a reported cost charged to a partition), scoring (where an
//!   item enters the queue), backlog (MAX-QUEUED: an enqueue refused whole)
//! - admission (the head rule, settling, parking), throttle (a partition's
//!   token bucket), leased (a lease's state)
//! - ranks (the rankings of partitions and the queue's totals, kept from
//!   each record change)
//! - held (the encoding of `held`), partitions (the per-partition record),
//!   meta (an item's weight and partition), levels (priority levels and
//!   their virtual times), counters
//! - queue_limits (the queue's own CONCURRENCY and RATE, taken at LEASE),
//!   outcomes (what the queue keeps of finished jobs: results, dedup)
//! - bucket (a token bucket's arithmetic: a partition's and the queue's)
//! - virtual_time, numbers, types

pub mod access;
mod admission;
mod backlog;
mod bucket;
mod charge;
pub mod check;
mod controls;
pub mod convert;
mod counters;
mod cron_search;
mod dead;
mod delay;
mod due;
mod enqueue;
mod held;
mod job;
pub mod key_view;
mod lease;
mod leased;
pub(crate) mod levels;
mod meta;
mod nack;
mod numbers;
mod outcomes;
pub mod partitions;
mod queue_limits;
mod ranks;
mod reclaim;
mod schedule;
mod scoring;
mod stats;
mod throttle;
mod types;
mod virtual_time;

pub use access::CoreOp;
pub use admission::MAX_PARKED_PER_CALL;
pub use backlog::read_default as read_default_max_queued;
pub use controls::{
    control_counts, limit, partition_view, partitions_page, partitions_top, pause, recount, resume,
    set_limit, LimitChange, PartitionView,
};
pub use cron_search::STEPS_PER_SEARCH;
#[cfg(test)]
pub use dead::cancel;
pub use dead::{
    cancel_at, dead_items, read_policy, revive, set_policy, Cancelled, DeadItem, Moved, Policy,
    PolicyChange, Reason,
};
pub use delay::{defer, defer_at};
pub use due::{next_due, next_run, run_due};
pub use enqueue::{enqueue, enqueue_at, EnqueueOutcome};
pub use job::{job_status, status_of, JobState, JobStatus};
#[cfg(test)]
pub use lease::ack;
pub use lease::{ack_each, lease, renew, LeaseOutcome, LeaseRequest, Settled};
pub use levels::{parse_level, Level, MAX_LEVEL};
pub use nack::{nack, Nack, Nacked};
pub use numbers::{format_meta, parse_meta, parse_virtual_time, MAX_VIRTUAL_TIME};
pub use partitions::keeps_outcomes;
pub use queue_limits::{QueueLimits, Stop};
pub use ranks::Rank;
pub use reclaim::reclaim;
pub use schedule::STEPS_FOR_ANY_FIRING;
pub use schedule::{
    run_id, schedule, schedule_view, schedules_page, unschedule, Missed, Schedule, ScheduleView,
    Timing, TimingError, RUN_ID_PREFIX,
};
pub use stats::{stats, Stats};
pub use types::{Ack, Anomaly, CoreError, Due, Leased, NewItem};
pub use virtual_time::read_current_virtual_time;

#[cfg(test)]
mod tests;
