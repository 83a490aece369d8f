//! What every VTRR command promises as a Redis command: clear errors for
//! bad input and WRONGTYPE before any write, with nothing changed; idle
//! calls abort no WATCH; keyspace notifications; COMMAND INFO arity, flags
//! and key position; atomic inside MULTI and Lua.

mod common;

use common::*;

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    let id = String::from_utf8(id).unwrap();
    let weight = "ERR weight must be an integer between 1 and 1000000000";
    let lease_ms = "ERR lease-ms must be an integer between 1 and 315360000000";
    let syntax = "ERR syntax error";
    let mut refusals = Refusals::default();
    let mut case = |words: &[&str], expected: &str| refusals.case(words, expected);
    case(
        &["VTRR.ENQUEUE", "q", "p", "x", "1"],
        &arity("vtrr.enqueue"),
    );
    case(
        &["VTRR.ENQUEUE", "q", "p", "x", "1", "X", "p2"],
        &arity("vtrr.enqueue"),
    );
    case(
        &["VTRR.ENQUEUE", "", "p", "x", "1", "X"],
        "ERR queue name must not be empty",
    );
    case(
        &["VTRR.ENQUEUE", "q", "p", "", "1", "X"],
        "ERR id must not be empty",
    );
    for bad in ["0", "-1", "1.5", "99999999999999999999"] {
        case(&["VTRR.ENQUEUE", "q", "p", "x", bad, "X"], weight);
    }
    let priority = "ERR PRIORITY must be an integer between -100 and 100";
    for bad in ["101", "-101", "1.5", "x", "", "99999999999999999999", "%"] {
        case(
            &["VTRR.ENQUEUE", "q", "PRIORITY", bad, "p", "x", "1", "X"],
            priority,
        );
        case(
            &["VTRR.DEFER", "q", "10", "PRIORITY", bad, "p", "x", "1", "X"],
            priority,
        );
    }
    // Two words over four groups that are not PRIORITY: no syntax to guess.
    case(
        &["VTRR.ENQUEUE", "q", "PRIORITE", "5", "p", "x", "1", "X"],
        &arity("vtrr.enqueue"),
    );
    case(
        &["VTRR.ENQUEUE", "q", "PRIORITY", "5"],
        &arity("vtrr.enqueue"),
    );
    // The first item is valid: the bad second one refuses the whole call.
    case(
        &[
            "VTRR.ENQUEUE",
            "q",
            "p",
            "ok",
            "1",
            "X",
            "p",
            "y",
            "abc",
            "Y",
        ],
        weight,
    );
    case(&["VTRR.LEASE", "q"], &arity("vtrr.lease"));
    for bad in ["0", "ten"] {
        case(&["VTRR.LEASE", "q", bad], lease_ms);
    }
    case(
        &["VTRR.LEASE", "q", "100", "COUNT", "0"],
        "ERR COUNT must be a positive integer",
    );
    case(&["VTRR.LEASE", "q", "100", "COUNT"], syntax);
    case(&["VTRR.LEASE", "q", "100", "LIMIT", "1"], syntax);
    case(&["VTRR.ACK", "q", &id], &arity("vtrr.ack"));
    case(&["VTRR.ACK", "q", &id, &token, "b"], &arity("vtrr.ack"));
    case(
        &["VTRR.ACK", "q", &id, &token, "", "t"],
        "ERR id must not be empty",
    );
    case(&["VTRR.ACKCOST", "q", &id, &token], &arity("vtrr.ackcost"));
    case(
        &["VTRR.ACKCOST", "q", &id, &token, "2", &id],
        &arity("vtrr.ackcost"),
    );
    let cost = "ERR cost must be an integer between 0 and 1000000000";
    for bad in ["-1", "-3", "1.5", "1000000001", "x"] {
        case(&["VTRR.RENEW", "q", &id, &token, "100", "COST", bad], cost);
        case(&["VTRR.ACKCOST", "q", &id, &token, bad], cost);
        // A bad cost in a later triple refuses the first one's ack too.
        case(
            &["VTRR.ACKCOST", "q", &id, &token, "2", &id, &token, bad],
            cost,
        );
        case(
            &["VTRR.LEASE", "q", "100", "ACKCOST", &id, &token, bad],
            cost,
        );
    }
    case(
        &["VTRR.LEASE", "q", "100", "ACKCOST", &id, &token],
        "ERR ACKCOST must be followed by one or more <id> <token> <cost> triples, and be the last option",
    );
    case(&["VTRR.RENEW", "q", &id, &token], &arity("vtrr.renew"));
    case(&["VTRR.RENEW", "q", &id, &token, "-5"], lease_ms);
    case(
        &["VTRR.RENEW", "q", &id, &token, "-5", "COST", "3"],
        lease_ms,
    );
    case(&["VTRR.RENEW", "q", &id, &token, "100", "COST"], syntax);
    case(
        &["VTRR.RENEW", "q", &id, &token, "100", "BOGUS", "3"],
        syntax,
    );
    case(
        &["VTRR.RECLAIM", "q", "LIMIT", "0"],
        "ERR LIMIT must be a positive integer",
    );
    case(&["VTRR.RECLAIM", "q", "BOGUS", "1"], syntax);
    case(&["VTRR.STATS", "q", "extra"], &arity("vtrr.stats"));
    refusals.assert_refused(&mut con, "q");
}

