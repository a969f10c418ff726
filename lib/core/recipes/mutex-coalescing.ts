import { Cancellation, notAcquiredError } from '../queue/cancellation.js';
import { publish } from '../diagnostics.js';
import { LockNotAcquiredError, type LockLostReason } from '../errors.js';
import { HeldLease, NodeLease, type Lease, type LeaseOptions } from '../leases/lease.js';
import type { LockEngine } from '../lock-engine.js';
import { MAX_LOCAL_HANDOFFS } from '../lock-engine.js';
import type { AcquireOptions } from '../queue/acquire-options.js';
import { acquireInQueue, type QueueEntry, type QueueSpec } from '../queue/lock-queue.js';
import type { ClockTimer } from '../clock.js';
import type { AcquireTrace } from '../tracing.js';

interface LocalWaiter {
  name: string;
  tryOnce: boolean;
  leaseOptions: LeaseOptions;
  /** The caller's acquire span while tracing. */
  trace: AcquireTrace | undefined;
  cancellation: Cancellation;
  resolve(lease: Lease): void;
  reject(error: unknown): void;
}

/** Our node while it holds, and what we know of it: replaced as a whole by the next node. */
interface OwnNode {
  lease: NodeLease;
  /** Handoffs of this node (the low bits of the fencing token). */
  handoffs: number;
  /** Whether another process may be queueing on the lock, and handoffs made since we knew. */
  othersMayWait: boolean;
  handoffsWhileOthersWait: number;
  /** The node's watches (its deletion, the queue), once requested; handoffs wait until they are set. */
  watched?: Promise<void>;
  watchesSet: boolean;
  /** Kept with no holder (`retainMs`): ends it when the time is up, at a disconnection or at shutdown. */
  retention?: { timer: ClockTimer; stopWatchingEngine: () => void; stopWatchingLink: () => void };
}

export interface LocalQueueOptions {
  fair: boolean;
  /** Local handoffs allowed once another process is seen queueing, before our node goes. */
  maxLocalHandoffs: number;
  /** Keep the node this long after the last local holder while no other process queues (0: never). */
  retainMs?: number;
  /** Our node's release resolves once its delete is sent (MutexOptions.releaseInBackground). */
  releaseInBackground?: boolean;
}

/**
 * In-process coalescing of one lock: the callers of this process wait in memory, in arrival
 * order, behind at most one ZooKeeper node of ours. When that node reaches the head of the
 * ZooKeeper queue the first caller holds; on release the node is handed to the next local caller
 * without a ZooKeeper round trip, unless another process is (or may be) queueing and
 * `maxLocalHandoffs` handoffs were made since, the connection is not healthy, or nobody waits:
 * then the node is deleted and, if callers still wait, a new one queues at the tail. Handoffs
 * start only once a watch on the node is set, so a node deleted by someone is never handed on.
 * `maxLocalHandoffs: 0` never hands over (one node per process, FIFO across processes).
 *
 * Every local holder gets its own lease: its own signal (aborted when the node or its session
 * is lost), its own `leaseMs`, and a fencing token one above the previous holder's (the low bits
 * of the node's token count the handoffs).
 */
export class LocalQueue {
  /** Emptied by the last grant (see grantOrFree): an empty array holds no storage while a lock is held. */
  private waiters: LocalWaiter[] = [];
  private own: OwnNode | undefined;
  private holder: LocalLease | undefined;
  /** Our ZooKeeper acquisition in flight; `cancel` gives it up when every caller has. */
  private acquiring: { cancel?: () => void; cancelled: boolean } | undefined;
  /** A release is waiting for the node's watches before handing over. */
  private handoffPending = false;
  /** The acquire span of the last caller granted our node (a handoff links the next to it). */
  private lastGranted: AcquireTrace | undefined;

  constructor(
    private readonly engine: LockEngine,
    private readonly spec: QueueSpec,
    private readonly options: LocalQueueOptions,
    private readonly unregister: () => void,
  ) {}

  get clock() {
    return this.engine.connection.clock;
  }

