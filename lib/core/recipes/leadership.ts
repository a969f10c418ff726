import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { InvalidOptionError, LockLostError, type LockLostReason } from '../errors.js';
import { NodeLease, type Lease } from '../leases/lease.js';
import { REVOKE_MARKER } from '../operations/holder-data.js';
import type { LockEngine } from '../lock-engine.js';
import { joinPath, sortChildren } from '../paths.js';
import { acquireInQueue, type QueueSpec } from '../queue/lock-queue.js';
import { exclusiveVerdict } from './mutex.js';
import { isZkCode, ZkCode, ZkError } from '../client/zk-error.js';
import { LATCH_NODE } from './node-names.js';
import { sleep } from '../clock.js';

/** @publicApi */
export interface LeadershipOptions {
  /**
   * This participant's id, written as its node's data (Curator's LeaderLatch reads the data as
   * the id): a non-empty string. Default `<host>:<pid>`, and `<host>:<pid>#<n>` for the n-th
   * connection (LockEngine) of the process, so that two applications in one process differ.
   */
  participantId?: string;
  /**
   * A request to let go (`LockService.revoke(name)`, Curator's `Revoker` on the leader's node)
   * makes the leader step down (reason `revoked`) and queue again at the tail. Default false.
   * `LockService.revoke` refuses an election that has a participant that is not this library's
   * (a Curator LeaderLatch): a LeaderLatch next in line would stop watching the leader's node.
   */
  revocable?: boolean;
}

/** Checks a participant id (`option` names it in the InvalidOptionError); returns it. */
export function validateParticipantId(value: unknown, option = 'participantId'): string {
  if (typeof value !== 'string') throw new InvalidOptionError(option, `expected a non-empty string, got ${value === null ? 'null' : typeof value}`);
  if (value.trim() === '') throw new InvalidOptionError(option, `expected a non-empty string, got ${JSON.stringify(value)} (participants could not be told apart)`);
  if (value === REVOKE_MARKER) throw new InvalidOptionError(option, `${JSON.stringify(value)} is the revoke request marker (Curator's): the node would ask itself to let go`);
  return value;
}

/** `<host>:<pid>`, with `#<engine id>` past the process's first engine (apps in one process differ). */
function defaultParticipantId(engine: LockEngine): string {
  const id = `${hostname()}:${process.pid}`;
  return engine.id > 1 ? `${id}#${engine.id}` : id;
}

/** One term of leadership: from becoming leader until it ends (lost, stepped down, shut down). @publicApi */
export interface LeadershipTerm {
  /** Aborts (with a LockLostError) when this term ends, before anyone else can lead. */
  readonly signal: AbortSignal;
  /** Strictly increasing across successive leaders of the election (as a lock's fencing token). */
  readonly fencingToken: bigint;
  /** Our node in the election. */
  readonly path: string;
  readonly sessionId: string;
}

/** @publicApi */
export interface Participant {
  id: string;
  /** The node's name under the election path. */
  node: string;
  isLeader: boolean;
}

export interface LeadershipEvents {
  /** This participant leads: the term's signal is armed (its node is watched). */
  gained: [term: LeadershipTerm];
  /** The term ended; its signal has aborted. */
  lost: [term: LeadershipTerm, reason: LockLostReason];
  /** `close()` was called. */
  closed: [];
}

/**
 * Put between the protected prefix and `latch-` in our participants' node names:
 * `_c_<uuid>-nzl-latch-<seq>`. Curator sorts a participant by what follows the last `latch-` (the
 * sequence) and reads its data as the id, so the tag changes nothing for a LeaderLatch; it tells
 * our participants (which set their watch on the node ahead again after a change of its data)
 * from the others. A LeaderLatch acts only on the deletion of the node ahead of it and does not
 * watch again after a data change: writing into the leader's node (a revoke request, an id
 * written back over one) while a LeaderLatch waits behind it leaves that latch deaf, and once the
 * leader leaves nobody leads. See foreignParticipants.
 */
const OWN_TAG = 'nzl-';
const OWN_NODE = new RegExp(`^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-${OWN_TAG}${LATCH_NODE}\\d{10}$`);

/** True when `node` (a child's name) is a participant of this library's Leadership. */
export function isOwnParticipantNode(node: string): boolean {
  return OWN_NODE.test(node);
}