/// ENQUEUE, DEFER, LEASE and ACK open a ranking only when they move a
/// place in it: one holding another type does not stop them. They leave it
/// as it is and log it; the calls that read or rebuild it refuse it;
/// deleted, RECOUNT rebuilds the ranking from the partitions' records.
/// ENQUEUE, DEFER and ACK open `throttled` only to list a partition
/// there; LEASE, which reads it, refuses one of another type.
#[test]
fn a_ranking_of_the_wrong_type_is_left_alone_by_the_calls_that_move_places_in_passing() {
    if keys_layout_only(
        "plants strings at the keys layout's rank_queued and throttled (a native queue has no such keys)",
    ) {
        return;
    }
    let server = quiet_server();
    let mut con = server.connect();
    let plant = |con: &mut redis::Connection, key: &str| {
        let _: () = redis::cmd("SET").arg(key).arg("oops").query(con).unwrap();
    };
    let planted = |con: &mut redis::Connection, key: &str| {
        let value: Option<String> = redis::cmd("GET").arg(key).query(con).unwrap();
        assert_eq!(value.as_deref(), Some("oops"), "{key}");
    };
    plant(&mut con, "vtrr:q:rank_queued");
    // A partition's first item gives it a place in the queued ranking,
    // and its lease takes the place away.
    let added: i64 = command(&["VTRR.ENQUEUE", "q", "p", "a", "1", "A"])
        .query(&mut con)
        .unwrap();
    assert_eq!(added, 1);
    let (id, _, token, _) = lease(&mut con, "q", 60_000).expect("the item is queued");
    assert_eq!(id, b"a");
    assert_eq!(ack(&mut con, "q", &id, &token), 1);
    planted(&mut con, "vtrr:q:rank_queued");
    assert!(
        server
            .log()
            .contains("vtrr:q:rank_queued must be a sorted set, and holds another type"),
        "{}",
        server.log()
    );
    let refused = |key: &str| {
        format!(
            "WRONGTYPE Operation against a key holding the wrong kind of value: {key} must be a sorted set"
        )
    };
    for words in [
        &["VTRR.STATS", "q"][..],
        &["VTRR.PARTITIONS", "q", "TOP", "10"],
        &["VTRR.RECOUNT", "q"],
        &["VTRR.CHECK", "q"],
    ] {
        let got = error_of(command(words).query(&mut con));
        assert_eq!(got, refused("vtrr:q:rank_queued"), "{words:?}");
    }
    let _: () = redis::cmd("DEL")
        .arg("vtrr:q:rank_queued")
        .query(&mut con)
        .unwrap();
    plant(&mut con, "vtrr:q:throttled");
    let added: i64 = command(&["VTRR.ENQUEUE", "q", "p", "b", "1", "B"])
        .query(&mut con)
        .unwrap();
    assert_eq!(added, 1);
    let got = error_of(command(&["VTRR.LEASE", "q", "60000"]).query(&mut con));
    assert_eq!(got, refused("vtrr:q:throttled"));
    planted(&mut con, "vtrr:q:throttled");
    let _: () = redis::cmd("DEL")
        .arg("vtrr:q:throttled")
        .query(&mut con)
        .unwrap();
    let _: redis::Value = command(&["VTRR.RECOUNT", "q"]).query(&mut con).unwrap();
    let (ranked, entries): (i64, Vec<redis::Value>) =
        command(&["VTRR.PARTITIONS", "q", "TOP", "10"])
            .query(&mut con)
            .unwrap();
    assert_eq!((ranked, entries.len()), (1, 1));
    assert_invariants(&mut con, "q");
}

#[test]
fn a_key_of_the_wrong_type_is_refused_before_any_write() {
    let server = Server::start();
    let mut con = server.connect();
    let enqueue_x = command(&["VTRR.ENQUEUE", "q", "p", "x", "1", "X"]);
    let _: () = redis::cmd("SET")
        .arg("vtrr:q:meta")
        .arg("oops")
        .query(&mut con)
        .unwrap();
    let err = error_of(enqueue_x.query(&mut con));
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    assert!(err.contains("vtrr:q:meta must be a hash"), "{err}");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(keys, ["vtrr:q:meta"]);
    let err = error_of(redis::cmd("VTRR.LEASE").arg("q").arg(100).query(&mut con));
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    let _: () = redis::cmd("DEL")
        .arg("vtrr:q:meta")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("vtrr:q:current_virtual_time")
        .arg("garbage")
        .query(&mut con)
        .unwrap();
    let err = error_of(enqueue_x.query(&mut con));
    assert_eq!(err, "ERR vtrr:q:current_virtual_time is not an integer");
}

#[test]
fn idle_calls_do_not_abort_a_watching_client() {
    let server = Server::start();
    let mut watcher = server.connect();
    let mut worker = server.connect();
    enqueue_items(&mut worker, "q", &[("p", "a", 1, b"A")]);
    let (id, _, _, _) = lease(&mut worker, "q", 60_000).unwrap();
    let keys = queue_keys("q");
    let untouched = keys_untouched_by(&mut watcher, &keys, |_| {
        assert_eq!(lease(&mut worker, "q", 100), None);
        assert_eq!(ack(&mut worker, "q", &id, "stale"), 0);
        assert_eq!(renew(&mut worker, "q", &id, "stale", 5), 0);
        assert_eq!(reclaim(&mut worker, "q"), 0);
    });
    assert!(untouched, "EXEC aborted by a command that changed nothing");
    // A real change does abort it.
    let untouched = keys_untouched_by(&mut watcher, &keys, |_| {
        enqueue_items(&mut worker, "q", &[("p", "b", 1, b"B")]);
    });
    assert!(!untouched, "a real change must abort EXEC");
}

#[test]
fn changes_fire_module_keyspace_notifications() {
    let server = notifying_server("0");
    let mut con = server.connect();
    let mut sub_con = server.connect();
    let mut pubsub = keyspace_events(&mut sub_con, "vtrr:q:queue");
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    lease(&mut con, "q", 1).unwrap();
    let_expire();
    assert_eq!(reclaim(&mut con, "q"), 1);
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    renew(&mut con, "q", &id, &token, 60_000);
    ack(&mut con, "q", &id, "stale"); // no event
    ack(&mut con, "q", &id, &token);
    assert_eq!(
        next_events(&mut pubsub, 6),
        [
            "vtrr.enqueue",
            "vtrr.lease",
            "vtrr.reclaim",
            "vtrr.lease",
            "vtrr.renew",
            "vtrr.ack"
        ]
    );
}

