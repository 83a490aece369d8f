/**
 * ShardedQueue: the Python package's hash and envelope, routing of the
 * producer's and the controls' calls, the weighted rotation's fairness
 * across sub-queues, a sub-queue that cannot be reached, a Worker over it,
 * and a real cluster. The interop with Python's ShardedQueue is in
 * interop.test.ts.
 */

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { RedisClientType, RedisClusterType } from 'redis';
import {
  type Arg,
  InvalidArgumentError,
  type Job,
  type NodeRedisClient,
  type Queue,
  RetryError,
  ShardedQueue,
  type ShardedQueueOptions,
  SubQueueUnreachableError,
  shardOf,
  unwrap,
  VtrrError,
  Worker,
  wrap,
} from '../src/index.js';
import { recorder, until } from './observe.js';
import { Cluster, Server } from './servers.js';

function fresh(): string {
  return `sq-${randomBytes(4).toString('hex')}`;
}

/** The first name of the form `${prefix}-<n>` that lands in sub-queue `shard` of `shards`. */
function partitionIn(prefix: string, shard: number, shards: number, skip = 0): string {
  let found = 0;
  for (let n = 0; ; n++) {
    if (shardOf(`${prefix}-${n}`, shards) === shard && found++ === skip) {
      return `${prefix}-${n}`;
    }
  }
}

const LEASE = { leaseMs: 30_000 };

describe('the hash and the envelope (the Python package’s)', () => {
  test('partitions land where sharded.py and docs/scaling.md put them', () => {
    const counts = (partitions: number, shards: number): number[] => {
      const per = new Array<number>(shards).fill(0);
      for (let t = 0; t < partitions; t++) {
        per[shardOf(`tenant-${t}`, shards)] = (per[shardOf(`tenant-${t}`, shards)] ?? 0) + 1;
      }
      return per;
    };
    assert.deepEqual(counts(64, 4), [14, 22, 9, 19]);
    assert.deepEqual(counts(8, 2), [3, 5]);
    assert.deepEqual(counts(256, 8), [31, 35, 30, 35, 35, 30, 28, 32]);
    assert.equal(shardOf(Buffer.from('tenant-0'), 4), shardOf('tenant-0', 4));
    assert.throws(() => shardOf('', 4), InvalidArgumentError);
  });

  test('wrap and unwrap: the envelope byte for byte, and payloads without one whole', () => {
    assert.deepEqual(wrap('x', 12), Buffer.from('\x1fvtrr:12\x1fx', 'latin1'));
    const binary = Buffer.from([0x00, 0x1f, 0x62, 0xff]);
    assert.deepEqual(unwrap(wrap(binary, 7)), { weight: 7, payload: binary, enveloped: true });
    assert.deepEqual(unwrap(wrap('text é', 1)), { weight: 1, payload: Buffer.from('text é'), enveloped: true });
    assert.deepEqual(unwrap(wrap(Buffer.alloc(0), 1_000_000_000)), {
      weight: 1_000_000_000,
      payload: Buffer.alloc(0),
      enveloped: true,
    });
    for (const foreign of ['plain', '\x1fvtrr:', '\x1fvtrr:x\x1fy', '\x1fvtrr:0\x1fy', '\x1fvtrr:1000000001\x1fy']) {
      const bytes = Buffer.from(foreign, 'latin1');
      assert.deepEqual(unwrap(bytes), { weight: 1, payload: bytes, enveloped: false });
    }
    assert.throws(() => wrap('x', 0), InvalidArgumentError);
  });
});

let server: Server;
let client: RedisClientType;
const workers: Worker[] = [];
before(async () => {
  server = await Server.start();
  client = await server.client();
});
after(async () => {
  await Promise.all(workers.map((worker) => worker.close({ force: true })));
  server.stop();
});

function sharded(options: Partial<ShardedQueueOptions> & { shards: number }, name = fresh()): ShardedQueue {
  return new ShardedQueue(client, name, { logger: recorder(), ...options });
}

