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
    let queued = members(store, ZsetKey::Queue);
    let inflight = members(store, ZsetKey::Inflight);
    let fields = |store: &mut _, key| -> HashSet<Vec<u8>> {
        Store::hfields(store, key).into_iter().collect()
    };
    let task = fields(store, HashKey::Task);
    let inflight_task = fields(store, HashKey::InflightTask);
    let lease = fields(store, HashKey::Lease);
    let meta = fields(store, HashKey::Meta);
    let timeouts = fields(store, HashKey::Timeouts);
    let show = |id: &[u8]| String::from_utf8_lossy(id).into_owned();

    for id in queued.intersection(&inflight) {
        problems.push(format!("{} is both queued and in flight", show(id)));
    }
    for id in &queued {
        if !task.contains(id) {
            problems.push(format!("queued {} has no task payload", show(id)));
        }
    }
    for id in &inflight {
        if !inflight_task.contains(id) {
            problems.push(format!("leased {} has no inflight_task payload", show(id)));
        }
        if !lease.contains(id) {
            problems.push(format!("leased {} has no lease token", show(id)));
        }
    }
    for id in queued.iter().chain(inflight.iter()) {
        match store.hget(HashKey::Meta, id) {
            None => problems.push(format!("{} has no meta", show(id))),
            Some(raw) if parse_meta(&raw).is_none() => {
                problems.push(format!("{} has unreadable meta", show(id)))
            }
            Some(_) => {}
        }
    }
    let orphans = [
        ("task", &task, &queued as &HashSet<_>),
        ("inflight_task", &inflight_task, &inflight),
        ("lease", &lease, &inflight),
    ];
    for (name, hash, owners) in orphans {
        for id in hash.difference(owners) {
            problems.push(format!(
                "{name} holds {} which is not {}",
                show(id),
                if name == "task" {
                    "queued"
                } else {
                    "in flight"
                }
            ));
        }
    }
    for (name, hash) in [("meta", &meta), ("timeouts", &timeouts)] {
        for id in hash
            .iter()
            .filter(|id| !queued.contains(*id) && !inflight.contains(*id))
        {
            problems.push(format!(
                "{name} holds {} which is neither queued nor in flight",
                show(id)
            ));
        }
    }
    problems.sort();
    problems
}
