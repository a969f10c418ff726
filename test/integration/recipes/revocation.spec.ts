import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { LockLostError, LockUsageError } from '../../../lib/core/errors.js';
import { inspectLock } from '../../../lib/core/inspect.js';
import { LockContext } from '../../../lib/core/leases/lock-context.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import { LockEngine } from '../../../lib/core/lock-engine.js';
import { Leadership, type LeadershipTerm } from '../../../lib/core/recipes/leadership.js';
import { MultiLock } from '../../../lib/core/recipes/multi-lock.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { ReadWriteLock } from '../../../lib/core/recipes/read-write-lock.js';
import { REVOKE_MARKER, revokeHolders } from '../../../lib/core/recipes/revocation.js';
import { Semaphore } from '../../../lib/core/recipes/semaphore.js';
import type { ZkError } from '../../../lib/core/client/zk-error.js';
import { CreateMode, ZkPerm, type ZkSession } from '../../../lib/core/client/session.js';
import { LockService } from '../../../lib/nest/lock.service.js';
import { WithLock } from '../../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../../lib/nest/zk-lock.module.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { childrenOf, closeAll, connect, engine, eventually, nextEvent, uniquePath, zkConnectString } from '../../support/helpers.js';
import { delay, untilChildCount, whenAborted, within } from '../../support/lock-test-helpers.js';
import { ensurePersistent, marker } from '../../support/revocation-support.js';

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

// Revocation (a Curator revoke marker written as the holder's node data) in the interleavings that
// matter: a marker written while the holder is cut off, a revocable function that releases or
// throws, a leader that did not opt in, holders whose node may not be read (by the holder, by the
// revoker), markers on waiting nodes, data storms, releases racing the callback, re-entrant,
// multi-lock, read-write and leadership holders, engine shutdown, the in-memory kit, what a signal
// that already aborted can still tell, and @WithLock methods. Real ZooKeeper.
/** Counts the requests of one kind a session sends from now on. */
function countCalls(session: ZkSession, method: 'getData' | 'exists' | 'setAcl'): { readonly n: number } {
  const counter = { n: 0 };
  const original = (session[method] as (...a: unknown[]) => unknown).bind(session);
  (session as unknown as Record<string, unknown>)[method] = (...args: unknown[]) => {
    counter.n++;
    return original(...args);
  };
  return counter;
}

describe('revocation across disconnections', () => {
  let proxy: TcpProxy;
  beforeEach(async () => {
    proxy = await TcpProxy.start(zkConnectString());
  });
  afterEach(async () => {
    await proxy.close();
  });

  it('a marker written while the revocable holder is cut off is heard after it reconnects (its watch re-armed on reconnect)', async () => {
    const path = uniquePath('rv-cut');
    const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 8000 });
    const holder = await new Mutex(e, 'cut', path, { revocable: true }).acquire();
    await delay(100); // the watch's first arming answered
    proxy.cut();
    await nextEvent(e.connection, 'state').catch(() => undefined);
    await (await connect()).session!.setData(holder.path, marker());
    await delay(300);
    expect(holder.signal.aborted).toBe(false);
    proxy.restore();
    const reason = (await whenAborted(holder.signal, 10_000)) as LockLostError;
    expect(reason.reason).toBe('revoked');
    expect(holder.isHeld).toBe(true);
    await holder.release();
  }, 30_000);

  it('a marker overwritten by other data while the holder is cut off is not heard, as with Curator (only the data at re-arm time is read)', async () => {
    const path = uniquePath('rv-cut2');
    const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 8000 });
    const holder = await new Mutex(e, 'cut', path, { revocable: true }).acquire();
    await delay(100);
    proxy.cut();
    const other = await connect();
    await other.session!.setData(holder.path, marker());
    await other.session!.setData(holder.path, Buffer.from('overwritten'));
    proxy.restore();
    await e.connection.whenConnected();
    await delay(1000);
    // Recorded, not asserted as a defect: Curator's revocableWatcher reads the data the same way.
    expect(holder.signal.aborted).toBe(false);
    await holder.release();
  }, 30_000);

  it('a revocable holder whose first data read fails on a cut link re-arms on reconnect and hears a marker already there', async () => {
    const path = uniquePath('rv-cut3');
    const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 8000 });
    const m = new Mutex(e, 'cut', path, { revocable: true });
    // Acquire, and cut the link before the NodeLease's getData reply can come back.
    const session = e.connection.session!;
    const original = session.getData.bind(session);
    let cutOnce = false;
    (session as unknown as { getData: typeof session.getData }).getData = (p, w) => {
      if (w && !cutOnce) {
        cutOnce = true;
        proxy.dropReplies();
      }
      return original(p, w);
    };
    const holder = await m.acquire();
    await (await connect()).session!.setData(holder.path, marker());
    await delay(200);
    proxy.restore();
    const reason = (await whenAborted(holder.signal, 15_000)) as LockLostError;
    expect(reason.reason).toBe('revoked');
    await holder.release();
  }, 40_000);
});