#[test]
fn commands_declare_arity_flags_and_key_position() {
    let server = Server::start();
    let mut con = server.connect();
    let expected = [
        (
            "vtrr.enqueue",
            -6,
            vec!["write", "denyoom", "module", "fast"],
        ),
        ("vtrr.lease", -3, vec!["write", "module", "fast"]),
        ("vtrr.ack", -4, vec!["write", "module", "fast"]),
        ("vtrr.ackcost", -5, vec!["write", "module", "fast"]),
        (
            "vtrr.ackresult",
            -5,
            vec!["write", "denyoom", "module", "fast"],
        ),
        ("vtrr.renew", -5, vec!["write", "module", "fast"]),
        ("vtrr.reclaim", -2, vec!["write", "module"]),
        ("vtrr.stats", 2, vec!["readonly", "module", "fast"]),
        ("vtrr.job", -3, vec!["readonly", "module", "fast"]),
        ("vtrr.result", -3, vec!["readonly", "module", "fast"]),
        ("vtrr.check", 2, vec!["readonly", "module"]),
        // The README's command reference: syntax gives the arity, "Flags:"
        // the flags (`deny-oom` is shown as `denyoom`).
        ("vtrr.defer", -7, vec!["write", "denyoom", "module", "fast"]),
        ("vtrr.nack", -4, vec!["write", "module", "fast"]),
        ("vtrr.policy", -2, vec!["write", "module", "fast"]),
        ("vtrr.dead", -2, vec!["readonly", "module"]),
        (
            "vtrr.revive",
            -3,
            vec!["write", "denyoom", "module", "fast"],
        ),
        ("vtrr.cancel", -3, vec!["write", "module", "fast"]),
        ("vtrr.limit", -3, vec!["write", "module", "fast"]),
        ("vtrr.pause", 3, vec!["write", "module", "fast"]),
        ("vtrr.resume", 3, vec!["write", "module", "fast"]),
        ("vtrr.partitions", -2, vec!["readonly", "module"]),
        ("vtrr.recount", 2, vec!["write", "module"]),
        // Recurring schedules.
        ("vtrr.schedule", -9, vec!["write", "denyoom", "module"]),
        ("vtrr.unschedule", -3, vec!["write", "module", "fast"]),
        ("vtrr.schedules", -2, vec!["readonly", "module"]),
        // Internal (vtrr.replication commands); not deny-oom: a replica
        // applies what its master did.
        ("vtrr.apply", -5, vec!["write", "module"]),
        // Layouts: CONVERT is not deny-oom (converting to native frees
        // memory); INSPECT reads one logical key in either layout; LOAD is
        // internal (a native queue's encoding, from a master or the AOF).
        ("vtrr.convert", 3, vec!["write", "module"]),
        ("vtrr.inspect", 3, vec!["readonly", "module"]),
        ("vtrr.load", 3, vec!["write", "module"]),
    ];
    let listed: Vec<&str> = expected.iter().map(|(name, _, _)| *name).collect();
    for (name, arity, flags) in expected {
        let info: Vec<Vec<Value>> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(name)
            .query(&mut con)
            .unwrap();
        let entry = &info[0];
        assert_eq!(entry[1], Value::Int(arity), "{name} arity");
        let got_flags: Vec<String> = redis::from_redis_value(entry[2].clone()).unwrap();
        assert_eq!(got_flags, flags, "{name} flags");
        assert_eq!(
            (entry[3].clone(), entry[4].clone(), entry[5].clone()),
            (Value::Int(1), Value::Int(1), Value::Int(1)),
            "{name} keys"
        );
        // One key spec, the queue name: read-only for a readonly command,
        // read-write otherwise; never an ACL-checked key itself.
        let specs: Vec<Vec<Value>> = redis::from_redis_value(entry[8].clone()).unwrap();
        assert_eq!(specs.len(), 1, "{name} key specs: {specs:?}");
        let spec = &specs[0];
        let at = spec
            .iter()
            .position(|v| *v == Value::BulkString(b"flags".to_vec()))
            .unwrap_or_else(|| panic!("{name}: no key-spec flags in {spec:?}"));
        let mut spec_flags: Vec<String> = redis::from_redis_value(spec[at + 1].clone()).unwrap();
        spec_flags.sort();
        let mut expected_spec_flags = if flags.contains(&"readonly") {
            vec!["RO", "access", "not_key"]
        } else {
            vec!["RW", "access", "update", "not_key"]
        };
        expected_spec_flags.sort();
        assert_eq!(spec_flags, expected_spec_flags, "{name} key-spec flags");
    }
    // Every vtrr command the module registered is listed above.
    let mut registered: Vec<String> = redis::cmd("COMMAND")
        .arg("LIST")
        .arg("FILTERBY")
        .arg("MODULE")
        .arg("vtrr")
        .query(&mut con)
        .unwrap();
    registered.sort();
    let mut listed: Vec<String> = listed.into_iter().map(String::from).collect();
    listed.sort();
    assert_eq!(registered, listed, "commands registered vs. tested");
}

#[test]
fn commands_are_atomic_inside_multi_and_lua() {
    let server = Server::start();
    let mut con = server.connect();
    let (leased,): (Option<Lease>,) = redis::pipe()
        .atomic()
        .cmd("VTRR.ENQUEUE")
        .arg("q")
        .arg("p")
        .arg("a")
        .arg(1)
        .arg("A")
        .ignore()
        .cmd("VTRR.LEASE")
        .arg("q")
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    let (id, _, token, _) = leased.unwrap();
    let acked: i64 = redis::cmd("EVAL")
        .arg("return redis.call('VTRR.ACK', KEYS[1], ARGV[1], ARGV[2])")
        .arg(1)
        .arg("q")
        .arg(&id)
        .arg(&token)
        .query(&mut con)
        .unwrap();
    assert_eq!(acked, 1);
    assert_invariants(&mut con, "q");
}

