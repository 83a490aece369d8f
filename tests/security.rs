//! ACL: the commands name a queue, not keys, so the module checks the
//! caller's key permissions on the queue's real keys. Cluster: a queue with a
//! hash tag is routed to the node owning its slot.

mod common;

use common::cluster::Cluster;
use common::*;

#[test]
fn a_user_limited_to_one_queue_gets_noperm_for_another_and_nothing_changes() {
    let server = Server::start();
    let mut admin = server.connect();
    let mut worker = connect_as(
        &server,
        &mut admin,
        "files-worker",
        &[String::from("~vtrr:files:*")],
    );
    let mut reader = connect_as(
        &server,
        &mut admin,
        "files-reader",
        &[String::from("%R~vtrr:files:*")],
    );
    enqueue_one(&mut admin, "other", "p", "o", "O");
    let before = dump_all(&mut admin);

    let added: i64 = redis::cmd("VTRR.ENQUEUE")
        .arg("files")
        .arg("p")
        .arg("f")
        .arg(1)
        .arg("F")
        .query(&mut worker)
        .unwrap();
    assert_eq!(added, 1);
    let (id, _, token, _) = lease(&mut worker, "files", 60_000).unwrap();
    let after_own_queue = dump_all(&mut admin);
    for (command, args) in [
        ("VTRR.ENQUEUE", vec!["other", "p", "x", "1", "X"]),
        ("VTRR.LEASE", vec!["other", "1000"]),
        ("VTRR.ACK", vec!["other", "o", "t"]),
        ("VTRR.ACKCOST", vec!["other", "o", "t", "2"]),
        ("VTRR.RENEW", vec!["other", "o", "t", "1000"]),
        ("VTRR.RECLAIM", vec!["other"]),
        ("VTRR.STATS", vec!["other"]),
        ("VTRR.JOB", vec!["other", "o"]),
        ("VTRR.CHECK", vec!["other"]),
        ("VTRR.LIMIT", vec!["other", "p", "CONCURRENCY", "1"]),
        ("VTRR.LIMIT", vec!["other", "p"]),
        ("VTRR.PAUSE", vec!["other", "p"]),
        ("VTRR.RESUME", vec!["other", "p"]),
        ("VTRR.PARTITIONS", vec!["other"]),
        ("VTRR.RECOUNT", vec!["other"]),
    ] {
        let err = error_of(redis::cmd(command).arg(&args).query(&mut worker));
        assert!(
            err.starts_with("NOPERM") && err.contains("vtrr:other:"),
            "{command}: {err}"
        );
    }
    assert_eq!(
        after_own_queue,
        dump_all(&mut admin),
        "a refused call changed something"
    );
    assert_ne!(before, after_own_queue);

    // Read-only permission: STATS works, LEASE is refused.
    let _: Value = redis::cmd("VTRR.STATS")
        .arg("files")
        .query(&mut reader)
        .unwrap();
    let err = error_of(
        redis::cmd("VTRR.ACK")
            .arg("files")
            .arg(&id)
            .arg(&token)
            .query(&mut reader),
    );
    assert!(err.starts_with("NOPERM"), "{err}");
    assert_eq!(ack(&mut worker, "files", &id, &token), 1);
}

