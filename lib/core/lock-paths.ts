import type { ZkConnection } from './zk-connection.js';
import type { ZkSession } from './zk-session.js';

/** How long a lock path must go unused after our release before we delete it (if empty). */
export const PARENT_IDLE_MS = 10_000;
/** Paths remembered at most, per kind (beyond it the oldest are forgotten, or swept early). */
const MAX_TRACKED = 100_000;
const SWEEP_EVERY_MS = 1_000;

/**
 * The lock paths (container parents of our nodes) this process used. Two jobs:
 * - a hint that a path exists, so that an acquire on a path we do not know makes it in the same
 *   round trip as its node (a pipelined container create) instead of failing with NONODE first;
 * - deleting a path that we made (as a container) and released, once nobody here used it for
 *   PARENT_IDLE_MS and if it is empty (ZooKeeper refuses otherwise). A path someone else made
 *   (perhaps a persistent one with an ACL of its own) is never deleted by us. ZooKeeper's container reaper does the same, but at about 10 000 paths a
 *   minute: keys that are rarely reused (a lock per order) would pile up empty paths faster.
 * Deleting an empty lock path is safe for everyone (Curator too): an acquire that finds it gone
 * makes it again, and the new path's czxid keeps fencing tokens increasing.
 */
export class LockPaths {
  /** Known to exist (a hint), oldest first; true when we made it (a container). */
  private readonly known = new Map<string, boolean>();
  /** Released here, by time of the release, oldest first. */
  private readonly idle = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly connection: ZkConnection) {}

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
    if (this.known.size > MAX_TRACKED) this.known.delete(this.known.keys().next().value!);
  }

  /** `path` is gone (a create in it failed with NONODE). */
  gone(path: string): void {
    this.known.delete(path);
  }

  /** We released our node in `path`: if we made the path, delete it once it stays unused. */
  released(path: string): void {
    if (this.known.get(path) !== true) return;
    this.idle.delete(path); // to the end of the order
    this.idle.set(path, performance.now());
    if (this.idle.size > MAX_TRACKED) this.sweep(this.idle.size - MAX_TRACKED);
    this.timer ??= setInterval(() => this.sweep(), SWEEP_EVERY_MS).unref();
  }

  /** Deletes the paths idle long enough, oldest first (and `early` more, to bound memory). */
  private sweep(early = 0): void {
    const session = this.connection.state === 'connected' ? this.connection.session : undefined;
    const idleBefore = performance.now() - PARENT_IDLE_MS;
    for (const [path, releasedAt] of this.idle) {
      if (releasedAt >= idleBefore && early-- <= 0) break;
      this.idle.delete(path);
      this.known.delete(path);
      if (session) deleteIfEmpty(session, path);
    }
    if (this.idle.size === 0) this.stop();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}

/** NOTEMPTY (someone queues there again), NONODE (already gone) or connection trouble: nothing to do. */
function deleteIfEmpty(session: ZkSession, path: string): void {
  session.delete(path).catch(() => undefined);
}
