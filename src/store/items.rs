//! The per-item hashes of a queue (`task`, `meta`, `inflight_task`, `lease`,
//! `delayed_task`, `dead_task`, `dead_reason`) kept as one table of items:
//! an item is one allocation holding its id and its value in each of those
//! hashes, so a queued item costs one allocation and one table slot for
//! its payload and meta instead of a field and a value in each of two
//! hashes. Each hash is read and written as a hash (an [`ItemHash`] view),
//! so the store answers the hash commands as before.

use std::borrow::Cow;

use ahash::RandomState;
use hashbrown::HashTable;

use super::defrag::{move_bytes, walk_buckets, Pace, Relocate};
use super::hash::heap;
use super::{HashKey, HashPage};

/// The hashes whose fields are item ids, in slot order.
pub const ITEM_HASHES: [HashKey; 7] = [
    HashKey::Task,
    HashKey::Meta,
    HashKey::InflightTask,
    HashKey::Lease,
    HashKey::DelayedTask,
    HashKey::DeadTask,
    HashKey::DeadReason,
];

/// Where hash `key` is kept among the item hashes, if it is one.
pub fn item_slot(key: HashKey) -> Option<usize> {
    ITEM_HASHES.iter().position(|&k| k == key)
}

/// What an item costs beyond its allocation: its slot in the table (a
/// boxed slice and a control byte, at the table's load). Measured against
/// `used_memory` (tests/native.rs).
pub const ITEM_ENTRY_OVERHEAD: usize = 32;

/// The header: the mask of the slots present (one byte), the id's length
/// (u32, little-endian).
const HEADER: usize = 5;
/// A value's length before its bytes.
const LEN: usize = 4;

fn read_len(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(bytes[at..at + LEN].try_into().expect("four bytes")) as usize
}

fn len_bytes(len: usize) -> [u8; LEN] {
    // A Redis string is at most proto-max-bulk-len (512 MB unless raised);
    // one of 4 GiB or more would need it raised past that.
    u32::try_from(len)
        .expect("a value under 4 GiB")
        .to_le_bytes()
}

/// An item's values by slot, borrowed.
type Slots<'a> = [Option<&'a [u8]>; ITEM_HASHES.len()];

/// One item: `mask, id length, id`, then each present slot's `length,
/// bytes` in slot order, in one exact-size allocation.
#[derive(Debug, Clone)]
struct Item(Box<[u8]>);

impl Item {
    fn mask(&self) -> u8 {
        self.0[0]
    }

    fn id(&self) -> &[u8] {
        &self.0[HEADER..HEADER + read_len(&self.0, 1)]
    }

    /// The present slots with their values, in slot order.
    fn values(&self) -> impl Iterator<Item = (usize, &[u8])> {
        let mask = self.mask();
        let mut at = HEADER + read_len(&self.0, 1);
        (0..ITEM_HASHES.len())
            .filter(move |slot| mask & (1 << slot) != 0)
            .map(move |slot| {
                let len = read_len(&self.0, at);
                let value = &self.0[at + LEN..at + LEN + len];
                at += LEN + len;
                (slot, value)
            })
    }

    fn value(&self, slot: usize) -> Option<&[u8]> {
        if self.mask() & (1 << slot) == 0 {
            return None;
        }
        self.values().find(|&(s, _)| s == slot).map(|(_, v)| v)
    }

