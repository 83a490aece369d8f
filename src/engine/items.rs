//! Everything a queue keeps by item id, as one table of items: the
//! per-item hashes (`task`, `meta`, `inflight_task`, `lease`,
//! `delayed_task`, `dead_task`, `dead_reason`, `last_error`) and the scores of the sorted
//! sets of item ids (`queue`, `inflight`, `delayed`, `dead`). An item is one
//! allocation holding its id, its score in each of those sets and its value
//! in each of those hashes; each set's (score, item) [`Order`] points at the
//! item's id. So a queued item costs one allocation, one table slot and one
//! order entry, where separate keys would cost a copy of its id, a map slot
//! and an allocation in each. Each hash is read and written as a hash (an
//! [`ItemHash`] view) and each set as a sorted set ([`ItemOrder`]), so the
//! store answers the keys' commands as before.

use std::borrow::Cow;

use ahash::RandomState;
use hashbrown::HashTable;

use super::defrag::{walk_buckets, Pace, Relocate};
use super::order::{Order, Pointer};
use super::thin::Thin;
use crate::store::{HashKey, HashPage, ZsetKey};

/// The hashes whose fields are item ids, in slot order.
pub const ITEM_HASHES: [HashKey; 8] = [
    HashKey::Task,
    HashKey::Meta,
    HashKey::InflightTask,
    HashKey::Lease,
    HashKey::DelayedTask,
    HashKey::DeadTask,
    HashKey::DeadReason,
    HashKey::LastError,
];

/// The sorted sets whose members are item ids; their scores are slots
/// after the hashes'.
pub const ITEM_ORDERS: [ZsetKey; 4] = [
    ZsetKey::Queue,
    ZsetKey::Inflight,
    ZsetKey::Delayed,
    ZsetKey::Dead,
];

/// Slots of an item: a value per hash, then a score per sorted set.
const SLOTS: usize = ITEM_HASHES.len() + ITEM_ORDERS.len();

/// Where hash `key` is kept among the item hashes, if it is one.
pub fn item_slot(key: HashKey) -> Option<usize> {
    ITEM_HASHES.iter().position(|&k| k == key)
}

/// Which of the item orders sorted set `key` is, if it is one.
pub fn order_slot(key: ZsetKey) -> Option<usize> {
    ITEM_ORDERS.iter().position(|&k| k == key)
}

/// The item slot of order `order`'s score.
fn score_slot(order: usize) -> usize {
    ITEM_HASHES.len() + order
}

/// The order a slot's score belongs to, if it is a score's.
fn order_of(slot: usize) -> Option<usize> {
    slot.checked_sub(ITEM_HASHES.len())
}

/// What an item costs beyond its allocation: its slot in the table (a
/// thin pointer and a control byte, at the table's load). Measured against
/// `used_memory` (tests/native.rs).
pub const ITEM_ENTRY_OVERHEAD: usize = 16;
/// What a score costs beyond its 8 bytes in the item: its entry in the
/// order's B-tree (16 bytes, in nodes about half full under a queue's
/// ascending inserts). Measured against `used_memory` (tests/native.rs).
pub const ORDER_ENTRY_OVERHEAD: usize = 32;

/// Heap bytes a slot costs beyond its bytes in the item.
fn slot_overhead(slot: usize) -> usize {
    if order_of(slot).is_some() {
        ORDER_ENTRY_OVERHEAD
    } else {
        0
    }
}

/// The header: the mask of the slots present (u16), then the id's length
/// (u32): the id's length and bytes from [`ID_AT`] are a thin string, which
/// the orders point at.
const HEADER: usize = 6;
const ID_AT: usize = 2;
/// A value's length before its bytes.
const LEN: usize = 4;
/// A score's bytes (an f64, little-endian; no length before it).
const SCORE: usize = 8;

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

fn score_of(bytes: &[u8]) -> f64 {
    f64::from_le_bytes(bytes.try_into().expect("eight bytes"))
}

