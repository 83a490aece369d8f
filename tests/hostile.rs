//! Hostile input: whatever a client sends — any bytes, any Unicode, `%`,
//! line breaks, numbers at and past every bound, in any argument position
//! of any command — the server stays up and replies, an error reply is
//! printable text and changes nothing, log lines take client text as text
//! (never as a printf format), and the queue stays consistent (CHECK).
//!
//! Three campaigns: every argument position of every command filled with
//! each value of a fixed corpus (standalone, and on a one-node cluster);
//! random calls, half shaped like each command's syntax so items move
//! through every state (`make fuzz` runs it long); and the regressions
//! each found once.

mod common;

use common::cluster::Cluster;
use common::*;
use redis::Connection;
use std::sync::OnceLock;

/// Values chosen to break parsers, error replies and log lines.
fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(corpus_values)
}

fn corpus_values() -> Vec<Vec<u8>> {
    let words = [
        "",
        " ",
        "\0",
        "a\0b",
        "\r\n",
        "-ERR x\r\n+OK\r\n",
        "\\",
        "\\x00",
        "'",
        "\"",
        // printf directives: a log format string would read the stack.
        "%",
        "%s%n%x",
        "%lx.%lx.%lx.%lx.%lx.%lx",
        "%p%p%p%p",
        "%99999999s",
        // Characters whose code point's low byte is 0 (a `c as u8` makes a
        // NUL of them), others outside ASCII, and hash tags.
        "Ā",
        "一",
        "刀",
        "Ȁ",
        "€",
        "é",
        "\u{10FFFF}",
        "🦀",
        "{",
        "}",
        "{}",
        "{h}",
        "{刀}",
        // Numbers at and past every bound, and near-numbers.
        "0",
        "-0",
        "1",
        "-1",
        "01",
        "+1",
        " 1",
        "1 ",
        "1.5",
        "1e3",
        "0x10",
        "nan",
        "inf",
        "-inf",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "18446744073709551616",
        "1000000",
        "1000001",
        "10000",
        "10001",
        "1000000000",
        "1000000001",
        "31536000000",
        "31536000001",
        "315360000000",
        "315360000001",
        // Option names and words the commands know, in the wrong places.
        "COUNT",
        "count",
        "BLOCK",
        "WITHCOUNTERS",
        "WITHPARTITION",
        "DELAY",
        "DEAD",
        "REASON",
        "LIMIT",
        "NONE",
        "CURSOR",
        "PARTITION",
        "CONCURRENCY",
        "SHARE",
        "MAX-NACKS",
        "MAX-TIMEOUTS",
        "DEFAULT-CONCURRENCY",
        "DEFAULT-RATE",
        "MAX-QUEUED",
        "DEFAULT-MAX-QUEUED",
        "KEYS",
        "NATIVE",
        "queue",
        "task",
    ];
    let mut values: Vec<Vec<u8>> = words.iter().map(|w| w.as_bytes().to_vec()).collect();
    values.extend([
        // Invalid UTF-8: a lone byte, a bad continuation, a stray
        // continuation, an encoded surrogate; and every byte once.
        b"\xff\xfe".to_vec(),
        b"\xc3\x28".to_vec(),
        b"\x80".to_vec(),
        b"\xed\xa0\x80".to_vec(),
        (0..=255u8).collect(),
        "%s".repeat(16).into_bytes(),
        vec![b'%'; 4096],
        "一".repeat(1000).into_bytes(),
        vec![b'x'; 65536],
    ]);
    values
}

/// Whether `text` is printable ASCII: all an error reply may carry.
fn printable(text: &str) -> bool {
    text.bytes().all(|b| (b' '..=b'~').contains(&b))
}

/// The number of keys, and each watched key's DUMP.
type Snapshot = (i64, Vec<(Vec<u8>, Option<Vec<u8>>)>);

