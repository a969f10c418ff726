// The deep-queue tests' referee: a Monitor of one lock's holders in this process (no two holders
// whose signals are live; no grant of a node the test deleted), a check that a holder's node is the
// lowest of the queue, and the seeded churn loop of a contender. Every deep-queue test checks both
// safety (through the Monitor) and liveness (each acquire that should hold does, within a bound).
import { LockNotAcquiredError } from '../../lib/core/errors.js';
import type { Lease } from '../../lib/core/leases/lease.js';
import { sortChildren } from '../../lib/core/paths.js';
import type { Mutex } from '../../lib/core/recipes/mutex.js';
import type { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { childrenOf } from './helpers.js';
import { addedChild, delay, nameOf, queued, within } from './lock-test-helpers.js';

export const MARKERS = ['lock-'];

/** A seed for a randomized run: DEEP_QUEUE_SEED replays one (the seed is printed). */
export function seedFor(label: string): number {
  const env = process.env.DEEP_QUEUE_SEED;
  const seed = env ? Number(env) : Math.floor(Math.random() * 2 ** 31);
  console.log(`${label}: seed ${seed} (replay with DEEP_QUEUE_SEED=${seed})`);
  return seed;
}

export interface Hold {
  who: string;
  lease: Lease;
  grantedAt: number;
}

/**
 * Watches the holders of one lock in this process: a grant while another hold's signal is live is
 * a violation, unless that other hold's node was deleted by the test itself after it was granted
 * (a foreign delete of a holder: nobody can prevent that). A grant of a node the test deleted
 * before the grant is a violation too (the shortcut must not fire for a deleted own node).
 */
export class Monitor {
  readonly active = new Set<Hold>();
  readonly violations: string[] = [];
  /** Node name -> when the test deleted it. */
  readonly foreignDeleted = new Map<string, number>();
  grants = 0;
  /** Holds by foreign clients (Curator): from its acquire's reply until its release's reply. */
  foreignHolders = new Set<string>();
  /** Sessions the test ended (killSession): from the decision until their link was restored. */
  readonly killed = new Map<string, { from: number; restored?: number }>();
  /** Overlaps excused because the test ended one of the two sessions (reported, for scale). */
  excusedByKills = 0;

  /**
   * The test ended this hold's session while it was granted (or was about to be, from events its
   * client had before the cut): its node goes at any moment, like a foreign delete. A grant in
   * that session after its link came back would be the library's fault.
   */
  endedByTest(hold: Hold): boolean {
    const kill = this.killed.get(hold.lease.sessionId);
    return kill !== undefined && (kill.restored === undefined || hold.grantedAt <= kill.restored);
  }

  grant(who: string, lease: Lease): Hold {
    this.grants++;
    const now = performance.now();
    const node = nameOf(lease);
    const deletedAt = this.foreignDeleted.get(node);
    if (deletedAt !== undefined && deletedAt < now) this.violations.push(`${who} granted on ${node}, deleted by the test before the grant`);
    const hold = { who, lease, grantedAt: now };
    for (const other of this.active) {
      if (other.lease.signal.aborted) continue;
      if (other.lease.path === lease.path) continue; // coalesced: the same node handed over locally (checked below)
      const otherDeleted = this.foreignDeleted.get(nameOf(other.lease));
      if (otherDeleted !== undefined && otherDeleted >= other.grantedAt) continue;
      if (this.endedByTest(other) || this.endedByTest(hold)) {
        this.excusedByKills++;
        continue;
      }
      this.violations.push(`${who} granted (${node}) while ${other.who} holds (${nameOf(other.lease)})`);
    }
    for (const other of this.active) {
      if (other.lease.path === lease.path && !other.lease.signal.aborted && other.lease.isHeld) {
        this.violations.push(`${who} granted (${node}) while ${other.who} still holds the same node`);
      }
    }
    for (const f of this.foreignHolders) this.violations.push(`${who} granted (${node}) while Curator ${f} holds`);
    this.active.add(hold);
    return hold;
  }

  /** A foreign (Curator) acquire replied true: none of ours may hold. */
  foreignGranted(who: string): void {
    for (const other of this.active) {
      if (other.lease.signal.aborted) continue;
      this.violations.push(`Curator ${who} granted while ${other.who} holds (${nameOf(other.lease)})`);
    }
    for (const f of this.foreignHolders) this.violations.push(`Curator ${who} granted while Curator ${f} holds`);
    this.foreignHolders.add(who);
  }

  end(hold: Hold): void {
    this.active.delete(hold);
  }
}

/** While a hold's signal is live its node must be the lowest of the queue (checked by an observer). */
export async function checkLowest(observer: ZkConnection, path: string, hold: Hold, monitor: Monitor): Promise<void> {
  const children = await childrenOf(observer, path);
  if (hold.lease.signal.aborted) return;
  const sorted = sortChildren(children, MARKERS);
  const node = nameOf(hold.lease);
  if (sorted[0] === node) return;
  const deletedAt = monitor.foreignDeleted.get(node);
  if (deletedAt !== undefined && deletedAt >= hold.grantedAt) return; // a holder deleted by the test
  if (monitor.endedByTest(hold)) return;
  // The listing may be older than a signal that aborts in the meantime: look again shortly.
  await delay(50);
  if (hold.lease.signal.aborted) return;
  monitor.violations.push(`${hold.who} holds ${node} with a live signal, but the queue is ${JSON.stringify(sorted)}`);
}

/** Queues `locks` one after the other, returning each acquire and its node name, in queue order. */
export async function queueAll(observer: ZkConnection, path: string, locks: Mutex[], options: (i: number) => object = () => ({})) {
  const out: { acquiring: Promise<Lease>; settled: () => boolean; node: string }[] = [];
  for (const [i, lock] of locks.entries()) {
    const before = await childrenOf(observer, path);
    const q = await queued(observer, path, lock, before.length + 1, options(i));
    out.push({ ...q, node: addedChild(await childrenOf(observer, path), before) });
  }
  return out;
}

/** A contender's loop: acquire (sometimes with a short wait or an abort), check, hold briefly, release. */
export async function churn(
  who: string,
  lock: Mutex,
  observer: ZkConnection,
  path: string,
  monitor: Monitor,
  random: () => number,
  running: () => boolean,
  stats: { timeouts: number; aborts: number; holds: number },
): Promise<void> {
  while (running()) {
    const mode = random();
    const controller = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    let options: { waitMs?: number; signal?: AbortSignal } = {};
    if (mode < 0.25) options = { waitMs: Math.floor(random() * 150) };
    else if (mode < 0.45) {
      options = { signal: controller.signal };
      timer = setTimeout(() => controller.abort(), random() * 150);
    }
    let lease: Lease;
    try {
      // Liveness: with the queue bounded by the contenders, nobody waits this long.
      lease = await within(lock.acquire(options), 30_000, `${who} acquire (${JSON.stringify(Object.keys(options))})`);
    } catch (error) {
      clearTimeout(timer);
      if (error instanceof LockNotAcquiredError) {
        if (options.signal) stats.aborts++;
        else stats.timeouts++;
        continue;
      }
      throw error;
    }
    clearTimeout(timer);
    stats.holds++;
    const hold = monitor.grant(who, lease);
    await checkLowest(observer, path, hold, monitor);
    if (random() < 0.5) await delay(random() * 8);
    monitor.end(hold);
    await lease.release();
  }
}