  acquire(name: string, options: AcquireOptions, leaseOptions: LeaseOptions, trace?: AcquireTrace): Promise<Lease> {
    const tryOnce = options.waitMs === 0;
    const busy = this.holder !== undefined || this.acquiring !== undefined || this.waiters.length > 0;
    if (tryOnce && busy) {
      // Held here: taken. Only queued here while ZooKeeper is unreachable: that is the reason.
      const reason = this.holder || this.engine.connection.state === 'connected' ? 'timeout' : 'connection';
      return Promise.reject(notAcquiredError(name, reason, true));
    }
    return new Promise<Lease>((resolve, reject) => {
      const waiter = { name, tryOnce, leaseOptions, trace, resolve, reject } as LocalWaiter;
      waiter.cancellation = new Cancellation(this.engine, options, () => waiter.cancellation && this.giveUp(waiter));
      if (waiter.cancellation.current) return this.giveUp(waiter); // already aborted or closed
      this.waiters.push(waiter);
      if (this.own) this.watchForHandoff(this.own);
      // Behind callers of this process: the holder (if any) and those queued before.
      if (busy) trace?.waiting(this.waiters.length - 1 + (this.holder ? 1 : 0), true);
      if (busy && !this.spec.silent) {
        const { lockName, parentPath, kind, lockPath } = this.spec;
        publish('contended', () => ({ name: lockName, path: parentPath, lockPath: lockPath ?? parentPath, kind }));
      }
      this.pump();
    });
  }

  /** A waiter's deadline, signal or connection ended its wait. */
  private giveUp(waiter: LocalWaiter): void {
    waiter.cancellation.dispose();
    const index = this.waiters.indexOf(waiter);
    if (index >= 0) this.waiters.splice(index, 1);
    waiter.reject(waiter.cancellation.notAcquired(waiter.name, waiter.tryOnce));
    // Nobody left to queue for: take our node out of the ZooKeeper queue. Its clean-up goes on in
    // the background; the queue is idle at once (a new caller queues a new node).
    if (this.waiters.length === 0 && this.acquiring) {
      this.acquiring.cancelled = true;
      this.acquiring.cancel?.();
      this.acquiring = undefined;
    }
    this.pump();
  }

  /** Moves the queue on: grant to the next caller, queue a node for them, or go idle. */
  private pump(): void {
    if (this.holder || this.handoffPending) return;
    const own = this.own;
    if (own?.retention) {
      if (this.waiters.length === 0) return;
      // A caller for the node we kept: hand it over as after any hold (same checks, next token).
      this.stopRetaining(own);
      return void this.resumeAfterHold(own);
    }
    if (own) return this.grantOrFree(own);
    if (this.waiters.length > 0) {
      if (!this.acquiring) this.queueNode();
      return;
    }
    if (!this.acquiring) this.unregister();
  }

  private queueNode(): void {
    const acquiring: { cancel?: () => void; cancelled: boolean } = { cancelled: false };
    this.acquiring = acquiring;
    // Only try-once callers: try once on ZooKeeper too.
    const tryOnce = this.waiters.every((w) => w.tryOnce);
    const onCancellable = (cancel: () => void) => (acquiring.cancel = cancel);
    // The node queues for the first caller: it carries that caller's trace context.
    const trace = this.waiters[0]?.trace;
    acquireInQueue(this.engine, this.spec, { fair: this.options.fair, onCancellable, waitMs: tryOnce ? 0 : undefined, trace }).then(
      (entry) => {
        if (this.acquiring !== acquiring) {
          // Given up, but the node held before the cancel got through: let it go.
          this.engine.background(this.engine.ops.deleteGuaranteed(entry.session, entry.path));
          return;
        }
        this.acquiring = undefined;
        this.own = this.ownNode(entry);
        this.pump();
      },
      (error: unknown) => {
        if (this.acquiring !== acquiring) return; // given up: nobody waits for this one
        this.acquiring = undefined;
        if (!acquiring.cancelled) {
          // A taken lock fails the try-once callers only; any other failure fails everyone waiting.
          const taken = error instanceof LockNotAcquiredError && error.reason === 'timeout';
          for (const waiter of [...this.waiters]) {
            if (taken && !waiter.tryOnce) continue;
            this.waiters.splice(this.waiters.indexOf(waiter), 1);
            waiter.cancellation.dispose();
            waiter.reject(taken ? notAcquiredError(waiter.name, 'timeout', true) : error);
          }
        }
        this.pump();
      },
    );
  }

