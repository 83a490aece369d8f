/**
 * `ShardedQueue`: one tenant population over K sub-queues (docs/scaling.md),
 * the Python package's `vtrr.ShardedQueue` for Node, on the same keys.
 *
 * One vtrr queue lives in one hash slot, so on one shard. `new
 * ShardedQueue(client, 'files', { shards: K })` spreads a queue over the K
 * sub-queues `{files:0}` … `{files:K-1}` (their own hash tags, so a cluster
 * can place them on different shards) and puts every partition in exactly
 * one of them:
 *
 *     sub-queue(p) = fmix64(FNV-1a-64(p)) mod K
 *
 * Producers and anyone setting tenant controls must use this same function
 * and the same K (the Python package does); K must not change while items
 * are queued (changing it moves partitions: drain first).
 *
 * Producer side: `enqueue` and `enqueueMany` (with `delayMs`, VTRR.DEFER)
 * go to each item's sub-queue; per-tenant controls (`setLimit`, `pause`,
 * `resume`, `limit`, `partition`) to the partition's; `setPolicy` to every
 * sub-queue, so the queue's own cap and rate hold per sub-queue. `stats`,
 * `dead`, `check`, `partitions` and `partitionsTop` read every sub-queue.
 *
 * Worker side: `lease` runs the weighted rotation of docs/scaling.md: a
 * charge per sub-queue, weight/n_i added to sub-queue i's charge for each
 * item leased there (n_i its partitions with items queued, VTRR.STATS'
 * `queued-partitions`, O(1), re-read every `readEvery` leases), the next
 * lease from the non-empty sub-queue with the lowest charge; a sub-queue
 * back from empty rejoins at the lowest charge of the busy ones. n_i counts
 * paused partitions and those at their cap too: a sub-queue whose LEASE
 * finds nothing is treated as empty until the next read, so one with only
 * such partitions costs one LEASE per read. The LEASE reply does not
 * carry an item's weight, so every payload is wrapped in a small envelope
 * holding it (`wrap`, `unwrap`; the Python package's, byte for byte); a
 * `ShardedLease` carries the producer's own payload and remembers its
 * sub-queue, so `ack`, `renew` and `nack` go back to the right one. A
 * `Worker` takes a ShardedQueue as it takes a Queue: its round trips go
 * through `exchange`, which settles each lease in its own sub-queue (one
 * pipelined call per sub-queue concerned) and then leases by the rotation.
 *
 * A sub-queue that cannot be reached (its node down, its slot not served
 * or moving, no reply in time) is skipped for a back-off (`downMs`,
 * doubling up to `downMaxMs`) and tried again after it: the others keep
 * serving. The rotation does not wait out slot moves (waiting on one
 * sub-queue would stop leasing from all of them); `ack`, `renew`, `nack`
 * and the control methods still wait and still throw, as a Queue's do.
 */

import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  argv,
  type Charge,
  commands,
  type Declaration,
  type Limit,
  type NackOptions,
  type Returned,
} from './commands.js';
import { InvalidArgumentError, isReplyError, isTryAgain, SlotMovingError, translate, VtrrError } from './errors.js';
import { type GiveBack, isEmpty, type Renewal, type Round, type RoundResult } from './exchange.js';
import { checkInt, checkName, checkPayload, MAX_PARTITIONS_COUNT, MAX_WEIGHT } from './limits.js';
import { consoleLogger, type Logger } from './log.js';
import { type EnqueueOptions, Queue } from './queue.js';
import type { RedisConnection, Transport } from './transport.js';
import type {
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
  ShardedFenced,
  ShardedLease,
  Stats,
  Totals,
} from './types.js';

/** The most sub-queues: a cluster has 16,384 slots to spread them over. */
export const MAX_SHARDS = 16_384;

const M64 = (1n << 64n) - 1n;
const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;

const MAGIC = Buffer.from('\x1fvtrr:', 'latin1');
const SEP = 0x1f;

/** How often a settling call answered TRYAGAIN (its slot moving) is sent again. */
const TRY_AGAIN_PAUSE_MS = 50;

/**
 * A partition's sub-queue: fmix64(FNV-1a-64(its bytes)) mod `shards`, the
 * function of docs/scaling.md and of the Python package's `shard_of`. A
 * string is hashed as its UTF-8 bytes.
 */
export function shardOf(partition: Name, shards: number): number {
  checkInt('shards', shards, 1, MAX_SHARDS);
  const name = checkName('partition', partition);
  const bytes = typeof name === 'string' ? Buffer.from(name, 'utf8') : name;
  let h = FNV_OFFSET;
  for (const byte of bytes) {
    h = ((h ^ BigInt(byte)) * FNV_PRIME) & M64;
  }
  h ^= h >> 33n;
  h = (h * 0xff51afd7ed558ccdn) & M64;
  h ^= h >> 33n;
  h = (h * 0xc4ceb9fe1a85ec53n) & M64;
  h ^= h >> 33n;
  return Number(h % BigInt(shards));
}

/** The payload as a sharded queue stores it: `\x1fvtrr:<weight>\x1f` + payload (a string as UTF-8). */
export function wrap(payload: Payload, weight: number): Buffer {
  const body = checkPayload(payload);
  const digits = String(checkInt('weight', weight, 1, MAX_WEIGHT));
  return Buffer.concat([
    MAGIC,
    Buffer.from(digits, 'latin1'),
    Buffer.from([SEP]),
    typeof body === 'string' ? Buffer.from(body, 'utf8') : body,
  ]);
}

/** What `unwrap` reads of a stored payload. */
export interface Unwrapped {
  /** The weight the envelope holds (1 without one). */
  readonly weight: number;
  /** The producer's payload. */
  readonly payload: Buffer;
  /** False when the payload had no envelope (enqueued by something other than a sharded queue). */
  readonly enveloped: boolean;
}