#[test]
fn a_three_master_cluster_routes_queues_by_hash_tag() {
    let cluster = Cluster::start(3, &[]);
    let mut connections: Vec<redis::Connection> =
        cluster.nodes.iter().map(Server::connect).collect();
    for queue in ["{files}", "{images}", "{t42}"] {
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(format!("vtrr:{queue}:queue"))
            .query(&mut connections[0])
            .unwrap();
        let mut owners = 0;
        for con in connections.iter_mut() {
            match redis::cmd("VTRR.ENQUEUE")
                .arg(queue)
                .arg("p")
                .arg("a")
                .arg(1)
                .arg("A")
                .query::<i64>(con)
            {
                Ok(added) => {
                    assert_eq!(added, 1);
                    owners += 1;
                    assert!(lease(con, queue, 1000).is_some());
                    // The lifecycle commands work on the owner too, and
                    // their keys land in the same slot.
                    lifecycle_on_owner(con, queue);
                    let keys: Vec<String> = redis::cmd("CLUSTER")
                        .arg("GETKEYSINSLOT")
                        .arg(slot)
                        .arg(100)
                        .query(con)
                        .unwrap();
                    assert!(
                        keys.iter()
                            .all(|k| k.starts_with(&format!("vtrr:{queue}:")))
                            && !keys.is_empty(),
                        "{keys:?}"
                    );
                    for suffix in [
                        "delayed",
                        "delayed_task",
                        "policy",
                        "partitions",
                        "held",
                        "held_at",
                    ] {
                        assert!(key_exists(con, queue, suffix), "{queue} has no {suffix}");
                        if !native_layout() {
                            let key = format!("vtrr:{queue}:{suffix}");
                            assert!(keys.contains(&key), "{key} not in {keys:?}");
                        }
                    }
                    if native_layout() {
                        // The whole queue is its one key, in the slot.
                        assert_eq!(keys, [format!("vtrr:{queue}:queue")]);
                        let kind: String = redis::cmd("TYPE").arg(&keys[0]).query(con).unwrap();
                        assert_eq!(kind, "vtrrqueue");
                    }
                    let resumed: i64 = command(&["VTRR.RESUME", queue, "t"]).query(con).unwrap();
                    assert_eq!(resumed, 1);
                }
                Err(error) => {
                    assert_eq!(error.code(), Some("MOVED"), "{error}");
                    assert!(
                        error.detail().unwrap_or("").starts_with(&slot.to_string()),
                        "{error}"
                    );
                }
            }
        }
        assert_eq!(owners, 1, "{queue} served by {owners} nodes");
    }
    // A name without a hash tag is refused by the node that owns its slot.
    let mut refused = 0;
    for con in connections.iter_mut() {
        if let Err(error) = redis::cmd("VTRR.STATS").arg("plain").query::<Value>(con) {
            if error.code() == Some("ERR") {
                assert!(error.to_string().contains("hash tag"), "{error}");
                refused += 1;
            } else {
                assert_eq!(error.code(), Some("MOVED"));
            }
        }
    }
    assert_eq!(refused, 1);
    // So is every other command, the lifecycle ones included, each with
    // its well-formed arguments.
    for words in [
        &["VTRR.ENQUEUE", "plain", "p", "x", "1", "X"][..],
        &["VTRR.DEFER", "plain", "1000", "p", "x", "1", "X"],
        &["VTRR.LEASE", "plain", "1000", "WITHCOUNTERS"],
        &["VTRR.ACK", "plain", "x", "t"],
        &["VTRR.RENEW", "plain", "x", "t", "1000"],
        &["VTRR.NACK", "plain", "x", "t"],
        &["VTRR.NACK", "plain", "x", "t", "DELAY", "10"],
        &["VTRR.NACK", "plain", "x", "t", "DEAD"],
        &["VTRR.RECLAIM", "plain"],
        &["VTRR.CHECK", "plain"],
        &["VTRR.POLICY", "plain"],
        &["VTRR.POLICY", "plain", "MAX-TIMEOUTS", "3"],
        &["VTRR.DEAD", "plain"],
        &["VTRR.REVIVE", "plain", "x"],
        &["VTRR.CANCEL", "plain", "x"],
        &["VTRR.LIMIT", "plain", "p"],
        &["VTRR.LIMIT", "plain", "p", "CONCURRENCY", "1", "SHARE", "2"],
        &["VTRR.PAUSE", "plain", "p"],
        &["VTRR.RESUME", "plain", "p"],
        &["VTRR.PARTITIONS", "plain"],
        &["VTRR.PARTITIONS", "plain", "PARTITION", "p"],
        &["VTRR.RECOUNT", "plain"],
        &["VTRR.POLICY", "plain", "DEFAULT-CONCURRENCY", "3"],
    ] {
        let mut refused = 0;
        for con in connections.iter_mut() {
            let error = command(words)
                .query::<Value>(con)
                .expect_err("a queue without a hash tag is never served");
            if error.code() == Some("ERR") {
                assert_eq!(
                    error_of(Err(error)),
                    "ERR in cluster mode the queue name must contain a hash tag, like {files}, so all its keys share one slot",
                    "{words:?}"
                );
                refused += 1;
            } else {
                assert_eq!(error.code(), Some("MOVED"), "{words:?}: {error}");
            }
        }
        assert_eq!(refused, 1, "{words:?}");
    }
    for con in connections.iter_mut() {
        let keys: Vec<String> = redis::cmd("KEYS").arg("vtrr:plain:*").query(con).unwrap();
        assert!(keys.is_empty(), "{keys:?}");
    }
}

