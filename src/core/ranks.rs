//! The operator's view, kept as it goes: the partitions ranked by what an
//! operator looks for first (most queued, longest waiting, most leased,
//! most dead), and the queue's totals. Every change of a partition's
//! record goes through `admission::close`, which hands the before and
//! after to [`record_change`]: O(log P) per change, nothing scanned when
//! asked.
//!
//! A ranking is a sorted set of partition names. Counts are stored negated
//! so the worst come first in ascending order, ties by name; `waiting`
//! holds since when a line has waited, so the oldest comes first as it is.
//! A partition leaves a ranking when its value is zero (nothing queued:
//! no wait).
//!
//! What a ranking stores is coarser than what it ranks, so that most
//! changes leave it alone: a queued count is rewritten only once it is more
//! than 1/16 away from the count its place was written for (the record
//! keeps that count: a backlog going up and down by one rewrites nothing),
//! a wait once it restarted ten seconds or more after the wait its place
//! was written for (the record keeps that too); the views show the exact
//! values from the records.
//! Ranked by leased are only the partitions at their cap: the ones a cap
//! holds back, and no write at all for a queue without caps.

use super::numbers::int_field;
use super::partitions::Defaults;
use super::partitions::{self, Record, Totals};
use super::types::Anomaly;
use crate::store::{HashKey, Store, StoreError, ZsetKey};

/// What a ranking orders partitions by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rank {
    /// Most items queued (`held` included).
    Queued,
    /// Longest waiting line: since when it has had items queued and none
    /// leased, earliest first.
    Oldest,
    /// At their cap (leased at least its cap in force), most leased first.
    Leased,
    /// Most items dead-lettered now.
    Dead,
}

impl Rank {
    pub const ALL: [Rank; 4] = [Rank::Queued, Rank::Oldest, Rank::Leased, Rank::Dead];

    pub fn name(self) -> &'static str {
        match self {
            Rank::Queued => "queued",
            Rank::Oldest => "oldest",
            Rank::Leased => "leased",
            Rank::Dead => "dead",
        }
    }

    fn key(self) -> ZsetKey {
        match self {
            Rank::Queued => ZsetKey::RankQueued,
            Rank::Oldest => ZsetKey::RankWaiting,
            Rank::Leased => ZsetKey::RankLeased,
            Rank::Dead => ZsetKey::RankDead,
        }
    }

    /// The partition's score in this ranking under the queue's default
    /// cap `defaults`; None: not ranked.
    pub(super) fn score(self, record: &Record, defaults: Defaults) -> Option<f64> {
        let count = |n: u64| (n > 0).then(|| -(n as f64));
        match self {
            Rank::Queued => count(record.ranked_queued),
            Rank::Oldest => record.ranked_since.map(|since| since as f64),
            Rank::Leased => match record.cap_in_force(defaults) {
                Some(cap) if record.leased >= cap => count(record.leased),
                _ => None,
            },
            Rank::Dead => count(record.dead),
        }
    }
}

/// A queued count keeps its place until it is more than 1/this away from
/// the count the place was written for (exact below this).
const QUEUED_BAND: u64 = 16;

/// A wait keeps its place until it restarts this much later than the wait
/// the place was written for: a line leased many times a second rewrites
/// its place once in ten seconds. The grain is measured from each place's
/// own wait, not from fixed boundaries of the clock, so a run that crosses
/// a boundary does not rewrite every busy line's place at once. (At a
/// grain of one second the writes were still a tenth of a native lease's
/// cost at 100 partitions.)
pub(super) const WAIT_GRAIN_MS: i64 = 10_000;

/// Sets the queued count and the wait the record's places in
/// `rank_queued` and `rank_waiting` are for, before the record is written:
/// its count when it moved out of the band (0 with nothing queued), its
/// wait when it restarted a grain or more later (none when none).
pub(super) fn settle(record: &mut Record) {
    let (queued, ranked) = (record.queued, record.ranked_queued);
    record.ranked_queued = if queued == 0 {
        0
    } else if within_band(queued, ranked) {
        ranked
    } else {
        queued
    };
    record.ranked_since = match (record.waiting_since, record.ranked_since) {
        (Some(since), Some(ranked)) if within_grain(since, ranked) => Some(ranked),
        (since, _) => since,
    };
}

/// Whether a place written for a wait since `ranked` still stands for a
/// wait since `since`.
pub(super) fn within_grain(since: i64, ranked: i64) -> bool {
    since >= ranked && since - ranked < WAIT_GRAIN_MS
}

/// Whether a place written for `ranked` still stands for `queued`.
pub(super) fn within_band(queued: u64, ranked: u64) -> bool {
    ranked > 0 && queued.abs_diff(ranked) <= ranked / QUEUED_BAND
}