/**
 * The weight and payload of a stored payload. One without the envelope
 * (enqueued by something other than a sharded queue) comes back whole,
 * counted as weight 1, `enveloped` false.
 */
export function unwrap(stored: Uint8Array): Unwrapped {
  const bytes = Buffer.from(stored.buffer, stored.byteOffset, stored.byteLength);
  if (bytes.subarray(0, MAGIC.length).equals(MAGIC)) {
    const end = bytes.indexOf(SEP, MAGIC.length);
    const digits = end > 0 ? bytes.toString('latin1', MAGIC.length, end) : '';
    const weight = /^[0-9]+$/.test(digits) ? Number(digits) : 0;
    if (weight >= 1 && weight <= MAX_WEIGHT) {
      return { weight, payload: bytes.subarray(end + 1), enveloped: true };
    }
  }
  return { weight: 1, payload: bytes, enveloped: false };
}

/**
 * A sub-queue could not be reached in time, or none of them can: what the
 * rotation throws when it has nothing else to lease from (a Worker backs
 * off and logs it, as it does a connection's failure).
 */
export class SubQueueUnreachableError extends VtrrError {
  override name = 'SubQueueUnreachableError';
}

const UNREACHABLE_REPLY = /^(TRYAGAIN|CLUSTERDOWN|MOVED|ASK|LOADING|MASTERDOWN|READONLY)\b/;

/**
 * Whether `error` says a sub-queue cannot be reached now (its node refuses,
 * times out, does not serve its slot, or the slot is moving), rather than a
 * mistake a back-off would hide (the module's own errors, a wrong argument).
 */
function isUnreachable(error: unknown): boolean {
  if (error instanceof SubQueueUnreachableError || error instanceof SlotMovingError) {
    return true;
  }
  if (error instanceof VtrrError || error instanceof TypeError || error instanceof RangeError) {
    return false;
  }
  if (isReplyError(error)) {
    return UNREACHABLE_REPLY.test(error.message);
  }
  return error instanceof Error;
}

export interface ShardedQueueOptions {
  /** How many sub-queues (1 to 16,384); the same K as every producer's and worker's. */
  readonly shards: number;
  /** How many of this queue's leases between two reads of the sub-queues' partitions with items queued (16; VTRR.STATS, O(1)). */
  readonly readEvery?: number;
  /** How long one blocking LEASE waits on one sub-queue before all of them are looked at again (100 ms). */
  readonly blockSliceMs?: number;
  /** How long a control call or a settling one waits out its slot's move (TRYAGAIN); 30 s by default. */
  readonly retryMs?: number;
  /** How long the rotation first skips a sub-queue it could not reach (1 s); doubled at each failed retry. */
  readonly downMs?: number;
  /** The longest such back-off (30 s). */
  readonly downMaxMs?: number;
  /**
   * On a cluster, how long one call of the rotation or of a round trip's
   * settling may take (beyond a blocking wait) before its sub-queue counts
   * as unreachable (1 s): a dead node must not stall the others.
   */
  readonly probeTimeoutMs?: number;
  /** Where a sub-queue's going and coming back are said (stderr at info by default). */
  readonly logger?: Logger;
}

/**
 * VTRR.STATS over every sub-queue: the counts and `totals` summed (a
 * partition is in one sub-queue only, so nothing is counted twice),
 * `nextDueMs` and `nextExpiryMs` the earliest of any sub-queue,
 * `oldestWaitingMs` the longest, `tokens` the sum of the buckets of the
 * sub-queues with a queue rate (null when none has one). Virtual times and
 * layouts do not add up: each sub-queue's own `Stats` is in `shards`.
 */
export interface ShardedStats extends Omit<Stats, 'currentVirtualTime' | 'layout'> {
  readonly shards: readonly Stats[];
}

/** What one round trip's settling sends to one sub-queue, and where each reply goes back. */
interface Settling {
  readonly acks: Fenced[];
  readonly charges: Charge[];
  readonly results: Returned[];
  readonly nacks: GiveBack[];
  readonly renewals: Renewal[];
  readonly at: { acks: number[]; charges: number[]; results: number[]; nacks: number[]; renewals: number[] };
}

function earliest(values: readonly (number | null)[]): number | null {
  const present = values.filter((v): v is number => v !== null);
  return present.length > 0 ? Math.min(...present) : null;
}

function longest(values: readonly (number | null)[]): number | null {
  const present = values.filter((v): v is number => v !== null);
  return present.length > 0 ? Math.max(...present) : null;
}

function total(values: readonly (number | null)[]): number | null {
  const present = values.filter((v): v is number => v !== null);
  return present.length > 0 ? present.reduce((a, b) => a + b, 0) : null;
}

function sum(values: readonly number[]): number {
  return values.reduce((a, b) => a + b, 0);
}

const TOTALS: readonly (keyof Totals)[] = ['enqueued', 'leased', 'acked', 'nacked', 'dead', 'expired'];

/** Each ranking of `partitionsTop` as the server orders it: the most (or the longest waiting) first, ties by name. */
const RANKED_BY: Record<Rank, (view: PartitionView) => number> = {
  queued: (view) => -view.queued,
  oldest: (view) => -(view.waitingMs ?? 0),
  leased: (view) => -view.leased,
  dead: (view) => -view.dead,
};

/** One queue's tenants over K sub-queues `{name:0}` … `{name:K-1}`, leased by the weighted rotation. */
export class ShardedQueue {
  /** The queue's name, without braces: its sub-queues are `{name:i}`. */
  readonly name: string;
  /** K: how many sub-queues. */
  readonly shards: number;
  /** The sub-queues, in order: `subQueues[i]` is `{name:i}`. */
  readonly subQueues: readonly Queue[];
  /** How commands reach the server (a Worker opens its own connection from it). */
  readonly transport: Transport;
  /** How many leases between two reads of the sub-queues' partitions with items queued. */
  readonly readEvery: number;
  /** How long one blocking LEASE waits on one sub-queue. */
  readonly blockSliceMs: number;
  /** How long a control or settling call waits out its slot's move. */
  readonly retryMs: number;
  /** The first back-off of a sub-queue that cannot be reached. */
  readonly downMs: number;
  /** The longest such back-off. */
  readonly downMaxMs: number;
  /** On a cluster, how long a call of the rotation or of the settling may take beyond its wait. */
  readonly probeTimeoutMs: number;
  private readonly logger: Logger;

