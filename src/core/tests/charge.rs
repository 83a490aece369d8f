//! Fairness by reported cost (`VTRR.ACKCOST`): a partition is charged what
//! its items cost, not what they weighed.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;
use crate::layout::native::encoding::encode_to_vec;
use crate::store::HashKey;

fn enqueue_n(store: &mut MemoryStore, partition: &str, weight: u64, n: usize) {
    let ids: Vec<String> = (0..n).map(|k| format!("{partition}-{k:04}")).collect();
    let items: Vec<_> = ids.iter().map(|id| item(partition, id, weight)).collect();
    enqueue(store, 0, &items).unwrap();
}

fn partition_of(id: &[u8]) -> String {
    let id = String::from_utf8(id.to_vec()).unwrap();
    id.split('-').next().unwrap().to_string()
}

fn ack_cost(store: &mut MemoryStore, leased: &Leased, cost: Option<u64>) -> u64 {
    let finished = Ack {
        id: &leased.id,
        token: &leased.token,
        cost,
        result: None,
    };
    let op = if cost.is_some() {
        CoreOp::AckCost
    } else {
        CoreOp::Ack
    };
    ack(&mut store.scoped(op), &[finished], &mut Vec::new())
}

fn assert_sound(store: &mut MemoryStore) {
    let problems = check::check(&mut store.scoped(CoreOp::Check)).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}

/// Leases one item at a time and acks it with `cost_of` its partition (None:
/// a plain ACK): the partitions served, in order.
fn serve(
    store: &mut MemoryStore,
    rounds: usize,
    cost_of: impl Fn(&str) -> Option<u64>,
) -> Vec<String> {
    let mut served = Vec::new();
    for round in 0..rounds {
        // The default due step: a parking walk takes many calls, and
        // charges come in meanwhile.
        let Some(leased) = lease_at(store, round as i64, 60_000, 1, 16)
            .unwrap()
            .leased
            .pop()
        else {
            break;
        };
        let partition = partition_of(&leased.id);
        assert_eq!(ack_cost(store, &leased, cost_of(&partition)), 1);
        served.push(partition);
    }
    served
}

#[test]
fn a_partition_reporting_ten_times_its_weight_gets_a_tenth_of_the_service() {
    let mut store = MemoryStore::new();
    enqueue_n(&mut store, "heavy", 1, 500);
    enqueue_n(&mut store, "light", 1, 3000);
    let served = serve(&mut store, 2200, |p| {
        Some(if p == "heavy" { 10 } else { 1 })
    });
    assert_sound(&mut store);
    // Heavy's items queued before its first charge are served at their
    // places while its backlog is parked, what they cost owed; then its
    // backlog waits until the service is even. Over the run: ten light
    // jobs for each heavy one.
    let heavy = served.iter().filter(|p| *p == "heavy").count();
    let light = served.len() - heavy;
    assert!(
        (light as f64 / heavy as f64 - 10.0).abs() <= 0.5,
        "light {light}, heavy {heavy}"
    );
    // And in its last thousand turns, evenly too.
    let heavy = served[1200..].iter().filter(|p| *p == "heavy").count();
    assert!((85..=97).contains(&heavy), "heavy {heavy} of the last 1000");
}

#[test]
fn a_refund_serves_a_heavy_declared_partition_as_what_it_reports() {
    let mut store = MemoryStore::new();
    enqueue_n(&mut store, "declared", 10, 300);
    enqueue_n(&mut store, "plain", 1, 300);
    // Every job reports cost 1, whatever it declared.
    let served = serve(&mut store, 400, |_| Some(1));
    assert_sound(&mut store);
    // Weight 10 reported as cost 1: once its backlog is parked (the walk
    // of the first calls, which serve it by its weight), served as often
    // as a weight-1 partition. What it was under-served meanwhile is not
    // given back: a refund stops at the front of the queue.
    let steady = &served[100..];
    let declared = steady.iter().filter(|p| *p == "declared").count();
    assert!(
        (declared as i64 - (steady.len() / 2) as i64).abs() <= 2,
        "{declared} of {}",
        steady.len()
    );
}

#[test]
fn an_ack_reporting_the_weight_writes_what_a_plain_ack_writes() {
    let mut plain = MemoryStore::new();
    enqueue_n(&mut plain, "a", 3, 5);
    enqueue_n(&mut plain, "b", 2, 5);
    let mut costed = plain.clone();
    let weights = |p: &str| if p == "a" { 3 } else { 2 };
    let served = serve(&mut plain, 6, |_| None);
    assert_eq!(serve(&mut costed, 6, |p| Some(weights(p))), served);
    // The content, in the canonical order of the native encoding.
    assert_eq!(encode_to_vec(&plain), encode_to_vec(&costed));
}

