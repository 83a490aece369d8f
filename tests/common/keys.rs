//! The key vocabulary of a queue as the suites see it: every suffix, the
//! key names of a queue, and whether a key exists.

/// Every key suffix of a queue, in the module's order (src/keys.rs):
/// vtrr-queue's nine (`SUFFIXES`), then the module's own (delayed and dead
/// items, nack counts, the dead-letter policy and default cap, held items
/// of partitions under control, per-partition records, the partitions
/// whose parking is under way).
pub const ALL_SUFFIXES: [&str; 20] = [
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

/// All twenty key names of queue `name`, in `ALL_SUFFIXES` order.
pub fn all_queue_keys(name: &str) -> Vec<String> {
    keys_of(name, &ALL_SUFFIXES)
}

/// Whether `key` exists.
pub fn exists(con: &mut redis::Connection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS").arg(key).query(con).unwrap();
    n == 1
}
