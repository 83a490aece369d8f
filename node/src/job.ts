/** `Job`: one leased item as a handler sees it, and what a handler throws to say how it failed. */

import { InvalidArgumentError } from './errors.js';
import { checkInt, MAX_COST, MAX_MS } from './limits.js';
import type { Lease, ShardedLease } from './types.js';

/** `job.signal.reason` when the lease was lost: the item was cancelled, or its lease expired and went elsewhere. */
export class LeaseLostError extends Error {
  override name = 'LeaseLostError';
}

/** `job.signal.reason` when the worker, closing, gave the job's item back to the queue unfinished. */
export class JobReleasedError extends Error {
  override name = 'JobReleasedError';
}

/** Thrown by a handler: retry the item after `delayMs` (the worker's backoff without it). */
export class RetryError extends Error {
  override name = 'RetryError';
  readonly delayMs: number | undefined;

  constructor(message = 'retry', options: { delayMs?: number; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? {} : { cause: options.cause });
    this.delayMs = options.delayMs === undefined ? undefined : checkInt('delayMs', options.delayMs, 0, MAX_MS);
  }
}

/** Thrown by a handler: the item can never succeed; it goes to the dead letters at once (`NACK ... DEAD`), as BullMQ's. */
export class UnrecoverableError extends Error {
  override name = 'UnrecoverableError';
}

/** One leased item as its handler sees it. */
export class Job {
  /** The item's id (UTF-8; `idBytes` are the bytes). */
  readonly id: string;
  readonly idBytes: Buffer;
  /** The partition (tenant) it was queued in. */
  readonly partition: string;
  /** The payload's bytes, as enqueued. */
  readonly payload: Buffer;
  /** The lease's token: ACK, RENEW and NACK are fenced by it. */
  readonly token: string;
  /** How many times this item's lease expired before (a worker died or stalled with it). */
  readonly timeouts: number;
  /** How many times a handler failed on it before. */
  readonly nacks: number;
  /** The queue's name. */
  readonly queueName: string;
  /** The index of the sub-queue it was leased from, for a ShardedQueue's job (its ACK, RENEW and NACK go there); else undefined. */
  readonly shard: number | undefined;
  // Made when a handler first asks for the signal: most never do, and an
  // AbortController per job is a measurable part of a no-op job's cost.
  #abort: AbortController | undefined;
  #reason: Error | undefined;
  /** @internal When its handler started and ended (performance.now()). */
  startedAt = 0;
  /** @internal */
  endedAt = 0;
  /** @internal What the handler reported with reportCost, in all. */
  reported: number | undefined = undefined;
  /** @internal What renewals have charged so far. */
  charged = 0;

  /** The worker makes jobs; a test of a handler may make one from a Lease. */
  constructor(lease: Lease, queueName: string) {
    this.id = lease.id;
    this.idBytes = lease.idBytes;
    this.partition = lease.partition;
    this.payload = lease.payload;
    this.token = lease.token;
    this.timeouts = lease.timeouts;
    this.nacks = lease.nacks;
    this.queueName = queueName;
    this.shard = (lease as Partial<ShardedLease>).shard;
  }

  /**
   * Aborted when the job's work can no longer count: its lease was lost
   * (`reason` a LeaseLostError), or the worker closed and gave it back
   * (a JobReleasedError). Pass it to `fetch` and friends.
   */
  get signal(): AbortSignal {
    this.#abort ??= new AbortController();
    if (this.#reason !== undefined && !this.#abort.signal.aborted) {
      this.#abort.abort(this.#reason);
    }
    return this.#abort.signal;
  }

  /** True once the lease is lost: stop; the job will not be acked. */
  get lost(): boolean {
    return this.#reason instanceof LeaseLostError;
  }

  /** @internal True once the job's work can no longer count (lost, or given back). */
  get stopped(): boolean {
    return this.#reason !== undefined;
  }

  /** @internal Aborts the signal with `reason` (the first reason stands). */
  stop(reason: Error): void {
    if (this.#reason === undefined) {
      this.#reason = reason;
      this.#abort?.abort(reason);
    }
  }

  /** The payload as UTF-8 text. */
  text(): string {
    return this.payload.toString('utf8');
  }

  /** The payload parsed as JSON. */
  json<T = unknown>(): T {
    return JSON.parse(this.text()) as T;
  }

  /**
   * Adds `units` (weights' units: tokens, bytes, ms) to what this job cost.
   * Its partition is charged what it reports instead of its weight: the
   * worker's renewals charge the reports so far as the job runs
   * (`RENEW ... COST`), its ACK the rest (`ACKCOST`).
   */
  reportCost(units: number): void {
    checkInt('cost', units, 0, MAX_COST);
    if (this.endedAt !== 0) {
      throw new InvalidArgumentError('reportCost after the handler returned: the job is settled');
    }
    this.reported = (this.reported ?? 0) + units;
  }
}
