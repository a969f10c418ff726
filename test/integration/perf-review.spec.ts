// Adversarial review of the #19 performance changes: retainMs, the in-flight bound, lock paths.
import { Mutex } from '../../lib/core/mutex.js';
import { Semaphore } from '../../lib/core/semaphore.js';
import type { Lease } from '../../lib/core/lease.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { childrenOf, closeAll, connect, engine, eventually, exists, killSession, uniquePath, zkConnectString } from '../support/helpers.js';
import { delay, whenAborted, within } from '../support/lock-test-helpers.js';
import { startStandalone, type ZkServerHandle } from '../support/zk-server.js';

afterAll(closeAll);

describe('in-flight bound (NativeZkSession backlog)', () => {
  it('a backlog whose requests fail synchronously (the C client refuses them) settles without recursing once per request', async () => {
    const c = await connect();
    const session = c.session!;
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown) => uncaught.push(error);
    process.on('uncaughtException', onUncaught);
    try {
      // 1000 in flight (the bound), then a backlog of requests the C client refuses at once
      // (ZBADARGUMENTS for a path without "/": the same synchronous non-zero return as
      // ZINVALIDSTATE on an expired handle).
      const inFlight = Array.from({ length: 1000 }, () => session.exists('/'));
      const refused = Array.from({ length: 30_000 }, () => session.getData('no-slash').then(() => 'ok', (e: { codeName?: string; name?: string }) => e.codeName ?? e.name));
      const outcomes = await within(Promise.allSettled([...inFlight, ...refused]), 20_000, 'every request settles');
      expect(uncaught).toEqual([]);
      const codes = new Set(outcomes.slice(1000).map((o) => (o.status === 'fulfilled' ? o.value : 'rejected')));
      expect([...codes]).toEqual(['BADARGUMENTS']);
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  }, 60_000);
});

describe('retainMs', () => {
  it('a kept node deleted by someone else is not granted to the next local caller (once the deletion is heard)', async () => {
    const path = uniquePath('rv-del');
    const e = await engine();
    const observer = await connect();
    const mutex = new Mutex(e, 'd', path, { retainMs: 30_000 });
    const first = await mutex.acquire();
    const node = first.path;
    await first.release();
    await (await mutex.acquire()).release(); // kept, watches set
    await observer.session!.delete(node);
    // Heard: ZooKeeper sends our session the deletion's event before the answer to any later request.
    await e.connection.session!.exists('/');
    const next = await mutex.acquire({ waitMs: 5000 });
    expect(next.path).not.toBe(node);
    expect(next.signal.aborted).toBe(false);
    await next.release();
  });

  it('a kept node whose session expired behind a partition: nobody holds at the same time as another process', async () => {
    const proxy = await TcpProxy.start(zkConnectString());
    try {
      const path = uniquePath('rv-exp');
      const a = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 4000 });
      const b = await engine();
      const mine = new Mutex(a, 'x', path, { retainMs: 60_000 });
      await (await mine.acquire()).release();
      await (await mine.acquire()).release(); // kept with watches
      const sessionId = a.connection.session!.id;
      const password = a.connection.session!.password;
      proxy.cut();
      await killSession(sessionId, password);
      const theirs = await within(new Mutex(b, 'x', path).acquire({ waitMs: 20_000 }), 15_000, 'b gets the lock once a is expired');
      let bHolds = true;
      // a's next acquire while b holds: must wait (a new node behind b's), not get the dead kept node.
      const aNext = mine.acquire({ waitMs: 30_000 }).then((l) => ({ l, overlap: bHolds }));
      aNext.catch(() => undefined);
      await delay(200);
      proxy.restore();
      await delay(6000);
      bHolds = false;
      await theirs.release();
      const { l, overlap } = await within(aNext, 20_000, 'a acquires after b');
      expect(overlap).toBe(false);
      expect(l.sessionId).not.toBe(sessionId);
      await l.release();
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it('fencing tokens strictly increase across kept-node re-grants, another process, and a new node', async () => {
    const path = uniquePath('rv-fence');
    const [a, b] = await Promise.all([engine(), engine()]);
    const mine = new Mutex(a, 'f', path, { retainMs: 20_000 });
    const tokens: bigint[] = [];
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 5; i++) {
        const l = await mine.acquire();
        tokens.push(l.fencingToken);
        await l.release();
      }
      const t = await new Mutex(b, 'f', path).acquire({ waitMs: 10_000 });
      tokens.push(t.fencingToken);
      await t.release();
    }
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
  });

  it('mutual exclusion: two processes with retainMs hammering one key (fair and unfair)', async () => {
    for (const fair of [true, false]) {
      const path = uniquePath('rv-hammer');
      const engines = await Promise.all([engine(), engine(), engine()]);
      let inside = 0;
      let maxInside = 0;
      let lostWhileInside = 0;
      const worker = async (m: Mutex, n: number) => {
        for (let i = 0; i < n; i++) {
          const l: Lease = await m.acquire({ waitMs: 30_000 });
          inside++;
          maxInside = Math.max(maxInside, inside);
          await delay(Math.random() < 0.5 ? 0 : 2);
          if (l.signal.aborted) lostWhileInside++;
          inside--;
          await l.release();
          if (Math.random() < 0.3) await delay(Math.random() * 5);
        }
      };
      await within(
        Promise.all(engines.flatMap((e) => [0, 1].map(() => worker(new Mutex(e, 'h', path, { retainMs: 200, fair, maxLocalHandoffs: 2 }), 40)))),
        55_000,
        'hammer',
      );
      expect({ fair, maxInside, lostWhileInside }).toEqual({ fair, maxInside: 1, lostWhileInside: 0 });
      for (const e of engines) await eventually(() => e.localQueueCount === 0, 5000);
    }
  }, 120_000);

  it('leaseMs with retention: the expired holder hands back; the next local caller gets a new token', async () => {
    const path = uniquePath('rv-lease');
    const e = await engine();
    const mutex = new Mutex(e, 'l', path, { retainMs: 10_000, leaseMs: 200 });
    const first = await mutex.acquire();
    const reason = await whenAborted(first.signal, 5000);
    expect(reason).toMatchObject({ reason: 'lease-expired' });
    const second = await mutex.acquire({ waitMs: 0 });
    expect(second.fencingToken > first.fencingToken).toBe(true);
    await second.release();
    await first.release();
  });
});

describe('lock paths on a server whose reaper is slow', () => {
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

describe('in-flight bound: a realistic trigger', () => {
  it('a burst queued when the server says the session expired settles (no stack overflow, no hang)', async () => {
    const proxy = await TcpProxy.start(zkConnectString());
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown) => uncaught.push(error);
    process.on('uncaughtException', onUncaught);
    try {
      const c = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const session = c.session!;
      proxy.cut();
      await killSession(session.id, session.password);
      const burst = Array.from({ length: 40_000 }, () => session.exists('/').then(() => 'ok', (e: { codeName?: string }) => e.codeName ?? 'other'));
      proxy.restore();
      const outcomes = await within(Promise.all(burst), 20_000, 'every request of the burst settles');
      expect(uncaught.map(String)).toEqual([]);
      console.log([...new Set(outcomes)]);
    } finally {
      process.off('uncaughtException', onUncaught);
      await proxy.close();
    }
  }, 60_000);
});