/// The length prefix a slot's content has in the item.
fn prefix(slot: usize) -> usize {
    if order_of(slot).is_some() {
        0
    } else {
        LEN
    }
}

/// An item's contents by slot (a score's eight bytes), borrowed.
type Slots<'a> = [Option<&'a [u8]>; SLOTS];

/// One item: `mask, id length, id`, then each present slot's entry in slot
/// order (a value's `length, bytes`; a score's eight bytes), in one
/// exact-size allocation: a [`Thin`] string, so its table slot is 8 bytes.
#[derive(Debug, Clone)]
struct Item(Thin);

impl Item {
    fn raw(&self) -> &[u8] {
        self.0.bytes()
    }

    fn raw_mut(&mut self) -> &mut [u8] {
        self.0.bytes_mut()
    }

    fn mask(&self) -> u16 {
        u16::from_le_bytes([self.raw()[0], self.raw()[1]])
    }

    fn set_mask(&mut self, mask: u16) {
        self.raw_mut()[..ID_AT].copy_from_slice(&mask.to_le_bytes());
    }

    fn has(&self, slot: usize) -> bool {
        self.mask() & (1 << slot) != 0
    }

    fn id(&self) -> &[u8] {
        &self.raw()[HEADER..HEADER + read_len(self.raw(), ID_AT)]
    }

    /// The id as a thin string: what an order's entry points at, taken
    /// from the allocation's own pointer (not through a borrow of its
    /// bytes, which a later write through `raw_mut` would outlive).
    fn id_ptr(&self) -> *const u8 {
        self.0.bytes_ptr().wrapping_add(ID_AT)
    }

    /// The length of the entry of slot `slot` starting at `at`.
    fn entry_len(&self, slot: usize, at: usize) -> usize {
        match order_of(slot) {
            Some(_) => SCORE,
            None => LEN + read_len(self.raw(), at),
        }
    }

    /// The present slots with their contents, in slot order.
    fn contents(&self) -> impl Iterator<Item = (usize, &[u8])> {
        let mask = self.mask();
        let mut at = HEADER + read_len(self.raw(), ID_AT);
        (0..SLOTS)
            .filter(move |slot| mask & (1 << slot) != 0)
            .map(move |slot| {
                let entry = self.entry_len(slot, at);
                let content = &self.raw()[at + prefix(slot)..at + entry];
                at += entry;
                (slot, content)
            })
    }

    fn content(&self, slot: usize) -> Option<&[u8]> {
        if !self.has(slot) {
            return None;
        }
        self.contents().find(|&(s, _)| s == slot).map(|(_, c)| c)
    }

    fn score(&self, order: usize) -> Option<f64> {
        self.content(score_slot(order)).map(score_of)
    }

