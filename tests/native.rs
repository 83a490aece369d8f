//! The native layout as a Redis data type: VTRR.CONVERT both ways, the
//! choice of layout for new queues, RDB/AOF/DEBUG RELOAD, DUMP/RESTORE of
//! forged payloads, COPY/RENAME, MEMORY USAGE, lazy free, the internal
//! VTRR.LOAD and what a Lua script of the keys layout meets.

mod common;

use std::time::Duration;

use common::*;
use redis::Connection;

/// A server creating native queues, its timer off unless `module_args`
/// set it.
fn native_server(module_args: &[&str], args: &[&str]) -> Server {
    let mut all = vec!["default-layout", "native"];
    if !module_args.contains(&"reclaim-interval-ms") {
        all.extend(["reclaim-interval-ms", "0"]);
    }
    all.extend_from_slice(module_args);
    Server::builder().module_args(&all).args(args).spawn()
}

fn convert(con: &mut Connection, name: &str, to: &str) -> i64 {
    command(&["VTRR.CONVERT", name, to]).query(con).unwrap()
}

fn keys(con: &mut Connection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.sort();
    keys
}

/// A native queue big enough to need many chunks: 3,000 queued items over
/// 30 partitions with 64-byte payloads, 500 leased, 20 dead, 10 delayed,
/// a paused partition and a policy. The token of one lease (of `keep`).
fn big_native_queue(con: &mut Connection, name: &str) -> String {
    let payload = [b'x'; 64];
    for batch in 0..30 {
        let ids: Vec<String> = (0..100).map(|i| format!("t{batch}-{i}")).collect();
        let partition = format!("p{batch}");
        let items: Vec<(&str, &str, u64, &[u8])> = ids
            .iter()
            .map(|id| {
                (
                    partition.as_str(),
                    id.as_str(),
                    1 + (batch % 3) as u64,
                    &payload[..],
                )
            })
            .collect();
        assert_eq!(enqueue_items(con, name, &items), 100);
    }
    assert_eq!(enqueue_items(con, name, &[("p0", "keep", 1, b"K")]), 1);
    let leased = lease_count(con, name, 600_000, 500);
    for (id, _, token, _) in leased.iter().take(20) {
        assert_eq!(nack(con, name, id, token, &["DEAD"]), 1);
    }
    assert_eq!(
        defer_items(
            con,
            name,
            60_000,
            &[("p1", "d1", 1, b"D"), ("p2", "d2", 1, b"D")]
        ),
        2
    );
    let _: i64 = command(&["VTRR.PAUSE", name, "p3"]).query(con).unwrap();
    set_policy(con, name, &["MAX-NACKS", "5"]);
    let token = loop {
        let (id, _, token, _) = lease(con, name, 600_000).unwrap();
        if id == b"keep" {
            break token;
        }
        assert_eq!(ack(con, name, &id, &token), 1);
    };
    assert_invariants(con, name);
    token
}

#[test]
fn new_queues_take_the_default_layout_and_stats_says_which() {
    let server = Server::builder()
        .module_args(&["reclaim-interval-ms", "0", "default-layout", "keys"])
        .spawn();
    let mut con = server.connect();
    enqueue_one(&mut con, "k", "p", "a", "A");
    let _: () = command(&["CONFIG", "SET", "vtrr.default-layout", "native"])
        .query(&mut con)
        .unwrap();
    enqueue_one(&mut con, "n", "p", "a", "A");
    // A queue that exists keeps its layout whatever the default says.
    enqueue_one(&mut con, "k", "p", "b", "B");
    assert_eq!(layout_of(&mut con, "k"), "keys");
    assert_eq!(layout_of(&mut con, "n"), "native");
    let types: Vec<String> = ["vtrr:k:queue", "vtrr:n:queue"]
        .iter()
        .map(|key| redis::cmd("TYPE").arg(key).query(&mut con).unwrap())
        .collect();
    assert_eq!(types, ["zset", "vtrrqueue"]);
    assert!(keys(&mut con)
        .iter()
        .all(|k| !k.starts_with("vtrr:n:") || k == "vtrr:n:queue"));
    let default: Vec<String> = command(&["CONFIG", "GET", "vtrr.default-layout"])
        .query(&mut con)
        .unwrap();
    assert_eq!(default[1], "native");
}

