import { ConnectionClosedError, InvalidOptionError } from './errors.js';
import { describe, positiveInteger } from './validation.js';
import { holderDataWriter, type HolderExtra, type HolderIdentity } from './operations/holder-data.js';
import { HANDOFF_BITS, validateZkPath } from './paths.js';
import { ZkOperations } from './operations/zk-operations.js';
import type { HoldingWait } from './queue/lock-queue.js';
import type { ZkConnection, SessionLostReason } from './connection/zk-connection.js';
import { addonFixVersion, requiredAddonFixVersion } from './client/addon-session.js';
import { ZkPerm, type ZkAcl, type ZkSession } from './client/session.js';

export interface LockEngineOptions extends HolderIdentity {
  /** Parent of lock names that do not start with "/". Default `/locks`. */
  basePath?: string;
  /**
   * ACL of every node the library creates: lock paths, their missing ancestors, and the lock nodes
   * themselves. ZooKeeper checks create/delete permission on the parent and write permission on the
   * node, so with e.g. `SECURE_PARENT_ACL` only clients with the same credentials can take or break
   * these locks, rewrite a holder's data or ask it to let go (revoke). With an ACL, `basePath` and
   * its missing ancestors are made PERSISTENT, not as containers: ZooKeeper never deletes them when
   * empty, so no client with other credentials can make them again under its own ACL. Default: open.
   */
  parentAcl?: readonly ZkAcl[];
  /**
   * Empty lock paths this process made that it keeps for reuse (a key's path made again costs a
   * create); beyond it the least recently used go at once, and any goes after 60 s unused.
   * Default 10 000.
   */
  maxIdleLockPaths?: number;
  /** How long `@WithLock` waits when the decorator names no `waitMs` (e.g. from config). Default 0. */
  defaultWaitMs?: number;
  /**
   * Default of every mutex's `coalesce`: callers in this process queue for a mutex behind one
   * ZooKeeper node and may hand it over in memory. Default true. See `MutexOptions`.
   */
  coalesce?: boolean;
  /** Default of every mutex's `maxLocalHandoffs`. Default 16. See `MutexOptions`. */
  maxLocalHandoffs?: number;
  /**
   * On shutdown, how long holders may go on before their signals abort (reason `shutdown`) and
   * their nodes are deleted. New acquires are refused meanwhile. Default 10 000 ms.
   */
  shutdownGraceMs?: number;
  /**
   * What a wait does that is one of a cycle of waits across processes (a call chain holding a lock
   * and waiting for another, see docs/deadlocks.md). `'fail'` (default): the wait that began last
   * fails at once with a `DeadlockError`, the others go on waiting. `'report'`: nobody fails; the
   * health indicator and `inspect()` report the cycle until `waitMs` ends it. `'off'`: nested
   * acquires write no `holds` and read nothing (a nested mutex acquire then coalesces as any other).
   */
  deadlockDetection?: DeadlockDetection;
}

export type DeadlockDetection = 'fail' | 'report' | 'off';

/** Upper bound of `maxLocalHandoffs`: the handoffs of one node must fit a fencing token's low bits. */
export const MAX_LOCAL_HANDOFFS = 2 ** HANDOFF_BITS - 1;

const DEFAULT_SHUTDOWN_GRACE_MS = 10_000;
const SHUTTING_DOWN = () => new ConnectionClosedError('the lock module is shutting down');

/** Everyone may read (inspect); only the creating identity (the `auth` credentials) may change. */
export const SECURE_PARENT_ACL: readonly ZkAcl[] = [
  { perms: ZkPerm.READ, scheme: 'world', id: 'anyone' },
  { perms: ZkPerm.ALL, scheme: 'auth', id: '' },
];

/** Validates the engine's options; returns the base path. */
export function validateEngineOptions(options: LockEngineOptions): string {
  const basePath = options.basePath ?? '/locks';
  const problem = typeof basePath === 'string' ? validateZkPath(basePath) : 'must be a string';
  if (problem) throw new InvalidOptionError('basePath', `${JSON.stringify(basePath)} ${problem}`);
  if (options.parentAcl !== undefined) {
    const ok =
      Array.isArray(options.parentAcl) &&
      options.parentAcl.every(
        (a) => a && Number.isInteger(a.perms) && a.perms >= 0 && a.perms <= 31 && typeof a.scheme === 'string' && typeof a.id === 'string',
      );
    if (!ok) throw new InvalidOptionError('parentAcl', 'expected a list of { perms: 0..31, scheme: string, id: string }');
  }
  if (options.defaultWaitMs !== undefined) positiveInteger(options.defaultWaitMs, 'defaultWaitMs', 0, 0);
  if (options.maxIdleLockPaths !== undefined) positiveInteger(options.maxIdleLockPaths, 'maxIdleLockPaths', 0, 0, 1_000_000);
  if (options.coalesce !== undefined && typeof options.coalesce !== 'boolean') throw new InvalidOptionError('coalesce', 'expected true or false');
  if (options.maxLocalHandoffs !== undefined) positiveInteger(options.maxLocalHandoffs, 'maxLocalHandoffs', 0, 0, MAX_LOCAL_HANDOFFS);
  if (options.shutdownGraceMs !== undefined) positiveInteger(options.shutdownGraceMs, 'shutdownGraceMs', 0, 0);
  const detection = options.deadlockDetection;
  if (detection !== undefined && detection !== 'fail' && detection !== 'report' && detection !== 'off') {
    throw new InvalidOptionError('deadlockDetection', `expected 'fail', 'report' or 'off', got ${describe(detection)}`);
  }
  for (const key of ['app', 'instance'] as const) {
    if (options[key] !== undefined && typeof options[key] !== 'string') throw new InvalidOptionError(key, 'expected a string');
  }
  return basePath;
}

