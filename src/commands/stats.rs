//! Read-only queue inspection: `VTRR.STATS`, `VTRR.JOB`, `VTRR.CHECK` and
//! `VTRR.INSPECT`.

use std::collections::BTreeMap;

use redis_module::redisvalue::RedisValueKey;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{check_arity, id, queue_name, Command};
use crate::core::key_view::KeyView;
use crate::core::JobState;
use crate::error;
use crate::ops;
use crate::replication::effects::format_score;
use crate::server::command_info::{CommandInfo, KEY_READ};
use crate::store::QueueKey;

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

pub const JOB: Command = Command {
    info: CommandInfo {
        name: "vtrr.job",
        flags: "readonly fast",
        arity: -3,
        summary: "What became of items, by id: queued, held, leased, delayed, dead or unknown, with what the queue keeps of each",
        complexity: "O(1) per id",
        key_flags: KEY_READ,
    },
    handler: job,
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

pub const INSPECT: Command = Command {
    info: CommandInfo {
        name: "vtrr.inspect",
        flags: "readonly",
        arity: 3,
        summary: "One key of a queue as the keys layout has it (ZRANGE WITHSCORES, HGETALL or GET), in either layout",
        complexity: "O(N) in the key's entries",
        key_flags: KEY_READ,
    },
    handler: inspect,
};

/// VTRR.STATS <name>
fn stats(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &STATS)?;
    let queue = queue_name(ctx, &argv[1])?;
    let (stats, layout) = ops::stats(ctx, queue)?;
    let int = |n: u64| RedisValue::Integer(n as i64);
    let fields = [
        ("queued", int(stats.queued)),
        ("inflight", int(stats.inflight)),
        ("expired", int(stats.expired)),
        ("partitions", int(stats.partitions)),
        (
            "current-virtual-time",
            RedisValue::Integer(stats.current_virtual_time),
        ),
        (
            "next-expiry-ms",
            stats
                .next_expiry_ms
                .map_or(RedisValue::Null, RedisValue::Integer),
        ),
        ("delayed", int(stats.delayed)),
        ("dead", int(stats.dead)),
        (
            "next-due-ms",
            stats
                .next_due_ms
                .map_or(RedisValue::Null, RedisValue::Integer),
        ),
        ("held", int(stats.held)),
        ("paused-partitions", int(stats.paused_partitions)),
        ("capped-partitions", int(stats.capped_partitions)),
        (
            "oldest-waiting-ms",
            stats
                .oldest_waiting_ms
                .map_or(RedisValue::Null, RedisValue::Integer),
        ),
        ("enqueued-total", int(stats.totals.enqueued)),
        ("leased-total", int(stats.totals.leased)),
        ("acked-total", int(stats.totals.acked)),
        ("nacked-total", int(stats.totals.nacked)),
        ("dead-total", int(stats.totals.dead)),
        ("expired-total", int(stats.totals.expired)),
        (
            "tokens",
            stats.tokens.map_or(RedisValue::Null, RedisValue::Integer),
        ),
        ("layout", RedisValue::SimpleString(layout.name())),
    ];
    let map: BTreeMap<RedisValueKey, RedisValue> = fields
        .into_iter()
        .map(|(name, value)| (RedisValueKey::String(name.to_string()), value))
        .collect();
    Ok(RedisValue::OrderedMap(map))
}

/// VTRR.JOB <name> <id> [<id> ...]: one map per id, every field in every
/// map (null where the state has none), so a client reads one shape.
fn job(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &JOB)?;
    let queue = queue_name(ctx, &argv[1])?;
    let ids = argv[2..].iter().map(id).collect::<Result<Vec<_>, _>>()?;
    let statuses = ops::job(ctx, queue, &ids)?;
    let bytes = |value: Option<Vec<u8>>| value.map_or(RedisValue::Null, RedisValue::StringBuffer);
    let int = |value: Option<i64>| value.map_or(RedisValue::Null, RedisValue::Integer);
    let replies = ids.iter().zip(statuses).map(|(id, status)| {
        let known = status.state != JobState::Unknown;
        let (state, expires, due, died, reason) = match status.state {
            JobState::Queued => ("queued", None, None, None, None),
            JobState::Held => ("held", None, None, None, None),
            JobState::Leased { expires_ms } => ("leased", Some(expires_ms), None, None, None),
            JobState::Delayed { due_ms } => ("delayed", None, Some(due_ms), None, None),
            JobState::Dead { died_ms, reason } => ("dead", None, None, Some(died_ms), Some(reason)),
            JobState::Unknown => ("unknown", None, None, None, None),
        };
        let fields = [
            ("id", RedisValue::StringBuffer(id.to_vec())),
            ("state", RedisValue::SimpleStringStatic(state)),
            ("partition", bytes(status.partition)),
            ("weight", int(status.weight.map(|w| w as i64))),
            ("priority", int(known.then_some(i64::from(status.level)))),
            ("timeouts", int(known.then_some(status.timeouts))),
            ("nacks", int(known.then_some(status.nacks))),
            ("expires-ms", int(expires)),
            ("due-ms", int(due)),
            ("dead-ms", int(died)),
            ("reason", bytes(reason)),
            ("last-error", bytes(status.last_error)),
        ];
        RedisValue::OrderedMap(
            fields
                .into_iter()
                .map(|(name, value)| (RedisValueKey::String(name.to_string()), value))
                .collect(),
        )
    });
    Ok(RedisValue::Array(replies.collect()))
}

/// VTRR.INSPECT <name> <key>
fn inspect(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &INSPECT)?;
    let queue = queue_name(ctx, &argv[1])?;
    let given = argv[2].as_slice();
    let key = QueueKey::ALL
        .into_iter()
        .find(|key| key.suffix().as_bytes().eq_ignore_ascii_case(given))
        .ok_or_else(|| error::unknown_key(given))?;
    let flat = |pairs: Vec<(Vec<u8>, Vec<u8>)>| {
        RedisValue::Array(
            pairs
                .into_iter()
                .flat_map(|(a, b)| [RedisValue::StringBuffer(a), RedisValue::StringBuffer(b)])
                .collect(),
        )
    };
    Ok(match ops::inspect(ctx, queue, key)? {
        KeyView::Zset(entries) => flat(
            entries
                .into_iter()
                .map(|(member, score)| {
                    let mut buffer = [0u8; 32];
                    (member, format_score(score, &mut buffer).to_vec())
                })
                .collect(),
        ),
        KeyView::Hash(entries) => flat(entries),
        KeyView::String(value) => value.map_or(RedisValue::Null, RedisValue::StringBuffer),
    })
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
