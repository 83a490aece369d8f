//! The reclaim timer: re-enqueues expired leases of every queue with no
//! client traffic, with exactly the semantics of `VTRR.RECLAIM`.
//!
//! It never scans the keyspace per tick. An index maps each (db, queue) that
//! has leases to the earliest time one may be due, ordered by that time:
//! - `VTRR.LEASE` (and blocked leases) record their expiry directly;
//! - writes by other clients (Lua scripts, a plain ZADD, RESTORE, RENAME,
//!   replicated effects on a replica) reach it through a keyspace
//!   subscription on `vtrr:*:inflight` keys, which queues a recheck;
//! - after loading an RDB/AOF, a full sync, or a role change, one incremental
//!   `SCAN MATCH vtrr:*:inflight` of every database rebuilds it;
//! - SWAPDB (which fires no keyspace event) moves its entries between the
//!   two databases.
//!
//! A tick rechecks the queues written since the last tick, then reclaims the
//! queues whose due time has passed, at most `vtrr.reclaim-batch` items in
//! all. Its cost is proportional to those queues, not to the keyspace. A
//! tick with nothing due opens no key for writing, so it signals nothing.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis_module::{Context, ContextFlags, RedisValue};

use crate::commands::reclaim;
use crate::store::redis::{bytes_of, first_expiry, now_ms, select_db, selected_db, Caller};
use crate::{config, info, keys};

/// Keys one tick may walk while rebuilding the index.
const SCAN_KEYS_PER_TICK: usize = 100_000;
const SCAN_COUNT: &str = "10000";
/// How soon the next tick comes while a rebuild scan is unfinished.
const SCAN_RESUME_MS: u64 = 1;

#[derive(Default)]
struct Index {
    /// db -> queue -> earliest time a lease may be due.
    due: HashMap<i32, HashMap<Vec<u8>, i64>>,
    /// (due, db, queue), earliest first.
    schedule: BTreeSet<(i64, i32, Vec<u8>)>,
    /// Queues written by other clients since the last tick.
    recheck: HashSet<(i32, Vec<u8>)>,
    /// Rebuild in progress: next database and its SCAN cursor.
    scan: Option<(i32, String)>,
}

impl Index {
    fn set_due(&mut self, db: i32, queue: &[u8], due_ms: Option<i64>) {
        let queues = self.due.entry(db).or_default();
        if let Some(old) = queues.remove(queue) {
            self.schedule.remove(&(old, db, queue.to_vec()));
        }
        if let Some(due_ms) = due_ms {
            queues.insert(queue.to_vec(), due_ms);
            self.schedule.insert((due_ms, db, queue.to_vec()));
        }
    }

    fn len(&self) -> usize {
        self.schedule.len()
    }

