//! Command metadata for COMMAND INFO / COMMAND DOCS / arity checks, set with
//! `RedisModule_SetCommandInfo` (the crate's `#[command]` macro needs an API
//! Redis 7.0 lacks).

use std::ffi::CString;
use std::mem::size_of;
use std::os::raw::c_int;
use std::ptr;

use redis_module::{raw, Context};

/// Key-spec flags of a command that only reads its queue.
pub const KEY_READ: u32 = raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS;
/// Key-spec flags of a command that writes its queue.
pub const KEY_WRITE: u32 =
    raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE;

/// How one command is registered and what COMMAND INFO shows for it.
pub struct CommandInfo {
    pub name: &'static str,
    /// Command flags for `RedisModule_CreateCommand` (`write fast` ...).
    pub flags: &'static str,
    /// Redis arity: positive = exact argc, negative = at least |arity|.
    pub arity: c_int,
    pub summary: &'static str,
    pub complexity: &'static str,
    /// Key-spec flags of the queue-name argument (`REDISMODULE_CMD_KEY_*`).
    pub key_flags: u32,
}

/// Declares arity, docs and one key spec: argument 1, the queue name, which
/// routes the command in a cluster (a name `{tag}` shares the slot of its
/// `vtrr:{tag}:*` keys). It is flagged NOT_KEY because it names a queue, not
/// a key; the commands check ACL key permissions on the real keys themselves.
pub fn set(ctx: &Context, info: &CommandInfo) -> Result<(), String> {
    // SAFETY: plain reads of `static mut` API pointers, which the server
    // fills in before `OnLoad` and no one writes afterwards.
    let Some(set_info) = (unsafe { raw::RedisModule_SetCommandInfo }) else {
        return Ok(()); // Older server: arity is still checked by the handlers.
    };
    // SAFETY: as above.
    let Some(get_command) = (unsafe { raw::RedisModule_GetCommand }) else {
        return Ok(());
    };
    let name = CString::new(info.name).map_err(|e| e.to_string())?;
    let summary = CString::new(info.summary).map_err(|e| e.to_string())?;
    let complexity = CString::new(info.complexity).map_err(|e| e.to_string())?;
    let since = CString::new("0.1.0").map_err(|e| e.to_string())?;
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
    };
    // SAFETY: plain C structs; all-zero is the documented terminator and
    // default for every field.
    let mut key_specs: [raw::RedisModuleCommandKeySpec; 2] = unsafe { std::mem::zeroed() };
    key_specs[0].flags = u64::from(info.key_flags | raw::REDISMODULE_CMD_KEY_NOT_KEY);
    key_specs[0].begin_search_type =
        raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    key_specs[0].bs.index.pos = 1;
    key_specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    key_specs[0].fk.range = raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
        lastkey: 0,
        keystep: 1,
        limit: 0,
    };
    let command_info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: summary.as_ptr(),
        complexity: complexity.as_ptr(),
        since: since.as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity: info.arity,
        key_specs: key_specs.as_mut_ptr(),
        args: ptr::null_mut(),
    };
    // SAFETY: ctx is the OnLoad context; every pointer in command_info lives
    // until SetCommandInfo returns (Redis copies what it keeps).
    unsafe {
        let command = get_command(ctx.ctx, name.as_ptr());
        if command.is_null() {
            return Err(format!("command {} is not registered", info.name));
        }
        if set_info(command, &command_info) != raw::REDISMODULE_OK as c_int {
            return Err(format!("SetCommandInfo refused {}", info.name));
        }
    }
    Ok(())
}