/// DUMP of every key of each queue of `names` (None for a missing key),
/// and the number of keys in the database: what a refused call must leave
/// as it was.
fn snapshot(con: &mut Connection, names: &[&[u8]]) -> Snapshot {
    let keys: Vec<Vec<u8>> = names
        .iter()
        .flat_map(|name| {
            ALL_SUFFIXES
                .iter()
                .map(move |suffix| [b"vtrr:".as_slice(), name, b":", suffix.as_bytes()].concat())
        })
        .collect();
    let size: i64 = redis::cmd("DBSIZE").query(con).unwrap();
    (size, dump_keys(con, keys))
}

/// Makes the call `args` (the command first) on `con` and holds the server
/// to what any call must leave: a reply (an error one printable and with a
/// code, and then queues `watched` and the argument in the queue position
/// as they were), and a server that answers PING. The reply, or the error
/// text.
fn call_and_hold(
    con: &mut Connection,
    args: &[Vec<u8>],
    watched: &[&[u8]],
) -> Result<Value, String> {
    let queue = args.get(1).map_or(&b""[..], |q| q.as_slice());
    let names = [watched, &[queue]].concat();
    let before = snapshot(con, &names);
    let mut cmd = redis::cmd(std::str::from_utf8(&args[0]).unwrap());
    cmd.arg(&args[1..]);
    let shown = || {
        args.iter()
            .map(|a| String::from_utf8_lossy(&a[..a.len().min(24)]).into_owned())
            .collect::<Vec<_>>()
    };
    let result = cmd.query::<Value>(con).map_err(|error| {
        assert!(
            error.code().is_some(),
            "{:?}: not a server error reply: {error}",
            shown()
        );
        let text = format!("{} {}", error.code().unwrap(), error.detail().unwrap_or(""));
        assert!(
            printable(&text),
            "{:?}: unprintable error {text:?}",
            shown()
        );
        assert_eq!(
            before,
            snapshot(con, &names),
            "{:?} was refused ({text}) but changed keys",
            shown()
        );
        text
    });
    let pong: String = redis::cmd("PING")
        .query(con)
        .unwrap_or_else(|e| panic!("{:?}: the server stopped answering: {e}", shown()));
    assert_eq!(pong, "PONG");
    result
}

