// BullMQ's runner for `make bench-e2e`: `node runner.js fill|work`.
//
// fill: E2E_JOBS jobs on one queue (`addBulk`, 1,000 a call), the data a
// string of E2E_PAYLOAD_BYTES, each with removeOnComplete (a finished job is
// deleted, as vtrr's ACK deletes the item). BullMQ has no partitions (groups
// are BullMQ Pro): plain jobs.
// work: one Worker, concurrency E2E_CONCURRENCY, an async handler (no-op, or
// a sleep of E2E_SLEEP_MS), until E2E_JOBS jobs are completed (BullMQ's
// `completed` event comes once the job is moved to completed, i.e. acked).
// Writes `first` and `{"done": {...}}` to the fd E2E_FD as the Python
// runners do (common.py): wall and CPU seconds (process.cpuUsage: every
// thread), and the Redis commands (ioredis sendCommand, pipelines' each)
// and socket writes this process sent in between.
'use strict';

const fs = require('node:fs');
const net = require('node:net');
const IORedis = require('ioredis');
const { Queue, Worker } = require('bullmq');

const QUEUE = 'bench';
const env = (name) => {
  const value = process.env[name];
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
};
const settings = {
  port: Number(env('E2E_PORT')),
  jobs: Number(env('E2E_JOBS')),
  warmup: Number(process.env.E2E_WARMUP || '0'),
  concurrency: Number(env('E2E_CONCURRENCY')),
  sleepMs: Number(env('E2E_SLEEP_MS')),
  payloadBytes: Number(env('E2E_PAYLOAD_BYTES')),
};
const connection = { host: '127.0.0.1', port: settings.port, maxRetriesPerRequest: null };

const counts = { commands: 0, sends: 0, exchanges: 0 };
const sendCommand = IORedis.prototype.sendCommand;
IORedis.prototype.sendCommand = function counted(...args) {
  counts.commands += 1;
  return sendCommand.apply(this, args);
};
const write = net.Socket.prototype.write;
net.Socket.prototype.write = function counted(...args) {
  counts.sends += 1;
  return write.apply(this, args);
};

function snapshot() {
  const cpu = process.cpuUsage();
  return {
    seconds: Number(process.hrtime.bigint()) / 1e9,
    cpu_seconds: (cpu.user + cpu.system) / 1e6,
    ...counts,
  };
}

async function fill() {
  const queue = new Queue(QUEUE, { connection });
  const payload = 'x'.repeat(settings.payloadBytes);
  const total = settings.warmup + settings.jobs;
  for (let start = 0; start < total; start += 1000) {
    const batch = [];
    for (let i = start; i < Math.min(start + 1000, total); i += 1) {
      batch.push({ name: 'job', data: payload, opts: { removeOnComplete: true } });
    }
    await queue.addBulk(batch);
  }
  await queue.close();
}

async function work() {
  const fd = Number(env('E2E_FD'));
  let first = null;
  let completed = 0;
  const pause = settings.sleepMs;
  const open = () => {
    first = snapshot();
    fs.writeSync(fd, 'first\n');
  };
  const worker = new Worker(
    QUEUE,
    async () => {
      // Without a warm-up the first handler opens the window, else the
      // warm-up's last completed job.
      if (first === null && !settings.warmup) open();
      if (pause) await new Promise((resolve) => setTimeout(resolve, pause));
    },
    { connection, concurrency: settings.concurrency },
  );
  worker.on('error', (error) => console.error(error));
  await new Promise((resolve) => {
    worker.on('completed', () => {
      completed += 1;
      if (settings.warmup && completed === settings.warmup) open();
      if (completed === settings.warmup + settings.jobs) {
        const end = snapshot();
        const spent = {};
        for (const key of Object.keys(end)) spent[key] = end[key] - first[key];
        fs.writeSync(fd, `${JSON.stringify({ done: spent })}\n`);
        resolve();
      }
    });
  });
  await worker.close();
}

const modes = { fill, work };
modes[process.argv[2]]().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
