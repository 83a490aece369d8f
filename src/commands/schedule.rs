//! Recurring jobs: `VTRR.SCHEDULE`, `VTRR.UNSCHEDULE`, `VTRR.SCHEDULES`.

use std::collections::BTreeMap;

use redis_module::redisvalue::RedisValueKey;
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::{args, bulk, check_arity, queue_name, Command};
use crate::core::{Missed, Schedule, ScheduleView, Timing, TimingError};
use crate::server::command_info::{CommandInfo, KEY_READ, KEY_WRITE};
use crate::{error, limits, ops};

pub const SCHEDULE: Command = Command {
    info: CommandInfo {
        name: "vtrr.schedule",
        flags: "write deny-oom",
        arity: -9,
        summary: "Sets a recurring schedule: the server enqueues one item per run, EVERY <ms> or at a CRON pattern in a time zone",
        complexity: "O(log N); a CRON pattern's next run is one search of at most 8,000 steps (about 1 ms)",
        key_flags: KEY_WRITE,
    },
    handler: schedule,
};

pub const UNSCHEDULE: Command = Command {
    info: CommandInfo {
        name: "vtrr.unschedule",
        flags: "write fast",
        arity: -3,
        summary: "Removes recurring schedules; runs already enqueued stay",
        complexity: "O(log N) per schedule",
        key_flags: KEY_WRITE,
    },
    handler: unschedule,
};

pub const SCHEDULES: Command = Command {
    info: CommandInfo {
        name: "vtrr.schedules",
        flags: "readonly",
        arity: -2,
        summary: "Lists recurring schedules with their next runs: by cursor, or one",
        complexity: "O(1) per schedule listed, plus one search per run shown of a CRON schedule, 40,000 steps in all",
        key_flags: KEY_READ,
    },
    handler: schedules,
};

/// A non-empty schedule name.
fn schedule_name(raw: &RedisString) -> Result<&[u8], RedisError> {
    args::non_empty(raw, "schedule")
}

/// VTRR.SCHEDULE <name> <schedule> (EVERY <ms> | CRON <pattern> [TZ <zone>])
/// PARTITION <partition> PAYLOAD <payload> [WEIGHT <weight>]
/// [MISSED skip|one|all]
fn schedule(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &SCHEDULE)?;
    let queue = queue_name(ctx, &argv[1])?;
    let name = schedule_name(&argv[2])?;
    let mut every = None;
    let mut cron = None;
    let mut zone = None;
    let mut partition = None;
    let mut payload = None;
    let mut weight = 1;
    let mut missed = Missed::One;
    let mut options = args::Options::new(&argv[3..]);
    while let Some(option) = options.next_name() {
        match option.as_str() {
            "EVERY" => {
                let raw = options.value()?.as_slice();
                every = Some(args::int_in(raw, 1, limits::MAX_PERIOD_MS, error::every)?);
            }
            "CRON" => cron = Some(options.value()?.as_slice()),
            "TZ" => zone = Some(options.value()?.as_slice()),
            "PARTITION" => partition = Some(options.value()?.as_slice()),
            "PAYLOAD" => payload = Some(options.value()?.as_slice()),
            "WEIGHT" => {
                let raw = options.value()?.as_slice();
                weight = args::int_in(raw, 1, limits::MAX_WEIGHT, error::weight)? as u64;
            }
            "MISSED" => {
                missed = Missed::parse(options.value()?.as_slice()).ok_or_else(error::missed)?;
            }
            _ => return Err(error::syntax()),
        }
    }
    let timing = match (every, cron) {
        (Some(_), Some(_)) => return Err(error::exclusive("EVERY", "CRON")),
        (None, None) => return Err(error::required("EVERY or CRON")),
        (Some(_), None) if zone.is_some() => return Err(error::needs("TZ", "CRON")),
        (Some(period_ms), None) => Timing::every(period_ms),
        (None, Some(pattern)) => Timing::cron(pattern, zone),
    }
    .map_err(|refused| match refused {
        TimingError::Period => error::every(),
        TimingError::Pattern(why) => error::cron(&why),
        TimingError::Zone => error::time_zone(zone.unwrap_or_default()),
    })?;
    let definition = Schedule {
        timing,
        missed,
        partition: partition
            .ok_or_else(|| error::required("PARTITION"))?
            .to_vec(),
        weight,
        payload: payload.ok_or_else(|| error::required("PAYLOAD"))?.to_vec(),
    };
    let next = ops::schedule(ctx, queue, &ops::Moment::now(), name, &definition)?;
    Ok(RedisValue::Integer(next))
}

