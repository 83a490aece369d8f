//! The lease family: `VTRR.LEASE`, `VTRR.ACK`, `VTRR.ACKCOST`,
//! `VTRR.ACKRESULT`, `VTRR.RENEW`,
//! `VTRR.NACK`.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::{args, bulk, check_arity, id, queue_name, Command};
use crate::core::{Ack, Leased, Nack, Nacked};
use crate::layout::{self, Wakeup};
use crate::server::blocking::{block_on_keys, may_block, Waiter};
use crate::server::command_info::{CommandInfo, KEY_WRITE};
use crate::{config, error, limits, ops};

pub const LEASE: Command = Command {
    info: CommandInfo {
        name: "vtrr.lease",
        flags: "write fast",
        arity: -3,
        summary: "Leases the items with the lowest virtual time, after reclaiming expired leases; ACK (or ACKCOST) first finishes leases; BLOCK waits for one",
        complexity: "O(log N) per item leased and per pair acked, plus at most vtrr.reclaim-batch due items",
        key_flags: KEY_WRITE,
    },
    handler: lease,
};

pub const ACK: Command = Command {
    info: CommandInfo {
        name: "vtrr.ack",
        flags: "write fast",
        arity: -4,
        summary: "Finishes leased items whose lease token is current",
        complexity: "O(log N) per pair",
        key_flags: KEY_WRITE,
    },
    handler: ack,
};

pub const ACKCOST: Command = Command {
    info: CommandInfo {
        name: "vtrr.ackcost",
        flags: "write fast",
        arity: -5,
        summary: "Finishes leased items whose lease token is current, charging each one's partition the cost its worker reports instead of its weight",
        complexity: "O(log N) per item",
        key_flags: KEY_WRITE,
    },
    handler: ackcost,
};

pub const ACKRESULT: Command = Command {
    info: CommandInfo {
        name: "vtrr.ackresult",
        flags: "write deny-oom fast",
        arity: -5,
        summary: "Finishes leased items whose lease token is current, each with the result its job returned, kept while the queue's policy keeps results",
        complexity: "O(log N) per item",
        key_flags: KEY_WRITE,
    },
    handler: ackresult,
};

pub const NACK: Command = Command {
    info: CommandInfo {
        name: "vtrr.nack",
        flags: "write fast",
        arity: -4,
        summary: "Gives a leased item back whose lease token is current: requeued, delayed, dead-lettered, or released uncounted",
        complexity: "O(log N)",
        key_flags: KEY_WRITE,
    },
    handler: nack,
};

pub const RENEW: Command = Command {
    info: CommandInfo {
        name: "vtrr.renew",
        flags: "write fast",
        arity: -5,
        summary: "Extends a lease whose token is current; COST charges its partition what the job cost since its last report",
        complexity: "O(log N)",
        key_flags: KEY_WRITE,
    },
    handler: renew,
};

/// The arguments of a parsed `VTRR.LEASE`, owned so a blocked client can
/// keep them (the core's `LeaseRequest` is what one turn asks for).
struct LeaseArgs {
    queue: Vec<u8>,
    lease_ms: i64,
    /// `Some(n)` when COUNT was given: the reply is then an array of leases.
    count: Option<usize>,
    /// WITHCOUNTERS: each lease reply carries the nack count too.
    with_counters: bool,
    /// WITHPARTITION: each lease reply carries the item's partition last.
    with_partition: bool,
    /// With ACK or ACKCOST: whether each lease it names finished its item,
    /// replied first.
    acked: Option<Vec<bool>>,
}

/// Parses `VTRR.LEASE`; then the BLOCK timeout, if any, and the leases
/// ACK or ACKCOST names.
fn parse_lease<'a>(
    ctx: &Context,
    argv: &'a [RedisString],
) -> Result<(LeaseArgs, Option<i64>, Vec<Ack<'a>>), RedisError> {
    check_arity(argv, &LEASE)?;
    let queue = queue_name(ctx, &argv[1])?.to_vec();
    let lease_ms = args::lease_ms(&argv[2])?;
    let mut count = None;
    let mut block = None;
    let mut with_counters = false;
    let mut with_partition = false;
    let mut acks = None;
    let mut options = args::Options::new(&argv[3..]);
    while let Some(name) = options.next_name() {
        match name.as_str() {
            "COUNT" => {
                let value = options.value()?;
                count = Some(usize::try_from(args::positive(value, "COUNT")?).unwrap_or(usize::MAX))
            }
            "BLOCK" => block = Some(args::block_ms(options.value()?)?),
            "WITHCOUNTERS" => with_counters = true,
            "WITHPARTITION" => with_partition = true,
            "ACK" => acks = Some(id_token_pairs(options.rest()).ok_or_else(error::ack_pairs)??),
            "ACKCOST" => acks = Some(id_token_costs(options.rest()).ok_or_else(error::ack_costs)??),
            "ACKRESULT" => {
                acks = Some(id_token_results(options.rest()).ok_or_else(error::ack_results)??)
            }
            _ => return Err(error::syntax()),
        }
    }
    Ok((
        LeaseArgs {
            queue,
            lease_ms,
            count,
            with_counters,
            with_partition,
            acked: None,
        },
        block,
        acks.unwrap_or_default(),
    ))
}

