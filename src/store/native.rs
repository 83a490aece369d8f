//! The `native` layout: a whole queue in one key of the module's type,
//! `vtrrqueue`, whose value is a [`MemoryStore`]. It lives at the name the
//! keys layout gives its `queue` sorted set, `vtrr:<name>:queue`, so:
//!
//! - one key open tells a call which layout a queue has (a sorted set there
//!   is the keys layout, a `vtrrqueue` the native one), and no queue can be
//!   both: a Lua script of the keys layout gets WRONGTYPE from it;
//! - keyspace events, WATCH, blocked leases and the ACL key `vtrr:<name>:*`
//!   name the same key in both layouts; a cluster routes it by the queue's
//!   hash tag as before.
//!
//! [`NativeStore`] runs the core on that value; the data type's callbacks
//! (RDB, AOF rewrite, DUMP/RESTORE, COPY, MEMORY USAGE, DEBUG DIGEST, lazy
//! free) are at the end of this file.

use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::ptr;

use redis_module::native_types::RedisType;
use redis_module::{raw, Context};

use super::acl::AclUser;
use super::api::api;
use super::blocking::signal_ready;
use super::effects::replicate_load;
use super::encoding::{self, DecodeError, ENCODING_VERSION};
use super::key_names::names_of;
use super::layout::QueueKeyOpen;
use super::memory::MemoryStore;
use super::redis::{check_caller, Access, Caller, OpenError};
use super::server::notify_module_event;
use super::strings::OwnedString;
use super::{HashKey, HashPage, KeyKind, QueueKey, Scope, Store, StoreError, ZsetKey};

/// The module's data type: one native queue.
pub static QUEUE_TYPE: RedisType = RedisType::new(
    "vtrrqueue",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: None,
        aux_save: None,
        aux_save2: None,
        aux_save_triggers: 0,
        free_effort: Some(free_effort),
        unlink: None,
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
    },
);

fn queue_type() -> *mut raw::RedisModuleType {
    *QUEUE_TYPE.raw_type.borrow()
}

/// What the key `vtrr:<name>:queue` holds, looked at with a key open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    Nothing,
    KeysLayout,
    Native,
    /// Another type: the call fails with WRONGTYPE on it.
    Other,
}

/// What the open key `key` holds.
///
/// # Safety
/// `key` is an open key (or NULL, read as empty).
pub(super) unsafe fn found_at(key: *mut raw::RedisModuleKey) -> Found {
    match api!(RedisModule_KeyType)(key) as isize {
        k if k == raw::REDISMODULE_KEYTYPE_EMPTY => Found::Nothing,
        k if k == raw::REDISMODULE_KEYTYPE_ZSET => Found::KeysLayout,
        k if k == raw::REDISMODULE_KEYTYPE_MODULE
            && api!(RedisModule_ModuleTypeGetType)(key) == queue_type() =>
        {
            Found::Native
        }
        _ => Found::Other,
    }
}

/// A native queue open for one call: the [`Store`] over its value, which a
/// first write creates (and a write that leaves it empty deletes).
pub struct NativeStore<'ctx> {
    ctx: &'ctx Context,
    /// `vtrr:<name>:queue`: the key, and what events and wake-ups name.
    name: OwnedString,
    key: *mut raw::RedisModuleKey,
    scope: Scope,
    access: Access,
    /// The value, once there is one.
    value: Option<ptr::NonNull<MemoryStore>>,
    written: bool,
    /// A member was added to `queue` (blocked clients may be served).
    added: bool,
    /// This call made the value (the queue did not exist before it).
    created: bool,
}