/// VTRR.UNSCHEDULE <name> <schedule> [<schedule> ...]
fn unschedule(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &UNSCHEDULE)?;
    let queue = queue_name(ctx, &argv[1])?;
    let names = argv[2..]
        .iter()
        .map(schedule_name)
        .collect::<Result<Vec<_>, _>>()?;
    let removed = ops::unschedule(ctx, queue, &names)?;
    Ok(RedisValue::Integer(removed as i64))
}

/// VTRR.SCHEDULES <name> [CURSOR <c>] [COUNT <n>] [RUNS <k>]
/// VTRR.SCHEDULES <name> SCHEDULE <schedule> [RUNS <k>]
fn schedules(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &SCHEDULES)?;
    let queue = queue_name(ctx, &argv[1])?;
    let mut cursor = None;
    let mut count = None;
    let mut only = None;
    let mut runs = 1;
    let mut options = args::Options::new(&argv[2..]);
    while let Some(option) = options.next_name() {
        match option.as_str() {
            "CURSOR" => cursor = Some(args::cursor(options.value()?)?),
            "COUNT" => {
                let raw = options.value()?.as_slice();
                let max = limits::MAX_SCHEDULES_COUNT;
                let n = args::int_in(raw, 1, max, || error::between("COUNT", 1, max))?;
                count = Some(n as usize);
            }
            "RUNS" => {
                let raw = options.value()?.as_slice();
                let max = limits::MAX_SCHEDULE_RUNS;
                runs = args::int_in(raw, 0, max, || error::between("RUNS", 0, max))? as usize;
            }
            "SCHEDULE" => only = Some(schedule_name(options.value()?)?),
            _ => return Err(error::syntax()),
        }
    }
    if let Some(name) = only {
        if cursor.is_some() {
            return Err(error::exclusive("SCHEDULE", "CURSOR"));
        }
        if count.is_some() {
            return Err(error::exclusive("SCHEDULE", "COUNT"));
        }
        let view = ops::schedule_view(ctx, queue, name, runs)?;
        return Ok(view.map_or(RedisValue::Null, entry));
    }
    let count = count.unwrap_or(limits::SCHEDULES_DEFAULT_COUNT);
    let (next, page) = ops::schedules_page(ctx, queue, cursor.unwrap_or(0), count, runs)?;
    Ok(RedisValue::Array(vec![
        RedisValue::BulkString(next.to_string()),
        RedisValue::Array(page.into_iter().map(entry).collect()),
    ]))
}

/// One schedule as a map. A definition that does not read as one (written
/// by another client) shows only its name and runs.
fn entry(view: ScheduleView) -> RedisValue {
    let mut fields: Vec<(&str, RedisValue)> = vec![
        ("schedule", bulk(view.name)),
        (
            "next-ms",
            view.next_ms.map_or(RedisValue::Null, RedisValue::Integer),
        ),
        (
            "runs",
            RedisValue::Array(view.runs.iter().map(|&t| RedisValue::Integer(t)).collect()),
        ),
    ];
    let nil = || RedisValue::Null;
    if let Some(schedule) = view.schedule {
        let (every, cron, zone) = match &schedule.timing {
            Timing::Every { period_ms } => (RedisValue::Integer(*period_ms), nil(), nil()),
            Timing::Cron { pattern, zone, .. } => (
                nil(),
                RedisValue::BulkString(pattern.clone()),
                RedisValue::BulkString(zone.name().to_string()),
            ),
        };
        fields.extend([
            ("every-ms", every),
            ("cron", cron),
            ("tz", zone),
            (
                "missed",
                RedisValue::SimpleStringStatic(schedule.missed.name()),
            ),
            ("partition", bulk(schedule.partition)),
            ("weight", RedisValue::Integer(schedule.weight as i64)),
            ("payload", bulk(schedule.payload)),
        ]);
    }
    let map: BTreeMap<RedisValueKey, RedisValue> = fields
        .into_iter()
        .map(|(name, value)| (RedisValueKey::String(name.to_string()), value))
        .collect();
    RedisValue::OrderedMap(map)
}