/**
 * The participants among an election's children (names) that are not this library's: Curator
 * LeaderLatch (`_c_<uuid>-latch-<seq>`) or any other client. Nobody may write into the nodes of
 * an election that has one (see OWN_TAG).
 */
export function foreignParticipants(children: readonly string[]): string[] {
  return children.filter((c) => c.includes(LATCH_NODE) && !isOwnParticipantNode(c));
}

/**
 * A leader election with Curator's LeaderLatch layout: each participant queues a node
 * `<path>/_c_<uuid>-nzl-latch-<seq>` (ephemeral sequential, its id as data; a LeaderLatch's is
 * `_c_<uuid>-latch-<seq>`, sorted the same by the sequence), the lowest leads, each
 * watches one node ahead of it (see exclusiveVerdict; a LeaderLatch watches its predecessor) — so
 * Java services using LeaderLatch on the same path take part in the same election. It runs on the lock queue, with a lock's promise: a term's `signal` aborts
 * before anyone else can lead (session expired or past its deadline, node deleted, stepped down,
 * shutdown). After a term ends the participant queues again at the tail, until `close()`.
 * The engine's shutdown closes it first, so a successor takes over in about a round trip.
 * @publicApi
 */
export class Leadership extends EventEmitter<LeadershipEvents> {
  readonly participantId: string;
  private readonly spec: QueueSpec;
  private started = false;
  private closed = false;
  private current: { term: LeadershipTerm; lease: NodeLease; announced: boolean; end: (reason: LockLostReason) => void } | undefined;
  private cancelQueueing: (() => void) | undefined;
  private stopWatchingEngine: (() => void) | undefined;
  private campaigning: Promise<void> | undefined;
  private readonly revocable: boolean;
  private readonly idBytes: Buffer;

  constructor(
    private readonly engine: LockEngine,
    readonly name: string,
    readonly path: string,
    options: LeadershipOptions = {},
  ) {
    super();
    const { participantId, revocable } = options ?? {};
    if (revocable !== undefined && typeof revocable !== 'boolean') throw new InvalidOptionError('revocable', 'expected true or false');
    this.revocable = revocable ?? false;
    this.participantId = participantId === undefined ? defaultParticipantId(engine) : validateParticipantId(participantId);
    const data = Buffer.from(this.participantId, 'utf8');
    this.idBytes = data;
    this.spec = {
      lockName: name,
      kind: 'leadership',
      lockPath: path,
      parentPath: path,
      nodeName: OWN_TAG + LATCH_NODE,
      sortMarkers: [LATCH_NODE],
      evaluate: exclusiveVerdict,
      data: () => data,
    };
  }

  /** Joins the election (in the background); without effect once started. Returns this. */
  start(): this {
    if (this.started || this.closed) return this;
    this.started = true;
    this.stopWatchingEngine = this.engine.onStop(() => void this.close());
    this.campaigning = this.campaign();
    return this;
  }

  /** Listeners are the application's code: one that throws must not stop the election. */
  private tell<K extends 'gained' | 'lost'>(event: K, ...args: LeadershipEvents[K]): void {
    for (const listener of this.listeners(event) as ((...a: LeadershipEvents[K]) => void)[]) {
      try {
        listener(...args);
      } catch (error) {
        this.engine.warn(`a leadership ${event} listener of ${JSON.stringify(this.name)} threw: ${String(error)}`);
      }
    }
  }

  /** True while this participant leads (its term's signal has not aborted). */
  get isLeader(): boolean {
    const current = this.current;
    return current !== undefined && current.announced && !current.term.signal.aborted && current.lease.isHeld;
  }

  /** The current term, while leading. */
  get term(): LeadershipTerm | undefined {
    return this.isLeader ? this.current!.term : undefined;
  }

