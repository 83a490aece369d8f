//! Strings shared with the server: owned `RedisModuleString`s and copies of
//! server-owned ones.

use std::ptr;

use redis_module::raw;

use super::api::api;

/// An owned `RedisModuleString` created without a context (so without auto
/// memory) and freed on drop.
pub struct OwnedString(pub(crate) *mut raw::RedisModuleString);

impl OwnedString {
    pub fn new(bytes: &[u8]) -> Self {
        // SAFETY: CreateString copies `len` bytes from a valid slice; a NULL
        // context is allowed and means the caller frees the string.
        OwnedString(unsafe {
            api!(RedisModule_CreateString)(ptr::null_mut(), bytes.as_ptr().cast(), bytes.len())
        })
    }

    /// Another owner of the same string (Redis counts references).
    pub fn retain(&self) -> Self {
        // SAFETY: a valid string; with a NULL context RetainString only adds
        // a reference, which the new owner's drop gives back.
        unsafe { api!(RedisModule_RetainString)(ptr::null_mut(), self.0) };
        OwnedString(self.0)
    }

    pub fn bytes(&self) -> &[u8] {
        let mut len = 0usize;
        // SAFETY: a valid string; the bytes live as long as it does.
        unsafe {
            let data = api!(RedisModule_StringPtrLen)(self.0, &mut len);
            std::slice::from_raw_parts(data.cast::<u8>(), len)
        }
    }
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
pub unsafe fn take_string(s: *mut raw::RedisModuleString) -> Vec<u8> {
    let mut len = 0usize;
    let data = api!(RedisModule_StringPtrLen)(s, &mut len);
    let bytes = std::slice::from_raw_parts(data.cast::<u8>(), len).to_vec();
    api!(RedisModule_FreeString)(ptr::null_mut(), s);
    bytes
}

/// The bytes of a server-owned string, borrowed.
///
/// # Safety
/// `s` must be a valid string that outlives `'a` and is not modified
/// meanwhile.
pub unsafe fn bytes_in<'a>(s: *mut raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    let data = api!(RedisModule_StringPtrLen)(s, &mut len);
    std::slice::from_raw_parts(data.cast::<u8>(), len)
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
