import { createHash, randomUUID } from 'node:crypto';
import diagnostics_channel from 'node:diagnostics_channel';
import { InvalidOptionError, SessionWaitAbortedError, type Deadlock } from './errors.js';
import { isRevokeRequest, parseHolderData, type HolderInfo } from './operations/holder-data.js';
import { joinPath, parentOf, sequenceOf, sortChildren, sortKey, validateZkPath } from './paths.js';
import { isZkCode, ZkCode, ZkError } from './client/zk-error.js';
import type { ZkConnection } from './connection/zk-connection.js';
import { CreateMode, ZkPerm, type ZkAcl, type ZkSession, type ZkStat } from './client/session.js';
import { LockChannels } from './diagnostics.js';
import { LATCH_NODE, LEASE_NODE, MUTEX_NODE, READ_NODE, READ_WRITE_MARKERS, SEMAPHORE_LEASES, SEMAPHORE_LOCKS, WRITE_NODE } from './recipes/node-names.js';

/**
 * What a lock node looks like from outside: `idle` is a lock path with nobody in it (its kind
 * cannot be told then; ZooKeeper reaps it soon).
 */
export type InspectedLockKind = 'mutex' | 'read-write' | 'semaphore' | 'leadership' | 'idle';

/** The role of one node in a lock's queue: `other` is a child that follows no known layout. */
export type ContenderMode = 'lock' | 'read' | 'write' | 'lease' | 'latch' | 'other';

/** One node in a lock's queue (a holder or a waiter). @publicApi */
export interface ContenderInfo {
  /** The node's name, e.g. `_c_<uuid>-lock-0000000007`. */
  readonly node: string;
  /** The node's full path. */
  readonly path: string;
  readonly mode: ContenderMode;
  /** The server-assigned sequence (the trailing 10 digits), if any. */
  readonly sequence: number | undefined;
  /** True when this node holds the lock (or the semaphore lease is in use). */
  readonly holds: boolean;
  /**
   * What the node's data says about its owner: this library writes `{ host, pid, app, instance,
   * createdAt }`; Curator writes the client's IP address, reported as `{ host }`.
   */
  readonly holder: Partial<HolderInfo>;
  /** Someone asked this holder to let go (Curator's revoke marker replaced its data). */
  readonly revokeRequested: boolean;
  /** The ZooKeeper session that owns the (ephemeral) node, in hex; "0" for a persistent node. */
  readonly sessionId: string;
  /** When the server created the node (its ctime). */
  readonly createdAt: Date;
  /** The zxid of the node's create: orders nodes by creation, across locks. */
  readonly czxid: number;
  /** Milliseconds since `createdAt`, by this machine's clock (0 if the clocks disagree). */
  readonly ageMs: number;
}

/** Who holds a lock and who waits for it, at one moment. @publicApi */
export interface LockInfo {
  /** The lock's path (for a semaphore, the path above `leases` and `locks`). */
  readonly path: string;
  readonly kind: InspectedLockKind;
  /**
   * The nodes holding it, in queue order: the mutex holder; the readers holding it or the writer;
   * the semaphore leases in use.
   */
  readonly holders: readonly ContenderInfo[];
  /**
   * The nodes waiting, in queue order. For a semaphore: a lease created beyond the permit count,
   * then the acquirers queued on its internal lock (`<path>/locks`).
   */
  readonly waiting: readonly ContenderInfo[];
  /** Semaphore: the number of lease nodes (used and pending). */
  readonly leases?: number;
  /** Semaphore: the permit count given as a hint (ZooKeeper does not store it). */
  readonly permits?: number;
  /**
   * The deadlocks this lock is waited for in (`LockService.inspect()`, `withDeadlocks`): cycles of
   * waits across processes, each seen twice. Absent when there is none.
   */
  readonly deadlocks?: readonly Deadlock[];
}

export interface InspectLockOptions {
  /**
   * Semaphore: the permit count its participants use. ZooKeeper does not store it; with it, lease
   * nodes beyond the count are reported as waiting. Without it, the one lease whose owner still
   * holds the semaphore's internal lock counts as waiting (how both Curator and this library
   * acquire a lease).
   */
  permits?: number;
  /** Cancels waiting for the connection: the call then rejects with SessionWaitAbortedError (its cause the signal's reason). */
  signal?: AbortSignal;
}

