//! Property tests: the fairness guarantees stated in the README, and no
//! item lost or duplicated, under random interleavings.

use std::collections::{BTreeMap, HashMap, HashSet};

use proptest::prelude::*;

use crate::core::*;
use crate::store::memory::MemoryStore;
use crate::store::{HashKey, Store, ZsetKey};

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
                prop_assert_eq!(outcome.due.reclaimed, 0);
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
