import diagnostics_channel from 'node:diagnostics_channel';

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
  /**
   * `{ name, path, lockPath, kind, error }`: a release could not delete the lock node for a reason
   * a retry cannot fix (e.g. NOAUTH after an ACL change): the lock stays taken until the session ends.
   */
  releaseFailed: diagnostics_channel.channel('nestjs-zk-lock:release-failed'),
  /** `{ state, previous, sessionId }`: the connection changed state. */
  connectionState: diagnostics_channel.channel('nestjs-zk-lock:connection-state'),
} as const;

export function publish(channel: diagnostics_channel.Channel, message: () => object): void {
  if (channel.hasSubscribers) channel.publish(message());
}
