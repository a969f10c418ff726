/**
 * An in-memory ZooKeeper "ensemble" at the session seam: `ZkConnection` runs on it through
 * `sessionFactory()`, so the real recipes run unchanged in unit tests. It mirrors what
 * `NativeZkSession` shows of ZooKeeper 3.8 (test/contract runs the same scenarios against both),
 * and adds fault controls a real server does not have: expire, disconnect and reconnect a session.
 *
 * Timing: every request and every server-side step (container reaping) goes through one FIFO
 * queue, drained on a promise microtask; so requests are answered in the order they were sent
 * (per session and overall), and nothing depends on timers (Jest's fake timers cannot stall it).
 * The only timer is a disconnected session's expiry, one session timeout after it was cut off.
 * Framework-free: no Nest imports, no native addon.
 */
import { createHash, randomBytes } from 'node:crypto';
import { ZkCode, ZkError } from '../core/client/zk-error.js';
import { ClientWatches, RequestClock } from '../core/client/session-bookkeeping.js';
import {
  CreateMode,
  ZkPerm,
  type SessionEvents,
  type SessionInit,
  type WatchEventType,
  type WatchListener,
  type ZkAcl,
  type ZkSession,
  type ZkSessionFactory,
  type ZkStat,
} from '../core/client/session.js';

/** Codes the C client knows but ZkCode does not name. */
const BADARGUMENTS = -8;
const NOCHILDRENFOREPHEMERALS = -108;
const INVALIDACL = -114;
/** The states NativeZkSession reports to `onClosed` (the C client's). */
const EXPIRED_STATE = -112;
const AUTH_FAILED_STATE = -113;

const OPEN_ACL: readonly ZkAcl[] = [{ perms: ZkPerm.ALL, scheme: 'world', id: 'anyone' }];

/** A request the server refuses with `code` (thrown inside the server, turned into a ZkError for the client). */
class Refusal {
  constructor(readonly code: number) {}
}
const refuse = (code: number): never => {
  throw new Refusal(code);
};

/** The digest ACL id ZooKeeper derives from `user:password`. */
export function digestId(credentials: string): string {
  const user = credentials.split(':', 1)[0];
  return `${user}:${createHash('sha1').update(credentials).digest('base64')}`;
}

/** One znode. */
class ZNode {
  readonly children = new Map<string, ZNode>();
  version = 0;
  aversion = 0;
  /**
   * How many children were ever created here: ZooKeeper's stored cversion. It names sequential
   * nodes; the cversion a client reads is `2 × creates − numChildren` (each delete counts too).
   */
  childCreates = 0;
  pzxid: number;
  mzxid: number;
  mtime: number;

  constructor(
    public data: Buffer,
    public acl: readonly ZkAcl[],
    readonly czxid: number,
    readonly ctime: number,
    /** The owning session for an ephemeral node, else undefined. */
    readonly ephemeralOwner: ServerSession | undefined,
    readonly isContainer: boolean,
  ) {
    this.mzxid = this.pzxid = czxid;
    this.mtime = ctime;
  }

  /** The stat as the native binding returns it (with its extra fields). */
  stat(reader: ServerSession | undefined): ZkStat {
    return {
      czxid: this.czxid,
      mzxid: this.mzxid,
      pzxid: this.pzxid,
      dataLength: this.data.length,
      numChildren: this.children.size,
      version: this.version,
      cversion: this.childCreates * 2 - this.children.size,
      aversion: this.aversion,
      ctime: new Date(this.ctime),
      mtime: new Date(this.mtime),
      ephemeralOwner: this.ephemeralOwner?.hexId ?? '0',
      createdInThisSession: reader !== undefined && this.ephemeralOwner === reader,
    } as ZkStat;
  }
}

/** The server's side of a session: what outlives a disconnection, and dies with expiry or close. */
class ServerSession {
  readonly hexId: string;
  readonly password = randomBytes(16).toString('hex').toUpperCase();
  /** `scheme:id` of every identity it authenticated as (world:anyone and its address always). */
  readonly identities = new Set(['world:anyone', 'ip:127.0.0.1']);
  readonly ephemerals = new Set<string>();
  /** The client handle attached to it (a re-attach by id and password moves it). */
  client: InMemoryZkSession | undefined;
  ended = false;
  expiryTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly id: bigint,
    readonly timeoutMs: number,
  ) {
    this.hexId = id.toString(16);
  }

  /** Digest ids it authenticated as: what an ACL entry of scheme `auth` stands for. */
  get digestIds(): string[] {
    return [...this.identities].filter((i) => i.startsWith('digest:')).map((i) => i.slice('digest:'.length));
  }
}

/**
 * The server's watch table: one watch per path and client handle (the C client uses one default
 * watcher), data watches (getData, exists) and child watches (getChildren) apart. One-shot: a
 * trigger removes what it fires.
 */
