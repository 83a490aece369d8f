//! The model the property tests run (`properties.rs`): a queue driven by
//! random operations of a job's life, beside a simulation of what the
//! README's fairness guarantees allow, checked after every step.

use std::collections::{BTreeMap, HashMap, HashSet};

use proptest::prelude::*;

use super::{apply_limit, apply_policy};
use crate::core::partitions::{Defaults, Record};
use crate::core::*;
use crate::engine::memory::MemoryStore;
use crate::store::{HashKey, Rate, Store, ZsetKey};

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
pub(super) enum Op {
    Enqueue {
        partition: u8,
        weight: u64,
        count: u8,
        level: Level,
    },
    Lease {
        count: u8,
        lease_ms: i64,
    },
    Ack {
        pick: usize,
    },
    /// `VTRR.ACKCOST`: an ack charging its partition `cost`.
    AckCost {
        pick: usize,
        cost: u64,
    },
    Renew {
        pick: usize,
        lease_ms: i64,
        /// `RENEW ... COST`: what the job cost since its last report.
        cost: Option<u64>,
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
    Limit {
        partition: u8,
        cap: Option<u64>,
    },
    Share {
        partition: u8,
        share: u64,
    },
    Pause {
        partition: u8,
    },
    Resume {
        partition: u8,
    },
    DefaultCap {
        cap: Option<u64>,
    },
    /// `VTRR.LIMIT ... RATE <amount> PER <per_ms> BURST <burst>` (or NONE).
    Rate {
        partition: u8,
        rate: Option<(u64, u64, u64)>,
    },
    /// `VTRR.POLICY ... DEFAULT-RATE <amount> PER <per_ms> BURST <burst>`.
    DefaultRate {
        rate: Option<(u64, u64, u64)>,
    },
}

fn rate_of((amount, per_ms, burst): (u64, u64, u64)) -> Rate {
    Rate {
        amount,
        per_ms,
        burst,
    }
}

/// Running state of guarantee (1) for one pair of partitions.
#[derive(Default, Clone, Copy)]
struct Stretch {
    /// The two partitions' shares when the stretch began.
    shares: (u64, u64),
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

pub(super) struct Simulation {
    store: MemoryStore,
    now_ms: i64,
    next_id: u64,
    /// id -> (partition, weight), for every item ever enqueued.
    pub(super) items: HashMap<Vec<u8>, (u8, u64)>,
    max_weight: BTreeMap<u8, u64>,
    stretches: BTreeMap<(u8, u8), Stretch>,
    newcomers: Vec<Newcomer>,
    tokens: u64,
    /// Items that left for good (acked or cancelled).
    pub(super) finished: usize,
    /// A cost was reported: service is then fair by cost, not by weight,
    /// and guarantees (1) and (2), stated in weights, no longer apply (the
    /// bound by cost is `charge.rs`'s property).
    charged: bool,
    /// An item of a level other than 0 was queued: guarantees (1) and (2)
    /// hold inside each level (`priority.rs`), not across them; each lease
    /// still takes the first servable item in (level, virtual time) order.
    prioritised: bool,
    /// A rate limit was set: guarantees (1) and (2) are about partitions
    /// served whenever their turn comes, which a throttled one is not (its
    /// bound is `throttle.rs`'s property).
    rated: bool,
    /// During a LEASE: the rate-limited partitions' records, refilled to
    /// the lease's time and spent as it leases (whether each has a token).
    buckets: BTreeMap<u8, Record>,
    /// Weight of queued items cancelled per partition since it was last idle.
    gaps: BTreeMap<u8, u64>,
    /// The tenant controls as set.
    caps: BTreeMap<u8, u64>,
    shares: BTreeMap<u8, u64>,
    paused: HashSet<u8>,
    default_cap: Option<u64>,
    default_rate: Option<Rate>,
    /// Partitions whose cap was lowered below the leases they held, until
    /// those leases end.
    pub(super) lowered: HashSet<u8>,
    /// Partitions whose share changed while they had items queued: those
    /// items keep the places they were given, so guarantee (1) at the new
    /// share applies once the partition has been idle.
    reshared: HashSet<u8>,
    /// The largest cap in force (1 when uncapped) per partition since it
    /// was last idle: how many owed items it may be served in a row.
    owed_caps: BTreeMap<u8, u64>,
    /// Partitions that waited at their cap since they were last idle: their
    /// items keep their times while they wait, so each freed slot serves
    /// them first (at most their cap at once) until they have caught up.
    /// Guarantee (1) is about partitions that have not waited at a cap;
    /// paused, resumed and re-capped ones any number of times included.
    owed: HashSet<u8>,
}

/// One queued item as the lease order sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Waiting {
    score: i64,
    id: Vec<u8>,
}

impl Simulation {
    pub(super) fn new() -> Self {
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
            charged: false,
            prioritised: false,
            rated: false,
            buckets: BTreeMap::new(),
            gaps: BTreeMap::new(),
            caps: BTreeMap::new(),
            shares: BTreeMap::new(),
            paused: HashSet::new(),
            default_cap: None,
            default_rate: None,
            lowered: HashSet::new(),
            reshared: HashSet::new(),
            owed_caps: BTreeMap::new(),
            owed: HashSet::new(),
        }
    }

