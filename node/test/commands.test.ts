/**
 * The declarations against the module: every command of its table is
 * declared, every option docs/commands.md gives a command is one its
 * declarations send, and the module parses every option they send. A
 * command or option added to the module and missing here fails.
 */

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { type Arg, commands } from '../src/index.js';
import { REPO, Server } from './servers.js';

const item = { partition: 'p', id: 'i', payload: 'x', weight: 2 };
const held = { id: 'i', token: '0'.repeat(32) };
const rate = { amount: 1, perMs: 1, burst: 1 };

/** Each declaration called with every option it can send (the type makes a new declaration need a line here). */
const everyOption: Record<keyof typeof commands, Arg[][]> = {
  enqueue: [commands.enqueue.parseCommand([item], 5)],
  defer: [commands.defer.parseCommand(1, [item], 5)],
  lease: [commands.lease.parseCommand({ leaseMs: 1, blockMs: 1 })],
  leaseMany: [commands.leaseMany.parseCommand(1, { leaseMs: 1, blockMs: 1 })],
  ackAndLease: [commands.ackAndLease.parseCommand([held], 1, { leaseMs: 1, blockMs: 1 })],
  ackCostAndLease: [commands.ackCostAndLease.parseCommand([{ lease: held, cost: 1 }], 1, { leaseMs: 1, blockMs: 1 })],
  ackResultAndLease: [
    commands.ackResultAndLease.parseCommand([{ lease: held, result: 'r' }], 1, { leaseMs: 1, blockMs: 1 }),
  ],
  ack: [commands.ack.parseCommand([held])],
  ackCost: [commands.ackCost.parseCommand([{ lease: held, cost: 1 }])],
  ackResult: [commands.ackResult.parseCommand([{ lease: held, result: 'r' }])],
  renew: [commands.renew.parseCommand(held, 1, 1)],
  nack: [
    commands.nack.parseCommand(held, { delayMs: 1, reason: 'why' }),
    commands.nack.parseCommand(held, { dead: true }),
    commands.nack.parseCommand(held, { release: true }),
  ],
  reclaim: [commands.reclaim.parseCommand(1)],
  stats: [commands.stats.parseCommand()],
  check: [commands.check.parseCommand()],
  policy: [commands.policy.parseCommand()],
  setPolicy: [
    commands.setPolicy.parseCommand({
      maxTimeouts: 1,
      maxNacks: 1,
      defaultConcurrency: 1,
      defaultRate: rate,
      concurrency: 1,
      rate,
      defaultMaxQueued: 1,
      resultTtlMs: 1,
      dedupMs: 1,
    }),
    commands.setPolicy.parseCommand({
      maxTimeouts: 'NONE',
      maxNacks: 'NONE',
      defaultConcurrency: 'NONE',
      defaultRate: 'NONE',
      concurrency: 'NONE',
      rate: 'NONE',
      defaultMaxQueued: 'NONE',
      resultTtlMs: 'NONE',
      dedupMs: 'NONE',
    }),
  ],
  dead: [commands.dead.parseCommand(1)],
  jobs: [commands.jobs.parseCommand(['i', 'j'])],
  result: [commands.result.parseCommand('i', 1)],
  revive: [commands.revive.parseCommand(['i'])],
  cancel: [commands.cancel.parseCommand(['i'])],
  limit: [commands.limit.parseCommand('p')],
  setLimit: [
    commands.setLimit.parseCommand('p', { concurrency: 1, share: 1, rate, maxQueued: 1 }),
    commands.setLimit.parseCommand('p', { concurrency: 'NONE', rate: 'NONE', maxQueued: 'NONE' }),
  ],
  pause: [commands.pause.parseCommand('p')],
  resume: [commands.resume.parseCommand('p')],
  partitionsPage: [commands.partitionsPage.parseCommand('0', 1)],
  partition: [commands.partition.parseCommand('p')],
  partitionsTop: [commands.partitionsTop.parseCommand(1, 'dead', 1)],
  recount: [commands.recount.parseCommand()],
  schedule: [
    commands.schedule.parseCommand('s', { everyMs: 1000, partition: 'p', payload: 'x', weight: 1, missed: 'all' }),
    commands.schedule.parseCommand('s', { cron: '* * * * *', tz: 'UTC', partition: 'p', payload: 'x' }),
  ],
  unschedule: [commands.unschedule.parseCommand(['s'])],
  schedulesPage: [commands.schedulesPage.parseCommand('0', 1, 1)],
  scheduleView: [commands.scheduleView.parseCommand('s', 1)],
  convert: [commands.convert.parseCommand('native'), commands.convert.parseCommand('keys')],
  inspect: [commands.inspect.parseCommand('task')],
};

