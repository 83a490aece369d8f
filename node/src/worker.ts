/**
 * `Worker`: leases items and runs a handler on each, `concurrency` at a time.
 *
 * One dispatcher per worker owns a connection of its own (duplicated from
 * the queue's client: its `LEASE ... BLOCK` must not hold up the
 * application's commands); handlers only run jobs. Each round trip does
 * everything due at once: the NACKs of failed jobs (WITHSTATE: where each
 * item went), the RENEWs of every running lease once a third of the lease
 * has passed, and one `VTRR.LEASE ... COUNT <free slots> ACK <succeeded
 * jobs>` that finishes the jobs that returned and leases the next ones. A
 * worker with nothing running waits in the server (BLOCK) rather than
 * polling it.
 *
 * - A handler that returns: ACK; what it returned, unless undefined or null,
 *   is the job's result (`ACKRESULT`: bytes as they are, a string as UTF-8,
 *   anything else as JSON), which `queue.result(id)` reads while the
 *   queue's policy keeps it. One that throws (anything): NACK with an
 *   exponential backoff and jitter from the item's nack count (RetryError
 *   sets the delay, UnrecoverableError sends the item to the dead letters).
 *   Giving up is the queue's policy (VTRR.POLICY MAX-NACKS, MAX-TIMEOUTS),
 *   and a NACK the policy turned into a death is reported as one.
 * - A RENEW that replies 0 means the lease is lost (the item was cancelled,
 *   or its lease expired and went to another worker): `job.signal` aborts
 *   and the job is never acked.
 * - `close()`: no new leases (items a lease under way brings back go back
 *   unrun); running handlers get `graceMs` to finish, then their items go
 *   back by `NACK ... RELEASE` (at once, and uncounted: a deploy is no
 *   failure) and their signals abort. `close({ force: true })` ends the
 *   grace now.
 * - A server that cannot be reached is waited for (the client reconnects),
 *   logged once per change of state; a permanent error (the module not
 *   loaded, a key of the wrong type, no permission) stops the worker with
 *   that error.
 */

import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { commands } from './commands.js';
import { isPermanent } from './errors.js';
import type { GiveBack, Renewal, Round, RoundResult } from './exchange.js';
import { isEmpty } from './exchange.js';
import { Job, JobReleasedError, LeaseLostError, RetryError, UnrecoverableError } from './job.js';
import { checkInt, checkResult, MAX_BLOCK_MS, MAX_COST, MAX_MS, MAX_REASON_BYTES } from './limits.js';
import { consoleLogger, type Logger } from './log.js';
import type { Queue } from './queue.js';
import { ShardedQueue } from './sharded.js';
import type { Transport } from './transport.js';
import type { NackOutcome } from './types.js';

/** While handlers run and the queue looked empty, the dispatcher asks again this often. */
const IDLE_POLL_MS = 50;
/** The longest the dispatcher waits between looks at the clock. */
const LONGEST_NAP_MS = 100;
/** How long shutdown's last round trip may take before the connection is dropped (its leases then expire). */
const LAST_ROUND_MS = 5_000;

/**
 * The delay before a failed item's next try: `delay`·2^nacks capped at
 * `maxDelay`, less up to `jitter` of it drawn at random (items that failed
 * together do not all come back at once). Or a function of the item's nack
 * count and the error, in ms.
 */
export type Backoff =
  | { readonly delay?: number; readonly maxDelay?: number; readonly jitter?: number }
  | ((nacks: number, error: unknown) => number);

export interface WorkerOptions {
  /** Handlers at once (1 by default). */
  readonly concurrency?: number;
  /** Each lease's length (30 s by default); renewed every third of it while the handler runs. */
  readonly leaseMs?: number;
  /** How long an idle worker waits in the server for an item per call (1 s by default). */
  readonly blockMs?: number;
  /** How long close() lets running handlers finish before giving their items back (30 s by default). */
  readonly graceMs?: number;
  readonly backoff?: Backoff;
  /**
   * `'time'`: every job is charged to its partition what it really cost
   * instead of its weight: its run time in ms, or what its handler
   * reported (`job.reportCost`). Without it, only jobs that report are.
   * A job that returns a result is acked with it and reports no cost (the
   * module's ACKRESULT takes none): it is charged its weight, and what its
   * renewals reported.
   */
  readonly cost?: 'time';
  /** Where the start-up line, a line per job and the errors go (stderr at info by default). */
  readonly logger?: Logger;
  /** Start at once (true by default, as BullMQ's); else call run(). */
  readonly autorun?: boolean;
}

