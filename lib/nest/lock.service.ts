import { Injectable } from '@nestjs/common';
import type { AcquireOptions } from '../core/queue/acquire-options.js';
import type { Lease } from '../core/leases/lease.js';
import { LockEngine } from '../core/lock-engine.js';
import { resolveLockPath } from '../core/paths.js';
import { Mutex, type MutexOptions } from '../core/recipes/mutex.js';
import { MultiLock } from '../core/recipes/multi-lock.js';
import { Leadership, type LeadershipOptions } from '../core/recipes/leadership.js';
import type { Lockable } from '../core/recipes/lock-recipe.js';
import { ReadWriteLock, type ReadWriteLockOptions } from '../core/recipes/read-write-lock.js';
import { Semaphore, type SemaphoreOptions } from '../core/recipes/semaphore.js';
import { ZkConnection, type ConnectionState } from '../core/connection/zk-connection.js';
import { withDeadlocks } from '../core/deadlocks.js';
import { inspectLock, inspectLocks, type ContenderInfo, type InspectLockOptions, type InspectLocksOptions, type LockInfo } from '../core/inspect.js';
import { revokeHolders } from '../core/recipes/revocation.js';

/**
 * Distributed locks for the application, over the module's ZooKeeper session. Names map to
 * `<basePath>/<name>`; a name starting with "/" is an absolute path (to share with Curator).
 * @publicApi
 */
@Injectable()
export class LockService {
  constructor(
    private readonly engine: LockEngine,
    readonly connection: ZkConnection,
  ) {}

  /** A mutex (reentrant and fair unless told otherwise). Cheap: create one per use if you like. */
  mutex(name: string, options?: MutexOptions): Mutex {
    return new Mutex(this.engine, name, resolveLockPath(this.engine.basePath, name), options);
  }

  /**
   * A counting semaphore (Curator InterProcessSemaphoreV2 layout). Every participant must use the
   * same `permits`. With `permits: 1` it is Curator's non-reentrant InterProcessSemaphoreMutex.
   */
  semaphore(name: string, options: SemaphoreOptions): Semaphore {
    return new Semaphore(this.engine, name, resolveLockPath(this.engine.basePath, name), options);
  }

  /** A read-write lock with `.read` and `.write` halves (Curator InterProcessReadWriteLock layout). */
  readWriteLock(name: string, options?: ReadWriteLockOptions): ReadWriteLock {
    return new ReadWriteLock(this.engine, name, resolveLockPath(this.engine.basePath, name), options);
  }

  /**
   * All of `members` or none (mutexes, read/write halves, semaphores, by name or as objects),
   * taken in one canonical order so overlapping multi-locks never deadlock. A string is a mutex
   * (a name listed twice is taken once).
   */
  multiLock(members: readonly (string | Lockable)[]): MultiLock {
    // A name given twice is one lock, taken once; the same object twice is a usage error (MultiLock).
    const unique = members.filter((m, i) => typeof m !== 'string' || members.indexOf(m) === i);
    return new MultiLock(unique.map((m) => (typeof m === 'string' ? this.mutex(m) : m)));
  }

  /**
   * The leader election `name` (Curator LeaderLatch layout, so Java services take part): call
   * `start()` to join it; `close()` (or the application's shutdown) leaves it.
   */
  leadership(name: string, options?: LeadershipOptions): Leadership {
    return new Leadership(this.engine, name, resolveLockPath(this.engine.basePath, name), options);
  }

  /** Acquires the mutex `name`, runs `fn` with the lease, releases in `finally`. */
  async withLock<T>(name: string, fn: (lease: Lease) => T | Promise<T>, options?: AcquireOptions & MutexOptions): Promise<T> {
    const { waitMs, signal, ...mutexOptions } = options ?? {};
    return this.mutex(name, mutexOptions).withLock(fn, { waitMs, signal });
  }

  /** The ZooKeeper path a lock name maps to (validates the name). */
  pathOf(name: string): string {
    return resolveLockPath(this.engine.basePath, name);
  }

  /**
   * Who holds and who waits, read from ZooKeeper (this library's nodes and Curator's alike): for
   * `name`, that lock (null when its node does not exist, i.e. nobody uses it); without a name,
   * every lock under the base path, each lock waited for in a deadlock with its `deadlocks`
   * (cycles of waits across processes, see docs/deadlocks.md).
   */
  inspect(options?: InspectLocksOptions): Promise<LockInfo[]>;
  inspect(name: string, options?: InspectLockOptions): Promise<LockInfo | null>;
  inspect(nameOrOptions?: string | InspectLocksOptions, options?: InspectLockOptions): Promise<LockInfo[] | LockInfo | null> {
    // Both wait for a connection: a signal (e.g. AbortSignal.timeout(2000)) bounds that, then
    // they reject with SessionWaitAbortedError (a 503 through the module's error answers).
    if (typeof nameOrOptions !== 'string') {
      return inspectLocks(this.connection, this.engine.basePath, nameOrOptions).then((locks) => withDeadlocks(this.connection, locks, nameOrOptions));
    }
    return inspectLock(this.connection, this.pathOf(nameOrOptions), options);
  }

  /**
   * Asks the current holder(s) of lock or election `name` to let go (Curator's revocation, so Java
   * holders hear it too) and resolves with the holders asked, as `inspect` describes them (empty
   * when nobody holds it). Only holders that made their lock `revocable` act on it; it is a
   * request, not a break. Rejects with a ZkError NOAUTH without write access to the lock's nodes
   * (with `auth`, only clients with the same credentials have it), and with a LockUsageError for
   * a leader election that has a participant that is not this library's (a Curator LeaderLatch:
   * it would stop watching the leader's node and never take over).
   */
  revoke(name: string, options?: { signal?: AbortSignal }): Promise<ContenderInfo[]> {
    return revokeHolders(this.connection, this.pathOf(name), options);
  }

  /** Parent of relative lock names (`basePath` option). */
  get basePath(): string {
    return this.engine.basePath;
  }

  /** What `@WithLock` waits when the decorator names no `waitMs` (`defaultWaitMs` option). */
  get defaultWaitMs(): number {
    return this.engine.defaultWaitMs ?? 0;
  }

  get state(): ConnectionState {
    return this.connection.state;
  }

  /**
   * @internal Reports a problem worth an operator's attention that is not a caller's error, as the
   * library reports its own (`ZkLockWarning`: ZkLockModule logs it as a warning).
   */
  warn(message: string): void {
    this.engine.warn(message);
  }

  /** Releases of leases kept for `minHoldMs` after their work finished. */
  private readonly heldForMinimum = new Set<() => void>();
  private shuttingDown = false;

  /**
   * @internal `@WithLock`'s `minHoldMs`: releases `lease` at `at` (a time on the connection's clock), or
   * now if that has passed or the application is shutting down (`releaseHeldForMinimum`).
   */
  releaseAt(lease: Lease, at: number): void {
    const { clock } = this.connection;
    const remaining = at - clock.now();
    if (remaining <= 0 || this.shuttingDown) return void lease.release();
    const release = () => {
      clock.clearTimeout(timer);
      this.heldForMinimum.delete(release);
      void lease.release();
    };
    const timer = clock.setTimeout(release, remaining).unref();
    this.heldForMinimum.add(release);
  }

  /**
   * @internal At shutdown: the work under these locks has finished, so they go now instead of
   * keeping the shutdown waiting for its grace time, and so do those of calls that finish later.
   */
  releaseHeldForMinimum(): void {
    this.shuttingDown = true;
    for (const release of [...this.heldForMinimum]) release();
  }
}
