import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ZkCode, ZkError } from './zk-error.js';
import { systemClock, type Clock } from '../clock.js';
import { ClientWatches, DEFAULT_SERVER_TICK_MS, MIN_IN_FLIGHT, nextWindow, RequestClock, reportLagMs, VIA_LEADER, type WatchEventType, type WatchListener } from './session-bookkeeping.js';
import { Fifo } from './fifo.js';
import { ZkLockError } from '../errors.js';
import { MultiOpType, WriteBatcher, type MultiCall, type MultiOp, type QueuedRequest } from './write-batch.js';
import type { CreateMode, SessionEvents, SessionInit, WriteOptions, ZkAcl, ZkSession, ZkSessionFactory, ZkStat } from './session.js';

// `zookeeper` is an optional CommonJS native addon (client: 'addon'), loaded through require (one
// copy of the binding for the ES module and CommonJS builds) and only when such a session is opened.
const requireHere = createRequire(import.meta.url);
let nativeClass: NativeZooKeeperClass | undefined;
function loadAddon(): NativeZooKeeperClass {
  try {
    nativeClass ??= requireHere('zookeeper') as NativeZooKeeperClass;
  } catch (error) {
    throw new ZkLockError(
      `The option client: 'addon' needs the optional "zookeeper" package (the C client), which could not be loaded ` +
        `(${String(error).split('\n')[0]}). Install it and patch it: "npm install zookeeper@7.3.0 && ` +
        'node node_modules/nestjs-zk-lock/scripts/patch-zookeeper-addon.cjs" (python3, make and a C/C++ compiler), ' +
        "or leave out client: 'addon' to use this package's own client (see docs/zookeeper-client.md)",
      { cause: error },
    );
  }
  return nativeClass;
}

/**
 * The version of the fix scripts/patch-zookeeper-addon.cjs builds into the addon (run by hand):
 * without it a connection timeout can make libuv stop polling, or abort on, a socket of someone
 * else's. Its one value is this package's package.json "zookeeperAddonFixVersion", which the script
 * reads too; found above this module (lib/, dist/ and dist/cjs/ sit at different depths), and read
 * only when the addon is used.
 */
let requiredFixVersion: number | undefined;
export function requiredAddonFixVersion(): number {
  for (let dir = dirname(fileURLToPath(import.meta.url)); requiredFixVersion === undefined; ) {
    let pkg: { name?: string; zookeeperAddonFixVersion?: number } | undefined;
    try {
      pkg = requireHere(join(dir, 'package.json')) as typeof pkg;
    } catch {}
    if (pkg?.name === 'nestjs-zk-lock' && typeof pkg.zookeeperAddonFixVersion === 'number') requiredFixVersion = pkg.zookeeperAddonFixVersion;
    else if (dirname(dir) === dir) throw new ZkLockError('nestjs-zk-lock: its package.json (zookeeperAddonFixVersion) was not found above ' + fileURLToPath(import.meta.url));
    else dir = dirname(dir);
  }
  return requiredFixVersion;
}
let loadedFixVersion: number | undefined;
export function addonFixVersion(): number {
  if (loadedFixVersion === undefined) {
    loadAddon();
    const dir = dirname(requireHere.resolve('zookeeper/package.json'));
    const binding = createRequire(join(dir, 'package.json'))('node-gyp-build')(dir) as { ZooKeeper: Record<string, unknown> };
    const version = binding.ZooKeeper.NESTJS_ZK_LOCK_FD_FIX;
    loadedFixVersion = typeof version === 'number' ? version : 0;
  }
  return loadedFixVersion;
}