/// On the node owning `queue` (which holds one lease): DEFER, POLICY,
/// LEASE WITHCOUNTERS, NACK, DEAD, REVIVE and CANCEL are served, and so are
/// the tenant controls (which leave an item held).
fn lifecycle_on_owner(con: &mut redis::Connection, queue: &str) {
    let int =
        |con: &mut redis::Connection, words: &[&str]| -> i64 { command(words).query(con).unwrap() };
    assert_eq!(
        int(con, &["VTRR.DEFER", queue, "60000", "p", "d", "1", "D"]),
        1
    );
    set_policy(con, queue, &["MAX-NACKS", "0"]);
    assert_eq!(int(con, &["VTRR.ENQUEUE", queue, "p", "b", "1", "B"]), 1);
    let (id, _, token, _, nacks): (String, String, String, i64, i64) =
        command(&["VTRR.LEASE", queue, "60000", "WITHCOUNTERS"])
            .query(con)
            .unwrap();
    assert_eq!((id.as_str(), nacks), ("b", 0));
    // MAX-NACKS 0: the first nack dead-letters it.
    assert_eq!(int(con, &["VTRR.NACK", queue, "b", &token]), 1);
    let dead: Vec<Vec<Value>> = command(&["VTRR.DEAD", queue]).query(con).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0][7], Value::BulkString(b"max-nacks".to_vec()));
    assert_eq!(int(con, &["VTRR.REVIVE", queue, "b"]), 1);
    assert_eq!(int(con, &["VTRR.CANCEL", queue, "b"]), 1);
    let ok = |con: &mut redis::Connection, words: &[&str]| {
        let reply: Value = command(words).query(con).unwrap();
        assert_eq!(reply, Value::Okay, "{words:?}");
    };
    ok(
        con,
        &["VTRR.LIMIT", queue, "t", "CONCURRENCY", "1", "SHARE", "2"],
    );
    ok(con, &["VTRR.POLICY", queue, "DEFAULT-CONCURRENCY", "5"]);
    assert_eq!(int(con, &["VTRR.PAUSE", queue, "t"]), 1);
    assert_eq!(int(con, &["VTRR.ENQUEUE", queue, "t", "t1", "1", "T"]), 1);
    assert_eq!(int(con, &["VTRR.RECOUNT", queue]), 0);
    let t = partition_view(con, queue, "t");
    assert_eq!((&t["held"], &t["paused"]), (&Value::Int(1), &Value::Int(1)));
    let (cursor, views): (String, Vec<View>) =
        command(&["VTRR.PARTITIONS", queue]).query(con).unwrap();
    assert_eq!(cursor, "0");
    assert!(views.iter().any(|view| view["partition"] == t["partition"]));
    assert_invariants(con, queue);
}

/// `queue_in_every_state_on_a_quiet_server` with a's lease expired, so that
/// LEASE and RECLAIM too would write if let through: the server, an admin
/// connection and a's token.
fn every_state_with_a_lease_expired() -> (Server, redis::Connection, String) {
    let (server, mut admin, token) = queue_in_every_state_on_a_quiet_server();
    expire_lease(&mut admin, "q", b"a", &token);
    (server, admin, token)
}

/// Creates ACL user `name` (password `secret`, every command) with the
/// given selectors, and connects as it.
fn connect_as(
    server: &Server,
    admin: &mut redis::Connection,
    name: &str,
    selectors: &[String],
) -> redis::Connection {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(name)
        .arg("reset")
        .arg("on")
        .arg(">secret")
        .arg(selectors)
        .arg("+@all")
        .query(admin)
        .unwrap();
    redis::Client::open(format!("redis://{name}:secret@127.0.0.1:{}/", server.port))
        .unwrap()
        .get_connection()
        .unwrap()
}

