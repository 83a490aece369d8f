//! A queue's layout, and the store a call runs on: [`QueueStore`] is the
//! keys layout's [`KeysStore`] or the native layout's [`NativeStore`],
//! whichever the queue has, behind one [`Store`]: the core cannot tell.
//!
//! One key tells which: `vtrr:<name>:queue` is a sorted set in the keys
//! layout and a `vtrrqueue` in the native one. A queue with neither there
//! is new (or a keys-layout queue with nothing queued): it takes
//! `vtrr.default-layout`, unless some other key of the keys layout exists.

use std::ffi::CStr;

use redis_module::Context;

pub mod convert;
pub mod keys;
pub mod native;
pub mod open;

use keys::KeysStore;
use native::{found_at, Found, NativeStore};
use open::{Caller, OpenError, Opening, Propagate, QueueKeyOpen};

use crate::config::{self, Layout};
use crate::core::CoreError;
use crate::engine::memory::MemoryStore;
use crate::server::api::api;
use crate::server::key_names::names_of;
use crate::server::strings::OwnedString;
use crate::store::vocabulary::key_name;
use crate::store::{HashKey, HashPage, QueueKey, Record, Scope, Store, StoreError, ZsetKey};

/// The layout of queue `queue` as a call on it would find it.
pub fn layout_of(ctx: &Context, queue: &[u8]) -> Layout {
    layout_at(ctx, queue, &QueueKeyOpen::open(ctx, queue, false))
}

/// What a client blocked on a queue waits for. A call that brings it about
/// signals it ([`QueueStore::signal`]); each layout names the keys that
/// tell it ([`QueueLayout::wakeup_keys`]), so a waiting command blocks on
/// [`wakeup_keys`] whatever the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wakeup {
    /// Items may be leased (`VTRR.LEASE ... BLOCK`).
    Ready,
    /// A job finished: its outcome kept, or dead-lettered (`VTRR.RESULT
    /// ... BLOCK`).
    Finished,
}

/// The keys a client waiting for `wakeup` on `queue` blocks on in
/// `layout`: the ones a call that brings it about signals, which exist once
/// it has (a blocked client is served only on a key that exists).
pub fn wakeup_keys(layout: Layout, queue: &[u8], wakeup: Wakeup) -> Vec<Vec<u8>> {
    QueueStore::wakeup_keys_in(layout, wakeup)
        .iter()
        .map(|&key| key_name(queue, key))
        .collect()
}

/// The layout `probe` (the queue's `vtrr:<name>:queue`, opened) tells.
fn layout_at(ctx: &Context, queue: &[u8], probe: &QueueKeyOpen) -> Layout {
    // SAFETY: the key is open (or NULL, read as empty).
    match unsafe { found_at(probe.key) } {
        Found::Native => Layout::native,
        Found::KeysLayout | Found::Other => Layout::keys,
        Found::Nothing => layout_of_new(ctx, queue),
    }
}

/// The layout of a queue with nothing at `vtrr:<name>:queue`: the keys
/// layout's if another of its keys exists (a keys-layout queue with nothing
/// queued), else `vtrr.default-layout`.
fn layout_of_new(ctx: &Context, queue: &[u8]) -> Layout {
    match config::default_layout() {
        Layout::keys => Layout::keys,
        Layout::native if keys_layout_key_beside(ctx, queue).is_some() => Layout::keys,
        Layout::native => Layout::native,
    }
}

/// The name of the first key of the keys layout other than
/// `vtrr:<name>:queue` that exists: where a native queue has one, it is
/// another client's, and the keys layout cannot take the queue over it.
pub fn keys_layout_key_beside(ctx: &Context, queue: &[u8]) -> Option<Vec<u8>> {
    let names = names_of(queue);
    let exists = |name: &&OwnedString| {
        // SAFETY: live context and valid name.
        unsafe { api!(RedisModule_KeyExists)(ctx.ctx, name.0) != 0 }
    };
    let mut others = QueueKey::ALL[1..].iter().map(|&key| names.name(key));
    let found = others.find(exists)?;
    Some(found.bytes().to_vec())
}

