//! The cross-key invariants of a queue (`VTRR.CHECK`). O(N): a diagnostic,
//! not a hot path.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::controls::count_from_keys;
use super::cron_search::{Search, Steps, STEPS_PER_SEARCH};
use super::held;
use super::levels::{max_time, of_queue_score, Level, MAX_LEVEL};
use super::meta;
use super::numbers::parse_meta;
use super::partitions::{read_defaults, Parking};
use super::ranks::{self, queue_totals, Rank};
use super::schedule::Schedule;
use super::throttle;
use super::types::CoreError;
use super::virtual_time::{current_at, read_current_virtual_time};
use crate::store::{HashKey, Store, ZsetKey};

/// Every broken invariant, as a readable sentence naming the id.
pub fn check(store: &mut impl Store) -> Result<Vec<String>, CoreError> {
    let mut problems = Vec::new();
    let members = |store: &mut _, key| -> HashSet<Vec<u8>> {
        Store::zrange_upto(store, key, f64::INFINITY, usize::MAX)
            .into_iter()
            .map(|(member, _)| member)
            .collect()
    };
    // Each state: its sorted set, its name, and the hashes its ids must
    // (and only its ids may) have.
    let states = [
        (ZsetKey::Queue, "queued", vec![(HashKey::Task, "task")]),
        (
            ZsetKey::Inflight,
            "in flight",
            vec![
                (HashKey::InflightTask, "inflight_task"),
                (HashKey::Lease, "lease"),
            ],
        ),
        (
            ZsetKey::Delayed,
            "delayed",
            vec![(HashKey::DelayedTask, "delayed_task")],
        ),
        (
            ZsetKey::Dead,
            "dead",
            vec![
                (HashKey::DeadTask, "dead_task"),
                (HashKey::DeadReason, "dead_reason"),
            ],
        ),
    ];
    let fields = |store: &mut _, key| -> Result<HashSet<Vec<u8>>, CoreError> {
        Ok(Store::hfields(store, key)?.into_iter().collect())
    };
    let show = |id: &[u8]| String::from_utf8_lossy(id).into_owned();

    let mut everyone: HashSet<Vec<u8>> = HashSet::new();
    let mut seen: Vec<(&str, HashSet<Vec<u8>>)> = Vec::new();
    // Held items are queued too: `held` members name them.
    let mut held_ids: HashSet<Vec<u8>> = HashSet::new();
    for (member, _) in store.zrange_upto(ZsetKey::Held, f64::INFINITY, usize::MAX) {
        match held::parse_member(&member) {
            Some((_, _, _, id)) => {
                held_ids.insert(id.to_vec());
            }
            None => problems.push(format!("held has an unreadable member {}", show(&member))),
        }
    }
    let held_at = fields(store, HashKey::HeldAt)?;
    for id in held_ids.symmetric_difference(&held_at) {
        problems.push(format!("held and held_at disagree about {}", show(id)));
    }
    for (zset, state, hashes) in &states {
        let mut ids = members(store, *zset);
        if *zset == ZsetKey::Queue {
            for id in ids.intersection(&held_ids) {
                problems.push(format!("{} is both in queue and held", show(id)));
            }
            ids.extend(held_ids.iter().cloned());
        }
        for (other, other_ids) in &seen {
            for id in ids.intersection(other_ids) {
                problems.push(format!("{} is both {other} and {state}", show(id)));
            }
        }
        for (hash, name) in hashes {
            let held = fields(store, *hash)?;
            for id in ids.difference(&held) {
                problems.push(format!("{state} {} has no {name} entry", show(id)));
            }
            for id in held.difference(&ids) {
                problems.push(format!("{name} holds {} which is not {state}", show(id)));
            }
        }
        everyone.extend(ids.iter().cloned());
        seen.push((state, ids));
    }
    for id in &everyone {
        match store.hget(HashKey::Meta, id) {
            None => problems.push(format!("{} has no meta", show(id))),
            Some(raw) if parse_meta(&raw).is_none() => {
                problems.push(format!("{} has unreadable meta", show(id)))
            }
            Some(_) => {}
        }
    }
    for (hash, name) in [
        (HashKey::Meta, "meta"),
        (HashKey::Priority, "priority"),
        (HashKey::Timeouts, "timeouts"),
        (HashKey::Nacks, "nacks"),
        (HashKey::LastError, "last_error"),
    ] {
        for id in fields(store, hash)?.difference(&everyone) {
            problems.push(format!(
                "{name} holds {} which is neither queued, in flight, delayed nor dead",
                show(id)
            ));
        }
    }
    check_levels(store, &mut problems);
    check_partitions(store, &mut problems)?;
    check_schedules(store, &mut problems)?;
    problems.sort();
    Ok(problems)
}

