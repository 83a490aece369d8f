//! Rate limits (`VTRR.LIMIT ... RATE`): a partition without a token is
//! skipped by LEASE without losing its place, and served again when its
//! next token is due.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::store::{HashKey, Rate, Store, ZsetKey};

fn rate(amount: u64, per_ms: u64, burst: u64) -> LimitChange {
    LimitChange::Rate(Some(Rate {
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

fn leased_at(store: &mut MemoryStore, now_ms: i64, count: usize) -> Vec<String> {
    ids_of(&lease_at(store, now_ms, 60_000, count, 16).unwrap().leased)
}

fn view(store: &mut MemoryStore, partition: &str, now_ms: i64) -> PartitionView {
    partition_view(
        &mut store.scoped(CoreOp::PartitionView),
        partition.as_bytes(),
        now_ms,
        &mut Vec::new(),
    )
}

fn assert_sound(store: &mut MemoryStore) {
    let problems = check::check(&mut store.scoped(CoreOp::Check)).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn a_partition_without_a_token_is_skipped_and_the_others_run_at_full_speed() {
    let mut store = MemoryStore::new();
    apply_limit(&mut store, "slow", rate(2, 1000, 2));
    enqueue_n(&mut store, "slow", 1, 10);
    enqueue_n(&mut store, "fast", 1, 10);
    // Its burst of two, in turn with the other; then only the other.
    let first = leased_at(&mut store, 0, 8);
    assert_eq!(
        first,
        [
            "fast-0000",
            "slow-0000",
            "fast-0001",
            "slow-0001",
            "fast-0002",
            "fast-0003",
            "fast-0004",
            "fast-0005"
        ]
    );
    // Nothing was leased and put back: its next item waits in `held`.
    assert_eq!(
        store.zcard(ZsetKey::Queue),
        4,
        "only the fast partition's rest"
    );
    // A token every 500 ms: one more at 500, none at 999.
    assert_eq!(leased_at(&mut store, 499, 1), ["fast-0006"]);
    assert_eq!(leased_at(&mut store, 500, 2), ["slow-0002", "fast-0007"]);
    assert_eq!(leased_at(&mut store, 999, 3), ["fast-0008", "fast-0009"]);
    assert_eq!(leased_at(&mut store, 1000, 3), ["slow-0003"]);
    assert_sound(&mut store);
}

#[test]
fn the_timer_is_due_when_the_next_token_is_and_lets_the_partition_back_in() {
    let mut store = MemoryStore::new();
    apply_limit(&mut store, "p", rate(1, 200, 1));
    enqueue_n(&mut store, "p", 1, 3);
    assert_eq!(leased_at(&mut store, 1_000, 5), ["p-0000"]);
    assert_eq!(next_due(&mut store.scoped(CoreOp::NextDue)), Some(1_200));
    assert_eq!(store.zcard(ZsetKey::Queue), 0, "a LEASE blocked now waits");
    let due = run_due(
        &mut store.scoped(CoreOp::RunDue),
        1_199,
        16,
        STEPS_FOR_ANY_FIRING,
    )
    .unwrap();
    assert_eq!(due.refilled, 0, "not before its token");
    let due = run_due(
        &mut store.scoped(CoreOp::RunDue),
        1_200,
        16,
        STEPS_FOR_ANY_FIRING,
    )
    .unwrap();
    assert_eq!(due.refilled, 1);
    assert_eq!(store.zcard(ZsetKey::Queue), 1, "its head is back for LEASE");
    assert_eq!(leased_at(&mut store, 1_200, 5), ["p-0001"]);
    assert_sound(&mut store);
}

#[test]
fn an_item_heavier_than_the_burst_is_served_and_its_overdraft_paid_back_first() {
    let mut store = MemoryStore::new();
    apply_limit(&mut store, "p", rate(1, 100, 2));
    enqueue_n(&mut store, "p", 5, 2);
    assert_eq!(leased_at(&mut store, 0, 2), ["p-0000"]);
    let shown = view(&mut store, "p", 0);
    assert_eq!((shown.tokens, shown.next_token_ms), (Some(-3), Some(400)));
    assert_eq!(leased_at(&mut store, 399, 1), Vec::<String>::new());
    assert_eq!(leased_at(&mut store, 400, 1), ["p-0001"]);
    assert_sound(&mut store);
}

#[test]
fn removing_a_rate_rejoins_the_backlog_at_the_current_time_without_a_burst() {
    let mut store = MemoryStore::new();
    apply_limit(&mut store, "slow", rate(1, 1_000_000, 1));
    enqueue_n(&mut store, "slow", 1, 5);
    enqueue_n(&mut store, "fast", 1, 20);
    let served = leased_at(&mut store, 0, 12);
    assert_eq!(served.iter().filter(|id| id.starts_with("slow")).count(), 1);
    apply_limit(&mut store, "slow", LimitChange::Rate(None));
    // Its four left were queued at times 2..5, long passed: they come back
    // in turn from now, not all at once.
    let next: Vec<String> = leased_at(&mut store, 1, 4);
    assert_eq!(
        next.iter().filter(|id| id.starts_with("slow")).count(),
        2,
        "{next:?}"
    );
    assert_eq!(store.zcard(ZsetKey::Throttled), 0);
    assert_sound(&mut store);
}

#[test]
fn a_rate_shows_in_the_view_and_setting_it_again_changes_nothing() {
    let mut store = MemoryStore::new();
    apply_limit(&mut store, "p", rate(3, 1000, 6));
    let shown = view(&mut store, "p", 5);
    assert_eq!(
        shown.record.rate,
        Some(Rate {
            amount: 3,
            per_ms: 1000,
            burst: 6
        })
    );
    assert_eq!((shown.tokens, shown.next_token_ms), (Some(6), None));
    enqueue_n(&mut store, "p", 2, 4);
    assert_eq!(
        leased_at(&mut store, 10, 4).len(),
        3,
        "6 tokens: three of weight 2"
    );
    let before = store.clone();
    apply_limit(&mut store, "p", rate(3, 1000, 6));
    assert_eq!(
        store.hash_entries(HashKey::Partitions),
        before.hash_entries(HashKey::Partitions),
        "the same rate again leaves its bucket as it is"
    );
}

/// Leases every `step` of `steps` ms from 1,000 on, `count` at a time:
/// after each LEASE, the weight units partition `r` has been leased and
/// how many units its rate allowed by then (`burst + amount·t/per_ms`).
fn serve_throttled(
    store: &mut MemoryStore,
    weights: &[u64],
    (amount, per_ms, burst): (u64, u64, u64),
    steps: &[i64],
    count: usize,
) -> Vec<(u64, f64, bool)> {
    apply_limit(store, "r", rate(amount, per_ms, burst));
    let ids: Vec<String> = (0..weights.len()).map(|i| format!("r-{i:04}")).collect();
    for (id, &weight) in ids.iter().zip(weights) {
        enqueue(
            &mut store.scoped(CoreOp::Enqueue),
            0,
            &[item("r", id, weight)],
        )
        .unwrap();
    }
    let (start, mut now, mut spent, mut leased) = (1_000i64, 1_000i64, 0u64, 0usize);
    let mut seen = Vec::new();
    for &step in steps {
        for id in leased_at(store, now, count) {
            if let Some(n) = id.strip_prefix("r-") {
                spent += weights[n.parse::<usize>().unwrap()];
                leased += 1;
            }
        }
        let allowed = burst as f64 + (now - start) as f64 * amount as f64 / per_ms as f64;
        seen.push((spent, allowed, leased < weights.len()));
        now += step;
    }
    seen
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The rate's ceiling: by any time t, a partition with rate a per p ms
    /// and burst b has been leased at most b + a·t/p weight units, plus one
    /// item's weight less one (a lease needs one token and spends its
    /// whole weight), while another partition takes every turn it leaves.
    #[test]
    fn a_throttled_partition_is_never_leased_beyond_its_rate(
        rate_of in (1u64..=4, 1u64..=50, 1u64..=6),
        weights in proptest::collection::vec(1u64..=5, 40),
        steps in proptest::collection::vec(1i64..=7, 60),
    ) {
        let mut store = MemoryStore::new();
        enqueue_n(&mut store, "free", 1, 400);
        let most = *weights.iter().max().unwrap() as f64;
        for (spent, allowed, _) in serve_throttled(&mut store, &weights, rate_of, &steps, 3) {
            prop_assert!(spent as f64 <= allowed + most - 1.0, "{} units leased, {} allowed", spent, allowed);
        }
        assert_sound(&mut store);
    }

    /// The rate's floor: while it has items queued and LEASE asks at least
    /// once per token, it is leased at least b + a·t/p units minus an
    /// item's weight and the token under way: skipped partitions are not
    /// served late. A burst of at least 2: a waiting bucket holds under one
    /// token, so one token's refill between two asks never reaches the cap.
    /// A burst of 1 is full between asks and loses the rest of the step's
    /// refill, as a token bucket does: its floor is its ceiling's business.
    #[test]
    fn a_throttled_partition_is_leased_as_fast_as_its_rate_allows(
        (amount, per_ms) in (1u64..=4, 1u64..=50),
        burst in 2u64..=6,
        weights in proptest::collection::vec(1u64..=5, 40),
        steps in proptest::collection::vec(1i64..=7, 60),
    ) {
        let per_ms = per_ms.max(7 * amount); // at most one token per step
        let mut store = MemoryStore::new();
        let most = *weights.iter().max().unwrap() as f64;
        let seen = serve_throttled(&mut store, &weights, (amount, per_ms, burst), &steps, 10);
        for (spent, allowed, backlogged) in seen {
            if backlogged {
                prop_assert!(spent as f64 >= allowed - most - 1.0, "{} units leased, {} due", spent, allowed);
            }
        }
        assert_sound(&mut store);
    }
}

fn default_rate(amount: u64, per_ms: u64, burst: u64) -> PolicyChange {
    PolicyChange::DefaultRate(Some(Rate {
        amount,
        per_ms,
        burst,
    }))
}

fn served_per_partition(ids: &[String]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for id in ids {
        let partition = id.split('-').next().unwrap().to_string();
        *counts.entry(partition).or_default() += 1;
    }
    counts
}

fn ack_leased(store: &mut MemoryStore, now_ms: i64, count: usize) -> Vec<String> {
    let outcome = lease_at(store, now_ms, 60_000, count, 16).unwrap();
    let acks: Vec<Ack<'_>> = outcome
        .leased
        .iter()
        .map(|l| Ack {
            id: &l.id,
            token: &l.token,
            cost: None,
            result: None,
        })
        .collect();
    assert_eq!(
        ack(&mut store.scoped(CoreOp::Ack), &acks, &mut Vec::new()),
        acks.len() as u64
    );
    ids_of(&outcome.leased)
}

#[test]
fn the_default_rate_holds_every_partition_without_its_own_and_an_own_rate_wins() {
    let mut store = MemoryStore::new();
    apply_policy(&mut store, &[default_rate(1, 1000, 1)]);
    apply_limit(&mut store, "own", rate(1, 1000, 3));
    for partition in ["a", "b", "own"] {
        enqueue_n(&mut store, partition, 1, 5);
    }
    let first = leased_at(&mut store, 0, 20);
    assert_eq!(
        served_per_partition(&first),
        BTreeMap::from([("a".into(), 1), ("b".into(), 1), ("own".into(), 3)])
    );
    let shown = view(&mut store, "a", 0);
    assert_eq!(shown.record.rate, None, "its own: none");
    assert_eq!((shown.tokens, shown.next_token_ms), (Some(0), Some(1000)));
    assert!(leased_at(&mut store, 999, 20).is_empty());
    let second = leased_at(&mut store, 1000, 20);
    assert_eq!(
        served_per_partition(&second),
        BTreeMap::from([("a".into(), 1), ("b".into(), 1), ("own".into(), 1)])
    );
    assert_sound(&mut store);
}

#[test]
fn an_idle_partition_keeps_its_bucket_until_it_is_full_then_its_record_goes() {
    let mut store = MemoryStore::new();
    apply_policy(&mut store, &[default_rate(1, 1000, 2)]);
    enqueue_n(&mut store, "a", 1, 2);
    assert_eq!(ack_leased(&mut store, 0, 5).len(), 2, "its burst of two");
    // Idle, its bucket empty: the record stays, listed until it is full.
    assert!(store.hget(HashKey::Partitions, b"a").is_some());
    assert_eq!(store.zscore(ZsetKey::Throttled, b"a"), Some(2000.0));
    assert_sound(&mut store);
    // Going idle did not refill it: the next item waits for its token.
    enqueue(
        &mut store.scoped(CoreOp::Enqueue),
        10,
        &[item("a", "a-next", 1)],
    )
    .unwrap();
    assert!(leased_at(&mut store, 999, 5).is_empty());
    assert_eq!(ack_leased(&mut store, 1000, 5), ["a-next"]);
    // Full at 3000 (one token left after 1000 plus two refilled): the due
    // step drops the blank record and its listing.
    run_due(
        &mut store.scoped(CoreOp::RunDue),
        2999,
        16,
        STEPS_FOR_ANY_FIRING,
    )
    .unwrap();
    assert!(store.hget(HashKey::Partitions, b"a").is_some());
    run_due(
        &mut store.scoped(CoreOp::RunDue),
        3000,
        16,
        STEPS_FOR_ANY_FIRING,
    )
    .unwrap();
    assert_eq!(store.hget(HashKey::Partitions, b"a"), None);
    assert_eq!(store.zcard(ZsetKey::Throttled), 0);
    assert_sound(&mut store);
}

#[test]
fn setting_a_default_rate_parks_every_backlog_and_removing_it_lets_them_in() {
    let mut store = MemoryStore::new();
    enqueue_n(&mut store, "a", 1, 5);
    enqueue_n(&mut store, "b", 1, 5);
    apply_policy(&mut store, &[default_rate(1, 1_000_000, 1)]);
    assert!(store.zcard(ZsetKey::Queue) <= 2, "one head per partition");
    assert_eq!(
        served_per_partition(&leased_at(&mut store, 0, 10)),
        BTreeMap::from([("a".into(), 1), ("b".into(), 1)])
    );
    assert!(leased_at(&mut store, 1, 10).is_empty());
    assert_sound(&mut store);
    apply_policy(&mut store, &[PolicyChange::DefaultRate(None)]);
    let rest = leased_at(&mut store, 2, 10);
    assert_eq!(rest.len(), 8);
    assert!(
        rest.windows(2).all(|pair| pair[0][..1] != pair[1][..1]),
        "in turn: {rest:?}"
    );
    assert_eq!(store.zcard(ZsetKey::Throttled), 0);
    assert_sound(&mut store);
}
