/** What the commands take and reply, as typed values. */

/** A queue's storage layout (VTRR.STATS `layout`, VTRR.CONVERT). */
export type Layout = 'keys' | 'native';

/**
 * An id, partition or schedule name: a string (sent as UTF-8) or bytes.
 * The server takes any bytes; replies decode them as UTF-8.
 */
export type Name = string | Uint8Array;

/** A payload: bytes, or a string sent as UTF-8. The server never parses it. */
export type Payload = string | Uint8Array;

/** One item to enqueue: its partition (tenant), id, payload and weight (its cost, 1 by default). */
export interface Item {
  readonly partition: Name;
  readonly id: Name;
  readonly payload: Payload;
  readonly weight?: number;
}

/** A lease's identity: ACK, RENEW and NACK need its id and token. */
export interface Fenced {
  readonly id: Name;
  readonly token: string;
  /** The id's bytes as the server sent them (a `Lease` carries them): what fenced calls send. */
  readonly idBytes?: Uint8Array;
}

/** A leased item. */
export interface Lease extends Fenced {
  /** The id, decoded as UTF-8 (`idBytes` holds the bytes, which fenced calls send). */
  readonly id: string;
  readonly idBytes: Buffer;
  readonly payload: Buffer;
  readonly token: string;
  /** How many times this item's lease expired before (0 on first delivery). */
  readonly timeouts: number;
  /** How many times a worker nacked it. */
  readonly nacks: number;
  /** The partition it was queued in (empty when the server could not read it). */
  readonly partition: string;
}

/**
 * A leased item of a `ShardedQueue`: a `Lease` whose payload is the
 * producer's own (the envelope removed), which remembers the sub-queue it
 * came from, so its ACK, RENEW and NACK go back there.
 */
export interface ShardedLease extends Lease {
  /** The index of the sub-queue it was leased from (`{name:shard}`). */
  readonly shard: number;
  /** Its weight, as the producer wrote it in the envelope (1 without one). */
  readonly weight: number;
}

/** A lease of a `ShardedQueue`'s: its identity and the index of its sub-queue. */
export interface ShardedFenced extends Fenced {
  readonly shard: number;
}

/** Where a nacked item went (`VTRR.NACK ... WITHSTATE`); `dead` also when the queue's MAX-NACKS buried it. */
export type NackOutcome = 'queued' | 'delayed' | 'dead';

/** `VTRR.LEASE ... ACK`: which acks took (in the order given), then the leases. */
export interface AckedLeases {
  /** Per lease given: true when it was current and its item is done. */
  readonly acked: boolean[];
  readonly leases: Lease[];
}

/**
 * Counters of what a queue or a partition was served, as it goes: a
 * partition's since its record last appeared, the queue's since it was made.
 */
export interface Totals {
  readonly enqueued: number;
  readonly leased: number;
  readonly acked: number;
  readonly nacked: number;
  readonly dead: number;
  readonly expired: number;
}

/** VTRR.STATS: the queue's counts. */
export interface Stats {
  /** Every item waiting (in `queue` and in `held`). */
  readonly queued: number;
  /** Of the queued, those held back (paused, at a cap, throttled, or behind their partition's head). */
  readonly held: number;
  readonly inflight: number;
  /** Leases past their expiry, not yet reclaimed. */
  readonly expired: number;
  readonly delayed: number;
  readonly dead: number;
  readonly partitions: number;
  /** Partitions with items queued, held ones included (a paused partition, or one at its cap, that still has items counts): O(1) to read. */
  readonly queuedPartitions: number;
  readonly pausedPartitions: number;
  readonly cappedPartitions: number;
  readonly currentVirtualTime: number;
  /** When the earliest delayed item falls due (Unix ms); null when none is delayed. */
  readonly nextDueMs: number | null;
  /** The earliest lease expiry (Unix ms); null when nothing is in flight. */
  readonly nextExpiryMs: number | null;
  readonly layout: Layout;
  /** How long the longest-waiting partition's line has gone unserved (ms); null when nothing is queued. */
  readonly oldestWaitingMs: number | null;
  readonly totals: Totals;
  /** The whole tokens in the queue's own bucket now (VTRR.POLICY ... RATE); null without a queue rate. */
  readonly tokens: number | null;
}

/**
 * A rate limit: `amount` weight units per `perMs` ms, at most `burst` at
 * once (`amount` when unset), enforced at LEASE; a partition's (VTRR.LIMIT
 * ... RATE), the queue's default (DEFAULT-RATE) or the queue's own
 * (VTRR.POLICY ... RATE).
 */
export interface Rate {
  readonly amount: number;
  readonly perMs: number;
  readonly burst?: number;
}

/** What VTRR.SCHEDULE does with runs that fell due while none could fire. */
export type Missed = 'skip' | 'one' | 'all';

/** The rankings of VTRR.PARTITIONS ... TOP: most queued, longest waiting, most leased at their cap, most dead. */
export type Rank = 'queued' | 'oldest' | 'leased' | 'dead';

