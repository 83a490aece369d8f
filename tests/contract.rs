//! What every VTRR command promises as a Redis command: clear errors for
//! bad input and WRONGTYPE before any write, with nothing changed; idle
//! calls abort no WATCH; keyspace notifications; COMMAND INFO arity, flags
//! and key position; atomic inside MULTI and Lua.

mod common;

use common::*;

fn error_of(result: redis::RedisResult<Value>) -> String {
    let error = result.expect_err("expected an error reply");
    format!(
        "{} {}",
        error.code().unwrap_or("?"),
        error.detail().unwrap_or("")
    )
}

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A"), ("p", "b", 1, b"B")]);
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    let id = String::from_utf8(id).unwrap();
    let before = dump_queue(&mut con, "q");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["VTRR.ENQUEUE", "q", "p", "x", "1"],
            "ERR wrong number of arguments for 'vtrr.enqueue' command",
        ),
        (
            vec!["VTRR.ENQUEUE", "q", "p", "x", "1", "X", "p2"],
            "ERR wrong number of arguments for 'vtrr.enqueue' command",
        ),
        (
            vec!["VTRR.ENQUEUE", "", "p", "x", "1", "X"],
            "ERR queue name must not be empty",
        ),
        (
            vec!["VTRR.ENQUEUE", "q", "p", "", "1", "X"],
            "ERR id must not be empty",
        ),
        (
            vec!["VTRR.ENQUEUE", "q", "p", "x", "0", "X"],
            "ERR weight must be an integer between 1 and 1000000000",
        ),
        (
            vec!["VTRR.ENQUEUE", "q", "p", "x", "-1", "X"],
            "ERR weight must be an integer between 1 and 1000000000",
        ),
        (
            vec!["VTRR.ENQUEUE", "q", "p", "x", "1.5", "X"],
            "ERR weight must be an integer between 1 and 1000000000",
        ),
        (
            vec!["VTRR.ENQUEUE", "q", "p", "x", "99999999999999999999", "X"],
            "ERR weight must be an integer between 1 and 1000000000",
        ),
        // The first item is valid: the bad second one refuses the whole call.
        (
            vec![
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
            "ERR weight must be an integer between 1 and 1000000000",
        ),
        (
            vec!["VTRR.LEASE", "q"],
            "ERR wrong number of arguments for 'vtrr.lease' command",
        ),
        (
            vec!["VTRR.LEASE", "q", "0"],
            "ERR lease-ms must be an integer between 1 and 315360000000",
        ),
        (
            vec!["VTRR.LEASE", "q", "ten"],
            "ERR lease-ms must be an integer between 1 and 315360000000",
        ),
        (
            vec!["VTRR.LEASE", "q", "100", "COUNT", "0"],
            "ERR COUNT must be a positive integer",
        ),
        (vec!["VTRR.LEASE", "q", "100", "COUNT"], "ERR syntax error"),
        (
            vec!["VTRR.LEASE", "q", "100", "LIMIT", "1"],
            "ERR syntax error",
        ),
        (
            vec!["VTRR.ACK", "q", &id],
            "ERR wrong number of arguments for 'vtrr.ack' command",
        ),
        (
            vec!["VTRR.ACK", "q", &id, &token, "b"],
            "ERR wrong number of arguments for 'vtrr.ack' command",
        ),
        (
            vec!["VTRR.ACK", "q", &id, &token, "", "t"],
            "ERR id must not be empty",
        ),
        (
            vec!["VTRR.RENEW", "q", &id, &token],
            "ERR wrong number of arguments for 'vtrr.renew' command",
        ),
        (
            vec!["VTRR.RENEW", "q", &id, &token, "-5"],
            "ERR lease-ms must be an integer between 1 and 315360000000",
        ),
        (
            vec!["VTRR.RECLAIM", "q", "LIMIT", "0"],
            "ERR LIMIT must be a positive integer",
        ),
        (vec!["VTRR.RECLAIM", "q", "BOGUS", "1"], "ERR syntax error"),
        (
            vec!["VTRR.STATS", "q", "extra"],
            "ERR wrong number of arguments for 'vtrr.stats' command",
        ),
    ];
    for (args, expected) in cases {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        let got = error_of(cmd.query(&mut con));
        assert_eq!(got, expected, "{args:?}");
        assert_eq!(
            before,
            dump_queue(&mut con, "q"),
            "{args:?} changed the queue"
        );
    }
}

#[test]
fn a_key_of_the_wrong_type_is_refused_before_any_write() {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = redis::cmd("SET")
        .arg("vtrr:q:meta")
        .arg("oops")
        .query(&mut con)
        .unwrap();
    let err = error_of(
        redis::cmd("VTRR.ENQUEUE")
            .arg("q")
            .arg("p")
            .arg("x")
            .arg(1)
            .arg("X")
            .query(&mut con),
    );
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
    let err = error_of(
        redis::cmd("VTRR.ENQUEUE")
            .arg("q")
            .arg("p")
            .arg("x")
            .arg(1)
            .arg("X")
            .query(&mut con),
    );
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
        let reclaimed: i64 = redis::cmd("VTRR.RECLAIM")
            .arg("q")
            .query(&mut worker)
            .unwrap();
        assert_eq!(reclaimed, 0);
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
    let server = Server::builder()
        .args(&["--notify-keyspace-events", "Kd"])
        .module_args(&["reclaim-interval-ms", "0"])
        .spawn();
    let mut con = server.connect();
    let mut sub_con = server.connect();
    let mut pubsub = sub_con.as_pubsub();
    pubsub.subscribe("__keyspace@0__:vtrr:q:queue").unwrap();
    pubsub
        .set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    enqueue_items(&mut con, "q", &[("p", "a", 1, b"A")]);
    lease(&mut con, "q", 1).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let reclaimed: i64 = redis::cmd("VTRR.RECLAIM").arg("q").query(&mut con).unwrap();
    assert_eq!(reclaimed, 1);
    let (id, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    renew(&mut con, "q", &id, &token, 60_000);
    ack(&mut con, "q", &id, "stale"); // no event
    ack(&mut con, "q", &id, &token);
    let mut events = Vec::new();
    while events.len() < 6 {
        let Ok(message) = pubsub.get_message() else {
            break;
        };
        events.push(message.get_payload::<String>().unwrap());
    }
    assert_eq!(
        events,
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
        ("vtrr.renew", 5, vec!["write", "module", "fast"]),
        ("vtrr.reclaim", -2, vec!["write", "module"]),
        ("vtrr.stats", 2, vec!["readonly", "module", "fast"]),
        ("vtrr.check", 2, vec!["readonly", "module"]),
    ];
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
    }
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