    /// Its values by slot.
    fn slots(&self) -> Slots<'_> {
        let mut slots = Slots::default();
        for (slot, value) in self.values() {
            slots[slot] = Some(value);
        }
        slots
    }

    /// An item of `id` with the values `slots`.
    fn build(id: &[u8], slots: &Slots<'_>) -> Item {
        let size = HEADER + id.len() + slots.iter().flatten().map(|v| LEN + v.len()).sum::<usize>();
        let mut bytes = Vec::with_capacity(size);
        bytes.push(0);
        bytes.extend_from_slice(&len_bytes(id.len()));
        bytes.extend_from_slice(id);
        let mut mask = 0u8;
        for (slot, value) in slots.iter().enumerate() {
            if let Some(value) = value {
                mask |= 1 << slot;
                bytes.extend_from_slice(&len_bytes(value.len()));
                bytes.extend_from_slice(value);
            }
        }
        bytes[0] = mask;
        Item(bytes.into_boxed_slice())
    }

    /// This item with slot `slot` set to `value`, in an allocation of its
    /// exact size.
    fn with(&self, slot: usize, value: &[u8]) -> Item {
        let mut slots = self.slots();
        slots[slot] = Some(value);
        Item::build(self.id(), &slots)
    }

    /// Where slot `slot`'s entry starts (or would), its length with its
    /// length prefix if present, and where the entries end: bytes after
    /// that are room left by earlier changes.
    fn locate(&self, slot: usize) -> (usize, Option<usize>, usize) {
        let mask = self.mask();
        let mut at = HEADER + read_len(&self.0, 1);
        let (mut start, mut present) = (None, None);
        for s in (0..ITEM_HASHES.len()).filter(|s| mask & (1 << s) != 0) {
            if s >= slot && start.is_none() {
                start = Some(at);
            }
            let entry = LEN + read_len(&self.0, at);
            if s == slot {
                present = Some(entry);
            }
            at += entry;
        }
        (start.unwrap_or(at), present, at)
    }

    /// Sets slot `slot` to `value` within this allocation; false when it
    /// does not fit (the caller rebuilds the item).
    fn set_in_place(&mut self, slot: usize, value: &[u8]) -> bool {
        let (start, present, end) = self.locate(slot);
        let old = present.unwrap_or(0);
        let new = LEN + value.len();
        if end - old + new > self.0.len() {
            return false;
        }
        self.0.copy_within(start + old..end, start + new);
        self.0[start..start + LEN].copy_from_slice(&len_bytes(value.len()));
        self.0[start + LEN..start + new].copy_from_slice(value);
        self.0[0] |= 1 << slot;
        true
    }

    /// Removes slot `slot` within this allocation (the room it leaves
    /// stays, for the next value set): its value if `keep` (else empty),
    /// None when absent.
    fn take_in_place(&mut self, slot: usize, keep: bool) -> Option<Vec<u8>> {
        let (start, present, end) = self.locate(slot);
        let old = present?;
        let value = if keep {
            self.0[start + LEN..start + old].to_vec()
        } else {
            Vec::new()
        };
        self.0.copy_within(start + old..end, start);
        self.0[0] &= !(1 << slot);
        Some(value)
    }

    fn cost(&self) -> usize {
        heap(self.0.len()) + ITEM_ENTRY_OVERHEAD
    }
}

/// The items of one queue. The table is hashed by a per-process random
/// hasher (clients choose ids); nothing read from it depends on its order
/// (`sorted` and `fields` sort).
#[derive(Debug, Clone, Default)]
pub struct Items {
    table: HashTable<Item>,
    hasher: RandomState,
    /// How many items have each slot: each hash's length.
    counts: [usize; ITEM_HASHES.len()],
}

impl Items {
    fn find(&self, id: &[u8]) -> Option<&Item> {
        self.table
            .find(self.hasher.hash_one(id), |item| item.id() == id)
    }

    /// Items held, whatever their slots.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Sets slot `slot` of item `id` to `value`; the heap bytes added
    /// (negative: freed).
    fn set(&mut self, slot: usize, id: &[u8], value: &[u8]) -> isize {
        let hash = self.hasher.hash_one(id);
        if let Some(item) = self.table.find_mut(hash, |item| item.id() == id) {
            if item.value(slot).is_none() {
                self.counts[slot] += 1;
            }
            if item.set_in_place(slot, value) {
                return 0;
            }
            let new = item.with(slot, value);
            let added = new.cost() as isize - item.cost() as isize;
            *item = new;
            return added;
        }
        let mut slots = Slots::default();
        slots[slot] = Some(value);
        self.add(hash, id, &slots)
    }

    /// Sets the slots `values` of item `id` (a new item is built whole, in
    /// one allocation); the heap bytes added.
    pub fn set_many(&mut self, id: &[u8], values: &[(usize, &[u8])]) -> isize {
        let hash = self.hasher.hash_one(id);
        if self.table.find(hash, |item| item.id() == id).is_some() {
            return values
                .iter()
                .map(|&(slot, value)| self.set(slot, id, value))
                .sum();
        }
        let mut slots = Slots::default();
        for &(slot, value) in values {
            slots[slot] = Some(value);
        }
        self.add(hash, id, &slots)
    }

