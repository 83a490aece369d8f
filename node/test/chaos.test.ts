/**
 * Worker processes killed with SIGKILL in a loop under load, and the server
 * killed and restarted from its AOF (`appendfsync always`): every job is
 * done, and a second run happens only where a kill explains it.
 */

import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Queue } from '../src/index.js';
import { Server } from './servers.js';

const FIXTURE = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'worker.js');
const JOBS = 3_000;

test('kill -9 of workers and of the server, in a loop, loses nothing and runs twice only what a kill explains', async (t) => {
  const server = await Server.start({
    moduleArgs: ['reclaim-interval-ms', '50'],
    extra: ['--appendonly', 'yes', '--appendfsync', 'always'],
  });
  const name = '{chaos}';
  const workers: ChildProcess[] = [];
  try {
    const client = await server.client();
    await new Queue(client, name).enqueueMany(
      Array.from({ length: JOBS }, (_, i) => ({ partition: `p${i % 10}`, id: `job-${i}`, payload: '' })),
    );
    client.destroy();
    const spawnWorker = (): ChildProcess =>
      spawn(process.execPath, [FIXTURE], {
        env: {
          ...process.env,
          VTRR_URL: server.url,
          VTRR_QUEUE: name,
          VTRR_CONCURRENCY: '4',
          VTRR_LEASE_MS: '1000',
          VTRR_BLOCK_MS: '100',
          VTRR_JOB_MS: '5',
        },
        stdio: 'ignore',
      });
    workers.push(spawnWorker(), spawnWorker());
    const killed = new Set<number>();
    const restarts: number[] = []; // how many runs were recorded before each server restart
    for (let round = 0; round < 12; round += 1) {
      await sleep(100 + Math.random() * 200);
      const victim = workers.splice(Math.floor(Math.random() * workers.length), 1)[0];
      assert.ok(victim?.pid !== undefined);
      const exited = once(victim, 'exit');
      victim.kill('SIGKILL');
      await exited;
      killed.add(victim.pid);
      workers.push(spawnWorker());
      if (round === 4 || round === 9) {
        restarts.push(Number(await server.command('LLEN', `done:${name}`)));
        await server.restart();
      }
    }
    const observer = await server.client();
    const queue = new Queue(observer, name);
    const deadline = Date.now() + 60_000;
    for (;;) {
      const stats = await queue.stats();
      if (stats.queued + stats.inflight + stats.delayed === 0) {
        break;
      }
      assert.ok(Date.now() < deadline, `never drained: ${JSON.stringify(stats)}`);
      await sleep(100);
    }
    const runs = (await observer.lRange(`done:${name}`, 0, -1)).map((entry) => entry.split(':'));
    const byJob = new Map<string, [number, number][]>();
    for (const [position, [job = '', pid = '']] of runs.entries()) {
      byJob.set(job, [...(byJob.get(job) ?? []), [position, Number(pid)]]);
    }
    assert.ok((restarts.at(-1) ?? JOBS) < JOBS, 'the kills came while jobs were still running');
    assert.equal(byJob.size, JOBS, 'every job ran');
    for (const [job, seen] of byJob) {
      for (const [position, pid] of seen.slice(0, -1)) {
        // A run's ACK can be lost only if its worker was killed, or the server went down, after it recorded itself.
        const explained = killed.has(pid) || restarts.some((before) => position < before);
        assert.ok(explained, `${job} ran again though nothing killed its run: ${JSON.stringify(seen)}`);
      }
    }
    assert.deepEqual(await queue.check(), []);
    const stats = await queue.stats();
    assert.deepEqual([stats.queued, stats.inflight, stats.delayed, stats.dead], [0, 0, 0, 0]);
    const doubled = runs.length - JOBS;
    t.diagnostic(`${runs.length} runs of ${JOBS} jobs; ${doubled} second runs, all explained by a kill`);
  } finally {
    for (const worker of workers) {
      worker.kill('SIGKILL');
    }
    server.stop();
  }
});