/** Where a failed job's item went. */
export interface Failure {
  /** `delayed` (retried after `delayMs`), `queued` (retried at once) or `dead` (dead-lettered). */
  readonly state: NackOutcome;
  readonly delayMs?: number;
}

export interface WorkerEvents {
  /** A handler started. */
  active: [job: Job];
  /** A handler returned and its item is done (acked): its return value (kept as the job's result unless undefined or null). */
  completed: [job: Job, result: unknown];
  /** A handler threw and its item was nacked: the error, and where the item went. */
  failed: [job: Job, error: Error, failure: Failure];
  /** A job's lease was lost: it was not acked (another worker may run it again). */
  lost: [job: Job];
  /** A lease found the queue empty (once each time it empties). */
  drained: [];
  /** A connection error (once per change of state), or the permanent error the worker stopped on. */
  error: [error: Error];
  /** The worker stopped. */
  closed: [];
}

/** What a handler may return. */
export type Handler<R = unknown> = (job: Job) => Promise<R> | R;

interface Finished {
  readonly job: Job;
  readonly error: Error | undefined;
  readonly result: unknown;
}

/** What to tell the queue of a finished job: it succeeded (ACK), or it failed (NACK, after `delayMs` or dead). */
interface Succeeded {
  readonly job: Job;
  readonly result: unknown;
  /** What its ACK keeps as its result (`jobResult`); undefined: none. */
  readonly kept: string | Buffer | undefined;
}

interface Failed {
  readonly job: Job;
  readonly error: Error;
  readonly delayMs?: number;
  readonly dead?: boolean;
}

type Outcome = Succeeded | Failed;

function isFailed(outcome: Outcome): outcome is Failed {
  return 'error' in outcome;
}

/** What a round trip in flight was built from, in the order of its commands. */
interface Plan {
  readonly round: Round;
  readonly acked: Succeeded[];
  readonly charged: Succeeded[];
  readonly returned: Succeeded[];
  readonly nacked: Failed[];
  readonly renewed: Job[];
}

function asError(thrown: unknown): Error {
  if (thrown instanceof Error) {
    return thrown;
  }
  return new Error(
    `a handler threw ${typeof thrown === 'string' ? thrown : (JSON.stringify(thrown) ?? String(thrown))}`,
  );
}

/**
 * What a NACK's REASON says of `error`: its stack (its one-line summary, then
 * where it was thrown, the top first), cut to MAX_REASON_BYTES of UTF-8.
 */
function failureReason(error: Error): string {
  const summary = `${error.name}: ${error.message}`;
  const stack = error.stack ?? summary;
  const text = stack.startsWith(summary) ? stack : `${summary}\n${stack}`;
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= MAX_REASON_BYTES) {
    return text;
  }
  // A cut may split a character: its pieces decode as U+FFFD, dropped.
  return bytes
    .subarray(0, MAX_REASON_BYTES)
    .toString('utf8')
    .replace(/\uFFFD+$/, '');
}

/**
 * What a handler's return value keeps as its job's result (VTRR.ACKRESULT):
 * undefined and null nothing, bytes as they are, a string as UTF-8,
 * anything else as JSON. Throws for a value JSON cannot write, or one over
 * 1 MiB (the module's bound).
 */
