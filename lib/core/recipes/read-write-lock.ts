import { optionalPositiveInteger } from '../validation.js';
import { LockUsageError } from '../errors.js';
import type { LockEngine } from '../lock-engine.js';
import { heldByChain } from '../leases/lock-context.js';
import type { AcquireOptions } from '../queue/acquire-options.js';
import { acquireInQueue, type QueueSpec } from '../queue/lock-queue.js';
import { checkRecipeOptions, LockRecipe, type AcquireCall } from './lock-recipe.js';
import { NodeLease, type Lease } from '../leases/lease.js';
import { checkRevocable, type Revocable } from './revocation.js';
import type { ZkSession } from '../client/session.js';
import { READ_NODE, READ_WRITE_MARKERS, WRITE_NODE } from './node-names.js';
import { nestedWait } from '../deadlocks.js';
import { parentOf } from '../paths.js';

/** What both halves' leases get: the max hold time and how they hear revocation. */
interface HeldOptions {
  leaseMs: number | undefined;
  revocable: Revocable | undefined;
}

export interface ReadWriteLockOptions {
  /** Max hold time in ms of each half's leases. */
  leaseMs?: number;
  /** Both halves' holders listen for requests to let go (see `MutexOptions.revocable`). */
  revocable?: Revocable;
}

/**
 * Curator's InterProcessReadWriteLock layout: readers `_c_<uuid>-__READ__<seq>` and writers
 * `_c_<uuid>-__WRIT__<seq>` queue under one path. Readers share; a reader waits for every writer
 * that queued before it (no writer starvation); writers are exclusive. Both halves are
 * re-entrant; the write holder may take the read lock (downgrade); read → write is refused.
 * @publicApi
 */
export class ReadWriteLock {
  readonly read: ReadLock;
  readonly write: WriteLock;

  constructor(engine: LockEngine, name: string, path: string, options?: ReadWriteLockOptions) {
    options = checkRecipeOptions(options);
    const held = { leaseMs: optionalPositiveInteger(options.leaseMs, 'leaseMs'), revocable: checkRevocable(options.revocable) };
    this.write = new WriteLock(engine, name, path, held);
    this.read = new ReadLock(engine, name, path, held, this.write);
  }
}

export class WriteLock extends LockRecipe {
  readonly kind = 'write';
  private readonly spec: QueueSpec;

  constructor(
    engine: LockEngine,
    name: string,
    path: string,
    private readonly held: HeldOptions,
  ) {
    super(engine, name, path, true);
    this.spec = {
      lockName: name,
      kind: 'write',
      lockPath: path,
      parentPath: path,
      nodeName: WRITE_NODE,
      sortMarkers: READ_WRITE_MARKERS,
      // Exclusive over readers and writers alike. Never "holds when gone": a downgrading holder
      // can add a read node level with its writer just before releasing it.
      evaluate: (sorted, index) => (index === 0 ? { holds: true } : { holds: false, watch: sorted[index - 1]!, holdsWhenGone: false }),
    };
  }

  /** @internal The write lease this call chain holds, if any. */
  heldLease(): Lease | undefined {
    const held = heldByChain(this.contextKey);
    return held?.isHeld ? held : undefined;
  }

  protected async acquireNew(options: AcquireOptions, { trace, held }: AcquireCall): Promise<Lease> {
    if (heldByChain(this.keyFor('read'))?.isHeld) {
      throw new LockUsageError(
        `Lock ${JSON.stringify(this.name)}: this call chain holds the read lock and asked for the write lock; ` +
          'upgrading would deadlock (release the read lock first)',
      );
    }
    const entry = await acquireInQueue(this.engine, this.spec, { ...options, trace, nested: nestedWait(this.engine, this.name, held) });
    return new NodeLease(this.engine, this.name, entry, this.leaseOptions(this.held.leaseMs, this.held.revocable));
  }
}

export class ReadLock extends LockRecipe {
  readonly kind = 'read';

  constructor(
    engine: LockEngine,
    name: string,
    path: string,
    private readonly held: HeldOptions,
    private readonly writeLock: WriteLock,
  ) {
    super(engine, name, path, true);
  }

