//! The operations layer: what every caller — command handlers, the
//! blocked-client callback, the timer — goes through. One runner
//! ([`Call::run`]) serves every operation: it opens the keys the core
//! operation declares (`core::access`), runs the core, commits (keyspace
//! events, propagation, blocked clients), logs anomalies, counts INFO and
//! notes in the timer's index what it must watch ([`crate::watch`]).
//! Each operation says only what is its own: its core call and, from the
//! outcome, its [`Done`]. It knows nothing of how its callers parse or reply.

use redis_module::{Context, RedisError};

use crate::config::Layout;
use crate::core::key_view::KeyView;
use crate::core::partitions::Record;
use crate::core::{
    self, check, Ack, CoreError, CoreOp, DeadItem, Due, JobStatus, LeaseOutcome, LeaseRequest,
    Leased, Level, LimitChange, Nack, Nacked, NewItem, PartitionView, Policy, PolicyChange, Rank,
    Schedule, ScheduleView, Settled, Stats, Stop,
};
use crate::layout::convert::ConvertError;
use crate::layout::native::load_chunk;
use crate::layout::open::{OpenError, Propagate};
use crate::layout::{self, QueueStore};
use crate::replication::effects::replicate_verbatim;
use crate::replication::replay::{Apply, Operation};
use crate::server::log_warning;
use crate::server::{new_token, now_ms};
use crate::store::vocabulary;
use crate::store::QueueKey;
use crate::text::Quoted;
use crate::watch;
use crate::{error, info};

mod call;

use call::{apply, due_event, Call, Done, Refused, DEAD_EVENT};

/// When a time-dependent operation runs, and the lease tokens it draws: the
/// server's clock and fresh tokens, or the master's (`VTRR.APPLY`).
pub struct Moment<'a> {
    pub now_ms: i64,
    replayed_tokens: Option<&'a [&'a [u8]]>,
}

impl<'a> Moment<'a> {
    pub fn now() -> Moment<'static> {
        Moment {
            now_ms: now_ms(),
            replayed_tokens: None,
        }
    }

    /// As the master ran it: its clock reading and the tokens it drew.
    pub fn replayed(now_ms: i64, tokens: &'a [&'a [u8]]) -> Moment<'a> {
        Moment {
            now_ms,
            replayed_tokens: Some(tokens),
        }
    }
}

