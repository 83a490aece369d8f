//! What each core operation touches: the keys it is declared to use and
//! whether it writes. The operations layer opens exactly these keys for it
//! (and checks the caller's ACL permissions on them), and the in-memory
//! store of the tests runs each call scoped to them, refusing any other: a
//! key missing here fails the tests instead of reading as empty.

use super::dead::PolicyChange;
use super::levels::Level;
use crate::store::{QueueKey, Scope};

/// A core operation, as the operations layer runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreOp {
    Enqueue,
    /// `VTRR.ENQUEUE ... PRIORITY` of a level other than 0.
    EnqueuePrioritised,
    Defer,
    /// `VTRR.DEFER ... PRIORITY` of a level other than 0.
    DeferPrioritised,
    Lease,
    /// `VTRR.LEASE ... ACK` (or `ACKCOST`): its acks end items' lives,
    /// which clears their last errors.
    LeaseAcking,
    Ack,
    /// `VTRR.ACKCOST`: an ACK whose charges move a partition's items.
    AckCost,
    Renew,
    /// `VTRR.RENEW ... COST`: a renewal whose report charges the partition.
    RenewCost,
    Nack,
    Reclaim,
    /// The timer's run on a queue: expired leases, due delayed items.
    RunDue,
    /// `VTRR.POLICY` without options: the policy and the default cap.
    ReadPolicy,
    /// `VTRR.POLICY` changing only the dead-letter limits.
    SetPolicy,
    /// `VTRR.POLICY` changing the default cap (with or without the limits).
    SetDefaults,
    SetLimit,
    /// `VTRR.LIMIT` without options.
    Limit,
    Pause,
    Resume,
    PartitionView,
    PartitionsPage,
    /// `VTRR.PARTITIONS ... TOP`: a ranking's page.
    PartitionsTop,
    Recount,
    DeadItems,
    Revive,
    Cancel,
    Stats,
    Check,
    /// The timer's look at when a queue next falls due (`ops::next_due`).
    NextDue,
    /// `VTRR.INSPECT`: one key, read whole.
    Inspect,
    /// `VTRR.CONVERT`: the whole queue, read in one layout and written in
    /// the other.
    Convert,
    /// `VTRR.SCHEDULE`: sets a recurring schedule.
    Schedule,
    /// `VTRR.UNSCHEDULE`.
    Unschedule,
    /// `VTRR.SCHEDULES`: the schedules and their next runs.
    Schedules,
    /// `VTRR.JOB`: items' states, by id.
    Job,
}

/// The keys of `parts`, one after another: a key list composed of shared
/// parts ([`keys!`]), checked at compile time to name no key twice.
const fn join<const N: usize>(parts: &[&[QueueKey]]) -> [QueueKey; N] {
    let mut keys = [QueueKey::Queue; N];
    let (mut at, mut part) = (0, 0);
    while part < parts.len() {
        let mut i = 0;
        while i < parts[part].len() {
            let key = parts[part][i];
            let mut seen = 0;
            while seen < at {
                assert!(keys[seen] as usize != key as usize, "a key listed twice");
                seen += 1;
            }
            keys[at] = key;
            at += 1;
            i += 1;
        }
        part += 1;
    }
    assert!(at == N);
    keys
}

/// How many keys `parts` list together.
const fn total(parts: &[&[QueueKey]]) -> usize {
    let (mut n, mut part) = (0, 0);
    while part < parts.len() {
        n += parts[part].len();
        part += 1;
    }
    n
}

/// A key list made of parts (lists and keys).
macro_rules! keys {
    ($($part:expr),+ $(,)?) => {{
        const PARTS: &[&[QueueKey]] = &[$($part),+];
        &join::<{ total(PARTS) }>(PARTS)
    }};
}

/// The operator's rankings.
const RANKS: &[QueueKey] = &[
    QueueKey::RankQueued,
    QueueKey::RankWaiting,
    QueueKey::RankLeased,
    QueueKey::RankDead,
];

/// What ENQUEUE, DEFER and ACK touch only in passing: the rankings (a
/// place moves only out of its band or grain), and `throttled`, written
/// only for a rate-limited partition waiting for its next token (LEASE and
/// the timer, which read it, open it at once: one of another type stops
/// the queue there, with WRONGTYPE).
const IN_PASSING: &[QueueKey] = keys![RANKS, &[QueueKey::Throttled]];

