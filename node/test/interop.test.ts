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
import { type Job, Queue, ShardedQueue, Worker, wrap } from '../src/index.js';
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

// The ShardedQueues of both packages: the same sub-queues, partition -> sub-queue function and envelope.
const TENANTS = ['tenant-0', 'tenant-1', 'tenant-é', 'テナント', 'acme', 'b', 'tenant-63', 'zz'];

test("an item enqueued through Python's ShardedQueue is leased by Node's: same sub-queue, weight, payload", async () => {
  const name = 'sharded-from-python';
  const printed = await python(
    `import sys, json, redis, vtrr
from vtrr.sharded import wrap
sq = vtrr.ShardedQueue(redis.Redis.from_url(sys.argv[1]), sys.argv[2], shards=4)
tenants = ${JSON.stringify(TENANTS)}
payload = bytes.fromhex("${PAYLOAD.toString('hex')}")
sq.enqueue_many([vtrr.Item(t, f"py-{i}", payload, 1 + i % 3) for i, t in enumerate(tenants)])
print(json.dumps({"shards": [sq.shard_of(t) for t in tenants], "envelope": wrap(payload, 3).hex()}))`,
    server.url,
    name,
  );
  const { shards, envelope } = JSON.parse(printed) as { shards: number[]; envelope: string };
  const sq = new ShardedQueue(client, name, { shards: 4 });
  assert.deepEqual(
    TENANTS.map((tenant) => sq.shardOf(tenant)),
    shards,
  );
  assert.equal(wrap(PAYLOAD, 3).toString('hex'), envelope, 'the envelope, byte for byte');
  for (const tenant of TENANTS) {
    assert.equal((await sq.queueFor(tenant).partition(tenant)).queued, 1, `${tenant} in its sub-queue`);
  }
  const leased = await sq.leaseMany(TENANTS.length, { leaseMs: 30_000 });
  assert.equal(leased.length, TENANTS.length);
  for (const lease of leased) {
    const i = Number(lease.id.slice(3));
    assert.deepEqual(
      [lease.partition, lease.payload, lease.weight, lease.shard],
      [TENANTS[i], PAYLOAD, 1 + (i % 3), shards[i]],
    );
  }
  assert.equal(await sq.ack(...leased), TENANTS.length);
  assert.equal((await sq.stats()).totals.acked, TENANTS.length);
});

test("an item enqueued through Node's ShardedQueue is leased by Python's: same sub-queue, weight, payload", async () => {
  const name = 'sharded-from-node';
  const sq = new ShardedQueue(client, name, { shards: 4 });
  await sq.enqueueMany(
    TENANTS.map((tenant, i) => ({ partition: tenant, id: `js-${i}`, payload: PAYLOAD, weight: 1 + (i % 3) })),
  );
  const printed = await python(
    `import sys, json, redis, vtrr
sq = vtrr.ShardedQueue(redis.Redis.from_url(sys.argv[1]), sys.argv[2], shards=4)
seen = []
while (lease := sq.lease(30_000)) is not None:
    assert sq.ack(lease) == 1
    seen.append([lease.id, lease.partition, lease.payload.hex(), lease.weight, lease.shard, sq.shard_of(lease.partition)])
print(json.dumps(seen))`,
    server.url,
    name,
  );
  const seen = JSON.parse(printed) as [string, string, string, number, number, number][];
  assert.equal(seen.length, TENANTS.length);
  for (const [id, partition, payload, weight, shard, hashed] of seen) {
    const i = Number(id.slice(3));
    assert.deepEqual(
      [partition, payload, weight, shard, hashed],
      [TENANTS[i], PAYLOAD.toString('hex'), 1 + (i % 3), sq.shardOf(partition), shard],
    );
  }
  const stats = await sq.stats();
  assert.deepEqual([stats.totals.acked, stats.queued], [TENANTS.length, 0]);
});
