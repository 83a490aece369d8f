//! The VTRR fair queue with leases, as plain Rust over [`Store`].
//!
//! Nothing here reads a clock or draws randomness: `now_ms` and lease tokens
//! are passed in, so every function is deterministic and testable without a
//! server. One scoring function (`scoring::place`) serves enqueue and reclaim.
//! One file per concept: scoring, enqueue, lease (with ack and renew),
//! reclaim, stats, check.

pub mod check;
mod enqueue;
mod lease;
mod numbers;
mod reclaim;
mod scoring;
mod stats;

pub use enqueue::{enqueue, EnqueueOutcome};
pub use lease::{ack, lease, renew, LeaseOutcome};
pub use numbers::{format_meta, parse_meta, parse_virtual_time, MAX_VIRTUAL_TIME};
pub use reclaim::{reclaim, ReclaimOutcome};
pub use scoring::read_current_virtual_time;
pub use stats::{stats, Stats};

/// Why a core operation refused to run. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// `current_virtual_time` holds something that is not a number.
    CurrentVirtualTimeNotInteger,
}

/// Something odd found in the keys (written by another client) and repaired
/// without losing the item. The command layer logs these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anomaly {
    /// A reclaimed item had no readable `meta`; re-enqueued with weight 1 in
    /// the empty partition.
    MetaUnreadable { id: Vec<u8> },
    /// A queued or leased item had no payload; an empty one was used.
    PayloadMissing { id: Vec<u8> },
    /// `timeouts[id]` was not an integer; counted from 0.
    TimeoutsUnreadable { id: Vec<u8> },
    /// `partition_virtual_time[partition]` was not a number; read as 0.
    PartitionVirtualTimeUnreadable { partition: Vec<u8> },
}

/// One item to enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The item's virtual-time score when it was popped.
    pub score: f64,
}

#[cfg(test)]
mod tests;
