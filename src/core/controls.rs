//! The tenant controls and the per-partition view: `VTRR.LIMIT`,
//! `VTRR.PAUSE`, `VTRR.RESUME`, `VTRR.PARTITIONS`, `VTRR.RECOUNT` and the
//! default cap of `VTRR.POLICY`.

use std::collections::BTreeMap;

use super::admission::{self, MAX_PARKED_PER_CALL};
use super::backlog;
use super::held;
use super::levels::{of_queue_score, Level};
use super::meta::partition_of;
use super::numbers::{int_field, parse_virtual_time};
use super::partitions::{
    self, format_rate, read_defaults, write_policy_field, Defaults, Record, CAPPED_COUNT_FIELD,
    DEFAULT_CONCURRENCY_FIELD, DEFAULT_RATE_FIELD, PAUSED_COUNT_FIELD,
};
use super::ranks::{self, waited, Rank};
use super::types::{Anomaly, CoreError, Due};
use super::virtual_time::read_placing;
use crate::store::{HashKey, Rate, Store, ZsetKey};

/// One change of `VTRR.LIMIT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitChange {
    /// A cap, or (None) the queue's default.
    Concurrency(Option<u64>),
    Share(u64),
    /// A rate limit, or (None) none (see `throttle`).
    Rate(Option<Rate>),
    /// Most items waiting, or (None) the queue's default (see `backlog`).
    MaxQueued(Option<u64>),
}

/// A partition as `VTRR.PARTITIONS` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionView {
    pub partition: Vec<u8>,
    pub record: Record,
    /// `partition_virtual_time[partition]` (None: not set).
    pub virtual_time: Option<i64>,
    /// The cap in force: its own, else the queue's default.
    pub cap_in_force: Option<u64>,
    /// The rate in force: its own, else the queue's default.
    pub rate_in_force: Option<Rate>,
    /// The MAX-QUEUED in force: its own, else the queue's default.
    pub max_queued_in_force: Option<u64>,
    /// How long its line has waited (ms): None with nothing queued.
    pub waiting_ms: Option<i64>,
    /// With a rate: the whole tokens its bucket holds now, and when it
    /// next holds one if it holds none (Unix ms).
    pub tokens: Option<i64>,
    pub next_token_ms: Option<i64>,
}

fn read_count(store: &mut impl Store, field: &str) -> Option<u64> {
    store
        .hget(HashKey::Policy, field.as_bytes())
        .and_then(|raw| std::str::from_utf8(&raw).ok()?.parse().ok())
}

/// Writes a count of paused or capped partitions (0: no field) that was
/// read as `current`, only when it changed: a no-op must not disturb WATCH.
fn write_count(store: &mut impl Store, field: &str, current: Option<u64>, count: u64) {
    if current == (count > 0).then_some(count) {
        return;
    }
    let mut digits = itoa::Buffer::new();
    let text = (count > 0).then(|| digits.format(count).as_bytes());
    write_policy_field(store, field, text);
}

fn adjust_count(store: &mut impl Store, field: &str, up: bool) {
    let current = read_count(store, field);
    let now = current.unwrap_or(0);
    let next = if up { now + 1 } else { now.saturating_sub(1) };
    write_count(store, field, current, next);
}

/// Whether the cap in force went up (or away): the partition's held
/// backlog then rejoins at the current virtual time (`admission::rejoin`).
fn raised(before: Option<u64>, after: Option<u64>) -> bool {
    match (before, after) {
        (Some(_), None) => true,
        (Some(before), Some(after)) => after > before,
        (None, _) => false,
    }
}