function jobResult(value: unknown): string | Buffer | undefined {
  if (value === undefined || value === null) {
    return undefined;
  }
  if (typeof value === 'string' || value instanceof Uint8Array) {
    return checkResult(value);
  }
  const json: string | undefined = JSON.stringify(value);
  if (json === undefined) {
    throw new TypeError(`a ${typeof value} has no JSON form`);
  }
  return checkResult(json);
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(3)} s`;
}

/** Logs a connection's trouble once per change of state. */
class Reachability {
  private down = false;

  constructor(
    private readonly queueName: string,
    private readonly logger: Logger,
    private readonly emit: (error: Error) => void,
  ) {}

  failed(error: Error): void {
    if (!this.down) {
      this.down = true;
      this.logger.error(`queue ${this.queueName}: ${error.message}; retrying`);
      this.emit(error);
    }
  }

  ok(): void {
    if (this.down) {
      this.down = false;
      this.logger.warn(`queue ${this.queueName}: reachable again`);
    }
  }
}

/** Resolves to `STOP` once `stop` does, else to `work`'s value (its rejection is then handled). */
const STOP: unique symbol = Symbol('stop');
function unlessStopped<T>(work: Promise<T>, stop: Promise<void>): Promise<T | typeof STOP> {
  work.catch(() => undefined); // a failure after the stop is nobody's to hear
  return Promise.race([work, stop.then((): typeof STOP => STOP)]);
}

export class Worker<R = unknown> extends EventEmitter<WorkerEvents> {
  /** What it works: a Queue, or a ShardedQueue (the same dispatcher; its rounds go through the rotation). */
  readonly queue: Queue | ShardedQueue;
  readonly concurrency: number;
  readonly leaseMs: number;
  readonly blockMs: number;
  readonly graceMs: number;
  readonly cost: 'time' | undefined;
  readonly logger: Logger;
  private readonly handler: Handler<R>;
  private readonly backoff: (nacks: number, error: unknown) => number;

  // The dispatcher's state.
  private readonly running = new Map<string, Job>();
  private finished: Finished[] = [];
  private settling: Outcome[] = [];
  private nextRenewAt = 0;
  private idleUntil = 0;
  private drainedSaid = false;
  private wake: (() => void) | undefined;
  private own: Transport | undefined;
  private ready = false;
  private ownClientId: string | undefined;
  private blocking = false;
  private readonly reach: Reachability;

  // Shutdown.
  private closing = false;
  private deadline = Number.POSITIVE_INFINITY;
  private readonly stopped: Promise<void>;
  private stop: () => void = () => undefined;
  private graceTimer: NodeJS.Timeout | undefined;
  private work: Promise<void> | undefined;

  constructor(queue: Queue | ShardedQueue, handler: Handler<R>, options: WorkerOptions = {}) {
    super();
    if (typeof handler !== 'function') {
      throw new TypeError('the handler must be a function (job) => ...');
    }
    this.queue = queue;
    this.handler = handler;
    this.concurrency = checkInt('concurrency', options.concurrency ?? 1, 1, 100_000);
    // Renewed every third: 3 ms is the least that leaves a renewal its own millisecond.
    this.leaseMs = checkInt('leaseMs', options.leaseMs ?? 30_000, 3, MAX_MS);
    // Positive: between two waits the dispatcher sees close() (BLOCK 0 waits forever).
    this.blockMs = checkInt('blockMs', options.blockMs ?? 1_000, 1, MAX_BLOCK_MS);
    this.graceMs = checkInt('graceMs', options.graceMs ?? 30_000, 0, MAX_MS);
    if (options.cost !== undefined && options.cost !== 'time') {
      throw new TypeError(`cost must be 'time' or unset, not ${JSON.stringify(options.cost)}`);
    }
    this.cost = options.cost;
    this.logger = options.logger ?? consoleLogger();
    this.backoff = backoffOf(options.backoff ?? {});
    this.reach = new Reachability(queue.name, this.logger, (error) => this.emitError(error));
    this.stopped = new Promise((resolve) => {
      this.stop = resolve;
    });
    if (options.autorun ?? true) {
      // Its failure is logged and emitted; run() hands the same promise to whoever awaits it.
      this.run().catch(() => undefined);
    }
  }

  /**
   * Works until close(); resolves once the worker has stopped, rejects with
   * the permanent error it stopped on. Calling it again returns the same promise.
   */
  run(): Promise<void> {
    this.work ??= this.dispatch();
    return this.work;
  }

  /** True until close() is called. */
  isRunning(): boolean {
    return this.work !== undefined && !this.closing;
  }

  /**
   * Stops leasing and resolves once the worker has stopped: running
   * handlers get `graceMs` to finish (`force`: none), then their items go
   * back to the queue unrun, uncounted. Never rejects.
   */
  async close(options: { force?: boolean } = {}): Promise<void> {
    const now = performance.now();
    const deadline = options.force === true ? now : now + this.graceMs;
    if (!this.closing || deadline < this.deadline) {
      this.closing = true;
      this.deadline = deadline;
      clearTimeout(this.graceTimer);
      // Past the grace (none when nothing runs) and the last round's time, a round trip
      // that still has not come back (the server is gone) is given up on.
      const grace = this.running.size === 0 ? 0 : Math.max(0, deadline - now);
      this.graceTimer = setTimeout(() => this.stop(), grace + LAST_ROUND_MS);
      this.graceTimer.unref();
      this.wake?.();
      this.unblock();
    }
    if (this.work === undefined) {
      this.stop();
      this.announce('closed');
      return;
    }
    if (!this.ready) {
      this.stop(); // still connecting: nothing leased, nothing to settle
    }
    await this.work.catch(() => undefined);
  }

  private emitError(error: Error): void {
    // An EventEmitter throws an 'error' nobody listens to: the log line says it already.
    if (this.listenerCount('error') > 0) {
      this.announce('error', error);
    }
  }

  /** Emits `event`; a listener that throws is logged, never left to stop the dispatcher mid-round. */
  private announce<K extends keyof WorkerEvents>(event: K, ...args: WorkerEvents[K]): void {
    try {
      (this.emit as (event: K, ...args: WorkerEvents[K]) => boolean)(event, ...args);
    } catch (error) {
      this.logger.error(`a '${event}' listener threw: ${asError(error).message}`);
    }
  }

  /** Ends a BLOCK under way at once (CLIENT UNBLOCK ... TIMEOUT from the queue's own client): no item is lost. */
  private unblock(): void {
    if (this.blocking && this.ownClientId !== undefined) {
      this.queue.transport
        .send(['CLIENT', 'UNBLOCK', this.ownClientId, 'TIMEOUT'], this.queue.name)
        .catch(() => undefined);
    }
  }

  private async dispatch(): Promise<void> {
    try {
      await this.connect();
      if (!this.closing) {
        await this.banner();
      }
      await this.rounds();
      await this.lastRound();
    } catch (error) {
      const stoppedOn = asError(error);
      this.logger.error(`vtrr worker stopped: ${stoppedOn.message}`);
      this.emitError(stoppedOn);
      for (const job of this.running.values()) {
        job.stop(new JobReleasedError('the worker stopped on an error; the lease will expire'));
      }
      throw stoppedOn;
    } finally {
      clearTimeout(this.graceTimer);
      this.stop();
      this.own?.close();
      this.closing = true;
      this.announce('closed');
    }
  }

  /** The dispatcher's own connection, and its client id (for CLIENT UNBLOCK). */
  private async connect(): Promise<void> {
    const own = this.queue.transport.duplicate({
      onError: (error) => this.reach.failed(error),
      onReady: () => this.reach.ok(),
    });
    this.own = own;
    if ((await unlessStopped(own.connected(), this.stopped)) === STOP) {
      return;
    }
    this.ready = true;
    if (this.queue instanceof ShardedQueue && own.cluster) {
      // Its blocking waits go to several nodes, a slice each: close() waits one out (blockSliceMs).
      return;
    }
    try {
      this.ownClientId = String(await own.send(['CLIENT', 'ID'], this.queue.name));
    } catch {
      // No CLIENT for this ACL user: close() then waits out a BLOCK (at most blockMs).
    }
  }

  /** The start-up line: which queue and layout, where, how many at once. A server without the module fails here. */
  private async banner(): Promise<void> {
    let layout = 'unknown';
    const own = this.own;
    if (own !== undefined) {
      try {
        const first = this.queue instanceof ShardedQueue ? (this.queue.subQueues[0] as Queue) : this.queue;
        const stats = await unlessStopped(first.runOn(own, commands.stats), this.stopped);
        layout = stats === STOP ? layout : stats.layout;
      } catch (error) {
        if (isPermanent(error)) {
          throw error;
        }
      }
    }
    const over = this.queue instanceof ShardedQueue ? `, over ${this.queue.shards} sub-queues` : '';
    this.logger.info(
      `vtrr worker: queue ${this.queue.name} (layout ${layout}${over}) on ${this.queue.transport.server}, ` +
        `concurrency ${this.concurrency}, lease ${this.leaseMs} ms`,
    );
  }

  private async rounds(): Promise<void> {
    const own = this.own;
    if (own === undefined) {
      return;
    }
    let pause = 0;
    for (;;) {
      const now = performance.now();
      if (this.closing && (this.running.size === 0 || now >= this.deadline)) {
        return;
      }
      const plan = this.plan(now, !this.closing);
      if (plan === null) {
        await this.nap(this.napMs(now));
        continue;
      }
      this.blocking = plan.round.blockMs !== undefined;
      let result: RoundResult | typeof STOP;
      try {
        result = await unlessStopped(this.queue.exchange(plan.round, own), this.stopped);
      } catch (error) {
        if (isPermanent(error)) {
          throw error;
        }
        // Sent again next time (the settling stays), renewals at once; the client reconnects meanwhile.
        this.nextRenewAt = 0;
        this.reach.failed(asError(error));
        pause = Math.min(5_000, Math.max(100, pause * 2));
        await this.nap(pause);
        continue;
      } finally {
        this.blocking = false;
      }
      if (result === STOP) {
        return;
      }
      pause = 0;
      this.reach.ok();
      const leased = this.absorb(plan, result, performance.now());
      if (this.closing && leased.length > 0) {
        await this.giveBack(leased);
        continue;
      }
      for (const job of leased) {
        this.start(job);
      }
      // Let handlers that finish in this turn do so: the next round settles them with the next lease.
      await nextTurn();
    }
  }

  /** Jobs leased by a round trip under way when close() came: back to the queue unrun. */
  private async giveBack(jobs: Job[]): Promise<void> {
    for (const job of jobs) {
      this.logger.warn(`stopping: ${job.id} goes back to the queue unrun`);
      job.stop(new JobReleasedError('the worker is closing: the item went back to the queue'));
    }
    const own = this.own;
    if (own === undefined) {
      return;
    }
    const round: Round = {
      leaseMs: this.leaseMs,
      acks: [],
      charges: [],
      results: [],
      nacks: jobs.map((job) => ({ lease: job, release: true })),
      renewals: [],
      count: 0,
    };
    try {
      await unlessStopped(this.queue.exchange(round, own), this.stopped);
    } catch (error) {
      this.logger.warn(`giving them back failed (${asError(error).message}): their leases will expire`);
    }
  }

  /** Settle what finished, give back what still runs (the grace is over). */
  private async lastRound(): Promise<void> {
    const own = this.own;
    const plan = this.plan(performance.now(), false);
    const settlingJobs = new Set(this.settling.map((outcome) => outcome.job));
    const abandoned = [...this.running.values()].filter((job) => !settlingJobs.has(job) && !job.lost);
    for (const job of abandoned) {
      this.logger.warn(`stopping: ${job.id} goes back to the queue unrun`);
      job.stop(new JobReleasedError('the worker closed before the job finished: the item went back to the queue'));
      this.running.delete(job.token);
    }
    const releases: GiveBack[] = abandoned.map((job) => ({ lease: job, release: true }));
    if (own === undefined || (plan === null && releases.length === 0)) {
      return;
    }
    const base = plan ?? {
      round: { leaseMs: this.leaseMs, acks: [], charges: [], results: [], nacks: [], renewals: [], count: 0 },
      acked: [],
      charged: [],
      returned: [],
      nacked: [],
      renewed: [],
    };
    const round: Round = { ...base.round, nacks: [...base.round.nacks, ...releases], renewals: [], count: 0 };
    const last: Plan = { ...base, round, renewed: [] };
    const timeout = new Promise<void>((resolve) => setTimeout(resolve, LAST_ROUND_MS).unref());
    try {
      const result = await unlessStopped(this.queue.exchange(round, own), timeout);
      if (result === STOP) {
        this.logger.warn('the last round trip took too long: its leases will expire');
        return;
      }
      // The releases' replies come after the plan's NACKs; absorb reads only those.
      this.absorb(last, result, performance.now());
    } catch (error) {
      this.logger.warn(`the last round trip failed (${asError(error).message}): its leases will expire`);
    }
  }

  /** Waits `ms`, or until a handler finishes or close() is called. */
  private nap(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.wake = () => {
        this.wake = undefined;
        done();
      };
    });
  }

  private napMs(now: number): number {
    const due = this.running.size > 0 ? [this.nextRenewAt - now] : [];
    if (!this.closing && this.free() > 0 && this.running.size > 0) {
      due.push(this.idleUntil - now);
    }
    return Math.max(0, Math.min(...due, LONGEST_NAP_MS));
  }

  private free(): number {
    return this.concurrency - this.running.size + this.settling.length;
  }

  private start(job: Job): void {
    this.running.set(job.token, job);
    job.startedAt = performance.now();
    this.announce('active', job);
    Promise.resolve()
      .then(() => this.handler(job))
      .then(
        (result) => this.finish(job, undefined, result),
        (thrown: unknown) => this.finish(job, asError(thrown), undefined),
      );
  }

  private finish(job: Job, error: Error | undefined, result: unknown): void {
    job.endedAt = performance.now();
    if (this.running.get(job.token) !== job) {
      return; // given back already (the grace ended): nothing to settle
    }
    this.finished.push({ job, error, result });
    this.wake?.();
  }

  /** The next round trip, or null when nothing is due. */
  private plan(now: number, leasing: boolean): Plan | null {
    for (const { job, error, result } of this.finished) {
      if (job.lost) {
        this.running.delete(job.token);
      } else {
        this.settling.push(this.outcome(job, error, result));
      }
    }
    this.finished = [];
    const succeeded = this.settling.filter((o): o is Succeeded => !isFailed(o));
    // A result goes with ACKRESULT, which reports no cost.
    const returned = succeeded.filter((o) => o.kept !== undefined);
    const acked = succeeded.filter((o) => o.kept === undefined && !this.costed(o.job));
    const charged = succeeded.filter((o) => o.kept === undefined && this.costed(o.job));
    const nacked = this.settling.filter(isFailed);
    let renewed: Job[] = [];
    if (now >= this.nextRenewAt) {
      const settlingJobs = new Set(this.settling.map((o) => o.job));
      renewed = [...this.running.values()].filter((job) => !settlingJobs.has(job) && !job.lost);
      this.nextRenewAt = now + this.leaseMs / 3;
    }
    // Nothing running: wait in the server. Else ask only with something to settle, or once the queue may have filled.
    const mayAsk = this.running.size === 0 || this.settling.length > 0 || now >= this.idleUntil;
    const count = leasing && mayAsk ? Math.max(0, this.free()) : 0;
    const round: Round = {
      leaseMs: this.leaseMs,
      acks: acked.map((o) => o.job),
      charges: charged.map((o) => ({ lease: o.job, cost: this.unreported(o.job, o.job.endedAt) })),
      results: returned.map((o) => ({ lease: o.job, result: o.kept as string | Buffer })),
      nacks: nacked.map((o) => ({
        lease: o.job,
        reason: failureReason(o.error),
        ...(o.dead === true ? { dead: true } : {}),
        ...(o.delayMs === undefined ? {} : { delayMs: o.delayMs }),
      })),
      renewals: renewed.map(
        (job): Renewal => (this.costed(job) ? { lease: job, cost: this.unreported(job, now) } : { lease: job }),
      ),
      count,
      ...(count > 0 && this.running.size === 0 ? { blockMs: this.blockMs } : {}),
    };
    return isEmpty(round) ? null : { round, acked, charged, returned, nacked, renewed };
  }

  /** Reads a round trip's replies; the jobs it leased, to start. */
  private absorb(plan: Plan, result: RoundResult, now: number): Job[] {
    for (const [i, outcome] of plan.acked.entries()) {
      this.acked(outcome, result.acked[i] === true);
    }
    for (const [i, outcome] of plan.charged.entries()) {
      this.acked(outcome, result.charged[i] === true);
    }
    for (const [i, outcome] of plan.returned.entries()) {
      this.acked(outcome, result.returned[i] === true);
    }
    for (const [i, outcome] of plan.nacked.entries()) {
      this.nacked(outcome, result.nacked[i] ?? null);
    }
    this.settling = [];
    plan.renewed.forEach((job, i) => {
      const renewal = plan.round.renewals[i];
      if (result.renewed[i] === false) {
        this.lose(job);
      } else if (result.renewed[i] === true && renewal?.cost !== undefined) {
        job.charged += renewal.cost;
      }
    });
    const { count } = plan.round;
    if (count > 0 && result.leases.length < count) {
      this.idleUntil = now + IDLE_POLL_MS;
    }
    if (count > 0 && result.leases.length === 0 && !this.drainedSaid) {
      this.drainedSaid = true;
      this.announce('drained');
    } else if (result.leases.length > 0) {
      this.drainedSaid = false;
    }
    return result.leases.map((lease) => new Job(lease, this.queue.name));
  }

  private outcome(job: Job, error: Error | undefined, result: unknown): Outcome {
    if (error === undefined) {
      return { job, result, kept: this.kept(job, result) };
    }
    if (error instanceof UnrecoverableError) {
      return { job, error, dead: true };
    }
    if (error instanceof RetryError && error.delayMs !== undefined) {
      return { job, error, delayMs: error.delayMs };
    }
    return { job, error, delayMs: this.delayFor(job, error) };
  }

  /** `jobResult(result)`; undefined, said in the log, for one that cannot be kept: the job did its work, so it is acked. */
  private kept(job: Job, result: unknown): string | Buffer | undefined {
    try {
      return jobResult(result);
    } catch (thrown) {
      this.logger.warn(`${job.id}: its handler's return value is not kept as its result: ${asError(thrown).message}`);
      return undefined;
    }
  }

  private delayFor(job: Job, error: Error): number {
    try {
      const delay = this.backoff(job.nacks, error);
      return Math.min(MAX_MS, Math.max(0, Math.round(Number.isFinite(delay) ? delay : 0)));
    } catch (thrown) {
      // A broken backoff must not lose the item: retry at once.
      this.logger.warn(`the backoff function threw (${asError(thrown).message}): ${job.id} is retried at once`);
      return 0;
    }
  }

  private costed(job: Job): boolean {
    return this.cost === 'time' || job.reported !== undefined;
  }

  /** What `job` has cost and no renewal has charged yet: its reports, else (cost 'time') its run time in ms. */
  private unreported(job: Job, at: number): number {
    const total = job.reported ?? Math.max(1, Math.round(at - job.startedAt));
    return Math.min(MAX_COST, Math.max(0, total - job.charged));
  }

  /** A succeeded job's ACK came back: `took` false when the lease was lost. */
  private acked(outcome: Succeeded, took: boolean): void {
    const { job } = outcome;
    this.running.delete(job.token);
    if (!took) {
      this.lose(job);
      return;
    }
    this.logger.info(`${job.id} (partition ${job.partition}) done in ${seconds(job.endedAt - job.startedAt)}`);
    this.announce('completed', job, outcome.result);
  }

  /** A failed job's NACK came back: where its item went, or null when the lease was lost. */
  private nacked(outcome: Failed, went: NackOutcome | null): void {
    const { job, error } = outcome;
    this.running.delete(job.token);
    if (went === null) {
      this.lose(job);
      return;
    }
    let why = 'retry now';
    if (went === 'dead') {
      why = outcome.dead === true ? 'dead-lettered' : "dead-lettered by the queue's MAX-NACKS";
    } else if (went === 'delayed') {
      why = `retry in ${outcome.delayMs} ms`;
    }
    const ran = seconds(job.endedAt - job.startedAt);
    this.logger.warn(
      `${job.id} (partition ${job.partition}) failed after ${ran} (${error.name}: ${error.message}): ${why}`,
    );
    const failure: Failure = went === 'delayed' ? { state: went, delayMs: outcome.delayMs ?? 0 } : { state: went };
    this.announce('failed', job, error, failure);
  }

  private lose(job: Job): void {
    if (job.stopped) {
      return;
    }
    job.stop(new LeaseLostError(`the lease of ${job.id} was lost: it will not be acked`));
    this.logger.warn(`lease of ${job.id} was lost: not acked`);
    this.announce('lost', job);
  }
}

function backoffOf(backoff: Backoff): (nacks: number, error: unknown) => number {
  if (typeof backoff === 'function') {
    return backoff;
  }
  const maxDelay = checkInt('backoff.maxDelay', backoff.maxDelay ?? 3_600_000, 0, MAX_MS);
  const delay = checkInt('backoff.delay', backoff.delay ?? 1_000, 0, maxDelay);
  const jitter = backoff.jitter ?? 0.5;
  if (typeof jitter !== 'number' || !(jitter >= 0 && jitter <= 1)) {
    throw new RangeError('backoff.jitter must be between 0 and 1');
  }
  return (nacks) => {
    const full = Math.min(maxDelay, delay * 2 ** Math.min(nacks, 62));
    return Math.floor(full - full * jitter * Math.random());
  };
}
