//! [`Store`] over the Redis module low-level key API. All of the module's
//! `unsafe` lives here, behind safe methods.
//!
//! A `RedisStore` opens a queue's keys once per command, checks their types
//! before anything is written, records every write as a replicable effect,
//! and on [`RedisStore::commit`] signals the keys it changed, propagates the
//! effects (plain ZADD/ZREM/HSET/HDEL/DEL/SET, so replicas and the AOF need
//! no module and never re-run clock or random logic) and fires one keyspace
//! notification. A command that changed nothing commits nothing.

use std::cell::RefCell;
use std::ffi::CStr;
use std::io::Write as _;
use std::mem::ManuallyDrop;
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::OnceLock;

use chacha20::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use redis_module::{raw, Context};
use smallvec::SmallVec;

use super::{HashKey, Store, ZsetKey};
use crate::keys::{key_name, KeyKind, QueueKey};

/// Calls a module API function that `check_api` verified at load time.
macro_rules! api {
    ($name:ident) => {
        raw::$name.expect(concat!(stringify!($name), " checked at load"))
    };
}

/// Fails module load when the server lacks a function this store calls, so
/// no command can later hit a missing one.
pub fn check_api() -> Result<(), &'static str> {
    macro_rules! require {
        ($($name:ident),*) => {
            $(if unsafe { raw::$name }.is_none() {
                return Err(stringify!($name));
            })*
        };
    }
    require!(
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_ValueLength,
        RedisModule_CreateString,
        RedisModule_FreeString,
        RedisModule_RetainString,
        RedisModule_StringPtrLen,
        RedisModule_StringDMA,
        RedisModule_StringSet,
        RedisModule_DeleteKey,
        RedisModule_ZsetAdd,
        RedisModule_ZsetRem,
        RedisModule_ZsetScore,
        RedisModule_ZsetFirstInScoreRange,
        RedisModule_ZsetRangeCurrentElement,
        RedisModule_ZsetRangeNext,
        RedisModule_ZsetRangeEndReached,
        RedisModule_ZsetRangeStop,
        RedisModule_HashGet,
        RedisModule_HashSet,
        RedisModule_SignalModifiedKey,
        RedisModule_Replicate,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_GetRandomBytes,
        RedisModule_Milliseconds,
        RedisModule_GetSelectedDb,
        RedisModule_SelectDb,
        RedisModule_SubscribeToServerEvent
    );
    Ok(())
}

/// Who is acting: a client (whose ACL user is checked) or the server itself
/// (the timer, which has no client and no user).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Client,
    Server,
}

/// Opening mode of a store.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Why a queue's keys could not be opened. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// A key of the queue holds another type.
    WrongType { key: Vec<u8>, expected: KeyKind },
    /// The client's ACL user may not access this key.
    NoPermission { key: Vec<u8> },
}

/// The ACL user of the calling client. None in contexts without a client
/// (the timer), where Redis itself is acting.
struct AclUser(*mut raw::RedisModuleUser);

