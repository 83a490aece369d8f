//! The runner every operation goes through ([`Call`]), and what an
//! operation says of its outcome ([`Done`]): its events, counts, what the
//! timer must watch, and how it propagates.

use std::ffi::CStr;
use std::sync::atomic::AtomicU64;

use redis_module::{Context, RedisError};
use smallvec::SmallVec;

use crate::config::{Layout, Replication};
use crate::core::{Anomaly, CoreError, CoreOp, Due};
use crate::layout::open::{Caller, OpenError, Propagate};
use crate::layout::{QueueStore, Wakeup};
use crate::replication::effects::ApplyArgs;
use crate::replication::replay::{Apply, Operation};
use crate::server::log_warning;
use crate::store::QueueKey;
use crate::text::Quoted;
use crate::{config, error, info, watch};

/// The event of a call that leased nothing: what it did to due items.
pub(super) fn due_event(due: &Due) -> &'static CStr {
    if due.reclaimed > 0 {
        c"vtrr.reclaim"
    } else if due.promoted > 0 {
        c"vtrr.promote"
    } else if due.refilled > 0 {
        c"vtrr.refill"
    } else if due.fired > 0 {
        c"vtrr.fire"
    } else if due.dead_lettered > 0 {
        DEAD_EVENT
    } else {
        // Only items of paused or capped partitions moved to `held`.
        c"vtrr.hold"
    }
}

pub(super) const DEAD_EVENT: &CStr = c"vtrr.dead";

