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

/** @internal Runs `fn` with `lease` recorded as held under `key` by the call chain it starts. */
export function runInLockContext<T>(key: string, lease: Lease, fn: () => T): T {
  const outer = storage.getStore();
  const byKey = new Map(outer?.byKey);
  byKey.set(key, lease);
  return storage.run({ byKey, current: lease }, fn);
}
