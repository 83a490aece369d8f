//! [`Store`] over the keys layout: vtrr-queue's keys, through the module's
//! low-level key API.
//!
//! A `KeysStore` opens a queue's keys once per command (after checking the
//! caller's ACL permissions on each), checks their types before anything is
//! written, records every write as an effect when the call propagates its
//! effects (only then), and on [`KeysStore::commit`]
//! signals the keys it changed, propagates the call (its effects, the
//! command as sent, or `VTRR.APPLY`) and fires one keyspace notification.
//! A command that changed nothing commits nothing.

use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::rc::Rc;

use redis_module::{raw, Context, RedisValue};
use smallvec::SmallVec;

use super::convert::free_in_background;
use super::open::{OpenError, Opening, Propagate};
use super::{QueueLayout, Wakeup};
use crate::config::Layout;
use crate::core::{self, convert, CoreError};
use crate::engine::memory::MemoryStore;
use crate::replication::effects::{
    format_score, replicate_apply, replicate_verbatim, Command, Effects,
};
use crate::server::acl::Access;
use crate::server::api::api;
use crate::server::blocking::signal_ready;
use crate::server::key_names::QueueKeyNames;
use crate::server::notify_module_event;
use crate::server::strings::{bytes_in, bytes_of, take_string, OwnedString};
use crate::store::{
    HashKey, HashPage, KeyKind, QueueKey, Scope, Store, StoreError, ValueVisit, ZsetKey,
};
use crate::text::Quoted;

struct Slot {
    /// NULL for a key of the scope's `if_present` that was missing: not
    /// opened (it reads as empty: `RedisModule_KeyType` and
    /// `RedisModule_CloseKey` take NULL).
    key: *mut raw::RedisModuleKey,
    written: bool,
    /// Opened when first touched ([`Scope::lazy`]), and not yet.
    lazy: bool,
    /// A member was added (for `queue`: blocked clients may be served).
    added: bool,
    effects: Effects,
}

impl Slot {
    /// A slot not opened.
    fn closed() -> Slot {
        Slot {
            key: ptr::null_mut(),
            written: false,
            lazy: false,
            added: false,
            effects: Effects::default(),
        }
    }
}

/// One queue's keys, open for the duration of a command or timer run.
pub struct KeysStore<'ctx> {
    ctx: &'ctx Context,
    /// The queue's key names (`vtrr:<name>:queue`, opened or not, is the
    /// one the keyspace notification names).
    names: Rc<QueueKeyNames>,
    /// The operation's declared keys: no other is opened, and touching one
    /// is a bug (asserted in debug builds; it would read as empty).
    scope: Scope,
    access: Access,
    /// Whether writes are recorded as effects: only when the call will
    /// propagate them ([`Propagate::Effects`]).
    records_effects: bool,
    slots: [Option<Slot>; QueueKey::ALL.len()],
    /// The last two member/field strings made (ids, partitions), shared by
    /// the next operations on the same bytes: a lease names its id in seven
    /// calls, an enqueue alternates id and partition. The key API copies
    /// what it stores, so sharing is safe.
    recent_members: [Option<OwnedString>; 2],
}

impl<'ctx> KeysStore<'ctx> {
    /// Opens the keys the operation declares (for writing when it writes),
    /// after [`Opening::check`], and checks their types. With
    /// `records_effects` its writes are recorded to propagate as effects;
    /// its commit must then be [`Propagate::Effects`], and only then.
    fn open_keys(mut opening: Opening<'ctx, '_>) -> Result<Self, OpenError> {
        let (names, missing) = opening.check(opening.scope.keys)?;
        let mut store = KeysStore {
            ctx: opening.ctx,
            names,
            scope: opening.scope,
            access: opening.access,
            records_effects: opening.records_effects,
            slots: std::array::from_fn(|_| None),
            recent_members: Default::default(),
        };
        for &key in store.scope.keys {
            if missing & key.bit() != 0 {
                // Read or removed only, and missing: it reads as empty
                // without an open.
                store.slots[key.index()] = Some(Slot::closed());
                continue;
            }
            if store.scope.lazy.contains(&key) {
                store.slots[key.index()] = Some(Slot {
                    lazy: true,
                    ..Slot::closed()
                });
                continue;
            }
            let opened = match key {
                QueueKey::Queue => Some(opening.open_queue_key(store.names.name(key))),
                _ => None,
            };
            store.open_slot(key, opened)?;
        }
        // The keys of finished jobs, only on a queue that keeps them: its
        // policy is open by now, and nothing is written yet.
        if !store.scope.when_kept.is_empty() {
            store.scope.kept = core::keeps_outcomes(&mut store);
            if store.scope.kept {
                opening.check_more(&store.names, store.scope.when_kept)?;
                for &key in store.scope.when_kept {
                    store.open_slot(key, None)?;
                }
            }
        }
        Ok(store)
    }