impl<'ctx> NativeStore<'ctx> {
    /// Opens queue `queue`'s key for an operation declaring `scope`, after
    /// the cluster and ACL checks (one key: `vtrr:<name>:queue`), using
    /// `probe` when the layout probe opened it already in this mode.
    pub fn open_with(
        ctx: &'ctx Context,
        queue: &[u8],
        scope: Scope,
        caller: Caller,
        probe: Option<QueueKeyOpen>,
    ) -> Result<Self, OpenError> {
        let access = if scope.writes {
            Access::Write
        } else {
            Access::Read
        };
        check_caller(ctx, queue, caller, access)?;
        let (name, key) = match probe.filter(|p| p.writable == scope.writes) {
            Some(probe) => probe.take(),
            None => {
                let (_, name) = names_of(queue, &[]);
                let mode = match access {
                    Access::Read => raw::REDISMODULE_READ,
                    Access::Write => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
                } as c_int;
                // SAFETY: live context and a valid name, kept in the store
                // while the key is open.
                let key = unsafe { api!(RedisModule_OpenKey)(ctx.ctx, name.0, mode) }
                    .cast::<raw::RedisModuleKey>();
                (name, key)
            }
        };
        if let Caller::Client = caller {
            if let Some(user) = AclUser::of_caller(ctx) {
                if !user.may(&name, access) {
                    user.log_denied(ctx, &name);
                    let key_name = name.bytes().to_vec();
                    if !key.is_null() {
                        // SAFETY: opened above, closed once (no store owns it).
                        unsafe { api!(RedisModule_CloseKey)(key) };
                    }
                    return Err(OpenError::NoPermission { key: key_name });
                }
            }
        }
        let mut store = NativeStore {
            ctx,
            name,
            key,
            scope,
            access,
            value: None,
            written: false,
            added: false,
            created: false,
        };
        // SAFETY: the key just opened.
        match unsafe { found_at(key) } {
            Found::Native => {
                // SAFETY: a vtrrqueue key's value is a MemoryStore this module
                // boxed, alive while the key is open and unchanged.
                let value = unsafe { api!(RedisModule_ModuleTypeGetValue)(key) };
                store.value = ptr::NonNull::new(value.cast::<MemoryStore>());
            }
            Found::Nothing => {}
            Found::KeysLayout | Found::Other => {
                return Err(OpenError::WrongType {
                    key: store.name.bytes().to_vec(),
                    expected: KeyKind::Native,
                })
            }
        }
        Ok(store)
    }

    /// The value to read; None when the queue holds nothing yet.
    fn read(&mut self, which: QueueKey) -> Option<&mut MemoryStore> {
        debug_assert!(
            self.scope.allows(which, false),
            "{}",
            self.scope.refusal(which, false)
        );
        // SAFETY: the value belongs to the open key (see `open`); this store
        // is its only user during the call.
        self.value.map(|mut v| unsafe { v.as_mut() })
    }

    /// The value to write, created (and set on the key) when absent.
    fn write(&mut self, which: QueueKey) -> &mut MemoryStore {
        debug_assert!(
            self.scope.allows(which, true),
            "{}",
            self.scope.refusal(which, true)
        );
        assert!(self.access == Access::Write, "a write on a read-only open");
        self.written = true;
        let created = &mut self.created;
        let value = *self.value.get_or_insert_with(|| {
            *created = true;
            let boxed = Box::into_raw(Box::new(MemoryStore::new()));
            // SAFETY: the key is open for writing and empty (checked at
            // open); the key owns the value from here and frees it with
            // `free`.
            unsafe { api!(RedisModule_ModuleTypeSetValue)(self.key, queue_type(), boxed.cast()) };
            ptr::NonNull::new(boxed).expect("Box::into_raw is never null")
        });
        // SAFETY: as in `read`.
        unsafe { &mut *value.as_ptr() }
    }

