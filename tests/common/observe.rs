//! Reading the server from outside while a test runs: polling until
//! something holds, INFO fields (the module's, blocked clients), the
//! server's clock, keyspace events, and whether a WATCHed key was touched.

use std::time::{Duration, Instant};

/// Polls `condition` until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    condition()
}

/// Polls `condition` until it holds, and panics naming `what` if `timeout`
/// passes first. For waiting on something that must happen; a test showing
/// that something does *not* happen lets a fixed time pass instead.
#[track_caller]
pub fn wait_until(timeout: Duration, what: &str, condition: impl FnMut() -> bool) {
    assert!(
        wait_for(timeout, condition),
        "timed out after {timeout:?} waiting until {what}"
    );
}

/// Waits for the timer's second run: by then the start-up index rebuild has
/// run, so whatever the timer finds later it learned some other way (from
/// the commands, or the keyspace subscription).
pub fn wait_past_startup_rebuild(con: &mut redis::Connection) {
    wait_until(Duration::from_secs(2), "the timer has run twice", || {
        vtrr_info(con)["vtrr_timer_runs"] >= 2
    });
}

/// The server's clock (`TIME`) in Unix ms.
pub fn server_time_ms(con: &mut redis::Connection) -> i64 {
    let (sec, usec): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    sec * 1000 + usec / 1000
}

/// The integer fields of `INFO vtrr`, by name (`vtrr_timer_runs`, ...).
pub fn vtrr_info(con: &mut redis::Connection) -> std::collections::HashMap<String, i64> {
    let text: String = redis::cmd("INFO").arg("vtrr").query(con).unwrap();
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
        .collect()
}

/// Waits until exactly `n` clients are blocked.
pub fn wait_blocked(con: &mut redis::Connection, n: usize) {
    let reached = wait_for(Duration::from_secs(5), || blocked_clients(con) == n);
    assert!(reached, "never saw {n} blocked clients");
}

/// `blocked_clients` of `INFO clients`.
pub fn blocked_clients(con: &mut redis::Connection) -> usize {
    let info: String = redis::cmd("INFO").arg("clients").query(con).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("blocked_clients:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Subscribes `con` to the keyspace events of `key` in database 0, each
/// read waiting at most 2 s.
pub fn keyspace_events<'a>(con: &'a mut redis::Connection, key: &str) -> redis::PubSub<'a> {
    let mut pubsub = con.as_pubsub();
    pubsub.subscribe(format!("__keyspace@0__:{key}")).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    pubsub
}

/// The next `n` events (`vtrr.enqueue`, ...) `pubsub` receives, in order;
/// fewer if one does not come within the read timeout.
pub fn next_events(pubsub: &mut redis::PubSub, n: usize) -> Vec<String> {
    let mut events = Vec::new();
    while events.len() < n {
        let Ok(message) = pubsub.get_message() else {
            break;
        };
        events.push(message.get_payload::<String>().unwrap());
    }
    events
}

/// WATCHes `keys` on `watcher`, runs `act` (given the watcher, for reads),
/// and says whether a transaction begun after it still executes: false when
/// something in `act` touched one of the keys.
pub fn keys_untouched_by(
    watcher: &mut redis::Connection,
    keys: impl redis::ToRedisArgs,
    act: impl FnOnce(&mut redis::Connection),
) -> bool {
    let _: () = redis::cmd("WATCH").arg(keys).query(watcher).unwrap();
    act(watcher);
    let _: () = redis::cmd("MULTI").query(watcher).unwrap();
    let _: () = redis::cmd("PING").query(watcher).unwrap();
    let result: Option<Vec<String>> = redis::cmd("EXEC").query(watcher).unwrap();
    result.is_some()
}