/** Commands only a master's replication stream or the AOF sends. */
const INTERNAL = new Set(['vtrr.apply', 'vtrr.load']);

/** The option words each command's syntax lines in docs/commands.md give (`NONE`, `NATIVE|KEYS` included). */
function documentedOptions(): Map<string, Set<string>> {
  const documented = new Map<string, Set<string>>();
  const reference = readFileSync(join(REPO, 'docs', 'commands.md'), 'utf8');
  for (const [, syntax = ''] of reference.matchAll(/^`(VTRR\.[A-Z]+ [^`]*)`$/gm)) {
    const [command = '', ...rest] = syntax.replace(/<[^>]*>/g, ' ').split(/\s+/);
    const words = documented.get(command) ?? new Set<string>();
    for (const word of rest.join(' ').match(/[A-Z][A-Z-]*[A-Z]/g) ?? []) {
      words.add(word);
    }
    documented.set(command, words);
  }
  return documented;
}

/** The upper-case words each command's declarations send. */
function sentOptions(): Map<string, Set<string>> {
  const sent = new Map<string, Set<string>>();
  for (const [key, calls] of Object.entries(everyOption)) {
    const command = commands[key as keyof typeof commands].command;
    const words = sent.get(command) ?? new Set<string>();
    for (const arg of calls.flat()) {
      if (typeof arg === 'string' && /^[A-Z][A-Z-]*[A-Z]$/.test(arg)) {
        words.add(arg);
      }
    }
    sent.set(command, words);
  }
  return sent;
}

let server: Server;
before(async () => {
  server = await Server.start();
});
after(() => server.stop());

test("every command of the module's table is declared (but the internal APPLY and LOAD)", async () => {
  const table = (await server.command('COMMAND', 'LIST', 'FILTERBY', 'MODULE', 'vtrr')) as string[];
  const served = table.map((name) => name.toLowerCase()).filter((name) => !INTERNAL.has(name));
  const declared = new Set(Object.values(commands).map((declaration) => declaration.command.toLowerCase()));
  assert.deepEqual([...declared].sort(), served.sort());
});

test('every option docs/commands.md gives a command is one its declarations send', () => {
  const documented = documentedOptions();
  const sent = sentOptions();
  for (const [command, words] of documented) {
    if (INTERNAL.has(command.toLowerCase())) {
      continue;
    }
    const missing = [...words].filter((word) => !sent.get(command)?.has(word));
    assert.deepEqual(missing, [], `${command}: documented, never sent`);
  }
  assert.ok(documented.size >= 24, `read ${documented.size} syntax lines`);
});

test('the module parses every option the declarations send', async () => {
  const client = await server.client();
  for (const [key, calls] of Object.entries(everyOption)) {
    const command = commands[key as keyof typeof commands].command;
    for (const args of calls) {
      try {
        await client.sendCommand([command, `{options-${key}}`, ...args]);
      } catch (error) {
        // Refusals of what the call means (a stale lease, a slot) are fine; an unknown option is not.
        assert.doesNotMatch(
          (error as Error).message,
          /syntax error|wrong number of arguments/,
          `${command} ${args.join(' ')}`,
        );
      }
    }
  }
  client.destroy();
});
