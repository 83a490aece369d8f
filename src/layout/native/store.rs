//! [`NativeStore`]: the [`Store`] over a native queue's value, open for one
//! call.

use std::ffi::CStr;
use std::os::raw::c_void;
use std::ptr;

use redis_module::{raw, Context};

use super::data_type::{found_at, queue_type, Found};
use super::encoding;
use crate::layout::open::{check_caller, Caller, OpenError, QueueKeyOpen};
use crate::replication::effects::replicate_load;
use crate::server::acl::{Access, AclUser};
use crate::server::api::api;
use crate::server::blocking::signal_ready;
use crate::server::key_names::names_of;
use crate::server::notify_module_event;
use crate::server::strings::OwnedString;
use crate::store::memory::MemoryStore;
use crate::store::{
    HashKey, HashPage, KeyKind, QueueKey, Record, Scope, Store, StoreError, ZsetKey,
};

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
    /// The logical keys written, one bit per `QueueKey::index`.
    written_keys: u32,
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
        let access = Access::of(scope.writes);
        check_caller(ctx, queue, caller, access)?;
        let (name, key) = match probe.filter(|p| p.writable == scope.writes) {
            Some(probe) => probe.take(),
            None => {
                let (_, name) = names_of(queue, &[]);
                let mode = access.open_mode();
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
            written_keys: 0,
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
        self.written_keys |= 1 << which.index();
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
        if removed {
            self.written_keys |= 1 << which.index();
        }
        result
    }

    /// Whether this call wrote anything so far.
    pub fn changed(&self) -> bool {
        self.written
    }

    /// Whether this call wrote the logical key `which`.
    pub fn wrote(&self, which: QueueKey) -> bool {
        self.written_keys & (1 << which.index()) != 0
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

    fn set_item(&mut self, id: &[u8], payload: (HashKey, &[u8]), meta: Option<&[u8]>) {
        if meta.is_some() {
            self.write(HashKey::Meta.into());
        }
        self.write(payload.0.into()).set_item(id, payload, meta)
    }

    fn hdel(&mut self, key: HashKey, field: &[u8]) {
        self.remove(key.into(), |v| ((), v.hdel_existing(key, field)))
    }

    fn record(&mut self, partition: &[u8]) -> Option<Result<Record, Vec<u8>>> {
        self.read(QueueKey::Partitions)?.record(partition)
    }

    fn set_record(&mut self, partition: &[u8], record: &Record) {
        self.write(QueueKey::Partitions)
            .set_record(partition, record)
    }

    fn hget_int(&mut self, key: HashKey, field: &[u8]) -> Option<Result<i64, Vec<u8>>> {
        self.read(key.into())?.hget_int(key, field)
    }

    fn hset_int(&mut self, key: HashKey, field: &[u8], value: i64) {
        self.write(key.into()).hset_int(key, field, value)
    }

    fn htake(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>> {
        self.remove(key.into(), |v| {
            let value = v.htake_existing(key, field);
            let removed = value.is_some();
            (value, removed)
        })
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
