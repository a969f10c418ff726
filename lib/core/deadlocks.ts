import { DeadlockError, type Deadlock, type DeadlockMember } from './errors.js';
import { inspectLocks, readLockAt, sessionFor, type ContenderInfo, type InspectLocksOptions, type LockInfo } from './inspect.js';
import type { LockEngine } from './lock-engine.js';
import type { HoldingWait, NestedWait } from './queue/lock-queue.js';
import { onLeaseEnd, type Lease } from './leases/lease.js';
import { parentOf } from './paths.js';
import type { ZkConnection } from './connection/zk-connection.js';

// Deadlocks across processes (docs/deadlocks.md). A waiting node whose call chain holds other
// locks says which in its data (`holds`). A waiter waits for every holder of its lock (a mutex's
// head; a read-write lock's holders, directly or behind the writer ahead of it): if one of them
// belongs to a call chain that itself waits, holding that lock, the first waits for the second.
// A cycle of such waits is a deadlock: nobody in it can go on until one gives up.

/** The longest cycle looked for, and how much one search reads. */
const MAX_MEMBERS = 8;
const MAX_LOCKS = 16;
/** A lock with a longer queue is not read: no cycle through it is seen. */
const MAX_QUEUE = 64;
const MAX_CYCLES = 16;

/** Lock kinds whose waiters wait for every holder. A semaphore's waiter waits for any one lease: no cycle through it is a deadlock. */
const WAITS_FOR_ALL: ReadonlySet<string> = new Set(['mutex', 'read-write']);

/** A waiting node whose call chain holds other locks: a possible member of a cycle. */
interface Waiter {
  lock: LockInfo;
  node: ContenderInfo;
  holds: readonly string[];
  /** The waiters this one waits for, with the node by which each holds our lock. */
  waitsFor: { waiter: Waiter; holding: ContenderInfo }[];
}

function holdsOf(node: ContenderInfo): string[] {
  const holds: unknown = node.holder.holds;
  return Array.isArray(holds) ? holds.filter((h): h is string => typeof h === 'string') : [];
}

/**
 * The cycles of waits among `locks` (as `inspect` reads them), each once, its members starting
 * with the wait that began last (the highest czxid); with `through`, only those through that
 * waiting node. Pure: what it is given may be read at different moments (see `confirm`).
 */
export function cyclesIn(locks: readonly LockInfo[], through?: string): Deadlock[] {
  const waiters: Waiter[] = [];
  for (const lock of locks) {
    if (!WAITS_FOR_ALL.has(lock.kind)) continue;
    for (const node of lock.waiting) {
      const holds = holdsOf(node);
      // A call chain waiting for a lock it holds itself waits for work it started (or for itself:
      // a non-reentrant lock taken again): not a cycle between call chains.
      if (holds.length > 0 && !holds.includes(lock.path)) waiters.push({ lock, node, holds, waitsFor: [] });
    }
  }
  for (const waiter of waiters) {
    for (const other of waiters) {
      if (other === waiter || !other.holds.includes(waiter.lock.path)) continue;
      // Its call chain held our lock when it began to wait: by a node of its session made before.
      const holding = waiter.lock.holders.find((h) => h.sessionId === other.node.sessionId && h.czxid < other.node.czxid);
      if (holding) waiter.waitsFor.push({ waiter: other, holding });
    }
  }
  // Each cycle once: from its member with the lowest czxid, through members with higher ones.
  waiters.sort((a, b) => a.node.czxid - b.node.czxid);
  const found: Deadlock[] = [];
  const walk = (start: Waiter, path: Waiter[], holdings: ContenderInfo[]): void => {
    const last = path[path.length - 1]!;
    for (const { waiter, holding } of last.waitsFor) {
      if (found.length >= MAX_CYCLES) return;
      if (waiter === start) {
        const deadlock = deadlockOf(path, [...holdings, holding]);
        if (through === undefined || deadlock.members.some((m) => m.waitingNode === through)) found.push(deadlock);
      } else if (waiter.node.czxid > start.node.czxid && !path.includes(waiter) && path.length < MAX_MEMBERS) {
        walk(start, [...path, waiter], [...holdings, holding]);
      }
    }
  };
  for (const start of waiters) walk(start, [start], []);
  return found;
}

/** `path[i]` waits for the lock `path[i + 1]` holds by `holdings[i]` (the last for the first's). */
function deadlockOf(path: readonly Waiter[], holdings: readonly ContenderInfo[]): Deadlock {
  const members = path.map((waiter, i): DeadlockMember => {
    const before = (i + path.length - 1) % path.length;
    return {
      lock: path[before]!.lock.path,
      holdingNode: holdings[before]!.path,
      holder: waiter.node.holder,
      sessionId: waiter.node.sessionId,
      waitsFor: waiter.lock.path,
      waitingNode: waiter.node.path,
      waitingSince: waiter.node.createdAt,
    };
  });
  // The wait that began last gives up: every member reads the same czxids, so all agree on it.
  let last = 0;
  path.forEach((waiter, i) => {
    if (waiter.node.czxid > path[last]!.node.czxid) last = i;
  });
  return { members: [...members.slice(last), ...members.slice(0, last)] };
}

/** Its nodes, in order: two readings that give the same key saw the same cycle. */
function keyOf(deadlock: Deadlock): string {
  return deadlock.members.map((m) => `${m.waitingNode}>${m.holdingNode}`).join('|');
}

/** Reads one lock now (`readLockAt`, or a test's wrapper around it). */
export type ReadLock = (path: string) => Promise<LockInfo | null>;