describe('revocation requests and the holders they reach', () => {
  it('a revocable function that releases aborts the running critical section\'s signal before another client can hold the lock', async () => {
    const path = uniquePath('rv-fn');
    const [a, b] = await Promise.all([engine(), engine()]);
    const mutex = new Mutex(a, 'fn', path, { revocable: (lease) => void lease.release() });
    let acquiredElsewhere!: () => void;
    const elsewhere = new Promise<void>((resolve) => (acquiredElsewhere = resolve));
    let signalAbortedWhileOtherHeld: boolean | undefined;
    let heldWhileOtherHeld: boolean | undefined;
    const work = mutex.withLock(async (lease) => {
      const signal = lease.signal;
      await elsewhere; // the critical section is still running...
      // ...while a second client holds the same lock: the promise says the signal has aborted.
      signalAbortedWhileOtherHeld = signal.aborted;
      heldWhileOtherHeld = lease.isHeld;
    });
    await untilChildCount(await connect(), path, 1);
    const waiting = new Mutex(b, 'fn', path).acquire({ waitMs: 30_000 });
    await revokeHolders(await connect(), path);
    const other = await within(waiting, 10_000, 'the other client acquires after the callback released');
    acquiredElsewhere();
    await work;
    await other.release();
    expect(heldWhileOtherHeld).toBe(false);
    expect(signalAbortedWhileOtherHeld).toBe(true);
  });

  it('a leader that did not opt in ignores a revoke and writes its participant id back', async () => {
    const path = uniquePath('rv-leader');
    const [a, b] = await Promise.all([engine(), engine()]);
    const first = new Leadership(a, path, path, { participantId: 'first' }).start();
    await first.whenLeader(AbortSignal.timeout(20_000));
    const second = new Leadership(b, path, path, { participantId: 'second' }).start();
    await eventually(async () => (await second.participants()).length === 2, 10_000, 50);
    const asked = await revokeHolders(await connect(), path);
    expect(asked).toHaveLength(1); // "asked", though it cannot hear it
    // It reads the request, then writes its id back: two round trips, however long they take.
    let ids: string[] = [];
    await eventually(async () => (ids = (await second.participants()).map((p) => p.id)).join() === 'first,second', 10_000, 20).catch(() => undefined);
    expect(first.isLeader).toBe(true);
    await Promise.all([first.close(), second.close()]);
    expect(ids).toEqual(['first', 'second']);
  });

  it('a revocable holder that may not read its own node (no READ in the ACL) warns and watches for deletion only, without a retry loop', async () => {
    const observer = await connect();
    const lockPath = `${uniquePath('rv-noread')}/orders`;
    await ensurePersistent(observer, lockPath); // open, e.g. made by an operator or a Curator app
    const noRead = [{ perms: ZkPerm.ALL & ~ZkPerm.READ, scheme: 'world', id: 'anyone' }];
    const e = await engine({}, { parentAcl: noRead });
    const warnings: string[] = [];
    e.onWarning((w) => warnings.push(w));
    const gets = countCalls(e.connection.session!, 'getData');
    const holder = await new Mutex(e, 'orders', lockPath, { revocable: true }).acquire();
    const before = gets.n;
    await delay(1000);
    const perSecond = gets.n - before;
    await holder.release();
    // One getData per data change is the design; a NOAUTH answer is retried at once, forever.
    expect({ getDataPerSecond: perSecond, warnings: warnings.length }).toEqual({ getDataPerSecond: 0, warnings: 1 });
  });

  it('a holder whose node the revoker may not read keeps its place: the waiter behind it is not asked, and revoke rejects with NOAUTH', async () => {
    const observer = await connect();
    const lockPath = uniquePath('rv-unreadable');
    await ensurePersistent(observer, lockPath);
    // A holder with a private ACL (e.g. a Curator app with an ACLProvider, or another credential set).
    const alice = await connect({ auth: { scheme: 'digest', credentials: 'alice:s3cret-alice' } });
    // Readable by the waiting app (bob), not by the operator who revokes (no credentials).
    const bobCredentials = 'bob:pw-bob';
    const bobId = `bob:${createHash('sha1').update(bobCredentials).digest('base64')}`;
    const aliceNode = await alice.session!.create(`${lockPath}/_c_00000000-0000-4000-8000-000000000000-lock-`, Buffer.from('10.0.0.1'), CreateMode.EPHEMERAL_SEQUENTIAL, [
      { perms: ZkPerm.ALL, scheme: 'auth', id: '' },
      { perms: ZkPerm.READ, scheme: 'digest', id: bobId },
    ]);
    const b = await engine({ auth: { scheme: 'digest', credentials: bobCredentials } });
    const waiting = new Mutex(b, 'u', lockPath, { revocable: true }).acquire({ waitMs: 30_000 });
    const children = await untilChildCount(observer, lockPath, 2);
    const waiterPath = `${lockPath}/${children.find((c) => !aliceNode.endsWith(c))!}`;
    const asked = await revokeHolders(observer, lockPath).then(
      (holders) => holders.map((h) => h.path),
      (x: unknown) => (x as ZkError).codeName,
    );
    await alice.session!.delete(aliceNode);
    const lease = await within(waiting, 10_000, 'the waiter acquires');
    await delay(300);
    const interrupted = lease.signal.aborted;
    await lease.release();
    expect({ askedTheWaiter: Array.isArray(asked) && asked.includes(waiterPath), interruptedOnAcquire: interrupted }).toEqual({
      askedTheWaiter: false,
      interruptedOnAcquire: false,
    });
  });

  it('a marker written on a waiting node is heard once that node holds (told on becoming holder)', async () => {
    const path = uniquePath('rv-waiter');
    const [a, b] = await Promise.all([engine(), engine()]);
    const first = await new Mutex(a, 'w', path).acquire();
    const secondP = new Mutex(b, 'w', path, { revocable: true }).acquire({ waitMs: 30_000 });
    const children = await untilChildCount(await connect(), path, 2);
    const waiterNode = children.find((c) => !first.path.endsWith(c))!;
    await (await connect()).session!.setData(`${path}/${waiterNode}`, marker());
    await delay(200);
    await first.release();
    const second = await within(secondP, 10_000, 'the waiter acquires');
    expect(((await whenAborted(second.signal, 5_000)) as LockLostError).reason).toBe('revoked');
    await second.release();
  });

  it('data changes on a waiter\'s own node (own-node shortcut watch spent) never let two hold', async () => {
    const path = uniquePath('rv-own');
    const [a, b, c] = await Promise.all([engine(), engine(), engine()]);
    const first = await new Mutex(a, 'o', path).acquire();
    const secondP = new Mutex(b, 'o', path).acquire({ waitMs: 30_000 });
    const children = await untilChildCount(await connect(), path, 2);
    const waiterPath = `${path}/${children.find((x) => !first.path.endsWith(x))!}`;
    const writer = await connect();
    // Keep spending the waiter's own-node watch while the head goes away.
    let writing = true;
    const writes = (async () => {
      for (let i = 0; writing; i++) await writer.session!.setData(waiterPath, Buffer.from(`x${i}`)).catch(() => (writing = false));
    })();
    await delay(100);
    await first.release();
    const second = await within(secondP, 10_000, 'the waiter acquires');
    writing = false;
    await writes;
    const third = await new Mutex(c, 'o', path).acquire({ waitMs: 0 }).catch((e: unknown) => e);
    expect(third).toMatchObject({ reason: 'timeout' });
    expect(second.signal.aborted).toBe(false);
    await second.release();
  });

  it('a foreign client writing other data 500 times to a revocable holder costs one read each, no interrupt', async () => {
    const path = uniquePath('rv-storm');
    const e = await engine();
    const gets = countCalls(e.connection.session!, 'getData');
    const holder = await new Mutex(e, 's', path, { revocable: true }).acquire();
    const writer = await connect();
    for (let i = 0; i < 500; i++) await writer.session!.setData(holder.path, Buffer.from(`junk-${i}`));
    await delay(300);
    expect(gets.n).toBeLessThanOrEqual(502);
    expect(holder.signal.aborted).toBe(false);
    await writer.session!.setData(holder.path, marker());
    expect(((await whenAborted(holder.signal, 5_000)) as LockLostError).reason).toBe('revoked');
    await holder.release();
  });

  it('a revocable function that throws is reported; the lease stays held and releases normally', async () => {
    const path = uniquePath('rv-throw');
    const e = await engine();
    const warnings: string[] = [];
    e.onWarning((w) => warnings.push(w));
    const holder = await new Mutex(e, 't', path, {
      revocable: () => {
        throw new Error('boom');
      },
    }).acquire();
    await revokeHolders(await connect(), path);
    await eventually(() => warnings.some((w) => w.includes('boom')), 5_000, 20);
    expect(holder.isHeld).toBe(true);
    await holder.release();
    expect(await childrenOf(await connect(), path)).toEqual([]);
  });

  it('release racing the revocation callback (both release) is one release, node gone', async () => {
    const path = uniquePath('rv-race');
    const e = await engine();
    let told = 0;
    const holder = await new Mutex(e, 'r', path, { revocable: (l) => (told++, void l.release()) }).acquire();
    const [, released] = await Promise.all([revokeHolders(await connect(), path), holder.release()]);
    void released;
    await delay(300);
    expect(holder.isHeld).toBe(false);
    expect(told).toBeLessThanOrEqual(1);
    expect(await childrenOf(await connect(), path)).toEqual([]);
  });

  it('reentrant revocable mutex: nested holds share one node and one interrupted signal', async () => {
    const path = uniquePath('rv-reent');
    const e = await engine();
    const m = new Mutex(e, 're', path, { revocable: true });
    await m.withLock(async (outer) => {
      await m.withLock(async (inner) => {
        expect(inner.path).toBe(outer.path);
        await revokeHolders(await connect(), path);
        await whenAborted(inner.signal, 5_000);
        expect(outer.signal.aborted).toBe(true);
        expect(outer.isHeld && inner.isHeld).toBe(true);
      });
      expect(outer.isHeld).toBe(true);
    });
    expect(await childrenOf(await connect(), path)).toEqual([]);
  });

  it('multi-lock of revocable mutexes: revoking one member aborts the group signal, group still held until release', async () => {
    const [p1, p2] = [uniquePath('rv-multi'), uniquePath('rv-multi')];
    const e = await engine();
    const group = await new MultiLock([new Mutex(e, 'm1', p1, { revocable: true }), new Mutex(e, 'm2', p2, { revocable: true })]).acquire();
    await revokeHolders(await connect(), p2);
    expect(((await whenAborted(group.signal, 5_000)) as LockLostError).reason).toBe('revoked');
    expect(group.isHeld).toBe(true);
    const other = await engine();
    await expect(new Mutex(other, 'm1', p1).acquire({ waitMs: 0 })).rejects.toMatchObject({ reason: 'timeout' });
    await group.release();
  });

  it('read-write: a reader queued behind a waiting writer is not asked', async () => {
    const path = uniquePath('rv-rw');
    const [a, b, c] = await Promise.all([engine(), engine(), engine()]);
    const r1 = await new ReadWriteLock(a, 'rw', path, { revocable: true }).read.acquire();
    const w2 = new ReadWriteLock(b, 'rw', path, { revocable: true }).write.acquire({ waitMs: 30_000 });
    await untilChildCount(await connect(), path, 2);
    const r3 = new ReadWriteLock(c, 'rw', path, { revocable: true }).read.acquire({ waitMs: 30_000 });
    await untilChildCount(await connect(), path, 3);
    const asked = await revokeHolders(await connect(), path);
    expect(asked.map((h) => h.path)).toEqual([r1.path]);
    await whenAborted(r1.signal, 5_000);
    await r1.release();
    const w = await within(w2, 10_000, 'the writer acquires');
    expect(w.signal.aborted).toBe(false);
    await w.release();
    const r = await within(r3, 10_000, 'the late reader acquires');
    await delay(200);
    expect(r.signal.aborted).toBe(false);
    await r.release();
  });

  it('revocable leader: revoke racing stepDown and close ends one term once and leaves no node', async () => {
    const path = uniquePath('rv-lead-race');
    const e = await engine();
    const l = new Leadership(e, path, path, { participantId: 'solo', revocable: true }).start();
    const term = await l.whenLeader(AbortSignal.timeout(20_000));
    const lost: string[] = [];
    l.on('lost', (_t, reason) => lost.push(reason));
    const observer = await connect();
    await Promise.all([revokeHolders(observer, path), l.stepDown()]);
    const next = await l.whenLeader(AbortSignal.timeout(20_000));
    expect(next.path).not.toBe(term.path);
    await Promise.all([revokeHolders(observer, path).catch(() => []), l.close()]);
    await delay(300);
    expect(lost.length).toBe(2);
    expect(await childrenOf(observer, path)).toEqual([]);
  });

  it('revoke during engine shutdown: the revocable holder ends as shutdown, node deleted, no throw', async () => {
    const path = uniquePath('rv-shutdown');
    const e = await engine({}, { shutdownGraceMs: 200 });
    const holder = await new Mutex(e, 'sd', path, { revocable: true }).acquire();
    const signal = holder.signal;
    const observer = await connect();
    await Promise.all([revokeHolders(observer, path).catch(() => []), e.shutdown()]);
    expect(signal.aborted).toBe(true);
    expect(holder.isHeld).toBe(false);
    await eventually(async () => (await childrenOf(observer, path)).length === 0, 5_000, 50);
  });
});

