/**
 * The module's argument bounds (docs/commands.md) and the checks made
 * before a call: a wrong type throws TypeError, a value out of range the
 * InvalidArgumentError the server would reply, in its words. The server
 * checks again; checking here means a worker's NACK is never refused after
 * its handler ran, and a mistake shows where it was made.
 */

import { InvalidArgumentError } from './errors.js';
import type { Name } from './types.js';

export const MAX_WEIGHT = 1_000_000_000;
/** A reported cost (VTRR.ACKCOST, RENEW ... COST), in the weights' units. */
export const MAX_COST = 1_000_000_000;
export const MAX_PRIORITY = 100;
/** lease-ms and delay-ms: ten years. */
export const MAX_MS = 315_360_000_000;
/** BLOCK timeout-ms: one year. */
export const MAX_BLOCK_MS = 31_536_000_000;
/** MAX-TIMEOUTS, MAX-NACKS. */
export const MAX_POLICY_LIMIT = 1_000_000_000;
/** CONCURRENCY, DEFAULT-CONCURRENCY, RATE, BURST, MAX-QUEUED, DEFAULT-MAX-QUEUED. */
export const MAX_LIMIT = 1_000_000_000;
export const MAX_SHARE = 1_000_000;
/** RATE ... PER <ms>: a day. */
export const MAX_RATE_PER_MS = 86_400_000;
/** EVERY <ms>: a year. */
export const MAX_EVERY_MS = 31_536_000_000;
export const MAX_PARTITIONS_COUNT = 10_000;
export const MAX_TOP_OFFSET = 100_000;
export const MAX_SCHEDULES_COUNT = 100;
export const MAX_SCHEDULE_RUNS = 20;
/** NACK ... REASON: a failure's summary and the top of its stack fit. */
export const MAX_REASON_BYTES = 4096;
/** ACKRESULT: what a job returned, in bytes. */
export const MAX_RESULT_BYTES = 1_048_576;
/** RESULT-TTL, DEDUP-MS: thirty days. */
export const MAX_OUTCOME_MS = 2_592_000_000;
/** The id form of a schedule's runs, refused to ENQUEUE and DEFER. */
export const SCHEDULE_ID_PREFIX = 'schedule:';

function typeName(value: unknown): string {
  if (value === null) {
    return 'null';
  }
  if (typeof value === 'object') {
    return (value as object).constructor?.name ?? 'object';
  }
  return typeof value;
}

/** `value` as an integer in [low, high]. */
export function checkInt(name: string, value: unknown, low: number, high: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    if (typeof value === 'number') {
      throw new InvalidArgumentError(`${name} must be an integer between ${low} and ${high}`);
    }
    throw new TypeError(`${name} must be a number, not ${typeName(value)}`);
  }
  if (value < low || value > high) {
    throw new InvalidArgumentError(`${name} must be an integer between ${low} and ${high}`);
  }
  return value;
}

/** A positive integer (COUNT, LIMIT): the server's words. */
export function checkPositive(name: string, value: unknown): number {
  if (typeof value !== 'number') {
    throw new TypeError(`${name} must be a number, not ${typeName(value)}`);
  }
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new InvalidArgumentError(`${name} must be a positive integer`);
  }
  return value;
}

/** An id, partition or schedule name as the bytes to send; never empty. */
export function checkName(name: string, value: unknown): string | Buffer {
  if (typeof value === 'string') {
    if (value === '') {
      throw new InvalidArgumentError(`${name} must not be empty`);
    }
    return value;
  }
  if (value instanceof Uint8Array) {
    if (value.length === 0) {
      throw new InvalidArgumentError(`${name} must not be empty`);
    }
    return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  }
  throw new TypeError(`${name} must be a string or bytes, not ${typeName(value)}`);
}

/** An item id an ENQUEUE or DEFER accepts: not empty, not a schedule run's. */
export function checkItemId(value: Name): string | Buffer {
  const id = checkName('id', value);
  const head = typeof id === 'string' ? id : id.toString('latin1', 0, SCHEDULE_ID_PREFIX.length);
  if (head.startsWith(SCHEDULE_ID_PREFIX)) {
    throw new InvalidArgumentError("id must not begin with 'schedule:': that form is the runs of recurring schedules");
  }
  return id;
}

/** A payload as the bytes to send: bytes or a string, anything else refused. */
export function checkPayload(value: unknown): string | Buffer {
  if (typeof value === 'string') {
    return value;
  }
  if (value instanceof Uint8Array) {
    return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  }
  throw new TypeError(
    `payload must be a Buffer, a Uint8Array or a string, not ${typeName(value)} (JSON.stringify an object first)`,
  );
}

/** A NACK's reason as the bytes to send: 1 to MAX_REASON_BYTES of them. */
export function checkReason(value: unknown): string | Buffer {
  if (typeof value !== 'string' && !(value instanceof Uint8Array)) {
    throw new TypeError(`reason must be a string or bytes, not ${typeName(value)}`);
  }
  const length = typeof value === 'string' ? Buffer.byteLength(value) : value.length;
  if (length < 1 || length > MAX_REASON_BYTES) {
    throw new InvalidArgumentError(`REASON must be between 1 and ${MAX_REASON_BYTES} bytes`);
  }
  return typeof value === 'string' ? value : Buffer.from(value.buffer, value.byteOffset, value.byteLength);
}

/** A job's result as the bytes to send: at most MAX_RESULT_BYTES of them. */
export function checkResult(value: unknown): string | Buffer {
  if (typeof value !== 'string' && !(value instanceof Uint8Array)) {
    throw new TypeError(`result must be a string or bytes, not ${typeName(value)}`);
  }
  const length = typeof value === 'string' ? Buffer.byteLength(value) : value.length;
  if (length > MAX_RESULT_BYTES) {
    throw new InvalidArgumentError(`result must be at most ${MAX_RESULT_BYTES} bytes`);
  }
  return typeof value === 'string' ? value : Buffer.from(value.buffer, value.byteOffset, value.byteLength);
}
