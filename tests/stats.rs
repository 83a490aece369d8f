//! `VTRR.STATS`: every field, on an empty and on a busy queue.

mod common;

use common::*;

#[test]
fn stats_reports_every_field() {
    let server = Server::start();
    let mut con = server.connect();
    let empty = stats(&mut con, "q");
    assert_eq!(empty["queued"], Value::Int(0));
    assert_eq!(empty["next_expiry_ms"], Value::Nil);
    enqueue_items(
        &mut con,
        "q",
        &[("p", "a", 1, b""), ("r", "b", 1, b""), ("r", "c", 1, b"")],
    );
    lease(&mut con, "q", 60_000).unwrap();
    let stats = stats(&mut con, "q");
    assert_eq!(stats["queued"], Value::Int(2));
    assert_eq!(stats["inflight"], Value::Int(1));
    assert_eq!(stats["expired"], Value::Int(0));
    assert_eq!(stats["partitions"], Value::Int(2));
    assert_eq!(stats["current_virtual_time"], Value::Int(1));
    assert!(matches!(stats["next_expiry_ms"], Value::Int(n) if n > 1_700_000_000_000));
}
