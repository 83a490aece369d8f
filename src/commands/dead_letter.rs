//! The dead-letter family: `VTRR.POLICY`, `VTRR.DEAD`, `VTRR.REVIVE`.

use std::collections::BTreeMap;

use redis_module::redisvalue::RedisValueKey;
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::{args, bulk, check_arity, id, queue_name, tenants, Command};
use crate::core::PolicyChange;
use crate::server::command_info::{CommandInfo, KEY_READ, KEY_WRITE};
use crate::store::Rate;
use crate::{error, limits, ops};

pub const POLICY: Command = Command {
    info: CommandInfo {
        name: "vtrr.policy",
        flags: "write fast",
        arity: -2,
        summary: "Sets or reads a queue's policy: when it gives up on an item (MAX-TIMEOUTS, MAX-NACKS), the default partition cap, rate and backlog (DEFAULT-CONCURRENCY, DEFAULT-RATE, DEFAULT-MAX-QUEUED), the queue's own cap and rate (CONCURRENCY, RATE), and what it keeps of finished jobs (RESULT-TTL, DEDUP-MS)",
        complexity: "O(1); O(P) for P partitions when DEFAULT-CONCURRENCY or DEFAULT-RATE changes",
        key_flags: KEY_WRITE,
    },
    handler: policy,
};

pub const DEAD: Command = Command {
    info: CommandInfo {
        name: "vtrr.dead",
        flags: "readonly",
        arity: -2,
        summary: "Lists the oldest dead-lettered items with their counters and why they died",
        complexity: "O(log N + n) for n items listed",
        key_flags: KEY_READ,
    },
    handler: dead,
};

pub const REVIVE: Command = Command {
    info: CommandInfo {
        name: "vtrr.revive",
        flags: "write deny-oom fast",
        arity: -3,
        summary: "Puts dead-lettered items back in the queue, counters reset, scored as if fresh",
        complexity: "O(log N) per id",
        key_flags: KEY_WRITE,
    },
    handler: revive,
};

/// A RESULT-TTL / DEDUP-MS value: milliseconds, or NONE.
fn keep_ms(raw: &RedisString, option: &str) -> Result<Option<i64>, RedisError> {
    if raw.as_slice().eq_ignore_ascii_case(b"NONE") {
        return Ok(None);
    }
    args::int_in(raw.as_slice(), 1, limits::MAX_KEEP_MS, || {
        error::keep_ms(option)
    })
    .map(Some)
}

/// A MAX-TIMEOUTS / MAX-NACKS value: a limit, or NONE.
fn policy_limit(raw: &RedisString, option: &str) -> Result<Option<i64>, RedisError> {
    if raw.as_slice().eq_ignore_ascii_case(b"NONE") {
        return Ok(None);
    }
    args::int_in(raw.as_slice(), 0, limits::MAX_POLICY_LIMIT, || {
        error::policy_limit(option)
    })
    .map(Some)
}