#[test]
fn bad_input_to_the_lifecycle_commands_gets_a_clear_error_and_changes_nothing() {
    let (_server, mut con, token) = queue_in_every_state_on_a_quiet_server();
    let t = token.as_str();
    let delay_ms = "ERR delay-ms must be an integer between 0 and 315360000000";
    let nack_delay = "ERR DELAY ms must be an integer between 0 and 315360000000";
    let weight = "ERR weight must be an integer between 1 and 1000000000";
    let max_timeouts = "ERR MAX-TIMEOUTS must be an integer between 0 and 1000000000, or NONE";
    let max_nacks = "ERR MAX-NACKS must be an integer between 0 and 1000000000, or NONE";
    let count = "ERR COUNT must be a positive integer";
    let empty_name = "ERR queue name must not be empty";
    let empty_id = "ERR id must not be empty";
    let syntax = "ERR syntax error";
    let exclusive = "ERR DELAY and DEAD cannot be combined";
    let mut refusals = Refusals::default();
    let mut case = |words: &[&str], expected: &str| refusals.case(words, expected);

    // VTRR.DEFER
    case(&["VTRR.DEFER", "q", "1000"], &arity("vtrr.defer"));
    case(
        &["VTRR.DEFER", "q", "1000", "p", "x", "1"],
        &arity("vtrr.defer"),
    );
    case(
        &["VTRR.DEFER", "q", "1000", "p", "x", "1", "X", "p2"],
        &arity("vtrr.defer"),
    );
    case(&["VTRR.DEFER", "", "1000", "p", "x", "1", "X"], empty_name);
    case(&["VTRR.DEFER", "q", "1000", "p", "", "1", "X"], empty_id);
    for bad in [
        "-1",
        "315360000001",
        "1.5",
        "abc",
        "",
        "+5",
        "05",
        "9223372036854775808",
    ] {
        case(&["VTRR.DEFER", "q", bad, "p", "x", "1", "X"], delay_ms);
    }
    for bad in ["0", "-1", "1000000001", "1.5", "abc"] {
        case(&["VTRR.DEFER", "q", "1000", "p", "x", bad, "X"], weight);
    }
    // Delay 0 is ENQUEUE, and validates the same.
    case(&["VTRR.DEFER", "q", "0", "p", "x", "abc", "X"], weight);
    // The first item is valid: the bad second one refuses the whole call.
    case(
        &[
            "VTRR.DEFER",
            "q",
            "1000",
            "p",
            "ok",
            "1",
            "X",
            "p",
            "y",
            "-2",
            "Y",
        ],
        weight,
    );

    // VTRR.NACK, with a's current token: any of these would change the queue.
    case(&["VTRR.NACK", "q", "a"], &arity("vtrr.nack"));
    case(&["VTRR.NACK", "", "a", t], empty_name);
    case(&["VTRR.NACK", "q", "", t], empty_id);
    for bad in ["-1", "315360000001", "x", "1.5", "", "01"] {
        case(&["VTRR.NACK", "q", "a", t, "DELAY", bad], nack_delay);
    }
    // Options are validated before the token is looked at.
    case(&["VTRR.NACK", "q", "a", "stale", "DELAY", "-1"], nack_delay);
    case(
        &["VTRR.NACK", "q", "a", t, "DELAY", "10", "DEAD"],
        exclusive,
    );
    case(
        &["VTRR.NACK", "q", "a", t, "DEAD", "DELAY", "10"],
        exclusive,
    );
    case(&["VTRR.NACK", "q", "a", t, "delay", "0", "dead"], exclusive);
    case(&["VTRR.NACK", "q", "a", t, "DELAY"], syntax);
    case(&["VTRR.NACK", "q", "a", t, "BOGUS"], syntax);
    case(&["VTRR.NACK", "q", "a", t, "DEAD", "EXTRA"], syntax);
    case(&["VTRR.NACK", "q", "a", t, "COUNT", "1"], syntax);

    // VTRR.POLICY: a bad option refuses the valid ones before it too.
    case(&["VTRR.POLICY"], &arity("vtrr.policy"));
    case(&["VTRR.POLICY", ""], empty_name);
    case(&["VTRR.POLICY", "", "MAX-TIMEOUTS", "1"], empty_name);
    for bad in ["-1", "1000000001", "abc", "1.5", "", "NONEX", "+1"] {
        case(&["VTRR.POLICY", "q", "MAX-TIMEOUTS", bad], max_timeouts);
        case(&["VTRR.POLICY", "q", "MAX-NACKS", bad], max_nacks);
    }
    case(
        &["VTRR.POLICY", "q", "MAX-TIMEOUTS", "NONE", "MAX-NACKS", "x"],
        max_nacks,
    );
    case(&["VTRR.POLICY", "q", "MAX-TIMEOUTS"], syntax);
    case(
        &["VTRR.POLICY", "q", "MAX-TIMEOUTS", "5", "MAX-NACKS"],
        syntax,
    );
    case(
        &["VTRR.POLICY", "q", "MAX-NACKS", "5", "BOGUS", "1"],
        syntax,
    );
    case(&["VTRR.POLICY", "q", "COUNT", "1"], syntax);

    // VTRR.DEAD
    case(&["VTRR.DEAD"], &arity("vtrr.dead"));
    case(&["VTRR.DEAD", ""], empty_name);
    for bad in ["0", "-1", "x", "1.5", ""] {
        case(&["VTRR.DEAD", "q", "COUNT", bad], count);
    }
    case(&["VTRR.DEAD", "q", "COUNT"], syntax);
    case(&["VTRR.DEAD", "q", "LIMIT", "1"], syntax);
    case(&["VTRR.DEAD", "q", "COUNT", "1", "BOGUS"], syntax);

    // VTRR.REVIVE: b is dead, so a valid call would revive it.
    case(&["VTRR.REVIVE", "q"], &arity("vtrr.revive"));
    case(&["VTRR.REVIVE", "", "b"], empty_name);
    case(&["VTRR.REVIVE", "q", "b", ""], empty_id);
    case(&["VTRR.REVIVE", "q", "", "b"], empty_id);

    // VTRR.CANCEL: c is queued, so a valid call would delete it.
    case(&["VTRR.CANCEL", "q"], &arity("vtrr.cancel"));
    case(&["VTRR.CANCEL", "", "c"], empty_name);
    case(&["VTRR.CANCEL", "q", "c", ""], empty_id);
    case(&["VTRR.CANCEL", "q", "", "c"], empty_id);

    // VTRR.LEASE ... WITHCOUNTERS (c is queued: a valid call would lease it).
    case(
        &["VTRR.LEASE", "q", "0", "WITHCOUNTERS"],
        "ERR lease-ms must be an integer between 1 and 315360000000",
    );
    case(&["VTRR.LEASE", "q", "100", "WITHCOUNTERS", "1"], syntax);
    case(&["VTRR.LEASE", "q", "100", "WITHCOUNTERS", "BLOCK"], syntax);
    case(
        &["VTRR.LEASE", "q", "100", "WITHCOUNTERS", "COUNT", "0"],
        count,
    );

    let before = refusals.assert_refused(&mut con, "q");
    // The same calls, well formed, do change it: the cases above were
    // refused for their bad argument, not for want of anything to do.
    let nacked: i64 = command(&["VTRR.NACK", "q", "a", t, "DELAY", "10"])
        .query(&mut con)
        .unwrap();
    assert_eq!(nacked, 1);
    let revived: i64 = command(&["VTRR.REVIVE", "q", "b"]).query(&mut con).unwrap();
    assert_eq!(revived, 1);
    let cancelled: i64 = command(&["VTRR.CANCEL", "q", "c"]).query(&mut con).unwrap();
    assert_eq!(cancelled, 1);
    assert_ne!(before, dump_queue(&mut con, "q"));
    assert_invariants(&mut con, "q");
}

#[test]
fn a_module_key_of_the_wrong_type_is_refused_by_every_command_that_opens_it() {
    if keys_layout_only(
        "plants each of the keys layout's own keys with the wrong Redis type (a native queue has no such keys)",
    ) {
        return;
    }
    let (_server, mut con, token) = queue_in_every_state_on_a_quiet_server();
    let t = token.as_str();
    // a's lease expires now: RECLAIM and LEASE too would write if let through.
    expire_lease(&mut con, "q", b"a", t);
    for (suffix, calls) in module_key_openers(t) {
        let key = format!("vtrr:q:{suffix}");
        // None: `rank_leased`, empty with no partition at its cap.
        let original: Option<Vec<u8>> = redis::cmd("DUMP").arg(&key).query(&mut con).unwrap();
        let _: () = redis::cmd("DEL").arg(&key).query(&mut con).unwrap();
        // A hash where a sorted set belongs and the other way round.
        let sorted_sets = [
            "delayed",
            "dead",
            "held",
            "parking",
            "rank_queued",
            "rank_waiting",
            "rank_leased",
            "rank_dead",
            "throttled",
            "finished",
            "schedule_due",
        ];
        let expected = if sorted_sets.contains(&suffix) {
            let _: () = redis::cmd("HSET")
                .arg(&key)
                .arg("f")
                .arg("v")
                .query(&mut con)
                .unwrap();
            "a sorted set"
        } else {
            let _: () = redis::cmd("ZADD")
                .arg(&key)
                .arg(1)
                .arg("m")
                .query(&mut con)
                .unwrap();
            "a hash"
        };
        let before = dump_all(&mut con);
        for words in &calls {
            let got = error_of(command(words).query(&mut con));
            assert_eq!(
                got,
                format!(
                    "WRONGTYPE Operation against a key holding the wrong kind of value: {key} must be {expected}"
                ),
                "{words:?} with {key} of the wrong type"
            );
            assert_eq!(before, dump_all(&mut con), "{words:?} wrote something");
        }
        let _: () = redis::cmd("DEL").arg(&key).query(&mut con).unwrap();
        if let Some(original) = original {
            let _: () = redis::cmd("RESTORE")
                .arg(&key)
                .arg(0)
                .arg(original)
                .query(&mut con)
                .unwrap();
        }
    }
    // Put right, the same calls go through.
    assert_invariants(&mut con, "q");
    assert_eq!(reclaim(&mut con, "q"), 1);
    let revived: i64 = command(&["VTRR.REVIVE", "q", "b"]).query(&mut con).unwrap();
    assert_eq!(revived, 1);
    let resumed: i64 = command(&["VTRR.RESUME", "q", "h"]).query(&mut con).unwrap();
    assert_eq!(resumed, 1);
    assert_invariants(&mut con, "q");
}