  // The weighted rotation: this queue's own state (one worker's, in docs/scaling.md's terms).
  private charge: number[];
  private backlogged: number[];
  private sinceRead: number;
  /** The sub-queue the next blocking wait goes to. */
  private turn = 0;
  // Sub-queues that could not be reached: skipped until `downUntil` (performance.now() ms);
  // `downFor` is the back-off in force, 0 when up.
  private readonly downUntil: number[];
  private readonly downFor: number[];
  private lastError: unknown;

  /**
   * `client`: a node-redis client or cluster, or an ioredis client (all
   * sub-queues then on its one server). `name` must not contain braces:
   * the sub-queues' names are hash tags of their own.
   */
  constructor(client: RedisConnection, name: string, options: ShardedQueueOptions) {
    if (typeof name !== 'string' || name === '') {
      throw new InvalidArgumentError('queue name must not be empty');
    }
    if (name.includes('{') || name.includes('}')) {
      throw new InvalidArgumentError(
        `sharded queue name '${name}' must not contain braces: ` +
          'its sub-queues are named {name:0} ... {name:K-1}, each its own hash tag',
      );
    }
    if (typeof options !== 'object' || options === null) {
      throw new TypeError('a ShardedQueue needs its options, { shards: K } at least');
    }
    this.shards = checkInt('shards', options.shards, 1, MAX_SHARDS);
    this.readEvery = checkInt('readEvery', options.readEvery ?? 16, 1, Number.MAX_SAFE_INTEGER);
    this.blockSliceMs = checkInt('blockSliceMs', options.blockSliceMs ?? 100, 1, 3_600_000);
    this.retryMs = checkInt('retryMs', options.retryMs ?? 30_000, 0, Number.MAX_SAFE_INTEGER);
    this.downMaxMs = checkInt('downMaxMs', options.downMaxMs ?? 30_000, 1, Number.MAX_SAFE_INTEGER);
    this.downMs = checkInt('downMs', options.downMs ?? 1_000, 1, this.downMaxMs);
    this.probeTimeoutMs = checkInt('probeTimeoutMs', options.probeTimeoutMs ?? 1_000, 1, 3_600_000);
    this.logger = options.logger ?? consoleLogger();
    this.name = name;
    this.subQueues = Array.from(
      { length: this.shards },
      (_, i) => new Queue(client, `{${name}:${i}}`, { retryMs: this.retryMs }),
    );
    this.transport = (this.subQueues[0] as Queue).transport;
    this.charge = new Array<number>(this.shards).fill(0);
    this.backlogged = new Array<number>(this.shards).fill(0);
    this.sinceRead = this.readEvery; // read before the first lease
    this.downUntil = new Array<number>(this.shards).fill(0);
    this.downFor = new Array<number>(this.shards).fill(0);
  }

  // Routing.

  /** The index of the partition's sub-queue. */
  shardOf(partition: Name): number {
    return shardOf(partition, this.shards);
  }

  /** The partition's sub-queue (a Queue: anything it does there, such as `cancel`, stays in that sub-queue). */
  queueFor(partition: Name): Queue {
    return this.subQueue(this.shardOf(partition));
  }

  private subQueue(shard: number): Queue {
    return this.subQueues[shard] as Queue;
  }

  /** The index of a lease's sub-queue; TypeError for a lease that is not this queue's. */
  private shardOfLease(lease: Fenced): number {
    const shard = (lease as Partial<ShardedFenced>).shard;
    if (typeof shard !== 'number' || !Number.isInteger(shard) || shard < 0 || shard >= this.shards) {
      throw new TypeError(
        `a ShardedQueue settles its own leases (they carry their sub-queue's index), not ${lease.id}`,
      );
    }
    return shard;
  }

  /** Each sub-queue's items, wrapped; every item checked (as the command checks it) before any is sent. */
  private split(items: readonly Item[], check: (group: Item[]) => void): Map<number, Item[]> {
    if (!Array.isArray(items)) {
      throw new TypeError('items must be an array of { partition, id, payload, weight? }');
    }
    const groups = new Map<number, Item[]>();
    for (const item of items) {
      if (typeof item !== 'object' || item === null) {
        throw new TypeError('each item must be an object { partition, id, payload, weight? }');
      }
      const weight = checkInt('weight', item.weight ?? 1, 1, MAX_WEIGHT);
      const shard = this.shardOf(item.partition);
      const group = groups.get(shard) ?? [];
      group.push({ partition: item.partition, id: item.id, payload: wrap(item.payload, weight), weight });
      groups.set(shard, group);
    }
    if (groups.size === 0) {
      groups.set(0, []); // no item at all: the first sub-queue's command refuses it, as a Queue's does
    }
    for (const group of groups.values()) {
      check(group);
    }
    return groups;
  }

  // Adding items.

  /**
   * Adds one item to its partition's sub-queue; false when its id is
   * already there (or finished within the policy's `dedupMs`).
   * PartitionFullError when its partition has its MAX-QUEUED items waiting.
   */
  async enqueue(partition: Name, id: Name, payload: Payload, options: EnqueueOptions = {}): Promise<boolean> {
    const item = { partition, id, payload, ...(options.weight === undefined ? {} : { weight: options.weight }) };
    return (await this.enqueueMany([item], options)) === 1;
  }