describe('routing', () => {
  test('names and options are checked before anything is sent', () => {
    assert.throws(() => sharded({ shards: 4 }, '{files}'), { name: 'InvalidArgumentError', message: /braces/ });
    assert.throws(() => sharded({ shards: 4 }, ''), InvalidArgumentError);
    assert.throws(() => sharded({ shards: 0 }), InvalidArgumentError);
    assert.throws(() => sharded({ shards: 1.5 }), InvalidArgumentError);
    assert.throws(() => sharded({ shards: 2, downMs: 10, downMaxMs: 5 }), InvalidArgumentError);
    const sq = sharded({ shards: 3 }, 'files');
    assert.deepEqual(
      sq.subQueues.map((queue) => queue.name),
      ['{files:0}', '{files:1}', '{files:2}'],
    );
  });

  test('items go to their partition’s sub-queue; reads add up; bad input sends nothing', async () => {
    const sq = sharded({ shards: 4 });
    const items = Array.from({ length: 64 }, (_, t) => ({ partition: `tenant-${t}`, id: `id-${t}`, payload: `p${t}` }));
    assert.equal(await sq.enqueueMany(items), 64);
    const each = await Promise.all(sq.subQueues.map((queue) => queue.stats()));
    assert.deepEqual(
      each.map((stats) => stats.queued),
      [14, 22, 9, 19],
    );
    // One bad item (in another sub-queue than the first) refuses the whole call before anything is sent.
    await assert.rejects(
      sq.enqueueMany([
        { partition: 'tenant-0', id: 'new-0', payload: 'x' },
        { partition: 'tenant-1', id: '', payload: 'x' },
      ]),
      InvalidArgumentError,
    );
    await assert.rejects(sq.enqueueMany([]), InvalidArgumentError);
    await assert.rejects(sq.enqueue('tenant-0', 'w', 'x', { weight: 0 }), InvalidArgumentError);
    assert.equal(await sq.enqueue('tenant-7', 'id-7b', 'again', { weight: 3, priority: 5 }), true);
    assert.equal(await sq.enqueue('tenant-7', 'id-7b', 'again'), false);
    assert.equal(await sq.enqueue('tenant-9', 'later', 'x', { delayMs: 60_000 }), true);
    const stats = await sq.stats();
    assert.deepEqual([stats.queued, stats.delayed, stats.shards.length], [65, 1, 4]);
    assert.equal(stats.totals.enqueued, 66);
    assert.deepEqual(await sq.check(), []);

    // Per-partition views and controls go to the partition's sub-queue.
    const home = sq.queueFor('tenant-7');
    assert.equal(home, sq.subQueues[sq.shardOf('tenant-7')]);
    assert.equal((await sq.partition('tenant-7')).queued, 2);
    assert.equal((await home.partition('tenant-7')).queued, 2);
    const elsewhere = sq.subQueues[(sq.shardOf('tenant-7') + 1) % 4] as Queue;
    assert.equal((await elsewhere.partition('tenant-7')).queued, 0);
    await sq.setLimit('tenant-7', { concurrency: 2, maxQueued: 50 });
    assert.deepEqual([(await sq.limit('tenant-7')).concurrency, (await home.limit('tenant-7')).maxQueued], [2, 50]);
    assert.equal((await elsewhere.limit('tenant-7')).concurrency, null);
    assert.equal(await sq.pause('tenant-7'), true);
    assert.equal(await sq.pause('tenant-7'), false);
    assert.equal((await home.partition('tenant-7')).paused, true);
    assert.equal(await sq.resume('tenant-7'), true);

    // Ranked and scanned over every sub-queue.
    const top = await sq.partitionsTop(3, { by: 'queued' });
    assert.equal(top.ranked, 64);
    assert.deepEqual(
      top.partitions.map((view) => view.partition),
      ['tenant-7', 'tenant-0', 'tenant-1'],
    );
    const offset = await sq.partitionsTop(2, { by: 'queued', offset: 1 });
    assert.deepEqual(
      offset.partitions.map((view) => view.partition),
      ['tenant-0', 'tenant-1'],
    );
    await assert.rejects(sq.partitionsTop(0), InvalidArgumentError);
    const scanned = new Set<string>();
    for await (const view of sq.partitions({ count: 5 })) {
      scanned.add(view.partition);
    }
    assert.equal(scanned.size, 64);
    const paged = new Set<string>();
    let cursor = '0';
    let steps = 0;
    do {
      const page = await sq.partitionsPage({ cursor, count: 1000 });
      for (const view of page.entries) {
        paged.add(view.partition);
      }
      cursor = page.cursor;
      steps += 1;
    } while (cursor !== '0');
    assert.deepEqual([paged.size, steps], [64, 4]);
    await assert.rejects(sq.partitionsPage({ cursor: 'x' }), InvalidArgumentError);

    // The policy goes to every sub-queue; one that differs is said.
    await sq.setPolicy({ maxNacks: 3, resultTtlMs: 60_000 });
    assert.deepEqual(
      (await sq.policies()).map((policy) => policy.maxNacks),
      [3, 3, 3, 3],
    );
    assert.equal((await sq.policy()).maxNacks, 3);
    await sq.subQueues[2]?.setPolicy({ maxNacks: 4 });
    await assert.rejects(sq.policy(), VtrrError);
    await sq.setPolicy({ maxNacks: 3 });
    await assert.rejects(sq.setPolicy({}), InvalidArgumentError);

    // Where each job is, from whichever sub-queue knows it.
    const [known, unknown] = await sq.jobs('id-3', 'nobody');
    assert.deepEqual([known?.state, known?.partition, unknown?.state], ['queued', 'tenant-3', 'unknown']);
    assert.equal((await sq.job('id-3', { partition: 'tenant-3' })).state, 'queued');
    const away = partitionIn('tenant', (sq.shardOf('tenant-3') + 1) % 4, 4);
    assert.equal((await sq.job('id-3', { partition: away })).state, 'unknown');
    assert.equal(await sq.result('nobody'), null);
    assert.equal(await sq.cancel('id-5', 'id-6'), 2);
    assert.equal((await sq.stats()).queued, 63);
  });

  test('leases carry the producer’s payload, weight and sub-queue; ACK, NACK, dead, revive and results go back there', async () => {
    const sq = sharded({ shards: 3 });
    await sq.setPolicy({ resultTtlMs: 60_000 });
    const payload = Buffer.from([0xff, 0x00, 0x1f, 0x80]);
    await sq.enqueue('alice', 'a1', payload, { weight: 4 });
    await sq.enqueue('bob', 'b1', 'bee');
    const first = await sq.lease(LEASE);
    const second = await sq.lease(LEASE);
    assert.ok(first && second);
    assert.equal(await sq.lease(LEASE), null);
    const leases = new Map([first, second].map((lease) => [lease.id, lease]));
    const a1 = leases.get('a1');
    const b1 = leases.get('b1');
    assert.ok(a1 && b1);
    assert.deepEqual([a1.payload, a1.weight, a1.partition, a1.shard], [payload, 4, 'alice', sq.shardOf('alice')]);
    assert.deepEqual([b1.payload.toString(), b1.weight, b1.shard], ['bee', 1, sq.shardOf('bob')]);
    assert.equal(await sq.renew(a1, 30_000), true);
    assert.equal(await sq.nack(b1, { dead: true, reason: 'no bees' }), 'dead');
    const [dead] = await sq.dead();
    assert.deepEqual([dead?.id, dead?.payload.toString(), dead?.lastError], ['b1', 'bee', 'no bees']);
    assert.equal(await sq.revive('b1'), 1);
    assert.equal(await sq.ackResult({ lease: a1, result: 'done' }), 1);
    assert.equal((await sq.result('a1'))?.result?.toString(), 'done');
    assert.equal((await sq.result('a1', { partition: 'alice', blockMs: 10 }))?.state, 'done');
    const again = await sq.leaseMany(5, { ...LEASE, blockMs: 50 });
    assert.deepEqual(
      again.map((lease) => lease.id),
      ['b1'],
    );
    assert.equal(await sq.ack(...again), 1);
    assert.equal(await sq.ack(...again), 0, 'fenced: a second ACK finds no lease');
    // A lease that is not a sharded one is refused before anything is sent.
    await assert.rejects(async () => sq.ack({ id: 'a1', token: 't' } as never), TypeError);
    await assert.rejects(async () => sq.lease({ leaseMs: 0 }), InvalidArgumentError);
    const stats = await sq.stats();
    assert.deepEqual([stats.queued, stats.inflight, stats.dead, stats.totals.acked], [0, 0, 0, 2]);
  });
});

