import { AsyncLocalStorage } from 'node:async_hooks';
import type { Lease } from './lease.js';

/** What code inside a locked section can see of the lock around it. */
export interface LockContextValue {
  readonly name: string;
  readonly path: string;
  readonly signal: AbortSignal;
  readonly fencingToken: bigint;
}

interface Scope {
  /** Leases held by this async call chain, by lock key (for re-entrancy). */
  readonly byKey: ReadonlyMap<string, Lease>;
  readonly current: Lease | undefined;
}

const storage = new AsyncLocalStorage<Scope>();

/**
 * The lock(s) held by the current async call chain (set by `withLock` and `@WithLock`).
 * @publicApi
 */
export const LockContext = {
  /** The innermost lock held by this call chain, or undefined outside a locked section. */
  current(): LockContextValue | undefined {
    return storage.getStore()?.current;
  },
};

/** @internal The lease this call chain holds under `key` (a recipe's path and kind), if any. */
export function heldByChain(key: string): Lease | undefined {
  return storage.getStore()?.byKey.get(key);
}

/**
 * @internal The leases this call chain still holds under keys starting with `prefix` (one
 * engine's locks): a nested acquire waits while holding them.
 */
export function leasesHeldByChain(prefix: string): Lease[] {
  const scope = storage.getStore();
  if (!scope) return [];
  const held: Lease[] = [];
  for (const [key, lease] of scope.byKey) if (key.startsWith(prefix) && lease.isHeld) held.push(lease);
  return held;
}

/** @internal Runs `fn` with `lease` recorded as held under `key` by the call chain it starts. */
export function runInLockContext<T>(key: string, lease: Lease, fn: () => T): T {
  const outer = storage.getStore();
  const byKey = new Map(outer?.byKey);
  byKey.set(key, lease);
  return storage.run({ byKey, current: lease }, fn);
}