/** A held lease: told when its session is gone, and ended when the engine shuts down. */
export interface SessionBound {
  readonly session: ZkSession;
  onSessionGone(reason: SessionLostReason | 'connection-closed'): void;
  /** Ends the lease as lost (its signal aborts), then gives its node up; never rejects. */
  loseAndFree(reason: 'shutdown'): Promise<void>;
}

let engines = 0;

/** One warning per process about an unpatched addon. */
let addonWarned = false;

/**
 * Shared machinery under every recipe on one connection: the ZooKeeper operations (`ops`), the
 * registry of live leases (told when their session goes), in-process queues, background clean-ups
 * (awaited on close) and shutdown.
 * @publicApi
 */
export class LockEngine {
  readonly basePath: string;
  /** @internal Distinguishes engines (connections) in one process: re-entrancy never crosses them. */
  readonly id = ++engines;
  /** @internal How the recipes ask ZooKeeper: protected creates, guaranteed deletes, container parents. */
  readonly ops: ZkOperations;
  private readonly bound = new Set<SessionBound>();
  private readonly cleanups = new Set<Promise<unknown>>();

  constructor(
    readonly connection: ZkConnection,
    private readonly identity: LockEngineOptions = {},
  ) {
    this.basePath = validateEngineOptions(identity);
    this.ops = new ZkOperations(connection, { acl: identity.parentAcl, basePath: this.basePath, maxIdleLockPaths: identity.maxIdleLockPaths });
    this.nodeData = holderDataWriter({ app: identity.app, instance: identity.instance });
    // After the caller's synchronous setup, so that its onWarning listener hears it.
    queueMicrotask(() => this.warnIfAddonUnfixed());
    // A connection may outlive its engines (ZkLockModule.forRoot({ connection })): shutdown detaches.
    this.detach = connection.listen({
      lost: (reason) => this.sessionGone(reason),
      state: (state) => {
        if (state === 'connected') return;
        const listeners = [...this.disconnectListeners];
        this.disconnectListeners.clear();
        for (const listener of listeners) listener();
      },
      closed: () => {
        this.emitStop(new ConnectionClosedError());
        this.sessionGone('connection-closed');
      },
    });
  }
  private readonly detach: () => void;

  private readonly warningListeners = new Set<(message: string) => void>();
  /** Listens for problems worth an operator's attention that are not errors of the caller. */
  onWarning(listener: (message: string) => void): () => void {
    this.warningListeners.add(listener);
    return () => this.warningListeners.delete(listener);
  }
  /** @internal Reports a warning to the onWarning listeners (or as a process warning without any). */
  warn(message: string): void {
    if (this.warningListeners.size === 0) process.emitWarning(message, 'ZkLockWarning');
    for (const listener of this.warningListeners) listener(message);
  }

  private warnIfAddonUnfixed(): void {
    if (addonWarned || !this.connection.usesAddon) return;
    let version: number;
    try {
      version = addonFixVersion();
    } catch {
      return; // no addon at all: opening the session says so
    }
    const required = requiredAddonFixVersion();
    if (version >= required) return;
    addonWarned = true;
    this.warn(
      `the zookeeper addon lacks nestjs-zk-lock's fix (version ${version} of ${required}; the patch did not run or failed): ` +
        'a ZooKeeper connection timeout can hang or abort this process, and with `auth` each lock node is open for a moment after its create. Run ' +
        '`node node_modules/nestjs-zk-lock/scripts/patch-zookeeper-addon.cjs`.',
    );
  }

  /** @internal What a wait in a cycle of waits does (`deadlockDetection`). */
  get deadlockDetection(): DeadlockDetection {
    return this.identity.deadlockDetection ?? 'fail';
  }

  /** @internal The waits of this engine whose call chains hold other locks, while they wait (for the health indicator). */
  readonly holdingWaits = new Set<HoldingWait>();

  /** @internal `defaultWaitMs`, for LockService. */
  get defaultWaitMs(): number {
    return this.identity.defaultWaitMs ?? 0;
  }

  /** @internal The engine-wide defaults of the mutex options `coalesce` and `maxLocalHandoffs`. */
  get coalescing(): { coalesce: boolean; maxLocalHandoffs: number } {
    return { coalesce: this.identity.coalesce ?? true, maxLocalHandoffs: this.identity.maxLocalHandoffs ?? 16 };
  }

