//! Every error reply of the module, each starting with its Redis error code.
//! Argument names match the README's command reference.

use redis_module::RedisError;

use crate::core::CoreError;
use crate::limits::{
    MAX_BLOCK_MS, MAX_CONCURRENCY, MAX_DELAY_MS, MAX_LEASE_MS, MAX_PARTITIONS_COUNT,
    MAX_POLICY_LIMIT, MAX_SHARE, MAX_WEIGHT,
};
use crate::store::native::LoadError;
use crate::store::redis::OpenError;
use crate::store::KeyKind;

fn err(message: String) -> RedisError {
    RedisError::String(message)
}

pub fn syntax() -> RedisError {
    err("ERR syntax error".into())
}

pub fn empty(argument: &str) -> RedisError {
    err(format!("ERR {argument} must not be empty"))
}

pub fn weight() -> RedisError {
    err(format!(
        "ERR weight must be an integer between 1 and {MAX_WEIGHT}"
    ))
}

pub fn lease_ms() -> RedisError {
    err(format!(
        "ERR lease-ms must be an integer between 1 and {MAX_LEASE_MS}"
    ))
}

pub fn block_ms() -> RedisError {
    err(format!(
        "ERR BLOCK timeout-ms must be an integer between 0 and {MAX_BLOCK_MS}"
    ))
}

/// `argument` is a delay: `delay-ms` of DEFER, `DELAY ms` of NACK.
pub fn delay_ms(argument: &str) -> RedisError {
    err(format!(
        "ERR {argument} must be an integer between 0 and {MAX_DELAY_MS}"
    ))
}

pub fn policy_limit(option: &str) -> RedisError {
    err(format!(
        "ERR {option} must be an integer between 0 and {MAX_POLICY_LIMIT}, or NONE"
    ))
}

/// `option` is CONCURRENCY or DEFAULT-CONCURRENCY.
pub fn concurrency(option: &str) -> RedisError {
    err(format!(
        "ERR {option} must be an integer between 1 and {MAX_CONCURRENCY}, or NONE"
    ))
}

pub fn share() -> RedisError {
    err(format!(
        "ERR SHARE must be an integer between 1 and {MAX_SHARE}"
    ))
}

pub fn partitions_count() -> RedisError {
    err(format!(
        "ERR COUNT must be an integer between 1 and {MAX_PARTITIONS_COUNT}"
    ))
}

pub fn cursor() -> RedisError {
    err("ERR invalid cursor".into())
}

pub fn exclusive(first: &str, second: &str) -> RedisError {
    err(format!("ERR {first} and {second} cannot be combined"))
}

pub fn positive(option: &str) -> RedisError {
    err(format!("ERR {option} must be a positive integer"))
}

pub fn open(error: &OpenError) -> RedisError {
    match error {
        OpenError::WrongType { key, expected } => {
            let expected = match expected {
                KeyKind::String => "a string",
                KeyKind::Hash => "a hash",
                KeyKind::Zset => "a sorted set",
                KeyKind::Native => "a native vtrr queue",
            };
            err(format!(
                "WRONGTYPE Operation against a key holding the wrong kind of value: {} must be {expected}",
                String::from_utf8_lossy(key)
            ))
        }
        OpenError::NoPermission { key } => err(format!(
            "NOPERM this user has no permissions to access the key {} of this queue",
            String::from_utf8_lossy(key)
        )),
        // Cluster clients retry TRYAGAIN; by then the slot has an owner.
        OpenError::SlotMoving => {
            err("TRYAGAIN the queue's slot is being migrated; retry when it has moved".into())
        }
    }
}

/// An internal command sent by a client.
pub fn internal_command(command: &str) -> RedisError {
    err(format!(
        "ERR {command} is internal: only a master's replication stream or the AOF may send it"
    ))
}

pub fn apply_version(version: &str) -> RedisError {
    err(format!(
        "ERR VTRR.APPLY version {version} is not one this module reads ({}): upgrade the module on this server (replicas before their master)",
        crate::replay::VERSION
    ))
}

pub fn apply_malformed(why: &str) -> RedisError {
    err(format!("ERR VTRR.APPLY malformed: {why}"))
}

pub fn cluster_needs_hash_tag() -> RedisError {
    err("ERR in cluster mode the queue name must contain a hash tag, like {files}, so all its keys share one slot".into())
}

pub fn core(error: &CoreError, queue: &[u8]) -> RedisError {
    match error {
        CoreError::CurrentVirtualTimeNotInteger => err(format!(
            "ERR vtrr:{}:current_virtual_time is not an integer",
            String::from_utf8_lossy(queue)
        )),
        CoreError::Store(refused) => err(format!(
            "ERR {} {} failed: {}",
            refused.command,
            String::from_utf8_lossy(&refused.key),
            refused.reply
        )),
    }
}

/// `VTRR.LOAD` refused a chunk: nothing was changed.
pub fn load_refused(key: &[u8], why: &LoadError) -> RedisError {
    let key = String::from_utf8_lossy(key);
    match why {
        LoadError::WrongType => err(format!(
            "WRONGTYPE VTRR.LOAD: key {key} holds another type than a native vtrr queue"
        )),
        LoadError::Undecodable(decode) => err(format!(
            "ERR VTRR.LOAD: not a native queue's encoding for key {key}: {decode}"
        )),
    }
}

/// `VTRR.CONVERT` with a layout it does not know.
pub fn unknown_layout(given: &[u8]) -> RedisError {
    err(format!(
        "ERR layout must be NATIVE or KEYS, not '{}'",
        String::from_utf8_lossy(given)
    ))
}

/// `VTRR.INSPECT` of a key a queue does not have.
pub fn unknown_key(given: &[u8]) -> RedisError {
    err(format!(
        "ERR key must be one of a queue's key suffixes (queue, inflight, task, ...), not '{}'",
        String::from_utf8_lossy(given)
    ))
}
