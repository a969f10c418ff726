import { CountedLease, ReentrantHandle } from './counted-lease.js';
import { LockNotAcquiredError } from './errors.js';
import { optionalPositiveInteger } from './connection-options.js';
import type { LockEngine } from './lock-engine.js';
import { LockContext } from './lock-context.js';
import { acquireInQueue, type AcquireOptions, type QueueSpec } from './lock-queue.js';
import { NodeLease, type Lease } from './lease.js';
import { validateAcquireOptions } from './acquire-options.js';

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
}

/** The recipe interface every lock kind offers. @publicApi */
export interface Lockable {
  readonly name: string;
  readonly path: string;
  acquire(options?: AcquireOptions): Promise<Lease>;
  /** One try: the lease, or null when someone else holds the lock. */
  tryAcquire(): Promise<Lease | null>;
  /** Acquires, runs `fn` with the lease, releases in `finally`. */
  withLock<T>(fn: (lease: Lease) => T | Promise<T>, options?: AcquireOptions): Promise<T>;
}

/** Curator InterProcessMutex layout: `<path>/_c_<uuid>-lock-<seq>`, lowest holds. @publicApi */
export class Mutex implements Lockable {
  private readonly reentrant: boolean;
  private readonly fair: boolean;
  private readonly leaseMs: number | undefined;
  private readonly spec: QueueSpec;

  constructor(
    private readonly engine: LockEngine,
    readonly name: string,
    readonly path: string,
    options: MutexOptions = {},
  ) {
    this.reentrant = options.reentrant ?? true;
    this.fair = options.fair ?? true;
    this.leaseMs = optionalPositiveInteger(options.leaseMs, 'leaseMs');
    this.spec = {
      lockName: name,
      parentPath: path,
      nodeName: 'lock-',
      sortMarkers: ['lock-'],
      evaluate: (sorted, index) =>
        index === 0 ? { holds: true } : { holds: false, watch: sorted[index - 1]!, holdsWhenGone: index === 1 },
    };
  }

  private get contextKey(): string {
    return `mutex:${this.path}`;
  }

  async acquire(options: AcquireOptions = {}): Promise<Lease> {
    validateAcquireOptions(options);
    if (this.reentrant) {
      const held = LockContext.heldByChain(this.contextKey);
      if (held instanceof ReentrantHandle && held.isHeld) return held.reenter();
    }
    const entry = await acquireInQueue(this.engine, this.spec, { ...options, fair: this.fair });
    const lease = new NodeLease(this.engine, this.name, entry, { leaseMs: this.leaseMs });
    return this.reentrant ? new CountedLease(lease).handle() : lease;
  }

  async tryAcquire(): Promise<Lease | null> {
    try {
      return await this.acquire({ waitMs: 0 });
    } catch (error) {
      if (error instanceof LockNotAcquiredError && error.reason === 'timeout') return null;
      throw error;
    }
  }

  async withLock<T>(fn: (lease: Lease) => T | Promise<T>, options?: AcquireOptions): Promise<T> {
    const lease = await this.acquire(options);
    try {
      return await LockContext.run(this.contextKey, lease, () => fn(lease));
    } finally {
      await lease.release();
    }
  }
}