    /// Opens the slot of `which` (or takes `opened`, the same key open in
    /// this store's mode) and checks its type.
    fn open_slot(
        &mut self,
        which: QueueKey,
        opened: Option<*mut raw::RedisModuleKey>,
    ) -> Result<(), OpenError> {
        let name = self.names.name(which);
        let mode = self.access.open_mode();
        let key = match opened {
            Some(key) => key,
            // SAFETY: ctx is the live context of this call; name is a valid
            // string kept alive in the slot for as long as the key is open.
            None => unsafe { api!(RedisModule_OpenKey)(self.ctx.ctx, name.0, mode) }
                .cast::<raw::RedisModuleKey>(),
        };
        let expected = which.kind();
        // SAFETY: the key just opened, or NULL for a missing key opened only
        // for reading, on which KeyType is documented safe (it reads EMPTY).
        let error = (!unsafe { holds(key, expected) }).then(|| OpenError::WrongType {
            key: name.bytes().to_vec(),
            expected,
        });
        self.slots[which.index()] = Some(Slot {
            key,
            ..Slot::closed()
        });
        error.map_or(Ok(()), Err)
    }

    /// The slot of `which`, read or written. A key the operation does not
    /// declare was never opened: a bug, asserted in debug builds (in a
    /// release build it reads as empty and its writes are dropped).
    fn slot(&self, which: QueueKey, write: bool) -> Option<&Slot> {
        debug_assert!(
            self.scope.allows(which, write),
            "{}",
            self.scope.refusal(which, write)
        );
        self.slots[which.index()].as_ref()
    }

    /// Opens the slot of `which` if it is a lazy one not yet opened
    /// ([`Scope::lazy`]). One of another type is closed again and logged:
    /// it reads as empty, and the call's writes to it are dropped (the
    /// rankings are rebuilt from the records by VTRR.RECOUNT, which refuses
    /// it).
    fn open_lazy(&mut self, which: QueueKey) {
        let Some(slot) = self.slots[which.index()].as_mut().filter(|slot| slot.lazy) else {
            return;
        };
        slot.lazy = false;
        let name = self.names.name(which);
        // SAFETY: live context; the store keeps the name while the key is open.
        let key =
            unsafe { api!(RedisModule_OpenKey)(self.ctx.ctx, name.0, self.access.open_mode()) }
                .cast::<raw::RedisModuleKey>();
        // SAFETY: the key just opened (or NULL: missing, opened to read).
        if unsafe { holds(key, which.kind()) } {
            slot.key = key;
            return;
        }
        // SAFETY: opened above, closed once.
        unsafe { api!(RedisModule_CloseKey)(key) };
        let message = format!(
            "vtrr: {} must be {}, and holds another type: this call left it as it is",
            Quoted(name.bytes()),
            which.kind().described()
        );
        crate::server::log_warning(self.ctx, &message);
    }

    /// The open key for `which`, None when it is empty.
    fn key(&mut self, which: QueueKey) -> Option<*mut raw::RedisModuleKey> {
        self.open_lazy(which);
        let slot = self.slot(which, false)?;
        // SAFETY: the key is open until drop.
        let kind = unsafe { api!(RedisModule_KeyType)(slot.key) } as isize;
        (kind != raw::REDISMODULE_KEYTYPE_EMPTY).then_some(slot.key)
    }

