//! Nacks: fenced, counted, and sent where the worker (or the policy) says.

use super::*;
use crate::core::*;
use crate::engine::memory::MemoryStore;
use crate::store::{HashKey, Store, ZsetKey};

/// One item "a" of partition A, leased at 0 for 100 ms: its token.
fn leased_one(store: &mut MemoryStore) -> Vec<u8> {
    enqueue(store, 0, &[item("A", "a", 2)]).unwrap();
    lease_at(store, 0, 100, 1, 0).unwrap().leased[0]
        .token
        .clone()
}

fn nack_now(store: &mut MemoryStore, token: &[u8], how: Nack) -> Option<Nacked> {
    nack(store, b"a", token, 10, how, None, &mut Vec::new()).unwrap()
}

#[test]
fn a_stale_token_changes_nothing() {
    let mut store = MemoryStore::new();
    leased_one(&mut store);
    let before = format!("{store:?}");
    assert_eq!(nack_now(&mut store, b"stale", Nack::Requeue), None);
    assert_eq!(format!("{store:?}"), before);
}

#[test]
fn a_plain_nack_requeues_rescored_and_counts_apart_from_timeouts() {
    let mut store = MemoryStore::new();
    // b keeps the queue from draining, so virtual times carry on.
    enqueue(&mut store, 0, &[item("B", "b", 1)]).unwrap();
    let token = leased_one(&mut store);
    assert_eq!(
        nack_now(&mut store, &token, Nack::Requeue),
        Some(Nacked::Requeued)
    );
    assert_eq!(store.zcard(ZsetKey::Inflight), 0);
    assert_eq!(store.hget(HashKey::Lease, b"a"), None);
    assert_eq!(store.hget(HashKey::Nacks, b"a").unwrap(), b"1");
    assert_eq!(store.hget(HashKey::Timeouts, b"a"), None);
    // A's virtual time had moved to 3; the requeued item starts there.
    assert_eq!(store.zscore(ZsetKey::Queue, b"a"), Some(3.0));
    assert_eq!(store.hget(HashKey::Task, b"a").unwrap(), b"a");
    // The old token no longer acks.
    assert_eq!(
        ack(&mut store, &[Ack::pair(b"a", &token)], &mut Vec::new()),
        0
    );
}

#[test]
fn a_delayed_nack_holds_the_item_until_due() {
    let mut store = MemoryStore::new();
    let token = leased_one(&mut store);
    assert_eq!(
        nack_now(&mut store, &token, Nack::Delay { ms: 500 }),
        Some(Nacked::Delayed { due_ms: 510 })
    );
    assert_eq!(
        store.zset_entries(ZsetKey::Delayed),
        [(b"a".to_vec(), 510.0)]
    );
    assert!(lease_at(&mut store, 509, 100, 1, 10)
        .unwrap()
        .leased
        .is_empty());
    let outcome = lease_at(&mut store, 510, 100, 1, 10).unwrap();
    assert_eq!(outcome.leased[0].id, b"a");
    assert_eq!(outcome.leased[0].payload, b"a");
}

#[test]
fn dead_and_max_nacks_send_the_item_to_the_dead_letter_set() {
    let mut store = MemoryStore::new();
    let token = leased_one(&mut store);
    assert_eq!(
        nack_now(&mut store, &token, Nack::Dead),
        Some(Nacked::Dead(Reason::Nacked))
    );
    assert_eq!(store.zset_entries(ZsetKey::Dead), [(b"a".to_vec(), 10.0)]);
    assert_eq!(store.hget(HashKey::DeadTask, b"a").unwrap(), b"a");
    assert_eq!(store.hget(HashKey::DeadReason, b"a").unwrap(), b"nack");
    assert_eq!(store.hget(HashKey::Meta, b"a").unwrap(), b"2:A");

    let mut store = MemoryStore::new();
    apply_policy(&mut store, &[PolicyChange::MaxNacks(Some(1))]);
    let token = leased_one(&mut store);
    assert_eq!(
        nack_now(&mut store, &token, Nack::Delay { ms: 0 }),
        Some(Nacked::Requeued)
    );
    let token = lease_at(&mut store, 20, 100, 1, 0).unwrap().leased[0]
        .token
        .clone();
    assert_eq!(
        nack_now(&mut store, &token, Nack::Delay { ms: 50 }),
        Some(Nacked::Dead(Reason::MaxNacks))
    );
    assert_eq!(store.hget(HashKey::Nacks, b"a").unwrap(), b"2");
}

#[test]
fn lease_with_counters_reports_nacks() {
    let mut store = MemoryStore::new();
    let token = leased_one(&mut store);
    nack_now(&mut store, &token, Nack::Requeue);
    let request = LeaseRequest {
        now_ms: 20,
        lease_ms: 100,
        count: 1,
        due_limit: 0,
        with_counters: true,
    };
    let leased = lease(&mut store, &request, tokens()).unwrap().leased;
    assert_eq!((leased[0].timeouts, leased[0].nacks), (0, Some(1)));
    let token = leased[0].token.clone();
    assert_eq!(
        ack(&mut store, &[Ack::pair(b"a", &token)], &mut Vec::new()),
        1
    );
    assert_eq!(store.hlen(HashKey::Nacks), 0);
}