#[test]
fn a_keys_layout_queue_with_nothing_queued_stays_in_the_keys_layout() {
    let server = native_server(&[], &[]);
    let mut con = server.connect();
    let _: () = command(&["CONFIG", "SET", "vtrr.default-layout", "keys"])
        .query(&mut con)
        .unwrap();
    enqueue_one(&mut con, "q", "p", "a", "A");
    let (_, _, token, _) = lease(&mut con, "q", 60_000).unwrap();
    let _: () = command(&["CONFIG", "SET", "vtrr.default-layout", "native"])
        .query(&mut con)
        .unwrap();
    // `vtrr:q:queue` is gone (nothing queued), the lease keys are not.
    assert!(!exists(&mut con, "vtrr:q:queue"));
    assert_eq!(layout_of(&mut con, "q"), "keys");
    enqueue_one(&mut con, "q", "p", "b", "B");
    assert_eq!(layout_of(&mut con, "q"), "keys");
    assert_eq!(ack(&mut con, "q", b"a", &token), 1);
    assert_invariants(&mut con, "q");
}

#[test]
fn convert_moves_a_queue_in_every_state_both_ways_and_its_leases_still_ack() {
    let server = Server::builder()
        .module_args(&["reclaim-interval-ms", "0", "default-layout", "keys"])
        .spawn();
    let mut con = server.connect();
    let token = queue_in_every_state(&mut con, "q");
    let before = observed(&mut con, "q");
    let keys_before = contents_all(&mut con);

    assert_eq!(convert(&mut con, "q", "NATIVE"), 1);
    assert_eq!(layout_of(&mut con, "q"), "native");
    assert_eq!(keys(&mut con), ["vtrr:q:queue"]);
    assert_eq!(observed(&mut con, "q"), before);
    // Already native: nothing to do.
    assert_eq!(convert(&mut con, "q", "native"), 0);

    assert_eq!(convert(&mut con, "q", "KEYS"), 1);
    assert_eq!(layout_of(&mut con, "q"), "keys");
    assert_eq!(contents_all(&mut con), keys_before, "back to the same keys");

    assert_eq!(convert(&mut con, "q", "NATIVE"), 1);
    assert_eq!(
        ack(&mut con, "q", b"a", &token),
        1,
        "a lease outlives two moves"
    );
    assert_invariants(&mut con, "q");
    assert_eq!(convert(&mut con, "missing", "NATIVE"), 0);
    assert!(keys(&mut con).iter().all(|k| !k.contains("missing")));
}

/// CONVERT reads a hash of item ids by the ids its sets name and scans
/// for the rest: fields no set names (another client's, binary ones), an
/// id in two states at once and a hash no set names all arrive, and come
/// back, as they were.
#[test]
fn convert_carries_fields_no_set_names_both_ways() {
    let server = Server::builder()
        .module_args(&["reclaim-interval-ms", "0", "default-layout", "keys"])
        .spawn();
    let mut con = server.connect();
    queue_in_every_state(&mut con, "q");
    let raw: [&[&[u8]]; 6] = [
        &[b"HSET", b"vtrr:q:task", b"stray", b"x"],
        &[b"HSET", b"vtrr:q:task", b"nul\0id", b"\0\xff"],
        &[b"HSET", b"vtrr:q:meta", b"orphan", b"1:p"],
        &[b"HSET", b"vtrr:q:lease", b"unleased", b"token"],
        // k0001 is queued; now in flight as well.
        &[b"ZADD", b"vtrr:q:inflight", b"123", b"k0001"],
        &[b"HSET", b"vtrr:q:inflight_task", b"k0001", b"twice"],
    ];
    for words in raw {
        let _: i64 = redis::cmd(std::str::from_utf8(words[0]).unwrap())
            .arg(&words[1..])
            .query(&mut con)
            .unwrap();
    }
    let keys_before = contents_all(&mut con);

    assert_eq!(convert(&mut con, "q", "NATIVE"), 1);
    assert_eq!(keys(&mut con), ["vtrr:q:queue"]);
    let stray: Vec<Vec<u8>> = command(&["VTRR.INSPECT", "q", "task"])
        .query(&mut con)
        .unwrap();
    assert!(stray.windows(2).any(|w| w == [&b"nul\0id"[..], b"\0\xff"]));
    assert_eq!(convert(&mut con, "q", "KEYS"), 1);
    assert_eq!(contents_all(&mut con), keys_before, "back to the same keys");
}