export interface InspectLocksOptions {
  /** How many levels below `path` to search for lock nodes. Default 4. */
  maxDepth?: number;
  /** Cancels waiting for the connection: the call then rejects with SessionWaitAbortedError (its cause the signal's reason). */
  signal?: AbortSignal;
}

const MUTEX_CHILD = new RegExp(`${MUTEX_NODE}\\d{10}$`);
const RW_CHILD = new RegExp(`(?:${READ_NODE}|${WRITE_NODE})\\d{10}$`);
const LEASE_CHILD = new RegExp(`${LEASE_NODE}\\d{10}$`);
/** A leader election's participant (Curator LeaderLatch); its data is the participant id. */
const LATCH_CHILD = new RegExp(`${LATCH_NODE}\\d{10}$`);
const SEMAPHORE_CHILDREN = new Set([SEMAPHORE_LEASES, SEMAPHORE_LOCKS]);
/** Requests in flight at once while walking a tree (the session pipelines them). */
const CONCURRENCY = 32;

/** Classifies a node by its children; undefined when it is not a lock node. */
function classify(children: readonly string[]): Exclude<InspectedLockKind, 'idle'> | undefined {
  if (children.length === 0) return undefined;
  if (children.includes(SEMAPHORE_LEASES) && children.every((c) => SEMAPHORE_CHILDREN.has(c))) return 'semaphore';
  if (children.some((c) => RW_CHILD.test(c))) return 'read-write';
  if (children.some((c) => MUTEX_CHILD.test(c))) return 'mutex';
  if (children.some((c) => LATCH_CHILD.test(c))) return 'leadership';
  return undefined;
}

/**
 * Every lock under `path` (the path itself included) down to `maxDepth` levels: mutexes,
 * read-write locks and semaphores in this library's and Curator's layouts, with who holds them
 * and who waits, sorted by path. Idle lock paths (no contender) are left out. `/zookeeper` is
 * skipped. Nodes that vanish while being read are skipped.
 * @publicApi
 */
