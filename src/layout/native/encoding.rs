//! The serialised form of a native queue (a [`MemoryStore`]): what RDB
//! files, DUMP payloads (so RESTORE and MIGRATE) and `VTRR.LOAD` (the AOF
//! rewrite, Valkey's atomic slot migration) carry. Plain Rust, so the
//! decoder is tested and fuzzed without a server.
//!
//! A queue is a sequence of chunks of at most about [`CHUNK_BYTES`] bytes,
//! each a whole number of records, so no caller holds the queue twice:
//!
//! ```text
//! record  = tag:u8 body
//! tag     = 0..=9    a sorted-set entry  (ZsetKey index): member:bytes score:f64
//!         | 16..=31  a hash field        (16 + HashKey index): field:bytes value:bytes
//!         | 32       current_virtual_time: value:bytes
//!         | 33..     a hash field        (33 + HashKey index - 16)
//! bytes   = len:u32 (little-endian) then len bytes
//! f64     = 8 bytes, little-endian; never NaN
//! ```
//!
//! Records come in a canonical order (sorted sets by index, each in (score,
//! member) order; hashes by index, each in field order), so two queues
//! with the same content encode to the same bytes: DUMP payloads compare
//! content. A decoder refuses, without panicking or allocating more than
//! its input, anything that is not such a sequence: an unknown tag, a
//! length past the end, a NaN score, an entry given twice.

use crate::engine::memory::MemoryStore;
use crate::store::{HashKey, Store, ZsetKey};

/// The encoding version: `rdb_load` receives it and refuses newer ones.
/// 2 added the rankings (tags 6..=9) and the totals (tag 29); a version-1
/// queue has neither until `VTRR.RECOUNT` (tags are only ever appended).
/// 3: partition records (tag 28) carry the wait their place in
/// `rank_waiting` was written for (`u` records), which a module of version
/// 2 would read as unreadable: it refuses the value instead. Versions 1 and
/// 2 load (`tests/fixtures/native-v2.rdb`).
/// The hashes of priorities (tags 31 and 33) came without a new version:
/// a queue without priorities loads in a module of before them, one with
/// them is refused there for its unknown tags, as a newer version would be.
/// So did `last_error` (tag 34): a queue no `NACK ... REASON` wrote loads
/// in a module of before it, one holding an error is refused there.
pub const ENCODING_VERSION: i32 = 3;

/// A chunk is cut once it holds this many bytes (a record is never split).
pub const CHUNK_BYTES: usize = 64 * 1024;

const HASH_TAG: u8 = 16;
const CURRENT_VIRTUAL_TIME_TAG: u8 = 32;
/// The hashes past the sixteenth go after the current virtual time's tag.
const LATER_HASH_TAG: u8 = 33;

fn hash_tag(key: HashKey) -> u8 {
    match key.index() as u8 {
        index @ 0..16 => HASH_TAG + index,
        index => LATER_HASH_TAG + index - 16,
    }
}

fn hash_of_tag(tag: u8) -> Option<HashKey> {
    let index = match tag {
        HASH_TAG..=31 => tag - HASH_TAG,
        LATER_HASH_TAG.. => tag - LATER_HASH_TAG + 16,
        _ => return None,
    };
    HashKey::ALL.get(index as usize).copied()
}

/// Why bytes are not a native queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// Calls `emit` with each chunk of `store`'s encoding, in order (none for an
/// empty store).
pub fn encode(store: &MemoryStore, mut emit: impl FnMut(&[u8])) {
    let mut chunk = Vec::with_capacity(CHUNK_BYTES);
    let mut cut = |chunk: &mut Vec<u8>| {
        if chunk.len() >= CHUNK_BYTES {
            emit(chunk);
            chunk.clear();
        }
    };
    for key in ZsetKey::ALL {
        for (member, score) in store.zset_iter(key) {
            chunk.push(key.index() as u8);
            put_bytes(&mut chunk, member);
            chunk.extend_from_slice(&score.to_le_bytes());
            cut(&mut chunk);
        }
    }
    for key in HashKey::ALL {
        for (field, value) in store.hash_sorted(key) {
            chunk.push(hash_tag(key));
            put_bytes(&mut chunk, field);
            put_bytes(&mut chunk, &value);
            cut(&mut chunk);
        }
    }
    if let Some(value) = store.raw_current_virtual_time() {
        chunk.push(CURRENT_VIRTUAL_TIME_TAG);
        put_bytes(&mut chunk, value);
    }
    if !chunk.is_empty() {
        emit(&chunk);
    }
}