#[test]
fn convert_refuses_bad_arguments_and_denied_keys_and_changes_nothing() {
    let server = Server::builder()
        .module_args(&["reclaim-interval-ms", "0", "default-layout", "keys"])
        .spawn();
    let mut con = server.connect();
    queue_in_every_state(&mut con, "q");
    let before = contents_all(&mut con);
    let error = error_of(command(&["VTRR.CONVERT", "q", "sideways"]).query(&mut con));
    assert_eq!(error, "ERR layout must be NATIVE or KEYS, not 'sideways'");
    let error = error_of(command(&["VTRR.CONVERT", "q"]).query(&mut con));
    assert!(error.contains("wrong number of arguments"), "{error}");
    // A user who may write the queue's sorted set but not its other keys
    // may not move them.
    let _: () = command(&[
        "ACL",
        "SETUSER",
        "half",
        "on",
        "nopass",
        "+@all",
        "~vtrr:q:queue",
    ])
    .query(&mut con)
    .unwrap();
    let _: () = command(&["AUTH", "half", "x"]).query(&mut con).unwrap();
    let error = error_of(command(&["VTRR.CONVERT", "q", "NATIVE"]).query(&mut con));
    assert!(error.starts_with("NOPERM"), "{error}");
    let _: () = command(&["AUTH", "default", "x"])
        .query(&mut con)
        .unwrap_or(());
    let mut con = server.connect();
    assert_eq!(contents_all(&mut con), before);
}

#[test]
fn a_native_queue_comes_back_from_rdb_aof_rewrite_and_debug_reload() {
    let mut server = native_server(
        &[],
        &[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--aof-use-rdb-preamble",
            "no",
            "--enable-debug-command",
            "yes",
        ],
    );
    let mut con = server.connect();
    let token = big_native_queue(&mut con, "q");
    let before = observed(&mut con, "q");
    let dump_before = contents_all(&mut con);

    let _: String = command(&["DEBUG", "RELOAD"]).query(&mut con).unwrap();
    assert_eq!(contents_all(&mut con), dump_before, "DEBUG RELOAD (RDB)");

    // The AOF as commands (ENQUEUE, VTRR.LOAD of the created queue, APPLY).
    server.kill();
    server.restart();
    let mut con = server.connect();
    assert_eq!(observed(&mut con, "q"), before, "AOF reload");
    assert_eq!(contents_all(&mut con), dump_before, "AOF reload");

    // Rewritten as VTRR.LOAD chunks.
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
    wait_until(Duration::from_secs(20), "AOF rewrite", || {
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut con)
            .unwrap();
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
    });
    let aof_dir = server.dir.join("appendonlydir");
    let rewritten: Vec<u8> = std::fs::read_dir(&aof_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".base."))
        .flat_map(|e| std::fs::read(e.path()).unwrap())
        .collect();
    let loads = rewritten.windows(9).filter(|w| w == b"VTRR.LOAD").count();
    assert!(loads > 1, "the rewrite is chunked: {loads} VTRR.LOAD");
    server.kill();
    server.restart();
    let mut con = server.connect();
    assert_eq!(contents_all(&mut con), dump_before, "rewritten AOF reload");
    assert_eq!(ack(&mut con, "q", b"keep", &token), 1);
    assert_invariants(&mut con, "q");
}