class Watches {
  private readonly data = new Map<string, Set<InMemoryZkSession>>();
  private readonly child = new Map<string, Set<InMemoryZkSession>>();

  add(kind: 'data' | 'child', path: string, client: InMemoryZkSession): void {
    const table = kind === 'data' ? this.data : this.child;
    let clients = table.get(path);
    if (!clients) table.set(path, (clients = new Set()));
    clients.add(client);
  }

  /** Takes the watches an event on `path` fires: `deleted` fires both kinds, once per client. */
  take(type: Exclude<WatchEventType, 'session' | 'not-watching'>, path: string): Set<InMemoryZkSession> {
    const fired = new Set<InMemoryZkSession>();
    const takeFrom = (table: Map<string, Set<InMemoryZkSession>>) => {
      for (const client of table.get(path) ?? []) fired.add(client);
      table.delete(path);
    };
    if (type !== 'child') takeFrom(this.data);
    if (type === 'child' || type === 'deleted') takeFrom(this.child);
    return fired;
  }

  forget(client: InMemoryZkSession): void {
    for (const table of [this.data, this.child]) {
      for (const [path, clients] of table) if (clients.delete(client) && clients.size === 0) table.delete(path);
    }
  }
}

/**
 * The data tree and what changes it: ZooKeeper 3.8's checks, in its order, and the watch events
 * each change fires. Runs inside the server's queue, one request at a time.
 */
class DataTree {
  zxid = 0;
  private readonly root = new ZNode(Buffer.alloc(0), OPEN_ACL, 0, 0, undefined, false);
  readonly watches = new Watches();

  constructor(
    /** Called when a container that had children is empty: the server queues its reaping. */
    private readonly containerEmptied: (path: string) => void,
  ) {
    // Built in, not created: they do not count in their parent's cversion (as on a real server).
    const system = new ZNode(Buffer.alloc(0), OPEN_ACL, 0, 0, undefined, false);
    this.root.children.set('zookeeper', system);
    for (const name of ['config', 'quota']) system.children.set(name, new ZNode(Buffer.alloc(0), OPEN_ACL, 0, 0, undefined, false));
  }

  nextZxid(): number {
    return ++this.zxid;
  }

  // ---- operations (run inside the queue, in order) ----------------------------------------------

  /** @internal */
  create(session: ServerSession, path: string, data: Buffer, mode: CreateMode, acl: readonly ZkAcl[] = OPEN_ACL): string {
    const zxid = this.nextZxid(); // failed writes take a zxid too (an error transaction)
    const fixedAcl = fixupAcl(acl, session);
    if (path === '/') refuse(ZkCode.NODEEXISTS);
    const parentPath = parentOf(path);
    const parent = this.find(parentPath) ?? refuse(ZkCode.NONODE);
    this.checkAcl(parent, ZkPerm.CREATE, session);
    const sequential = mode === CreateMode.PERSISTENT_SEQUENTIAL || mode === CreateMode.EPHEMERAL_SEQUENTIAL;
    const created = sequential ? path + String(parent.childCreates).padStart(10, '0') : path;
    const name = nameOf(created);
    if (parent.children.has(name)) refuse(ZkCode.NODEEXISTS);
    if (parent.ephemeralOwner) refuse(NOCHILDRENFOREPHEMERALS);
    const ephemeral = mode === CreateMode.EPHEMERAL || mode === CreateMode.EPHEMERAL_SEQUENTIAL;
    const now = Date.now();
    const node = new ZNode(Buffer.from(data), fixedAcl, zxid, now, ephemeral ? session : undefined, mode === CreateMode.CONTAINER);
    parent.children.set(name, node);
    parent.childCreates++;
    parent.pzxid = zxid;
    if (ephemeral) session.ephemerals.add(created);
    this.notify('created', created);
    this.notify('child', parentPath);
    return created;
  }

  /** @internal */
  delete(session: ServerSession, path: string, version: number): void {
    this.nextZxid();
    if (path === '/') refuse(BADARGUMENTS);
    const parent = this.find(parentOf(path)) ?? refuse(ZkCode.NONODE);
    this.checkAcl(parent, ZkPerm.DELETE, session); // before the node's existence, as ZooKeeper does
    const node = this.find(path) ?? refuse(ZkCode.NONODE);
    if (version !== -1 && version !== node.version) refuse(ZkCode.BADVERSION);
    if (node.children.size > 0) refuse(ZkCode.NOTEMPTY);
    this.removeNode(path, this.zxid);
  }