/// The operator's rankings and the queue's totals, which every change of a
/// partition's counts keeps up to date.
const RANKINGS: &[QueueKey] = keys![RANKS, &[QueueKey::Totals]];

/// What every call that counts items per partition opens: the partition
/// records and rankings, the default cap (`policy`), the held items a freed
/// slot or a new item may move, and `throttled`, where a rate-limited
/// partition waits for its next token.
const COUNTED: &[QueueKey] = keys![
    &[QueueKey::Held, QueueKey::HeldAt, QueueKey::Partitions],
    RANKINGS,
    &[QueueKey::Policy, QueueKey::Throttled],
];

/// What an item keeps beside its state, which the end of its life clears
/// (`meta::forget`): a queue that never gives `NACK ... REASON` opens
/// `last_error` and never writes it.
const ITEM_FIELDS: &[QueueKey] = &[
    QueueKey::Meta,
    QueueKey::Priority,
    QueueKey::Timeouts,
    QueueKey::Nacks,
    QueueKey::LastError,
];

const VIRTUAL_TIMES: &[QueueKey] = &[
    QueueKey::PartitionVirtualTime,
    QueueKey::LevelVirtualTime,
    QueueKey::CurrentVirtualTime,
];

/// What a priority level other than 0 adds: that level's virtual times and
/// the items' levels (level 0 touches neither, and opens neither).
const LEVELS: &[QueueKey] = &[QueueKey::LevelVirtualTime, QueueKey::Priority];

const ENQUEUE: &[QueueKey] = keys![
    &[
        QueueKey::Queue,
        QueueKey::Inflight,
        QueueKey::Delayed,
        QueueKey::Dead,
        QueueKey::CurrentVirtualTime,
        QueueKey::PartitionVirtualTime,
        QueueKey::Task,
        QueueKey::Meta,
    ],
    COUNTED,
];

const ENQUEUE_PRIORITISED: &[QueueKey] = keys![ENQUEUE, LEVELS];

const DEFER: &[QueueKey] = keys![ENQUEUE, &[QueueKey::DelayedTask]];

const DEFER_PRIORITISED: &[QueueKey] = keys![DEFER, LEVELS];

/// An ACK ends the item's life: what it leaves beside its state goes.
const ACK: &[QueueKey] = keys![
    &[
        QueueKey::Inflight,
        QueueKey::InflightTask,
        QueueKey::Lease,
        QueueKey::Queue,
    ],
    ITEM_FIELDS,
    COUNTED,
];

/// An ACK, and what a charge moves (`admission::shift`): the partition's
/// held items, head and next virtual time, the parking it starts, and the
/// current virtual time a refund stops at.
const ACK_COST: &[QueueKey] = keys![ACK, &[QueueKey::Parking], VIRTUAL_TIMES];

const RENEW: &[QueueKey] = &[QueueKey::Inflight, QueueKey::Lease];

/// What a change of a partition's settings (or the default cap) may touch:
/// its record, its held items and head, its virtual time (RESUME), and the
/// parking it starts (a walk over `queue` reading each item's `meta`).
const CONTROL: &[QueueKey] = keys![
    &[
        QueueKey::Queue,
        QueueKey::Meta,
        QueueKey::Priority,
        QueueKey::Parking,
    ],
    COUNTED,
    VIRTUAL_TIMES,
];

const PARTITIONS: &[QueueKey] = keys![
    &[QueueKey::Partitions, QueueKey::Policy],
    RANKINGS,
    &[QueueKey::PartitionVirtualTime, QueueKey::LevelVirtualTime],
];

const DEAD: &[QueueKey] = keys![
    &[QueueKey::Dead, QueueKey::DeadTask, QueueKey::DeadReason],
    ITEM_FIELDS,
];

const STATS: &[QueueKey] = keys![
    &[
        QueueKey::Held,
        QueueKey::Policy,
        QueueKey::Queue,
        QueueKey::Inflight,
        QueueKey::Delayed,
        QueueKey::Dead,
        QueueKey::RankQueued,
        QueueKey::RankWaiting,
        QueueKey::Partitions,
        QueueKey::Totals,
    ],
    VIRTUAL_TIMES,
];

