// Connections on the C addon (the `zookeeper` package, NativeZkSession) for the tests that check the
// addon itself (its ACL'd create, its fix version); ZkConnection opens the library's TypeScript
// client by default. Tests of behaviour both clients must have open with `connect({ client })` /
// `engine({ client })` (test/support/helpers.ts) for each of CLIENT_KINDS.
//
// Also the two probes the request-window and reply-delivery tests use on either client: both
// sessions keep the shared request bookkeeping (in-flight window, backlog) under the same names.
import type { ZkConnectionOptions } from '../../lib/core/connection/connection-options.js';
import type { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { CreateMode, type ZkSession } from '../../lib/core/client/session.js';
import { connect, uniquePath } from './helpers.js';

/** `connect()` on the C addon. */
export function connectAddon(options: Partial<ZkConnectionOptions> = {}): Promise<ZkConnection> {
  return connect({ client: 'addon', ...options });
}

/**
 * A session's private window and counters (read only, to say where the window stood): the same
 * fields on NativeZkSession and WireZkSession.
 */
export function windowOf(session: ZkSession): { window: number; inFlight: number; backlog: number } {
  const s = session as unknown as { window: number; inFlight: number; backlog: { size: number } };
  if (typeof s.window !== 'number' || typeof s.inFlight !== 'number' || typeof s.backlog?.size !== 'number') {
    throw new Error(`windowOf: ${session.constructor.name} keeps no request window under these names`);
  }
  return { window: s.window, inFlight: s.inFlight, backlog: s.backlog.size };
}

/**
 * Moves the session's deadline clock (RequestClock.lastAnsweredSentAt, on either client) to `at`
 * (performance.now() time): the newest answered request was sent then.
 */
export function setLastAnsweredSentAt(session: ZkSession, at: number): void {
  const clock = (session as unknown as { requests?: { lastAnsweredSentAt: number } }).requests;
  if (!clock || typeof clock.lastAnsweredSentAt !== 'number') throw new Error(`setLastAnsweredSentAt: ${session.constructor.name} has no RequestClock`);
  clock.lastAnsweredSentAt = at;
}

/** An ephemeral node at a fresh path (its parent made where missing), for requests to ask about. */
export async function parentAndNode(session: Pick<ZkSession, 'create'>, label: string): Promise<string> {
  const path = uniquePath(label);
  await session.create(path.slice(0, path.lastIndexOf('/')), Buffer.alloc(0), CreateMode.PERSISTENT).catch(() => undefined);
  await session.create(path, Buffer.alloc(0), CreateMode.EPHEMERAL);
  return path;
}