#[test]
fn a_user_denied_one_module_key_gets_noperm_naming_it_and_nothing_changes() {
    if keys_layout_only(
        "grants every key of the keys layout but one; a native queue's ACL is its one key (a_native_queue_is_guarded_by_its_one_key)",
    ) {
        return;
    }
    let (server, mut admin, token) = every_state_with_a_lease_expired();
    let t = token.as_str();
    let before = dump_all(&mut admin);
    for (denied, calls) in module_key_openers(t) {
        // Every other key of the queue, each named on its own.
        let selectors: Vec<String> = ALL_SUFFIXES
            .iter()
            .filter(|suffix| **suffix != denied)
            .map(|suffix| format!("~vtrr:q:{suffix}"))
            .collect();
        let mut user = connect_as(&server, &mut admin, &format!("no-{denied}"), &selectors);
        for words in &calls {
            assert_eq!(
                error_of(command(words).query(&mut user)),
                format!(
                    "NOPERM this user has no permissions to access the key vtrr:q:{denied} of this queue"
                ),
                "{words:?} without {denied}"
            );
            assert_eq!(before, dump_all(&mut admin), "{words:?} changed something");
        }
    }
    // With every key granted, the same user's calls go through.
    let mut user = connect_as(
        &server,
        &mut admin,
        "all-keys",
        &[String::from("~vtrr:q:*")],
    );
    let revived: i64 = command(&["VTRR.REVIVE", "q", "b"])
        .query(&mut user)
        .unwrap();
    assert_eq!(revived, 1);
    let deferred: i64 = command(&["VTRR.DEFER", "q", "60000", "p", "new", "1", "N"])
        .query(&mut user)
        .unwrap();
    assert_eq!(deferred, 1);
    assert_invariants(&mut admin, "q");
}

/// A queue pays for outcomes when it keeps them: without RESULT-TTL or
/// DEDUP-MS the calls that would keep one (ENQUEUE, DEFER, a LEASE's acks,
/// ACK, CANCEL) open neither `results` nor `finished`, so a user denied
/// both runs them; once the queue keeps outcomes, the same calls are
/// refused naming `results`, with nothing changed.
#[test]
fn the_keys_of_finished_jobs_are_opened_only_on_a_queue_that_keeps_them() {
    if keys_layout_only("denies two keys of the keys layout; a native queue's ACL is its one key") {
        return;
    }
    let server = Server::start();
    let mut admin = server.connect();
    let others: Vec<String> = ALL_SUFFIXES
        .iter()
        .filter(|suffix| !["results", "finished"].contains(suffix))
        .map(|suffix| format!("~vtrr:q:{suffix}"))
        .collect();
    let mut user = connect_as(&server, &mut admin, "no-outcomes", &others);
    for id in ["a", "b", "c"] {
        let added: i64 = command(&["VTRR.ENQUEUE", "q", "p", id, "1", "P"])
            .query(&mut user)
            .unwrap();
        assert_eq!(added, 1);
    }
    let deferred: i64 = command(&["VTRR.DEFER", "q", "60000", "p", "d", "1", "P"])
        .query(&mut user)
        .unwrap();
    assert_eq!(deferred, 1);
    let (first, _, token, _) = lease(&mut user, "q", 60_000).unwrap();
    let first = String::from_utf8(first).unwrap();
    let acked: i64 = command(&["VTRR.ACK", "q", &first, &token])
        .query(&mut user)
        .unwrap();
    assert_eq!(acked, 1);
    let (second, _, token, _) = lease(&mut user, "q", 60_000).unwrap();
    let second = String::from_utf8(second).unwrap();
    let _: Value = command(&["VTRR.LEASE", "q", "60000", "ACK", &second, &token])
        .query(&mut user)
        .unwrap();
    let cancelled: i64 = command(&["VTRR.CANCEL", "q", "d"])
        .query(&mut user)
        .unwrap();
    assert_eq!(cancelled, 1);
    assert_invariants(&mut admin, "q");

    let _: Value = command(&["VTRR.POLICY", "q", "RESULT-TTL", "60000"])
        .query(&mut admin)
        .unwrap();
    enqueue_one(&mut admin, "q", "p", "g", "G");
    let (held, _, token, _) = lease(&mut admin, "q", 60_000).unwrap();
    let held = String::from_utf8(held).unwrap();
    let before = dump_all(&mut admin);
    let noperm =
        "NOPERM this user has no permissions to access the key vtrr:q:results of this queue";
    for words in [
        &["VTRR.ENQUEUE", "q", "p", "e", "1", "P"][..],
        &["VTRR.DEFER", "q", "60000", "p", "f", "1", "P"],
        &["VTRR.ACK", "q", &held, &token],
        &["VTRR.LEASE", "q", "60000", "ACK", &held, &token],
        &["VTRR.CANCEL", "q", &held],
    ] {
        assert_eq!(
            error_of(command(words).query(&mut user)),
            noperm,
            "{words:?}"
        );
        assert_eq!(before, dump_all(&mut admin), "{words:?} changed something");
    }
}

