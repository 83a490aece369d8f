//! An item's leased state, written and removed in one place: its expiry in
//! `inflight`, its payload in `inflight_task`, its token in `lease`.

use crate::store::{HashKey, Store, ZsetKey};

pub(super) fn grant(
    store: &mut impl Store,
    id: &[u8],
    payload: &[u8],
    expiry_ms: i64,
    token: &[u8],
) {
    // Values first, then the place: a store that keeps an item's scores in
    // the item (a native queue) grows it once.
    store.hset(HashKey::InflightTask, id, payload);
    store.hset(HashKey::Lease, id, token);
    store.zadd(ZsetKey::Inflight, id, expiry_ms as f64);
}

/// Fenced: true when `token` is the item's current lease token.
pub(super) fn holds(store: &mut impl Store, id: &[u8], token: &[u8]) -> bool {
    store
        .hget(HashKey::Lease, id)
        .is_some_and(|stored| stored == token)
}

/// Ends `id`'s lease; false when it was not in flight.
pub(super) fn end(store: &mut impl Store, id: &[u8]) -> bool {
    let was_in_flight = store.zrem(ZsetKey::Inflight, id);
    store.hdel(HashKey::InflightTask, id);
    store.hdel(HashKey::Lease, id);
    was_in_flight
}

/// Ends `id`'s lease and hands back its payload (None: it has none).
pub(super) fn take(store: &mut impl Store, id: &[u8]) -> Option<Vec<u8>> {
    // `end`'s writes in its order, the payload moved out on the way.
    store.zrem(ZsetKey::Inflight, id);
    let payload = store.htake(HashKey::InflightTask, id);
    store.hdel(HashKey::Lease, id);
    payload
}
