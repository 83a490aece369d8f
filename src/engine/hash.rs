//! A hash in plain memory (`MemoryStore`'s): fields to values of a type of
//! its own, bytes for most hashes and typed values where the core reads
//! them as such (a partition's record), and optionally the fixed-seed hash
//! order that `HSCAN`'s cursor walks. Every operation says how many heap
//! bytes it added or freed, so the store keeps MEMORY USAGE as it goes.

use std::borrow::Cow;
use std::collections::BTreeSet;

use ahash::RandomState;
use hashbrown::HashTable;

use super::defrag::{move_bytes, move_vec, walk_buckets, Pace, Relocate};
use crate::store::number::canonical_int;
use crate::store::record::{LevelState, Record};
use crate::store::HashPage;

pub type Bytes = Box<[u8]>;

/// Heap bytes of an allocation of `len` bytes, as the allocator rounds it
/// (to 8; jemalloc's small classes are close to that).
pub fn heap(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (len + 7) & !7
    }
}

/// What an entry costs beyond its bytes: a map slot (key and value headers,
/// control byte, load factor) and, for sorted sets, the order's slot in a
/// B-tree node. Measured against `used_memory` (tests/native.rs).
pub const HASH_ENTRY_OVERHEAD: usize = 48;
pub const ZSET_ENTRY_OVERHEAD: usize = 56;
/// A field's entry in a hash's scan order (a B-tree of (hash, field)).
const SCAN_ENTRY_OVERHEAD: usize = 44;

/// A hash's value type: read and written as bytes by the hash commands,
/// whatever it keeps.
pub trait Value: Clone {
    fn from_bytes(raw: &[u8]) -> Self;
    fn bytes(&self) -> Cow<'_, [u8]>;
    /// Its bytes, taken (a value of bytes gives its own buffer).
    fn into_bytes(self) -> Vec<u8> {
        self.bytes().into_owned()
    }
    /// Heap bytes beyond the map slot of a value of [`Bytes`].
    fn cost(&self) -> usize;
    /// Sets it to `raw`, keeping its allocation where it can.
    fn set_bytes(&mut self, raw: &[u8]) {
        *self = Self::from_bytes(raw);
    }
    /// Offers its heap allocations to `mover` (active defrag).
    fn defrag(&mut self, mover: &mut impl Relocate);
}

impl Value for Bytes {
    fn from_bytes(raw: &[u8]) -> Self {
        raw.into()
    }

    fn bytes(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self)
    }

    fn into_bytes(self) -> Vec<u8> {
        self.into_vec()
    }

    fn cost(&self) -> usize {
        heap(self.len())
    }

    fn set_bytes(&mut self, raw: &[u8]) {
        // A value rewritten at its length keeps its buffer.
        if self.len() == raw.len() {
            self.copy_from_slice(raw);
        } else {
            *self = raw.into();
        }
    }

    fn defrag(&mut self, mover: &mut impl Relocate) {
        move_bytes(self, mover);
    }
}

/// A value a memory store keeps typed when the bytes written are its own
/// canonical text (a partition's record, an integer), and as those bytes
/// otherwise (another client's, carried over by a conversion), so it reads
/// back exactly as it was written.
#[derive(Debug, Clone)]
pub enum Stored<T> {
    Typed(T),
    Raw(Bytes),
}

/// A type kept as [`Stored`]: its canonical text both ways, and its heap.
pub trait TextForm: Clone {
    /// The value whose canonical text `raw` is, if it is one.
    fn from_canonical(raw: &[u8]) -> Option<Self>;
    fn text(&self) -> Vec<u8>;
    /// Heap bytes it holds itself.
    fn heap(&self) -> usize;
    /// Offers its heap allocations to `mover` (active defrag).
    fn defrag(&mut self, mover: &mut impl Relocate);
}

pub type StoredRecord = Stored<Record>;
pub type StoredNumber = Stored<i64>;

impl TextForm for Record {
    fn from_canonical(raw: &[u8]) -> Option<Self> {
        Record::parse(raw).filter(|record| record.format() == raw)
    }

    fn text(&self) -> Vec<u8> {
        self.format()
    }

    fn heap(&self) -> usize {
        let levels = self.levels.capacity() * std::mem::size_of::<LevelState>();
        self.head.as_ref().map_or(0, |h| heap(h.len())) + heap(levels)
    }

    fn defrag(&mut self, mover: &mut impl Relocate) {
        if let Some(head) = self.head.as_mut() {
            move_vec(head, mover);
        }
        move_vec(&mut self.levels, mover);
    }
}

impl TextForm for i64 {
    fn from_canonical(raw: &[u8]) -> Option<Self> {
        canonical_int(raw)
    }

