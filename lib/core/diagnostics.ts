import diagnostics_channel from 'node:diagnostics_channel';
import type { ConnectionState } from './connection/connection-state.js';

/**
 * Events on `node:diagnostics_channel`, for tracing and metrics. Publishing costs one property
 * read when nobody subscribes.
 * @publicApi
 */
export const LockChannels = {
  /** `{ name, path, kind }`: an acquire started. */
  acquireStart: diagnostics_channel.channel('nestjs-zk-lock:acquire-start'),
  /** `{ name, path, kind, waitedMs, fencingToken }`: an acquire succeeded. */
  acquired: diagnostics_channel.channel('nestjs-zk-lock:acquired'),
  /** `{ name, path, kind, reason, waitedMs }`: an acquire gave up (timeout, aborted, connection). */
  notAcquired: diagnostics_channel.channel('nestjs-zk-lock:not-acquired'),
  /** `{ name, path }`: an acquire found the lock held and started waiting. */
  contended: diagnostics_channel.channel('nestjs-zk-lock:contended'),
  /** `{ name, path, heldMs }`: a lease was released. */
  released: diagnostics_channel.channel('nestjs-zk-lock:released'),
  /** `{ name, path, reason, heldMs }`: a held lease was lost. */
  lost: diagnostics_channel.channel('nestjs-zk-lock:lost'),
  /** `{ name, path, lockPath, kind }`: a revocable holder was asked to let go (see `revocable`). */
  revokeRequested: diagnostics_channel.channel('nestjs-zk-lock:revoke-requested'),
  /**
   * `{ name, path, lockPath, kind, error }`: a release could not delete the lock node for a reason
   * a retry cannot fix (e.g. NOAUTH after an ACL change): the lock stays taken until the session ends.
   */
  releaseFailed: diagnostics_channel.channel('nestjs-zk-lock:release-failed'),
  /** `{ state, previous, sessionId }`: the connection changed state. */
  connectionState: diagnostics_channel.channel('nestjs-zk-lock:connection-state'),
} as const;

/** What identifies a lock in every event: its name, the node path, the lock's path and its kind. */
export interface LockEventSubject {
  name: string;
  /** The node or parent the event is about (a lease node for `released`/`lost`). */
  path: string;
  /** The lock's path (for a semaphore lease, the semaphore's). */
  lockPath?: string;
  /** `mutex`, `read`, `write`, `semaphore`, `multi`. */
  kind?: string;
}

/** An acquire always knows its recipe. */
export type AcquireSubject = LockEventSubject & { lockPath: string; kind: string };

/** The message each channel carries (`LockChannels[K]` publishes `LockEventPayloads[K]`). @publicApi */
export interface LockEventPayloads {
  acquireStart: AcquireSubject;
  acquired: AcquireSubject & { waitedMs: number; fencingToken: bigint; leases: number };
  notAcquired: AcquireSubject & { reason: string; waitedMs: number };
  contended: LockEventSubject;
  released: LockEventSubject & { heldMs: number };
  lost: LockEventSubject & { reason: string; heldMs: number };
  revokeRequested: LockEventSubject;
  releaseFailed: LockEventSubject & { error: unknown };
  connectionState: { state: ConnectionState; previous: ConnectionState; sessionId: string | undefined };
}

/** Publishes on `LockChannels[event]`; `message` is built only when somebody subscribes. */
export function publish<K extends keyof LockEventPayloads>(event: K, message: () => LockEventPayloads[K]): void {
  const channel = LockChannels[event];
  if (channel.hasSubscribers) channel.publish(message());
}