    /// Its contents by slot.
    fn slots(&self) -> Slots<'_> {
        let mut slots = Slots::default();
        for (slot, content) in self.contents() {
            slots[slot] = Some(content);
        }
        slots
    }

    /// An item of `id` with the contents `slots`, written in place. One
    /// with no score gets room for one: an item out of every order is
    /// about to enter one (`queue` after its values are set, `inflight`
    /// after its lease), which then spares a rebuild.
    fn build(id: &[u8], slots: &Slots<'_>) -> Item {
        let scored = slots[ITEM_HASHES.len()..].iter().any(Option::is_some);
        let room = if scored { 0 } else { SCORE };
        let present = slots
            .iter()
            .enumerate()
            .filter_map(|(slot, c)| Some((slot, (*c)?)));
        let size = HEADER
            + id.len()
            + present
                .clone()
                .map(|(slot, c)| prefix(slot) + c.len())
                .sum::<usize>()
            + room;
        Item(Thin::filled(size, |bytes| {
            let mut mask = 0u16;
            let mut at = HEADER + id.len();
            for (slot, content) in present {
                mask |= 1 << slot;
                if prefix(slot) > 0 {
                    bytes[at..at + LEN].copy_from_slice(&len_bytes(content.len()));
                }
                at += prefix(slot);
                bytes[at..at + content.len()].copy_from_slice(content);
                at += content.len();
            }
            bytes[..ID_AT].copy_from_slice(&mask.to_le_bytes());
            bytes[ID_AT..HEADER].copy_from_slice(&len_bytes(id.len()));
            bytes[HEADER..HEADER + id.len()].copy_from_slice(id);
        }))
    }

    /// This item with the slots `changes` names set to their contents, in
    /// an allocation of its exact size.
    fn with(&self, changes: &Slots<'_>) -> Item {
        let mut slots = self.slots();
        for (slot, change) in slots.iter_mut().zip(changes) {
            if change.is_some() {
                *slot = *change;
            }
        }
        Item::build(self.id(), &slots)
    }

    /// Where slot `slot`'s entry starts (or would), its length if present,
    /// and where the entries end: bytes after that are room left by
    /// earlier changes.
    fn locate(&self, slot: usize) -> (usize, Option<usize>, usize) {
        let mask = self.mask();
        let mut at = HEADER + read_len(self.raw(), ID_AT);
        let (mut start, mut present) = (None, None);
        for s in (0..SLOTS).filter(|s| mask & (1 << s) != 0) {
            if s >= slot && start.is_none() {
                start = Some(at);
            }
            let entry = self.entry_len(s, at);
            if s == slot {
                present = Some(entry);
            }
            at += entry;
        }
        (start.unwrap_or(at), present, at)
    }

    /// Sets slot `slot` to `content` within this allocation; false when it
    /// does not fit (the caller rebuilds the item).
    fn set_in_place(&mut self, slot: usize, content: &[u8]) -> bool {
        let (start, present, end) = self.locate(slot);
        let old = present.unwrap_or(0);
        let new = prefix(slot) + content.len();
        let raw = self.raw_mut();
        if end - old + new > raw.len() {
            return false;
        }
        raw.copy_within(start + old..end, start + new);
        if prefix(slot) > 0 {
            raw[start..start + LEN].copy_from_slice(&len_bytes(content.len()));
        }
        raw[start + prefix(slot)..start + new].copy_from_slice(content);
        self.set_mask(self.mask() | 1 << slot);
        true
    }

    /// Removes slot `slot` within this allocation (the room it leaves
    /// stays, for the next value set): its content if `keep` (else empty),
    /// None when absent.
    fn take_in_place(&mut self, slot: usize, keep: bool) -> Option<Vec<u8>> {
        let (start, present, end) = self.locate(slot);
        let old = present?;
        let content = if keep {
            self.raw()[start + prefix(slot)..start + old].to_vec()
        } else {
            Vec::new()
        };
        self.raw_mut().copy_within(start + old..end, start);
        self.set_mask(self.mask() & !(1 << slot));
        Some(content)
    }

    /// The pointers of the order entries that point at this item, looked
    /// up while it is where they point (to re-point them once it moves).
    fn pointers<'o>(
        &self,
        orders: &'o [Order; ITEM_ORDERS.len()],
    ) -> [Option<Pointer<'o>>; ITEM_ORDERS.len()] {
        std::array::from_fn(|order| {
            let score = self.score(order)?;
            // SAFETY: this item is live for the call.
            unsafe { orders[order].pointer(score, self.id_ptr()) }
        })
    }

    /// Whether every order it has a score in holds its entry (the
    /// invariant; active defrag leaves an item that breaks it where it is).
    fn all_found(&self, pointers: &[Option<Pointer<'_>>; ITEM_ORDERS.len()]) -> bool {
        (0..ITEM_ORDERS.len()).all(|order| self.score(order).is_none() || pointers[order].is_some())
    }

    fn cost(&self) -> usize {
        Thin::heap_of(self.raw().len()) + ITEM_ENTRY_OVERHEAD
    }
}

