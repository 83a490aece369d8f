//! Module configs (`vtrr.<name>`), settable as loadmodule arguments, in
//! redis.conf and with CONFIG SET. Bounds live beside the values they bound.

use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};

use redis_module::configuration::{ConfigurationContext, ConfigurationValue};
use redis_module::RedisError;
use std::time::Duration;

pub const RECLAIM_INTERVAL_MS_DEFAULT: i64 = 1000;
pub const RECLAIM_INTERVAL_MS_MIN: i64 = 0; // 0 turns the timer off
pub const RECLAIM_INTERVAL_MS_MAX: i64 = 3_600_000;
/// `vtrr.reclaim-interval-ms`: period of the timer while it finds nothing
/// left over.
pub static RECLAIM_INTERVAL_MS: AtomicI64 = AtomicI64::new(RECLAIM_INTERVAL_MS_DEFAULT);

pub const RECLAIM_BATCH_DEFAULT: i64 = 16;
pub const RECLAIM_BATCH_MIN: i64 = 1;
pub const RECLAIM_BATCH_MAX: i64 = 1_000_000;
/// `vtrr.reclaim-batch`: most due items (expired leases, due delayed items)
/// one LEASE acts on before it pops, and the chunk the timer takes from one
/// queue between two looks at its time budget. At about 10 µs an item, the
/// default keeps both well under a millisecond.
pub static RECLAIM_BATCH: AtomicI64 = AtomicI64::new(RECLAIM_BATCH_DEFAULT);

pub const TIMER_BUDGET_US_DEFAULT: i64 = 1000;
pub const TIMER_BUDGET_US_MIN: i64 = 1;
pub const TIMER_BUDGET_US_MAX: i64 = 1_000_000;
/// `vtrr.timer-budget-us`: how long one timer run may work before it stops;
/// while work is left it runs again after `RESUME_MS`, as Redis's active
/// expiry comes back soon instead of waiting a whole period.
pub static TIMER_BUDGET_US: AtomicI64 = AtomicI64::new(TIMER_BUDGET_US_DEFAULT);

pub fn reclaim_interval_ms() -> i64 {
    RECLAIM_INTERVAL_MS.load(Ordering::Relaxed)
}

pub fn reclaim_batch() -> usize {
    RECLAIM_BATCH.load(Ordering::Relaxed).max(1) as usize
}

pub fn timer_budget() -> Duration {
    Duration::from_micros(TIMER_BUDGET_US.load(Ordering::Relaxed).max(1) as u64)
}

redis_module::enum_configuration! {
    /// `vtrr.replication`: what a write propagates to replicas and the AOF.
    #[allow(non_camel_case_types)]
    #[derive(PartialEq, Eq, Debug)]
    pub enum Replication {
        /// One command per call: ACK as sent, ENQUEUE (which starts a
        /// partition's wait) and the time-dependent
        /// calls as `VTRR.APPLY` with the clock reading, limit and tokens
        /// they used. Replicas and AOF loading need the module.
        commands = 0,
        /// The plain writes (ZADD, HSET, ...): replicas and AOF files load
        /// without the module.
        effects = 1,
    }
}

/// Where `vtrr.replication` lives: an atomic, read by every write.
pub struct ReplicationSetting(AtomicI32);

pub static REPLICATION: ReplicationSetting = ReplicationSetting(AtomicI32::new(0));
pub const REPLICATION_DEFAULT: Replication = Replication::commands;

impl ConfigurationValue<Replication> for ReplicationSetting {
    fn get(&self, _ctx: &ConfigurationContext) -> Replication {
        replication()
    }
    fn set(&self, _ctx: &ConfigurationContext, value: Replication) -> Result<(), RedisError> {
        self.0.store(value.into(), Ordering::Relaxed);
        Ok(())
    }
}

pub fn replication() -> Replication {
    Replication::try_from(REPLICATION.0.load(Ordering::Relaxed)).unwrap_or(REPLICATION_DEFAULT)
}

/// Its own module: the macro imports a name that `Replication`'s also does.
mod layout {
    redis_module::enum_configuration! {
        /// A queue's layout (`vtrr.default-layout` is that of queues created
        /// from now on; VTRR.CONVERT moves one that exists).
        #[allow(non_camel_case_types)]
        #[derive(PartialEq, Eq, Debug, Copy)]
        pub enum Layout {
            /// vtrr-queue's keys plus the module's own: Lua scripts can
            /// share the queue.
            keys = 0,
            /// One key of the module's type, `vtrr:<name>:queue`.
            native = 1,
        }
    }
}
pub use layout::Layout;

impl Layout {
    /// Its name, as `vtrr.default-layout`, VTRR.CONVERT and VTRR.STATS
    /// spell it.
    pub fn name(self) -> String {
        let (names, values) = self.get_options();
        let at = values.iter().position(|&value| value == self as i32);
        at.map(|at| names[at].clone()).unwrap_or_default()
    }

    /// The layout named `given`, in any case.
    pub fn named(given: &[u8]) -> Option<Layout> {
        let (names, values) = Layout::keys.get_options();
        let at = names
            .iter()
            .position(|name| name.as_bytes().eq_ignore_ascii_case(given))?;
        Layout::try_from(values[at]).ok()
    }
}

/// Where `vtrr.default-layout` lives.
pub struct LayoutSetting(AtomicI32);

pub static DEFAULT_LAYOUT: LayoutSetting = LayoutSetting(AtomicI32::new(0));
pub const DEFAULT_LAYOUT_DEFAULT: Layout = Layout::keys;

impl ConfigurationValue<Layout> for LayoutSetting {
    fn get(&self, _ctx: &ConfigurationContext) -> Layout {
        default_layout()
    }
    fn set(&self, _ctx: &ConfigurationContext, value: Layout) -> Result<(), RedisError> {
        self.0.store(value.into(), Ordering::Relaxed);
        Ok(())
    }
}

pub fn default_layout() -> Layout {
    Layout::try_from(DEFAULT_LAYOUT.0.load(Ordering::Relaxed)).unwrap_or(DEFAULT_LAYOUT_DEFAULT)
}

#[cfg(test)]
mod tests {
    use super::Layout;

    #[test]
    fn a_layout_is_named_as_its_setting_spells_it_in_any_case() {
        for layout in [Layout::keys, Layout::native] {
            assert_eq!(Layout::named(layout.name().as_bytes()), Some(layout));
            let upper = layout.name().to_uppercase();
            assert_eq!(Layout::named(upper.as_bytes()), Some(layout));
        }
        assert_eq!(Layout::native.name(), "native");
        assert_eq!(Layout::named(b"streams"), None);
        assert_eq!(Layout::named(b""), None);
    }
}
