//! Unit and property tests of the VTRR core over the in-memory store.

use std::collections::{BTreeMap, HashMap, HashSet};

use proptest::prelude::*;

use super::*;
use crate::store::memory::MemoryStore;

fn item<'a>(partition: &'a str, id: &'a str, weight: u64) -> NewItem<'a> {
    NewItem {
        partition: partition.as_bytes(),
        id: id.as_bytes(),
        weight,
        payload: id.as_bytes(),
    }
}

fn tokens() -> impl FnMut() -> Vec<u8> {
    let mut n = 0;
    move || {
        n += 1;
        format!("token-{n}").into_bytes()
    }
}

fn lease_ids(store: &mut MemoryStore, now_ms: i64, count: usize) -> Vec<String> {
    lease(store, now_ms, 1000, count, 1000, tokens())
        .unwrap()
        .leased
        .into_iter()
        .map(|l| String::from_utf8(l.id).unwrap())
        .collect()
}

#[test]
fn partitions_are_served_in_turn_however_much_each_queued() {
    let mut store = MemoryStore::new();
    let a: Vec<_> = (1..=4).map(|i| format!("a{i}")).collect();
    let a_items: Vec<_> = a.iter().map(|id| item("A", id, 1)).collect();
    enqueue(&mut store, &a_items).unwrap();
    enqueue(&mut store, &[item("B", "b1", 1), item("B", "b2", 1)]).unwrap();
    assert_eq!(
        lease_ids(&mut store, 0, 10),
        ["a1", "b1", "a2", "b2", "a3", "a4"]
    );
}

#[test]
fn a_weight_n_item_costs_its_partition_n_turns() {
    let mut store = MemoryStore::new();
    enqueue(
        &mut store,
        &[item("heavy", "h1", 3), item("heavy", "h2", 3)],
    )
    .unwrap();
    let light: Vec<_> = (1..=5).map(|i| format!("l{i}")).collect();
    let light_items: Vec<_> = light.iter().map(|id| item("light", id, 1)).collect();
    enqueue(&mut store, &light_items).unwrap();
    // h1 at 1, h2 at 4; light at 1..=5.
    assert_eq!(
        lease_ids(&mut store, 0, 10),
        ["h1", "l1", "l2", "l3", "h2", "l4", "l5"]
    );
}

#[test]
fn enqueue_writes_the_documented_keys() {
    let mut store = MemoryStore::new();
    store.set_raw_current_virtual_time(b"10");
    let outcome = enqueue(&mut store, &[item("p:x", "i1", 2), item("p:x", "i2", 1)]).unwrap();
    assert_eq!(outcome.added, 2);
    assert_eq!(
        store.zset_entries(ZsetKey::Queue),
        [(b"i1".to_vec(), 11.0), (b"i2".to_vec(), 13.0)]
    );
    assert_eq!(
        store.hget(HashKey::PartitionVirtualTime, b"p:x").unwrap(),
        b"14"
    );
    assert_eq!(store.hget(HashKey::Meta, b"i1").unwrap(), b"2:p:x");
    assert_eq!(store.hget(HashKey::Task, b"i2").unwrap(), b"i2");
}

#[test]
fn enqueue_skips_ids_already_queued_or_leased() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, &[item("A", "x", 1), item("A", "y", 1)]).unwrap();
    lease(&mut store, 0, 100, 1, 0, tokens()).unwrap(); // x leased
    let before = store.clone();
    let outcome = enqueue(
        &mut store,
        &[item("B", "x", 5), item("B", "y", 5), item("B", "y", 1)],
    )
    .unwrap();
    assert_eq!(outcome.added, 0);
    assert_eq!(format!("{before:?}"), format!("{store:?}"));
}

#[test]
fn lease_moves_the_item_and_grants_a_token() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, &[item("A", "a1", 1), item("A", "a2", 1)]).unwrap();
    let outcome = lease(&mut store, 5_000, 300, 1, 1000, tokens()).unwrap();
    let leased = &outcome.leased[0];
    assert_eq!(
        (leased.id.as_slice(), leased.payload.as_slice()),
        (&b"a1"[..], &b"a1"[..])
    );
    assert_eq!(leased.token, b"token-1");
    assert_eq!(leased.timeouts, 0);
    assert_eq!(
        store.zset_entries(ZsetKey::Inflight),
        [(b"a1".to_vec(), 5_300.0)]
    );
    assert_eq!(store.hget(HashKey::InflightTask, b"a1").unwrap(), b"a1");
    assert_eq!(store.hget(HashKey::Task, b"a1"), None);
    assert_eq!(store.hget(HashKey::Lease, b"a1").unwrap(), b"token-1");
    assert_eq!(store.current_virtual_time().unwrap(), b"1");
}

