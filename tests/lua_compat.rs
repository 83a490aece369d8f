//! The module is interchangeable with the Lua scripts (`lua/`, the reference
//! implementation of the same semantics): random operation sequences give
//! identical replies and key contents, and one queue can be driven by both.
//! On the native layout the module's queues are compared through
//! VTRR.INSPECT, key for key; a queue shared with the scripts is the keys
//! layout's alone (the scripts get WRONGTYPE on a native queue's key, which
//! tests/native.rs shows).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use redis::Connection;

/// The reference scripts and the tokens handed to their leases.
struct Lua {
    scripts: LuaScripts,
    tokens: u64,
}

impl Lua {
    fn load(con: &mut Connection) -> Lua {
        Lua {
            scripts: LuaScripts::load(con),
            tokens: 0,
        }
    }

    fn call(&self, con: &mut Connection, script: &str, queue: &str, args: &[Vec<u8>]) -> Value {
        let mut cmd = self.scripts.cmd(script, queue);
        for arg in args {
            cmd.arg(arg.as_slice());
        }
        cmd.query(con).unwrap()
    }
}

/// One operation, with the arguments both sides get.
#[derive(Debug, Clone)]
enum Op {
    Enqueue(Vec<(String, String, u64, Vec<u8>)>),
    Lease {
        lease_ms: u64,
        count: u64,
    },
    Ack {
        id: String,
        stale: bool,
    },
    Renew {
        id: String,
        stale: bool,
        lease_ms: u64,
    },
    Reclaim {
        limit: Option<u64>,
    },
}

fn random_op(rng: &mut Rng) -> Op {
    let id = |rng: &mut Rng| format!("i{}", rng.below(40));
    let lease_ms = |rng: &mut Rng| if rng.chance(40) { 1 } else { 600_000 };
    match rng.below(10) {
        0..=2 => Op::Enqueue(
            (0..1 + rng.below(3))
                .map(|_| {
                    let partition = ["p0", "p1", "p2", "p:3"][rng.below(4) as usize].to_string();
                    let payload: Vec<u8> =
                        (0..rng.below(8)).map(|_| rng.below(256) as u8).collect();
                    (partition, id(rng), 1 + rng.below(4), payload)
                })
                .collect(),
        ),
        3..=5 => Op::Lease {
            lease_ms: lease_ms(rng),
            count: 1 + rng.below(3),
        },
        6 | 7 => Op::Ack {
            id: id(rng),
            stale: rng.chance(20),
        },
        8 => Op::Renew {
            id: id(rng),
            stale: rng.chance(20),
            lease_ms: lease_ms(rng),
        },
        _ => Op::Reclaim {
            limit: rng.chance(50).then(|| 1 + rng.below(3)),
        },
    }
}

/// A reply with lease tokens replaced by their shape.
#[derive(Debug, PartialEq)]
enum Reply {
    Int(i64),
    Leases(Vec<(Vec<u8>, Vec<u8>, i64)>),
}

/// The token of `id`'s lease: read from the keys by the scripts' side, through
/// VTRR.INSPECT (either layout) by the module's.
fn token_of(con: &mut Connection, queue: &str, id: &str, stale: bool, module: bool) -> Vec<u8> {
    if stale {
        return b"stale".to_vec();
    }
    let token: Option<Vec<u8>> = if module {
        key_hget(con, queue, "lease", id).map(String::into_bytes)
    } else {
        redis::cmd("HGET")
            .arg(format!("vtrr:{queue}:lease"))
            .arg(id)
            .query(con)
            .unwrap()
    };
    token.unwrap_or_else(|| b"none".to_vec())
}

/// `[id, payload, token, timeouts]` as replied by LEASE.
type RawLease = (Vec<u8>, Vec<u8>, Vec<u8>, i64);

fn leases_of(value: Value, module: bool) -> Reply {
    let leases: Vec<RawLease> = redis::from_redis_value(value).unwrap();
    Reply::Leases(
        leases
            .into_iter()
            .map(|(id, payload, token, timeouts)| {
                if module {
                    assert_eq!(token.len(), 32, "module token shape");
                    assert!(token.iter().all(u8::is_ascii_hexdigit));
                }
                (id, payload, timeouts)
            })
            .collect(),
    )
}

