//! Read-only queue inspection: `VTRR.STATS`, `VTRR.JOB`, `VTRR.CHECK` and
//! `VTRR.INSPECT`.

use std::collections::BTreeMap;

use redis_module::redisvalue::RedisValueKey;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{args, check_arity, id, queue_name, Command};
use crate::core::key_view::KeyView;
use crate::core::{JobState, JobStatus};
use crate::replication::effects::format_score;
use crate::server::blocking::{block_on_keys, may_block, Waiter};
use crate::server::command_info::{CommandInfo, KEY_READ};
use crate::store::QueueKey;
use crate::{error, layout, ops};

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
        summary: "What became of items, by id: queued, held, leased, delayed, dead, done, cancelled or unknown, with what the queue keeps of each",
        complexity: "O(1) per id",
        key_flags: KEY_READ,
    },
    handler: job,
};

pub const RESULT: Command = Command {
    info: CommandInfo {
        name: "vtrr.result",
        flags: "readonly fast",
        arity: -3,
        summary: "How a job finished (done with its result, dead, cancelled), or nil while it has not; BLOCK waits for it",
        complexity: "O(1)",
        key_flags: KEY_READ,
    },
    handler: result,
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
        ("queued-partitions", int(stats.queued_partitions)),
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
    let replies = ids
        .iter()
        .zip(statuses)
        .map(|(id, status)| status_map(id, status));
    Ok(RedisValue::Array(replies.collect()))
}

/// What a client waiting for a job's outcome asked for.
struct Awaited {
    queue: Vec<u8>,
    id: Vec<u8>,
}

/// VTRR.RESULT <name> <id> [BLOCK <timeout-ms>]: the job's status once it
/// finished (done, dead, cancelled), else nil, or with BLOCK, once it does
/// or nil at the timeout.
fn result(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &RESULT)?;
    let queue = queue_name(ctx, &argv[1])?;
    let id = id(&argv[2])?;
    let mut block = None;
    let mut options = args::Options::new(&argv[3..]);
    while let Some(name) = options.next_name() {
        match name.as_str() {
            "BLOCK" => block = Some(args::block_ms(options.value()?)?),
            _ => return Err(error::syntax()),
        }
    }
    let (status, layout) = ops::result(ctx, queue, id)?;
    if status.state.is_finished() {
        return Ok(status_map(id, status));
    }
    match block {
        Some(timeout_ms) if may_block(ctx) => {
            let keys = layout::wakeup_keys(layout, queue, layout::Wakeup::Finished);
            let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let request = Awaited {
                queue: queue.to_vec(),
                id: id.to_vec(),
            };
            let waiter = Waiter {
                request,
                serve: serve_awaited,
                on_timeout: |_| RedisValue::Null,
            };
            block_on_keys(ctx, &keys, timeout_ms, waiter);
            Ok(RedisValue::NoReply)
        }
        _ => Ok(RedisValue::Null),
    }
}

/// A waiter's turn: a job of the queue finished (this one, or another).
fn serve_awaited(ctx: &Context, awaited: &Awaited) -> Option<RedisResult> {
    match ops::result(ctx, &awaited.queue, &awaited.id) {
        Err(error) => Some(Err(error)),
        Ok((status, _)) if status.state.is_finished() => Some(Ok(status_map(&awaited.id, status))),
        Ok(_) => None,
    }
}

/// One job's status as VTRR.JOB and VTRR.RESULT reply it.
pub(super) fn status_map(id: &[u8], status: JobStatus) -> RedisValue {
    let bytes = |value: Option<Vec<u8>>| value.map_or(RedisValue::Null, RedisValue::StringBuffer);
    let int = |value: Option<i64>| value.map_or(RedisValue::Null, RedisValue::Integer);
    // What an item in the queue's life has; nothing of it is kept after.
    let live = !matches!(
        status.state,
        JobState::Unknown | JobState::Done { .. } | JobState::Cancelled { .. }
    );
    let (mut expires, mut due, mut died, mut finished) = (None, None, None, None);
    let (mut reason, mut result) = (None, None);
    let state = match status.state {
        JobState::Queued => "queued",
        JobState::Held => "held",
        JobState::Leased { expires_ms } => {
            expires = Some(expires_ms);
            "leased"
        }
        JobState::Delayed { due_ms } => {
            due = Some(due_ms);
            "delayed"
        }
        JobState::Dead {
            died_ms,
            reason: why,
        } => {
            (died, reason) = (Some(died_ms), Some(why));
            "dead"
        }
        JobState::Done {
            finished_ms,
            result: returned,
        } => {
            (finished, result) = (Some(finished_ms), returned);
            "done"
        }
        JobState::Cancelled { finished_ms } => {
            finished = Some(finished_ms);
            "cancelled"
        }
        JobState::Unknown => "unknown",
    };
    let fields = [
        ("id", RedisValue::StringBuffer(id.to_vec())),
        ("state", RedisValue::SimpleStringStatic(state)),
        ("partition", bytes(status.partition)),
        ("weight", int(status.weight.map(|w| w as i64))),
        ("priority", int(live.then_some(i64::from(status.level)))),
        ("timeouts", int(live.then_some(status.timeouts))),
        ("nacks", int(live.then_some(status.nacks))),
        ("expires-ms", int(expires)),
        ("due-ms", int(due)),
        ("dead-ms", int(died)),
        ("reason", bytes(reason)),
        ("last-error", bytes(status.last_error)),
        ("finished-ms", int(finished)),
        ("result", bytes(result)),
    ];
    RedisValue::OrderedMap(
        fields
            .into_iter()
            .map(|(name, value)| (RedisValueKey::String(name.to_string()), value))
            .collect(),
    )
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
