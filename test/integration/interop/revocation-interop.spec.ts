// Cooperative revocation across Curator and our library (fact sheet §1.7, §7.2 testRevoking):
// whoever wants a lock writes "__REVOKE__" to its holder's node; a holder that listens lets go.
// Both directions against Apache Curator on the same paths, and a Node-only check that the
// marker cannot be written past the lock's ACL. The Curator tests need java + javac and Debian's
// libcurator-*-java jars and are skipped without them.
import { randomUUID } from 'node:crypto';
import { LockLostError, LockUsageError } from '../../../lib/core/errors.js';
import { Leadership } from '../../../lib/core/recipes/leadership.js';
import { LockService } from '../../../lib/nest/lock.service.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import { LockEngine, SECURE_PARENT_ACL } from '../../../lib/core/lock-engine.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { ReadWriteLock } from '../../../lib/core/recipes/read-write-lock.js';
import { REVOKE_MARKER, revokeHolders } from '../../../lib/core/recipes/revocation.js';
import type { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { ZkError } from '../../../lib/core/client/zk-error.js';
import { CuratorPeer, curatorPeerUnavailableReason } from '../../support/curator-peer.js';
import { closeAll, connect, eventually, uniquePath, zkConnectString } from '../../support/helpers.js';

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

// A LeaderLatch sets a getData watch on the node ahead of it and acts only on its deletion: a
// change of that node's data spends the watch and the latch never watches again, so once the
// leader leaves it never takes over. These check that the library writes nothing into the nodes
// of an election with Curator participants, and that the election goes on after the leader leaves.
describeInterop('Revocation in leader elections with Curator LeaderLatch participants', () => {
  const root = `/interop/revocation-election-${randomUUID().slice(0, 8)}`;
  let connection: ZkConnection;
  let engine: LockEngine;
  let curator: CuratorPeer;
  let service: LockService;

  beforeAll(async () => {
    [curator, connection] = await Promise.all([CuratorPeer.start(process.env.ZK_CONNECT!), connect({ sessionTimeoutMs: 10_000 })]);
    engine = new LockEngine(connection, { app: 'revocation-election-interop' });
    service = new LockService(engine, connection);
  });
  afterAll(async () => {
    await engine?.drain();
    await curator?.close();
  });

  /** Our participant leading `path`, with a started Curator LeaderLatch `latchId` in line behind it. */
  async function oursLeadingLatchBehind(path: string, latchId: string, options: { revocable: boolean }): Promise<Leadership> {
    const ours = new Leadership(engine, path, path, { participantId: `node-${latchId}`, ...options }).start();
    await within(ours.whenLeader(), 10_000, 'our participant leading');
    await curator.latch(latchId, path, `java-${latchId}`);
    await eventually(async () => (await ours.participants()).length === 2, 10_000);
    expect(await curator.latchLeader(latchId)).toBe(`node-${latchId}`);
    // Let the latch set its watch on our node (getData on the node ahead, after its listing).
    await new Promise((resolve) => setTimeout(resolve, 500));
    return ours;
  }

  it.each([
    ['revokeHolders', 'revocable', true],
    ['revokeHolders', 'not revocable', false],
    ['LockService.revoke', 'revocable', true],
    ['LockService.revoke', 'not revocable', false],
  ] as const)('%s on our %s leader with a LeaderLatch next in line is refused, and the latch leads once our leader leaves', async (how, label, revocable) => {
    const id = `${how === 'revokeHolders' ? 'rh' : 'ls'}-${revocable ? 'r' : 'n'}`;
    const path = `${root}/${id}`;
    const ours = await oursLeadingLatchBehind(path, id, { revocable });
    const ourNode = ours.term!.path;

    const outcome = await (how === 'revokeHolders' ? revokeHolders(connection, path) : service.revoke(path)).then(
      (asked) => asked,
      (error: unknown) => error,
    );
    // What matters first: the election goes on when the leader leaves.
    await new Promise((resolve) => setTimeout(resolve, 500));
    await ours.close();
    await within(
      eventually(() => curator.hasLeadership(id), 10_000, 50),
      15_000,
      `the LeaderLatch leading after our ${label} leader left (revoke: ${outcome instanceof Error ? outcome.name : 'written'})`,
    );
    expect(outcome).toBeInstanceOf(LockUsageError);
    expect((outcome as Error).message).toMatch(/not this library's.*_c_[0-9a-f-]{36}-latch-\d{10}.*LeaderLatch/s);
    expect(await curator.stat(ourNode)).toBeNull();
    await curator.latchClose(id);
  });

  it('a revoke of a LeaderLatch leader is refused (its node is not written) and our participant behind it leads once it closes', async () => {
    const path = `${root}/latch-leads`;
    await curator.latch('ll', path, 'java-ll');
    await eventually(() => curator.hasLeadership('ll'), 10_000);
    const ours = new Leadership(engine, path, path, { participantId: 'node-ll', revocable: true }).start();
    await eventually(async () => (await ours.participants()).length === 2, 10_000);
    const [latchNode] = (await curator.children(path))!.filter((c) => !c.includes('-nzl-'));

    await expect(service.revoke(path)).rejects.toThrow(LockUsageError);
    expect((await curator.stat(`${path}/${latchNode}`))?.data).toBe('java-ll');

    await curator.latchClose('ll');
    await within(ours.whenLeader(), 10_000, 'our participant leading after the LeaderLatch closed');
    await ours.close();
  });

  it('a revoke in an election of our participants only still works: the revocable leader steps down and the next one leads', async () => {
    const path = `${root}/ours-only`;
    const otherEngine = new LockEngine(await connect({ sessionTimeoutMs: 10_000 }), { app: 'revocation-election-interop-2' });
    const first = new Leadership(engine, path, path, { participantId: 'first', revocable: true }).start();
    await within(first.whenLeader(), 10_000, 'the first leading');
    const second = new Leadership(otherEngine, path, path, { participantId: 'second' }).start();
    await eventually(async () => (await first.participants()).length === 2, 10_000);

    const asked = await service.revoke(path);
    expect(asked.map((c) => c.holder.host)).toEqual(['first']);
    await within(second.whenLeader(), 10_000, 'the second leading after the revoke');
    await Promise.all([first.close(), second.close()]);
    await otherEngine.drain();
  });

  it('in an election of our participants only, a non-revocable leader writes its id back over the request, and the one behind it (which saw two data changes) leads once it leaves', async () => {
    const path = `${root}/ours-only-kept`;
    const otherEngine = new LockEngine(await connect({ sessionTimeoutMs: 10_000 }), { app: 'revocation-election-interop-3' });
    const first = new Leadership(engine, path, path, { participantId: 'first' }).start();
    await within(first.whenLeader(), 10_000, 'the first leading');
    const firstNode = first.term!.path;
    const second = new Leadership(otherEngine, path, path, { participantId: 'second' }).start();
    await eventually(async () => (await first.participants()).length === 2, 10_000);

    expect((await service.revoke(path)).map((c) => c.node)).toEqual([firstNode.slice(path.length + 1)]);
    await eventually(async () => (await curator.stat(firstNode))?.data === 'first', 10_000);
    expect(first.isLeader).toBe(true);
    expect(await stillPending(second.whenLeader(), 500)).toBe('pending');

    await first.close();
    await within(second.whenLeader(), 10_000, 'the second leading after the first left');
    await second.close();
    await otherEngine.drain();
  });

  it("Curator's Revoker on our revocable leader with a LeaderLatch next in line: it steps down, and warns that the latch may not take over", async () => {
    const path = `${root}/revoker-revocable`;
    const warnings: string[] = [];
    const stop = engine.onWarning((message) => warnings.push(message));
    try {
      const ours = await oursLeadingLatchBehind(path, 'rr', { revocable: true });
      const term = ours.term!;
      const [latchNode] = (await curator.children(path))!.filter((c) => !c.includes('-nzl-'));
      await curator.revoke(term.path);
      expect(await within(abortReason(term.signal), 10_000, 'our term ending on the request')).toMatchObject({ reason: 'revoked' });
      await eventually(() => warnings.some((w) => w.includes(`next in line, ${latchNode}, is not this library's`)), 10_000);
      await ours.close();
      await curator.latchClose('rr');
    } finally {
      stop();
    }
  });

  it("Curator's Revoker on our non-revocable leader: a LeaderLatch that joined after the request still leads once our leader leaves (our id is not written back over the marker)", async () => {
    const path = `${root}/revoker-writeback`;
    const proxy = await TcpProxy.start(zkConnectString());
    const warnings: string[] = [];
    try {
      const slow = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 15_000 });
      const slowEngine = new LockEngine(slow, { app: 'revocation-election-slow' });
      slowEngine.onWarning((message) => warnings.push(message));
      const ours = new Leadership(slowEngine, path, path, { participantId: 'node-wb' }).start();
      await within(ours.whenLeader(), 10_000, 'our participant leading');
      const ourNode = ours.term!.path;

      // Our leader hears nothing for a while: the request lands, then a latch lines up behind it
      // and watches its node, which already carries the marker.
      proxy.blackhole();
      await curator.revoke(ourNode);
      await curator.latch('wb', path, 'java-wb');
      await eventually(async () => (await curator.children(path))?.length === 2, 10_000);
      expect(await curator.latchLeader('wb')).toBe(REVOKE_MARKER);
      await new Promise((resolve) => setTimeout(resolve, 500));

      // Back: our leader's client reconnects (same session), hears of the data change, ignores the
      // request (not revocable). Wait until it has dealt with it: id written back, or kept and said so.
      proxy.restore();
      await eventually(
        async () => warnings.some((w) => w.includes('request to let go was ignored')) || (await curator.stat(ourNode))?.data === 'node-wb',
        10_000,
      );
      expect(ours.isLeader).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 300));

      await ours.close();
      await within(eventually(() => curator.hasLeadership('wb'), 10_000, 50), 15_000, 'the LeaderLatch leading after our leader left');
      expect((await curator.stat(ourNode)) ?? null).toBeNull();
      expect(warnings.filter((w) => w.includes('request to let go was ignored'))).toHaveLength(1);
      await curator.latchClose('wb');
      await slowEngine.drain();
    } finally {
      await proxy.close();
    }
  });
});
