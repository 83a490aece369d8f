//! One queue's keys as plain collections: the value of a `native`-layout
//! queue (one key of the module's type, see `layout::native`) and the core's
//! test twin. Every operation does what the Redis command on the key it
//! names does, so the core over either store has one semantics.
//!
//! The sorted sets and hashes of item ids are one table of items (each set
//! an order of (score, item), see `items`); another sorted set keeps a
//! member map and a (score, member) order; a hash a field map (and, for
//! the partition records, a fixed-seed hash order: the cursor of `hscan`,
//! which survives changes as HSCAN's does). Maps use a per-process random
//! hasher, since clients choose ids. Nothing a reply or
//! a write depends on is read in map order: `hfields` sorts, the encoding
//! sorts, `hscan` walks the hash order.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::defrag::{move_bytes, DefragCursor, Pace, Relocate};
use super::hash::{heap, Bytes, Hash, Stored, StoredNumber, StoredRecord, TextForm as _};
use super::items::{item_slot, order_slot, ItemHash, ItemOrder, Items};
use super::order::Order;
use super::thin::Thin;
use super::zset::Zset;
use crate::store::record::Record;
use crate::store::{HashKey, HashPage, QueueKey, Store, StoreError, ZsetKey};

/// One queue's keys as plain collections.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    /// Every sorted set whose members are not item ids; the places of the
    /// item orders stay empty.
    zsets: [Zset; ZsetKey::ALL.len()],
    /// The hashes of bytes, in [`BYTES_HASHES`] order (`schedules` in scan
    /// order); the typed ones and the item hashes are below.
    hashes: [Hash<Bytes>; BYTES_HASHES.len()],
    /// The hashes and sorted sets of item ids (`task`, `meta`, `queue`,
    /// ...): one allocation per item.
    items: Items,
    /// `partitions`: the records, typed, in scan order.
    records: Hash<StoredRecord>,
    /// The hashes of integers, in [`NUMBER_HASHES`] order.
    numbers: [Hash<StoredNumber>; NUMBER_HASHES.len()],
    current_virtual_time: Option<Bytes>,
    /// Heap bytes held, kept as entries come and go (MEMORY USAGE).
    bytes: usize,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            zsets: Default::default(),
            // `schedules` is listed by cursor (VTRR.SCHEDULES), in pages.
            hashes: std::array::from_fn(|slot| {
                if BYTES_HASHES[slot] == HashKey::Schedules {
                    Hash::scanned()
                } else {
                    Hash::default()
                }
            }),
            items: Items::default(),
            records: Hash::scanned(),
            numbers: Default::default(),
            current_virtual_time: None,
            bytes: 0,
        }
    }
}

/// The hashes whose values are integers, kept as numbers.
const NUMBER_HASHES: [HashKey; 7] = [
    HashKey::PartitionVirtualTime,
    HashKey::Priority,
    HashKey::LevelVirtualTime,
    HashKey::Timeouts,
    HashKey::Nacks,
    HashKey::HeldAt,
    HashKey::Totals,
];

/// The hashes kept as bytes: every hash but the records, the integers and
/// the item hashes. A place per hash here would cost a queue's value 96
/// bytes each, empty.
const BYTES_HASHES: [HashKey; 3] = [HashKey::Policy, HashKey::Schedules, HashKey::Results];

/// Where hash `key` is kept among the hashes of bytes.
fn bytes_slot(key: HashKey) -> usize {
    BYTES_HASHES
        .iter()
        .position(|&k| k == key)
        .expect("a hash is kept as records, integers, items or bytes")
}

/// Where hash `key` is kept among the integer hashes, if it is one.
fn number_slot(key: HashKey) -> Option<usize> {
    NUMBER_HASHES.iter().position(|&k| k == key)
}

