//! Read-only queue inspection: `VTRR.STATS` and `VTRR.CHECK`.

use std::collections::BTreeMap;

use redis_module::redisvalue::RedisValueKey;
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::{core_error, open, queue_name};
use crate::core::{self, check};
use crate::keys::QueueKey;
use crate::store::redis::{now_ms, Access};

/// VTRR.STATS <name>
pub fn stats(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    if argv.len() != 2 {
        return Err(RedisError::WrongArity);
    }
    let queue = queue_name(ctx, &argv[1])?;
    let keys = [
        QueueKey::Queue,
        QueueKey::Inflight,
        QueueKey::PartitionVirtualTime,
        QueueKey::CurrentVirtualTime,
    ];
    let mut store = open(ctx, queue, &keys, Access::Read)?;
    let stats = core::stats(&mut store, now_ms()).map_err(core_error(queue))?;
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
    ];
    let map: BTreeMap<RedisValueKey, RedisValue> = fields
        .into_iter()
        .map(|(name, value)| (RedisValueKey::String(name.to_string()), value))
        .collect();
    Ok(RedisValue::OrderedMap(map))
}

/// VTRR.CHECK <name>
pub fn check(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    if argv.len() != 2 {
        return Err(RedisError::WrongArity);
    }
    let queue = queue_name(ctx, &argv[1])?;
    let mut store = open(ctx, queue, &QueueKey::ALL, Access::Read)?;
    let problems = check::check(&mut store);
    Ok(RedisValue::Array(
        problems.into_iter().map(RedisValue::BulkString).collect(),
    ))
}