/// A well-formed call of every command on queue `q` (the lease `id`
/// `token` for the calls that settle one), each the template whose
/// positions the corpus fills.
fn templates(q: &str, id: &str, token: &str) -> Vec<Vec<String>> {
    let calls: Vec<Vec<&str>> = vec![
        vec!["VTRR.ENQUEUE", q, "p", "e1", "1", "P", "p2", "e2", "2", "Q"],
        vec!["VTRR.DEFER", q, "60000", "p", "d1", "1", "P"],
        vec!["VTRR.ENQUEUE", q, "PRIORITY", "5", "p", "e3", "1", "P"],
        vec![
            "VTRR.DEFER",
            q,
            "60000",
            "PRIORITY",
            "-5",
            "p",
            "d2",
            "1",
            "P",
        ],
        vec![
            "VTRR.LEASE",
            q,
            "60000",
            "COUNT",
            "1",
            "WITHCOUNTERS",
            "WITHPARTITION",
        ],
        vec!["VTRR.LEASE", q, "60000", "BLOCK", "10"],
        vec!["VTRR.ACK", q, id, token, id, token],
        vec![
            "VTRR.LEASE",
            q,
            "60000",
            "COUNT",
            "2",
            "ACK",
            id,
            token,
            "x2",
            token,
        ],
        vec!["VTRR.ACKCOST", q, id, token, "5", id, token, "1"],
        vec!["VTRR.LEASE", q, "60000", "ACKCOST", id, token, "3"],
        vec!["VTRR.RENEW", q, id, token, "60000"],
        vec!["VTRR.NACK", q, id, token, "DELAY", "10"],
        vec!["VTRR.NACK", q, id, token, "DEAD"],
        vec!["VTRR.NACK", q, id, token, "RELEASE", "WITHSTATE"],
        vec!["VTRR.NACK", q, id, token, "DELAY", "10", "REASON", "boom"],
        vec!["VTRR.RECLAIM", q, "LIMIT", "10"],
        vec!["VTRR.STATS", q],
        vec!["VTRR.JOB", q, id, "x2"],
        vec!["VTRR.CHECK", q],
        vec![
            "VTRR.POLICY",
            q,
            "MAX-TIMEOUTS",
            "3",
            "MAX-NACKS",
            "NONE",
            "DEFAULT-CONCURRENCY",
            "2",
        ],
        vec!["VTRR.DEAD", q, "COUNT", "5"],
        vec!["VTRR.REVIVE", q, "r1"],
        vec!["VTRR.CANCEL", q, "c1", "c2"],
        vec!["VTRR.LIMIT", q, "p", "CONCURRENCY", "2", "SHARE", "3"],
        vec![
            "VTRR.LIMIT",
            q,
            "p",
            "RATE",
            "5",
            "PER",
            "1000",
            "BURST",
            "2",
        ],
        vec!["VTRR.PAUSE", q, "p"],
        vec!["VTRR.RESUME", q, "p"],
        vec!["VTRR.PARTITIONS", q, "CURSOR", "0", "COUNT", "10"],
        vec!["VTRR.PARTITIONS", q, "PARTITION", "p"],
        vec![
            "VTRR.PARTITIONS",
            q,
            "TOP",
            "5",
            "BY",
            "oldest",
            "OFFSET",
            "1",
        ],
        vec!["VTRR.RECOUNT", q],
        vec![
            "VTRR.SCHEDULE",
            q,
            "s",
            "EVERY",
            "60000",
            "PARTITION",
            "p",
            "PAYLOAD",
            "P",
            "WEIGHT",
            "2",
            "MISSED",
            "all",
        ],
        vec![
            "VTRR.SCHEDULE",
            q,
            "c",
            "CRON",
            "0 0 0 1 1 * 2045",
            "TZ",
            "Europe/Paris",
            "PARTITION",
            "p",
            "PAYLOAD",
            "P",
        ],
        vec!["VTRR.UNSCHEDULE", q, "s", "c"],
        vec![
            "VTRR.SCHEDULES",
            q,
            "CURSOR",
            "0",
            "COUNT",
            "5",
            "RUNS",
            "3",
        ],
        vec!["VTRR.SCHEDULES", q, "SCHEDULE", "s", "RUNS", "2"],
        vec!["VTRR.CONVERT", q, "NATIVE"],
        vec!["VTRR.INSPECT", q, "queue"],
        vec!["VTRR.APPLY", q, "1", "LEASE", "0", "60000", "1"],
        vec!["VTRR.LOAD", "vtrr:h:queue", "x"],
    ];
    calls
        .into_iter()
        .map(|call| call.into_iter().map(String::from).collect())
        .collect()
}

/// Fills every argument position of every command's template with every
/// value of the corpus, one position at a time, on queue `q` of the server
/// behind `con` (a lease of it taken first, for the calls that settle
/// one); then CHECK finds `q` consistent and the log shows no pointer.
fn every_position_with_every_value(con: &mut Connection, q: &str, log: impl Fn() -> String) {
    enqueue_items(con, q, &[("p", "x", 1, b"X"), ("p", "r1", 1, b"R")]);
    let (id, _, token, _) = lease(con, q, 3_600_000).unwrap();
    let id = String::from_utf8(id).unwrap();
    let corpus = corpus();
    let (mut answered, mut refused) = (0, 0);
    for template in templates(q, &id, &token) {
        let template: Vec<Vec<u8>> = template.into_iter().map(String::into_bytes).collect();
        for position in 1..template.len() {
            for value in corpus {
                let mut args = template.clone();
                args[position] = value.clone();
                cap_block_timeouts(&mut args);
                match call_and_hold(con, &args, &[q.as_bytes()]) {
                    Ok(_) => answered += 1,
                    Err(_) => refused += 1,
                }
            }
            assert_invariants(con, q);
        }
    }
    eprintln!("{answered} calls answered, {refused} refused");
    assert!(
        answered > 100 && refused > 1000,
        "{answered} answered, {refused} refused"
    );
    let log = log();
    for leak in ["(nil)", "(null)", "0x7f", "panicked"] {
        assert!(!log.contains(leak), "the server log shows {leak:?}:\n{log}");
    }
}

