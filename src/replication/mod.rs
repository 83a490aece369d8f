//! Replication: what a call propagates to replicas and the AOF, and how a
//! replica or an AOF load redoes it.
//!
//! - `replay`: `VTRR.APPLY`, the deterministic form of a time-dependent
//!   call (the clock reading and tokens it used), both directions.
//! - `effects`: the propagation itself (`RedisModule_Replicate`), as sent,
//!   as `VTRR.APPLY`, as key effects, or as a native queue's `LOAD` chunk.

pub mod effects;
pub mod replay;
