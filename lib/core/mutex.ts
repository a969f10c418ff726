import { optionalPositiveInteger } from './connection-options.js';
import type { LockEngine } from './lock-engine.js';
import { acquireInQueue, type AcquireOptions, type QueueSpec } from './lock-queue.js';
import { checkRecipeOptions, LockRecipe } from './lock-recipe.js';
import { NodeLease, type Lease } from './lease.js';

export { type Lockable } from './lock-recipe.js';

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
  /** @internal A recipe's own lock (e.g. a semaphore's): no diagnostics events. */
  internal?: boolean;
}

/** The mutex predicate: index 0 holds; otherwise watch the immediate predecessor. */
export function mutexSpec(lockName: string, parentPath: string, silent = false): QueueSpec {
  return {
    lockName,
    kind: 'mutex',
    lockPath: parentPath,
    silent,
    parentPath,
    nodeName: 'lock-',
    sortMarkers: ['lock-'],
    evaluate: (sorted, index) =>
      index === 0 ? { holds: true } : { holds: false, watch: sorted[index - 1]!, holdsWhenGone: index === 1 },
  };
}

/** Curator InterProcessMutex layout: `<path>/_c_<uuid>-lock-<seq>`, lowest holds. @publicApi */
export class Mutex extends LockRecipe {
  readonly kind = 'mutex';
  private readonly fair: boolean;
  private readonly leaseMs: number | undefined;
  private readonly spec: QueueSpec;

  constructor(engine: LockEngine, name: string, path: string, options?: MutexOptions) {
    options = checkRecipeOptions(options, ['reentrant', 'fair']);
    super(engine, name, path, options.reentrant ?? true, options.internal ?? false);
    this.fair = options.fair ?? true;
    this.leaseMs = optionalPositiveInteger(options.leaseMs, 'leaseMs');
    this.spec = mutexSpec(name, path, options.internal ?? false);
  }

  protected async acquireNew(options: AcquireOptions): Promise<Lease> {
    const entry = await acquireInQueue(this.engine, this.spec, { ...options, fair: this.fair });
    return new NodeLease(this.engine, this.name, entry, this.leaseOptions(this.leaseMs));
  }
}