/// VTRR.POLICY <name> [MAX-TIMEOUTS <n>|NONE] [MAX-NACKS <n>|NONE]
/// [DEFAULT-CONCURRENCY <n>|NONE] [DEFAULT-RATE <n> PER <ms> [BURST <b>] |
/// DEFAULT-RATE NONE] [CONCURRENCY <n>|NONE] [RATE <n> PER <ms> [BURST
/// <b>] | RATE NONE] [DEFAULT-MAX-QUEUED <n>|NONE] [RESULT-TTL <ms>|NONE]
/// [DEDUP-MS <ms>|NONE]. A BURST is that of the last rate given before it.
fn policy(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &POLICY)?;
    let queue = queue_name(ctx, &argv[1])?;
    let mut changes = Vec::new();
    let mut options = args::Options::new(&argv[2..]);
    while let Some(name) = options.next_name() {
        let change = match name.as_str() {
            "DEFAULT-RATE" => {
                PolicyChange::DefaultRate(tenants::rate(&mut options, "DEFAULT-RATE")?)
            }
            "RATE" => PolicyChange::QueueRate(tenants::rate(&mut options, "RATE")?),
            "BURST" => {
                let last_rate = changes.iter_mut().rev().find_map(|change| match change {
                    PolicyChange::DefaultRate(rate) => Some(("DEFAULT-RATE", rate)),
                    PolicyChange::QueueRate(rate) => Some(("RATE", rate)),
                    _ => None,
                });
                let (option, rate) = last_rate.unzip();
                // With no rate before it, the message names the older option.
                let option = option.unwrap_or("DEFAULT-RATE");
                let burst = tenants::burst(options.value()?, option)?;
                tenants::apply_burst(Some(burst), rate, option)?;
                continue;
            }
            "MAX-TIMEOUTS" => {
                PolicyChange::MaxTimeouts(policy_limit(options.value()?, "MAX-TIMEOUTS")?)
            }
            "MAX-NACKS" => PolicyChange::MaxNacks(policy_limit(options.value()?, "MAX-NACKS")?),
            "DEFAULT-CONCURRENCY" => PolicyChange::DefaultConcurrency(tenants::count_limit(
                options.value()?,
                "DEFAULT-CONCURRENCY",
            )?),
            "DEFAULT-MAX-QUEUED" => PolicyChange::DefaultMaxQueued(tenants::count_limit(
                options.value()?,
                "DEFAULT-MAX-QUEUED",
            )?),
            "RESULT-TTL" => PolicyChange::ResultTtl(keep_ms(options.value()?, "RESULT-TTL")?),
            "DEDUP-MS" => PolicyChange::Dedup(keep_ms(options.value()?, "DEDUP-MS")?),
            "CONCURRENCY" => PolicyChange::QueueConcurrency(tenants::count_limit(
                options.value()?,
                "CONCURRENCY",
            )?),
            _ => return Err(error::syntax()),
        };
        changes.push(change);
    }
    if !changes.is_empty() {
        ops::set_policy(ctx, queue, &changes)?;
        return Ok(RedisValue::SimpleStringStatic("OK"));
    }
    let (policy, defaults, default_max_queued) = ops::policy(ctx, queue)?;
    let limit = |n: Option<i64>| n.map_or(RedisValue::Null, RedisValue::Integer);
    let cap = |n: Option<u64>| limit(n.map(|n| n as i64));
    let part = |rate: Option<Rate>, part: fn(Rate) -> u64| limit(rate.map(|r| part(r) as i64));
    let (default_rate, queue_rate) = (defaults.rate, defaults.queue.rate);
    let map: BTreeMap<RedisValueKey, RedisValue> = [
        ("max-timeouts", limit(policy.max_timeouts)),
        ("max-nacks", limit(policy.max_nacks)),
        ("default-concurrency", cap(defaults.cap)),
        ("default-rate", part(default_rate, |rate| rate.amount)),
        ("default-per-ms", part(default_rate, |rate| rate.per_ms)),
        ("default-burst", part(default_rate, |rate| rate.burst)),
        ("default-max-queued", cap(default_max_queued)),
        ("result-ttl-ms", limit(defaults.keeping.result_ttl_ms)),
        ("dedup-ms", limit(defaults.keeping.dedup_ms)),
        ("concurrency", cap(defaults.queue.cap)),
        ("rate", part(queue_rate, |rate| rate.amount)),
        ("per-ms", part(queue_rate, |rate| rate.per_ms)),
        ("burst", part(queue_rate, |rate| rate.burst)),
    ]
    .into_iter()
    .map(|(name, value)| (RedisValueKey::String(name.to_string()), value))
    .collect();
    Ok(RedisValue::OrderedMap(map))
}

/// VTRR.DEAD <name> [COUNT <n>]
fn dead(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &DEAD)?;
    let queue = queue_name(ctx, &argv[1])?;
    let mut count = limits::DEAD_DEFAULT_COUNT;
    let mut options = args::Options::new(&argv[2..]);
    while let Some(name) = options.next_name() {
        match name.as_str() {
            "COUNT" => {
                let value = options.value()?;
                count = usize::try_from(args::positive(value, "COUNT")?).unwrap_or(usize::MAX)
            }
            _ => return Err(error::syntax()),
        }
    }
    let items = ops::dead_items(ctx, queue, count)?;
    Ok(RedisValue::Array(
        items
            .into_iter()
            .map(|item| {
                RedisValue::Array(vec![
                    bulk(item.id),
                    bulk(item.payload),
                    item.partition.map_or(RedisValue::Null, bulk),
                    item.weight
                        .map_or(RedisValue::Null, |w| RedisValue::Integer(w as i64)),
                    RedisValue::Integer(item.timeouts),
                    RedisValue::Integer(item.nacks),
                    RedisValue::Integer(item.died_at_ms),
                    bulk(item.reason),
                    item.last_error.map_or(RedisValue::Null, bulk),
                ])
            })
            .collect(),
    ))
}

/// VTRR.REVIVE <name> <id> [<id> ...]
fn revive(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &REVIVE)?;
    let queue = queue_name(ctx, &argv[1])?;
    let ids = argv[2..].iter().map(id).collect::<Result<Vec<_>, _>>()?;
    let revived = ops::revive(ctx, queue, &ids)?;
    Ok(RedisValue::Integer(revived as i64))
}