/// `VTRR.ENQUEUE`: the number of items added, at priority `level`.
pub fn enqueue(
    ctx: &Context,
    queue: &[u8],
    level: Level,
    items: &[NewItem<'_>],
) -> Result<u64, RedisError> {
    // The clock starts a partition's wait (its record's `waiting_since`):
    // a call that started one propagates as a DEFER due at that reading;
    // one that added only to lines already waiting, as sent.
    let now_ms = now_ms();
    let items_used = |outcome: &core::EnqueueOutcome| {
        outcome.started_waits.then(|| {
            let items = items.to_vec();
            apply(
                queue,
                now_ms,
                Operation::Defer {
                    due_ms: now_ms,
                    level,
                    items,
                },
            )
        })
    };
    let outcome = Call::client(ctx, queue).clocked(
        CoreOp::enqueue(level),
        items_used,
        |store, _| core::enqueue_at(store, now_ms, level, items),
        |outcome| {
            Done::new(c"vtrr.enqueue")
                .count(&info::ENQUEUED, outcome.added)
                .anomalies(&outcome.anomalies)
        },
    )?;
    Ok(outcome.added)
}

/// `VTRR.DEFER`: the number of items added, leasable at `due_ms`, at
/// priority `level`.
pub fn defer(
    ctx: &Context,
    queue: &[u8],
    at: &Moment,
    due_ms: i64,
    level: Level,
    items: &[NewItem<'_>],
) -> Result<u64, RedisError> {
    let now_ms = at.now_ms;
    let items_used = |_: &_| {
        let items = items.to_vec();
        apply(
            queue,
            now_ms,
            Operation::Defer {
                due_ms,
                level,
                items,
            },
        )
    };
    let outcome = Call::client(ctx, queue).applied(
        CoreOp::defer(level),
        items_used,
        |store, _| core::defer_at(store, now_ms, due_ms, level, items),
        |outcome| {
            let done = Done::new(c"vtrr.enqueue").anomalies(&outcome.anomalies);
            if due_ms <= now_ms {
                done.count(&info::ENQUEUED, outcome.added)
            } else if outcome.added > 0 {
                done.event(c"vtrr.defer")
                    .count(&info::DEFERRED, outcome.added)
                    .watch(due_ms)
            } else {
                done.event(c"vtrr.defer")
            }
        },
    )?;
    Ok(outcome.added)
}

/// What `VTRR.LEASE` did: for each (id, token) pair it settled first,
/// whether that lease was current and its item is done; then the leases.
pub struct Granted {
    pub acked: Vec<bool>,
    pub leased: Vec<Leased>,
}

/// What a `VTRR.LEASE` asks for, whenever it runs.
#[derive(Clone, Copy)]
pub struct LeaseAsk {
    pub lease_ms: i64,
    pub count: usize,
    /// How many due items (expired leases, due delayed items) it acts on
    /// first.
    pub due_limit: usize,
    pub with_counters: bool,
}

/// `VTRR.LEASE` (and a blocked lease's turn): finishes the leases of
/// `acks` (as `VTRR.ACK`), acts on due items, then leases up to
/// `ask.count` items now; no leases when nothing is queued.
pub fn lease(
    ctx: &Context,
    queue: &[u8],
    at: &Moment,
    ask: &LeaseAsk,
    acks: &[Ack<'_>],
) -> Result<Granted, RedisError> {
    let now_ms = at.now_ms;
    let LeaseAsk {
        lease_ms,
        count,
        due_limit,
        with_counters,
    } = *ask;
    let request = LeaseRequest {
        now_ms,
        lease_ms,
        count,
        due_limit,
        with_counters,
    };
    let tokens_used = |(settled, outcome): &(Settled, LeaseOutcome)| {
        let acked = &settled.took;
        let tokens = outcome.leased.iter().map(|l| l.token.as_slice()).collect();
        let operation = Operation::Lease {
            lease_ms,
            count,
            due_limit,
            tokens,
        };
        let mut args = apply(queue, now_ms, operation);
        if acked.contains(&true) {
            let took = acks.iter().zip(acked).filter(|(_, &took)| took);
            let took = took.map(|(ack, _)| ack);
            if settled.kept {
                // Recorded done at this call's time: replayed with it.
                let acks = Operation::Ack {
                    acks: took.copied().collect(),
                };
                args.apply_first(
                    queue,
                    &Apply {
                        now_ms,
                        operation: acks,
                    },
                );
            } else {
                args.ack_first(queue, took);
            }
        }
        args
    };
    // Acks end items' lives, which clears their last errors: only then is
    // `last_error` opened.
    let op = match acks {
        [] => CoreOp::Lease,
        _ => CoreOp::LeaseAcking,
    };
    let (settled, outcome) = Call::client(ctx, queue).applied(
        op,
        tokens_used,
        |store, anomalies| {
            let acked = core::ack_each(store, acks, now_ms, anomalies);
            let outcome = lease_drawing(ctx, queue, store, &request, at.replayed_tokens)?;
            Ok((acked, outcome))
        },
        |(settled, outcome)| {
            let acked = settled.finished();
            let mut done = if outcome.leased.is_empty() && acked == 0 {
                Done::new(due_event(&outcome.due))
            } else {
                let mut done = if outcome.leased.is_empty() {
                    Done::new(c"vtrr.ack")
                } else {
                    Done::new(c"vtrr.lease").watch(now_ms.saturating_add(lease_ms))
                };
                // What the first step put back in the queue, for dispatchers
                // that wake workers on these events.
                if outcome.due.reclaimed > 0 {
                    done.before.push(c"vtrr.reclaim");
                }
                if outcome.due.promoted > 0 {
                    done.before.push(c"vtrr.promote");
                }
                if outcome.due.refilled > 0 {
                    done.before.push(c"vtrr.refill");
                }
                done
            };
            if outcome.skipped_enough {
                // It stopped early: the timer goes on parking (a bounded
                // number per run), with no client traffic, and wakes blocked
                // clients when it has. (Signalling here would let a blocked
                // client's turns run back to back in one event-loop pass,
                // unbounded.)
                done = done.watch(now_ms);
            }
            if acked > 0 && !outcome.leased.is_empty() {
                done.before.insert(0, c"vtrr.ack");
            }
            match outcome.queue_stop {
                // The timer wakes blocked clients when the queue's next
                // token is due.
                Some(Stop::Starved { token_due }) => done = done.watch(token_due),
                // A slot it freed and did not fill is another's to take.
                None if settled.queue_room && outcome.leased.len() < count => {
                    done.signal_ready = true;
                }
                Some(Stop::Full) | None => {}
            }
            done.due(&outcome.due)
                .count(&info::LEASED, outcome.leased.len() as u64)
                .count(&info::ACKED, acked)
        },
    )?;
    Ok(Granted {
        acked: settled.took,
        leased: outcome.leased,
    })
}

/// `core::lease` with fresh tokens, or with the master's when replaying
/// (saying so in the log when the master leased another number of items).
fn lease_drawing(
    ctx: &Context,
    queue: &[u8],
    store: &mut QueueStore<'_>,
    request: &LeaseRequest,
    replayed_tokens: Option<&[&[u8]]>,
) -> Result<LeaseOutcome, CoreError> {
    let mut replayed = replayed_tokens.map(|tokens| tokens.iter());
    let mut diverged = false;
    let draw = || match replayed.as_mut() {
        None => new_token(),
        Some(tokens) => tokens.next().map(|t| t.to_vec()).unwrap_or_else(|| {
            diverged = true;
            new_token()
        }),
    };
    let outcome = core::lease(store, request, draw)?;
    if diverged || replayed.is_some_and(|mut left| left.next().is_some()) {
        log_warning(ctx, &format!(
            "vtrr: replaying a LEASE of queue {} leased {} items where the master leased another number: this server's copy differs from its master's",
            Quoted(queue),
            outcome.leased.len()
        ));
    }
    Ok(outcome)
}

/// `VTRR.ACK`, `VTRR.ACKCOST` and `VTRR.ACKRESULT`: the number of leases
/// whose token was current. On a queue that keeps outcomes the jobs are
/// recorded done at `at`'s time, so the call propagates with it.
pub fn ack(ctx: &Context, queue: &[u8], at: &Moment, acks: &[Ack<'_>]) -> Result<u64, RedisError> {
    let op = if acks.iter().any(|ack| ack.cost.is_some()) {
        CoreOp::AckCost
    } else {
        CoreOp::Ack
    };
    let now_ms = at.now_ms;
    let timed = |settled: &Settled| {
        let acks = acks.to_vec();
        settled
            .kept
            .then(|| apply(queue, now_ms, Operation::Ack { acks }))
    };
    Call::client(ctx, queue)
        .clocked(
            op,
            timed,
            |store, anomalies| Ok(core::ack_each(store, acks, now_ms, anomalies)),
            |settled| Done {
                // A slot of the queue's CONCURRENCY came free.
                signal_ready: settled.queue_room,
                ..Done::new(c"vtrr.ack").count(&info::ACKED, settled.finished())
            },
        )
        .map(|settled| settled.finished())
}

/// `VTRR.RENEW`: whether the token was current. The new expiry is watched:
/// a renewal may shorten a lease, and the index keeps the earliest time, so
/// a later expiry costs nothing.
pub fn renew(
    ctx: &Context,
    queue: &[u8],
    at: &Moment,
    lease: Ack<'_>,
    lease_ms: i64,
) -> Result<bool, RedisError> {
    let now_ms = at.now_ms;
    let expiry = now_ms.saturating_add(lease_ms);
    let op = match lease.cost {
        Some(_) => CoreOp::RenewCost,
        None => CoreOp::Renew,
    };
    Call::client(ctx, queue).applied(
        op,
        |_| {
            apply(
                queue,
                now_ms,
                Operation::Renew {
                    id: lease.id,
                    token: lease.token,
                    lease_ms,
                    cost: lease.cost,
                },
            )
        },
        |store, anomalies| Ok(core::renew(store, &lease, now_ms, lease_ms, anomalies)),
        |&renewed| match renewed {
            true => Done::new(c"vtrr.renew")
                .count(&info::RENEWED, 1)
                .watch(expiry),
            false => Done::new(c"vtrr.renew"),
        },
    )
}

/// `VTRR.NACK`: None when the token was stale (nothing changed), else
/// where the item went. A `reason` becomes the item's last error.
pub fn nack(
    ctx: &Context,
    queue: &[u8],
    at: &Moment,
    id: &[u8],
    token: &[u8],
    how: Nack,
    reason: Option<&[u8]>,
) -> Result<Option<Nacked>, RedisError> {
    let now_ms = at.now_ms;
    Call::client(ctx, queue).applied(
        CoreOp::Nack,
        |_| {
            let operation = Operation::Nack {
                id,
                token,
                how,
                reason,
            };
            apply(queue, now_ms, operation)
        },
        |store, anomalies| core::nack(store, id, token, now_ms, how, reason, anomalies),
        |nacked| {
            let done = Done::new(c"vtrr.nack");
            match nacked {
                None => done,
                Some(Nacked::Requeued) if how == Nack::Release => done.count(&info::RELEASED, 1),
                Some(Nacked::Requeued) => done.count(&info::NACKED, 1),
                // A slot freed and nothing requeued: blocked leases may go
                // on under the queue's CONCURRENCY (a nack that delays or
                // buries is rare enough to signal without asking).
                Some(Nacked::Delayed { due_ms }) => Done {
                    signal_ready: true,
                    ..done.count(&info::NACKED, 1).watch(*due_ms)
                },
                Some(Nacked::Dead(_)) => Done {
                    signal_ready: true,
                    ..done
                }
                .before(DEAD_EVENT)
                .count(&info::NACKED, 1)
                .count(&info::DEAD_LETTERED, 1),
            }
        },
    )
}

/// `VTRR.RECLAIM`: takes back up to `limit` leases of `queue` expired now.
pub fn reclaim(ctx: &Context, queue: &[u8], at: &Moment, limit: usize) -> Result<u64, RedisError> {
    let now_ms = at.now_ms;
    let due = Call::client(ctx, queue).applied(
        CoreOp::Reclaim,
        |_| apply(queue, now_ms, Operation::Reclaim { limit }),
        |store, _| core::reclaim(store, now_ms, limit),
        |due| Done::new(c"vtrr.reclaim").due(due),
    )?;
    Ok(due.reclaimed)
}

/// The timer's run on one queue (in the context's database): up to `limit`
/// items due at `now_ms`, expired leases first, then due delayed items. The
/// number of items acted on; None when the queue's slot is being migrated
/// (the timer leaves it alone until it has an owner).
pub fn run_due(
    ctx: &Context,
    queue: &[u8],
    now_ms: i64,
    limit: usize,
    schedule_steps: u32,
) -> Result<Option<Due>, RedisError> {
    let call = Call::server(ctx, queue);
    let due = call.run(
        CoreOp::RunDue,
        Propagate::Apply(|_: &_| {
            let operation = Operation::Due {
                limit,
                schedule_steps,
            };
            Some(apply(queue, now_ms, operation))
        }),
        |store, _| core::run_due(store, now_ms, limit, schedule_steps),
        |due| Done {
            // What it parked may have uncovered servable items; the queue's
            // limits may have room again.
            signal_ready: due.parked > 0 || due.queue_room,
            ..Done::new(due_event(due)).due(due)
        },
    );
    match due {
        Ok(due) => Ok(Some(due)),
        Err(Refused::Open(OpenError::SlotMoving)) => Ok(None),
        Err(refused) => Err(call.error(refused)),
    }
}

/// `VTRR.SCHEDULE`: the schedule's next run (Unix ms).
pub fn schedule(
    ctx: &Context,
    queue: &[u8],
    at: &Moment,
    name: &[u8],
    schedule: &Schedule,
) -> Result<i64, RedisError> {
    let now_ms = at.now_ms;
    let definition = schedule.encode();
    Call::client(ctx, queue).applied(
        CoreOp::Schedule,
        |_| {
            let definition = &definition;
            apply(queue, now_ms, Operation::Schedule { name, definition })
        },
        |store, _| core::schedule(store, now_ms, name, schedule),
        |&next| Done::new(c"vtrr.schedule").run(next),
    )
}

/// `VTRR.UNSCHEDULE`: how many of the schedules named there were.
pub fn unschedule(ctx: &Context, queue: &[u8], names: &[&[u8]]) -> Result<u64, RedisError> {
    Call::client(ctx, queue).verbatim(
        CoreOp::Unschedule,
        |store, _| Ok(core::unschedule(store, names)),
        |_| Done::new(c"vtrr.unschedule"),
    )
}

/// `VTRR.SCHEDULES` by cursor: the next cursor and a page of schedules.
pub fn schedules_page(
    ctx: &Context,
    queue: &[u8],
    cursor: u64,
    count: usize,
    runs: usize,
) -> Result<(u64, Vec<ScheduleView>), RedisError> {
    Call::client(ctx, queue).read(CoreOp::Schedules, |store, _| {
        core::schedules_page(store, cursor, count, runs)
    })
}

/// `VTRR.SCHEDULES ... SCHEDULE <schedule>`.
pub fn schedule_view(
    ctx: &Context,
    queue: &[u8],
    name: &[u8],
    runs: usize,
) -> Result<Option<ScheduleView>, RedisError> {
    Call::client(ctx, queue).read(CoreOp::Schedules, |store, _| {
        Ok(core::schedule_view(store, name, runs))
    })
}

/// `VTRR.POLICY` without options: the policy and the default cap.
pub fn policy(
    ctx: &Context,
    queue: &[u8],
) -> Result<(Policy, core::partitions::Defaults, Option<u64>), RedisError> {
    Call::client(ctx, queue).read(CoreOp::ReadPolicy, |store, anomalies| {
        let policy = core::read_policy(store, anomalies);
        let defaults = core::partitions::read_defaults(store, anomalies);
        Ok((
            policy,
            defaults,
            core::read_default_max_queued(store, anomalies),
        ))
    })
}

/// `VTRR.POLICY` with options.
pub fn set_policy(ctx: &Context, queue: &[u8], changes: &[PolicyChange]) -> Result<(), RedisError> {
    Call::client(ctx, queue).effects(
        CoreOp::set_policy(changes),
        |store, anomalies| core::set_policy(store, changes, anomalies),
        |_| Done::new(c"vtrr.policy").recheck(),
    )
}

/// `VTRR.LIMIT` with options.
pub fn set_limit(
    ctx: &Context,
    queue: &[u8],
    partition: &[u8],
    changes: &[LimitChange],
) -> Result<(), RedisError> {
    Call::client(ctx, queue).effects(
        CoreOp::SetLimit,
        |store, anomalies| core::set_limit(store, partition, changes, anomalies),
        |_| Done::new(c"vtrr.limit").recheck(),
    )
}

/// `VTRR.LIMIT` without options.
pub fn limit(ctx: &Context, queue: &[u8], partition: &[u8]) -> Result<Record, RedisError> {
    Call::client(ctx, queue).read(CoreOp::Limit, |store, anomalies| {
        Ok(core::limit(store, partition, anomalies))
    })
}

/// `VTRR.PAUSE`: whether it was not paused yet.
pub fn pause(ctx: &Context, queue: &[u8], partition: &[u8]) -> Result<bool, RedisError> {
    Call::client(ctx, queue).effects(
        CoreOp::Pause,
        |store, anomalies| Ok(core::pause(store, partition, anomalies)),
        |_| Done::new(c"vtrr.pause").recheck(),
    )
}

/// `VTRR.RESUME`: whether it was paused.
pub fn resume(ctx: &Context, queue: &[u8], partition: &[u8]) -> Result<bool, RedisError> {
    Call::client(ctx, queue).effects(
        CoreOp::Resume,
        |store, anomalies| core::resume(store, partition, anomalies),
        |_| Done::new(c"vtrr.resume"),
    )
}

/// `VTRR.PARTITIONS ... PARTITION`.
pub fn partition_view(
    ctx: &Context,
    queue: &[u8],
    partition: &[u8],
) -> Result<PartitionView, RedisError> {
    Call::client(ctx, queue).read(CoreOp::PartitionView, |store, anomalies| {
        Ok(core::partition_view(store, partition, now_ms(), anomalies))
    })
}

/// `VTRR.PARTITIONS`: one cursor step.
pub fn partitions_page(
    ctx: &Context,
    queue: &[u8],
    cursor: u64,
    count: usize,
) -> Result<(u64, Vec<PartitionView>), RedisError> {
    Call::client(ctx, queue).read(CoreOp::PartitionsPage, |store, anomalies| {
        core::partitions_page(store, cursor, count, now_ms(), anomalies)
    })
}

/// `VTRR.PARTITIONS ... TOP`: how many partitions `rank` holds, and a page
/// of them, worst first.
pub fn partitions_top(
    ctx: &Context,
    queue: &[u8],
    rank: Rank,
    offset: usize,
    count: usize,
) -> Result<(u64, Vec<PartitionView>), RedisError> {
    Call::client(ctx, queue).read(CoreOp::PartitionsTop, |store, anomalies| {
        core::partitions_top(store, rank, offset, count, now_ms(), anomalies)
    })
}

/// `VTRR.RECOUNT`: the number of partition records corrected.
pub fn recount(ctx: &Context, queue: &[u8]) -> Result<u64, RedisError> {
    Call::client(ctx, queue).effects(
        CoreOp::Recount,
        |store, anomalies| core::recount(store, anomalies),
        |_| Done::new(c"vtrr.recount").recheck(),
    )
}

/// `VTRR.DEAD`: the `count` oldest dead items.
pub fn dead_items(ctx: &Context, queue: &[u8], count: usize) -> Result<Vec<DeadItem>, RedisError> {
    Call::client(ctx, queue).read(CoreOp::DeadItems, |store, _| {
        Ok(core::dead_items(store, count))
    })
}

/// `VTRR.REVIVE`: the number of dead items put back in the queue.
pub fn revive(ctx: &Context, queue: &[u8], ids: &[&[u8]]) -> Result<u64, RedisError> {
    let moved = Call::client(ctx, queue).effects(
        CoreOp::Revive,
        |store, _| core::revive(store, ids),
        |moved| {
            Done::new(c"vtrr.revive")
                .count(&info::REVIVED, moved.count)
                .anomalies(&moved.anomalies)
        },
    )?;
    Ok(moved.count)
}

/// `VTRR.CANCEL`: the number of items deleted.
pub fn cancel(ctx: &Context, queue: &[u8], at: &Moment, ids: &[&[u8]]) -> Result<u64, RedisError> {
    let now_ms = at.now_ms;
    let timed = |cancelled: &core::Cancelled| {
        let ids = ids.to_vec();
        cancelled
            .kept
            .then(|| apply(queue, now_ms, Operation::Cancel { ids }))
    };
    Call::client(ctx, queue)
        .clocked(
            CoreOp::Cancel,
            timed,
            |store, anomalies| Ok(core::cancel_at(store, ids, now_ms, anomalies)),
            |cancelled| Done {
                // A cancelled lease frees a slot of the queue's CONCURRENCY
                // (rare enough to signal without asking).
                signal_ready: cancelled.count > 0,
                ..Done::new(c"vtrr.cancel").count(&info::CANCELLED, cancelled.count)
            },
        )
        .map(|cancelled| cancelled.count)
}

/// `VTRR.STATS`, and the queue's layout.
pub fn stats(ctx: &Context, queue: &[u8]) -> Result<(Stats, Layout), RedisError> {
    Call::client(ctx, queue).read(CoreOp::Stats, |store, anomalies| {
        Ok((core::stats(store, now_ms(), anomalies)?, store.layout()))
    })
}

/// `VTRR.CONVERT`: moves the queue to layout `to` (see
/// [`layout::convert`](crate::layout::convert)).
pub fn convert(ctx: &Context, queue: &[u8], to: Layout) -> Result<bool, RedisError> {
    layout::convert::convert(ctx, queue, to).map_err(|refused| match refused {
        ConvertError::Open(e) => error::open(&e),
        ConvertError::KeyTaken(key) => error::convert_key_taken(&key),
        ConvertError::Core(e) => error::core(&e, queue),
    })
}

/// `VTRR.LOAD`: adds a chunk of a native queue's encoding to the key (a
/// rewritten AOF, a master creating a native queue, Valkey's atomic slot
/// migration).
pub fn load(ctx: &Context, key: &[u8], chunk: &[u8]) -> Result<(), RedisError> {
    load_chunk(ctx, key, chunk).map_err(|why| error::load_refused(key, &why))?;
    replicate_verbatim(ctx);
    if let Some(queue) = vocabulary::queue_of_queue_key(key) {
        watch::recheck(ctx, queue);
    }
    Ok(())
}

/// `VTRR.INSPECT`: one key of the queue, whole, in either layout.
pub fn inspect(ctx: &Context, queue: &[u8], key: QueueKey) -> Result<KeyView, RedisError> {
    Call::client(ctx, queue).read(CoreOp::Inspect, |store, _| {
        core::key_view::key_view(store, key)
    })
}

/// `VTRR.JOB`: each id's status, in order.
pub fn job(ctx: &Context, queue: &[u8], ids: &[&[u8]]) -> Result<Vec<JobStatus>, RedisError> {
    Call::client(ctx, queue).read(CoreOp::Job, |store, anomalies| {
        Ok(core::job_status(store, ids, anomalies))
    })
}

/// `VTRR.RESULT`: job `id`'s status, and the queue's layout (whose keys a
/// waiter blocks on).
pub fn result(ctx: &Context, queue: &[u8], id: &[u8]) -> Result<(JobStatus, Layout), RedisError> {
    Call::client(ctx, queue).read(CoreOp::Job, |store, anomalies| {
        Ok((core::status_of(store, id, anomalies), store.layout()))
    })
}

/// `VTRR.CHECK`: every broken invariant, as a sentence.
pub fn check(ctx: &Context, queue: &[u8]) -> Result<Vec<String>, RedisError> {
    Call::client(ctx, queue).read(CoreOp::Check, |store, _| check::check(store))
}

/// The earliest time something of `queue` (in the context's database) falls
/// due, and its next schedule run, read without opening anything for
/// writing (so no WATCH is disturbed); None when nothing is.
pub fn next_due(ctx: &Context, queue: &[u8]) -> (Option<i64>, Option<i64>) {
    match Call::server(ctx, queue).open(CoreOp::NextDue, false) {
        Ok(mut store) => (core::next_due(&mut store), core::next_run(&mut store)),
        Err(_) => (None, None),
    }
}