/// What is an operation's own, read from its outcome: the keyspace events
/// of a call that changed something, what it counts, watches and logs.
pub(super) struct Done<'a> {
    /// Fired on `vtrr:<name>:queue` when the call changed something.
    pub(super) event: &'static CStr,
    /// Fired before `event`: what a LEASE's first step put back in the
    /// queue, items a call dead-lettered.
    pub(super) before: SmallVec<[&'static CStr; 3]>,
    /// Wake clients blocked on the queue after the commit.
    pub(super) signal_ready: bool,
    /// INFO counters to add to.
    pub(super) counts: SmallVec<[(&'static AtomicU64, u64); 2]>,
    /// What the call did to due items: counted and logged.
    pub(super) due: Option<&'a Due>,
    /// Anomalies the outcome carries (beside those the core pushed).
    pub(super) anomalies: &'a [Anomaly],
    /// Times something of the queue falls due, for the timer.
    pub(super) watch: SmallVec<[i64; 2]>,
    /// A schedule's next run, which the timer wakes for.
    pub(super) run: Option<i64>,
    /// The timer rereads when the queue next falls due (read-only): a
    /// control change may have started a parking that outlasts the call.
    pub(super) recheck: bool,
}

impl<'a> Done<'a> {
    pub(super) fn new(event: &'static CStr) -> Self {
        Done {
            event,
            before: SmallVec::new(),
            signal_ready: false,
            counts: SmallVec::new(),
            due: None,
            anomalies: &[],
            watch: SmallVec::new(),
            run: None,
            recheck: false,
        }
    }

    pub(super) fn event(self, event: &'static CStr) -> Self {
        Done { event, ..self }
    }

    pub(super) fn before(mut self, event: &'static CStr) -> Self {
        self.before.push(event);
        self
    }

    pub(super) fn count(mut self, counter: &'static AtomicU64, n: u64) -> Self {
        self.counts.push((counter, n));
        self
    }

    pub(super) fn watch(mut self, due_ms: i64) -> Self {
        self.watch.push(due_ms);
        self
    }

    pub(super) fn run(self, run_ms: i64) -> Self {
        Done {
            run: Some(run_ms),
            ..self
        }
    }

    pub(super) fn recheck(self) -> Self {
        Done {
            recheck: true,
            ..self
        }
    }

    pub(super) fn anomalies(self, anomalies: &'a [Anomaly]) -> Self {
        Done { anomalies, ..self }
    }

    /// Counts and logs what the call did to due items, and fires
    /// `vtrr.dead` before its own event when it dead-lettered any.
    pub(super) fn due(mut self, due: &'a Due) -> Self {
        if due.dead_lettered > 0 && self.event != DEAD_EVENT {
            self.before.push(DEAD_EVENT);
        }
        self.due = Some(due);
        self
    }
}

/// The `A` of a call that propagates no `VTRR.APPLY`.
pub(super) type Unused<T> = fn(&T) -> Option<ApplyArgs>;

/// `VTRR.APPLY` of `operation` on `queue` as run at `now_ms`.
pub(super) fn apply(queue: &[u8], now_ms: i64, operation: Operation<'_>) -> ApplyArgs {
    let mut args = ApplyArgs::default();
    Apply { now_ms, operation }.write_args(queue, |arg| args.push(arg));
    args
}

/// Why a call did nothing.
pub(super) enum Refused {
    Open(OpenError),
    Core(CoreError),
}

/// One call of an operation on one queue, by a client or by the server
/// itself (the timer).
pub(super) struct Call<'a> {
    ctx: &'a Context,
    queue: &'a [u8],
    caller: Caller,
}

impl<'a> Call<'a> {
    pub(super) fn client(ctx: &'a Context, queue: &'a [u8]) -> Self {
        Call {
            ctx,
            queue,
            caller: Caller::Client,
        }
    }

    pub(super) fn server(ctx: &'a Context, queue: &'a [u8]) -> Self {
        Call {
            ctx,
            queue,
            caller: Caller::Server,
        }
    }

    /// A deterministic write ([`Propagate::Verbatim`]).
    pub(super) fn verbatim<T>(
        &self,
        op: CoreOp,
        core: impl FnOnce(&mut QueueStore<'_>, &mut Vec<Anomaly>) -> Result<T, CoreError>,
        done: impl FnOnce(&T) -> Done<'_>,
    ) -> Result<T, RedisError> {
        let replicate = Propagate::<Unused<T>>::Verbatim;
        self.run(op, replicate, core, done)
            .map_err(|e| self.error(e))
    }

    /// A time-dependent write ([`Propagate::Apply`]); `apply` makes its
    /// `VTRR.APPLY` ([`apply`]) from its outcome.
    pub(super) fn applied<T>(
        &self,
        op: CoreOp,
        apply: impl FnOnce(&T) -> ApplyArgs,
        core: impl FnOnce(&mut QueueStore<'_>, &mut Vec<Anomaly>) -> Result<T, CoreError>,
        done: impl FnOnce(&T) -> Done<'_>,
    ) -> Result<T, RedisError> {
        self.clocked(op, |value| Some(apply(value)), core, done)
    }

    /// A write that may read the clock ([`Propagate::Apply`]): `apply`
    /// makes its `VTRR.APPLY` from its outcome, or none when the outcome
    /// shows it read none (then it propagates as sent).
    pub(super) fn clocked<T>(
        &self,
        op: CoreOp,
        apply: impl FnOnce(&T) -> Option<ApplyArgs>,
        core: impl FnOnce(&mut QueueStore<'_>, &mut Vec<Anomaly>) -> Result<T, CoreError>,
        done: impl FnOnce(&T) -> Done<'_>,
    ) -> Result<T, RedisError> {
        let replicate = Propagate::Apply(apply);
        self.run(op, replicate, core, done)
            .map_err(|e| self.error(e))
    }

    /// A write that propagates its effects ([`Propagate::Effects`]).
    pub(super) fn effects<T>(
        &self,
        op: CoreOp,
        core: impl FnOnce(&mut QueueStore<'_>, &mut Vec<Anomaly>) -> Result<T, CoreError>,
        done: impl FnOnce(&T) -> Done<'_>,
    ) -> Result<T, RedisError> {
        let replicate = Propagate::<Unused<T>>::Effects;
        self.run(op, replicate, core, done)
            .map_err(|e| self.error(e))
    }

    /// A call that only reads: opens the keys `op` declares for reading,
    /// runs `core`, logs its anomalies.
    pub(super) fn read<T>(
        &self,
        op: CoreOp,
        core: impl FnOnce(&mut QueueStore<'_>, &mut Vec<Anomaly>) -> Result<T, CoreError>,
    ) -> Result<T, RedisError> {
        debug_assert!(!op.writes(), "{op:?} writes");
        let mut store = self
            .open(op, false)
            .map_err(|e| self.error(Refused::Open(e)))?;
        let mut anomalies = Vec::new();
        let value = core(&mut store, &mut anomalies).map_err(|e| self.error(Refused::Core(e)));
        drop(store);
        self.log_anomalies(&anomalies);
        value
    }

    /// The runner of every writing call: opens the keys of the queue that
    /// `op` declares, runs `core` on them, and — when it changed something
    /// — fires the events, propagates as `replicate` says, signals the
    /// changed keys and wakes blocked clients as the call's [`Done`] says;
    /// then logs anomalies, counts and watches.
    pub(super) fn run<T, A>(
        &self,
        op: CoreOp,
        replicate: Propagate<A>,
        core: impl FnOnce(&mut QueueStore<'_>, &mut Vec<Anomaly>) -> Result<T, CoreError>,
        done: impl FnOnce(&T) -> Done<'_>,
    ) -> Result<T, Refused>
    where
        A: FnOnce(&T) -> Option<ApplyArgs>,
    {
        let effects = match (config::replication(), &replicate) {
            (Replication::effects, _) | (_, Propagate::Effects) => true,
            (Replication::commands, Propagate::Verbatim | Propagate::Apply(_)) => false,
        };
        let mut store = self.open(op, effects).map_err(Refused::Open)?;
        // A native queue propagates as commands in either mode (its value
        // has no effects to replay): a time-dependent call as VTRR.APPLY.
        let effects = effects && store.layout() == Layout::keys;
        let mut anomalies = Vec::new();
        let value = core(&mut store, &mut anomalies).map_err(Refused::Core)?;
        let done = done(&value);
        if store.changed() {
            for event in &done.before {
                store.notify(event);
            }
            store.commit(done.event, || match replicate {
                _ if effects => Propagate::Effects,
                Propagate::Apply(apply) => {
                    apply(&value).map_or(Propagate::Verbatim, Propagate::Apply)
                }
                Propagate::Verbatim => Propagate::Verbatim,
                Propagate::Effects => Propagate::Effects,
            });
        }
        // Also when nothing changed: a token of the queue's rate came due.
        if done.signal_ready {
            store.signal(Wakeup::Ready);
        }
        if store.wrote(QueueKey::Results) || store.wrote(QueueKey::Dead) {
            store.signal(Wakeup::Finished);
        }
        // A partition's next token came to be listed or moved: the timer
        // reads when the queue next falls due.
        let recheck = done.recheck || store.wrote(QueueKey::Throttled);
        drop(store);
        self.log_anomalies(&anomalies);
        self.log_anomalies(done.anomalies);
        if let Some(due) = done.due {
            self.log_anomalies(&due.anomalies);
            info::add(&info::RECLAIMED, due.reclaimed);
            info::add(&info::PROMOTED, due.promoted);
            info::add(&info::SCHEDULE_RUNS, due.fired);
            info::add(&info::DEAD_LETTERED, due.dead_lettered);
        }
        for (counter, n) in done.counts {
            info::add(counter, n);
        }
        for due_ms in done.watch {
            watch::due_at(self.ctx, self.queue, due_ms);
        }
        if let Some(run_ms) = done.run {
            watch::run_at(self.ctx, self.queue, run_ms);
        }
        if recheck {
            watch::recheck(self.ctx, self.queue);
        }
        Ok(value)
    }

    /// Opens the keys of the queue that `op` declares, recording its writes
    /// as effects when it will propagate them.
    pub(super) fn open(&self, op: CoreOp, effects: bool) -> Result<QueueStore<'a>, OpenError> {
        QueueStore::open(self.ctx, self.queue, op.into(), self.caller, effects)
    }

    /// The error reply: a wrong type, a denied key, a moving slot, or what
    /// the core refused.
    pub(super) fn error(&self, refused: Refused) -> RedisError {
        match refused {
            Refused::Open(e) => error::open(&e),
            Refused::Core(e) => {
                if let CoreError::PartitionFull { refused, .. } = e {
                    info::add(&info::REFUSED_FULL, refused);
                }
                error::core(&e, self.queue)
            }
        }
    }

    /// Logs what an operation repaired in keys written by other clients.
    pub(super) fn log_anomalies(&self, anomalies: &[Anomaly]) {
        if anomalies.is_empty() {
            return;
        }
        let queue = Quoted(self.queue);
        for anomaly in anomalies {
            log_warning(self.ctx, &format!("vtrr: queue {queue}: {anomaly}"));
        }
    }
}