#[test]
fn idle_lifecycle_and_tenant_calls_do_not_abort_a_watching_client_and_real_changes_do() {
    let (server, mut worker, token) = queue_in_every_state_on_a_quiet_server();
    let mut watcher = server.connect();
    let t = token.as_str();
    // Settings to repeat: h (paused, h1 held) with its own cap and share,
    // and a default cap.
    let limited: Value = command(&["VTRR.LIMIT", "q", "h", "CONCURRENCY", "2", "SHARE", "3"])
        .query(&mut worker)
        .unwrap();
    assert_eq!(limited, Value::Okay);
    set_policy(&mut worker, "q", &["DEFAULT-CONCURRENCY", "4"]);
    let keys = all_queue_keys("q");
    let settings = limit_reply;
    let untouched = keys_untouched_by(&mut watcher, &keys, |_| {
        let idle: [(Vec<&str>, i64); 20] = [
            (vec!["VTRR.NACK", "q", "a", "stale"], 0),
            (vec!["VTRR.NACK", "q", "a", "stale", "DELAY", "10"], 0),
            (vec!["VTRR.NACK", "q", "a", "stale", "DEAD"], 0),
            (vec!["VTRR.NACK", "q", "missing", "stale"], 0),
            (vec!["VTRR.CANCEL", "q", "missing"], 0),
            (vec!["VTRR.CANCEL", "q", "missing", "other"], 0),
            (vec!["VTRR.REVIVE", "q", "missing"], 0),
            (vec!["VTRR.REVIVE", "q", "a"], 0), // leased
            (vec!["VTRR.REVIVE", "q", "c"], 0), // queued
            (vec!["VTRR.REVIVE", "q", "d"], 0), // delayed
            (vec!["VTRR.DEFER", "q", "60000", "p", "a", "1", "X"], 0),
            (vec!["VTRR.DEFER", "q", "60000", "p", "b", "1", "X"], 0),
            (vec!["VTRR.DEFER", "q", "60000", "p", "c", "1", "X"], 0),
            (vec!["VTRR.DEFER", "q", "60000", "p", "d", "1", "X"], 0),
            (vec!["VTRR.DEFER", "q", "0", "p", "c", "1", "X"], 0),
            (vec!["VTRR.ENQUEUE", "q", "p", "b", "1", "X"], 0), // dead
            (vec!["VTRR.ENQUEUE", "q", "p", "d", "1", "X"], 0), // delayed
            (vec!["VTRR.ACK", "q", "a", "stale"], 0),
            (vec!["VTRR.RENEW", "q", "a", "stale", "5"], 0),
            (vec!["VTRR.RECLAIM", "q"], 0),
        ];
        for (words, expected) in idle {
            let got: i64 = command(&words).query(&mut worker).unwrap();
            assert_eq!(got, expected, "{words:?}");
        }
        let dead: Vec<Value> = command(&["VTRR.DEAD", "q"]).query(&mut worker).unwrap();
        assert_eq!(dead.len(), 1);
        let dead: Vec<Value> = command(&["VTRR.DEAD", "q", "COUNT", "5"])
            .query(&mut worker)
            .unwrap();
        assert_eq!(dead.len(), 1);
        let policy: Vec<Value> = command(&["VTRR.POLICY", "q"]).query(&mut worker).unwrap();
        assert_eq!(
            policy,
            policy_reply(
                Value::Int(4),
                Value::Nil,
                Value::Int(3),
                Value::Int(86_400_000)
            )
        );
        let _: Value = command(&["VTRR.STATS", "q"]).query(&mut worker).unwrap();
        // The tenant controls, each asked for what already holds.
        let idle_controls: [(Vec<&str>, Value); 14] = [
            (vec!["VTRR.PAUSE", "q", "h"], Value::Int(0)), // paused
            (vec!["VTRR.RESUME", "q", "p"], Value::Int(0)), // running
            (vec!["VTRR.RESUME", "q", "never-seen"], Value::Int(0)),
            (vec!["VTRR.LIMIT", "q", "h"], settings(Value::Int(2), 1, 3)),
            (vec!["VTRR.LIMIT", "q", "p"], settings(Value::Nil, 0, 1)),
            (
                vec!["VTRR.LIMIT", "q", "never-seen"],
                settings(Value::Nil, 0, 1),
            ),
            (
                vec!["VTRR.LIMIT", "q", "h", "CONCURRENCY", "2"],
                Value::Okay,
            ),
            (vec!["VTRR.LIMIT", "q", "h", "SHARE", "3"], Value::Okay),
            (
                vec!["VTRR.LIMIT", "q", "h", "SHARE", "3", "CONCURRENCY", "2"],
                Value::Okay,
            ),
            (
                vec!["VTRR.LIMIT", "q", "p", "CONCURRENCY", "NONE", "SHARE", "1"],
                Value::Okay,
            ),
            (
                vec!["VTRR.LIMIT", "q", "never-seen", "CONCURRENCY", "NONE"],
                Value::Okay,
            ),
            (
                vec!["VTRR.POLICY", "q", "DEFAULT-CONCURRENCY", "4"],
                Value::Okay,
            ),
            (
                vec!["VTRR.POLICY", "q", "MAX-TIMEOUTS", "3", "MAX-NACKS", "NONE"],
                Value::Okay,
            ),
            // Counts already right (the paused and capped counts too).
            (vec!["VTRR.RECOUNT", "q"], Value::Int(0)),
        ];
        for (words, expected) in idle_controls {
            let got: Value = command(&words).query(&mut worker).unwrap();
            assert_eq!(got, expected, "{words:?}");
        }
        for words in [
            &["VTRR.PARTITIONS", "q"][..],
            &["VTRR.PARTITIONS", "q", "COUNT", "1"],
            &["VTRR.PARTITIONS", "q", "CURSOR", "0", "COUNT", "100"],
            &["VTRR.PARTITIONS", "q", "PARTITION", "h"],
            &["VTRR.PARTITIONS", "q", "PARTITION", "never-seen"],
        ] {
            let (_, entries): (String, Vec<Value>) = command(words).query(&mut worker).unwrap();
            assert!(!entries.is_empty(), "{words:?}");
        }
        assert_invariants(&mut worker, "q");
    });
    assert!(
        untouched,
        "EXEC aborted by a lifecycle or tenant command that changed nothing"
    );
    // Each real change aborts it.
    let changes: [(Vec<&str>, Value); 15] = [
        (
            vec!["VTRR.NACK", "q", "a", t, "DELAY", "60000"],
            Value::Int(1),
        ),
        (vec!["VTRR.CANCEL", "q", "a"], Value::Int(1)), // delayed now
        (vec!["VTRR.REVIVE", "q", "b"], Value::Int(1)),
        (
            vec!["VTRR.DEFER", "q", "60000", "p", "e", "1", "E"],
            Value::Int(1),
        ),
        (vec!["VTRR.POLICY", "q", "MAX-NACKS", "2"], Value::Okay),
        (
            vec!["VTRR.POLICY", "q", "MAX-TIMEOUTS", "NONE"],
            Value::Okay,
        ),
        (vec!["VTRR.CANCEL", "q", "d"], Value::Int(1)),
        // b (revived) and c are queued in p, whose lease of a has ended.
        (
            vec!["VTRR.LIMIT", "q", "h", "CONCURRENCY", "3"],
            Value::Okay,
        ),
        (vec!["VTRR.LIMIT", "q", "h", "SHARE", "1"], Value::Okay),
        (
            vec!["VTRR.LIMIT", "q", "h", "CONCURRENCY", "NONE"],
            Value::Okay,
        ),
        (vec!["VTRR.PAUSE", "q", "p"], Value::Int(1)),
        (vec!["VTRR.RESUME", "q", "p"], Value::Int(1)),
        (vec!["VTRR.RESUME", "q", "h"], Value::Int(1)),
        (
            vec!["VTRR.POLICY", "q", "DEFAULT-CONCURRENCY", "2"],
            Value::Okay,
        ),
        (
            vec!["VTRR.POLICY", "q", "DEFAULT-CONCURRENCY", "NONE"],
            Value::Okay,
        ),
    ];
    for (words, expected) in changes {
        let untouched = keys_untouched_by(&mut watcher, &keys, |_| {
            let got: Value = command(&words).query(&mut worker).unwrap();
            assert_eq!(got, expected, "{words:?}");
        });
        assert!(!untouched, "{words:?} changed the queue but EXEC ran");
    }
    // A RECOUNT that corrects a count (h's record lost by hand) too.
    with_keys_layout(&mut worker, "q", |con| {
        let _: () = redis::cmd("HDEL")
            .arg("vtrr:q:partitions")
            .arg("h")
            .query(con)
            .unwrap();
    });
    let untouched = keys_untouched_by(&mut watcher, &keys, |_| {
        let corrected: i64 = command(&["VTRR.RECOUNT", "q"]).query(&mut worker).unwrap();
        assert_eq!(corrected, 1);
    });
    assert!(!untouched, "RECOUNT corrected a record but EXEC ran");
    let untouched = keys_untouched_by(&mut watcher, &keys, |_| {
        let leased: Vec<Value> = command(&["VTRR.LEASE", "q", "60000", "WITHCOUNTERS"])
            .query(&mut worker)
            .unwrap();
        assert_eq!(leased.len(), 5, "{leased:?}");
    });
    assert!(!untouched, "LEASE ... WITHCOUNTERS leased but EXEC ran");
    assert_invariants(&mut worker, "q");
}

