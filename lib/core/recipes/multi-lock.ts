import { validateAcquireOptions, type AcquireOptions } from '../queue/acquire-options.js';
import { describe } from '../validation.js';
import { runWithLock, tryOnce, type Lockable } from './lock-recipe.js';
import type { Lease } from '../leases/lease.js';
import { LeaseGroup, releaseAll } from '../leases/multi-lease.js';
import { runInLockContext } from '../leases/lock-context.js';
import { LockLostError, LockUsageError, type NotAcquiredReason } from '../errors.js';
import { notAcquiredError } from '../queue/cancellation.js';
import { systemClock } from '../clock.js';

/** A member taken but no longer held before the group was complete. */
function isLost(lease: Lease): boolean {
  return !lease.isHeld;
}

/**
 * Why a group whose member was lost is not acquired: its session or connection went
 * ('connection', as a single lock granted after its session's deadline); otherwise someone took
 * the member from us (its node deleted) and the wait ran out retrying ('timeout').
 */
function lostReason(lease: Lease): NotAcquiredReason {
  const cause: unknown = lease.signal.reason;
  const reason = cause instanceof LockLostError ? cause.reason : undefined;
  return reason === 'node-deleted' || reason === 'lease-expired' ? 'timeout' : 'connection';
}

/**
 * All of several locks or none, under one overall deadline. Members are taken in one canonical
 * order (by path, then kind) whatever order the caller gave, so two multi-locks over overlapping
 * sets never deadlock; on failure what was taken is released in reverse.
 * @publicApi
 */
export class MultiLock implements Lockable {
  readonly kind = 'multi';
  readonly members: readonly Lockable[];

  constructor(members: readonly Lockable[]) {
    if (!Array.isArray(members) || members.length === 0) throw new LockUsageError('A multi-lock needs at least one member');
    for (const m of members as unknown[]) {
      const ok = m !== null && typeof m === 'object' && typeof (m as Lockable).acquire === 'function' && typeof (m as Lockable).path === 'string';
      if (!ok) throw new LockUsageError(`A multi-lock member must be a lock object (mutex, read/write half, semaphore), got ${describe(m)}`);
    }
    const keyed = members.map((m) => ({ m, key: `${m.path}\u0000${m.kind}` }));
    keyed.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    for (let i = 1; i < keyed.length; i++) {
      if (keyed[i]!.m.path === keyed[i - 1]!.m.path) {
        throw new LockUsageError(`A multi-lock cannot take ${keyed[i]!.m.path} twice`);
      }
    }
    this.members = keyed.map((k) => k.m);
  }

  get name(): string {
    return this.members.map((m) => m.name).join(' + ');
  }

  get path(): string {
    return this.members.map((m) => m.path).join(',');
  }

  async acquire(options: AcquireOptions = {}): Promise<Lease> {
    validateAcquireOptions(options);
    const clock = this.members.find((m) => m.clock)?.clock ?? systemClock;
    const deadline = options.waitMs === undefined ? undefined : clock.now() + options.waitMs;
    for (;;) {
      const leases: Lease[] = [];
      let lost: Lease | undefined;
      try {
        for (const member of this.members) {
          const waitMs = deadline === undefined ? undefined : options.waitMs === 0 ? 0 : Math.max(0, Math.ceil(deadline - clock.now()));
          // The members taken so far count as held by the call chain while it waits for the next
          // (its node says so: a multi-lock in progress is seen in a cycle of waits).
          const lease = await this.holding(leases, () => member.acquire({ waitMs, signal: options.signal }));
          leases.push(lease);
          // Listen for loss while the later members are awaited (a lease notices its node's
          // deletion only once its signal is armed); a member lost meanwhile is checked below.
          void lease.signal;
          lost = leases.find(isLost);
          if (lost) break;
        }
      } catch (error) {
        await releaseAll(leases).catch(() => undefined);
        throw error;
      }
      // Like a single lock, never hand out a group one of whose members someone else may hold.
      if (!lost) return new LeaseGroup(this.name, leases);
      const reason = lostReason(lost);
      await releaseAll(leases).catch(() => undefined);
      // Take them all again while the wait allows (the members were given back in reverse).
      const timedOut = options.waitMs === 0 || (deadline !== undefined && clock.now() >= deadline);
      if (timedOut || options.signal?.aborted) {
        const why = options.signal?.aborted ? 'aborted' : reason;
        throw notAcquiredError(this.name, why, options.waitMs === 0, why === 'aborted' ? options.signal?.reason : lost.signal.reason);
      }
    }
  }

  tryAcquire(): Promise<Lease | null> {
    return tryOnce(this);
  }

  withLock<T>(fn: (lease: Lease) => T | Promise<T>, options?: AcquireOptions): Promise<T> {
    return runWithLock(this, fn, options);
  }

  /** Runs `fn` with `leases` (of the first members) recorded as held by the call chain. */
  private holding<T>(leases: readonly Lease[], fn: () => T): T {
    return leases.reduceRight<() => T>((inner, lease, i) => () => this.members[i]!.runHolding(lease, inner), fn)();
  }

  /**
   * @internal Each member counts as held by the call chain (nested acquires re-enter), and
   * `LockContext.current()` is the group: its signal aborts when any member is lost, its fencing
   * token is the first member's (canonical order); each member's own is in `group.leases[i]`.
   */
  runHolding<T>(lease: Lease, fn: () => T): T {
    const leases = (lease as LeaseGroup).leases;
    const asGroup = () => runInLockContext(`multi:${this.path}`, lease, fn);
    const run = this.members.reduceRight<() => T>((inner, member, i) => () => member.runHolding(leases[i]!, inner), asGroup);
    return run();
  }
}