  /**
   * Adds items, one atomic VTRR.ENQUEUE (VTRR.DEFER with `delayMs`) per
   * sub-queue, in turn; how many were new. Atomic per sub-queue only: every
   * item is checked first (a bad one refuses the whole call before anything
   * is sent), but a server's refusal on one sub-queue (PartitionFullError
   * refuses its sub-queue's items whole) leaves the calls before it done and
   * sends none after it. A priority is strict within each sub-queue: the
   * rotation between sub-queues knows no levels.
   */
  async enqueueMany(items: readonly Item[], options: Omit<EnqueueOptions, 'weight'> = {}): Promise<number> {
    const { priority, delayMs } = options;
    const groups = this.split(items, (group) =>
      delayMs === undefined
        ? commands.enqueue.parseCommand(group, priority)
        : commands.defer.parseCommand(delayMs, group, priority),
    );
    let added = 0;
    for (const [shard, group] of groups) {
      added += await this.subQueue(shard).enqueueMany(group, options);
    }
    return added;
  }

  // Sub-queues that cannot be reached.

  private isDown(shard: number): boolean {
    return performance.now() < (this.downUntil[shard] ?? 0);
  }

  /** `shard` could not be reached: skipped for a back-off, doubled at each failed retry. */
  private failed(shard: number, error: unknown): void {
    const before = this.downFor[shard] ?? 0;
    const first = before === 0;
    const backOff = first ? this.downMs : Math.min(this.downMaxMs, 2 * before);
    this.downFor[shard] = backOff;
    this.downUntil[shard] = performance.now() + backOff;
    this.backlogged[shard] = 0;
    this.lastError = error;
    if (first) {
      // One line when it goes, one when it comes back.
      const why = error instanceof Error ? error.message : String(error);
      this.logger.warn(
        `${this.subQueue(shard).name}: cannot be reached (${why}); skipped, tried again in ${backOff} ms`,
      );
    }
  }

  private reached(shard: number): void {
    if ((this.downFor[shard] ?? 0) > 0) {
      this.downFor[shard] = 0;
      this.downUntil[shard] = 0;
      this.logger.warn(`${this.subQueue(shard).name}: reachable again`);
    }
  }