  /** @internal */
  setData(session: ServerSession, path: string, data: Buffer, version: number): ZkStat {
    const zxid = this.nextZxid();
    const node = this.find(path) ?? refuse(ZkCode.NONODE);
    this.checkAcl(node, ZkPerm.WRITE, session);
    if (version !== -1 && version !== node.version) refuse(ZkCode.BADVERSION);
    node.data = Buffer.from(data);
    node.version++;
    node.mzxid = zxid;
    node.mtime = Date.now();
    this.notify('changed', path);
    return node.stat(session);
  }

  /** @internal Reads a node; `watch` (when given) is set only if the read succeeds. */
  getData(session: ServerSession, path: string, watcher: InMemoryZkSession | undefined): { data: Buffer; stat: ZkStat } {
    const node = this.find(path) ?? refuse(ZkCode.NONODE);
    this.checkAcl(node, ZkPerm.READ, session);
    if (watcher) this.watches.add('data', path, watcher);
    return { data: Buffer.from(node.data), stat: node.stat(session) };
  }

  /** @internal Children in insertion order (a real server's order is arbitrary too: recipes sort). */
  getChildren(session: ServerSession, path: string, watcher: InMemoryZkSession | undefined): { children: string[]; stat: ZkStat } {
    const node = this.find(path) ?? refuse(ZkCode.NONODE);
    this.checkAcl(node, ZkPerm.READ, session);
    if (watcher) this.watches.add('child', path, watcher);
    return { children: [...node.children.keys()], stat: node.stat(session) };
  }

  /** @internal No ACL check (as ZooKeeper); the watch is set on a missing node too (it fires on creation). */
  exists(session: ServerSession, path: string, watcher: InMemoryZkSession | undefined): ZkStat | null {
    if (watcher) this.watches.add('data', path, watcher);
    return this.find(path)?.stat(session) ?? null;
  }

  /** @internal */
  setAcl(session: ServerSession, path: string, acl: readonly ZkAcl[], version: number): void {
    this.nextZxid();
    const fixed = fixupAcl(acl, session);
    const node = this.find(path) ?? refuse(ZkCode.NONODE);
    this.checkAcl(node, ZkPerm.ADMIN, session);
    if (version !== -1 && version !== node.aversion) refuse(ZkCode.BADVERSION);
    node.acl = fixed;
    node.aversion++;
  }

  /** @internal */
  getAcl(session: ServerSession, path: string): ZkAcl[] {
    const node = this.find(path) ?? refuse(ZkCode.NONODE);
    this.checkAcl(node, ZkPerm.READ | ZkPerm.ADMIN, session);
    // Without ADMIN, digest ids come back with the hash masked (ZooKeeper 3.8 does so).
    const admin = this.allows(node, ZkPerm.ADMIN, session);
    return node.acl.map((a) => ({ ...a, id: a.scheme === 'digest' && !admin ? `${a.id.split(':', 1)[0]}:x` : a.id }));
  }

  /** @internal `digest` is the only scheme it knows; anything else fails authentication. */
  addAuth(session: ServerSession, scheme: string, credentials: string): void {
    if (scheme !== 'digest') refuse(ZkCode.AUTHFAILED);
    session.identities.add(`digest:${digestId(credentials)}`);
  }

  /** NOAUTH unless an ACL entry with one of `perms` matches one of the session's identities (an empty ACL allows all). */
  private checkAcl(node: ZNode, perms: number, session: ServerSession): void {
    if (!this.allows(node, perms, session)) refuse(ZkCode.NOAUTH);
  }

  private allows(node: ZNode, perms: number, session: ServerSession): boolean {
    return node.acl.length === 0 || node.acl.some((a) => (a.perms & perms) !== 0 && session.identities.has(`${a.scheme}:${a.id}`));
  }

  // ---- the tree ---------------------------------------------------------------------------------

  find(path: string): ZNode | undefined {
    if (path === '/') return this.root;
    let node: ZNode | undefined = this.root;
    for (const name of path.split('/').slice(1)) {
      node = node.children.get(name);
      if (!node) return undefined;
    }
    return node;
  }

  /** Removes a childless node at `zxid`, with its watch events; queues its parent's reaping if it is a used, empty container. */
  private removeNode(path: string, zxid: number): void {
    const parentPath = parentOf(path);
    const parent = this.find(parentPath)!;
    const node = parent.children.get(nameOf(path))!;
    parent.children.delete(nameOf(path));
    if (zxid > parent.pzxid) parent.pzxid = zxid;
    node.ephemeralOwner?.ephemerals.delete(path);
    this.notify('deleted', path);
    this.notify('child', parentPath);
    if (parent.isContainer && parent.children.size === 0) this.containerEmptied(parentPath);
  }

  /** A container that once had children and has none now goes (a deleteContainer transaction). */
  reap(path: string): void {
    const node = this.find(path);
    if (!node?.isContainer || node.children.size > 0 || node.childCreates === 0) return;
    this.removeNode(path, this.nextZxid());
  }