describe('the weighted rotation', () => {
  /** Leases (acking each at once) `n` items; the partition of each, in order. */
  async function serve(sq: ShardedQueue, n: number): Promise<string[]> {
    const served: string[] = [];
    for (let i = 0; i < n; i++) {
      const lease = await sq.lease(LEASE);
      assert.ok(lease, `lease ${i} found nothing`);
      served.push(lease.partition);
      assert.equal(await sq.ack(lease), 1);
    }
    return served;
  }

  function tally(served: string[]): Map<string, number> {
    const counts = new Map<string, number>();
    for (const partition of served) {
      counts.set(partition, (counts.get(partition) ?? 0) + 1);
    }
    return counts;
  }

  test('a light partition alone on one sub-queue is served in turn while whales fill the others', async () => {
    const sq = sharded({ shards: 4 });
    const light = partitionIn('light', 0, 4);
    const whales = [1, 2, 3].map((shard) => partitionIn('whale', shard, 4));
    await sq.enqueueMany(
      whales.flatMap((whale) =>
        Array.from({ length: 100 }, (_, i) => ({ partition: whale, id: `${whale}-${i}`, payload: 'w' })),
      ),
    );
    await sq.enqueueMany(Array.from({ length: 10 }, (_, i) => ({ partition: light, id: `l-${i}`, payload: 'l' })));
    const counts = tally(await serve(sq, 40));
    // Each of the four partitions is a quarter of the service: the light one's 10 items within the first 40.
    assert.ok((counts.get(light) ?? 0) >= 8, JSON.stringify([...counts]));
    for (const whale of whales) {
      assert.ok((counts.get(whale) ?? 0) >= 8 && (counts.get(whale) ?? 0) <= 12, JSON.stringify([...counts]));
    }
  });

  test('a sub-queue is visited in proportion to its backlogged partitions, charged by weight', async () => {
    const sq = sharded({ shards: 2 });
    const crowd = [0, 1, 2].map((skip) => partitionIn('crowd', 0, 2, skip));
    const whale = partitionIn('whale', 1, 2);
    await sq.enqueueMany(
      [...crowd, whale].flatMap((partition) =>
        Array.from({ length: 40 }, (_, i) => ({ partition, id: `${partition}-${i}`, payload: 'x' })),
      ),
    );
    // Four partitions, one on sub-queue 1: a plain rotation would give the whale half of 40, this a quarter.
    const counts = tally(await serve(sq, 40));
    assert.ok((counts.get(whale) ?? 0) >= 8 && (counts.get(whale) ?? 0) <= 12, JSON.stringify([...counts]));

    const heavy = partitionIn('heavy', 0, 2);
    const light = partitionIn('light', 1, 2);
    const weighted = sharded({ shards: 2 });
    await weighted.enqueueMany(
      Array.from({ length: 30 }, (_, i) => ({ partition: heavy, id: `h-${i}`, payload: 'h', weight: 3 })),
    );
    await weighted.enqueueMany(
      Array.from({ length: 40 }, (_, i) => ({ partition: light, id: `l-${i}`, payload: 'l' })),
    );
    // Weight 3 against weight 1: a quarter of the leases, the same service in weight.
    const byWeight = tally(await serve(weighted, 40));
    assert.ok((byWeight.get(heavy) ?? 0) >= 8 && (byWeight.get(heavy) ?? 0) <= 12, JSON.stringify([...byWeight]));
  });

  test('a sub-queue back from empty rejoins at the lowest busy charge, without a burst', async () => {
    const sq = sharded({ shards: 2, readEvery: 1 });
    const a = partitionIn('a', 0, 2);
    const b = partitionIn('b', 1, 2);
    await sq.enqueueMany(Array.from({ length: 60 }, (_, n) => ({ partition: a, id: `a${n}`, payload: 'a' })));
    assert.ok((await serve(sq, 40)).every((partition) => partition === a)); // sub-queue 0's charge climbs to 40
    await sq.enqueueMany(Array.from({ length: 20 }, (_, n) => ({ partition: b, id: `b${n}`, payload: 'b' })));
    const served = await serve(sq, 20);
    // Without the rule sub-queue 1 (charge 0) would take all 20 in a row.
    const fromB = served.filter((partition) => partition === b).length;
    assert.ok(fromB >= 8 && fromB <= 12, JSON.stringify(served));
  });
});

