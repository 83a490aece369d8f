//! [`NativeStore`]: the [`Store`] over a native queue's value, open for one
//! call.

use std::ffi::CStr;
use std::os::raw::c_void;
use std::ptr;

use redis_module::{raw, Context};

use super::data_type::{found_at, queue_type, Found};
use super::encoding;
use crate::config::Layout;
use crate::core::CoreError;
use crate::engine::memory::MemoryStore;
use crate::engine::value_access::ValueAccess;
use crate::layout::open::{OpenError, Opening, Propagate};
use crate::layout::{QueueLayout, Wakeup};
use crate::replication::effects::{replicate_apply, replicate_load, replicate_verbatim};
use crate::server::acl::Access;
use crate::server::api::api;
use crate::server::blocking::signal_ready;
use crate::server::notify_module_event;
use crate::server::strings::OwnedString;
use crate::store::{KeyKind, QueueKey, Scope};

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
    written_keys: u64,
    /// A member was added to `queue` (blocked clients may be served).
    added: bool,
    /// This call made the value (the queue did not exist before it).
    created: bool,
    /// Where writes the open does not allow go (release builds only).
    dropped: Option<Box<MemoryStore>>,
}

impl<'ctx> NativeStore<'ctx> {
    /// Opens `vtrr:<name>:queue`, the one key of a native queue, after
    /// [`Opening::check_queue_key`], and finds its value.
    fn open_key(mut opening: Opening<'ctx, '_>) -> Result<Self, OpenError> {
        let name = opening.check_queue_key()?;
        let key = opening.open_queue_key(&name);
        let (ctx, scope, access) = (opening.ctx, opening.scope, opening.access);
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
            dropped: None,
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

    /// Where a write the open does not allow goes: off the hot path.
    #[cold]
    #[inline(never)]
    fn dropped_write(&mut self) -> &mut MemoryStore {
        self.dropped.get_or_insert_with(Box::default)
    }

    /// Whether the open allows writing `which`. A write it does not allow
    /// is a bug, asserted in debug builds (where every test runs); a release
    /// build drops it, as the keys layout does, rather than change a value
    /// open for reading or stop the server.
    fn may_write(&self, which: QueueKey) -> bool {
        debug_assert!(
            self.scope.allows(which, true),
            "{}",
            self.scope.refusal(which, true)
        );
        self.access == Access::Write
    }
}

impl<'ctx> QueueLayout<'ctx> for NativeStore<'ctx> {
    const LAYOUT: Layout = Layout::native;

    fn open(opening: Opening<'ctx, '_>) -> Result<Self, OpenError> {
        Self::open_key(opening)
    }

    /// Whether this call wrote anything so far.
    fn changed(&self) -> bool {
        self.written
    }

    /// Whether this call wrote the logical key `which`.
    fn wrote(&self, which: QueueKey) -> bool {
        self.written_keys & (1u64 << which.index()) != 0
    }

    /// Propagates the call with `propagate` — or, when the call created
    /// the queue, as `VTRR.LOAD` of what it holds now (so it is native on
    /// replicas and AOF loads whatever their default layout) — deletes the
    /// key if the call emptied the queue, signals it (WATCH), wakes blocked
    /// leases when `queue` grew and fires `event`.
    fn commit(&mut self, event: &CStr, propagate: impl FnOnce() -> Propagate) -> bool {
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
            // The same command on the same value writes the same: a native
            // queue propagates commands whatever `propagate` says of effects.
            _ => match propagate() {
                Propagate::Effects | Propagate::Verbatim => replicate_verbatim(self.ctx),
                Propagate::Apply(args) => replicate_apply(self.ctx, &args),
            },
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

    /// The queue's one key, for every wakeup: what a finished job leaves
    /// keeps it there.
    fn wakeup_keys(_: Wakeup) -> &'static [QueueKey] {
        &[QueueKey::Queue]
    }

    fn signal(&self, _: Wakeup) {
        signal_ready(self.ctx, &self.name);
    }

    /// Fires the module keyspace event `event` on `vtrr:<name>:queue`.
    fn notify(&self, event: &CStr) {
        notify_module_event(self.ctx, &self.name, event);
    }

    /// Takes the whole queue out of its key (VTRR.CONVERT), leaving the
    /// key deleted.
    fn take(&mut self) -> Result<MemoryStore, CoreError> {
        let Some(value) = self.value.take() else {
            return Ok(MemoryStore::new());
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
            Ok(*Box::from_raw(value.as_ptr()))
        }
    }

    /// Puts `queue` in the (empty) key (VTRR.CONVERT, which propagates
    /// itself: the queue existed, in the other layout).
    fn install(&mut self, queue: MemoryStore) {
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

impl ValueAccess for NativeStore<'_> {
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
    /// A write the open does not allow goes to a value of its own, dropped
    /// with the store (see [`Self::may_write`]).
    fn write(&mut self, which: QueueKey) -> &mut MemoryStore {
        if !self.may_write(which) {
            return self.dropped_write();
        }
        self.written = true;
        self.added |= which == QueueKey::Queue;
        self.written_keys |= 1u64 << which.index();
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

    fn remove<T: Default>(
        &mut self,
        which: QueueKey,
        remove: impl FnOnce(&mut MemoryStore) -> (T, bool),
    ) -> T {
        if !self.may_write(which) {
            return T::default();
        }
        let Some(mut value) = self.value else {
            return T::default();
        };
        // SAFETY: as in `read`.
        let (result, removed) = remove(unsafe { value.as_mut() });
        self.written |= removed;
        if removed {
            self.written_keys |= 1u64 << which.index();
        }
        result
    }
}
