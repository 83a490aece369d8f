//! The tenant controls: `VTRR.LIMIT`, `VTRR.PAUSE`, `VTRR.RESUME`,
//! `VTRR.PARTITIONS`, `VTRR.RECOUNT`.

use std::collections::BTreeMap;

use redis_module::redisvalue::RedisValueKey;
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::{args, bulk, check_arity, queue_name, Command};
use crate::core::{LimitChange, PartitionView, Rank};
use crate::server::command_info::{CommandInfo, KEY_READ, KEY_WRITE};
use crate::store::Rate;
use crate::{error, limits, ops};

pub const LIMIT: Command = Command {
    info: CommandInfo {
        name: "vtrr.limit",
        flags: "write fast",
        arity: -3,
        summary: "Sets or reads a partition's concurrency cap, share, rate limit and most items waiting (MAX-QUEUED)",
        complexity: "O(log N)",
        key_flags: KEY_WRITE,
    },
    handler: limit,
};

pub const PAUSE: Command = Command {
    info: CommandInfo {
        name: "vtrr.pause",
        flags: "write fast",
        arity: 3,
        summary: "Stops leasing a partition's items; enqueues are still accepted",
        complexity: "O(log N)",
        key_flags: KEY_WRITE,
    },
    handler: pause,
};

pub const RESUME: Command = Command {
    info: CommandInfo {
        name: "vtrr.resume",
        flags: "write fast",
        arity: 3,
        summary: "Leases a paused partition's items again, from the current virtual time",
        complexity: "O(log N)",
        key_flags: KEY_WRITE,
    },
    handler: resume,
};

pub const PARTITIONS: Command = Command {
    info: CommandInfo {
        name: "vtrr.partitions",
        flags: "readonly",
        arity: -2,
        summary: "Lists partitions with their counts, totals and settings: by cursor, one, or ranked worst first (TOP)",
        complexity: "O(1) per partition listed; TOP: O(log P + k), O(OFFSET + k) on a native queue",
        key_flags: KEY_READ,
    },
    handler: partitions,
};

pub const RECOUNT: Command = Command {
    info: CommandInfo {
        name: "vtrr.recount",
        flags: "write",
        arity: 2,
        summary: "Rewrites every partition's counts from the keys (after scripts changed them)",
        complexity: "O(N)",
        key_flags: KEY_WRITE,
    },
    handler: recount,
};

/// A non-empty partition name.
fn partition(raw: &RedisString) -> Result<&[u8], RedisError> {
    args::non_empty(raw, "partition")
}

/// A count limit (CONCURRENCY, DEFAULT-CONCURRENCY, MAX-QUEUED,
/// DEFAULT-MAX-QUEUED): 1.., or NONE.
pub fn count_limit(raw: &RedisString, option: &str) -> Result<Option<u64>, RedisError> {
    if raw.as_slice().eq_ignore_ascii_case(b"NONE") {
        return Ok(None);
    }
    args::int_in(raw.as_slice(), 1, limits::MAX_COUNT_LIMIT, || {
        error::count_limit(option)
    })
    .map(|n| Some(n as u64))
}

fn map(fields: Vec<(&str, RedisValue)>) -> RedisValue {
    let map: BTreeMap<RedisValueKey, RedisValue> = fields
        .into_iter()
        .map(|(name, value)| (RedisValueKey::String(name.to_string()), value))
        .collect();
    RedisValue::OrderedMap(map)
}

