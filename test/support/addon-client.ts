// Connections on the C addon (the `zookeeper` package, NativeZkSession) for the tests that check the
// addon's own session: its request window and backlog, its batching of replies, its create with an
// ACL. ZkConnection opens the library's TypeScript client by default; these open with the addon
// (ZkConnectionOptions.client 'addon'), are tracked like `connect()`'s and closed by `closeAll()`.
import type { LockEngine, LockEngineOptions } from '../../lib/core/lock-engine.js';
import type { ZkConnectionOptions } from '../../lib/core/connection-options.js';
import type { ZkConnection } from '../../lib/core/zk-connection.js';
import { CreateMode, type NativeZkSession } from '../../lib/core/zk-session.js';
import { connect, engine, uniquePath } from './helpers.js';

/** `connect()` on the C addon. */
export function connectAddon(options: Partial<ZkConnectionOptions> = {}): Promise<ZkConnection> {
  return connect({ client: 'addon', ...options });
}

/** `engine()` on the C addon. */
export function engineAddon(options: Partial<ZkConnectionOptions> = {}, engineOptions: LockEngineOptions = {}): Promise<LockEngine> {
  return engine({ client: 'addon', ...options }, engineOptions);
}

/** The addon session's private window and counters (read only, to say where the window stood). */
export function windowOf(session: unknown): { window: number; inFlight: number; backlog: number } {
  const s = session as { window: number; inFlight: number; backlog: { size: number } };
  return { window: s.window, inFlight: s.inFlight, backlog: s.backlog.size };
}

/** An ephemeral node at a fresh path (its parent made where missing), for requests to ask about. */
export async function parentAndNode(session: NativeZkSession | { create: NativeZkSession['create'] }, label: string): Promise<string> {
  const path = uniquePath(label);
  await session.create(path.slice(0, path.lastIndexOf('/')), Buffer.alloc(0), CreateMode.PERSISTENT).catch(() => undefined);
  await session.create(path, Buffer.alloc(0), CreateMode.EPHEMERAL);
  return path;
}
