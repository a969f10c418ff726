import { randomBytes, randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { Inject, Injectable, Optional, type OnApplicationShutdown } from '@nestjs/common';
import { optionalPositiveInteger, positiveInteger } from '../core/connection-options.js';
import { publish } from '../core/diagnostics.js';
import {
  ConnectionClosedError,
  InvalidOptionError,
  LockLostError,
  LockNotAcquiredError,
  LockUsageError,
  type LockLostReason,
  type NotAcquiredReason,
} from '../core/errors.js';
import type { ContenderInfo, ContenderMode, InspectLockOptions, InspectLocksOptions, LockInfo } from '../core/inspect.js';
import type { Lease } from '../core/lease.js';
import { LockContext } from '../core/lock-context.js';
import type { LockEngine } from '../core/lock-engine.js';
import type { ConnectionState, ZkConnection } from '../core/zk-connection.js';
import { validateEngineOptions } from '../core/lock-engine.js';
import type { AcquireOptions } from '../core/acquire-options.js';
import { notAcquiredError } from '../core/cancellation.js';
import { LockRecipe } from '../core/lock-recipe.js';
import { LeaseGroup, releaseAll } from '../core/multi-lease.js';
import type { Mutex, MutexOptions } from '../core/mutex.js';
import type { ReadWriteLock, ReadWriteLockOptions } from '../core/read-write-lock.js';
import type { Semaphore, SemaphoreAcquireOptions, SemaphoreOptions } from '../core/semaphore.js';
import { LockService } from '../nest/lock.service.js';

/** Injection token of the fake's options (`ZkLockTestingModule.forRoot(options)`). */
export const FAKE_LOCK_OPTIONS = Symbol.for('nestjs-zk-lock:fake-lock-options');

/** @publicApi */
export interface FakeLockServiceOptions {
  /** Parent of lock names, as for `ZkLockModule`. Default `/locks`. */
  basePath?: string;
  /** Written into the fake holder data (`inspect()`). */
  app?: string;
  instance?: string;
  /**
   * Where locks live. Give several fakes the same store to play several instances of an
   * application contending for the same locks (each fake is one "process"). Default: its own.
   */
  store?: FakeLockStore;
}

type QueueMode = 'lock' | 'read' | 'write';

/** One node of a mutex / read-write queue. */
interface Entry {
  readonly owner: FakeLockService;
  readonly mode: QueueMode;
  readonly seq: number;
  readonly node: string;
  readonly path: string;
  readonly fencingToken: bigint;
  readonly createdAt: Date;
  /** A downgraded reader: the write entry of its own call chain (it shares the writer's sequence). */
  readonly ownWriter?: Entry;
  held: boolean;
  onGrant?: () => void;
}

/** A queue of nodes under one lock path; it disappears when empty, like a reaped container. */
class Queue {
  readonly entries: Entry[] = [];
  private nextSeq = 0;

  constructor(
    readonly path: string,
    readonly generation: number,
  ) {}

  newSeq(): number {
    return this.nextSeq++;
  }

  add(entry: Entry): void {
    if (entry.ownWriter) {
      // Level with its writer: after it and any other reader of the same sequence.
      let at = this.entries.indexOf(entry.ownWriter) + 1;
      while (at < this.entries.length && this.entries[at]!.seq === entry.seq) at++;
      this.entries.splice(at, 0, entry);
    } else {
      this.entries.push(entry);
    }
  }

  /** Grants every waiting entry that now holds, in queue order. */
  evaluate(): void {
    this.entries.forEach((entry, index) => {
      if (entry.held || !this.holds(entry, index)) return;
      entry.held = true;
      entry.onGrant?.();
    });
  }

  private holds(entry: Entry, index: number): boolean {
    const ahead = this.entries.slice(0, index);
    if (entry.mode === 'read') return ahead.every((e) => e.mode !== 'write' || e === entry.ownWriter);
    return ahead.every((e) => e.ownWriter === entry);
  }
}

interface LeaseEntry {
  readonly owner: FakeLockService;
  readonly seq: number;
  readonly node: string;
  readonly path: string;
  readonly fencingToken: bigint;
  readonly createdAt: Date;
}

interface LeaseRequest {
  readonly owner: FakeLockService;
  readonly permits: number;
  readonly createdAt: Date;
  onGrant?: () => void;
  granted?: LeaseEntry;
}

/** A semaphore: leases in use, and acquirers served one at a time in arrival order (as its internal lock does). */
class SemaphoreState {
  readonly leases: LeaseEntry[] = [];
  readonly pending: LeaseRequest[] = [];
  private nextSeq = 0;

  constructor(
    readonly path: string,
    readonly generation: number,
  ) {}

  evaluate(): void {
    for (;;) {
      const head = this.pending[0];
      if (!head || this.leases.length >= head.permits) return;
      this.pending.shift();
      const seq = this.nextSeq++;
      const node = `_c_${randomUUID()}-lease-${pad(seq)}`;
      const lease: LeaseEntry = {
        owner: head.owner,
        seq,
        node,
        path: `${this.path}/leases/${node}`,
        fencingToken: token(this.generation, seq),
        createdAt: new Date(),
      };
      this.leases.push(lease);
      head.granted = lease;
      head.onGrant?.();
    }
  }
}

/**
 * The in-memory "ZooKeeper" behind one or more FakeLockServices. Lock paths appear on first use
 * and vanish when empty; each appearance gets a higher generation, so fencing tokens keep growing
 * (as the real ones do through the parent's czxid).
 * @publicApi
 */
export class FakeLockStore {
  /** @internal */
  readonly queues = new Map<string, Queue>();
  /** @internal */
  readonly semaphores = new Map<string, SemaphoreState>();
  private generation = 0;

  /** @internal */
  queue(path: string): Queue {
    let queue = this.queues.get(path);
    if (!queue) this.queues.set(path, (queue = new Queue(path, ++this.generation)));
    return queue;
  }

  /** @internal */
  semaphore(path: string): SemaphoreState {
    let state = this.semaphores.get(path);
    if (!state) this.semaphores.set(path, (state = new SemaphoreState(path, ++this.generation)));
    return state;
  }

  /** @internal */
  removeEntry(queue: Queue, entry: Entry): void {
    const at = queue.entries.indexOf(entry);
    if (at >= 0) queue.entries.splice(at, 1);
    if (queue.entries.length === 0 && this.queues.get(queue.path) === queue) this.queues.delete(queue.path);
    else queue.evaluate();
  }

  /** @internal */
  removeLease(state: SemaphoreState, lease: LeaseEntry): void {
    const at = state.leases.indexOf(lease);
    if (at >= 0) state.leases.splice(at, 1);
    this.settleSemaphore(state);
  }

  /** @internal */
  removeRequest(state: SemaphoreState, request: LeaseRequest): void {
    const at = state.pending.indexOf(request);
    if (at >= 0) state.pending.splice(at, 1);
    this.settleSemaphore(state);
  }

  private settleSemaphore(state: SemaphoreState): void {
    if (state.leases.length === 0 && state.pending.length === 0 && this.semaphores.get(state.path) === state) this.semaphores.delete(state.path);
    else state.evaluate();
  }

  /** True when some holder (of any fake on this store) holds the lock at `path`. */
  isLocked(path: string): boolean {
    return (this.queues.get(path)?.entries.some((e) => e.held) ?? false) || (this.semaphores.get(path)?.leases.length ?? 0) > 0;
  }
}

let fakes = 0;

/**
 * An in-memory `LockService` for unit tests of code that uses `LockService` or `@WithLock`: no
 * ZooKeeper, same API and semantics within one process (reentrant mutexes inside `withLock`,
 * FIFO waiting, `waitMs` / try-once / `AbortSignal` with `LockNotAcquiredError` reasons,
 * semaphores, read-write locks with downgrade and a refused upgrade, multi-locks, increasing
 * fencing tokens, `leaseMs`, leases whose `signal` aborts when lost), with the library's own
 * errors and `LockContext`. It extends `LockService`, so `@WithLock` accepts it.
 *
 * ```ts
 * const moduleRef = await Test.createTestingModule({ imports: [ZkLockTestingModule.forRoot(), SalesModule] }).compile();
 * // or, when the module under test imports ZkLockModule itself:
 * Test.createTestingModule({ imports: [AppModule] }).overrideModule(zkLockImport).useModule(ZkLockTestingModule.forRoot())
 * ```
 *
 * Test helpers: `expireSession()` (every lease of this fake is lost, its signal aborts),
 * `isLocked(name)`, and `onApplicationShutdown()` (what `app.close()` does to the real one).
 * `connection` is not available (there is none); `state` is `'connected'` until shutdown.
 * @publicApi
 */
@Injectable()
export class FakeLockService extends LockService implements OnApplicationShutdown {
  readonly store: FakeLockStore;
  /** The fake session id written on every lease (hex, like ZooKeeper's). */
  readonly sessionId: string;
  /** @internal */
  readonly fakeEngine: FakeEngine;
  private readonly identity: { app?: string; instance?: string };
  private closed = false;
  /** @internal Leases and waiters of this fake (for shutdown and expireSession). */
  readonly live = new Set<LiveItem>();

  constructor(@Optional() @Inject(FAKE_LOCK_OPTIONS) options?: FakeLockServiceOptions) {
    const opts = options ?? {};
    const engine: FakeEngine = { id: -++fakes, basePath: validateEngineOptions(opts) };
    super(engine as unknown as LockEngine, undefined as unknown as ZkConnection);
    this.fakeEngine = engine;
    this.store = opts.store ?? new FakeLockStore();
    this.identity = { app: opts.app, instance: opts.instance };
    this.sessionId = `f${randomBytes(7).toString('hex')}`;
  }

  override mutex(name: string, options: MutexOptions = {}): Mutex {
    return new FakeMutex(this, name, this.pathOf(name), options) as unknown as Mutex;
  }

  override semaphore(name: string, options: SemaphoreOptions): Semaphore {
    return new FakeSemaphore(this, name, this.pathOf(name), options) as unknown as Semaphore;
  }

  override readWriteLock(name: string, options: ReadWriteLockOptions = {}): ReadWriteLock {
    return new FakeReadWriteLock(this, name, this.pathOf(name), options) as unknown as ReadWriteLock;
  }

  override get state(): ConnectionState {
    return this.closed ? 'closed' : 'connected';
  }

  /** True when the lock `name` is held by anyone on this fake's store. */
  isLocked(name: string): boolean {
    return this.store.isLocked(this.pathOf(name));
  }

  /**
   * Plays a lost session: every lease this fake holds is lost (`signal` aborts with a
   * `LockLostError` of `reason`) and its lock is freed for the next waiter. Waiters keep waiting.
   */
  expireSession(reason: LockLostReason = 'session-expired'): void {
    for (const item of [...this.live]) item.lose?.(reason);
  }

  /**
   * What `app.close()` does to the real service once its grace time has passed: refuses new
   * acquires, gives up waits, and ends held leases — their signals abort (reason `shutdown`)
   * before their locks are freed.
   */
  async onApplicationShutdown(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.releaseHeldForMinimum();
    const items = [...this.live];
    for (const item of items) item.cancel?.('connection', new ConnectionClosedError('the lock module is shutting down'));
    for (const item of items) item.lose?.('shutdown');
  }

  /** The in-memory state, in the shape of `LockService.inspect` (holder data of the fakes). */
  override inspect(options?: InspectLocksOptions): Promise<LockInfo[]>;
  override inspect(name: string, options?: InspectLockOptions): Promise<LockInfo | null>;
  override async inspect(name?: string | InspectLocksOptions, options: InspectLockOptions = {}): Promise<LockInfo[] | LockInfo | null> {
    const now = Date.now();
    if (typeof name === 'string') {
      const path = this.pathOf(name);
      return this.describe(path, now, options.permits);
    }
    const base = this.fakeEngine.basePath;
    const under = (path: string) => base === '/' || path === base || path.startsWith(`${base}/`);
    const paths = [...new Set([...this.store.queues.keys(), ...this.store.semaphores.keys()])].filter(under).sort();
    return paths.map((path) => this.describe(path, now)).filter((info): info is LockInfo => info !== null && info.kind !== 'idle');
  }

  private describe(path: string, now: number, permits?: number): LockInfo | null {
    const state = this.store.semaphores.get(path);
    if (state) {
      type Node = { owner: FakeLockService; node: string; path: string; seq?: number; createdAt: Date };
      const contender = ({ owner, node, path: nodePath, seq, createdAt }: Node, holds: boolean, mode: ContenderMode): ContenderInfo => ({
        node,
        path: nodePath,
        mode,
        sequence: seq,
        holds,
        holder: owner.holderData(createdAt),
        sessionId: owner.sessionId,
        createdAt,
        ageMs: Math.max(0, now - createdAt.getTime()),
      });
      // A pending acquirer is shown as its place in the internal lock's queue.
      const pending = state.pending.map((r, i): Node => ({ ...r, node: `pending-${i}`, path: `${path}/locks/pending-${i}` }));
      return {
        path,
        kind: 'semaphore',
        holders: state.leases.map((l) => contender(l, true, 'lease')),
        waiting: pending.map((p) => contender(p, false, 'lock')),
        leases: state.leases.length,
        ...(permits === undefined ? {} : { permits }),
      };
    }
    const queue = this.store.queues.get(path);
    if (!queue) return null;
    const all = queue.entries.map(
      (e): ContenderInfo => ({
        node: e.node,
        path: e.path,
        mode: e.mode,
        sequence: e.seq,
        holds: e.held,
        holder: e.owner.holderData(e.createdAt),
        sessionId: e.owner.sessionId,
        createdAt: e.createdAt,
        ageMs: Math.max(0, now - e.createdAt.getTime()),
      }),
    );
    const kind = queue.entries.some((e) => e.mode !== 'lock') ? 'read-write' : 'mutex';
    return { path, kind, holders: all.filter((c) => c.holds), waiting: all.filter((c) => !c.holds) };
  }

  /** @internal */
  holderData(createdAt: Date) {
    return { host: hostname(), pid: process.pid, ...definedOnly(this.identity), createdAt: createdAt.toISOString() };
  }

  /** @internal Throws when shut down (as the real module refuses acquires then). */
  assertOpen(lockName: string): void {
    if (this.closed) {
      throw new LockNotAcquiredError(lockName, 'connection', `Lock ${JSON.stringify(lockName)} was not acquired: the connection was closed`, {
        cause: new ConnectionClosedError('the lock module is shutting down'),
      });
    }
  }
}

/** A lease (lost on expireSession, released on shutdown) or a waiter (cancelled on shutdown). */
interface LiveItem {
  lose?(reason: LockLostReason): void;
  cancel?(reason: NotAcquiredReason, cause: unknown): void;
  release?(): Promise<void>;
}

/** What recipes need of an engine: its id (re-entrancy keys) and base path. */
interface FakeEngine {
  readonly id: number;
  readonly basePath: string;
}

function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

function pad(seq: number): string {
  return String(seq).padStart(10, '0');
}

function token(generation: number, seq: number): bigint {
  return (BigInt(generation) << 32n) | BigInt(seq);
}

/**
 * Waits until `isGranted()` (woken through `setWake`), for at most `waitMs` (0: not at all),
 * until `signal` aborts or the fake shuts down; on giving up calls `withdraw` and rejects.
 */
function waitTurn(
  service: FakeLockService,
  lockName: string,
  path: string,
  options: AcquireOptions,
  isGranted: () => boolean,
  setWake: (wake: (() => void) | undefined) => void,
  withdraw: () => void,
): Promise<void> {
  if (isGranted()) return Promise.resolve();
  const tryOnce = options.waitMs === 0;
  if (tryOnce) {
    withdraw();
    return Promise.reject(notAcquiredError(lockName, 'timeout', true));
  }
  publish('contended', () => ({ name: lockName, path }));
  return new Promise<void>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const waiter = {
      cancel: (reason: NotAcquiredReason, cause?: unknown) => {
        finish();
        withdraw();
        reject(notAcquiredError(lockName, reason, false, cause));
      },
    };
    const onAbort = () => waiter.cancel('aborted', options.signal?.reason);
    const finish = () => {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      service.live.delete(waiter);
      setWake(undefined);
    };
    setWake(() => {
      finish();
      resolve();
    });
    service.live.add(waiter);
    options.signal?.addEventListener('abort', onAbort, { once: true });
    if (options.waitMs !== undefined) timer = setTimeout(() => waiter.cancel('timeout'), options.waitMs);
  });
}