/// Each queued item waits at the level `priority` gives it, and level 0's
/// current virtual time is within level 0's band (a Lua script's LEASE of
/// an item of another level writes its score there, see docs/design.md).
fn check_levels(store: &mut impl Store, problems: &mut Vec<String>) {
    let show = |id: &[u8]| String::from_utf8_lossy(id).into_owned();
    let mut queued: Vec<(Vec<u8>, Level)> = store
        .zrange_upto(ZsetKey::Queue, f64::INFINITY, usize::MAX)
        .into_iter()
        .map(|(id, score)| (id, of_queue_score(score as i64).0))
        .collect();
    for (member, _) in store.zrange_upto(ZsetKey::Held, f64::INFINITY, usize::MAX) {
        if let Some((_, level, _, id)) = held::parse_member(&member) {
            queued.push((id.to_vec(), level));
        }
    }
    for (id, level) in queued {
        let recorded = meta::level_of(store, &id);
        if recorded != level {
            problems.push(format!(
                "{} waits at priority {level} but priority gives it {recorded}",
                show(&id)
            ));
        }
    }
    if let Ok(current) = read_current_virtual_time(store) {
        if !(0..=max_time(0)).contains(&current) {
            problems.push(format!(
                "current_virtual_time {current} is outside priority 0's scores"
            ));
        }
        // A saturated clock: new items at the level tie at the end of its
        // band and go by id, not in fair turn.
        for level in -MAX_LEVEL..=MAX_LEVEL {
            if current_at(store, current, level) >= max_time(level) {
                problems.push(format!(
                    "priority {level}'s virtual time is saturated at {}: its new items tie and \
                     are served by id until it empties (a drain{})",
                    max_time(level),
                    if level == 0 {
                        ""
                    } else {
                        ", or the level with nothing held"
                    }
                ));
            }
        }
    }
}

/// Each partition record's counts equal what the keys hold, its head is
/// in `queue`, and it is in `parking` exactly while its parking is under
/// way; one under control and not parking has nothing in `queue` but its
/// head.
fn check_partitions(store: &mut impl Store, problems: &mut Vec<String>) -> Result<(), CoreError> {
    let show = |id: &[u8]| String::from_utf8_lossy(id).into_owned();
    let mut counts = count_from_keys(store);
    let defaults = read_defaults(store, &mut Vec::new());
    let mut parking: HashSet<Vec<u8>> = store
        .zrange_upto(ZsetKey::Parking, f64::INFINITY, usize::MAX)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let mut throttled: HashMap<Vec<u8>, f64> = store
        .zrange_upto(ZsetKey::Throttled, f64::INFINITY, usize::MAX)
        .into_iter()
        .collect();
    for name in store.hfields(HashKey::Partitions)? {
        let Some(Ok(record)) = store.record(&name) else {
            problems.push(format!(
                "partition {} has an unreadable record",
                show(&name)
            ));
            continue;
        };
        let counted = counts.remove(&name).unwrap_or_default();
        let held = counted.states;
        let recorded_levels: BTreeMap<Level, u64> = record
            .levels
            .iter()
            .filter(|state| state.queued > 0)
            .map(|state| (state.level, state.queued))
            .collect();
        if recorded_levels != counted.levels {
            problems.push(format!(
                "partition {} counts queued per level {recorded_levels:?} but the keys hold {:?}",
                show(&name),
                counted.levels
            ));
        }
        let recorded = [
            record.queued,
            record.held,
            record.leased,
            record.delayed,
            record.dead,
        ];
        if recorded != held {
            problems.push(format!(
                "partition {} counts (queued, held, leased, delayed, dead) {recorded:?} but the keys hold {held:?}",
                show(&name)
            ));
        }
        let listed = parking.remove(&name);
        if listed != (record.parking != Parking::Done) {
            problems.push(format!(
                "partition {} is parking {:?} but listed in parking: {listed}",
                show(&name),
                record.parking
            ));
        }
        if record.parking == Parking::Done && record.controlled(defaults) && record.in_queue() > 0 {
            problems.push(format!(
                "partition {} is under control with {} items in queue besides its head",
                show(&name),
                record.in_queue()
            ));
        }
        if record.parking != Parking::Done && record.in_queue() == 0 {
            problems.push(format!(
                "partition {} is parking with nothing left in queue",
                show(&name)
            ));
        }
        if record.head.is_some() && !record.servable(defaults) {
            problems.push(format!(
                "partition {} may not be served but has its head in queue",
                show(&name)
            ));
        }
        if (record.queued == 0) != (record.ranked_queued == 0)
            || (record.queued > 0 && !ranks::within_band(record.queued, record.ranked_queued))
        {
            problems.push(format!(
                "partition {} has {} queued but ranks as {}",
                show(&name),
                record.queued,
                record.ranked_queued
            ));
        }
        let ranked_wait_stands = match (record.waiting_since, record.ranked_since) {
            (Some(since), Some(ranked)) => ranks::within_grain(since, ranked),
            (None, None) => true,
            _ => false,
        };
        if !ranked_wait_stands {
            problems.push(format!(
                "partition {} waits since {:?} but ranks as waiting since {:?}",
                show(&name),
                record.waiting_since,
                record.ranked_since
            ));
        }
        if record.waiting_since.is_some() && record.queued == 0 {
            problems.push(format!(
                "partition {} has a waiting line with nothing queued",
                show(&name)
            ));
        }
        let waits_for = throttle::listed_at(&record, defaults);
        let listed = throttled.remove(&name);
        if listed != waits_for.map(|due| due as f64) {
            problems.push(format!(
                "partition {} waits for its bucket until {waits_for:?} but throttled lists it at {listed:?}",
                show(&name)
            ));
        }
        if let Some(head) = &record.head {
            if store.zscore(ZsetKey::Queue, head).is_none() {
                problems.push(format!(
                    "partition {} names head {} which is not in queue",
                    show(&name),
                    show(head)
                ));
            }
        }
    }
    check_rankings(store, problems)?;
    for (name, held) in counts {
        problems.push(format!(
            "partition {} has no record but the keys hold {held:?}",
            show(&name)
        ));
    }
    for name in parking {
        problems.push(format!(
            "parking lists partition {} which has no record",
            show(&name)
        ));
    }
    for name in throttled.into_keys() {
        problems.push(format!(
            "throttled lists partition {} which has no record",
            show(&name)
        ));
    }
    Ok(())
}

