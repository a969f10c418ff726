import { LockNotAcquiredError, type NotAcquiredReason } from './errors.js';
import type { LockEngine } from './lock-engine.js';
import type { AcquireOptions } from './lock-queue.js';

/** Why an acquire stopped waiting. */
export interface Cancel {
  reason: NotAcquiredReason;
  error?: unknown;
}

/**
 * The ways an acquire stops waiting other than success: its deadline, its caller's signal, the
 * connection closing, the engine shutting down. Settles once; `dispose()` stops listening.
 */
export class Cancellation {
  current: Cancel | undefined;
  private readonly stopListening: () => void;

  constructor(
    engine: LockEngine,
    options: AcquireOptions,
    /** Called once, synchronously, when it settles (also from within the constructor). */
    private readonly onSettle: (cancel: Cancel) => void = () => undefined,
  ) {
    const { waitMs, signal } = options;
    const timer = waitMs !== undefined && waitMs > 0 ? setTimeout(() => this.settle({ reason: 'timeout' }), waitMs) : undefined;
    const onAbort = () => this.settle({ reason: 'aborted', error: signal?.reason });
    signal?.addEventListener('abort', onAbort, { once: true });
    const offStop = engine.onStop((error) => this.settle({ reason: 'connection', error }));
    this.stopListening = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      offStop();
    };
    if (signal?.aborted) onAbort();
  }

  settle(cancel: Cancel): void {
    if (this.current) return;
    this.current = cancel;
    this.onSettle(cancel);
  }

  dispose(): void {
    this.stopListening();
  }

  /** The error an acquire of `lockName` rejects with once settled. */
  notAcquired(lockName: string, tryOnce: boolean): LockNotAcquiredError {
    const { reason, error } = this.current ?? { reason: 'timeout' };
    return notAcquiredError(lockName, reason, tryOnce, error);
  }
}

/** The error of an acquire that gave up, with the same text wherever it is made. */
export function notAcquiredError(lockName: string, reason: NotAcquiredReason, tryOnce: boolean, cause?: unknown): LockNotAcquiredError {
  const name = JSON.stringify(lockName);
  const detail =
    reason === 'timeout'
      ? tryOnce
        ? `Lock ${name} is held by another owner`
        : `Timed out waiting for lock ${name}`
      : reason === 'aborted'
        ? `Acquiring lock ${name} was aborted`
        : `Lock ${name} was not acquired: the connection was closed`;
  return new LockNotAcquiredError(lockName, reason, detail, cause === undefined ? undefined : { cause });
}