/// A key ACK and LEASE only read or remove from is checked only where it
/// exists: a user denied `nacks` works a queue that was never NACKed, and
/// is refused, with nothing changed, once an item was.
#[test]
fn a_key_a_call_only_reads_or_removes_from_is_checked_only_where_it_exists() {
    if keys_layout_only("denies one key of the keys layout; a native queue's ACL is its one key") {
        return;
    }
    let server = Server::start();
    let mut admin = server.connect();
    let others: Vec<String> = ALL_SUFFIXES
        .iter()
        .filter(|suffix| **suffix != "nacks")
        .map(|suffix| format!("~vtrr:q:{suffix}"))
        .collect();
    let mut user = connect_as(&server, &mut admin, "no-nacks", &others);
    for id in ["a", "b"] {
        enqueue_one(&mut user, "q", "p", id, "P");
    }
    let (first, _, token, _) = lease(&mut user, "q", 60_000).unwrap();
    assert_eq!(ack(&mut user, "q", &first, &token), 1);
    let (second, _, token, _) = lease(&mut admin, "q", 60_000).unwrap();
    assert_eq!(nack(&mut admin, "q", &second, &token, &[]), 1);
    let (again, _, token, _) = lease(&mut admin, "q", 60_000).unwrap();
    assert_eq!(again, second);
    let again = String::from_utf8(again).unwrap();
    let before = dump_all(&mut admin);
    let noperm = "NOPERM this user has no permissions to access the key vtrr:q:nacks of this queue";
    for words in [
        &["VTRR.ACK", "q", &again, &token][..],
        &["VTRR.LEASE", "q", "60000"],
    ] {
        assert_eq!(
            error_of(command(words).query(&mut user)),
            noperm,
            "{words:?}"
        );
        assert_eq!(before, dump_all(&mut admin), "{words:?} changed something");
    }
    assert_eq!(ack(&mut admin, "q", again.as_bytes(), &token), 1);
    assert_invariants(&mut admin, "q");
}

