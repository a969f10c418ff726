import type { AcquireOptions } from './acquire-options.js';
import { Cancellation } from './cancellation.js';
import { NodeWatch } from '../operations/node-watch.js';
import { ConnectionClosedError } from '../errors.js';
import { publish } from '../diagnostics.js';
import type { LockEngine } from '../lock-engine.js';
import { fencingTokenOf, joinPath, newProtectedPrefix, sequenceOf, sortChildren } from '../paths.js';
import type { Created, Listing } from '../operations/zk-operations.js';
import { isZkCode, ZkCode, ZkError } from '../client/zk-error.js';
import type { WatchEventType, ZkSession } from '../client/session.js';
import { sleep, type Clock, type ClockTimer } from '../clock.js';
import type { AcquireTrace } from '../tracing.js';
import type { HolderExtra } from '../operations/holder-data.js';

/** What a recipe decides from the sorted children of its queue. */
export type Verdict =
  | { holds: true }
  /**
   * Wait for `watch` (a sibling) to change. `holdsWhenGone`: its deletion alone makes us the
   * holder (it was the head and we were next at our last look), so no new listing is needed.
   */
  | { holds: false; watch: string; holdsWhenGone: boolean }
  /** Wait for any change to the list of children (semaphore leases). */
  | { holds: false; watchChildren: true };

/** One recipe's view of a queue of sequential nodes. */
export interface QueueSpec {
  /** The lock's name, for errors. */
  lockName: string;
  /** For diagnostics events: the recipe's kind and lock path; `silent` publishes nothing. */
  kind?: string;
  lockPath?: string;
  silent?: boolean;
  /** The node under which contenders queue. */
  parentPath: string;
  /** Node name after the protected prefix: "lock-", "__READ__", "__WRIT__", "lease-". */
  nodeName: string;
  /** Markers whose suffix is the sort key (Curator's fixForSorting). */
  sortMarkers: readonly string[];
  /** Decides from our index in the sorted children. */
  evaluate(sorted: readonly string[], ourIndex: number): Verdict;
  /**
   * Create a plain EPHEMERAL node with this suffix instead of a sequential one (a downgraded read
   * lock takes its writer's sequence, as Curator 5.5+ does).
   */
  fixedSuffix?: string;
  /** The node's data; default the engine's holder data (a leader's node carries its participant id). */
  data?: () => Buffer;
}

/** Thrown by a queue pinned to one session when that session ends (the caller starts over). */
export class SessionEndedError extends Error {
  constructor() {
    super('the session ended while queueing');
  }
}

export interface QueueOptions extends AcquireOptions {
  fair?: boolean;
  /**
   * Only queue in `session`: if it ends, throw SessionEndedError instead of queueing again in the
   * next one (a semaphore lease must be created while holding the internal lock of the same session).
   */
  session?: ZkSession;
  /** Receives a function that gives the acquire up (like an abort; cheaper than an AbortSignal). */
  onCancellable?: (cancel: () => void) => void;
  /** The acquire's span while tracing: its context goes into our node's data, its links to the nodes we wait behind. */
  trace?: AcquireTrace;
  /** The caller's call chain holds other locks: its node says which, and its wait looks for cycles. */
  nested?: NestedWait;
}

/** A wait whose call chain holds other locks, while it waits: what deadlock detection starts from. */
export interface HoldingWait {
  readonly session: ZkSession;
  /** Our waiting node (its parent is the lock waited for). */
  readonly node: string;
  /** The lock paths the call chain holds. */
  readonly holds: readonly string[];
}

/** A wait whose call chain holds other locks (see deadlocks.ts). */
export interface NestedWait {
  /** The lock paths the chain still holds, written into each node made (as `holds`). */
  holds(): readonly string[];
  /** Calls `changed` when a lease behind `holds` ends (the node's `holds` is then wrong); returns what stops that. */
  onHoldsChanged(changed: () => void): () => void;
  /** Looks for a cycle of waits through our node: resolves with the error that ends the wait, if any. */
  check(wait: HoldingWait): Promise<Error | undefined>;
}