describe('revocation on the in-memory ZooKeeper of the testing kit', () => {
  it('a revocable holder that may not read its own node does not spin on InMemoryZooKeeper (no event-loop starvation)', async () => {
    const { InMemoryZooKeeper } = await import('../../../lib/testing/in-memory-zookeeper.js');
    const { ZkConnection } = await import('../../../lib/core/connection/zk-connection.js');
    const server = new InMemoryZooKeeper();
    const open = async () => {
      const c = new ZkConnection({ connectString: 'in-memory:2181', sessionTimeoutMs: 4000 }, server.sessionFactory());
      await c.connect();
      return c;
    };
    const admin = await open();
    const lockPath = '/ops/orders';
    await ensurePersistent(admin, lockPath);
    const connection = await open();
    const e = new LockEngine(connection, { parentAcl: [{ perms: ZkPerm.ALL & ~ZkPerm.READ, scheme: 'world', id: 'anyone' }] });
    const session = connection.session!;
    const original = session.getData.bind(session);
    let calls = 0;
    let timerRan = false;
    let timerHadRunAtCap: boolean | undefined;
    (session as unknown as { getData: typeof session.getData }).getData = (p, w) => {
      calls++;
      // Past this many calls without a macrotask in between, stop answering: the loop ends.
      if (calls > 20_000) {
        timerHadRunAtCap ??= timerRan;
        return new Promise(() => undefined);
      }
      return original(p, w);
    };
    const acquiring = new Mutex(e, 'orders', lockPath, { revocable: true }).acquire();
    const holder = await acquiring;
    setTimeout(() => (timerRan = true), 0); // armed once the holder exists: does it get to run?
    await delay(50);
    const starved = timerHadRunAtCap === false;
    void holder.release();
    await Promise.all([connection.close(), admin.close()]);
    expect({ calls: Math.min(calls, 20_001), starved }).toEqual({ calls: 1, starved: false });
  });
});

