//! The one key vocabulary of a queue, shared with vtrr-queue: every key of
//! queue `<name>` is `vtrr:<name>:<suffix>`. [`QueueKey`] names them all;
//! [`ZsetKey`] and [`HashKey`] are the sorted sets and hashes among them,
//! as the [`Store`](super::Store) operations take them.

pub const PREFIX: &[u8] = b"vtrr:";

/// What a key must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    String,
    Hash,
    Zset,
    /// The module's own type: a whole queue in the `native` layout.
    Native,
}

impl KeyKind {
    /// What it is, as errors and logs name it ("a hash").
    pub fn described(self) -> &'static str {
        match self {
            KeyKind::String => "a string",
            KeyKind::Hash => "a hash",
            KeyKind::Zset => "a sorted set",
            KeyKind::Native => "a native vtrr queue",
        }
    }
}

/// The keys of a queue: vtrr-queue's nine, then the module's own (delayed
/// and dead items, nack counts, the dead-letter policy, ...), which the Lua
/// scripts never see. The schedules' two come last (`core::access` leaves
/// them out of the calls that move items), the finished jobs' two before
/// them (left out of the calls that neither finish nor enqueue one), and
/// `last_error` before those (left out of those that never record nor
/// clear an item's error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueKey {
    Queue,
    CurrentVirtualTime,
    PartitionVirtualTime,
    Task,
    Meta,
    Inflight,
    InflightTask,
    Lease,
    Timeouts,
    Delayed,
    DelayedTask,
    Nacks,
    Dead,
    DeadTask,
    DeadReason,
    Policy,
    Held,
    HeldAt,
    Partitions,
    Parking,
    RankQueued,
    RankWaiting,
    RankLeased,
    RankDead,
    Totals,
    Throttled,
    Priority,
    LevelVirtualTime,
    LastError,
    Results,
    Finished,
    Schedules,
    ScheduleDue,
}

impl QueueKey {
    pub const ALL: [QueueKey; 33] = [
        QueueKey::Queue,
        QueueKey::CurrentVirtualTime,
        QueueKey::PartitionVirtualTime,
        QueueKey::Task,
        QueueKey::Meta,
        QueueKey::Inflight,
        QueueKey::InflightTask,
        QueueKey::Lease,
        QueueKey::Timeouts,
        QueueKey::Delayed,
        QueueKey::DelayedTask,
        QueueKey::Nacks,
        QueueKey::Dead,
        QueueKey::DeadTask,
        QueueKey::DeadReason,
        QueueKey::Policy,
        QueueKey::Held,
        QueueKey::HeldAt,
        QueueKey::Partitions,
        QueueKey::Parking,
        QueueKey::RankQueued,
        QueueKey::RankWaiting,
        QueueKey::RankLeased,
        QueueKey::RankDead,
        QueueKey::Totals,
        QueueKey::Throttled,
        QueueKey::Priority,
        QueueKey::LevelVirtualTime,
        QueueKey::LastError,
        QueueKey::Results,
        QueueKey::Finished,
        QueueKey::Schedules,
        QueueKey::ScheduleDue,
    ];

    pub const fn index(self) -> usize {
        self as usize
    }

    /// Its bit in a set of keys kept as a `u64` (at its index).
    pub const fn bit(self) -> u64 {
        1 << self.index()
    }