/** A node that holds its place at the head of a queue. */
export interface QueueEntry {
  session: ZkSession;
  path: string;
  name: string;
  /** Strictly increasing across successive holders of the queue (see fencingTokenOf). */
  fencingToken: bigint;
  /** Nodes in the last listing we saw (ours included): 1 means nobody else was queued then. */
  listed: number;
  /**
   * Set when that listing showed our node alone: the lock path's czxid and the sequence number
   * its next create gets if nobody else makes a node first (see SequenceShortcut).
   */
  alone?: { parentCzxid: number; nextSequence: number };
}

/**
 * Joins a queue and waits until the recipe's verdict says we hold. On any way out other than
 * success (timeout, abort, close, error) our node is deleted, also when the reply of its create
 * was lost, so nothing is left behind.
 */
export function acquireInQueue(
  engine: LockEngine,
  spec: QueueSpec,
  options: QueueOptions = {},
): Promise<QueueEntry> {
  // Not async (one promise and one turn of the microtask queue less per acquire); a throw still rejects.
  try {
    return new QueueWaiter(engine, spec, options).run();
  } catch (error) {
    return Promise.reject(error);
  }
}

class QueueWaiter {
  private readonly cancellation: Cancellation;
  /** Pending untilCancelled calls, rejected when the cancellation settles. */
  private readonly cancelHooks = new Set<() => void>();
  private wake: (() => void) | undefined;
  private readonly tryOnce: boolean;
  /** Non-fair: keep no place in the queue while waiting; race for the lock when the head goes. */
  private readonly barge: boolean;
  private losses = 0;
  private readonly pinned: ZkSession | undefined;
  private contended = false;
  private readonly trace: AcquireTrace | undefined;
  private readonly nested: NestedWait | undefined;
  /** A lease behind our node's `holds` ended since the node was made. */
  private holdsChanged = false;
  /** Our current node and what its data says we hold. */
  private node: { path: string; holds: readonly string[] } | undefined;
  /** The node whose wait was searched for a cycle (once per node: the wait that closes a cycle is made last). */
  private checkedNode: string | undefined;

  constructor(
    private readonly engine: LockEngine,
    private readonly spec: QueueSpec,
    options: QueueOptions,
  ) {
    this.tryOnce = options.waitMs === 0;
    this.pinned = options.session;
    this.barge = options.fair === false;
    this.trace = options.trace;
    // A try-once never waits, and a barging waiter keeps no node while it does: neither is seen in a cycle.
    this.nested = this.tryOnce || this.barge ? undefined : options.nested;
    this.cancellation = new Cancellation(engine, options, () => {
      this.wake?.();
      for (const cancel of [...this.cancelHooks]) cancel();
    });
    options.onCancellable?.(() => this.cancellation.settle({ reason: 'aborted' }));
  }

  async run(): Promise<QueueEntry> {
    const stopWatchingHolds = this.nested?.onHoldsChanged(() => {
      this.holdsChanged = true;
      this.wake?.();
    });
    try {
      for (;;) {
        // Connected: the create goes out in this task, not after another turn of the microtask queue.
        const connection = this.engine.connection;
        const session = connection.state === 'connected' && connection.session ? connection.session : await this.connectedSession();
        if (this.pinned && session !== this.pinned) throw new SessionEndedError();
        const entry = await this.attempt(session);
        if (entry) return entry;
        // Our node or its session went away while we waited: queue again in the current session.
      }
    } catch (error) {
      // Like Curator, reject only once our node is deleted, unless that needs a reconnect.
      const reachable = this.engine.connection.state === 'connected' && this.cancellation.current?.reason !== 'connection';
      if (this.cleanup && reachable) await settleWithin(this.engine.connection.clock, this.cleanup, CLEANUP_WAIT_MS);
      if (error instanceof ConnectionClosedError) this.cancellation.settle({ reason: 'connection', error });
      if (error === CANCELLED || error instanceof ConnectionClosedError) throw this.cancellation.notAcquired(this.spec.lockName, this.tryOnce);
      throw error;
    } finally {
      stopWatchingHolds?.();
      this.stopOwnWatch();
      this.cancellation.dispose();
    }
  }

  private cleanup: Promise<unknown> | undefined;

  /** The session once connected; waiting stops (with no listener left behind) on cancellation. */
  private connectedSession(): Promise<ZkSession> {
    const connection = this.engine.connection;
    if (connection.state === 'connected' && connection.session) return Promise.resolve(connection.session);
    if (this.cancellation.current) return Promise.reject(CANCELLED);
    const stop = new AbortController();
    const cancel = () => stop.abort(CANCELLED);
    this.cancelHooks.add(cancel);
    return connection.whenConnected(stop.signal).finally(() => this.cancelHooks.delete(cancel));
  }

