//! `VTRR.APPLY`, the internal command of `vtrr.replication commands`: a
//! replica or an AOF load redoes a time-dependent call with the clock
//! reading, limit and tokens the master used (format in `replay.rs`).

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{args, check_arity, Command};
use crate::core::{Ack, Schedule};
use crate::replication::replay::{Apply, Operation, ParseError};
use crate::server::command_info::{CommandInfo, KEY_WRITE};
use crate::server::from_master_or_aof;
use crate::server::log_warning;
use crate::text::Quoted;
use crate::{error, ops};

pub const APPLY: Command = Command {
    info: CommandInfo {
        name: "vtrr.apply",
        // Not deny-oom: a replica must apply what its master did.
        flags: "write",
        arity: -5,
        summary: "Internal: redoes a time-dependent call as the master ran it (vtrr.replication commands); only a master's stream or the AOF may send it",
        complexity: "That of the call it redoes",
        key_flags: KEY_WRITE,
    },
    handler: apply,
};

/// VTRR.APPLY <name> <version> <operation> <now-ms> <arguments...>
fn apply(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    check_arity(&argv, &APPLY)?;
    if !from_master_or_aof(ctx) {
        return Err(error::internal_command("VTRR.APPLY"));
    }
    let queue = args::queue_name(&argv[1])?;
    let rest: Vec<&[u8]> = argv[2..].iter().map(RedisString::as_slice).collect();
    let applied = Apply::parse(&rest).map_err(|e| {
        let refused = match e {
            ParseError::UnknownVersion(version) => error::apply_version(&version),
            ParseError::Malformed(why) => error::apply_malformed(why),
        };
        // A replica's or an AOF load's error reaches no client: say it here.
        log_warning(
            ctx,
            &format!("vtrr: not applied to queue {}: {refused}", Quoted(queue),),
        );
        refused
    })?;
    let now_ms = applied.now_ms;
    let at = ops::Moment::replayed(now_ms, &[]);
    match applied.operation {
        Operation::Lease {
            lease_ms,
            count,
            due_limit,
            tokens,
        } => {
            let leasing = ops::Moment::replayed(now_ms, &tokens);
            let ask = ops::LeaseAsk {
                lease_ms,
                count,
                due_limit,
                with_counters: false,
            };
            ops::lease(ctx, queue, &leasing, &ask, &[])?;
        }
        Operation::Renew {
            id,
            token,
            lease_ms,
            cost,
        } => {
            let renewal = Ack {
                cost,
                ..Ack::pair(id, token)
            };
            ops::renew(ctx, queue, &at, renewal, lease_ms)?;
        }
        Operation::Nack {
            id,
            token,
            how,
            reason,
        } => {
            ops::nack(ctx, queue, &at, id, token, how, reason)?;
        }
        Operation::Defer {
            due_ms,
            level,
            items,
        } => {
            ops::defer(ctx, queue, &at, due_ms, level, &items)?;
        }
        Operation::Reclaim { limit } => {
            ops::reclaim(ctx, queue, &at, limit)?;
        }
        Operation::Due {
            limit,
            schedule_steps,
        } => {
            ops::run_due(ctx, queue, now_ms, limit, schedule_steps)?;
        }
        Operation::Schedule { name, definition } => {
            let schedule = Schedule::decode(definition)
                .ok_or_else(|| error::apply_malformed("not a schedule's definition"))?;
            ops::schedule(ctx, queue, &at, name, &schedule)?;
        }
        Operation::Ack { acks } => {
            ops::ack(ctx, queue, &at, &acks)?;
        }
        Operation::Cancel { ids } => {
            ops::cancel(ctx, queue, &at, &ids)?;
        }
    }
    Ok(RedisValue::SimpleStringStatic("OK"))
}
