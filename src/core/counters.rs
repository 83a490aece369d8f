//! Per-item counters kept beside the item: `timeouts` (its lease expired)
//! and `nacks` (its worker gave it back). Both are cleared on ack.

use super::numbers::{int_field, parse_decimal};
use super::types::Anomaly;
use crate::store::{HashKey, Store};

/// The counter `key` of `id`: missing is 0; a value that is not a count is
/// read as 0 and reported.
pub fn read(store: &mut impl Store, key: HashKey, id: &[u8], anomalies: &mut Vec<Anomaly>) -> i64 {
    match int_field(store, key, id, parse_decimal) {
        None => 0,
        Some(count) => count.filter(|n| *n >= 0).unwrap_or_else(|| {
            anomalies.push(Anomaly::CounterUnreadable {
                counter: name(key),
                id: id.to_vec(),
            });
            0
        }),
    }
}

/// Adds one to the counter `key` of `id`; the new value.
pub fn increment(
    store: &mut impl Store,
    key: HashKey,
    id: &[u8],
    anomalies: &mut Vec<Anomaly>,
) -> i64 {
    let value = read(store, key, id, anomalies).saturating_add(1);
    store.hset_int(key, id, value);
    value
}

fn name(key: HashKey) -> &'static str {
    match key {
        HashKey::Nacks => "nacks",
        _ => "timeouts",
    }
}