/// `VTRR.LIMIT` with options: applies every change, then lets the partition
/// into `queue` if it may now be served. A partition that comes under
/// control starts parking what it has in `queue` (see `admission`).
pub fn set_limit(
    store: &mut impl Store,
    name: &[u8],
    changes: &[LimitChange],
    anomalies: &mut Vec<Anomaly>,
) -> Result<(), CoreError> {
    let at = read_placing(store, anomalies)?;
    let mut partition = admission::open(store, name, at.defaults, anomalies);
    let before = partition.record.clone();
    let cap_before = partition.record.cap_in_force(at.defaults);
    let was_capped = partition.record.cap.is_some();
    let was_rated = partition.record.rate.is_some();
    let was_limited = partition.record.max_queued.is_some();
    for change in changes {
        match *change {
            LimitChange::Concurrency(cap) => partition.record.cap = cap,
            LimitChange::Share(share) => partition.record.share = share,
            LimitChange::Rate(rate) => {
                partition.record.set_rate(rate);
                if rate.is_none() {
                    store.zrem(ZsetKey::Throttled, name);
                }
            }
            LimitChange::MaxQueued(max_queued) => partition.record.max_queued = max_queued,
        }
    }
    if was_capped != partition.record.cap.is_some() {
        adjust_count(store, CAPPED_COUNT_FIELD, !was_capped);
    }
    if was_limited != partition.record.max_queued.is_some() {
        adjust_count(store, backlog::LIMITED_COUNT_FIELD, !was_limited);
    }
    let unrated = was_rated && partition.record.rate.is_none();
    if unrated || raised(cap_before, partition.record.cap_in_force(at.defaults)) {
        admission::rejoin(store, &mut partition);
    }
    let changed = partition.record != before;
    admission::close(store, partition);
    if changed {
        // Setting what is already set writes nothing (WATCH stays intact).
        park_some(store, at.defaults, anomalies);
    }
    Ok(())
}

/// The parking a control change started, up to a call's bound; the timer
/// goes on with the rest.
fn park_some(store: &mut impl Store, defaults: Defaults, anomalies: &mut Vec<Anomaly>) {
    let mut outcome = Due::default();
    admission::park_queued(store, defaults, MAX_PARKED_PER_CALL, &mut outcome);
    anomalies.append(&mut outcome.anomalies);
}

/// `VTRR.LIMIT` without options: (own cap, share).
pub fn limit(store: &mut impl Store, name: &[u8], anomalies: &mut Vec<Anomaly>) -> Record {
    partitions::read(store, name, anomalies).1
}

/// `VTRR.POLICY ... DEFAULT-CONCURRENCY / DEFAULT-RATE`, from `before` to
/// `after`: sets what every partition without its own has, then settles
/// each partition with a record (a partition without one has nothing
/// queued, and opens under the new defaults). A raised default cap, or a
/// default rate removed, lets their held items in, rejoining at the
/// current virtual time; a new default rate starts with a full bucket; a
/// partition that comes under control starts parking. The caller has read
/// the current virtual time. O(partitions).
pub(super) fn set_defaults(
    store: &mut impl Store,
    before: Defaults,
    after: Defaults,
    anomalies: &mut Vec<Anomaly>,
) -> Result<(), CoreError> {
    // Read before the first write: a refused read leaves the queue as it was.
    let names = store.hfields(HashKey::Partitions)?;
    if before.cap != after.cap {
        let text = after.cap.map(|n| n.to_string());
        write_policy_field(
            store,
            DEFAULT_CONCURRENCY_FIELD,
            text.as_deref().map(str::as_bytes),
        );
    }
    if before.rate != after.rate {
        let text = after.rate.map(format_rate);
        write_policy_field(
            store,
            DEFAULT_RATE_FIELD,
            text.as_deref().map(str::as_bytes),
        );
    }
    let raised_cap = raised(before.cap, after.cap);
    let unrated = before.rate.is_some() && after.rate.is_none();
    for name in names {
        // Opened under the old defaults, closed under the new ones: whether
        // it came under control is judged across the change.
        let mut partition = admission::open(store, &name, before, anomalies);
        partition.defaults = after;
        let own = &partition.record;
        let rejoins = (own.cap.is_none() && raised_cap) || (own.rate.is_none() && unrated);
        if partition.record.rate.is_none() && before.rate != after.rate {
            partition.record.fill();
            store.zrem(ZsetKey::Throttled, &name);
        }
        if rejoins {
            admission::rejoin(store, &mut partition);
        }
        admission::close(store, partition);
    }
    park_some(store, after, anomalies);
    Ok(())
}

