import { CountedLease, ReentrantHandle } from '../leases/counted-lease.js';
import { InvalidLockNameError, InvalidOptionError, LockNotAcquiredError } from '../errors.js';
import { parentOf, validateZkPath } from '../paths.js';
import { describe } from '../validation.js';
import { publish } from '../diagnostics.js';
import { validateAcquireOptions, type AcquireOptions } from '../queue/acquire-options.js';
import { notAcquiredError } from '../queue/cancellation.js';
import type { LockEngine } from '../lock-engine.js';
import { heldByChain, leasesHeldByChain, runInLockContext } from '../leases/lock-context.js';
import { HeldLease, type Lease } from '../leases/lease.js';
import { LeaseGroup } from '../leases/multi-lease.js';
import { startAcquireTrace, tracingUsed, type AcquireTrace, type HoldTrace } from '../tracing.js';
import type { Revocable } from './revocation.js';
import type { Clock } from '../clock.js';

/**
 * What an acquire brings to a recipe's acquireNew besides the caller's options: its span
 * while tracing (for the queue, see QueueOptions.trace), and the other locks of this engine the
 * caller's call chain holds (none for a try-once, which never waits): a nested acquire, whose
 * wait may close a cycle of waits (see deadlocks.ts).
 */
export interface AcquireCall {
  trace: AcquireTrace | undefined;
  held: readonly Lease[];
}

/** @internal What a recipe passes to another's acquire besides the caller's options. */
export interface InternalAcquireOptions extends AcquireOptions {
  /** The span of the acquire this one is part of (a semaphore's internal lock): its node carries that context. */
  trace?: AcquireTrace;
}

/** What every lock kind offers (mutex, read/write halves, semaphore, multi-lock). @publicApi */
export interface Lockable {
  readonly name: string;
  readonly path: string;
  /** Identifies the lock kind on its path, e.g. "mutex", "read", "write", "semaphore" (canonical multi-lock order). */
  readonly kind: string;
  acquire(options?: AcquireOptions): Promise<Lease>;
  /** One try: the lease, or null when the lock is not free. */
  tryAcquire(): Promise<Lease | null>;
  /** Acquires, runs `fn` with the lease (re-entrant inside it), releases in `finally`. */
  withLock<T>(fn: (lease: Lease) => T | Promise<T>, options?: AcquireOptions): Promise<T>;
  /** @internal Runs `fn` with `lease` (from this lock's acquire) recorded as held by the call chain it starts. */
  runHolding<T>(lease: Lease, fn: () => T): T;
  /** @internal The clock its waits run on (its connection's). */
  readonly clock?: Clock;
}

/**
 * The part every recipe shares: option checks, re-entrancy by async call chain, try-once and
 * run-in-lock. A recipe supplies `acquireNew`, which takes a fresh hold on ZooKeeper.
 */
export abstract class LockRecipe implements Lockable {
  abstract readonly kind: string;

  /** @internal */
  get clock(): Clock {
    return this.engine.connection.clock;
  }

  constructor(
    protected readonly engine: LockEngine,
    readonly name: string,
    readonly path: string,
    protected readonly reentrant: boolean,
    /** Internal locks (a semaphore's) publish no diagnostics events of their own. */
    protected readonly silent = false,
  ) {
    const problem = typeof path === 'string' ? (path === '/' ? 'is the root' : validateZkPath(path)) : 'must be a string';
    if (problem) throw new InvalidLockNameError(String(name), `the path ${typeof path === 'string' ? JSON.stringify(path) : typeof path} ${problem}`);
  }

  /**
   * What every lease of this lock says about itself in diagnostics events, and how it ends. One
   * literal with every field (no spread): objects of one shape share their hidden class, where a
   * spread copy per lock made one for each (about 240 bytes per held lock).
   */
  protected leaseOptions(leaseMs: number | undefined, revocable?: Revocable, releaseInBackground?: boolean) {
    return { leaseMs, revocable, kind: this.kind, lockPath: this.path, silent: this.silent, releaseInBackground };
  }

  /** Takes a fresh hold (see AcquireCall). Called inside acquireLease's try: a synchronous throw counts as a rejection. */
  protected abstract acquireNew(options: AcquireOptions, call: AcquireCall): Promise<Lease>;

  /** @internal The key under which a call chain's hold on this lock is recorded (per connection). */
  get contextKey(): string {
    return this.keyFor(this.kind);
  }

  protected keyFor(kind: string): string {
    return `${this.engine.id}:${kind}:${this.path}`;
  }

  acquire(options: AcquireOptions = {}): Promise<Lease> {
    // Pending, it keeps the process alive (also while ZooKeeper is away: see keepAliveUntilSettled).
    return this.engine.connection.keepAliveUntilSettled(this.acquireLease(options));
  }

