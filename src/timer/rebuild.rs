//! Rebuilding the index from the keyspace after loading an RDB/AOF, a full
//! sync, a role change or module load on a populated server: an incremental
//! `SCAN MATCH vtrr:*` of every database, a step per run within the run's
//! time budget. Every queue with an inflight or delayed key is queued for a
//! recheck.

use std::time::Instant;

use redis_module::{Context, RedisValue};

use crate::server::bytes_of;
use crate::server::select_db;
use crate::store::vocabulary;
use crate::watch::index::with_index;

/// Keys one SCAN call walks; the step looks at its budget between calls.
const SCAN_COUNT: &str = "1000";

/// One step of the index rebuild, until `deadline`; true while unfinished.
pub fn step(ctx: &Context, deadline: Instant) -> bool {
    let Some((mut db, mut cursor)) = with_index(|index| index.scan.clone()) else {
        return false;
    };
    let mut found: Vec<(i32, Vec<u8>)> = Vec::new();
    let finished = loop {
        if !select_db(ctx, db) {
            break true;
        }
        let reply = ctx.call(
            "SCAN",
            &[cursor.as_str(), "MATCH", "vtrr:*", "COUNT", SCAN_COUNT][..],
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
                // A native queue is its `queue` key; the keys layout's due
                // keys name theirs (a recheck of a queue with nothing due
                // only reads).
                let queue = vocabulary::queue_of_due_key(&bytes)
                    .or_else(|| vocabulary::queue_of_queue_key(&bytes));
                if let Some(queue) = queue {
                    found.push((db, queue.to_vec()));
                }
            }
        }
        if next_cursor == "0" {
            db += 1;
            cursor = "0".to_string();
        } else {
            cursor = next_cursor;
        }
        if Instant::now() >= deadline {
            break false;
        }
    };
    with_index(|index| {
        index.recheck.extend(found);
        index.scan = if finished { None } else { Some((db, cursor)) };
    });
    !finished
}