fn int(n: u64) -> RedisValue {
    RedisValue::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

fn cap(n: Option<u64>) -> RedisValue {
    n.map_or(RedisValue::Null, int)
}

/// `<option> <n> PER <ms>` (with an optional BURST, which defaults to n),
/// or `<option> NONE`: RATE of `VTRR.LIMIT`, DEFAULT-RATE of `VTRR.POLICY`.
pub(super) fn rate(
    options: &mut args::Options<'_>,
    option: &str,
) -> Result<Option<Rate>, RedisError> {
    let raw = options.value()?;
    if raw.as_slice().eq_ignore_ascii_case(b"NONE") {
        return Ok(None);
    }
    let amount = args::int_in(raw.as_slice(), 1, limits::MAX_RATE, || error::rate(option))? as u64;
    if options.next_name().as_deref() != Some("PER") {
        return Err(error::rate_per(option));
    }
    let per = options.value().map_err(|_| error::rate_per(option))?;
    let per_ms = args::int_in(per.as_slice(), 1, limits::MAX_RATE_PER_MS, || {
        error::rate_per(option)
    })?;
    Ok(Some(Rate {
        amount,
        per_ms: per_ms as u64,
        burst: amount,
    }))
}

/// A BURST value: 1.., for the `option` (RATE, DEFAULT-RATE) given with it.
pub(super) fn burst(raw: &RedisString, option: &str) -> Result<u64, RedisError> {
    Ok(args::int_in(raw.as_slice(), 1, limits::MAX_RATE, || error::burst(option))? as u64)
}

/// Gives the call's BURST, if any, to its last rate (`last`: the last
/// `option` given, with a rate or NONE).
pub(super) fn apply_burst(
    burst: Option<u64>,
    last: Option<&mut Option<Rate>>,
    option: &str,
) -> Result<(), RedisError> {
    let Some(burst) = burst else {
        return Ok(());
    };
    match last {
        Some(Some(rate)) => {
            rate.burst = burst;
            Ok(())
        }
        _ => Err(error::burst(option)),
    }
}

/// VTRR.LIMIT <name> <partition> [CONCURRENCY <n>|NONE] [SHARE <s>]
/// [RATE <n> PER <ms> [BURST <b>] | RATE NONE] [MAX-QUEUED <n>|NONE]
fn limit(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &LIMIT)?;
    let queue = queue_name(ctx, &argv[1])?;
    let name = partition(&argv[2])?;
    let mut changes = Vec::new();
    let mut burst = None;
    let mut options = args::Options::new(&argv[3..]);
    while let Some(option) = options.next_name() {
        changes.push(match option.as_str() {
            "RATE" => LimitChange::Rate(rate(&mut options, "RATE")?),
            "BURST" => {
                burst = Some(self::burst(options.value()?, "RATE")?);
                continue;
            }
            "CONCURRENCY" => {
                LimitChange::Concurrency(count_limit(options.value()?, "CONCURRENCY")?)
            }
            "MAX-QUEUED" => LimitChange::MaxQueued(count_limit(options.value()?, "MAX-QUEUED")?),
            "SHARE" => {
                let share = args::int_in(
                    options.value()?.as_slice(),
                    1,
                    limits::MAX_SHARE,
                    error::share,
                )?;
                LimitChange::Share(share as u64)
            }
            _ => return Err(error::syntax()),
        });
    }
    let last_rate = changes.iter_mut().rev().find_map(|change| match change {
        LimitChange::Rate(rate) => Some(rate),
        _ => None,
    });
    apply_burst(burst, last_rate, "RATE")?;
    if !changes.is_empty() {
        ops::set_limit(ctx, queue, name, &changes)?;
        return Ok(RedisValue::SimpleStringStatic("OK"));
    }
    let record = ops::limit(ctx, queue, name)?;
    Ok(map(vec![
        ("concurrency", cap(record.cap)),
        ("share", int(record.share)),
        ("paused", int(u64::from(record.paused))),
        ("rate", cap(record.rate.map(|rate| rate.amount))),
        ("per-ms", cap(record.rate.map(|rate| rate.per_ms))),
        ("burst", cap(record.rate.map(|rate| rate.burst))),
        ("max-queued", cap(record.max_queued)),
    ]))
}

/// VTRR.PAUSE <name> <partition>
fn pause(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &PAUSE)?;
    let queue = queue_name(ctx, &argv[1])?;
    let name = partition(&argv[2])?;
    Ok(RedisValue::Integer(i64::from(ops::pause(
        ctx, queue, name,
    )?)))
}

/// VTRR.RESUME <name> <partition>
fn resume(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &RESUME)?;
    let queue = queue_name(ctx, &argv[1])?;
    let name = partition(&argv[2])?;
    Ok(RedisValue::Integer(i64::from(ops::resume(
        ctx, queue, name,
    )?)))
}

fn view(view: PartitionView) -> RedisValue {
    let record = view.record;
    map(vec![
        ("partition", bulk(view.partition)),
        ("queued", int(record.queued)),
        ("held", int(record.held)),
        ("leased", int(record.leased)),
        ("delayed", int(record.delayed)),
        ("dead", int(record.dead)),
        (
            "virtual-time",
            view.virtual_time
                .map_or(RedisValue::Null, RedisValue::Integer),
        ),
        ("concurrency", cap(record.cap)),
        ("concurrency-in-force", cap(view.cap_in_force)),
        ("max-queued", cap(record.max_queued)),
        ("max-queued-in-force", cap(view.max_queued_in_force)),
        ("share", int(record.share)),
        ("paused", int(u64::from(record.paused))),
        ("rate", cap(record.rate.map(|rate| rate.amount))),
        ("per-ms", cap(record.rate.map(|rate| rate.per_ms))),
        ("burst", cap(record.rate.map(|rate| rate.burst))),
        (
            "rate-in-force",
            cap(view.rate_in_force.map(|rate| rate.amount)),
        ),
        (
            "per-ms-in-force",
            cap(view.rate_in_force.map(|rate| rate.per_ms)),
        ),
        (
            "burst-in-force",
            cap(view.rate_in_force.map(|rate| rate.burst)),
        ),
        (
            "tokens",
            view.tokens.map_or(RedisValue::Null, RedisValue::Integer),
        ),
        (
            "next-token-ms",
            view.next_token_ms
                .map_or(RedisValue::Null, RedisValue::Integer),
        ),
        (
            "waiting-ms",
            view.waiting_ms
                .map_or(RedisValue::Null, RedisValue::Integer),
        ),
        ("enqueued-total", int(record.totals.enqueued)),
        ("leased-total", int(record.totals.leased)),
        ("acked-total", int(record.totals.acked)),
        ("nacked-total", int(record.totals.nacked)),
        ("dead-total", int(record.totals.dead)),
        ("expired-total", int(record.totals.expired)),
    ])
}