const NEXT_DUE: &[QueueKey] = &[
    QueueKey::Finished,
    QueueKey::Policy,
    QueueKey::Queue,
    QueueKey::Inflight,
    QueueKey::Delayed,
    QueueKey::Parking,
    QueueKey::Throttled,
    QueueKey::ScheduleDue,
];

/// Each place an item may be (by id: no `held` member is found without
/// its partition, so `held_at`), and what an item keeps beside its state.
const JOB: &[QueueKey] = keys![
    &[
        QueueKey::Queue,
        QueueKey::HeldAt,
        QueueKey::Inflight,
        QueueKey::Delayed,
        QueueKey::Dead,
        QueueKey::DeadReason,
    ],
    ITEM_FIELDS,
    OUTCOMES,
];

/// A schedule's definition and its next run; nothing of the items.
const SCHEDULES: &[QueueKey] = &[QueueKey::Schedules, QueueKey::ScheduleDue];

/// What a finished job leaves while the queue keeps outcomes (RESULT-TTL,
/// DEDUP-MS; listed just before the schedules' keys): read by ENQUEUE and
/// DEFER for a duplicate, written by the calls that finish a job (ACK, a
/// LEASE's acks, CANCEL). Those open them only on a queue that keeps
/// outcomes ([`CoreOp::when_kept`]); JOB reads what is left whatever the
/// policy, the timer forgets it.
const OUTCOMES: &[QueueKey] = &[QueueKey::Results, QueueKey::Finished];

/// Every key but the schedules' and the outcomes' (the last four): what
/// the calls that move items anywhere and may end their lives or record
/// their errors touch (NACK, REVIVE, a LEASE's acks and CANCEL, which may
/// take an item from any state, a parking partition's last one included).
/// Runs are the timer's to fire, so a LEASE opens (and checks) no key it
/// never reads.
const ITEMS_AND_ERRORS: &[QueueKey] = QueueKey::ALL
    .split_at(QueueKey::ALL.len() - SCHEDULES.len() - OUTCOMES.len())
    .0;

/// [`ITEMS_AND_ERRORS`] but `last_error` (listed just before the
/// schedules' keys): a LEASE without acks, RECLAIM and RECOUNT keep an
/// item's last error as it is, so a queue pays nothing for it there.
const ITEMS: &[QueueKey] = ITEMS_AND_ERRORS.split_at(ITEMS_AND_ERRORS.len() - 1).0;

/// Where ENQUEUE looks for an id already there (and adds nothing).
const LOOKED_IN_BY_ENQUEUE: &[QueueKey] = &[QueueKey::Inflight, QueueKey::Delayed, QueueKey::Dead];

/// Where DEFER looks for an id already there (it adds to `delayed`).
const LOOKED_IN_BY_DEFER: &[QueueKey] = &[QueueKey::Inflight, QueueKey::Dead];

/// What an ACK clears of an item beside its `meta`: its level, counters
/// and last error, which only a queue using them has.
const CLEARED_BY_ACK: &[QueueKey] = &[
    QueueKey::Priority,
    QueueKey::Timeouts,
    QueueKey::Nacks,
    QueueKey::LastError,
];

/// An ACK's, and the held items the slot it frees may let in (nothing is
/// held without a partition under control, and a plain ACK brings none
/// under control; a charge may, and ACKCOST opens them).
const CLEARED_BY_PLAIN_ACK: &[QueueKey] =
    keys![CLEARED_BY_ACK, &[QueueKey::Held, QueueKey::HeldAt]];

/// What a LEASE reads of an item (its level, its NACK count) and the
/// delayed items its due step moves out.
const READ_BY_ANY_LEASE: &[QueueKey] = &[
    QueueKey::Priority,
    QueueKey::Nacks,
    QueueKey::Delayed,
    QueueKey::DelayedTask,
];

/// A LEASE's, and the partitions whose parking it goes on with: parking
/// starts when a partition comes under control, which a LEASE without
/// acks never brings about.
const READ_BY_LEASE: &[QueueKey] = keys![READ_BY_ANY_LEASE, &[QueueKey::Parking]];

/// A LEASE's, and the last errors its acks clear (whose charges, with
/// ACKCOST, may start a parking).
const READ_BY_LEASE_ACKING: &[QueueKey] = keys![READ_BY_ANY_LEASE, &[QueueKey::LastError]];