fn run_module(con: &mut Connection, queue: &str, op: &Op) -> Reply {
    match op {
        Op::Enqueue(items) => {
            let mut cmd = redis::cmd("VTRR.ENQUEUE");
            cmd.arg(queue);
            for (partition, id, weight, payload) in items {
                cmd.arg(partition)
                    .arg(id)
                    .arg(*weight)
                    .arg(payload.as_slice());
            }
            Reply::Int(cmd.query(con).unwrap())
        }
        Op::Lease { lease_ms, count } => leases_of(
            redis::cmd("VTRR.LEASE")
                .arg(queue)
                .arg(*lease_ms)
                .arg("COUNT")
                .arg(*count)
                .query(con)
                .unwrap(),
            true,
        ),
        Op::Ack { id, stale } => {
            let token = token_of(con, queue, id, *stale, true);
            Reply::Int(
                redis::cmd("VTRR.ACK")
                    .arg(queue)
                    .arg(id)
                    .arg(token)
                    .query(con)
                    .unwrap(),
            )
        }
        Op::Renew {
            id,
            stale,
            lease_ms,
        } => {
            let token = token_of(con, queue, id, *stale, true);
            Reply::Int(
                redis::cmd("VTRR.RENEW")
                    .arg(queue)
                    .arg(id)
                    .arg(token)
                    .arg(*lease_ms)
                    .query(con)
                    .unwrap(),
            )
        }
        Op::Reclaim { limit } => {
            let mut cmd = redis::cmd("VTRR.RECLAIM");
            cmd.arg(queue);
            if let Some(limit) = limit {
                cmd.arg("LIMIT").arg(*limit);
            }
            Reply::Int(cmd.query(con).unwrap())
        }
    }
}

fn run_lua(lua: &mut Lua, con: &mut Connection, queue: &str, op: &Op) -> Reply {
    let int = |value: Value| Reply::Int(redis::from_redis_value(value).unwrap());
    match op {
        Op::Enqueue(items) => {
            let args: Vec<Vec<u8>> = items
                .iter()
                .flat_map(|(p, id, w, payload)| {
                    [
                        p.clone().into_bytes(),
                        id.clone().into_bytes(),
                        w.to_string().into_bytes(),
                        payload.clone(),
                    ]
                })
                .collect();
            int(lua.call(con, "enqueue", queue, &args))
        }
        Op::Lease { lease_ms, count } => {
            let mut args = vec![
                lease_ms.to_string().into_bytes(),
                count.to_string().into_bytes(),
                b"1000".to_vec(),
            ];
            for _ in 0..*count {
                lua.tokens += 1;
                args.push(format!("lua-token-{}", lua.tokens).into_bytes());
            }
            leases_of(lua.call(con, "lease", queue, &args), false)
        }
        Op::Ack { id, stale } => {
            let token = token_of(con, queue, id, *stale, false);
            int(lua.call(con, "ack", queue, &[id.clone().into_bytes(), token]))
        }
        Op::Renew {
            id,
            stale,
            lease_ms,
        } => {
            let token = token_of(con, queue, id, *stale, false);
            int(lua.call(
                con,
                "renew",
                queue,
                &[
                    id.clone().into_bytes(),
                    token,
                    lease_ms.to_string().into_bytes(),
                ],
            ))
        }
        Op::Reclaim { limit } => {
            let args: Vec<Vec<u8>> = limit.iter().map(|l| l.to_string().into_bytes()).collect();
            int(lua.call(con, "reclaim", queue, &args))
        }
    }
}

/// A queue's contents with lease tokens and expiry values reduced to shape;
/// a native queue's read through VTRR.INSPECT as the keys it stands for.
fn contents(con: &mut Connection, queue: &str) -> Vec<(String, String)> {
    let kind: String = redis::cmd("TYPE")
        .arg(format!("vtrr:{queue}:queue"))
        .query(con)
        .unwrap();
    if kind == "vtrrqueue" {
        return native_contents(con, queue);
    }
    SUFFIXES
        .iter()
        .map(|suffix| {
            let key = format!("vtrr:{queue}:{suffix}");
            let kind: String = redis::cmd("TYPE").arg(&key).query(con).unwrap();
            let value = match (kind.as_str(), *suffix) {
                ("none", _) => String::new(),
                ("string", _) => redis::cmd("GET").arg(&key).query::<String>(con).unwrap(),
                ("zset", "inflight") => {
                    let mut members: Vec<Vec<u8>> = redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .query(con)
                        .unwrap();
                    members.sort();
                    format!("{members:?}")
                }
                ("zset", _) => {
                    let entries: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query(con)
                        .unwrap();
                    format!("{entries:?}")
                }
                ("hash", "lease") => {
                    let mut fields: Vec<Vec<u8>> =
                        redis::cmd("HKEYS").arg(&key).query(con).unwrap();
                    fields.sort();
                    format!("{fields:?}")
                }
                ("hash", _) => {
                    let entries: BTreeMap<Vec<u8>, Vec<u8>> =
                        redis::cmd("HGETALL").arg(&key).query(con).unwrap();
                    format!("{entries:?}")
                }
                (other, _) => panic!("{key} has type {other}"),
            };
            (format!("{suffix}:{kind}"), value)
        })
        .collect()
}

