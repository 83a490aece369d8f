//! Admission: which of a partition's queued items wait in `queue`, where
//! LEASE pops, and which wait in `held`, where it never looks.
//!
//! The head rule: a partition under control (a cap, the queue's default
//! cap, a pause, a rate, items still held, or a charge owed) keeps at most one item, its *head*,
//! in `queue`, and only while it may be served; the rest wait in `held`.
//! A partition that was never under control keeps all its items in
//! `queue`, exactly as the Lua scripts do.
//!
//! When control begins, the items the partition already has in `queue` are
//! parked: moved to `held` at their virtual times by [`park_queued`], a
//! bounded number per call, the timer finishing the rest (`Parking` in its
//! record). Meanwhile they are served at their own times when the
//! partition may be served, and parked when LEASE meets them otherwise; a
//! rejoin (RESUME, a raised cap) waits until they are all held, and the
//! partition with it, and so does a charge (a reported cost, [`shift`]).
//! So no item in `queue` ever owes a rejoin's or a charge's shift: either
//! moves the whole backlog in O(1), by the record's `offset`.
//!
//! Every change goes through a [`Partition`] opened here and written back
//! by [`close`], which settles it first: promotes the next held item when
//! the partition may be served and has no head, finishes a parking with
//! nothing left in `queue`, gives back a cancelled gap.

use super::held;
use super::levels::{of_queue_score, queue_score, Level, MAX_LEAD};
use super::meta::partition_of;
use super::partitions::{self, Defaults, Parking, Record, State, Stored};
use super::ranks;
use super::throttle;
use super::types::{Anomaly, Due};
use super::virtual_time::{current_at, move_next, next_of, read_current_virtual_time};
use crate::store::{Store, ZsetKey};

/// The most items one call moves from `queue` to `held` (LEASE popping
/// items of partitions it may not serve; the parking of a partition that
/// came under control, counted in items visited): the first call after a
/// pause of a large backlog stays short, and the timer goes on.
pub const MAX_PARKED_PER_CALL: usize = 1024;

/// A partition's record, opened for a change and written back by [`close`].
pub struct Partition {
    pub name: Vec<u8>,
    pub record: Record,
    stored: Stored,
    /// The record and the default cap as opened, for the rankings and
    /// totals (`ranks`).
    opened: (Record, Defaults),
    /// The queue's default cap, as the call read it.
    pub defaults: Defaults,
    controlled_at_open: bool,
    /// The call's clock, where it has one: a line that starts waiting
    /// starts then. Calls without one never add queued items.
    pub now_ms: Option<i64>,
    /// Write every ranking of the partition, moved or not (RECOUNT).
    pub rerank: bool,
}

impl Partition {
    /// One of its queued items, at `level`, was leased at `now_ms`: what is
    /// left of its line waits from now.
    pub fn served(&mut self, now_ms: i64, level: Level) {
        self.record.leave_queued(level);
        self.record.arrive(State::Leased);
        self.record.waiting_since = Some(now_ms);
    }
}

/// Opens a partition's record (none yet: a blank one). An unreadable record
/// (written by another client) starts blank and is reported.
pub fn open(
    store: &mut impl Store,
    name: &[u8],
    defaults: Defaults,
    anomalies: &mut Vec<Anomaly>,
) -> Partition {
    let (stored, record) = partitions::read(store, name, anomalies);
    Partition {
        controlled_at_open: record.controlled(defaults),
        name: name.to_vec(),
        opened: (record.clone(), defaults),
        record,
        stored,
        defaults,
        now_ms: None,
        rerank: false,
    }
}

