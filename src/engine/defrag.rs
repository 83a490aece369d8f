//! Active defrag of a memory store, with no server in sight: the walk offers
//! the store's heap allocations one by one to a [`Relocate`] (the server's
//! `RedisModule_DefragAlloc` in a native queue, a plain copy in the tests),
//! in steps that a [`DefragCursor`] resumes.
//!
//! What a step offers: each sorted-set member (its order re-pointed at the
//! new place), each hash field and value, a partition record's raw bytes or
//! head id, and `current_virtual_time`. What it leaves: the allocations the
//! collections make for themselves (hash tables, B-tree nodes, the records'
//! scan order), which no safe interface lets anyone but the collection
//! move (see docs/design.md).

use std::alloc::Layout;
use std::ptr::{self, NonNull};

use hashbrown::HashTable;

/// Moves an allocation to where the allocator would rather have it.
///
/// # Safety
///
/// An implementation that returns `Some(new)` for `(ptr, layout)` has
/// copied the allocation's `layout.size()` bytes to `new`, an allocation of
/// the global allocator that `dealloc(new, layout)` may free, and has freed
/// `ptr`, which the caller never uses again. `None`: nothing happened,
/// `ptr` is as it was. The walk relies on this to rebuild its boxes.
pub unsafe trait Relocate {
    /// Offers the allocation at `ptr`, made by the global allocator for
    /// `layout` (alignment 1: byte strings).
    fn relocate(&mut self, ptr: NonNull<u8>, layout: Layout) -> Option<NonNull<u8>>;
}

/// Where a defrag walk resumes: a part of the store and a bucket in it.
/// Only numbers, no pointer: a resume after the store changed can only
/// skip entries (moved next time) or offer some twice (harmless).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DefragCursor(u64);

/// The part's place in a cursor: above any bucket index a table can have.
const PART_SHIFT: u32 = 48;

impl DefragCursor {
    /// A walk from the beginning.
    pub const START: DefragCursor = DefragCursor(0);

    /// The cursor a server stored (any number: one that names no place in
    /// this store ends the walk).
    pub fn from_raw(raw: u64) -> Self {
        DefragCursor(raw)
    }

    /// The number to store: never 0, which the server reads as "done"
    /// (Redis 7 moves on to the next key) or "from the start".
    pub fn raw(self) -> u64 {
        self.0
    }

    pub(super) fn at(part: usize, bucket: usize) -> Self {
        DefragCursor(((part as u64 + 1) << PART_SHIFT) | bucket as u64)
    }

    /// (part, bucket); the start is part 0, bucket 0.
    pub(super) fn position(self) -> (usize, usize) {
        let part = (self.0 >> PART_SHIFT).saturating_sub(1);
        let bucket = self.0 & ((1 << PART_SHIFT) - 1);
        (
            usize::try_from(part).unwrap_or(usize::MAX),
            usize::try_from(bucket).unwrap_or(usize::MAX),
        )
    }
}

/// How often a walk asks whether to stop: every 64 units of work, an entry
/// costing 4 (every 16 entries) and an empty bucket 1.
pub(super) struct Pace<F> {
    should_stop: F,
    spent: u32,
}

const ENTRY: u32 = 4;
const EMPTY_BUCKET: u32 = 1;

impl<F: FnMut() -> bool> Pace<F> {
    pub(super) fn new(should_stop: F) -> Self {
        Pace {
            should_stop,
            spent: 0,
        }
    }

    /// Counts `units` of work done; true when the walk is to stop now.
    pub(super) fn spend(&mut self, units: u32) -> bool {
        self.spent += units;
        if self.spent < 64 {
            return false;
        }
        self.spent = 0;
        (self.should_stop)()
    }
}

/// One step of a walk over `table` from bucket `from`: hands each entry to
/// `visit` as `pace` allows. The bucket to resume from when it says stop,
/// None at the end.
pub(super) fn walk_buckets<T>(
    table: &mut HashTable<T>,
    from: usize,
    pace: &mut Pace<impl FnMut() -> bool>,
    mut visit: impl FnMut(&mut T),
) -> Option<usize> {
    for bucket in from..table.num_buckets() {
        let Some(entry) = table.get_bucket_mut(bucket) else {
            if pace.spend(EMPTY_BUCKET) {
                return Some(bucket + 1);
            }
            continue;
        };
        visit(entry);
        if pace.spend(ENTRY) {
            return Some(bucket + 1);
        }
    }
    None
}

