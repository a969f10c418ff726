// Cooperative revocation across Curator and our library (fact sheet §1.7, §7.2 testRevoking):
// whoever wants a lock writes "__REVOKE__" to its holder's node; a holder that listens lets go.
// Both directions against Apache Curator on the same paths, and a Node-only check that the
// marker cannot be written past the lock's ACL. The Curator tests need java + javac and Debian's
// libcurator-*-java jars and are skipped without them.
import { randomUUID } from 'node:crypto';
import { LockLostError } from '../../lib/core/errors.js';
import type { Lease } from '../../lib/core/lease.js';
import { LockEngine, SECURE_PARENT_ACL } from '../../lib/core/lock-engine.js';
import { Mutex } from '../../lib/core/mutex.js';
import { ReadWriteLock } from '../../lib/core/read-write-lock.js';
import { REVOKE_MARKER, revokeHolders } from '../../lib/core/revocation.js';
import type { ZkConnection } from '../../lib/core/zk-connection.js';
import { ZkError } from '../../lib/core/zk-error.js';
import { CuratorPeer, curatorPeerUnavailableReason } from '../support/curator-peer.js';
import { closeAll, connect, eventually, uniquePath } from '../support/helpers.js';

const unavailable = curatorPeerUnavailableReason();
if (unavailable) console.warn(`Skipping the Curator revocation interop tests: ${unavailable}`);
const describeInterop = unavailable ? describe.skip : describe;

afterAll(closeAll);

/** Resolves 'pending' if `promise` has not settled within `ms`. */
function stillPending(promise: Promise<unknown>, ms = 500): Promise<unknown> {
  return Promise.race([promise.then(() => 'settled', () => 'settled'), new Promise((r) => setTimeout(() => r('pending'), ms))]);
}

/** `promise`, or a rejection naming `what` if it has not settled within `ms`. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** The reason `signal` aborts with (at once if it already has). */
function abortReason(signal: AbortSignal): Promise<unknown> {
  if (signal.aborted) return Promise.resolve(signal.reason);
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(signal.reason), { once: true }));
}

/** Session ids compared as numbers (hex with or without padding). */
function sameSession(a: string, b: string): boolean {
  return BigInt(`0x${a}`) === BigInt(`0x${b}`);
}

