//! The VTRR fair queue with leases, as plain Rust over [`Store`].
//!
//! Nothing here reads a clock or draws randomness: `now_ms` and lease tokens
//! are passed in, so every function is deterministic and testable without a
//! server. One scoring function (`scoring::place`) serves every way an item
//! enters the queue. One file per concept: scoring, enqueue, lease (with ack
//! and renew), reclaim, delay, nack, dead (with cancel), partitions (counts
//! and the head rule), held, controls (LIMIT, PAUSE, RESUME, PARTITIONS,
//! RECOUNT), counters, stats, check.

pub mod access;
pub mod check;
mod controls;
mod counters;
mod dead;
mod delay;
mod enqueue;
mod held;
mod lease;
mod nack;
mod numbers;
pub mod partitions;
mod reclaim;
mod scoring;
mod stats;
mod types;

pub use access::CoreOp;
pub use controls::{
    control_counts, limit, partition_view, partitions_page, pause, recount, resume,
    set_default_cap, set_limit, LimitChange, PartitionView,
};
pub use dead::{
    cancel, dead_items, read_policy, revive, set_policy, DeadItem, Moved, Policy, PolicyChange,
    Reason,
};
pub use delay::{defer, run_due};
pub use enqueue::{enqueue, EnqueueOutcome};
pub use lease::{ack, lease, renew, LeaseOutcome, LeaseRequest, MAX_PARKED_PER_LEASE};
pub use nack::{nack, Nack, Nacked};
pub use numbers::{format_meta, parse_meta, parse_virtual_time, MAX_VIRTUAL_TIME};
pub use reclaim::reclaim;
pub use scoring::read_current_virtual_time;
pub use stats::{stats, Stats};
pub use types::{Anomaly, CoreError, Due, Leased, NewItem};

#[cfg(test)]
mod tests;