    /// The open key to write to; with `must_exist`, None when the key is
    /// empty (there is nothing to remove).
    fn key_for_write(
        &mut self,
        which: QueueKey,
        must_exist: bool,
    ) -> Option<*mut raw::RedisModuleKey> {
        if self.access != Access::Write {
            return None;
        }
        self.open_lazy(which);
        if self.slot(which, true)?.key.is_null() {
            if must_exist || !self.scope.if_present.contains(&which) {
                // Nothing to remove; or a lazy key of another type.
                return None;
            }
            debug_assert!(false, "{}", self.scope.refusal_to_add(which));
            // Opened now rather than the write lost: it was missing, so it
            // holds no other type.
            let slot = self.slots[which.index()].as_mut()?;
            let name = self.names.name(which);
            // SAFETY: live context; the store keeps the name while the key is open.
            slot.key =
                unsafe { api!(RedisModule_OpenKey)(self.ctx.ctx, name.0, self.access.open_mode()) }
                    .cast::<raw::RedisModuleKey>();
        }
        let slot = self.slot(which, true)?;
        // SAFETY: the key is open until drop.
        let empty = unsafe { api!(RedisModule_KeyType)(slot.key) } as isize
            == raw::REDISMODULE_KEYTYPE_EMPTY;
        (!(must_exist && empty)).then_some(slot.key)
    }

    /// The string for a member or field, shared with a recent one when the
    /// bytes are the same.
    fn member(&mut self, bytes: &[u8]) -> OwnedString {
        if let Some(recent) = self
            .recent_members
            .iter()
            .flatten()
            .find(|s| s.bytes() == bytes)
        {
            return recent.retain();
        }
        let made = OwnedString::new(bytes);
        self.recent_members.rotate_right(1);
        self.recent_members[0] = Some(made.retain());
        made
    }

    /// Signals the keys written so far (WATCH) without propagating or
    /// notifying: VTRR.CONVERT's source, whose target commits the call.
    pub fn signal_modified(&self) {
        for which in self.written_keys() {
            let name = self.names.name(which);
            // SAFETY: ctx and the key name are valid for this call.
            unsafe { api!(RedisModule_SignalModifiedKey)(self.ctx.ctx, name.0) };
        }
    }

    /// The keys written so far.
    fn written_keys(&self) -> impl Iterator<Item = QueueKey> + '_ {
        QueueKey::ALL
            .into_iter()
            .filter(|key| self.slots[key.index()].as_ref().is_some_and(|s| s.written))
    }

    /// Notes a write to `which`, and records it as an effect (`args`, made
    /// only then) when the call propagates its effects.
    fn record<const N: usize>(
        &mut self,
        which: QueueKey,
        command: Command,
        args: impl FnOnce() -> [OwnedString; N],
    ) {
        let Some(slot) = self.slots[which.index()].as_mut() else {
            return;
        };
        slot.written = true;
        slot.added |= command == Command::Zadd;
        if self.records_effects {
            slot.effects.record(command, args());
        }
    }

    /// Visits entries with `above` < score <= `max` (None: from the first),
    /// their members borrowed for the visit.
    fn range(
        &mut self,
        which: QueueKey,
        above: Option<f64>,
        max: f64,
        limit: usize,
        mut visit: impl FnMut(&[u8], f64) -> bool,
    ) {
        let Some(key) = self.key(which) else { return };
        if limit == 0 {
            return;
        }
        // SAFETY: key is an open sorted set; the iterator is stopped before
        // returning and the key is not modified while it runs; each element
        // is a string of ours, borrowed by its visit and then freed.
        unsafe {
            let (min, min_excluded) = match above {
                Some(above) => (above, 1),
                None => (f64::NEG_INFINITY, 0),
            };
            if api!(RedisModule_ZsetFirstInScoreRange)(key, min, max, min_excluded, 0)
                != raw::REDISMODULE_OK as c_int
            {
                return;
            }
            let mut seen = 0usize;
            while api!(RedisModule_ZsetRangeEndReached)(key) == 0 && seen < limit {
                let mut score = 0.0;
                let element = api!(RedisModule_ZsetRangeCurrentElement)(key, &mut score);
                if element.is_null() {
                    break;
                }
                seen += 1;
                let more = visit(bytes_in(element), score);
                api!(RedisModule_FreeString)(ptr::null_mut(), element);
                if !more {
                    break;
                }
                if api!(RedisModule_ZsetRangeNext)(key) == 0 {
                    break;
                }
            }
            api!(RedisModule_ZsetRangeStop)(key);
        }
    }

    /// `command` on the key `name` with `args` after it, through the
    /// server; its error reply as a [`StoreError`].
    fn call(
        &self,
        command: &'static str,
        name: &OwnedString,
        args: &[&[u8]],
    ) -> Result<RedisValue, StoreError> {
        let mut argv: SmallVec<[&[u8]; 4]> = SmallVec::new();
        argv.push(name.bytes());
        argv.extend_from_slice(args);
        self.ctx
            .call(command, &argv[..])
            .map_err(|e| call_error(command, name, e.to_string()))
    }
}

