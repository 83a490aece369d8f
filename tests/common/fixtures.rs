//! A queue in every state (every logical key present) and, for it, every
//! call that opens each of the module's own keys.

use super::{
    assert_invariants, command, defer_items, dump_queue, enqueue_items, key_exists, layout_of,
    lease, let_expire, nack, quiet_server, reclaim, set_policy, Server, ALL_SUFFIXES,
};

/// Queue `name` with an item in every state, so every key exists: `t0`
/// leased and acked first (with a result, kept a day: `results`,
/// `finished`) by partition `t`, whose rate (one a day) it spent,
/// so `t1` waits in `held` for a token (`throttled`); `a` leased (the token is returned), `b` dead (nacked with DEAD), `c`
/// queued after one expired lease and one nack (so `timeouts` and `nacks`
/// hold it, and `last_error` what its nack said, as b's), `d` delayed by a minute, all of partition `p`; `h1` held
/// (its partition `h` is paused, so it waits in `held`); partition `k`
/// paused with more items in `queue` than one call parks, so its parking
/// is under way (`parking`); a schedule whose one run is in 2045 (within
/// the 21 years a cron search looks ahead; to move before then)
/// (`schedules`, `schedule_due`); `u1` of partition `u` queued at
/// priority -1, so served after everything else (`priority`,
/// `level_virtual_time`); and a MAX-TIMEOUTS policy. Needs a server whose
/// timer is off (`quiet_server`).
pub fn queue_in_every_state(con: &mut redis::Connection, name: &str) -> String {
    let rated: String = command(&["VTRR.LIMIT", name, "t", "RATE", "1", "PER", "86400000"])
        .query(con)
        .unwrap();
    assert_eq!(rated, "OK");
    enqueue_items(con, name, &[("t", "t0", 1, b"T0"), ("t", "t1", 1, b"T1")]);
    let (id, _, t_token, _) = lease(con, name, 60_000).unwrap();
    assert_eq!(id, b"t0");
    // Finished jobs kept a day: t0's outcome and result (`results`,
    // `finished`).
    set_policy(con, name, &["RESULT-TTL", "86400000"]);
    let acked: i64 = command(&["VTRR.ACKRESULT", name, "t0", &t_token, "R0"])
        .query(con)
        .unwrap();
    assert_eq!(acked, 1);
    enqueue_items(
        con,
        name,
        &[
            ("p", "a", 1, b"A"),
            ("p", "b", 1, b"B"),
            ("p", "c", 1, b"C"),
        ],
    );
    let (id, _, token, _) = lease(con, name, 60_000).unwrap();
    assert_eq!(id, b"a");
    let (id, _, dead_token, _) = lease(con, name, 60_000).unwrap();
    assert_eq!(id, b"b");
    assert_eq!(
        nack(con, name, b"b", &dead_token, &["DEAD", "REASON", "poison"]),
        1
    );
    let (id, _, _, _) = lease(con, name, 1).unwrap();
    assert_eq!(id, b"c");
    let_expire();
    assert_eq!(reclaim(con, name), 1);
    let (id, _, c_token, timeouts) = lease(con, name, 60_000).unwrap();
    assert_eq!((id.as_slice(), timeouts), (&b"c"[..], 1));
    assert_eq!(nack(con, name, b"c", &c_token, &["REASON", "boom"]), 1);
    assert_eq!(defer_items(con, name, 60_000, &[("p", "d", 1, b"d")]), 1);
    let paused: i64 = command(&["VTRR.PAUSE", name, "h"]).query(con).unwrap();
    assert_eq!(paused, 1);
    assert_eq!(enqueue_items(con, name, &[("h", "h1", 1, b"H1")]), 1);
    let k_items: Vec<String> = (0..1100).map(|n| format!("k{n:04}")).collect();
    let k: Vec<(&str, &str, u64, &[u8])> = k_items
        .iter()
        .map(|id| ("k", id.as_str(), 1, &b"K"[..]))
        .collect();
    assert_eq!(enqueue_items(con, name, &k), 1100);
    let paused: i64 = command(&["VTRR.PAUSE", name, "k"]).query(con).unwrap();
    assert_eq!(paused, 1);
    set_policy(con, name, &["MAX-TIMEOUTS", "3"]);
    let _next_run: i64 = command(&[
        "VTRR.SCHEDULE",
        name,
        "s",
        "CRON",
        "0 0 0 1 1 * 2045",
        "PARTITION",
        "s",
        "PAYLOAD",
        "S",
    ])
    .query(con)
    .unwrap();
    let added: i64 = command(&["VTRR.ENQUEUE", name, "PRIORITY", "-1", "u", "u1", "1", "U"])
        .query(con)
        .unwrap();
    assert_eq!(added, 1);
    // No partition is at its cap (the suites count on p's settings being
    // the defaults), so `rank_leased` is the one key left empty.
    let missing: Vec<&str> = ALL_SUFFIXES
        .into_iter()
        .filter(|suffix| *suffix != "rank_leased" && !key_exists(con, name, suffix))
        .collect();
    assert!(missing.is_empty(), "set-up left keys missing: {missing:?}");
    if layout_of(con, name) == "native" {
        // The whole queue in its one key: no key of the keys layout.
        let kind: String = redis::cmd("TYPE")
            .arg(format!("vtrr:{name}:queue"))
            .query(con)
            .unwrap();
        assert_eq!(kind, "vtrrqueue");
        let present: Vec<(String, Option<Vec<u8>>)> = dump_queue(con, name)
            .into_iter()
            .filter(|(key, dump)| dump.is_some() && *key != format!("vtrr:{name}:queue"))
            .collect();
        assert!(
            present.is_empty(),
            "keys beside the native key: {present:?}"
        );
    } else {
        let missing: Vec<String> = dump_queue(con, name)
            .into_iter()
            .filter(|(key, dump)| dump.is_none() && !key.ends_with(":rank_leased"))
            .map(|(key, _)| key)
            .collect();
        assert!(missing.is_empty(), "set-up left keys missing: {missing:?}");
    }
    assert_invariants(con, name);
    token
}