/// What a layout provides besides the [`Store`] the core sees: the seam
/// between the operations and a queue's layout. A layout is a folder
/// implementing this, plus its line in `layouts!` below.
pub trait QueueLayout<'ctx>: Store + Sized {
    const LAYOUT: Layout;

    /// Opens the queue for one call, after [`Opening::check`].
    fn open(opening: Opening<'ctx, '_>) -> Result<Self, OpenError>;

    /// Whether the call wrote anything so far.
    fn changed(&self) -> bool;

    /// Whether the call wrote the logical key `which`.
    fn wrote(&self, which: QueueKey) -> bool;

    /// Signals what the call changed (WATCH), propagates it as `propagate`
    /// says (asked only when something changed), wakes clients blocked on
    /// the queue when it grew, and fires `event` on `vtrr:<name>:queue`.
    /// Whether anything had changed.
    fn commit(&mut self, event: &CStr, propagate: impl FnOnce() -> Propagate) -> bool;

    /// The keys that tell a client blocked on the queue that `wakeup`
    /// happened: [`Self::signal`] signals them.
    fn wakeup_keys(wakeup: Wakeup) -> &'static [QueueKey];

    /// Wakes the clients blocked on the queue for `wakeup`.
    fn signal(&self, wakeup: Wakeup);

    /// Fires the module keyspace event `event` on `vtrr:<name>:queue`.
    fn notify(&self, event: &CStr);

    /// Takes the whole queue out (VTRR.CONVERT), leaving its keys deleted.
    fn take(&mut self) -> Result<MemoryStore, CoreError>;

    /// Puts `queue` in the empty queue (VTRR.CONVERT, whose commit
    /// propagates the call).
    fn install(&mut self, queue: MemoryStore);

    fn layout(&self) -> Layout {
        Self::LAYOUT
    }
}

/// The layouts, each `Variant(Store)` (boxed where a store is large), in
/// one list: it makes [`QueueStore`], its opening by [`Layout`] and
/// `dispatch!`, each method on whichever store the queue has. A layout is
/// its folder implementing [`QueueLayout`], its value in
/// [`config::Layout`], its line here and, when its key has a type of its
/// own, its arm in [`layout_at`].
macro_rules! layouts {
    ($($variant:ident($store:ty $(, $boxed:ident)?)),+ $(,)?) => {
        /// The store of one call, in the queue's layout. The keys layout's
        /// store (a slot per key, about a kilobyte) is boxed: one allocation
        /// per call costs less than the copies of it that moving the store
        /// through a call made, on either layout (callgrind: a native
        /// enqueue moved it three times).
        pub enum QueueStore<'ctx> {
            $($variant(layouts!(@slot $store $(, $boxed)?)),)+
        }

        impl<'ctx> QueueStore<'ctx> {
            fn open_in(layout: Layout, opening: Opening<'ctx, '_>) -> Result<Self, OpenError> {
                $(
                    if layout == <$store as QueueLayout>::LAYOUT {
                        let store = <$store as QueueLayout>::open(opening)?;
                        return Ok(QueueStore::$variant(layouts!(@wrap store $(, $boxed)?)));
                    }
                )+
                unreachable!("a layout without a store: {layout:?}")
            }

            /// [`QueueLayout::wakeup_keys`] of `layout`'s store.
            fn wakeup_keys_in(layout: Layout, wakeup: Wakeup) -> &'static [QueueKey] {
                $(
                    if layout == <$store as QueueLayout>::LAYOUT {
                        return <$store as QueueLayout>::wakeup_keys(wakeup);
                    }
                )+
                unreachable!("a layout without a store: {layout:?}")
            }
        }

        /// Each method, on whichever store the queue has.
        macro_rules! dispatch {
            ($self:ident, $s:ident => $call:expr) => {
                match $self {
                    $(QueueStore::$variant($s) => $call,)+
                }
            };
        }
    };
    (@slot $store:ty, boxed) => { Box<$store> };
    (@slot $store:ty) => { $store };
    (@wrap $value:ident, boxed) => { Box::new($value) };
    (@wrap $value:ident) => { $value };
}