/// `<id> <token> ...` as plain acks, every id checked; None when they are
/// not one or more pairs.
fn id_token_pairs(argv: &[RedisString]) -> Option<Result<Vec<Ack<'_>>, RedisError>> {
    if argv.is_empty() || !argv.len().is_multiple_of(2) {
        return None;
    }
    Some(
        argv.chunks_exact(2)
            .map(|pair| Ok(Ack::pair(id(&pair[0])?, pair[1].as_slice())))
            .collect(),
    )
}

/// `<id> <token> <result> ...` as acks with results, every id and result
/// checked; None when they are not one or more triples.
fn id_token_results(argv: &[RedisString]) -> Option<Result<Vec<Ack<'_>>, RedisError>> {
    if argv.is_empty() || !argv.len().is_multiple_of(3) {
        return None;
    }
    Some(
        argv.chunks_exact(3)
            .map(|triple| {
                Ok(Ack {
                    result: Some(args::result(&triple[2])?),
                    ..Ack::pair(id(&triple[0])?, triple[1].as_slice())
                })
            })
            .collect(),
    )
}

/// `<id> <token> <cost> ...` as acks with costs, every id and cost
/// checked; None when they are not one or more triples.
fn id_token_costs(argv: &[RedisString]) -> Option<Result<Vec<Ack<'_>>, RedisError>> {
    if argv.is_empty() || !argv.len().is_multiple_of(3) {
        return None;
    }
    Some(
        argv.chunks_exact(3)
            .map(|triple| {
                Ok(Ack {
                    id: id(&triple[0])?,
                    token: triple[1].as_slice(),
                    cost: Some(args::cost(&triple[2])?),
                    result: None,
                })
            })
            .collect(),
    )
}

fn lease_reply(leased: Leased, with_partition: bool) -> RedisValue {
    let mut reply = vec![
        bulk(leased.id),
        bulk(leased.payload),
        bulk(leased.token),
        RedisValue::Integer(leased.timeouts),
    ];
    if let Some(nacks) = leased.nacks {
        reply.push(RedisValue::Integer(nacks));
    }
    if with_partition {
        reply.push(bulk(leased.partition));
    }
    RedisValue::Array(reply)
}

/// The reply for no lease: nil, or an empty array with COUNT.
fn nothing(request: &LeaseArgs) -> RedisValue {
    reply(request, Vec::new())
}

