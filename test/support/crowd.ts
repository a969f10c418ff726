// Queues of thousands of waiters without thousands of clients: another session's nodes, made fast.
import { randomUUID } from 'node:crypto';
import { CreateMode, type ZkSession } from '../../lib/core/client/session.js';
import { wireSessionFactory } from '../../lib/core/client/wire/session.js';
import { isZkCode, ZkCode } from '../../lib/core/client/zk-error.js';
import { zkConnectString } from './helpers.js';

const EMPTY = Buffer.alloc(0);

/** A raw session of its own, connected. */
export async function rawSession(sessionTimeoutMs = 10_000): Promise<ZkSession> {
  let connected!: () => void;
  const up = new Promise<void>((resolve) => (connected = resolve));
  const session = wireSessionFactory({ connectString: zkConnectString(), sessionTimeoutMs }, { onConnected: () => connected(), onConnecting: () => undefined, onClosed: () => undefined });
  await up;
  return session;
}

/**
 * `count` waiters queued in the lock path `path` (made persistent, with its parents): one session's
 * ephemeral sequential nodes named like Curator's protected lock nodes, `_c_<uuid>-<padding>lock-`
 * (padding: that many more bytes per name), created in one pipelined burst. `close()` ends the
 * session (the server deletes the nodes) and deletes the path.
 */
export async function crowdQueue(path: string, count: number, { padding = 0 } = {}): Promise<{ session: ZkSession; close(): Promise<void> }> {
  const session = await rawSession();
  for (let at = path.indexOf('/', 1); at > 0; at = path.indexOf('/', at + 1)) {
    await session.create(path.slice(0, at), EMPTY, CreateMode.PERSISTENT).catch(ignoreExisting);
  }
  await session.create(path, EMPTY, CreateMode.PERSISTENT).catch(ignoreExisting);
  const pad = padding > 0 ? `${'w'.repeat(padding - 1)}-` : '';
  await Promise.all(Array.from({ length: count }, () => session.create(`${path}/_c_${randomUUID()}-${pad}lock-`, EMPTY, CreateMode.EPHEMERAL_SEQUENTIAL)));
  return {
    session,
    close: async () => {
      await session.close();
      const cleaner = await rawSession();
      try {
        await cleaner.delete(path).catch((error: unknown) => (isZkCode(error, ZkCode.NONODE) ? undefined : Promise.reject(error)));
      } finally {
        await cleaner.close();
      }
    },
  };
}

function ignoreExisting(error: unknown): void {
  if (!isZkCode(error, ZkCode.NODEEXISTS)) throw error;
}