/// A `quiet_server`, a connection to it, and queue `q` in every state
/// (`queue_in_every_state`): the server, the connection and a's token.
pub fn queue_in_every_state_on_a_quiet_server() -> (Server, redis::Connection, String) {
    let server = quiet_server();
    let mut con = server.connect();
    let token = queue_in_every_state(&mut con, "q");
    (server, con, token)
}

/// The module's own keys of queue `q` (beyond vtrr-queue's nine), each with
/// every call that opens it (src/ops.rs), as words: one well-formed call of
/// each command, on `q` as `queue_in_every_state` leaves it (`token` is
/// a's), each of which would change the queue or read the key if let
/// through.
pub fn module_key_openers(token: &str) -> Vec<(&'static str, Vec<Vec<&str>>)> {
    let calls: [(&str, Vec<&str>); 28] = [
        ("enqueue", vec!["VTRR.ENQUEUE", "q", "p", "new", "1", "N"]),
        (
            "enqueue-priority",
            vec!["VTRR.ENQUEUE", "q", "PRIORITY", "2", "p", "new", "1", "N"],
        ),
        (
            "defer-priority",
            vec![
                "VTRR.DEFER",
                "q",
                "60000",
                "PRIORITY",
                "2",
                "p",
                "new",
                "1",
                "N",
            ],
        ),
        (
            "defer",
            vec!["VTRR.DEFER", "q", "60000", "p", "new", "1", "N"],
        ),
        ("lease", vec!["VTRR.LEASE", "q", "60000", "WITHCOUNTERS"]),
        (
            "lease-ack",
            vec![
                "VTRR.LEASE",
                "q",
                "60000",
                "WITHPARTITION",
                "ACK",
                "a",
                token,
            ],
        ),
        ("ack", vec!["VTRR.ACK", "q", "a", token]),
        ("nack", vec!["VTRR.NACK", "q", "a", token]),
        ("reclaim", vec!["VTRR.RECLAIM", "q"]),
        ("stats", vec!["VTRR.STATS", "q"]),
        ("check", vec!["VTRR.CHECK", "q"]),
        ("dead", vec!["VTRR.DEAD", "q"]),
        ("policy-set", vec!["VTRR.POLICY", "q", "MAX-NACKS", "2"]),
        ("policy-read", vec!["VTRR.POLICY", "q"]),
        ("revive", vec!["VTRR.REVIVE", "q", "b"]),
        ("cancel", vec!["VTRR.CANCEL", "q", "c"]),
        (
            "limit-set",
            vec!["VTRR.LIMIT", "q", "p", "CONCURRENCY", "1", "SHARE", "2"],
        ),
        ("limit-read", vec!["VTRR.LIMIT", "q", "p"]),
        ("pause", vec!["VTRR.PAUSE", "q", "p"]),
        ("resume", vec!["VTRR.RESUME", "q", "h"]),
        ("partitions", vec!["VTRR.PARTITIONS", "q", "COUNT", "100"]),
        ("partition", vec!["VTRR.PARTITIONS", "q", "PARTITION", "h"]),
        ("recount", vec!["VTRR.RECOUNT", "q"]),
        (
            "default-cap",
            vec!["VTRR.POLICY", "q", "DEFAULT-CONCURRENCY", "1"],
        ),
        (
            "schedule-set",
            vec![
                "VTRR.SCHEDULE",
                "q",
                "s2",
                "EVERY",
                "60000",
                "PARTITION",
                "p",
                "PAYLOAD",
                "N",
            ],
        ),
        ("unschedule", vec!["VTRR.UNSCHEDULE", "q", "s"]),
        ("schedules", vec!["VTRR.SCHEDULES", "q"]),
        ("job", vec!["VTRR.JOB", "q", "a", "b"]),
    ];
    // The schedule commands, and CHECK (runs are the timer's to fire).
    const SCHEDULED: &[&str] = &["check", "schedule-set", "unschedule", "schedules"];
    // What changes a partition's record may move its places in the
    // rankings and the queue's totals; STATS reads the longest wait, the
    // queued ranking's size and the totals.
    const RANKED: &[&str] = &[
        "enqueue",
        "enqueue-priority",
        "defer",
        "defer-priority",
        "lease",
        "ack",
        "nack",
        "reclaim",
        "check",
        "revive",
        "cancel",
        "limit-set",
        "pause",
        "resume",
        "partitions",
        "partition",
        "recount",
        "default-cap",
    ];
    let ranked_and_stats = [RANKED, &["stats"]].concat();
    // The rankings are opened only when touched by the calls that move
    // places in passing (`core::access`, `CoreOp::lazy`): what opens them
    // at once is what reads, rebuilds or checks them, and the controls.
    const RANKINGS_READ: &[&str] = &[
        "check",
        "revive",
        "cancel",
        "limit-set",
        "pause",
        "resume",
        "partitions",
        "partition",
        "recount",
        "default-cap",
    ];
    let rankings_read_and_stats = [RANKINGS_READ, &["stats"]].concat();
    // What a finished job leaves while the queue keeps outcomes: read by
    // ENQUEUE and DEFER (dedup), written by the calls that finish a job.
    const OUTCOMES: &[&str] = &[
        "enqueue",
        "enqueue-priority",
        "defer",
        "defer-priority",
        "lease-ack",
        "ack",
        "check",
        "cancel",
        "job",
    ];
    let openers: [(&str, &[&str]); 24] = [
        (
            "delayed",
            &[
                "enqueue",
                "enqueue-priority",
                "defer",
                "defer-priority",
                "lease",
                "nack",
                "reclaim",
                "stats",
                "check",
                "job",
                "revive",
                "cancel",
                "recount",
            ],
        ),
        (
            "delayed_task",
            &[
                "defer",
                "defer-priority",
                "lease",
                "nack",
                "reclaim",
                "check",
                "revive",
                "cancel",
                "recount",
            ],
        ),
        (
            "nacks",
            &[
                "ack", "lease", "nack", "reclaim", "check", "job", "dead", "revive", "cancel",
                "recount",
            ],
        ),
        (
            "dead",
            &[
                "enqueue",
                "enqueue-priority",
                "defer",
                "defer-priority",
                "lease",
                "nack",
                "reclaim",
                "stats",
                "check",
                "job",
                "dead",
                "revive",
                "cancel",
                "recount",
            ],
        ),
        (
            "dead_task",
            &[
                "lease", "nack", "reclaim", "check", "dead", "revive", "cancel", "recount",
            ],
        ),
        (
            "dead_reason",
            &[
                "lease", "nack", "reclaim", "check", "job", "dead", "revive", "cancel", "recount",
            ],
        ),
        (
            "policy",
            &[
                "enqueue",
                "enqueue-priority",
                "defer",
                "defer-priority",
                "lease",
                "ack",
                "nack",
                "reclaim",
                "stats",
                "check",
                "policy-set",
                "policy-read",
                "revive",
                "cancel",
                "limit-set",
                "pause",
                "resume",
                "partitions",
                "partition",
                "recount",
                "default-cap",
            ],
        ),
        (
            "held",
            &[
                "enqueue",
                "enqueue-priority",
                "defer",
                "defer-priority",
                "lease",
                "ack",
                "nack",
                "reclaim",
                "stats",
                "check",
                "revive",
                "cancel",
                "limit-set",
                "pause",
                "resume",
                "recount",
                "default-cap",
            ],
        ),
        (
            "held_at",
            &[
                "enqueue",
                "enqueue-priority",
                "defer",
                "defer-priority",
                "lease",
                "ack",
                "nack",
                "reclaim",
                "check",
                "job",
                "revive",
                "cancel",
                "limit-set",
                "pause",
                "resume",
                "recount",
                "default-cap",
            ],
        ),
        (
            "parking",
            &[
                "lease",
                "nack",
                "reclaim",
                "check",
                "revive",
                "cancel",
                "limit-set",
                "pause",
                "resume",
                "recount",
                "default-cap",
            ],
        ),
        (
            "partitions",
            &[
                "enqueue",
                "enqueue-priority",
                "defer",
                "defer-priority",
                "lease",
                "ack",
                "nack",
                "reclaim",
                "check",
                "revive",
                "cancel",
                "limit-set",
                "limit-read",
                "pause",
                "resume",
                "partitions",
                "partition",
                "recount",
                "default-cap",
                "stats",
            ],
        ),
        ("rank_queued", &rankings_read_and_stats),
        ("rank_waiting", &rankings_read_and_stats),
        ("rank_leased", RANKINGS_READ),
        ("rank_dead", RANKINGS_READ),
        ("totals", &ranked_and_stats),
        // Opened when touched by ENQUEUE, DEFER and ACK, which only write
        // it; at once by the calls that read it.
        (
            "throttled",
            &[
                "lease",
                "nack",
                "reclaim",
                "check",
                "revive",
                "cancel",
                "limit-set",
                "pause",
                "resume",
                "recount",
                "default-cap",
            ],
        ),
        (
            "priority",
            &[
                "enqueue-priority",
                "defer-priority",
                "lease",
                "ack",
                "nack",
                "reclaim",
                "check",
                "job",
                "dead",
                "revive",
                "cancel",
                "limit-set",
                "pause",
                "resume",
                "recount",
                "default-cap",
            ],
        ),
        (
            "level_virtual_time",
            &[
                "enqueue-priority",
                "defer-priority",
                "lease",
                "nack",
                "reclaim",
                "stats",
                "check",
                "revive",
                "cancel",
                "limit-set",
                "pause",
                "resume",
                "partitions",
                "partition",
                "recount",
                "default-cap",
            ],
        ),
        // Not by a LEASE without acks, nor RECLAIM or RECOUNT: they keep an
        // item's last error as it is.
        (
            "last_error",
            &[
                "ack",
                "lease-ack",
                "nack",
                "check",
                "job",
                "dead",
                "revive",
                "cancel",
            ],
        ),
        ("results", OUTCOMES),
        ("finished", OUTCOMES),
        ("schedules", SCHEDULED),
        ("schedule_due", SCHEDULED),
    ];
    openers
        .into_iter()
        .map(|(suffix, names)| {
            let words = names
                .iter()
                .map(|name| calls.iter().find(|(n, _)| n == name).unwrap().1.clone())
                .collect();
            (suffix, words)
        })
        .collect()
}
