//! Assertions about a queue's state as a whole: VTRR.CHECK finds nothing
//! wrong (after a RECOUNT where the Lua scripts moved items), and a drained
//! queue's keys are gone.

use super::{exists, recount, vtrr_check};

/// Asserts `VTRR.CHECK name` finds nothing wrong.
#[track_caller]
pub fn assert_invariants(con: &mut redis::Connection, name: &str) {
    let problems = vtrr_check(con, name);
    assert!(problems.is_empty(), "queue {name}: {problems:?}");
}

/// `VTRR.RECOUNT` then the invariant check: after Lua scripts (which keep
/// no per-partition counts) moved items of a queue.
#[track_caller]
pub fn recount_and_assert_invariants(con: &mut redis::Connection, name: &str) {
    recount(con, name);
    assert_invariants(con, name);
}

/// Asserts queue `name` is drained: current_virtual_time back to 0, and
/// `queue`, `task` and `partition_virtual_time` gone.
#[track_caller]
pub fn assert_drained(con: &mut redis::Connection, name: &str) {
    let cvt: String = redis::cmd("GET")
        .arg(format!("vtrr:{name}:current_virtual_time"))
        .query(con)
        .unwrap();
    assert_eq!(cvt, "0");
    for gone in ["queue", "task", "partition_virtual_time"] {
        assert!(!exists(con, &format!("vtrr:{name}:{gone}")), "{gone}");
    }
}
