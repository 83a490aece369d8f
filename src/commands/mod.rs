//! Command handlers: parse and validate every argument, open the queue's keys
//! (checking their types), run the core, commit effects, format the reply.

pub mod args;
pub mod enqueue;
pub mod lease;
pub mod reclaim;
pub mod stats;

use redis_module::{Context, ContextFlags, RedisError, RedisString, RedisValue};

use crate::core::{Anomaly, CoreError};
use crate::error;
use crate::store::redis::{Access, Caller, RedisStore};

/// The queue-name argument: non-empty, and with a hash tag in cluster mode
/// (so one queue's keys live in one slot, on one shard).
fn queue_name<'a>(ctx: &Context, raw: &'a RedisString) -> Result<&'a [u8], RedisError> {
    let name = args::queue_name(raw)?;
    if ctx.get_flags().contains(ContextFlags::CLUSTER) && !crate::keys::has_hash_tag(name) {
        return Err(error::cluster_needs_hash_tag());
    }
    Ok(name)
}

/// Opens all keys of `queue` for the given access, mapping a wrong type to
/// the WRONGTYPE reply.
fn open<'ctx>(
    ctx: &'ctx Context,
    queue: &[u8],
    keys: &[crate::keys::QueueKey],
    access: Access,
) -> Result<RedisStore<'ctx>, RedisError> {
    open_as(ctx, queue, keys, access, Caller::Client)
}

fn open_as<'ctx>(
    ctx: &'ctx Context,
    queue: &[u8],
    keys: &[crate::keys::QueueKey],
    access: Access,
    caller: Caller,
) -> Result<RedisStore<'ctx>, RedisError> {
    RedisStore::open(ctx, queue, keys, access, caller).map_err(|e| error::open(&e))
}

fn core_error(queue: &[u8]) -> impl Fn(CoreError) -> RedisError + '_ {
    move |e| error::core(&e, queue)
}

/// Logs what a command repaired in keys written by other clients.
fn log_anomalies(ctx: &Context, queue: &[u8], anomalies: &[Anomaly]) {
    let queue = String::from_utf8_lossy(queue);
    for anomaly in anomalies {
        let text = match anomaly {
            Anomaly::MetaUnreadable { id } => format!(
                "item {} had no readable meta; re-enqueued with weight 1 in the empty partition",
                String::from_utf8_lossy(id)
            ),
            Anomaly::PayloadMissing { id } => format!(
                "item {} had no payload; used an empty one",
                String::from_utf8_lossy(id)
            ),
            Anomaly::TimeoutsUnreadable { id } => format!(
                "item {} had an unreadable timeouts count; counted from 0",
                String::from_utf8_lossy(id)
            ),
            Anomaly::PartitionVirtualTimeUnreadable { partition } => format!(
                "partition {} had an unreadable virtual time; read as 0",
                String::from_utf8_lossy(partition)
            ),
        };
        ctx.log_warning(&format!("vtrr: queue {queue}: {text}"));
    }
}

fn bulk(bytes: Vec<u8>) -> RedisValue {
    RedisValue::StringBuffer(bytes)
}
