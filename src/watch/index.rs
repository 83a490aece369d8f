//! The timer's due-time index: for each (db, queue), the earliest time
//! something in it may fall due (a lease's expiry, a delayed item's or a
//! parked partition's due time, a schedule's next run: all just times),
//! ordered by that time, plus the queues to
//! reread and the state of a rebuild. A plain data structure: the
//! operations write it, the tick reads it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

/// A time per (db, queue), and the same entries ordered by time.
#[derive(Default)]
struct Times {
    /// db -> queue -> its time.
    of: HashMap<i32, HashMap<Vec<u8>, i64>>,
    /// (time, db, queue), earliest first.
    order: BTreeSet<(i64, i32, Vec<u8>)>,
}

impl Times {
    fn get(&self, db: i32, queue: &[u8]) -> Option<i64> {
        self.of.get(&db).and_then(|q| q.get(queue)).copied()
    }

    /// Sets (or with None, forgets) the time of a queue.
    fn set(&mut self, db: i32, queue: &[u8], at_ms: Option<i64>) {
        let queues = self.of.entry(db).or_default();
        if let Some(old) = queues.remove(queue) {
            self.order.remove(&(old, db, queue.to_vec()));
        }
        if let Some(at_ms) = at_ms {
            queues.insert(queue.to_vec(), at_ms);
            self.order.insert((at_ms, db, queue.to_vec()));
        }
    }

    fn first(&self) -> Option<&(i64, i32, Vec<u8>)> {
        self.order.first()
    }

    fn len(&self) -> usize {
        self.order.len()
    }

    /// Forgets the queues of the databases `flushed` names.
    fn forget(&mut self, flushed: impl Fn(i32) -> bool) {
        self.of.retain(|d, _| !flushed(*d));
        self.order.retain(|(_, d, _)| !flushed(*d));
    }

    /// Moves every entry to the database `moved` gives for its own.
    fn renumber(&mut self, moved: impl Fn(i32) -> i32) {
        self.of = std::mem::take(&mut self.of)
            .into_iter()
            .map(|(db, queues)| (moved(db), queues))
            .collect();
        self.order = std::mem::take(&mut self.order)
            .into_iter()
            .map(|(at, db, queue)| (at, moved(db), queue))
            .collect();
    }
}

#[derive(Default)]
pub struct Index {
    /// The earliest time something of a queue may be due.
    due: Times,
    /// The next run of the queues with recurring schedules: the timer
    /// wakes for these on time (the other due times it meets at its
    /// interval).
    runs: Times,
    /// Queues written by other clients since the last tick.
    pub recheck: HashSet<(i32, Vec<u8>)>,
    /// Rebuild in progress: next database and its SCAN cursor.
    pub scan: Option<(i32, String)>,
}

impl Index {
    /// Sets (or with None, forgets) the due time of a queue.
    pub fn set_due(&mut self, db: i32, queue: &[u8], due_ms: Option<i64>) {
        self.due.set(db, queue, due_ms);
    }

    /// Something of `queue` falls due at `due_ms`: kept when it is earlier
    /// than what the index holds.
    pub fn note_due(&mut self, db: i32, queue: &[u8], due_ms: i64) {
        if self.due.get(db, queue).is_none_or(|due| due > due_ms) {
            self.due.set(db, queue, Some(due_ms));
        }
    }

    /// Removes and returns the earliest queue due at or before `now_ms`.
    pub fn pop_due(&mut self, now_ms: i64) -> Option<(i32, Vec<u8>)> {
        let (due, db, queue) = self.due.first()?.clone();
        if due > now_ms {
            return None;
        }
        self.due.set(db, &queue, None);
        Some((db, queue))
    }

    /// Whether some queue is due at or before `now_ms`.
    pub fn has_due(&self, now_ms: i64) -> bool {
        self.due.first().is_some_and(|(due, _, _)| *due <= now_ms)
    }

    /// Sets (or with None, forgets) the next schedule run of a queue; the
    /// queue is due by then too.
    pub fn set_run(&mut self, db: i32, queue: &[u8], run_ms: Option<i64>) {
        self.runs.set(db, queue, run_ms);
        if let Some(run_ms) = run_ms {
            self.note_due(db, queue, run_ms);
        }
    }

    /// The earliest next schedule run of any queue.
    pub fn earliest_run(&self) -> Option<i64> {
        self.runs.first().map(|(run, _, _)| *run)
    }

    /// Queues with a due time.
    pub fn tracked(&self) -> usize {
        self.due.len()
    }

    /// Database `db` (every database with None) was flushed: its queues are
    /// forgotten. (FLUSHALL and FLUSHDB call no `unlink` and fire no
    /// keyspace event per key.)
    pub fn forget_db(&mut self, db: Option<i32>) {
        let flushed = |d: i32| db.is_none_or(|db| db == d);
        self.due.forget(flushed);
        self.runs.forget(flushed);
        self.recheck.retain(|(d, _)| !flushed(*d));
    }

