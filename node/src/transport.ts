/**
 * How a command reaches the server: over a node-redis client or cluster
 * (npm `redis` 5 or 6, RESP2 or RESP3), or an ioredis client. Each
 * transport delivers replies in one shape, whatever the client and
 * protocol: bulk and simple strings as Buffers, maps as flat field/value
 * arrays, integers as numbers, nil as null. The structural types below are
 * what this package uses of each client, so it depends on neither.
 */

import type { Arg } from './commands.js';

/** What a connection's owner hears of its state (the worker logs each change once). */
export interface ConnectionEvents {
  onError(error: Error): void;
  onReady(): void;
}

/** Sends commands for one queue; `duplicate` gives the worker a connection of its own. */
export interface Transport {
  /** The server, as an operator names it (a URL without credentials). */
  readonly server: string;
  /** Whether the client is a cluster's (the queue name must then carry a hash tag). */
  readonly cluster: boolean;
  /** One command; `key` routes it on a cluster (the queue name, the command's second word, by default). */
  send(args: readonly Arg[], key?: Arg): Promise<unknown>;
  /**
   * A transport over a connection of its own, connecting: a worker's
   * `LEASE ... BLOCK` must not hold up the application's commands on a
   * shared connection.
   */
  duplicate(events: ConnectionEvents): Transport;
  /** Resolves once connected (the client retries by its own strategy meanwhile). */
  connected(): Promise<void>;
  /** Drops a connection `duplicate` opened, failing what it still waits for (the application's own is left alone). */
  close(): void;
}

// node-redis' RESP type codes (RESP_TYPES): bulk strings, simple strings, maps.
const BLOB_STRING = 36;
const SIMPLE_STRING = 43;
const MAP = 37;
const TYPE_MAPPING = { typeMapping: { [BLOB_STRING]: Buffer, [SIMPLE_STRING]: Buffer, [MAP]: Array } };

interface Emitter {
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'ready', listener: () => void): unknown;
}

/** What this package uses of a node-redis client (`createClient()`). */
export interface NodeRedisClient extends Emitter {
  sendCommand(args: Arg[], options?: object): Promise<unknown>;
  duplicate(): NodeRedisClient;
  connect(): Promise<unknown>;
  destroy(): void;
  readonly options?:
    | {
        readonly url?: string | undefined;
        readonly socket?: object | undefined;
        readonly database?: number | undefined;
      }
    | undefined;
}

/** What this package uses of a node-redis cluster (`createCluster()`). */
export interface NodeRedisCluster extends Emitter {
  sendCommand(
    firstKey: Arg | undefined,
    isReadonly: boolean | undefined,
    args: Arg[],
    options?: object,
  ): Promise<unknown>;
  getSlotMaster(slot: number): { readonly host: string; readonly port: number };
  duplicate(): NodeRedisCluster;
  connect(): Promise<unknown>;
  destroy(): void;
}

/** What this package uses of an ioredis client (`new Redis()`; not its Cluster). */
export interface IoRedisClient extends Emitter {
  callBuffer(command: string, ...args: Arg[]): Promise<unknown>;
  duplicate(): IoRedisClient;
  disconnect(): void;
  readonly options: {
    readonly host?: string | undefined;
    readonly port?: number | undefined;
    readonly db?: number | undefined;
    readonly path?: string | undefined;
  };
}

/** A client this package can send commands over. */
export type RedisConnection = NodeRedisClient | NodeRedisCluster | IoRedisClient;

function isCluster(client: RedisConnection): client is NodeRedisCluster {
  return typeof (client as Partial<NodeRedisCluster>).getSlotMaster === 'function';
}

function isIoRedis(client: RedisConnection): client is IoRedisClient {
  return typeof (client as Partial<IoRedisClient>).callBuffer === 'function';
}

/** A URL without its credentials. */
function withoutCredentials(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.username = '';
    parsed.password = '';
    return parsed.toString();
  } catch {
    return 'redis (an unparsable URL)';
  }
}

