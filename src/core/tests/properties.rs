//! Property tests: the fairness guarantees stated in the README, no item
//! lost or duplicated, and no delayed item served early, under random
//! interleavings of every operation of a job's life.

use std::collections::{BTreeMap, HashMap, HashSet};

use proptest::prelude::*;

use crate::core::*;
use crate::store::memory::MemoryStore;
use crate::store::{HashKey, Store, ZsetKey};

/// The items with these ids, of one partition and weight.
fn new_items_of<'a>(partition: &'a [u8], weight: u64, ids: &'a [Vec<u8>]) -> Vec<NewItem<'a>> {
    ids.iter()
        .map(|id| NewItem {
            partition,
            id,
            weight,
            payload: b"x",
        })
        .collect()
}

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
    Defer {
        partition: u8,
        weight: u64,
        count: u8,
        delay_ms: i64,
    },
    Nack {
        pick: usize,
        how: u8,
        delay_ms: i64,
    },
    Cancel {
        pick: usize,
    },
    Revive {
        pick: usize,
    },
    Policy {
        max_timeouts: Option<i64>,
        max_nacks: Option<i64>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6, 1u64..=8, 1u8..=6).prop_map(|(partition, weight, count)| Op::Enqueue { partition, weight, count }),
        5 => (1u8..=3, 1i64..=40).prop_map(|(count, lease_ms)| Op::Lease { count, lease_ms }),
        2 => any::<usize>().prop_map(|pick| Op::Ack { pick }),
        1 => (any::<usize>(), 1i64..=40).prop_map(|(pick, lease_ms)| Op::Renew { pick, lease_ms }),
        2 => (1i64..=30).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Reclaim),
        2 => (0u8..6, 1u64..=8, 1u8..=4, 0i64..=50).prop_map(|(partition, weight, count, delay_ms)| Op::Defer { partition, weight, count, delay_ms }),
        2 => (any::<usize>(), 0u8..3, 0i64..=30).prop_map(|(pick, how, delay_ms)| Op::Nack { pick, how, delay_ms }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Revive { pick }),
        1 => (prop::option::of(0i64..3), prop::option::of(0i64..3)).prop_map(|(max_timeouts, max_nacks)| Op::Policy { max_timeouts, max_nacks }),
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
    /// Items that left for good (acked or cancelled).
    finished: usize,
    /// Weight of queued items cancelled per partition since it was last idle.
    gaps: BTreeMap<u8, u64>,
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
            finished: 0,
            gaps: BTreeMap::new(),
        }
    }

    /// Fresh ids of items of `partition` with `weight`, remembered.
    fn new_items(&mut self, partition: u8, weight: u64, count: u8) -> Vec<Vec<u8>> {
        let ids: Vec<Vec<u8>> = (0..count)
            .map(|_| {
                self.next_id += 1;
                format!("i{}", self.next_id).into_bytes()
            })
            .collect();
        for id in &ids {
            self.items.insert(id.clone(), (partition, weight));
        }
        let max_weight = self.max_weight.entry(partition).or_insert(0);
        *max_weight = (*max_weight).max(weight);
        ids
    }

    /// Guarantee (2) starts for every partition that was idle before an
    /// operation (queue `before`) and has items queued after it, however
    /// they entered: enqueue, promotion, reclaim, nack or revive.
    fn note_entries(&mut self, before: Vec<Vec<u8>>) {
        let busy_before = self.queued_partitions(&before);
        let busy_after = self.queued_partitions(&self.queued());
        for partition in busy_after.difference(&busy_before) {
            if self.newcomers.iter().any(|n| n.partition == *partition) {
                continue;
            }
            self.newcomers.push(Newcomer {
                partition: *partition,
                bound: busy_before.len() * (self.max_weight[partition] as usize + 1),
                already_queued: before.iter().cloned().collect(),
                served_before: 0,
            });
        }
    }

    /// Every id in any state of its life.
    fn present(&self) -> Vec<Vec<u8>> {
        [
            ZsetKey::Queue,
            ZsetKey::Inflight,
            ZsetKey::Delayed,
            ZsetKey::Dead,
        ]
        .into_iter()
        .flat_map(|key| self.store.zset_entries(key))
        .map(|(id, _)| id)
        .collect()
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
                let before = self.queued();
                let ids = self.new_items(partition, weight, count);
                let name = [b'p', partition];
                let batch = new_items_of(&name, weight, &ids);
                let added = enqueue(&mut self.store, &batch).unwrap().added;
                prop_assert_eq!(added, u64::from(count));
                self.note_entries(before);
            }
            Op::Defer {
                partition,
                weight,
                count,
                delay_ms,
            } => {
                let before = self.queued();
                let ids = self.new_items(partition, weight, count);
                let name = [b'p', partition];
                let batch = new_items_of(&name, weight, &ids);
                let due_ms = self.now_ms + delay_ms;
                let added = defer(&mut self.store, self.now_ms, due_ms, &batch)
                    .unwrap()
                    .added;
                prop_assert_eq!(added, u64::from(count));
                self.note_entries(before);
            }
            Op::Lease { count, lease_ms } => {
                // Act on due items first at the same instant, so the pops
                // below start from a state we can see.
                let before = self.queued();
                run_due(&mut self.store, self.now_ms, usize::MAX).unwrap();
                self.note_entries(before);
                // Nothing due is left behind, and nothing not due moved.
                for (id, due) in self.store.zset_entries(ZsetKey::Delayed) {
                    prop_assert!(due > self.now_ms as f64, "{:?} due but still delayed", id);
                }
                let mut queued = self.queued();
                let tokens = &mut self.tokens;
                let request = LeaseRequest {
                    now_ms: self.now_ms,
                    lease_ms,
                    count: count as usize,
                    due_limit: 1000,
                    with_counters: false,
                };
                let outcome = lease(&mut self.store, &request, || {
                    *tokens += 1;
                    tokens.to_string().into_bytes()
                })
                .unwrap();
                prop_assert_eq!(outcome.due, Due::default());
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
                    prop_assert_eq!(ack(&mut self.store, &[(&id, &token)], &mut Vec::new()), 1);
                    self.finished += 1;
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
                let before = self.queued();
                reclaim(&mut self.store, self.now_ms, usize::MAX).unwrap();
                self.note_entries(before);
            }
            Op::Nack {
                pick,
                how,
                delay_ms,
            } => {
                let inflight = self.store.zset_entries(ZsetKey::Inflight);
                if !inflight.is_empty() {
                    let id = inflight[pick % inflight.len()].0.clone();
                    let token = self.store.hget(HashKey::Lease, &id).unwrap();
                    prop_assert!(nack(
                        &mut self.store,
                        &id,
                        b"stale",
                        self.now_ms,
                        Nack::Requeue,
                        &mut Vec::new()
                    )
                    .unwrap()
                    .is_none());
                    let how = match how {
                        0 => Nack::Requeue,
                        1 => Nack::Delay { ms: delay_ms },
                        _ => Nack::Dead,
                    };
                    let before = self.queued();
                    let nacked = nack(
                        &mut self.store,
                        &id,
                        &token,
                        self.now_ms,
                        how,
                        &mut Vec::new(),
                    )
                    .unwrap();
                    prop_assert!(nacked.is_some());
                    self.note_entries(before);
                }
            }
            Op::Cancel { pick } => {
                let present = self.present();
                if !present.is_empty() {
                    let id = present[pick % present.len()].clone();
                    let was_queued = self.store.zscore(ZsetKey::Queue, &id).is_some();
                    prop_assert_eq!(cancel(&mut self.store, &[&id], &mut Vec::new()), 1);
                    self.finished += 1;
                    if was_queued {
                        // A cancelled queued item's cost stays charged to its
                        // partition (its later items keep their places): a
                        // gap in its turns, which widens guarantee (1) by the
                        // cancelled weight while the partition stays
                        // backlogged, and ends its wait for guarantee (2).
                        let (partition, weight) = self.items[&id];
                        *self.gaps.entry(partition).or_insert(0) += weight;
                        self.newcomers.retain(|n| n.partition != partition);
                        for newcomer in &mut self.newcomers {
                            newcomer.already_queued.remove(&id);
                        }
                    }
                }
            }
            Op::Revive { pick } => {
                let dead = self.store.zset_entries(ZsetKey::Dead);
                if !dead.is_empty() {
                    let id = dead[pick % dead.len()].0.clone();
                    let before = self.queued();
                    prop_assert_eq!(revive(&mut self.store, &[&id]).unwrap().count, 1);
                    self.note_entries(before);
                }
            }
            Op::Policy {
                max_timeouts,
                max_nacks,
            } => set_policy(
                &mut self.store,
                &[
                    PolicyChange::MaxTimeouts(max_timeouts),
                    PolicyChange::MaxNacks(max_nacks),
                ],
                &mut Vec::new(),
            ),
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
        self.gaps.retain(|partition, _| busy.contains(partition));
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
                let gaps = self.gaps.get(&f).unwrap_or(&0) + self.gaps.get(&g).unwrap_or(&0);
                let bound = (self.max_weight[&f] + self.max_weight[&g] + gaps) as i64;
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
        for op in &ops {
            simulation.run(op)?;
            // Every item ever added is in exactly one state (the invariant
            // check rules out two), or finished.
            let present = simulation.present();
            let distinct: HashSet<_> = present.iter().collect();
            prop_assert_eq!(distinct.len(), present.len());
            prop_assert_eq!(present.len() + simulation.finished, simulation.items.len());
        }
    }
}
