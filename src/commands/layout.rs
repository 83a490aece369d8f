//! Layouts: `VTRR.CONVERT`, which moves a queue between them, and
//! `VTRR.LOAD`, the internal command that carries a native queue's
//! encoding (rewritten AOFs, a master creating a native queue).

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{check_arity, queue_name, Command};
use crate::config::Layout;
use crate::server::command_info::{CommandInfo, KEY_WRITE};
use crate::server::from_master_or_aof;
use crate::{error, ops};

pub const CONVERT: Command = Command {
    info: CommandInfo {
        name: "vtrr.convert",
        // Not deny-oom: converting to the native layout frees memory.
        flags: "write",
        arity: 3,
        summary:
            "Moves a queue to the native or the keys layout, atomically, leases and tokens included",
        complexity: "O(N) in the queue's items",
        key_flags: KEY_WRITE,
    },
    handler: convert,
};

pub const LOAD: Command = Command {
    info: CommandInfo {
        name: "vtrr.load",
        flags: "write",
        arity: 3,
        summary: "Internal: adds a chunk of a native queue's encoding to its key; only a master's stream or the AOF may send it",
        complexity: "O(M) in the chunk's entries",
        key_flags: KEY_WRITE,
    },
    handler: load,
};

/// VTRR.CONVERT <name> NATIVE|KEYS
fn convert(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &CONVERT)?;
    let queue = queue_name(ctx, &argv[1])?;
    let given = argv[2].as_slice();
    let to = Layout::named(given).ok_or_else(|| error::unknown_layout(given))?;
    let converted = ops::convert(ctx, queue, to)?;
    Ok(RedisValue::Integer(i64::from(converted)))
}

/// VTRR.LOAD <key> <chunk>
fn load(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &LOAD)?;
    if !from_master_or_aof(ctx) {
        return Err(error::internal_command("VTRR.LOAD"));
    }
    ops::load(ctx, argv[1].as_slice(), argv[2].as_slice())?;
    Ok(RedisValue::SimpleStringStatic("OK"))
}
