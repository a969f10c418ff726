import { optionalPositiveInteger } from './connection-options.js';
import { LockUsageError } from './errors.js';
import type { LockEngine } from './lock-engine.js';
import { LockContext } from './lock-context.js';
import type { AcquireOptions } from './acquire-options.js';
import { acquireInQueue, type QueueSpec } from './lock-queue.js';
import { checkRecipeOptions, LockRecipe } from './lock-recipe.js';
import { NodeLease, type Lease } from './lease.js';
import { checkRevocable, type Revocable } from './revocation.js';

const READ = '__READ__';
const WRITE = '__WRIT__';
const MARKERS = [READ, WRITE] as const;

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
      nodeName: WRITE,
      sortMarkers: MARKERS,
      // Exclusive over readers and writers alike. Never "holds when gone": a downgrading holder
      // can add a read node level with its writer just before releasing it.
      evaluate: (sorted, index) => (index === 0 ? { holds: true } : { holds: false, watch: sorted[index - 1]!, holdsWhenGone: false }),
    };
  }

  /** The node of the write lock this call chain holds, if any (for a downgrade). */
  heldNodeName(): string | undefined {
    const held = LockContext.heldByChain(this.contextKey);
    return held?.isHeld ? held.path.slice(held.path.lastIndexOf('/') + 1) : undefined;
  }

  protected async acquireNew(options: AcquireOptions): Promise<Lease> {
    if (LockContext.heldByChain(this.keyFor('read'))?.isHeld) {
      throw new LockUsageError(
        `Lock ${JSON.stringify(this.name)}: this call chain holds the read lock and asked for the write lock; ` +
          'upgrading would deadlock (release the read lock first)',
      );
    }
    const entry = await acquireInQueue(this.engine, this.spec, options);
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

  protected async acquireNew(options: AcquireOptions): Promise<Lease> {
    const ownWriter = this.writeLock.heldNodeName();
    const spec: QueueSpec = {
      lockName: this.name,
      kind: 'read',
      lockPath: this.path,
      parentPath: this.path,
      nodeName: READ,
      sortMarkers: MARKERS,
      // Downgrade (Curator 5.5+): the read node takes the writer's sequence, so it sorts level
      // with the writer and ahead of any writer queued since; EPHEMERAL, not sequential.
      fixedSuffix: ownWriter?.slice(-10),
      evaluate: (sorted, index) => {
        for (let i = 0; i < index; i++) {
          const name = sorted[i]!;
          if (name.includes(WRITE) && name !== ownWriter) return { holds: false, watch: name, holdsWhenGone: false };
        }
        return { holds: true };
      },
    };
    const entry = await acquireInQueue(this.engine, spec, options);
    return new NodeLease(this.engine, this.name, entry, this.leaseOptions(this.held.leaseMs, this.held.revocable));
  }
}