/// Offers a boxed byte string's allocation; true when it moved (the box
/// then owns the new place). An empty box owns no allocation.
pub(super) fn move_bytes(bytes: &mut Box<[u8]>, mover: &mut impl Relocate) -> bool {
    let len = bytes.len();
    let Ok(layout) = Layout::array::<u8>(len) else {
        return false;
    };
    if len == 0 {
        return false;
    }
    // Out of the box first, so no box ever points at freed bytes.
    let start = NonNull::from(Box::leak(std::mem::take(bytes))).cast::<u8>();
    let moved = mover.relocate(start, layout);
    let at = moved.unwrap_or(start).as_ptr();
    // SAFETY: `at` is either the box's own allocation, untouched, or where
    // `Relocate` (an unsafe trait: see its contract) copied its `len` bytes,
    // an allocation of the global allocator for the same layout; the old
    // one is then freed and forgotten here (no box held it).
    *bytes = unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(at, len)) };
    moved.is_some()
}

/// As [`move_bytes`], for a vector (its whole capacity moves).
pub(super) fn move_vec<T: Copy>(vec: &mut Vec<T>, mover: &mut impl Relocate) -> bool {
    let capacity = vec.capacity();
    let Ok(layout) = Layout::array::<T>(capacity) else {
        return false;
    };
    if capacity == 0 {
        return false;
    }
    let len = vec.len();
    // Leaked (its allocation kept as it is), so no vector ever points at
    // freed bytes.
    let start = NonNull::from(std::mem::take(vec).leak()).cast::<u8>();
    let moved = mover.relocate(start, layout);
    let at = moved.unwrap_or(start).cast::<T>().as_ptr();
    // SAFETY: as in `move_bytes`: `at` holds the vector's `len` initialised
    // bytes in an allocation for `capacity` bytes of the global allocator;
    // the old vector was leaked, never dropped.
    *vec = unsafe { Vec::from_raw_parts(at, len, capacity) };
    moved.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::items::{item_slot, order_slot};
    use crate::engine::memory::MemoryStore;
    use crate::store::{HashKey, LevelState, Record, Store, ZsetKey};
    use proptest::prelude::*;

    /// A [`Relocate`] that really moves what it is offered (every `every`th
    /// allocation) and poisons the old place before freeing it, so a stale
    /// pointer reads garbage rather than the old bytes.
    struct Copier {
        pub every: usize,
        pub offered: usize,
        pub moved: usize,
    }

    impl Copier {
        fn new(every: usize) -> Self {
            Copier {
                every,
                offered: 0,
                moved: 0,
            }
        }
    }

    // SAFETY: a moved allocation is a fresh one of the same layout from the
    // global allocator with the bytes copied, and the old one is freed.
    unsafe impl Relocate for Copier {
        fn relocate(&mut self, old: NonNull<u8>, layout: Layout) -> Option<NonNull<u8>> {
            self.offered += 1;
            if !self.offered.is_multiple_of(self.every) {
                return None;
            }
            self.moved += 1;
            // SAFETY: `layout` has a non-zero size (empty boxes are not
            // offered); `old` holds `layout.size()` bytes the caller gave up.
            unsafe {
                let new = std::alloc::alloc(layout);
                let new = NonNull::new(new).expect("allocation");
                ptr::copy_nonoverlapping(old.as_ptr(), new.as_ptr(), layout.size());
                ptr::write_bytes(old.as_ptr(), 0xA5, layout.size());
                std::alloc::dealloc(old.as_ptr(), layout);
                Some(new)
            }
        }
    }

    #[test]
    fn a_cursor_names_a_place_and_is_never_zero() {
        assert_eq!(DefragCursor::START.position(), (0, 0));
        for (part, bucket) in [(0, 0), (0, 1), (3, 0), (25, 1 << 40)] {
            let cursor = DefragCursor::at(part, bucket);
            assert_ne!(cursor.raw(), 0);
            assert_eq!(
                DefragCursor::from_raw(cursor.raw()).position(),
                (part, bucket)
            );
        }
        // Any number reads as some place (one past the store ends the walk).
        let (part, _) = DefragCursor::from_raw(u64::MAX).position();
        assert!(part > 1000);
    }

    #[test]
    fn moved_bytes_and_vectors_keep_their_content() {
        let mut copier = Copier::new(1);
        let mut bytes: Box<[u8]> = b"payload".as_slice().into();
        let before = bytes.as_ptr();
        assert!(move_bytes(&mut bytes, &mut copier));
        assert_eq!(&*bytes, b"payload");
        assert_ne!(bytes.as_ptr(), before);
        let mut empty: Box<[u8]> = Box::default();
        assert!(!move_bytes(&mut empty, &mut copier));
        let mut vec = Vec::with_capacity(32);
        vec.extend_from_slice(b"head");
        assert!(move_vec(&mut vec, &mut copier));
        assert_eq!((&vec[..], vec.capacity()), (&b"head"[..], 32));
        vec.extend_from_slice(&[b'x'; 40]);
        assert_eq!(vec.len(), 44);
        assert_eq!(copier.moved, 2);
        // Refused: the same allocation, untouched.
        let mut refuser = Copier::new(usize::MAX);
        let at = bytes.as_ptr();
        assert!(!move_bytes(&mut bytes, &mut refuser));
        assert_eq!((bytes.as_ptr(), &*bytes), (at, &b"payload"[..]));
    }

    /// Everything a store holds, as the commands read it.
    type Snapshot = (
        Vec<Vec<(Vec<u8>, f64)>>,
        Vec<Vec<(Vec<u8>, Vec<u8>)>>,
        Option<Vec<u8>>,
    );

    fn snapshot(store: &MemoryStore) -> Snapshot {
        (
            ZsetKey::ALL
                .iter()
                .map(|&k| store.zset_entries(k))
                .collect(),
            HashKey::ALL
                .iter()
                .map(|&k| store.hash_entries(k).into_iter().collect())
                .collect(),
            store.raw_current_virtual_time().map(<[u8]>::to_vec),
        )
    }

    /// A store with `n` items in every sorted set and hash (payloads of
    /// 40 bytes), `n` typed records with a head and a level and one raw record, and a
    /// virtual time: its allocations, counted.
    fn filled(n: usize) -> (MemoryStore, usize) {
        let mut store = MemoryStore::new();
        let mut allocations = 0;
        for i in 0..n {
            let id = format!("item-{i:05}");
            for key in ZsetKey::ALL {
                store.zadd(key, id.as_bytes(), (i % 7) as f64);
                // A member of its own; an item's scores are in the item.
                if order_slot(key).is_none() {
                    allocations += 1;
                }
            }
            for key in HashKey::ALL {
                if key == HashKey::Partitions {
                    continue;
                }
                store.hset(key, id.as_bytes(), &[b'p'; 40]);
                // A field and its value; an item's values are one allocation.
                if item_slot(key).is_none() {
                    allocations += 2;
                }
            }
            allocations += 1;
            let record = Record {
                queued: 1,
                head: Some(id.clone().into_bytes()),
                levels: vec![LevelState {
                    level: 3,
                    queued: 1,
                    offset: -7,
                    owed: 2,
                }],
                ..Record::default()
            };
            store.set_record(format!("p{i}").as_bytes(), &record);
            // Its name, its head and its levels.
            allocations += 3;
        }
        store.hset(HashKey::Partitions, b"raw", b"not a record");
        store.set_current_virtual_time(42);
        (store, allocations + 3)
    }

    #[test]
    fn a_whole_walk_moves_every_allocation_and_changes_nothing() {
        let (mut store, allocations) = filled(300);
        let before = snapshot(&store);
        let mut copier = Copier::new(1);
        assert_eq!(
            store.defrag(DefragCursor::START, || false, &mut copier),
            None
        );
        assert_eq!((copier.offered, copier.moved), (allocations, allocations));
        assert_eq!(snapshot(&store), before);
        // The order follows the moved members: lookups, re-scores and
        // removals through it find them (a stale pointer reads poison).
        for i in 0..300 {
            let id = format!("item-{i:05}");
            assert_eq!(
                store.zscore(ZsetKey::Queue, id.as_bytes()),
                Some((i % 7) as f64)
            );
            store.zadd(ZsetKey::Inflight, id.as_bytes(), 1000.0 - i as f64);
            assert!(store.zrem(ZsetKey::Dead, id.as_bytes()));
        }
        assert_eq!(store.zset_iter(ZsetKey::Dead).count(), 0);
        let inflight: Vec<f64> = store.zset_iter(ZsetKey::Inflight).map(|(_, s)| s).collect();
        assert!(inflight.windows(2).all(|w| w[0] < w[1]) && inflight.len() == 300);
        // (score 0, at or after item-00290): item-00294, the last of score 0.
        assert_eq!(
            store.zfirst_from(ZsetKey::Queue, b"item-00290"),
            Some(b"item-00294".to_vec())
        );
    }

    #[test]
    fn a_walk_told_to_stop_resumes_by_cursor_to_the_same_end() {
        let (mut store, allocations) = filled(200);
        let before = snapshot(&store);
        let mut copier = Copier::new(1);
        let mut cursor = DefragCursor::START;
        let mut steps = 0;
        while let Some(next) = store.defrag(cursor, || true, &mut copier) {
            assert_ne!(next.raw(), 0, "a stored cursor is never 0");
            cursor = next;
            steps += 1;
            assert!(steps < 100_000, "the walk moves on");
        }
        // Stopped every 16 entries (or 64 empty buckets).
        assert!(steps >= allocations / 2 / 16, "{steps} steps");
        assert_eq!((copier.offered, copier.moved), (allocations, allocations));
        assert_eq!(snapshot(&store), before);
        // A cursor past the store (another value's) ends the walk at once.
        let mut copier = Copier::new(1);
        let beyond = DefragCursor::from_raw(u64::MAX);
        assert_eq!(store.defrag(beyond, || false, &mut copier), None);
        assert_eq!(copier.offered, 0);
    }

    proptest! {
        /// Steps of defrag between random writes (the value changing under
        /// a cursor, tables growing and shrinking): the store reads as a
        /// twin that was never defragged, and stays usable.
        #[test]
        fn defrag_steps_between_writes_change_nothing(
            ops in proptest::collection::vec((0u8..5, 0u16..400, 0u8..8), 1..300),
            every in 1usize..4,
        ) {
            let mut store = MemoryStore::new();
            let mut twin = MemoryStore::new();
            let mut copier = Copier::new(every);
            let mut cursor = DefragCursor::START;
            for (op, id, score) in ops {
                let id = format!("id-{id}");
                let id = id.as_bytes();
                for s in [&mut store, &mut twin] {
                    match op {
                        0 => s.zadd(ZsetKey::Queue, id, f64::from(score)),
                        1 => {
                            s.zrem(ZsetKey::Queue, id);
                            s.hdel(HashKey::Task, id);
                        }
                        2 => s.hset(HashKey::Task, id, &vec![b'v'; usize::from(score) * 9]),
                        3 => s.hset(HashKey::Partitions, id, b"raw record"),
                        _ => s.set_current_virtual_time(i64::from(score)),
                    }
                }
                let mut budget = 3;
                cursor = store
                    .defrag(cursor, || { budget -= 1; budget == 0 }, &mut copier)
                    .unwrap_or(DefragCursor::START);
                prop_assert_eq!(snapshot(&store), snapshot(&twin));
            }
            for (member, score) in twin.zset_entries(ZsetKey::Queue) {
                prop_assert_eq!(store.zscore(ZsetKey::Queue, &member), Some(score));
                prop_assert!(store.zrem(ZsetKey::Queue, &member));
            }
            prop_assert_eq!(store.zset_iter(ZsetKey::Queue).count(), 0);
        }
    }
}