    pub const fn suffix(self) -> &'static str {
        match self {
            QueueKey::Queue => "queue",
            QueueKey::CurrentVirtualTime => "current_virtual_time",
            QueueKey::PartitionVirtualTime => "partition_virtual_time",
            QueueKey::Task => "task",
            QueueKey::Meta => "meta",
            QueueKey::Inflight => "inflight",
            QueueKey::InflightTask => "inflight_task",
            QueueKey::Lease => "lease",
            QueueKey::Timeouts => "timeouts",
            QueueKey::Delayed => "delayed",
            QueueKey::DelayedTask => "delayed_task",
            QueueKey::Nacks => "nacks",
            QueueKey::Dead => "dead",
            QueueKey::DeadTask => "dead_task",
            QueueKey::DeadReason => "dead_reason",
            QueueKey::Policy => "policy",
            QueueKey::Held => "held",
            QueueKey::HeldAt => "held_at",
            QueueKey::Partitions => "partitions",
            QueueKey::Parking => "parking",
            QueueKey::RankQueued => "rank_queued",
            QueueKey::RankWaiting => "rank_waiting",
            QueueKey::RankLeased => "rank_leased",
            QueueKey::RankDead => "rank_dead",
            QueueKey::Totals => "totals",
            QueueKey::Throttled => "throttled",
            QueueKey::Schedules => "schedules",
            QueueKey::ScheduleDue => "schedule_due",
            QueueKey::Priority => "priority",
            QueueKey::LevelVirtualTime => "level_virtual_time",
            QueueKey::LastError => "last_error",
            QueueKey::Results => "results",
            QueueKey::Finished => "finished",
        }
    }

    pub const fn kind(self) -> KeyKind {
        match self {
            QueueKey::Queue
            | QueueKey::Inflight
            | QueueKey::Delayed
            | QueueKey::Dead
            | QueueKey::Held
            | QueueKey::Parking
            | QueueKey::RankQueued
            | QueueKey::RankWaiting
            | QueueKey::RankLeased
            | QueueKey::RankDead
            | QueueKey::Throttled
            | QueueKey::Finished
            | QueueKey::ScheduleDue => KeyKind::Zset,
            QueueKey::CurrentVirtualTime => KeyKind::String,
            _ => KeyKind::Hash,
        }
    }
}

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
    /// `vtrr:<name>:rank_queued`: partition -> minus its queued count, for
    /// those with any queued (see `core::ranks`; negated so the worst come
    /// first in ascending order, ties by name).
    RankQueued,
    /// `vtrr:<name>:rank_waiting`: partition -> since when its line has
    /// waited (Unix ms), for those with any queued.
    RankWaiting,
    /// `vtrr:<name>:rank_leased`: partition -> minus its leased count.
    RankLeased,
    /// `vtrr:<name>:rank_dead`: partition -> minus its dead count.
    RankDead,
    /// `vtrr:<name>:throttled`: rate-limited partition with items queued
    /// and no token -> when its bucket next holds one (Unix ms; see
    /// `core::throttle`).
    Throttled,
    /// `vtrr:<name>:schedule_due`: schedule -> when its next run falls due
    /// (Unix ms; see `core::schedule`).
    ScheduleDue,
    /// `vtrr:<name>:finished`: id of a job that finished while the queue
    /// keeps outcomes -> when its record goes (Unix ms; see
    /// `core::outcomes`).
    Finished,
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
    /// `vtrr:<name>:totals`: `enqueued`, `leased`, `acked`, `nacked`,
    /// `dead`, `expired` -> how many the queue has had (see `core::ranks`).
    Totals,
    /// `vtrr:<name>:schedules`: schedule -> its definition (timing, missed
    /// policy, partition, weight, payload; see `core::schedule`).
    Schedules,
    /// `vtrr:<name>:priority`: id -> its priority level, for items of a
    /// level other than 0, in any state (see `core::levels`).
    Priority,
    /// `vtrr:<name>:level_virtual_time`: `<level>` -> that level's current
    /// virtual time, `<level> <partition>` -> the partition's next virtual
    /// time at that level, for levels other than 0 (see `core::levels`).
    LevelVirtualTime,
    /// `vtrr:<name>:last_error`: id -> the reason its last `NACK ... REASON`
    /// gave, kept until the item leaves (see `core::nack`).
    LastError,
    /// `vtrr:<name>:results`: id of a finished job -> its outcome (how it
    /// finished, when, its result; see `core::outcomes`).
    Results,
}

impl ZsetKey {
    /// The sorted set `key` is, if it is one.
    pub fn of(key: QueueKey) -> Option<ZsetKey> {
        ZsetKey::ALL.into_iter().find(|z| QueueKey::from(*z) == key)
    }

    pub const ALL: [ZsetKey; 13] = [
        ZsetKey::Queue,
        ZsetKey::Inflight,
        ZsetKey::Delayed,
        ZsetKey::Dead,
        ZsetKey::Held,
        ZsetKey::Parking,
        ZsetKey::RankQueued,
        ZsetKey::RankWaiting,
        ZsetKey::RankLeased,
        ZsetKey::RankDead,
        ZsetKey::Throttled,
        ZsetKey::ScheduleDue,
        ZsetKey::Finished,
    ];

    pub const fn index(self) -> usize {
        self as usize
    }
}

impl HashKey {
    /// The hash `key` is, if it is one.
    pub fn of(key: QueueKey) -> Option<HashKey> {
        HashKey::ALL.into_iter().find(|h| QueueKey::from(*h) == key)
    }

    pub const ALL: [HashKey; 19] = [
        HashKey::PartitionVirtualTime,
        HashKey::Task,
        HashKey::Meta,
        HashKey::InflightTask,
        HashKey::Lease,
        HashKey::Timeouts,
        HashKey::DelayedTask,
        HashKey::Nacks,
        HashKey::DeadTask,
        HashKey::DeadReason,
        HashKey::Policy,
        HashKey::HeldAt,
        HashKey::Partitions,
        HashKey::Totals,
        HashKey::Schedules,
        HashKey::Priority,
        HashKey::LevelVirtualTime,
        HashKey::LastError,
        HashKey::Results,
    ];

