//! Moving a queue between layouts (`VTRR.CONVERT`): every key's entries
//! copied as they are, then the source cleared. Nothing is interpreted, so
//! leases, tokens, counters, settings and anything another client wrote
//! arrive unchanged.
//!
//! A queue moves through a [`MemoryStore`] (a native queue's value): the
//! source is read whole into it, its sorted sets built in bulk, then it is
//! written out key by key. A hash of item ids is walked in the order of
//! the sets that name its fields ([`named_by`]): an item's entries were
//! made together, so that order visits a million-entry hash close to the
//! order it lies in memory, about three times faster than a scan's order
//! on a big queue (an item's id enters `queue` as its payload enters
//! `task`). Fields no set names (another client's) are found by a scan;
//! nothing depends on the hint being right but the time taken.

use std::borrow::Cow;

use super::types::CoreError;
use crate::engine::memory::MemoryStore;
use crate::engine::thin::Thin;
use crate::store::{HashKey, QueueKey, Store, ZsetKey};

/// What names the fields of a hash of item ids.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Names {
    /// The members of a sorted set.
    Members(ZsetKey),
    /// Held items (the fields of `held_at`).
    Held,
}

/// The sets whose members are the fields of hash `key`, as a queue keeps
/// them (see `core::check`); none for a hash of partitions or settings,
/// or one sparse over the items (`timeouts`, `nacks`), which a scan reads.
fn named_by(key: HashKey) -> &'static [Names] {
    use Names::{Held, Members};
    match key {
        HashKey::Task => &[Members(ZsetKey::Queue), Held],
        HashKey::Meta => &[
            Members(ZsetKey::Queue),
            Held,
            Members(ZsetKey::Inflight),
            Members(ZsetKey::Delayed),
            Members(ZsetKey::Dead),
        ],
        HashKey::InflightTask | HashKey::Lease => &[Members(ZsetKey::Inflight)],
        HashKey::DelayedTask => &[Members(ZsetKey::Delayed)],
        HashKey::DeadTask | HashKey::DeadReason => &[Members(ZsetKey::Dead)],
        _ => &[],
    }
}

/// Every source of names, in the order the hashes are read by them.
const SOURCES: [Names; 5] = [
    Names::Members(ZsetKey::Queue),
    Names::Held,
    Names::Members(ZsetKey::Inflight),
    Names::Members(ZsetKey::Delayed),
    Names::Members(ZsetKey::Dead),
];

/// Every entry of every key of `from`, as a memory store. O(N) in the
/// queue's entries.
pub fn read_queue(from: &mut impl Store) -> Result<MemoryStore, CoreError> {
    let mut to = MemoryStore::new();
    // The sorted sets as read, kept until the hashes they name are read.
    let mut sets: [Vec<(Thin, f64)>; ZsetKey::ALL.len()] = Default::default();
    for key in ZsetKey::ALL {
        let entries = &mut sets[key.index()];
        entries.reserve(from.zcard(key) as usize);
        from.visit_zset(key, &mut |member, score| {
            entries.push((Thin::new(member), score))
        });
    }
    let mut lengths = [0; HashKey::ALL.len()];
    for key in HashKey::ALL {
        lengths[key.index()] = from.hlen(key);
        to.reserve_hash(key, lengths[key.index()] as usize);
    }
    // `held_at` first: its fields name held items.
    from.visit_hash(HashKey::HeldAt, &mut |field, value| {
        to.hset(HashKey::HeldAt, field, value)
    })?;
    let held: Vec<Box<[u8]>> = to
        .hash_fields(HashKey::HeldAt)
        .into_iter()
        .map(Box::from)
        .collect();
    // Each id once, for every hash it names a field of.
    for names in SOURCES {
        let hashes: Vec<HashKey> = HashKey::ALL
            .into_iter()
            .filter(|&key| lengths[key.index()] > 0 && named_by(key).contains(&names))
            .collect();
        let mut fields: Box<dyn Iterator<Item = &[u8]>> = match names {
            Names::Members(set) => Box::new(sets[set.index()].iter().map(|(m, _)| m.bytes())),
            Names::Held => Box::new(held.iter().map(|f| &f[..])),
        };
        from.visit_values(&hashes, &mut fields, &mut |key, field, value| {
            to.hset(key, field, value)
        });
    }
    // Every field of `from` found (they are distinct, and so are the
    // memory store's), or a scan for the rest: the whole of a hash no set
    // names. A field visited twice is set twice, harmlessly.
    for key in HashKey::ALL {
        if to.hlen(key) < lengths[key.index()] {
            from.visit_hash(key, &mut |field, value| to.hset(key, field, value))?;
        }
    }
    for key in ZsetKey::ALL {
        to.fill_zset(key, std::mem::take(&mut sets[key.index()]));
    }
    if let Some(raw) = from.current_virtual_time() {
        to.set_raw_current_virtual_time(&raw);
    }
    Ok(to)
}

