//! `VTRR.RECLAIM`.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::{args, core_error, log_anomalies, open_as, queue_name};
use crate::keys::QueueKey;
use crate::store::redis::{now_ms, Access, Caller};
use crate::{core, error, info};

/// VTRR.RECLAIM <name> [LIMIT <n>]
pub fn reclaim(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    if argv.len() < 2 {
        return Err(RedisError::WrongArity);
    }
    let queue = queue_name(ctx, &argv[1])?;
    let mut limit = usize::MAX;
    let mut options = args::Options::new(&argv[2..]);
    while let Some((name, value)) = options.next_pair()? {
        match name.as_str() {
            "LIMIT" => {
                limit = usize::try_from(args::positive(value, "LIMIT")?).unwrap_or(usize::MAX)
            }
            _ => return Err(error::syntax()),
        }
    }
    let reclaimed = run(ctx, Caller::Client, queue, now_ms(), limit)?;
    Ok(RedisValue::Integer(reclaimed as i64))
}

/// Reclaims up to `limit` expired leases of `queue` in the context's database
/// and commits the effects. Shared by the command and the timer.
pub fn run(
    ctx: &Context,
    caller: Caller,
    queue: &[u8],
    now_ms: i64,
    limit: usize,
) -> Result<u64, RedisError> {
    let mut store = open_as(ctx, queue, &QueueKey::ALL, Access::Write, caller)?;
    let outcome = core::reclaim(&mut store, now_ms, limit).map_err(core_error(queue))?;
    store.commit(c"vtrr.reclaim");
    drop(store);
    log_anomalies(ctx, queue, &outcome.anomalies);
    info::add(&info::RECLAIMED, outcome.reclaimed);
    Ok(outcome.reclaimed)
}