  /**
   * Our node, now at the head. Made here, not in queueNode's callback: the node's onEnd closure
   * lives as long as the node, and would keep queueNode's scope (the finished acquisition and its
   * cancellation) alive with it.
   */
  private ownNode(entry: QueueEntry): OwnNode {
    const own: OwnNode = {
      lease: new NodeLease(this.engine, this.spec.lockName, entry, {
        silent: true, // the local leases publish
        releaseInBackground: this.options.releaseInBackground,
        kind: this.spec.kind,
        lockPath: this.spec.lockPath,
        onEnd: (reason) => this.nodeEnded(own, reason),
      }),
      handoffs: 0,
      othersMayWait: entry.listed > 1,
      handoffsWhileOthersWait: 0,
      watchesSet: false,
    };
    return own;
  }

  /** Our node holds and nobody does locally: the next caller gets it, or the node goes. */
  private grantOrFree(own: OwnNode): void {
    const waiter = this.waiters.shift();
    if (!waiter) {
      this.own = undefined;
      void own.lease.release();
      return this.pump();
    }
    if (this.waiters.length === 0) this.waiters = []; // the grown storage goes with the old array
    waiter.cancellation.dispose();
    if (own.handoffs > 0) waiter.trace?.handedOverBy(this.lastGranted);
    this.lastGranted = waiter.trace;
    const lease = new LocalLease(this, waiter.name, own.lease, own.lease.fencingToken + BigInt(own.handoffs), waiter.leaseOptions);
    this.holder = lease;
    if (this.waiters.length > 0) this.watchForHandoff(own);
    waiter.resolve(lease);
  }

  /** A local holder is done (released, or its leaseMs ran out). */
  handBack(lease: LocalLease): Promise<void> {
    if (this.holder !== lease) return Promise.resolve();
    this.holder = undefined;
    const own = this.own;
    return own ? this.resumeAfterHold(own) : (this.pump(), Promise.resolve());
  }

  /** After a hold: hand over (once the node's watches are in place, if they were just requested). */
  private resumeAfterHold(own: OwnNode): Promise<void> {
    if (this.waiters.length > 0 && own.watched && !own.watchesSet) {
      this.handoffPending = true;
      void own.watched.then(() => {
        this.handoffPending = false;
        if (this.own === own) void this.afterHold(own);
        else this.pump();
      });
      return Promise.resolve();
    }
    return this.afterHold(own);
  }

  /** Between two holders of our node: hand it over locally, keep it (retainMs), or delete it and queue again. */
  private afterHold(own: OwnNode): Promise<void> {
    if (this.waiters.length === 0 && this.retain(own)) return Promise.resolve();
    if (this.waiters.length > 0 && this.mayHandOff(own)) {
      own.handoffs++;
      if (own.othersMayWait) own.handoffsWhileOthersWait++;
      this.grantOrFree(own);
      return Promise.resolve();
    }
    this.own = undefined;
    const freed = own.lease.release();
    this.pump();
    return freed;
  }

  /**
   * Keeps our node with nobody holding it for `retainMs`, while no other process is seen queueing:
   * the next local caller then holds without a request. The queue's watch ends it at once when
   * another process queues (a contender waits one notification and our delete longer).
   */
  private retain(own: OwnNode): boolean {
    const retainMs = this.options.retainMs ?? 0;
    if (retainMs <= 0 || own.othersMayWait || !this.mayHandOff(own) && own.watchesSet) return false;
    if (this.engine.connection.state !== 'connected' || this.engine.isShuttingDown) return false;
    this.watchForHandoff(own);
    const timer = this.engine.connection.clock.setTimeout(() => this.endRetention(own), retainMs).unref();
    own.retention = {
      timer,
      stopWatchingEngine: this.engine.onStop(() => this.endRetention(own)),
      // What we knew of the kept node is unconfirmed once the link drops (someone may delete it
      // meanwhile, and the event comes only after the reconnect): let it go, the next acquire queues.
      stopWatchingLink: this.engine.onDisconnect(() => this.endRetention(own)),
    };
    return true;
  }

