// Helpers of the churn tests (engines and a raw foreign client on a few keys at once), one copy each.
import { sortChildren } from '../../lib/core/paths.js';
import { CreateMode, type ZkSession } from '../../lib/core/client/session.js';

/** A Curator-style foreign mutex node (protected, sequential) under `path`. */
export const foreignLock = (s: ZkSession, path: string, marker = 'lock-') =>
  s.create(`${path}/_c_00000000-0000-4000-8000-000000000000-${marker}`, Buffer.alloc(0), CreateMode.EPHEMERAL_SEQUENTIAL);

/**
 * Who holds each key now, and what went wrong: two holders of a key at once, or a fencing token
 * not above every token granted on its key before.
 */
export function holderLedger(keys: readonly string[]) {
  const holders = new Map<string, number>(keys.map((k) => [k, 0]));
  const tokens = new Map<string, bigint[]>(keys.map((k) => [k, []]));
  const violations: string[] = [];
  return {
    violations,
    /** How many hold `key` now. */
    holders: (key: string) => holders.get(key)!,
    enter(key: string, who: string): void {
      const n = holders.get(key)! + 1;
      holders.set(key, n);
      if (n > 1) violations.push(`${who} holds ${key} with ${n - 1} other holder(s)`);
    },
    leave: (key: string) => void holders.set(key, holders.get(key)! - 1),
    /** A fencing token granted on `key`. */
    token(key: string, token: bigint): void {
      const list = tokens.get(key)!;
      if (list.length > 0 && !(token > list.at(-1)!)) violations.push(`token ${token} after ${list.at(-1)} on ${key}`);
      list.push(token);
    },
  };
}

export type HolderLedger = ReturnType<typeof holderLedger>;

/**
 * A foreign try-once mutex participant (Curator's layout) on `key`: queues a node, holds (in the
 * ledger, for as long as `hold` takes) if that node is the head, then deletes it. `nodes` knows
 * the node while it is there.
 */
export async function foreignTryOnce(s: ZkSession, key: string, ledger: HolderLedger, hold: () => Promise<unknown>, nodes?: Set<string>): Promise<void> {
  const mine = await foreignLock(s, key);
  nodes?.add(mine);
  const { children } = await s.getChildren(key);
  if (sortChildren(children, ['lock-'])[0] === mine.slice(key.length + 1)) {
    ledger.enter(key, 'foreign');
    await hold();
    if (ledger.holders(key) > 1) ledger.violations.push(`foreign saw another holder of ${key}`);
    ledger.leave(key);
  }
  await s.delete(mine);
  nodes?.delete(mine);
}
