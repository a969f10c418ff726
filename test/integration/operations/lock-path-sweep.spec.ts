// Lock paths swept as soon as they are idle (maxIdleLockPaths 0) while other engines, a semaphore
// or a raw client use the same key, on a server whose container reaper is slow (so only our sweep
// deletes paths): exclusion holds, nobody hangs, and a path we made stays ours until it is empty.
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { Semaphore } from '../../../lib/core/recipes/semaphore.js';
import { childrenOf, closeAll, connect, engine, eventually, exists, uniquePath } from '../../support/helpers.js';
import { delay, within } from '../../support/lock-test-helpers.js';
import { startStandalone, type ZkServerHandle } from '../../support/zk-server.js';

afterAll(closeAll);

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