/// Finishes the leases of `acks`, reclaims, then leases now: whether each
/// ack took, and no leases when nothing is queued.
fn grant(ctx: &Context, request: &LeaseArgs, acks: &[Ack<'_>]) -> Result<ops::Granted, RedisError> {
    let ask = ops::LeaseAsk {
        lease_ms: request.lease_ms,
        count: request.count.unwrap_or(1),
        due_limit: config::reclaim_batch(),
        with_counters: request.with_counters,
    };
    ops::lease(ctx, &request.queue, &ops::Moment::now(), &ask, acks)
}

/// The leases (one or nil without COUNT, an array with it), after what
/// each ack did when ACK was given: `[[1, 0, ...], leases]`.
fn reply(request: &LeaseArgs, leased: Vec<Leased>) -> RedisValue {
    let mut leased = leased
        .into_iter()
        .map(|leased| lease_reply(leased, request.with_partition));
    let leases = match request.count {
        Some(_) => RedisValue::Array(leased.collect()),
        None => leased.next().unwrap_or(RedisValue::Null),
    };
    match &request.acked {
        None => leases,
        Some(acked) => RedisValue::Array(vec![
            RedisValue::Array(
                acked
                    .iter()
                    .map(|&took| RedisValue::Integer(i64::from(took)))
                    .collect(),
            ),
            leases,
        ]),
    }
}

/// A blocked client's turn: the queue was written. The lease is granted now,
/// so its expiry counts from the moment it is served (its acks were done
/// when it blocked).
fn serve_blocked(ctx: &Context, request: &LeaseArgs) -> Option<RedisResult> {
    match grant(ctx, request, &[]) {
        Err(error) => Some(Err(error)),
        Ok(granted) if granted.leased.is_empty() => None,
        Ok(granted) => Some(Ok(reply(request, granted.leased))),
    }
}

/// VTRR.LEASE <name> <lease-ms> [COUNT <n>] [BLOCK <timeout-ms>] [WITHCOUNTERS] [WITHPARTITION] [ACK <id> <token> ... | ACKCOST <id> <token> <cost> ... | ACKRESULT <id> <token> <result> ...]
fn lease(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    let (mut request, block, acks) = parse_lease(ctx, &argv)?;
    let granted = grant(ctx, &request, &acks)?;
    if !acks.is_empty() {
        request.acked = Some(granted.acked);
    }
    let leased = granted.leased;
    match block {
        Some(timeout_ms) if leased.is_empty() && may_block(ctx) => {
            let layout = layout::layout_of(ctx, &request.queue);
            let keys = layout::wakeup_keys(layout, &request.queue, Wakeup::Ready);
            let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            block_on_keys(
                ctx,
                &keys,
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

/// VTRR.ACK <name> <id> <token> [<id> <token> ...]
fn ack(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    settle(ctx, &argv, &ACK, id_token_pairs)
}

/// How ACK, ACKCOST or ACKRESULT reads its groups of arguments: the acks,
/// or None when they are not whole groups.
type AckGroups = fn(&[RedisString]) -> Option<Result<Vec<Ack<'_>>, RedisError>>;

/// ACK, ACKCOST and ACKRESULT: their groups after the queue's name, read
/// by `groups` (None: not whole groups), finish the leases they name.
fn settle(
    ctx: &Context,
    argv: &[RedisString],
    command: &Command,
    groups: AckGroups,
) -> RedisResult {
    check_arity(argv, command)?;
    let acks = groups(&argv[2..]).ok_or(RedisError::WrongArity)?;
    let queue = queue_name(ctx, &argv[1])?;
    let acks = acks?;
    let acked = ops::ack(ctx, queue, &ops::Moment::now(), &acks)?;
    Ok(RedisValue::Integer(acked as i64))
}

/// VTRR.ACKCOST <name> <id> <token> <cost> [<id> <token> <cost> ...]
///
/// A command of its own rather than a `COST` option of VTRR.ACK: ACK's
/// repeated pairs take any bytes as ids and tokens, so no keyword among
/// them could be told from an id.
fn ackcost(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    settle(ctx, &argv, &ACKCOST, id_token_costs)
}

/// VTRR.ACKRESULT <name> <id> <token> <result> [<id> <token> <result> ...]
///
/// A command of its own, as ACKCOST is: ACK's pairs take any bytes.
fn ackresult(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    settle(ctx, &argv, &ACKRESULT, id_token_results)
}

/// VTRR.RENEW <name> <id> <token> <lease-ms> [COST <cost>]
fn renew(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &RENEW)?;
    let queue = queue_name(ctx, &argv[1])?;
    let id = id(&argv[2])?;
    let lease_ms = args::lease_ms(&argv[4])?;
    let mut cost = None;
    let mut options = args::Options::new(&argv[5..]);
    while let Some(option) = options.next_name() {
        match option.as_str() {
            "COST" => cost = Some(args::cost(options.value()?)?),
            _ => return Err(error::syntax()),
        }
    }
    let renewed = ops::renew(
        ctx,
        queue,
        &ops::Moment::now(),
        Ack {
            id,
            token: argv[3].as_slice(),
            cost,
            result: None,
        },
        lease_ms,
    )?;
    Ok(RedisValue::Integer(i64::from(renewed)))
}

/// VTRR.NACK <name> <id> <token> [DELAY <ms> | DEAD | RELEASE] [REASON <text>] [WITHSTATE]
fn nack(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &NACK)?;
    let queue = queue_name(ctx, &argv[1])?;
    let id = id(&argv[2])?;
    let mut delay = None;
    let mut dead = false;
    let mut release = false;
    let mut reason = None;
    let mut with_state = false;
    let mut options = args::Options::new(&argv[4..]);
    while let Some(name) = options.next_name() {
        match name.as_str() {
            "DELAY" => {
                let value = options.value()?;
                delay = Some(args::int_in(
                    value.as_slice(),
                    0,
                    limits::MAX_DELAY_MS,
                    || error::delay_ms("DELAY ms"),
                )?)
            }
            "DEAD" => dead = true,
            "RELEASE" => release = true,
            "REASON" => {
                let text = options.value()?.as_slice();
                if !(1..=limits::MAX_REASON_BYTES).contains(&text.len()) {
                    return Err(error::reason());
                }
                reason = Some(text);
            }
            "WITHSTATE" => with_state = true,
            _ => return Err(error::syntax()),
        }
    }
    // A release is no failure: there is nothing to record.
    if release && reason.is_some() {
        return Err(error::exclusive("REASON", "RELEASE"));
    }
    let how = match (delay, dead, release) {
        (Some(_), true, _) => return Err(error::exclusive("DELAY", "DEAD")),
        (Some(_), _, true) => return Err(error::exclusive("DELAY", "RELEASE")),
        (_, true, true) => return Err(error::exclusive("DEAD", "RELEASE")),
        (Some(ms), false, false) => Nack::Delay { ms },
        (None, true, false) => Nack::Dead,
        (None, false, true) => Nack::Release,
        (None, false, false) => Nack::Requeue,
    };
    let token = argv[3].as_slice();
    let nacked = ops::nack(ctx, queue, &ops::Moment::now(), id, token, how, reason)?;
    Ok(match (nacked, with_state) {
        (nacked, false) => RedisValue::Integer(i64::from(nacked.is_some())),
        (None, true) => RedisValue::Null,
        // What the item became: the policy may have dead-lettered it.
        (Some(Nacked::Requeued), true) => RedisValue::SimpleStringStatic("queued"),
        (Some(Nacked::Delayed { .. }), true) => RedisValue::SimpleStringStatic("delayed"),
        (Some(Nacked::Dead(_)), true) => RedisValue::SimpleStringStatic("dead"),
    })
}