/// What one change of a partition's record leaves behind for the view:
/// each ranking whose value moved, and the queue's totals by what the
/// partition's grew. With `every`, each ranking is compared with what it
/// holds rather than with the record as opened (RECOUNT restores rankings
/// that a queue of an earlier version lacks).
pub(super) fn record_change(
    store: &mut impl Store,
    name: &[u8],
    (before, defaults_before): (&Record, Defaults),
    (after, defaults_after): (&Record, Defaults),
    every: bool,
) {
    for rank in Rank::ALL {
        let is = rank.score(after, defaults_after);
        // RECOUNT compares with what the ranking holds, so a sound one is
        // left untouched (nothing written, WATCH intact).
        let was = if every {
            store.zscore(rank.key(), name)
        } else {
            rank.score(before, defaults_before)
        };
        if was == is {
            continue;
        }
        match is {
            Some(score) => store.zadd(rank.key(), name, score),
            None => {
                store.zrem(rank.key(), name);
            }
        }
    }
    let grown = after
        .totals
        .values()
        .into_iter()
        .zip(before.totals.values())
        .map(|(after, before)| after.saturating_sub(before));
    for (field, by) in Totals::FIELDS.into_iter().zip(grown) {
        if by > 0 {
            add_to_total(store, field, by);
        }
    }
}

fn add_to_total(store: &mut impl Store, field: &str, by: u64) {
    let current = read_total(store, field).flatten().unwrap_or(0);
    store.hset_int(
        HashKey::Totals,
        field.as_bytes(),
        current.saturating_add(by).min(i64::MAX as u64) as i64,
    );
}

/// The queue's total `field`: None when absent; None inside when it does
/// not read as a count.
fn read_total(store: &mut impl Store, field: &str) -> Option<Option<u64>> {
    let total = int_field(store, HashKey::Totals, field.as_bytes(), |raw| {
        let total: u64 = std::str::from_utf8(raw).ok()?.parse().ok()?;
        Some(total.min(i64::MAX as u64) as i64)
    })?;
    Some(total.and_then(|n| u64::try_from(n).ok()))
}

/// The queue's totals. An unreadable counter (written by another client)
/// reads as 0 and is reported.
pub fn queue_totals(store: &mut impl Store, anomalies: &mut Vec<Anomaly>) -> Totals {
    let mut values = [0u64; 6];
    for (value, field) in values.iter_mut().zip(Totals::FIELDS) {
        match read_total(store, field) {
            None => {}
            Some(Some(n)) => *value = n,
            Some(None) => anomalies.push(Anomaly::TotalUnreadable { field }),
        }
    }
    Totals::from_values(values)
}

/// How many partitions `rank` holds, and up to `count` of their names from
/// `offset` on, worst first. O(log P + count) on the keys layout (a skip
/// list's spans), O(offset + count) on the native one.
pub fn top(
    store: &mut impl Store,
    rank: Rank,
    offset: usize,
    count: usize,
) -> Result<(u64, Vec<Vec<u8>>), StoreError> {
    let ranked = store.zcard(rank.key());
    Ok((ranked, store.zmembers_from(rank.key(), offset, count)?))
}

/// Every entry of `rank` (O(P): only for the invariant check).
pub(super) fn entries(store: &mut impl Store, rank: Rank) -> Vec<(Vec<u8>, f64)> {
    store.zrange_upto(rank.key(), f64::INFINITY, usize::MAX)
}

/// How long a wait that began at `since` has lasted at `now_ms` (never
/// negative: a clock that stepped back reads as just begun).
pub fn waited(since: i64, now_ms: i64) -> i64 {
    now_ms.saturating_sub(since).max(0)
}