/**
 * Reads the cycle's locks again and keeps it if it is still there, the same nodes holding and
 * waiting. Nodes are never renamed, a holder holds until its node goes and a waiter that
 * holds does not wait again: seen twice, each member waited and held between the two readings,
 * all at once. A cycle broken while it was read (a member gave up, a holder released) is not.
 */
async function confirm(read: ReadLock, deadlock: Deadlock, through?: string): Promise<Deadlock | undefined> {
  const paths = [...new Set(deadlock.members.flatMap((m) => [m.lock, m.waitsFor]))];
  const locks = (await Promise.all(paths.map(read))).filter((l): l is LockInfo => l !== null);
  const key = keyOf(deadlock);
  return cyclesIn(locks, through).find((d) => keyOf(d) === key);
}

/**
 * @internal The cycle through the waiting node `wait.node`, if any, seen twice. Reads from the locks its
 * call chain holds: who waits in them (they wait for this chain), what those hold, who waits in
 * those, and so on, up to MAX_LOCKS locks, until a waiter holds the lock `wait.node` waits in.
 */
export async function cycleThrough(wait: HoldingWait, read: ReadLock = (path) => readLockAt(wait.session, path, MAX_QUEUE)): Promise<Deadlock | undefined> {
  const waitedIn = parentOf(wait.node);
  const locks = new Map<string, LockInfo | null>();
  let next = [waitedIn, ...wait.holds];
  for (let depth = 0; depth < MAX_MEMBERS && next.length > 0; depth++) {
    const batch = [...new Set(next)].filter((p) => !locks.has(p)).slice(0, Math.max(0, MAX_LOCKS - locks.size));
    if (batch.length === 0) return undefined;
    const readNow = await Promise.all(batch.map(read));
    batch.forEach((path, i) => locks.set(path, readNow[i]!));
    const seen = cyclesIn([...locks.values()].filter((l): l is LockInfo => l !== null), wait.node)[0];
    if (seen) return confirm(read, seen, wait.node);
    // Those who wait in what the chains found so far hold wait for them: follow what they hold.
    // (Who waits with us waits for our lock's holder, not for us.)
    next = batch
      .filter((path) => path !== waitedIn || wait.holds.includes(path))
      .flatMap((path) => locks.get(path)?.waiting.flatMap(holdsOf) ?? []);
  }
  return undefined;
}

/**
 * What a nested acquire (its call chain holds `held`) gives the queue: the `holds` for its node,
 * a watch on those leases, and the search for a cycle once its node waits. In a cycle, the wait
 * that began last fails with a DeadlockError (with `deadlockDetection: 'fail'`); nobody else does.
 */
export function nestedWait(engine: LockEngine, lockName: string, held: readonly Lease[]): NestedWait | undefined {
  const detection = engine.deadlockDetection;
  if (held.length === 0 || detection === 'off') return undefined;
  const holding = () => held.filter((lease) => lease.isHeld);
  return {
    holds: () => [...new Set(holding().map((lease) => parentOf(lease.path)))],
    onHoldsChanged: (changed) => {
      const stops = held.map((lease) => onLeaseEnd(lease, changed));
      return () => stops.forEach((stop) => stop());
    },
    check: async (wait) => {
      const deadlock = await cycleThrough(wait);
      const ours = deadlock?.members[0];
      if (!ours || ours.waitingNode !== wait.node || detection !== 'fail') return undefined;
      // What our node says we hold, we still hold (a lease that ended makes the node again).
      if (!holding().some((lease) => parentOf(lease.path) === ours.lock)) return undefined;
      return new DeadlockError(lockName, deadlock);
    },
  };
}

/**
 * The deadlocks the waits of `engine` are in now (each seen twice), for the health indicator:
 * reads only while a call chain that holds other locks waits (at most `maxWaits` of them).
 */
export async function deadlocksOf(engine: LockEngine, maxWaits = 8): Promise<Deadlock[]> {
  const session = engine.connection.session;
  const waits = [...engine.holdingWaits].filter((w) => w.session === session).slice(0, maxWaits);
  return unique((await Promise.all(waits.map((wait) => cycleThrough(wait)))).filter((d): d is Deadlock => d !== undefined));
}

function unique(deadlocks: readonly Deadlock[]): Deadlock[] {
  const byKey = new Map(deadlocks.map((d) => [keyOf(d), d]));
  return [...byKey.values()];
}

/**
 * `locks` (an `inspectLocks` listing) with `deadlocks` on each lock waited for in a cycle of
 * waits. Costs no request unless the listing shows a cycle: then its locks are read again (a
 * cycle broken while it was listed is not reported).
 * @publicApi
 */
export async function withDeadlocks(connection: ZkConnection, locks: readonly LockInfo[], options: { signal?: AbortSignal } = {}): Promise<LockInfo[]> {
  const seen = cyclesIn(locks);
  if (seen.length === 0) return [...locks];
  const session = await sessionFor(connection, 'inspect', options.signal);
  const read: ReadLock = (path) => readLockAt(session, path);
  const confirmed = unique((await Promise.all(seen.map((d) => confirm(read, d)))).filter((d): d is Deadlock => d !== undefined));
  return locks.map((lock) => {
    const deadlocks = confirmed.filter((d) => d.members.some((m) => m.waitsFor === lock.path));
    return deadlocks.length > 0 ? { ...lock, deadlocks } : lock;
  });
}

/**
 * The deadlocks among the locks under `path` (as `inspectLocks` finds them), each seen twice.
 * @publicApi
 */
export async function inspectDeadlocks(connection: ZkConnection, path = '/', options: InspectLocksOptions = {}): Promise<Deadlock[]> {
  const locks = await withDeadlocks(connection, await inspectLocks(connection, path, options), options);
  return unique(locks.flatMap((lock) => lock.deadlocks ?? []));
}