#[test]
fn lease_count_gives_every_item_the_same_expiry() {
    let mut store = MemoryStore::new();
    enqueue(
        &mut store,
        &[item("A", "a1", 1), item("B", "b1", 1), item("C", "c1", 1)],
    )
    .unwrap();
    let outcome = lease(&mut store, 7, 10, 2, 1000, tokens()).unwrap();
    assert_eq!(outcome.leased.len(), 2);
    assert!(store
        .zset_entries(ZsetKey::Inflight)
        .iter()
        .all(|(_, s)| *s == 17.0));
    assert_ne!(outcome.leased[0].token, outcome.leased[1].token);
}

#[test]
fn draining_resets_virtual_time_but_keeps_lease_state() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, &[item("A", "a1", 1)]).unwrap();
    lease(&mut store, 0, 100, 5, 1000, tokens()).unwrap();
    assert_eq!(store.current_virtual_time().unwrap(), b"0");
    assert_eq!(store.hlen(HashKey::PartitionVirtualTime), 0);
    assert_eq!(store.hlen(HashKey::Task), 0);
    assert_eq!(store.hlen(HashKey::Lease), 1);
    assert_eq!(store.hlen(HashKey::Meta), 1);
}

#[test]
fn lease_on_an_empty_queue_changes_nothing() {
    let mut store = MemoryStore::new();
    let outcome = lease(&mut store, 0, 100, 1, 1000, tokens()).unwrap();
    assert!(outcome.leased.is_empty());
    assert_eq!(store.current_virtual_time(), None);
}

#[test]
fn ack_is_fenced_by_the_token() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, &[item("A", "a1", 1)]).unwrap();
    lease(&mut store, 0, 100, 1, 1000, tokens()).unwrap();
    let before = store.clone();
    assert_eq!(
        ack(&mut store, &[(b"a1", b"wrong"), (b"zz", b"token-1")]),
        0
    );
    assert_eq!(format!("{before:?}"), format!("{store:?}"));
    assert_eq!(
        ack(&mut store, &[(b"a1", b"token-1"), (b"a1", b"token-1")]),
        1
    );
    for key in [
        HashKey::InflightTask,
        HashKey::Lease,
        HashKey::Meta,
        HashKey::Timeouts,
    ] {
        assert_eq!(store.hlen(key), 0, "{key:?}");
    }
    assert_eq!(store.zcard(ZsetKey::Inflight), 0);
}

#[test]
fn renew_moves_the_expiry_only_with_the_current_token() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, &[item("A", "a1", 1)]).unwrap();
    lease(&mut store, 0, 100, 1, 1000, tokens()).unwrap();
    assert!(!renew(&mut store, b"a1", b"old", 50, 1000));
    assert_eq!(store.zscore(ZsetKey::Inflight, b"a1"), Some(100.0));
    assert!(renew(&mut store, b"a1", b"token-1", 50, 1000));
    assert_eq!(store.zscore(ZsetKey::Inflight, b"a1"), Some(1050.0));
}

#[test]
fn reclaim_requeues_expired_leases_rescored_and_counts_timeouts() {
    let mut store = MemoryStore::new();
    enqueue(
        &mut store,
        &[item("A", "a1", 2), item("A", "a2", 1), item("B", "b1", 1)],
    )
    .unwrap();
    lease(&mut store, 0, 100, 1, 1000, tokens()).unwrap(); // a1, expiry 100
    assert_eq!(reclaim(&mut store, 99, usize::MAX).unwrap().reclaimed, 0);
    assert_eq!(reclaim(&mut store, 100, usize::MAX).unwrap().reclaimed, 1);
    assert_eq!(store.hget(HashKey::Timeouts, b"a1").unwrap(), b"1");
    assert_eq!(store.hget(HashKey::Lease, b"a1"), None);
    assert_eq!(store.hget(HashKey::InflightTask, b"a1"), None);
    // Rescored as if fresh: after a2 (pvt of A was 4 after a2 at 3).
    assert_eq!(store.zscore(ZsetKey::Queue, b"a1"), Some(4.0));
    assert_eq!(
        store.hget(HashKey::PartitionVirtualTime, b"A").unwrap(),
        b"6"
    );
    let leased = lease(&mut store, 200, 100, 3, 1000, tokens())
        .unwrap()
        .leased;
    let order: Vec<_> = leased.iter().map(|l| (l.id.clone(), l.timeouts)).collect();
    assert_eq!(
        order,
        [
            (b"b1".to_vec(), 0),
            (b"a2".to_vec(), 0),
            (b"a1".to_vec(), 1)
        ]
    );
}