    /// Adds item `id`, known to be absent (`hash` is its hash), with the
    /// values `slots`; the heap bytes added.
    fn add(&mut self, hash: u64, id: &[u8], slots: &Slots<'_>) -> isize {
        for (count, value) in self.counts.iter_mut().zip(slots) {
            *count += usize::from(value.is_some());
        }
        let item = Item::build(id, slots);
        let added = item.cost() as isize;
        let hasher = &self.hasher;
        self.table
            .insert_unique(hash, item, |item| hasher.hash_one(item.id()));
        added
    }

    /// Removes slot `slot` of item `id`: its value if `keep` (else empty)
    /// and the heap bytes freed, None when it was absent.
    fn take(&mut self, slot: usize, id: &[u8], keep: bool) -> Option<(Vec<u8>, usize)> {
        let hash = self.hasher.hash_one(id);
        let entry = self.table.find_entry(hash, |item| item.id() == id).ok()?;
        let mask = entry.get().mask();
        if mask & (1 << slot) == 0 {
            return None;
        }
        self.counts[slot] -= 1;
        if mask == 1 << slot {
            // Its last value: the item goes.
            let (mut item, _) = entry.remove();
            let freed = item.cost();
            return item.take_in_place(slot, keep).map(|value| (value, freed));
        }
        let value = entry.into_mut().take_in_place(slot, keep)?;
        Some((value, 0))
    }

    /// Room for `additional` more items without growing the table.
    pub fn reserve(&mut self, additional: usize) {
        let hasher = &self.hasher;
        self.table
            .reserve(additional, |item| hasher.hash_one(item.id()));
    }

    /// Heap bytes held, counted afresh (the store keeps it as it goes).
    #[cfg(test)]
    fn cost(&self) -> usize {
        self.table.iter().map(Item::cost).sum()
    }

    /// One step of active defrag from bucket `from`: offers each item's
    /// allocation to `mover` (its bytes, hence its id and hash, unchanged).
    pub(super) fn defrag(
        &mut self,
        from: usize,
        pace: &mut Pace<impl FnMut() -> bool>,
        mover: &mut impl Relocate,
    ) -> Option<usize> {
        walk_buckets(&mut self.table, from, pace, |item| {
            move_bytes(&mut item.0, mover);
        })
    }
}

/// One per-item hash: the items' values in one slot, answered as a hash
/// (the same operations as [`super::hash::Hash`]'s).
pub struct ItemHash<R> {
    items: R,
    slot: usize,
}

impl<R> ItemHash<R> {
    /// Hash `slot` of `items` (`&Items` to read, `&mut Items` to write).
    pub fn of(items: R, slot: usize) -> Self {
        ItemHash { items, slot }
    }
}

impl<'a> ItemHash<&'a Items> {
    pub fn len(&self) -> usize {
        self.items.counts[self.slot]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get_bytes(&self, field: &[u8]) -> Option<Cow<'a, [u8]>> {
        self.items.find(field)?.value(self.slot).map(Cow::Borrowed)
    }

    /// Every field with its value, in no order.
    fn entries(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + use<'a> {
        let slot = self.slot;
        self.items
            .table
            .iter()
            .filter_map(move |item| item.value(slot).map(|v| (item.id(), v)))
    }

    /// Every field, borrowed, in no order.
    pub fn field_refs(&self) -> impl Iterator<Item = &'a [u8]> + use<'a> {
        self.entries().map(|(id, _)| id)
    }

    /// Every field, sorted.
    pub fn fields(&self) -> Vec<Vec<u8>> {
        let mut fields: Vec<Vec<u8>> = self.field_refs().map(<[u8]>::to_vec).collect();
        fields.sort_unstable();
        fields
    }

    /// Every field, in no order (to remove them all).
    pub fn keys(&self) -> Vec<Box<[u8]>> {
        self.field_refs().map(Box::from).collect()
    }