  /** One node's life in the queue; resolves undefined when it must be re-created. */
  private async attempt(session: ZkSession): Promise<QueueEntry | undefined> {
    const { parentPath } = this.spec;
    const prefix = newProtectedPrefix();
    const { nodeName, fixedSuffix } = this.spec;
    const { shortcut } = this.engine.ops;
    // Where our node was alone when we last released it, its number may prove it alone again.
    const expected = fixedSuffix === undefined ? shortcut.expect(session, parentPath) : undefined;
    this.holdsChanged = false;
    const holds = this.nested?.holds() ?? [];
    const created = this.engine.ops.createProtected(session, {
      parentPath,
      prefix,
      name: nodeName + (fixedSuffix ?? ''),
      data: this.spec.data?.() ?? this.engine.nodeData(nodeExtra(this.trace?.nodeData, holds)),
      sequential: fixedSuffix === undefined,
      list: expected === undefined || expected.list,
    });
    let path: string | undefined;
    let listing: Listing | undefined;
    try {
      const first = await this.untilCancelled(created);
      if (!first) return undefined; // session gone before the node was surely made
      ({ path, listing } = first);
      this.node = { path, holds };
      const name = path.slice(parentPath.length + 1);
      if (expected && !listing && !expected.release.deleted) await this.untilCancelled(expected.release.settled);
      const proven = expected && shortcut.confirm(expected, name, sequenceOf(name));
      listing ??= proven;
      for (;;) {
        listing ??= await this.untilCancelled(this.engine.ops.list(session, parentPath));
        if (!listing) return this.abandon(session, path);
        const sorted = sortChildren(listing.children, this.spec.sortMarkers);
        const index = sorted.indexOf(name);
        // Our node is not listed: gone (deleted by someone), or a listing we cannot trust. Delete it
        // by path before queueing again, or it could stay and block the lock until the session ends.
        if (index < 0) return this.abandon(session, path);
        const verdict = this.spec.evaluate(sorted, index);
        if (verdict.holds) return this.held(session, path, name, listing);
        if (this.tryOnce) {
          this.cancellation.settle({ reason: 'timeout' });
          throw CANCELLED;
        }
        this.trace?.waiting(index);
        if (!this.contended && !this.spec.silent) {
          this.contended = true;
          const { lockName, parentPath, kind, lockPath } = this.spec;
          publish('contended', () => ({ name: lockName, path: parentPath, lockPath: lockPath ?? parentPath, kind }));
        }
        if (this.barge) {
          // Step out of the queue, wait for the current head to go, then race for it again.
          await this.untilCancelled(this.engine.ops.deleteGuaranteed(session, path));
          path = undefined;
          await this.waitFor(session, undefined, { holds: false, watch: sorted[0]!, holdsWhenGone: false });
          // A random pause before racing again breaks the symmetry between racers (and makes the
          // order random); it grows with consecutive losses so transient nodes stop colliding.
          this.losses++;
          const { clock } = this.engine.connection;
          await this.untilCancelled(sleep(clock, clock.random() * Math.min(2 ** this.losses, 64)));
          return undefined;
        }
        const next = await this.waitHolding(session, path, verdict);
        // What our node says we hold is no longer so (a lease ended): make it again with what is.
        if (this.holdsChanged && holds.length > 0 && next !== 'holds' && next !== 'gone') return this.abandon(session, path);
        if (next === 'holds') return this.held(session, path, name, listing);
        if (next === 'gone') return this.abandon(session, path);
        listing = next === 'relist' ? undefined : next;
      }
    } catch (error) {
      // Whatever made us give up, the node must not stay behind.
      this.cleanup = path ? this.engine.ops.deleteGuaranteed(session, path) : this.cleanUpCreate(session, created, prefix);
      this.engine.background(this.cleanup);
      throw error;
    }
  }