/// Runs `$body` on hash `$key` of `$store` as `$hash`, whichever its value
/// type (records, integers, item values or bytes); `$borrow` is `&` to
/// read, `&mut` to write.
macro_rules! on_hash {
    ($store:expr, $key:expr, |$hash:ident| $body:expr) => {
        on_hash!(@ (&mut) $store, $key, |$hash| $body)
    };
    (@ ($($borrow:tt)+) $store:expr, $key:expr, |$hash:ident| $body:expr) => {
        match $key {
            HashKey::Partitions => {
                let $hash = $($borrow)+ $store.records;
                $body
            }
            key => match (number_slot(key), item_slot(key)) {
                (Some(slot), _) => {
                    let $hash = $($borrow)+ $store.numbers[slot];
                    $body
                }
                (None, Some(slot)) => {
                    let $hash = ItemHash::of($($borrow)+ $store.items, slot);
                    $body
                }
                (None, None) => {
                    let $hash = $($borrow)+ $store.hashes[bytes_slot(key)];
                    $body
                }
            },
        }
    };
}

/// As [`on_hash`], reading.
macro_rules! on_hash_ref {
    ($store:expr, $key:expr, |$hash:ident| $body:expr) => {
        on_hash!(@ (&) $store, $key, |$hash| $body)
    };
}

/// Runs `$body` on sorted set `$key` of `$store` as `$zset`, an item order
/// or a set of its own; `$borrow` is `&` to read, `&mut` to write.
macro_rules! on_zset {
    ($store:expr, $key:expr, |$zset:ident| $body:expr) => {
        on_zset!(@ (&mut) $store, $key, |$zset| $body)
    };
    (@ ($($borrow:tt)+) $store:expr, $key:expr, |$zset:ident| $body:expr) => {
        match order_slot($key) {
            Some(order) => {
                let $zset = ItemOrder::of($($borrow)+ $store.items, order);
                $body
            }
            None => {
                let $zset = $($borrow)+ $store.zsets[$key.index()];
                $body
            }
        }
    };
}

