//! The storage surface the VTRR core sees: the handful of sorted-set, hash
//! and string operations on one queue's keys. `redis` implements it over the
//! module key API, `memory` over plain collections for tests.
//!
//! Every `unsafe` block of the module lives in this folder, one file per
//! concern: `api` (the load-time guard), `strings`, `acl`, `key_names`,
//! `effects` (replication), `redis` (the key API), `blocking`, `cluster`
//! (slot migration), `server` (clock, tokens, databases, server events) and
//! `command_info`.

mod acl;
pub mod api;
pub mod blocking;
pub mod cluster;
pub mod command_info;
mod effects;
mod key_names;
pub mod memory;
pub mod redis;
pub mod server;
mod strings;

pub use strings::bytes_of;

/// The sorted sets of a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ZsetKey {
    /// `vtrr:<name>:queue`: task id -> virtual-time score.
    Queue,
    /// `vtrr:<name>:inflight`: leased task id -> lease expiry (Unix ms).
    Inflight,
    /// `vtrr:<name>:delayed`: delayed task id -> due time (Unix ms).
    Delayed,
    /// `vtrr:<name>:dead`: dead task id -> when it died (Unix ms).
    Dead,
    /// `vtrr:<name>:held`: queued items of partitions under a cap or pause
    /// that wait outside `queue`; all scores 0, members ordered by
    /// (partition, virtual time, id) (see `core::held`).
    Held,
    /// `vtrr:<name>:parking`: partition whose items queued before it came
    /// under control are being moved to `held` -> the score its walk over
    /// `queue` has passed (see `core::admission`).
    Parking,
}

/// The hashes of a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HashKey {
    /// `vtrr:<name>:partition_virtual_time`: partition -> next virtual time.
    PartitionVirtualTime,
    /// `vtrr:<name>:task`: id -> payload of a queued item.
    Task,
    /// `vtrr:<name>:meta`: id -> `<weight>:<partition>`.
    Meta,
    /// `vtrr:<name>:inflight_task`: id -> payload of a leased item.
    InflightTask,
    /// `vtrr:<name>:lease`: id -> lease token.
    Lease,
    /// `vtrr:<name>:timeouts`: id -> number of reclaims.
    Timeouts,
    /// `vtrr:<name>:delayed_task`: id -> payload of a delayed item.
    DelayedTask,
    /// `vtrr:<name>:nacks`: id -> number of nacks.
    Nacks,
    /// `vtrr:<name>:dead_task`: id -> payload of a dead item.
    DeadTask,
    /// `vtrr:<name>:dead_reason`: id -> why it died.
    DeadReason,
    /// `vtrr:<name>:policy`: `max-timeouts` / `max-nacks` /
    /// `default-concurrency` -> n, and the counts of paused and capped
    /// partitions.
    Policy,
    /// `vtrr:<name>:held_at`: held id -> its virtual time in `held`.
    HeldAt,
    /// `vtrr:<name>:partitions`: partition -> its counts and settings.
    Partitions,
}

/// One HSCAN step: the next cursor (0 when done) and field/value pairs.
pub type HashPage = (u64, Vec<(Vec<u8>, Vec<u8>)>);

/// Operations on one queue's keys. Implementations have already checked the
/// key types, so operations cannot fail; a missing key reads as empty.
pub trait Store {
    fn zscore(&mut self, key: ZsetKey, member: &[u8]) -> Option<f64>;
    fn zadd(&mut self, key: ZsetKey, member: &[u8], score: f64);
    /// Removes `member`; true when it was present.
    fn zrem(&mut self, key: ZsetKey, member: &[u8]) -> bool;
    /// The lowest (score, member) entry.
    fn zfirst(&mut self, key: ZsetKey) -> Option<(Vec<u8>, f64)>;
    /// Up to `limit` entries with score <= `max`, in ascending (score, member) order.
    fn zrange_upto(&mut self, key: ZsetKey, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)>;
    /// Up to `limit` entries with `above` < score <= `max`, in ascending
    /// (score, member) order.
    fn zrange_above(
        &mut self,
        key: ZsetKey,
        above: f64,
        max: f64,
        limit: usize,
    ) -> Vec<(Vec<u8>, f64)>;
    /// The first member >= `from` in member order, of a sorted set whose
    /// scores are all equal (`held`).
    fn zfirst_from(&mut self, key: ZsetKey, from: &[u8]) -> Option<Vec<u8>>;
    fn zcard(&mut self, key: ZsetKey) -> u64;
    /// Number of entries with score <= `max`.
    fn zcount_upto(&mut self, key: ZsetKey, max: f64) -> u64;

    fn hget(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>>;
    fn hset(&mut self, key: HashKey, field: &[u8], value: &[u8]);
    fn hdel(&mut self, key: HashKey, field: &[u8]);
    fn hlen(&mut self, key: HashKey) -> u64;
    /// Every field of a hash (O(N): only for the invariant check).
    fn hfields(&mut self, key: HashKey) -> Vec<Vec<u8>>;
    /// One step of HSCAN.
    fn hscan(&mut self, key: HashKey, cursor: u64, count: usize) -> HashPage;
    fn delete(&mut self, key: HashKey);

    /// Raw content of `vtrr:<name>:current_virtual_time`.
    fn current_virtual_time(&mut self) -> Option<Vec<u8>>;
    fn set_current_virtual_time(&mut self, value: i64);
}