#[test]
fn a_charged_partition_keeps_its_items_in_order() {
    let mut store = MemoryStore::new();
    enqueue_n(&mut store, "x", 1, 50);
    enqueue_n(&mut store, "y", 2, 50);
    let mut seen: HashMap<String, Vec<String>> = HashMap::new();
    for round in 0..100 {
        let Some(leased) = lease_at(&mut store, round, 60_000, 1, 1000)
            .unwrap()
            .leased
            .pop()
        else {
            break;
        };
        let partition = partition_of(&leased.id);
        let cost = 1 + (round as u64 * 7) % 13;
        assert_eq!(ack_cost(&mut store, &leased, Some(cost)), 1);
        seen.entry(partition)
            .or_default()
            .push(String::from_utf8(leased.id).unwrap());
    }
    assert_sound(&mut store);
    for ids in seen.values() {
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, &sorted);
    }
}

#[test]
fn a_refund_brings_a_partition_to_the_front_and_no_further() {
    let mut store = MemoryStore::new();
    enqueue_n(&mut store, "big", 1000, 2);
    enqueue_n(&mut store, "small", 1, 3000);
    // Big's first item is served first (both start at the current time).
    let first = lease_at(&mut store, 0, 60_000, 1, 1000)
        .unwrap()
        .leased
        .pop()
        .unwrap();
    assert_eq!(partition_of(&first.id), "big");
    // Its second item waits a thousand turns; reported as cost 1, big is
    // refunded 999 turns: its next item comes at the current virtual time
    // + 1, after small's item still at the current one and before the
    // rest of small's queue. (A due step that reaches it: the parking walk
    // before the move.)
    assert_eq!(ack_cost(&mut store, &first, Some(1)), 1);
    let current = read_current_virtual_time(&mut store).unwrap();
    let next = ids_of(&lease_at(&mut store, 1, 60_000, 3, 5000).unwrap().leased);
    assert_eq!(next, ["small-0000", "big-0001", "small-0001"]);
    assert!(read_current_virtual_time(&mut store).unwrap() >= current);
    assert_sound(&mut store);
}

#[test]
fn a_partition_with_nothing_queued_is_charged_on_its_next_items() {
    let mut store = MemoryStore::new();
    enqueue_n(&mut store, "once", 1, 1);
    enqueue_n(&mut store, "steady", 1, 100);
    let leased = lease_at(&mut store, 0, 60_000, 2, 1000).unwrap().leased;
    let once = leased
        .iter()
        .find(|l| partition_of(&l.id) == "once")
        .unwrap();
    assert_eq!(ack_cost(&mut store, once, Some(21)), 1);
    // Its next item, queued while it is still ahead, comes 21 turns later
    // rather than one.
    enqueue_n(&mut store, "once", 1, 1);
    let served = serve(&mut store, 30, |_| None);
    let at = served.iter().position(|p| p == "once").unwrap();
    assert!((18..=22).contains(&at), "served at {at}: {served:?}");
}

/// Reports `reports` by RENEW ... COST on `leased`, then finishes it with
/// ACKCOST `last`.
fn report_and_ack(store: &mut MemoryStore, leased: &Leased, reports: &[u64], last: u64) {
    for &cost in reports {
        let report = Ack {
            id: &leased.id,
            token: &leased.token,
            cost: Some(cost),
            result: None,
        };
        assert!(renew(
            &mut store.scoped(CoreOp::RenewCost),
            &report,
            10,
            60_000,
            &mut Vec::new()
        ));
    }
    assert_eq!(ack_cost(store, leased, Some(last)), 1);
}

