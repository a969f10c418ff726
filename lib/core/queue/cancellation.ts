import { ConnectionClosedError, LockNotAcquiredError, type NotAcquiredReason } from '../errors.js';
import type { LockEngine } from '../lock-engine.js';
import type { AcquireOptions } from './acquire-options.js';

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
    if (waitMs === undefined && !signal) {
      // No deadline, no signal (most acquires): only the connection closing or shutdown end the wait.
      this.stopListening = engine.onStop((error) => this.settle({ reason: 'connection', error }));
      return;
    }
    const connection = engine.connection;
    // A wait that ends while ZooKeeper is unreachable ended for that reason, not for contention:
    // unreachable meaning no answer for half the wait (at most UNANSWERED_MS) by its due time,
    // whether the link was still "connected" (the client notices a silent link only after 2/3 of
    // the session timeout) or had dropped. A wait due in the first moments of a leader election
    // (about half a second) spent all but those moments queued behind holders: contention. A
    // try-once that got no answer within its bound met a link that does not answer.
    const bound = waitMs === undefined ? 0 : Math.min(UNANSWERED_MS, waitMs / 2);
    const { clock } = connection;
    const due = waitMs === undefined ? 0 : clock.now() + waitMs;
    const links = connection.links;
    let stopped = false;
    const onDeadline = () => {
      if (waitMs === 0) return this.settle({ reason: 'connection' });
      if (connection.state !== 'connected') {
        // How long nothing had been answered at the due time: what was unanswered when the link
        // last dropped, plus the time from that drop to the due time. Negative when the timer
        // ran late (a stalled or starved process) into an outage that began after the wait was
        // due. Down at the due time since a moment not kept (it came up only after): an outage.
        const silentAtDue = links.upAt <= due ? links.unansweredAtDown + (due - links.downAt) : Infinity;
        return this.settle({ reason: silentAtDue >= bound ? 'connection' : 'timeout' });
      }
      if ((connection.session?.unansweredForMs() ?? 0) < bound) return this.settle({ reason: 'timeout' });
      // A request looks unanswered, but timers run before the loop reads the socket: after our own
      // process stalled (a busy or starved host: the timer itself fired late), the answers that came
      // meanwhile are still unread. Decide once they are read (the poll phase runs before
      // setImmediate), and do not count the stall, during which nothing could have been read, as
      // the link's silence. Without this, waits that rode over a leader election were answered 503
      // at their deadline on a loaded host, with ZooKeeper answering again.
      const stalledMs = Math.max(0, clock.now() - due);
      clock.setImmediate(() => {
        if (stopped) return;
        const silentMs = (connection.session?.unansweredForMs() ?? 0) - stalledMs;
        this.settle({ reason: connection.state !== 'connected' || silentMs >= bound ? 'connection' : 'timeout' });
      });
    };
    // Unref'd: the pending acquire keeps the process alive, not its deadline (see ZkConnection.keepAliveUntilSettled).
    const timer = waitMs === undefined ? undefined : clock.setTimeout(onDeadline, waitMs > 0 ? waitMs : TRY_ONCE_BOUND_MS).unref();
    const onAbort = () => this.settle({ reason: 'aborted', error: signal?.reason });
    const offAbort = signal ? onAbortOf(signal, onAbort) : undefined;
    const offStop = engine.onStop((error) => this.settle({ reason: 'connection', error }));
    // Try-once never waits for a connection: not connected now, or disconnected meanwhile, fails it.
    const offDisconnect = waitMs === 0 ? engine.onDisconnect(() => this.settle({ reason: 'connection' })) : undefined;
    this.stopListening = () => {
      stopped = true;
      clock.clearTimeout(timer);
      offAbort?.();
      offStop();
      offDisconnect?.();
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

/** The acquires waiting on each caller's signal: one listener per signal, however many wait on it. */
const waitingOn = new WeakMap<AbortSignal, { listeners: Set<() => void>; onAbort: () => void }>();

/**
 * Calls `listener` once when `signal` aborts; returns what stops that. Many acquires often share
 * one signal (an application's shutdown signal): a listener each would make Node warn of a leak
 * past 10 (MaxListenersExceededWarning) and cost a listener per waiter.
 */
function onAbortOf(signal: AbortSignal, listener: () => void): () => void {
  let entry = waitingOn.get(signal);
  if (!entry) {
    const listeners = new Set<() => void>();
    const onAbort = () => {
      waitingOn.delete(signal);
      for (const each of [...listeners]) each();
    };
    entry = { listeners, onAbort };
    waitingOn.set(signal, entry);
    signal.addEventListener('abort', onAbort, { once: true });
  }
  const { listeners, onAbort } = entry;
  listeners.add(listener);
  return () => {
    if (!listeners.delete(listener) || listeners.size > 0) return;
    // The last one left: take the signal's listener off too (it may live as long as the application).
    if (waitingOn.get(signal)?.listeners === listeners) waitingOn.delete(signal);
    signal.removeEventListener('abort', onAbort);
  };
}

/**
 * How long a try-once may take before it counts as a connection failure: its requests take a
 * round trip or two on a healthy link, but a silent one answers nothing until the C client gives
 * up (2/3 of the session timeout).
 */
export const TRY_ONCE_BOUND_MS = 2_000;

/** A request unanswered this long (or for half the wait, if shorter) means the link is not answering. */
const UNANSWERED_MS = 1_000;

/** The error of an acquire that gave up, with the same text wherever it is made. */
export function notAcquiredError(lockName: string, reason: NotAcquiredReason, tryOnce: boolean, cause?: unknown): LockNotAcquiredError {
  if (reason === 'deadlock' && cause instanceof LockNotAcquiredError) return cause; // the DeadlockError naming the cycle
  const name = JSON.stringify(lockName);
  const detail =
    reason === 'timeout'
      ? tryOnce
        ? `Lock ${name} is held by another owner`
        : `Timed out waiting for lock ${name}`
      : reason === 'aborted'
        ? `Acquiring lock ${name} was aborted`
        : cause instanceof ConnectionClosedError
          ? `Lock ${name} was not acquired: the connection was closed`
          : `Lock ${name} was not acquired: ZooKeeper is unavailable`;
  return new LockNotAcquiredError(lockName, reason, detail, cause === undefined ? undefined : { cause });
}