  /** Hands a node event to the clients whose watches it fires. */
  private notify(type: 'created' | 'deleted' | 'changed' | 'child', path: string): void {
    for (const client of this.watches.take(type, path)) client.watchEvent(type, path);
  }

  /** closeSession: the session's ephemeral nodes go in one transaction, its watches with it. */
  closeSession(session: ServerSession): void {
    if (session.client) this.watches.forget(session.client);
    const zxid = this.nextZxid();
    for (const path of [...session.ephemerals].sort()) {
      if (this.find(path)) this.removeNode(path, zxid);
    }
    session.ephemerals.clear();
  }
}

/** A request waiting in the server's queue; `run` applies it and returns the answer. */
interface QueuedRequest {
  client: InMemoryZkSession;
  run: (session: ServerSession) => unknown;
  answer: (code: number, value: unknown) => void;
}
type QueueItem = QueuedRequest | { reapContainer: string };

export interface InMemoryZooKeeperOptions {
  /** Session timeouts are clamped to these bounds, as a server does (defaults: 1000 and 60000 ms, as the test server). */
  minSessionTimeoutMs?: number;
  maxSessionTimeoutMs?: number;
}

/** What `sessions()` tells about a session on the server. */
export interface InMemorySessionInfo {
  id: string;
  timeoutMs: number;
  connected: boolean;
  ephemerals: string[];
  identities: string[];
}

/**
 * One in-memory ZooKeeper ensemble: the data tree, the zxid counter and the sessions. Open any
 * number of connections on it (several "instances" of a service), then fail them on demand.
 * @publicApi
 */
export class InMemoryZooKeeper {
  /** @internal What the requests run against. */
  readonly tree = new DataTree((path) => {
    // ZooKeeper's reaper deletes it on its next round (every checkIntervalMs); here it is the
    // next step of the queue: requests already sent still find it, later ones do not.
    this.queue.push({ reapContainer: path });
    this.scheduleDrain();
  });
  private readonly sessionsById = new Map<string, ServerSession>();
  private nextSessionId: bigint;
  private readonly queue: QueueItem[] = [];
  private drainScheduled = false;
  private readonly minTimeoutMs: number;
  private readonly maxTimeoutMs: number;

  constructor(options: InMemoryZooKeeperOptions = {}) {
    this.minTimeoutMs = options.minSessionTimeoutMs ?? 1000;
    this.maxTimeoutMs = options.maxSessionTimeoutMs ?? 60_000;
    // Server id 1 in the top byte, a time-based rest: ids look like a standalone server's.
    this.nextSessionId = (1n << 56n) | ((BigInt(Date.now()) << 24n) & ((1n << 64n) - 1n)) >> 8n;
  }

  /**
   * The factory a `ZkConnection` opens its sessions with: `new ZkConnection(options, zk.sessionFactory())`.
   * With a `link`, cutting it partitions that client: its sessions neither answer nor open.
   */
  sessionFactory(link?: InMemoryLink): ZkSessionFactory {
    return (init, events) => new InMemoryZkSession(this, init, events, link);
  }

  /**
   * Partitions the client behind `link`: its connected session is cut off (it expires one timeout
   * later unless the link is restored first) and no new session of it opens meanwhile.
   */
  cut(link: InMemoryLink): void {
    link.isCut = true;
    for (const session of this.sessionsById.values()) {
      if (session.client?.link === link) this.disconnect(session.hexId);
    }
  }

  /** Ends a partition: the same session again (or the news that it expired), and waiting sessions open. */
  restore(link: InMemoryLink): void {
    link.isCut = false;
    for (const session of [...this.sessionsById.values(), ...this.endedSessions.values()]) {
      if (session.client?.link === link) this.reconnect(session.hexId);
    }
    for (const waiting of [...link.waiting]) {
      link.waiting.delete(waiting);
      waiting.connectNow();
    }
  }

  // ---- fault controls -------------------------------------------------------------------------

  /**
   * Expires a session now: its ephemeral nodes go (with their watch events) and its client is
   * told (`onConnecting`, then `onClosed(-112)`); a disconnected client learns it on `reconnect`.
   */
  expire(sessionId: string): void {
    const session = this.session(sessionId);
    const client = session.client;
    this.endSession(session);
    if (client?.isConnectedNatively) client.lostToExpiry();
    else if (client && !client.isClosed) this.endedSessions.set(session.hexId, session);
  }

  /**
   * Cuts a session's client off: requests in flight and new ones fail with CONNECTIONLOSS, watch
   * events wait for the reconnect, and the server expires the session one timeout from now.
   */
  disconnect(sessionId: string): void {
    const session = this.session(sessionId);
    const client = session.client;
    if (!client?.isConnectedNatively) return;
    this.failQueued(client, ZkCode.CONNECTIONLOSS);
    client.cutOff();
    this.armExpiry(session);
  }

