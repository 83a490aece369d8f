//! vtrr: a weighted fair queue with leases (virtual-time round-robin),
//! native inside Redis, on vtrr-queue's key layout.
//!
//! This file only registers: commands, configs, INFO, timer and events.

// Every `unsafe` block says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod commands;
pub mod config;
pub mod core;
pub mod engine;
pub mod error;
pub mod info;
pub mod layout;
pub mod limits;
pub mod ops;
pub mod replication;
pub mod server;
pub mod store;
pub mod text;
pub mod timer;
pub mod watch;

use redis_module::configuration::ConfigurationFlags;
use redis_module::server_events::{LoadingSubevent, ServerRole};
use redis_module::{redis_module, Context, InfoContext, RedisResult, RedisString, Status};
use redis_module_macros::{
    config_changed_event_handler, info_command_handler, loading_event_handler,
    role_changed_event_handler,
};

use commands::{
    apply, cancel, dead_letter, enqueue, lease, reclaim, schedule, stats, tenants, Command,
};
use layout::native::QUEUE_TYPE;
use server::command_info;

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    if let Err(missing) = server::api::check() {
        server::log_warning(
            ctx,
            &format!("vtrr: this server lacks {missing}; not loading"),
        );
        return Status::Err;
    }
    server::cluster::set_module_options(ctx);
    for command in COMMANDS {
        if let Err(e) = command_info::set(ctx, &command.info) {
            server::log_warning(ctx, &format!("vtrr: {e}"));
            return Status::Err;
        }
    }
    if !server::subscribe_to_swapdb(ctx, timer::on_swapdb) {
        server::log_warning(
            ctx,
            "vtrr: could not subscribe to SWAPDB events; not loading",
        );
        return Status::Err;
    }
    if !server::subscribe_to_flush(ctx, timer::on_flush) {
        server::log_warning(
            ctx,
            "vtrr: could not subscribe to FLUSHDB events; not loading",
        );
        return Status::Err;
    }
    if !server::cluster::follow_migrations(ctx) {
        server::log_warning(
            ctx,
            "vtrr: could not register the slot-migration filter; not loading",
        );
        return Status::Err;
    }
    timer::reschedule(ctx);
    timer::request_rebuild(ctx);
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
fn on_loading(ctx: &Context, event: LoadingSubevent) {
    if event == LoadingSubevent::Ended {
        timer::request_rebuild(ctx);
    }
}

#[role_changed_event_handler]
fn on_role_changed(ctx: &Context, _role: ServerRole) {
    timer::request_rebuild(ctx);
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

/// Registers the module with its commands, each listed once: the name,
/// flags and handler come from the command's own file.
macro_rules! register {
    ($($command:expr),* $(,)?) => {
        /// Every command, for the metadata `init` sets.
        const COMMANDS: &[&Command] = &[$(&$command),*];

        // The crate's registration code logs its own fixed load-time
        // messages through the log calls the module itself may not use.
        #[allow(clippy::disallowed_methods)]
        mod registration {
            use super::*;

        redis_module! {
    name: "vtrr",
    version: 1,
    allocator: (ModuleAllocator, MODULE_ALLOCATOR),
    data_types: [QUEUE_TYPE],
    init: init,
    commands: [
        $([$command.info.name, $command.handler, $command.info.flags, 1, 1, 1, ""]),*
    ],
    event_handlers: [
        [@ZSET @GENERIC: timer::on_keyspace_event],
    ],
    configurations: [
        i64: [
            ["reclaim-interval-ms", &config::RECLAIM_INTERVAL_MS, config::RECLAIM_INTERVAL_MS_DEFAULT, config::RECLAIM_INTERVAL_MS_MIN, config::RECLAIM_INTERVAL_MS_MAX, ConfigurationFlags::DEFAULT, None],
            ["reclaim-batch", &config::RECLAIM_BATCH, config::RECLAIM_BATCH_DEFAULT, config::RECLAIM_BATCH_MIN, config::RECLAIM_BATCH_MAX, ConfigurationFlags::DEFAULT, None],
            ["timer-budget-us", &config::TIMER_BUDGET_US, config::TIMER_BUDGET_US_DEFAULT, config::TIMER_BUDGET_US_MIN, config::TIMER_BUDGET_US_MAX, ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [],
        enum: [
            ["replication", &config::REPLICATION, config::REPLICATION_DEFAULT, ConfigurationFlags::DEFAULT, None],
            ["default-layout", &config::DEFAULT_LAYOUT, config::DEFAULT_LAYOUT_DEFAULT, ConfigurationFlags::DEFAULT, None],
        ],
        module_args_as_configuration: true,
    ]
}
        }
    };
}

register!(
    enqueue::ENQUEUE,
    enqueue::DEFER,
    lease::LEASE,
    lease::ACK,
    lease::ACKCOST,
    lease::ACKRESULT,
    lease::RENEW,
    lease::NACK,
    reclaim::RECLAIM,
    stats::STATS,
    stats::JOB,
    stats::RESULT,
    stats::CHECK,
    stats::INSPECT,
    dead_letter::POLICY,
    dead_letter::DEAD,
    dead_letter::REVIVE,
    cancel::CANCEL,
    tenants::LIMIT,
    tenants::PAUSE,
    tenants::RESUME,
    tenants::PARTITIONS,
    tenants::RECOUNT,
    schedule::SCHEDULE,
    schedule::UNSCHEDULE,
    schedule::SCHEDULES,
    commands::layout::CONVERT,
    apply::APPLY,
    commands::layout::LOAD,
);
