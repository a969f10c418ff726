import { ConnectionClosedError, InvalidOptionError, LockNotAcquiredError } from '../errors.js';
import { optionalPositiveInteger, positiveInteger } from '../validation.js';
import type { LockEngine } from '../lock-engine.js';
import { joinPath } from '../paths.js';
import { isZkCode, ZkCode, ZkError } from '../client/zk-error.js';
import { notAcquiredError, TRY_ONCE_BOUND_MS } from '../queue/cancellation.js';
import type { AcquireOptions } from '../queue/acquire-options.js';
import { acquireInQueue, SessionEndedError, type QueueSpec } from '../queue/lock-queue.js';
import { LockRecipe, type AcquireCall, type InternalAcquireOptions } from './lock-recipe.js';
import { NodeLease, type Lease } from '../leases/lease.js';
import { LeaseGroup, releaseAll } from '../leases/multi-lease.js';
import { Mutex } from './mutex.js';
import { LEASE_NODE, SEMAPHORE_LEASES, SEMAPHORE_LOCKS } from './node-names.js';
import type { ClockTimer } from '../clock.js';
import type { AcquireTrace } from '../tracing.js';

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
  private readonly leasesPath: string;

  constructor(engine: LockEngine, name: string, path: string, options: SemaphoreOptions) {
    super(engine, name, path, false);
    if (options === null || typeof options !== 'object') throw new InvalidOptionError('permits', 'expected { permits: number }');
    if (options.permits === undefined) throw new InvalidOptionError('permits', 'is required');
    if ('revocable' in options && (options as { revocable?: unknown }).revocable !== undefined) {
      throw new InvalidOptionError('revocable', 'semaphore leases are not revocable (nor are Curator\'s)');
    }
    this.permits = positiveInteger(options.permits, 'permits', 1);
    this.leaseMs = optionalPositiveInteger(options.leaseMs, 'leaseMs');
    this.internal = new Mutex(engine, `${name} (semaphore lock)`, joinPath(path, SEMAPHORE_LOCKS), { reentrant: false, internal: true });
    this.leasesPath = joinPath(path, SEMAPHORE_LEASES);
  }

  /**
   * The lease queue's verdict for a lease node that must leave room for `more` leases after it:
   * counted while holding the internal lock, so only our own nodes can be pending.
   */
  private leaseSpec(more: number): QueueSpec {
    return {
      lockName: this.name,
      kind: 'semaphore',
      lockPath: this.path,
      parentPath: this.leasesPath,
      nodeName: LEASE_NODE,
      sortMarkers: [LEASE_NODE],
      evaluate: (sorted) => {
        if (sorted.length - 1 > this.permits) this.engine.warn(this.mismatch(sorted.length - 1));
        return sorted.length + more <= this.permits ? { holds: true } : { holds: false, watchChildren: true };
      },
    };
  }

  /** Acquires `options.permits` leases (default 1), all or none, under one deadline. */
  override acquire(options: SemaphoreAcquireOptions = {}): Promise<Lease> {
    return super.acquire(options);
  }

  protected async acquireNew(options: SemaphoreAcquireOptions, { trace }: AcquireCall): Promise<Lease> {
    const count = positiveInteger(options.permits, 'permits', 1, 1, this.permits);
    const deadline = options.waitMs === undefined ? undefined : this.clock.now() + options.waitMs;
    for (;;) {
      try {
        return new LeaseGroup(this.name, await this.acquireInSession(count, deadline, options, trace));
      } catch (error) {
        // The session ended while we waited: the internal lock and our lease nodes went with it,
        // so start over in the new session.
        if (!(error instanceof SessionEndedError)) throw error;
      }
    }
  }

  /**
   * Takes `count` leases in one step under one hold of the internal lock: the first lease node
   * waits until `count` permits are free, then the others hold at once. Nobody holds part of what
   * it asked for while it waits, so two multi-permit callers cannot deadlock each other (taking
   * them one internal-lock hold at a time, as Curator does, can).
   */
  private async acquireInSession(count: number, deadline: number | undefined, options: AcquireOptions, trace: AcquireTrace | undefined): Promise<Lease[]> {
    const tryOnce = options.waitMs === 0;
    // Try-once with too few leases free: say so at once instead of queueing for the internal lock
    // behind a waiter that holds it.
    if (tryOnce && (await this.leasesInUse()) + count > this.permits) throw new LockNotAcquiredError(this.name, 'timeout');
    const remaining = () => (deadline === undefined ? undefined : Math.max(0, Math.ceil(deadline - this.clock.now())));
    let internal: Lease;
    try {
      const internalOptions: InternalAcquireOptions = { waitMs: tryOnce ? TRY_ONCE_INTERNAL_WAIT_MS : remaining(), signal: options.signal, trace };
      internal = await this.internal.acquire(internalOptions);
    } catch (error) {
      // Report the semaphore, not its internal lock.
      if (error instanceof LockNotAcquiredError) throw new LockNotAcquiredError(this.name, error.reason, undefined, { cause: error });
      throw error;
    }
    const leases: Lease[] = [];
    try {
      const session = internal.sessionId === this.engine.connection.session?.id ? this.engine.connection.session : undefined;
      if (!session) throw new SessionEndedError();
      for (let i = 0; i < count; i++) {
        // Try-once stays try-once; otherwise the time left (at least a try).
        const entry = await acquireInQueue(this.engine, this.leaseSpec(count - 1 - i), {
          waitMs: tryOnce ? 0 : remaining(),
          signal: options.signal,
          session,
          trace,
        });
        leases.push(new NodeLease(this.engine, this.name, entry, this.leaseOptions(this.leaseMs)));
      }
      return leases;
    } catch (error) {
      await releaseAll(leases).catch(() => undefined);
      throw error;
    } finally {
      await internal.release();
    }
  }

  /** For try-once: leases in use now; a try-once never waits for a connection (see Cancellation). */
  private async leasesInUse(): Promise<number> {
    const connection = this.engine.connection;
    const unavailable = () => notAcquiredError(this.name, 'connection', true, connection.state === 'closed' ? new ConnectionClosedError() : undefined);
    if (connection.state !== 'connected' || !connection.session) throw unavailable();
    let timer: ClockTimer | undefined;
    const bound = new Promise<never>((_, reject) => (timer = connection.clock.setTimeout(() => reject(unavailable()), TRY_ONCE_BOUND_MS)));
    try {
      return await Promise.race([connection.session.getChildren(this.leasesPath).then(({ children }) => children.length), bound]);
    } catch (error) {
      if (isZkCode(error, ZkCode.NONODE)) return 0;
      if (error instanceof ZkError && (error.isConnectionError || error.isSessionGone)) throw notAcquiredError(this.name, 'connection', true, error);
      throw error;
    } finally {
      connection.clock.clearTimeout(timer);
    }
  }

  private mismatch(others: number): string {
    return (
      `Semaphore ${JSON.stringify(this.name)} at ${this.path}: ${others} leases are held but this process was told ` +
      `permits=${this.permits}; another participant uses a larger permit count. Not granting beyond ${this.permits}.`
    );
  }
}
