import { ConnectionClosedError, InvalidOptionError, LockNotAcquiredError } from './errors.js';
import { optionalPositiveInteger, positiveInteger } from './connection-options.js';
import type { LockEngine } from './lock-engine.js';
import { joinPath } from './lock-path.js';
import { isZkCode, ZkCode } from './zk-error.js';
import { acquireInQueue, SessionEndedError, type AcquireOptions, type QueueSpec } from './lock-queue.js';
import { LockRecipe } from './lock-recipe.js';
import { NodeLease, type Lease } from './lease.js';
import { LeaseGroup, releaseAll } from './multi-lease.js';
import { Mutex } from './mutex.js';

export interface SemaphoreOptions {
  /** How many leases may be held at once. Every participant must use the same number. */
  permits: number;
  /** Max hold time of each lease in ms. */
  leaseMs?: number;
}

export interface SemaphoreAcquireOptions extends AcquireOptions {
  /** How many leases to take at once (all or none). Default 1. */
  permits?: number;
}

/** Grace for the internal lock when the caller tries once: it is only held for a create. */
const TRY_ONCE_INTERNAL_WAIT_MS = 2_000;

/**
 * Counting semaphore in Curator's InterProcessSemaphoreV2 layout: acquirers take the internal
 * mutex `<path>/locks`, create `<path>/leases/_c_<uuid>-lease-<seq>`, and hold a lease while the
 * number of lease nodes is at most `permits`. With permits 1 it is Curator's non-reentrant
 * InterProcessSemaphoreMutex.
 * @publicApi
 */
export class Semaphore extends LockRecipe {
  readonly kind = 'semaphore';
  readonly permits: number;
  private readonly leaseMs: number | undefined;
  private readonly internal: Mutex;
  private readonly leaseSpec: QueueSpec;

  constructor(engine: LockEngine, name: string, path: string, options: SemaphoreOptions) {
    super(engine, name, path, false);
    if (options === null || typeof options !== 'object') throw new InvalidOptionError('permits', 'expected { permits: number }');
    if (options.permits === undefined) throw new InvalidOptionError('permits', 'is required');
    this.permits = positiveInteger(options.permits, 'permits', 1);
    this.leaseMs = optionalPositiveInteger(options.leaseMs, 'leaseMs');
    this.internal = new Mutex(engine, `${name} (semaphore lock)`, joinPath(path, 'locks'), { reentrant: false, internal: true });
    const leasesPath = joinPath(path, 'leases');
    this.leaseSpec = {
      lockName: name,
      kind: 'semaphore',
      lockPath: path,
      parentPath: leasesPath,
      nodeName: 'lease-',
      sortMarkers: ['lease-'],
      evaluate: (sorted) => {
        // Counted while holding the internal lock: only our own node can be pending.
        if (sorted.length - 1 > this.permits) this.engine.warn(this.mismatch(sorted.length - 1));
        return sorted.length <= this.permits ? { holds: true } : { holds: false, watchChildren: true };
      },
    };
  }

  /** Acquires `options.permits` leases (default 1), all or none, under one deadline. */
  override acquire(options: SemaphoreAcquireOptions = {}): Promise<Lease> {
    return super.acquire(options);
  }

  protected async acquireNew(options: SemaphoreAcquireOptions): Promise<Lease> {
    const count = positiveInteger(options.permits, 'permits', 1, 1, this.permits);
    const deadline = options.waitMs === undefined ? undefined : Date.now() + options.waitMs;
    const leases: Lease[] = [];
    try {
      for (let i = 0; i < count; i++) leases.push(await this.acquireOne(deadline, options));
    } catch (error) {
      await releaseAll(leases).catch(() => undefined);
      throw error;
    }
    return new LeaseGroup(this.name, leases);
  }

  private async acquireOne(deadline: number | undefined, options: AcquireOptions): Promise<Lease> {
    for (;;) {
      try {
        return await this.acquireOneInSession(deadline, options);
      } catch (error) {
        // The session ended while we waited for a lease: the internal lock went with it, so take
        // it again in the new session before queueing another lease node.
        if (!(error instanceof SessionEndedError)) throw error;
      }
    }
  }

  private async acquireOneInSession(deadline: number | undefined, options: AcquireOptions): Promise<Lease> {
    const tryOnce = options.waitMs === 0;
    // Try-once with every lease taken: say so at once instead of queueing for the internal lock
    // behind a waiter that holds it.
    if (tryOnce && (await this.leasesInUse()) >= this.permits) throw new LockNotAcquiredError(this.name, 'timeout');
    const remaining = () => (deadline === undefined ? undefined : Math.max(0, deadline - Date.now()));
    let internal: Lease;
    try {
      internal = await this.internal.acquire({ waitMs: tryOnce ? TRY_ONCE_INTERNAL_WAIT_MS : remaining(), signal: options.signal });
    } catch (error) {
      // Report the semaphore, not its internal lock.
      if (error instanceof LockNotAcquiredError) throw new LockNotAcquiredError(this.name, error.reason, undefined, { cause: error });
      throw error;
    }
    try {
      // Try-once stays try-once; otherwise the time left (at least a try).
      const session = (internal as { sessionId: string }).sessionId === this.engine.connection.session?.id ? this.engine.connection.session : undefined;
      if (!session) throw new SessionEndedError();
      const entry = await acquireInQueue(this.engine, this.leaseSpec, {
        waitMs: tryOnce ? 0 : remaining(),
        signal: options.signal,
        session,
      });
      return new NodeLease(this.engine, this.name, entry, this.leaseOptions(this.leaseMs));
    } finally {
      await internal.release();
    }
  }

  private async leasesInUse(): Promise<number> {
    const session = await this.engine.connection.whenConnected().catch((error: unknown) => {
      throw error instanceof ConnectionClosedError ? new LockNotAcquiredError(this.name, 'connection', undefined, { cause: error }) : error;
    });
    try {
      return (await session.getChildren(this.leaseSpec.parentPath)).children.length;
    } catch (error) {
      if (isZkCode(error, ZkCode.NONODE)) return 0;
      throw error;
    }
  }

  private mismatch(others: number): string {
    return (
      `Semaphore ${JSON.stringify(this.name)} at ${this.path}: ${others} leases are held but this process was told ` +
      `permits=${this.permits}; another participant uses a larger permit count. Not granting beyond ${this.permits}.`
    );
  }
}