function describeNodeRedis(client: NodeRedisClient): string {
  const options = client.options;
  const socket = (options?.socket ?? {}) as { host?: string; port?: number; path?: string; tls?: boolean };
  if (socket.path !== undefined) {
    return `unix://${socket.path}`;
  }
  if (socket.host !== undefined || socket.port !== undefined) {
    const scheme = socket.tls === true ? 'rediss' : 'redis';
    return `${scheme}://${socket.host ?? 'localhost'}:${socket.port ?? 6379}/${options?.database ?? 0}`;
  }
  return options?.url === undefined ? 'redis://localhost:6379/0' : withoutCredentials(options.url);
}

/** The transport over `client`. */
export function transportOf(client: RedisConnection): Transport {
  if (isCluster(client)) {
    return new NodeRedisClusterTransport(client, false);
  }
  if (isIoRedis(client)) {
    return new IoRedisTransport(client, false);
  }
  if (typeof (client as Partial<NodeRedisClient>).sendCommand === 'function') {
    return new NodeRedisTransport(client as NodeRedisClient, false);
  }
  throw new TypeError('expected a node-redis client or cluster (npm `redis`), or an ioredis client');
}

function listen(client: Emitter, events: ConnectionEvents): void {
  client.on('error', (error) => events.onError(error));
  client.on('ready', () => events.onReady());
}

/** The application's client is connected already (its owner connects it); a duplicate, once `connect()` resolves. */
function connecting(client: { connect(): Promise<unknown> } | undefined): Promise<void> {
  if (client === undefined) {
    return Promise.resolve();
  }
  const connected = client.connect().then(() => undefined);
  connected.catch(() => undefined); // dropped by close() before it connected: nobody waits
  return connected;
}

class NodeRedisTransport implements Transport {
  readonly cluster = false;
  readonly server: string;
  private readonly ready: Promise<void>;

  constructor(
    private readonly client: NodeRedisClient,
    private readonly owned: boolean,
  ) {
    this.server = describeNodeRedis(client);
    this.ready = connecting(owned ? client : undefined);
  }

  send(args: readonly Arg[]): Promise<unknown> {
    return this.client.sendCommand([...args], TYPE_MAPPING);
  }

  duplicate(events: ConnectionEvents): Transport {
    const own = this.client.duplicate();
    listen(own, events);
    return new NodeRedisTransport(own, true);
  }

  connected(): Promise<void> {
    return this.ready;
  }

  close(): void {
    if (this.owned) {
      this.client.destroy();
    }
  }
}

class NodeRedisClusterTransport implements Transport {
  readonly cluster = true;
  private readonly ready: Promise<void>;

  constructor(
    private readonly client: NodeRedisCluster,
    private readonly owned: boolean,
  ) {
    this.ready = connecting(owned ? client : undefined);
  }

  get server(): string {
    try {
      const node = this.client.getSlotMaster(0);
      return `redis://${node.host}:${node.port} (a node of a Redis Cluster)`;
    } catch {
      return 'a Redis Cluster (not connected)';
    }
  }

  send(args: readonly Arg[], key: Arg | undefined = args[1]): Promise<unknown> {
    return this.client.sendCommand(key, false, [...args], TYPE_MAPPING);
  }

  duplicate(events: ConnectionEvents): Transport {
    const own = this.client.duplicate();
    listen(own, events);
    return new NodeRedisClusterTransport(own, true);
  }

  connected(): Promise<void> {
    return this.ready;
  }

  close(): void {
    if (this.owned) {
      this.client.destroy();
    }
  }
}

class IoRedisTransport implements Transport {
  readonly cluster = false;
  readonly server: string;

  constructor(
    private readonly client: IoRedisClient,
    private readonly owned: boolean,
  ) {
    const { host = 'localhost', port = 6379, db = 0, path } = client.options;
    this.server = path === undefined ? `redis://${host}:${port}/${db}` : `unix://${path}`;
  }

  send(args: readonly Arg[]): Promise<unknown> {
    const [command = '', ...rest] = args;
    return this.client.callBuffer(String(command), ...rest);
  }

  duplicate(events: ConnectionEvents): Transport {
    // ioredis connects a duplicate at once, and queues commands until it is ready.
    const own = this.client.duplicate();
    listen(own, events);
    return new IoRedisTransport(own, true);
  }

  connected(): Promise<void> {
    return Promise.resolve();
  }

  close(): void {
    if (this.owned) {
      this.client.disconnect();
    }
  }
}
