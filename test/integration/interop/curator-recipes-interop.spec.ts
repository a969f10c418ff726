// Interop for the other recipes: our Semaphore ↔ Curator's InterProcessSemaphoreV2 and our
// ReadWriteLock ↔ Curator's InterProcessReadWriteLock on the same paths (fact sheet §2, §3, §7.9).
// Needs java + javac and Debian's libcurator-*-java jars; skipped without them.
import { randomUUID } from 'node:crypto';
import { LockEngine } from '../../../lib/core/lock-engine.js';
import { ReadWriteLock } from '../../../lib/core/recipes/read-write-lock.js';
import { Semaphore } from '../../../lib/core/recipes/semaphore.js';
import { Leadership } from '../../../lib/core/recipes/leadership.js';
import { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { CuratorPeer, curatorPeerUnavailableReason } from '../../support/curator-peer.js';
import { eventually } from '../../support/helpers.js';

const unavailable = curatorPeerUnavailableReason();
if (unavailable) console.warn(`Skipping the Curator recipe interop tests: ${unavailable}`);
const describeInterop = unavailable ? describe.skip : describe;

/** Resolves 'pending' if `promise` has not settled within `ms`. */
function stillPending(promise: Promise<unknown>, ms = 500): Promise<unknown> {
  return Promise.race([promise.then(() => 'settled'), new Promise((r) => setTimeout(() => r('pending'), ms))]);
}

/** A Curator peer and an engine of ours on one server, for the tests of a describe block. */
function peers(): { engine: LockEngine; curator: CuratorPeer } {
  const both = {} as { engine: LockEngine; curator: CuratorPeer };
  let connection: ZkConnection | undefined;
  beforeAll(async () => {
    connection = new ZkConnection({ connectString: process.env.ZK_CONNECT!, sessionTimeoutMs: 10_000 });
    [both.curator] = await Promise.all([CuratorPeer.start(process.env.ZK_CONNECT!), connection.connect()]);
    both.engine = new LockEngine(connection, { app: 'interop-test' });
  });
  afterAll(async () => {
    await both.engine?.drain();
    await Promise.all([both.curator?.close(), connection?.close()]);
  });
  return both;
}

describeInterop('Semaphore and ReadWriteLock ↔ Curator on one path', () => {
  const root = `/interop/recipes-${randomUUID().slice(0, 8)}`;
  const peer = peers();

  it('semaphore: Curator and we count each other\'s leases against the same permits', async () => {
    const path = `${root}/sem1`;
    await peer.curator.semaphore('s1', path, 3);
    expect(await peer.curator.leaseAcquire('s1', 2, 5000)).toBe(2);
    const ours = new Semaphore(peer.engine, 'sem1', path, { permits: 3 });
    const lease = await ours.acquire({ waitMs: 5000 }); // the third permit
    expect(await ours.tryAcquire()).toBeNull(); // Curator's two count
    expect(await peer.curator.leaseAcquire('s1', 1, 500)).toBeNull(); // ours counts for Curator
    await lease.release();
    expect(await peer.curator.leaseAcquire('s1', 1, 5000)).toBe(1);
    expect(await peer.curator.leaseReleaseAll('s1')).toBe(3);
  });

  it('semaphore: asking for 2 of 3 while Curator holds 2 times out and deletes both of our lease nodes', async () => {
    const path = `${root}/sem2`;
    await peer.curator.semaphore('s2', path, 3);
    expect(await peer.curator.leaseAcquire('s2', 2, 5000)).toBe(2);
    const ours = new Semaphore(peer.engine, 'sem2', path, { permits: 3 });
    await expect(ours.acquire({ permits: 2, waitMs: 800 })).rejects.toMatchObject({ name: 'LockNotAcquiredError', reason: 'timeout' });
    await peer.engine.drain();
    expect(await peer.curator.children(`${path}/leases`)).toHaveLength(2);
    expect(await peer.curator.leaseReleaseAll('s2')).toBe(2);
  });

  it('read-write: a Java reader holds, our writer queues, a later Java reader waits behind our writer', async () => {
    const path = `${root}/rw1`;
    await peer.curator.rw('r1', path);
    await peer.curator.rw('r2', path);
    expect(await peer.curator.readAcquire('r1', 5000)).toBe(true);
    const rw = new ReadWriteLock(peer.engine, 'rw1', path);
    const writing = rw.write.acquire({ waitMs: 20_000 });
    await eventually(async () => ((await peer.curator.children(path)) ?? []).length === 2);
    expect(await peer.curator.readAcquire('r2', 500)).toBe(false); // no barging past a queued writer
    expect(await stillPending(writing)).toBe('pending');
    await peer.curator.readRelease('r1');
    const write = await writing;
    expect(await peer.curator.readAcquire('r2', 300)).toBe(false); // we write: Curator may not read
    await write.release();
    expect(await peer.curator.readAcquire('r2', 5000)).toBe(true);
    await peer.curator.readRelease('r2');
  });

  it('read-write: our reader holds, a Java writer queues, our later reader waits; the writer gets in after our release', async () => {
    const path = `${root}/rw2`;
    await peer.curator.rw('w1', path);
    const rw = new ReadWriteLock(peer.engine, 'rw2', path);
    const read = await rw.read.acquire();
    const javaWrite = peer.curator.writeAcquire('w1', 20_000);
    await eventually(async () => ((await peer.curator.children(path)) ?? []).length === 2);
    const other = new ReadWriteLock(peer.engine, 'rw2', path); // another lock object: not re-entrant
    expect(await other.read.tryAcquire()).toBeNull();
    expect(await stillPending(javaWrite)).toBe('pending');
    await read.release();
    expect(await javaWrite).toBe(true);
    expect(await other.read.tryAcquire()).toBeNull(); // Curator writes
    await peer.curator.writeRelease('w1');
    const later = await other.read.acquire({ waitMs: 5000 });
    await later.release();
  });
});

describeInterop('Leadership ↔ Curator LeaderLatch on one path', () => {
  const root = `/interop/leader-${randomUUID().slice(0, 8)}`;
  const peer = peers();

  it('a LeaderLatch leading first: we wait in line, see its id, and lead once it closes', async () => {
    const path = `${root}/a`;
    await peer.curator.latch('l1', path, 'java-1');
    await eventually(() => peer.curator.hasLeadership('l1'), 10_000);
    const ours = new Leadership(peer.engine, path, path, { participantId: 'node-1' }).start();
    await eventually(async () => (await ours.participants()).length === 2, 10_000);
    expect(await ours.participants()).toEqual([
      { id: 'java-1', node: expect.stringMatching(/-latch-\d{10}$/), isLeader: true },
      { id: 'node-1', node: expect.stringMatching(/-latch-\d{10}$/), isLeader: false },
    ]);
    expect(ours.isLeader).toBe(false);
    await peer.curator.latchClose('l1');
    await ours.whenLeader(AbortSignal.timeout(10_000));
    await ours.close();
  });

  it('we lead first: a LeaderLatch waits, reads our id as the leader, and leads once we step down', async () => {
    const path = `${root}/b`;
    const ours = new Leadership(peer.engine, path, path, { participantId: 'node-2' }).start();
    await ours.whenLeader(AbortSignal.timeout(10_000));
    await peer.curator.latch('l2', path, 'java-2');
    await eventually(async () => (await ours.participants()).length === 2, 10_000);
    expect(await peer.curator.hasLeadership('l2')).toBe(false);
    expect(await peer.curator.latchLeader('l2')).toBe('node-2');
    await ours.stepDown(); // requeues behind the latch
    await eventually(() => peer.curator.hasLeadership('l2'), 10_000);
    expect(ours.isLeader).toBe(false);
    await Promise.all([ours.close(), peer.curator.latchClose('l2')]);
  });
});
