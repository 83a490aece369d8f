/** Queue: every command against a real server, over RESP2 and RESP3, its replies typed. */

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { RedisClientType } from 'redis';
import {
  InvalidArgumentError,
  ModuleNotLoadedError,
  NoPermissionError,
  PartitionFullError,
  Queue,
  VtrrError,
  WrongTypeError,
} from '../src/index.js';
import { layout, Server } from './servers.js';

/** A queue name of its own for each test: they share one server. */
function fresh(): string {
  return `{q-${randomBytes(4).toString('hex')}}`;
}

// Bytes that are not UTF-8 (and a NUL): a payload comes back byte for byte.
const BINARY = Buffer.from([0xff, 0x00, 0xc3, 0x28, 0x80, 0x0a]);

let server: Server;
before(async () => {
  server = await Server.start();
});
after(() => server.stop());

for (const RESP of [2, 3] as const) {
  describe(`over RESP${RESP}`, () => {
    let client: RedisClientType;
    before(async () => {
      client = await server.client(RESP);
    });
    after(() => client.destroy());

    test('enqueue, lease, ack: the payload byte for byte, the partition and counters with each lease', async () => {
      const queue = new Queue(client, fresh());
      assert.equal(await queue.enqueue('alice', 'a1', BINARY), true);
      assert.equal(await queue.enqueue('alice', 'a1', BINARY), false, 'an id already queued is skipped');
      const lease = await queue.lease({ leaseMs: 60_000 });
      assert.ok(lease);
      assert.equal(lease.id, 'a1');
      assert.deepEqual(lease.payload, BINARY);
      assert.equal(lease.partition, 'alice');
      assert.equal(lease.timeouts, 0);
      assert.equal(lease.nacks, 0);
      assert.match(lease.token, /^[0-9a-f]{32}$/);
      assert.equal(await queue.ack(lease), 1);
      assert.equal(await queue.ack(lease), 0, 'a stale token acks nothing');
      assert.equal(await queue.lease({ leaseMs: 60_000 }), null);
    });

    test('enqueueMany serves partitions in turn; weights and priorities order them', async () => {
      const queue = new Queue(client, fresh());
      const added = await queue.enqueueMany([
        { partition: 'alice', id: 'a1', payload: 'x' },
        { partition: 'alice', id: 'a2', payload: 'x' },
        { partition: 'alice', id: 'a3', payload: 'x' },
        { partition: 'bob', id: 'b1', payload: 'x', weight: 2 },
        { partition: 'bob', id: 'b2', payload: 'x' },
      ]);
      assert.equal(added, 5);
      await queue.enqueue('carol', 'urgent', 'x', { priority: 10 });
      const leased = await queue.leaseMany(10, { leaseMs: 60_000 });
      assert.deepEqual(
        leased.map((lease) => lease.id),
        ['urgent', 'a1', 'b1', 'a2', 'a3', 'b2'],
      );
    });

    test('delayMs defers an item: not leased before it is due', async () => {
      const queue = new Queue(client, fresh());
      assert.equal(await queue.enqueue('alice', 'later', 'x', { delayMs: 300 }), true);
      const stats = await queue.stats();
      assert.equal(stats.delayed, 1);
      assert.ok(stats.nextDueMs !== null && stats.nextDueMs > Date.now());
      assert.equal(await queue.lease({ leaseMs: 60_000 }), null);
      const lease = await queue.lease({ leaseMs: 60_000, blockMs: 3_000 });
      assert.equal(lease?.id, 'later');
    });

    test('ackAndLease settles and leases in one call; with costs, ACKCOST', async () => {
      const queue = new Queue(client, fresh());
      await queue.enqueueMany(['j1', 'j2', 'j3'].map((id) => ({ partition: 'p', id, payload: id })));
      const [first] = await queue.leaseMany(1, { leaseMs: 60_000 });
      assert.ok(first);
      const stale = { id: 'j1', token: '0'.repeat(32) };
      const got = await queue.ackAndLease([first, stale], 1, { leaseMs: 60_000 });
      assert.deepEqual(got.acked, [true, false]);
      assert.deepEqual(
        got.leases.map((lease) => lease.id),
        ['j2'],
      );
      const [second] = got.leases;
      assert.ok(second);
      const charged = await queue.ackAndLease([second], 1, { leaseMs: 60_000, costs: [5] });
      assert.deepEqual(charged.acked, [true]);
      const [third] = charged.leases;
      assert.ok(third);
      assert.equal(await queue.ackCost({ lease: third, cost: 3 }), 1);
      assert.equal((await queue.stats()).totals.acked, 3);
      await assert.rejects(queue.ackAndLease([third], 1, { leaseMs: 1, costs: [] }), InvalidArgumentError);
    });

    test('renew extends a live lease (with a cost), and says when one is lost', async () => {
      const queue = new Queue(client, fresh());
      await queue.enqueue('p', 'r1', 'x');
      const lease = await queue.lease({ leaseMs: 60_000 });
      assert.ok(lease);
      assert.equal(await queue.renew(lease, 120_000, { cost: 7 }), true);
      const expiry = (await queue.stats()).nextExpiryMs;
      assert.ok(expiry !== null && expiry > Date.now() + 100_000);
      assert.equal(await queue.cancel('r1'), 1);
      assert.equal(await queue.renew(lease, 1_000), false);
    });

    test('nack: delayed, dead, released uncounted; stale is null; the policy buries past MAX-NACKS', async () => {
      const queue = new Queue(client, fresh());
      await queue.enqueueMany(['n1', 'n2', 'n3'].map((id) => ({ partition: 'p', id, payload: id })));
      const [n1, n2, n3] = await queue.leaseMany(3, { leaseMs: 60_000 });
      assert.ok(n1 && n2 && n3);
      assert.equal(await queue.nack(n1, { delayMs: 60_000 }), 'delayed');
      assert.equal(await queue.nack(n1), null, 'a stale token changes nothing');
      assert.equal(await queue.nack(n2, { dead: true }), 'dead');
      assert.equal(await queue.release(n3), true);
      let stats = await queue.stats();
      assert.deepEqual([stats.delayed, stats.dead, stats.queued, stats.totals.nacked], [1, 1, 1, 2]);
      await queue.setPolicy({ maxNacks: 0 });
      const again = await queue.lease({ leaseMs: 60_000 });
      assert.ok(again);
      assert.equal(again.nacks, 0, 'a release counts no nack');
      assert.equal(await queue.nack(again), 'dead', 'past MAX-NACKS a plain nack buries it');
      stats = await queue.stats();
      assert.equal(stats.dead, 2);
      await assert.rejects(queue.nack(again, { dead: true, release: true }), InvalidArgumentError);
    });

    test('dead lists why items died; revive queues them again, counters reset; cancel deletes', async () => {
      const queue = new Queue(client, fresh());
      await queue.enqueue('tenant-7', 'd1', BINARY, { weight: 3 });
      const lease = await queue.lease({ leaseMs: 60_000 });
      assert.ok(lease);
      await queue.nack(lease, { dead: true, reason: Buffer.from('TypeError: x is undefined\n    at handler') });
      const [dead] = await queue.dead();
      assert.ok(dead);
      assert.equal(dead.id, 'd1');
      assert.deepEqual(dead.payload, BINARY);
      assert.equal(dead.partition, 'tenant-7');
      assert.equal(dead.weight, 3);
      assert.equal(dead.nacks, 1);
      assert.equal(dead.reason, 'nack');
      assert.equal(dead.lastError, 'TypeError: x is undefined\n    at handler');
      assert.ok(Math.abs(dead.diedAtMs - Date.now()) < 10_000);
      assert.equal(await queue.revive('d1', 'not-there'), 1);
      const revived = await queue.lease({ leaseMs: 60_000 });
      assert.equal(revived?.nacks, 0);
      assert.equal(await queue.cancel('d1'), 1);
      assert.deepEqual(await queue.check(), []);
    });

    test('job tells where each item is, and nothing of a finished one', async () => {
      const queue = new Queue(client, fresh());
      await queue.enqueue('p', 'leased', 'x', { weight: 2 });
      const lease = await queue.lease({ leaseMs: 60_000 });
      assert.equal(lease?.id, 'leased');
      await queue.enqueue('d', 'delayed', 'x', { delayMs: 60_000 });
      await queue.enqueue('r', 'queued', 'x', { priority: 3 });
      await queue.nack(lease as NonNullable<typeof lease>, { dead: true, reason: 'boom' });
      const states = (await queue.jobs('queued', 'delayed', 'leased', 'no')).map((job) => job.state);
      assert.deepEqual(states, ['queued', 'delayed', 'dead', 'unknown']);
      const dead = await queue.job('leased');
      assert.equal(dead.partition, 'p');
      assert.equal(dead.weight, 2);
      assert.equal(dead.lastError, 'boom');
      assert.equal(dead.reason, 'nack');
      assert.ok(dead.deadMs !== null && Math.abs(dead.deadMs - Date.now()) < 10_000);
      assert.equal((await queue.job('queued')).priority, 3);
      const unknown = await queue.job('no');
      assert.equal(unknown.partition, null);
      assert.equal(unknown.weight, null);
      await assert.rejects(queue.jobs(), InvalidArgumentError);
    });

    test('results: kept with the ack, read by result and job; a lost lease keeps nothing', async () => {
      const queue = new Queue(client, fresh());
      const unset = await queue.policy();
      assert.deepEqual([unset.resultTtlMs, unset.dedupMs], [null, null]);
      await queue.setPolicy({ resultTtlMs: 60_000, dedupMs: 30_000 });
      const policy = await queue.policy();
      assert.deepEqual([policy.resultTtlMs, policy.dedupMs], [60_000, 30_000]);
      await queue.enqueueMany(['a', 'b', 'c', 'd', 'e'].map((id) => ({ partition: 'p', id, payload: 'x' })));
      const [a, b, c, d] = await queue.leaseMany(4, { leaseMs: 60_000 });
      assert.ok(a && b && c && d);
      assert.equal(await queue.ackResult({ lease: a, result: BINARY }), 1);
      const got = await queue.ackAndLease([b, c], 1, { leaseMs: 60_000, results: ['é', ''] });
      assert.deepEqual(got.acked, [true, true]);
      assert.equal(got.leases[0]?.id, 'e');
      assert.equal(await queue.nack(d), 'queued');
      assert.equal(await queue.ackResult({ lease: d, result: 'late' }), 0, 'a lost lease finishes nothing');
      assert.equal(await queue.cancel('e'), 1);

      const done = await queue.result('a');
      assert.equal(done?.state, 'done');
      assert.deepEqual(done?.result, BINARY);
      assert.ok(done?.finishedMs !== null && Math.abs((done?.finishedMs ?? 0) - Date.now()) < 10_000);
      assert.deepEqual(await queue.job('a'), done, 'VTRR.JOB gives the same map');
      assert.deepEqual(
        (await queue.jobs('b', 'c')).map((job) => job.result?.toString()),
        ['é', ''],
      );
      const cancelled = await queue.result('e');
      assert.deepEqual([cancelled?.state, cancelled?.result], ['cancelled', null]);
      assert.equal(await queue.result('d'), null, 'queued again: not finished');
      assert.equal(await queue.result('never'), null);

      await assert.rejects(queue.ackAndLease([a], 1, { leaseMs: 1, costs: [1], results: ['x'] }), {
        name: 'InvalidArgumentError',
        message: 'costs and results cannot be combined: VTRR.ACKRESULT reports no cost',
      });
      await queue.setPolicy({ resultTtlMs: 'NONE', dedupMs: 'NONE' });
      const cleared = await queue.policy();
      assert.deepEqual([cleared.resultTtlMs, cleared.dedupMs], [null, null]);
    });

    test('result with blockMs waits for the ACK that finishes the job, or replies null at the timeout', async () => {
      const queue = new Queue(client, fresh());
      await queue.setPolicy({ resultTtlMs: 60_000 });
      await queue.enqueue('p', 'slow', 'x');
      const lease = await queue.lease({ leaseMs: 60_000 });
      assert.ok(lease);
      // The wait holds its connection: a client of its own, as the README says.
      const own = await server.client(RESP);
      const waiting = new Queue(own, queue.name);
      assert.equal(await waiting.result('slow', { blockMs: 200 }), null, 'null at the timeout');
      const started = Date.now();
      const waited = waiting.result('slow', { blockMs: 60_000 });
      await sleep(300);
      assert.equal(await queue.ackResult({ lease, result: '42' }), 1);
      const status = await waited;
      assert.deepEqual([status?.state, status?.result?.toString()], ['done', '42']);
      // Woken by the ACK, not by the end of its wait (a minute: a loaded machine is slow).
      const took = Date.now() - started;
      assert.ok(took >= 250 && took < 30_000, `${took} ms`);
      own.destroy();
    });

    test('dedupMs skips an enqueue of an id that finished within the window', async () => {
      const queue = new Queue(client, fresh());
      await queue.enqueue('p', 'once', 'x');
      let lease = await queue.lease({ leaseMs: 60_000 });
      assert.ok(lease);
      await queue.ack(lease);
      assert.equal(await queue.enqueue('p', 'once', 'x'), true, 'no DEDUP-MS: a finished id is new again');
      await queue.setPolicy({ dedupMs: 60_000 });
      lease = await queue.lease({ leaseMs: 60_000 });
      assert.ok(lease);
      await queue.ack(lease);
      assert.equal(await queue.enqueue('p', 'once', 'x'), false, 'acked within DEDUP-MS: skipped');
      await queue.enqueue('p', 'gone', 'x');
      assert.equal(await queue.cancel('gone'), 1);
      assert.equal(
        await queue.enqueueMany(
          ['gone', 'new'].map((id) => ({ partition: 'p', id, payload: 'x' })),
          { delayMs: 10 },
        ),
        1,
      );
      const finished = await queue.job('once');
      assert.deepEqual([finished.state, finished.result], ['done', null], 'no RESULT-TTL: no result kept');
      assert.equal((await queue.job('gone')).state, 'cancelled');
    });

    test('reclaim takes expired leases back, counting a timeout', async () => {
      const queue = new Queue(client, fresh());
      await queue.enqueue('p', 'e1', 'x');
      await queue.lease({ leaseMs: 1 });
      await sleep(20);
      // The module's timer may have reclaimed it first: either way it is back, timed out once.
      assert.ok((await queue.reclaim({ limit: 10 })) <= 1);
      const again = await queue.lease({ leaseMs: 60_000 });
      assert.equal(again?.timeouts, 1);
      assert.equal((await queue.stats()).totals.expired, 1);
    });

    test('stats reads every field', async () => {
      const queue = new Queue(client, fresh());
      await queue.enqueueMany([
        { partition: 'a', id: '1', payload: 'x' },
        { partition: 'b', id: '2', payload: 'x' },
      ]);
      await queue.lease({ leaseMs: 60_000 });
      await queue.pause('b');
      const stats = await queue.stats();
      assert.equal(stats.layout, layout());
      assert.deepEqual(
        {
          queued: stats.queued,
          inflight: stats.inflight,
          partitions: stats.partitions,
          queuedPartitions: stats.queuedPartitions,
          pausedPartitions: stats.pausedPartitions,
          cappedPartitions: stats.cappedPartitions,
          expired: stats.expired,
          delayed: stats.delayed,
          dead: stats.dead,
          nextDueMs: stats.nextDueMs,
        },
        {
          queued: 1,
          inflight: 1,
          partitions: 2,
          queuedPartitions: 1, // b: paused, its item held
          pausedPartitions: 1,
          cappedPartitions: 0,
          expired: 0,
          delayed: 0,
          dead: 0,
          nextDueMs: null,
        },
      );
      assert.equal(stats.held, 1);
      assert.ok(stats.oldestWaitingMs !== null && stats.oldestWaitingMs >= 0);
      assert.ok(stats.nextExpiryMs !== null);
      assert.ok(stats.currentVirtualTime >= 1);
      assert.deepEqual(stats.totals, { enqueued: 2, leased: 1, acked: 0, nacked: 0, dead: 0, expired: 0 });
    });

    test('limit, pause, resume and policy: set and read back', async () => {
      const queue = new Queue(client, fresh());
      await queue.setLimit('alice', { concurrency: 2, share: 3, rate: { amount: 10, perMs: 1_000, burst: 4 } });
      assert.deepEqual(await queue.limit('alice'), {
        concurrency: 2,
        paused: false,
        share: 3,
        rate: { amount: 10, perMs: 1_000, burst: 4 },
        maxQueued: null,
      });
      await queue.setLimit('alice', { concurrency: 'NONE', rate: 'NONE' });
      assert.deepEqual(await queue.limit('alice'), {
        concurrency: null,
        paused: false,
        share: 3,
        rate: null,
        maxQueued: null,
      });
      assert.equal(await queue.pause('alice'), true);
      assert.equal(await queue.pause('alice'), false);
      assert.equal((await queue.limit('alice')).paused, true);
      assert.equal(await queue.resume('alice'), true);
      assert.equal(await queue.resume('alice'), false);
      await queue.setPolicy({
        maxTimeouts: 3,
        maxNacks: 5,
        defaultConcurrency: 10,
        defaultRate: { amount: 5, perMs: 100 },
      });
      assert.deepEqual(await queue.policy(), {
        maxTimeouts: 3,
        maxNacks: 5,
        defaultConcurrency: 10,
        defaultRate: { amount: 5, perMs: 100, burst: 5 },
        concurrency: null,
        rate: null,
        defaultMaxQueued: null,
        resultTtlMs: null,
        dedupMs: null,
      });
      await queue.setPolicy({ maxTimeouts: 'NONE', maxNacks: 'NONE', defaultConcurrency: 'NONE', defaultRate: 'NONE' });
      assert.deepEqual(await queue.policy(), {
        maxTimeouts: null,
        maxNacks: null,
        defaultConcurrency: null,
        defaultRate: null,
        concurrency: null,
        rate: null,
        defaultMaxQueued: null,
        resultTtlMs: null,
        dedupMs: null,
      });
    });

    test("the queue's own cap and rate hold every partition together, and NONE removes them", async () => {
      const queue = new Queue(client, fresh());
      assert.equal((await queue.stats()).tokens, null, 'no queue rate, no bucket');
      const minute = { amount: 5, perMs: 60_000, burst: 4 };
      await queue.setPolicy({ concurrency: 3, rate: minute });
      assert.deepEqual(await queue.policy(), {
        maxTimeouts: null,
        maxNacks: null,
        defaultConcurrency: null,
        defaultRate: null,
        concurrency: 3,
        rate: minute,
        defaultMaxQueued: null,
        resultTtlMs: null,
        dedupMs: null,
      });
      assert.equal((await queue.stats()).tokens, 4, 'a new rate starts full');
      const items = [];
      for (let n = 0; n < 5; n += 1) {
        items.push({ partition: 'a', id: `a${n}`, payload: 'x' }, { partition: 'b', id: `b${n}`, payload: 'x' });
      }
      await queue.enqueueMany(items);
      const leaseTen = async () => (await queue.leaseMany(10, { leaseMs: 60_000 })).map((lease) => lease.id);
      // The cap stops the lease at 3, handed out in turn.
      assert.deepEqual((await leaseTen()).sort(), ['a0', 'a1', 'b0']);
      assert.equal((await queue.stats()).tokens, 1);
      await queue.setPolicy({ concurrency: 'NONE' });
      // Now the bucket: its last token, then nothing until the next is due.
      assert.deepEqual(await leaseTen(), ['b1']);
      assert.equal((await queue.stats()).tokens, 0);
      assert.deepEqual(await leaseTen(), []);
      await assert.rejects(queue.setPolicy({ concurrency: 0 }), InvalidArgumentError);
      await queue.setPolicy({ rate: 'NONE' });
      const policy = await queue.policy();
      assert.deepEqual([policy.concurrency, policy.rate], [null, null]);
      assert.equal((await queue.stats()).tokens, null);
      assert.equal((await leaseTen()).length, 6);
    });

    test('maxQueued refuses an enqueue past it whole, delayed items count, NONE lifts it', async () => {
      const queue = new Queue(client, fresh());
      const counts = async () => {
        const stats = await queue.stats();
        return [stats.queued, stats.delayed, stats.inflight, stats.partitions, stats.totals];
      };
      const item = (partition: string, id: string) => ({ partition, id, payload: 'x' });
      await queue.setLimit('a', { maxQueued: 2 });
      assert.equal((await queue.limit('a')).maxQueued, 2);
      assert.equal(await queue.enqueueMany([item('a', 'a1'), item('b', 'b1')]), 2);
      const before = await counts();
      // b's item is refused with a's: one call, one answer.
      await assert.rejects(queue.enqueueMany([item('b', 'b2'), item('a', 'a2'), item('a', 'a3')]), (error: Error) => {
        assert.ok(error instanceof PartitionFullError && error instanceof VtrrError, error.name);
        assert.ok(!(error instanceof InvalidArgumentError), 'backpressure, not a mistake');
        assert.equal(
          error.message,
          "partition 'a' has 1 items waiting and MAX-QUEUED 2: the call would add 2; nothing was enqueued",
        );
        assert.deepEqual([error.partition, error.waiting, error.maxQueued, error.adds], ['a', 1, 2, 2]);
        assert.deepEqual(error.partitionBytes, Buffer.from('a'));
        return true;
      });
      assert.deepEqual(await counts(), before);
      assert.equal((await queue.job('b2')).state, 'unknown');
      // A delayed item waits too; ids already in the queue take no room.
      await assert.rejects(
        queue.enqueueMany([item('a', 'a2'), item('a', 'a3')], { delayMs: 60_000 }),
        PartitionFullError,
      );
      assert.equal(await queue.enqueue('a', 'a2', 'x', { delayMs: 60_000 }), true);
      assert.equal(await queue.enqueueMany([item('a', 'a1'), item('a', 'a2')]), 0);
      await assert.rejects(queue.enqueue('a', 'a3', 'x'), PartitionFullError);
      // The default holds every partition without its own; NONE puts a partition under it.
      await queue.setPolicy({ defaultMaxQueued: 1 });
      assert.equal((await queue.policy()).defaultMaxQueued, 1);
      const b = await queue.partition('b');
      const a = await queue.partition('a');
      assert.deepEqual([b.maxQueued, b.maxQueuedInForce, a.maxQueued, a.maxQueuedInForce], [null, 1, 2, 2]);
      await assert.rejects(queue.enqueue('b', 'b2', 'x'), { name: 'PartitionFullError', maxQueued: 1 });
      await queue.setLimit('a', { maxQueued: 'NONE' });
      assert.equal((await queue.partition('a')).maxQueuedInForce, 1);
      await queue.setPolicy({ defaultMaxQueued: 'NONE' });
      assert.equal((await queue.partition('a')).maxQueuedInForce, null);
      assert.equal(await queue.enqueueMany([item('a', 'a3'), item('a', 'a4'), item('b', 'b2')]), 3);
      // Out of range, the server refuses in the words of the client's own check.
      for (const [command, option] of [
        ['VTRR.LIMIT', 'MAX-QUEUED'],
        ['VTRR.POLICY', 'DEFAULT-MAX-QUEUED'],
      ] as const) {
        const where = command === 'VTRR.LIMIT' ? [queue.name, 'a'] : [queue.name];
        await assert.rejects(client.sendCommand([command, ...where, option, '0']), {
          message: `ERR ${option} must be an integer between 1 and 1000000000, or NONE`,
        });
      }
      assert.deepEqual(await queue.check(), []);
    });

    test("a full partition's name is read back from the message whatever its bytes", async () => {
      const queue = new Queue(client, fresh());
      // A byte that is not UTF-8, a backslash, a newline, and the message's own words.
      const tricky = Buffer.concat([
        Buffer.from([0xe9]),
        Buffer.from(" \\x41\n' has 9 items waiting and MAX-QUEUED 9: the call would add 9; nothing was enqueued"),
      ]);
      await queue.setLimit(tricky, { maxQueued: 1 });
      await queue.enqueueMany([{ partition: tricky, id: 'first', payload: 'x' }]);
      await assert.rejects(queue.enqueueMany([{ partition: tricky, id: 'second', payload: 'x' }]), (error: Error) => {
        assert.ok(error instanceof PartitionFullError);
        assert.deepEqual(error.partitionBytes, tricky);
        assert.deepEqual([error.waiting, error.maxQueued, error.adds], [1, 1, 1]);
        return true;
      });
      // A message that does not read as the module's still makes the class, without the fields.
      const tail = ' has 1 items waiting and MAX-QUEUED 1: the call would add 1; nothing was enqueued';
      for (const message of ["partition 'x' is full", `partition 'a\\q'${tail}`, `partition 'caf\u00e9'${tail}`]) {
        const odd = new PartitionFullError(message);
        assert.deepEqual(
          [odd.partition, odd.partitionBytes, odd.waiting, odd.maxQueued, odd.adds],
          [null, null, null, null, null],
        );
      }
      assert.equal(new PartitionFullError(`partition 'a\\\\q'${tail}`).partition, 'a\\q');
    });

    test('partitions: one, the scan, and the rankings', async () => {
      const queue = new Queue(client, fresh());
      const items = [];
      for (let i = 0; i < 30; i += 1) {
        items.push({ partition: `tenant-${i}`, id: `t${i}`, payload: 'x' });
      }
      items.push({ partition: 'tenant-0', id: 'extra', payload: 'x' });
      await queue.enqueueMany(items);
      await queue.setLimit('tenant-0', { concurrency: 1 });
      const one = await queue.partition('tenant-0');
      assert.equal(one.partition, 'tenant-0');
      assert.equal(one.queued, 2);
      assert.equal(one.concurrency, 1);
      assert.equal(one.concurrencyInForce, 1);
      assert.equal(one.totals.enqueued, 2);
      assert.equal(one.rate, null);
      const never = await queue.partition('nobody');
      assert.equal(never.queued, 0);
      const seen = new Set<string>();
      for await (const view of queue.partitions({ count: 7 })) {
        seen.add(view.partition);
      }
      assert.equal(seen.size, 30);
      const top = await queue.partitionsTop(3, { by: 'queued' });
      assert.equal(top.ranked, 30);
      assert.equal(top.partitions[0]?.partition, 'tenant-0');
      assert.equal(top.partitions.length, 3);
      const page = await queue.partitionsTop(5, { by: 'queued', offset: 28 });
      assert.equal(page.partitions.length, 2);
    });

    test('schedules: set, read with runs, scan, unschedule; runs are enqueued by the server', async () => {
      const queue = new Queue(client, fresh());
      const next = await queue.schedule('nightly', {
        cron: '30 2 * * *',
        tz: 'Europe/Paris',
        partition: 'ops',
        payload: BINARY,
        missed: 'skip',
      });
      assert.ok(next > Date.now());
      const view = await queue.scheduleView('nightly', { runs: 3 });
      assert.ok(view);
      assert.equal(view.cron, '30 2 * * *');
      assert.equal(view.tz, 'Europe/Paris');
      assert.equal(view.everyMs, null);
      assert.equal(view.missed, 'skip');
      assert.equal(view.partition, 'ops');
      assert.deepEqual(view.payload, BINARY);
      assert.equal(view.nextMs, next);
      assert.equal(view.runs.length, 3);
      assert.equal(await queue.scheduleView('nothing'), null);
      await queue.schedule('tick', { everyMs: 100, partition: 'ops', payload: 'tick', weight: 2 });
      const names = [];
      for await (const schedule of queue.schedules({ count: 1 })) {
        names.push(schedule.name);
      }
      assert.deepEqual(names.sort(), ['nightly', 'tick']);
      const run = await queue.lease({ leaseMs: 60_000, blockMs: 3_000 });
      assert.match(run?.id ?? '', /^schedule:tick:\d+$/);
      assert.equal(run?.partition, 'ops');
      assert.equal(await queue.unschedule('tick', 'nightly', 'nothing'), 2);
      await assert.rejects(queue.schedule('both', { everyMs: 1, cron: '* * * * *', partition: 'p', payload: 'x' }), {
        name: 'InvalidArgumentError',
        message: 'everyMs and cron cannot be combined',
      });
    });

    test('convert moves the queue to the other layout and back; inspect reads a logical key', async () => {
      const queue = new Queue(client, fresh());
      await queue.enqueue('p', 'c1', 'x');
      const other = layout() === 'keys' ? 'native' : 'keys';
      assert.equal(await queue.convert(other), true);
      assert.equal((await queue.stats()).layout, other);
      assert.equal(await queue.convert(other), false);
      assert.equal(await queue.convert(layout()), true);
      const task = (await queue.inspect('task')) as Buffer[];
      assert.deepEqual(
        task.map((entry) => entry.toString()),
        ['c1', 'x'],
      );
      assert.equal(await queue.recount(), 0);
    });

    test('ids and partitions that are not UTF-8 keep their bytes through fenced calls', async () => {
      const queue = new Queue(client, fresh());
      const id = Buffer.from([0xfe, 0x01, 0xff]);
      await queue.enqueueMany([{ partition: Buffer.from([0xc0]), id, payload: 'x' }]);
      const lease = await queue.lease({ leaseMs: 60_000 });
      assert.ok(lease);
      assert.deepEqual(lease.idBytes, id);
      assert.equal(await queue.ack(lease), 1, 'the ack sends the id bytes the lease came with');
    });
  });
}

