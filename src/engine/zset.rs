//! A sorted set in plain memory (`MemoryStore`'s, for the sets whose
//! members are not item ids): members to scores in a hash table, and the
//! (score, member) [`Order`] pointing at the table's own copy of each
//! member, so a member is stored and allocated once. A member is a
//! [`Thin`] string, so the table's slot and the order's entry each hold an
//! 8-byte pointer to it.

use ahash::RandomState;
use hashbrown::{hash_table, HashTable};

use super::defrag::{walk_buckets, Pace, Relocate};
use super::hash::ZSET_ENTRY_OVERHEAD;
use super::order::Order;
use super::thin::Thin;

/// One sorted set. Invariant: `ordered` holds exactly one entry per member
/// of `by_member`, with its score, pointing at that member's bytes. The
/// table is hashed by a per-process random hasher (clients choose members).
#[derive(Default, Debug)]
pub struct Zset {
    by_member: HashTable<(Thin, f64)>,
    hasher: RandomState,
    ordered: Order,
}

/// Heap bytes a member of `len` bytes costs.
fn cost(len: usize) -> usize {
    Thin::heap_of(len) + ZSET_ENTRY_OVERHEAD
}

// SAFETY: the raw pointers only point into this value's own table members
// (plain heap bytes), so moving the whole value to another thread — the
// lazy-free thread drops a queue — moves what they point at with it.
unsafe impl Send for Zset {}

impl Clone for Zset {
    /// A copy whose order points at its own members.
    fn clone(&self) -> Self {
        let mut copy = Zset {
            by_member: HashTable::with_capacity(self.len()),
            hasher: RandomState::new(),
            ordered: Order::default(),
        };
        for (member, score) in self.ordered.iter() {
            copy.insert(member, score);
        }
        copy
    }
}

impl Zset {
    pub fn len(&self) -> usize {
        self.by_member.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }

    /// The table's hash of `member` (the same for its stored copy).
    fn hash_of(&self, member: &[u8]) -> u64 {
        self.hasher.hash_one(member)
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        let hash = self.hash_of(member);
        self.by_member
            .find(hash, |(m, _)| m.bytes() == member)
            .map(|&(_, score)| score)
    }

    /// Sets `member`'s score; the heap bytes added.
    pub fn insert(&mut self, member: &[u8], score: f64) -> isize {
        let hash = self.hash_of(member);
        if let Some((stored, old)) = self.by_member.find_mut(hash, |(m, _)| m.bytes() == member) {
            if *old != score {
                // SAFETY: the table's own member, kept until it is removed
                // (below, after its entry) or moved by defrag (re-pointed).
                unsafe {
                    let removed = self.ordered.remove(*old, stored.as_ptr());
                    debug_assert!(removed, "a member has its entry");
                    self.ordered.insert(score, stored.as_ptr());
                }
                *old = score;
            }
            return 0;
        }
        // The order points at the table's own member.
        let member = Thin::new(member);
        // SAFETY: as above; the member goes into the table next.
        unsafe { self.ordered.insert(score, member.as_ptr()) };
        let added = cost(member.bytes().len()) as isize;
        let hasher = &self.hasher;
        self.by_member
            .insert_unique(hash, (member, score), |(m, _)| hasher.hash_one(m.bytes()));
        added
    }

    /// Removes `member`: the heap bytes freed, None when it was not one.
    pub fn remove(&mut self, member: &[u8]) -> Option<usize> {
        let hash = self.hash_of(member);
        let entry = self
            .by_member
            .find_entry(hash, |(m, _)| m.bytes() == member)
            .ok()?;
        // The order's entry first: it points at the member removed next.
        let (stored, score) = entry.get();
        // SAFETY: the member is live until `entry.remove()` below.
        let removed = unsafe { self.ordered.remove(*score, stored.as_ptr()) };
        debug_assert!(removed, "a member has its entry");
        entry.remove();
        Some(cost(member.len()))
    }

    /// The (score, member) order.
    pub fn order(&self) -> &Order {
        &self.ordered
    }

    /// Every member (for deleting the whole set).
    pub fn members(&self) -> Vec<Box<[u8]>> {
        self.by_member
            .iter()
            .map(|(m, _)| m.bytes().into())
            .collect()
    }