/// `contents` of a native queue: each of the nine keys' type in the keys
/// layout ("none" when empty) and content, through VTRR.INSPECT.
fn native_contents(con: &mut Connection, queue: &str) -> Vec<(String, String)> {
    SUFFIXES
        .iter()
        .map(|suffix| {
            let (kind, value) = match *suffix {
                "current_virtual_time" => match key_current_virtual_time(con, queue) {
                    Some(time) => ("string", time),
                    None => ("none", String::new()),
                },
                "queue" | "inflight" => {
                    let entries = key_zrange(con, queue, suffix);
                    if entries.is_empty() {
                        ("none", String::new())
                    } else if *suffix == "inflight" {
                        let mut members: Vec<Vec<u8>> =
                            entries.into_iter().map(|(member, _)| member).collect();
                        members.sort();
                        ("zset", format!("{members:?}"))
                    } else {
                        ("zset", format!("{entries:?}"))
                    }
                }
                _ => {
                    let entries = key_hgetall(con, queue, suffix);
                    if entries.is_empty() {
                        ("none", String::new())
                    } else if *suffix == "lease" {
                        let fields: Vec<&Vec<u8>> = entries.keys().collect();
                        ("hash", format!("{fields:?}"))
                    } else {
                        ("hash", format!("{entries:?}"))
                    }
                }
            };
            (format!("{suffix}:{kind}"), value)
        })
        .collect()
}

#[test]
fn random_sequences_match_the_lua_scripts_reply_for_reply_and_key_for_key() {
    let server = quiet_server();
    let mut con = server.connect();
    let mut lua = Lua::load(&mut con);
    let seed = seed();
    for run in 0..6 {
        let mut rng = Rng::new(seed.wrapping_add(run));
        let (lua_queue, module_queue) = (format!("lua{run}"), format!("mod{run}"));
        let mut history = Vec::new();
        for _ in 0..150 {
            let op = random_op(&mut rng);
            history.push(op.clone());
            // Leases of 1 ms have expired for both sides by the next step.
            std::thread::sleep(Duration::from_millis(2));
            let expected = run_lua(&mut lua, &mut con, &lua_queue, &op);
            let got = run_module(&mut con, &module_queue, &op);
            assert_eq!(got, expected, "reply differs after {history:?}");
            assert_eq!(
                contents(&mut con, &module_queue),
                contents(&mut con, &lua_queue),
                "keys differ after {history:?}"
            );
            assert_invariants(&mut con, &module_queue);
            // The module's queue has this run's layout: one key of the
            // module's type on a native run.
            if native_layout() {
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("vtrr:{module_queue}:*"))
                    .query(&mut con)
                    .unwrap();
                assert!(
                    keys.is_empty() || keys == [format!("vtrr:{module_queue}:queue")],
                    "{keys:?}"
                );
            }
        }
    }
}

