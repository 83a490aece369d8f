//! The one forwarding of [`Store`] onto a [`MemoryStore`]: a native queue's
//! open key and a scoped store in the core's tests both reach one value,
//! differing only in how ([`ValueAccess`]): whether the value exists yet,
//! and what a write notes.

use super::memory::MemoryStore;
use crate::store::{HashKey, HashPage, QueueKey, Record, Scope, Store, StoreError, ZsetKey};

/// How a call reaches its one [`MemoryStore`], key by key: every [`Store`]
/// method is written once, over these three.
pub trait ValueAccess {
    /// The value to read `which` in; None when there is none yet (reads as
    /// empty).
    fn read(&mut self, which: QueueKey) -> Option<&mut MemoryStore>;

    /// The value to write `which` in, made if there is none yet.
    fn write(&mut self, which: QueueKey) -> &mut MemoryStore;

    /// The value to remove from in `which`, if there is one: `remove` says
    /// whether it removed something, and only then is the call a write (as
    /// on the keys layout, where removing nothing changes nothing).
    fn remove<T: Default>(
        &mut self,
        which: QueueKey,
        remove: impl FnOnce(&mut MemoryStore) -> (T, bool),
    ) -> T;
}

impl<A: ValueAccess> Store for A {
    fn zscore(&mut self, key: ZsetKey, member: &[u8]) -> Option<f64> {
        self.read(key.into())?.zscore(key, member)
    }

    fn zadd(&mut self, key: ZsetKey, member: &[u8], score: f64) {
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

impl MemoryStore {
    /// This store as one operation sees it: any key the operation does not
    /// declare (or a write in a read-only one) panics, naming the key and
    /// the operation. The core's tests run each call through it.
    /// Adding to a key of the scope's `if_present` that is missing when it
    /// begins panics too (the keys layout leaves it closed).
    pub fn scoped(&mut self, scope: impl Into<Scope>) -> Scoped<'_> {
        let scope = scope.into();
        let missing = scope.missing(|key| self.holds(key));
        Scoped {
            store: self,
            scope,
            missing,
        }
    }
}

/// A [`MemoryStore`] scoped to one operation's declared keys
/// ([`MemoryStore::scoped`]).
pub struct Scoped<'a> {
    store: &'a mut MemoryStore,
    scope: Scope,
    /// The keys of `scope.if_present` missing when it began
    /// ([`Scope::missing`]).
    missing: u64,
}

impl ValueAccess for Scoped<'_> {
    fn read(&mut self, which: QueueKey) -> Option<&mut MemoryStore> {
        Some(self.check(which, false))
    }

    fn write(&mut self, which: QueueKey) -> &mut MemoryStore {
        assert!(
            self.missing & which.bit() == 0,
            "{}",
            self.scope.refusal_to_add(which)
        );
        self.check(which, true)
    }

    fn remove<T: Default>(
        &mut self,
        which: QueueKey,
        remove: impl FnOnce(&mut MemoryStore) -> (T, bool),
    ) -> T {
        remove(self.check(which, true)).0
    }
}

impl Scoped<'_> {
    fn check(&mut self, key: QueueKey, write: bool) -> &mut MemoryStore {
        assert!(
            self.scope.allows(key, write),
            "{}",
            self.scope.refusal(key, write)
        );
        self.store
    }
}
