//! Command handlers: each file parses and validates every argument, hands
//! off to the operations layer, and formats the reply. Each command's
//! metadata (name, flags, arity, summary, complexity) sits beside its
//! handler, and registration reads it from there.

pub mod apply;
pub mod args;
pub mod cancel;
pub mod dead_letter;
pub mod enqueue;
pub mod layout;
pub mod lease;
pub mod reclaim;
pub mod schedule;
pub mod stats;
pub mod tenants;

use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use crate::error;
use crate::server::command_info::CommandInfo;

/// A command: what registers it, and the function that serves it.
pub struct Command {
    pub info: CommandInfo,
    pub handler: fn(&Context, Vec<RedisString>) -> RedisResult,
}

/// `argv` has the declared arity (Redis checks it too where the server
/// supports command info).
fn check_arity(argv: &[RedisString], command: &Command) -> Result<(), RedisError> {
    let argc = argv.len() as i64;
    let arity = i64::from(command.info.arity);
    let fits = if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    };
    fits.then_some(()).ok_or(RedisError::WrongArity)
}

/// The queue-name argument: non-empty, and with a hash tag in cluster mode
/// (so one queue's keys live in one slot, on one shard).
fn queue_name<'a>(ctx: &Context, raw: &'a RedisString) -> Result<&'a [u8], RedisError> {
    let name = args::queue_name(raw)?;
    if ctx.get_flags().contains(ContextFlags::CLUSTER)
        && !crate::store::vocabulary::has_hash_tag(name)
    {
        return Err(error::cluster_needs_hash_tag());
    }
    Ok(name)
}

/// A non-empty id.
fn id(raw: &RedisString) -> Result<&[u8], RedisError> {
    args::non_empty(raw, "id")
}

fn bulk(bytes: Vec<u8>) -> RedisValue {
    RedisValue::StringBuffer(bytes)
}