/** A node-redis client that shows `each` every call first; one it returns an error for fails with it. */
function intercepted(real: RedisClientType, each: (args: Arg[]) => Error | undefined): NodeRedisClient {
  return {
    sendCommand(args: Arg[], options?: object): Promise<unknown> {
      const error = each(args);
      return error === undefined ? real.sendCommand(args, options as never) : Promise.reject(error);
    },
    duplicate(): NodeRedisClient {
      throw new Error('not in this test');
    },
    connect: () => Promise.resolve(),
    destroy: () => undefined,
    on() {
      return this;
    },
    options: { url: server.url },
  };
}

/** A node-redis client whose calls to the sub-queues in `down` fail as a refused connection would. */
function flaky(real: RedisClientType, down: Set<string>, failures: string[]): NodeRedisClient {
  return intercepted(real, (args) => {
    const key = String(args[1]);
    if (!down.has(key)) {
      return undefined;
    }
    failures.push(key);
    return new Error('connect ECONNREFUSED 127.0.0.1 (a test)');
  });
}

/** A node-redis client that records each call as `<command> <key>` in `sent`. */
function counting(real: RedisClientType, sent: string[]): NodeRedisClient {
  return intercepted(real, (args) => {
    sent.push(`${String(args[0]).toUpperCase()} ${String(args[1])}`);
    return undefined;
  });
}

