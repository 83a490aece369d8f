//! In-memory twin of the Redis store, for unit and property tests of the core.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{HashKey, HashPage, QueueKey, Scope, Store, StoreError, ZsetKey};

/// A score with the total order Redis uses for finite doubles.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Score(f64);
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[derive(Default, Debug, Clone)]
struct Zset {
    by_member: HashMap<Vec<u8>, f64>,
    ordered: BTreeSet<(Score, Vec<u8>)>,
}

/// One queue's keys as plain collections.
#[derive(Default, Debug, Clone)]
pub struct MemoryStore {
    zsets: BTreeMap<ZsetKey, Zset>,
    hashes: BTreeMap<HashKey, BTreeMap<Vec<u8>, Vec<u8>>>,
    current_virtual_time: Option<Vec<u8>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the raw string, as another client could.
    pub fn set_raw_current_virtual_time(&mut self, value: &[u8]) {
        self.current_virtual_time = Some(value.to_vec());
    }

    /// All members of a sorted set in order, for assertions.
    pub fn zset_entries(&self, key: ZsetKey) -> Vec<(Vec<u8>, f64)> {
        self.zsets
            .get(&key)
            .map(|z| z.ordered.iter().map(|(s, m)| (m.clone(), s.0)).collect())
            .unwrap_or_default()
    }

    /// This store as one operation sees it: any key the operation does not
    /// declare (or a write in a read-only one) panics, naming the key and
    /// the operation. The core's tests run each call through it.
    pub fn scoped(&mut self, scope: impl Into<Scope>) -> Scoped<'_> {
        Scoped {
            store: self,
            scope: scope.into(),
        }
    }

    /// All fields of a hash, for assertions.
    pub fn hash_entries(&self, key: HashKey) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.hashes.get(&key).cloned().unwrap_or_default()
    }
}

impl Store for MemoryStore {
    fn zscore(&mut self, key: ZsetKey, member: &[u8]) -> Option<f64> {
        self.zsets.get(&key)?.by_member.get(member).copied()
    }

    fn zadd(&mut self, key: ZsetKey, member: &[u8], score: f64) {
        let zset = self.zsets.entry(key).or_default();
        if let Some(old) = zset.by_member.insert(member.to_vec(), score) {
            zset.ordered.remove(&(Score(old), member.to_vec()));
        }
        zset.ordered.insert((Score(score), member.to_vec()));
    }

    fn zrem(&mut self, key: ZsetKey, member: &[u8]) -> bool {
        let Some(zset) = self.zsets.get_mut(&key) else {
            return false;
        };
        let Some(old) = zset.by_member.remove(member) else {
            return false;
        };
        zset.ordered.remove(&(Score(old), member.to_vec()));
        if zset.by_member.is_empty() {
            self.zsets.remove(&key);
        }
        true
    }

    fn zfirst(&mut self, key: ZsetKey) -> Option<(Vec<u8>, f64)> {
        let (score, member) = self.zsets.get(&key)?.ordered.first()?;
        Some((member.clone(), score.0))
    }

    fn zrange_upto(&mut self, key: ZsetKey, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)> {
        let Some(zset) = self.zsets.get(&key) else {
            return Vec::new();
        };
        zset.ordered
            .iter()
            .take_while(|(s, _)| s.0 <= max)
            .take(limit)
            .map(|(s, m)| (m.clone(), s.0))
            .collect()
    }

    fn zrange_above(
        &mut self,
        key: ZsetKey,
        above: f64,
        max: f64,
        limit: usize,
    ) -> Vec<(Vec<u8>, f64)> {
        let Some(zset) = self.zsets.get(&key) else {
            return Vec::new();
        };
        zset.ordered
            .iter()
            .skip_while(|(s, _)| s.0 <= above)
            .take_while(|(s, _)| s.0 <= max)
            .take(limit)
            .map(|(s, m)| (m.clone(), s.0))
            .collect()
    }

    fn zfirst_from(&mut self, key: ZsetKey, from: &[u8]) -> Option<Vec<u8>> {
        let zset = self.zsets.get(&key)?;
        let (_, member) = zset.ordered.range((Score(0.0), from.to_vec())..).next()?;
        Some(member.clone())
    }

    fn zcard(&mut self, key: ZsetKey) -> u64 {
        self.zsets.get(&key).map_or(0, |z| z.by_member.len() as u64)
    }

    fn zcount_upto(&mut self, key: ZsetKey, max: f64) -> Result<u64, StoreError> {
        Ok(self.zrange_upto(key, max, usize::MAX).len() as u64)
    }

