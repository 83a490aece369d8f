//! `VTRR.INSPECT`: one key of a queue as the keys layout has it, read in
//! either layout, so a native queue can be looked into as `ZRANGE`,
//! `HGETALL` and `GET` look into the keys layout.

use super::types::CoreError;
use crate::store::{HashKey, QueueKey, Store, ZsetKey};

/// HSCAN step while reading a hash.
const SCAN_COUNT: usize = 1000;

/// What one key holds.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyView {
    /// (member, score) in ascending order.
    Zset(Vec<(Vec<u8>, f64)>),
    /// (field, value) sorted by field.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    String(Option<Vec<u8>>),
}

/// The whole of `key` (O(N) in its entries).
pub fn key_view(store: &mut impl Store, key: QueueKey) -> Result<KeyView, CoreError> {
    if let Some(zset) = ZsetKey::of(key) {
        return Ok(KeyView::Zset(store.zrange_upto(
            zset,
            f64::INFINITY,
            usize::MAX,
        )));
    }
    let Some(hash) = HashKey::of(key) else {
        return Ok(KeyView::String(store.current_virtual_time()));
    };
    let mut entries = Vec::new();
    let mut cursor = 0;
    loop {
        let (next, page) = store.hscan(hash, cursor, SCAN_COUNT)?;
        entries.extend(page);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    entries.sort();
    entries.dedup_by(|a, b| a.0 == b.0);
    Ok(KeyView::Hash(entries))
}
