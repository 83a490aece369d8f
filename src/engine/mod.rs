//! The queue engine: one queue's keys as plain collections in memory
//! ([`memory::MemoryStore`], a [`Store`](crate::store::Store)). It is the
//! value of a native queue (`crate::layout::native`), the core's test twin,
//! and what VTRR.CONVERT carries between layouts; `defrag` walks it for the
//! server's active defrag, `value_access` forwards the `Store` onto it.

pub mod defrag;
mod hash;
mod items;
pub mod memory;
mod order;
pub mod thin;
pub mod value_access;
mod zset;
