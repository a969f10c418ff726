import { metrics, ValueType, type Attributes, type Meter, type ObservableResult } from '@opentelemetry/api';
import { LockChannels, type LockEventPayloads } from '../core/diagnostics.js';
import type { ConnectionState, ZkConnection } from '../core/connection/zk-connection.js';

/** @publicApi */
export interface ZkLockMetricsOptions {
  /**
   * Add the lock's path as the attribute `zk_lock.path`. Off by default: names that carry ids
   * (`event:<id>`) make one time series per lock.
   */
  pathAttribute?: boolean;
  /**
   * Connections whose state the `zk_lock.connection.state` gauge reads directly. Without them it
   * follows the state changes published after this call (a connection that changed no state since
   * is not counted).
   */
  connections?: readonly ZkConnection[];
}

/** Stops recording (unsubscribes); calling it again does nothing. Also a `Disposable`. @publicApi */
export interface ZkLockMetricsHandle extends Disposable {
  (): void;
}

const SEMAPHORE_LEASE = /\/leases\/[^/]*lease-\d{10}$/;
const STATES: readonly ConnectionState[] = ['connecting', 'connected', 'suspended', 'lost', 'closed'];

const WAIT_BUCKETS_MS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000];
const HOLD_BUCKETS_MS = [5, 25, 100, 250, 1000, 5000, 10_000, 30_000, 60_000, 300_000, 900_000, 3_600_000];

/**
 * Records OpenTelemetry metrics from the library's `diagnostics_channel` events (`LockChannels`),
 * until the returned handle is called. Until then the library publishes nothing (no subscriber):
 * it costs nothing when not enabled. Instruments (durations in ms):
 *
 * - `zk_lock.wait.duration` (histogram): acquire time, by `zk_lock.kind` and `zk_lock.outcome`
 *   (`acquired`, `timeout`, `aborted`, `connection`, `error`);
 * - `zk_lock.hold.duration` (histogram): hold time, by kind and outcome (`released`, `lost`);
 *   one value per semaphore lease;
 * - `zk_lock.held` (up-down counter): locks held by this process, by kind;
 * - `zk_lock.waiting` (up-down counter): acquires in progress, by kind;
 * - `zk_lock.contended` (counter): acquires that found the lock held and waited;
 * - `zk_lock.lost` (counter): held locks lost, by `zk_lock.lost.reason` and kind;
 * - `zk_lock.release.failures` (counter): releases that could not delete their node, by kind;
 * - `zk_lock.connection.transitions` (counter): state changes, by `zk_lock.connection.state`
 *   and `zk_lock.connection.previous_state`;
 * - `zk_lock.connection.state` (observable gauge): connections per state.
 *
 * With no meter, it uses `metrics.getMeter('nestjs-zk-lock')` of the global meter provider: call
 * it after the OpenTelemetry SDK is registered (the API has no proxy meter).
 * @publicApi
 */
