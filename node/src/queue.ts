/**
 * `Queue`: one method per vtrr command, over a node-redis client or cluster
 * (or an ioredis client). What each sends and how its reply reads is in
 * `commands.ts`; a method only picks the declaration and sends it.
 */

import { setTimeout as sleep } from 'node:timers/promises';
import {
  argv,
  type Charge,
  commands,
  type Declaration,
  type Limit,
  type NackOptions,
  type Returned,
  type ScheduleDefinition,
} from './commands.js';
import { InvalidArgumentError, isTryAgain, SlotMovingError, translate } from './errors.js';
import { commandsOf, type Round, type RoundResult, read } from './exchange.js';
import { type RedisConnection, type Transport, transportOf } from './transport.js';
import type {
  AckedLeases,
  DeadItem,
  Fenced,
  Item,
  JobStatus,
  Layout,
  Lease,
  NackOutcome,
  Name,
  Page,
  PartitionSettings,
  PartitionView,
  Payload,
  Policy,
  Rank,
  Ranking,
  Rate,
  ScheduleView,
  Stats,
} from './types.js';

/** How often a call answered TRYAGAIN (its cluster slot moving) is sent again. */
const TRY_AGAIN_PAUSE_MS = 50;

export interface QueueOptions {
  /** How long a call waits out its cluster slot's move (TRYAGAIN) before SlotMovingError; 30 s by default. */
  readonly retryMs?: number;
}

export interface EnqueueOptions {
  /** The item's cost in its partition's turns (1 to 1e9; 1 by default). */
  readonly weight?: number;
  /** -100 to 100, larger first; strict between levels, fair inside one (0 by default). */
  readonly priority?: number;
  /** Leasable this long after the server's clock now (VTRR.DEFER); at once without it. */
  readonly delayMs?: number;
}

/** The first hash tag of a key name (what Redis Cluster hashes), or null. */
function hashTag(name: string): string | null {
  const open = name.indexOf('{');
  const close = open < 0 ? -1 : name.indexOf('}', open + 1);
  return close > open + 1 ? name.slice(open + 1, close) : null;
}

/** A vtrr queue: its name, and the client its commands go through. */
export class Queue {
  readonly name: string;
  /** How commands reach the server (a Worker opens its own connection from it). */
  readonly transport: Transport;
  readonly retryMs: number;

  constructor(client: RedisConnection, name: string, options: QueueOptions = {}) {
    if (typeof name !== 'string' || name === '') {
      throw new InvalidArgumentError('queue name must not be empty');
    }
    this.transport = transportOf(client);
    if (this.transport.cluster && hashTag(name) === null) {
      throw new InvalidArgumentError(
        'in cluster mode the queue name must contain a hash tag, like {files}, so all its keys share one slot',
      );
    }
    this.name = name;
    this.retryMs = options.retryMs ?? 30_000;
  }

  /** Sends one declared command (waiting out a slot move) and reads its reply. */
  run<P extends unknown[], T>(declaration: Declaration<P, T>, ...params: P): Promise<T> {
    return this.runOn(this.transport, declaration, ...params);
  }

  /** `run` over another transport (a Worker's own connection). */
  async runOn<P extends unknown[], T>(transport: Transport, declaration: Declaration<P, T>, ...params: P): Promise<T> {
    const args = argv(declaration, this.name, ...params);
    const deadline = Date.now() + this.retryMs;
    for (;;) {
      try {
        return declaration.transformReply(await transport.send(args));
      } catch (error) {
        if (isTryAgain(error)) {
          if (Date.now() < deadline) {
            await sleep(TRY_AGAIN_PAUSE_MS);
            continue;
          }
          throw new SlotMovingError(`${this.name}: ${(error as Error).message}`, { cause: error });
        }
        throw translate(error, transport.server);
      }
    }
  }

  /**
   * A worker's round trip: its commands sent together (one write: the
   * clients pipeline what is sent in the same tick), read as one. The first
   * failure is thrown, translated.
   */
  async exchange(round: Round, transport: Transport = this.transport): Promise<RoundResult> {
    const sent = commandsOf(this.name, round);
    const replies = await Promise.allSettled(sent.map(({ args }) => transport.send(args)));
    const values: unknown[] = [];
    for (const [i, reply] of replies.entries()) {
      if (reply.status === 'rejected') {
        throw translate(reply.reason, transport.server);
      }
      values.push(sent[i]?.read(reply.value));
    }
    return read(round, values);
  }

