//! Command handlers: parse and validate every argument, open the queue's keys
//! (checking their types), run the core, commit effects, format the reply.

pub mod args;
pub mod enqueue;
pub mod lease;
pub mod reclaim;
pub mod stats;

use redis_module::{Context, RedisError, RedisValue};

use crate::core::{Anomaly, CoreError};
use crate::error;
use crate::store::redis::{Access, RedisStore, WrongType};

/// Opens all keys of `queue` for the given access, mapping a wrong type to
/// the WRONGTYPE reply.
fn open<'ctx>(
    ctx: &'ctx Context,
    queue: &[u8],
    keys: &[crate::keys::QueueKey],
    access: Access,
) -> Result<RedisStore<'ctx>, RedisError> {
    RedisStore::open(ctx, queue, keys, access).map_err(|wrong: WrongType| error::wrong_type(&wrong))
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
