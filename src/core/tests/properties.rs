//! Property tests: the fairness guarantees stated in the README, no item
//! lost or duplicated, and no delayed item served early, under random
//! interleavings of every operation of a job's life, run on the model in
//! `simulation.rs`.

use std::collections::HashSet;

use proptest::prelude::*;

use super::simulation::{Op, Simulation};
use crate::core::*;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6, 1u64..=8, 1u8..=6).prop_map(|(partition, weight, count)| Op::Enqueue { partition, weight, count, level: 0 }),
        5 => (1u8..=3, 1i64..=40).prop_map(|(count, lease_ms)| Op::Lease { count, lease_ms }),
        2 => any::<usize>().prop_map(|pick| Op::Ack { pick }),
        1 => (any::<usize>(), 1i64..=40).prop_map(|(pick, lease_ms)| Op::Renew { pick, lease_ms, cost: None }),
        2 => (1i64..=30).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Reclaim),
        2 => (0u8..6, 1u64..=8, 1u8..=4, 0i64..=50).prop_map(|(partition, weight, count, delay_ms)| Op::Defer { partition, weight, count, delay_ms }),
        2 => (any::<usize>(), 0u8..3, 0i64..=30).prop_map(|(pick, how, delay_ms)| Op::Nack { pick, how, delay_ms }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Revive { pick }),
        1 => (prop::option::of(0i64..3), prop::option::of(0i64..3)).prop_map(|(max_timeouts, max_nacks)| Op::Policy { max_timeouts, max_nacks }),
    ]
}

/// Every operation, with the tenant controls (caps, shares, pauses, the
/// default cap) interleaved.
fn op_with_controls() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => op(),
        1 => (0u8..6, prop::option::of(1u64..=3)).prop_map(|(partition, cap)| Op::Limit { partition, cap }),
        1 => (0u8..6, 1u64..=3).prop_map(|(partition, share)| Op::Share { partition, share }),
        1 => (0u8..6).prop_map(|partition| Op::Pause { partition }),
        1 => (0u8..6).prop_map(|partition| Op::Resume { partition }),
        1 => prop::option::of(1u64..=3).prop_map(|cap| Op::DefaultCap { cap }),
        1 => (any::<usize>(), 1u64..=20).prop_map(|(pick, cost)| Op::AckCost { pick, cost }),
        1 => (any::<usize>(), 1i64..=40, 0u64..=10).prop_map(|(pick, lease_ms, cost)| Op::Renew { pick, lease_ms, cost: Some(cost) }),
        1 => (0u8..6, prop::option::of((1u64..=3, 1u64..=20, 1u64..=4))).prop_map(|(partition, rate)| Op::Rate { partition, rate }),
        1 => prop::option::of((1u64..=3, 1u64..=20, 1u64..=4)).prop_map(|rate| Op::DefaultRate { rate }),
        1 => (0u8..6, 1u64..=8, 1u8..=6, prop_oneof![Just(-2), Just(3), Just(MAX_LEVEL)])
            .prop_map(|(partition, weight, count, level)| Op::Enqueue { partition, weight, count, level }),
    ]
}

/// Random runs per property: 1,000, or `VTRR_PROPTEST_CASES` (`make test`
/// runs 400 to keep CI's time, `make mutants` fewer per mutant).
fn cases() -> u32 {
    std::env::var("VTRR_PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn fairness_guarantees_hold_under_random_interleavings(ops in prop::collection::vec(op(), 1..120)) {
        let mut simulation = Simulation::new();
        for op in &ops {
            simulation.run(op)?;
        }
    }

    #[test]
    fn tenant_controls_keep_caps_order_counts_and_shares(ops in prop::collection::vec(op_with_controls(), 1..150)) {
        let mut simulation = Simulation::new();
        for op in &ops {
            simulation.run(op)?;
            let present = simulation.present();
            let distinct: HashSet<_> = present.iter().collect();
            prop_assert_eq!(distinct.len(), present.len());
            prop_assert_eq!(present.len() + simulation.finished, simulation.items.len());
            // No partition holds more leases than its cap, unless the cap
            // was lowered below what it already held (none are granted then).
            for (partition, leased) in simulation.leased_per_partition() {
                if let Some(cap) = simulation.cap_in_force(partition) {
                    prop_assert!(
                        leased <= cap || simulation.lowered.contains(&partition),
                        "partition {} holds {} leases over its cap {}", partition, leased, cap
                    );
                }
            }
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