impl AclUser {
    fn of_caller(ctx: &Context) -> Option<AclUser> {
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

    fn may(&self, key: &OwnedString, access: Access) -> bool {
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

impl Drop for AclUser {
    fn drop(&mut self) {
        // SAFETY: obtained from GetModuleUserFromUserName, freed once.
        unsafe { api!(RedisModule_FreeModuleUser)(self.0) };
    }
}

/// An owned `RedisModuleString` created without a context (so without auto
/// memory) and freed on drop.
struct OwnedString(*mut raw::RedisModuleString);

impl OwnedString {
    fn new(bytes: &[u8]) -> Self {
        // SAFETY: CreateString copies `len` bytes from a valid slice; a NULL
        // context is allowed and means the caller frees the string.
        OwnedString(unsafe {
            api!(RedisModule_CreateString)(ptr::null_mut(), bytes.as_ptr().cast(), bytes.len())
        })
    }

    /// Another owner of the same string (Redis counts references).
    fn retain(&self) -> Self {
        // SAFETY: a valid string; with a NULL context RetainString only adds
        // a reference, which the new owner's drop gives back.
        unsafe { api!(RedisModule_RetainString)(ptr::null_mut(), self.0) };
        OwnedString(self.0)
    }

    fn bytes(&self) -> &[u8] {
        let mut len = 0usize;
        // SAFETY: a valid string; the bytes live as long as it does.
        unsafe {
            let data = api!(RedisModule_StringPtrLen)(self.0, &mut len);
            std::slice::from_raw_parts(data.cast::<u8>(), len)
        }
    }
}

/// The key names of one queue, each made on first use.
struct QueueKeyNames {
    queue: Vec<u8>,
    names: [Option<OwnedString>; QueueKey::ALL.len()],
}

impl QueueKeyNames {
    fn new(queue: &[u8]) -> Self {
        QueueKeyNames {
            queue: queue.to_vec(),
            names: Default::default(),
        }
    }

    /// Another owner of the name of `key` (made now if it is the first use).
    fn name(&mut self, key: QueueKey) -> OwnedString {
        self.names[key.index()]
            .get_or_insert_with(|| OwnedString::new(&key_name(&self.queue, key)))
            .retain()
    }
}

/// Key names of the most recently used queues, kept across calls: a queue's
/// names never change, and making and freeing them anew for every call was
/// 5% of a lease+ack cycle. Redis counts references to a string, so a name
/// still held by the server (an open key, a pending effect) outlives its
/// eviction here. Only names of queues up to `LONGEST_QUEUE_NAME` bytes are
/// kept, so the cache never holds more than a few kilobytes outside the
/// keyspace, whatever names clients send.
struct KeyNameCache {
    /// Most recently used first.
    queues: Vec<QueueKeyNames>,
}

impl KeyNameCache {
    /// Queues whose names are kept; a lookup compares at most this many.
    const CAPACITY: usize = 8;
    const LONGEST_QUEUE_NAME: usize = 256;

    fn of_queue(&mut self, queue: &[u8]) -> &mut QueueKeyNames {
        match self.queues.iter().position(|cached| cached.queue == queue) {
            Some(found) => self.queues[..=found].rotate_right(1),
            None => {
                self.queues.truncate(Self::CAPACITY - 1);
                self.queues.insert(0, QueueKeyNames::new(queue));
            }
        }
        &mut self.queues[0]
    }
}

thread_local! {
    /// Only the main thread opens keys. `ManuallyDrop`: the names are left to
    /// the process's exit rather than freed by a thread-exit destructor that
    /// could run after the server stopped serving module calls.
    static KEY_NAMES: RefCell<ManuallyDrop<KeyNameCache>> =
        const { RefCell::new(ManuallyDrop::new(KeyNameCache { queues: Vec::new() })) };
}

/// Formats a score the way Redis parses it back exactly, into `buffer`:
/// integers below 10^17 in plain digits, anything else in the shortest
/// round-trip exponent form (at most 24 bytes, e.g. `-1.2345678901234567e-308`;
/// plain `{}` would spell 1e300 in 301 digits).
fn format_score(score: f64, buffer: &mut [u8; 32]) -> &[u8] {
    let mut cursor = std::io::Cursor::new(&mut buffer[..]);
    let written = if score.fract() == 0.0 && score.abs() < 1e17 {
        write!(cursor, "{}", score as i64)
    } else {
        write!(cursor, "{score:e}")
    };
    written.expect("a score fits in 32 bytes");
    let len = cursor.position() as usize;
    &buffer[..len]
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        // SAFETY: created by CreateString with a NULL context, freed once.
        unsafe { api!(RedisModule_FreeString)(ptr::null_mut(), self.0) }
    }
}

/// Copies a server-owned string's bytes and frees it.
///
/// # Safety
/// `s` must be a valid string owned by the caller (not auto-memory managed).
unsafe fn take_string(s: *mut raw::RedisModuleString) -> Vec<u8> {
    let mut len = 0usize;
    let data = api!(RedisModule_StringPtrLen)(s, &mut len);
    let bytes = std::slice::from_raw_parts(data.cast::<u8>(), len).to_vec();
    api!(RedisModule_FreeString)(ptr::null_mut(), s);
    bytes
}

/// The plain commands a store's writes replicate as.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Command {
    Zadd,
    Zrem,
    Hset,
    Hdel,
    Set,
    Del,
}

impl Command {
    fn name(self) -> &'static CStr {
        match self {
            Command::Zadd => c"ZADD",
            Command::Zrem => c"ZREM",
            Command::Hset => c"HSET",
            Command::Hdel => c"HDEL",
            Command::Set => c"SET",
            Command::Del => c"DEL",
        }
    }
}