#[test]
fn a_job_reporting_as_it_goes_is_charged_its_whole_cost_however_it_reports() {
    // One store hears 12 at the end; the other 5 and 4 on renewals, then 3.
    let mut at_once = MemoryStore::new();
    let mut as_it_goes = MemoryStore::new();
    for store in [&mut at_once, &mut as_it_goes] {
        apply_limit(store, "a", LimitChange::Share(2));
        enqueue_n(store, "a", 2, 6);
        enqueue_n(store, "b", 1, 6);
    }
    let first = lease_at(&mut at_once, 1, 60_000, 1, 16).unwrap().leased;
    let same = lease_at(&mut as_it_goes, 1, 60_000, 1, 16).unwrap().leased;
    assert_eq!(first[0].id, same[0].id);
    report_and_ack(&mut at_once, &first[0], &[], 12);
    report_and_ack(&mut as_it_goes, &same[0], &[5, 4], 3);
    assert_eq!(
        at_once.hash_entries(HashKey::Partitions),
        as_it_goes.hash_entries(HashKey::Partitions)
    );
    let order = |store: &mut MemoryStore| lease_ids(store, 20, 12);
    assert_eq!(order(&mut at_once), order(&mut as_it_goes));
    assert_sound(&mut as_it_goes);
}

#[test]
fn a_renewal_report_is_charged_at_once_and_stays_when_the_lease_expires() {
    let mut store = MemoryStore::new();
    apply_policy(&mut store, &[PolicyChange::DefaultConcurrency(Some(100))]);
    enqueue_n(&mut store, "a", 1, 5);
    enqueue_n(&mut store, "b", 1, 5);
    let leased = lease_at(&mut store, 0, 50, 1, 16).unwrap().leased;
    assert_eq!(leased[0].id, b"a-0000");
    let report = Ack {
        id: &leased[0].id,
        token: &leased[0].token,
        cost: Some(3),
        result: None,
    };
    assert!(renew(
        &mut store.scoped(CoreOp::RenewCost),
        &report,
        10,
        50,
        &mut Vec::new()
    ));
    // a's next items moved 3 turns back before the job ended...
    assert_eq!(
        lease_ids(&mut store, 20, 4),
        ["b-0000", "b-0001", "b-0002", "b-0003"]
    );
    // ...and its expired lease keeps that charge (its item requeued behind
    // a's backlog, as any reclaim): a's next is where the charge put it,
    // level with b's last.
    let served = lease_ids(&mut store, 100, 3);
    assert_eq!(served, ["a-0001", "b-0004", "a-0002"]);
    assert_sound(&mut store);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The bound of cost-aware fairness: while every partition is
    /// backlogged, the cost each was served (reported, divided by its
    /// share) stays within the costs in flight of any other's, plus an
    /// item's on each side, however the costs differ from the weights.
    /// Every partition is under control from the start (a default cap that
    /// never binds), so a charge moves its backlog at once: no parking
    /// walk defers it (that transient is the test above).
    #[test]
    fn service_by_reported_cost_stays_within_the_cost_in_flight(
        partitions in proptest::collection::vec((1u64..=3, 1u64..=3, 1u64..=6), 2..=4),
        in_flight in 1usize..=3,
        jitter in proptest::collection::vec(0u64..=4, 64),
    ) {
        let mut store = MemoryStore::new();
        apply_policy(&mut store, &[PolicyChange::DefaultConcurrency(Some(1000))]);
        let backlog = 150;
        for (p, &(weight, share, _)) in partitions.iter().enumerate() {
            let name = format!("p{p}");
            apply_limit(&mut store, &name, LimitChange::Share(share));
            enqueue_n(&mut store, &name, weight, backlog);
        }
        let max_cost = partitions.iter().map(|&(w, _, m)| w * m + 4).max().unwrap() as f64;
        let mut cost_served = vec![0.0f64; partitions.len()];
        let mut served = vec![0usize; partitions.len()];
        for round in 0..400i64 {
            let leased = lease_at(&mut store, round, 60_000, in_flight, 16).unwrap().leased;
            for (n, lease) in leased.iter().enumerate() {
                let p: usize = partition_of(&lease.id)[1..].parse().unwrap();
                let (weight, share, times) = partitions[p];
                let cost = weight * times + jitter[(round as usize + n) % jitter.len()];
                prop_assert_eq!(ack_cost(&mut store, lease, Some(cost)), 1);
                cost_served[p] += cost as f64 / share as f64;
                served[p] += 1;
            }
            if served.iter().any(|&n| n + in_flight >= backlog) {
                break;
            }
            let most = cost_served.iter().cloned().fold(f64::MIN, f64::max);
            let least = cost_served.iter().cloned().fold(f64::MAX, f64::min);
            prop_assert!(
                most - least <= (in_flight as f64 + 2.0) * max_cost,
                "round {}: served {:?} (cost / share), items {:?}",
                round, cost_served, served
            );
        }
        assert_sound(&mut store);
    }
}
