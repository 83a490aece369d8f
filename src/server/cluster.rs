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
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use redis_module::{raw, Context, ContextFlags, RedisValue};

use super::api::api;
use super::bytes_of;
use super::{from_master_or_aof, now_ms};

/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION`: Valkey 9 refuses
/// `CLUSTER MIGRATESLOTS` unless every loaded module sets it. Set only on
/// Valkey 9 and later: Redis may give the bit another meaning.
const HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

/// Sets the module's options: keys signalled as modified only when a
/// command really changed them (so an idle LEASE or timer run never aborts
/// a client's WATCH), and, on Valkey 9+, atomic slot migration.
///
/// An atomic migration needs nothing more from the module. The source keeps
/// serving the slot and forwards the module's writes (its own replication);
/// the target loads the keys hidden from clients, and the keyspace events
/// their loading fires put the queue in the timer's index, whose probe then
/// waits until the slot is the target's. The final hand-over pauses writes,
/// which the timer respects (`writes_paused`); the old owner's keys are
/// deleted with events that take the queue out of its index.
pub fn set_module_options(ctx: &Context) {
    // HANDLE_IO_ERRORS: native queues load from diskless replication too.
    let mut options = (raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED
        | raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS) as c_int;
    if valkey_major_version(ctx).is_some_and(|major| major >= 9) {
        options |= HANDLE_ATOMIC_SLOT_MIGRATION;
    }
    // SAFETY: live context at load; the call only stores the flags.
    unsafe { api!(RedisModule_SetModuleOptions)(ctx.ctx, options) };
}

/// `valkey_version` of `INFO server`, absent on Redis.
fn valkey_major_version(ctx: &Context) -> Option<u32> {
    let reply = ctx.call("INFO", &["server"][..]).ok()?;
    let info = bytes_of(&reply)?;
    let text = String::from_utf8_lossy(&info);
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix("valkey_version:"))?;
    version.split('.').next()?.trim().parse().ok()
}

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
    let argument = |pos: c_int| -> &[u8] {
        // SAFETY: Redis passes a live filter context; an argument is a valid
        // string for the duration of the filter call, and its bytes are read
        // here, not kept past it.
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
    if from_master_or_aof(ctx) {
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

/// How often the timer may ask `CLUSTER NODES`. The reply lists every node
/// and slot range of the cluster, built afresh for each call, and the timer
/// runs every millisecond while it has work left; the suspicion it clears
/// only makes client commands probe their queue's slot, so clearing it up
/// to this much later costs a few probes, never correctness.
const SETTLE_EVERY_MS: i64 = 100;

/// When the timer last asked `CLUSTER NODES` (server time, Unix ms).
static LAST_SETTLE_MS: AtomicI64 = AtomicI64::new(i64::MIN);

/// Called by the timer: clears the suspicion once no slot of this node is
/// migrating or importing (`[slot->-id]` / `[slot-<-id]` in its line of
/// `CLUSTER NODES`), asking at most once per [`SETTLE_EVERY_MS`].
pub fn settle_suspicion(ctx: &Context) {
    if !CLUSTER_MODE.load(Ordering::Relaxed) || !MIGRATION_SUSPECTED.load(Ordering::Relaxed) {
        return;
    }
    let now = now_ms();
    let last = LAST_SETTLE_MS.load(Ordering::Relaxed);
    if now >= last && now.saturating_sub(last) < SETTLE_EVERY_MS {
        return;
    }
    LAST_SETTLE_MS.store(now, Ordering::Relaxed);
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
