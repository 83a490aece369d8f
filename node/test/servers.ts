/**
 * Real redis-server processes with the module loaded, for the tests: a
 * free port, a directory of its own, killed and removed when the test
 * process exits however it exits. `VTRR_MODULE` (default: the repository's
 * target/debug/libvtrr.so), `VTRR_REDIS_SERVER` (default `redis-server`) and
 * `VTRR_LAYOUT` (`keys`, the default, or `native`: the layout every queue is
 * created in) choose what runs, as they do for the Rust and Python suites.
 */

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { createClient, createCluster, type RedisClientType, type RedisClusterType } from 'redis';

/** The repository's root (the compiled tests run from node/build/test). */
export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const SLOTS = 16384;

export function modulePath(): string {
  return process.env.VTRR_MODULE ?? join(REPO, 'target', 'debug', 'libvtrr.so');
}

export function layout(): 'keys' | 'native' {
  const value = process.env.VTRR_LAYOUT ?? 'keys';
  if (value !== 'keys' && value !== 'native') {
    throw new Error(`VTRR_LAYOUT must be keys or native, not ${value}`);
  }
  return value;
}

const live = new Set<Server>();
// A test that fails, or a test process that exits or is interrupted, leaves no server behind.
function stopAll(): void {
  for (const server of live) {
    server.stop();
  }
}
process.on('exit', stopAll);
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    stopAll();
    process.kill(process.pid, signal);
  });
}

function bindable(port: number): Promise<boolean> {
  return new Promise((done) => {
    const probe = createServer();
    probe.once('error', () => done(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => done(true)));
  });
}

/** A free port whose cluster bus port (+10000) is free too, as a cluster node needs. */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 35_000);
    if ((await bindable(port)) && (await bindable(port + 10_000))) {
      return port;
    }
  }
}

/** The first line a raw `PING` gets: `+PONG`, or `-LOADING ...` while it loads its AOF. */
function ping(port: number): Promise<string> {
  return new Promise((done) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    socket.setTimeout(1_000, () => socket.destroy());
    socket.once('error', () => done(''));
    socket.once('close', () => done(''));
    socket.once('data', (data) => {
      done(data.toString().split('\r\n')[0] ?? '');
      socket.destroy();
    });
    socket.write('PING\r\n');
  });
}

export interface ServerOptions {
  /** Module arguments after the path (`default-layout` is VTRR_LAYOUT's unless given). */
  readonly moduleArgs?: readonly string[];
  /** More redis-server arguments. */
  readonly extra?: readonly string[];
  /** False: a plain server, without the module. */
  readonly withModule?: boolean;
}

/** One redis-server on a free loopback port in a directory of its own. */
export class Server {
  process: ChildProcess | undefined;
  private readonly clients = new Set<RedisClientType>();

  private constructor(
    readonly port: number,
    readonly dir: string,
    private readonly args: string[],
  ) {}

  static async start(options: ServerOptions = {}): Promise<Server> {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'vtrr-node-'));
    const args = [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      dir,
      '--logfile',
      join(dir, 'redis.log'),
      '--save',
      '',
      '--appendonly',
      'no',
      // A replica's full sync starts at once, not after 5 s.
      '--repl-diskless-sync-delay',
      '0',
    ];
    if (options.withModule ?? true) {
      const moduleArgs = options.moduleArgs ?? [];
      args.push('--loadmodule', modulePath(), ...moduleArgs);
      if (!moduleArgs.includes('default-layout')) {
        args.push('default-layout', layout());
      }
    }
    args.push(...(options.extra ?? []));
    const server = new Server(port, dir, args);
    live.add(server);
    await server.launch();
    return server;
  }

  private async launch(): Promise<void> {
    const child = spawn(process.env.VTRR_REDIS_SERVER ?? 'redis-server', this.args, { stdio: 'ignore' });
    this.process = child;
    const deadline = Date.now() + 90_000;
    while ((await ping(this.port)) !== '+PONG') {
      if (child.exitCode !== null) {
        throw new Error(`redis-server exited; log:\n${this.log()}`);
      }
      if (Date.now() > deadline) {
        throw new Error(`redis-server did not start; log:\n${this.log()}`);
      }
      await sleep(20);
    }
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** A connected node-redis client (RESP2 unless asked), dropped by `stop` if still open. */
  async client(RESP: 2 | 3 = 2): Promise<RedisClientType> {
    const client = createClient({ url: this.url, RESP }) as unknown as RedisClientType;
    client.on('error', () => undefined); // a test that kills the server expects the errors
    await client.connect();
    this.clients.add(client);
    return client;
  }

  /** One command on a short-lived connection. */
  async command(...args: string[]): Promise<unknown> {
    const client = await this.client();
    try {
      return await client.sendCommand(args);
    } finally {
      client.destroy();
      this.clients.delete(client);
    }
  }

  log(): string {
    try {
      return readFileSync(join(this.dir, 'redis.log'), 'utf8');
    } catch {
      return '';
    }
  }

  /** SIGKILL, as a crash: nothing more is written; its files stay. */
  async kill(): Promise<void> {
    const child = this.process;
    if (child !== undefined && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((done) => child.once('exit', done));
      child.kill('SIGKILL');
      await exited;
    }
  }

  /** Starts again on the same port and directory (it loads its AOF). */
  async restart(): Promise<void> {
    await this.kill();
    await this.launch();
  }

  stop(): void {
    for (const client of this.clients) {
      if (client.isOpen) {
        client.destroy();
      }
    }
    this.process?.kill('SIGKILL');
    rmSync(this.dir, { recursive: true, force: true });
    live.delete(this);
  }
}

/** `masters` masters on loopback sharing the slots evenly, met by hand. */
export class Cluster {
  private readonly clients: RedisClusterType[] = [];

  private constructor(readonly nodes: Server[]) {}

  static async start(masters = 3): Promise<Cluster> {
    const extra = ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000'];
    const nodes = await Promise.all(Array.from({ length: masters }, () => Server.start({ extra })));
    const cluster = new Cluster(nodes);
    try {
      const perMaster = Math.floor(SLOTS / masters);
      for (const [index, node] of nodes.entries()) {
        const last = index === masters - 1 ? SLOTS - 1 : (index + 1) * perMaster - 1;
        await node.command('CLUSTER', 'ADDSLOTSRANGE', String(index * perMaster), String(last));
      }
      for (const node of nodes.slice(1)) {
        await node.command('CLUSTER', 'MEET', '127.0.0.1', String(nodes[0]?.port));
      }
      const deadline = Date.now() + 30_000;
      for (;;) {
        const states = await Promise.all(nodes.map((node) => node.command('CLUSTER', 'INFO')));
        if (states.every((info) => String(info).includes('cluster_state:ok'))) {
          return cluster;
        }
        if (Date.now() > deadline) {
          throw new Error('the cluster did not come up');
        }
        await sleep(50);
      }
    } catch (error) {
      cluster.stop();
      throw error;
    }
  }

  /** A connected node-redis cluster client, dropped by `stop` if still open. */
  async client(RESP: 2 | 3 = 2): Promise<RedisClusterType> {
    const cluster = createCluster({
      rootNodes: this.nodes.map((node) => ({ url: node.url })),
      RESP,
    }) as unknown as RedisClusterType;
    cluster.on('error', () => undefined);
    await cluster.connect();
    this.clients.push(cluster);
    return cluster;
  }

  stop(): void {
    for (const client of this.clients) {
      if (client.isOpen) {
        client.destroy();
      }
    }
    for (const node of this.nodes) {
      node.stop();
    }
  }
}
