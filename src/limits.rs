//! Every bound on a command argument, in one place: the parsers check
//! against these and `error` formats its messages from them.

/// The largest item weight.
pub const MAX_WEIGHT: i64 = 1_000_000_000;
/// The longest lease: ten years. Longer leases are a mistake, not a plan.
pub const MAX_LEASE_MS: i64 = 315_360_000_000;
/// The longest BLOCK timeout: a year (0 already means forever). Redis keeps
/// it as a signed 64-bit deadline in milliseconds.
pub const MAX_BLOCK_MS: i64 = 31_536_000_000;