describe('a sub-queue whose partitions are all paused', () => {
  test('is not leased from at every turn (n_i counts them, its empty LEASE sets it aside), and is served once resumed', async () => {
    const sent: string[] = [];
    const readEvery = 8;
    const sq = new ShardedQueue(counting(client, sent), fresh(), { shards: 3, readEvery, logger: recorder() });
    const paused = [0, 1].map((skip) => partitionIn('paused', 0, 3, skip));
    const others = [1, 2].flatMap((shard) => [0, 1, 2].map((skip) => partitionIn('other', shard, 3, skip)));
    for (const partition of paused) {
      assert.equal(await sq.pause(partition), true);
    }
    const items = (partitions: string[], n: number) =>
      partitions.flatMap((partition) =>
        Array.from({ length: n }, (_, i) => ({ partition, id: `${partition}/${i}`, payload: 'x' })),
      );
    const ids = (partitions: string[], n: number) =>
      items(partitions, n)
        .map((item) => item.id)
        .sort();
    await sq.enqueueMany(items(paused, 3));
    await sq.enqueueMany(items(others, 8));
    const home = sq.subQueues[0];
    assert.ok(home);
    assert.equal((await home.stats()).queuedPartitions, 2, 'paused partitions with items are counted');
    assert.equal((await sq.stats()).queuedPartitions, 8);

    const drain = async (): Promise<string[]> => {
      const leased: string[] = [];
      for (let lease = await sq.lease(LEASE); lease !== null; lease = await sq.lease(LEASE)) {
        leased.push(lease.id);
        assert.equal(await sq.ack(lease), 1);
      }
      return leased.sort();
    };
    sent.length = 0;
    const served = await drain();
    assert.deepEqual(served, ids(others, 8), 'every other item, no paused one');
    const leasesThere = sent.filter((call) => call === `VTRR.LEASE ${home.name}`).length;
    const reads = sent.filter((call) => call === `VTRR.STATS ${home.name}`).length;
    assert.ok(reads >= 1 && reads <= Math.floor(served.length / readEvery) + 2, sent.join('\n'));
    // At most one LEASE there per read of the counts (each read finds n_0 = 2 again), not one per lease.
    assert.ok(leasesThere >= 1 && leasesThere <= reads, `${leasesThere} LEASEs for ${reads} reads`);

    for (const partition of paused) {
      assert.equal(await sq.resume(partition), true);
    }
    assert.deepEqual(await drain(), ids(paused, 3), 'served once resumed');
    assert.equal((await sq.stats()).queuedPartitions, 0);
    assert.deepEqual(await sq.check(), []);
  });
});