/// Each ranking holds exactly the partitions whose records rank there, at
/// the scores their records give under the default cap (`VTRR.RECOUNT` restores them); the
/// queue's totals are at least what its partitions' records count.
fn check_rankings(store: &mut impl Store, problems: &mut Vec<String>) -> Result<(), CoreError> {
    let show = |id: &[u8]| String::from_utf8_lossy(id).into_owned();
    let defaults = read_defaults(store, &mut Vec::new());
    let mut records = Vec::new();
    for name in store.hfields(HashKey::Partitions)? {
        if let Some(Ok(record)) = store.record(&name) {
            records.push((name, record));
        }
    }
    for rank in Rank::ALL {
        let mut held: HashMap<Vec<u8>, f64> = ranks::entries(store, rank).into_iter().collect();
        for (name, record) in &records {
            let expected = rank.score(record, defaults);
            let found = held.remove(name);
            if expected != found {
                problems.push(format!(
                    "partition {} ranks by {} at {expected:?} but the ranking holds {found:?}",
                    show(name),
                    rank.name()
                ));
            }
        }
        for name in held.into_keys() {
            problems.push(format!(
                "the ranking by {} lists partition {} which has no record",
                rank.name(),
                show(&name)
            ));
        }
    }
    let mut summed = [0u64; 6];
    for (_, record) in &records {
        for (sum, count) in summed.iter_mut().zip(record.totals.values()) {
            *sum = sum.saturating_add(count);
        }
    }
    let queue = queue_totals(store, &mut Vec::new()).values();
    if queue
        .iter()
        .zip(summed)
        .any(|(queue, summed)| *queue < summed)
    {
        problems.push(format!(
            "the queue's totals {queue:?} are below its partitions' {summed:?}"
        ));
    }
    Ok(())
}

/// Each schedule waiting for a run has a readable definition whose runs
/// include it.
fn check_schedules(store: &mut impl Store, problems: &mut Vec<String>) -> Result<(), CoreError> {
    let show = |id: &[u8]| String::from_utf8_lossy(id).into_owned();
    for (name, due) in store.zrange_upto(ZsetKey::ScheduleDue, f64::INFINITY, usize::MAX) {
        let definition = store
            .hget(HashKey::Schedules, &name)
            .and_then(|raw| Schedule::decode(&raw));
        match definition {
            None => problems.push(format!(
                "schedule_due lists schedule {} which has no readable definition",
                show(&name)
            )),
            Some(schedule) => {
                let due = due as i64;
                let mut steps = Steps::new(STEPS_PER_SEARCH);
                match schedule.timing.next_after(due.saturating_sub(1), &mut steps) {
                    Search::Found(run) if run == due => {}
                    Search::OverBudget => problems.push(format!(
                        "schedule {} waits for a run at {due} that no search finds within its steps: \
                         it fires no more once due",
                        show(&name)
                    )),
                    _ => problems.push(format!(
                        "schedule {} waits for a run at {due} which its timing does not have",
                        show(&name)
                    )),
                }
            }
        }
    }
    Ok(())
}
