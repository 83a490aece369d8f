/**
 * Each vtrr command declared once: the arguments it sends (checked before
 * anything is sent) and how its reply reads, as node-redis v5 declares its
 * commands (`parseCommand`, `transformReply`). `Queue` and the worker's
 * round trip only send these, over whichever client carries them, so every
 * client shape sends and reads the same.
 *
 * A reply reaches `transformReply` as the transports deliver it: bulk
 * strings as Buffers, maps as flat field/value arrays (RESP2's shape, and
 * RESP3's once mapped), integers as numbers, nil as null.
 */

import { InvalidArgumentError } from './errors.js';
import {
  checkInt,
  checkItemId,
  checkName,
  checkPayload,
  checkPositive,
  checkReason,
  checkResult,
  MAX_BLOCK_MS,
  MAX_COST,
  MAX_EVERY_MS,
  MAX_LIMIT,
  MAX_MS,
  MAX_OUTCOME_MS,
  MAX_PARTITIONS_COUNT,
  MAX_POLICY_LIMIT,
  MAX_PRIORITY,
  MAX_RATE_PER_MS,
  MAX_SCHEDULE_RUNS,
  MAX_SCHEDULES_COUNT,
  MAX_SHARE,
  MAX_TOP_OFFSET,
  MAX_WEIGHT,
} from './limits.js';
import type {
  AckedLeases,
  DeadItem,
  Fenced,
  Item,
  JobState,
  JobStatus,
  Layout,
  Lease,
  Missed,
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
  Totals,
} from './types.js';

/** One argument as sent: text (UTF-8) or bytes. */
export type Arg = string | Buffer;

/** One command: what it sends after the queue name, and how its reply reads. */
export interface Declaration<P extends unknown[], T> {
  /** The command, as the server's command table names it. */
  readonly command: string;
  /** The arguments after the queue name; throws on bad input, before anything is sent. */
  parseCommand(...params: P): Arg[];
  /** The reply, read. */
  transformReply(reply: unknown): T;
}

/** The whole command line of `declaration` for queue `name`. */
export function argv<P extends unknown[]>(declaration: Declaration<P, unknown>, name: string, ...params: P): Arg[] {
  return [declaration.command, name, ...declaration.parseCommand(...params)];
}

function declare<P extends unknown[], T>(declaration: Declaration<P, T>): Declaration<P, T> {
  return declaration;
}

// Reading replies.

function text(reply: unknown): string {
  return Buffer.isBuffer(reply) ? reply.toString('utf8') : String(reply);
}

function optText(reply: unknown): string | null {
  return reply === null || reply === undefined ? null : text(reply);
}

function int(reply: unknown): number {
  return typeof reply === 'number' ? reply : Number(text(reply));
}

function optInt(reply: unknown): number | null {
  return reply === null || reply === undefined ? null : int(reply);
}

function bool(reply: unknown): boolean {
  return int(reply) === 1;
}

function bytes(reply: unknown): Buffer {
  return Buffer.isBuffer(reply) ? reply : Buffer.from(String(reply));
}

function list(reply: unknown): unknown[] {
  return reply === null || reply === undefined ? [] : (reply as unknown[]);
}

/** A map reply (a flat field/value array) by field name. */
function fields(reply: unknown): Map<string, unknown> {
  const flat = list(reply);
  const map = new Map<string, unknown>();
  for (let i = 0; i + 1 < flat.length; i += 2) {
    map.set(text(flat[i]), flat[i + 1]);
  }
  return map;
}

function totals(f: Map<string, unknown>): Totals {
  return {
    enqueued: int(f.get('enqueued-total')),
    leased: int(f.get('leased-total')),
    acked: int(f.get('acked-total')),
    nacked: int(f.get('nacked-total')),
    dead: int(f.get('dead-total')),
    expired: int(f.get('expired-total')),
  };
}

