//! The cross-key invariants of a queue (`VTRR.CHECK`). O(N): a diagnostic,
//! not a hot path.

use std::collections::HashSet;

use super::parse_meta;
use crate::store::{HashKey, Store, ZsetKey};

/// Every broken invariant, as a readable sentence naming the id.
pub fn check(store: &mut impl Store) -> Vec<String> {
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
    let fields = |store: &mut _, key| -> HashSet<Vec<u8>> {
        Store::hfields(store, key).into_iter().collect()
    };
    let show = |id: &[u8]| String::from_utf8_lossy(id).into_owned();

    let mut everyone: HashSet<Vec<u8>> = HashSet::new();
    let mut seen: Vec<(&str, HashSet<Vec<u8>>)> = Vec::new();
    for (zset, state, hashes) in &states {
        let ids = members(store, *zset);
        for (other, other_ids) in &seen {
            for id in ids.intersection(other_ids) {
                problems.push(format!("{} is both {other} and {state}", show(id)));
            }
        }
        for (hash, name) in hashes {
            let held = fields(store, *hash);
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
        (HashKey::Timeouts, "timeouts"),
        (HashKey::Nacks, "nacks"),
    ] {
        for id in fields(store, hash).difference(&everyone) {
            problems.push(format!(
                "{name} holds {} which is neither queued, in flight, delayed nor dead",
                show(id)
            ));
        }
    }
    problems.sort();
    problems
}
