import { PARENT_IDLE_MS } from '../../../lib/core/operations/container-paths.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { Semaphore } from '../../../lib/core/recipes/semaphore.js';
import { CreateMode } from '../../../lib/core/client/session.js';
import { childrenOf, closeAll, connect, engine, eventually, exists, uniquePath } from '../../support/helpers.js';
import { startStandalone, type ZkServerHandle } from '../../support/zk-server.js';
import { delay, recordCreates, within } from '../../support/lock-test-helpers.js';

afterAll(closeAll);

describe('lock paths: made with the node, deleted when idle', () => {
  it('a new lock path is made in the same round trip as the node: no create fails with NONODE first', async () => {
    const root = uniquePath('paths');
    const path = `${root}/k1`;
    const e = await engine();
    const session = e.connection.session!;
    // A lock per key under one parent: the parent exists, the key's path does not yet.
    await (await new Mutex(e, 'k0', `${root}/k0`).acquire()).release();
    const outcomes = recordCreates(session, (p) => (p === path ? 'path' : 'node'));
    const lease = await new Mutex(e, 'k1', path).acquire();
    expect(outcomes).toEqual(['path ok', 'node ok']);
    await lease.release();
  });

  it('a lock path deleted behind our back (ZooKeeper reaps empty containers) is made again with the node: its ancestors, known, are not asked for', async () => {
    const root = uniquePath('paths');
    const path = `${root}/deep/k1`;
    const e = await engine();
    const session = e.connection.session!;
    await (await new Mutex(e, 'k1', path).acquire()).release();
    // What the reaper does to an empty container (this test server's reaper may have done it already).
    await session.delete(path).catch((error: { codeName?: string }) => (error.codeName === 'NONODE' ? undefined : Promise.reject(error)));
    const outcomes = recordCreates(session, (p) => (p === path ? 'path' : p.startsWith(`${path}/`) ? 'node' : 'ancestor'));
    const lease = await new Mutex(e, 'k1', path).acquire();
    // The create that finds the path gone, then the path and the node in one round trip; no
    // create of `${root}` or `${root}/deep` (each a failed write, NODEEXISTS).
    expect(outcomes).toEqual(['node NONODE', 'path ok', 'node ok']);
    await lease.release();
  });

  it('when its ancestors went too, the next attempt makes them all', async () => {
    const root = uniquePath('paths');
    const path = `${root}/deep/k1`;
    const e = await engine();
    const session = e.connection.session!;
    await (await new Mutex(e, 'k1', path).acquire()).release();
    for (const p of [path, `${root}/deep`, root]) {
      await session.delete(p).catch((error: { codeName?: string }) => (error.codeName === 'NONODE' ? undefined : Promise.reject(error)));
    }
    const lease = await new Mutex(e, 'k1', path).acquire();
    expect(lease.isHeld).toBe(true);
    expect(lease.path.startsWith(`${path}/_c_`)).toBe(true);
    await lease.release();
  });

  describe('on a server whose container reaper is slow (checks every 10 minutes)', () => {
    let server: ZkServerHandle;
    beforeAll(async () => {
      // The test servers reap empty containers every second, which would hide our own sweep.
      server = await startStandalone({ jvmFlags: '-Dznode.container.checkIntervalMs=600000' });
    }, 60_000);
    afterAll(() => server?.stop());

    it('beyond maxIdleLockPaths the least recently used empty paths we made are deleted at once; one in use and one made by someone else stay', async () => {
      const root = uniquePath('paths');
      const e = await engine({ connectString: server.connectString }, { maxIdleLockPaths: 2 });
      const observer = await connect({ connectString: server.connectString });
      // Made by someone else (an operator, with an ACL of its own): never ours to delete.
      await observer.session!.create(root.slice(0, root.lastIndexOf('/')), Buffer.alloc(0), CreateMode.PERSISTENT).catch(() => undefined);
      await observer.session!.create(root, Buffer.alloc(0), CreateMode.PERSISTENT);
      await observer.session!.create(`${root}/theirs`, Buffer.alloc(0), CreateMode.PERSISTENT);
      await (await new Mutex(e, 'theirs', `${root}/theirs`).acquire()).release();
      const held = await new Mutex(e, 'busy', `${root}/busy`).acquire();
      for (const key of ['k1', 'k2', 'k3', 'k4']) await (await new Mutex(e, key, `${root}/${key}`).acquire()).release();
      // Four idle, two kept: k1 and k2 (the oldest) go, long before the 60 s time bound.
      await eventually(async () => !(await exists(observer, `${root}/k1`)) && !(await exists(observer, `${root}/k2`)), 10_000, 100);
      expect(await Promise.all(['k3', 'k4', 'busy', 'theirs'].map((k) => exists(observer, `${root}/${k}`)))).toEqual([true, true, true, true]);
      await held.release();
      // Gone: the next acquire makes it again.
      const again = await new Mutex(e, 'k1', `${root}/k1`).acquire();
      expect(await exists(observer, `${root}/k1`)).toBe(true);
      await again.release();
    }, 40_000);

    it(`any path we made and released goes after ${PARENT_IDLE_MS / 1000} s unused`, async () => {
      const root = uniquePath('paths');
      const e = await engine({ connectString: server.connectString });
      const observer = await connect({ connectString: server.connectString });
      await (await new Mutex(e, 'idle', `${root}/idle`).acquire()).release();
      expect(await exists(observer, `${root}/idle`)).toBe(true);
      await eventually(async () => !(await exists(observer, `${root}/idle`)), PARENT_IDLE_MS + 20_000, 500);
    }, PARENT_IDLE_MS + 40_000);
  });

  it('a released path that someone queues in again is not deleted (ZooKeeper refuses a non-empty one)', async () => {
    const root = uniquePath('paths');
    const [a, b] = await Promise.all([engine({}, { maxIdleLockPaths: 1 }), engine()]);
    const observer = await connect();
    await (await new Mutex(a, 'x', `${root}/x`).acquire()).release();
    const theirs = await new Mutex(b, 'x', `${root}/x`).acquire();
    // Other keys push it out of the kept set (maxIdleLockPaths: 1): the sweep tries, ZooKeeper refuses.
    for (const key of ['y1', 'y2']) await (await new Mutex(a, key, `${root}/${key}`).acquire()).release();
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    expect(await exists(observer, `${root}/x`)).toBe(true);
    expect(theirs.isHeld).toBe(true);
    expect(theirs.signal.aborted).toBe(false);
    await theirs.release();
  }, 30_000);
});