    pub const fn index(self) -> usize {
        self as usize
    }
}

impl From<ZsetKey> for QueueKey {
    fn from(key: ZsetKey) -> Self {
        match key {
            ZsetKey::Queue => QueueKey::Queue,
            ZsetKey::Inflight => QueueKey::Inflight,
            ZsetKey::Delayed => QueueKey::Delayed,
            ZsetKey::Dead => QueueKey::Dead,
            ZsetKey::Held => QueueKey::Held,
            ZsetKey::Parking => QueueKey::Parking,
            ZsetKey::RankQueued => QueueKey::RankQueued,
            ZsetKey::RankWaiting => QueueKey::RankWaiting,
            ZsetKey::RankLeased => QueueKey::RankLeased,
            ZsetKey::RankDead => QueueKey::RankDead,
            ZsetKey::Throttled => QueueKey::Throttled,
            ZsetKey::ScheduleDue => QueueKey::ScheduleDue,
            ZsetKey::Finished => QueueKey::Finished,
        }
    }
}

impl From<HashKey> for QueueKey {
    fn from(key: HashKey) -> Self {
        match key {
            HashKey::PartitionVirtualTime => QueueKey::PartitionVirtualTime,
            HashKey::Task => QueueKey::Task,
            HashKey::Meta => QueueKey::Meta,
            HashKey::InflightTask => QueueKey::InflightTask,
            HashKey::Lease => QueueKey::Lease,
            HashKey::Timeouts => QueueKey::Timeouts,
            HashKey::DelayedTask => QueueKey::DelayedTask,
            HashKey::Nacks => QueueKey::Nacks,
            HashKey::DeadTask => QueueKey::DeadTask,
            HashKey::DeadReason => QueueKey::DeadReason,
            HashKey::Policy => QueueKey::Policy,
            HashKey::HeldAt => QueueKey::HeldAt,
            HashKey::Partitions => QueueKey::Partitions,
            HashKey::Totals => QueueKey::Totals,
            HashKey::Schedules => QueueKey::Schedules,
            HashKey::Priority => QueueKey::Priority,
            HashKey::LevelVirtualTime => QueueKey::LevelVirtualTime,
            HashKey::LastError => QueueKey::LastError,
            HashKey::Results => QueueKey::Results,
        }
    }
}

/// The keys one operation is declared to touch, and whether it may write
/// them (`core::access` declares them). A store opened for it touches no
/// other: the in-memory store refuses (tests), the Redis store asserts (debug
/// builds), where an undeclared key would read as empty and drop its writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope {
    /// The operation's name, for the message of a refusal.
    pub operation: &'static str,
    pub keys: &'static [QueueKey],
    /// The keys of finished jobs, which the operation touches only on a
    /// queue that keeps outcomes: opened only then (a queue pays for
    /// outcomes when it keeps them).
    pub when_kept: &'static [QueueKey],
    /// Whether the queue keeps outcomes, so `when_kept` is open too: true
    /// until a store opening the keys reads otherwise from the policy.
    pub kept: bool,
    /// Keys of `keys` the operation only reads or removes from: one missing
    /// when the call starts reads as empty, and removing from it changes
    /// nothing, so the keys layout neither checks nor opens it (a lookup
    /// instead of an open), and adding to it is a bug.
    pub if_present: &'static [QueueKey],
    /// Keys of `keys` the keys layout opens when the call first touches
    /// them, not before: the rankings, which most calls never move. Their
    /// ACL is checked before anything is written, but not their type: one
    /// of another type (another client's) is left alone and logged.
    pub lazy: &'static [QueueKey],
    pub writes: bool,
}

impl Scope {
    /// Whether the operation may touch `key` this way.
    pub fn allows(&self, key: QueueKey, write: bool) -> bool {
        self.declares(key) && (self.writes || !write)
    }

    fn declares(&self, key: QueueKey) -> bool {
        self.keys.contains(&key) || (self.kept && self.when_kept.contains(&key))
    }

    /// The keys of `if_present` that do not exist, by `exists` (their
    /// [`QueueKey::bit`]s): the store leaves them closed, reading as empty.
    pub fn missing(&self, mut exists: impl FnMut(QueueKey) -> bool) -> u64 {
        self.if_present
            .iter()
            .filter(|&&key| !exists(key))
            .fold(0, |missing, key| missing | key.bit())
    }