    fn hget(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>> {
        self.hashes.get(&key)?.get(field).cloned()
    }

    fn hset(&mut self, key: HashKey, field: &[u8], value: &[u8]) {
        self.hashes
            .entry(key)
            .or_default()
            .insert(field.to_vec(), value.to_vec());
    }

    fn hdel(&mut self, key: HashKey, field: &[u8]) {
        if let Some(hash) = self.hashes.get_mut(&key) {
            hash.remove(field);
            if hash.is_empty() {
                self.hashes.remove(&key);
            }
        }
    }

    fn hlen(&mut self, key: HashKey) -> u64 {
        self.hashes.get(&key).map_or(0, |h| h.len() as u64)
    }

    fn hfields(&mut self, key: HashKey) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(self
            .hashes
            .get(&key)
            .map(|h| h.keys().cloned().collect())
            .unwrap_or_default())
    }

    fn hscan(&mut self, key: HashKey, cursor: u64, count: usize) -> Result<HashPage, StoreError> {
        // The cursor is a position in field order; enough for tests.
        let Some(hash) = self.hashes.get(&key) else {
            return Ok((0, Vec::new()));
        };
        let start = cursor as usize;
        let page: Vec<_> = hash
            .iter()
            .skip(start)
            .take(count.max(1))
            .map(|(f, v)| (f.clone(), v.clone()))
            .collect();
        let next = start + page.len();
        Ok((if next >= hash.len() { 0 } else { next as u64 }, page))
    }

    fn delete(&mut self, key: HashKey) {
        self.hashes.remove(&key);
    }

    fn current_virtual_time(&mut self) -> Option<Vec<u8>> {
        self.current_virtual_time.clone()
    }

    fn set_current_virtual_time(&mut self, value: i64) {
        self.current_virtual_time = Some(itoa::Buffer::new().format(value).as_bytes().to_vec());
    }
}

/// A [`MemoryStore`] scoped to one operation's declared keys
/// ([`MemoryStore::scoped`]).
pub struct Scoped<'a> {
    store: &'a mut MemoryStore,
    scope: Scope,
}

impl Scoped<'_> {
    fn reading(&mut self, key: impl Into<QueueKey>) -> &mut MemoryStore {
        self.check(key.into(), false)
    }

    fn writing(&mut self, key: impl Into<QueueKey>) -> &mut MemoryStore {
        self.check(key.into(), true)
    }

    fn check(&mut self, key: QueueKey, write: bool) -> &mut MemoryStore {
        assert!(
            self.scope.allows(key, write),
            "{}",
            self.scope.refusal(key, write)
        );
        self.store
    }
}

impl Store for Scoped<'_> {
    fn zscore(&mut self, key: ZsetKey, member: &[u8]) -> Option<f64> {
        self.reading(key).zscore(key, member)
    }

    fn zadd(&mut self, key: ZsetKey, member: &[u8], score: f64) {
        self.writing(key).zadd(key, member, score)
    }

    fn zrem(&mut self, key: ZsetKey, member: &[u8]) -> bool {
        self.writing(key).zrem(key, member)
    }

    fn zfirst(&mut self, key: ZsetKey) -> Option<(Vec<u8>, f64)> {
        self.reading(key).zfirst(key)
    }

    fn zrange_upto(&mut self, key: ZsetKey, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)> {
        self.reading(key).zrange_upto(key, max, limit)
    }

    fn zrange_above(
        &mut self,
        key: ZsetKey,
        above: f64,
        max: f64,
        limit: usize,
    ) -> Vec<(Vec<u8>, f64)> {
        self.reading(key).zrange_above(key, above, max, limit)
    }

    fn zfirst_from(&mut self, key: ZsetKey, from: &[u8]) -> Option<Vec<u8>> {
        self.reading(key).zfirst_from(key, from)
    }

    fn zcard(&mut self, key: ZsetKey) -> u64 {
        self.reading(key).zcard(key)
    }

    fn zcount_upto(&mut self, key: ZsetKey, max: f64) -> Result<u64, StoreError> {
        self.reading(key).zcount_upto(key, max)
    }

    fn hget(&mut self, key: HashKey, field: &[u8]) -> Option<Vec<u8>> {
        self.reading(key).hget(key, field)
    }

    fn hset(&mut self, key: HashKey, field: &[u8], value: &[u8]) {
        self.writing(key).hset(key, field, value)
    }

    fn hdel(&mut self, key: HashKey, field: &[u8]) {
        self.writing(key).hdel(key, field)
    }

    fn hlen(&mut self, key: HashKey) -> u64 {
        self.reading(key).hlen(key)
    }

    fn hfields(&mut self, key: HashKey) -> Result<Vec<Vec<u8>>, StoreError> {
        self.reading(key).hfields(key)
    }

    fn hscan(&mut self, key: HashKey, cursor: u64, count: usize) -> Result<HashPage, StoreError> {
        self.reading(key).hscan(key, cursor, count)
    }

    fn delete(&mut self, key: HashKey) {
        self.writing(key).delete(key)
    }

    fn current_virtual_time(&mut self) -> Option<Vec<u8>> {
        self.reading(QueueKey::CurrentVirtualTime)
            .current_virtual_time()
    }

    fn set_current_virtual_time(&mut self, value: i64) {
        self.writing(QueueKey::CurrentVirtualTime)
            .set_current_virtual_time(value)
    }
}
