/**
 * The Node and Python packages share queues: an item one enqueues, the
 * other's worker runs, its payload byte for byte (bytes that are not UTF-8).
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import type { RedisClientType } from 'redis';
import { type Job, Queue, Worker } from '../src/index.js';
import { REPO, Server } from './servers.js';

const PYTHON = join(REPO, 'python', '.venv', 'bin', 'python');
const PAYLOAD = Buffer.from([0xff, 0xfe, 0x00, 0xc3, 0x28, 0x80, 0x7b]);
const run = promisify(execFile);

/** Runs `code` with the Python package, `url` and `queue` as sys.argv[1:]. */
async function python(code: string, url: string, queue: string): Promise<string> {
  const { stdout } = await run(PYTHON, ['-c', code, url, queue], { timeout: 60_000 });
  return stdout;
}

let server: Server;
let client: RedisClientType;
before(async () => {
  assert.ok(existsSync(PYTHON), `${PYTHON} is missing: make python-env makes it`);
  server = await Server.start();
  client = await server.client();
});
after(() => server.stop());

test('an item enqueued from Python is run by the Node worker, payload and partition intact', async () => {
  const name = '{from-python}';
  await python(
    `import sys, redis, vtrr
vtrr.Queue(redis.Redis.from_url(sys.argv[1]), sys.argv[2]).enqueue("tenant-py", "py-1", bytes.fromhex("${PAYLOAD.toString('hex')}"), weight=3)`,
    server.url,
    name,
  );
  const queue = new Queue(client, name);
  const worker = new Worker(queue, () => undefined, { logger: { info() {}, warn() {}, error() {} } });
  const [job] = (await once(worker, 'completed')) as [Job];
  await worker.close();
  assert.equal(job.id, 'py-1');
  assert.equal(job.partition, 'tenant-py');
  assert.deepEqual(job.payload, PAYLOAD);
  assert.equal((await queue.stats()).totals.acked, 1);
});

test('an item enqueued from Node is run by the Python worker, payload and partition intact', async () => {
  const name = '{from-node}';
  const queue = new Queue(client, name);
  await queue.enqueue('tenant-js', 'js-1', PAYLOAD, { weight: 2 });
  const seen = await python(
    `import sys, redis, vtrr
def handle(job):
    print(job.id, job.partition, job.payload.hex())
vtrr.Worker(vtrr.Queue(redis.Redis.from_url(sys.argv[1]), sys.argv[2]), handle, exit_when_idle=True).run()`,
    server.url,
    name,
  );
  assert.equal(seen.trim(), `js-1 tenant-js ${PAYLOAD.toString('hex')}`);
  assert.equal((await queue.stats()).totals.acked, 1);
});