/// One replicated write command, possibly merged from several writes. The
/// arguments are the very strings handed to the key API (shared, not
/// copied). A single write's two arguments (field and value, score and
/// member) and a key's single effect are held inline, so a lease or an ack
/// records its effects without allocating.
struct Effect {
    command: Command,
    args: SmallVec<[OwnedString; 2]>,
}

struct Slot {
    name: OwnedString,
    key: *mut raw::RedisModuleKey,
    written: bool,
    effects: SmallVec<[Effect; 1]>,
}

/// One queue's keys, open for the duration of a command or timer run.
pub struct RedisStore<'ctx> {
    ctx: &'ctx Context,
    /// `vtrr:<name>:queue`, opened or not: the keyspace notification names it.
    queue_name: OwnedString,
    access: Access,
    slots: [Option<Slot>; 9],
    /// The last two member/field strings made (ids, partitions), shared by
    /// the next operations on the same bytes: a lease names its id in seven
    /// calls, an enqueue alternates id and partition. The key API copies
    /// what it stores, so sharing is safe.
    recent_members: [Option<OwnedString>; 2],
}

impl<'ctx> RedisStore<'ctx> {
    /// Opens the given keys of queue `queue`, after checking the calling
    /// client's ACL permissions on each (the commands name a queue, not keys,
    /// so Redis cannot check them itself), and checks their types.
    pub fn open(
        ctx: &'ctx Context,
        queue: &[u8],
        keys: &[QueueKey],
        access: Access,
        caller: Caller,
    ) -> Result<Self, OpenError> {
        let mut names: [Option<OwnedString>; QueueKey::ALL.len()] = Default::default();
        let queue_name = KEY_NAMES.with_borrow_mut(|cache| {
            let mut uncached;
            let queue_names = if queue.len() <= KeyNameCache::LONGEST_QUEUE_NAME {
                cache.of_queue(queue)
            } else {
                uncached = QueueKeyNames::new(queue);
                &mut uncached
            };
            for &key in keys {
                names[key.index()] = Some(queue_names.name(key));
            }
            queue_names.name(QueueKey::Queue)
        });
        let user = match caller {
            Caller::Client => AclUser::of_caller(ctx),
            Caller::Server => None,
        };
        if let Some(user) = user {
            if let Some(denied) = names.iter().flatten().find(|name| !user.may(name, access)) {
                return Err(OpenError::NoPermission {
                    key: denied.bytes().to_vec(),
                });
            }
        }
        let mut store = RedisStore {
            ctx,
            queue_name,
            access,
            slots: Default::default(),
            recent_members: Default::default(),
        };
        for (key, name) in QueueKey::ALL.into_iter().zip(names) {
            if let Some(name) = name {
                store.open_slot(key, name)?;
            }
        }
        Ok(store)
    }

    fn open_slot(&mut self, which: QueueKey, name: OwnedString) -> Result<(), OpenError> {
        let mode = match self.access {
            Access::Read => raw::REDISMODULE_READ,
            Access::Write => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        } as c_int;
        // SAFETY: ctx is the live context of this call; name is a valid string
        // kept alive in the slot for as long as the key is open.
        let key = unsafe { api!(RedisModule_OpenKey)(self.ctx.ctx, name.0, mode) }
            .cast::<raw::RedisModuleKey>();
        let found = unsafe { api!(RedisModule_KeyType)(key) } as isize;
        let expected = which.kind();
        let matches = found == raw::REDISMODULE_KEYTYPE_EMPTY
            || found
                == match expected {
                    KeyKind::String => raw::REDISMODULE_KEYTYPE_STRING,
                    KeyKind::Hash => raw::REDISMODULE_KEYTYPE_HASH,
                    KeyKind::Zset => raw::REDISMODULE_KEYTYPE_ZSET,
                };
        let error = (!matches).then(|| OpenError::WrongType {
            key: name.bytes().to_vec(),
            expected,
        });
        self.slots[which.index()] = Some(Slot {
            name,
            key,
            written: false,
            effects: SmallVec::new(),
        });
        error.map_or(Ok(()), Err)
    }