  private stopRetaining(own: OwnNode): void {
    if (!own.retention) return;
    this.engine.connection.clock.clearTimeout(own.retention.timer);
    own.retention.stopWatchingEngine();
    own.retention.stopWatchingLink();
    own.retention = undefined;
  }

  /** Gives the kept node up (time is up, another process queues, shutdown). */
  private endRetention(own: OwnNode): void {
    if (this.own !== own || !own.retention) return;
    this.stopRetaining(own);
    this.own = undefined;
    void own.lease.release();
    this.pump();
  }

  private mayHandOff(own: OwnNode): boolean {
    const { connection } = this.engine;
    const node = own.lease;
    return (
      node.isHeld &&
      own.watchesSet &&
      node.watchArmed && // not while re-arming after another event spent it: a deletion could go unheard
      connection.state === 'connected' &&
      connection.session === node.session &&
      !this.engine.isShuttingDown &&
      own.handoffs < MAX_LOCAL_HANDOFFS &&
      this.options.maxLocalHandoffs > 0 &&
      (!own.othersMayWait || own.handoffsWhileOthersWait < this.options.maxLocalHandoffs)
    );
  }

  /**
   * Before our node is handed over locally, two watches per node: on the node itself, so that
   * its deletion by someone else ends it (a local handoff must never go to a deleted node), and
   * on the queue with a listing, to learn whether other processes wait behind us (until the first
   * change, while the listing shows our node alone, handoffs are not limited).
   */
  private watchForHandoff(own: OwnNode): void {
    if (own.watched) return;
    let changed = false;
    const othersQueue = () => {
      own.othersMayWait = true;
      own.handoffsWhileOthersWait = 0;
      this.endRetention(own);
    };
    // Each callback writes only to its own node's state: a later node has its own object.
    const queue = own.lease.session
      .getChildren(this.spec.parentPath, () => {
        changed = true;
        othersQueue();
      })
      .then(
        ({ children }) => {
          if (changed) return;
          const others = children.length > 1;
          if (others && !own.othersMayWait) own.handoffsWhileOthersWait = 0;
          own.othersMayWait = others;
          if (others) this.endRetention(own);
        },
        () => {
          // No listing, so no watch: nobody would tell us when others queue. Assume they do.
          if (!own.othersMayWait) othersQueue();
        },
      );
    // Without the node's watch no handoff: the node is deleted and queued again instead.
    own.watched = Promise.all([own.lease.watchNode(), queue]).then(([nodeWatched]) => {
      own.watchesSet = nodeWatched;
    });
  }

  /** The node ended other than by our release: lost (session, deleted, shutdown). */
  private nodeEnded(own: OwnNode, reason: LockLostReason | 'released'): void {
    this.stopRetaining(own);
    if (this.own !== own) return;
    this.own = undefined;
    const holder = this.holder;
    if (holder) {
      // The node is released only between holders; were it released under one, that one lost it.
      this.holder = undefined;
      holder.lose(reason === 'released' ? 'connection-closed' : reason);
    }
    // Callers still waiting queue a new node (in the next session if this one is gone).
    this.pump();
  }
}

/** A local holder's lease over the shared node. */
export class LocalLease extends HeldLease {
  readonly sessionId: string;
  readonly path: string;

  constructor(
    private readonly queue: LocalQueue,
    name: string,
    private readonly node: NodeLease,
    readonly fencingToken: bigint,
    options: LeaseOptions,
  ) {
    super(name, options, queue.clock);
    this.sessionId = node.sessionId;
    this.path = node.path;
  }

  /** Asking the node checks its session's deadline (ending this lease through the queue if past). */
  override get isHeld(): boolean {
    return super.isHeld && this.node.isHeld && super.isHeld;
  }

  /** The shared node's own watch tells of its deletion (the queue then ends this lease). */
  protected armSignal(): Promise<boolean> {
    return this.node.watchNode();
  }

  protected free(): Promise<void> {
    return this.queue.handBack(this);
  }
}
