/**
 * vtrr for Node.js: the typed client and worker of the vtrr Redis module,
 * a weighted fair job queue with leases.
 */

export {
  type Arg,
  type Charge,
  commands,
  type Declaration,
  type LeaseOptions,
  type Limit,
  type NackOptions,
  type Returned,
  type ScheduleDefinition,
} from './commands.js';
export {
  InvalidArgumentError,
  ModuleNotLoadedError,
  NoPermissionError,
  PartitionFullError,
  SlotMovingError,
  VtrrError,
  WrongTypeError,
} from './errors.js';
export type { GiveBack, Renewal, Round, RoundResult } from './exchange.js';
export { Job, JobReleasedError, LeaseLostError, RetryError, UnrecoverableError } from './job.js';
export { consoleLogger, type Logger, type LogLevel } from './log.js';
export { type EnqueueOptions, Queue, type QueueOptions } from './queue.js';
export {
  MAX_SHARDS,
  ShardedQueue,
  type ShardedQueueOptions,
  type ShardedStats,
  SubQueueUnreachableError,
  shardOf,
  type Unwrapped,
  unwrap,
  wrap,
} from './sharded.js';
export { handleSignals } from './signals.js';
export type {
  ConnectionEvents,
  IoRedisClient,
  NodeRedisClient,
  NodeRedisCluster,
  RedisConnection,
  Transport,
} from './transport.js';
export type * from './types.js';
export { type Backoff, type Failure, type Handler, Worker, type WorkerEvents, type WorkerOptions } from './worker.js';
