//! The load-time guard of the raw module API: every function the module
//! calls through [`api!`] is listed once in [`required!`], and the module
//! refuses to load on a server that lacks one, so no call can later find a
//! missing function (with `panic = "abort"`, that would crash the server).
//! A unit test compares the list with the calls the source makes.

use redis_module::raw;

/// Calls a module API function that [`check`] verified at load time.
macro_rules! api {
    ($name:ident) => {
        redis_module::raw::$name.expect(concat!(stringify!($name), " checked at load"))
    };
}
pub(crate) use api;

macro_rules! required {
    ($($name:ident),* $(,)?) => {
        /// Every function called through `api!`.
        pub const REQUIRED: &[&str] = &[$(stringify!($name)),*];

        /// The first required function this server lacks, if any.
        pub fn check() -> Result<(), &'static str> {
            // SAFETY: a plain read of the `static mut` API pointers, which the
            // server fills in before `OnLoad` and no one writes afterwards.
            $(if unsafe { raw::$name }.is_none() {
                return Err(stringify!($name));
            })*
            Ok(())
        }
    };
}

required!(
    RedisModule_ACLAddLogEntry,
    RedisModule_ACLCheckKeyPermissions,
    RedisModule_AvoidReplicaTraffic,
    RedisModule_BlockClientOnKeys,
    RedisModule_CloseKey,
    RedisModule_CommandFilterArgGet,
    RedisModule_CommandFilterArgsCount,
    RedisModule_CreateString,
    RedisModule_DefragAlloc,
    RedisModule_DefragCursorGet,
    RedisModule_DefragCursorSet,
    RedisModule_DefragShouldStop,
    RedisModule_DeleteKey,
    RedisModule_DigestAddStringBuffer,
    RedisModule_DigestEndSequence,
    RedisModule_EmitAOF,
    RedisModule_Free,
    RedisModule_FreeModuleUser,
    RedisModule_FreeString,
    RedisModule_GetBlockedClientPrivateData,
    RedisModule_GetContextFlags,
    RedisModule_GetContextFromIO,
    RedisModule_GetCurrentUserName,
    RedisModule_GetModuleUserFromUserName,
    RedisModule_GetRandomBytes,
    RedisModule_GetSelectedDb,
    RedisModule_HashGet,
    RedisModule_HashSet,
    RedisModule_IsIOError,
    RedisModule_KeyExists,
    RedisModule_KeyType,
    RedisModule_LoadStringBuffer,
    RedisModule_Log,
    RedisModule_Milliseconds,
    RedisModule_ModuleTypeGetType,
    RedisModule_ModuleTypeGetValue,
    RedisModule_ModuleTypeReplaceValue,
    RedisModule_ModuleTypeSetValue,
    RedisModule_NotifyKeyspaceEvent,
    RedisModule_OpenKey,
    RedisModule_RegisterCommandFilter,
    RedisModule_Replicate,
    RedisModule_ReplicateVerbatim,
    RedisModule_RetainString,
    RedisModule_SaveStringBuffer,
    RedisModule_ScanCursorCreate,
    RedisModule_ScanCursorDestroy,
    RedisModule_ScanKey,
    RedisModule_SelectDb,
    RedisModule_SetModuleOptions,
    RedisModule_SignalKeyAsReady,
    RedisModule_SignalModifiedKey,
    RedisModule_StringDMA,
    RedisModule_StringPtrLen,
    RedisModule_StringSet,
    RedisModule_SubscribeToServerEvent,
    RedisModule_UnlinkKey,
    RedisModule_ValueLength,
    RedisModule_ZsetAdd,
    RedisModule_ZsetFirstInLexRange,
    RedisModule_ZsetFirstInScoreRange,
    RedisModule_ZsetRangeCurrentElement,
    RedisModule_ZsetRangeEndReached,
    RedisModule_ZsetRangeNext,
    RedisModule_ZsetRangeStop,
    RedisModule_ZsetRem,
    RedisModule_ZsetScore,
);

/// Functions the module uses only when present (checked at each use, with a
/// fallback), so they are not required at load.
pub const OPTIONAL: &[&str] = &["RedisModule_GetCommand", "RedisModule_SetCommandInfo"];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::{OPTIONAL, REQUIRED};

    /// Every `RedisModule_*` name the module's source mentions after `api!(`
    /// or `raw::`, per form.
    fn called_in(dir: &Path, found: &mut BTreeSet<(bool, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                called_in(&path, found);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("api.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (marker, through_api) in [("api!(RedisModule_", true), ("raw::RedisModule_", false)]
            {
                for (at, _) in text.match_indices(marker) {
                    let rest = &text[at + marker.len() - "RedisModule_".len()..];
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    found.insert((through_api, name));
                }
            }
        }
    }

    #[test]
    fn every_function_the_module_calls_is_checked_at_load() {
        let mut found = BTreeSet::new();
        called_in(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut found,
        );
        let through_api: BTreeSet<&str> = found
            .iter()
            .filter(|(api, _)| *api)
            .map(|(_, name)| name.as_str())
            .collect();
        let direct: BTreeSet<&str> = found
            .iter()
            .filter(|(api, _)| !*api)
            .map(|(_, name)| name.as_str())
            .collect();
        let required: BTreeSet<&str> = REQUIRED.iter().copied().collect();
        assert_eq!(
            through_api, required,
            "api!(...) calls vs the required list"
        );
        let optional: BTreeSet<&str> = OPTIONAL.iter().copied().collect();
        assert_eq!(direct, optional, "direct raw:: uses vs the optional list");
    }
}
