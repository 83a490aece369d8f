/**
 * The package as a user gets it: `npm pack`, then `npm install` of the
 * tarball into an empty project, which imports it (its types checked by
 * tsc, and node/README.md's TypeScript examples with them) and runs one
 * job against a real server.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { REPO, Server } from './servers.js';

const run = promisify(execFile);
const PACKAGE = join(REPO, 'node');

const CONSUMER = `import { createClient } from 'redis';
import { type Job, Queue, Worker } from 'vtrr';

const client = createClient({ url: process.argv[2] });
await client.connect();
const queue = new Queue(client, 'installed');
await queue.enqueue('tenant', 'first', Buffer.from([0xff, 0x00]));
const worker = new Worker(queue, (job: Job) => job.payload.toString('hex'), { logger: { info() {}, warn() {}, error() {} } });
worker.on('completed', async (job: Job, result: unknown) => {
  console.log(job.id, job.partition, result);
  await worker.close();
  client.destroy();
});
`;

test('npm pack, npm install of the tarball into an empty project, one job run through it', async () => {
  const project = mkdtempSync(join(tmpdir(), 'vtrr-install-'));
  const server = await Server.start();
  try {
    const { stdout: packed } = await run('npm', ['pack', '--silent', '--pack-destination', project], {
      cwd: PACKAGE,
      timeout: 120_000,
    });
    const tarball = join(project, packed.trim().split('\n').at(-1) ?? '');
    const { stdout: listing } = await run('tar', ['-tzf', tarball]);
    const files = listing.trim().split('\n');
    assert.ok(files.includes('package/dist/index.js') && files.includes('package/dist/index.d.ts'), listing);
    assert.ok(!files.some((file) => file.includes('/test/') || file.includes('/src/')), 'tests and sources stay out');
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
    // The registry's redis and Node's types, from the cache npm ci filled when there is one.
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', tarball, 'redis@6', '@types/node@20'], {
      cwd: project,
      timeout: 120_000,
    });
    writeFileSync(join(project, 'consumer.ts'), CONSUMER);
    // Each example of the README a file of its own: they type-check as a user's code would.
    const examples = [...readFileSync(join(PACKAGE, 'README.md'), 'utf8').matchAll(/^```ts\n([\s\S]*?)^```$/gm)];
    assert.ok(examples.length >= 2, 'the README has its TypeScript examples');
    const snippets = examples.map((example, i) => {
      writeFileSync(join(project, `readme-${i}.ts`), `${example[1]}\nexport {};\n`);
      return `readme-${i}.ts`;
    });
    writeFileSync(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { target: 'es2022', module: 'nodenext', strict: true, types: ['node'], outDir: 'out' },
        files: ['consumer.ts', ...snippets],
      }),
    );
    await run(join(PACKAGE, 'node_modules', '.bin', 'tsc'), ['-p', project], { cwd: project }).catch((error) => {
      throw new Error(`the consumer does not type-check:\n${error.stdout}`);
    });
    const { stdout } = await run(process.execPath, [join(project, 'out', 'consumer.js'), server.url], {
      cwd: project,
      timeout: 30_000,
    });
    assert.equal(stdout.trim(), 'first tenant ff00');
  } finally {
    server.stop();
    rmSync(project, { recursive: true, force: true });
  }
});