// Lock paths swept as soon as they are idle (maxIdleLockPaths 0) while other engines, a semaphore
// or a raw client use the same key, on a server whose container reaper is slow (so only our sweep
// deletes paths): exclusion holds, nobody hangs, and a path we made stays ours until it is empty.
describe('lock paths swept when idle (maxIdleLockPaths 0) on a server whose reaper is slow', () => {
  let server: ZkServerHandle;
  beforeAll(async () => {
    server = await startStandalone({ jvmFlags: '-Dznode.container.checkIntervalMs=600000' });
  }, 60_000);
  afterAll(() => server?.stop());

  it('engines with maxIdleLockPaths 0 sweeping one key under each other (no coalescing): exclusion, no hang', async () => {
    const root = uniquePath('sweep');
    const path = `${root}/key`;
    const engines = await Promise.all([0, 1, 2].map(() => engine({ connectString: server.connectString }, { maxIdleLockPaths: 0 })));
    let inside = 0;
    let maxInside = 0;
    const worker = async (m: Mutex, n: number) => {
      for (let i = 0; i < n; i++) {
        const l = await m.acquire({ waitMs: 30_000 });
        inside++;
        maxInside = Math.max(maxInside, inside);
        await delay(1);
        inside--;
        await l.release();
      }
    };
    await within(
      Promise.all(engines.flatMap((e) => [0, 1].map((i) => worker(new Mutex(e, 'k', path, { coalesce: i === 0, fair: i === 0 }), 30)))),
      50_000,
      'sweep hammer',
    );
    expect(maxInside).toBe(1);
  }, 70_000);

  it('a path we made stays ours after a sweep met another contender in it: deleted once it is empty again', async () => {
    const path = `${uniquePath('forgot')}/key`;
    const [a, b] = await Promise.all([0, 1].map(() => engine({ connectString: server.connectString }, { maxIdleLockPaths: 0 })));
    const observer = await connect({ connectString: server.connectString });
    const mine = new Mutex(a, 'k', path);
    const held = await mine.acquire(); // a makes the path (a container of ours)
    const theirs = new Mutex(b, 'k', path).acquire({ waitMs: 10_000 });
    await eventually(async () => (await childrenOf(observer, path)).length === 2, 10_000, 20);
    await held.release(); // a's sweep (maxIdleLockPaths 0) meets b's node: NOTEMPTY
    const bLease = await theirs;
    await delay(300);
    expect(await exists(observer, path)).toBe(true);
    await bLease.release();
    await delay(300);
    expect(await exists(observer, path)).toBe(true); // b did not make it, so b leaves it
    // a uses the key again, alone, and releases: the path is empty and a made it.
    await (await mine.acquire()).release();
    await eventually(async () => !(await exists(observer, path)), 5_000, 100);
  }, 30_000);

  it('a semaphore with maxIdleLockPaths 0 across engines: never more than permits held', async () => {
    const path = uniquePath('sem-sweep');
    const engines = await Promise.all([0, 1].map(() => engine({ connectString: server.connectString }, { maxIdleLockPaths: 0 })));
    let inside = 0;
    let maxInside = 0;
    const worker = async (s: Semaphore, n: number) => {
      for (let i = 0; i < n; i++) {
        const l = await s.acquire({ waitMs: 30_000 });
        inside++;
        maxInside = Math.max(maxInside, inside);
        await delay(Math.random() * 3);
        inside--;
        await l.release();
      }
    };
    await within(Promise.all(engines.flatMap((e) => [0, 1, 2].map(() => worker(new Semaphore(e, 's', path, { permits: 2 }), 15)))), 50_000, 'sem');
    expect(maxInside).toBeLessThanOrEqual(2);
    const observer = await connect({ connectString: server.connectString });
    expect(await childrenOf(observer, `${path}/leases`)).toEqual([]);
  }, 70_000);

  it('a raw client between its container create and its node create while we sweep: its create fails NONODE, ours never hangs', async () => {
    const root = uniquePath('raw');
    const e = await engine({ connectString: server.connectString }, { maxIdleLockPaths: 0 });
    const raw = await connect({ connectString: server.connectString });
    const s = raw.session!;
    const mutex = new Mutex(e, 'r', `${root}/k`);
    let nonode = 0;
    for (let i = 0; i < 40; i++) {
      await (await mutex.acquire({ waitMs: 10_000 })).release(); // made by us, released, swept at once
      // Curator's way: create parents as containers, then the node; retry on NONODE.
      await s.create(root, Buffer.alloc(0), 4).catch(() => undefined);
      await s.create(`${root}/k`, Buffer.alloc(0), 4).catch(() => undefined);
      const ours = mutex.acquire({ waitMs: 10_000 });
      try {
        const n = await s.create(`${root}/k/_c_x-lock-`, Buffer.alloc(0), 3);
        await s.delete(n);
      } catch (error) {
        if ((error as { codeName?: string }).codeName !== 'NONODE') throw error;
        nonode++;
      }
      await (await within(ours, 10_000, 'ours')).release();
    }
    // Informative: how often the raw peer met a swept path.
    console.log(`raw peer NONODE ${nonode}/40`);
  }, 70_000);
});
