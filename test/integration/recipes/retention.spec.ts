import { InvalidOptionError } from '../../../lib/core/errors.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { childrenOf, closeAll, connect, engine, eventually, uniquePath } from '../../support/helpers.js';
import { within } from '../../support/lock-test-helpers.js';
import type { ZkConnection } from '../../../lib/core/connection/zk-connection.js';

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