impl CoreOp {
    /// The keys the operation touches; no other is opened for it.
    pub const fn keys(self) -> &'static [QueueKey] {
        match self {
            CoreOp::Enqueue => ENQUEUE,
            CoreOp::EnqueuePrioritised => ENQUEUE_PRIORITISED,
            CoreOp::Defer => DEFER,
            CoreOp::DeferPrioritised => DEFER_PRIORITISED,
            CoreOp::Ack => ACK,
            CoreOp::AckCost | CoreOp::RenewCost => ACK_COST,
            CoreOp::Renew => RENEW,
            CoreOp::Lease | CoreOp::Reclaim | CoreOp::Recount => ITEMS,
            CoreOp::Nack | CoreOp::Revive | CoreOp::LeaseAcking | CoreOp::Cancel => {
                ITEMS_AND_ERRORS
            }
            CoreOp::RunDue | CoreOp::Check | CoreOp::Inspect | CoreOp::Convert => &QueueKey::ALL,
            // The dead-letter limits need only `policy`, so an ACL that
            // grants just that key can set them.
            CoreOp::ReadPolicy | CoreOp::SetPolicy => &[QueueKey::Policy],
            CoreOp::SetDefaults | CoreOp::SetLimit | CoreOp::Pause | CoreOp::Resume => CONTROL,
            CoreOp::Limit => &[QueueKey::Partitions],
            CoreOp::PartitionView | CoreOp::PartitionsPage | CoreOp::PartitionsTop => PARTITIONS,
            CoreOp::DeadItems => DEAD,
            CoreOp::Stats => STATS,
            CoreOp::NextDue => NEXT_DUE,
            CoreOp::Schedule | CoreOp::Unschedule | CoreOp::Schedules => SCHEDULES,
            CoreOp::Job => JOB,
        }
    }

    /// The keys the operation touches besides [`Self::keys`] on a queue
    /// that keeps outcomes, and opens only on one: the calls that finish a
    /// job, and ENQUEUE and DEFER (DEDUP-MS).
    pub const fn when_kept(self) -> &'static [QueueKey] {
        match self {
            CoreOp::Enqueue
            | CoreOp::EnqueuePrioritised
            | CoreOp::Defer
            | CoreOp::DeferPrioritised
            | CoreOp::Ack
            | CoreOp::AckCost
            | CoreOp::LeaseAcking
            | CoreOp::Cancel => OUTCOMES,
            _ => &[],
        }
    }

    /// The keys of [`Self::keys`] the operation only reads or removes
    /// from, on its hot paths: where an item id is looked for, what an
    /// item's end of life clears, the delayed items a LEASE's due step
    /// moves. The keys layout opens one only if it exists, so a queue pays
    /// for a feature's key once the feature wrote it.
    pub const fn if_present(self) -> &'static [QueueKey] {
        match self {
            CoreOp::Enqueue | CoreOp::EnqueuePrioritised => LOOKED_IN_BY_ENQUEUE,
            CoreOp::Defer | CoreOp::DeferPrioritised => LOOKED_IN_BY_DEFER,
            CoreOp::Ack => CLEARED_BY_PLAIN_ACK,
            CoreOp::AckCost => CLEARED_BY_ACK,
            CoreOp::Lease => READ_BY_LEASE,
            CoreOp::LeaseAcking => READ_BY_LEASE_ACKING,
            _ => &[],
        }
    }

    /// The keys of [`Self::keys`] the keys layout opens only when the
    /// operation touches them: the rankings, on the calls that change
    /// partitions' counts in passing (a place moves only out of its band or
    /// grain), and `throttled` where it is only written. The calls that
    /// read or rebuild them (TOP, STATS, RECOUNT, CHECK, LEASE) and the
    /// controls open them at once, so one of another type is refused there.
    pub const fn lazy(self) -> &'static [QueueKey] {
        match self {
            CoreOp::Enqueue
            | CoreOp::EnqueuePrioritised
            | CoreOp::Defer
            | CoreOp::DeferPrioritised
            | CoreOp::Ack
            | CoreOp::AckCost
            | CoreOp::RenewCost => IN_PASSING,
            CoreOp::Lease
            | CoreOp::LeaseAcking
            | CoreOp::Nack
            | CoreOp::Reclaim
            | CoreOp::RunDue => RANKS,
            _ => &[],
        }
    }

    /// The operation's scope on a queue that keeps outcomes (`kept`) or
    /// not: the keys layout opens `when_kept` only on one that does.
    pub fn scope(self, kept: bool) -> Scope {
        Scope {
            operation: self.name(),
            keys: self.keys(),
            when_kept: self.when_kept(),
            kept,
            if_present: self.if_present(),
            lazy: self.lazy(),
            writes: self.writes(),
        }
    }

    /// Whether the operation writes (its keys are opened for writing).
    pub const fn writes(self) -> bool {
        !matches!(
            self,
            CoreOp::ReadPolicy
                | CoreOp::Limit
                | CoreOp::PartitionView
                | CoreOp::PartitionsPage
                | CoreOp::PartitionsTop
                | CoreOp::DeadItems
                | CoreOp::Stats
                | CoreOp::Check
                | CoreOp::Inspect
                | CoreOp::NextDue
                | CoreOp::Schedules
                | CoreOp::Job
        )
    }

    /// `VTRR.ENQUEUE` at `level`.
    pub fn enqueue(level: Level) -> CoreOp {
        if level == 0 {
            CoreOp::Enqueue
        } else {
            CoreOp::EnqueuePrioritised
        }
    }

    /// `VTRR.DEFER` at `level`.
    pub fn defer(level: Level) -> CoreOp {
        if level == 0 {
            CoreOp::Defer
        } else {
            CoreOp::DeferPrioritised
        }
    }

    /// `VTRR.POLICY` with `changes`: only a default cap moves items.
    pub fn set_policy(changes: &[PolicyChange]) -> CoreOp {
        if changes.iter().any(|c| {
            matches!(
                c,
                PolicyChange::DefaultConcurrency(_) | PolicyChange::DefaultRate(_)
            )
        }) {
            CoreOp::SetDefaults
        } else {
            CoreOp::SetPolicy
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            CoreOp::Enqueue => "enqueue",
            CoreOp::EnqueuePrioritised => "enqueue (with a priority)",
            CoreOp::Defer => "defer",
            CoreOp::DeferPrioritised => "defer (with a priority)",
            CoreOp::Lease => "lease",
            CoreOp::LeaseAcking => "lease (with acks)",
            CoreOp::Ack => "ack",
            CoreOp::AckCost => "ack (with costs)",
            CoreOp::Renew => "renew",
            CoreOp::RenewCost => "renew (with a cost)",
            CoreOp::Nack => "nack",
            CoreOp::Reclaim => "reclaim",
            CoreOp::RunDue => "run_due",
            CoreOp::ReadPolicy => "read_policy",
            CoreOp::SetPolicy => "set_policy",
            CoreOp::SetDefaults => "set_policy (defaults)",
            CoreOp::SetLimit => "set_limit",
            CoreOp::Limit => "limit",
            CoreOp::Pause => "pause",
            CoreOp::Resume => "resume",
            CoreOp::PartitionView => "partition_view",
            CoreOp::PartitionsPage => "partitions_page",
            CoreOp::PartitionsTop => "partitions_top",
            CoreOp::Recount => "recount",
            CoreOp::DeadItems => "dead_items",
            CoreOp::Revive => "revive",
            CoreOp::Cancel => "cancel",
            CoreOp::Stats => "stats",
            CoreOp::Check => "check",
            CoreOp::NextDue => "next_due",
            CoreOp::Convert => "convert",
            CoreOp::Inspect => "inspect",
            CoreOp::Schedule => "schedule",
            CoreOp::Unschedule => "unschedule",
            CoreOp::Schedules => "schedules",
            CoreOp::Job => "job",
        }
    }
}