    /// Databases `first` and `second` traded contents: every entry follows
    /// its queue to the new number. O(queues tracked); SWAPDB is rare.
    pub fn swap_dbs(&mut self, first: i32, second: i32) {
        let moved = |db: i32| match db {
            db if db == first => second,
            db if db == second => first,
            db => db,
        };
        self.due.renumber(moved);
        self.runs.renumber(moved);
        self.recheck = std::mem::take(&mut self.recheck)
            .into_iter()
            .map(|(db, queue)| (moved(db), queue))
            .collect();
        if self.scan.is_some() {
            // A rebuild part-way through one of the two would miss keys.
            self.scan = Some((0, "0".to_string()));
        }
    }
}

static INDEX: Mutex<Option<Index>> = Mutex::new(None);

/// Runs `f` on the module's one index.
pub fn with_index<R>(f: impl FnOnce(&mut Index) -> R) -> R {
    // Everything here runs on Redis's main thread; the mutex only satisfies
    // Rust's rules for statics and is never contended. A poisoned lock (a
    // panic elsewhere would already have aborted Redis) is still usable.
    let mut guard = INDEX
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(Index::default))
}

#[cfg(test)]
mod tests {
    use super::Index;

    #[test]
    fn the_earliest_due_time_of_a_queue_wins() {
        let mut index = Index::default();
        index.note_due(0, b"a", 50);
        index.note_due(0, b"a", 70);
        index.note_due(0, b"a", 40);
        index.note_due(1, b"a", 60);
        assert_eq!(index.tracked(), 2);
        assert_eq!(index.pop_due(39), None);
        assert!(!index.has_due(39));
        assert!(index.has_due(40));
        assert_eq!(index.pop_due(100), Some((0, b"a".to_vec())));
        assert_eq!(index.pop_due(59), None);
        assert_eq!(index.pop_due(60), Some((1, b"a".to_vec())));
        assert_eq!(index.tracked(), 0);
    }

    #[test]
    fn schedule_runs_are_due_and_follow_flushes_and_swaps() {
        let mut index = Index::default();
        index.note_due(0, b"a", 500);
        index.set_run(0, b"a", Some(300));
        index.set_run(2, b"b", Some(200));
        // A run is the earliest of the runs, and its queue is due by then.
        assert_eq!(index.earliest_run(), Some(200));
        assert_eq!(index.pop_due(300), Some((2, b"b".to_vec())));
        assert_eq!(index.pop_due(300), Some((0, b"a".to_vec())));
        index.set_run(2, b"b", Some(250));
        index.set_run(2, b"b", None);
        assert_eq!(index.earliest_run(), Some(300));
        index.set_run(2, b"b", Some(100));
        index.swap_dbs(2, 3);
        index.set_run(3, b"b", Some(400));
        assert_eq!(index.earliest_run(), Some(300));
        index.forget_db(Some(0));
        assert_eq!(index.earliest_run(), Some(400));
        index.forget_db(None);
        assert_eq!(index.earliest_run(), None);
    }

    #[test]
    fn due_queues_come_out_earliest_first() {
        let mut index = Index::default();
        index.set_due(0, b"late", Some(30));
        index.set_due(0, b"early", Some(10));
        index.set_due(2, b"middle", Some(20));
        index.set_due(0, b"late", Some(5)); // set_due replaces, earlier or not
        let order: Vec<_> = std::iter::from_fn(|| index.pop_due(100)).collect();
        assert_eq!(
            order,
            [
                (0, b"late".to_vec()),
                (0, b"early".to_vec()),
                (2, b"middle".to_vec())
            ]
        );
    }

    #[test]
    fn swapping_databases_moves_every_entry_and_leaves_others_alone() {
        let mut index = Index::default();
        index.set_due(0, b"a", Some(30));
        index.set_due(1, b"b", Some(10));
        index.set_due(2, b"c", Some(20));
        index.recheck.insert((1, b"r".to_vec()));
        index.swap_dbs(0, 1);

        assert_eq!(index.due.of[&1][&b"a"[..]], 30);
        assert_eq!(index.due.of[&0][&b"b"[..]], 10);
        assert_eq!(index.due.of[&2][&b"c"[..]], 20);
        let schedule: Vec<_> = index.due.order.iter().cloned().collect();
        assert_eq!(
            schedule,
            [
                (10, 0, b"b".to_vec()),
                (20, 2, b"c".to_vec()),
                (30, 1, b"a".to_vec())
            ]
        );
        assert!(index.recheck.contains(&(0, b"r".to_vec())));
        // Entries keep working under their new numbers.
        index.set_due(1, b"a", None);
        assert_eq!(index.tracked(), 2);

        // A swap with a database that tracks nothing moves the one side.
        index.swap_dbs(2, 5);
        assert!(!index.due.of.contains_key(&2));
        assert_eq!(index.due.of[&5][&b"c"[..]], 20);
    }

    #[test]
    fn a_swap_during_a_rebuild_restarts_it() {
        let mut index = Index {
            scan: Some((1, "4242".to_string())),
            ..Index::default()
        };
        index.swap_dbs(0, 1);
        assert_eq!(index.scan, Some((0, "0".to_string())));
    }
}