    fn text(&self) -> Vec<u8> {
        itoa::Buffer::new().format(*self).as_bytes().to_vec()
    }

    fn heap(&self) -> usize {
        0
    }

    fn defrag(&mut self, _mover: &mut impl Relocate) {}
}

impl<T: TextForm> Value for Stored<T> {
    fn from_bytes(raw: &[u8]) -> Self {
        match T::from_canonical(raw) {
            Some(value) => Stored::Typed(value),
            None => Stored::Raw(raw.into()),
        }
    }

    fn bytes(&self) -> Cow<'_, [u8]> {
        match self {
            Stored::Typed(value) => Cow::Owned(value.text()),
            Stored::Raw(raw) => Cow::Borrowed(raw),
        }
    }

    fn cost(&self) -> usize {
        // The value sits in the map slot, which may be larger than a boxed
        // value's.
        let inline = size_of::<Self>() - size_of::<Bytes>();
        inline
            + match self {
                Stored::Typed(value) => value.heap(),
                Stored::Raw(raw) => heap(raw.len()),
            }
    }

    fn defrag(&mut self, mover: &mut impl Relocate) {
        match self {
            Stored::Typed(value) => value.defrag(mover),
            Stored::Raw(raw) => {
                move_bytes(raw, mover);
            }
        }
    }
}

/// The hash order of `hscan`: fixed seeds, so a cursor means the same
/// after a restart or on a replica. Collisions only share a cursor step.
fn scan_hash(field: &[u8]) -> u64 {
    // The top bit is clear, so `hash + 1` (the next cursor) never wraps to
    // 0, which ends a scan.
    RandomState::with_seeds(0x7674_7272, 1, 2, 3).hash_one(field) >> 1
}

/// One hash. Its table is hashed by a per-process random hasher, since
/// clients choose fields; nothing read from it depends on table order
/// (`fields` and `sorted` sort, `scan` walks the scan order). A table of
/// (field, value) entries rather than a map: the same hashbrown table as
/// std's `HashMap`, whose bucket positions hold still between calls and
/// whose entries lend their fields mutably (both for active defrag).
#[derive(Debug, Clone)]
pub struct Hash<V> {
    fields: HashTable<(Bytes, V)>,
    hasher: RandomState,
    /// (hash of the field, field), for a hash kept in scan order.
    scan_order: Option<BTreeSet<(u64, Bytes)>>,
}

impl<V> Default for Hash<V> {
    fn default() -> Self {
        Hash {
            fields: HashTable::new(),
            hasher: RandomState::new(),
            scan_order: None,
        }
    }
}

impl<V: Value> Hash<V> {
    /// An empty hash that `scan` pages through by cursor.
    pub fn scanned() -> Self {
        Hash {
            scan_order: Some(BTreeSet::new()),
            ..Hash::default()
        }
    }

    /// The table's hash of `field` (the same for its stored copy).
    fn hash_of(&self, field: &[u8]) -> u64 {
        self.hasher.hash_one(field)
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Room for `additional` more fields without growing the map.
    pub fn reserve(&mut self, additional: usize) {
        let hasher = &self.hasher;
        self.fields
            .reserve(additional, |(f, _)| hasher.hash_one(&**f));
    }

    pub fn get(&self, field: &[u8]) -> Option<&V> {
        let hash = self.hash_of(field);
        self.fields
            .find(hash, |(f, _)| **f == *field)
            .map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, field: &[u8]) -> Option<&mut V> {
        let hash = self.hash_of(field);
        self.fields
            .find_mut(hash, |(f, _)| **f == *field)
            .map(|(_, v)| v)
    }

    /// The value of `field` as bytes.
    pub fn get_bytes(&self, field: &[u8]) -> Option<Cow<'_, [u8]>> {
        self.get(field).map(Value::bytes)
    }

    /// Adds `field`, known to be absent, with `value`.
    fn add(&mut self, field: &[u8], value: V) {
        let hash = self.hash_of(field);
        let hasher = &self.hasher;
        self.fields
            .insert_unique(hash, (field.into(), value), |(f, _)| hasher.hash_one(&**f));
    }

    /// Sets `field` to `value`; the heap bytes added (negative: freed).
    pub fn insert(&mut self, field: &[u8], value: V) -> isize {
        let added = value.cost() as isize;
        if let Some(old) = self.get_mut(field) {
            let freed = old.cost() as isize;
            *old = value;
            return added - freed;
        }
        self.add(field, value);
        added + self.new_field(field) as isize
    }