    /// The open key for `which`. Commands open every key they use up front;
    /// a key used without being declared is a bug, reported as "empty".
    fn key(&self, which: QueueKey) -> Option<*mut raw::RedisModuleKey> {
        let slot = self.slots[which.index()].as_ref()?;
        // SAFETY: the key is open until drop.
        let kind = unsafe { api!(RedisModule_KeyType)(slot.key) } as isize;
        (kind != raw::REDISMODULE_KEYTYPE_EMPTY).then_some(slot.key)
    }

    /// The open key to write to; with `must_exist`, None when the key is
    /// empty (there is nothing to remove).
    fn key_for_write(&self, which: QueueKey, must_exist: bool) -> Option<*mut raw::RedisModuleKey> {
        if self.access != Access::Write {
            return None;
        }
        let slot = self.slots[which.index()].as_ref()?;
        if must_exist && self.key(which).is_none() {
            return None;
        }
        Some(slot.key)
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

    /// Whether this command wrote anything so far.
    pub fn changed(&self) -> bool {
        self.slots.iter().flatten().any(|s| s.written)
    }

    /// Signals the changed keys (for WATCH and client-side caching),
    /// replicates the effects and fires `event` on `vtrr:<name>:queue`.
    /// Returns whether anything had changed.
    pub fn commit(&mut self, event: &CStr) -> bool {
        if !self.changed() {
            return false;
        }
        let queue_name = self.queue_name.0;
        let queue_grew = self.slots[QueueKey::Queue.index()]
            .as_ref()
            .is_some_and(|slot| slot.effects.iter().any(|e| e.command == Command::Zadd));
        if queue_grew {
            // Wake clients blocked in VTRR.LEASE ... BLOCK on this queue.
            // SAFETY: live context and key name.
            unsafe { api!(RedisModule_SignalKeyAsReady)(self.ctx.ctx, queue_name) };
        }
        let mut argv: SmallVec<[*mut raw::RedisModuleString; 8]> = SmallVec::new();
        for slot in self.slots.iter_mut().flatten().filter(|s| s.written) {
            // SAFETY: ctx and the key name are valid for this call.
            unsafe { api!(RedisModule_SignalModifiedKey)(self.ctx.ctx, slot.name.0) };
            for effect in slot.effects.drain(..) {
                argv.clear();
                argv.push(slot.name.0);
                argv.extend(effect.args.iter().map(|arg| arg.0));
                // SAFETY: live context; "v" takes an array of valid strings
                // and its length, and Redis takes its own reference to each.
                unsafe {
                    api!(RedisModule_Replicate)(
                        self.ctx.ctx,
                        effect.command.name().as_ptr(),
                        c"v".as_ptr(),
                        argv.as_mut_ptr(),
                        argv.len(),
                    )
                };
            }
        }
        // SAFETY: live context, NUL-terminated event name, valid key name.
        unsafe {
            api!(RedisModule_NotifyKeyspaceEvent)(
                self.ctx.ctx,
                raw::REDISMODULE_NOTIFY_MODULE as c_int,
                event.as_ptr(),
                queue_name,
            )
        };
        true
    }

    fn record<const N: usize>(
        &mut self,
        which: QueueKey,
        command: Command,
        args: [OwnedString; N],
    ) {
        let Some(slot) = self.slots[which.index()].as_mut() else {
            return;
        };
        slot.written = true;
        match slot.effects.last_mut() {
            // Consecutive writes of one kind to one key become one command
            // (ZADD k s1 m1 s2 m2 ...), which applies in the same order.
            Some(last)
                if last.command == command
                    && matches!(
                        command,
                        Command::Zadd | Command::Zrem | Command::Hset | Command::Hdel
                    ) =>
            {
                last.args.extend(args);
            }
            // Only the last value of a string survives.
            Some(last) if last.command == Command::Set && command == Command::Set => {
                last.args = args.into_iter().collect();
            }
            _ => slot.effects.push(Effect {
                command,
                args: args.into_iter().collect(),
            }),
        }
    }

    fn range(
        &self,
        which: QueueKey,
        max: f64,
        limit: usize,
        mut visit: impl FnMut(Vec<u8>, f64) -> bool,
    ) {
        let Some(key) = self.key(which) else { return };
        if limit == 0 {
            return;
        }
        // SAFETY: key is an open sorted set; the iterator is stopped before
        // returning and the key is not modified while it runs.
        unsafe {
            if api!(RedisModule_ZsetFirstInScoreRange)(key, f64::NEG_INFINITY, max, 0, 0)
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
                if !visit(take_string(element), score) {
                    break;
                }
                if api!(RedisModule_ZsetRangeNext)(key) == 0 {
                    break;
                }
            }
            api!(RedisModule_ZsetRangeStop)(key);
        }
    }