/** VTRR.PARTITIONS: one partition's counts and settings. */
export interface PartitionView {
  readonly partition: string;
  readonly queued: number;
  readonly held: number;
  readonly leased: number;
  readonly delayed: number;
  readonly dead: number;
  readonly paused: boolean;
  readonly share: number;
  /** Its own cap; null without one. */
  readonly concurrency: number | null;
  /** Its own cap, else the queue's DEFAULT-CONCURRENCY; null without either. */
  readonly concurrencyInForce: number | null;
  readonly virtualTime: number | null;
  /** How long its line has gone unserved (ms); null with nothing queued. */
  readonly waitingMs: number | null;
  readonly totals: Totals;
  readonly rate: Rate | null;
  /** Its own rate, else the queue's DEFAULT-RATE. */
  readonly rateInForce: Rate | null;
  /** The whole tokens its bucket holds (negative while it pays back an overdraft); null without a rate. */
  readonly tokens: number | null;
  /** When its next token is due (Unix ms) while it holds none; else null. */
  readonly nextTokenMs: number | null;
  /** Its own MAX-QUEUED (the most items it may have waiting: queued or delayed); null without one. */
  readonly maxQueued: number | null;
  /** Its own MAX-QUEUED, else the queue's DEFAULT-MAX-QUEUED; null without either. */
  readonly maxQueuedInForce: number | null;
}

/** One step of a cursor scan: go on with `cursor` until it is `'0'`. */
export interface Page<T> {
  readonly cursor: string;
  readonly entries: T[];
}

/** VTRR.PARTITIONS ... TOP: how many partitions the ranking holds, and the page asked for. */
export interface Ranking {
  readonly ranked: number;
  readonly partitions: PartitionView[];
}

/** VTRR.LIMIT without options: a partition's own settings. */
export interface PartitionSettings {
  readonly concurrency: number | null;
  readonly paused: boolean;
  readonly share: number;
  readonly rate: Rate | null;
  /** The most items it may have waiting (queued or delayed): an enqueue past it throws PartitionFullError. */
  readonly maxQueued: number | null;
}

/**
 * VTRR.POLICY without options; null is NONE (never give up, no default cap,
 * rate or MAX-QUEUED, no queue-wide cap or rate, no finished job kept).
 */
export interface Policy {
  readonly maxTimeouts: number | null;
  readonly maxNacks: number | null;
  readonly defaultConcurrency: number | null;
  readonly defaultRate: Rate | null;
  /**
   * The queue's own cap, on top of every partition's: at most this many
   * items leased at once across the queue, the slots handed out in VTRR
   * (fair) order.
   */
  readonly concurrency: number | null;
  /** The queue's own rate: one bucket every lease spends its item's weight from, in VTRR (fair) order. */
  readonly rate: Rate | null;
  /** The MAX-QUEUED of every partition without its own. */
  readonly defaultMaxQueued: number | null;
  /** How long a finished job's outcome is kept, its result with it (ms): `result()` reads it. */
  readonly resultTtlMs: number | null;
  /** How long an enqueue of a finished job's id is skipped (ms). */
  readonly dedupMs: number | null;
}

/**
 * Where an item is (VTRR.JOB): `done` (acked) and `cancelled` once it
 * finished, while the queue's policy keeps outcomes (`resultTtlMs`,
 * `dedupMs`); `unknown`: never enqueued, or finished and nothing of it kept.
 */
export type JobState = 'queued' | 'held' | 'leased' | 'delayed' | 'dead' | 'done' | 'cancelled' | 'unknown';

/**
 * VTRR.JOB (and VTRR.RESULT): where an item is, and what the queue keeps of
 * it there; null where the state has none (a finished job keeps only
 * `finishedMs` and `result`).
 */
export interface JobStatus {
  readonly id: string;
  readonly state: JobState;
  readonly partition: string | null;
  readonly weight: number | null;
  readonly priority: number | null;
  readonly timeouts: number | null;
  readonly nacks: number | null;
  /** A leased item's lease expiry (Unix ms). */
  readonly expiresMs: number | null;
  /** A delayed item's due time (Unix ms). */
  readonly dueMs: number | null;
  /** When a dead item died (Unix ms), and why (as DeadItem.reason). */
  readonly deadMs: number | null;
  readonly reason: string | null;
  /** What its last NACK ... REASON said failed. */
  readonly lastError: string | null;
  /** When a done or cancelled job finished (Unix ms). */
  readonly finishedMs: number | null;
  /** What a done job returned (VTRR.ACKRESULT), while the queue's RESULT-TTL keeps it. */
  readonly result: Buffer | null;
}

/** VTRR.DEAD: a dead-lettered item and why it died. */
export interface DeadItem {
  readonly id: string;
  readonly idBytes: Buffer;
  readonly payload: Buffer;
  /** Null when the item's meta is unreadable. */
  readonly partition: string | null;
  readonly weight: number | null;
  readonly timeouts: number;
  readonly nacks: number;
  readonly diedAtMs: number;
  /** `max-timeouts`, `max-nacks`, `nack` (NACK ... DEAD) or `payload missing`. */
  readonly reason: string;
  /** What failed, as the last NACK with a REASON said; null when none did (or a module from before it). */
  readonly lastError: string | null;
}

/**
 * VTRR.SCHEDULES: one recurring schedule and its next runs. Each run is
 * enqueued by the server in `partition` as the item `schedule:<name>:<due-ms>`.
 * A definition another client wrote that does not read as one has only
 * `name`, `nextMs` and `runs`: the rest is null.
 */
export interface ScheduleView {
  readonly name: string;
  /** Null for a CRON schedule. */
  readonly everyMs: number | null;
  /** `cron` and `tz` are null for an EVERY schedule. */
  readonly cron: string | null;
  readonly tz: string | null;
  readonly missed: Missed | null;
  readonly partition: string | null;
  readonly weight: number | null;
  readonly payload: Buffer | null;
  /** The run it waits for (Unix ms); null when it has none ahead. */
  readonly nextMs: number | null;
  /** The next due times asked for, from `nextMs` on. */
  readonly runs: number[];
}