/// The whole encoding of `store` as one buffer (tests, DIGEST-free checks).
pub fn encode_to_vec(store: &MemoryStore) -> Vec<u8> {
    let mut all = Vec::new();
    encode(store, |chunk| all.extend_from_slice(chunk));
    all
}

/// Adds the records of `chunk` to `queue`, or none of them: refused when
/// the chunk does not decode or names an entry `queue` already has. Costs
/// the chunk, not the queue (`VTRR.LOAD` adds a rewritten AOF's chunks one
/// by one).
pub fn add_chunk(queue: &mut MemoryStore, chunk: &[u8]) -> Result<(), DecodeError> {
    let mut added = MemoryStore::new();
    decode_chunk(&mut added, chunk)?;
    let given_twice = ZsetKey::ALL.into_iter().any(|key| {
        added
            .zset_iter(key)
            .any(|(member, _)| queue.zscore(key, member).is_some())
    }) || HashKey::ALL.into_iter().any(|key| {
        added
            .hash_sorted(key)
            .iter()
            .any(|(field, _)| queue.hash_value(key, field).is_some())
    }) || (added.raw_current_virtual_time().is_some()
        && queue.raw_current_virtual_time().is_some());
    if given_twice {
        return Err(DecodeError("an entry is given twice"));
    }
    // Values before scores: an item then grows once, into the room it
    // keeps for a score.
    for key in HashKey::ALL {
        for (field, value) in added.hash_sorted(key) {
            queue.hset(key, field, &value);
        }
    }
    for key in ZsetKey::ALL {
        for (member, score) in added.zset_iter(key) {
            queue.zadd(key, member, score);
        }
    }
    if let Some(value) = added.raw_current_virtual_time() {
        queue.set_raw_current_virtual_time(value);
    }
    Ok(())
}