  /** waitFor, searching once for a cycle of waits through our node when its call chain holds other locks. */
  private async waitHolding(
    session: ZkSession,
    path: string,
    verdict: Extract<Verdict, { holds: false }>,
  ): Promise<'holds' | 'relist' | 'gone' | Listing> {
    const holds = this.node?.path === path ? this.node.holds : [];
    if (!this.nested || holds.length === 0) return this.waitFor(session, path, verdict);
    if (this.holdsChanged) return 'relist'; // a lease ended before we slept: the node is made again
    const wait: HoldingWait = { session, node: path, holds };
    this.engine.holdingWaits.add(wait);
    if (this.checkedNode !== path) {
      this.checkedNode = path;
      this.nested.check(wait).then(
        (error) => {
          // Only ever ends the wait of the node it looked at, as any give-up does: never grants.
          if (error && this.node?.path === path) this.cancellation.settle({ reason: 'deadlock', error });
        },
        () => {
          if (this.checkedNode === path) this.checkedNode = undefined; // look again after the next wake
        },
      );
    }
    try {
      return await this.waitFor(session, path, verdict);
    } finally {
      this.engine.holdingWaits.delete(wait);
    }
  }

  private held(session: ZkSession, path: string, name: string, listing: Listing): QueueEntry {
    const sequence = sequenceOf(name);
    const entry: QueueEntry = { session, path, name, fencingToken: fencingTokenOf(listing.parentCzxid, sequence ?? 0), listed: listing.children.length };
    if (listing.children.length === 1 && sequence !== undefined && this.spec.fixedSuffix === undefined) {
      entry.alone = { parentCzxid: listing.parentCzxid, nextSequence: sequence + 1 };
      this.engine.ops.shortcut.heldAlone(session, this.spec.parentPath);
    }
    return entry;
  }

  private abandon(session: ZkSession, path: string): undefined {
    this.engine.background(this.engine.ops.deleteGuaranteed(session, path));
    return undefined;
  }

  /** After giving up mid-create: wait for the create's outcome and delete what it made. */
  private async cleanUpCreate(session: ZkSession, created: Promise<Created | undefined>, prefix: string): Promise<void> {
    const result = await created.catch(() => undefined);
    if (result) await this.engine.ops.deleteGuaranteed(session, result.path);
    else await this.engine.ops.deleteByPrefix(session, this.spec.parentPath, prefix);
  }

  /** Our node (per attempt) whose deletion we watch. */
  private ownWatch: { path: string; watch: NodeWatch } | undefined;

  /**
   * Before relying on "predecessor gone, so we hold", watch our own node too (pipelined, once per
   * node): ZooKeeper delivers watch events in the order of the changes, so if someone deleted our
   * node first we hear of it before the predecessor's deletion, and queue again instead. That
   * holds only while the watch is set: after a data change spent it, or a failed request, the
   * shortcut is not taken until it is set again (a listing decides instead).
   */
  private watchOwnNode(session: ZkSession, path: string): void {
    if (this.ownWatch?.path === path) return;
    this.stopOwnWatch();
    this.ownWatch = { path, watch: new NodeWatch(session, path, () => this.wake?.(), (s, run) => this.engine.connection.onLinkUp(s, run)) };
  }

  private stopOwnWatch(): void {
    this.ownWatch?.watch.stop();
    this.ownWatch = undefined;
  }