export async function inspectLocks(connection: ZkConnection, path = '/', options: InspectLocksOptions = {}): Promise<LockInfo[]> {
  checkPath(path);
  const maxDepth = options.maxDepth ?? 4;
  if (!Number.isInteger(maxDepth) || maxDepth < 0 || maxDepth > 64) {
    throw new InvalidOptionError('maxDepth', `expected an integer from 0 to 64, got ${String(maxDepth)}`);
  }
  const session = await sessionFor(connection, 'inspect', options.signal);
  const limit = limiter(CONCURRENCY);
  const found: LockInfo[] = [];

  const visit = async (nodePath: string, depth: number): Promise<void> => {
    if (nodePath === '/zookeeper') return;
    const children = await limit(() => childrenOrNull(session, nodePath));
    if (!children) return;
    const kind = classify(children);
    if (kind) {
      const info = await readLock(session, nodePath, kind, children, {}, limit);
      if (info.kind !== 'idle') found.push(info);
      return;
    }
    if (depth >= maxDepth) return;
    await Promise.all(children.map((child) => visit(joinPath(nodePath, child), depth + 1)));
  };
  await visit(path, 0);
  return found.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/**
 * Who holds the lock at `lockPath` and who waits, or null when the node does not exist (an
 * unused lock path: ZooKeeper reaps empty lock nodes).
 * @publicApi
 */
export async function inspectLock(connection: ZkConnection, lockPath: string, options: InspectLockOptions = {}): Promise<LockInfo | null> {
  checkPath(lockPath);
  if (options.permits !== undefined && (!Number.isInteger(options.permits) || options.permits < 1)) {
    throw new InvalidOptionError('permits', `expected a positive integer, got ${String(options.permits)}`);
  }
  const session = await sessionFor(connection, 'inspect', options.signal);
  const limit = limiter(CONCURRENCY);
  const children = await childrenOrNull(session, lockPath);
  if (!children) return null;
  return readLock(session, lockPath, classify(children) ?? 'idle', children, options, limit);
}

/**
 * @internal The lock at `path` as `session` reads it now, or null when its node is gone or its
 * queue has more than `maxNodes` nodes (deadlock detection reads only short queues).
 */
export async function readLockAt(session: ZkSession, path: string, maxNodes = Infinity): Promise<LockInfo | null> {
  const children = await childrenOrNull(session, path);
  if (!children || children.length > maxNodes) return null;
  return readLock(session, path, classify(children) ?? 'idle', children, {}, limiter(CONCURRENCY));
}

/**
 * The connection's session, waiting for one until `signal` aborts: then a SessionWaitAbortedError
 * (the caller's own reason as its cause), which says what happened and which ZkLockModule answers
 * with 503, where the bare reason (a DOMException TimeoutError) says neither.
 */
export async function sessionFor(connection: ZkConnection, operation: string, signal: AbortSignal | undefined): Promise<ZkSession> {
  try {
    return await connection.whenConnected(signal);
  } catch (error) {
    if (signal?.aborted && error === signal.reason) throw new SessionWaitAbortedError(operation, { cause: error });
    throw error;
  }
}

function checkPath(path: unknown): asserts path is string {
  const problem = typeof path === 'string' ? validateZkPath(path) : 'must be a string';
  // "/zookeeper" is legal to read; validateZkPath refuses it because locks may not live there.
  if (problem && !(typeof path === 'string' && (path === '/zookeeper' || path.startsWith('/zookeeper/')))) {
    throw new InvalidOptionError('path', `${JSON.stringify(path)} ${problem}`);
  }
}

type Limit = <T>(work: () => Promise<T>) => Promise<T>;

function limiter(max: number): Limit {
  let active = 0;
  const queue: (() => void)[] = [];
  return async <T>(work: () => Promise<T>): Promise<T> => {
    if (active >= max) await new Promise<void>((resolve) => queue.push(resolve));
    active++;
    try {
      return await work();
    } finally {
      active--;
      queue.shift()?.();
    }
  };
}

/** True for errors that mean "this node is not (or no longer) there for us": skip it. */
function isGone(error: unknown): boolean {
  return error instanceof ZkError && (error.code === ZkCode.NONODE || error.code === ZkCode.NOAUTH);
}

async function childrenOrNull(session: ZkSession, path: string): Promise<string[] | null> {
  try {
    return (await session.getChildren(path)).children;
  } catch (error) {
    if (isGone(error)) return null;
    throw error;
  }
}

interface RawNode {
  node: string;
  path: string;
  data: Buffer;
  stat: ZkStat;
}

/** Reads the data of each child of `parent`, in the given order, dropping the ones that vanished. */
async function readNodes(session: ZkSession, parent: string, names: readonly string[], limit: Limit): Promise<RawNode[]> {
  const read = await Promise.all(
    names.map((node) =>
      limit(async () => {
        const path = joinPath(parent, node);
        try {
          const { data, stat } = await session.getData(path);
          return { node, path, data, stat };
        } catch (error) {
          if (isZkCode(error, ZkCode.NOAUTH)) {
            // Ours to list, not to read (its ACL): it still takes its place in the queue, with no
            // holder data. Skipping it would make the node behind it look like the holder.
            const stat = await session.exists(path);
            return stat ? { node, path, data: Buffer.alloc(0), stat } : undefined;
          }
          if (isGone(error)) return undefined;
          throw error;
        }
      }),
    ),
  );
  return read.filter((n): n is RawNode => n !== undefined);
}

function modeOf(node: string): ContenderMode {
  if (RW_CHILD.test(node)) return node.lastIndexOf(READ_NODE) > node.lastIndexOf(WRITE_NODE) ? 'read' : 'write';
  if (MUTEX_CHILD.test(node)) return 'lock';
  if (LEASE_CHILD.test(node)) return 'lease';
  if (LATCH_CHILD.test(node)) return 'latch';
  return 'other';
}

function contender(raw: RawNode, holds: boolean, now: number): ContenderInfo {
  const created = raw.stat.ctime instanceof Date ? raw.stat.ctime : new Date(raw.stat.ctime);
  return {
    node: raw.node,
    path: raw.path,
    mode: modeOf(raw.node),
    sequence: sequenceOf(raw.node),
    holds,
    holder: parseHolderData(raw.data),
    revokeRequested: isRevokeRequest(raw.data),
    sessionId: raw.stat.ephemeralOwner,
    createdAt: created,
    czxid: raw.stat.czxid,
    ageMs: Math.max(0, now - created.getTime()),
  };
}

async function readLock(
  session: ZkSession,
  path: string,
  kind: InspectedLockKind,
  children: readonly string[],
  options: InspectLockOptions,
  limit: Limit,
): Promise<LockInfo> {
  switch (kind) {
    case 'semaphore':
      return readSemaphore(session, path, children, options.permits, limit);
    case 'read-write':
      return readReadWrite(session, path, children, limit);
    case 'mutex': {
      const nodes = await readNodes(session, path, sortChildren(children, [MUTEX_NODE]), limit);
      return split(path, 'mutex', nodes, (_node, index) => index === 0);
    }
    case 'leadership': {
      // The lowest participant leads; the others wait in line.
      const nodes = await readNodes(session, path, sortChildren(children.filter((c) => LATCH_CHILD.test(c)), [LATCH_NODE]), limit);
      return split(path, 'leadership', nodes, (_node, index) => index === 0);
    }
    default:
      // Empty, or children that follow no lock layout (e.g. a parent of lock paths).
      return { path, kind: 'idle', holders: [], waiting: [] };
  }
}

function split(path: string, kind: InspectedLockKind, nodes: readonly RawNode[], holds: (node: RawNode, index: number) => boolean): LockInfo {
  const now = Date.now();
  if (nodes.length === 0) return { path, kind: 'idle', holders: [], waiting: [] };
  const all = nodes.map((node, index) => contender(node, holds(node, index), now));
  return { path, kind, holders: all.filter((c) => c.holds), waiting: all.filter((c) => !c.holds) };
}

/**
 * Readers hold while no writer is ahead of them (a downgraded reader shares its writer's
 * sequence and is not held back by it); a writer holds at the head of the queue.
 */
async function readReadWrite(session: ZkSession, path: string, children: readonly string[], limit: Limit): Promise<LockInfo> {
  const sorted = sortChildren(children, READ_WRITE_MARKERS);
  const key = (name: string) => sortKey(name, READ_WRITE_MARKERS);
  // Equal keys only come from a downgrade (a read node taking its writer's sequence): show the
  // writer first. The sort is otherwise exactly the recipes' own.
  const ordered = sorted
    .map((name, index) => ({ name, index }))
    .sort((a, b) => {
      const ka = key(a.name);
      const kb = key(b.name);
      if (ka !== kb) return a.index - b.index;
      return (modeOf(a.name) === 'write' ? 0 : 1) - (modeOf(b.name) === 'write' ? 0 : 1) || a.index - b.index;
    })
    .map((x) => x.name);
  const nodes = await readNodes(session, path, ordered, limit);
  return split(path, 'read-write', nodes, (node, index) => {
    const mode = modeOf(node.node);
    const own = key(node.node);
    const ahead = nodes.slice(0, index);
    // A writer holds at the head (only its own downgraded reader may sort level with it).
    if (mode === 'write') return ahead.every((n) => modeOf(n.node) === 'read' && key(n.node) === own);
    // A reader holds unless a writer of another sequence is ahead of it.
    if (mode === 'read') return ahead.every((n) => modeOf(n.node) !== 'write' || key(n.node) === own);
    return false;
  });
}

/**
 * Curator's InterProcessSemaphoreV2 layout: lease nodes under `leases`, acquirers serialised by
 * the internal mutex `locks`. An acquirer creates its lease while holding the internal lock and
 * keeps holding it until the lease is granted, so at most one lease is pending: the newest, owned
 * by the internal lock's holder.
 */
async function readSemaphore(
  session: ZkSession,
  path: string,
  children: readonly string[],
  permits: number | undefined,
  limit: Limit,
): Promise<LockInfo> {
  const leasesPath = joinPath(path, SEMAPHORE_LEASES);
  const locksPath = joinPath(path, SEMAPHORE_LOCKS);
  const [leaseNames, lockNames] = await Promise.all([
    children.includes(SEMAPHORE_LEASES) ? limit(() => childrenOrNull(session, leasesPath)) : Promise.resolve([]),
    children.includes(SEMAPHORE_LOCKS) ? limit(() => childrenOrNull(session, locksPath)) : Promise.resolve([]),
  ]);
  const [leases, acquirers] = await Promise.all([
    readNodes(session, leasesPath, sortChildren(leaseNames ?? [], [LEASE_NODE]), limit),
    readNodes(session, locksPath, sortChildren(lockNames ?? [], [MUTEX_NODE]), limit),
  ]);
  const now = Date.now();
  let used: RawNode[];
  let pending: RawNode[];
  if (permits !== undefined) {
    used = leases.slice(0, permits);
    pending = leases.slice(permits);
  } else {
    const newest = leases.at(-1);
    const internalHolder = acquirers[0];
    const isPending =
      newest !== undefined &&
      internalHolder !== undefined &&
      newest.stat.ephemeralOwner === internalHolder.stat.ephemeralOwner &&
      newest.stat.czxid > internalHolder.stat.czxid;
    used = isPending ? leases.slice(0, -1) : leases;
    pending = isPending ? [newest] : [];
  }
  // The internal lock's holder is the acquirer whose lease is pending: list it once.
  const queued = pending.length > 0 ? acquirers.slice(1) : acquirers;
  const info: LockInfo = {
    path,
    kind: leases.length === 0 && acquirers.length === 0 ? 'idle' : 'semaphore',
    holders: used.map((n) => contender(n, true, now)),
    waiting: [...pending.map((n) => contender(n, false, now)), ...queued.map((n) => contender(n, false, now))],
    leases: leases.length,
    ...(permits === undefined ? {} : { permits }),
  };
  return info;
}

/** Why the session may not create under a base path: where, and the ACL found there. */
export interface CreateDenied {
  /** The base path, or its nearest existing ancestor when it does not exist yet. */
  readonly path: string;
  /** Its ACL, if this session may read it (digest ids read as `user:x` without ADMIN). */
  readonly acl: readonly ZkAcl[] | undefined;
}

/** `user:base64(sha1(user:password))`: how ZooKeeper stores a digest identity in an ACL. */
export function digestIdOf(credentials: string): string {
  const user = credentials.slice(0, Math.max(0, credentials.indexOf(':')));
  return `${user}:${createHash('sha1').update(credentials).digest('base64')}`;
}

/** `scheme:id:perms` as zkCli prints it (cdrwa). */
export function formatAcl(acl: readonly ZkAcl[] | undefined): string {
  if (acl === undefined) return '(not readable with these credentials)';
  if (acl.length === 0) return '(empty)';
  const letters: [number, string][] = [
    [ZkPerm.CREATE, 'c'],
    [ZkPerm.DELETE, 'd'],
    [ZkPerm.READ, 'r'],
    [ZkPerm.WRITE, 'w'],
    [ZkPerm.ADMIN, 'a'],
  ];
  return acl.map((a) => `${a.scheme}:${a.id}:${letters.map(([bit, l]) => (a.perms & bit ? l : '')).join('') || '-'}`).join(', ');
}

/** The name of the ephemeral node checkCreateAccess creates and deletes at once. */
export const ACCESS_PROBE_PREFIX = '.nestjs-zk-lock-access-probe-';

/**
 * Whether `session` (with its credentials) may create nodes under `basePath`: creates an
 * ephemeral probe node in `basePath` (or in its nearest existing ancestor, where the library would
 * create the missing parents) and deletes it again. The server judges, so every scheme counts (ip,
 * sasl, x509, a super user). Not read-only, because reading the ACL cannot tell: without ADMIN on
 * the node ZooKeeper masks digest ids (`alice:x`), so wrong and right passwords of a user read alike.
 * Resolves with undefined when allowed, else with the path and the ACL that deny it.
 * @publicApi
 */
export async function checkCreateAccess(session: ZkSession, basePath: string): Promise<CreateDenied | undefined> {
  // A parent may vanish meanwhile (lock paths are containers, which the server reaps): walk again.
  for (let attempt = 0; attempt < 5; attempt++) {
    let path = basePath;
    while (path !== '/' && (await session.exists(path)) === null) path = parentOf(path);
    const probe = joinPath(path, `${ACCESS_PROBE_PREFIX}${randomUUID()}`);
    try {
      await session.create(probe, Buffer.alloc(0), CreateMode.EPHEMERAL);
    } catch (error) {
      if (isZkCode(error, ZkCode.NONODE)) continue;
      if (isZkCode(error, ZkCode.NOAUTH)) return { path, acl: await readableAcl(session, path) };
      throw error;
    }
    await session.delete(probe).catch(() => undefined); // may create, not delete: it goes with the session
    return undefined;
  }
  return undefined; // the path keeps vanishing: not a question of credentials
}

/**
 * The ACL of `path` if this session may read the node. getAcl only after a read succeeded: the
 * addon crashes the process when getAcl fails (NONODE, NOAUTH: it frees the missing ACL).
 */
export async function readableAcl(session: ZkSession, path: string): Promise<ZkAcl[] | undefined> {
  try {
    await session.getData(path);
    return await session.getAcl(path);
  } catch {
    return undefined;
  }
}

/** A holder left from before this process lost its session (see StaleHolderWatch). @publicApi */
export interface StaleHolder {
  /** The lock's path. */
  readonly lockPath: string;
  readonly node: string;
  /** The session that owns the node, in hex. */
  readonly sessionId: string;
  readonly createdAt: Date;
  readonly holder: Partial<HolderInfo>;
}

/** How many of the most recently used lock paths StaleHolderWatch looks at, and for how long. */
const RECENT_PATHS = 100;
const RECENT_MS = 10 * 60_000;

/**
 * After this process lost its session and opened a new one, finds holders of the locks it used
 * recently that belong to another session and were created before the loss. Such a holder may be
 * a session that died during the outage: a ZooKeeper server that restarts restores every session
 * from its snapshot and log and gives each a fresh, full timeout, so the nodes of a session that
 * died while the server was down stay for one more session timeout (that is, a lock looks held by
 * nobody alive). It may also be a live process that kept its session: ZooKeeper cannot tell them
 * apart from here. So these are reported only for twice this session's timeout after the new
 * session connected; later, a session still holding is alive (the server would have expired it).
 * Lock paths come from this process's acquires (the `nestjs-zk-lock:acquire-start` and
 * `contended` diagnostics channels, under `basePath`) and from `extraPaths` (e.g. leader elections).
 * @publicApi
 */
export class StaleHolderWatch {
  private readonly recent = new Map<string, number>();
  private lostAt: number | undefined;
  private connectedAt: number | undefined;
  private readonly stop: () => void;

  constructor(
    private readonly connection: ZkConnection,
    basePath: string,
  ) {
    const note = (message: unknown) => {
      const { lockPath, path } = (message ?? {}) as { lockPath?: string; path?: string };
      const used = lockPath ?? path;
      if (typeof used === 'string' && (basePath === '/' || used.startsWith(`${basePath}/`))) this.note(used);
    };
    diagnostics_channel.subscribe(LockChannels.acquireStart.name, note);
    diagnostics_channel.subscribe(LockChannels.contended.name, note);
    const stopListening = connection.listen({
      lost: () => {
        this.lostAt = Date.now(); // what was created before it by another session may be dead
        this.connectedAt = undefined;
      },
      connected: () => {
        if (this.lostAt !== undefined) this.connectedAt = Date.now();
      },
    });
    this.stop = () => {
      diagnostics_channel.unsubscribe(LockChannels.acquireStart.name, note);
      diagnostics_channel.unsubscribe(LockChannels.contended.name, note);
      stopListening();
    };
  }

  /** Records that this process used the lock at `lockPath`. */
  note(lockPath: string): void {
    this.recent.delete(lockPath);
    this.recent.set(lockPath, Date.now());
    if (this.recent.size > RECENT_PATHS) this.recent.delete(this.recent.keys().next().value!);
  }

  /** When the session was lost (Date.now()), while the window after it is open. */
  get since(): Date | undefined {
    return this.windowOpen() ? new Date(this.lostAt!) : undefined;
  }

  private windowOpen(): boolean {
    if (this.lostAt === undefined) return false;
    if (this.connectedAt === undefined) return true;
    if (Date.now() - this.connectedAt <= 2 * this.connection.sessionTimeoutMs) return true;
    this.lostAt = this.connectedAt = undefined;
    return false;
  }

  /** The suspicious holders now; empty outside the window after a loss (or while not connected). */
  async staleHolders(extraPaths: Iterable<string> = [], signal?: AbortSignal): Promise<StaleHolder[]> {
    if (!this.windowOpen() || this.connectedAt === undefined || this.connection.state !== 'connected') return [];
    const lostAt = this.lostAt!;
    const ours = this.connection.sessionId;
    const now = Date.now();
    const paths = new Set([...this.recent].filter(([, at]) => now - at <= RECENT_MS).map(([p]) => p));
    for (const p of extraPaths) paths.add(p);
    const found: StaleHolder[] = [];
    await Promise.all(
      [...paths].map(async (lockPath) => {
        const info = await inspectLock(this.connection, lockPath, { signal }).catch(() => null);
        for (const h of info?.holders ?? []) {
          if (h.sessionId === '0' || h.sessionId === ours || h.createdAt.getTime() >= lostAt) continue;
          found.push({ lockPath, node: h.node, sessionId: h.sessionId, createdAt: h.createdAt, holder: h.holder });
        }
      }),
    );
    return found.sort((a, b) => (a.lockPath < b.lockPath ? -1 : a.lockPath > b.lockPath ? 1 : 0));
  }

  close(): void {
    this.stop();
  }
}