#[test]
fn reclaim_takes_the_oldest_expiry_first_and_honours_the_limit() {
    let mut store = MemoryStore::new();
    enqueue(
        &mut store,
        &[item("A", "a", 1), item("B", "b", 1), item("C", "c", 1)],
    )
    .unwrap();
    lease(&mut store, 0, 30, 1, 0, tokens()).unwrap(); // a expires 30
    lease(&mut store, 0, 10, 1, 0, tokens()).unwrap(); // b expires 10
    lease(&mut store, 0, 20, 1, 0, tokens()).unwrap(); // c expires 20
    assert_eq!(reclaim(&mut store, 100, 2).unwrap().reclaimed, 2);
    assert_eq!(
        store.zset_entries(ZsetKey::Inflight),
        [(b"a".to_vec(), 30.0)]
    );
}

#[test]
fn lease_reclaims_first_within_its_limit() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, &[item("A", "a", 1), item("B", "b", 1)]).unwrap();
    lease(&mut store, 0, 10, 2, 0, tokens()).unwrap();
    let outcome = lease(&mut store, 50, 10, 1, 1, tokens()).unwrap();
    assert_eq!(outcome.reclaimed, 1);
    assert_eq!(outcome.leased[0].id, b"a");
    assert_eq!(outcome.leased[0].timeouts, 1);
    assert_eq!(store.zcard(ZsetKey::Inflight), 2);
}

#[test]
fn reclaim_without_meta_still_requeues_the_item() {
    let mut store = MemoryStore::new();
    store.zadd(ZsetKey::Inflight, b"lost", 5.0);
    store.hset(HashKey::InflightTask, b"lost", b"payload");
    store.hset(HashKey::Lease, b"lost", b"t");
    let outcome = reclaim(&mut store, 10, usize::MAX).unwrap();
    assert_eq!(outcome.reclaimed, 1);
    assert_eq!(
        outcome.anomalies,
        [Anomaly::MetaUnreadable {
            id: b"lost".to_vec()
        }]
    );
    assert_eq!(store.hget(HashKey::Meta, b"lost").unwrap(), b"1:");
    assert_eq!(store.hget(HashKey::Task, b"lost").unwrap(), b"payload");
    assert_eq!(store.zscore(ZsetKey::Queue, b"lost"), Some(1.0));
}

#[test]
fn a_non_numeric_current_virtual_time_refuses_and_changes_nothing() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, &[item("A", "a", 1)]).unwrap();
    store.set_raw_current_virtual_time(b"garbage");
    let before = format!("{store:?}");
    assert_eq!(
        enqueue(&mut store, &[item("A", "b", 1)]),
        Err(CoreError::CurrentVirtualTimeNotInteger)
    );
    assert_eq!(
        lease(&mut store, 0, 1, 1, 1, tokens()),
        Err(CoreError::CurrentVirtualTimeNotInteger)
    );
    assert_eq!(
        reclaim(&mut store, 0, 1),
        Err(CoreError::CurrentVirtualTimeNotInteger)
    );
    assert_eq!(before, format!("{store:?}"));
}

#[test]
fn stats_counts_queue_state() {
    let mut store = MemoryStore::new();
    enqueue(
        &mut store,
        &[item("A", "a", 1), item("B", "b", 1), item("B", "c", 1)],
    )
    .unwrap();
    lease(&mut store, 0, 10, 1, 0, tokens()).unwrap();
    lease(&mut store, 0, 20, 1, 0, tokens()).unwrap();
    let stats = stats(&mut store, 15).unwrap();
    assert_eq!(
        stats,
        Stats {
            queued: 1,
            inflight: 2,
            expired: 1,
            partitions: 2,
            current_virtual_time: 1,
            next_expiry_ms: Some(10)
        }
    );
}

