import type { ZkConnection } from '../connection/zk-connection.js';
import type { ZkSession } from '../client/session.js';
import { isZkCode, ZkCode } from '../client/zk-error.js';
import type { ClockTimer } from '../clock.js';

/**
 * How long a lock path must go unused after our release before we delete it (if empty): the
 * interval at which ZooKeeper's reaper looks by default, so a quiet service leaves nothing longer.
 */
export const PARENT_IDLE_MS = 60_000;
/** Default bound of the empty paths of ours kept for reuse: beyond it the oldest go at once. */
export const MAX_IDLE_LOCK_PATHS = 10_000;
/** Paths remembered as existing at most (beyond it the oldest are forgotten). */
const MAX_KNOWN = 100_000;
const SWEEP_EVERY_MS = 1_000;

/**
 * The lock paths (container parents of our nodes) this process used. Two jobs:
 * - a hint that a path exists, so that an acquire on a path we do not know makes it in the same
 *   round trip as its node (a pipelined container create) instead of failing with NONODE first;
 * - deleting a path that we made (as a container) and released, if it is empty (ZooKeeper
 *   refuses otherwise): at once when more than `maxIdle` of ours are idle (the oldest first), and
 *   after PARENT_IDLE_MS anyway. ZooKeeper's container reaper removes at most about 10 000 paths
 *   a minute, so keys that are rarely reused (a lock per order) piled up empty paths faster; keys
 *   that come back (a working set up to `maxIdle`) keep their paths and cost no create. A path
 *   someone else made (perhaps a persistent one with an ACL of its own) is never deleted by us.
 * Deleting an empty lock path is safe for everyone (Curator too): an acquire that finds it gone
 * makes it again, and the new path's czxid keeps fencing tokens increasing.
 */
export class LockPaths {
  /** Known to exist (a hint), oldest first; true when we made it (a container). */
  private readonly known = new Map<string, boolean>();
  /** Released here, by time of the release, oldest first. */
  private readonly idle = new Map<string, number>();
  private timer: ClockTimer | undefined;

  constructor(
    private readonly connection: ZkConnection,
    private readonly maxIdle = MAX_IDLE_LOCK_PATHS,
  ) {}

  has(path: string): boolean {
    return this.known.has(path);
  }

  /** `path` exists (we just made a node in it); it is in use again. */
  exists(path: string): void {
    this.idle.delete(path);
    if (!this.known.has(path)) this.remember(path, false);
  }

  /** We made `path` (a container create of ours succeeded). */
  made(path: string): void {
    this.known.delete(path);
    this.remember(path, true);
  }

  private remember(path: string, ours: boolean): void {
    this.known.set(path, ours);
    if (this.known.size > MAX_KNOWN) this.known.delete(this.known.keys().next().value!);
  }

  /** `path` is gone (a create in it failed with NONODE). */
  gone(path: string): void {
    this.known.delete(path);
  }

  /** We released our node in `path`: if we made the path, delete it once it stays unused. */
  released(path: string): void {
    if (this.known.get(path) !== true) return;
    this.idle.delete(path); // to the end of the order
    this.idle.set(path, this.connection.clock.now());
    if (this.idle.size > this.maxIdle) this.sweep(this.idle.size - this.maxIdle);
    this.timer ??= this.connection.clock.setInterval(() => this.sweep(), SWEEP_EVERY_MS).unref();
  }

  /** Deletes the paths idle long enough, oldest first (and `early` more, to keep within maxIdle). */
  private sweep(early = 0): void {
    const session = this.connection.state === 'connected' ? this.connection.session : undefined;
    const idleBefore = this.connection.clock.now() - PARENT_IDLE_MS;
    for (const [path, releasedAt] of this.idle) {
      if (releasedAt >= idleBefore && early-- <= 0) break;
      this.idle.delete(path);
      if (session) this.deleteIfEmpty(session, path);
    }
    if (this.idle.size === 0) this.stop();
  }

  /**
   * Gone (or already gone): forgotten. Refused as not empty (someone queues there again) or cut
   * off: still ours, so our next release there tries again.
   */
  private deleteIfEmpty(session: ZkSession, path: string): void {
    session.delete(path).then(
      () => this.known.delete(path),
      (error: unknown) => (isZkCode(error, ZkCode.NONODE) ? this.known.delete(path) : undefined),
    );
  }

  stop(): void {
    this.connection.clock.clearInterval(this.timer);
    this.timer = undefined;
  }
}

