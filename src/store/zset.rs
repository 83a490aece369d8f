//! A sorted set in plain memory (`MemoryStore`'s): members to scores in a
//! hash map, and the (score, member) order in a B-tree whose entries point
//! at the map's own copy of each member, so a member is stored and
//! allocated once, and a lookup by (score, member) borrows the caller's
//! bytes instead of copying them.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

use ahash::RandomState;

/// A score with the total order Redis uses for finite doubles.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Score(f64);
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Member bytes the B-tree orders by, owned elsewhere: by the map's key (a
/// `Box<[u8]>`, whose heap bytes never move while it is in the map, however
/// the map rehashes) or, for a lookup, by the caller for the call's length.
#[derive(Clone, Copy)]
struct MemberRef(*const [u8]);

impl MemberRef {
    fn bytes(&self) -> &[u8] {
        // SAFETY: an entry of `ordered` points at a key of `by_member` and is
        // removed before that key is (see `Zset`); a lookup key points at a
        // slice borrowed for the call that made it.
        unsafe { &*self.0 }
    }
}

impl PartialEq for MemberRef {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}
impl Eq for MemberRef {}
impl PartialOrd for MemberRef {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for MemberRef {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.bytes().cmp(other.bytes())
    }
}
impl std::fmt::Debug for MemberRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.bytes()))
    }
}

/// One sorted set. Invariant: `ordered` holds exactly one entry per member
/// of `by_member`, with its score, pointing at that member's key.
#[derive(Default, Debug)]
pub struct Zset {
    by_member: HashMap<Box<[u8]>, f64, RandomState>,
    ordered: BTreeSet<(Score, MemberRef)>,
}

// SAFETY: the raw pointers only point into this value's own map keys (plain
// heap bytes), so moving the whole value to another thread — the lazy-free
// thread drops a queue — moves what they point at with it.
unsafe impl Send for Zset {}

impl Clone for Zset {
    /// A copy whose order points at its own members.
    fn clone(&self) -> Self {
        let mut copy = Zset {
            by_member: HashMap::with_capacity_and_hasher(self.len(), RandomState::new()),
            ordered: BTreeSet::new(),
        };
        for (member, score) in self.iter() {
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

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.by_member.get(member).copied()
    }

    /// Sets `member`'s score; true when it was not a member yet.
    pub fn insert(&mut self, member: &[u8], score: f64) -> bool {
        match self.by_member.get_key_value(member) {
            Some((_, &old)) if old == score => false,
            Some((key, &old)) => {
                let stored = MemberRef(&**key);
                self.ordered.remove(&(Score(old), stored));
                self.ordered.insert((Score(score), stored));
                *self.by_member.get_mut(member).expect("just found") = score;
                false
            }
            None => {
                // The order points at the map's own key, taken after the
                // insert: the Box's bytes, borrowed from where they live.
                let inserted = match self.by_member.entry(member.into()) {
                    Entry::Vacant(vacant) => vacant.insert_entry(score),
                    Entry::Occupied(_) => unreachable!("not a member: looked up above"),
                };
                let stored = MemberRef(&**inserted.key());
                self.ordered.insert((Score(score), stored));
                true
            }
        }
    }

    /// Removes `member`; true when it was a member.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        let Some(&old) = self.by_member.get(member) else {
            return false;
        };
        // The order's entry first: it points at the key removed next.
        self.ordered.remove(&(Score(old), MemberRef(member)));
        self.by_member.remove(member);
        true
    }

    /// (member, score) in ascending (score, member) order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], f64)> {
        self.ordered.iter().map(|(s, m)| (m.bytes(), s.0))
    }

    /// Entries from the least one at or after (`score`, `member`).
    pub fn iter_from<'a>(
        &'a self,
        score: f64,
        member: &[u8],
    ) -> impl Iterator<Item = (&'a [u8], f64)> {
        // The lookup key borrows `member` only for the range's start.
        let start = (Score(score), MemberRef(member));
        self.ordered
            .range((Bound::Included(start), Bound::Unbounded))
            .map(|(s, m)| (m.bytes(), s.0))
    }

    /// Every member (for deleting the whole set).
    pub fn members(&self) -> Vec<Box<[u8]>> {
        self.by_member.keys().cloned().collect()
    }

    /// The set of `entries`, as ZADDs of them in turn would make it, built
    /// in bulk: the map sized once, the order assembled from a sorted run
    /// rather than one B-tree insert per member. Linear when `entries`
    /// come in ascending (score, member) order with distinct members (a
    /// sorted set read whole); any order is still right, only slower.
    pub fn from_entries(entries: Vec<(Box<[u8]>, f64)>) -> Zset {
        let mut by_member = HashMap::with_capacity_and_hasher(entries.len(), RandomState::new());
        let mut order = Vec::with_capacity(entries.len());
        let mut repeated = Vec::new();
        for (member, score) in entries {
            match by_member.entry(member) {
                Entry::Vacant(vacant) => {
                    // As in `insert`: the order points at the map's own key.
                    let inserted = vacant.insert_entry(score);
                    order.push((Score(score), MemberRef(&**inserted.key())));
                }
                Entry::Occupied(occupied) => repeated.push((occupied.key().clone(), score)),
            }
        }
        // Sorting a sorted run is one pass; the B-tree is then built from
        // it leaf by leaf.
        let mut zset = Zset {
            by_member,
            ordered: order.into_iter().collect(),
        };
        for (member, score) in repeated {
            zset.insert(&member, score);
        }
        zset
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
            let got: Vec<(Vec<u8>, f64)> = copy.iter().map(|(m, s)| (m.to_vec(), s)).collect();
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
            let mut entries: Vec<(Box<[u8]>, f64)> = entries
                .into_iter()
                .map(|(member, score)| (vec![b'm'; member as usize].into(), f64::from(score)))
                .collect();
            if sorted {
                entries.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            }
            let mut inserted = Zset::default();
            for (member, score) in &entries {
                inserted.insert(member, *score);
            }
            let built = Zset::from_entries(entries);
            let got: Vec<(Vec<u8>, f64)> = built.iter().map(|(m, s)| (m.to_vec(), s)).collect();
            let expected: Vec<(Vec<u8>, f64)> = inserted.iter().map(|(m, s)| (m.to_vec(), s)).collect();
            prop_assert_eq!(&got, &expected);
            prop_assert_eq!(built.len(), inserted.len());
            for (member, score) in &expected {
                prop_assert_eq!(built.score(member), Some(*score));
            }
        }
    }
}