    /// Sets `field` to the bytes `raw`; the heap bytes added.
    pub fn set_bytes(&mut self, field: &[u8], raw: &[u8]) -> isize {
        if let Some(old) = self.get_mut(field) {
            let freed = old.cost() as isize;
            old.set_bytes(raw);
            return old.cost() as isize - freed;
        }
        let value = V::from_bytes(raw);
        let added = value.cost();
        self.add(field, value);
        (added + self.new_field(field)) as isize
    }

    /// The cost of a new field beside its value (its scan order's entry).
    fn new_field(&mut self, field: &[u8]) -> usize {
        let mut cost = heap(field.len()) + HASH_ENTRY_OVERHEAD;
        if let Some(order) = self.scan_order.as_mut() {
            order.insert((scan_hash(field), field.into()));
            cost += heap(field.len()) + SCAN_ENTRY_OVERHEAD;
        }
        cost
    }

    /// Removes `field`: the heap bytes freed, None when it was absent.
    pub fn remove(&mut self, field: &[u8]) -> Option<usize> {
        self.take(field).map(|(_, freed)| freed)
    }

    /// Removes `field`: its value and the heap bytes freed, None when it
    /// was absent.
    pub fn take(&mut self, field: &[u8]) -> Option<(V, usize)> {
        let hash = self.hash_of(field);
        let entry = self.fields.find_entry(hash, |(f, _)| **f == *field).ok()?;
        let ((_, old), _) = entry.remove();
        let mut cost = heap(field.len()) + old.cost() + HASH_ENTRY_OVERHEAD;
        if let Some(order) = self.scan_order.as_mut() {
            order.remove(&(scan_hash(field), field.into()));
            cost += heap(field.len()) + SCAN_ENTRY_OVERHEAD;
        }
        Some((old, cost))
    }

    /// Removes `field`: its value as bytes and the heap bytes freed.
    pub fn take_bytes(&mut self, field: &[u8]) -> Option<(Vec<u8>, usize)> {
        self.take(field)
            .map(|(value, freed)| (value.into_bytes(), freed))
    }

    /// Every field, sorted.
    pub fn fields(&self) -> Vec<Vec<u8>> {
        let mut fields: Vec<Vec<u8>> = self.fields.iter().map(|(f, _)| f.to_vec()).collect();
        fields.sort_unstable();
        fields
    }

    /// Every field with its value as bytes, sorted by field.
    pub fn sorted(&self) -> Vec<(&[u8], Cow<'_, [u8]>)> {
        let mut entries: Vec<(&[u8], Cow<'_, [u8]>)> = self
            .fields
            .iter()
            .map(|(f, v)| (&f[..], v.bytes()))
            .collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries
    }

    /// One step of HSCAN from `cursor`: a hash kept in scan order pages
    /// through it; any other is returned whole, in field order.
    pub fn scan(&self, cursor: u64, count: usize) -> HashPage {
        let Some(order) = self.scan_order.as_ref() else {
            let page = self
                .sorted()
                .into_iter()
                .map(|(f, v)| (f.to_vec(), v.into_owned()))
                .collect();
            return (0, page);
        };
        // The cursor is the hash order's position: every field present for
        // the whole scan is returned, as HSCAN promises. A step ends after a
        // whole run of equal hashes, so none is split between two steps.
        let mut page = Vec::new();
        let mut last = None;
        for (h, field) in order.range((cursor, Bytes::default())..) {
            if page.len() >= count.max(1) && last != Some(*h) {
                return (*h, page);
            }
            last = Some(*h);
            let value = self
                .get(field)
                .map_or_else(Vec::new, |v| v.bytes().into_owned());
            page.push((field.to_vec(), value));
        }
        (0, page)
    }

    /// One step of active defrag from bucket `from` of the table: offers
    /// each field's and value's allocations to `mover` (a field moved is
    /// the same bytes: its hash and place do not change). The scan order's
    /// copies of the fields stay (a B-tree lends none mutably). The bucket
    /// to resume from when `pace` says stop, None at the end.
    pub(super) fn defrag(
        &mut self,
        from: usize,
        pace: &mut Pace<impl FnMut() -> bool>,
        mover: &mut impl Relocate,
    ) -> Option<usize> {
        walk_buckets(&mut self.fields, from, pace, |(field, value)| {
            move_bytes(field, mover);
            value.defrag(mover);
        })
    }

    /// Every field, borrowed, in no order.
    pub fn field_refs(&self) -> impl Iterator<Item = &[u8]> {
        self.fields.iter().map(|(f, _)| &f[..])
    }

    /// Every field, in no order (to remove them all).
    pub fn keys(&self) -> Vec<Bytes> {
        self.fields.iter().map(|(f, _)| f.clone()).collect()
    }
}
