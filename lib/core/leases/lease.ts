import { NodeWatch } from '../operations/node-watch.js';
import { LockLostError, type LockLostReason } from '../errors.js';
import { publish } from '../diagnostics.js';
import type { LockEngine, SessionBound } from '../lock-engine.js';
import type { QueueEntry } from '../queue/lock-queue.js';
import { parentOf } from '../paths.js';
import { isRevokeRequest } from '../operations/holder-data.js';
import type { Revocable } from '../recipes/revocation.js';
import type { Clock, ClockTimer } from '../clock.js';
import type { HoldTrace } from '../tracing.js';

/**
 * A held lock (or one semaphore lease). Release it exactly when done; releasing twice, or after
 * the lock was lost, is a no-op.
 * @publicApi
 */
export interface Lease extends AsyncDisposable {
  /** The lock's name as given (or its absolute path). */
  readonly name: string;
  /** Full path of our lock node. */
  readonly path: string;
  /**
   * Strictly increasing across successive holders of this lock for the life of the ensemble
   * (the lock parent's czxid × 2^32 + our node's sequence). A data store rejects writes carrying
   * a token lower than the highest it has seen.
   */
  readonly fencingToken: bigint;
  /** Aborts with a LockLostError when the lock is lost while held. */
  readonly signal: AbortSignal;
  /** The ZooKeeper session that owns the node (hex). */
  readonly sessionId: string;
  /** True until released or lost. */
  readonly isHeld: boolean;
  release(): Promise<void>;
}

export interface LeaseOptions {
  /** For diagnostics events: the recipe kind and lock path this lease belongs to. */
  kind?: string;
  lockPath?: string;
  /** Publish no diagnostics events (internal locks). */
  silent?: boolean;
  /** Max hold time: the lease releases itself after this long and its signal aborts ('lease-expired'). */
  leaseMs?: number;
  /** Called once when the lease stops being held (released or lost), before its lock is given up. */
  onEnd?: (reason: LockLostReason | 'released') => void;
  /** Listen for revocation requests (see `Revocable`). */
  revocable?: Revocable;
  /** `release()` resolves once the delete is queued on the session, not confirmed (see `MutexOptions.releaseInBackground`). */
  releaseInBackground?: boolean;
}

/**
 * What every held lease does the same way: idempotent release, the lost signal, `leaseMs`, and
 * the released / lost diagnostics events. A subclass says how the lock is given up (`free`) and
 * how loss is noticed once someone looks at the signal (`armSignal`).
 */
const ABORTED = Object.getOwnPropertyDescriptor(AbortSignal.prototype, 'aborted')!.get! as (this: AbortSignal) => boolean;
const REASON = Object.getOwnPropertyDescriptor(AbortSignal.prototype, 'reason')!.get! as (this: AbortSignal) => unknown;
const THROW_IF_ABORTED = AbortSignal.prototype.throwIfAborted as (this: AbortSignal) => void;

export abstract class HeldLease implements Lease {
  abstract readonly sessionId: string;
  abstract readonly path: string;
  abstract readonly fencingToken: bigint;
  private readonly heldSince: number;
  /** Made when first needed: most leases are released without anyone reading the signal. */
  private controller: AbortController | undefined;
  private ended = false;
  private releasing: Promise<void> | undefined;
  /** Settles once loss detection is in place (e.g. the watch's reply came). */
  private armed: Promise<boolean> | undefined;
  private readonly leaseTimer: ClockTimer | undefined;
  /** @internal The hold's span while tracing: ends with the lease. */
  hold: HoldTrace | undefined;

  constructor(
    readonly name: string,
    protected readonly options: LeaseOptions,
    /** The connection's clock: the hold's start and its `leaseMs` timer. */
    protected readonly clock: Clock,
  ) {
    this.heldSince = clock.now();
    if (options.leaseMs !== undefined) {
      this.leaseTimer = clock.setTimeout(() => {
        this.lose('lease-expired');
        void this.free();
      }, options.leaseMs);
    }
  }

  /** Gives the lock up (after the lease ended); resolves when done, never rejects. */
  protected abstract free(): Promise<void>;
  /**
   * Starts noticing loss that nothing else reports (e.g. our node deleted by someone); resolves
   * true once that is in place, false if it could not be set up (the lease may be lost already).
   */
  protected abstract armSignal(): Promise<boolean>;

  /** Arms loss detection (once); see armSignal. */
  protected arm(): Promise<boolean> {
    this.armed ??= this.ended ? Promise.resolve(false) : this.armSignal();
    return this.armed;
  }