    pub fn ctx(&self) -> &'ctx Context {
        self.ctx
    }

    /// The value to remove from, if there is one; the call counts as a
    /// write only when `remove` says it removed something (as on the keys
    /// layout, where removing nothing changes nothing).
    fn remove<T: Default>(
        &mut self,
        which: QueueKey,
        remove: impl FnOnce(&mut MemoryStore) -> (T, bool),
    ) -> T {
        debug_assert!(
            self.scope.allows(which, true),
            "{}",
            self.scope.refusal(which, true)
        );
        let Some(mut value) = self.value else {
            return T::default();
        };
        // SAFETY: as in `read`.
        let (result, removed) = remove(unsafe { value.as_mut() });
        self.written |= removed;
        result
    }

    /// Whether this call wrote anything so far.
    pub fn changed(&self) -> bool {
        self.written
    }

    /// Propagates the call with `propagate` — or, when the call created
    /// the queue, as `VTRR.LOAD` of what it holds now (so it is native on
    /// replicas and AOF loads whatever their default layout) — deletes the
    /// key if the call emptied the queue, signals it (WATCH), wakes blocked
    /// leases when `queue` grew and fires `event`.
    pub fn commit(&mut self, event: &CStr, propagate: impl FnOnce()) -> bool {
        if !self.written {
            return false;
        }
        match self.value {
            // A queue made and emptied in one call encodes to nothing: it
            // propagates nothing.
            Some(value) if self.created => {
                // SAFETY: as in `read`.
                let queue = unsafe { value.as_ref() };
                encoding::encode(queue, |chunk| replicate_load(self.ctx, &self.name, chunk));
            }
            _ => propagate(),
        }
        if self.value.is_some_and(|v| {
            // SAFETY: as in `read`.
            unsafe { v.as_ref() }.is_empty()
        }) {
            // SAFETY: key open for writing; DeleteKey frees the value.
            unsafe { api!(RedisModule_DeleteKey)(self.key) };
            self.value = None;
        }
        if self.added {
            signal_ready(self.ctx, &self.name);
        }
        // SAFETY: live context and key name.
        unsafe { api!(RedisModule_SignalModifiedKey)(self.ctx.ctx, self.name.0) };
        self.notify(event);
        true
    }

    pub fn signal_ready(&self) {
        signal_ready(self.ctx, &self.name);
    }

    /// Fires the module keyspace event `event` on `vtrr:<name>:queue`.
    pub fn notify(&self, event: &CStr) {
        notify_module_event(self.ctx, &self.name, event);
    }

    /// Takes the whole queue out of its key (VTRR.CONVERT), leaving the
    /// key deleted.
    pub fn take(&mut self) -> MemoryStore {
        let Some(value) = self.value.take() else {
            return MemoryStore::new();
        };
        self.written = true;
        // SAFETY: the key is open for writing and holds `value`; replacing
        // it with a fresh empty store hands `value` to us (Box made by this
        // module), and deleting the key frees the empty one.
        unsafe {
            let empty = Box::into_raw(Box::new(MemoryStore::new()));
            let mut old: *mut c_void = ptr::null_mut();
            api!(RedisModule_ModuleTypeReplaceValue)(
                self.key,
                queue_type(),
                empty.cast(),
                &mut old,
            );
            api!(RedisModule_DeleteKey)(self.key);
            debug_assert_eq!(old, value.as_ptr().cast());
            *Box::from_raw(value.as_ptr())
        }
    }

    /// Puts `queue` in the (empty) key (VTRR.CONVERT, which propagates
    /// itself: the queue existed, in the other layout).
    pub fn install(&mut self, queue: MemoryStore) {
        assert!(self.value.is_none(), "install over a queue");
        *self.write(QueueKey::Queue) = queue;
        self.created = false;
    }
}

impl Drop for NativeStore<'_> {
    fn drop(&mut self) {
        if !self.key.is_null() {
            // SAFETY: opened once (by this store or the probe it took it
            // from), closed once.
            unsafe { api!(RedisModule_CloseKey)(self.key) };
        }
    }
}

impl Store for NativeStore<'_> {
    fn zscore(&mut self, key: ZsetKey, member: &[u8]) -> Option<f64> {
        self.read(key.into())?.zscore(key, member)
    }

    fn zadd(&mut self, key: ZsetKey, member: &[u8], score: f64) {
        self.added |= key == ZsetKey::Queue;
        self.write(key.into()).zadd(key, member, score)
    }

    fn zrem(&mut self, key: ZsetKey, member: &[u8]) -> bool {
        self.remove(key.into(), |v| {
            let removed = v.zrem(key, member);
            (removed, removed)
        })
    }

    fn zfirst(&mut self, key: ZsetKey) -> Option<(Vec<u8>, f64)> {
        self.read(key.into())?.zfirst(key)
    }

    fn zrange_upto(&mut self, key: ZsetKey, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)> {
        self.read(key.into())
            .map_or_else(Vec::new, |v| v.zrange_upto(key, max, limit))
    }

    fn zrange_above(
        &mut self,
        key: ZsetKey,
        above: f64,
        max: f64,
        limit: usize,
    ) -> Vec<(Vec<u8>, f64)> {
        self.read(key.into())
            .map_or_else(Vec::new, |v| v.zrange_above(key, above, max, limit))
    }

    fn zfirst_from(&mut self, key: ZsetKey, from: &[u8]) -> Option<Vec<u8>> {
        self.read(key.into())?.zfirst_from(key, from)
    }

    fn zcard(&mut self, key: ZsetKey) -> u64 {
        self.read(key.into()).map_or(0, |v| v.zcard(key))
    }

    fn zcount_upto(&mut self, key: ZsetKey, max: f64) -> Result<u64, StoreError> {
        self.read(key.into())
            .map_or(Ok(0), |v| v.zcount_upto(key, max))
    }

    fn zmembers_from(
        &mut self,
        key: ZsetKey,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        self.read(key.into())
            .map_or(Ok(Vec::new()), |v| v.zmembers_from(key, offset, limit))
    }

    fn hget(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>> {
        self.read(key.into())?.hget(key, field)
    }

    fn hset(&mut self, key: HashKey, field: &[u8], value: &[u8]) {
        self.write(key.into()).hset(key, field, value)
    }

    fn hdel(&mut self, key: HashKey, field: &[u8]) {
        self.remove(key.into(), |v| ((), v.hdel_existing(key, field)))
    }

    fn hlen(&mut self, key: HashKey) -> u64 {
        self.read(key.into()).map_or(0, |v| v.hlen(key))
    }

    fn hfields(&mut self, key: HashKey) -> Result<Vec<Vec<u8>>, StoreError> {
        self.read(key.into())
            .map_or(Ok(Vec::new()), |v| v.hfields(key))
    }

    fn hscan(&mut self, key: HashKey, cursor: u64, count: usize) -> Result<HashPage, StoreError> {
        self.read(key.into())
            .map_or(Ok((0, Vec::new())), |v| v.hscan(key, cursor, count))
    }

    fn delete(&mut self, key: QueueKey) {
        self.remove(key, |v| {
            let existed = v.holds(key);
            v.delete(key);
            ((), existed)
        })
    }

    fn current_virtual_time(&mut self) -> Option<Vec<u8>> {
        self.read(QueueKey::CurrentVirtualTime)?
            .current_virtual_time()
    }

    fn set_current_virtual_time(&mut self, value: i64) {
        self.write(QueueKey::CurrentVirtualTime)
            .set_current_virtual_time(value)
    }

    fn set_raw_current_virtual_time(&mut self, value: &[u8]) {
        self.write(QueueKey::CurrentVirtualTime)
            .set_raw_current_virtual_time(value)
    }
}

