//! Every bound on a command argument, in one place: the parsers check
//! against these and `error` formats its messages from them.

/// The largest item weight.
pub const MAX_WEIGHT: i64 = 1_000_000_000;
/// The longest lease: ten years. Longer leases are a mistake, not a plan.
pub const MAX_LEASE_MS: i64 = 315_360_000_000;
/// The longest BLOCK timeout: a year (0 already means forever). Redis keeps
/// it as a signed 64-bit deadline in milliseconds.
pub const MAX_BLOCK_MS: i64 = 31_536_000_000;
/// The longest delay (DEFER, NACK ... DELAY): ten years, as a lease.
pub const MAX_DELAY_MS: i64 = MAX_LEASE_MS;
/// The largest dead-letter policy limit (MAX-TIMEOUTS, MAX-NACKS).
pub const MAX_POLICY_LIMIT: i64 = 1_000_000_000;
/// The longest `REASON` of `VTRR.NACK`, in bytes: a one-line summary and
/// the end of a traceback fit; each failed item keeps one.
pub const MAX_REASON_BYTES: usize = 4096;
/// How many dead items `VTRR.DEAD` lists without COUNT.
pub const DEAD_DEFAULT_COUNT: usize = 10;
/// The largest per-partition cap (CONCURRENCY, DEFAULT-CONCURRENCY).
pub const MAX_COUNT_LIMIT: i64 = 1_000_000_000;
/// The largest share.
pub const MAX_SHARE: i64 = 1_000_000;
/// The largest RATE and BURST, in weight units (as a weight).
pub const MAX_RATE: i64 = 1_000_000_000;
/// The longest PER of a rate: a day (the bucket counts token-milliseconds
/// in 64 bits: a full one is at most `MAX_RATE * MAX_RATE_PER_MS`).
pub const MAX_RATE_PER_MS: i64 = 86_400_000;
/// How many partitions `VTRR.PARTITIONS` asks HSCAN for without COUNT.
pub const PARTITIONS_DEFAULT_COUNT: usize = 10;
/// The largest COUNT of `VTRR.PARTITIONS`: one call's work stays bounded.
pub const MAX_PARTITIONS_COUNT: i64 = 10_000;
/// The deepest page of `VTRR.PARTITIONS ... TOP` (on a native queue a call
/// walks past `OFFSET` entries: this bounds its work; the cursor form lists
/// the rest).
pub const MAX_TOP_OFFSET: i64 = 100_000;
/// The longest `EVERY` period of a schedule: a year.
pub const MAX_PERIOD_MS: i64 = 365 * 86_400_000;
/// The longest cron pattern of a schedule.
pub const MAX_CRON_LEN: usize = 256;
/// How many schedules `VTRR.SCHEDULES` asks HSCAN for without COUNT.
pub const SCHEDULES_DEFAULT_COUNT: usize = 10;
/// The largest COUNT and RUNS of `VTRR.SCHEDULES`: a cron run is a search
/// of about 20 µs, so one call's work stays within milliseconds.
pub const MAX_SCHEDULES_COUNT: i64 = 100;
pub const MAX_SCHEDULE_RUNS: i64 = 20;

/// The largest result a worker may hand back (`VTRR.ACKRESULT`): a result
/// is kept for the queue's RESULT-TTL, so one finished job cannot hold more
/// memory than this beyond its payload.
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;

/// The longest RESULT-TTL and DEDUP-MS: 30 days.
pub const MAX_KEEP_MS: i64 = 30 * 86_400_000;