  /**
   * Arms the verdict's watch and waits for it, for a reconnect or for the session to go.
   * Returns 'holds' (watched head deleted), a fresh listing (children watch), 'relist' or 'gone'.
   */
  private async waitFor(
    session: ZkSession,
    ourPath: string | undefined,
    verdict: Extract<Verdict, { holds: false }>,
  ): Promise<'holds' | 'relist' | 'gone' | Listing> {
    const name = ourPath?.slice(ourPath.lastIndexOf('/') + 1);
    const shortcut = 'watch' in verdict && verdict.holdsWhenGone && ourPath !== undefined;
    if (shortcut && ourPath) this.watchOwnNode(session, ourPath);
    const connection = this.engine.connection;
    // Our node's watch proves it intact only on a confirmed link: after a reconnect the events of
    // the re-sent watches come in no order of the changes (it depends on the paths), so the head's
    // deletion can arrive before our own node's.
    const ownIntact = () => {
      const own = this.ownWatch;
      return own !== undefined && own.path === ourPath && own.watch.armed && connection.state === 'connected' && connection.session === session;
    };
    let fired: WatchEventType | undefined;
    let resolveWake!: () => void;
    const woken = new Promise<void>((resolve) => (resolveWake = resolve));
    const onEvent = (type: WatchEventType) => {
      if (type === 'session') return; // connection changes are followed below
      fired ??= type;
      resolveWake();
    };
    const onState = () => {
      if (connection.state === 'connected' || connection.session !== session || session.isClosed) resolveWake();
    };
    connection.on('state', onState);
    this.wake = resolveWake;
    const listener = (e: { type: WatchEventType }) => onEvent(e.type);
    let watched: string | undefined;
    try {
      let fresh: Listing | undefined;
      try {
        if ('watch' in verdict) {
          watched = joinPath(this.spec.parentPath, verdict.watch);
          const { data } = await this.untilCancelled(this.engine.ops.watchNode(session, watched, listener));
          // The read that sets the watch brings the node's holder data: who we wait behind.
          this.trace?.watching(verdict.watch, data);
        } else {
          watched = this.spec.parentPath;
          const { children, stat } = await this.untilCancelled(this.engine.ops.watchChildren(session, watched, listener));
          fresh = { children, parentCzxid: stat.czxid };
        }
      } catch (error) {
        if (isZkCode(error, ZkCode.NONODE)) {
          // Already gone: no need to wait (and no watch was left on a missing node).
          return shortcut && ownIntact() ? 'holds' : 'relist';
        }
        if (error instanceof ZkError && (error.isConnectionError || error.isSessionGone)) {
          return (await this.untilCancelled(this.engine.ops.sessionUsable(session))) ? 'relist' : 'gone';
        }
        throw error;
      }
      if (fresh) {
        // The children watch came with a listing: re-evaluate it before sleeping.
        const sorted = sortChildren(fresh.children, this.spec.sortMarkers);
        const index = name === undefined ? -1 : sorted.indexOf(name);
        if (index < 0 || this.spec.evaluate(sorted, index).holds) return fresh;
      }
      await woken;
      if (this.cancellation.current) throw CANCELLED;
      if (connection.session !== session || session.isClosed) return 'gone';
      if (fired === 'deleted' && shortcut && ownIntact()) return 'holds';
      if (connection.state !== 'connected' && !(await this.untilCancelled(this.engine.ops.sessionUsable(session)))) return 'gone';
      return 'relist';
    } finally {
      connection.off('state', onState);
      this.wake = undefined;
      // A waiter that stops waiting must not stay reachable from the session until the node changes.
      if (watched !== undefined) this.engine.ops.unwatch(session, watched, listener);
    }
  }

  /**
   * Races `work` against cancellation; on cancellation rejects with CANCELLED (work goes on
   * unobserved). Not Promise.race on a promise that settles on cancellation: that leaves one
   * reaction per call on a promise that lives as long as the acquire, each keeping its result alive.
   */
  private untilCancelled<T>(work: Promise<T>): Promise<T> {
    if (this.cancellation.current) {
      work.catch(() => undefined);
      return Promise.reject(CANCELLED);
    }
    return new Promise<T>((resolve, reject) => {
      const cancel = () => {
        this.cancelHooks.delete(cancel);
        work.catch(() => undefined);
        reject(CANCELLED);
      };
      this.cancelHooks.add(cancel);
      work.then(
        (value) => (this.cancelHooks.delete(cancel), resolve(value)),
        (error: unknown) => (this.cancelHooks.delete(cancel), reject(error)),
      );
    });
  }
}

const CANCELLED = Symbol('cancelled');

/** How long a giving-up acquire waits for its node's delete before rejecting (it goes on after). */
const CLEANUP_WAIT_MS = 2_000;

async function settleWithin(clock: Clock, work: Promise<unknown>, ms: number): Promise<void> {
  let timer: ClockTimer | undefined;
  await Promise.race([work.catch(() => undefined), new Promise<void>((resolve) => (timer = clock.setTimeout(resolve, ms)))]);
  clock.clearTimeout(timer);
}

/** What our node's data adds for this acquire: its trace context, the locks its chain holds (none: undefined, the shared buffer). */
function nodeExtra(trace: HolderExtra | undefined, holds: readonly string[]): HolderExtra | undefined {
  if (holds.length === 0) return trace;
  return { ...trace, holds: [...holds] };
}