function rate(f: Map<string, unknown>, prefix = '', suffix = ''): Rate | null {
  const amount = f.get(`${prefix}rate${suffix}`);
  if (amount === null || amount === undefined) {
    return null; // none set, or a module from before rates
  }
  return {
    amount: int(amount),
    perMs: int(f.get(`${prefix}per-ms${suffix}`)),
    burst: int(f.get(`${prefix}burst${suffix}`)),
  };
}

function lease(reply: unknown): Lease {
  // [id, payload, token, timeouts, nacks (WITHCOUNTERS), partition (WITHPARTITION)]
  const [id, payload, token, timeouts, nacks, partition] = reply as unknown[];
  const idBytes = bytes(id);
  return {
    id: idBytes.toString('utf8'),
    idBytes,
    payload: bytes(payload),
    token: text(token),
    timeouts: int(timeouts),
    nacks: int(nacks),
    partition: partition === undefined || partition === null ? '' : text(partition),
  };
}

function leaseOne(reply: unknown): Lease | null {
  return reply === null || reply === undefined ? null : lease(reply);
}

function leases(reply: unknown): Lease[] {
  return list(reply).map(lease);
}

function view(reply: unknown): PartitionView {
  const f = fields(reply);
  return {
    partition: text(f.get('partition')),
    queued: int(f.get('queued')),
    held: int(f.get('held')),
    leased: int(f.get('leased')),
    delayed: int(f.get('delayed')),
    dead: int(f.get('dead')),
    paused: bool(f.get('paused')),
    share: int(f.get('share')),
    concurrency: optInt(f.get('concurrency')),
    concurrencyInForce: optInt(f.get('concurrency-in-force')),
    virtualTime: optInt(f.get('virtual-time')),
    waitingMs: optInt(f.get('waiting-ms')),
    totals: totals(f),
    rate: rate(f),
    rateInForce: rate(f, '', '-in-force'),
    tokens: optInt(f.get('tokens')),
    nextTokenMs: optInt(f.get('next-token-ms')),
    maxQueued: optInt(f.get('max-queued')),
    maxQueuedInForce: optInt(f.get('max-queued-in-force')),
  };
}

/** A VTRR.JOB map (VTRR.RESULT's too). */
function jobStatus(reply: unknown): JobStatus {
  const f = fields(reply);
  const result = f.get('result');
  return {
    id: text(f.get('id')),
    state: text(f.get('state')) as JobState,
    partition: optText(f.get('partition')),
    weight: optInt(f.get('weight')),
    priority: optInt(f.get('priority')),
    timeouts: optInt(f.get('timeouts')),
    nacks: optInt(f.get('nacks')),
    expiresMs: optInt(f.get('expires-ms')),
    dueMs: optInt(f.get('due-ms')),
    deadMs: optInt(f.get('dead-ms')),
    reason: optText(f.get('reason')),
    lastError: optText(f.get('last-error')),
    // Absent from a module before finished jobs were kept.
    finishedMs: optInt(f.get('finished-ms')),
    result: result === null || result === undefined ? null : bytes(result),
  };
}

function schedule(reply: unknown): ScheduleView {
  const f = fields(reply);
  const payload = f.get('payload');
  return {
    name: text(f.get('schedule')),
    everyMs: optInt(f.get('every-ms')),
    cron: optText(f.get('cron')),
    tz: optText(f.get('tz')),
    missed: optText(f.get('missed')) as Missed | null,
    partition: optText(f.get('partition')),
    weight: optInt(f.get('weight')),
    payload: payload === null || payload === undefined ? null : bytes(payload),
    nextMs: optInt(f.get('next-ms')),
    runs: list(f.get('runs')).map(int),
  };
}

// Building arguments.

function priorityArgs(priority: number | undefined): Arg[] {
  if (priority === undefined) {
    return [];
  }
  const level = checkInt('PRIORITY', priority, -MAX_PRIORITY, MAX_PRIORITY);
  return level === 0 ? [] : ['PRIORITY', String(level)];
}