#[test]
fn check_finds_broken_invariants() {
    let mut store = MemoryStore::new();
    enqueue(&mut store, &[item("A", "a", 1)]).unwrap();
    assert!(check::check(&mut store).is_empty());
    store.zadd(ZsetKey::Inflight, b"a", 1.0);
    store.hset(HashKey::Lease, b"ghost", b"t");
    let problems = check::check(&mut store);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("a is both queued and in flight")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("lease holds ghost")),
        "{problems:?}"
    );
}

// ---------------------------------------------------------------------------
// Property tests: the fairness guarantees stated in the README.

#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        partition: u8,
        weight: u64,
        count: u8,
    },
    Lease {
        count: u8,
        lease_ms: i64,
    },
    Ack {
        pick: usize,
    },
    Renew {
        pick: usize,
        lease_ms: i64,
    },
    Advance {
        ms: i64,
    },
    Reclaim,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6, 1u64..=8, 1u8..=6).prop_map(|(partition, weight, count)| Op::Enqueue { partition, weight, count }),
        5 => (1u8..=3, 1i64..=40).prop_map(|(count, lease_ms)| Op::Lease { count, lease_ms }),
        2 => any::<usize>().prop_map(|pick| Op::Ack { pick }),
        1 => (any::<usize>(), 1i64..=40).prop_map(|(pick, lease_ms)| Op::Renew { pick, lease_ms }),
        2 => (1i64..=30).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Reclaim),
    ]
}

/// Running state of guarantee (1) for one pair of partitions.
#[derive(Default, Clone, Copy)]
struct Stretch {
    active: bool,
    difference: i64,
    low: i64,
    high: i64,
}

/// Guarantee (2): a partition waiting for its first item.
struct Newcomer {
    partition: u8,
    bound: usize,
    already_queued: HashSet<Vec<u8>>,
    served_before: usize,
}

struct Simulation {
    store: MemoryStore,
    now_ms: i64,
    next_id: u64,
    /// id -> (partition, weight), for every item ever enqueued.
    items: HashMap<Vec<u8>, (u8, u64)>,
    max_weight: BTreeMap<u8, u64>,
    stretches: BTreeMap<(u8, u8), Stretch>,
    newcomers: Vec<Newcomer>,
    tokens: u64,
}

impl Simulation {
    fn new() -> Self {
        Simulation {
            store: MemoryStore::new(),
            now_ms: 0,
            next_id: 0,
            items: HashMap::new(),
            max_weight: BTreeMap::new(),
            stretches: BTreeMap::new(),
            newcomers: Vec::new(),
            tokens: 0,
        }
    }

    fn queued(&self) -> Vec<Vec<u8>> {
        self.store
            .zset_entries(ZsetKey::Queue)
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    fn queued_partitions(&self, queued: &[Vec<u8>]) -> HashSet<u8> {
        queued.iter().map(|id| self.items[id].0).collect()
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Enqueue {
                partition,
                weight,
                count,
            } => {
                let queued = self.queued();
                let busy = self.queued_partitions(&queued);
                let ids: Vec<Vec<u8>> = (0..count)
                    .map(|_| {
                        self.next_id += 1;
                        format!("i{}", self.next_id).into_bytes()
                    })
                    .collect();
                let name = [b'p', partition];
                let batch: Vec<NewItem> = ids
                    .iter()
                    .map(|id| NewItem {
                        partition: &name,
                        id,
                        weight,
                        payload: b"x",
                    })
                    .collect();
                let added = enqueue(&mut self.store, &batch).unwrap().added;
                prop_assert_eq!(added, u64::from(count));
                for id in &ids {
                    self.items.insert(id.clone(), (partition, weight));
                }
                let max_weight = self.max_weight.entry(partition).or_insert(0);
                *max_weight = (*max_weight).max(weight);
                if !busy.contains(&partition)
                    && !self.newcomers.iter().any(|n| n.partition == partition)
                {
                    let others = busy.len();
                    self.newcomers.push(Newcomer {
                        partition,
                        bound: others * (*max_weight as usize + 1),
                        already_queued: queued.into_iter().collect(),
                        served_before: 0,
                    });
                }
            }
            Op::Lease { count, lease_ms } => {
                // Reclaim first at the same instant, so the pops below start
                // from a state we can see.
                reclaim(&mut self.store, self.now_ms, usize::MAX).unwrap();
                let mut queued = self.queued();
                let tokens = &mut self.tokens;
                let outcome = lease(
                    &mut self.store,
                    self.now_ms,
                    lease_ms,
                    count as usize,
                    1000,
                    || {
                        *tokens += 1;
                        tokens.to_string().into_bytes()
                    },
                )
                .unwrap();
                prop_assert_eq!(outcome.reclaimed, 0);
                for leased in outcome.leased {
                    prop_assert_eq!(&leased.id, &queued[0], "not the lowest score");
                    self.observe_pop(&queued, &leased.id)?;
                    queued.remove(0);
                }
            }
            Op::Ack { pick } => {
                let inflight = self.store.zset_entries(ZsetKey::Inflight);
                if !inflight.is_empty() {
                    let id = inflight[pick % inflight.len()].0.clone();
                    let token = self.store.hget(HashKey::Lease, &id).unwrap();
                    prop_assert_eq!(ack(&mut self.store, &[(&id, &token)]), 1);
                }
            }
            Op::Renew { pick, lease_ms } => {
                let inflight = self.store.zset_entries(ZsetKey::Inflight);
                if !inflight.is_empty() {
                    let id = inflight[pick % inflight.len()].0.clone();
                    let token = self.store.hget(HashKey::Lease, &id).unwrap();
                    prop_assert!(renew(&mut self.store, &id, &token, self.now_ms, lease_ms));
                }
            }
            Op::Advance { ms } => self.now_ms += ms,
            Op::Reclaim => {
                reclaim(&mut self.store, self.now_ms, usize::MAX).unwrap();
            }
        }
        let problems = check::check(&mut self.store);
        prop_assert!(
            problems.is_empty(),
            "invariants broken after {:?}: {:?}",
            op,
            problems
        );
        Ok(())
    }

