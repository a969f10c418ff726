// Interop for the other recipes: our Semaphore ↔ Curator's InterProcessSemaphoreV2 and our
// ReadWriteLock ↔ Curator's InterProcessReadWriteLock on the same paths (fact sheet §2, §3, §7.9).
// Needs java + javac and Debian's libcurator-*-java jars; skipped without them.
import { randomUUID } from 'node:crypto';
import { LockEngine } from '../../lib/core/lock-engine.js';
import { ReadWriteLock } from '../../lib/core/read-write-lock.js';
import { Semaphore } from '../../lib/core/semaphore.js';
import { ZkConnection } from '../../lib/core/zk-connection.js';
import { CuratorPeer, curatorPeerUnavailableReason } from '../support/curator-peer.js';
import { eventually } from '../support/helpers.js';

const unavailable = curatorPeerUnavailableReason();
if (unavailable) console.warn(`Skipping the Curator recipe interop tests: ${unavailable}`);
const describeInterop = unavailable ? describe.skip : describe;

/** Resolves 'pending' if `promise` has not settled within `ms`. */
function stillPending(promise: Promise<unknown>, ms = 500): Promise<unknown> {
  return Promise.race([promise.then(() => 'settled'), new Promise((r) => setTimeout(() => r('pending'), ms))]);
}

describeInterop('Semaphore and ReadWriteLock ↔ Curator on one path', () => {
  const root = `/interop/recipes-${randomUUID().slice(0, 8)}`;
  let connection: ZkConnection;
  let engine: LockEngine;
  let curator: CuratorPeer;

  beforeAll(async () => {
    connection = new ZkConnection({ connectString: process.env.ZK_CONNECT!, sessionTimeoutMs: 10_000 });
    [curator] = await Promise.all([CuratorPeer.start(process.env.ZK_CONNECT!), connection.connect()]);
    engine = new LockEngine(connection, { app: 'interop-test' });
  });
  afterAll(async () => {
    await engine?.drain();
    await Promise.all([curator?.close(), connection?.close()]);
  });

  it('semaphore: Curator and we count each other\'s leases against the same permits', async () => {
    const path = `${root}/sem1`;
    await curator.semaphore('s1', path, 3);
    expect(await curator.leaseAcquire('s1', 2, 5000)).toBe(2);
    const ours = new Semaphore(engine, 'sem1', path, { permits: 3 });
    const lease = await ours.acquire({ waitMs: 5000 }); // the third permit
    expect(await ours.tryAcquire()).toBeNull(); // Curator's two count
    expect(await curator.leaseAcquire('s1', 1, 500)).toBeNull(); // ours counts for Curator
    await lease.release();
    expect(await curator.leaseAcquire('s1', 1, 5000)).toBe(1);
    expect(await curator.leaseReleaseAll('s1')).toBe(3);
  });

  it('semaphore: asking for 2 of 3 while Curator holds 2 times out and deletes both of our lease nodes', async () => {
    const path = `${root}/sem2`;
    await curator.semaphore('s2', path, 3);
    expect(await curator.leaseAcquire('s2', 2, 5000)).toBe(2);
    const ours = new Semaphore(engine, 'sem2', path, { permits: 3 });
    await expect(ours.acquire({ permits: 2, waitMs: 800 })).rejects.toMatchObject({ name: 'LockNotAcquiredError', reason: 'timeout' });
    await engine.drain();
    expect(await curator.children(`${path}/leases`)).toHaveLength(2);
    expect(await curator.leaseReleaseAll('s2')).toBe(2);
  });

  it('read-write: a Java reader holds, our writer queues, a later Java reader waits behind our writer', async () => {
    const path = `${root}/rw1`;
    await curator.rw('r1', path);
    await curator.rw('r2', path);
    expect(await curator.readAcquire('r1', 5000)).toBe(true);
    const rw = new ReadWriteLock(engine, 'rw1', path);
    const writing = rw.write.acquire({ waitMs: 20_000 });
    await eventually(async () => ((await curator.children(path)) ?? []).length === 2);
    expect(await curator.readAcquire('r2', 500)).toBe(false); // no barging past a queued writer
    expect(await stillPending(writing)).toBe('pending');
    await curator.readRelease('r1');
    const write = await writing;
    expect(await curator.readAcquire('r2', 300)).toBe(false); // we write: Curator may not read
    await write.release();
    expect(await curator.readAcquire('r2', 5000)).toBe(true);
    await curator.readRelease('r2');
  });

  it('read-write: our reader holds, a Java writer queues, our later reader waits; the writer gets in after our release', async () => {
    const path = `${root}/rw2`;
    await curator.rw('w1', path);
    const rw = new ReadWriteLock(engine, 'rw2', path);
    const read = await rw.read.acquire();
    const javaWrite = curator.writeAcquire('w1', 20_000);
    await eventually(async () => ((await curator.children(path)) ?? []).length === 2);
    const other = new ReadWriteLock(engine, 'rw2', path); // another lock object: not re-entrant
    expect(await other.read.tryAcquire()).toBeNull();
    expect(await stillPending(javaWrite)).toBe('pending');
    await read.release();
    expect(await javaWrite).toBe(true);
    expect(await other.read.tryAcquire()).toBeNull(); // Curator writes
    await curator.writeRelease('w1');
    const later = await other.read.acquire({ waitMs: 5000 });
    await later.release();
  });
});
