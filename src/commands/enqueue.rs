//! `VTRR.ENQUEUE`.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::{args, core_error, log_anomalies, open, queue_name};
use crate::core::{self, NewItem};
use crate::error;
use crate::info;
use crate::keys::QueueKey;
use crate::store::redis::Access;

const KEYS: [QueueKey; 6] = [
    QueueKey::Queue,
    QueueKey::Inflight,
    QueueKey::CurrentVirtualTime,
    QueueKey::PartitionVirtualTime,
    QueueKey::Task,
    QueueKey::Meta,
];

/// VTRR.ENQUEUE <name> <partition> <id> <weight> <payload> [<partition> <id> <weight> <payload> ...]
pub fn enqueue(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    if argv.len() < 6 || !(argv.len() - 2).is_multiple_of(4) {
        return Err(RedisError::WrongArity);
    }
    let queue = queue_name(ctx, &argv[1])?;
    let items = argv[2..]
        .chunks_exact(4)
        .map(|group| {
            let id = group[1].as_slice();
            if id.is_empty() {
                return Err(error::empty("id"));
            }
            let weight = args::int_in(group[2].as_slice(), 1, error::MAX_WEIGHT, error::weight)?;
            Ok(NewItem {
                partition: group[0].as_slice(),
                id,
                weight: weight as u64,
                payload: group[3].as_slice(),
            })
        })
        .collect::<Result<Vec<_>, RedisError>>()?;

    let mut store = open(ctx, queue, &KEYS, Access::Write)?;
    let outcome = core::enqueue(&mut store, &items).map_err(core_error(queue))?;
    store.commit(c"vtrr.enqueue");
    log_anomalies(ctx, queue, &outcome.anomalies);
    info::add(&info::ENQUEUED, outcome.added);
    Ok(RedisValue::Integer(outcome.added as i64))
}