  // Adding items.

  /**
   * Adds one item; false when its id is already in the queue's life (queued,
   * leased, delayed or dead), or finished less than the policy's `dedupMs`
   * ago: skipped. PartitionFullError when its partition has its MAX-QUEUED
   * items waiting.
   */
  async enqueue(partition: Name, id: Name, payload: Payload, options: EnqueueOptions = {}): Promise<boolean> {
    const item = { partition, id, payload, ...(options.weight === undefined ? {} : { weight: options.weight }) };
    return (await this.enqueueMany([item], options)) === 1;
  }

  /**
   * Adds items in one atomic command (any partitions); how many were new.
   * Refused whole (PartitionFullError, nothing added) when they would take
   * any partition past its MAX-QUEUED; ids already in the queue take no room,
   * delayed items count (they wait too).
   */
  enqueueMany(items: readonly Item[], options: Omit<EnqueueOptions, 'weight'> = {}): Promise<number> {
    return options.delayMs === undefined
      ? this.run(commands.enqueue, items, options.priority)
      : this.run(commands.defer, options.delayMs, items, options.priority);
  }

  // Leases.

  /** Leases the next item, waiting up to `blockMs` (0: forever) when given; null when none came. */
  lease(options: { leaseMs: number; blockMs?: number }): Promise<Lease | null> {
    return this.run(commands.lease, options);
  }

  /** Leases up to `count` items. */
  leaseMany(count: number, options: { leaseMs: number; blockMs?: number }): Promise<Lease[]> {
    return this.run(commands.leaseMany, count, options);
  }

  /**
   * Acks the `done` leases (fenced) and leases up to `count` items, in one
   * call; with `costs` (one per lease) each partition is charged its job's
   * cost instead of its weight (`LEASE ... ACKCOST`); with `results` (one
   * per lease) each is kept as its job's result (`LEASE ... ACKRESULT`).
   * One or the other.
   */
  async ackAndLease(
    done: readonly Fenced[],
    count: number,
    options: { leaseMs: number; blockMs?: number; costs?: readonly number[]; results?: readonly Payload[] },
  ): Promise<AckedLeases> {
    const { costs, results, ...leaseOptions } = options;
    if (costs !== undefined && results !== undefined) {
      throw new InvalidArgumentError('costs and results cannot be combined: VTRR.ACKRESULT reports no cost');
    }
    if (costs !== undefined) {
      return this.run(commands.ackCostAndLease, charges(done, costs), count, leaseOptions);
    }
    if (results !== undefined) {
      return this.run(commands.ackResultAndLease, returns(done, results), count, leaseOptions);
    }
    return this.run(commands.ackAndLease, done, count, leaseOptions);
  }

  /** Fenced ACK: how many of the leases were still current (and are now done). */
  ack(...done: Fenced[]): Promise<number> {
    return this.run(commands.ack, done);
  }

  /** Fenced ACK charging each partition what its job really cost (weights' units) instead of its weight. */
  ackCost(...charged: Charge[]): Promise<number> {
    return this.run(commands.ackCost, charged);
  }

  /**
   * Fenced ACK keeping what each job returned (bytes, or a string as UTF-8;
   * at most 1 MiB) as its result while the policy's `resultTtlMs` keeps
   * outcomes: `result(id)` reads it. How many leases were still current (a
   * lost one keeps nothing).
   */
  ackResult(...returned: Returned[]): Promise<number> {
    return this.run(commands.ackResult, returned);
  }

  /** Extends a lease by `leaseMs` from now; false when it is lost. `cost`: what the job cost since its last report, charged now. */
  renew(lease: Fenced, leaseMs: number, options: { cost?: number } = {}): Promise<boolean> {
    return this.run(commands.renew, lease, leaseMs, options.cost);
  }

