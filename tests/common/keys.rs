//! The key vocabulary of a queue as the suites see it: every suffix, the
//! key names of a queue, and whether a key exists.

/// Every key suffix of a queue, in the module's order (src/store/vocabulary.rs):
/// vtrr-queue's nine (`SUFFIXES`), then the module's own (delayed and dead
/// items, nack counts, the dead-letter policy and default cap, held items
/// of partitions under control, per-partition records, the partitions
/// whose parking is under way, the rankings of partitions, the queue's
/// totals, the rate-limited partitions waiting for a token, the items'
/// priority levels and the levels' virtual times, the items' last errors,
/// the finished jobs' outcomes and when each goes,
/// and the recurring schedules with their next runs).
pub const ALL_SUFFIXES: [&str; 33] = [
    "queue",
    "current_virtual_time",
    "partition_virtual_time",
    "task",
    "meta",
    "inflight",
    "inflight_task",
    "lease",
    "timeouts",
    "delayed",
    "delayed_task",
    "nacks",
    "dead",
    "dead_task",
    "dead_reason",
    "policy",
    "held",
    "held_at",
    "partitions",
    "parking",
    "rank_queued",
    "rank_waiting",
    "rank_leased",
    "rank_dead",
    "totals",
    "throttled",
    "priority",
    "level_virtual_time",
    "last_error",
    "results",
    "finished",
    "schedules",
    "schedule_due",
];

/// The nine key suffixes of a queue that vtrr-queue knows: the first nine
/// of `ALL_SUFFIXES`.
pub const SUFFIXES: [&str; 9] = *ALL_SUFFIXES.first_chunk().unwrap();

/// The key names `vtrr:<name>:<suffix>` of queue `name`, in `suffixes` order.
pub fn keys_of(name: &str, suffixes: &[&str]) -> Vec<String> {
    suffixes
        .iter()
        .map(|suffix| format!("vtrr:{name}:{suffix}"))
        .collect()
}

/// The nine key names of queue `name`, in `SUFFIXES` order.
pub fn queue_keys(name: &str) -> Vec<String> {
    keys_of(name, &SUFFIXES)
}

/// All the key names of queue `name`, in `ALL_SUFFIXES` order.
pub fn all_queue_keys(name: &str) -> Vec<String> {
    keys_of(name, &ALL_SUFFIXES)
}

/// Whether `key` exists.
pub fn exists(con: &mut redis::Connection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS").arg(key).query(con).unwrap();
    n == 1
}

// A queue's keys read in either layout, through `VTRR.INSPECT`: what
// ZRANGE/HGETALL/GET of `vtrr:<name>:<suffix>` show in the keys layout.
// A test that checks what a call wrote reads through these, so it runs on
// both layouts; only a test of the keys layout itself reads the keys.

/// `vtrr:<name>:<suffix>` of a sorted set: (member, score) in order.
pub fn key_zrange(con: &mut redis::Connection, name: &str, suffix: &str) -> Vec<(Vec<u8>, f64)> {
    inspect_flat(con, name, suffix)
        .chunks_exact(2)
        .map(|pair| {
            let score = String::from_utf8_lossy(&pair[1]).parse().unwrap();
            (pair[0].clone(), score)
        })
        .collect()
}

/// ZSCORE of `member` in `vtrr:<name>:<suffix>`.
pub fn key_zscore(
    con: &mut redis::Connection,
    name: &str,
    suffix: &str,
    member: &str,
) -> Option<f64> {
    key_zrange(con, name, suffix)
        .into_iter()
        .find(|(m, _)| m == member.as_bytes())
        .map(|(_, score)| score)
}

/// HGETALL of `vtrr:<name>:<suffix>`.
pub fn key_hgetall(
    con: &mut redis::Connection,
    name: &str,
    suffix: &str,
) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    inspect_flat(con, name, suffix)
        .chunks_exact(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect()
}

/// HGET of `field` in `vtrr:<name>:<suffix>`, as text.
pub fn key_hget(
    con: &mut redis::Connection,
    name: &str,
    suffix: &str,
    field: &str,
) -> Option<String> {
    key_hgetall(con, name, suffix)
        .remove(field.as_bytes())
        .map(|v| String::from_utf8(v).unwrap())
}

/// GET of `vtrr:<name>:current_virtual_time`.
pub fn key_current_virtual_time(con: &mut redis::Connection, name: &str) -> Option<String> {
    redis::cmd("VTRR.INSPECT")
        .arg(name)
        .arg("current_virtual_time")
        .query(con)
        .unwrap()
}

/// Whether `vtrr:<name>:<suffix>` holds anything (EXISTS in the keys layout).
pub fn key_exists(con: &mut redis::Connection, name: &str, suffix: &str) -> bool {
    if suffix == "current_virtual_time" {
        return key_current_virtual_time(con, name).is_some();
    }
    !inspect_flat(con, name, suffix).is_empty()
}

/// VTRR.INSPECT of a sorted set or hash: its flat member/score or field/value array.
fn inspect_flat(con: &mut redis::Connection, name: &str, suffix: &str) -> Vec<Vec<u8>> {
    redis::cmd("VTRR.INSPECT")
        .arg(name)
        .arg(suffix)
        .query(con)
        .unwrap()
}

/// Runs `write` on queue `name`'s keys as another client of the keys layout
/// could (planting a fault, a Lua script's write): on a native queue, the
/// queue is converted to the keys layout around it (VTRR.CONVERT copies
/// every entry as it is, so what was planted arrives in the native queue).
pub fn with_keys_layout<T>(
    con: &mut redis::Connection,
    name: &str,
    write: impl FnOnce(&mut redis::Connection) -> T,
) -> T {
    let native = super::native_layout();
    if native {
        let _: i64 = redis::cmd("VTRR.CONVERT")
            .arg(name)
            .arg("KEYS")
            .query(con)
            .unwrap();
    }
    let done = write(con);
    if native {
        let _: i64 = redis::cmd("VTRR.CONVERT")
            .arg(name)
            .arg("NATIVE")
            .query(con)
            .unwrap();
    }
    done
}

/// Asserts queue `name` is drained, in either layout: current_virtual_time
/// back to 0, and `queue`, `task` and `partition_virtual_time` empty.
#[track_caller]
pub fn assert_key_drained(con: &mut redis::Connection, name: &str) {
    assert_eq!(key_current_virtual_time(con, name).as_deref(), Some("0"));
    for gone in ["queue", "task", "partition_virtual_time"] {
        assert!(!key_exists(con, name, gone), "{gone}");
    }
}