/** The subset of the `zookeeper` package's class this library uses (callback API). */
interface NativeZooKeeperClass {
  new (config: Record<string, unknown>): NativeZooKeeper;
}
interface NativeZooKeeper extends NativeOps {
  init(config: Record<string, unknown>): NativeZooKeeper;
  /** The addon object itself (the wrapper's methods only add logging around it). */
  readonly native: NativeOps;
  close(): void;
  on(event: string, listener: (...args: any[]) => void): void;
  removeAllListeners(): void;
  readonly client_id: string;
  readonly client_password: string;
  readonly timeout: number;
  readonly state: number;
}
interface NativeOps {
  a_create(path: string, data: Buffer, flags: number, cb: (rc: number, err: string, path: string) => void): number;
  /** Added by our patch of the addon (fix version 6); missing from an unpatched one. */
  a_create_acl?(path: string, data: Buffer, flags: number, acl: NativeAcl[], cb: (rc: number, err: string, path: string) => void): number;
  a_get_children2(path: string, watch: boolean, cb: (rc: number, err: string, children: string[], stat: ZkStat) => void): number;
  a_get(path: string, watch: boolean, cb: (rc: number, err: string, stat: ZkStat, data: Buffer | null) => void): number;
  a_exists(path: string, watch: boolean, cb: (rc: number, err: string, stat: ZkStat) => void): number;
  a_set(path: string, data: Buffer, version: number, cb: (rc: number, err: string, stat: ZkStat) => void): number;
  a_delete_(path: string, version: number, cb: (rc: number, err: string) => void): number;
  a_sync(path: string, cb: (rc: number, err: string) => void): number;
  a_set_acl(path: string, version: number, acl: NativeAcl[], cb: (rc: number, err: string) => void): number;
  a_get_acl(path: string, cb: (rc: number, err: string, acl: { perms: number; scheme: string; auth: string }[], stat: ZkStat) => void): number;
  add_auth(scheme: string, auth: string, cb: (rc: number, err: string) => void): number;
  /** Added by our patch of the addon (fix version 9): ZooKeeper's multi (creates and deletes). */
  a_multi?: MultiCall;
}

interface NativeAcl {
  perm: number;
  scheme: string;
  auth: string;
}

const NATIVE_CONNECTED_STATE = 3;

export const nativeSessionFactory: ZkSessionFactory = (init, events) => new NativeZkSession(init, events);

/** One ZooKeeper session over one native handle of the `zookeeper` addon (the C client). */
export class NativeZkSession implements ZkSession {
  private readonly native: NativeZooKeeper;
  /** Requests go straight to the addon (see NativeOps). */
  private readonly ops: NativeOps;
  private closed = false;
  /**
   * A lower bound (clock time) of when the leader last heard of us (see RequestClock): from
   * answers to writes and syncs only (VIA_LEADER), less the time a follower takes to report us to
   * the leader. The leader expires the session one timeout after it last heard of it, so this, not
   * the last packet received, bounds how long the session can live: watch events, late replies and
   * a cut-off follower's answers to reads arrive without the leader having heard anything. Pings
   * are invisible here; the connection sends syncs to keep it fresh. Before the first answer it is
   * when the handle was made (see the 'connect' handler).
   */
  get lastAnsweredSentAt(): number {
    return this.requests.lastAnsweredSentAt;
  }
  private readonly requests: RequestClock;
  private readonly clock: Clock;

  get deadline(): number {
    return this.requests.deadline(this.timeoutMs);
  }
  /**
   * Watches are set with `watch = true`, i.e. with the handle's default watcher, whose node events
   * the binding emits as 'created' / 'deleted' / 'changed' / 'child' with the path. (The aw_*
   * methods allocate a persistent handle per call that is never freed, and through the function
   * they pin this session and its listeners for good.) The listeners are kept here, by kind and
   * path, and dropped once fired, once the reply shows no watch was set, or on `unwatch`.
   */
  private readonly watches = new ClientWatches();

