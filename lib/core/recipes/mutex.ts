import { optionalPositiveInteger, positiveInteger } from '../validation.js';
import { InvalidOptionError } from '../errors.js';
import { LocalQueue } from './mutex-coalescing.js';
import { MAX_LOCAL_HANDOFFS, type LockEngine } from '../lock-engine.js';
import type { AcquireOptions } from '../queue/acquire-options.js';
import { acquireInQueue, type QueueSpec, type Verdict } from '../queue/lock-queue.js';
import { checkRecipeOptions, LockRecipe, type AcquireCall } from './lock-recipe.js';
import { NodeLease, type Lease, type LeaseOptions } from '../leases/lease.js';
import { checkRevocable, type Revocable } from './revocation.js';
import { MUTEX_NODE } from './node-names.js';
import { nestedWait } from '../deadlocks.js';

export interface MutexOptions {
  /** Nested acquisition by the same async call chain re-enters (counted). Default true. */
  reentrant?: boolean;
  /**
   * FIFO by arrival (default). `false`: waiters do not keep a place in the queue; they race when
   * the holder releases (more throughput under churn, no order, a herd of wake-ups).
   */
  fair?: boolean;
  /** Max hold time in ms; the lease releases itself after it and its signal aborts. */
  leaseMs?: number;
  /**
   * In-process coalescing (default: the engine's `coalesce`, true): callers of this process wait
   * for the mutex in memory behind one ZooKeeper node, and a release hands the node to the next
   * local caller without a round trip. Fairness trade-off: a process can keep the lock for up to
   * `maxLocalHandoffs` more holders after another process starts waiting. `false`: one node per
   * caller, strict FIFO across all processes (Curator's behaviour).
   */
  coalesce?: boolean;
  /**
   * Local handoffs allowed after another process is seen waiting, before the node is given up and
   * queued again at the tail (default: the engine's, 16; 0 = never hand over locally). While no
   * other process waits, handoffs are not limited.
   */
  maxLocalHandoffs?: number;
  /**
   * Keep our node this long after the last local holder released, while no other process queues:
   * the next acquire of this process then holds without a ZooKeeper request (and a new fencing
   * token). Another process that queues ends it at once (it waits one watch notification and our
   * delete longer); so do shutdown and the time running out, and after connection trouble the next
   * acquire queues a new node instead. Trade-off: a process that dies while
   * keeping the node holds the lock, for others, until its session expires. Needs coalescing.
   * Default 0 (the node goes at release).
   */
  retainMs?: number;
  /**
   * `release()` resolves as soon as the delete of our node is queued on the session (it goes at
   * the end of the task that released, after the promise continuations it started), without waiting for ZooKeeper's reply: one round trip sooner, and this process's next acquire goes out with the
   * delete (a session's requests are applied in order, so it queues after it). The lock is free
   * for others once the delete is applied; until then another process's try-once may still find
   * it taken. The delete still retries through disconnections, and shutdown waits for it; a
   * process that exits without shutting down may not have sent it, and leaves it to the
   * session's end (its node is ephemeral). Default false (`release()` resolves when the node is gone).
   */
  releaseInBackground?: boolean;
  /**
   * Listen for requests to let go (`LockService.revoke`, Curator's `Revoker`): `true` aborts the
   * lease's signal with reason `revoked`; a function is called with the lease. Takes one node per
   * caller (no coalescing). Default false. See `Revocable`.
   */
  revocable?: Revocable;
  /** @internal A recipe's own lock (e.g. a semaphore's): no diagnostics events. */
  internal?: boolean;
}

/**
 * The verdict of an exclusive queue (the mutex, and leader election): the lowest node holds. The node
 * right behind it watches the head and holds on its deletion alone. A node further back watches
 * the node two ahead of it, not its predecessor: that one goes when it releases the lock, while
 * our predecessor is (usually) the new head, so we list again while the predecessor still holds
 * and are on the shortcut before it releases. Watching the predecessor instead means listing after
 * it went, a round trip on every handoff. A predecessor that leaves without holding is noticed at
 * that listing (the node two ahead gone) or when nodes ahead of it go; we cannot hold before then.
 */
export function exclusiveVerdict(sorted: readonly string[], index: number): Verdict {
  if (index === 0) return { holds: true };
  if (index === 1) return { holds: false, watch: sorted[0]!, holdsWhenGone: true };
  return { holds: false, watch: sorted[index - 2]!, holdsWhenGone: false };
}

/** One string per combination of settings, shared by the keys of every lock with them. */
const settingsPrefixes = new Map<string, string>();
function settingsPrefix(made: string): string {
  const shared = settingsPrefixes.get(made);
  if (shared !== undefined) return shared;
  if (settingsPrefixes.size < 256) settingsPrefixes.set(made, made); // past that (settings drawn at random), not shared
  return made;
}