/** A held node of the fake: released once, lost once; its signal aborts when lost. */
class FakeLease implements Lease {
  private readonly controller = new AbortController();
  private readonly heldSince = performance.now();
  private ended = false;
  private readonly timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly service: FakeLockService,
    readonly name: string,
    readonly path: string,
    readonly fencingToken: bigint,
    leaseMs: number | undefined,
    private readonly onEnd: () => void,
  ) {
    service.live.add(this);
    if (leaseMs !== undefined) this.timer = setTimeout(() => this.lose('lease-expired'), leaseMs);
  }

  get sessionId(): string {
    return this.service.sessionId;
  }
  get signal(): AbortSignal {
    return this.controller.signal;
  }
  get isHeld(): boolean {
    return !this.ended;
  }

  release(): Promise<void> {
    if (this.ended) return Promise.resolve();
    this.end();
    publish('released', () => ({ name: this.name, path: this.path, heldMs: performance.now() - this.heldSince }));
    this.onEnd();
    return Promise.resolve();
  }

  lose(reason: LockLostReason): void {
    if (this.ended) return;
    this.end();
    publish('lost', () => ({ name: this.name, path: this.path, reason, heldMs: performance.now() - this.heldSince }));
    this.controller.abort(new LockLostError(this.name, reason));
    this.onEnd();
  }

  private end(): void {
    this.ended = true;
    clearTimeout(this.timer);
    this.service.live.delete(this);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/** The shared part: a recipe over one queue of the store. */
abstract class FakeQueueRecipe extends LockRecipe {
  constructor(
    protected readonly service: FakeLockService,
    name: string,
    path: string,
    reentrant: boolean,
    protected readonly leaseMs: number | undefined,
  ) {
    super(service.fakeEngine as unknown as LockEngine, name, path, reentrant);
  }

  protected async enqueue(mode: QueueMode, options: AcquireOptions, ownWriter?: Entry): Promise<Lease> {
    this.service.assertOpen(this.name);
    const signal = options.signal;
    if (signal?.aborted) throw notAcquiredError(this.name, 'aborted', false, signal.reason);
    const store = this.service.store;
    const queue = store.queue(this.path);
    const seq = ownWriter ? ownWriter.seq : queue.newSeq();
    const node = `_c_${randomUUID()}-${mode === 'lock' ? 'lock-' : mode === 'read' ? '__READ__' : '__WRIT__'}${pad(seq)}`;
    const entry: Entry = {
      owner: this.service,
      mode,
      seq,
      node,
      path: `${this.path}/${node}`,
      fencingToken: token(queue.generation, seq),
      createdAt: new Date(),
      ownWriter,
      held: false,
    };
    queue.add(entry);
    queue.evaluate();
    await waitTurn(
      this.service,
      this.name,
      this.path,
      options,
      () => entry.held,
      (wake) => (entry.onGrant = wake),
      () => store.removeEntry(queue, entry),
    );
    return new FakeLease(this.service, this.name, entry.path, entry.fencingToken, this.leaseMs, () => store.removeEntry(queue, entry));
  }

  /** The queue entry of a lease this fake granted on this path. */
  protected entryOf(lease: Lease | undefined): Entry | undefined {
    if (!lease?.isHeld) return undefined;
    return this.service.store.queues.get(this.path)?.entries.find((e) => e.path === lease.path);
  }
}

class FakeMutex extends FakeQueueRecipe {
  readonly kind = 'mutex';

  constructor(service: FakeLockService, name: string, path: string, options: MutexOptions) {
    super(service, name, path, options?.reentrant ?? true, optionalPositiveInteger(options?.leaseMs, 'leaseMs'));
  }

  protected acquireNew(options: AcquireOptions): Promise<Lease> {
    // Fair or not, one process sees FIFO order (a valid outcome of the non-fair race too).
    return this.enqueue('lock', options);
  }
}

class FakeWriteLock extends FakeQueueRecipe {
  readonly kind = 'write';

  /** The node of the write lock this call chain holds, if any (for a downgrade). */
  heldNodeName(): string | undefined {
    const held = LockContext.heldByChain(this.contextKey);
    return held?.isHeld ? held.path.slice(held.path.lastIndexOf('/') + 1) : undefined;
  }

  protected acquireNew(options: AcquireOptions): Promise<Lease> {
    if (LockContext.heldByChain(this.keyFor('read'))?.isHeld) {
      throw new LockUsageError(
        `Lock ${JSON.stringify(this.name)}: this call chain holds the read lock and asked for the write lock; ` +
          'upgrading would deadlock (release the read lock first)',
      );
    }
    return this.enqueue('write', options);
  }
}

class FakeReadLock extends FakeQueueRecipe {
  readonly kind = 'read';

  protected acquireNew(options: AcquireOptions): Promise<Lease> {
    // Downgrade: the write lock held by this call chain lets its reader in level with it.
    const ownWriter = this.entryOf(LockContext.heldByChain(this.keyFor('write')));
    return this.enqueue('read', options, ownWriter?.mode === 'write' ? ownWriter : undefined);
  }
}

class FakeReadWriteLock {
  readonly read: FakeReadLock;
  readonly write: FakeWriteLock;

  constructor(service: FakeLockService, name: string, path: string, options: ReadWriteLockOptions) {
    const leaseMs = optionalPositiveInteger(options?.leaseMs, 'leaseMs');
    this.write = new FakeWriteLock(service, name, path, true, leaseMs);
    this.read = new FakeReadLock(service, name, path, true, leaseMs);
  }
}

class FakeSemaphore extends LockRecipe {
  readonly kind = 'semaphore';
  readonly permits: number;
  private readonly leaseMs: number | undefined;

  constructor(
    private readonly service: FakeLockService,
    name: string,
    path: string,
    options: SemaphoreOptions,
  ) {
    super(service.fakeEngine as unknown as LockEngine, name, path, false);
    if (options === null || typeof options !== 'object') throw new InvalidOptionError('permits', 'expected { permits: number }');
    if (options.permits === undefined) throw new InvalidOptionError('permits', 'is required');
    this.permits = positiveInteger(options.permits, 'permits', 1);
    this.leaseMs = optionalPositiveInteger(options.leaseMs, 'leaseMs');
  }

  override acquire(options: SemaphoreAcquireOptions = {}): Promise<Lease> {
    return super.acquire(options);
  }

  protected async acquireNew(options: SemaphoreAcquireOptions): Promise<Lease> {
    const count = positiveInteger(options.permits, 'permits', 1, 1, this.permits);
    const deadline = options.waitMs === undefined ? undefined : Date.now() + options.waitMs;
    const leases: Lease[] = [];
    try {
      for (let i = 0; i < count; i++) leases.push(await this.acquireOne(deadline, options));
    } catch (error) {
      await releaseAll(leases).catch(() => undefined);
      throw error;
    }
    return new LeaseGroup(this.name, leases);
  }

  private async acquireOne(deadline: number | undefined, options: AcquireOptions): Promise<Lease> {
    this.service.assertOpen(this.name);
    if (options.signal?.aborted) throw notAcquiredError(this.name, 'aborted', false, options.signal.reason);
    const store = this.service.store;
    const state = store.semaphore(this.path);
    const request: LeaseRequest = { owner: this.service, permits: this.permits, createdAt: new Date() };
    state.pending.push(request);
    state.evaluate();
    await waitTurn(
      this.service,
      this.name,
      `${this.path}/leases`,
      // Try-once stays try-once; otherwise the time left (at least a try), as the real semaphore.
      { waitMs: options.waitMs === 0 ? 0 : deadline === undefined ? undefined : Math.max(0, deadline - Date.now()), signal: options.signal },
      () => request.granted !== undefined,
      (wake) => (request.onGrant = wake),
      () => store.removeRequest(state, request),
    );
    const lease = request.granted!;
    return new FakeLease(this.service, this.name, lease.path, lease.fencingToken, this.leaseMs, () => store.removeLease(state, lease));
  }
}
