import { PARENT_IDLE_MS } from '../../lib/core/lock-paths.js';
import { Mutex } from '../../lib/core/mutex.js';
import { CreateMode } from '../../lib/core/zk-session.js';
import { closeAll, connect, engine, eventually, exists, uniquePath } from '../support/helpers.js';
import { startStandalone, type ZkServerHandle } from '../support/zk-server.js';

afterAll(closeAll);

describe('lock paths: made with the node, deleted when idle', () => {
  it('a new lock path is made in the same round trip as the node: no create fails with NONODE first', async () => {
    const root = uniquePath('paths');
    const path = `${root}/k1`;
    const e = await engine();
    const session = e.connection.session!;
    // A lock per key under one parent: the parent exists, the key's path does not yet.
    await (await new Mutex(e, 'k0', `${root}/k0`).acquire()).release();
    const create = session.create.bind(session);
    const outcomes: string[] = [];
    session.create = (p, data, mode, acl) =>
      create(p, data, mode, acl).then(
        (made) => (outcomes.push(`${p === path ? 'path' : 'node'} ok`), made),
        (error: { codeName?: string }) => (outcomes.push(`${p === path ? 'path' : 'node'} ${error.codeName}`), Promise.reject(error)),
      );
    const lease = await new Mutex(e, 'k1', path).acquire();
    expect(outcomes).toEqual(['path ok', 'node ok']);
    await lease.release();
  });

  describe('on a server whose container reaper is slow (checks every 10 minutes)', () => {
    let server: ZkServerHandle;
    beforeAll(async () => {
      // The test servers reap empty containers every second, which would hide our own sweep.
      server = await startStandalone({ jvmFlags: '-Dznode.container.checkIntervalMs=600000' });
    }, 60_000);
    afterAll(() => server?.stop());

    it(`a path we made, released and unused for ${PARENT_IDLE_MS / 1000} s is deleted; one in use and one made by someone else stay`, async () => {
      const root = uniquePath('paths');
      const e = await engine({ connectString: server.connectString });
      const observer = await connect({ connectString: server.connectString });
      // Made by someone else (an operator, with an ACL of its own): never ours to delete.
      await observer.session!.create(root.slice(0, root.lastIndexOf('/')), Buffer.alloc(0), CreateMode.PERSISTENT).catch(() => undefined);
      await observer.session!.create(root, Buffer.alloc(0), CreateMode.PERSISTENT);
      await observer.session!.create(`${root}/theirs`, Buffer.alloc(0), CreateMode.PERSISTENT);
      const idle = new Mutex(e, 'idle', `${root}/idle`);
      await (await idle.acquire()).release();
      await (await new Mutex(e, 'theirs', `${root}/theirs`).acquire()).release();
      const held = await new Mutex(e, 'busy', `${root}/busy`).acquire();
      await eventually(async () => !(await exists(observer, `${root}/idle`)), PARENT_IDLE_MS + 15_000, 250);
      expect(await exists(observer, `${root}/busy`)).toBe(true);
      expect(await exists(observer, `${root}/theirs`)).toBe(true);
      await held.release();
      // Gone: the next acquire makes it again.
      const again = await idle.acquire();
      expect(await exists(observer, `${root}/idle`)).toBe(true);
      await again.release();
    }, PARENT_IDLE_MS + 40_000);
  });

  it('a released path that someone queues in again is not deleted (ZooKeeper refuses a non-empty one)', async () => {
    const root = uniquePath('paths');
    const [a, b] = await Promise.all([engine(), engine()]);
    const observer = await connect();
    await (await new Mutex(a, 'x', `${root}/x`).acquire()).release();
    const theirs = await new Mutex(b, 'x', `${root}/x`).acquire();
    await new Promise((resolve) => setTimeout(resolve, PARENT_IDLE_MS + 2_500));
    expect(await exists(observer, `${root}/x`)).toBe(true);
    expect(theirs.isHeld).toBe(true);
    expect(theirs.signal.aborted).toBe(false);
    await theirs.release();
  }, PARENT_IDLE_MS + 30_000);
});
