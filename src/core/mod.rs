//! The VTRR fair queue with leases, as plain Rust over [`Store`].
//!
//! Nothing here reads a clock or draws randomness: `now_ms` and lease tokens
//! are passed in, so every function is deterministic and testable without a
//! server. One scoring function (`scoring::place`) serves every way an item
//! enters the queue. One file per concept: scoring, enqueue, lease (with ack
//! and renew), reclaim, delay, nack, dead (with cancel), partitions (counts
//! and the head rule), held, controls (LIMIT, PAUSE, RESUME, PARTITIONS,
//! RECOUNT), counters, stats, check.

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

/// Why a core operation refused to run. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// `current_virtual_time` holds something that is not a number.
    CurrentVirtualTimeNotInteger,
}

/// Something odd found in the keys (written by another client) and handled
/// without losing the item. The operations layer logs these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anomaly {
    /// An item re-entering the queue had no readable `meta`; enqueued with
    /// weight 1 in the empty partition.
    MetaUnreadable { id: Vec<u8> },
    /// A queued, leased or delayed item had no payload; it was moved to the
    /// dead-letter set (reason `payload missing`) instead of being served.
    PayloadMissing { id: Vec<u8> },
    /// A per-item counter (`timeouts`, `nacks`) was not a count; counted from 0.
    CounterUnreadable { counter: &'static str, id: Vec<u8> },
    /// `partition_virtual_time[partition]` was not a number; read as 0.
    PartitionVirtualTimeUnreadable { partition: Vec<u8> },
    /// A `policy` field was not a count; read as NONE (never give up, no
    /// default cap).
    PolicyUnreadable { field: &'static str },
    /// A partition's record in `partitions` was unreadable; started afresh
    /// (`VTRR.RECOUNT` recounts it).
    PartitionRecordUnreadable { partition: Vec<u8> },
}

/// What one call did to items that fell due (expired leases, due delayed
/// items) and to items it dead-lettered.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Due {
    /// Expired leases taken back: requeued or, past the policy, dead.
    pub reclaimed: u64,
    /// Delayed items that joined the queue.
    pub promoted: u64,
    /// Items moved to the dead-letter set.
    pub dead_lettered: u64,
    /// Items of paused or capped partitions moved from `queue` to `held`.
    pub parked: u64,
    /// The timer's run stopped parking at its limit: more may be left.
    pub parking_left: bool,
    pub anomalies: Vec<Anomaly>,
}

/// One item to enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewItem<'a> {
    pub partition: &'a [u8],
    pub id: &'a [u8],
    pub weight: u64,
    pub payload: &'a [u8],
}

/// One granted lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Leased {
    pub id: Vec<u8>,
    pub payload: Vec<u8>,
    pub token: Vec<u8>,
    pub timeouts: i64,
    /// The item's nack count, read only when asked for (WITHCOUNTERS).
    pub nacks: Option<i64>,
    /// The item's virtual-time score when it was popped.
    pub score: f64,
}

#[cfg(test)]
mod tests;