    /// Number of entries of a sorted set with score <= `max`, counted by the
    /// server's own O(log N) ZCOUNT.
    fn zcount_call(&self, which: QueueKey, max: f64) -> u64 {
        let Some(slot) = self.slots[which.index()].as_ref() else {
            return 0;
        };
        let mut buffer = [0u8; 32];
        let max = format_score(max, &mut buffer);
        match self
            .ctx
            .call("ZCOUNT", &[slot.name.bytes(), b"-inf", max][..])
        {
            Ok(redis_module::RedisValue::Integer(n)) => n.max(0) as u64,
            _ => 0,
        }
    }
}

impl Drop for RedisStore<'_> {
    fn drop(&mut self) {
        for slot in self.slots.iter_mut().flatten() {
            // SAFETY: each key was opened once by this store and is closed once.
            unsafe { api!(RedisModule_CloseKey)(slot.key) };
        }
    }
}

impl Store for RedisStore<'_> {
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
        let mut buffer = [0u8; 32];
        let score = OwnedString::new(format_score(score, &mut buffer));
        self.record(which, Command::Zadd, [score, element]);
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
            self.record(which, Command::Zrem, [element]);
        }
        deleted != 0
    }

    fn zfirst(&mut self, key: ZsetKey) -> Option<(Vec<u8>, f64)> {
        let mut first = None;
        self.range(key.into(), f64::INFINITY, 1, |member, score| {
            first = Some((member, score));
            false
        });
        first
    }

    fn zrange_upto(&mut self, key: ZsetKey, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)> {
        let mut entries = Vec::new();
        self.range(key.into(), max, limit, |member, score| {
            entries.push((member, score));
            true
        });
        entries
    }

    fn zcard(&mut self, key: ZsetKey) -> u64 {
        // SAFETY: open key.
        self.key(key.into())
            .map_or(0, |k| unsafe { api!(RedisModule_ValueLength)(k) } as u64)
    }

    fn zcount_upto(&mut self, key: ZsetKey, max: f64) -> u64 {
        if self.key(key.into()).is_none() {
            return 0;
        }
        self.zcount_call(key.into(), max)
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
        self.record(which, Command::Hset, [field_string, value_string]);
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
            self.record(which, Command::Hdel, [field_string]);
        }
    }

    fn hlen(&mut self, key: HashKey) -> u64 {
        // SAFETY: open key.
        self.key(key.into())
            .map_or(0, |k| unsafe { api!(RedisModule_ValueLength)(k) } as u64)
    }

    fn hfields(&mut self, key: HashKey) -> Vec<Vec<u8>> {
        let which = QueueKey::from(key);
        let Some(slot) = self.slots[which.index()].as_ref() else {
            return Vec::new();
        };
        match self.ctx.call("HKEYS", &[slot.name.bytes()][..]) {
            Ok(redis_module::RedisValue::Array(fields)) => {
                fields.iter().filter_map(bytes_of).collect()
            }
            _ => Vec::new(),
        }
    }

    fn delete(&mut self, key: HashKey) {
        let which = QueueKey::from(key);
        let Some(open) = self.key_for_write(which, true) else {
            return;
        };
        // SAFETY: key opened for writing.
        unsafe { api!(RedisModule_DeleteKey)(open) };
        self.record(which, Command::Del, []);
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
        let Some(open) = self.key_for_write(QueueKey::CurrentVirtualTime, false) else {
            return;
        };
        let text = value.to_string();
        let string = OwnedString::new(text.as_bytes());
        // SAFETY: key opened for writing; StringSet takes its own reference.
        unsafe { api!(RedisModule_StringSet)(open, string.0) };
        self.record(QueueKey::CurrentVirtualTime, Command::Set, [string]);
    }
}

