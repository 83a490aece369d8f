/** A queue on a Redis Cluster of three masters, over node-redis' cluster client. */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { RedisClusterType } from 'redis';
import { InvalidArgumentError, Queue, SlotMovingError, Worker } from '../src/index.js';
import { Cluster } from './servers.js';

let cluster: Cluster;
let client: RedisClusterType;
before(async () => {
  cluster = await Cluster.start(3);
  client = await cluster.client(3);
});
after(() => cluster.stop());

const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** Whether a client waits in a BLOCK on any node. */
async function blocked(): Promise<boolean> {
  const lists = await Promise.all(cluster.nodes.map((node) => node.command('CLIENT', 'LIST')));
  return lists.some((list) => String(list).includes('flags=b '));
}

/** How many CLIENT UNBLOCKs the nodes have run. */
async function unblocks(): Promise<number> {
  const stats = await Promise.all(cluster.nodes.map((node) => node.command('INFO', 'commandstats')));
  const calls = stats.map((info) => Number(/cmdstat_client\|unblock:calls=(\d+)/.exec(String(info))?.[1] ?? 0));
  return calls.reduce((sum, each) => sum + each, 0);
}

test('a queue name without a hash tag is refused before anything is sent', () => {
  assert.throws(() => new Queue(client, 'files'), {
    name: InvalidArgumentError.name,
    message: 'in cluster mode the queue name must contain a hash tag, like {files}, so all its keys share one slot',
  });
});

test('queues on different masters: each routed by its hash tag, each drained by its worker', async () => {
  // {a} hashes to slot 15495 (the third master), {b} to 3300 (the first).
  const names = ['{a}jobs', '{b}jobs'];
  const owners = new Set<number>();
  for (const name of names) {
    const queue = new Queue(client, name);
    await queue.enqueueMany(
      Array.from({ length: 20 }, (_, i) => ({ partition: `t${i % 4}`, id: `j${i}`, payload: name })),
    );
    const worker = new Worker(queue, (job) => assert.equal(job.text(), name), {
      concurrency: 4,
      logger: quiet,
      blockMs: 60_000,
    });
    let completed = 0;
    worker.on('completed', () => {
      completed += 1;
    });
    // The idle worker waits in its node's BLOCK (a minute); close() ends it there
    // (CLIENT UNBLOCK on that node), not when the minute is up.
    const deadline = Date.now() + 30_000;
    while (!(completed === 20 && (await blocked()))) {
      assert.ok(Date.now() < deadline, `${completed} jobs done, then no lease waiting in a BLOCK`);
      await sleep(10);
    }
    const before = await unblocks();
    const started = Date.now();
    await worker.close();
    assert.ok(Date.now() - started < 30_000, `closed in ${Date.now() - started} ms`);
    assert.ok((await unblocks()) > before, 'its BLOCK was ended by CLIENT UNBLOCK');
    assert.equal(completed, 20);
    const stats = await queue.stats();
    assert.deepEqual([stats.totals.acked, stats.queued, stats.inflight], [20, 0, 0]);
    assert.deepEqual(await queue.check(), []);
    for (const [index, node] of cluster.nodes.entries()) {
      // A node that does not own the slot answers MOVED.
      const here = await node.command('EXISTS', `vtrr:${name}:queue`, `vtrr:${name}:totals`).catch(() => 0);
      if (Number(here) > 0) {
        owners.add(index);
      }
    }
  }
  assert.equal(owners.size, 2, 'the two queues live on two masters');
});

test('a call on a slot that stays half moved waits out TRYAGAIN, then throws SlotMovingError; nothing is lost', async () => {
  const name = '{moving}';
  const queue = new Queue(client, name, { retryMs: 500 });
  await queue.enqueue('p', 'i', 'x');
  // The slot MIGRATING on its owner, IMPORTING on the next node, its keys left where they are:
  // the owner answers ASK, the importing node TRYAGAIN (its keys have not arrived).
  const slot = Number(await cluster.nodes[0]?.command('CLUSTER', 'KEYSLOT', name));
  const ids = await Promise.all(cluster.nodes.map(async (node) => String(await node.command('CLUSTER', 'MYID'))));
  const owner = Math.min(2, Math.floor(slot / 5461)); // Cluster.start gives each master 5461 slots in turn
  const source = cluster.nodes[owner];
  const target = cluster.nodes[(owner + 1) % 3];
  assert.ok(source && target);
  await target.command('CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', ids[owner] ?? '');
  await source.command('CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', ids[(owner + 1) % 3] ?? '');
  try {
    const started = Date.now();
    await assert.rejects(queue.stats(), (error: Error) => {
      assert.ok(error instanceof SlotMovingError, `${error.name}: ${error.message}`);
      assert.match(error.message, /^\{moving\}: TRYAGAIN/);
      return true;
    });
    assert.ok(Date.now() - started >= 500, 'retried until retryMs');
  } finally {
    await source.command('CLUSTER', 'SETSLOT', String(slot), 'STABLE');
    await target.command('CLUSTER', 'SETSLOT', String(slot), 'STABLE');
  }
  assert.equal((await queue.stats()).queued, 1, 'nothing was lost while the slot was stuck');
});