describe('a sub-queue that cannot be reached', () => {
  test('is skipped, tried again after a doubling back-off, and served once it is back', async () => {
    const down = new Set<string>();
    const failures: string[] = [];
    const logger = recorder();
    const name = fresh();
    const sq = new ShardedQueue(flaky(client, down, failures), name, {
      shards: 2,
      readEvery: 1,
      downMs: 100,
      downMaxMs: 400,
      logger,
    });
    const a = partitionIn('a', 0, 2);
    const b = partitionIn('b', 1, 2);
    await sq.enqueueMany([
      ...Array.from({ length: 500 }, (_, n) => ({ partition: a, id: `a${n}`, payload: 'a' })),
      ...Array.from({ length: 5 }, (_, n) => ({ partition: b, id: `b${n}`, payload: 'b' })),
    ]);
    down.add(`{${name}:1}`);
    const started = Date.now();
    while (Date.now() - started < 1_000) {
      const lease = await sq.lease(LEASE);
      assert.ok(lease === null || lease.partition === a);
      if (lease !== null) {
        await sq.ack(lease);
      }
    }
    // Tried at about 0, 100, 300 and 700 ms (ten times without the doubling).
    assert.ok(failures.length >= 2 && failures.length <= 6, `${failures.length} failed calls in a second`);
    assert.equal(logger.lines.filter((line) => line.includes('cannot be reached')).length, 1, logger.lines.join('\n'));
    down.clear();
    const served = new Set<string>();
    await until(
      "b's items served once it is back",
      async () => {
        const lease = await sq.lease(LEASE);
        if (lease !== null) {
          served.add(lease.partition);
          await sq.ack(lease);
        }
        return served.has(b);
      },
      5_000,
    );
    assert.ok(
      logger.lines.some((line) => line === `WARN {${name}:1}: reachable again`),
      logger.lines.join('\n'),
    );

    // None reachable: the rotation throws, for its caller's back-off.
    down.add(`{${name}:0}`).add(`{${name}:1}`);
    await assert.rejects(sq.lease(LEASE), SubQueueUnreachableError);
  });
});

