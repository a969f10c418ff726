import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { LockEngine, type LockEngineOptions } from '../../lib/core/lock-engine.js';
import { ZkConnection, type ConnectionEvents } from '../../lib/core/connection/zk-connection.js';
import type { ZkConnectionOptions } from '../../lib/core/connection/connection-options.js';
import { CreateMode, type ZkSession } from '../../lib/core/client/session.js';
import { wireSessionFactory } from '../../lib/core/client/wire/session.js';
import { TICK_TIME_MS } from './zk-server.js';

/** The ZooKeeper the Jest global setup started (or ZK_CONNECT from the environment). */
export function zkConnectString(): string {
  const value = process.env.ZK_CONNECT;
  if (!value) throw new Error('ZK_CONNECT is not set: run the tests through Jest (its global setup starts ZooKeeper)');
  return value;
}

/** A fresh lock path no other test uses. */
export function uniquePath(label = 'test'): string {
  return `/it/${label}-${randomUUID().slice(0, 8)}`;
}

const opened: ZkConnection[] = [];

/** The test servers' tickTime (scripts/zookeeper.sh): what the lost signal allows for (serverTickTimeMs). */
export const TEST_SERVER_TICK_MS = TICK_TIME_MS;

/** A connected ZkConnection, closed by `closeAll()`. */
export async function connect(options: Partial<ZkConnectionOptions> = {}): Promise<ZkConnection> {
  const connection = new ZkConnection({ connectString: zkConnectString(), sessionTimeoutMs: 4000, serverTickTimeMs: TEST_SERVER_TICK_MS, ...options });
  opened.push(connection);
  await connection.connect();
  return connection;
}

export async function engine(options: Partial<ZkConnectionOptions> = {}, engineOptions: LockEngineOptions = {}): Promise<LockEngine> {
  return new LockEngine(await connect(options), { app: 'jest', ...engineOptions });
}

export async function closeAll(): Promise<void> {
  await Promise.all(opened.splice(0).map((c) => c.close()));
}

/** Resolves with the event's arguments, or rejects after `timeoutMs`. */
export async function nextEvent<K extends keyof ConnectionEvents>(
  connection: ZkConnection,
  event: K,
  timeoutMs = 30_000,
): Promise<ConnectionEvents[K]> {
  return (await once(connection as never, event as string, { signal: AbortSignal.timeout(timeoutMs) })) as ConnectionEvents[K];
}

/**
 * Polls `probe` (a ZooKeeper read, say) until it returns true; for conditions the server reaches on
 * its own clock, like container reaping. Generous bound, short steps.
 */
export async function eventually(probe: () => Promise<boolean> | boolean, timeoutMs = 30_000, stepMs = 100): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await probe()) return;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

/**
 * Closes `session` on the server from a second client that attaches to it by id and password, the
 * way ZooKeeper's own tests expire a session. The victim must be kept off the server meanwhile
 * (e.g. behind a cut TcpProxy), or it moves the session back.
 */
export async function killSession(sessionId: string, password: string): Promise<void> {
  // Hex, as both clients give it: the server refuses a wrong password (expired), never mistakes it.
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('killSession: could not attach to the session')), 20_000);
    const session: ZkSession = wireSessionFactory(
      { connectString: zkConnectString(), sessionTimeoutMs: 4000, sessionId, sessionPassword: password },
      {
        onConnected: () => {
          clearTimeout(timer);
          // Resolves once the server has ended the session (its answer to closeSession came).
          void Promise.resolve(session.close()).then(resolve, reject);
        },
        onConnecting: () => undefined,
        onClosed: () => {
          clearTimeout(timer);
          resolve(); // already expired
        },
      },
    );
  });
}

export async function childrenOf(connection: ZkConnection, path: string): Promise<string[]> {
  try {
    return (await connection.session!.getChildren(path)).children;
  } catch (error) {
    if ((error as { codeName?: string }).codeName === 'NONODE') return [];
    throw error;
  }
}

export async function exists(connection: ZkConnection, path: string): Promise<boolean> {
  return (await connection.session!.exists(path)) !== null;
}

/**
 * Deletes `path` and everything below it. For a test that leaves thousands of empty lock paths:
 * ZooKeeper's reaper removes at most 10 000 containers a minute, and its backlog would delay the
 * reaping other tests wait for.
 */
export async function deleteTree(connection: ZkConnection, path: string): Promise<void> {
  const session = connection.session!;
  const children = await session.getChildren(path).then((r) => r.children, () => [] as string[]);
  await Promise.all(children.map((child) => deleteTree(connection, `${path}/${child}`)));
  await session.delete(path).catch(() => undefined);
}

/**
 * Resolves once ZooKeeper's container reaper has run a whole pass since the call, so every
 * container that was empty at the call has been reaped. A pass deletes the candidates it listed at
 * its start in no set order: the first canary container, emptied now, may go before another
 * candidate of its pass; a second one, emptied once the first is gone, goes only in a later pass.
 */
export async function pastContainerReaping(connection: ZkConnection, timeoutMs = 30_000): Promise<void> {
  const session = connection.session!;
  for (let canaries = 0; canaries < 2; canaries++) {
    const canary = `/reaper-canary-${randomUUID().slice(0, 8)}`;
    await session.create(canary, Buffer.alloc(0), CreateMode.CONTAINER);
    await session.create(`${canary}/child`, Buffer.alloc(0), CreateMode.PERSISTENT);
    await session.delete(`${canary}/child`); // the reaper takes a container that had a child and has none
    await eventually(async () => (await session.exists(canary)) === null, timeoutMs);
  }
}
