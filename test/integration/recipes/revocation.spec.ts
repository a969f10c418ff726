import { once } from 'node:events';
import { LockLostError, LockUsageError } from '../../../lib/core/errors.js';
import { inspectLock } from '../../../lib/core/inspect.js';
import { Leadership, type LeadershipTerm } from '../../../lib/core/recipes/leadership.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { ReadWriteLock } from '../../../lib/core/recipes/read-write-lock.js';
import { REVOKE_MARKER, revokeHolders } from '../../../lib/core/recipes/revocation.js';
import { Semaphore } from '../../../lib/core/recipes/semaphore.js';
import { closeAll, connect, engine, eventually, uniquePath } from '../../support/helpers.js';
import { delay, whenAborted, within } from '../../support/lock-test-helpers.js';

afterAll(closeAll);

describe('revocation (Curator revoke marker as node data)', () => {
  it('revocable: true aborts the holder\'s signal with reason revoked; the lock is held until release()', async () => {
    const path = uniquePath('revoke');
    const [a, b] = await Promise.all([engine(), engine()]);
    const holder = await new Mutex(a, 'orders', path, { revocable: true }).acquire();
    const waiting = new Mutex(b, 'orders', path).acquire({ waitMs: 30_000 });

    const asked = await revokeHolders(await connect(), path);
    expect(asked.map((h) => h.path)).toEqual([holder.path]);
    const reason = await whenAborted(holder.signal);
    expect(reason).toBeInstanceOf(LockLostError);
    expect((reason as LockLostError).reason).toBe('revoked');
    // A request, not a break: still held (and the waiter still waits) until the holder lets go.
    expect(holder.isHeld).toBe(true);
    expect((await inspectLock(a.connection, path))?.holders[0]).toMatchObject({ path: holder.path, revokeRequested: true });
    const raced = await Promise.race([waiting.then(() => 'acquired'), delay(500).then(() => 'waiting')]);
    expect(raced).toBe('waiting');
    await holder.release();
    await (await within(waiting, 10_000, 'the waiter acquires after the release')).release();
  });

  it('a listener is told once, without anyone reading the signal, and may release at once', async () => {
    const path = uniquePath('revoke');
    const [a, b] = await Promise.all([engine(), engine()]);
    let told = 0;
    const holder = await new Mutex(a, 'jobs', path, { revocable: (lease) => (told++, void lease.release()) }).acquire();
    const waiting = new Mutex(b, 'jobs', path).acquire({ waitMs: 30_000 });
    expect(await revokeHolders(await connect(), path)).toHaveLength(1);
    await (await within(waiting, 10_000, 'the waiter acquires once the holder let go')).release();
    expect(told).toBe(1);
    expect(holder.isHeld).toBe(false);
  });

  it('a holder that did not opt in keeps the lock (and its signal does not abort)', async () => {
    const path = uniquePath('revoke');
    const [a, b] = await Promise.all([engine(), engine()]);
    const holder = await new Mutex(a, 'keep', path).acquire();
    const signal = holder.signal;
    const waiting = new Mutex(b, 'keep', path).acquire({ waitMs: 1_500 });
    expect(await revokeHolders(await connect(), path)).toHaveLength(1);
    await expect(waiting).rejects.toMatchObject({ reason: 'timeout' });
    expect(signal.aborted).toBe(false);
    expect(holder.isHeld).toBe(true);
    await holder.release();
  });

  it('revocable callers of one process each queue their own node (no coalescing): only the holder is asked', async () => {
    const path = uniquePath('revoke');
    const a = await engine();
    const mutex = new Mutex(a, 'one', path, { revocable: true });
    const first = await mutex.acquire();
    const second = new Mutex(a, 'one', path, { revocable: true }).acquire({ waitMs: 30_000 });
    for (let i = 0; i < 100 && ((await inspectLock(a.connection, path))?.waiting.length ?? 0) < 1; i++) await delay(50);
    const asked = await revokeHolders(await connect(), path);
    expect(asked.map((h) => h.path)).toEqual([first.path]);
    await whenAborted(first.signal);
    await first.release();
    const next = await within(second, 10_000, 'the second caller acquires');
    expect(next.signal.aborted).toBe(false);
    await next.release();
  });

  it('read-write: every reader holding is asked; a waiting writer gets the lock once they let go', async () => {
    const path = uniquePath('revoke');
    const [a, b, c] = await Promise.all([engine(), engine(), engine()]);
    const readers = await Promise.all([a, b].map((e) => new ReadWriteLock(e, 'rw', path, { revocable: (lease: Lease) => void lease.release() }).read.acquire()));
    const writer = new ReadWriteLock(c, 'rw', path).write.acquire({ waitMs: 30_000 });
    for (let i = 0; i < 100 && ((await inspectLock(c.connection, path))?.waiting.length ?? 0) < 1; i++) await delay(50);
    const asked = await revokeHolders(await connect(), path);
    expect(asked.map((h) => h.path).sort()).toEqual(readers.map((r) => r.path).sort());
    await (await within(writer, 10_000, 'the writer acquires')).release();
  });

  it('a revocable leader steps down (reason revoked) and queues again; the next participant leads', async () => {
    const path = uniquePath('revoke');
    const [a, b] = await Promise.all([engine(), engine()]);
    const first = new Leadership(a, path, path, { participantId: 'first', revocable: true }).start();
    const firstTerm = await first.whenLeader(AbortSignal.timeout(20_000));
    const second = new Leadership(b, path, path, { participantId: 'second' }).start();
    const secondGained = once(second, 'gained', { signal: AbortSignal.timeout(20_000) });
    const lost = once(first, 'lost', { signal: AbortSignal.timeout(20_000) });
    const asked = await revokeHolders(await connect(), path);
    expect(asked.map((h) => h.path)).toEqual([firstTerm.path]);
    const [, reason] = await lost;
    expect(reason).toBe('revoked');
    expect(firstTerm.signal.aborted).toBe(true);
    const [term] = (await secondGained) as [LeadershipTerm];
    expect(term.fencingToken).toBeGreaterThan(firstTerm.fencingToken);
    // The first queues again at the tail (its create may still be on its way when `gained` fires).
    await eventually(async () => (await second.participants()).length === 2, 10_000, 50);
    expect((await second.participants()).map((p) => p.id)).toEqual(['second', 'first']);
    await Promise.all([first.close(), second.close()]);
  });

  it('nobody holding: nobody asked; a semaphore is refused with a typed error', async () => {
    const observer = await connect();
    expect(await revokeHolders(observer, uniquePath('revoke-none'))).toEqual([]);
    const path = uniquePath('revoke');
    const lease = await new Semaphore(await engine(), 'pool', path, { permits: 2 }).acquire();
    await expect(revokeHolders(observer, path)).rejects.toBeInstanceOf(LockUsageError);
    await lease.release();
  });

  it('a marker written straight to the node (as Curator\'s Revoker does) is heard the same way', async () => {
    const path = uniquePath('revoke');
    const holder = await new Mutex(await engine(), 'raw', path, { revocable: true }).acquire();
    await (await connect()).session!.setData(holder.path, Buffer.from(REVOKE_MARKER));
    expect(((await whenAborted(holder.signal)) as LockLostError).reason).toBe('revoked');
    await holder.release();
  });

  it('other data changes are not requests, and the holder still hears a later request', async () => {
    const path = uniquePath('revoke');
    const holder = await new Mutex(await engine(), 'raw', path, { revocable: true }).acquire();
    const other = await connect();
    await other.session!.setData(holder.path, Buffer.from('something else'));
    await other.session!.setData(holder.path, Buffer.from('and again'));
    await delay(200);
    expect(holder.signal.aborted).toBe(false);
    await other.session!.setData(holder.path, Buffer.from(REVOKE_MARKER));
    expect(((await whenAborted(holder.signal)) as LockLostError).reason).toBe('revoked');
    await holder.release();
  });
});
