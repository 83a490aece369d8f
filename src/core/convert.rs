//! Moving a queue between layouts (`VTRR.CONVERT`): every key's entries
//! copied as they are, then the source cleared. Nothing is interpreted, so
//! leases, tokens, counters, settings and anything another client wrote
//! arrive unchanged.

use super::types::CoreError;
use crate::store::{HashKey, QueueKey, Store, ZsetKey};

/// HSCAN step while copying a hash of the keys layout.
const SCAN_COUNT: usize = 1000;

/// Copies every entry of every key of `from` into `to` (which is empty).
/// O(N) in the queue's entries.
pub fn copy_queue(from: &mut impl Store, to: &mut impl Store) -> Result<(), CoreError> {
    for key in ZsetKey::ALL {
        for (member, score) in from.zrange_upto(key, f64::INFINITY, usize::MAX) {
            to.zadd(key, &member, score);
        }
    }
    for key in HashKey::ALL {
        let mut cursor = 0;
        loop {
            // HSCAN may return a field twice; setting it twice is harmless.
            let (next, page) = from.hscan(key, cursor, SCAN_COUNT)?;
            for (field, value) in page {
                to.hset(key, &field, &value);
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    if let Some(raw) = from.current_virtual_time() {
        to.set_raw_current_virtual_time(&raw);
    }
    Ok(())
}

/// Deletes every key of `store`.
pub fn clear_queue(store: &mut impl Store) {
    for key in QueueKey::ALL {
        store.delete(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::native::encoding::encode_to_vec;
    use crate::store::memory::MemoryStore;

    #[test]
    fn a_copy_holds_every_entry_and_the_raw_virtual_time() {
        let mut from = MemoryStore::new();
        from.zadd(ZsetKey::Queue, b"a", 3.0);
        from.zadd(ZsetKey::Inflight, b"b", 1.7e12);
        from.hset(HashKey::Lease, b"b", b"token");
        from.hset(HashKey::Partitions, b"p", b"record");
        for i in 0..2500u32 {
            from.hset(HashKey::Task, format!("t{i}").as_bytes(), b"payload");
        }
        from.set_raw_current_virtual_time(b"not a number");
        let mut to = MemoryStore::new();
        copy_queue(&mut from, &mut to).unwrap();
        assert_eq!(encode_to_vec(&to), encode_to_vec(&from));
        clear_queue(&mut from);
        assert!(from.is_empty());
    }
}