    /// Every field with its value, sorted by field.
    pub fn sorted(&self) -> Vec<(&'a [u8], Cow<'a, [u8]>)> {
        let mut entries: Vec<(&'a [u8], Cow<'a, [u8]>)> =
            self.entries().map(|(f, v)| (f, Cow::Borrowed(v))).collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries
    }

    /// HSCAN: these hashes are not kept in scan order, so one step returns
    /// the whole hash.
    pub fn scan(&self, _cursor: u64, _count: usize) -> HashPage {
        let page = self
            .sorted()
            .into_iter()
            .map(|(f, v)| (f.to_vec(), v.into_owned()))
            .collect();
        (0, page)
    }
}

impl ItemHash<&mut Items> {
    // The writes take the view by value: a view is made for one call.

    /// Sets `field` to the bytes `raw`; the heap bytes added.
    pub fn set_bytes(self, field: &[u8], raw: &[u8]) -> isize {
        self.items.set(self.slot, field, raw)
    }

    /// Removes `field`: its value and the heap bytes freed.
    pub fn take_bytes(self, field: &[u8]) -> Option<(Vec<u8>, usize)> {
        self.items.take(self.slot, field, true)
    }

    /// Removes `field`: the heap bytes freed, None when it was absent.
    pub fn remove(self, field: &[u8]) -> Option<usize> {
        self.items
            .take(self.slot, field, false)
            .map(|(_, freed)| freed)
    }

    /// Room for `additional` more fields (items) without growing.
    pub fn reserve(self, additional: usize) {
        self.items.reserve(additional);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The items answer as seven separate hashes would, and their
        /// byte count is what they hold.
        #[test]
        fn items_answer_as_separate_hashes(
            ops in prop::collection::vec(
                (0..ITEM_HASHES.len(), 0u8..6, prop::option::of(prop::collection::vec(any::<u8>(), 0..40))),
                1..200,
            )
        ) {
            let mut items = Items::default();
            let mut hashes: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = vec![BTreeMap::new(); ITEM_HASHES.len()];
            let mut bytes: isize = 0;
            for (slot, id, value) in ops {
                let id = vec![b'i'; usize::from(id)];
                match value {
                    // Two values at once, as an enqueue writes payload and meta.
                    Some(value) if id.len() == 5 => {
                        let other = (slot + 1) % ITEM_HASHES.len();
                        bytes += items.set_many(&id, &[(slot, &value), (other, b"meta")]);
                        hashes[slot].insert(id.clone(), value);
                        hashes[other].insert(id, b"meta".to_vec());
                    }
                    Some(value) => {
                        bytes += ItemHash::of(&mut items, slot).set_bytes(&id, &value);
                        hashes[slot].insert(id, value);
                    }
                    // A removal by HDEL (which drops the value) or by a take.
                    None if id.len() % 2 == 0 => {
                        let freed = ItemHash::of(&mut items, slot).remove(&id);
                        bytes -= freed.unwrap_or(0) as isize;
                        prop_assert_eq!(freed.is_some(), hashes[slot].remove(&id).is_some());
                    }
                    None => {
                        let taken = ItemHash::of(&mut items, slot).take_bytes(&id);
                        bytes -= taken.as_ref().map_or(0, |&(_, freed)| freed as isize);
                        prop_assert_eq!(taken.map(|(v, _)| v), hashes[slot].remove(&id));
                    }
                }
                prop_assert_eq!(bytes as usize, items.cost());
            }
            for (slot, hash) in hashes.iter().enumerate() {
                let view = ItemHash::of(&items, slot);
                prop_assert_eq!(view.len(), hash.len());
                let sorted: Vec<(Vec<u8>, Vec<u8>)> =
                    view.sorted().into_iter().map(|(f, v)| (f.to_vec(), v.into_owned())).collect();
                prop_assert_eq!(sorted, hash.clone().into_iter().collect::<Vec<_>>());
                for (id, value) in hash {
                    let got = view.get_bytes(id);
                    prop_assert_eq!(got.as_deref(), Some(&value[..]));
                }
            }
            let ids: std::collections::BTreeSet<&Vec<u8>> = hashes.iter().flat_map(BTreeMap::keys).collect();
            prop_assert_eq!(items.len(), ids.len());
        }
    }
}
