//! The types every concept of the core shares: a leaf, imported by the
//! others and importing none of them.

use crate::store::StoreError;
use crate::text::Quoted;

/// Why a core operation refused to run. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// `current_virtual_time` holds something that is not a number.
    CurrentVirtualTimeNotInteger,
    /// `VTRR.SCHEDULE` with a timing that has no run after now (a cron
    /// pattern whose years are past).
    NoRunAhead,
    /// A cron search found no run within its steps.
    ScheduleSearchTooLong,
    /// A read that is a call to the server (HSCAN, HKEYS, ZCOUNT) was
    /// refused; the operations that make one read before they write.
    Store(StoreError),
    /// ENQUEUE or DEFER would take `partition` past its MAX-QUEUED: the
    /// whole call (`refused` items) is refused, nothing written
    /// (`backlog`).
    PartitionFull {
        partition: Vec<u8>,
        max_queued: u64,
        /// What it has waiting (queued or delayed).
        waiting: u64,
        /// What the call would add to it.
        adds: u64,
        refused: u64,
    },
}

impl From<StoreError> for CoreError {
    fn from(error: StoreError) -> Self {
        CoreError::Store(error)
    }
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
    /// A finished job's record in `results` did not read; taken as none.
    OutcomeUnreadable { id: Vec<u8> },
    /// A partition's record in `partitions` was unreadable; started afresh
    /// (`VTRR.RECOUNT` recounts it).
    PartitionRecordUnreadable { partition: Vec<u8> },
    /// A `totals` counter was not a count; read as 0.
    TotalUnreadable { field: &'static str },
    /// A schedule due in `schedule_due` had no readable definition in
    /// `schedules`; it fires nothing and leaves `schedule_due`.
    ScheduleUnreadable { schedule: Vec<u8> },
    /// A schedule's next run was not found within a search's steps (a
    /// definition VTRR.SCHEDULE would refuse, written by another client);
    /// it leaves `schedule_due`.
    ScheduleRunNotFound { schedule: Vec<u8> },
}

/// The sentence the operations layer logs (after `vtrr: queue <name>: `).
impl std::fmt::Display for Anomaly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = Quoted;
        match self {
            Anomaly::MetaUnreadable { id } => write!(
                f,
                "item {} had no readable meta; re-enqueued with weight 1 in the empty partition",
                text(id)
            ),
            Anomaly::PayloadMissing { id } => write!(
                f,
                "item {} had no payload; moved to the dead-letter set (reason: payload missing)",
                text(id)
            ),
            Anomaly::CounterUnreadable { counter, id } => write!(
                f,
                "item {} had an unreadable {counter} count; counted from 0",
                text(id)
            ),
            Anomaly::PolicyUnreadable { field } => {
                write!(f, "policy field {field} is not a count; read as NONE")
            }
            Anomaly::OutcomeUnreadable { id } => write!(
                f,
                "the outcome kept for {} did not read; taken as none",
                text(id)
            ),
            Anomaly::PartitionRecordUnreadable { partition } => write!(
                f,
                "partition {} had an unreadable record in partitions; counted afresh (VTRR.RECOUNT repairs it)",
                text(partition)
            ),
            Anomaly::TotalUnreadable { field } => {
                write!(f, "totals field {field} is not a count; read as 0")
            }
            Anomaly::ScheduleUnreadable { schedule } => write!(
                f,
                "schedule {} had no readable definition in schedules; it fires no more (VTRR.SCHEDULE sets it again)",
                text(schedule)
            ),
            Anomaly::ScheduleRunNotFound { schedule } => write!(
                f,
                "schedule {}: no next run found within a search's steps; it fires no more (VTRR.SCHEDULE refuses such a pattern)",
                text(schedule)
            ),
            Anomaly::PartitionVirtualTimeUnreadable { partition } => write!(
                f,
                "partition {} had an unreadable virtual time; read as 0",
                text(partition)
            ),
        }
    }
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
    /// Rate-limited partitions whose next token came due: they may be
    /// served again (`throttle`).
    pub refilled: u64,
    /// Runs of recurring schedules enqueued (`schedule`).
    pub fired: u64,
    /// Items of paused or capped partitions moved from `queue` to `held`.
    pub parked: u64,
    /// The timer's run stopped parking at its limit: more may be left.
    pub parking_left: bool,
    /// A slot or a token of the queue's own limits came free: blocked
    /// leases may go on (`queue_limits`).
    pub queue_room: bool,
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

/// One lease a worker finishes (`VTRR.ACK`, `VTRR.ACKCOST`): fenced by its
/// token, and, when the worker reported one, the cost the item turned out
/// to have, in the units of its weight (see `charge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack<'a> {
    pub id: &'a [u8],
    pub token: &'a [u8],
    pub cost: Option<u64>,
    /// What the job returned (`VTRR.ACKRESULT`), kept while the queue keeps
    /// results (`outcomes`).
    pub result: Option<&'a [u8]>,
}

impl<'a> Ack<'a> {
    /// A plain ACK's (id, token) pair: its partition keeps the weight.
    pub fn pair(id: &'a [u8], token: &'a [u8]) -> Self {
        Ack {
            id,
            token,
            cost: None,
            result: None,
        }
    }
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
    /// The partition it was served in (its `meta`'s; empty when that is
    /// missing or unreadable), read to place it anyway.
    pub partition: Vec<u8>,
    /// The item's virtual-time score when it was popped.
    pub score: f64,
}