fn call_error(command: &'static str, name: &OwnedString, reply: String) -> StoreError {
    StoreError {
        command,
        key: name.bytes().to_vec(),
        reply,
    }
}

/// The reply of `command` was not of the shape it always has.
fn unexpected(command: &'static str, name: &OwnedString, reply: &RedisValue) -> StoreError {
    call_error(command, name, format!("unexpected reply {reply:?}"))
}

impl<'ctx> QueueLayout<'ctx> for KeysStore<'ctx> {
    const LAYOUT: Layout = Layout::keys;

    fn open(opening: Opening<'ctx, '_>) -> Result<Self, OpenError> {
        Self::open_keys(opening)
    }

    /// Whether this command wrote anything so far.
    fn changed(&self) -> bool {
        self.slots.iter().flatten().any(|s| s.written)
    }

    /// Whether this command wrote `which`.
    fn wrote(&self, which: QueueKey) -> bool {
        self.slots[which.index()]
            .as_ref()
            .is_some_and(|slot| slot.written)
    }

    /// Signals the changed keys (for WATCH and client-side caching),
    /// propagates the call as `propagate` says (asked only when something
    /// changed) and fires `event` on `vtrr:<name>:queue`. Returns whether
    /// anything had changed.
    fn commit(&mut self, event: &CStr, propagate: impl FnOnce() -> Propagate) -> bool {
        if !self.changed() {
            return false;
        }
        let propagate = propagate();
        match &propagate {
            Propagate::Effects => {}
            Propagate::Verbatim => replicate_verbatim(self.ctx),
            Propagate::Apply(args) => replicate_apply(self.ctx, args),
        }
        let effects = matches!(propagate, Propagate::Effects);
        debug_assert_eq!(
            effects, self.records_effects,
            "effects recorded iff propagated"
        );
        let queue_grew = self.slots[QueueKey::Queue.index()]
            .as_ref()
            .is_some_and(|slot| slot.added);
        if queue_grew {
            // Wake clients blocked in VTRR.LEASE ... BLOCK on this queue.
            signal_ready(self.ctx, self.names.name(QueueKey::Queue));
        }
        for (slot, which) in self.slots.iter_mut().zip(QueueKey::ALL) {
            let Some(slot) = slot.as_mut().filter(|s| s.written) else {
                continue;
            };
            let name = self.names.name(which);
            // SAFETY: ctx and the key name are valid for this call.
            unsafe { api!(RedisModule_SignalModifiedKey)(self.ctx.ctx, name.0) };
            if effects {
                slot.effects.replicate(self.ctx, name);
            }
        }
        self.notify(event);
        true
    }

    /// Items may be leased: `queue`. A job finished: what a finished job
    /// writes, its outcome or its place among the dead.
    fn wakeup_keys(wakeup: Wakeup) -> &'static [QueueKey] {
        match wakeup {
            Wakeup::Ready => &[QueueKey::Queue],
            Wakeup::Finished => &[QueueKey::Results, QueueKey::Dead],
        }
    }

    /// Signals the wakeup's keys the call wrote, and `queue` whatever it
    /// wrote (a token coming due makes items leasable with nothing written).
    fn signal(&self, wakeup: Wakeup) {
        for &which in Self::wakeup_keys(wakeup) {
            if which == QueueKey::Queue || self.wrote(which) {
                signal_ready(self.ctx, self.names.name(which));
            }
        }
    }

    /// Fires the module keyspace event `event` on `vtrr:<name>:queue`.
    fn notify(&self, event: &CStr) {
        notify_module_event(self.ctx, self.names.name(QueueKey::Queue), event);
    }

    /// Reads the whole queue out of its keys and deletes them (the keys
    /// are signalled; the target layout's commit propagates the call).
    fn take(&mut self) -> Result<MemoryStore, CoreError> {
        let moved = convert::read_queue(self)?;
        if !moved.is_empty() {
            convert::clear_queue(self);
            self.signal_modified();
        }
        Ok(moved)
    }

    fn install(&mut self, queue: MemoryStore) {
        convert::write_queue(&queue, self);
        free_in_background(queue);
    }
}