#[test]
fn a_read_only_user_lists_dead_items_and_partitions_but_cannot_change_the_queue() {
    let (server, mut admin, token) = every_state_with_a_lease_expired();
    let t = token.as_str();
    let mut reader = connect_as(&server, &mut admin, "reader", &[String::from("%R~vtrr:*")]);
    let before = dump_all(&mut admin);
    let dead: Vec<Vec<Value>> = command(&["VTRR.DEAD", "q"]).query(&mut reader).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0][0], Value::BulkString(b"b".to_vec()));
    assert_eq!(dead[0][7], Value::BulkString(b"nack".to_vec()));
    let _: Value = command(&["VTRR.STATS", "q"]).query(&mut reader).unwrap();
    let noperm = |key: &str| {
        format!("NOPERM this user has no permissions to access the key vtrr:q:{key} of this queue")
    };
    // The first key a write needs and the reader may not write: in the keys
    // layout, POLICY writes only `policy`; a native queue is all one key.
    let policy_key = if native_layout() { "queue" } else { "policy" };
    let refused = [
        (&["VTRR.CANCEL", "q", "c"][..], "queue"),
        (&["VTRR.CANCEL", "q", "missing"], "queue"),
        (&["VTRR.DEFER", "q", "60000", "p", "new", "1", "N"], "queue"),
        (&["VTRR.NACK", "q", "a", t], "queue"),
        (&["VTRR.NACK", "q", "a", t, "DEAD"], "queue"),
        (&["VTRR.REVIVE", "q", "b"], "queue"),
        (&["VTRR.LEASE", "q", "60000", "WITHCOUNTERS"], "queue"),
        (&["VTRR.POLICY", "q", "MAX-TIMEOUTS", "NONE"], policy_key),
        // The tenant controls: each would change the queue.
        (&["VTRR.LIMIT", "q", "p", "CONCURRENCY", "1"], "queue"),
        (&["VTRR.LIMIT", "q", "h", "SHARE", "2"], "queue"),
        (&["VTRR.PAUSE", "q", "p"], "queue"),
        (&["VTRR.RESUME", "q", "h"], "queue"),
        (&["VTRR.RECOUNT", "q"], "queue"),
        (&["VTRR.POLICY", "q", "DEFAULT-CONCURRENCY", "1"], "queue"),
    ];
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut admin)
        .unwrap();
    for (words, key) in refused {
        assert_eq!(
            error_of(command(words).query(&mut reader)),
            noperm(key),
            "{words:?}"
        );
        assert_eq!(before, dump_all(&mut admin), "{words:?} changed something");
    }
    // Each refusal is in ACL LOG under the reader's name (Redis counts
    // repeats of the same user and key in one entry).
    let mut logged: Vec<(String, String, i64)> = acl_log(&mut admin)
        .into_iter()
        .map(|entry| (entry.username, entry.object, entry.count))
        .collect();
    let mut keys: Vec<&str> = refused.iter().map(|(_, key)| *key).collect();
    keys.sort();
    keys.dedup();
    let mut expected: Vec<(String, String, i64)> = keys
        .iter()
        .map(|key| {
            let times = refused.iter().filter(|(_, k)| k == key).count() as i64;
            ("reader".to_string(), format!("vtrr:q:{key}"), times)
        })
        .collect();
    logged.sort();
    expected.sort();
    assert_eq!(logged, expected);
    // What only reads: the per-partition view and a partition's settings.
    let (cursor, views): (String, Vec<View>) = command(&["VTRR.PARTITIONS", "q"])
        .query(&mut reader)
        .unwrap();
    assert_eq!((cursor.as_str(), views.len()), ("0", 5), "{views:?}");
    let h = partition_view(&mut reader, "q", "h");
    assert_eq!(
        (&h["paused"], &h["held"]),
        (&Value::Int(1), &Value::Int(1)),
        "{h:?}"
    );
    let settings: View = command(&["VTRR.LIMIT", "q", "h"])
        .query(&mut reader)
        .unwrap();
    assert_eq!(settings["paused"], Value::Int(1), "{settings:?}");
    assert_eq!(before, dump_all(&mut admin));
    let cancelled: i64 = command(&["VTRR.CANCEL", "q", "c"])
        .query(&mut admin)
        .unwrap();
    assert_eq!(cancelled, 1);
}

#[test]
fn every_denied_key_is_recorded_in_acl_log_with_its_name_and_user() {
    if keys_layout_only(
        "denies one key of the keys layout at a time; a native queue's one key is logged in a_native_queue_is_guarded_by_its_one_key",
    ) {
        return;
    }
    let (server, mut admin, token) = every_state_with_a_lease_expired();
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut admin)
        .unwrap();
    let mut expected = Vec::new();
    for (denied, calls) in module_key_openers(&token) {
        let selectors: Vec<String> = ALL_SUFFIXES
            .iter()
            .filter(|suffix| **suffix != denied)
            .map(|suffix| format!("~vtrr:q:{suffix}"))
            .collect();
        let user_name = format!("no-{denied}");
        let mut user = connect_as(&server, &mut admin, &user_name, &selectors);
        let words = &calls[0];
        assert!(error_of(command(words).query(&mut user)).starts_with("NOPERM"));
        expected.push((user_name, format!("vtrr:q:{denied}")));
    }
    let mut logged: Vec<(String, String)> = acl_log(&mut admin)
        .into_iter()
        .map(|entry| (entry.username, entry.object))
        .collect();
    logged.sort();
    expected.sort();
    assert_eq!(logged, expected);
}