/// As [`on_zset`], reading.
macro_rules! on_zset_ref {
    ($store:expr, $key:expr, |$zset:ident| $body:expr) => {
        on_zset!(@ (&) $store, $key, |$zset| $body)
    };
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// All members of a sorted set in (score, member) order.
    pub fn zset_entries(&self, key: ZsetKey) -> Vec<(Vec<u8>, f64)> {
        self.zset_iter(key).map(|(m, s)| (m.to_vec(), s)).collect()
    }

    /// The members of a sorted set in (score, member) order, borrowed.
    pub fn zset_iter(&self, key: ZsetKey) -> impl Iterator<Item = (&[u8], f64)> {
        self.order(key).iter()
    }

    /// The (score, member) order of sorted set `key`.
    fn order(&self, key: ZsetKey) -> &Order {
        on_zset_ref!(self, key, |zset| zset.order())
    }

    /// All fields of a hash, sorted.
    pub fn hash_entries(&self, key: HashKey) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.hash_sorted(key)
            .into_iter()
            .map(|(f, v)| (f.to_vec(), v.into_owned()))
            .collect()
    }

    /// The fields of a hash sorted by field, with their values as bytes.
    pub fn hash_sorted(&self, key: HashKey) -> Vec<(&[u8], Cow<'_, [u8]>)> {
        on_hash_ref!(self, key, |hash| hash.sorted())
    }

    /// The value of `field` in hash `key`, as bytes, borrowed where it is
    /// kept as bytes.
    pub fn hash_value(&self, key: HashKey, field: &[u8]) -> Option<Cow<'_, [u8]>> {
        on_hash_ref!(self, key, |hash| hash.get_bytes(field))
    }

    /// The number of fields of a hash.
    pub fn hash_len(&self, key: HashKey) -> usize {
        on_hash_ref!(self, key, |hash| hash.len())
    }

    /// Whether `member` is a member of sorted set `key`.
    pub fn zset_contains(&self, key: ZsetKey, member: &[u8]) -> bool {
        on_zset_ref!(self, key, |zset| zset.score(member)).is_some()
    }

    /// The fields of a hash, borrowed, in no order.
    pub fn hash_fields(&self, key: HashKey) -> Vec<&[u8]> {
        on_hash_ref!(self, key, |hash| hash.field_refs().collect())
    }

    /// The raw `current_virtual_time`.
    pub fn raw_current_virtual_time(&self) -> Option<&[u8]> {
        self.current_virtual_time.as_deref()
    }

    /// HGET and HDEL at once, the value moved out; whether it was there is
    /// whether there is one.
    pub fn htake_existing(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>> {
        let (value, freed) = on_hash!(self, key, |hash| hash.take_bytes(field))?;
        self.bytes -= freed;
        Some(value)
    }

    /// HDEL that says whether the field was there.
    pub fn hdel_existing(&mut self, key: HashKey, field: &[u8]) -> bool {
        match on_hash!(self, key, |hash| hash.remove(field)) {
            Some(freed) => {
                self.bytes -= freed;
                true
            }
            None => false,
        }
    }

    /// Sets sorted set `key` to `entries` (a sorted set read whole, in
    /// order): an empty set of its own is built in bulk (see
    /// [`Zset::from_entries`]); an item order, or a set that holds members
    /// already, takes them one by one (each an insert at the order's end
    /// when they come in order, into items that kept room for a score).
    pub fn fill_zset(&mut self, key: ZsetKey, entries: Vec<(Thin, f64)>) {
        if order_slot(key).is_some() || !self.zsets[key.index()].is_empty() {
            for (member, score) in entries {
                self.zadd(key, member.bytes(), score);
            }
            return;
        }
        let (zset, added) = Zset::from_entries(entries);
        self.bytes += added;
        self.zsets[key.index()] = zset;
    }

    /// Room for `additional` more fields in hash `key`.
    pub fn reserve_hash(&mut self, key: HashKey, additional: usize) {
        on_hash!(self, key, |hash| hash.reserve(additional));
    }

    fn add_bytes(&mut self, added: isize) {
        self.bytes = self.bytes.wrapping_add_signed(added);
    }

    /// Whether `key` holds anything (EXISTS in the keys layout).
    pub fn holds(&self, key: QueueKey) -> bool {
        if let Some(zset) = ZsetKey::of(key) {
            self.order(zset).len() != 0
        } else if let Some(hash) = HashKey::of(key) {
            !on_hash_ref!(self, hash, |h| h.is_empty())
        } else {
            self.current_virtual_time.is_some()
        }
    }

    /// Entries held, over every sorted set and hash (what freeing costs).
    pub fn entries(&self) -> usize {
        let zsets: usize = ZsetKey::ALL.iter().map(|&key| self.order(key).len()).sum();
        let hashes: usize = self.hashes.iter().map(Hash::len).sum();
        let numbers: usize = self.numbers.iter().map(Hash::len).sum();
        zsets + hashes + self.items.len() + numbers + self.records.len()
    }

    /// Whether it holds nothing at all (its key is then deleted).
    pub fn is_empty(&self) -> bool {
        self.current_virtual_time.is_none() && self.entries() == 0
    }

    /// Heap bytes held (the key's own struct included).
    pub fn memory_usage(&self) -> usize {
        std::mem::size_of::<Self>() + self.bytes
    }

    /// One step of active defrag from `from`: offers the store's heap
    /// allocations to `mover` (see [`super::defrag`]) part by part — the
    /// sorted sets, the hashes, the records, the integers, the items,
    /// `current_virtual_time` — and
    /// asks `should_stop` every few entries. The cursor to resume from
    /// when it said stop, None when the walk is done. A cursor from before
    /// the store changed (or from another store) is still safe to resume
    /// from: entries may be skipped or offered twice, nothing else.
    pub fn defrag(
        &mut self,
        from: DefragCursor,
        should_stop: impl FnMut() -> bool,
        mover: &mut impl Relocate,
    ) -> Option<DefragCursor> {
        const ZSETS: usize = ZsetKey::ALL.len();
        const HASHES: usize = ZSETS + BYTES_HASHES.len();
        const RECORDS: usize = HASHES;
        const NUMBERS: usize = RECORDS + 1 + NUMBER_HASHES.len();
        const ITEMS: usize = NUMBERS;
        let mut pace = Pace::new(should_stop);
        let (mut part, mut bucket) = from.position();
        while part <= ITEMS {
            let stopped = if part < ZSETS {
                self.zsets[part].defrag(bucket, &mut pace, mover)
            } else if part < HASHES {
                self.hashes[part - ZSETS].defrag(bucket, &mut pace, mover)
            } else if part == RECORDS {
                self.records.defrag(bucket, &mut pace, mover)
            } else if part < NUMBERS {
                self.numbers[part - RECORDS - 1].defrag(bucket, &mut pace, mover)
            } else {
                self.items.defrag(bucket, &mut pace, mover)
            };
            if let Some(next) = stopped {
                return Some(DefragCursor::at(part, next));
            }
            part += 1;
            bucket = 0;
        }
        if part == ITEMS + 1 {
            if let Some(value) = self.current_virtual_time.as_mut() {
                move_bytes(value, mover);
            }
        }
        None
    }
}