function itemArgs(items: readonly Item[]): Arg[] {
  if (!Array.isArray(items) || items.length === 0) {
    throw new InvalidArgumentError('enqueue needs at least one item');
  }
  const args: Arg[] = [];
  for (const item of items) {
    if (typeof item !== 'object' || item === null) {
      throw new TypeError('each item must be an object { partition, id, payload, weight? }');
    }
    const weight = checkInt('weight', item.weight ?? 1, 1, MAX_WEIGHT);
    args.push(checkName('partition', item.partition), checkItemId(item.id), String(weight), checkPayload(item.payload));
  }
  return args;
}

/** The bytes fenced calls send for a lease's id. */
function fencedId(lease: Fenced): Arg {
  return lease.idBytes === undefined ? checkName('id', lease.id) : checkName('id', lease.idBytes);
}

function token(lease: Fenced): Arg {
  if (typeof lease.token !== 'string' || lease.token === '') {
    throw new TypeError('a lease needs its token (a non-empty string)');
  }
  return lease.token;
}

function pairs(done: readonly Fenced[]): Arg[] {
  if (done.length === 0) {
    throw new InvalidArgumentError('ack needs at least one lease');
  }
  return done.flatMap((lease) => [fencedId(lease), token(lease)]);
}

/** A lease and what its job cost since its last report (VTRR.ACKCOST). */
export interface Charge {
  readonly lease: Fenced;
  readonly cost: number;
}

function triples(charges: readonly Charge[]): Arg[] {
  if (charges.length === 0) {
    throw new InvalidArgumentError('ackcost needs at least one lease');
  }
  return charges.flatMap(({ lease, cost }) => [
    fencedId(lease),
    token(lease),
    String(checkInt('cost', cost, 0, MAX_COST)),
  ]);
}

/** A lease and what its job returned, kept as its result (VTRR.ACKRESULT): bytes, or a string sent as UTF-8. */
export interface Returned {
  readonly lease: Fenced;
  readonly result: Payload;
}

function resultTriples(returned: readonly Returned[]): Arg[] {
  if (returned.length === 0) {
    throw new InvalidArgumentError('ackresult needs at least one lease');
  }
  return returned.flatMap(({ lease, result }) => [fencedId(lease), token(lease), checkResult(result)]);
}

function ackedLeases(reply: unknown): AckedLeases {
  const [acked, leased] = reply as unknown[];
  return { acked: list(acked).map(bool), leases: leases(leased) };
}

/** What every LEASE form sends first: the lease time, COUNT and BLOCK, the counters and partition. */
export interface LeaseOptions {
  /** How long the lease lasts (ms). */
  readonly leaseMs: number;
  /** Wait up to this long for an item (0: forever); no wait without it. */
  readonly blockMs?: number;
}

function leaseArgs(options: LeaseOptions, count: number | undefined): Arg[] {
  const args: Arg[] = [String(checkInt('lease-ms', options.leaseMs, 1, MAX_MS))];
  if (count !== undefined) {
    args.push('COUNT', String(checkPositive('COUNT', count)));
  }
  if (options.blockMs !== undefined) {
    args.push('BLOCK', String(checkInt('BLOCK timeout-ms', options.blockMs, 0, MAX_BLOCK_MS)));
  }
  // The nack count (for a retry's backoff) and the partition of every lease.
  args.push('WITHCOUNTERS', 'WITHPARTITION');
  return args;
}

/** How a NACK gives its item back: at once, after `delayMs`, dead, or released unrun (uncounted); `reason`: what failed. */
export interface NackOptions {
  readonly delayMs?: number;
  readonly dead?: boolean;
  readonly release?: boolean;
  /** What failed (1 to 4096 bytes), kept with the item as its last error; VTRR.DEAD shows it. */
  readonly reason?: string | Uint8Array;
}

/** NONE clears a setting; undefined leaves it as it is. */
export type Limit = number | 'NONE';

function limitArgs(option: string, value: Limit | undefined, low: number, high: number): Arg[] {
  if (value === undefined) {
    return [];
  }
  return [option, value === 'NONE' ? 'NONE' : String(checkInt(option, value, low, high))];
}