  private async acquireLease(options: AcquireOptions): Promise<Lease> {
    validateAcquireOptions(options);
    if (this.reentrant) {
      const held = heldByChain(this.contextKey);
      if (held instanceof ReentrantHandle && held.isHeld && this.owns(held)) return held.reenter();
    }
    const { clock } = this.engine.connection;
    const started = clock.now();
    if (!this.silent) publish('acquireStart', () => ({ name: this.name, path: this.path, lockPath: this.path, kind: this.kind }));
    // An internal lock has no span of its own: it queues under the one of the acquire it is part of.
    const span = this.silent ? undefined : startAcquireTrace(this);
    const held = this.silent || options.waitMs === 0 ? [] : leasesHeldByChain(`${this.engine.id}:`);
    let lease: Lease;
    try {
      lease = await this.acquireNew(options, { trace: span ?? (options as InternalAcquireOptions).trace, held });
      // A grant can reach us after a stall past the session's deadline, before the deadline timer
      // ran (a reply read first): isHeld checks the clock (and declares the session lost if it is
      // past). Never hand out a lease that another client may already hold; give it back so that
      // local waiters behind it move on (each is checked the same way).
      if (!lease.isHeld) {
        void lease.release().catch(() => {});
        throw notAcquiredError(this.name, 'connection', options.waitMs === 0);
      }
    } catch (error) {
      span?.notAcquired(error instanceof LockNotAcquiredError ? error.reason : 'error', clock.now() - started, error);
      if (!this.silent) publish('notAcquired', () => ({
        name: this.name,
        path: this.path,
        lockPath: this.path,
        kind: this.kind,
        reason: error instanceof LockNotAcquiredError ? error.reason : 'error',
        waitedMs: clock.now() - started,
      }));
      throw error;
    }
    if (!this.silent) publish('acquired', () => ({
      name: this.name,
      path: this.path,
      lockPath: this.path,
      leases: 'leases' in lease ? (lease.leases as unknown[]).length : 1,
      kind: this.kind,
      waitedMs: clock.now() - started,
      fencingToken: lease.fencingToken,
    }));
    const handed = this.reentrant ? new CountedLease(lease).handle() : lease;
    const hold = span?.acquired(lease.path, lease.fencingToken, clock.now() - started);
    if (hold) endWithLease(lease, hold);
    return handed;
  }

  tryAcquire(): Promise<Lease | null> {
    return tryOnce(this);
  }

  withLock<T>(fn: (lease: Lease) => T | Promise<T>, options?: AcquireOptions): Promise<T> {
    return runWithLock(this, fn, options);
  }

  /** Re-entrancy trusts only a lease of this very lock on this connection's current session. */
  private owns(lease: Lease): boolean {
    const session = this.engine.connection?.session;
    return parentOf(lease.path) === this.path && (!session || lease.sessionId === session.id);
  }

  /** @internal Work under `withLock` and `@WithLock` runs in the hold's span, while tracing. */
  runHolding<T>(lease: Lease, fn: () => T): T {
    const hold = tracingUsed() ? holdOf(lease) : undefined;
    return hold ? hold.run(() => runInLockContext(this.contextKey, lease, fn)) : runInLockContext(this.contextKey, lease, fn);
  }
}

/** The hold's span ends with the lease: at its release or loss (a semaphore's leases: the first to end). */
function endWithLease(lease: Lease, hold: HoldTrace): void {
  if (lease instanceof HeldLease) lease.hold = hold;
  else if (lease instanceof LeaseGroup) for (const member of lease.leases) endWithLease(member, hold);
}

/** The hold span of a lease an acquire handed out (through a re-entrant handle, of a semaphore's group). */
function holdOf(lease: Lease): HoldTrace | undefined {
  if (lease instanceof ReentrantHandle) return holdOf(lease.root);
  if (lease instanceof HeldLease) return lease.hold;
  if (lease instanceof LeaseGroup) return lease.leases[0] && holdOf(lease.leases[0]);
  return undefined;
}

/** @internal One try: the lease, or null when the lock is taken (every Lockable's tryAcquire). */
export async function tryOnce(lock: Pick<Lockable, 'acquire'>): Promise<Lease | null> {
  try {
    return await lock.acquire({ waitMs: 0 });
  } catch (error) {
    if (error instanceof LockNotAcquiredError && error.reason === 'timeout') return null;
    throw error;
  }
}

/** @internal Acquire, run `fn` holding the lock (re-entrant inside), release in `finally` (every Lockable's withLock). */
export async function runWithLock<T>(
  lock: Pick<Lockable, 'acquire' | 'runHolding'>,
  fn: (lease: Lease) => T | Promise<T>,
  options?: AcquireOptions,
): Promise<T> {
  const lease = await lock.acquire(options);
  try {
    return await lock.runHolding(lease, () => fn(lease));
  } finally {
    await lease.release();
  }
}

/** Checks a recipe's options object from untyped callers: an object, with real booleans. */
export function checkRecipeOptions<T extends object>(options: T | undefined, booleans: readonly (keyof T & string)[] = []): T {
  if (options === undefined) return {} as T;
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new InvalidOptionError('options', `expected an object, got ${describe(options)}`);
  }
  for (const key of booleans) {
    const value = (options as Record<string, unknown>)[key];
    if (value !== undefined && typeof value !== 'boolean') throw new InvalidOptionError(key, `expected true or false, got ${describe(value)}`);
  }
  return options;
}