impl Store for MemoryStore {
    fn zscore(&mut self, key: ZsetKey, member: &[u8]) -> Option<f64> {
        on_zset_ref!(self, key, |zset| zset.score(member))
    }

    fn zadd(&mut self, key: ZsetKey, member: &[u8], score: f64) {
        let added = on_zset!(self, key, |zset| zset.insert(member, score));
        self.add_bytes(added);
    }

    fn zrem(&mut self, key: ZsetKey, member: &[u8]) -> bool {
        let freed = on_zset!(self, key, |zset| zset.remove(member));
        if let Some(freed) = freed {
            self.bytes -= freed;
        }
        freed.is_some()
    }

    fn zfirst(&mut self, key: ZsetKey) -> Option<(Vec<u8>, f64)> {
        let (member, score) = self.order(key).iter().next()?;
        Some((member.to_vec(), score))
    }

    fn zrange_upto(&mut self, key: ZsetKey, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)> {
        self.order(key)
            .iter()
            .take_while(|&(_, s)| s <= max)
            .take(limit)
            .map(|(m, s)| (m.to_vec(), s))
            .collect()
    }

    fn zrange_above(
        &mut self,
        key: ZsetKey,
        above: f64,
        max: f64,
        limit: usize,
    ) -> Vec<(Vec<u8>, f64)> {
        if above == f64::INFINITY {
            return Vec::new();
        }
        // The first entry scored above `above`: the least member of the next
        // score up.
        self.order(key)
            .iter_from(above.next_up(), b"")
            .take_while(|&(_, s)| s <= max)
            .take(limit)
            .map(|(m, s)| (m.to_vec(), s))
            .collect()
    }

    fn zfirst_from(&mut self, key: ZsetKey, from: &[u8]) -> Option<Vec<u8>> {
        let (member, _) = self.order(key).iter_from(0.0, from).next()?;
        Some(member.to_vec())
    }

    fn zcard(&mut self, key: ZsetKey) -> u64 {
        self.order(key).len() as u64
    }

    fn zmembers_from(
        &mut self,
        key: ZsetKey,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        // O(offset + limit): a B-tree has no ranks.
        Ok(self
            .order(key)
            .iter()
            .skip(offset)
            .take(limit)
            .map(|(member, _)| member.to_vec())
            .collect())
    }

    fn zcount_upto(&mut self, key: ZsetKey, max: f64) -> Result<u64, StoreError> {
        // O(count): a B-tree has no ranks (STATS counts expired leases).
        let order = self.order(key);
        Ok(order.iter().take_while(|&(_, s)| s <= max).count() as u64)
    }