/// VTRR.PARTITIONS <name> [CURSOR <c>] [COUNT <n>] | PARTITION <partition>
/// | TOP <k> [BY queued|oldest|leased|dead] [OFFSET <o>]
fn partitions(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &PARTITIONS)?;
    let queue = queue_name(ctx, &argv[1])?;
    let mut cursor = None;
    let mut count = None;
    let mut only = None;
    let mut top = None;
    let mut rank = None;
    let mut offset = None;
    let mut options = args::Options::new(&argv[2..]);
    while let Some(option) = options.next_name() {
        match option.as_str() {
            "CURSOR" => cursor = Some(args::cursor(options.value()?)?),
            "COUNT" => {
                let raw = options.value()?.as_slice();
                let n = args::int_in(
                    raw,
                    1,
                    limits::MAX_PARTITIONS_COUNT,
                    error::partitions_count,
                )?;
                count = Some(n as usize);
            }
            "PARTITION" => only = Some(partition(options.value()?)?),
            "TOP" => {
                let raw = options.value()?.as_slice();
                let k = args::int_in(raw, 1, limits::MAX_PARTITIONS_COUNT, error::top_count)?;
                top = Some(k as usize);
            }
            "BY" => {
                let raw = options.value()?.as_slice();
                let by = Rank::ALL
                    .into_iter()
                    .find(|rank| rank.name().as_bytes().eq_ignore_ascii_case(raw));
                rank = Some(by.ok_or_else(error::rank)?);
            }
            "OFFSET" => {
                let raw = options.value()?.as_slice();
                let o = args::int_in(raw, 0, limits::MAX_TOP_OFFSET, error::top_offset)?;
                offset = Some(o as usize);
            }
            _ => return Err(error::syntax()),
        }
    }
    match top {
        None if rank.is_some() => return Err(error::needs("BY", "TOP")),
        None if offset.is_some() => return Err(error::needs("OFFSET", "TOP")),
        None => {}
        Some(k) => {
            for (given, name) in [
                (cursor.is_some(), "CURSOR"),
                (count.is_some(), "COUNT"),
                (only.is_some(), "PARTITION"),
            ] {
                if given {
                    return Err(error::exclusive("TOP", name));
                }
            }
            let rank = rank.unwrap_or(Rank::Queued);
            let (ranked, views) = ops::partitions_top(ctx, queue, rank, offset.unwrap_or(0), k)?;
            return Ok(RedisValue::Array(vec![
                int(ranked),
                RedisValue::Array(views.into_iter().map(view).collect()),
            ]));
        }
    }
    if let Some(name) = only {
        if cursor.is_some() {
            return Err(error::exclusive("PARTITION", "CURSOR"));
        }
        if count.is_some() {
            return Err(error::exclusive("PARTITION", "COUNT"));
        }
        let one = ops::partition_view(ctx, queue, name)?;
        return Ok(RedisValue::Array(vec![
            bulk(b"0".to_vec()),
            RedisValue::Array(vec![view(one)]),
        ]));
    }
    let count = count.unwrap_or(limits::PARTITIONS_DEFAULT_COUNT);
    let (next, views) = ops::partitions_page(ctx, queue, cursor.unwrap_or(0), count)?;
    Ok(RedisValue::Array(vec![
        bulk(itoa::Buffer::new().format(next).as_bytes().to_vec()),
        RedisValue::Array(views.into_iter().map(view).collect()),
    ]))
}

/// VTRR.RECOUNT <name>
fn recount(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &RECOUNT)?;
    let queue = queue_name(ctx, &argv[1])?;
    Ok(int(ops::recount(ctx, queue)?))
}
