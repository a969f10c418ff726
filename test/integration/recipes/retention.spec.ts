import { InvalidOptionError } from '../../../lib/core/errors.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { childrenOf, closeAll, connect, engine, eventually, killSession, uniquePath, zkConnectString } from '../../support/helpers.js';
import { delay, whenAborted, within } from '../../support/lock-test-helpers.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import type { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import type { Lease } from '../../../lib/core/leases/lease.js';

afterAll(closeAll);

/** How many children the lock path has had created so far (ZooKeeper's cversion counts creates and deletes). */
async function cversionOf(observer: ZkConnection, path: string): Promise<number> {
  return (await observer.session!.exists(path))?.cversion ?? -1;
}

describe('mutex retainMs: the node is kept for the next local holder while no other process queues', () => {
  it('re-acquires without a request, with a new fencing token each time, then gives the node up after retainMs', async () => {
    const path = uniquePath('retain');
    const e = await engine();
    // Long enough for the checks below on a loaded machine (the node goes after retainMs).
    const mutex = new Mutex(e, 'hot', path, { retainMs: 5_000 });
    const observer = await connect();
    const first = await mutex.acquire();
    const node = first.path;
    await first.release();
    const before = await cversionOf(observer, path);
    const tokens = [first.fencingToken];
    for (let i = 0; i < 20; i++) {
      const lease = await mutex.acquire({ waitMs: 0 });
      expect(lease.path).toBe(node);
      tokens.push(lease.fencingToken);
      await lease.release();
    }
    expect(await cversionOf(observer, path)).toBe(before); // no create, no delete
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
    expect(await childrenOf(observer, path)).toHaveLength(1);
    await eventually(async () => (await childrenOf(observer, path)).length === 0, 15_000);
  });

  it('another process queueing ends the retention at once: it acquires long before retainMs', async () => {
    const path = uniquePath('retain');
    const [a, b] = await Promise.all([engine(), engine()]);
    const mine = new Mutex(a, 'shared', path, { retainMs: 60_000 });
    await (await mine.acquire()).release();
    await (await mine.acquire()).release(); // kept, and its watches are set by now
    const theirs = await within(new Mutex(b, 'shared', path).acquire({ waitMs: 30_000 }), 10_000, 'the other process acquires');
    // Ours waits behind it now (a new node), and gets it when it is released.
    const next = mine.acquire({ waitMs: 30_000 });
    const raced = await Promise.race([next.then(() => 'acquired'), new Promise((r) => setTimeout(() => r('waiting'), 300))]);
    expect(raced).toBe('waiting');
    await theirs.release();
    await (await within(next, 10_000, 'ours after theirs')).release();
  });

  it('shutdown gives a kept node up at once (no shutdownGraceMs wait)', async () => {
    const path = uniquePath('retain');
    const e = await engine();
    await (await new Mutex(e, 'down', path, { retainMs: 60_000 }).acquire()).release();
    const observer = await connect();
    expect(await childrenOf(observer, path)).toHaveLength(1);
    await within(e.shutdown(), 5_000, 'shutdown does not wait for a kept node');
    await eventually(async () => (await childrenOf(observer, path)).length === 0, 5_000);
  });

  it('is refused without coalescing, with a clear error', async () => {
    const e = await engine();
    expect(() => new Mutex(e, 'x', uniquePath('retain'), { retainMs: 100, coalesce: false })).toThrow(InvalidOptionError);
    expect(() => new Mutex(e, 'x', uniquePath('retain'), { retainMs: 100, revocable: true })).toThrow(InvalidOptionError);
    expect(() => new Mutex(e, 'x', uniquePath('retain'), { retainMs: -1 })).toThrow(InvalidOptionError);
  });
});

// retainMs (the mutex keeps its node for the next local holder) where it must not hand that node
// out: the kept node deleted by someone else, its session expired behind a partition, fencing
// tokens across kept-node re-grants, mutual exclusion with several processes hammering one key
// (fair and unfair), and leaseMs ending a kept node's hold.
describe('retainMs: a kept node is never handed out beside another holder', () => {
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