/// Settles the partition, starts parking its items in `queue` when it just
/// came under control, and writes the record back when it changed (deletes
/// it once blank). True when its line started waiting at the call's clock
/// (what the call writes then depends on its clock).
pub fn close(store: &mut impl Store, mut partition: Partition) -> bool {
    settle(store, &mut partition);
    if !partition.controlled_at_open && partition.record.controlled(partition.defaults) {
        park_from_start(store, &mut partition);
    }
    if partition.record.held == 0 {
        // The offsets only mean something for held items.
        partition.record.offset = 0;
        for level in &mut partition.record.levels {
            level.offset = 0;
        }
    }
    partition.record.forget_blank_levels();
    let record = &mut partition.record;
    let mut started_waiting = false;
    if record.queued == 0 {
        record.waiting_since = None;
    } else if record.waiting_since.is_none() {
        record.waiting_since = partition.now_ms;
        started_waiting = partition.now_ms.is_some();
    }
    ranks::settle(&mut partition.record);
    partitions::write(
        store,
        &partition.name,
        (partition.stored, &partition.opened.0),
        &partition.record,
    );
    ranks::record_change(
        store,
        &partition.name,
        (&partition.opened.0, partition.opened.1),
        (&partition.record, partition.defaults),
        partition.rerank,
    );
    started_waiting
}

/// Restores the head rule and what follows from the counts: a partition
/// with nothing queued owes no cancelled items' cost; one parking with
/// nothing left in `queue` is done; a recorded head that is no longer
/// queued (a Lua script leased it) is forgotten; one that may not be
/// served (paused, at a lowered cap, a rejoin owed) has its head in
/// `held`, out of LEASE's way; one that may be served and has held items
/// has its head in `queue`.
fn settle(store: &mut impl Store, partition: &mut Partition) {
    // First, so the counts below do not count a head that is gone.
    if let Some(head) = &partition.record.head {
        if store.zscore(ZsetKey::Queue, head).is_none() {
            partition.record.head = None;
        }
    }
    if partition.record.queued == 0 && partition.record.gap > 0 {
        // It re-enters as if the cancelled items had never been queued.
        let gap = i64::try_from(std::mem::take(&mut partition.record.gap)).unwrap_or(i64::MAX);
        move_next(store, &partition.name, 0, gap.saturating_neg(), None);
    }
    if partition.record.parking != Parking::Done && partition.record.in_queue() == 0 {
        finish_parking(store, partition);
    }
    if !partition.record.servable(partition.defaults) {
        park_head(store, partition);
    } else if partition.record.held > 0 && partition.record.head.is_none() {
        admit_head(store, partition);
    }
    if partition.record.rate_in_force(partition.defaults).is_some() {
        partition.record.forget_full_bucket(partition.defaults);
        throttle::list(
            store,
            &partition.name,
            &partition.record,
            partition.defaults,
        );
    }
}

/// An item entering the queue at virtual time `time` of `level` (counted
/// queued here): into `queue` when its partition is not under control, or
/// as its head when it may be served and has nothing held; into `held`
/// otherwise.
pub fn enter_queue(
    store: &mut impl Store,
    partition: &mut Partition,
    id: &[u8],
    level: Level,
    time: i64,
) {
    partition.record.enter_queued(level);
    let score = queue_score(level, time) as f64;
    let record = &partition.record;
    if !record.controlled(partition.defaults) {
        store.zadd(ZsetKey::Queue, id, score);
    } else if record.head.is_none() && record.held == 0 && record.servable(partition.defaults) {
        store.zadd(ZsetKey::Queue, id, score);
        partition.record.head = Some(id.to_vec());
    } else if head_after(store, record, score) {
        // A higher level than its head's: it is the partition's first now.
        park_head(store, partition);
        store.zadd(ZsetKey::Queue, id, score);
        partition.record.head = Some(id.to_vec());
    } else {
        hold_item(store, partition, id, (level, time));
    }
}

/// Whether the partition's head in `queue` comes after `score`.
fn head_after(store: &mut impl Store, record: &Record, score: f64) -> bool {
    record.head.as_ref().is_some_and(|head| {
        store
            .zscore(ZsetKey::Queue, head)
            .is_some_and(|at| at > score)
    })
}

/// Puts a queued item in `held` at virtual time `time` of `level`.
fn hold_item(store: &mut impl Store, partition: &mut Partition, id: &[u8], at: (Level, i64)) {
    let offset = partition.record.offset_at(at.0);
    held::add(store, &partition.name, offset, id, at);
    partition.record.held += 1;
}

