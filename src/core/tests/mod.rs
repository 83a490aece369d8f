//! Unit and property tests of the VTRR core over the in-memory store, one
//! file per concept.

mod backlog;
mod charge;
mod controls;
mod cron_search;
mod dead;
mod delay;
mod inspect;
mod lease;
mod nack;
mod outcomes;
mod priority;
mod properties;
mod queue_limits;
mod reclaim;
mod schedule;
mod scoring;
mod sharding;
mod simulation;
mod throttle;

use crate::core::*;
use crate::engine::memory::MemoryStore;

pub fn item<'a>(partition: &'a str, id: &'a str, weight: u64) -> NewItem<'a> {
    NewItem {
        partition: partition.as_bytes(),
        id: id.as_bytes(),
        weight,
        payload: id.as_bytes(),
    }
}

pub fn tokens() -> impl FnMut() -> Vec<u8> {
    let mut n = 0;
    move || {
        n += 1;
        format!("token-{n}").into_bytes()
    }
}

/// `lease` with fresh test tokens, without counters.
pub fn lease_at(
    store: &mut MemoryStore,
    now_ms: i64,
    lease_ms: i64,
    count: usize,
    due_limit: usize,
) -> Result<LeaseOutcome, CoreError> {
    let request = LeaseRequest {
        now_ms,
        lease_ms,
        count,
        due_limit,
        with_counters: false,
    };
    lease(&mut store.scoped(CoreOp::Lease), &request, tokens())
}

pub fn lease_ids(store: &mut MemoryStore, now_ms: i64, count: usize) -> Vec<String> {
    ids_of(&lease_at(store, now_ms, 1000, count, 1000).unwrap().leased)
}

/// The ids of `leased`, in order, as text.
pub fn ids_of(leased: &[Leased]) -> Vec<String> {
    leased
        .iter()
        .map(|l| String::from_utf8(l.id.clone()).unwrap())
        .collect()
}

/// `set_policy` of `changes`, which must be accepted.
pub fn apply_policy(store: &mut MemoryStore, changes: &[PolicyChange]) {
    set_policy(
        &mut store.scoped(CoreOp::set_policy(changes)),
        changes,
        &mut Vec::new(),
    )
    .unwrap();
}

/// `set_limit` of one change on `partition`, which must be accepted.
pub fn apply_limit(store: &mut MemoryStore, partition: impl AsRef<[u8]>, change: LimitChange) {
    set_limit(
        &mut store.scoped(CoreOp::SetLimit),
        partition.as_ref(),
        &[change],
        &mut Vec::new(),
    )
    .unwrap();
}