describe('a Worker over a ShardedQueue', () => {
  test('drains every sub-queue, each job once, its ACK, NACK and result in its own sub-queue', async () => {
    const sq = sharded({ shards: 4 });
    await sq.setPolicy({ resultTtlMs: 60_000 });
    const items = Array.from({ length: 200 }, (_, i) => ({
      partition: `tenant-${i % 16}`,
      id: `job-${i}`,
      payload: Buffer.from([i % 256, 0xff, 0x1f]),
      weight: 1 + (i % 3),
    }));
    await sq.enqueueMany(items);
    const runs = new Map<string, number>();
    const wrong: string[] = [];
    const logger = recorder();
    const worker = new Worker(
      sq,
      async (job: Job) => {
        runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
        const i = Number(job.id.slice(4));
        if (!job.payload.equals(Buffer.from([i % 256, 0xff, 0x1f])) || job.shard !== sq.shardOf(job.partition)) {
          wrong.push(job.id);
        }
        await sleep(1);
        if (i % 25 === 0 && job.nacks === 0) {
          throw new RetryError('once more', { delayMs: 0 });
        }
        return i % 10 === 0 ? { done: job.id } : undefined;
      },
      { concurrency: 8, blockMs: 1_000, logger },
    );
    workers.push(worker);
    let completed = 0;
    worker.on('completed', () => {
      completed += 1;
    });
    await until('every job completed', () => completed === 200, 15_000);
    assert.deepEqual(wrong, []);
    assert.equal(runs.size, 200);
    const twice = [...runs].filter(([, count]) => count !== 1).map(([id]) => id);
    assert.deepEqual(
      twice.sort(),
      items
        .map((item) => item.id)
        .filter((_, i) => i % 25 === 0)
        .sort(),
    );
    const stats = await sq.stats();
    assert.deepEqual(
      [stats.queued, stats.inflight, stats.delayed, stats.dead, stats.totals.acked, stats.totals.nacked],
      [0, 0, 0, 0, 200, 8],
    );
    assert.deepEqual(await sq.check(), []);
    assert.equal((await sq.result('job-30'))?.result?.toString(), '{"done":"job-30"}');
    assert.match(logger.lines[0] ?? '', /^INFO vtrr worker: queue sq-\w+ \(layout \w+, over 4 sub-queues\) on /);
    // Idle, it waits a slice at a time: close() is prompt.
    const closing = Date.now();
    await worker.close();
    assert.ok(Date.now() - closing < 1_000, `closed in ${Date.now() - closing} ms`);
  });
});

describe('on a Redis Cluster', () => {
  let cluster: Cluster;
  let clusterClient: RedisClusterType;
  before(async () => {
    cluster = await Cluster.start(3);
    clusterClient = await cluster.client(3);
  });
  after(() => cluster.stop());

  test('sub-queues on every master, routed by their tags, drained by one Worker', async () => {
    // A name whose six sub-queues land on all three masters (5461 slots each, in turn).
    const first = cluster.nodes[0] as Server;
    let name = fresh();
    for (;;) {
      const slots = await Promise.all(
        Array.from({ length: 6 }, (_, i) => first.command('CLUSTER', 'KEYSLOT', `{${name}:${i}}`)),
      );
      if (new Set(slots.map((slot) => Math.min(2, Math.floor(Number(slot) / 5461)))).size === 3) {
        break;
      }
      name = fresh();
    }
    const sq = new ShardedQueue(clusterClient, name, { shards: 6, logger: recorder(), probeTimeoutMs: 2_000 });
    const items = Array.from({ length: 60 }, (_, i) => ({ partition: `t${i % 20}`, id: `j${i}`, payload: `p${i}` }));
    assert.equal(await sq.enqueueMany(items), 60);
    for (const [i, queue] of sq.subQueues.entries()) {
      // Each sub-queue's items really are on the master that owns its slot: ask each node directly.
      const here = await Promise.all(
        cluster.nodes.map((node) =>
          node.command('EXISTS', `vtrr:${queue.name}:queue`, `vtrr:${queue.name}:totals`).catch(() => 0),
        ),
      );
      assert.equal(here.filter((found) => Number(found) > 0).length, 1, `sub-queue ${i} on one master`);
    }
    const seen = new Map<string, string>();
    const worker = new Worker(sq, (job) => void seen.set(job.id, job.text()), {
      concurrency: 4,
      logger: recorder(),
    });
    workers.push(worker);
    await until('every job completed', async () => (await sq.stats()).totals.acked === 60, 15_000);
    await worker.close();
    assert.equal(seen.size, 60);
    assert.ok(items.every((item) => seen.get(item.id) === item.payload));
    const stats = await sq.stats();
    assert.deepEqual([stats.queued, stats.inflight, stats.totals.acked], [0, 0, 60]);
    assert.deepEqual(await sq.check(), []);
  });
});