#[test]
fn one_queue_can_be_driven_by_the_scripts_and_the_module_in_turn() {
    if keys_layout_only(
        "one queue driven by the Lua scripts and the module in turn: the scripts work on \
         the keys layout's keys, and get WRONGTYPE on a native queue's key",
    ) {
        return;
    }
    let server = quiet_server();
    let mut con = server.connect();
    let mut lua = Lua::load(&mut con);
    // Scripted hand-over: Lua enqueues, the module leases, renews, reclaims
    // and acks, and Lua leases what the module re-queued.
    let items = Op::Enqueue(vec![
        ("a".into(), "x".into(), 1, b"X".to_vec()),
        ("b".into(), "y".into(), 2, b"Y".to_vec()),
    ]);
    assert_eq!(run_lua(&mut lua, &mut con, "shared", &items), Reply::Int(2));
    let leased = run_module(
        &mut con,
        "shared",
        &Op::Lease {
            lease_ms: 1,
            count: 1,
        },
    );
    assert_eq!(
        leased,
        Reply::Leases(vec![(b"x".to_vec(), b"X".to_vec(), 0)])
    );
    std::thread::sleep(Duration::from_millis(3));
    assert_eq!(
        run_module(&mut con, "shared", &Op::Reclaim { limit: None }),
        Reply::Int(1)
    );
    let leased = run_lua(
        &mut lua,
        &mut con,
        "shared",
        &Op::Lease {
            lease_ms: 600_000,
            count: 2,
        },
    );
    assert_eq!(
        leased,
        Reply::Leases(vec![
            (b"y".to_vec(), b"Y".to_vec(), 0),
            (b"x".to_vec(), b"X".to_vec(), 1)
        ])
    );
    assert_eq!(
        run_module(
            &mut con,
            "shared",
            &Op::Renew {
                id: "y".into(),
                stale: false,
                lease_ms: 600_000
            }
        ),
        Reply::Int(1)
    );
    assert_eq!(
        run_module(
            &mut con,
            "shared",
            &Op::Ack {
                id: "x".into(),
                stale: false
            }
        ),
        Reply::Int(1)
    );
    assert_eq!(
        run_lua(
            &mut lua,
            &mut con,
            "shared",
            &Op::Ack {
                id: "y".into(),
                stale: false
            }
        ),
        Reply::Int(1)
    );
    recount_and_assert_invariants(&mut con, "shared");

    // Random hand-over: every step by either implementation.
    let mut rng = Rng::new(seed());
    let mut enqueued = std::collections::BTreeSet::new();
    let mut acked = 0i64;
    for _ in 0..400 {
        let op = random_op(&mut rng);
        std::thread::sleep(Duration::from_millis(1));
        let reply = if rng.chance(50) {
            run_lua(&mut lua, &mut con, "mixed", &op)
        } else {
            run_module(&mut con, "mixed", &op)
        };
        match (&op, reply) {
            (Op::Enqueue(items), _) => enqueued.extend(items.iter().map(|i| i.1.clone())),
            (Op::Ack { .. }, Reply::Int(n)) => acked += n,
            _ => {}
        }
        recount_and_assert_invariants(&mut con, "mixed");
    }
    let stats = stats(&mut con, "mixed");
    let live = match (&stats["queued"], &stats["inflight"]) {
        (Value::Int(q), Value::Int(i)) => q + i,
        other => panic!("{other:?}"),
    };
    // Ids are reused after an ack, so count distinct live ids plus acks >= ids seen.
    assert!(
        live + acked >= enqueued.len() as i64,
        "lost items: live {live} + acked {acked} < {}",
        enqueued.len()
    );
}

#[test]
fn the_scripts_and_the_module_in_turn_drive_a_queue_without_settings_as_the_scripts_alone() {
    if keys_layout_only(
        "one queue driven by the Lua scripts and the module in turn: the scripts work on \
         the keys layout's keys, and get WRONGTYPE on a native queue's key",
    ) {
        return;
    }
    // Two queues get the same operations: `alone` from the scripts only,
    // `mixed` from either implementation at random, never recounted (the
    // module's per-partition counts of `mixed` go stale whenever a script
    // moves an item; with no settings they must change nothing).
    let server = quiet_server();
    let mut con = server.connect();
    let mut lua = Lua::load(&mut con);
    let item =
        |partition: &str, id: &str| (partition.to_string(), id.to_string(), 1, b"P".to_vec());
    // First a fixed hand-over: the module enqueues p's x, the scripts lease
    // it (and the queue's current virtual time moves past p's), then the
    // module enqueues p's y: the scripts score y after the current virtual
    // time, and so must the module.
    let lease_two = Op::Lease {
        lease_ms: 600_000,
        count: 2,
    };
    let mut steps: Vec<(bool, Op)> = vec![
        (true, Op::Enqueue(vec![item("p", "x")])),
        (
            false,
            Op::Enqueue(vec![
                item("o", "o1"),
                item("o", "o2"),
                item("o", "o3"),
                item("o", "o4"),
            ]),
        ),
        (false, lease_two.clone()),
        (false, lease_two.clone()),
        (true, Op::Enqueue(vec![item("p", "y")])),
        (false, lease_two),
    ];
    let mut rng = Rng::new(seed());
    steps.extend((0..300).map(|_| (rng.chance(50), random_op(&mut rng))));
    let mut history = Vec::new();
    for (by_module, op) in steps {
        history.push((by_module, op.clone()));
        // Leases of 1 ms have expired for both queues by the next step.
        std::thread::sleep(Duration::from_millis(2));
        let expected = run_lua(&mut lua, &mut con, "alone", &op);
        let got = if by_module {
            run_module(&mut con, "mixed", &op)
        } else {
            run_lua(&mut lua, &mut con, "mixed", &op)
        };
        assert_eq!(
            got, expected,
            "reply differs after (by module?, op) {history:?}"
        );
        assert_eq!(
            contents(&mut con, "mixed"),
            contents(&mut con, "alone"),
            "keys differ after (by module?, op) {history:?}"
        );
    }
    recount_and_assert_invariants(&mut con, "mixed");
}
