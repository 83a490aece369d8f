/**
 * The module's errors as classes. Every reply error of a vtrr command
 * becomes one of these (the message is the server's, without its `ERR `
 * code); an argument refused before sending throws the same class the
 * server's refusal would, with the server's words.
 */

/** Base class of every error this package throws. */
export class VtrrError extends Error {
  override name = 'VtrrError';
}

/** An argument was refused (`ERR ...` from the server, or the same check made before sending): nothing changed. */
export class InvalidArgumentError extends VtrrError {
  override name = 'InvalidArgumentError';
}

/** A key of the queue holds another type (`WRONGTYPE ...`). */
export class WrongTypeError extends VtrrError {
  override name = 'WrongTypeError';
}

/** The ACL user may not touch a key of this queue (`NOPERM ...`). */
export class NoPermissionError extends VtrrError {
  override name = 'NoPermissionError';
}

/** The server does not know the vtrr commands; the message names the server and how to load the module. */
export class ModuleNotLoadedError extends VtrrError {
  override name = 'ModuleNotLoadedError';
}

/** The queue's cluster slot kept moving (TRYAGAIN) past the retry deadline. */
export class SlotMovingError extends VtrrError {
  override name = 'SlotMovingError';
}

/**
 * The server's FULL message, after its code. Matched whole: a partition is
 * any bytes, so it may hold this very text, but only the real tail, the
 * last, reaches the end of the message.
 */
const FULL =
  /^partition '(.*)' has (\d+) items waiting and MAX-QUEUED (\d+): the call would add (\d+); nothing was enqueued$/s;

/** How the module quotes bytes in a message (src/text.rs, `Quoted`): printable ASCII but `\`, or an escape. */
const QUOTED = /^(?:[ -[\]-~]|\\(?:x[0-9a-f]{2}|[\\nrt]))*$/;
const ESCAPED: Record<string, string> = { '\\': '\\', n: '\n', r: '\r', t: '\t' };

/** The bytes the module quoted as `quoted`; null when it is not the module's quoting. */
function unquoted(quoted: string): Buffer | null {
  if (!QUOTED.test(quoted)) {
    return null;
  }
  // Each escape as the one char of its byte (0-255), so latin1 gives the byte back.
  const latin1 = quoted.replace(/\\(x[0-9a-f]{2}|[\\nrt])/g, (_, code: string) =>
    code.length === 3 ? String.fromCharCode(Number.parseInt(code.slice(1), 16)) : (ESCAPED[code] as string),
  );
  return Buffer.from(latin1, 'latin1');
}

/**
 * An enqueue (or a delayed one) would take a partition past its MAX-QUEUED
 * (`FULL ...`): nothing of the call was enqueued, the items of other
 * partitions included. Backpressure, not a mistake (so not an
 * InvalidArgumentError, and no reason for a worker to stop): the same call
 * succeeds once the partition has fewer items waiting, so shed the work,
 * slow down or retry later. The fields are read from the server's message;
 * null when it does not read as this module's.
 */
export class PartitionFullError extends VtrrError {
  override name = 'PartitionFullError';
  /** The partition, decoded as UTF-8 (`partitionBytes` holds its bytes). */
  readonly partition: string | null = null;
  readonly partitionBytes: Buffer | null = null;
  /** Its items waiting (queued or delayed) before the call. */
  readonly waiting: number | null = null;
  /** The MAX-QUEUED in force: its own, else the queue's default. */
  readonly maxQueued: number | null = null;
  /** How many items the call would have added to it. */
  readonly adds: number | null = null;

  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    const [, quoted = '', waiting, maxQueued, adds] = FULL.exec(message) ?? [];
    const partition = unquoted(quoted);
    if (partition === null || waiting === undefined || maxQueued === undefined || adds === undefined) {
      return;
    }
    this.partitionBytes = partition;
    this.partition = partition.toString('utf8');
    this.waiting = Number(waiting);
    this.maxQueued = Number(maxQueued);
    this.adds = Number(adds);
  }
}

/** Errors no retry can mend: a worker stops on them. */
export function isPermanent(error: unknown): boolean {
  return (
    error instanceof ModuleNotLoadedError ||
    error instanceof NoPermissionError ||
    error instanceof WrongTypeError ||
    error instanceof InvalidArgumentError
  );
}

/**
 * Whether `error` is a reply error of the server (node-redis' `ErrorReply`,
 * ioredis' `ReplyError`), rather than a connection's failure.
 */
export function isReplyError(error: unknown): error is Error {
  if (!(error instanceof Error)) {
    return false;
  }
  for (let proto = Object.getPrototypeOf(error); proto !== null; proto = Object.getPrototypeOf(proto)) {
    const name = (proto.constructor as { name?: string } | undefined)?.name;
    if (name === 'ErrorReply' || name === 'ReplyError') {
      return true;
    }
  }
  return false;
}

/** `TRYAGAIN`: the queue's slot is moving between cluster nodes; the same call succeeds soon. */
export function isTryAgain(error: unknown): boolean {
  return isReplyError(error) && error.message.startsWith('TRYAGAIN');
}

/** The error to throw for `error`, a failure of a call to `server` (a URL, as a log names it). */
export function translate(error: unknown, server: string): unknown {
  if (!isReplyError(error)) {
    return error;
  }
  const message = error.message;
  const [code = ''] = message.split(' ', 1);
  const rest = message.slice(code.length).trim();
  switch (code) {
    case 'NOPERM':
      return new NoPermissionError(rest, { cause: error });
    case 'WRONGTYPE':
      return new WrongTypeError(rest, { cause: error });
    case 'FULL':
      return new PartitionFullError(rest, { cause: error });
    case 'ERR':
      if (rest.startsWith('unknown command') && /'vtrr\./i.test(rest)) {
        const command = /'(vtrr\.[a-z]+)'/i.exec(rest)?.[1]?.toUpperCase() ?? 'the command';
        return new ModuleNotLoadedError(
          `the vtrr module is not loaded on ${server}: add \`loadmodule /path/to/libvtrr.so\` ` +
            `to its configuration (docs/operations.md, Loading the module); if it is, it is older than ${command}`,
          { cause: error },
        );
      }
      return new InvalidArgumentError(rest, { cause: error });
    default:
      // OOM, READONLY, LOADING, TRYAGAIN, ...: the server's state, not the call's.
      return error;
  }
}