describe('revocation semantics: a signal aborts once; options that cannot work are refused', () => {
  it('after revocable: true aborted the signal (revoked), a later loss shows in isHeld only (a signal aborts once)', async () => {
    const path = uniquePath('rv-then-lost');
    const [a, b] = await Promise.all([engine(), engine()]);
    const holder = await new Mutex(a, 'l', path, { revocable: true }).acquire();
    const observer = await connect();
    await revokeHolders(observer, path);
    const reason = (await whenAborted(holder.signal, 5_000)) as LockLostError;
    expect(reason.reason).toBe('revoked'); // "the lock stays held until release()"
    // The holder finishes its current item, trusting that; meanwhile its node goes (an operator,
    // a session expiry) and someone else takes the lock.
    await observer.session!.delete(holder.path);
    const other = await new Mutex(b, 'l', path).acquire({ waitMs: 10_000 });
    await delay(200);
    // The signal cannot abort twice: its reason still says revoked (= held), and nothing else tells.
    expect((holder.signal.reason as LockLostError).reason).toBe('revoked');
    expect(holder.isHeld).toBe(false); // only polling isHeld shows it
    await other.release();
  });

  it('participantId "__REVOKE__" is refused with InvalidOptionError', async () => {
    const path = uniquePath('rv-self');
    const e = await engine();
    let made: Leadership | undefined;
    let error: unknown;
    try {
      made = new Leadership(e, path, path, { participantId: REVOKE_MARKER, revocable: true });
    } catch (x) {
      error = x;
    }
    let gained = 0;
    let revokedTerms = 0;
    const { LockChannels } = await import('../../../lib/core/diagnostics.js');
    const onRevoke = (m: unknown) => void ((m as { lockPath?: string }).lockPath === path && revokedTerms++);
    LockChannels.revokeRequested.subscribe(onRevoke);
    if (made) {
      made.on('gained', () => gained++);
      made.start();
      await delay(1000);
      await made.close();
    }
    LockChannels.revokeRequested.unsubscribe(onRevoke);
    // Never announced as leader (each term is revoked before 'gained'), yet it queues, "leads" and
    // steps down again and again: one node and several round trips per cycle, forever.
    expect({ refused: error !== undefined, gained, revokedTerms }).toEqual({ refused: true, gained: 0, revokedTerms: 0 });
  });

  it('a semaphore refuses revocable (untyped callers) with InvalidOptionError', async () => {
    const e = await engine();
    const { Semaphore } = await import('../../../lib/core/recipes/semaphore.js');
    expect(() => new Semaphore(e, 'p', uniquePath('rv-sem'), { permits: 1, revocable: true } as never)).toThrow(/revocable/);
  });
});