impl Drop for KeysStore<'_> {
    fn drop(&mut self) {
        for slot in self.slots.iter_mut().flatten() {
            if !slot.key.is_null() {
                // SAFETY: each key was opened once by this store and is
                // closed once.
                unsafe { api!(RedisModule_CloseKey)(slot.key) };
            }
        }
    }
}

/// Whether `key` (open, or NULL: missing) is empty or holds `kind`.
///
/// # Safety
/// `key` is an open key or NULL.
unsafe fn holds(key: *mut raw::RedisModuleKey, kind: KeyKind) -> bool {
    let found = api!(RedisModule_KeyType)(key) as isize;
    found == raw::REDISMODULE_KEYTYPE_EMPTY
        || found
            == match kind {
                KeyKind::String => raw::REDISMODULE_KEYTYPE_STRING,
                KeyKind::Hash => raw::REDISMODULE_KEYTYPE_HASH,
                KeyKind::Zset => raw::REDISMODULE_KEYTYPE_ZSET,
                KeyKind::Native => raw::REDISMODULE_KEYTYPE_MODULE,
            }
}

impl Store for KeysStore<'_> {
    fn zscore(&mut self, key: ZsetKey, member: &[u8]) -> Option<f64> {
        let open = self.key(key.into())?;
        let member = self.member(member);
        let mut score = 0.0;
        // SAFETY: open key of zset type, valid member string and out pointer.
        let found = unsafe { api!(RedisModule_ZsetScore)(open, member.0, &mut score) };
        (found == raw::REDISMODULE_OK as c_int).then_some(score)
    }

    fn zadd(&mut self, key: ZsetKey, member: &[u8], score: f64) {
        let which = QueueKey::from(key);
        let Some(open) = self.key_for_write(which, false) else {
            return;
        };
        let element = self.member(member);
        let mut flags: c_int = 0;
        // SAFETY: key opened for writing; ZsetAdd creates the key if empty.
        unsafe { api!(RedisModule_ZsetAdd)(open, score, element.0, &mut flags) };
        self.record(which, Command::Zadd, || {
            let mut buffer = [0u8; 32];
            [OwnedString::new(format_score(score, &mut buffer)), element]
        });
    }

    fn zrem(&mut self, key: ZsetKey, member: &[u8]) -> bool {
        let which = QueueKey::from(key);
        let Some(open) = self.key_for_write(which, true) else {
            return false;
        };
        let element = self.member(member);
        let mut deleted: c_int = 0;
        // SAFETY: key opened for writing and holding a zset.
        unsafe { api!(RedisModule_ZsetRem)(open, element.0, &mut deleted) };
        if deleted != 0 {
            self.record(which, Command::Zrem, || [element]);
        }
        deleted != 0
    }

    fn zfirst(&mut self, key: ZsetKey) -> Option<(Vec<u8>, f64)> {
        let mut first = None;
        self.range(key.into(), None, f64::INFINITY, 1, |member, score| {
            first = Some((member.to_vec(), score));
            false
        });
        first
    }

    fn zrange_upto(&mut self, key: ZsetKey, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)> {
        let mut entries = Vec::new();
        self.range(key.into(), None, max, limit, |member, score| {
            entries.push((member.to_vec(), score));
            true
        });
        entries
    }

    fn zrange_above(
        &mut self,
        key: ZsetKey,
        above: f64,
        max: f64,
        limit: usize,
    ) -> Vec<(Vec<u8>, f64)> {
        let mut entries = Vec::new();
        self.range(key.into(), Some(above), max, limit, |member, score| {
            entries.push((member.to_vec(), score));
            true
        });
        entries
    }

    fn zfirst_from(&mut self, key: ZsetKey, from: &[u8]) -> Option<Vec<u8>> {
        let open = self.key(key.into())?;
        let mut bound = Vec::with_capacity(from.len() + 1);
        bound.push(b'[');
        bound.extend_from_slice(from);
        let min = OwnedString::new(&bound);
        let max = OwnedString::new(b"+");
        // SAFETY: open sorted-set key and valid range strings; the iterator
        // is stopped before returning.
        unsafe {
            if api!(RedisModule_ZsetFirstInLexRange)(open, min.0, max.0)
                != raw::REDISMODULE_OK as c_int
            {
                return None;
            }
            let mut first = None;
            if api!(RedisModule_ZsetRangeEndReached)(open) == 0 {
                let mut score = 0.0;
                let element = api!(RedisModule_ZsetRangeCurrentElement)(open, &mut score);
                if !element.is_null() {
                    first = Some(take_string(element));
                }
            }
            api!(RedisModule_ZsetRangeStop)(open);
            first
        }
    }

    fn zcard(&mut self, key: ZsetKey) -> u64 {
        // SAFETY: open key.
        self.key(key.into())
            .map_or(0, |k| unsafe { api!(RedisModule_ValueLength)(k) } as u64)
    }

    /// Counted by the server's own O(log N) ZCOUNT.
    fn zcount_upto(&mut self, key: ZsetKey, max: f64) -> Result<u64, StoreError> {
        if self.key(key.into()).is_none() {
            return Ok(0);
        }
        let Some(_) = self.slot(key.into(), false) else {
            return Ok(0);
        };
        let slot = self.names.name(key.into());
        let mut buffer = [0u8; 32];
        let max = format_score(max, &mut buffer);
        match self.call("ZCOUNT", slot, &[b"-inf", max])? {
            RedisValue::Integer(n) => Ok(n.max(0) as u64),
            other => Err(unexpected("ZCOUNT", slot, &other)),
        }
    }

    fn zmembers_from(
        &mut self,
        key: ZsetKey,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        if limit == 0 || self.key(key.into()).is_none() {
            return Ok(Vec::new());
        }
        let Some(_) = self.slot(key.into(), false) else {
            return Ok(Vec::new());
        };
        let slot = self.names.name(key.into());
        // Through the server, by index: a skip list finds the offset-th
        // entry by its spans, O(log N), where the key API would walk to it.
        let last = offset.saturating_add(limit - 1);
        let mut digits = (itoa::Buffer::new(), itoa::Buffer::new());
        let (first, last) = (digits.0.format(offset), digits.1.format(last));
        let reply = self.call("ZRANGE", slot, &[first.as_bytes(), last.as_bytes()])?;
        let RedisValue::Array(members) = &reply else {
            return Err(unexpected("ZRANGE", slot, &reply));
        };
        members
            .iter()
            .map(|member| bytes_of(member).ok_or_else(|| unexpected("ZRANGE", slot, &reply)))
            .collect()
    }

    fn hget(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>> {
        let open = self.key(key.into())?;
        let field = self.member(field);
        let mut value: *mut raw::RedisModuleString = ptr::null_mut();
        // SAFETY: open hash key; NULL-terminated variadic list of one
        // field/out-pointer pair, as HashGet requires.
        unsafe {
            api!(RedisModule_HashGet)(
                open,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.0,
                &mut value as *mut *mut raw::RedisModuleString,
                ptr::null_mut::<c_void>(),
            );
            (!value.is_null()).then(|| take_string(value))
        }
    }

    fn hset(&mut self, key: HashKey, field: &[u8], value: &[u8]) {
        let which = QueueKey::from(key);
        let Some(open) = self.key_for_write(which, false) else {
            return;
        };
        let field_string = self.member(field);
        let value_string = OwnedString::new(value);
        // SAFETY: key opened for writing; NULL-terminated field/value pair.
        unsafe {
            api!(RedisModule_HashSet)(
                open,
                raw::REDISMODULE_HASH_NONE as c_int,
                field_string.0,
                value_string.0,
                ptr::null_mut::<c_void>(),
            )
        };
        self.record(which, Command::Hset, || [field_string, value_string]);
    }

    fn hdel(&mut self, key: HashKey, field: &[u8]) {
        let which = QueueKey::from(key);
        let Some(open) = self.key_for_write(which, true) else {
            return;
        };
        let field_string = self.member(field);
        // SAFETY: key opened for writing and holding a hash; the DELETE marker
        // is the documented sentinel value.
        let deleted = unsafe {
            api!(RedisModule_HashSet)(
                open,
                raw::REDISMODULE_HASH_NONE as c_int,
                field_string.0,
                raw::REDISMODULE_HASH_DELETE,
                ptr::null_mut::<c_void>(),
            )
        };
        if deleted > 0 {
            self.record(which, Command::Hdel, || [field_string]);
        }
    }

    fn hlen(&mut self, key: HashKey) -> u64 {
        // SAFETY: open key.
        self.key(key.into())
            .map_or(0, |k| unsafe { api!(RedisModule_ValueLength)(k) } as u64)
    }

    fn hfields(&mut self, key: HashKey) -> Result<Vec<Vec<u8>>, StoreError> {
        let Some(_) = self.slot(key.into(), false) else {
            return Ok(Vec::new());
        };
        let slot = self.names.name(key.into());
        let reply = self.call("HKEYS", slot, &[])?;
        let RedisValue::Array(fields) = &reply else {
            return Err(unexpected("HKEYS", slot, &reply));
        };
        fields
            .iter()
            .map(|field| bytes_of(field).ok_or_else(|| unexpected("HKEYS", slot, &reply)))
            .collect()
    }

    fn hscan(&mut self, key: HashKey, cursor: u64, count: usize) -> Result<HashPage, StoreError> {
        let Some(_) = self.slot(key.into(), false) else {
            return Ok((0, Vec::new()));
        };
        let slot = self.names.name(key.into());
        let (mut cursor_digits, mut count_digits) = (itoa::Buffer::new(), itoa::Buffer::new());
        let cursor = cursor_digits.format(cursor).as_bytes();
        let count = count_digits.format(count).as_bytes();
        let reply = self.call("HSCAN", slot, &[cursor, b"COUNT", count])?;
        let bad = || unexpected("HSCAN", slot, &reply);
        let RedisValue::Array(parts) = &reply else {
            return Err(bad());
        };
        let [next, RedisValue::Array(flat)] = &parts[..] else {
            return Err(bad());
        };
        let next = bytes_of(next)
            .and_then(|raw| std::str::from_utf8(&raw).ok()?.parse().ok())
            .ok_or_else(bad)?;
        let pairs = flat
            .chunks_exact(2)
            .map(|pair| Some((bytes_of(&pair[0])?, bytes_of(&pair[1])?)))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?;
        Ok((next, pairs))
    }

    /// Unlinked: the key is gone at once, and a big one is freed on the
    /// server's lazy-free thread, as UNLINK frees it (a converted queue's
    /// million-entry hashes would otherwise hold the call for a second).
    fn delete(&mut self, which: QueueKey) {
        let Some(open) = self.key_for_write(which, true) else {
            return;
        };
        // SAFETY: key opened for writing.
        unsafe { api!(RedisModule_UnlinkKey)(open) };
        self.record(which, Command::Del, || []);
    }

    fn visit_zset(&mut self, key: ZsetKey, visit: &mut dyn FnMut(&[u8], f64)) {
        self.range(
            key.into(),
            None,
            f64::INFINITY,
            usize::MAX,
            |member, score| {
                visit(member, score);
                true
            },
        );
    }

    /// Through the key API, each field's string made once for every hash
    /// and each value borrowed for its visit.
    fn visit_values(
        &mut self,
        keys: &[HashKey],
        fields: &mut dyn Iterator<Item = &[u8]>,
        visit: &mut ValueVisit<'_>,
    ) {
        let open: SmallVec<[(HashKey, *mut raw::RedisModuleKey); 4]> = keys
            .iter()
            .filter_map(|&key| Some((key, self.key(key.into())?)))
            .collect();
        if open.is_empty() {
            return;
        }
        for field in fields {
            let name = OwnedString::new(field);
            for &(key, hash) in &open {
                let mut value: *mut raw::RedisModuleString = ptr::null_mut();
                // SAFETY: an open hash key; NULL-terminated variadic list of
                // one field/out-pointer pair, as HashGet requires; the value
                // it returns is ours, read and then freed here.
                unsafe {
                    api!(RedisModule_HashGet)(
                        hash,
                        raw::REDISMODULE_HASH_NONE as c_int,
                        name.0,
                        &mut value as *mut *mut raw::RedisModuleString,
                        ptr::null_mut::<c_void>(),
                    );
                    if !value.is_null() {
                        visit(key, field, bytes_in(value));
                        api!(RedisModule_FreeString)(ptr::null_mut(), value);
                    }
                }
            }
        }
    }

    /// Through the key API's scan (`RedisModule_ScanKey`): no reply is
    /// built and no string copied but the visit's own.
    fn visit_hash(
        &mut self,
        key: HashKey,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(), StoreError> {
        let Some(open) = self.key(key.into()) else {
            return Ok(());
        };
        type Visit<'a> = &'a mut dyn FnMut(&[u8], &[u8]);
        unsafe extern "C" fn each(
            _key: *mut raw::RedisModuleKey,
            field: *mut raw::RedisModuleString,
            value: *mut raw::RedisModuleString,
            visit: *mut c_void,
        ) {
            // SAFETY: `visit` is the `Visit` passed to ScanKey below, alive
            // for its call; field and value are strings the server keeps for
            // this callback (a hash's value is never NULL; checked anyway).
            unsafe {
                let visit = &mut *visit.cast::<Visit>();
                let value = if value.is_null() {
                    &[][..]
                } else {
                    bytes_in(value)
                };
                visit(bytes_in(field), value);
            }
        }
        let mut visit: Visit = visit;
        // SAFETY: `open` is an open hash key, not modified while the scan
        // runs; the cursor is made and destroyed here; `each` gets `visit`
        // as its private data only during ScanKey's calls.
        unsafe {
            let cursor = api!(RedisModule_ScanCursorCreate)();
            while api!(RedisModule_ScanKey)(
                open,
                cursor,
                Some(each),
                (&mut visit as *mut Visit).cast(),
            ) != 0
            {}
            api!(RedisModule_ScanCursorDestroy)(cursor);
        }
        Ok(())
    }

    fn current_virtual_time(&mut self) -> Option<Vec<u8>> {
        let open = self.key(QueueKey::CurrentVirtualTime)?;
        let mut len = 0usize;
        // SAFETY: open string key; DMA in read mode gives a pointer valid
        // until the key is modified, and we copy immediately.
        unsafe {
            let data = api!(RedisModule_StringDMA)(open, &mut len, raw::REDISMODULE_READ as c_int);
            if data.is_null() {
                return None;
            }
            Some(std::slice::from_raw_parts(data.cast::<u8>(), len).to_vec())
        }
    }

    fn set_current_virtual_time(&mut self, value: i64) {
        self.set_raw_current_virtual_time(itoa::Buffer::new().format(value).as_bytes());
    }

    fn set_raw_current_virtual_time(&mut self, value: &[u8]) {
        let Some(open) = self.key_for_write(QueueKey::CurrentVirtualTime, false) else {
            return;
        };
        let string = OwnedString::new(value);
        // SAFETY: key opened for writing; StringSet takes its own reference.
        unsafe { api!(RedisModule_StringSet)(open, string.0) };
        self.record(QueueKey::CurrentVirtualTime, Command::Set, || [string]);
    }
}
