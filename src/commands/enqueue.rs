//! Items entering a queue: `VTRR.ENQUEUE` and `VTRR.DEFER`.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::{args, check_arity, id, queue_name, Command};
use crate::core::{parse_level, Level, NewItem, RUN_ID_PREFIX};
use crate::server::command_info::{CommandInfo, KEY_WRITE};
use crate::{error, limits, ops};

pub const ENQUEUE: Command = Command {
    info: CommandInfo {
        name: "vtrr.enqueue",
        flags: "write deny-oom fast",
        arity: -6,
        summary: "Adds items to a fair queue, each scored by its partition's virtual time at their priority level",
        complexity: "O(log N) per item",
        key_flags: KEY_WRITE,
    },
    handler: enqueue,
};

pub const DEFER: Command = Command {
    info: CommandInfo {
        name: "vtrr.defer",
        flags: "write deny-oom fast",
        arity: -7,
        summary: "Adds items that become leasable after a delay, then are scored as if enqueued at that moment",
        complexity: "O(log N) per item",
        key_flags: KEY_WRITE,
    },
    handler: defer,
};

/// The `<partition> <id> <weight> <payload>` groups of ENQUEUE and DEFER;
/// arity already checked.
fn items(groups: &[RedisString]) -> Result<Vec<NewItem<'_>>, RedisError> {
    groups
        .chunks_exact(4)
        .map(|group| {
            let id = id(&group[1])?;
            if id.starts_with(RUN_ID_PREFIX) {
                return Err(error::reserved_id());
            }
            let weight = args::int_in(group[2].as_slice(), 1, limits::MAX_WEIGHT, error::weight)?;
            Ok(NewItem {
                partition: group[0].as_slice(),
                id,
                weight: weight as u64,
                payload: group[3].as_slice(),
            })
        })
        .collect()
}

/// `[PRIORITY <level>] <groups...>`: the level (0 without PRIORITY) and
/// the groups. Groups come in fours, so PRIORITY is there exactly when two
/// words are left over; a first partition called `PRIORITY` is read as one.
fn level_and_groups(words: &[RedisString]) -> Result<(Level, &[RedisString]), RedisError> {
    match words.len() % 4 {
        0 => Ok((0, words)),
        2 if words[0].as_slice().eq_ignore_ascii_case(b"PRIORITY") => {
            let level = parse_level(words[1].as_slice()).ok_or_else(error::priority)?;
            Ok((level, &words[2..]))
        }
        _ => Err(RedisError::WrongArity),
    }
}

/// VTRR.ENQUEUE <name> [PRIORITY <level>] <partition> <id> <weight> <payload> [<partition> <id> <weight> <payload> ...]
fn enqueue(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &ENQUEUE)?;
    let (level, groups) = level_and_groups(&argv[2..])?;
    if groups.is_empty() {
        return Err(RedisError::WrongArity);
    }
    let queue = queue_name(ctx, &argv[1])?;
    let items = items(groups)?;
    let added = ops::enqueue(ctx, queue, level, &items)?;
    Ok(RedisValue::Integer(added as i64))
}

/// VTRR.DEFER <name> <delay-ms> [PRIORITY <level>] <partition> <id> <weight> <payload> [<partition> <id> <weight> <payload> ...]
fn defer(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &DEFER)?;
    let (level, groups) = level_and_groups(&argv[3..])?;
    if groups.is_empty() {
        return Err(RedisError::WrongArity);
    }
    let queue = queue_name(ctx, &argv[1])?;
    let delay_ms = args::int_in(argv[2].as_slice(), 0, limits::MAX_DELAY_MS, || {
        error::delay_ms("delay-ms")
    })?;
    let items = items(groups)?;
    let at = ops::Moment::now();
    let due_ms = at.now_ms.saturating_add(delay_ms);
    let added = ops::defer(ctx, queue, &at, due_ms, level, &items)?;
    Ok(RedisValue::Integer(added as i64))
}