#[test]
fn lifecycle_commands_work_inside_multi_and_lua() {
    let server = quiet_server();
    let mut con = server.connect();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("VTRR.POLICY")
        .arg("q")
        .arg("MAX-NACKS")
        .arg(5)
        .cmd("VTRR.ENQUEUE")
        .arg("q")
        .arg("p")
        .arg("a")
        .arg(1)
        .arg("A")
        .cmd("VTRR.DEFER")
        .arg("q")
        .arg(60_000)
        .arg("p")
        .arg("later")
        .arg(1)
        .arg("L")
        .cmd("VTRR.DEFER")
        .arg("q")
        .arg(0)
        .arg("p")
        .arg("now")
        .arg(1)
        .arg("N")
        .cmd("VTRR.LEASE")
        .arg("q")
        .arg(60_000)
        .arg("WITHCOUNTERS")
        .cmd("VTRR.NACK")
        .arg("q")
        .arg("a")
        .arg("stale")
        .cmd("VTRR.CANCEL")
        .arg("q")
        .arg("now")
        .cmd("VTRR.REVIVE")
        .arg("q")
        .arg("a")
        .cmd("VTRR.DEAD")
        .arg("q")
        .cmd("VTRR.POLICY")
        .arg("q")
        .query(&mut con)
        .unwrap();
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    assert_eq!(replies[0], Value::Okay);
    assert_eq!(replies[1..4], [Value::Int(1), Value::Int(1), Value::Int(1)]);
    let Value::Array(leased) = &replies[4] else {
        panic!("LEASE in MULTI: {:?}", replies[4]);
    };
    assert_eq!(leased.len(), 5, "{leased:?}");
    assert_eq!(
        (&leased[0], &leased[1], &leased[3], &leased[4]),
        (&bulk("a"), &bulk("A"), &Value::Int(0), &Value::Int(0))
    );
    assert_eq!(replies[5..8], [Value::Int(0), Value::Int(1), Value::Int(0)]);
    assert_eq!(replies[8], Value::Array(vec![]));
    assert_eq!(
        replies[9],
        Value::Array(policy_reply(
            Value::Nil,
            Value::Int(5),
            Value::Nil,
            Value::Nil
        ))
    );
    assert_invariants(&mut con, "q");

    // A script: the token one call returns feeds the next.
    let script = r#"
        local q = KEYS[1]
        local added = redis.call('VTRR.ENQUEUE', q, 'p', 'b', 1, 'B')
        local first = redis.call('VTRR.LEASE', q, 60000, 'WITHCOUNTERS')
        local requeued = redis.call('VTRR.NACK', q, first[1], first[3])
        local second = redis.call('VTRR.LEASE', q, 60000, 'WITHCOUNTERS')
        local buried = redis.call('VTRR.NACK', q, second[1], second[3], 'DEAD')
        local dead = redis.call('VTRR.DEAD', q, 'COUNT', 5)
        local revived = redis.call('VTRR.REVIVE', q, second[1])
        local deferred = redis.call('VTRR.DEFER', q, 60000, 'p', 'lua', 1, 'U')
        local policy = redis.call('VTRR.POLICY', q, 'MAX-TIMEOUTS', 2)
        local cancelled = redis.call('VTRR.CANCEL', q, 'later', 'lua', 'missing')
        return {added, first[1], requeued, second[1], second[5], buried, #dead, dead[1][8],
                revived, deferred, policy['ok'], cancelled}
    "#;
    let got: Vec<Value> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("q")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        got,
        [
            Value::Int(1),
            bulk("b"),
            Value::Int(1),
            bulk("b"),
            Value::Int(1),
            Value::Int(1),
            Value::Int(1),
            bulk("nack"),
            Value::Int(1),
            Value::Int(1),
            bulk("OK"),
            Value::Int(2),
        ]
    );
    let policy: Vec<Value> = command(&["VTRR.POLICY", "q"]).query(&mut con).unwrap();
    assert_eq!(
        policy,
        policy_reply(Value::Nil, Value::Int(5), Value::Int(2), Value::Nil)
    );
    // b is queued again, revived with its counters reset.
    let leased: Vec<Value> = command(&["VTRR.LEASE", "q", "60000", "WITHCOUNTERS"])
        .query(&mut con)
        .unwrap();
    assert_eq!(
        (&leased[0], &leased[3], &leased[4]),
        (&bulk("b"), &Value::Int(0), &Value::Int(0))
    );
    assert_invariants(&mut con, "q");
}

