// Helpers shared by the lock integration tests (one copy each).
import { LockNotAcquiredError } from '../../lib/core/errors.js';
import type { Lease } from '../../lib/core/leases/lease.js';
import type { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { Mutex, type MutexOptions } from '../../lib/core/recipes/mutex.js';
import { CreateMode, type ZkSession } from '../../lib/core/client/session.js';
import { childrenOf, closeAll, connect, engine, eventually, uniquePath, zkConnectString } from './helpers.js';
import { TcpProxy } from './tcp-proxy.js';
import type { LockEngine } from '../../lib/core/lock-engine.js';
import { fourLetter } from './zk-server.js';

export function nameOf(lease: Lease): string {
  return lease.path.slice(lease.path.lastIndexOf('/') + 1);
}

export async function notAcquired(work: Promise<unknown>): Promise<LockNotAcquiredError> {
  const outcome = await work.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
  if ('value' in outcome) throw new Error(`expected LockNotAcquiredError, got ${String(outcome.value)}`);
  expect(outcome.error).toBeInstanceOf(LockNotAcquiredError);
  return outcome.error as LockNotAcquiredError;
}

export function within<T>(work: Promise<T>, ms: number, label: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${label}: not settled within ${ms} ms`)), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

export async function untilChildCount(observer: ZkConnection, path: string, count: number, timeoutMs = 20_000): Promise<string[]> {
  let children: string[] = [];
  await eventually(async () => (children = await childrenOf(observer, path)).length === count, timeoutMs, 20);
  return children;
}

export async function nodesOf(observer: ZkConnection, path: string, sessionHex: string): Promise<string[]> {
  const children = await childrenOf(observer, path);
  const stats = await Promise.all(children.map((c) => observer.session!.exists(`${path}/${c}`)));
  const owner = sessionIdOf(sessionHex);
  return children.filter((_, i) => stats[i] && sessionIdOf(stats[i]!.ephemeralOwner) === owner);
}

export function sessionIdOf(hex: string): bigint {
  return BigInt(`0x${hex.replace(/^0x/i, '')}`);
}

export async function sessionsWatching(nodePath: string): Promise<Set<bigint>> {
  const port = Number(zkConnectString().split(',')[0]!.split(':')[1]);
  const text = await fourLetter(port, 'wchp');
  const sessions = new Set<bigint>();
  let current: string | undefined;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('/')) current = line;
    else if (line.startsWith('0x') && current === nodePath) sessions.add(sessionIdOf(line));
  }
  return sessions;
}

export async function untilWatching(nodePath: string, sessionHex: string): Promise<void> {
  const session = sessionIdOf(sessionHex);
  await eventually(async () => (await sessionsWatching(nodePath)).has(session), 20_000, 50);
}

export const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves with the signal's reason once it aborts (at once if it has), or rejects after `timeoutMs`. */
export function whenAborted(signal: AbortSignal, timeoutMs = 30_000): Promise<unknown> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return resolve(signal.reason);
    const timer = setTimeout(() => reject(new Error(`signal did not abort within ${timeoutMs} ms`)), timeoutMs);
    signal.addEventListener('abort', () => (clearTimeout(timer), resolve(signal.reason)), { once: true });
  });
}

/** `count` engines (a session each) with a mutex each on `path` (one node per caller), like separate processes. */
export async function contenders(path: string, count: number, options: MutexOptions = { coalesce: false }) {
  const engines = await Promise.all(Array.from({ length: count }, () => engine()));
  return { engines, locks: engines.map((e) => new Mutex(e, 'contended', path, options)) };
}

/** Starts an acquire and waits until its node is queued (the queue has `queued` nodes then). */
export async function queued(observer: ZkConnection, path: string, lock: Mutex, queuedNodes: number, options = {}) {
  let settled = false;
  const acquiring = lock.acquire(options).finally(() => (settled = true));
  acquiring.catch(() => undefined);
  await untilChildCount(observer, path, queuedNodes);
  return { acquiring, settled: () => settled };
}

/** The one child in `now` that was not in `before`. */
export function addedChild(now: readonly string[], before: readonly string[]): string {
  const fresh = now.filter((c) => !before.includes(c));
  expect(fresh).toHaveLength(1);
  return fresh[0]!;
}

/**
 * Counts the requests a session sends from now on, by operation. Not the connection's heartbeat
 * (a `sync('/')`, not counted here; `exists('/')` is left out too, the chroot check's).
 */
export function countRequests(session: ZkSession): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const op of ['create', 'getChildren', 'getData', 'exists', 'delete'] as const) {
    const original = (session[op] as (...args: unknown[]) => unknown).bind(session);
    (session as unknown as Record<string, unknown>)[op] = (...args: unknown[]) => {
      if (!(op === 'exists' && args[0] === '/')) counts[op] = (counts[op] ?? 0) + 1;
      return original(...args);
    };
  }
  return counts;
}

/**
 * A lock path (and `nested` paths under it, for recipes that nest) made persistent, so that it
 * stays between uses: the test server's reaper removes empty containers every second.
 */
export async function lastingPath(label: string, nested: string[] = []): Promise<string> {
  const path = uniquePath(label);
  const s = (await connect()).session!;
  const empty = Buffer.alloc(0);
  await s.create('/it', empty, CreateMode.PERSISTENT).catch(() => undefined);
  await s.create(path, empty, CreateMode.PERSISTENT);
  for (const child of nested) await s.create(`${path}/${child}`, empty, CreateMode.PERSISTENT);
  return path;
}

/** Takes and releases `lock` `times` times in a row. */
export async function cycles(lock: { acquire(options?: object): Promise<Lease> }, times: number): Promise<Lease[]> {
  const leases: Lease[] = [];
  for (let i = 0; i < times; i++) {
    const lease = await lock.acquire();
    leases.push(lease);
    await lease.release();
  }
  return leases;
}

/** What the engine's next sequential create in `path` expects (the shortcut is in place), if anything. */
export function shortcutArmed(e: LockEngine, path: string) {
  return e.ops.shortcut.expect(e.connection.session!, path);
}

/** Runs `run` with a TCP proxy in front of the test ZooKeeper; closes every connection and the proxy after. */
export async function withProxy<T>(run: (proxy: TcpProxy) => Promise<T>): Promise<T> {
  const proxy = await TcpProxy.start(zkConnectString());
  try {
    return await run(proxy);
  } finally {
    proxy.forward();
    await closeAll();
    await proxy.close();
  }
}

/**
 * Records the outcome of each create `session` makes from now on, as "<kind> ok" or "<kind>
 * <code>", `kind` naming the path ('path', 'node', ...).
 */
export function recordCreates(session: ZkSession, kind: (path: string) => string): string[] {
  const create = session.create.bind(session);
  const outcomes: string[] = [];
  session.create = (p, data, mode, acl) =>
    create(p, data, mode, acl).then(
      (made) => (outcomes.push(`${kind(p)} ok`), made),
      (error: { codeName?: string }) => (outcomes.push(`${kind(p)} ${error.codeName}`), Promise.reject(error)),
    );
  return outcomes;
}

/** Whether `work` has settled (to check what has not happened yet while traffic is held). */
export function settledFlag(work: Promise<unknown>): () => boolean {
  let settled = false;
  work.then(
    () => (settled = true),
    () => (settled = true),
  );
  return () => settled;
}
