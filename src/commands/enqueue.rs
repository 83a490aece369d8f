//! `VTRR.ENQUEUE`.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::{args, check_arity, id, queue_name, Command};
use crate::core::NewItem;
use crate::store::command_info::{CommandInfo, KEY_WRITE};
use crate::{error, limits, ops};

pub const ENQUEUE: Command = Command {
    info: CommandInfo {
        name: "vtrr.enqueue",
        flags: "write deny-oom fast",
        arity: -6,
        summary: "Adds items to a fair queue, each scored by its partition's virtual time",
        complexity: "O(log N) per item",
        key_flags: KEY_WRITE,
    },
    handler: enqueue,
};

/// VTRR.ENQUEUE <name> <partition> <id> <weight> <payload> [<partition> <id> <weight> <payload> ...]
fn enqueue(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &ENQUEUE)?;
    if !(argv.len() - 2).is_multiple_of(4) {
        return Err(RedisError::WrongArity);
    }
    let queue = queue_name(ctx, &argv[1])?;
    let items = argv[2..]
        .chunks_exact(4)
        .map(|group| {
            let id = id(&group[1])?;
            let weight = args::int_in(group[2].as_slice(), 1, limits::MAX_WEIGHT, error::weight)?;
            Ok(NewItem {
                partition: group[0].as_slice(),
                id,
                weight: weight as u64,
                payload: group[3].as_slice(),
            })
        })
        .collect::<Result<Vec<_>, RedisError>>()?;
    let added = ops::enqueue(ctx, queue, &items)?;
    Ok(RedisValue::Integer(added as i64))
}
