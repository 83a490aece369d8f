//! vtrr: a weighted fair queue with leases (virtual-time round-robin),
//! native inside Redis, on vtrr-queue's key layout.
//!
//! This file only registers: commands, configs, INFO, timer and events.

pub mod command_info;
pub mod commands;
pub mod config;
pub mod core;
pub mod error;
pub mod info;
pub mod keys;
pub mod store;
pub mod timer;

use redis_module::configuration::ConfigurationFlags;
use redis_module::server_events::{LoadingSubevent, ServerRole};
use redis_module::{
    raw, redis_module, Context, InfoContext, ModuleOptions, RedisResult, RedisString, Status,
};
use redis_module_macros::{
    config_changed_event_handler, info_command_handler, loading_event_handler,
    role_changed_event_handler,
};

use command_info::CommandInfo;
use commands::{enqueue, lease, reclaim, stats};

const KEY_READ: u32 = raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS;
const KEY_WRITE: u32 =
    raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE;

const COMMAND_INFO: [CommandInfo; 7] = [
    CommandInfo {
        name: "vtrr.enqueue",
        arity: -6,
        summary: "Adds items to a fair queue, each scored by its partition's virtual time",
        complexity: "O(log N) per item",
        key_flags: KEY_WRITE,
    },
    CommandInfo {
        name: "vtrr.lease",
        arity: -3,
        summary: "Leases the items with the lowest virtual time, after reclaiming expired leases; BLOCK waits for one",
        complexity: "O(log N) per item leased or reclaimed",
        key_flags: KEY_WRITE,
    },
    CommandInfo {
        name: "vtrr.ack",
        arity: -4,
        summary: "Finishes leased items whose lease token is current",
        complexity: "O(log N) per pair",
        key_flags: KEY_WRITE,
    },
    CommandInfo {
        name: "vtrr.renew",
        arity: 5,
        summary: "Extends a lease whose token is current",
        complexity: "O(log N)",
        key_flags: KEY_WRITE,
    },
    CommandInfo {
        name: "vtrr.reclaim",
        arity: -2,
        summary: "Re-enqueues items whose lease has expired",
        complexity: "O(log N) per item reclaimed",
        key_flags: KEY_WRITE,
    },
    CommandInfo {
        name: "vtrr.stats",
        arity: 2,
        summary: "Counts a queue's queued, leased and expired items",
        complexity: "O(log N)",
        key_flags: KEY_READ,
    },
    CommandInfo {
        name: "vtrr.check",
        arity: 2,
        summary: "Verifies a queue's cross-key invariants",
        complexity: "O(N)",
        key_flags: KEY_READ,
    },
];

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    if let Err(missing) = store::redis::check_api() {
        ctx.log_warning(&format!("vtrr: this server lacks {missing}; not loading"));
        return Status::Err;
    }
    // Keys are signalled as modified only when a command really changed
    // them, so an idle LEASE or timer tick never aborts a client's WATCH.
    ctx.set_module_options(ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED);
    for info in &COMMAND_INFO {
        if let Err(e) = command_info::set(ctx, info) {
            ctx.log_warning(&format!("vtrr: {e}"));
            return Status::Err;
        }
    }
    if !store::redis::subscribe_to_swapdb(ctx, timer::on_swapdb) {
        ctx.log_warning("vtrr: could not subscribe to SWAPDB events; not loading");
        return Status::Err;
    }
    timer::request_rebuild();
    timer::reschedule(ctx);
    Status::Ok
}

#[info_command_handler]
fn info_handler(ctx: &InfoContext, _for_crash_report: bool) -> RedisResult<()> {
    info::section(ctx)
}

#[config_changed_event_handler]
fn on_config_changed(ctx: &Context, changed: &[&str]) {
    if changed.contains(&"vtrr.reclaim-interval-ms") {
        timer::reschedule(ctx);
    }
}

#[loading_event_handler]
fn on_loading(_ctx: &Context, event: LoadingSubevent) {
    if event == LoadingSubevent::Ended {
        timer::request_rebuild();
    }
}

#[role_changed_event_handler]
fn on_role_changed(_ctx: &Context, _role: ServerRole) {
    timer::request_rebuild();
}

// Redis's allocator exists only inside Redis; unit tests run without it.
#[cfg(not(test))]
type ModuleAllocator = redis_module::alloc::RedisAlloc;
#[cfg(not(test))]
const MODULE_ALLOCATOR: ModuleAllocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type ModuleAllocator = std::alloc::System;
#[cfg(test)]
const MODULE_ALLOCATOR: ModuleAllocator = std::alloc::System;

redis_module! {
    name: "vtrr",
    version: 1,
    allocator: (ModuleAllocator, MODULE_ALLOCATOR),
    data_types: [],
    init: init,
    commands: [
        ["vtrr.enqueue", enqueue::enqueue, "write deny-oom fast", 1, 1, 1, ""],
        ["vtrr.lease", lease::lease, "write fast", 1, 1, 1, ""],
        ["vtrr.ack", lease::ack, "write fast", 1, 1, 1, ""],
        ["vtrr.renew", lease::renew, "write fast", 1, 1, 1, ""],
        ["vtrr.reclaim", reclaim::reclaim, "write", 1, 1, 1, ""],
        ["vtrr.stats", stats::stats, "readonly fast", 1, 1, 1, ""],
        ["vtrr.check", stats::check, "readonly", 1, 1, 1, ""],
    ],
    event_handlers: [
        [@ZSET @GENERIC: timer::on_keyspace_event],
    ],
    configurations: [
        i64: [
            ["reclaim-interval-ms", &config::RECLAIM_INTERVAL_MS, config::RECLAIM_INTERVAL_MS_DEFAULT, config::RECLAIM_INTERVAL_MS_MIN, config::RECLAIM_INTERVAL_MS_MAX, ConfigurationFlags::DEFAULT, None],
            ["reclaim-batch", &config::RECLAIM_BATCH, config::RECLAIM_BATCH_DEFAULT, config::RECLAIM_BATCH_MIN, config::RECLAIM_BATCH_MAX, ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [],
        enum: [],
        module_args_as_configuration: true,
    ]
}