    /// Databases `first` and `second` traded contents: every entry follows
    /// its queue to the new number. O(queues tracked); SWAPDB is rare.
    fn swap_dbs(&mut self, first: i32, second: i32) {
        let moved = |db: i32| match db {
            db if db == first => second,
            db if db == second => first,
            db => db,
        };
        self.due = std::mem::take(&mut self.due)
            .into_iter()
            .map(|(db, queues)| (moved(db), queues))
            .collect();
        self.schedule = std::mem::take(&mut self.schedule)
            .into_iter()
            .map(|(due, db, queue)| (due, moved(db), queue))
            .collect();
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
/// Id of the armed timer, 0 when none.
static TIMER_ID: AtomicU64 = AtomicU64::new(0);

fn with_index<R>(f: impl FnOnce(&mut Index) -> R) -> R {
    // Everything here runs on Redis's main thread; the mutex only satisfies
    // Rust's rules for statics and is never contended. A poisoned lock (a
    // panic elsewhere would already have aborted Redis) is still usable.
    let mut guard = INDEX
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(Index::default))
}

/// A lease of `queue` (in the context's database) expires at `expiry_ms`.
pub fn track(ctx: &Context, queue: &[u8], expiry_ms: i64) {
    let db = selected_db(ctx);
    with_index(|index| {
        let current = index.due.get(&db).and_then(|q| q.get(queue)).copied();
        if current.is_none_or(|due| due > expiry_ms) {
            index.set_due(db, queue, Some(expiry_ms));
        }
    });
}

/// Keyspace events on zset and generic keys: another client (or a replicated
/// effect) wrote an inflight key, so its queue is rechecked at the next tick.
pub fn on_keyspace_event(
    ctx: &Context,
    _kind: redis_module::NotifyEvent,
    _event: &str,
    key: &[u8],
) {
    if let Some(queue) = keys::queue_of_inflight_key(key) {
        let db = selected_db(ctx);
        with_index(|index| index.recheck.insert((db, queue.to_vec())));
    }
}

/// SWAPDB traded the contents of two databases (no keyspace event tells).
pub fn on_swapdb(first: i32, second: i32) {
    with_index(|index| index.swap_dbs(first, second));
}

/// Rebuild the index from the keyspace (after loading, sync, role change,
/// or module load on a populated server).
pub fn request_rebuild() {
    with_index(|index| index.scan = Some((0, "0".to_string())));
}

/// (Re)arms the timer for the current `vtrr.reclaim-interval-ms`; with 0 it
/// stays stopped.
pub fn reschedule(ctx: &Context) {
    let armed = TIMER_ID.swap(0, Ordering::Relaxed);
    if armed != 0 {
        let _ = ctx.stop_timer::<()>(armed);
    }
    let interval = config::reclaim_interval_ms();
    if interval > 0 {
        arm(ctx, Duration::from_millis(interval as u64));
    }
}

fn arm(ctx: &Context, after: Duration) {
    let id = ctx.create_timer(after, tick, ());
    TIMER_ID.store(id, Ordering::Relaxed);
}

fn tick(ctx: &Context, _: ()) {
    TIMER_ID.store(0, Ordering::Relaxed);
    let started = Instant::now();
    let original_db = selected_db(ctx);
    let scanning = scan_step(ctx);
    recheck_written(ctx);
    let is_master = ctx.get_flags().contains(ContextFlags::MASTER);
    if is_master {
        reclaim_due(ctx, now_ms());
    }
    select_db(ctx, original_db);

    let elapsed = started.elapsed().as_micros() as u64;
    info::TIMER_LAST_RUN_US.store(elapsed, Ordering::Relaxed);
    info::TIMER_LONGEST_RUN_US.fetch_max(elapsed, Ordering::Relaxed);
    info::add(&info::TIMER_RUNS, 1);
    info::TRACKED_QUEUES.store(with_index(|index| index.len()) as u64, Ordering::Relaxed);

    let interval = config::reclaim_interval_ms();
    if interval > 0 && TIMER_ID.load(Ordering::Relaxed) == 0 {
        let next = if scanning {
            SCAN_RESUME_MS
        } else {
            interval as u64
        };
        arm(ctx, Duration::from_millis(next));
    }
}

/// Reads the first expiry of every queue written by others since last tick.
fn recheck_written(ctx: &Context) {
    let written: Vec<(i32, Vec<u8>)> = with_index(|index| index.recheck.drain().collect());
    for (db, queue) in written {
        if select_db(ctx, db) {
            let due = first_expiry(ctx, &queue);
            with_index(|index| index.set_due(db, &queue, due));
        }
    }
}

/// Reclaims the queues whose earliest lease is due, within the batch budget.
fn reclaim_due(ctx: &Context, now: i64) {
    let batch = config::reclaim_batch();
    let mut budget = batch;
    while budget > 0 {
        let next = with_index(|index| {
            let (due, db, queue) = index.schedule.first()?.clone();
            if due > now {
                return None;
            }
            index.set_due(db, &queue, None);
            Some((db, queue))
        });
        let Some((db, queue)) = next else { break };
        if !select_db(ctx, db) {
            continue;
        }
        match reclaim::run(ctx, Caller::Server, &queue, now, budget) {
            Ok(reclaimed) => {
                info::add(&info::TIMER_RECLAIMED, reclaimed);
                budget = budget.saturating_sub(reclaimed as usize);
            }
            Err(error) => {
                // A wrong key type or unreadable virtual time: leave the queue
                // alone until a client writes it again.
                ctx.log_warning(&format!(
                    "vtrr: timer skipped queue {}: {}",
                    String::from_utf8_lossy(&queue),
                    error
                ));
                continue;
            }
        }
        let due = first_expiry(ctx, &queue);
        with_index(|index| index.set_due(db, &queue, due));
    }
    info::TIMER_MOST_RECLAIMED_IN_ONE_RUN.fetch_max((batch - budget) as u64, Ordering::Relaxed);
}

/// One bounded step of the index rebuild; true while unfinished.
fn scan_step(ctx: &Context) -> bool {
    let Some((mut db, mut cursor)) = with_index(|index| index.scan.clone()) else {
        return false;
    };
    let mut walked = 0usize;
    let mut found: Vec<(i32, Vec<u8>)> = Vec::new();
    let finished = loop {
        if !select_db(ctx, db) {
            break true;
        }
        let reply = ctx.call(
            "SCAN",
            &[
                cursor.as_str(),
                "MATCH",
                "vtrr:*:inflight",
                "COUNT",
                SCAN_COUNT,
            ][..],
        );
        let Ok(RedisValue::Array(parts)) = reply else {
            break true;
        };
        let next_cursor = parts.first().and_then(bytes_of).map_or_else(
            || "0".to_string(),
            |b| String::from_utf8_lossy(&b).into_owned(),
        );
        if let Some(RedisValue::Array(keys_found)) = parts.get(1) {
            for bytes in keys_found.iter().filter_map(bytes_of) {
                if let Some(queue) = keys::queue_of_inflight_key(&bytes) {
                    found.push((db, queue.to_vec()));
                }
            }
        }
        walked += 10_000;
        if next_cursor == "0" {
            db += 1;
            cursor = "0".to_string();
        } else {
            cursor = next_cursor;
        }
        if walked >= SCAN_KEYS_PER_TICK {
            break false;
        }
    };
    with_index(|index| {
        index.recheck.extend(found);
        index.scan = if finished { None } else { Some((db, cursor)) };
    });
    !finished
}

#[cfg(test)]
mod tests {
    use super::Index;

    #[test]
    fn swapping_databases_moves_every_entry_and_leaves_others_alone() {
        let mut index = Index::default();
        index.set_due(0, b"a", Some(30));
        index.set_due(1, b"b", Some(10));
        index.set_due(2, b"c", Some(20));
        index.recheck.insert((1, b"r".to_vec()));
        index.swap_dbs(0, 1);

        assert_eq!(index.due[&1][&b"a"[..]], 30);
        assert_eq!(index.due[&0][&b"b"[..]], 10);
        assert_eq!(index.due[&2][&b"c"[..]], 20);
        let schedule: Vec<_> = index.schedule.iter().cloned().collect();
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
        assert_eq!(index.len(), 2);

        // A swap with a database that tracks nothing moves the one side.
        index.swap_dbs(2, 5);
        assert!(!index.due.contains_key(&2));
        assert_eq!(index.due[&5][&b"c"[..]], 20);
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