/// Moves the partition's first held item (its highest level's lowest) into
/// `queue` as its head. A partition with none has its `held` count
/// corrected to 0.
fn admit_head(store: &mut impl Store, partition: &mut Partition) {
    let record = &partition.record;
    let Some((level, time, id)) = held::first(store, &partition.name, |l| record.offset_at(l))
    else {
        partition.record.held = 0;
        return;
    };
    let offset = partition.record.offset_at(level);
    held::remove(store, &partition.name, offset, &id, (level, time));
    partition.record.held -= 1;
    store.zadd(ZsetKey::Queue, &id, queue_score(level, time) as f64);
    partition.record.head = Some(id);
}

/// An item LEASE popped (already out of `queue`) whose partition may not be
/// served now waits in `held` at its score. Only an item the module did not
/// queue (a Lua script's) can sit in `queue` beside a head and come before
/// it; the head then waits in `held` too, so the next admission takes the
/// lowest.
pub fn park_popped(store: &mut impl Store, partition: &mut Partition, id: &[u8], score: i64) {
    hold_item(store, partition, id, of_queue_score(score));
    park_head(store, partition);
}

/// Takes a queued `id` out of `queue` or `held`: the level it was queued
/// at, or None when it is in neither (its count is left to the caller).
pub fn take_queued(store: &mut impl Store, partition: &mut Partition, id: &[u8]) -> Option<Level> {
    if let Some(score) = store.zscore(ZsetKey::Queue, id) {
        store.zrem(ZsetKey::Queue, id);
        if partition.record.head.as_deref() == Some(id) {
            partition.record.head = None;
        }
        return Some(of_queue_score(score as i64).0);
    }
    let record = &partition.record;
    let (level, time) = held::held_at(store, id, |l| record.offset_at(l))?;
    let offset = partition.record.offset_at(level);
    held::remove(store, &partition.name, offset, id, (level, time));
    partition.record.held = partition.record.held.saturating_sub(1);
    Some(level)
}

/// The partition's head leaves `queue` for `held`.
fn park_head(store: &mut impl Store, partition: &mut Partition) {
    if let Some(head) = partition.record.head.take() {
        if let Some(score) = store.zscore(ZsetKey::Queue, &head) {
            store.zrem(ZsetKey::Queue, &head);
            hold_item(store, partition, &head, of_queue_score(score as i64));
        }
    }
}

/// A partition that was held back (paused, or capped below what it now may
/// run) has items far behind the current virtual time; served at those
/// times they would all come before anyone else's. Its held backlog at each
/// level rejoins at that level's current virtual time instead, keeping its
/// order and spacing, as a partition that was idle would: one O(1) move of
/// the level's offset. While its parking is under way, the rejoin waits
/// until all of it is held.
pub fn rejoin(store: &mut impl Store, partition: &mut Partition) {
    if partition.record.parking != Parking::Done {
        partition.record.parking = Parking::RejoinOwed;
        return;
    }
    // Read here, on this rare path, so that the calls that never rejoin
    // (ACK) need not read it. RESUME, LIMIT, POLICY, LEASE, NACK, RECLAIM
    // and REVIVE refuse an unreadable one before their first write; PAUSE
    // and CANCEL, finishing a parking, can meet it unreadable, and then
    // there is no time to rejoin at.
    let Ok(level_zero) = read_current_virtual_time(store) else {
        return;
    };
    for level in partition.record.levels_in_use() {
        let offset = partition.record.offset_at(level);
        let Some((first, _)) = held::first_at(store, &partition.name, level, offset) else {
            continue;
        };
        let current = current_at(store, level_zero, level);
        let behind = current.saturating_add(1).saturating_sub(first);
        if behind > 0 {
            *partition.record.offset_at_mut(level) = offset.saturating_add(behind);
            move_next(store, &partition.name, level, behind, Some(0));
        }
    }
}