/// Writes every entry of `queue` into `to` (which is empty): sorted sets
/// in their order, a hash's fields in the order of the sets that name them
/// and the rest sorted, so the keys written are the same on every server
/// that runs the move (a replica, an AOF reload).
pub fn write_queue(queue: &MemoryStore, to: &mut impl Store) {
    for key in ZsetKey::ALL {
        for (member, score) in queue.zset_iter(key) {
            to.zadd(key, member, score);
        }
    }
    let mut held = queue.hash_fields(HashKey::HeldAt);
    held.sort_unstable();
    for key in HashKey::ALL {
        let len = queue.hash_len(key);
        if len == 0 {
            continue;
        }
        let named = named_by(key);
        let mut written = 0;
        for (i, names) in named.iter().enumerate() {
            let fields: Box<dyn Iterator<Item = &[u8]>> = match *names {
                Names::Members(set) => Box::new(queue.zset_iter(set).map(|(m, _)| m)),
                Names::Held => Box::new(held.iter().copied()),
            };
            for field in fields {
                // A field an earlier set named (two states at once: a
                // broken queue) is written once.
                if named[..i].iter().any(|n| names_field(queue, *n, field)) {
                    continue;
                }
                if let Some(value) = queue.hash_value(key, field) {
                    to.hset(key, field, &value);
                    written += 1;
                }
            }
        }
        if written < len {
            let mut rest: Vec<&[u8]> = queue
                .hash_fields(key)
                .into_iter()
                .filter(|&f| !named.iter().any(|n| names_field(queue, *n, f)))
                .collect();
            rest.sort_unstable();
            for field in rest {
                let value = queue.hash_value(key, field).unwrap_or(Cow::Borrowed(&[]));
                to.hset(key, field, &value);
            }
        }
    }
    if let Some(raw) = queue.raw_current_virtual_time() {
        to.set_raw_current_virtual_time(raw);
    }
}