#[test]
fn dump_restore_copy_and_rename_carry_a_native_queue() {
    let server = native_server(&[], &[]);
    let mut con = server.connect();
    let token = big_native_queue(&mut con, "{a}");
    let before = observed(&mut con, "{a}");
    let dump: Vec<u8> = redis::cmd("DUMP")
        .arg("vtrr:{a}:queue")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("vtrr:{b}:queue")
        .arg(0)
        .arg(&dump)
        .query(&mut con)
        .unwrap();
    assert_eq!(observed(&mut con, "{b}"), before, "RESTORE");
    let copied: i64 = command(&["COPY", "vtrr:{a}:queue", "vtrr:{c}:queue"])
        .query(&mut con)
        .unwrap();
    assert_eq!(copied, 1);
    assert_eq!(observed(&mut con, "{c}"), before, "COPY");
    let _: () = command(&["RENAME", "vtrr:{a}:queue", "vtrr:{d}:queue"])
        .query(&mut con)
        .unwrap();
    assert_eq!(observed(&mut con, "{d}"), before, "RENAME");
    assert_eq!(stat(&mut con, "{a}", "queued"), 0);
    // Each is its own queue: acking in one leaves the others alone.
    assert_eq!(ack(&mut con, "{b}", b"keep", &token), 1);
    assert_eq!(ack(&mut con, "{c}", b"keep", &token), 1);
    assert_eq!(
        stat(&mut con, "{d}", "inflight"),
        stat(&mut con, "{b}", "inflight") + 1
    );
    for name in ["{b}", "{c}", "{d}"] {
        assert_invariants(&mut con, name);
    }
}