  protected async acquireNew(options: AcquireOptions, { trace, held }: AcquireCall): Promise<Lease> {
    const writeLease = this.writeLock.heldLease();
    const spec: QueueSpec = writeLease ? this.downgradeSpec(writeLease) : this.spec(() => undefined);
    // A downgrade does not wait for its own writer: that hold is no part of a cycle.
    const nested = nestedWait(this.engine, this.name, held.filter((lease) => parentOf(lease.path) !== this.path));
    const entry = await acquireInQueue(this.engine, spec, { ...options, trace, nested });
    return new NodeLease(this.engine, this.name, entry, this.leaseOptions(this.held.leaseMs, this.held.revocable));
  }

  /** An ordinary reader waits for every writer queued before it (`ownWriter` aside). */
  private spec(ownWriter: () => string | undefined): QueueSpec {
    return {
      lockName: this.name,
      kind: 'read',
      lockPath: this.path,
      parentPath: this.path,
      nodeName: READ_NODE,
      sortMarkers: READ_WRITE_MARKERS,
      evaluate: (sorted, index) => {
        const skip = ownWriter();
        for (let i = 0; i < index; i++) {
          const name = sorted[i]!;
          if (name.includes(WRITE_NODE) && name !== skip) return { holds: false, watch: name, holdsWhenGone: false };
        }
        return { holds: true };
      },
    };
  }

  /**
   * Downgrade (Curator 5.5+): the read node takes the writer's sequence, so it sorts level with the
   * writer and ahead of any writer queued since; EPHEMERAL, not sequential. That is safe only while
   * the writer's node exists when the read node is made: a read node with the suffix of a writer
   * already gone sorts ahead of writers that queued (or even held and left) since, and its token
   * is lower than theirs. The queue retries through reconnects and in new sessions with this same
   * spec, so the choice is made at each attempt (the queue reads `fixedSuffix` as it creates) and
   * checked against every listing, never once up front.
   */
  private downgradeSpec(writeLease: Lease): QueueSpec {
    const ownWriter = writeLease.path.slice(writeLease.path.lastIndexOf('/') + 1);
    const suffix = ownWriter.slice(-10);
    const connection = this.engine.connection;
    // Once a listing lacked our writer's node it never comes back (its name is unique).
    let writerGone = false;
    // What the current attempt decided, the session it runs in, and whether its node is being dropped.
    let attempt: { session: ZkSession | undefined; fixed: boolean; dropping: boolean } = { session: undefined, fixed: false, dropping: false };
    const writerLive = (session: ZkSession | undefined) =>
      !writerGone && session !== undefined && connection.state === 'connected' && writeLease.isHeld && writeLease.sessionId === session.id;
    // Only a read node level with our live writer may pass it; an ordinary one waits for it too.
    const base = this.spec(() => (attempt.fixed ? ownWriter : undefined));
    const engine = this.engine;
    return {
      ...base,
      // Read by the queue right before each create (and again once it holds).
      get fixedSuffix(): string | undefined {
        const session = connection.session;
        attempt = { session, fixed: writerLive(session), dropping: false };
        return attempt.fixed ? suffix : undefined;
      },
      evaluate: (sorted, index) => {
        if (!attempt.fixed) return base.evaluate(sorted, index);
        const ours = sorted[index]!;
        // This fresh listing shows our writer's node (ours: its name is unique) next to our read
        // node: both existed at once, so no later writer can get ahead of the read node.
        if (!attempt.dropping && sorted.includes(ownWriter) && writerLive(attempt.session)) return base.evaluate(sorted, index);
        // The writer went (or is no longer ours to rely on) before the read node was confirmed:
        // drop the node and queue again as an ordinary reader (sequential node, fresh token).
        // Until it is gone, wait on it: it never holds.
        if (!sorted.includes(ownWriter)) writerGone = true;
        if (!attempt.dropping && attempt.session) engine.background(engine.ops.deleteGuaranteed(attempt.session, `${this.path}/${ours}`));
        attempt.dropping = true;
        return { holds: false, watch: ours, holdsWhenGone: false };
      },
    };
  }
}
