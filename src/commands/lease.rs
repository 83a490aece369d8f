//! The lease family: `VTRR.LEASE`, `VTRR.ACK`, `VTRR.RENEW`.

use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use super::{args, bulk, core_error, log_anomalies, open, queue_name};
use crate::core::{self, Leased};
use crate::keys::{key_name, QueueKey};
use crate::store::redis::{block_on_key, new_token, now_ms, Access, Waiter};
use crate::{config, error, info, timer};

/// A parsed `VTRR.LEASE`, owned so a blocked client can keep it.
struct LeaseRequest {
    queue: Vec<u8>,
    lease_ms: i64,
    /// `Some(n)` when COUNT was given: the reply is then an array of leases.
    count: Option<usize>,
}

/// The longest BLOCK timeout: Redis stores it as milliseconds in a signed
/// 64-bit deadline; a year is plenty (0 already means forever).
const MAX_BLOCK_MS: i64 = 31_536_000_000;

/// Parses `VTRR.LEASE`; the second value is the BLOCK timeout, if any.
fn parse_lease(
    ctx: &Context,
    argv: &[RedisString],
) -> Result<(LeaseRequest, Option<i64>), RedisError> {
    if argv.len() < 3 {
        return Err(RedisError::WrongArity);
    }
    let queue = queue_name(ctx, &argv[1])?.to_vec();
    let lease_ms = args::lease_ms(&argv[2])?;
    let mut count = None;
    let mut block = None;
    let mut options = args::Options::new(&argv[3..]);
    while let Some((name, value)) = options.next_pair()? {
        match name.as_str() {
            "COUNT" => {
                count = Some(usize::try_from(args::positive(value, "COUNT")?).unwrap_or(usize::MAX))
            }
            "BLOCK" => {
                block = Some(args::int_in(
                    value.as_slice(),
                    0,
                    MAX_BLOCK_MS,
                    error::block_ms,
                )?)
            }
            _ => return Err(error::syntax()),
        }
    }
    Ok((
        LeaseRequest {
            queue,
            lease_ms,
            count,
        },
        block,
    ))
}

fn lease_reply(leased: Leased) -> RedisValue {
    RedisValue::Array(vec![
        bulk(leased.id),
        bulk(leased.payload),
        bulk(leased.token),
        RedisValue::Integer(leased.timeouts),
    ])
}

/// The reply for no lease: nil, or an empty array with COUNT.
fn nothing(request: &LeaseRequest) -> RedisValue {
    match request.count {
        Some(_) => RedisValue::Array(Vec::new()),
        None => RedisValue::Null,
    }
}

/// Reclaims, then leases now; an empty vector when nothing is queued.
fn grant(ctx: &Context, request: &LeaseRequest) -> Result<Vec<Leased>, RedisError> {
    let queue = request.queue.as_slice();
    let now = now_ms();
    let mut store = open(ctx, queue, &QueueKey::ALL, Access::Write)?;
    let outcome = core::lease(
        &mut store,
        now,
        request.lease_ms,
        request.count.unwrap_or(1),
        config::reclaim_batch(),
        new_token,
    )
    .map_err(core_error(queue))?;
    store.commit(if outcome.leased.is_empty() {
        c"vtrr.reclaim"
    } else {
        c"vtrr.lease"
    });
    drop(store);
    log_anomalies(ctx, queue, &outcome.anomalies);
    info::add(&info::RECLAIMED, outcome.reclaimed);
    info::add(&info::LEASED, outcome.leased.len() as u64);
    if !outcome.leased.is_empty() {
        timer::track(ctx, queue, now.saturating_add(request.lease_ms));
    }
    Ok(outcome.leased)
}

fn reply(request: &LeaseRequest, leased: Vec<Leased>) -> RedisValue {
    let mut leased = leased.into_iter().map(lease_reply);
    match request.count {
        Some(_) => RedisValue::Array(leased.collect()),
        None => leased.next().unwrap_or(RedisValue::Null),
    }
}

/// A blocked client's turn: the queue was written. The lease is granted now,
/// so its expiry counts from the moment it is served.
fn serve_blocked(ctx: &Context, request: &LeaseRequest) -> Option<RedisResult> {
    match grant(ctx, request) {
        Err(error) => Some(Err(error)),
        Ok(leased) if leased.is_empty() => None,
        Ok(leased) => Some(Ok(reply(request, leased))),
    }
}

/// VTRR.LEASE <name> <lease-ms> [COUNT <n>] [BLOCK <timeout-ms>]
pub fn lease(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    let (request, block) = parse_lease(ctx, &argv)?;
    let leased = grant(ctx, &request)?;
    // Inside MULTI or a script BLOCK acts as the non-blocking form, as
    // Redis's own blocking commands do.
    let may_block = !ctx
        .get_flags()
        .intersects(ContextFlags::MULTI | ContextFlags::LUA | ContextFlags::DENY_BLOCKING);
    match block {
        Some(timeout_ms) if leased.is_empty() && may_block => {
            let key = key_name(&request.queue, QueueKey::Queue);
            block_on_key(
                ctx,
                &key,
                timeout_ms,
                Waiter {
                    request,
                    serve: serve_blocked,
                    on_timeout: nothing,
                },
            );
            Ok(RedisValue::NoReply)
        }
        _ => Ok(reply(&request, leased)),
    }
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
    store.commit(c"vtrr.ack");
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
    store.commit(c"vtrr.renew");
    if renewed {
        info::add(&info::RENEWED, 1);
    }
    Ok(RedisValue::Integer(i64::from(renewed)))
}