/// CRC-64/Jones as Redis seals DUMP payloads with it (reflected).
fn crc64(bytes: &[u8]) -> u64 {
    let mut crc = 0u64;
    for &b in bytes {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x95AC_9329_AC4B_C9B5
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// `body` (a DUMP payload without its CRC) sealed again.
fn sealed(body: &[u8]) -> Vec<u8> {
    let mut payload = body.to_vec();
    payload.extend_from_slice(&crc64(body).to_le_bytes());
    payload
}

#[test]
fn restore_refuses_forged_and_truncated_payloads_and_the_server_lives_on() {
    let server = native_server(&[], &[]);
    let mut con = server.connect();
    big_native_queue(&mut con, "q");
    let dump: Vec<u8> = redis::cmd("DUMP")
        .arg("vtrr:q:queue")
        .query(&mut con)
        .unwrap();
    let (body, crc) = dump.split_at(dump.len() - 8);
    assert_eq!(crc64(body).to_le_bytes(), crc, "the test's CRC is Redis's");
    let seed = seed();
    let mut rng = Rng::new(seed);
    let mut refused = 0;
    for round in 0..300 {
        let mut forged = body.to_vec();
        // Keep the RDB version trailer (two bytes) so the server reads on.
        let (value, version) = forged.split_at_mut(body.len() - 2);
        let version = version.to_vec();
        let mut value = value.to_vec();
        match round % 3 {
            0 => value.truncate(1 + rng.below(value.len() as u64 - 1) as usize),
            1 => {
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(value.len() as u64) as usize;
                    value[at] = rng.below(256) as u8;
                }
            }
            _ => {
                // A length field made huge: four 0xff somewhere.
                let at = rng.below(value.len() as u64 - 4) as usize;
                value[at..at + 4].copy_from_slice(&[0xff; 4]);
            }
        }
        value.extend_from_slice(&version);
        let restored = redis::cmd("RESTORE")
            .arg("vtrr:forged:queue")
            .arg(0)
            .arg(sealed(&value))
            .arg("REPLACE")
            .query::<()>(&mut con);
        match restored {
            Err(_) => refused += 1,
            // A change that still decodes is a queue: the commands cope,
            // with a reply or an error (a forged `current_virtual_time`
            // that is not an integer refuses a LEASE).
            Ok(()) => {
                let _: redis::RedisResult<redis::Value> =
                    command(&["VTRR.CHECK", "forged"]).query(&mut con);
                let _: redis::RedisResult<redis::Value> =
                    command(&["VTRR.LEASE", "forged", "1000", "COUNT", "10"]).query(&mut con);
            }
        }
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG", "seed {seed}, round {round}");
    }
    assert!(
        refused > 150,
        "only {refused} of 300 forged payloads refused"
    );
    assert_invariants(&mut con, "q");
}

#[test]
fn memory_usage_tells_the_truth_and_unlink_frees_in_the_background() {
    let server = native_server(&[], &[]);
    let mut con = server.connect();
    let used = |con: &mut Connection| -> i64 {
        let info: String = redis::cmd("INFO").arg("memory").query(con).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let start = used(&mut con);
    let payload = [b'x'; 64];
    let ids: Vec<String> = (0..20_000).map(|i| format!("task-{i:06}")).collect();
    for chunk in ids.chunks(1000) {
        let partition = format!("p{}", chunk[0].len() % 7);
        let items: Vec<(&str, &str, u64, &[u8])> = chunk
            .iter()
            .map(|id| (partition.as_str(), id.as_str(), 1, &payload[..]))
            .collect();
        enqueue_items(&mut con, "big", &items);
    }
    let grown = used(&mut con) - start;
    let reported: i64 = command(&["MEMORY", "USAGE", "vtrr:big:queue"])
        .query(&mut con)
        .unwrap();
    let ratio = reported as f64 / grown as f64;
    assert!(
        (0.75..1.33).contains(&ratio),
        "MEMORY USAGE {reported} vs used_memory grown by {grown}"
    );
    let lazyfreed = |con: &mut Connection| -> i64 {
        let info: String = redis::cmd("INFO").arg("memory").query(con).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("lazyfreed_objects:"))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    let freed_before = lazyfreed(&mut con);
    let unlinked: i64 = command(&["UNLINK", "vtrr:big:queue"])
        .query(&mut con)
        .unwrap();
    assert_eq!(unlinked, 1);
    wait_until(Duration::from_secs(5), "the background free", || {
        lazyfreed(&mut con) == freed_before + 1
    });
}

#[test]
fn vtrr_load_is_internal_and_checks_what_it_loads() {
    let server = native_server(&[], &[]);
    let mut con = server.connect();
    let error = error_of(command(&["VTRR.LOAD", "vtrr:x:queue", "\u{1}"]).query(&mut con));
    assert!(error.contains("is internal"), "{error}");
    assert!(!exists(&mut con, "vtrr:x:queue"));
}

#[test]
fn a_lua_script_of_the_keys_layout_gets_wrongtype_from_a_native_queue() {
    let server = native_server(&[], &[]);
    let mut con = server.connect();
    enqueue_one(&mut con, "q", "p", "a", "A");
    let error = error_of(
        redis::cmd("EVAL")
            .arg("return redis.call('ZADD', KEYS[1], 1, 'x')")
            .arg(1)
            .arg("vtrr:q:queue")
            .query::<redis::Value>(&mut con),
    );
    assert!(error.contains("WRONGTYPE"), "{error}");
    assert_eq!(stat(&mut con, "q", "queued"), 1);
}

#[test]
fn the_timer_finds_a_restored_native_queue_and_reclaims_its_expired_leases() {
    let server = native_server(&["reclaim-interval-ms", "20"], &[]);
    let mut con = server.connect();
    enqueue_one(&mut con, "src", "p", "a", "A");
    let _ = lease(&mut con, "src", 100).unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP")
        .arg("vtrr:src:queue")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg("vtrr:src:queue")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("vtrr:dst:queue")
        .arg(0)
        .arg(&dump)
        .query(&mut con)
        .unwrap();
    wait_until(Duration::from_secs(5), "the timer's reclaim", || {
        stat(&mut con, "dst", "queued") == 1
    });
    assert_eq!(stat(&mut con, "dst", "inflight"), 0);
}

#[test]
fn a_replica_and_its_aof_keep_a_native_queue_native_whatever_their_default() {
    let master = native_server(&[], &[]);
    let mut replica = Server::builder()
        .module_args(&["reclaim-interval-ms", "0", "default-layout", "keys"])
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .spawn();
    attach_replica(&replica, &master);
    let mut m = master.connect();
    big_native_queue(&mut m, "q");
    wait_replicated(&mut m);
    let mut r = replica.connect();
    assert_eq!(layout_of(&mut r, "q"), "native");
    assert_eq!(contents_all(&mut r), contents_all(&mut m));
    // The replica's own AOF, reloaded with its keys default.
    let _: () = command(&["REPLICAOF", "NO", "ONE"]).query(&mut r).unwrap();
    let before = contents_all(&mut r);
    replica.kill();
    replica.restart();
    let mut r = replica.connect();
    assert_eq!(layout_of(&mut r, "q"), "native");
    assert_eq!(contents_all(&mut r), before);
}

#[test]
fn flushall_and_flushdb_make_the_timer_forget_the_flushed_queues() {
    let server = native_server(&["reclaim-interval-ms", "20"], &[]);
    let mut con = server.connect();
    let tracked = |con: &mut Connection| vtrr_info(con)["vtrr_timer_tracked_queues"];
    for db in [0, 1] {
        let _: () = command(&["SELECT", &db.to_string()])
            .query(&mut con)
            .unwrap();
        for n in 0..20 {
            let name = format!("q{n}");
            enqueue_one(&mut con, &name, "p", "a", "A");
            let _ = lease(&mut con, &name, 600_000).unwrap();
        }
    }
    wait_until(Duration::from_secs(5), "40 queues tracked", || {
        tracked(&mut con) == 40
    });
    // FLUSHDB of db 1 (selected): its 20 go, db 0's stay.
    let _: () = command(&["FLUSHDB"]).query(&mut con).unwrap();
    wait_until(Duration::from_secs(5), "20 queues tracked", || {
        tracked(&mut con) == 20
    });
    let _: () = command(&["FLUSHALL", "ASYNC"]).query(&mut con).unwrap();
    wait_until(Duration::from_secs(5), "no queue tracked", || {
        tracked(&mut con) == 0
    });
}

#[test]
fn debug_digest_covers_a_native_queue_and_follows_its_content() {
    let server = native_server(&[], &["--enable-debug-command", "yes"]);
    let mut con = server.connect();
    big_native_queue(&mut con, "{a}");
    let digest = |con: &mut Connection, key: &str| -> String {
        let digests: Vec<String> = command(&["DEBUG", "DIGEST-VALUE", key]).query(con).unwrap();
        digests[0].clone()
    };
    let _: i64 = command(&["COPY", "vtrr:{a}:queue", "vtrr:{b}:queue"])
        .query(&mut con)
        .unwrap();
    let a = digest(&mut con, "vtrr:{a}:queue");
    assert_ne!(a, "0".repeat(40), "the value is digested");
    assert_eq!(
        digest(&mut con, "vtrr:{b}:queue"),
        a,
        "equal content, equal digest"
    );
    enqueue_one(&mut con, "{b}", "p", "new", "N");
    assert_ne!(digest(&mut con, "vtrr:{b}:queue"), a, "a change changes it");
}

#[test]
fn a_replica_loading_diskless_gets_the_native_queue() {
    let master = native_server(
        &[],
        &[
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ],
    );
    let mut m = master.connect();
    big_native_queue(&mut m, "q");
    let replica = Server::builder()
        .module_args(&["reclaim-interval-ms", "0"])
        .args(&["--repl-diskless-load", "on-empty-db"])
        .spawn();
    attach_replica(&replica, &master);
    wait_replicated(&mut m);
    let mut r = replica.connect();
    assert_eq!(contents_all(&mut r), contents_all(&mut m));
    // Without HANDLE_IO_ERRORS the replica says it skips diskless loading
    // because of a module, and loads from disk. (`swapdb` loading, which
    // serves the old data meanwhile, needs HANDLE_REPL_ASYNC_LOAD, which
    // the module does not claim.)
    let log = replica.log();
    assert!(
        log.contains("Loading DB in memory") && !log.contains("Skipping diskless-load"),
        "the replica did not load diskless:\n{log}"
    );
}

/// VTRR.CONVERT checks the target before it takes anything: with a key of
/// the wrong type planted at any key of the keys layout, a move either way
/// is an error and the queue stays whole where it was (once, a native
/// queue converted onto a stray key was deleted). A stray key of the
/// right type beside a native queue is another client's: not merged.
#[test]
fn convert_refused_by_a_planted_key_leaves_the_queue_whole_either_way() {
    let server = Server::builder()
        .module_args(&["reclaim-interval-ms", "0", "default-layout", "keys"])
        .spawn();
    let mut con = server.connect();
    queue_in_every_state(&mut con, "q");
    let planted = |con: &mut Connection, suffix: &str| {
        let key = format!("vtrr:q:{suffix}");
        let _: () = command(&["DEL", &key]).query(con).unwrap();
        // A string where the layout has hashes and sorted sets (and a
        // hash where `current_virtual_time` is a string).
        if suffix == "current_virtual_time" {
            let _: () = command(&["HSET", &key, "garbage", "x"]).query(con).unwrap();
        } else {
            let _: () = command(&["SET", &key, "garbage"]).query(con).unwrap();
        }
    };
    for suffix in ALL_SUFFIXES {
        // Keys to native: the wrong-type key is part of the source.
        let _: () = command(&["FLUSHALL"]).query(&mut con).unwrap();
        queue_in_every_state(&mut con, "q");
        planted(&mut con, suffix);
        let before = contents_all(&mut con);
        let error = error_of(command(&["VTRR.CONVERT", "q", "NATIVE"]).query(&mut con));
        assert!(error.starts_with("WRONGTYPE"), "{suffix}: {error}");
        assert_eq!(
            contents_all(&mut con),
            before,
            "{suffix}: keys to native changed keys"
        );

        // Native to keys: the wrong-type key sits beside the native queue.
        if suffix == "queue" {
            continue;
        }
        let _: () = command(&["FLUSHALL"]).query(&mut con).unwrap();
        let token = queue_in_every_state(&mut con, "q");
        assert_eq!(convert(&mut con, "q", "NATIVE"), 1);
        let stats_before: Value = command(&["VTRR.STATS", "q"]).query(&mut con).unwrap();
        planted(&mut con, suffix);
        let before = contents_all(&mut con);
        let error = error_of(command(&["VTRR.CONVERT", "q", "KEYS"]).query(&mut con));
        assert_eq!(
            error,
            format!("ERR VTRR.CONVERT: key vtrr:q:{suffix} exists beside the native queue; delete or rename it before converting to KEYS"),
        );
        assert_eq!(
            contents_all(&mut con),
            before,
            "{suffix}: native to keys changed keys"
        );
        assert_eq!(layout_of(&mut con, "q"), "native");
        let _: () = command(&["DEL", &format!("vtrr:q:{suffix}")])
            .query(&mut con)
            .unwrap();
        let stats: Value = command(&["VTRR.STATS", "q"]).query(&mut con).unwrap();
        assert_eq!(
            without_wait(&stats),
            without_wait(&stats_before),
            "{suffix}: the queue is whole"
        );
        assert_eq!(
            ack(&mut con, "q", b"a", &token),
            1,
            "{suffix}: its lease still acks"
        );
        assert_invariants(&mut con, "q");
    }
    // A stray key of the right type is refused the same way.
    let _: () = command(&["FLUSHALL"]).query(&mut con).unwrap();
    queue_in_every_state(&mut con, "q");
    assert_eq!(convert(&mut con, "q", "NATIVE"), 1);
    let _: () = command(&["HSET", "vtrr:q:task", "stray", "x"])
        .query(&mut con)
        .unwrap();
    let before = contents_all(&mut con);
    let error = error_of(command(&["VTRR.CONVERT", "q", "KEYS"]).query(&mut con));
    assert!(error.contains("vtrr:q:task exists beside"), "{error}");
    assert_eq!(contents_all(&mut con), before);
}

/// No queue is empty (the call that empties one deletes its key), so a
/// DUMP payload of an empty native queue is forged: RESTORE refuses it
/// rather than make a key an AOF rewrite would drop.
#[test]
fn restore_refuses_an_empty_native_queue() {
    let server = native_server(&[], &[]);
    let mut con = server.connect();
    enqueue_one(&mut con, "q", "p", "a", "A");
    let dump: Vec<u8> = redis::cmd("DUMP")
        .arg("vtrr:q:queue")
        .query(&mut con)
        .unwrap();
    let body = &dump[..dump.len() - 8];
    let version = &body[body.len() - 2..];
    // The value's type (a byte) and module id (0x81 and 8 bytes), then at
    // once the empty chunk that ends the chunks (a string opcode, length
    // 0) and the module EOF.
    let empty = [&body[..10], &[5, 0, 0], version].concat();
    let restored = redis::cmd("RESTORE")
        .arg("vtrr:empty:queue")
        .arg(0)
        .arg(sealed(&empty))
        .query::<()>(&mut con);
    let error = restored.expect_err("an empty native queue restored");
    assert!(error.to_string().contains("Bad data format"), "{error}");
    assert!(!exists(&mut con, "vtrr:empty:queue"));
    // The same payload with the queue's own chunk restores: the forgery
    // is only the emptiness.
    let _: () = redis::cmd("RESTORE")
        .arg("vtrr:copy:queue")
        .arg(0)
        .arg(&dump)
        .query(&mut con)
        .unwrap();
    assert_eq!(stat(&mut con, "copy", "queued"), 1);
}

/// `VTRR.LOAD` of a chunk with no entries makes no key, as RESTORE of an
/// empty queue is refused: an AOF carrying one (only a forged one can)
/// loads without it, and the queues beside it come back whole.
#[test]
fn an_aof_load_of_an_empty_chunk_makes_no_queue() {
    let mut server = native_server(&[], &["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.connect();
    enqueue_one(&mut con, "q", "p", "a", "A");
    server.stop(false);
    let aof_dir = server.dir.join("appendonlydir");
    let incr = std::fs::read_dir(&aof_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.to_string_lossy().ends_with(".incr.aof"))
        .expect("an incremental AOF file");
    let mut aof = std::fs::OpenOptions::new().append(true).open(incr).unwrap();
    std::io::Write::write_all(
        &mut aof,
        b"*3\r\n$9\r\nVTRR.LOAD\r\n$12\r\nvtrr:e:queue\r\n$0\r\n\r\n",
    )
    .unwrap();
    drop(aof);
    server.restart();
    let mut con = server.connect();
    assert!(!exists(&mut con, "vtrr:e:queue"), "an empty queue was made");
    assert_eq!(stat(&mut con, "q", "queued"), 1);
}

/// A reply as the fixture writes it: bulk strings in hex, arrays as lists.
fn hexed(value: &redis::Value) -> serde_json::Value {
    match value {
        redis::Value::BulkString(bytes) => hex(bytes).into(),
        redis::Value::SimpleString(text) => hex(text.as_bytes()).into(),
        redis::Value::Array(items) => items.iter().map(hexed).collect(),
        redis::Value::Int(n) => (*n).into(),
        redis::Value::Nil => serde_json::Value::Null,
        other => panic!("unexpected reply {other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &serde_json::Value) -> Vec<u8> {
    let text = text.as_str().unwrap();
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// An RDB written by the module of encoding version 2 (text records ranked
/// to the ten-second boundary; `tests/fixtures/native-v2.*`, made by
/// `scripts/native-fixture.py` with that module) loads whole: every key
/// reads as that module showed it, its leases ack with their tokens,
/// RECOUNT brings its rankings to this version's, and it drains with its
/// invariants intact.
#[test]
fn an_rdb_of_encoding_version_2_loads_whole() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("native-v2.json")).unwrap())
            .unwrap();
    let mut server = Server::start();
    server.stop(false);
    std::fs::copy(fixtures.join("native-v2.rdb"), server.dir.join("dump.rdb")).unwrap();
    server.restart();
    let mut con = server.connect();
    let queue = expected["queue"].as_str().unwrap();
    assert_eq!(layout_of(&mut con, queue), "native");
    let keys = expected["keys"].as_object().unwrap();
    assert_eq!(keys.len(), 25, "every key of the queue");
    for (suffix, want) in keys {
        let got: redis::Value = command(&["VTRR.INSPECT", queue, suffix])
            .query(&mut con)
            .unwrap();
        assert_eq!(&hexed(&got), want, "{suffix}");
    }
    let leases = expected["leases"].as_array().unwrap();
    assert!(leases.len() >= 3);
    for lease in leases {
        let (id, token) = (unhex(&lease[0]), unhex(&lease[1]));
        let acked: i64 = redis::cmd("VTRR.ACK")
            .arg(queue)
            .arg(id)
            .arg(token)
            .query(&mut con)
            .unwrap();
        assert_eq!(acked, 1);
    }
    let _: redis::Value = command(&["VTRR.RECOUNT", queue]).query(&mut con).unwrap();
    assert_invariants(&mut con, queue);
    let resumed: i64 = command(&["VTRR.RESUME", queue, "t3"])
        .query(&mut con)
        .unwrap();
    assert_eq!(resumed, 1);
    let mut served = 0;
    while let Some((id, _, token, _)) = lease(&mut con, queue, 60_000) {
        assert_eq!(ack(&mut con, queue, &id, &token), 1);
        served += 1;
    }
    assert!(served > 300, "{served}");
    assert_invariants(&mut con, queue);
}