    /// Why adding to `key`, missing when the call started, is refused.
    pub fn refusal_to_add(&self, key: QueueKey) -> String {
        format!(
            "{} adds to {key:?}, which it declares read or removed only (core/access.rs) and which was missing",
            self.operation
        )
    }

    /// Why touching `key` is refused.
    pub fn refusal(&self, key: QueueKey, write: bool) -> String {
        let how = if write { "writes" } else { "reads" };
        if self.declares(key) {
            format!(
                "{} {how} {key:?}, but it is declared read-only (core/access.rs)",
                self.operation
            )
        } else if self.when_kept.contains(&key) {
            format!(
                "{} {how} {key:?} on a queue that keeps no outcomes (core/access.rs)",
                self.operation
            )
        } else {
            format!(
                "{} {how} {key:?}, which it does not declare (core/access.rs)",
                self.operation
            )
        }
    }
}

/// `vtrr:<queue>:<suffix>`.
pub fn key_name(queue: &[u8], key: QueueKey) -> Vec<u8> {
    let mut name = Vec::with_capacity(PREFIX.len() + queue.len() + 1 + key.suffix().len());
    name.extend_from_slice(PREFIX);
    name.extend_from_slice(queue);
    name.push(b':');
    name.extend_from_slice(key.suffix().as_bytes());
    name
}

/// The queue name of a key whose entries fall due (`vtrr:<name>:inflight`,
/// lease expiries; `vtrr:<name>:delayed`, delayed items;
/// `vtrr:<name>:parking`, parkings under way, due at once;
/// `vtrr:<name>:schedule_due`, recurring runs), if it is one.
pub fn queue_of_due_key(key: &[u8]) -> Option<&[u8]> {
    let rest = key.strip_prefix(PREFIX)?;
    let name = rest
        .strip_suffix(b":inflight")
        .or_else(|| rest.strip_suffix(b":delayed"))
        .or_else(|| rest.strip_suffix(b":parking"))
        .or_else(|| rest.strip_suffix(b":schedule_due"))?;
    (!name.is_empty()).then_some(name)
}

/// The queue name of `vtrr:<name>:queue`, if `key` is one (a native queue
/// lives there).
pub fn queue_of_queue_key(key: &[u8]) -> Option<&[u8]> {
    let name = key.strip_prefix(PREFIX)?.strip_suffix(b":queue")?;
    (!name.is_empty()).then_some(name)
}

/// Whether `queue` has a Redis Cluster hash tag (`{...}` with something
/// inside), so `vtrr:<queue>:*` all hash to the slot of that tag.
pub fn has_hash_tag(queue: &[u8]) -> bool {
    let Some(open) = queue.iter().position(|&b| b == b'{') else {
        return false;
    };
    queue[open + 1..]
        .iter()
        .position(|&b| b == b'}')
        .is_some_and(|len| len > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_vtrr_queue_layout() {
        assert_eq!(key_name(b"files", QueueKey::Queue), b"vtrr:files:queue");
        assert_eq!(
            key_name(b"{f}", QueueKey::InflightTask),
            b"vtrr:{f}:inflight_task"
        );
        for (i, key) in QueueKey::ALL.iter().enumerate() {
            assert_eq!(key.index(), i);
        }
        for (i, key) in ZsetKey::ALL.iter().enumerate() {
            assert_eq!(key.index(), i);
        }
        for (i, key) in HashKey::ALL.iter().enumerate() {
            assert_eq!(key.index(), i);
        }
    }

    #[test]
    fn hash_tags_follow_cluster_rules() {
        assert!(has_hash_tag(b"{files}"));
        assert!(has_hash_tag(b"jobs{t1}x"));
        assert!(!has_hash_tag(b"files"));
        assert!(!has_hash_tag(b"{}files"));
        assert!(!has_hash_tag(b"{files"));
    }

    #[test]
    fn due_keys_name_their_queue() {
        assert_eq!(queue_of_due_key(b"vtrr:a:b:inflight"), Some(&b"a:b"[..]));
        assert_eq!(queue_of_due_key(b"vtrr:a:delayed"), Some(&b"a"[..]));
        assert_eq!(queue_of_due_key(b"vtrr:a:parking"), Some(&b"a"[..]));
        assert_eq!(queue_of_due_key(b"vtrr:a:inflight_task"), None);
        assert_eq!(queue_of_due_key(b"vtrr:a:delayed_task"), None);
        assert_eq!(queue_of_due_key(b"vtrr::inflight"), None);
        assert_eq!(queue_of_due_key(b"other:a:inflight"), None);
    }
}