    fn hget(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>> {
        on_hash_ref!(self, key, |hash| hash.get_bytes(field).map(Cow::into_owned))
    }

    fn hset(&mut self, key: HashKey, field: &[u8], value: &[u8]) {
        let added = on_hash!(self, key, |hash| hash.set_bytes(field, value));
        self.add_bytes(added);
    }

    fn hdel(&mut self, key: HashKey, field: &[u8]) {
        self.hdel_existing(key, field);
    }

    fn htake(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>> {
        self.htake_existing(key, field)
    }

    fn hlen(&mut self, key: HashKey) -> u64 {
        on_hash_ref!(self, key, |hash| hash.len()) as u64
    }

    fn hfields(&mut self, key: HashKey) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(on_hash_ref!(self, key, |hash| hash.fields()))
    }

    fn hscan(&mut self, key: HashKey, cursor: u64, count: usize) -> Result<HashPage, StoreError> {
        Ok(on_hash_ref!(self, key, |hash| hash.scan(cursor, count)))
    }

    fn set_item(&mut self, id: &[u8], payload: (HashKey, &[u8]), meta: Option<&[u8]>) {
        let (Some(payload_slot), Some(meta_slot)) =
            (item_slot(payload.0), item_slot(HashKey::Meta))
        else {
            unreachable!("{:?} is a hash of item ids", payload.0);
        };
        let both = [
            (payload_slot, payload.1),
            (meta_slot, meta.unwrap_or_default()),
        ];
        let values = if meta.is_some() {
            &both[..]
        } else {
            &both[..1]
        };
        let added = self.items.set_many(id, values);
        self.add_bytes(added);
    }

    fn record(&mut self, partition: &[u8]) -> Option<Result<Record, Vec<u8>>> {
        Some(match self.records.get(partition)? {
            Stored::Typed(record) => Ok(record.clone()),
            Stored::Raw(raw) => Record::parse(raw).ok_or_else(|| raw.to_vec()),
        })
    }

    fn set_record(&mut self, partition: &[u8], record: &Record) {
        if let Some(Stored::Typed(old)) = self.records.get_mut(partition) {
            let before = old.heap();
            old.clone_from(record);
            let after = old.heap();
            self.add_bytes(after as isize - before as isize);
            return;
        }
        let added = self
            .records
            .insert(partition, Stored::Typed(record.clone()));
        self.add_bytes(added);
    }

    fn hget_int(&mut self, key: HashKey, field: &[u8]) -> Option<Result<i64, Vec<u8>>> {
        let Some(slot) = number_slot(key) else {
            let raw = self.hget(key, field)?;
            return Some(crate::store::number::canonical_int(&raw).ok_or(raw));
        };
        Some(match self.numbers[slot].get(field)? {
            Stored::Typed(n) => Ok(*n),
            Stored::Raw(raw) => Err(raw.to_vec()),
        })
    }

    fn hset_int(&mut self, key: HashKey, field: &[u8], value: i64) {
        let Some(slot) = number_slot(key) else {
            return self.hset(key, field, itoa::Buffer::new().format(value).as_bytes());
        };
        if let Some(Stored::Typed(n)) = self.numbers[slot].get_mut(field) {
            *n = value;
            return;
        }
        let added = self.numbers[slot].insert(field, Stored::Typed(value));
        self.add_bytes(added);
    }

    fn delete(&mut self, key: QueueKey) {
        match key {
            QueueKey::CurrentVirtualTime => {
                if let Some(old) = self.current_virtual_time.take() {
                    self.bytes -= heap(old.len());
                }
            }
            _ => {
                if let Some(zset) = ZsetKey::of(key) {
                    let members = on_zset_ref!(self, zset, |z| z.members());
                    for member in members {
                        self.zrem(zset, &member);
                    }
                } else if let Some(hash) = HashKey::of(key) {
                    let fields = on_hash_ref!(self, hash, |h| h.keys());
                    for field in fields {
                        self.hdel(hash, &field);
                    }
                }
            }
        }
    }

    fn current_virtual_time(&mut self) -> Option<Vec<u8>> {
        self.current_virtual_time.as_ref().map(|v| v.to_vec())
    }

    fn set_current_virtual_time(&mut self, value: i64) {
        self.set_raw_current_virtual_time(itoa::Buffer::new().format(value).as_bytes());
    }

    fn set_raw_current_virtual_time(&mut self, value: &[u8]) {
        self.bytes -= self
            .current_virtual_time
            .as_ref()
            .map_or(0, |v| heap(v.len()));
        self.bytes += heap(value.len());
        self.current_virtual_time = Some(value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every hash is kept in exactly one way: records, integers, items or
    /// bytes (a hash in none would panic at its first use).
    #[test]
    fn every_hash_has_one_place() {
        for key in HashKey::ALL {
            let places = [
                key == HashKey::Partitions,
                number_slot(key).is_some(),
                item_slot(key).is_some(),
                BYTES_HASHES.contains(&key),
            ];
            assert_eq!(places.iter().filter(|&&p| p).count(), 1, "{key:?}");
        }
    }

    /// A typed hash reads back every value byte for byte, whatever was
    /// written: what the store keeps typed is only what it can give back
    /// exactly.
    #[test]
    fn typed_hashes_read_back_what_was_written() {
        let mut store = MemoryStore::new();
        let record = Record {
            queued: 2,
            head: Some(b"h".to_vec()),
            ..Record::default()
        };
        for (key, values) in [
            (
                HashKey::Timeouts,
                &[&b"3"[..], b"007", b"+1", b"-2", b"x", b""][..],
            ),
            (
                HashKey::PartitionVirtualTime,
                &[&b"12"[..], b"1e+15", b"7.9"][..],
            ),
            (
                HashKey::Partitions,
                &[&record.format()[..], b"1 2 3", b"03 0 0 0 0"][..],
            ),
        ] {
            for value in values {
                store.hset(key, b"f", value);
                assert_eq!(store.hget(key, b"f").as_deref(), Some(*value), "{key:?}");
                assert_eq!(store.hash_entries(key)[&b"f".to_vec()], value.to_vec());
            }
        }
        assert_eq!(
            store.record(b"f"),
            Some(Ok(Record::parse(b"03 0 0 0 0").unwrap()))
        );
        store.set_record(b"f", &record);
        assert_eq!(store.hget(HashKey::Partitions, b"f"), Some(record.format()));
        assert_eq!(
            store.hget_int(HashKey::Timeouts, b"f"),
            Some(Err(Vec::new()))
        );
        store.hset_int(HashKey::Timeouts, b"f", 41);
        assert_eq!(
            store.hget(HashKey::Timeouts, b"f").as_deref(),
            Some(&b"41"[..])
        );
        assert_eq!(store.hget_int(HashKey::Timeouts, b"f"), Some(Ok(41)));
        assert_eq!(store.hget_int(HashKey::Task, b"none"), None);
    }

    /// MEMORY USAGE's count comes back to nothing once everything is gone.
    #[test]
    fn bytes_held_return_to_zero() {
        let mut store = MemoryStore::new();
        for i in 0..100u64 {
            let id = i.to_string();
            store.hset_int(HashKey::Nacks, id.as_bytes(), i as i64);
            store.hset(HashKey::Nacks, id.as_bytes(), b"x");
            store.hset_int(HashKey::Nacks, id.as_bytes(), 5);
            store.set_record(id.as_bytes(), &Record::default());
            store.hset(HashKey::Partitions, id.as_bytes(), b"garbage");
            store.hset(HashKey::Task, id.as_bytes(), b"payload");
            store.zadd(ZsetKey::Queue, id.as_bytes(), 1.0);
        }
        for key in QueueKey::ALL {
            store.delete(key);
        }
        assert!(store.is_empty());
        assert_eq!(store.memory_usage(), size_of::<MemoryStore>());
    }
}