// The data type's callbacks. The server calls them with values this module
// made (`Box<MemoryStore>`), on the main thread except `free`, which lazy
// freeing may run on a background thread (a MemoryStore is plain memory).

/// `RedisModule_SaveStringBuffer` of each chunk, then an empty one.
unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: the server passes a value of this type.
    let queue = unsafe { &*value.cast::<MemoryStore>() };
    encoding::encode(queue, |chunk| {
        // SAFETY: valid IO handle; the buffer is copied.
        unsafe { api!(RedisModule_SaveStringBuffer)(rdb, chunk.as_ptr().cast(), chunk.len()) }
    });
    // SAFETY: as above; the empty buffer ends the queue.
    unsafe { api!(RedisModule_SaveStringBuffer)(rdb, ptr::null(), 0) };
}

/// Reads chunks until the empty one; NULL (the load fails, RESTORE replies
/// an error) on a newer encoding, an I/O error or a chunk that does not
/// decode.
unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver > ENCODING_VERSION {
        return ptr::null_mut();
    }
    let mut queue = MemoryStore::new();
    loop {
        let mut len = 0usize;
        // SAFETY: valid IO handle; the server allocates the buffer, freed
        // below with RedisModule_Free.
        let buffer = unsafe { api!(RedisModule_LoadStringBuffer)(rdb, &mut len) };
        // SAFETY: valid IO handle (HANDLE_IO_ERRORS is set at load).
        if unsafe { api!(RedisModule_IsIOError)(rdb) } != 0 {
            if !buffer.is_null() {
                // SAFETY: allocated by the server for us.
                unsafe { api!(RedisModule_Free)(buffer.cast()) };
            }
            return ptr::null_mut();
        }
        if buffer.is_null() || len == 0 {
            if !buffer.is_null() {
                // SAFETY: as above.
                unsafe { api!(RedisModule_Free)(buffer.cast()) };
            }
            break;
        }
        // SAFETY: the server returned `len` readable bytes.
        let chunk = unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), len) };
        let decoded = encoding::decode_chunk(&mut queue, chunk);
        // SAFETY: as above.
        unsafe { api!(RedisModule_Free)(buffer.cast()) };
        if decoded.is_err() {
            return ptr::null_mut();
        }
    }
    // No queue is ever empty (the call that empties one deletes it), so an
    // empty encoding is forged: RESTORE refuses it rather than make a key
    // that an AOF rewrite would drop. An RDB being loaded may hold one an
    // older module made; it loads, and the queue's next write deletes it.
    // SAFETY: valid IO handle.
    if queue.is_empty() && !unsafe { loading(rdb) } {
        return ptr::null_mut();
    }
    Box::into_raw(Box::new(queue)).cast()
}

