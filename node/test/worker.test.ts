/** Worker: jobs, failures, lost leases, shutdown, costs and connections, against real servers. */

import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { createClient, type RedisClientType } from 'redis';
import { commandsOf, read } from '../src/exchange.js';
import type { Fenced, Round } from '../src/index.js';
import {
  type Failure,
  type Job,
  JobReleasedError,
  LeaseLostError,
  Queue,
  RetryError,
  UnrecoverableError,
  Worker,
  type WorkerOptions,
} from '../src/index.js';
import { recorder, until } from './observe.js';
import { Server } from './servers.js';

const FIXTURE = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'worker.js');

function fresh(): string {
  return `{w-${randomBytes(4).toString('hex')}}`;
}

let server: Server;
let client: RedisClientType;
const workers: Worker[] = [];
before(async () => {
  server = await Server.start({ moduleArgs: ['reclaim-interval-ms', '50'] });
  client = await server.client();
});
after(async () => {
  await Promise.all(workers.map((worker) => worker.close({ force: true })));
  server.stop();
});

function startWorker(queue: Queue, handler: (job: Job) => unknown, options: WorkerOptions = {}): Worker {
  const worker = new Worker(queue, handler, { logger: recorder(), blockMs: 100, ...options });
  workers.push(worker);
  return worker;
}

