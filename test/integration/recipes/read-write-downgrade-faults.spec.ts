// A downgrade (read lock taken inside the write lock) asked for just as the holder's link goes
// down, against a real ZooKeeper behind a TCP proxy: the read lock must not be granted while
// another client holds the write lock, whether the holder's session expired behind the cut or
// its write lease ran out (leaseMs) while the link was down, and its token must exceed that
// writer's. Reset cuts (connections dropped) and silent ones (nothing passes, nothing closes).
import { ReadWriteLock } from '../../../lib/core/recipes/read-write-lock.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import type { TcpProxy } from '../../support/tcp-proxy.js';
import { closeAll, connect, engine, nextEvent, uniquePath } from '../../support/helpers.js';
import { delay, nameOf, untilChildCount, whenAborted, within, withProxy } from '../../support/lock-test-helpers.js';

afterEach(closeAll);
afterAll(closeAll);

type Fault = 'reset' | 'silent';

function goDown(proxy: TcpProxy, fault: Fault): void {
  if (fault === 'reset') proxy.cut();
  else proxy.blackhole();
}

/** Follows a pending acquire: when it resolved, and what with. */
function track(work: Promise<Lease>) {
  const state: { lease?: Lease; error?: unknown; at?: number } = {};
  const promise = work.then(
    (lease) => ((state.lease = lease), (state.at = Date.now()), lease),
    (error: unknown) => ((state.error = error), (state.at = Date.now()), Promise.reject(error)),
  );
  promise.catch(() => undefined);
  return { promise, state };
}

/**
 * B holds the write lock; A's downgrade is pending. Watches A's read acquire for `ms` while B
 * holds, then lets B go and returns A's read lease (which must come after B's release).
 */
async function expectReadOnlyAfterWriter(reading: ReturnType<typeof track>, writerB: Lease, ms: number): Promise<Lease> {
  await delay(ms);
  expect({ grantedWhileBHolds: reading.state.lease !== undefined, error: reading.state.error }).toEqual({ grantedWhileBHolds: false, error: undefined });
  expect(writerB.isHeld).toBe(true);
  const releasedAt = Date.now();
  await writerB.release();
  const read = await within(reading.promise, 30_000, 'the read lock after B released the write lock');
  expect(reading.state.at!).toBeGreaterThanOrEqual(releasedAt);
  // Tokens only grow: the read lock comes after B's write lock.
  expect(read.fencingToken > writerB.fencingToken).toBe(true);
  return read;
}

describe('ReadWriteLock downgrade across a lost link', () => {
  describe.each<Fault>(['reset', 'silent'])('%s cut', (fault) => {
    it('the session expires behind the cut: the read lock is not granted while the client that took the write lock since holds it', async () => {
      await withProxy(async (proxy) => {
        const a = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 3000 });
        const b = await engine({ sessionTimeoutMs: 8000 });
        const observer = await connect();
        const path = uniquePath('rw-downgrade-lost');
        const rwA = new ReadWriteLock(a, 'down', path);
        const write = await rwA.write.acquire();
        const writeSignal = write.signal;
        const writerB = track(new ReadWriteLock(b, 'down', path).write.acquire());
        await untilChildCount(observer, path, 2);

        goDown(proxy, fault);
        // The downgrade docs/locks.md describes: the read lock asked for inside the write lock.
        const reading = track(rwA.write.runHolding(write, () => rwA.read.acquire({ waitMs: 120_000 })));
        await whenAborted(writeSignal, 30_000);
        const heldByB = await within(writerB.promise, 30_000, 'B takes the write lock once A\'s session expired');

        const newSession = nextEvent(a.connection, 'connected', 30_000);
        proxy.restore();
        await newSession;
        const read = await expectReadOnlyAfterWriter(reading, heldByB, 3000);
        expect(nameOf(read).slice(-10)).not.toBe(nameOf(write).slice(-10));
        await read.release();
        await write.release();
      });
    }, 90_000);

    it('the write lease ends (leaseMs) while the link is down, same session: the read lock is not granted while the client that took the write lock since holds it', async () => {
      await withProxy(async (proxy) => {
        const a = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 8000 });
        const b = await engine({ sessionTimeoutMs: 8000 });
        const observer = await connect();
        const path = uniquePath('rw-downgrade-lease');
        const rwA = new ReadWriteLock(a, 'down', path, { leaseMs: 1000 });
        const write = await rwA.write.acquire();
        const writeSignal = write.signal;
        const sessionId = a.connection.sessionId;
        const writerB = track(new ReadWriteLock(b, 'down', path, { leaseMs: 60_000 }).write.acquire());
        await untilChildCount(observer, path, 2);

        goDown(proxy, fault);
        const down = Date.now();
        const reading = track(rwA.write.runHolding(write, () => rwA.read.acquire({ waitMs: 120_000 })));
        await whenAborted(writeSignal, 30_000); // lease-expired, link still down
        await delay(Math.max(0, 2000 - (Date.now() - down)));

        const back = nextEvent(a.connection, 'reconnected', 30_000);
        proxy.restore();
        await back;
        expect(a.connection.sessionId).toBe(sessionId);
        const heldByB = await within(writerB.promise, 30_000, 'B takes the write lock once A\'s write node is deleted');
        const read = await expectReadOnlyAfterWriter(reading, heldByB, 3000);
        await read.release();
        await write.release();
      });
    }, 90_000);
  });

  it('the write node was deleted by someone else before the downgrade (the lease has not heard): the read node made with its number is not granted ahead of the writer that took the lock', async () => {
    const a = await engine();
    const b = await engine();
    const observer = await connect();
    const path = uniquePath('rw-downgrade-deleted');
    const rwA = new ReadWriteLock(a, 'down', path);
    const write = await rwA.write.acquire(); // its signal is never read: nothing watches its node
    const writerB = track(new ReadWriteLock(b, 'down', path).write.acquire());
    await untilChildCount(observer, path, 2);
    await observer.session!.delete(write.path);
    const heldByB = await within(writerB.promise, 30_000, 'B takes the write lock once A\'s write node is gone');
    expect(write.isHeld).toBe(true); // A's lease does not know yet

    const reading = track(rwA.write.runHolding(write, () => rwA.read.acquire({ waitMs: 60_000 })));
    const read = await expectReadOnlyAfterWriter(reading, heldByB, 2000);
    expect(nameOf(read).slice(-10)).not.toBe(nameOf(write).slice(-10));
    await read.release();
    await write.release();
  }, 60_000);
});