describe('errors', () => {
  test('a bad argument is refused before anything is sent, in the server words', async () => {
    const client = await server.client();
    const queue = new Queue(client, fresh());
    const before = await client.sendCommand(['INFO', 'commandstats']);
    const cases: [() => Promise<unknown>, string | RegExp, new (message: string) => Error][] = [
      [() => queue.enqueue('', 'id', 'x'), 'partition must not be empty', InvalidArgumentError],
      [() => queue.enqueue('p', '', 'x'), 'id must not be empty', InvalidArgumentError],
      [() => queue.enqueue('p', 'schedule:x:1', 'x'), /^id must not begin with 'schedule:'/, InvalidArgumentError],
      [
        () => queue.enqueue('p', 'id', 'x', { weight: 0 }),
        'weight must be an integer between 1 and 1000000000',
        InvalidArgumentError,
      ],
      [
        () => queue.enqueue('p', 'id', 'x', { weight: 1e9 + 1 }),
        'weight must be an integer between 1 and 1000000000',
        InvalidArgumentError,
      ],
      [
        () => queue.enqueue('p', 'id', 'x', { weight: 1.5 }),
        'weight must be an integer between 1 and 1000000000',
        InvalidArgumentError,
      ],
      [
        () => queue.enqueue('p', 'id', { a: 1 } as never),
        /^payload must be a Buffer, a Uint8Array or a string, not Object/,
        TypeError,
      ],
      [
        () => queue.enqueue('p', 'id', 'x', { priority: 101 }),
        'PRIORITY must be an integer between -100 and 100',
        InvalidArgumentError,
      ],
      [
        () => queue.enqueue('p', 'id', 'x', { delayMs: -1 }),
        'delay-ms must be an integer between 0 and 315360000000',
        InvalidArgumentError,
      ],
      [() => queue.enqueueMany([]), 'enqueue needs at least one item', InvalidArgumentError],
      [
        () => queue.lease({ leaseMs: 0 }),
        'lease-ms must be an integer between 1 and 315360000000',
        InvalidArgumentError,
      ],
      [() => queue.leaseMany(0, { leaseMs: 10 }), 'COUNT must be a positive integer', InvalidArgumentError],
      [() => queue.setLimit('p', { share: 0 }), 'SHARE must be an integer between 1 and 1000000', InvalidArgumentError],
      [() => queue.setLimit('p', {}), 'setLimit needs concurrency, share, rate or maxQueued', InvalidArgumentError],
      [
        () => queue.setLimit('p', { maxQueued: 0 }),
        'MAX-QUEUED must be an integer between 1 and 1000000000',
        InvalidArgumentError,
      ],
      [
        () => queue.setPolicy({ defaultMaxQueued: 1e9 + 1 }),
        'DEFAULT-MAX-QUEUED must be an integer between 1 and 1000000000',
        InvalidArgumentError,
      ],
      [() => queue.pause(''), 'partition must not be empty', InvalidArgumentError],
      [() => queue.ack(), 'ack needs at least one lease', InvalidArgumentError],
      [
        () => queue.nack({ id: 'i', token: 't' }, { reason: 'x'.repeat(4097) }),
        'REASON must be between 1 and 4096 bytes',
        InvalidArgumentError,
      ],
      [
        () => queue.nack({ id: 'i', token: 't' }, { release: true, reason: 'x' }),
        'REASON and RELEASE cannot be combined',
        InvalidArgumentError,
      ],
      [
        () => queue.ackResult({ lease: { id: 'i', token: 't' }, result: Buffer.alloc(1_048_577) }),
        'result must be at most 1048576 bytes',
        InvalidArgumentError,
      ],
      [
        () => queue.ackAndLease([{ id: 'i', token: 't' }], 1, { leaseMs: 1, results: ['é'.repeat(524_289)] }),
        'result must be at most 1048576 bytes',
        InvalidArgumentError,
      ],
      [
        () => queue.setPolicy({ resultTtlMs: 0 }),
        'RESULT-TTL must be an integer between 1 and 2592000000',
        InvalidArgumentError,
      ],
      [() => queue.result('', { blockMs: 1 }), 'id must not be empty', InvalidArgumentError],
    ];
    for (const [call, message, kind] of cases) {
      await assert.rejects(call(), (error: Error) => {
        assert.ok(error instanceof kind, `${error.name}: ${error.message}`);
        if (typeof message === 'string') {
          assert.equal(error.message, message);
        } else {
          assert.match(error.message, message);
        }
        return true;
      });
    }
    const after = await client.sendCommand(['INFO', 'commandstats']);
    const vtrrCalls = (info: unknown) =>
      String(info)
        .match(/cmdstat_vtrr\.[a-z]+:calls=\d+/g)
        ?.join() ?? '';
    assert.equal(vtrrCalls(after), vtrrCalls(before), 'no vtrr command reached the server');
    client.destroy();
  });

  test("the server's refusals become typed errors without their code", async () => {
    const client = await server.client();
    const queue = new Queue(client, fresh());
    await client.sendCommand(['SET', `vtrr:${queue.name}:queue`, 'not a queue']);
    await assert.rejects(queue.stats(), (error: Error) => {
      assert.ok(error instanceof WrongTypeError);
      assert.match(error.message, /^Operation against a key holding the wrong kind of value/);
      return true;
    });
    await assert.rejects(new Queue(client, fresh()).convert('other' as never), InvalidArgumentError);
    await assert.rejects(new Queue(client, fresh()).schedule('s', { cron: 'nope', partition: 'p', payload: 'x' }), {
      name: 'InvalidArgumentError',
      message: /^CRON is not a valid pattern/,
    });
    // The module's own bound on a result, in the words the client checks it with.
    await assert.rejects(client.sendCommand(['VTRR.ACKRESULT', fresh(), 'i', 't', Buffer.alloc(1_048_577)]), {
      message: 'ERR result must be at most 1048576 bytes',
    });
    await client.sendCommand(['ACL', 'SETUSER', 'narrow', 'on', 'nopass', '+@all', '~other:*']);
    const narrow = await server.client();
    await narrow.sendCommand(['AUTH', 'narrow', 'x']);
    await assert.rejects(new Queue(narrow, fresh()).stats(), NoPermissionError);
    narrow.destroy();
    client.destroy();
  });

  test('a server without the module says so, naming the server', async () => {
    const plain = await Server.start({ withModule: false });
    const client = await plain.client();
    await assert.rejects(new Queue(client, 'files').stats(), (error: Error) => {
      assert.ok(error instanceof ModuleNotLoadedError);
      assert.equal(
        error.message,
        `the vtrr module is not loaded on redis://127.0.0.1:${plain.port}/0: ` +
          'add `loadmodule /path/to/libvtrr.so` to its configuration (docs/operations.md, Loading the module); ' +
          'if it is, it is older than VTRR.STATS',
      );
      return true;
    });
    client.destroy();
    plain.stop();
  });
});
