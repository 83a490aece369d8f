//! `VTRR.CANCEL`.

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{check_arity, id, queue_name, Command};
use crate::ops;
use crate::server::command_info::{CommandInfo, KEY_WRITE};

pub const CANCEL: Command = Command {
    info: CommandInfo {
        name: "vtrr.cancel",
        flags: "write fast",
        arity: -3,
        summary: "Deletes items outright, queued, delayed, leased or dead; a cancelled lease can no longer be acked or renewed",
        complexity: "O(log N) per id",
        key_flags: KEY_WRITE,
    },
    handler: cancel,
};

/// VTRR.CANCEL <name> <id> [<id> ...]
fn cancel(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &CANCEL)?;
    let queue = queue_name(ctx, &argv[1])?;
    let ids = argv[2..].iter().map(id).collect::<Result<Vec<_>, _>>()?;
    let cancelled = ops::cancel(ctx, queue, &ops::Moment::now(), &ids)?;
    Ok(RedisValue::Integer(cancelled as i64))
}
