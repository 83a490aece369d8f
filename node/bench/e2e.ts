/**
 * The Node worker's runner for `make bench-e2e` (bench/e2e/run.py):
 * `node build/bench/e2e.js fill|work`, as the BullMQ and Python runners.
 *
 * fill: E2E_JOBS (after E2E_WARMUP) items of E2E_PAYLOAD_BYTES over
 * E2E_PARTITIONS partitions, 1,000 a VTRR.ENQUEUE (the driver has set the
 * layout). work: one Worker as an application runs it (concurrency
 * E2E_CONCURRENCY, default lease and block times, an async handler: no-op
 * or a sleep of E2E_SLEEP_MS), logging at warn (what an unconfigured
 * Python worker logs: no line per job), until every item is acked. Writes
 * `first` and `{"done": {...}}` to the fd E2E_FD: wall and CPU seconds,
 * and the commands (node-redis sendCommand), socket writes (to the
 * socket's handle) and round trips (calls of Queue.exchange) this process
 * made in between.
 */

import { writeSync } from 'node:fs';
import { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { createClient } from 'redis';
import { consoleLogger, type Item, Queue, Worker } from '../src/index.js';

const env = (name: string, fallback?: string): number => {
  const value = process.env[name] ?? fallback;
  if (value === undefined) {
    throw new Error(`${name} is not set`);
  }
  return Number(value);
};
const settings = {
  port: env('E2E_PORT'),
  jobs: env('E2E_JOBS'),
  warmup: env('E2E_WARMUP', '0'),
  concurrency: env('E2E_CONCURRENCY'),
  sleepMs: env('E2E_SLEEP_MS'),
  partitions: env('E2E_PARTITIONS'),
  payloadBytes: env('E2E_PAYLOAD_BYTES'),
};
const QUEUE = 'bench';

const counts = { commands: 0, sends: 0, exchanges: 0 };

function snapshot(): Record<string, number> {
  const cpu = process.cpuUsage();
  return { seconds: performance.now() / 1000, cpu_seconds: (cpu.user + cpu.system) / 1e6, ...counts };
}

/** Counts what this process sends: node-redis commands (the worker's duplicate shares the prototype), socket writes, round trips. */
function count(client: object): void {
  let proto = Object.getPrototypeOf(client);
  while (proto !== null && !Object.hasOwn(proto, 'sendCommand')) {
    proto = Object.getPrototypeOf(proto);
  }
  const sendCommand = proto.sendCommand;
  proto.sendCommand = function counted(this: unknown, ...args: unknown[]) {
    counts.commands += 1;
    return sendCommand.apply(this, args);
  };
  // node-redis writes a command's pieces between cork() and uncork(): a write to the
  // socket's handle (one system call) is a _write or a _writev, not a write().
  const handle = Socket.prototype as unknown as Record<'_write' | '_writev', (...args: unknown[]) => unknown>;
  for (const name of ['_write', '_writev'] as const) {
    const original = handle[name];
    handle[name] = function counted(this: Socket, ...args: unknown[]) {
      counts.sends += 1;
      return original.apply(this, args);
    };
  }
  const exchange = Queue.prototype.exchange;
  Queue.prototype.exchange = function counted(this: Queue, ...args: Parameters<Queue['exchange']>) {
    counts.exchanges += 1;
    return exchange.apply(this, args);
  };
}

async function fill(queue: Queue): Promise<void> {
  const payload = 'x'.repeat(settings.payloadBytes);
  const total = settings.warmup + settings.jobs;
  for (let start = 0; start < total; start += 1000) {
    const batch: Item[] = [];
    for (let i = start; i < Math.min(start + 1000, total); i += 1) {
      batch.push({ partition: `p${i % settings.partitions}`, id: `j${i}`, payload });
    }
    await queue.enqueueMany(batch);
  }
}

async function work(queue: Queue, client: object): Promise<void> {
  const fd = env('E2E_FD');
  count(client);
  let first: Record<string, number> | undefined;
  let completed = 0;
  const open = (): void => {
    first = snapshot();
    writeSync(fd, 'first\n');
  };
  const worker = new Worker(
    queue,
    async () => {
      // Without a warm-up the first handler opens the window, else the warm-up's last acked job.
      if (first === undefined && settings.warmup === 0) {
        open();
      }
      if (settings.sleepMs > 0) {
        await sleep(settings.sleepMs);
      }
    },
    { concurrency: settings.concurrency, logger: consoleLogger('warn') },
  );
  await new Promise<void>((done) => {
    worker.on('completed', () => {
      completed += 1;
      if (settings.warmup > 0 && completed === settings.warmup) {
        open();
      }
      if (completed === settings.warmup + settings.jobs && first !== undefined) {
        const end = snapshot();
        const opened = first;
        const spent = Object.fromEntries(Object.entries(end).map(([key, value]) => [key, value - (opened[key] ?? 0)]));
        writeSync(fd, `${JSON.stringify({ done: spent })}\n`);
        done();
      }
    });
  });
  await worker.close();
}

const client = createClient({ url: `redis://127.0.0.1:${settings.port}` });
await client.connect();
const queue = new Queue(client, QUEUE);
if (process.argv[2] === 'fill') {
  await fill(queue);
} else {
  await work(queue, client);
}
client.destroy();