/// Re-points `pointers` (an item's order entries) at `item`, where that
/// item has moved to.
fn repoint(pointers: [Option<Pointer<'_>>; ITEM_ORDERS.len()], item: &Item) {
    for pointer in pointers.into_iter().flatten() {
        pointer.set(item.id_ptr());
    }
}

/// The items of one queue. The table is hashed by a per-process random
/// hasher (clients choose ids); nothing read from it depends on its order
/// (`sorted` and `fields` sort, the orders are B-trees). Invariant: each
/// order holds exactly one entry per item with that order's score, with
/// that score, pointing at the item's id.
#[derive(Debug, Default)]
pub struct Items {
    table: HashTable<Item>,
    hasher: RandomState,
    /// How many items have each slot: each hash's and set's length.
    counts: [usize; SLOTS],
    orders: [Order; ITEM_ORDERS.len()],
}

// SAFETY: the orders' raw pointers only point into this value's own items
// (plain heap bytes), so moving the whole value to another thread — the
// lazy-free thread drops a queue — moves what they point at with it.
unsafe impl Send for Items {}

impl Clone for Items {
    /// A copy whose orders point at its own items.
    fn clone(&self) -> Self {
        let table = self.table.clone();
        let hasher = self.hasher.clone();
        let find = |id: &[u8]| {
            table
                .find(hasher.hash_one(id), |item| item.id() == id)
                .expect("an ordered item is in the table")
                .id_ptr()
        };
        // SAFETY: each pointer is an item of the copy's table, which the
        // copy owns and re-points as the original does.
        let orders = std::array::from_fn(|order| unsafe {
            Order::collect(
                self.orders[order]
                    .iter()
                    .map(|(id, score)| (score, find(id))),
            )
        });
        Items {
            table,
            hasher,
            counts: self.counts,
            orders,
        }
    }
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

    /// Sets slot `slot` of item `id` to `content`; the heap bytes added
    /// (negative: freed). A score is set as a sorted set's ZADD sets it:
    /// an equal one changes nothing.
    fn set(&mut self, slot: usize, id: &[u8], content: &[u8]) -> isize {
        let hash = self.hasher.hash_one(id);
        let Items {
            table,
            counts,
            orders,
            ..
        } = self;
        let Some(item) = table.find_mut(hash, |item| item.id() == id) else {
            let mut slots = Slots::default();
            slots[slot] = Some(content);
            return self.add(hash, id, &slots);
        };
        let mut added = 0;
        match (item.content(slot), order_of(slot)) {
            (None, _) => {
                counts[slot] += 1;
                added += slot_overhead(slot) as isize;
            }
            (Some(old), Some(order)) => {
                let old = score_of(old);
                if old == score_of(content) {
                    return 0;
                }
                // SAFETY: the item is live; its entry goes back below.
                let removed = unsafe { orders[order].remove(old, item.id_ptr()) };
                debug_assert!(removed, "a score has its entry");
            }
            (Some(_), None) => {}
        }
        if !item.set_in_place(slot, content) {
            let mut change = Slots::default();
            change[slot] = Some(content);
            added += Items::rebuild(item, &change, orders);
        }
        if let Some(order) = order_of(slot) {
            // SAFETY: the item is in the table, which re-points the entry
            // whenever the item moves and removes it before freeing it.
            unsafe { orders[order].insert(score_of(content), item.id_ptr()) };
        }
        added
    }

    /// Sets the values `values` (of hashes, not scores) of item `id`, in
    /// one allocation: a new item is built whole, an item they do not fit
    /// in is rebuilt once. The heap bytes added.
    pub fn set_many(&mut self, id: &[u8], values: &[(usize, &[u8])]) -> isize {
        let hash = self.hasher.hash_one(id);
        let mut slots = Slots::default();
        let Items {
            table,
            counts,
            orders,
            ..
        } = self;
        let Some(item) = table.find_mut(hash, |item| item.id() == id) else {
            for &(slot, value) in values {
                slots[slot] = Some(value);
            }
            return self.add(hash, id, &slots);
        };
        let mut rebuild = false;
        for &(slot, value) in values {
            // A score set here would move without its entry.
            assert!(order_of(slot).is_none(), "a value, not a score");
            counts[slot] += usize::from(!item.has(slot));
            if !item.set_in_place(slot, value) {
                slots[slot] = Some(value);
                rebuild = true;
            }
        }
        if rebuild {
            Items::rebuild(item, &slots, orders)
        } else {
            0
        }
    }

    /// Replaces `item` with itself changed by `changes`, re-pointing its
    /// order entries at the new allocation; the heap bytes added.
    fn rebuild(item: &mut Item, changes: &Slots<'_>, orders: &[Order; ITEM_ORDERS.len()]) -> isize {
        let new = item.with(changes);
        repoint(item.pointers(orders), &new);
        let added = new.cost() as isize - item.cost() as isize;
        *item = new;
        added
    }

    /// Adds item `id`, known to be absent (`hash` is its hash), with the
    /// contents `slots`; the heap bytes added.
    fn add(&mut self, hash: u64, id: &[u8], slots: &Slots<'_>) -> isize {
        let mut added = 0;
        for (slot, content) in slots.iter().enumerate() {
            if content.is_some() {
                self.counts[slot] += 1;
                added += slot_overhead(slot);
            }
        }
        let item = Item::build(id, slots);
        added += item.cost();
        let hasher = &self.hasher;
        let entry = self
            .table
            .insert_unique(hash, item, |item| hasher.hash_one(item.id()));
        let item = entry.get();
        for (order, slot) in (0..ITEM_ORDERS.len()).map(|o| (o, score_slot(o))) {
            if let Some(score) = slots[slot] {
                // SAFETY: as in `set`: the item is in the table.
                unsafe { self.orders[order].insert(score_of(score), item.id_ptr()) };
            }
        }
        added as isize
    }

    /// Removes slot `slot` of item `id`: its content if `keep` (else empty)
    /// and the heap bytes freed, None when it was absent.
    fn take(&mut self, slot: usize, id: &[u8], keep: bool) -> Option<(Vec<u8>, usize)> {
        let hash = self.hasher.hash_one(id);
        let entry = self.table.find_entry(hash, |item| item.id() == id).ok()?;
        let item = entry.get();
        let old = item.content(slot)?;
        if let Some(order) = order_of(slot) {
            // The order's entry first: it points at the item.
            // SAFETY: the item is live until it leaves the table below.
            let removed = unsafe { self.orders[order].remove(score_of(old), item.id_ptr()) };
            debug_assert!(removed, "a score has its entry");
        }
        self.counts[slot] -= 1;
        let freed = slot_overhead(slot);
        if item.mask() == 1 << slot {
            // Its last slot: the item goes.
            let (mut item, _) = entry.remove();
            let freed = freed + item.cost();
            return item
                .take_in_place(slot, keep)
                .map(|content| (content, freed));
        }
        let content = entry.into_mut().take_in_place(slot, keep)?;
        Some((content, freed))
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
        for (order, entries) in self.orders.iter().enumerate() {
            assert_eq!(self.counts[score_slot(order)], entries.len());
        }
        let scores: usize = self.orders.iter().map(Order::len).sum();
        self.table.iter().map(Item::cost).sum::<usize>() + scores * ORDER_ENTRY_OVERHEAD
    }

    /// One step of active defrag from bucket `from`: offers each item's
    /// allocation to `mover` (its bytes, hence its id and hash, unchanged)
    /// and re-points its order entries when it moves.
    pub(super) fn defrag(
        &mut self,
        from: usize,
        pace: &mut Pace<impl FnMut() -> bool>,
        mover: &mut impl Relocate,
    ) -> Option<usize> {
        let orders = &self.orders;
        walk_buckets(&mut self.table, from, pace, |item| {
            let pointers = item.pointers(orders);
            if item.all_found(&pointers) && item.0.relocate(mover) {
                // Nothing read the entries between the move and here.
                repoint(pointers, item);
            }
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
        self.items
            .find(field)?
            .content(self.slot)
            .map(Cow::Borrowed)
    }

    /// Every field with its value, in no order.
    fn entries(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + use<'a> {
        let slot = self.slot;
        self.items
            .table
            .iter()
            .filter_map(move |item| item.content(slot).map(|v| (item.id(), v)))
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

/// One sorted set of item ids: the items' scores in one order, answered
/// as a sorted set (the same operations as [`super::zset::Zset`]'s).
pub struct ItemOrder<R> {
    items: R,
    order: usize,
}

impl<R> ItemOrder<R> {
    /// Order `order` of `items` (`&Items` to read, `&mut Items` to write).
    pub fn of(items: R, order: usize) -> Self {
        ItemOrder { items, order }
    }
}

impl<'a> ItemOrder<&'a Items> {
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.items.find(member)?.score(self.order)
    }

    /// The (score, member) order.
    pub fn order(&self) -> &'a Order {
        &self.items.orders[self.order]
    }

    /// Every member (for deleting the whole set).
    pub fn members(&self) -> Vec<Box<[u8]>> {
        self.order().iter().map(|(id, _)| id.into()).collect()
    }
}

impl ItemOrder<&mut Items> {
    /// Sets `member`'s score; the heap bytes added.
    pub fn insert(self, member: &[u8], score: f64) -> isize {
        self.items
            .set(score_slot(self.order), member, &score.to_le_bytes())
    }

    /// Removes `member`: the heap bytes freed, None when it was not one.
    pub fn remove(self, member: &[u8]) -> Option<usize> {
        self.items
            .take(score_slot(self.order), member, false)
            .map(|(_, freed)| freed)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// An operation on the items: a value set in a hash (with the meta too
    /// when `both`), a score set in a sorted set, or a slot removed (a
    /// take when `keep`).
    #[derive(Debug, Clone)]
    enum Op {
        Set {
            slot: usize,
            id: u8,
            value: Vec<u8>,
            both: bool,
        },
        Score {
            order: usize,
            id: u8,
            score: u8,
        },
        Remove {
            slot: usize,
            id: u8,
            keep: bool,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (
                0..ITEM_HASHES.len(),
                0u8..6,
                prop::collection::vec(any::<u8>(), 0..40),
                any::<bool>()
            )
                .prop_map(|(slot, id, value, both)| Op::Set {
                    slot,
                    id,
                    value,
                    both
                }),
            (0..ITEM_ORDERS.len(), 0u8..6, 0u8..4).prop_map(|(order, id, score)| Op::Score {
                order,
                id,
                score
            }),
            (0..SLOTS, 0u8..6, any::<bool>()).prop_map(|(slot, id, keep)| Op::Remove {
                slot,
                id,
                keep
            }),
        ]
    }

    /// The orders of `items` as (member, score) lists.
    fn orders_of(items: &Items) -> Vec<Vec<(Vec<u8>, f64)>> {
        (0..ITEM_ORDERS.len())
            .map(|order| {
                ItemOrder::of(items, order)
                    .order()
                    .iter()
                    .map(|(m, s)| (m.to_vec(), s))
                    .collect()
            })
            .collect()
    }

    proptest! {
        /// The items answer as eight separate hashes and four separate
        /// sorted sets would (every value and score, each set's order,
        /// when an item goes), their byte count is what they hold, and a
        /// clone stands on its own.
        #[test]
        fn items_answer_as_separate_hashes_and_sets(ops in prop::collection::vec(op(), 1..200)) {
            let mut items = Items::default();
            let mut hashes: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = vec![BTreeMap::new(); ITEM_HASHES.len()];
            let mut sets: Vec<BTreeMap<Vec<u8>, f64>> = vec![BTreeMap::new(); ITEM_ORDERS.len()];
            let mut bytes: isize = 0;
            for op in ops {
                match op {
                    // Two values at once, as an enqueue writes payload and meta.
                    Op::Set { slot, id, value, both: true } => {
                        let id = vec![b'i'; usize::from(id)];
                        let other = (slot + 1) % ITEM_HASHES.len();
                        bytes += items.set_many(&id, &[(slot, &value), (other, b"meta")]);
                        hashes[slot].insert(id.clone(), value);
                        hashes[other].insert(id, b"meta".to_vec());
                    }
                    Op::Set { slot, id, value, both: false } => {
                        let id = vec![b'i'; usize::from(id)];
                        bytes += ItemHash::of(&mut items, slot).set_bytes(&id, &value);
                        hashes[slot].insert(id, value);
                    }
                    Op::Score { order, id, score } => {
                        let id = vec![b'i'; usize::from(id)];
                        let score = f64::from(score);
                        bytes += ItemOrder::of(&mut items, order).insert(&id, score);
                        sets[order].insert(id, score);
                    }
                    Op::Remove { slot, id, keep } => {
                        let id = vec![b'i'; usize::from(id)];
                        if let Some(order) = order_of(slot) {
                            let freed = ItemOrder::of(&mut items, order).remove(&id);
                            bytes -= freed.unwrap_or(0) as isize;
                            prop_assert_eq!(freed.is_some(), sets[order].remove(&id).is_some());
                        } else if keep {
                            let taken = ItemHash::of(&mut items, slot).take_bytes(&id);
                            bytes -= taken.as_ref().map_or(0, |&(_, freed)| freed as isize);
                            prop_assert_eq!(taken.map(|(v, _)| v), hashes[slot].remove(&id));
                        } else {
                            // A removal by HDEL, which drops the value.
                            let freed = ItemHash::of(&mut items, slot).remove(&id);
                            bytes -= freed.unwrap_or(0) as isize;
                            prop_assert_eq!(freed.is_some(), hashes[slot].remove(&id).is_some());
                        }
                    }
                }
                prop_assert_eq!(bytes as usize, items.cost());
            }
            let copy = items.clone();
            let expected_orders: Vec<Vec<(Vec<u8>, f64)>> = sets
                .iter()
                .map(|set| {
                    let mut entries: Vec<(Vec<u8>, f64)> = set.clone().into_iter().collect();
                    entries.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
                    entries
                })
                .collect();
            prop_assert_eq!(orders_of(&items), expected_orders.clone());
            drop(items);
            prop_assert_eq!(orders_of(&copy), expected_orders);
            for (order, set) in sets.iter().enumerate() {
                for (id, score) in set {
                    prop_assert_eq!(ItemOrder::of(&copy, order).score(id), Some(*score));
                }
            }
            for (slot, hash) in hashes.iter().enumerate() {
                let view = ItemHash::of(&copy, slot);
                prop_assert_eq!(view.len(), hash.len());
                let sorted: Vec<(Vec<u8>, Vec<u8>)> =
                    view.sorted().into_iter().map(|(f, v)| (f.to_vec(), v.into_owned())).collect();
                prop_assert_eq!(sorted, hash.clone().into_iter().collect::<Vec<_>>());
                for (id, value) in hash {
                    let got = view.get_bytes(id);
                    prop_assert_eq!(got.as_deref(), Some(&value[..]));
                }
            }
            let ids: std::collections::BTreeSet<&Vec<u8>> =
                hashes.iter().flat_map(BTreeMap::keys).chain(sets.iter().flat_map(BTreeMap::keys)).collect();
            prop_assert_eq!(copy.len(), ids.len());
        }
    }
}
