//! The storage surface the VTRR core sees: the handful of sorted-set, hash
//! and string operations on one queue's keys, with no server in sight.
//! `vocabulary` is the one key vocabulary: [`QueueKey`] names every key of
//! a queue, [`ZsetKey`] and [`HashKey`] the sorted sets and hashes the
//! operations take; `record` is a partition's record, `number` how numbers
//! are written. The trait is implemented over plain collections by
//! `crate::engine` (the core's test twin, and the value of a native queue)
//! and over a server's keys by `crate::layout`.

pub mod number;
pub mod record;
pub mod vocabulary;

pub use record::{LevelState, Rate, Record};
pub use vocabulary::{HashKey, KeyKind, QueueKey, Scope, ZsetKey};

/// One HSCAN step: the next cursor (0 when done) and field/value pairs.
pub type HashPage = (u64, Vec<(Vec<u8>, Vec<u8>)>);

/// What [`Store::visit_values`] calls with each entry found: its hash,
/// field and value.
pub type ValueVisit<'a> = dyn FnMut(HashKey, &[u8], &[u8]) + 'a;

/// A call to the server a store operation made was refused: nothing was
/// read, and the operation says so rather than read it as empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    /// The command called (`HSCAN`, `HKEYS`, `ZCOUNT`).
    pub command: &'static str,
    /// The key it was called on.
    pub key: Vec<u8>,
    /// The server's error reply, or what was wrong with its reply.
    pub reply: String,
}

/// Operations on one queue's keys, in the queue's typed values where the
/// core has them (a partition's record, integers) and in its keys'
/// vocabulary elsewhere. Implementations have already checked the key types; a
/// missing key reads as empty. The key API's operations cannot
/// fail; the few that are server calls (`zcount_upto`, `hfields`, `hscan`)
/// return the server's refusal.
pub trait Store {
    fn zscore(&mut self, key: ZsetKey, member: &[u8]) -> Option<f64>;
    fn zadd(&mut self, key: ZsetKey, member: &[u8], score: f64);
    /// Removes `member`; true when it was present.
    fn zrem(&mut self, key: ZsetKey, member: &[u8]) -> bool;
    /// The lowest (score, member) entry.
    fn zfirst(&mut self, key: ZsetKey) -> Option<(Vec<u8>, f64)>;
    /// Up to `limit` entries with score <= `max`, in ascending (score, member) order.
    fn zrange_upto(&mut self, key: ZsetKey, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)>;
    /// Up to `limit` entries with `above` < score <= `max`, in ascending
    /// (score, member) order.
    fn zrange_above(
        &mut self,
        key: ZsetKey,
        above: f64,
        max: f64,
        limit: usize,
    ) -> Vec<(Vec<u8>, f64)>;
    /// The first member >= `from` in member order, of a sorted set whose
    /// scores are all equal (`held`).
    fn zfirst_from(&mut self, key: ZsetKey, from: &[u8]) -> Option<Vec<u8>>;
    fn zcard(&mut self, key: ZsetKey) -> u64;
    /// Number of entries with score <= `max`.
    fn zcount_upto(&mut self, key: ZsetKey, max: f64) -> Result<u64, StoreError>;
    /// The members of up to `limit` entries from the `offset`-th on, in
    /// ascending (score, member) order (a page of a ranking).
    fn zmembers_from(
        &mut self,
        key: ZsetKey,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError>;

    fn hget(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>>;
    fn hset(&mut self, key: HashKey, field: &[u8], value: &[u8]);
    fn hdel(&mut self, key: HashKey, field: &[u8]);
    /// HGET then HDEL: the value, moved out where the store can.
    fn htake(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>> {
        let value = self.hget(key, field);
        self.hdel(key, field);
        value
    }
    fn hlen(&mut self, key: HashKey) -> u64;
    /// Every field of a hash (O(N): only for the invariant check).
    fn hfields(&mut self, key: HashKey) -> Result<Vec<Vec<u8>>, StoreError>;
    /// One step of HSCAN.
    fn hscan(&mut self, key: HashKey, cursor: u64, count: usize) -> Result<HashPage, StoreError>;
    /// Deletes a whole key (a sorted set, hash or the string).
    fn delete(&mut self, key: QueueKey);

    /// Visits every entry of a sorted set, in ascending (score, member)
    /// order (a whole key read at once: VTRR.CONVERT).
    fn visit_zset(&mut self, key: ZsetKey, visit: &mut dyn FnMut(&[u8], f64)) {
        for (member, score) in self.zrange_upto(key, f64::INFINITY, usize::MAX) {
            visit(&member, score);
        }
    }
    /// Visits each of `fields` that each of hashes `keys` holds, with its
    /// value, in the order given (whole keys read in an order the caller
    /// knows: the hashes of item ids, by the ids a sorted set names).
    fn visit_values(
        &mut self,
        keys: &[HashKey],
        fields: &mut dyn Iterator<Item = &[u8]>,
        visit: &mut ValueVisit<'_>,
    ) {
        for field in fields {
            for &key in keys {
                if let Some(value) = self.hget(key, field) {
                    visit(key, field, &value);
                }
            }
        }
    }
    /// Visits every field of a hash with its value, at least once (as a
    /// whole HSCAN would), in no promised order.
    fn visit_hash(
        &mut self,
        key: HashKey,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(), StoreError> {
        let mut cursor = 0;
        loop {
            let (next, page) = self.hscan(key, cursor, 1000)?;
            for (field, value) in page {
                visit(&field, &value);
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Sets item `id`'s payload (field `id` of hash `payload.0`) and, when
    /// given, its `meta`, in that order: one item written whole where the
    /// store keeps items (a native queue), two HSETs in the keys layout.
    fn set_item(&mut self, id: &[u8], payload: (HashKey, &[u8]), meta: Option<&[u8]>) {
        self.hset(payload.0, id, payload.1);
        if let Some(meta) = meta {
            self.hset(HashKey::Meta, id, meta);
        }
    }

    /// Partition `partition`'s record: None when it has none, the stored
    /// bytes when they do not read as one (another client wrote them). A
    /// store that keeps text (the keys layout) reads it through the text
    /// form; a typed one keeps the record as it is.
    fn record(&mut self, partition: &[u8]) -> Option<Result<Record, Vec<u8>>> {
        self.hget(HashKey::Partitions, partition)
            .map(|raw| Record::parse(&raw).ok_or(raw))
    }
    /// Sets partition `partition`'s record (its deletion is an `hdel`).
    fn set_record(&mut self, partition: &[u8], record: &Record) {
        self.hset(HashKey::Partitions, partition, &record.format());
    }

    /// An integer field (a virtual time, a counter, a total, a held time):
    /// None when absent, the stored bytes when they are not an integer's
    /// canonical text (the caller reads those its own way).
    fn hget_int(&mut self, key: HashKey, field: &[u8]) -> Option<Result<i64, Vec<u8>>> {
        self.hget(key, field)
            .map(|raw| number::canonical_int(&raw).ok_or(raw))
    }
    /// Sets an integer field.
    fn hset_int(&mut self, key: HashKey, field: &[u8], value: i64) {
        self.hset(key, field, itoa::Buffer::new().format(value).as_bytes());
    }

    /// Raw content of `vtrr:<name>:current_virtual_time`.
    fn current_virtual_time(&mut self) -> Option<Vec<u8>>;
    fn set_current_virtual_time(&mut self, value: i64);
    /// Sets `current_virtual_time` to bytes as they are (a conversion
    /// copies what another client may have written).
    fn set_raw_current_virtual_time(&mut self, value: &[u8]);
}