function rateArgs(option: string, value: Rate | 'NONE' | undefined): Arg[] {
  if (value === undefined) {
    return [];
  }
  if (value === 'NONE') {
    return [option, 'NONE'];
  }
  const args: Arg[] = [
    option,
    String(checkInt(option, value.amount, 1, MAX_LIMIT)),
    'PER',
    String(checkInt('PER', value.perMs, 1, MAX_RATE_PER_MS)),
  ];
  if (value.burst !== undefined) {
    args.push('BURST', String(checkInt('BURST', value.burst, 1, MAX_LIMIT)));
  }
  return args;
}

function ids(what: string, given: readonly Name[]): Arg[] {
  if (given.length === 0) {
    throw new InvalidArgumentError(`${what} needs at least one id`);
  }
  return given.map((id) => checkName('id', id));
}

function partitionsPage(reply: unknown): Page<PartitionView> {
  const [cursor, entries] = reply as unknown[];
  return { cursor: text(cursor), entries: list(entries).map(view) };
}

/** A recurring schedule's definition (VTRR.SCHEDULE): exactly one of `everyMs` and `cron`. */
export interface ScheduleDefinition {
  readonly everyMs?: number;
  readonly cron?: string;
  /** An IANA zone for `cron` (UTC without it). */
  readonly tz?: string;
  readonly partition: Name;
  readonly payload: Payload;
  readonly weight?: number;
  readonly missed?: Missed;
}

const MISSED: readonly Missed[] = ['skip', 'one', 'all'];
const RANKS: readonly Rank[] = ['queued', 'oldest', 'leased', 'dead'];