  /**
   * Gives a leased item back: at once, after `delayMs`, to the dead letters
   * (`dead`), or unrun and uncounted (`release`); `reason` (what failed)
   * stays with the item. Where it went (the queue's MAX-NACKS may bury it),
   * or null when the lease was no longer current.
   */
  nack(lease: Fenced, how: NackOptions = {}): Promise<NackOutcome | null> {
    return this.run(commands.nack, lease, how);
  }

  /** Gives a leased item back unrun: queued again at once, no nack counted; false when the lease was lost. */
  async release(lease: Fenced): Promise<boolean> {
    return (await this.nack(lease, { release: true })) !== null;
  }

  /** Takes expired leases back now (the module's timer does it anyway); how many. */
  reclaim(options: { limit?: number } = {}): Promise<number> {
    return this.run(commands.reclaim, options.limit);
  }

  // Reading the queue.

  stats(): Promise<Stats> {
    return this.run(commands.stats);
  }

  /** The invariants the queue breaks, one sentence each; empty when it is sound (O(N)). */
  check(): Promise<string[]> {
    return this.run(commands.check);
  }

  /** One partition's counts and settings (all zeros for one never seen). */
  partition(partition: Name): Promise<PartitionView> {
    return this.run(commands.partition, partition);
  }

  /** One step of the partition scan: go on with `cursor` until it is '0'. */
  partitionsPage(options: { cursor?: string; count?: number } = {}): Promise<Page<PartitionView>> {
    return this.run(commands.partitionsPage, options.cursor, options.count);
  }

  /** Every partition, in bounded steps (one may come twice, as in HSCAN). */
  async *partitions(options: { count?: number } = {}): AsyncGenerator<PartitionView> {
    let cursor = '0';
    do {
      const page = await this.partitionsPage({ cursor, ...options });
      yield* page.entries;
      cursor = page.cursor;
    } while (cursor !== '0');
  }

  /** The partitions the server ranks worst first (most queued, longest waiting, most leased, most dead). */
  partitionsTop(count: number, options: { by?: Rank; offset?: number } = {}): Promise<Ranking> {
    return this.run(commands.partitionsTop, count, options.by, options.offset);
  }

  /** The oldest dead-lettered items, oldest first (10 by default). */
  dead(options: { count?: number } = {}): Promise<DeadItem[]> {
    return this.run(commands.dead, options.count);
  }

  // Item life.

  /**
   * Where each item is, in order: queued, held, leased, delayed, dead, done
   * or cancelled (finished, while the policy keeps outcomes), or unknown
   * (never enqueued, or finished and nothing of it kept).
   */
  jobs(...ids: Name[]): Promise<JobStatus[]> {
    return this.run(commands.jobs, ids);
  }

  /** Where one item is, and what the queue keeps of it there. */
  async job(id: Name): Promise<JobStatus> {
    const [status] = await this.jobs(id);
    return status as JobStatus;
  }

  /**
   * The job's status once it finished: `done` (with its `result`, what it
   * returned, while the policy's `resultTtlMs` keeps it), `dead` or
   * `cancelled`; null while it has not, or when nothing of it is kept.
   * `blockMs`: wait up to that long (0: forever) for it to finish, woken by
   * the call that finishes it (BullMQ's `waitUntilFinished`). The wait holds
   * the connection: give it a client of its own (`client.duplicate()`) when
   * the application's commands share this one.
   */
  result(id: Name, options: { blockMs?: number } = {}): Promise<JobStatus | null> {
    return this.run(commands.result, id, options.blockMs);
  }

  /** Puts dead items back in the queue, counters reset; how many. */
  revive(...ids: Name[]): Promise<number> {
    return this.run(commands.revive, ids);
  }

  /** Deletes items whatever their state, leased ones included; how many. */
  cancel(...ids: Name[]): Promise<number> {
    return this.run(commands.cancel, ids);
  }

  // Settings.

  policy(): Promise<Policy> {
    return this.run(commands.policy);
  }