  /** Lets a cut-off client back: `onConnected` with the same session, or `onClosed(-112)` if it expired meanwhile. */
  reconnect(sessionId: string): void {
    const session = this.sessionsById.get(sessionId) ?? this.endedSessions.get(sessionId);
    const client = session?.client;
    if (!session || !client || client.isClosed || client.isConnectedNatively) return;
    if (session.ended) {
      this.endedSessions.delete(sessionId);
      client.lostToExpiry();
      return;
    }
    clearTimeout(session.expiryTimer);
    client.reconnected();
  }

  /** The live sessions. */
  sessions(): InMemorySessionInfo[] {
    return [...this.sessionsById.values()].map((s) => ({
      id: s.hexId,
      timeoutMs: s.timeoutMs,
      connected: s.client?.isConnectedNatively ?? false,
      ephemerals: [...s.ephemerals].sort(),
      identities: [...s.identities],
    }));
  }

  // ---- reading the tree, for assertions ----------------------------------------------------------

  /** The children's names (sorted), or undefined when the node does not exist. */
  children(path: string): string[] | undefined {
    const node = this.tree.find(path);
    return node && [...node.children.keys()].sort();
  }

  /** The node's data, or undefined when it does not exist. */
  data(path: string): Buffer | undefined {
    return this.tree.find(path)?.data;
  }

  stat(path: string): ZkStat | undefined {
    return this.tree.find(path)?.stat(undefined);
  }

  has(path: string): boolean {
    return this.tree.find(path) !== undefined;
  }

  /** Every path below `path` (itself included), depth first, for debugging a test. */
  dump(path = '/'): string[] {
    const node = this.tree.find(path);
    if (!node) return [];
    return [path, ...[...node.children.keys()].sort().flatMap((name) => this.dump(join(path, name)))];
  }

  // ---- sessions (used by InMemoryZkSession) -------------------------------------------------------

  /** Sessions that ended while their client was cut off: it learns of it on reconnect. */
  private readonly endedSessions = new Map<string, ServerSession>();

  /** @internal Opens a session for `client`, or re-attaches it to `init.sessionId`; undefined if that one is gone. */
  openSession(client: InMemoryZkSession, init: SessionInit): ServerSession | undefined {
    if (init.sessionId !== undefined) {
      const existing = this.sessionsById.get(init.sessionId);
      if (!existing || existing.password !== init.sessionPassword?.toUpperCase()) return undefined;
      // The session moves to the new handle; the old one is cut off (and stays so).
      const previous = existing.client;
      if (previous && previous !== client && previous.isConnectedNatively) {
        this.failQueued(previous, ZkCode.CONNECTIONLOSS);
        previous.cutOff();
      }
      clearTimeout(existing.expiryTimer);
      existing.client = client;
      return existing;
    }
    const timeoutMs = Math.min(this.maxTimeoutMs, Math.max(this.minTimeoutMs, init.sessionTimeoutMs));
    const session = new ServerSession(this.nextSessionId++, timeoutMs);
    session.client = client;
    this.tree.nextZxid(); // createSession is a transaction
    this.sessionsById.set(session.hexId, session);
    return session;
  }

  /** @internal The client closed its handle: a connected one closes its session, a cut-off one leaves it to expire. */
  clientClosed(client: InMemoryZkSession, session: ServerSession | undefined, wasConnected: boolean): void {
    if (!session || session.client !== client) return;
    if (wasConnected) {
      // Unanswered requests fail with CLOSING; whether a real server got them varies, here it never does.
      this.failQueued(client, ZkCode.CLOSING);
      this.endSession(session);
    } else if (!session.ended) {
      session.client = undefined; // its expiry stays due one timeout after the cut
    } else {
      this.endedSessions.delete(session.hexId);
    }
  }

  /** @internal Takes a request; it is answered on a later microtask, after every request sent before it. */
  submit(request: QueuedRequest): void {
    this.queue.push(request);
    this.scheduleDrain();
  }

  private armExpiry(session: ServerSession): void {
    clearTimeout(session.expiryTimer);
    session.expiryTimer = setTimeout(() => {
      const client = session.client;
      this.endSession(session);
      if (client && !client.isClosed) this.endedSessions.set(session.hexId, session);
    }, session.timeoutMs);
    session.expiryTimer.unref?.();
  }

  /** The session is over (expired or closed): its ephemeral nodes and watches go. */
  private endSession(session: ServerSession): void {
    if (session.ended) return;
    session.ended = true;
    clearTimeout(session.expiryTimer);
    this.sessionsById.delete(session.hexId);
    this.tree.closeSession(session);
  }