  get isHeld(): boolean {
    return !this.ended;
  }

  /** Noticing loss may cost a request, so it is armed only once someone looks at the signal. */
  get signal(): AbortSignal {
    this.controller ??= this.newController();
    void this.arm();
    return this.controller.signal;
  }

  /**
   * The signal's `aborted`, `reason` and `throwIfAborted()` check the clock (isHeld) first: after
   * a stall past the session's deadline no timer has run yet, and `if (signal.aborted) return;
   * write()` must not see a live signal. Listeners and signals derived from it (AbortSignal.any)
   * hear of the loss when its timer or such a check fires.
   */
  private newController(): AbortController {
    const controller = new AbortController();
    const signal = controller.signal;
    let checking = false;
    const check = () => {
      if (checking || ABORTED.call(signal)) return;
      checking = true;
      try {
        void this.isHeld;
      } finally {
        checking = false;
      }
    };
    Object.defineProperties(signal, {
      aborted: { get: () => (check(), ABORTED.call(signal)) },
      reason: { get: () => (check(), REASON.call(signal)) },
      throwIfAborted: { value: () => (check(), THROW_IF_ABORTED.call(signal)) },
    });
    return controller;
  }

  release(): Promise<void> {
    if (this.releasing) return this.releasing;
    if (this.ended) return Promise.resolve();
    this.end('released');
    if (!this.options.silent) publish('released', () => ({ ...this.describe(), heldMs: this.clock.now() - this.heldSince }));
    this.releasing = this.free();
    return this.releasing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /** Ends the lease as lost: its signal aborts with a LockLostError. Does not free the lock. */
  lose(reason: LockLostReason): void {
    if (this.ended) return;
    this.end(reason);
    if (!this.options.silent) publish('lost', () => ({ ...this.describe(), reason, heldMs: this.clock.now() - this.heldSince }));
    this.controller ??= this.newController();
    this.controller.abort(new LockLostError(this.name, reason));
  }

  /**
   * Aborts the signal (with `reason`) so that the work stops, while the lease stays held until
   * `release()`: the promise holds either way, since nobody else can hold it before that.
   */
  protected interrupt(reason: LockLostReason): void {
    if (this.ended) return;
    this.controller ??= this.newController();
    if (!this.controller.signal.aborted) this.controller.abort(new LockLostError(this.name, reason));
  }

  protected describe() {
    return { name: this.name, path: this.path, lockPath: this.options.lockPath, kind: this.options.kind };
  }

  protected end(reason: LockLostReason | 'released'): void {
    this.ended = true;
    this.clock.clearTimeout(this.leaseTimer);
    this.hold?.end(reason);
    this.options.onEnd?.(reason);
    const listeners = this.endListeners;
    this.endListeners = undefined;
    for (const listener of listeners ?? []) listener();
  }

  /** Made by the first whenEnded (a nested wait recording this lease in its `holds`). */
  private endListeners: Set<() => void> | undefined;

  /** @internal Calls `listener` once the lease ends (released or lost); returns what stops that. */
  whenEnded(listener: () => void): () => void {
    if (this.ended) {
      listener();
      return () => undefined;
    }
    (this.endListeners ??= new Set()).add(listener);
    return () => this.endListeners?.delete(listener);
  }
}

/**
 * @internal Calls `listener` when `lease` is no longer held (released or lost; maybe more than
 * once); returns what stops that. A lease that cannot tell never calls it.
 */
export function onLeaseEnd(lease: Lease, listener: () => void): () => void {
  const watchable = lease as Partial<Pick<HeldLease, 'whenEnded'>>;
  return typeof watchable.whenEnded === 'function' ? watchable.whenEnded(listener) : () => undefined;
}

/** A lease over one node of ours; tells its holder when the node or its session goes away. */
export class NodeLease extends HeldLease implements SessionBound {
  readonly sessionId: string;
  private readonly untrack: () => void;

  constructor(
    private readonly engine: LockEngine,
    name: string,
    private readonly entry: QueueEntry,
    options: LeaseOptions = {},
  ) {
    super(name, options, engine.connection.clock);
    this.sessionId = entry.session.id;
    this.untrack = engine.track(this);
    // A revocable holder listens from the start: a request must not wait for someone to read the signal.
    if (options.revocable) void this.arm();
  }

  get session() {
    return this.entry.session;
  }