  constructor(init: SessionInit, events: SessionEvents) {
    const tickMs = init.serverTickTimeMs ?? DEFAULT_SERVER_TICK_MS;
    this.clock = init.clock ?? systemClock;
    this.requests = new RequestClock(() => reportLagMs(tickMs, this.timeoutMs), this.clock);
    const config: Record<string, unknown> = {
      connect: init.connectString,
      timeout: init.sessionTimeoutMs,
      debug_level: 0, // ZOO_LOG_LEVEL_ERROR would print to stderr on every reconnect; we report states ourselves
      host_order_deterministic: false,
      // The binding closes the handle as "expired" after this many empty polls in a row; the
      // default (10) trips on a busy event loop, so keep it out of the way.
      response_counter_limit: 1_000_000,
    };
    if (init.sessionId !== undefined) {
      config.client_id = init.sessionId;
      config.client_password = init.sessionPassword;
    }
    this.native = new (loadAddon())(config);
    this.ops = this.native.native ?? this.native;
    const multi = this.ops.a_multi?.bind(this.ops);
    this.batcher = new WriteBatcher(multi, () => (this.closed ? ZkCode.INVALIDSTATE : this.abandoned ? ZkCode.SESSIONEXPIRED : undefined), this.clock);
    this.native.on('connect', () => {
      // The C client wrote its ConnectRequest out of our sight, some time before this: a new
      // session's deadline counts from the handle's creation (RequestClock's start), a re-attached
      // one's moves only with answers. Its timeout may be shorter than the last one's.
      this.requests.negotiated(this.timeoutMs);
      this.requests.newLink();
      events.onConnected();
    });
    this.native.on('connecting', () => events.onConnecting());
    for (const type of ['created', 'deleted', 'changed', 'child'] as const) {
      this.native.on(type, (_self: unknown, path: string) => this.dispatchWatch(type, path));
    }
    this.native.on('close', (_self: unknown, code: number) => {
      this.closed = true;
      this.batcher.failQueued(ZkCode.INVALIDSTATE); // never sent
      this.failInFlight();
      this.dispatchBacklog();
      events.onClosed(typeof code === 'number' ? code : 0);
    });
    // Never from inside a native callback: the binding would poll a new socket whose fd number
    // the old handle (closed in that callback) still has registered with libuv, and abort.
    this.clock.setImmediate(() => {
      if (!this.closed) this.native.init({});
    });
  }

  /** Session id in hex, as ZooKeeper tools print it ("0" until the first connect). */
  get id(): string {
    return this.native.client_id;
  }

  get password(): string {
    return this.native.client_password;
  }

  /** The session timeout the server granted (the requested one until connected). */
  get timeoutMs(): number {
    return this.native.timeout;
  }

  /** The C client's own state: 3 when connected (see the connection's watchdog). */
  get isConnectedNatively(): boolean {
    return !this.closed && this.native.state === NATIVE_CONNECTED_STATE;
  }

  get isClosed(): boolean {
    return this.closed || this.abandoned;
  }

  private abandoned = false;

  abandon(): void {
    this.abandoned = true;
    this.batcher.failQueued(ZkCode.SESSIONEXPIRED);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.native.close();
    this.native.removeAllListeners();
    this.watches.clear();
    this.batcher.failQueued(ZkCode.INVALIDSTATE); // never sent
    this.failInFlight();
    this.dispatchBacklog();
  }

  create(path: string, data: Buffer, mode: CreateMode, acl?: readonly ZkAcl[], options?: WriteOptions): Promise<string> {
    if (acl && !this.ops.a_create_acl) return this.createThenRestrict(path, data, mode, acl);
    const nativeAcl = acl && toNativeAcl(acl);
    const write: MultiOp | undefined = options?.batchable ? { type: MultiOpType.CREATE, path, data, flags: mode, acl: nativeAcl } : undefined;
    return this.call(
      'create',
      path,
      (done) =>
        nativeAcl
          ? this.ops.a_create_acl!(path, data, mode, nativeAcl, (rc, _e, created) => done(rc, created))
          : this.ops.a_create(path, data, mode, (rc, _e, created) => done(rc, created)),
      { write },
    );
  }

  /**
   * An addon without our patch cannot create with an ACL: create open, then restrict it before
   * the caller sees the node (a moment in which the node is open; see docs/zookeeper-client.md, What the patch changes).
   */
  private async createThenRestrict(path: string, data: Buffer, mode: CreateMode, acl: readonly ZkAcl[]): Promise<string> {
    const created = await this.create(path, data, mode);
    await this.setAcl(created, acl);
    return created;
  }

  getChildren(path: string, watch?: WatchListener): Promise<{ children: string[]; stat: ZkStat }> {
    return this.call(
      'getChildren',
      path,
      (done) => this.ops.a_get_children2(path, watch !== undefined, (rc, _e, children, stat) => done(rc, { children, stat })),
      { read: true, watch: watch && { kind: 'child', listener: watch } },
    );
  }