#[test]
fn tenant_controls_fire_module_keyspace_notifications() {
    let server = notifying_server("0");
    let mut con = server.connect();
    let mut sub_con = server.connect();
    let mut pubsub = keyspace_events(&mut sub_con, "vtrr:q:queue");
    let ok = |con: &mut redis::Connection, words: &[&str]| {
        let reply: Value = command(words).query(con).unwrap();
        assert_eq!(reply, Value::Okay, "{words:?}");
    };
    let int =
        |con: &mut redis::Connection, words: &[&str]| -> i64 { command(words).query(con).unwrap() };
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    ok(&mut con, &["VTRR.LIMIT", "q", "p", "CONCURRENCY", "1"]);
    ok(&mut con, &["VTRR.LIMIT", "q", "p", "CONCURRENCY", "1"]); // no event
    let _: Value = command(&["VTRR.LIMIT", "q", "p"]).query(&mut con).unwrap(); // no event
    lease(&mut con, "q", 60_000).unwrap();
    // b, queued before the cap, was parked in `held` by the LIMIT: nothing
    // is leased, and nothing moves.
    assert_eq!(lease(&mut con, "q", 60_000), None);
    assert_eq!(int(&mut con, &["VTRR.PAUSE", "q", "p"]), 1);
    assert_eq!(int(&mut con, &["VTRR.PAUSE", "q", "p"]), 0); // no event
    assert_eq!(int(&mut con, &["VTRR.RESUME", "q", "r"]), 0); // no event
    let _: Value = command(&["VTRR.PARTITIONS", "q"]).query(&mut con).unwrap(); // no event
    partition_view(&mut con, "q", "p"); // no event
    assert_eq!(int(&mut con, &["VTRR.RECOUNT", "q"]), 0); // no event

    // r's record lost by hand (a hash event, not a module one): RECOUNT
    // writes it again. On a native queue, losing it by hand takes two
    // conversions, each with its module event.
    enqueue_items(&mut con, "q", &[("r", "c", 1, b"C")]);
    with_keys_layout(&mut con, "q", |con| {
        let _: () = redis::cmd("HDEL")
            .arg("vtrr:q:partitions")
            .arg("r")
            .query(con)
            .unwrap();
    });
    assert_eq!(int(&mut con, &["VTRR.RECOUNT", "q"]), 1);
    assert_eq!(int(&mut con, &["VTRR.RESUME", "q", "p"]), 1);
    ok(&mut con, &["VTRR.POLICY", "q", "DEFAULT-CONCURRENCY", "3"]);
    ok(&mut con, &["VTRR.POLICY", "q", "DEFAULT-CONCURRENCY", "3"]); // no event
    enqueue_items(&mut con, "q", &[("p", "last", 1, b"L")]);
    let planted: &[&str] = if native_layout() {
        &["vtrr.convert", "vtrr.convert"]
    } else {
        &[]
    };
    let expected: Vec<&str> = ["vtrr.enqueue", "vtrr.limit", "vtrr.lease", "vtrr.pause"]
        .into_iter()
        .chain(["vtrr.enqueue"])
        .chain(planted.iter().copied())
        .chain(["vtrr.recount", "vtrr.resume", "vtrr.policy", "vtrr.enqueue"])
        .collect();
    assert_eq!(next_events(&mut pubsub, expected.len()), expected);
    assert_invariants(&mut con, "q");
}