#[test]
fn a_nacked_item_without_a_payload_is_reported_dead_whatever_was_asked() {
    for how in [Nack::Requeue, Nack::Delay { ms: 50 }] {
        let mut store = MemoryStore::new();
        let token = leased_one(&mut store);
        store.hdel(HashKey::InflightTask, b"a");
        assert_eq!(
            nack_now(&mut store, &token, how),
            Some(Nacked::Dead(Reason::PayloadMissing)),
            "{how:?}"
        );
        assert!(store.zscore(ZsetKey::Dead, b"a").is_some());
        assert!(store.zset_entries(ZsetKey::Queue).is_empty());
        assert!(store.zset_entries(ZsetKey::Delayed).is_empty());
    }
}

#[test]
fn a_release_requeues_without_counting_a_nack_or_meeting_the_policy() {
    let mut store = MemoryStore::new();
    apply_policy(&mut store, &[PolicyChange::MaxNacks(Some(0))]);
    let token = leased_one(&mut store);
    assert_eq!(
        nack_now(&mut store, &token, Nack::Release),
        Some(Nacked::Requeued)
    );
    assert_eq!(store.hget(HashKey::Nacks, b"a"), None, "no nack counted");
    assert_eq!(store.zcard(ZsetKey::Dead), 0, "MAX-NACKS 0 buried nothing");
    assert!(store.zscore(ZsetKey::Queue, b"a").is_some());
}

/// `nack` of "a" at 10 within NACK's declared keys, with `reason`.
fn nack_saying(store: &mut MemoryStore, token: &[u8], how: Nack, reason: Option<&[u8]>) {
    let scoped = &mut store.scoped(CoreOp::Nack);
    assert!(nack(scoped, b"a", token, 10, how, reason, &mut Vec::new())
        .unwrap()
        .is_some());
}

/// "a" leased again at `now_ms` (it is the only item): its token.
fn lease_again(store: &mut MemoryStore, now_ms: i64) -> Vec<u8> {
    let leased = lease_at(store, now_ms, 100, 1, 10).unwrap().leased;
    assert_eq!(ids_of(&leased), ["a"]);
    leased[0].token.clone()
}

#[test]
fn a_reason_is_the_items_last_error_until_revived() {
    let mut store = MemoryStore::new();
    let token = leased_one(&mut store);
    nack_saying(&mut store, &token, Nack::Requeue, Some(b"boom\n\x00\xff"));
    assert_eq!(
        store.hget(HashKey::LastError, b"a").unwrap(),
        b"boom\n\x00\xff"
    );
    // A nack that says nothing keeps what the last one said; a release too.
    let token = lease_again(&mut store, 20);
    nack_saying(&mut store, &token, Nack::Delay { ms: 5 }, None);
    let token = lease_again(&mut store, 20);
    nack_saying(&mut store, &token, Nack::Release, None);
    assert_eq!(
        store.hget(HashKey::LastError, b"a").unwrap(),
        b"boom\n\x00\xff"
    );
    // The next reason replaces it, and the dead-letter set shows it.
    let token = lease_again(&mut store, 30);
    nack_saying(&mut store, &token, Nack::Dead, Some(b"second"));
    let dead = dead_items(&mut store.scoped(CoreOp::DeadItems), 10);
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].reason.as_slice(), dead[0].last_error.as_deref()),
        (&b"nack"[..], Some(&b"second"[..]))
    );
    assert_eq!(dead[0].nacks, 3);
    // Revived, it starts afresh: counters and last error gone.
    let revived = revive(&mut store.scoped(CoreOp::Revive), &[b"a"]).unwrap();
    assert_eq!(revived.count, 1);
    assert_eq!(store.hget(HashKey::LastError, b"a"), None);
    assert_eq!(check::check(&mut store).unwrap(), Vec::<String>::new());
}

#[test]
fn an_item_without_a_reason_lists_none() {
    let mut store = MemoryStore::new();
    let token = leased_one(&mut store);
    nack_saying(&mut store, &token, Nack::Dead, None);
    let dead = dead_items(&mut store.scoped(CoreOp::DeadItems), 10);
    assert_eq!(dead[0].last_error, None);
    assert_eq!(store.hlen(HashKey::LastError), 0);
}

#[test]
fn the_last_error_leaves_with_the_item() {
    // Acked (ACK, and LEASE ... ACK within its own keys) or cancelled in
    // any state: nothing of it stays behind.
    for how in ["ack", "lease-ack", "cancel-queued", "cancel-dead"] {
        let mut store = MemoryStore::new();
        let token = leased_one(&mut store);
        let dead = if how == "cancel-dead" {
            Nack::Dead
        } else {
            Nack::Requeue
        };
        nack_saying(&mut store, &token, dead, Some(b"boom"));
        let gone = match how {
            "ack" => {
                let token = lease_again(&mut store, 20);
                let acks = [Ack::pair(b"a", &token)];
                ack(&mut store.scoped(CoreOp::Ack), &acks, &mut Vec::new()) == 1
            }
            "lease-ack" => {
                let token = lease_again(&mut store, 20);
                let acks = [Ack::pair(b"a", &token)];
                let scoped = &mut store.scoped(CoreOp::LeaseAcking);
                ack_each(scoped, &acks, 0, &mut Vec::new()).took == [true]
            }
            _ => cancel(&mut store.scoped(CoreOp::Cancel), &[b"a"], &mut Vec::new()) == 1,
        };
        assert!(gone, "{how}");
        assert_eq!(store.hget(HashKey::LastError, b"a"), None, "{how}");
        assert_eq!(check::check(&mut store).unwrap(), Vec::<String>::new());
    }
}