/** Shared by every mutex's queue spec (one array, not one per lock held). */
const MUTEX_MARKERS: readonly string[] = [MUTEX_NODE];

/** The mutex predicate: the lowest node holds (see exclusiveVerdict). */
export function mutexSpec(lockName: string, parentPath: string, silent = false): QueueSpec {
  return {
    lockName,
    kind: 'mutex',
    lockPath: parentPath,
    silent,
    parentPath,
    nodeName: MUTEX_NODE,
    sortMarkers: MUTEX_MARKERS,
    evaluate: exclusiveVerdict,
  };
}

/** Curator InterProcessMutex layout: `<path>/_c_<uuid>-lock-<seq>`, lowest holds. @publicApi */
export class Mutex extends LockRecipe {
  readonly kind = 'mutex';
  private readonly fair: boolean;
  private readonly leaseMs: number | undefined;
  private readonly spec: QueueSpec;
  /** Local handoff bound when coalescing; undefined when each caller queues its own node. */
  private readonly maxLocalHandoffs: number | undefined;
  private readonly revocable: Revocable | undefined;
  private readonly retainMs: number;
  private readonly releaseInBackground: boolean;
  /** The in-process queue's key: mutexes of one path with the same settings share one queue. */
  private readonly localQueueKey: string;

  constructor(engine: LockEngine, name: string, path: string, options?: MutexOptions) {
    options = checkRecipeOptions(options, ['reentrant', 'fair', 'coalesce', 'releaseInBackground']);
    super(engine, name, path, options.reentrant ?? true, options.internal ?? false);
    this.fair = options.fair ?? true;
    this.leaseMs = optionalPositiveInteger(options.leaseMs, 'leaseMs');
    this.spec = mutexSpec(name, path, options.internal ?? false);
    const defaults = engine.coalescing;
    const maxLocalHandoffs = positiveInteger(options.maxLocalHandoffs, 'maxLocalHandoffs', defaults.maxLocalHandoffs, 0, MAX_LOCAL_HANDOFFS);
    this.revocable = checkRevocable(options.revocable);
    // A recipe's internal lock never coalesces: the semaphore pins its lease to that lock's session.
    // Nor does a revocable one: a revocation speaks to the holder of one node.
    const coalesce = (options.coalesce ?? defaults.coalesce) && !options.internal && !this.revocable;
    this.maxLocalHandoffs = coalesce ? maxLocalHandoffs : undefined;
    this.retainMs = positiveInteger(options.retainMs, 'retainMs', 0, 0, 60_000);
    this.releaseInBackground = options.releaseInBackground ?? false;
    if (this.retainMs > 0 && (!coalesce || maxLocalHandoffs === 0)) {
      throw new InvalidOptionError('retainMs', 'keeps a node for the next local holder: it needs coalescing (coalesce, maxLocalHandoffs > 0, not revocable)');
    }
    // Kept as a key of the engine's map while the lock is busy: one concatenation onto the path,
    // not a chain of six (a template literal's parts stay linked, about 160 bytes per held lock).
    this.localQueueKey = settingsPrefix(`mutex:${this.fair}:${this.maxLocalHandoffs}:${this.retainMs}:${this.releaseInBackground}:`) + this.path;
    // Read, never written, by the leases (made once, not per acquire).
    this.leaseOptionsOfNew = this.leaseOptions(this.leaseMs, this.revocable, this.releaseInBackground);
  }

  private readonly leaseOptionsOfNew: LeaseOptions;

  private readonly makeLocalQueue = (unregister: () => void): LocalQueue => {
    const { fair, retainMs, releaseInBackground } = this;
    return new LocalQueue(this.engine, this.spec, { fair, maxLocalHandoffs: this.maxLocalHandoffs!, retainMs, releaseInBackground }, unregister);
  };

  /** Not async: the queue's promise itself, without another turn of the microtask queue (see LockRecipe.acquireLease). */
  protected acquireNew(options: AcquireOptions, { trace, held }: AcquireCall): Promise<Lease> {
    const leaseOptions = this.leaseOptionsOfNew;
    // A caller holding other locks queues a node of its own, which says what it holds: waiting
    // in memory behind the process's node, its wait would be seen by no one (docs/deadlocks.md).
    const nested = this.fair ? nestedWait(this.engine, this.name, held) : undefined;
    if (this.maxLocalHandoffs !== undefined && !nested) {
      return this.engine.localQueue(this.localQueueKey, this.makeLocalQueue).acquire(this.name, options, leaseOptions, trace);
    }
    return acquireInQueue(this.engine, this.spec, { ...options, fair: this.fair, trace, nested }).then((entry) => new NodeLease(this.engine, this.name, entry, leaseOptions));
  }
}