/// Whether `names` names `field` in `queue`.
fn names_field(queue: &MemoryStore, names: Names, field: &[u8]) -> bool {
    match names {
        Names::Members(set) => queue.zset_contains(set, field),
        Names::Held => queue.hash_value(HashKey::HeldAt, field).is_some(),
    }
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

    /// A queue whose hashes hold fields their sets name, fields none
    /// names, an id in two states at once and a held item.
    fn untidy_queue() -> MemoryStore {
        let mut queue = MemoryStore::new();
        queue.zadd(ZsetKey::Queue, b"a", 3.0);
        queue.zadd(ZsetKey::Queue, b"c", 3.0);
        queue.zadd(ZsetKey::Queue, b"b", -1.5);
        queue.zadd(ZsetKey::Inflight, b"b", 1.7e12);
        queue.hset(HashKey::Lease, b"b", b"token");
        queue.hset(HashKey::Lease, b"stray", b"another client's");
        queue.hset(HashKey::HeldAt, b"h", b"7");
        queue.hset(HashKey::Partitions, b"p", b"record");
        for id in [&b"a"[..], b"b", b"c", b"h", b"nobody's"] {
            queue.hset(HashKey::Meta, id, b"1:p");
        }
        for i in 0..2500u32 {
            queue.hset(HashKey::Task, format!("t{i}").as_bytes(), b"payload");
        }
        queue.hset(HashKey::Task, b"a", b"A");
        queue.hset(HashKey::Task, b"h", b"H");
        queue.set_raw_current_virtual_time(b"not a number");
        queue
    }

    #[test]
    fn a_queue_read_and_written_back_holds_every_entry_and_the_raw_virtual_time() {
        let mut from = untidy_queue();
        let moved = read_queue(&mut from).unwrap();
        assert_eq!(encode_to_vec(&moved), encode_to_vec(&from));
        // The same content built in another order: an item may keep room
        // for a score in one and not in the other, nothing more.
        // The items not in `task`: `b`, `c`, `stray` and `nobody's`.
        let items = from.hash_len(HashKey::Task) + 4;
        let room = moved.memory_usage().abs_diff(from.memory_usage());
        assert!(room <= 8 * items, "{room} bytes apart");
        let mut to = MemoryStore::new();
        write_queue(&moved, &mut to);
        assert_eq!(encode_to_vec(&to), encode_to_vec(&from));
        clear_queue(&mut from);
        assert!(from.is_empty());
    }

    /// What `write_queue` writes, in order.
    #[derive(Default)]
    struct Recorder(Vec<String>, MemoryStore);

    impl Recorder {
        fn note(&mut self, what: String) {
            self.0.push(what);
        }
    }

    macro_rules! delegate {
        ($($name:ident(&mut self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?;)*) => {
            $(fn $name(&mut self $(, $arg: $ty)*) $(-> $ret)? { self.1.$name($($arg),*) })*
        };
    }

    impl Store for Recorder {
        fn zadd(&mut self, key: ZsetKey, member: &[u8], score: f64) {
            self.note(format!("zadd {key:?} {}", String::from_utf8_lossy(member)));
            self.1.zadd(key, member, score)
        }
        fn hset(&mut self, key: HashKey, field: &[u8], value: &[u8]) {
            self.note(format!("hset {key:?} {}", String::from_utf8_lossy(field)));
            self.1.hset(key, field, value)
        }
        delegate! {
            zscore(&mut self, key: ZsetKey, member: &[u8]) -> Option<f64>;
            zrem(&mut self, key: ZsetKey, member: &[u8]) -> bool;
            zfirst(&mut self, key: ZsetKey) -> Option<(Vec<u8>, f64)>;
            zrange_upto(&mut self, key: ZsetKey, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)>;
            zrange_above(&mut self, key: ZsetKey, above: f64, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)>;
            zfirst_from(&mut self, key: ZsetKey, from: &[u8]) -> Option<Vec<u8>>;
            zcard(&mut self, key: ZsetKey) -> u64;
            zcount_upto(&mut self, key: ZsetKey, max: f64) -> Result<u64, crate::store::StoreError>;
            zmembers_from(&mut self, key: ZsetKey, offset: usize, limit: usize) -> Result<Vec<Vec<u8>>, crate::store::StoreError>;
            hget(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>>;
            hdel(&mut self, key: HashKey, field: &[u8]);
            hlen(&mut self, key: HashKey) -> u64;
            hfields(&mut self, key: HashKey) -> Result<Vec<Vec<u8>>, crate::store::StoreError>;
            hscan(&mut self, key: HashKey, cursor: u64, count: usize) -> Result<crate::store::HashPage, crate::store::StoreError>;
            delete(&mut self, key: QueueKey);
            current_virtual_time(&mut self) -> Option<Vec<u8>>;
            set_current_virtual_time(&mut self, value: i64);
            set_raw_current_virtual_time(&mut self, value: &[u8]);
        }
    }

    #[test]
    fn hashes_are_written_in_the_order_of_the_sets_naming_them_then_sorted_each_field_once() {
        let queue = untidy_queue();
        let mut to = Recorder::default();
        write_queue(&queue, &mut to);
        let of = |prefix: &str| -> Vec<String> {
            to.0.iter()
                .filter_map(|w| w.strip_prefix(prefix).map(str::to_owned))
                .collect()
        };
        assert_eq!(of("zadd Queue "), ["b", "a", "c"]);
        // Queue's order, then held, then in flight (b once), then the rest.
        assert_eq!(of("hset Meta "), ["b", "a", "c", "h", "nobody's"]);
        assert_eq!(of("hset Lease "), ["b", "stray"]);
        let task = of("hset Task ");
        assert_eq!(task[..3], ["a", "h", "t0"]);
        assert_eq!(task.len(), 2502);
        assert_eq!(encode_to_vec(&to.1), encode_to_vec(&queue));
    }
}
