// Inspection (lib/core/inspect.ts) against a real ZooKeeper: holders and queues of mutexes,
// read-write locks and semaphores taken by this library, foreign nodes in Curator's layouts
// (data: a bare IP address), nodes vanishing between the listing and the reads, and the tree walk.
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { Test } from '@nestjs/testing';
import { inspectLock, inspectLocks, type LockInfo } from '../../lib/core/inspect.js';
import { InvalidOptionError } from '../../lib/core/errors.js';
import type { Lease } from '../../lib/core/leases/lease.js';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { ReadWriteLock } from '../../lib/core/recipes/read-write-lock.js';
import { Semaphore } from '../../lib/core/recipes/semaphore.js';
import type { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { CreateMode } from '../../lib/core/client/session.js';
import { LockService } from '../../lib/nest/lock.service.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { childrenOf, closeAll, connect, engine, eventually, uniquePath, zkConnectString } from '../support/helpers.js';

afterEach(closeAll);
afterAll(closeAll);

const nodeName = (lease: Lease) => lease.path.slice(lease.path.lastIndexOf('/') + 1);

/** Waits until `path` has `count` children (the waiters have queued). */
async function untilChildren(observer: ZkConnection, path: string, count: number): Promise<void> {
  await eventually(async () => (await childrenOf(observer, path)).length === count, 20_000, 20);
}

/** A node created the way Curator does (protected name, ephemeral sequential, the client's IP as data). */
async function curatorNode(connection: ZkConnection, parent: string, name: string, ip = '10.20.30.40'): Promise<string> {
  await ensure(connection, parent);
  return connection.session!.create(`${parent}/_c_${randomUUID()}-${name}`, Buffer.from(ip), CreateMode.EPHEMERAL_SEQUENTIAL);
}

async function ensure(connection: ZkConnection, path: string): Promise<void> {
  const parts = path.split('/').filter(Boolean);
  for (let i = 1; i <= parts.length; i++) {
    await connection.session!.create(`/${parts.slice(0, i).join('/')}`, Buffer.alloc(0), CreateMode.PERSISTENT).catch((error: unknown) => {
      if ((error as { codeName?: string }).codeName !== 'NODEEXISTS') throw error;
    });
  }
}

function summary(info: LockInfo | null) {
  return info && { kind: info.kind, holders: info.holders.map((c) => c.node), waiting: info.waiting.map((c) => c.node) };
}

describe('inspectLock', () => {
  it('returns null for a path that does not exist, and validates its arguments', async () => {
    const observer = await connect();
    await expect(inspectLock(observer, uniquePath('none'))).resolves.toBeNull();
    await expect(inspectLock(observer, 'relative')).rejects.toBeInstanceOf(InvalidOptionError);
    await expect(inspectLock(observer, '/x', { permits: 0 })).rejects.toBeInstanceOf(InvalidOptionError);
    await expect(inspectLocks(observer, '/x', { maxDepth: -1 })).rejects.toBeInstanceOf(InvalidOptionError);
  });

  it('mutex: the holder with its data, session and age, then the waiters in queue order', async () => {
    const path = uniquePath('inspect-mutex');
    const holderEngine = await engine({}, { app: 'tickets', instance: 'pod-a' });
    const waiterEngines = [await engine({}, { instance: 'pod-b' }), await engine({}, { instance: 'pod-c' })];
    const held = await new Mutex(holderEngine, 'm', path).acquire();
    const waits = waiterEngines.map((e) => new Mutex(e, 'm', path).acquire());
    const observer = await connect();
    await untilChildren(observer, path, 3);

    const info = (await inspectLock(observer, path))!;
    expect(info.kind).toBe('mutex');
    expect(info.path).toBe(path);
    expect(info.holders).toHaveLength(1);
    const [holder] = info.holders;
    expect(holder).toMatchObject({
      node: nodeName(held),
      path: held.path,
      mode: 'lock',
      holds: true,
      sessionId: holderEngine.connection.sessionId,
      holder: { host: hostname(), pid: process.pid, app: 'tickets', instance: 'pod-a' },
    });
    expect(holder!.sequence).toBe(Number(held.path.slice(-10)));
    expect(holder!.ageMs).toBeGreaterThanOrEqual(0);
    expect(holder!.ageMs).toBeLessThan(60_000);
    expect(holder!.createdAt).toBeInstanceOf(Date);
    expect(typeof holder!.holder.createdAt).toBe('string');

    expect(info.waiting).toHaveLength(2);
    expect(info.waiting.every((w) => !w.holds && w.mode === 'lock')).toBe(true);
    expect(info.waiting[0]!.sequence!).toBeLessThan(info.waiting[1]!.sequence!);
    expect(new Set(info.waiting.map((w) => w.holder.instance))).toEqual(new Set(['pod-b', 'pod-c']));
    expect(new Set(info.waiting.map((w) => w.sessionId))).toEqual(new Set(waiterEngines.map((e) => e.connection.sessionId)));

    // The first waiter becomes the holder once the lock is released.
    const next = info.waiting[0]!;
    await held.release();
    const first = await Promise.race(waits);
    expect(nodeName(first)).toBe(next.node);
    const after = (await inspectLock(observer, path))!;
    expect(after.holders.map((h) => h.node)).toEqual([next.node]);
    expect(after.waiting.map((w) => w.node)).toEqual([info.waiting[1]!.node]);
    await first.release();
    await (await Promise.all(waits))[1]!.release();
  });

  it('read-write: the readers holding, the writer queued behind them and the reader behind the writer', async () => {
    const path = uniquePath('inspect-rw');
    const [e1, e2, e3, e4] = await Promise.all([1, 2, 3, 4].map((i) => engine({}, { instance: `rw-${i}` })));
    const observer = await connect();
    const r1 = await new ReadWriteLock(e1!, 'rw', path).read.acquire();
    const r2 = await new ReadWriteLock(e2!, 'rw', path).read.acquire();
    const w = new ReadWriteLock(e3!, 'rw', path).write.acquire();
    await untilChildren(observer, path, 3);
    const r3 = new ReadWriteLock(e4!, 'rw', path).read.acquire();
    await untilChildren(observer, path, 4);

    const info = (await inspectLock(observer, path))!;
    expect(info.kind).toBe('read-write');
    expect(info.holders.map((h) => [h.node, h.mode])).toEqual([
      [nodeName(r1), 'read'],
      [nodeName(r2), 'read'],
    ]);
    expect(info.waiting.map((c) => [c.mode, c.holder.instance])).toEqual([
      ['write', 'rw-3'],
      ['read', 'rw-4'],
    ]);

    await r1.release();
    await r2.release();
    const writer = await w;
    const writing = (await inspectLock(observer, path))!;
    expect(writing.holders.map((h) => h.node)).toEqual([nodeName(writer)]);
    expect(writing.waiting.map((c) => c.mode)).toEqual(['read']);
    await writer.release();
    await (await r3).release();
  });

  it('read-write: a downgrade shows the writer and its reader (same sequence) both holding', async () => {
    const path = uniquePath('inspect-downgrade');
    const e = await engine();
    const other = await engine();
    const observer = await connect();
    const rw = new ReadWriteLock(e, 'rw', path);
    let queuedWriter: Promise<Lease> | undefined;
    await rw.write.withLock(async (writeLease) => {
      queuedWriter = new ReadWriteLock(other, 'rw', path).write.acquire();
      await untilChildren(observer, path, 2);
      await rw.read.withLock(async (readLease) => {
        const info = (await inspectLock(observer, path))!;
        expect(info.holders.map((h) => [h.mode, h.path])).toEqual([
          ['write', writeLease.path],
          ['read', readLease.path],
        ]);
        expect(info.holders[0]!.sequence).toBe(info.holders[1]!.sequence);
        expect(info.waiting.map((c) => c.mode)).toEqual(['write']);
      });
    });
    await (await queuedWriter!).release();
  });

  it('semaphore: the leases in use, the pending lease and the acquirers queued on the internal lock', async () => {
    const path = uniquePath('inspect-sem');
    const engines = await Promise.all([1, 2, 3, 4].map((i) => engine({}, { instance: `s-${i}` })));
    const observer = await connect();
    const sem = (i: number) => new Semaphore(engines[i]!, 'pool', path, { permits: 2 });
    const a = await sem(0).acquire();
    const b = await sem(1).acquire();
    const c = sem(2).acquire(); // creates a third lease and waits, holding the internal lock
    await untilChildren(observer, `${path}/leases`, 3);
    const d = sem(3).acquire(); // queues on the internal lock
    await untilChildren(observer, `${path}/locks`, 2);

    const info = (await inspectLock(observer, path))!;
    expect(info.kind).toBe('semaphore');
    expect(info.leases).toBe(3);
    expect(info.permits).toBeUndefined();
    expect(info.holders.map((h) => h.path)).toEqual([a.path, b.path]);
    expect(info.holders.every((h) => h.mode === 'lease' && h.holds)).toBe(true);
    expect(info.waiting.map((w) => [w.mode, w.holder.instance])).toEqual([
      ['lease', 's-3'],
      ['lock', 's-4'],
    ]);

    // With the permit count as a hint, the same answer from the count alone.
    const hinted = (await inspectLock(observer, path, { permits: 2 }))!;
    expect(hinted.permits).toBe(2);
    expect(summary(hinted)).toEqual(summary(info));

    await a.release();
    await b.release();
    await (await c).release();
    await (await d).release();
  });

  it('reads nodes created by Curator (bare IP data), with or without the protected prefix', async () => {
    const root = uniquePath('inspect-curator');
    const foreign = await connect();
    const observer = await connect();
    const lock1 = await curatorNode(foreign, `${root}/mutex`, 'lock-', '10.0.0.1');
    const lock2 = await foreign.session!.create(`${root}/mutex/lock-`, Buffer.from('10.0.0.2'), CreateMode.EPHEMERAL_SEQUENTIAL);
    const writer = await curatorNode(foreign, `${root}/rw`, '__WRIT__', '10.0.0.3');
    const reader = await curatorNode(foreign, `${root}/rw`, '__READ__', '10.0.0.4');
    const lease = await curatorNode(foreign, `${root}/sem/leases`, 'lease-', '10.0.0.5');
    await ensure(foreign, `${root}/sem/locks`);
    // A Curator client with no data at all (empty node).
    await ensure(foreign, `${root}/empty`);
    const bare = await foreign.session!.create(`${root}/empty/_c_${randomUUID()}-lock-`, Buffer.alloc(0), CreateMode.EPHEMERAL_SEQUENTIAL);

    const mutex = (await inspectLock(observer, `${root}/mutex`))!;
    expect(mutex.kind).toBe('mutex');
    expect(mutex.holders.map((h) => [h.path, h.holder])).toEqual([[lock1, { host: '10.0.0.1' }]]);
    expect(mutex.waiting.map((h) => [h.path, h.holder])).toEqual([[lock2, { host: '10.0.0.2' }]]);
    expect(mutex.holders[0]!.sessionId).toBe(foreign.sessionId);

    const rw = (await inspectLock(observer, `${root}/rw`))!;
    expect(rw.kind).toBe('read-write');
    expect(rw.holders.map((h) => [h.path, h.mode, h.holder.host])).toEqual([[writer, 'write', '10.0.0.3']]);
    expect(rw.waiting.map((h) => [h.path, h.mode, h.holder.host])).toEqual([[reader, 'read', '10.0.0.4']]);

    const sem = (await inspectLock(observer, `${root}/sem`))!;
    expect(sem.kind).toBe('semaphore');
    expect(sem.holders.map((h) => [h.path, h.holder])).toEqual([[lease, { host: '10.0.0.5' }]]);
    expect(sem.waiting).toEqual([]);

    const empty = (await inspectLock(observer, `${root}/empty`))!;
    expect(empty.holders.map((h) => [h.path, h.holder])).toEqual([[bare, {}]]);

    const all = await inspectLocks(observer, root);
    expect(all.map((l) => [l.path, l.kind])).toEqual([
      [`${root}/empty`, 'mutex'],
      [`${root}/mutex`, 'mutex'],
      [`${root}/rw`, 'read-write'],
      [`${root}/sem`, 'semaphore'],
    ]);
  });

  it('skips a node that vanishes between the listing and its read (the next in line is the holder)', async () => {
    const path = uniquePath('inspect-vanish');
    const e1 = await engine({}, { instance: 'first' });
    const e2 = await engine({}, { instance: 'second' });
    const observer = await connect();
    const first = await new Mutex(e1, 'm', path).acquire();
    const second = new Mutex(e2, 'm', path).acquire();
    await untilChildren(observer, path, 2);

    // Interleave a release between the observer's listing and its reads (real ZooKeeper, real NONODE).
    const session = observer.session!;
    const getData = session.getData.bind(session);
    let released = false;
    session.getData = async (p, watch) => {
      if (!released && p === first.path) {
        released = true;
        await first.release();
      }
      return getData(p, watch);
    };
    const info = (await inspectLock(observer, path))!;
    expect(released).toBe(true);
    expect(info.holders.map((h) => h.holder.instance)).toEqual(['second']);
    expect(info.waiting).toEqual([]);

    // Every contender gone before its read: idle.
    const lease2 = await second;
    session.getData = async (p, watch) => {
      if (p === lease2.path) await lease2.release();
      return getData(p, watch);
    };
    const idle = (await inspectLock(observer, path))!;
    expect(idle.kind).toBe('idle');
    expect(idle.holders).toEqual([]);
    session.getData = getData;
  });

  it('inspectLocks skips a lock node that vanishes between its parent listing and its own', async () => {
    const root = uniquePath('inspect-vanish-dir');
    const e = await engine();
    const observer = await connect();
    const gone = await new Mutex(e, 'a', `${root}/a`).acquire();
    const kept = await new Mutex(e, 'b', `${root}/b`).acquire();
    const session = observer.session!;
    const getChildren = session.getChildren.bind(session);
    session.getChildren = async (p, watch) => {
      if (p === `${root}/a`) {
        await gone.release();
        await e.connection.session!.delete(`${root}/a`); // the container, as the server would reap it
      }
      return getChildren(p, watch);
    };
    const all = await inspectLocks(observer, root);
    session.getChildren = getChildren;
    expect(all.map((l) => l.path)).toEqual([`${root}/b`]);
    await kept.release();
  });
});

describe('inspectLocks', () => {
  it('finds every kind of lock under a path, down to maxDepth, leaving idle ones out', async () => {
    const root = uniquePath('inspect-tree');
    const e = await engine({}, { app: 'tree' });
    const observer = await connect();
    const m = await new Mutex(e, 'm', `${root}/orders/42`).acquire();
    const r = await new ReadWriteLock(e, 'rw', `${root}/catalog`).read.acquire();
    const s = await new Semaphore(e, 's', `${root}/pool`, { permits: 3 }).acquire({ permits: 2 });
    const deep = await new Mutex(e, 'deep', `${root}/a/b/c/d/e`).acquire();
    const idle = await new Mutex(e, 'idle', `${root}/idle`).acquire();
    await idle.release(); // leaves an empty container until the server reaps it

    const all = await inspectLocks(observer, root);
    expect(all.map((l) => [l.path, l.kind, l.holders.length, l.waiting.length])).toEqual([
      [`${root}/catalog`, 'read-write', 1, 0],
      [`${root}/orders/42`, 'mutex', 1, 0],
      [`${root}/pool`, 'semaphore', 2, 0],
    ]);
    expect(all.find((l) => l.kind === 'semaphore')!.leases).toBe(2);
    expect(all[1]!.holders[0]!.holder.app).toBe('tree');

    const deeper = await inspectLocks(observer, root, { maxDepth: 5 });
    expect(deeper.map((l) => l.path)).toContain(`${root}/a/b/c/d/e`);
    // The path itself may be the lock.
    expect((await inspectLocks(observer, `${root}/orders/42`)).map((l) => l.path)).toEqual([`${root}/orders/42`]);
    // maxDepth 0: only the path itself.
    expect(await inspectLocks(observer, root, { maxDepth: 0 })).toEqual([]);
    // A missing path: nothing.
    expect(await inspectLocks(observer, `${root}/missing`)).toEqual([]);

    for (const lease of [m, r, s, deep]) await lease.release();
  });

  it('LockService.inspect: one lock by name, or everything under the base path', async () => {
    const basePath = uniquePath('inspect-service');
    const moduleRef = await Test.createTestingModule({
      imports: [ZkLockModule.forRoot({ connectString: zkConnectString(), basePath, app: 'svc', instance: 'i-1' })],
    }).compile();
    moduleRef.useLogger(false);
    const app = await moduleRef.init();
    try {
      const locks = app.get(LockService);
      expect(await locks.inspect('nothing')).toBeNull();
      await locks.withLock('report', async (lease) => {
        const one = (await locks.inspect('report'))!;
        expect(one.path).toBe(`${basePath}/report`);
        expect(one.holders.map((h) => [h.path, h.holder.app, h.holder.instance])).toEqual([[lease.path, 'svc', 'i-1']]);
        const pool = await locks.semaphore('pool', { permits: 2 }).acquire();
        const all = await locks.inspect();
        expect(all.map((l) => [l.path, l.kind])).toEqual([
          [`${basePath}/pool`, 'semaphore'],
          [`${basePath}/report`, 'mutex'],
        ]);
        expect((await locks.inspect('pool', { permits: 2 }))!.permits).toBe(2);
        await pool.release();
      });
    } finally {
      await app.close();
    }
  });
});