describe('running jobs', () => {
  test('every job runs once, at most `concurrency` at a time, with its partition, payload and counters', async () => {
    const queue = new Queue(client, fresh());
    const items = Array.from({ length: 40 }, (_, i) => ({
      partition: `tenant-${i % 5}`,
      id: `job-${i}`,
      payload: Buffer.from([i, 0xff, 0x00]),
    }));
    await queue.enqueueMany(items);
    const seen = new Map<string, { partition: string; payload: Buffer; timeouts: number; nacks: number }>();
    let running = 0;
    let most = 0;
    const logger = recorder();
    const worker = startWorker(
      queue,
      async (job) => {
        running += 1;
        most = Math.max(most, running);
        await sleep(5);
        running -= 1;
        seen.set(job.id, { partition: job.partition, payload: job.payload, timeouts: job.timeouts, nacks: job.nacks });
        return job.id.toUpperCase();
      },
      { concurrency: 4, logger },
    );
    const results: unknown[] = [];
    worker.on('completed', (_job, result) => results.push(result));
    await until('every job completed', () => results.length === 40);
    assert.equal(seen.size, 40);
    for (const item of items) {
      assert.deepEqual(seen.get(item.id), { partition: item.partition, payload: item.payload, timeouts: 0, nacks: 0 });
    }
    assert.ok(results.includes('JOB-7'), 'completed carries the handler result');
    assert.equal(most, 4);
    const stats = await queue.stats();
    assert.deepEqual([stats.queued, stats.inflight, stats.totals.acked], [0, 0, 40]);
    assert.match(
      logger.lines[0] ?? '',
      new RegExp(
        `^INFO vtrr worker: queue \\${queue.name.slice(0, -1)}\\} \\(layout (keys|native)\\) on redis://127.0.0.1:${server.port}/0, concurrency 4, lease 30000 ms$`,
      ),
    );
    assert.ok(logger.lines.some((line) => /^INFO job-3 \(partition tenant-3\) done in \d+\.\d{3} s$/.test(line)));
    await worker.close();
  });

  test('a handler that throws is retried with backoff, then dead-lettered by the queue policy; the worker goes on', async () => {
    const queue = new Queue(client, fresh());
    await queue.setPolicy({ maxNacks: 2 });
    await queue.enqueue('p', 'flaky', 'x');
    const logger = recorder();
    const failures: [number, Failure][] = [];
    const worker = startWorker(
      queue,
      (job) => {
        if (job.id === 'flaky') {
          throw new Error(`boom ${job.nacks}`);
        }
      },
      { logger, backoff: { delay: 20, jitter: 0 } },
    );
    worker.on('failed', (job, _error, failure) => failures.push([job.nacks, failure]));
    await until('three failures', () => failures.length === 3);
    assert.deepEqual(failures, [
      [0, { state: 'delayed', delayMs: 20 }],
      [1, { state: 'delayed', delayMs: 40 }],
      [2, { state: 'dead' }],
    ]);
    const [dead] = await queue.dead();
    assert.equal(dead?.reason, 'max-nacks');
    assert.equal(dead?.nacks, 3);
    // The NACK's REASON: what failed last, and where.
    assert.match(dead?.lastError ?? '', /^Error: boom 2\n {4}at .*worker\.test\.js/);
    assert.ok(
      logger.lines.some((line) =>
        /^WARN flaky \(partition p\) failed after \d\.\d{3} s \(Error: boom 0\): retry in 20 ms$/.test(line),
      ),
    );
    assert.ok(
      logger.lines.some((line) =>
        /^WARN flaky \(partition p\) failed after \d\.\d{3} s \(Error: boom 2\): dead-lettered by the queue's MAX-NACKS$/.test(
          line,
        ),
      ),
    );
    await queue.enqueue('p', 'fine', 'x');
    await once(worker, 'completed');
    assert.equal(worker.isRunning(), true);
    await worker.close();
  });

  test('UnrecoverableError buries at once, RetryError sets the delay, a thrown non-Error still fails', async () => {
    const queue = new Queue(client, fresh());
    await queue.enqueueMany([
      { partition: 'p', id: 'poison', payload: 'x' },
      { partition: 'p', id: 'later', payload: 'x' },
      { partition: 'p', id: 'odd', payload: 'x' },
    ]);
    const failures = new Map<string, [string, Failure]>();
    const worker = startWorker(
      queue,
      (job) => {
        if (job.id === 'poison') {
          throw new UnrecoverableError('cannot parse');
        }
        if (job.id === 'later') {
          throw new RetryError('rate limited upstream', { delayMs: 60_000 });
        }
        throw 'a string';
      },
      { backoff: () => 50_000 },
    );
    worker.on('failed', (job, error, failure) => failures.set(job.id, [error.message, failure]));
    await until('three failures', () => failures.size === 3);
    assert.deepEqual(failures.get('poison'), ['cannot parse', { state: 'dead' }]);
    assert.deepEqual(failures.get('later'), ['rate limited upstream', { state: 'delayed', delayMs: 60_000 }]);
    assert.deepEqual(failures.get('odd'), ['a handler threw a string', { state: 'delayed', delayMs: 50_000 }]);
    const [dead] = await queue.dead();
    assert.equal(dead?.reason, 'nack');
    await worker.close();
  });

  test('a lost lease aborts job.signal with LeaseLostError and is never acked', async () => {
    const queue = new Queue(client, fresh());
    await queue.enqueue('p', 'doomed', 'x');
    let reason: unknown;
    const worker = startWorker(
      queue,
      async (job) => {
        await queue.cancel(job.id); // as an operator would, while it runs
        await once(job.signal, 'abort');
        reason = job.signal.reason;
        assert.equal(job.lost, true);
      },
      { leaseMs: 300 },
    );
    let completed = false;
    worker.on('completed', () => {
      completed = true;
    });
    const [lost] = await once(worker, 'lost');
    assert.equal((lost as Job).id, 'doomed');
    assert.ok(reason instanceof LeaseLostError);
    await sleep(100);
    assert.equal(completed, false);
    assert.equal((await queue.stats()).totals.acked, 0);
    await worker.close();
  });

  test('a job whose item was cancelled while it ran is reported lost at its ACK, not completed', async () => {
    const queue = new Queue(client, fresh());
    await queue.enqueue('p', 'cancelled', 'x');
    const worker = startWorker(queue, async (job) => {
      await queue.cancel(job.id);
    });
    let completed = false;
    worker.on('completed', () => {
      completed = true;
    });
    const [lost] = await once(worker, 'lost');
    assert.equal((lost as Job).id, 'cancelled');
    assert.equal((lost as Job).lost, true);
    assert.equal(completed, false);
    await worker.close();
  });

  test('reportCost charges the partition what the job reported: its next items go behind the others', async () => {
    const order: string[] = [];
    const run = async (report: boolean): Promise<string[]> => {
      const queue = new Queue(client, fresh());
      // Queued first, so served first: a1 b1 a2 b2 a3 b3 by their weights alone.
      await queue.enqueueMany(
        ['a1', 'b1', 'a2', 'b2', 'a3', 'b3'].map((id) => ({ partition: id.slice(0, 1), id, payload: 'x' })),
      );
      const served: string[] = [];
      const worker = startWorker(queue, (job) => {
        served.push(job.id);
        if (report && job.partition === 'a') {
          job.reportCost(10);
        }
      });
      await until('all six served', () => served.length === 6);
      await worker.close();
      return served;
    };
    order.push(...(await run(false)));
    assert.deepEqual(order, ['a1', 'b1', 'a2', 'b2', 'a3', 'b3']);
    assert.deepEqual(await run(true), ['a1', 'b1', 'b2', 'b3', 'a2', 'a3']);
  });

  test("cost 'time' charges run time: a slow tenant falls behind a quick one", async () => {
    const queue = new Queue(client, fresh());
    await queue.enqueueMany(
      ['s1', 'q1', 's2', 'q2', 's3', 'q3'].map((id) => ({ partition: id.slice(0, 1), id, payload: 'x' })),
    );
    const served: string[] = [];
    const worker = startWorker(
      queue,
      async (job) => {
        served.push(job.id);
        if (job.partition === 's') {
          await sleep(30);
        }
      },
      { cost: 'time' },
    );
    await until('all six served', () => served.length === 6);
    // q1 and s1 tie (both first in line): served in member order.
    assert.deepEqual(served, ['q1', 's1', 'q2', 'q3', 's2', 's3']);
    await worker.close();
  });

  test("a handler's return value is its job's result: bytes, a string, JSON; null or one that cannot be kept, none", async () => {
    const queue = new Queue(client, fresh());
    await queue.setPolicy({ resultTtlMs: 60_000 });
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const returns: Record<string, unknown> = {
      bytes: Buffer.from([0xff, 0x00]),
      text: 'é',
      json: { n: [1, 2.5, null] },
      nothing: null,
      undefined: undefined,
      cyclic,
      'too-big': Buffer.alloc(1_048_577),
    };
    await queue.enqueueMany(Object.keys(returns).map((id, i) => ({ partition: `p${i}`, id, payload: 'x' })));
    const logger = recorder();
    let completed = 0;
    const worker = startWorker(queue, (job) => returns[job.id], { concurrency: 3, logger });
    worker.on('completed', () => {
      completed += 1;
    });
    await until('every job completed', () => completed === Object.keys(returns).length);
    await worker.close();
    const kept = await queue.jobs(...Object.keys(returns));
    assert.deepEqual(
      kept.map((job) => [job.id, job.state, job.result?.toString('hex') ?? null]),
      [
        ['bytes', 'done', 'ff00'],
        ['text', 'done', Buffer.from('é').toString('hex')],
        ['json', 'done', Buffer.from('{"n":[1,2.5,null]}').toString('hex')],
        ['nothing', 'done', null],
        ['undefined', 'done', null],
        ['cyclic', 'done', null],
        ['too-big', 'done', null],
      ],
    );
    const unkept = logger.lines.filter((line) => line.includes('not kept as its result'));
    assert.deepEqual(unkept.map((line) => line.split(':')[0]).sort(), ['WARN cyclic', 'WARN too-big']);
  });

  test('a round trip sends results beside the acks that have none, and reads each reply back', () => {
    const [a, b, c] = ['a', 'b', 'c'].map((id) => ({ id, token: `t-${id}` })) as [Fenced, Fenced, Fenced];
    const round: Round = {
      leaseMs: 1000,
      acks: [a],
      charges: [{ lease: b, cost: 4 }],
      results: [{ lease: c, result: 'r' }],
      nacks: [],
      renewals: [],
      count: 2,
    };
    const lease = ['VTRR.LEASE', 'q', '1000', 'COUNT', '2', 'WITHCOUNTERS', 'WITHPARTITION'];
    assert.deepEqual(
      commandsOf('q', round).map((sent) => sent.args),
      [
        ['VTRR.ACK', 'q', 'a', 't-a'],
        ['VTRR.ACKRESULT', 'q', 'c', 't-c', 'r'],
        [...lease, 'ACKCOST', 'b', 't-b', '4'],
      ],
    );
    const got = read(round, [0, 1, { acked: [true], leases: [] }]);
    assert.deepEqual([got.acked, got.charged, got.returned], [[false], [true], [true]]);
    const onlyResults: Round = { ...round, acks: [], charges: [] };
    assert.deepEqual(
      commandsOf('q', onlyResults).map((sent) => sent.args),
      [[...lease, 'ACKRESULT', 'c', 't-c', 'r']],
    );
    assert.deepEqual(read(onlyResults, [{ acked: [false], leases: [] }]).returned, [false]);
  });

  test('a listener that throws is logged, and the worker goes on', async () => {
    const queue = new Queue(client, fresh());
    await queue.enqueueMany(['l1', 'l2'].map((id) => ({ partition: 'p', id, payload: 'x' })));
    const logger = recorder();
    const worker = startWorker(queue, () => undefined, { logger });
    let completed = 0;
    worker.on('completed', () => {
      completed += 1;
      throw new Error('a broken metrics hook');
    });
    await until('both completed', () => completed === 2);
    assert.ok(logger.lines.includes("ERROR a 'completed' listener threw: a broken metrics hook"));
    assert.equal(worker.isRunning(), true);
    assert.equal((await queue.stats()).totals.acked, 2);
    await worker.close();
  });

  test("'drained' comes once each time the queue empties", async () => {
    const queue = new Queue(client, fresh());
    const worker = startWorker(queue, () => undefined);
    let drained = 0;
    worker.on('drained', () => {
      drained += 1;
    });
    await until('the first drain', () => drained === 1);
    await sleep(300); // idle leases find nothing again: no second event
    assert.equal(drained, 1);
    await queue.enqueue('p', 'one', 'x');
    await until('the second drain', () => drained === 2);
    await worker.close();
  });
});