/// Whether the server is loading a dataset (an RDB or AOF at start-up, a
/// replica's full sync, DEBUG RELOAD) rather than serving RESTORE.
unsafe fn loading(rdb: *mut raw::RedisModuleIO) -> bool {
    // SAFETY: valid IO handle; the context it gives lives for the callback.
    let flags =
        unsafe { api!(RedisModule_GetContextFlags)(api!(RedisModule_GetContextFromIO)(rdb)) };
    flags & raw::REDISMODULE_CTX_FLAGS_LOADING as c_int != 0
}

/// `VTRR.LOAD <key> <chunk>` per chunk: a rewritten AOF (and Valkey's
/// atomic slot migration, which ships one) rebuilds the queue exactly.
unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: the server passes a value of this type.
    let queue = unsafe { &*value.cast::<MemoryStore>() };
    encoding::encode(queue, |chunk| {
        // SAFETY: valid IO handle and key; "sb" is a string and a buffer.
        unsafe {
            api!(RedisModule_EmitAOF)(
                aof,
                c"VTRR.LOAD".as_ptr(),
                c"sb".as_ptr(),
                key,
                chunk.as_ptr(),
                chunk.len(),
            )
        }
    });
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: the server passes a value of this type.
    unsafe { &*value.cast::<MemoryStore>() }.memory_usage()
}

/// The canonical encoding, chunk by chunk: equal content, equal digest.
unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: the server passes a value of this type.
    let queue = unsafe { &*value.cast::<MemoryStore>() };
    encoding::encode(queue, |chunk| {
        // SAFETY: valid digest; the buffer is only read.
        unsafe {
            api!(RedisModule_DigestAddStringBuffer)(
                md,
                chunk.as_ptr().cast_mut().cast(),
                chunk.len(),
            )
        }
    });
    // SAFETY: valid digest.
    unsafe { api!(RedisModule_DigestEndSequence)(md) };
}

unsafe extern "C" fn free(value: *mut c_void) {
    // SAFETY: made by Box::into_raw in this module, freed once.
    drop(unsafe { Box::from_raw(value.cast::<MemoryStore>()) });
}

/// Entries to free: above 64, UNLINK and FLUSHALL ASYNC free the queue on a
/// background thread.
unsafe extern "C" fn free_effort(_key: *mut raw::RedisModuleString, value: *const c_void) -> usize {
    // SAFETY: the server passes a value of this type.
    unsafe { &*value.cast::<MemoryStore>() }.entries()
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    // SAFETY: the server passes a value of this type.
    let queue = unsafe { &*value.cast::<MemoryStore>() };
    Box::into_raw(Box::new(queue.clone())).cast()
}

/// Why `VTRR.LOAD` added nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// The key holds another type than a native queue.
    WrongType,
    /// The chunk is not a native queue's encoding, or repeats an entry.
    Undecodable(DecodeError),
}

/// `VTRR.LOAD`: adds a chunk of the encoding to the native queue at `key`
/// (created when absent), or nothing, with the reason.
pub fn load_chunk(ctx: &Context, key: &[u8], chunk: &[u8]) -> Result<(), LoadError> {
    let name = OwnedString::new(key);
    let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
    // SAFETY: live context, valid name; the key is closed below.
    let open =
        unsafe { api!(RedisModule_OpenKey)(ctx.ctx, name.0, mode) }.cast::<raw::RedisModuleKey>();
    let result = (|| {
        // SAFETY: the key just opened.
        let found = unsafe { found_at(open) };
        match found {
            Found::Native => {
                // SAFETY: a vtrrqueue value, as in `NativeStore::open`.
                let queue = unsafe {
                    &mut *api!(RedisModule_ModuleTypeGetValue)(open).cast::<MemoryStore>()
                };
                encoding::add_chunk(queue, chunk).map_err(LoadError::Undecodable)
            }
            Found::Nothing => {
                let mut queue = MemoryStore::new();
                encoding::add_chunk(&mut queue, chunk).map_err(LoadError::Undecodable)?;
                if queue.is_empty() {
                    // As RESTORE: no empty queue is made (see `rdb_load`).
                    return Err(LoadError::Undecodable(DecodeError(
                        "a chunk with no entries makes no queue",
                    )));
                }
                let boxed = Box::into_raw(Box::new(queue));
                // SAFETY: key open for writing and empty; it owns the value
                // from here.
                unsafe { api!(RedisModule_ModuleTypeSetValue)(open, queue_type(), boxed.cast()) };
                Ok(())
            }
            Found::KeysLayout | Found::Other => Err(LoadError::WrongType),
        }
    })();
    // SAFETY: opened above, closed once.
    unsafe { api!(RedisModule_CloseKey)(open) };
    result
}
