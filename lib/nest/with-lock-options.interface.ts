/** @publicApi */
export interface WithLockOptions {
  /** Which lock: a mutex (default), a read or write half, or a semaphore with `permits`. */
  kind?: 'mutex' | 'read' | 'write' | 'semaphore';
  /** For `kind: 'semaphore'`: the permit count (every participant must agree). */
  permits?: number;
  /** How long to wait for the lock: 0 tries once. Default: the module's `defaultWaitMs` (0). */
  waitMs?: number;
  /** Max hold time: the lease releases itself after it, and `LockContext.current().signal` aborts. */
  leaseMs?: number;
  /**
   * When the lock is not acquired: `'throw'` a LockNotAcquiredError, `'skip'` the call (it resolves
   * undefined, logged at debug level), or throw the error a function returns. Default: `'skip'` for
   * scheduled jobs (@Cron, @Interval, @Timeout), `'throw'` everywhere else.
   */
  onLocked?: 'throw' | 'skip' | ((name: string) => Error);
  /**
   * Keep the lock at least this long after the call started, even when it finished sooner, so an
   * instance whose clock fires the same tick a little later skips it (ShedLock's lockAtLeastFor).
   * Default for `@Cron` and `@Interval` jobs: until shortly before the next run (at most 60 s; see
   * docs/with-lock.md, "Scheduled jobs"); 0 for everything else.
   */
  minHoldMs?: number;
  /**
   * For `kind: 'mutex'`: let a call that already holds this lock take it again (counted). Default
   * false: re-entry follows the async context, which also reaches work the holder merely started
   * (an `@OnEvent({ async: true })` listener, a Subject's subscriber, a worker it woke up); without
   * re-entry such work waits for the lock like any other caller. With `true`, such work would run
   * inside the holder's lock at the same time as the holder: opt in only for nested calls, and do
   * not start concurrent work that takes the same lock. A nested call without it waits for itself
   * until `waitMs`.
   */
  reentrant?: boolean;
  /**
   * Let the holder be asked to let go (`LockService.revoke(name)`, `npx nestjs-zk-lock revoke`,
   * Curator's `Revoker`): a request aborts `LockContext.current().signal` with reason `revoked`,
   * and the lock goes when the method returns (without `minHoldMs`'s wait), so a method that
   * watches its signal stops early. The lock stays held until then: a request, never a break.
   * Not for `kind: 'semaphore'`. Default false.
   */
  revocable?: boolean;
}