  private session(sessionId: string): ServerSession {
    const session = this.sessionsById.get(sessionId);
    if (!session) throw new Error(`InMemoryZooKeeper: no live session ${sessionId} (live: ${[...this.sessionsById.keys()].join(', ') || 'none'})`);
    return session;
  }

  // ---- the request queue ------------------------------------------------------------------------

  private scheduleDrain(): void {
    if (this.drainScheduled) return;
    this.drainScheduled = true;
    // A promise microtask, not setImmediate or queueMicrotask: Jest's fake timers replace those.
    void Promise.resolve().then(() => this.drain());
  }

  private drain(): void {
    this.drainScheduled = false;
    // Requests a watch listener sends while we drain join the same pass, behind the others.
    for (let item = this.queue.shift(); item; item = this.queue.shift()) this.process(item);
  }

  private process(item: QueueItem): void {
    if ('reapContainer' in item) {
      this.tree.reap(item.reapContainer);
      return;
    }
    const session = item.client.serverSession;
    if (!session || session.ended || !item.client.isConnectedNatively) {
      item.answer(ZkCode.CONNECTIONLOSS, undefined);
      return;
    }
    let value: unknown;
    try {
      value = item.run(session);
    } catch (error) {
      if (!(error instanceof Refusal)) throw error;
      item.answer(error.code, undefined);
      return;
    }
    item.answer(ZkCode.OK, value);
  }

  /** Fails `client`'s queued requests with `code` without running them (the link dropped them). */
  private failQueued(client: InMemoryZkSession, code: number): void {
    const kept = this.queue.filter((item) => 'reapContainer' in item || item.client !== client);
    const dropped = this.queue.filter((item) => !('reapContainer' in item) && item.client === client) as QueuedRequest[];
    this.queue.splice(0, this.queue.length, ...kept);
    for (const request of dropped) request.answer(code, undefined);
  }
}

/** ZooKeeper's fixupACL: `auth` becomes the session's digest ids; malformed or empty lists are INVALIDACL. */
function fixupAcl(acl: readonly ZkAcl[], session: ServerSession): ZkAcl[] {
  if (acl.length === 0) refuse(INVALIDACL);
  const fixed: ZkAcl[] = [];
  for (const entry of acl) {
    if (entry.scheme === 'auth') {
      const ids = session.digestIds;
      if (ids.length === 0) refuse(INVALIDACL);
      for (const id of ids) fixed.push({ perms: entry.perms, scheme: 'digest', id });
    } else if ((entry.scheme === 'world' && entry.id === 'anyone') || (entry.scheme === 'digest' && entry.id.split(':').length === 2) || entry.scheme === 'ip') {
      fixed.push({ perms: entry.perms, scheme: entry.scheme, id: entry.id });
    } else {
      refuse(INVALIDACL);
    }
  }
  return fixed.filter((a, i) => fixed.findIndex((b) => b.perms === a.perms && b.scheme === a.scheme && b.id === a.id) === i);
}

function parentOf(path: string): string {
  const slash = path.lastIndexOf('/');
  return slash <= 0 ? '/' : path.slice(0, slash);
}

