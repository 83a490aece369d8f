//! Read-only queue inspection: `VTRR.STATS` and `VTRR.CHECK`.

use std::collections::BTreeMap;

use redis_module::redisvalue::RedisValueKey;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{check_arity, queue_name, Command};
use crate::ops;
use crate::store::command_info::{CommandInfo, KEY_READ};

pub const STATS: Command = Command {
    info: CommandInfo {
        name: "vtrr.stats",
        flags: "readonly fast",
        arity: 2,
        summary: "Counts a queue's queued, leased, expired, delayed and dead items",
        complexity: "O(log N)",
        key_flags: KEY_READ,
    },
    handler: stats,
};

pub const CHECK: Command = Command {
    info: CommandInfo {
        name: "vtrr.check",
        flags: "readonly",
        arity: 2,
        summary: "Verifies a queue's cross-key invariants",
        complexity: "O(N)",
        key_flags: KEY_READ,
    },
    handler: check,
};

/// VTRR.STATS <name>
fn stats(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &STATS)?;
    let queue = queue_name(ctx, &argv[1])?;
    let stats = ops::stats(ctx, queue)?;
    let int = |n: u64| RedisValue::Integer(n as i64);
    let fields = [
        ("queued", int(stats.queued)),
        ("inflight", int(stats.inflight)),
        ("expired", int(stats.expired)),
        ("partitions", int(stats.partitions)),
        (
            "current_virtual_time",
            RedisValue::Integer(stats.current_virtual_time),
        ),
        (
            "next_expiry_ms",
            stats
                .next_expiry_ms
                .map_or(RedisValue::Null, RedisValue::Integer),
        ),
        ("delayed", int(stats.delayed)),
        ("dead", int(stats.dead)),
        (
            "next_due_ms",
            stats
                .next_due_ms
                .map_or(RedisValue::Null, RedisValue::Integer),
        ),
        ("held", int(stats.held)),
        ("paused_partitions", int(stats.paused_partitions)),
        ("capped_partitions", int(stats.capped_partitions)),
    ];
    let map: BTreeMap<RedisValueKey, RedisValue> = fields
        .into_iter()
        .map(|(name, value)| (RedisValueKey::String(name.to_string()), value))
        .collect();
    Ok(RedisValue::OrderedMap(map))
}

/// VTRR.CHECK <name>
fn check(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &CHECK)?;
    let queue = queue_name(ctx, &argv[1])?;
    let problems = ops::check(ctx, queue)?;
    Ok(RedisValue::Array(
        problems.into_iter().map(RedisValue::BulkString).collect(),
    ))
}