  /** Also checks the session's deadline on the clock (the timer may not have run yet after a stall). */
  override get isHeld(): boolean {
    if (super.isHeld && this.engine.connection.session === this.entry.session) this.engine.connection.checkDeadline();
    return super.isHeld;
  }
  get path(): string {
    return this.entry.path;
  }
  get fencingToken(): bigint {
    return this.entry.fencingToken;
  }

  private nodeWatch: NodeWatch | undefined;

  /**
   * Watches our node, so that its deletion by someone else ends the lease; resolves true once
   * the watch is set on the existing node (it stays set whatever else happens to the node).
   */
  watchNode(): Promise<boolean> {
    return this.arm();
  }

  /** True while the deletion watch is known to be set: a deletion would be heard of. */
  get watchArmed(): boolean {
    return this.nodeWatch?.armed === true;
  }

  protected armSignal(): Promise<boolean> {
    const { session, path } = this.entry;
    const onData = this.options.revocable ? (data: Buffer) => this.onNodeData(data) : undefined;
    const unreadable = (error: unknown) =>
      this.engine.warn(
        `Cannot read lock node ${path} of ${JSON.stringify(this.name)} (${String(error)}): requests to let go (revoke) are not heard; ` +
          'its deletion still is',
      );
    this.nodeWatch = new NodeWatch(session, path, () => this.lose('node-deleted'), (s, run) => this.engine.connection.onLinkUp(s, run), onData && { onData, unreadable });
    return this.nodeWatch.ready;
  }

  private revokeHeard = false;
  /** Whether the node's data was the marker at the last read: a listener hears each new request once. */
  private markerSeen = false;

  /** A revocable holder's node data: Curator's revoke marker asks it to let go. */
  private onNodeData(data: Buffer): void {
    const marker = isRevokeRequest(data);
    const isNew = marker && !this.markerSeen;
    this.markerSeen = marker;
    if (!isNew || !this.isHeld) return;
    this.revokeHeard = true;
    if (!this.options.silent) publish('revokeRequested', () => this.describe());
    const revocable = this.options.revocable;
    if (typeof revocable !== 'function') return this.interrupt('revoked');
    try {
      revocable(this);
    } catch (error) {
      this.engine.warn(`The revocation listener of lock ${JSON.stringify(this.name)} threw: ${String(error)}`);
    }
  }

  /**
   * Released after a request to let go (perhaps by the revocation listener, while work under this
   * lease still runs): that work's signal aborts before anyone else can hold the lock.
   */
  override release(): Promise<void> {
    if (this.revokeHeard) this.interrupt('revoked');
    // Pending (a delete retried through a disconnection), it keeps the process alive; a release
    // in the background resolves at once, and its delete does not (see keepAliveUntilSettled).
    return this.engine.connection.keepAliveUntilSettled(super.release());
  }

  onSessionGone(reason: LockLostReason): void {
    this.lose(reason);
  }

  loseAndFree(reason: 'shutdown'): Promise<void> {
    this.lose(reason);
    return this.free();
  }

  protected override end(reason: LockLostReason | 'released'): void {
    this.untrack();
    this.nodeWatch?.stop();
    super.end(reason);
  }

  /**
   * Deletes the node, retrying through disconnections. A refusal no retry can fix leaves the lock
   * taken until the session ends: that is reported (warning, `releaseFailed` event), not thrown,
   * since the holder's work is done and nothing it could do would help.
   */
  protected free(): Promise<void> {
    const { session, path, alone } = this.entry;
    const { ops } = this.engine;
    // Made as the delete is queued (a session's requests go in order, so a create of ours that
    // reads it comes after the delete); it proves nothing until the delete succeeded.
    let release: { deleted: boolean } | undefined;
    const work = ops.deleteGuaranteed(session, path).then(() => {
      if (release) release.deleted = true;
      ops.paths.released(parentOf(path));
    }, (error: unknown) => {
      ops.shortcut.releaseFailed(session, parentOf(path));
      this.engine.warn(
        `Could not delete lock node ${this.entry.path} of ${JSON.stringify(this.name)} on release (${String(error)}): ` +
          `the lock stays taken until this session ends`,
      );
      publish('releaseFailed', () => ({ name: this.name, path: this.path, lockPath: this.options.lockPath, kind: this.options.kind, error }));
    });
    if (alone) release = ops.shortcut.released(session, parentOf(path), alone.parentCzxid, alone.nextSequence, work);
    this.engine.background(work);
    // The delete is queued on the session already: our later requests go after it, shutdown waits for it.
    return this.options.releaseInBackground ? Promise.resolve() : work;
  }
}
