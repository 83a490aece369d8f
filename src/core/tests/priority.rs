//! Priority levels: strict between levels, fair between partitions inside
//! one, order kept within a partition and level, in every state and under
//! the tenant controls.

use super::*;
use crate::core::*;
use crate::engine::memory::MemoryStore;
use crate::store::{HashKey, Store, ZsetKey};

fn enqueue_at_level(store: &mut MemoryStore, level: Level, items: &[NewItem<'_>]) {
    enqueue_at(&mut store.scoped(CoreOp::enqueue(level)), 0, level, items).unwrap();
}

fn enqueue_n(store: &mut MemoryStore, level: Level, partition: &str, prefix: &str, n: usize) {
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    let items: Vec<_> = ids.iter().map(|id| item(partition, id, 1)).collect();
    enqueue_at_level(store, level, &items);
}

fn assert_clean(store: &mut MemoryStore) {
    assert_eq!(check::check(store).unwrap(), Vec::<String>::new());
}

fn token_of(store: &mut MemoryStore, id: &str) -> Vec<u8> {
    store.hget(HashKey::Lease, id.as_bytes()).unwrap()
}

#[test]
fn a_higher_level_is_served_first_and_a_lower_one_last() {
    let mut store = MemoryStore::new();
    enqueue_n(&mut store, 0, "big", "b", 1000);
    enqueue_at_level(&mut store, -3, &[item("small", "later", 1)]);
    enqueue_at_level(&mut store, 7, &[item("small", "urgent", 1)]);
    assert_eq!(lease_ids(&mut store, 0, 2), ["urgent", "b0"]);
    let rest = lease_ids(&mut store, 0, 2000);
    assert_eq!(rest.len(), 1000);
    assert_eq!(rest.last().map(String::as_str), Some("later"));
    assert_clean(&mut store);
}

#[test]
fn partitions_take_turns_inside_a_level_whatever_they_queued_below_it() {
    let mut store = MemoryStore::new();
    // A's backlog at level 0 costs it nothing at level 5.
    enqueue_n(&mut store, 0, "A", "a-low", 1000);
    enqueue_n(&mut store, 5, "B", "b", 3);
    enqueue_n(&mut store, 5, "A", "a", 3);
    // Both start at level 5's current time + 1 (a tie goes by id).
    assert_eq!(
        lease_ids(&mut store, 0, 6),
        ["a0", "b0", "a1", "b1", "a2", "b2"]
    );
    assert_eq!(lease_ids(&mut store, 0, 1), ["a-low0"]);
    assert_clean(&mut store);
}

#[test]
fn a_level_keeps_its_own_virtual_time_and_weights() {
    let mut store = MemoryStore::new();
    enqueue_at_level(
        &mut store,
        2,
        &[item("heavy", "h1", 3), item("heavy", "h2", 3)],
    );
    enqueue_n(&mut store, 2, "light", "l", 5);
    enqueue_n(&mut store, 0, "light", "low", 1);
    assert_eq!(
        lease_ids(&mut store, 0, 7),
        ["h1", "l0", "l1", "l2", "h2", "l3", "l4"]
    );
    // The level's current virtual time moved, level 0's did not.
    assert_eq!(store.hget(HashKey::LevelVirtualTime, b"2").unwrap(), b"5");
    assert_eq!(store.current_virtual_time(), None);
}

#[test]
fn an_item_keeps_its_level_through_a_reclaim_a_nack_and_a_delay() {
    let mut store = MemoryStore::new();
    enqueue_n(&mut store, 0, "A", "low", 10);
    enqueue_at_level(&mut store, 9, &[item("B", "urgent", 1)]);
    assert_eq!(lease_ids(&mut store, 0, 1), ["urgent"]);
    // Expired and reclaimed: back at its level, first again.
    reclaim(&mut store.scoped(CoreOp::Reclaim), 5000, 10).unwrap();
    assert_eq!(lease_ids(&mut store, 5000, 1), ["urgent"]);
    // Nacked with a delay: due later, then first again.
    let token = token_of(&mut store, "urgent");
    nack(
        &mut store.scoped(CoreOp::Nack),
        b"urgent",
        &token,
        5000,
        Nack::Delay { ms: 100 },
        None,
        &mut Vec::new(),
    )
    .unwrap();
    assert_eq!(lease_ids(&mut store, 5000, 1), ["low0"]);
    assert_eq!(lease_ids(&mut store, 5100, 1), ["urgent"]);
    let token = token_of(&mut store, "urgent");
    assert_eq!(
        ack(&mut store, &[Ack::pair(b"urgent", &token)], &mut Vec::new()),
        1
    );
    // Finished: nothing of it is left.
    assert_eq!(store.hget(HashKey::Priority, b"urgent"), None);
    assert_clean(&mut store);
}

#[test]
fn a_deferred_item_enters_at_its_level_when_due() {
    let mut store = MemoryStore::new();
    defer_at(
        &mut store.scoped(CoreOp::defer(4)),
        0,
        100,
        4,
        &[item("B", "soon", 1)],
    )
    .unwrap();
    enqueue_n(&mut store, 0, "A", "a", 5);
    assert_eq!(lease_ids(&mut store, 50, 1), ["a0"]);
    assert_eq!(lease_ids(&mut store, 100, 1), ["soon"]);
    assert_clean(&mut store);
}

#[test]
fn a_capped_partition_serves_its_highest_level_first_in_order() {
    let mut store = MemoryStore::new();
    apply_limit(&mut store, "A", LimitChange::Concurrency(Some(1)));
    enqueue_n(&mut store, 0, "A", "low", 2);
    enqueue_n(&mut store, 3, "A", "high", 2);
    let mut served = Vec::new();
    for _ in 0..4 {
        let id = lease_ids(&mut store, 0, 1).pop().unwrap();
        let token = token_of(&mut store, &id);
        ack(
            &mut store,
            &[Ack::pair(id.as_bytes(), &token)],
            &mut Vec::new(),
        );
        served.push(id);
        assert_clean(&mut store);
    }
    // low0 was its head when the high items came: the first of them took
    // its place in queue.
    assert_eq!(served, ["high0", "high1", "low0", "low1"]);
}

#[test]
fn a_resumed_partition_rejoins_each_level_at_that_levels_current_time() {
    let mut store = MemoryStore::new();
    assert!(pause(
        &mut store.scoped(CoreOp::Pause),
        b"A",
        &mut Vec::new()
    ));
    enqueue_n(&mut store, 0, "A", "a-low", 3);
    enqueue_n(&mut store, 6, "A", "a", 3);
    enqueue_n(&mut store, 6, "B", "b", 6);
    enqueue_n(&mut store, 0, "B", "b-low", 3);
    // B alone is served while A waits: level 6 moves on to 3.
    assert_eq!(lease_ids(&mut store, 0, 3), ["b0", "b1", "b2"]);
    assert_clean(&mut store);
    assert!(resume(&mut store.scoped(CoreOp::Resume), b"A", &mut Vec::new()).unwrap());
    assert_clean(&mut store);
    // A's level-6 backlog rejoins at level 6's current time and takes
    // turns with B's; its level-0 backlog at level 0's.
    assert_eq!(
        lease_ids(&mut store, 0, 6),
        ["a0", "b3", "a1", "b4", "a2", "b5"]
    );
    assert_eq!(
        lease_ids(&mut store, 0, 6),
        ["a-low0", "b-low0", "a-low1", "b-low1", "a-low2", "b-low2"]
    );
    assert_clean(&mut store);
}

#[test]
fn cancelling_a_held_prioritised_item_keeps_the_counts() {
    let mut store = MemoryStore::new();
    assert!(pause(
        &mut store.scoped(CoreOp::Pause),
        b"A",
        &mut Vec::new()
    ));
    enqueue_n(&mut store, -2, "A", "a", 3);
    let cancelled = cancel(
        &mut store.scoped(CoreOp::Cancel),
        &[b"a1".as_slice()],
        &mut Vec::new(),
    );
    assert_eq!(cancelled, 1);
    assert_clean(&mut store);
    assert!(resume(&mut store.scoped(CoreOp::Resume), b"A", &mut Vec::new()).unwrap());
    assert_eq!(lease_ids(&mut store, 0, 5), ["a0", "a2"]);
    assert_clean(&mut store);
}

#[test]
fn a_reported_cost_is_charged_at_the_items_level() {
    let mut store = MemoryStore::new();
    enqueue_n(&mut store, 4, "A", "a", 20);
    enqueue_n(&mut store, 4, "B", "b", 20);
    enqueue_n(&mut store, 0, "A", "a-low", 3);
    enqueue_n(&mut store, 0, "C", "c-low", 3);
    let first = lease_ids(&mut store, 0, 1);
    assert_eq!(first, ["a0"]);
    let token = token_of(&mut store, "a0");
    let report = Ack {
        id: b"a0",
        token: &token,
        cost: Some(10),
        result: None,
    };
    ack(
        &mut store.scoped(CoreOp::AckCost),
        &[report],
        &mut Vec::new(),
    );
    // A paid ten turns at level 4: B takes them first.
    let next = lease_ids(&mut store, 0, 10);
    assert_eq!(
        next[..9],
        ["b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8"]
    );
    // Level 0 was not charged: A and C take turns there.
    assert_eq!(lease_ids(&mut store, 0, 29).len(), 29);
    assert_eq!(
        lease_ids(&mut store, 0, 6),
        ["a-low0", "c-low0", "a-low1", "c-low1", "a-low2", "c-low2"]
    );
    assert_clean(&mut store);
}

#[test]
fn the_drain_restarts_every_levels_virtual_time() {
    let mut store = MemoryStore::new();
    enqueue_n(&mut store, 3, "A", "a", 3);
    enqueue_n(&mut store, 0, "A", "low", 1);
    assert_eq!(lease_ids(&mut store, 0, 4).len(), 4);
    assert_eq!(store.hash_entries(HashKey::LevelVirtualTime).len(), 0);
    assert_eq!(store.zcard(ZsetKey::Queue), 0);
    enqueue_n(&mut store, 3, "A", "again", 1);
    assert_eq!(
        store.zset_entries(ZsetKey::Queue),
        [(b"again0".to_vec(), levels::queue_score(3, 1) as f64)]
    );
}

#[test]
fn recount_restores_the_counts_per_level() {
    let mut store = MemoryStore::new();
    apply_limit(&mut store, "A", LimitChange::Concurrency(Some(1)));
    enqueue_n(&mut store, 2, "A", "a", 3);
    enqueue_n(&mut store, 0, "A", "low", 2);
    let good = store.hget(HashKey::Partitions, b"A").unwrap();
    store.hset(HashKey::Partitions, b"A", b"5 0 0 0 0");
    assert!(!check::check(&mut store).unwrap().is_empty());
    recount(&mut store.scoped(CoreOp::Recount), &mut Vec::new()).unwrap();
    assert_clean(&mut store);
    let record =
        crate::core::partitions::Record::parse(&store.hget(HashKey::Partitions, b"A").unwrap())
            .unwrap();
    assert_eq!(record.queued_at(2), 3);
    assert_eq!(record.queued_at(0), 2);
    assert_ne!(good, b"5 0 0 0 0");
}

#[test]
fn a_controlled_partition_follows_its_backlog_only_at_a_level_it_has_items_at() {
    let mut store = MemoryStore::new();
    apply_limit(&mut store, "A", LimitChange::Concurrency(Some(1)));
    enqueue_n(&mut store, 0, "A", "old", 1);
    assert_eq!(lease_ids(&mut store, 0, 1), ["old0"]);
    let token = token_of(&mut store, "old0");
    ack(&mut store, &[Ack::pair(b"old0", &token)], &mut Vec::new());
    enqueue_n(&mut store, 0, "B", "b", 10);
    assert_eq!(lease_ids(&mut store, 0, 5).len(), 5);
    // A has items queued at level 5 only: its level-0 item starts at level
    // 0's current time, not at A's next time there, long behind.
    enqueue_n(&mut store, 5, "A", "high", 1);
    enqueue_n(&mut store, 0, "A", "new", 1);
    assert_eq!(lease_ids(&mut store, 0, 1), ["high0"]);
    let token = token_of(&mut store, "high0");
    ack(&mut store, &[Ack::pair(b"high0", &token)], &mut Vec::new());
    assert_eq!(lease_ids(&mut store, 0, 2), ["b5", "new0"]);
    assert_clean(&mut store);
}

/// Reports `floods` costs of a billion (the largest one call takes) on a
/// lease of `id`.
fn flood(store: &mut MemoryStore, id: &str, floods: usize) {
    let token = token_of(store, id);
    let report = Ack {
        id: id.as_bytes(),
        token: &token,
        cost: Some(1_000_000_000),
        result: None,
    };
    for _ in 0..floods {
        assert!(renew(
            &mut store.scoped(CoreOp::RenewCost),
            &report,
            0,
            60_000,
            &mut Vec::new()
        ));
    }
}

fn level_time(store: &mut MemoryStore, level: Level) -> i64 {
    let field = level.to_string();
    store
        .hget(HashKey::LevelVirtualTime, field.as_bytes())
        .map_or(0, |raw| String::from_utf8(raw).unwrap().parse().unwrap())
}

#[test]
fn a_flood_of_reported_costs_moves_a_partition_at_most_max_lead_ahead() {
    let mut store = MemoryStore::new();
    // A paused tenant's held item: neither a drain nor an empty level
    // restarts level 5 here, so its clock shows where A's lead took it.
    enqueue_n(&mut store, 0, "low", "l", 1);
    assert!(pause(&mut store, b"low", &mut Vec::new()));
    enqueue_n(&mut store, 5, "A", "a", 1);
    assert_eq!(lease_ids(&mut store, 0, 1), ["a0"]);
    // 36,000 billions: 2^45 at once without a bound.
    flood(&mut store, "a0", 36_000);
    enqueue_n(&mut store, 5, "A", "next", 1);
    assert_eq!(lease_ids(&mut store, 0, 1), ["next0"]);
    let clock = level_time(&mut store, 5);
    assert!(clock <= levels::MAX_LEAD + 2, "{clock}");
    // B and C still take turns there.
    enqueue_n(&mut store, 5, "B", "b", 3);
    enqueue_n(&mut store, 5, "C", "c", 3);
    assert_eq!(
        lease_ids(&mut store, 0, 6),
        ["b0", "c0", "b1", "c1", "b2", "c2"]
    );
    assert_clean(&mut store);
}

#[test]
fn a_level_driven_far_along_its_band_starts_again_once_it_empties() {
    let mut store = MemoryStore::new();
    enqueue_n(&mut store, 0, "low", "l", 1);
    // Stretch after stretch, A reports a flood and leases alone at level 5:
    // each time the clock follows A's lead, then the empty level rebases.
    for stretch in 0..40 {
        let id = format!("w{stretch}-");
        enqueue_n(&mut store, 5, "A", &id, 1);
        assert_eq!(lease_ids(&mut store, 0, 1), [format!("{id}0")]);
        flood(&mut store, &format!("{id}0"), 1_100);
        assert!(
            level_time(&mut store, 5) < levels::SPAN - 1,
            "saturated at {stretch}"
        );
    }
    enqueue_n(&mut store, 5, "B", "b", 3);
    enqueue_n(&mut store, 5, "C", "c", 3);
    assert_eq!(
        lease_ids(&mut store, 0, 6),
        ["b0", "c0", "b1", "c1", "b2", "c2"]
    );
}

#[test]
fn check_reports_a_saturated_level_clock() {
    let mut store = MemoryStore::new();
    enqueue_n(&mut store, 5, "A", "a", 2);
    assert_eq!(lease_ids(&mut store, 0, 1), ["a0"]);
    store.hset(
        HashKey::LevelVirtualTime,
        b"5",
        (levels::SPAN - 1).to_string().as_bytes(),
    );
    let problems = check::check(&mut store).unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("priority 5's virtual time is saturated"),
        "{problems:?}"
    );
}