describe('closing', () => {
  test('close() lets running jobs finish and acks them', async () => {
    const queue = new Queue(client, fresh());
    await queue.enqueueMany([
      { partition: 'p', id: 'c1', payload: 'x' },
      { partition: 'q', id: 'c2', payload: 'x' },
    ]);
    let active = 0;
    const worker = startWorker(queue, () => sleep(300), { concurrency: 2 });
    worker.on('active', () => {
      active += 1;
    });
    await until('both running', () => active === 2);
    await worker.close();
    const stats = await queue.stats();
    assert.deepEqual([stats.totals.acked, stats.inflight, stats.queued], [2, 0, 0]);
  });

  test('past the grace, running jobs go back unrun (signal aborted), no failure counted', async () => {
    const queue = new Queue(client, fresh());
    await queue.enqueueMany([
      { partition: 'p', id: 'g1', payload: 'x' },
      { partition: 'q', id: 'g2', payload: 'x' },
    ]);
    const reasons: unknown[] = [];
    let active = 0;
    const worker = startWorker(
      queue,
      async (job) => {
        active += 1;
        await once(job.signal, 'abort');
        reasons.push(job.signal.reason);
      },
      { concurrency: 2, graceMs: 200 },
    );
    await until('both running', () => active === 2);
    const started = Date.now();
    await worker.close();
    assert.ok(Date.now() - started >= 150, 'waited for the grace');
    assert.equal(reasons.length, 2);
    assert.ok(reasons.every((reason) => reason instanceof JobReleasedError));
    const stats = await queue.stats();
    assert.deepEqual([stats.queued, stats.inflight, stats.totals.nacked], [2, 0, 0]);
    const again = await queue.leaseMany(2, { leaseMs: 1_000 });
    assert.deepEqual(
      again.map((lease) => lease.nacks),
      [0, 0],
    );
  });

  test('close({ force: true }) gives running jobs back at once', async () => {
    const queue = new Queue(client, fresh());
    await queue.enqueue('p', 'f1', 'x');
    let active = false;
    const worker = startWorker(
      queue,
      async (job) => {
        active = true;
        await once(job.signal, 'abort');
      },
      { graceMs: 60_000 },
    );
    await until('running', () => active);
    const started = Date.now();
    await worker.close({ force: true });
    assert.ok(Date.now() - started < 30_000, `closed in ${Date.now() - started} ms, not after the minute's grace`);
    assert.equal((await queue.stats()).queued, 1);
  });

  test('an item a lease brings back after close() goes back unrun, uncounted', async () => {
    // A user without CLIENT: close() cannot end the worker's BLOCK, which an item then answers.
    await client.sendCommand(['ACL', 'SETUSER', 'noclient', 'on', '>pw', '+@all', '-client', '~*', '&*']);
    const narrow = createClient({ url: `redis://noclient:pw@127.0.0.1:${server.port}` });
    narrow.on('error', () => undefined);
    await narrow.connect();
    const name = fresh();
    const logger = recorder();
    let ran = false;
    const worker = startWorker(
      new Queue(narrow, name),
      () => {
        ran = true;
      },
      { blockMs: 5_000, logger },
    );
    await until('its lease waits in the server', async () =>
      String(await client.sendCommand(['CLIENT', 'LIST']))
        .split('\n')
        .some((line) => line.includes('flags=b ') && line.includes('user=noclient')),
    );
    const closing = worker.close();
    const queue = new Queue(client, name);
    await queue.enqueue('p', 'late', 'x');
    await closing;
    assert.equal(ran, false);
    assert.ok(logger.lines.includes('WARN stopping: late goes back to the queue unrun'), logger.lines.join('\n'));
    const stats = await queue.stats();
    assert.deepEqual([stats.queued, stats.inflight, stats.totals.nacked], [1, 0, 0]);
    assert.equal((await queue.lease({ leaseMs: 1_000 }))?.nacks, 0);
    narrow.destroy();
  });

  test('an idle worker closes at once, though it waits in a long BLOCK', async () => {
    const queue = new Queue(client, fresh());
    const worker = startWorker(queue, () => undefined, { blockMs: 60_000 });
    await until('its lease waits in the server', async () =>
      String(await client.sendCommand(['CLIENT', 'LIST'])).includes('flags=b db=0'),
    );
    const unblocks = async () => {
      const stats = String(await client.sendCommand(['INFO', 'commandstats']));
      return Number(/cmdstat_client\|unblock:calls=(\d+)/.exec(stats)?.[1] ?? 0);
    };
    const before = await unblocks();
    const started = Date.now();
    await worker.close();
    // Ended by CLIENT UNBLOCK (at once), not by the minute's BLOCK running out, nor
    // by close()'s own deadline for a round trip that does not come back (5 s).
    assert.ok((await unblocks()) > before, 'its BLOCK was ended by CLIENT UNBLOCK');
    assert.ok(Date.now() - started < 30_000, `closed in ${Date.now() - started} ms`);
  });
});