export function enableZkLockMetrics(meter: Meter = metrics.getMeter('nestjs-zk-lock'), options: ZkLockMetricsOptions = {}): ZkLockMetricsHandle {
  const waitDuration = meter.createHistogram('zk_lock.wait.duration', {
    description: 'Time from the start of an acquire to getting the lock or giving up',
    unit: 'ms',
    advice: { explicitBucketBoundaries: WAIT_BUCKETS_MS },
  });
  const holdDuration = meter.createHistogram('zk_lock.hold.duration', {
    description: 'Time a lock (or semaphore lease) was held, until released or lost',
    unit: 'ms',
    advice: { explicitBucketBoundaries: HOLD_BUCKETS_MS },
  });
  const held = meter.createUpDownCounter('zk_lock.held', { description: 'Locks held by this process', valueType: ValueType.INT });
  const waiting = meter.createUpDownCounter('zk_lock.waiting', { description: 'Acquires in progress', valueType: ValueType.INT });
  const contended = meter.createCounter('zk_lock.contended', {
    description: 'Acquires that found the lock held and waited',
    valueType: ValueType.INT,
  });
  const lost = meter.createCounter('zk_lock.lost', {
    description: 'Held locks lost (session expired, node deleted, lease expired...)',
    valueType: ValueType.INT,
  });
  const releaseFailures = meter.createCounter('zk_lock.release.failures', {
    description: 'Releases that could not delete the lock node (the lock stays taken until the session ends)',
    valueType: ValueType.INT,
  });
  const revokeRequests = meter.createCounter('zk_lock.revoke_requests', {
    description: 'Requests to let go heard by revocable holders of this process',
    valueType: ValueType.INT,
  });
  const transitions = meter.createCounter('zk_lock.connection.transitions', {
    description: 'ZooKeeper connection state changes',
    valueType: ValueType.INT,
  });
  const stateGauge = meter.createObservableGauge('zk_lock.connection.state', {
    description: 'ZooKeeper connections in each state',
    valueType: ValueType.INT,
  });

  /**
   * Per lock path and kind, what this process holds / is acquiring (to pair ends with starts): one
   * path can be held as write and read at once (a downgrade).
   */
  const holds = new Map<string, { kind: string; count: number }>();
  const acquiring = new Map<string, { kind: string; count: number }>();
  const keyOf = (path: string, kind: string | undefined) => `${path}\u0000${kind ?? ''}`;
  const perState = new Map<ConnectionState, number>();

  const attributes = (kind: string | undefined, path: string, extra: Attributes = {}): Attributes => {
    const out: Attributes = { ...extra };
    if (kind !== undefined) out['zk_lock.kind'] = kind;
    if (options.pathAttribute) out['zk_lock.path'] = path;
    return out;
  };
  const bump = (map: Map<string, { kind: string; count: number }>, path: string, kind: string) => {
    const entry = map.get(keyOf(path, kind));
    if (entry) entry.count++;
    else map.set(keyOf(path, kind), { kind, count: 1 });
  };
  /** Ends one of the entries of `path` and `kind`; undefined when none was started while enabled. */
  const drop = (map: Map<string, { kind: string; count: number }>, path: string, kind: string | undefined): string | undefined => {
    const entry = map.get(keyOf(path, kind));
    if (!entry) return undefined;
    if (--entry.count === 0) map.delete(keyOf(path, kind));
    return entry.kind;
  };
  /** The lock path of a held node: its parent, or for a semaphore lease the parent of `leases`. */
  const lockOf = (nodePath: string): { path: string; semaphore: boolean } => {
    const parent = nodePath.slice(0, Math.max(1, nodePath.lastIndexOf('/')));
    if (parent.endsWith('/leases') && SEMAPHORE_LEASE.test(nodePath)) {
      return { path: parent.slice(0, parent.lastIndexOf('/')) || '/', semaphore: true };
    }
    return { path: parent, semaphore: false };
  };

  const handlers: { [K in keyof LockEventPayloads]: (message: LockEventPayloads[K]) => void } = {
    acquireStart: (message) => {
      bump(acquiring, message.path, message.kind);
      waiting.add(1, attributes(message.kind, message.path));
    },
    acquired: (message) => {
      endAcquire(message, 'acquired');
      bump(holds, message.path, message.kind);
      held.add(1, attributes(message.kind, message.path));
    },
    notAcquired: (message) => endAcquire(message, message.reason),
    contended: (message) => contended.add(1, attributes(undefined, message.path)),
    released: (message) => endHold(message, 'released'),
    lost: (message) => endHold(message, 'lost'),
    revokeRequested: (message) => revokeRequests.add(1, attributes(message.kind, message.lockPath ?? message.path)),
    releaseFailed: (message) => releaseFailures.add(1, attributes(message.kind, message.lockPath ?? message.path)),
    connectionState: ({ state, previous }) => {
      transitions.add(1, { 'zk_lock.connection.state': state, 'zk_lock.connection.previous_state': previous });
      const before = perState.get(previous) ?? 0;
      if (before > 0) perState.set(previous, before - 1);
      if (state !== 'closed') perState.set(state, (perState.get(state) ?? 0) + 1);
    },
  };

  function endAcquire(message: LockEventPayloads['acquired' | 'notAcquired'], outcome: string): void {
    if (drop(acquiring, message.path, message.kind) !== undefined) waiting.add(-1, attributes(message.kind, message.path));
    if (typeof message.waitedMs === 'number') {
      waitDuration.record(message.waitedMs, attributes(message.kind, message.path, { 'zk_lock.outcome': outcome }));
    }
  }

  function endHold(message: LockEventPayloads['released'] | LockEventPayloads['lost'], outcome: 'released' | 'lost'): void {
    const fromNode = lockOf(message.path);
    const path = message.lockPath ?? fromNode.path;
    const semaphore = message.kind === 'semaphore' || fromNode.semaphore;
    // A semaphore acquire of n permits is published once but ends n times (one per lease): only
    // the first end pairs with it.
    const kind = drop(holds, path, message.kind ?? (semaphore ? 'semaphore' : undefined));
    if (kind !== undefined) held.add(-1, attributes(kind, path));
    const known = kind ?? (semaphore ? 'semaphore' : undefined);
    if (typeof message.heldMs === 'number') holdDuration.record(message.heldMs, attributes(known, path, { 'zk_lock.outcome': outcome }));
    if ('reason' in message) lost.add(1, attributes(known, path, { 'zk_lock.lost.reason': message.reason }));
  }

  const observeStates = (result: ObservableResult) => {
    if (options.connections) {
      const counts = new Map<ConnectionState, number>();
      for (const connection of options.connections) counts.set(connection.state, (counts.get(connection.state) ?? 0) + 1);
      for (const state of STATES) result.observe(counts.get(state) ?? 0, { 'zk_lock.connection.state': state });
    } else {
      for (const state of STATES) if (state !== 'closed') result.observe(perState.get(state) ?? 0, { 'zk_lock.connection.state': state });
    }
  };
  stateGauge.addCallback(observeStates);

  // A subscriber that throws would surface as an uncaught exception in the publisher's process.
  const subscribed = (Object.keys(handlers) as (keyof LockEventPayloads)[]).map((event) => {
    const handler = handlers[event] as (message: unknown) => void;
    const safe = (message: unknown) => {
      try {
        handler(message);
      } catch {
        // metrics must never break locking
      }
    };
    LockChannels[event].subscribe(safe);
    return () => LockChannels[event].unsubscribe(safe);
  });

  let active = true;
  const dispose = () => {
    if (!active) return;
    active = false;
    for (const unsubscribe of subscribed) unsubscribe();
    stateGauge.removeCallback(observeStates);
  };
  return Object.assign(dispose, { [Symbol.dispose]: dispose });
}