/// Since when the longest-waiting line has waited, if any waits: read from
/// the record of the first in the ranking (whose places are at most a
/// grain behind the waits).
pub fn oldest_waiting_since(store: &mut impl Store, anomalies: &mut Vec<Anomaly>) -> Option<i64> {
    let (name, _) = store.zfirst(ZsetKey::RankWaiting)?;
    partitions::read(store, &name, anomalies).1.waiting_since
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::memory::MemoryStore;

    fn record(queued: u64, leased: u64, since: Option<i64>) -> Record {
        Record {
            queued,
            ranked_queued: queued,
            leased,
            waiting_since: since,
            ranked_since: since,
            ..Record::default()
        }
    }

    #[test]
    fn a_change_moves_only_the_rankings_whose_value_moved() {
        let mut store = MemoryStore::default();
        record_change(
            &mut store,
            b"a",
            (&Record::default(), Defaults::of_cap(None)),
            (&record(3, 0, Some(10_000)), Defaults::of_cap(None)),
            false,
        );
        record_change(
            &mut store,
            b"b",
            (&Record::default(), Defaults::of_cap(None)),
            (&record(5, 1, Some(20_000)), Defaults::of_cap(Some(1))),
            false,
        );
        assert_eq!(
            top(&mut store, Rank::Queued, 0, 10).unwrap(),
            (2, vec![b"b".to_vec(), b"a".to_vec()])
        );
        assert_eq!(
            top(&mut store, Rank::Oldest, 0, 10).unwrap(),
            (2, vec![b"a".to_vec(), b"b".to_vec()])
        );
        assert_eq!(
            top(&mut store, Rank::Leased, 0, 10).unwrap(),
            (1, vec![b"b".to_vec()])
        );
        assert_eq!(
            top(&mut store, Rank::Queued, 1, 10).unwrap(),
            (2, vec![b"a".to_vec()])
        );
        // a's last item is leased: it leaves the queued and waiting rankings.
        record_change(
            &mut store,
            b"a",
            (&record(3, 0, Some(10_000)), Defaults::of_cap(None)),
            (&record(0, 1, None), Defaults::of_cap(Some(1))),
            false,
        );
        assert_eq!(
            top(&mut store, Rank::Queued, 0, 10).unwrap(),
            (1, vec![b"b".to_vec()])
        );
        assert_eq!(
            top(&mut store, Rank::Oldest, 0, 10).unwrap(),
            (1, vec![b"b".to_vec()])
        );
        assert_eq!(top(&mut store, Rank::Leased, 0, 10).unwrap().0, 2);
    }

    #[test]
    fn a_queued_count_keeps_its_place_within_a_sixteenth() {
        let mut record = Record {
            queued: 200,
            ..Record::default()
        };
        settle(&mut record);
        assert_eq!(record.ranked_queued, 200, "a first place");
        for (queued, ranked) in [
            (199, 200),
            (201, 200),
            (212, 200),
            (188, 200),
            (213, 213),
            (10, 10),
            (11, 11),
        ] {
            record.queued = queued;
            settle(&mut record);
            assert_eq!(record.ranked_queued, ranked, "{queued}");
        }
        record.queued = 0;
        settle(&mut record);
        assert_eq!(record.ranked_queued, 0);
        record.queued = 5;
        record.ranked_queued = 6;
        settle(&mut record);
        assert_eq!(record.ranked_queued, 5, "out of the band below 16");
    }

    #[test]
    fn a_wait_keeps_its_place_until_it_restarts_a_grain_later() {
        let mut record = Record {
            queued: 3,
            waiting_since: Some(1_000_000),
            ..Record::default()
        };
        settle(&mut record);
        assert_eq!(record.ranked_since, Some(1_000_000), "a first place");
        for (since, ranked) in [
            (1_000_001, 1_000_000),
            (1_000_000 + WAIT_GRAIN_MS - 1, 1_000_000),
            (1_000_000 + WAIT_GRAIN_MS, 1_000_000 + WAIT_GRAIN_MS),
            // A clock that stepped back writes the earlier wait.
            (1_000_500, 1_000_500),
        ] {
            record.waiting_since = Some(since);
            settle(&mut record);
            assert_eq!(record.ranked_since, Some(ranked), "{since}");
        }
        record.waiting_since = None;
        settle(&mut record);
        assert_eq!(record.ranked_since, None, "no wait, no place");
    }

    #[test]
    fn only_partitions_at_their_cap_rank_by_leased() {
        let capped = Record {
            leased: 2,
            cap: Some(2),
            ..Record::default()
        };
        assert_eq!(
            Rank::Leased.score(&capped, Defaults::of_cap(None)),
            Some(-2.0)
        );
        let below = Record {
            leased: 1,
            cap: Some(2),
            ..Record::default()
        };
        assert_eq!(Rank::Leased.score(&below, Defaults::of_cap(None)), None);
        let uncapped = Record {
            leased: 9,
            ..Record::default()
        };
        assert_eq!(Rank::Leased.score(&uncapped, Defaults::of_cap(None)), None);
        assert_eq!(
            Rank::Leased.score(&uncapped, Defaults::of_cap(Some(9))),
            Some(-9.0),
            "the default cap counts"
        );
    }

    #[test]
    fn totals_grow_by_what_a_partition_grew() {
        let mut store = MemoryStore::default();
        let mut after = Record::default();
        after.totals.enqueued = 2;
        after.totals.leased = 1;
        record_change(
            &mut store,
            b"a",
            (&Record::default(), Defaults::of_cap(None)),
            (&after, Defaults::of_cap(None)),
            false,
        );
        let mut later = after.clone();
        later.totals.acked = 1;
        record_change(
            &mut store,
            b"a",
            (&after, Defaults::of_cap(None)),
            (&later, Defaults::of_cap(None)),
            false,
        );
        let totals = queue_totals(&mut store, &mut Vec::new());
        assert_eq!(totals.values(), [2, 1, 1, 0, 0, 0]);
    }
}