/// Adds the records of `chunk` to `store`. On an error, `store` may hold
/// some of the chunk's records: the caller drops it.
pub fn decode_chunk(store: &mut MemoryStore, chunk: &[u8]) -> Result<(), DecodeError> {
    let mut input = Reader(chunk);
    while let Some(tag) = input.byte() {
        match tag {
            t if (t as usize) < ZsetKey::ALL.len() => {
                let key = ZsetKey::ALL[t as usize];
                let member = input.bytes()?;
                let score = f64::from_le_bytes(input.array()?);
                if score.is_nan() {
                    return Err(DecodeError("a score is not a number"));
                }
                if store.zscore(key, member).is_some() {
                    return Err(DecodeError("a sorted-set member is given twice"));
                }
                store.zadd(key, member, score);
            }
            t if hash_of_tag(t).is_some() => {
                let key = hash_of_tag(t).expect("a hash tag");
                let field = input.bytes()?;
                let value = input.bytes()?;
                if store.hash_value(key, field).is_some() {
                    return Err(DecodeError("a hash field is given twice"));
                }
                store.hset(key, field, value);
            }
            CURRENT_VIRTUAL_TIME_TAG => {
                let value = input.bytes()?;
                if store.raw_current_virtual_time().is_some() {
                    return Err(DecodeError("the current virtual time is given twice"));
                }
                store.set_raw_current_virtual_time(value);
            }
            _ => return Err(DecodeError("unknown record tag")),
        }
    }
    Ok(())
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Redis strings are at most 512 MB, well within u32.
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(first)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(DecodeError("a record is cut short"))?;
        self.0 = rest;
        Ok(*head)
    }

    /// A length-prefixed run of bytes, borrowed: a forged length past the
    /// end is refused before anything is allocated.
    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = u32::from_le_bytes(self.array()?) as usize;
        if len > self.0.len() {
            return Err(DecodeError("a length runs past the end"));
        }
        let (bytes, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> MemoryStore {
        let mut store = MemoryStore::new();
        for i in 0..2000u32 {
            let id = format!("task-{i}");
            store.zadd(ZsetKey::Queue, id.as_bytes(), f64::from(i % 97));
            store.hset(HashKey::Task, id.as_bytes(), &[i as u8; 64]);
            store.hset(
                HashKey::Meta,
                id.as_bytes(),
                format!("1:p{}", i % 7).as_bytes(),
            );
        }
        store.zadd(ZsetKey::Inflight, b"a", 1.5e12);
        store.hset(HashKey::Lease, b"a", b"token");
        store.hset(HashKey::Partitions, b"p1", b"1 2 3");
        store.set_current_virtual_time(42);
        store
    }

    fn decode_all(chunks: &[Vec<u8>]) -> Result<MemoryStore, DecodeError> {
        let mut store = MemoryStore::new();
        for chunk in chunks {
            decode_chunk(&mut store, chunk)?;
        }
        Ok(store)
    }

    #[test]
    fn a_queue_round_trips_in_chunks_of_bounded_size() {
        let store = sample();
        let mut chunks = Vec::new();
        encode(&store, |c| chunks.push(c.to_vec()));
        assert!(chunks.len() > 1, "{} chunks", chunks.len());
        assert!(chunks.iter().all(|c| c.len() < CHUNK_BYTES + 128));
        let back = decode_all(&chunks).unwrap();
        assert_eq!(encode_to_vec(&back), encode_to_vec(&store));
        for key in ZsetKey::ALL {
            assert_eq!(back.zset_entries(key), store.zset_entries(key));
        }
        for key in HashKey::ALL {
            assert_eq!(back.hash_entries(key), store.hash_entries(key));
        }
        assert_eq!(back.raw_current_virtual_time(), Some(&b"42"[..]));
    }

    #[test]
    fn equal_content_encodes_to_equal_bytes_whatever_the_history() {
        let mut a = MemoryStore::new();
        let mut b = MemoryStore::new();
        for i in 0..300u32 {
            a.hset(HashKey::Task, format!("{i}").as_bytes(), b"x");
            b.hset(HashKey::Task, format!("{}", 299 - i).as_bytes(), b"x");
            b.hset(HashKey::Nacks, format!("{i}").as_bytes(), b"1");
        }
        for i in 0..300u32 {
            b.hdel(HashKey::Nacks, format!("{i}").as_bytes());
        }
        assert_eq!(encode_to_vec(&a), encode_to_vec(&b));
    }

    #[test]
    fn forged_records_are_refused() {
        let refuse = |bytes: &[u8], why: &str| {
            let err = decode_all(&[bytes.to_vec()]).unwrap_err();
            assert_eq!(err.0, why, "{bytes:?}");
        };
        refuse(&[99], "unknown record tag");
        refuse(&[0, 1, 0, 0], "a record is cut short");
        refuse(
            &[0, 0xff, 0xff, 0xff, 0xff, b'a'],
            "a length runs past the end",
        );
        let mut nan = vec![0, 1, 0, 0, 0, b'a'];
        nan.extend_from_slice(&f64::NAN.to_le_bytes());
        refuse(&nan, "a score is not a number");
        let mut twice = vec![HASH_TAG + 1, 1, 0, 0, 0, b'a', 0, 0, 0, 0];
        twice.extend_from_within(..);
        refuse(&twice, "a hash field is given twice");
    }

    proptest! {
        /// Whatever the bytes, decoding returns (it never panics), and what
        /// it accepts re-encodes to bytes that decode to the same queue.
        #[test]
        fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(store) = decode_all(&[bytes]) {
                let again = encode_to_vec(&store);
                let back = decode_all(std::slice::from_ref(&again)).unwrap();
                prop_assert_eq!(encode_to_vec(&back), again);
            }
        }

        /// Every truncation of a valid encoding is refused or decodes to a
        /// prefix of its records: never a panic.
        #[test]
        fn truncated_encodings_never_panic(cut in 0usize..4096) {
            let mut small = MemoryStore::new();
            for i in 0..40u32 {
                small.zadd(ZsetKey::Queue, format!("t{i}").as_bytes(), f64::from(i));
                small.hset(HashKey::Task, format!("t{i}").as_bytes(), b"payload");
            }
            let bytes = encode_to_vec(&small);
            let _ = decode_all(&[bytes[..cut.min(bytes.len())].to_vec()]);
        }
    }
}