const nestBase = uniquePath('rv-nest');

@Injectable()
class Jobs {
  @WithLock('tail', { revocable: true, waitMs: 0, minHoldMs: 20_000 })
  async quick(): Promise<string> {
    return 'done';
  }

  @WithLock((a: string, b: string) => [a, b], { revocable: true, waitMs: 0 })
  async pair(_a: string, _b: string, until: Promise<void>): Promise<string> {
    const signal = LockContext.current()!.signal;
    await Promise.race([until, new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))]);
    return signal.aborted ? `stopped: ${(signal.reason as LockLostError).reason}` : 'finished';
  }
}

@Module({ imports: [ZkLockModule.forRoot({ connectString: zkConnectString(), basePath: nestBase })], providers: [Jobs] })
class JobsModule {}

describe('revocation of @WithLock methods', () => {
  let app: INestApplicationContext;
  let other: INestApplicationContext;
  beforeAll(async () => {
    [app, other] = await Promise.all([0, 1].map(async () => (await Test.createTestingModule({ imports: [JobsModule] }).compile()).init()));
  });
  afterAll(async () => {
    await Promise.all([app?.close(), other?.close()]);
  });

  it('a request heard during minHoldMs\'s tail (method already returned) releases at once', async () => {
    expect(await app.get(Jobs).quick()).toBe('done');
    const asked = await other.get(LockService).revoke('tail');
    expect(asked).toHaveLength(1);
    // "the lock goes when the method returns (without minHoldMs's wait)": the method has returned
    // and the holder was asked; the requester still waits out the whole minimum hold.
    await eventually(async () => ((await other.get(LockService).inspect('tail'))?.holders.length ?? 0) === 0, 3_000, 100);
  });

  it('a multi-key revocable method: revoking one key stops it (revoked) and frees every key', async () => {
    let finish!: () => void;
    const until = new Promise<void>((resolve) => (finish = resolve));
    const running = app.get(Jobs).pair('k1', 'k2', until);
    await eventually(async () => ((await other.get(LockService).inspect('k2'))?.holders.length ?? 0) === 1, 10_000, 50);
    await other.get(LockService).revoke('k2');
    const outcome = await within(running, 5_000, 'the method stops').catch(() => 'still running');
    finish();
    expect(outcome).toBe('stopped: revoked');
    for (const key of ['k1', 'k2']) {
      await eventually(async () => ((await other.get(LockService).inspect(key))?.holders.length ?? 0) === 0, 5_000, 50);
    }
  });
});