/// The operation's scope before its queue's policy is read: the keys of
/// finished jobs allowed (the in-memory store of the tests runs it so
/// whatever the policy; `CoreOp::scope(false)` is the narrower one).
impl From<CoreOp> for Scope {
    fn from(op: CoreOp) -> Scope {
        op.scope(true)
    }
}

#[cfg(test)]
mod tests {
    use super::{CoreOp, ITEMS, ITEMS_AND_ERRORS, OUTCOMES, SCHEDULES};
    use crate::store::QueueKey;

    /// `ITEMS_AND_ERRORS` is every key but the schedules' and the
    /// outcomes' (which `QueueKey::ALL` lists last), `ITEMS` the same but
    /// `last_error`.
    #[test]
    fn the_keys_of_items_are_every_key_but_the_schedules_and_outcomes() {
        let items: Vec<QueueKey> = QueueKey::ALL
            .into_iter()
            .filter(|key| !SCHEDULES.contains(key) && !OUTCOMES.contains(key))
            .collect();
        assert_eq!(ITEMS_AND_ERRORS, items.as_slice());
        let without_errors: Vec<QueueKey> = items
            .into_iter()
            .filter(|key| *key != QueueKey::LastError)
            .collect();
        assert_eq!(ITEMS, without_errors.as_slice());
    }
    use crate::core::*;
    use crate::engine::memory::MemoryStore;
    use crate::store::{Store, ZsetKey};