/** Every command of the module a client sends (all but the internal APPLY and LOAD). */
export const commands = {
  enqueue: declare({
    command: 'VTRR.ENQUEUE',
    parseCommand: (items: readonly Item[], priority?: number): Arg[] => [...priorityArgs(priority), ...itemArgs(items)],
    transformReply: int,
  }),

  defer: declare({
    command: 'VTRR.DEFER',
    parseCommand: (delayMs: number, items: readonly Item[], priority?: number): Arg[] => [
      String(checkInt('delay-ms', delayMs, 0, MAX_MS)),
      ...priorityArgs(priority),
      ...itemArgs(items),
    ],
    transformReply: int,
  }),

  /** One lease, or null when nothing came. */
  lease: declare({
    command: 'VTRR.LEASE',
    parseCommand: (options: LeaseOptions): Arg[] => leaseArgs(options, undefined),
    transformReply: leaseOne,
  }),

  /** Up to `count` leases. */
  leaseMany: declare({
    command: 'VTRR.LEASE',
    parseCommand: (count: number, options: LeaseOptions): Arg[] => leaseArgs(options, count),
    transformReply: leases,
  }),

  /** `LEASE ... ACK`: finishes `done` (fenced), then leases up to `count`. */
  ackAndLease: declare({
    command: 'VTRR.LEASE',
    parseCommand: (done: readonly Fenced[], count: number, options: LeaseOptions): Arg[] => [
      ...leaseArgs(options, count),
      'ACK',
      ...pairs(done),
    ],
    transformReply: ackedLeases,
  }),

  /** `LEASE ... ACKCOST`: finishes each lease charging its cost, then leases up to `count`. */
  ackCostAndLease: declare({
    command: 'VTRR.LEASE',
    parseCommand: (charges: readonly Charge[], count: number, options: LeaseOptions): Arg[] => [
      ...leaseArgs(options, count),
      'ACKCOST',
      ...triples(charges),
    ],
    transformReply: ackedLeases,
  }),

  /** `LEASE ... ACKRESULT`: finishes each lease keeping its result, then leases up to `count`. */
  ackResultAndLease: declare({
    command: 'VTRR.LEASE',
    parseCommand: (returned: readonly Returned[], count: number, options: LeaseOptions): Arg[] => [
      ...leaseArgs(options, count),
      'ACKRESULT',
      ...resultTriples(returned),
    ],
    transformReply: ackedLeases,
  }),

  ack: declare({
    command: 'VTRR.ACK',
    parseCommand: (done: readonly Fenced[]): Arg[] => pairs(done),
    transformReply: int,
  }),

  ackCost: declare({
    command: 'VTRR.ACKCOST',
    parseCommand: (charges: readonly Charge[]): Arg[] => triples(charges),
    transformReply: int,
  }),

  /** Fenced ACK keeping each job's result while the policy's RESULT-TTL does (a lost lease keeps nothing). */
  ackResult: declare({
    command: 'VTRR.ACKRESULT',
    parseCommand: (returned: readonly Returned[]): Arg[] => resultTriples(returned),
    transformReply: int,
  }),

  renew: declare({
    command: 'VTRR.RENEW',
    parseCommand: (held: Fenced, leaseMs: number, cost?: number): Arg[] => {
      const args = [fencedId(held), token(held), String(checkInt('lease-ms', leaseMs, 1, MAX_MS))];
      if (cost !== undefined) {
        args.push('COST', String(checkInt('cost', cost, 0, MAX_COST)));
      }
      return args;
    },
    transformReply: bool,
  }),

  /** Always WITHSTATE: where the item went, or null when the lease was no longer current. */
  nack: declare({
    command: 'VTRR.NACK',
    parseCommand: (held: Fenced, how: NackOptions = {}): Arg[] => {
      const chosen = [how.delayMs !== undefined, how.dead === true, how.release === true].filter(Boolean);
      if (chosen.length > 1) {
        throw new InvalidArgumentError('nack takes one of delayMs, dead and release');
      }
      if (how.release === true && how.reason !== undefined) {
        throw new InvalidArgumentError('REASON and RELEASE cannot be combined');
      }
      const args = [fencedId(held), token(held)];
      if (how.delayMs !== undefined) {
        args.push('DELAY', String(checkInt('DELAY ms', how.delayMs, 0, MAX_MS)));
      } else if (how.dead === true) {
        args.push('DEAD');
      } else if (how.release === true) {
        args.push('RELEASE');
      }
      if (how.reason !== undefined) {
        args.push('REASON', checkReason(how.reason));
      }
      args.push('WITHSTATE');
      return args;
    },
    transformReply: (reply: unknown): NackOutcome | null => optText(reply) as NackOutcome | null,
  }),

  reclaim: declare({
    command: 'VTRR.RECLAIM',
    parseCommand: (limit?: number): Arg[] =>
      limit === undefined ? [] : ['LIMIT', String(checkPositive('LIMIT', limit))],
    transformReply: int,
  }),

  stats: declare({
    command: 'VTRR.STATS',
    parseCommand: (): Arg[] => [],
    transformReply: (reply: unknown): Stats => {
      // Modules before this one spelled STATS' fields with underscores: both read.
      const f = new Map([...fields(reply)].map(([key, value]) => [key.replaceAll('_', '-'), value]));
      return {
        queued: int(f.get('queued')),
        held: int(f.get('held')),
        inflight: int(f.get('inflight')),
        expired: int(f.get('expired')),
        delayed: int(f.get('delayed')),
        dead: int(f.get('dead')),
        partitions: int(f.get('partitions')),
        queuedPartitions: int(f.get('queued-partitions')),
        pausedPartitions: int(f.get('paused-partitions')),
        cappedPartitions: int(f.get('capped-partitions')),
        currentVirtualTime: int(f.get('current-virtual-time')),
        nextDueMs: optInt(f.get('next-due-ms')),
        nextExpiryMs: optInt(f.get('next-expiry-ms')),
        layout: text(f.get('layout')) as Layout,
        oldestWaitingMs: optInt(f.get('oldest-waiting-ms')),
        totals: totals(f),
        tokens: optInt(f.get('tokens')),
      };
    },
  }),

  /** The invariants the queue breaks, one sentence each; empty when it is sound. */
  check: declare({
    command: 'VTRR.CHECK',
    parseCommand: (): Arg[] => [],
    transformReply: (reply: unknown): string[] => list(reply).map(text),
  }),

  policy: declare({
    command: 'VTRR.POLICY',
    parseCommand: (): Arg[] => [],
    transformReply: (reply: unknown): Policy => {
      const f = fields(reply);
      return {
        maxTimeouts: optInt(f.get('max-timeouts')),
        maxNacks: optInt(f.get('max-nacks')),
        defaultConcurrency: optInt(f.get('default-concurrency')),
        defaultRate: rate(f, 'default-'),
        concurrency: optInt(f.get('concurrency')),
        rate: rate(f),
        defaultMaxQueued: optInt(f.get('default-max-queued')),
        resultTtlMs: optInt(f.get('result-ttl-ms')),
        dedupMs: optInt(f.get('dedup-ms')),
      };
    },
  }),

  setPolicy: declare({
    command: 'VTRR.POLICY',
    parseCommand: (settings: {
      maxTimeouts?: Limit;
      maxNacks?: Limit;
      defaultConcurrency?: Limit;
      defaultRate?: Rate | 'NONE';
      concurrency?: Limit;
      rate?: Rate | 'NONE';
      defaultMaxQueued?: Limit;
      resultTtlMs?: Limit;
      dedupMs?: Limit;
    }): Arg[] => {
      const args = [
        ...limitArgs('MAX-TIMEOUTS', settings.maxTimeouts, 0, MAX_POLICY_LIMIT),
        ...limitArgs('MAX-NACKS', settings.maxNacks, 0, MAX_POLICY_LIMIT),
        ...limitArgs('DEFAULT-CONCURRENCY', settings.defaultConcurrency, 1, MAX_LIMIT),
        ...rateArgs('DEFAULT-RATE', settings.defaultRate),
        ...limitArgs('CONCURRENCY', settings.concurrency, 1, MAX_LIMIT),
        ...rateArgs('RATE', settings.rate),
        ...limitArgs('DEFAULT-MAX-QUEUED', settings.defaultMaxQueued, 1, MAX_LIMIT),
        ...limitArgs('RESULT-TTL', settings.resultTtlMs, 1, MAX_OUTCOME_MS),
        ...limitArgs('DEDUP-MS', settings.dedupMs, 1, MAX_OUTCOME_MS),
      ];
      if (args.length === 0) {
        throw new InvalidArgumentError('setPolicy needs at least one setting');
      }
      return args;
    },
    transformReply: (): void => undefined,
  }),

  dead: declare({
    command: 'VTRR.DEAD',
    parseCommand: (count = 10): Arg[] => ['COUNT', String(checkPositive('COUNT', count))],
    transformReply: (reply: unknown): DeadItem[] =>
      list(reply).map((entry) => {
        const [id, payload, partition, weight, timeouts, nacks, diedAtMs, reason, lastError] = entry as unknown[];
        const idBytes = bytes(id);
        return {
          id: idBytes.toString('utf8'),
          idBytes,
          payload: bytes(payload),
          partition: optText(partition),
          weight: optInt(weight),
          timeouts: int(timeouts),
          nacks: int(nacks),
          diedAtMs: int(diedAtMs),
          reason: text(reason),
          lastError: optText(lastError),
        };
      }),
  }),

  jobs: declare({
    command: 'VTRR.JOB',
    parseCommand: (given: readonly Name[]): Arg[] => ids('jobs', given),
    transformReply: (reply: unknown): JobStatus[] => list(reply).map(jobStatus),
  }),

  /** A finished job's status (done, dead or cancelled), else null; with `blockMs`, waits up to that long (0: forever). */
  result: declare({
    command: 'VTRR.RESULT',
    parseCommand: (id: Name, blockMs?: number): Arg[] => [
      checkName('id', id),
      ...(blockMs === undefined ? [] : ['BLOCK', String(checkInt('BLOCK timeout-ms', blockMs, 0, MAX_BLOCK_MS))]),
    ],
    transformReply: (reply: unknown): JobStatus | null =>
      reply === null || reply === undefined ? null : jobStatus(reply),
  }),

  revive: declare({
    command: 'VTRR.REVIVE',
    parseCommand: (given: readonly Name[]): Arg[] => ids('revive', given),
    transformReply: int,
  }),

  cancel: declare({
    command: 'VTRR.CANCEL',
    parseCommand: (given: readonly Name[]): Arg[] => ids('cancel', given),
    transformReply: int,
  }),

  limit: declare({
    command: 'VTRR.LIMIT',
    parseCommand: (partition: Name): Arg[] => [checkName('partition', partition)],
    transformReply: (reply: unknown): PartitionSettings => {
      const f = fields(reply);
      return {
        concurrency: optInt(f.get('concurrency')),
        paused: bool(f.get('paused')),
        share: int(f.get('share')),
        rate: rate(f),
        maxQueued: optInt(f.get('max-queued')),
      };
    },
  }),

  setLimit: declare({
    command: 'VTRR.LIMIT',
    parseCommand: (
      partition: Name,
      settings: { concurrency?: Limit; share?: number; rate?: Rate | 'NONE'; maxQueued?: Limit },
    ): Arg[] => {
      const options = [
        ...limitArgs('CONCURRENCY', settings.concurrency, 1, MAX_LIMIT),
        ...(settings.share === undefined ? [] : ['SHARE', String(checkInt('SHARE', settings.share, 1, MAX_SHARE))]),
        ...rateArgs('RATE', settings.rate),
        ...limitArgs('MAX-QUEUED', settings.maxQueued, 1, MAX_LIMIT),
      ];
      if (options.length === 0) {
        throw new InvalidArgumentError('setLimit needs concurrency, share, rate or maxQueued');
      }
      return [checkName('partition', partition), ...options];
    },
    transformReply: (): void => undefined,
  }),

  pause: declare({
    command: 'VTRR.PAUSE',
    parseCommand: (partition: Name): Arg[] => [checkName('partition', partition)],
    transformReply: bool,
  }),

  resume: declare({
    command: 'VTRR.RESUME',
    parseCommand: (partition: Name): Arg[] => [checkName('partition', partition)],
    transformReply: bool,
  }),

  partitionsPage: declare({
    command: 'VTRR.PARTITIONS',
    parseCommand: (cursor = '0', count?: number): Arg[] => {
      const args = ['CURSOR', String(cursor)];
      if (count !== undefined) {
        args.push('COUNT', String(checkInt('COUNT', count, 1, MAX_PARTITIONS_COUNT)));
      }
      return args;
    },
    transformReply: partitionsPage,
  }),

  /** One partition's view (all zeros for one never seen). */
  partition: declare({
    command: 'VTRR.PARTITIONS',
    parseCommand: (partition: Name): Arg[] => ['PARTITION', checkName('partition', partition)],
    transformReply: (reply: unknown): PartitionView => {
      const [only] = partitionsPage(reply).entries;
      if (only === undefined) {
        throw new TypeError('VTRR.PARTITIONS ... PARTITION replied no entry');
      }
      return only;
    },
  }),

  partitionsTop: declare({
    command: 'VTRR.PARTITIONS',
    parseCommand: (count: number, by: Rank = 'queued', offset = 0): Arg[] => {
      if (!RANKS.includes(by)) {
        throw new InvalidArgumentError(`BY must be one of ${RANKS.join(', ')}`);
      }
      const args = ['TOP', String(checkInt('TOP', count, 1, MAX_PARTITIONS_COUNT)), 'BY', by];
      if (offset !== 0) {
        args.push('OFFSET', String(checkInt('OFFSET', offset, 0, MAX_TOP_OFFSET)));
      }
      return args;
    },
    transformReply: (reply: unknown): Ranking => {
      const [ranked, entries] = reply as unknown[];
      return { ranked: int(ranked), partitions: list(entries).map(view) };
    },
  }),

  recount: declare({
    command: 'VTRR.RECOUNT',
    parseCommand: (): Arg[] => [],
    transformReply: int,
  }),

  /** Sets a recurring schedule; replies its next run's due time (Unix ms). */
  schedule: declare({
    command: 'VTRR.SCHEDULE',
    parseCommand: (name: Name, definition: ScheduleDefinition): Arg[] => {
      const args: Arg[] = [checkName('schedule', name)];
      if (definition.everyMs !== undefined && definition.cron === undefined) {
        args.push('EVERY', String(checkInt('EVERY', definition.everyMs, 1, MAX_EVERY_MS)));
      } else if (definition.cron !== undefined && definition.everyMs === undefined) {
        args.push('CRON', String(definition.cron));
      } else {
        throw new InvalidArgumentError(
          definition.everyMs === undefined ? 'everyMs or cron is required' : 'everyMs and cron cannot be combined',
        );
      }
      if (definition.tz !== undefined) {
        args.push('TZ', String(definition.tz));
      }
      const missed = definition.missed ?? 'one';
      if (!MISSED.includes(missed)) {
        throw new InvalidArgumentError(`MISSED must be one of ${MISSED.join(', ')}`);
      }
      args.push(
        'PARTITION',
        checkName('partition', definition.partition),
        'PAYLOAD',
        checkPayload(definition.payload),
        'WEIGHT',
        String(checkInt('weight', definition.weight ?? 1, 1, MAX_WEIGHT)),
        'MISSED',
        missed,
      );
      return args;
    },
    transformReply: int,
  }),

  unschedule: declare({
    command: 'VTRR.UNSCHEDULE',
    parseCommand: (names: readonly Name[]): Arg[] => {
      if (names.length === 0) {
        throw new InvalidArgumentError('unschedule needs at least one schedule');
      }
      return names.map((name) => checkName('schedule', name));
    },
    transformReply: int,
  }),

  schedulesPage: declare({
    command: 'VTRR.SCHEDULES',
    parseCommand: (cursor = '0', count?: number, runs = 1): Arg[] => {
      const args = ['CURSOR', String(cursor)];
      if (count !== undefined) {
        args.push('COUNT', String(checkInt('COUNT', count, 1, MAX_SCHEDULES_COUNT)));
      }
      args.push('RUNS', String(checkInt('RUNS', runs, 0, MAX_SCHEDULE_RUNS)));
      return args;
    },
    transformReply: (reply: unknown): Page<ScheduleView> => {
      const [cursor, entries] = reply as unknown[];
      return { cursor: text(cursor), entries: list(entries).map(schedule) };
    },
  }),

  /** One schedule with its next runs; null when there is none. */
  scheduleView: declare({
    command: 'VTRR.SCHEDULES',
    parseCommand: (name: Name, runs = 1): Arg[] => [
      'SCHEDULE',
      checkName('schedule', name),
      'RUNS',
      String(checkInt('RUNS', runs, 0, MAX_SCHEDULE_RUNS)),
    ],
    transformReply: (reply: unknown): ScheduleView | null => (reply === null ? null : schedule(reply)),
  }),

  /** Moves the queue to a layout; true when it moved, false when it had it already (or does not exist). */
  convert: declare({
    command: 'VTRR.CONVERT',
    parseCommand: (layout: Layout): Arg[] => {
      if (layout !== 'keys' && layout !== 'native') {
        throw new InvalidArgumentError(`layout must be 'keys' or 'native', not '${String(layout)}'`);
      }
      return [layout.toUpperCase()];
    },
    transformReply: bool,
  }),

  /** One of the queue's logical keys, read whole, as the server replies it (a diagnostic). */
  inspect: declare({
    command: 'VTRR.INSPECT',
    parseCommand: (key: string): Arg[] => [checkName('key', key)],
    transformReply: (reply: unknown): unknown => reply,
  }),
} as const;