/// `VTRR.PAUSE`: false when already paused. Its head (if any) leaves
/// `queue` for `held` as it settles, so no LEASE steps over it; what else
/// it has in `queue` starts parking.
pub fn pause(store: &mut impl Store, name: &[u8], anomalies: &mut Vec<Anomaly>) -> bool {
    let defaults = read_defaults(store, anomalies);
    let mut partition = admission::open(store, name, defaults, anomalies);
    if partition.record.paused {
        return false;
    }
    partition.record.paused = true;
    adjust_count(store, PAUSED_COUNT_FIELD, true);
    admission::close(store, partition);
    park_some(store, defaults, anomalies);
    true
}

/// `VTRR.RESUME`: false when not paused. The partition's held backlog
/// re-enters at the current virtual time, as a partition that was idle
/// would (its items keep their order and spacing), so a long pause earns
/// no burst ahead of the others.
pub fn resume(
    store: &mut impl Store,
    name: &[u8],
    anomalies: &mut Vec<Anomaly>,
) -> Result<bool, CoreError> {
    let at = read_placing(store, anomalies)?;
    let mut partition = admission::open(store, name, at.defaults, anomalies);
    if !partition.record.paused {
        return Ok(false);
    }
    partition.record.paused = false;
    admission::rejoin(store, &mut partition);
    adjust_count(store, PAUSED_COUNT_FIELD, false);
    admission::close(store, partition);
    Ok(true)
}

/// What a partition without its own settings has, as the views show it:
/// the defaults and DEFAULT-MAX-QUEUED.
fn view_defaults(store: &mut impl Store, anomalies: &mut Vec<Anomaly>) -> (Defaults, Option<u64>) {
    let defaults = read_defaults(store, anomalies);
    (defaults, backlog::read_default(store, anomalies))
}

fn view(
    store: &mut impl Store,
    partition: Vec<u8>,
    record: Record,
    (defaults, default_max_queued): (Defaults, Option<u64>),
    now_ms: i64,
) -> PartitionView {
    let virtual_time = int_field(
        store,
        HashKey::PartitionVirtualTime,
        &partition,
        parse_virtual_time,
    )
    .flatten();
    // Refilled to now on a copy, only with a rate to refill.
    let (tokens, next_token_ms) = if record.rate_in_force(defaults).is_some() {
        let mut refilled = record.clone();
        refilled.refill(defaults, now_ms);
        (refilled.tokens(defaults), refilled.token_due(defaults))
    } else {
        (None, None)
    };
    PartitionView {
        cap_in_force: record.cap_in_force(defaults),
        rate_in_force: record.rate_in_force(defaults),
        max_queued_in_force: record.max_queued.or(default_max_queued),
        waiting_ms: record.waiting_since.map(|since| waited(since, now_ms)),
        tokens,
        next_token_ms,
        partition,
        record,
        virtual_time,
    }
}

/// `VTRR.PARTITIONS ... PARTITION`: one partition, O(1).
pub fn partition_view(
    store: &mut impl Store,
    name: &[u8],
    now_ms: i64,
    anomalies: &mut Vec<Anomaly>,
) -> PartitionView {
    let defaults = view_defaults(store, anomalies);
    let record = partitions::read(store, name, anomalies).1;
    view(store, name.to_vec(), record, defaults, now_ms)
}

/// `VTRR.PARTITIONS ... TOP`: how many partitions `rank` holds, and the
/// views of up to `count` of them from `offset` on, worst first.
pub fn partitions_top(
    store: &mut impl Store,
    rank: Rank,
    offset: usize,
    count: usize,
    now_ms: i64,
    anomalies: &mut Vec<Anomaly>,
) -> Result<(u64, Vec<PartitionView>), CoreError> {
    let defaults = view_defaults(store, anomalies);
    let (ranked, names) = ranks::top(store, rank, offset, count)?;
    let views = names
        .into_iter()
        .map(|name| {
            let record = partitions::read(store, &name, anomalies).1;
            view(store, name, record, defaults, now_ms)
        })
        .collect();
    Ok((ranked, views))
}

/// `VTRR.PARTITIONS`: one HSCAN step over the partition records.
pub fn partitions_page(
    store: &mut impl Store,
    cursor: u64,
    count: usize,
    now_ms: i64,
    anomalies: &mut Vec<Anomaly>,
) -> Result<(u64, Vec<PartitionView>), CoreError> {
    let defaults = view_defaults(store, anomalies);
    let (next, entries) = store.hscan(HashKey::Partitions, cursor, count)?;
    let views = entries
        .into_iter()
        .map(|(name, raw)| {
            let record = partitions::parse_or_report(&name, &raw, anomalies);
            view(store, name, record, defaults, now_ms)
        })
        .collect();
    Ok((next, views))
}