  getData(path: string, watch?: WatchListener): Promise<{ data: Buffer; stat: ZkStat }> {
    return this.call(
      'getData',
      path,
      (done) => this.ops.a_get(path, watch !== undefined, (rc, _e, stat, data) => done(rc, { data: data ?? Buffer.alloc(0), stat })),
      { read: true, watch: watch && { kind: 'data', listener: watch } },
    );
  }

  /** Resolves null when the node does not exist (the watch then fires on its creation). */
  exists(path: string, watch?: WatchListener): Promise<ZkStat | null> {
    return this.call<ZkStat | null>(
      'exists',
      path,
      (done) => this.ops.a_exists(path, watch !== undefined, (rc, _e, stat) => (rc === ZkCode.NONODE ? done(ZkCode.OK, null) : done(rc, stat))),
      { read: true, watch: watch && { kind: 'data', listener: watch } },
    );
  }

  setData(path: string, data: Buffer, version = -1): Promise<ZkStat> {
    return this.call('setData', path, (done) => this.ops.a_set(path, data, version, (rc, _e, stat) => done(rc, stat)));
  }

  delete(path: string, version = -1, options?: WriteOptions): Promise<void> {
    const write: MultiOp | undefined = options?.batchable ? { type: MultiOpType.DELETE, path, version } : undefined;
    return this.call('delete', path, (done) => this.ops.a_delete_(path, version, (rc) => done(rc, undefined)), { write });
  }

  /**
   * Makes the server this session reads from catch up with the leader. `urgent` (the connection's
   * heartbeat) skips the backlog, so a burst waiting there does not hold back the answer that keeps
   * the session's deadline fresh; the sync that confirms a new link must not (see ZkConnection.resume).
   */
  sync(path: string, options?: { urgent?: boolean }): Promise<void> {
    return this.call('sync', path, (done) => this.ops.a_sync(path, (rc) => done(rc, undefined)), { urgent: options?.urgent });
  }

  setAcl(path: string, acl: readonly ZkAcl[], version = -1): Promise<void> {
    return this.call('setAcl', path, (done) => this.ops.a_set_acl(path, version, toNativeAcl(acl), (rc) => done(rc, undefined)));
  }

  getAcl(path: string): Promise<ZkAcl[]> {
    return this.call('getAcl', path, (done) =>
      this.ops.a_get_acl(path, (rc, _e, acl) => done(rc, (acl ?? []).map((a) => ({ perms: a.perms, scheme: a.scheme, id: a.auth })))),
    );
  }

  addAuth(scheme: string, credentials: string): Promise<void> {
    // The credentials never go into the error: only the scheme does.
    return this.call('addAuth', scheme, (done) => this.ops.add_auth(scheme, credentials, (rc) => done(rc, undefined)));
  }

  /** Forgets `listener` (its waiter stopped waiting); a watch left armed on the server fires to nobody. */
  unwatch(path: string, listener: WatchListener): void {
    this.watches.remove(path, listener);
  }

  /**
   * One event reaches the shared watcher once per registration; the first call takes the
   * listeners, the rest find none. Session events are not passed on (connection state covers them).
   */
  private dispatchWatch(type: WatchEventType, path: string): void {
    if (this.abandoned) return;
    for (const listener of this.watches.take(type, path)) listener({ type, path });
  }

  /**
   * Requests handed to the C client and not answered yet, at most `window` of them; later ones wait
   * here, in order (a session's requests are answered in the order sent). Without the bound a burst
   * (10 000 locks at once) queues so much that the newest answered request was sent longer than a
   * session timeout ago while the server keeps hearing from us: the deadline would call a live
   * session lost. Waiting here, a request is not "sent", so it does not age the clock.
   */
  private inFlight = 0;
  private readonly backlog = new Fifo<() => void>();
  /**
   * What settles each request in flight: a closed handle calls back none of its requests (a sync
   * sent as the server closed the link over failed auth never came back), so close fails them.
   */
  private readonly unsettled = new Set<(code: number) => void>();

  private failInFlight(): void {
    for (const fail of [...this.unsettled]) fail(ZkCode.CLOSING);
  }

