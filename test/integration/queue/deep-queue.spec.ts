// Deep queues (one session per waiter): a waiter two or more places back watches the node two
// ahead of it, lists again when that one goes (while its predecessor holds) and then holds on
// its predecessor's deletion alone. These tests show the shortcut is taken and that predecessors
// leaving without holding, or a waiting node deleted by someone else, never make two holders.
import type { Lease } from '../../../lib/core/leases/lease.js';
import type { LockEngine } from '../../../lib/core/lock-engine.js';
import type { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { childrenOf, closeAll, connect, eventually, uniquePath } from '../../support/helpers.js';
import { addedChild, contenders, notAcquired, queued, untilChildCount, untilWatching } from '../../support/lock-test-helpers.js';

afterEach(closeAll);
afterAll(closeAll);

/** Counts the listings of the queue a session makes from now on. */
function countListings(e: LockEngine): () => number {
  const session = e.connection.session!;
  const original = session.getChildren.bind(session);
  let listings = 0;
  session.getChildren = (path, watch) => (listings++, original(path, watch));
  return () => listings;
}

describe('Deep queue handoff (real ZooKeeper, one session per waiter)', () => {
  it('a waiter further back lists again while its predecessor holds, and holds on the release alone', async () => {
    const observer = await connect();
    const path = uniquePath('deep-shortcut');
    const { engines, locks } = await contenders(path, 4);
    const head = await locks[0]!.acquire();
    const a = await queued(observer, path, locks[1]!, 2);
    const before = await untilChildCount(observer, path, 2);
    const b = await queued(observer, path, locks[2]!, 3);
    const bNode = addedChild(await untilChildCount(observer, path, 3), before);
    const c = await queued(observer, path, locks[3]!, 4);
    const bListings = countListings(engines[2]!);

    await head.release();
    const aLease = await a.acquiring;
    // b lists once, while a holds: it is next now, watching a (the head) and its own node.
    await eventually(() => bListings() === 1, 20_000, 10);
    await untilWatching(aLease.path, engines[2]!.connection.sessionId!);
    await untilWatching(`${path}/${bNode}`, engines[2]!.connection.sessionId!);
    expect(b.settled()).toBe(false);

    await aLease.release();
    const bLease = await b.acquiring;
    expect(bListings()).toBe(1); // no listing between a's release and b's grant
    expect(c.settled()).toBe(false);
    await bLease.release();
    await (await c.acquiring).release();
    await untilChildCount(observer, path, 0);
  });

  it('predecessors that leave without holding: the waiters behind them hold one at a time, in order', async () => {
    const observer = await connect();
    const path = uniquePath('deep-leavers');
    const { engines, locks } = await contenders(path, 5);
    const head = await locks[0]!.acquire();
    const leaving = new AbortController();
    const p = await queued(observer, path, locks[1]!, 2, { signal: leaving.signal });
    const q = await queued(observer, path, locks[2]!, 3);
    const b = await queued(observer, path, locks[3]!, 4);
    const c = await queued(observer, path, locks[4]!, 5);

    // p (right behind the head) gives up, and q (two behind it) goes with its session, while the head holds.
    leaving.abort();
    await notAcquired(p.acquiring);
    await untilChildCount(observer, path, 4);
    await engines[2]!.connection.close();
    await notAcquired(q.acquiring);
    await untilChildCount(observer, path, 3);
    // b and c noticed (they watch the nodes two ahead of them, or list again): both watch the head now.
    await untilWatching(head.path, engines[3]!.connection.sessionId!);
    await untilWatching(head.path, engines[4]!.connection.sessionId!);
    expect(b.settled()).toBe(false);
    expect(c.settled()).toBe(false);
    expect(head.isHeld).toBe(true);

    await head.release();
    const bLease: Lease = await b.acquiring;
    expect(c.settled()).toBe(false);
    await untilWatching(bLease.path, engines[4]!.connection.sessionId!);
    expect(c.settled()).toBe(false);
    await bLease.release();
    const cLease = await c.acquiring;
    expect(bLease.isHeld).toBe(false);
    await cLease.release();
    await untilChildCount(observer, path, 0);
  });

  it('a waiting node two behind the head deleted by someone else: that waiter queues again and never holds beside the next holder', async () => {
    const observer = await connect();
    const path = uniquePath('deep-foreign-delete');
    const { engines, locks } = await contenders(path, 3);
    const head = await locks[0]!.acquire();
    const a = await queued(observer, path, locks[1]!, 2);
    const before = await untilChildCount(observer, path, 2);
    const b = await queued(observer, path, locks[2]!, 3);
    const bNode = addedChild(await untilChildCount(observer, path, 3), before);

    await observer.session!.delete(`${path}/${bNode}`);
    await untilChildCount(observer, path, 2);
    await head.release();
    const aLease = await a.acquiring;
    // b hears the head go, lists, finds its node gone and queues a new one behind a.
    await eventually(async () => {
      const now = await childrenOf(observer, path);
      return now.length === 2 && !now.includes(bNode);
    }, 20_000, 20);
    const bSession = engines[2]!.connection.sessionId!;
    await untilWatching(aLease.path, bSession);
    expect(b.settled()).toBe(false);
    expect(aLease.isHeld).toBe(true);

    await aLease.release();
    const bLease = await b.acquiring;
    expect(aLease.isHeld).toBe(false);
    await bLease.release();
    await untilChildCount(observer, path, 0);
  });
});