/// Counts per partition as the keys hold them. O(N).
pub(super) fn count_from_keys(store: &mut impl Store) -> BTreeMap<Vec<u8>, Counted> {
    let mut counts: BTreeMap<Vec<u8>, Counted> = BTreeMap::new();
    for (zset, slot) in [
        (ZsetKey::Queue, 0),
        (ZsetKey::Inflight, 2),
        (ZsetKey::Delayed, 3),
        (ZsetKey::Dead, 4),
    ] {
        for (id, score) in store.zrange_upto(zset, f64::INFINITY, usize::MAX) {
            let name = partition_of(store, &id);
            let entry = counts.entry(name).or_default();
            entry.states[slot] += 1;
            if zset == ZsetKey::Queue {
                entry.count_level(of_queue_score(score as i64).0);
            }
        }
    }
    for (member, _) in store.zrange_upto(ZsetKey::Held, f64::INFINITY, usize::MAX) {
        if let Some((name, level, _, _)) = held::parse_member(&member) {
            let entry = counts.entry(name.to_vec()).or_default();
            entry.states[0] += 1;
            entry.states[1] += 1;
            entry.count_level(level);
        }
    }
    counts
}

/// A partition's items as the keys hold them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Counted {
    /// Queued (in `queue` or `held`), held, leased, delayed, dead.
    pub states: [u64; 5],
    /// Of its queued items, those at each level other than 0.
    pub levels: BTreeMap<Level, u64>,
}

impl Counted {
    fn count_level(&mut self, level: Level) {
        if level != 0 {
            *self.levels.entry(level).or_default() += 1;
        }
    }
}

/// `VTRR.RECOUNT`: rewrites every partition's counts from the keys (after
/// a Lua script or a hand edit moved items behind the module's back), and
/// the counts of paused and capped partitions. The number of partition
/// records it changed. O(N).
pub fn recount(store: &mut impl Store, anomalies: &mut Vec<Anomaly>) -> Result<u64, CoreError> {
    let defaults = read_defaults(store, anomalies);
    let mut counts = count_from_keys(store);
    let mut names: Vec<Vec<u8>> = store.hfields(HashKey::Partitions)?;
    names.extend(counts.keys().cloned());
    names.sort();
    names.dedup();
    let (mut paused, mut capped, mut limited, mut changed) = (0u64, 0u64, 0u64, 0u64);
    for name in names {
        let counted = counts.remove(&name).unwrap_or_default();
        let [queued, held, leased, delayed, dead] = counted.states;
        let mut partition = admission::open(store, &name, defaults, anomalies);
        let before = partition.record.clone();
        let record = &mut partition.record;
        (
            record.queued,
            record.held,
            record.leased,
            record.delayed,
            record.dead,
        ) = (queued, held, leased, delayed, dead);
        for state in &mut record.levels {
            state.queued = 0;
        }
        for (&level, &count) in &counted.levels {
            record.at_level_mut(level).queued = count;
        }
        paused += u64::from(record.paused);
        capped += u64::from(record.cap.is_some());
        limited += u64::from(record.max_queued.is_some());
        if record.controlled(defaults) {
            admission::park_from_start(store, &mut partition);
        }
        partition.rerank = true;
        if partition.record != before {
            changed += 1;
        }
        admission::close(store, partition);
    }
    let counts = [
        (PAUSED_COUNT_FIELD, paused),
        (CAPPED_COUNT_FIELD, capped),
        (backlog::LIMITED_COUNT_FIELD, limited),
    ];
    for (field, count) in counts {
        let current = read_count(store, field);
        write_count(store, field, current, count);
    }
    Ok(changed)
}

/// (paused, capped) partition counts, as `VTRR.STATS` shows them.
pub fn control_counts(store: &mut impl Store) -> (u64, u64) {
    (
        read_count(store, PAUSED_COUNT_FIELD).unwrap_or(0),
        read_count(store, CAPPED_COUNT_FIELD).unwrap_or(0),
    )
}