  /**
   * How many requests may be in flight: MAX_IN_FLIGHT alone is not enough, since a slow or starved
   * server can take longer than the session timeout to answer 1 000 (seen in a loaded test run),
   * and the deadline counts from the send time of the newest answered request. So the window
   * starts at MIN_IN_FLIGHT, grows by one for each answer that came within a sixteenth of the
   * session timeout (doubling per round trip while the server keeps up) and halves for each one
   * that took over an eighth: the queue at the server stays well inside the timeout. What is in
   * flight cannot be called back: a server that slows down more than about 14 times within one
   * such round trip ((T − margin) ÷ T/16) still answers too late, and the deadline, which cannot
   * tell a slow server from a dead one, declares the session lost.
   */
  private window = MIN_IN_FLIGHT;

  private adaptWindow(roundTripMs: number): void {
    this.window = nextWindow(this.window, roundTripMs, this.timeoutMs);
  }

  /** Where requests go to the addon: lock-node writes are group-committed as multi requests. */
  private readonly batcher: WriteBatcher;

  /**
   * `read`: a read of `path` (the batcher may send it after writes that cannot change it);
   * `urgent`: sent at once, past the backlog (see sync);
   * `write`: a write that may share a multi (see WriteBatcher). `watch`: the request sets a watch
   * with `listener`, kept from now on (so an `unwatch` before the request is sent finds it) until
   * it fires or the answer shows that no watch was set: an error, or getData / getChildren of a
   * missing node (exists of one sets a watch for its creation).
   */
  private call<T>(
    operation: string,
    path: string,
    send: (done: (rc: number, value: T) => void) => number,
    { read, write, watch, urgent }: { read?: boolean; write?: MultiOp; watch?: { kind: 'data' | 'child'; listener: WatchListener }; urgent?: boolean } = {},
  ): Promise<T> {
    const drop = watch && !this.isClosed ? this.watches.add(watch.kind, path, watch.listener) : undefined;
    return new Promise<T>((resolve, reject) => {
      const dispatch = () => {
        if (this.closed || this.abandoned) {
          drop?.();
          reject(new ZkError(this.closed ? ZkCode.INVALIDSTATE : ZkCode.SESSIONEXPIRED, operation, path));
          return;
        }
        this.inFlight++;
        // Sent no sooner than now (the C client may queue it): a safe lower bound.
        const answered = this.requests.sent(VIA_LEADER.has(operation));
        const sentAt = this.clock.now();
        let settled = false;
        const done = (code: number, value: T) => {
          if (settled) return;
          settled = true;
          this.unsettled.delete(fail);
          this.inFlight--;
          if (code !== ZkCode.OK) drop?.();
          if (answered(code)) this.adaptWindow(this.clock.now() - sentAt);
          if (this.abandoned) reject(new ZkError(ZkCode.SESSIONEXPIRED, operation, path));
          else if (code === ZkCode.OK) resolve(value);
          else reject(new ZkError(code, operation, path));
          this.dispatchBacklog();
        };
        const fail = (code: number) => done(code, undefined as T);
        this.unsettled.add(fail);
        this.batcher.submit({ send, write, reads: read ? path : undefined, done } as QueuedRequest);
      };
      if (!urgent && (this.backlog.size > 0 || this.inFlight >= this.window)) this.backlog.push(dispatch);
      else dispatch();
    });
  }

  private draining = false;

  /**
   * Sends waiting requests while there is room (and rejects them all once the handle is closed).
   * A request the C client refuses at once settles inside this loop: the loop goes on instead of
   * nesting a call per waiting request (that overflowed the stack past ~8 000).
   */
  private dispatchBacklog(): void {
    if (this.draining) return;
    this.draining = true;
    try {
      while (this.backlog.size > 0 && (this.closed || this.abandoned || this.inFlight < this.window)) this.backlog.shift()!();
    } finally {
      this.draining = false;
    }
  }

  /** How long the oldest request still waiting for its answer has waited (0 if none): a link that stopped answering. */
  unansweredForMs(): number {
    return this.requests.unansweredForMs();
  }
}

function toNativeAcl(acl: readonly ZkAcl[]): NativeAcl[] {
  return acl.map((a) => ({ perm: a.perms, scheme: a.scheme, auth: a.id }));
}