    fn name(partition: u8) -> [u8; 2] {
        [b'p', partition]
    }

    fn share(&self, partition: u8) -> u64 {
        self.shares.get(&partition).copied().unwrap_or(1)
    }

    fn defaults(&self) -> Defaults {
        Defaults {
            cap: self.default_cap,
            rate: self.default_rate,
            ..Defaults::default()
        }
    }

    pub(super) fn cap_in_force(&self, partition: u8) -> Option<u64> {
        self.caps.get(&partition).copied().or(self.default_cap)
    }

    /// Leases held per partition, from `inflight` (not the module's counts).
    pub(super) fn leased_per_partition(&self) -> BTreeMap<u8, u64> {
        let mut leased = BTreeMap::new();
        for (id, _) in self.store.zset_entries(ZsetKey::Inflight) {
            *leased.entry(self.items[&id].0).or_insert(0) += 1;
        }
        leased
    }

    fn servable(&self, partition: u8, leased: &BTreeMap<u8, u64>) -> bool {
        self.buckets
            .get(&partition)
            .is_none_or(|bucket| bucket.has_token(self.defaults()))
            && !self.paused.contains(&partition)
            && self
                .cap_in_force(partition)
                .is_none_or(|cap| leased.get(&partition).copied().unwrap_or(0) < cap)
    }