  private readonly localQueues = new Map<string, unknown>();
  /**
   * @internal The in-process queue registered under `key`, made by `make` if there is none. `make` gets a
   * callback that unregisters the queue once it is idle, so the map holds only busy locks.
   */
  localQueue<T>(key: string, make: (unregister: () => void) => T): T {
    let queue = this.localQueues.get(key) as T | undefined;
    if (!queue) {
      const made = make(() => {
        if (this.localQueues.get(key) === made) this.localQueues.delete(key);
      });
      queue = made;
      this.localQueues.set(key, made);
    }
    return queue;
  }

  /** @internal Locks with an in-process queue right now (for tests of clean-up). */
  get localQueueCount(): number {
    return this.localQueues.size;
  }

  /** Fresh holder data for a new node (created-at changes per node), with an acquire's extra fields. */
  readonly nodeData: (extra?: HolderExtra) => Buffer;

  /** @internal Holds `item` until the returned function is called (shutdown ends what is still held). */
  track(item: SessionBound): () => void {
    this.bound.add(item);
    return () => {
      this.bound.delete(item);
      if (this.bound.size === 0) this.onNoneHeld?.();
    };
  }
  /** Set while shutdown waits for holders to finish. */
  private onNoneHeld: (() => void) | undefined;

  /** @internal Runs a clean-up in the background and remembers it until it settles. */
  background(work: Promise<unknown>): void {
    // One reaction, never rejecting (not catch + finally: a promise less on every release).
    const forget = () => void this.cleanups.delete(tracked);
    const tracked: Promise<unknown> = work.then(forget, forget);
    this.cleanups.add(tracked);
  }

  /** Waits for background clean-ups (deletes of abandoned nodes) to finish. */
  async drain(): Promise<void> {
    while (this.cleanups.size > 0) await Promise.all([...this.cleanups]);
  }

  /** Leases and elections held through this engine now. */
  get liveCount(): number {
    return this.bound.size;
  }

  /** @internal True once shutdown began: new acquires are refused. */
  get isShuttingDown(): boolean {
    return this.shuttingDown;
  }
  private shuttingDown = false;

  private shutdownDone: Promise<void> | undefined;
  /**
   * Refuses new acquires (waiting ones give up), gives holders `shutdownGraceMs` to release, then
   * aborts the signal of every lease still held — before its node is deleted, so no holder runs
   * on while another process takes the lock — deletes those nodes and waits for clean-ups. The
   * connection stays open: its owner closes it afterwards. Idempotent.
   */
  shutdown(): Promise<void> {
    this.shutdownDone ??= this.shutDown();
    return this.connection.keepAliveUntilSettled(this.shutdownDone);
  }

  private async shutDown(): Promise<void> {
    this.shuttingDown = true;
    this.emitStop(SHUTTING_DOWN());
    await this.untilNoneHeld(this.identity.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS);
    const held = [...this.bound];
    if (held.length > 0) {
      this.warn(`${held.length} lock(s) still held after shutdownGraceMs; their signals were aborted (reason "shutdown") and the locks released`);
    }
    await Promise.all(held.map((item) => item.loseAndFree('shutdown')));
    await this.drain();
    this.detach();
    this.ops.stop();
  }

  private untilNoneHeld(graceMs: number): Promise<void> {
    if (this.bound.size === 0 || graceMs === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const { clock } = this.connection;
      const done = () => {
        clock.clearTimeout(timer);
        this.onNoneHeld = undefined;
        resolve();
      };
      const timer = clock.setTimeout(done, graceMs);
      this.onNoneHeld = done;
    });
  }

  private readonly stopListeners = new Set<(error: ConnectionClosedError) => void>();
  /**
   * @internal Calls `listener` once when waiting must stop for everyone: the connection closed or shutdown
   * began (waiting acquirers give up). One set for all waiters: cheaper than a listener each.
   */
  onStop(listener: (error: ConnectionClosedError) => void): () => void {
    const stopped = this.connection.state === 'closed' ? new ConnectionClosedError() : this.shuttingDown ? SHUTTING_DOWN() : undefined;
    if (stopped) {
      listener(stopped);
      return () => undefined;
    }
    this.stopListeners.add(listener);
    return () => this.stopListeners.delete(listener);
  }
  private readonly disconnectListeners = new Set<() => void>();
  /**
   * @internal Calls `listener` once when the connection is not connected: at once if it is not now, else
   * when it next leaves 'connected'. One connection listener for all (try-once acquires).
   */
  onDisconnect(listener: () => void): () => void {
    if (this.connection.state !== 'connected') {
      listener();
      return () => undefined;
    }
    this.disconnectListeners.add(listener);
    return () => this.disconnectListeners.delete(listener);
  }

  private emitStop(error: ConnectionClosedError): void {
    const listeners = [...this.stopListeners];
    this.stopListeners.clear();
    for (const listener of listeners) listener(error);
  }

  private sessionGone(reason: SessionLostReason | 'connection-closed'): void {
    for (const item of [...this.bound]) {
      if (reason === 'connection-closed' || item.session !== this.connection.session || item.session.isClosed) {
        this.bound.delete(item);
        item.onSessionGone(reason);
      }
    }
  }
}
