//! Slot migration in Redis Cluster: the module never acts on a queue whose
//! slot is being migrated away or imported, because its keys may be split
//! between two nodes.
//!
//! Redis routes a command by its queue name (the declared key, which never
//! exists): while the slot is MIGRATING the source answers ASK itself, and
//! an IMPORTING target runs the command only for a client that sent ASKING.
//! What the module must still refuse is that ASKING call on the target, a
//! blocked LEASE woken on the source, and the timer on either side. Servers
//! before Redis 8.4 tell modules nothing of migration state, so the module
//! asks the server's own routing check: `EXISTS <name> vtrr:<name>:` through
//! `RedisModule_Call`, which in cluster mode is refused when the caller may
//! not touch the slot here (ASK while migrating, MOVED while importing
//! without ASKING, TRYAGAIN for two keys with one missing while importing
//! with ASKING, MOVED when another node owns it).
//!
//! That probe costs a call, so a client command makes it only while a
//! migration may be under way on this node: a command filter notes every
//! `ASKING` and `CLUSTER SETSLOT`, and the timer clears the note once
//! `CLUSTER NODES` shows no slot of this node migrating or importing. A
//! client can only reach an importing slot through ASKING, which the filter
//! sees first. The timer, which has no client to be redirected, always
//! probes a queue before writing to it.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::{raw, Context, ContextFlags, RedisValue};

use super::api::api;
use super::bytes_of;

/// Cluster mode (fixed for the life of the server), set at load.
static CLUSTER_MODE: AtomicBool = AtomicBool::new(false);

/// A slot of this node may be migrating or importing. Starts set: a node
/// may restart with a migration recorded in its nodes.conf.
static MIGRATION_SUSPECTED: AtomicBool = AtomicBool::new(true);

/// In cluster mode, registers the filter that notes migrations; false when
/// the server refuses it.
pub fn follow_migrations(ctx: &Context) -> bool {
    if !ctx.get_flags().contains(ContextFlags::CLUSTER) {
        return true;
    }
    CLUSTER_MODE.store(true, Ordering::Relaxed);
    // SAFETY: live context at load; the callback has the filter signature.
    let filter = unsafe {
        api!(RedisModule_RegisterCommandFilter)(
            ctx.ctx,
            Some(note_migration),
            raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
        )
    };
    !filter.is_null()
}

/// Runs before every command any client sends: a few comparisons, no
/// allocation.
extern "C" fn note_migration(filter: *mut raw::RedisModuleCommandFilterCtx) {
    // SAFETY: Redis passes a live filter context; arguments are read, not kept.
    let argument = |pos: c_int| -> &[u8] {
        unsafe {
            let arg = api!(RedisModule_CommandFilterArgGet)(filter, pos);
            if arg.is_null() {
                return &[];
            }
            let mut len = 0usize;
            let data = api!(RedisModule_StringPtrLen)(arg, &mut len);
            std::slice::from_raw_parts(data.cast::<u8>(), len)
        }
    };
    // SAFETY: as above.
    let argc = unsafe { api!(RedisModule_CommandFilterArgsCount)(filter) };
    let noted = match argc {
        1 => argument(0).eq_ignore_ascii_case(b"ASKING"),
        2.. => {
            argument(0).eq_ignore_ascii_case(b"CLUSTER")
                && argument(1).eq_ignore_ascii_case(b"SETSLOT")
        }
        _ => false,
    };
    if noted {
        MIGRATION_SUSPECTED.store(true, Ordering::Relaxed);
    }
}

/// Who is about to act on a queue.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    /// A client's command, or a blocked client being served.
    Client,
    /// The timer: no client to redirect, so it always asks.
    Timer,
}

/// Whether this node may act on `queue` now. Outside cluster mode, for the
/// master link and while loading, always; for a client, without a probe
/// unless a migration may be under way.
pub fn may_act_on(ctx: &Context, queue: &[u8], actor: Actor) -> bool {
    if !CLUSTER_MODE.load(Ordering::Relaxed) {
        return true;
    }
    if actor == Actor::Client && !MIGRATION_SUSPECTED.load(Ordering::Relaxed) {
        return true;
    }
    if ctx
        .get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
    {
        return true;
    }
    let mut never_a_key = Vec::with_capacity(queue.len() + 6);
    never_a_key.extend_from_slice(b"vtrr:");
    never_a_key.extend_from_slice(queue);
    never_a_key.push(b':');
    matches!(
        ctx.call("EXISTS", &[queue, never_a_key.as_slice()][..]),
        Ok(RedisValue::Integer(_))
    )
}

/// Called by the timer: clears the suspicion once no slot of this node is
/// migrating or importing (`[slot->-id]` / `[slot-<-id]` in its line of
/// `CLUSTER NODES`).
pub fn settle_suspicion(ctx: &Context) {
    if !CLUSTER_MODE.load(Ordering::Relaxed) || !MIGRATION_SUSPECTED.load(Ordering::Relaxed) {
        return;
    }
    let Ok(reply) = ctx.call("CLUSTER", &["NODES"][..]) else {
        return;
    };
    let Some(nodes) = bytes_of(&reply) else {
        return;
    };
    let migrating = nodes
        .split(|&b| b == b'\n')
        .find(|line| {
            line.split(|&b| b == b' ')
                .nth(2)
                .is_some_and(|flags| flags.split(|&b| b == b',').any(|f| f == b"myself"))
        })
        .is_some_and(|line| line.contains(&b'['));
    if !migrating {
        MIGRATION_SUSPECTED.store(false, Ordering::Relaxed);
    }
}

/// Whether a migration may be under way on this node (INFO, tests).
pub fn migration_suspected() -> bool {
    CLUSTER_MODE.load(Ordering::Relaxed) && MIGRATION_SUSPECTED.load(Ordering::Relaxed)
}