  /** Resolves with the term once this participant leads (at once if it does); rejects when `signal` aborts or it closes. */
  whenLeader(signal?: AbortSignal): Promise<LeadershipTerm> {
    const term = this.term;
    if (term) return Promise.resolve(term);
    if (this.closed) return Promise.reject(new LockLostError(this.name, 'stepped-down'));
    // Awaited like an acquire: it keeps the process alive (see keepAliveUntilSettled).
    return this.engine.connection.keepAliveUntilSettled(new Promise((resolve, reject) => {
      const onGained = (gained: LeadershipTerm) => finish(() => resolve(gained));
      const onAbort = () => finish(() => reject(signal!.reason));
      const onClosed = () => finish(() => reject(new LockLostError(this.name, 'stepped-down')));
      const finish = (settle: () => void) => {
        this.off('gained', onGained);
        this.off('closed', onClosed);
        signal?.removeEventListener('abort', onAbort);
        settle();
      };
      if (signal?.aborted) return reject(signal.reason);
      this.on('gained', onGained);
      this.on('closed', onClosed);
      signal?.addEventListener('abort', onAbort, { once: true });
    }));
  }

  /** Ends the current term (its signal aborts, then its node goes) and queues again at the tail. */
  stepDown(): Promise<void> {
    return this.endTerm('stepped-down');
  }

  private async endTerm(reason: 'stepped-down' | 'revoked', lease = this.current?.lease): Promise<void> {
    const current = this.current;
    if (!current || current.lease !== lease) return;
    current.end(reason);
    await current.lease.release();
  }

  /** Leaves the election: ends the current term (signal first, then the node) or stops queueing. Idempotent. */
  close(): Promise<void> {
    return this.engine.connection.keepAliveUntilSettled(this.leave());
  }

  private async leave(): Promise<void> {
    if (this.closed) return this.campaigning;
    this.closed = true;
    this.stopWatchingEngine?.();
    this.cancelQueueing?.();
    this.current?.end('stepped-down');
    this.emit('closed');
    await this.campaigning;
  }

  /** Every participant in queue order (the first leads), with the id its node carries. */
  async participants(): Promise<Participant[]> {
    const session = await this.engine.connection.whenConnected();
    let children: string[];
    try {
      children = (await session.getChildren(this.path)).children;
    } catch (error) {
      if (isZkCode(error, ZkCode.NONODE)) return [];
      throw error;
    }
    const sorted = sortChildren(children.filter((c) => c.includes(LATCH_NODE)), [LATCH_NODE]);
    const read = await Promise.all(
      sorted.map((node) =>
        session.getData(joinPath(this.path, node)).then(
          ({ data }) => data.toString('utf8'),
          (error: unknown) => (isZkCode(error, ZkCode.NONODE) ? undefined : Promise.reject(error)),
        ),
      ),
    );
    const present = sorted.map((node, i) => ({ node, id: read[i] })).filter((p): p is { node: string; id: string } => p.id !== undefined);
    return present.map((p, i) => ({ ...p, isLeader: i === 0 }));
  }

  /** The current leader, or null when nobody takes part. */
  async leader(): Promise<Participant | null> {
    return (await this.participants())[0] ?? null;
  }

  private async campaign(): Promise<void> {
    let failures = 0;
    let lastProblem = '';
    while (!this.closed) {
      let lease: NodeLease;
      try {
        const entry = await acquireInQueue(this.engine, this.spec, { onCancellable: (cancel) => (this.cancelQueueing = cancel) });
        // Not revocable: a request is ignored, but it replaced our participant id (the node's data,
        // which Curator and participants() read): write the id back, unless that would deafen a
        // LeaderLatch (see restoreId).
        const revocable = this.revocable
          ? (revoked: Lease) => {
              void this.warnIfForeignNext(revoked as NodeLease); // its listing goes out before our delete
              void this.endTerm('revoked', revoked as NodeLease);
            }
          : (asked: Lease) => void this.restoreId(asked as NodeLease);
        lease = new NodeLease(this.engine, this.name, entry, { kind: 'leadership', lockPath: this.path, revocable });
        failures = 0;
      } catch (error) {
        if (this.closed || this.engine.isShuttingDown || this.engine.connection.state === 'closed') break;
        // An error from the server (e.g. NOAUTH on the election's parent): say so once per kind,
        // and try again with a growing pause instead of spinning.
        // By kind (a ZooKeeper error's code): the message names the node tried, new at each attempt.
        const problem = error instanceof ZkError ? `ZkError ${error.codeName}` : String(error);
        if (problem !== lastProblem) this.engine.warn(`leader election ${JSON.stringify(this.name)} cannot queue (${String(error)}); retrying`);
        lastProblem = problem;
        await sleep(this.engine.connection.clock, Math.min(5000, 100 * 2 ** failures++));
        continue;
      } finally {
        this.cancelQueueing = undefined;
      }
      if (this.closed) {
        await lease.release();
        break;
      }
      await this.lead(lease);
    }
  }

