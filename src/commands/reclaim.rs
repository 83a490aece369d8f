//! `VTRR.RECLAIM`.

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{args, check_arity, queue_name, Command};
use crate::server::command_info::{CommandInfo, KEY_WRITE};
use crate::{error, ops};

pub const RECLAIM: Command = Command {
    info: CommandInfo {
        name: "vtrr.reclaim",
        flags: "write",
        arity: -2,
        summary:
            "Takes back items whose lease has expired: requeued, or dead-lettered past the policy",
        complexity: "O(log N) per item reclaimed",
        key_flags: KEY_WRITE,
    },
    handler: reclaim,
};

/// VTRR.RECLAIM <name> [LIMIT <n>]
fn reclaim(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &RECLAIM)?;
    let queue = queue_name(ctx, &argv[1])?;
    let mut limit = usize::MAX;
    let mut options = args::Options::new(&argv[2..]);
    while let Some(name) = options.next_name() {
        match name.as_str() {
            "LIMIT" => {
                let value = options.value()?;
                limit = usize::try_from(args::positive(value, "LIMIT")?).unwrap_or(usize::MAX)
            }
            _ => return Err(error::syntax()),
        }
    }
    let reclaimed = ops::reclaim(ctx, queue, &ops::Moment::now(), limit)?;
    Ok(RedisValue::Integer(reclaimed as i64))
}
