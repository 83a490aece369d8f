//! What is about the server, not the storage: its clock, lease tokens,
//! database selection and the server events the module follows (here), and
//! one file per other concern: `api` (the load-time guard), `strings`,
//! `acl`, `key_names`, `blocking`, `cluster` (routing and slot migration)
//! and `command_info`. Every `unsafe` block of the module lives in this
//! folder, `layout/` and `replication/effects.rs`: the rooms that talk to
//! the server.

pub mod acl;
pub mod api;
pub mod blocking;
pub mod cluster;
pub mod command_info;
pub mod key_names;
pub mod strings;

pub use strings::bytes_of;

use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::os::raw::{c_int, c_void};
use std::sync::OnceLock;

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use redis_module::{raw, Context, ContextFlags};

use self::api::api;
use self::strings::OwnedString;
use crate::text::printable_line;

/// Server time in Unix milliseconds. Read once per command.
pub fn now_ms() -> i64 {
    // SAFETY: checked at load; no arguments.
    unsafe { api!(RedisModule_Milliseconds)() }
}

thread_local! {
    /// The lease-token generator: `rand`'s StdRng (ChaCha, 12 rounds), seeded
    /// on first use from the server's cryptographic random source. As
    /// unpredictable as asking the server for every token
    /// (`GetRandomHexChars` runs SHA-256 per call), for a fraction of the
    /// cost. Only the main thread leases.
    static TOKENS: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// A fresh lease token: 32 lowercase hex characters (128 random bits).
pub fn new_token() -> Vec<u8> {
    let mut random = [0u8; 16];
    TOKENS.with_borrow_mut(|tokens| {
        tokens
            .get_or_insert_with(|| {
                let mut seed = [0u8; 32];
                // SAFETY: writes exactly `len` bytes into a buffer of that size.
                unsafe { api!(RedisModule_GetRandomBytes)(seed.as_mut_ptr(), seed.len()) };
                StdRng::from_seed(seed)
            })
            .fill_bytes(&mut random)
    });
    const HEX: &[u8; 16] = b"0123456789abcdef";
    random
        .iter()
        .flat_map(|byte| [HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]])
        .collect()
}

/// Whether the server asks modules not to propagate anything now: writes
/// are paused (CLIENT PAUSE WRITE, a manual failover, the hand-over of an
/// atomic slot migration), and a write propagated then trips an assertion.
pub fn writes_paused() -> bool {
    // SAFETY: checked at load; no arguments.
    unsafe { api!(RedisModule_AvoidReplicaTraffic)() != 0 }
}

/// Whether the call comes from the master's replication stream or the AOF
/// being loaded: writes the server must apply as they come, without a
/// client's user, routing or permission to check.
pub fn from_master_or_aof(ctx: &Context) -> bool {
    ctx.get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
}

/// The database the context works on.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: live context; checked at load.
    unsafe { api!(RedisModule_GetSelectedDb)(ctx.ctx) }
}

/// Switches the context to database `db`; false when there is no such db.
pub fn select_db(ctx: &Context, db: i32) -> bool {
    // SAFETY: live context; SelectDb validates `db` itself.
    unsafe { api!(RedisModule_SelectDb)(ctx.ctx, db) == raw::REDISMODULE_OK as c_int }
}

/// What `subscribe_to_swapdb` calls, with the two database numbers.
static SWAPDB_HANDLER: OnceLock<fn(i32, i32)> = OnceLock::new();

/// Calls `handler(first, second)` after every SWAPDB, which moves keys
/// between databases without firing any keyspace event. False when the
/// server refuses the subscription.
pub fn subscribe_to_swapdb(ctx: &Context, handler: fn(i32, i32)) -> bool {
    let _ = SWAPDB_HANDLER.set(handler);
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_SWAPDB,
        dataver: 1,
    };
    // SAFETY: live context at load; the callback has the server-event
    // signature and only reads the event data Redis passes for SWAPDB.
    unsafe {
        api!(RedisModule_SubscribeToServerEvent)(ctx.ctx, event, Some(on_swapdb))
            == raw::REDISMODULE_OK as c_int
    }
}

/// What `subscribe_to_flush` calls: the database flushed, None for all.
static FLUSH_HANDLER: OnceLock<fn(Option<i32>)> = OnceLock::new();

/// Calls `handler` after every FLUSHDB and FLUSHALL (which call no type's
/// `unlink` and fire no per-key event). False when the server refuses.
pub fn subscribe_to_flush(ctx: &Context, handler: fn(Option<i32>)) -> bool {
    let _ = FLUSH_HANDLER.set(handler);
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_FLUSHDB,
        dataver: 1,
    };
    // SAFETY: live context at load; the callback has the server-event
    // signature and only reads the event data Redis passes for FLUSHDB.
    unsafe {
        api!(RedisModule_SubscribeToServerEvent)(ctx.ctx, event, Some(on_flush))
            == raw::REDISMODULE_OK as c_int
    }
}

unsafe extern "C" fn on_flush(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
        return;
    }
    // SAFETY: for the FLUSHDB event Redis passes a RedisModuleFlushInfo
    // that lives for the duration of the call.
    let Some(flushed) = (unsafe { data.cast::<raw::RedisModuleFlushInfo>().as_ref() }) else {
        return;
    };
    if let Some(handler) = FLUSH_HANDLER.get() {
        handler((flushed.dbnum >= 0).then_some(flushed.dbnum));
    }
}

unsafe extern "C" fn on_swapdb(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut c_void,
) {
    // SAFETY: for the SWAPDB event Redis passes a RedisModuleSwapDbInfo that
    // lives for the duration of the call.
    let Some(swapped) = (unsafe { data.cast::<raw::RedisModuleSwapDbInfo>().as_ref() }) else {
        return;
    };
    if let Some(handler) = SWAPDB_HANDLER.get() {
        handler(swapped.dbnum_first, swapped.dbnum_second);
    }
}

/// Logs `message` at warning level: the one way the module logs. Messages
/// name queues, partitions and ids, which clients choose, so the line is
/// made printable ASCII (no NUL for the C string) and passed as the
/// argument of a fixed `"%s"` format, never as the format itself (the
/// crate's `Context::log*` would, and a `%` in a queue name would read the
/// server's stack).
pub fn log_warning(ctx: &Context, message: &str) {
    let line = CString::new(printable_line(message.to_owned())).unwrap_or_default();
    // SAFETY: live context; NUL-terminated level and format; the format
    // takes exactly the one C string passed.
    unsafe { api!(RedisModule_Log)(ctx.ctx, c"warning".as_ptr(), c"%s".as_ptr(), line.as_ptr()) };
}

/// Fires the module keyspace event `event` on `key`.
pub fn notify_module_event(ctx: &Context, key: &OwnedString, event: &CStr) {
    // SAFETY: live context, NUL-terminated event name, valid key name.
    unsafe {
        api!(RedisModule_NotifyKeyspaceEvent)(
            ctx.ctx,
            raw::REDISMODULE_NOTIFY_MODULE as c_int,
            event.as_ptr(),
            key.0,
        )
    };
}