    /// One step of active defrag from bucket `from` of the table: offers
    /// each member's bytes to `mover` and re-points its order entry when
    /// they move. The bucket to resume from when `pace` says stop, None
    /// when the walk reached the end.
    pub(super) fn defrag(
        &mut self,
        from: usize,
        pace: &mut Pace<impl FnMut() -> bool>,
        mover: &mut impl Relocate,
    ) -> Option<usize> {
        let ordered = &self.ordered;
        walk_buckets(&mut self.by_member, from, pace, |(member, score)| {
            // The order's entry, found while it points at the member's live
            // bytes; none (the invariant broken) leaves it where it is.
            // SAFETY: the member is live: it has not moved yet.
            if let Some(pointer) = unsafe { ordered.pointer(*score, member.as_ptr()) } {
                if member.relocate(mover) {
                    // Nothing read the entry between the move and here.
                    pointer.set(member.as_ptr());
                }
            }
        })
    }

    /// The set of `entries`, as ZADDs of them in turn would make it, built
    /// in bulk: the map sized once, the order assembled from a sorted run
    /// rather than one B-tree insert per member. Linear when `entries`
    /// come in ascending (score, member) order with distinct members (a
    /// sorted set read whole); any order is still right, only slower.
    /// The heap bytes it holds come with it.
    pub fn from_entries(entries: Vec<(Thin, f64)>) -> (Zset, usize) {
        let hasher = RandomState::new();
        let mut by_member: HashTable<(Thin, f64)> = HashTable::with_capacity(entries.len());
        let mut order = Vec::with_capacity(entries.len());
        let mut repeated = Vec::new();
        let mut added = 0;
        for (member, score) in entries {
            let hash = hasher.hash_one(member.bytes());
            let rehash = |(m, _): &(Thin, f64)| hasher.hash_one(m.bytes());
            match by_member.entry(hash, |(m, _)| m.bytes() == member.bytes(), rehash) {
                hash_table::Entry::Vacant(vacant) => {
                    // As in `insert`: the order points at the table's own
                    // member.
                    order.push((score, member.as_ptr()));
                    added += cost(member.bytes().len());
                    vacant.insert((member, score));
                }
                hash_table::Entry::Occupied(_) => repeated.push((member, score)),
            }
        }
        let mut zset = Zset {
            by_member,
            hasher,
            // SAFETY: each pointer is a member the table now owns.
            ordered: unsafe { Order::collect(order) },
        };
        for (member, score) in repeated {
            added = added.wrapping_add_signed(zset.insert(member.bytes(), score));
        }
        (zset, added)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a plain model: every score, the order and the length
        /// agree after any sequence of inserts and removes, and a clone
        /// stands on its own.
        #[test]
        fn the_set_agrees_with_a_model(ops in proptest::collection::vec((0u8..3, 0u8..20, 0u8..4), 0..200)) {
            let mut zset = Zset::default();
            let mut model: std::collections::BTreeMap<Vec<u8>, f64> = Default::default();
            for (op, member, score) in ops {
                let member = vec![b'm'; member as usize];
                let score = f64::from(score);
                if op == 0 {
                    zset.remove(&member);
                    model.remove(&member);
                } else {
                    zset.insert(&member, score);
                    model.insert(member, score);
                }
            }
            let copy = zset.clone();
            drop(zset);
            let mut expected: Vec<(Vec<u8>, f64)> = model.into_iter().collect();
            expected.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            let got: Vec<(Vec<u8>, f64)> = copy.order().iter().map(|(m, s)| (m.to_vec(), s)).collect();
            prop_assert_eq!(&got, &expected);
            prop_assert_eq!(copy.len(), expected.len());
            for (member, score) in &expected {
                prop_assert_eq!(copy.score(member), Some(*score));
            }
        }

        /// Built in bulk from any entries, in any order and with repeats,
        /// the set is the one their ZADDs in turn make.
        #[test]
        fn a_bulk_built_set_is_the_one_its_inserts_make(entries in proptest::collection::vec((0u8..20, 0u8..4), 0..200), sorted in any::<bool>()) {
            let mut entries: Vec<(Thin, f64)> = entries
                .into_iter()
                .map(|(member, score)| (Thin::new(&vec![b'm'; member as usize]), f64::from(score)))
                .collect();
            if sorted {
                entries.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.bytes().cmp(b.0.bytes())));
            }
            let mut inserted = Zset::default();
            for (member, score) in &entries {
                inserted.insert(member.bytes(), *score);
            }
            let (built, _) = Zset::from_entries(entries);
            let got: Vec<(Vec<u8>, f64)> = built.order().iter().map(|(m, s)| (m.to_vec(), s)).collect();
            let expected: Vec<(Vec<u8>, f64)> = inserted.order().iter().map(|(m, s)| (m.to_vec(), s)).collect();
            prop_assert_eq!(&got, &expected);
            prop_assert_eq!(built.len(), inserted.len());
            for (member, score) in &expected {
                prop_assert_eq!(built.score(member), Some(*score));
            }
        }
    }
}