  /** The lease whose ignored revoke request was last reported (one warning per term). */
  private warnedMarkerKept: NodeLease | undefined;

  /**
   * A non-revocable leader asked to let go: writes its id back over the marker, only when a fresh
   * listing shows nothing but our participants. With a LeaderLatch in the election the marker
   * stays (our id reads `__REVOKE__` until the term ends): a second write into our node would
   * spend the watch of a latch that set it on our node after the first, and that latch would never
   * take over. (A latch that joins between the listing and the write is not seen: a window of one
   * round trip, right after the request.)
   */
  private async restoreId(lease: NodeLease): Promise<void> {
    let children: string[];
    try {
      children = (await lease.session.getChildren(this.path)).children;
    } catch {
      return; // the session's trouble ends the term or is retried at the next request
    }
    const foreign = foreignParticipants(children);
    if (foreign.length > 0) {
      if (this.warnedMarkerKept !== lease) {
        this.warnedMarkerKept = lease;
        this.engine.warn(
          `leader election ${JSON.stringify(this.name)}: a request to let go was ignored (not revocable), and its marker stays as ` +
            `the leader's id: the election has participants that are not this library's (${foreign.join(', ')}; a Curator ` +
            `LeaderLatch stops watching the node ahead of it when its data changes, so writing our id back could leave it never leading)`,
        );
      }
      return;
    }
    if (!lease.isHeld) return;
    await lease.session.setData(lease.path, this.idBytes).catch(() => undefined);
  }

  /**
   * A revocable leader stepping down on a request: the request (Curator's Revoker: ours refuse
   * such an election) spent the watch of a LeaderLatch waiting right behind us, which therefore
   * does not notice that we go. Nothing we can do revives it; say so, since the election may
   * have no leader until that latch's client reconnects or restarts.
   */
  private async warnIfForeignNext(lease: NodeLease): Promise<void> {
    let children: string[];
    try {
      children = (await lease.session.getChildren(this.path)).children;
    } catch {
      return;
    }
    const ours = lease.path.slice(this.path.length + 1);
    const sorted = sortChildren([...new Set([...children.filter((c) => c.includes(LATCH_NODE)), ours])], [LATCH_NODE]);
    const next = sorted[sorted.indexOf(ours) + 1];
    if (next === undefined || isOwnParticipantNode(next)) return;
    this.engine.warn(
      `leader election ${JSON.stringify(this.name)}: the leader stepped down on a request to let go (revoke), and the participant ` +
        `next in line, ${next}, is not this library's: a Curator LeaderLatch stops watching the node ahead of it when that node's ` +
        `data changes (the request did that), so it may not take over until its client reconnects or restarts. ` +
        `Do not revoke leaders of elections with LeaderLatch participants (Curator's Revoker); close the leader instead.`,
    );
  }

  /** One term: until the lease is lost or ended here. The term's signal aborts before the node goes. */
  private async lead(lease: NodeLease): Promise<void> {
    const controller = new AbortController();
    const term: LeadershipTerm = { signal: controller.signal, fencingToken: lease.fencingToken, path: lease.path, sessionId: lease.sessionId };
    const ended = new Promise<LockLostReason>((resolve) => {
      const finish = (reason: LockLostReason) => {
        lease.signal.removeEventListener('abort', onLost);
        // Synchronously, so that whoever ends the term (stepDown) deletes the node only after this.
        if (!controller.signal.aborted) controller.abort(new LockLostError(this.name, reason));
        resolve(reason);
      };
      const onLost = () => finish((lease.signal.reason as LockLostError).reason);
      lease.signal.addEventListener('abort', onLost, { once: true });
      this.current = { term, lease, announced: false, end: finish };
    });
    // Announce only once loss detection (the node's watch) is in place.
    await lease.watchNode();
    const current = this.current;
    if (current?.lease === lease && !controller.signal.aborted && lease.isHeld) {
      current.announced = true;
      this.tell('gained', term);
    }
    const reason = await ended;
    this.current = undefined;
    try {
      if (current?.announced) this.tell('lost', term, reason);
    } finally {
      await lease.release(); // after the signal: nobody else may lead while our term still runs
    }
  }
}