/// The bytes of a string reply of `RedisModule_Call`, whichever form it took.
pub fn bytes_of(value: &redis_module::RedisValue) -> Option<Vec<u8>> {
    use redis_module::RedisValue;
    match value {
        RedisValue::StringBuffer(b) => Some(b.clone()),
        RedisValue::SimpleString(s) | RedisValue::BulkString(s) => Some(s.clone().into_bytes()),
        RedisValue::BulkRedisString(s) => Some(s.as_slice().to_vec()),
        _ => None,
    }
}

/// Server time in Unix milliseconds. Read once per command.
pub fn now_ms() -> i64 {
    // SAFETY: checked at load; no arguments.
    unsafe { api!(RedisModule_Milliseconds)() }
}

thread_local! {
    /// The lease-token generator: ChaCha20, seeded on first use from the
    /// server's cryptographic random source. As unpredictable as asking the
    /// server for every token (`GetRandomHexChars` runs SHA-256 per call),
    /// for a fraction of the cost. Only the main thread leases.
    static TOKENS: RefCell<Option<ChaCha20Rng>> = const { RefCell::new(None) };
}

/// A fresh lease token: 32 lowercase hex characters (128 random bits).
pub fn new_token() -> Vec<u8> {
    let mut random = [0u8; 16];
    TOKENS.with_borrow_mut(|tokens| {
        tokens
            .get_or_insert_with(|| {
                let mut seed = [0u8; 32];
                // SAFETY: writes exactly `len` bytes into a buffer of that size.
                unsafe { api!(RedisModule_GetRandomBytes)(seed.as_mut_ptr(), seed.len()) };
                ChaCha20Rng::from_seed(seed)
            })
            .fill_bytes(&mut random)
    });
    const HEX: &[u8; 16] = b"0123456789abcdef";
    random
        .iter()
        .flat_map(|byte| [HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]])
        .collect()
}

/// The database the context works on.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: live context; checked at load.
    unsafe { api!(RedisModule_GetSelectedDb)(ctx.ctx) }
}

/// Switches the context to database `db`; false when there is no such db.
pub fn select_db(ctx: &Context, db: i32) -> bool {
    // SAFETY: live context; SelectDb validates `db` itself.
    unsafe { api!(RedisModule_SelectDb)(ctx.ctx, db) == raw::REDISMODULE_OK as c_int }
}

/// What `subscribe_to_swapdb` calls, with the two database numbers.
static SWAPDB_HANDLER: OnceLock<fn(i32, i32)> = OnceLock::new();

/// Calls `handler(first, second)` after every SWAPDB, which moves keys
/// between databases without firing any keyspace event. False when the
/// server refuses the subscription.
pub fn subscribe_to_swapdb(ctx: &Context, handler: fn(i32, i32)) -> bool {
    let _ = SWAPDB_HANDLER.set(handler);
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_SWAPDB,
        dataver: 1,
    };
    // SAFETY: live context at load; the callback has the server-event
    // signature and only reads the event data Redis passes for SWAPDB.
    unsafe {
        api!(RedisModule_SubscribeToServerEvent)(ctx.ctx, event, Some(on_swapdb))
            == raw::REDISMODULE_OK as c_int
    }
}

unsafe extern "C" fn on_swapdb(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut c_void,
) {
    // SAFETY: for the SWAPDB event Redis passes a RedisModuleSwapDbInfo that
    // lives for the duration of the call.
    let Some(swapped) = (unsafe { data.cast::<raw::RedisModuleSwapDbInfo>().as_ref() }) else {
        return;
    };
    if let Some(handler) = SWAPDB_HANDLER.get() {
        handler(swapped.dbnum_first, swapped.dbnum_second);
    }
}

/// The lowest expiry in `vtrr:<queue>:inflight` of the selected database,
/// read without opening anything for writing (so no WATCH is disturbed).
pub fn first_expiry(ctx: &Context, queue: &[u8]) -> Option<i64> {
    let mut store = RedisStore::open(
        ctx,
        queue,
        &[QueueKey::Inflight],
        Access::Read,
        Caller::Server,
    )
    .ok()?;
    store
        .zfirst(ZsetKey::Inflight)
        .map(|(_, score)| score as i64)
}

