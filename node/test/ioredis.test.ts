/** The same Queue and Worker over an ioredis client (BullMQ's users hold one). */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Redis } from 'ioredis';
import { InvalidArgumentError, ModuleNotLoadedError, Queue, Worker } from '../src/index.js';
import { Server } from './servers.js';

const PAYLOAD = Buffer.from([0xff, 0x00, 0x80]);

let server: Server;
let client: Redis;
before(async () => {
  server = await Server.start();
  client = new Redis(server.port, '127.0.0.1');
});
after(() => {
  client.disconnect();
  server.stop();
});

test('commands over ioredis read as over node-redis: bytes, states, maps', async () => {
  const queue = new Queue(client, '{io}');
  assert.equal(await queue.enqueue('tenant', 'i1', PAYLOAD, { weight: 2 }), true);
  const lease = await queue.lease({ leaseMs: 60_000 });
  assert.deepEqual(lease?.payload, PAYLOAD);
  assert.equal(lease?.partition, 'tenant');
  assert.ok(lease);
  assert.equal(await queue.nack(lease, { delayMs: 60_000 }), 'delayed');
  const stats = await queue.stats();
  assert.equal(stats.delayed, 1);
  assert.equal(stats.totals.nacked, 1);
  await queue.setPolicy({ maxNacks: 3 });
  assert.equal((await queue.policy()).maxNacks, 3);
  await assert.rejects(queue.setLimit('tenant', { share: 0 }), InvalidArgumentError);
  await assert.rejects(queue.schedule('s', { cron: 'nope', partition: 'p', payload: 'x' }), {
    name: 'InvalidArgumentError',
    message: /^CRON is not a valid pattern/,
  });
});

test('a Worker over ioredis runs jobs on a connection of its own', async () => {
  const queue = new Queue(client, '{io-worker}');
  await queue.enqueueMany(
    Array.from({ length: 10 }, (_, i) => ({ partition: `t${i % 3}`, id: `j${i}`, payload: PAYLOAD })),
  );
  const payloads: Buffer[] = [];
  const worker = new Worker(queue, (job) => void payloads.push(job.payload), {
    concurrency: 3,
    logger: { info() {}, warn() {}, error() {} },
  });
  await new Promise<void>((done) => worker.on('drained', done));
  await worker.close();
  assert.equal(payloads.length, 10);
  assert.ok(payloads.every((payload) => payload.equals(PAYLOAD)));
  assert.equal((await queue.stats()).totals.acked, 10);
});

test('a server without the module, over ioredis: ModuleNotLoadedError', async () => {
  const plain = await Server.start({ withModule: false });
  const io = new Redis(plain.port, '127.0.0.1');
  try {
    await assert.rejects(new Queue(io, 'files').stats(), ModuleNotLoadedError);
  } finally {
    io.disconnect();
    plain.stop();
  }
});