#[test]
fn tenant_commands_work_inside_multi_and_lua() {
    let server = quiet_server();
    let mut con = server.connect();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("VTRR.LIMIT")
        .arg("q")
        .arg("p")
        .arg("CONCURRENCY")
        .arg(1)
        .arg("SHARE")
        .arg(2)
        .cmd("VTRR.PAUSE")
        .arg("q")
        .arg("r")
        .cmd("VTRR.ENQUEUE")
        .arg("q")
        .arg(&["p", "a", "1", "A", "p", "b", "1", "B", "r", "c", "1", "C"])
        .cmd("VTRR.LEASE")
        .arg("q")
        .arg(60_000)
        .arg("COUNT")
        .arg(5)
        .cmd("VTRR.LIMIT")
        .arg("q")
        .arg("p")
        .cmd("VTRR.PARTITIONS")
        .arg("q")
        .arg("PARTITION")
        .arg("p")
        .cmd("VTRR.RESUME")
        .arg("q")
        .arg("r")
        .cmd("VTRR.RESUME")
        .arg("q")
        .arg("r")
        .cmd("VTRR.LEASE")
        .arg("q")
        .arg(60_000)
        .arg("COUNT")
        .arg(5)
        .cmd("VTRR.RECOUNT")
        .arg("q")
        .cmd("VTRR.POLICY")
        .arg("q")
        .arg("DEFAULT-CONCURRENCY")
        .arg(2)
        .cmd("VTRR.POLICY")
        .arg("q")
        .query(&mut con)
        .unwrap();
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    let leased_ids = |reply: &Value| -> Vec<Vec<u8>> {
        leases_in(reply).into_iter().map(|(id, _)| id).collect()
    };
    assert_eq!(replies[..3], [Value::Okay, Value::Int(1), Value::Int(3)]);
    // p's cap of 1 and r's pause hold b and c back.
    assert_eq!(leased_ids(&replies[3]), [b"a".to_vec()]);
    assert_eq!(replies[4], limit_reply(Value::Int(1), 0, 2));
    let (cursor, views): (String, Vec<View>) = redis::from_redis_value(replies[5].clone()).unwrap();
    assert_eq!((cursor.as_str(), views.len()), ("0", 1));
    for (field, expected) in [
        ("partition", bulk("p")),
        ("queued", Value::Int(1)),
        ("held", Value::Int(1)),
        ("leased", Value::Int(1)),
        ("concurrency", Value::Int(1)),
        ("concurrency-in-force", Value::Int(1)),
        ("share", Value::Int(2)),
        ("paused", Value::Int(0)),
    ] {
        assert_eq!(views[0][field], expected, "{field} in {:?}", views[0]);
    }
    assert_eq!(replies[6..8], [Value::Int(1), Value::Int(0)]);
    assert_eq!(leased_ids(&replies[8]), [b"c".to_vec()]);
    assert_eq!(replies[9..11], [Value::Int(0), Value::Okay]);
    assert_eq!(
        replies[11],
        Value::Array(policy_reply(
            Value::Int(2),
            Value::Nil,
            Value::Nil,
            Value::Nil
        ))
    );
    assert_invariants(&mut con, "q");

    // A script: p's cap lifted lets b in (up to the default cap of 2); a
    // pause holds d back until RESUME, and b's ACK frees a slot for it.
    let script = r#"
        local q = KEYS[1]
        local lifted = redis.call('VTRR.LIMIT', q, 'p', 'CONCURRENCY', 'NONE')
        local first = redis.call('VTRR.LEASE', q, 60000, 'COUNT', 5)
        local paused = redis.call('VTRR.PAUSE', q, 'p')
        local again = redis.call('VTRR.PAUSE', q, 'p')
        local added = redis.call('VTRR.ENQUEUE', q, 'p', 'd', 1, 'D')
        local none = redis.call('VTRR.LEASE', q, 60000)
        local view = redis.call('VTRR.PARTITIONS', q, 'PARTITION', 'p')
        local settings = redis.call('VTRR.LIMIT', q, 'p')
        local acked = redis.call('VTRR.ACK', q, first[1][1], first[1][3])
        local resumed = redis.call('VTRR.RESUME', q, 'p')
        local second = redis.call('VTRR.LEASE', q, 60000)
        local recounted = redis.call('VTRR.RECOUNT', q)
        local default = redis.call('VTRR.POLICY', q, 'DEFAULT-CONCURRENCY', 'NONE')
        return {lifted['ok'], #first, first[1][1], paused, again, added, tostring(none),
                view[1], view[2][1], settings, acked, resumed, second[1], recounted,
                default['ok']}
    "#;
    let got: Vec<Value> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("q")
        .query(&mut con)
        .unwrap();
    assert_eq!(got.len(), 15, "{got:?}");
    assert_eq!(
        got[..8],
        [
            bulk("OK"),
            Value::Int(1),
            bulk("b"),
            Value::Int(1),
            Value::Int(0),
            Value::Int(1),
            bulk("false"),
            bulk("0"),
        ]
    );
    let view: View = redis::from_redis_value(got[8].clone()).unwrap();
    for (field, expected) in [
        ("partition", bulk("p")),
        ("queued", Value::Int(1)),
        ("held", Value::Int(1)),
        ("leased", Value::Int(2)),
        ("paused", Value::Int(1)),
        ("concurrency-in-force", Value::Int(2)),
    ] {
        assert_eq!(view[field], expected, "{field} in {view:?}");
    }
    assert_eq!(got[9], limit_reply(Value::Nil, 1, 2));
    assert_eq!(
        got[10..],
        [
            Value::Int(1),
            Value::Int(1),
            bulk("d"),
            Value::Int(0),
            bulk("OK")
        ]
    );
    assert_invariants(&mut con, "q");
}

#[test]
fn a_client_cannot_send_the_internal_apply_command() {
    let (_server, mut con, _token) = queue_in_every_state_on_a_quiet_server();
    let before = dump_all(&mut con);
    for words in [
        &["VTRR.APPLY", "q", "1", "DUE", "1", "16"][..],
        &[
            "VTRR.APPLY",
            "q",
            "1",
            "LEASE",
            "99999999999999",
            "1000",
            "1",
            "16",
            "t",
        ],
        &["VTRR.APPLY", "q", "2", "DUE", "1", "16"],
    ] {
        assert_eq!(
            error_of(command(words).query(&mut con)),
            "ERR VTRR.APPLY is internal: only a master's replication stream or the AOF may send it",
            "{words:?}"
        );
        // Not from a script or a transaction either.
        let script = format!(
            "return redis.call({})",
            words
                .iter()
                .map(|w| format!("'{w}'"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let error = error_of(redis::cmd("EVAL").arg(script).arg(0).query(&mut con));
        assert!(error.contains("VTRR.APPLY is internal"), "{error}");
    }
    assert_eq!(dump_all(&mut con), before);
}

/// VTRR.POLICY's reply (RESP2) with the dead-letter limits, the default cap
/// and the RESULT-TTL given, and no rate, queue-wide limit or dedup.
fn policy_reply(
    default_concurrency: Value,
    max_nacks: Value,
    max_timeouts: Value,
    result_ttl: Value,
) -> Vec<Value> {
    let field = |name: &str| Value::BulkString(name.as_bytes().to_vec());
    vec![
        field("burst"),
        Value::Nil,
        field("concurrency"),
        Value::Nil,
        field("dedup-ms"),
        Value::Nil,
        field("default-burst"),
        Value::Nil,
        field("default-concurrency"),
        default_concurrency,
        field("default-max-queued"),
        Value::Nil,
        field("default-per-ms"),
        Value::Nil,
        field("default-rate"),
        Value::Nil,
        field("max-nacks"),
        max_nacks,
        field("max-timeouts"),
        max_timeouts,
        field("per-ms"),
        Value::Nil,
        field("rate"),
        Value::Nil,
        field("result-ttl-ms"),
        result_ttl,
    ]
}

/// VTRR.LIMIT's reply (RESP2) without a rate or MAX-QUEUED: those fields nil.
fn limit_reply(cap: Value, paused: i64, share: i64) -> Value {
    let field = |name: &str| Value::BulkString(name.as_bytes().to_vec());
    Value::Array(vec![
        field("burst"),
        Value::Nil,
        field("concurrency"),
        cap,
        field("max-queued"),
        Value::Nil,
        field("paused"),
        Value::Int(paused),
        field("per-ms"),
        Value::Nil,
        field("rate"),
        Value::Nil,
        field("share"),
        Value::Int(share),
    ])
}