  /** `work` (a call to a sub-queue's node), given up on a cluster after `probeTimeoutMs` beyond `waitMs`. */
  private async bounded<T>(transport: Transport, waitMs: number, work: Promise<T>): Promise<T> {
    if (!transport.cluster) {
      return work; // every sub-queue on the one server: no live node to keep serving
    }
    work.catch(() => undefined); // an answer after the time is up is nobody's to hear
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      const ms = this.probeTimeoutMs + waitMs;
      timer = setTimeout(() => reject(new SubQueueUnreachableError(`no reply within ${ms} ms`)), ms);
    });
    try {
      return await Promise.race([work, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** One declared command to `shard` for the rotation: bounded, and a slot move not waited out. */
  private async probe<P extends unknown[], T>(
    transport: Transport,
    shard: number,
    waitMs: number,
    declaration: Declaration<P, T>,
    ...params: P
  ): Promise<T> {
    const name = this.subQueue(shard).name;
    const args = argv(declaration, name, ...params);
    try {
      return declaration.transformReply(await this.bounded(transport, waitMs, transport.send(args)));
    } catch (error) {
      if (isTryAgain(error)) {
        throw new SlotMovingError(`${name}: ${(error as Error).message}`, { cause: error });
      }
      throw translate(error, transport.server);
    }
  }

  // Leases: the weighted rotation.

  /**
   * n_i: the partitions with items queued (STATS `queued-partitions`, O(1)); 0 if it is down.
   * Paused partitions and those at their cap count while they hold items: a sub-queue with only
   * those leases nothing, and `sweep` then treats it as empty until the next read.
   */
  private async backlogOf(transport: Transport, shard: number): Promise<number> {
    if (this.isDown(shard)) {
      return 0;
    }
    let count: number;
    try {
      count = (await this.probe(transport, shard, 0, commands.stats)).queuedPartitions;
    } catch (error) {
      if (!isUnreachable(error)) {
        throw error;
      }
      this.failed(shard, error);
      return 0;
    }
    this.reached(shard);
    return count;
  }

  /** n_i for every sub-queue (0 for one that cannot be reached: it is skipped). */
  private async readCounts(transport: Transport): Promise<void> {
    const counts = await Promise.all(this.subQueues.map((_, i) => this.backlogOf(transport, i)));
    // A sub-queue back from empty rejoins at the lowest charge of the busy ones: no
    // credit for the time it had nothing.
    const busy = this.charge.filter((_, i) => (this.backlogged[i] ?? 0) > 0 && (counts[i] ?? 0) > 0);
    if (busy.length > 0) {
      const floor = Math.min(...busy);
      for (let i = 0; i < this.shards; i++) {
        if ((counts[i] ?? 0) > 0 && (this.backlogged[i] ?? 0) === 0) {
          this.charge[i] = Math.max(this.charge[i] ?? 0, floor);
        }
      }
    } else {
      // Nothing stayed busy: every sub-queue starts level, none carrying credit or debt.
      this.charge = new Array<number>(this.shards).fill(0);
    }
    this.backlogged = counts;
    this.sinceRead = 0;
  }

  private leased(shard: number, reply: Lease): ShardedLease {
    const { weight, payload } = unwrap(reply.payload);
    this.charge[shard] = (this.charge[shard] ?? 0) + weight / Math.max(this.backlogged[shard] ?? 0, 1);
    this.sinceRead += 1;
    return { ...reply, payload, shard, weight };
  }

  /** One non-blocking lease from the lowest-charged non-empty sub-queue. */
  private async sweep(transport: Transport, leaseMs: number): Promise<ShardedLease | null> {
    const fresh = this.sinceRead >= this.readEvery;
    if (fresh) {
      await this.readCounts(transport);
    }
    for (let attempt = 0; attempt < (fresh ? 1 : 2); attempt++) {
      const order = this.subQueues
        .map((_, i) => i)
        .filter((i) => (this.backlogged[i] ?? 0) > 0)
        .sort((a, b) => (this.charge[a] ?? 0) - (this.charge[b] ?? 0));
      for (const i of order) {
        let reply: Lease | null;
        try {
          reply = await this.probe(transport, i, 0, commands.lease, { leaseMs });
        } catch (error) {
          if (!isUnreachable(error)) {
            throw error;
          }
          this.failed(i, error); // the others keep serving
          continue;
        }
        this.reached(i);
        if (reply !== null) {
          return this.leased(i, reply);
        }
        // Nothing leasable (empty, or its queued partitions all paused, at their cap or
        // throttled): skipped until the next read.
        this.backlogged[i] = 0;
      }
      if (attempt === 0 && !fresh) {
        await this.readCounts(transport); // the counts were old: read them again, try once more
      }
    }
    return null;
  }

  /** What the rotation throws when no sub-queue can be reached: the caller's own back-off then. */
  private everyOneDown(): SubQueueUnreachableError {
    const last = this.lastError instanceof Error ? this.lastError.message : String(this.lastError);
    return new SubQueueUnreachableError(`${this.name}: no sub-queue can be reached (the last error: ${last})`, {
      cause: this.lastError,
    });
  }

  /** The rotation's next lease; waits up to `blockMs` (0: forever) in slices when given. */
  private async leaseOne(
    transport: Transport,
    leaseMs: number,
    blockMs: number | undefined,
  ): Promise<ShardedLease | null> {
    const deadline = blockMs === undefined || blockMs === 0 ? undefined : performance.now() + blockMs;
    for (;;) {
      const swept = await this.sweep(transport, leaseMs);
      if (swept !== null) {
        return swept;
      }
      const up = this.subQueues.map((_, step) => (this.turn + step) % this.shards).filter((i) => !this.isDown(i));
      const [i] = up;
      if (i === undefined) {
        throw this.everyOneDown();
      }
      if (blockMs === undefined) {
        return null;
      }
      this.turn = (i + 1) % this.shards;
      let waitMs = this.blockSliceMs;
      if (deadline !== undefined) {
        const left = Math.floor(deadline - performance.now());
        if (left <= 0) {
          return null;
        }
        waitMs = Math.min(waitMs, left);
      }
      let reply: Lease | null;
      try {
        reply = await this.probe(transport, i, waitMs, commands.lease, { leaseMs, blockMs: waitMs });
      } catch (error) {
        if (!isUnreachable(error)) {
          throw error;
        }
        this.failed(i, error);
        continue;
      }
      this.reached(i);
      this.sinceRead = this.readEvery; // read the counts again next time
      if (reply !== null) {
        return this.leased(i, reply);
      }
    }
  }

  /** Up to `count` leases by the rotation, one at a time; waits (up to `blockMs`) only when the first finds nothing. */
  private async leaseUpTo(
    transport: Transport,
    leaseMs: number,
    count: number,
    blockMs: number | undefined,
  ): Promise<ShardedLease[]> {
    const leases: ShardedLease[] = [];
    try {
      while (leases.length < count) {
        const got = await this.leaseOne(transport, leaseMs, undefined);
        if (got === null) {
          break;
        }
        leases.push(got);
      }
    } catch (error) {
      if (leases.length === 0 || !isUnreachable(error)) {
        throw error;
      }
      return leases; // leased already: the caller's, not left to expire
    }
    if (leases.length === 0 && count > 0 && blockMs !== undefined) {
      const got = await this.leaseOne(transport, leaseMs, blockMs);
      if (got !== null) {
        leases.push(got);
      }
    }
    return leases;
  }

  /**
   * Leases the next item across the sub-queues by the weighted rotation;
   * null when none came. Without `blockMs` it does not wait; with it, it
   * waits up to `blockMs` (0: forever) when every sub-queue looks empty: a
   * blocking LEASE of at most `blockSliceMs` on one sub-queue at a time, in
   * turn, then a fresh look at all of them (an item enqueued meanwhile into
   * another sub-queue is seen within about K slices). A sub-queue that
   * cannot be reached is skipped; when none can be, it throws
   * SubQueueUnreachableError.
   */
  async lease(options: { leaseMs: number; blockMs?: number }): Promise<ShardedLease | null> {
    commands.lease.parseCommand(options);
    return this.leaseOne(this.transport, options.leaseMs, options.blockMs);
  }

  /** Up to `count` leases by the rotation, one at a time; `blockMs` as in `lease`, waited only when the first finds nothing. */
  async leaseMany(count: number, options: { leaseMs: number; blockMs?: number }): Promise<ShardedLease[]> {
    commands.leaseMany.parseCommand(count, options);
    return this.leaseUpTo(this.transport, options.leaseMs, count, options.blockMs);
  }

  /** The leases grouped by sub-queue, every one checked (and each group's arguments) before anything is sent. */
  private grouped<L extends { readonly lease: Fenced } | Fenced>(
    given: readonly L[],
    check: (group: L[]) => void,
  ): Map<number, L[]> {
    const groups = new Map<number, L[]>();
    for (const each of given) {
      const lease = 'lease' in each ? (each as { readonly lease: Fenced }).lease : (each as Fenced);
      const shard = this.shardOfLease(lease);
      groups.set(shard, [...(groups.get(shard) ?? []), each]);
    }
    if (groups.size === 0) {
      check([]); // nothing at all: refused as a Queue's call refuses it
    }
    for (const group of groups.values()) {
      check(group);
    }
    return groups;
  }

  /** Fenced ACK, one call per sub-queue concerned: how many of the leases were still current (and are now done). */
  async ack(...done: ShardedFenced[]): Promise<number> {
    const groups = this.grouped(done, (group) => commands.ack.parseCommand(group));
    const counts = await Promise.all([...groups].map(([shard, group]) => this.subQueue(shard).ack(...group)));
    return sum(counts);
  }

  /** Fenced ACK charging each partition what its job cost instead of its weight, one call per sub-queue concerned. */
  async ackCost(...charged: Charge[]): Promise<number> {
    const groups = this.grouped(charged, (group) => commands.ackCost.parseCommand(group));
    const counts = await Promise.all([...groups].map(([shard, group]) => this.subQueue(shard).ackCost(...group)));
    return sum(counts);
  }

  /** Fenced ACK keeping what each job returned as its result (as `Queue.ackResult`), one call per sub-queue concerned. */
  async ackResult(...returned: Returned[]): Promise<number> {
    const groups = this.grouped(returned, (group) => commands.ackResult.parseCommand(group));
    const counts = await Promise.all([...groups].map(([shard, group]) => this.subQueue(shard).ackResult(...group)));
    return sum(counts);
  }

  /** Extends a lease by `leaseMs` from now, in its sub-queue; false when it is lost (`cost` as `Queue.renew`). */
  async renew(lease: ShardedFenced, leaseMs: number, options: { cost?: number } = {}): Promise<boolean> {
    return this.subQueue(this.shardOfLease(lease)).renew(lease, leaseMs, options);
  }

  /** Gives a leased item back to its sub-queue (as `Queue.nack`): where it went, or null when the lease was lost. */
  async nack(lease: ShardedFenced, how: NackOptions = {}): Promise<NackOutcome | null> {
    return this.subQueue(this.shardOfLease(lease)).nack(lease, how);
  }

  /** Gives a leased item back unrun to its sub-queue, no nack counted; false when the lease was lost. */
  async release(lease: ShardedFenced): Promise<boolean> {
    return this.subQueue(this.shardOfLease(lease)).release(lease);
  }

  /** One sub-queue's part of a round trip (no leasing): pipelined, bounded, a slot move waited out. */
  private async settle(transport: Transport, shard: number, part: Settling, leaseMs: number): Promise<RoundResult> {
    const queue = this.subQueue(shard);
    const round: Round = { leaseMs, ...part, count: 0 };
    const deadline = performance.now() + this.retryMs;
    for (;;) {
      try {
        return await this.bounded(transport, 0, queue.exchange(round, transport));
      } catch (error) {
        if (isTryAgain(error) && performance.now() < deadline) {
          await sleep(TRY_AGAIN_PAUSE_MS);
          continue;
        }
        throw error;
      }
    }
  }

  /**
   * A worker's round trip (as `Queue.exchange`) over the sub-queues: each
   * lease is settled and renewed in its own sub-queue (one pipelined call
   * per sub-queue concerned, all at once), then the rotation leases up to
   * `round.count` items, one call each (the sub-queues live on different
   * nodes). A blocking wait lasts at most one `blockSliceMs`: the worker
   * asks again, and sees close() between two.
   *
   * A lease whose sub-queue cannot be reached is skipped for its
   * sub-queue's back-off: its ACK is answered as lost (false), its NACK as
   * null (the item comes back by its lease's expiry if the node kept it),
   * its RENEW as null, not asked (the worker's next renewal asks again).
   * Throwing instead would make the worker send the whole round again, and
   * so lease from no sub-queue until that one came back. Once something
   * was settled, a leasing that finds no sub-queue returns no leases rather
   * than throw, so the settled leases are not settled twice.
   */
  async exchange(round: Round, transport: Transport = this.transport): Promise<RoundResult> {
    const parts = new Map<number, Settling>();
    const part = (lease: Fenced): Settling => {
      const shard = this.shardOfLease(lease);
      let found = parts.get(shard);
      if (found === undefined) {
        found = {
          acks: [],
          charges: [],
          results: [],
          nacks: [],
          renewals: [],
          at: { acks: [], charges: [], results: [], nacks: [], renewals: [] },
        };
        parts.set(shard, found);
      }
      return found;
    };
    // Each kind of settling to its lease's sub-queue, with its place in
    // the round (to put the answers back in order).
    const sort = <T>(items: readonly T[], leaseOf: (item: T) => Fenced, into: (p: Settling) => [T[], number[]]) => {
      items.forEach((item, i) => {
        const [list, at] = into(part(leaseOf(item)));
        list.push(item);
        at.push(i);
      });
    };
    sort(
      round.acks,
      (lease) => lease,
      (p) => [p.acks, p.at.acks],
    );
    sort(
      round.charges,
      (charge) => charge.lease,
      (p) => [p.charges, p.at.charges],
    );
    sort(
      round.results,
      (returned) => returned.lease,
      (p) => [p.results, p.at.results],
    );
    sort(
      round.nacks,
      (give) => give.lease,
      (p) => [p.nacks, p.at.nacks],
    );
    sort(
      round.renewals,
      (renewal) => renewal.lease,
      (p) => [p.renewals, p.at.renewals],
    );
    const acked = round.acks.map(() => false);
    const charged = round.charges.map(() => false);
    const returned = round.results.map(() => false);
    const nacked: (NackOutcome | null)[] = round.nacks.map(() => null);
    const renewed: (boolean | null)[] = round.renewals.map(() => null);
    await Promise.all(
      [...parts].map(async ([shard, settling]) => {
        if (this.isDown(shard)) {
          return;
        }
        let got: RoundResult;
        try {
          got = await this.settle(transport, shard, settling, round.leaseMs);
        } catch (error) {
          if (!isUnreachable(error)) {
            throw error;
          }
          this.failed(shard, error);
          return;
        }
        this.reached(shard);
        const { at } = settling;
        at.acks.forEach((i, j) => {
          acked[i] = got.acked[j] === true;
        });
        at.charges.forEach((i, j) => {
          charged[i] = got.charged[j] === true;
        });
        at.results.forEach((i, j) => {
          returned[i] = got.returned[j] === true;
        });
        at.nacks.forEach((i, j) => {
          nacked[i] = got.nacked[j] ?? null;
        });
        at.renewals.forEach((i, j) => {
          renewed[i] = got.renewed[j] ?? null;
        });
      }),
    );
    let leases: ShardedLease[] = [];
    if (round.count > 0) {
      const blockMs =
        round.blockMs === undefined
          ? undefined
          : Math.min(round.blockMs === 0 ? this.blockSliceMs : round.blockMs, this.blockSliceMs);
      try {
        leases = await this.leaseUpTo(transport, round.leaseMs, round.count, blockMs);
      } catch (error) {
        if (!isUnreachable(error) || isEmpty({ ...round, count: 0 })) {
          throw error;
        }
      }
    }
    return { acked, charged, returned, nacked, renewed, leases };
  }

  /** Takes expired leases back now in every sub-queue (`limit` per sub-queue); how many. */
  async reclaim(options: { limit?: number } = {}): Promise<number> {
    return sum(await Promise.all(this.subQueues.map((queue) => queue.reclaim(options))));
  }

  // Reading.

  /** Every sub-queue's VTRR.STATS, added up (see `ShardedStats`). */
  async stats(): Promise<ShardedStats> {
    const each = await Promise.all(this.subQueues.map((queue) => queue.stats()));
    const totals = Object.fromEntries(TOTALS.map((field) => [field, sum(each.map((s) => s.totals[field]))]));
    return {
      queued: sum(each.map((s) => s.queued)),
      held: sum(each.map((s) => s.held)),
      inflight: sum(each.map((s) => s.inflight)),
      expired: sum(each.map((s) => s.expired)),
      delayed: sum(each.map((s) => s.delayed)),
      dead: sum(each.map((s) => s.dead)),
      partitions: sum(each.map((s) => s.partitions)),
      queuedPartitions: sum(each.map((s) => s.queuedPartitions)),
      pausedPartitions: sum(each.map((s) => s.pausedPartitions)),
      cappedPartitions: sum(each.map((s) => s.cappedPartitions)),
      nextDueMs: earliest(each.map((s) => s.nextDueMs)),
      nextExpiryMs: earliest(each.map((s) => s.nextExpiryMs)),
      oldestWaitingMs: longest(each.map((s) => s.oldestWaitingMs)),
      tokens: total(each.map((s) => s.tokens)),
      totals: totals as unknown as Totals,
      shards: each,
    };
  }

  /** Every sub-queue's VTRR.CHECK problems, each prefixed with its sub-queue's name; empty when all are sound. */
  async check(): Promise<string[]> {
    const each = await Promise.all(this.subQueues.map((queue) => queue.check()));
    return each.flatMap((problems, i) => problems.map((problem) => `${this.subQueue(i).name}: ${problem}`));
  }

  /** One partition's counts and settings, from its sub-queue. */
  async partition(partition: Name): Promise<PartitionView> {
    return this.queueFor(partition).partition(partition);
  }

  /**
   * One step of a scan over every sub-queue, sub-queue by sub-queue; go on
   * with `cursor` until it is '0'. The cursor is `sub-queue cursor * K +
   * sub-queue index` (the Python package's): a step scans one sub-queue,
   * and a page may be empty where a sub-queue ends.
   */
  async partitionsPage(options: { cursor?: string; count?: number } = {}): Promise<Page<PartitionView>> {
    const given = options.cursor ?? '0';
    const k = BigInt(this.shards);
    if (typeof given !== 'string' || !/^[0-9]+$/.test(given) || BigInt(given) >= (1n << 64n) * k) {
      throw new InvalidArgumentError(`cursor must be an integer between 0 and ${(1n << 64n) * k - 1n}`);
    }
    const cursor = BigInt(given);
    const shard = cursor % k;
    const page = await this.subQueue(Number(shard)).partitionsPage({
      cursor: String(cursor / k),
      ...(options.count === undefined ? {} : { count: options.count }),
    });
    const next = page.cursor === '0' ? (shard + 1n) % k : BigInt(page.cursor) * k + shard;
    return { cursor: String(next), entries: page.entries };
  }

  /** Every partition of every sub-queue, sub-queue by sub-queue, in bounded steps (one may come twice, as in HSCAN). */
  async *partitions(options: { count?: number } = {}): AsyncGenerator<PartitionView> {
    for (const queue of this.subQueues) {
      yield* queue.partitions(options);
    }
  }

  /**
   * The partitions of every sub-queue ranked as `Queue.partitionsTop`
   * ranks them: each sub-queue gives its first `offset + count` (the only
   * ones that can be among the first `offset + count` of all), merged by
   * the ranking and sliced; `ranked` is the sum of the sub-queues'.
   * `offset + count` is one sub-queue's TOP count: at most 10,000.
   */
  async partitionsTop(count: number, options: { by?: Rank; offset?: number } = {}): Promise<Ranking> {
    checkInt('count', count, 1, MAX_PARTITIONS_COUNT);
    const offset = checkInt('offset', options.offset ?? 0, 0, MAX_PARTITIONS_COUNT - count);
    const by = options.by ?? 'queued';
    const pages = await Promise.all(this.subQueues.map((queue) => queue.partitionsTop(offset + count, { by })));
    const key = RANKED_BY[by];
    const merged = pages
      .flatMap((page) => page.partitions)
      .sort((a, b) => key(a) - key(b) || Buffer.compare(Buffer.from(a.partition), Buffer.from(b.partition)));
    return { ranked: sum(pages.map((page) => page.ranked)), partitions: merged.slice(offset, offset + count) };
  }

  /** The oldest `count` (10) dead-lettered items of all sub-queues, oldest first, their payloads unwrapped. */
  async dead(options: { count?: number } = {}): Promise<DeadItem[]> {
    const count = options.count ?? 10;
    const each = await Promise.all(this.subQueues.map((queue) => queue.dead({ count })));
    return each
      .flat()
      .sort((a, b) => a.diedAtMs - b.diedAtMs)
      .slice(0, count)
      .map((item) => ({ ...item, payload: unwrap(item.payload).payload }));
  }

  // Item life.

  /**
   * Where each item is, in order: in the first sub-queue that knows it
   * (`unknown` when none does). `queueFor(partition).jobs(...)` asks only
   * the partition's sub-queue.
   */
  async jobs(...ids: Name[]): Promise<JobStatus[]> {
    const answers = await Promise.all(this.subQueues.map((queue) => queue.jobs(...ids)));
    return ids.map((_, i) => {
      const known = answers.find((each) => each[i]?.state !== 'unknown');
      return (known ?? answers[0])?.[i] as JobStatus;
    });
  }

  /** Where one item is: in `partition`'s sub-queue, or (without it) in the first sub-queue that knows it. */
  async job(id: Name, options: { partition?: Name } = {}): Promise<JobStatus> {
    if (options.partition !== undefined) {
      return this.queueFor(options.partition).job(id);
    }
    const [status] = await this.jobs(id);
    return status as JobStatus;
  }

  /**
   * The job's status once it finished, as `Queue.result` (waiting up to
   * `blockMs`), from `partition`'s sub-queue, or (without it) from the
   * first sub-queue that knows the id; null at once when none does (an id
   * is known from its enqueue on: wait for a job once it is enqueued, or
   * name its partition).
   */
  async result(id: Name, options: { blockMs?: number; partition?: Name } = {}): Promise<JobStatus | null> {
    const { partition, ...wait } = options;
    commands.result.parseCommand(id, wait.blockMs);
    let queue: Queue | undefined;
    if (partition === undefined) {
      const known = await Promise.all(this.subQueues.map((each) => each.job(id)));
      queue = this.subQueues[known.findIndex((status) => status.state !== 'unknown')];
    } else {
      queue = this.queueFor(partition);
    }
    return queue === undefined ? null : queue.result(id, wait);
  }

  /**
   * Puts dead items back in every sub-queue; how many. Ids are
   * deduplicated per sub-queue only: one dead in two sub-queues (two
   * partitions) is revived in both. `queueFor(partition).revive(...)`
   * asks only the partition's sub-queue.
   */
  async revive(...ids: Name[]): Promise<number> {
    return sum(await Promise.all(this.subQueues.map((queue) => queue.revive(...ids))));
  }

  /**
   * Deletes items whatever their state in every sub-queue; how many. An id
   * present in two sub-queues (two partitions) is cancelled in both;
   * `queueFor(partition).cancel(...)` asks only the partition's sub-queue.
   */
  async cancel(...ids: Name[]): Promise<number> {
    return sum(await Promise.all(this.subQueues.map((queue) => queue.cancel(...ids))));
  }

  // Settings.

  /** Each sub-queue's policy (`setPolicy` keeps them the same). */
  policies(): Promise<Policy[]> {
    return Promise.all(this.subQueues.map((queue) => queue.policy()));
  }

  /**
   * The policy of every sub-queue. VtrrError when they differ (a
   * `setPolicy` that failed part-way): one answer would then be wrong for
   * some tenants; `policies()` shows each, and `setPolicy` again sets them all.
   */
  async policy(): Promise<Policy> {
    const each = await this.policies();
    const first = JSON.stringify(each[0]);
    if (each.some((policy) => JSON.stringify(policy) !== first)) {
      throw new VtrrError(
        `${this.name}: the sub-queues' policies differ (${JSON.stringify(each)}): setPolicy sets every one`,
      );
    }
    return each[0] as Policy;
  }

  /**
   * Sets the policy (as `Queue.setPolicy`) on every sub-queue, in turn. A
   * default cap, rate or MAX-QUEUED is each sub-queue's, so it holds whole
   * for every tenant (a tenant's items all go to one). The queue's own
   * `concurrency` and `rate` hold per sub-queue: K sub-queues lease up to K
   * times the cap and spend up to K times the rate; to hold the whole to
   * about N, give N / K.
   */
  async setPolicy(settings: {
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
    commands.setPolicy.parseCommand(settings);
    for (const queue of this.subQueues) {
      await queue.setPolicy(settings);
    }
  }

  /** A partition's own settings, from its sub-queue. */
  async limit(partition: Name): Promise<PartitionSettings> {
    return this.queueFor(partition).limit(partition);
  }

  /**
   * Sets a partition's cap, share, rate and MAX-QUEUED (as `Queue.setLimit`)
   * in its sub-queue: a partition lives in one, so they hold whole. A share
   * holds within its sub-queue; the rotation counts partitions, not
   * shares, so across sub-queues it is not kept.
   */
  async setLimit(
    partition: Name,
    settings: { concurrency?: Limit; share?: number; rate?: Rate | 'NONE'; maxQueued?: Limit },
  ): Promise<void> {
    return this.queueFor(partition).setLimit(partition, settings);
  }

  /** Stops leasing a partition's items, in its sub-queue; false if it was paused already. */
  async pause(partition: Name): Promise<boolean> {
    return this.queueFor(partition).pause(partition);
  }

  /** Leases a paused partition's items again, in its sub-queue; false if it was not paused. */
  async resume(partition: Name): Promise<boolean> {
    return this.queueFor(partition).resume(partition);
  }

  /** VTRR.RECOUNT in every sub-queue: how many partition records it changed in all. */
  async recount(): Promise<number> {
    return sum(await Promise.all(this.subQueues.map((queue) => queue.recount())));
  }

  /** Moves every sub-queue to `layout`; how many moved. */
  async convert(layout: Layout): Promise<number> {
    commands.convert.parseCommand(layout);
    let moved = 0;
    for (const queue of this.subQueues) {
      moved += (await queue.convert(layout)) ? 1 : 0;
    }
    return moved;
  }

  /** VTRR.INSPECT of `key` in every sub-queue, in sub-queue order (a diagnostic). */
  inspect(key: string): Promise<unknown[]> {
    return Promise.all(this.subQueues.map((queue) => queue.inspect(key)));
  }
}