    /// Every queued item (in `queue` or `held`) with the virtual time it
    /// will be served at.
    fn waiting(&self) -> Vec<(u8, Waiting)> {
        let records = self.store.hash_entries(HashKey::Partitions);
        let mut waiting: Vec<(u8, Waiting)> = self
            .store
            .zset_entries(ZsetKey::Queue)
            .into_iter()
            .map(|(id, score)| {
                let partition = self.items[&id].0;
                let score = score as i64;
                (partition, Waiting { score, id })
            })
            .collect();
        for (member, _) in self.store.zset_entries(ZsetKey::Held) {
            let (name, level, relative, id) = crate::core::held::parse_member(&member).unwrap();
            let record = crate::core::partitions::Record::parse(&records[name]).unwrap();
            let partition = self.items[id].0;
            let time = relative + record.offset_at(level);
            waiting.push((
                partition,
                Waiting {
                    score: crate::core::levels::queue_score(level, time),
                    id: id.to_vec(),
                },
            ));
        }
        waiting
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
            // A partition with share s serves up to s items per unit of
            // virtual time: it counts s times.
            let others: u64 = busy_before.iter().map(|p| self.share(*p)).sum();
            self.newcomers.push(Newcomer {
                partition: *partition,
                bound: others as usize * (self.max_weight[partition] as usize + 1),
                already_queued: before.iter().cloned().collect(),
                served_before: 0,
            });
        }
    }

    /// Every id in any state of its life.
    pub(super) fn present(&self) -> Vec<Vec<u8>> {
        [
            ZsetKey::Queue,
            ZsetKey::Inflight,
            ZsetKey::Delayed,
            ZsetKey::Dead,
        ]
        .into_iter()
        .flat_map(|key| self.store.zset_entries(key))
        .map(|(id, _)| id)
        .chain(
            self.store
                .zset_entries(ZsetKey::Held)
                .into_iter()
                .map(|(member, _)| crate::core::held::parse_member(&member).unwrap().3.to_vec()),
        )
        .collect()
    }

    fn queued(&self) -> Vec<Vec<u8>> {
        self.waiting().into_iter().map(|(_, w)| w.id).collect()
    }

    fn queued_partitions(&self, queued: &[Vec<u8>]) -> HashSet<u8> {
        queued.iter().map(|id| self.items[id].0).collect()
    }

    pub(super) fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Enqueue {
                partition,
                weight,
                count,
                level,
            } => {
                let before = self.queued();
                let ids = self.new_items(partition, weight, count);
                let name = [b'p', partition];
                let batch = new_items_of(&name, weight, &ids);
                self.prioritised |= level != 0;
                let scoped = &mut self.store.scoped(CoreOp::enqueue(level));
                let added = enqueue_at(scoped, self.now_ms, level, &batch)
                    .unwrap()
                    .added;
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
                let added = defer(
                    &mut self.store.scoped(CoreOp::Defer),
                    self.now_ms,
                    due_ms,
                    &batch,
                )
                .unwrap()
                .added;
                prop_assert_eq!(added, u64::from(count));
                self.note_entries(before);
            }
            Op::Lease { count, lease_ms } => {
                // Act on due items first at the same instant, so the pops
                // below start from a state we can see.
                let before = self.queued();
                run_due(
                    &mut self.store.scoped(CoreOp::RunDue),
                    self.now_ms,
                    usize::MAX,
                    STEPS_FOR_ANY_FIRING,
                )
                .unwrap();
                self.note_entries(before);
                // Nothing due is left behind, and nothing not due moved.
                for (id, due) in self.store.zset_entries(ZsetKey::Delayed) {
                    prop_assert!(due > self.now_ms as f64, "{:?} due but still delayed", id);
                }
                let mut waiting = self.waiting();
                let mut leased_now = self.leased_per_partition();
                let defaults = self.defaults();
                self.buckets = self
                    .store
                    .hash_entries(HashKey::Partitions)
                    .into_iter()
                    .filter_map(|(name, raw)| {
                        let mut record = Record::parse(&raw)?;
                        record.rate_in_force(defaults)?;
                        record.refill(defaults, self.now_ms);
                        Some((name[1], record))
                    })
                    .collect();
                let tokens = &mut self.tokens;
                let request = LeaseRequest {
                    now_ms: self.now_ms,
                    lease_ms,
                    count: count as usize,
                    due_limit: 1000,
                    with_counters: false,
                };
                let outcome = lease(&mut self.store.scoped(CoreOp::Lease), &request, || {
                    *tokens += 1;
                    tokens.to_string().into_bytes()
                })
                .unwrap();
                prop_assert_eq!(&outcome.due, &Due::default());
                let leased_count = outcome.leased.len();
                for leased in outcome.leased {
                    // The lowest virtual time among partitions that may be
                    // served: not paused, under their cap.
                    let busy: HashSet<u8> = waiting
                        .iter()
                        .map(|(p, _)| *p)
                        .filter(|p| self.servable(*p, &leased_now))
                        .collect();
                    // Equal times may be served in either order: within a
                    // partition under control first come, across partitions
                    // in member order of whichever items are in `queue`.
                    let lowest = waiting
                        .iter()
                        .filter(|(p, _)| busy.contains(p))
                        .map(|(_, w)| w.score)
                        .min();
                    let got = waiting
                        .iter()
                        .find(|(p, w)| w.id == leased.id && busy.contains(p))
                        .map(|(_, w)| w.score);
                    prop_assert!(
                        got.is_some() && got == lowest,
                        "not the lowest servable time: {:?} leased at {:?}, lowest {:?}",
                        leased.id,
                        got,
                        lowest
                    );
                    let queued_partitions: HashSet<u8> = waiting.iter().map(|(p, _)| *p).collect();
                    self.observe_pop(&queued_partitions, &busy, &leased.id)?;
                    waiting.retain(|(_, w)| w.id != leased.id);
                    let (partition, weight) = self.items[&leased.id];
                    *leased_now.entry(partition).or_insert(0) += 1;
                    if defaults.rate.is_some() && !self.buckets.contains_key(&partition) {
                        // No record yet: a full bucket of the default rate.
                        let mut blank = Record::default();
                        blank.refill(defaults, self.now_ms);
                        self.buckets.insert(partition, blank);
                    }
                    if let Some(bucket) = self.buckets.get_mut(&partition) {
                        bucket.spend(defaults, weight);
                    }
                }
                // A LEASE that returned fewer than asked left nothing servable.
                if !outcome.skipped_enough && leased_count < usize::from(count) {
                    let left = waiting.iter().any(|(p, _)| self.servable(*p, &leased_now));
                    prop_assert!(!left, "LEASE returned short while items were servable");
                }
            }
            Op::Ack { pick } => {
                let inflight = self.store.zset_entries(ZsetKey::Inflight);
                if !inflight.is_empty() {
                    let id = inflight[pick % inflight.len()].0.clone();
                    let token = self.store.hget(HashKey::Lease, &id).unwrap();
                    prop_assert_eq!(
                        ack(
                            &mut self.store.scoped(CoreOp::Ack),
                            &[Ack::pair(&id, &token)],
                            &mut Vec::new()
                        ),
                        1
                    );
                    self.finished += 1;
                }
            }
            Op::AckCost { pick, cost } => {
                let inflight = self.store.zset_entries(ZsetKey::Inflight);
                if !inflight.is_empty() {
                    let id = inflight[pick % inflight.len()].0.clone();
                    let token = self.store.hget(HashKey::Lease, &id).unwrap();
                    let finished = Ack {
                        id: &id,
                        token: &token,
                        cost: Some(cost),
                        result: None,
                    };
                    prop_assert_eq!(
                        ack(
                            &mut self.store.scoped(CoreOp::AckCost),
                            &[finished],
                            &mut Vec::new()
                        ),
                        1
                    );
                    self.finished += 1;
                    self.charged = true;
                }
            }
            Op::Renew {
                pick,
                lease_ms,
                cost,
            } => {
                let inflight = self.store.zset_entries(ZsetKey::Inflight);
                if !inflight.is_empty() {
                    let id = inflight[pick % inflight.len()].0.clone();
                    let token = self.store.hget(HashKey::Lease, &id).unwrap();
                    let op = match cost {
                        Some(_) => CoreOp::RenewCost,
                        None => CoreOp::Renew,
                    };
                    let lease = Ack {
                        id: &id,
                        token: &token,
                        cost,
                        result: None,
                    };
                    prop_assert!(renew(
                        &mut self.store.scoped(op),
                        &lease,
                        self.now_ms,
                        lease_ms,
                        &mut Vec::new()
                    ));
                    self.charged |= cost.is_some();
                }
            }
            Op::Advance { ms } => self.now_ms += ms,
            Op::Reclaim => {
                let before = self.queued();
                reclaim(
                    &mut self.store.scoped(CoreOp::Reclaim),
                    self.now_ms,
                    usize::MAX,
                )
                .unwrap();
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
                        &mut self.store.scoped(CoreOp::Nack),
                        &id,
                        b"stale",
                        self.now_ms,
                        Nack::Requeue,
                        None,
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
                    // Half the nacks say what failed: the item keeps it
                    // until it leaves (CHECK reports one left behind).
                    let reason = (pick % 2 == 0).then_some(&b"boom"[..]);
                    let nacked = nack(
                        &mut self.store.scoped(CoreOp::Nack),
                        &id,
                        &token,
                        self.now_ms,
                        how,
                        reason,
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
                    let was_queued = self.queued().contains(&id);
                    prop_assert_eq!(
                        cancel(
                            &mut self.store.scoped(CoreOp::Cancel),
                            &[&id],
                            &mut Vec::new()
                        ),
                        1
                    );
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
                    prop_assert_eq!(
                        revive(&mut self.store.scoped(CoreOp::Revive), &[&id])
                            .unwrap()
                            .count,
                        1
                    );
                    self.note_entries(before);
                }
            }
            Op::Policy {
                max_timeouts,
                max_nacks,
            } => apply_policy(
                &mut self.store,
                &[
                    PolicyChange::MaxTimeouts(max_timeouts),
                    PolicyChange::MaxNacks(max_nacks),
                ],
            ),
            Op::Limit { partition, cap } => {
                let change = LimitChange::Concurrency(cap);
                apply_limit(&mut self.store, Self::name(partition), change);
                match cap {
                    Some(cap) => self.caps.insert(partition, cap),
                    None => self.caps.remove(&partition),
                };
            }
            Op::Share { partition, share } => {
                let change = LimitChange::Share(share);
                apply_limit(&mut self.store, Self::name(partition), change);
                if self.shares.insert(partition, share).unwrap_or(1) != share {
                    self.reshared.insert(partition);
                }
            }
            Op::Pause { partition } => {
                let paused = pause(
                    &mut self.store.scoped(CoreOp::Pause),
                    &Self::name(partition),
                    &mut Vec::new(),
                );
                prop_assert_eq!(paused, self.paused.insert(partition));
            }
            Op::Resume { partition } => {
                let resumed = resume(
                    &mut self.store.scoped(CoreOp::Resume),
                    &Self::name(partition),
                    &mut Vec::new(),
                )
                .unwrap();
                prop_assert_eq!(resumed, self.paused.remove(&partition));
            }
            Op::DefaultCap { cap } => {
                apply_policy(&mut self.store, &[PolicyChange::DefaultConcurrency(cap)]);
                self.default_cap = cap;
            }
            Op::DefaultRate { rate } => {
                let rate = rate.map(rate_of);
                apply_policy(&mut self.store, &[PolicyChange::DefaultRate(rate)]);
                self.default_rate = rate;
            }
            Op::Rate { partition, rate } => {
                let rate = rate.map(|(amount, per_ms, burst)| Rate {
                    amount,
                    per_ms,
                    burst,
                });
                apply_limit(
                    &mut self.store,
                    Self::name(partition),
                    LimitChange::Rate(rate),
                );
                self.rated = true;
            }
        }
        let leased = self.leased_per_partition();
        let over: HashSet<u8> = leased
            .iter()
            .filter(|(p, n)| self.cap_in_force(**p).is_some_and(|cap| **n > cap))
            .map(|(p, _)| *p)
            .collect();
        if matches!(op, Op::Limit { .. } | Op::DefaultCap { .. }) {
            self.lowered.extend(over.iter().copied());
            // A cap that stops a waiting partition makes it wait at its cap
            // now, whether or not a pop happens before the cap moves again:
            // its items keep their times (owed), as `observe_pop` marks.
            for (partition, _) in self.waiting() {
                if !self.paused.contains(&partition) && !self.servable(partition, &leased) {
                    self.owed.insert(partition);
                    let cap = self.cap_in_force(partition).unwrap_or(1);
                    let owed = self.owed_caps.entry(partition).or_insert(cap);
                    *owed = (*owed).max(cap);
                }
            }
        }
        self.lowered.retain(|p| over.contains(p));
        let problems = check::check(&mut self.store.scoped(CoreOp::Check)).unwrap();
        prop_assert!(
            problems.is_empty(),
            "invariants broken after {:?}: {:?}",
            op,
            problems
        );
        Ok(())
    }

    /// Checks both guarantees for one pop, given the queue just before it.
    /// Guarantee (1) with shares and caps, in virtual-time units: a
    /// partition's allowance is its largest weight times its cap in force
    /// (a capped partition is served its owed items as soon as slots free),
    /// plus its cancelled gap, divided by its share (rounded up), plus 1
    /// for the carried remainder when its share is above 1.
    fn allowance(&self, partition: u8) -> i64 {
        let share = self.share(partition);
        let cap = self.owed_caps.get(&partition).copied().unwrap_or(1);
        let owed = self.max_weight[&partition] * cap + self.gaps.get(&partition).unwrap_or(&0);
        (owed.div_ceil(share) + u64::from(share > 1)) as i64
    }

    /// `waiting`: the partitions with items queued; `busy`: those of them
    /// that may be served.
    fn observe_pop(
        &mut self,
        waiting: &HashSet<u8>,
        busy: &HashSet<u8>,
        popped: &[u8],
    ) -> Result<(), TestCaseError> {
        if self.charged || self.rated || self.prioritised {
            return Ok(());
        }
        let (popped_partition, popped_weight) = self.items[popped];
        self.gaps.retain(|partition, _| waiting.contains(partition));
        // Virtual time charged at an old share stays charged: a reshared
        // partition settles once idle with its next time caught up.
        let current = read_current_virtual_time(&mut self.store).unwrap();
        let times = self.store.hash_entries(HashKey::PartitionVirtualTime);
        let ahead = |partition: u8| {
            times
                .get(&Self::name(partition)[..])
                .and_then(|raw| parse_virtual_time(raw))
                .is_some_and(|next| next > current + 1)
        };
        self.reshared
            .retain(|partition| waiting.contains(partition) || ahead(*partition));
        self.owed_caps
            .retain(|partition, _| waiting.contains(partition));
        self.owed.retain(|partition| waiting.contains(partition));
        for &partition in waiting {
            if !busy.contains(&partition) && !self.paused.contains(&partition) {
                self.owed.insert(partition);
            }
        }
        for &partition in waiting {
            let cap = self.cap_in_force(partition).unwrap_or(1);
            let owed = self.owed_caps.entry(partition).or_insert(cap);
            *owed = (*owed).max(cap);
        }
        let partitions: Vec<u8> = self.max_weight.keys().copied().collect();
        for (i, &f) in partitions.iter().enumerate() {
            for &g in &partitions[i + 1..] {
                let shares = (self.share(f), self.share(g));
                let bound = (self.allowance(f) + self.allowance(g)) * (shares.0 * shares.1) as i64;
                let settled = !self.reshared.contains(&f)
                    && !self.reshared.contains(&g)
                    && !self.owed.contains(&f)
                    && !self.owed.contains(&g);
                let stretch = self.stretches.entry((f, g)).or_default();
                if !(busy.contains(&f) && busy.contains(&g) && settled) {
                    stretch.active = false;
                    continue;
                }
                if !stretch.active || stretch.shares != shares {
                    *stretch = Stretch {
                        active: true,
                        shares,
                        ..Stretch::default()
                    };
                }
                // Service in units of 1 / (share f * share g) virtual time.
                let weight = popped_weight as i64;
                if popped_partition == f {
                    stretch.difference += weight * shares.1 as i64;
                } else if popped_partition == g {
                    stretch.difference -= weight * shares.0 as i64;
                }
                stretch.low = stretch.low.min(stretch.difference);
                stretch.high = stretch.high.max(stretch.difference);
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
        // Guarantee (2) is for a newcomer that may be served; the owed items
        // of capped partitions (served as their slots free) do not count.
        self.newcomers.retain(|n| busy.contains(&n.partition));
        let popped_capped = self.cap_in_force(popped_partition).is_some();
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
            } else if newcomer.already_queued.remove(popped) && !popped_capped {
                newcomer.served_before += 1;
            }
        }
        for index in finished.into_iter().rev() {
            self.newcomers.remove(index);
        }
        Ok(())
    }
}