layouts! {
    Keys(KeysStore<'ctx>, boxed),
    Native(NativeStore<'ctx>),
}

impl<'ctx> QueueStore<'ctx> {
    /// Opens queue `queue` for an operation declaring `scope`, in its
    /// layout. `records_effects` is for the keys layout (a native queue
    /// always propagates the call as a command). The key that tells the
    /// layout is opened once, in the operation's mode, and serves the store.
    pub fn open(
        ctx: &'ctx Context,
        queue: &[u8],
        scope: Scope,
        caller: Caller,
        records_effects: bool,
    ) -> Result<Self, OpenError> {
        let probe = QueueKeyOpen::open(ctx, queue, scope.writes);
        let layout = layout_at(ctx, queue, &probe);
        let opening = Opening::new(ctx, queue, scope, caller, records_effects, Some(probe));
        Self::open_in(layout, opening)
    }

    /// Opens queue `queue` in `layout` (VTRR.CONVERT opens both).
    pub fn open_as(
        layout: Layout,
        ctx: &'ctx Context,
        queue: &[u8],
        scope: Scope,
        caller: Caller,
    ) -> Result<Self, OpenError> {
        Self::open_in(layout, Opening::new(ctx, queue, scope, caller, false, None))
    }

    pub fn layout(&self) -> Layout {
        dispatch!(self, s => s.layout())
    }

    pub fn changed(&self) -> bool {
        dispatch!(self, s => s.changed())
    }

    /// Whether the call wrote the logical key `which`.
    pub fn wrote(&self, which: QueueKey) -> bool {
        dispatch!(self, s => s.wrote(which))
    }

    /// See [`QueueLayout::commit`].
    pub fn commit(&mut self, event: &CStr, propagate: impl FnOnce() -> Propagate) -> bool {
        dispatch!(self, s => s.commit(event, propagate))
    }

    pub fn signal(&self, wakeup: Wakeup) {
        dispatch!(self, s => s.signal(wakeup))
    }

    pub fn notify(&self, event: &CStr) {
        dispatch!(self, s => s.notify(event))
    }

    pub fn take(&mut self) -> Result<MemoryStore, CoreError> {
        dispatch!(self, s => s.take())
    }

    pub fn install(&mut self, queue: MemoryStore) {
        dispatch!(self, s => s.install(queue))
    }
}

impl Store for QueueStore<'_> {
    fn zscore(&mut self, key: ZsetKey, member: &[u8]) -> Option<f64> {
        dispatch!(self, s => s.zscore(key, member))
    }

    fn zadd(&mut self, key: ZsetKey, member: &[u8], score: f64) {
        dispatch!(self, s => s.zadd(key, member, score))
    }

    fn zrem(&mut self, key: ZsetKey, member: &[u8]) -> bool {
        dispatch!(self, s => s.zrem(key, member))
    }

    fn zfirst(&mut self, key: ZsetKey) -> Option<(Vec<u8>, f64)> {
        dispatch!(self, s => s.zfirst(key))
    }

    fn zrange_upto(&mut self, key: ZsetKey, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)> {
        dispatch!(self, s => s.zrange_upto(key, max, limit))
    }

    fn zrange_above(
        &mut self,
        key: ZsetKey,
        above: f64,
        max: f64,
        limit: usize,
    ) -> Vec<(Vec<u8>, f64)> {
        dispatch!(self, s => s.zrange_above(key, above, max, limit))
    }

    fn zfirst_from(&mut self, key: ZsetKey, from: &[u8]) -> Option<Vec<u8>> {
        dispatch!(self, s => s.zfirst_from(key, from))
    }

    fn zcard(&mut self, key: ZsetKey) -> u64 {
        dispatch!(self, s => s.zcard(key))
    }

    fn zcount_upto(&mut self, key: ZsetKey, max: f64) -> Result<u64, StoreError> {
        dispatch!(self, s => s.zcount_upto(key, max))
    }

    fn zmembers_from(
        &mut self,
        key: ZsetKey,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        dispatch!(self, s => s.zmembers_from(key, offset, limit))
    }

    fn hget(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>> {
        dispatch!(self, s => s.hget(key, field))
    }

    fn hset(&mut self, key: HashKey, field: &[u8], value: &[u8]) {
        dispatch!(self, s => s.hset(key, field, value))
    }

    fn hdel(&mut self, key: HashKey, field: &[u8]) {
        dispatch!(self, s => s.hdel(key, field))
    }

    fn record(&mut self, partition: &[u8]) -> Option<Result<Record, Vec<u8>>> {
        dispatch!(self, s => s.record(partition))
    }

    fn set_record(&mut self, partition: &[u8], record: &Record) {
        dispatch!(self, s => s.set_record(partition, record))
    }

    fn hget_int(&mut self, key: HashKey, field: &[u8]) -> Option<Result<i64, Vec<u8>>> {
        dispatch!(self, s => s.hget_int(key, field))
    }

    fn hset_int(&mut self, key: HashKey, field: &[u8], value: i64) {
        dispatch!(self, s => s.hset_int(key, field, value))
    }

    fn set_item(&mut self, id: &[u8], payload: (HashKey, &[u8]), meta: Option<&[u8]>) {
        dispatch!(self, s => s.set_item(id, payload, meta))
    }

    fn htake(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>> {
        dispatch!(self, s => s.htake(key, field))
    }

    fn hlen(&mut self, key: HashKey) -> u64 {
        dispatch!(self, s => s.hlen(key))
    }

    fn hfields(&mut self, key: HashKey) -> Result<Vec<Vec<u8>>, StoreError> {
        dispatch!(self, s => s.hfields(key))
    }

    fn hscan(&mut self, key: HashKey, cursor: u64, count: usize) -> Result<HashPage, StoreError> {
        dispatch!(self, s => s.hscan(key, cursor, count))
    }

    fn delete(&mut self, key: QueueKey) {
        dispatch!(self, s => s.delete(key))
    }

    fn current_virtual_time(&mut self) -> Option<Vec<u8>> {
        dispatch!(self, s => s.current_virtual_time())
    }

    fn set_current_virtual_time(&mut self, value: i64) {
        dispatch!(self, s => s.set_current_virtual_time(value))
    }

    fn set_raw_current_virtual_time(&mut self, value: &[u8]) {
        dispatch!(self, s => s.set_raw_current_virtual_time(value))
    }
}