/// A client waiting for a key (`VTRR.LEASE ... BLOCK`): what it asked for,
/// how to serve it once the key is signalled ready, and what to reply when
/// its timeout passes (or CLIENT UNBLOCK).
pub struct Waiter<T> {
    pub request: T,
    /// `None`: still nothing to give; the client keeps waiting in line.
    pub serve: fn(&Context, &T) -> Option<redis_module::RedisResult>,
    pub on_timeout: fn(&T) -> redis_module::RedisValue,
}

/// Blocks the calling client on `key` for up to `timeout_ms` (0: forever).
/// Redis serves the clients blocked on a key in the order they blocked, each
/// once per readiness signal, so one new item wakes one lease.
pub fn block_on_key<T: 'static>(ctx: &Context, key: &[u8], timeout_ms: i64, waiter: Waiter<T>) {
    let key = OwnedString::new(key);
    let mut keys = [key.0];
    let privdata = Box::into_raw(Box::new(waiter)).cast::<c_void>();
    // SAFETY: live command context; Redis copies the key array and owns
    // `privdata` until it calls `free_waiter`, exactly once.
    unsafe {
        api!(RedisModule_BlockClientOnKeys)(
            ctx.ctx,
            Some(serve_waiter::<T>),
            Some(time_out_waiter::<T>),
            Some(free_waiter::<T>),
            timeout_ms,
            keys.as_mut_ptr(),
            1,
            privdata,
        );
    }
}

/// # Safety
/// Called by Redis with the context of a client blocked by `block_on_key::<T>`.
unsafe fn waiter_of<'a, T>(ctx: *mut raw::RedisModuleCtx) -> Option<&'a Waiter<T>> {
    let privdata = api!(RedisModule_GetBlockedClientPrivateData)(ctx).cast::<Waiter<T>>();
    privdata.as_ref()
}

extern "C" fn serve_waiter<T>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    // SAFETY: Redis calls this only for clients blocked by `block_on_key::<T>`.
    let Some(waiter) = (unsafe { waiter_of::<T>(ctx) }) else {
        return raw::REDISMODULE_ERR as c_int;
    };
    match (waiter.serve)(&context, &waiter.request) {
        None => raw::REDISMODULE_ERR as c_int, // keep waiting
        Some(result) => {
            context.reply(result);
            raw::REDISMODULE_OK as c_int
        }
    }
}

extern "C" fn time_out_waiter<T>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    // SAFETY: as in `serve_waiter`.
    if let Some(waiter) = unsafe { waiter_of::<T>(ctx) } {
        context.reply(Ok((waiter.on_timeout)(&waiter.request)));
    }
    raw::REDISMODULE_OK as c_int
}

extern "C" fn free_waiter<T>(_ctx: *mut raw::RedisModuleCtx, privdata: *mut c_void) {
    if !privdata.is_null() {
        // SAFETY: created by Box::into_raw in `block_on_key::<T>`, freed once.
        drop(unsafe { Box::from_raw(privdata.cast::<Waiter<T>>()) });
    }
}

#[cfg(test)]
mod tests {
    use super::format_score;

    #[test]
    fn scores_format_so_redis_reads_back_the_same_double() {
        let mut buffer = [0u8; 32];
        for (score, text) in [
            (0.0, "0"),
            (42.0, "42"),
            (-3.0, "-3"),
            (1_700_000_000_000.0, "1700000000000"),
            (9_007_199_254_740_992.0, "9007199254740992"),
            (1e17, "1e17"),
            (-9.3e18, "-9.3e18"),
            (1e300, "1e300"),
            (0.5, "5e-1"),
            (f64::MAX, "1.7976931348623157e308"),
            (-1.2345678901234567e-308, "-1.2345678901234567e-308"),
        ] {
            let formatted = format_score(score, &mut buffer);
            assert_eq!(formatted, text.as_bytes(), "{score}");
            let parsed: f64 = std::str::from_utf8(formatted).unwrap().parse().unwrap();
            assert_eq!(parsed.to_bits(), score.to_bits(), "{score}");
        }
    }
}