#[test]
fn every_argument_position_takes_any_bytes() {
    let server = Server::builder()
        .args(&["--hz", "100"])
        .module_args(&["reclaim-interval-ms", "0"])
        .spawn();
    let mut con = server.connect();
    every_position_with_every_value(&mut con, "h", || server.log());
}

#[test]
fn every_argument_position_takes_any_bytes_in_a_cluster() {
    let cluster = Cluster::start_with(1, 0, 0, &["reclaim-interval-ms", "0"], &["--hz", "100"]);
    let mut con = cluster.con(0);
    every_position_with_every_value(&mut con, "{h}", || cluster.nodes[0].log());
}

/// The calls that aborted the server once (redis-module's error replies
/// made a NUL of a character whose low byte is 0) each get an error
/// reply quoting the client's bytes.
#[test]
fn client_text_in_an_error_reply_is_quoted() {
    let server = quiet_server();
    let mut con = server.connect();
    let _: () = redis::cmd("SET")
        .arg("vtrr:刀:queue")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let cases: [(&[&str], String); 4] = [
        (
            &["VTRR.INSPECT", "q", "Ā"],
            r"ERR key must be one of a queue's key suffixes (queue, inflight, task, ...), not '\xc4\x80'".into(),
        ),
        (
            &["VTRR.CONVERT", "q", "一"],
            r"ERR layout must be NATIVE or KEYS, not '\xe4\xb8\x80'".into(),
        ),
        (
            &["VTRR.CONVERT", "q", "%s%n\r\n\\"],
            r"ERR layout must be NATIVE or KEYS, not '%s%n\r\n\\'".into(),
        ),
        (
            &["VTRR.STATS", "刀"],
            r"WRONGTYPE Operation against a key holding the wrong kind of value: vtrr:\xe5\x88\x80:queue must be a sorted set".into(),
        ),
    ];
    for (words, expected) in cases {
        assert_eq!(
            error_of(command(words).query(&mut con)),
            expected,
            "{words:?}"
        );
    }
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

/// A queue whose name is printf directives, with a partition record another
/// client broke: the warning the module logs names the queue as text
/// (once, the module passed it to the log call as its format: the log
/// printed stack and heap pointers, and sixteen `%s` crashed the server).
#[test]
fn log_lines_take_client_text_as_text() {
    let server = quiet_server();
    let mut con = server.connect();
    let names = ["leak%lx.%lx.%lx.%lx.%lx.%lx".to_string(), "%s".repeat(16)];
    for name in &names {
        enqueue_items(&mut con, name, &[("p\0Ā", "a", 1, b"A")]);
        with_keys_layout(&mut con, name, |con| {
            let _: () = redis::cmd("HSET")
                .arg(format!("vtrr:{name}:partition_virtual_time"))
                .arg("p\0Ā")
                .arg("not a number")
                .query(con)
                .unwrap();
        });
        enqueue_items(&mut con, name, &[("p\0Ā", "b", 1, b"B")]);
    }
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    let log = server.log();
    for name in &names {
        let line = log
            .lines()
            .find(|line| line.contains(&format!("vtrr: queue {name}: ")))
            .unwrap_or_else(|| panic!("no warning names queue {name}:\n{log}"));
        assert!(
            line.contains(r"p\x00\xc4\x80"),
            "the partition as text: {line}"
        );
    }
}

/// Argument values chosen to break parsers.
fn nasty_arg(rng: &mut Rng) -> Vec<u8> {
    const WORDS: [&str; 54] = [
        "fz",
        "wt",
        "",
        "0",
        "1",
        "2",
        "-1",
        "10",
        "1000",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "1.5",
        "1e3",
        " 1",
        "+1",
        "01",
        "abc",
        "COUNT",
        "count",
        "LIMIT",
        "BLOCK",
        "RATE",
        "PER",
        "BURST",
        "p:x",
        "nan",
        // The lifecycle commands' options and bounds.
        "DELAY",
        "delay",
        "DEAD",
        "MAX-TIMEOUTS",
        "max-nacks",
        "MAX-NACKS",
        "NONE",
        "WITHCOUNTERS",
        "315360000000",
        "315360000001",
        "1000000000",
        "1000000001",
        "seed",
        "stale",
        // The tenant controls' options and bounds.
        "CONCURRENCY",
        "concurrency",
        "SHARE",
        "DEFAULT-CONCURRENCY",
        "DEFAULT-RATE",
        "MAX-QUEUED",
        "DEFAULT-MAX-QUEUED",
        "PARTITION",
        "CURSOR",
        "1000000",
        "1000001",
        "10000",
        "10001",
    ];
    match rng.below(10) {
        0 => (0..rng.below(16)).map(|_| rng.below(256) as u8).collect(), // binary, invalid UTF-8, NUL
        1 if rng.chance(3) => vec![b'x'; 1 << 20],                       // 1 MB
        2 | 3 => corpus()[rng.below(corpus().len() as u64) as usize].clone(),
        _ => WORDS[rng.below(WORDS.len() as u64) as usize]
            .as_bytes()
            .to_vec(),
    }
}

/// Every command the fuzz calls.
const FUZZED: [&str; 20] = [
    "VTRR.ENQUEUE",
    "VTRR.DEFER",
    "VTRR.LEASE",
    "VTRR.ACK",
    "VTRR.ACKCOST",
    "VTRR.RENEW",
    "VTRR.NACK",
    "VTRR.RECLAIM",
    "VTRR.STATS",
    "VTRR.CHECK",
    "VTRR.POLICY",
    "VTRR.DEAD",
    "VTRR.REVIVE",
    "VTRR.CANCEL",
    "VTRR.LIMIT",
    "VTRR.PAUSE",
    "VTRR.RESUME",
    "VTRR.PARTITIONS",
    "VTRR.RECOUNT",
    "VTRR.JOB",
];

/// The commands of shaped calls, weighted so items keep flowing: enough
/// enqueues and leases to nack, enough deaths to revive, and caps and
/// pauses that come and go.
const SHAPED_MIX: [&str; 30] = [
    "VTRR.ENQUEUE",
    "VTRR.ENQUEUE",
    "VTRR.ENQUEUE",
    "VTRR.DEFER",
    "VTRR.DEFER",
    "VTRR.LEASE",
    "VTRR.LEASE",
    "VTRR.LEASE",
    "VTRR.LEASE",
    "VTRR.NACK",
    "VTRR.NACK",
    "VTRR.NACK",
    "VTRR.ACK",
    "VTRR.ACKCOST",
    "VTRR.RENEW",
    "VTRR.RECLAIM",
    "VTRR.STATS",
    "VTRR.CHECK",
    "VTRR.POLICY",
    "VTRR.DEAD",
    "VTRR.REVIVE",
    "VTRR.REVIVE",
    "VTRR.CANCEL",
    "VTRR.LIMIT",
    "VTRR.LIMIT",
    "VTRR.PAUSE",
    "VTRR.RESUME",
    "VTRR.PARTITIONS",
    "VTRR.RECOUNT",
    "VTRR.JOB",
];

/// One of `options`, or now and then a nasty value instead.
fn one_of(rng: &mut Rng, options: &[&str]) -> Vec<u8> {
    if rng.chance(8) {
        return nasty_arg(rng);
    }
    options[rng.below(options.len() as u64) as usize]
        .as_bytes()
        .to_vec()
}

/// An (id, token) pair: mostly a lease seen recently (current or stale by
/// now), else made up.
fn lease_pair(rng: &mut Rng, leases: &[(Vec<u8>, Vec<u8>)]) -> [Vec<u8>; 2] {
    if !leases.is_empty() && rng.chance(85) {
        // The newest most often: it is the likeliest to be still current.
        let back = if rng.chance(50) {
            0
        } else {
            rng.below(8) as usize
        };
        let (id, token) = &leases[leases.len() - 1 - back.min(leases.len() - 1)];
        return [id.clone(), token.clone()];
    }
    [one_of(rng, ITEM_IDS), one_of(rng, &["stale", ""])]
}

const ITEM_IDS: &[&str] = &["seed", "a", "b", "c", "d", "e"];

/// Arguments shaped like `command`'s syntax, each value drawn from a few
/// plausible ones (now and then a nasty one), so calls often succeed and
/// drive items through every state: leased, nacked, delayed, dead,
/// revived, cancelled.
fn shaped_args(command: &str, rng: &mut Rng, leases: &[(Vec<u8>, Vec<u8>)]) -> Vec<Vec<u8>> {
    let mut args = vec![one_of(rng, &["fz", "fz", "fz", "fz", "fz", "wt"])];
    let items = |rng: &mut Rng, args: &mut Vec<Vec<u8>>| {
        if rng.chance(25) {
            args.push(one_of(rng, &["PRIORITY", "priority"]));
            args.push(one_of(rng, &["100", "-100", "0", "7", "101", "-1x", ""]));
        }
        for _ in 0..1 + rng.below(2) {
            args.push(one_of(rng, &["p", "q", ""]));
            args.push(one_of(rng, ITEM_IDS));
            args.push(one_of(rng, &["1", "2", "3"]));
            args.push(one_of(rng, &["P", "", "payload"]));
        }
    };
    match command {
        "VTRR.ENQUEUE" => items(rng, &mut args),
        "VTRR.DEFER" => {
            args.push(one_of(rng, &["0", "1", "5", "60000"]));
            items(rng, &mut args);
        }
        "VTRR.LEASE" => {
            args.push(one_of(rng, &["1", "5", "60000"]));
            if rng.chance(30) {
                args.extend([b"COUNT".to_vec(), one_of(rng, &["1", "3"])]);
            }
            if rng.chance(50) {
                args.push(b"WITHCOUNTERS".to_vec());
            }
            if rng.chance(30) {
                args.push(b"WITHPARTITION".to_vec());
            }
            if rng.chance(3) {
                // Blocks at most about one `hz` tick on an empty queue.
                args.extend([b"BLOCK".to_vec(), b"1".to_vec()]);
            }
        }
        "VTRR.ACK" => {
            for _ in 0..1 + rng.below(2) {
                args.extend(lease_pair(rng, leases));
            }
        }
        "VTRR.ACKCOST" => {
            for _ in 0..1 + rng.below(2) {
                args.extend(lease_pair(rng, leases));
                args.push(one_of(rng, &["1", "7", "1000000000"]));
            }
        }
        "VTRR.RENEW" => {
            args.extend(lease_pair(rng, leases));
            args.push(one_of(rng, &["1", "60000"]));
            if rng.chance(50) {
                args.extend([b"COST".to_vec(), one_of(rng, &["0", "7", "1000000000"])]);
            }
        }
        "VTRR.NACK" => {
            args.extend(lease_pair(rng, leases));
            match rng.below(5) {
                0 => args.extend([b"DELAY".to_vec(), one_of(rng, &["0", "1", "5", "60000"])]),
                1 => args.push(b"DEAD".to_vec()),
                2 if rng.chance(20) => {
                    args.extend([b"DELAY".to_vec(), b"1".to_vec(), b"DEAD".to_vec()])
                }
                _ => {}
            }
            if rng.chance(30) {
                args.extend([b"REASON".to_vec(), one_of(rng, &["boom", "x\0\r\n\u{ff}"])]);
            }
        }
        "VTRR.RECLAIM" if rng.chance(30) => {
            args.extend([b"LIMIT".to_vec(), one_of(rng, &["1", "2"])]);
        }
        "VTRR.POLICY" => {
            for option in ["MAX-TIMEOUTS", "MAX-NACKS"] {
                if rng.chance(40) {
                    args.push(option.as_bytes().to_vec());
                    args.push(one_of(rng, &["0", "1", "2", "NONE", "none"]));
                }
            }
            if rng.chance(30) {
                args.push(b"DEFAULT-CONCURRENCY".to_vec());
                args.push(one_of(rng, &["1", "2", "NONE", "NONE", "0"]));
            }
        }
        "VTRR.LIMIT" => {
            args.push(one_of(rng, &["p", "p", "q", ""]));
            // Else the reading form.
            if rng.chance(75) {
                if rng.chance(70) {
                    args.push(b"CONCURRENCY".to_vec());
                    args.push(one_of(rng, &["1", "2", "NONE", "NONE", "0"]));
                }
                if rng.chance(40) {
                    args.extend([b"SHARE".to_vec(), one_of(rng, &["1", "3", "0"])]);
                }
            }
        }
        "VTRR.PAUSE" | "VTRR.RESUME" => args.push(one_of(rng, &["p", "q", ""])),
        "VTRR.PARTITIONS" => match rng.below(5) {
            3 => args.extend([
                b"TOP".to_vec(),
                one_of(rng, &["1", "10", "0", "10001"]),
                b"BY".to_vec(),
                one_of(rng, &["queued", "oldest", "LEASED", "dead", "age"]),
                b"OFFSET".to_vec(),
                one_of(rng, &["0", "2", "100001", "-1"]),
            ]),
            0 => args.extend([b"PARTITION".to_vec(), one_of(rng, &["p", "q", "none", ""])]),
            1 => args.extend([b"COUNT".to_vec(), one_of(rng, &["1", "10", "0"])]),
            2 => args.extend([
                b"CURSOR".to_vec(),
                one_of(rng, &["0", "1", "x"]),
                b"COUNT".to_vec(),
                one_of(rng, &["2", "10000", "10001"]),
            ]),
            _ => {}
        },
        "VTRR.DEAD" if rng.chance(40) => {
            args.extend([b"COUNT".to_vec(), one_of(rng, &["1", "5"])]);
        }
        "VTRR.REVIVE" | "VTRR.CANCEL" | "VTRR.JOB" => {
            for _ in 0..1 + rng.below(2) {
                // Half the time an id leased before, which a NACK ... DEAD
                // may have buried: a seed whose fixed ids never die still
                // revives some.
                let leased = (!leases.is_empty() && rng.chance(50))
                    .then(|| leases[rng.below(leases.len() as u64) as usize].0.clone());
                args.push(leased.unwrap_or_else(|| one_of(rng, ITEM_IDS)));
            }
        }
        _ => {}
    }
    args
}

/// A LEASE ... BLOCK on an empty queue waits for its timeout (0: forever,
/// 1000000000: eleven days): timeouts of 0 and from 11 ms up to the largest
/// valid one (a year) become 10 ms, so the run never hangs; out-of-range
/// and malformed ones stay, to be refused.
fn cap_block_timeouts(args: &mut [Vec<u8>]) {
    const MAX_BLOCK_MS: i64 = 31_536_000_000;
    for i in 1..args.len() {
        if args[i - 1].eq_ignore_ascii_case(b"BLOCK") {
            let timeout = std::str::from_utf8(&args[i])
                .ok()
                .and_then(|s| s.parse::<i64>().ok());
            if timeout.is_some_and(|ms| ms == 0 || (11..=MAX_BLOCK_MS).contains(&ms)) {
                args[i] = b"10".to_vec();
            }
        }
    }
}

#[test]
fn random_arguments_always_get_a_reply_and_failures_change_nothing() {
    let server = quiet_server();
    let mut con = server.connect();
    for words in [
        // A queue whose keys hold wrong types.
        &["SET", "vtrr:wt:task", "not a hash"][..],
        &["LPUSH", "vtrr:wt:queue", "not a zset"],
        &["HSET", "vtrr:wt:current_virtual_time", "f", "v"],
        // ... and among the lifecycle keys, so ACK, DEAD and POLICY are
        // refused on it too.
        &["SET", "vtrr:wt:nacks", "not a hash"],
        &["LPUSH", "vtrr:wt:policy", "not a hash"],
        // ... and `partitions`, the one key LIMIT's reading form opens.
        &["LPUSH", "vtrr:wt:partitions", "not a hash"],
    ] {
        let _: () = command(words).query(&mut con).unwrap();
    }
    enqueue_one(&mut con, "fz", "p", "seed", "S");
    let mut rng = Rng::new(seed());
    let (mut ok, mut failed) = (0, 0);
    // Per command: calls answered, calls refused.
    let mut per_command: std::collections::BTreeMap<&str, (u64, u64)> =
        FUZZED.iter().map(|c| (*c, (0, 0))).collect();
    // Replies of 1 from NACK and REVIVE on fz: items really moved; from
    // PAUSE and RESUME: partitions really stopped and started.
    let (mut nacked, mut revived, mut paused, mut resumed) = (0, 0, 0, 0);
    let mut leases: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    // `make fuzz` runs a longer campaign through VTRR_FUZZ_CALLS.
    let calls: usize = std::env::var("VTRR_FUZZ_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2500);
    for _ in 0..calls {
        let shaped = rng.chance(50);
        let command = if shaped {
            SHAPED_MIX[rng.below(SHAPED_MIX.len() as u64) as usize]
        } else {
            FUZZED[rng.below(FUZZED.len() as u64) as usize]
        };
        let mut args = if shaped {
            shaped_args(command, &mut rng, &leases)
        } else {
            let mut args: Vec<Vec<u8>> = (0..rng.below(11)).map(|_| nasty_arg(&mut rng)).collect();
            // Mostly aim at the two watched queues, so the before/after check bites.
            if !args.is_empty() && rng.chance(80) {
                args[0] = if rng.chance(70) {
                    b"fz".to_vec()
                } else {
                    b"wt".to_vec()
                };
            }
            args
        };
        if command == "VTRR.LEASE" {
            cap_block_timeouts(&mut args);
        }
        let call = [vec![command.as_bytes().to_vec()], args.clone()].concat();
        let counts = per_command.get_mut(command).unwrap();
        match call_and_hold(&mut con, &call, &[b"fz", b"wt"]) {
            Ok(reply) => {
                ok += 1;
                counts.0 += 1;
                if args.first().is_some_and(|queue| queue == b"fz") {
                    match command {
                        "VTRR.LEASE" => leases.extend(leases_in(&reply)),
                        "VTRR.NACK" if reply == Value::Int(1) => nacked += 1,
                        "VTRR.REVIVE" if reply != Value::Int(0) => revived += 1,
                        "VTRR.PAUSE" if reply == Value::Int(1) => paused += 1,
                        "VTRR.RESUME" if reply == Value::Int(1) => resumed += 1,
                        _ => {}
                    }
                }
            }
            Err(_) => {
                failed += 1;
                counts.1 += 1;
            }
        }
        if rng.chance(10) {
            assert_invariants(&mut con, "fz");
        }
    }
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert_invariants(&mut con, "fz");
    eprintln!("{ok} calls succeeded, {failed} were refused");
    eprintln!("per command (answered, refused): {per_command:?}");
    eprintln!(
        "{} leases seen, {nacked} nacks, {revived} revives, {paused} pauses and {resumed} resumes took effect",
        leases.len()
    );
    assert!(
        ok > 50 && failed > 50,
        "the generator should exercise both paths: {ok} ok, {failed} refused"
    );
    if calls >= 2000 {
        for (command, (answered, refused)) in &per_command {
            assert!(
                *answered > 0 && *refused > 0,
                "{command} should be both answered and refused: {answered} answered, {refused} refused"
            );
        }
        assert!(
            nacked > 0 && revived > 0 && paused > 0 && resumed > 0,
            "the shaped calls should move items: {nacked} nacks, {revived} revives, {paused} pauses, {resumed} resumes took effect"
        );
    }
}