/// A partition under control with items in `queue` (it just came under
/// control, or RECOUNT found items a Lua script queued, perhaps below where
/// a walk under way had got to) parks them, walking from the front.
pub fn park_from_start(store: &mut impl Store, partition: &mut Partition) {
    if partition.record.in_queue() > 0 {
        if partition.record.parking == Parking::Done {
            partition.record.parking = Parking::Underway;
        }
        store.zadd(ZsetKey::Parking, &partition.name, f64::NEG_INFINITY);
    }
}

fn finish_parking(store: &mut impl Store, partition: &mut Partition) {
    store.zrem(ZsetKey::Parking, &partition.name);
    let owed = partition.record.parking == Parking::RejoinOwed;
    partition.record.parking = Parking::Done;
    if owed {
        rejoin(store, partition);
    }
    for level in partition.record.levels_in_use() {
        let charged = std::mem::take(partition.record.owed_at_mut(level));
        shift_held(store, partition, level, charged);
    }
}

/// Moves the partition's queued items at `level` and its next virtual time
/// there `by` later (earlier when negative): a charge (`charge`). At once
/// when its queued items are all held or its head, in O(log N) (the
/// level's offset, the head's score); otherwise its items in `queue` are
/// parked first (a bounded walk, as when it comes under control) and the
/// move is owed until they are all held, so its items keep their order.
pub fn shift(store: &mut impl Store, partition: &mut Partition, level: Level, by: i64) {
    if by == 0 {
        return;
    }
    if partition.record.parking != Parking::Done {
        // Its walk goes on from where it is (starting it again would
        // restart it from the front at every charge).
        let owed = partition.record.owed_at_mut(level);
        *owed = owed.saturating_add(by);
        return;
    }
    if partition.record.in_queue() > 0 {
        let owed = partition.record.owed_at_mut(level);
        *owed = owed.saturating_add(by);
        park_from_start(store, partition);
        return;
    }
    shift_held(store, partition, level, by);
}

/// [`shift`] of a partition whose queued items are all held or its head.
/// Moved earlier, its first item at `level` stops at the level's current
/// virtual time + 1: a refund brings a partition to the front, never
/// before it.
fn shift_held(store: &mut impl Store, partition: &mut Partition, level: Level, by: i64) {
    if by == 0 {
        return;
    }
    let head = partition.record.head.as_ref().and_then(|head| {
        let (at_level, time) = of_queue_score(store.zscore(ZsetKey::Queue, head)? as i64);
        (at_level == level).then(|| (head.clone(), time))
    });
    let offset = partition.record.offset_at(level);
    let first_held = held::first_at(store, &partition.name, level, offset).map(|(at, _)| at);
    let first = match (&head, first_held) {
        (Some((_, at)), Some(held)) => Some((*at).min(held)),
        (Some((_, at)), None) => Some(*at),
        (None, held) => held,
    };
    let by = match first {
        Some(first) if by < 0 => match read_current_virtual_time(store) {
            Ok(level_zero) => {
                let current = current_at(store, level_zero, level);
                by.max(current.saturating_add(1).saturating_sub(first).min(0))
            }
            Err(_) => 0, // no time to stop at: no refund
        },
        _ if by > 0 => match read_current_virtual_time(store) {
            // A charge moves a partition at most MAX_LEAD ahead of its
            // level's clock: a flood of reported costs (RENEW ... COST in a
            // loop) cannot drive the clock to the end of its band, where
            // new items tie and go by id, in one stretch.
            Ok(level_zero) => {
                let current = current_at(store, level_zero, level);
                let next = next_of(store, &partition.name, level, &mut Vec::new());
                by.min(current.saturating_add(MAX_LEAD).saturating_sub(next).max(0))
            }
            Err(_) => 0, // no clock to measure the lead from: no charge
        },
        _ => by,
    };
    if by == 0 {
        return;
    }
    if first_held.is_some() {
        *partition.record.offset_at_mut(level) = offset.saturating_add(by);
    }
    if let Some((head, at)) = head {
        let score = queue_score(level, at.saturating_add(by));
        store.zadd(ZsetKey::Queue, &head, score as f64);
    }
    move_next(store, &partition.name, level, by, None);
}

