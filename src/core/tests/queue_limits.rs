//! The queue's own limits (`VTRR.POLICY ... CONCURRENCY`, `... RATE`):
//! slots and tokens handed out in the order LEASE serves, on top of each
//! partition's own.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::store::{HashKey, Rate, Store, ZsetKey};

fn queue_rate(amount: u64, per_ms: u64, burst: u64) -> PolicyChange {
    PolicyChange::QueueRate(Some(Rate {
        amount,
        per_ms,
        burst,
    }))
}

fn enqueue_n(store: &mut MemoryStore, partition: &str, weight: u64, n: usize) {
    let ids: Vec<String> = (0..n).map(|i| format!("{partition}-{i:04}")).collect();
    let items: Vec<_> = ids.iter().map(|id| item(partition, id, weight)).collect();
    enqueue(&mut store.scoped(CoreOp::Enqueue), 0, &items).unwrap();
}

fn ack_all(store: &mut MemoryStore, leased: &[Leased]) -> Settled {
    let acks: Vec<_> = leased.iter().map(|l| Ack::pair(&l.id, &l.token)).collect();
    ack_each(&mut store.scoped(CoreOp::Ack), &acks, 0, &mut Vec::new())
}

fn assert_sound(store: &mut MemoryStore) {
    let problems = check::check(&mut store.scoped(CoreOp::Check)).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn concurrency_caps_the_leases_of_the_whole_queue_and_an_ack_frees_a_slot() {
    let mut store = MemoryStore::new();
    apply_policy(&mut store, &[PolicyChange::QueueConcurrency(Some(3))]);
    enqueue_n(&mut store, "a", 1, 5);
    enqueue_n(&mut store, "b", 1, 5);
    let first = lease_at(&mut store, 0, 60_000, 10, 16).unwrap();
    assert_eq!(ids_of(&first.leased), ["a-0000", "b-0000", "a-0001"]);
    assert_eq!(first.queue_stop, Some(Stop::Full));
    // Nothing was leased and put back.
    assert_eq!(store.zcard(ZsetKey::Queue) + store.zcard(ZsetKey::Held), 7);
    let none = lease_at(&mut store, 1, 60_000, 10, 16).unwrap();
    assert!(none.leased.is_empty());
    assert_eq!(none.queue_stop, Some(Stop::Full));
    let settled = ack_all(&mut store, &first.leased[..1]);
    assert!(settled.queue_room, "a slot of the queue's cap came free");
    // The freed slot goes to the next in VTRR order: b's turn.
    assert_eq!(lease_ids(&mut store, 2, 10), ["b-0001"]);
    assert_sound(&mut store);
}

#[test]
fn an_ack_on_a_queue_without_a_cap_reports_no_room() {
    let mut store = MemoryStore::new();
    enqueue_n(&mut store, "a", 1, 2);
    let leased = lease_at(&mut store, 0, 60_000, 2, 16).unwrap();
    assert_eq!(leased.queue_stop, None);
    assert!(!ack_all(&mut store, &leased.leased).queue_room);
}

#[test]
fn the_queue_rate_spends_weights_and_a_lease_stops_until_the_next_token() {
    let mut store = MemoryStore::new();
    // Two weight units per 100 ms, burst 4.
    apply_policy(&mut store, &[queue_rate(2, 100, 4)]);
    enqueue_n(&mut store, "a", 1, 10);
    enqueue_n(&mut store, "b", 3, 10);
    let first = lease_at(&mut store, 1_000, 60_000, 10, 16).unwrap();
    // a (1), then b (3): the burst of 4 spent.
    assert_eq!(ids_of(&first.leased), ["a-0000", "b-0000"]);
    // One token (100 token-ms) is due 50 ms on (2 per ms refill).
    assert_eq!(first.queue_stop, Some(Stop::Starved { token_due: 1_050 }));
    assert_eq!(next_due(&mut store.scoped(CoreOp::NextDue)), Some(1_050));
    assert!(lease_ids(&mut store, 1_049, 10).is_empty());
    assert_eq!(lease_ids(&mut store, 1_050, 10), ["a-0001"]);
    assert_sound(&mut store);
}

#[test]
fn the_timer_writes_a_token_that_came_due_and_says_blocked_leases_may_go_on() {
    let mut store = MemoryStore::new();
    apply_policy(&mut store, &[queue_rate(1, 1_000, 1)]);
    enqueue_n(&mut store, "a", 1, 3);
    assert_eq!(lease_ids(&mut store, 0, 10), ["a-0000"]);
    assert_eq!(next_due(&mut store.scoped(CoreOp::NextDue)), Some(1_000));
    let early = run_due(&mut store.scoped(CoreOp::RunDue), 999, 16, 0).unwrap();
    assert!(!early.queue_room);
    let due = run_due(&mut store.scoped(CoreOp::RunDue), 1_000, 16, 0).unwrap();
    assert!(due.queue_room);
    assert_eq!(
        next_due(&mut store.scoped(CoreOp::NextDue)),
        None,
        "the token is written: the queue is no longer due"
    );
    assert_eq!(lease_ids(&mut store, 1_000, 10), ["a-0001"]);
}

#[test]
fn an_idle_queue_with_a_rate_is_never_due_and_its_polls_write_nothing() {
    let mut store = MemoryStore::new();
    apply_policy(&mut store, &[queue_rate(1, 1_000, 1)]);
    enqueue_n(&mut store, "a", 1, 1);
    let leased = lease_at(&mut store, 0, 60_000, 10, 16).unwrap().leased;
    ack_all(&mut store, &leased);
    assert_eq!(next_due(&mut store.scoped(CoreOp::NextDue)), None);
    let before = store.hash_entries(HashKey::Policy);
    let outcome = lease_at(&mut store, 10, 60_000, 10, 16).unwrap();
    assert_eq!(outcome.queue_stop, None, "nothing waits for the token");
    assert_eq!(
        store.hash_entries(HashKey::Policy),
        before,
        "an empty poll writes no bucket"
    );
}

#[test]
fn a_new_queue_rate_starts_full_and_none_removes_it() {
    let mut store = MemoryStore::new();
    apply_policy(&mut store, &[queue_rate(1, 1_000, 1)]);
    enqueue_n(&mut store, "a", 1, 4);
    assert_eq!(lease_ids(&mut store, 0, 10).len(), 1);
    apply_policy(&mut store, &[queue_rate(2, 1_000, 2)]);
    assert_eq!(lease_ids(&mut store, 1, 10).len(), 2);
    apply_policy(&mut store, &[PolicyChange::QueueRate(None)]);
    assert_eq!(lease_ids(&mut store, 2, 10).len(), 1);
    assert_sound(&mut store);
}

#[test]
fn the_queue_limits_stack_on_each_partitions_own() {
    let mut store = MemoryStore::new();
    apply_policy(&mut store, &[PolicyChange::QueueConcurrency(Some(4))]);
    apply_limit(&mut store, "a", LimitChange::Concurrency(Some(1)));
    enqueue_n(&mut store, "a", 1, 5);
    enqueue_n(&mut store, "b", 1, 5);
    // a at its own cap of 1; b takes the rest of the queue's 4.
    let leased = lease_ids(&mut store, 0, 10);
    assert_eq!(leased, ["a-0000", "b-0000", "b-0001", "b-0002"]);
    assert_sound(&mut store);
}

/// One step of a random run against a queue with its own rate and cap.
#[derive(Debug, Clone)]
enum Step {
    Wait(i64),
    Lease(usize),
    AckOldest,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0i64..=300).prop_map(Step::Wait),
        4 => (1usize..=6).prop_map(Step::Lease),
        2 => Just(Step::AckOldest),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Over any window of a run the queue leases at most burst + rate·t
    /// weight units (t the window's length in `per_ms` units, rounded up),
    /// never holds more than its cap, and among backlogged share-1
    /// partitions the counts differ by at most one.
    #[test]
    fn the_queue_limits_hold_over_any_window_and_are_shared_in_turn(
        amount in 1u64..=4,
        per_ms in prop_oneof![Just(1u64), Just(100), Just(250)],
        burst_extra in 0u64..=4,
        cap in prop::option::of(1u64..=6),
        partitions in 2usize..=5,
        steps in prop::collection::vec(step(), 1..80),
    ) {
        let rate = Rate { amount, per_ms, burst: amount + burst_extra };
        let mut store = MemoryStore::new();
        let mut policy = vec![PolicyChange::QueueRate(Some(rate))];
        policy.extend(cap.map(|cap| PolicyChange::QueueConcurrency(Some(cap))));
        apply_policy(&mut store, &policy);
        // Every partition stays backlogged: more than any run can lease.
        for p in 0..partitions {
            enqueue_n(&mut store, &format!("p{p}"), 1, 200);
        }
        let mut now = 0i64;
        let mut leases: Vec<(i64, Leased)> = Vec::new();
        let mut held: Vec<Leased> = Vec::new();
        for step in &steps {
            match step {
                Step::Wait(ms) => now += ms,
                Step::Lease(count) => {
                    let outcome = lease_at(&mut store, now, 1_000_000, *count, 16).unwrap();
                    for leased in outcome.leased {
                        leases.push((now, leased.clone()));
                        held.push(leased);
                    }
                }
                Step::AckOldest => {
                    if !held.is_empty() {
                        let oldest = held.remove(0);
                        prop_assert_eq!(ack_all(&mut store, &[oldest]).took, vec![true]);
                    }
                }
            }
            if let Some(cap) = cap {
                prop_assert!(held.len() as u64 <= cap, "{} leased over the cap {}", held.len(), cap);
            }
        }
        // Every window [from, to]: weight leased ≤ burst + amount·⌈(to-from)/per_ms⌉.
        for (i, (from, _)) in leases.iter().enumerate() {
            let mut weight = 0u64;
            for (to, _) in &leases[i..] {
                weight += 1;
                let periods = ((to - from) as u64).div_ceil(per_ms);
                prop_assert!(
                    weight <= rate.burst + amount * periods,
                    "{} leased in [{}, {}] at {:?}", weight, from, to, rate
                );
            }
        }
        let mut per_partition: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        for p in 0..partitions {
            per_partition.insert(format!("p{p}").into_bytes(), 0);
        }
        for (_, leased) in &leases {
            *per_partition.get_mut(&leased.partition).unwrap() += 1;
        }
        let most = per_partition.values().max().unwrap();
        let least = per_partition.values().min().unwrap();
        prop_assert!(most - least <= 1, "counts {:?}", per_partition);
        assert_sound(&mut store);
    }
}