describeInterop('Revocation ↔ Curator (Revoker / makeRevocable) on one path', () => {
  const root = `/interop/revocation-${randomUUID().slice(0, 8)}`;
  let connection: ZkConnection;
  let engine: LockEngine;
  let curator: CuratorPeer;

  beforeAll(async () => {
    [curator, connection] = await Promise.all([CuratorPeer.start(process.env.ZK_CONNECT!), connect({ sessionTimeoutMs: 10_000 })]);
    engine = new LockEngine(connection, { app: 'revocation-interop' });
  });
  afterAll(async () => {
    await engine?.drain();
    await curator?.close();
  });

  describe('we ask, a revocable Curator holder lets go', () => {
    it('mutex: revokeHolders asks the one Curator holder; its listener releases and our waiter gets in', async () => {
      const path = `${root}/a-mutex`;
      await curator.mutex('am', path);
      await curator.revocable('am', 'release');
      expect(await curator.acquire('am', 10_000)).toBe(true);
      const [javaNode] = await curator.participants('am');
      const waiting = new Mutex(engine, 'a-mutex', path).acquire({ waitMs: 60_000 });
      await eventually(async () => (await curator.participants('am')).length === 2);

      const asked = await revokeHolders(connection, path);
      expect(asked).toHaveLength(1);
      expect(asked[0]).toMatchObject({ node: javaNode, path: `${path}/${javaNode}`, holds: true });
      expect(sameSession(asked[0]!.sessionId, curator.sessionIdAtStart)).toBe(true);

      const lease = await within(waiting, 5000, 'our mutex after the revocation');
      expect(await curator.revocations('am')).toBe(1);
      await eventually(async () => !(await curator.isAcquired('am')), 5000);
      expect(await curator.stat(`${path}/${javaNode}`)).toBeNull(); // Curator deleted its node
      await lease.release();
    });

    it.each([
      ['write', 'writeAcquire', /__WRIT__\d{10}$/],
      ['read', 'readAcquire', /__READ__\d{10}$/],
    ] as const)('read-write: revokeHolders asks the Curator %s holder; it releases that half and our writer gets in', async (mode, acquire, nodePattern) => {
      const path = `${root}/a-rw-${mode}`;
      const id = `a${mode}`;
      await curator.rw(id, path);
      await curator.revocable(id, 'release');
      expect(await curator[acquire](id, 10_000)).toBe(true);
      const [javaNode] = await curator.participants(id);
      expect(javaNode).toMatch(nodePattern);
      const waiting = new ReadWriteLock(engine, `a-rw-${mode}`, path).write.acquire({ waitMs: 60_000 });
      await eventually(async () => (await curator.participants(id)).length === 2);

      const asked = await revokeHolders(connection, path);
      expect(asked).toHaveLength(1);
      expect(asked[0]).toMatchObject({ node: javaNode, path: `${path}/${javaNode}`, mode, holds: true });

      const lease = await within(waiting, 5000, 'our writer after the revocation');
      expect(await curator.revocations(id)).toBe(1);
      await eventually(async () => !(await curator.isAcquired(id)), 5000);
      await lease.release();
    });
  });

  describe('Curator asks (Revoker.attemptRevoke), our revocable holder is told', () => {
    it('revocable: true — the signal aborts with reason "revoked", the lease stays held until we release', async () => {
      const path = `${root}/b-true`;
      const lease = await new Mutex(engine, 'b-true', path, { revocable: true }).acquire();
      const aborted = abortReason(lease.signal);
      await curator.mutex('bt', path);
      const javaWaiting = curator.acquire('bt', 60_000);
      await eventually(async () => (await curator.participants('bt')).length === 2);
      expect(lease.signal.aborted).toBe(false);

      await curator.revoke(lease.path);
      const reason = await within(aborted, 10_000, 'our lease signal after Curator revoked');
      expect(reason).toBeInstanceOf(LockLostError);
      expect(reason).toMatchObject({ reason: 'revoked', lockName: 'b-true' });
      expect(lease.isHeld).toBe(true);
      expect((await curator.stat(lease.path))?.data).toBe(REVOKE_MARKER);
      // Still ours: the marker woke Curator's waiter (it watches our node's data), which keeps waiting.
      expect(await stillPending(javaWaiting, 1000)).toBe('pending');
      expect(await curator.isAcquired('bt')).toBe(false);

      await lease.release();
      expect(await within(javaWaiting, 10_000, "Curator's acquire after our release")).toBe(true);
      await curator.release('bt');
    });

    it('revocable: (lease) => release — called once, and the Curator waiter gets in with nothing else done', async () => {
      const path = `${root}/b-fn`;
      const told: Lease[] = [];
      const lease = await new Mutex(engine, 'b-fn', path, {
        revocable: (held) => {
          told.push(held);
          void held.release();
        },
      }).acquire();
      await curator.mutex('bf', path);
      const javaWaiting = curator.acquire('bf', 60_000);
      await eventually(async () => (await curator.participants('bf')).length === 2);

      await curator.revoke(lease.path);
      expect(await within(javaWaiting, 10_000, "Curator's acquire after the revocation")).toBe(true);
      expect(told).toHaveLength(1);
      expect(told[0]!.path).toBe(lease.path);
      expect(lease.isHeld).toBe(false);
      await curator.release('bf');
      expect(told).toHaveLength(1);
    });
  });

  describe('a Curator holder that does not let go keeps the lock (revocation is a request)', () => {
    it('without makeRevocable: the marker is written, our waiter keeps waiting, Curator still holds', async () => {
      const path = `${root}/c-plain`;
      await curator.mutex('cp', path);
      expect(await curator.acquire('cp', 10_000)).toBe(true);
      const [javaNode] = await curator.participants('cp');
      const waiting = new Mutex(engine, 'c-plain', path).acquire({ waitMs: 60_000 });
      await eventually(async () => (await curator.participants('cp')).length === 2);

      const asked = await revokeHolders(connection, path);
      expect(asked.map((c) => c.path)).toEqual([`${path}/${javaNode}`]);
      expect((await curator.stat(`${path}/${javaNode}`))?.data).toBe(REVOKE_MARKER);
      // The marker wakes our waiter (it watches the holder's node); it must re-check and wait on.
      expect(await stillPending(waiting, 1000)).toBe('pending');
      expect(await curator.isAcquired('cp')).toBe(true);

      await curator.release('cp');
      const lease = await within(waiting, 10_000, 'our mutex after Curator released');
      await lease.release();
    });

    it('revocable but only recording: the listener runs once, Curator still holds, our waiter keeps waiting', async () => {
      const path = `${root}/c-record`;
      await curator.mutex('cr', path);
      await curator.revocable('cr', 'record');
      expect(await curator.acquire('cr', 10_000)).toBe(true);
      const waiting = new Mutex(engine, 'c-record', path).acquire({ waitMs: 60_000 });
      await eventually(async () => (await curator.participants('cr')).length === 2);

      expect(await revokeHolders(connection, path)).toHaveLength(1);
      await eventually(async () => (await curator.revocations('cr')) === 1, 10_000);
      expect(await stillPending(waiting, 1000)).toBe('pending');
      expect(await curator.isAcquired('cr')).toBe(true);
      expect(await curator.revocations('cr')).toBe(1);

      await curator.release('cr');
      const lease = await within(waiting, 10_000, 'our mutex after Curator released');
      await lease.release();
    });
  });
});

describe('revocation and access control (Node only)', () => {
  const ALICE = { scheme: 'digest', credentials: 'alice:s3cret-alice' };

  it('without the owner\'s credentials revokeHolders fails with NOAUTH and the holder is not told; with them it is', async () => {
    const lockPath = `${uniquePath('revoke-acl')}/orders`;
    const alice = new LockEngine(await connect({ auth: ALICE }), { parentAcl: SECURE_PARENT_ACL });
    const lease = await new Mutex(alice, 'orders', lockPath, { revocable: true }).acquire();
    const aborted = abortReason(lease.signal);

    const anonymous = await connect();
    const bob = await connect({ auth: { scheme: 'digest', credentials: 'bob:other' } });
    for (const intruder of [anonymous, bob]) {
      const error = await revokeHolders(intruder, lockPath).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ZkError);
      expect(error).toMatchObject({ codeName: 'NOAUTH' });
    }
    // A read on the holder's session after the attempts: a data watch event would have come first.
    const { data } = await alice.connection.session!.getData(lease.path);
    expect(data.toString()).not.toBe(REVOKE_MARKER);
    expect(await stillPending(aborted, 500)).toBe('pending');
    expect(lease.signal.aborted).toBe(false);
    expect(lease.isHeld).toBe(true);

    // The same credentials may ask (the control: the holder does hear a request that gets through).
    const alice2 = await connect({ auth: ALICE });
    const asked = await revokeHolders(alice2, lockPath);
    expect(asked.map((c) => c.path)).toEqual([lease.path]);
    expect(await within(aborted, 10_000, 'the holder told by an authorised revoke')).toMatchObject({ name: 'LockLostError', reason: 'revoked' });
    expect(lease.isHeld).toBe(true);
    await lease.release();
  });
});
