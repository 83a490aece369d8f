//! The module's data type, `vtrrqueue`: its registration, what a key holds,
//! the callbacks the server calls (they only translate to and from safe
//! methods of the value) and `VTRR.LOAD`, which a rewritten AOF replays.

use std::alloc::Layout;
use std::os::raw::{c_int, c_ulong, c_void};
use std::ptr::{self, NonNull};

use redis_module::native_types::RedisType;
use redis_module::{raw, Context};

use super::encoding::{self, DecodeError, ENCODING_VERSION};
use crate::engine::defrag::{DefragCursor, Relocate};
use crate::engine::memory::MemoryStore;
use crate::info;
use crate::server::api::api;
use crate::server::strings::OwnedString;

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
        defrag: Some(defrag),
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
    },
);

pub(super) fn queue_type() -> *mut raw::RedisModuleType {
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
pub(crate) unsafe fn found_at(key: *mut raw::RedisModuleKey) -> Found {
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

/// Active defrag of one queue: its own box, then the walk of
/// `MemoryStore::defrag` (what it moves and what not: `store::defrag`).
/// A queue of more entries than `active-defrag-max-scan-fields` (its
/// `free_effort`) is defragged late, in steps: the server gives a cursor
/// and a deadline, the walk stops when `RedisModule_DefragShouldStop` says
/// so, stores where to resume (never 0) and returns 1; 0 once done. A
/// smaller one is walked whole in one call (no cursor, no deadline).
unsafe extern "C" fn defrag(
    ctx: *mut raw::RedisModuleDefragCtx,
    _key: *mut raw::RedisModuleString,
    value: *mut *mut c_void,
) -> c_int {
    let mut stored: c_ulong = 0;
    // SAFETY: the server's defrag context for this call.
    let resumable = unsafe { api!(RedisModule_DefragCursorGet)(ctx, &mut stored) }
        == raw::REDISMODULE_OK as c_int;
    let from = if resumable {
        DefragCursor::from_raw(stored)
    } else {
        DefragCursor::START
    };
    let mut mover = ServerMover { ctx, moved: 0 };
    if from == DefragCursor::START {
        // SAFETY: `*value` is this type's value, a `Box<MemoryStore>` made
        // by the global allocator, which is RedisModule_Alloc's (see
        // `ServerMover`); a MemoryStore holds no pointer into itself, so a
        // byte copy of it elsewhere is the same value. The server keeps the
        // pointer written back here.
        unsafe {
            let moved = api!(RedisModule_DefragAlloc)(ctx, *value);
            if !moved.is_null() {
                *value = moved;
                mover.moved += 1;
                info::add(&info::NATIVE_DEFRAG_VALUES_MOVED, 1);
            }
        }
    }
    // SAFETY: the server passes a value of this type and nothing else uses
    // it during the callback (main thread, no command running).
    let queue = unsafe { &mut *(*value).cast::<MemoryStore>() };
    // Without a cursor to resume from, the walk never stops early.
    // SAFETY: as above.
    let should_stop = || resumable && unsafe { api!(RedisModule_DefragShouldStop)(ctx) } != 0;
    let rest = queue.defrag(from, should_stop, &mut mover);
    info::add(&info::NATIVE_DEFRAG_STEPS, 1);
    info::add(&info::NATIVE_DEFRAG_MOVED, mover.moved);
    if let Some(next) = rest {
        // SAFETY: as above; a walk only stops early with a cursor to set.
        let set = unsafe { api!(RedisModule_DefragCursorSet)(ctx, next.raw() as c_ulong) };
        if set == raw::REDISMODULE_OK as c_int {
            return 1;
        }
    }
    info::add(&info::NATIVE_DEFRAG_RUNS, 1);
    0
}

// `DefragAlloc` keeps an allocation's alignment only up to the allocator's
// own (8 here): the value's struct must not need more.
const _: () = assert!(std::mem::align_of::<MemoryStore>() <= 8);

/// [`Relocate`] through `RedisModule_DefragAlloc`, counting the moves.
struct ServerMover {
    ctx: *mut raw::RedisModuleDefragCtx,
    moved: u64,
}

// SAFETY: the module's global allocator is redis-module's `RedisAlloc`,
// which hands out the very pointers `RedisModule_Alloc` returned (its size
// rounded up to the alignment, here 1) and frees with `RedisModule_Free`:
// `RedisModule_DefragAlloc` may move them. A non-NULL reply is a new
// allocation of the same allocator holding the old one's usable bytes (at
// least `layout.size()`), and the old one is freed; NULL moved nothing.
unsafe impl Relocate for ServerMover {
    fn relocate(&mut self, ptr: NonNull<u8>, layout: Layout) -> Option<NonNull<u8>> {
        if layout.align() > 8 {
            // The allocator would not promise the alignment at a new place.
            return None;
        }
        // SAFETY: the defrag context of this call; `ptr` as above.
        let moved = unsafe { api!(RedisModule_DefragAlloc)(self.ctx, ptr.as_ptr().cast()) };
        let moved = NonNull::new(moved.cast::<u8>())?;
        self.moved += 1;
        Some(moved)
    }
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