#[test]
fn a_native_queue_is_guarded_by_its_one_key() {
    // Native whatever the run's layout: the queue is converted.
    let (server, mut admin, token) = every_state_with_a_lease_expired();
    let _: i64 = command(&["VTRR.CONVERT", "q", "NATIVE"])
        .query(&mut admin)
        .unwrap();
    assert_eq!(layout_of(&mut admin, "q"), "native");
    let mut calls: Vec<Vec<&str>> = module_key_openers(&token)
        .into_iter()
        .flat_map(|(_, calls)| calls)
        .collect();
    calls.sort();
    calls.dedup();
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut admin)
        .unwrap();
    // Every key name of the keys layout but `queue`: none of them counts.
    let others: Vec<String> = ALL_SUFFIXES[1..]
        .iter()
        .map(|suffix| format!("~vtrr:q:{suffix}"))
        .collect();
    let mut user = connect_as(&server, &mut admin, "no-queue", &others);
    let before = dump_all(&mut admin);
    for words in &calls {
        assert_eq!(
            error_of(command(words).query(&mut user)),
            "NOPERM this user has no permissions to access the key vtrr:q:queue of this queue",
            "{words:?} without vtrr:q:queue"
        );
        assert_eq!(before, dump_all(&mut admin), "{words:?} changed something");
    }
    let logged: Vec<(String, String, i64)> = acl_log(&mut admin)
        .into_iter()
        .map(|entry| (entry.username, entry.object, entry.count))
        .collect();
    assert_eq!(
        logged,
        [(
            "no-queue".to_string(),
            "vtrr:q:queue".to_string(),
            calls.len() as i64
        )]
    );
    // Read-only on the one key: reads go through, writes are refused.
    let mut reader = connect_as(
        &server,
        &mut admin,
        "queue-reader",
        &[String::from("%R~vtrr:q:queue")],
    );
    let dead: Vec<Vec<Value>> = command(&["VTRR.DEAD", "q"]).query(&mut reader).unwrap();
    assert_eq!(dead.len(), 1);
    let _: Value = command(&["VTRR.STATS", "q"]).query(&mut reader).unwrap();
    assert_eq!(
        error_of(command(&["VTRR.POLICY", "q", "MAX-NACKS", "2"]).query(&mut reader)),
        "NOPERM this user has no permissions to access the key vtrr:q:queue of this queue"
    );
    assert_eq!(before, dump_all(&mut admin));
    // The one key alone is enough for every call.
    let mut user = connect_as(
        &server,
        &mut admin,
        "queue-only",
        &[String::from("~vtrr:q:queue")],
    );
    for words in &calls {
        let reply: redis::RedisResult<Value> = command(words).query(&mut user);
        assert!(reply.is_ok(), "{words:?} with vtrr:q:queue only: {reply:?}");
    }
    assert_ne!(before, dump_all(&mut admin));
    assert_eq!(layout_of(&mut admin, "q"), "native");
    assert_invariants(&mut admin, "q");
}

/// One `ACL LOG` entry of a denied key.
struct AclLogEntry {
    username: String,
    /// The key.
    object: String,
    /// How many times the same denial was seen.
    count: i64,
}

/// Every `ACL LOG` entry (newest first), each of which must be a key
/// denial (reason `key`).
fn acl_log(admin: &mut redis::Connection) -> Vec<AclLogEntry> {
    // Each entry is a flat field/value map.
    let log: Vec<Vec<Value>> = redis::cmd("ACL").arg("LOG").arg(100).query(admin).unwrap();
    let field = |entry: &[Value], name: &str| -> Value {
        let at = entry
            .iter()
            .position(|v| matches!(v, Value::BulkString(b) if b == name.as_bytes()))
            .unwrap_or_else(|| panic!("no {name} in {entry:?}"));
        entry[at + 1].clone()
    };
    let text = |entry: &[Value], name: &str| -> String {
        match field(entry, name) {
            Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            Value::SimpleString(s) => s,
            other => panic!("{name} is {other:?}"),
        }
    };
    log.iter()
        .map(|entry| {
            assert_eq!(text(entry, "reason"), "key", "{entry:?}");
            let Value::Int(count) = field(entry, "count") else {
                panic!("count in {entry:?}");
            };
            AclLogEntry {
                username: text(entry, "username"),
                object: text(entry, "object"),
                count,
            }
        })
        .collect()
}