  /**
   * Sets the dead-letter policy, the default cap, rate and MAX-QUEUED (of
   * every partition without its own), the queue's own cap and rate (on top
   * of every partition's, shared in fair turn) and how long a finished job
   * is kept: its outcome and result for `resultTtlMs` (`result(id)`), its id
   * for `dedupMs` (an enqueue of it skipped meanwhile), the longer of the
   * two for both; unset leaves one as it is, 'NONE' clears it.
   */
  setPolicy(settings: {
    maxTimeouts?: Limit;
    maxNacks?: Limit;
    defaultConcurrency?: Limit;
    defaultRate?: Rate | 'NONE';
    concurrency?: Limit;
    rate?: Rate | 'NONE';
    defaultMaxQueued?: Limit;
    resultTtlMs?: Limit;
    dedupMs?: Limit;
  }): Promise<void> {
    return this.run(commands.setPolicy, settings);
  }

  /** A partition's own settings. */
  limit(partition: Name): Promise<PartitionSettings> {
    return this.run(commands.limit, partition);
  }

  /**
   * Sets what is given of a partition's cap, share, rate and MAX-QUEUED
   * ('NONE' removes a cap, rate or MAX-QUEUED: the queue's default is then in
   * force). `maxQueued` is backpressure: the most items it may have waiting
   * (queued or delayed); an enqueue past it throws PartitionFullError.
   */
  setLimit(
    partition: Name,
    settings: { concurrency?: Limit; share?: number; rate?: Rate | 'NONE'; maxQueued?: Limit },
  ): Promise<void> {
    return this.run(commands.setLimit, partition, settings);
  }

  /** Stops leasing a partition's items; false if it was paused already. */
  pause(partition: Name): Promise<boolean> {
    return this.run(commands.pause, partition);
  }

  /** Leases a paused partition's items again; false if it was not paused. */
  resume(partition: Name): Promise<boolean> {
    return this.run(commands.resume, partition);
  }

  /** Rewrites the partitions' counts from the keys (after Lua scripts moved items); how many records changed. */
  recount(): Promise<number> {
    return this.run(commands.recount);
  }

  // Recurring schedules.

  /**
   * Sets a recurring schedule (exactly one of `everyMs` and `cron`); its
   * next run's due time (Unix ms). The server enqueues each run in
   * `partition` as the item `schedule:<name>:<due-ms>`.
   */
  schedule(name: Name, definition: ScheduleDefinition): Promise<number> {
    return this.run(commands.schedule, name, definition);
  }

  /** Removes schedules (their runs already enqueued stay); how many existed. */
  unschedule(...names: Name[]): Promise<number> {
    return this.run(commands.unschedule, names);
  }

  /** One schedule with its next `runs` due times (0 to 20); null if there is none. */
  scheduleView(name: Name, options: { runs?: number } = {}): Promise<ScheduleView | null> {
    return this.run(commands.scheduleView, name, options.runs);
  }

  /** One step of the schedule scan: go on with `cursor` until it is '0'. */
  schedulesPage(options: { cursor?: string; count?: number; runs?: number } = {}): Promise<Page<ScheduleView>> {
    return this.run(commands.schedulesPage, options.cursor, options.count, options.runs);
  }

  /** Every schedule, in bounded steps. */
  async *schedules(options: { count?: number; runs?: number } = {}): AsyncGenerator<ScheduleView> {
    let cursor = '0';
    do {
      const page = await this.schedulesPage({ cursor, ...options });
      yield* page.entries;
      cursor = page.cursor;
    } while (cursor !== '0');
  }

  // Layout and diagnostics.

  /** Moves the queue to a layout, atomically (one O(N) call); false when it had it already. */
  convert(layout: Layout): Promise<boolean> {
    return this.run(commands.convert, layout);
  }

  /** One of the queue's logical keys read whole, as the server replies it (a diagnostic). */
  inspect(key: string): Promise<unknown> {
    return this.run(commands.inspect, key);
  }
}

function charges(done: readonly Fenced[], costs: readonly number[]): Charge[] {
  if (costs.length !== done.length) {
    throw new InvalidArgumentError(`${costs.length} costs for ${done.length} leases: one cost per lease`);
  }
  return done.map((lease, i) => ({ lease, cost: costs[i] as number }));
}

function returns(done: readonly Fenced[], results: readonly Payload[]): Returned[] {
  if (results.length !== done.length) {
    throw new InvalidArgumentError(`${results.length} results for ${done.length} leases: one result per lease`);
  }
  return done.map((lease, i) => ({ lease, result: results[i] as Payload }));
}