describe('worker processes', () => {
  function spawnWorker(url: string, name: string, extra: Record<string, string> = {}): ChildProcess {
    return spawn(process.execPath, [FIXTURE], {
      env: { ...process.env, VTRR_URL: url, VTRR_QUEUE: name, VTRR_BLOCK_MS: '100', ...extra },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  }

  async function output(child: ChildProcess): Promise<{ code: number | null; stderr: string }> {
    let stderr = '';
    child.stderr?.on('data', (data: Buffer) => {
      stderr += data.toString();
    });
    const [code] = (await once(child, 'exit')) as [number | null];
    return { code, stderr };
  }

  test('a server without the module stops the worker with one clear line and exit code 1', async () => {
    const plain = await Server.start({ withModule: false });
    try {
      const { code, stderr } = await output(spawnWorker(plain.url, 'files'));
      assert.equal(code, 1);
      const lines = stderr.trim().split('\n');
      assert.equal(lines.length, 1, stderr);
      assert.match(
        lines[0] ?? '',
        new RegExp(
          `ERROR vtrr.worker: vtrr worker stopped: the vtrr module is not loaded on redis://127.0.0.1:${plain.port}/0: add`,
        ),
      );
    } finally {
      plain.stop();
    }
  });

  test('SIGTERM lets the running job finish, then the process exits 0', async () => {
    const name = fresh();
    const queue = new Queue(client, name);
    await queue.enqueue('p', 'slow', 'x');
    const child = spawnWorker(server.url, name, { VTRR_JOB_MS: '500' });
    const done = output(child);
    await until('the job running', async () => (await queue.stats()).inflight === 1);
    child.kill('SIGTERM');
    const { code, stderr } = await done;
    assert.equal(code, 0, stderr);
    assert.match(stderr, /INFO vtrr.worker: signal SIGTERM: stopping \(grace 30.0 s; a second signal stops at once\)/);
    assert.deepEqual(await client.lRange(`done:${name}`, 0, -1), [`slow:${child.pid}:78`]);
    assert.equal((await queue.stats()).totals.acked, 1);
  });
});

test('a lost connection: one line when it goes, one when it is back, and the worker goes on', async () => {
  const own = await Server.start();
  try {
    const ownClient = await own.client();
    const queue = new Queue(ownClient, fresh());
    const logger = recorder();
    const worker = startWorker(queue, () => undefined, { logger });
    let completed = 0;
    worker.on('completed', () => {
      completed += 1;
    });
    await once(worker, 'drained');
    await own.kill();
    await sleep(1_500); // node-redis retries meanwhile: several failed attempts
    await own.restart();
    await queue.enqueue('p', 'after', 'x');
    await until('the job after the restart', () => completed === 1);
    const trouble = logger.lines.filter((line) => !line.startsWith('INFO'));
    assert.equal(trouble.length, 2, trouble.join('\n'));
    assert.match(trouble[0] ?? '', /^ERROR queue \{w-[0-9a-f]+\}: .*; retrying$/);
    assert.match(trouble[1] ?? '', /^WARN queue \{w-[0-9a-f]+\}: reachable again$/);
    await worker.close();
  } finally {
    own.stop();
  }
});
