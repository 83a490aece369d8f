//! A sorted set's (score, member) order: a B-tree of scores and thin
//! pointers to member strings owned elsewhere — by a [`super::zset::Zset`]'s
//! own table, or by the items themselves for the sorted sets of item ids
//! (`queue`, `inflight`, `delayed`, `dead`: [`super::items`]). An entry is
//! 16 bytes; the owner re-points it whenever the member's bytes move.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::ops::Bound;

use super::thin::Thin;

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

/// A thin member string the B-tree orders by, owned elsewhere: by the
/// order's owner (whose allocation moves only when the owner moves it and
/// re-points the entry) or, for a lookup, by the caller for the call's
/// length ([`Thin::with_key`]). The pointer is a `Cell` so an entry is
/// re-pointed in place: the bytes it points at are equal before and
/// after, so the B-tree's order never changes.
struct MemberRef(Cell<*const u8>);

impl MemberRef {
    fn to(start: *const u8) -> Self {
        MemberRef(Cell::new(start))
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: an entry points at a live member of the order's owner, is
        // removed before that member is freed and re-pointed as soon as it
        // moves (the owner's invariant); a lookup key points at a thin
        // string made for the call that made it.
        unsafe { Thin::bytes_at(self.0.get()) }
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

/// The (score, member) order of one sorted set. Its owner keeps one entry
/// per member, pointing at the member's live thin string (see
/// [`MemberRef`]).
///
/// # Safety
///
/// Every `*const u8` the unsafe methods take points at a live thin string
/// (a [`Thin`]'s allocation, or a length and bytes laid out the same way):
/// for the call when it is a lookup key, and until the entry is removed or
/// re-pointed when it is stored. The owner removes an entry before freeing
/// its member and re-points it (through [`Order::pointer`], looked up while
/// the old place is live) when the member moves.
#[derive(Default, Debug)]
pub struct Order(BTreeSet<(Score, MemberRef)>);

/// An entry's pointer, to re-point it in place when its member moves.
pub type Pointer<'a> = &'a Cell<*const u8>;

impl Order {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Adds the entry (`score`, the member at `member`).
    ///
    /// # Safety
    ///
    /// As the type's: `member` stays live until the entry is removed or
    /// re-pointed.
    pub unsafe fn insert(&mut self, score: f64, member: *const u8) {
        self.0.insert((Score(score), MemberRef::to(member)));
    }

    /// Removes the entry (`score`, the bytes at `member`); true when there
    /// was one.
    ///
    /// # Safety
    ///
    /// As the type's: `member` is live for the call.
    pub unsafe fn remove(&mut self, score: f64, member: *const u8) -> bool {
        self.0.remove(&(Score(score), MemberRef::to(member)))
    }

    /// The pointer of entry (`score`, the bytes at `member`), to re-point
    /// once the member has moved (look it up while it has not).
    ///
    /// # Safety
    ///
    /// As the type's: `member` is live for the call.
    pub unsafe fn pointer(&self, score: f64, member: *const u8) -> Option<Pointer<'_>> {
        self.0
            .get(&(Score(score), MemberRef::to(member)))
            .map(|(_, entry)| &entry.0)
    }

    /// (member, score) in ascending (score, member) order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], f64)> {
        self.0.iter().map(|(s, m)| (m.bytes(), s.0))
    }

    /// Entries from the least one at or after (`score`, `member`).
    pub fn iter_from<'a>(
        &'a self,
        score: f64,
        member: &[u8],
    ) -> impl Iterator<Item = (&'a [u8], f64)> {
        // The lookup key lives for the range's start only: the range finds
        // its first entry when made.
        Thin::with_key(member, |key| {
            let start = (Score(score), MemberRef::to(key));
            self.0.range((Bound::Included(start), Bound::Unbounded))
        })
        .map(|(s, m)| (m.bytes(), s.0))
    }

    /// The order of `entries` (score, member pointer): built leaf by leaf
    /// when they come in ascending (score, member) order with distinct
    /// members, as a sorted set read whole does; any order is still right.
    ///
    /// # Safety
    ///
    /// As [`Order::insert`]'s, for every member.
    pub unsafe fn collect(entries: impl IntoIterator<Item = (f64, *const u8)>) -> Order {
        // A B-tree collected sorts its entries (one pass over a sorted
        // run), then builds its nodes in bulk.
        Order(
            entries
                .into_iter()
                .map(|(score, member)| (Score(score), MemberRef::to(member)))
                .collect(),
        )
    }
}