    fn item<'a>(partition: &'a [u8], id: &'a [u8]) -> NewItem<'a> {
        NewItem {
            partition,
            id,
            weight: 1,
            payload: id,
        }
    }

    /// A key left closed while missing, or until touched, is one the
    /// operation declares, and only a writing operation has keys left
    /// closed while missing (a reading one's missing key is never opened).
    #[test]
    fn keys_opened_only_if_present_are_declared_keys_of_writing_operations() {
        for op in [
            CoreOp::Enqueue,
            CoreOp::EnqueuePrioritised,
            CoreOp::Defer,
            CoreOp::DeferPrioritised,
            CoreOp::Ack,
            CoreOp::AckCost,
            CoreOp::Lease,
            CoreOp::LeaseAcking,
        ] {
            assert!(!op.if_present().is_empty() && op.writes(), "{op:?}");
            for key in op.if_present().iter().chain(op.lazy()) {
                assert!(op.keys().contains(key), "{op:?} {key:?}");
            }
        }
    }

    /// Every operation, the reading ones included, runs within its declared
    /// keys on a queue with items in every state and every control set (the
    /// property tests run the writing ones in random interleavings); on
    /// this queue, which keeps no outcomes, those that finish or add jobs
    /// run without the outcomes' keys, as the keys layout opens them.
    #[test]
    fn every_operation_stays_within_its_declared_keys() {
        let mut store = MemoryStore::new();
        let mut anomalies = Vec::new();
        let items = [
            item(b"a", b"1"),
            item(b"a", b"2"),
            item(b"a", b"3"),
            item(b"b", b"4"),
            item(b"b", b"5"),
            item(b"c", b"6"),
        ];
        enqueue(&mut store.scoped(CoreOp::Enqueue.scope(false)), 0, &items).unwrap();
        let limits = [
            PolicyChange::MaxTimeouts(Some(0)),
            PolicyChange::MaxNacks(Some(1)),
        ];
        set_policy(
            &mut store.scoped(CoreOp::set_policy(&limits)),
            &limits,
            &mut anomalies,
        )
        .unwrap();
        let cap = [PolicyChange::DefaultConcurrency(Some(2))];
        set_policy(
            &mut store.scoped(CoreOp::set_policy(&cap)),
            &cap,
            &mut anomalies,
        )
        .unwrap();
        let changes = [LimitChange::Concurrency(Some(1)), LimitChange::Share(2)];
        set_limit(
            &mut store.scoped(CoreOp::SetLimit),
            b"b",
            &changes,
            &mut anomalies,
        )
        .unwrap();
        assert!(pause(
            &mut store.scoped(CoreOp::Pause),
            b"c",
            &mut anomalies
        ));
        defer(
            &mut store.scoped(CoreOp::Defer.scope(false)),
            0,
            50,
            &[item(b"a", b"7")],
        )
        .unwrap();
        let mut n = 0;
        let request = LeaseRequest {
            now_ms: 0,
            lease_ms: 10,
            count: 4,
            due_limit: 10,
            with_counters: true,
        };
        let leased = lease(&mut store.scoped(CoreOp::Lease), &request, || {
            n += 1;
            format!("t{n}").into_bytes()
        })
        .unwrap()
        .leased;
        assert_eq!(leased.len(), 3);
        let [first, second, third] = &leased[..] else {
            unreachable!()
        };
        // Prioritised items, queued (a's in `queue`, c's held: c is paused)
        // and delayed (promoted below), for the calls below.
        let urgent = [item(b"a", b"8"), item(b"c", b"9")];
        let scoped = &mut store.scoped(CoreOp::enqueue(3).scope(false));
        enqueue_at(scoped, 0, 3, &urgent).unwrap();
        let later = [item(b"a", b"10")];
        defer_at(
            &mut store.scoped(CoreOp::defer(-2).scope(false)),
            0,
            50,
            -2,
            &later,
        )
        .unwrap();
        let acked = ack(
            &mut store.scoped(CoreOp::Ack.scope(false)),
            &[Ack::pair(&first.id, &first.token)],
            &mut anomalies,
        );
        assert_eq!(acked, 1);
        assert!(renew(
            &mut store.scoped(CoreOp::Renew),
            &Ack::pair(&second.id, &second.token),
            0,
            20,
            &mut anomalies,
        ));
        let report = Ack {
            id: &second.id,
            token: &second.token,
            cost: Some(7),
            result: None,
        };
        assert!(renew(
            &mut store.scoped(CoreOp::RenewCost),
            &report,
            0,
            20,
            &mut anomalies,
        ));
        let how = Nack::Dead;
        let nacked = nack(
            &mut store.scoped(CoreOp::Nack),
            &third.id,
            &third.token,
            0,
            how,
            Some(b"boom"),
            &mut anomalies,
        );
        assert!(matches!(nacked, Ok(Some(Nacked::Dead(_)))));
        let reclaimed = reclaim(&mut store.scoped(CoreOp::Reclaim), 30, 10).unwrap();
        assert_eq!(reclaimed.dead_lettered, 1);
        let due = run_due(
            &mut store.scoped(CoreOp::RunDue),
            60,
            10,
            STEPS_FOR_ANY_FIRING,
        )
        .unwrap();
        assert_eq!(due.promoted, 2);
        let dead = dead_items(&mut store.scoped(CoreOp::DeadItems), 10);
        assert_eq!(dead.len(), 2);
        assert_eq!(
            revive(&mut store.scoped(CoreOp::Revive), &[&dead[0].id])
                .unwrap()
                .count,
            1
        );
        assert_eq!(
            cancel(
                &mut store.scoped(CoreOp::Cancel.scope(false)),
                &[&dead[1].id, b"6"],
                &mut anomalies
            ),
            2
        );
        assert!(resume(&mut store.scoped(CoreOp::Resume), b"c", &mut anomalies).unwrap());
        assert_eq!(
            recount(&mut store.scoped(CoreOp::Recount), &mut anomalies).unwrap(),
            0
        );

        let mut reading = store.scoped(CoreOp::ReadPolicy);
        read_policy(&mut reading, &mut anomalies);
        assert_eq!(
            partitions::read_defaults(&mut reading, &mut anomalies).cap,
            Some(2)
        );
        assert_eq!(
            limit(&mut store.scoped(CoreOp::Limit), b"b", &mut anomalies).cap,
            Some(1)
        );
        partition_view(
            &mut store.scoped(CoreOp::PartitionView),
            b"a",
            0,
            &mut anomalies,
        );
        let (_, page) = partitions_page(
            &mut store.scoped(CoreOp::PartitionsPage),
            0,
            10,
            0,
            &mut anomalies,
        )
        .unwrap();
        assert_eq!(page.len(), 3);
        let (ranked, top) = partitions_top(
            &mut store.scoped(CoreOp::PartitionsTop),
            Rank::Queued,
            0,
            10,
            0,
            &mut anomalies,
        )
        .unwrap();
        assert_eq!((ranked, top.len()), (3, 3));
        stats(&mut store.scoped(CoreOp::Stats), 60, &mut anomalies).unwrap();
        let mut next_due = store.scoped(CoreOp::NextDue);
        assert!(next_due.zfirst(ZsetKey::Inflight).is_none());
        assert!(next_due.zfirst(ZsetKey::Delayed).is_none());
        assert_eq!(
            check::check(&mut store.scoped(CoreOp::Check)).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(anomalies, []);
    }

    #[test]
    #[should_panic(expected = "renew reads Meta, which it does not declare")]
    fn a_key_not_declared_is_refused() {
        let mut store = MemoryStore::new();
        store
            .scoped(CoreOp::Renew)
            .hget(crate::store::HashKey::Meta, b"x");
    }

    #[test]
    #[should_panic(expected = "stats writes Queue, but it is declared read-only")]
    fn a_write_in_a_reading_operation_is_refused() {
        let mut store = MemoryStore::new();
        store.scoped(CoreOp::Stats).zadd(ZsetKey::Queue, b"x", 1.0);
    }
}
