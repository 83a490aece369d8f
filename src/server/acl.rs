//! ACL checks on the keys a command opens. The commands name a queue, not
//! keys, so Redis cannot check them itself. A user is looked up per call and
//! never kept: `ACL DELUSER` frees it.

use std::os::raw::c_int;
use std::ptr;

use redis_module::{raw, Context};

use super::api::api;
use super::from_master_or_aof;
use super::strings::OwnedString;

/// How a key is opened, and so the ACL permission it needs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

impl Access {
    /// The access an operation needs: writing if it writes.
    pub fn of(writes: bool) -> Access {
        if writes {
            Access::Write
        } else {
            Access::Read
        }
    }

    /// The mode `RedisModule_OpenKey` opens a key in for it.
    pub fn open_mode(self) -> std::os::raw::c_int {
        (match self {
            Access::Read => raw::REDISMODULE_READ,
            Access::Write => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        }) as std::os::raw::c_int
    }
}

/// The ACL user of the calling client.
pub struct AclUser(*mut raw::RedisModuleUser);

impl AclUser {
    /// None where Redis itself acts: the timer (no client), a master's
    /// replication stream and AOF loading (clients without a user, whose
    /// name `GetCurrentUserName` would dereference).
    pub fn of_caller(ctx: &Context) -> Option<AclUser> {
        if from_master_or_aof(ctx) {
            return None;
        }
        // SAFETY: live context; the returned name is freed right after use,
        // the user is freed on drop.
        unsafe {
            let name = api!(RedisModule_GetCurrentUserName)(ctx.ctx);
            if name.is_null() {
                return None;
            }
            let user = api!(RedisModule_GetModuleUserFromUserName)(name);
            api!(RedisModule_FreeString)(ptr::null_mut(), name);
            (!user.is_null()).then_some(AclUser(user))
        }
    }

    pub fn may(&self, key: &OwnedString, access: Access) -> bool {
        let flags = match access {
            Access::Read => raw::REDISMODULE_CMD_KEY_ACCESS,
            Access::Write => raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE,
        } as c_int;
        // SAFETY: valid user and key name.
        unsafe {
            api!(RedisModule_ACLCheckKeyPermissions)(self.0, key.0, flags)
                == raw::REDISMODULE_OK as c_int
        }
    }
}

impl AclUser {
    /// Records a denied key in `ACL LOG` (reason `key`, the key's name, this
    /// user), where Redis records its own key denials.
    pub fn log_denied(&self, ctx: &Context, key: &OwnedString) {
        // SAFETY: live context, valid user and key name; Redis copies what
        // it keeps.
        unsafe {
            api!(RedisModule_ACLAddLogEntry)(
                ctx.ctx,
                self.0,
                key.0,
                raw::RedisModuleACLLogEntryReason_REDISMODULE_ACL_LOG_KEY,
            )
        };
    }
}

impl Drop for AclUser {
    fn drop(&mut self) {
        // SAFETY: obtained from GetModuleUserFromUserName, freed once.
        unsafe { api!(RedisModule_FreeModuleUser)(self.0) };
    }
}
