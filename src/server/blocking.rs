//! Clients blocked on keys (`VTRR.LEASE ... BLOCK`, `VTRR.RESULT ... BLOCK`) through
//! `RedisModule_BlockClientOnKeys`, which the crate does not wrap.

use std::os::raw::{c_int, c_void};

use redis_module::{raw, Context, ContextFlags, RedisResult, RedisValue};

use super::api::api;
use super::strings::OwnedString;

/// A client waiting for a key: what it asked for, how to serve it once the
/// key is signalled ready, and what to reply when its timeout passes (or
/// CLIENT UNBLOCK).
pub struct Waiter<T> {
    pub request: T,
    /// `None`: still nothing to give; the client keeps waiting in line.
    pub serve: fn(&Context, &T) -> Option<RedisResult>,
    pub on_timeout: fn(&T) -> RedisValue,
}

/// Whether the calling client may block: inside MULTI or a script a BLOCK
/// acts as the non-blocking form, as Redis's own blocking commands do.
pub fn may_block(ctx: &Context) -> bool {
    !ctx.get_flags()
        .intersects(ContextFlags::MULTI | ContextFlags::LUA | ContextFlags::DENY_BLOCKING)
}

/// Blocks the calling client on any of `keys` for up to `timeout_ms` (0:
/// forever). Redis serves the clients blocked on a key in the order they
/// blocked, each once per readiness signal, so one new item wakes one lease.
pub fn block_on_keys<T: 'static>(
    ctx: &Context,
    keys: &[&[u8]],
    timeout_ms: i64,
    waiter: Waiter<T>,
) {
    let names: Vec<OwnedString> = keys.iter().map(|key| OwnedString::new(key)).collect();
    let mut keys: Vec<*mut raw::RedisModuleString> = names.iter().map(|name| name.0).collect();
    let privdata = Box::into_raw(Box::new(waiter)).cast::<c_void>();
    // SAFETY: live command context; Redis copies the key array and owns
    // `privdata` until it calls `free_waiter`, exactly once.
    unsafe {
        api!(RedisModule_BlockClientOnKeys)(
            ctx.ctx,
            Some(serve_waiter::<T>),
            Some(time_out_waiter::<T>),
            Some(free_waiter::<T>),
            timeout_ms,
            keys.as_mut_ptr(),
            keys.len() as c_int,
            privdata,
        );
    }
}

/// Wakes the clients blocked on `key` (one readiness signal).
pub(crate) fn signal_ready(ctx: &Context, key: &OwnedString) {
    // SAFETY: live context and key name.
    unsafe { api!(RedisModule_SignalKeyAsReady)(ctx.ctx, key.0) };
}

/// # Safety
/// Called by Redis with the context of a client blocked by `block_on_keys::<T>`.
unsafe fn waiter_of<'a, T>(ctx: *mut raw::RedisModuleCtx) -> Option<&'a Waiter<T>> {
    let privdata = api!(RedisModule_GetBlockedClientPrivateData)(ctx).cast::<Waiter<T>>();
    privdata.as_ref()
}

extern "C" fn serve_waiter<T>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    // SAFETY: Redis calls this only for clients blocked by `block_on_keys::<T>`.
    let Some(waiter) = (unsafe { waiter_of::<T>(ctx) }) else {
        return raw::REDISMODULE_ERR as c_int;
    };
    match (waiter.serve)(&context, &waiter.request) {
        None => raw::REDISMODULE_ERR as c_int, // keep waiting
        Some(result) => {
            context.reply(result);
            raw::REDISMODULE_OK as c_int
        }
    }
}

extern "C" fn time_out_waiter<T>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    // SAFETY: as in `serve_waiter`.
    if let Some(waiter) = unsafe { waiter_of::<T>(ctx) } {
        context.reply(Ok((waiter.on_timeout)(&waiter.request)));
    }
    raw::REDISMODULE_OK as c_int
}

extern "C" fn free_waiter<T>(_ctx: *mut raw::RedisModuleCtx, privdata: *mut c_void) {
    if !privdata.is_null() {
        // SAFETY: created by Box::into_raw in `block_on_keys::<T>`, freed once.
        drop(unsafe { Box::from_raw(privdata.cast::<Waiter<T>>()) });
    }
}