    /// Checks both guarantees for one pop, given the queue just before it.
    fn observe_pop(&mut self, queued: &[Vec<u8>], popped: &[u8]) -> Result<(), TestCaseError> {
        let busy = self.queued_partitions(queued);
        let (popped_partition, popped_weight) = self.items[popped];
        let partitions: Vec<u8> = self.max_weight.keys().copied().collect();
        for (i, &f) in partitions.iter().enumerate() {
            for &g in &partitions[i + 1..] {
                let stretch = self.stretches.entry((f, g)).or_default();
                if !(busy.contains(&f) && busy.contains(&g)) {
                    stretch.active = false;
                    continue;
                }
                if !stretch.active {
                    *stretch = Stretch {
                        active: true,
                        ..Stretch::default()
                    };
                }
                let weight = popped_weight as i64;
                if popped_partition == f {
                    stretch.difference += weight;
                } else if popped_partition == g {
                    stretch.difference -= weight;
                }
                stretch.low = stretch.low.min(stretch.difference);
                stretch.high = stretch.high.max(stretch.difference);
                let bound = (self.max_weight[&f] + self.max_weight[&g]) as i64;
                prop_assert!(
                    stretch.high - stretch.low <= bound,
                    "guarantee 1: partitions {} and {} differ by {} > {}",
                    f,
                    g,
                    stretch.high - stretch.low,
                    bound
                );
            }
        }
        let mut finished = Vec::new();
        for (index, newcomer) in self.newcomers.iter_mut().enumerate() {
            if newcomer.partition == popped_partition {
                prop_assert!(
                    newcomer.served_before <= newcomer.bound,
                    "guarantee 2: partition {} waited for {} earlier items > {}",
                    newcomer.partition,
                    newcomer.served_before,
                    newcomer.bound
                );
                finished.push(index);
            } else if newcomer.already_queued.remove(popped) {
                newcomer.served_before += 1;
            }
        }
        for index in finished.into_iter().rev() {
            self.newcomers.remove(index);
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn fairness_guarantees_hold_under_random_interleavings(ops in prop::collection::vec(op(), 1..120)) {
        let mut simulation = Simulation::new();
        for op in &ops {
            simulation.run(op)?;
        }
    }

    #[test]
    fn nothing_is_lost_or_duplicated(ops in prop::collection::vec(op(), 1..80)) {
        let mut simulation = Simulation::new();
        let mut acked = 0usize;
        for op in &ops {
            let before = simulation.store.zcard(ZsetKey::Inflight);
            simulation.run(op)?;
            if matches!(op, Op::Ack { .. }) && before > 0 {
                acked += 1;
            }
        }
        let live = simulation.store.zcard(ZsetKey::Queue) + simulation.store.zcard(ZsetKey::Inflight);
        prop_assert_eq!(live as usize + acked, simulation.items.len());
    }
}
