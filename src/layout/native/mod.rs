//! The `native` layout: a whole queue in one key of the module's type,
//! `vtrrqueue`, whose value is a [`MemoryStore`](crate::engine::memory::MemoryStore).
//! It lives at the name the keys layout gives its `queue` sorted set,
//! `vtrr:<name>:queue`, so:
//!
//! - one key open tells a call which layout a queue has (a sorted set there
//!   is the keys layout, a `vtrrqueue` the native one), and no queue can be
//!   both: a Lua script of the keys layout gets WRONGTYPE from it;
//! - keyspace events, WATCH, blocked leases and the ACL key `vtrr:<name>:*`
//!   name the same key in both layouts; a cluster routes it by the queue's
//!   hash tag as before.
//!
//! `store` runs the core on that value; `data_type` is the type and its
//! callbacks (RDB, AOF rewrite, DUMP/RESTORE, COPY, MEMORY USAGE, DEBUG
//! DIGEST, lazy free, defrag) and `VTRR.LOAD`; `encoding` the persisted
//! form both write.

mod data_type;
pub mod encoding;
mod store;

pub(crate) use data_type::{found_at, Found};
pub use data_type::{load_chunk, LoadError, QUEUE_TYPE};
pub use store::NativeStore;