/// Parks the items in `queue` of the partitions whose parking is under way
/// (`parking`: partition -> the score its walk has passed), visiting at
/// most `budget` items of `queue` (and the rest of those sharing the last
/// score visited, so a walk never stops inside a tie). A partition's walk
/// ends when all its queued items are held, or at its next virtual time
/// (no item of it in `queue` is later). True when some parking is left.
pub fn park_queued(
    store: &mut impl Store,
    defaults: Defaults,
    budget: usize,
    outcome: &mut Due,
) -> bool {
    let mut visits = 0;
    while visits < budget {
        let Some((name, passed)) = store.zfirst(ZsetKey::Parking) else {
            return false;
        };
        let anomalies = &mut outcome.anomalies;
        let mut partition = open(store, &name, defaults, anomalies);
        if partition.record.parking == Parking::Done {
            store.zrem(ZsetKey::Parking, &name); // a stale entry
            close(store, partition);
            continue;
        }
        // No item of it in `queue` comes after its lowest level's next time.
        let lowest = *partition.record.levels_in_use().last().unwrap_or(&0);
        let upto = queue_score(lowest, next_of(store, &name, lowest, anomalies)) as f64;
        let mut passed = passed;
        let done = loop {
            if visits >= budget {
                break false;
            }
            let want = budget - visits;
            let batch = store.zrange_above(ZsetKey::Queue, passed, upto, want);
            let Some((last_id, last)) = batch.last().cloned() else {
                break true;
            };
            let full = batch.len() == want;
            visits += batch.len();
            let mut found = park_own(store, &mut partition, batch, outcome);
            if full && !found {
                // Stop only at a new score: take the rest of this one (those
                // after the last visited, in member order).
                let ties: Vec<_> = store
                    .zrange_above(ZsetKey::Queue, last.next_down(), last, usize::MAX)
                    .into_iter()
                    .filter(|(id, _)| *id > last_id)
                    .collect();
                visits += ties.len();
                found = park_own(store, &mut partition, ties, outcome);
            }
            if found {
                break true;
            }
            passed = last;
        };
        if done {
            finish_parking(store, &mut partition);
        } else {
            store.zadd(ZsetKey::Parking, &name, passed);
        }
        close(store, partition);
    }
    store.zcard(ZsetKey::Parking) > 0
}

/// Parks the entries of `batch` that belong to `partition`, and those of
/// any other partition whose parking is under way (each walk parks what it
/// meets, so partitions that came under control together are found in one
/// pass); true once `partition` has nothing left in `queue`.
fn park_own(
    store: &mut impl Store,
    partition: &mut Partition,
    batch: Vec<(Vec<u8>, f64)>,
    outcome: &mut Due,
) -> bool {
    for (id, score) in batch {
        let name = partition_of(store, &id);
        let mut other = None;
        let owner = if name == partition.name {
            &mut *partition
        } else if store.zscore(ZsetKey::Parking, &name).is_some() {
            other.insert(open(
                store,
                &name,
                partition.defaults,
                &mut outcome.anomalies,
            ))
        } else {
            continue;
        };
        // A head is in `queue` by the rule, not left over.
        // (Not one the walk already moved: a head parked below.)
        if owner.record.parking != Parking::Done
            && owner.record.head.as_deref() != Some(id.as_slice())
            && store.zrem(ZsetKey::Queue, &id)
        {
            hold_item(store, owner, &id, of_queue_score(score as i64));
            outcome.parked += 1;
            // A head chosen while the walk was under way (a new item of a
            // partition that came under control) may come after what the
            // walk finds: it goes back to `held`, and the lowest is
            // admitted when the partition settles.
            if head_after(store, &owner.record, score) {
                park_head(store, owner);
            }
        }
        match other {
            Some(other) => {
                close(store, other);
            }
            None if partition.record.in_queue() == 0 => return true,
            None => {}
        }
    }
    false
}