function nameOf(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

function join(parent: string, name: string): string {
  return parent === '/' ? `/${name}` : `${parent}/${name}`;
}

/** The C client's path check (it refuses a bad path itself, with BADARGUMENTS, before sending). */
function isValidPath(path: string, sequential: boolean): boolean {
  if (typeof path !== 'string' || !path.startsWith('/') || path.includes('\0')) return false;
  if (path === '/') return !sequential;
  const names = path.split('/').slice(1);
  if (sequential && names.at(-1) === '') names.pop();
  return names.every((n) => n !== '' && n !== '.' && n !== '..');
}

type ClientState = 'connecting' | 'connected' | 'cut-off' | 'closed';

/**
 * The client handle: `ZkSession` over the in-memory server, behaving as `NativeZkSession` does
 * (same errors, same watch bookkeeping, same session events).
 */
/** One client's network path to the in-memory server, for `cut` / `restore` (a partition). */
export class InMemoryLink {
  isCut = false;
  /** @internal Sessions that tried to open while cut. */
  readonly waiting = new Set<InMemoryZkSession>();
}

export class InMemoryZkSession implements ZkSession {
  private state: ClientState = 'connecting';
  /** @internal The server's session once connected. */
  serverSession: ServerSession | undefined;
  private requestedTimeoutMs: number;
  /** When the server last heard from us by our requests (while connected it hears us all the time). */
  private readonly requests = new RequestClock();
  private readonly watches = new ClientWatches();
  /** Sent before the first connect: the C client holds them until then. */
  private heldUntilConnected: QueuedRequest[] = [];
  /** Watch events that fired while cut off: delivered after the reconnect (the client re-sets its watches). */
  private missedEvents: { type: WatchEventType; path: string }[] = [];

  constructor(
    private readonly zookeeper: InMemoryZooKeeper,
    private readonly init: SessionInit,
    private readonly events: SessionEvents,
    /** @internal */
    readonly link?: InMemoryLink,
  ) {
    this.requestedTimeoutMs = init.sessionTimeoutMs;
    // Never from inside the factory: the connection keeps the handle before it hears of it.
    void Promise.resolve().then(() => this.handshake());
  }

  get id(): string {
    return this.serverSession?.hexId ?? '0';
  }
  get password(): string {
    return this.serverSession?.password ?? '00000000000000000000000000000000';
  }
  get timeoutMs(): number {
    return this.serverSession?.timeoutMs ?? this.requestedTimeoutMs;
  }
  get isConnectedNatively(): boolean {
    return this.state === 'connected';
  }
  /**
   * Now, while connected: nothing is ever lost between client and in-memory server, so a heartbeat
   * answered "later" (after a jump of Jest's fake clock) must not make the session look stale.
   */
  get lastAnsweredSentAt(): number {
    return this.state === 'connected' ? performance.now() : this.requests.lastAnsweredSentAt;
  }
  get deadline(): number {
    return this.lastAnsweredSentAt + this.timeoutMs;
  }
  get isClosed(): boolean {
    return this.state === 'closed' || this.abandoned;
  }

  /** See ZkSession.abandon: answers after it fail with SESSIONEXPIRED, watch events are dropped. */
  private abandoned = false;

  abandon(): void {
    this.abandoned = true;
  }

  close(): void {
    if (this.state === 'closed') return;
    const wasConnected = this.state === 'connected';
    this.state = 'closed';
    this.watches.clear();
    this.missedEvents = [];
    for (const request of this.heldUntilConnected.splice(0)) request.answer(ZkCode.CLOSING, undefined);
    this.zookeeper.clientClosed(this, this.serverSession, wasConnected);
    // The binding emits 'close' synchronously from close().
    this.events.onClosed(0);
  }

  create(path: string, data: Buffer, mode: CreateMode, acl?: readonly ZkAcl[]): Promise<string> {
    const sequential = mode === CreateMode.PERSISTENT_SEQUENTIAL || mode === CreateMode.EPHEMERAL_SEQUENTIAL;
    return this.call('create', path, isValidPath(path, sequential), (s) => this.zookeeper.tree.create(s, path, data, mode, acl));
  }

  getChildren(path: string, watch?: WatchListener): Promise<{ children: string[]; stat: ZkStat }> {
    return this.watched('child', 'getChildren', path, watch, (rc) => rc === ZkCode.OK, (s, w) => this.zookeeper.tree.getChildren(s, path, w));
  }

  getData(path: string, watch?: WatchListener): Promise<{ data: Buffer; stat: ZkStat }> {
    return this.watched('data', 'getData', path, watch, (rc) => rc === ZkCode.OK, (s, w) => this.zookeeper.tree.getData(s, path, w));
  }

  exists(path: string, watch?: WatchListener): Promise<ZkStat | null> {
    return this.watched('data', 'exists', path, watch, (rc) => rc === ZkCode.OK, (s, w) => this.zookeeper.tree.exists(s, path, w));
  }

  setData(path: string, data: Buffer, version = -1): Promise<ZkStat> {
    return this.call('setData', path, isValidPath(path, false), (s) => this.zookeeper.tree.setData(s, path, data, version));
  }

  delete(path: string, version = -1): Promise<void> {
    return this.call('delete', path, isValidPath(path, false), (s) => this.zookeeper.tree.delete(s, path, version));
  }

  sync(path: string): Promise<void> {
    return this.call('sync', path, isValidPath(path, false), () => undefined);
  }

  setAcl(path: string, acl: readonly ZkAcl[], version = -1): Promise<void> {
    return this.call('setAcl', path, isValidPath(path, false), (s) => this.zookeeper.tree.setAcl(s, path, acl, version));
  }

  getAcl(path: string): Promise<ZkAcl[]> {
    return this.call('getAcl', path, isValidPath(path, false), (s) => this.zookeeper.tree.getAcl(s, path));
  }

  addAuth(scheme: string, credentials: string): Promise<void> {
    const added = this.call<void>('addAuth', scheme, true, (s) => this.zookeeper.tree.addAuth(s, scheme, credentials));
    // A server that fails authentication drops the client for good (AUTH_FAILED state).
    added.catch((error: ZkError) => {
      if (error.code === ZkCode.AUTHFAILED && this.state !== 'closed') this.endWith(AUTH_FAILED_STATE);
    });
    return added;
  }

  unwatch(path: string, listener: WatchListener): void {
    this.watches.remove(path, listener);
  }

  unansweredForMs(): number {
    return this.requests.unansweredForMs();
  }

  // ---- called by the server -----------------------------------------------------------------------

  /** @internal A node event from the server's watch table. */
  watchEvent(type: WatchEventType, path: string): void {
    if (this.state === 'cut-off') this.missedEvents.push({ type, path });
    else if (this.state === 'connected') this.dispatchWatch(type, path);
  }

  /** @internal The link dropped: `onConnecting`, on a microtask. */
  cutOff(): void {
    this.requests.lastAnsweredSentAt = performance.now();
    this.state = 'cut-off';
    void Promise.resolve().then(() => this.state !== 'closed' && this.events.onConnecting());
  }

  /** @internal The link is back, same session: `onConnected`, then the watch events it missed. */
  reconnected(): void {
    this.state = 'connected';
    void Promise.resolve().then(() => {
      if (this.state !== 'connected') return;
      this.events.onConnected();
      for (const { type, path } of this.missedEvents.splice(0)) this.dispatchWatch(type, path);
    });
  }

  /** @internal The server expired the session: the client hears it as a drop, then expiry on reconnecting. */
  lostToExpiry(): void {
    const wasConnected = this.state === 'connected';
    if (wasConnected) this.requests.lastAnsweredSentAt = performance.now();
    this.state = 'cut-off';
    void Promise.resolve().then(() => {
      if (this.state === 'closed') return;
      if (wasConnected) this.events.onConnecting();
      this.endWith(EXPIRED_STATE);
    });
  }

  // ---- internals -----------------------------------------------------------------------------------

  /**
   * @internal Completes the connect now instead of on the next microtask, so that a testing-kit
   * service is connected as soon as it is constructed. Without effect once connected or closed.
   */
  connectNow(): void {
    this.handshake();
  }

  private handshake(): void {
    if (this.state !== 'connecting') return;
    if (this.link?.isCut) {
      this.link.waiting.add(this); // a partitioned client cannot open a session either
      return;
    }
    const session = this.zookeeper.openSession(this, this.init);
    if (!session) {
      this.endWith(EXPIRED_STATE); // re-attaching to a session that is gone
      return;
    }
    this.serverSession = session;
    this.state = 'connected';
    this.requests.lastAnsweredSentAt = performance.now();
    this.events.onConnected();
    for (const request of this.heldUntilConnected.splice(0)) this.zookeeper.submit(request);
  }

  /** Closed by the server's verdict (expired, auth failed): `onClosed(code)`, like the binding. */
  private endWith(code: number): void {
    this.state = 'closed';
    this.watches.clear();
    this.missedEvents = [];
    this.events.onClosed(code);
  }

  /** NativeZkSession's `watched`: the listener is kept only while the server holds the watch. */
  private watched<T>(
    kind: 'data' | 'child',
    operation: string,
    path: string,
    listener: WatchListener | undefined,
    registers: (rc: number) => boolean,
    run: (session: ServerSession, watcher: InMemoryZkSession | undefined) => T,
  ): Promise<T> {
    const valid = isValidPath(path, false);
    if (!listener || !valid || this.state === 'closed') return this.call(operation, path, valid, (s) => run(s, undefined));
    const drop = this.watches.add(kind, path, listener);
    return this.call(operation, path, true, (s) => run(s, this), (rc) => {
      if (!registers(rc)) drop();
    });
  }

  /** Fires once: `deleted` reaches data and child listeners, `child` child ones, the rest data ones. */
  private dispatchWatch(type: WatchEventType, path: string): void {
    if (this.abandoned) return;
    for (const listener of this.watches.take(type, path)) {
      try {
        listener({ type, path });
      } catch (error) {
        void Promise.reject(error); // surfaces as an unhandled rejection, not inside the server's queue
      }
    }
  }

  private call<T>(operation: string, path: string, validPath: boolean, run: (session: ServerSession) => T, answered?: (rc: number) => void): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.state === 'closed') return reject(new ZkError(ZkCode.INVALIDSTATE, operation, path));
      if (this.abandoned) return reject(new ZkError(ZkCode.SESSIONEXPIRED, operation, path));
      if (!validPath) {
        answered?.(BADARGUMENTS);
        return reject(new ZkError(BADARGUMENTS, operation, path));
      }
      const heard = this.requests.sent(true); // one server: every answer is the leader's
      const request: QueuedRequest = {
        client: this,
        run: run as (session: ServerSession) => unknown,
        answer: (code, value) => {
          heard(code); // only the server's answers move the deadline (as in NativeZkSession)
          answered?.(code);
          if (this.abandoned) reject(new ZkError(ZkCode.SESSIONEXPIRED, operation, path));
          else if (code === ZkCode.OK) resolve(value as T);
          else reject(new ZkError(code, operation, path));
        },
      };
      if (this.state === 'connecting') this.heldUntilConnected.push(request);
      else this.zookeeper.submit(request);
    });
  }
}
