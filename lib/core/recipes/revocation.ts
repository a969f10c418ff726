import { InvalidOptionError, LockUsageError } from '../errors.js';
import { inspectLock, sessionFor, type ContenderInfo } from '../inspect.js';
import { isOwnParticipantNode } from './leadership.js';
import type { Lease } from '../leases/lease.js';
import type { ZkConnection } from '../connection/zk-connection.js';
import { REVOKE_MARKER } from '../operations/holder-data.js';
import { isZkCode, ZkCode } from '../client/zk-error.js';

export { REVOKE_MARKER } from '../operations/holder-data.js';
const MARKER_BYTES = Buffer.from(REVOKE_MARKER);

/**
 * Whether (and how) a holder listens for revocation requests, Curator's `makeRevocable`:
 * `true` aborts the lease's `signal` with reason `revoked` (the lock stays held until `release()`);
 * a function is called once with the lease and decides (release it, or not; for a
 * re-entrant mutex it gets the underlying hold, so its release lets go of nested holds too). A revocation is a
 * request: a holder that ignores it keeps the lock. A revocable mutex takes its own node per
 * caller (no in-process coalescing), since a request speaks to one holder.
 * @publicApi
 */
export type Revocable = boolean | ((lease: Lease) => void);

/** Checks a recipe's `revocable` option from untyped callers. */
export function checkRevocable(value: unknown): Revocable | undefined {
  if (value === undefined || typeof value === 'boolean' || typeof value === 'function') return value as Revocable | undefined;
  throw new InvalidOptionError('revocable', 'expected true, false or a function (lease) => void');
}

/**
 * Asks every current holder of the lock at `lockPath` to let go (the mutex holder, the read-write
 * holders, the leader of an election): writes Curator's revoke marker as each holder node's data.
 * Resolves with the holders asked (read just before asking; a holder that left meanwhile is not
 * listed). Only holders that made their lock revocable act on it. Without write permission on the
 * nodes (their creator's ACL) it rejects with a ZkError NOAUTH. A leader election with a
 * participant that is not this library's (a Curator LeaderLatch: `_c_<uuid>-latch-<seq>`, ours
 * are `_c_<uuid>-nzl-latch-<seq>`) is refused with a LockUsageError, decided from the listing
 * read here: the marker would leave a LeaderLatch next in line deaf to the leader's departure
 * (a participant that joins between that listing and the write is not seen: one round trip).
 * @publicApi
 */
export async function revokeHolders(connection: ZkConnection, lockPath: string, options: { signal?: AbortSignal } = {}): Promise<ContenderInfo[]> {
  const lock = await inspectLock(connection, lockPath, { signal: options.signal });
  if (!lock || lock.holders.length === 0) return [];
  if (lock.kind === 'semaphore') throw new LockUsageError(`Lock ${JSON.stringify(lockPath)} is a semaphore: its leases are not revocable (nor are Curator's)`);
  if (lock.kind === 'leadership') {
    const foreign = [...lock.holders, ...lock.waiting].filter((c) => !isOwnParticipantNode(c.node));
    if (foreign.length > 0) {
      throw new LockUsageError(
        `Leader election ${JSON.stringify(lockPath)} has participants that are not this library's ` +
          `(${foreign.map((c) => `${c.node}${c.holds ? ' (the leader)' : ''}`).join(', ')}: Curator LeaderLatch or another client): ` +
          `revoke is refused. It writes into the leader's node, and a LeaderLatch waiting behind it acts only on that node's ` +
          `deletion and stops watching on any change of its data, so it would never take over. Make the leader step down in ` +
          `its own process (Leadership.stepDown() or close(), LeaderLatch.close() in Java).`,
      );
    }
  }
  const session = await sessionFor(connection, 'revoke', options.signal);
  const asked = await Promise.all(
    lock.holders.map((holder) =>
      session.setData(holder.path, MARKER_BYTES).then(
        () => holder,
        (error: unknown) => (isZkCode(error, ZkCode.NONODE) ? undefined : Promise.reject(error)),
      ),
    ),
  );
  return asked.filter((holder): holder is ContenderInfo => holder !== undefined);
}
