//! The lease family: `VTRR.LEASE`, `VTRR.ACK`, `VTRR.RENEW`.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::{args, bulk, core_error, log_anomalies, open, queue_name};
use crate::core::{self, Leased};
use crate::keys::QueueKey;
use crate::store::redis::{new_token, now_ms, Access};
use crate::{config, error, info, timer};

/// Parsed `VTRR.LEASE` arguments.
struct LeaseArgs<'a> {
    queue: &'a [u8],
    lease_ms: i64,
    /// `Some(n)` when COUNT was given: the reply is then an array of leases.
    count: Option<usize>,
}

fn parse_lease<'a>(ctx: &Context, argv: &'a [RedisString]) -> Result<LeaseArgs<'a>, RedisError> {
    if argv.len() < 3 {
        return Err(RedisError::WrongArity);
    }
    let queue = queue_name(ctx, &argv[1])?;
    let lease_ms = args::lease_ms(&argv[2])?;
    let mut count = None;
    let mut options = args::Options::new(&argv[3..]);
    while let Some((name, value)) = options.next_pair()? {
        match name.as_str() {
            "COUNT" => {
                count = Some(usize::try_from(args::positive(value, "COUNT")?).unwrap_or(usize::MAX))
            }
            _ => return Err(error::syntax()),
        }
    }
    Ok(LeaseArgs {
        queue,
        lease_ms,
        count,
    })
}

fn lease_reply(leased: Leased) -> RedisValue {
    RedisValue::Array(vec![
        bulk(leased.id),
        bulk(leased.payload),
        bulk(leased.token),
        RedisValue::Integer(leased.timeouts),
    ])
}

/// VTRR.LEASE <name> <lease-ms> [COUNT <n>]
pub fn lease(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    let parsed = parse_lease(ctx, &argv)?;
    let queue = parsed.queue;
    let now = now_ms();
    let mut store = open(ctx, queue, &QueueKey::ALL, Access::Write)?;
    let outcome = core::lease(
        &mut store,
        now,
        parsed.lease_ms,
        parsed.count.unwrap_or(1),
        config::reclaim_batch(),
        new_token,
    )
    .map_err(core_error(queue))?;
    store.commit(if outcome.leased.is_empty() {
        "vtrr.reclaim"
    } else {
        "vtrr.lease"
    });
    drop(store);
    log_anomalies(ctx, queue, &outcome.anomalies);
    info::add(&info::RECLAIMED, outcome.reclaimed);
    info::add(&info::LEASED, outcome.leased.len() as u64);
    if !outcome.leased.is_empty() {
        timer::track(ctx, queue, now.saturating_add(parsed.lease_ms));
    }
    let mut leased = outcome.leased.into_iter().map(lease_reply);
    Ok(match parsed.count {
        Some(_) => RedisValue::Array(leased.collect()),
        None => leased.next().unwrap_or(RedisValue::Null),
    })
}

const ACK_KEYS: [QueueKey; 5] = [
    QueueKey::Inflight,
    QueueKey::InflightTask,
    QueueKey::Lease,
    QueueKey::Meta,
    QueueKey::Timeouts,
];

/// VTRR.ACK <name> <id> <token> [<id> <token> ...]
pub fn ack(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    if argv.len() < 4 || !argv.len().is_multiple_of(2) {
        return Err(RedisError::WrongArity);
    }
    let queue = queue_name(ctx, &argv[1])?;
    let pairs = argv[2..]
        .chunks_exact(2)
        .map(|pair| {
            let id = pair[0].as_slice();
            if id.is_empty() {
                return Err(error::empty("id"));
            }
            Ok((id, pair[1].as_slice()))
        })
        .collect::<Result<Vec<_>, RedisError>>()?;
    let mut store = open(ctx, queue, &ACK_KEYS, Access::Write)?;
    let acked = core::ack(&mut store, &pairs);
    store.commit("vtrr.ack");
    info::add(&info::ACKED, acked);
    Ok(RedisValue::Integer(acked as i64))
}

/// VTRR.RENEW <name> <id> <token> <lease-ms>
pub fn renew(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    if argv.len() != 5 {
        return Err(RedisError::WrongArity);
    }
    let queue = queue_name(ctx, &argv[1])?;
    let id = argv[2].as_slice();
    if id.is_empty() {
        return Err(error::empty("id"));
    }
    let lease_ms = args::lease_ms(&argv[4])?;
    let now = now_ms();
    let mut store = open(
        ctx,
        queue,
        &[QueueKey::Inflight, QueueKey::Lease],
        Access::Write,
    )?;
    let renewed = core::renew(&mut store, id, argv[3].as_slice(), now, lease_ms);
    store.commit("vtrr.renew");
    if renewed {
        info::add(&info::RENEWED, 1);
    }
    Ok(RedisValue::Integer(i64::from(renewed)))
}
